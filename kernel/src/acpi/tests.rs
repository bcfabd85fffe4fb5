//! ACPI parsing against tables captured from QEMU 7.2 (SeaBIOS) with `acpi_dump=true`:
//! `testdata/q35.txt` (`-machine q35`) and `testdata/pc.txt` (`-machine pc`).

use super::*;
use crate::arch::ioapic::pci_intx_route;
use std::collections::BTreeMap;

/// Physical memory made of the dumped bytes, and where the RSDP is (the dump's first line).
struct Captured(BTreeMap<u64, u8>, u64);

impl Captured {
    fn load(text: &str) -> Self {
        let mut mem = BTreeMap::new();
        let mut first = None;
        for line in text.lines() {
            let mut words = line.split_whitespace();
            assert_eq!(words.next(), Some("acpi-dump"));
            let addr = u64::from_str_radix(words.next().unwrap(), 16).unwrap();
            first.get_or_insert(addr);
            for (i, b) in words.enumerate() {
                mem.insert(addr + i as u64, u8::from_str_radix(b, 16).unwrap());
            }
        }
        Captured(mem, first.unwrap())
    }
    fn rsdp(&self) -> u64 {
        self.1
    }
}

impl PhysRead for Captured {
    fn read(&self, phys: u64, buf: &mut [u8]) -> bool {
        for (i, b) in buf.iter_mut().enumerate() {
            match self.0.get(&(phys + i as u64)) {
                Some(v) => *b = *v,
                None => return false,
            }
        }
        true
    }
}

fn q35() -> Captured {
    Captured::load(include_str!("testdata/q35.txt"))
}
fn pc() -> Captured {
    Captured::load(include_str!("testdata/pc.txt"))
}

#[test]
fn q35_tables() {
    let mem = q35();
    let info = parse(&mem, mem.rsdp()).unwrap();
    assert_eq!(
        info.rsdp,
        Rsdp {
            revision: 0,
            root: 0x1ffe_22e1,
            xsdt: false
        }
    );
    let sigs: std::vec::Vec<&[u8; 4]> = info.tables.iter().map(|(_, s)| s).collect();
    assert_eq!(sigs, [b"FACP", b"APIC", b"HPET", b"MCFG", b"WAET"]);
    let m = &info.madt;
    assert_eq!(m.lapic_address, 0xfee0_0000);
    assert!(m.pcat_compat);
    assert_eq!(
        m.cpus(),
        &[LocalApic {
            processor_uid: 0,
            apic_id: 0,
            enabled: true
        }]
    );
    assert_eq!(
        m.ioapics(),
        &[IoApic {
            id: 0,
            address: 0xfec0_0000,
            gsi_base: 0
        }]
    );
    assert_eq!(
        m.overrides()[0],
        Override {
            source: 0,
            gsi: 2,
            flags: IntiFlags(0)
        }
    );
    assert_eq!(m.isa_irq(0), (2, Polarity::High, Trigger::Edge));
    assert_eq!(m.isa_irq(4), (4, Polarity::High, Trigger::Edge));
    assert_eq!(m.isa_irq(9), (9, Polarity::High, Trigger::Level));
    assert_eq!(
        m.nmis(),
        &[LapicNmi {
            processor_uid: 0xff,
            lint: 1,
            flags: IntiFlags(0)
        }]
    );
    assert_eq!(
        info.ecam(),
        &[Ecam {
            base: 0xb000_0000,
            segment: 0,
            bus_start: 0,
            bus_end: 0xff
        }]
    );
    assert_eq!(info.ecam()[0].len(), 256 << 20);
    assert_eq!(info.hpet.map(|h| h.address), Some(0xfed0_0000));
    assert_eq!(
        info.pm_timer,
        Some(PmTimer {
            port: 0x608,
            bits32: false
        })
    );
    // INTx line 11 has an override in QEMU's MADT (level, active high).
    assert_eq!(
        pci_intx_route(m, 11).unwrap(),
        (11, Polarity::High, Trigger::Level)
    );
    assert!(pci_intx_route(m, 0xff).is_err());
}

#[test]
fn pc_tables() {
    let mem = pc();
    let info = parse(&mem, mem.rsdp()).unwrap();
    assert!(!info.rsdp.xsdt);
    assert_eq!(info.ecam(), &[], "no MCFG on i440fx: port I/O");
    let m = &info.madt;
    assert_eq!(m.ioapics().len(), 1);
    assert_eq!(m.isa_irq(0).0, 2);
    let sources: std::vec::Vec<u8> = m.overrides().iter().map(|o| o.source).collect();
    assert_eq!(sources, [0, 5, 9, 10, 11]);
    assert_eq!(info.hpet.map(|h| h.address), Some(0xfed0_0000));
    assert_eq!(info.pm_timer.map(|p| p.port), Some(0x608));
    // An INTx line without an override keeps PCI's default polarity and trigger.
    assert_eq!(
        pci_intx_route(m, 3).unwrap(),
        (3, Polarity::Low, Trigger::Level)
    );
}

#[test]
fn corrupt_tables_are_rejected() {
    let mut mem = q35();
    let rsdp = mem.rsdp();
    let madt = parse(&mem, rsdp).unwrap().tables.find(b"APIC").unwrap();
    // One flipped byte inside the MADT body.
    *mem.0.get_mut(&(madt + 50)).unwrap() ^= 0x40;
    assert_eq!(parse(&mem, rsdp).unwrap_err(), AcpiError::BadChecksum(madt));
    // A bad RSDP checksum.
    let mut mem = q35();
    *mem.0.get_mut(&(rsdp + 9)).unwrap() ^= 1;
    assert_eq!(parse(&mem, rsdp).unwrap_err(), AcpiError::BadChecksum(rsdp));
    // Not an RSDP at all.
    let mem = q35();
    assert_eq!(
        parse(&mem, rsdp + 16).unwrap_err(),
        AcpiError::BadSignature(rsdp + 16)
    );
    // Unreadable memory.
    assert_eq!(parse(&mem, 0x10).unwrap_err(), AcpiError::Unreadable(0x10));
}

#[test]
fn madt_entry_with_bad_length_is_an_error() {
    let mem = q35();
    let at = parse(&mem, mem.rsdp())
        .unwrap()
        .tables
        .find(b"APIC")
        .unwrap();
    let mut t = read_table(&mem, at).unwrap();
    // First entry's length byte set to 0 (would loop forever if trusted).
    t.buf[45] = 0;
    assert_eq!(parse_madt(&t).unwrap_err(), AcpiError::BadLength(at));
    t.buf[45] = 0xff;
    assert_eq!(parse_madt(&t).unwrap_err(), AcpiError::BadLength(at));
}

#[test]
fn inti_flags() {
    assert_eq!(IntiFlags(0).polarity(Polarity::Low), Polarity::Low);
    assert_eq!(IntiFlags(0xd).polarity(Polarity::Low), Polarity::High);
    assert_eq!(IntiFlags(0xd).trigger(Trigger::Edge), Trigger::Level);
    assert_eq!(IntiFlags(0xf).polarity(Polarity::High), Polarity::Low);
    assert_eq!(IntiFlags(0x5).trigger(Trigger::Level), Trigger::Edge);
}

#[test]
fn q35_uefi_tables_through_the_xsdt() {
    let mem = Captured::load(include_str!("testdata/q35-uefi.txt"));
    let info = parse(&mem, mem.rsdp()).unwrap();
    assert_eq!(
        info.rsdp,
        Rsdp {
            revision: 2,
            root: 0x1fb7_d0e8,
            xsdt: true
        }
    );
    let sigs: std::vec::Vec<&[u8; 4]> = info.tables.iter().map(|(_, s)| s).collect();
    assert_eq!(sigs, [b"FACP", b"APIC", b"HPET", b"MCFG", b"WAET", b"BGRT"]);
    assert_eq!(
        info.madt.ioapics(),
        &[IoApic {
            id: 0,
            address: 0xfec0_0000,
            gsi_base: 0
        }]
    );
    assert_eq!(info.madt.isa_irq(0).0, 2);
    assert_eq!(
        info.ecam(),
        &[Ecam {
            base: 0xb000_0000,
            segment: 0,
            bus_start: 0,
            bus_end: 0xff
        }]
    );
    assert_eq!(info.hpet.map(|h| h.address), Some(0xfed0_0000));
    // Without an XSDT address the parser falls back to the RSDT address.
    let rsdt = parse_rsdp(&mem, mem.rsdp()).unwrap();
    let mut mem32 = Captured(mem.0.clone(), mem.1);
    // Zero the XSDT address and fix the extended checksum: the parser falls back to the RSDT.
    let r = mem.rsdp();
    for i in 24..32 {
        mem32.0.insert(r + i, 0);
    }
    let sum: u8 = (0..36)
        .map(|i| mem32.0[&(r + i)])
        .fold(0u8, |a, b| a.wrapping_add(b));
    let c = mem32.0[&(r + 32)].wrapping_sub(sum);
    mem32.0.insert(r + 32, c);
    let fallback = parse_rsdp(&mem32, r).unwrap();
    assert!(rsdt.xsdt && !fallback.xsdt);
    let rsdt_field = u32::from_le_bytes(core::array::from_fn(|i| mem.0[&(r + 16 + i as u64)]));
    assert_eq!(fallback.root, rsdt_field as u64);
}

/// The bytes of a table kept as `iasl -d` "Raw Table Data" lines (`OFFSET: XX XX ... // text`).
fn raw_table(text: &str) -> std::vec::Vec<u8> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .flat_map(|(_, rest)| {
            let hex = rest.split("//").next().unwrap();
            hex.split_whitespace()
                .map(|b| u8::from_str_radix(b, 16).unwrap())
                .collect::<std::vec::Vec<_>>()
        })
        .collect()
}

/// Puts `bytes` at `at`, with the checksum byte (offset `sum_at`) set so that the first
/// `len` bytes add up to zero.
fn place(
    mem: &mut BTreeMap<u64, u8>,
    at: u64,
    mut bytes: std::vec::Vec<u8>,
    sum_at: usize,
    len: usize,
) {
    bytes[sum_at] = 0;
    let s = bytes[..len].iter().fold(0u8, |a, &b| a.wrapping_add(b));
    bytes[sum_at] = s.wrapping_neg();
    for (i, b) in bytes.into_iter().enumerate() {
        mem.insert(at + i as u64, b);
    }
}

/// The MADT, MCFG, HPET and FADT of a Supermicro dual-socket Xeon server, byte for byte
/// (`testdata/supermicro/README.md`), at addresses chosen here, under an ACPI 2.0 RSDP and
/// an XSDT built here (the published dump has neither).
fn supermicro() -> Captured {
    let tables = [
        (
            0x6a00_0000u64,
            raw_table(include_str!("testdata/supermicro/facp.hex")),
        ),
        (
            0x6a00_1000,
            raw_table(include_str!("testdata/supermicro/apic.hex")),
        ),
        (
            0x6a00_2000,
            raw_table(include_str!("testdata/supermicro/hpet.hex")),
        ),
        (
            0x6a00_3000,
            raw_table(include_str!("testdata/supermicro/mcfg.hex")),
        ),
    ];
    let mut mem = BTreeMap::new();
    let mut xsdt = b"XSDT".to_vec();
    xsdt.extend_from_slice(&((36 + 8 * tables.len()) as u32).to_le_bytes());
    xsdt.extend_from_slice(&[1, 0]);
    xsdt.extend_from_slice(b"SUPERMSMCI--MB");
    xsdt.extend_from_slice(&[0; 12]);
    for (at, bytes) in tables {
        xsdt.extend_from_slice(&at.to_le_bytes());
        for (i, b) in bytes.into_iter().enumerate() {
            mem.insert(at + i as u64, b);
        }
    }
    let xsdt_at = 0x6a00_4000u64;
    let len = xsdt.len();
    place(&mut mem, xsdt_at, xsdt, 9, len);
    let rsdp_at = 0xf_0580u64;
    let mut rsdp = b"RSD PTR ".to_vec();
    rsdp.push(0);
    rsdp.extend_from_slice(b"SUPERM");
    rsdp.push(2);
    rsdp.extend_from_slice(&0u32.to_le_bytes());
    rsdp.extend_from_slice(&36u32.to_le_bytes());
    rsdp.extend_from_slice(&xsdt_at.to_le_bytes());
    rsdp.extend_from_slice(&[0; 4]);
    place(&mut mem, rsdp_at, rsdp.clone(), 8, 20);
    let first = (0..20)
        .map(|i| mem[&(rsdp_at + i)])
        .collect::<std::vec::Vec<_>>();
    let mut whole = first;
    whole.extend_from_slice(&rsdp[20..]);
    place(&mut mem, rsdp_at, whole, 32, 36);
    Captured(mem, rsdp_at)
}

#[test]
fn supermicro_server_tables() {
    let mem = supermicro();
    let info = parse(&mem, mem.rsdp()).unwrap();
    assert!(info.rsdp.xsdt);
    let sigs: std::vec::Vec<&[u8; 4]> = info.tables.iter().map(|(_, s)| s).collect();
    assert_eq!(sigs, [b"FACP", b"APIC", b"HPET", b"MCFG"]);
    let m = &info.madt;
    assert_eq!(m.lapic_address, 0xfee0_0000);
    assert!(m.pcat_compat);
    // Two sockets of 24 cores with two threads each: processor UIDs 0-0x2f and 0x40-0x6f,
    // the first thread of every core listed first.
    assert_eq!(m.cpus().len(), 96);
    assert!(m.cpus().iter().all(|c| c.enabled));
    assert_eq!(
        m.cpus()[1],
        LocalApic {
            processor_uid: 1,
            apic_id: 2,
            enabled: true
        }
    );
    assert_eq!(
        m.cpus()[24],
        LocalApic {
            processor_uid: 0x40,
            apic_id: 0x40,
            enabled: true
        }
    );
    let mut ids: std::vec::Vec<u32> = m.cpus().iter().map(|c| c.apic_id).collect();
    ids.sort_unstable();
    let expect: std::vec::Vec<u32> = (0..0x30).chain(0x40..0x70).collect();
    assert_eq!(ids, expect);
    assert_eq!(
        m.ioapics(),
        &[IoApic {
            id: 8,
            address: 0xfec0_0000,
            gsi_base: 0
        }]
    );
    assert_eq!(
        m.overrides(),
        &[
            Override {
                source: 0,
                gsi: 2,
                flags: IntiFlags(0)
            },
            Override {
                source: 9,
                gsi: 9,
                flags: IntiFlags(0xd)
            }
        ]
    );
    assert_eq!(m.isa_irq(9), (9, Polarity::High, Trigger::Level));
    // The local APIC NMI for all processors; the x2APIC NMI entry after it is not used.
    assert_eq!(
        m.nmis(),
        &[LapicNmi {
            processor_uid: 0xff,
            lint: 1,
            flags: IntiFlags(5)
        }]
    );
    assert_eq!(
        info.ecam(),
        &[Ecam {
            base: 0x8000_0000,
            segment: 0,
            bus_start: 0,
            bus_end: 0xff
        }]
    );
    assert_eq!(
        info.hpet,
        Some(Hpet {
            address: 0xfed0_0000,
            number: 0,
            min_tick: 0x37ee
        })
    );
    // FADT revision 6: X_PM_TMR_BLK in system I/O at 0x508, a 24-bit timer.
    assert_eq!(
        info.pm_timer,
        Some(PmTimer {
            port: 0x508,
            bits32: false
        })
    );
}
