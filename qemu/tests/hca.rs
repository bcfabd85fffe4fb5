//! System tests with the emulated ConnectX-3: the real kernel booted under QEMU (TCG) through
//! `cargo qemu hca`, the HCA served by sim's mpqemu server in the runner process.

mod support;

use std::time::Duration;

use support::{boot, Run};

/// One boot with the HCA: about 6 s on an idle machine (two bring-ups of about 1 s each).
const LIMIT: Duration = Duration::from_secs(180);

/// The console lines after `first` (the PCI block of one function).
fn block_after<'a>(run: &'a Run, first: &str) -> Vec<&'a str> {
    let mut lines = run.stdout.lines().skip_while(|l| !l.contains(first));
    let head = lines.next().expect("first line");
    std::iter::once(head)
        .chain(lines.take_while(|l| l.starts_with("pci   ")))
        .collect()
}

fn assert_no_violations(run: &Run) {
    assert!(
        run.stderr.contains("node0: model violations: 0"),
        "the model recorded violations or no report\n{}",
        run.transcript()
    );
}

#[test]
fn pci_scan_reports_the_emulated_hca_with_its_bars_and_pin() {
    // mode=selftest with the HCA attached: the scan lists it, and pci-expect finds it.
    let run = boot(
        "hca",
        "hca-pci-scan",
        LIMIT,
        &["--set", "mode=selftest", "--set", "expect_pci=15b3:1003"],
    );
    assert_eq!(run.code(), Some(0), "{}", run.transcript());
    let block = block_after(&run, " 15b3:1003 ");
    let head = block[0];
    assert!(head.starts_with("pci "), "{head}");
    // Network controller class 02, subclass 80 (other), INTA routed by the firmware.
    assert!(head.contains(" class 028000 pin A line "), "{head}");
    let line: u32 = head.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((1..16).contains(&line), "interrupt line {line}");
    let bar0 = block.iter().find(|l| l.contains("bar0 ")).expect("bar0");
    assert!(bar0.contains("bar0 mem64 0x"), "{bar0}");
    assert!(bar0.ends_with(" size 0x100000"), "BAR0 is 1 MiB: {bar0}");
    let bar2 = block.iter().find(|l| l.contains("bar2 ")).expect("bar2");
    assert!(bar2.contains("bar2 mem64 pref 0x"), "{bar2}");
    let profile = sim::DeviceProfile::default();
    assert!(
        bar2.ends_with(&format!(" size {:#x}", profile.bar2_size)),
        "{bar2}"
    );
    assert!(
        block
            .iter()
            .any(|l| l.contains("caps ") && l.contains("msix@")),
        "{block:?}"
    );
    assert!(
        block
            .iter()
            .any(|l| l.contains("msix entries ") && l.contains("table bar0+")),
        "{block:?}"
    );
    assert!(
        run.stdout.contains("selftest: PASS pci-expect 15b3:1003"),
        "{}",
        run.transcript()
    );
    assert_no_violations(&run);
}

/// The bring-up report of `mode=hca`, checked line by line against the model's profile.
fn assert_bring_up(run: &Run, irq_name: &str, nop_line: &str) {
    assert_eq!(run.code(), Some(0), "{}", run.transcript());
    let p = sim::DeviceProfile::default();
    let lines: Vec<&str> = run.stdout.lines().collect();
    let find = |needle: &str| -> usize {
        lines
            .iter()
            .position(|l| l.starts_with(needle))
            .unwrap_or_else(|| panic!("no line starting {needle:?}\n{}", run.transcript()))
    };
    let found = find("hca: 00:");
    assert!(
        lines[found].contains(" 15b3:1003 bar0 0x"),
        "{}",
        lines[found]
    );
    assert!(
        lines[found].contains("(1024 KiB) bar2 0x"),
        "{}",
        lines[found]
    );
    // Round 1: summary in this order.
    let up = find("hca: round 1: up in ");
    let fw = format!(
        "mlx4: firmware {}.{}.{}, board {}, 1 port(s), interrupts {irq_name}",
        p.fw_major, p.fw_minor, p.fw_subminor, p.board_id
    );
    assert_eq!(lines[up + 1], fw, "{}", run.transcript());
    let port = lines[up + 2];
    assert!(port.starts_with("mlx4: port 1: ACTIVE lid 0x"), "{port}");
    assert!(
        port.contains(" sm_lid 0x1 gid fe80:0000:0000:0000:"),
        "{port}"
    );
    assert!(port.ends_with(" mtu 4096"), "{port}");
    let memory = lines[up + 3];
    assert!(
        memory.starts_with(&format!(
            "mlx4: memory: firmware area {} KiB, ICM aux ",
            p.fw_pages as u32 * 4
        )),
        "{memory}"
    );
    assert!(memory.contains(" KiB, ICM mapped "), "{memory}");
    assert!(
        lines[up + 4].starts_with("mlx4: capacities: ") && lines[up + 4].contains(" QPs, "),
        "{}",
        lines[up + 4]
    );
    assert!(lines[up + 5].starts_with(nop_line), "{}", lines[up + 5]);
    assert_eq!(
        lines[up + 6],
        "hca: round 1: torn down; DMA in use back to 0 bytes in 0 regions"
    );
    // Round 2: the same device again, same summary, no leak.
    let up2 = find("hca: round 2: up in ");
    assert_eq!(lines[up2 + 1], fw);
    assert_eq!(
        lines[up2 + 2],
        port,
        "same LID and GID after re-initialisation"
    );
    assert!(lines[up2 + 5].starts_with(nop_line), "{}", lines[up2 + 5]);
    assert_eq!(
        lines[up2 + 6],
        "hca: round 2: torn down; DMA in use back to 0 bytes in 0 regions"
    );
    assert_eq!(lines[up2 + 7], "hca: PASS");
    assert_no_violations(run);
}

#[test]
fn hca_bring_up_with_msix() {
    let trace = support::scratch_path("hca-msix").join("hca.trace");
    let trace_s = trace.to_str().unwrap().to_string();
    let run = boot(
        "hca",
        "hca-msix",
        LIMIT,
        &["--irq", "msix", "--trace", &trace_s],
    );
    assert_bring_up(
        &run,
        "MSI-X",
        "hca: NOP interrupt test passed: MSI-X vector 0x",
    );
    // The model delivered MSI-X messages and never asserted INTx.
    let counters = run.line_with_stderr("node0: model counters: ");
    assert!(counters.contains(", intx 0)"), "{counters}");
    assert!(!counters.contains("(msix 0,"), "{counters}");
    // --trace: two bring-ups and teardowns recorded; the conformance check against Linux
    // passes with the departures file (docs/runner.md, "cargo qemu conformance").
    run.line_with_stderr("behaviour trace: ");
    let t = std::fs::read_to_string(&trace).unwrap();
    for want in [
        "order start -> QUERY_FW",
        "order UNMAP_FA -> QUERY_FW",
        "cmd NOP op_mod=0x0 in_mod=0x1f mode=event",
    ] {
        assert!(t.lines().any(|l| l == want), "{want:?} missing\n{t}");
    }
    let check = support::runner(&["conformance", "--ibkern", &trace_s], LIMIT);
    assert_eq!(check.code(), Some(0), "{}", check.transcript());
}

#[test]
fn hca_bring_up_with_intx() {
    let run = boot("hca", "hca-intx", LIMIT, &["--irq", "intx"]);
    assert_bring_up(&run, "INTx", "hca: NOP interrupt test passed: INTx GSI ");
    let counters = run.line_with_stderr("node0: model counters: ");
    assert!(counters.contains("(msix 0, intx "), "{counters}");
    assert!(!counters.contains(", intx 0)"), "{counters}");
}

#[test]
fn sr_iov_vf_is_refused_with_a_clear_message() {
    let run = boot("hca", "hca-vf", LIMIT, &["--device-id", "0x1004"]);
    assert_eq!(run.code(), Some(1), "{}", run.transcript());
    let fail = run.line_with("hca: FAIL: ");
    assert!(
        fail.ends_with(" 15b3:1004 is an SR-IOV VF: not supported yet"),
        "{fail}"
    );
    assert_no_violations(&run);
}

#[test]
fn second_port_of_a_dual_port_card_is_selectable() {
    let run = boot(
        "hca",
        "hca-port2",
        LIMIT,
        &["--ports", "2", "--set", "ib_port=2"],
    );
    assert_eq!(run.code(), Some(0), "{}", run.transcript());
    let port2 = run.line_with("mlx4: port 2: ");
    assert!(port2.contains("ACTIVE"), "{port2}");
    assert_no_violations(&run);
}

#[test]
fn a_port_the_card_does_not_have_is_a_clear_error() {
    let run = boot("hca", "hca-no-port", LIMIT, &["--set", "ib_port=2"]);
    assert_eq!(run.code(), Some(1), "{}", run.transcript());
    let fail = run.line_with("hca: FAIL: ");
    assert!(
        fail.ends_with("ib_port=2, but the card has 1 port(s)"),
        "{fail}"
    );
    assert_no_violations(&run);
}

/// The HCA's BAR addresses from the kernel's `hca: BDF 15b3:1003 bar0 0x.. (..) bar2 0x..` line.
fn hca_bar_addresses(run: &Run) -> (u64, u64) {
    let line = run.line_with(" 15b3:1003 bar0 0x");
    let hex_after = |key: &str| {
        let rest = &line[line.find(key).unwrap_or_else(|| panic!("{key} in {line}")) + key.len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
        u64::from_str_radix(&digits, 16).unwrap_or_else(|e| panic!("{line}: {e}"))
    };
    (hex_after(" bar0 0x"), hex_after(" bar2 0x"))
}

#[test]
fn hca_bring_up_under_uefi_with_the_64bit_bars_below_4g() {
    // OVMF would put the 64-bit BARs at the top of the address space, where QEMU's proxy
    // does not decode them; the runner makes it assign them from the 32-bit window.
    let run = boot("hca", "hca-uefi", LIMIT, &["--firmware", "uefi"]);
    assert!(
        run.stderr.contains("name=opt/ovmf/X-PciMmio64Mb,string=0")
            && run.stderr.contains(",phys-bits=38"),
        "{}",
        run.transcript()
    );
    assert_bring_up(
        &run,
        "MSI-X",
        "hca: NOP interrupt test passed: MSI-X vector 0x",
    );
    let (bar0, bar2) = hca_bar_addresses(&run);
    assert!(bar0 < 1 << 32 && bar2 < 1 << 32, "{bar0:#x} {bar2:#x}");
    // Still the card's 64-bit BAR types in the kernel's PCI scan.
    assert!(
        run.stdout
            .contains(&format!("pci   bar0 mem64 {bar0:#x} size 0x100000")),
        "{}",
        run.transcript()
    );
    assert!(
        run.stdout
            .contains(&format!("pci   bar2 mem64 pref {bar2:#x} size ")),
        "{}",
        run.transcript()
    );
}

#[test]
fn diag_mode_prints_config_space_firmware_ports_and_the_command_log() {
    let run = boot("hca", "hca-diag", LIMIT, &["--set", "mode=diag"]);
    assert_eq!(run.code(), Some(0), "{}", run.transcript());
    let p = sim::DeviceProfile::default();
    let diag: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("diag: "))
        .collect();
    // The kernel that ran (the commit of the boot banner) and its configuration.
    let banner = run.line_with("boot: ibkern kernel ");
    let commit = banner
        .split(" commit ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap();
    assert_eq!(
        diag[0],
        format!(
            "diag: ibkern {} commit {commit} mode=diag",
            env!("CARGO_PKG_VERSION")
        ),
        "{banner}"
    );
    // The runner writes the keys that differ from the defaults: here only the mode; the
    // interrupt mode in effect is the default's.
    let config = run.line_with("diag: config: ");
    assert_eq!(config.trim_end(), "diag: config: mode=diag", "{config}");
    assert!(run
        .line_with("diag: in effect: ")
        .starts_with("diag: in effect: hca_irq=msix ib_port=1 console=com1 log=info"));
    assert!(diag.contains(&"diag: 1 Mellanox function(s)"), "{diag:#?}");
    // The whole configuration space as hex: vendor and device ID little-endian first.
    let row0 = run.line_with("diag:   000: ");
    assert!(row0.starts_with("diag:   000: b3 15 03 10 "), "{row0}");
    for row in 1..16 {
        run.line_with(&format!("diag:   {:03x}: ", row * 16));
    }
    assert!(run
        .line_with(" PCIe link: ")
        .contains("PCIe link: capable x8 gen3"));
    let at_boot = run.line_with(" at boot: command ");
    assert!(at_boot.contains("(memory true"), "{at_boot}");
    assert!(run
        .line_with(" at boot: MSI-X control ")
        .contains("(enabled false"));
    let after = run.line_with(" after bring-up: command ");
    assert!(after.contains("bus master true"), "{after}");
    assert!(run
        .line_with(" after bring-up: MSI-X control ")
        .contains("(enabled true"));
    assert!(run
        .line_with("diag: bring-up ok in ")
        .contains("interrupts Msix"));
    let fw = run.line_with("diag: firmware FwInfo {");
    assert!(
        fw.contains(&format!(
            "major: {}, minor: {}, subminor: {}",
            p.fw_major, p.fw_minor, p.fw_subminor
        )),
        "{fw}"
    );
    assert!(run
        .line_with("diag: caps DevCaps {")
        .contains("num_ports: 1"));
    // The capability report reads back into the profile the emulated card runs (the node
    // GUID is written 0, the fabric's, citing the card's).
    let (text, file) = sim::diag_profile::profile_from_diag(&run.stdout, "qemu-card")
        .unwrap_or_else(|e| panic!("{e}\n{}", run.transcript()));
    let mut want = p.clone();
    want.name = "qemu-card".into();
    want.node_guid = 0;
    assert_eq!(file.profile, want, "{text}");
    assert!(file.sources["diag"].contains(&format!("ibkern {}", env!("CARGO_PKG_VERSION"))));
    // Identifiers as ibstat and ibv_devinfo print them: the model's node GUID, the port
    // GUID (node GUID + port number) and GID[0] (the default subnet prefix).
    let node = 0x0002_c903_0000_0000u64 | 1 << 8;
    let groups = |g: u64| {
        format!(
            "{:04x}:{:04x}:{:04x}:{:04x}",
            g >> 48,
            (g >> 32) & 0xffff,
            (g >> 16) & 0xffff,
            g & 0xffff
        )
    };
    assert_eq!(
        run.line_with("diag: node GUID "),
        format!("diag: node GUID {node:#018x} ({})", groups(node))
    );
    let port1 = run.line_with("diag: port 1: ");
    assert!(port1.starts_with("diag: port 1: state Active, "), "{port1}");
    assert!(
        port1.contains(&format!(
            "port GUID {:#018x} ({}), GID[0] fe80:0000:0000:0000:{}",
            node + 1,
            groups(node + 1),
            groups(node + 1)
        )),
        "{port1}"
    );
    let lid = |what: &str| {
        let at = port1.find(what).unwrap() + what.len();
        let text = port1[at..].split(',').next().unwrap();
        let (dec, hex) = text.split_once(" (0x").unwrap();
        let dec: u16 = dec.parse().unwrap();
        assert_eq!(
            u16::from_str_radix(hex.trim_end_matches(')'), 16).unwrap(),
            dec
        );
        dec
    };
    assert!(lid(" lid ") >= 1, "{port1}");
    assert!(lid("sm_lid ") >= 1, "{port1}");
    assert!(run
        .line_with("diag: port 1 QUERY_PORT ")
        .contains("link_up: true"));
    // PortInfo raw: 4 rows of 16 bytes; byte 32's low nibble is the port state (4 ACTIVE).
    let row2 = run.line_with("diag: port 1 PortInfo 20:");
    let byte32 = u8::from_str_radix(&row2["diag: port 1 PortInfo 20: ".len()..][..2], 16).unwrap();
    assert_eq!(byte32 & 0xf, 4, "{row2}");
    // PerfMgt counters through MAD_IFC: the model advertises PortCountersExtended.
    let counters = run.line_with("diag: port 1 counters (64-bit): xmit ");
    assert!(counters.contains(" words, rcv "), "{counters}");
    assert!(diag.contains(&"diag: catastrophic error buffer: 16 dwords, no internal error"));
    assert!(diag.contains(&"diag: teardown ok"));
    // The port wait's polls are counted, not logged (the port is ACTIVE at once here).
    assert!(run
        .line_with("diag: port wait: ")
        .ends_with(" MAD_IFC polls, not in the command log"));
    // The command log: every command of the bring-up and the teardown, in order.
    let head = run.line_with("diag: command log: ");
    let count: usize = head
        .trim_start_matches("diag: command log: ")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let log: Vec<&str> = diag
        .iter()
        .copied()
        .filter(|l| l.starts_with("diag:   #"))
        .collect();
    assert_eq!(log.len(), count, "{log:#?}");
    assert!(
        log[0].starts_with("diag:   #0    QUERY_FW       0x004 "),
        "{}",
        log[0]
    );
    assert!(log.iter().all(|l| l.contains(" ok ")), "{log:#?}");
    let pos = |name: &str| {
        log.iter()
            .position(|l| l.contains(&format!(" {name} ")))
            .unwrap_or_else(|| panic!("no {name} in {log:#?}"))
    };
    assert!(pos("RUN_FW") < pos("INIT_HCA") && pos("INIT_HCA") < pos("INIT_PORT"));
    assert!(
        log[pos("NOP")].contains(" event ok "),
        "{}",
        log[pos("NOP")]
    );
    assert!(pos("INIT_PORT") < pos("CLOSE_HCA") && pos("CLOSE_HCA") < pos("UNMAP_FA"));
    assert_eq!(*diag.last().unwrap(), "diag: end (healthy)");
    assert_no_violations(&run);
}

#[test]
fn diag_mode_reports_a_vf_and_still_dumps_its_config_space() {
    let run = boot(
        "hca",
        "hca-diag-vf",
        LIMIT,
        &["--set", "mode=diag", "--device-id", "0x1004"],
    );
    assert_eq!(run.code(), Some(1), "{}", run.transcript());
    let row0 = run.line_with("diag:   000: ");
    assert!(row0.starts_with("diag:   000: b3 15 04 10 "), "{row0}");
    assert!(run
        .line_with("diag: no bring-up: ")
        .ends_with("15b3:1004 is an SR-IOV VF: not supported yet"));
    assert!(run.stdout.contains("diag: end (problems above)"));
    assert_no_violations(&run);
}
