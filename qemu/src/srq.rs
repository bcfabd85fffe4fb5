//! `cargo qemu pingpong --test srq_pingpong`: rdma-core's `ibv_srq_pingpong` between two
//! ibkern guests on one emulated fabric (`test=srq_pingpong`, docs/benchmarks.md), and the
//! CQ-moderation sweep (`--cq-moderation C/P,...`: one run per setting, applied with
//! modify_cq on both nodes' CQs).
//!
//! The nodes print one `ibkern-srq-result {...}` line per run (`bench::line::SrqLine`);
//! this module reads them ([`collect`]), prints the sweep's table (setting, round trip typical/average, usec/iter,
//! Mbit/sec, interrupts per message of each node) and writes `srq.csv` and `srq.json`
//! ([`SRQ_COLUMNS`]).

use std::fmt::Write as _;
use std::fs;

use anyhow::Result;
use bench::line::{Kind, Parse, SrqLine};
use ibconfig::Role;
use serde_json::Value;

use crate::pingpong::{node_config, run_pair, PingPongArgs, ROLES};
use crate::{say, Exit};

/// One run as one node reported it.
#[derive(Clone, Debug, PartialEq)]
pub struct SrqRecord {
    /// Index of the console the line came from (0 = server, 1 = client in a pair).
    pub node: usize,
    pub line: SrqLine,
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

/// Every SRQ result line of every console; unreadable lines as (node, line, reason).
pub fn collect(consoles: &[&str]) -> (Vec<SrqRecord>, Vec<(usize, usize, String)>) {
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    for (node, console) in consoles.iter().enumerate() {
        for f in crate::console_log::found_lines(console) {
            if f.kind != Kind::Srq {
                continue;
            }
            match f
                .json
                .and_then(|j| SrqLine::parse(&j).map_err(|e| e.to_string()))
            {
                Ok(line) => good.push(SrqRecord { node, line }),
                Err(why) => bad.push((node, f.line, why)),
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
fn setting(r: &SrqLine) -> String {
    match r.moderation {
        Some(m) => format!("{}/{}", m.cq_count, m.cq_period),
        None => "-".to_string(),
    }
}

/// `srq.csv`: a header of [`SRQ_COLUMNS`], one row per record.
pub fn csv(records: &[SrqRecord]) -> String {
    let mut s = SRQ_COLUMNS.join(",");
    s.push('\n');
    for rec in records {
        let r = &rec.line;
        let m = r.moderation;
        let rtt = r.rtt;
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{:.3},{:.2},{:.3},{},{},{},{},{},{},{:.4},{},{:.3}",
            rec.node,
            r.role.name(),
            r.run,
            r.runs,
            r.qps,
            r.rx_depth,
            r.bytes,
            r.iterations,
            r.completion.name(),
            opt_u(m.map(|m| u64::from(m.cq_count))),
            opt_u(m.map(|m| u64::from(m.cq_period))),
            r.elapsed_us,
            r.mbit_per_sec,
            r.usec_per_iter,
            rtt.map_or(0, |r| r.samples),
            opt_f(rtt.map(|r| r.typical_us)),
            opt_f(rtt.map(|r| r.avg_us)),
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
        .map(|rec| {
            let (r, m, rtt) = (&rec.line, rec.line.moderation, rec.line.rtt);
            serde_json::json!({
                "node": rec.node, "role": r.role.name(), "run": r.run, "runs": r.runs,
                "qps": r.qps, "rx_depth": r.rx_depth, "bytes": r.bytes,
                "iterations": r.iterations, "completion": r.completion.name(),
                "cq_count": m.map(|m| m.cq_count), "cq_period_us": m.map(|m| m.cq_period),
                "elapsed_us": r.elapsed_us, "mbit_per_sec": r.mbit_per_sec,
                "usec_per_iter": r.usec_per_iter, "rtt_samples": rtt.map_or(0, |r| r.samples),
                "rtt_typical_us": rtt.map(|r| r.typical_us), "rtt_avg_us": rtt.map(|r| r.avg_us),
                "cq_events": r.cq_events,
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
    let mut clients: Vec<&SrqLine> = records
        .iter()
        .map(|r| &r.line)
        .filter(|r| r.role == Role::Client)
        .collect();
    clients.sort_by_key(|r| r.run);
    for c in clients {
        let server = records
            .iter()
            .map(|r| &r.line)
            .find(|r| r.role == Role::Server && r.run == c.run)
            .map_or("-".to_string(), |r| {
                format!("{:.3}", r.interrupts_per_message)
            });
        let _ = writeln!(
            s,
            "{:>4} {:>12} {:>10} {:>10} {:>11.2} {:>11.2} {:>14.3} {:>14} {:>9}",
            c.run,
            setting(c),
            opt_f(c.rtt.map(|r| r.typical_us)),
            opt_f(c.rtt.map(|r| r.avg_us)),
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
    let reported = records
        .iter()
        .filter(|r| r.line.role == Role::Client)
        .count() as u32;
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
    // The boot media live outside the run directory, removed when the run ends.
    let media = crate::prepare::BootMedia::new()?;
    let guest = crate::prepare::GuestBuilder::new(&args.guest, &args.kernel)?.media_in(&media);
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
        let c = records
            .iter()
            .find(|r| r.line.role == Role::Client)
            .unwrap();
        assert_eq!((c.node, c.line.run), (1, 2));
        assert_eq!(setting(&c.line), "4/50");
        assert_eq!(c.line.rtt.map(|r| r.typical_us), Some(63.0));
        assert_eq!(c.line.interrupts, 42);
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
        let (r, bad) = collect(&[&line]);
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!((r[0].line.moderation, r[0].line.rtt), (None, None));
        assert_eq!(setting(&r[0].line), "-");
        let row = csv(&r);
        let row = row.lines().nth(1).unwrap();
        assert!(row.contains(",event,,,"), "{row}");
        assert!(
            row.contains(",0,,,40,"),
            "no round trips: 0 samples, empty cells: {row}"
        );
    }
}
