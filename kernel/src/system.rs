//! What bring-up found out about the machine, kept for the selftest and later drivers.

use crate::acpi::AcpiInfo;
use crate::arch::{cpu::Features, tsc::Source};
use crate::mm::MmReport;
use crate::pci::Function;
use alloc::vec::Vec;
use spin::Once;

/// The machine as discovered at boot.
pub struct Machine {
    pub features: Features,
    pub tsc_hz: u64,
    pub tsc_source: Source,
    pub mm: MmReport,
    pub acpi: AcpiInfo,
    pub lapic_id: u8,
    /// HPET counter frequency, if there is an HPET.
    pub hpet_hz: Option<u64>,
    /// "ecam" or "port-io".
    pub pci_mechanism: &'static str,
    pub pci: Vec<Function>,
    /// Virtual address of the kernel entry point (for the permission check).
    pub kernel_text: u64,
}

static MACHINE: Once<Machine> = Once::new();

/// Records the machine (once).
pub fn set(m: Machine) -> &'static Machine {
    MACHINE.call_once(|| m)
}

/// The machine, once bring-up is done.
pub fn get() -> Option<&'static Machine> {
    MACHINE.get()
}
