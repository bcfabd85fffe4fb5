//! The mpqemu server with the real model: two QEMU 7.2 guests (TCG, SeaBIOS, no disk) on one
//! fabric. The firmware of each guest enumerates 15b3:1003, sizes and places the model's BARs;
//! the test checks what QEMU registered against what the model decoded, reads an HCR register
//! through the guest's physical address space (QEMU -> proxy -> model), and checks that the
//! model's view of guest RAM is the guest's RAM. Skipped when qemu-system-x86_64 is missing.

mod mpqemu_common;

use std::process::{Command, Stdio};
use std::time::Duration;

use mpqemu_common::{wait_quiet, wait_until, TestQmp};
use sim::mpqemu::{GuestHandle, GuestSpec, Server, ServerOptions, SocketDir};
use sim::{Fabric, FabricConfig, HcaId};

const QEMU: &str = "qemu-system-x86_64";
const HCR: u64 = 0x80680;

fn qemu_available() -> bool {
    Command::new(QEMU)
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn argv(qmp: &std::path::Path) -> Vec<String> {
    [
        QEMU,
        "-accel",
        "tcg",
        "-machine",
        "q35,memory-backend=mem",
        "-m",
        "128M",
        "-object",
        "memory-backend-memfd,id=mem,size=128M,share=on",
        "-smp",
        "1",
        "-nodefaults",
        "-display",
        "none",
        "-device",
        "x-pci-proxy-dev,id=hca0,fd=@FD@",
        "-qmp",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("unix:{},server=on,wait=off", qmp.display())])
    .collect()
}

/// (bar index, base, last address) of the proxied function in `info pci`.
fn qemu_bars(info_pci: &str) -> Vec<(u8, u64, u64)> {
    // QEMU's `info pci` shows the proxy's own (zeroed) ID registers: find it by its device id.
    let dev = info_pci
        .split("Bus ")
        .find(|d| d.contains("id \"hca0\""))
        .unwrap_or_else(|| panic!("{info_pci}"));
    dev.lines()
        .filter_map(|l| {
            let l = l.trim();
            let bar: u8 = l.strip_prefix("BAR")?.split(':').next()?.parse().ok()?;
            let at = l.split(" at 0x").nth(1)?;
            let base = u64::from_str_radix(at.split_whitespace().next()?, 16).ok()?;
            let last = u64::from_str_radix(
                at.split("[0x").nth(1)?.trim_end_matches(['.', ']']).trim(),
                16,
            )
            .ok()?;
            Some((bar, base, last))
        })
        .collect()
}

fn model_bar(server: &Server, hca: HcaId, index: u16) -> u64 {
    server.with_fabric(|f| {
        let lo = f.cfg_read(hca, 0x10 + 4 * index, 4) as u64;
        let hi = if lo & 0x6 == 0x4 {
            f.cfg_read(hca, 0x14 + 4 * index, 4) as u64
        } else {
            0
        };
        (hi << 32 | lo) & !0xf
    })
}

#[test]
fn two_guests_enumerate_the_model_and_reach_it_through_their_bars() {
    if !qemu_available() {
        eprintln!("skipped: {QEMU} not installed");
        return;
    }
    let server = Server::new(
        Fabric::new(FabricConfig::default()),
        ServerOptions::default(),
    )
    .unwrap();
    let dir = SocketDir::create("fabric-test").unwrap();
    let mut guests: Vec<(GuestHandle, std::path::PathBuf)> = (0..2)
        .map(|i| {
            let qmp = dir.path().join(format!("test-qmp-{i}.sock"));
            let mut spec = GuestSpec::new(format!("g{i}"), argv(&qmp));
            spec.stdout = Stdio::null();
            spec.stderr = Stdio::null();
            (server.spawn_guest(spec).unwrap(), qmp)
        })
        .collect();
    assert_eq!(guests[0].0.hca(), HcaId(0));
    assert_eq!(guests[1].0.hca(), HcaId(1));

    let bar0_size = sim::DeviceProfile::default().bar0_size;
    let bar2_size = sim::DeviceProfile::default().bar2_size;
    for (g, qmp_path) in &mut guests {
        let hca = g.hca();
        // The firmware placed BAR0 and enabled memory decoding in the model's config space.
        let placed = wait_until(Duration::from_secs(20), || {
            model_bar(&server, hca, 0) != 0
                && server.with_fabric(|f| f.cfg_read(hca, 4, 2) & 2 != 0)
        });
        assert!(
            placed,
            "firmware did not program hca {hca:?}: {:?}",
            g.guest().frontend_counters()
        );
        let quiet = wait_quiet(Duration::from_secs(20), || g.guest().frontend_counters());
        assert!(quiet, "firmware kept accessing hca {hca:?}");
        let fe = g.guest().frontend_counters();
        assert!(fe.probe_done && fe.probe_hidden == 4, "{fe:?}");
        assert!(fe.resets >= 1 && fe.sysmem_syncs >= 1, "{fe:?}");

        // QEMU registered exactly two memory BARs, where the model decodes them.
        let mut qmp = TestQmp::connect(qmp_path);
        let info = qmp.hmp("info pci");
        let bars = qemu_bars(&info);
        let (b0, b2) = (model_bar(&server, hca, 0), model_bar(&server, hca, 2));
        assert_eq!(
            bars,
            vec![(0, b0, b0 + bar0_size - 1), (2, b2, b2 + bar2_size - 1)],
            "{info}"
        );
        // (Exactly two memory BARs: no bogus I/O BAR from the upper halves.)

        // A 4-byte read of the HCR through the guest's address space reaches the model.
        let before = server.counters(hca).mmio_reads;
        let out = dir.path().join("hcr.bin");
        let cmd = format!(
            r#"{{"execute":"pmemsave","arguments":{{"val":{},"size":4,"filename":"{}"}}}}"#,
            b0 + HCR,
            out.display()
        );
        qmp.execute(&cmd);
        assert_eq!(server.counters(hca).mmio_reads, before + 1);
        assert_eq!(std::fs::read(&out).unwrap().len(), 4);

        // The model's HostMemory is the guest's RAM: a DMA write shows up in QEMU's view.
        let pattern: Vec<u8> = (0..64u8).map(|i| i ^ (hca.0 as u8 * 0x55)).collect();
        g.guest().guest_memory().write(0x20_0000, &pattern).unwrap();
        qmp.execute(&format!(
            r#"{{"execute":"pmemsave","arguments":{{"val":{},"size":64,"filename":"{}"}}}}"#,
            0x20_0000,
            out.display()
        ));
        assert_eq!(std::fs::read(&out).unwrap(), pattern);
        assert!(
            g.guest()
                .guest_memory()
                .read(256 << 20, &mut [0u8; 4])
                .is_err(),
            "beyond 128 MiB of RAM"
        );
        eprintln!(
            "hca {}: QEMU BARs {bars:x?}, front end {fe:?}, model {}",
            hca.0,
            server.counters(hca)
        );
        let route = g.guest().intx_route().expect("INTx route");
        assert_eq!(route.ioapic, "/machine/q35/ioapic");
    }
    for (g, _) in &mut guests {
        let status = g.kill().unwrap();
        assert!(status.connection.is_clean(), "{}", status.connection);
        assert!(
            server.violations(g.hca()).is_empty(),
            "{:?}",
            server.violations(g.hca())
        );
    }
}
