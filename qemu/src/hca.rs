//! Guests with the emulated ConnectX-3: one `sim::mpqemu::Server` (one fabric) serving one
//! or more QEMU guests, their consoles streamed line by line, the model's counters and
//! violations read at the end (and at console markers, for the ping-pong runs).

use std::fs::File;
use std::io::{BufRead, BufReader, LineWriter, Write};
use std::path::PathBuf;
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
    /// A file the console is written to line by line as it streams (created, or emptied,
    /// when the guest starts), so a run stopped by a signal or a crash keeps it.
    pub console_log: Option<PathBuf>,
}

/// The QEMU argument list for `spawn_guest`: program first, the proxy device with the
/// server's descriptor placeholder, and under OVMF the settings of [`keep_bars_below_4g`].
pub fn proxy_argv(command: &QemuCommand) -> Vec<String> {
    let mut command = command.clone();
    command.shared_memory = true;
    command.smp = Some(1);
    if command.boot.firmware().needs_ovmf() {
        keep_bars_below_4g(&mut command);
    }
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

/// Physical address width given to an OVMF guest with the HCA: one OVMF does not trust
/// (docs/mpqemu.md, "64-bit BARs and OVMF").
pub const OVMF_PHYS_BITS: u32 = 38;

/// Makes OVMF place the HCA's 64-bit BARs below 4 GiB, the only place QEMU's device proxy
/// decodes them (it registers every proxied BAR as 32-bit, so only the low dword of the
/// address the firmware writes takes effect). OVMF 2022.11 ignores
/// `opt/ovmf/X-PciMmio64Mb=0` when it trusts the CPU's physical address width (it then
/// sizes a "dynamic" 64-bit window at the top of the address space); with a width it
/// distrusts, the knob turns the 64-bit window off and PCI enumeration assigns 64-bit BARs
/// from the 32-bit window, as a server's firmware does with "above 4G decoding" off. The
/// device keeps its 64-bit BARs.
pub fn keep_bars_below_4g(command: &mut QemuCommand) {
    command.cpu = Some(format!(
        "{},host-phys-bits=off,phys-bits={OVMF_PHYS_BITS}",
        command.cpu()
    ));
    command.extra.push("-fw_cfg".into());
    command
        .extra
        .push("name=opt/ovmf/X-PciMmio64Mb,string=0".into());
}

/// Follows one guest console through the kernel's PCI scan (docs/kernel.md, boot-log format)
/// and spots a memory BAR of the emulated HCA (vendor 15b3) at or above 4 GiB: QEMU's device
/// proxy does not decode it there (docs/mpqemu.md), so the run could only time out.
#[derive(Debug, Default)]
pub struct HighBarWatch {
    in_hca: bool,
}

impl HighBarWatch {
    /// Feeds one console line; returns (BAR index, address) of an HCA BAR above 4 GiB.
    pub fn line(&mut self, line: &str) -> Option<(u8, u64)> {
        let Some(rest) = line.strip_prefix("pci ") else {
            self.in_hca = false;
            return None;
        };
        let words: Vec<&str> = rest.split_whitespace().collect();
        if !rest.starts_with("  ") {
            // `pci BDF VVVV:DDDD class ...`: a new function.
            self.in_hca = words.get(1).is_some_and(|id| id.starts_with("15b3:"));
            return None;
        }
        if !self.in_hca || words.get(1).is_none_or(|kind| !kind.starts_with("mem")) {
            return None;
        }
        let index = words.first()?.strip_prefix("bar")?.parse().ok()?;
        let address = words.iter().find_map(|w| w.strip_prefix("0x"))?;
        let address = u64::from_str_radix(address, 16).ok()?;
        (address >= 1 << 32).then_some((index, address))
    }
}

/// How one node ended, with its console and the model's view of its HCA.
#[derive(Debug)]
pub struct NodeOutcome {
    pub name: String,
    pub exit: GuestExit,
    pub console: String,
    pub counters: Counters,
    pub violations: Vec<Violation>,
    /// The model's behaviour trace of this node's HCA (`sim::trace`; empty unless the
    /// fabric was configured with `trace: true`).
    pub trace: String,
    /// The HCA's send-queue switches (`sim::SqSwitch`), oldest first: where each run of
    /// one QP's sends began.
    pub sq_switches: Vec<sim::SqSwitch>,
}

/// Called for every console line as it arrives: (node index, line, server).
pub type LineHook<'a> = dyn FnMut(usize, &str, &Server, &[sim::HcaId]) + 'a;

struct Node {
    name: String,
    handle: GuestHandle,
    console: String,
    /// [`NodeSpec::console_log`], open, with its path.
    log: Option<(PathBuf, LineWriter<File>)>,
    exit: Option<GuestExit>,
}

/// Boots every node on one fabric (subnet manager on), streams their consoles to stdout
/// prefixed `name: ` (or unprefixed with one node; on a terminal with a progress display
/// and no `--verbose`, only counted: `crate::progress`), calls `hook` per line, and waits until
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

/// Builds the later nodes from what the nodes already running printed: called with (node
/// index, console line) for every line until it returns `Some`. `Some(Err)` ends the run
/// (every QEMU killed) with that error.
pub type SpawnHook<'a> = dyn FnMut(usize, &str) -> Option<Result<Vec<NodeSpec>>> + 'a;

/// Nodes booted later, on the same fabric, once the others' consoles say so (e.g. a client
/// configured with the QPN a server printed).
pub struct LaterNode<'a> {
    pub spawn: Box<SpawnHook<'a>>,
    /// If it has not been spawned this long after the start, every node is killed and the
    /// run ends without it (the outcomes then hold only the first nodes).
    pub within: Duration,
}

/// [`run_nodes_on`] with optional nodes booted later: their HCAs join the fabric when
/// `later.spawn` returns them, after the first nodes' HCAs and in their order (so they get
/// the next LIDs). The run ends when every node has exited (before the later nodes were
/// spawned: without them), or at `timeout` from the start.
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
    let mut watches: Vec<HighBarWatch> = nodes.iter().map(|_| HighBarWatch::default()).collect();
    let start = Instant::now();
    let mut open_streams = nodes.len();
    let emit = |nodes: &mut Vec<Node>, index: usize, line: &str| {
        let line = line.trim_end_matches('\r');
        let node: &mut Node = &mut nodes[index];
        node.console.push_str(line);
        node.console.push('\n');
        if let Some((path, file)) = &mut node.log {
            if let Err(e) = writeln!(file, "{line}") {
                crate::say(&format!(
                    "{}: cannot write the console to {}: {e}",
                    node.name,
                    path.display()
                ));
                node.log = None;
            }
        }
        // Streamed to stdout (unless a progress display replaces it) and counted there.
        let text = if prefixed {
            format!("{}: {line}", node.name)
        } else {
            line.to_string()
        };
        crate::progress::console_line(&node.name, line, &text);
    };
    loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok((index, Some(line))) => {
                emit(&mut nodes, index, &line);
                let line = line.trim_end_matches('\r');
                if let Some((bar, address)) = watches[index].line(line) {
                    // Every QEMU is killed as the handles are dropped.
                    anyhow::bail!(
                        "{}: the firmware placed the emulated HCA's BAR{bar} at {address:#x}, \
                         above 4 GiB, where QEMU's device proxy does not decode it \
                         (docs/mpqemu.md, \"64-bit BARs and OVMF\")",
                        nodes[index].name
                    );
                }
                hook(index, line, &server, &hcas);
                let wanted = later.as_mut().and_then(|l| (l.spawn)(index, line));
                if let Some(specs) = wanted {
                    later = None;
                    for spec in specs? {
                        let node = spawn_node(&server, spec, nodes.len(), &tx)?;
                        hcas.push(node.handle.hca());
                        watches.push(HighBarWatch::default());
                        nodes.push(node);
                        open_streams += 1;
                    }
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
            let logs: Vec<String> = nodes
                .iter()
                .filter_map(|n| n.log.as_ref())
                .map(|(path, _)| path.display().to_string())
                .collect();
            if !logs.is_empty() {
                crate::say(&format!(
                    "{}: the consoles up to now are in {}",
                    crate::interrupt::name(interrupted.0),
                    logs.join(", ")
                ));
            }
            return Err(interrupted.into());
        }
        for node in nodes.iter_mut().filter(|n| n.exit.is_none()) {
            if let Some(status) = node.handle.try_wait()? {
                node.exit = Some(GuestExit::from_status(status.exit));
            }
        }
        // A QEMU that failed leaves the others waiting for a peer that is gone (until their
        // own bounds or the timeout): stop them now.
        let failed = nodes.iter().find_map(|n| match &n.exit {
            Some(e) if e.is_qemu_failure() => Some(format!("{}'s QEMU failed ({e})", n.name)),
            _ => None,
        });
        if let Some(why) = failed {
            for node in nodes.iter_mut().filter(|n| n.exit.is_none()) {
                let _ = node.handle.kill();
                node.exit = Some(GuestExit::Stopped(why.clone()));
            }
            later = None;
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
                trace: server.with_fabric(|f| f.trace(hca)),
                sq_switches: server.with_fabric(|f| f.sq_switches(hca)),
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
    let log = match spec.console_log {
        Some(path) => {
            let file = File::create(&path)
                .with_context(|| format!("creating the console log {}", path.display()))?;
            Some((path, LineWriter::new(file)))
        }
        None => None,
    };
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
        log,
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

/// `cargo qemu hca`.
#[derive(Debug, clap::Args)]
pub struct HcaArgs {
    #[command(flatten)]
    pub guest: crate::args::GuestArgs,
    /// How the kernel takes the HCA's interrupts: MSI-X (the device's real mode, INTx as
    /// the driver's fallback), INTx only, or polling.
    #[arg(long, value_enum, default_value = "msix")]
    pub irq: ibconfig::HcaIrq,
    /// Kill QEMU and fail if the kernel has not finished after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 120, value_parser = crate::args::parse_timeout)]
    pub timeout: u64,
    #[command(flatten)]
    pub set: crate::args::SetArgs,
    /// Directory for the images and config of this run [default: target/ibkern/hca].
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub kernel: crate::args::KernelArgs,
    #[command(flatten)]
    pub profile: crate::device_profile::ProfileArgs,
    /// PCI device id the emulated HCA reports instead of its profile's (e.g. 0x1004, the
    /// SR-IOV VF, to see the kernel refuse it).
    #[arg(long, value_name = "ID", value_parser = parse_device_id)]
    pub device_id: Option<u16>,
    /// Ports the emulated HCA has instead of its profile's (1 or 2); with 2, `--set
    /// ib_port=2` makes the kernel use (and wait for) the second one.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=2))]
    pub ports: Option<u8>,
    /// Record the model's behaviour trace of the HCA (every command, context, WQE shape and
    /// doorbell pattern; docs/model.md) and write it to FILE (`cargo qemu conformance`
    /// compares it with Linux's).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,
}

fn parse_device_id(s: &str) -> Result<u16, String> {
    let hex = s.strip_prefix("0x").unwrap_or(s);
    u16::from_str_radix(hex, 16).map_err(|_| format!("{s:?} is not a 16-bit hex id"))
}

/// The key `hca` sets from its flags: `--set` may not give it. (`--set mode=diag` and other
/// modes are allowed: the command reports the kernel's verdict whatever the mode.)
const HCA_OWNED: &[(&str, crate::kernel_config::SetBy)] =
    &[("hca_irq", crate::kernel_config::SetBy::Flag("--irq"))];

/// Boots `mode=hca` with the emulated HCA attached; success only if the kernel reports
/// success and the model recorded no violation.
pub fn hca_command(args: HcaArgs) -> Result<crate::Exit> {
    let workspace = crate::host::Workspace::locate();
    let mut config = ibconfig::Config::with_mode(ibconfig::Mode::Hca);
    config.hca_irq = args.irq;
    crate::kernel_config::apply_set(&mut config, &args.set, HCA_OWNED, "hca")?;
    crate::kernel_config::check_config(&config)?;
    let out = args.out.unwrap_or_else(|| workspace.work_dir("hca"));
    crate::args::check_out_dir(&out)?;
    let command = crate::prepare::prepare_guest(&args.guest, &args.kernel, &config, &out, None)?;
    eprintln!(
        "ibkern-qemu: {}",
        proxy_argv(&command)
            .iter()
            .map(|w| crate::command::shell_quote(w))
            .collect::<Vec<_>>()
            .join(" ")
    );
    eprintln!("ibkern-qemu: config: {}", boot::one_line(&config));
    let start = Instant::now();
    let fabric = FabricConfig {
        trace: args.trace.is_some(),
        ..FabricConfig::default()
    };
    let outcomes = run_nodes_on(
        fabric,
        vec![NodeSpec {
            name: "node0".into(),
            command,
            profile: {
                let p = args.profile.for_node(0);
                sim::DeviceProfile {
                    device_id: args.device_id.unwrap_or(p.device_id),
                    num_ports: args.ports.unwrap_or(p.num_ports),
                    ..p
                }
            },
            console_log: None,
        }],
        Duration::from_secs(args.timeout),
        &mut |_, _, _, _| {},
    )?;
    let o = &outcomes[0];
    for line in report_lines(o) {
        eprintln!("ibkern-qemu: {line}");
    }
    if let Some(path) = &args.trace {
        std::fs::write(path, &o.trace)
            .with_context(|| format!("writing the trace to {}", path.display()))?;
        eprintln!(
            "ibkern-qemu: behaviour trace: {} ({} observations)",
            path.display(),
            o.trace.lines().count()
        );
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::BootMedium;
    use crate::machine::Accel;

    fn argv(boot: BootMedium) -> Vec<String> {
        proxy_argv(&QemuCommand::new(boot, Accel::Tcg))
    }

    fn after<'a>(argv: &'a [String], flag: &str) -> Vec<&'a str> {
        argv.windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1].as_str())
            .collect()
    }

    #[test]
    fn ovmf_guests_get_a_distrusted_address_width_and_no_64bit_window() {
        let uefi = argv(BootMedium::Uefi {
            image: "u.img".into(),
            ovmf: "OVMF.fd".into(),
        });
        assert_eq!(
            after(&uefi, "-cpu"),
            ["max,host-phys-bits=off,phys-bits=38"]
        );
        assert_eq!(
            after(&uefi, "-fw_cfg"),
            ["name=opt/ovmf/X-PciMmio64Mb,string=0"]
        );
        assert!(uefi
            .iter()
            .any(|a| a == &format!("x-pci-proxy-dev,id=hca0,fd={FD_PLACEHOLDER}")));
        let pxe = argv(BootMedium::Pxe {
            tftp_root: "tftp".into(),
            bootfile: "bootloader".into(),
            ovmf: "OVMF.fd".into(),
            mac: None,
        });
        assert_eq!(after(&pxe, "-fw_cfg").len(), 1);
        assert!(after(&pxe, "-cpu")[0].ends_with(",phys-bits=38"));
    }

    #[test]
    fn high_bar_watch_flags_only_hca_memory_bars_above_4g() {
        let mut w = HighBarWatch::default();
        let scan = [
            "pci 00:01.0 1234:1111 class 030000 pin - line 255",
            "pci   bar0 mem64 pref 0xe000000000 size 0x1000000",
            "pci 00:03.0 15b3:1003 class 028000 pin A line 11",
            "pci   bar0 mem64 0xc1800000 size 0x100000",
            "pci   bar2 mem64 pref 0xc1000000 size 0x800000",
            "pci   caps pcie@0x60 msix@0x9c",
            "pci   msix entries 128 table bar0+0x7c000 pba bar0+0x7d000",
            "pci 00:1f.0 8086:2918 class 060100 pin - line 255",
            "pci   bar2 mem64 pref 0x800000000 size 0x800000",
        ];
        // Another device's high BAR, and the HCA's low ones, are fine.
        assert!(scan.iter().all(|l| w.line(l).is_none()));
        let mut w = HighBarWatch::default();
        assert_eq!(w.line(scan[2]), None);
        assert_eq!(w.line(scan[3]), None);
        assert_eq!(
            w.line("pci   bar2 mem64 pref 0xe000000000 size 0x800000"),
            Some((2, 0xe0_0000_0000))
        );
        // A line outside the scan ends the HCA's block.
        assert_eq!(w.line("hca: 00:03.0 15b3:1003 bar0 0xe000800000"), None);
        assert_eq!(w.line("pci   bar0 mem64 0xe000800000 size 0x100000"), None);
        // Garbage does not panic.
        let mut w = HighBarWatch::default();
        w.line(scan[2]);
        for l in [
            "pci ",
            "pci   ",
            "pci   barx mem64 0x1",
            "pci   bar0 mem64 0xzz",
            "pci   bar0 io 0x1ffffffff",
        ] {
            assert_eq!(w.line(l), None, "{l}");
        }
    }

    #[test]
    fn seabios_guests_keep_their_cpu_and_no_fw_cfg() {
        let bios = argv(BootMedium::Bios {
            image: "b.img".into(),
        });
        assert_eq!(after(&bios, "-cpu"), ["max"]);
        assert!(after(&bios, "-fw_cfg").is_empty());
        assert_eq!(after(&bios, "-smp"), ["1"]);
    }
}
