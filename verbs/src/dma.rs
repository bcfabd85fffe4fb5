//! DMA memory: the one owned region type the driver, the benchmarks and every platform use.
//!
//! A [`DmaRegion`] is made only by a platform's allocator, through the unsafe
//! [`DmaRegion::new`] (whose caller vouches for the memory), and gives its memory back to that
//! allocator when dropped. Its fields are private: safe code can read and write the bytes it
//! owns, and learn their bus address, but cannot make a region out of arbitrary numbers.
//!
//! The rule for memory the device writes (completion and event queues, command outputs): no
//! safe code holds a `&[u8]` over it while the device may write it. Such memory is read with
//! [`DmaRegion::read`] (a volatile load of a fixed-size array); the shared slice
//! [`DmaRegion::bytes`] is unsafe and its caller vouches that the device is not writing.
//! Modelled on virtio-drivers' `Dma`.

use alloc::sync::Arc;
use core::ptr::NonNull;

/// Where a [`DmaRegion`] goes back to: a platform's DMA allocator.
pub trait DmaRelease: Send + Sync {
    /// Return the memory of a region.
    ///
    /// # Safety
    ///
    /// `ptr`, `bus` and `size` describe a region this allocator handed out (through
    /// [`DmaRegion::new`]) and has not had back yet; nothing uses the memory afterwards.
    unsafe fn release(&self, ptr: NonNull<u8>, bus: u64, size: usize);
}

/// A block of DMA-able memory: the CPU's pointer and the address the device uses for it (the
/// two are never assumed equal, though they are in the kernel with identity paging). Freed
/// when dropped; [`leak`](DmaRegion::leak) keeps memory a failed device may still write.
pub struct DmaRegion {
    ptr: NonNull<u8>,
    bus: u64,
    size: usize,
    contiguous: bool,
    owner: Arc<dyn DmaRelease>,
}

// SAFETY: a DmaRegion is the exclusive owner of its memory (constructor contract), so it can
// move between threads like a Box; `owner` is Send + Sync.
unsafe impl Send for DmaRegion {}

impl DmaRegion {
    /// A region over memory an allocator has just handed out.
    ///
    /// # Safety
    ///
    /// - `ptr` is valid for CPU reads and writes of `size` bytes, the bytes are initialised
    ///   (zeroed), and nothing else (CPU or device) uses them until `owner.release` is called
    ///   for them, which only this region's drop does; they stay valid until then.
    /// - `bus` is the address at which the device reaches `ptr`; when `contiguous`, byte `k`
    ///   is at `bus + k` for every `k < size`.
    /// - CPU and device views of the memory are coherent (or the platform's barriers make
    ///   them so).
    #[inline]
    pub unsafe fn new(
        ptr: NonNull<u8>,
        bus: u64,
        size: usize,
        contiguous: bool,
        owner: Arc<dyn DmaRelease>,
    ) -> Self {
        DmaRegion {
            ptr,
            bus,
            size,
            contiguous,
            owner,
        }
    }

    /// The CPU address of the first byte. Valid for `size()` bytes while the region lives.
    #[inline(always)]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Device (bus) address of the first byte.
    #[inline(always)]
    pub fn bus(&self) -> u64 {
        self.bus
    }

    /// Bus address of byte `off` (a contiguous region is required for `off > 0`).
    #[inline(always)]
    pub fn bus_at(&self, off: usize) -> u64 {
        debug_assert!(off <= self.size && (off == 0 || self.contiguous));
        self.bus + off as u64
    }

    /// Size in bytes.
    #[inline(always)]
    pub fn size(&self) -> usize {
        self.size
    }

    /// Physically contiguous: the whole region is one run of bus addresses.
    #[inline(always)]
    pub fn is_contiguous(&self) -> bool {
        self.contiguous
    }

    /// Read the `N` bytes at `off` with a volatile load: the way to read memory the device
    /// writes (completion and event queues), which no Rust reference may cover while the
    /// device can change it. Ordering against the device's other writes (reading an owner
    /// byte first, then a read barrier, then the entry) is the caller's. `None` when the
    /// bytes are not all inside the region.
    #[inline(always)]
    pub fn read<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        if off.checked_add(N)? > self.size {
            return None;
        }
        // SAFETY: `off + N <= size`, so the N bytes are inside the region, valid and
        // initialised while it lives (constructor contract); a volatile load makes no
        // reference, so the device writing them at the same time is no aliasing violation.
        Some(unsafe { core::ptr::read_volatile(self.ptr.as_ptr().add(off).cast::<[u8; N]>()) })
    }

    /// The memory as bytes.
    ///
    /// # Safety
    ///
    /// The device does not write the region while the slice lives (for instance a command
    /// mailbox after the command completed, until the next command is posted). Memory the
    /// device may write is read with [`read`](DmaRegion::read).
    #[inline]
    pub unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is valid and initialised for `size` bytes while the region lives
        // (constructor contract); `&self` rules out a CPU `&mut` view for as long, and the
        // caller rules out device writes.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.size) }
    }

    /// The `len` bytes at `off` (`None` when they are not all inside the region): a view of
    /// one part of a region whose other parts the device may still write, for example one
    /// receive buffer of several whose completion has been taken while the others stay
    /// posted.
    ///
    /// # Safety
    ///
    /// The device does not write these `len` bytes while the slice lives.
    #[inline]
    pub unsafe fn bytes_at(&self, off: usize, len: usize) -> Option<&[u8]> {
        if off.checked_add(len)? > self.size {
            return None;
        }
        // SAFETY: `off + len <= size`, so the bytes are inside the region, valid and
        // initialised while it lives (constructor contract); `&self` rules out a CPU `&mut`
        // view for as long, and the caller rules out device writes to them.
        Some(unsafe { core::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) })
    }

    /// The memory as mutable bytes, for memory the device only reads (work queues, mailbox
    /// inputs) or does not own yet (a queue before it is handed to the device); callers order
    /// their writes against the device with barriers. Memory the device writes is read with
    /// [`read`](DmaRegion::read), never through this slice.
    #[inline]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `bytes`, and `&mut self` makes this the only CPU view.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.size) }
    }

    /// Never give the memory back: for a device that failed and may still write it.
    pub fn leak(self) {
        core::mem::forget(self);
    }
}

impl Drop for DmaRegion {
    fn drop(&mut self) {
        // SAFETY: the region came from `owner` (constructor contract) and is dropped once;
        // after this nothing can reach its memory through it.
        unsafe { self.owner.release(self.ptr, self.bus, self.size) };
    }
}

impl core::fmt::Debug for DmaRegion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DmaRegion")
            .field("ptr", &self.ptr)
            .field("bus", &format_args!("{:#x}", self.bus))
            .field("size", &self.size)
            .field("contiguous", &self.contiguous)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Hands out leaked boxes and records what comes back.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<(u64, usize)>>);

    impl DmaRelease for Recorder {
        unsafe fn release(&self, ptr: NonNull<u8>, bus: u64, size: usize) {
            self.0.lock().unwrap().push((bus, size));
            // SAFETY: `ptr` came from `Box::leak` of a `[u8; 64]` below.
            drop(unsafe { Box::from_raw(ptr.as_ptr().cast::<[u8; 64]>()) });
        }
    }

    fn region(owner: &Arc<Recorder>, bus: u64) -> DmaRegion {
        let mem = NonNull::from(Box::leak(Box::new([0u8; 64]))).cast::<u8>();
        // SAFETY: a fresh zeroed 64-byte allocation nobody else holds, released by `owner`.
        unsafe { DmaRegion::new(mem, bus, 64, true, owner.clone()) }
    }

    #[test]
    fn drop_releases_once_and_leak_never() {
        let owner = Arc::new(Recorder::default());
        let mut a = region(&owner, 0x1000);
        a.bytes_mut()[63] = 7;
        assert_eq!(a.read::<2>(62), Some([0, 7]));
        assert_eq!(a.read::<2>(63), None, "past the end");
        assert_eq!(a.read::<1>(usize::MAX), None, "offset overflow");
        assert_eq!((a.bus(), a.bus_at(16), a.size()), (0x1000, 0x1010, 64));
        // SAFETY: no device writes this test region.
        unsafe {
            assert_eq!(a.bytes_at(62, 2), Some(&[0u8, 7][..]));
            assert_eq!(a.bytes_at(64, 0), Some(&[][..]));
            assert_eq!(a.bytes_at(63, 2), None, "past the end");
            assert_eq!(a.bytes_at(usize::MAX, 1), None, "offset overflow");
        }
        drop(a);
        assert_eq!(*owner.0.lock().unwrap(), [(0x1000, 64)]);
        let b = region(&owner, 0x2000);
        b.leak();
        assert_eq!(
            owner.0.lock().unwrap().len(),
            1,
            "a leaked region is not released"
        );
    }
}
