//! The `ibkern-sim` binary: argument checks, and two QEMU 7.2 guests served until they quit
//! (through their own QMP sockets) or time out, with the per-guest report. The QEMU parts are
//! skipped when qemu-system-x86_64 is not installed.

mod mpqemu_common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use mpqemu_common::{wait_until, TestQmp};
use sim::mpqemu::SocketDir;

const BIN: &str = env!("CARGO_BIN_EXE_ibkern-sim");
const QEMU: &str = "qemu-system-x86_64";

fn qemu_available() -> bool {
    Command::new(QEMU)
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn guest(qmp: &str) -> Vec<String> {
    let mut v: Vec<String> = [
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
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(["-qmp".to_string(), format!("unix:{qmp},server=on,wait=off")]);
    v
}

/// Runs the binary, killing it if it outlives `timeout` (the child is never reaped before that,
/// so the kill cannot hit a recycled pid).
fn run(args: &[String], timeout: Duration) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    if !wait_until(timeout, || child.try_wait().unwrap().is_some()) {
        let _ = child.kill();
    }
    let status = child.wait().unwrap();
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

#[test]
fn rejects_command_lines_without_the_fd_placeholder_and_bad_counts() {
    let out = run(
        &[
            "--".into(),
            "qemu-system-x86_64".into(),
            "-m".into(),
            "64M".into(),
        ],
        Duration::from_secs(10),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no @FD@"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let args: Vec<String> = ["-n", "2", "--", "a", "fd=@FD@", "::", "b", "fd=@FD@"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let out = run(&args, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("use one or the other"));
    let out = run(
        &[
            "--intx-gsi".into(),
            "30".into(),
            "--".into(),
            "x".into(),
            "fd=@FD@".into(),
        ],
        Duration::from_secs(10),
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "clap rejects a GSI beyond the IOAPIC"
    );
    let out = run(
        &[
            "--profile".into(),
            "cx3-fdr,cx9".into(),
            "--".into(),
            "x".into(),
            "fd=@FD@".into(),
        ],
        Duration::from_secs(10),
    );
    assert_eq!(out.status.code(), Some(2), "an unknown profile");
    let err = String::from_utf8_lossy(&out.stderr);
    for name in sim::DeviceProfile::names() {
        assert!(err.contains(name), "the message lists {name}: {err}");
    }
}

#[test]
fn serves_two_guests_until_they_quit_and_reports_each() {
    if !qemu_available() {
        eprintln!("skipped: {QEMU} not installed");
        return;
    }
    let dir = SocketDir::create("cli-test").unwrap();
    let qmp = dir.path().join("qmp-@GUEST@.sock").display().to_string();
    let report = dir.path().join("report.txt");
    let traces = dir.path().join("traces");
    let mut args: Vec<String> = [
        "-n",
        "2",
        "--report",
        &report.display().to_string(),
        "--trace",
        &traces.display().to_string(),
        "--fail-on-violation",
        "--",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(guest(&qmp));
    let server = std::thread::spawn(move || run(&args, Duration::from_secs(60)));
    for i in 0..2 {
        let path = dir.path().join(format!("qmp-{i}.sock"));
        assert!(
            wait_until(Duration::from_secs(20), || path.exists()),
            "guest {i} QMP socket"
        );
        let mut q = TestQmp::connect(&path);
        // Let the firmware enumerate the HCA, then quit QEMU cleanly.
        assert!(wait_until(Duration::from_secs(20), || q
            .hmp("info pci")
            .contains("BAR2: 32 bit memory")));
        q.execute(r#"{"execute":"quit"}"#);
    }
    let out = server.join().unwrap();
    let text = std::fs::read_to_string(&report).unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for i in 0..2 {
        let section = text
            .split(&format!("guest {i} (hca {i}): "))
            .nth(1)
            .unwrap_or_else(|| panic!("{text}"));
        assert!(
            section.starts_with("qemu exit status: 0, connection: QEMU closed the connection"),
            "{section}"
        );
    }
    assert_eq!(text.matches("  violations: 0").count(), 2, "{text}");
    assert_eq!(text.matches("sysmem syncs").count(), 2);
    // --trace: one trace file per HCA; the firmware only enumerated the device, so no
    // command was recorded.
    for i in 0..2 {
        let path = traces.join(format!("hca{i}.trace"));
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "",
            "{}",
            path.display()
        );
        assert!(
            text.contains(&format!("  trace: {} (0 observations)", path.display())),
            "{text}"
        );
    }
}

#[test]
fn timeout_kills_the_guests_and_fails() {
    if !qemu_available() {
        eprintln!("skipped: {QEMU} not installed");
        return;
    }
    let dir = SocketDir::create("cli-timeout").unwrap();
    let qmp = dir.path().join("qmp.sock").display().to_string();
    let mut args: Vec<String> = ["--timeout", "1", "--"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(guest(&qmp));
    let out = run(&args, Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("guest 0 (hca 0): qemu signal: 9"), "{err}");
    assert!(err.contains("timeout: guests killed after 1 s"), "{err}");
}
