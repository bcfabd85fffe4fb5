//! System test "mixed": a Linux guest (Debian's mlx4 stack, the runner's `ibk-rdv-client` on
//! rdma-core's verbs) against an ibkern guest on one emulated fabric through `cargo qemu
//! mixed`, UD and UC, one size (about 20-30 s: two boot pairs). Needs gcc and
//! libibverbs-dev on the host (.ci/setup installs them) and the Linux packages (downloaded
//! into out/linux the first time, shared with the "linux" tests). Run alone with
//! `cargo test -p ibkern-qemu --test mixed`.

mod support;

use std::time::Duration;

use support::{kernel, runner, scratch, workspace_root};

const LIMIT: Duration = Duration::from_secs(240);

#[test]
fn linux_client_and_ibkern_server_ping_pong_with_checked_data() {
    let out = scratch("mixed");
    let kernel = kernel().to_str().unwrap().to_string();
    let out_s = out.to_str().unwrap().to_string();
    let linux = workspace_root().join("out/linux");
    let linux_s = linux.to_str().unwrap().to_string();
    let run = runner(
        &[
            "mixed",
            "--kernel",
            &kernel,
            "--out",
            &out_s,
            "--linux-dir",
            &linux_s,
            "-c",
            "UD,UC",
            "-s",
            "1024",
            "-n",
            "20",
            "--timeout",
            "240",
        ],
        LIMIT,
    );
    assert_eq!(run.code(), Some(0), "{}", run.transcript());
    run.line_with_stderr("mixed: PASS");
    for t in ["UD", "UC"] {
        // The Linux client: every answer's tag and payload checked, nothing lost.
        run.line_with_stderr(&format!(
            "{t} linux: ibk-rdv-client: PASS {t} 1 sizes, 20 iterations each, every answer checked, 0 lost"
        ));
        // The ibkern server (verify=1: every request's payload checked) met the Linux node
        // (LID 4) and ended cleanly; the model saw no violation on either HCA.
        run.line_with_stderr(&format!(
            "{t} ibkern server: pingpong: PASS 1 sizes, 0 aborted, 0 lost, 0 retries; local lid 2"
        ));
        assert!(
            run.line_with_stderr(&format!("{t} ibkern server: pingpong: PASS"))
                .contains("peer lid 4"),
            "{}",
            run.transcript()
        );
        run.line_with_stderr(&format!("{t} ibkern: model violations: 0"));
        run.line_with_stderr(&format!("{t} linux: model violations: 0"));
        run.line_with_stderr(&format!("{t} linux: PASS"));
    }
    // Both sides printed their perftest row for the size.
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("linux:  1024 ") || l.starts_with("linux:  1024\t")),
        "{}",
        run.transcript()
    );
    assert!(
        run.stdout.lines().any(|l| l.starts_with("ibkern:  1024 ")),
        "{}",
        run.transcript()
    );
}
