//! Latency statistics computed exactly as perftest's `print_report_lat` computes them
//! (perftest's `print_report_lat`, src/perftest_parameters.c), plus the honest figures perftest does not give.
//!
//! perftest records one TSC stamp per iteration just before each post (`tposted[i]`), turns
//! consecutive stamps into `iters - 1` deltas (one round trip each), sorts them, drops the
//! two largest (`LAT_MEASURE_TAIL`) and reports:
//! - `t_min` = smallest delta; `t_max` = `delta[measure_cnt]`, i.e. the second-largest raw sample;
//! - `t_typical` = median of the kept samples, computed on integer cycles (the mean of the two
//!   middle values is truncated to a whole cycle);
//! - `t_avg` = mean of the kept samples;
//! - `t_stdev` with every deviation truncated to a whole microsecond before squaring (perftest
//!   stores it in an `int`), so quiet systems print 0.00;
//! - the 99% and 99.9% points at `delta[ceil(measure_cnt * p)]`, which with the default
//!   1000 iterations makes 99.9% equal to `t_max`.
//!
//! All of these are divided by the TSC rate and by the RTT factor (2 for SEND/WRITE ping-pongs,
//! which report half a round trip; 1 for READ/ATOMIC). Alongside them we report the true
//! maximum (over all deltas) and the true standard deviation (over the kept samples, without
//! truncation), which perftest cannot.

/// perftest drops this many of the largest samples before computing statistics.
pub const LAT_MEASURE_TAIL: usize = 2;

/// perftest refuses fewer iterations than this (`MIN_ITER`).
pub const MIN_ITERATIONS: usize = ibconfig::bench::MIN_ITERATIONS as usize;

/// How a delta between two posts relates to the reported latency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RttFactor {
    /// Ping-pong tests (send, write): a delta is a full round trip, report half of it.
    Half,
    /// One-sided round-trip tests (read, atomic): report the full delta.
    Full,
}

impl RttFactor {
    fn divisor(self) -> f64 {
        match self {
            RttFactor::Half => 2.0,
            RttFactor::Full => 1.0,
        }
    }
}

/// Why statistics could not be computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatsError {
    /// Fewer stamps than perftest's minimum iteration count.
    TooFewIterations { iterations: usize },
    /// The scratch buffer cannot hold `iterations - 1` deltas.
    ScratchTooSmall { needed: usize, got: usize },
    /// The TSC rate is zero, negative or not a number.
    BadTscRate,
}

/// One size's results, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencyStats {
    /// Iterations run (number of stamps), as perftest prints it.
    pub iterations: usize,
    /// Deltas measured (`iterations - 1`), the raw sample count.
    pub samples: usize,
    pub t_min: f64,
    /// perftest's t_max: the second-largest delta.
    pub t_max: f64,
    /// perftest's median of the kept samples.
    pub t_typical: f64,
    pub t_avg: f64,
    /// perftest's standard deviation (whole-microsecond deviations).
    pub t_stdev: f64,
    pub p99: f64,
    pub p99_9: f64,
    /// The largest delta of all.
    pub true_max: f64,
    /// The standard deviation of the kept samples, computed without truncation.
    pub true_stdev: f64,
}

/// Computes perftest's latency statistics from the stamps taken before each post.
///
/// `scratch` receives the sorted deltas (in cycles) and must hold `tposted.len() - 1` values;
/// no memory is allocated. `tsc_mhz` is the TSC rate in cycles per microsecond. Stamps that go
/// backwards count as zero-length deltas rather than wrapping.
pub fn perftest_latency(
    tposted: &[u64],
    scratch: &mut [u64],
    tsc_mhz: f64,
    rtt: RttFactor,
) -> Result<LatencyStats, StatsError> {
    let iterations = tposted.len();
    if iterations < MIN_ITERATIONS {
        return Err(StatsError::TooFewIterations { iterations });
    }
    let samples = iterations - 1;
    if scratch.len() < samples {
        return Err(StatsError::ScratchTooSmall {
            needed: samples,
            got: scratch.len(),
        });
    }
    if !(tsc_mhz.is_finite() && tsc_mhz > 0.0) {
        return Err(StatsError::BadTscRate);
    }
    let delta = &mut scratch[..samples];
    for (d, pair) in delta.iter_mut().zip(tposted.windows(2)) {
        *d = pair[1].saturating_sub(pair[0]);
    }
    delta.sort_unstable();

    let quotient = tsc_mhz * rtt.divisor();
    let us = |cycles: u64| cycles as f64 / quotient;
    let measure_cnt = samples - LAT_MEASURE_TAIL;
    let kept = &delta[..measure_cnt];

    // Median on integer cycles, as perftest's get_median: the mean of the two middle values
    // when the count is even, truncated to a whole cycle.
    let median = if (measure_cnt - 1) % 2 == 1 {
        (delta[measure_cnt / 2] + delta[measure_cnt / 2 - 1]) / 2
    } else {
        delta[measure_cnt / 2]
    };

    let average = kept.iter().map(|&d| us(d)).sum::<f64>() / measure_cnt as f64;

    // perftest: `int temp_var = average - x; int pow_var = pow(temp_var, 2);` Both
    // conversions truncate toward zero, which Rust's `as` casts also do.
    let perftest_var = kept
        .iter()
        .map(|&d| {
            let dev = (average - us(d)) as i32 as f64;
            (dev * dev) as i32 as f64
        })
        .sum::<f64>()
        / measure_cnt as f64;
    let true_var = kept
        .iter()
        .map(|&d| {
            let dev = average - us(d);
            dev * dev
        })
        .sum::<f64>()
        / measure_cnt as f64;

    let p99_index = libm::ceil(measure_cnt as f64 * 0.99) as usize;
    let p99_9_index = libm::ceil(measure_cnt as f64 * 0.999) as usize;

    Ok(LatencyStats {
        iterations,
        samples,
        t_min: us(delta[0]),
        t_max: us(delta[measure_cnt]),
        t_typical: us(median),
        t_avg: average,
        t_stdev: libm::sqrt(perftest_var),
        p99: us(delta[p99_index]),
        p99_9: us(delta[p99_9_index]),
        true_max: us(delta[samples - 1]),
        true_stdev: libm::sqrt(true_var),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stamps whose consecutive differences are exactly `deltas` (in the given order).
    fn stamps(deltas: &[u64]) -> Vec<u64> {
        let mut t = vec![1_000];
        for d in deltas {
            t.push(t.last().unwrap() + d);
        }
        t
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn small_sample_matches_hand_computation() {
        // 6 stamps -> 5 deltas (cycles): 40, 10, 30, 20, 50 at 10 cycles/us, half RTT.
        // Sorted: 10 20 30 40 50; the two largest (40, 50) are dropped: measure_cnt = 3.
        let t = stamps(&[40, 10, 30, 20, 50]);
        let mut scratch = [0u64; 5];
        let s = perftest_latency(&t, &mut scratch, 10.0, RttFactor::Half).unwrap();
        assert_eq!(s.iterations, 6);
        assert_eq!(s.samples, 5);
        // quotient = 20 cycles per reported us.
        // t_min = 10 / 20; t_max = delta[3] = 40, the second largest; the median of an odd
        // count (3) is delta[1] = 20; the average is (0.5 + 1.0 + 1.5) / 3 and the deviations
        // 0.5, 0, -0.5 all truncate to 0.
        assert!(close(s.t_min, 0.5));
        assert!(close(s.t_max, 2.0));
        assert!(close(s.t_typical, 1.0));
        assert!(close(s.t_avg, 1.0));
        assert!(close(s.t_stdev, 0.0));
        // ceil(3 * 0.99) = 3 -> delta[3] = 40; same for 99.9%.
        assert!(close(s.p99, 2.0));
        assert!(close(s.p99_9, 2.0));
        assert!(close(s.true_max, 2.5)); // 50 / 20
        let true_sd = libm::sqrt((0.25 + 0.0 + 0.25) / 3.0);
        assert!(close(s.true_stdev, true_sd));
    }

    #[test]
    fn even_count_median_truncates_to_whole_cycles() {
        // 7 stamps -> 6 deltas; measure_cnt = 4 (even): median = (d[2] + d[1]) / 2 in cycles.
        // Sorted deltas: 10 11 14 17 100 200 -> (14 + 11) / 2 = 12 (not 12.5).
        let t = stamps(&[200, 14, 10, 100, 17, 11]);
        let mut scratch = [0u64; 6];
        let s = perftest_latency(&t, &mut scratch, 1.0, RttFactor::Full).unwrap();
        assert!(close(s.t_typical, 12.0));
        assert!(close(s.t_max, 100.0));
        assert!(close(s.true_max, 200.0));
        assert!(close(s.t_avg, (10.0 + 11.0 + 14.0 + 17.0) / 4.0));
    }

    #[test]
    fn stdev_counts_only_whole_microsecond_deviations() {
        // measure_cnt = 4 kept samples at 1 cycle/us, full RTT: 1, 1, 1, 9 (+ two large).
        // avg = 3; deviations 2, 2, 2, -6 -> squares 4, 4, 4, 36 -> var 12 -> sd sqrt(12).
        let t = stamps(&[1, 9, 1, 1, 1000, 1000]);
        let mut scratch = [0u64; 6];
        let s = perftest_latency(&t, &mut scratch, 1.0, RttFactor::Full).unwrap();
        assert!(close(s.t_avg, 3.0));
        assert!(close(s.t_stdev, libm::sqrt(12.0)));
        assert!(close(s.true_stdev, libm::sqrt(12.0)));
        // With deviations below one microsecond perftest's figure collapses to zero while the
        // true one does not: 1.0, 1.4, 1.0, 1.4 us (at 10 cycles/us).
        let t = stamps(&[10, 14, 10, 14, 1000, 1000]);
        let s = perftest_latency(&t, &mut scratch, 10.0, RttFactor::Full).unwrap();
        assert!(close(s.t_stdev, 0.0));
        assert!(close(s.true_stdev, 0.2));
    }

    #[test]
    fn default_iterations_make_p99_9_equal_t_max() {
        // 1000 iterations -> 999 deltas -> measure_cnt 997: p99 = delta[988], p99.9 = delta[997].
        let deltas: Vec<u64> = (1..=999).collect();
        let t = stamps(&deltas);
        let mut scratch = vec![0u64; 999];
        let s = perftest_latency(&t, &mut scratch, 1.0, RttFactor::Full).unwrap();
        assert!(close(s.p99, 989.0)); // delta[988] = 989
        assert!(close(s.p99_9, 998.0)); // delta[997] = 998
        assert!(close(s.t_max, 998.0));
        assert!(close(s.true_max, 999.0));
        assert!(close(s.t_min, 1.0));
        // Odd measure_cnt (997): median = delta[498] = 499.
        assert!(close(s.t_typical, 499.0));
    }

    #[test]
    fn rejects_bad_input_without_panicking() {
        let mut scratch = [0u64; 8];
        assert_eq!(
            perftest_latency(&[1, 2, 3, 4], &mut scratch, 1.0, RttFactor::Half),
            Err(StatsError::TooFewIterations { iterations: 4 })
        );
        assert_eq!(
            perftest_latency(&[1, 2, 3, 4, 5, 6], &mut scratch[..3], 1.0, RttFactor::Half),
            Err(StatsError::ScratchTooSmall { needed: 5, got: 3 })
        );
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(
                perftest_latency(&[1, 2, 3, 4, 5], &mut scratch, bad, RttFactor::Half),
                Err(StatsError::BadTscRate)
            );
        }
        // Stamps that go backwards give zero deltas, not a wrapped huge value.
        let s = perftest_latency(&[10, 5, 20, 30, 40], &mut scratch, 1.0, RttFactor::Full).unwrap();
        assert!(close(s.t_min, 0.0));
        assert!(close(s.true_max, 15.0));
    }
}
