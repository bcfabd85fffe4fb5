//! How long a wait for an answer lasts before it counts as a loss, and when a lossy size is
//! given up (docs/benchmarks.md, "Loss").
//!
//! A wait is bounded by what the size takes: [`SLACK`] times its typical round trip, never
//! below a tenth of `timeout_ms` ([`FLOOR_DIVISOR`]) and never above the configured bound
//! (`timeout_ms` plus 20 ns per byte). The typical round trip is the median of the size's
//! clean round trips, taken from perftest's own stamps whenever a wait runs out and from the
//! size's statistics when it ends (no clock is read for it on the measured path). Before a
//! size has one, the previous size's, scaled by the size ratio, stands for it; the first
//! size of a run waits the configured bound. An answer to a first try that arrives after its
//! wait ran out (the message was slow, not lost) raises the size's round trip to what that
//! one took. So a loss costs about what the round trips it replaces cost, not the configured
//! bound (2 s under emulation), while a message that is merely slow (a loaded host) has
//! eight round trips' room, and at least the floor.
//!
//! A size is given up at its `loss_limit + 1`-th loss, or, from its [`EVIDENCE`]-th loss on,
//! as soon as finishing it at the loss rate it has had would take more than `loss_limit`
//! losses in all: under 1 % packet loss a UC message of a megabyte almost never arrives
//! whole, and waiting out a hundred losses for it finishes nothing.

/// Typical round trips of room before a wait counts as a loss.
pub const SLACK: u64 = 8;
/// The shortest wait is `timeout_ms` divided by this: 10 ms with the hardware default of
/// 100 ms, 200 ms with the emulated runs' 2 s, so a stall of the host shorter than that never
/// counts as a loss.
pub const FLOOR_DIVISOR: u64 = 10;
/// Losses a size has before its loss rate may give it up early.
pub const EVIDENCE: u32 = 10;

/// The round trips the waits are derived from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LossWait {
    /// The size in progress and its typical round trip (ns; 0 before one is known).
    size: u32,
    round_trip_ns: u64,
    /// The last size whose round trip was known, and that round trip.
    prev: Option<(u32, u64)>,
}

impl LossWait {
    /// A new size starts: the round trip known so far becomes the previous size's.
    pub fn start_size(&mut self, size: u32) {
        if self.round_trip_ns > 0 {
            self.prev = Some((self.size, self.round_trip_ns));
        }
        self.size = size;
        self.round_trip_ns = 0;
    }

    /// The typical (median) clean round trip of the size in progress is `ns` (0: none).
    pub fn typical_round_trip(&mut self, ns: u64) {
        if ns > 0 {
            self.round_trip_ns = ns;
        }
    }

    /// An answer to a first try arrived `ns` after it was sent, later than its wait: the
    /// size's round trips are at least that long.
    pub fn late_answer(&mut self, ns: u64) {
        self.round_trip_ns = self.round_trip_ns.max(ns);
    }

    /// The wait of the size in progress: at most `bound_ns` (the configured one with its
    /// allowance per byte), at least a tenth of `timeout_ns` (`timeout_ms`).
    pub fn wait_ns(&self, timeout_ns: u64, bound_ns: u64) -> u64 {
        let estimate = if self.round_trip_ns > 0 {
            self.round_trip_ns
        } else if let Some((bytes, ns)) = self.prev {
            ns.saturating_mul(u64::from(self.size.div_ceil(bytes.max(1)).max(1)))
        } else {
            return bound_ns;
        };
        estimate
            .saturating_mul(SLACK)
            .max(timeout_ns / FLOOR_DIVISOR)
            .min(bound_ns)
    }
}

/// The median of the clean round trips among `stamps` (TSC cycles of consecutive posts;
/// interval `i` runs from stamp `i` to `i + 1` and is unclean when `bad[i]`), sorted in
/// `scratch`; 0 when there is none.
pub fn median_round_trip(stamps: &[u64], bad: &[bool], scratch: &mut [u64]) -> u64 {
    let mut k = 0;
    for (i, w) in stamps.windows(2).enumerate() {
        if !bad.get(i).copied().unwrap_or(true) && k < scratch.len() {
            scratch[k] = w[1].saturating_sub(w[0]);
            k += 1;
        }
    }
    if k == 0 {
        return 0;
    }
    let (_, median, _) = scratch[..k].select_nth_unstable(k / 2);
    *median
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
    const TIMEOUT: u64 = 2_000 * MS;

    #[test]
    fn the_wait_follows_the_sizes_round_trips_between_floor_and_bound() {
        let bound = TIMEOUT + 168 * MS;
        let mut w = LossWait::default();
        w.start_size(2);
        // Nothing known yet in the run: the configured bound.
        assert_eq!(w.wait_ns(TIMEOUT, bound), bound);
        w.typical_round_trip(400_000);
        // Eight 0.4 ms round trips are below the floor, a tenth of timeout_ms.
        assert_eq!(w.wait_ns(TIMEOUT, bound), 200 * MS);
        w.start_size(1 << 20);
        w.typical_round_trip(40 * MS);
        assert_eq!(
            w.wait_ns(TIMEOUT, bound),
            320 * MS,
            "eight typical round trips"
        );
        // A slow answer raises it; a smaller median later does not undo a known size.
        w.late_answer(60 * MS);
        assert_eq!(w.wait_ns(TIMEOUT, bound), 480 * MS);
        w.late_answer(10 * MS);
        assert_eq!(w.wait_ns(TIMEOUT, bound), 480 * MS);
        // A size with no round trip yet: the last one's, scaled by the sizes.
        w.start_size(2 << 20);
        assert_eq!(w.wait_ns(TIMEOUT, bound), 960 * MS);
        w.start_size(4 << 20);
        assert_eq!(w.wait_ns(TIMEOUT, bound), 1_920 * MS);
        w.start_size(8 << 20);
        assert_eq!(w.wait_ns(TIMEOUT, bound), bound, "never above the bound");
        // The hardware default: a 10 ms floor, a 100 ms bound.
        let mut h = LossWait::default();
        h.start_size(64);
        h.typical_round_trip(3_000);
        assert_eq!(h.wait_ns(100 * MS, 100 * MS), 10 * MS);
        h.typical_round_trip(20 * MS);
        assert_eq!(h.wait_ns(100 * MS, 100 * MS), 100 * MS);
        // "No median" leaves what is known.
        h.typical_round_trip(0);
        assert_eq!(h.wait_ns(100 * MS, 100 * MS), 100 * MS);
    }

    #[test]
    fn the_median_leaves_out_the_intervals_that_held_a_wait() {
        let mut scratch = [0u64; 8];
        // Deltas 10, 12, 1000 (a loss wait), 11, 9, 5000 (another).
        let stamps = [100, 110, 122, 1122, 1133, 1142, 6142];
        let bad = [false, false, true, false, false, true];
        assert_eq!(median_round_trip(&stamps, &bad, &mut scratch), 11);
        // Nothing clean, or too few stamps: none.
        assert_eq!(median_round_trip(&stamps, &[true; 6], &mut scratch), 0);
        assert_eq!(median_round_trip(&stamps[..1], &bad, &mut scratch), 0);
        // A stamp beyond the marks is not taken as clean.
        assert_eq!(median_round_trip(&[0, 5, 9], &[false], &mut scratch), 5);
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
