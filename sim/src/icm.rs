//! ICM (§3): the firmware area, the auxiliary ICM and the device's private ICM virtual address
//! space, backed by host pages the driver donated (4 KiB granularity). Every context and MTT
//! access goes through `icm_read`/`icm_write`, so touching unmapped ICM is caught.

use std::collections::BTreeMap;

use crate::hca::Hca;
use crate::hcr::Status;

pub const PAGE: u64 = 4096;

/// Table parameters from INIT_HCA (§2.6). Bases are ICM virtual addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HcaParams {
    pub flags: u32,
    pub qpc_base: u64,
    pub log_num_qps: u8,
    pub srqc_base: u64,
    pub log_num_srqs: u8,
    pub cqc_base: u64,
    pub log_num_cqs: u8,
    pub altc_base: u64,
    pub auxc_base: u64,
    pub eqc_base: u64,
    pub log_num_eqs: u8,
    pub rdmarc_base: u64,
    pub log_rd_per_qp: u8,
    pub mc_base: u64,
    pub log_mc_entry_sz: u16,
    pub log_mc_table_sz: u8,
    pub dmpt_base: u64,
    pub log_num_mpts: u8,
    pub mtt_base: u64,
    pub cmpt_base: u64,
    pub log_uar_sz: u8,
    pub uar_page_sz: u8,
    /// Dword 0x18 (bit 31: recoverable-error events).
    pub flags2: u32,
    /// 0x58 bits 29 and 30: 64-byte EQEs and CQEs.
    pub eqe_64b: bool,
    pub cqe_64b: bool,
    /// 0x5B: EQE/CQE stride (stride capability only).
    pub eqe_cqe_stride: u8,
    /// 0x8A: EQs of SYS_EQS mode (log_num_eqs is then 0x1F).
    pub num_sys_eqs: u16,
    pub log_mc_hash_sz: u16,
    /// 0xD8: B0 (VEP) unicast steering in bit 3.
    pub uc_steering: u8,
    /// 0xF8: memory windows enabled in bit 7.
    pub mw: u8,
}

/// Where in its slot the device writes a CQE or EQE, from INIT_HCA (§2.6, §4.1, §4.2): 32-byte
/// entries, 64-byte entries with the 32-byte entry in the second half (Linux `get_eqe` and
/// mlx4_ib `get_sw_cqe` read it at +32, the owner bit at byte 63), or a stride of a cache line
/// with the entry at its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryLayout {
    /// Bytes per entry slot.
    pub stride: u64,
    /// Offset of the 32-byte entry in the slot.
    pub offset: u64,
}

impl EntryLayout {
    pub const LEGACY: EntryLayout = EntryLayout {
        stride: 32,
        offset: 0,
    };
    pub const WIDE: EntryLayout = EntryLayout {
        stride: 64,
        offset: 32,
    };
}

impl HcaParams {
    /// SYS_EQS mode: INIT_HCA's log number of EQs 0x1F with num_sys_eqs (Linux `mlx4_INIT_HCA`).
    pub fn sys_eqs(&self) -> bool {
        self.log_num_eqs == SYS_EQS_LOG_NUM_EQS
    }
    /// Entries of the EQ table.
    pub fn num_eqs(&self) -> u64 {
        if self.sys_eqs() {
            self.num_sys_eqs.into()
        } else {
            1u64 << self.log_num_eqs.min(31)
        }
    }
    fn stride_layout(log2_minus_5: u8) -> EntryLayout {
        EntryLayout {
            stride: 1 << (u32::from(log2_minus_5) + 5),
            offset: 0,
        }
    }
    pub fn eqe_layout(&self) -> EntryLayout {
        if self.eqe_cqe_stride != 0 {
            Self::stride_layout(self.eqe_cqe_stride >> 4)
        } else if self.eqe_64b {
            EntryLayout::WIDE
        } else {
            EntryLayout::LEGACY
        }
    }
    pub fn cqe_layout(&self) -> EntryLayout {
        if self.eqe_cqe_stride != 0 {
            Self::stride_layout(self.eqe_cqe_stride & 0xf)
        } else if self.cqe_64b {
            EntryLayout::WIDE
        } else {
            EntryLayout::LEGACY
        }
    }
}

/// INIT_HCA input mailbox fields (§2.6): the model's own definitions, written from
/// docs/hardware.md independently of the driver's (`drivers/mlx4/src/layouts.rs` compares
/// them). `cmd_init_hca` and the behaviour trace both use these. A table base and its log2
/// entry count share one 64-bit word (the count in the low byte).
pub mod init_hca {
    use crate::be::Field;

    pub const SIZE: usize = 0x200;
    pub const VERSION: Field = Field::whole(0x00, 1);
    pub const FLAGS: Field = Field::whole(0x14, 4);
    pub const QPC_BASE: Field = Field::bits(0x30, 8, 8, 56);
    pub const LOG_NUM_QPS: Field = Field::whole(0x37, 1);
    pub const SRQC_BASE: Field = Field::bits(0x48, 8, 8, 56);
    pub const LOG_NUM_SRQS: Field = Field::whole(0x4f, 1);
    pub const CQC_BASE: Field = Field::bits(0x50, 8, 8, 56);
    pub const LOG_NUM_CQS: Field = Field::whole(0x57, 1);
    pub const ALTC_BASE: Field = Field::whole(0x60, 8);
    pub const AUXC_BASE: Field = Field::whole(0x70, 8);
    pub const EQC_BASE: Field = Field::bits(0x80, 8, 8, 56);
    pub const LOG_NUM_EQS: Field = Field::whole(0x87, 1);
    pub const RDMARC_BASE: Field = Field::bits(0x90, 8, 8, 56);
    pub const LOG_RD_PER_QP: Field = Field::whole(0x97, 1);
    pub const MC_BASE: Field = Field::whole(0xc0, 8);
    pub const LOG_MC_ENTRY_SZ: Field = Field::whole(0xd2, 2);
    pub const LOG_MC_TABLE_SZ: Field = Field::whole(0xdb, 1);
    pub const DMPT_BASE: Field = Field::whole(0xf0, 8);
    pub const LOG_NUM_MPTS: Field = Field::whole(0xfb, 1);
    pub const MTT_BASE: Field = Field::whole(0x100, 8);
    pub const CMPT_BASE: Field = Field::whole(0x108, 8);
    pub const LOG_UAR_SZ: Field = Field::whole(0x12a, 1);
    pub const UAR_PAGE_SZ: Field = Field::whole(0x12b, 1);
    /// Bit 31: recoverable-error events.
    pub const FLAGS2: Field = Field::whole(0x18, 4);
    /// 64-byte EQEs and CQEs.
    pub const EQE_64B: Field = Field::bit(0x58, 4, 29);
    pub const CQE_64B: Field = Field::bit(0x58, 4, 30);
    pub const EQE_CQE_STRIDE: Field = Field::whole(0x5b, 1);
    pub const NUM_SYS_EQS: Field = Field::bits(0x8a, 2, 0, 12);
    pub const LOG_MC_HASH_SZ: Field = Field::whole(0xd6, 2);
    /// Bit 3: B0 (VEP) unicast steering.
    pub const UC_STEERING: Field = Field::whole(0xd8, 1);
    /// Bit 7: memory windows.
    pub const MW: Field = Field::whole(0xf8, 1);
}

/// INIT_HCA log number of EQs that selects SYS_EQS mode (Linux `mlx4_init_icm`/`INIT_HCA`).
pub const SYS_EQS_LOG_NUM_EQS: u8 = 0x1f;
/// INIT_HCA 0x18 bit 31: recoverable-error events.
pub const INIT_HCA_RECOVERABLE_ERRORS: u32 = 1 << 31;
/// INIT_HCA flags bit 3: IPoIB checksum offload; bit 6: device-managed flow steering.
pub const INIT_HCA_IPOIB_CSUM: u32 = 1 << 3;
pub const INIT_HCA_DMFS: u32 = 1 << 6;
/// INIT_HCA 0xD8 bit 3 and 0xF8 bit 7.
pub const INIT_HCA_B0_STEERING: u8 = 1 << 3;
pub const INIT_HCA_MW_ENABLE: u8 = 1 << 7;

/// INIT_HCA flag bit 0: check the port in UD address vectors (§2.6).
pub const INIT_HCA_UD_AV_PORT: u32 = 1 << 0;
/// INIT_HCA flag bit 4: flow counters enabled (Linux fw.c `mlx4_INIT_HCA`, set when
/// QUERY_DEV_CAP reports counters).
pub const INIT_HCA_COUNTERS: u32 = 1 << 4;
/// INIT_HCA flag bit 1: host is big-endian (§2.6).
pub const INIT_HCA_BIG_ENDIAN: u32 = 1 << 1;

/// Firmware lifecycle and donations.
#[derive(Clone, Debug, Default)]
pub struct FwState {
    /// FA chunks (host address, bytes) given with MAP_FA (§3.1).
    pub fa: Vec<(u64, u64)>,
    /// RUN_FW done (§1.4, §2.1).
    pub running: bool,
    /// SET_ICM_SIZE: total ICM bytes and aux pages required (§3.1).
    pub icm_size: Option<u64>,
    pub aux_required: u64,
    /// Aux chunks (host address, bytes) given with MAP_ICM_AUX.
    pub aux: Vec<(u64, u64)>,
    /// INIT_HCA parameters while the HCA is initialised.
    pub init: Option<HcaParams>,
    /// The INIT_HCA input mailbox of the last successful INIT_HCA (QUERY_HCA echoes it).
    pub init_mailbox: Vec<u8>,
    /// Every donated host range (FA, aux, ICM) and what it was donated as.
    pub donated: RangeMap<&'static str>,
}

impl FwState {
    pub fn fa_pages(&self) -> u64 {
        self.fa.iter().map(|c| c.1 / PAGE).sum()
    }
    pub fn aux_pages(&self) -> u64 {
        self.aux.iter().map(|c| c.1 / PAGE).sum()
    }
}

/// Non-overlapping ranges `[start, start + len)` with a value each; memory use is per range,
/// not per page, so a huge donation cannot exhaust the model.
#[derive(Clone, Debug, Default)]
pub struct RangeMap<V: Copy> {
    ranges: BTreeMap<u64, (u64, V)>,
}

impl<V: Copy> RangeMap<V> {
    /// The range containing `addr`: (start, len, value).
    pub fn find(&self, addr: u64) -> Option<(u64, u64, V)> {
        let (&start, &(len, v)) = self.ranges.range(..=addr).next_back()?;
        (addr - start < len).then_some((start, len, v))
    }
    /// The first range overlapping `[start, start + len)`.
    pub fn overlapping(&self, start: u64, len: u64) -> Option<(u64, u64, V)> {
        let end = start.saturating_add(len);
        if let Some(r) = self.find(start) {
            return Some(r);
        }
        let (&s, &(l, v)) = self.ranges.range(start..end).next()?;
        Some((s, l, v))
    }
    pub fn insert(&mut self, start: u64, len: u64, v: V) {
        self.ranges.insert(start, (len, v));
    }
    /// Is `[start, start + len)` fully covered?
    pub fn covers(&self, start: u64, len: u64) -> bool {
        let end = start.saturating_add(len);
        let mut cur = start;
        while cur < end {
            match self.find(cur) {
                Some((s, l, _)) => cur = s + l,
                None => return false,
            }
        }
        true
    }
    /// Remove `[start, start + len)`, splitting ranges that stick out. `at(v, d)` gives the
    /// value of a piece that starts `d` bytes into a range whose value is `v`. Returns the
    /// removed pieces as (start, len, value).
    pub fn remove(&mut self, start: u64, len: u64, at: impl Fn(V, u64) -> V) -> Vec<(u64, u64, V)> {
        let end = start.saturating_add(len);
        let mut out = Vec::new();
        while let Some((s, l, v)) = self.overlapping(start, len) {
            self.ranges.remove(&s);
            let e = s + l;
            if s < start {
                self.ranges.insert(s, (start - s, v));
            }
            if e > end {
                self.ranges.insert(end, (e - end, at(v, end - s)));
            }
            let (a, b) = (s.max(start), e.min(end));
            out.push((a, b - a, at(v, a - s)));
        }
        out
    }
    pub fn total(&self) -> u64 {
        self.ranges.values().map(|r| r.0).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

/// ICM VA -> host PA map (§3.3 model note: 4 KiB granularity; chunks are kept whole and
/// split on partial UNMAP_ICM).
#[derive(Clone, Debug, Default)]
pub struct IcmMap {
    chunks: RangeMap<u64>,
}

impl IcmMap {
    pub fn translate(&self, va: u64) -> Option<u64> {
        self.chunks.find(va).map(|(s, _, pa)| pa + (va - s))
    }
    pub fn is_mapped(&self, va: u64) -> bool {
        self.chunks.find(va).is_some()
    }
    /// Is any page of `[va, va + len)` mapped?
    pub fn any_mapped(&self, va: u64, len: u64) -> bool {
        self.chunks.overlapping(va, len).is_some()
    }
    pub fn covers(&self, va: u64, len: u64) -> bool {
        self.chunks.covers(va, len)
    }
    pub fn insert(&mut self, va: u64, pa: u64, len: u64) {
        self.chunks.insert(va, len, pa);
    }
    /// Unmap `[va, va + len)`; returns the host ranges released (pa, len).
    pub fn remove(&mut self, va: u64, len: u64) -> Vec<(u64, u64)> {
        self.chunks
            .remove(va, len, |pa, d| pa + d)
            .into_iter()
            .map(|(_, l, pa)| (pa, l))
            .collect()
    }
    pub fn mapped_pages(&self) -> u64 {
        self.chunks.total() / PAGE
    }
}

/// Which ICM table an access is for (for messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    Qpc,
    Auxc,
    Altc,
    Rdmarc,
    Cqc,
    Eqc,
    Srqc,
    Dmpt,
    Mtt,
    CmptQp,
    CmptSrq,
    CmptCq,
    CmptEq,
}

impl Hca {
    /// ICM virtual address of object `n` of `table`, from the INIT_HCA layout (§2.6, §3.2).
    pub(crate) fn icm_addr(&self, table: Table, n: u64) -> u64 {
        let Some(p) = &self.fw.init else {
            return u64::MAX;
        };
        let pr = &self.profile;
        let cmpt = |t: u64| {
            p.cmpt_base
                .wrapping_add((t * u64::from(pr.cmpt_entry_sz)) << 24)
                .wrapping_add(n.wrapping_mul(u64::from(pr.cmpt_entry_sz)))
        };
        match table {
            Table::Qpc => p
                .qpc_base
                .wrapping_add(n.wrapping_mul(u64::from(pr.qpc_entry_sz))),
            Table::Auxc => p
                .auxc_base
                .wrapping_add(n.wrapping_mul(u64::from(pr.auxc_entry_sz))),
            Table::Altc => p
                .altc_base
                .wrapping_add(n.wrapping_mul(u64::from(pr.altc_entry_sz))),
            Table::Rdmarc => p.rdmarc_base.wrapping_add(
                n.wrapping_mul(u64::from(pr.rdmarc_entry_sz)) << p.log_rd_per_qp.min(7),
            ),
            Table::Cqc => p
                .cqc_base
                .wrapping_add(n.wrapping_mul(u64::from(pr.cqc_entry_sz))),
            Table::Eqc => p
                .eqc_base
                .wrapping_add(n.wrapping_mul(u64::from(pr.eqc_entry_sz))),
            Table::Srqc => p
                .srqc_base
                .wrapping_add(n.wrapping_mul(u64::from(pr.srq_entry_sz))),
            Table::Dmpt => p
                .dmpt_base
                .wrapping_add(n.wrapping_mul(u64::from(pr.dmpt_entry_sz))),
            Table::Mtt => p
                .mtt_base
                .wrapping_add(n.wrapping_mul(u64::from(pr.mtt_entry_sz))),
            Table::CmptQp => cmpt(0),
            Table::CmptSrq => cmpt(1),
            Table::CmptCq => cmpt(2),
            Table::CmptEq => cmpt(3),
        }
    }

    /// Size of one object of `table`.
    pub(crate) fn icm_entry_size(&self, table: Table) -> u64 {
        let pr = &self.profile;
        u64::from(match table {
            Table::Qpc => pr.qpc_entry_sz,
            Table::Auxc => pr.auxc_entry_sz,
            Table::Altc => pr.altc_entry_sz,
            Table::Rdmarc => {
                let shift = self.fw.init.as_ref().map(|p| p.log_rd_per_qp).unwrap_or(0);
                return u64::from(pr.rdmarc_entry_sz) << shift;
            }
            Table::Cqc => pr.cqc_entry_sz,
            Table::Eqc => pr.eqc_entry_sz,
            Table::Srqc => pr.srq_entry_sz,
            Table::Dmpt => pr.dmpt_entry_sz,
            Table::Mtt => pr.mtt_entry_sz,
            Table::CmptQp | Table::CmptSrq | Table::CmptCq | Table::CmptEq => pr.cmpt_entry_sz,
        })
    }

    /// Check that object `n` of `table` is backed by mapped ICM (§3.3 model note: an access to
    /// an unmapped page fails with ICM error 0x0C, inferred).
    pub(crate) fn icm_require(&mut self, table: Table, n: u64, what: &str) -> Result<(), Status> {
        let va = self.icm_addr(table, n);
        let len = self.icm_entry_size(table);
        let mut page = va / PAGE;
        let last = va.saturating_add(len.max(1) - 1) / PAGE;
        while page <= last {
            if !self.icm.is_mapped(page * PAGE) {
                return Err(self.cmd_fail(
                    Status::IcmError,
                    "§3.3",
                    format!(
                        "{what}: {table:?} entry {n:#x} at ICM VA {va:#x} is not mapped (MAP_ICM)"
                    ),
                ));
            }
            page += 1;
        }
        Ok(())
    }

    /// Read ICM by virtual address (DMA through the donated pages).
    pub(crate) fn icm_read(&mut self, va: u64, buf: &mut [u8], what: &str) -> Result<(), Status> {
        let mut done = 0usize;
        while done < buf.len() {
            let a = va.wrapping_add(done as u64);
            let n = ((PAGE - a % PAGE) as usize).min(buf.len() - done);
            let Some(pa) = self.icm.translate(a) else {
                return Err(self.cmd_fail(
                    Status::IcmError,
                    "§3.3",
                    format!("{what}: ICM VA {a:#x} is not mapped"),
                ));
            };
            self.counters.icm_reads += 1;
            if self.dma_read(pa, &mut buf[done..done + n], what).is_err() {
                return Err(Status::IcmError);
            }
            done += n;
        }
        Ok(())
    }

    /// Write ICM by virtual address.
    pub(crate) fn icm_write(&mut self, va: u64, data: &[u8], what: &str) -> Result<(), Status> {
        let mut done = 0usize;
        while done < data.len() {
            let a = va.wrapping_add(done as u64);
            let n = ((PAGE - a % PAGE) as usize).min(data.len() - done);
            let Some(pa) = self.icm.translate(a) else {
                return Err(self.cmd_fail(
                    Status::IcmError,
                    "§3.3",
                    format!("{what}: ICM VA {a:#x} is not mapped"),
                ));
            };
            self.counters.icm_writes += 1;
            if self.dma_write(pa, &data[done..done + n], what).is_err() {
                return Err(Status::IcmError);
            }
            done += n;
        }
        Ok(())
    }

    /// Read MTT entry `index` from ICM and return the page address (§4.6): 8 bytes BE, page
    /// address | present bit 0. Linux writes these directly into ICM, so they are read at use.
    pub(crate) fn read_mtt(
        &mut self,
        index: u64,
        page_shift: u32,
        what: &str,
    ) -> Result<u64, Status> {
        let mut e = [0u8; 8];
        let va = self.icm_addr(Table::Mtt, index);
        self.icm_read(va, &mut e, what)?;
        let v = crate::mr::mtt::ENTRY.get(&e);
        if !crate::mr::mtt::PRESENT.get_bool(&e) {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.6",
                format!("{what}: MTT entry {index:#x} ({v:#x}) lacks the present bit"),
            ));
        }
        let addr = v & !1;
        let page_mask = (1u64 << page_shift.min(63)) - 1;
        if addr & page_mask != 0 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.6",
                format!("{what}: MTT entry {index:#x} address {addr:#x} is not aligned to the {}-byte page", 1u64 << page_shift.min(63)),
            ));
        }
        Ok(addr)
    }

    /// Translate byte `off` of a buffer described by MTT entries starting at `mtt_base_index`
    /// with pages of `1 << page_shift` bytes (§4.6).
    pub(crate) fn mtt_translate(
        &mut self,
        mtt_base_index: u64,
        page_shift: u32,
        off: u64,
        what: &str,
    ) -> Result<u64, Status> {
        let page_shift = page_shift.min(40);
        let page = off >> page_shift;
        let pa = self.read_mtt(mtt_base_index.wrapping_add(page), page_shift, what)?;
        Ok(pa + (off & ((1u64 << page_shift) - 1)))
    }

    /// DMA read of `buf.len()` bytes at byte `off` of an MTT-described buffer (may span pages).
    pub(crate) fn mtt_read(
        &mut self,
        mtt_base_index: u64,
        page_shift: u32,
        off: u64,
        buf: &mut [u8],
        what: &str,
    ) -> Result<(), Status> {
        let psz = 1u64 << page_shift.min(40);
        let mut done = 0usize;
        while done < buf.len() {
            let o = off + done as u64;
            let n = ((psz - o % psz) as usize).min(buf.len() - done);
            let pa = self.mtt_translate(mtt_base_index, page_shift, o, what)?;
            self.dma_read(pa, &mut buf[done..done + n], what)
                .map_err(|_| Status::InternalErr)?;
            done += n;
        }
        Ok(())
    }

    /// Read an MTT-described buffer for a check, uncounted and without recording faults
    /// (`Hca::peek_host`); false if any part cannot be read.
    pub(crate) fn mtt_peek(
        &self,
        mtt_base_index: u64,
        page_shift: u32,
        off: u64,
        buf: &mut [u8],
    ) -> bool {
        let page_shift = page_shift.min(40);
        let psz = 1u64 << page_shift;
        let mut done = 0usize;
        while done < buf.len() {
            let o = off + done as u64;
            let n = ((psz - o % psz) as usize).min(buf.len() - done);
            let va = self.icm_addr(Table::Mtt, mtt_base_index.wrapping_add(o >> page_shift));
            let mut e = [0u8; 8];
            let Some(pa) = self.icm.translate(va) else {
                return false;
            };
            if !self.peek_host(pa, &mut e) || !crate::mr::mtt::PRESENT.get_bool(&e) {
                return false;
            }
            let page = crate::mr::mtt::ENTRY.get(&e) & !(psz - 1);
            if !self.peek_host(page + (o & (psz - 1)), &mut buf[done..done + n]) {
                return false;
            }
            done += n;
        }
        true
    }

    /// DMA write into an MTT-described buffer.
    pub(crate) fn mtt_write(
        &mut self,
        mtt_base_index: u64,
        page_shift: u32,
        off: u64,
        data: &[u8],
        what: &str,
    ) -> Result<(), Status> {
        let psz = 1u64 << page_shift.min(40);
        let mut done = 0usize;
        while done < data.len() {
            let o = off + done as u64;
            let n = ((psz - o % psz) as usize).min(data.len() - done);
            let pa = self.mtt_translate(mtt_base_index, page_shift, o, what)?;
            self.dma_write(pa, &data[done..done + n], what)
                .map_err(|_| Status::InternalErr)?;
            done += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn icm_map_translates_splits_and_reports_coverage() {
        let mut m = IcmMap::default();
        m.insert(0x10000, 0x8000_0000, 0x4000);
        assert_eq!(m.translate(0x11234), Some(0x8000_1234));
        assert!(m.translate(0x14000).is_none());
        assert!(m.covers(0x10000, 0x4000));
        assert!(!m.covers(0x10000, 0x5000));
        assert!(m.any_mapped(0xf000, 0x2000));
        let freed = m.remove(0x11000, 0x1000);
        assert_eq!(freed, vec![(0x8000_1000, 0x1000)]);
        assert_eq!(
            m.translate(0x12000),
            Some(0x8000_2000),
            "right part keeps its PA"
        );
        assert_eq!(m.translate(0x10fff), Some(0x8000_0fff));
        assert!(!m.is_mapped(0x11000));
        assert_eq!(m.mapped_pages(), 3);
    }
}
