//! The seam between the driver and the machine it runs on.
//!
//! Modelled on virtio-drivers' `Hal`: the driver never touches addresses, page tables or
//! interrupt controllers itself. The kernel implements [`Platform`] over identity-mapped memory
//! and real MMIO; host tests implement it over the in-process device model.

pub use verbs::dma::{DmaRegion, DmaRelease};

/// The two memory BARs of a ConnectX-3 (docs/hardware.md §1.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bar {
    /// BAR0: HCR, ownership word, reset block, clear-interrupt register, MSI-X table.
    Dcs,
    /// BAR2: UAR pages, then BlueFlame pages (mapped write-combining by the platform).
    Uar,
}

/// An MSI-X message: what the device writes, and where, to raise one vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsiMessage {
    pub address: u64,
    pub data: u32,
}

/// An interrupt source the driver can ask about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrqLine {
    /// MSI-X table entry `n`.
    Msix(u16),
    /// The legacy INTx pin.
    Intx,
}

/// What the driver needs from the machine. All methods take `&self`; implementations use
/// interior mutability where they need state.
///
/// MMIO values are raw: `mmio_write32(bar, off, v)` performs one 32-bit store of `v` in host
/// byte order (a `write_volatile` of a `u32`), so the driver passes `x.to_be()` for a
/// big-endian register. Same for reads and the 64-bit forms.
///
/// # Safety
///
/// The driver gives the device bus addresses it got from this trait, and the device then
/// reads and writes that memory behind the compiler's back; the driver's own unsafe code
/// dereferences the CPU pointers this trait returns. Both are sound only if an
/// implementation guarantees (as virtio-drivers' `Hal` asks of its implementations):
///
/// - **DMA memory.** A region returned by [`dma_alloc`](Platform::dma_alloc) is valid for
///   CPU reads and writes of its whole size through its pointer, zeroed, used by nothing else
///   (CPU or device) until the region is dropped, and stays valid until then even if the
///   platform value itself is dropped first. Its bus address is aligned to the requested
///   alignment, reaches exactly that memory from the device, and, for a region marked
///   contiguous, every byte `k` is at bus address `bus + k`. CPU and device views are coherent
///   (as on x86) or the barriers below make them so.
/// - **MMIO.** `mmio_*` and [`wc_copy`](Platform::wc_copy) touch only the named BAR of this
///   HCA: an offset the driver passes that lies outside the BAR's mapping must be refused
///   (dropped, or read as all-ones) rather than reach other memory. BAR0 and the UAR pages
///   are mapped uncached; BlueFlame pages write-combining or uncached.
/// - **Barriers.** [`wmb`](Platform::wmb), [`rmb`](Platform::rmb) and [`mb`](Platform::mb)
///   order CPU accesses to DMA memory and MMIO with respect to the device as documented on
///   each (the defaults suffice on x86, where DMA is cache-coherent and stores to uncached
///   memory are not reordered with earlier stores).
/// - **Configuration space** accesses reach only this HCA's PCI function.
///
/// Time ([`now_ns`](Platform::now_ns)) must be monotonic and advance while the driver waits,
/// or its bounded waits never end; that is a liveness requirement, not a safety one.
pub unsafe trait Platform {
    fn mmio_read32(&self, bar: Bar, offset: usize) -> u32;
    fn mmio_write32(&self, bar: Bar, offset: usize, value: u32);
    fn mmio_write64(&self, bar: Bar, offset: usize, value: u64);

    /// Copy `words` with 64-bit stores, in order, to `offset` of a write-combining mapping of
    /// `bar`, then flush the write-combining buffers (BlueFlame, docs/hardware.md §5.5).
    fn wc_copy(&self, bar: Bar, offset: usize, words: &[u64]);

    /// Order earlier CPU writes to DMA memory before later writes (memory and MMIO).
    #[inline(always)]
    fn wmb(&self) {
        core::sync::atomic::fence(core::sync::atomic::Ordering::Release);
    }
    /// Order earlier reads of DMA memory before later reads.
    #[inline(always)]
    fn rmb(&self) {
        core::sync::atomic::fence(core::sync::atomic::Ordering::Acquire);
    }
    /// Full barrier.
    #[inline(always)]
    fn mb(&self) {
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
    }

    /// Zeroed DMA memory of `size` bytes, bus address aligned to `align` (a power of two),
    /// made with [`DmaRegion::new`] under the obligations above. The region gives the memory
    /// back to the platform's allocator when dropped. `None` when no memory is available.
    fn dma_alloc(&self, size: usize, align: usize) -> Option<DmaRegion>;

    /// Monotonic time in nanoseconds.
    fn now_ns(&self) -> u64;
    /// Busy-wait (or sleep) about `us` microseconds.
    fn delay_us(&self, us: u64);

    /// 32-bit PCI configuration read of the HCA's function.
    fn config_read32(&self, offset: u16) -> u32;
    /// 32-bit PCI configuration write.
    fn config_write32(&self, offset: u16, value: u32);
    /// Save the configuration space before a device reset (docs/hardware.md §1.4 step 1).
    fn save_config(&self);
    /// Restore it after the reset (step 5).
    fn restore_config(&self);

    /// The message for MSI-X vector `n`, or `None` if the platform cannot deliver it (the
    /// driver then uses INTx).
    fn msix_message(&self, vector: u16) -> Option<MsiMessage>;
    /// Whether `line` fired since the last call (clears the indication).
    fn take_interrupt(&self, line: IrqLine) -> bool;

    /// Told about every firmware command when it ends, successful or not (for a command
    /// log; the kernel's `mode=diag` prints it). Commands are off the data path; the default
    /// does nothing.
    fn command_done(&self, _record: &crate::cmd::CmdRecord) {}
}
