//! SRQ ping-pong runs of a plan: `run=` lines in `ibv_srq_pingpong`'s own command syntax,
//! e.g.
//!
//! ```text
//! run=ibv_srq_pingpong -q 16 -r 500 -s 4096 -n 1000
//! run=ibv_srq_pingpong -q 1 -s 64 -n 200 -e --cq-moderation 4/16
//! ```
//!
//! The example's flags that choose what is measured: `-q QPS`, `-r RX_DEPTH`, `-s SIZE`,
//! `-n ITERS`, `-e`, `-m MTU`; and ibkern's `--cq-moderation C/P` (one setting, with `-e`).
//! A flag not given takes the example's default (16 QPs, 500 receives, 4096 bytes, 1000
//! iterations, polling, the port's MTU). The configuration's other keys (role, peer, port,
//! timeouts, `repeat`) are shared by all runs. A plan's lines are all SRQ runs or all
//! perftest runs; the server follows the client's offers (docs/rendezvous.md).

use core::fmt;

use verbs::{CqModeration, Mtu};

use crate::bench::{
    Completion, Moderations, PingPongConfig, Rule, Sizes, SRQ_DEFAULT_QPS, SRQ_DEFAULT_RX_DEPTH,
    SRQ_DEFAULT_SIZE,
};
use crate::plan::via_key;
use crate::ValueError;

/// The program name that marks an SRQ run line.
pub const PROGRAM: &str = "ibv_srq_pingpong";

/// One SRQ ping-pong run of a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqRun {
    pub qps: u32,
    pub rx_depth: u32,
    pub size: u32,
    pub iterations: u32,
    pub completion: Completion,
    pub mtu: Option<Mtu>,
    pub moderation: Option<CqModeration>,
}

impl Default for SrqRun {
    fn default() -> Self {
        SrqRun {
            qps: SRQ_DEFAULT_QPS,
            rx_depth: SRQ_DEFAULT_RX_DEPTH,
            size: SRQ_DEFAULT_SIZE,
            iterations: crate::bench::DEFAULT_ITERATIONS,
            completion: Completion::Poll,
            mtu: None,
            moderation: None,
        }
    }
}

impl SrqRun {
    /// Parses one `run=` value that names [`PROGRAM`], then its flags.
    pub fn parse(line: &str) -> Result<SrqRun, ValueError> {
        let mut words = line.split_whitespace();
        if words.next() != Some(PROGRAM) {
            return Err(ValueError::Expected("ibv_srq_pingpong, then its flags"));
        }
        let mut run = SrqRun::default();
        while let Some(flag) = words.next() {
            let mut value = || {
                words.next().ok_or(ValueError::Expected(
                    "a value after -q, -r, -s, -n, -m and --cq-moderation",
                ))
            };
            match flag {
                "-q" => run.qps = via_key("qps", value()?)?.srq.qps,
                "-r" => run.rx_depth = via_key("rx_depth", value()?)?.srq.rx_depth,
                "-s" => match via_key("size", value()?)?.sizes {
                    Sizes::Single(n) => run.size = n,
                    Sizes::All => return Err(ValueError::Expected("a size in bytes after -s")),
                },
                "-n" => run.iterations = via_key("iters", value()?)?.iterations,
                "-m" => run.mtu = via_key("mtu", value()?)?.mtu,
                "-e" => run.completion = Completion::Event,
                "--cq-moderation" => {
                    let m = Moderations::parse(value()?)?;
                    match m.as_slice() {
                        [one] => run.moderation = Some(*one),
                        _ => return Err(ValueError::Expected("one count/period_us after --cq-moderation")),
                    }
                }
                _ => {
                    return Err(ValueError::Expected(
                        "ibv_srq_pingpong flags -q QPS, -r RX_DEPTH, -s SIZE, -n ITERS, -e, -m MTU, --cq-moderation C/P",
                    ))
                }
            }
        }
        Ok(run)
    }

    /// The run's keys on top of `base` (the configuration's shared keys): the SRQ
    /// ping-pong with this run's settings, checked by [`PingPongConfig::validate`].
    pub fn config(&self, base: &PingPongConfig) -> PingPongConfig {
        let mut c = *base;
        c.srq.enabled = true;
        c.transport = crate::bench::Transport::Rc;
        c.srq.qps = self.qps;
        c.srq.rx_depth = self.rx_depth;
        c.sizes = Sizes::Single(self.size);
        c.iterations = self.iterations;
        c.completion = self.completion;
        c.mtu = self.mtu;
        c.srq.moderation = Moderations::default();
        c
    }

    /// The rules of [`PingPongConfig::validate`] for this run on top of `base`, and its
    /// moderation only with events.
    pub fn validate(&self, base: &PingPongConfig) -> Result<(), Rule> {
        if self.moderation.is_some() && self.completion != Completion::Event {
            return Err(Rule::OutOfRange("--cq-moderation needs -e"));
        }
        self.config(base).validate()
    }
}

/// The run as the example's command line (every flag spelled out), which parses back to it.
impl fmt::Display for SrqRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PROGRAM} -q {} -r {} -s {} -n {}",
            self.qps, self.rx_depth, self.size, self.iterations
        )?;
        if self.completion == Completion::Event {
            write!(f, " -e")?;
        }
        if let Some(m) = self.mtu {
            write!(f, " -m {}", m.bytes())?;
        }
        if let Some(m) = self.moderation {
            write!(f, " --cq-moderation {}/{}", m.cq_count, m.cq_period)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn lines_take_the_examples_flags_and_defaults_and_print_back() {
        let r = SrqRun::parse("ibv_srq_pingpong").unwrap();
        assert_eq!(r, SrqRun::default());
        assert_eq!(
            r.to_string(),
            "ibv_srq_pingpong -q 16 -r 500 -s 4096 -n 1000"
        );
        let r =
            SrqRun::parse("ibv_srq_pingpong -q 2 -r 4 -s 64 -n 20 -e -m 1024 --cq-moderation 4/16")
                .unwrap();
        assert_eq!((r.qps, r.rx_depth, r.size, r.iterations), (2, 4, 64, 20));
        assert_eq!(r.completion, Completion::Event);
        assert_eq!(r.mtu, Some(Mtu::Mtu1024));
        assert_eq!(
            r.moderation,
            Some(CqModeration {
                cq_count: 4,
                cq_period: 16
            })
        );
        assert_eq!(SrqRun::parse(&r.to_string()).unwrap(), r);
        let base = PingPongConfig::default();
        assert_eq!(r.validate(&base), Ok(()));
        let c = r.config(&base);
        assert!(c.srq.enabled && c.srq.qps == 2 && c.sizes == Sizes::Single(64));
    }

    #[test]
    fn bad_lines_and_broken_rules_are_refused() {
        for bad in [
            "ib_send_lat -q 2",
            "ibv_srq_pingpong -q",
            "ibv_srq_pingpong -q 0",
            "ibv_srq_pingpong -q 65",
            "ibv_srq_pingpong -s all",
            "ibv_srq_pingpong -x",
            "ibv_srq_pingpong --cq-moderation 1/0,2/0",
            "ibv_srq_pingpong --cq-moderation 4",
        ] {
            assert!(SrqRun::parse(bad).is_err(), "{bad}");
        }
        let base = PingPongConfig::default();
        for (line, why) in [
            (
                "ibv_srq_pingpong -q 16 -r 8",
                "rx_depth must hold one receive per QP: 8 is outside 16..=16000",
            ),
            ("ibv_srq_pingpong -s 4", "size=4 is outside 8..=8388608"),
            ("ibv_srq_pingpong --cq-moderation 4/16", "needs -e"),
        ] {
            match SrqRun::parse(line).map(|r| r.validate(&base)) {
                Ok(Err(rule)) => assert!(rule.to_string().contains(why), "{line}: {rule}"),
                other => panic!("{line}: {other:?}"),
            }
        }
    }
}
