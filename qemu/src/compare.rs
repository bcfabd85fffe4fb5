//! `cargo qemu compare`: Linux (Debian's mlx4 stack with perftest's `ib_send_lat`) and ibkern
//! (its ping-pong) on the same emulated fabric, with the same transports, sizes and
//! iterations; one table, `compare.csv`, `compare.svg` and `hca-ready.csv` with both stacks.
//!
//! Both stacks are measured the same way (docs/runner.md, "cargo qemu compare"):
//! - latency: the client's perftest row per size (ibkern prints the same row and its
//!   `ibkern-result` line);
//! - PCIe transactions per iteration: the model's counters of each node, snapshotted when
//!   that node prints its table header (` #bytes ...`, after the QP exchange) and at each of
//!   its rows; a size's figure is the difference divided by the iterations;
//! - HCA ready: host time from just before QEMU is spawned until the runner reads the line
//!   saying the HCA is ready for traffic (Linux: init's `port 1 state: ... ACTIVE` line;
//!   ibkern: the bring-up summary's `mlx4: port 1: ACTIVE` line).

use crate::say;
use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use sim::Counters;

use crate::hca::run_nodes_on;
use crate::pingpong::{diff_counters, pcie_per_iter, PingPongArgs, PCIE_COLUMNS};
use crate::Exit;

/// `cargo qemu compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub sweep: crate::args::SweepArgs,
    /// Both stacks wait for completions with events instead of busy polling (perftest's
    /// -e on Linux, `completion=event` on ibkern, whose HCA interrupts are MSI-X).
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Kill the guests and fail after this many seconds per boot (the Linux pair, and each
    /// ibkern pair).
    #[arg(long, value_name = "SECS", default_value_t = 900)]
    pub timeout: u64,
    /// Base directory: this run's files go to DIR/<UTC start time>/, DIR/latest points to
    /// the newest run [default: out/compare in the workspace].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Linux guest work directory (packages cache, initramfs) [default: out/linux].
    #[arg(long, value_name = "DIR")]
    pub linux_dir: Option<PathBuf>,
    /// Stream the guests' consoles to stdout also when it is a terminal (they are always in
    /// the run directory's log files, and streamed when stdout is not a terminal).
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Also record both stacks' behaviour traces (linux.trace, ibkern.trace in --out) and
    /// run the conformance check (`cargo qemu conformance`) of ibkern against Linux: this
    /// run's Linux trace together with the checked-in drivers/mlx4/conformance/linux.trace.
    /// Writes conformance.txt; a departure not in the departures file fails the run.
    #[arg(long)]
    pub trace: bool,
    /// The departures file for --trace [default: drivers/mlx4/conformance/departures.txt].
    #[arg(long, value_name = "FILE", requires = "trace")]
    pub departures: Option<PathBuf>,
    #[command(flatten)]
    pub kernel: crate::args::KernelArgs,
}

/// The software stack a figure belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stack {
    Ibkern,
    Linux,
}

impl Stack {
    pub fn name(self) -> &'static str {
        match self {
            Stack::Ibkern => "ibkern",
            Stack::Linux => "Linux",
        }
    }
}

/// perftest's seven latency columns, microseconds: t_min, t_max, t_typical, t_avg, t_stdev,
/// 99%, 99.9%.
pub type Latency = [f64; 7];

/// One size of one stack and transport.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub stack: Stack,
    pub transport: String,
    pub bytes: u64,
    pub iterations: u64,
    /// The client's row (`None`: the client reported the size aborted or printed no row).
    pub latency: Option<Latency>,
    /// The model's counters over that size, server (0) and client (1).
    pub pcie: [Option<Counters>; 2],
}

/// When a node's HCA was ready for traffic.
#[derive(Clone, Debug, PartialEq)]
pub struct Ready {
    pub stack: Stack,
    /// Which boot: "UD"/"UC" for ibkern (one pair per transport), "pair" for Linux.
    pub boot: String,
    pub node: &'static str,
    pub after: Option<Duration>,
}

/// A perftest latency row: `bytes iterations` and the seven figures (9 numbers).
pub fn parse_row(line: &str) -> Option<(u64, u64, Latency)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() != 9 {
        return None;
    }
    let bytes = f[0].parse().ok()?;
    let iters = f[1].parse().ok()?;
    let mut lat = [0.0; 7];
    for (v, t) in lat.iter_mut().zip(&f[2..]) {
        *v = t.parse().ok()?;
    }
    Some((bytes, iters, lat))
}

/// The transport of a perftest command line (`-c UD`), UD/UC only.
fn transport_of(cmd: &str) -> Option<String> {
    let mut words = cmd.split_whitespace();
    while let Some(w) = words.next() {
        if w == "-c" {
            return words.next().map(str::to_ascii_uppercase);
        }
    }
    None
}

/// Reads one Linux guest's console as it arrives: which test runs (between init's `run` and
/// `result` lines), the table header, the rows; snapshots the model at the header and each row.
#[derive(Debug, Default)]
pub struct LinuxTracker {
    test: Option<String>,
    last: Option<Counters>,
    /// (transport, bytes, iterations, latency, counters over the size)
    pub rows: Vec<(String, u64, u64, Latency, Option<Counters>)>,
}

impl LinuxTracker {
    /// Feeds one console line; `counters` reads the node's model counters now.
    pub fn line(&mut self, line: &str, counters: impl FnOnce() -> Counters) {
        if let Some(at) = line.find("ibkern-linux: ") {
            let rest = &line[at + 14..];
            if let Some(cmd) = rest.strip_prefix("run ") {
                self.test = transport_of(cmd);
                self.last = None;
            } else if rest.starts_with("result ") {
                self.test = None;
                self.last = None;
            }
            return;
        }
        let Some(transport) = self.test.clone() else {
            return;
        };
        if line.starts_with(" #bytes") {
            self.last = Some(counters());
        } else if let Some((bytes, iters, lat)) = parse_row(line) {
            let now = counters();
            let delta = self.last.map(|b| diff_counters(&now, &b));
            self.last = Some(now);
            self.rows.push((transport, bytes, iters, lat, delta));
        }
    }
}

/// The guest script of the Linux side: one perftest pair per transport.
pub fn linux_script(transports: &[String], size: Option<u32>, iters: u32, events: bool) -> String {
    let sizes = match size {
        Some(s) => format!("-s {s}"),
        None => "-a".to_string(),
    };
    let events = if events { " -e" } else { "" };
    transports
        .iter()
        .map(|t| format!("ibk_pair ib_send_lat -c {t} {sizes} -n {iters}{events}\n"))
        .collect()
}

/// The `-c` list of a send_lat run that pairs ibkern with Linux (`compare`, `mixed`): UD and
/// UC, upper case; with `-s`, a size both stacks run on every transport given (2 B to
/// 8 MiB, at most the 2048-byte UD MTU both use on ConnectX-3 when UD is among them).
pub(crate) fn send_lat_transports(list: &str, size: Option<u32>) -> Result<Vec<String>> {
    let transports: Vec<String> = list
        .split(',')
        .map(|t| t.trim().to_ascii_uppercase())
        .filter(|t| !t.is_empty())
        .collect();
    if transports.is_empty() {
        crate::usage!("-c: no transport given (UD, UC)");
    }
    for t in &transports {
        if t != "UD" && t != "UC" {
            crate::usage!("-c: unknown transport {t:?} (UD or UC)");
        }
    }
    if let Some(s) = size {
        use ibconfig::bench::{DEFAULT_MTU_CAP, MAX_SWEEP_SIZE, MIN_SIZE};
        if !(MIN_SIZE..=MAX_SWEEP_SIZE).contains(&s) {
            crate::usage!("-s: {s} is outside {MIN_SIZE}..={MAX_SWEEP_SIZE} bytes");
        }
        if transports.iter().any(|t| t == "UD") {
            // The same rule (and message) as the kernel's for a UD size.
            let cap = DEFAULT_MTU_CAP.bytes();
            if s > cap {
                let rule = ibconfig::Rule::UdSizeAboveMtu { size: s, mtu: cap };
                crate::usage!("-s {s} with -c UD: {rule} (both stacks use 2048 on ConnectX-3)");
            }
        }
    }
    Ok(transports)
}

/// `compare.csv`: one row per stack, transport and size; latency of the client, then the
/// model's counts per iteration of the server's and the client's HCA.
pub fn to_csv(rows: &[Row]) -> String {
    let mut s = String::from("stack,transport,bytes,iterations,t_min_us,t_max_us,t_typical_us,t_avg_us,t_stdev_us,p99_us,p99_9_us");
    for node in ["server", "client"] {
        for c in PCIE_COLUMNS {
            let _ = write!(s, ",{node}_{c}_per_iter");
        }
    }
    s.push('\n');
    for r in rows {
        let _ = write!(
            s,
            "{},{},{},{}",
            r.stack.name(),
            r.transport,
            r.bytes,
            r.iterations
        );
        for i in 0..7 {
            match r.latency {
                Some(l) => {
                    let _ = write!(s, ",{:.3}", l[i]);
                }
                None => s.push(','),
            }
        }
        for c in &r.pcie {
            for v in c
                .map(|c| pcie_per_iter(&c, r.iterations).map(Some))
                .unwrap_or([None; 12])
            {
                match v {
                    Some(v) => {
                        let _ = write!(s, ",{v:.2}");
                    }
                    None => s.push(','),
                }
            }
        }
        s.push('\n');
    }
    s
}

/// The table: per transport, both stacks' rows by size (perftest's columns, the client's
/// figures), then the model's MMIO writes/reads, BlueFlame bytes, DMA reads/writes and
/// interrupts per iteration of the client's and the server's HCA.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    let mut transports: Vec<&str> = rows.iter().map(|r| r.transport.as_str()).collect();
    transports.sort_by_key(|t| (*t != "UD", t.to_string()));
    transports.dedup();
    for t in transports {
        let _ = writeln!(
            s,
            "ib_send_lat over {t}: client latency [usec] | model PCIe transactions per iteration, client HCA then server HCA (mmio w/r, BlueFlame bytes, dma r/w, irqs)"
        );
        let _ = writeln!(
            s,
            " {:<7} {:>8} {:>6} {:>10} {:>10} {:>10} {:>10} {:>9} {:>10} {:>10} | {:>7} {:>6} {:>7} {:>6} {:>6} {:>5} | {:>7} {:>6} {:>7} {:>6} {:>6} {:>5}",
            "stack", "#bytes", "#iter", "t_min", "t_max", "t_typical", "t_avg", "t_stdev",
            "99%", "99.9%", "mmio_w", "mmio_r", "bf_B", "dma_r", "dma_w", "irq", "mmio_w",
            "mmio_r", "bf_B", "dma_r", "dma_w", "irq"
        );
        let mut these: Vec<&Row> = rows.iter().filter(|r| r.transport == t).collect();
        these.sort_by_key(|r| (r.bytes, r.stack));
        for r in these {
            let _ = write!(
                s,
                " {:<7} {:>8} {:>6}",
                r.stack.name(),
                r.bytes,
                r.iterations
            );
            match r.latency {
                Some(l) => {
                    let _ = write!(
                        s,
                        " {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>9.2} {:>10.2} {:>10.2}",
                        l[0], l[1], l[2], l[3], l[4], l[5], l[6]
                    );
                }
                None => {
                    let _ = write!(s, " {:>76}", "(no figures: size aborted)");
                }
            }
            for node in [1, 0] {
                match r.pcie[node] {
                    Some(c) => {
                        let p = pcie_per_iter(&c, r.iterations);
                        let _ = write!(
                            s,
                            " | {:>7.2} {:>6.2} {:>7.1} {:>6.2} {:>6.2} {:>5.2}",
                            p[0], p[1], p[2], p[3], p[6], p[9]
                        );
                    }
                    None => {
                        let _ = write!(s, " | {:>46}", "-");
                    }
                }
            }
            s.push('\n');
        }
        s.push('\n');
    }
    s
}

/// `compare.svg`: the client's t_typical against size, one line per stack and transport.
pub fn to_svg(rows: &[Row]) -> String {
    to_svg_with(rows, None)
}

/// [`to_svg`] with the run's provenance as subtitle and metadata.
pub fn to_svg_with(rows: &[Row], provenance: Option<&crate::provenance::Provenance>) -> String {
    let mut names: Vec<(Stack, String)> = rows
        .iter()
        .map(|r| (r.stack, r.transport.clone()))
        .collect();
    names.sort();
    names.dedup();
    let labels: Vec<String> = names
        .iter()
        .map(|(st, t)| format!("{} {t}", st.name()))
        .collect();
    let series: Vec<crate::plot::Series> = names
        .iter()
        .zip(labels)
        .map(|((st, t), name)| {
            let mut points: Vec<crate::plot::Point> = rows
                .iter()
                .filter(|r| r.stack == *st && &r.transport == t)
                .filter_map(|r| {
                    r.latency.map(|l| crate::plot::Point {
                        bytes: r.bytes,
                        us: l[2],
                        p99: Some(l[5]),
                        inline: None,
                    })
                })
                .filter(|p| p.bytes > 0 && p.us > 0.0 && p.us.is_finite())
                .collect();
            points.sort_by_key(|p| p.bytes);
            crate::plot::Series { name, points }
        })
        .collect();
    crate::plot::svg(&crate::plot::Plot {
        title: "ib_send_lat under QEMU: Linux perftest vs ibkern (median of RTT/2)".into(),
        subtitle: provenance.map_or(Vec::new(), |p| p.subtitle()),
        metadata: provenance.and_then(|p| serde_json::to_string(&p.to_json()).ok()),
        series,
    })
}

/// `hca-ready.csv`.
pub fn ready_csv(ready: &[Ready]) -> String {
    let mut s = String::from("stack,boot,node,seconds_from_qemu_start\n");
    for r in ready {
        let _ = writeln!(
            s,
            "{},{},{},{}",
            r.stack.name(),
            r.boot,
            r.node,
            r.after
                .map_or(String::new(), |d| format!("{:.3}", d.as_secs_f64()))
        );
    }
    s
}

/// The ibkern side of a comparison as `cargo qemu pingpong` arguments: send_lat, the same
/// transports, sizes and iterations, the emulated guest.
fn ibkern_args(args: &CompareArgs, out: &std::path::Path) -> PingPongArgs {
    PingPongArgs {
        guest: crate::args::GuestArgs::emulated(),
        flags: crate::args::PingPongFlags {
            test: crate::pingpong::TestChoice::SendLat,
            transports: Some(args.sweep.transports.clone()),
            all: args.sweep.size.is_none(),
            size: args.sweep.size,
            iters: args.sweep.iters,
            inline: None,
            irq: crate::hca::IrqChoice::Msix,
            events: args.events,
            modes: None,
            srq: crate::args::SrqFlags::default(),
            anatomy: false,
            drop_probability: 0.0,
            seed: 1,
            max_losses: 0,
            trace: args.trace,
            timeout: args.timeout,
            bw: crate::args::BwFlags::default(),
            set: crate::args::SetArgs { set: Vec::new() },
            kernel: crate::args::KernelArgs {
                kernel: args.kernel.kernel.clone(),
                loader_log: args.kernel.loader_log,
            },
        },
        back_to_back: false,
        out: Some(out.to_path_buf()),
        verbose: args.verbose,
    }
}

/// Runs both stacks and writes the files.
pub fn compare_command(args: CompareArgs) -> Result<Exit> {
    let workspace = crate::host::Workspace::locate();
    let base = args
        .out
        .clone()
        .unwrap_or_else(|| workspace.root.join("out/compare"));
    let transports = send_lat_transports(&args.sweep.transports, args.sweep.size)?;
    let pp = ibkern_args(&args, &base);
    // Every ibkern node's configuration is checked, and QEMU looked for, before anything is
    // built, written or booted.
    crate::pingpong::checked_transports(&pp)?;
    let qemu = crate::host::qemu_binary(None)?;
    let started = crate::provenance::now_iso();
    let mut facts: Vec<crate::provenance::NodeFacts> = Vec::new();
    let out = crate::run_dir::create(&base)?;
    say(&format!(
        "this run's files: {} ({} points to it)",
        out.display(),
        base.join(crate::run_dir::LATEST).display()
    ));
    let mut exit = Exit::Success;
    let worse = |e: Exit, exit: &mut Exit| {
        if *exit == Exit::Success {
            *exit = e;
        }
    };
    let mut rows: Vec<Row> = Vec::new();
    let mut ready: Vec<Ready> = Vec::new();
    // Progress: Linux's pair runs every transport in one boot, then one ibkern pair each.
    let mut plan = vec![crate::progress::RunPlan {
        name: "Linux".into(),
        sizes: transports
            .iter()
            .map(|t| crate::progress::planned_sizes(t, pp.all, pp.size, &[]))
            .sum(),
    }];
    plan.extend(crate::pingpong::progress_plan(&pp, &transports));
    let progress = crate::progress::start_guarded(plan, args.verbose);

    // Linux: one pair, one perftest pair per transport.
    let linux_dir = args
        .linux_dir
        .clone()
        .unwrap_or_else(|| workspace.root.join("out/linux"));
    let image = crate::linux::image::build(&linux_dir)?;
    let run = crate::linux::run::LinuxRun {
        trace: args.trace,
        guests: 2,
        msix: true,
        machine: crate::machine::Machine::Pc,
        script: linux_script(&transports, args.sweep.size, args.sweep.iters, args.events),
        timeout: Duration::from_secs(args.timeout),
        test_timeout: args.timeout,
        link_ports: crate::linux::run::free_ports()?,
    };
    let work = out.join("linux");
    fs::create_dir_all(&work)?;
    let specs = crate::linux::run::node_specs(&image, &run, &work)?;
    crate::progress::begin_run("Linux");
    say("Linux: booting two guests on one fabric (perftest ib_send_lat)");
    let mut trackers = [LinuxTracker::default(), LinuxTracker::default()];
    let mut linux_ready: [Option<Duration>; 2] = [None, None];
    let start = Instant::now();
    let fabric = sim::FabricConfig {
        trace: args.trace,
        ..sim::FabricConfig::default()
    };
    let nodes = run_nodes_on(
        fabric,
        specs,
        run.timeout,
        &mut |node, line, server, hcas| {
            if linux_ready[node].is_none() && crate::linux::run::is_ready_line(line) {
                linux_ready[node] = Some(start.elapsed());
            }
            trackers[node].line(line, || server.counters(hcas[node]));
        },
    )?;
    let outcome = crate::linux::run::judge_nodes(nodes, start.elapsed());
    for line in outcome.report() {
        say(&format!("Linux {line}"));
    }
    for g in &outcome.guests {
        fs::write(out.join(format!("{}.log", g.node.name)), &g.node.console)?;
        let mut f = crate::provenance::NodeFacts::from_console(
            &format!("Linux {}", g.node.name),
            &g.node.console,
        );
        f.config = Some(format!(
            "Debian's Linux with mlx4_core/mlx4_ib and perftest ({}.log)",
            g.node.name
        ));
        facts.push(f);
    }
    let linux_trace = outcome.trace();
    let mut ibkern_traces: Vec<String> = Vec::new();
    if !outcome.passed() {
        worse(
            if outcome.timed_out() {
                Exit::Timeout
            } else {
                Exit::GuestFailed
            },
            &mut exit,
        );
    }
    for (i, after) in linux_ready.iter().enumerate() {
        ready.push(Ready {
            stack: Stack::Linux,
            boot: "pair".into(),
            node: ["server", "client"][i],
            after: *after,
        });
    }
    let [server_t, client_t] = trackers;
    for (transport, bytes, iters, lat, c) in &client_t.rows {
        let s = server_t
            .rows
            .iter()
            .find(|r| &r.0 == transport && r.1 == *bytes)
            .and_then(|r| r.4);
        rows.push(Row {
            stack: Stack::Linux,
            transport: transport.clone(),
            bytes: *bytes,
            iterations: *iters,
            latency: Some(*lat),
            pcie: [s, *c],
        });
    }

    // ibkern: one pair per transport, the same sizes and iterations.
    for transport in &transports {
        let run = crate::pingpong::run_transport(&pp, transport, &out)?;
        if let Some(e) = run.exit {
            worse(e, &mut exit);
        }
        for (i, after) in run.ready.iter().enumerate() {
            ready.push(Ready {
                stack: Stack::Ibkern,
                boot: transport.clone(),
                node: ["server", "client"][i],
                after: *after,
            });
        }
        ibkern_traces.extend(run.outcomes.iter().map(|o| o.trace.clone()));
        for (o, role) in run.outcomes.iter().zip(crate::pingpong::ROLES) {
            facts.push(crate::provenance::NodeFacts::from_console(
                &format!("ibkern {transport} {role}"),
                &o.console,
            ));
        }
        let consoles: Vec<&str> = run.outcomes.iter().map(|o| o.console.as_str()).collect();
        let results = crate::results::collect(&consoles);
        for bad in &results.bad_lines {
            say(&format!(
                "FAILED: unreadable result line {} of console {}: {}",
                bad.line, bad.node, bad.reason
            ));
            worse(Exit::GuestFailed, &mut exit);
        }
        for r in results.series(transport, "client") {
            let t = run
                .traffic
                .iter()
                .find(|t| t.bytes == r.bytes)
                .map(|t| t.per_node);
            rows.push(Row {
                stack: Stack::Ibkern,
                transport: transport.clone(),
                bytes: r.bytes,
                iterations: r.iterations,
                latency: r.stats.map(|f| {
                    [
                        f.t_min,
                        f.t_max,
                        f.t_typical,
                        f.t_avg,
                        f.t_stdev,
                        f.p99,
                        f.p99_9,
                    ]
                }),
                pcie: [t.map(|t| t[0]), t.map(|t| t[1])],
            });
        }
    }

    drop(progress);

    // Both stacks must have reported every size of every transport.
    for t in &transports {
        for stack in [Stack::Linux, Stack::Ibkern] {
            let n = rows
                .iter()
                .filter(|r| r.stack == stack && &r.transport == t)
                .count();
            let want =
                crate::progress::planned_sizes(t, args.sweep.size.is_none(), args.sweep.size, &[]);
            if n != want {
                say(&format!(
                    "FAILED: {} {t}: {n} size(s) reported, {want} expected",
                    stack.name()
                ));
                worse(Exit::GuestFailed, &mut exit);
            }
        }
    }

    if args.trace {
        let ibkern_trace = sim::conformance::union(ibkern_traces.iter().map(String::as_str));
        fs::write(out.join("linux.trace"), &linux_trace)?;
        fs::write(out.join("ibkern.trace"), &ibkern_trace)?;
        let checked_in = workspace.root.join(crate::conformance::LINUX_TRACE);
        let mut reference = vec![linux_trace.clone()];
        if let Ok(t) = fs::read_to_string(&checked_in) {
            reference.push(t);
        }
        let departures = args
            .departures
            .clone()
            .unwrap_or_else(|| workspace.root.join(crate::conformance::DEPARTURES));
        let report = crate::conformance::check(
            &ibkern_trace,
            &sim::conformance::union(reference.iter().map(String::as_str)),
            &departures,
        )?;
        fs::write(
            out.join("conformance.txt"),
            report.render("ibkern", "Linux"),
        )?;
        for f in report.uncovered() {
            say(&format!("conformance: NEW departure: {}", f.line));
        }
        say(&crate::conformance::summary(&report));
        if !report.uncovered().is_empty() {
            say("FAILED: ibkern departs from Linux where the departures file does not say so (conformance.txt)");
            worse(Exit::GuestFailed, &mut exit);
        }
    }

    let provenance = crate::provenance::Provenance::of_this_run(
        crate::provenance::Platform::Emulated {
            accel: "tcg".to_string(),
            qemu: crate::provenance::qemu_version(&qemu),
        },
        started,
        facts,
    );
    let comments: String = provenance
        .lines()
        .iter()
        .map(|l| format!("# {l}\n"))
        .collect();
    print!("{comments}{}", table(&rows));
    println!("--- time from QEMU's start to the HCA ready for traffic (host clock) ---");
    for r in &ready {
        println!(
            " {:<7} {:<5} {:<7} {}",
            r.stack.name(),
            r.boot,
            r.node,
            r.after.map_or("never seen".to_string(), |d| format!(
                "{:.2} s",
                d.as_secs_f64()
            ))
        );
    }
    let files = [
        ("compare.csv", comments.clone() + &to_csv(&rows)),
        ("compare.svg", to_svg_with(&rows, Some(&provenance))),
        ("hca-ready.csv", comments.clone() + &ready_csv(&ready)),
    ];
    for (name, text) in &files {
        let path = out.join(name);
        fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    say(&format!(
        "wrote compare.csv, compare.svg, hca-ready.csv and the consoles into {}",
        out.display()
    ));
    say(&format!(
        "compare: {}",
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
    fn send_lat_transports_are_checked_with_the_size() {
        assert_eq!(send_lat_transports(" ud,UC ", None).unwrap(), ["UD", "UC"]);
        assert_eq!(send_lat_transports("UC", Some(8 << 20)).unwrap(), ["UC"]);
        for (list, size) in [
            ("", None),
            (",", None),
            ("RC", None),
            ("UD,XX", None),
            ("UC", Some(1)),
            ("UC", Some((8 << 20) + 1)),
            ("UD,UC", Some(4096)),
        ] {
            assert!(
                send_lat_transports(list, size).is_err(),
                "{list:?} {size:?}"
            );
        }
    }

    fn counters(mmio_writes: u64, packets: u64) -> Counters {
        Counters {
            mmio_writes,
            packets_sent: packets,
            ..Counters::default()
        }
    }

    #[test]
    fn perftest_rows_parse_and_other_lines_do_not() {
        let row = " 64      20          804.81         3019.86      1090.30     \t       1386.57     \t448.65  \t\t3019.86 \t\t3019.86 ";
        let (b, n, l) = parse_row(row).unwrap();
        assert_eq!((b, n), (64, 20));
        assert_eq!(
            l,
            [804.81, 3019.86, 1090.30, 1386.57, 448.65, 3019.86, 3019.86]
        );
        assert_eq!(parse_row(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "), None);
        assert_eq!(parse_row(" 64 20 1 2 3"), None);
        assert_eq!(parse_row("a b c d e f g h i"), None);
    }

    #[test]
    fn tracker_diffs_counters_between_header_and_rows_of_a_bracketed_test() {
        let mut t = LinuxTracker::default();
        let mut now = 100;
        let feed = |t: &mut LinuxTracker, line: &str, c: u64| t.line(line, || counters(c, c / 10));
        // Outside a test: rows are ignored.
        feed(&mut t, " 2 5 1 1 1 1 0 1 1", now);
        feed(&mut t, "ibkern-linux: run ib_send_lat -c UC -a -n 20", now);
        feed(&mut t, " #bytes #iterations    t_min[usec] ...", now);
        now += 40;
        feed(
            &mut t,
            " 2       20          1.00  2.00  1.50  1.60  0.10  2.00  2.00",
            now,
        );
        now += 60;
        feed(
            &mut t,
            " 4       20          1.00  2.00  1.50  1.60  0.10  2.00  2.00",
            now,
        );
        feed(
            &mut t,
            "ibkern-linux: result rc=0: ib_send_lat -c UC -a -n 20",
            now,
        );
        feed(
            &mut t,
            " 8       20          1.00  2.00  1.50  1.60  0.10  2.00  2.00",
            now + 5,
        );
        assert_eq!(t.rows.len(), 2);
        assert_eq!((t.rows[0].0.as_str(), t.rows[0].1), ("UC", 2));
        assert_eq!(t.rows[0].4.unwrap().mmio_writes, 40);
        assert_eq!(t.rows[1].4.unwrap().mmio_writes, 60);
        assert_eq!(t.rows[1].3[2], 1.5);
    }

    #[test]
    fn script_runs_one_pair_per_transport_with_the_same_sizes_and_iterations() {
        let t = vec!["UD".to_string(), "UC".to_string()];
        assert_eq!(
            linux_script(&t, None, 20, false),
            "ibk_pair ib_send_lat -c UD -a -n 20\nibk_pair ib_send_lat -c UC -a -n 20\n"
        );
        assert_eq!(
            linux_script(&t[..1], Some(64), 50, false),
            "ibk_pair ib_send_lat -c UD -s 64 -n 50\n"
        );
        assert_eq!(
            linux_script(&t[..1], Some(64), 50, true),
            "ibk_pair ib_send_lat -c UD -s 64 -n 50 -e\n"
        );
        // `compare -e`: the ibkern side runs completion=event too (MSI-X interrupts).
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from(["cargo qemu", "compare", "-e", "-c", "UD"]);
        let crate::cli::Subcommands::Compare(args) = cli.unwrap().command else {
            panic!("not compare")
        };
        assert!(args.events);
        let pp = ibkern_args(&args, std::path::Path::new("o"));
        for role in crate::pingpong::ROLES {
            let c = crate::pingpong::node_config(&pp, "UD", role)
                .unwrap()
                .check()
                .unwrap();
            assert_eq!(c.bench.completion, ibconfig::Completion::Event, "{role}");
            assert_eq!(c.hca_irq, ibconfig::HcaIrq::Msix);
        }
    }

    fn rows() -> Vec<Row> {
        let mut v = Vec::new();
        for (stack, k) in [(Stack::Ibkern, 1.0), (Stack::Linux, 5.0)] {
            for t in ["UD", "UC"] {
                for bytes in [2u64, 64, 1024] {
                    v.push(Row {
                        stack,
                        transport: t.into(),
                        bytes,
                        iterations: 20,
                        latency: Some([k, 2.0 * k, 1.5 * k, 1.6 * k, 0.1, 2.0 * k, 2.0 * k]),
                        pcie: [Some(counters(200, 20)), Some(counters(400, 20))],
                    });
                }
            }
        }
        v[0].latency = None;
        v[0].pcie[0] = None;
        v
    }

    #[test]
    fn csv_has_both_stacks_and_per_iteration_counts() {
        let csv = to_csv(&rows());
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(header.len(), 11 + 24);
        assert_eq!(header[0], "stack");
        let mmio = header
            .iter()
            .position(|h| *h == "client_mmio_writes_per_iter")
            .unwrap();
        let body: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert_eq!(body.len(), 12);
        assert!(body.iter().all(|r| r.len() == header.len()));
        assert_eq!(body[1][mmio], "20.00"); // 400 writes over 20 iterations
        assert_eq!(body[0][6], ""); // aborted: no t_typical
        assert!(body.iter().any(|r| r[0] == "Linux") && body.iter().any(|r| r[0] == "ibkern"));
    }

    #[test]
    fn table_interleaves_the_stacks_by_size() {
        let t = table(&rows());
        let ud = t.split("over UC").next().unwrap();
        let order: Vec<&str> = ud
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|w| *w == "ibkern" || *w == "Linux")
            .collect();
        assert_eq!(
            order,
            ["ibkern", "Linux", "ibkern", "Linux", "ibkern", "Linux"]
        );
        assert!(t.contains("(no figures: size aborted)"));
        assert!(t.contains("20.00")); // client mmio writes per iteration
    }

    #[test]
    fn svg_has_four_series_and_labelled_log_axes() {
        let svg = to_svg(&rows());
        for name in ["ibkern UD", "ibkern UC", "Linux UD", "Linux UC"] {
            assert!(
                svg.contains(&format!("data-transport=\"{name}\"")),
                "{name}"
            );
        }
        assert!(svg.contains("Message size [bytes] (log2 scale)"));
        assert!(svg.contains("(log scale)"));
        assert!(svg.contains("Linux perftest vs ibkern"));
    }

    #[test]
    fn ready_lines_of_both_stacks() {
        assert!(crate::linux::run::is_ready_line(
            "ibkern-linux: port 1 state: 4: ACTIVE, lid 2"
        ));
        assert!(!crate::linux::run::is_ready_line(
            "ibkern-linux: port 1 state: 1: DOWN, lid 0"
        ));
        assert!(crate::pingpong::is_ready_line(
            "mlx4: port 1: ACTIVE lid 0x2 sm_lid 0x1 gid fe80:0000 mtu 2048"
        ));
        assert!(!crate::pingpong::is_ready_line(
            "mlx4: port 1: DOWN lid 0x0"
        ));
        let csv = ready_csv(&[Ready {
            stack: Stack::Linux,
            boot: "pair".into(),
            node: "server",
            after: Some(Duration::from_millis(6758)),
        }]);
        assert_eq!(csv.lines().nth(1), Some("Linux,pair,server,6.758"));
    }
}
