//! System test: the full `-a` sweep of UD and UC under 1 % packet loss on the emulated
//! fabric with the defaults, `cargo qemu pingpong -c UD,UC -a -n 20 --drop-probability 0.01
//! --seed 7` and nothing else. Both sweeps must run to their last size, every size must
//! carry its losses into the files and the tables, the counts must agree between the result
//! lines, the consoles' summaries and the runner, and the run must end cleanly (exit 0,
//! every final handshake answered).
//!
//! Under 1 % loss a UC message of P packets arrives whole with probability 0.99^P, so the
//! sizes from 1 MiB up (512 packets and more) never get through and are given up on their
//! loss rate after ten losses, long before `loss_limit` (100); the small ones (at most two
//! packets) lose too little to be given up. Each loss waits what its size's round trips
//! take (at least a tenth of the emulated runs' 2 s bound), not the bound.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::time::Duration;

use serde_json::Value;
use support::{run_into, the_run, Table};

/// One boot pair (about 10 s) plus both sweeps.
const LIMIT: Duration = Duration::from_secs(400);
const ITERS: u64 = 20;
/// The default `loss_limit`.
const LOSS_LIMIT: u64 = 100;

/// One node's result for one size, from `latency.json`.
#[derive(Debug)]
struct Size {
    samples: u64,
    has_stats: bool,
    lost: u64,
    retries: u64,
    aborted: bool,
}

fn num(r: &Value, key: &str) -> u64 {
    r[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a count in {r}"))
}

/// `transport -> role -> bytes -> Size`.
type Sweeps = BTreeMap<String, BTreeMap<String, BTreeMap<u64, Size>>>;

fn sweeps(json: &Value) -> Sweeps {
    let mut out = Sweeps::new();
    for r in json["results"].as_array().expect("results array") {
        assert_eq!(r["test"], "send_lat", "{r}");
        assert_eq!(num(r, "iterations"), ITERS, "{r}");
        let size = Size {
            samples: num(r, "samples"),
            has_stats: !r["t_typical_us"].is_null(),
            lost: num(r, "lost"),
            retries: num(r, "retries"),
            aborted: r["aborted"].as_bool().expect("aborted is a bool"),
        };
        let prev = out
            .entry(r["transport"].as_str().unwrap().to_string())
            .or_default()
            .entry(r["role"].as_str().unwrap().to_string())
            .or_default()
            .insert(num(r, "bytes"), size);
        assert!(prev.is_none(), "a size reported twice: {r}");
    }
    out
}

/// The verdict of run `run` of a two-run plan (`pingpong: run R/2 pass 1/1: PASS N sizes, A
/// aborted, L lost, R retries, K late repeats`) of a console, as its five counts.
fn pass_line(console: &str, run: usize) -> [u64; 5] {
    let prefix = format!("pingpong: run {run}/2 pass 1/1: PASS ");
    let line = console
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line in\n{console}"));
    let head = line
        .strip_prefix(&prefix)
        .unwrap()
        .split(';')
        .next()
        .unwrap();
    let n: Vec<u64> = head
        .split(", ")
        .map(|part| part.split(' ').next().unwrap().parse().unwrap())
        .collect();
    n.try_into().unwrap_or_else(|n| panic!("{n:?} from {line}"))
}

#[test]
fn ud_and_uc_sweeps_under_one_percent_loss_with_the_defaults_run_to_the_end() {
    let iters = ITERS.to_string();
    let (run, out) = run_into(
        "pingpong",
        "loss-sweep",
        LIMIT,
        &[
            "-c",
            "UD,UC",
            "-a",
            "-n",
            &iters,
            "--drop-probability",
            "0.01",
            "--seed",
            "7",
        ],
    );
    // Aborted sizes do not fail a run; on a fabric told to drop packets, losses do not
    // either unless --max-losses is given.
    assert_eq!(run.code(), Some(0), "{}", run.transcript());
    let t = run.transcript();
    for name in ["plan server", "plan client"] {
        assert!(
            run.stderr.contains(&format!("{name}: model violations: 0")),
            "{t}"
        );
    }
    // The model counts per HCA the packets nobody could take (`pkts tx/rx/undeliverable
    // a/b/c`; mostly the rendezvous' probes before the server listens).
    let dropped: u64 = run
        .stderr
        .lines()
        .filter_map(|l| l.split("tx/rx/undeliverable ").nth(1))
        .map(|rest| {
            let counts = rest.split(',').next().unwrap();
            counts.rsplit('/').next().unwrap().parse::<u64>().unwrap()
        })
        .sum();
    assert!(dropped > 0, "{t}");
    assert!(!run.stdout.contains("PeerLost"), "{t}");
    assert!(!run.stdout.contains("pingpong: FAIL"), "{t}");

    let dir = the_run(&out);
    let json: Value =
        serde_json::from_str(&fs::read_to_string(dir.join("latency.json")).unwrap()).unwrap();
    let all = sweeps(&json);
    let mtu = json["results"][0]["mtu"].as_u64().unwrap();
    let expect = |max: u64| -> Vec<u64> { (1..=max.trailing_zeros()).map(|e| 1 << e).collect() };

    // Both sweeps ran in one boot pair: UD is run 1 of the plan, UC run 2.
    for (nth, transport, max) in [(1, "UD", mtu), (2, "UC", 8 << 20)] {
        let roles = &all[transport];
        for role in ["server", "client"] {
            let sizes = &roles[role];
            // Every size of the sweep was reported by both nodes: the sweep ran to its end.
            assert_eq!(
                sizes.keys().copied().collect::<Vec<_>>(),
                expect(max),
                "{transport} {role}"
            );
            for (bytes, s) in sizes {
                let what = format!("{transport} {role} {bytes} B: {s:?}");
                if s.aborted {
                    assert!(!s.has_stats && s.samples == 0, "{what}");
                } else if !s.has_stats {
                    // A size that finished with so many losses that too few clean intervals
                    // were left for perftest's statistics (a server sees a heavy UC size's
                    // retries and duplicates): no figures, its losses and retries counted.
                    assert!(s.samples == 0 && s.lost + s.retries > 0, "{what}");
                } else {
                    // Each loss or retry removes at most the one interval holding its wait
                    // (a server counts a repeated request as a retry only: its answer was
                    // lost or late; a client takes a loss back when the late answer comes).
                    assert!(s.samples < ITERS, "{what}");
                    assert!(s.samples + s.lost + s.retries >= ITERS - 1, "{what}");
                    if s.lost == 0 && s.retries == 0 {
                        assert_eq!(s.samples, ITERS - 1, "{what}");
                    }
                }
                if role == "client" {
                    // The client re-sends after every loss but the one that aborts a size;
                    // a re-send whose first try was only late counts no loss.
                    assert!(s.lost <= s.retries + u64::from(s.aborted), "{what}");
                    if s.aborted {
                        // Given up on its loss rate, long before the loss limit.
                        assert!(s.lost < LOSS_LIMIT / 2, "{what}");
                    }
                }
            }
            // The console's summary is the sum of its sizes (a server's repeats of a last
            // answer after its size was reported are counted apart; a client has none).
            let log = format!("{role}.log");
            let console = fs::read_to_string(dir.join(&log)).unwrap();
            assert!(!console.contains("PeerLost"), "{log}");
            let [n, aborted, lost, retries, late] = pass_line(&console, nth);
            // The final handshake was answered, after an aborted last size too.
            assert!(!console.contains("Done not answered"), "{log}");
            let sum = [
                sizes.len() as u64,
                sizes.values().filter(|s| s.aborted).count() as u64,
                sizes.values().map(|s| s.lost).sum(),
                sizes.values().map(|s| s.retries).sum(),
            ];
            assert_eq!([n, aborted, lost, retries], sum, "{log}");
            if role == "client" {
                assert_eq!(late, 0, "{log}");
            }
        }
        // The runner's table closes with the client's totals.
        let client = &roles["client"];
        let totals = format!(
            " lost {}, retries {}, aborted sizes {};",
            client.values().map(|s| s.lost).sum::<u64>(),
            client.values().map(|s| s.retries).sum::<u64>(),
            client.values().filter(|s| s.aborted).count()
        );
        assert!(run.stdout.contains(&totals), "{transport}: {totals}\n{t}");
    }

    // UD (one packet per message) and the small UC sizes (at most two packets) lose too
    // little to be aborted.
    for (bytes, s) in all["UD"]["client"]
        .iter()
        .chain(all["UC"]["client"].iter().filter(|(b, _)| **b <= 4096))
    {
        assert!(!s.aborted, "{bytes} B: {s:?}");
    }
    // From 64 KiB (32 packets) every UC size loses; from 1 MiB none gets through.
    for (bytes, s) in &all["UC"]["client"] {
        if *bytes >= 64 << 10 {
            assert!(s.lost > 0, "UC {bytes} B: {s:?}");
        }
        if *bytes >= 1 << 20 {
            assert!(s.aborted, "UC {bytes} B: {s:?}");
            assert!(
                run.stdout.contains(&format!(
                    " {bytes:<7} {ITERS}          (aborted: {} lost)",
                    s.lost
                )),
                "UC {bytes} B row\n{t}"
            );
        }
    }

    // latency.csv carries the same per-size losses.
    let csv = Table::read(&dir.join("latency.csv"));
    for f in &csv.rows {
        let line = f.join(",");
        let bytes: u64 = csv.get(f, "bytes").parse().unwrap();
        let s = &all[csv.get(f, "transport")][csv.get(f, "role")][&bytes];
        assert_eq!(csv.get(f, "lost"), s.lost.to_string(), "{line}");
        assert_eq!(csv.get(f, "retries"), s.retries.to_string(), "{line}");
        assert_eq!(csv.get(f, "aborted"), s.aborted.to_string(), "{line}");
    }
    assert_eq!(
        csv.rows.len(),
        2 * (expect(mtu).len() + expect(8 << 20).len()),
        "{}",
        csv.text
    );
}
