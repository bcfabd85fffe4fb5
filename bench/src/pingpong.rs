//! The `ib_send_lat` ping-pong (perftest's `run_iter_lat_send`, src/perftest_resources.c) over UD or UC, and `ib_write_lat`
//! over RC or UC, with the in-band
//! rendezvous of docs/rendezvous.md and bounded waits everywhere.
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
//! flag). A client that waits longer than `wait_timeout_ns` for an answer counts a loss and
//! sends the same iteration again; a server answering a duplicate counts a loss and a retry.
//! Samples whose interval contains such a wait are excluded from the statistics (and the
//! count of samples used says so). Past `max_losses_per_size` losses the size is aborted,
//! reported, and the sweep goes on.
//!
//! `test=write_lat` (perftest's `run_iter_lat_write`) runs the same rendezvous, barriers and reports
//! over RC or UC with RDMA WRITEs instead: no receives, each
//! side polls the last byte of its own receive region for the peer's iteration tag. A wait
//! that runs out makes both sides re-post their last WRITE (idempotent); see
//! docs/benchmarks.md for the loss rules.

use alloc::vec::Vec;
use core::fmt::Write;
use core::ptr;

use verbs::{
    AccessFlags, AhAttr, DataPath, Device, Mtu, Payload, PortState, QpAttr, QpCap, QpInitAttr,
    QpState, QpType, RecvWr, SendFlags, SendWr, Sge, UdDest, VerbsPath, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};

use crate::config::{
    Completion, ConfigError, PingPongConfig, Role, Rule, SizeIter, Test, Transport, DATA_QKEY,
    RDV_QKEY,
};
use crate::env::BenchEnv;
use crate::line::{write_result_line, ResultLine};
use crate::rendezvous::{Kind, Msg, FLAG_RESET, MSG_LEN};
use crate::report;
use crate::stats::{perftest_latency, LatencyStats, RttFactor, StatsError};
use verbs::DmaRegion;

/// Receive slots of the rendezvous QP.
const RDV_SLOTS: u32 = 32;
/// Bytes per rendezvous receive slot (40-byte GRH + 64-byte message, padded).
const RDV_SLOT: usize = 128;
/// Send work requests the rendezvous QP may have outstanding.
const RDV_SQ: u32 = 64;
/// Marks rendezvous send completions (receive completions carry the slot index).
const RDV_SEND_WRID: u64 = 1 << 63;
/// Bytes of the UD GRH slot at the head of every UD receive.
const GRH: usize = 40;
/// Cache line the UD payload is aligned to (perftest: `cache_line_size - 40` offset).
const CACHE_LINE: usize = 64;
/// A client gives up waiting for the server's Done answer after this many tries.
const DONE_TRIES: u32 = 8;
/// Empty polls between two reads of the clock while waiting.
const CLOCK_EVERY: u32 = 64;

/// A node's data endpoint as exchanged by the rendezvous.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Endpoint {
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
    /// write_lat: bus address of the region the peer writes to (0 in send_lat).
    pub addr: u64,
    /// write_lat: the rkey of that region (0 in send_lat).
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
    Stats(StatsError),
    /// The console writer failed.
    Output,
}

impl core::fmt::Display for BenchError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BenchError::Config(e) => write!(f, "configuration: {e}"),
            BenchError::Verbs { during, err } => write!(f, "{during}: {err}"),
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

/// The verbs objects of one node.
struct Res<D: Device> {
    buf: Option<DmaRegion>,
    pd: Option<D::Pd>,
    mr: Option<D::Mr>,
    scq: Option<D::Cq>,
    rcq: Option<D::Cq>,
    qp: Option<D::Qp>,
    rdv_cq: Option<D::Cq>,
    rdv_qp: Option<D::Qp>,
    data_ah: Option<D::Ah>,
    rdv_ah: Option<D::Ah>,
    probe_ahs: Vec<(u16, D::Ah)>,
}

/// Buffer layout: `[send | pad | recv (GRH slot + payload) | rendezvous slots]`.
#[derive(Clone, Copy, Debug)]
struct Layout {
    recv: usize,
    rdv: usize,
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
        let rdv = (recv + GRH + max_size).div_ceil(CACHE_LINE) * CACHE_LINE;
        Layout {
            recv,
            rdv,
            total: rdv + RDV_SLOTS as usize * RDV_SLOT,
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
    rdv_inflight: u32,
    rdv_start: u64,
    next_send_ns: u64,
    tries: u32,
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
    /// Server: consecutive receive waits that timed out with no word from the client.
    silent: u32,
    /// The UD destination of every data send (the peer's data QP), set by the exchange.
    ud_dest: Option<UdDest<D::Ah>>,
    /// Server: the size and index whose last answer may still be asked for again.
    linger: Option<(u32, u32)>,
    summary: SweepSummary,
}

/// Runs a whole sweep on one node: rendezvous, every size, final handshake, teardown.
/// Prints perftest's banner and table plus one `ibkern-result` line per size to `out`.
pub fn run_sweep<D: Device, E: BenchEnv, W: Write>(
    dev: &mut D,
    env: &mut E,
    cfg: &PingPongConfig,
    out: &mut W,
) -> Result<SweepSummary, BenchError> {
    let mut pp = PingPong::start(dev, env, cfg)?;
    let budget = StepBudget::exclusive(cfg);
    let r = loop {
        match pp.step(dev, env, out, budget) {
            Ok(Status::Finished) => break Ok(pp.summary()),
            Ok(Status::Running) => env.relax(),
            Err(e) => break Err(e),
        }
    };
    pp.close(dev, env);
    r
}

impl<D: Device> PingPong<D> {
    /// Checks the configuration, brings up the rendezvous and data QPs and allocates every
    /// buffer the run needs (nothing is allocated afterwards).
    pub fn start<E: BenchEnv>(
        dev: &mut D,
        env: &mut E,
        cfg: &PingPongConfig,
    ) -> Result<Self, BenchError> {
        cfg.validate().map_err(ConfigError::Invalid)?;
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
        let max_size = match cfg.transport {
            Transport::Ud => mtu.bytes(),
            Transport::Uc | Transport::Rc => cfg.size_list(mtu).max().unwrap_or(2),
        } as usize;
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
                buf: None,
                pd: None,
                mr: None,
                scq: None,
                rcq: None,
                qp: None,
                rdv_cq: None,
                rdv_qp: None,
                data_ah: None,
                rdv_ah: None,
                probe_ahs: Vec::new(),
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
            rdv_inflight: 0,
            rdv_start: env.now_ns(),
            next_send_ns: 0,
            tries: 0,
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
            silent: 0,
            linger: None,
            ud_dest: None,
            summary: SweepSummary::default(),
        };
        if let Err(e) = pp.build(dev, env) {
            pp.close(dev, env);
            return Err(e);
        }
        Ok(pp)
    }

    fn build<E: BenchEnv>(&mut self, dev: &mut D, env: &mut E) -> Result<(), BenchError> {
        let cfg = self.cfg;
        let buf = env
            .alloc_dma(self.lay.total, 4096)
            .ok_or(BenchError::NoMemory("benchmark buffer"))?;
        let bus = buf.bus();
        self.res.buf = Some(buf);
        let pd = dev.alloc_pd().map_err(vb("alloc_pd"))?;
        self.res.pd = Some(pd);
        // write_lat: the peer writes into the receive region, so the region is remotely
        // writable and its address and rkey go to the peer in the exchange.
        let write = cfg.test == Test::WriteLat;
        let access = if write {
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE
        } else {
            AccessFlags::LOCAL_WRITE
        };
        let mr = dev
            .reg_mr(pd, bus, self.lay.total as u64, access)
            .map_err(vb("reg_mr"))?;
        self.res.mr = Some(mr);
        self.lkey = dev.mr_lkey(mr);
        if write {
            self.local.addr = bus + self.lay.recv as u64;
            self.local.rkey = dev.mr_rkey(mr);
        }
        // write_lat posts no receives (perftest's write_lat has no receive queue traffic).
        let rx = if write { 1 } else { cfg.rx_depth() };
        self.res.scq = Some(dev.create_cq(16).map_err(vb("create_cq (send)"))?);
        self.res.rcq = Some(dev.create_cq(rx + 1).map_err(vb("create_cq (recv)"))?);
        let rdv_cq = dev
            .create_cq(RDV_SLOTS + RDV_SQ + 1)
            .map_err(vb("create_cq (rendezvous)"))?;
        self.res.rdv_cq = Some(rdv_cq);

        // The rendezvous QP at the well-known number, ready to talk at once.
        let rdv_qp = dev
            .create_qp_at(
                &QpInitAttr {
                    pd,
                    send_cq: rdv_cq,
                    recv_cq: rdv_cq,
                    qp_type: QpType::Ud,
                    cap: QpCap {
                        max_send_wr: RDV_SQ,
                        max_recv_wr: RDV_SLOTS,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: MSG_LEN as u32,
                    },
                    sq_sig_all: false,
                },
                self.rdv_qpn,
            )
            .map_err(vb("create rendezvous QP at its well-known QPN"))?;
        self.res.rdv_qp = Some(rdv_qp);
        let mut init = QpAttr::new(QpState::Init);
        init.port_num = cfg.port;
        init.qkey = RDV_QKEY;
        dev.modify_qp(rdv_qp, &init)
            .map_err(vb("rendezvous QP to INIT"))?;
        dev.modify_qp(rdv_qp, &QpAttr::new(QpState::Rtr))
            .map_err(vb("rendezvous QP to RTR"))?;
        let mut rts = QpAttr::new(QpState::Rts);
        rts.sq_psn = 0;
        dev.modify_qp(rdv_qp, &rts)
            .map_err(vb("rendezvous QP to RTS"))?;
        for slot in 0..RDV_SLOTS {
            self.post_rdv_recv(dev, slot)?;
        }

        // The data QP, to INIT now; RTR/RTS once the peer is known.
        let qp_type = match cfg.transport {
            Transport::Ud => QpType::Ud,
            Transport::Uc => QpType::Uc,
            Transport::Rc => QpType::Rc,
        };
        let qp = dev
            .create_qp(&QpInitAttr {
                pd,
                send_cq: self.res.scq.unwrap_or(rdv_cq),
                recv_cq: self.res.rcq.unwrap_or(rdv_cq),
                qp_type,
                cap: QpCap {
                    max_send_wr: 16,
                    max_recv_wr: rx,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: cfg.inline(),
                },
                sq_sig_all: false,
            })
            .map_err(vb("create data QP"))?;
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
        let mut init = QpAttr::new(QpState::Init);
        init.port_num = cfg.port;
        init.qkey = DATA_QKEY;
        if cfg.transport != Transport::Ud {
            init.access = AccessFlags::REMOTE_WRITE;
        }
        dev.modify_qp(qp, &init).map_err(vb("data QP to INIT"))?;
        Ok(())
    }

    /// Releases every object and buffer (also after a failure); waits, bounded, for
    /// rendezvous sends still in flight.
    pub fn close<E: BenchEnv>(mut self, dev: &mut D, env: &mut E) {
        if let Some(cq) = self.res.rdv_cq {
            let start = env.now_ns();
            let mut wc = [WorkCompletion::default(); 8];
            while self.rdv_inflight > 0 && env.now_ns().saturating_sub(start) < 10_000_000 {
                match dev.poll_cq(cq, &mut wc) {
                    Ok(0) => env.relax(),
                    Ok(n) => {
                        let sends = wc[..n]
                            .iter()
                            .filter(|w| w.wr_id & RDV_SEND_WRID != 0)
                            .count();
                        self.rdv_inflight = self.rdv_inflight.saturating_sub(sends as u32);
                    }
                    Err(_) => break,
                }
            }
        }
        let r = &mut self.res;
        // Teardown errors cannot be acted upon here; every object is still released.
        for qp in [r.qp.take(), r.rdv_qp.take()].into_iter().flatten() {
            let _ = dev.destroy_qp(qp);
        }
        for ah in [r.data_ah.take(), r.rdv_ah.take()].into_iter().flatten() {
            let _ = dev.destroy_ah(ah);
        }
        for (_, ah) in r.probe_ahs.drain(..) {
            let _ = dev.destroy_ah(ah);
        }
        for cq in [r.scq.take(), r.rcq.take(), r.rdv_cq.take()]
            .into_iter()
            .flatten()
        {
            let _ = dev.destroy_cq(cq);
        }
        if let Some(mr) = r.mr.take() {
            let _ = dev.dereg_mr(mr);
        }
        if let Some(pd) = r.pd.take() {
            let _ = dev.dealloc_pd(pd);
        }
        // Last, after the MR that covered it: dropping the region frees it.
        r.buf = None;
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
            Phase::Rendezvous => self.rendezvous(dev, env, out)?,
            Phase::SizeStart => self.size_start(dev, env, out)?,
            Phase::Barrier => self.barrier(dev, env, out)?,
            Phase::Measure => self.measure(dev, env, out, budget)?,
            Phase::Finish => self.finish(dev, env)?,
            Phase::Done => {}
        }
        Ok(if self.phase == Phase::Done {
            Status::Finished
        } else {
            Status::Running
        })
    }

    // ---- buffers -------------------------------------------------------------------------

    fn base(&self) -> *mut u8 {
        self.res
            .buf
            .as_ref()
            .map_or(ptr::null_mut(), |b| b.as_ptr())
    }

    fn bus(&self) -> u64 {
        self.res.buf.as_ref().map_or(0, |b| b.bus())
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

    // ---- rendezvous ----------------------------------------------------------------------

    fn post_rdv_recv(&mut self, dev: &mut D, slot: u32) -> Result<(), BenchError> {
        let (Some(qp), bus) = (self.res.rdv_qp, self.bus()) else {
            return Ok(());
        };
        let sge = [Sge {
            addr: bus + (self.lay.rdv + slot as usize * RDV_SLOT) as u64,
            length: (GRH + MSG_LEN) as u32,
            lkey: self.lkey,
        }];
        dev.post_recv(
            qp,
            &RecvWr {
                wr_id: u64::from(slot),
                sg_list: &sge,
            },
        )
        .map_err(vb("post rendezvous receive"))
    }

    fn msg(&self, kind: Kind, index: u32) -> Msg {
        Msg {
            kind,
            role: self.cfg.role,
            transport: self.cfg.transport,
            session: self.session,
            peer_session: self.peer_session,
            lid: self.local.lid,
            mtu: self.mtu as u8,
            qpn: self.local.qpn,
            psn: self.local.psn,
            iterations: self.cfg.iterations,
            size: Msg::size_field(self.cfg.sizes),
            index,
            flags: if self.reset_for == Some(index)
                && matches!(kind, Kind::Barrier | Kind::BarrierAck)
            {
                FLAG_RESET
            } else {
                0
            },
            test: self.cfg.test,
            addr: self.local.addr,
            rkey: self.local.rkey,
        }
    }

    /// Sends one rendezvous message (inline) through `ah`; skipped when the send queue is
    /// full (the protocol re-sends anyway).
    fn send_rdv(&mut self, dev: &mut D, ah: D::Ah, m: &Msg) -> Result<(), BenchError> {
        let Some(qp) = self.res.rdv_qp else {
            return Ok(());
        };
        if self.rdv_inflight >= RDV_SQ - 1 {
            return Ok(());
        }
        let bytes = m.encode();
        let wr = SendWr {
            wr_id: RDV_SEND_WRID | u64::from(m.kind as u8),
            opcode: WrOpcode::Send,
            payload: Payload::Inline(&bytes),
            flags: SendFlags::SIGNALED,
            ud: Some(UdDest {
                ah,
                remote_qpn: self.peer_rdv_qpn,
                remote_qkey: RDV_QKEY,
            }),
        };
        match dev.post_send(qp, &wr) {
            Ok(()) => {
                self.rdv_inflight += 1;
                Ok(())
            }
            Err(verbs::Error::QueueFull) => Ok(()),
            Err(e) => Err(BenchError::Verbs {
                during: "post rendezvous send",
                err: e,
            }),
        }
    }

    fn ah_to(&mut self, dev: &mut D, lid: u16) -> Result<D::Ah, BenchError> {
        let pd = self
            .res
            .pd
            .ok_or(BenchError::NoMemory("protection domain"))?;
        dev.create_ah(
            pd,
            &AhAttr {
                dlid: lid,
                port: self.cfg.port,
                ..AhAttr::default()
            },
        )
        .map_err(vb("create_ah"))
    }

    /// Takes every rendezvous completion waiting; returns the messages received (at most
    /// `RDV_SLOTS`), re-posting their slots.
    /// Each message comes with the sender's LID and QPN.
    fn poll_rdv(
        &mut self,
        dev: &mut D,
        got: &mut [(Msg, u16, u32); 8],
    ) -> Result<usize, BenchError> {
        let Some(cq) = self.res.rdv_cq else {
            return Ok(0);
        };
        let mut wc = [WorkCompletion::default(); 8];
        let n = dev.poll_cq(cq, &mut wc).map_err(vb("poll rendezvous CQ"))?;
        let mut k = 0;
        for w in &wc[..n] {
            if w.wr_id & RDV_SEND_WRID != 0 {
                self.rdv_inflight = self.rdv_inflight.saturating_sub(1);
                continue;
            }
            let slot = (w.wr_id as u32).min(RDV_SLOTS - 1);
            if w.status == WcStatus::Success && w.opcode == WcOpcode::Recv {
                let off = self.lay.rdv + slot as usize * RDV_SLOT + GRH;
                let mut b = [0u8; MSG_LEN];
                for (i, x) in b.iter_mut().enumerate() {
                    *x = self.read_byte(off + i);
                }
                // Anything that is not our protocol (or from ourselves) is ignored.
                if let Ok(m) = Msg::decode(&b) {
                    if m.session != self.session {
                        got[k] = (m, w.slid, w.src_qp);
                        k += 1;
                    }
                }
            } else if w.status == WcStatus::WrFlushErr {
                return Err(BenchError::Completion {
                    during: "rendezvous receive",
                    status: w.status,
                });
            }
            self.post_rdv_recv(dev, slot)?;
        }
        Ok(k)
    }

    fn check_compatible(&self, m: &Msg) -> Result<(), BenchError> {
        if m.test != self.cfg.test {
            return Err(BenchError::PeerMismatch("test"));
        }
        if m.transport != self.cfg.transport {
            return Err(BenchError::PeerMismatch("transport"));
        }
        if m.role == self.cfg.role {
            return Err(BenchError::PeerMismatch("both nodes have the same role"));
        }
        if m.iterations != self.cfg.iterations {
            return Err(BenchError::PeerMismatch("iterations"));
        }
        if m.size != Msg::size_field(self.cfg.sizes) {
            return Err(BenchError::PeerMismatch("sizes"));
        }
        if Mtu::from_raw(m.mtu).is_none() {
            return Err(BenchError::PeerMismatch("MTU"));
        }
        Ok(())
    }

    /// Moves the data QP to RTR and RTS toward the peer (perftest's `ctx_connect`).
    fn connect(&mut self, dev: &mut D, peer: Endpoint) -> Result<(), BenchError> {
        let qp = self.res.qp.ok_or(BenchError::NoMemory("data QP"))?;
        self.ready_data_qp(dev, qp, peer)?;
        if self.cfg.transport == Transport::Ud {
            let ah = self.ah_to(dev, peer.lid)?;
            self.res.data_ah = Some(ah);
            self.ud_dest = Some(UdDest {
                ah,
                remote_qpn: peer.qpn,
                remote_qkey: DATA_QKEY,
            });
        }
        self.peer = Some(peer);
        self.summary.peer = peer;
        self.summary.local = self.local;
        self.summary.mtu = self.mtu.bytes();
        self.sizes = self.cfg.size_list(self.mtu);
        self.total_sizes = self.cfg.size_list(self.mtu).count() as u32;
        Ok(())
    }

    fn ready_data_qp(&self, dev: &mut D, qp: D::Qp, peer: Endpoint) -> Result<(), BenchError> {
        let mut rtr = QpAttr::new(QpState::Rtr);
        if self.cfg.transport != Transport::Ud {
            rtr.path_mtu = self.mtu;
            rtr.dest_qp_num = peer.qpn;
            rtr.rq_psn = peer.psn;
            rtr.ah = AhAttr {
                dlid: peer.lid,
                port: self.cfg.port,
                ..AhAttr::default()
            };
        }
        if self.cfg.transport == Transport::Rc {
            // perftest's RC attributes for WRITE tests: no incoming READs/atomics, RNR
            // timer 12 (0.64 ms) — unused, as WRITE consumes no receive.
            rtr.max_dest_rd_atomic = 0;
            rtr.min_rnr_timer = 12;
        }
        dev.modify_qp(qp, &rtr).map_err(vb("data QP to RTR"))?;
        let mut rts = QpAttr::new(QpState::Rts);
        rts.sq_psn = self.local.psn;
        if self.cfg.transport == Transport::Rc {
            // perftest's defaults: ACK timeout 14 (4.096 µs × 2^14 ≈ 67 ms), 7 transport
            // retries, 7 RNR retries (infinite), no outstanding READs.
            rts.timeout = 14;
            rts.retry_cnt = 7;
            rts.rnr_retry = 7;
            rts.max_rd_atomic = 0;
        }
        dev.modify_qp(qp, &rts).map_err(vb("data QP to RTS"))?;
        Ok(())
    }

    fn rendezvous<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
    ) -> Result<(), BenchError> {
        let now = env.now_ns();
        if now.saturating_sub(self.rdv_start) > self.cfg.peer_timeout_ns {
            return Err(BenchError::PeerNotFound);
        }
        let mut got = [(self.msg(Kind::Hello, 0), 0u16, 0u32); 8];
        let n = self.poll_rdv(dev, &mut got)?;
        for &(m, slid, src_qp) in &got[..n] {
            match (self.cfg.role, m.kind) {
                (Role::Server, Kind::Hello) => {
                    self.check_compatible(&m)?;
                    let agreed = Mtu::from_raw(m.mtu).map_or(self.mtu, |p| p.min(self.mtu));
                    self.mtu = agreed;
                    self.peer_session = m.session;
                    self.peer_rdv_qpn = src_qp;
                    let ah = self.ah_to(dev, slid)?;
                    self.res.rdv_ah = Some(ah);
                    let peer = Endpoint {
                        lid: slid,
                        qpn: m.qpn,
                        psn: m.psn,
                        addr: m.addr,
                        rkey: m.rkey,
                    };
                    self.connect(dev, peer)?;
                    let ack = self.msg(Kind::HelloAck, 0);
                    self.send_rdv(dev, ah, &ack)?;
                    self.enter_sizes(env, out)?;
                    return Ok(());
                }
                (Role::Client, Kind::HelloAck) if m.peer_session == self.session => {
                    self.check_compatible(&m)?;
                    self.mtu = Mtu::from_raw(m.mtu).unwrap_or(self.mtu).min(self.mtu);
                    self.peer_session = m.session;
                    self.peer_rdv_qpn = src_qp;
                    let ah = match self.res.probe_ahs.iter().find(|(l, _)| *l == slid) {
                        Some(&(_, ah)) => ah,
                        None => match self.res.rdv_ah {
                            Some(ah) => ah,
                            None => self.ah_to(dev, slid)?,
                        },
                    };
                    self.res.rdv_ah = Some(ah);
                    self.res.probe_ahs.retain(|(l, _)| *l != slid);
                    let peer = Endpoint {
                        lid: slid,
                        qpn: m.qpn,
                        psn: m.psn,
                        addr: m.addr,
                        rkey: m.rkey,
                    };
                    self.connect(dev, peer)?;
                    self.enter_sizes(env, out)?;
                    return Ok(());
                }
                _ => {}
            }
        }
        if self.cfg.role == Role::Client && now >= self.next_send_ns {
            self.next_send_ns = now + self.cfg.wait_timeout_ns.min(10_000_000);
            let hello = self.msg(Kind::Hello, 0);
            match self.cfg.peer_lid {
                Some(lid) => {
                    let ah = match self.res.rdv_ah {
                        Some(ah) => ah,
                        None => {
                            let ah = self.ah_to(dev, lid)?;
                            self.res.rdv_ah = Some(ah);
                            ah
                        }
                    };
                    self.send_rdv(dev, ah, &hello)?;
                }
                None => {
                    let (a, b) = self.cfg.probe_lids;
                    for lid in a..=b {
                        if lid == self.local.lid {
                            continue;
                        }
                        let ah = match self.res.probe_ahs.iter().find(|(l, _)| *l == lid) {
                            Some(&(_, ah)) => ah,
                            None => {
                                let ah = self.ah_to(dev, lid)?;
                                self.res.probe_ahs.push((lid, ah));
                                ah
                            }
                        };
                        self.send_rdv(dev, ah, &hello)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn enter_sizes<E: BenchEnv, W: Write>(
        &mut self,
        env: &mut E,
        out: &mut W,
    ) -> Result<(), BenchError> {
        self.last_heard_ns = env.now_ns();
        self.print_banner(out)?;
        self.phase = Phase::SizeStart;
        Ok(())
    }

    fn print_banner<W: Write>(&mut self, out: &mut W) -> Result<(), BenchError> {
        let c = &self.cfg;
        let line = report::RESULT_LINE;
        writeln!(out, "{line}")?;
        writeln!(out, "                    {}", c.test.title())?;
        writeln!(out, " Dual-port       : OFF\t\tDevice         : ibkern0")?;
        writeln!(out, " Number of qps   : 1\t\tTransport type : IB")?;
        writeln!(
            out,
            " Connection type : {}\t\tUsing SRQ      : OFF",
            c.transport.name()
        )?;
        writeln!(
            out,
            " ibv_wr* API     : OFF\t\tUsing Enhanced Reorder      : OFF"
        )?;
        match c.role {
            Role::Client => writeln!(out, " TX depth        : 1")?,
            Role::Server => writeln!(out, " RX depth        : {}", c.rx_depth())?,
        }
        writeln!(out, " Mtu             : {}[B]", self.mtu.bytes())?;
        writeln!(out, " Link type       : IB")?;
        writeln!(out, " Max inline data : {}[B]", self.inline_max)?;
        writeln!(out, " rdma_cm QPs\t : OFF")?;
        writeln!(
            out,
            " Data ex. method : in-band UD (QPN {:#06x})",
            self.rdv_qpn
        )?;
        writeln!(out, " Completion      : {}", c.completion.name())?;
        writeln!(out, "{line}")?;
        let p = self.peer.unwrap_or_default();
        writeln!(
            out,
            " local address: LID {:#04x} QPN {:#06x} PSN {:#06x}",
            self.local.lid, self.local.qpn, self.local.psn
        )?;
        writeln!(
            out,
            " remote address: LID {:#04x} QPN {:#06x} PSN {:#06x}",
            p.lid, p.qpn, p.psn
        )?;
        Ok(())
    }

    /// Answers rendezvous traffic that can arrive at any time after the exchange: repeated
    /// Hellos (our answer was lost), barriers and the final Done. Returns a barrier index or
    /// Done seen from the client (server), or the barrier answer (client).
    fn service_rdv<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
    ) -> Result<Option<(Kind, u32, u8)>, BenchError> {
        let mut got = [(self.msg(Kind::Hello, 0), 0u16, 0u32); 8];
        let n = self.poll_rdv(dev, &mut got)?;
        let mut event: Option<(Kind, u32, u8)> = None;
        for &(m, _, _) in &got[..n] {
            if m.session != self.peer_session {
                continue;
            }
            self.last_heard_ns = env.now_ns();
            self.silent = 0;
            let keep = match (self.cfg.role, m.kind) {
                (Role::Server, Kind::Hello) => {
                    if let Some(ah) = self.res.rdv_ah {
                        let ack = self.msg(Kind::HelloAck, 0);
                        self.send_rdv(dev, ah, &ack)?;
                    }
                    false
                }
                // Done wins over barriers; of barriers, the newest.
                (Role::Server, Kind::Done) => true,
                (Role::Server, Kind::Barrier) => match event {
                    Some((Kind::Done, _, _)) => false,
                    Some((_, i, _)) => m.index > i,
                    None => true,
                },
                (Role::Client, Kind::BarrierAck) => m.index == self.index,
                (Role::Client, Kind::DoneAck) => true,
                _ => false,
            };
            if keep {
                event = Some((m.kind, m.index, m.flags));
            }
        }
        Ok(event)
    }

    fn rdv_reply(&mut self, dev: &mut D, kind: Kind, index: u32) -> Result<(), BenchError> {
        if let Some(ah) = self.res.rdv_ah {
            let m = self.msg(kind, index);
            self.send_rdv(dev, ah, &m)?;
        }
        Ok(())
    }

    // ---- per size ------------------------------------------------------------------------

    fn size_start<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
    ) -> Result<(), BenchError> {
        if !self.header_done {
            report::write_header(out)?;
            self.header_done = true;
        }
        env.progress(self.summary.sizes, self.total_sizes);
        let next = if self.size == 0 {
            self.sizes.next()
        } else {
            self.index += 1;
            self.sizes.next()
        };
        let Some(size) = next else {
            self.phase = Phase::Finish;
            self.next_send_ns = 0;
            self.tries = 0;
            // The peer's silence counts from here, as for a barrier: its data answers during
            // the last size are not rendezvous traffic, and a size may take longer than
            // `peer_timeout` (8 MiB over UC under emulation).
            self.last_heard_ns = env.now_ns();
            return Ok(());
        };
        self.size = size;
        if let Some(target) = self.skip_to {
            if self.index < target {
                // The client aborted and moved on: report this size as aborted too.
                self.lost = 0;
                self.retries = 0;
                self.report(out, true)?;
                return Ok(());
            }
            self.skip_to = None;
        }
        // Fill the send region once per size (off the clock): the pattern the peer checks.
        self.fill_pattern(size, self.index);
        if self.cfg.test == Test::WriteLat {
            // The byte polled for the peer's iteration tag starts this size cleared; the
            // peer writes nothing of this size before the barrier, and nothing of an
            // earlier (smaller) size reaches this offset.
            let last = self.lay.recv + size as usize - 1;
            self.write_byte(last, 0);
        }
        if self.needs_reset || self.rq_outstanding > 0 {
            // After an aborted size, receives sized for it may be left (a larger message
            // would overrun them) and UC PSNs have drifted: start this size from a clean QP;
            // the barrier tells the peer to do the same.
            self.reset_data_qp(dev)?;
        } else {
            self.post_size_recvs(dev)?;
        }
        self.seq = 0;
        self.attempt = 0;
        self.lost = 0;
        self.retries = 0;
        self.recv_count = 0;
        self.bad.iter_mut().for_each(|b| *b = false);
        self.stamps.iter_mut().for_each(|s| *s = 0);
        self.it = match self.cfg.role {
            Role::Client => It::Send,
            Role::Server => It::WaitRecv,
        };
        self.wait.reset();
        self.phase = Phase::Barrier;
        self.next_send_ns = 0;
        self.tries = 0;
        self.last_heard_ns = env.now_ns();
        Ok(())
    }

    /// perftest's `ctx_set_recv_wqes`: rx_depth receives for this size, all on one buffer.
    fn post_size_recvs(&mut self, dev: &mut D) -> Result<(), BenchError> {
        if self.cfg.test == Test::WriteLat {
            return Ok(());
        }
        let mut v = self.verbs_path(dev)?;
        for _ in 0..self.cfg.rx_depth() {
            self.post_data_recv(&mut v)?;
        }
        Ok(())
    }

    /// Data QP back to RESET (dropping every posted receive) and up again with the PSNs of
    /// the exchange; stale completions drained; this size's receives posted.
    fn reset_data_qp(&mut self, dev: &mut D) -> Result<(), BenchError> {
        let qp = self.res.qp.ok_or(BenchError::NoMemory("data QP"))?;
        let peer = self.peer.ok_or(BenchError::PeerLost)?;
        dev.modify_qp(qp, &QpAttr::new(QpState::Reset))
            .map_err(vb("data QP to RESET"))?;
        let mut wc = [WorkCompletion::default(); 8];
        for cq in [self.res.rcq, self.res.scq].into_iter().flatten() {
            for _ in 0..1_000_000 {
                if dev.poll_cq(cq, &mut wc).map_err(vb("drain CQ"))? == 0 {
                    break;
                }
            }
        }
        self.scq_armed = false;
        self.rcq_armed = false;
        let mut init = QpAttr::new(QpState::Init);
        init.port_num = self.cfg.port;
        init.qkey = DATA_QKEY;
        if self.cfg.transport != Transport::Ud {
            init.access = AccessFlags::REMOTE_WRITE;
        }
        dev.modify_qp(qp, &init).map_err(vb("data QP to INIT"))?;
        self.ready_data_qp(dev, qp, peer)?;
        self.rq_outstanding = 0;
        self.needs_reset = false;
        self.reset_for = Some(self.index);
        self.post_size_recvs(dev)
    }

    fn fill_pattern(&mut self, size: u32, index: u32) {
        for off in self.data_from()..size as usize {
            self.write_byte(off, pattern(off, index));
        }
    }

    fn post_data_recv<X: DataPath>(&mut self, path: &mut X) -> Result<(), BenchError> {
        let len = self.size + self.cfg.transport.grh_bytes();
        let sge = [Sge {
            addr: self.bus() + self.lay.recv as u64,
            length: len,
            lkey: self.lkey,
        }];
        path.post_recv(&RecvWr {
            wr_id: 0,
            sg_list: &sge,
        })
        .map_err(vb("post_recv"))?;
        self.rq_outstanding += 1;
        Ok(())
    }

    fn barrier<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
    ) -> Result<(), BenchError> {
        let now = env.now_ns();
        let ev = self.service_rdv(dev, env)?;
        match self.cfg.role {
            Role::Client => {
                if let Some((Kind::BarrierAck, i, flags)) = ev {
                    if i == self.index {
                        if flags & FLAG_RESET != 0 && self.reset_for != Some(i) {
                            self.reset_data_qp(dev)?;
                        }
                        self.begin_measure();
                        return Ok(());
                    }
                }
                if now >= self.next_send_ns {
                    self.next_send_ns = now + self.cfg.wait_timeout_ns;
                    self.rdv_reply(dev, Kind::Barrier, self.index)?;
                }
            }
            Role::Server => {
                if self.linger(dev)? {
                    self.last_heard_ns = now;
                }
                match ev {
                    Some((Kind::Barrier, i, flags)) if i == self.index => {
                        if flags & FLAG_RESET != 0 && self.reset_for != Some(i) {
                            self.reset_data_qp(dev)?;
                        }
                        self.rdv_reply(dev, Kind::BarrierAck, i)?;
                        self.begin_measure();
                        return Ok(());
                    }
                    Some((Kind::Barrier, i, _)) if i > self.index => {
                        // The client aborted sizes and moved on: so do we.
                        self.skip_to = Some(i);
                        return self.end_size(out, true);
                    }
                    Some((Kind::Done, _, _)) => {
                        self.rdv_reply(dev, Kind::DoneAck, 0)?;
                        self.phase = Phase::Done;
                        return Ok(());
                    }
                    _ => {}
                }
            }
        }
        if now.saturating_sub(self.last_heard_ns) > self.silence_bound() {
            return Err(BenchError::PeerLost);
        }
        Ok(())
    }

    /// How long the peer may stay silent before it is taken as lost: `peer_timeout_ms`, but
    /// on a server never less than a client can legitimately spend retrying one request
    /// (`loss_limit + 1` waits of the size in play, plus one for its next message) before
    /// it gives the size up and speaks again. Meanwhile its retries may be lost too, or, after the last size, find no
    /// receive posted (perftest posts exactly `iterations` per size), so the server hears
    /// nothing; it must not end the run under a client that is still going.
    fn silence_bound(&self) -> u64 {
        let size = match (self.cfg.role, self.phase, self.linger) {
            (Role::Server, Phase::Measure, _) => self.size,
            (Role::Server, _, Some((size, _))) => size,
            _ => return self.cfg.peer_timeout_ns,
        };
        let per_wait = self.cfg.wait_timeout_ns + u64::from(size) * 20;
        let retrying = u64::from(self.cfg.max_losses_per_size)
            .saturating_add(2)
            .saturating_mul(per_wait);
        self.cfg.peer_timeout_ns.max(retrying)
    }

    fn begin_measure(&mut self) {
        self.phase = Phase::Measure;
        self.wait.reset();
        self.linger = None;
    }

    /// Server between sizes: the client may ask again for the previous size's last answer
    /// (it was lost); answer it so the client can finish that size. Returns whether the
    /// client was heard (any data arrived): a client still asking is alive, however long
    /// its answers keep getting lost.
    fn linger(&mut self, dev: &mut D) -> Result<bool, BenchError> {
        let Some((size, index)) = self.linger else {
            return Ok(false);
        };
        let Some(rcq) = self.res.rcq else {
            return Ok(false);
        };
        let mut wc = [WorkCompletion::default(); 1];
        if dev.poll_cq(rcq, &mut wc).map_err(vb("poll_cq (recv)"))? == 0 {
            return Ok(false);
        }
        self.rq_outstanding = self.rq_outstanding.saturating_sub(1);
        let w = wc[0];
        let grh = self.cfg.transport.grh_bytes();
        if w.status == WcStatus::Success && w.byte_len == size + grh {
            let t = [
                self.read_byte(self.payload_off()),
                self.read_byte(self.payload_off() + 1),
            ];
            let (seq, idx, _) = untag(t);
            if idx == index & 0x1F && seq == (self.cfg.iterations - 1) & 0x3FF {
                self.summary.late_repeats += 1;
                let (saved_size, saved_index) = (self.size, self.index);
                self.fill_pattern(size, index);
                self.size = size;
                let r = self
                    .verbs_path(dev)
                    .and_then(|mut v| self.post_data_send(&mut v, t));
                let r = r.and_then(|()| self.wait_send_blocking(dev));
                self.size = saved_size;
                self.fill_pattern(saved_size, saved_index);
                r?;
            }
        }
        // The consumed receive belonged to the new size: replace it.
        let mut v = self.verbs_path(dev)?;
        self.post_data_recv(&mut v)?;
        Ok(true)
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

    fn check_send(&self, status: WcStatus) -> Result<(), BenchError> {
        if status != WcStatus::Success {
            return Err(BenchError::Completion {
                during: "send",
                status,
            });
        }
        Ok(())
    }

    /// Posts one data SEND of the current size whose first two bytes are `t`.
    #[inline]
    fn post_data_send<X: DataPath>(&mut self, path: &mut X, t: [u8; 2]) -> Result<(), BenchError> {
        self.write_tag(t);
        self.post_data(path)
    }

    #[inline]
    fn write_tag(&mut self, t: [u8; 2]) {
        self.write_byte(0, t[0]);
        self.write_byte(1, t[1]);
    }

    /// Posts one signaled data SEND of the current size from the send region.
    #[inline]
    fn post_data<X: DataPath>(&mut self, path: &mut X) -> Result<(), BenchError> {
        let size = self.size;
        let sge = [Sge {
            addr: self.bus(),
            length: size,
            lkey: self.lkey,
        }];
        // SAFETY: the first `size` bytes of the DMA buffer are the send region, written only
        // by this node; the slice lives only for this post (the WQE copies inline data).
        let inline_bytes = unsafe { core::slice::from_raw_parts(self.base(), size as usize) };
        let payload = if size <= self.inline_max {
            Payload::Inline(inline_bytes)
        } else {
            Payload::Sges(&sge)
        };
        // The UD destination was bound when the path was made.
        path.send(1, payload, SendFlags::SIGNALED)
            .map_err(vb("post_send"))
    }

    /// One look at a CQ in event mode: poll; else arm it (and poll once more, for a
    /// completion that beat the arm); else wait, bounded by the step budget, for its event.
    /// (Busy-poll mode polls through the data path, [`Self::measure_polling`].)
    #[inline]
    fn try_cq(
        &mut self,
        dev: &mut D,
        recv: bool,
        wc: &mut [WorkCompletion; 1],
        budget: StepBudget,
    ) -> Result<bool, BenchError> {
        let cq = if recv { self.res.rcq } else { self.res.scq };
        let Some(cq) = cq else {
            return Ok(false);
        };
        if dev.poll_cq(cq, wc).map_err(vb("poll_cq"))? == 1 {
            return Ok(true);
        }
        let armed = if recv {
            &mut self.rcq_armed
        } else {
            &mut self.scq_armed
        };
        if !*armed {
            dev.req_notify_cq(cq, false).map_err(vb("req_notify_cq"))?;
            *armed = true;
            // A completion that arrived before the arm raises no event: look again.
            return Ok(dev.poll_cq(cq, wc).map_err(vb("poll_cq"))? == 1);
        }
        match dev.get_cq_event(cq, budget.event_wait_ns) {
            Ok(()) => {
                *armed = false;
                Ok(dev.poll_cq(cq, wc).map_err(vb("poll_cq"))? == 1)
            }
            Err(verbs::Error::Timeout(_)) => Ok(false),
            Err(e) => Err(BenchError::Verbs {
                during: "get_cq_event",
                err: e,
            }),
        }
    }

    fn measure<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        budget: StepBudget,
    ) -> Result<(), BenchError> {
        if self.cfg.test == Test::WriteLat {
            return self.measure_write(dev, env, out, budget);
        }
        if self.cfg.completion == Completion::Poll {
            return self.measure_polling(dev, env, out, budget);
        }
        // From here on: event mode. Every wait reads the clock, since each look at a CQ may
        // block for an event.
        let iters = self.cfg.iterations;
        // Large messages take long on slow (emulated) fabrics: allow 20 ns per byte on top,
        // so only a real loss, not a slow 8 MiB transfer, counts as one.
        let timeout = self.cfg.wait_timeout_ns + u64::from(self.size) * 20;
        let mut wc = [WorkCompletion::default(); 1];
        for _ in 0..budget.polls {
            match self.it {
                It::Send => {
                    // Client only: stamp just before the post (first attempt of an iteration).
                    self.write_tag(tag(self.seq, self.index, self.attempt > 0));
                    if self.attempt == 0 {
                        self.stamps[self.seq as usize] = env.cycles();
                    }
                    self.post_data(&mut self.verbs_path(dev)?)?;
                    self.it = It::WaitSend;
                }
                It::WaitSend => {
                    self.wait.start(env);
                    if self.try_cq(dev, false, &mut wc, budget)? {
                        self.check_send(wc[0].status)?;
                        self.wait.reset();
                        if self.cfg.role == Role::Server {
                            self.seq += 1;
                            if self.seq == iters {
                                self.linger = Some((self.size, self.index));
                                return self.end_size(out, false);
                            }
                        }
                        self.it = It::WaitRecv;
                    } else if self.wait.expired(env, timeout, true) {
                        return Err(BenchError::SendTimeout);
                    }
                }
                It::WaitRecv => {
                    self.wait.start(env);
                    if self.try_cq(dev, true, &mut wc, budget)? {
                        let w = wc[0];
                        let mut v = self.verbs_path(dev)?;
                        self.on_recv(&mut v, env, w.status, w.byte_len)?;
                        if self.phase != Phase::Measure {
                            return Ok(());
                        }
                        if self.seq == iters && self.cfg.role == Role::Client {
                            return self.end_size(out, false);
                        }
                    } else if self.wait.expired(env, timeout, true) {
                        self.on_timeout(dev, env, out)?;
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }

    /// The measured loop in busy-poll mode, through the device's [`DataPath`]: the data QP
    /// and its CQs are validated once per step, not per verb (docs/performance.md). The
    /// same state machine as [`Self::measure`]; a receive timeout leaves the path to look
    /// at the rendezvous QP.
    fn measure_polling<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        budget: StepBudget,
    ) -> Result<(), BenchError> {
        let iters = self.cfg.iterations;
        let timeout = self.cfg.wait_timeout_ns + u64::from(self.size) * 20;
        let r = &self.res;
        let (Some(qp), Some(scq), Some(rcq)) = (r.qp, r.scq, r.rcq) else {
            return Err(BenchError::NoMemory("data QP"));
        };
        let mut path = dev
            .data_path(qp, scq, rcq, self.ud_dest)
            .map_err(vb("data path"))?;
        for _ in 0..budget.polls {
            match self.it {
                It::Send => {
                    // Client only: stamp just before the post (first attempt of an iteration).
                    self.write_tag(tag(self.seq, self.index, self.attempt > 0));
                    if self.attempt == 0 {
                        self.stamps[self.seq as usize] = env.cycles();
                    }
                    self.post_data(&mut path)?;
                    self.it = It::WaitSend;
                }
                It::WaitSend => match path.poll_send().map_err(vb("poll send CQ"))? {
                    Some(c) => {
                        self.check_send(c.status)?;
                        self.wait.reset();
                        if self.cfg.role == Role::Server {
                            self.seq += 1;
                            if self.seq == iters {
                                self.linger = Some((self.size, self.index));
                                return self.end_size(out, false);
                            }
                        }
                        self.it = It::WaitRecv;
                    }
                    None if self.wait.expired(env, timeout, false) => {
                        return Err(BenchError::SendTimeout)
                    }
                    None => {}
                },
                It::WaitRecv => match path.poll_recv().map_err(vb("poll receive CQ"))? {
                    Some(c) => {
                        self.on_recv(&mut path, env, c.status, c.byte_len)?;
                        if self.phase != Phase::Measure {
                            return Ok(());
                        }
                        if self.seq == iters && self.cfg.role == Role::Client {
                            return self.end_size(out, false);
                        }
                    }
                    None if self.wait.expired(env, timeout, false) => {
                        drop(path);
                        return self.on_timeout(dev, env, out);
                    }
                    None => {}
                },
            }
        }
        Ok(())
    }

    /// perftest's refill rule (`rcnt + rx_depth <= iters`), applied to received messages
    /// that advanced the ping-pong; messages caused by loss recovery are always replaced.
    #[inline]
    fn refill<X: DataPath>(&mut self, path: &mut X, artifact: bool) -> Result<(), BenchError> {
        let rule = self.recv_count + self.cfg.rx_depth() <= self.cfg.iterations;
        if artifact || rule {
            self.post_data_recv(path)?;
        }
        Ok(())
    }

    /// A receive completion (`status`, `byte_len`) in the measured loop; answers and
    /// refills go through `path`.
    fn on_recv<X: DataPath, E: BenchEnv>(
        &mut self,
        path: &mut X,
        env: &mut E,
        status: WcStatus,
        byte_len: u32,
    ) -> Result<(), BenchError> {
        self.rq_outstanding = self.rq_outstanding.saturating_sub(1);
        self.wait.reset();
        match status {
            WcStatus::Success => {}
            // A stale, larger message from an earlier aborted size can hit a smaller
            // receive: that datagram is lost, the queue lives on.
            WcStatus::LocLenErr if self.cfg.transport == Transport::Ud => {
                self.lost += 1;
                return self.refill(path, true);
            }
            s => {
                return Err(BenchError::Completion {
                    during: "receive",
                    status: s,
                })
            }
        }
        let grh = self.cfg.transport.grh_bytes();
        let off = self.payload_off();
        let t = [self.read_byte(off), self.read_byte(off + 1)];
        let (seq, idx, retry) = untag(t);
        let fresh = byte_len == self.size + grh && idx == self.index & 0x1F;
        let want = self.seq & 0x3FF;
        match self.cfg.role {
            Role::Client => {
                if !(fresh && seq == want) {
                    // A late answer to an earlier try, or a leftover of another size.
                    return self.refill(path, true);
                }
                self.check_payload(off)?;
                self.recv_count += 1;
                self.seq += 1;
                self.attempt = 0;
                self.it = It::Send;
                self.refill(path, false)
            }
            Role::Server => {
                self.silent = 0;
                self.last_heard_ns = env.now_ns();
                if fresh && seq == want {
                    if retry {
                        // The client's first try was lost: the interval ending here holds
                        // the client's timeout.
                        self.lost += 1;
                        if self.seq > 0 {
                            self.bad[self.seq as usize - 1] = true;
                        }
                    }
                    self.check_payload(off)?;
                    self.recv_count += 1;
                    self.write_tag(t);
                    // perftest's server: stamp just before answering.
                    self.stamps[self.seq as usize] = env.cycles();
                    self.post_data(path)?;
                    self.it = It::WaitSend;
                    self.refill(path, false)
                } else if fresh && self.seq > 0 && seq == (self.seq - 1) & 0x3FF {
                    // Our answer was lost and the client asked again: answer again; the
                    // interval from that answer to the next one holds the client's timeout.
                    self.lost += 1;
                    self.retries += 1;
                    self.bad[self.seq as usize - 1] = true;
                    self.seq -= 1;
                    self.post_data_send(path, t)?;
                    self.it = It::WaitSend;
                    self.refill(path, true)
                } else {
                    self.refill(path, true)
                }
            }
        }
    }

    /// First payload byte that carries the pattern: send_lat's first two bytes are its tag;
    /// write_lat's tag is the last byte instead.
    fn data_from(&self) -> usize {
        match self.cfg.test {
            Test::SendLat => 2,
            Test::WriteLat => 0,
        }
    }

    /// The byte write_lat's iteration `seq` (0-based) carries in the last byte of its
    /// message: perftest's `(char)++scnt`, i.e. `seq + 1` mod 256.
    fn iter_tag(seq: u32) -> u8 {
        (seq.wrapping_add(1) & 0xFF) as u8
    }

    /// Posts one signaled RDMA WRITE of the current size from the send region to the peer's
    /// receive region, with `tag` in its last byte (inline up to the inline limit).
    fn post_write(&mut self, dev: &mut D, tag: u8) -> Result<(), BenchError> {
        let (Some(qp), Some(peer)) = (self.res.qp, self.peer) else {
            return Err(BenchError::NoMemory("data QP"));
        };
        let size = self.size;
        self.write_byte(size as usize - 1, tag);
        let sge = [Sge {
            addr: self.bus(),
            length: size,
            lkey: self.lkey,
        }];
        // SAFETY: the first `size` bytes of the DMA buffer are the send region, written only
        // by this node; the slice lives only for this post (the WQE copies inline data).
        let inline_bytes = unsafe { core::slice::from_raw_parts(self.base(), size as usize) };
        let payload = if size <= self.inline_max {
            Payload::Inline(inline_bytes)
        } else {
            Payload::Sges(&sge)
        };
        let wr = SendWr {
            wr_id: 2,
            opcode: WrOpcode::RdmaWrite {
                remote_addr: peer.addr,
                rkey: peer.rkey,
            },
            payload,
            flags: SendFlags::SIGNALED,
            ud: None,
        };
        dev.post_send(qp, &wr).map_err(vb("post RDMA WRITE"))
    }

    /// perftest's `run_iter_lat_write`: per iteration the client stamps, writes `seq + 1`
    /// into the last byte of its message, posts one signaled WRITE, polls its send CQ, then
    /// spins on the last byte of its own receive region until the server's write with the
    /// same tag lands; the server spins first, then stamps and writes back. Through the
    /// per-call verbs (the device's `DataPath` only sends); busy-polling only.
    fn measure_write<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        budget: StepBudget,
    ) -> Result<(), BenchError> {
        let iters = self.cfg.iterations;
        let timeout = self.cfg.wait_timeout_ns + u64::from(self.size) * 20;
        // RC: a lost packet is retransmitted by the HCA after its ACK timeout, and the
        // send completion waits for the ACK; the HCA itself fails the WRITE (retry
        // exceeded) after 8 ACK timeouts. Bound the wait by the peer timeout, not a loss wait.
        let send_timeout = match self.cfg.transport {
            Transport::Rc => timeout.max(self.cfg.peer_timeout_ns),
            _ => timeout,
        };
        let scq = self.res.scq.ok_or(BenchError::NoMemory("data QP"))?;
        let polled = self.lay.recv + self.size as usize - 1;
        let mut wc = [WorkCompletion::default(); 1];
        for _ in 0..budget.polls {
            match self.it {
                It::Send => {
                    if self.attempt == 0 {
                        self.stamps[self.seq as usize] = env.cycles();
                    }
                    self.post_write(dev, Self::iter_tag(self.seq))?;
                    self.it = It::WaitSend;
                }
                It::WaitSend => {
                    if dev.poll_cq(scq, &mut wc).map_err(vb("poll send CQ"))? == 1 {
                        self.check_send(wc[0].status)?;
                        self.wait.reset();
                        if self.cfg.role == Role::Server {
                            self.seq += 1;
                            if self.seq == iters {
                                return self.end_size(out, false);
                            }
                        }
                        self.it = It::WaitRecv;
                    } else if self.wait.expired(env, send_timeout, false) {
                        return Err(BenchError::SendTimeout);
                    }
                }
                It::WaitRecv => {
                    if self.read_byte(polled) == Self::iter_tag(self.seq) {
                        self.wait.reset();
                        self.silent = 0;
                        self.last_heard_ns = env.now_ns();
                        self.check_payload(self.lay.recv)?;
                        self.recv_count += 1;
                        self.attempt = 0;
                        match self.cfg.role {
                            Role::Client => {
                                self.seq += 1;
                                if self.seq == iters {
                                    return self.end_size(out, false);
                                }
                            }
                            // perftest's server: stamp just before answering (in `Send`).
                            Role::Server => {}
                        }
                        self.it = It::Send;
                    } else if self.wait.expired(env, timeout, false) {
                        return self.on_write_timeout(dev, env, out);
                    }
                }
            }
        }
        Ok(())
    }

    /// write_lat: a wait for the peer's write ran out (UC: a packet was lost; RC: the HCA's
    /// retransmission took longer than the wait). A WRITE is idempotent, so each side
    /// re-posts its last write: the client the one it waits an answer to, the server its
    /// last answer. Whichever of the two was lost, the peer then sees the tag it waits for;
    /// a duplicate only rewrites bytes the peer already holds. The interval holding the wait
    /// leaves the statistics; past the loss limit the client aborts the size.
    fn on_write_timeout<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
    ) -> Result<(), BenchError> {
        match self.cfg.role {
            Role::Client if self.seq + 1 == self.cfg.iterations && self.attempt > 0 => {
                // The last answer is still missing after one re-post: the server has most
                // likely finished this size and its answer was lost. No interval ends with
                // this answer (the last stamp is taken before the last write), so the
                // statistics are complete: count the loss and end the size.
                self.wait.reset();
                self.service_rdv(dev, env)?;
                self.lost += 1;
                self.end_size(out, false)
            }
            // Counts the loss, marks the interval, aborts past the limit, re-posts.
            Role::Client => self.on_timeout(dev, env, out),
            Role::Server => {
                // Services the rendezvous (the client may have aborted this size or
                // finished) and bounds the silence.
                self.on_timeout(dev, env, out)?;
                if self.phase == Phase::Measure && self.seq > 0 {
                    // Re-post answer `seq - 1` unstamped; its completion brings `seq` back.
                    self.lost += 1;
                    self.retries += 1;
                    self.bad[self.seq as usize - 1] = true;
                    self.seq -= 1;
                    self.attempt = 1;
                    self.it = It::Send;
                }
                Ok(())
            }
        }
    }

    fn check_payload(&self, off: usize) -> Result<(), BenchError> {
        if !self.cfg.verify {
            return Ok(());
        }
        let end = match self.cfg.test {
            Test::SendLat => self.size as usize,
            // The last byte is the iteration tag.
            Test::WriteLat => self.size as usize - 1,
        };
        for i in self.data_from()..end {
            if self.read_byte(off + i) != pattern(i, self.index) {
                return Err(BenchError::Payload {
                    bytes: self.size,
                    offset: i as u32,
                });
            }
        }
        Ok(())
    }

    /// A wait for a receive ran out.
    fn on_timeout<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
    ) -> Result<(), BenchError> {
        self.wait.reset();
        match self.cfg.role {
            Role::Client => {
                // Also keep the rendezvous QP drained (late barrier answers).
                self.service_rdv(dev, env)?;
                self.lost += 1;
                if self.lost > self.cfg.max_losses_per_size {
                    return self.end_size(out, true);
                }
                self.retries += 1;
                self.attempt += 1;
                self.bad[self.seq as usize] = true;
                self.it = It::Send;
            }
            Role::Server => {
                // Silence: the client may have aborted this size, finished, or re-sent a
                // barrier whose answer was lost.
                match self.service_rdv(dev, env)? {
                    Some((Kind::Barrier, i, _)) if i == self.index => {
                        self.rdv_reply(dev, Kind::BarrierAck, i)?;
                    }
                    Some((Kind::Barrier, i, _)) if i > self.index => {
                        self.skip_to = Some(i);
                        return self.end_size(out, true);
                    }
                    Some((Kind::Done, _, _)) => {
                        self.end_size(out, true)?;
                        self.rdv_reply(dev, Kind::DoneAck, 0)?;
                        self.phase = Phase::Done;
                        return Ok(());
                    }
                    _ => {}
                }
                self.silent += 1;
                if u64::from(self.silent) * self.cfg.wait_timeout_ns > self.silence_bound() {
                    return Err(BenchError::PeerLost);
                }
            }
        }
        Ok(())
    }

    fn end_size<W: Write>(&mut self, out: &mut W, aborted: bool) -> Result<(), BenchError> {
        self.report(out, aborted)?;
        self.needs_reset |= aborted;
        self.phase = Phase::SizeStart;
        Ok(())
    }

    /// Statistics over the clean samples, perftest's row and the result line.
    fn report<W: Write>(&mut self, out: &mut W, aborted: bool) -> Result<(), BenchError> {
        let stats = if aborted { None } else { self.clean_stats()? };
        match &stats {
            Some(s) => report::write_row(out, u64::from(self.size), s)?,
            None => writeln!(
                out,
                " {:<7} {}          (no statistics: {} lost, {})",
                self.size,
                self.cfg.iterations,
                self.lost,
                if aborted {
                    "size aborted"
                } else {
                    "too few clean samples"
                }
            )?,
        }
        let line = ResultLine {
            test: self.cfg.test,
            transport: self.cfg.transport,
            role: self.cfg.role,
            bytes: self.size,
            iterations: self.cfg.iterations,
            stats,
            tsc_mhz: self.tsc_mhz,
            inline: self.size <= self.inline_max,
            completion: self.cfg.completion,
            mtu: self.mtu.bytes(),
            lost: self.lost,
            retries: self.retries,
            aborted,
        };
        write_result_line(out, &line)?;
        self.summary.sizes += 1;
        self.summary.aborted += aborted as u32;
        self.summary.lost += u64::from(self.lost);
        self.summary.retries += u64::from(self.retries);
        self.summary.last = Some(SizeResultSummary {
            bytes: self.size,
            samples: stats.map_or(0, |s| s.samples),
        });
        Ok(())
    }

    /// The stamps with every interval that contains a loss wait removed: the clean deltas
    /// are re-accumulated from the first stamp, so `perftest_latency` sees only them.
    fn clean_stats(&mut self) -> Result<Option<LatencyStats>, BenchError> {
        let kept = drop_bad_intervals(&mut self.stamps, &self.bad);
        if kept < crate::stats::MIN_ITERATIONS {
            return Ok(None);
        }
        let s = perftest_latency(
            &self.stamps[..kept],
            &mut self.scratch,
            self.tsc_mhz,
            RttFactor::Half,
        )
        .map_err(BenchError::Stats)?;
        Ok(Some(s))
    }

    fn finish<E: BenchEnv>(&mut self, dev: &mut D, env: &mut E) -> Result<(), BenchError> {
        let now = env.now_ns();
        let ev = self.service_rdv(dev, env)?;
        match self.cfg.role {
            Role::Client => {
                if matches!(ev, Some((Kind::DoneAck, _, _))) {
                    self.summary.clean_finish = true;
                    self.phase = Phase::Done;
                    return Ok(());
                }
                if now >= self.next_send_ns {
                    if self.tries >= DONE_TRIES {
                        self.phase = Phase::Done;
                        return Ok(());
                    }
                    self.tries += 1;
                    self.next_send_ns = now + self.cfg.wait_timeout_ns;
                    self.rdv_reply(dev, Kind::Done, 0)?;
                }
            }
            Role::Server => {
                if self.linger(dev)? {
                    self.last_heard_ns = now;
                }
                if matches!(ev, Some((Kind::Done, _, _))) {
                    self.rdv_reply(dev, Kind::DoneAck, 0)?;
                    self.summary.clean_finish = true;
                    self.phase = Phase::Done;
                    return Ok(());
                }
                if now.saturating_sub(self.last_heard_ns) > self.silence_bound() {
                    return Err(BenchError::PeerLost);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert!(l.rdv >= l.recv + GRH + max);
            let u = Layout::new(max, Transport::Uc);
            assert_eq!(u.recv % CACHE_LINE, 0);
        }
    }
}
