//! Local APIC in xAPIC (MMIO) mode: enable, EOI, timer.

use crate::mm::{self, mmio::Mmio, Cache};
use core::sync::atomic::{AtomicU64, Ordering};

const ID: usize = 0x20;
const VERSION: usize = 0x30;
const TPR: usize = 0x80;
const EOI: usize = 0xb0;
const SVR: usize = 0xf0;
const ESR: usize = 0x280;
const LVT_TIMER: usize = 0x320;
const LVT_LINT0: usize = 0x350;
const LVT_LINT1: usize = 0x360;
const LVT_ERROR: usize = 0x370;
const TIMER_INITIAL: usize = 0x380;
const TIMER_CURRENT: usize = 0x390;
const TIMER_DIVIDE: usize = 0x3e0;

const LVT_MASKED: u32 = 1 << 16;
const LVT_PERIODIC: u32 = 1 << 17;
const DELIVERY_NMI: u32 = 0b100 << 8;
const SVR_ENABLE: u32 = 1 << 8;

static BASE: AtomicU64 = AtomicU64::new(0);

/// Local-APIC errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApicError {
    /// The firmware left the APIC in x2APIC mode (not supported here).
    X2ApicMode,
    /// The register window could not be mapped.
    Map(mm::MmError),
}

fn regs() -> Mmio {
    Mmio::new(BASE.load(Ordering::Relaxed))
}

/// Maps and enables the local APIC at `phys` (from the MADT), with the spurious vector,
/// LINT1 as NMI when `nmi_lint` says so, and everything else masked.
pub fn init(phys: u64, spurious: u8, nmi_lint: Option<u8>) -> Result<(), ApicError> {
    // SAFETY: IA32_APIC_BASE exists on every CPU with an APIC.
    let msr = unsafe { super::cpu::rdmsr(super::cpu::IA32_APIC_BASE) };
    if msr & (1 << 10) != 0 {
        return Err(ApicError::X2ApicMode);
    }
    mm::map(phys, 4096, Cache::Uncached).map_err(ApicError::Map)?;
    BASE.store(phys, Ordering::Relaxed);
    let r = regs();
    r.write32(TPR, 0);
    r.write32(LVT_TIMER, LVT_MASKED);
    r.write32(LVT_LINT0, LVT_MASKED);
    r.write32(LVT_LINT1, LVT_MASKED);
    if let Some(lint) = nmi_lint {
        r.write32(if lint == 0 { LVT_LINT0 } else { LVT_LINT1 }, DELIVERY_NMI);
    }
    r.write32(LVT_ERROR, LVT_MASKED);
    r.write32(ESR, 0);
    r.write32(SVR, SVR_ENABLE | spurious as u32);
    r.write32(EOI, 0);
    Ok(())
}

/// This CPU's APIC id.
pub fn id() -> u8 {
    (regs().read32(ID) >> 24) as u8
}

/// The version register (low byte: version, bits 16-23: max LVT entry).
pub fn version() -> u32 {
    regs().read32(VERSION)
}

/// Signals end of interrupt.
pub fn eoi() {
    let base = BASE.load(Ordering::Relaxed);
    if base != 0 {
        Mmio::new(base).write32(EOI, 0);
    }
}

/// Starts the timer: `vector` every `count` ticks of the bus clock / 16 (or once).
pub fn start_timer(vector: u8, count: u32, periodic: bool) {
    let r = regs();
    r.write32(TIMER_DIVIDE, 0b0011); // divide by 16
    r.write32(
        LVT_TIMER,
        vector as u32 | if periodic { LVT_PERIODIC } else { 0 },
    );
    r.write32(TIMER_INITIAL, count);
}

/// Stops and masks the timer.
pub fn stop_timer() {
    let r = regs();
    r.write32(TIMER_INITIAL, 0);
    r.write32(LVT_TIMER, LVT_MASKED);
}

/// The timer's current count.
pub fn timer_current() -> u32 {
    regs().read32(TIMER_CURRENT)
}
