//! Firmware-level commands: QUERY_FW, MAP_FA, UNMAP_FA, RUN_FW, QUERY_DEV_CAP, QUERY_ADAPTER,
//! MOD_STAT_CFG, NOP (§1.5, §2.3, §2.4).

use crate::be::{BeRead, BeWrite};
use crate::hca::Hca;
use crate::hcr::{CmdResult, Command, Status};
use crate::icm::PAGE;
use crate::regs;

impl Hca {
    /// QUERY_FW (0x004): output mailbox per §1.5.
    pub(crate) fn cmd_query_fw(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        let p = &self.profile;
        let mut b = vec![0u8; 0x100];
        // §1.5: bytes 0..1 fw_pages; the u64 at 0x00 carries the version in bits 47:32
        // (major), 31:16 (subminor), 15:0 (minor).
        b.put16(0x00, p.fw_pages);
        b.put16(0x02, p.fw_major);
        b.put16(0x04, p.fw_subminor);
        b.put16(0x06, p.fw_minor);
        b.put8(0x09, 0); // PPF id
        b.put16(0x0a, p.cmd_if_rev);
        b.put8(0x0f, p.log_max_cmds);
        b.put64(0x20, regs::CLR_INT);
        b.put8(0x28, 0); // BAR0: (byte >> 6) * 2 = 0
        b.put64(0x30, regs::CATAS);
        b.put32(0x38, regs::CATAS_DWORDS);
        b.put8(0x3c, 0);
        b.put64(0x50, regs::CLOCK);
        b.put8(0x58, 0);
        self.mailbox_out(c, &b)?;
        Ok(None)
    }

    /// Parse a MAP_FA / MAP_ICM_AUX / MAP_ICM mailbox (§3.3): 16-byte entries, VA then
    /// `PA | (log2(size) - 12)`, each chunk a naturally aligned power of two >= 4 KiB.
    /// Returns (va, pa, size) triples.
    /// FA and aux pages have no ICM address: Linux's `mlx4_map_cmd` leaves their entries' VA
    /// dword 0. A non-zero one is ignored (the pages are taken) and recorded.
    pub(crate) fn note_page_va(&mut self, chunks: &[(u64, u64, u64)], what: &str) {
        if let Some((i, (va, _, _))) = chunks.iter().enumerate().find(|(_, c)| c.0 != 0) {
            self.violation(
                "§3.3",
                format!(
                    "{what}: entry {i} has VA {va:#x}; FA/aux entries carry none (Linux writes 0)"
                ),
            );
        }
    }

    pub(crate) fn parse_map_entries(
        &mut self,
        c: &Command,
        what: &str,
    ) -> Result<Vec<(u64, u64, u64)>, Status> {
        let n = c.in_mod as usize;
        if n == 0 || n > 256 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§3.3",
                format!("{what}: {n} entries (1..=256 fit in a mailbox)"),
            ));
        }
        let mb = self.mailbox_in(c, n * 16)?;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let va = mb.be64(i * 16);
            let w = mb.be64(i * 16 + 8);
            let lg = w & 0xfff;
            let pa = w & !0xfff;
            if lg > 40 {
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§3.3",
                    format!(
                        "{what}: entry {i} has chunk log {lg} (size 2^{} bytes)",
                        lg + 12
                    ),
                ));
            }
            let size = PAGE << lg;
            if pa % size != 0 {
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§3.3",
                    format!(
                        "{what}: entry {i} PA {pa:#x} is not aligned to its chunk size {size:#x}"
                    ),
                ));
            }
            if pa.checked_add(size).is_none() {
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§3.3",
                    format!("{what}: entry {i} wraps"),
                ));
            }
            out.push((va, pa, size));
        }
        Ok(out)
    }

    /// Check that no host page of `chunks` is already donated (FA, aux or ICM) or named twice.
    pub(crate) fn check_not_donated(
        &mut self,
        chunks: &[(u64, u64, u64)],
        what: &str,
    ) -> Result<(), Status> {
        for (i, &(_, pa, size)) in chunks.iter().enumerate() {
            let clash = self
                .fw
                .donated
                .overlapping(pa, size)
                .map(|(s, _, owner)| (s.max(pa), owner));
            let twice = chunks[..i]
                .iter()
                .find(|c| c.1 < pa + size && pa < c.1 + c.2)
                .map(|c| (c.1.max(pa), what));
            if let Some((p, owner)) = clash.or(twice) {
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§3.1",
                    format!("{what}: host page {p:#x} is already donated ({owner})"),
                ));
            }
        }
        Ok(())
    }

    /// MAP_FA (0xFFF): donate the firmware area before RUN_FW (§3.1, §3.3).
    pub(crate) fn cmd_map_fa(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        if self.fw.running {
            return Err(self.cmd_fail(Status::BadSysState, "§3.1", "MAP_FA after RUN_FW"));
        }
        let chunks = self.parse_map_entries(c, "MAP_FA")?;
        self.check_not_donated(&chunks, "MAP_FA")?;
        self.note_page_va(&chunks, "MAP_FA");
        for (_, pa, size) in chunks {
            self.fw.fa.push((pa, size));
            self.fw.donated.insert(pa, size, "FA");
        }
        Ok(None)
    }

    /// UNMAP_FA (0xFFE): take the FA back; the firmware stops (§2.2).
    pub(crate) fn cmd_unmap_fa(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        if self.fw.init.is_some() {
            return Err(self.cmd_fail(
                Status::BadSysState,
                "§2.2",
                "UNMAP_FA while the HCA is initialised (CLOSE_HCA first)",
            ));
        }
        if !self.fw.aux.is_empty() || self.icm.mapped_pages() != 0 {
            self.violation(
                "§2.2",
                format!(
                    "UNMAP_FA with {} aux pages and {} ICM pages still mapped (teardown order is UNMAP_ICM, UNMAP_ICM_AUX, UNMAP_FA)",
                    self.fw.aux_pages(),
                    self.icm.mapped_pages()
                ),
            );
        }
        for (pa, size) in std::mem::take(&mut self.fw.fa) {
            self.fw.donated.remove(pa, size, |v, _| v);
        }
        self.fw.running = false;
        Ok(None)
    }

    /// RUN_FW (0xFF6): start the firmware; needs `fw_pages` FA pages (§1.5, §2.1).
    pub(crate) fn cmd_run_fw(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        if self.fw.running {
            return Err(self.cmd_fail(
                Status::BadSysState,
                "§2.1",
                "RUN_FW while the firmware already runs",
            ));
        }
        let need = u64::from(self.profile.fw_pages);
        if self.fw.fa_pages() < need {
            return Err(self.cmd_fail(
                Status::IcmError,
                "§1.5",
                format!(
                    "RUN_FW with {} FA pages mapped; QUERY_FW asks for {need}",
                    self.fw.fa_pages()
                ),
            ));
        }
        // The running firmware owns the FA: fill it with its "image" so a driver that reuses
        // those pages sees them change under it.
        // Only the first `fw_pages` pages are used, however much was donated.
        let pages: Vec<u64> = self
            .fw
            .fa
            .iter()
            .flat_map(|&(pa, size)| (0..size / PAGE).map(move |k| pa + k * PAGE))
            .take(need as usize)
            .collect();
        for (i, p) in pages.iter().enumerate() {
            let mut img = vec![0u8; PAGE as usize];
            for (j, chunk) in img.chunks_mut(8).enumerate() {
                chunk.copy_from_slice(
                    &(0x4657_0000_0000_0000u64 | ((i as u64) << 16) | j as u64).to_be_bytes(),
                );
            }
            self.dma_write(*p, &img, "firmware area")
                .map_err(|_| Status::InternalErr)?;
        }
        self.fw.running = true;
        Ok(None)
    }

    /// QUERY_DEV_CAP (0x003): output mailbox per §2.4.
    pub(crate) fn cmd_query_dev_cap(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        let p = self.profile.clone();
        let mut b = vec![0u8; 0x100];
        b.put8(0x10, p.log_max_srq_sz);
        b.put8(0x11, p.log_max_qp_sz);
        b.put8(0x12, p.log_rsvd_qps & 0xf);
        b.put8(0x13, p.log_max_qps & 0x1f);
        b.put8(0x14, (p.log_rsvd_srqs & 0xf) << 4);
        b.put8(0x15, p.log_max_srqs & 0x1f);
        b.put8(0x19, p.log_max_cq_sz);
        b.put8(0x1a, p.log_rsvd_cqs & 0xf);
        b.put8(0x1b, p.log_max_cqs & 0x1f);
        b.put8(0x1d, p.log_max_mpts & 0x3f);
        b.put8(0x1e, p.log_rsvd_eqs & 0xf);
        b.put8(0x1f, p.log_max_eqs & 0xf);
        b.put8(0x20, (p.log_rsvd_mtts & 0xf) << 4);
        b.put8(0x22, p.log_rsvd_mrws & 0xf);
        b.put16(0x26, 0); // no SYS_EQS: legacy EQ mode (§10.9)
        b.put8(0x29, p.log_max_rdma_depth);
        b.put8(0x2b, p.log_max_rdma_depth);
        b.put8(0x2f, p.log_max_rdma_depth);
        b.put8(0x35, p.local_ca_ack_delay & 0x1f);
        b.put8(0x36, (p.max_mtu << 4) | 0x3);
        b.put8(0x37, (p.max_vl << 4) | (p.num_ports & 0xf));
        b.put8(0x38, p.log_max_msg & 0x1f);
        b.put8(0x3b, p.log_max_gids & 0xf);
        b.put16(0x3c, 0x0fff); // static-rate support bitmap
        b.put8(0x3f, p.log_max_pkeys & 0xf);
        let flags = p.flags
            & !(crate::profile::dev_cap_flags::EQE_64B | crate::profile::dev_cap_flags::CQE_64B);
        b.put32(0x40, (flags >> 32) as u32);
        b.put32(0x44, flags as u32);
        b.put8(0x48, (p.rsvd_uars & 0xf) << 4);
        b.put8(0x49, p.log_uar_sz_mb & 0x3f);
        b.put8(0x4b, 12); // minimum page size 4 KiB
        b.put8(0x4c, if p.blueflame { 0x80 } else { 0 });
        b.put8(0x4d, p.log_bf_reg_size & 0x1f);
        b.put8(0x4e, p.log_bf_regs_per_page & 0x3f);
        b.put8(0x51, p.max_sg_sq);
        b.put16(0x52, p.max_sq_desc_sz);
        b.put8(0x55, p.max_sg_rq);
        b.put16(0x56, p.max_rq_desc_sz);
        b.put8(0x61, 8);
        b.put8(0x62, 0);
        b.put8(0x63, 13);
        b.put8(0x64, (p.rsvd_pds & 0xf) << 4);
        b.put8(0x65, p.log_max_pds & 0x3f);
        b.put8(0x66, 0);
        b.put8(0x67, 0);
        if flags & crate::profile::dev_cap_flags::COUNTERS != 0 {
            b.put32(0x68, p.max_counters);
        }
        b.put32(0x70, 0); // ext-2 flags: no SW_CQ_INIT (§10.9)
        b.put16(0x80, p.rdmarc_entry_sz);
        b.put16(0x82, p.qpc_entry_sz);
        b.put16(0x84, p.auxc_entry_sz);
        b.put16(0x86, p.altc_entry_sz);
        b.put16(0x88, p.eqc_entry_sz);
        b.put16(0x8a, p.cqc_entry_sz);
        b.put16(0x8c, p.srq_entry_sz);
        b.put16(0x8e, p.cmpt_entry_sz);
        b.put16(0x90, p.mtt_entry_sz);
        b.put16(0x92, p.dmpt_entry_sz);
        b.put32(0x94, p.bmme_flags);
        b.put32(0x98, p.reserved_lkey);
        b.put64(0xa0, p.max_icm_sz);
        self.mailbox_out(c, &b)?;
        Ok(None)
    }

    /// QUERY_ADAPTER (0x006): 0x10 inta_pin; board id at VSD (0x20) + 0xD0, each 4-byte word
    /// byte-swapped (§2.3).
    pub(crate) fn cmd_query_adapter(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        let mut b = vec![0u8; 0x100];
        b.put8(0x10, self.profile.inta_pin);
        let mut id = [0u8; 16];
        for (i, ch) in self.profile.board_id.bytes().take(16).enumerate() {
            id[i] = ch;
        }
        for w in id.chunks_mut(4) {
            w.reverse();
        }
        b.put_bytes(0x20 + 0xd0, &id);
        self.mailbox_out(c, &b)?;
        Ok(None)
    }

    /// DIAG_RPRT (0x030) with op_mod 2 (query transport and CI error counters): in_mod 0
    /// for the device, or a port number. Linux's mlx4_ib reads these counters when it
    /// registers its device (hw_counters) and fails the registration if the query fails.
    /// The model does not keep these diagnostic counters: every one reads 0. The block
    /// returned covers the offsets Linux reads (all below 0x200).
    pub(crate) fn cmd_diag_rprt(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[2])?;
        if c.in_mod as usize > self.ports.len() {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§2.3",
                format!("DIAG_RPRT for in_mod {:#x}: no such port", c.in_mod),
            ));
        }
        if self.fw.init.is_none() {
            return Err(self.cmd_fail(Status::BadSysState, "§2.1", "DIAG_RPRT before INIT_HCA"));
        }
        self.mailbox_out(c, &[0u8; 0x200])?;
        Ok(None)
    }

    /// QUERY_IF_STAT (0x054) of a flow counter: in_mod bits 7:0 the counter, bit 31 "clear
    /// after reading". Linux's `__mlx4_clear_if_stat` issues it (op_mod 0, output mailbox)
    /// for every counter it frees, so every Linux unload with counters sends it. The answer
    /// is the basic counter block (mode 0 at byte 3; RX frames/bytes at 0x08/0x10, TX at
    /// 0x18/0x20): the model does not count per counter, so all read 0.
    pub(crate) fn cmd_query_if_stat(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        let Some(init) = self.fw.init.as_ref() else {
            return Err(self.cmd_fail(
                Status::BadSysState,
                "§2.1",
                "QUERY_IF_STAT before INIT_HCA",
            ));
        };
        let enabled = init.flags & crate::icm::INIT_HCA_COUNTERS != 0;
        let idx = c.in_mod & 0xff;
        if !enabled || idx >= self.profile.max_counters || c.in_mod & 0x7fff_ff00 != 0 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§2.3",
                format!(
                    "QUERY_IF_STAT in_mod {:#x}: counters {}, {} of them",
                    c.in_mod,
                    if enabled {
                        "enabled"
                    } else {
                        "not enabled in INIT_HCA"
                    },
                    self.profile.max_counters
                ),
            ));
        }
        self.mailbox_out(c, &[0u8; 0x28])?;
        Ok(None)
    }

    /// MOD_STAT_CFG (0x034): Linux's `mlx4_init_fw` sets log_pg_sz_m = 1, log_pg_sz = 0 right
    /// after RUN_FW and aborts the load if it fails (§2.3). The model accepts exactly that (4
    /// KiB pages) and rejects other page sizes.
    ///
    /// op_mod 2 is a query Linux's `mlx4_get_phys_port_id` makes for every port before
    /// INIT_HCA (in_mod = port << 8) and logs as an error if it fails: the output mailbox
    /// carries the port's uplink GUID, high word at 0x14, low word at 0x1c. Nothing changes.
    pub(crate) fn cmd_mod_stat_cfg(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0, 2])?;
        if c.op_mod == 2 {
            let port = (c.in_mod >> 8) & 0xff;
            let Some(pi) = (port as usize)
                .checked_sub(1)
                .filter(|&i| i < self.ports.len() && c.in_mod & 0xff == 0)
            else {
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§2.3",
                    format!(
                        "MOD_STAT_CFG uplink GUID query for in_mod {:#x}: no such port",
                        c.in_mod
                    ),
                ));
            };
            let guid = self.ports[pi].port_guid;
            let mut b = vec![0u8; 0x20];
            b.put32(0x14, (guid >> 32) as u32);
            b.put32(0x1c, guid as u32);
            self.mailbox_out(c, &b)?;
            return Ok(None);
        }
        if self.fw.init.is_some() {
            return Err(self.cmd_fail(Status::BadSysState, "§2.1", "MOD_STAT_CFG after INIT_HCA"));
        }
        let mb = self.mailbox_in(c, 8)?;
        if mb.be8(0x02) != 0 && mb.be8(0x03) != 0 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§2.3",
                format!(
                    "MOD_STAT_CFG log_pg_sz {} (the model supports 4 KiB pages only)",
                    mb.be8(0x03)
                ),
            ));
        }
        Ok(None)
    }

    /// NOP (0x031): completes at once; with E = 1 the CMD EQE is the interrupt (§8).
    pub(crate) fn cmd_nop(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        Ok(None)
    }
}
