//! System test "delegation": `cargo qemu delegate` (docs/delegation.md), one boot of a
//! Linux guest running the delegate with three ibkern guests on it: a node running a short
//! delegation benchmark in each completion mode (poll, event, isr) with the RC ib_send_lat
//! baseline, and a ping-pong pair (two more ibkern nodes on the same delegate) whose plan
//! comes from the delegate. Every node takes its plan from the delegate's root and leaves
//! its results there; the host checks the tables and files and what landed in the root.
//! About 3.5 minutes under TCG (four guests; 205 s measured alone on a 2-core machine busy
//! with other work, builds done). Needs the Linux packages (out/linux, shared
//! with the "linux" tests), gcc and libibverbs-dev (ibk-rdv), cmake and libclang-dev (the
//! delegate); `.ci/setup` installs them. Run alone with
//! `cargo test -p ibkern-qemu --test delegation`.

mod support;

use std::path::Path;
use std::time::Duration;

use support::{boot, the_run, workspace_root, Table};

const LIMIT: Duration = Duration::from_secs(1500);

/// Every `console.log` under `root/results/<guid>/<run>/`.
fn results(root: &Path) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for node in std::fs::read_dir(root.join("results"))
        .expect("root/results")
        .flatten()
    {
        for run in std::fs::read_dir(node.path()).unwrap().flatten() {
            let log = run.path().join("console.log");
            let text =
                std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
            v.push((log.display().to_string(), text));
        }
    }
    v
}

#[test]
fn a_delegate_serves_a_benchmark_node_and_a_ping_pong_pair_in_one_boot() {
    let linux = workspace_root().join("out/linux");
    let linux = linux.to_str().unwrap().to_string();
    let run = boot(
        "delegate",
        "delegation",
        LIMIT,
        &[
            "--linux-dir",
            &linux,
            "--delegate-profile",
            "dev",
            "-n",
            "5",
            "--max-size",
            "256",
            "--outstanding",
            "8",
            "--pair-run",
            "ib_send_lat -c RC -s 64 -n 20",
        ],
    );
    assert_eq!(run.code(), Some(0), "{}", run.transcript());
    run.line_with_stderr("delegate: PASS");
    // The runner booted the nodes once the delegate listened, at its LID and QPN.
    let booted = run.line_with_stderr("the delegate listens on LID 0x2, rendezvous QPN 0x");
    assert!(booted.contains("delegate=0x2:0x"), "{}", run.transcript());
    // The benchmark node: every mode, the baseline's ratio, and its verdict.
    let verdict = run.line_with_stderr("ibkern0: delegate: PASS");
    assert!(
        verdict.contains("39 latency rows, 12 rate rows, null call / RC ib_send_lat "),
        "{}",
        run.transcript()
    );
    run.line_with_stderr("pair-client: pingpong: PASS 1 sizes, 0 aborted, 0 lost");
    run.line_with_stderr("pair-server: pingpong: PASS");
    for node in ["ibkern0", "pair-server", "pair-client", "linux"] {
        run.line_with_stderr(&format!("{node}: model violations: 0"));
    }

    let dir = the_run(&support::scratch_path("delegation"));
    // delegate.csv: a row per operation, size and mode, the rates and the baseline, the
    // model's PCIe transactions per call at both ends.
    let t = Table::read(&dir.join("delegate.csv"));
    let latency: Vec<&Vec<String>> = t.rows.iter().filter(|r| r[0] == "latency").collect();
    assert_eq!(latency.len(), 39);
    for mode in ["poll", "event", "isr"] {
        for op in ["null", "pread", "pwrite", "read", "write"] {
            assert!(
                latency
                    .iter()
                    .any(|r| t.get(r, "op") == op && t.get(r, "mode") == mode),
                "{op} {mode}"
            );
        }
    }
    let typical: f64 = t.get(latency[1], "t_typical_us").parse().unwrap();
    assert!(typical > 0.0);
    let mmio: f64 = t.get(latency[1], "node_mmio_writes").parse().unwrap();
    assert!(mmio >= 1.0, "a call rings at least one doorbell: {mmio}");
    let delegate_dma: f64 = t.get(latency[1], "delegate_dma_reads").parse().unwrap();
    assert!(
        delegate_dma >= 1.0,
        "the delegate's HCA reads its reply: {delegate_dma}"
    );
    assert_eq!(t.rows.iter().filter(|r| r[0] == "rate").count(), 12);
    let baseline = t
        .rows
        .iter()
        .find(|r| r[0] == "baseline")
        .expect("baseline row");
    let ratio: f64 = t.get(baseline, "ratio").parse().unwrap();
    assert!(ratio > 0.0, "{ratio}");
    for f in ["delegate.json", "delegate.svg", "linux.log", "ibkern0.log"] {
        assert!(dir.join(f).is_file(), "{f}");
    }

    // The delegate's root, copied out: the plans the guest wrote (the baseline's QPN added
    // to the benchmark node's) and every node's results.
    let root = dir.join("root");
    let plan = std::fs::read_to_string(root.join("plans/lid-4.conf")).unwrap();
    assert!(
        plan.contains("iters=5\n") && plan.contains("delegate_baseline=0x"),
        "{plan}"
    );
    let landed = results(&root);
    assert_eq!(landed.len(), 3, "{landed:?}");
    let with = |needle: &str| landed.iter().filter(|(_, t)| t.contains(needle)).count();
    // Each transcript starts as a saved console does, so `cargo qemu results` can say where
    // its figures came from.
    assert_eq!(with("INFO  boot: ibkern kernel "), 3);
    assert_eq!(with("delegate: PASS 39 latency rows"), 1);
    assert_eq!(
        with("ibkern-delegate-result {\"op\":\"pread\",\"mode\":\"isr\""),
        1
    );
    assert_eq!(with("pingpong: PASS"), 2);
    // The pair's, and the benchmark node's baseline (its own RC ib_send_lat).
    assert_eq!(
        with("ibkern-result {\"test\":\"send_lat\",\"transport\":\"RC\""),
        3
    );
    // The pair took their plans from the delegate.
    assert_eq!(with("delegate: plan plans/lid-"), 3);
}
