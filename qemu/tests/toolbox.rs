//! System tests "toolbox": Linux's verbs toolbox runs unmodified on the emulated fabric, one
//! boot of a Debian guest pair (docs/linux-guest.md, "Toolbox"). The guests run
//! `qemu/tests/linux/toolbox.sh`: infiniband-diags (ibstat, ibaddr, smpquery, perfquery
//! before and after known traffic, ibportstate), rdma-core's examples (ibv_devinfo -v, the
//! RC/UC/UD ping-pongs with their data checks, ibv_asyncwatch while a port goes down and
//! up) and every perftest test with -a and with -e, -Q, -l, -t, -b. About 5 minutes under
//! TCG: run alone with `cargo test -p ibkern-qemu --test toolbox`. If the Debian packages
//! cannot be downloaded it fails with apt's message; it never skips.

use std::path::PathBuf;
use std::time::Duration;

use ibkern_qemu::linux::image;
use ibkern_qemu::linux::run::{free_ports, run_linux, LinuxOutcome, LinuxRun};
use ibkern_qemu::machine::Machine;

const SCRIPT: &str = include_str!("linux/toolbox.sh");

fn work_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join("out/linux")
}

fn transcript(o: &LinuxOutcome) -> String {
    o.guests
        .iter()
        .map(|g| format!("--- {} console ---\n{}", g.node.name, g.node.console))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The four traffic counters of each perfquery run in `text`, in order: (PortXmitData,
/// PortRcvData, PortXmitPkts, PortRcvPkts), data in 4-byte words as the PMA counts them.
fn perfquery_reads(text: &str) -> Vec<[u64; 4]> {
    let field = |block: &str, name: &str| -> u64 {
        let line = block
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name}:")))
            .unwrap_or_else(|| panic!("perfquery printed no {name}:\n{block}"));
        let digits = line.rsplit('.').next().unwrap_or("").trim();
        digits
            .parse()
            .unwrap_or_else(|_| panic!("{name} is not a number: {line:?}"))
    };
    text.split("ibkern-linux: run perfquery")
        .skip(1)
        .map(|block| {
            let block = block.split("ibkern-linux: result").next().unwrap_or("");
            [
                field(block, "PortXmitData"),
                field(block, "PortRcvData"),
                field(block, "PortXmitPkts"),
                field(block, "PortRcvPkts"),
            ]
        })
        .collect()
}

/// What the guest printed while running `cmd` (between `ibkern-linux: run CMD` and its
/// result line).
fn run_output<'a>(console: &'a str, cmd: &str) -> &'a str {
    let start = format!("ibkern-linux: run {cmd}");
    let Some(at) = console
        .match_indices(&start)
        .map(|(i, _)| i)
        .find(|&i| matches!(console.as_bytes().get(i + start.len()), Some(b'\r' | b'\n')))
    else {
        return "";
    };
    let rest = &console[at + start.len()..];
    let end = rest.find("ibkern-linux: result rc=").unwrap_or(rest.len());
    &rest[..end]
}

/// A UD SEND of 1024 bytes on the wire, in words: LRH 8 + BTH 12 + DETH 8 + payload + ICRC 4
/// (IBA: PortXmitData counts the octets from the LRH through the ICRC, divided by 4).
const UD_1024_WORDS: u64 = (8 + 12 + 8 + 1024 + 4) / 4;

#[test]
fn linux_toolbox_runs_unmodified_on_the_emulated_fabric() {
    let image = image::build(&work_root())
        .unwrap_or_else(|e| panic!("building the Linux guest from Debian packages failed: {e:#}"));
    let work = work_root().join("test-toolbox");
    std::fs::create_dir_all(&work).expect("work dir");
    let run = LinuxRun {
        trace: false,
        guests: 2,
        msix: true,
        machine: Machine::Pc,
        script: SCRIPT.to_string(),
        timeout: Duration::from_secs(900),
        test_timeout: 180,
        link_ports: free_ports().expect("ports"),
        profiles: Vec::new(),
    };
    let o = run_linux(&image, &run, &work).expect("running the Linux guests");
    for line in o.report() {
        eprintln!("{line}");
    }
    let report = || format!("{}\n{}", o.report().join("\n"), transcript(&o));
    let programs = SCRIPT
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("ibk_run ") || l.starts_with("ibk_pair "))
        .count();
    for (n, g) in o.guests.iter().enumerate() {
        assert!(
            g.modprobes.len() >= 3 && g.modprobes.iter().all(|l| l.ends_with(": ok")),
            "{}",
            report()
        );
        assert!(g.complaints.is_empty(), "{}", report());
        assert_eq!(g.lid, Some(g.expected_lid), "{}", report());
        assert!(g.node.violations.is_empty(), "{}", report());
        assert!(!o.timed_out(), "{}", report());
        // Node 1 alone runs the three ibportstate commands.
        let expected = if n == 1 { programs } else { programs - 3 };
        assert_eq!(g.results.len(), expected, "{:?}", g.results);
        // Every program exits 0, except a perftest run whose only complaint is its own
        // clock calibration (perftest fits the CPU's cycle counter against gettimeofday and
        // refuses to print its report when the fit is poor, which happens under TCG on a
        // loaded machine): its transfers completed, the peer's side exited 0.
        let failed: Vec<&String> = g
            .results
            .iter()
            .filter(|(rc, _)| *rc != 0)
            .map(|(_, cmd)| cmd)
            .collect();
        for cmd in &failed {
            let block = run_output(&g.node.console, cmd);
            assert!(
                cmd.starts_with("ib_")
                    && block.contains("Correlation coefficient r^2")
                    && block.contains("Can't produce a report"),
                "{}: {cmd} failed:\n{block}\n{}",
                g.node.name,
                report()
            );
            let peer = &o.guests[1 - n];
            assert!(
                peer.results.iter().any(|(rc, c)| c == *cmd && *rc == 0),
                "{cmd} failed on both sides\n{}",
                report()
            );
        }
        assert_eq!(g.script_exit, Some(failed.len() as i32), "{}", report());
    }
    // Node 0's port never went down: nothing of its traffic was lost. (Node 1's MAD layer
    // asks the SM at LID 1 for its ClassPortInfo when the port comes back ACTIVE; no SA
    // answers there, docs/model.md "What is not modelled".)
    assert_eq!(o.guests[0].node.counters.packets_dropped, 0);

    for (n, g) in o.guests.iter().enumerate() {
        let c = &g.node.console;
        let lid = sim::Fabric::sm_lid_for(n, 1);
        let peer = sim::Fabric::sm_lid_for(1 - n, 1);
        for needle in [
            "hca_id:\tmlx4_0".to_string(),
            "State: Active".to_string(),
            format!("Base lid: {lid}"),
            format!("LID start {lid:#x} end {lid:#x}"),
            format!("# Node info: Lid {lid}"),
            format!("# Node info: Lid {peer}"),
            "NodeType:........................Channel Adapter".to_string(),
            "DevId:...........................0x1003".to_string(),
            format!("# Port info: Lid {lid} port 0"),
            format!("# Port counters: Lid {peer} port 1"),
        ] {
            assert!(c.contains(&needle), "{} lacks {needle:?}\n{c}", g.node.name);
        }
        // perfquery around 5 UD messages of 1024 bytes each way: the counts grow by the
        // traffic plus what one perfquery read itself costs (its MADs to the port's own LID:
        // the difference of the two reads before).
        let counted = c
            .split("ibkern-toolbox: counters before")
            .nth(1)
            .expect("counters before");
        let reads = perfquery_reads(counted);
        assert_eq!(reads.len(), 4, "{counted}");
        let (a, b, after, basic) = (reads[0], reads[1], reads[2], reads[3]);
        let cost: Vec<u64> = (0..4).map(|k| b[k] - a[k]).collect();
        assert!(
            cost[2] > 0 && cost[3] > 0,
            "a perfquery read is traffic too: {cost:?}"
        );
        let traffic: Vec<u64> = (0..4).map(|k| after[k] - b[k] - cost[k]).collect();
        assert_eq!(
            traffic,
            [5 * UD_1024_WORDS, 5 * UD_1024_WORDS, 5, 5],
            "{}: PortCountersExtended (xmit data, rcv data, xmit pkts, rcv pkts) over the \
             ping-pong: reads {reads:?}",
            g.node.name
        );
        // PortCounters (32-bit) read right after: the same counts plus one more read's cost.
        let basic_delta: Vec<u64> = (0..4).map(|k| basic[k] - after[k]).collect();
        assert_eq!(
            basic_delta, cost,
            "PortCounters after PortCountersExtended: {reads:?}"
        );
    }

    // ibv_srq_pingpong: 16 QPs connected on both sides, 64 messages each way.
    for g in &o.guests {
        let block = run_output(&g.node.console, "ibv_srq_pingpong -n 64 -s 1024 -r 32");
        assert_eq!(
            block.matches("remote address:").count(),
            16,
            "{}: {block}",
            g.node.name
        );
        assert!(
            block.contains("131072 bytes in") && block.contains("64 iters in"),
            "{}: {block}",
            g.node.name
        );
    }

    let c1 = &o.guests[1].node.console;
    let err = c1
        .find("IBV_EVENT_PORT_ERR")
        .expect("ibv_asyncwatch saw PORT_ERR");
    let active = c1
        .find("IBV_EVENT_PORT_ACTIVE")
        .expect("ibv_asyncwatch saw PORT_ACTIVE");
    assert!(err < active, "PORT_ERR before PORT_ACTIVE\n{c1}");
    assert!(
        c1.contains("ibkern-toolbox: port after down: 2: INIT"),
        "{c1}"
    );
    assert!(
        c1.contains("ibkern-toolbox: port after active: 4: ACTIVE"),
        "{c1}"
    );

    // perftest rows: the -a sweeps reach 8 MiB (RC/UC), 5 iterations.
    let rows = c1.lines().filter(|l| l.starts_with(" 8388608 5 ")).count();
    assert!(rows >= 4, "{rows} rows of 8 MiB x 5 iterations\n{c1}");
}
