//! `cargo qemu node`: one node of a ping-pong run, one command per host. The HCA is either a
//! real ConnectX-3 passed through with VFIO (`--vfio BDF`, the guest under KVM) or an HCA of
//! the emulated fabric another process serves (`--fabric DIR --index I`, `cargo qemu fabric`;
//! the guest under TCG with one vCPU, as every emulated guest here). Only the device differs:
//! the same kernel, configuration keys, console log, tables and result files.
//!
//! The console is appended to the run directory's log file as it arrives, so a node that
//! crashes or is killed leaves its log. At the end the perftest-style table of this node's
//! result lines is printed (the client's is the one perftest users compare) and latency.csv,
//! latency.json and latency.svg are written with the run's provenance: "hardware" under VFIO,
//! "emulated" on the fabric.

use std::io::Write as _;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::ArgGroup;
use sim::mpqemu::launch::{proxy_socketpair, qtest_args, SocketDir};
use sim::mpqemu::FD_PLACEHOLDER;

use crate::args::{GuestArgs, PingPongFlags, VmArgs};
use crate::command::{QemuCommand, DEFAULT_MEMORY_MIB};
use crate::fabric::{AttachRequest, Attachment};
use crate::guest::{Echo, Guest, Input, RunOptions};
use crate::kernel_config::SetBy;
use crate::machine::Accel;
use crate::pingpong::{
    check_transport, diff_counters, file_prefix, node_config_with, pcie_values, traffic_line,
    FLAG_KEYS, PCIE_COLUMNS,
};
use crate::provenance::{NodeFacts, Platform, Provenance};
use crate::vfio::{self, Bdf, HostRoots};
use crate::{say, Exit};
use ibconfig::{Benchmark, Config, Test, Transport};

/// The message of a refused `key=value`.
fn key_error(e: ibconfig::KeyError) -> String {
    match e {
        ibconfig::KeyError::Unknown => "unknown key".to_string(),
        ibconfig::KeyError::BadValue(why) => format!("bad value: {why}"),
    }
}

/// `cargo qemu node`.
#[derive(Debug, clap::Args)]
#[command(group(ArgGroup::new("hca").required(true).args(["vfio", "fabric"])))]
#[command(mut_arg("transports", |a| {
    a.value_name("UD|UC|RC").help(
        "Transport: UD, UC or RC [default: UD for send_lat, RC for the others]. Both nodes \
         must be given the same",
    )
}))]
#[command(mut_arg("timeout", |a| a.help("Kill QEMU and fail after this many seconds")))]
#[command(mut_arg("trace", |a| {
    a.help(
        "Record the model's behaviour trace of this node's HCA (on the emulated fabric; the \
         fabric then records every node's) and write it to OUT/<transport>-<role>.trace \
         (docs/model.md, \"Behaviour trace\")",
    )
}))]
#[command(mut_arg("drop_probability", |a| {
    a.help(
        "Probability in [0, 1) that the emulated fabric drops each data packet: set on the \
         whole fabric when this node attaches (give both nodes the same); allow the losses \
         with --max-losses; only with --fabric",
    )
}))]
#[command(mut_arg("seed", |a| {
    a.help(
        "Seed of the fabric's loss generator, set with --drop-probability when this node \
         attaches (the same seed drops the same packets of the same packet sequence); only with --fabric",
    )
}))]
pub struct NodeArgs {
    /// Pass this host PCI function (the ConnectX-3 PF) through with VFIO, after the checks of
    /// `cargo qemu vfio-check`; the guest runs under KVM.
    #[arg(long, value_name = "BDF", conflicts_with_all = ["drop_probability", "seed", "trace"])]
    pub vfio: Option<Bdf>,
    /// Take the HCA from the emulated fabric whose node sockets are in DIR (`cargo qemu
    /// fabric` prints it); the guest runs under TCG with one vCPU.
    #[arg(long, value_name = "DIR", requires = "index")]
    pub fabric: Option<PathBuf>,
    /// This node's place on the fabric (its socket DIR/node<I>.sock).
    #[arg(long, value_name = "I", requires = "fabric", conflicts_with = "vfio")]
    pub index: Option<usize>,
    /// Server or client of the ping-pong.
    #[arg(long, value_enum)]
    pub role: ibconfig::Role,
    #[command(flatten)]
    pub flags: PingPongFlags,
    /// The peer's LID [default: the bench probes LIDs for it (`probe_lids`)].
    #[arg(long, value_name = "LID")]
    pub peer_lid: Option<String>,
    /// Base directory: this run's files go to DIR/<UTC start time>/, DIR/latest points to
    /// the newest run [default: out/node-<role> in the workspace].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub vm: VmArgs,
}

/// The shared flags read as the node's own (`args.iters`, `args.set`, ...).
impl std::ops::Deref for NodeArgs {
    type Target = PingPongFlags;
    fn deref(&self) -> &PingPongFlags {
        &self.flags
    }
}

impl NodeArgs {
    /// The guest: KVM with the card under VFIO, TCG on the emulated fabric.
    pub fn guest(&self) -> GuestArgs {
        GuestArgs {
            vm: self.vm.clone(),
            accel: if self.vfio.is_some() {
                Accel::Kvm
            } else {
                Accel::Tcg
            },
        }
    }

    /// The transport, checked against the test (a usage error otherwise).
    pub fn transport(&self) -> Result<ibconfig::Transport> {
        match &self.transports {
            Some(t) if t.contains(',') => {
                crate::usage!("-c {t}: one transport per node run (perftest's -c takes one)")
            }
            Some(t) => check_transport(self.test, t.trim()),
            None if self.test == Benchmark::Perftest(Test::SendLat) => Ok(Transport::Ud),
            None => Ok(Transport::Rc),
        }
    }

    /// The kernel configuration: `cargo qemu pingpong`'s for this role (on the fabric with
    /// its emulated wait bound) plus `--peer-lid`, then `--set` (refused for the keys the
    /// node sets: `mode`, `role` from `--role`, `peer_lid` from `--peer-lid` and the flags'
    /// keys), each checked as it is set.
    pub fn config(&self, transport: Transport) -> Result<Config> {
        let owned: Vec<(&str, SetBy)> = [
            ("mode", SetBy::Runner("it boots mode=pingpong")),
            ("role", SetBy::Flag("--role")),
            ("peer_lid", SetBy::Flag("--peer-lid")),
        ]
        .into_iter()
        .chain(FLAG_KEYS.iter().copied())
        .collect();
        let emulated = self.fabric.is_some();
        node_config_with(
            &self.flags,
            transport,
            self.role,
            emulated,
            ("node", &owned),
            |config| {
                if let Some(lid) = &self.peer_lid {
                    config
                        .apply("peer_lid", lid)
                        .map_err(|e| crate::Usage(format!("--peer-lid {lid}: {}", key_error(e))))?;
                }
                Ok(())
            },
        )
    }

    /// The file names' stem: `ud-client`, `write_lat-rc-server`.
    pub fn stem(&self, transport: Transport) -> String {
        format!(
            "{}{}-{}",
            file_prefix(self.test),
            transport.name().to_ascii_lowercase(),
            self.role
        )
    }
}

/// The QEMU argument list of a node on the emulated fabric: [`crate::hca::proxy_argv`] (shared
/// guest RAM, one vCPU, the proxy device with the descriptor placeholder, the OVMF settings)
/// with the descriptor number and the qtest/QMP options of `sockets` filled in.
pub fn fabric_argv(command: &QemuCommand, fd: i32, sockets: &SocketDir) -> Vec<String> {
    let mut argv: Vec<String> = crate::hca::proxy_argv(command)
        .into_iter()
        .map(|a| a.replace(FD_PLACEHOLDER, &fd.to_string()))
        .collect();
    argv.extend(qtest_args(sockets, Path::new("/dev/null")));
    argv
}

/// The QEMU command line of a node with the card passed through: the guest `run --vfio`
/// boots, with the function added.
pub fn vfio_command(mut command: QemuCommand, bdf: Bdf) -> QemuCommand {
    command.vfio = vec![bdf];
    command
}

/// Appends the console to the log file up to its last complete line.
struct LogStream {
    file: std::fs::File,
    written: usize,
}

impl LogStream {
    /// Writes what is new; returns it.
    fn update<'a>(&mut self, console: &'a str, all: bool) -> std::io::Result<&'a str> {
        let end = if all {
            console.len()
        } else {
            console.rfind('\n').map_or(0, |i| i + 1)
        };
        if end <= self.written || !console.is_char_boundary(self.written) {
            return Ok("");
        }
        let new = &console[self.written..end];
        self.file.write_all(new.as_bytes())?;
        self.file.flush()?;
        self.written = end;
        Ok(new)
    }
}

/// Runs one node.
pub fn node_command(args: NodeArgs) -> Result<Exit> {
    // Everything the command line decides is checked before anything is built or booted.
    let workspace = crate::host::Workspace::locate();
    let base = args.out.clone().unwrap_or_else(|| {
        workspace
            .root
            .join(format!("out/node-{}", args.role.name()))
    });
    crate::run_dir::check(&base)?;
    let transport = args.transport()?;
    let config = args.config(transport)?;
    crate::kernel_config::check_config(&config)?;
    let guest_args = args.guest();
    if let Some(dir) = &args.fabric {
        let index = args.index.unwrap_or(0);
        let socket = crate::fabric::node_socket(dir, index);
        if !socket.exists() {
            say(&format!(
                "error: no fabric socket {} (start `cargo qemu fabric --nodes {}` first, with \
                 this --socket-dir)",
                socket.display(),
                index + 1
            ));
            return Ok(Exit::Host);
        }
    }
    if let Some(bdf) = args.vfio {
        let memory = u64::from(DEFAULT_MEMORY_MIB) << 20;
        match vfio::check(&HostRoots::system(), bdf, memory) {
            Ok(device) => say(&format!(
                "vfio: {bdf} ({}) in IOMMU group {} is ready",
                device.id, device.group
            )),
            Err(error) => {
                say(&format!("vfio: {bdf}: {error}"));
                return Ok(Exit::Host);
            }
        }
    }
    let qemu = crate::host::qemu_binary(guest_args.qemu.as_deref())?;
    // The boot media live outside the run directory for the run's length.
    let media = crate::prepare::BootMedia::new()?;
    let guest = crate::prepare::GuestBuilder::new(&guest_args, &args.kernel)?.media_in(&media);
    let started = crate::provenance::now_iso();
    let out = crate::run_dir::create(&base)?;
    let stem = args.stem(transport);
    let images = out.join(&stem);
    std::fs::create_dir_all(&images)?;
    let command = guest.command(&config, &images)?;
    let log_path = out.join(format!("{stem}.log"));
    say(&format!(
        "this run's files: {} ({} points to it); console log {}",
        out.display(),
        base.join(crate::run_dir::LATEST).display(),
        log_path.display()
    ));
    say(&format!("config: {}", boot::one_line(&config)));
    let mut log = LogStream {
        file: std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?,
        written: 0,
    };
    let options = RunOptions {
        timeout: Some(Duration::from_secs(args.timeout)),
        echo: Echo::Stdout,
        input: Input::Null,
    };

    // Start QEMU: with the card, or attached to the fabric.
    // From here a signal stops QEMU and removes the socket directory (qemu/src/interrupt.rs).
    let _active = crate::interrupt::Active::enter();
    crate::interrupt::check()?;
    let mut attachment = None;
    let _sockets;
    let mut guest = match (&args.fabric, args.vfio) {
        (Some(dir), _) => {
            let index = args.index.unwrap_or(0);
            let sockets = SocketDir::create(args.role.name())?;
            let (ours, theirs) = proxy_socketpair()?;
            let request = AttachRequest {
                name: args.role.name().to_string(),
                qtest: sockets.qtest(),
                qmp: sockets.qmp(),
                loss: (args.drop_probability > 0.0).then_some((args.drop_probability, args.seed)),
                trace: args.trace,
            };
            let a = Attachment::connect(dir, index, &request, ours.into())?;
            say(&format!(
                "attached to the fabric at {} as node {index} (HCA {})",
                dir.display(),
                a.hca
            ));
            let argv = fabric_argv(&command, theirs.as_raw_fd(), &sockets);
            say(&shell_line(&argv));
            let mut process = Command::new(&argv[0]);
            process.args(&argv[1..]);
            let fd = theirs.as_raw_fd();
            // SAFETY: the closure runs in the forked child before exec and only calls fcntl
            // and prctl, which are async-signal-safe; it touches no memory shared with the
            // parent.
            unsafe {
                process.pre_exec(move || {
                    let flags = libc::fcntl(fd, libc::F_GETFD);
                    if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    die_with_parent()
                });
            }
            let guest = Guest::spawn_process(process, &options)
                .with_context(|| format!("cannot start {}", argv[0]))?;
            drop(theirs);
            attachment = Some(a);
            _sockets = Some(sockets);
            guest
        }
        (None, Some(bdf)) => {
            _sockets = None;
            let command = vfio_command(command, bdf);
            say(&command.shell_line());
            let mut process = command.command();
            // SAFETY: the closure runs in the forked child before exec and only calls prctl,
            // which is async-signal-safe.
            unsafe {
                process.pre_exec(die_with_parent);
            }
            Guest::spawn_process(process, &options)
                .with_context(|| format!("cannot start {}", command.binary.display()))?
        }
        (None, None) => crate::usage!("node: give --vfio BDF or --fabric DIR --index I"),
    };
    let start = Instant::now();
    // Only the device proxy needs the HCA's BARs below 4 GiB; under VFIO they are QEMU's to
    // map anywhere.
    let mut bars = args
        .fabric
        .is_some()
        .then(crate::hca::HighBarWatch::default);
    let exit = loop {
        match guest.poll() {
            Ok(Some(exit)) => break exit,
            Ok(None) => {}
            Err(stopped) => {
                // Stopped by a signal: QEMU is killed; the log keeps what the console showed.
                let _ = log.update(&guest.console(), true);
                return Err(stopped);
            }
        }
        let console = guest.console();
        for line in log.update(&console, false)?.lines() {
            let line = line.trim_end_matches('\r');
            if let Some((bar, address)) = bars.as_mut().and_then(|w| w.line(line)) {
                guest.kill();
                let _ = log.update(&guest.console(), true);
                anyhow::bail!(
                    "the firmware placed the emulated HCA's BAR{bar} at {address:#x}, above \
                     4 GiB, where QEMU's device proxy does not decode it (docs/mpqemu.md, \
                     \"64-bit BARs and OVMF\")"
                );
            }
        }
        if attachment.as_ref().is_some_and(Attachment::fabric_gone) {
            guest.kill();
            let _ = log.update(&guest.console(), true);
            say("FAILED: the fabric stopped (its connection closed); QEMU stopped");
            return Ok(Exit::Host);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let outcome = guest.finish(exit)?;
    log.update(&outcome.console, true)?;
    say(&format!(
        "{} after {:.1} s",
        outcome.exit,
        start.elapsed().as_secs_f64()
    ));
    let mut result = Exit::for_guest(&outcome.exit, true);
    if result != Exit::Success {
        let why = outcome
            .console
            .lines()
            .find(|l| l.starts_with("pingpong: FAIL"))
            .unwrap_or("no pingpong verdict on the console");
        say(&format!("FAILED: {} ({why})", outcome.exit));
    }

    // The model's view of this node's HCA (emulated fabric only).
    let mut traffic: Vec<(u64, u64, sim::Counters)> = Vec::new();
    if let (Some(a), true) = (attachment.as_mut(), args.trace) {
        let path = out.join(format!("{stem}.trace"));
        match a.trace() {
            Ok(trace) => {
                std::fs::write(&path, trace)
                    .with_context(|| format!("writing {}", path.display()))?;
                say(&format!("model trace: {}", path.display()));
            }
            Err(e) => {
                say(&format!("FAILED: no model trace from the fabric: {e:#}"));
                if result == Exit::Success {
                    result = Exit::Host;
                }
            }
        }
    }
    if let Some(a) = attachment.as_mut() {
        match a.report() {
            Ok(report) => {
                say(&format!("model counters: {}", report.counters));
                match size_traffic(&report.sq_switches, &outcome.console) {
                    Ok(t) => traffic = t,
                    Err(why) => say(&format!("no PCIe transactions per size: {why}")),
                }
                say(&format!("model violations: {}", report.violations.len()));
                for v in &report.violations {
                    say(&format!("  violation {v}"));
                }
                if !report.violations.is_empty() {
                    say(&format!(
                        "FAILED: {} model violation(s)",
                        report.violations.len()
                    ));
                    result = Exit::GuestFailed;
                }
            }
            Err(e) => {
                say(&format!("FAILED: no model report from the fabric: {e:#}"));
                if result == Exit::Success {
                    result = Exit::Host;
                }
            }
        }
    }

    if args.test == Benchmark::SrqPingpong {
        // The SRQ ping-pong's own lines, table and files (qemu/src/srq.rs).
        return crate::srq::report(&[outcome.console.as_str()], &out, None, result);
    }
    // The figures: the table, latency.csv/json/svg with provenance.
    let mut results = crate::results::collect(&[outcome.console.as_str()]);
    let mut facts = NodeFacts::from_console(
        &format!("{transport} {}", args.role.name()),
        &outcome.console,
    );
    if facts.config.is_none() {
        // A kernel that does not log its configuration: the one the runner wrote.
        facts.config = Some(boot::one_line(&config));
    }
    let platform = match &args.fabric {
        Some(_) => Platform::Emulated {
            accel: Accel::Tcg.name().to_string(),
            qemu: crate::provenance::qemu_version(&qemu),
        },
        // What the console says: a TCG CPU cannot have driven the card (VFIO needs KVM).
        None if facts.is_tcg() => Platform::Emulated {
            accel: Accel::Tcg.name().to_string(),
            qemu: crate::provenance::qemu_version(&qemu),
        },
        None => Platform::Hardware,
    };
    results.provenance = Some(Provenance::of_this_run(platform, started, vec![facts]));
    for bad in &results.bad_lines {
        say(&format!(
            "FAILED: unreadable result line {}: {}",
            bad.line, bad.reason
        ));
        result = Exit::GuestFailed;
    }
    let lost = results.total_lost();
    if lost > args.loss_allowance() {
        say(&format!(
            "FAILED: {lost} messages lost (more than --max-losses {})",
            args.loss_allowance()
        ));
        result = Exit::GuestFailed;
    }
    if result == Exit::Success && results.records.is_empty() {
        say("FAILED: the kernel finished without a result line");
        result = Exit::GuestFailed;
    }
    results.print_tables();
    if !traffic.is_empty() {
        let node = args.role.name();
        let group = match args.test.test() {
            Some(test) => crate::results::Results::group_name(test, transport),
            None => format!("{} {}", args.test.name(), transport.name()),
        };
        let mut csv = results.comment_lines("# ");
        csv.push_str(&format!(
            "transport,bytes,iterations,node,{}\n",
            PCIE_COLUMNS.join(",")
        ));
        println!("--- model PCIe transactions per iteration ({node}) ---");
        for (bytes, iters, c) in &traffic {
            println!("{group} {bytes} B:");
            println!("  {}", traffic_line(node, c, *iters));
            let values: Vec<String> = pcie_values(c).iter().map(u64::to_string).collect();
            csv.push_str(&format!(
                "{group},{bytes},{iters},{node},{}\n",
                values.join(",")
            ));
        }
        std::fs::write(out.join("pcie.csv"), csv)?;
    }
    let written = results.write_files(&out)?;
    say(&format!(
        "wrote {}, {}, {}{} and the console log {}",
        written.csv.display(),
        written.json.display(),
        written.plots(),
        if traffic.is_empty() { "" } else { ", pcie.csv" },
        log_path.display()
    ));
    if let Some(bw) = &written.bandwidth {
        say(&format!(
            "wrote the bandwidth figures: {}, {}, {}",
            bw.csv.display(),
            bw.json.display(),
            bw.svg.display()
        ));
    }
    Ok(result)
}

/// The model's traffic of each size this node measured, from its HCA's send-queue switches
/// (`sim::SqSwitch`): a size's window opens when the HCA starts running the data QP's send
/// queue (the bench's first message of the size, after the rendezvous QP's barrier) and
/// closes at the next switch (the next size's barrier, or the final Done/DoneAck on the
/// rendezvous QP). The data QP is the one the bench's banner names (` local address: ...
/// QPN ...`); the sizes and iterations are its `ibkern-result` lines, in order. An `Err`
/// says why the windows do not pair with the sizes (e.g. a rendezvous message inside a size
/// after a loss).
pub fn size_traffic(
    switches: &[(u32, [u64; 12])],
    console: &str,
) -> std::result::Result<Vec<(u64, u64, sim::Counters)>, String> {
    let data_qpn = console
        .lines()
        .find_map(|l| {
            let rest = l.trim_start().strip_prefix("local address: ")?;
            let hex = rest.split("QPN ").nth(1)?.split_whitespace().next()?;
            u32::from_str_radix(hex.strip_prefix("0x")?, 16).ok()
        })
        .ok_or("the console names no data QP (` local address: ... QPN ...`)")?;
    let sizes: Vec<(u64, u64)> = console
        .lines()
        .filter_map(crate::pingpong::result_line)
        .map(|(_, _, bytes, iterations, _)| (bytes, iterations))
        .collect();
    let windows: Vec<sim::Counters> = switches
        .windows(2)
        .filter(|w| w[0].0 == data_qpn)
        .map(|w| {
            diff_counters(
                &crate::fabric::counters_from_pcie(w[1].1),
                &crate::fabric::counters_from_pcie(w[0].1),
            )
        })
        .collect();
    if windows.len() != sizes.len() {
        return Err(format!(
            "{} run(s) of the data QP {data_qpn:#x} for {} size(s)",
            windows.len(),
            sizes.len()
        ));
    }
    Ok(sizes
        .into_iter()
        .zip(windows)
        .map(|((bytes, iters), c)| (bytes, iters, c))
        .collect())
}

/// Makes the kernel kill this child (QEMU) if the runner dies without stopping it (SIGKILL,
/// a crash): a QEMU whose proxy socket or console reader is gone would only hang. For
/// `pre_exec`: calls only prctl.
fn die_with_parent() -> std::io::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and changes only this process's
    // own attribute.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn shell_line(argv: &[String]) -> String {
    argv.iter()
        .map(|w| crate::command::shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Subcommands};
    use crate::command::BootMedium;
    use crate::pingpong::tests::checked;
    use clap::Parser;

    fn parse(v: &[&str]) -> Result<NodeArgs, clap::Error> {
        let mut argv = vec!["cargo qemu", "node"];
        argv.extend_from_slice(v);
        Cli::try_parse_from(argv).map(|c| match c.command {
            Subcommands::Node(a) => a,
            _ => panic!("not node"),
        })
    }

    #[test]
    fn command_line_needs_one_hca_and_a_role() {
        let a = parse(&[
            "--vfio", "03:00.0", "--role", "client", "-c", "ud", "-s", "64",
        ])
        .unwrap();
        assert_eq!(a.vfio, Some("0000:03:00.0".parse().unwrap()));
        assert_eq!(a.guest().accel, Accel::Kvm);
        assert_eq!(a.transport().unwrap(), Transport::Ud);
        assert_eq!(a.stem(Transport::Ud), "ud-client");
        let a = parse(&["--fabric", "fabric", "--index", "1", "--role", "server"]).unwrap();
        assert_eq!(a.guest().accel, Accel::Tcg);
        assert_eq!((a.index, a.iters, a.timeout), (Some(1), 1000, 600));
        for bad in [
            &["--role", "server"][..],
            &["--vfio", "03:00.0"],
            &[
                "--vfio", "03:00.0", "--fabric", "fabric", "--index", "0", "--role", "server",
            ],
            &["--fabric", "fabric", "--role", "server"],
            &["--index", "0", "--vfio", "03:00.0", "--role", "server"],
            &["--vfio", "03:00.0", "--role", "peer"],
            &["--vfio", "03:00.0", "--role", "client", "-a", "-s", "64"],
            &["--vfio", "03:00.0", "--role", "client", "-n", "4"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn configurations_are_checked_as_the_kernel_checks_them() {
        let a = parse(&[
            "--fabric",
            "/f",
            "--index",
            "0",
            "--role",
            "client",
            "-c",
            "UD",
            "-s",
            "64",
            "-n",
            "5",
            "--peer-lid",
            "2",
        ])
        .unwrap();
        let c = checked(a.config(a.transport().unwrap()).unwrap());
        assert_eq!(c.mode, ibconfig::Mode::Pingpong);
        assert_eq!(c.role, Some(ibconfig::Role::Client));
        assert_eq!(c.bench.peer_lid, Some(2));
        assert_eq!(c.bench.sizes, ibconfig::Sizes::Single(64));
        assert_eq!(
            c.bench.wait_timeout_ns, 2_000_000_000,
            "emulated wait bound"
        );
        // Under VFIO the bench keeps its hardware wait bound.
        let v = parse(&["--vfio", "03:00.0", "--role", "server", "-s", "64"]).unwrap();
        let c = checked(v.config(Transport::Ud).unwrap());
        assert_eq!(
            c.bench.wait_timeout_ns,
            ibconfig::bench::PingPongConfig::default().wait_timeout_ns
        );
        // Refusals are usage errors (exit 2), before anything is built.
        let usage = |argv: &[&str]| {
            let a = parse(argv).unwrap();
            let e = a
                .transport()
                .and_then(|t| a.config(t))
                .and_then(|c| crate::kernel_config::check_config(&c))
                .unwrap_err();
            assert!(e.is::<crate::Usage>(), "{argv:?}: {e:#}");
            e.to_string()
        };
        let base = ["--vfio", "03:00.0", "--role", "client"];
        let with = |extra: &[&'static str]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            v
        };
        assert!(usage(&with(&["-c", "UD,UC"])).contains("one transport"));
        assert!(usage(&with(&["-c", "RD"])).contains("unknown transport"));
        assert!(usage(&with(&["--test", "write_lat", "-c", "UD"])).contains("SEND verb"));
        assert!(usage(&with(&["-c", "UD", "-s", "4096"])).contains("path MTU"));
        assert!(usage(&with(&["--peer-lid", "0"])).starts_with("--peer-lid 0:"));
        assert!(usage(&with(&["--set", "mode=nope"])).starts_with("--set mode=nope"));
        assert!(usage(&with(&["-e", "--irq", "poll"])).contains("completion=event"));
    }

    #[test]
    fn shared_pingpong_flags_reach_the_node() {
        let a = parse(&[
            "--fabric",
            "/f",
            "--index",
            "1",
            "--role",
            "client",
            "-e",
            "--drop-probability",
            "0.01",
            "--seed",
            "7",
            "--trace",
        ])
        .unwrap();
        assert!(a.events && a.trace);
        assert_eq!((a.drop_probability, a.seed), (0.01, 7));
        let c = checked(a.config(a.transport().unwrap()).unwrap());
        assert_eq!(c.bench.completion, ibconfig::bench::Completion::Event);
        // The same keys as one `cargo qemu pingpong` node with the same flags.
        let pp = crate::cli::Cli::try_parse_from([
            "cargo qemu",
            "pingpong",
            "-c",
            "UD",
            "-e",
            "--drop-probability",
            "0.01",
        ])
        .unwrap();
        let Subcommands::Pingpong(pp) = pp.command else {
            panic!("not pingpong")
        };
        assert_eq!(
            crate::pingpong::node_config(&pp, Transport::Ud, ibconfig::Role::Client).unwrap(),
            a.config(Transport::Ud).unwrap()
        );
        // Loss and trace are the emulated fabric's: refused with the card.
        for flag in [
            &["--drop-probability", "0.1"][..],
            &["--seed", "2"],
            &["--trace"],
        ] {
            let mut argv = vec!["--vfio", "03:00.0", "--role", "client"];
            argv.extend_from_slice(flag);
            assert!(parse(&argv).is_err(), "{flag:?}");
        }
    }

    #[test]
    fn per_size_traffic_follows_the_data_qp_runs() {
        let line = crate::results::test_lines::latency;
        let console = format!(
            " local address: LID 0x04 QPN 0x0049 PSN 0x000001
 remote address: LID 0x02 QPN 0x0048 PSN 0x000002
{}
{}
",
            line(2, 5),
            line(4, 5)
        );
        // packets_sent (column 10) at each switch: bring-up QP 0x40, then rendezvous 0x48,
        // data 0x49, rendezvous, data, rendezvous (Done).
        let at = |qpn: u32, sent: u64| {
            let mut v = [0u64; 12];
            v[10] = sent;
            v[0] = 3 * sent;
            (qpn, v)
        };
        let switches = [
            at(0x40, 0),
            at(0x48, 2),
            at(0x49, 4),
            at(0x48, 9),
            at(0x49, 11),
            at(0x48, 17),
        ];
        let t = size_traffic(&switches, &console).unwrap();
        let got: Vec<(u64, u64, u64, u64)> = t
            .iter()
            .map(|(b, i, c)| (*b, *i, c.packets_sent, c.mmio_writes))
            .collect();
        assert_eq!(got, [(2, 5, 5, 15), (4, 5, 6, 18)]);
        // A run without its closing switch, or an extra one, does not pair: no figures.
        let e = size_traffic(&switches[..5], &console).unwrap_err();
        assert!(
            e.contains("1 run(s) of the data QP 0x49 for 2 size(s)"),
            "{e}"
        );
        assert!(size_traffic(&switches, "no banner").is_err());
    }

    #[test]
    fn fabric_guests_get_the_proxy_and_qtest_vfio_guests_the_card() {
        let command = QemuCommand::new(
            BootMedium::Bios {
                image: "b.img".into(),
            },
            Accel::Tcg,
        );
        let sockets = SocketDir::create("nodetest").unwrap();
        let argv = fabric_argv(&command, 7, &sockets);
        let joined = argv.join(" ");
        assert!(
            joined.contains("-device x-pci-proxy-dev,id=hca0,fd=7"),
            "{joined}"
        );
        assert!(joined.contains("-smp 1"), "{joined}");
        assert!(joined.contains("share=on"), "{joined}");
        assert!(
            joined.contains(&format!(
                "-qtest unix:{},server=on,wait=off",
                sockets.qtest().display()
            )),
            "{joined}"
        );
        assert!(!joined.contains(FD_PLACEHOLDER), "{joined}");
        assert!(!joined.contains("vfio-pci"), "{joined}");
        let kvm = QemuCommand::new(
            BootMedium::Bios {
                image: "b.img".into(),
            },
            Accel::Kvm,
        );
        let v = vfio_command(kvm, "0000:03:00.0".parse().unwrap());
        let line = v.shell_line();
        assert!(
            line.contains("-device vfio-pci,host=0000:03:00.0"),
            "{line}"
        );
        assert!(line.contains("-accel kvm"), "{line}");
        assert!(!line.contains("x-pci-proxy-dev"), "{line}");
        assert!(!line.contains("memory-backend-memfd"), "{line}");
    }
}
