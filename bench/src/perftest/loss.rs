//! How long a wait for an answer lasts before it counts as a loss, and when a lossy size is
//! given up (docs/benchmarks.md, "Loss").
//!
//! A wait is bounded by what the size takes: [`SLACK`] times the slowest clean round trip
//! the size has had so far (before its first, the previous size's slowest, scaled by the
//! size ratio), never below [`FLOOR_NS`] and never above the configured bound
//! (`timeout_ms` plus 20 ns per byte). The first size of a run waits the configured bound.
//! So a loss costs about what the round trips it replaces cost, not the configured bound
//! (2 s under emulation), while a message that is merely slow (a loaded host) has eight
//! round trips' room.
//!
//! A size is given up at its `loss_limit + 1`-th loss, or, from its [`EVIDENCE`]-th loss on,
//! as soon as finishing it at the loss rate it has had would take more than `loss_limit`
//! losses in all: under 1 % packet loss a UC message of a megabyte almost never arrives
//! whole, and waiting out a hundred losses for it finishes nothing.

/// Round trips of room before a wait counts as a loss.
pub const SLACK: u64 = 8;
/// The shortest wait (the hardware default of `timeout_ms`): a stall of the host or the
/// fabric shorter than this never counts as a loss.
pub const FLOOR_NS: u64 = 100_000_000;
/// Losses a size has before its loss rate may give it up early.
pub const EVIDENCE: u32 = 10;

/// The round trips the waits are derived from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LossWait {
    /// The size in progress and its slowest clean round trip (ns; 0 before one).
    size: u32,
    slowest_ns: u64,
    /// The last size that had a clean round trip, and its slowest.
    prev: Option<(u32, u64)>,
}

impl LossWait {
    /// A new size starts: its round trips so far become the previous size's.
    pub fn start_size(&mut self, size: u32) {
        if self.slowest_ns > 0 {
            self.prev = Some((self.size, self.slowest_ns));
        }
        self.size = size;
        self.slowest_ns = 0;
    }

    /// A round trip of the size in progress that held no loss wait took `ns`.
    pub fn clean_round_trip(&mut self, ns: u64) {
        self.slowest_ns = self.slowest_ns.max(ns);
    }

    /// The wait of the size in progress, at most `bound_ns` (the configured one).
    pub fn wait_ns(&self, bound_ns: u64) -> u64 {
        let estimate = if self.slowest_ns > 0 {
            self.slowest_ns
        } else if let Some((bytes, ns)) = self.prev {
            ns.saturating_mul(u64::from(self.size.div_ceil(bytes.max(1)).max(1)))
        } else {
            return bound_ns;
        };
        estimate.saturating_mul(SLACK).max(FLOOR_NS).min(bound_ns)
    }
}

/// Whether a size with `lost` losses so far, `done` of its `iterations` finished, is given
/// up (`limit`: `loss_limit`).
pub fn give_up(lost: u32, done: u32, iterations: u32, limit: u32) -> bool {
    if lost > limit {
        return true;
    }
    if lost < EVIDENCE {
        return false;
    }
    // The losses still to come at the rate so far: `lost` per `done + 1` finished.
    let left = u64::from(iterations.saturating_sub(done));
    let to_come = left * u64::from(lost) / (u64::from(done) + 1);
    u64::from(lost) + to_come > u64::from(limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_wait_follows_the_sizes_round_trips_between_floor_and_bound() {
        let bound = 2_000 * MS;
        let mut w = LossWait::default();
        w.start_size(2);
        // Nothing measured yet in the run: the configured bound.
        assert_eq!(w.wait_ns(bound), bound);
        w.clean_round_trip(400_000);
        // Eight 0.4 ms round trips are below the floor.
        assert_eq!(w.wait_ns(bound), FLOOR_NS);
        w.start_size(1 << 20);
        w.clean_round_trip(40 * MS);
        w.clean_round_trip(30 * MS);
        assert_eq!(w.wait_ns(bound), 320 * MS, "eight of the slowest");
        // A size that has no clean round trip yet: the last one's, scaled by the sizes.
        w.start_size(4 << 20);
        assert_eq!(w.wait_ns(bound), 1_280 * MS);
        w.start_size(8 << 20);
        assert_eq!(w.wait_ns(bound), bound, "never above the bound");
        assert_eq!(
            w.wait_ns(50 * MS),
            50 * MS,
            "nor above a bound under the floor"
        );
        // A size that never got through leaves the estimate to the last one that did.
        w.start_size(16 << 20);
        assert_eq!(w.wait_ns(u64::MAX), 16 * 40 * MS * SLACK);
    }

    #[test]
    fn a_size_is_given_up_at_the_limit_or_when_its_loss_rate_cannot_finish_it() {
        // The hard limit, whatever the rate.
        assert!(!give_up(100, 999, 1000, 100));
        assert!(give_up(101, 999, 1000, 100));
        // Too few losses to judge the rate.
        assert!(!give_up(9, 0, 20, 100));
        // Ten losses and nothing through: 20 more iterations would take 200 more.
        assert!(give_up(10, 0, 20, 100));
        // 27 % of round trips through (128 KiB UC at 1 % packet loss): about 50 losses
        // for 20 iterations, within the limit.
        assert!(!give_up(10, 4, 20, 100));
        assert!(!give_up(40, 15, 20, 100));
        // 7.6 % through (256 KiB): 19 left at 10 per finished one.
        assert!(give_up(10, 1, 20, 100));
        // A long size with a rare loss early on is not judged by it.
        assert!(!give_up(10, 400, 1000, 100));
        // With a limit below the evidence only the limit counts.
        assert!(!give_up(1, 0, 40, 1));
        assert!(give_up(2, 0, 40, 1));
    }
}
