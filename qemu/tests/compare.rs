//! System tests "compare": Linux (Debian's mlx4 stack, perftest) and ibkern on the same
//! emulated fabric through `cargo qemu compare --test all,send_bw,write_bw`: every latency
//! test both stacks run (send_lat over UD, UC and RC, write_lat over UC and RC, read_lat,
//! atomic_lat with both operations) and send_bw (UD, UC, RC) and write_bw (UC, RC), one
//! size each, one Linux pair boot and one ibkern pair boot. Run alone
//! with `cargo test -p ibkern-qemu --test compare`; `.ci/run` runs it through `cargo test
//! --workspace`. The Linux packages are downloaded into out/linux the first time (shared
//! with the "linux" tests); if that fails the test fails with apt's message.

mod support;

use std::fs;
use std::time::Duration;

use support::{kernel, runner, scratch, the_run, workspace_root};

/// Two boots in sequence, thirteen short runs each; generous for a loaded machine.
const LIMIT: Duration = Duration::from_secs(600);

/// The cases of `--test all,send_bw,write_bw`, as the table and files name them.
const CASES: [&str; 13] = [
    "ib_send_lat -c UD",
    "ib_send_lat -c UC",
    "ib_send_lat -c RC",
    "ib_write_lat -c UC",
    "ib_write_lat -c RC",
    "ib_read_lat -c RC",
    "ib_atomic_lat -c RC -A FETCH_AND_ADD",
    "ib_atomic_lat -c RC -A CMP_AND_SWAP",
    "ib_send_bw -c UD",
    "ib_send_bw -c UC",
    "ib_send_bw -c RC",
    "ib_write_bw -c UC",
    "ib_write_bw -c RC",
];

/// Whether a case (or a CSV test name) is a bandwidth test's.
fn is_bw(name: &str) -> bool {
    name.contains("_bw")
}

const ITERS: u64 = 10;

#[test]
fn compare_runs_every_latency_and_two_bandwidth_tests_on_both_stacks_with_pcie_and_port_counts() {
    let out = scratch("compare");
    let kernel = kernel().to_str().unwrap().to_string();
    let out_s = out.to_str().unwrap().to_string();
    let linux = workspace_root().join("out/linux");
    let linux_s = linux.to_str().unwrap().to_string();
    let iters = ITERS.to_string();
    let run = runner(
        &[
            "compare",
            "--test",
            "all,send_bw,write_bw",
            "--kernel",
            &kernel,
            "--out",
            &out_s,
            "--linux-dir",
            &linux_s,
            "-s",
            "64",
            "-n",
            &iters,
            "--timeout",
            "500",
            "--trace",
        ],
        LIMIT,
    );
    assert_eq!(run.code(), Some(0), "{}", run.transcript());
    let run_dir = the_run(&out);
    run.line_with_stderr("compare: PASS");
    run.line_with_stderr("Linux guests: PASS");
    // The cases after one warm-up run, in one boot pair.
    run.line_with_stderr("ibkern: the whole plan (14 runs) in one boot pair");

    // The table: per case one row of each stack (64 bytes, 8 for atomics), then the client
    // port's traffic as each stack read it.
    for case in CASES {
        let title = if is_bw(case) {
            format!("{case}: client bandwidth [MB/sec] and message rate [Mpps] | model PCIe transactions per message")
        } else {
            format!("{case}: client latency")
        };
        let block = run
            .stdout
            .split(&title)
            .nth(1)
            .and_then(|b| b.split("\n\n").next())
            .unwrap_or_else(|| panic!("no {case} table\n{}", run.transcript()));
        let bytes = if case.contains("atomic") { "8" } else { "64" };
        for stack in ["ibkern", "Linux"] {
            let row = block
                .lines()
                .find(|l| l.split_whitespace().next() == Some(stack) && !l.contains(" xmit "))
                .unwrap_or_else(|| panic!("no {stack} {case} row\n{}", run.transcript()));
            let w: Vec<&str> = row.split_whitespace().collect();
            assert_eq!((w[1], w[2]), (bytes, iters.as_str()), "{row}");
            if is_bw(case) {
                // BW peak, BW average, MsgRate: positive figures.
                for f in &w[3..6] {
                    let v: f64 = f.parse().unwrap_or_else(|_| panic!("{row}"));
                    assert!(v > 0.0, "{row}");
                }
            }
            let port = block
                .lines()
                .find(|l| l.split_whitespace().next() == Some(stack) && l.contains(" xmit "))
                .unwrap_or_else(|| panic!("no {stack} {case} port line\n{block}"));
            assert!(port.contains(" pkts | rcv "), "{port}");
        }
    }

    // compare.csv: 26 rows (2 stacks x 13 cases); latency or bandwidth present; the model
    // saw MMIO writes and one packet sent per iteration (message) or more on the client HCAs
    // of both stacks, and the servers' answers.
    let csv = fs::read_to_string(run_dir.join("compare.csv")).unwrap();
    // Provenance first: emulated, what the times measure, the Linux and ibkern nodes.
    assert!(csv.starts_with("# source: emulated (QEMU tcg"), "{csv}");
    assert!(
        csv.contains("# NOTE: emulated: times measure QEMU"),
        "{csv}"
    );
    assert!(csv.contains("# node Linux linux0: "), "{csv}");
    assert!(
        csv.lines()
            .any(|l| l.starts_with("# node ibkern client: ibkern 0.1.0 commit ")),
        "{csv}"
    );
    let mut lines = csv.lines().filter(|l| !l.starts_with('#'));
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 26, "{csv}");
    for stack in ["ibkern", "Linux"] {
        let mine: Vec<&Vec<&str>> = rows.iter().filter(|r| r[0] == stack).collect();
        assert_eq!(mine.len(), 13, "{csv}");
        let mut counted = 0;
        let mut bw_counted = 0;
        for r in mine {
            let bw = is_bw(r[col("test")]);
            let figure = if bw { "bw_avg_mbs" } else { "t_typical_us" };
            let v: f64 = r[col(figure)].parse().unwrap();
            assert!(v > 0.0, "{csv}");
            if bw {
                let rate: f64 = r[col("msg_rate_mpps")].parse().unwrap();
                assert!(rate > 0.0, "{csv}");
                assert_eq!(r[col("t_typical_us")], "", "{csv}");
            }
            assert_eq!(r[col("iterations")], iters, "{csv}");
            // A size whose table header reached the runner late has no counts, and the
            // runner says so.
            if r[col("client_mmio_writes_per_iter")].is_empty() {
                let (test, bytes) = (r[col("test")], r[col("bytes")]);
                assert!(
                    run.stderr
                        .lines()
                        .any(|l| l.contains(&format!("{stack} ib_{test} "))
                            && l.contains(&format!(" {bytes} B: PCIe counts left out"))),
                    "{}",
                    run.transcript()
                );
                continue;
            }
            counted += 1;
            let per = |c: &str| -> f64 { r[col(c)].parse().unwrap() };
            if bw {
                bw_counted += 1;
                // The client posts every message and sends at least one packet for it; over
                // RC the server's HCA acknowledges.
                assert!(per("client_mmio_writes_per_iter") > 0.0, "{stack} {r:?}");
                assert!(per("client_packets_sent_per_iter") >= 1.0, "{stack} {r:?}");
                if r[col("transport")] == "RC" {
                    assert!(per("server_packets_sent_per_iter") > 0.0, "{stack} {r:?}");
                }
                continue;
            }
            // The client posts on every test; the server's software answers SENDs and
            // WRITEs, its HCA alone answers READs and atomics (at least one DMA per
            // iteration: the data read, or the atomic's read and write).
            let one_sided = r[col("test")] == "read_lat" || r[col("test")] == "atomic_lat";
            assert!(per("client_mmio_writes_per_iter") >= 1.0, "{stack} {r:?}");
            assert!(per("client_packets_sent_per_iter") >= 1.0, "{stack} {r:?}");
            assert!(per("server_packets_sent_per_iter") >= 1.0, "{stack} {r:?}");
            if one_sided {
                assert!(per("server_dma_reads_per_iter") >= 1.0, "{stack} {r:?}");
            } else {
                assert!(per("server_mmio_writes_per_iter") >= 1.0, "{stack} {r:?}");
            }
        }
        assert!(counted >= 6, "{stack}: most sizes counted\n{csv}");
        assert!(bw_counted >= 2, "{stack}: bandwidth sizes counted\n{csv}");
    }

    // ports.csv: each node's port traffic over each run, read by each stack, at least one
    // packet each way per iteration.
    let ports = fs::read_to_string(run_dir.join("ports.csv")).unwrap();
    let prows: Vec<Vec<&str>> = ports
        .lines()
        .filter(|l| !l.starts_with('#'))
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    for case in CASES {
        for (stack, node) in [
            ("ibkern", "client"),
            ("ibkern", "server"),
            ("Linux", "client"),
            ("Linux", "server"),
        ] {
            let r = prows
                .iter()
                .find(|r| r[0] == stack && r[1] == case && r[2] == node)
                .unwrap_or_else(|| panic!("no {stack} {node} {case} in\n{ports}"));
            let v: Vec<u64> = r[3..7]
                .iter()
                .map(|x| x.parse().unwrap_or_else(|_| panic!("{r:?}\n{ports}")))
                .collect();
            // A bandwidth test's traffic goes one way (and RC's acknowledgements back).
            let (sends, receives) = match (is_bw(case), node) {
                (false, _) => (true, true),
                (true, "client") => (true, false),
                (true, _) => (false, true),
            };
            assert!(
                (!sends || v[2] >= ITERS)
                    && (!receives || v[3] >= ITERS)
                    && v[0] >= 6 * v[2]
                    && v[1] >= 6 * v[3],
                "{stack} {node} {case}: {v:?} (a packet is at least 6 words)"
            );
        }
    }
    // Each ibkern console has one ibkern-port line per run (the warm-up's too).
    let client_log = fs::read_to_string(run_dir.join("client.log")).unwrap();
    let port_lines: Vec<&str> = client_log
        .lines()
        .filter(|l| l.starts_with("ibkern-port {"))
        .collect();
    assert_eq!(port_lines.len(), 14, "{client_log}");
    assert!(port_lines
        .iter()
        .all(|l| l.contains("\"role\":\"client\"") && l.contains("\"extended\":true")));
    let server_log = fs::read_to_string(run_dir.join("server.log")).unwrap();
    let server_lines = server_log
        .lines()
        .filter(|l| l.starts_with("ibkern-port {") && l.contains("\"role\":\"server\""))
        .count();
    assert_eq!(server_lines, 14, "{server_log}");

    // compare.svg: one series per stack and case.
    let svg = fs::read_to_string(run_dir.join("compare.svg")).unwrap();
    assert!(svg.contains("not the network"), "{svg}");
    for s in [
        "ibkern send_lat UD",
        "Linux send_lat RC",
        "ibkern atomic_lat RC -A CMP_AND_SWAP",
        "Linux read_lat RC",
    ] {
        assert!(
            svg.contains(&format!("data-transport=\"{s}\"")),
            "{s}\n{svg}"
        );
    }

    // hca-ready.csv: both Linux guests and both ibkern nodes, each with a time.
    let ready = fs::read_to_string(run_dir.join("hca-ready.csv")).unwrap();
    assert!(ready.starts_with("# source: emulated"), "{ready}");
    let times: Vec<f64> = ready
        .lines()
        .filter(|l| !l.starts_with('#'))
        .skip(1)
        .map(|l| l.rsplit(',').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(times.len(), 4, "{ready}");
    assert!(times.iter().all(|&t| t > 0.1 && t < 300.0), "{ready}");

    // --trace: both stacks' traces on the same model, and the conformance check of the real
    // kernel against Linux (this run's trace and the checked-in one) under the departures
    // file; exit 0 above means no departure outside it.
    for (file, stack) in [("linux.trace", "Linux"), ("ibkern.trace", "ibkern")] {
        let t = fs::read_to_string(run_dir.join(file)).unwrap();
        for prefix in [
            "cmd INIT_HCA ",
            "ctx QPC UD ",
            "ctx QPC UC ",
            "ctx QPC RC ",
            "wqe UD SEND ",
        ] {
            assert!(
                t.lines().any(|l| l.starts_with(prefix)),
                "{stack}: no {prefix:?} in {file}\n{t}"
            );
        }
    }
    let report = fs::read_to_string(run_dir.join("conformance.txt")).unwrap();
    assert!(
        report.contains("(0 not in the departures file)"),
        "{report}"
    );
    run.line_with_stderr("conformance: ");
}
