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
    // `perftest` is `pingpong` under a clearer name; the help says both.
    assert!(run.stdout.contains("perftest"), "{}", run.stdout);
    for sub in ["pingpong", "perftest"] {
        let run = runner(&[sub, "--help"], QUICK);
        assert_eq!(run.code(), Some(0), "{}", run.transcript());
        for flag in [
            "--test",
            "send_bw",
            "atomic_bw",
            "--tx-depth",
            "--post-list",
            "--cq-mod",
            "--duration",
            "--bidirectional",
            "--no-peak",
            "--report-gbits",
            "--outstanding-reads",
            "-Q",
        ] {
            assert!(
                run.stdout.contains(flag),
                "{sub}: {flag} missing\n{}",
                run.stdout
            );
        }
    }
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
    // A command-line mistake, not a host problem: exit 2 before anything is built.
    let run = runner(
        &[
            "run",
            "--vfio",
            "0000:03:00.0",
            "--kernel",
            "/nonexistent/kernel",
        ],
        QUICK,
    );
    assert_eq!(run.code(), Some(2), "{}", run.transcript());
    assert!(
        run.stderr.contains("--vfio needs --accel kvm"),
        "{}",
        run.transcript()
    );
}

/// The runner's status for a refused command line or configuration (docs/runner.md).
const EXIT_USAGE: i32 = 2;

/// Runs the runner with `args` followed by `--out DIR` (DIR a fresh scratch path that does
/// not exist yet) and asserts it refused with exit 2, naming `message` on stderr, and that it
/// wrote nothing: DIR still does not exist. `--kernel` points nowhere, so building or packing
/// a kernel would fail with another status.
fn refused(name: &str, args: &[&str], message: &str) {
    let out = support::scratch_path(name);
    let _ = std::fs::remove_dir_all(&out);
    let mut argv: Vec<&str> = args.to_vec();
    let out_str = out.to_str().unwrap().to_string();
    argv.extend(["--out", &out_str]);
    if !args.contains(&"--kernel") && args[0] != "mixed" && args[0] != "compare" {
        argv.extend(["--kernel", "/nonexistent/kernel"]);
    }
    let run = runner(&argv, QUICK);
    assert_eq!(
        run.code(),
        Some(EXIT_USAGE),
        "{argv:?}\n{}",
        run.transcript()
    );
    assert!(
        run.stderr.contains(message),
        "{argv:?}: expected {message:?}\n{}",
        run.transcript()
    );
    assert!(
        !run.stderr.contains("qemu-system") && run.stdout.is_empty(),
        "{argv:?}: nothing may boot\n{}",
        run.transcript()
    );
    assert!(!out.exists(), "{argv:?}: {} was written", out.display());
}

/// Runs the runner with `args` and `--out base` (an existing directory) and asserts it
/// refused with exit 2 naming `message`, leaving `base` as it was.
fn refused_in(base: &std::path::Path, args: &[&str], message: &str) {
    let listing = || {
        let mut names: Vec<_> = std::fs::read_dir(base)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    let before = listing();
    let mut argv = args.to_vec();
    argv.extend(["--out", base.to_str().unwrap()]);
    let run = runner(&argv, QUICK);
    assert_eq!(
        run.code(),
        Some(EXIT_USAGE),
        "{argv:?}\n{}",
        run.transcript()
    );
    assert!(
        run.stderr.contains(message),
        "{argv:?}: expected {message:?}\n{}",
        run.transcript()
    );
    assert_eq!(listing(), before, "{argv:?}: {} changed", base.display());
}

/// Mistakes of the command line that used to pass as host problems (exit 3) or run at all:
/// each exits 2 naming the mistake, before anything is built, booted or written.
#[test]
fn command_line_mistakes_exit_2_before_anything_is_made() {
    for (args, message) in [
        (
            &["pingpong", "--timeout", "0"][..],
            "0 seconds would kill the guests as they start",
        ),
        (&["selftest", "--timeout", "0"][..], "0 seconds would kill"),
        (&["hca", "--timeout", "0"][..], "0 seconds would kill"),
        (&["compare", "--timeout", "0"][..], "0 seconds would kill"),
        (
            &["pingpong", "-A", "CMP_AND_SWAP"][..],
            "configuration refused: config: atomic (-A) applies to atomic_lat and atomic_bw only, not to send_lat",
        ),
        (
            &["pingpong", "--test", "send_bw", "-o", "4"][..],
            "outstanding_reads (-o) applies to read_lat, atomic_lat, read_bw and atomic_bw only, not to send_bw",
        ),
        (
            &["image", "--node", "bad/name=node.cfg"][..],
            "--node bad/name=node.cfg: node name \"bad/name\"",
        ),
        (
            &["image", "--node", "node.cfg"][..],
            "--node node.cfg: expected NODE=FILE",
        ),
        // perftest's -d and -i, where ibkern cannot honour them, say what it uses.
        (
            &["perftest", "-d", "mlx4_1"][..],
            "ibkern drives one HCA, the first ConnectX-3 it finds on PCI (mlx4_0)",
        ),
        (
            &["perftest", "-i", "2"][..],
            "-i 2: pingpong's emulated HCAs have one port",
        ),
        (
            &["perftest", "-c", "UD", "-s", "4096", "-m", "2048"][..],
            "UD message of 4096 bytes is larger than the path MTU 2048",
        ),
    ] {
        refused("cli-mistakes", args, message);
    }
    // --out naming a file: every command that writes into --out says so.
    let file = support::scratch("cli-out-file").join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let file_s = file.to_str().unwrap();
    for sub in ["pingpong", "selftest", "hca", "image", "run", "compare"] {
        let run = runner(
            &[sub, "--out", file_s, "--kernel", "/nonexistent/kernel"],
            QUICK,
        );
        assert_eq!(run.code(), Some(EXIT_USAGE), "{sub}: {}", run.transcript());
        assert!(
            run.stderr
                .contains(&format!("--out {file_s}: is a file; give a directory")),
            "{sub}: {}",
            run.transcript()
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a directory");
    }
    let run = runner(
        &[
            "node", "--fabric", "f", "--index", "0", "--role", "client", "--out", file_s,
        ],
        QUICK,
    );
    assert_eq!(run.code(), Some(EXIT_USAGE), "{}", run.transcript());
}

/// A run directory is made, and `latest` moved, only once every check has passed: a
/// `latest` that is not a link is a usage error, and a host problem found before the run
/// (here: no kernel) leaves the earlier runs and `latest` as they were.
#[test]
fn no_run_directory_before_every_check_has_passed() {
    let base = support::scratch("cli-run-dir-last");
    std::fs::create_dir(base.join("2026-01-01T00-00-00Z")).unwrap();
    std::os::unix::fs::symlink("2026-01-01T00-00-00Z", base.join("latest")).unwrap();
    let base_s = base.to_str().unwrap();
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(&base)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = listing();
    for sub in ["pingpong", "compare"] {
        let run = runner(
            &[
                sub,
                "-c",
                "UD",
                "-s",
                "64",
                "--kernel",
                "/nonexistent/kernel",
                "--out",
                base_s,
            ],
            QUICK,
        );
        assert_eq!(run.code(), Some(3), "{sub}: {}", run.transcript());
        assert_eq!(listing(), before, "{sub}: {}", run.transcript());
        assert_eq!(
            std::fs::read_link(base.join("latest")).unwrap(),
            std::path::Path::new("2026-01-01T00-00-00Z")
        );
    }
    let other = support::scratch("cli-run-dir-latest");
    std::fs::create_dir(other.join("latest")).unwrap();
    refused_in(
        &other,
        &["pingpong", "--kernel", "/nonexistent/kernel"],
        "latest exists and is not a symbolic link",
    );
}

#[test]
fn malformed_config_file_is_refused_before_anything_is_built() {
    let dir = support::scratch("cli-bad-config");
    let file = dir.join("bad.cfg");
    std::fs::write(&file, "mode=idle\nthis line has no equals sign\n").unwrap();
    let file = file.to_str().unwrap();
    refused(
        "cli-bad-config-out",
        &["image", "--config", file],
        "config line 2: expected key=value, found \"this line has no equals sign\"",
    );
    let bad = support::scratch("cli-bad-values").join("node.cfg");
    std::fs::write(&bad, "# a node\nmode=pingpong\nrole=clinet\n").unwrap();
    let bad = bad.to_str().unwrap();
    refused(
        "cli-bad-values-out",
        &["image", "--config", bad],
        "config line 3: key \"role\": bad value \"clinet\": expected one of client|server",
    );
    refused(
        "cli-bad-node-out",
        &["image", "--node", &format!("n1={bad}")],
        "config line 3: key \"role\"",
    );
    refused(
        "cli-run-bad-config",
        &["run", "--config", bad],
        "key \"role\": bad value \"clinet\"",
    );
}

#[test]
fn image_refuses_every_bad_key_and_value_with_the_kernels_message() {
    for (set, message) in [
        (
            "role=clinet",
            "--set role=clinet: key \"role\": bad value \"clinet\": expected one of client|server",
        ),
        (
            "iters=0",
            "--set iters=0: key \"iters\": bad value \"0\": expected an iteration count 5..=16777216",
        ),
        (
            "peer_lid=zz",
            "--set peer_lid=zz: key \"peer_lid\": bad value \"zz\": expected a unicast LID 1..=0xBFFF",
        ),
        (
            "transport=XY",
            "--set transport=XY: key \"transport\": bad value \"XY\": expected one of UD|UC|RC",
        ),
        ("frobnicate=1", "--set frobnicate=1: unknown key \"frobnicate\""),
        ("x", "--set x: expected key=value, found \"x\""),
    ] {
        refused("cli-image-set", &["image", "--set", set], message);
    }
    // All of them at once: the first is named.
    refused(
        "cli-image-set-all",
        &[
            "image",
            "--set",
            "role=clinet",
            "--set",
            "iters=0",
            "--set",
            "peer_lid=zz",
            "--set",
            "transport=XY",
            "--set",
            "frobnicate=1",
        ],
        "--set role=clinet: key \"role\"",
    );
    // Each value fine, the combination not: the kernel's rule, before anything is built.
    refused(
        "cli-image-rule",
        &["image", "--set", "mode=fault"],
        "configuration refused: config: mode=fault and fault=<kind> must be given together",
    );
    refused(
        "cli-image-rule-ud",
        &["image", "--set", "transport=UD", "--set", "size=4096"],
        "config: UD message of 4096 bytes is larger than the path MTU 2048",
    );
}

#[test]
fn pingpong_refuses_bad_flags_and_keys_before_booting() {
    for (args, message) in [
        (&["-s", "0"][..], "0 is not in 2..=8388608"),
        (&["-s", "16777216"][..], "16777216 is not in 2..=8388608"),
        (&["-n", "0"][..], "0 is not in 5..=16777216"),
        (&["-n", "1"][..], "1 is not in 5..=16777216"),
        (&["-I", "5000"][..], "5000 is not in 0..=1024"),
        (
            &["--set", "log=nope"][..],
            "--set log=nope: key \"log\": bad value \"nope\": expected one of error|warn|info|debug|trace",
        ),
        // What the runner sets itself, or from a flag, --set does not override.
        (
            &["--set", "role=client"][..],
            "--set role=client: pingpong sets role itself (one guest is the server, the other the client)",
        ),
        (
            &["--set", "mode=hca"][..],
            "--set mode=hca: pingpong sets mode itself (its guests run mode=pingpong)",
        ),
        (
            &["--set", "transport=UC"][..],
            "--set transport=UC: pingpong sets transport from -c: use that flag",
        ),
        (
            &["-e", "--set", "completion=poll"][..],
            "--set completion=poll: pingpong sets completion from -e or --mode: use that flag",
        ),
        (&["--set", "x"][..], "--set x: expected key=value, found \"x\""),
        (
            &["-c", "UD", "-s", "4096"][..],
            "configuration refused: config: UD message of 4096 bytes is larger than the path MTU 2048",
        ),
        (&["-c", "XY"][..], "-c: unknown transport \"XY\" (one of UD|UC|RC)"),
        (
            &["--test", "write_lat", "-c", "UD"][..],
            "-c UD with --test write_lat: UD connection only possible in SEND verb",
        ),
        (
            &["--test", "read_lat", "-c", "UD"][..],
            "-c UD with --test read_lat: UD connection only possible in SEND verb",
        ),
        (
            &["--test", "atomic_lat", "-c", "UC"][..],
            "-c UC with --test atomic_lat: UC connection not possible in READ/ATOMIC verbs",
        ),
        (
            &["--test", "atomic_lat", "-s", "64"][..],
            "an atomic is 8 bytes: atomic_lat runs size=8 only, not 64",
        ),
        (
            &["--test", "write_lat", "-e"][..],
            "completion=event and isr do not apply",
        ),
        (
            &["-e", "--irq", "poll"][..],
            "configuration refused: config: completion=event waits for completion interrupts, and hca_irq=poll takes none",
        ),
        (
            &["--irq", "poll", "--mode", "poll,event"][..],
            "completion=event waits for completion interrupts, and hca_irq=poll takes none",
        ),
        (&["-e", "--test", "write_lat"][..], "completion=event and isr do not apply"),
        (
            &["--mode", "poll,isr", "--irq", "intx"][..],
            "completion=isr posts the reply from the completion interrupt's handler: it needs hca_irq=msix",
        ),
        (
            &["--mode", "poll,isr", "--test", "write_lat"][..],
            "completion=event and isr do not apply",
        ),
        (
            &["--mode", "poll,spin"][..],
            "distinct completion modes from poll, event, isr",
        ),
        (
            &["-q", "4"][..],
            "-q, -r and --cq-moderation are srq_pingpong's",
        ),
        (
            &["--test", "srq_pingpong", "-c", "UD"][..],
            "-c UD with --test srq_pingpong: it runs over RC only",
        ),
        (
            &["--test", "srq_pingpong", "-a"][..],
            "-a with --test srq_pingpong: it runs one size (-s)",
        ),
        (
            &["--test", "srq_pingpong", "-q", "16", "-r", "8"][..],
            "rx_depth must hold one receive per QP",
        ),
        (
            &["--test", "srq_pingpong", "--cq-moderation", "4/16"][..],
            "cq_moderation needs completion=event",
        ),
        (
            &["--test", "srq_pingpong", "-e", "--cq-moderation", "4/70000"][..],
            "count/period_us[,count/period_us...], each 0..=65535",
        ),
        (&["--test", "srq_pingpong", "-q", "65"][..], "65 is not in 1..=64"),
        (
            &["--set", "run=ibv_srq_pingpong -q 2"][..],
            "--set run=ibv_srq_pingpong ... needs --test srq_pingpong",
        ),
        (
            &["--test", "srq_pingpong", "--set", "run=ibv_srq_pingpong -q 16 -r 8"][..],
            "rx_depth must hold one receive per QP",
        ),
                // perftest's bandwidth flags: their ranges, the rules between them, the tests they
        // apply to; -t is the tx depth.
        (
            &["-t", "write_lat"][..],
            "-t is perftest's tx depth (1..=15000); name the test with --test write_lat",
        ),
        (&["--test", "send_bw", "-t", "0"][..], "\"0\": expected a tx depth 1..=15000"),
        (&["--test", "send_bw", "-Q", "2000"][..], "2000 is not in 1..=1024"),
        (
            &["--test", "send_bw", "-t", "16", "-Q", "32"][..],
            "configuration refused: config: CQ moderation 32 (-Q) is above the tx depth 16 (-t)",
        ),
        (
            &["--test", "send_bw", "-n", "100", "-l", "3"][..],
            "the iterations (100, -n) must be a multiple of the post list (3, -l)",
        ),
        (
            &["--test", "send_bw", "-c", "UD", "-s", "4096"][..],
            "UD message of 4096 bytes is larger than the path MTU 2048",
        ),
        (
            &["--test", "write_bw", "-c", "UD"][..],
            "-c UD with --test write_bw: UD connection not possible for write_bw",
        ),
        (
            &["--test", "read_bw", "-c", "UC"][..],
            "-c UC with --test read_bw: UC connection not possible for read_bw",
        ),
        (
            &["--test", "send_lat", "-N"][..],
            "no_peak is a bandwidth key: it applies to send_bw, write_bw, read_bw and atomic_bw only",
        ),
        (
            &["--test", "send_bw", "-a", "-D", "5"][..],
            "duration (-D) cannot run with size=all (-a)",
        ),
        (
            &["--test", "send_bw", "-e"][..],
            "the bandwidth tests busy-poll their completions",
        ),
        (
            &["--test", "send_lat", "-b"][..],
            "bidirectional is a bandwidth key: it applies to send_bw, write_bw, read_bw and atomic_bw only",
        ),
        (&["--test", "atomic_bw", "-o", "17"][..], "17 is not in 1..=16"),
        (&["--test", "atomic_bw", "-A", "ADD"][..], "one of FETCH_AND_ADD|CMP_AND_SWAP"),
        (
            &["--test", "atomic_bw", "-s", "64"][..],
            "an atomic is 8 bytes",
        ),
    ] {
        let mut argv = vec!["pingpong"];
        argv.extend_from_slice(args);
        refused("cli-pingpong", &argv, message);
    }
}

#[test]
fn other_subcommands_refuse_bad_configurations_before_booting() {
    refused(
        "cli-hca",
        &["hca", "--set", "log=loud"],
        "--set log=loud: key \"log\": bad value \"loud\": expected one of error|warn|info|debug|trace",
    );
    refused(
        "cli-hca-irq",
        &["hca", "--set", "hca_irq=poll"],
        "--set hca_irq=poll: hca sets hca_irq from --irq: use that flag",
    );
    refused(
        "cli-hca-events",
        &["hca", "--irq", "poll", "--set", "completion=event"],
        "config: completion=event waits for completion interrupts, and hca_irq=poll takes none",
    );
    refused(
        "cli-hca-rule",
        &["hca", "--set", "fault=gpf"],
        "config: mode=fault and fault=<kind> must be given together",
    );
    refused(
        "cli-selftest",
        &["selftest", "--set", "expect_pci=15b3:1003"],
        "--set expect_pci=15b3:1003: selftest sets expect_pci itself (the devices of --machine and --firmware)",
    );
    refused(
        "cli-image-pci",
        &["image", "--set", "expect_pci=15b3"],
        "--set expect_pci=15b3: key \"expect_pci\"",
    );
    // node: --role, --peer-lid and the flags are its own.
    refused(
        "cli-node-role",
        &[
            "node",
            "--fabric",
            "f",
            "--index",
            "0",
            "--role",
            "server",
            "--set",
            "role=client",
        ],
        "--set role=client: node sets role from --role: use that flag",
    );
    refused(
        "cli-node-peer",
        &[
            "node",
            "--fabric",
            "f",
            "--index",
            "0",
            "--role",
            "client",
            "--set",
            "peer_lid=2",
        ],
        "--set peer_lid=2: node sets peer_lid from --peer-lid: use that flag",
    );
    refused(
        "cli-run",
        &["run", "--set", "log=loud"],
        "key \"log\": bad value \"loud\"",
    );
    refused(
        "mixed",
        &["mixed", "-c", "XY"],
        "-c: unknown transport \"XY\" (UD or UC)",
    );
    for sub in ["compare", "mixed"] {
        refused(sub, &[sub, "-n", "0"], "0 is not in 5..=16777216");
        refused(
            sub,
            &[sub, "-c", "UD", "-s", "4096"],
            "UD message of 4096 bytes is larger than the path MTU 2048",
        );
    }
    // compare: every combination of tests, transports, atomic operations and -e is
    // checked before anything boots, the bandwidth tests' with their flags.
    for (args, message) in [
        (
            &["-c", "XY"][..],
            "-c: unknown transport \"XY\" (one of UD|UC|RC)",
        ),
        (
            &["--test", "write_bw", "-c", "UD"][..],
            "-c UD with --test write_bw: UD connection not possible for write_bw",
        ),
        (
            &["--test", "all,read_bw", "-c", "UC"][..],
            "-c UC with --test read_lat: UC connection not possible in READ/ATOMIC verbs",
        ),
        (
            &["--test", "send_lat", "-Q", "8"][..],
            "-Q 8: the bandwidth flags apply to send_bw, write_bw, read_bw and atomic_bw only",
        ),
        (
            &["--test", "send_bw", "-n", "50", "-l", "4"][..],
            "the iterations (50, -n) must be a multiple of the post list (4, -l)",
        ),
        (
            &["--test", "send_bw", "-t", "send_bw"][..],
            "-t is perftest's tx depth",
        ),
        (&["--test", "ping"][..], "--test: unknown test \"ping\""),
        (
            &["--test", "write_lat", "-c", "UD"][..],
            "-c UD with --test write_lat: UD connection only possible in SEND verb",
        ),
        (
            &["--test", "all", "-c", "UC"][..],
            "-c UC with --test read_lat: UC connection not possible in READ/ATOMIC verbs",
        ),
        (
            &["--test", "send_lat", "-A", "CMP_AND_SWAP"][..],
            "the atomic operations apply to --test atomic_lat and atomic_bw only",
        ),
        (
            &["--test", "atomic_lat", "-A", "SWAP"][..],
            "-A: unknown atomic operation \"SWAP\"",
        ),
        (
            &["--test", "write_lat", "-e"][..],
            "-e with --test write_lat",
        ),
    ] {
        let mut argv = vec!["compare"];
        argv.extend_from_slice(args);
        refused("cli-compare", &argv, message);
    }
}

#[test]
fn a_pxe_root_with_a_bad_ramdisk_is_refused_before_booting() {
    let root = support::scratch("cli-pxe-root");
    std::fs::write(root.join("bootloader"), b"not a real loader").unwrap();
    std::fs::write(root.join("ramdisk"), "mode=selftest\nno_such_key=1\n").unwrap();
    let run = runner(
        &[
            "run",
            "--firmware",
            "pxe",
            "--tftp-root",
            root.to_str().unwrap(),
        ],
        QUICK,
    );
    assert_eq!(run.code(), Some(EXIT_USAGE), "{}", run.transcript());
    assert!(
        run.stderr
            .contains("configuration refused: config line 2: unknown key \"no_such_key\""),
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

#[test]
fn a_refused_configuration_writes_nothing() {
    let dir = support::scratch("cli-refused-writes-nothing");
    let out = dir.join("out");
    let out_s = out.to_str().unwrap();
    for args in [
        // A transport the test does not run.
        &[
            "pingpong",
            "--test",
            "write_lat",
            "-c",
            "UD",
            "--out",
            out_s,
        ][..],
        &[
            "perftest", "--test", "send_bw", "-t", "8", "-Q", "9", "--out", out_s,
        ][..],
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
        &["compare", "--test", "read_lat", "-c", "UD", "--out", out_s][..],
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
        "conformance",
        "node",
        "fabric",
    ] {
        let help = runner(&[sub, "--help"], QUICK);
        assert_eq!(help.code(), Some(0), "{}", help.transcript());
        assert!(
            !help.stdout.to_lowercase().contains("issue"),
            "{sub} --help names an issue:\n{}",
            help.stdout
        );
        // The usage blocks: code blocks with a line `cargo qemu SUB [...`, `cargo qemu SUB
        // --required ...` or `cargo qemu SUB FILE...` (not examples, whose arguments are lower
        // case).
        let head = format!("cargo qemu {sub} ");
        let usage: String = doc
            .split("```")
            .skip(1)
            .step_by(2)
            .filter(|block| {
                block.lines().any(|l| {
                    l.trim_start().strip_prefix(&head).is_some_and(|rest| {
                        rest.starts_with('[')
                            || rest.starts_with("--")
                            || rest.starts_with(|c: char| c.is_ascii_uppercase())
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
