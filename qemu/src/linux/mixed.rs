//! `cargo qemu mixed`: a Linux guest against an ibkern guest on one emulated fabric. The
//! ibkern node runs its ping-pong as the server (`mode=pingpong role=server verify=1`); the
//! Linux node runs `ibk-rdv-client` (`ibk_rdv_client.c`, rdma-core's verbs) as the client,
//! which speaks ibkern's in-band rendezvous (docs/rendezvous.md) and checks every answer's
//! payload, while the ibkern server checks every request's (`verify=1`).
//!
//! The client is C built on the host with gcc against Debian's libibverbs-dev, the same
//! rdma-core (bookworm) the guest runs, so what links here loads there.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::image::{self, LinuxImage};
use super::run::{judge, node_specs_with_initrd, LinuxRun};
use crate::hca::{report_lines, run_nodes, NodeSpec};
use crate::Exit;

/// The client's source, compiled by the runner for each run.
pub const CLIENT_SOURCE: &str = include_str!("ibk_rdv_client.c");
/// Where the client lives in the guest.
pub const CLIENT_PATH: &str = "usr/bin/ibk-rdv-client";

/// `cargo qemu mixed`.
#[derive(Debug, clap::Args)]
pub struct MixedArgs {
    /// Transports, comma separated (UD, UC); one boot pair per transport.
    #[arg(
        short = 'c',
        long = "connection",
        value_name = "UD,UC",
        default_value = "UD,UC"
    )]
    pub transports: String,
    /// One message size in bytes instead of the sweep (2 B to 2048 B on UD, to 8 MiB on UC),
    /// which is the default.
    #[arg(short = 's', long = "size", value_name = "SIZE")]
    pub size: Option<u32>,
    /// Iterations per size.
    #[arg(
        short = 'n',
        long = "iters",
        value_name = "ITERS",
        default_value_t = 20,
        value_parser = clap::value_parser!(u32).range(5..=1_000_000)
    )]
    pub iters: u32,
    /// Kill both guests and fail after this many seconds per transport.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub timeout: u64,
    /// Output directory (consoles, the client binary) [default: out/mixed].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Linux guest work directory (packages cache, initramfs) [default: out/linux].
    #[arg(long, value_name = "DIR")]
    pub linux_dir: Option<PathBuf>,
    #[command(flatten)]
    pub kernel: crate::cli::KernelArgs,
}

fn say(msg: &str) {
    eprintln!("ibkern-qemu: {msg}");
}

/// Compiles the client into `dir`; a missing compiler or header is a host problem named
/// with its fix.
pub fn build_client(dir: &Path) -> Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let src = dir.join("ibk_rdv_client.c");
    let bin = dir.join("ibk-rdv-client");
    fs::write(&src, CLIENT_SOURCE).with_context(|| format!("writing {}", src.display()))?;
    let out = Command::new("gcc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&bin)
        .arg(&src)
        .args(["-libverbs", "-lm"])
        .output()
        .context("running gcc (install gcc and libibverbs-dev; .ci/setup does)")?;
    if !out.status.success() {
        bail!(
            "building the Linux client failed (it needs gcc and libibverbs-dev; .ci/setup installs them):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(bin)
}

/// The Linux guest's script for one transport.
pub fn client_script(transport: &str, peer_lid: u16, size: Option<u32>, iters: u32) -> String {
    let sizes = size.map_or("-a".to_string(), |s| format!("-s {s}"));
    format!("ibk_run /{CLIENT_PATH} -c {transport} -l {peer_lid} {sizes} -n {iters} -t 2000\n")
}

/// Runs every transport; exit 0 only if both sides passed each.
pub fn mixed_command(args: MixedArgs) -> Result<Exit> {
    let workspace = crate::host::Workspace::locate();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| workspace.root.join("out/mixed"));
    let transports: Vec<String> = args
        .transports
        .split(',')
        .map(|t| t.trim().to_ascii_uppercase())
        .filter(|t| !t.is_empty())
        .collect();
    if transports.is_empty() {
        bail!("-c: no transport given (UD, UC)");
    }
    for t in &transports {
        if t != "UD" && t != "UC" {
            bail!("-c: unknown transport {t:?} (UD or UC)");
        }
    }
    if let Some(s) = args.size {
        if !(2..=8 << 20).contains(&s) {
            bail!("-s: {s} is outside 2..=8388608 bytes");
        }
        if s > 2048 && transports.iter().any(|t| t == "UD") {
            bail!("-s: {s} is larger than the UD MTU both sides use on ConnectX-3 (2048)");
        }
    }
    let linux_dir = args
        .linux_dir
        .clone()
        .unwrap_or_else(|| workspace.root.join("out/linux"));
    let image = image::build(&linux_dir)?;
    let client = fs::read(build_client(&out)?)?;
    let mut exit = Exit::Success;
    for t in &transports {
        let e = run_one(&args, &image, &client, t, &out)?;
        if exit == Exit::Success {
            exit = e;
        }
    }
    say(&format!(
        "mixed: {}",
        if exit == Exit::Success {
            "PASS"
        } else {
            "FAIL"
        }
    ));
    Ok(exit)
}

fn run_one(
    args: &MixedArgs,
    image: &LinuxImage,
    client: &[u8],
    transport: &str,
    out: &Path,
) -> Result<Exit> {
    // Node 0: ibkern, the server (the fabric's first HCA gets the first LID).
    let ibkern_lid = sim::Fabric::sm_lid_for(0, 1);
    let mut config = boot::Config::new();
    for (k, v) in [
        ("mode", "pingpong"),
        ("role", "server"),
        ("hca_irq", "msix"),
        ("transport", transport),
        ("iters", &args.iters.to_string()),
        ("timeout_ms", "2000"),
        ("verify", "1"),
    ] {
        config.set(k, v)?;
    }
    config.set(
        "size",
        &args.size.map_or("all".to_string(), |s| s.to_string()),
    )?;
    let dir = out.join(format!("{}-ibkern", transport.to_ascii_lowercase()));
    fs::create_dir_all(&dir)?;
    let guest = crate::cli::GuestArgs {
        firmware: crate::machine::Firmware::Bios,
        accel: crate::machine::Accel::Tcg,
        machine: crate::machine::Machine::Q35,
        cpu: None,
        qemu: None,
        ovmf: crate::command::DEFAULT_OVMF.into(),
    };
    let command = crate::cli::prepare_guest(&guest, &args.kernel, &config, &dir)?;
    let mut specs = vec![NodeSpec {
        name: "ibkern".into(),
        command,
        profile: sim::DeviceProfile::default(),
    }];
    // Node 1: Linux, the client.
    let run = LinuxRun {
        guests: 1,
        msix: true,
        machine: crate::machine::Machine::Pc,
        script: client_script(transport, ibkern_lid, args.size, args.iters),
        timeout: Duration::from_secs(args.timeout),
        test_timeout: args.timeout,
        link_ports: [0, 0],
    };
    let work = out.join(format!("{}-linux", transport.to_ascii_lowercase()));
    fs::create_dir_all(&work)?;
    let initrd = image::with_script_and_files(
        image,
        &run.script,
        &[(CLIENT_PATH, 0o755, client)],
        &work.join("initrd-run.cpio"),
    )?;
    let mut linux = node_specs_with_initrd(image, &run, &initrd)?;
    let mut linux_spec = linux.remove(0);
    linux_spec.name = "linux".into();
    specs.push(linux_spec);
    say(&format!(
        "{transport}: booting an ibkern server and a Linux client on one fabric"
    ));
    let start = Instant::now();
    let mut nodes = run_nodes(specs, run.timeout, &mut |_, _, _, _| {})?;
    say(&format!(
        "{transport}: finished in {:.1} s",
        start.elapsed().as_secs_f64()
    ));
    let linux = judge(nodes.remove(1), sim::Fabric::sm_lid_for(1, 1));
    let ibkern = nodes.remove(0);
    let lower = transport.to_ascii_lowercase();
    fs::write(out.join(format!("{lower}-ibkern.log")), &ibkern.console)?;
    fs::write(out.join(format!("{lower}-linux.log")), &linux.node.console)?;
    for line in report_lines(&ibkern) {
        say(&format!("{transport} {line}"));
    }
    let mut exit = Exit::Success;
    let ibkern_exit = Exit::for_guest(&ibkern.exit, true);
    let pass_line = ibkern
        .console
        .lines()
        .find(|l| l.starts_with("pingpong: PASS") || l.starts_with("pingpong: FAIL"));
    say(&format!(
        "{transport} ibkern server: {} ({})",
        pass_line.unwrap_or("no pingpong verdict on the console"),
        ibkern.exit
    ));
    if ibkern_exit != Exit::Success || !ibkern.violations.is_empty() {
        exit = if ibkern_exit == Exit::Success {
            Exit::GuestFailed
        } else {
            ibkern_exit
        };
    }
    let client_pass = linux
        .node
        .console
        .lines()
        .any(|l| l.contains("ibk-rdv-client: PASS"));
    for line in linux.node.console.lines() {
        if line.contains("ibk-rdv-client: ") {
            say(&format!("{transport} linux: {line}"));
        }
    }
    let o = super::run::LinuxOutcome {
        guests: vec![linux],
        elapsed: start.elapsed(),
    };
    for line in o.report() {
        say(&format!("{transport} {line}"));
    }
    if !(o.passed() && client_pass) {
        exit = if o.timed_out() {
            Exit::Timeout
        } else if exit == Exit::Success {
            Exit::GuestFailed
        } else {
            exit
        };
    }
    Ok(exit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_names_the_transport_peer_sizes_and_iterations() {
        assert_eq!(
            client_script("UC", 2, None, 20),
            "ibk_run /usr/bin/ibk-rdv-client -c UC -l 2 -a -n 20 -t 2000\n"
        );
        assert_eq!(
            client_script("UD", 2, Some(64), 50),
            "ibk_run /usr/bin/ibk-rdv-client -c UD -l 2 -s 64 -n 50 -t 2000\n"
        );
    }
}
