//! Command-line flag groups several subcommands share (flattened into their arguments with
//! clap's `#[command(flatten)]`), and the value parsers of the benchmark's ranged keys.

use std::path::PathBuf;

use crate::machine::{Accel, Firmware, Machine};

/// Which kernel to pack and how the bootloader behaves.
#[derive(Debug, clap::Args)]
pub struct KernelArgs {
    /// Use this kernel ELF instead of building one (`cargo build -p kernel --release
    /// --target x86_64-unknown-none`).
    #[arg(long, value_name = "PATH")]
    pub kernel: Option<PathBuf>,
    /// Let the bootloader print its own log (serial and framebuffer); off by default.
    #[arg(long)]
    pub loader_log: bool,
}

/// Configuration keys given on the command line.
#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// Set a kernel configuration key (repeatable), e.g. `--set log=debug`; applied last.
    /// Keys, values and the whole configuration are checked as the kernel checks them
    /// (docs/kernel.md): a refusal exits 2 before anything is built.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

/// The virtual machine short of its accelerator (`node` takes this: its accelerator follows
/// from where its HCA comes from).
#[derive(Clone, Debug, clap::Args)]
pub struct VmArgs {
    /// Firmware and boot medium.
    #[arg(long, value_enum, default_value = "bios")]
    pub firmware: Firmware,
    /// Machine type: q35 (PCIe, ECAM) or pc (i440FX, port I/O configuration only).
    #[arg(long, value_enum, default_value = "q35")]
    pub machine: Machine,
    /// CPU model [default: max under TCG (1 GiB pages), host under KVM]; e.g. qemu64 has no
    /// 1 GiB pages.
    #[arg(long, value_name = "MODEL")]
    pub cpu: Option<String>,
    /// QEMU executable [default: qemu-system-x86_64 from PATH].
    #[arg(long, value_name = "PATH")]
    pub qemu: Option<PathBuf>,
    /// OVMF firmware image for --firmware uefi|pxe.
    #[arg(long, value_name = "PATH", default_value = crate::command::DEFAULT_OVMF)]
    pub ovmf: PathBuf,
}

/// The virtual machine.
#[derive(Clone, Debug, clap::Args)]
pub struct GuestArgs {
    #[command(flatten)]
    pub vm: VmArgs,
    /// Accelerator. TCG works everywhere; KVM is for hosts with hardware virtualisation (and
    /// is required for --vfio).
    #[arg(long, value_enum, default_value = "tcg")]
    pub accel: Accel,
}

/// The machine's flags read as the guest's own (`guest.firmware`, ...).
impl std::ops::Deref for GuestArgs {
    type Target = VmArgs;
    fn deref(&self) -> &VmArgs {
        &self.vm
    }
}

impl GuestArgs {
    /// The defaults of the command line: SeaBIOS, TCG, q35, QEMU from PATH (what the
    /// emulated-HCA commands boot ibkern with).
    pub fn emulated() -> GuestArgs {
        GuestArgs {
            vm: VmArgs {
                firmware: Firmware::Bios,
                machine: Machine::Q35,
                cpu: None,
                qemu: None,
                ovmf: crate::command::DEFAULT_OVMF.into(),
            },
            accel: Accel::Tcg,
        }
    }
}

/// A flag's range: its key's bounds (`ibconfig::bench::bounds`), so the flag takes what the
/// key takes.
pub fn key_range(b: ibconfig::Bounds) -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(b.lo as i64..=b.hi as i64)
}

/// `-s`: the `size` key's range.
pub fn size_range() -> clap::builder::RangedI64ValueParser<u32> {
    key_range(ibconfig::bench::bounds::SIZE)
}

/// `-n`: the `iters` key's range.
pub fn iters_range() -> clap::builder::RangedI64ValueParser<u32> {
    key_range(ibconfig::bench::bounds::ITERS)
}

/// `-I`: the `inline` key's range.
pub fn inline_range() -> clap::builder::RangedI64ValueParser<u32> {
    key_range(ibconfig::bench::bounds::INLINE)
}

/// `--cq-moderation`: the `cq_moderation` key's syntax and ranges, checked here so that a
/// bad list is a usage error.
pub fn parse_moderations(s: &str) -> Result<ibconfig::Moderations, String> {
    ibconfig::Moderations::parse(s).map_err(|e| e.to_string())
}

/// `--mode`: a list the `modes` key takes (checked here, so a bad list is a usage error).
pub fn parse_modes(s: &str) -> Result<ibconfig::Modes, String> {
    ibconfig::Modes::parse(s).ok_or_else(|| {
        format!("{s:?}: distinct completion modes from poll, event, isr, comma separated")
    })
}

/// Checks a `--out DIR`: absent (it will be made) or a directory. Naming a file is a usage
/// error (exit 2), found before anything is built or booted.
pub fn check_out_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    if dir.exists() && !dir.is_dir() {
        crate::usage!(
            "--out {}: is a file; give a directory (it is made if missing)",
            dir.display()
        );
    }
    Ok(())
}

/// `--timeout SECS`: a whole number of seconds, at least 1 (0 would kill the guests as
/// they start).
pub fn parse_timeout(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("0 seconds would kill the guests as they start: give 1 or more".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{s:?} is not a number of seconds")),
    }
}

/// `--drop-probability`: a number in [0, 1).
pub fn parse_drop_probability(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if (0.0..1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{s}: a probability in [0, 1) is needed"))
    }
}

/// The send_lat sweep of the commands that run Linux beside ibkern (`compare`, `mixed`):
/// transports, one size or the sweep, iterations.
#[derive(Debug, clap::Args)]
pub struct SweepArgs {
    /// Transports, comma separated (UD, UC); one boot pair per transport.
    #[arg(
        short = 'c',
        long = "connection",
        value_name = "UD,UC",
        default_value = "UD,UC"
    )]
    pub transports: String,
    /// One message size in bytes instead of the sweep (perftest's and ibkern's `-a`: 2 B to
    /// 2048 B on UD, to 8 MiB on UC), which is the default.
    #[arg(short = 's', long = "size", value_name = "SIZE", value_parser = size_range())]
    pub size: Option<u32>,
    /// Iterations per size, the same on every node (5..=16777216).
    #[arg(
        short = 'n',
        long = "iters",
        value_name = "ITERS",
        default_value_t = 20,
        value_parser = iters_range()
    )]
    pub iters: u32,
}

/// `-t`: perftest's tx depth. A test name there is a usage error that says where the test
/// goes (`--test`).
pub fn parse_tx_depth(s: &str) -> Result<u32, String> {
    if let Some(t) = ibconfig::Test::from_name(s) {
        let b = ibconfig::bench::bounds::TX_DEPTH;
        return Err(format!(
            "-t is perftest's tx depth ({}..={}); name the test with --test {}",
            b.lo,
            b.hi,
            t.name()
        ));
    }
    ibconfig::bench::bounds::TX_DEPTH
        .parse_u32(s)
        .map_err(|e| format!("{s:?}: {e}"))
}

/// `-A`: the atomic operation.
pub fn parse_atomic(s: &str) -> Result<ibconfig::AtomicOp, String> {
    ibconfig::AtomicOp::from_name(s)
        .ok_or_else(|| format!("{s:?}: one of {}", ibconfig::AtomicOp::NAMES.join("|")))
}

/// perftest's flags of the bandwidth tests (and `-o`/`-A` of the READ and atomic tests),
/// each the configuration key of the same name; the kernel's rules apply (a bandwidth flag
/// with a latency test, `-Q` above `-t`, ... exit 2).
#[derive(Debug, Default, clap::Args)]
pub struct BwFlags {
    /// Messages the sender keeps outstanding (perftest's -t; `tx_depth`) [default: 128,
    /// lowered to -n].
    #[arg(short = 't', long = "tx-depth", value_name = "DEPTH", value_parser = parse_tx_depth)]
    pub tx_depth: Option<u32>,
    /// Messages posted as one list (-l; `post_list`), 1..=1024 [default: 1].
    #[arg(short = 'l', long = "post-list", value_name = "LIST",
          value_parser = key_range(ibconfig::bench::bounds::POST_LIST))]
    pub post_list: Option<u32>,
    /// One signaled completion every MOD messages (-Q; `cq_mod`), 1..=1024 [default: 100,
    /// or the post list].
    #[arg(short = 'Q', long = "cq-mod", value_name = "MOD",
          value_parser = key_range(ibconfig::bench::bounds::CQ_MOD))]
    pub cq_mod: Option<u32>,
    /// Run for SECS seconds instead of -n messages (-D; `duration`) [default: -n messages].
    #[arg(short = 'D', long = "duration", value_name = "SECS",
          value_parser = key_range(ibconfig::bench::bounds::DURATION))]
    pub duration: Option<u32>,
    /// Both sides stream at once (-b; `bidirectional`).
    #[arg(short = 'b', long = "bidirectional")]
    pub bidirectional: bool,
    /// No peak bandwidth (-N; `no_peak`).
    #[arg(short = 'N', long = "no-peak")]
    pub no_peak: bool,
    /// Bandwidth in Gb/sec instead of MB/sec (`report_gbits`).
    #[arg(long = "report-gbits", alias = "report_gbits")]
    pub report_gbits: bool,
    /// READs/atomics outstanding (-o; `outstanding_reads`), 1..=16 [default: 1 for the
    /// latency tests, 16 for read_bw and atomic_bw].
    #[arg(short = 'o', long = "outstanding-reads", value_name = "N",
          value_parser = clap::value_parser!(u8).range(ibconfig::bench::bounds::OUT_READS.lo as i64..=ibconfig::bench::bounds::OUT_READS.hi as i64))]
    pub outstanding_reads: Option<u8>,
    /// The atomic operation of atomic_lat and atomic_bw (-A) [default: FETCH_AND_ADD].
    #[arg(short = 'A', long = "atomic", value_name = "OP", value_parser = parse_atomic)]
    pub atomic: Option<ibconfig::AtomicOp>,
}

/// The ping-pong benchmark's flags, shared by `pingpong` (two guests on one fabric) and
/// `node` (one node per command): the test, what it measures, how the kernel waits, the
/// emulated fabric's faults and trace, the bound on the run, `--set` and the kernel.
#[derive(Debug, clap::Args)]
pub struct PingPongFlags {
    /// The test: send_lat, write_lat, read_lat, atomic_lat (perftest's latency tests,
    /// ib_send_lat ...), send_bw, write_bw, read_bw, atomic_bw (its bandwidth tests,
    /// ib_send_bw ...), or srq_pingpong (rdma-core's ibv_srq_pingpong over RC: -q, -r, -s,
    /// -n, -e, --cq-moderation). (perftest's -t is the tx depth, so the test has no short
    /// flag.)
    #[arg(
        long = "test",
        value_enum,
        value_name = "TEST",
        default_value = "send_lat"
    )]
    pub test: ibconfig::Benchmark,
    /// Transports, comma separated (UD, UC, RC); all in one boot pair, one run of the
    /// client's plan each [default: UD,UC for send_lat, UD,UC,RC for send_bw, RC,UC for
    /// write_lat and write_bw, RC for the READ and atomic tests].
    #[arg(short = 'c', long = "connection", value_name = "UD,UC,RC")]
    pub transports: Option<String>,
    /// Sweep every size (2 B to the MTU for UD, to 8 MiB for UC and RC).
    #[arg(short = 'a', long = "all", conflicts_with = "size")]
    pub all: bool,
    /// One message size in bytes (2..=8388608; over UD at most the path MTU, 2048 unless -m
    /// 4096) [default: 2, perftest's; 64 KiB for the bandwidth tests (the MTU over UD), 8 for
    /// the atomic tests, 4096 for srq_pingpong].
    #[arg(short = 's', long = "size", value_name = "SIZE", value_parser = size_range())]
    pub size: Option<u32>,
    /// Iterations per size (5..=16777216).
    #[arg(
        short = 'n',
        long = "iters",
        value_name = "ITERS",
        default_value_t = ibconfig::bench::DEFAULT_ITERATIONS,
        value_parser = iters_range()
    )]
    pub iters: u32,
    /// Inline limit in bytes (0..=1024) [default: perftest's for the test and transport].
    #[arg(short = 'I', long = "inline-size", value_name = "INLINE", value_parser = inline_range())]
    pub inline: Option<u32>,
    #[command(flatten)]
    pub device: DeviceFlags,
    #[command(flatten)]
    pub srq: SrqFlags,
    /// How the kernel takes the HCA's interrupts (bring-up, commands; with -e also the
    /// completion events).
    #[arg(long, value_enum, default_value = "msix")]
    pub irq: ibconfig::HcaIrq,
    /// Wait for completions with events instead of busy polling (perftest's -e:
    /// `completion=event`). Needs interrupts: refused with --irq poll.
    #[arg(short = 'e', long = "events", conflicts_with = "modes")]
    pub events: bool,
    /// Completion modes, comma separated (poll, event, isr), each run once per mode in the
    /// same boot pair (`modes=`): busy polling, completion events (as -e), or isr (the
    /// reply posted from the completion interrupt's handler; needs --irq msix). The
    /// results carry each row's mode and interrupts per iteration [default: poll, or event
    /// with -e].
    #[arg(long = "mode", value_name = "poll,event,isr", value_parser = parse_modes)]
    pub modes: Option<ibconfig::Modes>,
    /// Also split each round trip into its parts (`anatomy=on` on the client): the post,
    /// post to send completion, the server's own turnaround, wire and NICs; an extra table,
    /// anatomy columns in latency.csv/json and anatomy.svg. Reads the TSC twice more per
    /// iteration on each side.
    #[arg(long)]
    pub anatomy: bool,
    /// Fail if the client's sizes lost more than this many messages over the whole plan
    /// (every run, aborted sizes included) [default: 0, no limit with --drop-probability].
    #[arg(long, value_name = "N")]
    pub max_losses: Option<u64>,
    /// Probability in [0, 1) that the emulated fabric drops each data packet, to run a
    /// sweep under loss (allow the losses with --max-losses).
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = parse_drop_probability)]
    pub drop_probability: f64,
    /// Seed of the fabric's loss generator (the same seed drops the same packets of the same
    /// packet sequence).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Kill the guests and fail after this many seconds per run of the client's plan (one
    /// run per transport unless --set run=... gives the plan): the boot pair's limit is this
    /// times the runs.
    #[arg(long, value_name = "SECS", default_value_t = 600, value_parser = parse_timeout)]
    pub timeout: u64,
    #[command(flatten)]
    pub bw: BwFlags,
    #[command(flatten)]
    pub set: SetArgs,
    /// Record the model's behaviour trace of each node's HCA and write it to
    /// OUT/<role>.trace (docs/model.md, "Behaviour trace").
    #[arg(long)]
    pub trace: bool,
    #[command(flatten)]
    pub kernel: KernelArgs,
}

impl PingPongFlags {
    /// The losses a run may count before it fails: `--max-losses`, else none on a lossless
    /// fabric and any number when the fabric is told to drop packets.
    pub fn loss_allowance(&self) -> u64 {
        match self.max_losses {
            Some(n) => n,
            None if self.drop_probability > 0.0 => u64::MAX,
            None => 0,
        }
    }
}

/// perftest's flags that choose the device, its port and the path MTU, and `-F`, as
/// ibkern can honour them.
#[derive(Debug, Default, clap::Args)]
pub struct DeviceFlags {
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096 (perftest's -m; `mtu`) [default: the
    /// port's active MTU, an active 4096 used as 2048 as perftest does on ConnectX-3].
    #[arg(short = 'm', long = "mtu", value_name = "MTU", value_parser = parse_mtu)]
    pub mtu: Option<verbs::Mtu>,
    /// The HCA's port, 1 or 2 (perftest's -i; `ib_port`) [default: 1].
    #[arg(short = 'i', long = "ib-port", value_name = "PORT", value_parser = parse_ib_port)]
    pub ib_port: Option<u8>,
    /// perftest's device name (-d). ibkern drives one HCA, the first ConnectX-3 it finds on
    /// PCI, which Linux names mlx4_0: `-d mlx4_0` is accepted, any other name refused (on a
    /// host with several cards, pass the one to use with --vfio BDF) [default: mlx4_0].
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV", value_parser = parse_ib_dev)]
    pub ib_dev: Option<String>,
    /// perftest's -F (no failure or warning when the CPU frequency may not be the
    /// maximum): accepted and changes nothing, since ibkern has no such check: it times
    /// with the TSC, whose rate it reads from CPUID or calibrates at boot.
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
}

/// `-m`: the `mtu` key's values.
pub fn parse_mtu(s: &str) -> Result<verbs::Mtu, String> {
    ibconfig::bench::parse_mtu(s).map_err(|e| e.to_string())
}

/// `-i`: the `ib_port` key's bounds.
pub fn parse_ib_port(s: &str) -> Result<u8, String> {
    ibconfig::bench::bounds::IB_PORT
        .parse(s)
        .map(|n| n as u8)
        .map_err(|e| e.to_string())
}

/// The device name `-d` accepts: the one Linux gives the first ConnectX-3.
pub const IB_DEV: &str = "mlx4_0";

/// `-d`: perftest's device name; ibkern has one device.
pub fn parse_ib_dev(s: &str) -> Result<String, String> {
    if s == IB_DEV {
        Ok(s.to_string())
    } else {
        Err(format!(
            "ibkern drives one HCA, the first ConnectX-3 it finds on PCI ({IB_DEV}); it has \
             no device {s:?} (on a host with several cards, choose one with --vfio BDF)"
        ))
    }
}

/// The SRQ ping-pong's flags (`--test srq_pingpong`), refused with the other tests.
#[derive(Debug, Default, clap::Args)]
pub struct SrqFlags {
    /// srq_pingpong: QPs sharing the SRQ (ibv_srq_pingpong's -q, 1..=64) [default: 16].
    #[arg(short = 'q', long = "qps", value_name = "QPS", value_parser = key_range(ibconfig::bench::bounds::SRQ_QPS))]
    pub qps: Option<u32>,
    /// srq_pingpong: receives kept posted on the SRQ (ibv_srq_pingpong's -r, at least one
    /// per QP) [default: 500].
    #[arg(short = 'r', long = "rx-depth", value_name = "DEPTH", value_parser = key_range(ibconfig::bench::bounds::SRQ_RX_DEPTH))]
    pub rx_depth: Option<u32>,
    /// srq_pingpong with -e: CQ moderation settings `cq_max_count/cq_period_us`, comma
    /// separated (at most 8, each 0..=65535), one run per setting applied with modify_cq
    /// on both nodes' CQs; the runner prints latency and interrupts per message per
    /// setting (the `cq_moderation` key) [default: none, the CQs as created].
    #[arg(long = "cq-moderation", value_name = "C/P,...", value_parser = parse_moderations)]
    pub cq_moderation: Option<ibconfig::Moderations>,
}
