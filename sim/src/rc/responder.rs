//! RC responder: checks incoming requests' PSNs, executes SENDs, RDMA WRITEs, READs and
//! atomics (with duplicate replay), and answers with ACKs, NAKs and responses (§7.3).

use super::psn_diff;
use crate::cq::{opcode as cqe_op, Completion};
use crate::hca::Hca;
use crate::mr::Access;
use crate::packet::{Aeth, AtomicEth, Packet, PacketOp, Reth};
use crate::qp::{RemoteAccess, ServiceType};

impl Hca {
    fn rc_reply(&mut self, qpn: u32, req: &Packet, op: PacketOp, psn: u32, aeth: Aeth) -> Packet {
        let (mut p, _) = self
            .rc_base_packet(qpn)
            .unwrap_or_else(|| (req.clone(), false));
        p.op = op;
        p.psn = psn;
        p.aeth = Some(aeth);
        p.dlid = req.slid;
        p.dest_qpn = req.src_qpn;
        p.reth = None;
        p.imm = None;
        p.atomic = None;
        p.payload = Vec::new();
        p
    }

    fn rc_send_reply(&mut self, qpn: u32, p: Packet) {
        let active = self.rc_base_packet(qpn).map(|x| x.1).unwrap_or(false);
        self.send_packet(p, active);
    }

    fn rc_nak(&mut self, qpn: u32, req: &Packet, aeth: Aeth) {
        let p = self.rc_reply(qpn, req, PacketOp::Acknowledge, req.psn, aeth);
        self.rc_send_reply(qpn, p);
    }

    /// RNR NAK: no receive WQE. Later packets of the burst are dropped silently (no PSN
    /// sequence NAK) until the requester retries from the NAKed PSN.
    fn rc_rnr_nak(&mut self, qpn: u32, req: &Packet) {
        let code = self.qps.get(&qpn).map(|q| q.min_rnr_timer()).unwrap_or(0);
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.rc.nak_sent = true;
        }
        self.rc_nak(qpn, req, Aeth::RnrNak(code));
    }

    /// Responder error that moves the responder QP to ERR (IB class C/D errors).
    fn rc_responder_fatal(&mut self, qpn: u32, req: &Packet, aeth: Aeth, why: String) {
        log::debug!("hca{}: RC responder QP {qpn:#x}: {why}", self.index);
        self.rc_nak(qpn, req, aeth);
        self.qp_to_error(qpn);
    }

    /// Take an RDMARC entry for a new READ/atomic whose response spans `first..=last`. The
    /// responder has 2^rra_max of them (QPC params2 RRA max, from Linux's
    /// max_dest_rd_atomic); none free means the requester has more READs/atomics outstanding
    /// than this QP accepts, which the IB spec answers with NAK Invalid Request.
    fn rc_rdmarc_take(&mut self, qpn: u32, first: u32, last: u32) -> Result<(), String> {
        let Some(q) = self.qps.get_mut(&qpn) else {
            return Err("no QP".into());
        };
        let limit = 1usize << q.rra_max();
        if q.rc.rdmarc_busy.len() >= limit {
            return Err(format!(
                "READ/atomic at PSN {first:#x} with {limit} already outstanding (RRA max {})",
                q.rra_max()
            ));
        }
        q.rc.rdmarc_busy.push_back((first, last));
        Ok(())
    }

    /// A packet this HCA sent left the fabric: it reached a port or was lost on the way. The
    /// last packet of a READ response, or an atomic ACK, frees the RDMARC entry of its
    /// request (a lost one too: the requester's retry is a duplicate, served again without
    /// a new entry). The entry is thus held while the response is on its way and never
    /// after the requester can have retired the request, so a requester within 2^rra_max
    /// never finds the responder full.
    pub(crate) fn rc_response_left(&mut self, p: &Packet) {
        if p.transport != ServiceType::Rc
            || !matches!(
                p.op,
                PacketOp::ReadResponseLast
                    | PacketOp::ReadResponseOnly
                    | PacketOp::AtomicAcknowledge
            )
        {
            return;
        }
        let Some(q) = self.qps.get_mut(&p.src_qpn) else {
            return;
        };
        if let Some(i) = q.rc.rdmarc_busy.iter().position(|e| e.1 == p.psn) {
            q.rc.rdmarc_busy.remove(i);
        }
    }

    /// Responder side of RC.
    pub(crate) fn rc_responder_rx(&mut self, qpn: u32, pkt: Packet) {
        let Some(q) = self.qps.get(&qpn) else { return };
        let d = psn_diff(pkt.psn, q.rq_psn);
        let acc = q.remote_access();
        let (pd, rlkey) = (q.pd(), q.rlkey());
        if d > 0 {
            // Gap: one PSN-sequence NAK carrying the expected PSN.
            if !q.rc.nak_sent {
                let exp = q.rq_psn;
                if let Some(q) = self.qps.get_mut(&qpn) {
                    q.rc.nak_sent = true;
                }
                let mut n = pkt.clone();
                n.psn = exp;
                self.rc_nak(qpn, &n, Aeth::NakPsnSequence);
            }
            return;
        }
        if d < 0 {
            // Duplicate: re-acknowledge, re-execute reads, replay atomics.
            match pkt.op {
                PacketOp::ReadRequest => self.rc_do_read(qpn, &pkt, acc, pd, rlkey, false),
                PacketOp::CompareSwap | PacketOp::FetchAdd => {
                    let found = self.qps.get(&qpn).and_then(|q| {
                        q.rc.atomic_replay
                            .iter()
                            .find(|(p, _)| *p == pkt.psn)
                            .map(|x| x.1)
                    });
                    if let Some(orig) = found {
                        let mut r = self.rc_reply(
                            qpn,
                            &pkt,
                            PacketOp::AtomicAcknowledge,
                            pkt.psn,
                            Aeth::Ack,
                        );
                        r.atomic_orig = Some(orig);
                        self.rc_send_reply(qpn, r);
                    }
                }
                _ => {
                    let last = self
                        .qps
                        .get(&qpn)
                        .map(|q| q.rq_psn.wrapping_sub(1) & 0xff_ffff)
                        .unwrap_or(0);
                    let r = self.rc_reply(qpn, &pkt, PacketOp::Acknowledge, last, Aeth::Ack);
                    self.rc_send_reply(qpn, r);
                }
            }
            return;
        }
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.rc.nak_sent = false;
        }
        match pkt.op {
            PacketOp::ReadRequest => self.rc_do_read(qpn, &pkt, acc, pd, rlkey, true),
            PacketOp::CompareSwap | PacketOp::FetchAdd => {
                self.rc_do_atomic(qpn, &pkt, acc, pd, rlkey)
            }
            _ => self.rc_do_send_write(qpn, pkt, acc, pd, rlkey),
        }
    }

    fn rc_do_read(
        &mut self,
        qpn: u32,
        pkt: &Packet,
        acc: RemoteAccess,
        pd: u32,
        rlkey: bool,
        fresh: bool,
    ) {
        let Reth { va, rkey, len } = pkt.reth.unwrap_or_default();
        if !acc.read {
            return self.rc_responder_fatal(
                qpn,
                pkt,
                Aeth::NakRemoteAccess,
                "RDMA READ to a QP without RRE".into(),
            );
        }
        let mtu = self
            .qps
            .get(&qpn)
            .map(|q| q.mtu_bytes().min(self.port_mtu(q.port())).max(256))
            .unwrap_or(256) as usize;
        if fresh {
            let n = (len as usize).div_ceil(mtu).max(1) as u32;
            let last = (pkt.psn + n - 1) & 0xff_ffff;
            if let Err(why) = self.rc_rdmarc_take(qpn, pkt.psn, last) {
                return self.rc_responder_fatal(qpn, pkt, Aeth::NakInvalidRequest, why);
            }
        }
        let pieces =
            match self.translate_key(rkey, pd, rlkey, va, u64::from(len), Access::RemoteRead) {
                Ok(p) => p,
                Err(e) => {
                    return self.rc_responder_fatal(
                        qpn,
                        pkt,
                        Aeth::NakRemoteAccess,
                        format!("{e:?}"),
                    )
                }
            };
        let mut data = Vec::new();
        for (pa, n) in pieces {
            if self
                .dma_read_append(pa, n, &mut data, "RDMA READ source")
                .is_err()
            {
                return self.rc_responder_fatal(
                    qpn,
                    pkt,
                    Aeth::NakRemoteOperation,
                    "DMA read failed".into(),
                );
            }
        }
        let chunks: Vec<&[u8]> = if data.is_empty() {
            vec![&[][..]]
        } else {
            data.chunks(mtu).collect()
        };
        let n = chunks.len();
        for (i, c) in chunks.into_iter().enumerate() {
            let op = match (i == 0, i + 1 == n) {
                (true, true) => PacketOp::ReadResponseOnly,
                (true, false) => PacketOp::ReadResponseFirst,
                (false, true) => PacketOp::ReadResponseLast,
                _ => PacketOp::ReadResponseMiddle,
            };
            let mut r = self.rc_reply(qpn, pkt, op, (pkt.psn + i as u32) & 0xff_ffff, Aeth::Ack);
            r.payload = c.to_vec();
            self.rc_send_reply(qpn, r);
        }
        if fresh {
            if let Some(q) = self.qps.get_mut(&qpn) {
                q.rq_psn = (pkt.psn + n as u32) & 0xff_ffff;
            }
        }
    }

    fn rc_do_atomic(&mut self, qpn: u32, pkt: &Packet, acc: RemoteAccess, pd: u32, rlkey: bool) {
        let Reth { va, rkey, .. } = pkt.reth.unwrap_or_default();
        if !acc.atomic {
            return self.rc_responder_fatal(
                qpn,
                pkt,
                Aeth::NakRemoteAccess,
                "atomic to a QP without RAE".into(),
            );
        }
        if let Err(why) = self.rc_rdmarc_take(qpn, pkt.psn, pkt.psn) {
            return self.rc_responder_fatal(qpn, pkt, Aeth::NakInvalidRequest, why);
        }
        if va % 8 != 0 {
            return self.rc_responder_fatal(
                qpn,
                pkt,
                Aeth::NakInvalidRequest,
                format!("atomic at unaligned address {va:#x}"),
            );
        }
        let pa = match self.translate_key(rkey, pd, rlkey, va, 8, Access::RemoteAtomic) {
            Ok(p) if p.len() == 1 => p[0].0,
            Ok(_) => {
                return self.rc_responder_fatal(
                    qpn,
                    pkt,
                    Aeth::NakInvalidRequest,
                    "atomic target split".into(),
                )
            }
            Err(e) => {
                return self.rc_responder_fatal(qpn, pkt, Aeth::NakRemoteAccess, format!("{e:?}"))
            }
        };
        let mut cur = [0u8; 8];
        if self.dma_read(pa, &mut cur, "atomic target").is_err() {
            return self.rc_responder_fatal(
                qpn,
                pkt,
                Aeth::NakRemoteOperation,
                "DMA read failed".into(),
            );
        }
        // Decision (docs/model.md): atomics operate on a big-endian 64-bit value.
        let orig = u64::from_be_bytes(cur);
        let AtomicEth { swap_add, compare } = pkt.atomic.unwrap_or_default();
        let new = match pkt.op {
            PacketOp::CompareSwap => (orig == compare).then_some(swap_add),
            _ => Some(orig.wrapping_add(swap_add)),
        };
        if let Some(v) = new {
            if self
                .dma_write(pa, &v.to_be_bytes(), "atomic target")
                .is_err()
            {
                return self.rc_responder_fatal(
                    qpn,
                    pkt,
                    Aeth::NakRemoteOperation,
                    "DMA write failed".into(),
                );
            }
        }
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.rq_psn = (pkt.psn + 1) & 0xff_ffff;
            q.rc.atomic_replay.push_back((pkt.psn, orig));
            if q.rc.atomic_replay.len() > 16 {
                q.rc.atomic_replay.pop_front();
            }
        }
        let mut r = self.rc_reply(qpn, pkt, PacketOp::AtomicAcknowledge, pkt.psn, Aeth::Ack);
        r.atomic_orig = Some(orig);
        self.rc_send_reply(qpn, r);
    }

    fn rc_do_send_write(&mut self, qpn: u32, pkt: Packet, acc: RemoteAccess, pd: u32, rlkey: bool) {
        let starts = pkt.op.is_first_or_only();
        let in_progress = self
            .qps
            .get(&qpn)
            .is_some_and(|q| q.recv_in_progress.is_some());
        if starts == in_progress {
            // FIRST while a message is open, or MIDDLE/LAST without one.
            return self.rc_responder_fatal(
                qpn,
                &pkt,
                Aeth::NakInvalidRequest,
                "packet out of message sequence".into(),
            );
        }
        if starts {
            let mut prog = crate::wqe::RecvProgress {
                wqe_index: None,
                sges: Vec::new(),
                write: None,
                offset: 0,
            };
            if pkt.op.is_write() {
                let Reth { va, rkey, len } = pkt.reth.unwrap_or_default();
                if !acc.write {
                    return self.rc_responder_fatal(
                        qpn,
                        &pkt,
                        Aeth::NakRemoteAccess,
                        "RDMA WRITE to a QP without RWE".into(),
                    );
                }
                if let Err(e) =
                    self.translate_key(rkey, pd, rlkey, va, u64::from(len), Access::RemoteWrite)
                {
                    return self.rc_responder_fatal(
                        qpn,
                        &pkt,
                        Aeth::NakRemoteAccess,
                        format!("{e:?}"),
                    );
                }
                prog.write = Some(Reth { va, rkey, len });
            } else {
                match self.rq_take(qpn) {
                    Ok(Some((idx, sges))) => {
                        prog.wqe_index = Some(idx);
                        prog.sges = sges;
                    }
                    Ok(None) => {
                        return self.rc_rnr_nak(qpn, &pkt);
                    }
                    Err(e) => {
                        self.rc_nak(qpn, &pkt, Aeth::NakRemoteOperation);
                        return self.recv_error(qpn, 0, e);
                    }
                }
            }
            if let Some(q) = self.qps.get_mut(&qpn) {
                q.recv_in_progress = Some(prog);
            }
        }
        let Some(mut prog) = self
            .qps
            .get_mut(&qpn)
            .and_then(|q| q.recv_in_progress.take())
        else {
            return;
        };
        if let Some(Reth { va, rkey, len }) = prog.write {
            if prog.offset + pkt.payload.len() as u64 > u64::from(len) {
                return self.rc_responder_fatal(
                    qpn,
                    &pkt,
                    Aeth::NakInvalidRequest,
                    "RDMA WRITE longer than its RETH length".into(),
                );
            }
            match self.translate_key(
                rkey,
                pd,
                rlkey,
                va + prog.offset,
                pkt.payload.len() as u64,
                Access::RemoteWrite,
            ) {
                Ok(pieces) => self.write_pieces(&pieces, &pkt.payload, "RDMA WRITE data"),
                Err(e) => {
                    return self.rc_responder_fatal(
                        qpn,
                        &pkt,
                        Aeth::NakRemoteAccess,
                        format!("{e:?}"),
                    )
                }
            }
        } else if let Err(e) = self.scatter(qpn, &prog.sges.clone(), prog.offset, &pkt.payload) {
            self.rc_nak(qpn, &pkt, Aeth::NakInvalidRequest);
            return self.recv_error(qpn, prog.wqe_index.unwrap_or(0), e);
        }
        prog.offset += pkt.payload.len() as u64;
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.rq_psn = (pkt.psn + 1) & 0xff_ffff;
        }
        if !pkt.op.is_last_or_only() {
            if let Some(q) = self.qps.get_mut(&qpn) {
                q.recv_in_progress = Some(prog);
            }
            return;
        }
        let mut complete = None;
        if prog.write.is_none() {
            complete = Some((
                prog.wqe_index.unwrap_or(0),
                if pkt.imm.is_some() {
                    cqe_op::RECV_SEND_IMM
                } else {
                    cqe_op::RECV_SEND
                },
            ));
        } else if pkt.imm.is_some() {
            match self.rq_take(qpn) {
                Ok(Some((idx, _))) => complete = Some((idx, cqe_op::RECV_RDMA_WRITE_IMM)),
                Ok(None) => {
                    // Undo the PSN advance so the retransmitted LAST is processed again.
                    if let Some(q) = self.qps.get_mut(&qpn) {
                        q.rq_psn = pkt.psn;
                        prog.offset -= pkt.payload.len() as u64;
                        q.recv_in_progress = Some(prog);
                    }
                    return self.rc_rnr_nak(qpn, &pkt);
                }
                Err(e) => return self.recv_error(qpn, 0, e),
            }
        }
        let r = self.rc_reply(qpn, &pkt, PacketOp::Acknowledge, pkt.psn, Aeth::Ack);
        self.rc_send_reply(qpn, r);
        if let Some((idx, opcode)) = complete {
            let Some(q) = self.qps.get(&qpn) else { return };
            let c = Completion {
                qpn,
                immed: pkt.imm.unwrap_or(0),
                remote_qpn: pkt.src_qpn,
                sl: pkt.sl,
                slid: pkt.slid,
                byte_cnt: prog.offset as u32,
                wqe_index: idx,
                opcode,
                solicited: pkt.solicited,
                ..Default::default()
            };
            let cqn = q.recv_cqn;
            self.push_cqe(cqn, c);
        }
    }
}
