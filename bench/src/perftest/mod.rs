//! One run of a perftest test on one node: the latency tests' ping-pongs (`ib_send_lat`,
//! perftest's `run_iter_lat_send` in src/perftest_resources.c, over UD or UC; `ib_write_lat`
//! over RC or UC; `ib_read_lat`, `ib_atomic_lat`) and the bandwidth tests' streams
//! ([`bandwidth`]), with the in-band rendezvous of docs/rendezvous.md and bounded waits
//! everywhere.
//!
//! The engine is a state machine advanced by [`PingPong::step`], so two nodes can share one
//! thread (host tests step a client and a server alternately); [`run_sweep`] simply steps one
//! node until it finishes. The measured path (stamp, post, poll) allocates nothing.
//!
//! Per iteration, as perftest: the client stamps the TSC, posts one signaled SEND, polls its
//! send CQ until that completion arrives, then polls the receive CQ for the answer; the server
//! polls the receive CQ, stamps, posts its answer and polls its send CQ. Both sides stamp just
//! before each post, and the deltas of consecutive stamps are the samples (one round trip
//! each, reported halved).
//!
//! Loss: the first two payload bytes carry a tag (sequence number mod 1024, size index, retry
//! flag). A client whose wait for an answer runs out ([`loss`]: what the size's round trips
//! take, within `wait_timeout_ns`) counts a loss and sends the same iteration again; a server
//! answering a duplicate counts a loss and a retry. Samples whose interval contains such a
//! wait are excluded from the statistics (and the count of samples used says so). Past
//! `max_losses_per_size` losses, or earlier when its loss rate shows it cannot finish, the
//! size is aborted, reported, and the sweep goes on.
//!
//! `test=write_lat` (perftest's `run_iter_lat_write`) runs the same rendezvous, barriers and
//! reports over RC or UC with RDMA WRITEs instead: no receives, each side polls the last byte
//! of its own receive region for the peer's iteration tag. A wait that runs out makes both
//! sides re-post their last WRITE (idempotent); see docs/benchmarks.md for the loss rules.

use alloc::vec::Vec;
use core::fmt::Write;
use core::ptr;

use verbs::{
    AccessFlags, AhAttr, DataPath, Device, Mtu, Payload, PortState, QpAttr, QpCap, QpInitAttr,
    QpState, QpType, RecvWr, SendFlags, SendWr, Sge, UdDest, VerbsPath, WcStatus, WorkCompletion,
    WrOpcode,
};

use crate::config::{
    AtomicOp, Completion, ConfigError, PingPongConfig, Role, Rule, SizeIter, Test, Transport,
    ATOMIC_SIZE, DATA_QKEY,
};
use crate::env::BenchEnv;
use crate::line::{LatencyLine, Record};
use crate::rendezvous::{Channel, Kind, Msg, PlanRun, Refusal, FLAG_RESET};
use crate::report;
use crate::resources::Resources;
use crate::stats::{perftest_latency, LatencyStats, RttFactor, StatsError};
use crate::step::{run_to_end, Steps};

pub use anatomy::{
    write_anatomy_row, AnatomyContext, AnatomyRow, MedAvg, PeerPart, ANATOMY_HEADER, ANATOMY_TITLE,
};

mod anatomy;
mod atomic_lat;
mod bandwidth;
mod exchange;
mod isr;
mod loss;
mod read_lat;
mod send_lat;
mod sizes;
mod write_lat;

/// Bytes of the UD GRH slot at the head of every UD receive.
const GRH: usize = 40;
/// Cache line the UD payload is aligned to (perftest: `cache_line_size - 40` offset).
const CACHE_LINE: usize = 64;
/// A client gives up waiting for the server's Done answer after this many tries (and two of
/// the server's longest waits).
const DONE_TRIES: u32 = 8;
/// The client's first Hello gap: a Hello is repeated after `min(timeout_ms, 10 ms)`.
const HELLO_GAP_FIRST_NS: u64 = 10_000_000;
/// The client's Hello gap doubles after each Hello up to `min(timeout_ms, 160 ms)`.
const HELLO_GAP_MAX_NS: u64 = 160_000_000;

/// The gap before the client's next Hello, after one sent following `gap_ns` (0: the
/// first Hello): `min(wait, 10 ms)`, then doubling up to `min(wait, 160 ms)`, so a server
/// that starts listening soon is found at once and a late one costs a few Hellos, not one
/// every 10 ms.
fn next_hello_gap(gap_ns: u64, wait_ns: u64) -> u64 {
    let first = wait_ns.min(HELLO_GAP_FIRST_NS);
    if gap_ns == 0 {
        first.max(1)
    } else {
        gap_ns
            .saturating_mul(2)
            .min(wait_ns.min(HELLO_GAP_MAX_NS))
            .max(first)
            .max(1)
    }
}

/// The longest gap between two sends of a rendezvous request (a Barrier, Done) while it
/// is not answered (shorter when `timeout_ms` is).
const RDV_GAP_NS: u64 = 100_000_000;

/// Empty polls between two reads of the clock while waiting.
const CLOCK_EVERY: u32 = 64;

/// A node's data endpoint as exchanged by the rendezvous.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Endpoint {
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
    /// write_lat: bus address of the region the peer writes to; read_lat: of the region the
    /// peer reads; atomic_lat: of the word the peer's atomics act on (0 in send_lat).
    pub addr: u64,
    /// The rkey of that region (0 in send_lat).
    pub rkey: u32,
}

/// What a finished sweep did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SweepSummary {
    pub local: Endpoint,
    pub peer: Endpoint,
    /// Path MTU in bytes agreed with the peer.
    pub mtu: u32,
    /// Sizes reported (including aborted ones).
    pub sizes: u32,
    pub aborted: u32,
    /// Losses and retries over every size: the sums of the result lines' `lost`/`retries`.
    pub lost: u64,
    pub retries: u64,
    /// Server: answers to the last request of an already reported size sent again between
    /// sizes (the client asked again: that answer was lost). The client's result line for
    /// that size counts the loss; the server's line was printed before it knew, so these are
    /// kept apart from `lost` and `retries`.
    pub late_repeats: u64,
    /// The last size's results.
    pub last: Option<SizeResultSummary>,
    /// The client got the server's answer to its final Done (always true on the server).
    pub clean_finish: bool,
    /// isr mode: times the completion handler ran in the interrupt path, and the data
    /// posts (replies, the client's next request) it made there; the others were made by
    /// the measuring loop (the first request of a size, retries after a timeout).
    pub isr_calls: u64,
    pub isr_posts: u64,
}

/// The last size reported, as kept in the summary.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SizeResultSummary {
    pub bytes: u32,
    pub samples: usize,
}

/// Why a run failed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BenchError {
    Config(ConfigError),
    /// A verb failed; `during` names the step.
    Verbs {
        during: &'static str,
        err: verbs::Error,
    },
    /// The port is not ACTIVE (no subnet manager, cable).
    PortNotActive {
        port: u8,
        state: PortState,
    },
    /// The platform had no DMA memory (or heap) for the buffers.
    NoMemory(&'static str),
    /// No peer answered the rendezvous within `peer_timeout_ns`.
    PeerNotFound,
    /// The peer fell silent for longer than `peer_timeout_ns` during the run.
    PeerLost,
    /// The peer runs a different test (transport, role, iterations or sizes).
    PeerMismatch(&'static str),
    /// A completion that cannot be recovered from (flush, protection error ...).
    Completion {
        during: &'static str,
        status: WcStatus,
    },
    /// A send completion did not arrive within the wait timeout.
    SendTimeout,
    /// `verify`: a received byte differs from what the peer sent.
    Payload {
        bytes: u32,
        offset: u32,
    },
    /// `verify`: an atomic fetched another value than its iteration number (atomic_lat).
    AtomicResult {
        iteration: u32,
    },
    Stats(StatsError),
    /// The bandwidth figures could not be computed.
    Bandwidth(crate::bw::BwError),
    /// The console writer failed.
    Output,
    /// The server refused the run (client side; the server prints the same reason).
    Refused(Refusal),
    /// An argument out of range (the SRQ ping-pong's configuration).
    BadArgument(&'static str),
    /// A completion the run cannot have caused (unknown QP or work request).
    Unexpected(&'static str),
    /// `completion=isr`, and this environment cannot run a completion handler in the
    /// device's interrupt path (the kernel: the HCA is not on MSI-X).
    IsrUnavailable,
}

impl core::fmt::Display for BenchError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BenchError::Config(e) => write!(f, "configuration: {e}"),
            BenchError::Verbs { during, err } => write!(f, "{during}: {err}"),
            BenchError::Refused(why) => write!(f, "the server refused the run: {why}"),
            BenchError::IsrUnavailable => write!(
                f,
                "completion=isr needs a completion handler in the interrupt path, which this node cannot run (the kernel: the HCA is not on MSI-X)"
            ),
            other => write!(f, "{other:?}"),
        }
    }
}

impl From<ConfigError> for BenchError {
    fn from(e: ConfigError) -> Self {
        BenchError::Config(e)
    }
}

impl From<core::fmt::Error> for BenchError {
    fn from(_: core::fmt::Error) -> Self {
        BenchError::Output
    }
}

fn vb(during: &'static str) -> impl FnOnce(verbs::Error) -> BenchError {
    move |err| BenchError::Verbs { during, err }
}

/// How much one [`PingPong::step`] may do before returning.
#[derive(Clone, Copy, Debug)]
pub struct StepBudget {
    /// CQ polls (busy-poll mode) before returning `Running`.
    pub polls: u32,
    /// Longest a single `get_cq_event` may block (event mode).
    pub event_wait_ns: u64,
}

impl StepBudget {
    /// For a node that owns the CPU: spin long, block for a whole wait in event mode.
    pub fn exclusive(cfg: &PingPongConfig) -> Self {
        StepBudget {
            polls: 1 << 16,
            event_wait_ns: cfg.wait_timeout_ns,
        }
    }
    /// For nodes sharing one thread (host tests): a few polls, never block.
    pub fn interleaved() -> Self {
        StepBudget {
            polls: 4,
            event_wait_ns: 0,
        }
    }
}

/// Whether a node has more to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Running,
    Finished,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Rendezvous,
    SizeStart,
    Barrier,
    Measure,
    Finish,
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum It {
    Send,
    WaitSend,
    WaitRecv,
}

/// A bounded wait in progress: empty polls so far and when the clock first saw it.
#[derive(Clone, Copy, Debug, Default)]
struct Wait {
    idle: u32,
    since: Option<u64>,
}

impl Wait {
    fn reset(&mut self) {
        *self = Wait::default();
    }
    /// Event mode: the clock starts before the first (blocking) wait for an event, so the
    /// time spent inside `get_cq_event` counts toward the timeout.
    fn start<E: BenchEnv>(&mut self, env: &E) {
        if self.since.is_none() {
            self.since = Some(env.now_ns());
        }
    }
    /// Count an empty poll; every `CLOCK_EVERY` (or every one when `every`), read the clock
    /// and say whether `timeout` has passed.
    fn expired<E: BenchEnv>(&mut self, env: &E, timeout: u64, every: bool) -> bool {
        self.idle = self.idle.wrapping_add(1);
        if !every && !self.idle.is_multiple_of(CLOCK_EVERY) {
            return false;
        }
        let now = env.now_ns();
        let since = *self.since.get_or_insert(now);
        now.saturating_sub(since) > timeout
    }
}

/// A Hello a listening server heard: the message and the sender's LID and rendezvous QPN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heard {
    pub msg: Msg,
    pub lid: u16,
    pub qpn: u32,
}

/// How a run starts beyond its configuration ([`PingPong::start_with`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct RunStart {
    /// Client: the run's place in its plan (sent as a version-3 Hello); `None` for a client
    /// that runs no plan.
    pub plan: Option<PlanRun>,
    /// Server: only report the first Hello ([`PingPong::heard`]) instead of answering it.
    pub listen: bool,
    /// Server: follow this Hello (heard by a listener): answer it at once and ignore every
    /// other session.
    pub follow: Option<Heard>,
}

/// The data side of one node: everything made for it (in `objs`, released by its close)
/// and the handles under their roles.
struct Res<D: Device> {
    objs: Resources<D>,
    pd: Option<D::Pd>,
    scq: Option<D::Cq>,
    rcq: Option<D::Cq>,
    qp: Option<D::Qp>,
}

/// Buffer layout: `[send | pad | recv (GRH slot + payload)]`.
#[derive(Clone, Copy, Debug)]
struct Layout {
    recv: usize,
    total: usize,
}

impl Layout {
    fn new(max_size: usize, t: Transport) -> Layout {
        let send_len = max_size.div_ceil(CACHE_LINE).max(1) * CACHE_LINE;
        // UD: the receive starts `CACHE_LINE - GRH` bytes into a line, so the payload after
        // the 40-byte GRH slot begins on the next line (perftest's placement).
        let recv = match t {
            Transport::Ud => send_len + CACHE_LINE - GRH,
            Transport::Uc | Transport::Rc => send_len,
        };
        Layout {
            recv,
            total: (recv + GRH + max_size).div_ceil(CACHE_LINE) * CACHE_LINE,
        }
    }
}

/// The 2-byte tag at the head of every payload: sequence number mod 1024, size index mod 32,
/// and whether this send is a retry.
fn tag(seq: u32, index: u32, retry: bool) -> [u8; 2] {
    [
        seq as u8,
        (((index & 0x1F) << 3) as u8) | ((retry as u8) << 2) | ((seq >> 8) & 3) as u8,
    ]
}

fn untag(b: [u8; 2]) -> (u32, u32, bool) {
    let seq = u32::from(b[0]) | (u32::from(b[1] & 3) << 8);
    (seq, u32::from(b[1] >> 3), b[1] & 4 != 0)
}

/// The payload byte at `offset` (≥ 2) of every message of size index `index`.
fn pattern(offset: usize, index: u32) -> u8 {
    (offset as u8).wrapping_mul(31) ^ (index as u8).wrapping_mul(0x5B) ^ 0xA5
}

/// Removes the intervals marked in `bad` (interval `i` runs from stamp `i` to `i + 1`) by
/// re-accumulating the clean ones from the first stamp, in place; returns how many stamps
/// are left. `perftest_latency` over `stamps[..kept]` then sees exactly the clean deltas.
pub fn drop_bad_intervals(stamps: &mut [u64], bad: &[bool]) -> usize {
    if stamps.is_empty() {
        return 0;
    }
    let mut kept = 1;
    let mut prev = stamps[0];
    for i in 0..stamps.len() - 1 {
        let next = stamps[i + 1];
        let d = next.saturating_sub(prev);
        prev = next;
        if !bad.get(i).copied().unwrap_or(false) {
            stamps[kept] = stamps[kept - 1].wrapping_add(d);
            kept += 1;
        }
    }
    kept
}

/// SplitMix64's finaliser: spreads every input bit over the output (PSNs and session nonces
/// from the TSC and the LID, so two nodes started at the same instant still differ).
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One node of a ping-pong run.
pub struct PingPong<D: Device> {
    cfg: PingPongConfig,
    res: Res<D>,
    lay: Layout,
    phase: Phase,
    tsc_mhz: f64,
    mtu: Mtu,
    local: Endpoint,
    peer: Option<Endpoint>,
    session: u32,
    peer_session: u32,
    /// Where rendezvous messages go: the peer's rendezvous QPN (`peer_rdv_qpn`, else the
    /// well-known `rdv_qpn`) until the peer's first message of the session (Hello for the
    /// server, HelloAck for the client) names its source QPN.
    peer_rdv_qpn: u32,
    /// This node's rendezvous QPN (`rdv_qpn`, else derived from the device's reserved QPNs).
    rdv_qpn: u32,
    lkey: u32,
    inline_max: u32,
    // Rendezvous.
    /// The rendezvous channel (this node's rendezvous QP).
    rdv: Option<Channel<D>>,
    /// The peer's LID once the exchange has found it (client: until then it probes).
    rdv_lid: Option<u16>,
    rdv_start: u64,
    next_send_ns: u64,
    /// Client: the gap after the last Hello ([`next_hello_gap`]; 0 before the first).
    hello_gap_ns: u64,
    tries: u32,
    /// Client: when it first sent Done.
    done_from: u64,
    /// Server: when it last answered the client's Done (it lingers to answer a repeat).
    answered_done: Option<u64>,
    last_heard_ns: u64,
    // Sizes.
    sizes: SizeIter,
    size: u32,
    index: u32,
    /// Server: jump to this size index (the client skipped ahead after aborting).
    skip_to: Option<u32>,
    total_sizes: u32,
    header_done: bool,
    rq_outstanding: u32,
    // Measurement of the current size.
    it: It,
    seq: u32,
    attempt: u32,
    wait: Wait,
    scq_armed: bool,
    rcq_armed: bool,
    stamps: Vec<u64>,
    bad: Vec<bool>,
    scratch: Vec<u64>,
    lost: u32,
    retries: u32,
    recv_count: u32,
    /// The size ended aborted: stale receives may be left; reset the data QP before the next.
    needs_reset: bool,
    /// The size index for which the data QP was last reset.
    reset_for: Option<u32>,
    /// Data posts (sends, READs, atomics) so far: the isr handler counts its own.
    data_posts: u64,
    /// isr mode: the first error the handler met (it cannot return one), for the loop.
    isr_error: Option<BenchError>,
    /// The environment's interrupt count when the current size's measurement began.
    irq_at_start: Option<u64>,
    /// Interrupts during the current size's measurement, once it ended.
    irq_during: Option<u64>,
    /// isr mode: the size index whose measurement the loop has started (posted, armed).
    isr_started: Option<u32>,
    /// A size ended in this step (aborted or not): its report is written at the end of
    /// the step, where the environment's interrupt count can be read.
    pending_report: Option<bool>,
    /// The round trips this run's loss waits follow ([`loss`]).
    loss: loss::LossWait,
    /// The UD destination of every data send (the peer's data QP), set by the exchange.
    ud_dest: Option<UdDest<D::Ah>>,
    /// Server: the size and index whose last answer may still be asked for again.
    linger: Option<(u32, u32)>,
    summary: SweepSummary,
    /// The run's place in a plan (client: its own; following server: the client's).
    plan: Option<PlanRun>,
    /// Server: a listener (reports the first Hello, answers nothing).
    listen: bool,
    /// Listener: the Hello heard.
    heard: Option<Heard>,
    /// Following server: the session it answers (others are ignored).
    follow: Option<u32>,
    /// Following server: the Hello to answer at the first step.
    pending: Option<Heard>,
    /// Following server in its final phase: the client's next run said hello (its Done
    /// never arrived), so this run is over without the handshake.
    client_moved_on: bool,
    /// Where the time goes (`anatomy=on`), [`anatomy`].
    anat: anatomy::Anatomy,
    /// The bandwidth tests' stream and count of the size in progress.
    bw: bandwidth::BwState<D>,
}

/// Runs a whole sweep on one node: rendezvous, every size, final handshake, teardown.
/// Prints perftest's banner and table plus one `ibkern-result` line per size to `out`.
pub fn run_sweep<D: Device, E: BenchEnv, W: Write>(
    dev: &mut D,
    env: &mut E,
    cfg: &PingPongConfig,
    out: &mut W,
) -> Result<SweepSummary, BenchError> {
    let pp = PingPong::start(dev, env, cfg)?;
    run_to_end(pp, dev, env, out, StepBudget::exclusive(cfg))
}

impl<D: Device> Steps<D> for PingPong<D> {
    type Summary = SweepSummary;

    fn step<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        budget: StepBudget,
    ) -> Result<Status, BenchError> {
        PingPong::step(self, dev, env, out, budget)
    }

    fn summary(&self) -> SweepSummary {
        self.summary
    }

    fn close<E: BenchEnv>(self, dev: &mut D, env: &mut E) {
        PingPong::close(self, dev, env)
    }
}

impl<D: Device> PingPong<D> {
    /// Checks the configuration, brings up the rendezvous and data QPs and allocates every
    /// buffer the run needs (nothing is allocated afterwards).
    pub fn start<E: BenchEnv>(
        dev: &mut D,
        env: &mut E,
        cfg: &PingPongConfig,
    ) -> Result<Self, BenchError> {
        Self::start_with(dev, env, cfg, RunStart::default())
    }

    /// [`Self::start`] for a run of a plan, a listening server or a following one.
    pub fn start_with<E: BenchEnv>(
        dev: &mut D,
        env: &mut E,
        cfg: &PingPongConfig,
        how: RunStart,
    ) -> Result<Self, BenchError> {
        cfg.validate().map_err(ConfigError::Invalid)?;
        if cfg.completion == Completion::Isr && !env.isr_capable() {
            return Err(BenchError::IsrUnavailable);
        }
        let port = dev.query_port(cfg.port).map_err(vb("query_port"))?;
        let reserved_qps = dev.query_device().reserved_qps;
        if port.state != PortState::Active {
            return Err(BenchError::PortNotActive {
                port: cfg.port,
                state: port.state,
            });
        }
        let port_mtu = port.active_mtu.unwrap_or(Mtu::Mtu2048);
        let mtu = cfg.effective_mtu(port_mtu);
        // The rules that need the device: the message against this port's path MTU and
        // the inline limit against what the device's QPs carry (both numbers named).
        cfg.validate_on_device(mtu, dev.query_device().max_inline)
            .map_err(ConfigError::Invalid)?;
        let mut max_size = match cfg.transport {
            Transport::Ud => mtu.bytes(),
            Transport::Uc | Transport::Rc => cfg.size_list(mtu).max().unwrap_or(2),
        } as usize;
        if cfg.test == Test::AtomicBw {
            // The responder's words the atomics cycle over, and the requester's result slots
            // (one per message in flight).
            let slots = 8 * cfg.bw.tx_depth_for(cfg.iterations) as usize;
            max_size = max_size
                .max(crate::bw::ATOMIC_REMOTE_BYTES as usize)
                .max(slots);
        }
        let lay = Layout::new(max_size, cfg.transport);
        let n = cfg.iterations as usize;
        let mut stamps = Vec::new();
        let mut bad = Vec::new();
        let mut scratch = Vec::new();
        if stamps.try_reserve_exact(n).is_err()
            || bad.try_reserve_exact(n).is_err()
            || scratch.try_reserve_exact(n).is_err()
        {
            return Err(BenchError::NoMemory("sample buffers"));
        }
        stamps.resize(n, 0);
        bad.resize(n, false);
        scratch.resize(n, 0);
        let mix = splitmix(env.cycles() ^ splitmix(u64::from(port.lid)));
        let mut pp = PingPong {
            cfg: *cfg,
            res: Res {
                objs: Resources::new(),
                pd: None,
                scq: None,
                rcq: None,
                qp: None,
            },
            lay,
            phase: Phase::Rendezvous,
            tsc_mhz: env.tsc_mhz(),
            mtu,
            local: Endpoint {
                lid: port.lid,
                qpn: 0,
                psn: (mix >> 40) as u32 & 0xFF_FFFF,
                addr: 0,
                rkey: 0,
            },
            peer: None,
            session: ((mix >> 8) as u32) | 1,
            peer_session: 0,
            peer_rdv_qpn: cfg.hello_qpn(reserved_qps),
            rdv_qpn: cfg.local_rdv_qpn(reserved_qps),
            lkey: 0,
            inline_max: 0,
            rdv: None,
            rdv_lid: None,
            rdv_start: env.now_ns(),
            next_send_ns: 0,
            hello_gap_ns: 0,
            tries: 0,
            done_from: 0,
            answered_done: None,
            last_heard_ns: env.now_ns(),
            sizes: cfg.size_list(mtu),
            size: 0,
            index: 0,
            skip_to: None,
            total_sizes: 0,
            header_done: false,
            rq_outstanding: 0,
            it: It::Send,
            seq: 0,
            attempt: 0,
            wait: Wait::default(),
            scq_armed: false,
            rcq_armed: false,
            stamps,
            bad,
            scratch,
            lost: 0,
            retries: 0,
            recv_count: 0,
            needs_reset: false,
            reset_for: None,
            data_posts: 0,
            isr_error: None,
            irq_at_start: None,
            irq_during: None,
            pending_report: None,
            isr_started: None,
            loss: loss::LossWait::default(),
            linger: None,
            ud_dest: None,
            summary: SweepSummary::default(),
            plan: how.plan.or(how.follow.and_then(|h| h.msg.plan)),
            listen: how.listen,
            heard: None,
            follow: how.follow.map(|h| h.msg.session),
            pending: how.follow,
            client_moved_on: false,
            anat: anatomy::Anatomy::default(),
            bw: bandwidth::BwState::new(),
        };
        if cfg.anatomy
            && cfg.role == Role::Client
            && !pp.anat.enable(cfg.iterations, cfg.size_list(mtu).count())
        {
            return Err(BenchError::NoMemory("anatomy buffers"));
        }
        if let Err(e) = pp.build(dev, env) {
            pp.close(dev, env);
            return Err(e);
        }
        Ok(pp)
    }

    fn build<E: BenchEnv>(&mut self, dev: &mut D, env: &mut E) -> Result<(), BenchError> {
        let cfg = self.cfg;
        // The rendezvous QP at the well-known number, ready to talk at once.
        self.rdv = Some(Channel::open(dev, env, cfg.port, self.rdv_qpn)?);
        let bus = self
            .res
            .objs
            .alloc_buffer(env, self.lay.total, "benchmark buffer")?
            .bus();
        let pd = self.res.objs.alloc_pd(dev)?;
        self.res.pd = Some(pd);
        // The RDMA tests open one region to the peer, whose address and rkey go to it in the
        // exchange: write_lat's receive region (the peer writes it), read_lat's send region
        // (the peer reads it), atomic_lat's word at the head of the receive region.
        let access = AccessFlags::LOCAL_WRITE | cfg.test.remote_access();
        let mr = self.res.objs.reg_buffer(dev, pd, access)?;
        self.lkey = dev.mr_lkey(mr);
        let exposed = match cfg.test {
            Test::SendLat | Test::SendBw => None,
            Test::WriteLat | Test::AtomicLat | Test::WriteBw | Test::AtomicBw => {
                Some(self.lay.recv)
            }
            Test::ReadLat | Test::ReadBw => Some(0),
        };
        if let Some(off) = exposed {
            self.local.addr = bus + off as u64;
            self.local.rkey = dev.mr_rkey(mr);
        }
        // Only the SEND tests post receives (perftest's RDMA tests have no receive queue
        // traffic); a bandwidth sender keeps up to its tx depth outstanding.
        let rx = match cfg.test {
            Test::SendLat => cfg.rx_depth(),
            Test::SendBw => cfg.bw_rx_depth(),
            _ => 1,
        };
        let sq = if cfg.test.is_bw() {
            cfg.bw.tx_depth_for(cfg.iterations)
        } else {
            16
        };
        // The latency tests keep their 16-entry send CQ; a bandwidth sender may have a
        // completion per message of its tx depth waiting.
        let scq_entries = if cfg.test.is_bw() { sq + 1 } else { 16 };
        let objs = &mut self.res.objs;
        let scq = objs.create_cq(dev, scq_entries, "create_cq (send)")?;
        let rcq = objs.create_cq(dev, rx + 1, "create_cq (recv)")?;
        (self.res.scq, self.res.rcq) = (Some(scq), Some(rcq));

        // The data QP, to INIT now; RTR/RTS once the peer is known.
        let qp_type = match cfg.transport {
            Transport::Ud => QpType::Ud,
            Transport::Uc => QpType::Uc,
            Transport::Rc => QpType::Rc,
        };
        let attr = QpInitAttr {
            pd,
            send_cq: scq,
            recv_cq: rcq,
            qp_type,
            cap: QpCap {
                max_send_wr: sq,
                max_recv_wr: rx,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: cfg.inline(),
            },
            sq_sig_all: false,
        };
        let qp = self.res.objs.create_qp(dev, &attr, "create data QP")?;
        self.res.qp = Some(qp);
        self.local.qpn = dev.qp_num(qp);
        let granted = dev.qp_cap(qp).max_inline_data;
        if granted < cfg.inline() {
            return Err(ConfigError::Invalid(Rule::InlineAboveDevice {
                inline: cfg.inline(),
                limit: granted,
            })
            .into());
        }
        self.inline_max = cfg.inline();
        dev.modify_qp(qp, &self.data_qp_init())
            .map_err(vb("data QP to INIT"))?;
        Ok(())
    }

    /// The data QP's INIT attributes: the port, the UD Q_Key, and what the peer may do to
    /// this node's memory over RC/UC (perftest's `ctx_modify_qp_to_init`).
    fn data_qp_init(&self) -> QpAttr {
        let mut init = QpAttr::new(QpState::Init);
        init.port_num = self.cfg.port;
        init.qkey = DATA_QKEY;
        if self.cfg.transport != Transport::Ud {
            init.access = AccessFlags::REMOTE_WRITE | self.cfg.test.remote_access();
        }
        init
    }

    /// Releases every object and buffer (also after a failure); waits, bounded, for
    /// rendezvous sends still in flight.
    pub fn close<E: BenchEnv>(mut self, dev: &mut D, env: &mut E) {
        if let Some(ch) = self.rdv.take() {
            ch.close(dev, env);
        }
        self.res.objs.close(dev);
    }

    /// The sweep's totals so far.
    pub fn summary(&self) -> SweepSummary {
        self.summary
    }

    /// This node's data endpoint (LID, QPN, PSN).
    pub fn local(&self) -> Endpoint {
        self.local
    }

    /// The peer's endpoint once the rendezvous found it.
    pub fn peer(&self) -> Option<Endpoint> {
        self.peer
    }

    /// Listener: the Hello it heard (it has then finished).
    pub fn heard(&self) -> Option<Heard> {
        self.heard
    }

    /// When this run started (its rendezvous began), in the environment's nanoseconds.
    pub fn started_ns(&self) -> u64 {
        self.rdv_start
    }

    /// Listener: go on listening after [`Self::heard`] was dealt with, for at most
    /// `timeout_ns` more.
    pub fn listen_again<E: BenchEnv>(&mut self, env: &E, timeout_ns: u64) {
        self.heard = None;
        self.phase = Phase::Rendezvous;
        self.rdv_start = env.now_ns();
        self.cfg.peer_timeout_ns = timeout_ns;
    }

    /// The path MTU in force (agreed with the peer once the rendezvous is done).
    pub fn mtu(&self) -> Mtu {
        self.mtu
    }

    /// Advances the run by a bounded amount of work.
    pub fn step<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        budget: StepBudget,
    ) -> Result<Status, BenchError> {
        match self.phase {
            Phase::SizeStart => self.irq_at_start = None,
            Phase::Measure if self.irq_at_start.is_none() => {
                self.irq_at_start = env.interrupts();
            }
            _ => {}
        }
        let isr = self.cfg.completion == Completion::Isr
            && !(self.cfg.role == Role::Server && self.cfg.test.one_sided());
        let r = match self.phase {
            Phase::Rendezvous => self.rendezvous(dev, env, out),
            Phase::SizeStart => self.size_start(dev, env, out),
            Phase::Barrier => self.barrier(dev, env, out),
            Phase::Measure if isr => self.measure_isr(dev, env, out, budget),
            Phase::Measure => match self.cfg.test {
                Test::SendLat => self.measure(dev, env, out, budget),
                Test::WriteLat => self.measure_write(dev, env, out, budget),
                Test::ReadLat | Test::AtomicLat => self.measure_one_sided(dev, env, out, budget),
                Test::SendBw | Test::WriteBw | Test::ReadBw | Test::AtomicBw => {
                    self.measure_bw(dev, env, out, budget)
                }
            },
            Phase::Finish => self.finish(dev, env, out),
            Phase::Done => Ok(()),
        };
        if let Some(aborted) = self.pending_report.take() {
            // The interrupts the device raised while this size was measured.
            self.irq_during = match (self.irq_at_start.take(), env.interrupts()) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a)),
                _ => None,
            };
            let reported = self.report(out, aborted);
            self.irq_during = None;
            reported?;
        }
        r?;
        Ok(if self.phase == Phase::Done {
            Status::Finished
        } else {
            Status::Running
        })
    }

    fn base(&self) -> *mut u8 {
        self.res
            .objs
            .buffer()
            .map_or(ptr::null_mut(), |b| b.as_ptr())
    }

    fn bus(&self) -> u64 {
        self.res.objs.buffer().map_or(0, |b| b.bus())
    }

    /// Offset of the received payload (after the GRH slot for UD).
    fn payload_off(&self) -> usize {
        self.lay.recv + self.cfg.transport.grh_bytes() as usize
    }

    fn read_byte(&self, off: usize) -> u8 {
        debug_assert!(off < self.lay.total);
        // SAFETY: `off` is inside the DMA buffer this node owns for the whole run; the device
        // may write it at any time, hence the volatile read.
        unsafe { ptr::read_volatile(self.base().add(off)) }
    }

    fn write_byte(&mut self, off: usize, v: u8) {
        debug_assert!(off < self.lay.total);
        // SAFETY: as `read_byte`; only the CPU writes the send region, and the device reads it
        // only while a send that covers it is outstanding, which never overlaps this write.
        unsafe { ptr::write_volatile(self.base().add(off), v) }
    }

    /// The data QP through the per-call verbs, as a [`DataPath`] (outside the polling loop).
    fn verbs_path<'d>(&self, dev: &'d mut D) -> Result<VerbsPath<'d, D>, BenchError> {
        let r = &self.res;
        let (Some(qp), Some(scq), Some(rcq)) = (r.qp, r.scq, r.rcq) else {
            return Err(BenchError::NoMemory("data QP"));
        };
        Ok(VerbsPath::new(dev, qp, scq, rcq, self.ud_dest))
    }

    /// Polls the send CQ for the answer just posted outside the measured loop (bounded).
    fn wait_send_blocking(&mut self, dev: &mut D) -> Result<(), BenchError> {
        let Some(scq) = self.res.scq else {
            return Ok(());
        };
        let mut wc = [WorkCompletion::default(); 1];
        for _ in 0..1_000_000 {
            if dev.poll_cq(scq, &mut wc).map_err(vb("poll_cq (send)"))? == 1 {
                return self.check_send(wc[0].status);
            }
        }
        Err(BenchError::SendTimeout)
    }

    /// How long one wait for an answer of the current size lasts before it counts as a
    /// loss: what the size's round trips take, within `timeout_ms` (+ 20 ns per byte).
    fn loss_wait(&self) -> u64 {
        let timeout = self.cfg.wait_timeout_ns;
        self.loss
            .wait_ns(timeout, timeout + u64::from(self.size) * 20)
    }

    /// How long send_lat waits for a receive before [`Self::on_timeout`]: the client's wait
    /// is a loss wait; a server counts nothing when its wait runs out, it only looks at the
    /// rendezvous QP for a client that gave the size up or finished, so it looks at least
    /// every [`Self::rdv_gap`].
    fn recv_wait(&self) -> u64 {
        match self.cfg.role {
            Role::Client => self.loss_wait(),
            Role::Server => self.loss_wait().min(self.rdv_gap()),
        }
    }

    /// TSC cycles as nanoseconds.
    fn cycles_ns(&self, cycles: u64) -> u64 {
        (cycles as f64 * 1000.0 / self.tsc_mhz) as u64
    }

    /// The size's typical round trip so far, from the stamps of its iterations (off the
    /// measured path: when a wait has run out). A client's stamps run to the iteration in
    /// flight, a server's to its last answer.
    fn measure_round_trip(&mut self) {
        let stamped = match self.cfg.role {
            Role::Client => self.seq as usize + 1,
            Role::Server => self.seq as usize,
        }
        .min(self.stamps.len());
        let cycles = loss::median_round_trip(&self.stamps[..stamped], &self.bad, &mut self.scratch);
        self.loss.typical_round_trip(self.cycles_ns(cycles));
    }

    /// How often a rendezvous request (a Barrier, Done, Count) is repeated until answered:
    /// a lost one costs no more than a lost data message of a small size.
    fn rdv_gap(&self) -> u64 {
        self.cfg.wait_timeout_ns.min(RDV_GAP_NS)
    }

    fn check_send(&self, status: WcStatus) -> Result<(), BenchError> {
        if status != WcStatus::Success {
            return Err(BenchError::Completion {
                during: "send",
                status,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_gaps_double_from_10_ms_to_160_ms_within_the_wait() {
        let gaps = |wait: u64, n: usize| {
            let mut g = 0;
            (0..n)
                .map(|_| {
                    g = next_hello_gap(g, wait);
                    g / 1_000_000
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(gaps(1_000_000_000, 7), vec![10, 20, 40, 80, 160, 160, 160]);
        // A shorter wait bounds the gap: 50 ms.
        assert_eq!(gaps(50_000_000, 5), vec![10, 20, 40, 50, 50]);
        // A wait under 10 ms keeps the gap at the wait.
        assert_eq!(gaps(4_000_000, 3), vec![4, 4, 4]);
        // A peer timeout of 10 s: what was 1000 Hellos is now 4 + ceil(9850 / 160) = 66.
        let (mut g, mut t, mut hellos) = (0, 0, 0);
        while t < 10_000_000_000u64 {
            g = next_hello_gap(g, 1_000_000_000);
            t += g;
            hellos += 1;
        }
        assert_eq!(hellos, 66);
    }

    #[test]
    fn intervals_holding_a_loss_wait_leave_the_statistics() {
        // Deltas 10, 12, 1000 (a retry wait), 11, 13, 9, 5000 (another), 10 cycles.
        let mut t = vec![100u64, 110, 122, 1122, 1133, 1146, 1155, 6155, 6165];
        let mut bad = vec![false; 9];
        bad[2] = true;
        bad[6] = true;
        let kept = drop_bad_intervals(&mut t, &bad);
        assert_eq!(kept, 7);
        let deltas: Vec<u64> = t[..kept].windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(deltas, vec![10, 12, 11, 13, 9, 10]);
        // At 1 cycle/us, half RTT: sorted 9 10 10 11 12 13, two largest dropped -> 9 10 10 11:
        // min 4.5, median (10 + 10) / 2 / 2 = 5, avg 40 / 4 / 2 = 5, t_max = 12 / 2 = 6.
        let mut scratch = [0u64; 8];
        let s = perftest_latency(&t[..kept], &mut scratch, 1.0, RttFactor::Half).unwrap();
        assert_eq!(s.samples, 6);
        assert_eq!(s.t_min, 4.5);
        assert_eq!(s.t_typical, 5.0);
        assert_eq!(s.t_avg, 5.0);
        assert_eq!(s.t_max, 6.0);
        assert_eq!(s.true_max, 6.5);
        // Nothing marked: nothing changes.
        let mut u = vec![1u64, 5, 9];
        assert_eq!(drop_bad_intervals(&mut u, &[false; 3]), 3);
        assert_eq!(u, vec![1, 5, 9]);
        assert_eq!(drop_bad_intervals(&mut [], &[]), 0);
    }

    #[test]
    fn tag_round_trips() {
        for seq in [0u32, 1, 255, 256, 1023, 1024, 99_999] {
            for index in [0u32, 5, 22, 31] {
                for retry in [false, true] {
                    let (s, i, r) = untag(tag(seq, index, retry));
                    assert_eq!((s, i, r), (seq & 0x3FF, index, retry));
                }
            }
        }
    }

    #[test]
    fn ud_payload_lands_cache_line_aligned() {
        for max in [2usize, 100, 2048, 4096] {
            let l = Layout::new(max, Transport::Ud);
            assert_eq!((l.recv + GRH) % CACHE_LINE, 0, "max {max}");
            assert_eq!(l.recv % CACHE_LINE, CACHE_LINE - GRH);
            assert!(l.recv >= max, "send region first");
            assert!(l.total >= l.recv + GRH + max);
            let u = Layout::new(max, Transport::Uc);
            assert_eq!(u.recv % CACHE_LINE, 0);
        }
    }
}
