//! Each run's own output directory: `BASE/<UTC start time>/` (e.g.
//! `out/pingpong/2026-11-25T08-45-12Z/`), with `BASE/latest` a symbolic link to the newest.
//!
//! A run never writes beside an earlier run's files, so no stale console of a transport the
//! new run did not boot can be mistaken for its own, and nothing is overwritten. Commands
//! create the directory only once the command line and configurations are checked: a refused
//! configuration writes nothing.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

/// The link to the newest run in a base directory.
pub const LATEST: &str = "latest";

/// `seconds` since the Unix epoch as `YYYY-MM-DDTHH-MM-SSZ` (UTC; dashes instead of colons so
/// the name is valid everywhere a user may copy it).
pub fn timestamp_name(seconds: u64) -> String {
    let days = (seconds / 86_400) as i64;
    let rem = seconds % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}-{:02}-{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days` algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The current UTC time as [`timestamp_name`] gives it.
pub fn now_name() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    timestamp_name(secs)
}

/// Checks that `base` (a command's `--out DIR`) can take a run directory: absent, or a
/// directory whose `latest` is absent or a symbolic link. A mistake is a usage error (exit 2)
/// naming it; commands check this with their other arguments, before anything is made.
pub fn check(base: &Path) -> Result<()> {
    crate::args::check_out_dir(base)?;
    let link = base.join(LATEST);
    if link.exists() && !link.is_symlink() {
        crate::usage!(
            "--out {}: {} exists and is not a symbolic link (it points to the newest run); \
             move it away",
            base.display(),
            link.display()
        );
    }
    Ok(())
}

/// Creates `base/<now>/` (with `-2`, `-3`, ... appended when a run started in the same
/// second) and points `base/latest` at it. Returns the new directory.
pub fn create(base: &Path) -> Result<PathBuf> {
    check(base)?;
    create_named(base, &now_name())
}

/// [`create`] with a given name (tests).
pub fn create_named(base: &Path, name: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(base).with_context(|| format!("creating {}", base.display()))?;
    let mut n = 1;
    let (dir, leaf) = loop {
        let leaf = if n == 1 {
            name.to_string()
        } else {
            format!("{name}-{n}")
        };
        let dir = base.join(&leaf);
        match std::fs::create_dir(&dir) {
            Ok(()) => break (dir, leaf),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 100 => n += 1,
            Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
        }
    };
    point_latest(base, &leaf)?;
    Ok(dir)
}

/// Points `base/latest` at `leaf` (relative, so the tree can be moved), replacing the old
/// link in one rename.
fn point_latest(base: &Path, leaf: &str) -> Result<()> {
    let link = base.join(LATEST);
    if link.exists() && !link.is_symlink() {
        anyhow::bail!(
            "{} exists and is not a symbolic link; move it away",
            link.display()
        );
    }
    let tmp = base.join(format!(".{LATEST}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(leaf, &tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    std::fs::rename(&tmp, &link).with_context(|| format!("updating {}", link.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_calendar_times() {
        assert_eq!(timestamp_name(0), "1970-01-01T00-00-00Z");
        // 2000-02-29 12:34:56 UTC (a leap day of a century divisible by 400).
        assert_eq!(timestamp_name(951_827_696), "2000-02-29T12-34-56Z");
        // 2026-11-25 08:45:12 UTC.
        assert_eq!(timestamp_name(1_795_596_312), "2026-11-25T08-45-12Z");
    }

    #[test]
    fn runs_get_their_own_directory_and_latest_follows() {
        let base = std::env::temp_dir().join(format!("ibkern-rundir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let a = create_named(&base, "t").unwrap();
        std::fs::write(a.join("ud-server.log"), "old").unwrap();
        let b = create_named(&base, "t").unwrap();
        assert_eq!(b, base.join("t-2"));
        assert!(std::fs::read_dir(&b).unwrap().next().is_none(), "empty");
        assert_eq!(
            std::fs::read_link(base.join(LATEST)).unwrap(),
            Path::new("t-2")
        );
        assert!(a.join("ud-server.log").is_file(), "the earlier run is kept");
        std::fs::write(base.join("x"), "").unwrap();
        std::fs::remove_file(base.join(LATEST)).unwrap();
        std::fs::create_dir(base.join(LATEST)).unwrap();
        assert!(
            create_named(&base, "u").is_err(),
            "a real latest/ is not replaced"
        );
        let e = check(&base).unwrap_err();
        assert!(e.is::<crate::Usage>(), "a usage error (exit 2)");
        assert!(e.to_string().contains("is not a symbolic link"), "{e}");
        let file = base.join("x");
        let e = check(&file).unwrap_err();
        assert!(e.is::<crate::Usage>());
        assert!(e.to_string().contains("is a file"), "{e}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
