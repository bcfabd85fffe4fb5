//! ibkern's host runner: builds boot images and runs the kernel under QEMU.
//!
//! The binary (`cargo qemu <subcommand>`) is a thin shell over this library so that the pure
//! parts (QEMU command lines, selftest output parsing, VFIO checks) are unit-tested and the
//! system tests can reuse them.

/// Prints a runner message, `format!`-style (stderr, so stdout stays the guest console).
macro_rules! say {
    ($($arg:tt)*) => { crate::say(&format!($($arg)*)) };
}

pub mod args;
pub mod bw_results;
pub mod cli;
pub mod command;
pub mod compare;
pub mod conformance;
pub mod console_log;
pub mod fabric;
pub mod guest;
pub mod hca;
pub mod host;
pub mod image;
pub mod interrupt;
pub mod kernel_config;
pub mod linux;
pub mod machine;
pub mod node;
pub mod pingpong;
pub mod plot;
pub mod prepare;
pub mod progress;
pub mod provenance;
pub mod results;
pub mod run_dir;
pub mod saved_results;
pub mod selftest;
pub mod single_guest;
pub mod srq;
pub mod vfio;

/// Prints a runner message (stderr, so stdout stays the guest console).
pub(crate) fn say(msg: &str) {
    progress::say(msg);
}

/// A refused command line or configuration: the runner prints it and exits with
/// [`Exit::Usage`] (2) before building or booting anything.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// `Err(Usage)` with a formatted message.
#[macro_export]
macro_rules! usage {
    ($($arg:tt)*) => { return Err($crate::Usage(format!($($arg)*)).into()) };
}

/// The runner's exit status (documented in docs/runner.md and `cargo qemu --help`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// Everything passed.
    Success = 0,
    /// The kernel reported failure: failed checks, an exception, a panic, a bad config.
    GuestFailed = 1,
    /// Bad command line or configuration (clap's own status, and [`Usage`]).
    Usage = 2,
    /// A host problem: missing QEMU/OVMF/KVM, kernel build failure, VFIO check failure.
    Host = 3,
    /// The guest did not finish in time and QEMU was killed.
    Timeout = 4,
    /// QEMU ended without a kernel verdict (QEMU error, guest reset or triple fault).
    NoVerdict = 5,
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        std::process::ExitCode::from(exit as u8)
    }
}

impl Exit {
    /// The runner's status for how a guest ended. `verdict_is_final`: a kernel success status
    /// alone means success (run); selftest decides success itself and passes false.
    pub fn for_guest(exit: &guest::GuestExit, verdict_is_final: bool) -> Exit {
        match exit {
            guest::GuestExit::KernelSuccess if verdict_is_final => Exit::Success,
            guest::GuestExit::KernelSuccess | guest::GuestExit::KernelFailure => Exit::GuestFailed,
            guest::GuestExit::TimedOut(_) => Exit::Timeout,
            guest::GuestExit::Status(_)
            | guest::GuestExit::Signal(_)
            | guest::GuestExit::Stopped(_) => Exit::NoVerdict,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::GuestExit;
    use std::time::Duration;

    #[test]
    fn guest_endings_map_to_exit_statuses() {
        assert_eq!(
            Exit::for_guest(&GuestExit::KernelSuccess, true),
            Exit::Success
        );
        assert_eq!(
            Exit::for_guest(&GuestExit::KernelSuccess, false),
            Exit::GuestFailed
        );
        assert_eq!(
            Exit::for_guest(&GuestExit::KernelFailure, true),
            Exit::GuestFailed
        );
        assert_eq!(
            Exit::for_guest(&GuestExit::TimedOut(Duration::from_secs(1)), true),
            Exit::Timeout
        );
        assert_eq!(
            Exit::for_guest(&GuestExit::Status(0), true),
            Exit::NoVerdict
        );
        assert_eq!(
            Exit::for_guest(&GuestExit::Signal(9), false),
            Exit::NoVerdict
        );
    }
}
