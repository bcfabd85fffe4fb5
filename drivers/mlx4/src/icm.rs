//! ICM: the profile (table sizes and bases), SET_ICM_SIZE, MAP_ICM_AUX, MAP_ICM, and direct
//! access to ICM pages for MTT entries (docs/hardware.md §3, §4.6).
//!
//! Tables are sized to what the driver is configured to use (plus the device's reserved
//! entries), and mapped in full at bring-up: there is no on-demand mapping, so object creation
//! never issues MAP_ICM. cMPT is the exception in VA size (its four regions are fixed at
//! `entry << 24` apart by the hardware), but only the entries of configured objects are mapped.

use alloc::vec::Vec;

use crate::error::Error;
use crate::fw::DevCaps;
use crate::platform::{DmaRegion, Platform};
use crate::regs::Opcode;
use crate::{Config, Hca};

/// The ICM tables (§3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    Qpc,
    Rdmarc,
    Altc,
    Auxc,
    Srqc,
    Cqc,
    Eqc,
    Dmpt,
    Cmpt,
    Mtt,
    Mcg,
}

pub const NUM_TABLES: usize = 11;

/// Placement of one table in ICM virtual address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableLayout {
    pub table: Table,
    /// ICM VA of entry 0 (naturally aligned to `size`).
    pub base: u64,
    /// VA size: a power of two ≥ 4 KiB.
    pub size: u64,
    /// Bytes per object.
    pub entry: u64,
    /// Objects (a power of two).
    pub num: u64,
}

impl TableLayout {
    pub fn log_num(&self) -> u8 {
        self.num.trailing_zeros() as u8
    }
}

/// Log2 of the cMPT region stride in entries (§3.2: region t at `base + ((t * entry) << 24)`).
pub const CMPT_SHIFT: u32 = 24;
/// Log2 of one multicast group entry (Linux default `log_mgm_entry_size` = 10).
pub const LOG_MGM_ENTRY_SIZE: u32 = 10;
/// EQ context entries in SYS_EQS mode: as many as Linux's profile gives the EQ table,
/// `min(max_eqs, MAX_MSIX)` with Linux's `MAX_MSIX` of 128.
pub const MAX_EQS_SYS: u32 = 128;

/// The complete ICM layout.
#[derive(Clone, Debug)]
pub struct Profile {
    pub tables: [TableLayout; NUM_TABLES],
    /// Total ICM VA size (what SET_ICM_SIZE is told).
    pub total: u64,
    pub log_rdmarc_per_qp: u8,
}

fn roundup_pow2(x: u64) -> u64 {
    x.max(1).next_power_of_two()
}

impl Profile {
    /// Compute the layout (Linux `mlx4_make_profile` shape): per table `num` rounded to a
    /// power of two, `size = max(num * entry, 4096)` rounded to a power of two, tables sorted
    /// by size (largest first) and packed from VA 0, so each is aligned to its own size.
    pub fn new(caps: &DevCaps, cfg: &Config) -> Result<Self, Error> {
        let cap = |want: u64, max: u32, what: &'static str| -> Result<u64, Error> {
            let n = roundup_pow2(want);
            if max != 0 && n > max as u64 {
                return Err(Error::Capability(what));
            }
            Ok(n)
        };
        let num_qp = cap(
            caps.reserved_qps as u64 + cfg.max_qps as u64,
            caps.max_qps,
            "QPs",
        )?;
        let num_srq = cap(
            caps.reserved_srqs as u64 + cfg.max_srqs as u64,
            caps.max_srqs,
            "SRQs",
        )?;
        let num_cq = cap(
            caps.reserved_cqs as u64 + cfg.max_cqs as u64,
            caps.max_cqs,
            "CQs",
        )?;
        // The driver's EQs follow the reserved ones. In SYS_EQS mode which EQs are reserved
        // is known only after INIT_HCA (QUERY_FUNC), so the table covers what Linux's
        // `mlx4_make_profile` gives it: the device's EQs, at most `MAX_EQS_SYS`.
        let num_eq = if caps.num_sys_eqs != 0 {
            roundup_pow2(u64::from(caps.max_eqs.min(MAX_EQS_SYS)))
        } else {
            cap(
                caps.reserved_eqs as u64 + u64::from(crate::eq::NUM_EQS),
                caps.max_eqs,
                "EQs",
            )?
        };
        let num_mpt = cap(
            caps.reserved_mrws as u64 + cfg.max_mrs as u64,
            caps.max_mpts,
            "MPTs",
        )?;
        let num_mtt = roundup_pow2(reserved_mtts(caps) as u64 + cfg.max_mtts as u64);
        let num_mcg = roundup_pow2(1 << cfg.log_num_mcg);
        let rd = cfg.log_rdmarc_per_qp;
        let mk = |table, entry: u64, num: u64| TableLayout {
            table,
            base: 0,
            size: roundup_pow2((num * entry).max(4096)),
            entry,
            num,
        };
        let mut t = [
            mk(Table::Qpc, caps.qpc_entry_sz as u64, num_qp),
            mk(Table::Rdmarc, (caps.rdmarc_entry_sz as u64) << rd, num_qp),
            mk(Table::Altc, caps.altc_entry_sz as u64, num_qp),
            mk(Table::Auxc, caps.auxc_entry_sz as u64, num_qp),
            mk(Table::Srqc, caps.srq_entry_sz as u64, num_srq),
            mk(Table::Cqc, caps.cqc_entry_sz as u64, num_cq),
            mk(Table::Eqc, caps.eqc_entry_sz as u64, num_eq),
            mk(Table::Dmpt, caps.dmpt_entry_sz as u64, num_mpt),
            mk(Table::Cmpt, caps.cmpt_entry_sz as u64, 4 << CMPT_SHIFT),
            mk(Table::Mtt, caps.mtt_entry_sz as u64, num_mtt),
            mk(Table::Mcg, 1 << LOG_MGM_ENTRY_SIZE, num_mcg),
        ];
        if t.iter().any(|l| l.entry == 0) {
            return Err(Error::Capability("ICM entry size 0"));
        }
        if caps.mtt_entry_sz != 8 {
            return Err(Error::Capability("MTT entry size is not 8"));
        }
        let mut order: [usize; NUM_TABLES] = core::array::from_fn(|i| i);
        order.sort_by(|&a, &b| t[b].size.cmp(&t[a].size)); // stable: ties keep table order
        let mut va = 0u64;
        for i in order {
            t[i].base = va;
            va += t[i].size;
        }
        if caps.max_icm_sz != 0 && va > caps.max_icm_sz {
            return Err(Error::Capability("ICM larger than max_icm_sz"));
        }
        Ok(Profile {
            tables: t,
            total: va,
            log_rdmarc_per_qp: rd,
        })
    }

    pub fn get(&self, t: Table) -> &TableLayout {
        &self.tables[t as usize]
    }

    /// VA ranges that are backed with host memory: every table's used objects; for cMPT, the
    /// first `num` entries of the QP, SRQ, CQ and EQ regions.
    pub fn mapped_ranges(&self) -> Vec<(u64, u64)> {
        let page = |x: u64| (x + 4095) & !4095;
        let mut v = Vec::new();
        for l in &self.tables {
            if l.table == Table::Cmpt {
                let objs = [
                    self.get(Table::Qpc).num,
                    self.get(Table::Srqc).num,
                    self.get(Table::Cqc).num,
                    self.get(Table::Eqc).num,
                ];
                for (ty, n) in objs.iter().enumerate() {
                    let base = l.base + ((ty as u64 * l.entry) << CMPT_SHIFT);
                    v.push((base, page(n * l.entry)));
                }
            } else {
                v.push((l.base, page(l.num * l.entry)));
            }
        }
        v
    }
}

/// Reserved MTTs rounded up so that they fill whole cache lines (§3.4).
pub fn reserved_mtts(caps: &DevCaps) -> u32 {
    let per_line = (64 / caps.mtt_entry_sz.max(1)).max(1);
    caps.reserved_mtts.div_ceil(per_line) * per_line
}

/// A chunk of mapped ICM: its VA and the host memory behind it.
pub(crate) struct IcmChunk {
    pub va: u64,
    pub region: DmaRegion,
}

impl<P: Platform> Hca<P> {
    /// SET_ICM_SIZE and MAP_ICM_AUX (§3.1, §2.3).
    pub(crate) fn map_icm_aux(&mut self, total: u64) -> Result<(), Error> {
        let aux_pages = self.cmd(Opcode::SET_ICM_SIZE, total, 0, 0, crate::cmd::Out::Imm)?;
        let bytes = aux_pages.max(1) * 4096;
        let mut regions = Vec::new();
        let entries = self.alloc_chunks(0, bytes, &mut regions, "ICM aux");
        self.mem.aux_bytes = regions.iter().map(|r| r.size() as u64).sum();
        self.aux = regions;
        let entries = entries?;
        self.map_pages(Opcode::MAP_ICM_AUX, &entries)?;
        self.aux_mapped = true;
        Ok(())
    }

    /// Back every used range of every table with host memory and MAP_ICM it.
    pub(crate) fn map_icm_tables(&mut self, profile: &Profile) -> Result<(), Error> {
        for (va, len) in profile.mapped_ranges() {
            let mut regions = Vec::new();
            let entries = self.alloc_chunks(va, len, &mut regions, "ICM");
            // Record before mapping so a failure part-way unmaps/frees what exists.
            let first_new = self.icm.len();
            let mut off = 0u64;
            for r in regions {
                let size = r.size() as u64;
                self.mem.icm_bytes += size;
                self.icm.push(IcmChunk {
                    va: va + off,
                    region: r,
                });
                off += size;
            }
            let entries = entries?;
            if let Err(e) = self.map_pages(Opcode::MAP_ICM, &entries) {
                // Chunks of this range were not mapped: free them without UNMAP_ICM.
                for c in self.icm.drain(first_new..) {
                    self.mem.icm_bytes -= c.region.size() as u64;
                    drop(c.region);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// UNMAP_ICM every chunk, then free them (errors are recorded, teardown goes on).
    pub(crate) fn unmap_icm_tables(&mut self) -> Result<(), Error> {
        let mut first_err = Ok(());
        while let Some(c) = self.icm.pop() {
            let pages = (c.region.size() / 4096) as u32;
            if let Err(e) = self.cmd(Opcode::UNMAP_ICM, c.va, pages, 0, crate::cmd::Out::None) {
                first_err = first_err.and(Err(e));
            }
            self.mem.icm_bytes -= c.region.size() as u64;
            drop(c.region);
        }
        first_err
    }

    /// CPU pointer to the ICM byte at `va`, if mapped.
    pub(crate) fn icm_ptr(&self, va: u64, len: usize) -> Option<*mut u8> {
        self.icm.iter().find_map(|c| {
            let end = c.va + c.region.size() as u64;
            if va >= c.va && va + len as u64 <= end {
                // SAFETY: the offset is within the region (checked above).
                Some(unsafe { c.region.as_ptr().add((va - c.va) as usize) })
            } else {
                None
            }
        })
    }

    /// Write MTT entries `first..first + pages.len()` directly into the ICM pages backing the
    /// MTT table, as Linux does (§4.6): `page_bus | present`.
    pub(crate) fn write_mtt(&mut self, first: u32, pages: &[u64]) -> Result<(), Error> {
        let base = self
            .profile
            .as_ref()
            .ok_or(Error::InvalidHandle)?
            .get(Table::Mtt)
            .base;
        for (i, &pa) in pages.iter().enumerate() {
            let va = base + (first as u64 + i as u64) * 8;
            let ptr = self
                .icm_ptr(va, 8)
                .ok_or(Error::NoResources("MTT not mapped"))?;
            let v = (pa | 1).to_be_bytes();
            // SAFETY: `ptr` points at 8 mapped bytes of an ICM chunk we own; the device reads
            // MTTs only after the owning context is handed over (ordered by wmb below).
            unsafe { core::ptr::copy_nonoverlapping(v.as_ptr(), ptr, 8) };
        }
        self.p.wmb();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn caps() -> DevCaps {
        DevCaps {
            reserved_qps: 64,
            max_qps: 1 << 17,
            reserved_srqs: 64,
            max_srqs: 1 << 16,
            reserved_cqs: 128,
            max_cqs: 1 << 16,
            reserved_eqs: 32,
            max_eqs: 512,
            max_mpts: 1 << 20,
            reserved_mrws: 16,
            reserved_mtts: 16,
            qpc_entry_sz: 256,
            rdmarc_entry_sz: 32,
            altc_entry_sz: 64,
            auxc_entry_sz: 64,
            srq_entry_sz: 64,
            cqc_entry_sz: 64,
            eqc_entry_sz: 64,
            cmpt_entry_sz: 64,
            mtt_entry_sz: 8,
            dmpt_entry_sz: 64,
            max_icm_sz: 1 << 40,
            ..Default::default()
        }
    }

    #[test]
    fn profile_packs_largest_first_with_natural_alignment() {
        let p = Profile::new(&caps(), &Config::default()).unwrap();
        let mut seen = 0u64;
        for l in &p.tables {
            assert!(l.size.is_power_of_two() && l.size >= 4096);
            assert_eq!(l.base % l.size, 0, "{:?} aligned", l.table);
            assert!(l.num.is_power_of_two());
            assert!(l.num * l.entry <= l.size);
            seen += l.size;
        }
        assert_eq!(seen, p.total);
        // No overlap: sort by base and check.
        let mut v: Vec<_> = p.tables.iter().map(|l| (l.base, l.size)).collect();
        v.sort();
        for w in v.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0);
        }
        // cMPT is the largest (4 regions of 2^24 entries) and sits at VA 0.
        assert_eq!(p.get(Table::Cmpt).base, 0);
        assert_eq!(p.get(Table::Cmpt).size, (4 * 64) << 24);
    }

    #[test]
    fn profile_counts_reserved_plus_configured() {
        let cfg = Config {
            max_qps: 100,
            max_cqs: 10,
            ..Config::default()
        };
        let p = Profile::new(&caps(), &cfg).unwrap();
        assert_eq!(p.get(Table::Qpc).num, 256); // 64 + 100 -> 256
        assert_eq!(p.get(Table::Cqc).num, 256); // 128 + 10 -> 256
        assert_eq!(p.get(Table::Eqc).num, 64); // 32 + 2 -> 64
        assert_eq!(p.get(Table::Rdmarc).entry, 32 << cfg.log_rdmarc_per_qp);
    }

    #[test]
    fn profile_rejects_more_than_the_device_has() {
        let mut c = caps();
        c.max_qps = 128;
        let cfg = Config {
            max_qps: 100,
            ..Config::default()
        };
        assert_eq!(
            Profile::new(&c, &cfg).unwrap_err(),
            Error::Capability("QPs")
        );
        let mut c = caps();
        c.max_icm_sz = 1 << 20;
        assert!(matches!(
            Profile::new(&c, &Config::default()),
            Err(Error::Capability(_))
        ));
    }

    #[test]
    fn mapped_ranges_cover_cmpt_regions_separately() {
        let p = Profile::new(&caps(), &Config::default()).unwrap();
        let r = p.mapped_ranges();
        let cmpt = p.get(Table::Cmpt);
        assert!(r.contains(&(cmpt.base, p.get(Table::Qpc).num * 64)));
        let cq_region = cmpt.base + ((2 * 64) << CMPT_SHIFT);
        assert!(r.iter().any(|&(b, _)| b == cq_region));
        for (b, l) in r {
            assert_eq!(b % 4096, 0);
            assert_eq!(l % 4096, 0);
        }
    }

    #[test]
    fn reserved_mtts_round_to_cache_lines() {
        let mut c = caps();
        c.reserved_mtts = 13;
        assert_eq!(reserved_mtts(&c), 16);
        c.reserved_mtts = 16;
        assert_eq!(reserved_mtts(&c), 16);
    }
}
