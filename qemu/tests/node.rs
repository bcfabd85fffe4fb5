//! System test: the emulated twin of a two-host run. `cargo qemu fabric --nodes 2` runs as a
//! process of its own; `cargo qemu node --fabric DIR --index I` runs twice, server and client,
//! as two further processes (as on two hosts), each booting ibkern under TCG with an HCA of
//! that fabric. Both must pass, the client's files must hold its UD row and console log;
//! then SIGTERM stops the fabric, which must exit and leave no socket behind.
//!
//! Also: a node whose fabric stops under it stops its QEMU and exits 3, keeping its log; a
//! refused configuration (exit 2) and a missing fabric (exit 3) write nothing.
//!
//! What this does not cover: `node --vfio` with a real ConnectX-3 (there is none here); its
//! QEMU command line is unit-tested in qemu/src/node.rs.

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Child;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use support::{kernel, runner, scratch, spawn_runner, the_run};

/// The guests' own bound (two TCG boots, about 20 s each here when run side by side).
const NODE_TIMEOUT: &str = "90";
/// Slack for the runner around the guest's bound.
const LIMIT: Duration = Duration::from_secs(90);
/// From SIGTERM to the fabric's exit.
const STOP_LIMIT: Duration = Duration::from_secs(10);

/// A child process killed (and reaped) if the test fails before it ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn wait_bounded(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        thread::sleep(Duration::from_millis(50));
    }
    None
}

/// Starts the fabric and waits (bounded) for its "ready" line; returns it with what it printed.
fn start_fabric(dir: &Path) -> (Reaped, String) {
    let mut child = spawn_runner(&[
        "fabric",
        "--nodes",
        "2",
        "--socket-dir",
        dir.to_str().unwrap(),
    ]);
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let err = child.stderr.take().unwrap();
    thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            eprintln!("fabric: {line}");
        }
    });
    let child = Reaped(child);
    let mut seen = String::new();
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                seen.push_str(&line);
                seen.push('\n');
                if line.starts_with("fabric: ready") {
                    return (child, seen);
                }
            }
            Err(_) => panic!("the fabric did not say it was ready:\n{seen}"),
        }
    }
}

/// SIGTERM to the fabric: it exits (128 + 15, as every runner command a signal stops) within
/// [`STOP_LIMIT`] and removes its sockets and the directory `dir` it created.
fn stop_fabric(fabric: &mut Reaped, dir: &Path) {
    let pid = libc::pid_t::try_from(fabric.0.id()).unwrap();
    // SAFETY: kill(2) on our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = wait_bounded(&mut fabric.0, STOP_LIMIT).expect("the fabric did not stop");
    assert_eq!(status.code(), Some(128 + 15), "{status:?}");
    assert!(!dir.exists(), "{} left behind", dir.display());
}

/// A `cargo qemu node` process: its stdout and stderr lines as they come, and its whole
/// stderr once it has ended.
struct NodeProcess {
    child: Reaped,
    lines: mpsc::Receiver<String>,
    stderr: thread::JoinHandle<String>,
}

/// Starts `cargo qemu <args>` as a process of its own.
fn spawn_node(args: &[&str]) -> NodeProcess {
    let mut child = spawn_runner(args);
    let (tx, lines) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let tx_err = tx.clone();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let stderr = thread::spawn(move || {
        let mut all = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx_err.send(line.clone());
            all.push(line);
        }
        all.join("\n")
    });
    NodeProcess {
        child: Reaped(child),
        lines,
        stderr,
    }
}

/// Waits (at most `limit`) for a line of `node` containing `needle`; returns it.
fn wait_for_line(node: &NodeProcess, needle: &str, limit: Duration) -> String {
    let end = Instant::now() + limit;
    let mut seen = String::new();
    loop {
        match node
            .lines
            .recv_timeout(end.saturating_duration_since(Instant::now()))
        {
            Ok(l) if l.contains(needle) => return l,
            Ok(l) => {
                seen.push_str(&l);
                seen.push('\n');
            }
            Err(e) => panic!("no {needle:?} within {limit:?} ({e}):\n{seen}"),
        }
    }
}

fn node_args<'a>(
    dir: &'a str,
    index: &'a str,
    role: &'a str,
    kernel: &'a str,
    out: &'a str,
) -> Vec<&'a str> {
    vec![
        "node",
        "--fabric",
        dir,
        "--index",
        index,
        "--role",
        role,
        "-c",
        "UD",
        "-s",
        "64",
        "-n",
        "5",
        "--kernel",
        kernel,
        "--out",
        out,
        "--timeout",
        NODE_TIMEOUT,
    ]
}

#[test]
fn two_nodes_on_a_separate_fabric_process_run_the_ping_pong() {
    let _one = support::one_guest();
    let scratch = scratch("node-fabric");
    let kernel = kernel().to_str().unwrap().to_string();
    let dir = scratch.join("fabric");
    let dir_s = dir.to_str().unwrap().to_string();
    let (mut fabric, printed) = start_fabric(&dir);
    assert!(
        printed.contains(&format!(
            "cargo qemu node --fabric {dir_s} --index 1 --role client"
        )),
        "the fabric prints how a node attaches:\n{printed}"
    );
    for i in 0..2 {
        assert!(dir.join(format!("node{i}.sock")).exists(), "node{i}.sock");
    }

    // The server as a process of its own, the client through the support runner.
    let out_server = scratch.join("server");
    let out_client = scratch.join("client");
    let (os, oc) = (
        out_server.to_str().unwrap().to_string(),
        out_client.to_str().unwrap().to_string(),
    );
    let mut server = spawn_node(&node_args(&dir_s, "0", "server", &kernel, &os));
    // The server attaches first, so its HCA is the switch's first: LID 2 (the fabric's
    // subnet manager numbers HCA ports in attach order, docs/model.md). The client is given
    // that LID instead of probing for it.
    let attached = wait_for_line(&server, "attached to the fabric", Duration::from_secs(30));
    assert!(attached.contains("as node 0 (HCA 0)"), "{attached}");
    let mut client_args = node_args(&dir_s, "1", "client", &kernel, &oc);
    client_args.extend(["--peer-lid", "2", "--trace"]);
    let client = runner(&client_args, LIMIT);
    let server_status =
        wait_bounded(&mut server.child.0, LIMIT).expect("the server node did not end");
    let server_stderr = server.stderr.join().unwrap();
    assert_eq!(
        client.code(),
        Some(0),
        "client:\n{}\nserver:\n{server_stderr}",
        client.transcript()
    );
    assert!(
        server_status.success(),
        "server {server_status:?}:\n{server_stderr}"
    );
    // The model's report reached both nodes, with no violation.
    client.line_with_stderr("model violations: 0");
    assert!(
        server_stderr.contains("model violations: 0"),
        "{server_stderr}"
    );
    client.line_with_stderr("attached to the fabric");

    // The client's files: the console log as it streamed, the UD row in CSV and JSON.
    let run = the_run(&out_client);
    let log = std::fs::read_to_string(run.join("ud-client.log")).unwrap();
    assert!(log.contains("pingpong: PASS"), "{log}");
    // The LIDs the subnet manager gave in attach order; the peer is the one --peer-lid named.
    assert!(log.contains("local lid 4 qpn"), "{log}");
    assert!(log.contains("peer lid 2 qpn"), "{log}");
    // The configuration as the emitter writes it: LIDs in hex.
    client.line_with_stderr("peer_lid=0x2 ");
    assert!(log.contains("ibkern-result "), "{log}");
    let csv = std::fs::read_to_string(run.join("latency.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(
        rows[0].starts_with("node,role,test,transport,bytes,iterations"),
        "{csv}"
    );
    assert_eq!(rows.len(), 2, "one row:\n{csv}");
    assert!(rows[1].starts_with("0,client,send_lat,UD,64,5,"), "{csv}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("latency.json")).unwrap()).unwrap();
    let results = json["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{json}");
    assert_eq!(results[0]["transport"], "UD");
    assert_eq!(results[0]["role"], "client");
    assert_eq!(results[0]["bytes"], 64);
    assert_eq!(results[0]["lost"], 0);
    assert!(results[0]["t_avg_us"].as_f64().unwrap() > 0.0, "{json}");
    assert_eq!(json["provenance"]["platform"], "emulated", "{json}");
    assert!(run.join("latency.svg").is_file());
    // The model's traffic of the client's HCA for the size, as `pingpong` writes it.
    let pcie = std::fs::read_to_string(run.join("pcie.csv")).unwrap();
    let rows: Vec<&str> = pcie.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(
        rows[0].starts_with("transport,bytes,iterations,node,mmio_writes,"),
        "{pcie}"
    );
    assert_eq!(rows.len(), 2, "one row:\n{pcie}");
    // The window is the model's own (the HCA's run of the data QP's send queue between two
    // rendezvous messages), so even five iterations show their traffic: every iteration
    // sent and received a packet, each 64-byte ping went through BlueFlame with at least
    // one MMIO write; no more than twice as many packets as iterations (no retries here).
    let cells: Vec<u64> = rows[1]
        .strip_prefix("UD,64,5,client,")
        .unwrap_or_else(|| panic!("{pcie}"))
        .split(',')
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{pcie}")))
        .collect();
    assert_eq!(cells.len(), 12, "{pcie}");
    let (mmio_writes, bf_bytes, sent, received) = (cells[0], cells[2], cells[10], cells[11]);
    assert!(mmio_writes >= 5, "{pcie}");
    assert!(bf_bytes >= 5 * 64, "{pcie}");
    assert!((5..=10).contains(&sent), "{pcie}");
    assert!((5..=10).contains(&received), "{pcie}");
    // --trace: the model's behaviour trace of the client's HCA, its UD sends among it.
    let trace = std::fs::read_to_string(run.join("ud-client.trace")).unwrap();
    assert!(
        trace.lines().any(|l| l.starts_with("wqe UD SEND ")),
        "no UD SEND WQE in the client's trace\n{trace}"
    );
    client.line_with_stderr("model trace: ");
    // The client's table went to its stdout, as perftest prints it.
    client.line_with("ib_send_lat over UD (client side)");
    let server_run = the_run(&out_server);
    let server_log = std::fs::read_to_string(server_run.join("ud-server.log")).unwrap();
    assert!(server_log.contains("pingpong: PASS"), "{server_log}");

    // SIGTERM: the fabric exits (128 + 15, as every runner command a signal stops) and removes
    // its sockets and the directory it created.
    stop_fabric(&mut fabric, &dir);
}

#[test]
fn a_bad_configuration_is_refused_before_anything_boots() {
    let scratch = scratch("node-refused");
    let out = scratch.join("out");
    let out_s = out.to_str().unwrap();
    // No fabric is needed for the refusal: the configuration is checked first.
    let run = runner(
        &[
            "node",
            "--fabric",
            "/nonexistent",
            "--index",
            "0",
            "--role",
            "client",
            "-c",
            "UD",
            "-s",
            "4096",
            "--out",
            out_s,
        ],
        Duration::from_secs(10),
    );
    assert_eq!(run.code(), Some(2), "{}", run.transcript());
    run.line_with_stderr("larger than the path MTU 2048");
    assert!(!out.exists(), "nothing written");
    // A good configuration without a fabric: a host problem (3), still nothing written.
    let run = runner(
        &[
            "node",
            "--fabric",
            "/nonexistent",
            "--index",
            "0",
            "--role",
            "client",
            "-c",
            "UD",
            "-s",
            "64",
            "--out",
            out_s,
        ],
        Duration::from_secs(10),
    );
    assert_eq!(run.code(), Some(3), "{}", run.transcript());
    run.line_with_stderr("no fabric socket /nonexistent/node0.sock");
    assert!(!out.exists(), "nothing written");
    // `--vfio` with a function this host does not have ready for VFIO: the checks of
    // `vfio-check` fail (exit 3) before anything is written or QEMU started.
    let run = runner(
        &[
            "node",
            "--vfio",
            "0000:ff:1f.7",
            "--role",
            "client",
            "-c",
            "UD",
            "-s",
            "64",
            "--out",
            out_s,
        ],
        Duration::from_secs(10),
    );
    assert_eq!(run.code(), Some(3), "{}", run.transcript());
    run.line_with_stderr("vfio: 0000:ff:1f.7: ");
    assert!(!out.exists(), "nothing written");
}

/// The processes whose parent is `parent` (from /proc/*/stat).
fn children(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may contain spaces, so split after the last ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            found.push(pid);
        }
    }
    found
}

#[test]
fn a_node_stops_its_qemu_when_the_fabric_stops() {
    let _one = support::one_guest();
    let scratch = scratch("node-fabric-stop");
    let kernel = kernel().to_str().unwrap().to_string();
    let dir = scratch.join("fabric");
    let dir_s = dir.to_str().unwrap().to_string();
    let (mut fabric, _) = start_fabric(&dir);
    let out = scratch.join("server");
    let out_s = out.to_str().unwrap().to_string();
    // A server without a client: it boots, then waits for a peer that never comes.
    let mut node = spawn_node(&node_args(&dir_s, "0", "server", &kernel, &out_s));
    let node_pid = node.child.0.id();
    // Wait until the server's bench is running (its port is up: the HCA is in use).
    wait_for_line(&node, "mlx4: port 1: ACTIVE", LIMIT);
    let qemus = children(node_pid);
    assert_eq!(qemus.len(), 1, "the node's QEMU: {qemus:?}");
    stop_fabric(&mut fabric, &dir);
    // The node notices, stops its QEMU and fails as a host problem (3), keeping its log.
    let node_status = wait_bounded(&mut node.child.0, STOP_LIMIT).expect("the node did not stop");
    let stderr = node.stderr.join().unwrap();
    assert_eq!(node_status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("the fabric stopped"), "{stderr}");
    for q in qemus {
        assert!(
            !Path::new(&format!("/proc/{q}")).exists()
                || std::fs::read_to_string(format!("/proc/{q}/stat"))
                    .is_ok_and(|s| s.contains(") Z ")),
            "QEMU {q} survived its node"
        );
    }
    let log = std::fs::read_to_string(the_run(&out).join("ud-server.log")).unwrap();
    assert!(log.contains("mlx4: port 1: ACTIVE"), "{log}");
    // The node's own qtest/QMP socket directory is gone too.
    let prefix = format!("ibkern-mpqemu-{node_pid}-");
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// The attach protocol against the fabric binary, with a stand-in node (no QEMU): one node
/// per index at a time, a malformed request refused, the index free again once its node has
/// gone, the report answered; then SIGTERM.
#[test]
fn the_fabric_takes_one_node_per_index_and_answers_reports() {
    use ibkern_qemu::fabric::{send_with_fd, AttachRequest};
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    let scratch = scratch("node-fabric-protocol");
    let dir = scratch.join("fabric");
    let (mut fabric, _) = start_fabric(&dir);
    let request = AttachRequest {
        name: "standin".into(),
        qtest: scratch.join("no-qtest.sock"),
        qmp: scratch.join("no-qmp.sock"),
        loss: None,
        trace: false,
        profile: None,
    };
    let attach = |request: &str| {
        let stream = UnixStream::connect(dir.join("node0.sock")).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let (proxy, _qemu_end) = UnixStream::pair().unwrap();
        send_with_fd(&stream, request, proxy.as_raw_fd()).unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut answer = String::new();
        reader.read_line(&mut answer).unwrap();
        (stream, reader, answer.trim_end().to_string(), _qemu_end)
    };
    let (first, mut reader, answer, _keep) = attach(&request.line());
    assert_eq!(answer, "ok hca 0");
    let (_, _, answer, _) = attach(&request.line());
    assert_eq!(answer, "error node 0 is already attached");
    // The report of a fresh HCA: counters, the PCIe values, no violation.
    (&first).write_all(b"report\n").unwrap();
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let done = line.starts_with("end ");
        lines.push(line.trim_end().to_string());
        if done {
            break;
        }
    }
    assert!(lines[0].starts_with("counters mmio r/w 0/0"), "{lines:?}");
    assert_eq!(lines[1], "pcie 0,0,0,0,0,0,0,0,0,0,0,0", "{lines:?}");
    assert_eq!(lines.last().unwrap(), "end 0", "{lines:?}");
    drop((first, reader, _keep));
    // Once the node has gone, the index attaches again (a new HCA); a bad request is refused.
    let end = Instant::now() + Duration::from_secs(10);
    let answer = loop {
        let (_, _, answer, _) = attach(&request.line());
        if answer != "error node 0 is already attached" || Instant::now() > end {
            break answer;
        }
        thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(answer, "ok hca 1");
    let end = Instant::now() + Duration::from_secs(10);
    let answer = loop {
        let (_, _, answer, _) = attach("attach x qtest=/a");
        if answer != "error node 0 is already attached" || Instant::now() > end {
            break answer;
        }
        thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(answer, "error attach: qtest= and qmp= are both needed");
    stop_fabric(&mut fabric, &dir);
}
