//! A platform for the driver's unit tests: no DMA memory, MMIO that touches nothing, and
//! counts of the send doorbells (32-bit UAR writes) and BlueFlame copies it was given.

use core::cell::Cell;

use crate::platform::{Bar, DmaRegion, IrqLine, MsiMessage, Platform};

#[derive(Default)]
pub(crate) struct Recorder {
    pub doorbells: Cell<u32>,
    pub blueflames: Cell<u32>,
}

// SAFETY: it never hands out DMA memory and its MMIO accesses touch nothing.
unsafe impl Platform for Recorder {
    fn mmio_read32(&self, _: Bar, _: usize) -> u32 {
        0
    }
    fn mmio_write32(&self, bar: Bar, _: usize, _: u32) {
        if bar == Bar::Uar {
            self.doorbells.set(self.doorbells.get() + 1);
        }
    }
    fn mmio_write64(&self, _: Bar, _: usize, _: u64) {}
    fn wc_copy(&self, _: Bar, _: usize, _: &[u64]) {
        self.blueflames.set(self.blueflames.get() + 1);
    }
    fn dma_alloc(&self, _: usize, _: usize) -> Option<DmaRegion> {
        None
    }
    fn now_ns(&self) -> u64 {
        0
    }
    fn delay_us(&self, _: u64) {}
    fn config_read32(&self, _: u16) -> u32 {
        0
    }
    fn config_write32(&self, _: u16, _: u32) {}
    fn save_config(&self) {}
    fn restore_config(&self) {}
    fn msix_message(&self, _: u16) -> Option<MsiMessage> {
        None
    }
    fn take_interrupt(&self, _: IrqLine) -> bool {
        false
    }
}
