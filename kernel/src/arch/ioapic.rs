//! I/O APICs: redirection-table programming, routing of ISA IRQs (with the MADT's
//! interrupt source overrides) and of PCI INTx lines.
//!
//! Limit (see docs/kernel.md): a PCI function's INTx is routed from its firmware-written
//! interrupt-line register, read as an ISA IRQ number and passed through the MADT
//! overrides. That is right where the firmware wires PCI interrupts to ISA IRQs through
//! the I/O APIC's first 16 pins (QEMU `pc`, many BIOS-mode servers); where interrupts are
//! routed to GSIs >= 16 only through the ACPI `_PRT` (AML, which this kernel does not
//! interpret), it is not. Drivers should use MSI-X.

use crate::acpi::{IoApic as IoApicInfo, Madt, Polarity, Trigger, MAX_IOAPICS};
use crate::mm::{self, mmio::Mmio, Cache};
use spin::Mutex;

const IOREGSEL: usize = 0x00;
const IOWIN: usize = 0x10;
const REG_VERSION: u32 = 0x01;
const REG_REDIR: u32 = 0x10;

const MASKED: u64 = 1 << 16;
const LEVEL: u64 = 1 << 15;
const ACTIVE_LOW: u64 = 1 << 13;

/// One I/O APIC.
#[derive(Clone, Copy, Debug)]
struct Chip {
    base: u64,
    gsi_base: u32,
    pins: u32,
}

struct State {
    chips: [Option<Chip>; MAX_IOAPICS],
    dest_apic: u8,
}

static STATE: Mutex<State> = Mutex::new(State {
    chips: [None; MAX_IOAPICS],
    dest_apic: 0,
});

/// I/O APIC errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoApicError {
    /// No I/O APIC serves this GSI.
    NoSuchGsi(u32),
    /// The PCI function has no usable interrupt line (0xff or > 15).
    NoLine(u8),
    Map(mm::MmError),
}

/// The register window of the I/O APIC at `base`.
fn window(base: u64) -> Mmio {
    // SAFETY: `base` comes from the MADT's I/O APIC entries, which `init` mapped uncached
    // (one page); the module uses only IOREGSEL and IOWIN, both inside it.
    unsafe { Mmio::new(base) }
}

fn read(base: u64, reg: u32) -> u32 {
    let m = window(base);
    m.write32(IOREGSEL, reg);
    m.read32(IOWIN)
}

fn write(base: u64, reg: u32, value: u32) {
    let m = window(base);
    m.write32(IOREGSEL, reg);
    m.write32(IOWIN, value);
}

/// Redirection entry: fixed delivery, physical destination.
pub fn redirection(
    vector: u8,
    dest_apic: u8,
    polarity: Polarity,
    trigger: Trigger,
    masked: bool,
) -> u64 {
    vector as u64
        | if polarity == Polarity::Low {
            ACTIVE_LOW
        } else {
            0
        }
        | if trigger == Trigger::Level { LEVEL } else { 0 }
        | if masked { MASKED } else { 0 }
        | (dest_apic as u64) << 56
}

/// Maps every I/O APIC and masks all pins; interrupts go to `dest_apic`.
pub fn init(ioapics: &[IoApicInfo], dest_apic: u8) -> Result<usize, IoApicError> {
    let mut st = STATE.lock();
    st.dest_apic = dest_apic;
    for (slot, io) in st.chips.iter_mut().zip(ioapics) {
        mm::map(io.address, 4096, Cache::Uncached).map_err(IoApicError::Map)?;
        let pins = ((read(io.address, REG_VERSION) >> 16) & 0xff) + 1;
        for pin in 0..pins {
            write(io.address, REG_REDIR + 2 * pin, MASKED as u32);
            write(io.address, REG_REDIR + 2 * pin + 1, 0);
        }
        *slot = Some(Chip {
            base: io.address,
            gsi_base: io.gsi_base,
            pins,
        });
    }
    Ok(st.chips.iter().flatten().map(|c| c.pins as usize).sum())
}

fn chip_for(st: &State, gsi: u32) -> Result<(Chip, u32), IoApicError> {
    st.chips
        .iter()
        .flatten()
        .find(|c| gsi >= c.gsi_base && gsi < c.gsi_base + c.pins)
        .map(|c| (*c, gsi - c.gsi_base))
        .ok_or(IoApicError::NoSuchGsi(gsi))
}

/// Routes `gsi` to `vector` on the boot CPU, unmasked.
pub fn route_gsi(
    gsi: u32,
    vector: u8,
    polarity: Polarity,
    trigger: Trigger,
) -> Result<(), IoApicError> {
    let st = STATE.lock();
    let (chip, pin) = chip_for(&st, gsi)?;
    let e = redirection(vector, st.dest_apic, polarity, trigger, false);
    write(chip.base, REG_REDIR + 2 * pin + 1, (e >> 32) as u32);
    write(chip.base, REG_REDIR + 2 * pin, e as u32);
    Ok(())
}

/// Masks `gsi`.
pub fn mask_gsi(gsi: u32) -> Result<(), IoApicError> {
    let st = STATE.lock();
    let (chip, pin) = chip_for(&st, gsi)?;
    let low = read(chip.base, REG_REDIR + 2 * pin);
    write(chip.base, REG_REDIR + 2 * pin, low | MASKED as u32);
    Ok(())
}

/// Routes ISA IRQ `irq` (through the MADT overrides); returns the GSI used.
pub fn route_isa_irq(madt: &Madt, irq: u8, vector: u8) -> Result<u32, IoApicError> {
    let (gsi, pol, trig) = madt.isa_irq(irq);
    route_gsi(gsi, vector, pol, trig)?;
    Ok(gsi)
}

/// Where a PCI INTx with firmware interrupt line `line` arrives: an override for that
/// IRQ wins (its flags, PCI defaults where it says "conforms"), else GSI = line, level
/// triggered, active low.
pub fn pci_intx_route(madt: &Madt, line: u8) -> Result<(u32, Polarity, Trigger), IoApicError> {
    if line > 15 {
        return Err(IoApicError::NoLine(line));
    }
    Ok(match madt.overrides().iter().find(|o| o.source == line) {
        Some(o) => (
            o.gsi,
            o.flags.polarity(Polarity::Low),
            o.flags.trigger(Trigger::Level),
        ),
        None => (line as u32, Polarity::Low, Trigger::Level),
    })
}

/// Routes a PCI function's INTx (see the module limit); returns the GSI used.
pub fn route_pci_intx(madt: &Madt, line: u8, vector: u8) -> Result<u32, IoApicError> {
    let (gsi, pol, trig) = pci_intx_route(madt, line)?;
    route_gsi(gsi, vector, pol, trig)?;
    Ok(gsi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirection_entries() {
        assert_eq!(
            redirection(0x30, 0, Polarity::High, Trigger::Edge, false),
            0x30
        );
        assert_eq!(
            redirection(0x31, 2, Polarity::Low, Trigger::Level, true),
            0x0200_0000_0001_a031
        );
    }
}
