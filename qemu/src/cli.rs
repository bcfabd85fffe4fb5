//! The `cargo qemu` command line and what each subcommand does.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use boot::{Config, ImageBuilder, LoaderLog};
use clap::{Args, Parser, Subcommand};

use crate::command::{BootMedium, QemuCommand, DEFAULT_MEMORY_MIB};
use crate::guest::{self, Echo, GuestExit, Input, RunOptions};
use crate::host::{self, Workspace};
use crate::machine::{expect_pci_value, expected_pci, Accel, Firmware, Machine};
use crate::selftest;
use crate::vfio::{self, Bdf, HostRoots};
use crate::{Exit, Usage};

const AFTER_HELP: &str = "\
Exit status: 0 success; 1 the kernel reported failure (failed checks, fault, panic, bad config);
2 bad command line or configuration (a key, value or combination the kernel would refuse;
nothing is built or booted); 3 host problem (missing QEMU/OVMF/KVM, kernel build, VFIO check);
4 timeout (QEMU killed); 5 QEMU ended without a kernel verdict (QEMU error, triple fault);
128+N stopped by signal N (SIGINT, SIGTERM, SIGHUP: the guests are killed first).
See docs/runner.md.";

/// Build, boot and test ibkern under QEMU.
#[derive(Debug, Parser)]
#[command(name = "cargo qemu", bin_name = "cargo qemu", version, after_help = AFTER_HELP)]
#[command(about = "Build ibkern boot images and run the kernel under QEMU")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Subcommands,
}

#[derive(Debug, Subcommand)]
pub enum Subcommands {
    /// Build the kernel and write bios.img, uefi.img and a PXE/TFTP root (tftp/) carrying a
    /// configuration as the ramdisk.
    Image(ImageArgs),
    /// Boot `mode=selftest` and pass only if every check passed and the kernel exited with its
    /// success status.
    Selftest(SelftestArgs),
    /// Boot the kernel with the serial console on this terminal (stdin/stdout).
    Run(RunArgs),
    /// Only run the VFIO pre-flight checks for host PCI devices (what `run --vfio` checks).
    VfioCheck(VfioCheckArgs),
    /// Boot `mode=hca` with the emulated ConnectX-3 attached (sim's mpqemu server): bring-up
    /// summary, NOP interrupt test, teardown and a second bring-up; prints the model's
    /// counters and fails on any contract violation.
    Hca(crate::hca::HcaArgs),
    /// Build the Linux guest from Debian's packages (kernel with mlx4 modules, rdma-core,
    /// perftest, busybox; cached under out/linux) and write its initramfs.
    LinuxImage(crate::linux::LinuxImageArgs),
    /// Boot Debian's Linux with the emulated ConnectX-3 (one guest, or a pair on one fabric
    /// running perftest); pass only on clean module loads, an ACTIVE port with the fabric's
    /// LID, a successful guest script and no model violations.
    Linux(crate::linux::LinuxArgs),
    /// Two guests on one emulated fabric run the ping-pong latency sweep (server and client,
    /// one boot pair per transport); prints the tables and the model's PCIe traffic per
    /// iteration per size, and writes them into --out.
    Pingpong(crate::pingpong::PingPongArgs),
    /// Linux (perftest ib_send_lat on Debian's mlx4 stack) and ibkern (its ping-pong) on the
    /// same emulated fabric with the same transports, sizes and iterations: one table,
    /// compare.csv, compare.svg, the model's PCIe transactions per iteration for each stack
    /// and the time from QEMU's start to the HCA ready. Under emulation absolute times mean
    /// little; operations and transactions per iteration mean a lot (docs/runner.md).
    Compare(crate::compare::CompareArgs),
    /// A Linux guest against an ibkern guest on one emulated fabric: a small program on
    /// rdma-core's verbs speaking ibkern's in-band rendezvous runs the UD/UC ping-pong with
    /// ibkern, both sides checking every payload. `--linux-role client` (default): ibkern
    /// serves; `--linux-role server`: the Linux server boots first and the ibkern client is
    /// given the rendezvous QPN it prints (`peer_rdv_qpn`).
    Mixed(crate::linux::mixed::MixedArgs),
    /// Differential check against Linux on the model: compare ibkern's behaviour trace
    /// (every command, context field, WQE shape and doorbell pattern the model saw; from
    /// `hca --trace`, `pingpong --trace` or `compare --trace`) with Linux's, list what ibkern
    /// does that Linux never does and the reverse, and fail on any departure not in
    /// drivers/mlx4/conformance/departures.txt.
    Conformance(crate::conformance::ConformanceArgs),
    /// Tables, latency.csv, latency.json and latency.svg from consoles saved on real nodes
    /// (a browser console pasted into a file, a serial-over-LAN log, `script` output): escape
    /// sequences, line prefixes, wrapped and repeated lines are tolerated.
    Results(crate::saved_results::ResultsArgs),
    /// One node of a ping-pong run, one command per host: ibkern under KVM with the
    /// ConnectX-3 passed through (`--vfio BDF`), or its emulated twin under TCG with an HCA of
    /// a running `cargo qemu fabric` (`--fabric DIR --index I`). Console log written as it
    /// streams; at the end the perftest-style table, latency.csv/json/svg (on the fabric
    /// also the model's PCIe transactions per iteration, pcie.csv).
    Node(crate::node::NodeArgs),
    /// The emulated fabric (N HCAs on one switch, subnet manager on) as a process of its own,
    /// serving `cargo qemu node --fabric` processes on one UNIX socket per node, until
    /// SIGINT/SIGTERM/SIGHUP.
    Fabric(crate::fabric::FabricArgs),
}

/// Which kernel to pack and how the bootloader behaves.
#[derive(Debug, Args)]
pub struct KernelArgs {
    /// Use this kernel ELF instead of building one (`cargo build -p kernel --release
    /// --target x86_64-unknown-none`).
    #[arg(long, value_name = "PATH")]
    pub kernel: Option<PathBuf>,
    /// Let the bootloader print its own log (serial and framebuffer); off by default.
    #[arg(long)]
    pub loader_log: bool,
}

/// Configuration keys given on the command line.
#[derive(Debug, Args)]
pub struct SetArgs {
    /// Set a kernel configuration key (repeatable), e.g. `--set log=debug`; applied last.
    /// Keys, values and the whole configuration are checked as the kernel checks them
    /// (docs/kernel.md): a refusal exits 2 before anything is built.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

/// The virtual machine.
#[derive(Debug, Args)]
pub struct GuestArgs {
    /// Firmware and boot medium.
    #[arg(long, value_enum, default_value = "bios")]
    pub firmware: Firmware,
    /// Accelerator. TCG works everywhere; KVM is for hosts with hardware virtualisation (and
    /// is required for --vfio).
    #[arg(long, value_enum, default_value = "tcg")]
    pub accel: Accel,
    /// Machine type: q35 (PCIe, ECAM) or pc (i440FX, port I/O configuration only).
    #[arg(long, value_enum, default_value = "q35")]
    pub machine: Machine,
    /// CPU model [default: max under TCG (1 GiB pages), host under KVM]; e.g. qemu64 has no
    /// 1 GiB pages.
    #[arg(long, value_name = "MODEL")]
    pub cpu: Option<String>,
    /// QEMU executable [default: qemu-system-x86_64 from PATH].
    #[arg(long, value_name = "PATH")]
    pub qemu: Option<PathBuf>,
    /// OVMF firmware image for --firmware uefi|pxe.
    #[arg(long, value_name = "PATH", default_value = crate::command::DEFAULT_OVMF)]
    pub ovmf: PathBuf,
}

impl GuestArgs {
    /// The defaults of the command line: SeaBIOS, TCG, q35, QEMU from PATH (what the
    /// emulated-HCA commands boot ibkern with).
    pub fn emulated() -> GuestArgs {
        GuestArgs {
            firmware: Firmware::Bios,
            accel: Accel::Tcg,
            machine: Machine::Q35,
            cpu: None,
            qemu: None,
            ovmf: crate::command::DEFAULT_OVMF.into(),
        }
    }
}

#[derive(Debug, Args)]
pub struct ImageArgs {
    /// Configuration file (`key=value` lines, `#` comments) to carry as the ramdisk
    /// [default: empty, the kernel's defaults].
    #[arg(long, value_name = "FILE", conflicts_with = "node")]
    pub config: Option<PathBuf>,
    /// One node and its configuration file (repeatable): writes that node's images to
    /// DIR/NODE/ and its PXE root to DIR/tftp/NODE/. A MAC address as NODE
    /// (aa:bb:cc:dd:ee:ff) names the root as dnsmasq's `--tftp-unique-root=mac` expects
    /// (aa-bb-cc-dd-ee-ff), so `--tftp-root=DIR/tftp` serves each node its own ramdisk.
    /// `--set` applies to every node.
    #[arg(long, value_name = "NODE=FILE")]
    pub node: Vec<String>,
    #[command(flatten)]
    pub set: SetArgs,
    /// Output directory [default: out/image in the workspace].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub kernel: KernelArgs,
}

#[derive(Debug, Args)]
pub struct SelftestArgs {
    #[command(flatten)]
    pub guest: GuestArgs,
    /// Kill QEMU and fail if the kernel has not finished after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub timeout: u64,
    #[command(flatten)]
    pub set: SetArgs,
    /// Directory for the images and config of this run [default: target/ibkern/selftest].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub kernel: KernelArgs,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub guest: GuestArgs,
    /// Pass this host PCI function through with VFIO (repeatable), after checking the host
    /// is set up for it; needs --accel kvm.
    #[arg(long, value_name = "BDF")]
    pub vfio: Vec<Bdf>,
    /// Configuration file for the kernel [default: empty, the kernel's defaults].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub set: SetArgs,
    /// Kill QEMU after this many seconds [default: no limit].
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Directory for the images and config of this run [default: target/ibkern/run].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub kernel: KernelArgs,
    /// Boot (with --firmware pxe) from this PXE/TFTP root built earlier by `image` instead of
    /// building one; with --mac, its per-MAC subdirectory (aa-bb-cc-dd-ee-ff) is used when it
    /// exists, as dnsmasq's --tftp-unique-root=mac would serve it. The root carries its own
    /// configuration.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["config", "set"])]
    pub tftp_root: Option<PathBuf>,
    /// MAC address of the guest's NIC (PXE), e.g. 52:54:00:12:34:56.
    #[arg(long, value_name = "MAC", value_parser = mac_arg, requires = "tftp_root")]
    pub mac: Option<[u8; 6]>,
    /// Extra QEMU arguments, after `--`.
    #[arg(last = true, value_name = "QEMU-ARGS")]
    pub qemu_args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct VfioCheckArgs {
    /// Host PCI functions to check, as [DDDD:]BB:DD.F.
    #[arg(required = true, value_name = "BDF")]
    pub bdf: Vec<Bdf>,
    /// Guest memory in MiB (sizes the locked-memory check).
    #[arg(long, value_name = "MIB", default_value_t = DEFAULT_MEMORY_MIB)]
    pub memory: u32,
}

/// Prints a runner message (stderr, so stdout stays the guest console).
macro_rules! say {
    ($($arg:tt)*) => { crate::say(&format!($($arg)*)) };
}

/// Runs the parsed command line.
pub fn main(cli: Cli) -> Exit {
    let result = match cli.command {
        Subcommands::Image(args) => image(args),
        Subcommands::Selftest(args) => selftest(args),
        Subcommands::Run(args) => run(args),
        Subcommands::VfioCheck(args) => vfio_check(args),
        Subcommands::Hca(args) => crate::hca::hca_command(args),
        Subcommands::LinuxImage(args) => crate::linux::linux_image_command(args),
        Subcommands::Linux(args) => crate::linux::linux_command(args),
        Subcommands::Pingpong(args) => crate::pingpong::pingpong_command(args),
        Subcommands::Compare(args) => crate::compare::compare_command(args),
        Subcommands::Mixed(args) => crate::linux::mixed::mixed_command(args),
        Subcommands::Conformance(args) => crate::conformance::conformance_command(args),
        Subcommands::Results(args) => crate::saved_results::results_command(args),
        Subcommands::Node(args) => crate::node::node_command(args),
        Subcommands::Fabric(args) => crate::fabric::fabric_command(args),
    };
    result.unwrap_or_else(|error| {
        say!("error: {error:#}");
        if error.chain().any(|e| e.is::<Usage>()) {
            Exit::Usage
        } else {
            Exit::Host
        }
    })
}

/// A configuration error as the runner reports it: a usage error (exit 2) whose message
/// is the kernel's, after `what` (where the setting came from).
fn refused(what: &str, error: boot::ConfigError) -> anyhow::Error {
    Usage(format!("{what}: {error}")).into()
}

/// Applies the `--set` assignments, each checked as the kernel would check it.
pub(crate) fn apply_set(config: &mut Config, set: &SetArgs) -> Result<()> {
    for assignment in &set.set {
        config
            .apply(assignment)
            .map_err(|e| refused(&format!("--set {assignment}"), e))?;
    }
    Ok(())
}

/// Checks a whole configuration as the kernel will (rules between keys included); a
/// refusal is a usage error with the kernel's message.
pub(crate) fn check_config(config: &Config) -> Result<ibconfig::Config> {
    config
        .check()
        .map_err(|e| refused("configuration refused", e))
}

/// The configuration of `--config FILE` (if any) and `--set`, every key and value checked;
/// the rules between keys are [`check_config`]'s.
pub(crate) fn read_config(file: Option<&Path>, set: &SetArgs) -> Result<Config> {
    let mut config = match file {
        Some(path) => {
            let text = fs::read_to_string(path)
                .with_context(|| format!("cannot read configuration {}", path.display()))?;
            Config::parse(&text)
                .map_err(|e| refused(&format!("configuration {}", path.display()), e))?
        }
        None => Config::new(),
    };
    apply_set(&mut config, set)?;
    Ok(config)
}

fn image_builder(workspace: &Workspace, args: &KernelArgs) -> Result<ImageBuilder> {
    let elf = match &args.kernel {
        Some(path) => path.clone(),
        None => workspace.build_kernel()?,
    };
    let log = if args.loader_log {
        LoaderLog::VERBOSE
    } else {
        LoaderLog::QUIET
    };
    Ok(ImageBuilder::new(elf)?.loader_log(log))
}

fn image(args: ImageArgs) -> Result<Exit> {
    let workspace = Workspace::locate();
    let out = args.out.unwrap_or_else(|| workspace.root.join("out/image"));
    if !args.node.is_empty() {
        return node_images(&workspace, &args.node, &args.set, &args.kernel, &out);
    }
    let config = read_config(args.config.as_deref(), &args.set)?;
    check_config(&config)?;
    let builder = image_builder(&workspace, &args.kernel)?;
    let set = builder.build_all(&config, &out)?;
    say!("kernel {}", builder.kernel().display());
    for (what, path) in [
        ("BIOS disk image", &set.bios),
        ("UEFI disk image", &set.uefi),
        ("PXE/TFTP root  ", &set.tftp),
        ("configuration  ", &set.config),
    ] {
        say!("{what}  {}", path.display());
    }
    say!(
        "PXE: serve {} over TFTP with boot file `{}`",
        set.tftp.display(),
        boot::TFTP_BOOT_FILE
    );
    Ok(Exit::Success)
}

/// `image --node NODE=FILE ...`: every configuration is read and checked before anything is
/// built; then per node the images in DIR/NODE/ and the PXE root in DIR/tftp/NODE/.
fn node_images(
    workspace: &Workspace,
    nodes: &[String],
    set: &SetArgs,
    kernel: &KernelArgs,
    out: &Path,
) -> Result<Exit> {
    let mut parsed = Vec::new();
    for node in nodes {
        let (name, file) = node
            .split_once('=')
            .with_context(|| format!("--node {node}: expected NODE=FILE"))?;
        let dir = boot::node_dir_name(name).with_context(|| format!("--node {node}"))?;
        if parsed.iter().any(|(d, _)| *d == dir) {
            bail!("--node {node}: node {name} given twice");
        }
        let config =
            read_config(Some(Path::new(file)), set).with_context(|| format!("--node {node}"))?;
        check_config(&config).with_context(|| format!("--node {node}"))?;
        parsed.push((dir, config));
    }
    let builder = image_builder(workspace, kernel)?;
    say!("kernel {}", builder.kernel().display());
    let tftp = out.join(boot::TFTP_DIR);
    for (dir, config) in &parsed {
        let set = builder.build_set(config, &out.join(dir), &tftp.join(dir))?;
        say!(
            "node {dir}: {} {} config {}; PXE root {}",
            set.bios.display(),
            set.uefi.display(),
            set.config.display(),
            set.tftp.display()
        );
    }
    say!(
        "PXE: serve {} over TFTP with boot file `{}` and per-client roots (dnsmasq: \
         --tftp-root={} --tftp-unique-root=mac)",
        tftp.display(),
        boot::TFTP_BOOT_FILE,
        tftp.display()
    );
    Ok(Exit::Success)
}

/// The QEMU command for `guest` booting `boot` with the emulator `qemu`.
fn guest_command(guest: &GuestArgs, qemu: PathBuf, boot: BootMedium) -> QemuCommand {
    let mut command = QemuCommand::new(boot, guest.accel);
    command.binary = qemu;
    command.machine = guest.machine;
    command.cpu = guest.cpu.clone();
    command
}

/// The QEMU binary, after checking OVMF and KVM where the guest needs them.
fn check_host(guest: &GuestArgs) -> Result<PathBuf> {
    let qemu = host::qemu_binary(guest.qemu.as_deref())?;
    if guest.firmware.needs_ovmf() {
        host::ovmf(Some(&guest.ovmf))?;
    }
    if guest.accel == Accel::Kvm {
        host::check_kvm()?;
    }
    Ok(qemu)
}

/// `run --tftp-root DIR [--mac MAC]`: PXE from a root built earlier (`image`). With a MAC,
/// DIR/<aa-bb-cc-dd-ee-ff> is served when it exists, otherwise DIR itself: what dnsmasq's
/// `--tftp-unique-root=mac` does for that client (QEMU's own TFTP server has one root).
fn existing_pxe_root(guest: &GuestArgs, root: &Path, mac: Option<[u8; 6]>) -> Result<QemuCommand> {
    if guest.firmware != Firmware::Pxe {
        bail!("--tftp-root needs --firmware pxe");
    }
    let mut tftp_root = root.to_path_buf();
    if let Some(m) = mac {
        let per_mac = root.join(boot::format_mac(m, '-'));
        if per_mac.is_dir() {
            tftp_root = per_mac;
        }
    }
    let loader = tftp_root.join(boot::TFTP_BOOT_FILE);
    if !loader.is_file() {
        bail!(
            "PXE root {} has no {} (build one with `cargo qemu image`)",
            tftp_root.display(),
            boot::TFTP_BOOT_FILE
        );
    }
    let ramdisk = tftp_root.join(boot::TFTP_RAMDISK_FILE);
    let bytes = fs::read(&ramdisk).with_context(|| format!("cannot read {}", ramdisk.display()))?;
    let console = match ibconfig::parse_bytes(Some(&bytes)) {
        Ok(config) => config.console,
        Err(e) => crate::usage!(
            "PXE root {}: configuration refused: {e}",
            tftp_root.display()
        ),
    };
    let qemu = check_host(guest)?;
    say!("PXE root {}", tftp_root.display());
    let boot = BootMedium::Pxe {
        tftp_root,
        bootfile: boot::TFTP_BOOT_FILE.into(),
        ovmf: host::ovmf(Some(&guest.ovmf))?,
        mac,
    };
    let mut command = guest_command(guest, qemu, boot);
    command.console = console;
    Ok(command)
}

fn mac_arg(s: &str) -> std::result::Result<[u8; 6], String> {
    boot::parse_mac(s).ok_or_else(|| format!("{s:?} is not a MAC address (aa:bb:cc:dd:ee:ff)"))
}

/// Tools and images for one guest, ready to boot.
pub(crate) fn prepare_guest(
    guest: &GuestArgs,
    kernel: &KernelArgs,
    config: &Config,
    out: &Path,
) -> Result<QemuCommand> {
    // Check the configuration and the host before spending time on builds.
    let console = check_config(config)?.console;
    let qemu = check_host(guest)?;
    let workspace = Workspace::locate();
    let builder = image_builder(&workspace, kernel)?;
    let config_path = out.join(boot::CONFIG_FILE);
    ImageBuilder::write_config(config, &config_path)?;
    let boot = match guest.firmware {
        Firmware::Bios => {
            let image = out.join(boot::BIOS_IMAGE);
            builder.bios_image(&config_path, &image)?;
            BootMedium::Bios { image }
        }
        Firmware::Uefi => {
            let image = out.join(boot::UEFI_IMAGE);
            builder.uefi_image(&config_path, &image)?;
            BootMedium::Uefi {
                image,
                ovmf: host::ovmf(Some(&guest.ovmf))?,
            }
        }
        Firmware::Pxe => {
            let tftp_root = out.join(boot::TFTP_DIR);
            builder.tftp_root(config, &tftp_root)?;
            let bootfile = boot::TFTP_BOOT_FILE.into();
            BootMedium::Pxe {
                tftp_root,
                bootfile,
                ovmf: host::ovmf(Some(&guest.ovmf))?,
                mac: None,
            }
        }
    };
    let mut command = guest_command(guest, qemu, boot);
    command.console = console;
    Ok(command)
}

fn selftest(args: SelftestArgs) -> Result<Exit> {
    let workspace = Workspace::locate();
    let guest = &args.guest;
    let mut config = Config::new();
    config.set("mode", "selftest")?;
    config.set(
        "expect_pci",
        &expect_pci_value(&expected_pci(guest.machine, guest.firmware)),
    )?;
    apply_set(&mut config, &args.set)?;
    check_config(&config)?;
    let out = args.out.unwrap_or_else(|| workspace.work_dir("selftest"));
    let command = prepare_guest(guest, &args.kernel, &config, &out)?;
    let timeout = Duration::from_secs(args.timeout);
    say!("{}", command.shell_line());
    say!(
        "config: {}",
        config.to_ramdisk().trim_end().replace('\n', " ")
    );
    let options = RunOptions {
        timeout: Some(timeout),
        echo: Echo::Stdout,
        input: Input::Null,
    };
    let outcome = guest::run(&command, &options)?;
    let report = selftest::parse(&outcome.console);
    let what = format!(
        "{}/{}/{} cpu {}",
        guest.firmware.name(),
        guest.machine.name(),
        guest.accel.name(),
        command.cpu()
    );
    match selftest::verdict(&report, &outcome.exit) {
        Ok(()) => {
            say!(
                "selftest PASSED: {} checks ({what}) in {:.1} s",
                report.passed.len(),
                outcome.elapsed.as_secs_f64()
            );
            Ok(Exit::Success)
        }
        Err(failure) => {
            say!(
                "selftest FAILED ({what}, {:.1} s): {failure}",
                outcome.elapsed.as_secs_f64()
            );
            if !matches!(failure, selftest::Failure::Exit(_)) {
                say!("{}", outcome.exit);
            }
            Ok(Exit::for_guest(&outcome.exit, false))
        }
    }
}

fn run(args: RunArgs) -> Result<Exit> {
    let workspace = Workspace::locate();
    let config = read_config(args.config.as_deref(), &args.set)?;
    if args.tftp_root.is_none() {
        check_config(&config)?;
    }
    if !args.vfio.is_empty() {
        if args.guest.accel != Accel::Kvm {
            say!("error: --vfio needs --accel kvm (VFIO passthrough is not available under TCG)");
            return Ok(Exit::Host);
        }
        let memory = u64::from(DEFAULT_MEMORY_MIB) << 20;
        for &bdf in &args.vfio {
            match vfio::check(&HostRoots::system(), bdf, memory) {
                Ok(device) => {
                    say!(
                        "vfio: {bdf} ({}) in IOMMU group {} is ready",
                        device.id,
                        device.group
                    )
                }
                Err(error) => {
                    say!("vfio: {bdf}: {error}");
                    return Ok(Exit::Host);
                }
            }
        }
    }
    let out = args.out.unwrap_or_else(|| workspace.work_dir("run"));
    let mut command = match &args.tftp_root {
        Some(root) => existing_pxe_root(&args.guest, root, args.mac)?,
        None => prepare_guest(&args.guest, &args.kernel, &config, &out)?,
    };
    command.vfio = args.vfio;
    command.extra = args.qemu_args.iter().map(Into::into).collect();
    say!("{}", command.shell_line());
    let timeout = args.timeout.map(Duration::from_secs);
    let options = RunOptions {
        timeout,
        echo: Echo::Stdout,
        input: Input::Inherit,
    };
    let outcome = guest::run(&command, &options)?;
    say!(
        "{} after {:.1} s",
        outcome.exit,
        outcome.elapsed.as_secs_f64()
    );
    Ok(Exit::for_guest(&outcome.exit, true))
}

fn vfio_check(args: VfioCheckArgs) -> Result<Exit> {
    let memory = u64::from(args.memory) << 20;
    let mut exit = Exit::Success;
    for bdf in args.bdf {
        match vfio::check(&HostRoots::system(), bdf, memory) {
            Ok(device) => say!(
                "{bdf} ({}) in IOMMU group {}: ready for VFIO",
                device.id,
                device.group
            ),
            Err(error) => {
                say!("{bdf}: {error}");
                exit = Exit::Host;
            }
        }
    }
    Ok(exit)
}

impl Exit {
    /// The runner's status for how a guest ended. `verdict_is_final`: a kernel success status
    /// alone means success (run); selftest decides success itself and passes false.
    pub fn for_guest(exit: &GuestExit, verdict_is_final: bool) -> Exit {
        match exit {
            GuestExit::KernelSuccess if verdict_is_final => Exit::Success,
            GuestExit::KernelSuccess | GuestExit::KernelFailure => Exit::GuestFailed,
            GuestExit::TimedOut(_) => Exit::Timeout,
            GuestExit::Status(_) | GuestExit::Signal(_) => Exit::NoVerdict,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn selftest_defaults() {
        let cli = Cli::try_parse_from(["cargo qemu", "selftest"]).unwrap();
        let Subcommands::Selftest(args) = cli.command else {
            panic!("not selftest")
        };
        assert_eq!(args.guest.firmware, Firmware::Bios);
        assert_eq!(args.guest.accel, Accel::Tcg);
        assert_eq!(args.guest.machine, Machine::Q35);
        assert_eq!(args.timeout, 120);
        assert!(args.kernel.kernel.is_none());
    }

    #[test]
    fn emulated_guest_is_the_command_line_default() {
        let cli = Cli::try_parse_from(["cargo qemu", "selftest"]).unwrap();
        let Subcommands::Selftest(args) = cli.command else {
            panic!("not selftest")
        };
        let e = GuestArgs::emulated();
        assert_eq!(
            (e.firmware, e.accel, e.machine, &e.cpu, &e.qemu, &e.ovmf),
            (
                args.guest.firmware,
                args.guest.accel,
                args.guest.machine,
                &args.guest.cpu,
                &args.guest.qemu,
                &args.guest.ovmf
            )
        );
    }

    #[test]
    fn run_takes_vfio_addresses_and_trailing_qemu_arguments() {
        let cli = Cli::try_parse_from([
            "cargo qemu",
            "run",
            "--accel",
            "kvm",
            "--vfio",
            "03:00.0",
            "--",
            "-smp",
            "1",
        ])
        .unwrap();
        let Subcommands::Run(args) = cli.command else {
            panic!("not run")
        };
        assert_eq!(args.vfio, vec!["0000:03:00.0".parse::<Bdf>().unwrap()]);
        assert_eq!(args.qemu_args, ["-smp", "1"]);
        let err = Cli::try_parse_from(["cargo qemu", "run", "--vfio", "3:0"]).unwrap_err();
        assert!(err.to_string().contains("not a PCI address"), "{err}");
        let err =
            Cli::try_parse_from(["cargo qemu", "selftest", "--firmware", "coreboot"]).unwrap_err();
        assert!(err.to_string().contains("bios"), "{err}");
    }

    #[test]
    fn guest_endings_map_to_exit_statuses() {
        assert_eq!(
            Exit::for_guest(&GuestExit::KernelSuccess, true),
            Exit::Success
        );
        assert_eq!(
            Exit::for_guest(&GuestExit::KernelSuccess, false),
            Exit::GuestFailed
        );
        assert_eq!(
            Exit::for_guest(&GuestExit::KernelFailure, true),
            Exit::GuestFailed
        );
        assert_eq!(
            Exit::for_guest(&GuestExit::TimedOut(Duration::from_secs(1)), true),
            Exit::Timeout
        );
        assert_eq!(
            Exit::for_guest(&GuestExit::Status(0), true),
            Exit::NoVerdict
        );
        assert_eq!(
            Exit::for_guest(&GuestExit::Signal(9), false),
            Exit::NoVerdict
        );
    }

    #[test]
    fn config_file_and_set_options_combine() {
        let dir = std::env::temp_dir().join(format!("ibkern-cli-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("node.cfg");
        fs::write(&file, "mode=idle # interactive\nlog=info\n").unwrap();
        let set = SetArgs {
            set: vec!["log=debug".into(), "role=server".into()],
        };
        let config = read_config(Some(&file), &set).unwrap();
        assert_eq!(config.to_ramdisk(), "mode=idle\nlog=debug\nrole=server\n");
        fs::write(&file, "mode idle\n").unwrap();
        let err = format!(
            "{:#}",
            read_config(Some(&file), &SetArgs { set: vec![] }).unwrap_err()
        );
        assert!(
            err.contains("config line 1: expected key=value, found \"mode idle\""),
            "{err}"
        );
        // Keys and values are the kernel's to define, and checked here the same way.
        fs::write(&file, "mode=idle\nrole=clinet\n").unwrap();
        let e = read_config(Some(&file), &SetArgs { set: vec![] }).unwrap_err();
        assert!(e.is::<Usage>(), "a usage error (exit 2)");
        assert!(
            format!("{e:#}").ends_with(
                "config line 2: key \"role\": bad value \"clinet\": expected one of client|server"
            ),
            "{e:#}"
        );
        fs::write(&file, "mode=pingpong\n").unwrap();
        let config = read_config(Some(&file), &SetArgs { set: vec![] }).unwrap();
        let e = check_config(&config).unwrap_err();
        assert!(e.is::<Usage>());
        assert_eq!(
            e.to_string(),
            "configuration refused: config: mode=pingpong needs role=client|server"
        );
        let e = read_config(
            None,
            &SetArgs {
                set: vec!["x".into()],
            },
        )
        .unwrap_err();
        assert!(e.is::<Usage>());
        assert_eq!(e.to_string(), "--set x: expected key=value, found \"x\"");
        let _ = fs::remove_dir_all(&dir);
    }
}
