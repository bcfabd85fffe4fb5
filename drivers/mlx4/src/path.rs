//! The data path ([`verbs::DataPath`]): one QP and its send and receive CQs, validated once
//! and borrowed for a post/poll loop (docs/performance.md).
//!
//! [`Hca::data_path_raw`] checks what the borrow keeps from changing — the handles, the QP in
//! RTS, the CQs being the QP's own and nobody else's, no CQ overrun, the UD destination — and
//! precomputes what follows from it: the UD datagram segment, the ctrl dwords of each flag
//! combination, the QPN a CQE must carry, and how many work requests each queue may have
//! outstanding so that its CQ can never overflow. Per call only what changes is checked:
//! room in the queue, the inline length, the CQE found (owner, QPN, direction, status).
//! Anything else — SGE payloads, larger inline data, error CQEs, CQEs of another QP — takes
//! the same generic code as the per-call verbs, out of line.

use crate::cq::{cqe, next_cqe, Cq, CqHandle, CqRing};
use crate::hw::{opcode, DatagramSeg};
use crate::platform::Platform;
use crate::qp::{self, Ah, Qp, QpHandle};
use crate::Hca;
use verbs::{
    Completion, Error, Payload, QpState, QpType, RecvWr, Result, SendFlags, SendWr, UdDest,
    WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
use zerocopy::IntoBytes;

/// A QP and its two CQs, borrowed from the [`Hca`] (see the module documentation).
pub struct DataPath<'a, P: Platform> {
    p: &'a P,
    qp: &'a mut Qp,
    scq: &'a mut Cq,
    rcq: &'a mut Cq,
    /// Per [`SendFlags`] combination (bits 0..3): ctrl dword 1 without the size byte
    /// (BlueFlame's `BE(qpn << 8)` and the fence bit), and dwords 2–3 as one 64-bit store
    /// (flags with sq_sig_all, immediate 0), all already big-endian (§5.2, §5.5).
    ctrl: [(u32, u64); 8],
    /// UD: the datagram segment as stored (AV, BE remote QPN, BE Q_Key, 8 zero bytes).
    dgram: [u64; 6],
    ud: bool,
    dest: Option<UdDest<Ah>>,
    /// Per CQ (send, receive): where its CQEs lie.
    cqs: [CqRing; 2],
    /// CQE dword 0 masked to the QPN, as read from memory: `BE(qpn)`.
    cqe_qpn: u32,
    /// Largest inline SEND of the latency path (the QP's `fast_inline`: 0 without BlueFlame).
    fast_inline: usize,
    /// Outstanding sends allowed: the SQ's max_post, at most the send CQ's capacity.
    send_limit: u32,
    /// Outstanding receives allowed: the RQ's max_post, at most the receive CQ's capacity.
    recv_limit: u32,
}

/// `BE(0x00FF_FFFF)`: the QPN bits of CQE dword 0 as stored.
const CQE_QPN_MASK: u32 = 0x00FF_FFFFu32.to_be();

impl<P: Platform> Hca<P> {
    /// Borrow `qp`, its send CQ `scq` and receive CQ `rcq` as a [`DataPath`] sending to
    /// `dest` (UD). Typed errors: a stale handle ([`Error::InvalidHandle`]), the QP not in
    /// RTS ([`Error::WrongState`]), an overrun CQ ([`Error::CqOverrun`]); and
    /// [`Error::InvalidArgument`] when the CQs are not this QP's, are one CQ, serve another
    /// QP too, a UD QP has no destination, or more work requests are outstanding than the
    /// CQ could hold.
    pub fn data_path_raw(
        &mut self,
        qp: QpHandle,
        scq: CqHandle,
        rcq: CqHandle,
        dest: Option<UdDest<Ah>>,
    ) -> Result<DataPath<'_, P>> {
        let q = self.qp_ref(qp)?;
        let s = self.cqs.get(scq.slot as usize).and_then(Option::as_ref);
        let r = self.cqs.get(rcq.slot as usize).and_then(Option::as_ref);
        let (Some(s), Some(r)) = (s, r) else {
            return Err(Error::InvalidHandle);
        };
        if s.cqn != scq.cqn || r.cqn != rcq.cqn {
            return Err(Error::InvalidHandle);
        }
        if q.state != QpState::Rts {
            return Err(Error::WrongState { state: q.state });
        }
        if q.srq.is_some() {
            return Err(Error::Unsupported("data path of a QP with an SRQ"));
        }
        if q.send_cqn != s.cqn || q.recv_cqn != r.cqn {
            return Err(Error::InvalidArgument("data path: CQ is not the QP's"));
        }
        if s.cqn == r.cqn {
            return Err(Error::InvalidArgument(
                "data path: send and receive CQ must differ",
            ));
        }
        let others = self.qps.iter().flatten().filter(|o| o.qpn != q.qpn);
        if others.clone().any(|o| o.uses_cq(s.cqn) || o.uses_cq(r.cqn)) {
            return Err(Error::InvalidArgument(
                "data path: CQ shared with another QP",
            ));
        }
        if s.overrun || r.overrun {
            return Err(Error::CqOverrun);
        }
        let ud = q.qp_type == QpType::Ud;
        let dest = if ud {
            Some(dest.ok_or(Error::InvalidArgument(
                "data path: UD QP without destination",
            ))?)
        } else {
            None
        };
        // A CQ of mask + 1 entries holds mask completions; never allow more outstanding
        // work requests than that, so the CQ cannot overflow while the path lives.
        let send_limit = q.sq.max_post.min(s.mask);
        let recv_limit = q.rq.max_post.min(r.mask);
        if q.sq.head.wrapping_sub(q.sq.tail) > send_limit
            || q.rq.head.wrapping_sub(q.rq.tail) > recv_limit
        {
            return Err(Error::InvalidArgument(
                "data path: more work requests outstanding than the CQ holds",
            ));
        }
        let mut dgram = [0u64; 6];
        if let Some(d) = &dest {
            let mut seg = DatagramSeg::default();
            seg.as_mut_bytes()[..32].copy_from_slice(&d.ah.av);
            seg.dqpn.set(d.remote_qpn & 0xFF_FFFF);
            seg.qkey.set(d.remote_qkey);
            dgram.as_mut_bytes().copy_from_slice(seg.as_bytes());
        }
        let mut ctrl_words = [(0u32, 0u64); 8];
        for (i, c) in ctrl_words.iter_mut().enumerate() {
            let (flags_be, fence_be) = qp::CTRL_BITS_BE[i];
            let mut d23 = [0u8; 8];
            d23[..4].copy_from_slice(&(flags_be | q.sig_all.to_be()).to_ne_bytes());
            *c = (q.doorbell_qpn | fence_be, u64::from_ne_bytes(d23));
        }
        let cqe_qpn = (q.qpn & 0xFF_FFFF).to_be();
        let cq_views = [s.ring(), r.ring()];
        let fast_inline = if q.bf.is_some() {
            q.fast_inline as usize
        } else {
            0
        };
        let Hca { p, qps, cqs, .. } = self;
        let q = match qps.get_mut(qp.slot as usize) {
            Some(Some(q)) => q,
            _ => return Err(Error::InvalidHandle),
        };
        let [Some(s), Some(r)] = cqs
            .get_disjoint_mut([scq.slot as usize, rcq.slot as usize])
            .map_err(|_| Error::InvalidHandle)?
        else {
            return Err(Error::InvalidHandle);
        };
        Ok(DataPath {
            p,
            qp: q,
            scq: s,
            rcq: r,
            ctrl: ctrl_words,
            dgram,
            ud,
            dest,
            cqe_qpn,
            cqs: cq_views,
            fast_inline,
            send_limit,
            recv_limit,
        })
    }
}

impl<P: Platform> DataPath<'_, P> {
    /// The latency path (§5.2, §5.5): ctrl (+ the prebuilt datagram) and one inline
    /// segment of `data` (1..=fast_inline bytes; the caller checked that), published and
    /// rung through BlueFlame. Returns false, having written nothing, when the QP has no
    /// BlueFlame register or no room: the caller then takes the generic path.
    #[inline(always)]
    fn send_inline<const UD: bool>(&mut self, wr_id: u64, data: &[u8], flags: u32) -> bool {
        let q = &mut *self.qp;
        let mut c = q.sq_cursor(self.send_limit);
        let Some(bf) = &mut q.bf else { return false };
        // SAFETY: the latency path's WQE (two chunks UD, one otherwise) fits a slot: the QP
        // has a fast path (fast_inline > 0) only then (`fast_inline_limit`).
        let Some(mut w) = (unsafe { c.next_short::<UD>() }) else {
            return false;
        };
        if UD {
            w.datagram_prepared(&self.dgram);
        }
        // SAFETY: 1 ≤ len ≤ fast_inline (caller): the segment ends inside its chunk, which
        // fast_inline_limit keeps inside the slot.
        let ds_be = unsafe { w.inline_short::<UD>(data) };
        let (dword1, dwords23) = self.ctrl[(flags & 7) as usize];
        // BlueFlame dword 1 = qpn << 8 | fence | ds.
        w.ctrl_prepared(dword1 | ds_be, dwords23);
        c.publish(self.p, &mut q.sq, &mut w, wr_id, opcode::SEND, true);
        // SAFETY: the WQE's whole 64-byte chunks (2 UD, 1 otherwise) lie inside the slot.
        unsafe { c.ring_blueflame(self.p, &mut q.sq, &w, bf, if UD { 16 } else { 8 }) };
        true
    }

    /// [`Self::send_slow`] of inline data.
    #[inline(never)]
    fn send_slow_inline(&mut self, wr_id: u64, data: &[u8], flags: SendFlags) -> Result<()> {
        self.send_slow(wr_id, Payload::Inline(data), flags)
    }

    /// Every send the latency path does not take, through the per-call verbs' generic code
    /// (typed errors included), after the path's own limit on outstanding sends.
    #[inline(never)]
    fn send_slow(&mut self, wr_id: u64, payload: Payload<'_>, flags: SendFlags) -> Result<()> {
        if self.qp.sq.head.wrapping_sub(self.qp.sq.tail) >= self.send_limit {
            return Err(Error::QueueFull);
        }
        let wr = SendWr {
            wr_id,
            opcode: WrOpcode::Send,
            payload,
            flags,
            ud: self.dest,
        };
        qp::post_send_qp(self.p, self.qp, &wr)
    }

    /// Take the CQE at the consumer index of the send (`SEND`) or receive CQ, if software
    /// owns it. The common case — a successful completion of this QP in the expected
    /// direction — is inlined; anything else is decoded by [`Self::poll_slow`].
    #[inline(always)]
    fn poll<const SEND: bool>(&mut self) -> Option<Completion> {
        let cq: &mut Cq = if SEND { self.scq } else { self.rcq };
        let ci = cq.ci;
        let e = next_cqe(self.p, self.cqs[if SEND { 0 } else { 1 }], ci)?;
        // The direction bit as expected and an opcode below the error opcode (0x1E; 0x1F
        // is no completion opcode either), in one compare: the difference is the opcode.
        let dir = if SEND { cqe::IS_SEND } else { 0 };
        let op = (e.owner_sr_opcode() & (cqe::IS_SEND | cqe::OPCODE_MASK)).wrapping_sub(dir);
        if e.my_qpn_as_stored() & CQE_QPN_MASK != self.cqe_qpn || op >= cqe::OPCODE_ERROR {
            core::hint::cold_path();
            return self.poll_slow(SEND).get();
        }
        let c = if SEND {
            e.parse_short::<true>(&mut self.qp.sq, op)
        } else {
            e.parse_short::<false>(&mut self.qp.rq, op)
        };
        cq.set_ci(ci.wrapping_add(1));
        Some(c)
    }

    /// The CQE at the consumer index (software-owned, checked again) that the inlined poll
    /// does not decode: an error CQE (syndrome → status), a CQE of another QP (one destroyed
    /// earlier: `GeneralErr`, as `poll_cq` reports it), or one in the other direction.
    /// It cannot fail (the path's checks at creation leave nothing to refuse) and returns
    /// the completion as a [`PackedCompletion`], i.e. in registers, so that the inlined poll
    /// builds its result in registers on both branches.
    #[cold]
    #[inline(never)]
    fn poll_slow(&mut self, send: bool) -> PackedCompletion {
        let cq: &mut Cq = if send { self.scq } else { self.rcq };
        let ci = cq.ci;
        let Some(e) = next_cqe(self.p, cq.ring(), ci) else {
            return PackedCompletion::NONE;
        };
        let qpn = e.qpn();
        let mut wc = WorkCompletion::default();
        if qpn != self.qp.qpn {
            wc.qp_num = qpn;
            wc.status = WcStatus::GeneralErr;
        } else {
            e.parse(&mut self.qp.sq, &mut self.qp.rq, qpn, &mut wc);
        }
        cq.set_ci(ci.wrapping_add(1));
        PackedCompletion::new(Completion::from(&wc))
    }

    /// The QP number of the path's QP.
    pub fn qpn(&self) -> u32 {
        self.qp.qpn
    }

    /// The platform the HCA runs on.
    pub fn platform(&self) -> &P {
        self.p
    }
}

impl<P: Platform> verbs::DataPath for DataPath<'_, P> {
    #[inline(always)]
    fn send(&mut self, wr_id: u64, payload: Payload<'_>, flags: SendFlags) -> Result<()> {
        let Payload::Inline(data) = payload else {
            return self.send_slow(wr_id, payload, flags);
        };
        // (`send_slow_inline` takes its arguments in registers, so this path saves none.)
        // One unsigned compare covers 1 <= len <= fast_inline (0 without BlueFlame).
        if data.len().wrapping_sub(1) < self.fast_inline {
            let sent = if self.ud {
                self.send_inline::<true>(wr_id, data, flags.bits())
            } else {
                self.send_inline::<false>(wr_id, data, flags.bits())
            };
            if sent {
                return Ok(());
            }
        }
        self.send_slow_inline(wr_id, data, flags)
    }

    #[inline]
    fn post_recv(&mut self, wr: &RecvWr<'_>) -> Result<()> {
        if self.qp.rq.head.wrapping_sub(self.qp.rq.tail) >= self.recv_limit {
            return Err(Error::QueueFull);
        }
        qp::post_recv_qp(self.p, self.qp, wr)
    }

    #[inline(always)]
    fn poll_send(&mut self) -> Result<Option<Completion>> {
        Ok(self.poll::<true>())
    }

    #[inline(always)]
    fn poll_recv(&mut self) -> Result<Option<Completion>> {
        Ok(self.poll::<false>())
    }
}

/// Every [`WcStatus`] by its discriminant (for [`PackedCompletion::status`]).
const STATUSES: [WcStatus; 15] = [
    WcStatus::Success,
    WcStatus::LocLenErr,
    WcStatus::LocQpOpErr,
    WcStatus::LocProtErr,
    WcStatus::WrFlushErr,
    WcStatus::MwBindErr,
    WcStatus::BadRespErr,
    WcStatus::LocAccessErr,
    WcStatus::RemInvReqErr,
    WcStatus::RemAccessErr,
    WcStatus::RemOpErr,
    WcStatus::RetryExcErr,
    WcStatus::RnrRetryExcErr,
    WcStatus::RemAbortErr,
    WcStatus::GeneralErr,
];

/// A completion, or none, in two 64-bit words: a struct of two integers travels as a pair
/// of scalars, returned in two registers (rax:rdx under the SysV ABI), where
/// `Option<Completion>` is returned through memory (docs/performance.md). The first word is
/// the `wr_id`; the second holds the byte count (bits 31:0), the status (39:32), the opcode
/// code (47:40), an unknown opcode's value (55:48) and "present" (63).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PackedCompletion {
    wr_id: u64,
    word: u64,
}

impl PackedCompletion {
    const NONE: PackedCompletion = PackedCompletion { wr_id: 0, word: 0 };
    const STATUS_SHIFT: u32 = 32;
    const OPCODE_SHIFT: u32 = 40;
    const UNKNOWN_SHIFT: u32 = 48;
    const PRESENT: u64 = 1 << 63;
    /// Opcode codes: the known opcodes in declaration order, then Unknown.
    const OPCODES: [WcOpcode; 7] = [
        WcOpcode::Send,
        WcOpcode::RdmaWrite,
        WcOpcode::RdmaRead,
        WcOpcode::CompSwap,
        WcOpcode::FetchAdd,
        WcOpcode::Recv,
        WcOpcode::RecvRdmaWithImm,
    ];
    const OPCODE_UNKNOWN: u64 = 7;

    fn new(c: Completion) -> PackedCompletion {
        let (code, unknown) = match c.opcode {
            WcOpcode::Unknown(x) => (Self::OPCODE_UNKNOWN, x),
            op => (
                Self::OPCODES.iter().position(|&o| o == op).unwrap_or(0) as u64,
                0,
            ),
        };
        PackedCompletion {
            wr_id: c.wr_id,
            word: u64::from(c.byte_len)
                | (c.status as u64) << Self::STATUS_SHIFT
                | code << Self::OPCODE_SHIFT
                | u64::from(unknown) << Self::UNKNOWN_SHIFT
                | Self::PRESENT,
        }
    }

    #[inline(always)]
    fn is_some(self) -> bool {
        self.word & Self::PRESENT != 0
    }

    #[inline(always)]
    fn byte_len(self) -> u32 {
        self.word as u32
    }

    #[inline(always)]
    fn status(self) -> WcStatus {
        STATUSES
            .get((self.word >> Self::STATUS_SHIFT) as usize & 0xFF)
            .copied()
            .unwrap_or(WcStatus::GeneralErr)
    }

    #[inline(always)]
    fn opcode(self) -> WcOpcode {
        let code = (self.word >> Self::OPCODE_SHIFT) as usize & 0xFF;
        match Self::OPCODES.get(code) {
            Some(&op) => op,
            None => WcOpcode::Unknown((self.word >> Self::UNKNOWN_SHIFT) as u8),
        }
    }

    /// The completion, if there is one.
    #[inline(always)]
    fn get(self) -> Option<Completion> {
        self.is_some().then(|| Completion {
            wr_id: self.wr_id,
            status: self.status(),
            opcode: self.opcode(),
            byte_len: self.byte_len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_pack_and_unpack() {
        assert_eq!(PackedCompletion::NONE.get(), None);
        let ops = [
            WcOpcode::Send,
            WcOpcode::RdmaWrite,
            WcOpcode::RdmaRead,
            WcOpcode::CompSwap,
            WcOpcode::FetchAdd,
            WcOpcode::Recv,
            WcOpcode::RecvRdmaWithImm,
            WcOpcode::Unknown(0),
            WcOpcode::Unknown(0x1F),
        ];
        for (i, &status) in STATUSES.iter().enumerate() {
            assert_eq!(status as usize, i, "STATUSES in declaration order");
            for opcode in ops {
                let c = Completion {
                    wr_id: u64::MAX - i as u64,
                    status,
                    opcode,
                    byte_len: 0xFFFF_FFFF - i as u32,
                };
                assert_eq!(PackedCompletion::new(c).get(), Some(c));
            }
        }
    }
}
