//! Guests with the emulated ConnectX-3: one `sim::mpqemu::Server` (one fabric) serving one
//! or more QEMU guests, their consoles streamed line by line, the model's counters and
//! violations read at the end (and at console markers, for the ping-pong runs).

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use sim::mpqemu::{GuestHandle, GuestIrq, GuestSpec, Server, ServerOptions, FD_PLACEHOLDER};
use sim::{Counters, Fabric, FabricConfig, Violation};

use crate::command::QemuCommand;
use crate::guest::GuestExit;

/// One guest to boot with an HCA.
pub struct NodeSpec {
    /// Label (console prefix `name: `).
    pub name: String,
    /// The guest's QEMU command (the proxy device is added here).
    pub command: QemuCommand,
    /// The emulated HCA's profile.
    pub profile: sim::DeviceProfile,
}

/// The QEMU argument list for `spawn_guest`: program first, the proxy device with the
/// server's descriptor placeholder.
pub fn proxy_argv(command: &QemuCommand) -> Vec<String> {
    let mut command = command.clone();
    command.shared_memory = true;
    command.smp = Some(1);
    command.extra.push("-device".into());
    command
        .extra
        .push(format!("x-pci-proxy-dev,id=hca0,fd={FD_PLACEHOLDER}").into());
    std::iter::once(command.binary.to_string_lossy().into_owned())
        .chain(
            command
                .args()
                .iter()
                .map(|a| a.to_string_lossy().into_owned()),
        )
        .collect()
}

/// The emulated HCA needs SeaBIOS: OVMF (uefi, pxe) assigns the HCA's 64-bit BARs above
/// 4 GiB, but QEMU registers a proxied device's BARs as 32-bit (docs/mpqemu.md), so the
/// device would never see the accesses (seen: QUERY_FW times out). `opt/ovmf/X-PciMmio64Mb=0`
/// did not change the placement with the installed OVMF 2022.11.
pub fn check_firmware(guest: &crate::cli::GuestArgs) -> Result<()> {
    if guest.firmware.needs_ovmf() {
        anyhow::bail!(
            "the emulated HCA needs --firmware bios: OVMF places its 64-bit BARs above 4 GiB, \
             where QEMU's device proxy does not decode them"
        );
    }
    Ok(())
}

/// How one node ended, with its console and the model's view of its HCA.
#[derive(Debug)]
pub struct NodeOutcome {
    pub name: String,
    pub exit: GuestExit,
    pub console: String,
    pub counters: Counters,
    pub violations: Vec<Violation>,
}

/// Called for every console line as it arrives: (node index, line, server).
pub type LineHook<'a> = dyn FnMut(usize, &str, &Server, &[sim::HcaId]) + 'a;

struct Node {
    name: String,
    handle: GuestHandle,
    console: String,
    exit: Option<GuestExit>,
}

/// Boots every node on one fabric (subnet manager on), streams their consoles to stdout
/// prefixed `name: ` (or unprefixed with one node), calls `hook` per line, and waits until
/// all have exited or `timeout` passes (then the rest are killed).
pub fn run_nodes(
    specs: Vec<NodeSpec>,
    timeout: Duration,
    hook: &mut LineHook<'_>,
) -> Result<Vec<NodeOutcome>> {
    run_nodes_on(FabricConfig::default(), specs, timeout, hook)
}

/// [`run_nodes`] on a fabric configured by the caller (e.g. two nodes back to back).
pub fn run_nodes_on(
    fabric: FabricConfig,
    specs: Vec<NodeSpec>,
    timeout: Duration,
    hook: &mut LineHook<'_>,
) -> Result<Vec<NodeOutcome>> {
    run_nodes_staged(fabric, specs, None, timeout, hook)
}

/// Builds a node from what the nodes already running printed: called with (node index,
/// console line) for every line until it returns `Some`. `Some(Err)` ends the run (every
/// QEMU killed) with that error.
pub type SpawnHook<'a> = dyn FnMut(usize, &str) -> Option<Result<NodeSpec>> + 'a;

/// A node booted later, on the same fabric, once the others' consoles say so (e.g. a client
/// configured with the QPN a server printed).
pub struct LaterNode<'a> {
    pub spawn: Box<SpawnHook<'a>>,
    /// If it has not been spawned this long after the start, every node is killed and the
    /// run ends without it (the outcomes then hold only the first nodes).
    pub within: Duration,
}

/// [`run_nodes_on`] with an optional node booted later: its HCA joins the fabric when
/// `later.spawn` returns it, after the first nodes' HCAs (so it gets the next LID). The
/// run ends when every node has exited (before the later node was spawned: without it), or
/// at `timeout` from the start.
pub fn run_nodes_staged(
    fabric: FabricConfig,
    specs: Vec<NodeSpec>,
    mut later: Option<LaterNode<'_>>,
    timeout: Duration,
    hook: &mut LineHook<'_>,
) -> Result<Vec<NodeOutcome>> {
    let _active = crate::interrupt::Active::enter();
    crate::interrupt::check()?;
    let server = Server::new(Fabric::new(fabric), ServerOptions::default())
        .context("starting the mpqemu server")?;
    let (tx, rx) = mpsc::channel::<(usize, Option<String>)>();
    let mut nodes = Vec::new();
    let prefixed = specs.len() + usize::from(later.is_some()) > 1;
    for spec in specs {
        let node = spawn_node(&server, spec, nodes.len(), &tx)?;
        nodes.push(node);
    }
    let mut hcas: Vec<sim::HcaId> = nodes.iter().map(|n| n.handle.hca()).collect();
    let start = Instant::now();
    let mut open_streams = nodes.len();
    let mut stdout = std::io::stdout();
    let mut emit = |nodes: &mut Vec<Node>, index: usize, line: &str| {
        let line = line.trim_end_matches('\r');
        let node: &mut Node = &mut nodes[index];
        node.console.push_str(line);
        node.console.push('\n');
        if prefixed {
            let _ = writeln!(stdout, "{}: {line}", node.name);
        } else {
            let _ = writeln!(stdout, "{line}");
        }
        let _ = stdout.flush();
    };
    loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok((index, Some(line))) => {
                emit(&mut nodes, index, &line);
                let line = line.trim_end_matches('\r');
                hook(index, line, &server, &hcas);
                let wanted = later.as_mut().and_then(|l| (l.spawn)(index, line));
                if let Some(spec) = wanted {
                    later = None;
                    let node = spawn_node(&server, spec?, nodes.len(), &tx)?;
                    hcas.push(node.handle.hca());
                    nodes.push(node);
                    open_streams += 1;
                }
            }
            Ok((_, None)) => open_streams = open_streams.saturating_sub(1),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => open_streams = 0,
        }
        if let Err(interrupted) = crate::interrupt::check() {
            // Dropping the nodes kills and reaps every QEMU and removes its socket
            // directory; dropping the server stops the model.
            for node in nodes.iter_mut().filter(|n| n.exit.is_none()) {
                let _ = node.handle.kill();
            }
            return Err(interrupted.into());
        }
        for node in nodes.iter_mut().filter(|n| n.exit.is_none()) {
            if let Some(status) = node.handle.try_wait()? {
                node.exit = Some(GuestExit::from_status(status.exit));
            }
        }
        if nodes.iter().all(|n| n.exit.is_some()) {
            break;
        }
        let late = later.as_ref().is_some_and(|l| start.elapsed() > l.within);
        if late || start.elapsed() > timeout {
            let limit = if late {
                later.as_ref().map_or(timeout, |l| l.within)
            } else {
                timeout
            };
            for node in nodes.iter_mut().filter(|n| n.exit.is_none()) {
                let _ = node.handle.kill();
                node.exit = Some(GuestExit::TimedOut(limit));
            }
            break;
        }
    }
    drop(tx);
    // Drain what the consoles still hold (bounded).
    let drain_end = Instant::now() + Duration::from_secs(2);
    while open_streams > 0 && Instant::now() < drain_end {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok((index, Some(line))) => {
                emit(&mut nodes, index, &line);
                hook(index, line.trim_end_matches('\r'), &server, &hcas);
            }
            Ok((_, None)) => open_streams -= 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let outcomes = nodes
        .into_iter()
        .map(|n| {
            let hca = n.handle.hca();
            NodeOutcome {
                counters: server.counters(hca),
                violations: server.violations(hca),
                exit: n.exit.unwrap_or(GuestExit::Status(-1)),
                console: n.console,
                name: n.name,
            }
        })
        .collect();
    Ok(outcomes)
}

/// Starts one guest on `server`, its console lines sent to `tx` as node `index`.
fn spawn_node(
    server: &Server,
    spec: NodeSpec,
    index: usize,
    tx: &mpsc::Sender<(usize, Option<String>)>,
) -> Result<Node> {
    let argv = proxy_argv(&spec.command);
    let mut guest = GuestSpec::new(spec.name.clone(), argv);
    guest.profile = spec.profile;
    guest.irq = GuestIrq::Qtest;
    guest.stdout = Stdio::piped();
    guest.stderr = Stdio::piped();
    let mut handle = server
        .spawn_guest(guest)
        .with_context(|| format!("starting QEMU for {}", spec.name))?;
    let stdout = handle.child_mut().stdout.take();
    let stderr = handle.child_mut().stderr.take();
    if let Some(out) = stdout {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                match line {
                    Ok(l) => {
                        if tx.send((index, Some(l))).is_err() {
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
            let _ = tx.send((index, None));
        });
    }
    if let Some(err) = stderr {
        let name = spec.name.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(|l| l.ok()) {
                eprintln!("ibkern-qemu: {name}: qemu: {line}");
            }
        });
    }
    Ok(Node {
        name: spec.name,
        handle,
        console: String::new(),
        exit: None,
    })
}

/// The model's report for one node, as the runner prints it.
pub fn report_lines(o: &NodeOutcome) -> Vec<String> {
    let mut lines = vec![
        format!("{}: model counters: {}", o.name, o.counters),
        format!("{}: model violations: {}", o.name, o.violations.len()),
    ];
    for v in &o.violations {
        lines.push(format!("{}:   violation {v}", o.name));
    }
    lines
}

/// Interrupt delivery asked of the kernel (`hca_irq=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum IrqChoice {
    Msix,
    Intx,
    Poll,
}

impl IrqChoice {
    pub fn name(self) -> &'static str {
        match self {
            IrqChoice::Msix => "msix",
            IrqChoice::Intx => "intx",
            IrqChoice::Poll => "poll",
        }
    }
}

/// `cargo qemu hca`.
#[derive(Debug, clap::Args)]
pub struct HcaArgs {
    #[command(flatten)]
    pub guest: crate::cli::GuestArgs,
    /// How the kernel takes the HCA's interrupts: MSI-X (the device's real mode, INTx as
    /// the driver's fallback), INTx only, or polling.
    #[arg(long, value_enum, default_value = "msix")]
    pub irq: IrqChoice,
    /// Kill QEMU and fail if the kernel has not finished after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub timeout: u64,
    #[command(flatten)]
    pub set: crate::cli::SetArgs,
    /// Directory for the images and config of this run [default: target/ibkern/hca].
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub kernel: crate::cli::KernelArgs,
    /// PCI device id the emulated HCA reports (e.g. 0x1004, the SR-IOV VF, to see the
    /// kernel refuse it).
    #[arg(long, value_name = "ID", default_value = "0x1003", value_parser = parse_device_id)]
    pub device_id: u16,
    /// Ports the emulated HCA has (1 or 2); with 2, `--set ib_port=2` makes the kernel use
    /// (and wait for) the second one.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u8).range(1..=2))]
    pub ports: u8,
}

fn parse_device_id(s: &str) -> Result<u16, String> {
    let hex = s.strip_prefix("0x").unwrap_or(s);
    u16::from_str_radix(hex, 16).map_err(|_| format!("{s:?} is not a 16-bit hex id"))
}

/// Boots `mode=hca` with the emulated HCA attached; success only if the kernel reports
/// success and the model recorded no violation.
pub fn hca_command(args: HcaArgs) -> Result<crate::Exit> {
    check_firmware(&args.guest)?;
    let workspace = crate::host::Workspace::locate();
    let mut config = boot::Config::new();
    config.set("mode", "hca")?;
    config.set("hca_irq", args.irq.name())?;
    for assignment in &args.set.set {
        config
            .apply(assignment)
            .with_context(|| format!("--set {assignment}"))?;
    }
    let out = args.out.unwrap_or_else(|| workspace.work_dir("hca"));
    let command = crate::cli::prepare_guest(&args.guest, &args.kernel, &config, &out)?;
    eprintln!(
        "ibkern-qemu: {}",
        proxy_argv(&command)
            .iter()
            .map(|w| crate::command::shell_quote(w))
            .collect::<Vec<_>>()
            .join(" ")
    );
    eprintln!(
        "ibkern-qemu: config: {}",
        config.to_ramdisk().trim_end().replace('\n', " ")
    );
    let start = Instant::now();
    let outcomes = run_nodes(
        vec![NodeSpec {
            name: "node0".into(),
            command,
            profile: sim::DeviceProfile {
                device_id: args.device_id,
                num_ports: args.ports,
                ..sim::DeviceProfile::default()
            },
        }],
        Duration::from_secs(args.timeout),
        &mut |_, _, _, _| {},
    )?;
    let o = &outcomes[0];
    for line in report_lines(o) {
        eprintln!("ibkern-qemu: {line}");
    }
    let exit = crate::Exit::for_guest(&o.exit, true);
    eprintln!(
        "ibkern-qemu: {} after {:.1} s",
        o.exit,
        start.elapsed().as_secs_f64()
    );
    if !o.violations.is_empty() {
        eprintln!(
            "ibkern-qemu: FAILED: the model recorded {} contract violation(s)",
            o.violations.len()
        );
        return Ok(if exit == crate::Exit::Success {
            crate::Exit::GuestFailed
        } else {
            exit
        });
    }
    Ok(exit)
}
