//! perftest's duration mode (`-D`) as a clock-driven state machine. perftest arms `alarm()`
//! and a signal handler moves it from warm-up to the sample, from the sample to the tail, and
//! from the tail to the end, stamping the TSC as the sample starts and ends; only completions
//! taken during the sample are counted. Here the deadlines are compared with the TSC each time
//! the stream reads it, and each phase's deadline is measured from the moment the previous
//! one was seen to end, as perftest re-arms its alarm from inside the handler.

use super::stream::BwDuration;

/// Where a duration run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not started yet (the first step, or a receiver's first message, starts it).
    Idle,
    /// The margin before the sample: completions are not counted.
    WarmUp,
    /// The measured window.
    Sample,
    /// The margin after the sample: the stream still runs, nothing is counted.
    Tail,
    /// Time is up: no new work is started.
    End,
}

/// The phases of one duration run and the sample window's stamps.
#[derive(Clone, Copy, Debug)]
pub struct Phases {
    d: BwDuration,
    phase: Phase,
    deadline: u64,
    /// TSC when the sample began (perftest's `tposted[0]` in duration mode).
    pub sample_start: u64,
    /// TSC when the sample ended (perftest's `tcompleted[0]`).
    pub sample_end: u64,
}

impl Phases {
    pub fn new(d: BwDuration) -> Self {
        Phases {
            d,
            phase: Phase::Idle,
            deadline: 0,
            sample_start: 0,
            sample_end: 0,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Starts the warm-up at `now` (once; later calls do nothing).
    pub fn start(&mut self, now: u64) -> Phase {
        if self.phase == Phase::Idle {
            self.phase = Phase::WarmUp;
            self.deadline = now.saturating_add(self.d.margin_cycles);
        }
        self.advance(now)
    }

    /// Moves through every phase whose deadline `now` has reached and returns the current one.
    pub fn advance(&mut self, now: u64) -> Phase {
        while self.phase != Phase::Idle && self.phase != Phase::End && now >= self.deadline {
            match self.phase {
                Phase::WarmUp => {
                    self.phase = Phase::Sample;
                    self.sample_start = now;
                    self.deadline = now.saturating_add(self.d.sample_cycles.max(1));
                }
                Phase::Sample => {
                    self.phase = Phase::Tail;
                    self.sample_end = now;
                    self.deadline = now.saturating_add(self.d.margin_cycles);
                }
                Phase::Tail => self.phase = Phase::End,
                Phase::Idle | Phase::End => {}
            }
        }
        self.phase
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(margin: u64, sample: u64) -> BwDuration {
        BwDuration {
            margin_cycles: margin,
            sample_cycles: sample,
        }
    }

    #[test]
    fn phases_follow_the_clock() {
        let mut p = Phases::new(d(10, 100));
        assert_eq!(p.advance(1000), Phase::Idle);
        assert_eq!(p.start(5), Phase::WarmUp);
        assert_eq!(p.advance(14), Phase::WarmUp);
        // Seen late: the sample starts when it is seen, and lasts 100 from there.
        assert_eq!(p.advance(17), Phase::Sample);
        assert_eq!(p.sample_start, 17);
        assert_eq!(p.advance(116), Phase::Sample);
        assert_eq!(p.advance(117), Phase::Tail);
        assert_eq!(p.sample_end, 117);
        assert_eq!(p.advance(126), Phase::Tail);
        assert_eq!(p.advance(127), Phase::End);
        assert_eq!(p.advance(10_000), Phase::End);
        // A second start does not restart it.
        assert_eq!(p.start(20_000), Phase::End);
    }

    #[test]
    fn zero_margin_samples_at_once_and_ends_with_the_sample() {
        let mut p = Phases::new(d(0, 50));
        assert_eq!(p.start(100), Phase::Sample);
        assert_eq!(p.sample_start, 100);
        assert_eq!(p.advance(150), Phase::End);
        assert_eq!(p.sample_end, 150);
    }

    #[test]
    fn from_secs_applies_perftests_margin_rule() {
        // -D 5: margin 5/4 = 1 s, sample 3 s.
        let x = BwDuration::from_secs(5, None, 1000.0).unwrap();
        assert_eq!(
            (x.margin_cycles, x.sample_cycles),
            (1_000_000_000, 3_000_000_000)
        );
        // -D 2 -f 1: not longer than twice the margin.
        assert!(BwDuration::from_secs(2, Some(1), 1000.0).is_err());
        // -D 3: margin 0, the whole run is the sample.
        let y = BwDuration::from_secs(3, None, 2.0).unwrap();
        assert_eq!((y.margin_cycles, y.sample_cycles), (0, 6_000_000));
        assert!(BwDuration::from_secs(3, None, 0.0).is_err());
    }
}
