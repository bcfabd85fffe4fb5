//! `cargo qemu results FILE...`: the tables and files of an emulated run
//! (`latency.csv`, `latency.json`, `latency.svg`) from consoles saved on real nodes.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, Result};
use bench::line::Line;
use ibconfig::Role;

use crate::console_log::{boots, Boot};
use crate::provenance::{NodeFacts, Platform, Provenance};
use crate::results::collect_saved;
use crate::{say, Exit};

/// `cargo qemu results`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Exit status: 0 every result line read; 1 a FILE holds no ibkern-result line (nothing is
written), holds a server's and a client's lines mixed (nothing is written), or some result
lines could not be read (named; the others are written); 2 bad command line (no FILE, a
FILE or `-` given twice, two FILEs holding the same console); 3 a FILE cannot be read or is
over 64 MiB; 128+N stopped by signal N.
See docs/runner.md.")]
pub struct ResultsArgs {
    /// Saved consoles, one per node (a browser console pasted into a file, an IPMI
    /// serial-over-LAN log, `script` output); node numbers follow this order. `-` reads
    /// standard input. A file holding several nodes' consoles one after the other is read
    /// as one node per boot.
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

/// What the command line calls standard input.
const STDIN: &str = "-";

fn read_bounded(name: &str, source: impl Read) -> Result<String> {
    let mut bytes = Vec::new();
    source
        .take(MAX_CONSOLE_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {name}"))?;
    if bytes.len() as u64 > MAX_CONSOLE_BYTES {
        anyhow::bail!(
            "{name} is larger than {} MiB: not a saved console",
            MAX_CONSOLE_BYTES >> 20
        );
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// One input: a FILE or standard input, by the name messages use.
struct Input {
    name: String,
    text: String,
}

/// Reads every FILE (`-`: standard input, once); a FILE named twice is a usage error.
fn read_inputs(files: &[PathBuf]) -> Result<Vec<Input>> {
    let mut inputs = Vec::new();
    let mut seen: Vec<(PathBuf, String)> = Vec::new();
    for f in files {
        let name = f.display().to_string();
        if name == STDIN {
            if seen.iter().any(|s| s.1 == STDIN) {
                crate::usage!("`-` (standard input) is given twice");
            }
            seen.push((PathBuf::new(), name.clone()));
            let text = read_bounded("standard input", std::io::stdin().lock())?;
            inputs.push(Input {
                name: "standard input".to_string(),
                text,
            });
            continue;
        }
        let file = std::fs::File::open(f).with_context(|| format!("cannot read {name}"))?;
        let real = f.canonicalize().unwrap_or_else(|_| f.clone());
        if let Some((_, first)) = seen.iter().find(|s| s.0 == real) {
            crate::usage!("{name} is given twice (as {first}): give each node's console once");
        }
        seen.push((real, name.clone()));
        let text = read_bounded(&name, file)?;
        inputs.push(Input { name, text });
    }
    Ok(inputs)
}

/// One node's console: an input, or one boot of an input that holds several.
struct Node<'a> {
    /// The input's name, with "(boot k of n)" when it held several.
    name: String,
    input: &'a Input,
    boot: Boot,
}

/// Reads every file, refuses (exit 1, nothing written) if one holds no result line, prints
/// the tables and writes the files. Unreadable result lines are listed and make the exit
/// status 1, but the readable ones are still written.
pub fn results_command(args: ResultsArgs) -> Result<Exit> {
    let inputs = read_inputs(&args.files)?;
    let started = crate::provenance::now_iso();
    // Each input's boots (several consoles saved into one file are several nodes).
    let mut nodes: Vec<Node> = Vec::new();
    for input in &inputs {
        let parts = boots(&input.text);
        let n = parts.len();
        if n > 1 {
            let starts: Vec<String> = parts
                .iter()
                .map(|b| b.console_line(1).to_string())
                .collect();
            say(&format!(
                "{} holds the consoles of {n} boots (from lines {}): read as nodes {} to {}",
                input.name,
                starts.join(", "),
                nodes.len(),
                nodes.len() + n - 1
            ));
        }
        for (k, boot) in parts.into_iter().enumerate() {
            let name = if n > 1 {
                format!("{} (boot {} of {n})", input.name, k + 1)
            } else {
                input.name.clone()
            };
            nodes.push(Node { name, input, boot });
        }
    }
    let texts: Vec<&str> = nodes.iter().map(|n| n.boot.text.as_str()).collect();
    let (mut results, report) = collect_saved(&texts);
    let empty: Vec<&str> = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| report.found[*i] == 0)
        .map(|(_, n)| n.name.as_str())
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
    // A node's console has one role; a console with both holds two nodes' lines mixed.
    for (i, n) in nodes.iter().enumerate() {
        let roles = node_roles(&results, i);
        if roles.len() > 1 {
            say(&format!(
                "error: {} holds both a server's and a client's result lines, mixed (two \
                 consoles interleaved, or saved without their boot lines): save each node's \
                 console to its own file. Nothing was written.",
                n.name
            ));
            return Ok(Exit::GuestFailed);
        }
    }
    // The same console given twice (under two names, or saved twice): the same results.
    for j in 0..nodes.len() {
        for i in 0..j {
            let (a, b) = (node_lines(&results, i), node_lines(&results, j));
            if !a.is_empty() && a == b {
                crate::usage!(
                    "{} holds the same results as {}: the same console given twice? Give each \
                     node's console once",
                    nodes[j].name,
                    nodes[i].name
                );
            }
        }
    }
    if results.records.is_empty() && results.bw.is_empty() {
        for bad in &results.bad_lines {
            let n = &nodes[bad.node];
            say(&format!(
                "{} line {}: {}",
                n.input.name,
                n.boot.console_line(bad.line),
                bad.reason
            ));
        }
        say("error: no result line could be read; nothing was written");
        return Ok(Exit::GuestFailed);
    }
    let facts: Vec<NodeFacts> = nodes
        .iter()
        .map(|n| NodeFacts::from_console(&n.name, &n.boot.text))
        .collect();
    // Emulated or hardware only where the consoles show it (provenance.rs, `Evidence`).
    let platform = Platform::of_consoles(&facts);
    results.provenance = Some(Provenance::of_this_run(platform, started, facts));
    let mut exit = Exit::Success;
    for (i, n) in nodes.iter().enumerate() {
        let kept = results.records.iter().filter(|r| r.node == i).count()
            + results.bw.records.iter().filter(|r| r.node == i).count();
        say(&format!(
            "node {i}: {}: {kept} result(s){}",
            n.name,
            match report.repeats[i] {
                0 => String::new(),
                r => format!(", {r} repeated line(s) ignored"),
            }
        ));
    }
    for (node, line, what) in &report.conflicts {
        let n = &nodes[*node];
        say(&format!(
            "warning: {} line {}: {what}",
            n.input.name,
            n.boot.console_line(*line)
        ));
    }
    for bad in &results.bad_lines {
        let n = &nodes[bad.node];
        say(&format!(
            "FAILED: unreadable result line {} of {}: {}",
            n.boot.console_line(bad.line),
            n.input.name,
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

/// The roles node `i`'s result lines name.
fn node_roles(r: &crate::results::Results, i: usize) -> Vec<Role> {
    let mut roles: Vec<Role> = r
        .records
        .iter()
        .filter(|x| x.node == i)
        .map(|x| x.line.role)
        .chain(
            r.bw.records
                .iter()
                .filter(|x| x.node == i)
                .map(|x| x.line.role),
        )
        .collect();
    roles.dedup();
    roles.sort_by_key(|r| r.name());
    roles.dedup();
    roles
}

/// Node `i`'s result lines, in order.
fn node_lines(r: &crate::results::Results, i: usize) -> Vec<Line> {
    r.records
        .iter()
        .filter(|x| x.node == i)
        .map(|x| Line::Latency(x.line))
        .chain(
            r.bw.records
                .iter()
                .filter(|x| x.node == i)
                .map(|x| Line::Bandwidth(x.line)),
        )
        .collect()
}
