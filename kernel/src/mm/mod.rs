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
    let chunk = largest_page.bytes();
    let mut ram_bytes = 0;
    let mut top_of_ram = 0;
    let mut mapped_to = 0u64;
    for r in regions.iter().filter(|r| is_ram(r.kind)) {
        ram_bytes += r.end - r.start;
        top_of_ram = top_of_ram.max(r.end);
        let start = (r.start / chunk * chunk).max(mapped_to);
        let end = r.end.next_multiple_of(chunk);
        if start < end {
            mapper.map_identity(
                start,
                end - start,
                Attrs::data(Cache::WriteBack),
                largest_page,
            )?;
            mapped_to = end;
        }
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
