//! Volatile register access at an identity-mapped physical address.

/// A register window (its base must be mapped, normally uncached, via [`super::map`]).
#[derive(Clone, Copy, Debug)]
pub struct Mmio {
    base: u64,
}

impl Mmio {
    /// A window at `base`.
    ///
    /// # Safety
    ///
    /// `base` is the identity-mapped (normally uncached) address of a device's register block,
    /// and every offset later passed to this window's accessors, plus the access size, lies
    /// inside that block: the accessors are safe and trust it.
    pub const unsafe fn new(base: u64) -> Self {
        Mmio { base }
    }

    pub fn base(&self) -> u64 {
        self.base
    }

    pub fn read32(&self, offset: usize) -> u32 {
        // SAFETY: the owner mapped the window (identity, uncached) before creating `Mmio`
        // and offsets stay inside the device's register block.
        unsafe { core::ptr::read_volatile((self.base as usize + offset) as *const u32) }
    }

    pub fn write32(&self, offset: usize, value: u32) {
        // SAFETY: as for `read32`.
        unsafe { core::ptr::write_volatile((self.base as usize + offset) as *mut u32, value) }
    }

    pub fn read8(&self, offset: usize) -> u8 {
        // SAFETY: as for `read32`.
        unsafe { core::ptr::read_volatile((self.base as usize + offset) as *const u8) }
    }

    pub fn write8(&self, offset: usize, value: u8) {
        // SAFETY: as for `read32`.
        unsafe { core::ptr::write_volatile((self.base as usize + offset) as *mut u8, value) }
    }

    pub fn read16(&self, offset: usize) -> u16 {
        // SAFETY: as for `read32`.
        unsafe { core::ptr::read_volatile((self.base as usize + offset) as *const u16) }
    }

    pub fn write16(&self, offset: usize, value: u16) {
        // SAFETY: as for `read32`.
        unsafe { core::ptr::write_volatile((self.base as usize + offset) as *mut u16, value) }
    }

    /// Stores `words` with 64-bit writes in order from `offset` (a write-combining window:
    /// the stores may merge into bursts), then drains the write-combining buffers (`sfence`)
    /// so the burst reaches the device before anything that follows.
    pub fn wc_copy64(&self, offset: usize, words: &[u64]) {
        for (i, w) in words.iter().enumerate() {
            self.write64(offset + 8 * i, *w);
        }
        // SAFETY: SFENCE only orders stores; it has no other effect.
        unsafe { core::arch::asm!("sfence", options(nostack, preserves_flags)) };
    }

    pub fn read64(&self, offset: usize) -> u64 {
        // SAFETY: as for `read32`.
        unsafe { core::ptr::read_volatile((self.base as usize + offset) as *const u64) }
    }

    pub fn write64(&self, offset: usize, value: u64) {
        // SAFETY: as for `read32`.
        unsafe { core::ptr::write_volatile((self.base as usize + offset) as *mut u64, value) }
    }
}

impl crate::pci::msix::Registers for Mmio {
    fn read32(&self, offset: usize) -> u32 {
        Mmio::read32(self, offset)
    }
    fn write32(&self, offset: usize, value: u32) {
        Mmio::write32(self, offset, value)
    }
}
