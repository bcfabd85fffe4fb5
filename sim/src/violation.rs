//! Contract violations: everything a driver did that the device contract forbids.

use std::fmt;

/// One recorded breach of the device contract. The model answers the breach as the hardware
/// would (status code, error CQE, QP to error...) and additionally records it here so tests can
/// assert that a run was clean.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Section of docs/hardware.md the rule comes from, e.g. "§1.2".
    pub section: &'static str,
    /// What happened, in words.
    pub description: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.section, self.description)
    }
}

/// Upper bound of violations kept per HCA (a fuzzer can generate millions); later ones are
/// counted but not stored.
pub const MAX_KEPT_VIOLATIONS: usize = 10_000;
