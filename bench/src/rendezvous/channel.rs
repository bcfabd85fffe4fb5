//! The rendezvous channel: a node's UD QP at its rendezvous QPN with its own receive slots,
//! the one way the ping-pong's exchange, the plans' listeners and the SRQ ping-pong's
//! exchange send and receive rendezvous messages.
//!
//! Messages are sent inline and signaled (so the send queue's slots come back), at most
//! `SQ - 1` outstanding; a send that finds the queue full is skipped, since every message of
//! the protocol is repeated until answered. Each of the `SLOTS` receive slots holds the GRH
//! and one message and is posted again as soon as its message has been read.

use verbs::{
    AccessFlags, Device, Payload, QpAttr, QpCap, QpInitAttr, QpState, QpType, RecvWr, SendFlags,
    SendWr, Sge, UdDest, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

use super::{GRH, MSG_LEN, QKEY};
use crate::env::BenchEnv;
use crate::perftest::BenchError;
use crate::resources::Resources;
use alloc::vec::Vec;

/// Receive slots kept posted.
const SLOTS: u32 = 32;
/// Bytes per receive slot (the GRH and one message, padded).
const SLOT: usize = 128;
/// Send work requests the QP may have outstanding.
const SQ: u32 = 128;
/// Marks send completions (receive completions carry the slot index).
const SEND_WRID: u64 = 1 << 63;
/// Completions taken per [`Channel::poll`].
const BATCH: usize = 8;
/// Longest [`Channel::close`] waits for sends still in flight.
const CLOSE_WAIT_NS: u64 = 10_000_000;

fn vb(during: &'static str) -> impl FnOnce(verbs::Error) -> BenchError {
    move |err| BenchError::Verbs { during, err }
}

/// One node's rendezvous QP, its receive slots and its address handles (one per LID spoken
/// to).
pub struct Channel<D: Device> {
    res: Resources<D>,
    pd: D::Pd,
    cq: D::Cq,
    qp: D::Qp,
    qpn: u32,
    lkey: u32,
    port: u8,
    ahs: Vec<(u16, D::Ah)>,
    inflight: u32,
}

/// What [`Channel::build`] made, beside its resources.
struct Built<D: Device> {
    pd: D::Pd,
    cq: D::Cq,
    qp: D::Qp,
    lkey: u32,
}

impl<D: Device> Channel<D> {
    /// Creates the QP at `qpn` on `port`, brings it to RTS and posts every receive slot.
    pub fn open<E: BenchEnv>(
        dev: &mut D,
        env: &mut E,
        port: u8,
        qpn: u32,
    ) -> Result<Self, BenchError> {
        let mut res = Resources::new();
        match Self::build(dev, env, &mut res, port, qpn) {
            Ok(Built { pd, cq, qp, lkey }) => {
                let mut ch = Channel {
                    res,
                    pd,
                    cq,
                    qp,
                    qpn,
                    lkey,
                    port,
                    ahs: Vec::new(),
                    inflight: 0,
                };
                for slot in 0..SLOTS {
                    if let Err(e) = ch.post_recv(dev, slot) {
                        ch.close(dev, env);
                        return Err(e);
                    }
                }
                Ok(ch)
            }
            Err(e) => {
                res.close(dev);
                Err(e)
            }
        }
    }

    fn build<E: BenchEnv>(
        dev: &mut D,
        env: &mut E,
        res: &mut Resources<D>,
        port: u8,
        qpn: u32,
    ) -> Result<Built<D>, BenchError> {
        res.alloc_buffer(env, SLOTS as usize * SLOT, "rendezvous receive slots")?;
        let pd = res.alloc_pd(dev)?;
        let mr = res.reg_buffer(dev, pd, AccessFlags::LOCAL_WRITE)?;
        let lkey = dev.mr_lkey(mr);
        let cq = res.create_cq(dev, SLOTS + SQ + 1, "create_cq (rendezvous)")?;
        let attr = QpInitAttr {
            pd,
            send_cq: cq,
            recv_cq: cq,
            qp_type: QpType::Ud,
            cap: QpCap {
                max_send_wr: SQ,
                max_recv_wr: SLOTS,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: MSG_LEN as u32,
            },
            sq_sig_all: false,
        };
        let qp = res.create_qp_at(
            dev,
            &attr,
            qpn,
            "create rendezvous QP at its well-known QPN",
        )?;
        let mut init = QpAttr::new(QpState::Init);
        init.port_num = port;
        init.qkey = QKEY;
        dev.modify_qp(qp, &init)
            .map_err(vb("rendezvous QP to INIT"))?;
        dev.modify_qp(qp, &QpAttr::new(QpState::Rtr))
            .map_err(vb("rendezvous QP to RTR"))?;
        let mut rts = QpAttr::new(QpState::Rts);
        rts.sq_psn = 0;
        dev.modify_qp(qp, &rts)
            .map_err(vb("rendezvous QP to RTS"))?;
        Ok(Built { pd, cq, qp, lkey })
    }

    /// This node's rendezvous QPN.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    fn post_recv(&mut self, dev: &mut D, slot: u32) -> Result<(), BenchError> {
        let Some(buf) = self.res.buffer() else {
            return Ok(());
        };
        let sge = [Sge {
            addr: buf.bus_at(slot as usize * SLOT),
            length: (GRH + MSG_LEN) as u32,
            lkey: self.lkey,
        }];
        dev.post_recv(
            self.qp,
            &RecvWr {
                wr_id: u64::from(slot),
                sg_list: &sge,
            },
        )
        .map_err(vb("post rendezvous receive"))
    }

    /// The address handle to `lid`, made on first use.
    fn ah(&mut self, dev: &mut D, lid: u16) -> Result<D::Ah, BenchError> {
        if let Some(&(_, ah)) = self.ahs.iter().find(|(l, _)| *l == lid) {
            return Ok(ah);
        }
        let ah = self.res.create_ah(dev, self.pd, lid, self.port)?;
        self.ahs.push((lid, ah));
        Ok(ah)
    }

    /// Sends `msg` to the rendezvous QPN `qpn` at `lid`; `Ok(false)` when the send queue is
    /// full (the message is not sent: the protocol sends it again).
    pub fn send(
        &mut self,
        dev: &mut D,
        lid: u16,
        qpn: u32,
        msg: &[u8; MSG_LEN],
    ) -> Result<bool, BenchError> {
        if self.inflight >= SQ - 1 {
            return Ok(false);
        }
        let ah = self.ah(dev, lid)?;
        let wr = SendWr {
            wr_id: SEND_WRID,
            opcode: WrOpcode::Send,
            payload: Payload::Inline(msg),
            flags: SendFlags::SIGNALED,
            ud: Some(UdDest {
                ah,
                remote_qpn: qpn,
                remote_qkey: QKEY,
            }),
        };
        match dev.post_send(self.qp, &wr) {
            Ok(()) => {
                self.inflight += 1;
                Ok(true)
            }
            Err(verbs::Error::QueueFull) => Ok(false),
            Err(err) => Err(BenchError::Verbs {
                during: "post rendezvous send",
                err,
            }),
        }
    }

    /// Takes the completions waiting (at most 8): each message received goes to `on` with
    /// the sender's LID and QPN, and its slot is posted again. Returns the completions
    /// taken (0: nothing was waiting).
    pub fn poll(
        &mut self,
        dev: &mut D,
        mut on: impl FnMut(&[u8; MSG_LEN], u16, u32),
    ) -> Result<usize, BenchError> {
        let mut wc = [WorkCompletion::default(); BATCH];
        let n = dev
            .poll_cq(self.cq, &mut wc)
            .map_err(vb("poll rendezvous CQ"))?;
        for w in &wc[..n] {
            if w.wr_id & SEND_WRID != 0 {
                self.inflight = self.inflight.saturating_sub(1);
                continue;
            }
            let slot = (w.wr_id as u32).min(SLOTS - 1);
            if w.status == WcStatus::Success && w.opcode == WcOpcode::Recv {
                let at = slot as usize * SLOT + GRH;
                // The slot's receive completed and is posted again only below: the device
                // is not writing it.
                if let Some(msg) = self.res.buffer().and_then(|b| b.read::<MSG_LEN>(at)) {
                    on(&msg, w.slid, w.src_qp);
                }
            } else if w.status == WcStatus::WrFlushErr {
                return Err(BenchError::Completion {
                    during: "rendezvous receive",
                    status: w.status,
                });
            }
            self.post_recv(dev, slot)?;
        }
        Ok(n)
    }

    /// Waits (bounded) for the sends in flight, then releases everything.
    pub fn close<E: BenchEnv>(mut self, dev: &mut D, env: &mut E) {
        let start = env.now_ns();
        while self.inflight > 0 && env.now_ns().saturating_sub(start) < CLOSE_WAIT_NS {
            match self.poll(dev, |_, _, _| {}) {
                Ok(0) => env.relax(),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        self.res.close(dev);
    }
}
