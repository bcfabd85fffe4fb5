//! `cargo qemu results FILE...`: the tables and files of an emulated run
//! (`latency.csv`, `latency.json`, `latency.svg`) from consoles saved on real nodes.

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::provenance::{NodeFacts, Platform, Provenance};
use crate::results::collect_saved;
use crate::{say, Exit};

/// `cargo qemu results`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Exit status: 0 every result line read; 1 a FILE holds no ibkern-result line (nothing is
written), or some result lines could not be read (named; the others are written); 2 bad
command line; 3 a FILE cannot be read or is over 64 MiB; 128+N stopped by signal N.
See docs/runner.md.")]
pub struct ResultsArgs {
    /// Saved consoles, one per node (a browser console pasted into a file, an IPMI
    /// serial-over-LAN log, `script` output); node numbers follow this order.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Base directory: the files go to DIR/<UTC time>/, DIR/latest points to the newest
    /// [default: out/results in the workspace].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// The largest console read: far more than any run prints (a UC sweep's console is about
/// 30 KB), small enough that a wrong path (a device, a disk image) is refused, not swallowed.
pub const MAX_CONSOLE_BYTES: u64 = 64 << 20;

fn read_bounded(f: &std::path::Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(f).with_context(|| format!("cannot read {}", f.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_CONSOLE_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {}", f.display()))?;
    if bytes.len() as u64 > MAX_CONSOLE_BYTES {
        anyhow::bail!(
            "{} is larger than {} MiB: not a saved console",
            f.display(),
            MAX_CONSOLE_BYTES >> 20
        );
    }
    Ok(bytes)
}

/// Reads every file, refuses (exit 1, nothing written) if one holds no result line, prints
/// the tables and writes the files. Unreadable result lines are listed and make the exit
/// status 1, but the readable ones are still written.
pub fn results_command(args: ResultsArgs) -> Result<Exit> {
    let mut texts = Vec::new();
    for f in &args.files {
        let bytes = read_bounded(f)?;
        texts.push(String::from_utf8_lossy(&bytes).into_owned());
    }
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let started = crate::provenance::now_iso();
    let (mut results, report) = collect_saved(&refs);
    let empty: Vec<String> = args
        .files
        .iter()
        .enumerate()
        .filter(|(i, _)| report.found[*i] == 0)
        .map(|(_, f)| f.display().to_string())
        .collect();
    if !empty.is_empty() {
        say(&format!(
            "error: no `{}` line in {}: is this the console of an ibkern node that ran \
             mode=pingpong? Nothing was written.",
            crate::results::PREFIX.trim_end(),
            empty.join(", ")
        ));
        return Ok(Exit::GuestFailed);
    }
    if results.records.is_empty() && results.bw.is_empty() {
        for bad in &results.bad_lines {
            say(&format!(
                "{} line {}: {}",
                args.files[bad.node].display(),
                bad.line,
                bad.reason
            ));
        }
        say("error: no result line could be read; nothing was written");
        return Ok(Exit::GuestFailed);
    }
    let nodes: Vec<NodeFacts> = args
        .files
        .iter()
        .zip(&texts)
        .map(|(f, t)| NodeFacts::from_console(&f.display().to_string(), t))
        .collect();
    // Emulated or hardware only where the consoles show it (provenance.rs, `Evidence`).
    let platform = Platform::of_consoles(&nodes);
    results.provenance = Some(Provenance::of_this_run(platform, started, nodes));
    let mut exit = Exit::Success;
    for (i, f) in args.files.iter().enumerate() {
        let kept = results.records.iter().filter(|r| r.node == i).count();
        say(&format!(
            "node {i}: {}: {kept} result(s){}",
            f.display(),
            match report.repeats[i] {
                0 => String::new(),
                n => format!(", {n} repeated line(s) ignored"),
            }
        ));
    }
    for (node, line, what) in &report.conflicts {
        say(&format!(
            "warning: {} line {line}: {what}",
            args.files[*node].display()
        ));
    }
    for bad in &results.bad_lines {
        say(&format!(
            "FAILED: unreadable result line {} of {}: {}",
            bad.line,
            args.files[bad.node].display(),
            bad.reason
        ));
        exit = Exit::GuestFailed;
    }
    let base = args
        .out
        .clone()
        .unwrap_or_else(|| crate::host::Workspace::locate().root.join("out/results"));
    let out = crate::run_dir::create(&base)?;
    results.print_tables();
    let written = results.write_files(&out)?;
    say(&format!(
        "wrote {}, {}, {}",
        written.csv.display(),
        written.json.display(),
        written.plots()
    ));
    if let Some(bw) = &written.bandwidth {
        say(&format!(
            "wrote the bandwidth figures: {}, {}, {}",
            bw.csv.display(),
            bw.json.display(),
            bw.svg.display()
        ));
    }
    Ok(exit)
}
