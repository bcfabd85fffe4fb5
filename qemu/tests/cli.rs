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
