//! Stopping the runner from outside: SIGINT (Ctrl-C), SIGTERM and SIGHUP (the terminal or
//! SSH session closed).
//!
//! The runner's guests are its own children, each with a socket directory under the system's
//! temporary directory, and an emulated HCA's QEMU is served by threads of the runner. Had a
//! signal its default action, the runner would vanish and leave the QEMUs running (only Ctrl-C
//! reaches them, through the terminal's process group) and their directories behind. Instead,
//! [`install`] records the signal and every wait loop that drives guests
//! (`guest::Guest::poll`, `hca::run_nodes_staged`) calls [`check`] each time round (every
//! 20 ms): it returns [`Interrupted`], and the error's way out drops the guests (each QEMU
//! killed and reaped), the model server and the socket directories. The process then exits
//! with 128 + the signal's number, as a shell reports a process the signal ended.
//!
//! While no guest is running ([`Active`] counts the loops and guests alive), there is nothing
//! to stop or remove: the signal ends the runner at once with the same status, as it did
//! without a handler (a kernel build or a package download is not waited for).
//!
//! A second signal while the first is being handled ends the runner at once (status 1): an
//! escape if cleaning up ever hangs.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Arc;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// The signals that stop the runner.
pub const SIGNALS: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

/// The first signal received (0: none yet).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// Guest loops and guests alive (see [`Active`]).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Held while guests may be running: from before a guest loop creates anything a signal must
/// clean up (the model server, socket directories, QEMU) until it has cleaned up. A signal
/// while none is held ends the runner at once.
#[derive(Debug)]
pub struct Active(());

impl Active {
    pub fn enter() -> Active {
        ACTIVE.fetch_add(1, Ordering::SeqCst);
        Active(())
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Installs the handlers (once, from `main`). Signals arriving before this have their default
/// action.
pub fn install() -> std::io::Result<()> {
    let armed = Arc::new(AtomicBool::new(false));
    for sig in SIGNALS {
        // Registered first, so it runs before `armed` is set by the same signal: only a
        // second signal finds it set and exits.
        signal_hook::flag::register_conditional_shutdown(sig, 1, armed.clone())?;
        signal_hook::flag::register(sig, armed.clone())?;
        // SAFETY: the action only loads and stores atomics and may call `_exit` (through
        // signal_hook::low_level::exit), all async-signal-safe; it allocates nothing and takes
        // no lock.
        unsafe {
            signal_hook::low_level::register(sig, move || {
                let _ = RECEIVED.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
                if ACTIVE.load(Ordering::SeqCst) == 0 {
                    signal_hook::low_level::exit(i32::from(exit_status(sig)));
                }
            })?;
        }
    }
    Ok(())
}

/// The first signal received, if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// `Err(Interrupted)` once a signal has arrived.
pub fn check() -> Result<(), Interrupted> {
    match received() {
        Some(sig) => Err(Interrupted(sig)),
        None => Ok(()),
    }
}

/// The process status for an end by `sig`: 128 + its number.
pub fn exit_status(sig: i32) -> u8 {
    u8::try_from(128 + sig).unwrap_or(u8::MAX)
}

/// The signal's name ("SIGTERM").
pub fn name(sig: i32) -> String {
    match sig {
        SIGINT => "SIGINT".into(),
        SIGTERM => "SIGTERM".into(),
        SIGHUP => "SIGHUP".into(),
        s => format!("signal {s}"),
    }
}

/// The error a wait loop returns once a signal has arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interrupted(pub i32);

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "interrupted by {}: stopping the guests and removing temporary files",
            name(self.0)
        )
    }
}

impl std::error::Error for Interrupted {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_names_follow_the_shell() {
        assert_eq!(exit_status(SIGINT), 130);
        assert_eq!(exit_status(SIGTERM), 143);
        assert_eq!(exit_status(SIGHUP), 129);
        assert_eq!(name(SIGTERM), "SIGTERM");
        assert!(Interrupted(SIGHUP).to_string().contains("SIGHUP"));
    }
}
