//! Shared plumbing for the runner's system tests: one kernel build per test binary, and the
//! runner binary run with a hard bound on its run time.

#![allow(dead_code)] // Each test binary uses a different subset.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// The runner binary under test.
pub const RUNNER: &str = env!("CARGO_BIN_EXE_ibkern-qemu");

/// Slack on top of the runner's own `--timeout` before a test gives up on the runner itself.
const RUNNER_SLACK: Duration = Duration::from_secs(60);

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Where the test named `name` keeps its files.
pub fn scratch_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("ibkern-qemu-tests")
        .join(name)
}

/// A fresh (emptied) directory for one test's images.
pub fn scratch(name: &str) -> PathBuf {
    let dir = scratch_path(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Builds the kernel once per test binary (release, as the runner does) and returns its ELF.
pub fn kernel() -> &'static Path {
    static KERNEL: OnceLock<PathBuf> = OnceLock::new();
    KERNEL.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .current_dir(workspace_root())
            .args([
                "build",
                "-p",
                "kernel",
                "--release",
                "--target",
                "x86_64-unknown-none",
            ])
            .status()
            .expect("cannot run cargo to build the kernel");
        assert!(status.success(), "kernel build failed: {status}");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target"));
        let elf = target.join("x86_64-unknown-none/release/kernel");
        assert!(elf.is_file(), "{} missing after the build", elf.display());
        elf
    })
}

/// What one runner invocation produced.
#[derive(Debug)]
pub struct Run {
    pub status: ExitStatus,
    /// The guest console (the runner's stdout).
    pub stdout: String,
    /// The runner's own messages and QEMU's diagnostics.
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// The console line containing `needle`, or a panic showing the whole transcript.
    pub fn line_with(&self, needle: &str) -> &str {
        self.stdout
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no console line contains {needle:?}\n{}", self.transcript()))
    }

    /// The runner's own line (stderr) containing `needle`, or a panic with the transcript.
    pub fn line_with_stderr(&self, needle: &str) -> &str {
        self.stderr
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no runner line contains {needle:?}\n{}", self.transcript()))
    }

    pub fn transcript(&self) -> String {
        format!(
            "--- status {:?} after {:.1} s\n--- stdout\n{}\n--- stderr\n{}",
            self.status,
            self.elapsed.as_secs_f64(),
            self.stdout,
            self.stderr
        )
    }
}

fn collect(mut source: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = source.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).replace("\r\n", "\n")
    })
}

/// The subcommands that start QEMU guests.
const BOOTING: [&str; 9] = [
    "selftest", "run", "hca", "pingpong", "perftest", "compare", "mixed", "linux", "node",
];

/// What `.ci/setup` installs and the system tests use, missing from this host: QEMU, OVMF,
/// and gcc with libibverbs-dev (the `mixed` guest's C program).
pub fn missing_host_packages() -> Vec<&'static str> {
    let on_path = |program: &str| {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
    };
    let mut missing = Vec::new();
    if !on_path("qemu-system-x86_64") {
        missing.push("qemu-system-x86_64 (qemu-system-x86)");
    }
    if !Path::new("/usr/share/ovmf/OVMF.fd").is_file() {
        missing.push("/usr/share/ovmf/OVMF.fd (ovmf)");
    }
    if !on_path("gcc") {
        missing.push("gcc");
    }
    if !Path::new("/usr/include/infiniband/verbs.h").is_file() {
        missing.push("/usr/include/infiniband/verbs.h (libibverbs-dev)");
    }
    missing
}

/// Makes sure the host has what the system tests boot guests with, once per test binary:
/// nothing to do when it has; otherwise, as root or with sudo that needs no password,
/// `.ci/setup` installs it (the test command installs what is missing, as CI does); else the
/// test stops at once naming the command to run.
pub fn host_ready() {
    static READY: OnceLock<()> = OnceLock::new();
    READY.get_or_init(|| {
        let missing = missing_host_packages();
        if missing.is_empty() {
            return;
        }
        // SAFETY: geteuid(2) has no preconditions and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        let sudo = !root
            && Command::new("sudo")
                .args(["-n", "true"])
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
        assert!(
            root || sudo,
            "the system tests need {} on this host: run `.ci/setup` in the workspace (it \
             installs them with apt-get and needs root or sudo), then the tests again",
            missing.join(", ")
        );
        eprintln!(
            "system tests: {} missing; running .ci/setup to install it",
            missing.join(", ")
        );
        let status = Command::new(workspace_root().join(".ci/setup"))
            .stdin(Stdio::null())
            .status()
            .expect("cannot run .ci/setup");
        let still = missing_host_packages();
        assert!(
            status.success() && still.is_empty(),
            ".ci/setup ({status}) left {} missing",
            still.join(", ")
        );
    });
}

/// Starts the runner with `args`: stdin empty, stdout and stderr piped. A subcommand that
/// boots guests with the host's QEMU first makes sure the host has it ([`host_ready`]).
pub fn spawn_runner(args: &[&str]) -> std::process::Child {
    let boots = args.first().is_some_and(|sub| BOOTING.contains(sub));
    if boots
        && !args
            .iter()
            .any(|a| matches!(*a, "--qemu" | "--help" | "-h"))
    {
        host_ready();
    }
    Command::new(RUNNER)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start the runner")
}

/// Runs the runner with `args`; `limit` is the runner's own `--timeout` (the test allows it
/// [`RUNNER_SLACK`] more before killing the runner and failing).
pub fn runner(args: &[&str], limit: Duration) -> Run {
    finish(args, spawn_runner(args), limit)
}

/// [`runner`] with `input` on the runner's standard input.
pub fn runner_with_stdin(args: &[&str], input: &str, limit: Duration) -> Run {
    use std::io::Write;
    let mut child = Command::new(RUNNER)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start the runner");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_string();
    let writer = thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let run = finish(args, child, limit);
    let _ = writer.join();
    run
}

fn finish(args: &[&str], mut child: std::process::Child, limit: Duration) -> Run {
    let started = Instant::now();
    let stdout = collect(child.stdout.take().unwrap());
    let stderr = collect(child.stderr.take().unwrap());
    let deadline = started + limit + RUNNER_SLACK;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the runner itself did not finish within {:?}: {args:?}",
                limit + RUNNER_SLACK
            );
        }
        thread::sleep(Duration::from_millis(50));
    };
    let elapsed = started.elapsed();
    Run {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
        elapsed,
    }
}

/// One guest at a time: concurrent TCG guests on a small machine starve each other, and the
/// kernel's selftest compares clocks (TSC against HPET) over short windows.
static ONE_GUEST: Mutex<()> = Mutex::new(());

/// Holds the one-guest lock, for tests that boot a guest without the runner binary.
pub fn one_guest() -> std::sync::MutexGuard<'static, ()> {
    ONE_GUEST
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `cargo qemu <subcommand> --kernel K --out DIR --timeout SECS <extra...>`, one at a time.
pub fn boot(subcommand: &str, name: &str, timeout: Duration, extra: &[&str]) -> Run {
    let kernel = kernel();
    let _guest = ONE_GUEST
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let kernel = kernel.to_str().unwrap().to_string();
    let out = scratch(name);
    let secs = timeout.as_secs().to_string();
    let mut args = vec![subcommand, "--kernel", &kernel, "--timeout", &secs];
    let out = out.to_str().unwrap().to_string();
    args.extend(["--out", &out]);
    args.extend(extra);
    runner(&args, timeout)
}

/// The one run directory a command wrote under its `--out` base (`base/<UTC time>/`), checked
/// to be what `base/latest` points to.
pub fn the_run(base: &Path) -> PathBuf {
    let runs: Vec<PathBuf> = std::fs::read_dir(base)
        .unwrap_or_else(|e| panic!("{}: {e}", base.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && !p.is_symlink())
        .collect();
    assert_eq!(
        runs.len(),
        1,
        "one run directory under {}: {runs:?}",
        base.display()
    );
    let latest = std::fs::read_link(base.join("latest")).expect("base/latest is a link");
    assert_eq!(base.join(latest), runs[0]);
    runs[0].clone()
}

/// `cargo qemu <subcommand> --kernel K --out DIR <extra...>` with DIR a fresh scratch
/// directory for `name`, bounded by `limit` (the runner's own `--timeout` is in `extra`);
/// returns the run and DIR (the `--out` base: [`the_run`] finds the run's directory in it).
pub fn run_into(subcommand: &str, name: &str, limit: Duration, extra: &[&str]) -> (Run, PathBuf) {
    let kernel = kernel().to_str().unwrap().to_string();
    let out = scratch(name);
    let out_s = out.to_str().unwrap().to_string();
    let mut args = vec![subcommand, "--kernel", &kernel, "--out", &out_s];
    args.extend(extra);
    (runner(&args, limit), out)
}

/// A results CSV file (latency.csv, pcie.csv) as the tests read it: the `#` provenance
/// lines and blank lines skipped, the header, then the rows split at commas.
pub struct Table {
    pub text: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// Reads and splits `path`.
    pub fn read(path: &Path) -> Table {
        let text =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Table::parse(&text)
    }

    /// Splits `text`.
    pub fn parse(text: &str) -> Table {
        let mut lines = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty());
        let split = |l: &str| l.split(',').map(str::to_string).collect::<Vec<_>>();
        let header = split(
            lines
                .next()
                .unwrap_or_else(|| panic!("no header in\n{text}")),
        );
        let rows = lines.map(split).collect();
        Table {
            text: text.to_string(),
            header,
            rows,
        }
    }

    /// The index of column `name`.
    pub fn col(&self, name: &str) -> usize {
        self.header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name} in\n{}", self.text))
    }

    /// `row`'s value in column `name`.
    pub fn get<'a>(&self, row: &'a [String], name: &str) -> &'a str {
        &row[self.col(name)]
    }
}
