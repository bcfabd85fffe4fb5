//! The machine-readable lines a node prints on its console, one typed record per kind, each
//! with its `emit` (no allocation: the kernel writes them between measured sizes;
//! docs/benchmarks.md, "Output", has every field).
//!
//! A line is a prefix and one JSON object:
//!
//! ```text
//! ibkern-result {"test":"send_lat","transport":"UD","role":"client","bytes":2,...}
//! ```
//!
//! | kind ([`Kind`]) | prefix | record |
//! |---|---|---|
//! | `Result` | `ibkern-result ` | [`LatencyLine`] (a latency test's size), [`BandwidthLine`] (a bandwidth test's size: its `test` is a `_bw` one) |
//! | `Port` | `ibkern-port ` | [`PortLine`]: the port's traffic counters before and after a run |
//! | `Anatomy` | `ibkern-anatomy ` | [`AnatomyLine`]: where one size's round trip went (`anatomy=on`) |
//! | `Srq` | `ibkern-srq-result ` | [`SrqLine`]: one run of the SRQ ping-pong |
//!
//! Adding a kind is a change here only: a file with the record and its [`Record`] impl (the
//! object's fields in order), and a [`Kind`] with its prefix in [`Kind::ALL`].

mod anatomy;
mod bandwidth;
mod emit;
mod latency;
mod port;
mod srq;

use core::fmt::{self, Write};

pub use anatomy::AnatomyLine;
pub use bandwidth::{BandwidthFigures, BandwidthLine};
pub use latency::LatencyLine;
pub use port::{PortCounts, PortLine};
pub use srq::{SrqLine, SRQ_TEST};

/// The prefix of a latency or bandwidth test's result line.
pub const PREFIX: &str = Kind::Result.prefix();
/// The prefix of a port-counters line.
pub const PORT_PREFIX: &str = Kind::Port.prefix();
/// The prefix of an anatomy line.
pub const ANATOMY_PREFIX: &str = Kind::Anatomy.prefix();
/// The prefix of the SRQ ping-pong's result line.
pub const SRQ_PREFIX: &str = Kind::Srq.prefix();

/// The kinds of line, by prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Result,
    Port,
    Anatomy,
    Srq,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 4] = [Kind::Result, Kind::Port, Kind::Anatomy, Kind::Srq];

    /// The prefix, with its trailing space; no prefix contains another.
    pub const fn prefix(self) -> &'static str {
        match self {
            Kind::Result => "ibkern-result ",
            Kind::Port => "ibkern-port ",
            Kind::Anatomy => "ibkern-anatomy ",
            Kind::Srq => "ibkern-srq-result ",
        }
    }

    /// The first line prefix in `text` (anything may come before it: a timestamp, serial
    /// noise): the kind, where the prefix starts, and the text after it.
    pub fn find(text: &str) -> Option<(Kind, usize, &str)> {
        Kind::ALL
            .into_iter()
            .filter_map(|k| text.find(k.prefix()).map(|at| (k, at)))
            .min_by_key(|&(_, at)| at)
            .map(|(k, at)| (k, at, &text[at + k.prefix().len()..]))
    }
}

/// One kind of line's record: its prefix and the fields of its JSON object.
pub trait Record: Sized {
    /// Its prefix.
    const KIND: Kind;

    /// Writes the JSON object (`{...}`), fields in their documented order.
    fn emit_object<W: Write>(&self, out: &mut W) -> fmt::Result;

    /// Writes the whole line: the prefix, the object, a newline.
    fn emit<W: Write>(&self, out: &mut W) -> fmt::Result {
        out.write_str(Self::KIND.prefix())?;
        self.emit_object(out)?;
        out.write_char('\n')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_found_after_noise_and_none_contains_another() {
        for a in Kind::ALL {
            for b in Kind::ALL {
                if a != b {
                    assert!(!a.prefix().contains(b.prefix()), "{a:?} {b:?}");
                }
            }
        }
        let (k, at, rest) = Kind::find("[node1] ibkern-srq-result {\"x\":1}").unwrap();
        assert_eq!((k, at, rest), (Kind::Srq, 8, "{\"x\":1}"));
        assert_eq!(Kind::find("ibkern-result{").map(|f| f.0), None);
        assert_eq!(Kind::find("pingpong: PASS"), None);
        // The earliest prefix wins when a line holds two (a console that lost a newline).
        let two = "ibkern-port {} ibkern-result {}";
        assert_eq!(Kind::find(two).map(|f| f.0), Some(Kind::Port));
    }
}
