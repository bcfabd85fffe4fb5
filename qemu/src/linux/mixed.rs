//! `cargo qemu mixed`: a Linux guest against an ibkern guest on one emulated fabric, in
//! either direction. The Linux node runs `ibk-rdv` (`ibk_rdv.c`, rdma-core's verbs), which
//! speaks ibkern's in-band rendezvous (docs/rendezvous.md) and checks every payload it
//! receives; the ibkern node runs its ping-pong with `verify=1` and checks every payload too.
//!
//! - `--linux-role client` (default): ibkern is the server at the well-known rendezvous QPN
//!   and boots with the Linux client on one fabric; the client is given the server's LID.
//! - `--linux-role server`: Linux's verbs cannot choose a QPN, so the Linux server boots
//!   first and prints the LID and rendezvous QPN it got; the runner then writes the ibkern
//!   client's config (`peer_lid`, `peer_rdv_qpn`) and boots it on the same fabric.
//!
//! The program is C built on the host with gcc against Debian's libibverbs-dev, the same
//! rdma-core (bookworm) the guest runs, so what links here loads there.

use crate::say;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::image::{self, LinuxImage};
use super::run::{judge, node_specs_with_initrd, LinuxRun};
use crate::guest::GuestExit;
use crate::hca::{report_lines, run_nodes, run_nodes_staged, LaterNode, NodeOutcome, NodeSpec};
use crate::prepare::GuestBuilder;
use crate::Exit;

/// The Linux program's source, compiled by the runner for each run.
pub const PROGRAM_SOURCE: &str = include_str!("ibk_rdv.c");
/// Where the program lives in the guest.
pub const PROGRAM_PATH: &str = "usr/bin/ibk-rdv";
/// What the Linux server prints once it listens (its LID and rendezvous QPN follow).
pub const LISTENING: &str = "ibk-rdv server: listening on LID ";

/// Which side the Linux node takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LinuxRole {
    /// Linux runs the client, ibkern the server (both boot at once).
    Client,
    /// Linux runs the server; the ibkern client boots once the Linux server has printed
    /// its rendezvous QPN.
    Server,
}

impl LinuxRole {
    fn name(self) -> &'static str {
        match self {
            LinuxRole::Client => "client",
            LinuxRole::Server => "server",
        }
    }
    fn ibkern(self) -> &'static str {
        match self {
            LinuxRole::Client => "server",
            LinuxRole::Server => "client",
        }
    }
}

/// `cargo qemu mixed`.
#[derive(Debug, clap::Args)]
pub struct MixedArgs {
    #[command(flatten)]
    pub sweep: crate::args::SweepArgs,
    /// Device profiles: the ibkern node's HCA, then the Linux node's (`--profile A,B`; one
    /// name gives both).
    #[command(flatten)]
    pub profile: crate::device_profile::ProfileArgs,
    /// The Linux node's role; ibkern takes the other one.
    #[arg(long, value_enum, value_name = "ROLE", default_value = "client")]
    pub linux_role: LinuxRole,
    /// With `--linux-role server`: fail if the Linux server has not printed its rendezvous
    /// QPN this many seconds after its QEMU started.
    #[arg(long, value_name = "SECS", default_value_t = 180)]
    pub listen_timeout: u64,
    /// Kill both guests and fail after this many seconds per transport.
    #[arg(long, value_name = "SECS", default_value_t = 600, value_parser = crate::args::parse_timeout)]
    pub timeout: u64,
    /// Base directory: this run's consoles and client binary go to DIR/<UTC start time>/,
    /// DIR/latest points to the newest run [default: out/mixed].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Linux guest work directory (packages cache, initramfs) [default: out/linux].
    #[arg(long, value_name = "DIR")]
    pub linux_dir: Option<PathBuf>,
    /// Stream the guests' consoles to stdout also when it is a terminal (they are always in
    /// the run directory's log files, and streamed when stdout is not a terminal).
    #[arg(long, short = 'v')]
    pub verbose: bool,
    #[command(flatten)]
    pub kernel: crate::args::KernelArgs,
}

/// Compiles the Linux program into `dir`; a missing compiler or header is a host problem
/// named with its fix.
pub fn build_program(dir: &Path) -> Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let src = dir.join("ibk_rdv.c");
    let bin = dir.join("ibk-rdv");
    fs::write(&src, PROGRAM_SOURCE).with_context(|| format!("writing {}", src.display()))?;
    let out = Command::new("gcc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&bin)
        .arg(&src)
        .args(["-libverbs", "-lm"])
        .output()
        .context("running gcc (install gcc and libibverbs-dev; .ci/setup does)")?;
    if !out.status.success() {
        bail!(
            "building the Linux program failed (it needs gcc and libibverbs-dev; .ci/setup installs them):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(bin)
}

/// The Linux guest's script for one transport, as the client of an ibkern server.
pub fn client_script(
    transport: &str,
    peer_lid: u16,
    peer_rdv_qpn: u32,
    size: Option<u32>,
    iters: u32,
) -> String {
    let sizes = size.map_or("-a".to_string(), |s| format!("-s {s}"));
    format!(
        "ibk_run /{PROGRAM_PATH} -r client -c {transport} -l {peer_lid} -q {peer_rdv_qpn:#x} {sizes} -n {iters} -t 2000\n"
    )
}

/// The Linux guest's script for one transport, as the server of an ibkern client; it waits
/// for the client at most `peer_timeout` seconds.
pub fn server_script(transport: &str, size: Option<u32>, iters: u32, peer_timeout: u64) -> String {
    let sizes = size.map_or("-a".to_string(), |s| format!("-s {s}"));
    // The program accepts 1 s to a day.
    let peer_timeout = peer_timeout.clamp(1, 86_400);
    format!(
        "ibk_run /{PROGRAM_PATH} -r server -c {transport} {sizes} -n {iters} -t 2000 -p {peer_timeout}\n"
    )
}

/// The LID and rendezvous QPN from the Linux server's listening line
/// (`ibk-rdv server: listening on LID 0x0002 rendezvous QPN 0x000208`, maybe prefixed).
pub fn parse_listening(line: &str) -> Option<(u16, u32)> {
    let rest = &line[line.find(LISTENING)? + LISTENING.len()..];
    let (lid, rest) = rest.split_once(" rendezvous QPN ")?;
    let hex = |s: &str| s.trim().strip_prefix("0x").map(str::to_string);
    let lid = u16::from_str_radix(&hex(lid)?, 16).ok()?;
    let qpn = u32::from_str_radix(&hex(rest)?, 16).ok()?;
    // The values the ibkern client's `peer_lid` and `peer_rdv_qpn` keys accept.
    use ibconfig::bench::{MAX_UNICAST_LID, QPN_RANGE};
    ((1..=MAX_UNICAST_LID).contains(&lid) && (QPN_RANGE.0..=QPN_RANGE.1).contains(&qpn))
        .then_some((lid, qpn))
}

/// Runs every transport; exit 0 only if both sides passed each.
pub fn mixed_command(args: MixedArgs) -> Result<Exit> {
    let workspace = crate::host::Workspace::locate();
    let transports = crate::compare::send_lat_transports(&args.sweep.transports, args.sweep.size)?;
    if args.listen_timeout == 0 {
        crate::usage!("--listen-timeout: 0 seconds leaves no time to boot the Linux server");
    }
    // The ibkern side's configuration, checked before anything is built or booted (with
    // `--linux-role server` its peer's LID and QPN are added later, and checked again).
    for t in &transports {
        let config = ibkern_config(&args, t, args.linux_role.ibkern(), &[])?;
        crate::kernel_config::check_config(&config)?;
    }
    let linux_dir = args
        .linux_dir
        .clone()
        .unwrap_or_else(|| workspace.root.join("out/linux"));
    let base = args
        .out
        .clone()
        .unwrap_or_else(|| workspace.root.join("out/mixed"));
    crate::run_dir::check(&base)?;
    let image = image::build(&linux_dir)?;
    // The host checked and the kernel built once; each boot only writes its images, outside
    // the run directory.
    let media = crate::prepare::BootMedia::new()?;
    let guest =
        GuestBuilder::new(&crate::args::GuestArgs::emulated(), &args.kernel)?.media_in(&media);
    let out = crate::run_dir::create(&base)?;
    say(&format!(
        "this run's files: {} ({} points to it)",
        out.display(),
        base.join(crate::run_dir::LATEST).display()
    ));
    let program = fs::read(build_program(&out)?)?;
    let mut exit = Exit::Success;
    let plan = transports
        .iter()
        .map(|t| crate::progress::RunPlan {
            name: t.clone(),
            sizes: crate::progress::planned_sizes(
                t,
                args.sweep.size.is_none(),
                args.sweep.size,
                args.sweep.iters,
                &[],
            ),
        })
        .collect();
    let _progress = crate::progress::start_guarded(plan, args.verbose);
    for t in &transports {
        crate::progress::begin_run(t);
        let e = match args.linux_role {
            LinuxRole::Client => run_linux_client(&guest, &args, &image, &program, t, &out)?,
            LinuxRole::Server => run_linux_server(&guest, &args, &image, &program, t, &out)?,
        };
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

/// The ibkern node's configuration: its ping-pong in `role` with the run's parameters plus
/// `extra` keys, each checked as it is set.
fn ibkern_config(
    args: &MixedArgs,
    transport: &str,
    role: &str,
    extra: &[(&str, String)],
) -> Result<ibconfig::Config> {
    let (Some(transport), Some(role)) = (
        ibconfig::Transport::from_name(transport),
        ibconfig::Role::from_name(role),
    ) else {
        anyhow::bail!("transport {transport:?}, role {role:?}");
    };
    let mut config = ibconfig::Config::with_mode(ibconfig::Mode::Pingpong);
    config.hca_irq = ibconfig::HcaIrq::Msix;
    config.set_role(role);
    let b = &mut config.bench;
    b.transport = transport;
    b.iterations = args.sweep.iters;
    b.wait_timeout_ns = 2_000_000_000;
    b.verify = true;
    b.sizes = args
        .sweep
        .size
        .map_or(ibconfig::Sizes::All, ibconfig::Sizes::Single);
    for (k, v) in extra {
        if let Err(e) = config.apply(k, v) {
            anyhow::bail!("{k}={v}: {e:?}");
        }
    }
    Ok(config)
}

/// The ibkern node's QEMU command ([`ibkern_config`]), images written to `dir` by `guest`
/// (whose kernel is built once per run).
fn ibkern_command(
    guest: &GuestBuilder,
    args: &MixedArgs,
    transport: &str,
    role: &str,
    extra: &[(&str, String)],
    dir: &Path,
) -> Result<crate::command::QemuCommand> {
    let config = ibkern_config(args, transport, role, extra)?;
    fs::create_dir_all(dir)?;
    guest.command(&config, dir)
}

/// The Linux node running `script` with the program in its initramfs (written into `work`).
fn linux_spec(
    args: &MixedArgs,
    image: &LinuxImage,
    program: &[u8],
    script: String,
    work: &Path,
) -> Result<NodeSpec> {
    let run = LinuxRun {
        trace: false,
        guests: 1,
        msix: true,
        machine: crate::machine::Machine::Pc,
        script,
        timeout: Duration::from_secs(args.timeout),
        test_timeout: args.timeout,
        link_ports: [0, 0],
        profiles: vec![args.profile.for_node(1)],
    };
    fs::create_dir_all(work)?;
    let initrd = image::with_script_and_files(
        image,
        &run.script,
        &[(PROGRAM_PATH, 0o755, program)],
        &work.join("initrd-run.cpio"),
    )?;
    let mut spec = node_specs_with_initrd(image, &run, &initrd)?.remove(0);
    spec.name = "linux".into();
    Ok(spec)
}

/// Linux client, ibkern server: both boot at once (the server owns the well-known QPN).
fn run_linux_client(
    guest: &GuestBuilder,
    args: &MixedArgs,
    image: &LinuxImage,
    program: &[u8],
    transport: &str,
    out: &Path,
) -> Result<Exit> {
    let lower = transport.to_ascii_lowercase();
    // Node 0: ibkern, the server (the fabric's first HCA gets the first LID).
    let ibkern_lid = sim::Fabric::sm_lid_for(0, 1);
    let command = ibkern_command(
        guest,
        args,
        transport,
        "server",
        &[],
        &out.join(format!("{lower}-ibkern")),
    )?;
    let ibkern = NodeSpec {
        name: "ibkern".into(),
        command,
        profile: args.profile.for_node(0),
        console_log: None,
    };
    // Node 1: Linux, the client. rdma-core does not report the firmware's reserved-QP count,
    // so the runner applies the server's rule to the profile it gives the ibkern node.
    let rdv_qpn = bench::rendezvous::well_known_qpn(ibkern.profile.reserved_qps());
    let script = client_script(
        transport,
        ibkern_lid,
        rdv_qpn,
        args.sweep.size,
        args.sweep.iters,
    );
    let linux = linux_spec(
        args,
        image,
        program,
        script,
        &out.join(format!("{lower}-linux")),
    )?;
    say(&format!(
        "{transport}: booting an ibkern server and a Linux client on one fabric"
    ));
    let start = Instant::now();
    let mut nodes = run_nodes(
        vec![ibkern, linux],
        Duration::from_secs(args.timeout),
        &mut |_, _, _, _| {},
    )?;
    let linux = nodes.remove(1);
    let ibkern = nodes.remove(0);
    verdict(
        transport,
        LinuxRole::Client,
        ibkern,
        linux,
        sim::Fabric::sm_lid_for(1, 1),
        start,
        out,
    )
}

/// Linux server, ibkern client: the Linux server boots first and prints the rendezvous QPN
/// its verbs gave it; then the ibkern client is configured with it and boots on the fabric.
fn run_linux_server(
    guest: &GuestBuilder,
    args: &MixedArgs,
    image: &LinuxImage,
    program: &[u8],
    transport: &str,
    out: &Path,
) -> Result<Exit> {
    let lower = transport.to_ascii_lowercase();
    let ibkern_dir = out.join(format!("{lower}-ibkern"));
    // Write the ibkern images once before any boot (config checks), so a refusal comes
    // before the Linux server boots; the later boot only rewrites them with the peer's
    // address.
    ibkern_command(guest, args, transport, "client", &[], &ibkern_dir)?;
    let script = server_script(transport, args.sweep.size, args.sweep.iters, args.timeout);
    let linux = linux_spec(
        args,
        image,
        program,
        script,
        &out.join(format!("{lower}-linux")),
    )?;
    say(&format!(
        "{transport}: booting a Linux server; the ibkern client follows once it listens"
    ));
    let start = Instant::now();
    let mut spawn = |index: usize, line: &str| -> Option<Result<Vec<NodeSpec>>> {
        if index != 0 || !line.contains(LISTENING) {
            return None;
        }
        let Some((lid, qpn)) = parse_listening(line) else {
            return Some(Err(anyhow::anyhow!(
                "the Linux server's listening line does not parse: {line:?}"
            )));
        };
        say(&format!(
            "{transport}: the Linux server listens on LID {lid:#x}, rendezvous QPN {qpn:#x}: \
             booting the ibkern client with peer_lid={lid:#x} peer_rdv_qpn={qpn:#x}"
        ));
        let extra = [
            ("peer_lid", format!("{lid:#x}")),
            ("peer_rdv_qpn", format!("{qpn:#x}")),
        ];
        Some(
            ibkern_command(guest, args, transport, "client", &extra, &ibkern_dir).map(|command| {
                vec![NodeSpec {
                    name: "ibkern".into(),
                    command,
                    profile: args.profile.for_node(0),
                    console_log: None,
                }]
            }),
        )
    };
    let listen_timeout = Duration::from_secs(args.listen_timeout.min(args.timeout));
    let mut nodes = run_nodes_staged(
        sim::FabricConfig::default(),
        vec![linux],
        Some(LaterNode {
            spawn: Box::new(&mut spawn),
            within: listen_timeout,
        }),
        Duration::from_secs(args.timeout),
        &mut |_, _, _, _| {},
    )?;
    let linux = nodes.remove(0);
    let Some(ibkern) = nodes.pop() else {
        // The ibkern client never booted: say why, with the Linux side's report.
        let timed_out = matches!(linux.exit, GuestExit::TimedOut(_));
        let why = if timed_out {
            format!(
                "the Linux server printed no rendezvous QPN within {} s",
                listen_timeout.as_secs()
            )
        } else {
            "the Linux guest ended before its server listened".to_string()
        };
        say(&format!(
            "{transport}: FAIL: {why}; the ibkern client was not booted"
        ));
        fs::write(out.join(format!("{lower}-linux.log")), &linux.console)?;
        report_linux(
            transport,
            LinuxRole::Server,
            judge(linux, sim::Fabric::sm_lid_for(0, 1)),
            start,
        );
        return Ok(if timed_out {
            Exit::Timeout
        } else {
            Exit::GuestFailed
        });
    };
    verdict(
        transport,
        LinuxRole::Server,
        ibkern,
        linux,
        sim::Fabric::sm_lid_for(0, 1),
        start,
        out,
    )
}

/// Prints the Linux side's program lines and report; true if it passed (guest and program).
fn report_linux(
    transport: &str,
    role: LinuxRole,
    linux: super::run::GuestVerdict,
    start: Instant,
) -> (bool, bool) {
    let tag = format!("ibk-rdv {}: ", role.name());
    let program_pass = linux
        .node
        .console
        .lines()
        .any(|l| l.contains(&format!("{tag}PASS")));
    for line in linux.node.console.lines() {
        if line.contains(&tag) {
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
    (o.passed() && program_pass, o.timed_out())
}

/// Judges one transport's pair: both sides' verdicts, the model's records, the logs.
fn verdict(
    transport: &str,
    role: LinuxRole,
    ibkern: NodeOutcome,
    linux: NodeOutcome,
    linux_lid: u16,
    start: Instant,
    out: &Path,
) -> Result<Exit> {
    say(&format!(
        "{transport}: finished in {:.1} s",
        start.elapsed().as_secs_f64()
    ));
    let lower = transport.to_ascii_lowercase();
    let linux = judge(linux, linux_lid);
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
        "{transport} ibkern {}: {} ({})",
        role.ibkern(),
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
    let (linux_pass, timed_out) = report_linux(transport, role, linux, start);
    if !linux_pass {
        exit = if timed_out {
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
    fn scripts_name_the_role_transport_peer_sizes_and_iterations() {
        assert_eq!(
            client_script("UC", 2, 0x7F, None, 20),
            "ibk_run /usr/bin/ibk-rdv -r client -c UC -l 2 -q 0x7f -a -n 20 -t 2000\n"
        );
        assert_eq!(
            client_script("UD", 2, 0xFF, Some(64), 50),
            "ibk_run /usr/bin/ibk-rdv -r client -c UD -l 2 -q 0xff -s 64 -n 50 -t 2000\n"
        );
        assert_eq!(
            server_script("UD", Some(1024), 20, 240),
            "ibk_run /usr/bin/ibk-rdv -r server -c UD -s 1024 -n 20 -t 2000 -p 240\n"
        );
        assert_eq!(
            server_script("UC", None, 5, 60),
            "ibk_run /usr/bin/ibk-rdv -r server -c UC -a -n 5 -t 2000 -p 60\n"
        );
        // Clamped to what the program accepts.
        assert!(server_script("UC", None, 5, 1_000_000).ends_with(" -p 86400\n"));
        assert!(server_script("UC", None, 5, 0).ends_with(" -p 1\n"));
    }

    #[test]
    fn the_listening_line_gives_lid_and_qpn() {
        assert_eq!(
            parse_listening("ibk-rdv server: listening on LID 0x0002 rendezvous QPN 0x000208"),
            Some((2, 0x208))
        );
        // As the console shows it, prefixed and with a carriage return.
        assert_eq!(
            parse_listening(
                "linux: ibk-rdv server: listening on LID 0x00ab rendezvous QPN 0xffffff\r"
            ),
            Some((0xab, 0xFF_FFFF))
        );
        for bad in [
            "ibk-rdv client: listening on LID 0x0002 rendezvous QPN 0x000208",
            "ibk-rdv server: listening on LID 0x0002",
            "ibk-rdv server: listening on LID 2 rendezvous QPN 0x208",
            "ibk-rdv server: listening on LID 0x0000 rendezvous QPN 0x208",
            "ibk-rdv server: listening on LID 0xc000 rendezvous QPN 0x208",
            "ibk-rdv server: listening on LID 0x0002 rendezvous QPN 0x1",
            "ibk-rdv server: listening on LID 0x0002 rendezvous QPN 0x1000000",
            "ibk-rdv server: listening on LID 0x0002 rendezvous QPN 0xzz",
            "ibk-rdv server: listening on LID 0x10002 rendezvous QPN 0x208",
        ] {
            assert_eq!(parse_listening(bad), None, "{bad}");
        }
    }
}
