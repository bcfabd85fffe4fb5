//! System test: rdma-core's `ibv_srq_pingpong` as ibkern runs it (`cargo qemu pingpong
//! --test srq_pingpong`), two guests on the emulated fabric, in event mode with a two-setting
//! CQ-moderation sweep; the consoles, the table and srq.csv checked.

mod support;

use std::fs;
use std::time::Duration;

use support::{run_into, the_run, Table};

/// One boot pair plus two short runs.
const LIMIT: Duration = Duration::from_secs(400);

#[test]
fn srq_pingpong_with_events_and_a_moderation_sweep() {
    let (run, out) = run_into(
        "pingpong",
        "srq-pingpong",
        LIMIT,
        &[
            "--test",
            "srq_pingpong",
            "-q",
            "2",
            "-r",
            "4",
            "-s",
            "64",
            "-n",
            "20",
            "-e",
            "--cq-moderation",
            "0/0,4/16",
            "--timeout",
            "300",
        ],
    );
    let t = run.transcript();
    assert_eq!(run.code(), Some(0), "{t}");
    let dir = the_run(&out);
    for node in ["server", "client"] {
        let log = fs::read_to_string(dir.join(format!("srq-{node}.log"))).unwrap();
        for (i, setting) in ["0/0", "4/16"].iter().enumerate() {
            let head = format!("srq_pingpong: run {}/2: ", i + 1);
            assert!(
                log.lines().any(|l| l.starts_with(&head)
                    && l.contains("ibv_srq_pingpong -q 2 -r 4 -s 64 -n 20 -e")
                    && l.contains(&format!("(cq_moderation {setting})"))),
                "{node}: {head}\n{log}"
            );
            assert!(log.contains(&format!("{head}PASS")), "{node}:\n{log}");
        }
        // The example's figures: 2 * 20 * 64 bytes, 20 iters.
        assert_eq!(
            log.lines()
                .filter(|l| l.starts_with("2560 bytes in ") && l.ends_with(" Mbit/sec"))
                .count(),
            2,
            "{node}:\n{log}"
        );
        assert_eq!(
            log.lines()
                .filter(|l| l.starts_with("20 iters in ") && l.ends_with(" usec/iter"))
                .count(),
            2,
            "{node}:\n{log}"
        );
        assert_eq!(
            log.matches("  local address:  LID 0x").count(),
            4,
            "two QPs per run: {node}"
        );
        assert!(
            log.contains("pingpong: PASS srq_pingpong 2 runs"),
            "{node}:\n{log}"
        );
    }
    assert!(
        run.stdout
            .contains("--- srq_pingpong (ibv_srq_pingpong): per run"),
        "{t}"
    );
    // One row per run and node; event mode on a node that takes interrupts: every run
    // counted some, and took completion events.
    let csv = Table::read(&dir.join("srq.csv"));
    assert_eq!(csv.rows.len(), 4, "{}", csv.text);
    let col = |name: &str| csv.header.iter().position(|h| h == name).unwrap();
    for row in &csv.rows {
        assert_eq!(row[col("completion")], "event", "{row:?}");
        assert_eq!(row[col("iterations")], "20", "{row:?}");
        let irqs: u64 = row[col("interrupts")].parse().unwrap();
        let events: u64 = row[col("cq_events")].parse().unwrap();
        assert!(irqs > 0 && events > 0, "{row:?}");
        let per: f64 = row[col("interrupts_per_message")].parse().unwrap();
        assert!((per - irqs as f64 / 20.0).abs() < 1e-3, "{row:?}");
    }
    let settings: Vec<(String, String)> = csv
        .rows
        .iter()
        .map(|r| (r[col("cq_count")].clone(), r[col("cq_period_us")].clone()))
        .collect();
    assert!(
        settings.contains(&("4".into(), "16".into())),
        "{settings:?}"
    );
    assert!(dir.join("srq.json").exists());
}

/// A plan of two `ibv_srq_pingpong` lines (polling with 3 QPs, then events with a
/// moderation setting on one QP) in one boot pair: the server follows both.
#[test]
fn a_plan_of_srq_runs_in_one_boot_pair() {
    let lines = [
        "ibv_srq_pingpong -q 3 -r 6 -s 128 -n 30",
        "ibv_srq_pingpong -q 1 -r 2 -s 64 -n 10 -e --cq-moderation 2/8",
    ];
    let mut argv = vec!["--test", "srq_pingpong", "--timeout", "300"];
    let sets: Vec<String> = lines.iter().map(|l| format!("run={l}")).collect();
    for s in &sets {
        argv.extend_from_slice(&["--set", s]);
    }
    let (run, out) = run_into("pingpong", "srq-plan", LIMIT, &argv);
    let t = run.transcript();
    assert_eq!(run.code(), Some(0), "{t}");
    let dir = the_run(&out);
    let client = fs::read_to_string(dir.join("srq-client.log")).unwrap();
    let server = fs::read_to_string(dir.join("srq-server.log")).unwrap();
    for (log, node) in [(&client, "client"), (&server, "server")] {
        assert!(
            log.contains("srq_pingpong: run 1/2: ibv_srq_pingpong -q 3 -r 6 -s 128 -n 30\n"),
            "{node}:\n{log}"
        );
        assert!(
            log.contains(
                "srq_pingpong: run 2/2: ibv_srq_pingpong -q 1 -r 2 -s 64 -n 10 -e (cq_moderation 2/8)"
            ),
            "{node}:\n{log}"
        );
        assert!(log.contains("7680 bytes in "), "2 * 30 * 128: {node}");
        assert!(log.contains("1280 bytes in "), "2 * 10 * 64: {node}");
        assert!(
            log.contains("pingpong: PASS srq_pingpong 2 runs"),
            "{node}:\n{log}"
        );
    }
    assert!(
        client.contains("srq_pingpong client: a plan of 2 runs"),
        "{client}"
    );
    let csv = Table::read(&dir.join("srq.csv"));
    assert_eq!(csv.rows.len(), 4, "{}", csv.text);
    let col = |name: &str| csv.header.iter().position(|h| h == name).unwrap();
    for row in &csv.rows {
        let (completion, count) = (&row[col("completion")], &row[col("cq_count")]);
        match row[col("run")].as_str() {
            "1" => assert!(completion == "poll" && count.is_empty(), "{row:?}"),
            "2" => assert!(completion == "event" && count == "2", "{row:?}"),
            r => panic!("run {r}: {row:?}"),
        }
    }
}
