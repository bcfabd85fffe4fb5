//! Why a server refused a client's run ([`crate::Kind::Refuse`]), with the words both nodes
//! print.

use core::fmt;

use ibconfig::bench::Rule;

/// Why a server refused a client's run, as sent in a [`Kind::Refuse`] message: a code in
/// the index field and up to two numbers (bytes 44..48 and 48..56). Both sides print it
/// with the same words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Code 1: a UD message larger than the server's path MTU.
    UdSizeAboveMtu { size: u32, mtu: u32 },
    /// Code 2: an inline limit above what the server's device carries.
    InlineAboveDevice { inline: u32, limit: u32 },
    /// Code 3: completion events asked of a server that takes no interrupts.
    EventsWithoutInterrupts,
    /// Code 4: the server could not allocate the run's buffers (`bytes`, 0 if unknown).
    NoMemory { bytes: u32 },
    /// Code 5: a combination the server does not run (a ping-pong rule: test and transport,
    /// iteration or size range).
    Unsupported,
    /// Code 6: setting up the run's QPs failed on the server.
    SetupFailed,
    /// Code 7: isr mode asked of a server that cannot run a completion handler in its
    /// interrupt path (not on MSI-X).
    IsrUnavailable,
}

impl Refusal {
    /// The refusal for a rule the client's run breaks on the server.
    pub fn from_rule(r: Rule) -> Refusal {
        match r {
            Rule::UdSizeAboveMtu { size, mtu } => Refusal::UdSizeAboveMtu { size, mtu },
            Rule::InlineAboveDevice { inline, limit } => {
                Refusal::InlineAboveDevice { inline, limit }
            }
            Rule::EventsWithoutInterrupts => Refusal::EventsWithoutInterrupts,
            Rule::IsrNeedsMsix => Refusal::IsrUnavailable,
            _ => Refusal::Unsupported,
        }
    }

    /// Code and the two numbers.
    pub fn fields(&self) -> (u32, u32, u32) {
        match *self {
            Refusal::UdSizeAboveMtu { size, mtu } => (1, size, mtu),
            Refusal::InlineAboveDevice { inline, limit } => (2, inline, limit),
            Refusal::EventsWithoutInterrupts => (3, 0, 0),
            Refusal::NoMemory { bytes } => (4, bytes, 0),
            Refusal::Unsupported => (5, 0, 0),
            Refusal::SetupFailed => (6, 0, 0),
            Refusal::IsrUnavailable => (7, 0, 0),
        }
    }

    pub fn from_fields(code: u32, a: u32, b: u32) -> Option<Refusal> {
        Some(match code {
            1 => Refusal::UdSizeAboveMtu { size: a, mtu: b },
            2 => Refusal::InlineAboveDevice {
                inline: a,
                limit: b,
            },
            3 => Refusal::EventsWithoutInterrupts,
            4 => Refusal::NoMemory { bytes: a },
            5 => Refusal::Unsupported,
            6 => Refusal::SetupFailed,
            7 => Refusal::IsrUnavailable,
            _ => return None,
        })
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Refusal::UdSizeAboveMtu { size, mtu } => write!(
                f,
                "UD message of {size} bytes is larger than the server's path MTU {mtu}"
            ),
            Refusal::InlineAboveDevice { inline, limit } => write!(
                f,
                "inline limit of {inline} bytes is more than the server's QP can carry ({limit})"
            ),
            Refusal::EventsWithoutInterrupts => write!(
                f,
                "completion events asked, and the server takes no interrupts (hca_irq=poll)"
            ),
            Refusal::NoMemory { bytes } => {
                write!(
                    f,
                    "the server has no memory for the run's buffers ({bytes} bytes)"
                )
            }
            Refusal::Unsupported => write!(f, "the server does not run this combination"),
            Refusal::SetupFailed => write!(f, "setting up the run's QPs failed on the server"),
            Refusal::IsrUnavailable => write!(
                f,
                "completion=isr asked, and the server cannot reply from its interrupt handler (its HCA is not on MSI-X)"
            ),
        }
    }
}
