//! Firmware commands: QUERY_FW, MAP_FA/RUN_FW, QUERY_DEV_CAP, QUERY_ADAPTER, and the page-list
//! commands shared with ICM (docs/hardware.md §1.5, §2.4, §3.3).

use alloc::vec::Vec;

use crate::error::Error;
use crate::outbox;
use crate::platform::{Bar, DmaRegion, Platform};
use crate::regs::Opcode;
use crate::Hca;

/// QUERY_FW output (§1.5).
#[derive(Clone, Copy, Debug, Default)]
pub struct FwInfo {
    pub fw_pages: u32,
    pub major: u16,
    pub minor: u16,
    pub subminor: u16,
    pub cmd_if_rev: u16,
    pub log_max_cmds: u8,
    pub clr_int_base: u64,
    pub clr_int_bar: u8,
    pub catas_offset: u64,
    pub catas_size_dwords: u32,
    pub catas_bar: u8,
}

impl FwInfo {
    pub fn parse(o: &outbox::QueryFw) -> Self {
        FwInfo {
            fw_pages: u32::from(o.fw_pages.get()),
            major: o.fw_rev_major.get(),
            subminor: o.fw_rev_subminor.get(),
            minor: o.fw_rev_minor.get(),
            cmd_if_rev: o.cmd_if_rev.get(),
            log_max_cmds: o.log_max_cmds,
            clr_int_base: o.clr_int_base.get(),
            clr_int_bar: (o.clr_int_bar >> 6) * 2,
            catas_offset: o.catas_offset.get(),
            catas_size_dwords: o.catas_size.get(),
            catas_bar: (o.catas_bar >> 6) * 2,
        }
    }
}

/// Most dwords of the catastrophic error buffer the driver reads (§1.6; the size is QUERY_FW's).
pub const CATAS_MAX_DWORDS: usize = 64;

/// The catastrophic error buffer as read (§1.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CatasBuffer {
    words: [u32; CATAS_MAX_DWORDS],
    len: usize,
}

impl CatasBuffer {
    /// The dwords read, host order.
    pub fn words(&self) -> &[u32] {
        &self.words[..self.len]
    }

    /// Whether the device reports an internal error (a non-zero first dword).
    pub fn is_error(&self) -> bool {
        self.words().first().is_some_and(|&w| w != 0)
    }
}

/// QUERY_DEV_CAP output, decoded (§2.4). Counts are numbers, not logs.
#[derive(Clone, Copy, Debug, Default)]
pub struct DevCaps {
    pub max_qp_sz: u32,
    pub reserved_qps: u32,
    pub max_qps: u32,
    pub reserved_srqs: u32,
    pub max_srqs: u32,
    /// Max WQEs of an SRQ (0x10).
    pub max_srq_wqes: u32,
    pub max_cqes: u32,
    pub reserved_cqs: u32,
    pub max_cqs: u32,
    pub max_mpts: u32,
    /// Reserved EQs after the UAR rule (`max(reserved_uars * 4, fw value)`).
    pub reserved_eqs: u32,
    pub max_eqs: u32,
    pub reserved_mtts: u32,
    pub reserved_mrws: u32,
    pub num_sys_eqs: u16,
    pub log_max_rd_req: u8,
    pub log_max_rd_res: u8,
    pub local_ca_ack_delay: u8,
    pub num_ports: u8,
    pub log_max_msg: u8,
    pub flags: u64,
    pub reserved_uars: u32,
    pub uar_size: u64,
    pub min_page_sz: u64,
    pub bf: bool,
    pub bf_reg_size: u32,
    pub bf_regs_per_page: u32,
    pub max_sq_sg: u32,
    pub max_sq_desc_sz: u32,
    pub max_rq_sg: u32,
    pub max_rq_desc_sz: u32,
    pub reserved_pds: u32,
    pub max_pds: u32,
    pub rdmarc_entry_sz: u32,
    pub qpc_entry_sz: u32,
    pub auxc_entry_sz: u32,
    pub altc_entry_sz: u32,
    pub eqc_entry_sz: u32,
    pub cqc_entry_sz: u32,
    pub srq_entry_sz: u32,
    pub cmpt_entry_sz: u32,
    pub mtt_entry_sz: u32,
    pub dmpt_entry_sz: u32,
    pub bmme_flags: u32,
    pub reserved_lkey: u32,
    pub max_icm_sz: u64,
    pub ext2_flags: u32,
    /// Number of flow counters (QUERY_DEV_CAP 0x68, read only when flag bit 48 is set, as
    /// Linux's `mlx4_QUERY_DEV_CAP` does); 0 without counter support.
    pub max_counters: u32,
    /// Each port's QUERY_PORT output, read at bring-up (index = port − 1).
    pub ports: [crate::port::QueryPort; 2],
    /// Each port's uplink GUID (MOD_STAT_CFG op_mod 2), 0 if the firmware did not give it.
    pub uplink_guid: [u64; 2],
}

/// Flag bits of the 64-bit QUERY_DEV_CAP flags (§2.4).
pub mod flag {
    pub const RC: u64 = 1 << 0;
    pub const UC: u64 = 1 << 1;
    pub const UD: u64 = 1 << 2;
    pub const SRQ: u64 = 1 << 6;
    pub const ATOMIC: u64 = 1 << 18;
    pub const UD_AV_PORT: u64 = 1 << 20;
    /// Basic flow counters (Linux `MLX4_DEV_CAP_FLAG_COUNTERS`).
    pub const COUNTERS: u64 = 1 << 48;
    pub const EQE_64B: u64 = 1 << 61;
    pub const CQE_64B: u64 = 1 << 62;
}

impl DevCaps {
    pub fn parse(o: &outbox::QueryDevCap) -> Self {
        let pow = |v: u8| 1u32.checked_shl(v as u32).unwrap_or(0);
        let reserved_uars = u32::from(o.rsvd_uars >> 4);
        let fw_rsvd_eqs = pow(o.log_rsvd_eqs & 0xF);
        let flags = (u64::from(o.flags_hi.get()) << 32) | u64::from(o.flags_lo.get());
        let entry = |v: crate::be::Be16| u32::from(v.get());
        DevCaps {
            max_qp_sz: pow(o.log_max_qp_sz),
            reserved_qps: pow(o.log_rsvd_qps & 0xF),
            max_qps: pow(o.log_max_qps & 0x1F),
            reserved_srqs: pow(o.log_rsvd_srqs >> 4),
            max_srqs: pow(o.log_max_srqs & 0x1F),
            max_srq_wqes: pow(o.log_max_srq_sz),
            max_cqes: pow(o.log_max_cq_sz),
            reserved_cqs: pow(o.log_rsvd_cqs & 0xF),
            max_cqs: pow(o.log_max_cqs & 0x1F),
            max_mpts: pow(o.log_max_mpts & 0x3F),
            reserved_eqs: fw_rsvd_eqs.max(reserved_uars * 4),
            max_eqs: pow(o.log_max_eqs & 0xF),
            reserved_mtts: pow(o.log_rsvd_mtts >> 4),
            reserved_mrws: pow(o.log_rsvd_mrws & 0xF),
            num_sys_eqs: o.num_sys_eqs.get() & 0xFFF,
            log_max_rd_req: o.log_max_rd_req & 0x3F,
            log_max_rd_res: o.log_max_rd_res & 0x3F,
            local_ca_ack_delay: o.local_ca_ack_delay & 0x1F,
            num_ports: o.num_ports & 0xF,
            log_max_msg: o.log_max_msg & 0x1F,
            flags,
            reserved_uars,
            uar_size: 1u64 << (u32::from(o.uar_size & 0x3F) + 20),
            min_page_sz: 1u64 << (o.log_min_page_sz & 0x3F),
            bf: o.bf & 0x80 != 0,
            bf_reg_size: pow(o.log_bf_reg_sz & 0x1F),
            bf_regs_per_page: pow(o.log_bf_regs_per_page & 0x3F),
            max_sq_sg: u32::from(o.max_sq_sg),
            max_sq_desc_sz: entry(o.max_sq_desc_sz),
            max_rq_sg: u32::from(o.max_rq_sg),
            max_rq_desc_sz: entry(o.max_rq_desc_sz),
            reserved_pds: u32::from(o.rsvd_pds >> 4),
            max_pds: pow(o.log_max_pds & 0x3F),
            rdmarc_entry_sz: entry(o.rdmarc_entry_sz),
            qpc_entry_sz: entry(o.qpc_entry_sz),
            auxc_entry_sz: entry(o.auxc_entry_sz),
            altc_entry_sz: entry(o.altc_entry_sz),
            eqc_entry_sz: entry(o.eqc_entry_sz),
            cqc_entry_sz: entry(o.cqc_entry_sz),
            srq_entry_sz: entry(o.srq_entry_sz),
            cmpt_entry_sz: entry(o.cmpt_entry_sz),
            mtt_entry_sz: entry(o.mtt_entry_sz),
            dmpt_entry_sz: entry(o.dmpt_entry_sz),
            bmme_flags: o.bmme_flags.get(),
            reserved_lkey: o.reserved_lkey.get(),
            max_icm_sz: o.max_icm_sz.get(),
            ext2_flags: o.ext2_flags.get(),
            max_counters: if flags & flag::COUNTERS != 0 {
                o.max_counters.get()
            } else {
                0
            },
            ports: Default::default(),
            uplink_guid: [0; 2],
        }
    }

    /// Number of UAR pages in BAR2's UAR area.
    pub fn num_uars(&self) -> u32 {
        (self.uar_size / 4096) as u32
    }
}

/// QUERY_ADAPTER output (§2.3).
#[derive(Clone, Copy, Debug, Default)]
pub struct AdapterInfo {
    pub inta_pin: u8,
    pub board_id: [u8; 16],
}

impl AdapterInfo {
    pub fn parse(o: &outbox::QueryAdapter) -> Self {
        let mut board_id = [0u8; 16];
        // Each 4-byte word of the board ID is byte-swapped.
        for (dst, w) in board_id.as_chunks_mut::<4>().0.iter_mut().zip(&o.board_id) {
            *dst = w.get().to_le_bytes();
        }
        AdapterInfo {
            inta_pin: o.inta_pin,
            board_id,
        }
    }
}

/// Split `[addr, addr + len)` into naturally aligned power-of-two pieces of at most
/// `1 << max_log` bytes (§3.3: each chunk is a power of two ≥ 4 KiB, aligned to its size).
/// Returns (address, log2 size) pairs.
pub fn pow2_pieces(mut addr: u64, len: u64, max_log: u32) -> impl Iterator<Item = (u64, u32)> {
    let end = addr + len;
    core::iter::from_fn(move || {
        if addr >= end {
            return None;
        }
        let align_log = if addr == 0 { 63 } else { addr.trailing_zeros() };
        let fit_log = 63 - (end - addr).leading_zeros();
        let lg = align_log.min(fit_log).min(max_log);
        let piece = (addr, lg);
        addr += 1u64 << lg;
        Some(piece)
    })
}

/// One page-list entry of MAP_FA / MAP_ICM_AUX / MAP_ICM (§3.3).
#[derive(Clone, Copy, Debug)]
pub struct PageEntry {
    pub va: u64,
    pub pa: u64,
    pub log_size: u32,
}

/// Largest chunk the driver allocates for firmware/ICM memory (Linux MLX4_ICM_ALLOC_SIZE).
pub const CHUNK_LOG: u32 = 18;

impl<P: Platform> Hca<P> {
    /// Issue `op` with page-list mailboxes, 256 entries per command (§3.3).
    pub(crate) fn map_pages(&mut self, op: Opcode, entries: &[PageEntry]) -> Result<(), Error> {
        for batch in entries.chunks(256) {
            let b = self.cmd.inbox_clear();
            if b.len() < batch.len() * 16 {
                return Err(Error::NoMemory("command mailbox"));
            }
            // FA and aux pages have no ICM address: Linux's `mlx4_map_cmd` leaves the VA
            // dword of their entries 0 (it passes virt = -1); only MAP_ICM carries VAs.
            let with_va = !matches!(op, Opcode::MAP_FA | Opcode::MAP_ICM_AUX);
            for (i, e) in batch.iter().enumerate() {
                let o = i * 16;
                let va = if with_va { e.va } else { 0 };
                b[o..o + 8].copy_from_slice(&va.to_be_bytes());
                let pa = e.pa | (e.log_size as u64 - 12);
                b[o + 8..o + 16].copy_from_slice(&pa.to_be_bytes());
            }
            self.cmd_in(op, batch.len() as u32, 0)?;
        }
        Ok(())
    }

    /// Allocate `bytes` (a multiple of 4 KiB) of device-private memory as naturally aligned
    /// chunks of at most 256 KiB, appending the regions to `out` and returning page entries
    /// with `va` counting from `va_base`.
    pub(crate) fn alloc_chunks(
        &self,
        va_base: u64,
        bytes: u64,
        out: &mut Vec<DmaRegion>,
        what: &'static str,
    ) -> Result<Vec<PageEntry>, Error> {
        let mut entries = Vec::new();
        for (off, lg) in pow2_pieces(0, bytes, CHUNK_LOG) {
            let size = 1usize << lg;
            let r = self.p.dma_alloc(size, size).ok_or(Error::NoMemory(what))?;
            // Split again by the bus address in case the platform aligned more loosely.
            let bus = r.bus();
            out.push(r);
            for (pa, plg) in pow2_pieces(bus, size as u64, lg) {
                if plg < 12 {
                    return Err(Error::NoMemory("DMA memory not 4 KiB aligned"));
                }
                entries.push(PageEntry {
                    va: va_base + off + (pa - bus),
                    pa,
                    log_size: plg,
                });
            }
        }
        Ok(entries)
    }

    /// Read the catastrophic error buffer (§1.6) that QUERY_FW located: at most
    /// [`CATAS_MAX_DWORDS`] dwords (a longer buffer is cut there).
    pub fn read_catas(&self) -> CatasBuffer {
        let mut buf = CatasBuffer {
            words: [0; CATAS_MAX_DWORDS],
            len: (self.fw.catas_size_dwords as usize).min(CATAS_MAX_DWORDS),
        };
        let (bar, offset, _) = self.catas_location();
        let base = offset as usize;
        for (i, w) in buf.words[..buf.len].iter_mut().enumerate() {
            *w = u32::from_be(self.p.mmio_read32(bar, base + 4 * i));
        }
        buf
    }

    /// §1.6: a non-zero first dword of the catastrophic error buffer means the device had an
    /// internal error (Linux polls it every 5 s and resets the device). Reads that one dword;
    /// returns [`Error::InternalError`] with it.
    pub fn check_catas(&self) -> Result<(), Error> {
        let (bar, offset, len) = self.catas_location();
        if len == 0 {
            return Ok(());
        }
        match u32::from_be(self.p.mmio_read32(bar, offset as usize)) {
            0 => Ok(()),
            syndrome => Err(Error::InternalError { syndrome }),
        }
    }

    /// Where QUERY_FW put the catastrophic error buffer: BAR, offset and length in bytes.
    pub fn catas_location(&self) -> (Bar, u64, u64) {
        let bar = if self.fw.catas_bar == 0 {
            Bar::Dcs
        } else {
            Bar::Uar
        };
        (
            bar,
            self.fw.catas_offset,
            u64::from(self.fw.catas_size_dwords) * 4,
        )
    }

    pub(crate) fn query_fw(&mut self) -> Result<FwInfo, Error> {
        self.cmd_out(Opcode::QUERY_FW, 0, 0, 0)?;
        Ok(FwInfo::parse(self.cmd.out_view()?))
    }

    pub(crate) fn query_dev_cap(&mut self) -> Result<DevCaps, Error> {
        self.cmd_out(Opcode::QUERY_DEV_CAP, 0, 0, 0)?;
        Ok(DevCaps::parse(self.cmd.out_view()?))
    }

    pub(crate) fn query_adapter(&mut self) -> Result<AdapterInfo, Error> {
        self.cmd_out(Opcode::QUERY_ADAPTER, 0, 0, 0)?;
        Ok(AdapterInfo::parse(self.cmd.out_view()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::{FromBytes, Immutable, KnownLayout};

    /// A mailbox image viewed as a command's output.
    fn view<T: FromBytes + KnownLayout + Immutable>(b: &[u8]) -> &T {
        T::ref_from_prefix(b).expect("long enough").0
    }

    #[test]
    fn pieces_are_naturally_aligned_powers_of_two_covering_the_range() {
        for &(addr, len) in &[
            (0u64, 0x5000u64),
            (0x3000, 0x11000),
            (0x40000, 0x80000),
            (0x1000, 0x1000),
            (0x7000, 0x123000),
        ] {
            let mut next = addr;
            for (a, lg) in pow2_pieces(addr, len, CHUNK_LOG) {
                assert_eq!(a, next, "contiguous");
                assert!((12..=CHUNK_LOG).contains(&lg));
                assert_eq!(a & ((1 << lg) - 1), 0, "natural alignment");
                next = a + (1 << lg);
            }
            assert_eq!(next, addr + len);
        }
        let v: Vec<_> = pow2_pieces(0x3000, 0x5000, 18).collect();
        assert_eq!(v, [(0x3000, 12), (0x4000, 14)]);
        let v: Vec<_> = pow2_pieces(0, 0x100000, 18).count().to_be_bytes().to_vec();
        assert_eq!(v, 4usize.to_be_bytes().to_vec());
    }

    #[test]
    fn query_fw_decodes_version_and_bars() {
        let mut b = [0u8; 256];
        b[0..8].copy_from_slice(&0x0010_0002_1388_002Au64.to_be_bytes());
        b[0x0A..0x0C].copy_from_slice(&3u16.to_be_bytes());
        b[0x0F] = 4;
        b[0x20..0x28].copy_from_slice(&0x8_2000u64.to_be_bytes());
        b[0x28] = 0x40;
        let f = FwInfo::parse(view(&b));
        assert_eq!(f.fw_pages, 0x10);
        assert_eq!((f.major, f.minor, f.subminor), (2, 42, 5000));
        assert_eq!(f.cmd_if_rev, 3);
        assert_eq!(f.log_max_cmds, 4);
        assert_eq!(f.clr_int_base, 0x8_2000);
        assert_eq!(f.clr_int_bar, 2);
    }

    #[test]
    fn dev_cap_decodes_logs_counts_and_the_uar_rule() {
        let mut b = [0u8; 256];
        b[0x12] = 6; // 64 reserved QPs
        b[0x13] = 0x11;
        b[0x1E] = 2; // 4 reserved EQs from FW
        b[0x48] = 8 << 4; // 8 reserved UARs -> 32 EQs
        b[0x49] = 2; // 4 MiB UAR area
        b[0x4C] = 0x80;
        b[0x4D] = 9;
        b[0x4E] = 3;
        b[0x82..0x84].copy_from_slice(&256u16.to_be_bytes());
        b[0x98..0x9C].copy_from_slice(&0x100u32.to_be_bytes());
        b[0x44..0x48].copy_from_slice(&0x0010_0007u32.to_be_bytes());
        let c = DevCaps::parse(view(&b));
        assert_eq!(c.reserved_qps, 64);
        assert_eq!(c.max_qps, 1 << 17);
        assert_eq!(c.reserved_eqs, 32);
        assert_eq!(c.uar_size, 4 << 20);
        assert_eq!(c.num_uars(), 1024);
        assert!(c.bf);
        assert_eq!((c.bf_reg_size, c.bf_regs_per_page), (512, 8));
        assert_eq!(c.qpc_entry_sz, 256);
        assert_eq!(c.reserved_lkey, 0x100);
        assert_ne!(c.flags & flag::UD_AV_PORT, 0);
        assert_ne!(c.flags & flag::UD, 0);
    }
}
