//! Plans: a list of runs in one configuration, one `run=` line per run in perftest's own
//! command syntax, e.g.
//!
//! ```text
//! run=ib_send_lat -c UD -a
//! run=ib_send_lat -c UC -s 4096 -n 5000 -I 0
//! run=ib_write_lat -c RC -a -n 200
//! ```
//!
//! Each line names the program (`ib_send_lat` or `ib_write_lat`) and the perftest flags that
//! choose what is measured: `-c UD|UC|RC`, `-a` or `-s SIZE`, `-n ITERS`, `-I INLINE`, `-e`
//! (completion events), `-m MTU`, and ibkern's own `--isr` (the reply posted from the
//! completion interrupt's handler). A flag not given takes perftest's default (`-c RC`,
//! `-s 2`, `-n 1000`, the inline default of the test and transport, polling, the port's
//! MTU). Values are the keys' values with the keys' ranges; every run is checked with the
//! ping-pong rules on top of the configuration's other keys (role, peer, port, timeouts),
//! which all runs share.
//!
//! A client runs its plan in one boot, one run after another, `repeat` times over; a
//! server needs no plan: it follows the parameters each client's Hello carries
//! (docs/rendezvous.md). A configuration without `run=` lines is a plan of one run: the
//! ping-pong keys themselves.

use core::fmt;

use verbs::Mtu;

use crate::bench::{
    AtomicOp, BwKeys, Completion, PingPongConfig, Sizes, Test, Transport, BENCH_KEYS,
};
use crate::ValueError;

/// Most runs one configuration can hold.
pub const MAX_RUNS: usize = 16;

/// One run of a plan: what perftest's flags choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub test: Test,
    pub transport: Transport,
    pub sizes: Sizes,
    pub iterations: u32,
    pub inline_limit: Option<u32>,
    pub completion: Completion,
    pub mtu: Option<Mtu>,
    /// `-A` (atomic_lat).
    pub atomic: AtomicOp,
    /// `-o` (read_lat, atomic_lat, read_bw, atomic_bw).
    pub outstanding_reads: u8,
    /// The bandwidth flags (`-t`, `-l`, `-Q`, `-D`, `-b`, `-N`, `--report_gbits`).
    pub bw: BwKeys,
}

/// The key parser of `name` applied to `value` on a scratch configuration.
pub(crate) fn via_key(name: &str, value: &str) -> Result<PingPongConfig, ValueError> {
    let mut c = PingPongConfig::default();
    let key = BENCH_KEYS
        .iter()
        .find(|k| k.name == name)
        .ok_or(ValueError::Expected("a ping-pong key"))?;
    key.apply(value, &mut c)?;
    Ok(c)
}

impl Run {
    /// Parses one `run=` value: the program, then its flags.
    pub fn parse(line: &str) -> Result<Run, ValueError> {
        let mut words = line.split_whitespace();
        let test = words.next().and_then(Test::from_program).ok_or(ValueError::Expected(
            "ib_send_lat, ib_write_lat, ib_read_lat, ib_atomic_lat, ib_send_bw, ib_write_bw, ib_read_bw or ib_atomic_bw, then perftest flags",
        ))?;
        // perftest's defaults for the program (connection RC, its size and iterations).
        let mut defaults = PingPongConfig::default();
        defaults.set_test(test);
        let mut run = Run {
            test,
            transport: Transport::Rc,
            sizes: defaults.sizes,
            iterations: defaults.iterations,
            inline_limit: None,
            completion: Completion::Poll,
            mtu: None,
            atomic: AtomicOp::FetchAndAdd,
            outstanding_reads: defaults.outstanding_reads,
            bw: BwKeys::default(),
        };
        let (mut all, mut size) = (false, false);
        while let Some(flag) = words.next() {
            let mut value = || {
                words.next().ok_or(ValueError::Expected(
                    "a value after -c, -s, -n, -I, -m, -A, -o, -t, -l, -Q and -D",
                ))
            };
            match flag {
                "-c" => run.transport = via_key("transport", value()?)?.transport,
                "-s" => {
                    run.sizes = via_key("size", value()?)?.sizes;
                    if run.sizes == Sizes::All {
                        return Err(ValueError::Expected("a size in bytes after -s (-a for all)"));
                    }
                    size = true;
                }
                "-a" => {
                    run.sizes = Sizes::All;
                    all = true;
                }
                "-n" => run.iterations = via_key("iters", value()?)?.iterations,
                "-I" => run.inline_limit = via_key("inline", value()?)?.inline_limit,
                "-m" => run.mtu = via_key("mtu", value()?)?.mtu,
                "-e" => run.completion = Completion::Event,
                "--isr" => run.completion = Completion::Isr,
                "-A" => run.atomic = via_key("atomic", value()?)?.atomic,
                "-o" => {
                    run.outstanding_reads = via_key("outstanding_reads", value()?)?.outstanding_reads
                }
                "-t" => run.bw.tx_depth = via_key("tx_depth", value()?)?.bw.tx_depth,
                "-l" => run.bw.post_list = via_key("post_list", value()?)?.bw.post_list,
                "-Q" => run.bw.cq_mod = via_key("cq_mod", value()?)?.bw.cq_mod,
                "-D" => run.bw.duration_s = via_key("duration", value()?)?.bw.duration_s,
                "-b" => run.bw.bidirectional = true,
                "-N" => run.bw.no_peak = true,
                "--report_gbits" => run.bw.report_gbits = true,
                _ => {
                    return Err(ValueError::Expected(
                        "perftest flags -c UD|UC|RC, -a, -s SIZE, -n ITERS, -I INLINE, -e, -m MTU, -A FETCH_AND_ADD|CMP_AND_SWAP, -o N, -t DEPTH, -l LIST, -Q MOD, -D SECS, -b, -N, --report_gbits, and ibkern's --isr",
                    ))
                }
            }
            if all && size {
                return Err(ValueError::Expected("-a or -s, not both"));
            }
        }
        if test.is_bw() && run.transport == Transport::Ud && !size && !all {
            // perftest lowers its default bandwidth message to the MTU on UD.
            let mtu = run.mtu.unwrap_or(crate::bench::DEFAULT_MTU_CAP).bytes();
            run.sizes = Sizes::Single(crate::bench::DEFAULT_BW_SIZE.min(mtu));
        }
        Ok(run)
    }

    /// The run a configuration's keys describe (its perftest command line).
    pub fn of(c: &PingPongConfig) -> Run {
        Run {
            test: c.test,
            transport: c.transport,
            sizes: c.sizes,
            iterations: c.iterations,
            inline_limit: c.inline_limit,
            completion: c.completion,
            mtu: c.mtu,
            atomic: c.atomic,
            outstanding_reads: c.outstanding_reads,
            bw: c.bw,
        }
    }

    /// The ping-pong this run measures: `base` (the configuration's shared keys) with the
    /// run's test, transport, sizes, iterations, inline limit, completion, MTU and
    /// bandwidth flags.
    pub fn config(&self, base: &PingPongConfig) -> PingPongConfig {
        PingPongConfig {
            test: self.test,
            transport: self.transport,
            sizes: self.sizes,
            iterations: self.iterations,
            inline_limit: self.inline_limit,
            completion: self.completion,
            mtu: self.mtu,
            atomic: self.atomic,
            outstanding_reads: self.outstanding_reads,
            bw: self.bw,
            ..*base
        }
    }
}

/// The run as a perftest command line (every flag spelled out), which parses back to it.
impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -c {}", self.test.program(), self.transport.name())?;
        match self.sizes {
            Sizes::All => write!(f, " -a")?,
            Sizes::Single(n) => write!(f, " -s {n}")?,
        }
        write!(f, " -n {}", self.iterations)?;
        if let Some(i) = self.inline_limit {
            write!(f, " -I {i}")?;
        }
        match self.completion {
            Completion::Poll => {}
            Completion::Event => write!(f, " -e")?,
            Completion::Isr => write!(f, " --isr")?,
        }
        if let Some(m) = self.mtu {
            write!(f, " -m {}", m.bytes())?;
        }
        if self.test.is_atomic() {
            write!(f, " -A {}", self.atomic.name())?;
        }
        if self.test.takes_outstanding_reads() {
            write!(f, " -o {}", self.outstanding_reads)?;
        }
        let (b, d) = (&self.bw, BwKeys::default());
        if b.tx_depth != d.tx_depth {
            write!(f, " -t {}", b.tx_depth)?;
        }
        if b.post_list != d.post_list {
            write!(f, " -l {}", b.post_list)?;
        }
        if let Some(q) = b.cq_mod {
            write!(f, " -Q {q}")?;
        }
        if let Some(s) = b.duration_s {
            write!(f, " -D {s}")?;
        }
        for (on, flag) in [
            (b.bidirectional, " -b"),
            (b.no_peak, " -N"),
            (b.report_gbits, " --report_gbits"),
        ] {
            if on {
                f.write_str(flag)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::Rule;
    use crate::{parse, ConfigError};
    use std::string::ToString;

    #[test]
    fn read_and_atomic_run_lines() {
        let r = Run::parse("ib_read_lat -a -o 4 -n 10").unwrap();
        assert_eq!(
            (r.test, r.transport, r.sizes, r.outstanding_reads),
            (Test::ReadLat, Transport::Rc, Sizes::All, 4)
        );
        assert_eq!(Run::parse(&r.to_string()).unwrap(), r);
        let a = Run::parse("ib_atomic_lat -A CMP_AND_SWAP").unwrap();
        assert_eq!(
            (a.test, a.sizes, a.atomic, a.outstanding_reads),
            (Test::AtomicLat, Sizes::Single(8), AtomicOp::CmpAndSwap, 1)
        );
        assert_eq!(Run::parse(&a.to_string()).unwrap(), a);
        assert_eq!(
            Run::parse("ib_atomic_lat").unwrap().atomic,
            AtomicOp::FetchAndAdd
        );
        assert!(Run::parse("ib_atomic_lat -A ADD").is_err());
        assert!(Run::parse("ib_read_lat -o 17").is_err());
        assert!(Run::parse("ib_read_lat -o 0").is_err());
        let cfg = a.config(&PingPongConfig::default());
        assert_eq!(cfg.validate(), Ok(()));
        assert_eq!((cfg.atomic, cfg.inline()), (AtomicOp::CmpAndSwap, 0));
        let bad = Run::parse("ib_atomic_lat -s 16").unwrap();
        assert_eq!(
            bad.config(&PingPongConfig::default()).validate(),
            Err(Rule::AtomicSize { size: 16 })
        );
        let uc = Run::parse("ib_read_lat -c UC").unwrap();
        assert_eq!(
            uc.config(&PingPongConfig::default()).validate(),
            Err(Rule::OneSidedNeedsRc {
                transport: Transport::Uc
            })
        );
    }

    #[test]
    fn bandwidth_run_lines_take_perftests_flags_and_defaults() {
        let r = Run::parse("ib_send_bw -c UD -s 1024 -n 200 -t 64 -l 4 -Q 4 -N --report_gbits")
            .unwrap();
        assert_eq!(
            (r.test, r.transport, r.sizes, r.iterations),
            (Test::SendBw, Transport::Ud, Sizes::Single(1024), 200)
        );
        assert_eq!(
            r.bw,
            BwKeys {
                tx_depth: 64,
                post_list: 4,
                cq_mod: Some(4),
                duration_s: None,
                bidirectional: false,
                no_peak: true,
                report_gbits: true,
            }
        );
        assert_eq!(Run::parse(&r.to_string()), Ok(r), "{r}");
        assert_eq!(r.config(&PingPongConfig::default()).validate(), Ok(()));
        // perftest's defaults: RC, 64 KiB, 1000 iterations (5000 for ib_write_bw), -t 128,
        // -Q 100, nothing inline.
        let d = Run::parse("ib_send_bw").unwrap();
        assert_eq!(
            (d.transport, d.sizes, d.iterations, d.bw),
            (Transport::Rc, Sizes::Single(65536), 1000, BwKeys::default())
        );
        let c = d.config(&PingPongConfig::default());
        assert_eq!((c.inline(), c.bw.cq_mod_for(c.iterations)), (0, 100));
        assert_eq!(c.bw_rx_depth(), 512);
        // Over UD the default 64 KiB becomes the MTU, as perftest does.
        let ud = Run::parse("ib_send_bw -c UD").unwrap();
        assert_eq!(ud.sizes, Sizes::Single(2048));
        assert_eq!(
            Run::parse("ib_send_bw -c UD -m 1024").unwrap().sizes,
            Sizes::Single(1024)
        );
        let w = Run::parse("ib_write_bw -c UC -a").unwrap();
        assert_eq!((w.test, w.iterations), (Test::WriteBw, 5000));
        assert_eq!(Run::parse(&w.to_string()), Ok(w));
        assert_eq!(w.to_string(), "ib_write_bw -c UC -a -n 5000");
        let a = Run::parse("ib_atomic_bw -A CMP_AND_SWAP -o 4").unwrap();
        assert_eq!(
            (a.sizes, a.atomic, a.outstanding_reads),
            (Sizes::Single(8), AtomicOp::CmpAndSwap, 4)
        );
        assert_eq!(Run::parse(&a.to_string()), Ok(a));
        let b = Run::parse("ib_read_bw -D 5 -b").unwrap();
        assert_eq!((b.bw.duration_s, b.bw.bidirectional), (Some(5), true));
        assert_eq!(Run::parse(&b.to_string()), Ok(b));
    }

    #[test]
    fn bandwidth_rules_are_typed_and_name_their_numbers() {
        let base = PingPongConfig::default();
        let rule = |line: &str| Run::parse(line).unwrap().config(&base).validate();
        assert_eq!(
            rule("ib_write_bw -c UD"),
            Err(Rule::BwNeedsConnection {
                test: Test::WriteBw,
                transport: Transport::Ud
            })
        );
        assert_eq!(
            rule("ib_send_bw -t 16 -Q 32"),
            Err(Rule::CqModAboveTxDepth {
                cq_mod: 32,
                tx_depth: 16
            })
        );
        assert_eq!(
            rule("ib_send_bw -t 16 -l 32"),
            Err(Rule::PostListAboveTxDepth {
                post_list: 32,
                tx_depth: 16
            })
        );
        assert_eq!(
            rule("ib_send_bw -n 100 -l 3"),
            Err(Rule::IterationsNotMultipleOfPostList {
                iterations: 100,
                post_list: 3
            })
        );
        assert_eq!(
            rule("ib_send_bw -n 96 -l 8 -Q 3"),
            Err(Rule::PostListNotMultipleOfCqMod {
                post_list: 8,
                cq_mod: 3
            })
        );
        assert_eq!(rule("ib_send_bw -n 96 -l 8"), Ok(()), "-Q follows -l");
        assert_eq!(
            rule("ib_send_bw -c UD -s 4096"),
            Err(Rule::UdSizeAboveMtu {
                size: 4096,
                mtu: 2048
            })
        );
        assert_eq!(rule("ib_send_bw -a -D 2"), Err(Rule::DurationWithAll));
        assert_eq!(rule("ib_send_bw -e"), Err(Rule::BwWithEvents));
        assert_eq!(
            rule("ib_atomic_bw -s 16"),
            Err(Rule::AtomicSize { size: 16 })
        );
        assert_eq!(rule("ib_atomic_bw"), Ok(()));
        assert_eq!(rule("ib_read_bw -a"), Ok(()));
        assert_eq!(
            Run::parse("ib_read_bw").unwrap().outstanding_reads,
            16,
            "perftest's -o for BW"
        );
        assert_eq!(
            rule("ib_read_bw -c UC"),
            Err(Rule::BwNeedsConnection {
                test: Test::ReadBw,
                transport: Transport::Uc
            })
        );
        assert_eq!(rule("ib_send_bw -D 2"), Ok(()));
        let mut anatomy = base;
        anatomy.anatomy = true;
        assert_eq!(
            Run::parse("ib_send_bw")
                .unwrap()
                .config(&anatomy)
                .validate(),
            Err(Rule::BwNotYet { what: "anatomy" }),
            "the anatomy splits latency round trips"
        );
        assert_eq!(rule("ib_send_bw -b"), Ok(()));
        assert_eq!(rule("ib_send_bw -b -c UD -D 2"), Ok(()));
        assert_eq!(rule("ib_atomic_bw -b -A CMP_AND_SWAP"), Ok(()));
        assert_eq!(rule("ib_read_bw -b -a"), Ok(()));
        assert_eq!(
            rule("ib_send_lat -b"),
            Err(Rule::BandwidthKeyOnLatency {
                key: "bidirectional"
            })
        );
        assert_eq!(
            rule("ib_send_lat -t 4"),
            Err(Rule::BandwidthKeyOnLatency { key: "tx_depth" })
        );
        assert_eq!(
            rule("ib_write_lat -N"),
            Err(Rule::BandwidthKeyOnLatency { key: "no_peak" })
        );
        // -t above -n is lowered to -n as perftest does; the default -Q follows it.
        let c = Run::parse("ib_send_bw -n 10").unwrap().config(&base);
        assert_eq!(
            (c.bw.tx_depth_for(10), c.bw.cq_mod_for(10), c.validate()),
            (10, 10, Ok(()))
        );
        let e = crate::parse("run=ib_send_bw -t 16 -Q 32")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "config line 1: run 1: CQ moderation 32 (-Q) is above the tx depth 16 (-t)"
        );
        let e = crate::parse("run=ib_write_bw -c UD")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "config line 1: run 1: UD connection not possible for write_bw (write_bw runs over RC or UC, read_bw and atomic_bw over RC)"
        );
    }

    #[test]
    fn run_lines_are_perftest_command_lines() {
        let r = Run::parse("ib_send_lat -c UD -a").unwrap();
        assert_eq!(
            (r.test, r.transport, r.sizes, r.iterations),
            (Test::SendLat, Transport::Ud, Sizes::All, 1000)
        );
        let r = Run::parse("ib_write_lat  -c uc -s 4096 -n 20 -I 0 -m 1024").unwrap();
        assert_eq!(
            (
                r.test,
                r.transport,
                r.sizes,
                r.iterations,
                r.inline_limit,
                r.mtu
            ),
            (
                Test::WriteLat,
                Transport::Uc,
                Sizes::Single(4096),
                20,
                Some(0),
                Some(Mtu::Mtu1024)
            )
        );
        let r = Run::parse("ib_write_lat").unwrap();
        assert_eq!(
            (r.transport, r.sizes),
            (Transport::Rc, Sizes::Single(2)),
            "perftest's defaults"
        );
        let r = Run::parse("ib_send_lat -c UD -e").unwrap();
        assert_eq!(r.completion, Completion::Event);
        for text in [
            "ib_send_lat -c UD -a",
            "ib_write_lat -c UC -s 4096 -n 20 -I 0 -e -m 1024",
        ] {
            let r = Run::parse(text).unwrap();
            assert_eq!(Run::parse(&r.to_string()), Ok(r), "{r}");
        }
    }

    #[test]
    fn bad_run_lines_say_what_was_expected() {
        for (text, expected) in [
            ("", "ib_send_lat, ib_write_lat, ib_read_lat, ib_atomic_lat, ib_send_bw, ib_write_bw, ib_read_bw or ib_atomic_bw, then perftest flags"),
            ("ib_read_bandwidth -a", "ib_send_lat, ib_write_lat, ib_read_lat, ib_atomic_lat, ib_send_bw, ib_write_bw, ib_read_bw or ib_atomic_bw, then perftest flags"),
            ("ib_send_lat -c XY", "one of UD|UC|RC"),
            (
                "ib_send_lat -c",
                "a value after -c, -s, -n, -I, -m, -A, -o, -t, -l, -Q and -D",
            ),
            ("ib_send_bw -t 0", "a tx depth 1..=15000"),
            ("ib_send_bw -Q 2000", "a CQ moderation 1..=1024"),
            ("ib_send_lat -n 0", "an iteration count 5..=16777216"),
            ("ib_send_lat -s 0", "all or a size in bytes 2..=8388608"),
            (
                "ib_send_lat -s all",
                "a size in bytes after -s (-a for all)",
            ),
            ("ib_send_lat -I 5000", "an inline limit 0..=1024"),
            ("ib_send_lat -m 3000", "one of 256|512|1024|2048|4096"),
            ("ib_send_lat -a -s 64", "-a or -s, not both"),
            (
                "ib_send_lat -x",
                "perftest flags -c UD|UC|RC, -a, -s SIZE, -n ITERS, -I INLINE, -e, -m MTU, -A FETCH_AND_ADD|CMP_AND_SWAP, -o N, -t DEPTH, -l LIST, -Q MOD, -D SECS, -b, -N, --report_gbits, and ibkern's --isr",
            ),
        ] {
            assert_eq!(
                Run::parse(text).map_err(|e| e.to_string()),
                Err(std::format!("expected {expected}")),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_configuration_holds_runs_checked_with_the_ping_pong_rules() {
        let text = "mode=idle\nrole=client\ntimeout_ms=2000\nrun=ib_send_lat -c UD -a\n\
                    run=ib_send_lat -c UC -s 4096 -n 20\nrun=ib_write_lat -c RC -a -n 200\n";
        let c = parse(text).unwrap();
        let runs: std::vec::Vec<PingPongConfig> = c.runs().collect();
        assert_eq!(runs.len(), 3);
        assert_eq!(
            (runs[0].transport, runs[0].sizes),
            (Transport::Ud, Sizes::All)
        );
        assert_eq!((runs[1].transport, runs[1].iterations), (Transport::Uc, 20));
        assert_eq!(
            (runs[2].test, runs[2].transport),
            (Test::WriteLat, Transport::Rc)
        );
        assert!(
            runs.iter()
                .all(|r| r.wait_timeout_ns == 2_000_000_000 && r.role == crate::Role::Client),
            "the other keys are shared"
        );
        // A rule broken by one run names its line and its place in the plan.
        let text = "role=client\nrun=ib_send_lat -c UD -a\nrun=ib_send_lat -c UD -s 4096\n";
        let e = parse(text).unwrap_err();
        assert_eq!(
            e,
            ConfigError::RunRule {
                line: 3,
                run: 2,
                rule: Rule::UdSizeAboveMtu {
                    size: 4096,
                    mtu: 2048
                }
            }
        );
        assert_eq!(
            e.to_string(),
            "config line 3: run 2: UD message of 4096 bytes is larger than the path MTU 2048"
        );
        let e = parse("run=ib_read_lat -c UC").unwrap_err().to_string();
        assert_eq!(
            e,
            "config line 1: run 1: UC connection not possible in READ/ATOMIC verbs (read_lat and atomic_lat run over RC)"
        );
        let e = parse("run=ib_send_lat -c XY").unwrap_err().to_string();
        assert_eq!(
            e,
            "config line 1: key \"run\": bad value \"ib_send_lat -c XY\": expected one of UD|UC|RC"
        );
        // mode=pingpong runs a plan, repeated `repeat` times.
        let c = parse("mode=pingpong\nrole=client\nrepeat=3\nrun=ib_send_lat -c UD -a\n").unwrap();
        assert_eq!((c.plan().len(), c.bench.repeat), (1, 3));
        let e = parse("repeat=0\n").unwrap_err().to_string();
        assert!(e.ends_with("expected a repeat count 1..=1000"), "{e}");
        let e = parse("idle_timeout_ms=x\n").unwrap_err().to_string();
        assert!(e.ends_with("expected milliseconds 0..=86400000"), "{e}");
        let c = parse("role=server\nidle_timeout_ms=600000\n").unwrap();
        assert_eq!(c.bench.idle_timeout_ns, 600_000_000_000);
        // A client without run= lines runs one run: its keys.
        let c = parse("role=client\ntransport=UC\nsize=64\n").unwrap();
        let runs: std::vec::Vec<PingPongConfig> = c.client_runs().collect();
        assert_eq!(runs, std::vec![c.bench]);
        let c = parse("role=client\ntransport=UC\nrun=ib_send_lat -c UD\n").unwrap();
        let runs: std::vec::Vec<PingPongConfig> = c.client_runs().collect();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].transport, Transport::Ud, "the plan, not the keys");
        // At most MAX_RUNS runs.
        let mut many = std::string::String::new();
        for _ in 0..=MAX_RUNS {
            many.push_str("run=ib_send_lat -c UD\n");
        }
        let e = parse(&many).unwrap_err().to_string();
        assert!(e.starts_with("config line 17: key \"run\""), "{e}");
        assert!(e.ends_with("expected at most 16 runs"), "{e}");
    }
}
