//! The anatomy line: where one size's round trip went, as the client measured it
//! (`anatomy=on`; docs/benchmarks.md, "Where the time goes"). A run prints one per size
//! after its anatomy table.
//!
//! ```text
//! ibkern-anatomy {"test":"send_lat","transport":"UC","role":"client","completion":"poll","bytes":4,
//! "samples":998,"post_med_us":0.1000,"post_avg_us":0.1250,...,"peer":"software","tsc_mhz":2400.0000}
//! ```

use core::fmt::{self, Write};

use super::emit::Object;
#[cfg(feature = "parse")]
use super::{Fields, Parse, ParseError};
use super::{Kind, Record};
use crate::config::{Completion, Role, Test, Transport};
use crate::perftest::{AnatomyContext, AnatomyRow, MedAvg, PeerPart};

/// Everything an anatomy line carries.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AnatomyLine {
    pub test: Test,
    pub transport: Transport,
    pub role: Role,
    pub completion: Completion,
    pub bytes: u32,
    /// Iterations whose post and send completion were timed.
    pub samples: u64,
    /// Entering the post to its return (after the BlueFlame/doorbell store).
    pub post: Option<MedAvg>,
    /// Entering the post to polling its send completion.
    pub send_cqe: Option<MedAvg>,
    /// The full round trip.
    pub rtt: Option<MedAvg>,
    /// The server's part: its own turnaround, its HCA (read, atomic: written as zero), or
    /// missing.
    pub peer: PeerPart,
    /// `(RTT - peer turnaround) / 2`: wire and NICs, one way.
    pub wire_nic: Option<MedAvg>,
    pub tsc_mhz: f64,
}

impl AnatomyLine {
    /// The line of a client's table row.
    pub fn of(c: &AnatomyContext, r: &AnatomyRow) -> AnatomyLine {
        AnatomyLine {
            test: c.test,
            transport: c.transport,
            role: Role::Client,
            completion: c.completion,
            bytes: r.bytes,
            samples: r.samples as u64,
            post: r.post,
            send_cqe: r.send_cqe,
            rtt: r.rtt,
            peer: r.peer,
            wire_nic: r.wire_nic(),
            tsc_mhz: c.tsc_mhz,
        }
    }

    /// The peer's turnaround as the line writes it: zero when the HCA answered.
    pub fn peer_figures(&self) -> Option<MedAvg> {
        match self.peer {
            PeerPart::Software(p) => Some(p),
            PeerPart::Hca => Some(MedAvg {
                median: 0.0,
                average: 0.0,
            }),
            PeerPart::Missing => None,
        }
    }

    /// The `peer` field: "software" (the server measured), "hca" (read/atomic), "missing"
    /// (its report was lost).
    pub fn peer_by(&self) -> &'static str {
        match self.peer {
            PeerPart::Software(_) => "software",
            PeerPart::Hca => "hca",
            PeerPart::Missing => "missing",
        }
    }
}

/// `"<name>_med_us":x,"<name>_avg_us":y`, both null unless both are finite.
fn pair<W: Write>(o: &mut Object<'_, W>, name: &str, v: Option<MedAvg>) -> fmt::Result {
    let v = v.filter(|m| m.median.is_finite() && m.average.is_finite());
    o.fixed(format_args!("{name}_med_us"), v.map(|m| m.median), 4)?;
    o.fixed(format_args!("{name}_avg_us"), v.map(|m| m.average), 4)
}

impl Record for AnatomyLine {
    const KIND: Kind = Kind::Anatomy;

    fn emit_object<W: Write>(&self, out: &mut W) -> fmt::Result {
        let mut o = Object::start(out)?;
        o.str("test", self.test.name())?;
        o.str("transport", self.transport.name())?;
        o.str("role", self.role.name())?;
        o.str("completion", self.completion.name())?;
        o.raw("bytes", self.bytes)?;
        o.raw("samples", self.samples)?;
        pair(&mut o, "post", self.post)?;
        pair(&mut o, "send_cqe", self.send_cqe)?;
        pair(&mut o, "rtt", self.rtt)?;
        pair(&mut o, "peer", self.peer_figures())?;
        pair(&mut o, "wire_nic", self.wire_nic)?;
        o.str("peer", self.peer_by())?;
        o.fixed("tsc_mhz", Some(self.tsc_mhz), 4)?;
        o.end()
    }
}

#[cfg(feature = "parse")]
impl Parse for AnatomyLine {
    fn from_fields(f: &Fields<'_>) -> Result<Self, ParseError> {
        let test = f.test("test")?;
        let transport = f.transport("transport")?;
        let role = f.role("role")?;
        let completion = f.completion("completion")?;
        let bytes = f.int("bytes")?;
        let samples = f.u64("samples")?;
        let post = f.med_avg("post")?;
        let send_cqe = f.med_avg("send_cqe")?;
        let rtt = f.med_avg("rtt")?;
        let peer_figures = f.med_avg("peer")?;
        let wire_nic = f.med_avg("wire_nic")?;
        let peer = match (f.str("peer")?, peer_figures) {
            ("software", Some(p)) => PeerPart::Software(p),
            ("software", None) => {
                return Err(ParseError::Inconsistent(
                    "\"peer\" is \"software\" but its turnaround is null".into(),
                ))
            }
            ("hca", _) => PeerPart::Hca,
            ("missing", _) => PeerPart::Missing,
            (other, _) => {
                return Err(ParseError::Unknown {
                    key: "peer".into(),
                    value: other.into(),
                })
            }
        };
        Ok(AnatomyLine {
            test,
            transport,
            role,
            completion,
            bytes,
            samples,
            post,
            send_cqe,
            rtt,
            peer,
            wire_nic,
            tsc_mhz: f.f64("tsc_mhz")?,
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use alloc::string::String;

    pub fn sample() -> AnatomyLine {
        let c = AnatomyContext {
            test: Test::SendLat,
            transport: Transport::Uc,
            completion: Completion::Poll,
            tsc_mhz: 2400.0,
        };
        let r = AnatomyRow {
            index: 1,
            bytes: 4,
            samples: 998,
            post: Some(MedAvg {
                median: 0.1,
                average: 0.125,
            }),
            send_cqe: Some(MedAvg {
                median: 0.5,
                average: 0.55,
            }),
            rtt: Some(MedAvg {
                median: 2.0,
                average: 2.2,
            }),
            peer: PeerPart::Software(MedAvg {
                median: 0.4,
                average: 0.6,
            }),
        };
        AnatomyLine::of(&c, &r)
    }

    #[test]
    fn anatomy_line_has_every_part_and_the_peer() {
        let a = sample();
        let mut s = String::new();
        a.emit(&mut s).unwrap();
        assert_eq!(
            s,
            "ibkern-anatomy {\"test\":\"send_lat\",\"transport\":\"UC\",\"role\":\"client\",\"completion\":\"poll\",\"bytes\":4,\"samples\":998,\"post_med_us\":0.1000,\"post_avg_us\":0.1250,\"send_cqe_med_us\":0.5000,\"send_cqe_avg_us\":0.5500,\"rtt_med_us\":2.0000,\"rtt_avg_us\":2.2000,\"peer_med_us\":0.4000,\"peer_avg_us\":0.6000,\"wire_nic_med_us\":0.8000,\"wire_nic_avg_us\":0.8000,\"peer\":\"software\",\"tsc_mhz\":2400.0000}\n"
        );
        let hca = AnatomyLine {
            peer: PeerPart::Hca,
            ..a
        };
        let mut s = String::new();
        hca.emit(&mut s).unwrap();
        assert!(
            s.contains("\"peer_med_us\":0.0000,\"peer_avg_us\":0.0000"),
            "{s}"
        );
        assert!(s.contains("\"peer\":\"hca\""), "{s}");
        let missing = AnatomyLine {
            peer: PeerPart::Missing,
            wire_nic: None,
            ..a
        };
        let mut s = String::new();
        missing.emit(&mut s).unwrap();
        assert!(s.contains("\"peer_med_us\":null,\"peer_avg_us\":null,\"wire_nic_med_us\":null"));
    }
}
