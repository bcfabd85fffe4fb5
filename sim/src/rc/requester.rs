//! RC requester: builds request packets from send WQEs, keeps them until acknowledged,
//! retransmits on ACK timeout or RNR NAK, and completes them in order (§7.3).

use super::{is_rd_atomic, psn_diff, RcPending};
use crate::cq::{Completion, Syndrome};
use crate::hca::Hca;
use crate::mr::Access;
use crate::packet::{Aeth, AtomicEth, Packet, PacketOp, Reth};
use crate::qp::{QpState, ServiceType};
use crate::seg::{self, Atomic, Data, Raddr};
use crate::wqe::{error_cqe, key_err, send_op, werr, Sge, WqeError};

/// IB RNR timer codes in µs (IB spec table "RNR NAK timer field encoding").
const RNR_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
    5120, 7680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760,
    327_680, 491_520,
];

impl Hca {
    /// Parse local scatter entries (pointer segments) for READ/ATOMIC responses.
    fn rc_local_sges(
        &mut self,
        qpn: u32,
        wqe: &[u8],
        mut pos: usize,
    ) -> Result<Vec<Sge>, WqeError> {
        let (pd, rlkey) = self
            .qps
            .get(&qpn)
            .map(|q| (q.pd(), q.rlkey()))
            .unwrap_or((0, false));
        let mut v = Vec::new();
        while pos + seg::data::SIZE <= wqe.len() {
            let d = &wqe[pos..];
            let Data {
                byte_count: bc,
                lkey,
                addr,
            } = Data::parse(d);
            if Data::is_inline(d) {
                return Err(werr(
                    Syndrome::LocalQpOperation,
                    "inline segment as a READ/ATOMIC destination",
                ));
            }
            self.translate_key(lkey, pd, rlkey, addr, u64::from(bc), Access::LocalWrite)
                .map_err(key_err)?;
            v.push((lkey, addr, bc));
            pos += seg::data::SIZE;
        }
        Ok(v)
    }

    /// Post one RC WQE: build its request packets and queue it until acknowledged.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rc_post(
        &mut self,
        qpn: u32,
        counter: u16,
        wqe: &[u8],
        opcode: u8,
        signaled: bool,
        solicited: bool,
        imm: u32,
    ) -> Result<(), WqeError> {
        let Some((base, active)) = self.rc_base_packet(qpn) else {
            return Ok(());
        };
        // Every outstanding request still owns its SQ slot; more than the SQ holds means the
        // driver reused slots of unacknowledged WQEs (§5.3 headroom rules).
        if let Some(q) = self.qps.get(&qpn) {
            if q.rc.pending.len() >= 1usize << q.sq_log_count() {
                return Err(werr(
                    Syndrome::LocalQpOperation,
                    format!(
                        "SQ overrun: {} RC requests outstanding in a {}-entry SQ",
                        q.rc.pending.len(),
                        1u32 << q.sq_log_count()
                    ),
                ));
            }
        }
        let (mtu, log_msg) = {
            let Some(q) = self.qps.get(&qpn) else {
                return Ok(());
            };
            (
                (q.mtu_bytes().min(self.port_mtu(q.port()))).max(256) as usize,
                q.log_msg_max().min(31),
            )
        };
        let mut pend = RcPending {
            wqe_index: counter,
            opcode,
            signaled,
            first_psn: 0,
            last_psn: 0,
            packets: Vec::new(),
            local: Vec::new(),
            len: 0,
            received: 0,
        };
        let mut pkts = Vec::new();
        // The remote address segment follows the control segment; the atomic segment, the
        // remote address segment.
        const RADDR: usize = seg::ctrl::SIZE;
        const ATOMIC: usize = RADDR + seg::raddr::SIZE;
        let raddr = Raddr::parse(&wqe[RADDR.min(wqe.len())..]);
        let reth = |len: u32| Reth {
            va: raddr.va,
            rkey: raddr.rkey,
            len,
        };
        match opcode {
            send_op::SEND | send_op::SEND_IMM | send_op::RDMA_WRITE | send_op::RDMA_WRITE_IMM => {
                let write = matches!(opcode, send_op::RDMA_WRITE | send_op::RDMA_WRITE_IMM);
                let payload =
                    self.gather(qpn, wqe, if write { ATOMIC } else { RADDR }, usize::MAX)?;
                let chunks: Vec<&[u8]> = if payload.is_empty() {
                    vec![&[][..]]
                } else {
                    payload.chunks(mtu).collect()
                };
                let n = chunks.len();
                for (i, c) in chunks.into_iter().enumerate() {
                    let mut p = base.clone();
                    p.op = PacketOp::for_position(write, i == 0, i + 1 == n);
                    if write && i == 0 {
                        p.reth = Some(reth(payload.len() as u32));
                    }
                    if i + 1 == n {
                        p.imm = matches!(opcode, send_op::SEND_IMM | send_op::RDMA_WRITE_IMM)
                            .then_some(imm);
                        p.solicited = solicited;
                    }
                    p.payload = c.to_vec();
                    pkts.push(p);
                }
            }
            send_op::RDMA_READ => {
                pend.local = self.rc_local_sges(qpn, wqe, ATOMIC)?;
                let len: u64 = pend.local.iter().map(|s| u64::from(s.2)).sum();
                if len > 1u64 << log_msg {
                    return Err(werr(
                        Syndrome::LocalLength,
                        format!("RDMA READ of {len} bytes exceeds the max message size"),
                    ));
                }
                pend.len = len;
                let mut p = base.clone();
                p.op = PacketOp::ReadRequest;
                p.reth = Some(reth(len as u32));
                pkts.push(p);
            }
            send_op::ATOMIC_CS | send_op::ATOMIC_FA => {
                pend.local = self.rc_local_sges(qpn, wqe, ATOMIC + seg::atomic::SIZE)?;
                let len: u64 = pend.local.iter().map(|s| u64::from(s.2)).sum();
                if len != 8 {
                    return Err(werr(
                        Syndrome::LocalLength,
                        format!("atomic with a {len}-byte local buffer (must be 8)"),
                    ));
                }
                pend.len = 8;
                let mut p = base.clone();
                p.op = if opcode == send_op::ATOMIC_CS {
                    PacketOp::CompareSwap
                } else {
                    PacketOp::FetchAdd
                };
                p.reth = Some(reth(8));
                let a = Atomic::parse(&wqe[ATOMIC.min(wqe.len())..]);
                p.atomic = Some(AtomicEth {
                    swap_add: a.swap_add,
                    compare: a.compare,
                });
                pkts.push(p);
            }
            _ => {
                return Err(werr(
                    Syndrome::LocalQpOperation,
                    format!("opcode {opcode:#x} is not modelled on RC"),
                ))
            }
        }
        let deadline = self.rc_timeout(qpn).map(|t| self.now_ns.saturating_add(t));
        let Some(q) = self.qps.get_mut(&qpn) else {
            return Ok(());
        };
        pend.first_psn = q.sq_psn;
        for p in &mut pkts {
            p.psn = q.sq_psn;
            q.sq_psn = (q.sq_psn + 1) & 0xff_ffff;
        }
        if opcode == send_op::RDMA_READ {
            // A read response uses one PSN per MTU-sized packet.
            let n = pend.len.div_ceil(mtu as u64).max(1) as u32;
            q.sq_psn = (pend.first_psn + n) & 0xff_ffff;
        }
        pend.last_psn = (q.sq_psn.wrapping_sub(1)) & 0xff_ffff;
        pend.packets = pkts.clone();
        q.rc.pending.push_back(pend);
        if is_rd_atomic(opcode) {
            let n = q.rc.rd_atomic_outstanding();
            q.rc.rd_atomic_peak = q.rc.rd_atomic_peak.max(n);
        }
        if q.rc.deadline.is_none() {
            q.rc.deadline = deadline;
        }
        for p in pkts {
            self.send_packet(p, active);
        }
        Ok(())
    }

    /// Whether the SQ of `qpn` must stop at a WQE of `opcode`: an RC READ/atomic while
    /// 2^sra_max READs/atomics are already outstanding (the IB requester's limit, which
    /// Linux's mlx4 programs from max_rd_atomic). The SQ is processed in order, so the WQEs
    /// behind it wait too; [`Hca::rc_resume_sq`] restarts it when a response retires one.
    pub(crate) fn rc_must_hold(&mut self, qpn: u32, opcode: u8) -> bool {
        let Some(q) = self.qps.get_mut(&qpn) else {
            return false;
        };
        if q.service_type() != Some(ServiceType::Rc) || !is_rd_atomic(opcode) {
            return false;
        }
        let held = q.rc.rd_atomic_outstanding() >= 1u32 << q.sra_max();
        q.rc.sq_held = held;
        held
    }

    /// Restart an SQ held by [`Hca::rc_must_hold`] (it stops again at the next READ/atomic
    /// over the limit). Called when a READ/atomic retires and after a modify to RTS.
    pub(crate) fn rc_resume_sq(&mut self, qpn: u32) {
        let Some(q) = self.qps.get_mut(&qpn) else {
            return;
        };
        if !q.rc.sq_held || q.state != QpState::Rts {
            return;
        }
        q.rc.sq_held = false;
        self.sq_run(qpn);
    }

    /// ACK timeout in ns: 4.096 µs x 2^t, t = 0 meaning infinite (§7.3, IB spec).
    fn rc_timeout(&self, qpn: u32) -> Option<u64> {
        let t = self.qps.get(&qpn)?.ack_timeout();
        (t != 0).then(|| 4096u64 << t.min(31))
    }

    fn rc_complete_ok(&mut self, qpn: u32, p: &RcPending) {
        if !p.signaled {
            return;
        }
        let Some(q) = self.qps.get(&qpn) else { return };
        let byte_cnt = if p.opcode == send_op::RDMA_READ
            || matches!(p.opcode, send_op::ATOMIC_CS | send_op::ATOMIC_FA)
        {
            p.len as u32
        } else {
            0
        };
        let c = Completion::send(qpn, p.wqe_index, p.opcode, byte_cnt);
        let cqn = q.send_cqn;
        self.push_cqe(cqn, c);
    }

    /// Requester error: error CQE for the head request, flush the rest, QP to ERR.
    fn rc_fail_head(&mut self, qpn: u32, s: Syndrome, violation: Option<String>) {
        if let Some(v) = violation {
            self.violation("§4.2", v);
        }
        let Some(q) = self.qps.get_mut(&qpn) else {
            return;
        };
        let pending: Vec<RcPending> = q.rc.pending.drain(..).collect();
        q.rc.deadline = None;
        q.rc.rnr_until = None;
        q.rc.sq_held = false;
        q.rc.held_bf.clear();
        let cqn = q.send_cqn;
        for (i, p) in pending.iter().enumerate() {
            let syn = if i == 0 { s } else { Syndrome::WrFlushed };
            self.push_cqe(cqn, error_cqe(qpn, p.wqe_index, syn, true));
        }
        self.qp_to_error(qpn);
    }

    /// Flush outstanding RC requests (QP moved to ERR).
    pub(crate) fn rc_flush(&mut self, qpn: u32) {
        let Some(q) = self.qps.get_mut(&qpn) else {
            return;
        };
        let pending: Vec<RcPending> = q.rc.pending.drain(..).collect();
        q.rc.deadline = None;
        q.rc.rnr_until = None;
        q.rc.sq_held = false;
        q.rc.held_bf.clear();
        let cqn = q.send_cqn;
        for p in pending {
            self.push_cqe(cqn, error_cqe(qpn, p.wqe_index, Syndrome::WrFlushed, true));
        }
    }

    fn rc_retransmit(&mut self, qpn: u32, from_psn: Option<u32>) {
        let Some((_, active)) = self.rc_base_packet(qpn) else {
            return;
        };
        let Some(q) = self.qps.get_mut(&qpn) else {
            return;
        };
        let pkts: Vec<Packet> =
            q.rc.pending
                .iter()
                .filter(|p| from_psn.is_none_or(|f| psn_diff(p.last_psn, f) >= 0))
                .flat_map(|p| p.packets.iter())
                .cloned()
                .collect();
        for p in pkts {
            self.send_packet(p, active);
        }
    }

    /// Timers of RC requesters: ACK timeout (go-back-N retransmission, then "transport retry
    /// exceeded") and RNR back-off.
    pub(crate) fn rc_tick(&mut self) {
        let now = self.now_ns;
        let qpns: Vec<u32> = self
            .qps
            .iter()
            .filter(|(_, q)| q.state == QpState::Rts && !q.rc.pending.is_empty())
            .map(|(&n, _)| n)
            .collect();
        for qpn in qpns {
            let Some(q) = self.qps.get_mut(&qpn) else {
                continue;
            };
            if q.rc.rnr_until.is_some_and(|t| now >= t) {
                q.rc.rnr_until = None;
                self.rc_retransmit(qpn, None);
                continue;
            }
            if q.rc.rnr_until.is_some() || !q.rc.deadline.is_some_and(|d| now >= d) {
                continue;
            }
            let limit = q.retry_count();
            if q.rc.retries_used >= limit {
                self.rc_fail_head(qpn, Syndrome::TransportRetryExceeded, None);
                continue;
            }
            q.rc.retries_used += 1;
            q.rc.deadline = None;
            let t = self.rc_timeout(qpn);
            if let Some(q) = self.qps.get_mut(&qpn) {
                q.rc.deadline = t.map(|t| now.saturating_add(t));
            }
            self.rc_retransmit(qpn, None);
        }
    }

    /// Requester side: an acknowledgement, NAK or response arrived.
    pub(crate) fn rc_requester_rx(&mut self, qpn: u32, pkt: Packet) {
        let Some(q) = self.qps.get_mut(&qpn) else {
            return;
        };
        if q.state != QpState::Rts {
            return;
        }
        match pkt.aeth {
            Some(Aeth::Ack) | None => {}
            Some(Aeth::RnrNak(code)) => {
                let limit = q.rnr_retry();
                if limit != 7 && q.rc.rnr_retries_used >= limit {
                    self.rc_fail_head(qpn, Syndrome::RnrRetryExceeded, None);
                    return;
                }
                q.rc.rnr_retries_used += 1;
                q.rc.rnr_until = Some(
                    self.now_ns
                        .saturating_add(u64::from(RNR_US[usize::from(code & 31)]) * 1000),
                );
                // Requests before the NAKed PSN are implicitly acknowledged.
                self.rc_ack_upto(qpn, pkt.psn.wrapping_sub(1) & 0xff_ffff);
                return;
            }
            Some(Aeth::NakPsnSequence) => {
                if q.rc.rnr_until.is_some() {
                    // Already backing off after an RNR NAK; the retry resends from there.
                    return;
                }
                self.rc_ack_upto(qpn, pkt.psn.wrapping_sub(1) & 0xff_ffff);
                self.rc_retransmit(qpn, Some(pkt.psn));
                return;
            }
            Some(Aeth::NakInvalidRequest) => {
                return self.rc_fail_head(
                    qpn,
                    Syndrome::RemoteInvalidRequest,
                    Some(format!(
                        "QP {qpn:#x}: the responder answered NAK invalid request"
                    )),
                );
            }
            Some(Aeth::NakRemoteAccess) => {
                return self.rc_fail_head(
                    qpn,
                    Syndrome::RemoteAccess,
                    Some(format!(
                        "QP {qpn:#x}: the responder answered NAK remote access error"
                    )),
                );
            }
            Some(Aeth::NakRemoteOperation) => {
                return self.rc_fail_head(
                    qpn,
                    Syndrome::RemoteOperation,
                    Some(format!(
                        "QP {qpn:#x}: the responder answered NAK remote operational error"
                    )),
                );
            }
        }
        match pkt.op {
            PacketOp::Acknowledge => self.rc_ack_upto(qpn, pkt.psn),
            PacketOp::AtomicAcknowledge => {
                let Some(head) = self
                    .qps
                    .get(&qpn)
                    .and_then(|q| q.rc.pending.front().cloned())
                else {
                    return;
                };
                if !matches!(head.opcode, send_op::ATOMIC_CS | send_op::ATOMIC_FA)
                    || head.first_psn != pkt.psn
                {
                    return; // stale duplicate
                }
                let orig = pkt.atomic_orig.unwrap_or(0).to_be_bytes();
                if let Err(e) = self.scatter(qpn, &head.local, 0, &orig) {
                    return self.rc_fail_head(qpn, e.syndrome, Some(e.why));
                }
                self.rc_pop_head(qpn);
            }
            PacketOp::ReadResponseFirst
            | PacketOp::ReadResponseMiddle
            | PacketOp::ReadResponseLast
            | PacketOp::ReadResponseOnly => {
                // Requests before the read are acknowledged by its response.
                self.rc_ack_upto(qpn, pkt.psn.wrapping_sub(1) & 0xff_ffff);
                let Some(head) = self
                    .qps
                    .get(&qpn)
                    .and_then(|q| q.rc.pending.front().cloned())
                else {
                    return;
                };
                if head.opcode != send_op::RDMA_READ {
                    return;
                }
                let mtu = self
                    .qps
                    .get(&qpn)
                    .map(|q| q.mtu_bytes().min(self.port_mtu(q.port())).max(256))
                    .unwrap_or(256);
                let expect_off =
                    u64::from(psn_diff(pkt.psn, head.first_psn).max(0) as u32) * u64::from(mtu);
                if psn_diff(pkt.psn, head.first_psn) < 0 || expect_off != head.received {
                    return; // out of order: the ACK timeout will retransmit the request
                }
                if let Err(e) = self.scatter(qpn, &head.local, head.received, &pkt.payload) {
                    return self.rc_fail_head(qpn, e.syndrome, Some(e.why));
                }
                let Some(q) = self.qps.get_mut(&qpn) else {
                    return;
                };
                let Some(h) = q.rc.pending.front_mut() else {
                    return;
                };
                h.received += pkt.payload.len() as u64;
                if matches!(
                    pkt.op,
                    PacketOp::ReadResponseLast | PacketOp::ReadResponseOnly
                ) {
                    self.rc_pop_head(qpn);
                }
            }
            _ => {}
        }
    }

    fn rc_pop_head(&mut self, qpn: u32) {
        let Some(q) = self.qps.get_mut(&qpn) else {
            return;
        };
        let Some(p) = q.rc.pending.pop_front() else {
            return;
        };
        q.rc.retries_used = 0;
        q.rc.rnr_retries_used = 0;
        let more = !q.rc.pending.is_empty();
        q.rc.deadline = None;
        let t = self.rc_timeout(qpn);
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.rc.deadline = if more {
                t.map(|t| self.now_ns.saturating_add(t))
            } else {
                None
            };
        }
        self.rc_complete_ok(qpn, &p);
        if is_rd_atomic(p.opcode) {
            self.rc_resume_sq(qpn);
        }
    }

    /// Complete SEND/WRITE requests whose last PSN is at or before `psn`, in order; stop at
    /// a READ/ATOMIC (they complete on their response).
    fn rc_ack_upto(&mut self, qpn: u32, psn: u32) {
        loop {
            let Some(q) = self.qps.get(&qpn) else { return };
            let Some(h) = q.rc.pending.front() else {
                return;
            };
            if is_rd_atomic(h.opcode) || psn_diff(psn, h.last_psn) < 0 {
                return;
            }
            self.rc_pop_head(qpn);
        }
    }
}
