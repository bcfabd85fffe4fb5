//! The ping-pong keys: what a run measures (mirroring perftest's flags), their ranges, and
//! the rules between them. `bench` runs what this describes; the kernel and the runner
//! parse and check it through [`crate::parse`].

use core::fmt;

use verbs::Mtu;

use crate::names::{names, Names};
use crate::{named, parse_u32, Bounds, ValueError, Values};

/// perftest's default iteration count (`-n`, `DEF_ITERS`).
pub const DEFAULT_ITERATIONS: u32 = 1000;
/// perftest refuses fewer iterations than this (`MIN_ITER`).
pub const MIN_ITERATIONS: u32 = 5;
/// Largest iteration count accepted (the stamps are kept in memory).
pub const MAX_ITERATIONS: u32 = 1 << 24;
/// perftest's cap on the receive depth of UC/UD latency tests (`min(iters, 16000)`).
pub const MAX_RX_DEPTH: u32 = 16000;
/// perftest's default inline limit for `ib_send_lat` over UC (and RC) on Mellanox devices.
pub const DEFAULT_INLINE_UC: u32 = 236;
/// perftest's default inline limit for `ib_send_lat` over UD on Mellanox devices.
pub const DEFAULT_INLINE_UD: u32 = 188;
/// perftest's default inline limit for `ib_write_lat` (RC and UC) on Mellanox devices.
pub const DEFAULT_INLINE_WRITE: u32 = 220;
/// perftest's largest accepted inline limit.
pub const MAX_INLINE: u32 = 1024;
/// perftest's outstanding READs/atomics for latency tests (`-o`) and the most ConnectX
/// takes (`MAX_OUT_READ_HERMON`).
pub const DEFAULT_OUT_READS: u8 = 1;
pub const MAX_OUT_READS: u32 = 16;
/// The size of an atomic's operand.
pub const ATOMIC_SIZE: u32 = 8;
/// perftest's message size of the bandwidth tests (`DEF_SIZE_BW`).
pub const DEFAULT_BW_SIZE: u32 = 65536;
/// perftest's iteration count of `ib_write_bw` (`DEF_ITERS_WB`); the other bandwidth tests
/// take [`DEFAULT_ITERATIONS`].
pub const DEFAULT_WRITE_BW_ITERATIONS: u32 = 5000;
/// perftest's send queue depth of the bandwidth tests (`-t`, `DEF_TX_BW`).
pub const DEFAULT_TX_DEPTH: u32 = 128;
/// perftest's largest `-t` (`MAX_TX`).
pub const MAX_TX_DEPTH: u32 = 15000;
/// perftest's CQ moderation (`-Q`, `DEF_CQ_MOD`), lowered to the tx depth when larger.
pub const DEFAULT_CQ_MOD: u32 = 100;
/// Largest `-Q` and `-l` accepted (perftest's `MAX_CQ_MOD`).
pub const MAX_CQ_MOD: u32 = 1024;
/// perftest's receive depth of `ib_send_bw` (`DEF_RX_SEND`), lowered to the iterations.
pub const DEFAULT_BW_RX_DEPTH: u32 = 512;
/// Longest `-D` (seconds).
pub const MAX_DURATION_S: u32 = 3600;
/// Smallest size: the payload carries a 2-byte tag (sequence number, size index) so stale
/// and duplicate packets are recognised.
pub const MIN_SIZE: u32 = 2;
/// Largest `-a` size (2^23 B = 8 MiB, perftest's `size_max_pow` 24 exclusive).
pub const MAX_SWEEP_SIZE: u32 = 1 << 23;
/// The largest path MTU used when `mtu` is not given: perftest's ConnectX-3 rule uses an
/// active 4096 as 2048, so a UD message above 2048 bytes needs `mtu=4096`.
pub const DEFAULT_MTU_CAP: Mtu = Mtu::Mtu2048;
/// Longest `timeout_ms` (one wait).
pub const MAX_TIMEOUT_MS: u32 = 60_000;
/// Highest `ib_port` (a ConnectX-3 has two ports).
pub const MAX_PORT: u8 = 2;
/// Most passes of a plan (`repeat`).
pub const MAX_REPEAT: u32 = 1000;
/// Longest `idle_timeout_ms` (a day).
pub const MAX_IDLE_TIMEOUT_MS: u32 = 86_400_000;
/// Most LIDs `probe_lids` may name.
pub const MAX_PROBE_LIDS: u16 = 1024;
/// Largest unicast LID (IBA 4.1.3: 0x0001..=0xBFFF; 0 is reserved, 0xC000.. multicast).
pub const MAX_UNICAST_LID: u16 = 0xBFFF;
/// QP numbers are 24 bits; 0 and 1 are the special QPs.
pub const QPN_RANGE: (u32, u32) = (2, 0xFF_FFFF);
/// perftest's UD Q_Key (`DEF_QKEY`) for the data QPs.
pub const DATA_QKEY: u32 = 0x1111_1111;
/// The well-known rendezvous QPN of a node whose device reserves `reserved_qps` QP numbers
/// (`verbs::DeviceAttr::reserved_qps`), used when `rdv_qpn` is not given (docs/rendezvous.md):
/// the last number of the block of the same size just above the reserved ones,
/// `2 * reserved_qps - 1` (0x7F when 64 are reserved).
///
/// Why that number: the reserved count is a power of two and the QP table holds a power of
/// two of at least `reserved + 1` entries, so this QPN is inside every table; the driver
/// hands out QPNs from the bottom of the free range and places the special-QP block right
/// above the reserved ones, so the top of the block is the last number to be taken. Two
/// nodes with the same firmware profile compute the same number without talking; a node
/// facing a differently configured peer is given `rdv_qpn` / `peer_rdv_qpn`.
pub fn well_known_rdv_qpn(reserved_qps: u32) -> u32 {
    (reserved_qps.clamp(2, 1 << 23) * 2 - 1).min(QPN_RANGE.1)
}
/// The rendezvous Q_Key, "IBKR" (bit 31 clear: not a controlled Q_Key).
pub const RDV_QKEY: u32 = 0x4942_4B52;
/// `srq_pingpong` (rdma-core's `ibv_srq_pingpong`): its defaults (`-q 16`, `-r 500`,
/// `-s 4096`), the most QPs a run may use, and the smallest message (the 8-byte header
/// naming the QP and the sequence number).
pub const SRQ_DEFAULT_QPS: u32 = 16;
pub const SRQ_MAX_QPS: u32 = 64;
pub const SRQ_DEFAULT_RX_DEPTH: u32 = 500;
pub const SRQ_MAX_RX_DEPTH: u32 = 16000;
pub const SRQ_DEFAULT_SIZE: u32 = 4096;
pub const SRQ_MIN_SIZE: u32 = 8;
/// Most settings one `cq_moderation` list may name (one run each).
pub const MAX_MODERATIONS: usize = 8;

/// The `cq_moderation` key: CQ event moderation settings (`cq_max_count/cq_period_us`),
/// one run of the SRQ ping-pong per setting, in order. Empty: one run, moderation untouched.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Moderations {
    list: [verbs::CqModeration; MAX_MODERATIONS],
    len: u8,
}

impl fmt::Debug for Moderations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// `C/P,C/P`, as `cq_moderation` takes it.
impl fmt::Display for Moderations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, m) in self.as_slice().iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}/{}", m.cq_count, m.cq_period)?;
        }
        Ok(())
    }
}

impl Moderations {
    /// The settings in order.
    pub fn as_slice(&self) -> &[verbs::CqModeration] {
        &self.list[..self.len as usize]
    }

    /// Parses `C/P[,C/P...]`, each number 0..=65535 (decimal or 0x hex).
    pub fn parse(v: &str) -> Result<Moderations, ValueError> {
        const WHAT: ValueError =
            ValueError::Expected("count/period_us[,count/period_us...], each 0..=65535, at most 8");
        let mut m = Moderations::default();
        for item in v.split(',') {
            let (c, p) = item.trim().split_once('/').ok_or(WHAT)?;
            let num = |x: &str| {
                parse_u32(x.trim())
                    .filter(|&n| n <= u32::from(u16::MAX))
                    .map(|n| n as u16)
            };
            let (Some(cq_count), Some(cq_period)) = (num(c), num(p)) else {
                return Err(WHAT);
            };
            if m.len as usize == MAX_MODERATIONS {
                return Err(WHAT);
            }
            m.list[m.len as usize] = verbs::CqModeration {
                cq_count,
                cq_period,
            };
            m.len += 1;
        }
        Ok(m)
    }
}

/// The SRQ ping-pong's own keys (`test=srq_pingpong`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqKeys {
    /// `test=srq_pingpong` was given: the node runs the SRQ ping-pong.
    pub enabled: bool,
    /// QPs sharing the SRQ (`qps`, the example's `-q`).
    pub qps: u32,
    /// Receives kept posted on the SRQ (`rx_depth`, `-r`).
    pub rx_depth: u32,
    /// `cq_moderation`: one run per setting (event mode).
    pub moderation: Moderations,
}

impl Default for SrqKeys {
    fn default() -> Self {
        SrqKeys {
            enabled: false,
            qps: SRQ_DEFAULT_QPS,
            rx_depth: SRQ_DEFAULT_RX_DEPTH,
            moderation: Moderations::default(),
        }
    }
}

names! {
    /// Which perftest test runs (the `test` key; perftest's program: `ib_send_lat`, ...,
    /// `ib_atomic_bw`).
    pub enum Test (any case) {
        /// ib_send_lat: SEND/receive ping-pong (UD, UC, RC).
        SendLat = "send_lat",
        /// ib_write_lat: RDMA WRITE ping-pong, each side polling the last byte of its own
        /// buffer (RC, UC).
        WriteLat = "write_lat",
        /// ib_read_lat: the client alone posts one RDMA READ at a time (RC); the full round
        /// trip is reported.
        ReadLat = "read_lat",
        /// ib_atomic_lat: the client alone posts one 8-byte atomic at a time (RC); the full
        /// round trip is reported.
        AtomicLat = "atomic_lat",
        /// ib_send_bw: the client streams SENDs into the server's posted receives (UD, UC,
        /// RC); the server counts what arrived, so UD/UC loss is exact.
        SendBw = "send_bw",
        /// ib_write_bw: the client streams RDMA WRITEs into the server's region (RC, UC);
        /// the server stays passive.
        WriteBw = "write_bw",
        /// ib_read_bw: the client streams RDMA READs of the server's region (RC).
        ReadBw = "read_bw",
        /// ib_atomic_bw: the client streams 8-byte atomics on the server's word (RC).
        AtomicBw = "atomic_bw",
    }
}

impl Test {
    /// perftest's program ("ib_send_lat", ..., "ib_atomic_bw").
    pub fn program(self) -> &'static str {
        match self {
            Test::SendLat => "ib_send_lat",
            Test::WriteLat => "ib_write_lat",
            Test::ReadLat => "ib_read_lat",
            Test::AtomicLat => "ib_atomic_lat",
            Test::SendBw => "ib_send_bw",
            Test::WriteBw => "ib_write_bw",
            Test::ReadBw => "ib_read_bw",
            Test::AtomicBw => "ib_atomic_bw",
        }
    }
    /// The test perftest's program `p` runs.
    pub fn from_program(p: &str) -> Option<Test> {
        Test::ALL.into_iter().find(|t| t.program() == p)
    }
    /// A bandwidth test (perftest's `BW` tests: a stream, not a ping-pong).
    pub fn is_bw(self) -> bool {
        matches!(
            self,
            Test::SendBw | Test::WriteBw | Test::ReadBw | Test::AtomicBw
        )
    }
    /// An atomic test (one 8-byte operand, `-A`).
    pub fn is_atomic(self) -> bool {
        matches!(self, Test::AtomicLat | Test::AtomicBw)
    }
    /// A test that posts READs or atomics, which `-o` (`outstanding_reads`) bounds.
    pub fn takes_outstanding_reads(self) -> bool {
        matches!(
            self,
            Test::ReadLat | Test::AtomicLat | Test::ReadBw | Test::AtomicBw
        )
    }
    /// The title perftest's banner prints.
    pub fn title(self) -> &'static str {
        match self {
            Test::SendLat => "Send Latency Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::ReadLat => "RDMA_Read Latency Test",
            Test::AtomicLat => "Atomic Latency Test",
            Test::SendBw => "Send BW Test",
            Test::WriteBw => "RDMA_Write BW Test",
            Test::ReadBw => "RDMA_Read BW Test",
            Test::AtomicBw => "Atomic BW Test",
        }
    }
    /// What the peer may do to the region this test exposes (none for send_lat).
    pub fn remote_access(self) -> verbs::AccessFlags {
        match self {
            Test::SendLat | Test::SendBw => verbs::AccessFlags::empty(),
            Test::WriteLat | Test::WriteBw => verbs::AccessFlags::REMOTE_WRITE,
            Test::ReadLat | Test::ReadBw => verbs::AccessFlags::REMOTE_READ,
            Test::AtomicLat | Test::AtomicBw => verbs::AccessFlags::REMOTE_ATOMIC,
        }
    }
    /// Whether only the client posts and the server stays passive after the handshake
    /// (perftest's `run_iter_lat`: READ and atomics), reporting the full round trip.
    pub fn one_sided(self) -> bool {
        matches!(self, Test::ReadLat | Test::AtomicLat)
    }
    /// Whether the server only answers the handshake while the client measures: the
    /// one-sided latency tests and every bandwidth test but send_bw (perftest's server of
    /// write/read/atomic BW only waits for the end).
    pub fn passive_server(self) -> bool {
        matches!(
            self,
            Test::ReadLat | Test::AtomicLat | Test::WriteBw | Test::ReadBw | Test::AtomicBw
        )
    }
    /// Whether this test runs over `t` (perftest's `change_conn_type`: write_lat is not
    /// possible over UD, read_lat and atomic_lat only over RC).
    pub fn check_transport(self, t: Transport) -> Result<(), Rule> {
        match (self, t) {
            (Test::WriteLat, Transport::Ud) => Err(Rule::WriteLatOverUd),
            (Test::ReadLat | Test::AtomicLat, Transport::Ud | Transport::Uc) => {
                Err(Rule::OneSidedNeedsRc { transport: t })
            }
            (Test::WriteBw, Transport::Ud) => Err(Rule::BwNeedsConnection {
                test: self,
                transport: t,
            }),
            (Test::ReadBw | Test::AtomicBw, Transport::Ud | Transport::Uc) => {
                Err(Rule::BwNeedsConnection {
                    test: self,
                    transport: t,
                })
            }
            _ => Ok(()),
        }
    }
}

/// What the `test` key names: one of perftest's tests, or rdma-core's `ibv_srq_pingpong`
/// (RC QPs sharing one SRQ), which the bench runs with its own keys (`qps`, `rx_depth`,
/// `cq_moderation`). The names and help are [`Test`]'s, and `srq_pingpong`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Benchmark {
    Perftest(Test),
    SrqPingpong,
}

impl Benchmark {
    /// Every benchmark, in the order the `test` key lists them.
    pub const ALL: [Benchmark; Test::ALL.len() + 1] = {
        let mut all = [Benchmark::SrqPingpong; Test::ALL.len() + 1];
        let mut i = 0;
        while i < Test::ALL.len() {
            all[i] = Benchmark::Perftest(Test::ALL[i]);
            i += 1;
        }
        all
    };
    /// Every benchmark's name, in [`Self::ALL`]'s order.
    pub const NAMES: &'static [&'static str] = &{
        let mut names = ["srq_pingpong"; Test::ALL.len() + 1];
        let mut i = 0;
        while i < Test::ALL.len() {
            names[i] = Test::NAMES[i];
            i += 1;
        }
        names
    };

    /// The `test` key's value.
    pub fn name(self) -> &'static str {
        match self {
            Benchmark::Perftest(t) => t.name(),
            Benchmark::SrqPingpong => "srq_pingpong",
        }
    }

    /// What it runs, for help texts.
    pub fn help(self) -> &'static str {
        match self {
            Benchmark::Perftest(t) => t.help(),
            Benchmark::SrqPingpong => {
                "rdma-core's ibv_srq_pingpong: RC QPs sharing one SRQ (qps, rx_depth, cq_moderation)"
            }
        }
    }

    /// The benchmark called `name` (any case).
    pub fn from_name(name: &str) -> Option<Benchmark> {
        <Benchmark as Names>::from_name(name)
    }

    /// The perftest test, if it is one.
    pub fn test(self) -> Option<Test> {
        match self {
            Benchmark::Perftest(t) => Some(t),
            Benchmark::SrqPingpong => None,
        }
    }
}

/// The `test` key's value.
impl fmt::Display for Benchmark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Names for Benchmark {
    const ALL: &'static [Self] = &Benchmark::ALL;
    const NAMES: &'static [&'static str] = Benchmark::NAMES;
    const ANY_CASE: bool = true;
    fn name(self) -> &'static str {
        Benchmark::name(self)
    }
    fn help(self) -> &'static str {
        Benchmark::help(self)
    }
}

#[cfg(feature = "clap")]
impl clap::ValueEnum for Benchmark {
    fn value_variants<'a>() -> &'a [Self] {
        &Benchmark::ALL
    }
    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()).help(self.help()))
    }
}

names! {
    /// The atomic operation of `ib_atomic_lat` and `ib_atomic_bw` (`-A`).
    pub enum AtomicOp (any case) {
        /// Fetch and add (perftest's default).
        FetchAndAdd = "FETCH_AND_ADD",
        /// Compare and swap.
        CmpAndSwap = "CMP_AND_SWAP",
    }
}

names! {
    /// Transport of the data QPs (`-c`).
    pub enum Transport (any case) {
        /// Unreliable datagram.
        Ud = "UD",
        /// Unreliable connection.
        Uc = "UC",
        /// Reliable connection.
        Rc = "RC",
    }
}

impl Transport {
    /// perftest's default inline limit for `ib_send_lat` over this transport.
    pub fn default_inline(self) -> u32 {
        match self {
            Transport::Ud => DEFAULT_INLINE_UD,
            Transport::Uc | Transport::Rc => DEFAULT_INLINE_UC,
        }
    }
    /// Bytes the receive buffer holds beyond the payload (UD: the 40-byte GRH slot).
    pub fn grh_bytes(self) -> u32 {
        match self {
            Transport::Ud => 40,
            Transport::Uc | Transport::Rc => 0,
        }
    }
}

names! {
    /// Which side of the ping-pong this node is (perftest: the side given a host name is
    /// the client).
    pub enum Role (any case) {
        /// Sends first.
        Client = "client",
        /// Answers.
        Server = "server",
    }
}

/// Message sizes to run (`-a` or `-s N`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sizes {
    /// `-a`: 2 B .. 8 MiB for UC, 2 B .. MTU for UD, powers of two.
    All,
    /// `-s N`.
    Single(u32),
}

names! {
    /// How completions are waited for (`-e` selects events); [`Completion::ALL`] is also
    /// the order `modes` runs them in.
    pub enum Completion (any case) {
        /// Busy-poll the CQ (perftest's default).
        Poll = "poll",
        /// Arm the CQ (`req_notify_cq`) and wait for its completion event
        /// (`get_cq_event`).
        Event = "event",
        /// The completion is handled inside the device's interrupt handler, which posts the
        /// reply itself and re-arms the CQ; the measuring loop only waits for the count.
        Isr = "isr",
    }
}

impl Completion {
    /// Whether the mode takes completion interrupts.
    pub fn interrupts(self) -> bool {
        self != Completion::Poll
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A set of completion modes (`modes=poll,event,isr`): each run of the configuration is
/// measured once per mode in it, in [`Completion::ALL`]'s order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Modes(u8);

impl Modes {
    /// The set of one mode.
    pub fn one(c: Completion) -> Modes {
        Modes(c.bit())
    }
    /// Parses a comma-separated list of mode names (at least one, none twice).
    pub fn parse(v: &str) -> Option<Modes> {
        let mut m = 0u8;
        for name in v.split(',') {
            let c = Completion::from_name(name.trim())?;
            if m & c.bit() != 0 {
                return None;
            }
            m |= c.bit();
        }
        (m != 0).then_some(Modes(m))
    }
    pub fn contains(self, c: Completion) -> bool {
        self.0 & c.bit() != 0
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// The modes in the set, in [`Completion::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = Completion> {
        Completion::ALL
            .into_iter()
            .filter(move |c| self.contains(*c))
    }
    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }
}

impl fmt::Display for Modes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(c.name())?;
        }
        Ok(())
    }
}

/// perftest's bandwidth flags. Each is refused on a latency test unless it keeps its
/// default ([`Rule::BandwidthKeyOnLatency`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BwKeys {
    /// `-t`: messages the sender may have outstanding (lowered to the iterations).
    pub tx_depth: u32,
    /// `-l`: messages posted as one list.
    pub post_list: u32,
    /// `-Q`: one signaled completion every this many messages; `None` = perftest's default
    /// (100, or the post list when one is given), lowered to the tx depth.
    pub cq_mod: Option<u32>,
    /// `-D`: run for this many seconds instead of `-n` iterations.
    pub duration_s: Option<u32>,
    /// `-b`: both sides stream at once.
    pub bidirectional: bool,
    /// `-N`: no peak bandwidth (only the first and last stamps are taken).
    pub no_peak: bool,
    /// `--report_gbits`: bandwidth in Gb/s instead of MB/s.
    pub report_gbits: bool,
}

impl Default for BwKeys {
    fn default() -> Self {
        BwKeys {
            tx_depth: DEFAULT_TX_DEPTH,
            post_list: 1,
            cq_mod: None,
            duration_s: None,
            bidirectional: false,
            no_peak: false,
            report_gbits: false,
        }
    }
}

impl BwKeys {
    /// The tx depth in force for `iterations` messages (perftest lowers `-t` to `-n`).
    pub fn tx_depth_for(&self, iterations: u32) -> u32 {
        self.tx_depth.min(iterations).max(1)
    }
    /// The CQ moderation in force for `iterations` messages: `-Q`, else the post list when
    /// it is longer than one, else perftest's 100; never above the tx depth in force.
    pub fn cq_mod_for(&self, iterations: u32) -> u32 {
        let q = match (self.cq_mod, self.post_list) {
            (Some(q), _) => q,
            (None, l) if l > 1 => l,
            (None, _) => DEFAULT_CQ_MOD,
        };
        q.min(self.tx_depth_for(iterations)).max(1)
    }
    /// The first key that differs from its default, by name (a latency test refuses it).
    pub fn first_given(&self) -> Option<&'static str> {
        let d = BwKeys::default();
        [
            (self.tx_depth != d.tx_depth, "tx_depth"),
            (self.post_list != d.post_list, "post_list"),
            (self.cq_mod.is_some(), "cq_mod"),
            (self.duration_s.is_some(), "duration"),
            (self.bidirectional, "bidirectional"),
            (self.no_peak, "no_peak"),
            (self.report_gbits, "report_gbits"),
        ]
        .into_iter()
        .find_map(|(given, name)| given.then_some(name))
    }
}

/// Everything a ping-pong run needs to know. Build it with [`PingPongConfig::new`] and
/// [`PingPongConfig::apply`]; [`PingPongConfig::validate`] runs before any run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PingPongConfig {
    /// `send_lat` (default) or `write_lat`.
    pub test: Test,
    pub transport: Transport,
    pub role: Role,
    pub sizes: Sizes,
    /// Iterations per size (`-n`), at least 5.
    pub iterations: u32,
    /// Inline limit (`-I`); `None` = perftest's default for the transport.
    pub inline_limit: Option<u32>,
    pub completion: Completion,
    /// `modes`: every completion mode each run is measured in, one run per mode (empty:
    /// just `completion`). The plan expands it ([`PingPongConfig::per_mode`]); a single
    /// ping-pong only looks at `completion`.
    pub modes: Modes,
    /// atomic_lat's operation (`-A`).
    pub atomic: AtomicOp,
    /// READs/atomics the client may have outstanding (`-o`): the QPs' `max_rd_atomic` and
    /// `max_dest_rd_atomic`. The latency loop still posts one at a time, as perftest's.
    pub outstanding_reads: u8,
    /// The bandwidth tests' flags (`-t`, `-l`, `-Q`, `-D`, `-b`, `-N`, `--report_gbits`).
    pub bw: BwKeys,
    /// HCA port (`-i`), 1-based.
    pub port: u8,
    /// The peer's LID; `None` = probe `probe_lids` for it.
    pub peer_lid: Option<u16>,
    /// Path MTU (`-m`); `None` = the port's active MTU, with perftest's ConnectX-3 rule
    /// (4096 becomes 2048).
    pub mtu: Option<Mtu>,
    /// How long one wait (a completion, a reply, a barrier answer) may take before the
    /// engine counts a loss and re-sends.
    pub wait_timeout_ns: u64,
    /// Losses tolerated per size before that size is aborted (reported) and the sweep goes on.
    pub max_losses_per_size: u32,
    /// Bound on the whole rendezvous (the peer booting later) and on any silence of the peer.
    pub peer_timeout_ns: u64,
    /// LIDs probed for the peer when `peer_lid` is `None` (inclusive).
    pub probe_lids: (u16, u16),
    /// The rendezvous QP number this node creates its rendezvous QP at; `None` = the
    /// well-known one its device implies ([`well_known_rdv_qpn`]).
    pub rdv_qpn: Option<u32>,
    /// Where a client sends its Hellos: the server's rendezvous QPN; `None` = this node's
    /// rendezvous QPN (two ibkern nodes). A peer whose verbs cannot choose a QPN (Linux)
    /// prints the one it got. Everything after the HelloAck goes to that message's source
    /// QPN anyway.
    pub peer_rdv_qpn: Option<u32>,
    /// Check every received payload byte against the pattern the peer sent (costs time on
    /// the measured path: for tests, not for published numbers).
    pub verify: bool,
    /// Client: also time the parts of each iteration (the post, post to send completion)
    /// and ask the server for its turnaround (`anatomy=on`; docs/benchmarks.md, "Where the
    /// time goes"). Off by default: it reads the TSC twice more per iteration on the
    /// measured path.
    pub anatomy: bool,
    /// Client: how many times the whole plan runs (`repeat`, 1..=1000).
    pub repeat: u32,
    /// Server: how long it waits for the next client after a client's plan ended
    /// (`idle_timeout_ms`); 0 = end after the first client's plan.
    pub idle_timeout_ns: u64,
    /// `test=srq_pingpong` and its keys (`qps`, `rx_depth`, `cq_moderation`).
    pub srq: SrqKeys,
}

impl Default for PingPongConfig {
    fn default() -> Self {
        Self::new(Transport::Ud, Role::Server)
    }
}

/// A rule between keys (or between a key and the device) that a configuration breaks.
/// Every variant carries the numbers involved, so the message names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// `mode=fault` without `fault=`, or `fault=` without `mode=fault`.
    FaultNeedsMode,
    /// `mode=pingpong` without `role=`.
    PingpongNeedsRole,
    /// perftest's own refusal (`change_conn_type`).
    WriteLatOverUd,
    /// perftest's own refusal: READ and atomics need RC (`transport` is the one asked for).
    OneSidedNeedsRc { transport: Transport },
    /// An atomic is 8 bytes: atomic_lat runs `size=8` only (no sweep).
    AtomicSize { size: u32 },
    /// write_lat polls memory, there is no completion to wait for.
    WriteLatWithEvents,
    /// `completion=isr`: the reply is posted from the handler of the CQ's MSI-X interrupt;
    /// `hca_irq` must be `msix` (INTx's level-triggered line needs the driver to clear it
    /// outside the handler).
    IsrNeedsMsix,
    /// A server answers the Hello's source QPN; only a client names the peer's.
    PeerRdvQpnOnServer,
    /// A UD message must fit one packet of the path MTU.
    UdSizeAboveMtu { size: u32, mtu: u32 },
    /// The inline limit is more than the device (or the QP it created) can carry.
    InlineAboveDevice { inline: u32, limit: u32 },
    /// A field set directly (not through a key) outside its range; names the field.
    OutOfRange(&'static str),
    /// `completion=event` (perftest's `-e`) waits for the CQ's interrupt: `hca_irq=poll`
    /// takes none, and a run measured by polling would be labelled event.
    EventsWithoutInterrupts,
    /// perftest's own refusal for the bandwidth tests: write_bw needs a connection (RC or
    /// UC), read_bw and atomic_bw need RC.
    BwNeedsConnection { test: Test, transport: Transport },
    /// A bandwidth key (`-t`, `-l`, `-Q`, `-D`, `-b`, `-N`, `--report_gbits`) given to a
    /// latency test, which has no use for it.
    BandwidthKeyOnLatency { key: &'static str },
    /// `-Q` above `-t`: the sender could never reach a signaled message.
    CqModAboveTxDepth { cq_mod: u32, tx_depth: u32 },
    /// `-l` above `-t`: a list could never be posted.
    PostListAboveTxDepth { post_list: u32, tx_depth: u32 },
    /// perftest's rule: with a post list, `-n` is a multiple of `-l`.
    IterationsNotMultipleOfPostList { iterations: u32, post_list: u32 },
    /// perftest's rule: with a post list, `-l` is a multiple of `-Q`.
    PostListNotMultipleOfCqMod { post_list: u32, cq_mod: u32 },
    /// perftest refuses `-D` with `-a`.
    DurationWithAll,
    /// The bandwidth engine busy-polls its completions: `completion=event` and `isr` do not
    /// apply.
    BwWithEvents,
    /// A feature the bandwidth engine does not have yet (named).
    BwNotYet { what: &'static str },
    /// A key's value outside its bounds (a field set directly, not through the key).
    OutOfBounds {
        key: &'static str,
        value: u64,
        bounds: Bounds,
    },
    /// The SRQ ping-pong keeps at least one receive per QP posted on the SRQ, and at most
    /// [`SRQ_MAX_RX_DEPTH`].
    SrqRxDepth { rx_depth: u32, qps: u32 },
    /// A key given a value the test does not use (`atomic` on a test that is not an
    /// atomic one, `outstanding_reads` on one that posts no READ or atomic).
    KeyNotForTest { key: &'static str, test: Test },
}

impl Rule {
    /// `Ok` if `value` (of `key`) is within `bounds`, else [`Rule::OutOfBounds`].
    pub fn within(key: &'static str, value: u64, bounds: Bounds) -> Result<(), Rule> {
        if bounds.contains(value) {
            Ok(())
        } else {
            Err(Rule::OutOfBounds { key, value, bounds })
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::FaultNeedsMode => write!(f, "mode=fault and fault=<kind> must be given together"),
            Rule::PingpongNeedsRole => write!(f, "mode=pingpong needs role=client|server"),
            Rule::WriteLatOverUd => write!(
                f,
                "UD connection only possible in SEND verb (test=write_lat runs over RC or UC)"
            ),
            Rule::OneSidedNeedsRc { transport: Transport::Ud } => write!(
                f,
                "UD connection only possible in SEND verb (read_lat and atomic_lat run over RC)"
            ),
            Rule::OneSidedNeedsRc { transport } => write!(
                f,
                "{} connection not possible in READ/ATOMIC verbs (read_lat and atomic_lat run over RC)",
                transport.name()
            ),
            Rule::AtomicSize { size } => write!(
                f,
                "an atomic is 8 bytes: atomic_lat runs size=8 only, not {size} (nor size=all)"
            ),
            Rule::WriteLatWithEvents => write!(
                f,
                "write_lat polls memory for the peer's write: completion=event and isr do not apply"
            ),
            Rule::IsrNeedsMsix => write!(
                f,
                "completion=isr posts the reply from the completion interrupt's handler: it needs hca_irq=msix"
            ),
            Rule::PeerRdvQpnOnServer => write!(
                f,
                "peer_rdv_qpn is a client key (a server answers the Hello's source QPN)"
            ),
            Rule::UdSizeAboveMtu { size, mtu } => write!(
                f,
                "UD message of {size} bytes is larger than the path MTU {mtu}"
            ),
            Rule::InlineAboveDevice { inline, limit } => write!(
                f,
                "inline limit of {inline} bytes is more than the device's QP can carry ({limit})"
            ),
            Rule::OutOfRange(what) => write!(f, "{what}"),
            Rule::EventsWithoutInterrupts => write!(
                f,
                "completion=event waits for completion interrupts, and hca_irq=poll takes none (use hca_irq=msix or intx)"
            ),
            Rule::BwNeedsConnection { test, transport } => write!(
                f,
                "{} connection not possible for {} (write_bw runs over RC or UC, read_bw and atomic_bw over RC)",
                transport.name(),
                test.name()
            ),
            Rule::BandwidthKeyOnLatency { key } => write!(
                f,
                "{key} is a bandwidth key: it applies to send_bw, write_bw, read_bw and atomic_bw only"
            ),
            Rule::CqModAboveTxDepth { cq_mod, tx_depth } => write!(
                f,
                "CQ moderation {cq_mod} (-Q) is above the tx depth {tx_depth} (-t)"
            ),
            Rule::PostListAboveTxDepth { post_list, tx_depth } => write!(
                f,
                "post list {post_list} (-l) is above the tx depth {tx_depth} (-t)"
            ),
            Rule::IterationsNotMultipleOfPostList {
                iterations,
                post_list,
            } => write!(
                f,
                "the iterations ({iterations}, -n) must be a multiple of the post list ({post_list}, -l)"
            ),
            Rule::PostListNotMultipleOfCqMod { post_list, cq_mod } => write!(
                f,
                "the post list ({post_list}, -l) must be a multiple of the CQ moderation ({cq_mod}, -Q)"
            ),
            Rule::DurationWithAll => write!(f, "duration (-D) cannot run with size=all (-a)"),
            Rule::BwWithEvents => write!(
                f,
                "the bandwidth tests busy-poll their completions: completion=event and isr do not apply"
            ),
            Rule::BwNotYet { what } => write!(
                f,
                "{what} is not supported by the bandwidth engine yet"
            ),
            Rule::OutOfBounds { key, value, bounds } if bounds.hex => write!(
                f,
                "{key}={value:#x} is outside {}..={:#x}",
                bounds.lo, bounds.hi
            ),
            Rule::OutOfBounds { key, value, bounds } => write!(
                f,
                "{key}={value} is outside {}..={}",
                bounds.lo, bounds.hi
            ),
            Rule::SrqRxDepth { rx_depth, qps } => write!(
                f,
                "rx_depth must hold one receive per QP: {rx_depth} is outside {qps}..={SRQ_MAX_RX_DEPTH} (qps={qps})"
            ),
            Rule::KeyNotForTest { key, test } => {
                let (flag, tests) = match *key {
                    "atomic" => ("-A", "atomic_lat and atomic_bw"),
                    _ => ("-o", "read_lat, atomic_lat, read_bw and atomic_bw"),
                };
                write!(
                    f,
                    "{key} ({flag}) applies to {tests} only, not to {}",
                    test.name()
                )
            }
        }
    }
}

/// Why a `key=value` pair or a whole configuration was refused by
/// [`PingPongConfig::apply`] / [`PingPongConfig::validate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// Not a ping-pong key.
    UnknownKey,
    /// The value does not parse or is out of range.
    BadValue(ValueError),
    /// The combination is invalid.
    Invalid(Rule),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::UnknownKey => write!(f, "unknown key"),
            ConfigError::BadValue(w) => write!(f, "bad value: {w}"),
            ConfigError::Invalid(r) => write!(f, "{r}"),
        }
    }
}

impl From<Rule> for ConfigError {
    fn from(r: Rule) -> Self {
        ConfigError::Invalid(r)
    }
}

/// The bounds of the ping-pong keys that take a number, each written once: the key's
/// parser, its refusal, the rules ([`PingPongConfig::validate`]) and the runner's flags
/// take them from here.
pub mod bounds {
    use super::*;

    pub const SIZE: Bounds = Bounds::new(
        "all or a size in bytes",
        MIN_SIZE as u64,
        MAX_SWEEP_SIZE as u64,
    );
    pub const ITERS: Bounds = Bounds::new(
        "an iteration count",
        MIN_ITERATIONS as u64,
        MAX_ITERATIONS as u64,
    );
    pub const INLINE: Bounds = Bounds::new("an inline limit", 0, MAX_INLINE as u64);
    pub const OUT_READS: Bounds = Bounds::new("outstanding READs/atomics", 1, MAX_OUT_READS as u64);
    pub const TX_DEPTH: Bounds = Bounds::new("a tx depth", 1, MAX_TX_DEPTH as u64);
    pub const POST_LIST: Bounds = Bounds::new("a post list", 1, MAX_CQ_MOD as u64);
    pub const CQ_MOD: Bounds = Bounds::new("a CQ moderation", 1, MAX_CQ_MOD as u64);
    pub const DURATION: Bounds = Bounds::new("seconds", 1, MAX_DURATION_S as u64);
    pub const IB_PORT: Bounds = Bounds::new("a port number", 1, MAX_PORT as u64);
    pub const LID: Bounds = Bounds::new("a unicast LID", 1, MAX_UNICAST_LID as u64).hex();
    pub const LOSS_LIMIT: Bounds = Bounds::new("a loss count", 0, u32::MAX as u64);
    pub const TIMEOUT_MS: Bounds = Bounds::new("milliseconds", 1, MAX_TIMEOUT_MS as u64);
    pub const PEER_TIMEOUT_MS: Bounds = Bounds::new("milliseconds", 1, u32::MAX as u64);
    pub const QPN: Bounds =
        Bounds::new("a QP number", QPN_RANGE.0 as u64, QPN_RANGE.1 as u64).hex();
    pub const REPEAT: Bounds = Bounds::new("a repeat count", 1, MAX_REPEAT as u64);
    pub const IDLE_TIMEOUT_MS: Bounds = Bounds::new("milliseconds", 0, MAX_IDLE_TIMEOUT_MS as u64);
    pub const SRQ_QPS: Bounds = Bounds::new("QPs sharing the SRQ", 1, SRQ_MAX_QPS as u64);
    pub const SRQ_RX_DEPTH: Bounds = Bounds::new("receives on the SRQ", 1, SRQ_MAX_RX_DEPTH as u64);
    pub const SRQ_SIZE: Bounds = Bounds::new(
        "a size in bytes",
        SRQ_MIN_SIZE as u64,
        MAX_SWEEP_SIZE as u64,
    );
}

use bounds::*;

/// Milliseconds within `b` (the `*_ms` keys) as nanoseconds.
fn millis_as_ns(v: &str, b: Bounds) -> Result<u64, ValueError> {
    b.parse(v).map(|ms| ms * 1_000_000)
}

/// A switch: `1`/`true`/`on` or `0`/`false`/`off`.
fn flag(v: &str) -> Result<bool, ValueError> {
    match v {
        "1" | "true" | "on" => Ok(true),
        "0" | "false" | "off" => Ok(false),
        _ => Err(ValueError::Expected("0 or 1")),
    }
}

/// Writes an optional value (nothing when absent).
fn show_some(w: &mut dyn fmt::Write, v: Option<impl fmt::Display>) -> fmt::Result {
    v.map_or(Ok(()), |v| write!(w, "{v}"))
}

/// Writes a switch as `1` or `0`.
fn show_flag(w: &mut dyn fmt::Write, on: bool) -> fmt::Result {
    w.write_str(if on { "1" } else { "0" })
}

/// One ping-pong key: its name, what it accepts (for messages and docs), its parser and
/// its emitter (the parser's inverse).
pub struct BenchKey {
    pub name: &'static str,
    pub values: Values,
    parse: fn(&str, &mut PingPongConfig) -> Result<(), ValueError>,
    /// Writes the key's value (nothing when absent: an option not given).
    pub(crate) show: fn(&PingPongConfig, &mut dyn fmt::Write) -> fmt::Result,
}

impl BenchKey {
    /// Sets the key's field from `value` (trimmed); on error nothing changes.
    pub fn apply(&self, value: &str, cfg: &mut PingPongConfig) -> Result<(), ValueError> {
        (self.parse)(value.trim(), cfg)
    }
}

/// Every ping-pong key (docs/benchmarks.md), with perftest's flag where there is one.
pub static BENCH_KEYS: &[BenchKey] = &[
    BenchKey {
        name: "role",
        values: Values::Names(Role::NAMES),
        parse: |v, c| {
            c.role = named(v)?;
            Ok(())
        },
        show: |c, w| w.write_str(c.role.name()),
    },
    BenchKey {
        name: "test",
        values: Values::Names(Benchmark::NAMES),
        parse: |v, c| {
            c.set_benchmark(named(v)?);
            Ok(())
        },
        show: |c, w| w.write_str(c.benchmark().name()),
    },
    BenchKey {
        name: "transport",
        values: Values::Names(Transport::NAMES),
        parse: |v, c| {
            c.transport = named(v)?;
            Ok(())
        },
        show: |c, w| w.write_str(c.transport.name()),
    },
    BenchKey {
        name: "size",
        values: Values::Text("all|2..8388608"),
        parse: |v, c| {
            c.sizes = if v.eq_ignore_ascii_case("all") {
                Sizes::All
            } else {
                Sizes::Single(SIZE.parse_u32(v)?)
            };
            Ok(())
        },
        show: |c, w| match c.sizes {
            Sizes::All => w.write_str("all"),
            Sizes::Single(n) => write!(w, "{n}"),
        },
    },
    BenchKey {
        name: "iters",
        values: ITERS.values(),
        parse: |v, c| {
            c.iterations = ITERS.parse_u32(v)?;
            Ok(())
        },
        show: |c, w| write!(w, "{}", c.iterations),
    },
    BenchKey {
        name: "inline",
        values: INLINE.values(),
        parse: |v, c| {
            c.inline_limit = Some(INLINE.parse_u32(v)?);
            Ok(())
        },
        show: |c, w| show_some(w, c.inline_limit),
    },
    BenchKey {
        name: "completion",
        values: Values::Names(Completion::NAMES),
        parse: |v, c| {
            c.completion = named(v)?;
            c.modes = Modes::default();
            Ok(())
        },
        show: |c, w| w.write_str(c.completion.name()),
    },
    BenchKey {
        name: "modes",
        values: Values::Text("poll,event,isr (one or several)"),
        parse: |v, c| {
            let m = Modes::parse(v).ok_or(ValueError::Expected(
                "a list of distinct completion modes from poll, event, isr (e.g. poll,event,isr)",
            ))?;
            c.set_modes(m);
            Ok(())
        },
        show: |c, w| write!(w, "{}", c.modes),
    },
    BenchKey {
        name: "atomic",
        values: Values::Names(AtomicOp::NAMES),
        parse: |v, c| {
            c.atomic = named(v)?;
            Ok(())
        },
        show: |c, w| w.write_str(c.atomic.name()),
    },
    BenchKey {
        name: "outstanding_reads",
        values: OUT_READS.values(),
        parse: |v, c| {
            c.outstanding_reads = OUT_READS.parse(v)? as u8;
            Ok(())
        },
        show: |c, w| write!(w, "{}", c.outstanding_reads),
    },
    BenchKey {
        name: "tx_depth",
        values: TX_DEPTH.values(),
        parse: |v, c| {
            c.bw.tx_depth = TX_DEPTH.parse_u32(v)?;
            Ok(())
        },
        show: |c, w| write!(w, "{}", c.bw.tx_depth),
    },
    BenchKey {
        name: "post_list",
        values: POST_LIST.values(),
        parse: |v, c| {
            c.bw.post_list = POST_LIST.parse_u32(v)?;
            Ok(())
        },
        show: |c, w| write!(w, "{}", c.bw.post_list),
    },
    BenchKey {
        name: "cq_mod",
        values: CQ_MOD.values(),
        parse: |v, c| {
            c.bw.cq_mod = Some(CQ_MOD.parse_u32(v)?);
            Ok(())
        },
        show: |c, w| show_some(w, c.bw.cq_mod),
    },
    BenchKey {
        name: "duration",
        values: DURATION.values(),
        parse: |v, c| {
            c.bw.duration_s = Some(DURATION.parse_u32(v)?);
            Ok(())
        },
        show: |c, w| show_some(w, c.bw.duration_s),
    },
    BenchKey {
        name: "bidirectional",
        values: Values::Text("0|1"),
        parse: |v, c| {
            c.bw.bidirectional = flag(v)?;
            Ok(())
        },
        show: |c, w| show_flag(w, c.bw.bidirectional),
    },
    BenchKey {
        name: "no_peak",
        values: Values::Text("0|1"),
        parse: |v, c| {
            c.bw.no_peak = flag(v)?;
            Ok(())
        },
        show: |c, w| show_flag(w, c.bw.no_peak),
    },
    BenchKey {
        name: "report_gbits",
        values: Values::Text("0|1"),
        parse: |v, c| {
            c.bw.report_gbits = flag(v)?;
            Ok(())
        },
        show: |c, w| show_flag(w, c.bw.report_gbits),
    },
    BenchKey {
        name: "mtu",
        values: Values::Names(MTU_NAMES),
        parse: |v, c| {
            c.mtu = Some(parse_mtu(v)?);
            Ok(())
        },
        show: |c, w| show_some(w, c.mtu.map(Mtu::bytes)),
    },
    BenchKey {
        name: "ib_port",
        values: IB_PORT.values(),
        parse: |v, c| {
            c.port = IB_PORT.parse(v)? as u8;
            Ok(())
        },
        show: |c, w| write!(w, "{}", c.port),
    },
    BenchKey {
        name: "peer_lid",
        values: LID.values(),
        parse: |v, c| {
            c.peer_lid = Some(LID.parse(v)? as u16);
            Ok(())
        },
        show: |c, w| show_some(w, c.peer_lid.map(|l| Hex(l.into()))),
    },
    BenchKey {
        name: "loss_limit",
        values: LOSS_LIMIT.values(),
        parse: |v, c| {
            c.max_losses_per_size = LOSS_LIMIT.parse_u32(v)?;
            Ok(())
        },
        show: |c, w| write!(w, "{}", c.max_losses_per_size),
    },
    BenchKey {
        name: "timeout_ms",
        values: TIMEOUT_MS.values(),
        parse: |v, c| {
            c.wait_timeout_ns = millis_as_ns(v, TIMEOUT_MS)?;
            Ok(())
        },
        show: |c, w| write!(w, "{}", c.wait_timeout_ns / 1_000_000),
    },
    BenchKey {
        name: "peer_timeout_ms",
        values: PEER_TIMEOUT_MS.values(),
        parse: |v, c| {
            c.peer_timeout_ns = millis_as_ns(v, PEER_TIMEOUT_MS)?;
            Ok(())
        },
        show: |c, w| write!(w, "{}", c.peer_timeout_ns / 1_000_000),
    },
    BenchKey {
        name: "probe_lids",
        values: Values::Text("A-B"),
        parse: |v, c| {
            const WHY: ValueError =
                ValueError::Expected("a LID range A-B within 1..=0xBFFF, at most 1024 LIDs");
            let (a, b) = v.split_once('-').ok_or(WHY)?;
            let lid = |x: &str| LID.parse(x.trim()).map(|n| n as u16).map_err(|_| WHY);
            let (a, b) = (lid(a)?, lid(b)?);
            if a > b || b - a >= MAX_PROBE_LIDS {
                return Err(WHY);
            }
            c.probe_lids = (a, b);
            Ok(())
        },
        show: |c, w| write!(w, "{}-{}", c.probe_lids.0, c.probe_lids.1),
    },
    BenchKey {
        name: "rdv_qpn",
        values: QPN.values(),
        parse: |v, c| {
            c.rdv_qpn = Some(QPN.parse_u32(v)?);
            Ok(())
        },
        show: |c, w| show_some(w, c.rdv_qpn.map(|q| Hex(q.into()))),
    },
    BenchKey {
        name: "peer_rdv_qpn",
        values: QPN.values(),
        parse: |v, c| {
            c.peer_rdv_qpn = Some(QPN.parse_u32(v)?);
            Ok(())
        },
        show: |c, w| show_some(w, c.peer_rdv_qpn.map(|q| Hex(q.into()))),
    },
    BenchKey {
        name: "repeat",
        values: REPEAT.values(),
        parse: |v, c| {
            c.repeat = REPEAT.parse_u32(v)?;
            Ok(())
        },
        show: |c, w| write!(w, "{}", c.repeat),
    },
    BenchKey {
        name: "idle_timeout_ms",
        values: IDLE_TIMEOUT_MS.values(),
        parse: |v, c| {
            c.idle_timeout_ns = millis_as_ns(v, IDLE_TIMEOUT_MS)?;
            Ok(())
        },
        show: |c, w| write!(w, "{}", c.idle_timeout_ns / 1_000_000),
    },
    BenchKey {
        name: "qps",
        values: SRQ_QPS.values(),
        parse: |v, c| {
            c.srq.qps = SRQ_QPS.parse_u32(v)?;
            Ok(())
        },
        show: |c, w| write!(w, "{}", c.srq.qps),
    },
    BenchKey {
        name: "rx_depth",
        values: SRQ_RX_DEPTH.values(),
        parse: |v, c| {
            c.srq.rx_depth = SRQ_RX_DEPTH.parse_u32(v)?;
            Ok(())
        },
        show: |c, w| write!(w, "{}", c.srq.rx_depth),
    },
    BenchKey {
        name: "cq_moderation",
        values: Values::Text("C/P[,C/P...] (cq_max_count/cq_period_us, 0..65535, at most 8)"),
        parse: |v, c| {
            c.srq.moderation = Moderations::parse(v)?;
            Ok(())
        },
        show: |c, w| write!(w, "{}", c.srq.moderation),
    },
    BenchKey {
        name: "verify",
        values: Values::Text("0|1"),
        parse: |v, c| {
            c.verify = flag(v)?;
            Ok(())
        },
        show: |c, w| show_flag(w, c.verify),
    },
    BenchKey {
        name: "anatomy",
        values: Values::Names(ON_OFF),
        parse: |v, c| {
            c.anatomy = match v {
                "1" | "true" | "on" => true,
                "0" | "false" | "off" => false,
                _ => return Err(ValueError::OneOf(ON_OFF)),
            };
            Ok(())
        },
        show: |c, w| w.write_str(if c.anatomy { "on" } else { "off" }),
    },
];

const ON_OFF: &[&str] = &["on", "off"];
/// The path MTUs `mtu` takes, in bytes.
pub const MTU_NAMES: &[&str] = &["256", "512", "1024", "2048", "4096"];

/// `mtu`'s value (and perftest's `-m`): one of the IB path MTUs in bytes.
pub fn parse_mtu(v: &str) -> Result<Mtu, ValueError> {
    let m = match parse_u32(v) {
        Some(256) => Mtu::Mtu256,
        Some(512) => Mtu::Mtu512,
        Some(1024) => Mtu::Mtu1024,
        Some(2048) => Mtu::Mtu2048,
        Some(4096) => Mtu::Mtu4096,
        _ => return Err(ValueError::OneOf(MTU_NAMES)),
    };
    Ok(m)
}

/// A number written in hexadecimal (`0x12`), as LIDs and QP numbers are.
struct Hex(u64);

impl fmt::Display for Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// The SRQ ping-pong's limits: its QPs, a receive per QP on the SRQ, a size of at least
/// the 8-byte header (QP index and sequence number), the iterations. The bench checks an SRQ
/// run built from anything but a checked configuration with the same function.
pub fn check_srq(qps: u32, rx_depth: u32, size: u32, iterations: u32) -> Result<(), Rule> {
    Rule::within("qps", qps.into(), SRQ_QPS)?;
    if rx_depth < qps || rx_depth > SRQ_MAX_RX_DEPTH {
        return Err(Rule::SrqRxDepth { rx_depth, qps });
    }
    Rule::within("size", size.into(), SRQ_SIZE)?;
    Rule::within("iters", iterations.into(), ITERS)
}

impl PingPongConfig {
    /// perftest's defaults: 2-byte messages, 1000 iterations, polling, port 1, MTU rule,
    /// 100 ms per wait, 100 losses per size, 120 s to find the peer, LIDs 1..=64 probed.
    pub fn new(transport: Transport, role: Role) -> Self {
        PingPongConfig {
            test: Test::SendLat,
            transport,
            role,
            sizes: Sizes::Single(2),
            iterations: DEFAULT_ITERATIONS,
            inline_limit: None,
            completion: Completion::Poll,
            modes: Modes(0),
            atomic: AtomicOp::FetchAndAdd,
            outstanding_reads: DEFAULT_OUT_READS,
            bw: BwKeys::default(),
            port: 1,
            peer_lid: None,
            mtu: None,
            wait_timeout_ns: 100_000_000,
            max_losses_per_size: 100,
            peer_timeout_ns: 120_000_000_000,
            probe_lids: (1, 64),
            rdv_qpn: None,
            peer_rdv_qpn: None,
            verify: false,
            anatomy: false,
            repeat: 1,
            idle_timeout_ns: 0,
            srq: SrqKeys::default(),
        }
    }

    /// Set one option from its `key=value` form (the keys of [`BENCH_KEYS`],
    /// docs/benchmarks.md). A refused value changes nothing.
    pub fn apply(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let key = key.trim();
        let k = BENCH_KEYS
            .iter()
            .find(|k| k.name == key)
            .ok_or(ConfigError::UnknownKey)?;
        k.apply(value, self).map_err(ConfigError::BadValue)
    }

    /// The completion modes this configuration is measured in: `modes`, else `completion`.
    pub fn each_mode(&self) -> impl Iterator<Item = Completion> {
        let modes = if self.modes.is_empty() {
            Modes::one(self.completion)
        } else {
            self.modes
        };
        modes.iter()
    }

    /// One configuration per mode of [`Self::each_mode`], each with that `completion` and
    /// no `modes`: the runs a plan makes of this one.
    pub fn per_mode(&self) -> impl Iterator<Item = PingPongConfig> {
        let base = *self;
        self.each_mode().map(move |completion| PingPongConfig {
            completion,
            modes: Modes::default(),
            ..base
        })
    }

    /// Checks the combination (perftest's `check_mtu` and iteration rules, the test and
    /// transport pairs), everything that can be known without the device.
    pub fn validate(&self) -> Result<(), Rule> {
        Rule::within("iters", self.iterations.into(), ITERS)?;
        Rule::within("ib_port", self.port.into(), IB_PORT)?;
        Rule::within("repeat", self.repeat.into(), REPEAT)?;
        if self.wait_timeout_ns == 0 || self.peer_timeout_ns == 0 {
            return Err(Rule::OutOfRange("zero timeout"));
        }
        if let Some(i) = self.inline_limit {
            Rule::within("inline", i.into(), INLINE)?;
        }
        if let Sizes::Single(n) = self.sizes {
            Rule::within("size", n.into(), SIZE)?;
        }
        self.test.check_transport(self.transport)?;
        Rule::within(
            "outstanding_reads",
            self.outstanding_reads.into(),
            OUT_READS,
        )?;
        if self.test.is_bw() {
            self.validate_bw()?;
        } else if let Some(key) = self.bw.first_given() {
            return Err(Rule::BandwidthKeyOnLatency { key });
        }
        if !self.test.is_atomic() && self.atomic != AtomicOp::FetchAndAdd {
            return Err(Rule::KeyNotForTest {
                key: "atomic",
                test: self.test,
            });
        }
        if !self.test.takes_outstanding_reads() && self.outstanding_reads != DEFAULT_OUT_READS {
            return Err(Rule::KeyNotForTest {
                key: "outstanding_reads",
                test: self.test,
            });
        }
        if self.test.is_atomic() {
            match self.sizes {
                Sizes::Single(ATOMIC_SIZE) => {}
                Sizes::Single(size) => return Err(Rule::AtomicSize { size }),
                Sizes::All => return Err(Rule::AtomicSize { size: 0 }),
            }
        }
        if let Sizes::Single(n) = self.sizes {
            // The path MTU is at most the configured one, or 2048 (perftest's rule).
            let most = self.mtu.unwrap_or(DEFAULT_MTU_CAP).bytes();
            if self.transport == Transport::Ud && n > most {
                return Err(Rule::UdSizeAboveMtu { size: n, mtu: most });
            }
        }
        if self.test == Test::WriteLat && self.each_mode().any(|c| c != Completion::Poll) {
            return Err(Rule::WriteLatWithEvents);
        }
        if self.role == Role::Server && self.peer_rdv_qpn.is_some() {
            return Err(Rule::PeerRdvQpnOnServer);
        }
        self.validate_srq()
    }

    /// The SRQ ping-pong's rules: RC, one size of at least its 8-byte header, at least one
    /// receive per QP; `cq_moderation` only for it and with completion events.
    fn validate_srq(&self) -> Result<(), Rule> {
        let s = &self.srq;
        if !s.moderation.as_slice().is_empty() {
            if !s.enabled {
                return Err(Rule::OutOfRange(
                    "cq_moderation applies to test=srq_pingpong",
                ));
            }
            if self.completion != Completion::Event {
                return Err(Rule::OutOfRange("cq_moderation needs completion=event"));
            }
        }
        if !s.enabled {
            return Ok(());
        }
        if self.transport != Transport::Rc {
            return Err(Rule::OutOfRange("srq_pingpong runs over RC only"));
        }
        if self.completion == Completion::Isr || !self.modes.is_empty() {
            return Err(Rule::OutOfRange(
                "srq_pingpong waits by polling or for completion events (completion=poll|event, no modes)",
            ));
        }
        match self.sizes {
            Sizes::Single(n) => check_srq(s.qps, s.rx_depth, n, self.iterations),
            Sizes::All => Err(Rule::OutOfRange(
                "srq_pingpong runs one size (size=N, not size=all)",
            )),
        }
    }

    /// The bandwidth rules (perftest's `force_dependecies`) and what the engine cannot do.
    fn validate_bw(&self) -> Result<(), Rule> {
        let b = &self.bw;
        if self.anatomy {
            // The anatomy splits a latency round trip; a stream has none.
            return Err(Rule::BwNotYet { what: "anatomy" });
        }
        if self.completion != Completion::Poll {
            return Err(Rule::BwWithEvents);
        }
        if let Some(q) = b.cq_mod {
            if q > b.tx_depth {
                return Err(Rule::CqModAboveTxDepth {
                    cq_mod: q,
                    tx_depth: b.tx_depth,
                });
            }
        }
        let tx = b.tx_depth_for(self.iterations);
        if b.post_list > tx {
            return Err(Rule::PostListAboveTxDepth {
                post_list: b.post_list,
                tx_depth: tx,
            });
        }
        if b.post_list > 1 {
            if b.duration_s.is_none() && !self.iterations.is_multiple_of(b.post_list) {
                return Err(Rule::IterationsNotMultipleOfPostList {
                    iterations: self.iterations,
                    post_list: b.post_list,
                });
            }
            let q = b.cq_mod_for(self.iterations);
            if !b.post_list.is_multiple_of(q) {
                return Err(Rule::PostListNotMultipleOfCqMod {
                    post_list: b.post_list,
                    cq_mod: q,
                });
            }
        }
        if b.duration_s.is_some() && self.sizes == Sizes::All {
            return Err(Rule::DurationWithAll);
        }
        // `-b` runs with every bandwidth test, transport, `-D` and `-a` (perftest refuses it
        // only with multicast, DC/XRC and run-infinitely SEND, none of which exist here).
        Ok(())
    }

    /// What the `test` key names: the perftest test, or the SRQ ping-pong.
    pub fn benchmark(&self) -> Benchmark {
        if self.srq.enabled {
            Benchmark::SrqPingpong
        } else {
            Benchmark::Perftest(self.test)
        }
    }

    /// Sets what the `test` key sets: a perftest test ([`Self::set_test`]), or the SRQ
    /// ping-pong with rdma-core's example's transport (RC) and size (4096 B), which later
    /// `transport` and `size` keys may change ([`Self::validate`] checks them).
    pub fn set_benchmark(&mut self, b: Benchmark) {
        match b {
            Benchmark::Perftest(test) => {
                self.srq.enabled = false;
                self.set_test(test);
            }
            Benchmark::SrqPingpong => {
                self.srq.enabled = true;
                self.transport = Transport::Rc;
                self.sizes = Sizes::Single(SRQ_DEFAULT_SIZE);
            }
        }
    }

    /// Sets `modes` (every mode each run is measured in) and `completion` to its first
    /// mode, as the key does; an empty set leaves `completion` alone.
    pub fn set_modes(&mut self, modes: Modes) {
        self.modes = modes;
        if let Some(first) = modes.iter().next() {
            self.completion = first;
        }
    }

    /// Sets the test with perftest's defaults that depend on it: an atomic test runs the
    /// operand's 8 bytes; a bandwidth test still at the latency defaults (2 B, 1000
    /// iterations, `-o 1`) takes the bandwidth ones (64 KiB; 5000 iterations for write_bw;
    /// 16 outstanding READs/atomics for read_bw and atomic_bw). A `size`, `iters` or
    /// `outstanding_reads` key after this one overrides them.
    pub fn set_test(&mut self, test: Test) {
        self.test = test;
        if test.is_atomic() {
            self.sizes = Sizes::Single(ATOMIC_SIZE);
        } else if test.is_bw() && self.sizes == Sizes::Single(MIN_SIZE) {
            self.sizes = Sizes::Single(DEFAULT_BW_SIZE);
        }
        if test == Test::WriteBw && self.iterations == DEFAULT_ITERATIONS {
            self.iterations = DEFAULT_WRITE_BW_ITERATIONS;
        }
        if matches!(test, Test::ReadBw | Test::AtomicBw)
            && self.outstanding_reads == DEFAULT_OUT_READS
        {
            // perftest's bandwidth READ/atomics take the device's most (ConnectX-3: 16).
            self.outstanding_reads = MAX_OUT_READS as u8;
        }
    }

    /// The receives a send_bw receiver keeps posted: perftest's 512, at most the iterations.
    pub fn bw_rx_depth(&self) -> u32 {
        DEFAULT_BW_RX_DEPTH.min(self.iterations)
    }

    /// The rules that need the device, checked again by the bench once it knows the path
    /// MTU (`mtu`, from [`PingPongConfig::effective_mtu`]) and the most inline data the
    /// device's QPs carry (`max_inline`).
    pub fn validate_on_device(&self, mtu: Mtu, max_inline: u32) -> Result<(), Rule> {
        if let Sizes::Single(n) = self.sizes {
            if self.transport == Transport::Ud && n > mtu.bytes() {
                return Err(Rule::UdSizeAboveMtu {
                    size: n,
                    mtu: mtu.bytes(),
                });
            }
        }
        if self.inline() > max_inline {
            return Err(Rule::InlineAboveDevice {
                inline: self.inline(),
                limit: max_inline,
            });
        }
        Ok(())
    }

    /// This node's rendezvous QPN on a device reserving `reserved_qps` QPNs: `rdv_qpn`, else
    /// the well-known one ([`well_known_rdv_qpn`]).
    pub fn local_rdv_qpn(&self, reserved_qps: u32) -> u32 {
        self.rdv_qpn
            .unwrap_or_else(|| well_known_rdv_qpn(reserved_qps))
    }

    /// The QPN a client's Hellos go to: `peer_rdv_qpn`, else this node's own rendezvous QPN.
    pub fn hello_qpn(&self, reserved_qps: u32) -> u32 {
        self.peer_rdv_qpn
            .unwrap_or_else(|| self.local_rdv_qpn(reserved_qps))
    }

    /// The inline limit in force (`-I` or perftest's default for the test and transport:
    /// 220 B for write_lat, 236 B / 188 B for send_lat over UC / UD).
    pub fn inline(&self) -> u32 {
        self.inline_limit.unwrap_or(match self.test {
            Test::WriteLat => DEFAULT_INLINE_WRITE,
            Test::SendLat => self.transport.default_inline(),
            // Nothing is sent inline: a READ request or an atomic carries no payload; the
            // bandwidth tests send nothing inline unless `-I` says so (perftest).
            Test::ReadLat
            | Test::AtomicLat
            | Test::SendBw
            | Test::WriteBw
            | Test::ReadBw
            | Test::AtomicBw => 0,
        })
    }

    /// perftest's receive depth for UC/UD latency tests: `min(iters, 16000)`.
    pub fn rx_depth(&self) -> u32 {
        self.iterations.min(MAX_RX_DEPTH)
    }

    /// The path MTU: the configured one, else the port's active MTU with perftest's
    /// ConnectX-3 rule (an active 4096 is used as 2048), never above the active MTU.
    pub fn effective_mtu(&self, active: Mtu) -> Mtu {
        match self.mtu {
            Some(m) => m.min(active),
            None => active.min(DEFAULT_MTU_CAP),
        }
    }

    /// The sizes this run measures for a given path MTU, in order.
    pub fn size_list(&self, mtu: Mtu) -> SizeIter {
        let max = match self.transport {
            Transport::Ud => mtu.bytes(),
            Transport::Uc | Transport::Rc => MAX_SWEEP_SIZE,
        };
        match self.sizes {
            Sizes::All => SizeIter {
                next: 2,
                last: max,
                single: false,
            },
            Sizes::Single(n) => SizeIter {
                next: n,
                last: n,
                single: true,
            },
        }
    }
}

/// Iterator over the sizes of a run (powers of two for `-a`).
#[derive(Clone, Copy, Debug)]
pub struct SizeIter {
    next: u32,
    last: u32,
    single: bool,
}

impl Iterator for SizeIter {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        if self.next == 0 || self.next > self.last {
            return None;
        }
        let n = self.next;
        self.next = if self.single {
            0
        } else {
            n.checked_mul(2).unwrap_or(0)
        };
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_mirror_perftest_flags() {
        let mut c = PingPongConfig::default();
        c.apply("transport", "uc").unwrap();
        c.apply("size", "all").unwrap();
        c.apply("iters", "20").unwrap();
        c.apply("inline", "64").unwrap();
        c.apply("completion", "event").unwrap();
        c.apply("mtu", "1024").unwrap();
        c.apply("ib_port", "2").unwrap();
        c.apply("role", "client").unwrap();
        c.apply("peer_lid", "0x12").unwrap();
        c.apply("loss_limit", "3").unwrap();
        c.apply("timeout_ms", "5").unwrap();
        c.apply("probe_lids", "1-16").unwrap();
        c.apply("verify", "1").unwrap();
        c.apply("anatomy", "on").unwrap();
        assert_eq!(c.transport, Transport::Uc);
        assert_eq!(c.sizes, Sizes::All);
        assert_eq!(c.iterations, 20);
        assert_eq!(c.inline(), 64);
        assert_eq!(c.completion, Completion::Event);
        assert_eq!(c.mtu, Some(Mtu::Mtu1024));
        assert_eq!(c.port, 2);
        assert_eq!(c.role, Role::Client);
        assert_eq!(c.peer_lid, Some(0x12));
        assert_eq!(c.max_losses_per_size, 3);
        assert_eq!(c.wait_timeout_ns, 5_000_000);
        assert_eq!(c.probe_lids, (1, 16));
        assert!(c.verify);
        assert!(c.anatomy);
        c.apply("size", "4096").unwrap();
        assert_eq!(c.sizes, Sizes::Single(4096));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn srq_pingpong_keys_take_the_examples_defaults_and_rules() {
        let mut c = PingPongConfig::new(Transport::Ud, Role::Client);
        c.apply("test", "srq_pingpong").unwrap();
        assert!(c.srq.enabled);
        assert_eq!(c.transport, Transport::Rc);
        assert_eq!(c.sizes, Sizes::Single(SRQ_DEFAULT_SIZE));
        assert_eq!((c.srq.qps, c.srq.rx_depth), (16, 500));
        assert!(c.srq.moderation.as_slice().is_empty());
        assert_eq!(c.validate(), Ok(()));
        c.apply("qps", "4").unwrap();
        c.apply("rx_depth", "8").unwrap();
        c.apply("size", "64").unwrap();
        c.apply("completion", "event").unwrap();
        c.apply("cq_moderation", "1/0, 4/16,0x10/64").unwrap();
        assert_eq!(
            c.srq.moderation.as_slice(),
            &[
                verbs::CqModeration {
                    cq_count: 1,
                    cq_period: 0
                },
                verbs::CqModeration {
                    cq_count: 4,
                    cq_period: 16
                },
                verbs::CqModeration {
                    cq_count: 16,
                    cq_period: 64
                },
            ]
        );
        assert_eq!(c.validate(), Ok(()));
        // Each rule, broken one at a time.
        let broken = |k: &str, v: &str| {
            let mut d = c;
            d.apply(k, v).unwrap();
            d.validate()
        };
        for (k, v, why) in [
            ("transport", "UD", "RC only"),
            ("size", "4", "size=4 is outside 8..=8388608"),
            ("size", "all", "one size"),
            ("rx_depth", "3", "one receive per QP"),
            ("completion", "poll", "completion=event"),
            ("test", "send_lat", "applies to test=srq_pingpong"),
        ] {
            match broken(k, v) {
                Err(rule) => assert!(rule.to_string().contains(why), "{k}={v}: {rule}"),
                other => panic!("{k}={v}: {other:?}"),
            }
        }
        // No isr mode, no modes list (without moderation, which needs events anyway).
        let mut plain = PingPongConfig::new(Transport::Rc, Role::Client);
        plain.apply("test", "srq_pingpong").unwrap();
        for (k, v) in [("completion", "isr"), ("modes", "poll,event")] {
            let mut d = plain;
            d.apply(k, v).unwrap();
            match d.validate() {
                Err(Rule::OutOfRange(w)) => assert!(w.contains("completion=poll|event"), "{w}"),
                other => panic!("{k}={v}: {other:?}"),
            }
        }
        // A later `test` that is not the SRQ ping-pong turns it off again.
        let mut d = c;
        d.apply("cq_moderation", "0/0").unwrap();
        d.apply("test", "write_lat").unwrap();
        assert!(!d.srq.enabled);
    }

    #[test]
    fn bad_values_are_typed_errors() {
        let mut c = PingPongConfig::default();
        let before = c;
        assert_eq!(c.apply("nope", "1"), Err(ConfigError::UnknownKey));
        for (k, v) in [
            ("transport", "RD"),
            ("test", "bw"),
            ("size", "0"),
            ("size", "1"),
            ("size", "8388609"),
            ("size", "x"),
            ("iters", "4"),
            ("iters", "-1"),
            ("inline", "1025"),
            ("completion", "spin"),
            ("mtu", "3000"),
            ("ib_port", "0"),
            ("role", "both"),
            ("peer_lid", "0"),
            ("peer_lid", "0xC000"),
            ("peer_lid", "70000"),
            ("timeout_ms", "0"),
            ("probe_lids", "5-1"),
            ("probe_lids", "1-5000"),
            ("rdv_qpn", "1"),
            ("peer_rdv_qpn", "0"),
            ("peer_rdv_qpn", "1"),
            ("peer_rdv_qpn", "0x1000000"),
            ("peer_rdv_qpn", "0x"),
            ("peer_rdv_qpn", "qp"),
            ("peer_rdv_qpn", ""),
            ("verify", "maybe"),
            ("anatomy", "yes"),
            ("test", "read"),
            ("atomic", "ADD"),
            ("outstanding_reads", "0"),
        ] {
            assert!(
                matches!(c.apply(k, v), Err(ConfigError::BadValue(_))),
                "{k}={v}"
            );
        }
        assert_eq!(c, before, "refused values change nothing");
    }

    #[test]
    fn write_lat_runs_over_rc_and_uc_only() {
        let mut c = PingPongConfig::new(Transport::Ud, Role::Client);
        assert_eq!(c.test, Test::SendLat, "send_lat is the default");
        c.apply("test", "write_lat").unwrap();
        assert_eq!(c.test, Test::WriteLat);
        assert_eq!(c.validate(), Err(Rule::WriteLatOverUd));
        c.apply("transport", "rc").unwrap();
        assert_eq!(c.transport, Transport::Rc);
        assert!(c.validate().is_ok());
        assert_eq!(c.inline(), 220, "perftest's write inline default");
        c.apply("transport", "UC").unwrap();
        assert!(c.validate().is_ok());
        assert_eq!(c.inline(), 220);
        c.sizes = Sizes::All;
        let v: Vec<u32> = c.size_list(Mtu::Mtu2048).collect();
        assert_eq!(
            (v.first(), v.last(), v.len()),
            (Some(&2), Some(&(8 << 20)), 23)
        );
        c.apply("completion", "event").unwrap();
        assert_eq!(c.validate(), Err(Rule::WriteLatWithEvents));
        c.apply("completion", "poll").unwrap();
        c.apply("inline", "0").unwrap();
        assert_eq!(c.inline(), 0);
        // send_lat over RC is perftest's default combination.
        c.apply("test", "send_lat").unwrap();
        c.apply("transport", "RC").unwrap();
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.inline(), 0, "-I 0 still in force");
        c.apply("test", "atomic_lat").unwrap();
        assert_eq!(c.sizes, Sizes::Single(8));
        assert_eq!(c.validate(), Ok(()));
        c.apply("atomic", "cmp_and_swap").unwrap();
        assert_eq!(c.atomic, AtomicOp::CmpAndSwap);
        c.apply("outstanding_reads", "16").unwrap();
        assert_eq!(c.outstanding_reads, 16);
        assert!(c.apply("outstanding_reads", "17").is_err());
        c.apply("size", "all").unwrap();
        assert_eq!(c.validate(), Err(Rule::AtomicSize { size: 0 }));
        assert_eq!(Test::WriteLat.name(), "write_lat");
        assert_eq!(Transport::Rc.name(), "RC");
    }

    #[test]
    fn well_known_rdv_qpn_is_the_top_of_the_block_above_the_reserved_qpns() {
        for (reserved, qpn) in [(64, 0x7F), (128, 0xFF), (256, 0x1FF), (1 << 15, 0xFFFF)] {
            let q = well_known_rdv_qpn(reserved);
            assert_eq!(q, qpn);
            // Inside the smallest QP table a driver can have (reserved + 1 rounded up).
            assert!(q >= reserved && q < (reserved + 1).next_power_of_two());
        }
        assert_eq!(
            well_known_rdv_qpn(0),
            3,
            "nonsense input still gives a QPN above QP1"
        );
        assert_eq!(well_known_rdv_qpn(u32::MAX), 0xFF_FFFF);
    }

    #[test]
    fn peer_rdv_qpn_defaults_to_rdv_qpn_and_is_a_client_key() {
        let mut c = PingPongConfig::new(Transport::Ud, Role::Client);
        assert_eq!(c.peer_rdv_qpn, None);
        assert_eq!(c.rdv_qpn, None);
        assert_eq!(c.local_rdv_qpn(64), 0x7F, "derived from the device");
        assert_eq!(c.local_rdv_qpn(128), 0xFF);
        assert_eq!(c.hello_qpn(256), 0x1FF);
        c.apply("rdv_qpn", "0x70").unwrap();
        assert_eq!(
            c.local_rdv_qpn(128),
            0x70,
            "the key overrides the device's rule"
        );
        assert_eq!(c.hello_qpn(128), 0x70, "follows rdv_qpn when not given");
        c.apply("peer_rdv_qpn", "0x208").unwrap();
        assert_eq!(c.peer_rdv_qpn, Some(0x208));
        assert_eq!(c.hello_qpn(128), 0x208);
        assert_eq!(c.local_rdv_qpn(128), 0x70, "the local QPN is unchanged");
        c.apply("peer_rdv_qpn", "16777215").unwrap();
        assert_eq!(c.hello_qpn(64), 0xFF_FFFF);
        assert!(c.validate().is_ok());
        c.apply("role", "server").unwrap();
        assert_eq!(c.validate(), Err(Rule::PeerRdvQpnOnServer));
    }

    #[test]
    fn perftest_defaults_and_mtu_rule() {
        let ud = PingPongConfig::new(Transport::Ud, Role::Client);
        let uc = PingPongConfig::new(Transport::Uc, Role::Client);
        assert_eq!(ud.inline(), 188);
        assert_eq!(uc.inline(), 236);
        assert_eq!(ud.iterations, 1000);
        assert_eq!(ud.rx_depth(), 1000);
        let mut big = ud;
        big.iterations = 20_000;
        assert_eq!(big.rx_depth(), 16_000);
        // ConnectX-3 rule: an active 4096 MTU is used as 2048 unless configured.
        assert_eq!(ud.effective_mtu(Mtu::Mtu4096), Mtu::Mtu2048);
        assert_eq!(ud.effective_mtu(Mtu::Mtu1024), Mtu::Mtu1024);
        let mut m = ud;
        m.mtu = Some(Mtu::Mtu4096);
        assert_eq!(m.effective_mtu(Mtu::Mtu4096), Mtu::Mtu4096);
        assert_eq!(m.effective_mtu(Mtu::Mtu2048), Mtu::Mtu2048);
    }

    #[test]
    fn sweeps_cover_perftests_sizes() {
        let mut ud = PingPongConfig::new(Transport::Ud, Role::Client);
        ud.sizes = Sizes::All;
        let v: Vec<u32> = ud.size_list(Mtu::Mtu2048).collect();
        assert_eq!(v.len(), 11);
        assert_eq!(v.first(), Some(&2));
        assert_eq!(v.last(), Some(&2048));
        let mut uc = ud;
        uc.transport = Transport::Uc;
        let v: Vec<u32> = uc.size_list(Mtu::Mtu2048).collect();
        assert_eq!(v.len(), 23);
        assert_eq!(v.last(), Some(&(8 << 20)));
        assert!(v.windows(2).all(|w| w[1] == 2 * w[0]));
        uc.sizes = Sizes::Single(100);
        assert_eq!(uc.size_list(Mtu::Mtu256).collect::<Vec<_>>(), vec![100]);
        ud.sizes = Sizes::Single(4096);
        ud.mtu = Some(Mtu::Mtu2048);
        assert!(ud.validate().is_err());
    }
}
