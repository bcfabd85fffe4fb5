//! DMA memory: physically contiguous, aligned, zeroed, and identity mapped, so the address
//! a device uses is the pointer the kernel uses.
//!
//! [`alloc`] is the kernel's one DMA allocator: the HCA platform's `dma_alloc`, the
//! benchmark's buffers and the self-test all take their memory from it, as a
//! [`verbs::DmaRegion`] that returns its frames when dropped. Granularity is the 4 KiB frame
//! (sizes are rounded up); alignment is any power of two of at least 4 KiB. [`stats`] counts
//! what is in use, for leak checks.

use super::frames::FRAME;
use super::MmError;
use alloc::sync::Arc;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};
use verbs::dma::{DmaRegion, DmaRelease};

static BYTES: AtomicU64 = AtomicU64::new(0);
static REGIONS: AtomicU64 = AtomicU64::new(0);

/// DMA bytes and regions in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaStats {
    pub bytes: u64,
    pub regions: u64,
}

/// Rounds a request to whole frames.
pub fn frames_for(size: usize) -> u64 {
    (size as u64).div_ceil(FRAME)
}

/// `size` bytes (at least one frame) aligned to `align` (at least 4 KiB), zeroed; the
/// physical address, which is also the pointer.
fn alloc_frames(size: usize, align: usize) -> Result<u64, MmError> {
    let frames = frames_for(size).max(1);
    let phys = super::alloc_frames(frames, (align as u64).max(FRAME))?;
    // SAFETY: the frames were just allocated (ours alone) and are identity mapped.
    unsafe { core::ptr::write_bytes(phys as *mut u8, 0, (frames * FRAME) as usize) };
    BYTES.fetch_add(frames * FRAME, Ordering::Relaxed);
    REGIONS.fetch_add(1, Ordering::Relaxed);
    Ok(phys)
}

/// Returns the frames of a region to the frame allocator.
struct Frames;

impl DmaRelease for Frames {
    unsafe fn release(&self, _ptr: NonNull<u8>, bus: u64, size: usize) {
        let frames = frames_for(size).max(1);
        match super::free_frames(bus, frames) {
            Ok(()) => {
                BYTES.fetch_sub(frames * FRAME, Ordering::Relaxed);
                REGIONS.fetch_sub(1, Ordering::Relaxed);
            }
            Err(e) => log::error!("dma: freeing {bus:#x} ({size} bytes) failed: {e:?}"),
        }
    }
}

/// A DMA region of `size` bytes (rounded up to whole frames underneath) whose bus address,
/// equal to its pointer, is aligned to `align` (a power of two); freed when dropped.
pub fn alloc(size: usize, align: usize) -> Result<DmaRegion, MmError> {
    if size == 0 || !align.is_power_of_two() {
        return Err(MmError::BadRequest);
    }
    let phys = alloc_frames(size, align)?;
    // `alloc_frames` never returns frame 0 (the first megabyte is reserved).
    let ptr = NonNull::new(phys as *mut u8).ok_or(MmError::NotReady)?;
    // SAFETY: the frames are ours alone until `Frames::release` returns them, zeroed, and
    // identity mapped (pointer == physical == bus address, contiguous); x86 DMA is coherent.
    Ok(unsafe { DmaRegion::new(ptr, phys, size, true, Arc::new(Frames)) })
}

/// What is in use.
pub fn stats() -> DmaStats {
    DmaStats {
        bytes: BYTES.load(Ordering::Relaxed),
        regions: REGIONS.load(Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding() {
        assert_eq!(frames_for(1), 1);
        assert_eq!(frames_for(4096), 1);
        assert_eq!(frames_for(4097), 2);
        assert_eq!(frames_for(0), 0);
    }
}
