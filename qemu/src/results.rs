//! Results of a ping-pong run: the consoles' result lines (their records are
//! `bench::line`'s, which the kernel writes and this module reads back; schema in
//! docs/benchmarks.md) turned into perftest-style tables, `latency.csv`, `latency.json` and
//! `latency.svg` (latency against message size, one line per test and transport, log2 size
//! axis). A client run with `anatomy=on` adds `ibkern-anatomy` lines: their figures join the
//! records of the same sizes (the anatomy columns of the CSV, `"anatomy"` in the JSON) and
//! `anatomy.svg` stacks each size's round trip from its parts. The bandwidth tests' records
//! and files are `crate::bw_results`'s, the SRQ ping-pong's `crate::srq`'s.
//!
//! ```no_run
//! # fn demo(console_a: &str, console_b: &str) -> anyhow::Result<()> {
//! let results = ibkern_qemu::results::collect(&[console_a, console_b]);
//! results.write_files(std::path::Path::new("out"))?;
//! results.print_tables();
//! # Ok(()) }
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use bench::line::{AnatomyLine, Kind, LatencyLine, Line, PortCounts, PortLine};
use ibconfig::{Completion, Role, Test, Transport};
use serde_json::{json, Map, Value};

use crate::bw_results::BwRecord;
use crate::console_log::found_lines;
use crate::plot;

pub use bench::line::PREFIX;
/// Median and average of one part of a round trip, microseconds.
pub use bench::perftest::MedAvg;

/// One size's figures as one node reported them: its result line, and when the client ran
/// with `anatomy=on` the size's anatomy line (docs/benchmarks.md, "Where the time goes").
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Index of the console the line came from (0 = first node).
    pub node: usize,
    pub line: LatencyLine,
    pub anatomy: Option<AnatomyLine>,
}

impl Record {
    /// What an anatomy line is matched on: test, transport, role, completion and size.
    fn anatomy_key(&self) -> AnatomyKey {
        let l = &self.line;
        (l.test, l.transport, l.role, l.completion, l.bytes)
    }

    /// Samples used for the statistics (0 when the size was aborted).
    pub fn samples(&self) -> usize {
        self.line.stats.map_or(0, |s| s.samples)
    }
}

/// A client's port traffic counters read before and after one run (`ibkern-port` line,
/// docs/benchmarks.md "Port counters").
#[derive(Clone, Debug, PartialEq)]
pub struct PortRun {
    pub node: usize,
    pub line: PortLine,
}

/// The completion modes in the order tables show them.
pub const MODES: [Completion; 3] = Completion::ALL;

/// A result line that could not be read.
#[derive(Clone, Debug, PartialEq)]
pub struct BadLine {
    pub node: usize,
    /// 1-based line number in that console.
    pub line: usize,
    pub reason: String,
}

/// Everything collected from the consoles.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Results {
    pub records: Vec<Record>,
    /// The bandwidth tests' lines (`send_bw`, ...): their own tables and files.
    pub bw: crate::bw_results::BwResults,
    pub bad_lines: Vec<BadLine>,
    /// The `ibkern-port` lines: each run's port traffic counters, before and after.
    pub ports: Vec<PortRun>,
    /// Where the figures come from; every file and the tables carry it when set.
    pub provenance: Option<crate::provenance::Provenance>,
}

/// Paths of the files [`Results::write_files`] wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct Written {
    pub csv: PathBuf,
    pub json: PathBuf,
    pub svg: PathBuf,
    /// `bandwidth.csv`, `.json` and `.svg`, when the run had bandwidth tests.
    pub bandwidth: Option<crate::bw_results::BwWritten>,
    /// `anatomy.svg`, written when a client ran with `anatomy=on`.
    pub anatomy_svg: Option<PathBuf>,
}

impl Written {
    /// The plots written, for messages: `latency.svg` and, if any, `anatomy.svg`.
    pub fn plots(&self) -> String {
        match &self.anatomy_svg {
            Some(a) => format!("{}, {}", self.svg.display(), a.display()),
            None => self.svg.display().to_string(),
        }
    }
}

/// What an anatomy line is matched on: test, transport, role, completion and size.
type AnatomyKey = (Test, Transport, Role, Completion, u32);

fn anatomy_key(a: &AnatomyLine) -> AnatomyKey {
    (a.test, a.transport, a.role, a.completion, a.bytes)
}

/// Why an anatomy line was not used.
pub const ORPHAN_ANATOMY: &str = "an anatomy line without its result line";

/// Gives `a` to the record it belongs to: a run prints its anatomy after all its result
/// lines, so the first record of `node` with the same key and no anatomy yet. Returns
/// whether there was one.
pub fn attach_anatomy(records: &mut [Record], node: usize, a: AnatomyLine) -> bool {
    let key = anatomy_key(&a);
    match records
        .iter_mut()
        .find(|rec| rec.node == node && rec.anatomy.is_none() && rec.anatomy_key() == key)
    {
        Some(rec) => {
            rec.anatomy = Some(a);
            true
        }
        None => false,
    }
}

/// Every line of a console, read into its record: (1-based line number, its kind, the
/// record or why it could not be read). Lines broken by a terminal are joined first
/// ([`crate::console_log::found_lines`]).
pub fn read_lines(text: &str) -> Vec<(usize, Kind, Result<Line, String>)> {
    found_lines(text)
        .into_iter()
        .map(|f| {
            let line = f
                .json
                .and_then(|j| Line::parse(f.kind, &j).map_err(|e| e.to_string()));
            (f.line, f.kind, line)
        })
        .collect()
}

/// The kinds of line [`collect`] reads: the SRQ ping-pong's are `crate::srq`'s, the node
/// line is `crate::provenance`'s.
const RESULT_KINDS: [Kind; 3] = [Kind::Result, Kind::Port, Kind::Anatomy];

/// Reads every result, port and anatomy line of every console (`consoles[i]` is node `i`).
/// A line may carry other text before its prefix (serial noise); unreadable lines are kept
/// in [`Results::bad_lines`], not dropped silently.
pub fn collect(consoles: &[&str]) -> Results {
    let mut r = Results::default();
    for (node, text) in consoles.iter().enumerate() {
        for (line, kind, read) in read_lines(text) {
            let bad = |reason| BadLine { node, line, reason };
            if !RESULT_KINDS.contains(&kind) {
                continue;
            }
            match read {
                Ok(Line::Latency(l)) => r.records.push(Record {
                    node,
                    line: l,
                    anatomy: None,
                }),
                Ok(Line::Bandwidth(l)) => r.bw.records.push(BwRecord { node, line: l }),
                Ok(Line::Port(l)) => r.ports.push(PortRun { node, line: l }),
                Ok(Line::Anatomy(a)) => {
                    if !attach_anatomy(&mut r.records, node, a) {
                        r.bad_lines.push(bad(ORPHAN_ANATOMY.into()));
                    }
                }
                Ok(Line::Srq(_) | Line::Node(_)) => {}
                Err(reason) => r.bad_lines.push(bad(reason)),
            }
        }
    }
    r
}

/// What [`collect_saved`] read besides the records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SavedReport {
    /// Per console: result objects found (including unreadable ones and repeats).
    pub found: Vec<usize>,
    /// Exact repeats dropped (a redrawn console), per console.
    pub repeats: Vec<usize>,
    /// A size reported twice by one console with different figures: (node, line of the one
    /// kept, what). The later one is kept (the console's last run).
    pub conflicts: Vec<(usize, usize, String)>,
}

/// Reads saved consoles (`consoles[i]` is node `i`) into [`Results`] as [`collect`] does,
/// with what a console saved from a screen needs: a line repeated exactly (a redrawn
/// console) is read once and counted in [`SavedReport::repeats`]; a size a console reports
/// again with other figures replaces the earlier one (reported in
/// [`SavedReport::conflicts`]).
pub fn collect_saved(consoles: &[&str]) -> (Results, SavedReport) {
    let mut results = Results::default();
    let mut report = SavedReport::default();
    for (node, text) in consoles.iter().enumerate() {
        let lines = read_lines(text);
        report
            .found
            .push(lines.iter().filter(|l| l.1 == Kind::Result).count());
        let mut repeats = 0;
        let mut kept: Vec<(usize, LatencyLine)> = Vec::new();
        let mut anatomies: Vec<(usize, AnatomyLine)> = Vec::new();
        let mut seen: Vec<Line> = Vec::new();
        for (line, _, read) in lines.into_iter().filter(|l| RESULT_KINDS.contains(&l.1)) {
            let bad = |reason| BadLine { node, line, reason };
            let l = match read {
                Ok(l) => l,
                Err(reason) => {
                    results.bad_lines.push(bad(reason));
                    continue;
                }
            };
            if seen.contains(&l) {
                repeats += 1;
                continue;
            }
            seen.push(l.clone());
            match l {
                Line::Latency(rec) => {
                    let same_size = kept.iter().position(|(_, k)| {
                        (k.test, k.transport, k.role, k.completion, k.bytes)
                            == (rec.test, rec.transport, rec.role, rec.completion, rec.bytes)
                    });
                    if let Some(p) = same_size {
                        report.conflicts.push((
                            node,
                            line,
                            format!(
                                "{} {} {} {} B reported again with other figures (line {} \
                                 replaced)",
                                rec.test.name(),
                                rec.transport.name(),
                                rec.role.name(),
                                rec.bytes,
                                kept[p].0
                            ),
                        ));
                        kept.remove(p);
                    }
                    kept.push((line, rec));
                }
                Line::Bandwidth(l) => results.bw.records.push(BwRecord { node, line: l }),
                Line::Port(l) => results.ports.push(PortRun { node, line: l }),
                Line::Anatomy(a) => anatomies.push((line, a)),
                Line::Srq(_) | Line::Node(_) => {}
            }
        }
        let first = results.records.len();
        results
            .records
            .extend(kept.into_iter().map(|(_, line)| Record {
                node,
                line,
                anatomy: None,
            }));
        // The anatomy lines of this node join its records.
        for (line, a) in anatomies {
            if !attach_anatomy(&mut results.records[first..], node, a) {
                results.bad_lines.push(BadLine {
                    node,
                    line,
                    reason: ORPHAN_ANATOMY.to_string(),
                });
            }
        }
        report.repeats.push(repeats);
    }
    (results, report)
}

fn opt(v: Option<f64>) -> String {
    v.map_or(String::new(), |x| format!("{x:.3}"))
}

/// A number as a line writes it with `decimals` decimals (what a record read back from the
/// line holds).
fn as_written(x: f64, decimals: usize) -> f64 {
    format!("{x:.decimals$}").parse().unwrap_or(x)
}

/// The latency tests, in the order tables and plots show them.
pub fn latency_tests() -> impl Iterator<Item = Test> {
    Test::ALL.into_iter().filter(|t| !t.is_bw())
}

/// Column names of `latency.csv`, in order; the last eleven are the anatomy's (empty
/// without `anatomy=on`).
pub const CSV_COLUMNS: [&str; 36] = [
    "node",
    "role",
    "test",
    "transport",
    "bytes",
    "iterations",
    "samples",
    "t_min_us",
    "t_max_us",
    "t_typical_us",
    "t_avg_us",
    "t_stdev_us",
    "p99_us",
    "p99_9_us",
    "true_max_us",
    "true_stdev_us",
    "tsc_mhz",
    "inline",
    "completion",
    "mtu",
    "lost",
    "retries",
    "aborted",
    "interrupts",
    "interrupts_per_iter",
    "post_med_us",
    "post_avg_us",
    "send_cqe_med_us",
    "send_cqe_avg_us",
    "rtt_med_us",
    "rtt_avg_us",
    "peer_turnaround_med_us",
    "peer_turnaround_avg_us",
    "wire_nic_med_us",
    "wire_nic_avg_us",
    "peer_turnaround_by",
];

/// The parts of an anatomy in the CSV's order: post, send CQE, RTT, peer turnaround (zero
/// when the HCA answered), wire and NICs.
fn anatomy_parts(a: Option<&AnatomyLine>) -> [Option<MedAvg>; 5] {
    match a {
        Some(a) => [a.post, a.send_cqe, a.rtt, a.peer_figures(), a.wire_nic],
        None => [None; 5],
    }
}

fn opt4(v: Option<f64>) -> String {
    v.map_or(String::new(), |x| format!("{x:.4}"))
}

impl Results {
    /// The send_lat records of one transport and role, by size.
    pub fn series(&self, transport: Transport, role: Role) -> Vec<&Record> {
        self.test_series(Test::SendLat, transport, role)
    }

    /// The records of one test, transport and role, by size.
    pub fn test_series(&self, test: Test, transport: Transport, role: Role) -> Vec<&Record> {
        let mut v: Vec<&Record> = self
            .records
            .iter()
            .filter(|r| (r.line.test, r.line.transport, r.line.role) == (test, transport, role))
            .collect();
        v.sort_by_key(|r| (r.line.bytes, r.node));
        v
    }

    /// Transports present (any test), UD first.
    pub fn transports(&self) -> Vec<Transport> {
        Transport::ALL
            .into_iter()
            .filter(|t| self.records.iter().any(|r| r.line.transport == *t))
            .collect()
    }

    /// (test, transport) pairs present: send_lat first, then by transport.
    pub fn groups(&self) -> Vec<(Test, Transport)> {
        latency_tests()
            .flat_map(|test| Transport::ALL.into_iter().map(move |t| (test, t)))
            .filter(|&(test, t)| {
                self.records
                    .iter()
                    .any(|r| (r.line.test, r.line.transport) == (test, t))
            })
            .collect()
    }

    /// The name of a group in the plot's legend: the transport for send_lat (as before
    /// write_lat existed), "write_lat RC" for the others.
    pub fn group_name(test: Test, transport: Transport) -> String {
        if test == Test::SendLat {
            transport.name().to_string()
        } else {
            format!("{} {}", test.name(), transport.name())
        }
    }

    /// The clients' records of a group, or the servers' if no client line arrived.
    fn group_rows(&self, test: Test, transport: Transport) -> (Vec<&Record>, Role) {
        let rows = self.test_series(test, transport, Role::Client);
        if rows.is_empty() {
            (
                self.test_series(test, transport, Role::Server),
                Role::Server,
            )
        } else {
            (rows, Role::Client)
        }
    }

    /// A group's rows split by completion mode (poll, event, isr; `modes=` runs each),
    /// each mode's rows by size.
    fn rows_by_mode<'a>(rows: &[&'a Record]) -> Vec<(Completion, Vec<&'a Record>)> {
        MODES
            .into_iter()
            .filter_map(|m| {
                let v: Vec<&Record> = rows
                    .iter()
                    .copied()
                    .filter(|r| r.line.completion == m)
                    .collect();
                (!v.is_empty()).then_some((m, v))
            })
            .collect()
    }

    /// Losses counted by the clients, over every size (latency and bandwidth tests).
    pub fn total_lost(&self) -> u64 {
        self.records
            .iter()
            .filter(|r| r.line.role == Role::Client)
            .map(|r| u64::from(r.line.lost))
            .sum::<u64>()
            + self.bw.total_lost()
    }

    /// Sizes any node reported as aborted.
    pub fn aborted(&self) -> usize {
        self.records.iter().filter(|r| r.line.aborted).count()
    }

    /// `latency.csv`: a header row ([`CSV_COLUMNS`]) and one row per record; empty cells for
    /// figures an aborted size does not have.
    pub fn to_csv(&self) -> String {
        let mut s = self.comment_lines("# ");
        s.push_str(&CSV_COLUMNS.join(","));
        s.push('\n');
        for r in &self.records {
            let (l, f) = (&r.line, r.line.stats);
            let row = [
                r.node.to_string(),
                l.role.name().to_string(),
                l.test.name().to_string(),
                l.transport.name().to_string(),
                l.bytes.to_string(),
                l.iterations.to_string(),
                r.samples().to_string(),
                opt(f.map(|f| f.t_min)),
                opt(f.map(|f| f.t_max)),
                opt(f.map(|f| f.t_typical)),
                opt(f.map(|f| f.t_avg)),
                opt(f.map(|f| f.t_stdev)),
                opt(f.map(|f| f.p99)),
                opt(f.map(|f| f.p99_9)),
                opt(f.map(|f| f.true_max)),
                opt(f.map(|f| f.true_stdev)),
                format!("{:.3}", l.tsc_mhz),
                l.inline.to_string(),
                l.completion.name().to_string(),
                l.mtu.to_string(),
                l.lost.to_string(),
                l.retries.to_string(),
                l.aborted.to_string(),
                l.interrupts.map_or(String::new(), |n| n.to_string()),
                opt(l.interrupts_per_iter()),
            ];
            let mut row = row.to_vec();
            for p in anatomy_parts(r.anatomy.as_ref()) {
                row.push(opt4(p.map(|p| p.median)));
                row.push(opt4(p.map(|p| p.average)));
            }
            row.push(r.anatomy.map_or("", |a| a.peer_by()).to_string());
            s.push_str(&row.join(","));
            s.push('\n');
        }
        s
    }

    /// `latency.json`: `{"generator": "ibkern", "results": [record, ...]}`, each record with
    /// the result line's keys plus `node`.
    pub fn to_json(&self) -> Value {
        let recs: Vec<Value> = self
            .records
            .iter()
            .map(|r| {
                let (l, f) = (&r.line, r.line.stats);
                json!({
                    "node": r.node,
                    "test": l.test.name(),
                    "transport": l.transport.name(),
                    "role": l.role.name(),
                    "bytes": l.bytes,
                    "iterations": l.iterations,
                    "samples": r.samples(),
                    "t_min_us": f.map(|f| f.t_min),
                    "t_max_us": f.map(|f| f.t_max),
                    "t_typical_us": f.map(|f| f.t_typical),
                    "t_avg_us": f.map(|f| f.t_avg),
                    "t_stdev_us": f.map(|f| f.t_stdev),
                    "p99_us": f.map(|f| f.p99),
                    "p99_9_us": f.map(|f| f.p99_9),
                    "true_max_us": f.map(|f| f.true_max),
                    "true_stdev_us": f.map(|f| f.true_stdev),
                    "tsc_mhz": l.tsc_mhz,
                    "inline": l.inline,
                    "completion": l.completion.name(),
                    "mtu": l.mtu,
                    "lost": l.lost,
                    "retries": l.retries,
                    "aborted": l.aborted,
                    "interrupts": l.interrupts,
                    "interrupts_per_iter": l.interrupts_per_iter().map(|x| as_written(x, 3)),
                    "anatomy": r.anatomy.map(|a| {
                        let ma = |p: Option<MedAvg>| {
                            p.map(|p| json!({"median_us": p.median, "avg_us": p.average}))
                        };
                        json!({
                            "samples": a.samples,
                            "post": ma(a.post),
                            "send_cqe": ma(a.send_cqe),
                            "rtt": ma(a.rtt),
                            "peer_turnaround": ma(a.peer_figures()),
                            "wire_nic": ma(a.wire_nic),
                            "peer_turnaround_by": a.peer_by(),
                        })
                    }),
                })
            })
            .collect();
        let mut v = json!({ "generator": "ibkern", "results": recs });
        if !self.ports.is_empty() {
            v["port_counters"] = Value::Array(self.ports.iter().map(port_json).collect());
        }
        if let Some(p) = &self.provenance {
            v["provenance"] = p.to_json();
        }
        v
    }

    /// The provenance lines, each after `marker` ("# " in CSV files), or nothing.
    pub fn comment_lines(&self, marker: &str) -> String {
        let mut s = String::new();
        if let Some(p) = &self.provenance {
            for l in p.lines() {
                let _ = writeln!(s, "{marker}{l}");
            }
        }
        s
    }

    /// perftest-style tables, one per test and transport, from the clients' lines (both
    /// sides measure; the client's is the one perftest users quote). A size that counted
    /// losses has `lost N, retries R` after perftest's columns, an aborted one
    /// `(aborted: N lost)` instead of them; the loss totals close each table.
    pub fn tables(&self) -> String {
        let mut s = self.comment_lines("# ");
        let mark = self.provenance.as_ref().and_then(|p| p.table_mark());
        for (test, t) in self.groups() {
            let (all, role) = self.group_rows(test, t);
            for (mode, rows) in Self::rows_by_mode(&all) {
                let _ = write!(
                    s,
                    "{} over {} ({} side)",
                    test.program(),
                    t.name(),
                    role.name()
                );
                if mode != Completion::Poll {
                    let _ = write!(s, ", completion {}", mode.name());
                }
                if let Some(m) = &mark {
                    let _ = write!(s, " {m}");
                }
                let _ = writeln!(s);
                let _ = bench::report::write_header(&mut s);
                for r in rows.iter().map(|r| &r.line) {
                    match r.stats {
                        Some(st) => {
                            let mut row = String::new();
                            let _ = bench::report::write_row(&mut row, u64::from(r.bytes), &st);
                            s.push_str(row.trim_end_matches('\n'));
                            if r.lost > 0 || r.retries > 0 {
                                let _ = write!(s, "  lost {}, retries {}", r.lost, r.retries);
                            }
                            let per_iter = r.interrupts_per_iter().map(|x| as_written(x, 3));
                            if let (true, Some(x)) = (mode != Completion::Poll, per_iter) {
                                let _ = write!(s, "  interrupts/iteration {x:.2}");
                            }
                            s.push('\n');
                        }
                        None => {
                            let why = if r.aborted {
                                "aborted"
                            } else {
                                "too few clean samples"
                            };
                            let _ = writeln!(
                                s,
                                " {:<7} {}          ({why}: {} lost)",
                                r.bytes, r.iterations, r.lost
                            );
                        }
                    }
                }
                let _ = writeln!(s, "{}", bench::report::RESULT_LINE);
                if rows.iter().any(|r| r.anatomy.is_some()) {
                    let _ = writeln!(s, "{}", bench::perftest::ANATOMY_TITLE);
                    let _ = writeln!(s, "{}", bench::perftest::ANATOMY_HEADER);
                    for a in rows.iter().filter_map(|r| r.anatomy.as_ref()) {
                        let _ = bench::perftest::write_anatomy_row(&mut s, &anatomy_row(a));
                    }
                    let _ = writeln!(s, "{}", bench::report::RESULT_LINE);
                }
                let lost: u64 = rows.iter().map(|r| u64::from(r.line.lost)).sum();
                let retries: u64 = rows.iter().map(|r| u64::from(r.line.retries)).sum();
                let aborted = rows.iter().filter(|r| r.line.aborted).count();
                let _ = writeln!(
                    s,
                    " lost {lost}, retries {retries}, aborted sizes {aborted}; TSC {:.3} MHz\n",
                    rows.first().map_or(0.0, |r| r.line.tsc_mhz)
                );
            }
        }
        s.push_str(&self.bw.tables());
        s
    }

    /// Prints [`Results::tables`] on standard output.
    pub fn print_tables(&self) {
        print!("{}", self.tables());
    }

    /// The plot: median latency (t_typical) of the clients against message size, one
    /// series per test and transport, p99 whiskers, inline sizes marked; the title names the
    /// perftest programs shown.
    pub fn to_svg(&self) -> String {
        let groups = self.groups();
        let series: Vec<plot::Series> = groups
            .iter()
            .flat_map(|&(test, t)| {
                let (all, _) = self.group_rows(test, t);
                Self::rows_by_mode(&all)
                    .into_iter()
                    .map(move |(mode, rows)| (test, t, mode, rows))
            })
            .map(|(test, t, mode, rows)| {
                let points = rows
                    .iter()
                    .map(|r| &r.line)
                    .filter_map(|r| {
                        r.stats.map(|f| plot::Point {
                            bytes: u64::from(r.bytes),
                            us: f.t_typical,
                            p99: Some(f.p99),
                            inline: Some(r.inline),
                        })
                    })
                    .filter(|p| p.bytes > 0 && p.us > 0.0 && p.us.is_finite())
                    .collect();
                let name = match mode {
                    Completion::Poll => Self::group_name(test, t),
                    m => format!("{} {}", Self::group_name(test, t), m.name()),
                };
                plot::Series { name, points }
            })
            .collect();
        let mut tests: Vec<Test> = groups.iter().map(|g| g.0).collect();
        tests.dedup();
        let title = if tests.iter().all(|t| *t == Test::SendLat) {
            DEFAULT_TITLE.to_string()
        } else {
            let names: Vec<&str> = tests.iter().map(|t| t.program()).collect();
            if tests.iter().any(|t| t.one_sided()) {
                // perftest's rtt_factor: READ and atomics report the whole round trip.
                format!(
                    "{} latency (median; RTT/2 for send and write, full RTT for read and atomic)",
                    names.join(", ")
                )
            } else {
                format!("{} ping-pong latency (median of RTT/2)", names.join(", "))
            }
        };
        plot::svg(&plot::Plot {
            title: match &self.provenance {
                Some(p) => p.marked(&title),
                None => title,
            },
            subtitle: self
                .provenance
                .as_ref()
                .map_or(Vec::new(), |p| p.subtitle()),
            metadata: self
                .provenance
                .as_ref()
                .and_then(|p| serde_json::to_string(&p.to_json()).ok()),
            series,
        })
    }

    /// The records with an anatomy, grouped by test, transport and completion mode, each
    /// group by size (the clients' lines).
    fn anatomy_groups(&self) -> Vec<(String, Vec<&Record>)> {
        let mut groups: Vec<(String, Vec<&Record>)> = Vec::new();
        for (test, t) in self.groups() {
            let (rows, _) = self.group_rows(test, t);
            for r in rows.into_iter().filter(|r| r.anatomy.is_some()) {
                let name = format!("{} {} {}", test.name(), t.name(), r.line.completion.name());
                match groups.iter_mut().find(|g| g.0 == name) {
                    Some(g) => g.1.push(r),
                    None => groups.push((name, vec![r])),
                }
            }
        }
        groups
    }

    /// `anatomy.svg`: per test, transport and completion mode, each size's median round
    /// trip stacked from the client's post, the wire and NICs, and the peer's turnaround.
    pub fn to_anatomy_svg(&self) -> String {
        let groups = self
            .anatomy_groups()
            .into_iter()
            .map(|(name, rows)| plot::StackGroup {
                name,
                stacks: rows
                    .iter()
                    .filter_map(|r| {
                        let a = r.anatomy?;
                        let rtt = a.rtt?.median;
                        let post = a.post.map_or(0.0, |p| p.median).min(rtt);
                        let peer = a.peer_figures()?.median.min(rtt - post);
                        Some(plot::Stack {
                            bytes: u64::from(r.line.bytes),
                            post,
                            wire_nic: rtt - post - peer,
                            peer,
                        })
                    })
                    .collect(),
            })
            .collect();
        let title = "Where the time goes: the round trip in parts (client side, medians)";
        plot::stacked_svg(&plot::StackedPlot {
            title: match &self.provenance {
                Some(p) => p.marked(title),
                None => title.to_string(),
            },
            subtitle: self
                .provenance
                .as_ref()
                .map_or(Vec::new(), |p| p.subtitle()),
            metadata: self
                .provenance
                .as_ref()
                .and_then(|p| serde_json::to_string(&p.to_json()).ok()),
            groups,
        })
    }

    /// `ports.csv`: one row per `ibkern-port` line, the run's port traffic (after - before;
    /// empty cells if a counter went backwards).
    pub fn ports_csv(&self) -> String {
        let mut s = self.comment_lines("# ");
        s.push_str("node,role,test,transport,command,port,extended,port_xmit_data_words,port_rcv_data_words,port_xmit_pkts,port_rcv_pkts\n");
        for p in &self.ports {
            let l = &p.line;
            let _ = write!(
                s,
                "{},{},{},{},{},{},{}",
                p.node,
                l.role.name(),
                l.test.name(),
                l.transport.name(),
                l.command,
                l.port,
                l.extended
            );
            match l.traffic().map(|t| t.values()) {
                Some(t) => {
                    let _ = writeln!(s, ",{},{},{},{}", t[0], t[1], t[2], t[3]);
                }
                None => s.push_str(",,,,\n"),
            }
        }
        s
    }

    /// Writes `latency.csv`, `latency.json` and `latency.svg` into `dir` (created if
    /// needed), `anatomy.svg` when any record has an anatomy and `ports.csv` when the
    /// consoles had port lines.
    pub fn write_files(&self, dir: &Path) -> anyhow::Result<Written> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let w = Written {
            csv: dir.join("latency.csv"),
            json: dir.join("latency.json"),
            svg: dir.join("latency.svg"),
            anatomy_svg: self
                .records
                .iter()
                .any(|r| r.anatomy.is_some())
                .then(|| dir.join("anatomy.svg")),
            bandwidth: self.bw.write_files(
                dir,
                self.provenance.as_ref(),
                &self.comment_lines("# "),
            )?,
        };
        if let Some(a) = &w.anatomy_svg {
            std::fs::write(a, self.to_anatomy_svg())
                .with_context(|| format!("writing {}", a.display()))?;
        }
        let json = serde_json::to_string_pretty(&self.to_json())?;
        for (path, text) in [
            (&w.csv, self.to_csv()),
            (&w.json, json + "\n"),
            (&w.svg, self.to_svg()),
        ] {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        }
        if !self.ports.is_empty() {
            let path = dir.join("ports.csv");
            std::fs::write(&path, self.ports_csv())
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(w)
    }
}

/// An anatomy line as the bench's table row shows it.
fn anatomy_row(a: &AnatomyLine) -> bench::perftest::AnatomyRow {
    bench::perftest::AnatomyRow {
        index: 0,
        bytes: a.bytes,
        samples: a.samples as usize,
        post: a.post,
        send_cqe: a.send_cqe,
        rtt: a.rtt,
        peer: a.peer,
    }
}

/// One port line in `latency.json`: the line's keys, `node`, and the traffic over the run.
fn port_json(p: &PortRun) -> Value {
    let four = |c: PortCounts| {
        let mut m = Map::new();
        for (name, x) in PortCounts::NAMES.iter().zip(c.values()) {
            m.insert((*name).to_string(), json!(x));
        }
        Value::Object(m)
    };
    let l = &p.line;
    json!({
        "node": p.node,
        "role": l.role.name(),
        "test": l.test.name(),
        "transport": l.transport.name(),
        "command": l.command,
        "port": l.port,
        "extended": l.extended,
        "before": four(l.before),
        "after": four(l.after),
        "traffic": l.traffic().map(four),
    })
}

/// The plot's title when it shows send_lat only.
const DEFAULT_TITLE: &str = "ib_send_lat ping-pong latency (median of RTT/2)";

/// Result lines as the kernel writes them, for other modules' tests.
#[cfg(test)]
pub(crate) mod test_lines {
    use bench::line::{LatencyLine, Record as _};
    use ibconfig::{Completion, Role, Test, Transport};

    /// A client's send_lat UD line for `bytes` and `iterations` (no statistics).
    pub fn latency(bytes: u32, iterations: u32) -> String {
        let mut s = String::new();
        LatencyLine {
            test: Test::SendLat,
            transport: Transport::Ud,
            role: Role::Client,
            bytes,
            iterations,
            stats: None,
            tsc_mhz: 1000.0,
            inline: true,
            completion: Completion::Poll,
            mtu: 2048,
            lost: 0,
            retries: 0,
            aborted: false,
            interrupts: None,
        }
        .emit(&mut s)
        .unwrap();
        s.trim_end().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bench::line::Record as _;
    use bench::stats::LatencyStats;

    fn stats(typ: f64) -> LatencyStats {
        LatencyStats {
            iterations: 1000,
            samples: 999,
            t_min: typ - 0.02,
            t_max: typ + 4.0,
            t_typical: typ,
            t_avg: typ + 0.01,
            t_stdev: 0.0,
            p99: typ + 0.05,
            p99_9: typ + 4.0,
            true_max: typ + 9.0,
            true_stdev: 0.25,
        }
    }

    /// Console text as a node prints it: banner noise, perftest rows, result lines written
    /// by the benchmark's own writer.
    fn console(t: Transport, role: Role, sizes: &[u32], abort: Option<u32>) -> String {
        console_of(Test::SendLat, t, role, sizes, abort)
    }

    fn console_of(
        test: Test,
        t: Transport,
        role: Role,
        sizes: &[u32],
        abort: Option<u32>,
    ) -> String {
        let mut s = String::from("ibkern: mode=pingpong\n local address: LID 0x02\n");
        for &b in sizes {
            let st = stats(1.0 + f64::from(b) / 1000.0);
            bench::report::write_row(&mut s, u64::from(b), &st).unwrap();
            let aborted = abort == Some(b);
            LatencyLine {
                test,
                transport: t,
                role,
                bytes: b,
                iterations: 1000,
                stats: (!aborted).then_some(st),
                tsc_mhz: 2394.5,
                inline: b <= 188,
                completion: Completion::Poll,
                mtu: 2048,
                lost: if aborted { 101 } else { 1 },
                retries: if aborted { 100 } else { 1 },
                aborted,
                interrupts: Some(0),
            }
            .emit(&mut s)
            .unwrap();
        }
        s
    }

    fn sweep(from: u32, to: u32) -> Vec<u32> {
        (from.trailing_zeros()..=to.trailing_zeros())
            .map(|e| 1 << e)
            .collect()
    }

    fn sample() -> Results {
        let ud = sweep(2, 2048);
        let uc = sweep(2, 8 << 20);
        let a = console(Transport::Ud, Role::Client, &ud, None)
            + &console(Transport::Uc, Role::Client, &uc, Some(4096));
        let b = console(Transport::Ud, Role::Server, &ud, None)
            + &console(Transport::Uc, Role::Server, &uc, None);
        collect(&[&a, &b])
    }

    #[test]
    fn parses_a_real_line() {
        let line = r#"[node0] ibkern-result {"test":"send_lat","transport":"UD","role":"client","bytes":2,"iterations":1000,"samples":999,"t_min_us":0.770,"t_max_us":5.350,"t_typical_us":0.790,"t_avg_us":0.800,"t_stdev_us":0.050,"p99_us":0.840,"p99_9_us":5.350,"true_max_us":9.000,"true_stdev_us":0.300,"tsc_mhz":2400.000,"inline":true,"completion":"poll","mtu":2048,"lost":0,"retries":0,"aborted":false}"#;
        let r = collect(&[line]);
        assert!(r.bad_lines.is_empty(), "{:?}", r.bad_lines);
        assert_eq!(r.records.len(), 1);
        let rec = &r.records[0].line;
        assert_eq!(
            (rec.transport, rec.role, rec.bytes),
            (Transport::Ud, Role::Client, 2)
        );
        assert_eq!(r.records[0].samples(), 999);
        let f = rec.stats.unwrap();
        assert_eq!((f.t_typical, f.p99_9, f.true_max), (0.79, 5.35, 9.0));
        assert!(rec.inline && !rec.aborted);
    }

    #[test]
    fn port_lines_give_each_runs_traffic_in_csv_and_json() {
        let mut line = String::new();
        let c = |x: u64| verbs::PortTraffic {
            xmit_data_words: 1000 * x,
            rcv_data_words: 900 * x,
            xmit_packets: 20 * x,
            rcv_packets: 19 * x,
            extended: true,
        };
        bench::line::PortLine {
            test: Test::WriteLat,
            transport: Transport::Rc,
            role: Role::Client,
            command: "ib_write_lat -c RC -s 64 -n 20",
            port: 1,
            extended: true,
            before: (&c(1)).into(),
            after: (&c(4)).into(),
        }
        .emit(&mut line)
        .unwrap();
        let console = format!("noise\n{line}ibkern-port {{\"test\":\"send_lat\"}}\n");
        let r = collect(&["", &console]);
        assert_eq!(r.ports.len(), 1);
        assert_eq!(r.bad_lines.len(), 1, "{:?}", r.bad_lines);
        let p = &r.ports[0];
        assert_eq!((p.node, p.line.port, p.line.extended), (1, 1, true));
        assert_eq!(p.line.command, "ib_write_lat -c RC -s 64 -n 20");
        assert_eq!(
            p.line.traffic().map(|t| t.values()),
            Some([3000, 2700, 60, 57])
        );
        let csv = r.ports_csv();
        assert_eq!(
            csv.lines().nth(1),
            Some("1,client,write_lat,RC,ib_write_lat -c RC -s 64 -n 20,1,true,3000,2700,60,57")
        );
        let j = r.to_json();
        assert_eq!(j["port_counters"][0]["traffic"]["xmit_pkts"], 60);
        assert_eq!(j["port_counters"][0]["before"]["rcv_data_words"], 900);
        // A counter that went backwards (a reset in between) has no traffic.
        let mut back = p.clone();
        back.line.after.rcv_pkts = 0;
        assert_eq!(back.line.traffic(), None);
    }

    #[test]
    fn bad_lines_are_reported_not_dropped() {
        let text =
            "ibkern-result {\"test\":\"send_lat\"\nok\nibkern-result {\"transport\":\"RC\"}\n";
        let r = collect(&["", text]);
        assert!(r.records.is_empty());
        assert_eq!(r.bad_lines.len(), 2);
        assert_eq!((r.bad_lines[0].node, r.bad_lines[0].line), (1, 1));
        assert_eq!(r.bad_lines[1].line, 3);
    }

    #[test]
    fn collects_both_nodes_and_both_transports() {
        let r = sample();
        assert!(r.bad_lines.is_empty(), "{:?}", r.bad_lines);
        assert_eq!(r.records.len(), 2 * (11 + 23));
        assert_eq!(r.transports(), vec![Transport::Ud, Transport::Uc]);
        assert_eq!(r.series(Transport::Ud, Role::Client).len(), 11);
        assert_eq!(r.series(Transport::Uc, Role::Server).len(), 23);
        assert!(r
            .series(Transport::Uc, Role::Server)
            .iter()
            .all(|x| x.node == 1));
        assert_eq!(r.aborted(), 1);
        // Client losses: 1 per size, 101 for the aborted one.
        assert_eq!(r.total_lost(), 11 + 22 + 101);
        let aborted = r.records.iter().find(|x| x.line.aborted).unwrap();
        assert_eq!(
            (aborted.line.bytes, aborted.line.stats, aborted.samples()),
            (4096, None, 0)
        );
    }

    #[test]
    fn tables_are_perftests_rows() {
        let r = sample();
        let t = r.tables();
        assert!(t.contains("ib_send_lat over UD (client side)"));
        assert!(t.contains("ib_send_lat over UC (client side)"));
        assert_eq!(t.matches(bench::report::RESULT_HEADER).count(), 2);
        // The first UD row is exactly what bench::report renders for the same figures.
        let mut row = String::new();
        bench::report::write_row(&mut row, 2, &stats(1.002)).unwrap();
        // Every sample size counted one loss: it follows perftest's columns.
        let row = format!("{}  lost 1, retries 1\n", row.trim_end_matches('\n'));
        assert!(t.contains(&row), "{t}");
        assert!(t.contains(" 4096    1000          (aborted: 101 lost)"));
    }

    #[test]
    fn each_completion_mode_gets_its_table_and_interrupt_columns() {
        // `modes=poll,event,isr`: the same test, transport and sizes once per mode.
        let mut text = String::new();
        for (mode, irq) in [
            (Completion::Poll, 0u64),
            (Completion::Event, 1500),
            (Completion::Isr, 1000),
        ] {
            for b in [2u32, 64] {
                LatencyLine {
                    test: Test::SendLat,
                    transport: Transport::Ud,
                    role: Role::Client,
                    bytes: b,
                    iterations: 1000,
                    stats: Some(stats(1.0)),
                    tsc_mhz: 2394.5,
                    inline: true,
                    completion: mode,
                    mtu: 2048,
                    lost: 0,
                    retries: 0,
                    aborted: false,
                    interrupts: Some(irq),
                }
                .emit(&mut text)
                .unwrap();
            }
        }
        let r = collect(&[&text]);
        assert!(r.bad_lines.is_empty(), "{:?}", r.bad_lines);
        assert_eq!(r.records.len(), 6);
        let isr = r
            .records
            .iter()
            .find(|x| x.line.completion == Completion::Isr)
            .unwrap();
        assert_eq!(
            (isr.line.interrupts, isr.line.interrupts_per_iter()),
            (Some(1000), Some(1.0))
        );
        let t = r.tables();
        assert_eq!(t.matches(bench::report::RESULT_HEADER).count(), 3, "{t}");
        let poll = t.find("ib_send_lat over UD (client side)\n").unwrap();
        let event = t
            .find("ib_send_lat over UD (client side), completion event")
            .unwrap();
        let isr = t
            .find("ib_send_lat over UD (client side), completion isr")
            .unwrap();
        assert!(poll < event && event < isr, "{t}");
        assert!(t.contains("  interrupts/iteration 1.50\n"), "{t}");
        assert!(t.contains("  interrupts/iteration 1.00\n"), "{t}");
        // The CSV's interrupt columns (before the anatomy's, empty here); a line without them
        // (older kernels) reads as unknown.
        let csv = r.to_csv();
        assert!(
            csv.lines()
                .any(|l| l.contains(",isr,2048,0,0,false,1000,1.000,")),
            "{csv}"
        );
        let old = text
            .lines()
            .next()
            .unwrap()
            .replace(",\"interrupts\":0,\"interrupts_per_iter\":0.000", "");
        let r = collect(&[&old]);
        let rec = &r.records[0].line;
        assert_eq!((rec.interrupts, rec.interrupts_per_iter()), (None, None));
        assert!(r
            .to_csv()
            .lines()
            .last()
            .unwrap()
            .contains(",poll,2048,0,0,false,,,"));
    }

    #[test]
    fn files_are_written_and_well_formed() {
        let r = sample();
        let dir = std::env::temp_dir().join(format!("ibkern-results-{}", std::process::id()));
        let w = r.write_files(&dir).unwrap();

        // JSON parses back to the same records.
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&w.json).unwrap()).unwrap();
        let recs = v["results"].as_array().unwrap();
        assert_eq!(recs.len(), r.records.len());
        for (j, rec) in recs.iter().zip(&r.records) {
            let back = <LatencyLine as bench::line::Parse>::parse(&j.to_string()).unwrap();
            assert_eq!(&back, &rec.line);
            assert_eq!(j["node"].as_u64().unwrap() as usize, rec.node);
        }

        // CSV: the header, one row per record, every row as wide as the header.
        let csv = std::fs::read_to_string(&w.csv).unwrap();
        let mut lines = csv.lines();
        assert_eq!(lines.next().unwrap(), CSV_COLUMNS.join(","));
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert_eq!(rows.len(), r.records.len());
        assert!(rows.iter().all(|c| c.len() == CSV_COLUMNS.len()));
        let col = |n: &str| CSV_COLUMNS.iter().position(|c| *c == n).unwrap();
        let ab = rows.iter().find(|c| c[col("aborted")] == "true").unwrap();
        assert_eq!(ab[col("t_typical_us")], "");
        assert_eq!(ab[col("bytes")], "4096");
        assert_eq!(rows[0][col("t_typical_us")], "1.002");

        // SVG: valid XML, one series per transport with one point per size that has figures,
        // axis titles with units, a legend.
        let text = std::fs::read_to_string(&w.svg).unwrap();
        let doc = roxmltree::Document::parse(&text).expect("the SVG is well-formed XML");
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "svg");
        let series: Vec<_> = root
            .descendants()
            .filter(|n| n.attribute("class") == Some("series"))
            .collect();
        let names: Vec<_> = series
            .iter()
            .map(|n| n.attribute("data-transport").unwrap())
            .collect();
        assert_eq!(names, vec!["UD", "UC"]);
        let points = |n: &roxmltree::Node| {
            n.descendants()
                .filter(|c| c.tag_name().name() == "circle")
                .count()
        };
        assert_eq!(points(&series[0]), 11);
        assert_eq!(points(&series[1]), 22, "the aborted size has no point");
        let poly = series[1]
            .descendants()
            .find(|c| c.tag_name().name() == "polyline")
            .unwrap();
        assert_eq!(
            poly.attribute("points").unwrap().split_whitespace().count(),
            22
        );
        let texts: Vec<&str> = root.descendants().filter_map(|n| n.text()).collect();
        assert!(texts.iter().any(|t| t.contains("Message size [bytes]")));
        assert!(texts.iter().any(|t| t.contains("[µs]")));
        assert!(texts.contains(&"8M") && texts.contains(&"2K"));
        assert!(root
            .descendants()
            .any(|n| n.attribute("class") == Some("legend")));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn write_lat_lines_are_labelled_in_tables_csv_and_plot() {
        let rc = console_of(Test::WriteLat, Transport::Rc, Role::Client, &[2, 64], None);
        let uc = console_of(Test::WriteLat, Transport::Uc, Role::Client, &[64], None);
        let r = collect(&[&(rc + &uc)]);
        assert!(r.bad_lines.is_empty(), "{:?}", r.bad_lines);
        assert_eq!(
            r.groups(),
            vec![
                (Test::WriteLat, Transport::Uc),
                (Test::WriteLat, Transport::Rc)
            ]
        );
        assert_eq!(r.transports(), vec![Transport::Uc, Transport::Rc]);
        assert!(
            r.series(Transport::Rc, Role::Client).is_empty(),
            "series() is send_lat's"
        );
        assert_eq!(
            r.test_series(Test::WriteLat, Transport::Rc, Role::Client)
                .len(),
            2
        );
        let t = r.tables();
        assert!(t.contains("ib_write_lat over RC (client side)"), "{t}");
        assert!(t.contains("ib_write_lat over UC (client side)"), "{t}");
        assert!(!t.contains("ib_send_lat"), "{t}");
        let csv = r.to_csv();
        let col = CSV_COLUMNS.iter().position(|c| *c == "test").unwrap();
        let rows: Vec<Vec<&str>> = csv
            .lines()
            .skip(1)
            .map(|l| l.split(',').collect())
            .collect();
        assert_eq!(rows.len(), 3);
        assert!(rows.iter().all(|c| c[col] == "write_lat"), "{csv}");
        let svg = r.to_svg();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let names: Vec<_> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("series"))
            .map(|n| n.attribute("data-transport").unwrap())
            .collect();
        assert_eq!(names, vec!["write_lat UC", "write_lat RC"]);
        assert!(
            doc.descendants()
                .filter_map(|n| n.text())
                .any(|x| x.starts_with("ib_write_lat ping-pong latency")),
            "{svg}"
        );
        // A line naming a test this runner does not know is reported, not guessed at.
        let odd = rc_line_with_test("recv_bw") + &rc_line_with_test("send_rtt");
        let r = collect(&[&odd]);
        assert_eq!((r.records.len(), r.bw.records.len()), (0, 0));
        assert_eq!(r.bad_lines.len(), 2);
        assert!(r.bad_lines[0].reason.contains("recv_bw"));
        assert!(r.bad_lines[1].reason.contains("send_rtt"));
        // A bandwidth test's line in the latency shape lacks the bandwidth figures.
        let r = collect(&[&rc_line_with_test("read_bw")]);
        assert!(
            r.bad_lines[0].reason.contains("bw_peak_mbs"),
            "{:?}",
            r.bad_lines
        );
        // The one-sided tests are grouped under their own names.
        let one_sided = rc_line_with_test("read_lat") + &rc_line_with_test("atomic_lat");
        let r = collect(&[&one_sided]);
        assert!(r.bad_lines.is_empty());
        assert_eq!(
            r.groups(),
            vec![
                (Test::ReadLat, Transport::Rc),
                (Test::AtomicLat, Transport::Rc)
            ]
        );
    }

    fn rc_line_with_test(test: &str) -> String {
        console_of(Test::WriteLat, Transport::Rc, Role::Client, &[2], None)
            .replace("\"write_lat\"", &format!("\"{test}\""))
    }

    #[test]
    fn every_file_says_where_its_figures_come_from() {
        use crate::provenance::{NodeFacts, Platform, Provenance};
        let mut r = sample();
        r.provenance = Some(Provenance {
            platform: Platform::Emulated {
                accel: "tcg".into(),
                qemu: Some("QEMU emulator version 7.2.0".into()),
            },
            runner: crate::provenance::runner_version(),
            date: "2026-11-25T08:45:12Z".into(),
            host_cpu: Some("Example CPU".into()),
            command_line: "cargo qemu pingpong -c UD,UC -a --set note=<&>".into(),
            nodes: vec![NodeFacts::from_console(
                "UD server",
                "boot: ibkern kernel 0.1.0 commit abcdef123456 starting; mode Pingpong\n\
                 tsc: 2394.500 MHz from Hpet\n",
            )],
        });
        // Tables: the provenance first, each table marked as emulated.
        let t = r.tables();
        assert!(t.starts_with("# source: emulated (QEMU tcg"), "{t}");
        assert!(t.contains("# NOTE: emulated: times measure QEMU"), "{t}");
        assert!(
            t.contains("ib_send_lat over UD (client side) [EMULATED: times measure QEMU and the model, not the network]"),
            "{t}"
        );
        // CSV: comment lines, then the header.
        let csv = r.to_csv();
        let header = csv.lines().find(|l| !l.starts_with('#')).unwrap();
        assert_eq!(header, CSV_COLUMNS.join(","));
        assert!(
            csv.contains("# node UD server: ibkern 0.1.0 commit abcdef123456"),
            "{csv}"
        );
        assert!(
            csv.contains("command: cargo qemu pingpong -c UD,UC -a"),
            "{csv}"
        );
        // JSON: a provenance object.
        let j = r.to_json();
        assert_eq!(j["provenance"]["platform"], "emulated");
        assert_eq!(j["provenance"]["nodes"][0]["ibkern_commit"], "abcdef123456");
        assert_eq!(j["provenance"]["date"], "2026-11-25T08:45:12Z");
        // SVG: subtitle, metadata, inline points filled and the others hollow, the band.
        let svg = r.to_svg();
        let doc = roxmltree::Document::parse(&svg).expect("well-formed with <&> escaped");
        let subs: Vec<&str> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("subtitle"))
            .filter_map(|n| n.text())
            .collect();
        assert!(subs[0].starts_with("emulated: QEMU 7.2.0 tcg"), "{subs:?}");
        assert!(subs[1].contains("not the network"), "{subs:?}");
        assert!(
            subs[2].contains("abcdef123456") && subs[2].contains("2394.500 MHz"),
            "{subs:?}"
        );
        let meta = doc
            .descendants()
            .find(|n| n.tag_name().name() == "metadata")
            .and_then(|n| n.text())
            .unwrap();
        let meta: Value = serde_json::from_str(meta).unwrap();
        assert_eq!(meta["platform"], "emulated");
        let ud = doc
            .descendants()
            .find(|n| n.attribute("data-transport") == Some("UD"))
            .unwrap();
        let class_of = |c: &str| {
            ud.descendants()
                .filter(|n| n.attribute("class") == Some(c))
                .count()
        };
        // The sample's sizes up to 188 B are inline: 2..128 (7 sizes), 256..2048 not (4).
        assert_eq!((class_of("inline"), class_of("not-inline")), (7, 4));
        let band = doc
            .descendants()
            .find(|n| n.attribute("class") == Some("inline-band"))
            .unwrap();
        assert!(band.descendants().filter_map(|n| n.text()).any(|t| t
            == "shaded: the sizes sent inline here, 2 B to 128 B (the inline limit -I is at least 128 B)"));
        // The mark in the title, where a cropped figure keeps it: the document's and the
        // drawn one, in every plot.
        let title = |svg: &str| -> (String, String) {
            let doc = roxmltree::Document::parse(svg).unwrap();
            let doc_title = doc
                .descendants()
                .find(|n| n.tag_name().name() == "title")
                .and_then(|n| n.text())
                .unwrap()
                .to_string();
            let drawn = doc
                .descendants()
                .filter(|n| n.tag_name().name() == "text")
                .filter_map(|n| n.text())
                .find(|t| {
                    t.contains("EMULATED") || t.contains(" latency") || t.contains("bandwidth")
                })
                .unwrap_or_default()
                .trim()
                .to_string();
            (doc_title, drawn)
        };
        let (t, drawn) = title(&svg);
        assert!(
            t.starts_with("EMULATED: ib_send_lat ping-pong latency"),
            "{t}"
        );
        assert_eq!(drawn, t);
        let mut bw = r.clone();
        bw.bw.records.push(crate::bw_results::BwRecord {
            node: 1,
            line: bench::line::BandwidthLine {
                test: Test::SendBw,
                transport: Transport::Ud,
                role: Role::Client,
                bytes: 64,
                iterations: 10,
                figures: Some(bench::line::BandwidthFigures {
                    bw_peak_mbs: 1.0,
                    bw_avg_mbs: 1.0,
                    msg_rate_mpps: 0.5,
                }),
                tsc_mhz: 1000.0,
                inline: false,
                mtu: 2048,
                tx_depth: 10,
                post_list: 1,
                cq_mod: 10,
                received: Some(10),
                bytes_received: Some(640),
                lost: 0,
            },
        });
        let (t, drawn) = title(&bw.bw.to_svg(bw.provenance.as_ref()));
        assert!(t.starts_with("EMULATED: perftest bandwidth"), "{t}");
        assert_eq!(drawn, t);
        let (t, _) = title(&r.to_anatomy_svg());
        assert!(t.starts_with("EMULATED: Where the time goes"), "{t}");
        // Without provenance nothing is added.
        let plain = sample();
        assert!(plain.to_csv().starts_with("node,"));
        assert!(plain.to_json().get("provenance").is_none());
    }

    #[test]
    fn an_empty_run_still_writes_valid_files() {
        let r = collect(&["no results here"]);
        let dir = std::env::temp_dir().join(format!("ibkern-empty-{}", std::process::id()));
        let w = r.write_files(&dir).unwrap();
        let text = std::fs::read_to_string(&w.svg).unwrap();
        roxmltree::Document::parse(&text).unwrap();
        assert_eq!(std::fs::read_to_string(&w.csv).unwrap().lines().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A client's console of a run with `anatomy=on`: its result lines, then the anatomy
    /// lines the benchmark's own writer prints at the end of the run.
    fn anatomy_console(test: Test, sizes: &[u32], peer: bench::perftest::PeerPart) -> String {
        use bench::line::AnatomyLine;
        use bench::perftest::{AnatomyContext, AnatomyRow, MedAvg};
        let mut s = console_of(test, Transport::Rc, Role::Client, sizes, None);
        let c = AnatomyContext {
            test,
            transport: Transport::Rc,
            completion: Completion::Poll,
            tsc_mhz: 2394.5,
        };
        for (i, &b) in sizes.iter().enumerate() {
            let rtt = 2.0 * (1.0 + f64::from(b) / 1000.0);
            let row = AnatomyRow {
                index: i as u32,
                bytes: b,
                samples: 1000,
                post: Some(MedAvg {
                    median: 0.1,
                    average: 0.125,
                }),
                send_cqe: Some(MedAvg {
                    median: 0.9,
                    average: 1.0,
                }),
                rtt: Some(MedAvg {
                    median: rtt,
                    average: rtt + 0.02,
                }),
                peer,
            };
            AnatomyLine::of(&c, &row).emit(&mut s).unwrap();
        }
        s
    }

    #[test]
    fn anatomy_lines_join_their_records_in_csv_json_tables_and_plot() {
        use bench::perftest::{MedAvg, PeerPart};
        let turn = MedAvg {
            median: 0.4,
            average: 0.5,
        };
        let sizes = [2u32, 64, 4096];
        // Two runs of the same test in one console (a plan with repeat=2): each anatomy
        // line joins its own run's record.
        let a = anatomy_console(Test::SendLat, &sizes, PeerPart::Software(turn))
            + &anatomy_console(Test::SendLat, &sizes[..1], PeerPart::Missing)
            + &anatomy_console(Test::ReadLat, &[64], PeerPart::Hca);
        let b = console(Transport::Rc, Role::Server, &sizes, None);
        let r = collect(&[&a, &b]);
        assert!(r.bad_lines.is_empty(), "{:?}", r.bad_lines);
        assert_eq!(r.records.len(), 3 + 1 + 1 + 3);
        let with: Vec<&Record> = r.records.iter().filter(|x| x.anatomy.is_some()).collect();
        assert_eq!(with.len(), 5, "every client record of the anatomy runs");
        assert!(r
            .records
            .iter()
            .filter(|x| x.line.role == Role::Server)
            .all(|x| x.anatomy.is_none()));
        let first = r.records[2].anatomy.unwrap();
        assert_eq!(r.records[2].line.bytes, 4096);
        assert_eq!(first.peer_figures(), Some(turn));
        assert_eq!(first.peer_by(), "software");
        let rtt = first.rtt.unwrap().median;
        assert!((rtt - 2.0 * 5.096).abs() < 1e-4);
        // (RTT - peer) / 2, as the client computed it.
        assert!((first.wire_nic.unwrap().median - (rtt - 0.4) / 2.0).abs() < 1e-4);
        let again = r.records[3].anatomy.unwrap();
        assert_eq!(
            (again.peer_by(), again.peer_figures(), again.wire_nic),
            ("missing", None, None)
        );
        let read = r.records[4].anatomy.unwrap();
        assert_eq!(
            (r.records[4].line.test, read.peer_by()),
            (Test::ReadLat, "hca")
        );

        // CSV: the anatomy columns filled for those records, empty for the others.
        let csv = r.to_csv();
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(header, CSV_COLUMNS);
        let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert!(rows.iter().all(|row| row.len() == CSV_COLUMNS.len()));
        assert_eq!(rows[2][col("peer_turnaround_med_us")], "0.4000");
        assert_eq!(rows[2][col("post_avg_us")], "0.1250");
        assert_eq!(rows[2][col("peer_turnaround_by")], "software");
        assert_eq!(rows[3][col("wire_nic_med_us")], "");
        assert_eq!(rows[4][col("peer_turnaround_by")], "hca");
        assert_eq!(
            rows[5][col("rtt_med_us")],
            "",
            "a server record has no anatomy"
        );

        // JSON: an "anatomy" object, or null.
        let j = r.to_json();
        let recs = j["results"].as_array().unwrap();
        assert_eq!(recs[2]["anatomy"]["peer_turnaround"]["median_us"], 0.4);
        assert_eq!(recs[2]["anatomy"]["send_cqe"]["avg_us"], 1.0);
        assert_eq!(recs[3]["anatomy"]["wire_nic"], Value::Null);
        assert_eq!(recs[5]["anatomy"], Value::Null);

        // Tables: the anatomy after the group's perftest table.
        let t = r.tables();
        assert!(t.contains(bench::perftest::ANATOMY_TITLE), "{t}");
        assert!(t.contains("(HCA)"));

        // Files: anatomy.svg beside latency.svg, its bars adding up to the RTT.
        let dir = std::env::temp_dir().join(format!("ibkern-anatomy-{}", std::process::id()));
        let w = r.write_files(&dir).unwrap();
        let path = w.anatomy_svg.clone().expect("anatomy.svg written");
        assert_eq!(path, dir.join("anatomy.svg"));
        assert!(w.plots().ends_with("anatomy.svg"));
        let svg = std::fs::read_to_string(&path).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let stacks: Vec<_> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("stack"))
            .collect();
        // send_lat: 3 sizes from the first run, 2 B again from the second, whose peer
        // turnaround is missing (no bar); read_lat: one size.
        assert_eq!(stacks.len(), 3 + 1, "{svg}");
        let us: f64 = stacks[2]
            .children()
            .filter_map(|n| n.attribute("data-us"))
            .map(|v| v.parse::<f64>().unwrap())
            .sum();
        assert!((us - rtt).abs() < 1e-3, "{us} {rtt}");
        std::fs::remove_dir_all(&dir).unwrap();

        // Without any anatomy no anatomy.svg.
        let dir = std::env::temp_dir().join(format!("ibkern-no-anatomy-{}", std::process::id()));
        let w = collect(&[&b]).write_files(&dir).unwrap();
        assert!(w.anatomy_svg.is_none() && !dir.join("anatomy.svg").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_or_orphan_anatomy_lines_are_reported() {
        let orphan = anatomy_console(Test::SendLat, &[2], bench::perftest::PeerPart::Missing);
        // The anatomy line alone, without its result line.
        let only: String = orphan
            .lines()
            .filter(|l| l.starts_with(bench::line::ANATOMY_PREFIX))
            .map(|l| format!("{l}\n"))
            .collect();
        let r = collect(&[&only]);
        assert_eq!(r.bad_lines.len(), 1);
        assert!(r.bad_lines[0].reason.contains("without its result line"));
        let r = collect(&[
            "ibkern-anatomy {\"test\":\"send_lat\"}\nibkern-anatomy {\"test\":\"send_lat\",\"transport\":\"UD\",\"role\":\"client\",\"completion\":\"poll\",\"bytes\":2,\"samples\":1,\"post_med_us\":1,\"post_avg_us\":null,\"send_cqe_med_us\":null,\"send_cqe_avg_us\":null,\"rtt_med_us\":null,\"rtt_avg_us\":null,\"peer_med_us\":null,\"peer_avg_us\":null,\"wire_nic_med_us\":null,\"wire_nic_avg_us\":null,\"peer\":\"software\"}\n",
        ]);
        assert_eq!(r.bad_lines.len(), 2);
        assert!(
            r.bad_lines[1].reason.contains("not both"),
            "{:?}",
            r.bad_lines
        );
    }

    /// A line from a kernel before the interrupt counts (no `interrupts` keys).
    const LINE: &str = r#"ibkern-result {"test":"send_lat","transport":"UD","role":"client","bytes":2,"iterations":20,"samples":19,"t_min_us":830.827,"t_max_us":11545.592,"t_typical_us":1604.364,"t_avg_us":3017.171,"t_stdev_us":2591.895,"p99_us":11545.592,"p99_9_us":11545.592,"true_max_us":12012.909,"true_stdev_us":2592.397,"tsc_mhz":2596.145,"inline":true,"completion":"poll","mtu":2048,"lost":0,"retries":0,"aborted":false}"#;

    #[test]
    fn saved_bandwidth_lines_are_bandwidth_records() {
        let bw = r#"ibkern-result {"test":"send_bw","transport":"UD","role":"client","bytes":1024,"iterations":200,"bw_peak_mbs":1234.500,"bw_avg_mbs":1000.250,"msg_rate_mpps":1.024000,"tsc_mhz":2000.000,"inline":false,"mtu":2048,"tx_depth":64,"post_list":1,"cq_mod":16,"received":197,"bytes_received":201728,"lost":3,"aborted":false}"#;
        // Pasted twice (a scrolled-back console), with a latency line beside it.
        let text = format!("{bw}\r\n[node0] {bw}\r\n{LINE}\r\n");
        let (r, report) = collect_saved(&[&text]);
        assert_eq!(report.found, vec![3]);
        assert_eq!((r.records.len(), r.bw.records.len()), (1, 1));
        assert!(r.bad_lines.is_empty(), "{:?}", r.bad_lines);
        assert_eq!(r.bw.records[0].line.lost, 3);
    }

    #[test]
    fn repeats_are_dropped_and_conflicts_reported() {
        let other = LINE.replace("\"t_min_us\":830.827", "\"t_min_us\":831.000");
        let text = format!("{LINE}\n{LINE}\nredraw\n{LINE}\n{other}\n");
        let (r, rep) = collect_saved(&[&text]);
        assert_eq!(r.records.len(), 1);
        assert_eq!(r.records[0].line.stats.unwrap().t_min, 831.0);
        assert_eq!(rep.repeats, [2]);
        assert_eq!(rep.found, [4]);
        assert_eq!(rep.conflicts.len(), 1);
        assert_eq!(rep.conflicts[0].1, 5);
    }

    #[test]
    fn saved_anatomy_lines_join_their_records_wrapped_or_repeated() {
        const ANATOMY: &str = r#"ibkern-anatomy {"test":"send_lat","transport":"UD","role":"client","completion":"poll","bytes":2,"samples":19,"post_med_us":211.2432,"post_avg_us":221.2408,"send_cqe_med_us":211.4235,"send_cqe_avg_us":221.7100,"rtt_med_us":417.8400,"rtt_avg_us":432.2600,"peer_med_us":214.2400,"peer_avg_us":223.3100,"wire_nic_med_us":101.8000,"wire_nic_avg_us":104.4750,"peer":"software","tsc_mhz":2596.1450}"#;
        // Wrapped at 80 columns behind a log prefix, then saved again whole.
        let prefix = "[node1] ";
        let wrapped: String = ANATOMY
            .as_bytes()
            .chunks(80)
            .map(|c| format!("{prefix}{}\n", std::str::from_utf8(c).unwrap()))
            .collect();
        let text = format!("{LINE}\n{wrapped}{ANATOMY}\n");
        let (r, rep) = collect_saved(&[&text]);
        assert!(r.bad_lines.is_empty(), "{:?}", r.bad_lines);
        assert_eq!(r.records.len(), 1);
        let a = r.records[0].anatomy.expect("joined");
        assert_eq!(a.rtt.unwrap().median, 417.84);
        assert_eq!(a.peer_by(), "software");
        assert_eq!(rep.repeats, [1], "the second copy is a repeat");
        // Without its result line: reported, not dropped.
        let (r, _) = collect_saved(&[&format!("{ANATOMY}\n")]);
        assert_eq!(r.bad_lines.len(), 1);
        assert_eq!(r.bad_lines[0].reason, ORPHAN_ANATOMY);
    }
}
