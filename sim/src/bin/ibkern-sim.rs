//! `ibkern-sim`: serves emulated ConnectX-3 HCAs (PCI 15b3:1003) to QEMU guests through QEMU's
//! multi-process device proxy. It starts every QEMU itself, plugs one HCA per guest into one
//! fabric (so the guests' HCAs meet on the emulated switch), serves them until every QEMU has
//! exited, then prints per-HCA counters and contract violations.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use sim::mpqemu::{
    GuestHandle, GuestIrq, GuestSpec, GuestStatus, Server, ServerOptions, FD_PLACEHOLDER,
};
use sim::{Fabric, FabricConfig};

/// Token replaced by the guest's index (0, 1, ...) in every QEMU argument.
const GUEST_PLACEHOLDER: &str = "@GUEST@";
/// Separates the command lines of different guests.
const GUEST_SEPARATOR: &str = "::";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum IrqMode {
    /// QEMU under TCG: INTx and MSI/MSI-X through QEMU's qtest socket (the server adds the
    /// -qtest, -qtest-log and -qmp options itself).
    Qtest,
    /// QEMU under KVM: INTx through irqfd; MSI/MSI-X cannot be delivered.
    Irqfd,
    /// Count interrupts, deliver none.
    None,
}

/// Serve emulated ConnectX-3 HCAs to QEMU guests (QEMU multi-process device proxy).
///
/// Each guest's QEMU command line must contain `-device x-pci-proxy-dev,id=hca0,fd=@FD@`
/// and, for DMA to work, a shared memory backend:
/// `-machine q35,memory-backend=mem -object memory-backend-memfd,id=mem,size=512M,share=on`.
/// Guests must run with `-smp 1`. Exit status: 0 when every QEMU exited with 0 over a clean
/// connection, 1 otherwise, 3 with --fail-on-violation when an HCA recorded a violation.
#[derive(Debug, Parser)]
#[command(name = "ibkern-sim", version, after_help = EXAMPLES)]
struct Cli {
    /// Start N guests from one command line (tell them apart with @GUEST@, replaced by 0..N-1).
    #[arg(short = 'n', long, default_value_t = 1, value_name = "N")]
    guests: usize,

    /// How interrupts reach the guests.
    #[arg(long, value_enum, default_value_t = IrqMode::Qtest)]
    irq: IrqMode,

    /// Drive this IOAPIC input for INTx instead of the interrupt line (config 0x3c) the guest's
    /// firmware programmed (qtest only).
    #[arg(long, value_name = "GSI", value_parser = clap::value_parser!(u32).range(0..24))]
    intx_gsi: Option<u32>,

    /// Device profile of each guest's HCA, comma-separated in guest order, the last one
    /// repeating: cx3-fdr, cx3-fdr-2p, cx3pro-fdr or reduced (sim/profiles; an unknown name
    /// is a usage error that lists them).
    #[arg(long, value_name = "NAME[,NAME]", value_delimiter = ',',
          default_value = sim::profile::DEFAULT_PROFILE, value_parser = parse_profile)]
    profile: Vec<sim::DeviceProfile>,

    /// Turn the fabric's built-in subnet manager off (ports stay INIT until an SM configures them).
    #[arg(long)]
    no_sm: bool,

    /// Cable two HCAs back to back (no switch, no fabric SM): ports come up INIT once both
    /// ends are enabled and only an SM running on a node (over QP0) brings them ACTIVE.
    #[arg(long)]
    back_to_back: bool,

    /// Seed of the fabric's fault-injection generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Probability in [0, 1] that the switch drops a data packet.
    #[arg(long, default_value_t = 0.0, value_name = "P")]
    drop_probability: f64,

    /// Interval of the fabric's timer, in microseconds.
    #[arg(long, default_value_t = 1000, value_name = "US")]
    poll_us: u64,

    /// Kill every guest after this many seconds (0: no limit).
    #[arg(long, default_value_t = 0, value_name = "SECS")]
    timeout: u64,

    /// QEMU's qtest log (every interrupt command sent).
    #[arg(long, default_value = "/dev/null", value_name = "FILE")]
    qtest_log: PathBuf,

    /// Write the final report here instead of stderr.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,

    /// Record each HCA's behaviour trace (every command, context field, WQE shape and
    /// doorbell pattern; docs/model.md "Behaviour trace") and write it to DIR/hcaN.trace
    /// when the guests have ended.
    #[arg(long, value_name = "DIR")]
    trace: Option<PathBuf>,

    /// Exit with status 3 if any HCA recorded a contract violation.
    #[arg(long)]
    fail_on_violation: bool,

    /// More log output (-v: info, -vv: debug, -vvv: trace).
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,

    /// QEMU command line(s), program first, after `--`. Separate several guests with a lone `::`.
    #[arg(last = true, required = true, value_name = "QEMU")]
    qemu: Vec<String>,
}

const EXAMPLES: &str = "Examples:
  Two guests on one fabric, consoles in files:
    ibkern-sim -n 2 -- qemu-system-x86_64 -accel tcg -machine q35,memory-backend=mem -m 512M \\
      -object memory-backend-memfd,id=mem,size=512M,share=on -smp 1 -display none \\
      -serial file:console-@GUEST@.log -drive format=raw,file=ibkern.img \\
      -device x-pci-proxy-dev,id=hca0,fd=@FD@
  Different command lines per guest:  ibkern-sim -- qemu-system-x86_64 ...A... :: qemu-system-x86_64 ...B...";

fn parse_profile(name: &str) -> Result<sim::DeviceProfile, String> {
    sim::DeviceProfile::named(name).map_err(|e| e.to_string())
}

/// Logs to stderr; filtering is done by `log::set_max_level`.
struct StderrLogger;

static LOGGER: StderrLogger = StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            eprintln!("ibkern-sim: {} {}: {}", r.level(), r.target(), r.args());
        }
    }

    fn flush(&self) {}
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Splits the trailing arguments into one command line per guest.
fn guest_commands(cli: &Cli) -> Result<Vec<Vec<String>>, String> {
    let lines: Vec<Vec<String>> = cli
        .qemu
        .split(|a| a == GUEST_SEPARATOR)
        .map(|s| s.to_vec())
        .collect();
    if lines.iter().any(|l| l.is_empty()) {
        return Err(format!(
            "empty QEMU command line around `{GUEST_SEPARATOR}`"
        ));
    }
    let lines = match (lines.len(), cli.guests) {
        (_, 0) => return Err("--guests must be at least 1".into()),
        (1, n) => vec![lines[0].clone(); n],
        (k, 1) => lines.into_iter().take(k).collect(),
        (k, n) => {
            return Err(format!(
                "{k} command lines given with --guests {n}: use one or the other"
            ))
        }
    };
    let mut out = Vec::new();
    for (i, line) in lines.into_iter().enumerate() {
        if !line.iter().any(|a| a.contains(FD_PLACEHOLDER)) {
            return Err(format!(
                "guest {i}: no {FD_PLACEHOLDER} in its QEMU command line"
            ));
        }
        out.push(
            line.iter()
                .map(|a| a.replace(GUEST_PLACEHOLDER, &i.to_string()))
                .collect(),
        );
    }
    Ok(out)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => log::LevelFilter::Warn,
        1 => log::LevelFilter::Info,
        2 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ibkern-sim: error: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: &Cli) -> Result<ExitCode, String> {
    let commands = guest_commands(cli)?;
    if !(0.0..=1.0).contains(&cli.drop_probability) {
        return Err(format!(
            "--drop-probability {} is not in [0, 1]",
            cli.drop_probability
        ));
    }
    let mut config = FabricConfig {
        subnet_manager: !cli.no_sm,
        topology: if cli.back_to_back {
            sim::Topology::BackToBack
        } else {
            sim::Topology::Switch
        },
        seed: cli.seed,
        trace: cli.trace.is_some(),
        ..FabricConfig::default()
    };
    if let Some(dir) = &cli.trace {
        std::fs::create_dir_all(dir).map_err(|e| format!("--trace {}: {e}", dir.display()))?;
    }
    config.faults.drop_probability = cli.drop_probability;
    let options = ServerOptions {
        poll_interval: Duration::from_micros(cli.poll_us),
        qtest_log: cli.qtest_log.clone(),
        ..ServerOptions::default()
    };
    let server = Server::new(Fabric::new(config), options)
        .map_err(|e| format!("cannot start the server: {e}"))?;
    // SAFETY: installs a handler that only stores to an atomic (async-signal-safe).
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }

    let irq = match cli.irq {
        IrqMode::Qtest => GuestIrq::Qtest,
        IrqMode::Irqfd => GuestIrq::Irqfd,
        IrqMode::None => GuestIrq::None,
    };
    let mut guests: Vec<(GuestHandle, Option<GuestStatus>)> = Vec::new();
    for (i, argv) in commands.into_iter().enumerate() {
        let mut spec = GuestSpec::new(format!("guest{i}"), argv);
        spec.profile = cli
            .profile
            .get(i)
            .or(cli.profile.last())
            .cloned()
            .unwrap_or_default();
        spec.irq = irq;
        spec.intx_gsi = cli.intx_gsi;
        let g = server
            .spawn_guest(spec)
            .map_err(|e| format!("guest {i}: cannot start QEMU: {e}"))?;
        log::info!(target: "ibkern-sim", "guest {i}: QEMU pid {} serves hca {}", g.pid(), g.hca().0);
        guests.push((g, None));
    }

    let deadline = (cli.timeout > 0).then(|| Instant::now() + Duration::from_secs(cli.timeout));
    let mut timed_out = false;
    while guests.iter().any(|(_, s)| s.is_none()) {
        let stop =
            INTERRUPTED.load(Ordering::SeqCst) || deadline.is_some_and(|d| Instant::now() >= d);
        if stop && deadline.is_some_and(|d| Instant::now() >= d) {
            timed_out = true;
        }
        for (g, status) in guests.iter_mut().filter(|(_, s)| s.is_none()) {
            let result = if stop {
                g.kill().map(Some)
            } else {
                g.try_wait()
            };
            match result {
                Ok(s) => *status = s,
                Err(e) => return Err(format!("waiting for QEMU {}: {e}", g.pid())),
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }

    let mut out: Box<dyn Write> = match &cli.report {
        Some(p) => Box::new(std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?),
        None => Box::new(std::io::stderr()),
    };
    let mut ok = !timed_out && !INTERRUPTED.load(Ordering::SeqCst);
    let mut violations = 0usize;
    for (i, (g, status)) in guests.iter().enumerate() {
        let Some(status) = status else { continue };
        let fe = g.guest().frontend_counters();
        let irq = g.guest().irq_stats();
        let v = server.violations(g.hca());
        violations += v.len();
        ok &= status.exit.success() && status.connection.is_clean();
        let _ = writeln!(
            out,
            "guest {i} (hca {}): qemu {}, connection: {}",
            g.hca().0,
            status.exit,
            status.connection
        );
        let _ = writeln!(
            out,
            "  front end: cfg r/w {}/{}, bar r/w {}/{} (unclaimed {}), sysmem syncs {}, resets {}",
            fe.cfg_reads,
            fe.cfg_writes,
            fe.bar_reads,
            fe.bar_writes,
            fe.unclaimed,
            fe.sysmem_syncs,
            fe.resets
        );
        let _ = writeln!(
            out,
            "  interrupts: intx up/down {}/{}, msi {}, undeliverable {}, qtest sent/ok/fail {}/{}/{}, irqfd {}",
            irq.intx_asserts,
            irq.intx_deasserts,
            irq.msi,
            irq.undeliverable,
            irq.qtest_sent,
            irq.qtest_ok,
            irq.qtest_fail,
            irq.irqfd_signals
        );
        let _ = writeln!(out, "  model: {}", server.counters(g.hca()));
        let _ = writeln!(out, "  violations: {}", v.len());
        for x in &v {
            let _ = writeln!(out, "    {x}");
        }
        if let Some(dir) = &cli.trace {
            let path = dir.join(format!("hca{}.trace", g.hca().0));
            let text = server.with_fabric(|f| f.trace(g.hca()));
            match std::fs::write(&path, &text) {
                Ok(()) => {
                    let _ = writeln!(
                        out,
                        "  trace: {} ({} observations)",
                        path.display(),
                        text.lines().count()
                    );
                }
                Err(e) => {
                    let _ = writeln!(out, "  trace: cannot write {}: {e}", path.display());
                    ok = false;
                }
            }
        }
    }
    if timed_out {
        let _ = writeln!(out, "timeout: guests killed after {} s", cli.timeout);
    }
    Ok(if cli.fail_on_violation && violations > 0 {
        ExitCode::from(3)
    } else if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
