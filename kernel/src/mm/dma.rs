//! DMA memory: physically contiguous, aligned, zeroed, and identity mapped, so the address
//! a device uses is the pointer the kernel uses.
//!
//! Granularity is the 4 KiB frame (sizes are rounded up); alignment is any power of two
//! of at least 4 KiB. Freed memory returns to the frame allocator. [`stats`] counts what
//! is in use, for leak checks.

use super::frames::FRAME;
use super::MmError;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};

static BYTES: AtomicU64 = AtomicU64::new(0);
static REGIONS: AtomicU64 = AtomicU64::new(0);

/// An owned DMA region; freed on drop.
#[derive(Debug)]
pub struct DmaBuffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the region is plain memory owned by this handle.
unsafe impl Send for DmaBuffer {}

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

/// Allocates `size` bytes aligned to `align` (at least 4 KiB); returns the physical
/// address, which is also the pointer.
pub fn alloc_raw(size: usize, align: usize) -> Result<u64, MmError> {
    let frames = frames_for(size).max(1);
    let phys = super::alloc_frames(frames, (align as u64).max(FRAME))?;
    // SAFETY: the frames were just allocated (ours alone) and are identity mapped.
    unsafe { core::ptr::write_bytes(phys as *mut u8, 0, (frames * FRAME) as usize) };
    BYTES.fetch_add(frames * FRAME, Ordering::Relaxed);
    REGIONS.fetch_add(1, Ordering::Relaxed);
    Ok(phys)
}

/// Frees a region from [`alloc_raw`] (same `size`).
pub fn free_raw(phys: u64, size: usize) -> Result<(), MmError> {
    let frames = frames_for(size).max(1);
    super::free_frames(phys, frames)?;
    BYTES.fetch_sub(frames * FRAME, Ordering::Relaxed);
    REGIONS.fetch_sub(1, Ordering::Relaxed);
    Ok(())
}

/// What is in use.
pub fn stats() -> DmaStats {
    DmaStats {
        bytes: BYTES.load(Ordering::Relaxed),
        regions: REGIONS.load(Ordering::Relaxed),
    }
}

impl DmaBuffer {
    pub fn new(size: usize, align: usize) -> Result<Self, MmError> {
        let phys = alloc_raw(size, align)?;
        // `alloc_raw` never returns frame 0 (the first megabyte is reserved).
        let ptr = NonNull::new(phys as *mut u8).ok_or(MmError::NotReady)?;
        Ok(DmaBuffer {
            ptr,
            len: (frames_for(size).max(1) * FRAME) as usize,
        })
    }

    /// The bus address (equal to the pointer under identity paging).
    pub fn phys(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the region is owned, mapped and initialised (zeroed at allocation).
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` gives exclusive access.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for DmaBuffer {
    fn drop(&mut self) {
        if let Err(e) = free_raw(self.phys(), self.len) {
            log::error!(
                "dma: freeing {:#x} ({} bytes) failed: {e:?}",
                self.phys(),
                self.len
            );
        }
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
