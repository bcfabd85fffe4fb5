//! ICM (§3): the firmware area, the auxiliary ICM and the device's private ICM virtual address
//! space, backed page by page (4 KiB) with host pages the driver donated. Every context and MTT
//! access goes through `icm_read`/`icm_write`, so touching unmapped ICM is caught.

use std::collections::BTreeMap;

use crate::be::BeRead;
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
}

/// INIT_HCA flag bit 0: check the port in UD address vectors (§2.6).
pub const INIT_HCA_UD_AV_PORT: u32 = 1 << 0;
/// INIT_HCA flag bit 1: host is big-endian (§2.6).
pub const INIT_HCA_BIG_ENDIAN: u32 = 1 << 1;

/// Firmware lifecycle and donations.
#[derive(Clone, Debug, Default)]
pub struct FwState {
    /// FA pages (host addresses, one per 4 KiB) given with MAP_FA (§3.1).
    pub fa_pages: Vec<u64>,
    /// RUN_FW done (§1.4, §2.1).
    pub running: bool,
    /// SET_ICM_SIZE: total ICM bytes and aux pages required (§3.1).
    pub icm_size: Option<u64>,
    pub aux_required: u64,
    /// Aux pages (host addresses) given with MAP_ICM_AUX.
    pub aux_pages: Vec<u64>,
    /// INIT_HCA parameters while the HCA is initialised.
    pub init: Option<HcaParams>,
    /// Every donated host page (FA, aux, ICM) and what it was donated as.
    pub donated: BTreeMap<u64, &'static str>,
}

/// ICM VA -> host PA map at 4 KiB granularity (§3.3 model note).
#[derive(Clone, Debug, Default)]
pub struct IcmMap {
    pages: BTreeMap<u64, u64>,
}

impl IcmMap {
    pub fn translate(&self, va: u64) -> Option<u64> {
        self.pages.get(&(va / PAGE)).map(|pa| pa + va % PAGE)
    }
    pub fn is_mapped(&self, va: u64) -> bool {
        self.pages.contains_key(&(va / PAGE))
    }
    pub fn insert(&mut self, va_page: u64, pa: u64) -> bool {
        if self.pages.contains_key(&va_page) {
            return false;
        }
        self.pages.insert(va_page, pa);
        true
    }
    pub fn remove(&mut self, va_page: u64) -> bool {
        self.pages.remove(&va_page).is_some()
    }
    pub fn mapped_pages(&self) -> usize {
        self.pages.len()
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
        let v = e.be64(0);
        if v & 1 == 0 {
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
