//! `cargo qemu image`: boot images and PXE roots carrying a configuration, for one node or
//! for several (`--node NODE=FILE`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;

use crate::args::{KernelArgs, SetArgs};
use crate::host::Workspace;
use crate::kernel_config::{check_config, read_config};
use crate::prepare::image_builder;
use crate::Exit;

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

pub fn image_command(args: ImageArgs) -> Result<Exit> {
    let workspace = Workspace::locate();
    let out = args.out.unwrap_or_else(|| workspace.root.join("out/image"));
    crate::args::check_out_dir(&out)?;
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
        let Some((name, file)) = node.split_once('=') else {
            crate::usage!("--node {node}: expected NODE=FILE");
        };
        let dir = match boot::node_dir_name(name) {
            Ok(dir) => dir,
            Err(e) => crate::usage!("--node {node}: {e:#}"),
        };
        if parsed.iter().any(|(d, _)| *d == dir) {
            crate::usage!("--node {node}: node {name} given twice");
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
