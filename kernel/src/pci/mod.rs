//! PCI: configuration access (ECAM or port I/O), bus walk, BARs, capabilities, MSI-X.
//!
//! Enumeration and decoding are generic over [`ConfigAccess`], so the host tests run them
//! against a fake configuration space.

pub mod access;
pub mod msix;

use core::fmt;

/// Bus/device/function (segment 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Bdf {
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl fmt::Display for Bdf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:02x}:{:02x}.{:x}",
            self.bus, self.device, self.function
        )
    }
}

/// Dword access to configuration space.
pub trait ConfigAccess {
    /// Reads the aligned dword at `offset` (0..4096 with ECAM, 0..256 with port I/O).
    fn read32(&self, bdf: Bdf, offset: u16) -> u32;
    fn write32(&self, bdf: Bdf, offset: u16, value: u32);

    fn read16(&self, bdf: Bdf, offset: u16) -> u16 {
        (self.read32(bdf, offset & !3) >> ((offset & 2) * 8)) as u16
    }
    fn read8(&self, bdf: Bdf, offset: u16) -> u8 {
        (self.read32(bdf, offset & !3) >> ((offset & 3) * 8)) as u8
    }
    /// Read-modify-write of a 16-bit field (the other half of the dword is written back
    /// unchanged; the status register's RW1C bits are cleared from the value first when
    /// the command register is written).
    fn write16(&self, bdf: Bdf, offset: u16, value: u16) {
        let shift = (offset & 2) * 8;
        let mut old = self.read32(bdf, offset & !3);
        if offset & !3 == regs::COMMAND {
            // Writing back status bits that read as 1 would clear them.
            old &= 0x0000_ffff;
        }
        let new = (old & !(0xffff << shift)) | (value as u32) << shift;
        self.write32(bdf, offset & !3, new);
    }
}

/// Configuration register offsets (PCI Local Bus 3.0, 6.1; PCI-to-PCI bridge 1.2, 3.2).
pub mod regs {
    pub const VENDOR: u16 = 0x00;
    pub const COMMAND: u16 = 0x04;
    pub const STATUS: u16 = 0x06;
    pub const CLASS: u16 = 0x08;
    pub const HEADER_TYPE: u16 = 0x0e;
    pub const BAR0: u16 = 0x10;
    pub const SECONDARY_BUS: u16 = 0x19;
    pub const CAP_PTR: u16 = 0x34;
    pub const INTERRUPT_LINE: u16 = 0x3c;
    pub const INTERRUPT_PIN: u16 = 0x3d;

    pub const CMD_IO: u16 = 1 << 0;
    pub const CMD_MEMORY: u16 = 1 << 1;
    pub const CMD_BUS_MASTER: u16 = 1 << 2;
    pub const CMD_INTX_DISABLE: u16 = 1 << 10;
    pub const STATUS_CAP_LIST: u16 = 1 << 4;
}

/// Capability ids.
pub mod cap {
    pub const PM: u8 = 0x01;
    pub const MSI: u8 = 0x05;
    pub const VENDOR: u8 = 0x09;
    pub const BRIDGE_SUBSYS: u8 = 0x0d;
    pub const PCIE: u8 = 0x10;
    pub const MSIX: u8 = 0x11;
    pub const SATA: u8 = 0x12;
    pub const AF: u8 = 0x13;

    /// Short name for the boot log.
    pub fn name(id: u8) -> &'static str {
        match id {
            PM => "pm",
            MSI => "msi",
            VENDOR => "vendor",
            BRIDGE_SUBSYS => "ssvid",
            PCIE => "pcie",
            MSIX => "msix",
            SATA => "sata",
            AF => "af",
            _ => "other",
        }
    }
}

/// What a BAR decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarKind {
    Io,
    Mem32,
    /// Below 1 MiB (legacy type 01b).
    Mem1M,
    Mem64,
}

/// A decoded, sized BAR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bar {
    /// 0..=5 (the lower index of a 64-bit pair).
    pub index: u8,
    pub kind: BarKind,
    pub prefetchable: bool,
    pub address: u64,
    pub size: u64,
}

impl fmt::Display for Bar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            BarKind::Io => "io",
            BarKind::Mem32 => "mem32",
            BarKind::Mem1M => "mem1m",
            BarKind::Mem64 => "mem64",
        };
        write!(f, "bar{} {}", self.index, kind)?;
        if self.prefetchable {
            write!(f, " pref")?;
        }
        write!(f, " {:#x} size {:#x}", self.address, self.size)
    }
}

/// Decodes a BAR from its original value(s) and the value(s) read back after writing all
/// ones (`low`/`high`: original, `low_probe`/`high_probe`: read back). Returns `None` for
/// an unimplemented BAR (reads back zero).
pub fn decode_bar(index: u8, low: u32, low_probe: u32, high: u32, high_probe: u32) -> Option<Bar> {
    if low & 1 == 1 {
        let mask = low_probe & 0xffff_fffc;
        // I/O BARs may implement only 16 address bits; the upper half then reads zero.
        let mask = if mask & 0xffff_0000 == 0 {
            mask | 0xffff_0000
        } else {
            mask
        };
        if low_probe & 0xffff_fffc == 0 {
            return None;
        }
        let size = (!mask).wrapping_add(1) as u64;
        return Some(Bar {
            index,
            kind: BarKind::Io,
            prefetchable: false,
            address: (low & 0xffff_fffc) as u64,
            size,
        });
    }
    let prefetchable = low & 0x8 != 0;
    let (kind, addr, mask) = match (low >> 1) & 3 {
        2 => (
            BarKind::Mem64,
            (high as u64) << 32 | (low & 0xffff_fff0) as u64,
            (high_probe as u64) << 32 | (low_probe & 0xffff_fff0) as u64,
        ),
        1 => (
            BarKind::Mem1M,
            (low & 0xffff_fff0) as u64,
            0xffff_ffff_0000_0000 | (low_probe & 0xffff_fff0) as u64,
        ),
        _ => (
            BarKind::Mem32,
            (low & 0xffff_fff0) as u64,
            0xffff_ffff_0000_0000 | (low_probe & 0xffff_fff0) as u64,
        ),
    };
    if mask & 0xffff_ffff_ffff_fff0 == 0 || mask == 0xffff_ffff_0000_0000 {
        return None;
    }
    Some(Bar {
        index,
        kind,
        prefetchable,
        address: addr,
        size: (!mask).wrapping_add(1),
    })
}

/// A capability in the standard list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capability {
    pub id: u8,
    pub offset: u8,
}

/// The MSI-X capability's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsixInfo {
    pub cap_offset: u8,
    pub entries: u16,
    pub table_bar: u8,
    pub table_offset: u32,
    pub pba_bar: u8,
    pub pba_offset: u32,
}

/// Most BARs, capabilities and functions recorded.
pub const MAX_BARS: usize = 6;
pub const MAX_CAPS: usize = 16;

/// One function found by enumeration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Function {
    pub bdf: Bdf,
    pub vendor: u16,
    pub device: u16,
    /// Class, subclass, programming interface.
    pub class: u32,
    pub header_type: u8,
    /// 0: none, 1..=4: INTA..INTD.
    pub interrupt_pin: u8,
    /// As written by the firmware (0xff: not connected / unknown).
    pub interrupt_line: u8,
    pub bars: [Option<Bar>; MAX_BARS],
    pub caps: [Option<Capability>; MAX_CAPS],
    pub msix: Option<MsixInfo>,
}

/// A PCIe function's link: what it can do (Link Capabilities) and what it trained to (Link
/// Status); widths in lanes, speeds as the generation number the registers encode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcieLink {
    pub capable_width: u32,
    pub capable_gen: u32,
    pub width: u32,
    pub gen: u32,
}

impl fmt::Display for PcieLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "capable x{} gen{}, running x{} gen{}",
            self.capable_width, self.capable_gen, self.width, self.gen
        )
    }
}

/// Link Capabilities and Link Status in the PCI Express capability.
const PCIE_LINK_CAP: u16 = 0x0c;
const PCIE_LINK_STATUS: u16 = 0x12;

impl Function {
    /// The PCIe link, if the function has a PCI Express capability.
    pub fn pcie_link(&self, cfg: &dyn ConfigAccess) -> Option<PcieLink> {
        let pcie = u16::from(self.find_cap(cap::PCIE)?);
        let link_cap = cfg.read32(self.bdf, pcie + PCIE_LINK_CAP);
        let status = u32::from(cfg.read16(self.bdf, pcie + PCIE_LINK_STATUS));
        Some(PcieLink {
            capable_width: (link_cap >> 4) & 0x3f,
            capable_gen: link_cap & 0xf,
            width: (status >> 4) & 0x3f,
            gen: status & 0xf,
        })
    }

    pub fn bars(&self) -> impl Iterator<Item = &Bar> {
        self.bars.iter().flatten()
    }
    pub fn caps(&self) -> impl Iterator<Item = &Capability> {
        self.caps.iter().flatten()
    }
    pub fn find_cap(&self, id: u8) -> Option<u8> {
        self.caps().find(|c| c.id == id).map(|c| c.offset)
    }
    pub fn is_bridge(&self) -> bool {
        self.header_type & 0x7f == 1
    }
    pub fn is_host_bridge(&self) -> bool {
        self.class >> 8 == 0x0600
    }

    /// The boot-log lines: the function, one per BAR, the capabilities (stable format,
    /// system tests grep it; see docs/kernel.md).
    pub fn describe(&self, out: &mut dyn fmt::Write) -> fmt::Result {
        let pin = match self.interrupt_pin {
            1..=4 => (b'A' + self.interrupt_pin - 1) as char,
            _ => '-',
        };
        writeln!(
            out,
            "pci {} {:04x}:{:04x} class {:06x} pin {} line {}",
            self.bdf, self.vendor, self.device, self.class, pin, self.interrupt_line
        )?;
        for bar in self.bars() {
            writeln!(out, "pci   {bar}")?;
        }
        if self.caps().next().is_some() {
            write!(out, "pci   caps")?;
            for c in self.caps() {
                write!(out, " {}@{:#04x}", cap::name(c.id), c.offset)?;
            }
            writeln!(out)?;
        }
        if let Some(m) = self.msix {
            writeln!(
                out,
                "pci   msix entries {} table bar{}+{:#x} pba bar{}+{:#x}",
                m.entries, m.table_bar, m.table_offset, m.pba_bar, m.pba_offset
            )?;
        }
        Ok(())
    }
}

/// Sizes the BARs of `bdf` by probing with memory and I/O decoding disabled.
pub fn probe_bars(cfg: &dyn ConfigAccess, bdf: Bdf, count: u8) -> [Option<Bar>; MAX_BARS] {
    let mut bars = [None; MAX_BARS];
    let command = cfg.read16(bdf, regs::COMMAND);
    cfg.write16(
        bdf,
        regs::COMMAND,
        command & !(regs::CMD_IO | regs::CMD_MEMORY),
    );
    let mut i = 0u8;
    while i < count {
        let off = regs::BAR0 + 4 * i as u16;
        let low = cfg.read32(bdf, off);
        cfg.write32(bdf, off, 0xffff_ffff);
        let low_probe = cfg.read32(bdf, off);
        cfg.write32(bdf, off, low);
        let is64 = low & 1 == 0 && (low >> 1) & 3 == 2 && i + 1 < count;
        let (high, high_probe) = if is64 {
            let high = cfg.read32(bdf, off + 4);
            cfg.write32(bdf, off + 4, 0xffff_ffff);
            let probe = cfg.read32(bdf, off + 4);
            cfg.write32(bdf, off + 4, high);
            (high, probe)
        } else {
            (0, 0)
        };
        bars[i as usize] = decode_bar(i, low, low_probe, high, high_probe);
        i += if is64 { 2 } else { 1 };
    }
    cfg.write16(bdf, regs::COMMAND, command);
    bars
}

/// Walks the capability list (bounded: a looping list ends the walk).
pub fn capabilities(cfg: &dyn ConfigAccess, bdf: Bdf) -> [Option<Capability>; MAX_CAPS] {
    let mut caps = [None; MAX_CAPS];
    if cfg.read16(bdf, regs::STATUS) & regs::STATUS_CAP_LIST == 0 {
        return caps;
    }
    let mut ptr = cfg.read8(bdf, regs::CAP_PTR) & 0xfc;
    // Bounded by the array: a looping list ends the walk after MAX_CAPS entries.
    for slot in caps.iter_mut() {
        if ptr < 0x40 {
            break;
        }
        let id = cfg.read8(bdf, ptr as u16);
        *slot = Some(Capability { id, offset: ptr });
        ptr = cfg.read8(bdf, ptr as u16 + 1) & 0xfc;
    }
    caps
}

/// Reads the MSI-X capability at `cap_offset`.
pub fn msix_info(cfg: &dyn ConfigAccess, bdf: Bdf, cap_offset: u8) -> MsixInfo {
    let control = cfg.read16(bdf, cap_offset as u16 + 2);
    let table = cfg.read32(bdf, cap_offset as u16 + 4);
    let pba = cfg.read32(bdf, cap_offset as u16 + 8);
    MsixInfo {
        cap_offset,
        entries: (control & 0x7ff) + 1,
        table_bar: (table & 7) as u8,
        table_offset: table & !7,
        pba_bar: (pba & 7) as u8,
        pba_offset: pba & !7,
    }
}

/// Reads one function (which must exist).
pub fn read_function(cfg: &dyn ConfigAccess, bdf: Bdf) -> Function {
    let id = cfg.read32(bdf, regs::VENDOR);
    let header_type = cfg.read8(bdf, regs::HEADER_TYPE);
    let bar_count = match header_type & 0x7f {
        0 => 6,
        1 => 2,
        _ => 0,
    };
    let caps = capabilities(cfg, bdf);
    let msix_at = caps
        .iter()
        .flatten()
        .find(|c| c.id == cap::MSIX)
        .map(|c| c.offset);
    Function {
        bdf,
        vendor: id as u16,
        device: (id >> 16) as u16,
        class: cfg.read32(bdf, regs::CLASS) >> 8,
        header_type,
        interrupt_pin: cfg.read8(bdf, regs::INTERRUPT_PIN),
        interrupt_line: cfg.read8(bdf, regs::INTERRUPT_LINE),
        bars: probe_bars(cfg, bdf, bar_count),
        caps,
        msix: msix_at.map(|o| msix_info(cfg, bdf, o)),
    }
}

/// Enumerates from bus `first_bus`, following bridges to their secondary buses; calls
/// `found` for every function. Each bus is scanned at most once (bounded on bad bridges).
pub fn enumerate(cfg: &dyn ConfigAccess, first_bus: u8, found: &mut dyn FnMut(&Function)) -> usize {
    let mut visited = [false; 256];
    let mut count = 0;
    scan_bus(cfg, first_bus, &mut visited, &mut count, found);
    count
}

fn scan_bus(
    cfg: &dyn ConfigAccess,
    bus: u8,
    visited: &mut [bool; 256],
    count: &mut usize,
    found: &mut dyn FnMut(&Function),
) {
    if visited[bus as usize] {
        return;
    }
    visited[bus as usize] = true;
    for device in 0..32 {
        let f0 = Bdf {
            bus,
            device,
            function: 0,
        };
        if cfg.read16(f0, regs::VENDOR) == 0xffff {
            continue;
        }
        let functions = if cfg.read8(f0, regs::HEADER_TYPE) & 0x80 != 0 {
            8
        } else {
            1
        };
        for function in 0..functions {
            let bdf = Bdf {
                bus,
                device,
                function,
            };
            if cfg.read16(bdf, regs::VENDOR) == 0xffff {
                continue;
            }
            let f = read_function(cfg, bdf);
            *count += 1;
            found(&f);
            if f.is_bridge() {
                let secondary = cfg.read8(bdf, regs::SECONDARY_BUS);
                if secondary > bus {
                    scan_bus(cfg, secondary, visited, count, found);
                }
            }
        }
    }
}

/// Configuration saved around a device reset: dwords 0..63 except 22 and 23 (device
/// specific, docs/hardware.md §1.4), plus the PCIe Device and Link Control registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedConfig {
    dwords: [u32; 64],
    pcie: Option<(u8, u16, u16)>,
}

/// PCIe capability offsets of Device Control and Link Control.
const PCIE_DEVCTL: u16 = 0x08;
const PCIE_LNKCTL: u16 = 0x10;

/// Saves the configuration of `bdf` (see [`SavedConfig`]).
pub fn save_config(cfg: &dyn ConfigAccess, bdf: Bdf) -> SavedConfig {
    let mut dwords = [0u32; 64];
    for (i, d) in dwords.iter_mut().enumerate() {
        if i != 22 && i != 23 {
            *d = cfg.read32(bdf, 4 * i as u16);
        }
    }
    let pcie = capabilities(cfg, bdf)
        .iter()
        .flatten()
        .find(|c| c.id == cap::PCIE)
        .map(|c| {
            let at = c.offset as u16;
            (
                c.offset,
                cfg.read16(bdf, at + PCIE_DEVCTL),
                cfg.read16(bdf, at + PCIE_LNKCTL),
            )
        });
    SavedConfig { dwords, pcie }
}

/// Restores it after a reset: PCIe Device and Link Control first, then the header dwords
/// 0..15 with the command register last (so decoding resumes only with BARs in place).
pub fn restore_config(cfg: &dyn ConfigAccess, bdf: Bdf, saved: &SavedConfig) {
    if let Some((at, devctl, lnkctl)) = saved.pcie {
        cfg.write16(bdf, at as u16 + PCIE_DEVCTL, devctl);
        cfg.write16(bdf, at as u16 + PCIE_LNKCTL, lnkctl);
    }
    for i in (2..16).rev() {
        cfg.write32(bdf, 4 * i as u16, saved.dwords[i]);
    }
    cfg.write16(bdf, regs::COMMAND, saved.dwords[1] as u16);
}

/// Errors of [`map_bar`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarError {
    /// I/O BARs are reached with port instructions, not mapped.
    IoBar(u8),
    /// The BAR is not assigned an address.
    Unassigned(u8),
    /// The identity mapping failed.
    Map(crate::mm::MmError),
}

/// Identity-maps a memory BAR with `cache` (uncached registers, write-combining for
/// BlueFlame-style windows) and returns its register window.
pub fn map_bar(bar: &Bar, cache: crate::mm::Cache) -> Result<crate::mm::mmio::Mmio, BarError> {
    mappable(bar)?;
    crate::mm::map(bar.address, bar.size, cache).map_err(BarError::Map)?;
    // SAFETY: the whole BAR was just identity-mapped with `cache`; callers access registers
    // inside the BAR they asked for.
    Ok(unsafe { crate::mm::mmio::Mmio::new(bar.address) })
}

/// Checks that a BAR can be mapped (memory space, assigned).
pub fn mappable(bar: &Bar) -> Result<(), BarError> {
    match (bar.kind, bar.address) {
        (BarKind::Io, _) => Err(BarError::IoBar(bar.index)),
        (_, 0) => Err(BarError::Unassigned(bar.index)),
        _ => Ok(()),
    }
}

/// Enables memory decoding and bus mastering (and disables legacy INTx when asked).
pub fn enable(cfg: &dyn ConfigAccess, bdf: Bdf, disable_intx: bool) {
    let mut command = cfg.read16(bdf, regs::COMMAND) | regs::CMD_MEMORY | regs::CMD_BUS_MASTER;
    if disable_intx {
        command |= regs::CMD_INTX_DISABLE;
    }
    cfg.write16(bdf, regs::COMMAND, command);
}

#[cfg(test)]
pub mod tests;
