//! The bandwidth stream of `ib_send_bw` / `ib_write_bw` (perftest's `run_iter_bw` on the
//! sender, `run_iter_bw_server` on the SEND receiver) as two step-driven state machines over
//! the verbs API, so two nodes can share one thread.
//!
//! Sender: while fewer than `tx_depth` messages are outstanding it stamps the TSC and posts a
//! list of `post_list` messages (one `post_send` per message: the verbs API has no list post,
//! so a list costs one doorbell per message), message `m` signaled when `(m + 1) % cq_mod == 0`
//! or it is the last; then it polls the send CQ, each completion retiring `cq_mod` messages
//! (the last one the remainder) and stamping `tcompleted`. A completion with an error status,
//! or no completion for `stall_cycles`, ends the run with an error: never a hang.
//!
//! Receiver (SEND): keeps up to `rx_depth` receives posted (re-posting after each completion
//! while fewer than `iterations` have been posted), counts completions and bytes. It finishes
//! when all `iterations` messages arrived, or, once told the sender is done
//! ([`BwReceiver::sender_done`]), after `drain_cycles` without a completion: what did not
//! arrive by then is reported as lost (UD/UC drop; RC retransmits and loses nothing).
//!
//! Memory for the stamps is taken when the state machine is built; stepping allocates nothing.

use alloc::vec;
use alloc::vec::Vec;

use verbs::{
    Device, Payload, RecvWr, SendFlags, SendWr, Sge, UdDest, WcStatus, WorkCompletion, WrOpcode,
};

use super::formula::{perftest_bw, BwError, BwInput, BwReport, BwUnit};

/// Completions taken per poll (perftest's `CTX_POLL_BATCH`).
pub const POLL_BATCH: usize = 16;

/// Which bandwidth test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BwVerb {
    /// `ib_send_bw`: SENDs into the receiver's posted receives.
    Send,
    /// `ib_write_bw`: RDMA WRITEs to `remote_addr`/`rkey` (every message to the same place).
    Write { remote_addr: u64, rkey: u32 },
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
        }
    }
}

impl BwParams {
    /// perftest's rules (`force_dependecies`): `-Q` is clamped to `-t`; a post list needs
    /// `-n` to be a multiple of it and itself to be a multiple of `-Q`. `cq_mod_given` false
    /// means `-Q` was not given: with a post list, the moderation becomes the list size.
    pub fn resolve(mut self, cq_mod_given: bool) -> Result<BwParams, BwParamError> {
        if self.iterations == 0 {
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
        if self.post_list > self.tx_depth {
            return Err(BwParamError::PostListOverTxDepth);
        }
        self.cq_mod = self.cq_mod.min(self.tx_depth);
        if self.post_list > 1 {
            if !self.iterations.is_multiple_of(u64::from(self.post_list)) {
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
    /// No send completion for the stall bound with messages outstanding.
    Stalled {
        posted: u64,
        completed: u64,
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

/// The sending side of one size.
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
    posted: u64,
    completed: u64,
    signaled_seen: u64,
    doorbells: u64,
    last_progress: u64,
    stall_cycles: u64,
    wc: [WorkCompletion; POLL_BATCH],
}

impl<D: Device> BwSender<D> {
    /// A sender of `p` (already [`BwParams::resolve`]d) posting from `sge` (its `length` is
    /// replaced by `p.size`) on `qp`, polling `send_cq`. Messages of at most `p.inline_size`
    /// bytes are copied into the WQE from a zeroed buffer of the sender's own.
    pub fn new(
        p: BwParams,
        verb: BwVerb,
        qp: D::Qp,
        send_cq: D::Cq,
        ud: Option<UdDest<D::Ah>>,
        sge: Sge,
        stall_cycles: u64,
    ) -> Self {
        let stamps = if p.no_peak { 1 } else { p.iterations as usize };
        BwSender {
            p,
            verb,
            qp,
            send_cq,
            ud,
            sge: Sge {
                length: p.size,
                ..sge
            },
            tposted: vec![0; stamps],
            tcompleted: vec![0; stamps],
            inline: if p.size <= p.inline_size {
                vec![0; p.size as usize]
            } else {
                Vec::new()
            },
            posted: 0,
            completed: 0,
            signaled_seen: 0,
            doorbells: 0,
            last_progress: 0,
            stall_cycles,
            wc: [WorkCompletion::default(); POLL_BATCH],
        }
    }

    /// Messages posted and completed so far, and the signaled completions seen.
    pub fn counts(&self) -> (u64, u64, u64) {
        (self.posted, self.completed, self.signaled_seen)
    }

    /// `post_send` calls made (one per message: see the module doc).
    pub fn doorbells(&self) -> u64 {
        self.doorbells
    }

    /// Posts what the tx depth allows and retires what the send CQ reports. `clock` reads
    /// the TSC; as in perftest it is read before each list is posted and after each
    /// completion is taken, so the stamps are the moments themselves, not the step's start.
    /// TSC. Call until it returns [`StreamState::Done`].
    pub fn step(
        &mut self,
        dev: &mut D,
        clock: &mut impl FnMut() -> u64,
    ) -> Result<StreamState, StreamError> {
        let n = self.p.iterations;
        let list = u64::from(self.p.post_list);
        let q = u64::from(self.p.cq_mod);
        if self.posted == 0 && self.completed == 0 {
            self.last_progress = clock();
        }
        while self.posted < n && self.posted - self.completed + list <= u64::from(self.p.tx_depth) {
            if !self.p.no_peak {
                self.tposted[self.posted as usize] = clock();
            } else if self.posted == 0 {
                self.tposted[0] = clock();
            }
            for _ in 0..list.min(n - self.posted) {
                let m = self.posted;
                let mut flags = SendFlags::empty();
                if (m + 1).is_multiple_of(q) || m + 1 == n {
                    flags |= SendFlags::SIGNALED;
                }
                let sges = [self.sge];
                let payload = if self.inline.is_empty() {
                    Payload::Sges(&sges)
                } else {
                    Payload::Inline(&self.inline)
                };
                let opcode = match self.verb {
                    BwVerb::Send => WrOpcode::Send,
                    BwVerb::Write { remote_addr, rkey } => {
                        WrOpcode::RdmaWrite { remote_addr, rkey }
                    }
                };
                dev.post_send(
                    self.qp,
                    &SendWr {
                        wr_id: m,
                        opcode,
                        payload,
                        flags,
                        ud: self.ud,
                    },
                )?;
                self.doorbells += 1;
                self.posted += 1;
            }
        }
        if self.completed < n {
            let got = dev.poll_cq(self.send_cq, &mut self.wc)?;
            let mut now = 0;
            for wc in &self.wc[..got] {
                now = clock();
                if wc.status != WcStatus::Success {
                    return Err(StreamError::Completion {
                        status: wc.status,
                        wr_id: wc.wr_id,
                    });
                }
                self.signaled_seen += 1;
                self.completed = (self.completed + q).min(n);
                if self.p.no_peak {
                    self.tcompleted[0] = now;
                } else {
                    self.tcompleted[self.completed as usize - 1] = now;
                }
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
        if self.completed == n {
            return Ok(StreamState::Done);
        }
        Ok(StreamState::Running)
    }

    /// perftest's figures for the finished run. When the moderation leaves `tcompleted[0]`
    /// unstamped, it takes the end stamp, so the peak search starts from the whole run.
    pub fn report(&mut self, tsc_mhz: f64, unit: BwUnit) -> Result<BwReport, BwError> {
        if !self.p.no_peak && self.p.cq_mod > 1 && self.completed > 0 {
            self.tcompleted[0] = self.tcompleted[self.completed as usize - 1];
        }
        perftest_bw(&BwInput {
            size: u64::from(self.p.size),
            tposted: &self.tposted,
            tcompleted: &self.tcompleted,
            iterations: self.p.iterations,
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
    /// Messages the sender sent (the receiver expects this many).
    pub expected: u64,
    pub received: u64,
    /// Payload bytes received (UD: without the 40-byte GRH slot).
    pub bytes: u64,
    /// Receives posted in all.
    pub posted: u64,
}

impl RecvTally {
    /// Messages that never arrived.
    pub fn lost(&self) -> u64 {
        self.expected - self.received
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
    /// Messages the sender sends.
    pub iterations: u64,
    /// Once the sender is done, how long (in TSC cycles) without a completion ends the run.
    pub drain_cycles: u64,
}

/// The receiving side of `ib_send_bw` for one size.
pub struct BwReceiver<D: Device> {
    qp: D::Qp,
    recv_cq: D::Cq,
    sge: Sge,
    rx_depth: u32,
    grh: u32,
    tally: RecvTally,
    sender_done_at: Option<u64>,
    last_progress: u64,
    drain_cycles: u64,
    wc: [WorkCompletion; POLL_BATCH],
}

impl<D: Device> BwReceiver<D> {
    /// A receiver for `setup` on `qp`, polling `recv_cq`. Posts the first
    /// `min(rx_depth, iterations)` receives now, before the sender may start.
    pub fn new(
        dev: &mut D,
        qp: D::Qp,
        recv_cq: D::Cq,
        setup: RecvSetup,
    ) -> Result<Self, StreamError> {
        let mut r = BwReceiver {
            qp,
            recv_cq,
            sge: setup.sge,
            rx_depth: setup.rx_depth,
            grh: setup.grh,
            tally: RecvTally {
                expected: setup.iterations,
                ..RecvTally::default()
            },
            sender_done_at: None,
            last_progress: 0,
            drain_cycles: setup.drain_cycles,
            wc: [WorkCompletion::default(); POLL_BATCH],
        };
        for _ in 0..u64::from(setup.rx_depth).min(setup.iterations) {
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

    pub fn tally(&self) -> RecvTally {
        self.tally
    }

    /// The receives the receiver keeps posted.
    pub fn rx_depth(&self) -> u32 {
        self.rx_depth
    }

    /// Counts what arrived and re-posts receives; `now` is the TSC.
    pub fn step(&mut self, dev: &mut D, now: u64) -> Result<StreamState, StreamError> {
        if self.tally.received == self.tally.expected {
            return Ok(StreamState::Done);
        }
        let got = dev.poll_cq(self.recv_cq, &mut self.wc)?;
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
            if self.tally.posted < self.tally.expected {
                self.post_one(dev)?;
            }
        }
        if got > 0 {
            self.last_progress = now;
        }
        if self.tally.received == self.tally.expected {
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
}
