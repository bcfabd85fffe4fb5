//! Output in perftest's exact latency-table format (perftest's `print_report_lat` and the header lines of src/perftest_parameters.c), so a console log
//! of ibkern can be read, diffed and parsed like one of `ib_send_lat`.

use crate::stats::LatencyStats;
use core::fmt::{self, Write};

/// perftest's separator: 87 dashes.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

/// perftest's latency column header (`RESULT_FMT_LAT`), trailing space included.
pub const RESULT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// Writes the separator and column header, each followed by a newline.
pub fn write_header<W: Write>(out: &mut W) -> fmt::Result {
    writeln!(out, "{RESULT_LINE}")?;
    writeln!(out, "{RESULT_HEADER}")
}

/// Writes one result row exactly as perftest's `REPORT_FMT_LAT` renders it (the literal tabs
/// and padding included), followed by a newline.
pub fn write_row<W: Write>(out: &mut W, bytes: u64, s: &LatencyStats) -> fmt::Result {
    writeln!(
        out,
        " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        bytes, s.iterations, s.t_min, s.t_max, s.t_typical, s.t_avg, s.t_stdev, s.p99, s.p99_9
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_perftests() {
        assert_eq!(RESULT_LINE.len(), 87);
        assert!(RESULT_LINE.bytes().all(|b| b == b'-'));
        let mut s = String::new();
        write_header(&mut s).unwrap();
        let lines: Vec<&str> = s.split('\n').collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].starts_with(" #bytes #iterations"));
        assert!(lines[1].ends_with("99.9% percentile[usec] "));
    }

    #[test]
    fn row_matches_perftests_rendering() {
        // A latency table as perftest renders it (tabs shown as ^I).
        let stats = LatencyStats {
            iterations: 1000,
            samples: 999,
            t_min: 0.77,
            t_max: 5.35,
            t_typical: 0.79,
            t_avg: 0.80,
            t_stdev: 0.05,
            p99: 0.84,
            p99_9: 5.35,
            true_max: 9.0,
            true_stdev: 0.3,
        };
        let mut s = String::new();
        write_row(&mut s, 2, &stats).unwrap();
        let expected = " 2       1000          0.77           5.35         0.79     \t       0.80        \t0.05   \t\t0.84    \t\t5.35   \n";
        assert_eq!(s, expected);
    }
}
