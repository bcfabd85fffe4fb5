//! `cargo qemu delegate`: a Linux guest running the delegate (`ibkern-delegate`,
//! docs/delegation.md) and ibkern guests using it, on one emulated fabric.
//!
//! The Linux guest starts, in its scratch directory, an RC `ib_send_lat` server (`ibk-rdv
//! -r server -c RC`, the benchmark's baseline) and writes the nodes' plans under the
//! delegate's root (`root/plans/`), the baseline's rendezvous QPN into the first node's;
//! then it starts the delegate, whose "listening on LID ... rendezvous QPN ..." line the
//! runner waits for: it boots the ibkern nodes then, each with `delegate=LID:QPN` and
//! nothing else to do but what its plan on the delegate says (`mode=delegate`: the
//! benchmark; with `--pair-run`, two more nodes in `mode=pingpong` run a ping-pong plan).
//! Each node writes its transcript into `root/results/<guid>/<run>/console.log`. Once every
//! node's results are there (bounded), the guest stops the delegate and prints every file
//! of the root (base64, between markers), which the runner copies into the run directory
//! (`root/`), beside `delegate.{csv,json,svg}` from the benchmark nodes' result lines.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use sim::Counters;

use super::image;
use super::run::{judge, node_specs_with_initrd, LinuxRun};
use crate::delegate_results::DelegateResults;
use crate::hca::{report_lines, run_nodes_staged, LaterNode, NodeOutcome, NodeSpec};
use crate::prepare::GuestBuilder;
use crate::{say, Exit};

/// The delegate's line once it listens (its LID and rendezvous QPN follow).
pub const LISTENING: &str = "ibkern-delegate: listening on LID ";
/// A file of the delegate's root on the Linux console: `<marker><size> <path>`, its
/// base64 lines, then [`FILE_END`].
pub const FILE_BEGIN: &str = "ibkern-delegate-file ";
pub const FILE_END: &str = "ibkern-delegate-file-end";

/// `cargo qemu delegate`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  cargo qemu delegate\n  cargo qemu delegate -n 20 --max-size 65536 --mode poll,isr\n  cargo qemu delegate --nodes 2 --pair-run 'ib_send_lat -c RC -s 64 -n 20'"
)]
pub struct DelegateArgs {
    /// ibkern nodes running the delegation benchmark against the one delegate.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=4))]
    pub nodes: u8,
    /// Calls per row of the latency tables (perftest's -n).
    #[arg(
        short = 'n',
        long = "iters",
        value_name = "ITERS",
        default_value_t = 20
    )]
    pub iters: u32,
    /// The largest size of the pread, pwrite, READ and WRITE sweep (from 64 B, powers of two).
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub max_size: u32,
    /// Completion modes, each measured in turn (poll, event, isr).
    #[arg(long, value_name = "MODES", default_value = "poll,event,isr")]
    pub mode: String,
    /// The rate test's most null calls outstanding (1, 2, 4, ... up to it).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub outstanding: u16,
    /// Leave out the RC ib_send_lat baseline (the null call's ratio to it).
    #[arg(long)]
    pub no_baseline: bool,
    /// Two more ibkern nodes run a ping-pong pair (client and server); the client's plan on
    /// the delegate is these run= lines (repeatable), and both write their results there.
    #[arg(long = "pair-run", value_name = "RUN")]
    pub pair_runs: Vec<String>,
    /// With no --pair-run: fail if the delegate has not listened this many seconds after
    /// the Linux guest's QEMU started.
    #[arg(long, value_name = "SECS", default_value_t = 240)]
    pub listen_timeout: u64,
    /// Kill every guest and fail after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 1800)]
    pub timeout: u64,
    /// Base directory: this run's files go to DIR/<UTC start time>/, DIR/latest points to
    /// the newest run [default: out/delegate].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Linux guest work directory (packages cache, initramfs) [default: out/linux].
    #[arg(long, value_name = "DIR")]
    pub linux_dir: Option<PathBuf>,
    /// Cargo profile the delegate is built with for the guest (`dev` reuses the build
    /// the workspace's tests made).
    #[arg(long, value_enum, value_name = "PROFILE", default_value = "release")]
    pub delegate_profile: DelegateProfile,
    /// Stream the guests' consoles to stdout also when it is a terminal.
    #[arg(long, short = 'v')]
    pub verbose: bool,
    #[command(flatten)]
    pub kernel: crate::args::KernelArgs,
}

/// The cargo profile of the delegate's build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DelegateProfile {
    Release,
    Dev,
}

/// What an ibkern node is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Job {
    /// `mode=delegate`: the benchmark (the first one also the baseline).
    Bench,
    PairServer,
    PairClient,
}

impl Job {
    fn name(self, i: usize) -> String {
        match self {
            Job::Bench => format!("ibkern{i}"),
            Job::PairServer => "pair-server".into(),
            Job::PairClient => "pair-client".into(),
        }
    }
}

/// The ibkern nodes in boot order (their LIDs follow the Linux node's: the fabric's
/// subnet manager numbers HCAs in the order they join).
fn jobs(args: &DelegateArgs) -> Vec<Job> {
    let mut v = vec![Job::Bench; usize::from(args.nodes)];
    if !args.pair_runs.is_empty() {
        v.extend([Job::PairServer, Job::PairClient]);
    }
    v
}

/// The LID of ibkern node `i` (the Linux node is the fabric's first HCA).
fn lid_of(i: usize) -> u16 {
    sim::Fabric::sm_lid_for(i + 1, 1)
}

/// A node's ramdisk: its mode, role, the delegate, the emulated waits.
fn node_config(job: Job, delegate: &str) -> Result<ibconfig::Config> {
    let mode = if job == Job::Bench {
        ibconfig::Mode::Delegate
    } else {
        ibconfig::Mode::Pingpong
    };
    let mut c = ibconfig::Config::with_mode(mode);
    c.hca_irq = ibconfig::HcaIrq::Msix;
    c.delegate.at = Some(
        ibconfig::delegate::parse_at(delegate)
            .map_err(|e| anyhow::anyhow!("delegate={delegate}: {e}"))?,
    );
    // Under emulation one wait may take seconds (as the ping-pong's runs set it).
    c.bench.wait_timeout_ns = 2_000_000_000;
    match job {
        Job::Bench => {}
        Job::PairServer => c.set_role(ibconfig::Role::Server),
        Job::PairClient => c.set_role(ibconfig::Role::Client),
    }
    Ok(c)
}

/// The plan of a benchmark node: the flags as keys (and the baseline's QPN, added by the
/// guest script to the first node's).
fn bench_plan(args: &DelegateArgs) -> String {
    format!(
        "# cargo qemu delegate: the delegation benchmark\niters={}\nmodes={}\ndelegate_max={}\ndelegate_outstanding={}\n",
        args.iters, args.mode, args.max_size, args.outstanding
    )
}

/// The ping-pong client's plan: the `--pair-run` lines.
fn pair_plan(args: &DelegateArgs) -> String {
    let mut s = String::from("# cargo qemu delegate: the ping-pong pair's runs\n");
    for r in &args.pair_runs {
        let _ = writeln!(s, "run={r}");
    }
    s
}

/// Checks every node's configuration with its plan laid over it, as the node will, before
/// anything is built or booted.
fn check(args: &DelegateArgs) -> Result<()> {
    let delegate = "2:0x208";
    for job in jobs(args) {
        let config = node_config(job, delegate)?;
        crate::kernel_config::check_config(&config)?;
        let plan = match job {
            Job::Bench => format!("{}delegate_baseline=0x209\n", bench_plan(args)),
            Job::PairClient => pair_plan(args),
            Job::PairServer => String::new(),
        };
        ibconfig::overlay(&config, &plan).map_err(|e| {
            crate::Usage(format!(
                "the {} node's plan would be refused: {e}",
                job.name(0)
            ))
        })?;
    }
    Ok(())
}

/// The Linux guest's script (sourced with /etc/ibkern/lib.sh).
pub fn script(
    plans: &[(String, String)],
    baseline: Option<(u16, u32)>,
    results: usize,
    wait_s: u64,
) -> String {
    let mut s = String::from("mkdir -p root/plans\n");
    for (name, text) in plans {
        let _ = write!(
            s,
            "cat > root/plans/{name} <<'IBKERN_PLAN'\n{text}IBKERN_PLAN\n"
        );
    }
    if let Some((lid, iters)) = baseline {
        let _ = write!(
            s,
            r#"ibk-rdv -r server -c RC -s {bytes} -n {iters} -t 2000 -p {wait_s} > rdv.log 2>&1 &
rdv=$!
qpn=
for i in $(seq 1 300); do
    qpn=$(sed -n 's/.*listening on LID 0x[0-9a-f]* rendezvous QPN \(0x[0-9a-f]*\).*/\1/p' rdv.log)
    [ -n "$qpn" ] && break
    usleep 200000
done
echo "ibkern-linux: baseline ibk-rdv RC server at rendezvous QPN ${{qpn:-none}}"
[ -n "$qpn" ] && echo "delegate_baseline=$qpn" >> root/plans/lid-{lid}.conf
"#,
            bytes = bench::delegate::benchmark::NULL_BYTES,
        );
    }
    let _ = write!(
        s,
        r#"ibkern-delegate --root root --credits 64 --lease-max-s 600 &
delegate=$!
# Until every node's results have landed (bounded).
n=0
for i in $(seq 1 {wait_s}); do
    n=$(ls root/results/*/*/console.log 2>/dev/null | wc -l)
    [ "$n" -ge {results} ] && break
    kill -0 $delegate 2>/dev/null || break
    sleep 1
done
echo "ibkern-linux: results of $n of {results} nodes in the delegate's root"
[ "$n" -ge {results} ] || IBK_FAILED=$((IBK_FAILED + 1))
sleep 1
kill $delegate 2>/dev/null
wait $delegate
echo "ibkern-linux: result rc=0: ibkern-delegate --root root (stopped)"
"#
    );
    if baseline.is_some() {
        s.push_str(
            r#"wait $rdv
rc=$?
cat rdv.log
echo "ibkern-linux: result rc=$rc: ibk-rdv -r server -c RC"
[ $rc = 0 ] || IBK_FAILED=$((IBK_FAILED + 1))
"#,
        );
    }
    let _ = write!(
        s,
        r#"echo 1 > /proc/sys/kernel/printk
for f in $(cd root && find . -type f | sort); do
    echo "{FILE_BEGIN}$(wc -c < "root/$f") ${{f#./}}"
    base64 "root/$f"
    echo "{FILE_END}"
done
"#
    );
    s
}

/// The delegate's LID and rendezvous QPN from its listening line
/// (`ibkern-delegate: listening on LID 0x0002 rendezvous QPN 0x000208 (mlx4_0 port 1), ...`).
pub fn parse_listening(line: &str) -> Option<(u16, u32)> {
    let rest = &line[line.find(LISTENING)? + LISTENING.len()..];
    let (lid, rest) = rest.split_once(" rendezvous QPN ")?;
    let qpn = rest.split_whitespace().next()?;
    let hex = |s: &str| s.trim().strip_prefix("0x").map(str::to_string);
    let lid = u16::from_str_radix(&hex(lid)?, 16).ok()?;
    let qpn = u32::from_str_radix(&hex(qpn)?, 16).ok()?;
    use ibconfig::bench::{MAX_UNICAST_LID, QPN_RANGE};
    ((1..=MAX_UNICAST_LID).contains(&lid) && (QPN_RANGE.0..=QPN_RANGE.1).contains(&qpn))
        .then_some((lid, qpn))
}

/// The files the Linux console printed between the markers: path → bytes, and the names
/// of those that did not decode to their size.
pub fn files_of(console: &str) -> (BTreeMap<String, Vec<u8>>, Vec<String>) {
    use base64_decode as decode;
    let mut files = BTreeMap::new();
    let mut bad = Vec::new();
    let mut current: Option<(usize, String, String)> = None;
    for line in console.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(rest) = line.strip_prefix(FILE_BEGIN) {
            let mut parts = rest.splitn(2, ' ');
            let size = parts.next().and_then(|s| s.trim().parse().ok());
            let path = parts.next().map(str::to_string);
            current = match (size, path) {
                (Some(size), Some(path)) => Some((size, path, String::new())),
                _ => {
                    bad.push(rest.to_string());
                    None
                }
            };
        } else if line == FILE_END {
            if let Some((size, path, text)) = current.take() {
                match decode(&text) {
                    Some(bytes) if bytes.len() == size => {
                        files.insert(path, bytes);
                    }
                    _ => bad.push(path),
                }
            }
        } else if let Some((_, _, text)) = current.as_mut() {
            // Only base64 lines belong to the file; anything else (a kernel message) does not.
            if line
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b))
            {
                text.push_str(line);
            }
        }
    }
    if let Some((_, path, _)) = current {
        bad.push(path);
    }
    (files, bad)
}

/// Standard base64 (RFC 4648, with padding), as busybox's `base64` writes it.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for (i, chunk) in bytes.chunks(4).enumerate() {
        let last = i + 1 == bytes.len() / 4;
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = n << 6 | value(c)?;
        }
        n <<= 6 * pad as u32;
        let b = n.to_be_bytes();
        out.extend_from_slice(&b[1..4 - pad]);
    }
    Some(out)
}

/// PCIe-transaction samples of the benchmark nodes: each node's and the delegate's
/// counters at the node's table titles and delegate lines, and for each latency row the
/// transactions since the sample before its result line (its untimed and timed calls).
#[derive(Default)]
struct Samples {
    /// Per ibkern node (by fabric index): the last snapshot of (node, delegate).
    last: BTreeMap<usize, (Counters, Counters)>,
    /// Per ibkern node, per result line in order: (node, delegate) transactions of the row.
    rows: BTreeMap<usize, Vec<Option<(Counters, Counters)>>>,
}

impl Samples {
    /// Takes a sample if `line` is one, at the counters `now`.
    fn line(&mut self, index: usize, line: &str, now: (Counters, Counters)) {
        use bench::delegate::{benchmark::TITLE, line};
        let result = line.starts_with(line::RESULT_PREFIX);
        if !(result
            || line.starts_with(TITLE)
            || line.starts_with(line::RATE_PREFIX)
            || line.starts_with(line::BASELINE_PREFIX))
        {
            return;
        }
        let prev = self.last.insert(index, now);
        if result {
            let row = prev.map(|p| {
                (
                    crate::pingpong::diff_counters(&now.0, &p.0),
                    crate::pingpong::diff_counters(&now.1, &p.1),
                )
            });
            self.rows.entry(index).or_default().push(row);
        }
    }
}

/// Transactions per call of a row of `iterations` timed calls (and the untimed ones).
fn pcie5(c: &Counters, iterations: u64) -> [f64; 5] {
    let n = (iterations + u64::from(bench::delegate::benchmark::WARMUP)) as f64;
    [
        c.mmio_writes as f64 / n,
        c.mmio_reads as f64 / n,
        c.dma_reads as f64 / n,
        c.dma_writes as f64 / n,
        c.interrupts as f64 / n,
    ]
}

/// `cargo qemu delegate`.
pub fn delegate_command(args: DelegateArgs) -> Result<Exit> {
    if args.listen_timeout == 0 {
        crate::usage!("--listen-timeout: 0 seconds leaves no time to boot the Linux guest");
    }
    check(&args)?;
    let workspace = crate::host::Workspace::locate();
    let linux_dir = args
        .linux_dir
        .clone()
        .unwrap_or_else(|| workspace.root.join("out/linux"));
    let image = image::build(&linux_dir)?;
    let base = args
        .out
        .clone()
        .unwrap_or_else(|| workspace.root.join("out/delegate"));
    let started = crate::provenance::now_iso();
    let out = crate::run_dir::create(&base)?;
    say(&format!(
        "this run's files: {} ({} points to it)",
        out.display(),
        base.join(crate::run_dir::LATEST).display()
    ));
    let rdv = fs::read(super::mixed::build_program(&out)?)?;
    let delegate = fs::read(super::delegate::build(
        &workspace,
        args.delegate_profile == DelegateProfile::Release,
    )?)?;
    let guest = GuestBuilder::new(&crate::args::GuestArgs::emulated(), &args.kernel)?;
    let jobs = jobs(&args);
    let mut plans = vec![("default.conf".to_string(), bench_plan(&args))];
    if let Some(i) = jobs.iter().position(|j| *j == Job::PairClient) {
        plans.push((format!("lid-{}.conf", lid_of(i)), pair_plan(&args)));
    }
    if let Some(i) = jobs.iter().position(|j| *j == Job::PairServer) {
        plans.push((
            format!("lid-{}.conf", lid_of(i)),
            "# the pair's server\n".into(),
        ));
    }
    let baseline = (!args.no_baseline).then(|| (lid_of(0), args.iters));
    if baseline.is_some() {
        // The first benchmark node's own plan: the default's keys and, once the baseline
        // server listens, its QPN.
        plans.push((format!("lid-{}.conf", lid_of(0)), bench_plan(&args)));
    }
    let script = script(&plans, baseline, jobs.len(), args.timeout);
    let run = LinuxRun {
        trace: false,
        guests: 1,
        msix: true,
        machine: crate::machine::Machine::Pc,
        script,
        timeout: Duration::from_secs(args.timeout),
        test_timeout: args.timeout,
        link_ports: [0, 0],
        profiles: Vec::new(),
    };
    let work = out.join("linux");
    fs::create_dir_all(&work)?;
    let initrd = image::with_script_and_files(
        &image,
        &run.script,
        &[
            (super::mixed::PROGRAM_PATH, 0o755, &rdv),
            (super::delegate::GUEST_PATH, 0o755, &delegate),
        ],
        &work.join("initrd-run.cpio"),
    )?;
    let mut linux = node_specs_with_initrd(&image, &run, &initrd)?.remove(0);
    linux.name = "linux".into();

    let _progress = crate::progress::start_guarded(
        vec![crate::progress::RunPlan {
            name: "delegate".into(),
            sizes: Vec::new(),
        }],
        args.verbose,
    );
    crate::progress::begin_run("delegate");
    say(&format!(
        "booting a Linux guest running the delegate; {} ibkern node(s) follow once it listens",
        jobs.len()
    ));
    let start = Instant::now();
    let mut spawn = |index: usize, line: &str| -> Option<Result<Vec<NodeSpec>>> {
        if index != 0 || !line.contains(LISTENING) {
            return None;
        }
        let Some((lid, qpn)) = parse_listening(line) else {
            return Some(Err(anyhow::anyhow!(
                "the delegate's listening line does not parse: {line:?}"
            )));
        };
        let at = format!("{lid:#x}:{qpn:#x}");
        say(&format!(
            "the delegate listens on LID {lid:#x}, rendezvous QPN {qpn:#x}: booting the ibkern nodes with delegate={at}"
        ));
        let specs = jobs
            .iter()
            .enumerate()
            .map(|(i, job)| {
                let name = job.name(i);
                let dir = out.join(&name);
                fs::create_dir_all(&dir)?;
                let command = guest.command(&node_config(*job, &at)?, &dir)?;
                Ok(NodeSpec {
                    name,
                    command,
                    profile: sim::DeviceProfile::default(),
                    console_log: None,
                })
            })
            .collect();
        Some(specs)
    };
    let mut samples = Samples::default();
    let mut hook = |index: usize, line: &str, server: &sim::mpqemu::Server, hcas: &[sim::HcaId]| {
        if index == 0 {
            return;
        }
        let (Some(node), Some(linux)) = (hcas.get(index), hcas.first()) else {
            return;
        };
        samples.line(
            index,
            line,
            (server.counters(*node), server.counters(*linux)),
        );
    };
    let nodes = run_nodes_staged(
        sim::FabricConfig::default(),
        vec![linux],
        Some(LaterNode {
            spawn: Box::new(&mut spawn),
            within: Duration::from_secs(args.listen_timeout.min(args.timeout)),
        }),
        Duration::from_secs(args.timeout),
        &mut hook,
    )?;
    let elapsed = start.elapsed();
    say(&format!("finished in {:.1} s", elapsed.as_secs_f64()));
    verdict(&jobs, nodes, samples, started, elapsed, &out)
}

/// Judges the run, copies the delegate's root out and writes the figures.
fn verdict(
    jobs: &[Job],
    mut nodes: Vec<NodeOutcome>,
    samples: Samples,
    started: String,
    elapsed: Duration,
    out: &Path,
) -> Result<Exit> {
    let linux = judge(nodes.remove(0), sim::Fabric::sm_lid_for(0, 1));
    fs::write(out.join("linux.log"), &linux.node.console)?;
    let mut exit = Exit::Success;
    if nodes.len() != jobs.len() {
        say("FAIL: the delegate never listened: the ibkern nodes were not booted");
        exit = Exit::GuestFailed;
    }
    let mut results = DelegateResults::default();
    let mut facts = Vec::new();
    for (i, (node, job)) in nodes.iter().zip(jobs).enumerate() {
        fs::write(out.join(format!("{}.log", node.name)), &node.console)?;
        for line in report_lines(node) {
            say(&line);
        }
        let prefix = if *job == Job::Bench {
            "delegate: "
        } else {
            "pingpong: "
        };
        let verdict = node.console.lines().rev().find(|l| {
            l.starts_with(&format!("{prefix}PASS")) || l.starts_with(&format!("{prefix}FAIL"))
        });
        say(&format!(
            "{}: {} ({})",
            node.name,
            verdict.unwrap_or("no verdict on the console"),
            node.exit
        ));
        let node_exit = Exit::for_guest(&node.exit, true);
        if node_exit != Exit::Success || !node.violations.is_empty() {
            exit = if node_exit == Exit::Success {
                Exit::GuestFailed
            } else {
                node_exit
            };
        }
        if *job == Job::Bench {
            let before = results.rows.len();
            results.add_console(&node.name, &node.console);
            if let Some(d) = samples.rows.get(&(i + 1)) {
                for (row, sample) in results.rows[before..].iter_mut().zip(d) {
                    if let Some((n, l)) = sample {
                        row.pcie_node = Some(pcie5(n, row.iterations));
                        row.pcie_delegate = Some(pcie5(l, row.iterations));
                    }
                }
            }
        }
        facts.push(crate::provenance::NodeFacts::from_console(
            &node.name,
            &node.console,
        ));
    }
    // The delegate's root as the guest printed it.
    let (files, mut bad) = files_of(&linux.node.console);
    let root = out.join("root");
    for (path, bytes) in &files {
        // Only paths beneath the copy's root (the guest's `find .` prints no others).
        if path
            .split('/')
            .any(|c| c == ".." || c == "." || c.is_empty())
        {
            bad.push(path.clone());
            continue;
        }
        let dest = root.join(path);
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(&dest, bytes).with_context(|| dest.display().to_string())?;
    }
    let landed: Vec<&String> = files
        .keys()
        .filter(|p| p.starts_with("results/") && p.ends_with("/console.log"))
        .collect();
    say(&format!(
        "the delegate's root ({} files) copied to {}; results of {} node(s):",
        files.len(),
        root.display(),
        landed.len()
    ));
    for p in &landed {
        say(&format!("  {p}"));
    }
    if !bad.is_empty() {
        say(&format!(
            "FAIL: files garbled on the Linux console: {}",
            bad.join(", ")
        ));
        exit = Exit::GuestFailed;
    }
    if landed.len() < jobs.len() && exit == Exit::Success {
        say(&format!(
            "FAIL: {} of {} nodes' results landed in the delegate's root",
            landed.len(),
            jobs.len()
        ));
        exit = Exit::GuestFailed;
    }
    for line in linux.node.console.lines() {
        if line.contains("ibkern-delegate: ") && !line.contains(FILE_BEGIN) {
            say(&format!("linux: {}", line.trim_end_matches('\r')));
        }
    }
    let linux_o = super::run::LinuxOutcome {
        guests: vec![linux],
        elapsed,
    };
    for line in linux_o.report() {
        say(&line);
    }
    if !linux_o.passed() && exit == Exit::Success {
        exit = if linux_o.timed_out() {
            Exit::Timeout
        } else {
            Exit::GuestFailed
        };
    }
    let qemu = crate::host::qemu_binary(None).ok();
    results.provenance = Some(crate::provenance::Provenance::of_this_run(
        crate::provenance::Platform::Emulated {
            accel: "tcg".into(),
            qemu: qemu.as_deref().and_then(crate::provenance::qemu_version),
        },
        started,
        facts,
    ));
    for (node, why) in &results.bad_lines {
        say(&format!(
            "FAILED: unreadable delegate line of {node}: {why}"
        ));
        exit = Exit::GuestFailed;
    }
    if !results.rows.is_empty() {
        results.print_tables();
        let written = results.write_files(out)?;
        say(&format!(
            "wrote {}, {}, {} and the consoles",
            written[0].display(),
            written[1].display(),
            written[2].display()
        ));
    } else if jobs.contains(&Job::Bench) {
        say("FAIL: no delegation benchmark results");
        if exit == Exit::Success {
            exit = Exit::GuestFailed;
        }
    }
    say(&format!(
        "delegate: {}",
        if exit == Exit::Success {
            "PASS"
        } else {
            "FAIL"
        }
    ));
    Ok(exit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listening_line_gives_lid_and_qpn() {
        assert_eq!(
            parse_listening(
                "ibkern-delegate: listening on LID 0x0002 rendezvous QPN 0x000208 (mlx4_0 port 1), root root"
            ),
            Some((2, 0x208))
        );
        assert_eq!(
            parse_listening(
                "linux: ibkern-delegate: listening on LID 0x00ab rendezvous QPN 0xffffff\r"
            ),
            Some((0xab, 0xFF_FFFF))
        );
        for bad in [
            "ibkern-delegate: listening on LID 0x0002",
            "ibkern-delegate: listening on LID 2 rendezvous QPN 0x208",
            "ibkern-delegate: listening on LID 0x0000 rendezvous QPN 0x208",
            "ibkern-delegate: listening on LID 0x0002 rendezvous QPN 0x1",
        ] {
            assert_eq!(parse_listening(bad), None, "{bad}");
        }
    }

    #[test]
    fn files_come_back_from_the_console_whole_or_named_as_garbled() {
        let console = "\
noise
ibkern-delegate-file 11 results/00/20261128T143005Z/console.log
aGVsbG8gd29y
[  12.3] some kernel line
bGQ=
ibkern-delegate-file-end
ibkern-delegate-file 3 plans/default.conf
aXRlcnM=
ibkern-delegate-file-end
ibkern-delegate-file 0 empty
ibkern-delegate-file-end
ibkern-delegate-file 9 cut
";
        let (files, bad) = files_of(console);
        assert_eq!(
            files["results/00/20261128T143005Z/console.log"],
            b"hello world"
        );
        assert_eq!(files["empty"], b"");
        // "iters" is 5 bytes, not the 3 announced; "cut" never ended.
        assert_eq!(bad, ["plans/default.conf", "cut"]);
    }

    #[test]
    fn base64_decodes_what_busybox_writes() {
        assert_eq!(base64_decode("").unwrap(), b"");
        assert_eq!(base64_decode("YQ==").unwrap(), b"a");
        assert_eq!(base64_decode("YWI=").unwrap(), b"ab");
        assert_eq!(base64_decode("YWJj").unwrap(), b"abc");
        assert_eq!(base64_decode("AP8=").unwrap(), [0, 255]);
        for bad in ["Y", "YQ=a", "YQ==YWJj", "Y!==", "Y==="] {
            assert_eq!(base64_decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_script_writes_plans_starts_baseline_and_delegate_and_dumps_the_root() {
        let s = script(
            &[("default.conf".into(), "iters=20\n".into())],
            Some((4, 20)),
            2,
            600,
        );
        assert!(s.starts_with("mkdir -p root/plans\ncat > root/plans/default.conf <<'IBKERN_PLAN'\niters=20\nIBKERN_PLAN\n"), "{s}");
        assert!(
            s.contains("ibk-rdv -r server -c RC -s 16 -n 20 -t 2000 -p 600"),
            "{s}"
        );
        assert!(
            s.contains("echo \"delegate_baseline=$qpn\" >> root/plans/lid-4.conf"),
            "{s}"
        );
        let rdv = s.find("ibk-rdv -r server").unwrap();
        let del = s.find("ibkern-delegate --root root").unwrap();
        assert!(
            rdv < del,
            "the baseline's QPN is in the plan before any node can fetch it"
        );
        assert!(s.contains("[ \"$n\" -ge 2 ] && break"), "{s}");
        assert!(
            s.contains("echo \"ibkern-delegate-file $(wc -c < \"root/$f\") ${f#./}\""),
            "{s}"
        );
        let none = script(&[], None, 1, 60);
        assert!(!none.contains("ibk-rdv"));
    }

    #[test]
    fn a_rows_transactions_are_those_since_its_title_or_the_line_before() {
        let at = |node: u64, delegate: u64| {
            let c = |w| Counters {
                mmio_writes: w,
                ..Counters::default()
            };
            (c(node), c(delegate))
        };
        let mut s = Samples::default();
        let lines = [
            ("INFO  delegate: plan plans/default.conf", at(100, 100)),
            (" delegate: null call, completion poll", at(1000, 2000)),
            (" #bytes #iterations ...", at(1001, 2001)),
            ("ibkern-delegate-result {\"op\":\"null\"}", at(1022, 2044)),
            ("ibkern-delegate-rate {\"mode\":\"poll\"}", at(5000, 9000)),
            (" delegate: null call, completion event", at(5100, 9100)),
            ("ibkern-delegate-result {\"op\":\"null\"}", at(5144, 9122)),
            ("ibkern-delegate-result {\"op\":\"pread\"}", at(5188, 9166)),
        ];
        for (line, now) in lines {
            s.line(1, line, now);
        }
        let mmio = |r: &Option<(Counters, Counters)>| {
            let (n, d) = r.as_ref().unwrap();
            (n.mmio_writes, d.mmio_writes)
        };
        let rows: Vec<(u64, u64)> = s.rows[&1].iter().map(mmio).collect();
        // The first row from its title (not the boot), the event mode's first row from its
        // title (not the poll mode's rate test), the next from the row before.
        assert_eq!(rows, [(22, 44), (44, 22), (44, 44)]);
        // Per call: the row's timed and untimed calls (20 + 2).
        let c = Counters {
            mmio_writes: 22,
            ..Counters::default()
        };
        assert_eq!(pcie5(&c, 20), [1.0, 0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn jobs_and_plans_follow_the_flags() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            a: DelegateArgs,
        }
        let a = Cli::parse_from(["x", "--nodes", "2", "--pair-run", "ib_send_lat -c RC -s 64"]).a;
        assert_eq!(
            jobs(&a),
            [Job::Bench, Job::Bench, Job::PairServer, Job::PairClient]
        );
        assert_eq!(
            pair_plan(&a),
            "# cargo qemu delegate: the ping-pong pair's runs\nrun=ib_send_lat -c RC -s 64\n"
        );
        assert!(bench_plan(&a).contains(
            "iters=20\nmodes=poll,event,isr\ndelegate_max=1048576\ndelegate_outstanding=64\n"
        ));
        check(&a).unwrap();
        // A plan the node would refuse is refused here, before anything boots.
        let bad = Cli::parse_from(["x", "--pair-run", "ib_read_lat -c UD"]).a;
        let e = check(&bad).unwrap_err();
        assert!(e.is::<crate::Usage>(), "{e:#}");
        let bad = Cli::parse_from(["x", "-n", "2"]).a;
        assert!(check(&bad).unwrap_err().is::<crate::Usage>());
    }
}
