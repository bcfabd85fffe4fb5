//! perftest-compatible latency benchmarks over the `verbs` API.
//!
//! - [`stats`]: perftest's latency statistics, reproduced exactly, plus true max and stdev.
//! - [`report`]: perftest's latency table format.
//!
//! The ping-pong sweeps themselves (issue 5) build on these and on the verbs traits.
#![cfg_attr(not(test), no_std)]

pub mod report;
pub mod stats;
