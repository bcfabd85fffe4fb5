//! Running one QEMU guest: spawn, stream its serial console, bound its run time, and classify
//! how it ended.

use std::fmt;
use std::io::{self, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::command::QemuCommand;

/// QEMU's exit status when the kernel wrote 0x10 (success) to isa-debug-exit: (0x10 << 1) | 1.
pub const KERNEL_SUCCESS_STATUS: i32 = 33;
/// QEMU's exit status when the kernel wrote 0x11 (failure) to isa-debug-exit.
pub const KERNEL_FAILURE_STATUS: i32 = 35;

/// How often the run loop checks for the guest's end.
const POLL: Duration = Duration::from_millis(20);
/// How long QEMU gets to exit after SIGTERM before it is killed outright.
const TERM_GRACE: Duration = Duration::from_secs(2);
/// How long to wait for the console pipes to drain once QEMU has gone.
const DRAIN: Duration = Duration::from_secs(2);

/// How a guest ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestExit {
    /// The kernel reported success through isa-debug-exit (QEMU status 33).
    KernelSuccess,
    /// The kernel reported failure through isa-debug-exit (QEMU status 35).
    KernelFailure,
    /// QEMU exited with another status: QEMU's own error (1), or the guest reset or powered
    /// off without a verdict (0, e.g. a triple fault under `-no-reboot`).
    Status(i32),
    /// QEMU was killed by a signal from outside.
    Signal(i32),
    /// The runner killed QEMU because the time limit passed.
    TimedOut(Duration),
    /// The runner killed QEMU because the run could not go on without another guest, whose
    /// QEMU failed (named, with how it ended).
    Stopped(String),
}

impl GuestExit {
    /// Whether QEMU itself failed (an error status, or killed by a signal): the guest
    /// neither gave a verdict nor ended on its own (a reset or power-off ends with 0).
    pub fn is_qemu_failure(&self) -> bool {
        matches!(self, GuestExit::Status(code) if *code != 0)
            || matches!(self, GuestExit::Signal(_))
    }

    pub fn from_status(status: ExitStatus) -> Self {
        match (status.code(), status.signal()) {
            (Some(KERNEL_SUCCESS_STATUS), _) => GuestExit::KernelSuccess,
            (Some(KERNEL_FAILURE_STATUS), _) => GuestExit::KernelFailure,
            (Some(code), _) => GuestExit::Status(code),
            (None, Some(signal)) => GuestExit::Signal(signal),
            (None, None) => GuestExit::Status(-1),
        }
    }
}

impl fmt::Display for GuestExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuestExit::KernelSuccess => write!(
                f,
                "the kernel reported success (isa-debug-exit 0x10, QEMU status \
                 {KERNEL_SUCCESS_STATUS})"
            ),
            GuestExit::KernelFailure => write!(
                f,
                "the kernel reported failure (isa-debug-exit 0x11, QEMU status \
                 {KERNEL_FAILURE_STATUS})"
            ),
            GuestExit::Status(0) => write!(
                f,
                "QEMU exited with status 0 without a kernel verdict (the guest reset or powered \
                 off: a triple fault ends this way under -no-reboot)"
            ),
            GuestExit::Status(code) => {
                write!(f, "QEMU exited with status {code} without a kernel verdict")
            }
            GuestExit::Signal(signal) => write!(f, "QEMU was killed by signal {signal}"),
            GuestExit::TimedOut(limit) => write!(
                f,
                "timed out: no verdict from the guest within {} s; QEMU was killed",
                limit.as_secs_f64()
            ),
            GuestExit::Stopped(why) => write!(f, "QEMU was stopped: {why}"),
        }
    }
}

/// Where the guest's console (and QEMU's diagnostics, to stderr) go besides the captured
/// transcript.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Echo {
    /// Copied to the runner's stdout as it arrives.
    Stdout,
    /// Copied to stdout line by line, each line prefixed (for several guests at once).
    Prefixed(String),
    /// Only captured.
    Quiet,
}

/// What the guest's serial input is connected to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// The runner's stdin (interactive runs).
    Inherit,
    /// Nothing (unattended runs).
    Null,
}

/// Options for one guest run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Kill QEMU after this long; `None` waits for ever (interactive runs only).
    pub timeout: Option<Duration>,
    pub echo: Echo,
    pub input: Input,
}

/// The result of a finished guest.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub exit: GuestExit,
    /// Everything the guest wrote to its serial console (QEMU's stdout).
    pub console: String,
    /// QEMU's own diagnostics (its stderr).
    pub stderr: String,
    /// From spawn to exit.
    pub elapsed: Duration,
}

type Shared = Arc<Mutex<Vec<u8>>>;

/// A running guest. Dropping it kills QEMU.
pub struct Guest {
    child: Child,
    /// A signal to the runner waits for this guest to be stopped (`interrupt`).
    _active: crate::interrupt::Active,
    started: Instant,
    timeout: Option<Duration>,
    console: Shared,
    stderr: Shared,
    drained: mpsc::Receiver<()>,
    readers: usize,
}

/// Copies a guest stream to one of the runner's own streams, prefixing lines if asked.
struct EchoSink {
    echo: Echo,
    to_stderr: bool,
    at_line_start: bool,
}

impl EchoSink {
    fn write(&mut self, bytes: &[u8]) {
        if self.to_stderr {
            self.write_to(&mut io::stderr().lock(), bytes);
        } else {
            self.write_to(&mut io::stdout().lock(), bytes);
        }
    }

    fn write_to(&mut self, out: &mut impl Write, bytes: &[u8]) {
        match &self.echo {
            Echo::Quiet => {}
            Echo::Stdout => {
                let _ = out.write_all(bytes);
            }
            Echo::Prefixed(prefix) => {
                for piece in bytes.split_inclusive(|&b| b == b'\n') {
                    if self.at_line_start {
                        let _ = out.write_all(prefix.as_bytes());
                    }
                    let _ = out.write_all(piece);
                    self.at_line_start = piece.ends_with(b"\n");
                }
            }
        }
        let _ = out.flush();
    }
}

fn pump(
    mut source: impl Read + Send + 'static,
    store: Shared,
    mut sink: EchoSink,
    done: mpsc::Sender<()>,
) {
    thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        loop {
            match source.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => {
                    sink.write(&buffer[..n]);
                    store
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend_from_slice(&buffer[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let _ = done.send(());
    });
}

fn text_of(shared: &Shared) -> String {
    let bytes = shared.lock().unwrap_or_else(|e| e.into_inner());
    String::from_utf8_lossy(&bytes).replace("\r\n", "\n")
}

impl Guest {
    /// Starts QEMU. Its stdout (the serial console) and stderr are captured and echoed.
    pub fn spawn(command: &QemuCommand, options: &RunOptions) -> Result<Guest> {
        Self::spawn_process(command.command(), options)
            .with_context(|| format!("cannot start {}", command.binary.display()))
    }

    /// Starts any process as a guest (QEMU wrappers, test doubles).
    pub fn spawn_process(mut process: Command, options: &RunOptions) -> Result<Guest> {
        process
            .stdin(match options.input {
                Input::Inherit => Stdio::inherit(),
                Input::Null => Stdio::null(),
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let active = crate::interrupt::Active::enter();
        crate::interrupt::check()?;
        let mut child = process.spawn()?;
        let started = Instant::now();
        let console = Shared::default();
        let stderr = Shared::default();
        let (done, drained) = mpsc::channel();
        let out = child.stdout.take().expect("stdout is piped");
        let err = child.stderr.take().expect("stderr is piped");
        let echo = |to_stderr| EchoSink {
            echo: options.echo.clone(),
            to_stderr,
            at_line_start: true,
        };
        pump(out, console.clone(), echo(false), done.clone());
        pump(err, stderr.clone(), echo(true), done);
        Ok(Guest {
            child,
            _active: active,
            started,
            timeout: options.timeout,
            console,
            stderr,
            drained,
            readers: 2,
        })
    }

    /// The console so far.
    pub fn console(&self) -> String {
        text_of(&self.console)
    }

    /// Checks whether the guest has ended, killing it if its time is up. Never blocks.
    /// A signal to the runner (`interrupt`) stops QEMU and returns the error.
    pub fn poll(&mut self) -> Result<Option<GuestExit>> {
        if let Err(interrupted) = crate::interrupt::check() {
            self.kill();
            return Err(interrupted.into());
        }
        if let Some(status) = self.child.try_wait().context("waiting for QEMU")? {
            return Ok(Some(GuestExit::from_status(status)));
        }
        if let Some(limit) = self.timeout {
            if self.started.elapsed() >= limit {
                self.kill();
                return Ok(Some(GuestExit::TimedOut(limit)));
            }
        }
        Ok(None)
    }

    /// Stops QEMU (if still running) and reaps it: SIGTERM first, so QEMU restores the
    /// terminal it may have put in raw mode, then SIGKILL after [`TERM_GRACE`].
    pub fn kill(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
                // SAFETY: kill(2) on our own child, which has not been reaped (try_wait saw it
                // running), so the pid still names it.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            let deadline = Instant::now() + TERM_GRACE;
            while Instant::now() < deadline {
                if matches!(self.child.try_wait(), Ok(Some(_))) {
                    return;
                }
                thread::sleep(POLL);
            }
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }

    /// Waits for the end (bounded by the timeout, if any) and collects the transcript.
    pub fn wait(mut self) -> Result<Outcome> {
        let exit = loop {
            if let Some(exit) = self.poll()? {
                break exit;
            }
            thread::sleep(POLL);
        };
        self.finish(exit)
    }

    /// Collects the outcome once `exit` is known (the pipes get a bounded time to drain).
    pub fn finish(mut self, exit: GuestExit) -> Result<Outcome> {
        let elapsed = self.started.elapsed();
        let deadline = Instant::now() + DRAIN;
        while self.readers > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.drained.recv_timeout(left) {
                Ok(()) => self.readers -= 1,
                Err(_) => break,
            }
        }
        Ok(Outcome {
            exit,
            console: self.console(),
            stderr: text_of(&self.stderr),
            elapsed,
        })
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}

/// Runs one guest to its end.
pub fn run(command: &QemuCommand, options: &RunOptions) -> Result<Outcome> {
    Guest::spawn(command, options)?.wait()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `sh -c script` in place of QEMU: same plumbing, scripted behaviour.
    fn run_script(script: &str, timeout: Duration) -> Outcome {
        let options = RunOptions {
            timeout: Some(timeout),
            echo: Echo::Quiet,
            input: Input::Null,
        };
        let mut process = Command::new("/bin/sh");
        process.arg("-c").arg(script);
        Guest::spawn_process(process, &options)
            .unwrap()
            .wait()
            .unwrap()
    }

    #[test]
    fn exit_statuses_are_classified() {
        let ok = run_script(
            "echo 'selftest: 1 passed, 0 failed'; exit 33",
            Duration::from_secs(10),
        );
        assert_eq!(ok.exit, GuestExit::KernelSuccess);
        assert_eq!(ok.console, "selftest: 1 passed, 0 failed\n");
        let failed = run_script("printf 'PANIC: x\\r\\n'; exit 35", Duration::from_secs(10));
        assert_eq!(failed.exit, GuestExit::KernelFailure);
        assert_eq!(failed.console, "PANIC: x\n");
        let other = run_script(
            "echo 'qemu: bad option' >&2; exit 1",
            Duration::from_secs(10),
        );
        assert_eq!(other.exit, GuestExit::Status(1));
        assert_eq!(other.stderr, "qemu: bad option\n");
        let reset = run_script("exit 0", Duration::from_secs(10));
        assert!(reset.exit.to_string().contains("triple fault"));
    }

    #[test]
    fn timeout_kills_a_hung_guest() {
        let start = Instant::now();
        let hung = run_script("echo booting; exec sleep 30", Duration::from_millis(500));
        assert_eq!(hung.exit, GuestExit::TimedOut(Duration::from_millis(500)));
        assert_eq!(hung.console, "booting\n");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "took {:?}",
            start.elapsed()
        );
        assert!(hung.exit.to_string().contains("timed out"));
    }
}
