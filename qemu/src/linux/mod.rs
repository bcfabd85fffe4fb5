//! The Linux guest: Debian's own kernel, mlx4 modules, rdma-core and perftest,
//! booted under QEMU with the emulated ConnectX-3 attached through `sim::mpqemu`, so that
//! software nobody here wrote drives the model. See docs/linux-guest.md.
//!
//! - `cargo qemu linux-image`: download (cached) and unpack the packages, write the
//!   initramfs ([`image::build`]).
//! - `cargo qemu linux`: boot one guest or a pair on one fabric and judge the run
//!   ([`run::run_linux`]).
//! - `cargo qemu mixed`: a Linux node (`ibk_rdv.c` on rdma-core's verbs) against an ibkern
//!   node on one fabric, the Linux side as client or server ([`mixed::mixed_command`]).

pub mod cpio;
pub mod delegate;
pub mod image;
pub mod mixed;
pub mod modules;
pub mod run;
pub mod scripts;

use std::path::PathBuf;

use anyhow::Result;

use crate::machine::Machine;

/// `cargo qemu linux-image`.
#[derive(Debug, clap::Args)]
pub struct LinuxImageArgs {
    /// Work directory (debs cache, unpacked root, initramfs) [default: out/linux in the
    /// workspace].
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// `cargo qemu linux`.
#[derive(Debug, clap::Args)]
pub struct LinuxArgs {
    /// Guests on the fabric: 1 (module load and ibv_devinfo) or 2 (perftest pair over a
    /// loopback Ethernet link).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub guests: u8,
    /// Shell script each guest runs after loading the modules (sourced after
    /// /etc/ibkern/lib.sh; `ibk_run`, `ibk_pair` available) [default: ibv_devinfo -v for one
    /// guest, the perftest/pingpong suite for two].
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// Load mlx4_core with `msi_x=0` (legacy INTx) instead of MSI-X.
    #[arg(long)]
    pub intx: bool,
    /// QEMU machine. `pc` by default: there the INTx line Linux takes from ACPI is the one
    /// the firmware wrote to config space (on q35 it is not; see docs/mpqemu.md).
    #[arg(long, value_enum, default_value = "pc")]
    pub machine: Machine,
    /// Kill the guests after this many seconds.
    #[arg(long, default_value_t = 600, value_parser = crate::args::parse_timeout)]
    pub timeout: u64,
    /// Seconds each test program in the guest may take.
    #[arg(long, default_value_t = 120)]
    pub test_timeout: u64,
    /// Work directory, as for linux-image.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Record the model's behaviour trace of every guest's HCA and write the union (one set
    /// of observations for the run) to FILE (docs/model.md, "Behaviour trace").
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Stream the guests' consoles to stdout also when it is a terminal (they are always in
    /// the run directory's log files, and streamed when stdout is not a terminal).
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Build the Linux delegate and add it to the guests as /usr/bin/ibkern-delegate
    /// (docs/delegation.md), for a script to run.
    #[arg(long)]
    pub delegate: bool,
}

fn work_dir(out: &Option<PathBuf>) -> PathBuf {
    out.clone()
        .unwrap_or_else(|| crate::host::Workspace::locate().root.join("out/linux"))
}

/// `cargo qemu linux-image`.
pub fn linux_image_command(args: LinuxImageArgs) -> Result<crate::Exit> {
    let dir = work_dir(&args.out);
    let image = image::build(&dir)?;
    eprintln!("ibkern-qemu: Linux {} guest:", image.release);
    eprintln!("ibkern-qemu:   kernel {}", image.kernel.display());
    eprintln!("ibkern-qemu:   initramfs {}", image.initrd.display());
    eprintln!("ibkern-qemu:   modules {}", image.modules.join(" "));
    for deb in &image.debs {
        eprintln!("ibkern-qemu:   from {}", deb.display());
    }
    Ok(crate::Exit::Success)
}

/// `cargo qemu linux`.
pub fn linux_command(args: LinuxArgs) -> Result<crate::Exit> {
    let dir = work_dir(&args.out);
    let image = image::build(&dir)?;
    let script = match &args.script {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?,
        None if args.guests == 1 => scripts::DEFAULT_ONE.to_string(),
        None => scripts::DEFAULT_PAIR.to_string(),
    };
    let options = run::LinuxRun {
        guests: usize::from(args.guests),
        msix: !args.intx,
        machine: args.machine,
        script,
        timeout: std::time::Duration::from_secs(args.timeout),
        test_timeout: args.test_timeout,
        link_ports: run::free_ports()?,
        trace: args.trace.is_some(),
    };
    let files = if args.delegate {
        let bin = delegate::build(&crate::host::Workspace::locate(), true)?;
        let bytes =
            std::fs::read(&bin).map_err(|e| anyhow::anyhow!("reading {}: {e}", bin.display()))?;
        vec![(delegate::GUEST_PATH, 0o755, bytes)]
    } else {
        Vec::new()
    };
    let progress = crate::progress::start_guarded(
        vec![crate::progress::RunPlan {
            name: format!("Linux, {} guest(s)", args.guests),
            sizes: Vec::new(),
        }],
        args.verbose,
    );
    crate::progress::begin_run(&format!("Linux, {} guest(s)", args.guests));
    let outcome = run::run_linux_with_files(&image, &options, &dir, &files)?;
    drop(progress);
    for line in outcome.report() {
        eprintln!("ibkern-qemu: {line}");
    }
    if let Some(path) = &args.trace {
        let text = outcome.trace();
        std::fs::write(path, &text)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
        eprintln!(
            "ibkern-qemu: behaviour trace: {} ({} observations)",
            path.display(),
            text.lines().count()
        );
    }
    Ok(if outcome.passed() {
        crate::Exit::Success
    } else if outcome.timed_out() {
        crate::Exit::Timeout
    } else {
        crate::Exit::GuestFailed
    })
}
