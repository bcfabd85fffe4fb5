//! `mlx4::Platform` over the kernel's services: identity-mapped BARs, `mm::dma`, the
//! calibrated TSC, configuration access to the HCA's function, and interrupt vectors.
//!
//! Mappings: BAR0 (registers, HCR, MSI-X table) uncached; BAR2's UAR pages uncached; its
//! BlueFlame pages (from `uar_size` on, which QUERY_DEV_CAP reports) write-combining once
//! [`KernelPlatform::map_blueflame`] is called after bring-up. Before that a BlueFlame copy
//! goes through the uncached mapping, which is correct, only slower.
//!
//! Interrupts: the handlers record that their vector fired (the MSI-X handler also runs
//! the bench's completion handler while one is installed, [`super::isr`]). MSI-X is edge
//! triggered, so a flag is all it needs. INTx is level triggered and stays asserted until the driver
//! writes the clear-interrupt register, which only the driver knows; the INTx handler
//! therefore masks the I/O APIC pin as well, and the pin is unmasked the next time the
//! driver asks [`mlx4::Platform::take_interrupt`] (after it has cleared the register).

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use mlx4::{Bar, DmaRegion, IrqLine, MsiMessage, Platform};
use spin::Mutex;

use crate::acpi::{Polarity, Trigger};
use crate::arch::ioapic;
use crate::mm::{self, dma, mmio::Mmio, Cache};
use crate::pci::{self, Bdf, SavedConfig};

/// How long `take_interrupt` waits for an interrupt that has not arrived yet.
const INTERRUPT_GRACE_NS: u64 = 50_000_000;

/// Set by the MSI-X handler, cleared by `take_interrupt(Msix(0))`.
static MSIX_FIRED: AtomicBool = AtomicBool::new(false);
/// Set by the INTx handler, cleared by `take_interrupt(Intx)`.
static INTX_FIRED: AtomicBool = AtomicBool::new(false);
/// The INTx handler masked the pin; unmask at the next `take_interrupt(Intx)`.
static INTX_MASKED: AtomicBool = AtomicBool::new(false);
/// The routed INTx: GSI (u32::MAX: none), and the redirection to restore on unmask.
static INTX_GSI: AtomicU32 = AtomicU32::new(u32::MAX);
/// vector | polarity low << 8 | trigger level << 9
static INTX_ROUTE: AtomicU32 = AtomicU32::new(0);
/// Interrupts seen per kind (for the boot log).
pub static MSIX_COUNT: AtomicU64 = AtomicU64::new(0);
pub static INTX_COUNT: AtomicU64 = AtomicU64::new(0);

/// MSI-X handler: edge-triggered; runs the bench's completion handler when one is
/// installed (isr mode, [`super::isr`]), else only records it.
pub fn msix_handler(_vector: u8) {
    MSIX_COUNT.fetch_add(1, Ordering::Relaxed);
    if !super::isr::run_installed() {
        MSIX_FIRED.store(true, Ordering::Release);
    }
}

/// Takes (clears) the record of an MSI-X interrupt no completion handler took.
pub fn take_msix_fired() -> bool {
    MSIX_FIRED.swap(false, Ordering::AcqRel)
}

/// Interrupts delivered on the HCA's vectors so far (MSI-X and INTx).
pub fn interrupt_count() -> u64 {
    MSIX_COUNT.load(Ordering::Relaxed) + INTX_COUNT.load(Ordering::Relaxed)
}

/// INTx handler: mask the (level-triggered) pin until the driver has cleared the device's
/// interrupt register, and record it.
pub fn intx_handler(_vector: u8) {
    INTX_COUNT.fetch_add(1, Ordering::Relaxed);
    let gsi = INTX_GSI.load(Ordering::Acquire);
    if gsi != u32::MAX && ioapic::mask_gsi(gsi).is_ok() {
        INTX_MASKED.store(true, Ordering::Release);
    }
    INTX_FIRED.store(true, Ordering::Release);
}

/// Records where INTx is routed (so the handler can mask it) and routes it.
pub fn route_intx(
    gsi: u32,
    vector: u8,
    polarity: Polarity,
    trigger: Trigger,
) -> Result<(), ioapic::IoApicError> {
    let bits = vector as u32
        | (matches!(polarity, Polarity::Low) as u32) << 8
        | (matches!(trigger, Trigger::Level) as u32) << 9;
    INTX_ROUTE.store(bits, Ordering::Release);
    INTX_GSI.store(gsi, Ordering::Release);
    INTX_MASKED.store(false, Ordering::Release);
    ioapic::route_gsi(gsi, vector, polarity, trigger)
}

/// Masks INTx and forgets the route.
pub fn unroute_intx() {
    let gsi = INTX_GSI.swap(u32::MAX, Ordering::AcqRel);
    if gsi != u32::MAX {
        let _ = ioapic::mask_gsi(gsi);
    }
    INTX_MASKED.store(false, Ordering::Release);
    INTX_FIRED.store(false, Ordering::Release);
}

/// Unmasks the INTx pin if the handler masked it (call after the device's interrupt
/// register was cleared).
pub fn unmask_intx() {
    if !INTX_MASKED.swap(false, Ordering::AcqRel) {
        return;
    }
    let gsi = INTX_GSI.load(Ordering::Acquire);
    if gsi == u32::MAX {
        return;
    }
    let bits = INTX_ROUTE.load(Ordering::Acquire);
    let polarity = if bits & 1 << 8 != 0 {
        Polarity::Low
    } else {
        Polarity::High
    };
    let trigger = if bits & 1 << 9 != 0 {
        Trigger::Level
    } else {
        Trigger::Edge
    };
    let _ = ioapic::route_gsi(gsi, bits as u8, polarity, trigger);
}

/// A memory BAR as the platform uses it.
#[derive(Clone, Copy, Debug)]
pub struct BarWindow {
    pub mmio: Mmio,
    pub size: u64,
}

/// The kernel's `mlx4::Platform` for one HCA function.
pub struct KernelPlatform {
    bdf: Bdf,
    bar0: BarWindow,
    bar2: BarWindow,
    msix: Option<pci::msix::Message>,
    saved: Mutex<Option<SavedConfig>>,
    /// Offset in BAR2 where the write-combining (BlueFlame) mapping starts; `u64::MAX`
    /// until [`Self::map_blueflame`].
    wc_from: AtomicU64,
}

impl KernelPlatform {
    /// `bar0`/`bar2` must already be mapped uncached (`pci::map_bar`). `msix`: the message of
    /// the kernel's vector for MSI-X table entry 0, or `None` for INTx/polling.
    pub fn new(
        bdf: Bdf,
        bar0: BarWindow,
        bar2: BarWindow,
        msix: Option<pci::msix::Message>,
    ) -> Self {
        KernelPlatform {
            bdf,
            bar0,
            bar2,
            msix,
            saved: Mutex::new(None),
            wc_from: AtomicU64::new(u64::MAX),
        }
    }

    /// Maps BAR2 from `uar_size` (QUERY_DEV_CAP: the UAR pages) to its end write-combining:
    /// the BlueFlame registers. Returns the size of the write-combining window.
    pub fn map_blueflame(&self, uar_size: u64) -> Result<u64, mm::MmError> {
        if uar_size == 0 || uar_size >= self.bar2.size {
            return Ok(0);
        }
        let len = self.bar2.size - uar_size;
        mm::map(self.bar2.mmio.base() + uar_size, len, Cache::WriteCombining)?;
        self.wc_from.store(uar_size, Ordering::Release);
        Ok(len)
    }

    /// The window for `len` bytes at `offset` of `bar`, aligned to `align`; `None` outside
    /// the BAR (such an access would reach whatever is mapped next).
    fn window(&self, bar: Bar, offset: usize, len: usize, align: usize) -> Option<&Mmio> {
        let w = match bar {
            Bar::Dcs => &self.bar0,
            Bar::Uar => &self.bar2,
        };
        let end = offset.checked_add(len)? as u64;
        (end <= w.size && offset.is_multiple_of(align)).then_some(&w.mmio)
    }

    /// Whether `len` bytes at `offset` of `bar` lie inside the mapped BAR, 4-byte aligned
    /// (e.g. a firmware-reported buffer before the driver reads it).
    pub fn covers(&self, bar: Bar, offset: u64, len: u64) -> bool {
        match (usize::try_from(offset), usize::try_from(len.max(4))) {
            (Ok(o), Ok(l)) => self.window(bar, o, l, 4).is_some(),
            _ => false,
        }
    }

    fn cfg(&self) -> Option<&'static dyn pci::ConfigAccess> {
        pci::access::get()
    }
}

// SAFETY: DMA memory comes from `mm::dma`: whole frames taken from the frame allocator (ours
// alone until freed), zeroed, aligned as asked, physically contiguous and identity mapped, so
// the bus address is the pointer; x86 DMA is cache-coherent. Every MMIO access goes through
// `window`, which refuses offsets outside the BAR's mapping (BAR0 and the UAR pages uncached,
// BlueFlame write-combining after `map_blueflame`). Configuration accesses name `self.bdf`.
unsafe impl Platform for KernelPlatform {
    fn command_done(&self, record: &mlx4::CmdRecord) {
        super::cmdlog::LOG.lock().push(*record);
    }

    fn mmio_read32(&self, bar: Bar, offset: usize) -> u32 {
        match self.window(bar, offset, 4, 4) {
            Some(m) => m.read32(offset),
            None => {
                log::error!(target: "hca", "read32 outside {bar:?}: {offset:#x}");
                u32::MAX
            }
        }
    }

    fn mmio_write32(&self, bar: Bar, offset: usize, value: u32) {
        match self.window(bar, offset, 4, 4) {
            Some(m) => m.write32(offset, value),
            None => log::error!(target: "hca", "write32 outside {bar:?}: {offset:#x}"),
        }
    }

    fn mmio_write64(&self, bar: Bar, offset: usize, value: u64) {
        match self.window(bar, offset, 8, 8) {
            Some(m) => m.write64(offset, value),
            None => log::error!(target: "hca", "write64 outside {bar:?}: {offset:#x}"),
        }
    }

    fn wc_copy(&self, bar: Bar, offset: usize, words: &[u64]) {
        match self.window(bar, offset, words.len() * 8, 8) {
            Some(m) => m.wc_copy64(offset, words),
            None => {
                log::error!(target: "hca", "wc_copy outside {bar:?}: {offset:#x}+{}", words.len() * 8)
            }
        }
    }

    fn dma_alloc(&self, size: usize, align: usize) -> Option<DmaRegion> {
        dma::alloc(size, align).ok()
    }

    fn now_ns(&self) -> u64 {
        crate::now_ns()
    }

    fn delay_us(&self, us: u64) {
        crate::delay_us(us)
    }

    fn config_read32(&self, offset: u16) -> u32 {
        match self.cfg() {
            Some(c) if offset < 256 && offset.is_multiple_of(4) => c.read32(self.bdf, offset),
            _ => u32::MAX,
        }
    }

    fn config_write32(&self, offset: u16, value: u32) {
        if let Some(c) = self.cfg() {
            if offset < 256 && offset.is_multiple_of(4) {
                c.write32(self.bdf, offset, value);
            }
        }
    }

    fn save_config(&self) {
        if let Some(c) = self.cfg() {
            *self.saved.lock() = Some(pci::save_config(c, self.bdf));
        }
    }

    fn restore_config(&self) {
        if let (Some(c), Some(saved)) = (self.cfg(), self.saved.lock().as_ref()) {
            pci::restore_config(c, self.bdf, saved);
        }
    }

    fn msix_message(&self, vector: u16) -> Option<MsiMessage> {
        // One vector (table entry 0) carries the driver's single EQ.
        let m = self.msix.filter(|_| vector == 0)?;
        Some(MsiMessage {
            address: m.address,
            data: m.data,
        })
    }

    fn take_interrupt(&self, line: IrqLine) -> bool {
        let flag = match line {
            IrqLine::Msix(0) => &MSIX_FIRED,
            IrqLine::Msix(_) => return false,
            IrqLine::Intx => {
                // The driver has acted on the previous interrupt (cleared the device's
                // register) before asking again: the pin can fire again.
                unmask_intx();
                &INTX_FIRED
            }
        };
        // The interrupt message trails the EQE it announces (a posted write on PCIe; under
        // QEMU's qtest path it takes a trip through QEMU's main loop, milliseconds under
        // load), and the driver asks right after seeing the EQE: give it a bounded moment.
        let start = crate::now_ns();
        loop {
            if flag.swap(false, Ordering::AcqRel) {
                return true;
            }
            if crate::now_ns().saturating_sub(start) > INTERRUPT_GRACE_NS {
                return false;
            }
            core::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn platform() -> KernelPlatform {
        let bar = |base, size| BarWindow {
            // SAFETY: never accessed: the tests only ask `window` which accesses it allows.
            mmio: unsafe { Mmio::new(base) },
            size,
        };
        KernelPlatform::new(
            Bdf {
                bus: 0,
                device: 3,
                function: 0,
            },
            bar(0xfea0_0000, 1 << 20),
            bar(0xfe00_0000, 8 << 20),
            None,
        )
    }

    #[test]
    fn accesses_stay_inside_their_bar_and_are_aligned() {
        let p = platform();
        assert!(p.window(Bar::Dcs, 0, 4, 4).is_some());
        assert!(p.window(Bar::Dcs, (1 << 20) - 4, 4, 4).is_some());
        assert!(
            p.window(Bar::Dcs, (1 << 20) - 2, 4, 4).is_none(),
            "straddles the end"
        );
        assert!(p.window(Bar::Dcs, 1 << 20, 4, 4).is_none());
        assert!(p.window(Bar::Dcs, 2, 4, 4).is_none(), "misaligned");
        assert!(p.window(Bar::Uar, (4 << 20) + 0x100, 64, 8).is_some());
        assert!(
            p.window(Bar::Uar, (8 << 20) - 32, 64, 8).is_none(),
            "burst past the end"
        );
        assert!(
            p.window(Bar::Uar, usize::MAX - 3, 8, 8).is_none(),
            "no overflow"
        );
    }

    #[test]
    fn msix_message_only_for_vector_zero_and_only_when_given() {
        assert_eq!(platform().msix_message(0), None);
        let mut p = platform();
        p.msix = Some(pci::msix::message(2, 0x31));
        assert_eq!(
            p.msix_message(0),
            Some(MsiMessage {
                address: 0xfee0_2000,
                data: 0x31
            })
        );
        assert_eq!(p.msix_message(1), None);
    }

    #[test]
    fn blueflame_window_needs_a_uar_area_inside_the_bar() {
        let p = platform();
        // Outside the BAR or empty: nothing is mapped (and mm is not touched).
        assert_eq!(p.map_blueflame(0), Ok(0));
        assert_eq!(p.map_blueflame(8 << 20), Ok(0));
        assert_eq!(p.wc_from.load(Ordering::Relaxed), u64::MAX);
    }
}
