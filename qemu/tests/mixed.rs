//! System test "mixed": a Linux guest (Debian's mlx4 stack, the runner's `ibk-rdv` on
//! rdma-core's verbs) against an ibkern guest on one emulated fabric through `cargo qemu
//! mixed`, in both directions (Linux client, Linux server), UD and UC, one size (about
//! 20-30 s each: two boot pairs). Needs gcc and
//! libibverbs-dev on the host (.ci/setup installs them) and the Linux packages (downloaded
//! into out/linux the first time, shared with the "linux" tests). Run alone with
//! `cargo test -p ibkern-qemu --test mixed`.

mod support;

use std::time::Duration;

use support::{boot, workspace_root, Run};

const LIMIT: Duration = Duration::from_secs(240);

/// `cargo qemu mixed` for UD and UC, 1024 B, 20 iterations, the Linux node in `role` (one
/// run at a time: concurrent TCG guests starve each other).
fn mixed(scratch_name: &str, role: &str) -> Run {
    let linux = workspace_root().join("out/linux");
    let linux_s = linux.to_str().unwrap().to_string();
    boot(
        "mixed",
        scratch_name,
        LIMIT,
        &[
            "--linux-dir",
            &linux_s,
            "--linux-role",
            role,
            "-c",
            "UD,UC",
            "-s",
            "1024",
            "-n",
            "20",
        ],
    )
}

#[test]
fn linux_client_and_ibkern_server_ping_pong_with_checked_data() {
    let run = mixed("mixed", "client");
    assert_eq!(run.code(), Some(0), "{}", run.transcript());
    run.line_with_stderr("mixed: PASS");
    for t in ["UD", "UC"] {
        // The Linux client: every answer's tag and payload checked, nothing lost.
        run.line_with_stderr(&format!(
            "{t} linux: ibk-rdv client: PASS {t} 1 sizes, 20 iterations each, every answer checked, 0 lost"
        ));
        // The ibkern server (verify=1: every request's payload checked) met the Linux node
        // (LID 4) and ended cleanly; the model saw no violation on either HCA.
        run.line_with_stderr(&format!(
            "{t} ibkern server: pingpong: PASS 1 sizes, 0 aborted, 0 lost, 0 retries, 0 late repeats; local lid 2"
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

#[test]
fn linux_server_and_ibkern_client_ping_pong_with_checked_data() {
    let run = mixed("mixed-server", "server");
    assert_eq!(run.code(), Some(0), "{}", run.transcript());
    run.line_with_stderr("mixed: PASS");
    for t in ["UD", "UC"] {
        // The runner read the Linux server's LID (the fabric's first: 2) and QPN from its
        // console and gave them to the ibkern client, which booted second (LID 4).
        let learned = run.line_with_stderr(&format!(
            "{t}: the Linux server listens on LID 0x2, rendezvous QPN 0x"
        ));
        assert!(
            learned.contains("peer_lid=0x2 peer_rdv_qpn=0x"),
            "{}",
            run.transcript()
        );
        // The Linux server checked every request's tag and payload; nothing was repeated.
        run.line_with_stderr(&format!(
            "{t} linux: ibk-rdv server: PASS {t} 1 sizes, 20 iterations each, every request checked, 0 answered twice"
        ));
        // The ibkern client (verify=1: every answer's payload checked) met the Linux server
        // at LID 2 and ended cleanly; the model saw no violation on either HCA.
        let pass = run.line_with_stderr(&format!("{t} ibkern client: pingpong: PASS"));
        assert!(
            pass.contains("1 sizes, 0 aborted, 0 lost, 0 retries, 0 late repeats; local lid 4")
                && pass.contains("peer lid 2"),
            "{}",
            run.transcript()
        );
        run.line_with_stderr(&format!("{t} ibkern: model violations: 0"));
        run.line_with_stderr(&format!("{t} linux: model violations: 0"));
        run.line_with_stderr(&format!("{t} linux: PASS"));
    }
    assert!(
        run.stdout.lines().any(|l| l.starts_with("linux:  1024 ")),
        "{}",
        run.transcript()
    );
    assert!(
        run.stdout.lines().any(|l| l.starts_with("ibkern:  1024 ")),
        "{}",
        run.transcript()
    );
}
