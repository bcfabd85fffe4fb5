//! A latency test's result line: one per size, after perftest's row.
//!
//! ```text
//! ibkern-result {"test":"send_lat","transport":"UD","role":"client","bytes":2,"iterations":1000,
//! "samples":999,"t_min_us":0.770,...,"interrupts":1500,"interrupts_per_iter":1.500}
//! ```

use core::fmt::{self, Write};

use super::emit::Object;
#[cfg(feature = "parse")]
use super::{Fields, Parse, ParseError};
use super::{Kind, Record};
use crate::config::{Completion, Role, Test, Transport};
use crate::stats::LatencyStats;

/// Everything a latency result line carries.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencyLine {
    /// A latency test (`send_lat`, `write_lat`, `read_lat`, `atomic_lat`).
    pub test: Test,
    pub transport: Transport,
    pub role: Role,
    pub bytes: u32,
    /// Iterations configured (`-n`).
    pub iterations: u32,
    /// `None` when the size was aborted or too few clean samples remained; its
    /// `iterations` is the line's.
    pub stats: Option<LatencyStats>,
    pub tsc_mhz: f64,
    pub inline: bool,
    pub completion: Completion,
    /// Path MTU in bytes.
    pub mtu: u32,
    pub lost: u32,
    pub retries: u32,
    pub aborted: bool,
    /// Interrupts the device raised while the size was measured (`None`: unknown).
    pub interrupts: Option<u64>,
}

impl LatencyLine {
    /// Interrupts per iteration (`interrupts_per_iter`, which the line rounds to 3
    /// decimals).
    pub fn interrupts_per_iter(&self) -> Option<f64> {
        self.interrupts
            .map(|n| n as f64 / f64::from(self.iterations.max(1)))
    }
}

/// The keys of the figures, in the order of [`LatencyStats`]' fields.
const FIGURES: [&str; 9] = [
    "t_min_us",
    "t_max_us",
    "t_typical_us",
    "t_avg_us",
    "t_stdev_us",
    "p99_us",
    "p99_9_us",
    "true_max_us",
    "true_stdev_us",
];

impl Record for LatencyLine {
    const KIND: Kind = Kind::Result;

    fn emit_object<W: Write>(&self, out: &mut W) -> fmt::Result {
        let mut o = Object::start(out)?;
        o.str("test", self.test.name())?;
        o.str("transport", self.transport.name())?;
        o.str("role", self.role.name())?;
        o.raw("bytes", self.bytes)?;
        o.raw("iterations", self.iterations)?;
        let s = self.stats.as_ref();
        o.raw("samples", s.map_or(0, |s| s.samples))?;
        let figures = s.map(|s| {
            [
                s.t_min,
                s.t_max,
                s.t_typical,
                s.t_avg,
                s.t_stdev,
                s.p99,
                s.p99_9,
                s.true_max,
                s.true_stdev,
            ]
        });
        for (i, key) in FIGURES.iter().enumerate() {
            o.fixed(key, figures.map(|v| v[i]), 3)?;
        }
        o.fixed("tsc_mhz", Some(self.tsc_mhz), 3)?;
        o.raw("inline", self.inline)?;
        o.str("completion", self.completion.name())?;
        o.raw("mtu", self.mtu)?;
        o.raw("lost", self.lost)?;
        o.raw("retries", self.retries)?;
        o.raw("aborted", self.aborted)?;
        o.opt("interrupts", self.interrupts)?;
        o.fixed("interrupts_per_iter", self.interrupts_per_iter(), 3)?;
        o.end()
    }
}

#[cfg(feature = "parse")]
impl Parse for LatencyLine {
    fn from_fields(f: &Fields<'_>) -> Result<Self, ParseError> {
        let test = f.test("test")?;
        if test.is_bw() {
            return Err(ParseError::Inconsistent(alloc::format!(
                "{} is a bandwidth test",
                test.name()
            )));
        }
        let iterations = f.int("iterations")?;
        let mut v = [None; 9];
        for (slot, key) in v.iter_mut().zip(FIGURES) {
            *slot = f.opt_f64(key)?;
        }
        let stats = match v {
            [Some(t_min), Some(t_max), Some(t_typical), Some(t_avg), Some(t_stdev), Some(p99), Some(p99_9), Some(true_max), Some(true_stdev)] => {
                Some(LatencyStats {
                    iterations: iterations as usize,
                    samples: f.int("samples")?,
                    t_min,
                    t_max,
                    t_typical,
                    t_avg,
                    t_stdev,
                    p99,
                    p99_9,
                    true_max,
                    true_stdev,
                })
            }
            v if v.iter().all(Option::is_none) => None,
            _ => {
                return Err(ParseError::Inconsistent(
                    "some latency figures are null, others not".into(),
                ))
            }
        };
        Ok(LatencyLine {
            test,
            transport: f.transport("transport")?,
            role: f.role("role")?,
            bytes: f.int("bytes")?,
            iterations,
            stats,
            tsc_mhz: f.f64("tsc_mhz")?,
            inline: f.bool("inline")?,
            completion: f.completion("completion")?,
            mtu: f.int("mtu")?,
            lost: f.int("lost")?,
            retries: f.int("retries")?,
            aborted: f.bool("aborted")?,
            // Kernels before the interrupt counts wrote neither key.
            interrupts: if f.has("interrupts") {
                f.opt_u64("interrupts")?
            } else {
                None
            },
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use alloc::string::String;

    /// A client's line with every figure, exactly representable at 3 decimals.
    pub fn sample() -> LatencyLine {
        LatencyLine {
            test: Test::SendLat,
            transport: Transport::Ud,
            role: Role::Client,
            bytes: 2,
            iterations: 1000,
            stats: Some(LatencyStats {
                iterations: 1000,
                samples: 999,
                t_min: 0.77,
                t_max: 5.35,
                t_typical: 0.79,
                t_avg: 0.8,
                t_stdev: 0.05,
                p99: 0.84,
                p99_9: 5.35,
                true_max: 9.0,
                true_stdev: 0.3,
            }),
            tsc_mhz: 2400.0,
            inline: true,
            completion: Completion::Poll,
            mtu: 2048,
            lost: 1,
            retries: 2,
            aborted: false,
            interrupts: Some(1500),
        }
    }

    #[test]
    fn line_is_prefixed_json_with_every_field() {
        let r = sample();
        let mut s = String::new();
        r.emit(&mut s).unwrap();
        assert_eq!(
            s,
            "ibkern-result {\"test\":\"send_lat\",\"transport\":\"UD\",\"role\":\"client\",\"bytes\":2,\"iterations\":1000,\"samples\":999,\"t_min_us\":0.770,\"t_max_us\":5.350,\"t_typical_us\":0.790,\"t_avg_us\":0.800,\"t_stdev_us\":0.050,\"p99_us\":0.840,\"p99_9_us\":5.350,\"true_max_us\":9.000,\"true_stdev_us\":0.300,\"tsc_mhz\":2400.000,\"inline\":true,\"completion\":\"poll\",\"mtu\":2048,\"lost\":1,\"retries\":2,\"aborted\":false,\"interrupts\":1500,\"interrupts_per_iter\":1.500}\n"
        );
        let aborted = LatencyLine {
            stats: None,
            aborted: true,
            interrupts: None,
            ..r
        };
        let mut s = String::new();
        aborted.emit(&mut s).unwrap();
        assert!(s.contains("\"samples\":0,\"t_min_us\":null"));
        assert!(s.ends_with("\"aborted\":true,\"interrupts\":null,\"interrupts_per_iter\":null}\n"));
        let write = LatencyLine {
            test: Test::WriteLat,
            transport: Transport::Rc,
            ..r
        };
        let mut s = String::new();
        write.emit(&mut s).unwrap();
        assert!(s.starts_with(
            "ibkern-result {\"test\":\"write_lat\",\"transport\":\"RC\",\"role\":\"client\""
        ));
    }
}
