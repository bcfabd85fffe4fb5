//! Results of a ping-pong run: the `ibkern-result` lines of the nodes' consoles (schema in
//! docs/benchmarks.md) turned into perftest-style tables, `latency.csv`, `latency.json` and
//! `latency.svg` (latency against message size, one line per test and transport, log2 size
//! axis). A client run with `anatomy=on` adds `ibkern-anatomy` lines: their figures join the
//! records of the same sizes (the anatomy columns of the CSV, `"anatomy"` in the JSON) and
//! `anatomy.svg` stacks each size's round trip from its parts. The SRQ ping-pong's own lines
//! (`ibkern-srq-result`) and files (`srq.csv`, `srq.json`) are `crate::srq`'s.
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

use crate::plot;
use bench::stats::LatencyStats;
use serde_json::{json, Map, Value};

/// The prefix of a result line (the same constant the kernel prints with).
pub const PREFIX: &str = bench::line::PREFIX;
/// The prefix of an anatomy line (the client's, `anatomy=on`).
pub const ANATOMY_PREFIX: &str = bench::perftest::ANATOMY_PREFIX;

/// Median and average of one part of a round trip, microseconds.
pub use bench::perftest::MedAvg;

/// Where the time of one size went, as the client measured it (docs/benchmarks.md, "Where
/// the time goes").
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Anatomy {
    /// Iterations whose post and send completion were timed.
    pub samples: u64,
    /// Entering the post to its return (after the BlueFlame/doorbell store).
    pub post: Option<MedAvg>,
    /// Entering the post to polling its send completion.
    pub send_cqe: Option<MedAvg>,
    /// The full round trip (perftest's figures, not halved).
    pub rtt: Option<MedAvg>,
    /// The server's own turnaround (0 for read/atomic: its HCA answers).
    pub peer: Option<MedAvg>,
    /// `(RTT - peer turnaround) / 2`: wire and NICs, one way.
    pub wire_nic: Option<MedAvg>,
    /// "software" (the server measured), "hca" (read/atomic), "missing" (its report was lost).
    pub peer_by: &'static str,
}

/// The prefix of a port-counters line (the same constant the kernel prints with).
pub const PORT_PREFIX: &str = bench::line::PORT_PREFIX;

/// A client's port traffic counters read before and after one run (`ibkern-port` line,
/// docs/benchmarks.md "Port counters"): PortXmitData and PortRcvData in 4-byte words,
/// PortXmitPkts, PortRcvPkts.
#[derive(Clone, Debug, PartialEq)]
pub struct PortRun {
    pub node: usize,
    pub test: String,
    pub transport: String,
    pub role: String,
    /// The run as a perftest command line.
    pub command: String,
    pub port: u64,
    /// Read from PortCountersExtended (64-bit) rather than PortCounters (32-bit).
    pub extended: bool,
    pub before: [u64; 4],
    pub after: [u64; 4],
}

impl PortRun {
    /// The traffic over the run (`after - before`), or `None` if a counter went backwards.
    pub fn traffic(&self) -> Option<[u64; 4]> {
        let mut t = [0; 4];
        for (i, v) in t.iter_mut().enumerate() {
            *v = self.after[i].checked_sub(self.before[i])?;
        }
        Some(t)
    }
}

/// Parses the JSON object of one port line (the text after [`PORT_PREFIX`]).
pub fn parse_port(json_text: &str, node: usize) -> Result<PortRun, String> {
    let v: Value = serde_json::from_str(json_text.trim()).map_err(|e| format!("not JSON: {e}"))?;
    let o = v.as_object().ok_or("not a JSON object")?;
    let four = |k: &str| -> Result<[u64; 4], String> {
        let c = get(o, k)?
            .as_object()
            .ok_or_else(|| format!("\"{k}\" is not an object"))?;
        let mut out = [0; 4];
        for (v, name) in out.iter_mut().zip(bench::line::PORT_COUNTERS) {
            *v = get_u64(c, name).map_err(|e| format!("{k}: {e}"))?;
        }
        Ok(out)
    };
    let test = get_str(o, "test")?;
    // Port lines come from every run, latency and bandwidth.
    if !TESTS.contains(&test.as_str()) && !crate::bw_results::BW_TESTS.contains(&test.as_str()) {
        return Err(format!("unknown test {test:?}"));
    }
    let transport = get_str(o, "transport")?;
    if !TRANSPORTS.contains(&transport.as_str()) {
        return Err(format!("unknown transport {transport:?}"));
    }
    Ok(PortRun {
        node,
        test,
        transport,
        role: get_str(o, "role")?,
        command: get_str(o, "command")?,
        port: get_u64(o, "port")?,
        extended: get_bool(o, "extended")?,
        before: four("before")?,
        after: four("after")?,
    })
}

/// One size's figures as one node reported them.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Index of the console the line came from (0 = first node).
    pub node: usize,
    /// "send_lat" or "write_lat".
    pub test: String,
    /// "UD", "UC" or "RC".
    pub transport: String,
    /// "client" or "server".
    pub role: String,
    pub bytes: u64,
    pub iterations: u64,
    /// Samples used for the statistics (0 when the size was aborted).
    pub samples: u64,
    /// `None` when the node could not compute statistics (aborted size).
    pub stats: Option<Figures>,
    pub tsc_mhz: f64,
    pub inline: bool,
    pub completion: String,
    pub mtu: u64,
    pub lost: u64,
    pub retries: u64,
    pub aborted: bool,
    /// Interrupts the node's HCA raised while the size was measured, and per iteration
    /// (`None`: not known, e.g. a line from before they were reported).
    pub interrupts: Option<u64>,
    pub interrupts_per_iter: Option<f64>,
    /// The size's anatomy when the client ran with `anatomy=on`.
    pub anatomy: Option<Anatomy>,
}

/// The completion modes a result line may name, in the order tables show them.
pub const MODES: [&str; 3] = ["poll", "event", "isr"];

/// The latency figures of one record, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figures {
    pub t_min: f64,
    pub t_max: f64,
    pub t_typical: f64,
    pub t_avg: f64,
    pub t_stdev: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub true_max: f64,
    pub true_stdev: f64,
}

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

fn get<'a>(o: &'a Map<String, Value>, k: &str) -> Result<&'a Value, String> {
    o.get(k).ok_or_else(|| format!("missing \"{k}\""))
}
fn get_str(o: &Map<String, Value>, k: &str) -> Result<String, String> {
    get(o, k)?
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("\"{k}\" is not a string"))
}
fn get_u64(o: &Map<String, Value>, k: &str) -> Result<u64, String> {
    get(o, k)?
        .as_u64()
        .ok_or_else(|| format!("\"{k}\" is not a non-negative integer"))
}
fn get_bool(o: &Map<String, Value>, k: &str) -> Result<bool, String> {
    get(o, k)?
        .as_bool()
        .ok_or_else(|| format!("\"{k}\" is not a boolean"))
}
/// A number or null.
fn get_f64(o: &Map<String, Value>, k: &str) -> Result<Option<f64>, String> {
    match get(o, k)? {
        Value::Null => Ok(None),
        v => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| format!("\"{k}\" is not a number")),
    }
}

/// Parses the JSON object of one result line (the text after [`PREFIX`]).
pub fn parse_record(json_text: &str, node: usize) -> Result<Record, String> {
    let v: Value = serde_json::from_str(json_text.trim()).map_err(|e| format!("not JSON: {e}"))?;
    let o = v.as_object().ok_or("not a JSON object")?;
    let fig = |k: &str| get_f64(o, k);
    let values = [
        fig("t_min_us")?,
        fig("t_max_us")?,
        fig("t_typical_us")?,
        fig("t_avg_us")?,
        fig("t_stdev_us")?,
        fig("p99_us")?,
        fig("p99_9_us")?,
        fig("true_max_us")?,
        fig("true_stdev_us")?,
    ];
    let stats = match values {
        [Some(t_min), Some(t_max), Some(t_typical), Some(t_avg), Some(t_stdev), Some(p99), Some(p99_9), Some(true_max), Some(true_stdev)] => {
            Some(Figures {
                t_min,
                t_max,
                t_typical,
                t_avg,
                t_stdev,
                p99,
                p99_9,
                true_max,
                true_stdev,
            })
        }
        v if v.iter().all(Option::is_none) => None,
        _ => return Err("some latency figures are null, others not".into()),
    };
    let test = get_str(o, "test")?;
    if !TESTS.contains(&test.as_str()) {
        return Err(format!("unknown test {test:?}"));
    }
    let transport = get_str(o, "transport")?;
    if !TRANSPORTS.contains(&transport.as_str()) {
        return Err(format!("unknown transport {transport:?}"));
    }
    let role = get_str(o, "role")?;
    if role != "client" && role != "server" {
        return Err(format!("unknown role {role:?}"));
    }
    Ok(Record {
        node,
        test,
        transport,
        role,
        bytes: get_u64(o, "bytes")?,
        iterations: get_u64(o, "iterations")?,
        samples: get_u64(o, "samples")?,
        stats,
        tsc_mhz: fig("tsc_mhz")?.ok_or("\"tsc_mhz\" is null")?,
        inline: get_bool(o, "inline")?,
        completion: get_str(o, "completion")?,
        mtu: get_u64(o, "mtu")?,
        lost: get_u64(o, "lost")?,
        retries: get_u64(o, "retries")?,
        aborted: get_bool(o, "aborted")?,
        interrupts: match o.get("interrupts") {
            None | Some(Value::Null) => None,
            Some(_) => Some(get_u64(o, "interrupts")?),
        },
        interrupts_per_iter: match o.get("interrupts_per_iter") {
            None => None,
            Some(_) => fig("interrupts_per_iter")?,
        },
        anatomy: None,
    })
}

/// What an anatomy line is matched on: test, transport, role, completion and size.
pub type AnatomyKey = (String, String, String, String, u64);

/// Why an anatomy line was not used.
pub const ORPHAN_ANATOMY: &str = "an anatomy line without its result line";

/// Gives `a` to the record it belongs to: a run prints its anatomy after all its result
/// lines, so the first record of `node` with the same key and no anatomy yet. Returns
/// whether there was one.
pub fn attach_anatomy(records: &mut [Record], node: usize, k: &AnatomyKey, a: Anatomy) -> bool {
    let found = records.iter_mut().find(|rec| {
        rec.node == node
            && rec.anatomy.is_none()
            && (
                &rec.test,
                &rec.transport,
                &rec.role,
                &rec.completion,
                rec.bytes,
            ) == (&k.0, &k.1, &k.2, &k.3, k.4)
    });
    match found {
        Some(rec) => {
            rec.anatomy = Some(a);
            true
        }
        None => false,
    }
}

/// Parses the JSON object of one anatomy line (the text after [`ANATOMY_PREFIX`]).
pub fn parse_anatomy(json_text: &str) -> Result<(AnatomyKey, Anatomy), String> {
    let v: Value = serde_json::from_str(json_text.trim()).map_err(|e| format!("not JSON: {e}"))?;
    let o = v.as_object().ok_or("not a JSON object")?;
    let part = |name: &str| -> Result<Option<MedAvg>, String> {
        let med = get_f64(o, &format!("{name}_med_us"))?;
        let avg = get_f64(o, &format!("{name}_avg_us"))?;
        match (med, avg) {
            (Some(median), Some(average)) => Ok(Some(MedAvg { median, average })),
            (None, None) => Ok(None),
            _ => Err(format!("{name}: median and average not both given")),
        }
    };
    let peer_by = match get_str(o, "peer")?.as_str() {
        "software" => "software",
        "hca" => "hca",
        "missing" => "missing",
        other => return Err(format!("unknown peer {other:?}")),
    };
    let test = get_str(o, "test")?;
    if !TESTS.contains(&test.as_str()) {
        return Err(format!("unknown test {test:?}"));
    }
    let key = (
        test,
        get_str(o, "transport")?,
        get_str(o, "role")?,
        get_str(o, "completion")?,
        get_u64(o, "bytes")?,
    );
    let a = Anatomy {
        samples: get_u64(o, "samples")?,
        post: part("post")?,
        send_cqe: part("send_cqe")?,
        rtt: part("rtt")?,
        peer: part("peer")?,
        wire_nic: part("wire_nic")?,
        peer_by,
    };
    Ok((key, a))
}

/// Reads every `ibkern-result` line of every console (`consoles[i]` is node `i`). A line
/// may carry other text before the prefix (serial noise); unreadable lines are kept in
/// [`Results::bad_lines`], not dropped silently.
pub fn collect(consoles: &[&str]) -> Results {
    let mut r = Results::default();
    for (node, text) in consoles.iter().enumerate() {
        for (i, line) in text.lines().enumerate() {
            if let Some(at) = line.find(ANATOMY_PREFIX) {
                let bad = |reason| BadLine {
                    node,
                    line: i + 1,
                    reason,
                };
                match parse_anatomy(&line[at + ANATOMY_PREFIX.len()..]) {
                    Ok((k, a)) => {
                        if !attach_anatomy(&mut r.records, node, &k, a) {
                            r.bad_lines.push(bad(ORPHAN_ANATOMY.into()));
                        }
                    }
                    Err(reason) => r.bad_lines.push(bad(reason)),
                }
                continue;
            }
            if let Some(at) = line.find(PORT_PREFIX) {
                match parse_port(&line[at + PORT_PREFIX.len()..], node) {
                    Ok(p) => r.ports.push(p),
                    Err(reason) => r.bad_lines.push(BadLine {
                        node,
                        line: i + 1,
                        reason,
                    }),
                }
                continue;
            }
            let Some(at) = line.find(PREFIX) else {
                continue;
            };
            let json = &line[at + PREFIX.len()..];
            if crate::bw_results::is_bw_line(json) {
                match crate::bw_results::parse_bw_record(json, node) {
                    Ok(rec) => r.bw.records.push(rec),
                    Err(reason) => r.bad_lines.push(BadLine {
                        node,
                        line: i + 1,
                        reason,
                    }),
                }
                continue;
            }
            match parse_record(json, node) {
                Ok(rec) => r.records.push(rec),
                Err(reason) => r.bad_lines.push(BadLine {
                    node,
                    line: i + 1,
                    reason,
                }),
            }
        }
    }
    r
}

fn opt(v: Option<f64>) -> String {
    v.map_or(String::new(), |x| format!("{x:.3}"))
}

/// The tests a result line may name, in the order tables and plots show them.
pub const TESTS: [&str; 4] = ["send_lat", "write_lat", "read_lat", "atomic_lat"];
/// The transports a result line may name, in the order tables and plots show them.
pub const TRANSPORTS: [&str; 3] = ["UD", "UC", "RC"];

/// The perftest program a test mirrors ("ib_send_lat", "ib_write_lat").
pub fn program(test: &str) -> String {
    format!("ib_{test}")
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

/// The parts of an anatomy in the CSV's order.
fn anatomy_parts(a: Option<&Anatomy>) -> [Option<MedAvg>; 5] {
    match a {
        Some(a) => [a.post, a.send_cqe, a.rtt, a.peer, a.wire_nic],
        None => [None; 5],
    }
}

fn opt4(v: Option<f64>) -> String {
    v.map_or(String::new(), |x| format!("{x:.4}"))
}

impl Results {
    /// The send_lat records of one transport and role, by size.
    pub fn series(&self, transport: &str, role: &str) -> Vec<&Record> {
        self.test_series("send_lat", transport, role)
    }

    /// The records of one test, transport and role, by size.
    pub fn test_series(&self, test: &str, transport: &str, role: &str) -> Vec<&Record> {
        let mut v: Vec<&Record> = self
            .records
            .iter()
            .filter(|r| r.test == test && r.transport == transport && r.role == role)
            .collect();
        v.sort_by_key(|r| (r.bytes, r.node));
        v
    }

    /// Transports present (any test), UD first.
    pub fn transports(&self) -> Vec<&'static str> {
        TRANSPORTS
            .into_iter()
            .filter(|t| self.records.iter().any(|r| r.transport == *t))
            .collect()
    }

    /// (test, transport) pairs present: send_lat first, then by transport.
    pub fn groups(&self) -> Vec<(&'static str, &'static str)> {
        TESTS
            .into_iter()
            .flat_map(|test| TRANSPORTS.into_iter().map(move |t| (test, t)))
            .filter(|(test, t)| {
                self.records
                    .iter()
                    .any(|r| r.test == *test && r.transport == *t)
            })
            .collect()
    }

    /// The name of a group in the plot's legend: the transport for send_lat (as before
    /// write_lat existed), "write_lat RC" for the others.
    pub fn group_name(test: &str, transport: &str) -> String {
        if test == "send_lat" {
            transport.to_string()
        } else {
            format!("{test} {transport}")
        }
    }

    /// The clients' records of a group, or the servers' if no client line arrived.
    fn group_rows(&self, test: &str, transport: &str) -> (Vec<&Record>, &'static str) {
        let rows = self.test_series(test, transport, "client");
        if rows.is_empty() {
            (self.test_series(test, transport, "server"), "server")
        } else {
            (rows, "client")
        }
    }

    /// A group's rows split by completion mode (poll, event, isr; `modes=` runs each),
    /// each mode's rows by size.
    fn rows_by_mode<'a>(rows: &[&'a Record]) -> Vec<(&'a str, Vec<&'a Record>)> {
        let mut modes: Vec<&str> = MODES.to_vec();
        for r in rows {
            if !modes.contains(&r.completion.as_str()) {
                modes.push(r.completion.as_str());
            }
        }
        modes
            .into_iter()
            .filter_map(|m| {
                let v: Vec<&Record> = rows.iter().copied().filter(|r| r.completion == m).collect();
                let m = v.first()?.completion.as_str();
                Some((m, v))
            })
            .collect()
    }

    /// Losses counted by the clients, over every size (latency and bandwidth tests).
    pub fn total_lost(&self) -> u64 {
        self.records
            .iter()
            .filter(|r| r.role == "client")
            .map(|r| r.lost)
            .sum::<u64>()
            + self.bw.total_lost()
    }

    /// Sizes any node reported as aborted.
    pub fn aborted(&self) -> usize {
        self.records.iter().filter(|r| r.aborted).count()
    }

    /// `latency.csv`: a header row ([`CSV_COLUMNS`]) and one row per record; empty cells for
    /// figures an aborted size does not have.
    pub fn to_csv(&self) -> String {
        let mut s = self.comment_lines("# ");
        s.push_str(&CSV_COLUMNS.join(","));
        s.push('\n');
        for r in &self.records {
            let f = r.stats;
            let row = [
                r.node.to_string(),
                r.role.clone(),
                r.test.clone(),
                r.transport.clone(),
                r.bytes.to_string(),
                r.iterations.to_string(),
                r.samples.to_string(),
                opt(f.map(|f| f.t_min)),
                opt(f.map(|f| f.t_max)),
                opt(f.map(|f| f.t_typical)),
                opt(f.map(|f| f.t_avg)),
                opt(f.map(|f| f.t_stdev)),
                opt(f.map(|f| f.p99)),
                opt(f.map(|f| f.p99_9)),
                opt(f.map(|f| f.true_max)),
                opt(f.map(|f| f.true_stdev)),
                format!("{:.3}", r.tsc_mhz),
                r.inline.to_string(),
                r.completion.clone(),
                r.mtu.to_string(),
                r.lost.to_string(),
                r.retries.to_string(),
                r.aborted.to_string(),
                r.interrupts.map_or(String::new(), |n| n.to_string()),
                opt(r.interrupts_per_iter),
            ];
            let mut row = row.to_vec();
            for p in anatomy_parts(r.anatomy.as_ref()) {
                row.push(opt4(p.map(|p| p.median)));
                row.push(opt4(p.map(|p| p.average)));
            }
            row.push(r.anatomy.map_or("", |a| a.peer_by).to_string());
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
                let f = r.stats;
                json!({
                    "node": r.node,
                    "test": r.test,
                    "transport": r.transport,
                    "role": r.role,
                    "bytes": r.bytes,
                    "iterations": r.iterations,
                    "samples": r.samples,
                    "t_min_us": f.map(|f| f.t_min),
                    "t_max_us": f.map(|f| f.t_max),
                    "t_typical_us": f.map(|f| f.t_typical),
                    "t_avg_us": f.map(|f| f.t_avg),
                    "t_stdev_us": f.map(|f| f.t_stdev),
                    "p99_us": f.map(|f| f.p99),
                    "p99_9_us": f.map(|f| f.p99_9),
                    "true_max_us": f.map(|f| f.true_max),
                    "true_stdev_us": f.map(|f| f.true_stdev),
                    "tsc_mhz": r.tsc_mhz,
                    "inline": r.inline,
                    "completion": r.completion,
                    "mtu": r.mtu,
                    "lost": r.lost,
                    "retries": r.retries,
                    "aborted": r.aborted,
                    "interrupts": r.interrupts,
                    "interrupts_per_iter": r.interrupts_per_iter,
                    "anatomy": r.anatomy.map(|a| {
                        let ma = |p: Option<MedAvg>| {
                            p.map(|p| json!({"median_us": p.median, "avg_us": p.average}))
                        };
                        json!({
                            "samples": a.samples,
                            "post": ma(a.post),
                            "send_cqe": ma(a.send_cqe),
                            "rtt": ma(a.rtt),
                            "peer_turnaround": ma(a.peer),
                            "wire_nic": ma(a.wire_nic),
                            "peer_turnaround_by": a.peer_by,
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
        let emulated = self
            .provenance
            .as_ref()
            .is_some_and(crate::provenance::Provenance::emulated);
        for (test, t) in self.groups() {
            let (all, role) = self.group_rows(test, t);
            for (mode, rows) in Self::rows_by_mode(&all) {
                let _ = write!(s, "{} over {t} ({role} side)", program(test));
                if mode != "poll" {
                    let _ = write!(s, ", completion {mode}");
                }
                if emulated {
                    let _ = write!(
                        s,
                        " [EMULATED: times measure QEMU and the model, not the network]"
                    );
                }
                let _ = writeln!(s);
                let _ = bench::report::write_header(&mut s);
                for r in &rows {
                    match r.stats {
                        Some(f) => {
                            let st = LatencyStats {
                                iterations: r.iterations as usize,
                                samples: r.samples as usize,
                                t_min: f.t_min,
                                t_max: f.t_max,
                                t_typical: f.t_typical,
                                t_avg: f.t_avg,
                                t_stdev: f.t_stdev,
                                p99: f.p99,
                                p99_9: f.p99_9,
                                true_max: f.true_max,
                                true_stdev: f.true_stdev,
                            };
                            let mut row = String::new();
                            let _ = bench::report::write_row(&mut row, r.bytes, &st);
                            s.push_str(row.trim_end_matches('\n'));
                            if r.lost > 0 || r.retries > 0 {
                                let _ = write!(s, "  lost {}, retries {}", r.lost, r.retries);
                            }
                            if let (true, Some(x)) = (mode != "poll", r.interrupts_per_iter) {
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
                    for r in rows.iter().filter(|r| r.anatomy.is_some()) {
                        let _ = bench::perftest::write_anatomy_row(&mut s, &anatomy_row(r));
                    }
                    let _ = writeln!(s, "{}", bench::report::RESULT_LINE);
                }
                let lost: u64 = rows.iter().map(|r| r.lost).sum();
                let retries: u64 = rows.iter().map(|r| r.retries).sum();
                let aborted = rows.iter().filter(|r| r.aborted).count();
                let _ = writeln!(
                    s,
                    " lost {lost}, retries {retries}, aborted sizes {aborted}; TSC {:.3} MHz\n",
                    rows.first().map_or(0.0, |r| r.tsc_mhz)
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
                    .filter_map(|r| {
                        r.stats.map(|f| plot::Point {
                            bytes: r.bytes,
                            us: f.t_typical,
                            p99: Some(f.p99),
                            inline: Some(r.inline),
                        })
                    })
                    .filter(|p| p.bytes > 0 && p.us > 0.0 && p.us.is_finite())
                    .collect();
                let name = match mode {
                    "poll" => Self::group_name(test, t),
                    m => format!("{} {m}", Self::group_name(test, t)),
                };
                plot::Series { name, points }
            })
            .collect();
        let mut tests: Vec<&str> = groups.iter().map(|g| g.0).collect();
        tests.dedup();
        let title = if tests.iter().all(|t| *t == "send_lat") {
            DEFAULT_TITLE.to_string()
        } else {
            let names: Vec<String> = tests.iter().map(|t| program(t)).collect();
            if tests
                .iter()
                .any(|t| matches!(*t, "read_lat" | "atomic_lat"))
            {
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
            title,
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
                let name = format!("{test} {t} {}", r.completion);
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
                        let peer = a.peer?.median.min(rtt - post);
                        Some(plot::Stack {
                            bytes: r.bytes,
                            post,
                            wire_nic: rtt - post - peer,
                            peer,
                        })
                    })
                    .collect(),
            })
            .collect();
        let emulated = self
            .provenance
            .as_ref()
            .is_some_and(crate::provenance::Provenance::emulated);
        let title = if emulated {
            "Where the time goes: the round trip in parts (EMULATED: these are the emulator's times)"
        } else {
            "Where the time goes: the round trip in parts (client side, medians)"
        };
        plot::stacked_svg(&plot::StackedPlot {
            title: title.to_string(),
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
            let _ = write!(
                s,
                "{},{},{},{},{},{},{}",
                p.node, p.role, p.test, p.transport, p.command, p.port, p.extended
            );
            match p.traffic() {
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

/// An anatomy as the bench's table row shows it.
fn anatomy_row(r: &Record) -> bench::perftest::AnatomyRow {
    use bench::perftest::{AnatomyRow, PeerPart};
    let a = r.anatomy.unwrap_or(Anatomy {
        samples: 0,
        post: None,
        send_cqe: None,
        rtt: None,
        peer: None,
        wire_nic: None,
        peer_by: "missing",
    });
    AnatomyRow {
        index: 0,
        bytes: r.bytes as u32,
        samples: a.samples as usize,
        post: a.post,
        send_cqe: a.send_cqe,
        rtt: a.rtt,
        peer: match (a.peer_by, a.peer) {
            ("hca", _) => PeerPart::Hca,
            (_, Some(p)) => PeerPart::Software(p),
            _ => PeerPart::Missing,
        },
    }
}

/// One port line in `latency.json`: the line's keys, `node`, and the traffic over the run.
fn port_json(p: &PortRun) -> Value {
    let four = |v: [u64; 4]| {
        let mut m = Map::new();
        for (name, x) in bench::line::PORT_COUNTERS.iter().zip(v) {
            m.insert((*name).to_string(), json!(x));
        }
        Value::Object(m)
    };
    json!({
        "node": p.node,
        "role": p.role,
        "test": p.test,
        "transport": p.transport,
        "command": p.command,
        "port": p.port,
        "extended": p.extended,
        "before": four(p.before),
        "after": four(p.after),
        "traffic": p.traffic().map(four),
    })
}

/// The plot's title when it shows send_lat only.
const DEFAULT_TITLE: &str = "ib_send_lat ping-pong latency (median of RTT/2)";

#[cfg(test)]
mod tests {
    use super::*;
    use bench::config::{Completion, Role, Test, Transport};
    use bench::line::{write_result_line, ResultLine};

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
            write_result_line(
                &mut s,
                &ResultLine {
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
                },
            )
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
        let rec = &r.records[0];
        assert_eq!(
            (rec.transport.as_str(), rec.role.as_str(), rec.bytes),
            ("UD", "client", 2)
        );
        assert_eq!(rec.samples, 999);
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
        bench::line::write_port_line(
            &mut line,
            &bench::line::PortLine {
                test: Test::WriteLat,
                transport: Transport::Rc,
                role: Role::Client,
                command: &"ib_write_lat -c RC -s 64 -n 20",
                port: 1,
                before: c(1),
                after: c(4),
            },
        )
        .unwrap();
        let console = format!("noise\n{line}ibkern-port {{\"test\":\"send_lat\"}}\n");
        let r = collect(&["", &console]);
        assert_eq!(r.ports.len(), 1);
        assert_eq!(r.bad_lines.len(), 1, "{:?}", r.bad_lines);
        let p = &r.ports[0];
        assert_eq!((p.node, p.port, p.extended), (1, 1, true));
        assert_eq!(p.command, "ib_write_lat -c RC -s 64 -n 20");
        assert_eq!(p.traffic(), Some([3000, 2700, 60, 57]));
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
        back.after[3] = 0;
        assert_eq!(back.traffic(), None);
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
        assert_eq!(r.transports(), vec!["UD", "UC"]);
        assert_eq!(r.series("UD", "client").len(), 11);
        assert_eq!(r.series("UC", "server").len(), 23);
        assert!(r.series("UC", "server").iter().all(|x| x.node == 1));
        assert_eq!(r.aborted(), 1);
        // Client losses: 1 per size, 101 for the aborted one.
        assert_eq!(r.total_lost(), 11 + 22 + 101);
        let aborted = r.records.iter().find(|x| x.aborted).unwrap();
        assert_eq!(
            (aborted.bytes, aborted.stats, aborted.samples),
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
                write_result_line(
                    &mut text,
                    &ResultLine {
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
                    },
                )
                .unwrap();
            }
        }
        let r = collect(&[&text]);
        assert!(r.bad_lines.is_empty(), "{:?}", r.bad_lines);
        assert_eq!(r.records.len(), 6);
        let isr = r.records.iter().find(|x| x.completion == "isr").unwrap();
        assert_eq!(
            (isr.interrupts, isr.interrupts_per_iter),
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
        let rec = parse_record(&old[PREFIX.len()..], 0).unwrap();
        assert_eq!((rec.interrupts, rec.interrupts_per_iter), (None, None));
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
            let back = parse_record(&j.to_string(), rec.node).unwrap();
            assert_eq!(&back, rec);
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
        assert_eq!(r.groups(), vec![("write_lat", "UC"), ("write_lat", "RC")]);
        assert_eq!(r.transports(), vec!["UC", "RC"]);
        assert!(
            r.series("RC", "client").is_empty(),
            "series() is send_lat's"
        );
        assert_eq!(r.test_series("write_lat", "RC", "client").len(), 2);
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
        assert_eq!(r.groups(), vec![("read_lat", "RC"), ("atomic_lat", "RC")]);
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
        assert!(band
            .descendants()
            .filter_map(|n| n.text())
            .any(|t| t == "inline sends (up to 128 B)"));
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
        use bench::perftest::{write_anatomy_line, AnatomyContext, AnatomyRow, MedAvg};
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
            write_anatomy_line(&mut s, &c, &row).unwrap();
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
            .filter(|x| x.role == "server")
            .all(|x| x.anatomy.is_none()));
        let first = r.records[2].anatomy.unwrap();
        assert_eq!(r.records[2].bytes, 4096);
        assert_eq!(first.peer, Some(turn));
        assert_eq!(first.peer_by, "software");
        let rtt = first.rtt.unwrap().median;
        assert!((rtt - 2.0 * 5.096).abs() < 1e-4);
        // (RTT - peer) / 2, as the client computed it.
        assert!((first.wire_nic.unwrap().median - (rtt - 0.4) / 2.0).abs() < 1e-4);
        let again = r.records[3].anatomy.unwrap();
        assert_eq!(
            (again.peer_by, again.peer, again.wire_nic),
            ("missing", None, None)
        );
        let read = r.records[4].anatomy.unwrap();
        assert_eq!(
            (r.records[4].test.as_str(), read.peer_by),
            ("read_lat", "hca")
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
            .filter(|l| l.starts_with(ANATOMY_PREFIX))
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
}
