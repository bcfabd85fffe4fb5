//! A bandwidth test's result line: one per size and node.
//!
//! ```text
//! ibkern-result {"test":"send_bw","transport":"UD","role":"client","bytes":1024,"iterations":200,
//! "bw_peak_mbs":1234.500,"bw_avg_mbs":1000.250,"msg_rate_mpps":1.024000,...,"lost":3,"aborted":false}
//! ```

use core::fmt::{self, Write};

use super::emit::Object;
#[cfg(feature = "parse")]
use super::{Fields, Parse, ParseError};
use super::{Kind, Record};
use crate::config::{Role, Test, Transport};

/// perftest's bandwidth figures of a size, as the sender reports them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BandwidthFigures {
    /// MB/sec (perftest's MB: MiB).
    pub bw_peak_mbs: f64,
    pub bw_avg_mbs: f64,
    pub msg_rate_mpps: f64,
}

impl From<&crate::bw::BwReport> for BandwidthFigures {
    fn from(r: &crate::bw::BwReport) -> Self {
        BandwidthFigures {
            bw_peak_mbs: r.bw_peak,
            bw_avg_mbs: r.bw_avg,
            msg_rate_mpps: r.msg_rate_mpps,
        }
    }
}

/// Everything a bandwidth test's result line carries (one per size and node).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BandwidthLine {
    /// A bandwidth test (`send_bw`, `write_bw`, `read_bw`, `atomic_bw`).
    pub test: Test,
    pub transport: Transport,
    pub role: Role,
    pub bytes: u32,
    /// Messages the sender sent (`-n`).
    pub iterations: u32,
    /// The sender's figures; `None` on the receiving or passive side.
    pub figures: Option<BandwidthFigures>,
    pub tsc_mhz: f64,
    pub inline: bool,
    pub mtu: u32,
    /// The tx depth, post list and CQ moderation in force.
    pub tx_depth: u32,
    pub post_list: u32,
    pub cq_mod: u32,
    /// Messages the receiver counted and their payload bytes; `None` when nothing counts
    /// them (write_bw's passive server).
    pub received: Option<u64>,
    pub bytes_received: Option<u64>,
    /// Messages sent and not received (0 when nothing counts them).
    pub lost: u64,
}

impl Record for BandwidthLine {
    const KIND: Kind = Kind::Result;

    fn emit_object<W: Write>(&self, out: &mut W) -> fmt::Result {
        let mut o = Object::start(out)?;
        o.str("test", self.test.name())?;
        o.str("transport", self.transport.name())?;
        o.str("role", self.role.name())?;
        o.raw("bytes", self.bytes)?;
        o.raw("iterations", self.iterations)?;
        let f = self.figures.as_ref();
        o.fixed("bw_peak_mbs", f.map(|f| f.bw_peak_mbs), 3)?;
        o.fixed("bw_avg_mbs", f.map(|f| f.bw_avg_mbs), 3)?;
        o.fixed("msg_rate_mpps", f.map(|f| f.msg_rate_mpps), 6)?;
        o.fixed("tsc_mhz", Some(self.tsc_mhz), 3)?;
        o.raw("inline", self.inline)?;
        o.raw("mtu", self.mtu)?;
        o.raw("tx_depth", self.tx_depth)?;
        o.raw("post_list", self.post_list)?;
        o.raw("cq_mod", self.cq_mod)?;
        o.opt("received", self.received)?;
        o.opt("bytes_received", self.bytes_received)?;
        o.raw("lost", self.lost)?;
        // A bandwidth size is never aborted; the key keeps the result lines' shape.
        o.raw("aborted", false)?;
        o.end()
    }
}

#[cfg(feature = "parse")]
impl Parse for BandwidthLine {
    fn from_fields(f: &Fields<'_>) -> Result<Self, ParseError> {
        let test = f.test("test")?;
        if !test.is_bw() {
            return Err(ParseError::Inconsistent(alloc::format!(
                "{} is not a bandwidth test",
                test.name()
            )));
        }
        let figures = match [
            f.opt_f64("bw_peak_mbs")?,
            f.opt_f64("bw_avg_mbs")?,
            f.opt_f64("msg_rate_mpps")?,
        ] {
            [Some(bw_peak_mbs), Some(bw_avg_mbs), Some(msg_rate_mpps)] => Some(BandwidthFigures {
                bw_peak_mbs,
                bw_avg_mbs,
                msg_rate_mpps,
            }),
            [None, None, None] => None,
            _ => {
                return Err(ParseError::Inconsistent(
                    "some bandwidth figures are null, others not".into(),
                ))
            }
        };
        let iterations: u32 = f.int("iterations")?;
        let received = f.opt_u64("received")?;
        let lost = f.u64("lost")?;
        if let Some(r) = received {
            if r.checked_add(lost) != Some(u64::from(iterations)) {
                return Err(ParseError::Inconsistent(alloc::format!(
                    "received {r} + lost {lost} is not the {iterations} iterations"
                )));
            }
        }
        Ok(BandwidthLine {
            test,
            transport: f.transport("transport")?,
            role: f.role("role")?,
            bytes: f.int("bytes")?,
            iterations,
            figures,
            tsc_mhz: f.f64("tsc_mhz")?,
            inline: f.bool("inline")?,
            mtu: f.int("mtu")?,
            tx_depth: f.int("tx_depth")?,
            post_list: f.int("post_list")?,
            cq_mod: f.int("cq_mod")?,
            received,
            bytes_received: f.opt_u64("bytes_received")?,
            lost,
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use alloc::string::String;

    pub fn sample() -> BandwidthLine {
        BandwidthLine {
            test: Test::SendBw,
            transport: Transport::Ud,
            role: Role::Client,
            bytes: 1024,
            iterations: 200,
            figures: Some(BandwidthFigures {
                bw_peak_mbs: 1234.5,
                bw_avg_mbs: 1000.25,
                msg_rate_mpps: 1.024,
            }),
            tsc_mhz: 2000.0,
            inline: false,
            mtu: 2048,
            tx_depth: 64,
            post_list: 1,
            cq_mod: 16,
            received: Some(197),
            bytes_received: Some(197 * 1024),
            lost: 3,
        }
    }

    #[test]
    fn bandwidth_line_carries_figures_and_exact_loss() {
        let r = sample();
        let mut s = String::new();
        r.emit(&mut s).unwrap();
        assert_eq!(
            s,
            "ibkern-result {\"test\":\"send_bw\",\"transport\":\"UD\",\"role\":\"client\",\"bytes\":1024,\"iterations\":200,\"bw_peak_mbs\":1234.500,\"bw_avg_mbs\":1000.250,\"msg_rate_mpps\":1.024000,\"tsc_mhz\":2000.000,\"inline\":false,\"mtu\":2048,\"tx_depth\":64,\"post_list\":1,\"cq_mod\":16,\"received\":197,\"bytes_received\":201728,\"lost\":3,\"aborted\":false}\n"
        );
        let passive = BandwidthLine {
            test: Test::WriteBw,
            role: Role::Server,
            figures: None,
            received: None,
            bytes_received: None,
            lost: 0,
            ..r
        };
        let mut s = String::new();
        passive.emit(&mut s).unwrap();
        assert!(
            s.contains("\"bw_peak_mbs\":null,\"bw_avg_mbs\":null,\"msg_rate_mpps\":null"),
            "{s}"
        );
        assert!(
            s.contains("\"received\":null,\"bytes_received\":null,\"lost\":0"),
            "{s}"
        );
    }
}
