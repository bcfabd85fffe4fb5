//! `ibkern-delegate`: serves ibkern nodes over InfiniBand (docs/delegation.md).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use ibkern_delegate::check::{check, CheckConfig};
use ibkern_delegate::rc::Hca;
use ibkern_delegate::root::Root;
use ibkern_delegate::serve::{serve, ServeConfig};
use ibkern_delegate::service::{Delegate, Limits};

/// Serve ibkern nodes over InfiniBand: files beneath a root directory, the clock, log lines,
/// and regions (a file or anonymous memory registered for the nodes' one-sided RDMA).
///
/// Nodes connect through the rendezvous QP printed at start ("listening on LID ...
/// rendezvous QPN ..."), then call over RC. Exit status: 0 served until --idle-exit, 1 a
/// failure of the HCA or the root, 2 a bad command line.
#[derive(Parser)]
#[command(
    name = "ibkern-delegate",
    version,
    after_help = "Examples:\n  ibkern-delegate --root /srv/ibkern\n  ibkern-delegate --root /srv/ibkern --read-only --max-nodes 4\n  ibkern-delegate check --peer-lid 2 --peer-qpn 0x208"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// The directory served; every path a node names stays beneath it (required unless a
    /// command is given).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// RDMA device (default: the first one).
    #[arg(long, short = 'd', global = true, value_name = "NAME")]
    device: Option<String>,
    /// HCA port.
    #[arg(long, short = 'i', global = true, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    port: u8,
    /// Nodes served at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    max_nodes: u32,
    /// Open files per node.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65536))]
    max_open: u32,
    /// Regions per node.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(0..=4096))]
    max_regions: u32,
    /// MiB of all of one node's regions together.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(0..=1 << 20))]
    max_region_mib: u64,
    /// Longest lease granted, in seconds: a node silent for longer is released.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=86400))]
    lease_max_s: u64,
    /// Calls a node may have outstanding (receives posted per node).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=256))]
    credits: u16,
    /// Serve the root read-only (file regions readable only).
    #[arg(long)]
    read_only: bool,
    /// Exit (status 0) once no node has been connected for this many seconds.
    #[arg(long, value_name = "SECS")]
    idle_exit: Option<u64>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Connect to a delegate as a node does and run every op once (a Linux test client).
    Check {
        /// The delegate's LID.
        #[arg(long, value_parser = parse_u32)]
        peer_lid: u32,
        /// The delegate's rendezvous QPN (its "listening" line).
        #[arg(long, value_parser = parse_u32)]
        peer_qpn: u32,
        /// Give up after this many seconds without an answer.
        #[arg(long, default_value_t = 30)]
        timeout_s: u64,
    },
}

fn parse_u32(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("{s}: {e}"))
}

/// Parses the command line; `--root` is required unless a command is given.
fn parse(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<Cli, clap::Error> {
    use clap::CommandFactory;
    let cli = Cli::try_parse_from(args)?;
    if cli.command.is_none() && cli.root.is_none() {
        return Err(Cli::command().error(
            clap::error::ErrorKind::MissingRequiredArgument,
            "--root <DIR> is required",
        ));
    }
    Ok(cli)
}

fn main() -> ExitCode {
    let cli = parse(std::env::args_os()).unwrap_or_else(|e| e.exit());
    let run = || -> std::io::Result<()> {
        let hca = Hca::open(cli.device.as_deref(), cli.port)?;
        match cli.command {
            Some(Command::Check {
                peer_lid,
                peer_qpn,
                timeout_s,
            }) => {
                let lid = u16::try_from(peer_lid)
                    .map_err(|_| std::io::Error::other("--peer-lid over 16 bits"))?;
                check(
                    &hca,
                    &CheckConfig {
                        peer_lid: lid,
                        peer_qpn,
                        timeout: Duration::from_secs(timeout_s),
                    },
                )
            }
            None => {
                let root_path = cli
                    .root
                    .clone()
                    .expect("clap requires --root without a command");
                let root = Root::open(&root_path).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("root {}: {e}", root_path.display()))
                })?;
                let limits = Limits {
                    max_nodes: cli.max_nodes as usize,
                    max_open: cli.max_open as usize,
                    max_regions: cli.max_regions as usize,
                    max_region_bytes: cli.max_region_mib << 20,
                    lease_min: Duration::from_secs(1),
                    lease_max: Duration::from_secs(cli.lease_max_s),
                    read_only: cli.read_only,
                };
                let log = Box::new(|line: &str| println!("ibkern-delegate: {line}"));
                let mut delegate = Delegate::new(root, limits, log);
                let cfg = ServeConfig {
                    credits: cli.credits,
                    idle_exit: cli.idle_exit.map(Duration::from_secs),
                };
                serve(&hca, &mut delegate, cfg, &root_path.display().to_string())
            }
        }
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ibkern-delegate: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn args(a: &[&str]) -> Vec<std::ffi::OsString> {
        a.iter().map(|s| s.into()).collect()
    }

    #[test]
    fn the_command_line_is_consistent_and_refuses_what_it_should() {
        Cli::command().debug_assert();
        assert!(
            parse(args(&["ibkern-delegate"])).is_err(),
            "--root is required"
        );
        assert!(parse(args(&["ibkern-delegate", "--root", "r", "--credits", "0"])).is_err());
        assert!(parse(args(&["ibkern-delegate", "--root", "r", "--port", "3"])).is_err());
        let check = [
            "ibkern-delegate",
            "check",
            "--peer-lid",
            "2",
            "--peer-qpn",
            "0x208",
        ];
        let c = parse(args(&check)).unwrap();
        let want = Command::Check {
            peer_lid: 2,
            peer_qpn: 0x208,
            timeout_s: 30,
        };
        assert!(matches!(c.command, Some(w) if format!("{w:?}") == format!("{want:?}")));
        let bad = [
            "ibkern-delegate",
            "check",
            "--peer-lid",
            "2",
            "--peer-qpn",
            "0xzz",
        ];
        assert!(parse(args(&bad)).is_err());
        let serve = [
            "ibkern-delegate",
            "--root",
            "r",
            "--read-only",
            "--idle-exit",
            "5",
        ];
        let c = parse(args(&serve)).unwrap();
        assert!(c.read_only && c.idle_exit == Some(5) && c.credits == 16);
    }
}
