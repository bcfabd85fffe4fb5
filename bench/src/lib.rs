//! perftest-compatible latency benchmarks over the `verbs` API.
//!
//! - [`bw`]: perftest's bandwidth figures (BW peak, BW average, MsgRate) and table.
//! - [`config`]: what to run ([`PingPongConfig`]) and its `key=value` names, mirroring
//!   perftest's flags (docs/benchmarks.md).
//! - [`delegate`]: the client of a Linux delegate over RC (docs/delegation.md) and its benchmark.
//! - [`env`]: what the benchmark needs from the machine ([`BenchEnv`]: TSC, clock, DMA memory).
//! - [`pingpong`]: the `ib_send_lat` ping-pong over UD/UC and `ib_write_lat` over RC/UC
//!   ([`run_sweep`], or step-driven [`PingPong`] for several nodes in one thread).
//! - [`plan`]: many runs in one boot: a client's plan ([`PlanClient`]) and a server that
//!   follows its clients ([`Server`]).
//! - [`rendezvous`]: the in-band exchange that replaces perftest's TCP (docs/rendezvous.md).
//! - [`srq`]: several RC QPs sharing one SRQ, ping-ponging (rdma-core's `ibv_srq_pingpong`).
//! - [`stats`]: perftest's latency statistics, reproduced exactly, plus true max and stdev.
//! - [`report`]: perftest's latency table format; [`line`]: the machine-readable result line.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod bw;
pub mod config;
pub mod delegate;
pub mod env;
pub mod line;
pub mod pingpong;
pub mod plan;
pub mod rendezvous;
pub mod report;
pub mod srq;
pub mod stats;

pub use config::{Completion, ConfigError, PingPongConfig, Role, Sizes, Test, Transport};
pub use env::BenchEnv;
pub use pingpong::{
    run_sweep, BenchError, Endpoint, Heard, PingPong, RunStart, Status, StepBudget, SweepSummary,
};
