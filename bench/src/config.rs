//! What a ping-pong run measures and its `key=value` names: the `ibconfig` crate's ping-pong
//! vocabulary (the one parser and checker shared with the kernel and the host tools).

pub use ibconfig::bench::*;
pub use ibconfig::{Run, SrqRun, MAX_RUNS};
