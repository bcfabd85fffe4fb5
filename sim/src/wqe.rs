//! The data path: SQ engine (WQE parsing and execution for UD and UC), BlueFlame, RQ
//! consumption, receive processing, CQE generation with error syndromes, and flushing on
//! QP error (§5, §7).

use crate::cq::{opcode as cqe_op, Completion, Syndrome};
use crate::hca::Hca;
use crate::icm::INIT_HCA_UD_AV_PORT;
use crate::mr::{Access, KeyError, INVALID_LKEY};
use crate::packet::{Packet, PacketOp, Reth};
use crate::qp::{QpState, ServiceType};
use crate::seg::{self, Av, Ctrl, Data, Raddr};

/// Send WQE opcodes (§5.2).
pub mod send_op {
    pub const NOP: u8 = 0x00;
    pub const RDMA_WRITE: u8 = 0x08;
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    pub const SEND: u8 = 0x0a;
    pub const SEND_IMM: u8 = 0x0b;
    pub const RDMA_READ: u8 = 0x10;
    pub const ATOMIC_CS: u8 = 0x11;
    pub const ATOMIC_FA: u8 = 0x12;
}

/// A receive scatter entry: (lkey, address, length).
pub type Sge = (u32, u64, u32);

/// A receive message being assembled (UC multi-packet SEND, or RDMA WRITE).
#[derive(Clone, Debug)]
pub struct RecvProgress {
    /// SEND: RQ WQE index and its scatter list (lkey, addr, len).
    pub wqe_index: Option<u16>,
    pub sges: Vec<(u32, u64, u32)>,
    /// RDMA WRITE target.
    pub write: Option<Reth>,
    pub offset: u64,
}

/// Why a WQE failed.
pub(crate) struct WqeError {
    pub(crate) syndrome: Syndrome,
    pub(crate) why: String,
}

pub(crate) fn werr(syndrome: Syndrome, why: impl Into<String>) -> WqeError {
    WqeError {
        syndrome,
        why: why.into(),
    }
}

/// A parsed send WQE.
struct SendWqe {
    opcode: u8,
    signaled: bool,
    solicited: bool,
    imm: u32,
    /// UD address vector.
    av: Option<Av>,
    /// Remote address segment.
    raddr: Option<Raddr>,
    payload: Vec<u8>,
}

impl Hca {
    fn sq_geometry(&self, qpn: u32) -> Option<(u64, u32, u32, u64, u32)> {
        let q = self.qps.get(&qpn)?;
        let (sq_off, _) = q.sq_rq_offsets();
        Some((
            sq_off,
            q.sq_log_count(),
            q.sq_log_stride(),
            q.mtt_base() / u64::from(self.profile.mtt_entry_sz),
            q.page_shift(),
        ))
    }

    /// Read the first 16 bytes of the next SQ WQE if the owner bit says it is valid (§5.3).
    fn sq_peek(&mut self, qpn: u32) -> Option<Vec<u8>> {
        let (sq_off, lc, ls, mtt, shift) = self.sq_geometry(qpn)?;
        let counter = u32::from(self.qps.get(&qpn)?.sq_counter);
        let cnt = 1u32 << lc;
        let slot = u64::from(counter & (cnt - 1));
        let mut ctrl = vec![0u8; 16];
        if self
            .mtt_read(
                mtt,
                shift,
                sq_off + (slot << ls),
                &mut ctrl,
                &format!("SQ WQE of QP {qpn:#x}"),
            )
            .is_err()
        {
            return None;
        }
        // §5.3 (inferred): valid while owner == ((counter & wqe_cnt) != 0).
        let owner = seg::ctrl::OWNER.get_bool(&ctrl);
        (owner == (counter & cnt != 0)).then_some(ctrl)
    }

    /// A send doorbell (§5.3): it announces at least one new WQE, so in RTS the next slot must
    /// be hardware-owned; finding none means the owner bit was wrong (or nothing was posted).
    pub(crate) fn sq_doorbell(&mut self, qpn: u32) {
        let ran_ahead = self
            .qps
            .get_mut(&qpn)
            .is_some_and(|q| std::mem::take(&mut q.bf_ran_ahead));
        if self.qp_state(qpn) == QpState::Rts && self.sq_peek(qpn).is_none() {
            if ran_ahead {
                // The WQE this doorbell announces already ran (fetched after an
                // incomplete BlueFlame burst): nothing to do, and no fault of the driver.
                return;
            }
            let c = self.qps.get(&qpn).map(|q| q.sq_counter).unwrap_or(0);
            self.violation(
                "§5.3",
                format!("send doorbell for QP {qpn:#x} but SQ WQE {c} is not hardware-owned (owner bit must equal the pass parity); nothing executed"),
            );
            return;
        }
        self.sq_run(qpn);
    }

    /// Whether the SQ slot at the device's counter holds a hardware-owned WQE.
    pub(crate) fn sq_head_hw_owned(&mut self, qpn: u32) -> bool {
        self.sq_peek(qpn).is_some()
    }

    /// Execute WQEs of `qpn` (§5.3).
    pub(crate) fn sq_run(&mut self, qpn: u32) {
        let Some(q) = self.qps.get_mut(&qpn) else {
            return;
        };
        match q.state {
            QpState::Reset => {
                self.violation("§10.6", format!("send doorbell for QP {qpn:#x} in RESET"));
                return;
            }
            QpState::Init | QpState::Rtr => {
                q.doorbell_pending = true;
                return;
            }
            QpState::Err => {
                self.flush_sq(qpn);
                return;
            }
            _ => {}
        }
        q.doorbell_pending = false;
        let limit = 1u32 << q.sq_log_count();
        for _ in 0..limit {
            if self.qp_state(qpn) != QpState::Rts {
                break;
            }
            let Some(ctrl) = self.sq_peek(qpn) else { break };
            if self.rc_must_hold(qpn, seg::ctrl::OPCODE.get(&ctrl) as u8) {
                break;
            }
            let ds = seg::ctrl::DS.get(&ctrl) as usize;
            let Some((sq_off, lc, ls, mtt, shift)) = self.sq_geometry(qpn) else {
                break;
            };
            let counter = self.qps.get(&qpn).map(|q| q.sq_counter).unwrap_or(0);
            let slot = u64::from(u32::from(counter) & ((1 << lc) - 1));
            if ds == 0 || ds * 16 > 1 << ls {
                self.violation("§5.2", format!("QP {qpn:#x} WQE {counter}: DS {ds} (size {} B) does not fit the {}-byte SQ stride", ds * 16, 1u32 << ls));
                self.sq_complete_error(
                    qpn,
                    counter,
                    werr(Syndrome::LocalQpOperation, "bad WQE size"),
                );
                break;
            }
            let mut wqe = vec![0u8; ds * 16];
            if self
                .mtt_read(
                    mtt,
                    shift,
                    sq_off + (slot << ls),
                    &mut wqe,
                    &format!("SQ WQE of QP {qpn:#x}"),
                )
                .is_err()
            {
                self.sq_complete_error(
                    qpn,
                    counter,
                    werr(Syndrome::LocalQpOperation, "WQE fetch failed"),
                );
                break;
            }
            // A WQE that came through BlueFlame while the SQ was held runs from memory now.
            let via = match self.qps.get_mut(&qpn) {
                Some(q) if q.rc.held_bf.contains(&counter) => {
                    q.rc.held_bf.retain(|&c| c != counter);
                    "blueflame"
                }
                _ => self.sq_run_via,
            };
            self.trace_wqe(qpn, &wqe, via);
            self.execute_wqe(qpn, counter, &wqe);
        }
        self.sq_prefetch_check(qpn);
    }

    /// Bytes beyond the last posted WQE a device may read ahead of the doorbell: Linux and
    /// rdma-core keep `2048 / stride + 1` slots free and stamp the last of them after each
    /// doorbell (`MLX4_IB_SQ_HEADROOM`, `stamp_send_wqe`), so every slot of these 2 KiB must
    /// look invalid at any doorbell.
    pub const SQ_PREFETCH_BYTES: u32 = 2048;

    /// The send queue's prefetch (§5.3, §5.4): after running the WQEs a doorbell or a
    /// BlueFlame burst announced, the device may already read the slots after them. Each
    /// slot it may read (SQ_PREFETCH_BYTES from the first slot that is not hardware-owned,
    /// at most the rest of the ring) must look invalid to it: its first 64-byte chunk owned
    /// by software (owner bit not the pass parity of that slot's next use) and every further
    /// chunk stamped (first dword 0xFFFFFFFF), or a half-written WQE could run. The slots
    /// are inspected without counting (`Hca::peek_host`).
    fn sq_prefetch_check(&mut self, qpn: u32) {
        if self.qp_state(qpn) != QpState::Rts {
            return;
        }
        let Some((sq_off, lc, ls, mtt, shift)) = self.sq_geometry(qpn) else {
            return;
        };
        let Some(counter) = self.qps.get(&qpn).map(|q| u32::from(q.sq_counter)) else {
            return;
        };
        let cnt = 1u32 << lc;
        let stride = 1usize << ls;
        let window = (Self::SQ_PREFETCH_BYTES >> ls)
            .min(cnt.saturating_sub(1))
            .max(1);
        let mut slot = vec![0u8; stride];
        // Posted WQEs the device holds back (an RC SQ at its READ/atomic limit) are
        // hardware-owned and legitimately ahead of its counter.
        let mut first_free = None;
        for k in 0..cnt {
            let c = counter.wrapping_add(k);
            let at = sq_off + (u64::from(c & (cnt - 1)) << ls);
            if !self.mtt_peek(mtt, shift, at, &mut slot) {
                return;
            }
            let hw = seg::ctrl::OWNER.get_bool(&slot) == (c & cnt != 0);
            match first_free {
                None if hw => continue,
                None => first_free = Some(c),
                Some(f) if c.wrapping_sub(f) >= window => break,
                Some(_) => {}
            }
            let unstamped: Vec<usize> = (1..stride / 64)
                .filter(|&chunk| slot.get(chunk * 64..chunk * 64 + 4) != Some(&[0xff; 4][..]))
                .collect();
            if hw || !unstamped.is_empty() {
                let what = if hw {
                    "its owner bit says hardware-owned (a WQE past a free slot, or a slot initialised with the wrong owner bit)".to_string()
                } else {
                    format!("64-byte chunk(s) {unstamped:?} not stamped (0xFFFFFFFF)")
                };
                self.violation(
                    "§5.4",
                    format!("QP {qpn:#x}: SQ slot {} ({} after the device's counter {counter}) lies within the {} bytes the device may prefetch but does not look invalid: {what}", c & (cnt - 1), c.wrapping_sub(counter), Self::SQ_PREFETCH_BYTES),
                );
                return;
            }
        }
    }

    /// A WQE written through BlueFlame (§5.5): executed from the written bytes, without a DMA
    /// read of the WQE, when it is the QP's next WQE. The burst names exactly one WQE (its
    /// counter is in dword 0, and drivers use BlueFlame only for a post of one WQE, §5.5
    /// conditions), so nothing else is fetched: the model consumes it directly, one of the
    /// two readings §5.5 allows (docs/model.md). A burst that is not the next WQE, or one
    /// for a QP not in RTS, is treated as a doorbell instead.
    pub(crate) fn bf_execute(&mut self, page: u64, wqe: Vec<u8>) {
        let qpn = seg::ctrl::BF_QPN.get_u32(&wqe);
        let index = seg::ctrl::BF_WQE_COUNTER.get(&wqe) as u16;
        self.note_send_queue(qpn);
        let Some(q) = self.qps.get(&qpn) else {
            self.violation(
                "§5.5",
                format!("BlueFlame WQE for QP {qpn:#x}, which is in RESET"),
            );
            return;
        };
        if u64::from(q.usr_page()) != page {
            let u = q.usr_page();
            self.violation("§5.5", format!("BlueFlame WQE for QP {qpn:#x} written to UAR {page}'s BlueFlame page; its context names UAR {u}; ignored"));
            return;
        }
        if q.state != QpState::Rts {
            self.sq_run(qpn);
            return;
        }
        let cnt = 1u32 << q.sq_log_count();
        let held = q.rc.sq_held
            || (index == q.sq_counter && self.rc_must_hold(qpn, seg::ctrl::OPCODE.get(&wqe) as u8));
        if held {
            // The SQ waits at a READ/atomic over the QP's limit (rc::requester): this WQE,
            // also in the SQ in memory, runs from there in order once the SQ resumes.
            if let Some(q) = self.qps.get_mut(&qpn) {
                if q.rc.held_bf.len() < cnt as usize {
                    q.rc.held_bf.push(index);
                }
            }
            return;
        }
        let Some(q) = self.qps.get(&qpn) else {
            return;
        };
        if index != q.sq_counter {
            let c = q.sq_counter;
            let behind = c.wrapping_sub(index);
            if behind != 0 && u32::from(behind) <= 1u32 << q.sq_log_count() {
                // The rest of a burst given up on (taken as a doorbell, the WQE fetched from
                // memory) arrived after all: that WQE has run.
                self.observe(format!("BlueFlame WQE {index} for QP {qpn:#x} completed after the device had fetched it from memory (counter now {c}); treated as a doorbell"));
            } else {
                self.violation("§5.5", format!("BlueFlame WQE for QP {qpn:#x} carries WQE counter {index}, the device expects {c}; treated as a doorbell"));
            }
            self.sq_run(qpn);
            return;
        }
        let owner = seg::ctrl::OWNER.get_bool(&wqe);
        if owner != (u32::from(index) & cnt != 0) {
            self.violation(
                "§5.5",
                format!("BlueFlame WQE {index} for QP {qpn:#x} has the wrong owner bit"),
            );
            return;
        }
        let mut w = wqe;
        // The BF copy carries qpn << 8 in dword 1 where the SQ copy has VLAN fields (§5.5).
        seg::ctrl::BF_QPN.set(&mut w, 0);
        self.trace_wqe(qpn, &w, "blueflame");
        self.execute_wqe(qpn, index, &w);
        self.sq_prefetch_check(qpn);
    }

    fn execute_wqe(&mut self, qpn: u32, counter: u16, wqe: &[u8]) {
        let res = self.parse_and_send(qpn, counter, wqe);
        let Some(q) = self.qps.get_mut(&qpn) else {
            return;
        };
        q.sq_counter = counter.wrapping_add(1);
        match res {
            Ok(Some(w)) => {
                if w.signaled {
                    let cqn = q.send_cqn;
                    self.push_cqe(cqn, Completion::send(qpn, counter, w.opcode, 0));
                }
            }
            Ok(None) => {}
            Err(e) => {
                if let Some(q) = self.qps.get_mut(&qpn) {
                    q.sq_counter = counter;
                }
                self.sq_complete_error(qpn, counter, e);
            }
        }
    }

    /// Error CQE for the WQE at `counter`, QP to ERR, flush the rest (§4.2, §10.6).
    pub(crate) fn sq_complete_error(&mut self, qpn: u32, counter: u16, e: WqeError) {
        self.violation(
            "§4.2",
            format!(
                "QP {qpn:#x} send WQE {counter} completed in error ({:?}): {}",
                e.syndrome, e.why
            ),
        );
        let Some(q) = self.qps.get_mut(&qpn) else {
            return;
        };
        q.sq_counter = counter.wrapping_add(1);
        let cqn = q.send_cqn;
        self.push_cqe(cqn, error_cqe(qpn, counter, e.syndrome, true));
        self.qp_to_error(qpn);
    }

    /// Move a QP to ERR after a completion error and flush its queues (§10.6).
    pub(crate) fn qp_to_error(&mut self, qpn: u32) {
        if let Some(q) = self.qps.get_mut(&qpn) {
            if q.state == QpState::Err {
                return;
            }
            q.state = QpState::Err;
        }
        self.qp_flush(qpn);
    }

    /// Flush every posted WQE of a QP in ERR with "WR flushed" completions (§4.2).
    pub(crate) fn qp_flush(&mut self, qpn: u32) {
        self.rc_flush(qpn);
        self.flush_sq(qpn);
        self.flush_rq(qpn);
    }

    fn flush_sq(&mut self, qpn: u32) {
        let limit = self
            .qps
            .get(&qpn)
            .map(|q| 1u32 << q.sq_log_count())
            .unwrap_or(0);
        for _ in 0..limit {
            if self.sq_peek(qpn).is_none() {
                break;
            }
            let Some(q) = self.qps.get_mut(&qpn) else {
                return;
            };
            let counter = q.sq_counter;
            q.sq_counter = counter.wrapping_add(1);
            let cqn = q.send_cqn;
            self.push_cqe(cqn, error_cqe(qpn, counter, Syndrome::WrFlushed, true));
        }
    }

    fn flush_rq(&mut self, qpn: u32) {
        // §4.7: the WQEs of an SRQ belong to the SRQ, not to the QP going to error.
        if self.qp_srqn(qpn).is_some() {
            if let Some(q) = self.qps.get_mut(&qpn) {
                q.recv_in_progress = None;
            }
            return;
        }
        let Some(head) = self.rq_head(qpn) else {
            return;
        };
        let Some(q) = self.qps.get_mut(&qpn) else {
            return;
        };
        q.recv_in_progress = None;
        let limit = 1u32 << q.rq_log_count();
        for _ in 0..limit {
            let Some(q) = self.qps.get_mut(&qpn) else {
                return;
            };
            if q.rq_counter == head {
                break;
            }
            let idx = q.rq_counter;
            q.rq_counter = idx.wrapping_add(1);
            let cqn = q.recv_cqn;
            self.push_cqe(cqn, error_cqe(qpn, idx, Syndrome::WrFlushed, false));
        }
    }

    /// Gather data segments (pointer and inline) starting at `pos` (§5.2).
    /// `limit` caps the message (UD: the path MTU); beyond it, or beyond the QP's maximum
    /// message size, the WQE fails with a local length error before any data is read.
    pub(crate) fn gather(
        &mut self,
        qpn: u32,
        wqe: &[u8],
        mut pos: usize,
        limit: usize,
    ) -> Result<Vec<u8>, WqeError> {
        let (pd, rlkey) = self
            .qps
            .get(&qpn)
            .map(|q| (q.pd(), q.rlkey()))
            .unwrap_or((0, false));
        let mut out = Vec::new();
        let max_msg = 1usize
            << self
                .qps
                .get(&qpn)
                .map(|q| q.log_msg_max())
                .unwrap_or(0)
                .min(31);
        let max_msg = max_msg.min(limit);
        while pos + 4 <= wqe.len() {
            if seg::data::INLINE.at(pos).get_bool(wqe) {
                let len = seg::data::INLINE_LEN.at(pos).get(wqe) as usize;
                // §5.2: an inline segment may not cross a 64-byte boundary of the WQE.
                if len > 0 && (pos % 64) + 4 + len > 64 {
                    return Err(werr(Syndrome::LocalQpOperation, format!("inline segment at WQE offset {pos:#x} of {len} bytes crosses a 64-byte boundary")));
                }
                if pos + 4 + len > wqe.len() {
                    return Err(werr(
                        Syndrome::LocalLength,
                        format!("inline segment at {pos:#x} of {len} bytes runs past the WQE (DS)"),
                    ));
                }
                out.extend_from_slice(&wqe[pos + 4..pos + 4 + len]);
                pos += 4 + len;
                // Padding to the next 16-byte unit follows the last inline segment.
                if !pos.is_multiple_of(16)
                    && (pos + 4 > wqe.len() || !seg::data::INLINE.at(pos).get_bool(wqe))
                {
                    pos = pos.div_ceil(16) * 16;
                }
                continue;
            }
            if !pos.is_multiple_of(16) || pos + 16 > wqe.len() {
                return Err(werr(
                    Syndrome::LocalQpOperation,
                    format!("data segment at WQE offset {pos:#x} is misaligned or truncated"),
                ));
            }
            let Data {
                byte_count: len,
                lkey,
                addr,
            } = Data::parse(&wqe[pos..]);
            pos += seg::data::SIZE;
            if out.len() + len as usize > max_msg {
                return Err(werr(
                    Syndrome::LocalLength,
                    format!("message longer than {max_msg} bytes (max message size or path MTU)"),
                ));
            }
            let pieces = self
                .translate_key(lkey, pd, rlkey, addr, u64::from(len), Access::LocalRead)
                .map_err(key_err)?;
            for (pa, n) in pieces {
                if self.dma_read_append(pa, n, &mut out, "send data").is_err() {
                    return Err(werr(
                        Syndrome::LocalProtection,
                        format!("DMA read of {n} bytes at {pa:#x} failed"),
                    ));
                }
            }
        }
        Ok(out)
    }

    fn parse_and_send(
        &mut self,
        qpn: u32,
        counter: u16,
        wqe: &[u8],
    ) -> Result<Option<SendWqe>, WqeError> {
        let Some(q) = self.qps.get(&qpn) else {
            return Ok(None);
        };
        let st = q.service_type();
        let ctrl = Ctrl::parse(wqe);
        let opcode = ctrl.opcode;
        let mut w = SendWqe {
            opcode,
            signaled: ctrl.signaled,
            solicited: ctrl.solicited,
            imm: ctrl.imm,
            av: None,
            raddr: None,
            payload: Vec::new(),
        };
        match (st, opcode) {
            (_, send_op::NOP) => return Ok(Some(w)),
            (Some(ServiceType::Ud), send_op::SEND | send_op::SEND_IMM) => {
                let av = Av::parse(&wqe[seg::ctrl::SIZE..]);
                let port = av.port;
                if wqe.len() < seg::ctrl::SIZE + seg::datagram::SIZE {
                    return Err(werr(
                        Syndrome::LocalQpOperation,
                        "UD WQE without a 48-byte datagram segment",
                    ));
                }
                let check_port = self
                    .fw
                    .init
                    .as_ref()
                    .is_some_and(|p| p.flags & INIT_HCA_UD_AV_PORT != 0);
                if check_port && port != q.port() {
                    return Err(werr(Syndrome::LocalQpOperation, format!("UD address vector port {port} differs from the QP's port {} (INIT_HCA AV port check)", q.port())));
                }
                if av.pd != q.pd() {
                    return Err(werr(
                        Syndrome::LocalProtection,
                        format!(
                            "UD address vector PD {:#x} differs from the QP's PD {:#x}",
                            av.pd,
                            q.pd()
                        ),
                    ));
                }
                w.av = Some(av);
                let mtu = self.port_mtu(q.port()) as usize;
                w.payload = self.gather(qpn, wqe, seg::ctrl::SIZE + seg::datagram::SIZE, mtu)?;
            }
            (Some(ServiceType::Uc), send_op::SEND | send_op::SEND_IMM) => {
                w.payload = self.gather(qpn, wqe, seg::ctrl::SIZE, usize::MAX)?;
            }
            (Some(ServiceType::Uc), send_op::RDMA_WRITE | send_op::RDMA_WRITE_IMM) => {
                w.raddr = Some(Raddr::parse(&wqe[seg::ctrl::SIZE..]));
                w.payload =
                    self.gather(qpn, wqe, seg::ctrl::SIZE + seg::raddr::SIZE, usize::MAX)?;
            }
            (
                Some(ServiceType::Uc),
                send_op::RDMA_READ | send_op::ATOMIC_CS | send_op::ATOMIC_FA,
            ) => {
                // §7.2: UC has no READ/atomics; the likely hardware answer is a local QP
                // operation error (decision).
                return Err(werr(
                    Syndrome::LocalQpOperation,
                    format!("opcode {opcode:#x} is not valid on UC"),
                ));
            }
            (Some(ServiceType::Rc), _) => {
                // RC completes on acknowledgement (rc.rs).
                self.rc_post(qpn, counter, wqe, w.opcode, w.signaled, w.solicited, w.imm)?;
                return Ok(None);
            }
            (Some(ServiceType::Mlx), _) => {
                // Special QPs build their own headers (§4.3; smp.rs).
                self.mlx_send(qpn, wqe)?;
                return Ok(Some(w));
            }
            _ => {
                return Err(werr(
                    Syndrome::LocalQpOperation,
                    format!("opcode {opcode:#x} is invalid for service type {st:?}"),
                ))
            }
        }
        self.transmit(qpn, &w)?;
        Ok(Some(w))
    }

    pub(crate) fn port_mtu(&self, port: u8) -> u32 {
        self.ports
            .get(usize::from(port).saturating_sub(1))
            .map(|p| crate::qp::mtu_enum_bytes(p.mtu()))
            .unwrap_or(256)
    }

    /// Turn a send WQE into packets on the wire (§7).
    fn transmit(&mut self, qpn: u32, w: &SendWqe) -> Result<(), WqeError> {
        let Some(q) = self.qps.get(&qpn).cloned() else {
            return Ok(());
        };
        let port = q.port();
        let Some(p) = self.ports.get(usize::from(port) - 1).cloned() else {
            return Ok(());
        };
        let pkey = p
            .pkeys
            .get(usize::from(q.pkey_index()))
            .copied()
            .unwrap_or(0);
        let has_imm = matches!(w.opcode, send_op::SEND_IMM | send_op::RDMA_WRITE_IMM);
        let mut base = Packet {
            src_hca: self.index,
            src_port: port,
            slid: p.lid | u16::from(q.src_path_bits()),
            dlid: 0,
            sl: q.sl(),
            dest_qpn: 0,
            src_qpn: qpn,
            transport: q.service_type().unwrap_or(ServiceType::Ud),
            op: PacketOp::SendOnly,
            psn: 0,
            pkey,
            qkey: 0,
            imm: has_imm.then_some(w.imm),
            reth: None,
            solicited: w.solicited,
            grh: false,
            aeth: None,
            atomic: None,
            atomic_orig: None,
            payload: Vec::new(),
        };
        if let Some(av) = w.av {
            let mtu = self.port_mtu(port);
            if w.payload.len() > mtu as usize {
                return Err(werr(
                    Syndrome::LocalLength,
                    format!(
                        "UD message of {} bytes exceeds the path MTU {mtu}",
                        w.payload.len()
                    ),
                ));
            }
            base.dlid = av.dlid;
            base.sl = av.sl;
            base.dest_qpn = av.dest_qpn;
            // §7.1: Q_Key with bit 31 set means "use the QP's own Q_Key".
            base.qkey = if av.qkey & 0x8000_0000 != 0 {
                q.qkey()
            } else {
                av.qkey
            };
            base.grh = av.grh;
            base.payload = w.payload.clone();
            self.send_packet(base, p.active());
            return Ok(());
        }
        // UC: segment by path MTU with consecutive PSNs (§7.2).
        let mtu = (q.mtu_bytes().min(self.port_mtu(port))).max(256) as usize;
        base.dlid = q.rlid();
        base.dest_qpn = q.remote_qpn();
        let is_write = w.raddr.is_some();
        let chunks: Vec<&[u8]> = if w.payload.is_empty() {
            vec![&[][..]]
        } else {
            w.payload.chunks(mtu).collect()
        };
        let n = chunks.len();
        for (i, chunk) in chunks.into_iter().enumerate() {
            let mut pkt = base.clone();
            pkt.op = PacketOp::for_position(is_write, i == 0, i + 1 == n);
            if i == 0 {
                if let Some(r) = w.raddr {
                    pkt.reth = Some(Reth {
                        va: r.va,
                        rkey: r.rkey,
                        len: w.payload.len() as u32,
                    });
                }
            }
            if i + 1 != n {
                pkt.imm = None;
            }
            let psn = self.qps.get(&qpn).map(|q| q.sq_psn).unwrap_or(0);
            pkt.psn = psn;
            if let Some(q) = self.qps.get_mut(&qpn) {
                q.sq_psn = (psn + 1) & 0xff_ffff;
            }
            pkt.payload = chunk.to_vec();
            self.send_packet(pkt, p.active());
        }
        Ok(())
    }

    pub(crate) fn send_packet(&mut self, pkt: Packet, port_active: bool) {
        if !port_active {
            // §6.3: a port that is not ACTIVE passes no data packets.
            self.rc_response_left(&pkt);
            self.counters.packets_dropped += 1;
            log::debug!(
                "hca{}: data packet dropped, port {} not ACTIVE",
                self.index,
                pkt.src_port
            );
            return;
        }
        self.counters.packets_sent += 1;
        self.count_xmit(pkt.src_port, pkt.pkt_len_words());
        self.outbox.push(pkt);
    }

    /// RQ doorbell record: 16-bit count of posted receive WQEs (§5.6).
    fn rq_head(&mut self, qpn: u32) -> Option<u16> {
        let db = self.qps.get(&qpn)?.db_rec();
        let mut rec = [0u8; 4];
        self.dma_read(db, &mut rec, "RQ doorbell record").ok()?;
        Some(crate::uar::db::RQ_RECORD_COUNTER.get(&rec) as u16)
    }

    /// Take the next RQ WQE: its index and scatter list (§5.6).
    pub(crate) fn rq_take(&mut self, qpn: u32) -> Result<Option<(u16, Vec<Sge>)>, WqeError> {
        let r = self.rq_peek(qpn)?;
        if let Some((idx, _)) = &r {
            self.rq_consume(qpn, *idx);
        }
        Ok(r)
    }

    /// The RQ WQE at the device's counter, read without consuming it.
    pub(crate) fn rq_peek(&mut self, qpn: u32) -> Result<Option<(u16, Vec<Sge>)>, WqeError> {
        if let Some(srqn) = self.qp_srqn(qpn) {
            return self.srq_peek(srqn);
        }
        let Some(head) = self.rq_head(qpn) else {
            return Ok(None);
        };
        let Some(q) = self.qps.get(&qpn) else {
            return Ok(None);
        };
        if q.rq_counter == head {
            return Ok(None);
        }
        let posted = head.wrapping_sub(q.rq_counter);
        let cnt = 1u32 << q.rq_log_count();
        if u32::from(posted) > cnt {
            let c = q.rq_counter;
            self.violation("§5.6", format!("QP {qpn:#x} RQ doorbell record {head} is {posted} WQEs ahead of the device counter {c}, more than the {cnt}-entry RQ"));
            return Err(werr(
                Syndrome::LocalQpOperation,
                "RQ overrun by the doorbell record",
            ));
        }
        let (_, rq_off) = q.sq_rq_offsets();
        let ls = q.rq_log_stride();
        let idx = q.rq_counter;
        let slot = u64::from(u32::from(idx) & (cnt - 1));
        let (mtt, shift) = (
            q.mtt_base() / u64::from(self.profile.mtt_entry_sz),
            q.page_shift(),
        );
        let mut w = vec![0u8; 1 << ls];
        self.mtt_read(
            mtt,
            shift,
            rq_off + (slot << ls),
            &mut w,
            &format!("RQ WQE of QP {qpn:#x}"),
        )
        .map_err(|_| werr(Syndrome::LocalQpOperation, "RQ WQE fetch failed"))?;
        self.trace_rqe(qpn, &w);
        let mut sges = Vec::new();
        for s in w.chunks(seg::data::SIZE) {
            let Data {
                byte_count: bc,
                lkey,
                addr,
            } = Data::parse(s);
            if lkey == INVALID_LKEY {
                break;
            }
            if Data::is_inline(s) {
                return Err(werr(
                    Syndrome::LocalQpOperation,
                    "inline segment in an RQ WQE",
                ));
            }
            sges.push((lkey, addr, bc));
        }
        Ok(Some((idx, sges)))
    }

    /// Consume RQ WQE `idx` (the one `rq_peek` returned): the device counter moves past it.
    pub(crate) fn rq_consume(&mut self, qpn: u32, idx: u16) {
        if let Some(srqn) = self.qp_srqn(qpn) {
            return self.srq_consume(srqn, idx);
        }
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.rq_counter = idx.wrapping_add(1);
        }
    }

    /// Scatter `data` at byte `offset` of a receive scatter list.
    pub(crate) fn scatter(
        &mut self,
        qpn: u32,
        sges: &[(u32, u64, u32)],
        offset: u64,
        data: &[u8],
    ) -> Result<(), WqeError> {
        let (pd, rlkey) = self
            .qps
            .get(&qpn)
            .map(|q| (q.pd(), q.rlkey()))
            .unwrap_or((0, false));
        let total: u64 = sges.iter().map(|s| u64::from(s.2)).sum();
        if offset + data.len() as u64 > total {
            return Err(werr(
                Syndrome::LocalLength,
                format!(
                    "{} bytes at offset {offset} exceed the {total}-byte receive buffer",
                    data.len()
                ),
            ));
        }
        let mut skip = offset;
        let mut done = 0usize;
        for &(lkey, addr, len) in sges {
            if done == data.len() {
                break;
            }
            let len = u64::from(len);
            if skip >= len {
                skip -= len;
                continue;
            }
            let n = (len - skip).min((data.len() - done) as u64);
            let pieces = self
                .translate_key(lkey, pd, rlkey, addr + skip, n, Access::LocalWrite)
                .map_err(key_err)?;
            for (pa, m) in pieces {
                if self
                    .dma_write(pa, &data[done..done + m as usize], "receive data")
                    .is_err()
                {
                    return Err(werr(
                        Syndrome::LocalProtection,
                        format!("DMA write at {pa:#x} failed"),
                    ));
                }
                done += m as usize;
            }
            skip = 0;
        }
        Ok(())
    }

    pub(crate) fn recv_error(&mut self, qpn: u32, idx: u16, e: WqeError) {
        self.violation(
            "§4.2",
            format!(
                "QP {qpn:#x} receive WQE {idx} completed in error ({:?}): {}",
                e.syndrome, e.why
            ),
        );
        let Some(q) = self.qps.get(&qpn) else { return };
        let cqn = q.recv_cqn;
        self.push_cqe(cqn, error_cqe(qpn, idx, e.syndrome, false));
        self.qp_to_error(qpn);
    }

    /// A packet arrived on `port` for this HCA (already routed by DLID).
    pub(crate) fn receive_packet(&mut self, port: u8, pkt: Packet) {
        self.count_rcv(port, pkt.pkt_len_words());
        let qpn = self.receiving_qpn(port, pkt.dest_qpn);
        let ok = self.qps.get(&qpn).is_some_and(|q| {
            matches!(q.state, QpState::Rtr | QpState::Rts)
                && q.port() == port
                && self.takes_transport(qpn, q.service_type(), pkt.transport)
        });
        if !ok {
            self.counters.packets_dropped += 1;
            log::debug!("hca{}: packet for QP {qpn:#x} dropped (no such QP in RTR/RTS on port {port} with {:?})", self.index, pkt.transport);
            return;
        }
        let Some(q) = self.qps.get(&qpn).cloned() else {
            return;
        };
        let pi = usize::from(port) - 1;
        // §7.1 P_Key check: low 15 bits equal, at least one full member.
        let mine = self.ports[pi]
            .pkeys
            .get(usize::from(q.pkey_index()))
            .copied()
            .unwrap_or(0);
        if mine & 0x7fff != pkt.pkey & 0x7fff
            || (mine | pkt.pkey) & 0x8000 == 0
            || mine & 0x7fff == 0
        {
            self.ports[pi].bad_pkey_counter = self.ports[pi].bad_pkey_counter.saturating_add(1);
            self.counters.packets_dropped += 1;
            return;
        }
        self.counters.packets_received += 1;
        match pkt.transport {
            ServiceType::Ud => self.receive_ud(qpn, &q, pkt),
            ServiceType::Uc => self.receive_uc(qpn, pkt),
            ServiceType::Rc if pkt.op.is_response() => self.rc_requester_rx(qpn, pkt),
            ServiceType::Rc => self.rc_responder_rx(qpn, pkt),
            _ => self.counters.packets_dropped += 1,
        }
    }

    fn receive_ud(&mut self, qpn: u32, q: &crate::qp::Qp, pkt: Packet) {
        if pkt.qkey != q.qkey() {
            // §7.1: Q_Key mismatch drops the packet and counts a violation.
            let pi = usize::from(q.port()) - 1;
            self.ports[pi].qkey_violations = self.ports[pi].qkey_violations.saturating_add(1);
            self.counters.packets_dropped += 1;
            return;
        }
        let (idx, sges) = match self.rq_take(qpn) {
            Ok(Some(x)) => x,
            Ok(None) => {
                // UD: no receive WQE -> silently dropped.
                self.counters.packets_dropped += 1;
                return;
            }
            Err(e) => return self.recv_error(qpn, 0, e),
        };
        // §7.1: the first 40 bytes are the GRH area; payload follows; byte_cnt = len + 40.
        let grh = [0u8; 40];
        let r = if pkt.grh { self.scatter(qpn, &sges, 0, &grh) } else { Ok(()) }
            .and_then(|_| {
                let total: u64 = sges.iter().map(|s| u64::from(s.2)).sum();
                if total < 40 + pkt.payload.len() as u64 {
                    Err(werr(Syndrome::LocalLength, format!("UD message of {} bytes + 40-byte GRH area exceeds the {total}-byte receive buffer", pkt.payload.len())))
                } else {
                    self.scatter(qpn, &sges, 40, &pkt.payload)
                }
            });
        if let Err(e) = r {
            return self.recv_error(qpn, idx, e);
        }
        let c = Completion {
            qpn,
            immed: pkt.imm.unwrap_or(u32::from(q.pkey_index())),
            grh: pkt.grh,
            remote_qpn: pkt.src_qpn,
            sl: pkt.sl,
            slid: pkt.slid,
            byte_cnt: pkt.payload.len() as u32 + 40,
            wqe_index: idx,
            opcode: if pkt.imm.is_some() {
                cqe_op::RECV_SEND_IMM
            } else {
                cqe_op::RECV_SEND
            },
            solicited: pkt.solicited,
            ..Default::default()
        };
        self.push_cqe(q.recv_cqn, c);
    }

    fn receive_uc(&mut self, qpn: u32, pkt: Packet) {
        let Some(q) = self.qps.get_mut(&qpn) else {
            return;
        };
        let starts = pkt.op.is_first_or_only();
        if pkt.psn != q.rq_psn || (q.uc_resync && !starts) {
            // §7.2: on a PSN gap drop the rest of the current message and resynchronise on
            // the next FIRST/ONLY.
            q.recv_in_progress = None;
            if !starts {
                q.uc_resync = true;
                self.counters.packets_dropped += 1;
                return;
            }
        }
        q.uc_resync = false;
        q.rq_psn = (pkt.psn + 1) & 0xff_ffff;
        if starts {
            q.recv_in_progress = None;
        } else if q.recv_in_progress.is_none() {
            self.counters.packets_dropped += 1;
            return;
        }
        let rwe = q.remote_access().write;
        let (pd, rlkey) = (q.pd(), q.rlkey());
        let recv_cqn = q.recv_cqn;
        if starts {
            let mut prog = RecvProgress {
                wqe_index: None,
                sges: Vec::new(),
                write: None,
                offset: 0,
            };
            if pkt.op.is_write() {
                let Reth { va, rkey, len } = pkt.reth.unwrap_or_default();
                if !rwe {
                    self.drop_uc_message(qpn, "RDMA WRITE to a QP without RWE");
                    return;
                }
                if let Err(e) =
                    self.translate_key(rkey, pd, rlkey, va, u64::from(len), Access::RemoteWrite)
                {
                    self.drop_uc_message(qpn, &format!("RDMA WRITE rejected: {e:?}"));
                    return;
                }
                prog.write = Some(Reth { va, rkey, len });
            } else {
                // A UC SEND uses the RQ head WQE but consumes it only when the message
                // completes: a message cut short by a lost packet leaves it for the next
                // First/Only (docs/model.md, "UC receive").
                match self.rq_peek(qpn) {
                    Ok(Some((idx, sges))) => {
                        prog.wqe_index = Some(idx);
                        prog.sges = sges;
                    }
                    Ok(None) => {
                        self.drop_uc_message(qpn, "no receive WQE posted");
                        return;
                    }
                    Err(e) => return self.recv_error(qpn, 0, e),
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
                self.drop_uc_message(qpn, "RDMA WRITE longer than its RETH length");
                return;
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
                    self.drop_uc_message(qpn, &format!("RDMA WRITE rejected: {e:?}"));
                    return;
                }
            }
        } else if let Err(e) = self.scatter(qpn, &prog.sges.clone(), prog.offset, &pkt.payload) {
            let idx = prog.wqe_index.unwrap_or(0);
            self.rq_consume(qpn, idx);
            return self.recv_error(qpn, idx, e);
        }
        prog.offset += pkt.payload.len() as u64;
        if !pkt.op.is_last_or_only() {
            if let Some(q) = self.qps.get_mut(&qpn) {
                q.recv_in_progress = Some(prog);
            }
            return;
        }
        // Message complete.
        let (idx, opcode) = if prog.write.is_some() {
            if pkt.imm.is_none() {
                // A plain RDMA WRITE completes nothing at the responder.
                return;
            }
            match self.rq_take(qpn) {
                Ok(Some((idx, _))) => (idx, cqe_op::RECV_RDMA_WRITE_IMM),
                Ok(None) => {
                    self.drop_uc_message(qpn, "RDMA WRITE with immediate but no receive WQE");
                    return;
                }
                Err(e) => return self.recv_error(qpn, 0, e),
            }
        } else {
            let idx = prog.wqe_index.unwrap_or(0);
            self.rq_consume(qpn, idx);
            (
                idx,
                if pkt.imm.is_some() {
                    cqe_op::RECV_SEND_IMM
                } else {
                    cqe_op::RECV_SEND
                },
            )
        };
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
        self.push_cqe(recv_cqn, c);
    }

    fn drop_uc_message(&mut self, qpn: u32, why: &str) {
        log::debug!(
            "hca{}: UC message for QP {qpn:#x} dropped: {why}",
            self.index
        );
        self.counters.packets_dropped += 1;
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.recv_in_progress = None;
            q.uc_resync = true;
        }
    }
}

pub(crate) fn key_err(e: KeyError) -> WqeError {
    match e {
        KeyError::Protection(s) => werr(Syndrome::LocalProtection, s),
        KeyError::Translation(s) => werr(Syndrome::LocalProtection, s),
    }
}

/// Error CQE (§4.2) for WQE `wqe_index` of QP `qpn`.
pub(crate) fn error_cqe(qpn: u32, wqe_index: u16, s: Syndrome, send: bool) -> Completion {
    Completion::error(qpn, wqe_index, s, send)
}
