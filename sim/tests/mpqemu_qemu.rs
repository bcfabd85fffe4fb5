//! The front end against a real QEMU 7.2 under TCG, with a stand-in PCI function (the model's own
//! QEMU test is in mpqemu_fabric.rs). QEMU boots SeaBIOS with no disk: the firmware enumerates
//! the proxied function, sizes and places its BARs and programs its interrupt line. Then the test
//! raises MSI and INTx through qtest and reads the guest's interrupt controllers over QMP.
//! Skipped (with a message) when qemu-system-x86_64 is not installed.

mod mpqemu_common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mpqemu_common::*;
use sim::mpqemu::launch::{proxy_socketpair, qtest_args, spawn_qemu};
use sim::mpqemu::{irq_path, Connection, GuestMemory, IrqTransport, QtestConfig, SocketDir};

const QEMU: &str = "qemu-system-x86_64";

fn qemu_available() -> bool {
    Command::new(QEMU)
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn guest_argv(machine: &str, test_qmp: &Path) -> Vec<String> {
    let s = |x: &str| x.to_string();
    vec![
        s(QEMU),
        s("-accel"),
        s("tcg"),
        s("-machine"),
        format!("{machine},memory-backend=mem"),
        s("-m"),
        s("128M"),
        s("-object"),
        s("memory-backend-memfd,id=mem,size=128M,share=on"),
        s("-smp"),
        s("1"),
        s("-nodefaults"),
        s("-display"),
        s("none"),
        s("-device"),
        s("x-pci-proxy-dev,id=hca0,fd=@FD@"),
        s("-qmp"),
        format!("unix:{},server=on,wait=off", test_qmp.display()),
    ]
}

fn boot_and_interrupt(machine: &str, expect_ioapic: &str) {
    if !qemu_available() {
        eprintln!("skipped: {QEMU} not installed");
        return;
    }
    let dir = SocketDir::create("qemu-test").unwrap();
    let test_qmp = dir.path().join("test-qmp.sock");
    let (ours, theirs) = proxy_socketpair().unwrap();
    let extra = qtest_args(&dir, Path::new("/dev/null"));
    let child = spawn_qemu(
        &guest_argv(machine, &test_qmp),
        &extra,
        &theirs,
        Stdio::null(),
        Stdio::piped(),
    )
    .unwrap();
    drop(theirs);
    let mut qemu = KillOnDrop(child);

    let mem = GuestMemory::new();
    let mut cfg = QtestConfig::new(dir.qtest(), Some(dir.qmp()));
    cfg.connect_timeout = Duration::from_secs(20);
    let (line, irq) = irq_path("hca0", IrqTransport::Qtest(cfg)).unwrap();
    let mut func = StandIn::new(mem.clone(), line);
    let (seen, line) = (func.seen.clone(), func.irq.clone());
    let mut conn = Connection::new("hca0", ours, mem.clone(), irq.clone());
    let stop = conn.stop_flag();
    let server = std::thread::spawn(move || {
        let end = conn.serve(&mut func);
        (end, conn.counters())
    });

    // Firmware: BAR0 placed, memory decoding on, interrupt line written.
    let programmed = wait_until(Duration::from_secs(20), || {
        let s = seen.lock().unwrap();
        let has = |off: u16| {
            s.cfg_writes
                .iter()
                .any(|w| w.0 == off && w.2 != 0 && w.2 != 0xffff_ffff)
        };
        has(0x10)
            && has(0x18)
            && has(0x3c)
            && s.cfg_writes.iter().any(|w| w.0 == 0x04 && w.2 & 2 != 0)
    });
    assert!(
        programmed,
        "firmware did not program the function: {:?}",
        seen.lock().unwrap().cfg_writes
    );
    let quiet = wait_quiet(Duration::from_secs(20), || {
        seen.lock().unwrap().cfg_writes.len()
    });
    assert!(quiet, "firmware kept accessing the function");
    assert!(!mem.regions().is_empty(), "no guest RAM shared");
    let route = wait_until(Duration::from_secs(20), || irq.route().is_some());
    assert!(route, "INTx route lookup did not finish");
    let route = irq.route().unwrap();
    assert_eq!(route.ioapic, expect_ioapic);
    assert!(
        route.pic_master.is_some() && route.pic_slave.is_some(),
        "{route:?}"
    );

    let mut qmp = TestQmp::connect(&test_qmp);
    // MSI: vector 0x41 to APIC 0 must land in the LAPIC (IRR, or ISR if already taken).
    let vector_seen = |lapic: &str| {
        lapic.lines().any(|l| {
            (l.starts_with("IRR") || l.starts_with("ISR"))
                && l.split_whitespace().any(|w| w == "65")
        })
    };
    assert!(
        !vector_seen(&qmp.hmp("info lapic")),
        "vector 0x41 pending before the MSI"
    );
    line.lock().unwrap().msi(0xfee0_0000, 0x41);
    assert!(
        wait_until(Duration::from_secs(10), || vector_seen(
            &qmp.hmp("info lapic")
        )),
        "MSI vector 0x41 never reached the LAPIC:\n{}",
        qmp.hmp("info lapic")
    );

    // INTx: the firmware's interrupt line must show up as requested in the 8259's IRR.
    let gsi = seen
        .lock()
        .unwrap()
        .cfg_writes
        .iter()
        .rev()
        .find(|w| w.0 == 0x3c)
        .map(|w| w.2 & 0xff)
        .unwrap();
    assert!(
        (1..16).contains(&gsi),
        "firmware wrote interrupt line {gsi}"
    );
    let pic_irr = |qmp: &mut TestQmp| -> u32 {
        // "pic1: irr=08 imr=ff isr=00 ..." : master is pic0 (IRQ 0-7), slave pic1 (IRQ 8-15).
        let text = qmp.hmp("info pic");
        let (name, bit) = if gsi < 8 {
            ("pic0:", gsi)
        } else {
            ("pic1:", gsi - 8)
        };
        let l = text
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("{text}"));
        let irr = l
            .split_whitespace()
            .find_map(|w| w.strip_prefix("irr="))
            .unwrap();
        (u32::from_str_radix(irr, 16).unwrap() >> bit) & 1
    };
    assert_eq!(pic_irr(&mut qmp), 0);
    line.lock().unwrap().set_intx(true);
    assert!(
        wait_until(Duration::from_secs(10), || pic_irr(&mut qmp) == 1),
        "INTx not visible in the 8259"
    );
    line.lock().unwrap().set_intx(false);
    assert!(
        wait_until(Duration::from_secs(10), || pic_irr(&mut qmp) == 0),
        "INTx not released"
    );

    let stats = irq.stats();
    eprintln!(
        "{machine}: gsi {gsi}, {stats:?}\n{}\n{}",
        qmp.hmp("info lapic"),
        qmp.hmp("info pic")
    );
    assert_eq!(stats.qtest_fail, 0, "{stats:?}");
    assert!(
        wait_until(Duration::from_secs(5), || irq.stats().qtest_ok
            == irq.stats().qtest_sent),
        "{:?}",
        irq.stats()
    );

    // QEMU quits: the connection ends cleanly.
    qmp.execute(r#"{"execute":"quit"}"#);
    let status = qemu.0.wait().unwrap();
    assert!(status.success(), "QEMU: {status}");
    let (end, counters) = server.join().unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(end.is_clean(), "{end}");
    assert!(
        counters.probe_done && counters.probe_hidden == 4,
        "{counters:?}"
    );
    assert!(
        counters.sysmem_syncs >= 1 && counters.resets >= 1,
        "{counters:?}"
    );
    irq.shutdown();
}

#[test]
fn q35_guest_enumerates_the_function_and_receives_msi_and_intx() {
    boot_and_interrupt("q35", "/machine/q35/ioapic");
}

#[test]
fn pc_guest_enumerates_the_function_and_receives_msi_and_intx() {
    boot_and_interrupt("pc", "/machine/i440fx/ioapic");
}
