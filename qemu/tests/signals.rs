//! System test: a runner stopped by a signal takes its guests with it and keeps their
//! consoles. `cargo qemu pingpong` (two QEMUs and the model server) is started through the
//! built runner binary; once both guests print, the runner alone (not its process group) gets
//! SIGINT, as Ctrl-C sends it. Within a bound the runner must exit with 128 + 2, no QEMU it
//! started may survive, its socket directories under the temporary directory must be gone,
//! and the run directory must hold both consoles up to the signal, named on stderr.

mod support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use support::{kernel, scratch};

/// Both guests printing: bring-up takes a few seconds each under TCG, plus the kernel build.
const START_LIMIT: Duration = Duration::from_secs(300);
/// From SIGTERM to the runner's exit (QEMU killed and reaped, pipes drained).
const STOP_LIMIT: Duration = Duration::from_secs(15);

/// The runner's direct children (from /proc/*/stat's parent field).
fn children(parent: u32) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces, so split after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let ppid = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok());
        if ppid == Some(parent) {
            pids.push(pid);
        }
    }
    pids
}

/// Is `pid` still a live process (not gone, not a zombie)?
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The runner's socket directories (sim's `SocketDir`: ibkern-mpqemu-<runner pid>-...).
fn socket_dirs(runner: u32) -> Vec<PathBuf> {
    let prefix = format!("ibkern-mpqemu-{runner}-");
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

/// Starts the runner with `args`, waits until every console prefix in `wanted` (or, with an
/// empty list, any console line) has shown up, sends `signal` to the runner alone and checks
/// the outcome: exit 128 + signal within [`STOP_LIMIT`], `qemus` QEMU children before and none
/// alive after, as many socket directories before and none after. Returns what the runner
/// printed (stderr lines prefixed `stderr: `).
fn stop_with(
    args: &[&str],
    wanted: &[&str],
    qemus_expected: usize,
    signal: libc::c_int,
    name: &str,
) -> String {
    let mut child = support::spawn_runner(args);
    let runner = child.id();
    let (tx, rx) = mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let tx2 = tx.clone();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx2.send(format!("stderr: {l}"));
        }
    });

    // Wait until each guest's console has a kernel line.
    let mut seen = String::new();
    let started = Instant::now();
    let mut missing: Vec<&str> = wanted.to_vec();
    let mut any = false;
    while !(missing.is_empty() && (any || !wanted.is_empty())) {
        let left = START_LIMIT.saturating_sub(started.elapsed());
        assert!(!left.is_zero(), "the guests did not start:\n{seen}");
        match rx.recv_timeout(left.min(Duration::from_secs(1))) {
            Ok(l) => {
                if !l.starts_with("stderr: ") && l.contains("boot: ibkern kernel") {
                    any = true;
                    missing.retain(|p| !l.starts_with(p));
                }
                seen.push_str(&l);
                seen.push('\n');
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the runner ended:\n{seen}"),
        }
    }
    let qemus: Vec<u32> = children(runner)
        .into_iter()
        .filter(|&p| comm(p).starts_with("qemu"))
        .collect();
    assert_eq!(
        qemus.len(),
        qemus_expected,
        "QEMU children of the runner\n{seen}"
    );
    let dirs = socket_dirs(runner);
    assert_eq!(
        dirs.len(),
        qemus_expected,
        "one socket directory per guest: {dirs:?}"
    );

    // The signal to the runner only, as `kill -SIG PID` does.
    let pid = libc::pid_t::try_from(runner).unwrap();
    // SAFETY: kill(2) on our own child, not reaped yet (we have not waited for it).
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    let stop = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if stop.elapsed() > STOP_LIMIT {
            let _ = child.kill();
            for q in &qemus {
                // SAFETY: kill(2) on a pid we saw as a QEMU; cleaning up after a failed test.
                unsafe { libc::kill(*q as libc::pid_t, libc::SIGKILL) };
            }
            panic!("the runner did not exit within {STOP_LIMIT:?} of {name}\n{seen}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = stop.elapsed();
    while let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
        seen.push_str(&l);
        seen.push('\n');
    }
    // Whatever survived is cleaned up before the verdict, so a failure leaks nothing.
    let survivors: Vec<u32> = qemus.iter().copied().filter(|&q| alive(q)).collect();
    for q in &survivors {
        // SAFETY: kill(2) on a pid we saw as the runner's QEMU child.
        unsafe { libc::kill(*q as libc::pid_t, libc::SIGKILL) };
    }
    let left = socket_dirs(runner);
    for d in &left {
        let _ = std::fs::remove_dir_all(d);
    }
    assert_eq!(status.code(), Some(128 + signal), "{status:?}\n{seen}");
    assert!(
        survivors.is_empty(),
        "QEMU {survivors:?} survived the runner\n{seen}"
    );
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(
        seen.contains(&format!("stopped by {name}")),
        "the runner says why it stopped\n{seen}"
    );
    eprintln!("runner stopped {:.2} s after {name}", took.as_secs_f64());
    seen
}

#[test]
fn sigint_stops_both_guests_and_keeps_their_consoles() {
    let kernel = kernel().to_str().unwrap().to_string();
    let out = scratch("signals");
    let seen = stop_with(
        &[
            "pingpong",
            "--kernel",
            &kernel,
            "--out",
            out.to_str().unwrap(),
            "-c",
            "UD",
            "-s",
            "64",
            "-n",
            "100000",
            "--timeout",
            "600",
        ],
        &["server: ", "client: "],
        2,
        libc::SIGINT,
        "SIGINT",
    );
    // The consoles were written as they streamed: each holds the kernel's boot line.
    let run = out.join("latest");
    for role in ["server", "client"] {
        let log = run.join(format!("{role}.log"));
        let text = std::fs::read_to_string(&log)
            .unwrap_or_else(|e| panic!("{}: {e}\n{seen}", log.display()));
        assert!(text.contains("boot: ibkern kernel"), "{text}");
        let named = std::fs::canonicalize(&log).unwrap();
        assert!(
            seen.lines().any(|l| l.starts_with("stderr: ")
                && l.contains("the consoles up to now are in")
                && l.contains(&named.file_name().unwrap().to_string_lossy().to_string())
                && l.contains(
                    &*named
                        .parent()
                        .unwrap()
                        .file_name()
                        .unwrap()
                        .to_string_lossy()
                )),
            "stderr names {}\n{seen}",
            named.display()
        );
    }
}

/// SIGHUP (the terminal closed) and SIGTERM do the same, on one emulated-HCA guest that
/// would otherwise idle for ever.
#[test]
fn sighup_and_sigterm_stop_an_idle_guest() {
    let kernel = kernel().to_str().unwrap().to_string();
    let out = scratch("signals-idle");
    for (signal, name) in [(libc::SIGHUP, "SIGHUP"), (libc::SIGTERM, "SIGTERM")] {
        stop_with(
            &[
                "hca",
                "--kernel",
                &kernel,
                "--out",
                out.to_str().unwrap(),
                "--set",
                "mode=idle",
                "--timeout",
                "600",
            ],
            &[],
            1,
            signal,
            name,
        );
    }
}
