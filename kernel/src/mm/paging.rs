//! Four-level x86_64 page tables, built and edited by the kernel itself.
//!
//! The logic here is pure: tables are reached through [`TableMemory`], which the kernel
//! implements over its physical-memory window and the host tests implement over a map of
//! boxed arrays. Identity mappings pick the largest page size that is aligned and fits;
//! giving an already mapped range new attributes splits large pages as needed, so
//! `map_identity(.., Cache::Uncached)` can carve an MMIO window out of a 1 GiB RAM page.

/// Entry bits (Intel SDM vol. 3, 4.5).
pub mod bits {
    pub const PRESENT: u64 = 1 << 0;
    pub const WRITABLE: u64 = 1 << 1;
    pub const USER: u64 = 1 << 2;
    pub const PWT: u64 = 1 << 3;
    pub const PCD: u64 = 1 << 4;
    pub const ACCESSED: u64 = 1 << 5;
    pub const DIRTY: u64 = 1 << 6;
    /// Page size (levels 2 and 3); at level 1 the same bit is PAT.
    pub const HUGE: u64 = 1 << 7;
    pub const PAT_4K: u64 = 1 << 7;
    pub const GLOBAL: u64 = 1 << 8;
    /// PAT bit of 2 MiB and 1 GiB leaves.
    pub const PAT_LARGE: u64 = 1 << 12;
    pub const NO_EXECUTE: u64 = 1 << 63;
    /// Physical address bits of a table pointer or 4 KiB leaf.
    pub const ADDR: u64 = 0x000f_ffff_ffff_f000;
}

use bits::*;

/// Page sizes of leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PageSize {
    Size4K,
    Size2M,
    Size1G,
}

impl core::fmt::Display for PageSize {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            PageSize::Size4K => "4K",
            PageSize::Size2M => "2M",
            PageSize::Size1G => "1G",
        })
    }
}

impl PageSize {
    pub const fn bytes(self) -> u64 {
        match self {
            PageSize::Size4K => 1 << 12,
            PageSize::Size2M => 1 << 21,
            PageSize::Size1G => 1 << 30,
        }
    }
    /// The table level whose entries are leaves of this size (1 = PT, 2 = PD, 3 = PDPT).
    const fn level(self) -> usize {
        match self {
            PageSize::Size4K => 1,
            PageSize::Size2M => 2,
            PageSize::Size1G => 3,
        }
    }
    const fn at_level(level: usize) -> PageSize {
        match level {
            1 => PageSize::Size4K,
            2 => PageSize::Size2M,
            _ => PageSize::Size1G,
        }
    }
    const fn smaller(self) -> Option<PageSize> {
        match self {
            PageSize::Size4K => None,
            PageSize::Size2M => Some(PageSize::Size4K),
            PageSize::Size1G => Some(PageSize::Size2M),
        }
    }
}

/// Memory types the kernel uses, through the PAT layout of [`crate::arch::pat`]:
/// index 0 write-back, 3 uncached, 5 write-combining.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cache {
    WriteBack,
    Uncached,
    WriteCombining,
}

impl Cache {
    /// The PAT index (`PAT:PCD:PWT`) this type is programmed at.
    pub const fn pat_index(self) -> u8 {
        match self {
            Cache::WriteBack => 0,
            Cache::Uncached => 3,
            Cache::WriteCombining => 5,
        }
    }

    fn entry_bits(self, size: PageSize) -> u64 {
        let i = self.pat_index() as u64;
        let pat = if size == PageSize::Size4K {
            PAT_4K
        } else {
            PAT_LARGE
        };
        (if i & 1 != 0 { PWT } else { 0 })
            | (if i & 2 != 0 { PCD } else { 0 })
            | (if i & 4 != 0 { pat } else { 0 })
    }

    fn from_entry(entry: u64, size: PageSize) -> Option<Cache> {
        let pat = if size == PageSize::Size4K {
            PAT_4K
        } else {
            PAT_LARGE
        };
        let i = (entry & PWT != 0) as u8
            | ((entry & PCD != 0) as u8) << 1
            | ((entry & pat != 0) as u8) << 2;
        [Cache::WriteBack, Cache::Uncached, Cache::WriteCombining]
            .into_iter()
            .find(|c| c.pat_index() == i)
    }
}

/// What a leaf allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attrs {
    pub writable: bool,
    pub executable: bool,
    pub cache: Cache,
}

impl Attrs {
    /// Data: read/write, never executed.
    pub const fn data(cache: Cache) -> Attrs {
        Attrs {
            writable: true,
            executable: false,
            cache,
        }
    }

    fn leaf(self, size: PageSize) -> u64 {
        PRESENT
            | if self.writable { WRITABLE } else { 0 }
            | if self.executable { 0 } else { NO_EXECUTE }
            | if size == PageSize::Size4K { 0 } else { HUGE }
            | self.cache.entry_bits(size)
    }
}

/// How the kernel reaches page-table frames.
pub trait TableMemory {
    /// A fresh zeroed frame for a table, by physical address.
    fn alloc_table(&mut self) -> Option<u64>;
    /// The table at `phys`.
    fn table(&mut self, phys: u64) -> &mut [u64; 512];
}

/// Page-table errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapError {
    /// No frame left for a page table.
    OutOfTables,
    /// Address not page aligned, zero length, overflowing, or beyond the lower half.
    BadRange,
}

/// Leaf counts by size, e.g. for the boot log and the selftest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageCounts {
    pub size_1g: u64,
    pub size_2m: u64,
    pub size_4k: u64,
}

impl PageCounts {
    fn add(&mut self, size: PageSize) {
        match size {
            PageSize::Size1G => self.size_1g += 1,
            PageSize::Size2M => self.size_2m += 1,
            PageSize::Size4K => self.size_4k += 1,
        }
    }
}

/// A resolved virtual address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Translation {
    pub phys: u64,
    pub size: PageSize,
    /// Effective permissions (combined over all levels) and the leaf's memory type.
    pub writable: bool,
    pub executable: bool,
    pub cache: Option<Cache>,
}

/// The end of the canonical lower half: identity mappings live below it.
pub const LOWER_HALF_END: u64 = 1 << 47;

fn index(virt: u64, level: usize) -> usize {
    ((virt >> (12 + 9 * (level - 1))) & 0x1ff) as usize
}

fn is_leaf(entry: u64, level: usize) -> bool {
    level == 1 || entry & HUGE != 0
}

fn leaf_addr(entry: u64, size: PageSize) -> u64 {
    entry & ADDR & !(size.bytes() - 1)
}

/// A page-table tree rooted at a PML4 frame.
pub struct Mapper<M: TableMemory> {
    root: u64,
    mem: M,
}

impl<M: TableMemory> Mapper<M> {
    /// A new, empty PML4.
    pub fn new(mut mem: M) -> Result<Self, MapError> {
        let root = mem.alloc_table().ok_or(MapError::OutOfTables)?;
        Ok(Mapper { root, mem })
    }

    /// Physical address of the PML4 (the CR3 value).
    pub fn root(&self) -> u64 {
        self.root
    }

    pub fn memory(&mut self) -> &mut M {
        &mut self.mem
    }

    /// Makes `[phys, phys + len)` identity mapped with `attrs`, using pages no larger than
    /// `max`. Existing mappings in the range are overwritten (large pages are split where
    /// the range covers only part of them). Returns whether an existing entry changed
    /// (the caller must then flush the TLB).
    pub fn map_identity(
        &mut self,
        phys: u64,
        len: u64,
        attrs: Attrs,
        max: PageSize,
    ) -> Result<bool, MapError> {
        let end = phys.checked_add(len).ok_or(MapError::BadRange)?;
        if len == 0
            || !phys.is_multiple_of(4096)
            || !end.is_multiple_of(4096)
            || end > LOWER_HALF_END
        {
            return Err(MapError::BadRange);
        }
        let mut changed = false;
        let mut addr = phys;
        while addr < end {
            let mut size = max;
            while !addr.is_multiple_of(size.bytes()) || end - addr < size.bytes() {
                size = size.smaller().ok_or(MapError::BadRange)?;
            }
            changed |= self.set_leaf(addr, attrs, size)?;
            addr += size.bytes();
        }
        Ok(changed)
    }

    /// Installs one identity leaf of `size` at `addr`. Returns whether a present entry changed.
    fn set_leaf(&mut self, addr: u64, attrs: Attrs, size: PageSize) -> Result<bool, MapError> {
        let mut table = self.root;
        let mut changed = false;
        for level in (size.level() + 1..=4).rev() {
            let i = index(addr, level);
            let entry = self.mem.table(table)[i];
            if entry & PRESENT == 0 {
                let new = self.mem.alloc_table().ok_or(MapError::OutOfTables)?;
                self.mem.table(table)[i] = new | PRESENT | WRITABLE;
                table = new;
            } else if is_leaf(entry, level) {
                let existing = PageSize::at_level(level);
                let base = addr & !(existing.bytes() - 1);
                if entry & !(ACCESSED | DIRTY | GLOBAL) == attrs.leaf(existing) | base {
                    // Already covered by a larger identity page with the same attributes.
                    return Ok(changed);
                }
                table = self.split(table, i, level)?;
                changed = true;
            } else {
                table = entry & ADDR;
            }
        }
        let i = index(addr, size.level());
        let slot = &mut self.mem.table(table)[i];
        let new = addr | attrs.leaf(size);
        if *slot & PRESENT != 0 && !is_leaf(*slot, size.level()) {
            // Finer mappings exist below: rewrite them one level down instead of dropping
            // the table (keeps the code simple; tables are never freed).
            let smaller = size.smaller().ok_or(MapError::BadRange)?;
            let mut any = false;
            for k in 0..512 {
                any |= self.set_leaf(addr + k * smaller.bytes(), attrs, smaller)?;
            }
            return Ok(changed | any);
        }
        let old = *slot;
        *slot = new;
        Ok(changed | (old & PRESENT != 0 && (old & !(ACCESSED | DIRTY)) != new))
    }

    /// Replaces the large leaf at `table[i]` (a leaf at `level`) by a table of 512 leaves
    /// one level down with the same attributes; returns the new table.
    fn split(&mut self, table: u64, i: usize, level: usize) -> Result<u64, MapError> {
        let entry = self.mem.table(table)[i];
        let size = PageSize::at_level(level);
        let base = leaf_addr(entry, size);
        let cache = Cache::from_entry(entry, size);
        let child_size = PageSize::at_level(level - 1);
        // Flags other than the address, PS and the PAT bit carry over unchanged.
        let mut flags = entry & !(ADDR | HUGE | PAT_LARGE);
        if child_size != PageSize::Size4K {
            flags |= HUGE;
        }
        if entry & PAT_LARGE != 0 {
            flags |= if child_size == PageSize::Size4K {
                PAT_4K
            } else {
                PAT_LARGE
            };
        }
        debug_assert!(cache.is_some() || entry & (PWT | PCD | PAT_LARGE) != 0);
        let new = self.mem.alloc_table().ok_or(MapError::OutOfTables)?;
        let child = self.mem.table(new);
        for (k, e) in child.iter_mut().enumerate() {
            *e = (base + k as u64 * child_size.bytes()) | flags;
        }
        self.mem.table(table)[i] = new | PRESENT | WRITABLE;
        Ok(new)
    }

    /// Resolves `virt`.
    pub fn translate(&mut self, virt: u64) -> Option<Translation> {
        let mut table = self.root;
        let (mut writable, mut executable) = (true, true);
        for level in (1..=4).rev() {
            let entry = self.mem.table(table)[index(virt, level)];
            if entry & PRESENT == 0 {
                return None;
            }
            writable &= entry & WRITABLE != 0;
            executable &= entry & NO_EXECUTE == 0;
            if is_leaf(entry, level) {
                let size = PageSize::at_level(level);
                return Some(Translation {
                    phys: leaf_addr(entry, size) + (virt & (size.bytes() - 1)),
                    size,
                    writable,
                    executable,
                    cache: Cache::from_entry(entry, size),
                });
            }
            table = entry & ADDR;
        }
        None
    }

    /// Counts the leaves mapping virtual addresses in `[start, end)` (whole 512 GiB slots).
    pub fn count_pages(&mut self, start: u64, end: u64) -> PageCounts {
        let mut counts = PageCounts::default();
        let root = self.root;
        let mut visit =
            |size: PageSize, _virt: u64, _entry: u64, _w: bool, _x: bool| counts.add(size);
        walk(
            &mut self.mem,
            root,
            4,
            0,
            true,
            true,
            start,
            end,
            &mut visit,
        );
        counts
    }

    /// The first virtual address in `[start, end)` that is both writable and executable.
    pub fn find_writable_executable(&mut self, start: u64, end: u64) -> Option<u64> {
        let mut found = None;
        let root = self.root;
        let mut visit = |_s: PageSize, virt: u64, _e: u64, w: bool, x: bool| {
            if w && x && found.is_none() {
                found = Some(virt);
            }
        };
        walk(
            &mut self.mem,
            root,
            4,
            0,
            true,
            true,
            start,
            end,
            &mut visit,
        );
        found
    }

    /// Copies the PML4 slots covering `[start, end)` of the tree at `src_root`, deep-copying
    /// every table below them into new frames (leaves keep their frames and flags).
    pub fn copy_from(&mut self, src_root: u64, start: u64, end: u64) -> Result<(), MapError> {
        let src = *self.mem.table(src_root);
        for (i, &entry) in src.iter().enumerate() {
            let virt = canonical((i as u64) << 39);
            if entry & PRESENT == 0 || virt < start || virt >= end {
                continue;
            }
            let copy = self.copy_table(entry & ADDR, 3)?;
            let root = self.root;
            self.mem.table(root)[i] = copy | (entry & !ADDR);
        }
        Ok(())
    }

    fn copy_table(&mut self, src: u64, level: usize) -> Result<u64, MapError> {
        let entries = *self.mem.table(src);
        let new = self.mem.alloc_table().ok_or(MapError::OutOfTables)?;
        for (i, &entry) in entries.iter().enumerate() {
            let value = if entry & PRESENT != 0 && !is_leaf(entry, level) {
                self.copy_table(entry & ADDR, level - 1)? | (entry & !ADDR)
            } else {
                entry
            };
            self.mem.table(new)[i] = value;
        }
        Ok(new)
    }
}

/// Sign-extends bit 47.
pub const fn canonical(virt: u64) -> u64 {
    if virt & (1 << 47) != 0 {
        virt | 0xffff_0000_0000_0000
    } else {
        virt
    }
}

/// Calls `visit(size, virt, entry, writable, executable)` for every leaf under `table`
/// whose address lies in `[start, end)`.
#[allow(clippy::too_many_arguments)]
fn walk<M: TableMemory>(
    mem: &mut M,
    table: u64,
    level: usize,
    base: u64,
    writable: bool,
    executable: bool,
    start: u64,
    end: u64,
    visit: &mut dyn FnMut(PageSize, u64, u64, bool, bool),
) {
    let entries = *mem.table(table);
    let span = PageSize::at_level(level.min(3)).bytes() << if level == 4 { 9 } else { 0 };
    for (i, &entry) in entries.iter().enumerate() {
        let virt = canonical(base + i as u64 * span);
        if entry & PRESENT == 0 || virt.saturating_add(span) <= start || virt >= end {
            continue;
        }
        let w = writable && entry & WRITABLE != 0;
        let x = executable && entry & NO_EXECUTE == 0;
        if is_leaf(entry, level) {
            visit(PageSize::at_level(level), virt, entry, w, x);
        } else {
            walk(mem, entry & ADDR, level - 1, virt, w, x, start, end, visit);
        }
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use std::boxed::Box;
    use std::collections::BTreeMap;

    /// Tables in host memory at invented physical addresses.
    #[derive(Default)]
    pub struct HostTables {
        pub tables: BTreeMap<u64, Box<[u64; 512]>>,
        next: u64,
        pub limit: Option<usize>,
    }

    impl TableMemory for HostTables {
        fn alloc_table(&mut self) -> Option<u64> {
            if self.limit.is_some_and(|l| self.tables.len() >= l) {
                return None;
            }
            self.next += 4096;
            let phys = 0x7000_0000 + self.next;
            self.tables.insert(phys, Box::new([0; 512]));
            Some(phys)
        }
        fn table(&mut self, phys: u64) -> &mut [u64; 512] {
            self.tables.get_mut(&phys).expect("not a table")
        }
    }

    const WB: Attrs = Attrs::data(Cache::WriteBack);
    const UC: Attrs = Attrs::data(Cache::Uncached);
    const WC: Attrs = Attrs::data(Cache::WriteCombining);

    #[test]
    fn ram_with_1g_pages_uses_largest_fitting_pages() {
        let mut m = Mapper::new(HostTables::default()).unwrap();
        // 0 .. 2 GiB + 6 MiB + 8 KiB.
        let len = (2 << 30) + (6 << 20) + 8192;
        assert!(!m.map_identity(0, len, WB, PageSize::Size1G).unwrap());
        assert_eq!(
            m.count_pages(0, LOWER_HALF_END),
            PageCounts {
                size_1g: 2,
                size_2m: 3,
                size_4k: 2
            }
        );
        let t = m.translate(0x4000_1234).unwrap();
        assert_eq!(
            (t.phys, t.size, t.writable, t.executable, t.cache),
            (
                0x4000_1234,
                PageSize::Size1G,
                true,
                false,
                Some(Cache::WriteBack)
            )
        );
        assert_eq!(m.translate(len - 1).unwrap().size, PageSize::Size4K);
        assert_eq!(m.translate(len), None);
        // 1 PML4 + 1 PDPT + 1 PD + 1 PT.
        assert_eq!(m.memory().tables.len(), 4);
    }

    #[test]
    fn without_1g_support_only_2m_pages() {
        let mut m = Mapper::new(HostTables::default()).unwrap();
        m.map_identity(0, 1 << 30, WB, PageSize::Size2M).unwrap();
        assert_eq!(
            m.count_pages(0, LOWER_HALF_END),
            PageCounts {
                size_1g: 0,
                size_2m: 512,
                size_4k: 0
            }
        );
    }

    #[test]
    fn mmio_inside_a_1g_page_splits_it_and_keeps_the_rest() {
        let mut m = Mapper::new(HostTables::default()).unwrap();
        m.map_identity(0, 1 << 30, WB, PageSize::Size1G).unwrap();
        // A 16 KiB uncached window and a 2 MiB write-combining window inside the 1 GiB page.
        assert!(m
            .map_identity(0x3fe0_4000, 0x4000, UC, PageSize::Size1G)
            .unwrap());
        assert!(m
            .map_identity(0x2000_0000, 2 << 20, WC, PageSize::Size1G)
            .unwrap());
        assert_eq!(
            m.translate(0x3fe0_4010).unwrap().cache,
            Some(Cache::Uncached)
        );
        assert_eq!(m.translate(0x3fe0_4010).unwrap().size, PageSize::Size4K);
        assert_eq!(
            m.translate(0x3fe0_3ff8).unwrap().cache,
            Some(Cache::WriteBack)
        );
        assert_eq!(
            m.translate(0x3fe0_8000).unwrap().cache,
            Some(Cache::WriteBack)
        );
        let wc = m.translate(0x2000_0040).unwrap();
        assert_eq!(
            (wc.cache, wc.size),
            (Some(Cache::WriteCombining), PageSize::Size2M)
        );
        assert_eq!(
            m.translate(0x1fff_f000).unwrap().cache,
            Some(Cache::WriteBack)
        );
        assert_eq!(m.translate(0x1fff_f000).unwrap().size, PageSize::Size2M);
        // Every address still maps to itself.
        for a in (0..(1u64 << 30)).step_by(0x1f_f000) {
            assert_eq!(m.translate(a).unwrap().phys, a);
        }
        assert_eq!(
            m.count_pages(0, LOWER_HALF_END),
            PageCounts {
                size_1g: 0,
                size_2m: 511,
                size_4k: 512
            }
        );
    }

    #[test]
    fn pat_bits_in_entries() {
        let mut m = Mapper::new(HostTables::default()).unwrap();
        m.map_identity(0x10_0000, 0x1000, WC, PageSize::Size1G)
            .unwrap();
        m.map_identity(0x20_0000, 0x20_0000, WC, PageSize::Size1G)
            .unwrap();
        m.map_identity(0x40_0000, 0x1000, UC, PageSize::Size1G)
            .unwrap();
        let pd = {
            let root = m.root();
            let pdpt = m.memory().table(root)[0] & ADDR;
            m.memory().table(pdpt)[0] & ADDR
        };
        let pd_entries = *m.memory().table(pd);
        // 2 MiB WC leaf: PAT (bit 12) + PWT, PS, NX.
        assert_eq!(
            pd_entries[1],
            0x20_0000 | PRESENT | WRITABLE | HUGE | PAT_LARGE | PWT | NO_EXECUTE
        );
        let pt = pd_entries[0] & ADDR;
        let pt_entries = *m.memory().table(pt);
        assert_eq!(
            pt_entries[0x100],
            0x10_0000 | PRESENT | WRITABLE | PAT_4K | PWT | NO_EXECUTE
        );
        let pt2 = pd_entries[2] & ADDR;
        assert_eq!(
            m.memory().table(pt2)[0],
            0x40_0000 | PRESENT | WRITABLE | PCD | PWT | NO_EXECUTE
        );
    }

    #[test]
    fn remapping_same_attributes_changes_nothing() {
        let mut m = Mapper::new(HostTables::default()).unwrap();
        m.map_identity(0, 1 << 30, WB, PageSize::Size1G).unwrap();
        let before = m.memory().tables.len();
        assert!(!m
            .map_identity(0x1000_0000, 0x1000, WB, PageSize::Size1G)
            .unwrap());
        assert_eq!(m.memory().tables.len(), before);
        // The CPU setting accessed/dirty bits does not make the entry look different.
        let pdpt = {
            let root = m.root();
            m.memory().table(root)[0] & ADDR
        };
        m.memory().table(pdpt)[0] |= ACCESSED | DIRTY;
        assert!(!m
            .map_identity(0x1000_0000, 0x1000, WB, PageSize::Size1G)
            .unwrap());
        assert_eq!(m.memory().tables.len(), before);
        assert_eq!(m.translate(0x1000_0000).unwrap().size, PageSize::Size1G);
    }

    #[test]
    fn large_mapping_over_finer_tables_rewrites_them() {
        let mut m = Mapper::new(HostTables::default()).unwrap();
        m.map_identity(0x20_0000, 0x1000, UC, PageSize::Size1G)
            .unwrap();
        m.map_identity(0, 1 << 30, WB, PageSize::Size1G).unwrap();
        assert_eq!(
            m.translate(0x20_0000).unwrap().cache,
            Some(Cache::WriteBack)
        );
        assert_eq!(m.translate(0x3000_0000).unwrap().phys, 0x3000_0000);
    }

    #[test]
    fn bar_far_above_ram_gets_its_own_tables_uncached() {
        // 512 MiB of RAM in one 1 GiB page, and 64-bit BARs where UEFI firmware puts them:
        // OVMF's window at 896 GiB (PML4 slot 1), a server's at 56 TiB.
        let mut m = Mapper::new(HostTables::default()).unwrap();
        m.map_identity(0, 1 << 30, WB, PageSize::Size1G).unwrap();
        for (bar, len) in [
            (0xe0_0000_0000u64, 1u64 << 20),
            (0xe0_0080_0000, 8 << 20),
            (0x3800_0000_0000, 1 << 30),
        ] {
            assert_eq!(m.translate(bar), None, "{bar:#x} mapped before");
            // Nothing existing changes: no TLB flush needed.
            assert!(!m.map_identity(bar, len, UC, PageSize::Size1G).unwrap());
            for at in [bar, bar + len / 2 + 0x18, bar + len - 8] {
                let t = m.translate(at).unwrap();
                assert_eq!(
                    (t.phys, t.cache, t.writable, t.executable),
                    (at, Some(Cache::Uncached), true, false),
                    "{at:#x}"
                );
            }
            assert_eq!(m.translate(bar + len), None);
        }
        // Largest fitting pages: 4 KiB for 1 MiB, 2 MiB for the aligned 8 MiB, 1 GiB.
        assert_eq!(m.translate(0xe0_0000_0000).unwrap().size, PageSize::Size4K);
        assert_eq!(m.translate(0xe0_0080_0000).unwrap().size, PageSize::Size2M);
        assert_eq!(
            m.translate(0x3800_0000_0000).unwrap().size,
            PageSize::Size1G
        );
        // RAM is untouched.
        assert_eq!(m.translate(0x1000).unwrap().cache, Some(Cache::WriteBack));
        assert_eq!(m.translate(0x1000).unwrap().size, PageSize::Size1G);
    }

    #[test]
    fn bad_ranges_and_exhaustion_are_errors() {
        let mut m = Mapper::new(HostTables::default()).unwrap();
        assert_eq!(
            m.map_identity(0x1001, 0x1000, WB, PageSize::Size1G),
            Err(MapError::BadRange)
        );
        assert_eq!(
            m.map_identity(0x1000, 0, WB, PageSize::Size1G),
            Err(MapError::BadRange)
        );
        assert_eq!(
            m.map_identity(u64::MAX - 0xfff, 0x2000, WB, PageSize::Size1G),
            Err(MapError::BadRange)
        );
        assert_eq!(
            m.map_identity(LOWER_HALF_END, 0x1000, WB, PageSize::Size1G),
            Err(MapError::BadRange)
        );
        m.memory().limit = Some(2);
        assert_eq!(
            m.map_identity(0, 0x1000, WB, PageSize::Size1G),
            Err(MapError::OutOfTables)
        );
    }

    #[test]
    fn copy_from_deep_copies_upper_half_and_finds_wx() {
        let mut src = Mapper::new(HostTables::default()).unwrap();
        // Build an "upper half" mapping by hand: PML4 slot 511 -> PDPT -> PD -> PT with a
        // read-only executable page and a writable NX page.
        let (pdpt, pd, pt) = {
            let mem = src.memory();
            (
                mem.alloc_table().unwrap(),
                mem.alloc_table().unwrap(),
                mem.alloc_table().unwrap(),
            )
        };
        let root = src.root();
        src.memory().table(root)[511] = pdpt | PRESENT | WRITABLE;
        src.memory().table(pdpt)[0] = pd | PRESENT | WRITABLE;
        src.memory().table(pd)[0] = pt | PRESENT | WRITABLE;
        src.memory().table(pt)[0] = 0x5000 | PRESENT;
        src.memory().table(pt)[1] = 0x6000 | PRESENT | WRITABLE | NO_EXECUTE;
        let upper = 0xffff_8000_0000_0000;
        assert_eq!(src.find_writable_executable(upper, u64::MAX), None);
        // Copy into a new tree sharing the same memory.
        let mut dst = Mapper {
            root: 0,
            mem: core::mem::take(src.memory()),
        };
        dst.root = dst.mem.alloc_table().unwrap();
        dst.copy_from(root, upper, u64::MAX).unwrap();
        let base = 0xffff_ff80_0000_0000;
        assert_eq!(dst.translate(base).unwrap().phys, 0x5000);
        let t = dst.translate(base + 0x1000).unwrap();
        assert_eq!((t.phys, t.writable, t.executable), (0x6000, true, false));
        // The copy has its own tables: editing the source no longer affects it.
        dst.mem.table(pt)[0] = 0x9000 | PRESENT | WRITABLE;
        assert_eq!(dst.translate(base).unwrap().phys, 0x5000);
        // A W+X page is found.
        let new_pt = {
            let r = dst.root();
            let p = dst.mem.table(r)[511] & ADDR;
            let d = dst.mem.table(p)[0] & ADDR;
            dst.mem.table(d)[0] & ADDR
        };
        dst.mem.table(new_pt)[2] = 0x7000 | PRESENT | WRITABLE;
        assert_eq!(
            dst.find_writable_executable(upper, u64::MAX),
            Some(base + 0x2000)
        );
        assert_eq!(dst.count_pages(upper, u64::MAX).size_4k, 3);
    }
}
