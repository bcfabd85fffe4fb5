//! Volatile register access at an identity-mapped physical address.

/// A register window (its base must be mapped, normally uncached, via [`super::map`]).
#[derive(Clone, Copy, Debug)]
pub struct Mmio {
    base: u64,
}

impl Mmio {
    pub const fn new(base: u64) -> Self {
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
