//! Memory: physical frames, the kernel's own page tables (identity mapping), heap, DMA.
//!
//! After [`init`], every byte of RAM is reachable at virtual == physical, and so is any
//! MMIO range passed to [`map`]. The bootloader's mapping of all physical memory at
//! [`PHYS_OFFSET`] is kept (upper half) as a second route to the same frames; page
//! tables are edited through it.

pub mod dma;
pub mod frames;
pub mod heap;
pub mod mmio;
pub mod paging;

pub use paging::Cache;

use bootloader_api::info::{MemoryRegionKind, MemoryRegions};
use core::sync::atomic::{AtomicU64, Ordering};
use frames::{FrameAllocator, FrameError, Range, FRAME};
use paging::{Attrs, MapError, Mapper, PageCounts, PageSize, TableMemory};
use spin::Mutex;

/// Where the bootloader maps all physical memory (set in the kernel's BootloaderConfig).
pub const PHYS_OFFSET: u64 = 0xffff_8000_0000_0000;
/// Start of the upper half (kernel image, stack, boot info, physical-memory window).
pub const UPPER_HALF: u64 = 0xffff_8000_0000_0000;

/// Memory-management errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmError {
    Frames(FrameError),
    Map(MapError),
    /// `init` has not run.
    NotReady,
    /// The memory map has no usable RAM big enough for the frame bitmap.
    NoRoomForBitmap,
    /// The bootloader placed the kernel in the lower half (identity mapping would clash).
    KernelInLowerHalf,
    /// A DMA request of zero bytes or with an alignment that is not a power of two.
    BadRequest,
}

impl From<FrameError> for MmError {
    fn from(e: FrameError) -> Self {
        MmError::Frames(e)
    }
}
impl From<MapError> for MmError {
    fn from(e: MapError) -> Self {
        MmError::Map(e)
    }
}

static FRAMES: Mutex<Option<FrameAllocator<'static>>> = Mutex::new(None);
static TABLES: Mutex<Option<Mapper<KernelTables>>> = Mutex::new(None);
static MAX_PAGE: AtomicU64 = AtomicU64::new(0);

/// Page-table frames, reached through the physical-memory window.
pub struct KernelTables;

impl TableMemory for KernelTables {
    fn alloc_table(&mut self) -> Option<u64> {
        let phys = FRAMES.lock().as_mut()?.alloc(1, FRAME).ok()?;
        // SAFETY: the frame was just allocated (ours alone) and the window maps it.
        unsafe { core::ptr::write_bytes(phys_to_window(phys) as *mut u8, 0, FRAME as usize) };
        Some(phys)
    }
    fn table(&mut self, phys: u64) -> &mut [u64; 512] {
        // SAFETY: `phys` is a page-table frame (allocated above or by the bootloader), so
        // the window maps it and it holds 512 entries; access is serialised by TABLES.
        unsafe { &mut *(phys_to_window(phys) as *mut [u64; 512]) }
    }
}

/// The second route to physical memory: the bootloader's window.
pub fn phys_to_window(phys: u64) -> u64 {
    PHYS_OFFSET + phys
}

/// Whether a memory-map region is RAM that the identity map must cover.
fn is_ram(kind: MemoryRegionKind) -> bool {
    matches!(
        kind,
        MemoryRegionKind::Usable | MemoryRegionKind::Bootloader
    )
}

/// The chunk-aligned ranges covering `ram` (sorted or not): every `chunk`-sized, aligned
/// block that holds any RAM, with adjacent and overlapping blocks merged.
pub fn chunk_cover(ram: impl Iterator<Item = Range>, chunk: u64) -> impl Iterator<Item = Range> {
    let mut blocks: [Range; 64] = [Range { start: 0, end: 0 }; 64];
    let mut n = 0;
    for r in ram.filter(|r| r.end > r.start) {
        let mut b = Range {
            start: r.start / chunk * chunk,
            end: r.end.next_multiple_of(chunk),
        };
        // Merge with every existing block it touches.
        let mut i = 0;
        while i < n {
            if blocks[i].start <= b.end && b.start <= blocks[i].end {
                b = Range {
                    start: b.start.min(blocks[i].start),
                    end: b.end.max(blocks[i].end),
                };
                blocks[i] = blocks[n - 1];
                n -= 1;
            } else {
                i += 1;
            }
        }
        if n == blocks.len() {
            // More disjoint RAM islands than slots: fold into the last block (maps the gap).
            blocks[n - 1] = Range {
                start: blocks[n - 1].start.min(b.start),
                end: blocks[n - 1].end.max(b.end),
            };
        } else {
            blocks[n] = b;
            n += 1;
        }
    }
    blocks[..n].sort_unstable_by_key(|r| r.start);
    blocks.into_iter().take(n)
}

/// What `init` did, for the boot log.
#[derive(Clone, Copy, Debug)]
pub struct MmReport {
    pub ram_bytes: u64,
    pub free_frames: u64,
    pub largest_page: PageSize,
    pub identity: PageCounts,
    pub top_of_ram: u64,
}

/// Builds the frame allocator and the kernel's page tables, then switches to them.
pub fn init(regions: &MemoryRegions, page_1g: bool, kernel_virt: u64) -> Result<MmReport, MmError> {
    if kernel_virt < UPPER_HALF {
        return Err(MmError::KernelInLowerHalf);
    }
    // Frame allocator over the usable span; [0, 1 MiB) is never handed out (phys 0 would
    // be a null pointer, and firmware data lives there).
    let usable = || {
        regions
            .iter()
            .filter(|r| r.kind == MemoryRegionKind::Usable)
    };
    let span = Range {
        start: 0,
        end: usable().map(|r| r.end).max().unwrap_or(0) / FRAME * FRAME,
    };
    let words = frames::bitmap_words(span);
    let bytes = (words * 8) as u64;
    let home = usable()
        .find(|r| r.start >= 0x10_0000 && r.end - r.start.next_multiple_of(FRAME) >= bytes)
        .map(|r| r.start.next_multiple_of(FRAME))
        .ok_or(MmError::NoRoomForBitmap)?;
    // SAFETY: `home` is usable RAM no one else uses (it is reserved below before any
    // allocation), mapped by the bootloader's window, sized for `words` words.
    let bits = unsafe { core::slice::from_raw_parts_mut(phys_to_window(home) as *mut u64, words) };
    let mut fa = FrameAllocator::new(bits, span)?;
    for r in usable() {
        fa.add_free(Range {
            start: r.start,
            end: r.end,
        });
    }
    fa.reserve(Range {
        start: 0,
        end: 0x10_0000,
    });
    fa.reserve(Range {
        start: home,
        end: home + bytes,
    });
    *FRAMES.lock() = Some(fa);

    let largest_page = if page_1g {
        PageSize::Size1G
    } else {
        PageSize::Size2M
    };
    MAX_PAGE.store(largest_page.bytes(), Ordering::Relaxed);
    let mut mapper = Mapper::new(KernelTables)?;

    // Identity map: every page-size chunk that holds any RAM.
    let ram = || {
        regions.iter().filter(|r| is_ram(r.kind)).map(|r| Range {
            start: r.start,
            end: r.end,
        })
    };
    let ram_bytes = ram().map(|r| r.end - r.start).sum();
    let top_of_ram = ram().map(|r| r.end).max().unwrap_or(0);
    for r in chunk_cover(ram(), largest_page.bytes()) {
        mapper.map_identity(
            r.start,
            r.end - r.start,
            Attrs::data(Cache::WriteBack),
            largest_page,
        )?;
    }
    // The legacy first megabyte (BIOS data, EBDA, ACPI RSDP on BIOS machines).
    mapper.map_identity(0, 0x10_0000, Attrs::data(Cache::WriteBack), largest_page)?;

    // Upper half: the kernel image (with the bootloader's per-segment permissions), stack,
    // boot info, ramdisk and the physical-memory window, deep-copied into our own tables.
    let (old, _) = x86_64::registers::control::Cr3::read();
    mapper.copy_from(old.start_address().as_u64(), UPPER_HALF, u64::MAX)?;
    let identity = mapper.count_pages(0, paging::LOWER_HALF_END);

    // SAFETY: the new tables map everything the kernel currently uses (upper half copied
    // entry for entry) plus the identity map; the frame is a valid PML4.
    unsafe {
        let frame = x86_64::structures::paging::PhysFrame::containing_address(
            x86_64::PhysAddr::new(mapper.root()),
        );
        x86_64::registers::control::Cr3::write(
            frame,
            x86_64::registers::control::Cr3Flags::empty(),
        );
    }
    *TABLES.lock() = Some(mapper);
    let free_frames = FRAMES.lock().as_ref().map_or(0, |f| f.free_frames());
    Ok(MmReport {
        ram_bytes,
        free_frames,
        largest_page,
        identity,
        top_of_ram,
    })
}

/// Identity-maps `[phys, phys + len)` (rounded out to pages) with memory type `cache`,
/// read/write, never executable. Use `Cache::Uncached` for device registers,
/// `Cache::WriteCombining` for write-combining windows, `Cache::WriteBack` for firmware
/// tables. Re-mapping with a different type splits large pages as needed.
pub fn map(phys: u64, len: u64, cache: Cache) -> Result<(), MmError> {
    let start = phys / FRAME * FRAME;
    let end = phys
        .checked_add(len)
        .ok_or(MmError::Map(MapError::BadRange))?
        .next_multiple_of(FRAME);
    let max = if MAX_PAGE.load(Ordering::Relaxed) == PageSize::Size1G.bytes() {
        PageSize::Size1G
    } else {
        PageSize::Size2M
    };
    let changed = {
        let mut t = TABLES.lock();
        let mapper = t.as_mut().ok_or(MmError::NotReady)?;
        // MMIO gets exact 4 KiB-granular pages at its edges; large pages only where the
        // range covers them completely.
        mapper.map_identity(start, end - start, Attrs::data(cache), max)?
    };
    if changed {
        x86_64::instructions::tlb::flush_all();
    }
    Ok(())
}

/// Resolves a virtual address through the kernel's tables.
pub fn translate(virt: u64) -> Option<paging::Translation> {
    TABLES.lock().as_mut()?.translate(virt)
}

/// Leaf counts of the identity map.
pub fn identity_pages() -> PageCounts {
    TABLES
        .lock()
        .as_mut()
        .map(|m| m.count_pages(0, paging::LOWER_HALF_END))
        .unwrap_or_default()
}

/// The first writable+executable virtual address anywhere, if any.
pub fn find_writable_executable() -> Option<u64> {
    TABLES
        .lock()
        .as_mut()?
        .find_writable_executable(0, u64::MAX)
}

/// Allocates `count` contiguous frames aligned to `align`.
pub fn alloc_frames(count: u64, align: u64) -> Result<u64, MmError> {
    Ok(FRAMES
        .lock()
        .as_mut()
        .ok_or(MmError::NotReady)?
        .alloc(count, align)?)
}

/// Returns frames.
pub fn free_frames(phys: u64, count: u64) -> Result<(), MmError> {
    Ok(FRAMES
        .lock()
        .as_mut()
        .ok_or(MmError::NotReady)?
        .free(phys, count)?)
}

/// Free frames left.
pub fn free_frame_count() -> u64 {
    FRAMES.lock().as_ref().map_or(0, |f| f.free_frames())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    fn r(start: u64, end: u64) -> Range {
        Range { start, end }
    }

    const G: u64 = 1 << 30;
    const M2: u64 = 2 << 20;

    #[test]
    fn cover_of_qemu_memory_maps() {
        // q35, 512 MiB, SeaBIOS: RAM below the EBDA, and 1 MiB .. 0x1ffdf000.
        let small = [r(0x1000, 0x9f000), r(0x10_0000, 0x1ffd_f000)];
        assert_eq!(
            chunk_cover(small.into_iter(), G).collect::<Vec<_>>(),
            [r(0, G)]
        );
        assert_eq!(
            chunk_cover(small.into_iter(), M2).collect::<Vec<_>>(),
            [r(0, 0x2000_0000)]
        );
        // q35, 5 GiB: 0 .. 2 GiB and 4 GiB .. 7 GiB, listed out of order.
        let big = [r(4 * G, 7 * G), r(0x10_0000, 2 * G), r(0x1000, 0x9f000)];
        assert_eq!(
            chunk_cover(big.into_iter(), G).collect::<Vec<_>>(),
            [r(0, 2 * G), r(4 * G, 7 * G)]
        );
        // RAM ending inside a chunk rounds up to the chunk.
        let odd = [r(0x10_0000, 0x8_7654_3000)];
        assert_eq!(
            chunk_cover(odd.into_iter(), G).collect::<Vec<_>>(),
            [r(0, 34 * G)]
        );
        assert_eq!(chunk_cover([r(5, 5)].into_iter(), G).count(), 0);
    }

    #[test]
    fn many_islands_still_covered() {
        let islands: Vec<Range> = (0..100u64)
            .map(|i| r(i * 4 * M2, i * 4 * M2 + 4096))
            .collect();
        let cover: Vec<Range> = chunk_cover(islands.iter().copied(), M2).collect();
        for i in &islands {
            assert!(
                cover.iter().any(|c| c.start <= i.start && i.end <= c.end),
                "{i:?}"
            );
        }
    }
}
