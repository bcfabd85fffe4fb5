//! The SRQ ping-pong's result line: one per run and node (docs/benchmarks.md, "SRQ
//! ping-pong").
//!
//! ```text
//! ibkern-srq-result {"test":"srq_pingpong","role":"client","run":2,"runs":3,"qps":1,"rx_depth":4,
//! "bytes":64,"iterations":40,"completion":"event","cq_count":4,"cq_period_us":50,...}
//! ```

use core::fmt::{self, Write};

use verbs::CqModeration;

use super::emit::Object;
#[cfg(feature = "parse")]
use super::{Fields, Parse, ParseError};
use super::{Kind, Record};
use crate::config::{Completion, Role};
use crate::srq::Rtt;

/// The test name the line carries.
pub const SRQ_TEST: &str = "srq_pingpong";

/// Everything an SRQ result line carries.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SrqLine {
    pub role: Role,
    /// The run (from 1) of `runs`.
    pub run: u16,
    pub runs: u16,
    pub qps: u32,
    pub rx_depth: u32,
    pub bytes: u32,
    pub iterations: u32,
    /// `Poll` or `Event` (`-e`).
    pub completion: Completion,
    /// The CQ moderation applied (`None`: left as created).
    pub moderation: Option<CqModeration>,
    pub elapsed_us: f64,
    pub mbit_per_sec: f64,
    pub usec_per_iter: f64,
    /// The round trips this node measured; `None` before any receive.
    pub rtt: Option<Rtt>,
    pub cq_events: u32,
    pub fallbacks: u32,
    /// Device interrupts the node counted from just before its first send to its end.
    pub interrupts: u64,
    pub interrupts_per_message: f64,
    pub refills: u32,
    pub tsc_mhz: f64,
}

impl Record for SrqLine {
    const KIND: Kind = Kind::Srq;

    fn emit_object<W: Write>(&self, out: &mut W) -> fmt::Result {
        let mut o = Object::start(out)?;
        o.str("test", SRQ_TEST)?;
        o.str("role", self.role.name())?;
        o.raw("run", self.run)?;
        o.raw("runs", self.runs)?;
        o.raw("qps", self.qps)?;
        o.raw("rx_depth", self.rx_depth)?;
        o.raw("bytes", self.bytes)?;
        o.raw("iterations", self.iterations)?;
        o.str("completion", self.completion.name())?;
        let m = self.moderation;
        o.opt("cq_count", m.map(|m| u64::from(m.cq_count)))?;
        o.opt("cq_period_us", m.map(|m| u64::from(m.cq_period)))?;
        o.fixed("elapsed_us", Some(self.elapsed_us), 3)?;
        o.fixed("mbit_per_sec", Some(self.mbit_per_sec), 2)?;
        o.fixed("usec_per_iter", Some(self.usec_per_iter), 3)?;
        let r = self.rtt.as_ref();
        o.raw("rtt_samples", r.map_or(0, |r| r.samples))?;
        o.fixed("rtt_typical_us", r.map(|r| r.typical_us), 3)?;
        o.fixed("rtt_avg_us", r.map(|r| r.avg_us), 3)?;
        o.raw("cq_events", self.cq_events)?;
        o.raw("fallbacks", self.fallbacks)?;
        o.raw("interrupts", self.interrupts)?;
        o.fixed(
            "interrupts_per_message",
            Some(self.interrupts_per_message),
            4,
        )?;
        o.raw("refills", self.refills)?;
        o.fixed("tsc_mhz", Some(self.tsc_mhz), 3)?;
        o.end()
    }
}

#[cfg(feature = "parse")]
impl Parse for SrqLine {
    fn from_fields(f: &Fields<'_>) -> Result<Self, ParseError> {
        if f.str("test")? != SRQ_TEST {
            return Err(ParseError::Inconsistent(alloc::format!(
                "\"test\" is not \"{SRQ_TEST}\""
            )));
        }
        let moderation = match (f.opt_int("cq_count")?, f.opt_int("cq_period_us")?) {
            (Some(cq_count), Some(cq_period)) => Some(CqModeration {
                cq_count,
                cq_period,
            }),
            (None, None) => None,
            _ => {
                return Err(ParseError::Inconsistent(
                    "cq_count and cq_period_us not both given".into(),
                ))
            }
        };
        let rtt = match (f.opt_f64("rtt_typical_us")?, f.opt_f64("rtt_avg_us")?) {
            (Some(typical_us), Some(avg_us)) => Some(Rtt {
                samples: f.int("rtt_samples")?,
                typical_us,
                avg_us,
            }),
            (None, None) => None,
            _ => {
                return Err(ParseError::Inconsistent(
                    "rtt_typical_us and rtt_avg_us not both given".into(),
                ))
            }
        };
        Ok(SrqLine {
            role: f.role("role")?,
            run: f.int("run")?,
            runs: f.int("runs")?,
            qps: f.int("qps")?,
            rx_depth: f.int("rx_depth")?,
            bytes: f.int("bytes")?,
            iterations: f.int("iterations")?,
            completion: f.completion("completion")?,
            moderation,
            elapsed_us: f.f64("elapsed_us")?,
            mbit_per_sec: f.f64("mbit_per_sec")?,
            usec_per_iter: f.f64("usec_per_iter")?,
            rtt,
            cq_events: f.int("cq_events")?,
            fallbacks: f.int("fallbacks")?,
            interrupts: f.u64("interrupts")?,
            interrupts_per_message: f.f64("interrupts_per_message")?,
            refills: f.int("refills")?,
            tsc_mhz: f.f64("tsc_mhz")?,
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use alloc::string::String;

    pub fn sample() -> SrqLine {
        SrqLine {
            role: Role::Client,
            run: 2,
            runs: 3,
            qps: 1,
            rx_depth: 4,
            bytes: 64,
            iterations: 40,
            completion: Completion::Event,
            moderation: Some(CqModeration {
                cq_count: 4,
                cq_period: 50,
            }),
            elapsed_us: 2524.0,
            mbit_per_sec: 16.23,
            usec_per_iter: 63.1,
            rtt: Some(Rtt {
                samples: 40,
                typical_us: 63.0,
                avg_us: 63.1,
            }),
            cq_events: 40,
            fallbacks: 0,
            interrupts: 42,
            interrupts_per_message: 1.05,
            refills: 14,
            tsc_mhz: 1000.0,
        }
    }

    #[test]
    fn srq_line_has_the_run_its_setting_and_figures() {
        let mut s = String::new();
        sample().emit(&mut s).unwrap();
        assert_eq!(
            s,
            "ibkern-srq-result {\"test\":\"srq_pingpong\",\"role\":\"client\",\"run\":2,\"runs\":3,\"qps\":1,\"rx_depth\":4,\"bytes\":64,\"iterations\":40,\"completion\":\"event\",\"cq_count\":4,\"cq_period_us\":50,\"elapsed_us\":2524.000,\"mbit_per_sec\":16.23,\"usec_per_iter\":63.100,\"rtt_samples\":40,\"rtt_typical_us\":63.000,\"rtt_avg_us\":63.100,\"cq_events\":40,\"fallbacks\":0,\"interrupts\":42,\"interrupts_per_message\":1.0500,\"refills\":14,\"tsc_mhz\":1000.000}\n"
        );
        let unset = SrqLine {
            moderation: None,
            rtt: None,
            ..sample()
        };
        let mut s = String::new();
        unset.emit(&mut s).unwrap();
        assert!(
            s.contains("\"cq_count\":null,\"cq_period_us\":null,"),
            "{s}"
        );
        assert!(s.contains("\"rtt_samples\":0,\"rtt_typical_us\":null,\"rtt_avg_us\":null,"));
    }
}
