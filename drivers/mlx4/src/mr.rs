//! Protection domains, memory regions (dMPT entries) and MTT ranges (docs/hardware.md §4.5,
//! §4.6). MTT entries are written straight into the ICM pages backing the MTT table.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec::Vec;

use crate::error::Error;
use crate::hw::{mpt, MptEntry};
use crate::platform::Platform;
use crate::regs::Opcode;
use crate::Hca;
use verbs::AccessFlags;
use zerocopy::IntoBytes;

/// A bitmap allocator of object numbers in `[first, end)`.
#[derive(Debug)]
pub struct IdAlloc {
    first: u32,
    used: Vec<bool>,
    next: usize,
}

impl IdAlloc {
    pub fn new(first: u32, end: u32) -> Self {
        IdAlloc {
            first,
            used: alloc::vec![false; end.saturating_sub(first) as usize],
            next: 0,
        }
    }
    pub fn alloc(&mut self) -> Option<u32> {
        let n = self.used.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            if !self.used[i] {
                self.used[i] = true;
                self.next = (i + 1) % n;
                return Some(self.first + i as u32);
            }
        }
        None
    }
    /// Take the specific number `id` (e.g. a well-known QPN); `Err` says why it cannot be had.
    pub fn alloc_at(&mut self, id: u32) -> Result<(), &'static str> {
        if id < self.first {
            return Err("reserved by the firmware");
        }
        match self.used.get_mut((id - self.first) as usize) {
            None => Err("outside the configured table"),
            Some(true) => Err("already in use"),
            Some(u) => {
                *u = true;
                Ok(())
            }
        }
    }
    pub fn free(&mut self, id: u32) {
        if let Some(u) = id
            .checked_sub(self.first)
            .and_then(|i| self.used.get_mut(i as usize))
        {
            *u = false;
        }
    }
    #[cfg(test)]
    pub fn in_use(&self) -> usize {
        self.used.iter().filter(|u| **u).count()
    }
}

/// MTT ranges placed as Linux places them (mr.c `mlx4_buddy_alloc`, with Debian's default
/// `log_mtts_per_seg` = 0, one entry per buddy segment): a range of `n` entries is a block of
/// `2^order` entries, `order = ⌈log2 n⌉`, aligned to its size, the lowest free block of the
/// smallest order that has one, split down as needed; a freed block merges with its free
/// buddy. The firmware's reserved entries are the first block taken (`mlx4_init_mr_table`:
/// order `fls(reserved − 1)`), so the driver's ranges start at the next block boundary.
#[derive(Debug)]
pub struct MttAlloc {
    max_order: u32,
    /// Free blocks per order, by block number (first entry >> order).
    free: Vec<BTreeSet<u32>>,
    /// Allocated blocks: first entry → order (the reserved block included).
    used: BTreeMap<u32, u32>,
    /// The reserved block's first entry and order, if any.
    reserved: Option<(u32, u32)>,
}

/// `⌈log2 n⌉` (0 for n ≤ 1): the order of the block holding `n` entries (Linux
/// `mlx4_mtt_init`).
pub fn mtt_order(n: u32) -> u32 {
    n.max(1).next_power_of_two().trailing_zeros()
}

impl MttAlloc {
    /// Entries `[0, end)` (`end` rounded down to a power of two), of which the first
    /// `reserved` belong to the firmware.
    pub fn new(reserved: u32, end: u32) -> Self {
        let mut a = MttAlloc {
            max_order: 0,
            free: Vec::new(),
            used: BTreeMap::new(),
            reserved: None,
        };
        if end == 0 {
            return a;
        }
        a.max_order = 31 - end.leading_zeros();
        a.free = (0..=a.max_order).map(|_| BTreeSet::new()).collect();
        a.free[a.max_order as usize].insert(0);
        if reserved > 0 {
            a.reserved = a.alloc(reserved).map(|at| (at, mtt_order(reserved)));
        }
        a
    }

    /// A block of at least `n` entries; its first entry.
    pub fn alloc(&mut self, n: u32) -> Option<u32> {
        let order = mtt_order(n);
        let mut o = order;
        let mut seg = loop {
            if o > self.max_order || self.free.is_empty() {
                return None;
            }
            if let Some(seg) = self.free[o as usize].pop_first() {
                break seg;
            }
            o += 1;
        };
        while o > order {
            o -= 1;
            seg <<= 1;
            self.free[o as usize].insert(seg ^ 1);
        }
        let at = seg << order;
        self.used.insert(at, order);
        Some(at)
    }

    /// Give back the block starting at `start` (unknown starts are ignored).
    pub fn free(&mut self, start: u32) {
        let Some(mut order) = self.used.remove(&start) else {
            return;
        };
        let mut seg = start >> order;
        while order < self.max_order && self.free[order as usize].remove(&(seg ^ 1)) {
            seg >>= 1;
            order += 1;
        }
        self.free[order as usize].insert(seg);
    }

    /// Entries in blocks the driver holds (the reserved block not counted).
    pub fn in_use(&self) -> u32 {
        let all: u32 = self.used.values().map(|&o| 1u32 << o).sum();
        all - self.reserved.map_or(0, |(_, o)| 1 << o)
    }

    /// Entries the driver may allocate in all.
    pub fn capacity(&self) -> u32 {
        if self.free.is_empty() {
            return 0;
        }
        (1u32 << self.max_order) - self.reserved.map_or(0, |(_, o)| 1 << o)
    }
}

/// A registered memory region.
#[derive(Clone, Copy, Debug)]
pub struct MrState {
    pub index: u32,
    pub key: u32,
    pub mtt: Option<(u32, u32)>,
}

/// Key of MPT `index` (§4.5 `hw_index_to_key` with tag 0: key = index << 8).
pub fn index_to_key(index: u32) -> u32 {
    index.rotate_left(8)
}

/// MPT index of a key (§4.5 `key_to_hw_index`).
pub fn key_to_index(key: u32) -> u32 {
    key.rotate_right(8)
}

/// MPT access flags for verbs access rights (local read always).
pub fn mpt_access(a: AccessFlags) -> u32 {
    let mut f = mpt::LOCAL_READ;
    if a.contains(AccessFlags::LOCAL_WRITE) {
        f |= mpt::LOCAL_WRITE;
    }
    if a.contains(AccessFlags::REMOTE_READ) {
        f |= mpt::REMOTE_READ;
    }
    if a.contains(AccessFlags::REMOTE_WRITE) {
        f |= mpt::REMOTE_WRITE;
    }
    if a.contains(AccessFlags::REMOTE_ATOMIC) {
        f |= mpt::ATOMIC;
    }
    f
}

/// Largest MTT page Linux uses (mlx4_ib mr.c `MLX4_MAX_MTT_SHIFT`): 2 GiB.
pub const MAX_MTT_SHIFT: u32 = 31;

/// MTT pages for a physically contiguous `[addr, addr + len)` (iova = bus address): one page
/// that covers the range if it is at most 2 GiB (`MAX_MTT_SHIFT`), else pages of the range's
/// length rounded up to a power of two (4 KiB .. 2 GiB), as many as the range touches.
/// Returns (page shift, first page, number of pages).
pub fn contiguous_mtt(addr: u64, len: u64) -> (u32, u64, u64) {
    let len = len.max(1);
    let cover = covering_page_shift(addr, len);
    let shift = if cover <= MAX_MTT_SHIFT {
        cover
    } else {
        len.checked_next_power_of_two()
            .map_or(64, u64::trailing_zeros)
            .clamp(12, MAX_MTT_SHIFT)
    };
    let last = addr.saturating_add(len - 1);
    let first = (addr >> shift) << shift;
    (shift, first, (last >> shift) - (addr >> shift) + 1)
}

/// Smallest page (log2, ≥ 12) such that `[addr, addr + len)` lies in one naturally aligned
/// page: a physically contiguous buffer then needs exactly one MTT entry.
pub fn covering_page_shift(addr: u64, len: u64) -> u32 {
    let last = addr + len.max(1) - 1;
    let diff = addr ^ last;
    let shift = if diff == 0 {
        0
    } else {
        64 - diff.leading_zeros()
    };
    shift.max(12)
}

pub(crate) struct MptParams<'a> {
    pub pd: u32,
    pub iova: u64,
    pub len: u64,
    pub access: AccessFlags,
    /// (page bus addresses, page shift); `None` = physical MR (no translation).
    pub pages: Option<(&'a [u64], u32)>,
}

impl<P: Platform> Hca<P> {
    /// Write an MPT (and its MTTs) and hand it to the device with SW2HW_MPT.
    pub(crate) fn create_mr(&mut self, prm: MptParams<'_>) -> Result<usize, Error> {
        let index = self.mpts.alloc().ok_or(Error::NoResources("MPT entries"))?;
        let key = index_to_key(index);
        let mut mtt = None;
        // One place gives back what a failed step leaves allocated.
        if let Err(err) = self.enable_mpt(index, key, &prm, &mut mtt) {
            if let Some((f, _)) = mtt {
                self.mtts.free(f);
            }
            self.mpts.free(index);
            return Err(err);
        }
        let st = MrState { index, key, mtt };
        let slot = match self.mrs.iter().position(|m| m.is_none()) {
            Some(s) => {
                self.mrs[s] = Some(st);
                s
            }
            None => {
                self.mrs.push(Some(st));
                self.mrs.len() - 1
            }
        };
        Ok(slot)
    }

    /// Write MPT `index` (and the MTT entries it needs, recorded in `mtt` as soon as they are
    /// allocated) and hand it to the device with SW2HW_MPT.
    fn enable_mpt(
        &mut self,
        index: u32,
        key: u32,
        prm: &MptParams<'_>,
        mtt: &mut Option<(u32, u32)>,
    ) -> Result<(), Error> {
        let mut e = MptEntry::default();
        // As Linux's `mlx4_mr_enable` (mr.c): MIO | REGION | access, SW-owned status; the PD
        // with EN_INV. The PD's RAE bit, the MTT size and the L_Key field are left 0: Linux
        // sets RAE and mtt_sz only for fast-register MPTs, which this driver does not make.
        let mut flags = mpt::SW_OWNS | mpt::MIO | mpt::REGION | mpt_access(prm.access);
        let pd_flags = prm.pd | mpt::PD_EN_INV;
        match prm.pages {
            None => {
                flags |= mpt::PHYSICAL;
                e.length.set(u64::MAX);
                e.entity_size.set(12);
            }
            Some((pages, shift)) => {
                let n = pages.len() as u32;
                let first = self
                    .mtts
                    .alloc(n)
                    .ok_or(Error::NoResources("MTT entries"))?;
                *mtt = Some((first, n));
                self.write_mtt(first, pages)?;
                e.start.set(prm.iova);
                e.length.set(prm.len);
                e.mtt_addr.set(first as u64 * 8);
                e.entity_size.set(shift);
            }
        }
        e.flags.set(flags);
        e.key.set(key_to_index(key));
        e.pd_flags.set(pd_flags);
        let b = self.cmd.inbox_clear();
        if b.len() < 64 {
            return Err(Error::NoMemory("command mailbox"));
        }
        b[..size_of::<MptEntry>()].copy_from_slice(e.as_bytes());
        self.cmd_in(Opcode::SW2HW_MPT, index, 0)
    }

    /// HW2SW_MPT and free the MPT/MTTs of MR slot `i`.
    pub(crate) fn dereg_mr_index(&mut self, i: usize) -> Result<(), Error> {
        let st = self
            .mrs
            .get_mut(i)
            .and_then(|m| m.take())
            .ok_or(Error::InvalidHandle)?;
        let r = self.cmd(Opcode::HW2SW_MPT, 0, st.index, 1, crate::cmd::Out::None);
        if let Some((f, _)) = st.mtt {
            self.mtts.free(f);
        }
        self.mpts.free(st.index);
        r.map(|_| ())
    }

    /// The device's reserved L_Key: physical access for QPs with the rlkey bit (§4.5).
    pub fn local_dma_lkey(&self) -> u32 {
        self.caps.reserved_lkey
    }

    /// MTT entries in use (for leak checks).
    pub fn mtts_in_use(&self) -> u32 {
        self.mtts.in_use()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_indices_round_trip() {
        assert_eq!(index_to_key(0x12), 0x1200);
        assert_eq!(key_to_index(0x1200), 0x12);
        for i in [0u32, 1, 0x10, 0xFF_FFFF] {
            assert_eq!(key_to_index(index_to_key(i)), i);
        }
        // The tag lives in the low byte of the key / top byte of the hw index.
        assert_eq!(key_to_index(0x1234_56AB), 0xAB12_3456);
    }

    #[test]
    fn covering_page_is_one_naturally_aligned_page() {
        assert_eq!(covering_page_shift(0x1000, 0x1000), 12);
        assert_eq!(covering_page_shift(0x1000, 0x1001), 14); // 0x1000..0x2000 crosses 8K
        assert_eq!(covering_page_shift(0x10_0000, 0x10_0000), 20);
        assert_eq!(covering_page_shift(0x10_0800, 16), 12);
        for &(a, l) in &[(0x3000u64, 0x5000u64), (0x12_3456, 0x9_8765), (0, 1)] {
            let s = covering_page_shift(a, l);
            assert_eq!(a >> s, (a + l - 1) >> s);
        }
    }

    #[test]
    fn contiguous_mtt_pages_never_exceed_2_gib() {
        // Inside one 2 GiB page: one entry, the covering page.
        assert_eq!(contiguous_mtt(0x10_0000, 0x10_0000), (20, 0x10_0000, 1));
        // 8 KiB straddling the 2 GiB boundary: the covering page would be 4 GiB (shift 32);
        // instead two 8 KiB pages.
        assert_eq!(contiguous_mtt(0x7FFF_F000, 0x2000), (13, 0x7FFF_E000, 2));
        // Straddling 2^63: the covering page would be 2^64.
        let (s, f, n) = contiguous_mtt(0x7FFF_FFFF_FFFF_F000, 0x2000);
        assert_eq!((s, n), (13, 2));
        assert_eq!(f, 0x7FFF_FFFF_FFFF_E000);
        // 3 GiB from 1 GiB: 2 GiB pages, two of them.
        assert_eq!(contiguous_mtt(0x4000_0000, 3 << 30), (31, 0, 2));
        for &(a, l) in &[
            (0x7FFF_F000u64, 0x2000u64),
            (0x1_2345_6000, 0x1_0000_0000),
            (0xFFF, 2),
        ] {
            let (s, f, n) = contiguous_mtt(a, l);
            assert!((12..=MAX_MTT_SHIFT).contains(&s));
            assert!(f <= a && f + (n << s) >= a + l, "pages cover the range");
        }
    }

    #[test]
    fn id_alloc_reuses_and_bounds() {
        let mut a = IdAlloc::new(64, 67);
        assert_eq!(a.alloc(), Some(64));
        assert_eq!(a.alloc(), Some(65));
        assert_eq!(a.alloc(), Some(66));
        assert_eq!(a.alloc(), None);
        a.free(65);
        assert_eq!(a.alloc(), Some(65));
        a.free(1000); // out of range: ignored
        assert_eq!(a.in_use(), 3);
    }

    #[test]
    fn mtt_ranges_are_buddy_blocks_aligned_to_their_size_after_the_reserved_block() {
        // 20 reserved entries take the first 32-entry block.
        let mut m = MttAlloc::new(20, 256);
        assert_eq!(m.capacity(), 256 - 32);
        assert_eq!(m.alloc(1), Some(32), "the lowest free block");
        assert_eq!(m.alloc(1), Some(33));
        assert_eq!(m.alloc(3), Some(36), "4 entries, aligned to 4");
        assert_eq!(m.alloc(8), Some(40));
        assert_eq!(m.alloc(5), Some(48), "8 entries, aligned to 8");
        assert_eq!(m.alloc(1), Some(34));
        assert_eq!(m.in_use(), 1 + 1 + 4 + 8 + 8 + 1);
        for (n, at) in [(2, 56), (16, 64), (64, 128)] {
            let got = m.alloc(n).unwrap();
            assert_eq!(got, at);
            assert_eq!(got % (1 << mtt_order(n)), 0, "aligned to its size");
        }
        assert_eq!(m.alloc(128), None, "no block of 128 left");
        // Freeing merges buddies back: the 64-block and the 16-block return whole.
        m.free(128);
        assert_eq!(m.alloc(128), Some(128));
        m.free(128);
        m.free(64);
        m.free(999); // unknown: ignored
        assert_eq!(m.alloc(32), Some(64));
        // Everything freed: one block again, the reserved one excepted.
        for at in [32, 33, 34, 36, 40, 48, 56, 64] {
            m.free(at);
        }
        assert_eq!(m.in_use(), 0);
        assert_eq!(m.alloc(128), Some(128));
        assert_eq!(m.alloc(64), Some(64));
        assert_eq!(m.alloc(32), Some(32));
        assert_eq!(m.alloc(1), None);
    }

    #[test]
    fn mtt_order_is_the_ceiling_log2() {
        let cases = [
            (0, 0),
            (1, 0),
            (2, 1),
            (3, 2),
            (4, 2),
            (5, 3),
            (1024, 10),
            (1025, 11),
        ];
        for (n, o) in cases {
            assert_eq!(mtt_order(n), o, "{n}");
        }
        assert_eq!(MttAlloc::new(0, 0).alloc(1), None);
        assert_eq!(MttAlloc::new(0, 16).alloc(1), Some(0));
    }
}
