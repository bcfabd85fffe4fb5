//! Local APIC: xAPIC (MMIO) or x2APIC (MSR) mode; enable, EOI, timer.
//!
//! The kernel keeps the mode the firmware handed over (`apic=auto`), or switches an
//! xAPIC to x2APIC when asked (`apic=x2apic`, if the CPU has it). Register offsets are the
//! xAPIC MMIO offsets; in x2APIC mode register `off` is MSR `0x800 + off / 16`.

use super::cpu;
use crate::mm::{self, mmio::Mmio, Cache};
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};

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

const BASE_X2APIC: u64 = 1 << 10;
const BASE_ENABLE: u64 = 1 << 11;

/// How the local APIC is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Not initialised.
    None,
    /// Registers in a 4 KiB MMIO page.
    XApic,
    /// Registers as MSRs 0x800..0x8ff.
    X2Apic,
}

static MODE: AtomicU8 = AtomicU8::new(0);
static BASE: AtomicU64 = AtomicU64::new(0);

/// Local-APIC errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApicError {
    /// The register window could not be mapped.
    Map(mm::MmError),
    /// The APIC id does not fit the 8-bit destinations the kernel programs (I/O APIC
    /// redirection entries, MSI addresses without interrupt remapping).
    IdTooLarge(u32),
}

/// The mode in use.
pub fn mode() -> Mode {
    match MODE.load(Ordering::Relaxed) {
        1 => Mode::XApic,
        2 => Mode::X2Apic,
        _ => Mode::None,
    }
}

/// The x2APIC MSR of xAPIC register offset `reg`.
pub const fn x2apic_msr(reg: usize) -> u32 {
    0x800 + (reg >> 4) as u32
}

fn read(reg: usize) -> u32 {
    match mode() {
        // SAFETY: in x2APIC mode every architectural APIC register is an MSR.
        Mode::X2Apic => unsafe { cpu::rdmsr(x2apic_msr(reg)) as u32 },
        _ => xapic().read32(reg),
    }
}

fn write(reg: usize, value: u32) {
    match mode() {
        // SAFETY: as for `read`; the values written are valid for each register.
        Mode::X2Apic => unsafe { cpu::wrmsr(x2apic_msr(reg), value as u64) },
        _ => xapic().write32(reg, value),
    }
}

/// The xAPIC register window.
fn xapic() -> Mmio {
    // SAFETY: `init` mapped the 4 KiB xAPIC page at BASE uncached before selecting xAPIC mode,
    // and every `reg` the module uses is an architectural register offset inside that page.
    unsafe { Mmio::new(BASE.load(Ordering::Relaxed)) }
}

/// Enables the local APIC (xAPIC window at `phys` from the MADT, or x2APIC), with the
/// spurious vector, LINT`nmi_lint` as NMI, and everything else masked. `want_x2apic`
/// switches an xAPIC to x2APIC mode when the CPU supports it.
pub fn init(
    phys: u64,
    spurious: u8,
    nmi_lint: Option<u8>,
    want_x2apic: bool,
) -> Result<Mode, ApicError> {
    // SAFETY: IA32_APIC_BASE exists on every CPU with an APIC.
    let base = unsafe { cpu::rdmsr(cpu::IA32_APIC_BASE) };
    let x2 = if base & BASE_X2APIC != 0 {
        true
    } else if want_x2apic && cpu::features().x2apic {
        // SAFETY: xAPIC -> x2APIC is the architectural transition (enable bit kept set).
        unsafe { cpu::wrmsr(cpu::IA32_APIC_BASE, base | BASE_ENABLE | BASE_X2APIC) };
        true
    } else {
        if want_x2apic {
            log::warn!(target: "apic", "x2APIC requested but the CPU does not have it; using xAPIC");
        }
        false
    };
    if x2 {
        MODE.store(2, Ordering::Relaxed);
    } else {
        mm::map(phys, 4096, Cache::Uncached).map_err(ApicError::Map)?;
        BASE.store(phys, Ordering::Relaxed);
        MODE.store(1, Ordering::Relaxed);
    }
    let id = raw_id();
    if id > 0xff {
        return Err(ApicError::IdTooLarge(id));
    }
    write(TPR, 0);
    write(LVT_TIMER, LVT_MASKED);
    write(LVT_LINT0, LVT_MASKED);
    write(LVT_LINT1, LVT_MASKED);
    if let Some(lint) = nmi_lint {
        write(if lint == 0 { LVT_LINT0 } else { LVT_LINT1 }, DELIVERY_NMI);
    }
    write(LVT_ERROR, LVT_MASKED);
    write(ESR, 0);
    write(SVR, SVR_ENABLE | spurious as u32);
    write(EOI, 0);
    Ok(mode())
}

fn raw_id() -> u32 {
    match mode() {
        Mode::X2Apic => read(ID),
        _ => read(ID) >> 24,
    }
}

/// This CPU's APIC id (checked at init to fit 8 bits).
pub fn id() -> u8 {
    raw_id() as u8
}

/// The version register (low byte: version, bits 16-23: max LVT entry).
pub fn version() -> u32 {
    read(VERSION)
}

/// Signals end of interrupt.
pub fn eoi() {
    if mode() != Mode::None {
        write(EOI, 0);
    }
}

/// Starts the timer: `vector` every `count` ticks of the bus clock / 16 (or once).
pub fn start_timer(vector: u8, count: u32, periodic: bool) {
    write(TIMER_DIVIDE, 0b0011); // divide by 16
    write(
        LVT_TIMER,
        vector as u32 | if periodic { LVT_PERIODIC } else { 0 },
    );
    write(TIMER_INITIAL, count);
}

/// Stops and masks the timer.
pub fn stop_timer() {
    write(TIMER_INITIAL, 0);
    write(LVT_TIMER, LVT_MASKED);
}

/// The timer's current count.
pub fn timer_current() -> u32 {
    read(TIMER_CURRENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x2apic_register_numbers() {
        assert_eq!(x2apic_msr(ID), 0x802);
        assert_eq!(x2apic_msr(EOI), 0x80b);
        assert_eq!(x2apic_msr(SVR), 0x80f);
        assert_eq!(x2apic_msr(LVT_TIMER), 0x832);
        assert_eq!(x2apic_msr(TIMER_INITIAL), 0x838);
        assert_eq!(x2apic_msr(TIMER_DIVIDE), 0x83e);
    }
}
