//! `cargo qemu pingpong`: two ibkern guests on one emulated fabric (one `sim::mpqemu::Server`)
//! running the ping-pong sweeps (`--test send_lat`, perftest's `ib_send_lat`, or
//! `--test write_lat`, `ib_write_lat`) of every transport in one boot pair: the client's
//! configuration is a plan (one `run=` line per transport, or the `run=` lines given with
//! `--set`), the server follows it and ends after it (`idle_timeout_ms=0`).
//!
//! PCIe-transaction counts per size: the model's counters of each node are snapshotted when
//! that node announces a run (`pingpong: run R/N ...`, before its rendezvous) and whenever
//! its `ibkern-result` line for a size reaches the runner; the difference between two
//! consecutive snapshots, divided by the iterations, is that size's traffic per iteration. It
//! includes the per-size synchronisation (a few rendezvous messages per size) and whatever of
//! the next size's barrier happened before the line arrived, so it is an upper bound on the
//! data path's own figure, closer the more iterations run. For read_lat and atomic_lat the
//! server prints no line per size (its HCA answers without its software), so its interval
//! ends when the client's line arrives.

use crate::say;
use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use ibconfig::{Benchmark, Completion, Config, Role, Sizes, Test, Transport};
use sim::Counters;

use crate::hca::{report_lines, run_nodes_on, NodeSpec};
use crate::kernel_config::SetBy;
use crate::Exit;

/// The benchmark's per-wait bound under emulation, in milliseconds (see where it is set).
const EMULATED_WAIT_MS: u64 = 2000;

/// The transports run when `-c` is not given.
pub fn default_transports(test: Benchmark) -> &'static [Transport] {
    use Transport::*;
    match test.test() {
        Some(Test::SendLat) => &[Ud, Uc],
        Some(Test::WriteLat | Test::WriteBw) => &[Rc, Uc],
        Some(Test::SendBw) => &[Ud, Uc, Rc],
        Some(Test::ReadLat | Test::AtomicLat | Test::ReadBw | Test::AtomicBw) | None => &[Rc],
    }
}

/// One transport of `-c` for this test (the configuration's rule: perftest's
/// `change_conn_type`; srq_pingpong is RC only); a refusal is a usage error.
pub fn check_transport(test: Benchmark, t: &str) -> Result<Transport> {
    let Some(transport) = Transport::from_name(t) else {
        crate::usage!(
            "-c: unknown transport {t:?} (one of {})",
            Transport::NAMES.join("|")
        );
    };
    match test.test() {
        Some(perftest) => {
            if let Err(rule) = perftest.check_transport(transport) {
                crate::usage!("-c {t} with --test {}: {rule}", test.name());
            }
        }
        None if transport != Transport::Rc => {
            crate::usage!("-c {t} with --test srq_pingpong: it runs over RC only");
        }
        None => {}
    }
    Ok(transport)
}

/// Prefix of the per-node directories and console logs ("" for send_lat, so its file names
/// stay as they were; "srq-" for srq_pingpong).
pub fn file_prefix(test: Benchmark) -> String {
    match test {
        Benchmark::Perftest(Test::SendLat) => String::new(),
        Benchmark::Perftest(t) => format!("{}-", t.name()),
        Benchmark::SrqPingpong => "srq-".to_string(),
    }
}

/// `cargo qemu pingpong`.
#[derive(Debug, clap::Args)]
pub struct PingPongArgs {
    #[command(flatten)]
    pub guest: crate::args::GuestArgs,
    /// Device profiles of the server's and the client's HCA (one name gives both).
    #[command(flatten)]
    pub profile: crate::device_profile::ProfileArgs,
    #[command(flatten)]
    pub flags: crate::args::PingPongFlags,
    /// Cable the two nodes back to back (no switch, no fabric subnet manager): the server
    /// runs the in-kernel SM (`sm=on`), the client waits for it.
    #[arg(long)]
    pub back_to_back: bool,
    /// Base directory: this run's files go to DIR/<UTC start time>/, DIR/latest points to
    /// the newest run [default: out/pingpong in the workspace].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Stream the guests' consoles to stdout also when it is a terminal (they are always in
    /// the run directory's log files, and streamed when stdout is not a terminal).
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

/// The shared flags read as the run's own (`args.iters`, `args.set`, ...).
impl std::ops::Deref for PingPongArgs {
    type Target = crate::args::PingPongFlags;
    fn deref(&self) -> &crate::args::PingPongFlags {
        &self.flags
    }
}

impl PingPongArgs {
    /// The base directory of the run directories (`--out`, default out/pingpong), checked to
    /// take one ([`crate::run_dir::check`]).
    pub fn run_base(&self) -> Result<PathBuf> {
        let base = self
            .out
            .clone()
            .unwrap_or_else(|| crate::host::Workspace::locate().root.join("out/pingpong"));
        crate::run_dir::check(&base)?;
        Ok(base)
    }

    /// The transports to run, each checked against the test.
    pub fn transport_list(&self) -> Result<Vec<Transport>> {
        let Some(given) = self.transports.as_deref() else {
            return Ok(default_transports(self.test).to_vec());
        };
        let mut list = Vec::new();
        for t in given.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let t = check_transport(self.test, t)?;
            if !list.contains(&t) {
                list.push(t);
            }
        }
        if list.is_empty() {
            crate::usage!(
                "-c: no transport given (one of {})",
                Transport::NAMES.join("|")
            );
        }
        Ok(list)
    }
}

/// One size as the client reported it, with the model's traffic of both nodes.
#[derive(Clone, Debug)]
pub struct SizeTraffic {
    /// The transport; for write_lat, "write_lat RC" and so on.
    pub transport: String,
    pub bytes: u64,
    pub iterations: u64,
    pub per_node: [Counters; 2],
}

/// Each size's traffic on one node, from its HCA's send-queue switches (`sim::SqSwitch`):
/// the window of a size opens when the HCA starts running the run's data QP (the QP its
/// banner's ` local address: ... QPN` names: the size's first message, after the barrier on
/// the rendezvous QP) and closes at its next switch (the next size's barrier, or the run's
/// Done), so it holds the size's iterations and nothing of the rendezvous before them,
/// whatever `-n`. `run_starts` are the node's counters at each of its `pingpong: run` headers
/// (they tell the runs' switches apart). One entry per `ibkern-result` line of `console`, in
/// order; `None` for every size of a run whose data QP's windows do not pair one to one
/// with its result lines (a passive server, whose data QP sends nothing; a rendezvous
/// message inside a size).
pub fn data_qp_windows(
    switches: &[sim::SqSwitch],
    console: &str,
    run_starts: &[Counters],
) -> Vec<Option<Counters>> {
    // Per run: its data QP and its result lines' count.
    // runs[0]: the lines before the first header.
    let mut runs: Vec<(Option<u32>, usize)> = vec![(None, 0)];
    for line in console.lines() {
        let line = line.trim_end_matches('\r');
        if line.starts_with("pingpong: run ") {
            runs.push((None, 0));
        }
        let run = runs.last_mut().expect("runs[0] is there");
        if let Some(rest) = line.trim_start().strip_prefix("local address: ") {
            run.0 = rest
                .split("QPN ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|h| h.strip_prefix("0x"))
                .and_then(|h| u32::from_str_radix(h, 16).ok());
        } else if result_line(line).is_some() {
            run.1 += 1;
        }
    }
    let headers = runs.len().saturating_sub(1);
    let mut out = Vec::new();
    for (k, (qpn, sizes)) in runs.iter().enumerate() {
        // runs[0] holds the lines before the first header (no sizes in a plan); runs[k]
        // for k >= 1 starts at run_starts[k - 1].
        let bounds = if k == 0 {
            None
        } else {
            run_starts.get(k - 1).map(|start| {
                (
                    start.mmio_writes,
                    run_starts.get(k).map_or(u64::MAX, |next| next.mmio_writes),
                )
            })
        };
        let windows: Vec<Counters> = match (qpn, bounds) {
            (Some(qpn), Some((from, to))) if headers == run_starts.len() => switches
                .windows(2)
                .filter(|w| {
                    w[0].qpn == *qpn
                        && w[0].counters.mmio_writes >= from
                        && w[0].counters.mmio_writes < to
                })
                .map(|w| diff_counters(&w[1].counters, &w[0].counters))
                .collect(),
            _ => Vec::new(),
        };
        if windows.len() == *sizes {
            out.extend(windows.into_iter().map(Some));
        } else {
            out.extend(std::iter::repeat_n(None, *sizes));
        }
    }
    out
}

/// What a console line that is a readable result line (latency or bandwidth) says of its
/// size: test, transport, bytes, iterations and the messages it counted lost.
pub fn result_line(line: &str) -> Option<(ibconfig::Test, ibconfig::Transport, u64, u64, u64)> {
    use bench::line::{Kind, Line};
    let json = line
        .trim_end_matches('\r')
        .strip_prefix(bench::line::PREFIX)?;
    match Line::parse(Kind::Result, json).ok()? {
        Line::Latency(l) => Some((
            l.test,
            l.transport,
            u64::from(l.bytes),
            u64::from(l.iterations),
            u64::from(l.lost),
        )),
        Line::Bandwidth(l) => Some((
            l.test,
            l.transport,
            u64::from(l.bytes),
            u64::from(l.iterations),
            l.lost,
        )),
        _ => None,
    }
}

/// `a - b`, field by field (saturating).
pub fn diff_counters(a: &Counters, b: &Counters) -> Counters {
    Counters {
        mmio_reads: a.mmio_reads.saturating_sub(b.mmio_reads),
        mmio_writes: a.mmio_writes.saturating_sub(b.mmio_writes),
        blueflame_bytes: a.blueflame_bytes.saturating_sub(b.blueflame_bytes),
        dma_reads: a.dma_reads.saturating_sub(b.dma_reads),
        dma_read_bytes: a.dma_read_bytes.saturating_sub(b.dma_read_bytes),
        dma_writes: a.dma_writes.saturating_sub(b.dma_writes),
        dma_write_bytes: a.dma_write_bytes.saturating_sub(b.dma_write_bytes),
        icm_reads: a.icm_reads.saturating_sub(b.icm_reads),
        icm_writes: a.icm_writes.saturating_sub(b.icm_writes),
        interrupts: a.interrupts.saturating_sub(b.interrupts),
        msix_messages: a.msix_messages.saturating_sub(b.msix_messages),
        intx_assertions: a.intx_assertions.saturating_sub(b.intx_assertions),
        commands: a.commands.saturating_sub(b.commands),
        packets_sent: a.packets_sent.saturating_sub(b.packets_sent),
        packets_received: a.packets_received.saturating_sub(b.packets_received),
        packets_dropped: a.packets_dropped.saturating_sub(b.packets_dropped),
        violations: a.violations.saturating_sub(b.violations),
    }
}

/// The model counters the runners report as PCIe traffic, in this order (CSV columns of
/// `pcie.csv` and `compare.csv`, and the traffic line).
pub const PCIE_COLUMNS: [&str; 12] = [
    "mmio_writes",
    "mmio_reads",
    "blueflame_bytes",
    "dma_reads",
    "dma_read_bytes",
    "icm_reads",
    "dma_writes",
    "dma_write_bytes",
    "icm_writes",
    "interrupts",
    "packets_sent",
    "packets_received",
];

/// `c`'s values for [`PCIE_COLUMNS`].
pub fn pcie_values(c: &Counters) -> [u64; 12] {
    [
        c.mmio_writes,
        c.mmio_reads,
        c.blueflame_bytes,
        c.dma_reads,
        c.dma_read_bytes,
        c.icm_reads,
        c.dma_writes,
        c.dma_write_bytes,
        c.icm_writes,
        c.interrupts,
        c.packets_sent,
        c.packets_received,
    ]
}

/// [`pcie_values`] divided by the iterations (at least 1).
pub fn pcie_per_iter(c: &Counters, iterations: u64) -> [f64; 12] {
    let it = iterations.max(1) as f64;
    pcie_values(c).map(|v| v as f64 / it)
}

/// The per-iteration traffic line of one node for one size.
pub fn traffic_line(node: &str, c: &Counters, iterations: u64) -> String {
    let [mw, mr, bf, dr, drb, ir, dw, dwb, iw, irq, tx, rx] = pcie_per_iter(c, iterations);
    format!(
        "{node}: per iteration: mmio w {mw:.2} r {mr:.2}, bf bytes {bf:.1}, dma r {dr:.2} ({drb:.1} B, icm {ir:.2}) w {dw:.2} ({dwb:.1} B, icm {iw:.2}), irqs {irq:.2}, pkts tx {tx:.2} rx {rx:.2}"
    )
}

/// The keys the ping-pong commands (`pingpong`, `node`) set from their flags: `--set` may
/// not give them (the flag says it).
pub const FLAG_KEYS: &[(&str, SetBy)] = &[
    ("test", SetBy::Flag("--test")),
    ("transport", SetBy::Flag("-c")),
    ("size", SetBy::Flag("-s or -a")),
    ("iters", SetBy::Flag("-n")),
    ("inline", SetBy::Flag("-I")),
    ("hca_irq", SetBy::Flag("--irq")),
    ("completion", SetBy::Flag("-e or --mode")),
    ("modes", SetBy::Flag("--mode")),
    ("anatomy", SetBy::Flag("--anatomy")),
    ("qps", SetBy::Flag("-q")),
    ("rx_depth", SetBy::Flag("-r")),
    ("cq_moderation", SetBy::Flag("--cq-moderation")),
    ("tx_depth", SetBy::Flag("-t")),
    ("post_list", SetBy::Flag("-l")),
    ("cq_mod", SetBy::Flag("-Q")),
    ("duration", SetBy::Flag("-D")),
    ("bidirectional", SetBy::Flag("-b")),
    ("no_peak", SetBy::Flag("-N")),
    ("report_gbits", SetBy::Flag("--report-gbits")),
    ("outstanding_reads", SetBy::Flag("-o")),
    ("atomic", SetBy::Flag("-A")),
    ("mtu", SetBy::Flag("-m")),
    ("ib_port", SetBy::Flag("-i")),
];

/// The configuration of one node for one transport: the flags as keys, then `--set`,
/// each checked as it is set; `mode`, `role`, `sm` and the flags' keys are `pingpong`'s
/// own.
pub fn node_config(args: &PingPongArgs, transport: Transport, role: Role) -> Result<Config> {
    let owned: Vec<(&str, SetBy)> = [
        ("mode", SetBy::Runner("its guests run mode=pingpong")),
        (
            "role",
            SetBy::Runner("one guest is the server, the other the client"),
        ),
        ("sm", SetBy::Flag("--back-to-back")),
    ]
    .into_iter()
    .chain(FLAG_KEYS.iter().copied())
    .collect();
    node_config_with(
        &args.flags,
        transport,
        role,
        true,
        ("pingpong", &owned),
        |config| {
            if config.bench.port > 1 {
                crate::usage!(
                    "-i {}: pingpong's emulated HCAs have one port",
                    config.bench.port
                );
            }
            if args.back_to_back {
                // One node is the SM; both wait long enough for the other to boot.
                config.sm = role == Role::Server;
                config.port_wait_ms = 120_000;
            }
            Ok(())
        },
    )
}

/// The configuration of a ping-pong node from the shared flags: the flags as keys (with
/// `emulated`, the benchmark's wait bound for an emulated HCA), then what `extra` sets, then
/// `--set` (refused for the keys `owned` names: the command's own), each checked as it is
/// set.
pub fn node_config_with(
    flags: &crate::args::PingPongFlags,
    transport: Transport,
    role: Role,
    emulated: bool,
    (command, owned): (&str, &[(&str, SetBy)]),
    extra: impl FnOnce(&mut Config) -> Result<()>,
) -> Result<Config> {
    let mut config = Config::with_mode(ibconfig::Mode::Pingpong);
    config.hca_irq = flags.irq;
    config.set_role(role);
    let b = &mut config.bench;
    b.set_benchmark(flags.test);
    b.transport = transport;
    match (flags.all, flags.size) {
        (true, _) => b.sizes = Sizes::All,
        (false, Some(s)) => b.sizes = Sizes::Single(s),
        (false, None)
            if flags.test.test().is_some_and(Test::is_bw) && transport == Transport::Ud =>
        {
            // perftest lowers its default bandwidth message (64 KiB) to the MTU on UD.
            b.sizes = Sizes::Single(ibconfig::bench::DEFAULT_MTU_CAP.bytes());
        }
        (false, None) => {}
    }
    b.iterations = flags.iters;
    if emulated {
        // Under emulation every MMIO access is a socket round trip and the host may be
        // loaded: a wait of the benchmark's hardware default (100 ms) can expire on a
        // message that is merely slow, and would be counted as a loss. The emulated
        // fabric drops nothing unless told to, so wait long enough that only a real
        // loss counts. `--set timeout_ms=...` overrides it.
        b.wait_timeout_ns = EMULATED_WAIT_MS * 1_000_000;
    }
    if let Some(i) = flags.inline {
        b.inline_limit = Some(i);
    }
    if let Some(m) = flags.device.mtu {
        b.mtu = Some(m);
    }
    if let Some(p) = flags.device.ib_port {
        b.port = p;
    }
    if flags.events {
        b.completion = Completion::Event;
    }
    if let Some(m) = flags.modes {
        b.set_modes(m);
    }
    if flags.test == Benchmark::SrqPingpong {
        if flags.all {
            crate::usage!("-a with --test srq_pingpong: it runs one size (-s)");
        }
        if flags.anatomy {
            crate::usage!(
                "--anatomy with --test srq_pingpong: the anatomy splits the latency tests \
                 (send_lat, write_lat, read_lat, atomic_lat)"
            );
        }
        if let Some(q) = flags.srq.qps {
            b.srq.qps = q;
        }
        if let Some(r) = flags.srq.rx_depth {
            b.srq.rx_depth = r;
        }
        if let Some(m) = flags.srq.cq_moderation {
            b.srq.moderation = m;
        }
    } else if flags.srq.qps.is_some()
        || flags.srq.rx_depth.is_some()
        || flags.srq.cq_moderation.is_some()
    {
        crate::usage!("-q, -r and --cq-moderation are srq_pingpong's (--test srq_pingpong)");
    }
    // The server measures its turnaround when the client's Hello asks.
    b.anatomy = flags.anatomy && role == Role::Client;
    // perftest's bandwidth flags (a latency test refuses them: a usage error).
    let bw = &flags.bw;
    if let Some(t) = bw.tx_depth {
        b.bw.tx_depth = t;
    }
    if let Some(l) = bw.post_list {
        b.bw.post_list = l;
    }
    b.bw.cq_mod = bw.cq_mod.or(b.bw.cq_mod);
    b.bw.duration_s = bw.duration.or(b.bw.duration_s);
    b.bw.bidirectional |= bw.bidirectional;
    b.bw.no_peak |= bw.no_peak;
    b.bw.report_gbits |= bw.report_gbits;
    if let Some(o) = bw.outstanding_reads {
        b.outstanding_reads = o;
    }
    if let Some(a) = bw.atomic {
        b.atomic = a;
    }
    extra(&mut config)?;
    crate::kernel_config::apply_set(&mut config, &flags.set, owned, command)?;
    Ok(config)
}

/// The transports to run, with every node's configuration checked as the kernel will
/// check it: a refusal is a usage error, before anything is written or booted.
pub fn checked_transports(args: &PingPongArgs) -> Result<Vec<Transport>> {
    let transports = args.transport_list()?;
    for &transport in &transports {
        for role in ROLES {
            let config = node_config(args, transport, role)?;
            crate::kernel_config::check_config(&config)?;
        }
    }
    Ok(transports)
}

/// The client's plan: the `run=` lines given with `--set`, else one run per transport with
/// the flags' test, sizes, iterations, inline limit and completion mode (and `--set`'s
/// keys), as perftest command lines.
pub fn plan_lines(args: &PingPongArgs, transports: &[Transport]) -> Result<Vec<ibconfig::Run>> {
    let client = node_config(args, transports[0], Role::Client)?;
    if !client.plan().is_empty() {
        return Ok(client.plan().to_vec());
    }
    transports
        .iter()
        .map(|&t| {
            Ok(ibconfig::Run::of(
                &node_config(args, t, Role::Client)?.bench,
            ))
        })
        .collect()
}

/// The two configurations of the one boot pair: the server's keys (it follows the client's
/// Hellos and ends after the plan: `idle_timeout_ms` 0, the default), and the client's with
/// the plan's `run=` lines.
pub fn plan_configs(args: &PingPongArgs, transports: &[Transport]) -> Result<[Config; 2]> {
    let first = transports[0];
    let server = node_config(args, first, Role::Server)?;
    let mut client = node_config(args, first, Role::Client)?;
    if client.plan().is_empty() {
        for run in plan_lines(args, transports)? {
            if let Err(e) = client.push_run(run) {
                crate::usage!("the plan: {e}");
            }
        }
    }
    Ok([server, client])
}

/// The plan's runs as the client will run them (`repeat` passes of its runs).
pub fn plan_runs(client: &Config) -> Vec<ibconfig::PingPongConfig> {
    let runs: Vec<_> = client.client_runs().collect();
    (0..client.bench.repeat)
        .flat_map(|_| runs.iter().copied())
        .collect()
}

/// The progress display's runs: one per run of the plan, named as in the tables, with the
/// sizes the kernel will measure (at the port's MTU, 4096 on the emulated fabric) and their
/// iterations.
pub fn plan_progress(runs: &[ibconfig::PingPongConfig]) -> Vec<crate::progress::RunPlan> {
    runs.iter()
        .map(|r| crate::progress::RunPlan {
            name: run_name(r.test, r.transport, r.completion),
            sizes: crate::progress::planned(r),
        })
        .collect()
}

/// Runs every transport's sweep in one boot pair (a plan); writes the consoles, result lines
/// and traffic table into DIR.
pub fn pingpong_command(args: PingPongArgs) -> Result<Exit> {
    if args.test == Benchmark::SrqPingpong {
        return crate::srq::srq_command(args);
    }
    // Every node's configuration and --out are checked, the host looked at (QEMU, OVMF)
    // and the kernel built before the run directory is made or `latest` moved.
    let base = args.run_base()?;
    let transports = checked_transports(&args)?;
    if !node_config(&args, transports[0], Role::Client)?
        .srq_plan()
        .is_empty()
    {
        crate::usage!("--set run=ibv_srq_pingpong ... needs --test srq_pingpong");
    }
    let configs = plan_configs(&args, &transports)?;
    for c in &configs {
        crate::kernel_config::check_config(c)?;
    }
    let runs = plan_runs(&configs[1]);
    let qemu = crate::host::qemu_binary(args.guest.qemu.as_deref())?;
    // The boot media live outside the run directory, removed when the run ends.
    let media = crate::prepare::BootMedia::new()?;
    let guest = crate::prepare::GuestBuilder::new(&args.guest, &args.kernel)?.media_in(&media);
    let started = crate::provenance::now_iso();
    let out = crate::run_dir::create(&base)?;
    say(&format!(
        "this run's files: {} ({} points to it)",
        out.display(),
        base.join(crate::run_dir::LATEST).display()
    ));
    let progress = crate::progress::start_guarded(plan_progress(&runs), args.verbose);
    let mut nodes: Vec<crate::provenance::NodeFacts> = Vec::new();
    let whole = Instant::now();
    let run = run_pair(&args, &guest, "plan", configs.clone(), "", &out)?;
    say(&format!(
        "the whole plan ({} runs) in one boot pair: {:.1} s",
        runs.len(),
        whole.elapsed().as_secs_f64()
    ));
    let mut exit = run.exit.unwrap_or(Exit::Success);
    for (name, ready) in ROLES.into_iter().zip(run.ready) {
        if let Some(t) = ready {
            say(&format!(
                "{name}: HCA ready (bring-up summary's port line) {:.2} s after QEMU started",
                t.as_secs_f64()
            ));
        }
    }
    for ((o, role), config) in run.outcomes.iter().zip(ROLES).zip(&configs) {
        let mut facts = crate::provenance::NodeFacts::from_console(role.name(), &o.console);
        if facts.config.is_none() {
            // A kernel too old to log its configuration: the one the runner wrote.
            facts.config = Some(boot::one_line(config));
        }
        nodes.push(facts);
    }
    let consoles: Vec<String> = run.outcomes.into_iter().map(|o| o.console).collect();
    let traffic = run.traffic;
    drop(progress);
    // The figures: perftest tables, latency.csv/json/svg (qemu/src/results.rs).
    let console_refs: Vec<&str> = consoles.iter().map(String::as_str).collect();
    let mut results = crate::results::collect(&console_refs);
    results.provenance = Some(crate::provenance::Provenance::of_this_run(
        crate::provenance::Platform::Emulated {
            accel: args.guest.accel.name().to_string(),
            qemu: crate::provenance::qemu_version(&qemu),
        },
        started,
        nodes,
    ));
    for bad in &results.bad_lines {
        say(&format!(
            "FAILED: unreadable result line {} of console {}: {}",
            bad.line, bad.node, bad.reason
        ));
        exit = Exit::GuestFailed;
    }
    if results.records.is_empty() && results.bw.is_empty() && results.bad_lines.is_empty() {
        say(&format!(
            "FAILED: no result line from either guest; no result files written (the consoles \
             are in {})",
            out.display()
        ));
        return Ok(if exit == Exit::Success {
            Exit::GuestFailed
        } else {
            exit
        });
    }
    results.print_tables();
    // Traffic per iteration per size (both nodes).
    let mut csv = results.comment_lines("# ");
    let _ = writeln!(
        csv,
        "transport,bytes,iterations,node,{}",
        PCIE_COLUMNS.join(",")
    );
    println!("--- model PCIe transactions per iteration (server / client) ---");
    for t in &traffic {
        println!("{} {} B:", t.transport, t.bytes);
        for (i, c) in t.per_node.iter().enumerate() {
            let node = ["server", "client"][i];
            println!("  {}", traffic_line(node, c, t.iterations));
            let values: Vec<String> = pcie_values(c).iter().map(u64::to_string).collect();
            let _ = writeln!(
                csv,
                "{},{},{},{node},{}",
                t.transport,
                t.bytes,
                t.iterations,
                values.join(",")
            );
        }
    }
    fs::write(out.join("pcie.csv"), csv)?;
    let written = results.write_files(&out)?;
    say(&format!(
        "wrote {}, {}, {}, {}{} and the consoles",
        written.csv.display(),
        written.json.display(),
        written.plots(),
        out.join("pcie.csv").display(),
        if results.ports.is_empty() {
            String::new()
        } else {
            format!(", {}", out.join("ports.csv").display())
        }
    ));
    if let Some(bw) = &written.bandwidth {
        say(&format!(
            "wrote the bandwidth figures: {}, {}, {}",
            bw.csv.display(),
            bw.json.display(),
            bw.svg.display()
        ));
    }
    Ok(exit)
}

/// The two nodes of a boot pair, in node order.
pub const ROLES: [Role; 2] = [Role::Server, Role::Client];

/// What one transport's boot pair produced.
pub struct TransportRun {
    /// Server (0) and client (1).
    pub outcomes: Vec<crate::hca::NodeOutcome>,
    /// Per size, the model's traffic of both nodes.
    pub traffic: Vec<SizeTraffic>,
    /// The runner's verdict if it is not success.
    pub exit: Option<Exit>,
    /// Per node, from just before QEMU was spawned until the runner read the bring-up
    /// summary's `mlx4: port N:` line (the HCA is up, its port ACTIVE).
    pub ready: [Option<Duration>; 2],
}

/// The table group of the run a client's run header (`pingpong: run R/N pass P/M: ib_send_lat
/// -c UD ...`) starts: "UD", "write_lat RC", ...
pub fn run_group(line: &str) -> Option<String> {
    let rest = line.strip_prefix("pingpong: run ")?;
    let (_, command) = rest.split_once(": ")?;
    let run = ibconfig::Run::parse(command).ok()?;
    Some(run_name(run.test, run.transport, run.completion))
}

/// The progress display's name of a run: the tables' group name, with the completion
/// mode after it unless polling (`UD`, `UD event`, `UD isr`).
pub fn run_name(
    test: ibconfig::Test,
    transport: ibconfig::Transport,
    completion: ibconfig::Completion,
) -> String {
    let group = crate::results::Results::group_name(test, transport);
    match completion {
        ibconfig::Completion::Poll => group,
        m => format!("{group} {}", m.name()),
    }
}

/// Is this console line the bring-up summary's port line (`mlx4: port 1: ACTIVE ...`)?
pub fn is_ready_line(line: &str) -> bool {
    line.starts_with("mlx4: port ") && line.contains(": ACTIVE ")
}

/// Boots one server/client pair with `configs` (server, client); `label` prefixes the
/// runner's messages, the consoles stream to `out` as `<test prefix><stem><role>.log`. The
/// runs' progress follows the client's `pingpong: run ...` headers.
pub(crate) fn run_pair(
    args: &PingPongArgs,
    guest: &crate::prepare::GuestBuilder,
    label: &str,
    configs: [Config; 2],
    stem: &str,
    out: &std::path::Path,
) -> Result<TransportRun> {
    run_pair_from(
        args,
        guest,
        label,
        configs,
        stem,
        out,
        RunStartSnapshot::RunHeader,
    )
}

/// Where a run's first size starts being counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunStartSnapshot {
    /// At the run's `pingpong: run R/N ...` header, before its rendezvous: the first size
    /// includes the rendezvous.
    RunHeader,
    /// At the node's perftest table header (` #bytes #iterations ...`, printed once the
    /// rendezvous is over), as `compare` counts perftest on Linux; for READ and atomics the
    /// client's header starts the server's count as well.
    TableHeader,
}

/// [`run_pair`] with the first size's count starting at `from`.
pub(crate) fn run_pair_from(
    args: &PingPongArgs,
    guest: &crate::prepare::GuestBuilder,
    label: &str,
    configs: [Config; 2],
    stem: &str,
    out: &std::path::Path,
    from: RunStartSnapshot,
) -> Result<TransportRun> {
    let mut exit = Exit::Success;
    let mut commands = Vec::new();
    let prefix = file_prefix(args.test);
    for (role, config) in ROLES.into_iter().zip(&configs) {
        let dir = out.join(format!("{prefix}{stem}{role}"));
        fs::create_dir_all(&dir)?;
        let command = guest.command(config, &dir)?;
        commands.push((role, command));
    }
    let names = ROLES;
    let transport = label;
    // `--timeout` is per run of the client's plan (one run per transport unless `run=`
    // lines say otherwise): the pair's limit grows with the plan and is said up front.
    let runs = plan_runs(&configs[1]).len().max(1) as u64;
    let limit = args.timeout.saturating_mul(runs);
    say(&format!(
        "{transport}: booting server and client on one fabric (limit {limit} s: --timeout {} s \
         per run, {runs} run{})",
        args.timeout,
        if runs == 1 { "" } else { "s" }
    ));
    let mut last: [Option<Counters>; 2] = [None, None];
    // The client's current run has a passive server (READ, atomics, the bandwidth tests but
    // send_bw): its server's lines say nothing of the size's traffic.
    let mut passive = false;
    let mut pending: Vec<(String, u64, u64, [Option<Counters>; 2])> = Vec::new();
    // Per node: its counters at each of its run headers, and for each of its result lines
    // the entry of `pending` that holds its window (none for a passive server's lines).
    let mut run_starts: [Vec<Counters>; 2] = [Vec::new(), Vec::new()];
    let mut result_slots: [Vec<Option<usize>>; 2] = [Vec::new(), Vec::new()];
    let mut client_lost = 0u64;
    let start = Instant::now();
    let mut ready: [Option<Duration>; 2] = [None, None];
    let specs = commands
        .into_iter()
        .enumerate()
        .map(|(i, (role, command))| NodeSpec {
            name: role.to_string(),
            command,
            profile: args.profile.for_node(i),
            console_log: Some(out.join(format!("{prefix}{stem}{role}.log"))),
        })
        .collect();
    let fabric = sim::FabricConfig {
        topology: if args.back_to_back {
            sim::Topology::BackToBack
        } else {
            sim::Topology::Switch
        },
        trace: args.trace,
        seed: args.seed,
        faults: sim::Faults {
            drop_probability: args.drop_probability,
            ..sim::Faults::default()
        },
        ..sim::FabricConfig::default()
    };
    let outcomes = run_nodes_on(
        fabric,
        specs,
        Duration::from_secs(limit),
        &mut |node, line, server, hcas| {
            if ready[node].is_none() && is_ready_line(line) {
                ready[node] = Some(start.elapsed());
            }
            // A run of the client's plan begins: `pingpong: run R/N pass P/M: ib_... -c T`.
            if node == 1 {
                if let Some(name) = run_group(line) {
                    crate::progress::begin_run(&name);
                }
            }
            // Snapshot the model when a node announces a run (`pingpong: run R/N ...`,
            // printed before that run's rendezvous): no data packet of the run can have
            // been sent before it was printed, and the rendezvous in between gives the
            // console line time to reach the runner before the first size starts.
            if line.starts_with("pingpong: run ") {
                last[node] = Some(server.counters(hcas[node]));
                run_starts[node].push(server.counters(hcas[node]));
                if node == 1 {
                    passive = line
                        .split_once(": ")
                        .and_then(|(_, rest)| rest.split_once(": "))
                        .and_then(|(_, cmd)| ibconfig::Run::parse(cmd).ok())
                        .is_some_and(|r| r.test.passive_server());
                }
            }
            if from == RunStartSnapshot::TableHeader && line.starts_with(" #bytes") {
                last[node] = Some(server.counters(hcas[node]));
                if node == 1 && passive {
                    last[0] = Some(server.counters(hcas[0]));
                }
            }
            // A result line (an unreadable one is reported with the results).
            let Some((test, transport, bytes, iters, lost)) = result_line(line) else {
                return;
            };
            // A passive server's result lines (write/read/atomic bandwidth: printed as its
            // size starts) bound no traffic; the client's line measures both nodes.
            let passive_test = test.passive_server();
            if node == 0 && passive_test {
                result_slots[0].push(None);
                return;
            }
            let now = server.counters(hcas[node]);
            let group = crate::results::Results::group_name(test, transport);
            let delta = last[node].map(|b| diff_counters(&now, &b));
            last[node] = Some(now);
            if node == 1 {
                client_lost += lost;
            }
            let mut per = [None, None];
            per[node] = delta;
            // READ, atomics, write/read/atomic bandwidth: the server's software is passive
            // (its HCA answers), so its interval is the client's.
            if node == 1 && passive_test {
                let now = server.counters(hcas[0]);
                per[0] = last[0].map(|b| diff_counters(&now, &b));
                last[0] = Some(now);
            }
            // The first size of that group and bytes still waiting for this node's line.
            match pending
                .iter_mut()
                .position(|p| p.0 == group && p.1 == bytes && p.3[node].is_none())
            {
                Some(at) => {
                    for (mine, new) in pending[at].3.iter_mut().zip(per) {
                        if mine.is_none() {
                            *mine = new;
                        }
                    }
                    result_slots[node].push(Some(at));
                }
                None => {
                    pending.push((group, bytes, iters, per));
                    result_slots[node].push(Some(pending.len() - 1));
                }
            }
        },
    )?;
    say(&format!(
        "{transport}: finished in {:.1} s",
        start.elapsed().as_secs_f64()
    ));
    for (i, o) in outcomes.iter().enumerate() {
        if args.trace {
            fs::write(
                out.join(format!("{prefix}{stem}{}.trace", names[i])),
                &o.trace,
            )?;
        }
        for line in report_lines(o) {
            say(&format!("{transport} {line}"));
        }
    }
    // Verdicts: both kernels succeeded, no violation, losses within the bound.
    for o in &outcomes {
        let e = Exit::for_guest(&o.exit, true);
        if e != Exit::Success {
            let why = o
                .console
                .lines()
                .find(|l| l.starts_with("pingpong: FAIL"))
                .unwrap_or("no pingpong verdict on the console");
            say(&format!(
                "{transport} {}: FAILED: {} ({why})",
                o.name, o.exit
            ));
            exit = if exit == Exit::Success { e } else { exit };
        }
        if !o.violations.is_empty() {
            say(&format!(
                "{transport} {}: FAILED: {} model violation(s)",
                o.name,
                o.violations.len()
            ));
            exit = Exit::GuestFailed;
        }
    }
    let lost = client_lost;
    if lost > args.loss_allowance() {
        say(&format!(
            "{transport}: FAILED: {lost} messages lost (more than --max-losses {})",
            args.loss_allowance()
        ));
        exit = Exit::GuestFailed;
    }
    // From the run headers on, each size's window is exactly its iterations where the
    // switches of the node's data QP pair with its sizes; the console-line windows (which
    // hold a run's rendezvous in its first size) stay where they do not.
    if from == RunStartSnapshot::RunHeader {
        for (node, o) in outcomes.iter().enumerate() {
            let exact = data_qp_windows(&o.sq_switches, &o.console, &run_starts[node]);
            if exact.len() != result_slots[node].len() {
                continue;
            }
            for (slot, window) in result_slots[node].iter().zip(exact) {
                if let (Some(at), Some(window)) = (slot, window) {
                    pending[*at].3[node] = Some(window);
                }
            }
        }
    }
    let mut traffic = Vec::new();
    for (group, bytes, iters, per) in pending {
        if let [Some(s), Some(c)] = per {
            traffic.push(SizeTraffic {
                transport: group,
                bytes,
                iterations: iters,
                per_node: [s, c],
            });
        }
    }
    Ok(TransportRun {
        outcomes,
        traffic,
        exit: (exit != Exit::Success).then_some(exit),
        ready,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `config` after checking it as the kernel will.
    pub(crate) fn checked(config: Config) -> Config {
        crate::kernel_config::check_config(&config).unwrap();
        config
    }

    #[test]
    fn command_line() {
        use crate::cli::{Cli, Subcommands};
        use clap::Parser;
        let cli = Cli::try_parse_from([
            "cargo qemu",
            "pingpong",
            "-c",
            "UD,UC",
            "-a",
            "-n",
            "20",
            "-I",
            "64",
            "--out",
            "o",
        ])
        .unwrap();
        let Subcommands::Pingpong(a) = cli.command else {
            panic!("not pingpong")
        };
        assert_eq!(a.transports.as_deref(), Some("UD,UC"));
        assert_eq!(a.test, Benchmark::Perftest(Test::SendLat));
        assert!(a.all && a.size.is_none());
        assert_eq!((a.iters, a.inline, a.timeout), (20, Some(64), 600));
        assert_eq!(a.out.as_deref(), Some(std::path::Path::new("o")));
        let err = Cli::try_parse_from(["cargo qemu", "pingpong", "-a", "-s", "64"]).unwrap_err();
        assert!(err.to_string().contains("cannot be used with"), "{err}");
        let cli = Cli::try_parse_from(["cargo qemu", "pingpong"]).unwrap();
        let Subcommands::Pingpong(a) = cli.command else {
            panic!("not pingpong")
        };
        assert_eq!(
            (a.transports.as_deref(), a.iters, a.loss_allowance()),
            (None, 1000, 0)
        );
        assert_eq!(
            a.transport_list().unwrap(),
            vec![Transport::Ud, Transport::Uc]
        );
        assert!(!a.back_to_back, "a switch by default");
        let cli = Cli::try_parse_from(["cargo qemu", "pingpong", "--back-to-back"]).unwrap();
        let Subcommands::Pingpong(a) = cli.command else {
            panic!("not pingpong")
        };
        assert!(a.back_to_back);
        // Loss: a probability in [0, 1) and a seed; anything else is a usage error.
        assert_eq!((a.drop_probability, a.seed), (0.0, 1), "no loss by default");
        let cli = Cli::try_parse_from([
            "cargo qemu",
            "pingpong",
            "--drop-probability",
            "0.01",
            "--seed",
            "7",
        ])
        .unwrap();
        let Subcommands::Pingpong(a) = cli.command else {
            panic!("not pingpong")
        };
        assert_eq!((a.drop_probability, a.seed), (0.01, 7));
        for bad in ["1", "-0.1", "1.5", "x", "NaN"] {
            let e = Cli::try_parse_from(["cargo qemu", "pingpong", "--drop-probability", bad])
                .unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}: {e}");
        }
        // write_lat: -t/--test, RC accepted, UD refused as perftest does, RC,UC by default.
        let parse = |v: &[&str]| {
            let mut argv = vec!["cargo qemu", "pingpong"];
            argv.extend_from_slice(v);
            match Cli::try_parse_from(argv).unwrap().command {
                Subcommands::Pingpong(a) => a,
                _ => panic!("not pingpong"),
            }
        };
        let a = parse(&["--test", "write_lat", "-c", "rc,UC", "-s", "64", "-n", "20"]);
        assert_eq!(a.test, Benchmark::Perftest(Test::WriteLat));
        assert_eq!(
            a.transport_list().unwrap(),
            vec![Transport::Rc, Transport::Uc]
        );
        assert_eq!(
            parse(&["--test", "write_lat"]).transport_list().unwrap(),
            vec![Transport::Rc, Transport::Uc]
        );
        let e = parse(&["--test", "write_lat", "-c", "UD"])
            .transport_list()
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("UD connection only possible in SEND verb"),
            "{e}"
        );
        assert_eq!(
            parse(&["-c", "RC"]).transport_list().unwrap(),
            vec![Transport::Rc]
        );
        assert_eq!(
            parse(&["--test", "atomic_lat"]).transport_list().unwrap(),
            vec![Transport::Rc]
        );
        let e = parse(&["--test", "read_lat", "-c", "UC"])
            .transport_list()
            .unwrap_err();
        assert!(e.to_string().contains("READ/ATOMIC verbs"), "{e}");
        assert!(e.is::<crate::Usage>(), "a usage error (exit 2)");
        let e = parse(&["-c", "RD"]).transport_list().unwrap_err();
        assert!(e.to_string().contains("unknown transport"), "{e}");
        assert!(parse(&["-c", ","]).transport_list().is_err());
        // -t is perftest's tx depth; the test is named with --test.
        let e = Cli::try_parse_from(["cargo qemu", "pingpong", "-t", "read_bw"]).unwrap_err();
        assert!(e.to_string().contains("--test read_bw"), "{e}");
        assert_eq!(
            parse(&["--test", "read_bw"]).test,
            Benchmark::Perftest(Test::ReadBw)
        );
    }

    #[test]
    fn losses_fail_a_run_only_on_a_lossless_fabric_unless_a_limit_is_given() {
        use crate::cli::{Cli, Subcommands};
        use clap::Parser;
        let allowance = |extra: &[&str]| {
            let mut argv = vec!["cargo qemu", "pingpong"];
            argv.extend_from_slice(extra);
            let Subcommands::Pingpong(a) = Cli::try_parse_from(argv).unwrap().command else {
                panic!("not pingpong")
            };
            a.loss_allowance()
        };
        assert_eq!(allowance(&[]), 0);
        assert_eq!(allowance(&["--drop-probability", "0.01"]), u64::MAX);
        let given = ["--drop-probability", "0.01", "--max-losses", "0"];
        assert_eq!(allowance(&given), 0);
        assert_eq!(allowance(&["--max-losses", "7"]), 7);
    }

    #[test]
    fn the_transports_run_as_one_plan_in_one_boot_pair() {
        use crate::cli::{Cli, Subcommands};
        use clap::Parser;
        let parse = |v: &[&str]| {
            let mut argv = vec!["cargo qemu", "pingpong"];
            argv.extend_from_slice(v);
            match Cli::try_parse_from(argv).unwrap().command {
                Subcommands::Pingpong(a) => a,
                _ => panic!("not pingpong"),
            }
        };
        let a = parse(&["-c", "UD,UC", "-a", "-n", "20", "-I", "0", "-m", "1024"]);
        let t = checked_transports(&a).unwrap();
        let [server, client] = plan_configs(&a, &t).unwrap();
        let runs: Vec<String> = client.plan().iter().map(ToString::to_string).collect();
        assert_eq!(
            runs,
            vec![
                "ib_send_lat -c UD -a -n 20 -I 0 -m 1024",
                "ib_send_lat -c UC -a -n 20 -I 0 -m 1024"
            ]
        );
        assert!(
            server.plan().is_empty(),
            "the server follows, it has no plan"
        );
        let s = checked(server);
        assert_eq!(
            (s.role, s.bench.idle_timeout_ns),
            (Some(ibconfig::Role::Server), 0)
        );
        let planned = plan_runs(&client);
        assert_eq!(planned.len(), 2);
        assert_eq!(planned[1].transport, ibconfig::Transport::Uc);
        // --set run=... gives the plan itself; --set repeat=N repeats it.
        let a = parse(&[
            "--set",
            "run=ib_write_lat -c RC -s 64 -n 20",
            "--set",
            "run=ib_send_lat -c UD -s 8",
            "--set",
            "repeat=2",
        ]);
        let t = checked_transports(&a).unwrap();
        let [_, client] = plan_configs(&a, &t).unwrap();
        assert_eq!(client.plan().len(), 2);
        let planned = plan_runs(&client);
        assert_eq!(planned.len(), 4);
        assert_eq!(plan_progress(&planned)[2].name, "write_lat RC");
        // The client's run headers name the progress display's runs.
        assert_eq!(
            run_group("pingpong: run 2/3 pass 1/1: ib_write_lat -c UC -s 64 -n 20").as_deref(),
            Some("write_lat UC")
        );
        assert_eq!(run_group("pingpong: run 1/1 pass 1/1: PASS 1 sizes"), None);
        assert_eq!(
            run_group("pingpong: run 3/6 pass 1/1: ib_send_lat -c UD -s 2 -n 20 --isr").as_deref(),
            Some("UD isr")
        );
        assert_eq!(
            run_group("pingpong: run 2/6 pass 1/1: ib_send_lat -c UD -s 2 -n 20 -e").as_deref(),
            Some("UD event")
        );
    }

    #[test]
    fn srq_pingpong_flags_become_its_keys() {
        use crate::cli::{Cli, Subcommands};
        use clap::Parser;
        let argv = [
            "cargo qemu",
            "pingpong",
            "--test",
            "srq_pingpong",
            "-q",
            "4",
            "-r",
            "8",
            "-s",
            "64",
            "-n",
            "20",
            "-e",
            "--cq-moderation",
            "1/0,4/16",
        ];
        let Subcommands::Pingpong(a) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("not pingpong")
        };
        assert_eq!(a.test, Benchmark::SrqPingpong);
        assert_eq!(a.transport_list().unwrap(), vec![Transport::Rc]);
        for role in ROLES {
            let c = checked(node_config(&a, Transport::Rc, role).unwrap());
            let b = c.bench;
            assert!(b.srq.enabled, "{role}");
            assert_eq!((b.srq.qps, b.srq.rx_depth), (4, 8));
            assert_eq!(b.sizes, ibconfig::Sizes::Single(64));
            assert_eq!(b.iterations, 20);
            assert_eq!(b.completion, ibconfig::Completion::Event);
            assert_eq!(
                b.srq.moderation.as_slice(),
                &[
                    verbs::CqModeration {
                        cq_count: 1,
                        cq_period: 0
                    },
                    verbs::CqModeration {
                        cq_count: 4,
                        cq_period: 16
                    }
                ]
            );
        }
        // Without -s the example's 4096 bytes.
        let Subcommands::Pingpong(a) =
            Cli::try_parse_from(["cargo qemu", "pingpong", "--test", "srq_pingpong"])
                .unwrap()
                .command
        else {
            panic!("not pingpong")
        };
        let c = checked(node_config(&a, Transport::Rc, Role::Client).unwrap());
        assert_eq!(c.bench.sizes, ibconfig::Sizes::Single(4096));
        assert!(c.bench.srq.moderation.as_slice().is_empty());
    }

    #[test]
    fn bandwidth_flags_become_keys_and_plan_lines() {
        use crate::cli::{Cli, Subcommands};
        use clap::Parser;
        let parse = |sub: &str, v: &[&str]| {
            let mut argv = vec!["cargo qemu", sub];
            argv.extend_from_slice(v);
            match Cli::try_parse_from(argv).unwrap().command {
                Subcommands::Pingpong(a) => a,
                _ => panic!("not pingpong"),
            }
        };
        let a = parse(
            "perftest",
            &[
                "--test",
                "send_bw",
                "-s",
                "1024",
                "-n",
                "64",
                "-t",
                "16",
                "-l",
                "4",
                "-Q",
                "4",
                "-N",
                "--report-gbits",
            ],
        );
        assert_eq!(a.test, Benchmark::Perftest(Test::SendBw));
        let t = checked_transports(&a).unwrap();
        assert_eq!(
            t,
            vec![Transport::Ud, Transport::Uc, Transport::Rc],
            "send_bw's transports by default"
        );
        let [server, client] = plan_configs(&a, &t).unwrap();
        let runs: Vec<String> = client.plan().iter().map(ToString::to_string).collect();
        assert_eq!(
            runs,
            vec![
                "ib_send_bw -c UD -s 1024 -n 64 -t 16 -l 4 -Q 4 -N --report_gbits",
                "ib_send_bw -c UC -s 1024 -n 64 -t 16 -l 4 -Q 4 -N --report_gbits",
                "ib_send_bw -c RC -s 1024 -n 64 -t 16 -l 4 -Q 4 -N --report_gbits",
            ]
        );
        checked(server);
        let planned = plan_runs(&client);
        assert_eq!(plan_progress(&planned)[0].name, "send_bw UD");
        let a = parse(
            "pingpong",
            &[
                "--test",
                "atomic_bw",
                "-n",
                "100",
                "-o",
                "4",
                "-A",
                "CMP_AND_SWAP",
            ],
        );
        let t = checked_transports(&a).unwrap();
        assert_eq!(
            plan_lines(&a, &t)
                .unwrap()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            vec!["ib_atomic_bw -c RC -s 8 -n 100 -A CMP_AND_SWAP -o 4"]
        );
        // perftest's default size: 64 KiB, lowered to the MTU on UD; 5000 iterations of
        // write_bw only when -n is not given (the runner always gives it).
        let a = parse("perftest", &["--test", "send_bw", "-n", "20"]);
        let t = checked_transports(&a).unwrap();
        assert_eq!(
            plan_lines(&a, &t)
                .unwrap()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            vec![
                "ib_send_bw -c UD -s 2048 -n 20",
                "ib_send_bw -c UC -s 65536 -n 20",
                "ib_send_bw -c RC -s 65536 -n 20"
            ]
        );
        // A bandwidth flag on a latency test is the configuration's refusal (exit 2).
        let e = checked_transports(&parse("pingpong", &["-t", "8"])).unwrap_err();
        assert!(e.is::<crate::Usage>());
        assert!(e.to_string().contains("tx_depth is a bandwidth key"), "{e}");
    }

    #[test]
    fn every_node_config_is_checked_before_anything_runs() {
        use crate::cli::{Cli, Subcommands};
        use clap::Parser;
        let parse = |v: &[&str]| {
            let mut argv = vec!["cargo qemu", "pingpong"];
            argv.extend_from_slice(v);
            match Cli::try_parse_from(argv).unwrap().command {
                Subcommands::Pingpong(a) => a,
                _ => panic!("not pingpong"),
            }
        };
        let a = parse(&["-c", "UD,UC", "-s", "64", "-n", "20", "--set", "log=debug"]);
        assert_eq!(
            checked_transports(&a).unwrap(),
            vec![Transport::Ud, Transport::Uc]
        );
        let c = checked(node_config(&a, Transport::Ud, Role::Client).unwrap());
        assert_eq!(c.mode, ibconfig::Mode::Pingpong);
        assert_eq!(c.role, Some(ibconfig::Role::Client));
        assert_eq!(c.bench.iterations, 20);
        assert_eq!(c.bench.sizes, ibconfig::Sizes::Single(64));
        assert_eq!(c.bench.wait_timeout_ns, 2_000_000_000);
        assert_eq!(c.bench.completion, ibconfig::Completion::Poll);
        assert!(!c.bench.anatomy);
        // --anatomy: the key on the client; the server follows the client's Hello.
        let a = parse(&["--anatomy", "-c", "RC", "--test", "read_lat", "-a"]);
        let c = checked(node_config(&a, Transport::Rc, Role::Client).unwrap());
        assert!(c.bench.anatomy);
        let s = checked(node_config(&a, Transport::Rc, Role::Server).unwrap());
        assert!(!s.bench.anatomy);
        let a = parse(&["--anatomy", "--test", "srq_pingpong", "-s", "64"]);
        let e = node_config(&a, Transport::Rc, Role::Client)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--anatomy with --test srq_pingpong"), "{e}");
        // -e: events on both nodes, with the interrupts of --irq; never with --irq poll.
        for irq in ["msix", "intx"] {
            let a = parse(&["-e", "--irq", irq, "-c", "UD,UC"]);
            assert_eq!(
                checked_transports(&a).unwrap(),
                vec![Transport::Ud, Transport::Uc]
            );
            for role in ROLES {
                let c = checked(node_config(&a, Transport::Uc, role).unwrap());
                assert_eq!(
                    (c.bench.completion, c.hca_irq.name()),
                    (ibconfig::Completion::Event, irq),
                    "{role}"
                );
            }
        }
        for (argv, message) in [
            (
                &["-e", "--irq", "poll"][..],
                "configuration refused: config: completion=event waits for completion interrupts, and hca_irq=poll takes none (use hca_irq=msix or intx)",
            ),
            (
                &["--irq", "poll", "--set", "completion=event"][..],
                "--set completion=event: pingpong sets completion from -e or --mode: use that flag",
            ),
            (
                &["-e", "--test", "write_lat"][..],
                "configuration refused: config: write_lat polls memory for the peer's write: completion=event and isr do not apply",
            ),
            (
                &["-c", "UD", "-s", "4096"][..],
                "configuration refused: config: UD message of 4096 bytes is larger than the path MTU 2048",
            ),
            (
                &["--set", "log=nope"][..],
                "--set log=nope: key \"log\": bad value \"nope\": expected one of error|warn|info|debug|trace",
            ),
            // What pingpong sets itself, or from its flags, --set cannot override.
            (
                &["--set", "role=client"][..],
                "--set role=client: pingpong sets role itself (one guest is the server, the other the client)",
            ),
            (
                &["--set", "mode=hca"][..],
                "--set mode=hca: pingpong sets mode itself (its guests run mode=pingpong)",
            ),
            (
                &["--set", "iters=20"][..],
                "--set iters=20: pingpong sets iters from -n: use that flag",
            ),
            (
                &["--back-to-back", "--set", "sm=off"][..],
                "--set sm=off: pingpong sets sm from --back-to-back: use that flag",
            ),
        ] {
            let e = checked_transports(&parse(argv)).unwrap_err();
            assert!(e.is::<crate::Usage>(), "{argv:?}");
            assert_eq!(e.to_string(), message, "{argv:?}");
        }
        // --mode: `modes=` on both nodes; the client's plan runs each transport once per
        // mode, poll first; isr needs MSI-X; -e and --mode exclude each other.
        let a = parse(&["--mode", "isr,poll,event", "-c", "UD,RC", "-s", "64"]);
        let transports = checked_transports(&a).unwrap();
        for role in ROLES {
            let c = checked(node_config(&a, Transport::Ud, role).unwrap());
            assert_eq!(c.bench.modes.to_string(), "poll,event,isr", "{role}");
        }
        let [_, client] = plan_configs(&a, &transports).unwrap();
        let runs: Vec<_> = plan_runs(&client)
            .iter()
            .map(|r| (r.transport.name(), r.completion.name()))
            .collect();
        assert_eq!(
            runs,
            [
                ("UD", "poll"),
                ("UD", "event"),
                ("UD", "isr"),
                ("RC", "poll"),
                ("RC", "event"),
                ("RC", "isr")
            ]
        );
        let names: Vec<_> = plan_progress(&plan_runs(&client))
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(names[..3], ["UD", "UD event", "UD isr"]);
        let e = checked_transports(&parse(&["--mode", "poll,isr", "--irq", "intx"])).unwrap_err();
        assert!(e.is::<crate::Usage>());
        assert_eq!(
            e.to_string(),
            "configuration refused: config: completion=isr posts the reply from the completion interrupt's handler: it needs hca_irq=msix"
        );
        for bad in [&["--mode", "poll,spin"][..], &["--mode", "isr", "-e"][..]] {
            let mut argv = vec!["cargo qemu", "pingpong"];
            argv.extend_from_slice(bad);
            assert!(Cli::try_parse_from(argv).is_err(), "{bad:?}");
        }
        // With -m 4096 a 4096-byte UD message is the device's to judge.
        assert!(checked_transports(&parse(&["-c", "UD", "-s", "4096", "-m", "4096"])).is_ok());
    }

    #[test]
    fn perftests_device_flags_are_honoured_or_refused() {
        use crate::cli::{Cli, Subcommands};
        use clap::Parser;
        let parse = |v: &[&str]| {
            let mut argv = vec!["cargo qemu", "perftest"];
            argv.extend_from_slice(v);
            Cli::try_parse_from(argv).map(|cli| match cli.command {
                Subcommands::Pingpong(a) => a,
                _ => panic!("not pingpong"),
            })
        };
        // -m: the path MTU, on both nodes and in the plan's runs; -d mlx4_0 and -F accepted.
        let a = parse(&["-c", "UD", "-a", "-m", "1024", "-d", "mlx4_0", "-F"]).unwrap();
        let t = checked_transports(&a).unwrap();
        let [server, client] = plan_configs(&a, &t).unwrap();
        assert_eq!(server.bench.mtu, Some(verbs::Mtu::Mtu1024));
        assert_eq!(
            client.plan()[0].to_string(),
            "ib_send_lat -c UD -a -n 1000 -m 1024"
        );
        // -i: the port, 1 on the emulated HCAs; a second port is refused there.
        let a = parse(&["-i", "1"]).unwrap();
        assert_eq!(
            checked(node_config(&a, Transport::Ud, Role::Client).unwrap())
                .bench
                .port,
            1
        );
        let e =
            node_config(&parse(&["-i", "2"]).unwrap(), Transport::Ud, Role::Client).unwrap_err();
        assert!(e.is::<crate::Usage>());
        assert_eq!(
            e.to_string(),
            "-i 2: pingpong's emulated HCAs have one port"
        );
        // Values outside perftest's (and the keys') are usage errors naming what is taken.
        for (argv, message) in [
            (
                &["-m", "3000"][..],
                "expected one of 256|512|1024|2048|4096",
            ),
            (&["-i", "3"][..], "expected a port number 1..=2"),
            (
                &["-d", "mlx4_1"][..],
                "ibkern drives one HCA, the first ConnectX-3 it finds on PCI (mlx4_0)",
            ),
        ] {
            let e = parse(argv).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{argv:?}");
            assert!(e.to_string().contains(message), "{argv:?}: {e}");
        }
        // --set mtu / ib_port: the flags' keys.
        let e = checked_transports(&parse(&["--set", "mtu=1024"]).unwrap()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--set mtu=1024: pingpong sets mtu from -m: use that flag"
        );
    }

    #[test]
    fn cli_bounds_are_the_configurations() {
        use crate::cli::Cli;
        use clap::Parser;
        let ok = |v: &[&str]| {
            let mut argv = vec!["cargo qemu"];
            argv.extend_from_slice(v);
            Cli::try_parse_from(argv).is_ok()
        };
        for sub in ["pingpong", "compare", "mixed"] {
            assert!(
                ok(&[sub, "-n", "5"]) && ok(&[sub, "-n", "16777216"]),
                "{sub}"
            );
            assert!(
                !ok(&[sub, "-n", "4"]) && !ok(&[sub, "-n", "16777217"]),
                "{sub}"
            );
            assert!(!ok(&[sub, "-n", "0"]), "{sub}");
            assert!(
                ok(&[sub, "-s", "2"]) && ok(&[sub, "-s", "8388608"]),
                "{sub}"
            );
            assert!(
                !ok(&[sub, "-s", "1"]) && !ok(&[sub, "-s", "16777216"]),
                "{sub}"
            );
        }
        assert!(ok(&["pingpong", "-I", "0"]) && ok(&["pingpong", "-I", "1024"]));
        assert!(!ok(&["pingpong", "-I", "1025"]) && !ok(&["pingpong", "-I", "5000"]));
        // Each bound is the key's: the kernel accepts exactly what the flag does.
        let key = |k: &str, v: &str| ibconfig::Config::default().apply(k, v).is_ok();
        assert!(key("iters", "5") && key("iters", "16777216") && !key("iters", "4"));
        assert!(!key("iters", "16777217"));
        assert!(key("size", "2") && key("size", "8388608") && !key("size", "8388609"));
        assert!(key("inline", "1024") && !key("inline", "1025"));
    }

    #[test]
    fn a_sizes_window_is_its_data_qps_run_between_barriers() {
        let at = |mmio_writes: u64, packets_sent: u64| Counters {
            mmio_writes,
            packets_sent,
            ..Counters::default()
        };
        let switch = |qpn: u32, c: Counters| sim::SqSwitch { qpn, counters: c };
        // Run 1 (data QP 0x48): rendezvous probes on 0x40 (30 packets), two sizes of 5
        // iterations with a barrier between, Done. Run 2 (data QP 0x49): one size.
        let switches = [
            switch(0x40, at(10, 0)),
            switch(0x48, at(40, 30)),
            switch(0x40, at(45, 35)),
            switch(0x48, at(47, 36)),
            switch(0x40, at(52, 41)),
            switch(0x49, at(70, 50)),
            switch(0x40, at(75, 55)),
        ];
        let result = |bytes: u32| {
            format!(
                "ibkern-result {{\"test\":\"send_lat\",\"transport\":\"UD\",\"role\":\"client\",\
                 \"bytes\":{bytes},\"iterations\":5,\"samples\":4,\"t_min_us\":1.0,\"t_max_us\":2.0,\
                 \"t_typical_us\":1.0,\"t_avg_us\":1.0,\"t_stdev_us\":0.1,\"p99_us\":2.0,\
                 \"p99_9_us\":2.0,\"true_max_us\":2.0,\"true_stdev_us\":0.1,\"tsc_mhz\":2000.0,\
                 \"inline\":true,\"completion\":\"poll\",\"mtu\":2048,\"lost\":0,\"retries\":0,\
                 \"aborted\":false}}\n"
            )
        };
        assert!(result_line(result(2).trim_end()).is_some(), "{}", result(2));
        let console = format!(
            "boot: ibkern kernel\n\
             pingpong: run 1/2 pass 1/1: ib_send_lat -c UD -s 2 -n 5\n \
             local address: LID 0x02 QPN 0x0048 PSN 0x0\n \
             remote address: LID 0x01 QPN 0x0050 PSN 0x0\n{}{}\
             pingpong: run 2/2 pass 1/1: ib_send_lat -c UC -s 2 -n 5\n \
             local address: LID 0x02 QPN 0x0049 PSN 0x0\n{}",
            result(2),
            result(4),
            result(2)
        );
        let console = console.as_str();
        let starts = [at(5, 0), at(60, 45)];
        let w = data_qp_windows(&switches, console, &starts);
        let sent: Vec<Option<u64>> = w.iter().map(|c| c.map(|c| c.packets_sent)).collect();
        assert_eq!(sent, [Some(5), Some(5), Some(5)], "{w:?}");
        // A third data-QP run inside run 1 (a rendezvous message inside a size) leaves the
        // run's sizes to the console-line windows; run 2 is unaffected.
        let mut extra = switches.to_vec();
        extra.insert(2, switch(0x40, at(42, 32)));
        extra.insert(3, switch(0x48, at(43, 33)));
        let w = data_qp_windows(&extra, console, &starts);
        assert_eq!(w.len(), 3);
        assert!(w[0].is_none() && w[1].is_none(), "{w:?}");
        assert_eq!(w[2].map(|c| c.packets_sent), Some(5));
        // A passive server (its data QP sends nothing) has no windows.
        let w = data_qp_windows(&[switch(0x40, at(1, 1))], console, &starts);
        assert_eq!(w, [None, None, None]);
    }

    #[test]
    fn counters_difference() {
        let a = Counters {
            mmio_writes: 10,
            dma_reads: 7,
            packets_sent: 3,
            ..Counters::default()
        };
        let b = Counters {
            mmio_writes: 4,
            dma_reads: 2,
            packets_sent: 1,
            ..Counters::default()
        };
        let d = diff_counters(&a, &b);
        assert_eq!((d.mmio_writes, d.dma_reads, d.packets_sent), (6, 5, 2));
    }

    #[test]
    fn result_lines_give_their_size_and_losses() {
        use bench::line::Record as _;
        let mut text = String::new();
        bench::line::BandwidthLine {
            test: ibconfig::Test::SendBw,
            transport: ibconfig::Transport::Uc,
            role: ibconfig::Role::Client,
            bytes: 64,
            iterations: 20,
            figures: None,
            tsc_mhz: 1000.0,
            inline: false,
            mtu: 2048,
            tx_depth: 16,
            post_list: 1,
            cq_mod: 1,
            received: Some(18),
            bytes_received: Some(18 * 64),
            lost: 2,
        }
        .emit(&mut text)
        .unwrap();
        assert_eq!(
            result_line(text.trim_end()),
            Some((ibconfig::Test::SendBw, ibconfig::Transport::Uc, 64, 20, 2))
        );
        assert_eq!(result_line("ibkern-result {\"test\":\"send_lat\"}"), None);
        assert_eq!(result_line("pingpong: PASS"), None);
    }

    #[test]
    fn traffic_is_divided_by_iterations() {
        let c = Counters {
            mmio_writes: 40,
            blueflame_bytes: 1280,
            dma_reads: 20,
            ..Counters::default()
        };
        let l = traffic_line("client", &c, 20);
        assert!(l.contains("mmio w 2.00"), "{l}");
        assert!(l.contains("bf bytes 64.0"), "{l}");
        assert!(l.contains("dma r 1.00"), "{l}");
    }
}
