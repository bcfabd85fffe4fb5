//! The delegation benchmark's machine-readable lines, one JSON object each after a prefix,
//! as the ping-pong's result line (`crate::line`); `cargo qemu delegate` reads them into
//! `delegate.{csv,json,svg}` (docs/benchmarks.md, "Delegation").
//!
//! ```text
//! ibkern-delegate-result {"op":"pread","mode":"poll","bytes":4096,"iterations":100,...}
//! ibkern-delegate-rate {"mode":"poll","outstanding":8,"calls":400,"elapsed_us":...,"calls_per_sec":...}
//! ibkern-delegate-baseline {"test":"send_lat","transport":"RC","bytes":16,...,"ratio":...}
//! ```

use core::fmt::{self, Write};

use crate::config::Completion;
use crate::stats::LatencyStats;

/// Prefix of a latency row: one operation, size and completion mode.
pub const RESULT_PREFIX: &str = "ibkern-delegate-result ";
/// Prefix of a rate row: null calls per second with some outstanding.
pub const RATE_PREFIX: &str = "ibkern-delegate-rate ";
/// Prefix of the baseline comparison: the null call against an RC `ib_send_lat` round trip.
pub const BASELINE_PREFIX: &str = "ibkern-delegate-baseline ";

/// What one latency row measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// The null call (an empty echo).
    Null,
    /// pread of the benchmark's file into the node's buffer (the delegate's RDMA WRITE).
    Pread,
    /// pwrite of the node's buffer to the file (the delegate's RDMA READ).
    Pwrite,
    /// One-sided RDMA READ of the delegate's region.
    Read,
    /// One-sided RDMA WRITE of the delegate's region.
    Write,
}

impl Op {
    pub const ALL: [Op; 5] = [Op::Null, Op::Pread, Op::Pwrite, Op::Read, Op::Write];

    pub fn name(self) -> &'static str {
        match self {
            Op::Null => "null",
            Op::Pread => "pread",
            Op::Pwrite => "pwrite",
            Op::Read => "read",
            Op::Write => "write",
        }
    }

    /// How the table names it.
    pub fn title(self) -> &'static str {
        match self {
            Op::Null => "null call",
            Op::Pread => "pread (delegate RDMA-WRITEs the node's buffer)",
            Op::Pwrite => "pwrite (delegate RDMA-READs the node's buffer)",
            Op::Read => "region READ (one-sided)",
            Op::Write => "region WRITE (one-sided)",
        }
    }

    pub fn from_name(name: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|o| o.name() == name)
    }

    /// Whether the delegate's CPU takes part (a call) or only its HCA (one-sided).
    pub fn two_sided(self) -> bool {
        !matches!(self, Op::Read | Op::Write)
    }
}

fn num<W: Write>(out: &mut W, key: &str, v: Option<f64>) -> fmt::Result {
    match v {
        Some(x) if x.is_finite() => write!(out, ",\"{key}\":{x:.3}"),
        _ => write!(out, ",\"{key}\":null"),
    }
}

fn count<W: Write>(out: &mut W, key: &str, v: Option<u64>) -> fmt::Result {
    match v {
        Some(x) => write!(out, ",\"{key}\":{x}"),
        None => write!(out, ",\"{key}\":null"),
    }
}

/// One latency row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ResultLine {
    pub op: Op,
    pub mode: Completion,
    pub bytes: u32,
    /// Calls measured.
    pub iterations: u32,
    /// Full round trips, microseconds.
    pub stats: LatencyStats,
    pub tsc_mhz: f64,
    /// Device interrupts over the measured calls (`None`: unknown).
    pub interrupts: Option<u64>,
    /// Completion events the client consumed, and times the interrupt path ran its handler.
    pub events: u64,
    pub isr_calls: u64,
}

pub fn write_result_line<W: Write>(out: &mut W, r: &ResultLine) -> fmt::Result {
    let s = &r.stats;
    write!(
        out,
        "{RESULT_PREFIX}{{\"op\":\"{}\",\"mode\":\"{}\",\"bytes\":{},\"iterations\":{},\"samples\":{}",
        r.op.name(),
        r.mode.name(),
        r.bytes,
        r.iterations,
        s.samples
    )?;
    num(out, "t_min_us", Some(s.t_min))?;
    num(out, "t_max_us", Some(s.t_max))?;
    num(out, "t_typical_us", Some(s.t_typical))?;
    num(out, "t_avg_us", Some(s.t_avg))?;
    num(out, "t_stdev_us", Some(s.t_stdev))?;
    num(out, "p99_us", Some(s.p99))?;
    num(out, "p99_9_us", Some(s.p99_9))?;
    num(out, "true_max_us", Some(s.true_max))?;
    num(out, "tsc_mhz", Some(r.tsc_mhz))?;
    count(out, "interrupts", r.interrupts)?;
    count(out, "events", Some(r.events))?;
    count(out, "isr_calls", Some(r.isr_calls))?;
    writeln!(out, "}}")
}

/// One rate row: `calls` null calls with `outstanding` kept in flight.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLine {
    pub mode: Completion,
    pub outstanding: u16,
    pub calls: u32,
    /// From the first call's post to the last one's completion, microseconds.
    pub elapsed_us: f64,
}

impl RateLine {
    pub fn calls_per_sec(&self) -> f64 {
        f64::from(self.calls) * 1e6 / self.elapsed_us
    }
}

pub fn write_rate_line<W: Write>(out: &mut W, r: &RateLine) -> fmt::Result {
    write!(
        out,
        "{RATE_PREFIX}{{\"mode\":\"{}\",\"outstanding\":{},\"calls\":{}",
        r.mode.name(),
        r.outstanding,
        r.calls
    )?;
    num(out, "elapsed_us", Some(r.elapsed_us))?;
    num(out, "calls_per_sec", Some(r.calls_per_sec()))?;
    writeln!(out, "}}")
}

/// The null call against the RC `ib_send_lat` round trip of the same message size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BaselineLine {
    /// Bytes of one message (the null call's request, header included).
    pub bytes: u32,
    pub iterations: u32,
    /// The ping-pong's typical round trip (twice its reported half), microseconds.
    pub rtt_typical_us: f64,
    /// The null call's typical round trip (busy polling), microseconds.
    pub null_typical_us: f64,
}

impl BaselineLine {
    pub fn ratio(&self) -> f64 {
        self.null_typical_us / self.rtt_typical_us
    }
}

pub fn write_baseline_line<W: Write>(out: &mut W, b: &BaselineLine) -> fmt::Result {
    write!(
        out,
        "{BASELINE_PREFIX}{{\"test\":\"send_lat\",\"transport\":\"RC\",\"mode\":\"poll\",\"bytes\":{},\"iterations\":{}",
        b.bytes, b.iterations
    )?;
    num(out, "rtt_typical_us", Some(b.rtt_typical_us))?;
    num(out, "null_typical_us", Some(b.null_typical_us))?;
    num(out, "ratio", Some(b.ratio()))?;
    writeln!(out, "}}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::String;

    fn stats() -> LatencyStats {
        LatencyStats {
            iterations: 100,
            samples: 99,
            t_min: 10.0,
            t_max: 20.0,
            t_typical: 12.5,
            t_avg: 13.0,
            t_stdev: 1.0,
            p99: 19.0,
            p99_9: 20.0,
            true_max: 25.0,
            true_stdev: 1.5,
        }
    }

    #[test]
    fn lines_are_one_json_object_after_their_prefix() {
        let mut s = String::new();
        write_result_line(
            &mut s,
            &ResultLine {
                op: Op::Pread,
                mode: Completion::Isr,
                bytes: 4096,
                iterations: 100,
                stats: stats(),
                tsc_mhz: 2000.0,
                interrupts: None,
                events: 100,
                isr_calls: 101,
            },
        )
        .unwrap();
        assert_eq!(
            s,
            "ibkern-delegate-result {\"op\":\"pread\",\"mode\":\"isr\",\"bytes\":4096,\"iterations\":100,\"samples\":99,\"t_min_us\":10.000,\"t_max_us\":20.000,\"t_typical_us\":12.500,\"t_avg_us\":13.000,\"t_stdev_us\":1.000,\"p99_us\":19.000,\"p99_9_us\":20.000,\"true_max_us\":25.000,\"tsc_mhz\":2000.000,\"interrupts\":null,\"events\":100,\"isr_calls\":101}\n"
        );
        let mut s = String::new();
        write_rate_line(
            &mut s,
            &RateLine {
                mode: Completion::Poll,
                outstanding: 8,
                calls: 400,
                elapsed_us: 500_000.0,
            },
        )
        .unwrap();
        assert_eq!(
            s,
            "ibkern-delegate-rate {\"mode\":\"poll\",\"outstanding\":8,\"calls\":400,\"elapsed_us\":500000.000,\"calls_per_sec\":800.000}\n"
        );
        let mut s = String::new();
        write_baseline_line(
            &mut s,
            &BaselineLine {
                bytes: 16,
                iterations: 100,
                rtt_typical_us: 10.0,
                null_typical_us: 15.0,
            },
        )
        .unwrap();
        assert!(
            s.ends_with(",\"rtt_typical_us\":10.000,\"null_typical_us\":15.000,\"ratio\":1.500}\n"),
            "{s}"
        );
        assert!(
            s.starts_with("ibkern-delegate-baseline {\"test\":\"send_lat\",\"transport\":\"RC\"")
        );
    }

    #[test]
    fn op_names_round_trip() {
        for op in Op::ALL {
            assert_eq!(Op::from_name(op.name()), Some(op));
        }
        assert_eq!(Op::from_name("open"), None);
    }
}
