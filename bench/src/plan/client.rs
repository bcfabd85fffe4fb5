//! The client side of a plan: its runs one after another, `repeat` times over.

use alloc::vec::Vec;
use core::fmt::Write;

use verbs::Device;

use super::{write_verdict, CommandLine, Place, PlanTotals};
use crate::config::PingPongConfig;
use crate::env::BenchEnv;
use crate::perftest::{BenchError, PingPong, RunStart, Status, StepBudget, SweepSummary};
use crate::rendezvous::PlanRun;
use crate::step::{run_to_end, Steps};

/// A client running a plan. Each run is a [`PingPong`] of its own (its own rendezvous
/// session, data QP and buffers), started when the previous one has ended and closed;
/// a failed or refused run is reported and the plan goes on.
pub struct PlanClient<D: Device> {
    runs: Vec<PingPongConfig>,
    passes: u32,
    /// Whether runs are announced to the server as runs of a plan (version-3 Hellos). A
    /// client with a single run from its keys and `repeat=1` sends what it always sent.
    as_plan: bool,
    /// Next run (index into `runs`) and pass (0-based).
    next: (usize, u32),
    current: Option<(PingPong<D>, Option<PlanRun>)>,
    /// The client port's traffic counters read just before the current run started, and
    /// that run.
    port_before: super::PortBefore,
    results: Vec<Result<SweepSummary, BenchError>>,
    totals: PlanTotals,
}

impl<D: Device> PlanClient<D> {
    /// `runs` in order, the whole list `passes` times; `as_plan` as described on the field
    /// (true when the configuration has `run=` lines or `repeat` > 1).
    pub fn new(runs: Vec<PingPongConfig>, passes: u32, as_plan: bool) -> Self {
        PlanClient {
            as_plan: as_plan || runs.len() > 1 || passes > 1,
            passes: passes.max(1),
            runs,
            next: (0, 0),
            current: None,
            port_before: None,
            results: Vec::new(),
            totals: PlanTotals::default(),
        }
    }

    /// Every run's result so far, in the order they ran.
    pub fn results(&self) -> &[Result<SweepSummary, BenchError>] {
        &self.results
    }

    pub fn totals(&self) -> PlanTotals {
        self.totals
    }

    fn place(&self, i: usize, pass: u32) -> Option<PlanRun> {
        let cfg = &self.runs[i];
        self.as_plan.then(|| PlanRun {
            completion: cfg.completion,
            inline: cfg.inline() as u16,
            run: (i + 1) as u16,
            runs: self.runs.len() as u16,
            pass: (pass + 1) as u16,
            passes: self.passes as u16,
        })
    }

    /// Advances the current run (starting the next one when none is going).
    pub fn step<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        budget: StepBudget,
    ) -> Result<Status, BenchError> {
        let Some((pp, place)) = self.current.as_mut() else {
            let (i, pass) = self.next;
            if pass >= self.passes || self.runs.is_empty() {
                return Ok(Status::Finished);
            }
            self.next = if i + 1 == self.runs.len() {
                (0, pass + 1)
            } else {
                (i + 1, pass)
            };
            let place = self.place(i, pass);
            let cfg = self.runs[i];
            writeln!(out, "pingpong: {}: {}", Place(place), CommandLine(&cfg))?;
            // Read through the device's local MAD path: no packet on the wire.
            self.port_before = super::port_before(dev, &cfg);
            let how = RunStart {
                plan: place,
                ..RunStart::default()
            };
            match PingPong::start_with(dev, env, &cfg, how) {
                Ok(pp) => self.current = Some((pp, place)),
                Err(e) => {
                    self.port_before = None;
                    self.end_run(out, place, Err(e))?
                }
            }
            return Ok(Status::Running);
        };
        let r = match pp.step(dev, env, out, budget) {
            Ok(Status::Running) => return Ok(Status::Running),
            Ok(Status::Finished) => Ok(pp.summary()),
            // The console failing is not a run's failure: it ends the plan.
            Err(BenchError::Output) => return Err(BenchError::Output),
            Err(e) => Err(e),
        };
        let place = *place;
        if let Some((pp, _)) = self.current.take() {
            pp.close(dev, env);
        }
        super::write_port_after(dev, out, self.port_before.take())?;
        self.end_run(out, place, r)?;
        Ok(Status::Running)
    }

    fn end_run<W: Write>(
        &mut self,
        out: &mut W,
        place: Option<PlanRun>,
        r: Result<SweepSummary, BenchError>,
    ) -> Result<(), BenchError> {
        write_verdict(out, Place(place), &r)?;
        self.totals.add(&r);
        self.results.push(r);
        Ok(())
    }

    /// Releases the run in progress, if any (after an error of [`Self::step`]).
    pub fn close<E: BenchEnv>(mut self, dev: &mut D, env: &mut E) {
        if let Some((pp, _)) = self.current.take() {
            pp.close(dev, env);
        }
    }
}

impl<D: Device> Steps<D> for PlanClient<D> {
    type Summary = PlanTotals;

    fn step<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        budget: StepBudget,
    ) -> Result<Status, BenchError> {
        PlanClient::step(self, dev, env, out, budget)
    }

    fn summary(&self) -> PlanTotals {
        self.totals
    }

    fn close<E: BenchEnv>(self, dev: &mut D, env: &mut E) {
        PlanClient::close(self, dev, env)
    }
}

/// Runs a whole plan on one node (client): every run, `passes` times, one after another.
/// Returns the plan's totals; the console gets each run's header line, perftest's
/// banner and table, the result lines and the run's verdict.
pub fn run_plan<D: Device, E: BenchEnv, W: Write>(
    dev: &mut D,
    env: &mut E,
    runs: Vec<PingPongConfig>,
    passes: u32,
    as_plan: bool,
    out: &mut W,
) -> Result<PlanTotals, BenchError> {
    let budget = match runs.first() {
        Some(c) => StepBudget::exclusive(c),
        None => StepBudget::interleaved(),
    };
    run_to_end(
        PlanClient::new(runs, passes, as_plan),
        dev,
        env,
        out,
        budget,
    )
}
