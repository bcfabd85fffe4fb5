//! INTx through irqfd with QEMU under KVM (stand-in function, SeaBIOS, no disk): the level the
//! front end writes into QEMU's irqfd shows up in the in-kernel 8259. (The resample
//! path needs a guest that EOIs; it is covered over a socketpair in mpqemu_protocol.rs.)
//! Skipped when /dev/kvm is not usable.

mod mpqemu_common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use mpqemu_common::*;
use sim::mpqemu::launch::{proxy_socketpair, spawn_qemu};
use sim::mpqemu::{irq_path, Connection, GuestMemory, IrqTransport, SocketDir};

fn kvm_usable() -> bool {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
}

#[test]
fn kvm_guest_receives_intx_through_irqfd() {
    if !kvm_usable() {
        eprintln!("skipped: /dev/kvm not usable");
        return;
    }
    let dir = SocketDir::create("kvm-test").unwrap();
    let qmp_path = dir.path().join("test-qmp.sock");
    let argv: Vec<String> = [
        "qemu-system-x86_64",
        "-accel",
        "kvm",
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
    .chain([format!("unix:{},server=on,wait=off", qmp_path.display())])
    .collect();
    let (ours, theirs) = proxy_socketpair().unwrap();
    let child = spawn_qemu(&argv, &[], &theirs, Stdio::null(), Stdio::piped()).unwrap();
    drop(theirs);
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _qemu = Kill(child);

    let mem = GuestMemory::new();
    let (line, irq) = irq_path("hca0", IrqTransport::Irqfd).unwrap();
    let mut func = StandIn::new(mem.clone(), line);
    let (seen, line) = (func.seen.clone(), func.irq.clone());
    let mut conn = Connection::new("hca0", ours, mem, irq.clone());
    let stop = conn.stop_flag();
    let server = std::thread::spawn(move || conn.serve(&mut func));

    let programmed = wait_until(Duration::from_secs(120), || {
        seen.lock()
            .unwrap()
            .cfg_writes
            .iter()
            .any(|w| w.0 == 0x04 && w.2 & 2 != 0)
    });
    assert!(programmed, "firmware did not program the function");
    let quiet = wait_quiet(Duration::from_secs(60), || {
        seen.lock().unwrap().cfg_writes.len()
    });
    assert!(quiet, "firmware kept accessing the function");
    let gsi = seen
        .lock()
        .unwrap()
        .cfg_writes
        .iter()
        .rev()
        .find(|w| w.0 == 0x3c)
        .map(|w| w.2 & 0xff)
        .unwrap();
    let mut qmp = TestQmp::connect(Path::new(&qmp_path));
    let pic_irr = |qmp: &mut TestQmp| -> (u32, String) {
        let text = qmp.hmp("info pic");
        let (name, bit) = if gsi < 8 {
            ("pic0:", gsi)
        } else {
            ("pic1:", gsi - 8)
        };
        let bitval = text
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("irr=")))
            .map_or(0, |irr| {
                (u32::from_str_radix(irr, 16).unwrap_or(0) >> bit) & 1
            });
        (bitval, text)
    };
    assert_eq!(
        pic_irr(&mut qmp).0,
        0,
        "line {gsi} pending before the assert"
    );
    line.lock().unwrap().set_intx(true);
    let raised = wait_until(Duration::from_secs(10), || pic_irr(&mut qmp).0 == 1);
    assert!(
        raised,
        "INTx through irqfd not visible in the 8259:\n{}",
        pic_irr(&mut qmp).1
    );
    assert_eq!(irq.stats().irqfd_signals, 1);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(server.join().unwrap().is_clean());
}
