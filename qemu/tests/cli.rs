//! The runner's command line, without booting anything.

mod support;

use std::time::Duration;

use support::runner;

const QUICK: Duration = Duration::from_secs(30);

#[test]
fn help_lists_every_subcommand_and_the_exit_statuses() {
    let run = runner(&["--help"], QUICK);
    assert_eq!(run.code(), Some(0), "{}", run.transcript());
    for subcommand in ["image", "selftest", "run", "vfio-check"] {
        assert!(
            run.stdout.contains(subcommand),
            "{subcommand} missing\n{}",
            run.stdout
        );
    }
    assert!(run.stdout.contains("4 timeout"), "{}", run.stdout);
    let run = runner(&["selftest", "--help"], QUICK);
    for flag in [
        "--firmware",
        "--accel",
        "--machine",
        "--cpu",
        "--timeout",
        "--kernel",
        "--set",
    ] {
        assert!(run.stdout.contains(flag), "{flag} missing\n{}", run.stdout);
    }
}

#[test]
fn bad_arguments_are_usage_errors() {
    let run = runner(&["selftest", "--firmware", "coreboot"], QUICK);
    assert_eq!(run.code(), Some(2), "{}", run.transcript());
    let run = runner(&["run", "--vfio", "3:0"], QUICK);
    assert_eq!(run.code(), Some(2), "{}", run.transcript());
    assert!(
        run.stderr.contains("not a PCI address"),
        "{}",
        run.transcript()
    );
}

#[test]
fn vfio_needs_kvm() {
    let run = runner(&["run", "--vfio", "0000:03:00.0"], QUICK);
    assert_eq!(run.code(), Some(3), "{}", run.transcript());
    assert!(
        run.stderr.contains("--vfio needs --accel kvm"),
        "{}",
        run.transcript()
    );
}

#[test]
fn malformed_config_file_is_rejected_before_booting() {
    let dir = support::scratch("cli-bad-config");
    let file = dir.join("bad.cfg");
    std::fs::write(&file, "mode=idle\nthis line has no equals sign\n").unwrap();
    let run = runner(
        &[
            "image",
            "--config",
            file.to_str().unwrap(),
            "--kernel",
            "unused",
        ],
        QUICK,
    );
    assert_eq!(run.code(), Some(3), "{}", run.transcript());
    assert!(
        run.stderr.contains("line 2: expected `key=value`"),
        "{}",
        run.transcript()
    );
}

#[test]
fn a_refused_configuration_writes_nothing() {
    let dir = support::scratch("cli-refused-writes-nothing");
    let out = dir.join("out");
    let out_s = out.to_str().unwrap();
    for args in [
        // A transport the test does not run.
        &["pingpong", "-t", "write_lat", "-c", "UD", "--out", out_s][..],
        // A --set that is not key=value.
        &[
            "pingpong",
            "-c",
            "UD",
            "--set",
            "mode pingpong",
            "--out",
            out_s,
        ][..],
        &["compare", "-c", "RC", "--out", out_s][..],
    ] {
        let run = runner(args, QUICK);
        assert_ne!(run.code(), Some(0), "{args:?}\n{}", run.transcript());
        assert!(run.stderr.contains("error:"), "{}", run.transcript());
        assert!(
            !out.exists(),
            "{args:?} created {}\n{}",
            out.display(),
            run.transcript()
        );
    }
}

/// Every flag each subcommand's `--help` shows is in that subcommand's usage lines in
/// docs/runner.md, and no `--help` text names an issue number.
#[test]
fn runner_doc_usage_lines_list_every_flag() {
    let doc = std::fs::read_to_string(support::workspace_root().join("docs/runner.md")).unwrap();
    let run = runner(&["--help"], QUICK);
    assert!(
        !run.stdout.to_lowercase().contains("issue"),
        "{}",
        run.stdout
    );
    for sub in [
        "image",
        "selftest",
        "run",
        "vfio-check",
        "hca",
        "linux-image",
        "linux",
        "pingpong",
        "compare",
        "mixed",
        "results",
    ] {
        let help = runner(&[sub, "--help"], QUICK);
        assert_eq!(help.code(), Some(0), "{}", help.transcript());
        assert!(
            !help.stdout.to_lowercase().contains("issue"),
            "{sub} --help names an issue:\n{}",
            help.stdout
        );
        // The usage blocks: code blocks with a line `cargo qemu SUB [...` or `cargo qemu SUB
        // FILE...` (not examples, whose arguments are lower case).
        let head = format!("cargo qemu {sub} ");
        let usage: String = doc
            .split("```")
            .skip(1)
            .step_by(2)
            .filter(|block| {
                block.lines().any(|l| {
                    l.trim_start().strip_prefix(&head).is_some_and(|rest| {
                        rest.starts_with('[') || rest.starts_with(|c: char| c.is_ascii_uppercase())
                    })
                })
            })
            .collect();
        assert!(
            !usage.is_empty(),
            "no usage lines for {sub} in docs/runner.md"
        );
        for line in help.stdout.lines() {
            let t = line.trim_start();
            let flag = match t.strip_prefix('-') {
                Some(rest) if rest.starts_with('-') => t,
                Some(_) => t.split_once(", ").map_or(t, |(_, long)| long),
                None => continue,
            };
            let flag = flag.split([' ', '<']).next().unwrap();
            if !flag.starts_with("--") || flag == "--help" || flag == "--version" {
                continue;
            }
            let bounded = usage.match_indices(flag).any(|(at, _)| {
                !usage[at + flag.len()..]
                    .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-')
            });
            assert!(
                bounded,
                "{sub}: {flag} is in --help but not in docs/runner.md's usage lines"
            );
        }
    }
}
