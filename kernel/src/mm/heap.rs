//! The kernel heap: a linked-list allocator over contiguous identity-mapped frames.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::NonNull;
use linked_list_allocator::Heap;
use spin::Mutex;

/// The global allocator type (a spin lock around `linked_list_allocator::Heap`).
pub struct KernelHeap(Mutex<Heap>);

impl KernelHeap {
    pub const fn empty() -> Self {
        KernelHeap(Mutex::new(Heap::empty()))
    }

    /// Bytes in use and bytes total.
    pub fn usage(&self) -> (usize, usize) {
        let h = self.0.lock();
        (h.used(), h.size())
    }
}

// SAFETY: allocation is serialised by the lock; `Heap` hands out disjoint blocks.
unsafe impl GlobalAlloc for KernelHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.0
            .lock()
            .allocate_first_fit(layout)
            .map_or(core::ptr::null_mut(), |p| p.as_ptr())
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(p) = NonNull::new(ptr) {
            // SAFETY: the caller passes a pointer this allocator returned with `layout`.
            unsafe { self.0.lock().deallocate(p, layout) }
        }
    }
}

#[cfg_attr(target_os = "none", global_allocator)]
pub static HEAP: KernelHeap = KernelHeap::empty();

/// Heap size (or a quarter of free memory on small machines).
pub const HEAP_SIZE: u64 = 8 << 20;

/// Gives the heap its memory (identity-mapped frames).
pub fn init() -> Result<(u64, u64), super::MmError> {
    let frames = (HEAP_SIZE / super::FRAME)
        .min(super::free_frame_count() / 4)
        .max(1);
    let phys = super::alloc_frames(frames, super::FRAME)?;
    let size = frames * super::FRAME;
    // SAFETY: the frames are ours alone and identity-mapped read/write.
    unsafe { HEAP.0.lock().init(phys as *mut u8, size as usize) };
    Ok((phys, size))
}

/// Heap bytes in use and total.
pub fn usage() -> (usize, usize) {
    HEAP.usage()
}
