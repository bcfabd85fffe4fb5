//! System tests "compare": Linux (Debian's mlx4 stack, perftest) and ibkern on the same
//! emulated fabric through `cargo qemu compare`, one size per transport (about 30 s on an
//! idle machine: one Linux pair boot and two ibkern pair boots). Run alone with
//! `cargo test -p ibkern-qemu --test compare`; `.ci/run` runs it through `cargo test
//! --workspace`. The Linux packages are downloaded into out/linux the first time (shared
//! with the "linux" tests); if that fails the test fails with apt's message.

mod support;

use std::fs;
use std::time::Duration;

use support::{kernel, runner, scratch, the_run, workspace_root};

/// Three boots in sequence plus one size each; generous for a loaded machine.
const LIMIT: Duration = Duration::from_secs(300);

#[test]
fn compare_runs_both_stacks_and_writes_one_table_csv_svg_and_ready_times() {
    let out = scratch("compare");
    let kernel = kernel().to_str().unwrap().to_string();
    let out_s = out.to_str().unwrap().to_string();
    let linux = workspace_root().join("out/linux");
    let linux_s = linux.to_str().unwrap().to_string();
    let run = runner(
        &[
            "compare",
            "--kernel",
            &kernel,
            "--out",
            &out_s,
            "--linux-dir",
            &linux_s,
            "-s",
            "64",
            "-n",
            "20",
            "--timeout",
            "300",
            "--trace",
        ],
        LIMIT,
    );
    assert_eq!(run.code(), Some(0), "{}", run.transcript());
    let run_dir = the_run(&out);
    run.line_with_stderr("compare: PASS");
    run.line_with_stderr("Linux guests: PASS");

    // The table: per transport one row of each stack for 64 bytes, 20 iterations.
    for t in ["UD", "UC"] {
        let block = run
            .stdout
            .split(&format!("ib_send_lat over {t}:"))
            .nth(1)
            .unwrap_or_else(|| panic!("no {t} table\n{}", run.transcript()));
        for stack in ["ibkern", "Linux"] {
            let row = block
                .lines()
                .find(|l| l.split_whitespace().next() == Some(stack))
                .unwrap_or_else(|| panic!("no {stack} {t} row\n{}", run.transcript()));
            let w: Vec<&str> = row.split_whitespace().collect();
            assert_eq!((w[1], w[2]), ("64", "20"), "{row}");
        }
    }

    // compare.csv: 4 rows (2 stacks x 2 transports); latency present; the model saw MMIO
    // writes and one packet sent per iteration or more on both HCAs of both stacks.
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
            .any(|l| l.starts_with("# node ibkern UD client: ibkern 0.1.0 commit ")),
        "{csv}"
    );
    let mut lines = csv.lines().filter(|l| !l.starts_with('#'));
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 4, "{csv}");
    for stack in ["ibkern", "Linux"] {
        for t in ["UD", "UC"] {
            let r = rows
                .iter()
                .find(|r| r[0] == stack && r[1] == t)
                .unwrap_or_else(|| panic!("no {stack} {t} row in\n{csv}"));
            assert_eq!((r[2], r[3]), ("64", "20"));
            let typical: f64 = r[col("t_typical_us")].parse().unwrap();
            assert!(typical > 0.0, "{csv}");
            for node in ["server", "client"] {
                let w: f64 = r[col(&format!("{node}_mmio_writes_per_iter"))]
                    .parse()
                    .unwrap();
                let tx: f64 = r[col(&format!("{node}_packets_sent_per_iter"))]
                    .parse()
                    .unwrap();
                assert!(
                    w >= 1.0,
                    "{stack} {t} {node}: {w} MMIO writes per iteration\n{csv}"
                );
                assert!(
                    tx >= 1.0,
                    "{stack} {t} {node}: {tx} packets per iteration\n{csv}"
                );
            }
        }
    }

    // compare.svg: one series per stack and transport.
    let svg = fs::read_to_string(run_dir.join("compare.svg")).unwrap();
    assert!(svg.contains("not the network"), "{svg}");
    for s in ["ibkern UD", "ibkern UC", "Linux UD", "Linux UC"] {
        assert!(
            svg.contains(&format!("data-transport=\"{s}\"")),
            "{s}\n{svg}"
        );
    }

    // hca-ready.csv: both Linux guests and the four ibkern boots, each with a time.
    let ready = fs::read_to_string(run_dir.join("hca-ready.csv")).unwrap();
    assert!(ready.starts_with("# source: emulated"), "{ready}");
    let times: Vec<f64> = ready
        .lines()
        .filter(|l| !l.starts_with('#'))
        .skip(1)
        .map(|l| l.rsplit(',').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(times.len(), 6, "{ready}");
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
