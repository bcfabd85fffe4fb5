//! The machine-readable lines a node prints on its console, one typed record per kind, each
//! with its `emit` (no allocation: the kernel writes them between measured sizes) and, with
//! the `parse` feature, its `parse` (the runner reads them back); docs/benchmarks.md,
//! "Output", has every field.
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
//! | `Node` | `ibkern-node ` | [`NodeLine`]: the node that ran them (kernel, CPU, TSC, HCA, configuration) |
//!
//! Adding a kind is a change here only: a file with the record and its [`Record`] impl (the
//! object's fields in order for `emit`) and its [`Parse`] impl (the same fields read back), a
//! [`Kind`] with its prefix in [`Kind::ALL`], and a [`Line`] variant read in
//! [`Line::parse`]. The runner finds lines of every kind in [`Kind::ALL`] and hands each to
//! [`Line::parse`]; the round-trip test below covers every variant.

mod anatomy;
mod bandwidth;
mod emit;
mod latency;
mod node;
#[cfg(feature = "parse")]
mod parse;
mod port;
mod srq;

use core::fmt::{self, Write};

pub use anatomy::AnatomyLine;
pub use bandwidth::{BandwidthFigures, BandwidthLine};
pub use latency::LatencyLine;
pub use node::NodeLine;
#[cfg(feature = "parse")]
pub use parse::{Fields, ParseError};
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
/// The prefix of the node line.
pub const NODE_PREFIX: &str = Kind::Node.prefix();

/// The kinds of line, by prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Result,
    Port,
    Anatomy,
    Srq,
    Node,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 5] = [
        Kind::Result,
        Kind::Port,
        Kind::Anatomy,
        Kind::Srq,
        Kind::Node,
    ];

    /// The prefix, with its trailing space; no prefix contains another.
    pub const fn prefix(self) -> &'static str {
        match self {
            Kind::Result => "ibkern-result ",
            Kind::Port => "ibkern-port ",
            Kind::Anatomy => "ibkern-anatomy ",
            Kind::Srq => "ibkern-srq-result ",
            Kind::Node => "ibkern-node ",
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

/// Reading a record back from its line's JSON object (feature `parse`).
#[cfg(feature = "parse")]
pub trait Parse: Sized {
    /// Reads the record from its object's fields.
    fn from_fields(f: &Fields<'_>) -> Result<Self, ParseError>;

    /// Reads the record from the JSON object after its prefix (surrounding blanks ignored).
    fn parse(json: &str) -> Result<Self, ParseError> {
        parse::with_fields(json, Self::from_fields)
    }
}

/// A line of any kind, read back.
#[cfg(feature = "parse")]
#[derive(Clone, Debug, PartialEq)]
pub enum Line {
    Latency(LatencyLine),
    Bandwidth(BandwidthLine),
    Port(PortLine),
    Anatomy(AnatomyLine),
    Srq(SrqLine),
    Node(NodeLine),
}

#[cfg(feature = "parse")]
impl Line {
    /// Reads the JSON object of a line of `kind`. A result line is a bandwidth test's when
    /// its `test` is one ([`crate::Test::is_bw`]), else a latency test's.
    pub fn parse(kind: Kind, json: &str) -> Result<Line, ParseError> {
        match kind {
            Kind::Result => parse::with_fields(json, |f| {
                if f.test("test")?.is_bw() {
                    BandwidthLine::from_fields(f).map(Line::Bandwidth)
                } else {
                    LatencyLine::from_fields(f).map(Line::Latency)
                }
            }),
            Kind::Port => PortLine::parse(json).map(Line::Port),
            Kind::Anatomy => AnatomyLine::parse(json).map(Line::Anatomy),
            Kind::Srq => SrqLine::parse(json).map(Line::Srq),
            Kind::Node => NodeLine::parse(json).map(Line::Node),
        }
    }

    /// Writes the line as the node printed it.
    pub fn emit<W: Write>(&self, out: &mut W) -> fmt::Result {
        match self {
            Line::Latency(r) => r.emit(out),
            Line::Bandwidth(r) => r.emit(out),
            Line::Port(r) => r.emit(out),
            Line::Anatomy(r) => r.emit(out),
            Line::Srq(r) => r.emit(out),
            Line::Node(r) => r.emit(out),
        }
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

    /// Every kind's sample line, written and read back through [`Line`]: the same record.
    #[cfg(feature = "parse")]
    #[test]
    fn every_kind_round_trips_through_its_line() {
        use alloc::string::String;
        let samples = [
            Line::Latency(latency::tests::sample()),
            Line::Bandwidth(bandwidth::tests::sample()),
            Line::Bandwidth(BandwidthLine {
                test: crate::Test::WriteBw,
                figures: None,
                received: None,
                bytes_received: None,
                lost: 0,
                ..bandwidth::tests::sample()
            }),
            Line::Latency(LatencyLine {
                stats: None,
                aborted: true,
                interrupts: None,
                ..latency::tests::sample()
            }),
            Line::Port(port::tests::sample()),
            Line::Anatomy(anatomy::tests::sample()),
            Line::Srq(srq::tests::sample()),
            Line::Srq(SrqLine {
                moderation: None,
                rtt: None,
                ..srq::tests::sample()
            }),
            Line::Node(node::tests::sample()),
            Line::Node(NodeLine {
                pcie_link: None,
                ..node::tests::sample()
            }),
        ];
        for line in samples {
            let mut text = String::new();
            line.emit(&mut text).unwrap();
            let (kind, _, json) = Kind::find(&text).expect("a prefix");
            assert_eq!(Line::parse(kind, json).as_ref(), Ok(&line), "{text}");
        }
    }

    /// Each kind's sample line with one thing broken: refused, with the reason naming it.
    #[cfg(feature = "parse")]
    #[test]
    fn malformed_lines_are_refused_with_the_reason() {
        use alloc::string::{String, ToString};
        let text = |line: Line| {
            let mut s = String::new();
            line.emit(&mut s).unwrap();
            let (kind, _, json) = Kind::find(&s).unwrap();
            (kind, json.trim_end().to_string())
        };
        let lat = text(Line::Latency(latency::tests::sample()));
        let bw = text(Line::Bandwidth(bandwidth::tests::sample()));
        let port = text(Line::Port(port::tests::sample()));
        let anat = text(Line::Anatomy(anatomy::tests::sample()));
        let srq = text(Line::Srq(srq::tests::sample()));
        let cases: [(&(Kind, String), &str, &str, &str); 18] = [
            (
                &lat,
                "\"transport\":\"UD\"",
                "\"transport\":\"IB\"",
                "unknown transport \"IB\"",
            ),
            (
                &lat,
                "\"t_avg_us\":0.800",
                "\"t_avg_us\":null",
                "some latency figures are null",
            ),
            (
                &lat,
                "\"bytes\":2",
                "\"bytes\":4294967296",
                "\"bytes\" is out of range",
            ),
            (&lat, "\"mtu\":2048,", "", "missing \"mtu\""),
            (
                &lat,
                "\"inline\":true",
                "\"inline\":1",
                "\"inline\" is not a boolean",
            ),
            (
                &lat,
                "\"send_lat\"",
                "\"send_bw\"",
                "missing \"bw_peak_mbs\"",
            ),
            (
                &lat,
                "\"completion\":\"poll\"",
                "\"completion\":\"irq\"",
                "unknown completion",
            ),
            (
                &bw,
                "\"lost\":3",
                "\"lost\":4",
                "received 197 + lost 4 is not the 200 iterations",
            ),
            (
                &bw,
                "\"bw_avg_mbs\":1000.250",
                "\"bw_avg_mbs\":null",
                "some bandwidth figures",
            ),
            (&bw, "\"tx_depth\":64,", "", "missing \"tx_depth\""),
            (
                &port,
                "\"rcv_pkts\":27",
                "\"rcv_pkts\":-27",
                "after: \"rcv_pkts\" is not",
            ),
            (
                &port,
                "\"port\":1",
                "\"port\":256",
                "\"port\" is out of range",
            ),
            (
                &anat,
                "\"peer_avg_us\":0.6000",
                "\"peer_avg_us\":null",
                "peer: median and average not both",
            ),
            (
                &anat,
                "\"peer_med_us\":0.4000,\"peer_avg_us\":0.6000",
                "\"peer_med_us\":null,\"peer_avg_us\":null",
                "but its turnaround is null",
            ),
            (
                &anat,
                "\"peer\":\"software\"",
                "\"peer\":\"nic\"",
                "unknown peer \"nic\"",
            ),
            (
                &srq,
                "\"srq_pingpong\"",
                "\"send_lat\"",
                "\"test\" is not \"srq_pingpong\"",
            ),
            (
                &srq,
                "\"cq_period_us\":50",
                "\"cq_period_us\":null",
                "not both given",
            ),
            (
                &srq,
                "\"role\":\"client\"",
                "\"role\":\"both\"",
                "unknown role \"both\"",
            ),
        ];
        for ((kind, json), from, to, why) in cases {
            assert!(json.contains(from), "{from} not in {json}");
            let broken = json.replacen(from, to, 1);
            let e = Line::parse(*kind, &broken).unwrap_err().to_string();
            assert!(e.contains(why), "{why:?} not in {e:?} for {broken}");
        }
        // Cut by the console, or not an object.
        let cut = &lat.1[..lat.1.len() / 2];
        assert!(Line::parse(Kind::Result, cut)
            .unwrap_err()
            .to_string()
            .starts_with("not JSON"));
        assert_eq!(Line::parse(Kind::Port, "[1]"), Err(ParseError::NotObject));
        // A name in another case is not the name the lines write.
        let upper = lat.1.replace("\"client\"", "\"Client\"");
        assert!(Line::parse(Kind::Result, &upper).is_err());
    }
}
