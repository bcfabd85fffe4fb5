//! The shared-receive-queue ping-pong, ibkern's counterpart of rdma-core's `ibv_srq_pingpong`
//! (docs/benchmarks.md): several RC QPs on one CQ take all their receives from one SRQ; each
//! QP ping-pongs on its own, the client opening every QP with a send and each side answering
//! a QP once both its last send and its last receive on that QP have completed. The SRQ is
//! refilled in a batch when no more than one receive per QP is left, as the example does.
//!
//! Unlike the example, the data of every message is always checked: a message names its QP
//! index and its sequence number on that QP, and its bytes follow from both, so a receive
//! that landed in the wrong buffer, on the wrong QP or out of order is reported.
//!
//! With `events` (the example's `-e`) a side sleeps on its CQ's completion event whenever
//! the CQ is empty: poll it empty, arm it, poll once more, sleep (bounded), as perftest's
//! event mode does. (The example re-arms before polling; on ConnectX an arm that finds
//! unpolled completions raises its event at once, which would defeat moderation.) `moderation` applies `modify_cq` (cq_max_count, cq_period) to
//! the CQ before the run, for the moderation sweep (docs/benchmarks.md).
//!
//! Everything is allocated in [`SrqPingPong::new`]; [`SrqPingPong::step`] only polls, checks
//! and posts. The two sides exchange their [`SrqEndpoint`]s out of band (a host test hands
//! them over directly).

use alloc::vec::Vec;
use verbs::{
    AccessFlags, AhAttr, CqModeration, Device, Mtu, Payload, QpAttr, QpCap, QpInitAttr, QpState,
    QpType, RecvWr, SendFlags, SendWr, Sge, SrqAttr, WcOpcode, WcStatus, WorkCompletion,
};

use crate::env::BenchEnv;
use crate::perftest::BenchError;
use crate::resources::Resources;

pub mod session;

/// A message's header: sequence number and QP index, both little-endian `u32`.
pub(crate) const HEADER: usize = 8;
/// Send work requests carry this bit and the QP index; receives carry their slot number.
const SEND_TAG: u64 = 1 << 63;
const PENDING_SEND: u8 = 1;
const PENDING_RECV: u8 = 2;
/// Completions taken per poll.
const POLL_BATCH: usize = 16;

/// What to run (`ibv_srq_pingpong`'s `-q`, `-s`, `-r`, `-n`, `-e`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqConfig {
    pub client: bool,
    pub port: u8,
    /// QPs sharing the SRQ (`-q`, default 16).
    pub qps: u32,
    /// Message size in bytes (`-s`); at least the 8-byte header.
    pub size: u32,
    /// Receives kept posted on the SRQ (`-r`); at least one per QP.
    pub rx_depth: u32,
    /// Messages each side sends, over all QPs together (`-n`).
    pub iters: u32,
    pub mtu: Mtu,
    /// Longest the run may go without a completion.
    pub wait_timeout_ns: u64,
    /// Sleep on completion events instead of busy-polling (`-e`).
    pub events: bool,
    /// CQ event moderation applied to the CQ before the run (`None`: left as created, an
    /// event per armed completion).
    pub moderation: Option<CqModeration>,
    /// Event mode: longest a side sleeps on the event before polling anyway. Count-only
    /// moderation holds the event of a side's last completions for ever (its peer sends
    /// nothing more); this bound finds them. Above the longest cq_period (65.535 ms), so a
    /// period always fires first.
    pub event_fallback_ns: u64,
}

impl SrqConfig {
    /// `ibv_srq_pingpong`'s defaults (the `qps`, `rx_depth` and `test=srq_pingpong` keys'):
    /// 4096-byte messages, 500 receives, 1000 iterations, 16 QPs; MTU 1024.
    pub fn new(client: bool) -> Self {
        SrqConfig {
            client,
            port: 1,
            qps: crate::config::SRQ_DEFAULT_QPS,
            size: crate::config::SRQ_DEFAULT_SIZE,
            rx_depth: crate::config::SRQ_DEFAULT_RX_DEPTH,
            iters: crate::config::DEFAULT_ITERATIONS,
            mtu: Mtu::Mtu1024,
            wait_timeout_ns: 1_000_000_000,
            events: false,
            moderation: None,
            event_fallback_ns: 100_000_000,
        }
    }

    /// The configuration's limits of an SRQ run ([`crate::config::check_srq`]), for a run
    /// built from anything but a checked configuration.
    fn check(&self) -> Result<(), crate::config::Rule> {
        crate::config::check_srq(self.qps, self.rx_depth, self.size, self.iters)
    }
}

/// One QP's address for the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqEndpoint {
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
}

/// What a finished run did.
#[derive(Clone, Debug, PartialEq)]
pub struct SrqSummary {
    pub iters: u32,
    pub size: u32,
    /// From the first send (client) or the first message received (server, which until
    /// then only waits for its peer) to the last completion.
    pub elapsed_ns: u64,
    /// Messages received on each QP, in QP order.
    pub received_per_qp: Vec<u32>,
    /// Times the SRQ was refilled.
    pub refills: u32,
    /// Round trips measured on this side, one per message received: from posting a QP's
    /// send to the completion of the next receive on that QP (the peer's answer, or on the
    /// server the client's next message), in microseconds. `None` before any receive.
    pub rtt: Option<Rtt>,
    /// Completion events taken (event mode; 0 when busy-polling).
    pub events: u32,
    /// Event mode: sleeps that ran out of `event_fallback_ns` and polled anyway (a server's
    /// wait for its client's first message not counted).
    pub fallbacks: u32,
}

/// Typical (median) and average of the round trips, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rtt {
    pub samples: u32,
    pub typical_us: f64,
    pub avg_us: f64,
}

impl SrqSummary {
    /// Microseconds per iteration, as `ibv_srq_pingpong` prints it.
    pub fn usec_per_iter(&self) -> f64 {
        self.elapsed_ns as f64 / 1000.0 / f64::from(self.iters)
    }

    /// Bytes moved (each side counts what it sent and received, as the example does:
    /// `2 * iters * size`).
    pub fn bytes(&self) -> u64 {
        2 * u64::from(self.iters) * u64::from(self.size)
    }

    /// Megabits per second over the run, as `ibv_srq_pingpong` prints it (bytes * 8 / µs).
    pub fn mbit_per_sec(&self) -> f64 {
        if self.elapsed_ns == 0 {
            return 0.0;
        }
        self.bytes() as f64 * 8.0 * 1000.0 / self.elapsed_ns as f64
    }
}

/// Whether a side has more to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SrqStatus {
    Running,
    Done,
}

fn vb(during: &'static str) -> impl FnOnce(verbs::Error) -> BenchError {
    move |err| BenchError::Verbs { during, err }
}

/// Byte `k` of the message with sequence number `seq` on QP `q`.
fn pattern(q: u32, seq: u32, k: usize) -> u8 {
    (seq.wrapping_mul(7) ^ q.wrapping_mul(31)).wrapping_add(k as u32) as u8
}

/// Median and mean of `cycles` (sorted in place) in microseconds at `tsc_mhz`.
fn rtt_stats(cycles: &mut [u64], tsc_mhz: f64) -> Option<Rtt> {
    if cycles.is_empty() || tsc_mhz <= 0.0 {
        return None;
    }
    cycles.sort_unstable();
    let n = cycles.len();
    let median = if n % 2 == 1 {
        cycles[n / 2] as f64
    } else {
        (cycles[n / 2 - 1] as f64 + cycles[n / 2] as f64) / 2.0
    };
    let sum: u128 = cycles.iter().map(|&c| u128::from(c)).sum();
    Some(Rtt {
        samples: n as u32,
        typical_us: median / tsc_mhz,
        avg_us: sum as f64 / n as f64 / tsc_mhz,
    })
}

/// One side of the SRQ ping-pong.
pub struct SrqPingPong<D: Device> {
    cfg: SrqConfig,
    /// Everything made on the device (released by [`Self::close`]).
    objs: Resources<D>,
    cq: Option<D::Cq>,
    srq: Option<D::Srq>,
    qps: Vec<D::Qp>,
    qpns: Vec<u32>,
    lkey: u32,
    lid: u16,
    /// Per QP: which of its last send and receive are still outstanding.
    pending: Vec<u8>,
    sent_per_qp: Vec<u32>,
    recv_per_qp: Vec<u32>,
    /// Receive slots not posted on the SRQ.
    free_slots: Vec<u32>,
    /// Receives posted on the SRQ.
    routs: u32,
    posted: u32,
    scnt: u32,
    rcnt: u32,
    refills: u32,
    started_ns: u64,
    last_progress_ns: u64,
    ended_ns: u64,
    events: u32,
    /// Event mode: the CQ is armed and no event has been taken since.
    armed: bool,
    /// Event waits that ran out of `event_fallback_ns` and polled anyway.
    fallbacks: u32,
    /// Event mode: when the current sleep began.
    waiting_since: Option<u64>,
    /// Per QP: the TSC when its last send was posted, until the next receive on it.
    sent_at: Vec<Option<u64>>,
    /// Round trips in TSC cycles, one per receive (allocated up front).
    rtts: Vec<u64>,
    tsc_mhz: f64,
}

impl<D: Device> SrqPingPong<D> {
    /// Creates the PD, buffer, CQ, SRQ and QPs (in INIT) and posts `rx_depth` receives.
    pub fn new<E: BenchEnv>(dev: &mut D, env: &mut E, cfg: SrqConfig) -> Result<Self, BenchError> {
        cfg.check()
            .map_err(|rule| BenchError::Config(crate::config::ConfigError::Invalid(rule)))?;
        let n = cfg.qps as usize;
        let mut pp = SrqPingPong {
            cfg,
            objs: Resources::new(),
            cq: None,
            srq: None,
            qps: Vec::with_capacity(n),
            qpns: Vec::with_capacity(n),
            lkey: 0,
            lid: 0,
            pending: alloc::vec![0; n],
            sent_per_qp: alloc::vec![0; n],
            recv_per_qp: alloc::vec![0; n],
            free_slots: Vec::new(),
            routs: 0,
            posted: 0,
            scnt: 0,
            rcnt: 0,
            refills: 0,
            started_ns: 0,
            last_progress_ns: 0,
            ended_ns: 0,
            events: 0,
            armed: false,
            fallbacks: 0,
            waiting_since: None,
            sent_at: alloc::vec![None; n],
            rtts: Vec::new(),
            tsc_mhz: env.tsc_mhz(),
        };
        // The per-run arrays from the heap, refused rather than aborting when it is short.
        let reserved = pp
            .free_slots
            .try_reserve_exact(cfg.rx_depth as usize)
            .and_then(|()| pp.rtts.try_reserve_exact(cfg.iters as usize));
        if reserved.is_err() {
            return Err(BenchError::NoMemory("srq ping-pong round-trip samples"));
        }
        if let Err(e) = pp.build(dev, env) {
            pp.close(dev);
            return Err(e);
        }
        Ok(pp)
    }

    fn build<E: BenchEnv>(&mut self, dev: &mut D, env: &mut E) -> Result<(), BenchError> {
        let cfg = self.cfg;
        let port = dev.query_port(cfg.port).map_err(vb("query_port"))?;
        if port.state != verbs::PortState::Active {
            return Err(BenchError::PortNotActive {
                port: cfg.port,
                state: port.state,
            });
        }
        self.lid = port.lid;
        // Layout: one send slot per QP (each QP has one send outstanding at most), then the
        // receive slots.
        let slots = cfg.qps as usize + cfg.rx_depth as usize;
        let total = slots * cfg.size as usize;
        let objs = &mut self.objs;
        objs.alloc_buffer(env, total, "srq ping-pong buffer")?;
        let pd = objs.alloc_pd(dev)?;
        let mr = objs.reg_buffer(dev, pd, AccessFlags::LOCAL_WRITE)?;
        self.lkey = dev.mr_lkey(mr);
        // One CQ for every send and receive, as the example sizes it.
        let cq = objs.create_cq(dev, cfg.rx_depth + cfg.qps, "create_cq")?;
        self.cq = Some(cq);
        if let Some(m) = cfg.moderation {
            dev.modify_cq(cq, m).map_err(vb("modify_cq"))?;
        }
        let srq = self.objs.create_srq(
            dev,
            pd,
            &SrqAttr {
                max_wr: cfg.rx_depth,
                max_sge: 1,
                srq_limit: 0,
            },
        )?;
        self.srq = Some(srq);
        let init = QpInitAttr {
            pd,
            send_cq: cq,
            recv_cq: cq,
            qp_type: QpType::Rc,
            cap: QpCap {
                max_send_wr: 1,
                max_recv_wr: 0,
                max_send_sge: 1,
                max_recv_sge: 0,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        };
        for _ in 0..cfg.qps {
            let qp = self.objs.create_qp_with_srq(dev, &init, srq)?;
            self.qps.push(qp);
            self.qpns.push(dev.qp_num(qp));
            let mut a = QpAttr::new(QpState::Init);
            a.port_num = cfg.port;
            dev.modify_qp(qp, &a).map_err(vb("modify_qp (INIT)"))?;
        }
        for slot in (0..cfg.rx_depth).rev() {
            self.free_slots.push(slot);
        }
        self.refill(dev)
    }

    /// This side's QPs, to hand to the peer.
    pub fn endpoints(&self) -> impl Iterator<Item = SrqEndpoint> + '_ {
        self.qpns.iter().map(move |&qpn| SrqEndpoint {
            lid: self.lid,
            qpn,
            psn: 0,
        })
    }

    /// Connects QP `i` to the peer's QP `i` (RTR, RTS); the client then opens every QP with a
    /// send. `peer` must name as many QPs as this side has.
    pub fn connect<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &E,
        peer: &[SrqEndpoint],
    ) -> Result<(), BenchError> {
        if peer.len() != self.qps.len() {
            return Err(BenchError::PeerMismatch("number of QPs"));
        }
        for (i, r) in peer.iter().enumerate() {
            let qp = self.qps[i];
            let mut rtr = QpAttr::new(QpState::Rtr);
            rtr.path_mtu = self.cfg.mtu;
            rtr.dest_qp_num = r.qpn;
            rtr.rq_psn = r.psn;
            rtr.max_dest_rd_atomic = 1;
            rtr.min_rnr_timer = 12;
            rtr.ah = AhAttr {
                dlid: r.lid,
                port: self.cfg.port,
                ..AhAttr::default()
            };
            dev.modify_qp(qp, &rtr).map_err(vb("modify_qp (RTR)"))?;
            let mut rts = QpAttr::new(QpState::Rts);
            rts.sq_psn = 0;
            rts.max_rd_atomic = 1;
            dev.modify_qp(qp, &rts).map_err(vb("modify_qp (RTS)"))?;
        }
        self.started_ns = env.now_ns();
        self.last_progress_ns = self.started_ns;
        for q in 0..self.qps.len() {
            self.pending[q] = PENDING_RECV;
            if self.cfg.client && self.posted < self.cfg.iters {
                self.post_send(dev, env, q)?;
            }
        }
        Ok(())
    }

    fn slot_bus(&self, slot: usize) -> u64 {
        self.objs
            .buffer()
            .map_or(0, |b| b.bus_at(slot * self.cfg.size as usize))
    }

    fn post_send<E: BenchEnv>(&mut self, dev: &mut D, env: &E, q: usize) -> Result<(), BenchError> {
        let size = self.cfg.size as usize;
        let seq = self.sent_per_qp[q];
        if let Some(buf) = self.objs.buffer_mut() {
            let msg = &mut buf.bytes_mut()[q * size..(q + 1) * size];
            msg[..4].copy_from_slice(&seq.to_le_bytes());
            msg[4..8].copy_from_slice(&(q as u32).to_le_bytes());
            for (k, b) in msg.iter_mut().enumerate().skip(HEADER) {
                *b = pattern(q as u32, seq, k);
            }
        }
        let sge = [Sge {
            addr: self.slot_bus(q),
            length: self.cfg.size,
            lkey: self.lkey,
        }];
        self.sent_at[q] = Some(env.cycles());
        dev.post_send(
            self.qps[q],
            &SendWr {
                wr_id: SEND_TAG | q as u64,
                opcode: verbs::WrOpcode::Send,
                payload: Payload::Sges(&sge),
                flags: SendFlags::SIGNALED,
                ud: None,
            },
        )
        .map_err(vb("post_send"))?;
        self.sent_per_qp[q] += 1;
        self.posted += 1;
        self.pending[q] = PENDING_SEND | PENDING_RECV;
        Ok(())
    }

    /// Posts every free receive slot on the SRQ.
    fn refill(&mut self, dev: &mut D) -> Result<(), BenchError> {
        let Some(srq) = self.srq else {
            return Ok(());
        };
        while let Some(slot) = self.free_slots.pop() {
            let sge = [Sge {
                addr: self.slot_bus(self.cfg.qps as usize + slot as usize),
                length: self.cfg.size,
                lkey: self.lkey,
            }];
            if let Err(err) = dev.post_srq_recv(
                srq,
                &RecvWr {
                    wr_id: u64::from(slot),
                    sg_list: &sge,
                },
            ) {
                self.free_slots.push(slot);
                return Err(BenchError::Verbs {
                    during: "post_srq_recv",
                    err,
                });
            }
            self.routs += 1;
        }
        self.refills += 1;
        Ok(())
    }

    /// Checks the message in receive slot `slot`, which arrived on QP `q`.
    fn check(&self, q: usize, slot: usize, len: u32) -> Result<(), BenchError> {
        let size = self.cfg.size as usize;
        let bad = |offset: usize| BenchError::Payload {
            bytes: len,
            offset: offset as u32,
        };
        if len != self.cfg.size {
            return Err(bad(len as usize));
        }
        let Some(buf) = self.objs.buffer() else {
            return Err(bad(0));
        };
        let at = (self.cfg.qps as usize + slot) * size;
        if at + size > buf.size() {
            return Err(bad(0));
        }
        // SAFETY: `at + size` is inside the region (checked above), and this slot's receive
        // has completed and is posted again only after this check returns, so the device does
        // not write these bytes while the slice lives (other slots are not covered by it).
        let msg = unsafe { core::slice::from_raw_parts(buf.as_ptr().add(at), size) };
        let seq = self.recv_per_qp[q];
        if msg[..4] != seq.to_le_bytes() {
            return Err(bad(0));
        }
        if msg[4..8] != (q as u32).to_le_bytes() {
            return Err(bad(4));
        }
        for (k, &b) in msg.iter().enumerate().skip(HEADER) {
            if b != pattern(q as u32, seq, k) {
                return Err(bad(k));
            }
        }
        Ok(())
    }

    /// Polls the CQ once and acts on what it found, never blocking (host tests stepping
    /// both sides in one thread). A completion with an error, a message that fails its
    /// check, or `wait_timeout_ns` without any completion ends the run.
    pub fn step<E: BenchEnv>(&mut self, dev: &mut D, env: &mut E) -> Result<SrqStatus, BenchError> {
        self.step_waiting(dev, env, 0)
    }

    /// As [`step`](Self::step), but in event mode a step that finds the CQ empty and armed
    /// sleeps on its completion event for at most `event_wait_ns` (a node that owns the CPU
    /// passes a long wait; `event_fallback_ns` bounds every sleep).
    pub fn step_waiting<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        event_wait_ns: u64,
    ) -> Result<SrqStatus, BenchError> {
        if self.is_done() {
            return Ok(SrqStatus::Done);
        }
        let Some(cq) = self.cq else {
            return Err(BenchError::NoMemory("srq ping-pong not built"));
        };
        if self.cfg.events {
            return self.step_events(dev, env, cq, event_wait_ns);
        }
        let mut wc = [WorkCompletion::default(); POLL_BATCH];
        let n = dev.poll_cq(cq, &mut wc).map_err(vb("poll_cq"))?;
        if n == 0 {
            self.check_stalled(env)?;
            env.relax();
            return Ok(SrqStatus::Running);
        }
        self.last_progress_ns = env.now_ns();
        for c in &wc[..n] {
            self.complete(dev, env, c)?;
        }
        if self.is_done() {
            self.ended_ns = env.now_ns();
            return Ok(SrqStatus::Done);
        }
        Ok(SrqStatus::Running)
    }

    /// Event mode: poll the CQ empty; once empty, arm it and poll once more (a completion
    /// written before the arm would raise its event at once, one written after it counts
    /// toward the moderation); still empty, sleep on the event, bounded by what is left of
    /// `event_fallback_ns` and by `event_wait_ns`.
    fn step_events<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        cq: D::Cq,
        event_wait_ns: u64,
    ) -> Result<SrqStatus, BenchError> {
        // A side asleep stays asleep across steps until its event (or the bound) comes.
        let asleep = self.armed && self.waiting_since.is_some();
        if !asleep && self.poll_all(dev, env, cq)? > 0 {
            return Ok(self.status(env));
        }
        if !self.armed {
            dev.req_notify_cq(cq, false).map_err(vb("req_notify_cq"))?;
            self.armed = true;
            if self.poll_all(dev, env, cq)? > 0 {
                return Ok(self.status(env));
            }
        }
        let now = env.now_ns();
        let since = *self.waiting_since.get_or_insert(now);
        let left = self
            .cfg
            .event_fallback_ns
            .saturating_sub(now.saturating_sub(since));
        match dev.get_cq_event(cq, event_wait_ns.min(left)) {
            Ok(()) => {
                self.events += 1;
                self.armed = false;
                self.waiting_since = None;
            }
            Err(verbs::Error::Timeout(_)) => {
                if env.now_ns().saturating_sub(since) >= self.cfg.event_fallback_ns {
                    // No event within the bound: the next step polls anyway (the CQ stays
                    // armed).
                    // A server waiting for its client's first message misses no event.
                    if self.cfg.client || self.rcnt > 0 {
                        self.fallbacks += 1;
                    }
                    self.waiting_since = None;
                }
                self.check_stalled(env)?;
                env.relax();
            }
            Err(err) => {
                return Err(BenchError::Verbs {
                    during: "get_cq_event",
                    err,
                })
            }
        }
        Ok(SrqStatus::Running)
    }

    /// Polls until the CQ is empty, acting on every completion; returns how many.
    fn poll_all<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        cq: D::Cq,
    ) -> Result<usize, BenchError> {
        let mut total = 0;
        loop {
            let mut wc = [WorkCompletion::default(); POLL_BATCH];
            let n = dev.poll_cq(cq, &mut wc).map_err(vb("poll_cq"))?;
            if n == 0 {
                return Ok(total);
            }
            self.last_progress_ns = env.now_ns();
            for c in &wc[..n] {
                self.complete(dev, env, c)?;
            }
            total += n;
        }
    }

    fn status<E: BenchEnv>(&mut self, env: &E) -> SrqStatus {
        if self.is_done() {
            if self.ended_ns == 0 {
                self.ended_ns = env.now_ns();
            }
            SrqStatus::Done
        } else {
            SrqStatus::Running
        }
    }

    /// `wait_timeout_ns` without a completion ends the run.
    fn check_stalled<E: BenchEnv>(&self, env: &E) -> Result<(), BenchError> {
        if env.now_ns().saturating_sub(self.last_progress_ns) > self.cfg.wait_timeout_ns {
            return Err(if self.scnt < self.posted {
                BenchError::SendTimeout
            } else {
                BenchError::PeerLost
            });
        }
        Ok(())
    }

    fn complete<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &E,
        c: &WorkCompletion,
    ) -> Result<(), BenchError> {
        if c.status != WcStatus::Success {
            return Err(BenchError::Completion {
                during: if c.wr_id & SEND_TAG != 0 {
                    "send"
                } else {
                    "receive"
                },
                status: c.status,
            });
        }
        let Some(q) = self.qpns.iter().position(|&n| n == c.qp_num) else {
            return Err(BenchError::Unexpected("completion for an unknown QP"));
        };
        if c.wr_id & SEND_TAG != 0 {
            if c.wr_id & !SEND_TAG != q as u64 {
                return Err(BenchError::Unexpected("send completion on another QP"));
            }
            self.scnt += 1;
            self.pending[q] &= !PENDING_SEND;
        } else {
            if c.opcode != WcOpcode::Recv || c.wr_id >= u64::from(self.cfg.rx_depth) {
                return Err(BenchError::Unexpected("unexpected receive completion"));
            }
            let slot = c.wr_id as usize;
            self.check(q, slot, c.byte_len)?;
            if !self.cfg.client && self.rcnt == 0 {
                self.started_ns = env.now_ns();
            }
            if let Some(at) = self.sent_at[q].take() {
                if self.rtts.len() < self.rtts.capacity() {
                    self.rtts.push(env.cycles().saturating_sub(at));
                }
            }
            self.recv_per_qp[q] += 1;
            self.rcnt += 1;
            self.routs -= 1;
            self.free_slots.push(slot as u32);
            if self.routs <= self.cfg.qps {
                self.refill(dev)?;
            }
            self.pending[q] &= !PENDING_RECV;
        }
        if self.pending[q] == 0 && self.posted < self.cfg.iters {
            self.post_send(dev, env, q)?;
        }
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.scnt >= self.cfg.iters && self.rcnt >= self.cfg.iters
    }

    /// Messages received so far (all QPs).
    pub fn received(&self) -> u32 {
        self.rcnt
    }

    /// The run's figures (meaningful once [`step`](Self::step) returned `Done`). Sorts the
    /// round-trip samples in place (call it once, after the run).
    pub fn summary(&mut self) -> SrqSummary {
        SrqSummary {
            iters: self.cfg.iters,
            size: self.cfg.size,
            elapsed_ns: self.ended_ns.saturating_sub(self.started_ns),
            received_per_qp: self.recv_per_qp.clone(),
            refills: self.refills,
            rtt: rtt_stats(&mut self.rtts, self.tsc_mhz),
            events: self.events,
            fallbacks: self.fallbacks,
        }
    }

    /// Destroys the QPs, the SRQ, the CQ, the MR and the PD, and frees the buffer.
    pub fn close(&mut self, dev: &mut D) {
        self.qps.clear();
        (self.srq, self.cq) = (None, None);
        self.objs.close(dev);
    }
}
