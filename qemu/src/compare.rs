//! `cargo qemu compare`: Linux (Debian's mlx4 stack with perftest) and ibkern (its
//! ping-pong) on the same emulated fabric, running the same perftest command lines: every
//! latency test both stacks run (`--test send_lat,write_lat,read_lat,atomic_lat` or `all`)
//! and the bandwidth tests named (`send_bw,write_bw,read_bw,atomic_bw`), each over every
//! transport it takes, in one boot pair per stack. One table,
//! `compare.csv`, `ports.csv`, `compare.svg` and `hca-ready.csv` with both stacks.
//!
//! Both stacks are measured the same way (docs/runner.md, "cargo qemu compare"):
//! - the runs: one canonical perftest command line per case (test, transport, atomic
//!   operation) with the same sizes, iterations and flags; ibkern's client runs them as its
//!   plan (`run=` lines), the Linux guests run them one after another with `ibk_pair`;
//! - latency, or bandwidth and message rate: the client's perftest row per size (ibkern
//!   prints the same row and its `ibkern-result` line);
//! - PCIe transactions per iteration (per message for the bandwidth tests): the model's
//!   counters of each node, snapshotted when that node prints its table header (` #bytes
//!   ...`, after the QP exchange or rendezvous) and at each of its rows (for a passive
//!   server, READ, atomics and the bandwidth tests but send_bw, the server's at the
//!   client's); a size's figure is the difference divided by the iterations (messages);
//! - the port's own traffic over each run (PortXmitData/PortRcvData in 4-byte words,
//!   PortXmitPkts/PortRcvPkts), as each stack reads its PMA: ibkern's client prints its
//!   `ibkern-port` line (read through MAD_IFC before and after the run); on Linux each node
//!   runs `perfquery -x` twice before and once after each perftest run, and the runner
//!   subtracts the cost of one read (the difference of the two reads before);
//! - HCA ready: host time from just before QEMU is spawned until the runner reads the line
//!   saying the HCA is ready for traffic (Linux: init's `port 1 state: ... ACTIVE` line;
//!   ibkern: the bring-up summary's `mlx4: port 1: ACTIVE` line).

use crate::say;
use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bench::line::Line;
use ibconfig::{AtomicOp, Test, Transport};
use sim::Counters;

use crate::hca::run_nodes_on;
use crate::pingpong::{diff_counters, pcie_per_iter, PingPongArgs, PCIE_COLUMNS};
use crate::Exit;

/// `cargo qemu compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Device profiles of the two HCAs (server, client; one name gives both), the same for
    /// both stacks.
    #[command(flatten)]
    pub profile: crate::device_profile::ProfileArgs,
    /// The perftest tests, comma separated: send_lat, write_lat, read_lat, atomic_lat,
    /// send_bw, write_bw, read_bw, atomic_bw, or `all` (every latency test; name the
    /// bandwidth tests to add them). Each runs over every transport given (or its default
    /// ones).
    #[arg(long = "test", value_name = "TESTS", default_value = "send_lat")]
    pub tests: String,
    /// Transports, comma separated (UD, UC, RC), each run with every test given
    /// [default: every one both stacks run for the test: UD,UC,RC for send_lat, UC,RC for
    /// write_lat, RC for read_lat and atomic_lat].
    #[arg(short = 'c', long = "connection", value_name = "UD,UC,RC")]
    pub transports: Option<String>,
    /// The operations of atomic_lat and atomic_bw, comma separated [default:
    /// FETCH_AND_ADD,CMP_AND_SWAP].
    #[arg(short = 'A', long = "atomic", value_name = "OPS")]
    pub atomic: Option<String>,
    /// One message size in bytes instead of the sweep (perftest's and ibkern's `-a`: 2 B to
    /// 2048 B on UD, to 8 MiB on UC and RC), which is the default. atomic_lat and atomic_bw
    /// always move 8 bytes.
    #[arg(short = 's', long = "size", value_name = "SIZE", value_parser = crate::args::size_range())]
    pub size: Option<u32>,
    /// Iterations per size (messages per size for the bandwidth tests), the same on every
    /// node (5..=16777216).
    #[arg(
        short = 'n',
        long = "iters",
        value_name = "ITERS",
        default_value_t = 20,
        value_parser = crate::args::iters_range()
    )]
    pub iters: u32,
    /// The bandwidth tests' sender keeps DEPTH messages outstanding (perftest's -t)
    /// [default: perftest's 128, lowered to -n].
    #[arg(short = 't', long = "tx-depth", value_name = "DEPTH", value_parser = crate::args::parse_tx_depth)]
    pub tx_depth: Option<u32>,
    /// The bandwidth tests post LIST messages as one list (perftest's -l), 1..=1024
    /// [default: 1].
    #[arg(short = 'l', long = "post-list", value_name = "LIST",
          value_parser = crate::args::key_range(ibconfig::bench::bounds::POST_LIST))]
    pub post_list: Option<u32>,
    /// The bandwidth tests signal one completion every MOD messages (perftest's -Q),
    /// 1..=1024 [default: perftest's 100, or the post list, lowered to -n].
    #[arg(short = 'Q', long = "cq-mod", value_name = "MOD",
          value_parser = crate::args::key_range(ibconfig::bench::bounds::CQ_MOD))]
    pub cq_mod: Option<u32>,
    /// Both stacks wait for completions with events instead of busy polling (perftest's
    /// -e on Linux, `completion=event` on ibkern, whose HCA interrupts are MSI-X).
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Kill the guests and fail after this many seconds per boot (the Linux pair, the
    /// ibkern pair).
    #[arg(long, value_name = "SECS", default_value_t = 900, value_parser = crate::args::parse_timeout)]
    pub timeout: u64,
    /// Base directory: this run's files go to DIR/<UTC start time>/, DIR/latest points to
    /// the newest run [default: out/compare in the workspace].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Linux guest work directory (packages cache, initramfs) [default: out/linux].
    #[arg(long, value_name = "DIR")]
    pub linux_dir: Option<PathBuf>,
    /// Stream the guests' consoles to stdout also when it is a terminal (they are always in
    /// the run directory's log files, and streamed when stdout is not a terminal).
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Also record both stacks' behaviour traces (linux.trace, ibkern.trace in --out) and
    /// run the conformance check (`cargo qemu conformance`) of ibkern against Linux: this
    /// run's Linux trace together with the checked-in one of the server's profile
    /// (drivers/mlx4/conformance/linux-NAME.trace).
    /// Writes conformance.txt; a departure not in the departures file fails the run.
    #[arg(long)]
    pub trace: bool,
    /// The departures file for --trace [default: drivers/mlx4/conformance/departures.txt].
    #[arg(long, value_name = "FILE", requires = "trace")]
    pub departures: Option<PathBuf>,
    #[command(flatten)]
    pub kernel: crate::args::KernelArgs,
}

/// The software stack a figure belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stack {
    Ibkern,
    Linux,
}

impl Stack {
    pub fn name(self) -> &'static str {
        match self {
            Stack::Ibkern => "ibkern",
            Stack::Linux => "Linux",
        }
    }
}

/// The transports both stacks run `test` over, in table order.
fn default_transports(test: Test) -> &'static [Transport] {
    match test {
        Test::SendLat => &[Transport::Ud, Transport::Uc, Transport::Rc],
        Test::WriteLat => &[Transport::Uc, Transport::Rc],
        Test::ReadLat | Test::AtomicLat => &[Transport::Rc],
        Test::SendBw => &[Transport::Ud, Transport::Uc, Transport::Rc],
        Test::WriteBw => &[Transport::Uc, Transport::Rc],
        Test::ReadBw | Test::AtomicBw => &[Transport::Rc],
    }
}

/// The runs a comparison makes, in order: per test, per transport (per atomic operation),
/// one perftest command line with the sizes, iterations and completion mode given. Every
/// combination is checked as the kernel checks a `run=` line; a refusal is a usage error.
pub fn cases(args: &CompareArgs) -> Result<Vec<ibconfig::Run>> {
    let mut tests: Vec<Test> = Vec::new();
    for name in args
        .tests
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        let found: Vec<Test> = if name.eq_ignore_ascii_case("all") {
            Test::ALL.into_iter().filter(|t| !t.is_bw()).collect()
        } else if let Some(t) = Test::from_name(name) {
            vec![t]
        } else {
            crate::usage!(
                "--test: unknown test {name:?} (one of {}|all)",
                Test::NAMES.join("|")
            );
        };
        for t in found {
            if !tests.contains(&t) {
                tests.push(t);
            }
        }
    }
    if tests.is_empty() {
        crate::usage!(
            "--test: no test given (one of {}|all)",
            Test::NAMES.join("|")
        );
    }
    let bw_tests = tests.iter().any(|t| t.is_bw());
    for (flag, given) in [
        ("-t", args.tx_depth),
        ("-l", args.post_list),
        ("-Q", args.cq_mod),
    ] {
        if let (Some(v), false) = (given, bw_tests) {
            crate::usage!(
                "{flag} {v}: the bandwidth flags apply to send_bw, write_bw, read_bw and atomic_bw only (--test {})",
                args.tests
            );
        }
    }
    let given: Option<Vec<Transport>> = match &args.transports {
        None => None,
        Some(list) => {
            let mut v = Vec::new();
            for t in list.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                let Some(tr) = Transport::from_name(t) else {
                    crate::usage!(
                        "-c: unknown transport {t:?} (one of {})",
                        Transport::NAMES.join("|")
                    );
                };
                if !v.contains(&tr) {
                    v.push(tr);
                }
            }
            if v.is_empty() {
                crate::usage!("-c: no transport given (UD, UC or RC)");
            }
            Some(v)
        }
    };
    let ops: Vec<AtomicOp> = match &args.atomic {
        None => vec![AtomicOp::FetchAndAdd, AtomicOp::CmpAndSwap],
        Some(list) => {
            if !tests.iter().any(|t| t.is_atomic()) {
                crate::usage!(
                    "-A {list}: the atomic operations apply to --test atomic_lat and atomic_bw only"
                );
            }
            let mut v = Vec::new();
            for a in list.split(',').map(str::trim).filter(|a| !a.is_empty()) {
                let Some(op) = AtomicOp::from_name(a) else {
                    crate::usage!(
                        "-A: unknown atomic operation {a:?} (one of {})",
                        AtomicOp::NAMES.join("|")
                    );
                };
                if !v.contains(&op) {
                    v.push(op);
                }
            }
            if v.is_empty() {
                crate::usage!("-A: no operation given (FETCH_AND_ADD, CMP_AND_SWAP)");
            }
            v
        }
    };
    let mut runs = Vec::new();
    for test in tests {
        let transports = given
            .clone()
            .unwrap_or_else(|| default_transports(test).to_vec());
        for t in transports {
            if let Err(rule) = test.check_transport(t) {
                crate::usage!("-c {} with --test {}: {rule}", t.name(), test.name());
            }
            let these: &[AtomicOp] = if test.is_atomic() {
                &ops
            } else {
                &[AtomicOp::FetchAndAdd]
            };
            for &op in these {
                let sizes = match (test.is_atomic(), args.size) {
                    (true, _) => format!("-s {}", ibconfig::bench::ATOMIC_SIZE),
                    (false, Some(s)) => format!("-s {s}"),
                    (false, None) => "-a".to_string(),
                };
                let mut line = format!(
                    "{} -c {} {sizes} -n {}",
                    test.program(),
                    t.name(),
                    args.iters
                );
                if args.events {
                    line.push_str(" -e");
                }
                if test.is_atomic() {
                    let _ = write!(line, " -A {}", op.name());
                }
                if test.is_bw() {
                    for (flag, v) in [
                        ("-t", args.tx_depth),
                        ("-l", args.post_list),
                        ("-Q", args.cq_mod),
                    ] {
                        if let Some(v) = v {
                            let _ = write!(line, " {flag} {v}");
                        }
                    }
                }
                let run = match ibconfig::Run::parse(&line) {
                    Ok(r) => r,
                    Err(e) => crate::usage!("{line}: {e}"),
                };
                let base = ibconfig::PingPongConfig::new(t, ibconfig::Role::Client);
                if let Err(rule) = run.config(&base).validate() {
                    if args.events && rule == ibconfig::Rule::WriteLatWithEvents {
                        crate::usage!("-e with --test write_lat: {rule}");
                    }
                    crate::usage!("{line}: {rule}");
                }
                runs.push(run);
            }
        }
    }
    Ok(runs)
}

/// The perftest command line Linux's guests run for `run`: the same flags, except that
/// the atomic tests' fixed 8-byte size is left to perftest (it sets it itself).
pub fn linux_command(run: &ibconfig::Run) -> String {
    let line = run.to_string();
    if run.test.is_atomic() {
        line.replace(&format!(" -s {}", ibconfig::bench::ATOMIC_SIZE), "")
    } else {
        line
    }
}

/// The name of a case in tables and files: `ib_send_lat -c UD`, `ib_atomic_lat -c RC -A
/// CMP_AND_SWAP`.
pub fn case_label(run: &ibconfig::Run) -> String {
    let mut s = format!("{} -c {}", run.test.program(), run.transport.name());
    if run.test.is_atomic() {
        let _ = write!(s, " -A {}", run.atomic.name());
    }
    s
}

/// The tests `--test` takes.
/// The sizes a run measures (what both stacks must report).
fn planned_sizes(run: &ibconfig::Run) -> usize {
    let base = ibconfig::PingPongConfig::new(run.transport, ibconfig::Role::Client);
    let c = run.config(&base);
    c.size_list(c.effective_mtu(verbs::Mtu::Mtu4096)).count()
}

/// perftest's seven latency columns, microseconds: t_min, t_max, t_typical, t_avg, t_stdev,
/// 99%, 99.9%.
pub type Latency = [f64; 7];

/// perftest's bandwidth columns of the client's row: BW peak and BW average in MB/sec
/// (perftest's MB: MiB), MsgRate in Mpps.
pub type Bandwidth = [f64; 3];

/// The client's figures of one size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Figures {
    Latency(Latency),
    Bandwidth(Bandwidth),
}

impl Figures {
    pub fn latency(&self) -> Option<&Latency> {
        match self {
            Figures::Latency(l) => Some(l),
            Figures::Bandwidth(_) => None,
        }
    }
    pub fn bandwidth(&self) -> Option<&Bandwidth> {
        match self {
            Figures::Bandwidth(b) => Some(b),
            Figures::Latency(_) => None,
        }
    }
}

/// A port's traffic over a run: PortXmitData, PortRcvData (4-byte words), PortXmitPkts,
/// PortRcvPkts.
pub type PortTraffic = [u64; 4];

/// One size of one stack and case.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub stack: Stack,
    /// [`case_label`] of the run.
    pub case: String,
    pub test: String,
    pub transport: String,
    /// The atomic tests' operation, empty for the other tests.
    pub atomic: String,
    pub bytes: u64,
    /// Iterations (latency tests) or messages (bandwidth tests) of the size.
    pub iterations: u64,
    /// The client's row (`None`: the client reported the size aborted or printed no row).
    pub figures: Option<Figures>,
    /// The model's counters over that size, server (0) and client (1).
    pub pcie: [Option<Counters>; 2],
}

/// One node's port traffic over one run, as its stack read it.
#[derive(Clone, Debug, PartialEq)]
pub struct PortRow {
    pub stack: Stack,
    pub case: String,
    pub node: &'static str,
    /// `None`: the stack printed no (consistent) reading for the run.
    pub traffic: Option<PortTraffic>,
}

/// When a node's HCA was ready for traffic.
#[derive(Clone, Debug, PartialEq)]
pub struct Ready {
    pub stack: Stack,
    /// Which boot: "pair" (one boot pair per stack).
    pub boot: String,
    pub node: &'static str,
    pub after: Option<Duration>,
}

/// A perftest latency row: `bytes iterations` and the seven figures (9 numbers).
pub fn parse_row(line: &str) -> Option<(u64, u64, Latency)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() != 9 {
        return None;
    }
    let bytes = f[0].parse().ok()?;
    let iters = f[1].parse().ok()?;
    let mut lat = [0.0; 7];
    for (v, t) in lat.iter_mut().zip(&f[2..]) {
        *v = t.parse().ok()?;
    }
    Some((bytes, iters, lat))
}

/// A perftest bandwidth row: `bytes iterations`, BW peak, BW average, MsgRate (5 numbers).
pub fn parse_bw_row(line: &str) -> Option<(u64, u64, Bandwidth)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() != 5 {
        return None;
    }
    let bytes = f[0].parse().ok()?;
    let iters = f[1].parse().ok()?;
    let mut bw = [0.0; 3];
    for (v, t) in bw.iter_mut().zip(&f[2..]) {
        *v = t.parse().ok()?;
    }
    Some((bytes, iters, bw))
}

/// A perftest latency or bandwidth row.
pub fn parse_any_row(line: &str) -> Option<(u64, u64, Figures)> {
    parse_row(line)
        .map(|(b, n, l)| (b, n, Figures::Latency(l)))
        .or_else(|| parse_bw_row(line).map(|(b, n, w)| (b, n, Figures::Bandwidth(w))))
}

/// perfquery's four traffic counters, in [`PortTraffic`] order.
const PERFQUERY_FIELDS: [&str; 4] = ["PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts"];

/// The value of a perfquery line `PortXmitData:....................1234` for `field`.
fn perfquery_field(line: &str, field: &str) -> Option<u64> {
    let rest = line.trim_start().strip_prefix(field)?.strip_prefix(':')?;
    rest.trim_start_matches('.').trim().parse().ok()
}

/// The traffic between the second of two back-to-back reads (`r0`, `r1`) and a read after
/// it (`r2`), without the cost of one read itself (`r1 - r0`): `r2 - r1 - (r1 - r0)`, field
/// by field; `None` if the reads are inconsistent (a counter went backwards).
pub fn traffic_between(r0: PortTraffic, r1: PortTraffic, r2: PortTraffic) -> Option<PortTraffic> {
    let mut t = [0; 4];
    for i in 0..4 {
        t[i] = (r2[i].checked_add(r0[i])?).checked_sub(r1[i].checked_mul(2)?)?;
        if r1[i] < r0[i] || r2[i] < r1[i] {
            return None;
        }
    }
    Some(t)
}

/// One perftest row of a Linux node: (command, bytes, iterations, figures, this node's and
/// the peer's counters over the size).
pub type LinuxRow = (String, u64, u64, Figures, Option<[Counters; 2]>);

/// Reads one Linux guest's console as it arrives: which perftest command runs (between
/// `ibk_pair`'s `run` and `result` lines), the table header, the rows, and the `perfquery -x`
/// reads around each command; snapshots the model at the header and each row.
#[derive(Debug, Default)]
pub struct LinuxTracker {
    test: Option<String>,
    /// This node's and the peer's counters at the last snapshot.
    last: Option<[Counters; 2]>,
    /// Inside a `perfquery` run: the fields read so far.
    perfquery: Option<[Option<u64>; 4]>,
    /// Complete reads since the last perftest command ended.
    reads: Vec<PortTraffic>,
    /// The two reads before the perftest command now running.
    before: Option<(PortTraffic, PortTraffic)>,
    /// A perftest command that ended with two reads before it, waiting for its read after.
    awaiting: Option<(String, PortTraffic, PortTraffic)>,
    pub rows: Vec<LinuxRow>,
    /// (command, port traffic over it)
    pub ports: Vec<(String, Option<PortTraffic>)>,
}

impl LinuxTracker {
    /// Feeds one console line; `counters` reads the model counters of this node and of its
    /// peer now.
    pub fn line(&mut self, line: &str, counters: impl FnOnce() -> [Counters; 2]) {
        if let Some(at) = line.find("ibkern-linux: ") {
            let rest = &line[at + 14..];
            if let Some(cmd) = rest.strip_prefix("run ") {
                if cmd.starts_with("perfquery") {
                    self.perfquery = Some([None; 4]);
                } else if cmd.starts_with("ib_") {
                    self.test = Some(cmd.trim_end().to_string());
                    self.last = None;
                    let n = self.reads.len();
                    self.before = (n >= 2).then(|| (self.reads[n - 2], self.reads[n - 1]));
                    self.reads.clear();
                }
            } else if let Some(result) = rest.strip_prefix("result rc=") {
                let (rc, cmd) = result.split_once(": ").unwrap_or((result, ""));
                if let Some(fields) = self.perfquery.take() {
                    let read = match fields {
                        [Some(a), Some(b), Some(c), Some(d)] if rc == "0" => Some([a, b, c, d]),
                        _ => None,
                    };
                    if let Some((cmd, r0, r1)) = self.awaiting.take() {
                        let t = read.and_then(|r2| traffic_between(r0, r1, r2));
                        self.ports.push((cmd, t));
                    } else if let Some(r) = read {
                        self.reads.push(r);
                    }
                } else if cmd.starts_with("ib_") {
                    self.test = None;
                    self.last = None;
                    if let Some((r0, r1)) = self.before.take() {
                        self.awaiting = Some((cmd.trim_end().to_string(), r0, r1));
                    }
                }
            }
            return;
        }
        if let Some(fields) = self.perfquery.as_mut() {
            for (slot, name) in fields.iter_mut().zip(PERFQUERY_FIELDS) {
                if let Some(v) = perfquery_field(line, name) {
                    *slot = Some(v);
                }
            }
            return;
        }
        let Some(cmd) = self.test.clone() else {
            return;
        };
        if line.starts_with(" #bytes") {
            self.last = Some(counters());
        } else if let Some((bytes, iters, lat)) = parse_any_row(line) {
            let now = counters();
            let delta = self
                .last
                .map(|b| [diff_counters(&now[0], &b[0]), diff_counters(&now[1], &b[1])]);
            self.last = Some(now);
            self.rows.push((cmd, bytes, iters, lat, delta));
        }
    }
}

/// Where Linux's ib_core shows a port's PMA counters; reading it makes mlx4_ib read
/// PortCountersExtended through MAD_IFC as ibkern's driver does (its `port_counters`).
pub const SYSFS_COUNTER: &str = "/sys/class/infiniband/mlx4_0/ports/1/counters/port_xmit_data";

/// The guest script of the Linux side: ib_umad for perfquery, one read of the sysfs
/// counter (so that Linux's trace holds its own local PMA read, which ibkern's client makes
/// around each run), then per case two `perfquery -x` reads, the perftest pair, one read
/// after.
pub fn linux_script(runs: &[ibconfig::Run]) -> String {
    let mut s = format!("ibk_run modprobe ib_umad\nibk_run cat {SYSFS_COUNTER}\n");
    for r in runs {
        let _ = writeln!(
            s,
            "ibk_run perfquery -x\nibk_run perfquery -x\nibk_pair {}\nibk_run perfquery -x",
            linux_command(r)
        );
    }
    s
}

/// The `-c` list of a send_lat run that pairs ibkern with Linux (`mixed`): UD and
/// UC, upper case; with `-s`, a size both stacks run on every transport given (2 B to
/// 8 MiB, at most the 2048-byte UD MTU both use on ConnectX-3 when UD is among them).
pub(crate) fn send_lat_transports(list: &str, size: Option<u32>) -> Result<Vec<String>> {
    let transports: Vec<String> = list
        .split(',')
        .map(|t| t.trim().to_ascii_uppercase())
        .filter(|t| !t.is_empty())
        .collect();
    if transports.is_empty() {
        crate::usage!("-c: no transport given (UD, UC)");
    }
    for t in &transports {
        if t != "UD" && t != "UC" {
            crate::usage!("-c: unknown transport {t:?} (UD or UC)");
        }
    }
    if let Some(s) = size {
        use ibconfig::bench::{DEFAULT_MTU_CAP, MAX_SWEEP_SIZE, MIN_SIZE};
        if !(MIN_SIZE..=MAX_SWEEP_SIZE).contains(&s) {
            crate::usage!("-s: {s} is outside {MIN_SIZE}..={MAX_SWEEP_SIZE} bytes");
        }
        if transports.iter().any(|t| t == "UD") {
            // The same rule (and message) as the kernel's for a UD size.
            let cap = DEFAULT_MTU_CAP.bytes();
            if s > cap {
                let rule = ibconfig::Rule::UdSizeAboveMtu { size: s, mtu: cap };
                crate::usage!("-s {s} with -c UD: {rule} (both stacks use 2048 on ConnectX-3)");
            }
        }
    }
    Ok(transports)
}

/// What ibkern's client printed, per run of its plan (keyed by the run's command line):
/// its result records and its port line.
#[derive(Debug, Default)]
pub struct IbkernConsole {
    pub records: Vec<(String, crate::results::Record)>,
    /// The bandwidth tests' result lines.
    pub bw_records: Vec<(String, crate::bw_results::BwRecord)>,
    pub ports: Vec<(String, crate::results::PortRun)>,
    pub bad_lines: Vec<String>,
}

/// Reads the client's console: `pingpong: run R/N pass P/M: CMD` headers name the run the
/// following `ibkern-result` and `ibkern-port` lines belong to; the first `skip` runs of
/// the plan are left out.
pub fn read_ibkern_console(console: &str, skip: usize) -> IbkernConsole {
    let mut c = IbkernConsole::default();
    let mut cmd: Option<String> = None;
    for line in console.lines() {
        if let Some(rest) = line.strip_prefix("pingpong: run ") {
            if let Some((place, command)) = rest.split_once(": ") {
                if ibconfig::Run::parse(command).is_ok() {
                    let r: usize = place
                        .split('/')
                        .next()
                        .and_then(|r| r.parse().ok())
                        .unwrap_or(0);
                    cmd = (r > skip).then(|| command.trim_end().to_string());
                }
            }
            continue;
        }
        let Some(run) = cmd.clone() else {
            continue;
        };
        let Some((kind, _, json)) = bench::line::Kind::find(line) else {
            continue;
        };
        match bench::line::Line::parse(kind, json) {
            Ok(Line::Latency(l)) => c.records.push((
                run,
                crate::results::Record {
                    node: 1,
                    line: l,
                    anatomy: None,
                },
            )),
            Ok(Line::Bandwidth(l)) => c
                .bw_records
                .push((run, crate::bw_results::BwRecord { node: 1, line: l })),
            Ok(Line::Port(l)) => c
                .ports
                .push((run, crate::results::PortRun { node: 1, line: l })),
            Ok(_) => {}
            Err(why) => c.bad_lines.push(format!("{why}: {line}")),
        }
    }
    c
}

/// The `ibkern-port` lines of a console, in order (unreadable ones are left out: the
/// client's are checked by [`read_ibkern_console`]).
pub fn server_port_lines(console: &str) -> Vec<crate::results::PortRun> {
    console
        .lines()
        .filter_map(|l| {
            let at = l.find(bench::line::PORT_PREFIX)?;
            let json = &l[at + bench::line::PORT_PREFIX.len()..];
            let line = <bench::line::PortLine as bench::line::Parse>::parse(json).ok()?;
            Some(crate::results::PortRun { node: 0, line })
        })
        .collect()
}

/// Whether a port line is of `run`'s case: its test, transport and (atomic_lat) operation.
fn same_case(p: &crate::results::PortRun, run: &ibconfig::Run) -> bool {
    let Ok(ran) = ibconfig::Run::parse(&p.line.command) else {
        return false;
    };
    ran.test == run.test
        && ran.transport == run.transport
        && (!run.test.is_atomic() || ran.atomic == run.atomic)
}

/// `compare.csv`: one row per stack, case and size; latency of the client (latency tests)
/// or its bandwidth and message rate (bandwidth tests), then the model's counts per
/// iteration (per message for the bandwidth tests) of the server's and the client's HCA.
pub fn to_csv(rows: &[Row]) -> String {
    let mut s = String::from("stack,test,transport,atomic,bytes,iterations,t_min_us,t_max_us,t_typical_us,t_avg_us,t_stdev_us,p99_us,p99_9_us,bw_peak_mbs,bw_avg_mbs,msg_rate_mpps");
    for node in ["server", "client"] {
        for c in PCIE_COLUMNS {
            let _ = write!(s, ",{node}_{c}_per_iter");
        }
    }
    s.push('\n');
    for r in rows {
        let _ = write!(
            s,
            "{},{},{},{},{},{}",
            r.stack.name(),
            r.test,
            r.transport,
            r.atomic,
            r.bytes,
            r.iterations
        );
        let lat = r.figures.as_ref().and_then(Figures::latency);
        for i in 0..7 {
            match lat {
                Some(l) => {
                    let _ = write!(s, ",{:.3}", l[i]);
                }
                None => s.push(','),
            }
        }
        let bw = r.figures.as_ref().and_then(Figures::bandwidth);
        for i in 0..3 {
            match bw {
                Some(b) if i == 2 => {
                    let _ = write!(s, ",{:.6}", b[i]);
                }
                Some(b) => {
                    let _ = write!(s, ",{:.2}", b[i]);
                }
                None => s.push(','),
            }
        }
        for c in &r.pcie {
            for v in c
                .map(|c| pcie_per_iter(&c, r.iterations).map(Some))
                .unwrap_or([None; 12])
            {
                match v {
                    Some(v) => {
                        let _ = write!(s, ",{v:.2}");
                    }
                    None => s.push(','),
                }
            }
        }
        s.push('\n');
    }
    s
}

/// `ports.csv`: one row per stack, case and node read: the port's traffic over the run.
pub fn ports_csv(ports: &[PortRow]) -> String {
    let mut s = String::from(
        "stack,case,node,port_xmit_data_words,port_rcv_data_words,port_xmit_pkts,port_rcv_pkts\n",
    );
    for p in ports {
        let _ = write!(s, "{},{},{}", p.stack.name(), p.case, p.node);
        match p.traffic {
            Some(t) => {
                let _ = writeln!(s, ",{},{},{},{}", t[0], t[1], t[2], t[3]);
            }
            None => s.push_str(",,,,\n"),
        }
    }
    s
}

/// The table: per case, both stacks' rows by size (perftest's columns, the client's
/// figures: latency, or bandwidth and message rate), then the model's MMIO writes/reads,
/// BlueFlame bytes, DMA reads/writes and interrupts per iteration (per message for the
/// bandwidth tests) of the client's and the server's HCA; under it the client port's
/// traffic over the run as each stack read it.
pub fn table(rows: &[Row], ports: &[PortRow]) -> String {
    let mut s = String::new();
    let mut cases: Vec<&str> = Vec::new();
    for r in rows {
        if !cases.contains(&r.case.as_str()) {
            cases.push(&r.case);
        }
    }
    for case in cases {
        let bw = rows
            .iter()
            .any(|r| r.case == case && Test::from_name(&r.test).is_some_and(Test::is_bw));
        if bw {
            let _ = writeln!(
                s,
                "{case}: client bandwidth [MB/sec] and message rate [Mpps] | model PCIe transactions per message, client HCA then server HCA (mmio w/r, BlueFlame bytes, dma r/w, irqs)"
            );
            let _ = writeln!(
                s,
                " {:<7} {:>8} {:>6} {:>15} {:>18} {:>13} | {:>7} {:>6} {:>7} {:>6} {:>6} {:>5} | {:>7} {:>6} {:>7} {:>6} {:>6} {:>5}",
                "stack", "#bytes", "#msgs", "BW peak", "BW average", "MsgRate", "mmio_w",
                "mmio_r", "bf_B", "dma_r", "dma_w", "irq", "mmio_w", "mmio_r", "bf_B", "dma_r",
                "dma_w", "irq"
            );
        } else {
            let _ = writeln!(
                s,
                "{case}: client latency [usec] | model PCIe transactions per iteration, client HCA then server HCA (mmio w/r, BlueFlame bytes, dma r/w, irqs)"
            );
            let _ = writeln!(
                s,
                " {:<7} {:>8} {:>6} {:>10} {:>10} {:>10} {:>10} {:>9} {:>10} {:>10} | {:>7} {:>6} {:>7} {:>6} {:>6} {:>5} | {:>7} {:>6} {:>7} {:>6} {:>6} {:>5}",
                "stack", "#bytes", "#iter", "t_min", "t_max", "t_typical", "t_avg", "t_stdev",
                "99%", "99.9%", "mmio_w", "mmio_r", "bf_B", "dma_r", "dma_w", "irq", "mmio_w",
                "mmio_r", "bf_B", "dma_r", "dma_w", "irq"
            );
        }
        let mut these: Vec<&Row> = rows.iter().filter(|r| r.case == case).collect();
        these.sort_by_key(|r| (r.bytes, r.stack));
        for r in these {
            let _ = write!(
                s,
                " {:<7} {:>8} {:>6}",
                r.stack.name(),
                r.bytes,
                r.iterations
            );
            match r.figures {
                Some(Figures::Latency(l)) => {
                    let _ = write!(
                        s,
                        " {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>9.2} {:>10.2} {:>10.2}",
                        l[0], l[1], l[2], l[3], l[4], l[5], l[6]
                    );
                }
                Some(Figures::Bandwidth(b)) => {
                    let _ = write!(s, " {:>15.2} {:>18.2} {:>13.6}", b[0], b[1], b[2]);
                }
                None => {
                    let width = if bw { 48 } else { 76 };
                    let _ = write!(s, " {:>width$}", "(no figures: size aborted)");
                }
            }
            for node in [1, 0] {
                match r.pcie[node] {
                    Some(c) => {
                        let p = pcie_per_iter(&c, r.iterations);
                        let _ = write!(
                            s,
                            " | {:>7.2} {:>6.2} {:>7.1} {:>6.2} {:>6.2} {:>5.2}",
                            p[0], p[1], p[2], p[3], p[6], p[9]
                        );
                    }
                    None => {
                        let _ = write!(s, " | {:>46}", "-");
                    }
                }
            }
            s.push('\n');
        }
        let mut port_lines: Vec<&PortRow> = ports
            .iter()
            .filter(|p| p.case == case && p.node == "client")
            .collect();
        port_lines.sort_by_key(|p| p.stack);
        if !port_lines.is_empty() {
            let _ = writeln!(
                s,
                " client port over the run (PMA: data in 4-byte words, packets):"
            );
        }
        for p in port_lines {
            match p.traffic {
                Some(t) => {
                    let _ = writeln!(
                        s,
                        " {:<7} xmit {:>10} words {:>7} pkts | rcv {:>10} words {:>7} pkts",
                        p.stack.name(),
                        t[0],
                        t[2],
                        t[1],
                        t[3]
                    );
                }
                None => {
                    let _ = writeln!(s, " {:<7} (no reading)", p.stack.name());
                }
            }
        }
        s.push('\n');
    }
    s
}

/// `compare.svg`: the client's t_typical against size, one line per stack and case.
pub fn to_svg(rows: &[Row]) -> String {
    to_svg_with(rows, None)
}

/// [`to_svg`] with the run's provenance as subtitle and metadata.
pub fn to_svg_with(rows: &[Row], provenance: Option<&crate::provenance::Provenance>) -> String {
    let mut names: Vec<(Stack, String)> = Vec::new();
    for r in rows {
        let latency = r.figures.as_ref().and_then(Figures::latency).is_some();
        if latency && !names.contains(&(r.stack, r.case.clone())) {
            names.push((r.stack, r.case.clone()));
        }
    }
    names.sort();
    let series: Vec<crate::plot::Series> = names
        .iter()
        .map(|(st, case)| {
            let mut points: Vec<crate::plot::Point> = rows
                .iter()
                .filter(|r| r.stack == *st && &r.case == case)
                .filter_map(|r| {
                    r.figures
                        .as_ref()
                        .and_then(Figures::latency)
                        .map(|l| crate::plot::Point {
                            bytes: r.bytes,
                            us: l[2],
                            p99: Some(l[5]),
                            inline: None,
                        })
                })
                .filter(|p| p.bytes > 0 && p.us > 0.0 && p.us.is_finite())
                .collect();
            points.sort_by_key(|p| p.bytes);
            let name = format!(
                "{} {}",
                st.name(),
                case.strip_prefix("ib_")
                    .unwrap_or(case)
                    .replace(" -c ", " ")
            );
            crate::plot::Series { name, points }
        })
        .collect();
    let title = "perftest latency under QEMU: Linux perftest vs ibkern (median; RTT/2 for send and write, full RTT for read and atomic)";
    crate::plot::svg(&crate::plot::Plot {
        title: provenance.map_or_else(|| title.to_string(), |p| p.marked(title)),
        subtitle: provenance.map_or(Vec::new(), |p| p.subtitle()),
        metadata: provenance.and_then(|p| serde_json::to_string(&p.to_json()).ok()),
        series,
    })
}

/// `hca-ready.csv`.
pub fn ready_csv(ready: &[Ready]) -> String {
    let mut s = String::from("stack,boot,node,seconds_from_qemu_start\n");
    for r in ready {
        let _ = writeln!(
            s,
            "{},{},{},{}",
            r.stack.name(),
            r.boot,
            r.node,
            r.after
                .map_or(String::new(), |d| format!("{:.3}", d.as_secs_f64()))
        );
    }
    s
}

/// The ibkern side as `cargo qemu pingpong` arguments: the first case's test, transport
/// and sizes as the nodes' keys (the client's plan gives every run), the emulated guest.
fn ibkern_args(args: &CompareArgs, first: &ibconfig::Run, out: &std::path::Path) -> PingPongArgs {
    let (all, size) = match first.sizes {
        ibconfig::Sizes::All => (true, None),
        ibconfig::Sizes::Single(n) => (false, Some(n)),
    };
    PingPongArgs {
        guest: crate::args::GuestArgs::emulated(),
        profile: args.profile.clone(),
        flags: crate::args::PingPongFlags {
            test: ibconfig::Benchmark::Perftest(first.test),
            transports: Some(first.transport.name().to_string()),
            all,
            size,
            iters: args.iters,
            inline: None,
            device: crate::args::DeviceFlags::default(),
            irq: ibconfig::HcaIrq::Msix,
            events: args.events,
            modes: None,
            srq: crate::args::SrqFlags::default(),
            anatomy: false,
            drop_probability: 0.0,
            seed: 1,
            max_losses: None,
            trace: args.trace,
            timeout: args.timeout,
            bw: crate::args::BwFlags::default(),
            set: crate::args::SetArgs { set: Vec::new() },
            kernel: crate::args::KernelArgs {
                kernel: args.kernel.kernel.clone(),
                loader_log: args.kernel.loader_log,
            },
        },
        back_to_back: false,
        out: Some(out.to_path_buf()),
        verbose: args.verbose,
    }
}

/// The run ibkern's client makes before the cases, not reported: its rendezvous Hellos wait
/// for the server to boot (the client's Hello is repeated until the server answers), which
/// would otherwise count in the first case's PCIe transactions and port traffic. Linux's
/// perftest pairs wait for each other over TCP, which the model does not see.
/// Its size is one the checked-in Linux trace has (a 64-byte inline UD SEND).
pub const WARM_UP: &str = "ib_send_lat -c UD -s 64 -n 5";

/// The ibkern pair's configurations: the server follows (and ends after the plan), the
/// client's plan is [`WARM_UP`], then one `run=` line per case. Both checked as the kernel
/// checks them.
pub fn ibkern_configs(pp: &PingPongArgs, runs: &[ibconfig::Run]) -> Result<[ibconfig::Config; 2]> {
    use ibconfig::Role;
    let first = runs[0].transport;
    let server = crate::pingpong::node_config(pp, first, Role::Server)?;
    let mut client = crate::pingpong::node_config(pp, first, Role::Client)?;
    let warm_up = ibconfig::Run::parse(WARM_UP).map_err(|e| anyhow::anyhow!("{WARM_UP}: {e}"))?;
    for r in std::iter::once(&warm_up).chain(runs) {
        if let Err(e) = client.push_run(*r) {
            crate::usage!("run={r}: {e}");
        }
    }
    for c in [&server, &client] {
        crate::kernel_config::check_config(c)?;
    }
    Ok([server, client])
}

/// Whether the model's counts of a client's HCA over a size cover the whole size: every
/// latency test's client sends at least one packet and receives at least one per
/// iteration; a bandwidth test's client sends at least one per message (a SEND or WRITE
/// over UD or UC is answered by nothing, and RC acknowledges several at once).
pub fn count_complete(client: &Counters, iterations: u64, bw: bool) -> bool {
    client.packets_sent >= iterations && (bw || client.packets_received >= iterations)
}

/// Whether a client's traffic over a run is consistent with the run: at least one packet
/// sent per iteration (message) of every size, and for the latency tests one received too
/// (every latency test's client receives a message, a response or an acknowledgement per
/// iteration).
pub fn traffic_consistent(t: &PortTraffic, run: &ibconfig::Run) -> bool {
    let least = planned_sizes(run) as u64 * u64::from(run.iterations);
    t[2] >= least && (run.test.is_bw() || t[3] >= least) && t[0] >= t[2] && t[1] >= t[3]
}

/// atomic_lat's operation of a run, empty for the other tests.
fn atomic_name(r: &ibconfig::Run) -> String {
    if r.test.is_atomic() {
        r.atomic.name().to_string()
    } else {
        String::new()
    }
}

/// Runs both stacks and writes the files.
pub fn compare_command(args: CompareArgs) -> Result<Exit> {
    let workspace = crate::host::Workspace::locate();
    let base = args
        .out
        .clone()
        .unwrap_or_else(|| workspace.root.join("out/compare"));
    crate::run_dir::check(&base)?;
    let runs = cases(&args)?;
    let pp = ibkern_args(&args, &runs[0], &base);
    // Every ibkern node's configuration is checked, and QEMU looked for, before anything is
    // built, written or booted.
    let configs = ibkern_configs(&pp, &runs)?;
    let plan = crate::pingpong::plan_runs(&configs[1]);
    let qemu = crate::host::qemu_binary(None)?;
    // The boot media live outside the run directory, removed when the run ends.
    let media = crate::prepare::BootMedia::new()?;
    let guest = crate::prepare::GuestBuilder::new(&pp.guest, &pp.kernel)?.media_in(&media);
    let started = crate::provenance::now_iso();
    let mut facts: Vec<crate::provenance::NodeFacts> = Vec::new();
    let out = crate::run_dir::create(&base)?;
    say(&format!(
        "this run's files: {} ({} points to it)",
        out.display(),
        base.join(crate::run_dir::LATEST).display()
    ));
    let mut exit = Exit::Success;
    let worse = |e: Exit, exit: &mut Exit| {
        if *exit == Exit::Success {
            *exit = e;
        }
    };
    let mut rows: Vec<Row> = Vec::new();
    let mut ports: Vec<PortRow> = Vec::new();
    let mut ready: Vec<Ready> = Vec::new();
    // Progress: Linux's pair runs every case in one boot, then ibkern's pair its plan.
    let mut progress_plan = vec![crate::progress::RunPlan {
        name: "Linux".into(),
        sizes: runs
            .iter()
            .flat_map(|r| {
                let base = ibconfig::PingPongConfig::new(r.transport, ibconfig::Role::Client);
                crate::progress::planned(&r.config(&base))
            })
            .collect(),
    }];
    progress_plan.extend(crate::pingpong::plan_progress(&plan));
    let progress = crate::progress::start_guarded(progress_plan, args.verbose);

    // Linux: one pair, the cases one after another.
    let linux_dir = args
        .linux_dir
        .clone()
        .unwrap_or_else(|| workspace.root.join("out/linux"));
    let image = crate::linux::image::build(&linux_dir)?;
    let run = crate::linux::run::LinuxRun {
        trace: args.trace,
        guests: 2,
        msix: true,
        machine: crate::machine::Machine::Pc,
        script: linux_script(&runs),
        timeout: Duration::from_secs(args.timeout),
        test_timeout: args.timeout,
        link_ports: crate::linux::run::free_ports()?,
        profiles: pp.profile.profiles.clone(),
    };
    let work = out.join("linux");
    fs::create_dir_all(&work)?;
    let mut specs = crate::linux::run::node_specs(&image, &run, &work)?;
    for spec in &mut specs {
        spec.console_log = Some(out.join(format!("{}.log", spec.name)));
    }
    crate::progress::begin_run("Linux");
    say(&format!(
        "Linux: booting two guests on one fabric ({} perftest runs)",
        runs.len()
    ));
    let mut trackers = [LinuxTracker::default(), LinuxTracker::default()];
    let mut linux_ready: [Option<Duration>; 2] = [None, None];
    let start = Instant::now();
    let fabric = sim::FabricConfig {
        trace: args.trace,
        ..sim::FabricConfig::default()
    };
    let nodes = run_nodes_on(
        fabric,
        specs,
        run.timeout,
        &mut |node, line, server, hcas| {
            if linux_ready[node].is_none() && crate::linux::run::is_ready_line(line) {
                linux_ready[node] = Some(start.elapsed());
            }
            trackers[node].line(line, || {
                [server.counters(hcas[node]), server.counters(hcas[1 - node])]
            });
        },
    )?;
    let outcome = crate::linux::run::judge_nodes(nodes, start.elapsed());
    for line in outcome.report() {
        say(&format!("Linux {line}"));
    }
    for g in &outcome.guests {
        let mut f = crate::provenance::NodeFacts::from_console(
            &format!("Linux {}", g.node.name),
            &g.node.console,
        );
        f.config = Some(format!(
            "Debian's Linux with mlx4_core/mlx4_ib and perftest ({}.log)",
            g.node.name
        ));
        facts.push(f);
    }
    let linux_trace = outcome.trace();
    let mut ibkern_traces: Vec<String> = Vec::new();
    if !outcome.passed() {
        worse(
            if outcome.timed_out() {
                Exit::Timeout
            } else {
                Exit::GuestFailed
            },
            &mut exit,
        );
    }
    for (i, after) in linux_ready.iter().enumerate() {
        ready.push(Ready {
            stack: Stack::Linux,
            boot: "pair".into(),
            node: ["server", "client"][i],
            after: *after,
        });
    }
    let [server_t, client_t] = trackers;
    for r in &runs {
        let cmd = linux_command(r);
        let label = case_label(r);
        for (cmd_c, bytes, iters, lat, c) in client_t.rows.iter().filter(|x| x.0 == cmd) {
            // The server's own interval, or for READ, atomics and the bandwidth tests but
            // send_bw (whose server prints no rows: its HCA answers, or it only waits for the
            // end) the client's.
            let s = if r.test.passive_server() {
                c.map(|c| c[1])
            } else {
                server_t
                    .rows
                    .iter()
                    .find(|x| &x.0 == cmd_c && x.1 == *bytes)
                    .and_then(|x| x.4)
                    .map(|x| x[0])
            };
            let c = c.map(|c| c[0]);
            rows.push(Row {
                stack: Stack::Linux,
                case: label.clone(),
                test: r.test.name().into(),
                transport: r.transport.name().into(),
                atomic: atomic_name(r),
                bytes: *bytes,
                iterations: *iters,
                figures: Some(*lat),
                pcie: [s, c],
            });
        }
        for (node, t) in ["server", "client"].into_iter().zip([&server_t, &client_t]) {
            ports.push(PortRow {
                stack: Stack::Linux,
                case: label.clone(),
                node,
                traffic: t.ports.iter().find(|p| p.0 == cmd).and_then(|p| p.1),
            });
        }
    }

    // ibkern: one pair, the cases as the client's plan.
    let whole = Instant::now();
    let ib = crate::pingpong::run_pair_from(
        &pp,
        &guest,
        "ibkern",
        configs,
        "",
        &out,
        crate::pingpong::RunStartSnapshot::TableHeader,
    )?;
    say(&format!(
        "ibkern: the whole plan ({} runs) in one boot pair: {:.1} s",
        plan.len(),
        whole.elapsed().as_secs_f64()
    ));
    if let Some(e) = ib.exit {
        worse(e, &mut exit);
    }
    for (i, after) in ib.ready.iter().enumerate() {
        ready.push(Ready {
            stack: Stack::Ibkern,
            boot: "pair".into(),
            node: ["server", "client"][i],
            after: *after,
        });
    }
    ibkern_traces.extend(ib.outcomes.iter().map(|o| o.trace.clone()));
    for (o, role) in ib.outcomes.iter().zip(crate::pingpong::ROLES) {
        facts.push(crate::provenance::NodeFacts::from_console(
            &format!("ibkern {role}"),
            &o.console,
        ));
    }
    let client = ib
        .outcomes
        .get(1)
        .map(|o| read_ibkern_console(&o.console, 1))
        .unwrap_or_default();
    for bad in &client.bad_lines {
        say(&format!("FAILED: unreadable ibkern client line: {bad}"));
        worse(Exit::GuestFailed, &mut exit);
    }
    // The server's port lines (their command lines are the runs as the server ran them):
    // each case takes the next one of its test, transport and operation, after the
    // warm-up's.
    let mut server_ports: Vec<Option<crate::results::PortRun>> = ib
        .outcomes
        .first()
        .map(|o| server_port_lines(&o.console))
        .unwrap_or_default()
        .into_iter()
        .skip(1)
        .map(Some)
        .collect();
    let mut used = vec![false; ib.traffic.len()];
    // The warm-up run's one size: the plan's first UD 64-byte size.
    if let Some(i) = ib
        .traffic
        .iter()
        .position(|t| t.transport == "UD" && t.bytes == 64)
    {
        used[i] = true;
    }
    for r in &runs {
        let cmd = r.to_string();
        let label = case_label(r);
        // (test, transport, bytes, iterations, figures) of each size the client reported.
        let mut sizes: Vec<(Test, Transport, u64, u64, Option<Figures>)> = client
            .records
            .iter()
            .filter(|x| x.0 == cmd)
            .map(|(_, rec)| &rec.line)
            .map(|rec| {
                let lat = rec.stats.map(|f| {
                    Figures::Latency([
                        f.t_min,
                        f.t_max,
                        f.t_typical,
                        f.t_avg,
                        f.t_stdev,
                        f.p99,
                        f.p99_9,
                    ])
                });
                (
                    rec.test,
                    rec.transport,
                    u64::from(rec.bytes),
                    u64::from(rec.iterations),
                    lat,
                )
            })
            .collect();
        sizes.extend(
            client
                .bw_records
                .iter()
                .filter(|x| x.0 == cmd && x.1.line.role == ibconfig::Role::Client)
                .map(|(_, rec)| {
                    let rec = &rec.line;
                    let bw = rec.figures.map(|f| {
                        Figures::Bandwidth([f.bw_peak_mbs, f.bw_avg_mbs, f.msg_rate_mpps])
                    });
                    (
                        rec.test,
                        rec.transport,
                        u64::from(rec.bytes),
                        u64::from(rec.iterations),
                        bw,
                    )
                }),
        );
        for (test, transport, bytes, iterations, figures) in sizes {
            let group = crate::results::Results::group_name(test, transport);
            // The model's traffic of that size: the first one of its group and size not yet
            // taken (a plan's runs report in order).
            let t = ib
                .traffic
                .iter()
                .enumerate()
                .find(|(i, t)| !used[*i] && t.transport == group && t.bytes == bytes)
                .map(|(i, t)| {
                    used[i] = true;
                    t.per_node
                });
            rows.push(Row {
                stack: Stack::Ibkern,
                case: label.clone(),
                test: r.test.name().into(),
                transport: r.transport.name().into(),
                atomic: atomic_name(r),
                bytes,
                iterations,
                figures,
                pcie: [t.map(|t| t[0]), t.map(|t| t[1])],
            });
        }
        let server_port = server_ports
            .iter_mut()
            .find(|p| p.as_ref().is_some_and(|p| same_case(p, r)))
            .and_then(Option::take);
        ports.push(PortRow {
            stack: Stack::Ibkern,
            case: label.clone(),
            node: "server",
            traffic: server_port
                .and_then(|p| p.line.traffic())
                .map(|t| t.values()),
        });
        ports.push(PortRow {
            stack: Stack::Ibkern,
            case: label,
            node: "client",
            traffic: client
                .ports
                .iter()
                .find(|p| p.0 == cmd)
                .and_then(|p| p.1.line.traffic())
                .map(|t| t.values()),
        });
    }

    drop(progress);

    // A size's count starts when its table header reaches the runner, which can be after
    // the size has run (the console and the model are different channels, and a loaded
    // host delays the console): such a count is incomplete, and left out rather than shown.
    for r in rows.iter_mut() {
        let bw = Test::from_name(&r.test).is_some_and(Test::is_bw);
        if r.pcie[1].is_some_and(|c| !count_complete(&c, r.iterations, bw)) {
            say(&format!(
                "{} {} {} B: PCIe counts left out: the table header reached the runner after the size had started (rerun, or raise -n)",
                r.stack.name(),
                r.case,
                r.bytes
            ));
            r.pcie = [None, None];
        }
    }

    // Both stacks must have reported every size of every case, and read the client port's
    // traffic over each run consistently with it.
    for r in &runs {
        let label = case_label(r);
        let want = planned_sizes(r);
        for stack in [Stack::Linux, Stack::Ibkern] {
            let n = rows
                .iter()
                .filter(|x| x.stack == stack && x.case == label)
                .count();
            if n != want {
                say(&format!(
                    "FAILED: {} {label}: {n} size(s) reported, {want} expected",
                    stack.name()
                ));
                worse(Exit::GuestFailed, &mut exit);
            }
            let port = ports
                .iter()
                .find(|p| p.stack == stack && p.case == label && p.node == "client");
            match port.and_then(|p| p.traffic) {
                Some(t) if traffic_consistent(&t, r) => {}
                Some(t) => {
                    say(&format!(
                        "FAILED: {} {label}: the client port's traffic {t:?} (xmit/rcv words, xmit/rcv packets) is less than one packet each way per iteration",
                        stack.name()
                    ));
                    worse(Exit::GuestFailed, &mut exit);
                }
                None => {
                    say(&format!(
                        "FAILED: {} {label}: no reading of the client port's counters around the run",
                        stack.name()
                    ));
                    worse(Exit::GuestFailed, &mut exit);
                }
            }
        }
    }

    if args.trace {
        let ibkern_trace = sim::conformance::union(ibkern_traces.iter().map(String::as_str));
        fs::write(out.join("linux.trace"), &linux_trace)?;
        fs::write(out.join("ibkern.trace"), &ibkern_trace)?;
        let profile = args.profile.for_node(0).name;
        let checked_in = workspace
            .root
            .join(crate::conformance::linux_trace(&profile));
        let mut reference = vec![linux_trace.clone()];
        if let Ok(t) = fs::read_to_string(&checked_in) {
            reference.push(t);
        }
        let departures = args
            .departures
            .clone()
            .unwrap_or_else(|| workspace.root.join(crate::conformance::DEPARTURES));
        let report = crate::conformance::check(
            &ibkern_trace,
            &sim::conformance::union(reference.iter().map(String::as_str)),
            &departures,
        )?;
        fs::write(
            out.join("conformance.txt"),
            report.render("ibkern", "Linux"),
        )?;
        for f in report.uncovered() {
            say(&format!("conformance: NEW departure: {}", f.line));
        }
        say(&crate::conformance::summary(&report));
        if !report.uncovered().is_empty() {
            say("FAILED: ibkern departs from Linux where the departures file does not say so (conformance.txt)");
            worse(Exit::GuestFailed, &mut exit);
        }
    }

    let provenance = crate::provenance::Provenance::of_this_run(
        crate::provenance::Platform::Emulated {
            accel: "tcg".to_string(),
            qemu: crate::provenance::qemu_version(&qemu),
        },
        started,
        facts,
    );
    let comments: String = provenance
        .lines()
        .iter()
        .map(|l| format!("# {l}\n"))
        .collect();
    print!("{comments}{}", table(&rows, &ports));
    println!("--- time from QEMU's start to the HCA ready for traffic (host clock) ---");
    for r in &ready {
        println!(
            " {:<7} {:<5} {:<7} {}",
            r.stack.name(),
            r.boot,
            r.node,
            r.after.map_or("never seen".to_string(), |d| format!(
                "{:.2} s",
                d.as_secs_f64()
            ))
        );
    }
    let files = [
        ("compare.csv", comments.clone() + &to_csv(&rows)),
        ("ports.csv", comments.clone() + &ports_csv(&ports)),
        ("compare.svg", to_svg_with(&rows, Some(&provenance))),
        ("hca-ready.csv", comments.clone() + &ready_csv(&ready)),
    ];
    for (name, text) in &files {
        let path = out.join(name);
        fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    say(&format!(
        "wrote compare.csv, ports.csv, compare.svg, hca-ready.csv and the consoles into {}",
        out.display()
    ));
    say(&format!(
        "compare: {}",
        if exit == Exit::Success {
            "PASS"
        } else {
            "FAIL"
        }
    ));
    Ok(exit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> CompareArgs {
        use clap::Parser;
        let mut argv = vec!["cargo qemu", "compare"];
        argv.extend_from_slice(v);
        match crate::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::cli::Subcommands::Compare(a) => a,
            _ => panic!("not compare"),
        }
    }

    fn lines(v: &[&str]) -> Vec<String> {
        cases(&parse(v))
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn cases_are_every_test_over_every_transport_both_stacks_run() {
        assert_eq!(
            lines(&[]),
            [
                "ib_send_lat -c UD -a -n 20",
                "ib_send_lat -c UC -a -n 20",
                "ib_send_lat -c RC -a -n 20"
            ]
        );
        assert_eq!(
            lines(&["--test", "all", "-s", "64", "-n", "5"]),
            [
                "ib_send_lat -c UD -s 64 -n 5",
                "ib_send_lat -c UC -s 64 -n 5",
                "ib_send_lat -c RC -s 64 -n 5",
                "ib_write_lat -c UC -s 64 -n 5",
                "ib_write_lat -c RC -s 64 -n 5",
                "ib_read_lat -c RC -s 64 -n 5 -o 1",
                "ib_atomic_lat -c RC -s 8 -n 5 -A FETCH_AND_ADD -o 1",
                "ib_atomic_lat -c RC -s 8 -n 5 -A CMP_AND_SWAP -o 1",
            ]
        );
        assert_eq!(
            lines(&[
                "--test",
                "atomic_lat,send_lat",
                "-c",
                "rc",
                "-A",
                "cmp_and_swap",
                "-e"
            ]),
            [
                "ib_atomic_lat -c RC -s 8 -n 20 -e -A CMP_AND_SWAP -o 1",
                "ib_send_lat -c RC -a -n 20 -e",
            ]
        );
        // Linux runs the same command lines; perftest fixes atomic_lat's size itself.
        let all = cases(&parse(&["--test", "all"])).unwrap();
        assert_eq!(linux_command(&all[0]), all[0].to_string());
        assert_eq!(
            linux_command(&all[7]),
            "ib_atomic_lat -c RC -n 20 -A CMP_AND_SWAP -o 1"
        );
        assert_eq!(case_label(&all[7]), "ib_atomic_lat -c RC -A CMP_AND_SWAP");
        assert_eq!(case_label(&all[3]), "ib_write_lat -c UC");
        assert_eq!(planned_sizes(&all[0]), 11, "UD: 2 B to 2048 B");
        assert_eq!(planned_sizes(&all[1]), 23, "UC: 2 B to 8 MiB");
        assert_eq!(planned_sizes(&all[6]), 1, "atomics: 8 bytes");
    }

    #[test]
    fn bandwidth_cases_carry_their_flags_on_both_stacks() {
        assert_eq!(
            lines(&[
                "--test",
                "send_bw,write_bw",
                "-s",
                "64",
                "-n",
                "200",
                "-t",
                "32",
                "-Q",
                "8"
            ]),
            [
                "ib_send_bw -c UD -s 64 -n 200 -t 32 -Q 8",
                "ib_send_bw -c UC -s 64 -n 200 -t 32 -Q 8",
                "ib_send_bw -c RC -s 64 -n 200 -t 32 -Q 8",
                "ib_write_bw -c UC -s 64 -n 200 -t 32 -Q 8",
                "ib_write_bw -c RC -s 64 -n 200 -t 32 -Q 8",
            ]
        );
        // Mixed with latency tests: the bandwidth flags go to the bandwidth runs only; -A
        // to both atomic tests.
        let runs = cases(&parse(&[
            "--test",
            "read_lat,read_bw,atomic_bw,atomic_lat",
            "-s",
            "64",
            "-n",
            "48",
            "-l",
            "4",
            "-A",
            "CMP_AND_SWAP",
        ]))
        .unwrap();
        let v: Vec<String> = runs.iter().map(ToString::to_string).collect();
        assert_eq!(
            v,
            [
                "ib_read_lat -c RC -s 64 -n 48 -o 1",
                "ib_read_bw -c RC -s 64 -n 48 -o 16 -l 4",
                "ib_atomic_bw -c RC -s 8 -n 48 -A CMP_AND_SWAP -o 16 -l 4",
                "ib_atomic_lat -c RC -s 8 -n 48 -A CMP_AND_SWAP -o 1",
            ]
        );
        assert_eq!(
            linux_command(&runs[2]),
            "ib_atomic_bw -c RC -n 48 -A CMP_AND_SWAP -o 16 -l 4"
        );
        assert_eq!(case_label(&runs[2]), "ib_atomic_bw -c RC -A CMP_AND_SWAP");
        // `all` is the latency tests.
        assert!(cases(&parse(&["--test", "all"]))
            .unwrap()
            .iter()
            .all(|r| !r.test.is_bw()));
        // The ibkern client's plan takes them as run= lines.
        let a = parse(&[
            "--test",
            "send_lat,send_bw",
            "-c",
            "RC",
            "-s",
            "64",
            "-n",
            "200",
        ]);
        let runs = cases(&a).unwrap();
        let pp = ibkern_args(&a, &runs[0], std::path::Path::new("o"));
        let [_, client] = ibkern_configs(&pp, &runs).unwrap();
        assert_eq!(crate::pingpong::plan_runs(&client).len(), 3);
    }

    #[test]
    fn bandwidth_rows_parse_and_are_counted_per_message() {
        let row = " 64         200              12.34              11.50  		   0.188416";
        assert_eq!(parse_bw_row(row), Some((64, 200, [12.34, 11.50, 0.188416])));
        assert_eq!(parse_row(row), None);
        assert!(matches!(
            parse_any_row(row),
            Some((64, 200, Figures::Bandwidth(_)))
        ));
        assert_eq!(
            parse_bw_row(
                " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
            ),
            None
        );
        // The tracker keeps a bandwidth row with the counters over it.
        let mut t = LinuxTracker::default();
        let cmd = "ib_send_bw -c UD -s 64 -n 200";
        t.line(&format!("ibkern-linux: run {cmd}"), || [counters(0, 0); 2]);
        t.line(" #bytes     #iterations    BW peak[MB/sec] ...", || {
            [counters(10, 0), counters(0, 0)]
        });
        t.line(row, || [counters(210, 200), counters(0, 0)]);
        assert_eq!(t.rows.len(), 1);
        assert_eq!(t.rows[0].3, Figures::Bandwidth([12.34, 11.50, 0.188416]));
        assert_eq!(t.rows[0].4.unwrap()[0].mmio_writes, 200);
        // A bandwidth client over UD or UC receives nothing.
        let sent = Counters {
            packets_sent: 200,
            ..Counters::default()
        };
        assert!(count_complete(&sent, 200, true));
        assert!(!count_complete(&sent, 200, false));
        let run = ibconfig::Run::parse(cmd).unwrap();
        assert!(traffic_consistent(&[3400, 0, 200, 0], &run));
        assert!(!traffic_consistent(&[3400, 0, 199, 0], &run));
        // The table and the CSV: bandwidth columns, counts per message.
        let rows = vec![
            Row {
                stack: Stack::Linux,
                case: "ib_send_bw -c UD".into(),
                test: "send_bw".into(),
                transport: "UD".into(),
                atomic: String::new(),
                bytes: 64,
                iterations: 200,
                figures: Some(Figures::Bandwidth([12.34, 11.5, 0.188416])),
                pcie: [Some(counters(0, 0)), Some(counters(400, 200))],
            },
            Row {
                stack: Stack::Ibkern,
                case: "ib_send_bw -c UD".into(),
                test: "send_bw".into(),
                transport: "UD".into(),
                atomic: String::new(),
                bytes: 64,
                iterations: 200,
                figures: None,
                pcie: [None, None],
            },
        ];
        let t = table(&rows, &[]);
        assert!(
            t.starts_with("ib_send_bw -c UD: client bandwidth [MB/sec] and message rate [Mpps] | model PCIe transactions per message"),
            "{t}"
        );
        let linux = t.lines().find(|l| l.starts_with(" Linux")).unwrap();
        let w: Vec<&str> = linux.split_whitespace().collect();
        assert_eq!(
            w[..7],
            ["Linux", "64", "200", "12.34", "11.50", "0.188416", "|"],
            "{t}"
        );
        assert_eq!(w[7], "2.00", "400 MMIO writes over 200 messages: {t}");
        assert!(t.contains("(no figures: size aborted)"), "{t}");
        let csv = to_csv(&rows);
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        let line: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
        let col = |n: &str| header.iter().position(|h| *h == n).unwrap();
        assert_eq!(line[col("bw_avg_mbs")], "11.50");
        assert_eq!(line[col("msg_rate_mpps")], "0.188416");
        assert_eq!(line[col("t_typical_us")], "");
        assert_eq!(line[col("client_mmio_writes_per_iter")], "2.00");
        // No latency series for a bandwidth case.
        assert!(!to_svg(&rows).contains("data-transport=\"Linux send_bw UD\""));
    }

    #[test]
    fn bad_combinations_are_usage_errors() {
        for (argv, message) in [
            (
                &["--test", "send_lat", "-Q", "10"][..],
                "-Q 10: the bandwidth flags apply to send_bw",
            ),
            (
                &["--test", "all", "-t", "16"][..],
                "-t 16: the bandwidth flags apply",
            ),
            (
                &["--test", "write_bw", "-c", "UD"][..],
                "-c UD with --test write_bw",
            ),
            (
                &["--test", "send_bw", "-c", "UD", "-s", "4096"][..],
                "larger than the path MTU 2048",
            ),
            (
                &["--test", "send_lat", "-A", "CMP_AND_SWAP"][..],
                "apply to --test atomic_lat and atomic_bw only",
            ),
            (&["--test", "nope"][..], "unknown test \"nope\""),
            (&["--test", ","][..], "no test given"),
            (
                &["--test", "write_lat", "-c", "UD"][..],
                "-c UD with --test write_lat",
            ),
            (
                &["--test", "all", "-c", "UC"][..],
                "-c UC with --test read_lat",
            ),
            (
                &["-c", "XY"][..],
                "unknown transport \"XY\" (one of UD|UC|RC)",
            ),
            (&["-c", ","][..], "no transport given"),
            (
                &["-A", "FETCH_AND_ADD"][..],
                "apply to --test atomic_lat and atomic_bw only",
            ),
            (
                &["--test", "read_bw", "-n", "50", "-l", "4"][..],
                "must be a multiple of the post list",
            ),
            (
                &["--test", "atomic_lat", "-A", "SWAP"][..],
                "unknown atomic operation",
            ),
            (
                &["-c", "UD", "-s", "4096"][..],
                "larger than the path MTU 2048",
            ),
            (
                &["--test", "write_lat", "-e"][..],
                "-e with --test write_lat",
            ),
        ] {
            let e = cases(&parse(argv)).unwrap_err();
            assert!(e.is::<crate::Usage>(), "{argv:?}: {e}");
            assert!(e.to_string().contains(message), "{argv:?}: {e}");
        }
    }

    #[test]
    fn the_ibkern_pair_runs_every_case_as_the_clients_plan() {
        let a = parse(&[
            "--test",
            "send_lat,read_lat,atomic_lat",
            "-s",
            "64",
            "-n",
            "5",
            "-e",
        ]);
        let runs = cases(&a).unwrap();
        let pp = ibkern_args(&a, &runs[0], std::path::Path::new("o"));
        let [server, client] = ibkern_configs(&pp, &runs).unwrap();
        let plan: Vec<String> = client.plan().iter().map(ToString::to_string).collect();
        let mut want = vec![WARM_UP.to_string()];
        want.extend(runs.iter().map(ToString::to_string));
        assert_eq!(plan, want);
        assert!(server.plan().is_empty(), "the server follows");
        assert_eq!(crate::pingpong::plan_runs(&client).len(), 7);
        for c in [&server, &client] {
            crate::kernel_config::check_config(c).unwrap();
            assert_eq!(c.bench.completion, ibconfig::Completion::Event);
            assert_eq!(c.hca_irq, ibconfig::HcaIrq::Msix);
        }
        assert_eq!(server.bench.idle_timeout_ns, 0);
    }

    #[test]
    fn script_reads_the_counters_around_each_perftest_run() {
        let runs = cases(&parse(&[
            "--test",
            "send_lat,atomic_lat",
            "-c",
            "RC",
            "-s",
            "64",
        ]))
        .unwrap();
        let s = linux_script(&runs);
        assert_eq!(
            s,
            "ibk_run modprobe ib_umad\n\
             ibk_run cat /sys/class/infiniband/mlx4_0/ports/1/counters/port_xmit_data\n\
             ibk_run perfquery -x\nibk_run perfquery -x\nibk_pair ib_send_lat -c RC -s 64 -n 20\nibk_run perfquery -x\n\
             ibk_run perfquery -x\nibk_run perfquery -x\nibk_pair ib_atomic_lat -c RC -n 20 -A FETCH_AND_ADD -o 1\nibk_run perfquery -x\n\
             ibk_run perfquery -x\nibk_run perfquery -x\nibk_pair ib_atomic_lat -c RC -n 20 -A CMP_AND_SWAP -o 1\nibk_run perfquery -x\n"
        );
    }

    fn counters(mmio_writes: u64, packets: u64) -> Counters {
        Counters {
            mmio_writes,
            packets_sent: packets,
            ..Counters::default()
        }
    }

    #[test]
    fn a_count_missing_part_of_its_size_is_incomplete() {
        let c = |tx: u64, rx: u64| Counters {
            packets_sent: tx,
            packets_received: rx,
            ..Counters::default()
        };
        assert!(count_complete(&c(10, 10), 10, false));
        assert!(count_complete(&c(12, 11), 10, false));
        assert!(!count_complete(&c(9, 10), 10, false));
        assert!(!count_complete(&c(10, 0), 10, false));
        assert!(!count_complete(&Counters::default(), 10, false));
    }

    #[test]
    fn perftest_rows_parse_and_other_lines_do_not() {
        let row = " 64      20          804.81         3019.86      1090.30     \t       1386.57     \t448.65  \t\t3019.86 \t\t3019.86 ";
        let (b, n, l) = parse_row(row).unwrap();
        assert_eq!((b, n), (64, 20));
        assert_eq!(
            l,
            [804.81, 3019.86, 1090.30, 1386.57, 448.65, 3019.86, 3019.86]
        );
        assert_eq!(parse_row(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "), None);
        assert_eq!(parse_row(" 64 20 1 2 3"), None);
        assert_eq!(parse_row("a b c d e f g h i"), None);
    }

    /// perfquery -x's output for one read (the four traffic counters among others).
    fn perfquery(t: &mut LinuxTracker, v: PortTraffic) {
        let none = || [Counters::default(); 2];
        t.line("ibkern-linux: run perfquery -x", none);
        t.line(
            "# Port extended counters: Lid 2 port 1 (CapMask: 0x5A00)",
            none,
        );
        t.line("PortSelect:......................1", none);
        for (name, x) in PERFQUERY_FIELDS.iter().zip(v) {
            t.line(&format!("{name}:....................{x}"), none);
        }
        t.line("PortUnicastXmitPkts:.............77", none);
        t.line("ibkern-linux: result rc=0: perfquery -x", none);
    }

    #[test]
    fn tracker_diffs_counters_of_each_command_and_reads_its_port_traffic() {
        let mut t = LinuxTracker::default();
        let mut now = 100;
        let feed = |t: &mut LinuxTracker, line: &str, c: u64| {
            t.line(line, || [counters(c, c / 10), counters(2 * c, 0)])
        };
        // Outside a perftest command: rows are ignored.
        feed(&mut t, " 2 5 1 1 1 1 0 1 1", now);
        // Two reads before (each read costs 2 packets of 66 words each way).
        perfquery(&mut t, [1000, 2000, 10, 20]);
        perfquery(&mut t, [1132, 2132, 12, 22]);
        let cmd = "ib_send_lat -c UC -a -n 20";
        feed(&mut t, &format!("ibkern-linux: run {cmd}"), now);
        feed(&mut t, " #bytes #iterations    t_min[usec] ...", now);
        now += 40;
        feed(
            &mut t,
            " 2       20          1.00  2.00  1.50  1.60  0.10  2.00  2.00",
            now,
        );
        now += 60;
        feed(
            &mut t,
            " 4       20          1.00  2.00  1.50  1.60  0.10  2.00  2.00",
            now,
        );
        feed(&mut t, &format!("ibkern-linux: result rc=0: {cmd}"), now);
        feed(
            &mut t,
            " 8       20          1.00  2.00  1.50  1.60  0.10  2.00  2.00",
            now + 5,
        );
        // The read after: 500 words and 40 packets each way, plus the read's own cost.
        perfquery(
            &mut t,
            [1132 + 132 + 500, 2132 + 132 + 500, 12 + 2 + 40, 22 + 2 + 40],
        );
        assert_eq!(t.rows.len(), 2);
        assert_eq!((t.rows[0].0.as_str(), t.rows[0].1), (cmd, 2));
        assert_eq!(t.rows[0].4.unwrap()[0].mmio_writes, 40);
        assert_eq!(t.rows[1].4.unwrap()[0].mmio_writes, 60);
        assert_eq!(
            t.rows[1].4.unwrap()[1].mmio_writes,
            120,
            "the peer over the same rows"
        );
        assert_eq!(t.rows[1].3.latency().unwrap()[2], 1.5);
        assert_eq!(t.ports, vec![(cmd.to_string(), Some([500, 500, 40, 40]))]);
        // A counter going backwards is no reading.
        assert_eq!(traffic_between([5; 4], [6; 4], [4; 4]), None);
        assert_eq!(traffic_between([5; 4], [7; 4], [12; 4]), Some([3; 4]));
    }

    #[test]
    fn ibkern_console_lines_belong_to_the_run_their_header_names() {
        let console = "\
pingpong: run 1/3 pass 1/1: ib_send_lat -c UD -s 64 -n 5
ibkern-result {\"test\":\"send_lat\"}
pingpong: run 2/3 pass 1/1: ib_send_lat -c UD -s 64 -n 20
ibkern-result {\"test\":\"send_lat\",\"transport\":\"UD\",\"role\":\"client\",\"bytes\":64,\"iterations\":20,\"samples\":19,\"t_min_us\":1.000,\"t_max_us\":2.000,\"t_typical_us\":1.500,\"t_avg_us\":1.500,\"t_stdev_us\":0.100,\"p99_us\":2.000,\"p99_9_us\":2.000,\"true_max_us\":2.000,\"true_stdev_us\":0.100,\"tsc_mhz\":1000.000,\"inline\":true,\"completion\":\"poll\",\"mtu\":2048,\"lost\":0,\"retries\":0,\"aborted\":false}
ibkern-port {\"test\":\"send_lat\",\"transport\":\"UD\",\"role\":\"client\",\"command\":\"ib_send_lat -c UD -s 64 -n 20\",\"port\":1,\"extended\":true,\"before\":{\"xmit_data_words\":10,\"rcv_data_words\":10,\"xmit_pkts\":1,\"rcv_pkts\":1},\"after\":{\"xmit_data_words\":510,\"rcv_data_words\":510,\"xmit_pkts\":26,\"rcv_pkts\":26}}
pingpong: run 2/3 pass 1/1: PASS 1 sizes, 0 aborted, 0 lost, 0 retries, 0 late repeats
pingpong: run 3/3 pass 1/1: ib_send_lat -c UC -s 64 -n 20
ibkern-port {\"test\":\"send_lat\",\"transport\":\"UC\"}
";
        let c = read_ibkern_console(console, 1);
        assert_eq!(c.records.len(), 1);
        // A bandwidth run's lines: its result line and its port line.
        let bw = read_ibkern_console(
            "pingpong: run 2/2 pass 1/1: ib_send_bw -c UD -s 64 -n 10\n\
             ibkern-result {\"test\":\"send_bw\",\"transport\":\"UD\",\"role\":\"client\",\"bytes\":64,\"iterations\":10,\"bw_peak_mbs\":12.5,\"bw_avg_mbs\":10.25,\"msg_rate_mpps\":0.167936,\"tsc_mhz\":1000.0,\"inline\":true,\"mtu\":2048,\"tx_depth\":10,\"post_list\":1,\"cq_mod\":10,\"received\":10,\"bytes_received\":640,\"lost\":0}\n\
             ibkern-port {\"test\":\"send_bw\",\"transport\":\"UD\",\"role\":\"client\",\"command\":\"ib_send_bw -c UD -s 64 -n 10\",\"port\":1,\"extended\":true,\"before\":{\"xmit_data_words\":0,\"rcv_data_words\":0,\"xmit_pkts\":0,\"rcv_pkts\":0},\"after\":{\"xmit_data_words\":200,\"rcv_data_words\":20,\"xmit_pkts\":12,\"rcv_pkts\":2}}\n",
            1,
        );
        assert!(bw.bad_lines.is_empty(), "{:?}", bw.bad_lines);
        assert_eq!(bw.bw_records.len(), 1);
        assert_eq!(bw.bw_records[0].1.line.figures.unwrap().bw_avg_mbs, 10.25);
        assert_eq!(
            bw.ports[0].1.line.traffic().map(|t| t.values()),
            Some([200, 20, 12, 2])
        );
        assert_eq!(c.records[0].0, "ib_send_lat -c UD -s 64 -n 20");
        assert_eq!(c.records[0].1.line.bytes, 64);
        assert_eq!(c.ports.len(), 1);
        assert_eq!(c.ports[0].0, "ib_send_lat -c UD -s 64 -n 20");
        assert_eq!(
            c.ports[0].1.line.traffic().map(|t| t.values()),
            Some([500, 500, 25, 25])
        );
        assert_eq!(c.bad_lines.len(), 1, "{:?}", c.bad_lines);
        let run = ibconfig::Run::parse("ib_send_lat -c UD -s 64 -n 20").unwrap();
        // The server's lines name the run as the server ran it.
        let server = console.replace(
            "\"role\":\"client\",\"command\":\"ib_send_lat -c UD -s 64 -n 20\"",
            "\"role\":\"server\",\"command\":\"ib_send_lat -c UD -s 64 -n 20 -I 188\"",
        );
        let s = server_port_lines(&server);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].line.role, ibconfig::Role::Server);
        assert!(same_case(&s[0], &run));
        let uc = ibconfig::Run::parse("ib_send_lat -c UC -s 64 -n 20").unwrap();
        assert!(!same_case(&s[0], &uc));
        assert!(traffic_consistent(&[500, 500, 25, 25], &run));
        assert!(!traffic_consistent(&[500, 500, 19, 25], &run));
        assert!(!traffic_consistent(&[500, 500, 25, 19], &run));
    }

    fn rows() -> Vec<Row> {
        let mut v = Vec::new();
        for (stack, k) in [(Stack::Ibkern, 1.0), (Stack::Linux, 5.0)] {
            for t in ["UD", "UC"] {
                for bytes in [2u64, 64, 1024] {
                    v.push(Row {
                        stack,
                        case: format!("ib_send_lat -c {t}"),
                        test: "send_lat".into(),
                        transport: t.into(),
                        atomic: String::new(),
                        bytes,
                        iterations: 20,
                        figures: Some(Figures::Latency([
                            k,
                            2.0 * k,
                            1.5 * k,
                            1.6 * k,
                            0.1,
                            2.0 * k,
                            2.0 * k,
                        ])),
                        pcie: [Some(counters(200, 20)), Some(counters(400, 20))],
                    });
                }
            }
        }
        v[0].figures = None;
        v[0].pcie[0] = None;
        v
    }

    fn ports() -> Vec<PortRow> {
        vec![
            PortRow {
                stack: Stack::Linux,
                case: "ib_send_lat -c UD".into(),
                node: "client",
                traffic: Some([1234, 1233, 61, 60]),
            },
            PortRow {
                stack: Stack::Ibkern,
                case: "ib_send_lat -c UD".into(),
                node: "client",
                traffic: None,
            },
        ]
    }

    #[test]
    fn csv_has_both_stacks_and_per_iteration_counts() {
        let csv = to_csv(&rows());
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(header.len(), 16 + 24);
        assert_eq!(header[..4], ["stack", "test", "transport", "atomic"]);
        let mmio = header
            .iter()
            .position(|h| *h == "client_mmio_writes_per_iter")
            .unwrap();
        let body: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert_eq!(body.len(), 12);
        assert!(body.iter().all(|r| r.len() == header.len()));
        assert_eq!(body[1][mmio], "20.00"); // 400 writes over 20 iterations
        assert_eq!(body[0][8], ""); // aborted: no t_typical
        assert!(body.iter().any(|r| r[0] == "Linux") && body.iter().any(|r| r[0] == "ibkern"));
        let p = ports_csv(&ports());
        assert_eq!(
            p,
            "stack,case,node,port_xmit_data_words,port_rcv_data_words,port_xmit_pkts,port_rcv_pkts\n\
             Linux,ib_send_lat -c UD,client,1234,1233,61,60\n\
             ibkern,ib_send_lat -c UD,client,,,,\n"
        );
    }

    #[test]
    fn table_interleaves_the_stacks_by_size_and_shows_the_port_traffic() {
        let t = table(&rows(), &ports());
        let ud = t.split("ib_send_lat -c UC:").next().unwrap();
        let order: Vec<&str> = ud
            .lines()
            .filter(|l| !l.contains("xmit") && !l.contains("no reading"))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|w| *w == "ibkern" || *w == "Linux")
            .collect();
        assert_eq!(
            order,
            ["ibkern", "Linux", "ibkern", "Linux", "ibkern", "Linux"]
        );
        assert!(t.contains("(no figures: size aborted)"));
        assert!(t.contains("20.00")); // client mmio writes per iteration
        assert!(
            ud.contains(
                " Linux   xmit       1234 words      61 pkts | rcv       1233 words      60 pkts"
            ),
            "{t}"
        );
        assert!(ud.contains(" ibkern  (no reading)"), "{t}");
    }

    #[test]
    fn svg_has_one_series_per_stack_and_case_and_labelled_log_axes() {
        let svg = to_svg(&rows());
        for name in [
            "ibkern send_lat UD",
            "ibkern send_lat UC",
            "Linux send_lat UD",
            "Linux send_lat UC",
        ] {
            assert!(
                svg.contains(&format!("data-transport=\"{name}\"")),
                "{name}"
            );
        }
        assert!(svg.contains("Message size [bytes] (log2 scale)"));
        assert!(svg.contains("(log scale)"));
        assert!(svg.contains("Linux perftest vs ibkern"));
    }

    #[test]
    fn ready_lines_of_both_stacks() {
        assert!(crate::linux::run::is_ready_line(
            "ibkern-linux: port 1 state: 4: ACTIVE, lid 2"
        ));
        assert!(!crate::linux::run::is_ready_line(
            "ibkern-linux: port 1 state: 1: DOWN, lid 0"
        ));
        assert!(crate::pingpong::is_ready_line(
            "mlx4: port 1: ACTIVE lid 0x2 sm_lid 0x1 gid fe80:0000 mtu 2048"
        ));
        assert!(!crate::pingpong::is_ready_line(
            "mlx4: port 1: DOWN lid 0x0"
        ));
        let csv = ready_csv(&[Ready {
            stack: Stack::Linux,
            boot: "pair".into(),
            node: "server",
            after: Some(Duration::from_millis(6758)),
        }]);
        assert_eq!(csv.lines().nth(1), Some("Linux,pair,server,6.758"));
    }
}
