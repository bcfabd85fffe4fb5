//! The node's client of its delegate: one RC connection and the calls over it.
//!
//! **Resources.** A PD, one CQ for sends and receives (so one armed CQ wakes a waiter
//! whatever completes), the RC QP, a send buffer and a receive buffer of `credits` message
//! slots each (`delegate_wire::MAX_MESSAGE` bytes), all made at [`Client::connect`] and
//! released by [`Client::close`]; nothing is allocated per call.
//!
//! **Calls.** Each call takes a slot: its request is emitted into the slot's send buffer
//! and sent with a [`Tag`] naming the slot and a generation, so a late reply to a call the
//! caller gave up on never completes a later call of the same slot. The delegate's reply
//! lands in any posted receive; its tag finds the call. A call is complete when its reply
//! (or, one-sided, its own completion) is in; its slot is free again once the caller took
//! the result ([`Client::take`]) and the slot's send completed. At most `credits` calls are
//! outstanding (the lesser of the node's and the delegate's), so every reply finds a
//! posted receive.
//!
//! **Completion modes** ([`Completion`]): `poll` busy-polls the CQ; `event` arms it
//! (`req_notify_cq`) and waits for its event (`get_cq_event`); `isr` arms it and lets the
//! device's interrupt handler take the completions ([`BenchEnv::isr_wait`]: the handler
//! drains the CQ, completes the calls and re-arms while the waited-for call is not done).
//!
//! **Failures.** Every wait is bounded by the call's deadline ([`ClientConfig::call_timeout_ns`]);
//! a work request completing in error (the delegate's QP gone: RC's retries exhausted, or
//! a remote access refused) breaks the connection and fails every call with
//! [`DelegateError::Disconnected`]; a message that is not a reply of the protocol breaks it
//! with [`DelegateError::BadReply`]; a reply of the wrong op or shape fails its call.

use alloc::vec::Vec;
use core::fmt;

use delegate_wire::connect::Reason;
use delegate_wire::{
    Access, Backing, DirEntry, Failure, OpenFlags, Packet, Place, Read, RegionInfo, Reply, Request,
    Source, Stat,
};
use delegate_wire::{LogLevel, Op, Path, MAX_MESSAGE};
use verbs::{
    AccessFlags, AhAttr, Device, DmaRegion, Mtu, Payload, QpAttr, QpCap, QpInitAttr, QpState,
    QpType, RecvWr, SendFlags, SendWr, Sge, WcStatus, WorkCompletion, WrOpcode,
};

use super::setup::{self, Accepted, Offer};
use crate::config::Completion;
use crate::env::{BenchEnv, IsrHandler, IsrProgress};

/// How the node reaches its delegate and how its calls complete.
#[derive(Clone, Copy, Debug)]
pub struct ClientConfig {
    /// The HCA port toward the delegate.
    pub port: u8,
    /// The delegate's LID; `None`: send the Connect to every LID of `probe_lids`.
    pub lid: Option<u16>,
    pub probe_lids: (u16, u16),
    /// The delegate's rendezvous QPN (it prints it when it starts).
    pub rdv_qpn: u32,
    pub completion: Completion,
    /// Calls the node has outstanding at most (the receives it keeps posted), 1..=256;
    /// the delegate's own credits lower it.
    pub credits: u16,
    /// Longest a call waits for its answer.
    pub call_timeout_ns: u64,
    /// Longest [`Client::connect`] looks for the delegate.
    pub connect_timeout_ns: u64,
    /// Milliseconds without a call after which the delegate may release the node (it
    /// grants between its own bounds).
    pub lease_ms: u32,
    /// Longest one wait for a completion event or interrupt lasts before the client looks
    /// at its bounds again: a node that owns its CPU waits the whole call timeout; nodes
    /// sharing one thread (host tests) give 0 and wait by polling in between.
    pub wait_slice_ns: u64,
}

impl ClientConfig {
    /// The delegate at `lid` (or probed for) with rendezvous QPN `rdv_qpn`: port 1, busy
    /// polling, 16 credits, 30 s per call, 120 s to connect, a 120 s lease.
    pub fn new(lid: Option<u16>, rdv_qpn: u32) -> ClientConfig {
        ClientConfig {
            port: 1,
            lid,
            probe_lids: (1, 64),
            rdv_qpn,
            completion: Completion::Poll,
            credits: 16,
            call_timeout_ns: 30_000_000_000,
            connect_timeout_ns: 120_000_000_000,
            lease_ms: 120_000,
            wait_slice_ns: 30_000_000_000,
        }
    }
}

/// Why a call or the connection failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DelegateError {
    /// No delegate answered the Connect within the bound.
    NotFound { waited_ms: u64 },
    /// The delegate refused the connection.
    Refused(Reason),
    /// The delegate's Accept cannot be used (the field named).
    BadAccept(&'static str),
    /// A verb failed.
    Verbs {
        during: &'static str,
        err: verbs::Error,
    },
    /// No DMA memory for the named buffer.
    NoMemory(&'static str),
    /// The client's configuration or a call's arguments cannot be used (what is named).
    BadRequest(&'static str),
    /// The request is longer than the delegate receives.
    TooLong { len: usize, max: usize },
    /// The request breaks a bound of the protocol (`emit` refused it).
    Unsendable { op: Op, why: delegate_wire::Error },
    /// Every credit is in use: take a completed call first.
    Busy,
    /// No call of this tag is outstanding or complete.
    UnknownTag,
    /// The call has not completed yet.
    Pending,
    /// The call's answer did not come within the call timeout.
    Timeout { op: Option<Op> },
    /// A work request completed in error: the RC connection is gone (the delegate's QP
    /// vanished and RC's retries ran out, or the delegate's HCA refused a remote access).
    /// Every call fails from then on.
    Disconnected { status: WcStatus },
    /// The delegate sent something that is not an answer of the protocol (to this call,
    /// when `op` is set; otherwise to none, and the connection is given up).
    BadReply {
        op: Option<Op>,
        why: delegate_wire::Error,
    },
    /// The delegate did the call and it failed: its code and detail.
    Failed { op: Op, failure: Failure },
    /// isr mode, but the environment cannot run a handler in the interrupt path.
    IsrUnavailable,
    /// The region does not grant what the one-sided operation needs, or the range is
    /// outside it or the local buffer.
    OutOfRange,
}

impl fmt::Display for DelegateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = |op: &Option<Op>| op.map_or("-", |o| o.name());
        match self {
            DelegateError::NotFound { waited_ms } => {
                write!(f, "no delegate answered within {waited_ms} ms")
            }
            DelegateError::Refused(r) => write!(f, "the delegate refused: {}", r.name()),
            DelegateError::BadAccept(what) => write!(f, "the delegate's Accept: bad {what}"),
            DelegateError::Verbs { during, err } => write!(f, "{during}: {err}"),
            DelegateError::NoMemory(what) => write!(f, "no DMA memory for the {what}"),
            DelegateError::BadRequest(what) => write!(f, "cannot ask that: {what}"),
            DelegateError::TooLong { len, max } => {
                write!(f, "a request of {len} bytes, the delegate takes {max}")
            }
            DelegateError::Unsendable { op, why } => write!(f, "{}: cannot send: {why}", op.name()),
            DelegateError::Busy => f.write_str("every credit is in use"),
            DelegateError::UnknownTag => f.write_str("no call has this tag"),
            DelegateError::Pending => f.write_str("the call has not completed"),
            DelegateError::Timeout { op: o } => {
                write!(f, "{}: no answer within the call timeout", op(o))
            }
            DelegateError::Disconnected { status } => {
                write!(f, "the connection to the delegate failed: {status:?}")
            }
            DelegateError::BadReply { op: o, why } => {
                write!(f, "{}: the delegate's answer is not a reply: {why}", op(o))
            }
            DelegateError::Failed { op, failure } => write!(f, "{}: {failure}", op.name()),
            DelegateError::IsrUnavailable => {
                f.write_str("isr mode, but no completion handler can run in the interrupt path")
            }
            DelegateError::OutOfRange => {
                f.write_str("outside the region or buffer, or not granted by the region")
            }
        }
    }
}

fn vb(during: &'static str) -> impl FnOnce(verbs::Error) -> DelegateError {
    move |err| DelegateError::Verbs { during, err }
}

/// One outstanding or completed call: its slot (low 8 bits) and generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tag(pub u32);

impl Tag {
    fn new(gen: u32, slot: usize) -> Tag {
        Tag(gen << 8 | slot as u32)
    }
    fn slot(self) -> usize {
        (self.0 & 0xff) as usize
    }
    fn gen(self) -> u32 {
        self.0 >> 8
    }
}

/// A buffer registered with [`Client::register`]: the delegate reads and writes it by RDMA
/// (pread, pwrite), and one-sided operations land in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufId(usize);

/// A buffer the client holds registered for remote access.
struct Registered<Mr> {
    region: DmaRegion,
    mr: Mr,
    lkey: u32,
    rkey: u32,
}

/// What a slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    /// Sent, not answered.
    Waiting,
    /// The reply is in receive slot `recv`, `len` bytes.
    Replied {
        recv: u16,
        len: u32,
    },
    /// A one-sided operation completed.
    Done,
    Failed(DelegateError),
    /// The caller gave up on it; a late answer is dropped.
    Abandoned,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    gen: u32,
    /// The request's op; `None` for a one-sided operation.
    op: Option<Op>,
    state: State,
    /// The slot's send is still in the send queue (its buffer and WQE are in use).
    sending: bool,
    deadline_ns: u64,
}

impl Slot {
    fn reusable(&self) -> bool {
        !self.sending && matches!(self.state, State::Free | State::Abandoned)
    }
}

/// Work request ids: the kind in bits 32.., the slot below.
const WR_RECV: u64 = 1 << 32;
const WR_SEND: u64 = 2 << 32;

/// What [`Client::counters`] reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Calls submitted (requests and one-sided operations).
    pub calls: u64,
    /// Replies that matched no waiting call (late answers to abandoned calls).
    pub stray: u64,
    /// Completion events consumed (event and isr modes).
    pub events: u64,
    /// Times the interrupt path ran the client's handler (isr mode).
    pub isr_calls: u64,
    /// Calls the handler completed in the interrupt path (isr mode).
    pub isr_completed: u64,
}

/// The RC connection to the delegate and the calls over it. Generic over the verbs device
/// it runs on; every method that touches the device takes it (the client owns objects on
/// it, not the device).
pub struct Client<D: Device> {
    cfg: ClientConfig,
    pd: Option<D::Pd>,
    cq: Option<D::Cq>,
    qp: Option<D::Qp>,
    send_mr: Option<D::Mr>,
    recv_mr: Option<D::Mr>,
    send_buf: Option<DmaRegion>,
    recv_buf: Option<DmaRegion>,
    send_lkey: u32,
    recv_lkey: u32,
    slots: Vec<Slot>,
    /// Registered buffers: the region, its MR, lkey and rkey.
    bufs: Vec<Option<Registered<D::Mr>>>,
    accepted: Option<Accepted>,
    /// The message size both ends take.
    max_message: usize,
    gen: u32,
    broken: Option<DelegateError>,
    armed: bool,
    counters: Counters,
    /// Calls completed since connect (the isr wait's progress count).
    completed: u32,
}

impl<D: Device> Client<D> {
    /// Connects to the delegate `cfg` names: makes the connection's objects, runs the
    /// set-up exchange ([`setup`]) and brings the RC QP to RTS toward the delegate's.
    pub fn connect<E: BenchEnv>(
        dev: &mut D,
        env: &mut E,
        cfg: ClientConfig,
    ) -> Result<Client<D>, DelegateError> {
        if cfg.credits == 0 || cfg.credits > delegate_wire::connect::MAX_CREDITS {
            return Err(DelegateError::BadRequest("credits must be 1..=256"));
        }
        if cfg.completion == Completion::Isr && !env.isr_capable() {
            return Err(DelegateError::IsrUnavailable);
        }
        let mut c = Client {
            cfg,
            pd: None,
            cq: None,
            qp: None,
            send_mr: None,
            recv_mr: None,
            send_buf: None,
            recv_buf: None,
            send_lkey: 0,
            recv_lkey: 0,
            slots: Vec::new(),
            bufs: Vec::new(),
            accepted: None,
            max_message: MAX_MESSAGE,
            gen: 1,
            broken: None,
            armed: false,
            counters: Counters::default(),
            completed: 0,
        };
        match c.build(dev, env) {
            Ok(()) => Ok(c),
            Err(e) => {
                c.release(dev);
                Err(e)
            }
        }
    }

    fn build<E: BenchEnv>(&mut self, dev: &mut D, env: &mut E) -> Result<(), DelegateError> {
        let cfg = self.cfg;
        let n = usize::from(cfg.credits);
        let port = dev.query_port(cfg.port).map_err(vb("query_port"))?;
        let mtu = port.active_mtu.unwrap_or(Mtu::Mtu2048);
        let pd = dev.alloc_pd().map_err(vb("alloc_pd"))?;
        self.pd = Some(pd);
        let bytes = n * MAX_MESSAGE;
        let send = env
            .alloc_dma(bytes, 4096)
            .ok_or(DelegateError::NoMemory("request buffers"))?;
        let recv = env
            .alloc_dma(bytes, 4096)
            .ok_or(DelegateError::NoMemory("reply buffers"))?;
        let smr = dev
            .reg_mr(pd, send.bus(), bytes as u64, AccessFlags::LOCAL_WRITE)
            .map_err(vb("reg_mr (requests)"))?;
        self.send_mr = Some(smr);
        self.send_lkey = dev.mr_lkey(smr);
        self.send_buf = Some(send);
        let rmr = dev
            .reg_mr(pd, recv.bus(), bytes as u64, AccessFlags::LOCAL_WRITE)
            .map_err(vb("reg_mr (replies)"))?;
        self.recv_mr = Some(rmr);
        self.recv_lkey = dev.mr_lkey(rmr);
        self.recv_buf = Some(recv);
        let cq = dev
            .create_cq(2 * u32::from(cfg.credits) + 1)
            .map_err(vb("create_cq"))?;
        self.cq = Some(cq);
        let qp = dev
            .create_qp(&QpInitAttr {
                pd,
                send_cq: cq,
                recv_cq: cq,
                qp_type: QpType::Rc,
                cap: QpCap {
                    max_send_wr: u32::from(cfg.credits),
                    max_recv_wr: u32::from(cfg.credits),
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: true,
            })
            .map_err(vb("create_qp (RC)"))?;
        self.qp = Some(qp);
        // The delegate moves bulk data into (pread) and out of (pwrite) the node's
        // registered buffers.
        let mut init = QpAttr::new(QpState::Init);
        init.port_num = cfg.port;
        init.access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        dev.modify_qp(qp, &init).map_err(vb("RC QP to INIT"))?;
        for i in 0..n {
            self.post_recv(dev, i)?;
        }
        self.slots = (0..n)
            .map(|_| Slot {
                gen: 0,
                op: None,
                state: State::Free,
                sending: false,
                deadline_ns: 0,
            })
            .collect();
        let seed = mix(env.cycles() ^ (u64::from(port.lid) << 40));
        let psn = (seed as u32) & 0x00ff_ffff;
        let session = ((seed >> 32) as u32).max(1);
        let guid = u64::from_be_bytes(port.gid.0[8..16].try_into().unwrap_or([0; 8]));
        let offer = Offer {
            lid: port.lid,
            guid,
            qpn: dev.qp_num(qp),
            psn,
            mtu,
            credits: cfg.credits,
            lease_ms: cfg.lease_ms,
        };
        let a = setup::exchange(dev, env, pd, &cfg, &offer, session)?;
        self.max_message = usize::from(a.max_message).min(MAX_MESSAGE);
        let credits = usize::from(a.credits).min(n);
        self.slots.truncate(credits);
        let mtu = if (a.mtu as u8) <= (mtu as u8) {
            a.mtu
        } else {
            return Err(DelegateError::BadAccept("MTU above the node's"));
        };
        let mut rtr = QpAttr::new(QpState::Rtr);
        rtr.path_mtu = mtu;
        rtr.dest_qp_num = a.qpn;
        rtr.rq_psn = a.psn;
        rtr.ah = AhAttr {
            dlid: a.lid,
            port: cfg.port,
            ..AhAttr::default()
        };
        // The delegate's RDMA READs of the node's buffers (pwrite) may be in flight
        // together (up to the 16 an mlx4 QP takes); the node's own READs and atomics to
        // regions go one at a time.
        rtr.max_dest_rd_atomic = 16;
        rtr.min_rnr_timer = 12;
        dev.modify_qp(qp, &rtr).map_err(vb("RC QP to RTR"))?;
        let mut rts = QpAttr::new(QpState::Rts);
        rts.sq_psn = psn;
        rts.timeout = 14;
        rts.retry_cnt = 7;
        rts.rnr_retry = 7;
        rts.max_rd_atomic = 1;
        dev.modify_qp(qp, &rts).map_err(vb("RC QP to RTS"))?;
        self.accepted = Some(a);
        Ok(())
    }

    fn post_recv(&self, dev: &mut D, i: usize) -> Result<(), DelegateError> {
        let (Some(qp), Some(buf)) = (self.qp, self.recv_buf.as_ref()) else {
            return Err(DelegateError::NoMemory("reply buffers"));
        };
        let sge = [Sge {
            addr: buf.bus_at(i * MAX_MESSAGE),
            length: MAX_MESSAGE as u32,
            lkey: self.recv_lkey,
        }];
        dev.post_recv(
            qp,
            &RecvWr {
                wr_id: WR_RECV | i as u64,
                sg_list: &sge,
            },
        )
        .map_err(vb("post_recv (reply)"))
    }

    /// What the delegate granted: its LID and QPN, credits, lease, its number for the node.
    pub fn accepted(&self) -> Option<Accepted> {
        self.accepted
    }

    /// Calls at most outstanding at once.
    pub fn credits(&self) -> usize {
        self.slots.len()
    }

    pub fn completion(&self) -> Completion {
        self.cfg.completion
    }

    /// Changes how the next waits complete (the connection stays).
    pub fn set_completion<E: BenchEnv>(
        &mut self,
        env: &E,
        completion: Completion,
    ) -> Result<(), DelegateError> {
        if completion == Completion::Isr && !env.isr_capable() {
            return Err(DelegateError::IsrUnavailable);
        }
        self.cfg.completion = completion;
        Ok(())
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The failure that broke the connection, if one did.
    pub fn broken(&self) -> Option<DelegateError> {
        self.broken
    }

    // ---- buffers ----

    /// Registers `region` for the delegate's RDMA and the node's one-sided operations; the
    /// client keeps it until [`Client::unregister`] gives it back (or [`Client::close`]
    /// frees it), so the memory cannot go while the delegate may still reach it.
    pub fn register(&mut self, dev: &mut D, region: DmaRegion) -> Result<BufId, DelegateError> {
        let pd = self.pd.ok_or(DelegateError::NoMemory("PD"))?;
        if !region.is_contiguous() {
            return Err(DelegateError::BadRequest("a buffer must be contiguous"));
        }
        let access =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        let mr = dev
            .reg_mr(pd, region.bus(), region.size() as u64, access)
            .map_err(vb("reg_mr (buffer)"))?;
        let entry = Some(Registered {
            region,
            mr,
            lkey: dev.mr_lkey(mr),
            rkey: dev.mr_rkey(mr),
        });
        if let Some(i) = self.bufs.iter().position(Option::is_none) {
            self.bufs[i] = entry;
            return Ok(BufId(i));
        }
        self.bufs.push(entry);
        Ok(BufId(self.bufs.len() - 1))
    }

    /// Deregisters a buffer and gives its memory back. Refused while a call may still use it.
    pub fn unregister(&mut self, dev: &mut D, id: BufId) -> Result<DmaRegion, DelegateError> {
        if self
            .slots
            .iter()
            .any(|s| s.state == State::Waiting || s.sending)
        {
            return Err(DelegateError::Busy);
        }
        let Registered { region, mr, .. } = self
            .bufs
            .get_mut(id.0)
            .and_then(Option::take)
            .ok_or(DelegateError::BadRequest("no such buffer"))?;
        if let Err(err) = dev.dereg_mr(mr) {
            // The device may still reach it: never hand the memory back.
            region.leak();
            return Err(DelegateError::Verbs {
                during: "dereg_mr (buffer)",
                err,
            });
        }
        Ok(region)
    }

    /// A registered buffer's memory.
    pub fn buffer(&self, id: BufId) -> Option<&DmaRegion> {
        self.bufs.get(id.0)?.as_ref().map(|b| &b.region)
    }

    /// A registered buffer's memory, to fill (no call may be using it).
    pub fn buffer_mut(&mut self, id: BufId) -> Option<&mut DmaRegion> {
        self.bufs.get_mut(id.0)?.as_mut().map(|b| &mut b.region)
    }

    /// Bus address, lkey and rkey of `len` bytes at `off` of buffer `id`.
    fn span(&self, id: BufId, off: usize, len: usize) -> Result<(u64, u32, u32), DelegateError> {
        let Registered {
            region, lkey, rkey, ..
        } = self
            .bufs
            .get(id.0)
            .and_then(Option::as_ref)
            .ok_or(DelegateError::BadRequest("no such buffer"))?;
        if off.checked_add(len).is_none_or(|end| end > region.size()) {
            return Err(DelegateError::OutOfRange);
        }
        Ok((region.bus_at(off), *lkey, *rkey))
    }

    // ---- calls ----

    fn check(&self) -> Result<(), DelegateError> {
        match self.broken {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn free_slot(&mut self, dev: &mut D) -> Result<usize, DelegateError> {
        if let Some(i) = self.slots.iter().position(Slot::reusable) {
            return Ok(i);
        }
        // Sends may have completed without anyone looking.
        self.drain(dev)?;
        self.slots
            .iter()
            .position(Slot::reusable)
            .ok_or(DelegateError::Busy)
    }

    fn next_gen(&mut self) -> u32 {
        self.gen = (self.gen + 1) & 0x00ff_ffff;
        if self.gen == 0 {
            self.gen = 1;
        }
        self.gen
    }

    /// Sends `req` without waiting: its [`Tag`] completes it later ([`Client::wait`],
    /// [`Client::take`]). [`DelegateError::Busy`] when every credit is in use.
    pub fn submit<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        req: &Request<'_>,
    ) -> Result<Tag, DelegateError> {
        self.check()?;
        let i = self.free_slot(dev)?;
        let gen = self.next_gen();
        let tag = Tag::new(gen, i);
        let max = self.max_message;
        let buf = self
            .send_buf
            .as_mut()
            .ok_or(DelegateError::NoMemory("request buffers"))?;
        let off = i * MAX_MESSAGE;
        let len = req.buffer_len();
        if len > max {
            return Err(DelegateError::TooLong { len, max });
        }
        let out = &mut buf.bytes_mut()[off..off + MAX_MESSAGE];
        req.emit(tag.0, out)
            .map_err(|why| DelegateError::Unsendable { op: req.op(), why })?;
        let sge = [Sge {
            addr: buf.bus_at(off),
            length: len as u32,
            lkey: self.send_lkey,
        }];
        let wr = SendWr {
            wr_id: WR_SEND | i as u64,
            opcode: WrOpcode::Send,
            payload: Payload::Sges(&sge),
            flags: SendFlags::SIGNALED,
            ud: None,
        };
        self.post(dev, env, i, gen, Some(req.op()), &wr)?;
        Ok(tag)
    }

    /// Posts `wr` as slot `i`'s send and marks it waiting.
    fn post<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        i: usize,
        gen: u32,
        op: Option<Op>,
        wr: &SendWr<'_, D::Ah>,
    ) -> Result<(), DelegateError> {
        let qp = self.qp.ok_or(DelegateError::NoMemory("RC QP"))?;
        dev.post_send(qp, wr).map_err(vb("post_send"))?;
        self.slots[i] = Slot {
            gen,
            op,
            state: State::Waiting,
            sending: true,
            deadline_ns: env.now_ns().saturating_add(self.cfg.call_timeout_ns),
        };
        self.counters.calls += 1;
        Ok(())
    }

    fn slot_of(&self, tag: Tag) -> Result<usize, DelegateError> {
        let i = tag.slot();
        match self.slots.get(i) {
            Some(s) if s.gen == tag.gen() && !matches!(s.state, State::Free | State::Abandoned) => {
                Ok(i)
            }
            _ => Err(DelegateError::UnknownTag),
        }
    }

    /// Whether the call of `tag` has completed (successfully or not).
    pub fn is_done(&self, tag: Tag) -> bool {
        self.slot_of(tag)
            .is_ok_and(|i| self.slots[i].state != State::Waiting)
    }

    /// Takes what has completed, without waiting.
    pub fn progress<E: BenchEnv>(&mut self, dev: &mut D, env: &mut E) -> Result<(), DelegateError> {
        let _ = env;
        self.drain(dev).map(|_| ())
    }

    /// Waits, bounded by its deadline, until the call of `tag` has completed.
    pub fn wait<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        tag: Tag,
    ) -> Result<(), DelegateError> {
        let i = self.slot_of(tag)?;
        let deadline = self.slots[i].deadline_ns;
        let op = self.slots[i].op;
        let done = |c: &Client<D>| c.slots[i].state != State::Waiting;
        if self.wait_for(dev, env, deadline, &done)? {
            return Ok(());
        }
        self.slots[i].state = State::Abandoned;
        Err(DelegateError::Timeout { op })
    }

    /// Waits, bounded by the earliest deadline of the calls outstanding, until any call has
    /// completed; returns one complete tag (`None`: nothing outstanding).
    pub fn wait_any<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
    ) -> Result<Option<Tag>, DelegateError> {
        let complete = |c: &Client<D>| {
            c.slots.iter().position(|s| {
                matches!(
                    s.state,
                    State::Replied { .. } | State::Done | State::Failed(_)
                )
            })
        };
        loop {
            if let Some(i) = complete(self) {
                return Ok(Some(Tag::new(self.slots[i].gen, i)));
            }
            let Some((i, deadline)) = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.state == State::Waiting)
                .map(|(i, s)| (i, s.deadline_ns))
                .min_by_key(|(_, d)| *d)
            else {
                return Ok(None);
            };
            let any = |c: &Client<D>| complete(c).is_some();
            if !self.wait_for(dev, env, deadline, &any)? {
                self.slots[i].state = State::Abandoned;
                return Err(DelegateError::Timeout {
                    op: self.slots[i].op,
                });
            }
        }
    }

    /// Takes the completed call of `tag`: its reply (or failure) handed to `f`, then its
    /// receive posted again and its slot freed. A reply of another op or that does not
    /// parse is [`DelegateError::BadReply`]; a failure reply is [`DelegateError::Failed`].
    pub fn take<T>(
        &mut self,
        dev: &mut D,
        tag: Tag,
        f: impl FnOnce(Reply<'_>) -> Result<T, DelegateError>,
    ) -> Result<T, DelegateError> {
        let i = self.slot_of(tag)?;
        let slot = self.slots[i];
        let result = match slot.state {
            State::Waiting => return Err(DelegateError::Pending),
            State::Failed(e) => Err(e),
            State::Done => return Err(DelegateError::UnknownTag),
            State::Replied { recv, len } => {
                let r = self.parse_reply(slot.op, recv, len, f);
                self.post_recv(dev, usize::from(recv))?;
                r
            }
            State::Free | State::Abandoned => return Err(DelegateError::UnknownTag),
        };
        self.slots[i].state = State::Free;
        result
    }

    fn parse_reply<T>(
        &self,
        op: Option<Op>,
        recv: u16,
        len: u32,
        f: impl FnOnce(Reply<'_>) -> Result<T, DelegateError>,
    ) -> Result<T, DelegateError> {
        let buf = self
            .recv_buf
            .as_ref()
            .ok_or(DelegateError::NoMemory("reply buffers"))?;
        // SAFETY: receive `recv` completed and is posted again only after this returns, so
        // the device does not write these bytes while the slice lives.
        let bytes = unsafe { buf.bytes_at(usize::from(recv) * MAX_MESSAGE, len as usize) }.ok_or(
            DelegateError::BadReply {
                op,
                why: delegate_wire::Error::TooLong,
            },
        )?;
        let bad = |why| DelegateError::BadReply { op, why };
        let packet = Packet::new_checked(bytes).map_err(bad)?;
        let Some(op) = op else {
            return Err(bad(delegate_wire::Error::WrongDirection));
        };
        match Reply::parse(&packet).map_err(bad)? {
            Err(failure) => Err(DelegateError::Failed { op, failure }),
            Ok(reply) if reply.op() != op => {
                Err(bad(delegate_wire::Error::UnknownOp(packet.kind())))
            }
            Ok(reply) => f(reply),
        }
    }

    /// One call, blocking: sends `req`, waits for its reply (bounded) and hands it to `f`.
    pub fn call<E: BenchEnv, T>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        req: &Request<'_>,
        f: impl FnOnce(Reply<'_>) -> Result<T, DelegateError>,
    ) -> Result<T, DelegateError> {
        let tag = self.submit(dev, env, req)?;
        self.wait(dev, env, tag)?;
        self.take(dev, tag, f)
    }

    // ---- completions ----

    /// Takes every completion there is; returns how many calls completed.
    fn drain(&mut self, dev: &mut D) -> Result<u32, DelegateError> {
        let cq = self.cq.ok_or(DelegateError::NoMemory("CQ"))?;
        let mut wc = [WorkCompletion::default(); 8];
        let mut completed = 0;
        loop {
            let n = dev.poll_cq(cq, &mut wc).map_err(vb("poll_cq"))?;
            for w in &wc[..n] {
                completed += self.on_completion(dev, w)?;
            }
            if n < wc.len() {
                break;
            }
        }
        self.completed = self.completed.wrapping_add(completed);
        Ok(completed)
    }

    fn on_completion(&mut self, dev: &mut D, w: &WorkCompletion) -> Result<u32, DelegateError> {
        let i = (w.wr_id & 0xffff_ffff) as usize;
        let send = w.wr_id & WR_SEND != 0;
        if send {
            if let Some(s) = self.slots.get_mut(i) {
                s.sending = false;
            }
        }
        if w.status != WcStatus::Success {
            // The QP is in error: every call fails with the first completion's cause (the
            // failed work request; those after it are flushed).
            if self.broken.is_none() {
                self.fail_all(DelegateError::Disconnected { status: w.status });
            }
            return Ok(0);
        }
        if send {
            let Some(s) = self.slots.get_mut(i) else {
                return Ok(0);
            };
            if s.op.is_none() && s.state == State::Waiting {
                s.state = State::Done;
                return Ok(1);
            }
            if s.op.is_none() && s.state == State::Abandoned {
                s.state = State::Free;
            }
            return Ok(0);
        }
        // A reply in receive `i`: its tag finds the call.
        let header = self
            .recv_buf
            .as_ref()
            .and_then(|b| b.read::<{ delegate_wire::HEADER_LEN }>(i * MAX_MESSAGE));
        let len = w.byte_len;
        let tag = match header.map(Packet::new_unchecked) {
            Some(p)
                if len as usize >= delegate_wire::HEADER_LEN
                    && p.magic() == delegate_wire::MAGIC
                    && p.is_reply() =>
            {
                Tag(p.tag())
            }
            _ => {
                // Not a reply of the protocol: nothing to match it with.
                self.post_recv(dev, i)?;
                let why = delegate_wire::Error::BadMagic;
                self.fail_all(DelegateError::BadReply { op: None, why });
                return Ok(0);
            }
        };
        match self.slots.get_mut(tag.slot()) {
            Some(s) if s.gen == tag.gen() && s.op.is_some() && s.state == State::Waiting => {
                s.state = State::Replied {
                    recv: i as u16,
                    len,
                };
                Ok(1)
            }
            Some(s) if s.gen == tag.gen() && s.state == State::Abandoned => {
                self.post_recv(dev, i)?;
                self.counters.stray += 1;
                Ok(0)
            }
            _ => {
                self.post_recv(dev, i)?;
                self.counters.stray += 1;
                Ok(0)
            }
        }
    }

    /// Breaks the connection: every waiting call fails with `e`, and so does every later one.
    fn fail_all(&mut self, e: DelegateError) {
        self.broken = Some(e);
        for s in &mut self.slots {
            if s.state == State::Waiting {
                s.state = State::Failed(e);
            }
        }
    }

    /// Waits until `done` holds (true) or `deadline` passes (false), in the configured
    /// completion mode.
    fn wait_for<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        deadline: u64,
        done: &dyn Fn(&Client<D>) -> bool,
    ) -> Result<bool, DelegateError> {
        let isr = self.cfg.completion == Completion::Isr;
        loop {
            // In isr mode only the interrupt path takes completions, as long as it keeps up.
            if !isr {
                self.drain(dev)?;
            }
            if done(self) {
                return Ok(true);
            }
            let now = env.now_ns();
            if now >= deadline {
                // A last look, in case an interrupt was missed.
                self.drain(dev)?;
                return Ok(done(self));
            }
            let slice = (deadline - now).min(self.cfg.wait_slice_ns);
            match self.cfg.completion {
                Completion::Poll => env.relax(),
                Completion::Event => {
                    if !self.arm(dev)? {
                        continue;
                    }
                    let cq = self.cq.ok_or(DelegateError::NoMemory("CQ"))?;
                    match dev.get_cq_event(cq, slice) {
                        Ok(()) => {
                            self.armed = false;
                            self.counters.events += 1;
                        }
                        Err(verbs::Error::Timeout(_)) => env.relax(),
                        Err(err) => {
                            return Err(DelegateError::Verbs {
                                during: "get_cq_event",
                                err,
                            })
                        }
                    }
                }
                Completion::Isr => {
                    // Completions already there at the arm raise the event at once (the
                    // arm carries the consumer index), so the handler sees them too.
                    if !self.armed {
                        let cq = self.cq.ok_or(DelegateError::NoMemory("CQ"))?;
                        dev.req_notify_cq(cq, false).map_err(vb("req_notify_cq"))?;
                        self.armed = true;
                    }
                    let progress = IsrProgress::new(self.completed);
                    let delivered = {
                        let env: &E = env;
                        let mut run = IsrRun {
                            client: &mut *self,
                            dev: &mut *dev,
                            done,
                            progress: &progress,
                            error: None,
                        };
                        let delivered = env.isr_wait(&mut run, &progress, slice);
                        if let Some(e) = run.error {
                            return Err(e);
                        }
                        delivered
                    };
                    if !delivered {
                        return Err(DelegateError::IsrUnavailable);
                    }
                    if !progress.finished() {
                        env.relax();
                    }
                }
            }
        }
    }

    /// Arms the CQ for its next completion, then takes what came before the arm; false
    /// when that already made progress (the caller looks again before waiting).
    fn arm(&mut self, dev: &mut D) -> Result<bool, DelegateError> {
        if !self.armed {
            let cq = self.cq.ok_or(DelegateError::NoMemory("CQ"))?;
            dev.req_notify_cq(cq, false).map_err(vb("req_notify_cq"))?;
            self.armed = true;
        }
        Ok(self.drain(dev)? == 0)
    }

    // ---- typed calls ----

    /// The null call: the delegate echoes `payload` (at most `MAX_INLINE` bytes).
    pub fn null<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        payload: &[u8],
    ) -> Result<(), DelegateError> {
        self.call(dev, env, &Request::Null { payload }, |r| match r {
            Reply::Null { payload: p } if p == payload => Ok(()),
            _ => Err(DelegateError::BadReply {
                op: Some(Op::Null),
                why: delegate_wire::Error::BadValue,
            }),
        })
    }

    /// The delegate's wall time and monotonic clock, in nanoseconds.
    pub fn clock<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
    ) -> Result<(i64, u64), DelegateError> {
        self.call(dev, env, &Request::Clock, |r| match r {
            Reply::Clock {
                realtime_ns,
                monotonic_ns,
            } => Ok((realtime_ns, monotonic_ns)),
            _ => Err(wrong(Op::Clock)),
        })
    }

    /// Opens (or creates) `path` under the delegate's root: its handle and size.
    pub fn open<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        path: &str,
        flags: OpenFlags,
        mode: u16,
    ) -> Result<(u32, u64), DelegateError> {
        let path = path_of(path)?;
        self.call(
            dev,
            env,
            &Request::Open { flags, mode, path },
            |r| match r {
                Reply::Open { handle, size } => Ok((handle, size)),
                _ => Err(wrong(Op::Open)),
            },
        )
    }

    pub fn close_file<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        handle: u32,
    ) -> Result<(), DelegateError> {
        self.call(dev, env, &Request::Close { handle }, |r| match r {
            Reply::Close => Ok(()),
            _ => Err(wrong(Op::Close)),
        })
    }

    /// Reads up to `len` bytes at `offset` of the file into buffer `buf` at `at`: the
    /// delegate RDMA-WRITEs them there before it replies. The bytes read.
    #[allow(clippy::too_many_arguments)]
    pub fn pread<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        handle: u32,
        offset: u64,
        buf: BufId,
        at: usize,
        len: u32,
    ) -> Result<u32, DelegateError> {
        let req = self.pread_request(handle, offset, buf, at, len)?;
        self.call(dev, env, &req, |r| match r {
            Reply::Pread(Read::Remote(n)) if n <= len => Ok(n),
            _ => Err(wrong(Op::Pread)),
        })
    }

    /// The request of a pread into buffer `buf` at `at`.
    pub fn pread_request(
        &self,
        handle: u32,
        offset: u64,
        buf: BufId,
        at: usize,
        len: u32,
    ) -> Result<Request<'static>, DelegateError> {
        let (addr, _, rkey) = self.span(buf, at, len as usize)?;
        Ok(Request::Pread {
            handle,
            offset,
            len,
            place: Place::Remote { addr, rkey },
        })
    }

    /// Reads up to `out.len()` bytes at `offset` inline (at most `MAX_INLINE`): copied out of
    /// the reply. The bytes read.
    pub fn pread_inline<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        handle: u32,
        offset: u64,
        out: &mut [u8],
    ) -> Result<usize, DelegateError> {
        let len = out.len() as u32;
        let req = Request::Pread {
            handle,
            offset,
            len,
            place: Place::Inline,
        };
        self.call(dev, env, &req, |r| match r {
            Reply::Pread(Read::Inline(d)) if d.len() <= out.len() => {
                out[..d.len()].copy_from_slice(d);
                Ok(d.len())
            }
            _ => Err(wrong(Op::Pread)),
        })
    }

    /// Writes `len` bytes of buffer `buf` at `at` to the file at `offset`: the delegate
    /// RDMA-READs them. The bytes written.
    #[allow(clippy::too_many_arguments)]
    pub fn pwrite<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        handle: u32,
        offset: u64,
        buf: BufId,
        at: usize,
        len: u32,
    ) -> Result<u32, DelegateError> {
        let req = self.pwrite_request(handle, offset, buf, at, len)?;
        self.call(dev, env, &req, |r| match r {
            Reply::Pwrite { count } if count <= len => Ok(count),
            _ => Err(wrong(Op::Pwrite)),
        })
    }

    /// The request of a pwrite from buffer `buf` at `at`.
    pub fn pwrite_request(
        &self,
        handle: u32,
        offset: u64,
        buf: BufId,
        at: usize,
        len: u32,
    ) -> Result<Request<'static>, DelegateError> {
        let (addr, _, rkey) = self.span(buf, at, len as usize)?;
        Ok(Request::Pwrite {
            handle,
            offset,
            source: Source::Remote { addr, rkey, len },
        })
    }

    /// Writes `data` (at most `MAX_INLINE` bytes) to the file at `offset`, inside the
    /// request. The bytes written.
    pub fn pwrite_inline<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        handle: u32,
        offset: u64,
        data: &[u8],
    ) -> Result<u32, DelegateError> {
        let req = Request::Pwrite {
            handle,
            offset,
            source: Source::Inline(data),
        };
        self.call(dev, env, &req, |r| match r {
            Reply::Pwrite { count } if count as usize <= data.len() => Ok(count),
            _ => Err(wrong(Op::Pwrite)),
        })
    }

    pub fn fstat<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        handle: u32,
    ) -> Result<Stat, DelegateError> {
        self.call(dev, env, &Request::Fstat { handle }, |r| match r {
            Reply::Fstat(s) => Ok(s),
            _ => Err(wrong(Op::Fstat)),
        })
    }

    pub fn fsync<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        handle: u32,
    ) -> Result<(), DelegateError> {
        self.call(dev, env, &Request::Fsync { handle }, |r| match r {
            Reply::Fsync => Ok(()),
            _ => Err(wrong(Op::Fsync)),
        })
    }

    pub fn mkdir<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        path: &str,
        mode: u16,
    ) -> Result<(), DelegateError> {
        let path = path_of(path)?;
        self.call(dev, env, &Request::Mkdir { mode, path }, |r| match r {
            Reply::Mkdir => Ok(()),
            _ => Err(wrong(Op::Mkdir)),
        })
    }

    /// Creates `path` and every missing directory above it (`mkdir -p`), each with `mode`.
    pub fn mkdir_all<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        path: &str,
        mode: u16,
    ) -> Result<(), DelegateError> {
        for (i, _) in path
            .match_indices('/')
            .chain(core::iter::once((path.len(), "")))
        {
            let part = &path[..i];
            if part.is_empty() {
                continue;
            }
            match self.mkdir(dev, env, part, mode) {
                Ok(()) => {}
                Err(DelegateError::Failed { failure, .. })
                    if failure.code == delegate_wire::ErrorCode::Exists => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub fn unlink<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        path: &str,
        dir: bool,
    ) -> Result<(), DelegateError> {
        let path = path_of(path)?;
        self.call(dev, env, &Request::Unlink { dir, path }, |r| match r {
            Reply::Unlink => Ok(()),
            _ => Err(wrong(Op::Unlink)),
        })
    }

    /// Every entry of directory `path` (`.` is the root), one reply's worth at a time,
    /// handed to `each`; bounded by `max_replies` calls.
    pub fn list_dir<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        path: &str,
        max_replies: u32,
        mut each: impl FnMut(DirEntry<'_>),
    ) -> Result<(), DelegateError> {
        let p = path_of(path)?;
        let mut cookie = 0;
        for _ in 0..max_replies {
            let next = self.call(
                dev,
                env,
                &Request::ListDir { cookie, path: p },
                |r| match r {
                    Reply::ListDir { next, entries } => {
                        entries.iter().for_each(&mut each);
                        Ok(next)
                    }
                    _ => Err(wrong(Op::ListDir)),
                },
            )?;
            if next == 0 {
                return Ok(());
            }
            cookie = next;
        }
        Err(DelegateError::BadRequest(
            "a listing longer than max_replies replies",
        ))
    }

    /// A line for the delegate's log (tagged there with the node).
    pub fn log<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        level: LogLevel,
        text: &str,
    ) -> Result<(), DelegateError> {
        let text = text.as_bytes();
        let text = &text[..text.len().min(delegate_wire::MAX_INLINE)];
        self.call(dev, env, &Request::Log { level, text }, |r| match r {
            Reply::Log => Ok(()),
            _ => Err(wrong(Op::Log)),
        })
    }

    /// Has the delegate map and register a region: anonymous memory of `len` bytes
    /// (`path` `None`) or `len` bytes of a file from `offset`.
    pub fn map_region<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        access: Access,
        path: Option<&str>,
        offset: u64,
        len: u64,
    ) -> Result<RegionInfo, DelegateError> {
        let backing = match path {
            None => Backing::Anonymous { len },
            Some(p) => Backing::File {
                path: path_of(p)?,
                offset,
                len,
            },
        };
        self.call(
            dev,
            env,
            &Request::MapRegion { access, backing },
            |r| match r {
                Reply::MapRegion(info) => Ok(info),
                _ => Err(wrong(Op::MapRegion)),
            },
        )
    }

    pub fn unmap_region<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        region: u32,
    ) -> Result<(), DelegateError> {
        self.call(dev, env, &Request::UnmapRegion { region }, |r| match r {
            Reply::UnmapRegion => Ok(()),
            _ => Err(wrong(Op::UnmapRegion)),
        })
    }

    // ---- one-sided operations on regions ----

    /// Posts one RDMA READ, WRITE or atomic of `len` bytes between the region at `offset`
    /// and buffer `buf` at `at`, as a call of its own.
    #[allow(clippy::too_many_arguments)]
    fn submit_one_sided<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        region: &RegionInfo,
        offset: u64,
        buf: BufId,
        at: usize,
        len: u32,
        need: Access,
        opcode: impl FnOnce(u64, u32) -> WrOpcode,
    ) -> Result<Tag, DelegateError> {
        self.check()?;
        if !region.access.contains(need)
            || offset
                .checked_add(u64::from(len))
                .is_none_or(|end| end > region.len)
        {
            return Err(DelegateError::OutOfRange);
        }
        let (addr, lkey, _) = self.span(buf, at, len as usize)?;
        let i = self.free_slot(dev)?;
        let gen = self.next_gen();
        let sge = [Sge {
            addr,
            length: len,
            lkey,
        }];
        let wr = SendWr {
            wr_id: WR_SEND | i as u64,
            opcode: opcode(region.addr + offset, region.rkey),
            payload: Payload::Sges(&sge),
            flags: SendFlags::SIGNALED,
            ud: None,
        };
        self.post(dev, env, i, gen, None, &wr)?;
        Ok(Tag::new(gen, i))
    }

    /// RDMA READ of `len` bytes of the region at `offset` into buffer `buf` at `at`,
    /// without waiting.
    #[allow(clippy::too_many_arguments)]
    pub fn submit_region_read<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        region: &RegionInfo,
        offset: u64,
        buf: BufId,
        at: usize,
        len: u32,
    ) -> Result<Tag, DelegateError> {
        self.submit_one_sided(
            dev,
            env,
            region,
            offset,
            buf,
            at,
            len,
            Access::READ,
            |remote_addr, rkey| WrOpcode::RdmaRead { remote_addr, rkey },
        )
    }

    /// RDMA WRITE of `len` bytes of buffer `buf` at `at` into the region at `offset`,
    /// without waiting.
    #[allow(clippy::too_many_arguments)]
    pub fn submit_region_write<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        region: &RegionInfo,
        offset: u64,
        buf: BufId,
        at: usize,
        len: u32,
    ) -> Result<Tag, DelegateError> {
        self.submit_one_sided(
            dev,
            env,
            region,
            offset,
            buf,
            at,
            len,
            Access::WRITE,
            |remote_addr, rkey| WrOpcode::RdmaWrite { remote_addr, rkey },
        )
    }

    /// Blocking [`Client::submit_region_read`].
    #[allow(clippy::too_many_arguments)]
    pub fn region_read<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        region: &RegionInfo,
        offset: u64,
        buf: BufId,
        at: usize,
        len: u32,
    ) -> Result<(), DelegateError> {
        let tag = self.submit_region_read(dev, env, region, offset, buf, at, len)?;
        self.finish(dev, env, tag)
    }

    /// Blocking [`Client::submit_region_write`].
    #[allow(clippy::too_many_arguments)]
    pub fn region_write<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        region: &RegionInfo,
        offset: u64,
        buf: BufId,
        at: usize,
        len: u32,
    ) -> Result<(), DelegateError> {
        let tag = self.submit_region_write(dev, env, region, offset, buf, at, len)?;
        self.finish(dev, env, tag)
    }

    /// Compare-and-swap of the 8-byte word at `offset` of the region (8-aligned): the old
    /// value, as the HCA keeps it (big-endian), landing in buffer `buf` at `at`.
    #[allow(clippy::too_many_arguments)]
    pub fn region_cas<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        region: &RegionInfo,
        offset: u64,
        compare: u64,
        swap: u64,
        buf: BufId,
        at: usize,
    ) -> Result<u64, DelegateError> {
        if !offset.is_multiple_of(8) {
            return Err(DelegateError::OutOfRange);
        }
        let tag = self.submit_one_sided(
            dev,
            env,
            region,
            offset,
            buf,
            at,
            8,
            Access::ATOMIC,
            |remote_addr, rkey| WrOpcode::AtomicCmpAndSwp {
                remote_addr,
                rkey,
                compare,
                swap,
            },
        )?;
        self.finish(dev, env, tag)?;
        self.word(buf, at)
    }

    /// Fetch-and-add of `add` to the 8-byte word at `offset` of the region (8-aligned): the
    /// old value (big-endian in memory), landing in buffer `buf` at `at`.
    #[allow(clippy::too_many_arguments)]
    pub fn region_fetch_add<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        region: &RegionInfo,
        offset: u64,
        add: u64,
        buf: BufId,
        at: usize,
    ) -> Result<u64, DelegateError> {
        if !offset.is_multiple_of(8) {
            return Err(DelegateError::OutOfRange);
        }
        let tag = self.submit_one_sided(
            dev,
            env,
            region,
            offset,
            buf,
            at,
            8,
            Access::ATOMIC,
            |remote_addr, rkey| WrOpcode::AtomicFetchAndAdd {
                remote_addr,
                rkey,
                add,
            },
        )?;
        self.finish(dev, env, tag)?;
        self.word(buf, at)
    }

    fn word(&self, buf: BufId, at: usize) -> Result<u64, DelegateError> {
        let b = self
            .buffer(buf)
            .and_then(|r| r.read::<8>(at))
            .ok_or(DelegateError::OutOfRange)?;
        Ok(u64::from_be_bytes(b))
    }

    /// Takes the completed one-sided operation of `tag` and frees its slot.
    pub fn take_one_sided(&mut self, tag: Tag) -> Result<(), DelegateError> {
        let i = self.slot_of(tag)?;
        let result = match self.slots[i].state {
            State::Waiting => return Err(DelegateError::Pending),
            State::Done => Ok(()),
            State::Failed(e) => Err(e),
            _ => return Err(DelegateError::UnknownTag),
        };
        self.slots[i].state = State::Free;
        result
    }

    /// Waits for a one-sided operation and takes it.
    fn finish<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        tag: Tag,
    ) -> Result<(), DelegateError> {
        self.wait(dev, env, tag)?;
        self.take_one_sided(tag)
    }

    // ---- the end ----

    /// Says goodbye (when the connection still works; bounded by the call timeout) and
    /// releases every object and buffer, registered ones included.
    pub fn close<E: BenchEnv>(mut self, dev: &mut D, env: &mut E) -> Result<(), DelegateError> {
        let bye = if self.broken.is_none() && self.accepted.is_some() {
            // Calls still out are given up first: their slots are needed no more.
            for s in &mut self.slots {
                if s.state == State::Waiting {
                    s.state = State::Abandoned;
                }
            }
            self.call(dev, env, &Request::Goodbye, |r| match r {
                Reply::Goodbye => Ok(()),
                _ => Err(wrong(Op::Goodbye)),
            })
        } else {
            Ok(())
        };
        self.release(dev);
        bye
    }

    fn release(&mut self, dev: &mut D) {
        // Teardown errors cannot be acted upon here; every object is still released.
        if let Some(qp) = self.qp.take() {
            let _ = dev.destroy_qp(qp);
        }
        if let Some(cq) = self.cq.take() {
            let _ = dev.destroy_cq(cq);
        }
        for b in self.bufs.drain(..).flatten() {
            let Registered { region, mr, .. } = b;
            if dev.dereg_mr(mr).is_err() {
                region.leak();
            }
        }
        for mr in [self.send_mr.take(), self.recv_mr.take()]
            .into_iter()
            .flatten()
        {
            let _ = dev.dereg_mr(mr);
        }
        if let Some(pd) = self.pd.take() {
            let _ = dev.dealloc_pd(pd);
        }
        self.send_buf = None;
        self.recv_buf = None;
    }
}

fn wrong(op: Op) -> DelegateError {
    DelegateError::BadReply {
        op: Some(op),
        why: delegate_wire::Error::BadValue,
    }
}

fn path_of(p: &str) -> Result<Path<'_>, DelegateError> {
    Path::new(p.as_bytes())
        .map_err(|_| DelegateError::BadRequest("a path of 1..=1024 bytes without NUL"))
}

/// splitmix64: spreads a cycle count into a session number and a PSN.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The client as the interrupt path sees it while [`Client::wait_for`] waits (isr mode):
/// each interrupt consumes the CQ's event, takes the completions and re-arms while the
/// waited-for condition does not hold.
struct IsrRun<'a, D: Device> {
    client: &'a mut Client<D>,
    dev: &'a mut D,
    done: &'a dyn Fn(&Client<D>) -> bool,
    progress: &'a IsrProgress,
    error: Option<DelegateError>,
}

impl<D: Device> IsrHandler for IsrRun<'_, D> {
    fn on_interrupt(&mut self) {
        let c = &mut *self.client;
        c.counters.isr_calls += 1;
        if self.error.is_none() {
            let r = (|| {
                let cq = c.cq.ok_or(DelegateError::NoMemory("CQ"))?;
                match self.dev.get_cq_event(cq, 0) {
                    Ok(()) => {
                        c.armed = false;
                        c.counters.events += 1;
                    }
                    Err(verbs::Error::Timeout(_)) => {}
                    Err(err) => {
                        return Err(DelegateError::Verbs {
                            during: "get_cq_event (isr)",
                            err,
                        })
                    }
                }
                c.counters.isr_completed += u64::from(c.drain(self.dev)?);
                if !(self.done)(c) && !c.armed {
                    let cq = c.cq.ok_or(DelegateError::NoMemory("CQ"))?;
                    self.dev
                        .req_notify_cq(cq, false)
                        .map_err(vb("req_notify_cq (isr)"))?;
                    c.armed = true;
                }
                Ok(())
            })();
            if let Err(e) = r {
                self.error = Some(e);
            }
        }
        let finished = self.error.is_some() || (self.done)(c);
        self.progress.publish(c.completed, finished);
    }
}
