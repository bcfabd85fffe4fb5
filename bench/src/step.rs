//! The one loop that runs a node's work to its end.
//!
//! A run ([`crate::PingPong`]), a plan's client ([`crate::plan::PlanClient`]) and a server
//! following its clients ([`crate::plan::Server`]) are state machines advanced by `step`,
//! so host tests can interleave two nodes in one thread; on a node of its own each is run by
//! [`run_to_end`]: step while running, relax when a step found nothing to do, and close
//! whatever is left, after an error as after the end.

use core::fmt::Write;

use verbs::Device;

use crate::env::BenchEnv;
use crate::perftest::{BenchError, Status, StepBudget};

/// A node's work advanced by bounded steps.
pub trait Steps<D: Device> {
    /// What the finished work reports.
    type Summary;

    /// Advances the work by a bounded amount.
    fn step<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        budget: StepBudget,
    ) -> Result<Status, BenchError>;

    /// What it did so far.
    fn summary(&self) -> Self::Summary;

    /// Releases what it holds on the device.
    fn close<E: BenchEnv>(self, dev: &mut D, env: &mut E);
}

/// Steps `work` until it finishes or fails (relaxing between steps), then closes it.
pub fn run_to_end<D: Device, E: BenchEnv, W: Write, S: Steps<D>>(
    mut work: S,
    dev: &mut D,
    env: &mut E,
    out: &mut W,
    budget: StepBudget,
) -> Result<S::Summary, BenchError> {
    let r = loop {
        match work.step(dev, env, out, budget) {
            Ok(Status::Finished) => break Ok(work.summary()),
            Ok(Status::Running) => env.relax(),
            Err(e) => break Err(e),
        }
    };
    work.close(dev, env);
    r
}
