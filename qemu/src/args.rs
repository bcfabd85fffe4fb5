//! Command-line flag groups several subcommands share (flattened into their arguments with
//! clap's `#[command(flatten)]`), and the value parsers of the benchmark's ranged keys.

use std::path::PathBuf;

use crate::hca::IrqChoice;
use crate::machine::{Accel, Firmware, Machine};
use crate::pingpong::TestChoice;

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

/// `-s`: the `size` key's range.
pub fn size_range() -> clap::builder::RangedI64ValueParser<u32> {
    use ibconfig::bench::{MAX_SWEEP_SIZE, MIN_SIZE};
    clap::value_parser!(u32).range(i64::from(MIN_SIZE)..=i64::from(MAX_SWEEP_SIZE))
}

/// `-n`: the `iters` key's range.
pub fn iters_range() -> clap::builder::RangedI64ValueParser<u32> {
    use ibconfig::bench::{MAX_ITERATIONS, MIN_ITERATIONS};
    clap::value_parser!(u32).range(i64::from(MIN_ITERATIONS)..=i64::from(MAX_ITERATIONS))
}

/// `-I`: the `inline` key's range.
pub fn inline_range() -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(0..=i64::from(ibconfig::bench::MAX_INLINE))
}

/// `--cq-moderation`: the `cq_moderation` key's syntax and ranges, checked here so that a
/// bad list is a usage error.
pub fn parse_moderations(s: &str) -> Result<String, String> {
    ibconfig::Moderations::parse(s)
        .map(|_| s.to_string())
        .map_err(|e| format!("expected {}", e.0))
}

/// `--drop-probability`: a number in [0, 1).
/// `--mode`: a list the `modes` key takes (checked here, so a bad list is a usage error).
pub fn parse_modes(s: &str) -> Result<String, String> {
    ibconfig::bench::Modes::parse(s)
        .map(|m| m.to_string())
        .ok_or_else(|| {
            format!("{s:?}: distinct completion modes from poll, event, isr, comma separated")
        })
}

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
        return Err(format!(
            "-t is perftest's tx depth (1..=15000); name the test with --test {}",
            t.name()
        ));
    }
    ibconfig::parse_u32(s)
        .filter(|n| (1..=ibconfig::bench::MAX_TX_DEPTH).contains(n))
        .ok_or_else(|| format!("{s:?}: a tx depth 1..=15000 is needed"))
}

/// `-A`: the atomic operation.
pub fn parse_atomic(s: &str) -> Result<ibconfig::AtomicOp, String> {
    ibconfig::AtomicOp::from_name(s).ok_or_else(|| format!("{s:?}: FETCH_AND_ADD or CMP_AND_SWAP"))
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
    /// Messages posted as one list (-l; `post_list`), 1..=1024.
    #[arg(short = 'l', long = "post-list", value_name = "LIST",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(ibconfig::bench::MAX_CQ_MOD)))]
    pub post_list: Option<u32>,
    /// One signaled completion every MOD messages (-Q; `cq_mod`), 1..=1024 [default: 100,
    /// or the post list].
    #[arg(short = 'Q', long = "cq-mod", value_name = "MOD",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(ibconfig::bench::MAX_CQ_MOD)))]
    pub cq_mod: Option<u32>,
    /// Run for SECS seconds instead of -n messages (-D; `duration`).
    #[arg(short = 'D', long = "duration", value_name = "SECS",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(ibconfig::bench::MAX_DURATION_S)))]
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
          value_parser = clap::value_parser!(u8).range(1..=i64::from(ibconfig::bench::MAX_OUT_READS)))]
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
    pub test: TestChoice,
    /// Transports, comma separated (UD, UC, RC); all in one boot pair, one run of the
    /// client's plan each [default: UD,UC for send_lat, UD,UC,RC for send_bw, RC,UC for
    /// write_lat and write_bw, RC for the READ and atomic tests].
    #[arg(short = 'c', long = "connection", value_name = "UD,UC,RC")]
    pub transports: Option<String>,
    /// Sweep every size (2 B to the MTU for UD, to 8 MiB for UC and RC).
    #[arg(short = 'a', long = "all", conflicts_with = "size")]
    pub all: bool,
    /// One message size in bytes (2..=8388608; over UD at most the path MTU, 2048 unless
    /// `--set mtu=4096`).
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
    pub srq: SrqFlags,
    /// How the kernel takes the HCA's interrupts (bring-up, commands; with -e also the
    /// completion events).
    #[arg(long, value_enum, default_value = "msix")]
    pub irq: IrqChoice,
    /// Wait for completions with events instead of busy polling (perftest's -e:
    /// `completion=event`). Needs interrupts: refused with --irq poll.
    #[arg(short = 'e', long = "events", conflicts_with = "modes")]
    pub events: bool,
    /// Completion modes, comma separated (poll, event, isr), each run once per mode in the
    /// same boot pair (`modes=`): busy polling, completion events (as -e), or isr (the
    /// reply posted from the completion interrupt's handler; needs --irq msix). The
    /// results carry each row's mode and interrupts per iteration.
    #[arg(long = "mode", value_name = "poll,event,isr", value_parser = parse_modes)]
    pub modes: Option<String>,
    /// Also split each round trip into its parts (`anatomy=on` on the client): the post,
    /// post to send completion, the server's own turnaround, wire and NICs; an extra table,
    /// anatomy columns in latency.csv/json and anatomy.svg. Reads the TSC twice more per
    /// iteration on each side.
    #[arg(long)]
    pub anatomy: bool,
    /// Fail if more than this many messages were lost in a transport's sweep [default: 0,
    /// no limit with --drop-probability].
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
    /// Kill the guests and fail after this many seconds per transport.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
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

/// The SRQ ping-pong's flags (`--test srq_pingpong`), refused with the other tests.
#[derive(Debug, Default, clap::Args)]
pub struct SrqFlags {
    /// srq_pingpong: QPs sharing the SRQ (ibv_srq_pingpong's -q, 1..=64) [default: 16].
    #[arg(short = 'q', long = "qps", value_name = "QPS", value_parser = clap::value_parser!(u32).range(1..=i64::from(ibconfig::bench::SRQ_MAX_QPS)))]
    pub qps: Option<u32>,
    /// srq_pingpong: receives kept posted on the SRQ (ibv_srq_pingpong's -r, at least one
    /// per QP) [default: 500].
    #[arg(short = 'r', long = "rx-depth", value_name = "DEPTH", value_parser = clap::value_parser!(u32).range(1..=i64::from(ibconfig::bench::SRQ_MAX_RX_DEPTH)))]
    pub rx_depth: Option<u32>,
    /// srq_pingpong with -e: CQ moderation settings `cq_max_count/cq_period_us`, comma
    /// separated (at most 8, each 0..=65535), one run per setting applied with modify_cq
    /// on both nodes' CQs; the runner prints latency and interrupts per message per
    /// setting (the `cq_moderation` key).
    #[arg(long = "cq-moderation", value_name = "C/P,...", value_parser = parse_moderations)]
    pub cq_moderation: Option<String>,
}
