//! The bandwidth stream of `ib_send_bw` / `ib_write_bw` / `ib_read_bw` / `ib_atomic_bw`
//! (perftest's `run_iter_bw` on the sending or requesting side, `run_iter_bw_server` on the
//! SEND receiver) as two step-driven state machines over the verbs API, so two nodes can
//! share one thread.
//!
//! Sender: while fewer than `tx_depth` messages are outstanding it stamps the TSC and posts a
//! list of `post_list` messages with one `post_send_list` (one doorbell per list on mlx4; the
//! work requests are made as the list is written, so nothing is allocated), message `m`
//! signaled when `(m + 1) % cq_mod == 0`
//! or it is the last; then it polls the send CQ, each completion retiring `cq_mod` messages
//! (the last one the remainder) and stamping `tcompleted`. A completion with an error status,
//! or no completion for `stall_cycles`, ends the run with an error: never a hang. READs and
//! atomics go the same way; how many READs/atomics the HCA keeps in flight is the QP's
//! `max_rd_atomic` (perftest's `-o`), not the sender's business, as in perftest. With `-D`
//! the run follows [`super::duration`]'s phases instead of counting to `-n`.
//!
//! Receiver (SEND): keeps up to `rx_depth` receives posted (re-posting after each completion
//! while fewer than the expected messages have been posted), counts completions and bytes. It
//! finishes when all expected messages arrived, or, once told the sender is done
//! ([`BwReceiver::sender_done`]), after `drain_cycles` without a completion: what did not
//! arrive by then is reported as lost (UD/UC drop; RC retransmits and loses nothing).
//!
//! Memory for the stamps is taken when the state machine is built; stepping allocates nothing.

use alloc::vec;
use alloc::vec::Vec;

use verbs::{
    Device, Payload, RecvWr, SendFlags, SendWr, Sge, UdDest, WcStatus, WorkCompletion, WrOpcode,
};

use super::duration::{Phase, Phases};

use super::formula::{perftest_bw, BwError, BwInput, BwReport, BwUnit};
use crate::config::{AtomicOp, Transport};

/// Completions taken per poll (perftest's `CTX_POLL_BATCH`).
pub const POLL_BATCH: usize = 16;

/// Which bandwidth test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BwVerb {
    /// `ib_send_bw`: SENDs into the receiver's posted receives.
    Send,
    /// `ib_write_bw`: RDMA WRITEs to `remote_addr`/`rkey` (every message to the same place).
    Write { remote_addr: u64, rkey: u32 },
    /// `ib_read_bw`: RDMA READs of the message size from `remote_addr`/`rkey` (every message
    /// from the same place) into the sender's buffer. RC only; the responder is passive.
    Read { remote_addr: u64, rkey: u32 },
    /// `ib_atomic_bw`: 8-byte atomics on the [`ATOMIC_WORDS`] words of the responder's buffer
    /// at `remote_addr` ([`ATOMIC_STRIDE`] bytes apart, perftest's cycling), each fetched
    /// value landing in its own 8-byte slot of the sender's buffer ([`atomic_slot`]). RC only.
    Atomic {
        op: AtomicOp,
        remote_addr: u64,
        rkey: u32,
    },
}

impl BwVerb {
    /// READ and atomics: the requester posts, the responder's CPU does nothing.
    pub fn one_sided_requester(&self) -> bool {
        matches!(self, BwVerb::Read { .. } | BwVerb::Atomic { .. })
    }

    /// Whether perftest runs this verb over `t` (`ib_send_bw`: UD, UC, RC; `ib_write_bw`:
    /// UC, RC; `ib_read_bw`, `ib_atomic_bw`: RC).
    pub fn allows(&self, t: Transport) -> bool {
        match self {
            BwVerb::Send => true,
            BwVerb::Write { .. } => t != Transport::Ud,
            BwVerb::Read { .. } | BwVerb::Atomic { .. } => t == Transport::Rc,
        }
    }
}

/// Bytes of an atomic operand and result.
pub const ATOMIC_SIZE: u32 = 8;
/// The responder's words the atomics cycle over: perftest advances the remote address by a
/// cache line per message and wraps within its 4 KiB cycle buffer (64 lines of 64 bytes).
pub const ATOMIC_WORDS: u64 = 64;
/// Bytes between two of those words (a cache line).
pub const ATOMIC_STRIDE: u64 = 64;
/// The responder's buffer the atomics need: [`ATOMIC_WORDS`] words [`ATOMIC_STRIDE`] apart.
pub const ATOMIC_REMOTE_BYTES: u64 = ATOMIC_WORDS * ATOMIC_STRIDE;

/// Where message `m`'s fetched value lands: slot `m % tx_depth` of the sender's buffer
/// `base`, 8 bytes each, so a slot is reused only after its message retired and every result
/// can be checked when its message completes ([`BwSender::step_checked`]).
pub fn atomic_slot(base: u64, tx_depth: u32, m: u64) -> u64 {
    base + (m % u64::from(tx_depth.max(1))) * u64::from(ATOMIC_SIZE)
}

/// The value message `m` fetches when the responder's words start at zero: word
/// `m % ATOMIC_WORDS` has seen `m / ATOMIC_WORDS` atomics before it (fetch-and-add adds 1;
/// compare-and-swap compares with that count and swaps in one more, so every swap succeeds).
/// The responder keeps the word in the wire's (big-endian) order.
pub fn atomic_expected(m: u64) -> u64 {
    m / ATOMIC_WORDS
}

/// perftest's `-o` for `ib_read_bw`/`ib_atomic_bw` when not given: the device's
/// `max_qp_rd_atom` (ConnectX-3: 16, the responder resources the driver gives each QP).
pub const DEFAULT_BW_OUT_READS: u8 = 16;

/// perftest's rule for `-o` (`ctx_set_out_reads`): 0 (not given) means the device's maximum,
/// more than the maximum is cut to it.
pub fn resolve_out_reads(requested: u8, device_max: u8) -> u8 {
    if requested == 0 || requested > device_max {
        device_max
    } else {
        requested
    }
}

/// `-D`: a time-bounded run instead of `-n` messages, in TSC cycles. perftest's phases:
/// warm-up for `margin`, then the sample (`duration - 2 * margin`) whose completions are
/// counted, then `margin` more before posting stops; only the sample is reported (no peak).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BwDuration {
    /// Warm-up before the sample and tail after it.
    pub margin_cycles: u64,
    /// The measured window.
    pub sample_cycles: u64,
}

impl BwDuration {
    /// perftest's `-D seconds [-f margin]`: the margin defaults to `seconds / 4` (whole
    /// seconds) and the duration must exceed twice the margin.
    pub fn from_secs(
        seconds: u32,
        margin: Option<u32>,
        tsc_mhz: f64,
    ) -> Result<BwDuration, BwParamError> {
        let margin = margin.unwrap_or(seconds / 4);
        if u64::from(seconds) <= 2 * u64::from(margin) {
            return Err(BwParamError::DurationNotOverTwiceMargin);
        }
        if !(tsc_mhz.is_finite() && tsc_mhz > 0.0) {
            return Err(BwParamError::BadTscRate);
        }
        let cycles = |s: u64| (s as f64 * tsc_mhz * 1e6) as u64;
        Ok(BwDuration {
            margin_cycles: cycles(u64::from(margin)),
            sample_cycles: cycles(u64::from(seconds) - 2 * u64::from(margin)),
        })
    }
}

/// The sender's parameters, perftest's flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BwParams {
    /// `-s`: bytes per message.
    pub size: u32,
    /// `-n`: messages.
    pub iterations: u64,
    /// `-t`: messages outstanding at most.
    pub tx_depth: u32,
    /// `-l`: messages per posted list.
    pub post_list: u32,
    /// `-Q`: one signaled completion every `cq_mod` messages.
    pub cq_mod: u32,
    /// `-I`: messages of at most this many bytes are sent inline.
    pub inline_size: u32,
    /// `-N`: no peak (only the first and the last stamps are kept).
    pub no_peak: bool,
    /// `-D`: run for a time instead of `iterations` messages (which are then ignored);
    /// implies no peak, as in perftest.
    pub duration: Option<BwDuration>,
    /// `-b`: both sides stream ([`super::duplex`]); the figures are the two directions'
    /// sum ([`super::formula::bidir_sum`]).
    pub bidirectional: bool,
}

/// A parameter combination perftest refuses (its messages in [`BwParamError::message`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BwParamError {
    ZeroIterations,
    ZeroSize,
    ZeroTxDepth,
    ZeroPostList,
    ZeroCqMod,
    /// `-n` not a multiple of `-l`.
    IterationsNotMultipleOfPostList,
    /// `-l` not a multiple of `-Q`.
    PostListNotMultipleOfCqMod,
    /// `-l` larger than `-t`: a list could never be posted.
    PostListOverTxDepth,
    /// `-D` not longer than twice the margin.
    DurationNotOverTwiceMargin,
    /// `-D` with `-a`: perftest runs duration mode on one size only.
    DurationWithAllSizes,
    /// The TSC rate is zero, negative or not a number.
    BadTscRate,
    /// The verb does not run over this transport (READ/atomics: RC only; WRITE: not UD).
    TransportNotAllowed,
    /// Atomics are 8 bytes.
    AtomicSizeNot8,
    /// A UD message larger than the path MTU.
    UdSizeOverMtu,
}

impl BwParamError {
    pub fn message(self) -> &'static str {
        match self {
            BwParamError::ZeroIterations => "the iteration count must be at least 1",
            BwParamError::ZeroSize => "the message size must be at least 1 byte",
            BwParamError::ZeroTxDepth => "the tx depth must be at least 1",
            BwParamError::ZeroPostList => "the post list must be at least 1",
            BwParamError::ZeroCqMod => "the CQ moderation must be at least 1",
            BwParamError::IterationsNotMultipleOfPostList => {
                "the number of iterations must be a multiple of the post list size"
            }
            BwParamError::PostListNotMultipleOfCqMod => {
                "the post list size must be a multiple of the CQ moderation"
            }
            BwParamError::PostListOverTxDepth => "the post list must not exceed the tx depth",
            BwParamError::DurationNotOverTwiceMargin => {
                "the duration must be longer than twice the margin"
            }
            BwParamError::DurationWithAllSizes => {
                "duration mode runs one message size, not all sizes"
            }
            BwParamError::BadTscRate => "the TSC rate must be a positive number",
            BwParamError::TransportNotAllowed => {
                "READ and atomics run over RC only, WRITE over RC or UC"
            }
            BwParamError::AtomicSizeNot8 => "atomic operations are 8 bytes",
            BwParamError::UdSizeOverMtu => "a UD message must fit the path MTU",
        }
    }
}

impl BwParams {
    /// perftest's rules (`force_dependecies`): `-Q` is clamped to `-t`; a post list needs
    /// `-n` to be a multiple of it and itself to be a multiple of `-Q`. `cq_mod_given` false
    /// means `-Q` was not given: with a post list, the moderation becomes the list size.
    ///
    /// In duration mode (`-D`) the iteration count is not used and the peak is not measured
    /// (perftest sets `-N`).
    pub fn resolve(mut self, cq_mod_given: bool) -> Result<BwParams, BwParamError> {
        if self.duration.is_some() {
            self.no_peak = true;
        } else if self.iterations == 0 {
            return Err(BwParamError::ZeroIterations);
        }
        if self.size == 0 {
            return Err(BwParamError::ZeroSize);
        }
        if self.tx_depth == 0 {
            return Err(BwParamError::ZeroTxDepth);
        }
        if self.post_list == 0 {
            return Err(BwParamError::ZeroPostList);
        }
        if self.cq_mod == 0 {
            return Err(BwParamError::ZeroCqMod);
        }
        if self.duration.is_some_and(|d| d.sample_cycles == 0) {
            return Err(BwParamError::DurationNotOverTwiceMargin);
        }
        if self.post_list > self.tx_depth {
            return Err(BwParamError::PostListOverTxDepth);
        }
        self.cq_mod = self.cq_mod.min(self.tx_depth);
        if self.post_list > 1 {
            if self.duration.is_none() && !self.iterations.is_multiple_of(u64::from(self.post_list))
            {
                return Err(BwParamError::IterationsNotMultipleOfPostList);
            }
            if !cq_mod_given {
                self.cq_mod = self.post_list;
            } else if !self.post_list.is_multiple_of(self.cq_mod) {
                return Err(BwParamError::PostListNotMultipleOfCqMod);
            }
        }
        Ok(self)
    }

    /// perftest's checks of the test against the connection: the verb's transports, 8-byte
    /// atomics, UD messages within the path MTU (`mtu` bytes), no duration mode with `-a`
    /// (`all_sizes`).
    pub fn check_for(
        &self,
        verb: &BwVerb,
        transport: Transport,
        mtu: u32,
        all_sizes: bool,
    ) -> Result<(), BwParamError> {
        if !verb.allows(transport) {
            return Err(BwParamError::TransportNotAllowed);
        }
        if matches!(verb, BwVerb::Atomic { .. }) && self.size != ATOMIC_SIZE {
            return Err(BwParamError::AtomicSizeNot8);
        }
        if transport == Transport::Ud && self.size > mtu {
            return Err(BwParamError::UdSizeOverMtu);
        }
        if self.duration.is_some() && all_sizes {
            return Err(BwParamError::DurationWithAllSizes);
        }
        Ok(())
    }
}

/// Why a stream stopped early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamError {
    Verbs(verbs::Error),
    /// A completion carried an error status.
    Completion {
        status: WcStatus,
        wr_id: u64,
    },
    /// No completion for the stall bound with messages outstanding.
    Stalled {
        posted: u64,
        completed: u64,
    },
    /// The caller's check of a retired message's data failed ([`BwSender::step_checked`]).
    Check {
        message: u64,
    },
}

impl From<verbs::Error> for StreamError {
    fn from(e: verbs::Error) -> Self {
        StreamError::Verbs(e)
    }
}

/// Where a step left the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamState {
    Running,
    Done,
}

/// The sending side of one size: `ib_send_bw`'s and `ib_write_bw`'s sender, and the
/// requester of `ib_read_bw` and `ib_atomic_bw` (perftest's `run_iter_bw`).
pub struct BwSender<D: Device> {
    p: BwParams,
    verb: BwVerb,
    qp: D::Qp,
    send_cq: D::Cq,
    ud: Option<UdDest<D::Ah>>,
    sge: Sge,
    tposted: Vec<u64>,
    tcompleted: Vec<u64>,
    /// The bytes of an inline message (empty when messages go by gather).
    inline: Vec<u8>,
    /// The gather entry of each message of the list being posted (atomics vary it).
    list_sges: Vec<Sge>,
    posted: u64,
    completed: u64,
    signaled_seen: u64,
    doorbells: u64,
    last_progress: u64,
    started: bool,
    stall_cycles: u64,
    /// Duration mode: the phases and the messages retired during the sample.
    phases: Option<Phases>,
    sample_iters: u64,
    wc: [WorkCompletion; POLL_BATCH],
}

impl<D: Device> BwSender<D> {
    /// A sender of `p` (already [`BwParams::resolve`]d) posting from `sge` on `qp`, polling
    /// `send_cq`. SEND/WRITE send the first `p.size` bytes of `sge`; READ reads that many into
    /// it; atomics put their results in 8-byte slots from `sge.addr` ([`atomic_slot`], so
    /// `sge` must hold `8 * tx_depth` bytes). Messages of at most `p.inline_size` bytes (SEND
    /// and WRITE only) are copied into the WQE from a zeroed buffer of the sender's own.
    /// `stall_cycles` bounds every wait for a completion.
    pub fn new(
        p: BwParams,
        verb: BwVerb,
        qp: D::Qp,
        send_cq: D::Cq,
        ud: Option<UdDest<D::Ah>>,
        sge: Sge,
        stall_cycles: u64,
    ) -> Self {
        let stamps = if p.no_peak || p.duration.is_some() {
            1
        } else {
            p.iterations as usize
        };
        let may_inline = matches!(verb, BwVerb::Send | BwVerb::Write { .. });
        BwSender {
            p,
            verb,
            qp,
            send_cq,
            ud,
            sge: Sge {
                length: match verb {
                    BwVerb::Atomic { .. } => ATOMIC_SIZE,
                    _ => p.size,
                },
                ..sge
            },
            tposted: vec![0; stamps],
            tcompleted: vec![0; stamps],
            inline: if may_inline && p.size <= p.inline_size {
                vec![0; p.size as usize]
            } else {
                Vec::new()
            },
            list_sges: Vec::with_capacity(p.post_list as usize),
            posted: 0,
            completed: 0,
            signaled_seen: 0,
            doorbells: 0,
            last_progress: 0,
            started: false,
            stall_cycles,
            phases: p.duration.map(Phases::new),
            sample_iters: 0,
            wc: [WorkCompletion::default(); POLL_BATCH],
        }
    }

    /// Messages posted and completed so far, and the signaled completions seen.
    pub fn counts(&self) -> (u64, u64, u64) {
        (self.posted, self.completed, self.signaled_seen)
    }

    /// Lists posted (`post_send_list` calls that posted something: one doorbell each on
    /// mlx4, see the module doc).
    pub fn doorbells(&self) -> u64 {
        self.doorbells
    }

    /// Duration mode: the messages retired during the sample (what perftest reports as
    /// `#iterations`), 0 otherwise.
    pub fn sample_iterations(&self) -> u64 {
        self.sample_iters
    }

    /// Duration mode: the phase the run is in.
    pub fn phase(&self) -> Option<Phase> {
        self.phases.map(|p| p.phase())
    }

    /// Duration mode: the sample's first and last TSC stamps.
    pub fn sample_window(&self) -> Option<(u64, u64)> {
        self.phases.map(|p| (p.sample_start, p.sample_end))
    }

    /// The parameters the sender runs.
    pub fn params(&self) -> &BwParams {
        &self.p
    }

    /// Whether the sender has been stepped (its first step starts posting).
    pub fn started(&self) -> bool {
        self.started
    }

    /// Message `m`'s work request kind and local gather entry.
    fn request(&self, m: u64) -> (WrOpcode, Sge) {
        match self.verb {
            BwVerb::Send => (WrOpcode::Send, self.sge),
            BwVerb::Write { remote_addr, rkey } => {
                (WrOpcode::RdmaWrite { remote_addr, rkey }, self.sge)
            }
            BwVerb::Read { remote_addr, rkey } => {
                (WrOpcode::RdmaRead { remote_addr, rkey }, self.sge)
            }
            BwVerb::Atomic {
                op,
                remote_addr,
                rkey,
            } => {
                let remote_addr = remote_addr + (m % ATOMIC_WORDS) * ATOMIC_STRIDE;
                let seen = atomic_expected(m);
                let opcode = match op {
                    AtomicOp::FetchAndAdd => WrOpcode::AtomicFetchAndAdd {
                        remote_addr,
                        rkey,
                        add: 1,
                    },
                    AtomicOp::CmpAndSwap => WrOpcode::AtomicCmpAndSwp {
                        remote_addr,
                        rkey,
                        compare: seen,
                        swap: seen + 1,
                    },
                };
                let sge = Sge {
                    addr: atomic_slot(self.sge.addr, self.p.tx_depth, m),
                    ..self.sge
                };
                (opcode, sge)
            }
        }
    }

    /// Whether another list may be posted: the tx depth has room and, with `-n`, messages
    /// remain; with `-D`, until the end, then only to complete the moderation batch in
    /// progress, so that a signaled completion covers every message posted.
    fn may_post(&self, phase: Phase, list: u64, q: u64) -> bool {
        if self.posted - self.completed + list > u64::from(self.p.tx_depth) {
            return false;
        }
        match self.phases {
            None => self.posted < self.p.iterations,
            Some(_) => phase != Phase::End || !self.posted.is_multiple_of(q),
        }
    }

    /// [`BwSender::step_checked`] without a data check.
    pub fn step(
        &mut self,
        dev: &mut D,
        clock: &mut impl FnMut() -> u64,
    ) -> Result<StreamState, StreamError> {
        self.step_checked(dev, clock, &mut |_| Ok(()))
    }

    /// Posts what the tx depth allows and retires what the send CQ reports. `clock` reads
    /// the TSC; as in perftest it is read before each list is posted and after each
    /// completion is taken, so the stamps are the moments themselves, not the step's start.
    /// `check` is given the messages each completion retired (off the stamps: after the
    /// stamp is taken) and answers `Err(message)` if one's data is wrong, which ends the run
    /// with [`StreamError::Check`]. Call until it returns [`StreamState::Done`].
    pub fn step_checked(
        &mut self,
        dev: &mut D,
        clock: &mut impl FnMut() -> u64,
        check: &mut impl FnMut(core::ops::Range<u64>) -> Result<(), u64>,
    ) -> Result<StreamState, StreamError> {
        let n = self.p.iterations;
        let list = u64::from(self.p.post_list);
        let q = u64::from(self.p.cq_mod);
        let duration = self.phases.is_some();
        let mut phase = Phase::Idle;
        if !self.started {
            self.started = true;
            let now = clock();
            self.last_progress = now;
            if let Some(ph) = self.phases.as_mut() {
                phase = ph.start(now);
            }
        } else if let Some(ph) = self.phases.as_mut() {
            phase = ph.advance(clock());
        }
        while self.may_post(phase, list, q) {
            if !self.p.no_peak {
                self.tposted[self.posted as usize] = clock();
            } else if self.posted == 0 && !duration {
                self.tposted[0] = clock();
            }
            let count = if duration {
                list
            } else {
                list.min(n - self.posted)
            };
            let first = self.posted;
            let mut sges = core::mem::take(&mut self.list_sges);
            sges.clear();
            sges.extend((first..first + count).map(|m| self.request(m).1));
            let this = &*self;
            let list = sges.iter().zip(first..).map(|(sge, m)| {
                let mut flags = SendFlags::empty();
                if (m + 1).is_multiple_of(q) || (!duration && m + 1 == n) {
                    flags |= SendFlags::SIGNALED;
                }
                let payload = if this.inline.is_empty() {
                    Payload::Sges(core::slice::from_ref(sge))
                } else {
                    Payload::Inline(&this.inline)
                };
                SendWr {
                    wr_id: m,
                    opcode: this.request(m).0,
                    payload,
                    flags,
                    ud: this.ud,
                }
            });
            let r = dev.post_send_list(self.qp, list);
            self.list_sges = sges;
            let done = match r {
                Ok(k) => k,
                Err(bad) => bad.index,
            } as u64;
            if done > 0 {
                self.doorbells += 1;
            }
            self.posted += done;
            r.map_err(|bad| StreamError::Verbs(bad.error))?;
        }
        if self.completed < self.posted {
            let got = dev.poll_cq(self.send_cq, &mut self.wc)?;
            let mut now = 0;
            if duration && got > 0 {
                now = clock();
                if let Some(ph) = self.phases.as_mut() {
                    phase = ph.advance(now);
                }
            }
            for i in 0..got {
                let wc = self.wc[i];
                if !duration {
                    now = clock();
                }
                if wc.status != WcStatus::Success {
                    return Err(StreamError::Completion {
                        status: wc.status,
                        wr_id: wc.wr_id,
                    });
                }
                self.signaled_seen += 1;
                let first = self.completed;
                self.completed = if duration {
                    self.completed + q
                } else {
                    (self.completed + q).min(n)
                };
                if duration {
                    if phase == Phase::Sample {
                        self.sample_iters += self.completed - first;
                    }
                } else if self.p.no_peak {
                    self.tcompleted[0] = now;
                } else {
                    self.tcompleted[self.completed as usize - 1] = now;
                }
                check(first..self.completed).map_err(|message| StreamError::Check { message })?;
            }
            if got > 0 {
                self.last_progress = now;
            } else if clock().saturating_sub(self.last_progress) > self.stall_cycles {
                return Err(StreamError::Stalled {
                    posted: self.posted,
                    completed: self.completed,
                });
            }
        }
        let finished = match self.phases {
            None => self.completed == n,
            Some(_) => {
                phase == Phase::End
                    && self.posted.is_multiple_of(q)
                    && self.completed == self.posted
            }
        };
        Ok(if finished {
            StreamState::Done
        } else {
            StreamState::Running
        })
    }

    /// perftest's figures for the finished run. When the moderation leaves `tcompleted[0]`
    /// unstamped, it takes the end stamp, so the peak search starts from the whole run. In
    /// duration mode: the messages retired during the sample over the sample's cycles.
    pub fn report(&mut self, tsc_mhz: f64, unit: BwUnit) -> Result<BwReport, BwError> {
        let mut iterations = self.p.iterations;
        if let Some(ph) = self.phases {
            self.tposted[0] = ph.sample_start;
            self.tcompleted[0] = ph.sample_end;
            iterations = self.sample_iters;
        } else if !self.p.no_peak && self.p.cq_mod > 1 && self.completed > 0 {
            self.tcompleted[0] = self.tcompleted[self.completed as usize - 1];
        }
        perftest_bw(&BwInput {
            size: u64::from(self.p.size),
            tposted: &self.tposted,
            tcompleted: &self.tcompleted,
            iterations,
            post_list: u64::from(self.p.post_list),
            cq_mod: u64::from(self.p.cq_mod),
            no_peak: self.p.no_peak,
            tsc_mhz,
            unit,
        })
    }
}

/// What the SEND receiver counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvTally {
    /// Messages the sender sent (the receiver expects this many). In duration mode, 0 until
    /// the sender's total is known ([`BwReceiver::sender_done_total`]).
    pub expected: u64,
    pub received: u64,
    /// Payload bytes received (UD: without the 40-byte GRH slot).
    pub bytes: u64,
    /// Receives posted in all.
    pub posted: u64,
    /// Duration mode: messages received during the receiver's sample.
    pub sample: u64,
}

impl RecvTally {
    /// Messages that never arrived.
    pub fn lost(&self) -> u64 {
        self.expected.saturating_sub(self.received)
    }
}

/// What a SEND receiver expects and where it receives.
#[derive(Clone, Copy, Debug)]
pub struct RecvSetup {
    /// Every receive targets this buffer, which must hold a message plus `grh` bytes.
    pub sge: Sge,
    /// Bytes of the GRH slot ahead of the payload: 40 on UD, 0 otherwise.
    pub grh: u32,
    /// Receives kept posted.
    pub rx_depth: u32,
    /// Messages the sender sends (not used in duration mode).
    pub iterations: u64,
    /// Once the sender is done, how long (in TSC cycles) without a completion ends the run.
    pub drain_cycles: u64,
    /// `-D`: the receiver's own phases, started by its first message as in perftest.
    pub duration: Option<BwDuration>,
}

/// The receiving side of `ib_send_bw` for one size (perftest's `run_iter_bw_server`).
pub struct BwReceiver<D: Device> {
    qp: D::Qp,
    recv_cq: D::Cq,
    sge: Sge,
    rx_depth: u32,
    grh: u32,
    tally: RecvTally,
    /// The total is known: from the setup (`-n`) or from the sender (`-D`).
    expected_known: bool,
    sender_done_at: Option<u64>,
    last_progress: u64,
    drain_cycles: u64,
    phases: Option<Phases>,
    first_rx: u64,
    last_rx: u64,
    wc: [WorkCompletion; POLL_BATCH],
}

impl<D: Device> BwReceiver<D> {
    /// A receiver for `setup` on `qp`, polling `recv_cq`. Posts the first
    /// `min(rx_depth, iterations)` receives (`rx_depth` in duration mode) now, before the
    /// sender may start.
    pub fn new(
        dev: &mut D,
        qp: D::Qp,
        recv_cq: D::Cq,
        setup: RecvSetup,
    ) -> Result<Self, StreamError> {
        let duration = setup.duration.is_some();
        let mut r = BwReceiver {
            qp,
            recv_cq,
            sge: setup.sge,
            rx_depth: setup.rx_depth,
            grh: setup.grh,
            tally: RecvTally {
                expected: if duration { 0 } else { setup.iterations },
                ..RecvTally::default()
            },
            expected_known: !duration,
            sender_done_at: None,
            last_progress: 0,
            drain_cycles: setup.drain_cycles,
            phases: setup.duration.map(Phases::new),
            first_rx: 0,
            last_rx: 0,
            wc: [WorkCompletion::default(); POLL_BATCH],
        };
        let first = if duration {
            u64::from(setup.rx_depth)
        } else {
            u64::from(setup.rx_depth).min(setup.iterations)
        };
        for _ in 0..first {
            r.post_one(dev)?;
        }
        Ok(r)
    }

    fn post_one(&mut self, dev: &mut D) -> Result<(), StreamError> {
        let sges = [self.sge];
        dev.post_recv(
            self.qp,
            &RecvWr {
                wr_id: self.tally.posted,
                sg_list: &sges,
            },
        )?;
        self.tally.posted += 1;
        Ok(())
    }

    /// The sender has retired all its messages (in a real run: its closing message says so).
    pub fn sender_done(&mut self, now: u64) {
        self.sender_done_at.get_or_insert(now);
    }

    /// Duration mode: the sender is done and sent `total` messages in all, which the
    /// receiver now expects (iteration mode: as [`BwReceiver::sender_done`]).
    pub fn sender_done_total(&mut self, now: u64, total: u64) {
        if !self.expected_known {
            self.tally.expected = total;
            self.expected_known = true;
        }
        self.sender_done(now);
    }

    pub fn tally(&self) -> RecvTally {
        self.tally
    }

    /// The receives the receiver keeps posted.
    pub fn rx_depth(&self) -> u32 {
        self.rx_depth
    }

    /// Duration mode: the receiver's phase.
    pub fn phase(&self) -> Option<Phase> {
        self.phases.map(|p| p.phase())
    }

    fn all_in(&self) -> bool {
        self.expected_known && self.tally.received == self.tally.expected
    }

    /// Counts what arrived and re-posts receives; `now` is the TSC.
    pub fn step(&mut self, dev: &mut D, now: u64) -> Result<StreamState, StreamError> {
        self.step_in(dev, now, None)
    }

    /// [`BwReceiver::step`]; with `shared` (the bidirectional stream), messages are counted
    /// in the sample by that phase, the node's one duration state, instead of the receiver's.
    pub(super) fn step_in(
        &mut self,
        dev: &mut D,
        now: u64,
        shared: Option<Phase>,
    ) -> Result<StreamState, StreamError> {
        if self.all_in() {
            return Ok(StreamState::Done);
        }
        // As perftest's receiver, take every completion there is before looking elsewhere
        // (bounded: at most `rx_depth` receives can have completed).
        let mut phase = shared.unwrap_or(Phase::Idle);
        let mut took = 0u64;
        loop {
            let got = dev.poll_cq(self.recv_cq, &mut self.wc)?;
            if got > 0 && took == 0 {
                if self.tally.received == 0 {
                    self.first_rx = now;
                }
                self.last_rx = now;
                if shared.is_none() {
                    if let Some(ph) = self.phases.as_mut() {
                        phase = ph.start(now);
                    }
                }
            } else if got == 0 && took == 0 && shared.is_none() {
                if let Some(ph) = self.phases.as_mut() {
                    phase = ph.advance(now);
                }
            }
            for i in 0..got {
                let wc = self.wc[i];
                if wc.status != WcStatus::Success {
                    return Err(StreamError::Completion {
                        status: wc.status,
                        wr_id: wc.wr_id,
                    });
                }
                self.tally.received += 1;
                self.tally.bytes += u64::from(wc.byte_len.saturating_sub(self.grh));
                if phase == Phase::Sample {
                    self.tally.sample += 1;
                }
                let more = if self.expected_known {
                    self.tally.posted < self.tally.expected
                } else {
                    true
                };
                if more {
                    self.post_one(dev)?;
                }
            }
            took += got as u64;
            if got < POLL_BATCH || took >= u64::from(self.rx_depth.max(1)) {
                break;
            }
        }
        let got = took;
        if got > 0 {
            self.last_progress = now;
        }
        if self.all_in() {
            return Ok(StreamState::Done);
        }
        if let Some(done) = self.sender_done_at {
            let quiet_since = self.last_progress.max(done);
            if now.saturating_sub(quiet_since) > self.drain_cycles {
                return Ok(StreamState::Done);
            }
        }
        Ok(StreamState::Running)
    }

    /// The receiver's own figures, as perftest's passive SEND side prints them (no peak):
    /// with `-n`, the messages received from the first arrival to the last; with `-D`, the
    /// messages received during its sample over the sample's cycles.
    pub fn report(&self, size: u32, tsc_mhz: f64, unit: BwUnit) -> Result<BwReport, BwError> {
        let (start, end, n) = match self.phases {
            Some(ph) => (ph.sample_start, ph.sample_end, self.tally.sample),
            None => (self.first_rx, self.last_rx, self.tally.received),
        };
        perftest_bw(&BwInput {
            size: u64::from(size),
            tposted: &[start],
            tcompleted: &[end],
            iterations: n,
            post_list: 1,
            cq_mod: 1,
            no_peak: true,
            tsc_mhz,
            unit,
        })
    }
}
