//! `cargo qemu pingpong --test srq_pingpong`: rdma-core's `ibv_srq_pingpong` between two
//! ibkern guests on one emulated fabric (`test=srq_pingpong`, docs/benchmarks.md), and the
//! CQ-moderation sweep (`--cq-moderation C/P,...`: one run per setting, applied with
//! modify_cq on both nodes' CQs).
//!
//! The nodes print one `ibkern-srq-result {...}` line per run; this module reads them
//! ([`collect`]), prints the sweep's table (setting, round trip typical/average, usec/iter,
//! Mbit/sec, interrupts per message of each node) and writes `srq.csv` and `srq.json`
//! ([`SRQ_COLUMNS`]).

use std::fmt::Write as _;
use std::fs;

use anyhow::Result;
use serde_json::{Map, Value};

use crate::pingpong::{node_config, run_pair, PingPongArgs, ROLES};
use crate::{say, Exit};

/// The prefix of the SRQ ping-pong's result line (the kernel prints the same constant).
pub const PREFIX: &str = bench::srq::session::PREFIX;

/// One run as one node reported it.
#[derive(Clone, Debug, PartialEq)]
pub struct SrqRecord {
    /// Index of the console the line came from (0 = server, 1 = client in a pair).
    pub node: usize,
    pub role: String,
    pub run: u64,
    pub runs: u64,
    pub qps: u64,
    pub rx_depth: u64,
    pub bytes: u64,
    pub iterations: u64,
    pub completion: String,
    /// The moderation applied (`None`: left as created).
    pub cq_count: Option<u64>,
    pub cq_period_us: Option<u64>,
    pub elapsed_us: f64,
    pub mbit_per_sec: f64,
    pub usec_per_iter: f64,
    pub rtt_samples: u64,
    pub rtt_typical_us: Option<f64>,
    pub rtt_avg_us: Option<f64>,
    pub cq_events: u64,
    pub fallbacks: u64,
    /// Device interrupts the node counted from just before its first send to its end.
    pub interrupts: u64,
    pub interrupts_per_message: f64,
    pub refills: u64,
    pub tsc_mhz: f64,
}

/// Column names of `srq.csv`, in order.
pub const SRQ_COLUMNS: [&str; 23] = [
    "node",
    "role",
    "run",
    "runs",
    "qps",
    "rx_depth",
    "bytes",
    "iterations",
    "completion",
    "cq_count",
    "cq_period_us",
    "elapsed_us",
    "mbit_per_sec",
    "usec_per_iter",
    "rtt_samples",
    "rtt_typical_us",
    "rtt_avg_us",
    "cq_events",
    "fallbacks",
    "interrupts",
    "interrupts_per_message",
    "refills",
    "tsc_mhz",
];

fn field<'a>(o: &'a Map<String, Value>, k: &str) -> Result<&'a Value, String> {
    o.get(k).ok_or_else(|| format!("missing \"{k}\""))
}
fn uint(o: &Map<String, Value>, k: &str) -> Result<u64, String> {
    field(o, k)?
        .as_u64()
        .ok_or_else(|| format!("\"{k}\" is not a non-negative integer"))
}
fn opt_uint(o: &Map<String, Value>, k: &str) -> Result<Option<u64>, String> {
    match field(o, k)? {
        Value::Null => Ok(None),
        v => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("\"{k}\" is not a non-negative integer")),
    }
}
fn num(o: &Map<String, Value>, k: &str) -> Result<f64, String> {
    field(o, k)?
        .as_f64()
        .ok_or_else(|| format!("\"{k}\" is not a number"))
}
fn opt_num(o: &Map<String, Value>, k: &str) -> Result<Option<f64>, String> {
    match field(o, k)? {
        Value::Null => Ok(None),
        v => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| format!("\"{k}\" is not a number")),
    }
}
fn text(o: &Map<String, Value>, k: &str) -> Result<String, String> {
    field(o, k)?
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("\"{k}\" is not a string"))
}

/// Parses the JSON object of one SRQ result line (the text after [`PREFIX`]).
pub fn parse_record(json_text: &str, node: usize) -> Result<SrqRecord, String> {
    let v: Value = serde_json::from_str(json_text.trim()).map_err(|e| format!("not JSON: {e}"))?;
    let o = v.as_object().ok_or("not a JSON object")?;
    if text(o, "test")? != "srq_pingpong" {
        return Err("\"test\" is not \"srq_pingpong\"".into());
    }
    let role = text(o, "role")?;
    if role != "client" && role != "server" {
        return Err(format!("unknown role {role:?}"));
    }
    Ok(SrqRecord {
        node,
        role,
        run: uint(o, "run")?,
        runs: uint(o, "runs")?,
        qps: uint(o, "qps")?,
        rx_depth: uint(o, "rx_depth")?,
        bytes: uint(o, "bytes")?,
        iterations: uint(o, "iterations")?,
        completion: text(o, "completion")?,
        cq_count: opt_uint(o, "cq_count")?,
        cq_period_us: opt_uint(o, "cq_period_us")?,
        elapsed_us: num(o, "elapsed_us")?,
        mbit_per_sec: num(o, "mbit_per_sec")?,
        usec_per_iter: num(o, "usec_per_iter")?,
        rtt_samples: uint(o, "rtt_samples")?,
        rtt_typical_us: opt_num(o, "rtt_typical_us")?,
        rtt_avg_us: opt_num(o, "rtt_avg_us")?,
        cq_events: uint(o, "cq_events")?,
        fallbacks: uint(o, "fallbacks")?,
        interrupts: uint(o, "interrupts")?,
        interrupts_per_message: num(o, "interrupts_per_message")?,
        refills: uint(o, "refills")?,
        tsc_mhz: num(o, "tsc_mhz")?,
    })
}

/// Every SRQ result line of every console; unreadable lines as (node, line, reason).
pub fn collect(consoles: &[&str]) -> (Vec<SrqRecord>, Vec<(usize, usize, String)>) {
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    for (node, console) in consoles.iter().enumerate() {
        for (i, line) in console.lines().enumerate() {
            let Some(at) = line.find(PREFIX) else {
                continue;
            };
            match parse_record(&line[at + PREFIX.len()..], node) {
                Ok(r) => good.push(r),
                Err(why) => bad.push((node, i + 1, why)),
            }
        }
    }
    (good, bad)
}

fn opt_u(v: Option<u64>) -> String {
    v.map_or(String::new(), |x| x.to_string())
}
fn opt_f(v: Option<f64>) -> String {
    v.map_or(String::new(), |x| format!("{x:.3}"))
}

/// The moderation setting as the table shows it ("-" when left as created).
fn setting(r: &SrqRecord) -> String {
    match (r.cq_count, r.cq_period_us) {
        (Some(c), Some(p)) => format!("{c}/{p}"),
        _ => "-".to_string(),
    }
}

/// `srq.csv`: a header of [`SRQ_COLUMNS`], one row per record.
pub fn csv(records: &[SrqRecord]) -> String {
    let mut s = SRQ_COLUMNS.join(",");
    s.push('\n');
    for r in records {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{:.3},{:.2},{:.3},{},{},{},{},{},{},{:.4},{},{:.3}",
            r.node,
            r.role,
            r.run,
            r.runs,
            r.qps,
            r.rx_depth,
            r.bytes,
            r.iterations,
            r.completion,
            opt_u(r.cq_count),
            opt_u(r.cq_period_us),
            r.elapsed_us,
            r.mbit_per_sec,
            r.usec_per_iter,
            r.rtt_samples,
            opt_f(r.rtt_typical_us),
            opt_f(r.rtt_avg_us),
            r.cq_events,
            r.fallbacks,
            r.interrupts,
            r.interrupts_per_message,
            r.refills,
            r.tsc_mhz
        );
    }
    s
}

/// `srq.json`: `{"records": [...]}`, each record with the columns of [`SRQ_COLUMNS`].
pub fn json(records: &[SrqRecord]) -> Value {
    let rows: Vec<Value> = records
        .iter()
        .map(|r| {
            serde_json::json!({
                "node": r.node, "role": r.role, "run": r.run, "runs": r.runs, "qps": r.qps,
                "rx_depth": r.rx_depth, "bytes": r.bytes, "iterations": r.iterations,
                "completion": r.completion, "cq_count": r.cq_count,
                "cq_period_us": r.cq_period_us, "elapsed_us": r.elapsed_us,
                "mbit_per_sec": r.mbit_per_sec, "usec_per_iter": r.usec_per_iter,
                "rtt_samples": r.rtt_samples, "rtt_typical_us": r.rtt_typical_us,
                "rtt_avg_us": r.rtt_avg_us, "cq_events": r.cq_events,
                "fallbacks": r.fallbacks, "interrupts": r.interrupts,
                "interrupts_per_message": r.interrupts_per_message, "refills": r.refills,
                "tsc_mhz": r.tsc_mhz,
            })
        })
        .collect();
    serde_json::json!({ "records": rows })
}

/// The sweep's table: per run (client's figures), the setting, the round trip, usec/iter,
/// Mbit/sec, and each node's interrupts per message.
pub fn table(records: &[SrqRecord]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>4} {:>12} {:>10} {:>10} {:>11} {:>11} {:>14} {:>14} {:>9}",
        "run",
        "cq_mod C/P",
        "rtt typ us",
        "rtt avg us",
        "usec/iter",
        "Mbit/sec",
        "irq/msg client",
        "irq/msg server",
        "fallbacks"
    );
    let mut clients: Vec<&SrqRecord> = records.iter().filter(|r| r.role == "client").collect();
    clients.sort_by_key(|r| r.run);
    for c in clients {
        let server = records
            .iter()
            .find(|r| r.role == "server" && r.run == c.run)
            .map_or("-".to_string(), |r| {
                format!("{:.3}", r.interrupts_per_message)
            });
        let _ = writeln!(
            s,
            "{:>4} {:>12} {:>10} {:>10} {:>11.2} {:>11.2} {:>14.3} {:>14} {:>9}",
            c.run,
            setting(c),
            opt_f(c.rtt_typical_us),
            opt_f(c.rtt_avg_us),
            c.usec_per_iter,
            c.mbit_per_sec,
            c.interrupts_per_message,
            server,
            c.fallbacks
        );
    }
    s
}

/// Reads the SRQ result lines of `consoles`, prints the table and writes `srq.csv` and
/// `srq.json` into `out`; the verdict `exit` becomes a failure when a line is unreadable,
/// no node reported a run, or the client reported other than `client_runs` runs.
pub fn report(
    consoles: &[&str],
    out: &std::path::Path,
    client_runs: Option<u32>,
    mut exit: Exit,
) -> Result<Exit> {
    let (records, bad) = collect(consoles);
    for (node, line, why) in &bad {
        say(&format!(
            "FAILED: unreadable srq result line {line} of console {node}: {why}"
        ));
        exit = Exit::GuestFailed;
    }
    if exit == Exit::Success && records.is_empty() {
        say("FAILED: the kernel finished without an srq result line");
        exit = Exit::GuestFailed;
    }
    let reported = records.iter().filter(|r| r.role == "client").count() as u32;
    if let Some(runs) = client_runs {
        if reported != runs && exit == Exit::Success {
            say(&format!(
                "FAILED: the client reported {reported} of {runs} runs"
            ));
            exit = Exit::GuestFailed;
        }
    }
    println!("--- srq_pingpong (ibv_srq_pingpong): per run, client's figures ---");
    print!("{}", table(&records));
    fs::write(out.join("srq.csv"), csv(&records))?;
    fs::write(
        out.join("srq.json"),
        serde_json::to_string_pretty(&json(&records))? + "\n",
    )?;
    say(&format!(
        "wrote {}, {} and the consoles",
        out.join("srq.csv").display(),
        out.join("srq.json").display()
    ));
    Ok(exit)
}

/// Runs the SRQ ping-pong (and its moderation sweep) in one boot pair; writes the consoles,
/// `srq.csv` and `srq.json` into the run directory.
pub fn srq_command(args: PingPongArgs) -> Result<Exit> {
    let base = args.run_base()?;
    args.transport_list()?;
    let configs = ROLES.map(|role| node_config(&args, ibconfig::Transport::Rc, role));
    let [server, client] = configs;
    let configs = [server?, client?];
    for c in &configs {
        crate::kernel_config::check_config(c)?;
    }
    let client = &configs[1];
    let keys = client.bench;
    let per_pass = if client.srq_plan().is_empty() {
        keys.srq.moderation.as_slice().len().max(1)
    } else {
        client.srq_plan().len()
    };
    let runs = per_pass as u32 * keys.repeat;
    crate::host::qemu_binary(args.guest.qemu.as_deref())?;
    let guest = crate::prepare::GuestBuilder::new(&args.guest, &args.kernel)?;
    let out = crate::run_dir::create(&base)?;
    say(&format!(
        "this run's files: {} ({} points to it); srq_pingpong: {runs} runs",
        out.display(),
        base.join(crate::run_dir::LATEST).display()
    ));
    let run = run_pair(&args, &guest, "srq_pingpong", configs, "", &out)?;
    let consoles: Vec<&str> = run.outcomes.iter().map(|o| o.console.as_str()).collect();
    let exit = report(
        &consoles,
        &out,
        Some(runs),
        run.exit.unwrap_or(Exit::Success),
    )?;
    Ok(exit)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"ibkern-srq-result {"test":"srq_pingpong","role":"client","run":2,"runs":3,"qps":1,"rx_depth":4,"bytes":64,"iterations":40,"completion":"event","cq_count":4,"cq_period_us":50,"elapsed_us":2524.000,"mbit_per_sec":16.23,"usec_per_iter":63.100,"rtt_samples":40,"rtt_typical_us":63.000,"rtt_avg_us":63.100,"cq_events":40,"fallbacks":0,"interrupts":42,"interrupts_per_message":1.0500,"refills":14,"tsc_mhz":1000.000}"#;

    #[test]
    fn result_lines_become_records_rows_and_a_table() {
        let server = LINE
            .replace("\"client\"", "\"server\"")
            .replace("1.0500", "1.0750");
        let consoles = [
            format!("noise\n{server}\n"),
            format!("[x] {LINE}\nibkern-srq-result {{\"test\":\"send_lat\"}}\n"),
        ];
        let refs: Vec<&str> = consoles.iter().map(String::as_str).collect();
        let (records, bad) = collect(&refs);
        assert_eq!(records.len(), 2);
        assert_eq!(bad.len(), 1, "{bad:?}");
        let c = records.iter().find(|r| r.role == "client").unwrap();
        assert_eq!(
            (c.node, c.run, c.cq_count, c.cq_period_us),
            (1, 2, Some(4), Some(50))
        );
        assert_eq!(c.rtt_typical_us, Some(63.0));
        assert_eq!(c.interrupts, 42);
        let csv = csv(&records);
        let mut lines = csv.lines();
        assert_eq!(lines.next().unwrap(), SRQ_COLUMNS.join(","));
        for row in lines {
            assert_eq!(row.split(',').count(), SRQ_COLUMNS.len(), "{row}");
        }
        let j = json(&records);
        assert_eq!(j["records"][1]["interrupts_per_message"], 1.05);
        assert_eq!(j["records"][0]["role"], "server");
        let t = table(&records);
        let row = t.lines().nth(1).unwrap();
        assert!(
            row.contains("4/50") && row.contains("1.050") && row.contains("1.075"),
            "{t}"
        );
    }

    #[test]
    fn unset_moderation_and_missing_round_trips_are_empty_cells() {
        let line = LINE
            .replace(
                "\"cq_count\":4,\"cq_period_us\":50",
                "\"cq_count\":null,\"cq_period_us\":null",
            )
            .replace(
                "\"rtt_typical_us\":63.000,\"rtt_avg_us\":63.100",
                "\"rtt_typical_us\":null,\"rtt_avg_us\":null",
            );
        let r = parse_record(line.strip_prefix(PREFIX).unwrap(), 0).unwrap();
        assert_eq!((r.cq_count, r.rtt_avg_us), (None, None));
        assert_eq!(setting(&r), "-");
        assert!(csv(&[r]).lines().nth(1).unwrap().contains(",event,,,"));
        assert!(parse_record("{\"test\":\"srq_pingpong\",\"role\":\"both\"}", 0).is_err());
    }
}
