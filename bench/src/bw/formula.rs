//! perftest's bandwidth figures (`print_report_bw`, src/perftest_parameters.c), reproduced
//! with its integer steps, and its table format (`RESULT_FMT`, `REPORT_FMT`).
//!
//! The sender stamps the TSC before posting each list (`tposted[i]` for the first message `i`
//! of every list of `-l` messages) and after each signaled completion (`tcompleted[j]` for
//! `j = Q-1, 2Q-1, …`, and for the last message). Then, for `n` messages of `size` bytes:
//! - BW average = `size * n * hz / ((tcompleted[n-1] - tposted[0]) * unit)`;
//! - MsgRate    = `n * hz / ((tcompleted[n-1] - tposted[0]) * 10^6)` in Mpps;
//! - BW peak    = `size * hz / (opt_delta * unit)` where `opt_delta` is the smallest whole-cycle
//!   quotient `(tcompleted[j] - tposted[i]) / (j - i + 1)` over list starts `i` and stamped
//!   completions `j >= i`, starting from `tcompleted[0] - tposted[0]`; `size * hz` and
//!   `opt_delta * unit` are whole numbers before the final division, as in perftest.
//!
//! `hz` is the TSC rate in cycles per second; `unit` is 2^20 bytes for `MB/sec` (perftest's MB
//! are MiB) or 125,000,000 bytes for `Gb/sec` (`--report_gbits`). With `-N` (no peak) perftest
//! reads only `tcompleted[0]`, stamped at the end, and prints a peak of 0.

use core::fmt::{self, Write};

/// perftest's `MB/sec` unit: 2^20 bytes.
pub const MBS_UNIT: u64 = 0x10_0000;
/// perftest's `Gb/sec` unit (`--report_gbits`): 125,000,000 bytes.
pub const GBS_UNIT: u64 = 125_000_000;

/// perftest's separator: 87 dashes.
pub const RESULT_LINE: &str = crate::report::RESULT_LINE;
/// perftest's bandwidth column header in MB/sec (`RESULT_FMT`).
pub const RESULT_HEADER_MBS: &str =
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";
/// perftest's bandwidth column header with `--report_gbits` (`RESULT_FMT_G`).
pub const RESULT_HEADER_GBS: &str =
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";

/// The unit bandwidth is reported in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BwUnit {
    /// perftest's default, `MB/sec` (MiB per second).
    #[default]
    MBytes,
    /// `--report_gbits`: gigabits per second.
    Gbits,
}

impl BwUnit {
    /// Bytes per reported unit.
    pub fn factor(self) -> u64 {
        match self {
            BwUnit::MBytes => MBS_UNIT,
            BwUnit::Gbits => GBS_UNIT,
        }
    }
}

/// What the bandwidth figures are computed from.
#[derive(Clone, Copy, Debug)]
pub struct BwInput<'a> {
    /// Bytes per message.
    pub size: u64,
    /// TSC stamps before each posted list, indexed by message (entries at multiples of
    /// `post_list` are read). With `no_peak`, only `tposted[0]` is read.
    pub tposted: &'a [u64],
    /// TSC stamps after signaled completions, indexed by message (entries `Q-1 + kQ` and the
    /// last are read). With `no_peak`, only `tcompleted[0]` (the end) is read.
    pub tcompleted: &'a [u64],
    /// Messages sent (`n`).
    pub iterations: u64,
    /// Messages per posted list (`-l`).
    pub post_list: u64,
    /// One signaled completion every `cq_mod` messages (`-Q`).
    pub cq_mod: u64,
    /// `-N`: no peak; only the first entries of the stamp arrays hold anything.
    pub no_peak: bool,
    /// TSC rate in cycles per microsecond.
    pub tsc_mhz: f64,
    pub unit: BwUnit,
}

/// Why bandwidth figures could not be computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BwError {
    NoIterations,
    /// `post_list` or `cq_mod` is zero.
    ZeroBatch,
    /// A stamp array is shorter than the iteration count needs.
    ShortStamps {
        needed: u64,
        got: u64,
    },
    /// The TSC rate is zero, negative or not a number.
    BadTscRate,
    /// The run took no measurable time (end stamp not after the first).
    NoElapsedTime,
}

/// One size's bandwidth figures, as perftest prints them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BwReport {
    pub size: u64,
    pub iterations: u64,
    /// In the report unit; 0 with `-N`; infinite if some window measured zero cycles.
    pub bw_peak: f64,
    pub bw_avg: f64,
    /// Millions of messages per second.
    pub msg_rate_mpps: f64,
    /// Cycles from the first post to the last stamped completion.
    pub total_cycles: u64,
    /// The smallest per-message window found by the peak search, in whole cycles.
    pub opt_delta_cycles: u64,
}

/// Computes perftest's BW peak, BW average and MsgRate. Allocates nothing.
pub fn perftest_bw(inp: &BwInput<'_>) -> Result<BwReport, BwError> {
    let n = inp.iterations;
    if n == 0 {
        return Err(BwError::NoIterations);
    }
    if inp.post_list == 0 || inp.cq_mod == 0 {
        return Err(BwError::ZeroBatch);
    }
    if !(inp.tsc_mhz.is_finite() && inp.tsc_mhz > 0.0) {
        return Err(BwError::BadTscRate);
    }
    let needed = if inp.no_peak { 1 } else { n };
    for got in [inp.tposted.len() as u64, inp.tcompleted.len() as u64] {
        if got < needed {
            return Err(BwError::ShortStamps { needed, got });
        }
    }
    let tp = inp.tposted;
    let tc = inp.tcompleted;
    let window = |i: u64, j: u64| tc[j as usize].saturating_sub(tp[i as usize]) / (j - i + 1);

    let mut opt_delta = tc[0].saturating_sub(tp[0]);
    if !inp.no_peak {
        let q = inp.cq_mod;
        let mut i = 0;
        while i < n {
            // The first stamped completion at or after message i: the next multiple of Q, less one.
            let mut j = (i + 1).div_ceil(q) * q - 1;
            while j < n {
                opt_delta = opt_delta.min(window(i, j));
                j += q;
            }
            if !n.is_multiple_of(q) {
                opt_delta = opt_delta.min(window(i, n - 1));
            }
            i += inp.post_list;
        }
    }

    let end = if inp.no_peak { 0 } else { n as usize - 1 };
    let total = tc[end].saturating_sub(tp[0]);
    if total == 0 {
        return Err(BwError::NoElapsedTime);
    }
    let hz = inp.tsc_mhz * 1_000_000.0;
    let unit = inp.unit.factor();
    let cycles = total as f64;
    let bw_avg = (inp.size as f64 * n as f64 * hz) / (cycles * unit as f64);
    let msg_rate_mpps = (n as f64 * hz) / (cycles * 1_000_000.0);
    // perftest keeps both sides of the peak quotient in 64-bit integers.
    let peak_up = if inp.no_peak {
        0
    } else {
        inp.size.wrapping_mul(hz as u64)
    };
    let peak_down = opt_delta.wrapping_mul(unit);
    let bw_peak = peak_up as f64 / peak_down as f64;
    Ok(BwReport {
        size: inp.size,
        iterations: n,
        bw_peak: if inp.no_peak { 0.0 } else { bw_peak },
        bw_avg,
        msg_rate_mpps,
        total_cycles: total,
        opt_delta_cycles: opt_delta,
    })
}

/// perftest's bidirectional row (`print_full_bw_report` with the peer's report): the two
/// directions' BW peak, BW average and MsgRate added; the size and `#iterations` are this
/// side's. Each side measures its own sending (ib_send_bw, ib_write_bw) or requesting
/// (ib_read_bw, ib_atomic_bw) and the reports are exchanged at the end.
pub fn bidir_sum(mine: &BwReport, peer: &BwReport) -> BwReport {
    BwReport {
        bw_peak: mine.bw_peak + peer.bw_peak,
        bw_avg: mine.bw_avg + peer.bw_avg,
        msg_rate_mpps: mine.msg_rate_mpps + peer.msg_rate_mpps,
        ..*mine
    }
}

/// Writes the separator and the column header for `unit`, each followed by a newline.
pub fn write_bw_header<W: Write>(out: &mut W, unit: BwUnit) -> fmt::Result {
    writeln!(out, "{RESULT_LINE}")?;
    match unit {
        BwUnit::MBytes => writeln!(out, "{RESULT_HEADER_MBS}"),
        BwUnit::Gbits => writeln!(out, "{RESULT_HEADER_GBS}"),
    }
}

/// Writes one row as perftest's `REPORT_FMT` renders it (or `REPORT_FMT_EXT`, six decimals,
/// when reporting Gb/sec below 0.1), followed by a newline.
pub fn write_bw_row<W: Write>(out: &mut W, unit: BwUnit, r: &BwReport) -> fmt::Result {
    if unit == BwUnit::Gbits && r.bw_avg < 0.1 {
        writeln!(
            out,
            " {:<7}    {}           {:<7.6}            {:<7.6}            {:<7.6}",
            r.size, r.iterations, r.bw_peak, r.bw_avg, r.msg_rate_mpps
        )
    } else {
        writeln!(
            out,
            " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
            r.size, r.iterations, r.bw_peak, r.bw_avg, r.msg_rate_mpps
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input<'a>(tp: &'a [u64], tc: &'a [u64], n: u64, l: u64, q: u64) -> BwInput<'a> {
        BwInput {
            size: 4096,
            tposted: tp,
            tcompleted: tc,
            iterations: n,
            post_list: l,
            cq_mod: q,
            no_peak: false,
            tsc_mhz: 1000.0,
            unit: BwUnit::MBytes,
        }
    }

    #[test]
    fn average_and_rate_by_hand() {
        // 8 messages, lists of 2, one completion every 4: posts stamped at 0, 2, 4, 6;
        // completions stamped at messages 3 and 7.
        let tp = [100, 0, 300, 0, 500, 0, 700, 0];
        let tc = [0, 0, 0, 900, 0, 0, 0, 1700];
        let r = perftest_bw(&input(&tp, &tc, 8, 2, 4)).unwrap();
        // 1600 cycles at 1 GHz = 1.6 µs for 8 * 4096 bytes.
        assert_eq!(r.total_cycles, 1600);
        let avg = 8.0 * 4096.0 * 1e9 / (1600.0 * 1_048_576.0);
        assert!((r.bw_avg - avg).abs() < 1e-9, "{}", r.bw_avg);
        assert!((r.msg_rate_mpps - 5.0).abs() < 1e-12);
    }

    #[test]
    fn peak_by_hand() {
        // perftest stamps tcompleted[0] only when Q = 1 and starts the search from
        // tcompleted[0] - tposted[0]; the sender here stores the end stamp there otherwise,
        // so the search starts from the whole run.
        let tp = [100, 0, 300, 0, 500, 0, 700, 0];
        let tc = [1700, 0, 0, 900, 0, 0, 0, 1700];
        let r = perftest_bw(&input(&tp, &tc, 8, 2, 4)).unwrap();
        // Windows (i, j): (0,3)=800/4=200, (0,7)=1600/8=200, (2,3)=600/2=300,
        // (2,7)=1400/6=233, (4,7)=1200/4=300, (6,7)=1000/2=500: 200 cycles per message.
        assert_eq!(r.opt_delta_cycles, 200);
        // 4096 B every 200 ns = 4096 * 1e9 / (200 * 2^20) MiB/s.
        let peak = (4096u64 * 1_000_000_000) as f64 / (200u64 * MBS_UNIT) as f64;
        assert_eq!(r.bw_peak, peak);
        assert!((r.bw_peak - 19531.25).abs() < 1e-9);
    }

    #[test]
    fn peak_truncates_window_to_whole_cycles() {
        // Q = 1, l = 1, n = 3: windows (0,0)=10, (0,1)=25/2=12, (0,2)=31/3=10,
        // (1,1)=15, (1,2)=21/2=10, (2,2)=7.
        let tp = [0, 10, 24];
        let tc = [10, 25, 31];
        let mut inp = input(&tp, &tc, 3, 1, 1);
        inp.size = 1;
        inp.unit = BwUnit::Gbits;
        let r = perftest_bw(&inp).unwrap();
        assert_eq!(r.opt_delta_cycles, 7);
        assert_eq!(r.bw_peak, 1e9 / (7.0 * 125e6));
        // Average: 3 bytes over 31 cycles at 1 GHz, in Gb/s.
        assert!((r.bw_avg - 3.0 * 1e9 / (31.0 * 125e6)).abs() < 1e-12);
    }

    #[test]
    fn trailing_partial_batch_counts() {
        // n = 5, Q = 2: completions stamped at 1, 3 and the last (4).
        let tp = [0, 100, 200, 300, 400];
        let tc = [1000, 150, 0, 390, 430];
        let mut inp = input(&tp, &tc, 5, 1, 2);
        inp.size = 64;
        let r = perftest_bw(&inp).unwrap();
        // (4,4) = 30 is the smallest window and exists only through the last stamp.
        assert_eq!(r.opt_delta_cycles, 30);
        assert_eq!(r.total_cycles, 430);
    }

    #[test]
    fn no_peak_reads_only_first_entries() {
        let tp = [50];
        let tc = [1050];
        let mut inp = input(&tp, &tc, 1000, 1, 100);
        inp.no_peak = true;
        let r = perftest_bw(&inp).unwrap();
        assert_eq!(r.bw_peak, 0.0);
        assert_eq!(r.total_cycles, 1000);
        assert!((r.msg_rate_mpps - 1000.0).abs() < 1e-9);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let tp = [0, 1];
        let tc = [1, 2];
        assert_eq!(
            perftest_bw(&input(&tp, &tc, 3, 1, 1)),
            Err(BwError::ShortStamps { needed: 3, got: 2 })
        );
        assert_eq!(
            perftest_bw(&input(&tp, &tc, 2, 0, 1)),
            Err(BwError::ZeroBatch)
        );
        assert_eq!(
            perftest_bw(&input(&tp, &tc, 0, 1, 1)),
            Err(BwError::NoIterations)
        );
        let mut inp = input(&tp, &tc, 2, 1, 1);
        inp.tsc_mhz = f64::NAN;
        assert_eq!(perftest_bw(&inp), Err(BwError::BadTscRate));
        let z = [5, 5];
        assert_eq!(
            perftest_bw(&input(&z, &z, 2, 1, 1)),
            Err(BwError::NoElapsedTime)
        );
    }

    #[test]
    fn bidirectional_sum_adds_the_figures_and_keeps_this_sides_count() {
        // Side A: 1000 messages of 4096 B in 2000 cycles at 1 GHz; B: 1000 in 4000.
        let tp = [0];
        let a = perftest_bw(&BwInput {
            no_peak: true,
            ..input(&tp, &[2000], 1000, 1, 1)
        })
        .unwrap();
        let b = perftest_bw(&BwInput {
            no_peak: true,
            ..input(&tp, &[4000], 1000, 1, 1)
        })
        .unwrap();
        let s = bidir_sum(&a, &b);
        // 0.5 and 0.25 messages per ns: 500 + 250 Mpps.
        assert!((s.msg_rate_mpps - 750.0).abs() < 1e-9);
        let mib = |mpps: f64| mpps * 1e6 * 4096.0 / 1_048_576.0;
        assert!((s.bw_avg - mib(750.0)).abs() < 1e-6);
        assert_eq!((s.size, s.iterations, s.total_cycles), (4096, 1000, 2000));
        assert_eq!(s.bw_peak, 0.0);
    }

    #[test]
    fn table_matches_perftests_rendering() {
        let r = BwReport {
            size: 65536,
            iterations: 5000,
            bw_peak: 1103.39,
            bw_avg: 1103.38,
            msg_rate_mpps: 0.017654,
            total_cycles: 1,
            opt_delta_cycles: 1,
        };
        let mut s = String::new();
        write_bw_header(&mut s, BwUnit::MBytes).unwrap();
        write_bw_row(&mut s, BwUnit::MBytes, &r).unwrap();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[1], RESULT_HEADER_MBS);
        assert_eq!(
            lines[2],
            " 65536      5000             1103.39            1103.38\t\t   0.017654"
        );
        let mut g = String::new();
        let small = BwReport {
            bw_avg: 0.05,
            bw_peak: 0.06,
            ..r
        };
        write_bw_row(&mut g, BwUnit::Gbits, &small).unwrap();
        assert_eq!(
            g,
            " 65536      5000           0.060000            0.050000            0.017654\n"
        );
    }
}
