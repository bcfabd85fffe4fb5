//! PCI, BAR0 registers, HCR and firmware/ICM commands, driven by hand (§1-§3).

mod harness;
use harness::*;

#[test]
fn pci_identity_bars_pin_and_msix_capability() {
    let mut r = Rig::new(1, true);
    let h = r.hca(0);
    assert_eq!(r.m.cfg_read(h, 0, 2), 0x15b3);
    assert_eq!(r.m.cfg_read(h, 2, 2), 0x1003);
    assert_eq!(r.m.cfg_read(h, 0x3d, 1), 1, "interrupt pin A");
    // BAR sizing: all-ones -> size mask, 64-bit memory type.
    r.m.cfg_write(h, 0x10, 4, 0xffff_ffff);
    assert_eq!(r.m.cfg_read(h, 0x10, 4), 0xfff0_0004, "BAR0 1 MiB, 64-bit");
    r.m.cfg_write(h, 0x18, 4, 0xffff_ffff);
    assert_eq!(
        r.m.cfg_read(h, 0x18, 4),
        0xff80_000c,
        "BAR2 8 MiB, 64-bit prefetchable"
    );
    r.m.setup_pci(h);
    let (b0, b2) = sim::inproc::default_bar_addresses(0);
    assert_eq!(
        r.m.fabric_ref().bar_decode(h, b0 + 0x80680),
        Some((0, 0x80680))
    );
    assert_eq!(r.m.fabric_ref().bar_decode(h, b2 + 0x14), Some((2, 0x14)));
    // MSI-X capability: cap list 0x60 (PCIe) -> 0x9C (MSI-X), table in BAR0 at 0x7C000.
    assert_eq!(r.m.cfg_read(h, 0x34, 1), 0x60);
    assert_eq!(r.m.cfg_read(h, 0x61, 1), 0x9c);
    assert_eq!(r.m.cfg_read(h, 0x9c, 1), 0x11);
    assert_eq!(r.m.cfg_read(h, 0x9e, 2) & 0x7ff, 127);
    assert_eq!(r.m.cfg_read(h, 0xa0, 4), 0x7c000);
    // Memory space off: decode stops and MMIO is a violation.
    r.m.cfg_write(h, 4, 2, 0);
    assert_eq!(r.m.fabric_ref().bar_decode(h, b0), None);
    r.m.mmio_read(h, 0, 0x8069c, 4);
    assert!(r
        .violations(0)
        .iter()
        .any(|v| v.contains("memory space disabled")));
}

#[test]
fn ownership_semaphore_and_reset() {
    let mut r = Rig::new(1, true);
    let h = r.hca(0);
    assert_eq!(
        r.m.mmio_read(h, 0, 0x8069c, 4),
        0,
        "first read claims ownership"
    );
    assert_ne!(r.m.mmio_read(h, 0, 0x8069c, 4), 0, "owned now");
    assert_eq!(r.m.mmio_read(h, 0, 0xf03fc, 4), 0, "semaphore taken");
    assert_ne!(r.m.mmio_read(h, 0, 0xf03fc, 4), 0);
    r.m.mmio_write(h, 0, 0xf0010, 4, be32(1));
    // Reset: config space back to power-on (BARs and command cleared), ownership kept.
    assert_eq!(r.m.cfg_read(h, 4, 2) & 0x6, 0);
    r.m.setup_pci(h);
    assert_ne!(
        r.m.mmio_read(h, 0, 0x8069c, 4),
        0,
        "ownership survives the reset"
    );
    r.m.mmio_write(h, 0, 0x8069c, 4, 0);
    assert_eq!(
        r.m.mmio_read(h, 0, 0x8069c, 4),
        0,
        "released, claimable again"
    );
    r.assert_clean(0);
    // Reset with a wrong value is recorded and ignored.
    r.m.mmio_write(h, 0, 0xf0010, 4, 1);
    assert_eq!(r.violations(0).len(), 1);
}

#[test]
fn hcr_rejects_narrow_writes() {
    let mut r = Rig::new(1, true);
    let h = r.hca(0);
    r.m.mmio_write(h, 0, HCR, 2, 0);
    assert!(r.violations(0)[0].contains("32-bit"));
}

#[test]
fn phase_rules_and_bad_opcode() {
    let mut r = Rig::new(1, true);
    let mb = r.mailbox(0);
    assert_eq!(
        r.cmd(0, 0x003, 0, 0, 0, mb),
        0x04,
        "QUERY_DEV_CAP before RUN_FW: bad system state"
    );
    assert_eq!(
        r.cmd(0, 0x004, 0, 0, 0, mb),
        0x00,
        "QUERY_FW always allowed"
    );
    r.start_fw(0);
    assert_eq!(
        r.cmd(0, 0x013, 0, mb, 8, 0),
        0x04,
        "SW2HW_EQ before INIT_HCA"
    );
    assert_eq!(r.cmd(0, 0x05d, 0, 0, 0, 0), 0x02, "unknown opcode");
    let v = r.violations(0);
    assert_eq!(v.len(), 3, "{v:#?}");
    assert!(v[2].contains("not implemented"));
}

#[test]
fn query_fw_layout() {
    let mut r = Rig::new(1, true);
    let mb = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x004, 0, 0, 0, mb), 0);
    let b = r.read(0, mb, 0x60);
    assert_eq!(u16::from_be_bytes([b[0], b[1]]), 256, "fw_pages");
    let ver = u64::from_be_bytes(b[0..8].try_into().unwrap());
    assert_eq!((ver >> 32) & 0xffff, 2);
    assert_eq!(ver & 0xffff, 42, "minor in bits 15:0");
    assert_eq!((ver >> 16) & 0xffff, 5000, "subminor in bits 31:16");
    assert_eq!(u16::from_be_bytes([b[0x0a], b[0x0b]]), 3, "cmd_if_rev");
    assert_eq!(
        u64::from_be_bytes(b[0x20..0x28].try_into().unwrap()),
        0x80700
    );
    assert_eq!(b[0x28] >> 6, 0, "clear-int register in BAR0");
    r.assert_clean(0);
}

/// FA and aux entries carry no ICM address (Linux's `mlx4_map_cmd` leaves the VA dword 0): a
/// non-zero VA is ignored, the pages are taken, and the departure is recorded.
#[test]
fn fa_and_aux_entries_with_a_va_are_recorded() {
    let mut r = Rig::new(1, true);
    let fa = r.alloc(0, 1 << 20, 1 << 20);
    assert_eq!(r.map_cmd(0, 0xfff, &[(0x4_0000, fa, 8)]), 0, "MAP_FA");
    assert_eq!(
        r.cmd(0, 0xff6, 0, 0, 0, 0),
        0,
        "RUN_FW: the pages were taken"
    );
    let v = r.violations(0);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert!(v[0].contains("MAP_FA: entry 0 has VA 0x40000"), "{v:#?}");
}

#[test]
fn run_fw_needs_the_whole_fa_and_fills_it() {
    let mut r = Rig::new(1, true);
    let fa = r.alloc(0, 1 << 20, 1 << 20);
    assert_eq!(r.map_cmd(0, 0xfff, &[(0, fa, 7)]), 0, "512 KiB");
    assert_eq!(r.cmd(0, 0xff6, 0, 0, 0, 0), 0x0c, "RUN_FW with half the FA");
    assert_eq!(r.map_cmd(0, 0xfff, &[(0, fa + (512 << 10), 7)]), 0);
    assert_eq!(r.cmd(0, 0xff6, 0, 0, 0, 0), 0);
    assert_ne!(r.read(0, fa, 8), vec![0; 8], "firmware wrote its area");
    assert_eq!(
        r.map_cmd(0, 0xfff, &[(0, fa, 0)]),
        0x04,
        "MAP_FA after RUN_FW"
    );
    // Misaligned chunk.
    let mut r2 = Rig::new(1, true);
    let x = r2.alloc(0, 0x3000, 4096);
    let x = if x.is_multiple_of(0x2000) {
        x + 0x1000
    } else {
        x
    };
    assert_eq!(
        r2.map_cmd(0, 0xfff, &[(0, x, 1)]),
        0x03,
        "8 KiB chunk at a 4 KiB-only aligned PA"
    );
}

#[test]
fn query_dev_cap_and_adapter() {
    let mut r = Rig::new(1, true);
    r.start_fw(0);
    let mb = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x003, 0, 0, 0, mb), 0);
    let b = r.read(0, mb, 0x100);
    assert_eq!(b[0x12] & 0xf, 6, "64 reserved QPs");
    assert_eq!(b[0x37] & 0xf, 1, "one port");
    assert_eq!(
        u16::from_be_bytes([b[0x82], b[0x83]]),
        256,
        "QPC entry size"
    );
    assert_eq!(u16::from_be_bytes([b[0x90], b[0x91]]), 8, "MTT entry size");
    let flags = u64::from_be_bytes(b[0x40..0x48].try_into().unwrap());
    assert_eq!(flags & (3 << 61), 0, "no 64-byte EQE/CQE");
    assert_eq!(u16::from_be_bytes([b[0x26], b[0x27]]), 0, "no SYS_EQS");
    assert_eq!(
        u32::from_be_bytes(b[0x98..0x9c].try_into().unwrap()),
        0x200,
        "reserved L_Key"
    );
    assert_eq!(r.cmd(0, 0x006, 0, 0, 0, mb), 0);
    let a = r.read(0, mb, 0x100);
    assert_eq!(a[0x10], 2, "inta_pin");
    assert_eq!(&a[0xf0..0xf4], b"1_TM", "board id words byte-swapped");
    r.assert_clean(0);
}

#[test]
fn icm_bring_up_and_teardown_is_clean() {
    let mut r = Rig::new(1, true);
    r.bring_up(0);
    assert_eq!(
        r.cmd(0, 0x007, 0, r.mailbox(0), 0, 0),
        0x04,
        "INIT_HCA twice"
    );
    let v = r.violations(0);
    assert_eq!(v.len(), 1);
    assert_eq!(r.cmd(0, 0x008, 0, 0, 0, 0), 0, "CLOSE_HCA");
    assert_eq!(
        r.cmd(
            0,
            0xff9,
            0,
            QPC_BASE,
            ((ICM_END - QPC_BASE) / 4096) as u32,
            0
        ),
        0,
        "UNMAP_ICM"
    );
    assert_eq!(
        r.cmd(0, 0xff9, 0, QPC_BASE, 1, 0),
        0x03,
        "UNMAP_ICM of unmapped VA"
    );
    assert_eq!(r.cmd(0, 0xffb, 0, 0, 0, 0), 0, "UNMAP_ICM_AUX");
    assert_eq!(r.cmd(0, 0xffe, 0, 0, 0, 0), 0, "UNMAP_FA");
    assert_eq!(
        r.cmd(0, 0x003, 0, 0, 0, r.mailbox(0)),
        0x04,
        "firmware stopped"
    );
}

#[test]
fn init_hca_rejects_bad_input() {
    let mut r = Rig::new(1, true);
    r.start_fw(0);
    let mb = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x007, 0, mb, 0, 0), 0x04, "before SET_ICM_SIZE");
    let (st, _) = r.cmd_full(0, 0xffd, 0, 1 << 50, 0, 0, false);
    assert_eq!(st, 0x08, "ICM bigger than max_icm_sz");
    let (st, aux) = r.cmd_full(0, 0xffd, 0, ICM_SIZE, 0, 0, false);
    assert_eq!(st, 0);
    assert!(aux >= 1);
    assert_eq!(r.cmd(0, 0x007, 0, mb, 0, 0), 0x0c, "aux ICM missing");
    let aux_mem = r.alloc(0, aux as usize * 4096, 4096);
    let e: Vec<_> = (0..aux).map(|k| (0, aux_mem + k * 4096, 0)).collect();
    for c in e.chunks(256) {
        assert_eq!(r.map_cmd(0, 0xffc, c), 0);
    }
    r.write(0, mb, &[1]);
    assert_eq!(r.cmd(0, 0x007, 0, mb, 0, 0), 0x03, "version 1");
    assert_eq!(
        r.cmd(0, 0x007, 0, mb + 0x10, 0, 0),
        0x03,
        "misaligned mailbox"
    );
}

#[test]
fn misaligned_mailbox_and_dma_without_bus_master() {
    let mut r = Rig::new(1, true);
    let h = r.hca(0);
    let mb = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x004, 0, 0, 0, mb + 0x80), 0x03);
    let cmd = r.m.cfg_read(h, 4, 2);
    r.m.cfg_write(h, 4, 2, cmd & !4);
    assert_ne!(r.cmd(0, 0x004, 0, 0, 0, mb), 0);
    let v = r.violations(0);
    assert!(v.iter().any(|x| x.contains("256-byte aligned")));
    assert!(v.iter().any(|x| x.contains("bus mastering disabled")));
    // DMA outside memory.
    r.m.cfg_write(h, 4, 2, cmd);
    assert_ne!(r.cmd(0, 0x004, 0, 0, 0, 0x1000), 0);
    assert!(r
        .violations(0)
        .iter()
        .any(|x| x.contains("outside host memory")));
}

#[test]
fn unmapped_icm_is_caught() {
    let mut r = Rig::new(1, true);
    r.bring_up(0);
    // MTT index 0x100000 lies far beyond the mapped MTT pages.
    let mb = r.mailbox(0);
    r.put64(0, mb, 0x100000 * 8);
    r.put64(0, mb + 16, 0x1000 | 1);
    assert_eq!(
        r.cmd(0, 0x011, 0, mb, 1, 0),
        0x0c,
        "MTT index outside mapped ICM"
    );
    assert!(r.violations(0)[0].contains("not mapped"));
}

#[test]
fn command_fault_injection_fails_and_delays() {
    use sim::{CommandFault, CommandFaultAction, FabricConfig, Faults};
    use std::time::Duration;
    let cfg = FabricConfig {
        manual_clock: true,
        faults: Faults {
            commands: vec![
                CommandFault {
                    hca: None,
                    opcode: 0x004,
                    action: CommandFaultAction::Fail(0x01),
                    times: 1,
                    skip: 0,
                },
                CommandFault {
                    hca: None,
                    opcode: 0x031,
                    action: CommandFaultAction::Delay(Duration::from_millis(5)),
                    times: 1,
                    skip: 0,
                },
            ],
            ..Default::default()
        },
        ..Default::default()
    };
    let mut r = Rig::with(1, cfg, harness::reduced());
    let mb = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x004, 0, 0, 0, mb), 0x01, "injected failure");
    assert_eq!(r.cmd(0, 0x004, 0, 0, 0, mb), 0x00, "only once");
    r.bring_up(0);
    let h = r.hca(0);
    for (k, v) in [0u32, 0, 0x1f, 0, 0, 0xffff << 16].iter().enumerate() {
        r.m.mmio_write(h, 0, HCR + 4 * k as u64, 4, be32(*v));
    }
    r.m.mmio_write(h, 0, HCR + 0x18, 4, be32((1 << 23) | 0x31));
    let st = u32::from_be_bytes((r.m.mmio_read(h, 0, HCR + 0x18, 4) as u32).to_le_bytes());
    assert_ne!(st & (1 << 23), 0, "GO still set while delayed");
    r.m.fabric().advance(Duration::from_millis(6));
    let st = u32::from_be_bytes((r.m.mmio_read(h, 0, HCR + 0x18, 4) as u32).to_le_bytes());
    assert_eq!(st & (1 << 23), 0, "completed after the delay");
    r.assert_clean(0);
}

#[test]
fn huge_donations_cost_nothing_and_fault_only_when_used() {
    let mut r = Rig::new(1, true);
    let t = std::time::Instant::now();
    // A 1 TiB FA chunk at 1 TiB: far outside the 64 MiB arena.
    assert_eq!(
        r.map_cmd(0, 0xfff, &[(0, 1 << 40, 28)]),
        0,
        "MAP_FA accepts the chunk"
    );
    assert_eq!(
        r.cmd(0, 0xff6, 0, 0, 0, 0),
        0x01,
        "RUN_FW faults writing the FA"
    );
    assert!(r
        .violations(0)
        .iter()
        .any(|v| v.contains("outside host memory")));
    assert!(
        t.elapsed() < std::time::Duration::from_secs(5),
        "no per-page bookkeeping"
    );
    assert_eq!(
        r.map_cmd(0, 0xfff, &[(0, 1 << 40, 0)]),
        0x03,
        "page already donated"
    );
}

#[test]
fn a_command_fault_can_target_the_nth_occurrence() {
    use sim::{CommandFault, CommandFaultAction, FabricConfig, Faults};
    let cfg = FabricConfig {
        manual_clock: true,
        faults: Faults {
            commands: vec![
                CommandFault {
                    hca: None,
                    opcode: 0x004,
                    action: CommandFaultAction::Fail(0x03),
                    times: 1,
                    skip: 2,
                },
                CommandFault {
                    hca: None,
                    opcode: 0x004,
                    action: CommandFaultAction::Fail(0x01),
                    times: 2,
                    skip: 4,
                },
            ],
            ..Default::default()
        },
        ..Default::default()
    };
    let mut r = Rig::with(1, cfg, harness::reduced());
    let mb = r.mailbox(0);
    let got: Vec<u8> = (0..8).map(|_| r.cmd(0, 0x004, 0, 0, 0, mb)).collect();
    assert_eq!(
        got,
        [0, 0, 0x03, 0, 0x01, 0x01, 0, 0],
        "occurrences 3, 5 and 6"
    );
    r.assert_clean(0);
}

#[test]
fn freeing_memory_the_device_still_holds_is_a_violation_until_unmapped_or_reset() {
    let mut r = Rig::new(1, true);
    let h = r.hca(0);
    let fa = r.alloc(0, 1 << 20, 1 << 20);
    assert_eq!(r.map_cmd(0, 0xfff, &[(0, fa, 8)]), 0, "MAP_FA");
    assert_eq!(r.cmd(0, 0xff6, 0, 0, 0, 0), 0, "RUN_FW");
    // Host memory that is not donated: freeing it is the host's business.
    let own = r.alloc(0, 4096, 4096);
    assert!(r.nodes[0].arena.free(own));
    r.m.poll();
    r.assert_clean(0);
    // The firmware area freed while still mapped.
    assert!(r.nodes[0].arena.free(fa));
    r.m.poll();
    let v = r.violations(0);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert!(
        v[0].contains("while the device still holds") && v[0].contains("as FA"),
        "{v:#?}"
    );
    // Unmapped first (UNMAP_FA), or released by a reset: freeing is fine.
    let fa = r.alloc(0, 1 << 20, 1 << 20);
    r.m.mmio_read(h, 0, 0xf03fc, 4);
    r.m.mmio_write(h, 0, 0xf0010, 4, be32(1));
    r.m.setup_pci(h);
    assert_eq!(r.map_cmd(0, 0xfff, &[(0, fa, 8)]), 0, "MAP_FA again");
    assert_eq!(r.cmd(0, 0xffe, 0, 0, 0, 0), 0, "UNMAP_FA");
    assert!(r.nodes[0].arena.free(fa));
    let fa = r.alloc(0, 1 << 20, 1 << 20);
    assert_eq!(r.map_cmd(0, 0xfff, &[(0, fa, 8)]), 0, "MAP_FA a third time");
    r.m.mmio_read(h, 0, 0xf03fc, 4);
    r.m.mmio_write(h, 0, 0xf0010, 4, be32(1));
    assert!(r.nodes[0].arena.free(fa));
    r.m.poll();
    assert_eq!(r.violations(0).len(), 1, "{:#?}", r.violations(0));
}
