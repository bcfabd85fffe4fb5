//! Driver errors: every failure names the command and firmware status, or the wait that expired.

use crate::regs::{FwStatus, Opcode};

/// A firmware command that completed with a non-zero status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmdError {
    pub op: Opcode,
    pub status: FwStatus,
}

/// Errors of bring-up, teardown and object management.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// A command completed with an error status.
    Cmd(CmdError),
    /// A command did not complete within the configured time.
    CmdTimeout { op: Opcode },
    /// The HCR stayed busy (GO set) before a new command could be posted.
    HcrBusy { op: Opcode },
    /// Event mode: the completion carried a token we did not issue.
    BadToken { op: Opcode, token: u16 },
    /// `op` was not posted: an earlier command failed fatally (timed out, or a closing
    /// command failed), so the device was reset and is treated as failed (Linux's internal
    /// error state). Only commands that release device resources still "succeed".
    DeviceFailed { op: Opcode },
    /// Another function owns the device (ownership word non-zero).
    NotOwner,
    /// The hardware semaphore was not released within 10 s.
    SemaphoreTimeout,
    /// The device did not come back (vendor ID 0xFFFF) after reset.
    ResetTimeout,
    /// The firmware's command interface revision is not 2..=3.
    UnsupportedCmdIfRev(u16),
    /// A device capability makes operation impossible (the string says which).
    Capability(&'static str),
    /// The platform had no DMA memory for this.
    NoMemory(&'static str),
    /// An object table (QPN, CQN, MPT, MTT, PD ...) is exhausted.
    NoResources(&'static str),
    /// The NOP command's completion event arrived but no interrupt was seen.
    NoInterrupt,
    /// An argument was invalid.
    InvalidArgument(&'static str),
    /// A handle named no live object.
    InvalidHandle,
    /// A port never reached ACTIVE.
    PortNotActive { port: u8, state: verbs::PortState },
    /// A MAD_IFC response carried a non-zero MAD status.
    MadStatus { attr: u16, status: u16 },
    /// The catastrophic error buffer reports an internal error (§1.6): its first dword.
    InternalError { syndrome: u32 },
    /// A QP was requested at a number that is reserved, in use or outside the QP table.
    QpnUnavailable { qpn: u32, why: &'static str },
    /// The port has no physical link (no peer, cable, or the far end not enabled).
    LinkDown { port: u8 },
    /// No response to an SMP within the bounded wait (no SMA at the far end, SMP discarded).
    SmpTimeout { port: u8, attr: u16 },
    /// An SMP send or receive on QP0 completed in error (CQE syndrome, §4.2).
    SmpSend { port: u8, syndrome: u8 },
    /// A Set(PortInfo) was answered, but the port (the peer's or our own) reports another
    /// state than the one set (PortInfo PortState: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE).
    PortStateNotReached {
        port: u8,
        peer: bool,
        wanted: u8,
        got: u8,
    },
}

impl From<CmdError> for Error {
    fn from(e: CmdError) -> Self {
        Error::Cmd(e)
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Cmd(CmdError { op, status }) => write!(
                f,
                "{} (0x{:03x}) failed with firmware status {} (0x{:02x})",
                op.name(),
                op.raw(),
                status.name(),
                status.raw()
            ),
            Error::CmdTimeout { op } => write!(f, "{} timed out", op.name()),
            Error::DeviceFailed { op } => write!(
                f,
                "{} not posted: the device was reset after an earlier command failed fatally",
                op.name()
            ),
            Error::InternalError { syndrome } => write!(
                f,
                "the device reports an internal error (catastrophic error buffer dword 0 = \
                 {syndrome:#010x}); it needs a reset"
            ),
            other => write!(f, "{other:?}"),
        }
    }
}

impl From<Error> for verbs::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Cmd(CmdError { op, status }) => verbs::Error::Command {
                opcode: op.raw(),
                name: op.name(),
                status: status.raw(),
                status_name: status.name(),
            },
            Error::CmdTimeout { op } | Error::HcrBusy { op } | Error::BadToken { op, .. } => {
                verbs::Error::Timeout(op.name())
            }
            Error::NoMemory(w) | Error::NoResources(w) | Error::Capability(w) => {
                verbs::Error::NoResources(w)
            }
            Error::InvalidArgument(w) => verbs::Error::InvalidArgument(w),
            Error::InvalidHandle => verbs::Error::InvalidHandle,
            Error::PortNotActive { port, state } => verbs::Error::PortNotActive { port, state },
            Error::NoInterrupt => verbs::Error::Timeout("interrupt"),
            Error::NotOwner
            | Error::SemaphoreTimeout
            | Error::ResetTimeout
            | Error::UnsupportedCmdIfRev(_) => verbs::Error::Timeout("device"),
            Error::InternalError { syndrome } => verbs::Error::DeviceFatal { syndrome },
            Error::DeviceFailed { .. } => verbs::Error::DeviceFatal { syndrome: 0 },
            Error::MadStatus { .. } => verbs::Error::InvalidArgument("MAD status"),
            Error::QpnUnavailable { qpn, why } => verbs::Error::QpnUnavailable { qpn, why },
            Error::LinkDown { port } => verbs::Error::PortNotActive {
                port,
                state: verbs::PortState::Down,
            },
            Error::SmpTimeout { .. } => verbs::Error::Timeout("SMP response"),
            Error::SmpSend { .. } => verbs::Error::Timeout("SMP send completed in error"),
            Error::PortStateNotReached { port, got, .. } => verbs::Error::PortNotActive {
                port,
                state: verbs::PortState::from_raw(got),
            },
        }
    }
}
