//! The virtual machine being booted: firmware, accelerator, machine type, and the PCI devices
//! each choice really puts on the bus (for the kernel's `expect_pci=` check).

use clap::ValueEnum;

/// How the guest is booted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Firmware {
    /// SeaBIOS (QEMU's default) booting the BIOS disk image.
    Bios,
    /// OVMF booting the UEFI disk image.
    Uefi,
    /// OVMF booting over the network (PXE/TFTP) from the TFTP root, through a virtio-net NIC.
    Pxe,
}

impl Firmware {
    /// Whether this firmware needs the OVMF image.
    pub fn needs_ovmf(self) -> bool {
        matches!(self, Firmware::Uefi | Firmware::Pxe)
    }

    /// Lowercase name as given on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Firmware::Bios => "bios",
            Firmware::Uefi => "uefi",
            Firmware::Pxe => "pxe",
        }
    }
}

/// Which QEMU accelerator runs the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Accel {
    /// QEMU's software emulation: works everywhere, the default.
    Tcg,
    /// Hardware virtualisation through /dev/kvm (real hosts; needed for VFIO passthrough).
    Kvm,
}

impl Accel {
    /// The CPU model used when none is given: every feature TCG can emulate (including 1 GiB
    /// pages), or the host's own CPU under KVM.
    pub fn default_cpu(self) -> &'static str {
        match self {
            Accel::Tcg => "max",
            Accel::Kvm => "host",
        }
    }

    /// Lowercase name as QEMU's `-accel` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Accel::Tcg => "tcg",
            Accel::Kvm => "kvm",
        }
    }
}

/// QEMU machine type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Machine {
    /// Q35 chipset: PCIe, ECAM (the kernel finds it through ACPI MCFG).
    Q35,
    /// i440FX/PIIX3 chipset: conventional PCI, configuration through I/O ports only.
    Pc,
}

impl Machine {
    /// Lowercase name as QEMU's `-machine` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Machine::Q35 => "q35",
            Machine::Pc => "pc",
        }
    }
}

/// A PCI vendor:device pair (the `expect_pci` key's).
pub use ibconfig::PciId;

/// QEMU 7.2's devices (checked with `info pci` on the command lines this runner builds).
mod ids {
    use super::PciId;
    pub const Q35_HOST_BRIDGE: PciId = PciId::new(0x8086, 0x29c0);
    pub const ICH9_LPC: PciId = PciId::new(0x8086, 0x2918);
    pub const ICH9_AHCI: PciId = PciId::new(0x8086, 0x2922);
    pub const ICH9_SMBUS: PciId = PciId::new(0x8086, 0x2930);
    pub const I440FX_HOST_BRIDGE: PciId = PciId::new(0x8086, 0x1237);
    pub const PIIX3_ISA: PciId = PciId::new(0x8086, 0x7000);
    pub const PIIX3_IDE: PciId = PciId::new(0x8086, 0x7010);
    pub const PIIX4_ACPI: PciId = PciId::new(0x8086, 0x7113);
    pub const STD_VGA: PciId = PciId::new(0x1234, 0x1111);
    pub const E1000E: PciId = PciId::new(0x8086, 0x10d3);
    pub const E1000: PciId = PciId::new(0x8086, 0x100e);
    pub const VIRTIO_NET: PciId = PciId::new(0x1af4, 0x1000);
}

/// The PCI functions the guest sees on `machine` booted with `firmware`, before any VFIO or
/// proxied device is added.
///
/// QEMU adds a standard VGA adapter even with `-display none`, and a default NIC (e1000e on
/// q35, e1000 on pc) unless a network backend is configured; PXE boots configure one and use a
/// virtio-net NIC instead.
pub fn expected_pci(machine: Machine, firmware: Firmware) -> Vec<PciId> {
    use ids::*;
    let nic = match (firmware, machine) {
        (Firmware::Pxe, _) => VIRTIO_NET,
        (_, Machine::Q35) => E1000E,
        (_, Machine::Pc) => E1000,
    };
    match machine {
        Machine::Q35 => vec![
            Q35_HOST_BRIDGE,
            ICH9_LPC,
            ICH9_AHCI,
            ICH9_SMBUS,
            STD_VGA,
            nic,
        ],
        Machine::Pc => vec![
            I440FX_HOST_BRIDGE,
            PIIX3_ISA,
            PIIX3_IDE,
            PIIX4_ACPI,
            STD_VGA,
            nic,
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_bridge_matches_machine() {
        assert_eq!(
            expected_pci(Machine::Q35, Firmware::Bios)[0],
            PciId::new(0x8086, 0x29c0)
        );
        assert_eq!(
            expected_pci(Machine::Pc, Firmware::Uefi)[0],
            PciId::new(0x8086, 0x1237)
        );
    }

    #[test]
    fn pxe_replaces_default_nic_with_virtio() {
        let pxe = expected_pci(Machine::Q35, Firmware::Pxe);
        assert!(pxe.contains(&PciId::new(0x1af4, 0x1000)));
        assert!(!pxe.contains(&PciId::new(0x8086, 0x10d3)));
        let bios = expected_pci(Machine::Pc, Firmware::Bios);
        assert!(bios.contains(&PciId::new(0x8086, 0x100e)));
        assert!(!bios.contains(&PciId::new(0x1af4, 0x1000)));
    }

    #[test]
    fn default_cpu_per_accelerator() {
        assert_eq!(Accel::Tcg.default_cpu(), "max");
        assert_eq!(Accel::Kvm.default_cpu(), "host");
    }
}
