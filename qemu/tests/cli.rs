//! The runner's command line, without booting anything.

mod support;

use std::time::Duration;

use support::runner;

const QUICK: Duration = Duration::from_secs(30);

#[test]
fn help_lists_every_subcommand_and_the_exit_statuses() {
    let run = runner(&["--help"], QUICK);
    assert_eq!(run.code(), Some(0), "{}", run.transcript());
    for subcommand in ["image", "selftest", "run", "vfio-check", "conformance"] {
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

/// `cargo qemu conformance` on hand-written traces: a departure outside the file fails (1),
/// a covered one passes (0), a malformed departures file or a missing trace is a usage
/// error (2) naming the problem.
#[test]
fn conformance_reports_departures_and_rejects_bad_input() {
    let dir = support::scratch("conformance-cli");
    let w = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let linux = w(
        "linux.trace",
        "cmd INIT_HCA field=log_num_qps log=17\ncmd NOP op_mod=0x0 in_mod=0x1f mode=event\n",
    );
    let ours = w(
        "ibkern.trace",
        "cmd INIT_HCA field=log_num_qps log=7\ncmd NOP op_mod=0x0 in_mod=0x1f mode=poll\n",
    );
    let none = w("none.txt", "# nothing reviewed\n[deliberate]\n");
    let some = w(
        "some.txt",
        "[deliberate]\ncmd INIT_HCA field=log_* log=* | smaller tables\n[to fix]\ncmd NOP * mode=poll | polled NOP\n",
    );
    let bad = w("bad.txt", "[deliberate]\ncmd NOP *\n");
    let args = |dep: &str| {
        vec![
            "conformance".to_string(),
            "--ibkern".into(),
            ours.clone(),
            "--linux".into(),
            linux.clone(),
            "--departures".into(),
            dep.to_string(),
        ]
    };
    let run_with = |a: Vec<String>| {
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        runner(&refs, QUICK)
    };
    let run = run_with(args(&none));
    assert_eq!(run.code(), Some(1), "{}", run.transcript());
    assert!(
        run.stdout
            .contains("NEW   cmd INIT_HCA field=log_num_qps log=7   (reference log=17..17)"),
        "{}",
        run.transcript()
    );
    assert!(
        run.stdout
            .contains("  cmd NOP op_mod=0x0 in_mod=0x1f mode=event"),
        "(b) lists what Linux does\n{}",
        run.transcript()
    );
    run.line_with_stderr("2 not in the departures file");
    let run = run_with(args(&some));
    assert_eq!(run.code(), Some(0), "{}", run.transcript());
    assert!(run
        .stdout
        .contains("FIX   cmd NOP op_mod=0x0 in_mod=0x1f mode=poll"));
    run.line_with_stderr("(1 listed as to fix)");
    let run = run_with(args(&bad));
    assert_eq!(run.code(), Some(2), "{}", run.transcript());
    run.line_with_stderr("line 2: expected 'PATTERN | REASON'");
    let mut a = args(&some);
    a[2] = dir.join("missing.trace").to_str().unwrap().to_string();
    let run = run_with(a);
    assert_eq!(run.code(), Some(2), "{}", run.transcript());
    run.line_with_stderr("reading the ibkern trace");
}
