//! ACPI static tables: RSDP, XSDT/RSDT, MADT, MCFG, HPET, FADT (PM timer).
//!
//! Parsing works on physical memory reached through [`PhysRead`], so the same code runs
//! on the machine (identity-mapped firmware memory) and in host tests (tables captured
//! from QEMU, see `testdata/`). Every table's checksum is verified; a bad one is an error.

pub mod firmware;

use core::fmt;

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

fn sum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |a, &b| a.wrapping_add(b))
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]))
}

/// A table read into a buffer.
pub struct Table {
    pub phys: u64,
    pub signature: [u8; 4],
    buf: [u8; MAX_TABLE],
    len: usize,
}

impl Table {
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Reads and verifies the table at `phys`.
pub fn read_table(mem: &dyn PhysRead, phys: u64) -> Result<Table, AcpiError> {
    let mut header = [0u8; 36];
    if !mem.read(phys, &mut header) {
        return Err(AcpiError::Unreadable(phys));
    }
    let len = u32_at(&header, 4) as usize;
    if !(36..=MAX_TABLE).contains(&len) {
        return Err(AcpiError::BadLength(phys));
    }
    let mut t = Table {
        phys,
        signature: [header[0], header[1], header[2], header[3]],
        buf: [0; MAX_TABLE],
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
    let mut b = [0u8; 36];
    if !mem.read(phys, &mut b[..20]) {
        return Err(AcpiError::Unreadable(phys));
    }
    if &b[..8] != b"RSD PTR " {
        return Err(AcpiError::BadSignature(phys));
    }
    if sum(&b[..20]) != 0 {
        return Err(AcpiError::BadChecksum(phys));
    }
    let revision = b[15];
    if revision >= 2 {
        if !mem.read(phys, &mut b) {
            return Err(AcpiError::Unreadable(phys));
        }
        if u32_at(&b, 20) < 36 || sum(&b) != 0 {
            return Err(AcpiError::BadChecksum(phys));
        }
        let xsdt = u64_at(&b, 24);
        if xsdt != 0 {
            return Ok(Rsdp {
                revision,
                root: xsdt,
                xsdt: true,
            });
        }
    }
    Ok(Rsdp {
        revision,
        root: u32_at(&b, 16) as u64,
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
    let body = &root.bytes()[36..];
    let mut list = TableList {
        entries: [(0, [0; 4]); MAX_TABLES],
        len: 0,
    };
    for chunk in body.chunks_exact(width).take(MAX_TABLES) {
        let addr = if rsdp.xsdt {
            u64_at(chunk, 0)
        } else {
            u32_at(chunk, 0) as u64
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

/// Parses a MADT ("APIC").
pub fn parse_madt(t: &Table) -> Result<Madt, AcpiError> {
    let b = t.bytes();
    if &t.signature != b"APIC" || b.len() < 44 {
        return Err(AcpiError::BadSignature(t.phys));
    }
    let mut m = Madt {
        lapic_address: u32_at(b, 36) as u64,
        pcat_compat: u32_at(b, 40) & 1 != 0,
        cpus: [LocalApic::default(); MAX_CPUS],
        cpu_count: 0,
        ioapics: [IoApic::default(); MAX_IOAPICS],
        ioapic_count: 0,
        overrides: [Override::default(); MAX_OVERRIDES],
        override_count: 0,
        nmis: [LapicNmi::default(); MAX_NMIS],
        nmi_count: 0,
    };
    let mut o = 44;
    while o + 2 <= b.len() {
        let (kind, len) = (b[o], b[o + 1] as usize);
        if len < 2 || o + len > b.len() {
            return Err(AcpiError::BadLength(t.phys));
        }
        let e = &b[o..o + len];
        match (kind, len) {
            (0, 8..) => {
                let cpu = LocalApic {
                    processor_uid: e[2] as u32,
                    apic_id: e[3] as u32,
                    enabled: u32_at(e, 4) & 1 != 0,
                };
                push(&mut m.cpus, &mut m.cpu_count, cpu);
            }
            (1, 12..) => {
                let io = IoApic {
                    id: e[2],
                    address: u32_at(e, 4) as u64,
                    gsi_base: u32_at(e, 8),
                };
                push(&mut m.ioapics, &mut m.ioapic_count, io);
            }
            (2, 10..) => {
                let ov = Override {
                    source: e[3],
                    gsi: u32_at(e, 4),
                    flags: IntiFlags(u16_at(e, 8)),
                };
                push(&mut m.overrides, &mut m.override_count, ov);
            }
            (4, 6..) => {
                let nmi = LapicNmi {
                    processor_uid: e[2],
                    flags: IntiFlags(u16_at(e, 3)),
                    lint: e[5],
                };
                push(&mut m.nmis, &mut m.nmi_count, nmi);
            }
            (5, 12..) => m.lapic_address = u64_at(e, 4),
            (9, 16..) => {
                let cpu = LocalApic {
                    processor_uid: u32_at(e, 12),
                    apic_id: u32_at(e, 4),
                    enabled: u32_at(e, 8) & 1 != 0,
                };
                push(&mut m.cpus, &mut m.cpu_count, cpu);
            }
            _ => {}
        }
        o += len;
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

/// Parses an MCFG.
pub fn parse_mcfg(t: &Table) -> Result<([Ecam; MAX_ECAM], usize), AcpiError> {
    let b = t.bytes();
    if &t.signature != b"MCFG" || b.len() < 44 {
        return Err(AcpiError::BadSignature(t.phys));
    }
    let mut out = [Ecam::default(); MAX_ECAM];
    let mut n = 0;
    for e in b[44..].as_chunks::<16>().0 {
        let ecam = Ecam {
            base: u64_at(e, 0),
            segment: u16_at(e, 8),
            bus_start: e[10],
            bus_end: e[11],
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
    let b = t.bytes();
    if &t.signature != b"HPET" || b.len() < 56 || b[40] != 0 {
        return Err(AcpiError::BadSignature(t.phys));
    }
    Ok(Hpet {
        address: u64_at(b, 44),
        number: b[52],
        min_tick: u16_at(b, 53),
    })
}

/// The ACPI PM timer from the FADT: I/O port and whether it is 32 bits wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PmTimer {
    pub port: u16,
    pub bits32: bool,
}

/// Parses the FADT ("FACP") for the PM timer block, if it has one in I/O space.
pub fn parse_fadt_pm_timer(t: &Table) -> Result<Option<PmTimer>, AcpiError> {
    let b = t.bytes();
    if &t.signature != b"FACP" || b.len() < 116 {
        return Err(AcpiError::BadSignature(t.phys));
    }
    let flags = u32_at(b, 112);
    let bits32 = flags & (1 << 8) != 0;
    // X_PM_TMR_BLK (generic address) wins when present and in system I/O space.
    if b.len() >= 220 && b[208] == 1 && u64_at(b, 212) != 0 {
        return Ok(Some(PmTimer {
            port: u64_at(b, 212) as u16,
            bits32,
        }));
    }
    let port = u32_at(b, 76);
    Ok((port != 0 && b[91] == 4).then_some(PmTimer {
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
