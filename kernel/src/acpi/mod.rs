//! ACPI static tables: RSDP, XSDT/RSDT, MADT, MCFG, HPET, FADT (PM timer).
//!
//! Each table is read through [`PhysRead`] into a buffer of its own and its checksum and
//! lengths are checked here; the fields are then decoded with the table layouts and the MADT
//! entry iterator of the `acpi` crate (rust-osdev), which many kernels run on real firmware.
//! The crate's own walkers (`AcpiTables`) are not used: they read tables in place and trust
//! every length field (an MADT entry of length 0 would never end), do not verify checksums
//! when looking tables up, and their memory handler also serves the AML interpreter, which
//! the kernel does not run. The same code runs on the machine (identity-mapped firmware
//! memory) and in host tests (captured tables, see `testdata/`). A bad checksum or an
//! impossible length is an error.

pub mod firmware;

use acpi::sdt::fadt::Fadt;
use acpi::sdt::hpet::HpetTable;
use acpi::sdt::madt::{self as acpi_madt, MadtEntry};
use acpi::sdt::mcfg::{Mcfg, McfgEntry};
use acpi::sdt::SdtHeader;
use core::{fmt, mem, pin::Pin};

/// Read access to physical memory.
pub trait PhysRead {
    /// Fills `buf` from physical address `phys`; `false` if that memory is not readable.
    fn read(&self, phys: u64, buf: &mut [u8]) -> bool;
}

/// ACPI parsing errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcpiError {
    /// The memory at this address could not be read.
    Unreadable(u64),
    /// Wrong signature at this address.
    BadSignature(u64),
    /// Checksum mismatch for the table at this address.
    BadChecksum(u64),
    /// A length field that cannot be right.
    BadLength(u64),
    /// A required table is missing.
    Missing(&'static str),
}

impl fmt::Display for AcpiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcpiError::Unreadable(a) => write!(f, "memory at {a:#x} is not readable"),
            AcpiError::BadSignature(a) => write!(f, "bad signature at {a:#x}"),
            AcpiError::BadChecksum(a) => write!(f, "bad checksum of the table at {a:#x}"),
            AcpiError::BadLength(a) => write!(f, "implausible length of the table at {a:#x}"),
            AcpiError::Missing(t) => write!(f, "no {t} table"),
        }
    }
}

/// Largest table we read (MADTs of big machines are a few KiB).
const MAX_TABLE: usize = 16 * 1024;
/// Most SDT entries, local APICs, IOAPICs, overrides, MCFG segments kept.
pub const MAX_TABLES: usize = 64;
pub const MAX_CPUS: usize = 256;
pub const MAX_IOAPICS: usize = 8;
pub const MAX_OVERRIDES: usize = 16;
pub const MAX_NMIS: usize = 8;
pub const MAX_ECAM: usize = 4;

/// Zeroed bytes after a table's end in [`Table`]'s buffer: the crate's layouts are read
/// whole (a 116-byte ACPI 1.0 FADT through the 276-byte layout; its revision gates the
/// fields past the end), so they never reach past the buffer.
const PAD: usize = 512;
const HEADER: usize = mem::size_of::<SdtHeader>();

fn sum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |a, &b| a.wrapping_add(b))
}

/// A table read into a buffer.
pub struct Table {
    pub phys: u64,
    pub signature: [u8; 4],
    buf: [u8; MAX_TABLE + PAD],
    len: usize,
}

impl Table {
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// The table seen through one of the `acpi` crate's layouts.
    fn layout<T>(&self) -> &T {
        const { assert!(mem::size_of::<T>() <= PAD) };
        const { assert!(mem::align_of::<T>() == 1) };
        // SAFETY: the crate's table layouts are `repr(C, packed)` (alignment 1, checked above)
        // plain-integer structs, valid for any bytes; the buffer holds at least
        // `size_of::<T>()` bytes (the table's own plus the zeroed padding).
        unsafe { &*self.buf.as_ptr().cast::<T>() }
    }
}

/// Reads `N` bytes at `phys`.
fn read_bytes<const N: usize>(mem: &dyn PhysRead, phys: u64) -> Option<[u8; N]> {
    let mut b = [0u8; N];
    mem.read(phys, &mut b).then_some(b)
}

/// One of the `acpi` crate's plain layouts over `N` bytes.
fn layout_of<T: Copy, const N: usize>(b: &[u8; N]) -> T {
    const { assert!(mem::size_of::<T>() == N) };
    // SAFETY: `T` is a `repr(C, packed)` layout of plain integers and byte arrays, exactly
    // `N` bytes (checked above), valid for any bytes; the read is unaligned.
    unsafe { core::ptr::read_unaligned(b.as_ptr().cast::<T>()) }
}

/// Reads and verifies the table at `phys`.
pub fn read_table(mem: &dyn PhysRead, phys: u64) -> Result<Table, AcpiError> {
    let raw = read_bytes::<HEADER>(mem, phys).ok_or(AcpiError::Unreadable(phys))?;
    let header: SdtHeader = layout_of(&raw);
    let len = header.length() as usize;
    if !(HEADER..=MAX_TABLE).contains(&len) {
        return Err(AcpiError::BadLength(phys));
    }
    // The crate's `Signature` is not read as text: firmware may put any bytes there.
    let mut t = Table {
        phys,
        signature: [raw[0], raw[1], raw[2], raw[3]],
        buf: [0; MAX_TABLE + PAD],
        len,
    };
    if !mem.read(phys, &mut t.buf[..len]) {
        return Err(AcpiError::Unreadable(phys));
    }
    if sum(t.bytes()) != 0 {
        return Err(AcpiError::BadChecksum(phys));
    }
    Ok(t)
}

/// The root: where the SDT entries are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rsdp {
    pub revision: u8,
    /// XSDT when revision >= 2 and the field is set, else RSDT.
    pub root: u64,
    pub xsdt: bool,
}

/// Parses the RSDP at `phys` (checksum of the first 20 bytes, and of all 36 for ACPI 2+).
pub fn parse_rsdp(mem: &dyn PhysRead, phys: u64) -> Result<Rsdp, AcpiError> {
    const V1: usize = 20;
    const V2: usize = mem::size_of::<acpi::rsdp::Rsdp>();
    let mut b = [0u8; V2];
    if !mem.read(phys, &mut b[..V1]) {
        return Err(AcpiError::Unreadable(phys));
    }
    if &b[..8] != b"RSD PTR " {
        return Err(AcpiError::BadSignature(phys));
    }
    if sum(&b[..V1]) != 0 {
        return Err(AcpiError::BadChecksum(phys));
    }
    // Revision 0 is ACPI 1.0, whose RSDP ends after the RSDT address: the rest stays zero.
    if b[15] >= 2 {
        if !mem.read(phys, &mut b) {
            return Err(AcpiError::Unreadable(phys));
        }
        let r: acpi::rsdp::Rsdp = layout_of(&b);
        if ({ r.length } as usize) < V2 || sum(&b) != 0 {
            return Err(AcpiError::BadChecksum(phys));
        }
    }
    let r: acpi::rsdp::Rsdp = layout_of(&b);
    let (revision, xsdt) = (r.revision, r.xsdt_address);
    if revision >= 2 && xsdt != 0 {
        return Ok(Rsdp {
            revision,
            root: xsdt,
            xsdt: true,
        });
    }
    Ok(Rsdp {
        revision,
        root: r.rsdt_address as u64,
        xsdt: false,
    })
}

/// The list of tables under the root.
#[derive(Clone, Debug)]
pub struct TableList {
    pub entries: [(u64, [u8; 4]); MAX_TABLES],
    pub len: usize,
}

impl TableList {
    pub fn iter(&self) -> impl Iterator<Item = &(u64, [u8; 4])> {
        self.entries[..self.len].iter()
    }
    /// The first table with this signature.
    pub fn find(&self, sig: &[u8; 4]) -> Option<u64> {
        self.iter().find(|(_, s)| s == sig).map(|(a, _)| *a)
    }
}

/// Reads the XSDT/RSDT and the signature of each table it lists.
pub fn list_tables(mem: &dyn PhysRead, rsdp: &Rsdp) -> Result<TableList, AcpiError> {
    let root = read_table(mem, rsdp.root)?;
    let expect: &[u8; 4] = if rsdp.xsdt { b"XSDT" } else { b"RSDT" };
    if &root.signature != expect {
        return Err(AcpiError::BadSignature(rsdp.root));
    }
    let width = if rsdp.xsdt { 8 } else { 4 };
    let body = &root.bytes()[HEADER..];
    let mut list = TableList {
        entries: [(0, [0; 4]); MAX_TABLES],
        len: 0,
    };
    for chunk in body.chunks_exact(width).take(MAX_TABLES) {
        let addr = match *chunk {
            [a, b, c, d] => u32::from_le_bytes([a, b, c, d]) as u64,
            _ => u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8])),
        };
        let mut sig = [0u8; 4];
        if addr == 0 || !mem.read(addr, &mut sig) {
            continue;
        }
        list.entries[list.len] = (addr, sig);
        list.len += 1;
    }
    Ok(list)
}

/// A processor's local APIC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalApic {
    pub processor_uid: u32,
    pub apic_id: u32,
    pub enabled: bool,
}

/// An I/O APIC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoApic {
    pub id: u8,
    pub address: u64,
    pub gsi_base: u32,
}

/// Pin polarity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Polarity {
    High,
    Low,
}

/// Pin trigger mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    Edge,
    Level,
}

/// MPS INTI flags: `None` means "conforms to the bus" (ISA: edge/high).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IntiFlags(pub u16);

impl IntiFlags {
    pub fn polarity(self, bus_default: Polarity) -> Polarity {
        match self.0 & 3 {
            1 => Polarity::High,
            3 => Polarity::Low,
            _ => bus_default,
        }
    }
    pub fn trigger(self, bus_default: Trigger) -> Trigger {
        match (self.0 >> 2) & 3 {
            1 => Trigger::Edge,
            3 => Trigger::Level,
            _ => bus_default,
        }
    }
}

/// An interrupt source override: ISA IRQ `source` arrives at `gsi`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Override {
    pub source: u8,
    pub gsi: u32,
    pub flags: IntiFlags,
}

/// A local APIC NMI input (LINT0/1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LapicNmi {
    /// 0xff: all processors.
    pub processor_uid: u8,
    pub lint: u8,
    pub flags: IntiFlags,
}

/// What the MADT says.
#[derive(Clone, Debug)]
pub struct Madt {
    pub lapic_address: u64,
    /// The system also has 8259 PICs (PCAT_COMPAT).
    pub pcat_compat: bool,
    pub cpus: [LocalApic; MAX_CPUS],
    pub cpu_count: usize,
    pub ioapics: [IoApic; MAX_IOAPICS],
    pub ioapic_count: usize,
    pub overrides: [Override; MAX_OVERRIDES],
    pub override_count: usize,
    pub nmis: [LapicNmi; MAX_NMIS],
    pub nmi_count: usize,
}

impl Madt {
    pub fn cpus(&self) -> &[LocalApic] {
        &self.cpus[..self.cpu_count]
    }
    pub fn ioapics(&self) -> &[IoApic] {
        &self.ioapics[..self.ioapic_count]
    }
    pub fn overrides(&self) -> &[Override] {
        &self.overrides[..self.override_count]
    }
    pub fn nmis(&self) -> &[LapicNmi] {
        &self.nmis[..self.nmi_count]
    }

    /// Where ISA IRQ `irq` arrives, with its polarity and trigger mode.
    pub fn isa_irq(&self, irq: u8) -> (u32, Polarity, Trigger) {
        match self.overrides().iter().find(|o| o.source == irq) {
            Some(o) => (
                o.gsi,
                o.flags.polarity(Polarity::High),
                o.flags.trigger(Trigger::Edge),
            ),
            None => (irq as u32, Polarity::High, Trigger::Edge),
        }
    }
}

fn push<T: Copy>(arr: &mut [T], len: &mut usize, v: T) {
    if *len < arr.len() {
        arr[*len] = v;
        *len += 1;
    }
}

/// Checks that the MADT's entries tile its body: each at least a header long and none
/// running past the end. The crate's entry iterator trusts these lengths.
fn check_madt_entries(t: &Table) -> Result<(), AcpiError> {
    let b = t.bytes();
    let mut o = mem::size_of::<acpi_madt::Madt>();
    while o < b.len() {
        let len = b.get(o + 1).copied().unwrap_or(0) as usize;
        if len < mem::size_of::<acpi_madt::EntryHeader>() || o + len > b.len() {
            return Err(AcpiError::BadLength(t.phys));
        }
        o += len;
    }
    Ok(())
}

/// Whether an entry is as long as the layout it is read through; shorter ones are skipped.
fn fits<T>(header: &acpi_madt::EntryHeader) -> bool {
    header.length as usize >= mem::size_of::<T>()
}

/// Parses a MADT ("APIC").
pub fn parse_madt(t: &Table) -> Result<Madt, AcpiError> {
    if &t.signature != b"APIC" || t.bytes().len() < mem::size_of::<acpi_madt::Madt>() {
        return Err(AcpiError::BadSignature(t.phys));
    }
    check_madt_entries(t)?;
    let table: &acpi_madt::Madt = t.layout();
    let mut m = Madt {
        lapic_address: table.local_apic_address as u64,
        pcat_compat: table.supports_8259(),
        cpus: [LocalApic::default(); MAX_CPUS],
        cpu_count: 0,
        ioapics: [IoApic::default(); MAX_IOAPICS],
        ioapic_count: 0,
        overrides: [Override::default(); MAX_OVERRIDES],
        override_count: 0,
        nmis: [LapicNmi::default(); MAX_NMIS],
        nmi_count: 0,
    };
    // SAFETY: the layout lives in `t`'s buffer, which is borrowed (so not moved) for as long
    // as the iterator; the iterator reads the `length - 44` bytes after the fixed part, which
    // are the table's own, and `check_madt_entries` made every entry length fit them.
    let entries = unsafe { Pin::new_unchecked(table) }.entries();
    for entry in entries {
        match entry {
            MadtEntry::LocalApic(e) if fits::<acpi_madt::LocalApicEntry>(&e.header) => {
                let cpu = LocalApic {
                    processor_uid: e.processor_id as u32,
                    apic_id: e.apic_id as u32,
                    enabled: { e.flags } & 1 != 0,
                };
                push(&mut m.cpus, &mut m.cpu_count, cpu);
            }
            MadtEntry::IoApic(e) if fits::<acpi_madt::IoApicEntry>(&e.header) => {
                let io = IoApic {
                    id: e.io_apic_id,
                    address: e.io_apic_address as u64,
                    gsi_base: e.global_system_interrupt_base,
                };
                push(&mut m.ioapics, &mut m.ioapic_count, io);
            }
            MadtEntry::InterruptSourceOverride(e)
                if fits::<acpi_madt::InterruptSourceOverrideEntry>(&e.header) =>
            {
                let ov = Override {
                    source: e.irq,
                    gsi: e.global_system_interrupt,
                    flags: IntiFlags(e.flags),
                };
                push(&mut m.overrides, &mut m.override_count, ov);
            }
            MadtEntry::LocalApicNmi(e) if fits::<acpi_madt::LocalApicNmiEntry>(&e.header) => {
                let nmi = LapicNmi {
                    processor_uid: e.processor_id,
                    flags: IntiFlags(e.flags),
                    lint: e.nmi_line,
                };
                push(&mut m.nmis, &mut m.nmi_count, nmi);
            }
            MadtEntry::LocalApicAddressOverride(e)
                if fits::<acpi_madt::LocalApicAddressOverrideEntry>(&e.header) =>
            {
                m.lapic_address = e.local_apic_address;
            }
            MadtEntry::LocalX2Apic(e) if fits::<acpi_madt::LocalX2ApicEntry>(&e.header) => {
                let cpu = LocalApic {
                    processor_uid: e.processor_uid,
                    apic_id: e.x2apic_id,
                    enabled: { e.flags } & 1 != 0,
                };
                push(&mut m.cpus, &mut m.cpu_count, cpu);
            }
            _ => {}
        }
    }
    Ok(m)
}

/// One PCI segment's enhanced configuration window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ecam {
    pub base: u64,
    pub segment: u16,
    pub bus_start: u8,
    pub bus_end: u8,
}

impl Ecam {
    /// Bytes of the window (1 MiB per bus).
    pub fn len(&self) -> u64 {
        (self.bus_end as u64 - self.bus_start as u64 + 1) << 20
    }
    pub fn is_empty(&self) -> bool {
        self.bus_end < self.bus_start
    }
}

/// Parses an MCFG (a trailing partial entry is ignored).
pub fn parse_mcfg(t: &Table) -> Result<([Ecam; MAX_ECAM], usize), AcpiError> {
    if &t.signature != b"MCFG" || t.bytes().len() < mem::size_of::<Mcfg>() {
        return Err(AcpiError::BadSignature(t.phys));
    }
    let table: &Mcfg = t.layout();
    let mut out = [Ecam::default(); MAX_ECAM];
    let mut n = 0;
    for e in table.entries() {
        let e: &McfgEntry = e;
        let ecam = Ecam {
            base: e.base_address,
            segment: e.pci_segment_group,
            bus_start: e.bus_number_start,
            bus_end: e.bus_number_end,
        };
        if ecam.bus_end >= ecam.bus_start {
            push(&mut out, &mut n, ecam);
        }
    }
    Ok((out, n))
}

/// The HPET description.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hpet {
    pub address: u64,
    pub number: u8,
    pub min_tick: u16,
}

/// Parses an HPET table (the register block must be in memory space).
pub fn parse_hpet(t: &Table) -> Result<Hpet, AcpiError> {
    if &t.signature != b"HPET" || t.bytes().len() < mem::size_of::<HpetTable>() {
        return Err(AcpiError::BadSignature(t.phys));
    }
    let h: &HpetTable = t.layout();
    if h.base_address.address_space != 0 {
        return Err(AcpiError::BadSignature(t.phys));
    }
    Ok(Hpet {
        address: h.base_address.address,
        number: h.hpet_number,
        min_tick: h.clock_tick_unit,
    })
}

/// The ACPI PM timer from the FADT: I/O port and whether it is 32 bits wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PmTimer {
    pub port: u16,
    pub bits32: bool,
}

/// FADT bytes up to and including the flags (the end of an ACPI 1.0 FADT is 116).
const FADT_V1: usize = 116;

/// Parses the FADT ("FACP") for the PM timer block, if it has one in I/O space.
pub fn parse_fadt_pm_timer(t: &Table) -> Result<Option<PmTimer>, AcpiError> {
    if &t.signature != b"FACP" || t.bytes().len() < FADT_V1 {
        return Err(AcpiError::BadSignature(t.phys));
    }
    let f: &Fadt = t.layout();
    let bits32 = { f.flags }.pm_timer_is_32_bit();
    // The crate prefers X_PM_TMR_BLK (FADT revision 2+) and falls back to PM_TMR_BLK; a
    // block outside system I/O space (or an unknown space) leaves the 32-bit port field.
    let block = f.pm_timer_block().ok().flatten();
    let port = match block {
        Some(g) if g.address_space == acpi::address::AddressSpace::SystemIo => g.address,
        _ => f.pm_timer_block as u64,
    };
    Ok((port != 0 && f.pm_timer_length == 4).then_some(PmTimer {
        port: port as u16,
        bits32,
    }))
}

/// Everything the kernel takes from ACPI.
#[derive(Clone, Debug)]
pub struct AcpiInfo {
    pub rsdp: Rsdp,
    pub tables: TableList,
    pub madt: Madt,
    pub ecam: [Ecam; MAX_ECAM],
    pub ecam_count: usize,
    pub hpet: Option<Hpet>,
    pub pm_timer: Option<PmTimer>,
}

impl AcpiInfo {
    pub fn ecam(&self) -> &[Ecam] {
        &self.ecam[..self.ecam_count]
    }
}

/// Parses everything from the RSDP. A MADT is required; MCFG, HPET and FADT are optional,
/// but a present table with a bad checksum is an error.
pub fn parse(mem: &dyn PhysRead, rsdp_phys: u64) -> Result<AcpiInfo, AcpiError> {
    let rsdp = parse_rsdp(mem, rsdp_phys)?;
    let tables = list_tables(mem, &rsdp)?;
    let madt_at = tables.find(b"APIC").ok_or(AcpiError::Missing("MADT"))?;
    let madt = parse_madt(&read_table(mem, madt_at)?)?;
    let (ecam, ecam_count) = match tables.find(b"MCFG") {
        Some(a) => parse_mcfg(&read_table(mem, a)?)?,
        None => ([Ecam::default(); MAX_ECAM], 0),
    };
    let hpet = match tables.find(b"HPET") {
        Some(a) => Some(parse_hpet(&read_table(mem, a)?)?),
        None => None,
    };
    let pm_timer = match tables.find(b"FACP") {
        Some(a) => parse_fadt_pm_timer(&read_table(mem, a)?)?,
        None => None,
    };
    Ok(AcpiInfo {
        rsdp,
        tables,
        madt,
        ecam,
        ecam_count,
        hpet,
        pm_timer,
    })
}

#[cfg(test)]
mod tests;
