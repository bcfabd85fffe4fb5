//! The `cargo qemu` command line: parses it and hands each subcommand to the module that
//! runs it.

use clap::{Parser, Subcommand};

use crate::{Exit, Usage};

const AFTER_HELP: &str = "\
Exit status: 0 success; 1 the kernel reported failure (failed checks, fault, panic, bad config);
2 bad command line or configuration (a key, value or combination the kernel would refuse;
nothing is built or booted); 3 host problem (missing QEMU/OVMF/KVM, kernel build, VFIO check);
4 timeout (QEMU killed); 5 QEMU ended without a kernel verdict (QEMU error, triple fault);
128+N stopped by signal N (SIGINT, SIGTERM, SIGHUP: the guests are killed first).
See docs/runner.md.";

/// Each subcommand's help ends with what it does without flags and two or three examples
/// (each parses with [`parse_args`]: tested).
mod help {
    pub const IMAGE: &str = "\
Without flags: the kernel's defaults (mode=selftest) in out/image/: bios.img, uefi.img, tftp/, config.

Examples:
  cargo qemu image --config node.cfg
  cargo qemu image --node 52:54:00:12:34:56=server.cfg --node 52:54:00:12:34:57=client.cfg
  cargo qemu image --set mode=hca --set console=com2 --out out/hca-node";

    pub const SELFTEST: &str = "\
Without flags: SeaBIOS, q35, TCG, CPU max, 120 s; passes only on every check and the kernel's success.

Examples:
  cargo qemu selftest
  cargo qemu selftest --firmware uefi
  cargo qemu selftest --machine pc --cpu qemu64";

    pub const RUN: &str = "\
Without flags: the kernel's defaults (mode=selftest), SeaBIOS, q35, TCG, no time limit.

Examples:
  cargo qemu run --set mode=idle
  cargo qemu run --firmware pxe --tftp-root out/image/tftp --mac 52:54:00:12:34:56
  cargo qemu run --accel kvm --vfio 03:00.0 --set mode=diag";

    pub const VFIO_CHECK: &str = "\
Without --memory: the checks for a guest of 512 MiB.

Examples:
  cargo qemu vfio-check 03:00.0
  cargo qemu vfio-check 0000:03:00.0 0000:04:00.0 --memory 2048";

    pub const HCA: &str = "\
Without flags: mode=hca, MSI-X, one port, device 15b3:1003, SeaBIOS under TCG, 120 s.

Examples:
  cargo qemu hca
  cargo qemu hca --irq intx
  cargo qemu hca --set mode=diag";

    pub const LINUX_IMAGE: &str = "\
Without flags: the packages cache and the initramfs in out/linux.

Examples:
  cargo qemu linux-image
  cargo qemu linux-image --out out/linux-cache";

    pub const LINUX: &str = "\
Without flags: one guest, MSI-X, machine pc, ibv_devinfo -v; 600 s.

Examples:
  cargo qemu linux
  cargo qemu linux --guests 2
  cargo qemu linux --intx --trace linux.trace";

    pub const PINGPONG: &str = "\
Without flags: send_lat over UD and UC, 2-byte messages, 1000 iterations, busy polling, MSI-X, perftest's inline limits, the port's MTU (4096 used as 2048), one switch, SeaBIOS under TCG, 600 s.

Examples:
  cargo qemu pingpong -c UD,UC -a
  cargo qemu perftest --test write_lat -c RC,UC -s 64 -n 5000
  cargo qemu perftest --test send_bw -c UD,RC -s 2048 -t 64 -Q 16";

    pub const COMPARE: &str = "\
Without flags: send_lat over UD, UC and RC, the -a sweep, 20 iterations, busy polling; 900 s per boot pair.

Examples:
  cargo qemu compare
  cargo qemu compare --test all -s 64 -n 200
  cargo qemu compare --test send_lat,send_bw -c RC -s 4096 --trace";

    pub const MIXED: &str = "\
Without flags: a Linux client and an ibkern server, UD and UC, the -a sweep, 20 iterations.

Examples:
  cargo qemu mixed
  cargo qemu mixed --linux-role server -c UD -s 64";

    pub const DELEGATE: &str = "\
Without flags: one ibkern node on the delegate, the whole benchmark (64 B to 1 MiB, 20 calls a row, poll, event and isr, 1 to 64 outstanding) beside the RC ib_send_lat baseline.

Examples:
  cargo qemu delegate
  cargo qemu delegate -n 20 --max-size 65536 --mode poll,isr
  cargo qemu delegate --nodes 2 --no-baseline";

    pub const CONFORMANCE: &str = "\
Without --linux and --departures: the checked-in drivers/mlx4/conformance/linux-PROFILE.trace of the profile (--profile, default reduced) and departures.txt.

Examples:
  cargo qemu conformance --ibkern hca.trace
  cargo qemu conformance --ibkern server.trace --ibkern client.trace --report conformance.txt";

    pub const RESULTS: &str = "\
Without --out: the files go to out/results/<UTC time>/.

Examples:
  cargo qemu results server-console.txt client-console.txt
  cargo qemu results --out chameleon node-a.log node-b.log";

    pub const NODE: &str = "\
Without flags beyond the HCA and the role: send_lat over UD, 2-byte messages, 1000 iterations, busy polling, MSI-X, the peer found by probing LIDs 1 to 64, 600 s.

Examples:
  cargo qemu node --vfio 03:00.0 --role server -c UD -a
  cargo qemu node --vfio 03:00.0 --role client -c UD -a --peer-lid 2
  cargo qemu node --fabric fabric --index 1 --role client -c UC -s 4096";

    pub const FABRIC: &str = "\
Without flags: two nodes, their sockets in a new temporary directory.

Examples:
  cargo qemu fabric
  cargo qemu fabric --nodes 2 --socket-dir fabric";
}

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
    #[command(after_help = help::IMAGE)]
    Image(crate::image::ImageArgs),
    /// Boot `mode=selftest` and pass only if every check passed and the kernel exited with its
    /// success status.
    #[command(after_help = help::SELFTEST)]
    Selftest(crate::single_guest::SelftestArgs),
    /// Boot the kernel with the serial console on this terminal (stdin/stdout).
    #[command(after_help = help::RUN)]
    Run(crate::single_guest::RunArgs),
    /// Only run the VFIO pre-flight checks for host PCI devices (what `run --vfio` checks).
    #[command(after_help = help::VFIO_CHECK)]
    VfioCheck(crate::single_guest::VfioCheckArgs),
    /// Boot `mode=hca` with the emulated ConnectX-3 attached (sim's mpqemu server): bring-up
    /// summary, NOP interrupt test, teardown and a second bring-up; prints the model's
    /// counters and fails on any contract violation.
    #[command(after_help = help::HCA)]
    Hca(crate::hca::HcaArgs),
    /// Build the Linux guest from Debian's packages (kernel with mlx4 modules, rdma-core,
    /// perftest, busybox; cached under out/linux) and write its initramfs.
    #[command(after_help = help::LINUX_IMAGE)]
    LinuxImage(crate::linux::LinuxImageArgs),
    /// Boot Debian's Linux with the emulated ConnectX-3 (one guest, or a pair on one fabric
    /// running perftest); pass only on clean module loads, an ACTIVE port with the fabric's
    /// LID, a successful guest script and no model violations.
    #[command(after_help = help::LINUX)]
    Linux(crate::linux::LinuxArgs),
    /// Two guests on one emulated fabric run perftest's tests (`--test`: the latency tests
    /// send_lat, write_lat, read_lat, atomic_lat and the bandwidth tests send_bw, write_bw,
    /// read_bw, atomic_bw) over every transport in one boot pair (the client runs a plan, the
    /// server follows); prints the tables and the model's PCIe traffic per iteration per
    /// size, and writes them into --out. `perftest` is the same command.
    #[command(visible_alias = "perftest", after_help = help::PINGPONG)]
    Pingpong(crate::pingpong::PingPongArgs),
    /// Linux (perftest's ib_*_lat and, when named, ib_*_bw on Debian's mlx4 stack) and
    /// ibkern (the same tests as its plan) on the same emulated fabric with the same
    /// perftest command lines (tests, transports, sizes, iterations): one table,
    /// compare.csv, compare.svg, the model's PCIe transactions per iteration for each stack
    /// and the time from QEMU's start to the HCA ready. Under emulation absolute times mean
    /// little; operations and transactions per iteration mean a lot (docs/runner.md).
    #[command(after_help = help::COMPARE)]
    Compare(crate::compare::CompareArgs),
    /// A Linux guest against an ibkern guest on one emulated fabric: a small program on
    /// rdma-core's verbs speaking ibkern's in-band rendezvous runs the UD/UC ping-pong with
    /// ibkern, both sides checking every payload. `--linux-role client` (default): ibkern
    /// serves; `--linux-role server`: the Linux server boots first and the ibkern client is
    /// given the rendezvous QPN it prints (`peer_rdv_qpn`).
    #[command(after_help = help::MIXED)]
    Mixed(crate::linux::mixed::MixedArgs),
    /// The Linux delegate (`ibkern-delegate`, docs/delegation.md) in a Linux guest and
    /// ibkern guests using it on one emulated fabric: each node fetches its plan from the
    /// delegate's root, runs the delegation benchmark (forwarded calls per operation, size
    /// and completion mode, calls per second, the RC ib_send_lat baseline, one-sided against
    /// two-sided) and leaves its results there; prints the tables, writes
    /// delegate.csv/json/svg and copies the delegate's root into the run directory.
    #[command(after_help = help::DELEGATE)]
    Delegate(crate::linux::delegation::DelegateArgs),
    /// Differential check against Linux on the model: compare ibkern's behaviour trace
    /// (every command, context field, WQE shape and doorbell pattern the model saw; from
    /// `hca --trace`, `pingpong --trace` or `compare --trace`) with Linux's, list what ibkern
    /// does that Linux never does and the reverse, and fail on any departure not in
    /// drivers/mlx4/conformance/departures.txt.
    #[command(after_help = help::CONFORMANCE)]
    Conformance(crate::conformance::ConformanceArgs),
    /// Tables, latency.csv, latency.json and latency.svg from consoles saved on real nodes
    /// (a browser console pasted into a file, a serial-over-LAN log, `script` output): escape
    /// sequences, line prefixes, wrapped and repeated lines are tolerated.
    #[command(after_help = help::RESULTS)]
    Results(crate::saved_results::ResultsArgs),
    /// One node of a ping-pong run, one command per host: ibkern under KVM with the
    /// ConnectX-3 passed through (`--vfio BDF`), or its emulated twin under TCG with an HCA of
    /// a running `cargo qemu fabric` (`--fabric DIR --index I`). Console log written as it
    /// streams; at the end the perftest-style table, latency.csv/json/svg (on the fabric
    /// also the model's PCIe transactions per iteration, pcie.csv).
    #[command(after_help = help::NODE)]
    Node(crate::node::NodeArgs),
    /// The emulated fabric (N HCAs on one switch, subnet manager on) as a process of its own,
    /// serving `cargo qemu node --fabric` processes on one UNIX socket per node, until
    /// SIGINT/SIGTERM/SIGHUP.
    #[command(after_help = help::FABRIC)]
    Fabric(crate::fabric::FabricArgs),
}

/// Parses a command line (`argv[0]` first) as `cargo qemu` does, without running anything;
/// what a test or a document checker uses.
pub fn parse_args<I, T>(argv: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    Cli::try_parse_from(argv)
}

/// Runs the parsed command line.
pub fn main(cli: Cli) -> Exit {
    let result = match cli.command {
        Subcommands::Image(args) => crate::image::image_command(args),
        Subcommands::Selftest(args) => crate::single_guest::selftest_command(args),
        Subcommands::Run(args) => crate::single_guest::run_command(args),
        Subcommands::VfioCheck(args) => crate::single_guest::vfio_check_command(args),
        Subcommands::Hca(args) => crate::hca::hca_command(args),
        Subcommands::LinuxImage(args) => crate::linux::linux_image_command(args),
        Subcommands::Linux(args) => crate::linux::linux_command(args),
        Subcommands::Pingpong(args) => crate::pingpong::pingpong_command(args),
        Subcommands::Compare(args) => crate::compare::compare_command(args),
        Subcommands::Mixed(args) => crate::linux::mixed::mixed_command(args),
        Subcommands::Delegate(args) => crate::linux::delegation::delegate_command(args),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{Accel, Firmware, Machine};
    use crate::vfio::Bdf;
    use clap::CommandFactory;

    /// Every subcommand's help states what it does without flags and ends with two or
    /// three examples, each of which the real parser takes.
    #[test]
    fn every_help_ends_with_examples_that_parse() {
        let mut cli = Cli::command();
        for sub in cli.get_subcommands_mut() {
            let name = sub.get_name().to_string();
            let help = sub.render_long_help().to_string();
            assert!(
                help.contains("\nWithout "),
                "{name}: no defaults line\n{help}"
            );
            let (_, tail) = help
                .split_once("\nExamples:\n")
                .unwrap_or_else(|| panic!("{name}: no examples\n{help}"));
            let examples: Vec<&str> = tail.lines().filter(|l| !l.trim().is_empty()).collect();
            assert!(
                (2..=3).contains(&examples.len()),
                "{name}: {} examples",
                examples.len()
            );
            for example in examples {
                let words: Vec<&str> = example.split_whitespace().collect();
                assert_eq!(words[..2], ["cargo", "qemu"], "{name}: {example}");
                assert!(
                    words[2] == name || sub.get_all_aliases().any(|a| a == words[2]),
                    "{name}: {example}"
                );
                let mut argv = vec!["cargo qemu"];
                argv.extend_from_slice(&words[2..]);
                let parsed = parse_args(&argv).unwrap_or_else(|e| panic!("{name}: {example}: {e}"));
                // The ping-pong commands' examples pass the configuration's checks too.
                let checked = match parsed.command {
                    Subcommands::Pingpong(a) => crate::pingpong::checked_transports(&a)
                        .and_then(|t| crate::pingpong::plan_configs(&a, &t))
                        .map(drop),
                    Subcommands::Node(a) => a
                        .transport()
                        .and_then(|t| a.config(t))
                        .and_then(|c| crate::kernel_config::check_config(&c))
                        .map(drop),
                    Subcommands::Compare(a) => crate::compare::cases(&a).map(drop),
                    _ => Ok(()),
                };
                if let Err(e) = checked {
                    panic!("{name}: {example}: {e:#}");
                }
            }
        }
    }

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
        let e = crate::args::GuestArgs::emulated();
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
}
