//! Finding the delegate and agreeing on the RC connection: the set-up exchange of
//! docs/delegation.md on a UD QP of the rendezvous's Q_Key (docs/rendezvous.md). The node
//! sends a Connect (its RC QP, PSN, MTU, credits, lease) to the delegate's rendezvous QPN at
//! its LID, or to every LID of a probed range, repeating it after 10 ms and then at doubling
//! gaps up to 160 ms, until an Accept or a Refuse of its session comes back or the bound
//! passes. The UD QP, its CQ, buffer and address handles live only for the exchange.

use alloc::vec::Vec;

use delegate_wire::connect::{self, Kind, Setup};
use verbs::{
    AccessFlags, AhAttr, Device, DmaRegion, Mtu, Payload, QpAttr, QpCap, QpInitAttr, QpState,
    QpType, RecvWr, SendFlags, SendWr, Sge, UdDest, WcStatus, WorkCompletion, WrOpcode,
};

use super::client::{ClientConfig, DelegateError};
use crate::env::BenchEnv;

/// Receives kept posted for the delegate's answers.
const RECVS: u32 = 16;
/// Connects in flight at most (one per probed LID per round).
const SQ: u32 = 64;
/// A UD receive: the 40-byte GRH slot, then the message.
const GRH: usize = 40;
const SLOT: usize = 128;
/// Work request ids of the exchange's sends (receives use their slot index).
const SEND_WRID: u64 = 1 << 32;

/// What the node offers the delegate in its Connect.
#[derive(Clone, Copy, Debug)]
pub struct Offer {
    pub lid: u16,
    pub guid: u64,
    pub qpn: u32,
    pub psn: u32,
    pub mtu: Mtu,
    pub credits: u16,
    pub lease_ms: u32,
}

/// The delegate's Accept, as the node connects to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The delegate's LID: where its Accept came from.
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
    pub mtu: Mtu,
    /// Calls the delegate takes at once.
    pub credits: u16,
    /// Largest message it receives.
    pub max_message: u16,
    pub lease_ms: u32,
    /// The delegate's number for this node.
    pub node: u32,
    /// The delegate's port GUID.
    pub guid: u64,
}

/// The exchange's objects, released by [`Exchange::close`] whatever happened.
struct Exchange<D: Device> {
    cq: Option<D::Cq>,
    qp: Option<D::Qp>,
    mr: Option<D::Mr>,
    buf: Option<DmaRegion>,
    ahs: Vec<(u16, D::Ah)>,
    lkey: u32,
    inflight: u32,
}

fn vb(during: &'static str) -> impl FnOnce(verbs::Error) -> DelegateError {
    move |err| DelegateError::Verbs { during, err }
}

/// Runs the set-up exchange for `offer` (session `session`, never 0) on `pd`: the
/// delegate's Accept, or why there is none.
pub fn exchange<D: Device, E: BenchEnv>(
    dev: &mut D,
    env: &mut E,
    pd: D::Pd,
    cfg: &ClientConfig,
    offer: &Offer,
    session: u32,
) -> Result<Accepted, DelegateError> {
    let mut x = Exchange::<D> {
        cq: None,
        qp: None,
        mr: None,
        buf: None,
        ahs: Vec::new(),
        lkey: 0,
        inflight: 0,
    };
    let r = x
        .build(dev, env, pd, cfg)
        .and_then(|()| x.run(dev, env, pd, cfg, offer, session));
    x.close(dev, env);
    r
}

impl<D: Device> Exchange<D> {
    fn build<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        pd: D::Pd,
        cfg: &ClientConfig,
    ) -> Result<(), DelegateError> {
        let len = RECVS as usize * SLOT;
        let buf = env
            .alloc_dma(len, 64)
            .ok_or(DelegateError::NoMemory("set-up buffer"))?;
        let mr = dev
            .reg_mr(pd, buf.bus(), len as u64, AccessFlags::LOCAL_WRITE)
            .map_err(vb("reg_mr (set-up)"))?;
        self.lkey = dev.mr_lkey(mr);
        self.buf = Some(buf);
        self.mr = Some(mr);
        let cq = dev
            .create_cq(RECVS + SQ + 1)
            .map_err(vb("create_cq (set-up)"))?;
        self.cq = Some(cq);
        let qp = dev
            .create_qp(&QpInitAttr {
                pd,
                send_cq: cq,
                recv_cq: cq,
                qp_type: QpType::Ud,
                cap: QpCap {
                    max_send_wr: SQ,
                    max_recv_wr: RECVS,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: connect::LEN as u32,
                },
                sq_sig_all: true,
            })
            .map_err(vb("create_qp (set-up)"))?;
        self.qp = Some(qp);
        let mut init = QpAttr::new(QpState::Init);
        init.port_num = cfg.port;
        init.qkey = connect::RDV_QKEY;
        dev.modify_qp(qp, &init).map_err(vb("set-up QP to INIT"))?;
        dev.modify_qp(qp, &QpAttr::new(QpState::Rtr))
            .map_err(vb("set-up QP to RTR"))?;
        dev.modify_qp(qp, &QpAttr::new(QpState::Rts))
            .map_err(vb("set-up QP to RTS"))?;
        for slot in 0..RECVS {
            self.post_recv(dev, slot)?;
        }
        Ok(())
    }

    fn post_recv(&self, dev: &mut D, slot: u32) -> Result<(), DelegateError> {
        let (Some(qp), Some(buf)) = (self.qp, self.buf.as_ref()) else {
            return Err(DelegateError::NoMemory("set-up QP"));
        };
        let sge = [Sge {
            addr: buf.bus_at(slot as usize * SLOT),
            length: SLOT as u32,
            lkey: self.lkey,
        }];
        dev.post_recv(
            qp,
            &RecvWr {
                wr_id: u64::from(slot),
                sg_list: &sge,
            },
        )
        .map_err(vb("post_recv (set-up)"))
    }

    /// The address handle toward `lid` (made once per LID).
    fn ah(&mut self, dev: &mut D, pd: D::Pd, port: u8, lid: u16) -> Result<D::Ah, DelegateError> {
        if let Some((_, ah)) = self.ahs.iter().find(|(l, _)| *l == lid) {
            return Ok(*ah);
        }
        let ah = dev
            .create_ah(
                pd,
                &AhAttr {
                    dlid: lid,
                    port,
                    ..AhAttr::default()
                },
            )
            .map_err(vb("create_ah (set-up)"))?;
        self.ahs.push((lid, ah));
        Ok(ah)
    }

    fn run<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        pd: D::Pd,
        cfg: &ClientConfig,
        offer: &Offer,
        session: u32,
    ) -> Result<Accepted, DelegateError> {
        let mut msg = [0u8; connect::LEN];
        Setup::connect(
            session,
            offer.lid,
            offer.guid,
            offer.qpn,
            offer.psn,
            offer.mtu as u8,
            offer.credits,
            offer.lease_ms,
        )
        .emit(&mut msg)
        .map_err(|_| DelegateError::BadRequest("the Connect's fields"))?;
        let (first, last) = match cfg.lid {
            Some(lid) => (lid, lid),
            None => cfg.probe_lids,
        };
        let start = env.now_ns();
        let bound = cfg.connect_timeout_ns;
        let mut gap = bound.min(10_000_000);
        let mut next_round = start;
        loop {
            let now = env.now_ns();
            if now >= next_round {
                for lid in first..=last {
                    if lid == offer.lid && cfg.lid.is_none() {
                        continue;
                    }
                    if self.inflight >= SQ {
                        break;
                    }
                    self.send(dev, pd, cfg, lid, &msg)?;
                }
                next_round = now + gap;
                gap = (gap * 2).min(bound.min(160_000_000));
            }
            if let Some(a) = self.poll(dev, session)? {
                return a;
            }
            if env.now_ns().saturating_sub(start) > bound {
                return Err(DelegateError::NotFound {
                    waited_ms: bound / 1_000_000,
                });
            }
            env.relax();
        }
    }

    fn send(
        &mut self,
        dev: &mut D,
        pd: D::Pd,
        cfg: &ClientConfig,
        lid: u16,
        msg: &[u8],
    ) -> Result<(), DelegateError> {
        let qp = self.qp.ok_or(DelegateError::NoMemory("set-up QP"))?;
        let ah = self.ah(dev, pd, cfg.port, lid)?;
        let wr = SendWr {
            wr_id: SEND_WRID | u64::from(lid),
            opcode: WrOpcode::Send,
            payload: Payload::Inline(msg),
            flags: SendFlags::SIGNALED,
            ud: Some(UdDest {
                ah,
                remote_qpn: cfg.rdv_qpn,
                remote_qkey: connect::RDV_QKEY,
            }),
        };
        dev.post_send(qp, &wr).map_err(vb("post_send (Connect)"))?;
        self.inflight += 1;
        Ok(())
    }

    /// Takes what completed: `Some` once an answer of `session` arrived.
    #[allow(clippy::type_complexity)]
    fn poll(
        &mut self,
        dev: &mut D,
        session: u32,
    ) -> Result<Option<Result<Accepted, DelegateError>>, DelegateError> {
        let cq = self.cq.ok_or(DelegateError::NoMemory("set-up CQ"))?;
        let mut wc = [WorkCompletion::default(); 8];
        loop {
            let n = dev.poll_cq(cq, &mut wc).map_err(vb("poll_cq (set-up)"))?;
            for w in &wc[..n] {
                if w.wr_id & SEND_WRID != 0 {
                    self.inflight = self.inflight.saturating_sub(1);
                    continue;
                }
                let slot = w.wr_id as u32;
                let answer = if w.status == WcStatus::Success {
                    self.answer(slot, w, session)
                } else {
                    None
                };
                if w.status != WcStatus::WrFlushErr {
                    self.post_recv(dev, slot)?;
                }
                if answer.is_some() {
                    return Ok(answer);
                }
            }
            if n < wc.len() {
                return Ok(None);
            }
        }
    }

    /// The answer in receive `slot`, if it is one to `session`; anything else (another
    /// version, another session, a malformed message) is ignored.
    fn answer(
        &self,
        slot: u32,
        w: &WorkCompletion,
        session: u32,
    ) -> Option<Result<Accepted, DelegateError>> {
        let buf = self.buf.as_ref()?;
        let len = (w.byte_len as usize).min(SLOT);
        let bytes: [u8; connect::LEN] = buf.read(slot as usize * SLOT + GRH)?;
        if len < GRH + connect::LEN {
            return None;
        }
        let s = Setup::parse(&bytes).ok()??;
        if s.session != session {
            return None;
        }
        Some(match s.kind {
            Kind::Connect => return None,
            Kind::Refuse => Err(DelegateError::Refused(s.reason?)),
            Kind::Accept => match Mtu::from_raw(s.mtu) {
                Some(mtu) => Ok(Accepted {
                    lid: w.slid,
                    qpn: s.qpn,
                    psn: s.psn,
                    mtu,
                    credits: s.credits,
                    max_message: s.max_message,
                    lease_ms: s.lease_ms,
                    node: s.node,
                    guid: s.guid,
                }),
                None => Err(DelegateError::BadAccept("MTU")),
            },
        })
    }

    /// Releases every object; waits, bounded, for the Connects still in flight.
    fn close<E: BenchEnv>(mut self, dev: &mut D, env: &mut E) {
        if let Some(cq) = self.cq {
            let start = env.now_ns();
            let mut wc = [WorkCompletion::default(); 8];
            while self.inflight > 0 && env.now_ns().saturating_sub(start) < 10_000_000 {
                match dev.poll_cq(cq, &mut wc) {
                    Ok(0) => env.relax(),
                    Ok(n) => {
                        let sends = wc[..n].iter().filter(|w| w.wr_id & SEND_WRID != 0).count();
                        self.inflight = self.inflight.saturating_sub(sends as u32);
                    }
                    Err(_) => break,
                }
            }
        }
        // Teardown errors cannot be acted upon; every object is still released.
        if let Some(qp) = self.qp.take() {
            let _ = dev.destroy_qp(qp);
        }
        for (_, ah) in self.ahs.drain(..) {
            let _ = dev.destroy_ah(ah);
        }
        if let Some(cq) = self.cq.take() {
            let _ = dev.destroy_cq(cq);
        }
        if let Some(mr) = self.mr.take() {
            let _ = dev.dereg_mr(mr);
        }
        self.buf = None;
    }
}
