//! The delegation benchmark (`mode=delegate`; docs/benchmarks.md, "Delegation"): what a
//! call to the delegate costs, per operation, size and completion mode, against the wire's
//! own round trip and against one-sided access.
//!
//! Per completion mode of the configuration (poll, event, isr), in one connection:
//! - latency rows, perftest's table and statistics over full round trips (one stamp before
//!   each call, calls back to back): the null call; pread and pwrite of the benchmark's file
//!   through the node's registered buffer (the delegate RDMA-WRITEs and -READs it), and the
//!   one-sided RDMA READ and WRITE of a region the delegate mapped, each from 64 B to
//!   `delegate_max` in powers of two;
//! - null calls per second with 1, 2, 4, ... up to `delegate_outstanding` kept in flight.
//!
//! Then, with `delegate_baseline`, an RC `ib_send_lat` of the null request's size against
//! the server at the delegate's LID (perftest's ping-pong, busy polling), and the ratio of
//! the null call's typical round trip to it; and the one-sided READ of each size against
//! the pread of the same bytes. Times are the node's TSC; under an emulated HCA they
//! measure the emulator (the runner says so).

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt::{self, Write};

use delegate_wire::{Access, OpenFlags, RegionInfo, HEADER_LEN};
use verbs::Device;

use super::client::{BufId, Client, DelegateError};
use super::line::{
    write_baseline_line, write_rate_line, write_result_line, BaselineLine, Op, RateLine, ResultLine,
};
use crate::config::{Completion, Modes, PingPongConfig, Role, Sizes, Transport};
use crate::env::BenchEnv;
use crate::report;
use crate::stats::{perftest_latency, LatencyStats, RttFactor};

/// Calls made before each row's measured ones (not timed).
pub const WARMUP: u32 = 2;
/// How each table's title line starts (` delegate: <operation>, completion <mode>`): a
/// row's calls (its untimed ones, then the timed) run between its table's title or the
/// previous row's result line and its own result line.
pub const TITLE: &str = " delegate: ";
/// Smallest size of the sweep.
pub const MIN_SIZE: u32 = 64;

/// What the benchmark runs.
#[derive(Clone, Copy, Debug)]
pub struct BenchConfig {
    pub modes: Modes,
    /// Calls per row (perftest's `-n`; at least 5).
    pub iterations: u32,
    /// The sweep's largest size (64..=1 MiB).
    pub max_size: u32,
    /// The rate test's most outstanding calls.
    pub outstanding: u16,
    /// The RC `ib_send_lat` server at the delegate's LID, for the baseline.
    pub baseline_qpn: Option<u32>,
    /// The ping-pong keys the baseline runs with (waits, port, ...).
    pub base: PingPongConfig,
}

/// Why the benchmark stopped.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BenchFailure {
    /// A call failed (during what).
    Call(&'static str, DelegateError),
    /// The baseline ping-pong failed.
    Baseline(crate::BenchError),
    /// Too few iterations for statistics, or no memory for the stamps.
    Stats(&'static str),
    Output,
}

impl fmt::Display for BenchFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchFailure::Call(during, e) => write!(f, "{during}: {e}"),
            BenchFailure::Baseline(e) => write!(f, "the RC ib_send_lat baseline: {e}"),
            BenchFailure::Stats(why) => f.write_str(why),
            BenchFailure::Output => f.write_str("writing the output failed"),
        }
    }
}

impl From<fmt::Error> for BenchFailure {
    fn from(_: fmt::Error) -> Self {
        BenchFailure::Output
    }
}

/// What the benchmark measured, for its caller's verdict.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BenchSummary {
    /// Latency rows printed.
    pub rows: u32,
    /// Rate rows printed.
    pub rates: u32,
    /// The null call's typical round trip in poll mode (microseconds), when measured.
    pub null_poll_us: Option<f64>,
    /// The baseline's typical round trip, when measured.
    pub baseline_rtt_us: Option<f64>,
}

/// The sweep's sizes: 64 B, 128 B, ... up to `max`.
pub fn sizes(max: u32) -> impl Iterator<Item = u32> {
    (6..=20u32).map(|s| 1 << s).filter(move |s| *s <= max)
}

/// The null call's request: the header alone.
pub const NULL_BYTES: u32 = HEADER_LEN as u32;

struct Run<'a, D: Device, E: BenchEnv> {
    client: &'a mut Client<D>,
    dev: &'a mut D,
    env: &'a mut E,
    cfg: &'a BenchConfig,
    buf: BufId,
    file: u32,
    region: RegionInfo,
    stamps: Vec<u64>,
    scratch: Vec<u64>,
}

/// Runs the benchmark on `client` (connected, with at least `outstanding` credits for the
/// full rate test); `name` names the node's scratch file under the delegate's root
/// (`bench/<name>.dat`, removed at the end). Tables and lines go to `out`.
pub fn run<D: Device, E: BenchEnv, W: Write>(
    dev: &mut D,
    env: &mut E,
    client: &mut Client<D>,
    cfg: &BenchConfig,
    name: &str,
    out: &mut W,
) -> Result<BenchSummary, BenchFailure> {
    if (cfg.iterations as usize) < crate::stats::MIN_ITERATIONS {
        return Err(BenchFailure::Stats("fewer than 5 iterations"));
    }
    let call = |during| move |e| BenchFailure::Call(during, e);
    let max = cfg.max_size.clamp(MIN_SIZE, delegate_wire::MAX_TRANSFER);
    let region = env.alloc_dma(max as usize, 4096).ok_or(BenchFailure::Call(
        "buffer",
        DelegateError::NoMemory("benchmark buffer"),
    ))?;
    let buf = client
        .register(dev, region)
        .map_err(call("registering the buffer"))?;
    let mut path = String::new();
    let _ = write!(path, "bench/{name}.dat");
    client
        .mkdir_all(dev, env, "bench", 0o755)
        .map_err(call("mkdir bench"))?;
    let flags = OpenFlags::READ
        .union(OpenFlags::WRITE)
        .union(OpenFlags::CREATE)
        .union(OpenFlags::TRUNCATE);
    let (file, _) = client
        .open(dev, env, &path, flags, 0o644)
        .map_err(call("open the scratch file"))?;
    // The file holds every size the preads read.
    client
        .pwrite(dev, env, file, 0, buf, 0, max)
        .map_err(call("filling the scratch file"))?;
    let all = Access::READ.union(Access::WRITE);
    let region = client
        .map_region(dev, env, all, None, 0, u64::from(max))
        .map_err(call("map_region"))?;
    let n = cfg.iterations as usize;
    let mut run = Run {
        client,
        dev,
        env,
        cfg,
        buf,
        file,
        region,
        stamps: vec![0; n],
        scratch: vec![0; n],
    };
    let r = run.all(max, out);
    // Cleaned up whatever happened (each failure here is only reported).
    let c = &mut *run.client;
    let dev = &mut *run.dev;
    let env = &mut *run.env;
    let cleanup = c
        .unmap_region(dev, env, run.region.region)
        .and_then(|()| c.close_file(dev, env, run.file))
        .and_then(|()| c.unlink(dev, env, &path, false))
        .and_then(|()| c.unregister(dev, run.buf).map(drop));
    let summary = r?;
    cleanup.map_err(call("cleaning up"))?;
    Ok(summary)
}

impl<D: Device, E: BenchEnv> Run<'_, D, E> {
    fn all<W: Write>(&mut self, max: u32, out: &mut W) -> Result<BenchSummary, BenchFailure> {
        let mut summary = BenchSummary::default();
        let mut rows: Vec<(Op, Completion, u32, f64)> = Vec::new();
        for mode in self.cfg.modes.iter() {
            self.client
                .set_completion(self.env, mode)
                .map_err(|e| BenchFailure::Call("completion mode", e))?;
            for op in Op::ALL {
                writeln!(out, "{TITLE}{}, completion {}", op.title(), mode.name())?;
                report::write_header(out)?;
                let sizes: Vec<u32> = if op == Op::Null {
                    vec![0]
                } else {
                    sizes(max).collect()
                };
                for size in sizes {
                    let line = self.row(op, mode, size)?;
                    report::write_row(out, u64::from(size), &line.stats)?;
                    write_result_line(out, &line)?;
                    summary.rows += 1;
                    rows.push((op, mode, size, line.stats.t_typical));
                    if op == Op::Null && mode == Completion::Poll {
                        summary.null_poll_us = Some(line.stats.t_typical);
                    }
                }
                writeln!(out, "{}", report::RESULT_LINE)?;
            }
            writeln!(
                out,
                " delegate: null calls per second, completion {}",
                mode.name()
            )?;
            writeln!(out, " #outstanding   #calls    calls/sec    usec/call")?;
            let mut k = 1u16;
            while k <= self.cfg.outstanding && usize::from(k) <= self.client.credits() {
                let rate = self.rate(mode, k)?;
                writeln!(
                    out,
                    " {:<12}   {:<7}   {:<10.1}   {:<8.2}",
                    k,
                    rate.calls,
                    rate.calls_per_sec(),
                    1e6 / rate.calls_per_sec()
                )?;
                write_rate_line(out, &rate)?;
                summary.rates += 1;
                k *= 2;
            }
            writeln!(out, "{}", report::RESULT_LINE)?;
        }
        if self.cfg.modes.contains(Completion::Poll) {
            writeln!(
                out,
                " delegate: one-sided READ vs two-sided pread of the same bytes (poll, typical round trip)"
            )?;
            writeln!(out, " #bytes    READ[usec]    pread[usec]    pread/READ")?;
            let typical = |op: Op, size: u32| {
                rows.iter()
                    .find(|r| r.0 == op && r.1 == Completion::Poll && r.2 == size)
                    .map(|r| r.3)
            };
            for size in sizes(max) {
                if let (Some(read), Some(pread)) =
                    (typical(Op::Read, size), typical(Op::Pread, size))
                {
                    writeln!(
                        out,
                        " {:<8}  {:<12.2}  {:<13.2}  {:.2}",
                        size,
                        read,
                        pread,
                        pread / read
                    )?;
                }
            }
        }
        if let Some(qpn) = self.cfg.baseline_qpn {
            let rtt = self.baseline(qpn, out)?;
            summary.baseline_rtt_us = Some(rtt);
            if let Some(null) = summary.null_poll_us {
                let b = BaselineLine {
                    bytes: NULL_BYTES,
                    iterations: self.cfg.iterations,
                    rtt_typical_us: rtt,
                    null_typical_us: null,
                };
                writeln!(
                    out,
                    " delegate: null call {null:.2} usec round trip, RC ib_send_lat {NULL_BYTES} B {rtt:.2} usec round trip: {:.2}x",
                    b.ratio()
                )?;
                write_baseline_line(out, &b)?;
            }
        }
        Ok(summary)
    }

    /// One call of `op` moving `size` bytes.
    fn once(&mut self, op: Op, size: u32) -> Result<(), DelegateError> {
        let (c, dev, env) = (&mut *self.client, &mut *self.dev, &mut *self.env);
        let got = match op {
            Op::Null => return c.null(dev, env, &[]),
            Op::Pread => c.pread(dev, env, self.file, 0, self.buf, 0, size)?,
            Op::Pwrite => c.pwrite(dev, env, self.file, 0, self.buf, 0, size)?,
            Op::Read => {
                return c.region_read(dev, env, &self.region, 0, self.buf, 0, size);
            }
            Op::Write => {
                return c.region_write(dev, env, &self.region, 0, self.buf, 0, size);
            }
        };
        if got != size {
            // The file holds every size: a short transfer is the delegate's error.
            return Err(DelegateError::BadReply {
                op: None,
                why: delegate_wire::Error::BadValue,
            });
        }
        Ok(())
    }

    fn row(&mut self, op: Op, mode: Completion, size: u32) -> Result<ResultLine, BenchFailure> {
        let during = op.name();
        for _ in 0..WARMUP {
            self.once(op, size)
                .map_err(|e| BenchFailure::Call(during, e))?;
        }
        let before = self.client.counters();
        let irq_before = self.env.interrupts();
        for i in 0..self.stamps.len() {
            self.stamps[i] = self.env.cycles();
            self.once(op, size)
                .map_err(|e| BenchFailure::Call(during, e))?;
        }
        let after = self.client.counters();
        let interrupts = match (irq_before, self.env.interrupts()) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        let stats: LatencyStats = perftest_latency(
            &self.stamps,
            &mut self.scratch,
            self.env.tsc_mhz(),
            RttFactor::Full,
        )
        .map_err(|_| BenchFailure::Stats("latency statistics"))?;
        Ok(ResultLine {
            op,
            mode,
            bytes: size,
            iterations: self.cfg.iterations,
            stats,
            tsc_mhz: self.env.tsc_mhz(),
            interrupts,
            events: after.events - before.events,
            isr_calls: after.isr_calls - before.isr_calls,
        })
    }

    /// Null calls with `k` kept outstanding: `iterations × k` calls (at least 4 × k).
    fn rate(&mut self, mode: Completion, k: u16) -> Result<RateLine, BenchFailure> {
        let err = |e| BenchFailure::Call("rate", e);
        let total = self.cfg.iterations.max(4) * u32::from(k);
        let (c, dev, env) = (&mut *self.client, &mut *self.dev, &mut *self.env);
        let req = delegate_wire::Request::Null { payload: &[] };
        let t0 = env.cycles();
        let (mut sent, mut done, mut out) = (0u32, 0u32, 0u16);
        while done < total {
            while out < k && sent < total {
                c.submit(dev, env, &req).map_err(err)?;
                sent += 1;
                out += 1;
            }
            let tag = c
                .wait_any(dev, env)
                .map_err(err)?
                .ok_or(BenchFailure::Call("rate", DelegateError::UnknownTag))?;
            c.take(dev, tag, |_| Ok(())).map_err(err)?;
            done += 1;
            out -= 1;
        }
        let cycles = env.cycles().saturating_sub(t0).max(1);
        Ok(RateLine {
            mode,
            outstanding: k,
            calls: total,
            elapsed_us: cycles as f64 / env.tsc_mhz(),
        })
    }

    /// RC `ib_send_lat` of the null request's size against the server at the delegate's
    /// LID: its typical round trip (microseconds).
    fn baseline<W: Write>(&mut self, qpn: u32, out: &mut W) -> Result<f64, BenchFailure> {
        let accepted = self
            .client
            .accepted()
            .ok_or(BenchFailure::Stats("no connection"))?;
        let mut cfg = PingPongConfig {
            role: Role::Client,
            transport: Transport::Rc,
            sizes: Sizes::Single(NULL_BYTES),
            iterations: self.cfg.iterations,
            completion: Completion::Poll,
            modes: Modes::default(),
            peer_lid: Some(accepted.lid),
            peer_rdv_qpn: Some(qpn),
            ..self.cfg.base
        };
        cfg.test = crate::config::Test::SendLat;
        writeln!(
            out,
            " delegate: baseline: RC ib_send_lat -s {NULL_BYTES} -n {} against LID {} rendezvous QPN {qpn:#x}",
            cfg.iterations, accepted.lid
        )?;
        let mut tee = Typical {
            out,
            line: String::new(),
            half_rtt: None,
        };
        crate::run_sweep(self.dev, self.env, &cfg, &mut tee).map_err(BenchFailure::Baseline)?;
        let half = tee
            .half_rtt
            .ok_or(BenchFailure::Stats("the baseline printed no result"))?;
        Ok(2.0 * half)
    }
}

/// Passes the ping-pong's output on and keeps the typical latency of its result line.
struct Typical<'a, W: Write> {
    out: &'a mut W,
    line: String,
    half_rtt: Option<f64>,
}

impl<W: Write> Write for Typical<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.out.write_str(s)?;
        for ch in s.chars() {
            if ch == '\n' {
                if let Some(v) = typical_of(&self.line) {
                    self.half_rtt = Some(v);
                }
                self.line.clear();
            } else if self.line.len() < 4096 {
                self.line.push(ch);
            }
        }
        Ok(())
    }
}

/// `t_typical_us` of a ping-pong result line.
fn typical_of(line: &str) -> Option<f64> {
    let rest = line.strip_prefix(crate::line::PREFIX)?;
    let at = rest.find("\"t_typical_us\":")? + "\"t_typical_us\":".len();
    let v = &rest[at..];
    let end = v.find([',', '}'])?;
    v[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_is_powers_of_two_from_64_bytes() {
        assert_eq!(sizes(1 << 20).count(), 15);
        assert_eq!(sizes(1 << 20).next(), Some(64));
        assert_eq!(sizes(1 << 20).last(), Some(1 << 20));
        assert_eq!(
            sizes(4096).collect::<Vec<_>>(),
            [64, 128, 256, 512, 1024, 2048, 4096]
        );
        assert_eq!(sizes(100).collect::<Vec<_>>(), [64]);
    }

    #[test]
    fn the_typical_latency_comes_from_the_result_line() {
        assert_eq!(
            typical_of("ibkern-result {\"test\":\"send_lat\",\"t_typical_us\":4.250,\"x\":1}"),
            Some(4.25)
        );
        assert_eq!(typical_of("ibkern-result {\"t_typical_us\":null}"), None);
        assert_eq!(typical_of("other {\"t_typical_us\":1.0}"), None);
    }
}
