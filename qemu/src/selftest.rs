//! Reading the kernel's selftest report from its console.
//!
//! The kernel prints one line per check, `selftest: PASS <name>: <detail>` or
//! `selftest: FAIL <name>: <detail>`, and closes with `selftest: N passed, M failed`. Lines may
//! carry a log prefix (timestamp, level) before `selftest:`.

use std::fmt;

use crate::guest::GuestExit;

/// One check line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub detail: String,
}

/// Everything the console said about the selftest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub passed: Vec<Check>,
    pub failed: Vec<Check>,
    /// The closing line's counts (passed, failed), if it was printed.
    pub summary: Option<(u32, u32)>,
}

const MARKER: &str = "selftest: ";

fn parse_check(rest: &str) -> Check {
    // Names may contain `:` (`pci-expect 8086:29c0`); the detail follows the first `: `.
    match rest.split_once(": ") {
        Some((name, detail)) => Check {
            name: name.trim().into(),
            detail: detail.trim().into(),
        },
        None => Check {
            name: rest.trim().into(),
            detail: String::new(),
        },
    }
}

fn parse_summary(rest: &str) -> Option<(u32, u32)> {
    let (passed, failed) = rest.trim().split_once(", ")?;
    let passed = passed.strip_suffix(" passed")?.parse().ok()?;
    let failed = failed.strip_suffix(" failed")?.parse().ok()?;
    Some((passed, failed))
}

/// Collects the selftest lines of a console transcript.
pub fn parse(console: &str) -> Report {
    let mut report = Report::default();
    for line in console.lines() {
        let Some(at) = line.find(MARKER) else {
            continue;
        };
        let rest = line[at + MARKER.len()..].trim_end();
        if let Some(check) = rest.strip_prefix("PASS ") {
            report.passed.push(parse_check(check));
        } else if let Some(check) = rest.strip_prefix("FAIL ") {
            report.failed.push(parse_check(check));
        } else if let Some(counts) = parse_summary(rest) {
            report.summary = Some(counts);
        }
    }
    report
}

/// Why a selftest run did not pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The kernel reported failed checks.
    ChecksFailed(Vec<Check>),
    /// No closing `selftest: N passed, M failed` line.
    NoSummary,
    /// The closing line reported zero checks.
    NothingChecked,
    /// The closing counts disagree with the check lines seen.
    CountMismatch {
        summary: (u32, u32),
        lines: (usize, usize),
    },
    /// The kernel's report was clean but QEMU did not end with the kernel's success status.
    Exit(GuestExit),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::ChecksFailed(checks) => {
                write!(f, "{} check(s) failed:", checks.len())?;
                for check in checks {
                    write!(f, "\n    {}: {}", check.name, check.detail)?;
                }
                Ok(())
            }
            Failure::NoSummary => {
                write!(f, "the kernel never printed `selftest: N passed, M failed`")
            }
            Failure::NothingChecked => write!(f, "the kernel ran no checks (0 passed)"),
            Failure::CountMismatch { summary, lines } => write!(
                f,
                "the summary says {} passed, {} failed but the console shows {} PASS and {} FAIL \
                 lines (output lost or garbled?)",
                summary.0, summary.1, lines.0, lines.1
            ),
            Failure::Exit(exit) => write!(f, "the report was clean but {exit}"),
        }
    }
}

/// The verdict: passes only if the report is complete and clean and the guest exited with the
/// kernel's success status. The first problem found is returned, checks before exit status.
pub fn verdict(report: &Report, exit: &GuestExit) -> Result<(), Failure> {
    if !report.failed.is_empty() {
        return Err(Failure::ChecksFailed(report.failed.clone()));
    }
    let Some(summary) = report.summary else {
        return Err(Failure::NoSummary);
    };
    let lines = (report.passed.len(), report.failed.len());
    if (summary.0 as usize, summary.1 as usize) != lines {
        return Err(Failure::CountMismatch { summary, lines });
    }
    if summary.0 == 0 {
        return Err(Failure::NothingChecked);
    }
    if *exit != GuestExit::KernelSuccess {
        return Err(Failure::Exit(exit.clone()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const CLEAN: &str = "\
[    0.012345] INFO  ibkern starting
[    0.100000] INFO  selftest: PASS identity-map: 0x100000 reads back through phys window
selftest: PASS page-size: 1 GiB pages (cpuid pdpe1gb)
[    0.200000] INFO  selftest: PASS pci-expect 8086:29c0: 8086:29c0 at 00:00.0 (0 BARs)
[    0.300000] INFO  selftest: 3 passed, 0 failed\r
";

    #[test]
    fn parses_checks_with_and_without_log_prefix() {
        let report = parse(CLEAN);
        assert_eq!(report.passed.len(), 3);
        assert_eq!(
            report.passed[0],
            Check {
                name: "identity-map".into(),
                detail: "0x100000 reads back through phys window".into()
            }
        );
        assert_eq!(report.passed[1].name, "page-size");
        assert_eq!(report.passed[2].name, "pci-expect 8086:29c0");
        assert_eq!(report.passed[2].detail, "8086:29c0 at 00:00.0 (0 BARs)");
        assert_eq!(report.summary, Some((3, 0)));
        assert_eq!(verdict(&report, &GuestExit::KernelSuccess), Ok(()));
    }

    #[test]
    fn failed_check_fails_even_with_success_exit() {
        let console = "selftest: PASS a: ok\nselftest: FAIL tsc: 2.5% off HPET\nselftest: 1 passed, 1 failed\n";
        let report = parse(console);
        let err = verdict(&report, &GuestExit::KernelSuccess).unwrap_err();
        assert_eq!(
            err,
            Failure::ChecksFailed(vec![Check {
                name: "tsc".into(),
                detail: "2.5% off HPET".into()
            }])
        );
        assert!(err.to_string().contains("tsc: 2.5% off HPET"));
    }

    #[test]
    fn missing_summary_or_mismatched_counts_fail() {
        let report = parse("selftest: PASS a: ok\n");
        assert_eq!(
            verdict(&report, &GuestExit::KernelSuccess),
            Err(Failure::NoSummary)
        );
        let report = parse("selftest: PASS a: ok\nselftest: 2 passed, 0 failed\n");
        assert_eq!(
            verdict(&report, &GuestExit::KernelSuccess),
            Err(Failure::CountMismatch {
                summary: (2, 0),
                lines: (1, 0)
            })
        );
        let report = parse("selftest: 0 passed, 0 failed\n");
        assert_eq!(
            verdict(&report, &GuestExit::KernelSuccess),
            Err(Failure::NothingChecked)
        );
    }

    #[test]
    fn clean_report_still_needs_the_kernel_success_status() {
        let report = parse(CLEAN);
        for exit in [
            GuestExit::KernelFailure,
            GuestExit::Status(0),
            GuestExit::TimedOut(Duration::from_secs(5)),
        ] {
            assert_eq!(verdict(&report, &exit), Err(Failure::Exit(exit.clone())));
        }
    }

    #[test]
    fn unrelated_selftest_mentions_are_ignored() {
        let report = parse("config: mode=selftest\nselftest: starting 7 checks\n");
        assert_eq!(report, Report::default());
    }
}
