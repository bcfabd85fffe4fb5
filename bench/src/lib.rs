//! perftest-compatible latency and bandwidth benchmarks over the `verbs` API.
//!
//! - [`bw`]: perftest's bandwidth figures (BW peak, BW average, MsgRate) and table.
//! - [`config`]: what to run ([`PingPongConfig`]) and its `key=value` names, mirroring
//!   perftest's flags (docs/benchmarks.md).
//! - [`env`]: what the benchmark needs from the machine ([`BenchEnv`]: TSC, clock, DMA memory).
//! - [`perftest`]: one run of a perftest test on one node: the `ib_*_lat` ping-pongs and the
//!   `ib_*_bw` streams with their rendezvous, barriers and loss handling ([`run_sweep`], or
//!   the step-driven [`PingPong`] for several nodes in one thread).
//! - [`plan`]: many runs in one boot: a client's plan ([`plan::PlanClient`]) and a server
//!   that follows its clients ([`plan::Server`]).
//! - [`rendezvous`]: the in-band exchange that replaces perftest's TCP (docs/rendezvous.md):
//!   the messages (the `ibrendezvous` crate) and the one [`rendezvous::Channel`].
//! - [`resources`]: what a run makes on the device, and its one close.
//! - [`step`]: the one loop that runs a run, a plan's client or a server to its end.
//! - [`srq`]: several RC QPs sharing one SRQ, ping-ponging (rdma-core's `ibv_srq_pingpong`).
//! - [`stats`]: perftest's latency statistics, reproduced exactly, plus true max and stdev.
//! - [`report`]: perftest's latency table format; [`line`]: the machine-readable result line.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod bw;
pub mod config;
pub mod env;
pub mod line;
pub mod perftest;
pub mod plan;
pub mod rendezvous;
pub mod report;
pub mod resources;
pub mod srq;
pub mod stats;
pub mod step;

pub use config::{Completion, ConfigError, PingPongConfig, Role, Sizes, Test, Transport};
pub use env::BenchEnv;
pub use perftest::{
    run_sweep, BenchError, Endpoint, Heard, PingPong, RunStart, Status, StepBudget, SweepSummary,
};
