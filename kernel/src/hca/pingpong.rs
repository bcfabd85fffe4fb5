//! `mode=pingpong`: the HCA as a verbs device under the bench's ping-pong sweep.

use crate::config::Config;
use crate::system::Machine;

/// Runs the configured sweep; true on success.
pub fn run(_machine: &Machine, _config: &Config) -> bool {
    crate::println!("pingpong: FAIL: not built yet");
    false
}
