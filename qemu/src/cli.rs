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
    Image(crate::image::ImageArgs),
    /// Boot `mode=selftest` and pass only if every check passed and the kernel exited with its
    /// success status.
    Selftest(crate::single_guest::SelftestArgs),
    /// Boot the kernel with the serial console on this terminal (stdin/stdout).
    Run(crate::single_guest::RunArgs),
    /// Only run the VFIO pre-flight checks for host PCI devices (what `run --vfio` checks).
    VfioCheck(crate::single_guest::VfioCheckArgs),
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
    /// Two guests on one emulated fabric run perftest's tests (`--test`: the latency tests
    /// send_lat, write_lat, read_lat, atomic_lat and the bandwidth tests send_bw, write_bw,
    /// read_bw, atomic_bw) over every transport in one boot pair (the client runs a plan, the
    /// server follows); prints the tables and the model's PCIe traffic per iteration per
    /// size, and writes them into --out. `perftest` is the same command.
    #[command(visible_alias = "perftest")]
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
    /// The Linux delegate (`ibkern-delegate`, docs/delegation.md) in a Linux guest and
    /// ibkern guests using it on one emulated fabric: each node fetches its plan from the
    /// delegate's root, runs the delegation benchmark (forwarded calls per operation, size
    /// and completion mode, calls per second, the RC ib_send_lat baseline, one-sided against
    /// two-sided) and leaves its results there; prints the tables, writes
    /// delegate.csv/json/svg and copies the delegate's root into the run directory.
    Delegate(crate::linux::delegation::DelegateArgs),
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
