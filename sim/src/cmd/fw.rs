//! Firmware-level commands: QUERY_FW, MAP_FA, UNMAP_FA, RUN_FW, QUERY_DEV_CAP, QUERY_ADAPTER,
//! MOD_STAT_CFG, NOP (§1.5, §2.3, §2.4).

use crate::be::Field;
use crate::hca::Hca;
use crate::hcr::{CmdResult, Command, Status};
use crate::icm::PAGE;
use crate::regs;

/// QUERY_DEV_CAP output mailbox fields (§2.4): the model's own definitions, written from
/// docs/hardware.md. Widths follow the decode Linux applies (`fw.c` `mlx4_QUERY_DEV_CAP`).
pub mod dev_cap {
    use crate::be::Field;

    pub const SIZE: usize = 0x100;
    pub const LOG_MAX_SRQ_SZ: Field = Field::whole(0x10, 1);
    pub const LOG_MAX_QP_SZ: Field = Field::whole(0x11, 1);
    pub const LOG_RSVD_QPS: Field = Field::bits(0x12, 1, 0, 4);
    pub const LOG_MAX_QPS: Field = Field::bits(0x13, 1, 0, 5);
    pub const LOG_RSVD_SRQS: Field = Field::bits(0x14, 1, 4, 4);
    pub const LOG_MAX_SRQS: Field = Field::bits(0x15, 1, 0, 5);
    pub const LOG_MAX_CQ_SZ: Field = Field::whole(0x19, 1);
    pub const LOG_RSVD_CQS: Field = Field::bits(0x1a, 1, 0, 4);
    pub const LOG_MAX_CQS: Field = Field::bits(0x1b, 1, 0, 5);
    pub const LOG_MAX_MPTS: Field = Field::bits(0x1d, 1, 0, 6);
    pub const LOG_RSVD_EQS: Field = Field::bits(0x1e, 1, 0, 4);
    pub const LOG_MAX_EQS: Field = Field::bits(0x1f, 1, 0, 4);
    pub const LOG_RSVD_MTTS: Field = Field::bits(0x20, 1, 4, 4);
    pub const LOG_RSVD_MRWS: Field = Field::bits(0x22, 1, 0, 4);
    pub const NUM_SYS_EQS: Field = Field::bits(0x26, 2, 0, 12);
    pub const LOG_MAX_REQ_RDMA: Field = Field::whole(0x29, 1);
    pub const LOG_MAX_RES_RDMA: Field = Field::whole(0x2b, 1);
    pub const LOG_MAX_RDMA_GLOBAL: Field = Field::whole(0x2f, 1);
    pub const LOCAL_CA_ACK_DELAY: Field = Field::bits(0x35, 1, 0, 5);
    pub const MAX_MTU: Field = Field::bits(0x36, 1, 4, 4);
    pub const MAX_PORT_WIDTH: Field = Field::bits(0x36, 1, 0, 4);
    pub const MAX_VL: Field = Field::bits(0x37, 1, 4, 4);
    pub const NUM_PORTS: Field = Field::bits(0x37, 1, 0, 4);
    pub const LOG_MAX_MSG: Field = Field::bits(0x38, 1, 0, 5);
    pub const LOG_MAX_GIDS: Field = Field::bits(0x3b, 1, 0, 4);
    pub const STAT_RATE_SUPPORT: Field = Field::whole(0x3c, 2);
    pub const LOG_MAX_PKEYS: Field = Field::bits(0x3f, 1, 0, 4);
    /// Device capability flags bits 63:32 and 31:0 (`profile::dev_cap_flags`).
    pub const FLAGS_HI: Field = Field::whole(0x40, 4);
    pub const FLAGS_LO: Field = Field::whole(0x44, 4);
    /// A count, not a log.
    pub const RSVD_UARS: Field = Field::bits(0x48, 1, 4, 4);
    pub const LOG_UAR_SZ_MB: Field = Field::bits(0x49, 1, 0, 6);
    pub const LOG_MIN_PAGE_SZ: Field = Field::whole(0x4b, 1);
    pub const BLUEFLAME: Field = Field::bit(0x4c, 1, 7);
    pub const LOG_BF_REG_SIZE: Field = Field::bits(0x4d, 1, 0, 5);
    pub const LOG_BF_REGS_PER_PAGE: Field = Field::bits(0x4e, 1, 0, 6);
    pub const MAX_SG_SQ: Field = Field::whole(0x51, 1);
    pub const MAX_SQ_DESC_SZ: Field = Field::whole(0x52, 2);
    pub const MAX_SG_RQ: Field = Field::whole(0x55, 1);
    pub const MAX_RQ_DESC_SZ: Field = Field::whole(0x56, 2);
    pub const LOG_MAX_QP_PER_MCG: Field = Field::whole(0x61, 1);
    pub const RSVD_MGMS: Field = Field::bits(0x62, 1, 0, 4);
    pub const LOG_MAX_MCGS: Field = Field::whole(0x63, 1);
    pub const RSVD_PDS: Field = Field::bits(0x64, 1, 4, 4);
    pub const LOG_MAX_PDS: Field = Field::bits(0x65, 1, 0, 6);
    pub const RSVD_XRCDS: Field = Field::bits(0x66, 1, 4, 4);
    pub const LOG_MAX_XRCDS: Field = Field::bits(0x67, 1, 0, 5);
    pub const MAX_BASIC_COUNTERS: Field = Field::whole(0x68, 4);
    pub const EXT2_FLAGS: Field = Field::whole(0x70, 4);
    /// Ext-2 flag: software initialises the CQEs (SW2HW_CQ op_mod 1).
    pub const EXT2_SW_CQ_INIT: u64 = 1 << 23;
    /// Device-managed flow steering.
    pub const FS_EN: Field = Field::bit(0x76, 1, 7);
    /// CQE and EQE strides above 64 bytes.
    pub const CQE_STRIDE: Field = Field::bit(0x7a, 1, 6);
    pub const EQE_STRIDE: Field = Field::bit(0x7a, 1, 7);
    /// CQE timestamps.
    pub const TIMESTAMP: Field = Field::bit(0x3e, 1, 7);
    /// Recoverable-error events.
    pub const RECOVERABLE_ERROR_EVENT: Field = Field::bit(0x9c, 4, 7);
    pub const RDMARC_ENTRY_SZ: Field = Field::whole(0x80, 2);
    pub const QPC_ENTRY_SZ: Field = Field::whole(0x82, 2);
    pub const AUXC_ENTRY_SZ: Field = Field::whole(0x84, 2);
    pub const ALTC_ENTRY_SZ: Field = Field::whole(0x86, 2);
    pub const EQC_ENTRY_SZ: Field = Field::whole(0x88, 2);
    pub const CQC_ENTRY_SZ: Field = Field::whole(0x8a, 2);
    pub const SRQ_ENTRY_SZ: Field = Field::whole(0x8c, 2);
    pub const CMPT_ENTRY_SZ: Field = Field::whole(0x8e, 2);
    pub const MTT_ENTRY_SZ: Field = Field::whole(0x90, 2);
    pub const DMPT_ENTRY_SZ: Field = Field::whole(0x92, 2);
    pub const BMME_FLAGS: Field = Field::whole(0x94, 4);
    pub const RESERVED_LKEY: Field = Field::whole(0x98, 4);
    pub const MAX_ICM_SZ: Field = Field::whole(0xa0, 8);

    /// Port width code the model reports (1X and 4X).
    pub const PORT_WIDTH_1X_4X: u64 = 0x3;
}

/// QUERY_FW output mailbox fields (§1.5): the model's own definitions.
pub mod query_fw {
    use crate::be::Field;

    pub const SIZE: usize = 0x100;
    /// Pages the firmware area needs, then the version: major, subminor, minor.
    pub const FW_PAGES: Field = Field::whole(0x00, 2);
    pub const FW_MAJOR: Field = Field::whole(0x02, 2);
    pub const FW_SUBMINOR: Field = Field::whole(0x04, 2);
    pub const FW_MINOR: Field = Field::whole(0x06, 2);
    pub const PPF_ID: Field = Field::whole(0x09, 1);
    pub const CMD_IF_REV: Field = Field::whole(0x0a, 2);
    pub const LOG_MAX_CMDS: Field = Field::whole(0x0f, 1);
    /// The clear-interrupt register: BAR offset and BAR (byte `>> 6`, times 2).
    pub const CLR_INT_BASE: Field = Field::whole(0x20, 8);
    pub const CLR_INT_BAR: Field = Field::whole(0x28, 1);
    /// The catastrophic-error buffer: BAR offset, size in dwords, BAR.
    pub const CATAS_OFFSET: Field = Field::whole(0x30, 8);
    pub const CATAS_SIZE: Field = Field::whole(0x38, 4);
    pub const CATAS_BAR: Field = Field::whole(0x3c, 1);
    /// The free-running clock: BAR offset, BAR.
    pub const CLOCK_OFFSET: Field = Field::whole(0x50, 8);
    pub const CLOCK_BAR: Field = Field::whole(0x58, 1);
}

/// QUERY_FUNC output mailbox (SYS_EQS devices, §2.3): the function's EQs and UARs (Linux
/// `fw.c` `mlx4_QUERY_FUNC`). Bus, device and function (bytes 0..=3) stay 0: the model is one
/// PF.
pub mod query_func {
    use crate::be::Field;

    pub const SIZE: usize = 0x10;
    pub const RSVD_EQS: Field = Field::whole(0x04, 2);
    pub const MAX_EQ: Field = Field::whole(0x06, 2);
    pub const RSVD_UARS: Field = Field::bits(0x0b, 1, 0, 4);
}

/// QUERY_ADAPTER output mailbox (§2.3).
pub mod query_adapter {
    use crate::be::Field;

    pub const SIZE: usize = 0x100;
    pub const INTA_PIN: Field = Field::whole(0x10, 1);
    /// The vendor-specific data starts at 0x20; the board id is 16 bytes at VSD + 0xD0, each
    /// 4-byte word byte-swapped.
    pub const VSD: usize = 0x20;
    pub const BOARD_ID: usize = VSD + 0xd0;
    pub const BOARD_ID_LEN: usize = 16;
}

/// MOD_STAT_CFG mailboxes (§2.3).
pub mod mod_stat_cfg {
    use crate::be::Field;

    /// op_mod 0 input: the page-size modifier flag and log2 page size − 12.
    pub const IN_SIZE: usize = 8;
    pub const PG_SZ_M: Field = Field::whole(0x02, 1);
    pub const LOG_PG_SZ: Field = Field::whole(0x03, 1);
    /// op_mod 2 output: the port's uplink GUID, high and low word.
    pub const OUT_SIZE: usize = 0x20;
    pub const GUID_HI: Field = Field::whole(0x14, 4);
    pub const GUID_LO: Field = Field::whole(0x1c, 4);
}

/// One entry of a MAP_FA / MAP_ICM_AUX / MAP_ICM mailbox (§3.3).
pub mod map_entry {
    use crate::be::Field;

    pub const SIZE: usize = 16;
    /// Most entries in one mailbox.
    pub const MAX: usize = 256;
    pub const VA: Field = Field::whole(0x00, 8);
    /// The chunk's physical address (4 KiB aligned, kept in place) and log2 of its size in
    /// 4 KiB pages.
    pub const PA: Field = Field::bits(0x08, 8, 12, 52);
    pub const LOG_CHUNK: Field = Field::bits(0x08, 8, 0, 12);
}

/// QUERY_IF_STAT in_mod: the counter index, and "clear after reading".
pub mod if_stat_in_mod {
    pub const COUNTER: u32 = 0xff;
    pub const CLEAR: u32 = 1 << 31;
    /// The basic counter block the model answers with (mode 0 at byte 3; RX frames/bytes at
    /// 0x08/0x10, TX at 0x18/0x20), all 0.
    pub const BASIC_BLOCK_SIZE: usize = 0x28;
}

/// DIAG_RPRT op_mod 2 answer: it covers the offsets Linux reads (all below 0x200).
const DIAG_RPRT_SIZE: usize = 0x200;

impl Hca {
    /// QUERY_FW (0x004): output mailbox per §1.5.
    pub(crate) fn cmd_query_fw(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        let p = &self.profile;
        let mut b = vec![0u8; query_fw::SIZE];
        use query_fw::*;
        let mut put = |f: Field, v: u64| f.set(&mut b, v);
        put(FW_PAGES, p.fw_pages.into());
        put(FW_MAJOR, p.fw_major.into());
        put(FW_SUBMINOR, p.fw_subminor.into());
        put(FW_MINOR, p.fw_minor.into());
        put(PPF_ID, 0);
        put(CMD_IF_REV, p.cmd_if_rev.into());
        put(LOG_MAX_CMDS, p.log_max_cmds.into());
        // Every register is in BAR0: (byte >> 6) * 2 = 0.
        put(CLR_INT_BASE, regs::CLR_INT);
        put(CLR_INT_BAR, 0);
        put(CATAS_OFFSET, regs::CATAS);
        put(CATAS_SIZE, regs::CATAS_DWORDS.into());
        put(CATAS_BAR, 0);
        put(CLOCK_OFFSET, regs::CLOCK);
        put(CLOCK_BAR, 0);
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
        if n == 0 || n > map_entry::MAX {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§3.3",
                format!("{what}: {n} entries (1..=256 fit in a mailbox)"),
            ));
        }
        let mb = self.mailbox_in(c, n * map_entry::SIZE)?;
        let mut out = Vec::with_capacity(n);
        for (i, e) in mb.chunks(map_entry::SIZE).enumerate() {
            let va = map_entry::VA.get(e);
            let lg = map_entry::LOG_CHUNK.get(e);
            let pa = map_entry::PA.get_in_place(e);
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
            if !pa.is_multiple_of(size) {
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
        let mut b = vec![0u8; dev_cap::SIZE];
        use dev_cap::*;
        let mut put = |f: crate::be::Field, v: u64| f.set(&mut b, v);
        put(LOG_MAX_SRQ_SZ, p.log_max_srq_sz.into());
        put(LOG_MAX_QP_SZ, p.log_max_qp_sz.into());
        put(LOG_RSVD_QPS, p.log_rsvd_qps.into());
        put(LOG_MAX_QPS, p.log_max_qps.into());
        put(LOG_RSVD_SRQS, p.log_rsvd_srqs.into());
        put(LOG_MAX_SRQS, p.log_max_srqs.into());
        put(LOG_MAX_CQ_SZ, p.log_max_cq_sz.into());
        put(LOG_RSVD_CQS, p.log_rsvd_cqs.into());
        put(LOG_MAX_CQS, p.log_max_cqs.into());
        put(LOG_MAX_MPTS, p.log_max_mpts.into());
        put(LOG_RSVD_EQS, p.log_rsvd_eqs.into());
        put(LOG_MAX_EQS, p.log_max_eqs.into());
        put(LOG_RSVD_MTTS, p.log_rsvd_mtts.into());
        put(LOG_RSVD_MRWS, p.log_rsvd_mrws.into());
        // 0: legacy EQ mode; otherwise SYS_EQS with QUERY_FUNC.
        put(NUM_SYS_EQS, p.num_sys_eqs.into());
        put(LOG_MAX_REQ_RDMA, p.log_max_req_rdma.into());
        put(LOG_MAX_RES_RDMA, p.log_max_res_rdma.into());
        put(LOG_MAX_RDMA_GLOBAL, p.log_max_rdma_global.into());
        put(LOCAL_CA_ACK_DELAY, p.local_ca_ack_delay.into());
        put(MAX_MTU, p.max_mtu.into());
        put(MAX_PORT_WIDTH, PORT_WIDTH_1X_4X);
        put(MAX_VL, p.max_vl.into());
        put(NUM_PORTS, p.num_ports.into());
        put(LOG_MAX_MSG, p.log_max_msg.into());
        put(LOG_MAX_GIDS, p.log_max_gids.into());
        put(STAT_RATE_SUPPORT, p.stat_rate_support.into());
        put(TIMESTAMP, p.caps2.timestamp.into());
        put(LOG_MAX_PKEYS, p.log_max_pkeys.into());
        let flags = p.flags;
        put(FLAGS_HI, flags >> 32);
        put(FLAGS_LO, flags & 0xffff_ffff);
        put(RSVD_UARS, p.rsvd_uars.into());
        put(LOG_UAR_SZ_MB, p.log_uar_sz_mb.into());
        put(LOG_MIN_PAGE_SZ, p.log_min_page_sz.into());
        put(BLUEFLAME, u64::from(p.blueflame));
        put(LOG_BF_REG_SIZE, p.log_bf_reg_size.into());
        put(LOG_BF_REGS_PER_PAGE, p.log_bf_regs_per_page.into());
        put(MAX_SG_SQ, p.max_sg_sq.into());
        put(MAX_SQ_DESC_SZ, p.max_sq_desc_sz.into());
        put(MAX_SG_RQ, p.max_sg_rq.into());
        put(MAX_RQ_DESC_SZ, p.max_rq_desc_sz.into());
        put(LOG_MAX_QP_PER_MCG, 8);
        put(RSVD_MGMS, 0);
        put(LOG_MAX_MCGS, 13);
        put(RSVD_PDS, p.rsvd_pds.into());
        put(LOG_MAX_PDS, p.log_max_pds.into());
        put(RSVD_XRCDS, p.rsvd_xrcds.into());
        put(LOG_MAX_XRCDS, p.log_max_xrcds.into());
        if flags & crate::profile::dev_cap_flags::COUNTERS != 0 {
            put(MAX_BASIC_COUNTERS, p.max_counters.into());
        }
        put(
            EXT2_FLAGS,
            if p.caps2.sw_cq_init {
                EXT2_SW_CQ_INIT
            } else {
                0
            },
        );
        put(FS_EN, p.caps2.flow_steering.into());
        put(CQE_STRIDE, p.caps2.cqe_stride.into());
        put(EQE_STRIDE, p.caps2.eqe_stride.into());
        put(
            RECOVERABLE_ERROR_EVENT,
            p.caps2.recoverable_error_event.into(),
        );
        put(RDMARC_ENTRY_SZ, p.rdmarc_entry_sz.into());
        put(QPC_ENTRY_SZ, p.qpc_entry_sz.into());
        put(AUXC_ENTRY_SZ, p.auxc_entry_sz.into());
        put(ALTC_ENTRY_SZ, p.altc_entry_sz.into());
        put(EQC_ENTRY_SZ, p.eqc_entry_sz.into());
        put(CQC_ENTRY_SZ, p.cqc_entry_sz.into());
        put(SRQ_ENTRY_SZ, p.srq_entry_sz.into());
        put(CMPT_ENTRY_SZ, p.cmpt_entry_sz.into());
        put(MTT_ENTRY_SZ, p.mtt_entry_sz.into());
        put(DMPT_ENTRY_SZ, p.dmpt_entry_sz.into());
        put(BMME_FLAGS, p.bmme_flags.into());
        put(RESERVED_LKEY, p.reserved_lkey.into());
        put(MAX_ICM_SZ, p.max_icm_sz);
        self.mailbox_out(c, &b)?;
        Ok(None)
    }

    /// QUERY_ADAPTER (0x006): 0x10 inta_pin; board id at VSD (0x20) + 0xD0, each 4-byte word
    /// byte-swapped (§2.3).
    pub(crate) fn cmd_query_adapter(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        use query_adapter::*;
        let mut b = vec![0u8; SIZE];
        INTA_PIN.set(&mut b, self.profile.inta_pin.into());
        let mut id = [0u8; BOARD_ID_LEN];
        for (i, ch) in self.profile.board_id.bytes().take(BOARD_ID_LEN).enumerate() {
            id[i] = ch;
        }
        for w in id.chunks_mut(4) {
            w.reverse();
        }
        b[BOARD_ID..BOARD_ID + BOARD_ID_LEN].copy_from_slice(&id);
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
        self.mailbox_out(c, &[0u8; DIAG_RPRT_SIZE])?;
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
        let idx = c.in_mod & if_stat_in_mod::COUNTER;
        let known = if_stat_in_mod::COUNTER | if_stat_in_mod::CLEAR;
        if !enabled || idx >= self.profile.max_counters || c.in_mod & !known != 0 {
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
        self.mailbox_out(c, &[0u8; if_stat_in_mod::BASIC_BLOCK_SIZE])?;
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
            let mut b = vec![0u8; mod_stat_cfg::OUT_SIZE];
            mod_stat_cfg::GUID_HI.set(&mut b, guid >> 32);
            mod_stat_cfg::GUID_LO.set(&mut b, guid & 0xffff_ffff);
            self.mailbox_out(c, &b)?;
            return Ok(None);
        }
        if self.fw.init.is_some() {
            return Err(self.cmd_fail(Status::BadSysState, "§2.1", "MOD_STAT_CFG after INIT_HCA"));
        }
        let mb = self.mailbox_in(c, mod_stat_cfg::IN_SIZE)?;
        let log_pg_sz = mod_stat_cfg::LOG_PG_SZ.get(&mb);
        if mod_stat_cfg::PG_SZ_M.get(&mb) != 0 && log_pg_sz != 0 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§2.3",
                format!("MOD_STAT_CFG log_pg_sz {log_pg_sz} (the model supports 4 KiB pages only)"),
            ));
        }
        Ok(None)
    }

    /// QUERY_FUNC (0x056), answered by a device that reports SYS_EQS (QUERY_DEV_CAP
    /// num_sys_eqs != 0; others answer 0x02 like any opcode they lack): in_mod = function
    /// (0, the PF, for a native driver); the function's EQs and reserved EQs/UARs, which
    /// Linux takes instead of QUERY_DEV_CAP's after INIT_HCA (`mlx4_query_func`).
    pub(crate) fn cmd_query_func(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        if c.in_mod != 0 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§2.3",
                format!(
                    "QUERY_FUNC for function {}: the model is one PF (function 0)",
                    c.in_mod
                ),
            ));
        }
        let p = &self.profile;
        let mut b = vec![0u8; query_func::SIZE];
        query_func::RSVD_EQS.set(&mut b, p.func_rsvd_eqs.into());
        query_func::MAX_EQ.set(&mut b, p.func_max_eqs.into());
        query_func::RSVD_UARS.set(&mut b, p.func_rsvd_uars.into());
        self.mailbox_out(c, &b)?;
        Ok(None)
    }

    /// NOP (0x031): completes at once; with E = 1 the CMD EQE is the interrupt (§8).
    pub(crate) fn cmd_nop(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        Ok(None)
    }
}
