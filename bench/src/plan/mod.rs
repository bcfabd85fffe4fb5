//! Plans: many runs in one boot (docs/benchmarks.md, "Plans").
//!
//! - [`client`]: a client runs its list of runs one after another, `repeat` times over, each
//!   with its own banner, table and result lines ([`PlanClient`], [`run_plan`]).
//! - [`server`]: a server needs no plan. It listens, takes each run's parameters from the
//!   client's Hello, checks them against its own limits (refusing, with the reason sent back,
//!   what it cannot run), runs it, and after a client's plan waits for the next client,
//!   bounded by `idle_timeout_ms` ([`Server`], [`serve`]).
//!
//! Both are state machines advanced by `step`, like [`crate::PingPong`], so host tests run
//! a client and a server in one thread.

pub mod client;
pub mod server;

pub use client::{run_plan, PlanClient};
pub use server::{serve, ServeSummary, Server};

use core::fmt;

use crate::config::PingPongConfig;
use crate::line::Record;
use crate::perftest::{BenchError, SweepSummary};
use crate::rendezvous::PlanRun;

/// A run as a perftest command line (`ib_send_lat -c UD -a -n 1000`).
pub struct CommandLine<'a>(pub &'a PingPongConfig);

impl fmt::Display for CommandLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", ibconfig::Run::of(self.0))
    }
}

/// "run R/N pass P/M", the words both consoles put before a run's lines.
pub struct Place(pub Option<PlanRun>);

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.0.unwrap_or(PlanRun {
            completion: crate::config::Completion::Poll,
            inline: 0,
            run: 1,
            runs: 1,
            pass: 1,
            passes: 1,
        });
        write!(f, "run {}/{} pass {}/{}", p.run, p.runs, p.pass, p.passes)
    }
}

/// Totals over the runs of a plan (or of everything a server served).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PlanTotals {
    /// Runs that ended (passed, failed or refused).
    pub runs: u32,
    pub passed: u32,
    /// Runs that ended in an error (refusals included).
    pub failed: u32,
    pub refused: u32,
    /// Over the passed runs: sizes reported, aborted sizes, losses, retries, late repeats.
    pub sizes: u32,
    pub aborted: u32,
    pub lost: u64,
    pub retries: u64,
    pub late_repeats: u64,
    /// The last passed run's summary (endpoints, MTU).
    pub last: Option<SweepSummary>,
}

impl PlanTotals {
    fn add(&mut self, r: &Result<SweepSummary, BenchError>) {
        self.runs += 1;
        match r {
            Ok(s) => {
                self.last = Some(*s);
                self.passed += 1;
                self.sizes += s.sizes;
                self.aborted += s.aborted;
                self.lost += s.lost;
                self.retries += s.retries;
                self.late_repeats += s.late_repeats;
            }
            Err(e) => {
                self.failed += 1;
                self.refused += matches!(e, BenchError::Refused(_)) as u32;
            }
        }
    }
}

/// The port's traffic counters read before a run (through the device's local MAD path: no
/// packet on the wire), and the run.
type PortBefore = Option<(verbs::PortTraffic, PingPongConfig)>;

/// Reads the run's port before it starts.
fn port_before<D: verbs::Device>(dev: &mut D, cfg: &PingPongConfig) -> PortBefore {
    dev.port_traffic(cfg.port).ok().map(|c| (c, *cfg))
}

/// The run as both sides name it in their port lines: `-I` only when the inline limit in
/// force is not perftest's default for the test and transport (a server's configuration
/// carries the client's limit whether the client gave `-I` or not).
fn as_ran(cfg: &PingPongConfig) -> PingPongConfig {
    let default = PingPongConfig {
        inline_limit: None,
        ..*cfg
    }
    .inline();
    PingPongConfig {
        inline_limit: (cfg.inline() != default).then_some(cfg.inline()),
        ..*cfg
    }
}

/// Reads the run's port again after it ended and prints both reads (`ibkern-port` line);
/// a failed read is reported instead.
fn write_port_after<D: verbs::Device, W: fmt::Write>(
    dev: &mut D,
    out: &mut W,
    before: PortBefore,
) -> Result<(), BenchError> {
    let Some((before, cfg)) = before else {
        return Ok(());
    };
    match dev.port_traffic(cfg.port) {
        Ok(after) => crate::line::PortLine {
            test: cfg.test,
            transport: cfg.transport,
            role: cfg.role,
            command: CommandLine(&as_ran(&cfg)),
            port: cfg.port,
            extended: before.extended && after.extended,
            before: (&before).into(),
            after: (&after).into(),
        }
        .emit(out)?,
        Err(e) => writeln!(out, "pingpong: port counters after the run: {e:?}")?,
    }
    Ok(())
}

/// Prints one run's verdict: `pingpong: <place>: PASS ...` (with `; Done not answered` when
/// the run's final handshake is missing) or `... FAIL: <why>`.
fn write_verdict<W: fmt::Write>(
    out: &mut W,
    place: Place,
    r: &Result<SweepSummary, BenchError>,
) -> Result<(), BenchError> {
    match r {
        Ok(s) => {
            write!(
                out,
                "pingpong: {place}: PASS {} sizes, {} aborted, {} lost, {} retries, {} late repeats",
                s.sizes, s.aborted, s.lost, s.retries, s.late_repeats
            )?;
            // Every size was reported; only the final handshake is missing.
            if !s.clean_finish {
                write!(out, "; Done not answered")?;
            }
            writeln!(out)?
        }
        Err(e) => writeln!(out, "pingpong: {place}: FAIL: {e}")?,
    }
    Ok(())
}
