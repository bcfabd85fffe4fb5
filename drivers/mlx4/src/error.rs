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
    /// The object is still in use (the string says by what); Linux's EBUSY.
    Busy(&'static str),
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
        match *self {
            Error::Cmd(CmdError { op, status }) => write!(
                f,
                "{} (0x{:03x}) failed with firmware status {} (0x{:02x})",
                op.name(),
                op.raw(),
                status.name(),
                status.raw()
            ),
            Error::CmdTimeout { op } => write!(f, "{} timed out", op.name()),
            Error::HcrBusy { op } => write!(
                f,
                "{} not posted: the HCR stayed busy (GO set) from an earlier command",
                op.name()
            ),
            Error::BadToken { op, token } => write!(
                f,
                "{}: an event-mode completion carried token {token:#06x}, which the driver \
                 did not issue",
                op.name()
            ),
            Error::DeviceFailed { op } => write!(
                f,
                "{} not posted: the device was reset after an earlier command failed fatally",
                op.name()
            ),
            Error::NotOwner => f.write_str("another PCI function owns the device"),
            Error::SemaphoreTimeout => {
                f.write_str("the hardware semaphore was not released within 10 s")
            }
            Error::ResetTimeout => f.write_str(
                "the device did not come back from reset (configuration reads stayed all-ones)",
            ),
            Error::UnsupportedCmdIfRev(rev) => write!(
                f,
                "firmware command interface revision {rev} is not supported (2 and 3 are)"
            ),
            Error::Capability(what) => write!(f, "device capability: {what}"),
            Error::NoMemory(what) => write!(f, "no DMA memory for the {what}"),
            Error::NoResources(what) => write!(f, "no free {what}"),
            Error::NoInterrupt => {
                f.write_str("the NOP command's completion event arrived but no interrupt was seen")
            }
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::Busy(what) => write!(f, "still in use: {what}"),
            Error::InvalidHandle => f.write_str("the handle names no live object"),
            Error::PortNotActive { port, state } => {
                write!(f, "port {port} never reached ACTIVE (state {state:?})")
            }
            Error::MadStatus { attr, status } => write!(
                f,
                "MAD_IFC for attribute {attr:#06x} answered with MAD status {status:#06x}"
            ),
            Error::InternalError { syndrome } => write!(
                f,
                "the device reports an internal error (catastrophic error buffer dword 0 = \
                 {syndrome:#010x}); it needs a reset"
            ),
            Error::QpnUnavailable { qpn, why } => {
                write!(f, "QP number {qpn:#x} is unavailable: {why}")
            }
            Error::LinkDown { port } => write!(f, "port {port} has no physical link"),
            Error::SmpTimeout { port, attr } => write!(
                f,
                "no response on port {port} to the SMP for attribute {attr:#06x}"
            ),
            Error::SmpSend { port, syndrome } => write!(
                f,
                "an SMP on port {port} completed in error: {:?} (syndrome {syndrome:#04x})",
                crate::cq::syndrome_status(syndrome)
            ),
            Error::PortStateNotReached {
                port,
                peer,
                wanted,
                got,
            } => write!(
                f,
                "{} port {port} reports PortState {} after Set(PortInfo) asked for {}",
                if peer { "the peer's" } else { "our" },
                port_state_name(got),
                port_state_name(wanted)
            ),
        }
    }
}

/// PortInfo PortState by name (IBA 14.2.5.6).
fn port_state_name(v: u8) -> &'static str {
    match v {
        0 => "NOP",
        1 => "DOWN",
        2 => "INIT",
        3 => "ARMED",
        4 => "ACTIVE",
        _ => "reserved",
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
            Error::CmdTimeout { op } | Error::HcrBusy { op } => verbs::Error::Timeout(op.name()),
            Error::BadToken { token, .. } => verbs::Error::DeviceUnavailable {
                why: "an event-mode command completion carried a token the driver did not issue",
                value: u32::from(token),
            },
            Error::NoMemory(w) | Error::NoResources(w) => verbs::Error::NoResources(w),
            Error::Capability(w) => verbs::Error::Unsupported(w),
            Error::InvalidArgument(w) => verbs::Error::InvalidArgument(w),
            Error::Busy(w) => verbs::Error::Busy(w),
            Error::InvalidHandle => verbs::Error::InvalidHandle,
            Error::PortNotActive { port, state } => verbs::Error::PortNotActive { port, state },
            Error::NoInterrupt => verbs::Error::Timeout("interrupt"),
            Error::NotOwner => verbs::Error::DeviceUnavailable {
                why: "another PCI function owns the device",
                value: 0,
            },
            Error::SemaphoreTimeout => verbs::Error::Timeout("the hardware semaphore"),
            Error::ResetTimeout => verbs::Error::Timeout("the device to come back from reset"),
            Error::UnsupportedCmdIfRev(rev) => verbs::Error::DeviceUnavailable {
                why: "unsupported firmware command interface revision",
                value: u32::from(rev),
            },
            Error::InternalError { syndrome } => verbs::Error::DeviceFatal { syndrome },
            Error::DeviceFailed { op } => verbs::Error::DeviceFailed { name: op.name() },
            Error::MadStatus { attr, status } => verbs::Error::MadStatus { attr, status },
            Error::QpnUnavailable { qpn, why } => verbs::Error::QpnUnavailable { qpn, why },
            Error::LinkDown { port } => verbs::Error::LinkDown { port },
            Error::SmpTimeout { port, attr } => verbs::Error::SmpTimeout { port, attr },
            Error::SmpSend { port, syndrome } => verbs::Error::SmpCompletion {
                port,
                status: crate::cq::syndrome_status(syndrome),
                syndrome,
            },
            Error::PortStateNotReached { port, got, .. } => verbs::Error::PortNotActive {
                port,
                state: verbs::PortState::from_raw(got),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_prints_by_name_and_keeps_its_cause_in_verbs() {
        let cases: [(Error, &str, verbs::Error); 6] = [
            (
                Error::NotOwner,
                "another PCI function owns the device",
                verbs::Error::DeviceUnavailable {
                    why: "another PCI function owns the device",
                    value: 0,
                },
            ),
            (
                Error::ResetTimeout,
                "did not come back from reset",
                verbs::Error::Timeout("the device to come back from reset"),
            ),
            (
                Error::UnsupportedCmdIfRev(5),
                "revision 5",
                verbs::Error::DeviceUnavailable {
                    why: "unsupported firmware command interface revision",
                    value: 5,
                },
            ),
            (
                Error::SmpSend {
                    port: 2,
                    syndrome: 0x01,
                },
                "LocLenErr (syndrome 0x01)",
                verbs::Error::SmpCompletion {
                    port: 2,
                    status: verbs::WcStatus::LocLenErr,
                    syndrome: 0x01,
                },
            ),
            (
                Error::DeviceFailed { op: Opcode::NOP },
                "NOP not posted",
                verbs::Error::DeviceFailed { name: "NOP" },
            ),
            (
                Error::PortStateNotReached {
                    port: 1,
                    peer: true,
                    wanted: 4,
                    got: 3,
                },
                "the peer's port 1 reports PortState ARMED after Set(PortInfo) asked for ACTIVE",
                verbs::Error::PortNotActive {
                    port: 1,
                    state: verbs::PortState::Armed,
                },
            ),
        ];
        for (e, text, v) in cases {
            let shown = alloc::format!("{e}");
            assert!(shown.contains(text), "{shown:?} lacks {text:?}");
            assert!(!shown.contains('{'), "{shown:?} looks like Debug output");
            assert_eq!(verbs::Error::from(e), v);
            let through = alloc::format!("{}", verbs::Error::from(e));
            assert!(
                !through.contains('{'),
                "{through:?} looks like Debug output"
            );
        }
    }
}
