//! `cargo qemu results`: consoles saved the way real nodes give them back, read into the same
//! tables and files an emulated run writes. No guest is booted: the fixtures are the two
//! consoles of an emulated `cargo qemu pingpong -c UD -a -n 20` (fixtures/ud-server.log,
//! fixtures/ud-client.log), mangled here as a browser console, a BMC's web console, a
//! serial-over-LAN log and `script` would; with their `ibkern-node` lines, and without them
//! (as an older kernel printed them) to read the provenance from the boot lines.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use support::{runner, scratch};

const QUICK: Duration = Duration::from_secs(30);

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Breaks every line longer than `width` characters into pieces, as a terminal wraps.
fn wrap(text: &str, width: usize, first_prefix: impl Fn(usize) -> String) -> String {
    let mut out = String::new();
    for (n, line) in text.lines().enumerate() {
        let prefix = first_prefix(n);
        let mut rest: &str = line;
        let mut head = prefix;
        loop {
            let room = width.saturating_sub(head.chars().count()).max(1);
            let cut = rest
                .char_indices()
                .nth(room)
                .map_or(rest.len(), |(at, _)| at);
            out.push_str(&head);
            out.push_str(&rest[..cut]);
            out.push_str("\r\n");
            rest = &rest[cut..];
            if rest.is_empty() {
                break;
            }
            head = String::new();
        }
    }
    out
}

/// The browser console: colour escapes, a prompt redraw, CR LF, wrapped at 80 columns, and
/// the screen re-rendered once (the second half of the console repeated).
fn web_console(clean: &str) -> String {
    let coloured = clean
        .replace("pingpong: PASS", "\u{1b}[1;32mpingpong: PASS\u{1b}[0m")
        .replace("mlx4: firmware", "\u{1b}[2K\rmlx4: firmware");
    let wrapped = wrap(&coloured, 80, |_| String::new());
    let lines: Vec<&str> = wrapped.split_inclusive("\r\n").collect();
    let half = lines.len() / 2;
    format!(
        "\u{1b}]0;console\u{7}\u{1b}[H\u{1b}[J{}\u{1b}[H{}",
        wrapped,
        lines[half..].concat()
    )
}

/// A BMC's web console copied from its screen: every line hard-wrapped at 80 columns, each
/// row padded with spaces to the full width, CR LF line ends.
fn bmc_console(clean: &str) -> String {
    wrap(clean, 80, |_| String::new())
        .split_terminator("\r\n")
        .map(|row| format!("{row:<80}\r\n"))
        .collect()
}

/// An IPMI serial-over-LAN log written by a logger: a timestamp on every line (and on every
/// wrapped piece), wrapped at 100 columns.
fn sol_log(clean: &str) -> String {
    let mut out = String::new();
    for (n, line) in wrap(clean, 100, |_| String::new()).lines().enumerate() {
        out.push_str(&format!(
            "[2026-11-25 08:{:02}:{:02}.{:03}] {line}\n",
            n / 60 % 60,
            n % 60,
            (n * 37) % 1000
        ));
    }
    out
}

/// `script` output with a "[node1] " label on every console line (not on wrapped pieces).
fn script_log(clean: &str, label: &str) -> String {
    format!(
        "Script started on 2026-11-25 08:00:00+00:00 [COMMAND=\"ipmitool sol activate\"]\r\n{}\
         Script done on 2026-11-25 08:10:00+00:00 [COMMAND_EXIT_CODE=\"0\"]\r\n",
        wrap(clean, 80, |_| format!("[{label}] "))
    )
}

fn run_results(files: &[&Path], out: &Path) -> support::Run {
    let mut args: Vec<String> = vec!["results".into()];
    args.extend(files.iter().map(|f| f.to_str().unwrap().to_string()));
    args.extend(["--out".into(), out.to_str().unwrap().to_string()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    runner(&refs, QUICK)
}

/// The result directory the run wrote into (the run's own directory under `out`).
fn written_dir(out: &Path) -> PathBuf {
    support::the_run(out)
}

#[test]
fn mangled_consoles_give_the_same_tables_and_files_as_clean_ones() {
    let server = fixture("ud-server.log");
    let client = fixture("ud-client.log");
    assert!(server.contains("ibkern-node {") && client.contains("ibkern-node {"));
    mangled_as_clean("results-mangled", &server, &client);
    let old = |c: &str| -> String {
        c.lines()
            .filter(|l| !l.contains("ibkern-node "))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    mangled_as_clean("results-mangled-old", &old(&server), &old(&client));
}

/// Each mangling of the two consoles gives the tables, files and provenance of the clean
/// ones.
fn mangled_as_clean(scratch_name: &str, server: &str, client: &str) {
    let (server, client) = (server.to_string(), client.to_string());
    let dir = scratch(scratch_name);
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        fs::write(&p, text).unwrap();
        p
    };
    let clean = [write("server.log", &server), write("client.log", &client)];
    let reference = run_results(&[&clean[0], &clean[1]], &dir.join("clean"));
    assert_eq!(reference.code(), Some(0), "{}", reference.transcript());
    let ref_dir = written_dir(&dir.join("clean"));
    let ref_json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(ref_dir.join("latency.json")).unwrap()).unwrap();
    let records = ref_json["results"].as_array().unwrap();
    assert_eq!(records.len(), 22, "11 sizes from each node");
    // What the consoles tell: QEMU's TCG CPU, so emulated; the kernel's commit, TSC and HCA.
    let p = &ref_json["provenance"];
    assert_eq!(p["platform"], "emulated", "{p}");
    assert!(p["note"]
        .as_str()
        .unwrap()
        .contains("not an InfiniBand network"));
    let facts = &p["nodes"][1];
    assert!(
        facts["name"].as_str().unwrap().ends_with("client.log"),
        "{facts}"
    );
    assert!(
        facts["cpu"].as_str().unwrap().starts_with("QEMU TCG"),
        "{facts}"
    );
    assert!(facts["ibkern_commit"].is_string(), "{facts}");
    assert!(
        facts["tsc"].as_str().unwrap().contains(" MHz from "),
        "{facts}"
    );
    assert_eq!(facts["hca"], "00:03.0 15b3:1003", "{facts}");
    assert_eq!(
        facts["pcie_link"], "capable x8 gen3, running x8 gen3",
        "{facts}"
    );
    assert!(
        facts["config"].as_str().unwrap().contains("role=client"),
        "{facts}"
    );
    assert!(
        reference.stdout.starts_with("# source: emulated"),
        "{}",
        reference.stdout
    );
    assert!(reference
        .stdout
        .contains("ib_send_lat over UD (client side)"));

    for (name, s, c) in [
        ("web", web_console(&server), web_console(&client)),
        ("bmc", bmc_console(&server), bmc_console(&client)),
        ("sol", sol_log(&server), sol_log(&client)),
        (
            "script",
            script_log(&server, "node0"),
            script_log(&client, "node1"),
        ),
    ] {
        // The mangling really broke every result line.
        assert!(
            !c.lines()
                .filter(|l| l.contains("ibkern-result"))
                .any(|l| l.trim_end().ends_with('}')),
            "{name}: some result line is still whole"
        );
        let files = [
            write(&format!("{name}-server.log"), &s),
            write(&format!("{name}-client.log"), &c),
        ];
        let out = dir.join(name);
        let run = run_results(&[&files[0], &files[1]], &out);
        assert_eq!(run.code(), Some(0), "{name}: {}", run.transcript());
        // The same tables (the table rows, not the runner's file names).
        // (The provenance lines name the files and the command, so they differ.)
        let table = |s: &str| -> Vec<String> {
            s.lines()
                .filter(|l| !l.contains("ibkern-qemu") && !l.starts_with('#'))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(table(&run.stdout), table(&reference.stdout), "{name}");
        let got = written_dir(&out);
        let json: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(got.join("latency.json")).unwrap()).unwrap();
        assert_eq!(json["results"], ref_json["results"], "{name}");
        let rows = |p: PathBuf| -> Vec<String> {
            fs::read_to_string(p)
                .unwrap()
                .lines()
                .filter(|l| !l.starts_with('#'))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(
            rows(got.join("latency.csv")),
            rows(ref_dir.join("latency.csv")),
            "{name}"
        );
        // The provenance read through the noise: the client's kernel, CPU, TSC and HCA.
        let p = &json["provenance"];
        assert_eq!(p["platform"], ref_json["provenance"]["platform"], "{name}");
        for node in 0..2 {
            for key in [
                "ibkern_version",
                "ibkern_commit",
                "config",
                "cpu",
                "tsc",
                "hca",
                "firmware",
                "board",
                "pcie_link",
            ] {
                assert_eq!(
                    p["nodes"][node][key], ref_json["provenance"]["nodes"][node][key],
                    "{name}: node {node} {key}"
                );
            }
        }
        assert!(fs::read_to_string(got.join("latency.svg"))
            .unwrap()
            .contains("<svg"));
        if name == "web" {
            assert!(
                run.stderr.contains("repeated line(s) ignored"),
                "{}",
                run.transcript()
            );
        }
    }
}

#[test]
fn a_file_without_results_is_refused_and_nothing_is_written() {
    let dir = scratch("results-none");
    let empty = dir.join("bios-menu.log");
    fs::write(&empty, "\u{1b}[2JPress F2 to enter setup\r\nBooting...\r\n").unwrap();
    let good = dir.join("client.log");
    fs::write(&good, fixture("ud-client.log")).unwrap();
    let out = dir.join("out");
    let run = run_results(&[&good, &empty], &out);
    assert_eq!(run.code(), Some(1), "{}", run.transcript());
    let msg = run.line_with_stderr("error:");
    assert!(
        msg.contains("bios-menu.log") && msg.contains("ibkern-result") && msg.contains("Nothing"),
        "{msg}"
    );
    assert!(!out.exists(), "{} was created", out.display());
    // A missing file is a host problem (3), named.
    let run = run_results(&[&dir.join("missing.log")], &out);
    assert_eq!(run.code(), Some(3), "{}", run.transcript());
    assert!(run.stderr.contains("missing.log"), "{}", run.transcript());
    // Something that is not a file of text (an endless device) is refused, not swallowed.
    let run = run_results(&[Path::new("/dev/zero")], &out);
    assert_eq!(run.code(), Some(3), "{}", run.transcript());
    assert!(
        run.stderr.contains("larger than 64 MiB"),
        "{}",
        run.transcript()
    );
    assert!(!out.exists());
    // No file at all is a usage error.
    let run = runner(&["results"], QUICK);
    assert_eq!(run.code(), Some(2), "{}", run.transcript());
}

#[test]
fn a_cut_result_line_is_named_and_the_rest_still_written() {
    let dir = scratch("results-cut");
    let client = fixture("ud-client.log");
    // The copy lost the end of the 64-byte line.
    let cut: String = client
        .lines()
        .map(|l| {
            if l.contains("\"bytes\":64,") {
                l[..l.len() / 2].to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let file = dir.join("client.log");
    fs::write(&file, cut).unwrap();
    let out = dir.join("out");
    let run = run_results(&[&file], &out);
    assert_eq!(run.code(), Some(1), "{}", run.transcript());
    let msg = run.line_with_stderr("unreadable result line");
    assert!(
        msg.contains("client.log") && msg.contains("never closes"),
        "{msg}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(written_dir(&out).join("latency.json")).unwrap())
            .unwrap();
    assert_eq!(json["results"].as_array().unwrap().len(), 10);
}

/// The JSON records a `results` run wrote under `out`.
fn records(out: &Path) -> serde_json::Value {
    let json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(written_dir(out).join("latency.json")).unwrap())
            .unwrap();
    json
}

#[test]
fn consoles_saved_into_one_file_are_read_as_their_nodes() {
    let server = fixture("ud-server.log");
    let client = fixture("ud-client.log");
    let dir = scratch("results-one-file");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        fs::write(&p, text).unwrap();
        p
    };
    let (s, c) = (write("server.log", &server), write("client.log", &client));
    let reference = run_results(&[&s, &c], &dir.join("two"));
    assert_eq!(reference.code(), Some(0), "{}", reference.transcript());
    let two = records(&dir.join("two"));
    // Both consoles in one file, as saved, and as a BMC's screen gives them back.
    for (name, text) in [
        ("both.log", format!("{server}{client}")),
        ("both-bmc.log", bmc_console(&server) + &bmc_console(&client)),
    ] {
        let both = write(name, &text);
        let out = dir.join(name.replace(".log", ""));
        let run = run_results(&[&both], &out);
        assert_eq!(run.code(), Some(0), "{name}: {}", run.transcript());
        assert!(
            run.stderr.contains("holds the consoles of 2 boots"),
            "{name}: {}",
            run.transcript()
        );
        let one = records(&out);
        // The same records, node for node (0 the server, 1 the client), not one node.
        assert_eq!(one["results"], two["results"], "{name}");
        let nodes = one["provenance"]["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 2, "{name}");
        assert!(nodes[1]["name"]
            .as_str()
            .unwrap()
            .ends_with("(boot 2 of 2)"));
        assert!(nodes[1]["config"].as_str().unwrap().contains("role=client"));
        assert_eq!(one["provenance"]["platform"], "emulated", "{name}");
    }
    // Lines of both nodes interleaved (no boot lines to split them at): refused.
    let mixed: String = server
        .lines()
        .filter(|l| l.starts_with("ibkern-result"))
        .zip(client.lines().filter(|l| l.starts_with("ibkern-result")))
        .map(|(a, b)| format!("{a}\n{b}\n"))
        .collect();
    let mixed = write("mixed.log", &mixed);
    let out = dir.join("mixed");
    let run = run_results(&[&mixed], &out);
    assert_eq!(run.code(), Some(1), "{}", run.transcript());
    assert!(
        run.line_with_stderr("error:")
            .contains("both a server's and a client's"),
        "{}",
        run.transcript()
    );
    assert!(!out.exists());
}

#[test]
fn the_same_console_twice_is_refused_and_standard_input_is_read() {
    let server = fixture("ud-server.log");
    let client = fixture("ud-client.log");
    let dir = scratch("results-twice");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        fs::write(&p, text).unwrap();
        p
    };
    let (s, c) = (write("server.log", &server), write("client.log", &client));
    let copy = write("client-copy.log", &client);
    let bmc = write("client-bmc.log", &bmc_console(&client));
    let out = dir.join("out");
    // The same file twice, a copy of it, and the same console saved another way.
    for (twice, why) in [
        (&c, "is given twice"),
        (&copy, "holds the same results as"),
        (&bmc, "holds the same results as"),
    ] {
        let run = run_results(&[&s, &c, twice], &out);
        assert_eq!(run.code(), Some(2), "{}", run.transcript());
        assert!(run.stderr.contains(why), "{why}: {}", run.transcript());
        assert!(!out.exists(), "nothing is written");
    }
    // `-`: the client's console on standard input, the same as from its file.
    let reference = run_results(&[&s, &c], &dir.join("files"));
    assert_eq!(reference.code(), Some(0), "{}", reference.transcript());
    let stdin_out = dir.join("stdin");
    let args = [
        "results",
        s.to_str().unwrap(),
        "-",
        "--out",
        stdin_out.to_str().unwrap(),
    ];
    let run = support::runner_with_stdin(&args, &client, QUICK);
    assert_eq!(run.code(), Some(0), "{}", run.transcript());
    assert!(run.stderr.contains("node 1: standard input: 11 result(s)"));
    assert_eq!(
        records(&stdin_out)["results"],
        records(&dir.join("files"))["results"]
    );
    // Standard input only once.
    let run = support::runner_with_stdin(&["results", "-", "-"], &client, QUICK);
    assert_eq!(run.code(), Some(2), "{}", run.transcript());
}
