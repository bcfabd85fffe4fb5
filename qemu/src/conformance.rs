//! `cargo qemu conformance`: the differential check of ibkern against Linux on the model.
//! Both stacks' behaviour traces (`sim::trace`, recorded with `cargo qemu hca --trace`,
//! `linux --trace`, `pingpong --trace` or `compare --trace`) are compared with
//! `sim::conformance`: every observation of ibkern that Linux never made must be covered by
//! an entry of the departures file (drivers/mlx4/conformance/departures.txt), else the check
//! fails. What Linux does and ibkern never does is listed for review.
//!
//! Linux's behaviour differs with the card's capabilities, so its trace is kept per device
//! profile: drivers/mlx4/conformance/linux-NAME.trace, recorded by the "linux" system tests'
//! pair run on profile NAME (docs/runner.md, "cargo qemu conformance").

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use sim::conformance::{compare, parse_departures, union, Report};

/// The directory of the departures file and Linux's traces, relative to the workspace root.
pub const DIR: &str = "drivers/mlx4/conformance";
/// The reviewed departures, relative to the workspace root.
pub const DEPARTURES: &str = "drivers/mlx4/conformance/departures.txt";

/// Linux's trace on device profile `profile`, recorded by the "linux" system tests' pair
/// run on that profile, relative to the workspace root.
pub fn linux_trace(profile: &str) -> String {
    format!("{DIR}/linux-{profile}.trace")
}

/// The profiles a Linux trace is checked in for, sorted.
pub fn recorded_profiles(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root.join(DIR))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            Some(
                name.strip_prefix("linux-")?
                    .strip_suffix(".trace")?
                    .to_string(),
            )
        })
        .collect();
    names.sort();
    names
}

/// `cargo qemu conformance`.
#[derive(Debug, clap::Args)]
pub struct ConformanceArgs {
    /// ibkern's trace(s); several are merged.
    #[arg(long, value_name = "FILE", required = true)]
    pub ibkern: Vec<PathBuf>,
    /// Linux's trace(s); several are merged [default: the checked-in trace of --profile,
    /// drivers/mlx4/conformance/linux-NAME.trace].
    #[arg(long, value_name = "FILE", conflicts_with = "profile")]
    pub linux: Vec<PathBuf>,
    /// The device profile ibkern's trace was recorded on: Linux's checked-in trace on the
    /// same profile is the reference [default: the default profile].
    #[arg(long, value_name = "NAME", value_parser = crate::device_profile::parse_profile_name)]
    pub profile: Option<String>,
    /// The departures file [default: drivers/mlx4/conformance/departures.txt].
    #[arg(long, value_name = "FILE")]
    pub departures: Option<PathBuf>,
    /// Write the report to FILE as well as to stdout.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
}

fn read(path: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {what} {}", path.display()))
}

/// Compare ibkern's trace with Linux's under the departures file at `departures`.
pub fn check(ibkern: &str, linux: &str, departures: &Path) -> Result<Report> {
    let text = read(departures, "the departures file")?;
    let entries =
        parse_departures(&text).map_err(|e| anyhow::anyhow!("{}: {e}", departures.display()))?;
    if linux.trim().is_empty() {
        bail!("the Linux trace is empty");
    }
    if ibkern.trim().is_empty() {
        bail!("the ibkern trace is empty");
    }
    Ok(compare(ibkern, linux, &entries))
}

/// One line summing a report up.
pub fn summary(r: &Report) -> String {
    format!(
        "conformance: {} departure(s) from Linux, {} not in the departures file ({} listed as to fix); Linux does {} thing(s) ibkern never does",
        r.departures.len(),
        r.uncovered().len(),
        r.to_fix().len(),
        r.reference_only.len()
    )
}

/// Unreadable or malformed inputs are a bad command line: a message and exit 2.
pub fn conformance_command(args: ConformanceArgs) -> Result<crate::Exit> {
    match run(args) {
        Ok(exit) => Ok(exit),
        Err(e) => {
            crate::say(&format!("error: {e:#}"));
            Ok(crate::Exit::Usage)
        }
    }
}

fn run(args: ConformanceArgs) -> Result<crate::Exit> {
    let root = crate::host::Workspace::locate().root;
    let mut ours = Vec::new();
    for p in &args.ibkern {
        ours.push(read(p, "the ibkern trace")?);
    }
    let linux_paths = if args.linux.is_empty() {
        let profile = args
            .profile
            .clone()
            .unwrap_or_else(|| sim::profile::DEFAULT_PROFILE.to_string());
        let path = root.join(linux_trace(&profile));
        if !path.is_file() {
            bail!(
                "no Linux trace is checked in for profile {profile} (there are traces for: {}); \
                 record one with the \"linux\" system tests (docs/runner.md, \"cargo qemu \
                 conformance\") or give it with --linux",
                recorded_profiles(&root).join(", ")
            );
        }
        vec![path]
    } else {
        args.linux.clone()
    };
    let mut theirs = Vec::new();
    for p in &linux_paths {
        theirs.push(read(p, "the Linux trace")?);
    }
    let departures = args.departures.unwrap_or_else(|| root.join(DEPARTURES));
    let r = check(
        &union(ours.iter().map(String::as_str)),
        &union(theirs.iter().map(String::as_str)),
        &departures,
    )?;
    let text = r.render("ibkern", "Linux");
    print!("{text}");
    if let Some(p) = &args.report {
        std::fs::write(p, &text).with_context(|| format!("writing {}", p.display()))?;
    }
    let line = summary(&r);
    if r.uncovered().is_empty() {
        eprintln!("ibkern-qemu: {line}: PASS");
        Ok(crate::Exit::Success)
    } else {
        eprintln!("ibkern-qemu: {line}: FAILED");
        Ok(crate::Exit::GuestFailed)
    }
}
