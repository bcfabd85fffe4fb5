//! The subcommands that boot one guest without an emulated HCA: `selftest` (pass only on
//! the kernel's own verdict), `run` (the console on this terminal, optionally with host PCI
//! functions passed through) and `vfio-check` (only the pre-flight checks of `run --vfio`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Args;

use crate::args::{GuestArgs, KernelArgs, SetArgs};
use crate::command::DEFAULT_MEMORY_MIB;
use crate::guest::{self, Echo, Input, RunOptions};
use crate::host::Workspace;
use crate::kernel_config::{apply_set, check_config, read_config, SetBy};
use crate::machine::{expected_pci, Accel};
use crate::prepare::{existing_pxe_root, prepare_guest};
use crate::selftest;
use crate::vfio::{self, Bdf, HostRoots};
use crate::Exit;

#[derive(Debug, Args)]
pub struct SelftestArgs {
    #[command(flatten)]
    pub guest: GuestArgs,
    /// Kill QEMU and fail if the kernel has not finished after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 120, value_parser = crate::args::parse_timeout)]
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
    #[arg(long, value_name = "SECS", value_parser = crate::args::parse_timeout)]
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

fn mac_arg(s: &str) -> std::result::Result<[u8; 6], String> {
    boot::parse_mac(s).ok_or_else(|| format!("{s:?} is not a MAC address (aa:bb:cc:dd:ee:ff)"))
}

/// The key `selftest` sets itself: `--set` may not give it. (Another `mode` is allowed:
/// the system tests boot `mode=fault` and `mode=idle` through it to see their verdicts.)
const SELFTEST_OWNED: &[(&str, SetBy)] = &[(
    "expect_pci",
    SetBy::Runner("the devices of --machine and --firmware"),
)];

pub fn selftest_command(args: SelftestArgs) -> Result<Exit> {
    let workspace = Workspace::locate();
    let guest = &args.guest;
    let mut config = ibconfig::Config::default();
    let expected: Vec<ibconfig::PciId> = expected_pci(guest.machine, guest.firmware);
    if let Err(e) = config.set_expect_pci(&expected) {
        anyhow::bail!("the expected PCI devices of this machine: {e}");
    }
    apply_set(&mut config, &args.set, SELFTEST_OWNED, "selftest")?;
    check_config(&config)?;
    let out = args.out.unwrap_or_else(|| workspace.work_dir("selftest"));
    crate::args::check_out_dir(&out)?;
    let command = prepare_guest(guest, &args.kernel, &config, &out, None)?;
    let timeout = Duration::from_secs(args.timeout);
    say!("{}", command.shell_line());
    say!("config: {}", boot::one_line(&config));
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

pub fn run_command(args: RunArgs) -> Result<Exit> {
    let workspace = Workspace::locate();
    let config = read_config(args.config.as_deref(), &args.set)?;
    if args.tftp_root.is_none() {
        check_config(&config)?;
    }
    let out = args.out.unwrap_or_else(|| workspace.work_dir("run"));
    crate::args::check_out_dir(&out)?;
    if !args.vfio.is_empty() {
        if args.guest.accel != Accel::Kvm {
            crate::usage!("--vfio needs --accel kvm (VFIO passthrough is not available under TCG)");
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
    let mut command = match &args.tftp_root {
        Some(root) => existing_pxe_root(&args.guest, root, args.mac)?,
        None => prepare_guest(&args.guest, &args.kernel, &config, &out, None)?,
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

pub fn vfio_check_command(args: VfioCheckArgs) -> Result<Exit> {
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
