//! Host tests: a fake configuration space with BAR sizing behaviour and bridges.

use super::*;
use core::cell::RefCell;
use std::collections::BTreeMap;
use std::string::String;
use std::vec::Vec;

/// One fake function: 256 bytes of config space plus the read-only bits of each BAR.
#[derive(Clone)]
pub struct FakeFn {
    pub space: [u32; 64],
    /// For each BAR dword: the bits that are hardwired (size mask complement and type).
    pub bar_fixed: [u32; 6],
}

#[derive(Default)]
pub struct FakeConfig {
    pub fns: RefCell<BTreeMap<Bdf, FakeFn>>,
    /// Counts writes to BARs while memory or I/O decoding was enabled (must stay 0).
    pub probes_while_decoding: RefCell<u32>,
}

impl ConfigAccess for FakeConfig {
    fn read32(&self, bdf: Bdf, offset: u16) -> u32 {
        self.fns
            .borrow()
            .get(&bdf)
            .map_or(0xffff_ffff, |f| f.space[offset as usize / 4])
    }
    fn write32(&self, bdf: Bdf, offset: u16, value: u32) {
        let mut fns = self.fns.borrow_mut();
        let Some(f) = fns.get_mut(&bdf) else { return };
        let i = offset as usize / 4;
        let bars = if f.space[3] >> 16 & 0x7f == 1 { 2 } else { 6 };
        if (4..4 + bars).contains(&i) {
            if f.space[1] & 3 != 0 {
                *self.probes_while_decoding.borrow_mut() += 1;
            }
            let fixed = f.bar_fixed[i - 4];
            // Size bits read back as zero; the type bits (within the low nibble) are read-only.
            f.space[i] = (value & !fixed) | (f.space[i] & fixed & 0xf);
        } else if i == 1 {
            // Command is RW, status bits are RW1C (ignored here).
            f.space[1] = (f.space[1] & 0xffff_0000) | (value & 0xffff);
        } else {
            f.space[i] = value;
        }
    }
}

pub fn function(vendor: u16, device: u16, class: u32, header: u8) -> FakeFn {
    let mut space = [0u32; 64];
    space[0] = (device as u32) << 16 | vendor as u32;
    space[2] = class << 8;
    space[3] = (header as u32) << 16;
    // Unimplemented BARs are hardwired to zero.
    FakeFn {
        space,
        bar_fixed: [u32::MAX; 6],
    }
}

fn bdf(bus: u8, device: u8, function: u8) -> Bdf {
    Bdf {
        bus,
        device,
        function,
    }
}

/// A machine like QEMU's: host bridge, a ConnectX-3-like function behind a bridge on bus 1
/// with a 64-bit prefetchable BAR, MSI-X and PCIe capabilities, and an I/O BAR device.
pub fn sample() -> FakeConfig {
    let cfg = FakeConfig::default();
    let mut fns = cfg.fns.borrow_mut();
    fns.insert(bdf(0, 0, 0), function(0x8086, 0x29c0, 0x060000, 0));
    // A multi-function device: function 0 with an I/O BAR and a 32-bit BAR, function 3 too.
    let mut ide = function(0x8086, 0x2922, 0x010601, 0x80);
    ide.space[4] = 0xc041;
    ide.bar_fixed[0] = 0x1f | 1;
    ide.space[5] = 0xfebd_1000;
    ide.bar_fixed[1] = 0xfff;
    ide.space[0x3c / 4] = 0x0000_010a; // pin A, line 10
    fns.insert(bdf(0, 0x1f, 2), ide.clone());
    fns.insert(bdf(0, 0x1f, 0), function(0x8086, 0x2918, 0x060100, 0x80));
    // Bridge 00:1c.0 -> bus 1.
    let mut br = function(0x8086, 0x2940, 0x060400, 1);
    br.space[0x18 / 4] = 0x0001_0100; // subordinate 1, secondary 1, primary 0
    fns.insert(bdf(0, 0x1c, 0), br);
    // 01:00.0: mlx4-like.
    let mut hca = function(0x15b3, 0x1003, 0x0c0600, 0);
    hca.space[4] = 0xfe00_000c; // mem64 pref, low half
    hca.bar_fixed[0] = 0x000f_ffff; // 1 MiB
    hca.space[5] = 0;
    hca.bar_fixed[1] = 0;
    hca.space[6] = 0x0000_000c; // BAR2: mem64 pref at 0x8_0000_0000, 8 MiB
    hca.bar_fixed[2] = 0x007f_ffff;
    hca.space[7] = 0x8;
    hca.bar_fixed[3] = 0;
    hca.space[1] = 0x0010_0000; // status: capability list
    hca.space[0x34 / 4] = 0x40;
    hca.space[0x40 / 4] = 0x0003_6001; // PM, next 0x60
    hca.space[0x60 / 4] = 0x007f_9c10; // PCIe, next 0x9c
    hca.space[0x9c / 4] = 0x007f_0011; // MSI-X, next 0, 128 entries
    hca.space[0xa0 / 4] = 0x0007_c000; // table BAR0 + 0x7c000
    hca.space[0xa4 / 4] = 0x0007_d000; // PBA BAR0 + 0x7d000
    hca.space[0x3c / 4] = 0x0000_010b;
    fns.insert(bdf(1, 0, 0), hca);
    drop(fns);
    cfg
}

#[test]
fn decode_bar_kinds() {
    assert_eq!(
        decode_bar(0, 0xc041, 0xffff_ffe1, 0, 0),
        Some(Bar {
            index: 0,
            kind: BarKind::Io,
            prefetchable: false,
            address: 0xc040,
            size: 0x20
        })
    );
    // 16-bit I/O decoder: upper half reads zero.
    assert_eq!(decode_bar(1, 0xc001, 0x0000_fff1, 0, 0).unwrap().size, 0x10);
    assert_eq!(
        decode_bar(2, 0xfebd_1000, 0xffff_f000, 0, 0),
        Some(Bar {
            index: 2,
            kind: BarKind::Mem32,
            prefetchable: false,
            address: 0xfebd_1000,
            size: 0x1000
        })
    );
    assert_eq!(
        decode_bar(0, 0xfe00_000c, 0xfff0_000c, 0x1, 0xffff_ffff),
        Some(Bar {
            index: 0,
            kind: BarKind::Mem64,
            prefetchable: true,
            address: 0x1_fe00_0000,
            size: 0x10_0000
        })
    );
    // A 64-bit BAR larger than 4 GiB.
    assert_eq!(
        decode_bar(0, 0x0000_000c, 0x0000_000c, 0x40, 0xffff_fffc)
            .unwrap()
            .size,
        0x4_0000_0000
    );
    assert_eq!(decode_bar(3, 0, 0, 0, 0), None);
    assert_eq!(decode_bar(3, 0x1, 0x1, 0, 0), None);
}

#[test]
fn enumeration_walks_bridges_sizes_bars_and_reads_caps() {
    let cfg = sample();
    let mut found = Vec::new();
    let n = enumerate(&cfg, 0, &mut |f| found.push(*f));
    assert_eq!(n, 5);
    let bdfs: Vec<String> = found.iter().map(|f| std::format!("{}", f.bdf)).collect();
    assert_eq!(
        bdfs,
        ["00:00.0", "00:1c.0", "01:00.0", "00:1f.0", "00:1f.2"]
    );
    assert_eq!(*cfg.probes_while_decoding.borrow(), 0);

    let hca = found.iter().find(|f| f.vendor == 0x15b3).unwrap();
    let bars: Vec<Bar> = hca.bars().copied().collect();
    assert_eq!(bars.len(), 2, "{bars:x?}");
    assert_eq!(
        bars[0],
        Bar {
            index: 0,
            kind: BarKind::Mem64,
            prefetchable: true,
            address: 0xfe00_0000,
            size: 0x10_0000
        }
    );
    assert_eq!(
        bars[1],
        Bar {
            index: 2,
            kind: BarKind::Mem64,
            prefetchable: true,
            address: 0x8_0000_0000,
            size: 0x80_0000
        }
    );
    assert_eq!(hca.find_cap(cap::PCIE), Some(0x60));
    assert_eq!(
        hca.msix,
        Some(MsixInfo {
            cap_offset: 0x9c,
            entries: 128,
            table_bar: 0,
            table_offset: 0x7c000,
            pba_bar: 0,
            pba_offset: 0x7d000
        })
    );
    // BAR values are restored after probing.
    assert_eq!(cfg.read32(hca.bdf, 0x10), 0xfe00_000c);
    assert_eq!(cfg.read32(hca.bdf, 0x1c), 0x8);

    let mut text = String::new();
    hca.describe(&mut text).unwrap();
    assert_eq!(
        text,
        "pci 01:00.0 15b3:1003 class 0c0600 pin A line 11\n\
         pci   bar0 mem64 pref 0xfe000000 size 0x100000\n\
         pci   bar2 mem64 pref 0x800000000 size 0x800000\n\
         pci   caps pm@0x40 pcie@0x60 msix@0x9c\n\
         pci   msix entries 128 table bar0+0x7c000 pba bar0+0x7d000\n"
    );
    let ide = found.iter().find(|f| f.bdf == bdf(0, 0x1f, 2)).unwrap();
    let mut text = String::new();
    ide.describe(&mut text).unwrap();
    assert_eq!(
        text,
        "pci 00:1f.2 8086:2922 class 010601 pin A line 10\npci   bar0 io 0xc040 size 0x20\npci   bar1 mem32 0xfebd1000 size 0x1000\n"
    );
    assert!(found[0].is_host_bridge());
}

#[test]
fn enable_sets_memory_and_bus_master() {
    let cfg = sample();
    let b = bdf(1, 0, 0);
    enable(&cfg, b, true);
    let cmd = cfg.read16(b, regs::COMMAND);
    assert_eq!(
        cmd,
        regs::CMD_MEMORY | regs::CMD_BUS_MASTER | regs::CMD_INTX_DISABLE
    );
    // Status (upper half) untouched by the write.
    assert_eq!(cfg.read16(b, regs::STATUS), 0x10);
    let f = read_function(&cfg, b);
    let info = f.msix.unwrap();
    msix::enable(&cfg, b, &info);
    assert_eq!(cfg.read16(b, 0x9e), 0x807f);
    msix::set_control(&cfg, b, &info, true, true);
    assert_eq!(cfg.read16(b, 0x9e), 0xc07f);
}

#[test]
fn save_and_restore_around_a_reset() {
    let cfg = sample();
    let b = bdf(1, 0, 0);
    enable(&cfg, b, false);
    // PCIe Device Control (cap 0x60 + 8) with max payload bits set.
    cfg.write16(b, 0x68, 0x2810);
    cfg.fns.borrow_mut().get_mut(&b).unwrap().space[22] = 0xdead_beef;
    let saved = save_config(&cfg, b);
    // A reset clears the header (BARs, command) and the PCIe control registers.
    {
        let mut fns = cfg.fns.borrow_mut();
        let f = fns.get_mut(&b).unwrap();
        for i in [1usize, 4, 5, 6, 7, 15] {
            f.space[i] &= 0xffff_0000;
        }
        f.space[4] = 0xc; // type bits survive
        f.space[6] = 0xc;
        f.space[0x68 / 4] = 0;
        f.space[22] = 0x1234;
    }
    restore_config(&cfg, b, &saved);
    assert_eq!(cfg.read32(b, 0x10), 0xfe00_000c);
    assert_eq!(cfg.read32(b, 0x18), 0x0000_000c);
    assert_eq!(cfg.read32(b, 0x1c), 0x8);
    assert_eq!(cfg.read16(b, 0x68), 0x2810);
    assert_eq!(
        cfg.read16(b, regs::COMMAND),
        regs::CMD_MEMORY | regs::CMD_BUS_MASTER
    );
    assert_eq!(cfg.read8(b, regs::INTERRUPT_LINE), 11);
    // Dword 22 is neither saved nor restored.
    assert_eq!(cfg.read32(b, 22 * 4), 0x1234);
}

#[test]
fn bar_mappability() {
    let io = Bar {
        index: 1,
        kind: BarKind::Io,
        prefetchable: false,
        address: 0xc000,
        size: 0x40,
    };
    let unassigned = Bar {
        index: 0,
        kind: BarKind::Mem64,
        prefetchable: true,
        address: 0,
        size: 0x100000,
    };
    let ok = Bar {
        index: 2,
        kind: BarKind::Mem64,
        prefetchable: true,
        address: 0x8_0000_0000,
        size: 0x800000,
    };
    assert_eq!(mappable(&io), Err(BarError::IoBar(1)));
    assert_eq!(mappable(&unassigned), Err(BarError::Unassigned(0)));
    assert_eq!(mappable(&ok), Ok(()));
}

#[test]
fn looping_capability_list_is_bounded() {
    let cfg = sample();
    let b = bdf(1, 0, 0);
    // Point the MSI-X capability's next back at the first.
    cfg.fns.borrow_mut().get_mut(&b).unwrap().space[0x9c / 4] = 0x007f_4011;
    let caps = capabilities(&cfg, b);
    assert_eq!(caps.iter().flatten().count(), MAX_CAPS);
}

#[test]
fn looping_bridges_are_bounded() {
    let cfg = sample();
    // A bridge on bus 1 claiming bus 1 again, and one pointing back at bus 0.
    let mut br = function(0x1234, 0x0001, 0x060400, 1);
    br.space[0x18 / 4] = 0x0001_0101;
    cfg.fns.borrow_mut().insert(bdf(1, 1, 0), br);
    let n = enumerate(&cfg, 0, &mut |_| {});
    assert_eq!(n, 6);
}

#[test]
fn unusual_bar_types_decode_without_stopping() {
    // Memory type 01b (below 1 MiB, PCI 2.x legacy).
    assert_eq!(
        decode_bar(0, 0x000c_8002, 0xffff_c002, 0, 0),
        Some(Bar {
            index: 0,
            kind: BarKind::Mem1M,
            prefetchable: false,
            address: 0x000c_8000,
            size: 0x4000
        })
    );
    // The reserved memory type 11b is read as a 32-bit BAR.
    assert_eq!(
        decode_bar(1, 0xfebf_0006, 0xffff_f006, 0, 0).map(|b| (b.kind, b.size)),
        Some((BarKind::Mem32, 0x1000))
    );
    // A 64-bit BAR whose probe reads back zero in both halves is unimplemented.
    assert_eq!(decode_bar(2, 0x4, 0x4, 0, 0), None);
}
