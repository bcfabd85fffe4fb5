//! One guest ready to boot: the host checked (QEMU, OVMF, KVM), the kernel built or given,
//! the configuration packed into the boot medium the firmware wants, and the QEMU command.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use boot::{Config, ImageBuilder, LoaderLog};

use crate::args::{GuestArgs, KernelArgs};
use crate::command::{BootMedium, QemuCommand};
use crate::host::{self, Workspace};
use crate::kernel_config::check_config;
use crate::machine::{Accel, Firmware};

/// The image builder for the kernel `args` name (built here unless given) and its loader log.
pub(crate) fn image_builder(workspace: &Workspace, args: &KernelArgs) -> Result<ImageBuilder> {
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
pub(crate) fn existing_pxe_root(
    guest: &GuestArgs,
    root: &Path,
    mac: Option<[u8; 6]>,
) -> Result<QemuCommand> {
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

/// A guest's boot set-up short of its configuration: the host checked for it and the kernel
/// built (or given). [`GuestBuilder::command`] packs one configuration into the boot medium;
/// a later configuration (a peer's address learnt at run time) only rewrites the images.
pub(crate) struct GuestBuilder {
    guest: GuestArgs,
    qemu: PathBuf,
    builder: ImageBuilder,
}

impl GuestBuilder {
    /// Checks the host for `guest` and builds (or takes) the kernel.
    pub(crate) fn new(guest: &GuestArgs, kernel: &KernelArgs) -> Result<GuestBuilder> {
        let qemu = check_host(guest)?;
        let builder = image_builder(&Workspace::locate(), kernel)?;
        Ok(GuestBuilder {
            guest: guest.clone(),
            qemu,
            builder,
        })
    }

    /// Checks `config`, writes it and the boot medium into `out` and returns the command.
    pub(crate) fn command(&self, config: &Config, out: &Path) -> Result<QemuCommand> {
        check_config(config)?;
        let console = config.console;
        let guest = &self.guest;
        let builder = &self.builder;
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
        let mut command = guest_command(guest, self.qemu.clone(), boot);
        command.console = console;
        Ok(command)
    }
}

/// Tools and images for one guest, ready to boot.
pub(crate) fn prepare_guest(
    guest: &GuestArgs,
    kernel: &KernelArgs,
    config: &Config,
    out: &Path,
) -> Result<QemuCommand> {
    // Check the configuration and the host before spending time on builds.
    check_config(config)?;
    GuestBuilder::new(guest, kernel)?.command(config, out)
}
