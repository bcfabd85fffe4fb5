//! One guest ready to boot: the host checked (QEMU, OVMF, KVM), the kernel built or given,
//! the configuration packed into the boot medium the firmware wants, and the QEMU command.
//!
//! A run that keeps its results (`pingpong`, `compare`, `node`, `mixed`) keeps each node's
//! configuration beside them and builds the boot media (about 8.5 MB of disk image per node)
//! in a [`BootMedia`] directory of its own, removed when the run ends: they are the kernel
//! and that configuration packed for the firmware, nothing a result needs.

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

/// A temporary directory for a run's boot media (disk images, PXE roots), outside its run
/// directory; removed when dropped (also on an error's or a signal's way out).
pub(crate) struct BootMedia {
    dir: PathBuf,
}

impl BootMedia {
    pub(crate) fn new() -> Result<BootMedia> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("ibkern-media-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(BootMedia { dir })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for BootMedia {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A guest's boot set-up short of its configuration: the host checked for it and the kernel
/// built (or given). [`GuestBuilder::command`] packs one configuration into the boot medium;
/// a later configuration (a peer's address learnt at run time) only rewrites the images.
pub(crate) struct GuestBuilder {
    guest: GuestArgs,
    qemu: PathBuf,
    builder: ImageBuilder,
    /// Where the boot media go (`None`: beside the configuration).
    media: Option<PathBuf>,
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
            media: None,
        })
    }

    /// The boot media go into `media` (a subdirectory per configuration directory) instead
    /// of beside the configuration.
    pub(crate) fn media_in(mut self, media: &BootMedia) -> GuestBuilder {
        self.media = Some(media.path().to_path_buf());
        self
    }

    /// Checks `config`, writes it into `out` and the boot medium into `out` (or the media
    /// directory, [`GuestBuilder::media_in`]) and returns the command.
    pub(crate) fn command(&self, config: &Config, out: &Path) -> Result<QemuCommand> {
        check_config(config)?;
        let console = config.console;
        let guest = &self.guest;
        let builder = &self.builder;
        let config_path = out.join(boot::CONFIG_FILE);
        ImageBuilder::write_config(config, &config_path)?;
        let media = match &self.media {
            Some(m) => m.join(out.file_name().unwrap_or_default()),
            None => out.to_path_buf(),
        };
        fs::create_dir_all(&media).with_context(|| format!("creating {}", media.display()))?;
        let out = media.as_path();
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

/// Tools and images for one guest, ready to boot: the configuration and the boot medium in
/// `out`, or the medium in `media` when given.
pub(crate) fn prepare_guest(
    guest: &GuestArgs,
    kernel: &KernelArgs,
    config: &Config,
    out: &Path,
    media: Option<&BootMedia>,
) -> Result<QemuCommand> {
    // Check the configuration and the host before spending time on builds.
    check_config(config)?;
    let builder = GuestBuilder::new(guest, kernel)?;
    match media {
        Some(m) => builder.media_in(m).command(config, out),
        None => builder.command(config, out),
    }
}
