//! Queue pairs: creation (buffer, one MTT entry, doorbell record, BlueFlame register), the
//! state machine through mailbox commands, and the post_send/post_recv data path
//! (docs/hardware.md §4.4, §5.2–§5.6, §7).

use core::borrow::Borrow;

use crate::cq::CqHandle;
use crate::error::Error;
use crate::hca::{Ids, QueueMem};
use crate::hw::{self, ctrl, opcode, optpar, qpc, DataSeg, QpContext, INVALID_LKEY};
use crate::platform::{DmaRegion, Platform};
use crate::regs::{uar, Opcode};
use crate::sq::{self, SqCursor};
use crate::wq::Wq;
use crate::wqe::{self, Bf, SendWqe, SqGeometry};
use crate::Hca;
use verbs::{
    AccessFlags, AhAttr, BadWr, Payload, QpAttr, QpCap, QpState, QpType, RecvWr, SendFlags, SendWr,
    WrOpcode,
};
use zerocopy::{FromBytes, IntoBytes};

/// Handle of a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpHandle {
    pub(crate) slot: u32,
    pub(crate) qpn: u32,
}

impl QpHandle {
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
}

/// An address handle: the first 32 bytes of the UD datagram segment, prebuilt (§5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ah {
    pub(crate) av: [u8; 32],
}

impl Ah {
    /// Build the address vector for `pd` from `attr` (§5.2 datagram segment).
    pub fn new(pd: u32, attr: &AhAttr) -> Ah {
        let mut d = hw::DatagramSeg::default();
        d.port_pd.set(((attr.port as u32) << 24) | (pd & 0xFF_FFFF));
        d.g_slid = attr.src_path_bits & 0x7F;
        d.dlid.set(attr.dlid);
        d.stat_rate = static_rate(attr.static_rate);
        let mut sl_tc_fl = ((attr.sl as u32) & 0xF) << 28;
        if let Some(g) = attr.grh {
            d.g_slid |= qpc::GRH;
            d.gid_index = g.sgid_index;
            d.hop_limit = g.hop_limit;
            sl_tc_fl |= ((g.traffic_class as u32) << 20) | (g.flow_label & 0xF_FFFF);
            d.dgid = g.dgid.0;
        }
        d.sl_tclass_flowlabel.set(sl_tc_fl);
        let mut av = [0u8; 32];
        av.copy_from_slice(&d.as_bytes()[..32]);
        Ah { av }
    }

    /// The prebuilt first 32 bytes of the datagram segment.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.av
    }
}

pub struct Qp {
    pub qpn: u32,
    pub qp_type: QpType,
    pub state: QpState,
    pd: u32,
    pub(crate) send_cqn: u32,
    pub(crate) recv_cqn: u32,
    pub(crate) buf: DmaRegion,
    /// The send queue's first slot, inside `buf` at `sq.off`.
    sq_base: *mut u8,
    page_shift: u32,
    mtt: u32,
    pub(crate) sq: Wq,
    pub(crate) rq: Wq,
    pub(crate) sq_geo: SqGeometry,
    /// Largest inline SEND that takes the fast path: one inline segment in the WQE's first
    /// or second 64-byte chunk, through BlueFlame (0 = no fast path).
    pub(crate) fast_inline: u32,
    dbrec: *mut u8,
    dbrec_idx: usize,
    dbrec_bus: u64,
    /// `BE(qpn << 8)` as the raw 32-bit value written to the send doorbell (§5.1).
    pub(crate) doorbell_qpn: u32,
    /// BAR2 offset of the send doorbell of the QP's UAR page.
    db_offset: usize,
    pub(crate) bf: Option<Bf>,
    /// `CQ_UPDATE` when every WR is signaled (sq_sig_all), else 0.
    pub(crate) sig_all: u32,
    /// Attributes accumulated over transitions.
    attr: QpAttr,
    cap: QpCap,
    /// The SRQ the QP takes its receives from (§4.7).
    pub(crate) srq: Option<crate::srq::SrqHandle>,
}

fn qp_state_code(s: QpState) -> u32 {
    match s {
        QpState::Reset => qpc::state::RESET,
        QpState::Init => qpc::state::INIT,
        QpState::Rtr => qpc::state::RTR,
        QpState::Rts => qpc::state::RTS,
        QpState::Err => qpc::state::ERR,
    }
}

fn service_type(t: QpType) -> u32 {
    match t {
        QpType::Rc => qpc::st::RC,
        QpType::Uc => qpc::st::UC,
        QpType::Ud => qpc::st::UD,
    }
}

/// The address path's static_rate for a verbs rate (0 = the port's rate).
fn static_rate(rate: u8) -> u8 {
    if rate == 0 {
        0
    } else {
        rate + qpc::STATIC_RATE_OFFSET
    }
}

fn log2_ceil(x: u8) -> u32 {
    if x <= 1 {
        0
    } else {
        32 - ((x as u32) - 1).leading_zeros()
    }
}

impl<P: Platform> Hca<P> {
    pub(crate) fn qp_mut(&mut self, h: QpHandle) -> Result<&mut Qp, Error> {
        match self.qps.get_mut(h.slot as usize) {
            Some(Some(q)) if q.qpn == h.qpn => Ok(q),
            _ => Err(Error::InvalidHandle),
        }
    }

    pub(crate) fn qp_ref(&self, h: QpHandle) -> Result<&Qp, Error> {
        match self.qps.get(h.slot as usize) {
            Some(Some(q)) if q.qpn == h.qpn => Ok(q),
            _ => Err(Error::InvalidHandle),
        }
    }

    /// Create a QP in RESET.
    pub fn create_qp_raw(
        &mut self,
        pd: u32,
        send_cq: CqHandle,
        recv_cq: CqHandle,
        qp_type: QpType,
        cap: &QpCap,
        sq_sig_all: bool,
    ) -> Result<QpHandle, Error> {
        let a = (pd, send_cq, recv_cq, qp_type);
        self.create_qp_numbered(a, cap, sq_sig_all, None)
    }

    /// Create a QP in RESET, at QP number `requested` if given (a well-known number a peer
    /// can address): [`Error::QpnUnavailable`] if it is reserved, in use or outside the table.
    pub(crate) fn create_qp_numbered(
        &mut self,
        (pd, send_cq, recv_cq, qp_type): (u32, CqHandle, CqHandle, QpType),
        cap: &QpCap,
        sq_sig_all: bool,
        requested: Option<u32>,
    ) -> Result<QpHandle, Error> {
        let c = self.caps;
        let need = match qp_type {
            QpType::Rc => crate::fw::flag::RC,
            QpType::Uc => crate::fw::flag::UC,
            QpType::Ud => crate::fw::flag::UD,
        };
        if c.flags & need == 0 {
            return Err(Error::Capability("QP type not supported"));
        }
        let send_cqn = self.cq_mut(send_cq)?.cqn;
        let recv_cqn = self.cq_mut(recv_cq)?.cqn;
        if cap.max_send_sge > c.max_sq_sg || cap.max_recv_sge > c.max_rq_sg {
            return Err(Error::InvalidArgument("too many SGEs"));
        }
        let geo = wqe::sq_geometry(
            qp_type == QpType::Ud,
            cap.max_send_wr,
            cap.max_send_sge,
            cap.max_inline_data,
            c.max_sq_desc_sz,
            c.max_qp_sz,
        )
        .ok_or(Error::InvalidArgument(
            "send queue larger than the device allows",
        ))?;
        let max_gs = cap.max_recv_sge.max(1).next_power_of_two();
        let rq_shift = (max_gs * 16).trailing_zeros();
        let rq_cnt =
            cap.max_recv_wr
                .max(1)
                .checked_next_power_of_two()
                .ok_or(Error::InvalidArgument(
                    "receive queue larger than the device allows",
                ))?;
        if rq_cnt > c.max_qp_sz || max_gs * 16 > c.max_rq_desc_sz.max(16) {
            return Err(Error::InvalidArgument(
                "receive queue larger than the device allows",
            ));
        }
        let sq_bytes = 1usize << (geo.log_cnt + geo.wqe_shift);
        let rq_bytes = (rq_cnt as usize) << rq_shift;
        // §4.4: the queue with the larger stride comes first; SQ first on a tie.
        let (sq_off, rq_off) = if rq_shift > geo.wqe_shift {
            (rq_bytes, 0)
        } else {
            (0, sq_bytes)
        };
        let size = (sq_bytes + rq_bytes).next_power_of_two().max(4096);

        let qpn = match requested {
            None => self.qpns.alloc().ok_or(Error::NoResources("QP numbers"))?,
            Some(qpn) => {
                let taken = self.qpns.alloc_at(qpn);
                taken.map_err(|why| Error::QpnUnavailable { qpn, why })?;
                qpn
            }
        };
        let QueueMem {
            buf,
            page_shift,
            mtt,
            dbrec_idx,
            dbrec_bus,
            dbrec,
        } = self.queue_mem(Ids::Qpn, qpn, size, "QP buffer")?;
        let bf = self.bf_free.pop().map(|index| {
            let reg_size = self.caps.bf_reg_size as usize;
            Bf {
                index,
                reg: (self.caps.num_uars() + self.kar) as usize * uar::PAGE
                    + index as usize * reg_size,
                half: 0,
                buf_size: reg_size / 2,
            }
        });
        let granted = QpCap {
            max_send_wr: geo.max_post,
            max_recv_wr: rq_cnt,
            max_send_sge: geo.max_sge.min(c.max_sq_sg),
            max_recv_sge: max_gs,
            max_inline_data: geo.max_inline,
        };
        let qp = Qp {
            qpn,
            qp_type,
            state: QpState::Reset,
            pd,
            send_cqn,
            recv_cqn,
            sq_base: buf.as_ptr().wrapping_add(sq_off),
            buf,
            page_shift,
            mtt,
            sq: Wq::new(
                sq_off,
                geo.log_cnt,
                geo.wqe_shift,
                geo.max_post,
                granted.max_send_sge,
            ),
            rq: Wq::new(rq_off, rq_cnt.trailing_zeros(), rq_shift, rq_cnt, max_gs),
            sq_geo: geo,
            fast_inline: 0,
            dbrec,
            dbrec_idx,
            dbrec_bus,
            doorbell_qpn: (qpn << 8).to_be(),
            db_offset: self.kar as usize * uar::PAGE + uar::SEND_DB,
            bf,
            sig_all: if sq_sig_all { ctrl::CQ_UPDATE } else { 0 },
            attr: QpAttr::new(QpState::Reset),
            cap: granted,
            srq: None,
        };
        let mut qp = qp;
        qp.fast_inline = fast_inline_limit(qp_type, &qp.sq_geo, qp.bf.as_ref().map(|b| b.buf_size));
        let slot = (qpn - self.caps.reserved_qps) as usize;
        if self.qps.len() <= slot {
            self.qps.resize_with(slot + 1, || None);
        }
        self.qps[slot] = Some(qp);
        Ok(QpHandle {
            slot: slot as u32,
            qpn,
        })
    }

    /// Create a QP in RESET that takes its receives from `srq` (Linux: no RQ and no RQ
    /// doorbell record in the context, §4.7).
    pub fn create_qp_with_srq_raw(
        &mut self,
        (pd, send_cq, recv_cq, qp_type): (u32, CqHandle, CqHandle, QpType),
        cap: &QpCap,
        sq_sig_all: bool,
        srq: crate::srq::SrqHandle,
    ) -> Result<QpHandle, Error> {
        self.srq_mut(srq)?;
        let cap = QpCap {
            max_recv_wr: 0,
            max_recv_sge: 0,
            ..*cap
        };
        let h = self.create_qp_numbered((pd, send_cq, recv_cq, qp_type), &cap, sq_sig_all, None)?;
        let q = self.qp_mut(h)?;
        q.srq = Some(srq);
        q.rq.max_post = 0;
        q.cap.max_recv_wr = 0;
        q.cap.max_recv_sge = 0;
        self.srq_mut(srq)?.users += 1;
        Ok(h)
    }

    /// 2RST (if needed) and free QP slot `i`.
    pub(crate) fn destroy_qp_index(&mut self, i: usize) -> Result<(), Error> {
        let Some(Some(q)) = self.qps.get(i) else {
            return Err(Error::InvalidHandle);
        };
        let (qpn, state) = (q.qpn, q.state);
        let r = if state != QpState::Reset {
            self.cmd(Opcode::ERR2RST_QP, 0, qpn, 2, crate::cmd::Out::None)
                .map(|_| ())
        } else {
            Ok(())
        };
        self.clean_qp_cqs(i);
        let q = self.qps[i].take().ok_or(Error::InvalidHandle)?;
        if let Some(s) = q.srq.and_then(|h| self.srq_mut(h).ok()) {
            s.users = s.users.saturating_sub(1);
        }
        if let Some(bf) = q.bf {
            self.bf_free.push(bf.index);
        }
        self.mtts.free(q.mtt);
        self.free_dbrec(q.dbrec_idx);
        drop(q.buf);
        self.qpns.free(q.qpn);
        r
    }

    /// Drop the unconsumed completions of the QP in slot `i` from its receive CQ and, when
    /// different, its send CQ (§5.8), after it went to RESET.
    fn clean_qp_cqs(&mut self, i: usize) {
        let Some(Some(q)) = self.qps.get(i) else {
            return;
        };
        let (qpn, send_cqn, recv_cqn, srq) = (q.qpn, q.send_cqn, q.recv_cqn, q.srq);
        self.clean_cq(recv_cqn, qpn, srq);
        if send_cqn != recv_cqn {
            self.clean_cq(send_cqn, qpn, None);
        }
    }

    /// Granted capacities of a QP.
    pub fn qp_cap_raw(&self, h: QpHandle) -> Result<QpCap, Error> {
        Ok(self.qp_ref(h)?.cap)
    }

    /// Build the QP context for one transition, `from` → `to`, with exactly the fields
    /// Linux's `__mlx4_ib_modify_qp` (and `mlx4_qp_modify` in mlx4_core's qp.c) fills for that
    /// transition with the attribute masks of the verbs applications (perftest): every
    /// transition carries the state, service type, queue sizes, UAR, PD, CQs and params1's
    /// ACK frequency and fast-register bit; the rest only with the transition that sets it.
    /// Fields of earlier transitions stay zero: the HCA keeps them (§4.4 optpar).
    fn build_qp_context(&self, q: &Qp, from: QpState, to: QpState) -> QpContext {
        let a = &q.attr;
        let ty = q.qp_type;
        let mut ctx = QpContext::default();
        ctx.flags.set(
            (qp_state_code(to) << qpc::STATE_SHIFT)
                | (service_type(ty) << qpc::ST_SHIFT)
                | qpc::PM_MIGRATED,
        );
        ctx.pd.set(q.pd);
        if let Some(srq) = q.srq {
            // §4.7: no RQ; the SRQ and the RIC bit go with every transition. The RQ size
            // stays unset and the stride byte is Linux's `0 − 4` of a stride never set.
            ctx.srqn.set(qpc::SRQ_EN | (srq.srqn & 0xFF_FFFF));
            ctx.rq_size_stride = 0u8.wrapping_sub(4);
        } else {
            ctx.rq_size_stride = ((q.rq.log_cnt << 3) | (q.rq.wqe_shift - 4)) as u8;
        }
        ctx.sq_size_stride = ((q.sq.log_cnt << 3) | (q.sq.wqe_shift - 4)) as u8;
        ctx.usr_page.set(self.kar);
        ctx.local_qpn.set(q.qpn);
        ctx.cqn_send.set(q.send_cqn);
        ctx.cqn_recv.set(q.recv_cqn);
        // UD's MTU and message size go with every transition; RC/UC's with the path MTU.
        if ty == QpType::Ud {
            ctx.mtu_msgmax = qpc::MTU_MSGMAX_UD;
        }
        let mut params1 = qpc::ACK_REQ_FREQ | qpc::FRE;
        match (from, to) {
            (QpState::Reset, QpState::Init) => {
                ctx.pri_path.pkey_index = a.pkey_index as u8;
                if ty == QpType::Ud {
                    ctx.qkey.set(a.qkey);
                } else {
                    ctx.params2.set(self.access_bits(q));
                }
                if q.srq.is_none() {
                    ctx.db_rec_addr.set(q.dbrec_bus);
                }
                // The reserved L_Key bit of kernel QPs, and the WQ buffer's MTT.
                ctx.rlkey_roce_mode = qpc::RLKEY;
                ctx.log_page_size = (q.page_shift - 12) as u8;
                let mtt_addr = q.mtt as u64 * 8;
                ctx.mtt_base_addr_h = (mtt_addr >> 32) as u8;
                ctx.mtt_base_addr_l.set(mtt_addr as u32);
            }
            (QpState::Init, QpState::Rtr) => {
                ctx.pri_path.counter_index = self.qp_counter(a.port_num).0;
                let port = a.port_num.max(1);
                if ty == QpType::Ud {
                    ctx.pri_path.sched_queue =
                        qpc::SCHED_QUEUE_IB | ((port - 1) << qpc::SCHED_PORT_SHIFT);
                } else {
                    ctx.mtu_msgmax =
                        ((a.path_mtu as u8) << qpc::MTU_SHIFT) | (self.caps.log_max_msg & 0x1F);
                    ctx.remote_qpn.set(a.dest_qp_num & 0xFF_FFFF);
                    ctx.pri_path.sched_queue = qpc::SCHED_QUEUE_IB
                        | ((port - 1) << qpc::SCHED_PORT_SHIFT)
                        | ((a.ah.sl & 0xF) << qpc::SCHED_SL_SHIFT);
                    ctx.pri_path.rlid.set(a.ah.dlid);
                    ctx.pri_path.grh_mylmc = a.ah.src_path_bits & 0x7F;
                    ctx.pri_path.static_rate =
                        static_rate(self.caps.supported_static_rate(a.ah.static_rate));
                    if let Some(g) = a.ah.grh {
                        ctx.pri_path.grh_mylmc |= qpc::GRH;
                        ctx.pri_path.mgid_index = g.sgid_index;
                        ctx.pri_path.hop_limit = g.hop_limit;
                        ctx.pri_path
                            .tclass_flowlabel
                            .set(((g.traffic_class as u32) << 20) | (g.flow_label & 0xF_FFFF));
                        ctx.pri_path.rgid = g.dgid.0;
                    }
                    let mut psn = a.rq_psn & 0xFF_FFFF;
                    if ty == QpType::Rc {
                        // The responder depth and, with it, the access bits; the RNR timer.
                        psn |= (a.min_rnr_timer as u32 & 0x1F) << qpc::MIN_RNR_TIMER_SHIFT;
                        ctx.params2.set(
                            self.access_bits(q)
                                | (log2_ceil(a.max_dest_rd_atomic) << qpc::RRA_MAX_SHIFT),
                        );
                    }
                    ctx.rnr_nextrecvpsn.set(psn);
                }
            }
            (QpState::Rtr, QpState::Rts) => {
                ctx.next_send_psn.set(a.sq_psn & 0xFF_FFFF);
                if ty == QpType::Rc {
                    ctx.pri_path.ackto = (a.timeout & 0x1F) << qpc::ACKTO_SHIFT;
                    params1 |= ((a.retry_cnt as u32 & 7) << qpc::RETRY_COUNT_SHIFT)
                        | ((a.rnr_retry as u32 & 7) << qpc::RNR_RETRY_SHIFT)
                        | (log2_ceil(a.max_rd_atomic) << qpc::SRA_MAX_SHIFT);
                }
            }
            _ => {}
        }
        ctx.params1.set(params1);
        if q.srq.is_some() {
            ctx.params2.set(ctx.params2.get() | qpc::RIC);
        }
        ctx
    }

    /// The remote access bits of params2 (RWE, RRE, RAE) as Linux's
    /// `to_mlx4_access_flags` computes them: with no responder resources
    /// (max_dest_rd_atomic 0) only remote write survives; UC has no reads or atomics.
    fn access_bits(&self, q: &Qp) -> u32 {
        let a = &q.attr;
        let mut access = a.access;
        if a.max_dest_rd_atomic == 0 {
            access &= AccessFlags::REMOTE_WRITE;
        }
        let mut bits = 0;
        if access.contains(AccessFlags::REMOTE_WRITE) {
            bits |= qpc::RWE;
        }
        if q.qp_type == QpType::Rc {
            if access.contains(AccessFlags::REMOTE_READ) {
                bits |= qpc::RRE;
            }
            if access.contains(AccessFlags::REMOTE_ATOMIC) {
                bits |= qpc::RAE;
            }
        }
        bits
    }

    /// Initialise every SQ slot as invalid in pass 0 and stamped (§5.4).
    fn init_sq(q: &mut Qp) {
        // SAFETY: the SQ lies inside the QP buffer at `sq.off`, 64-byte aligned (the buffer
        // is aligned to its size, the queue starts at a multiple of its stride).
        unsafe { sq::init_slots(q.sq_base, q.sq.log_cnt, q.sq.wqe_shift) };
    }

    /// Move a QP through one transition (§4.4).
    pub fn modify_qp_raw(&mut self, h: QpHandle, attr: &QpAttr) -> Result<(), Error> {
        let q = self.qp_ref(h)?;
        let (from, to, ty, qpn) = (q.state, attr.qp_state, q.qp_type, q.qpn);
        let qp_port = q.attr.port_num;
        if attr.port_num == 0 || attr.port_num > self.caps.num_ports {
            return Err(Error::InvalidArgument("port number"));
        }
        // Responder depth is bounded by the RDMARC entries each QP has in ICM (§3.4), the
        // requester depth by the device (QUERY_DEV_CAP 0x29).
        let rdmarc = self
            .profile
            .as_ref()
            .map_or(0, |p| 1u32 << p.log_rdmarc_per_qp);
        if to == QpState::Rtr && attr.max_dest_rd_atomic as u32 > rdmarc {
            return Err(Error::InvalidArgument(
                "max_dest_rd_atomic above the RDMARC entries per QP",
            ));
        }
        if to == QpState::Rts && (attr.max_rd_atomic as u64) > (1u64 << self.caps.log_max_rd_req) {
            return Err(Error::InvalidArgument(
                "max_rd_atomic above the device limit",
            ));
        }
        if to == QpState::Reset {
            // Linux's `_mlx4_ib_modify_qp` sends no command for RESET to RESET.
            if from == QpState::Reset {
                return Ok(());
            }
            self.cmd(Opcode::ERR2RST_QP, 0, qpn, 2, crate::cmd::Out::None)?;
            self.clean_qp_cqs(h.slot as usize);
            let q = self.qp_mut(h)?;
            q.state = QpState::Reset;
            q.sq.reset();
            q.rq.reset();
            // SAFETY: dbrec points at our 8-byte doorbell record.
            unsafe { core::ptr::write_bytes(q.dbrec, 0, 8) };
            return Ok(());
        }
        let (op, opt) = match (from, to) {
            (QpState::Reset, QpState::Init) => {
                let opt = match ty {
                    QpType::Ud => optpar::PKEY_INDEX | optpar::Q_KEY,
                    _ => optpar::PKEY_INDEX | optpar::RRE | optpar::RWE | optpar::RAE,
                };
                (Opcode::RST2INIT_QP, opt)
            }
            (QpState::Init, QpState::Rtr) => {
                // Linux's `__mlx4_ib_modify_qp`: an address vector (RC/UC) brings the primary
                // path and the sched queue; UD writes its sched queue without an optpar bit;
                // RC's responder depth brings RRA_MAX and the access bits; the port's
                // counter, if it has one, COUNTER_INDEX.
                let mut opt = match ty {
                    QpType::Ud => 0,
                    QpType::Uc => optpar::PRIMARY_ADDR_PATH | optpar::SCHED_QUEUE,
                    QpType::Rc => {
                        optpar::PRIMARY_ADDR_PATH
                            | optpar::SCHED_QUEUE
                            | optpar::RRA_MAX
                            | optpar::RWE
                            | optpar::RRE
                            | optpar::RAE
                            | optpar::RNR_TIMEOUT
                    }
                };
                if self.qp_counter(qp_port).1 {
                    opt |= optpar::COUNTER_INDEX;
                }
                (Opcode::INIT2RTR_QP, opt)
            }
            (QpState::Rtr, QpState::Rts) => {
                let opt = match ty {
                    QpType::Rc => {
                        optpar::ACK_TIMEOUT
                            | optpar::RETRY_COUNT
                            | optpar::RNR_RETRY
                            | optpar::SRA_MAX
                    }
                    _ => 0,
                };
                (Opcode::RTR2RTS_QP, opt)
            }
            (QpState::Rts, QpState::Rts) => (Opcode::RTS2RTS_QP, 0),
            (_, QpState::Err) => (Opcode::TO_ERR_QP, 0),
            _ => return Err(Error::InvalidArgument("QP state transition")),
        };
        // Merge the attributes this transition carries.
        {
            let q = self.qp_mut(h)?;
            let a = &mut q.attr;
            match to {
                QpState::Init => {
                    a.port_num = attr.port_num;
                    a.pkey_index = attr.pkey_index;
                    a.qkey = attr.qkey;
                    a.access = attr.access;
                }
                QpState::Rtr => {
                    a.path_mtu = attr.path_mtu;
                    a.dest_qp_num = attr.dest_qp_num;
                    a.rq_psn = attr.rq_psn;
                    a.ah = attr.ah;
                    a.max_dest_rd_atomic = attr.max_dest_rd_atomic;
                    a.min_rnr_timer = attr.min_rnr_timer;
                }
                QpState::Rts => {
                    a.sq_psn = attr.sq_psn;
                    a.timeout = attr.timeout;
                    a.retry_cnt = attr.retry_cnt;
                    a.rnr_retry = attr.rnr_retry;
                    a.max_rd_atomic = attr.max_rd_atomic;
                }
                _ => {}
            }
            if from == QpState::Reset {
                Self::init_sq(q);
            }
        }
        let ctx = self.build_qp_context(self.qp_ref(h)?, from, to);
        let b = self.cmd.inbox_clear();
        if b.len() < 8 + 248 {
            return Err(Error::NoMemory("command mailbox"));
        }
        b[0..4].copy_from_slice(&opt.to_be_bytes());
        // The context lands at mailbox + 8 (§4.4).
        b[8..8 + size_of::<QpContext>()].copy_from_slice(ctx.as_bytes());
        let r = self.cmd_in(op, qpn, 0);
        let q = self.qp_mut(h)?;
        match r {
            Ok(()) => {
                q.state = to;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Post one send work request (§5.2–§5.5).
    ///
    /// The latency path — a SEND of 1..=`fast_inline` inline bytes on a QP in RTS with a
    /// BlueFlame register and a free slot — is one chain of checks and [`fast_send`], inlined
    /// into the caller. Everything else, errors included, takes the out-of-line generic
    /// path, which validates the whole WR before writing anything.
    #[inline(always)]
    pub fn post_send_raw(&mut self, h: QpHandle, wr: &SendWr<'_, Ah>) -> Result<(), verbs::Error> {
        if let Some(Some(q)) = self.qps.get_mut(h.slot as usize) {
            if let (WrOpcode::Send, Payload::Inline(data)) = (&wr.opcode, &wr.payload) {
                // One unsigned compare covers 1 <= len <= fast_inline (0 without BlueFlame).
                let fits = data.len().wrapping_sub(1) < q.fast_inline as usize;
                if fits && q.qpn == h.qpn && q.state == QpState::Rts {
                    let sent = match (q.qp_type, &wr.ud) {
                        (QpType::Ud, Some(d)) => {
                            fast_send::<P, true>(&self.p, q, data, wr, Some(d))
                        }
                        (QpType::Ud, None) => false,
                        _ => fast_send::<P, false>(&self.p, q, data, wr, None),
                    };
                    if sent {
                        return Ok(());
                    }
                }
            }
        }
        self.post_send_generic(h, wr)
    }

    /// Every send the fast path does not take: all opcodes, SGE lists, larger inline data,
    /// the regular doorbell, and the typed errors.
    #[inline(never)]
    fn post_send_generic(&mut self, h: QpHandle, wr: &SendWr<'_, Ah>) -> Result<(), verbs::Error> {
        let Some(Some(q)) = self.qps.get_mut(h.slot as usize) else {
            return Err(verbs::Error::InvalidHandle);
        };
        if q.qpn != h.qpn {
            return Err(verbs::Error::InvalidHandle);
        }
        post_send_qp(&self.p, q, wr)
    }
}

impl Qp {
    /// The send queue as a post sees it ([`SqCursor`]), allowing `max_outstanding` (at
    /// most `max_post`) work requests outstanding.
    #[inline(always)]
    pub(crate) fn sq_cursor(&self, max_outstanding: u32) -> SqCursor {
        // SAFETY: `sq_base` is the SQ inside the QP buffer (`create_qp_numbered`): its slots
        // are 64-byte aligned (the buffer is aligned to its size, the queue starts at a
        // multiple of its stride), at least 64 bytes, initialised at RST→INIT
        // (`init_slots`), and `max_post` leaves `spare` slots of headroom.
        unsafe { SqCursor::new(self.sq_base, &self.sq, self.sq_geo.spare, max_outstanding) }
    }
}

/// [`Hca::post_send_raw`]'s generic path on a QP already looked up (also the data path's
/// slow path, crate::path): the WQE, then BlueFlame or the send doorbell.
pub(crate) fn post_send_qp<P: Platform>(
    p: &P,
    q: &mut Qp,
    wr: &SendWr<'_, Ah>,
) -> Result<(), verbs::Error> {
    if q.state != QpState::Rts {
        return Err(verbs::Error::WrongState { state: q.state });
    }
    let mut c = q.sq_cursor(q.sq.max_post);
    match (write_send_wqe(p, q, &mut c, wr, true)?, &mut q.bf) {
        // SAFETY: `words` covers the WQE in whole 64-byte chunks inside its slot.
        (Some((w, words)), Some(bf)) => unsafe { c.ring_blueflame(p, &mut q.sq, &w, bf, words) },
        _ => c.ring_doorbell(p, &mut q.sq, q.db_offset, q.doorbell_qpn),
    }
    Ok(())
}

/// Validate `wr`, write its WQE at the cursor's head through [`SendWqe`] and publish it;
/// nothing is written on error. With `alone` (a post of this one WQE) a WQE that qualifies
/// ([`sq::blueflame_fits`]) is published for BlueFlame and returned with the 64-bit words to
/// copy, for the caller to ring BlueFlame; otherwise (`None`) the caller rings the send
/// doorbell, after this WQE or after the last of a list. The QP is in RTS (callers check).
fn write_send_wqe<P: Platform>(
    p: &P,
    q: &mut Qp,
    c: &mut SqCursor,
    wr: &SendWr<'_, Ah>,
    alone: bool,
) -> Result<Option<(SendWqe, usize)>, verbs::Error> {
    if !c.has_room() {
        return Err(verbs::Error::QueueFull);
    }
    let ud = q.qp_type == QpType::Ud;
    // Validate everything first (no partial WQE is ever written on error).
    let (op, imm, raddr, atomic, needs_local) = match wr.opcode {
        WrOpcode::Send => (opcode::SEND, 0, None, None, false),
        WrOpcode::SendWithImm { imm } => (opcode::SEND_IMM, imm, None, None, false),
        _ if ud => return Err(verbs::Error::UnsupportedOpcode),
        WrOpcode::RdmaWrite { remote_addr, rkey } => (
            opcode::RDMA_WRITE,
            0,
            Some((remote_addr, rkey)),
            None,
            false,
        ),
        WrOpcode::RdmaWriteWithImm {
            remote_addr,
            rkey,
            imm,
        } => (
            opcode::RDMA_WRITE_IMM,
            imm,
            Some((remote_addr, rkey)),
            None,
            false,
        ),
        _ if q.qp_type == QpType::Uc => return Err(verbs::Error::UnsupportedOpcode),
        WrOpcode::RdmaRead { remote_addr, rkey } => {
            (opcode::RDMA_READ, 0, Some((remote_addr, rkey)), None, true)
        }
        WrOpcode::AtomicCmpAndSwp {
            remote_addr,
            rkey,
            compare,
            swap,
        } => (
            opcode::ATOMIC_CS,
            0,
            Some((remote_addr, rkey)),
            Some((swap, compare)),
            true,
        ),
        WrOpcode::AtomicFetchAndAdd {
            remote_addr,
            rkey,
            add,
        } => (
            opcode::ATOMIC_FA,
            0,
            Some((remote_addr, rkey)),
            Some((add, 0)),
            true,
        ),
    };
    let dest = if ud {
        match &wr.ud {
            Some(d) => Some(d),
            None => return Err(verbs::Error::InvalidArgument("UD send without destination")),
        }
    } else {
        None
    };
    match wr.payload {
        Payload::Inline(data) => {
            if needs_local {
                return Err(verbs::Error::InvalidArgument(
                    "inline payload for READ/atomic",
                ));
            }
            if data.len() > q.sq_geo.max_inline as usize {
                return Err(verbs::Error::InlineTooLarge {
                    len: data.len(),
                    max: q.sq_geo.max_inline as usize,
                });
            }
        }
        Payload::Sges(list) => {
            if list.len() > q.sq.max_gs as usize {
                return Err(verbs::Error::TooManySge {
                    n: list.len(),
                    max: q.sq.max_gs as usize,
                });
            }
            if needs_local && list.is_empty() {
                return Err(verbs::Error::InvalidArgument(
                    "READ/atomic needs a local SGE",
                ));
            }
        }
    }

    let Some(mut w) = c.next() else {
        return Err(verbs::Error::QueueFull);
    };
    // Every segment below stays within the sizes validated above, which sq_geometry
    // guaranteed fit in one slot.
    let mut off = 16;
    if let Some(d) = dest {
        w.datagram(&d.ah.av, d.remote_qpn, d.remote_qkey);
        off = 64;
    }
    if let Some((addr, rkey)) = raddr {
        w.raddr(addr, rkey);
        off = 32;
    }
    if let Some((swap_add, compare)) = atomic {
        w.atomic(swap_add, compare);
        off = 48;
    }
    let mut inl = matches!(wr.opcode, WrOpcode::RdmaRead { .. });
    match wr.payload {
        Payload::Inline(data) => {
            // SAFETY: data.len() ≤ max_inline, so the segments end inside the slot.
            off = unsafe { w.inline(off, data) };
            inl = true;
        }
        Payload::Sges(list) => {
            if list.is_empty() && matches!(wr.opcode, WrOpcode::RdmaWrite { .. }) {
                inl = true;
            }
            // Reverse order (§5.2 data segment).
            for (i, s) in list.iter().enumerate().rev() {
                // SAFETY: list.len() ≤ max_gs segments after the headers fit in the slot.
                unsafe { w.data(off + 16 * i, s.addr, s.lkey, s.length) };
            }
            off += 16 * list.len();
        }
    }
    let ds = ((off + 15) >> 4) as u32;
    if ds > sq::short_ds(ud) {
        c.note_long(&mut q.sq);
    }
    let (flags, fence) = ctrl_bits(wr.flags, q.sig_all);
    let use_bf = alone && sq::blueflame_fits(q.bf.as_ref(), inl, ds);
    let dword1 = if use_bf {
        (q.qpn << 8) | ds | fence
    } else {
        ds | fence
    };
    w.ctrl(dword1.to_be(), flags.to_be(), imm.to_be());
    c.publish(p, &mut q.sq, &mut w, wr.wr_id, op, use_bf);
    // Whole 64-byte chunks covering the WQE, in 64-bit words.
    Ok(use_bf.then_some((w, (((ds as usize) << 4) + 63) >> 6 << 3)))
}

impl<P: Platform> Hca<P> {
    /// Post a list of send work requests with one send doorbell (§5.3), as rdma-core's
    /// `mlx4_post_send` does for a chained list: each WQE is written in order through the
    /// one writer and published (owner dword last, behind a barrier), then one doorbell
    /// tells the device, which walks the SQ from its own counter while the owner bits say
    /// hardware. A list of one is [`Self::post_send_raw`] (BlueFlame when it qualifies, as
    /// rdma-core uses it only for a single WQE). A refused work request ends the list: the
    /// ones before it are posted and rung, and [`verbs::BadWr`] names it. Nothing is
    /// allocated.
    #[inline]
    pub fn post_send_list_raw<'a, I>(&mut self, h: QpHandle, wrs: I) -> Result<usize, BadWr>
    where
        I: IntoIterator,
        I::Item: Borrow<SendWr<'a, Ah>>,
    {
        let mut it = wrs.into_iter();
        let Some(first) = it.next() else {
            return Ok(0);
        };
        let Some(second) = it.next() else {
            return match self.post_send_raw(h, first.borrow()) {
                Ok(()) => Ok(1),
                Err(error) => Err(BadWr { index: 0, error }),
            };
        };
        let q = match self.qps.get_mut(h.slot as usize) {
            Some(Some(q)) if q.qpn == h.qpn => q,
            _ => {
                return Err(BadWr {
                    index: 0,
                    error: verbs::Error::InvalidHandle,
                })
            }
        };
        if q.state != QpState::Rts {
            let error = verbs::Error::WrongState { state: q.state };
            return Err(BadWr { index: 0, error });
        }
        let mut c = q.sq_cursor(q.sq.max_post);
        let r = write_list(&self.p, q, &mut c, first.borrow(), second.borrow(), it);
        let n = c.posted() as usize;
        c.ring_doorbell(&self.p, &mut q.sq, q.db_offset, q.doorbell_qpn);
        match r {
            Ok(()) => Ok(n),
            Err(error) => Err(BadWr { index: n, error }),
        }
    }
}

/// Write and publish the WQEs of a list of at least two work requests (`first`, `second`,
/// then `rest`) at the cursor, without telling the device; stops at the first refused one.
#[inline(always)]
fn write_list<'a, P: Platform, I>(
    p: &P,
    q: &mut Qp,
    c: &mut SqCursor,
    first: &SendWr<'_, Ah>,
    second: &SendWr<'_, Ah>,
    rest: I,
) -> Result<(), verbs::Error>
where
    I: Iterator,
    I::Item: Borrow<SendWr<'a, Ah>>,
{
    // `BE(CQ_UPDATE)` when every work request is signaled, kept in a local: the WQE stores
    // go through raw pointers, after which the compiler would reload it from the QP.
    let sig_all_be = q.sig_all.to_be();
    // The QP type decided once per list: each loop has only its own WQE shapes. One gather
    // entry fits (sq_geometry grants at least one; checked all the same).
    if q.sq.max_gs == 0 {
        write_wqes::<P, I, false, false>(p, q, c, sig_all_be, first, second, rest)
    } else if q.qp_type == QpType::Ud {
        write_wqes::<P, I, true, true>(p, q, c, sig_all_be, first, second, rest)
    } else {
        write_wqes::<P, I, false, true>(p, q, c, sig_all_be, first, second, rest)
    }
}

/// [`write_list`]'s loop for a UD QP (`UD`) or an RC/UC one; without `FAST` every work
/// request takes the generic writer.
#[inline(always)]
fn write_wqes<'a, P: Platform, I, const UD: bool, const FAST: bool>(
    p: &P,
    q: &mut Qp,
    c: &mut SqCursor,
    sig_all_be: u32,
    first: &SendWr<'_, Ah>,
    second: &SendWr<'_, Ah>,
    rest: I,
) -> Result<(), verbs::Error>
where
    I: Iterator,
    I::Item: Borrow<SendWr<'a, Ah>>,
{
    write_list_wqe::<P, UD, FAST>(p, q, c, sig_all_be, first)?;
    write_list_wqe::<P, UD, FAST>(p, q, c, sig_all_be, second)?;
    for wr in rest {
        write_list_wqe::<P, UD, FAST>(p, q, c, sig_all_be, wr.borrow())?;
    }
    Ok(())
}

/// One WQE of a list, published, not told to the device. The bandwidth tests' work
/// requests — a SEND (any QP type) or an RDMA WRITE (RC/UC) of one gather entry — are
/// written directly (ctrl, the datagram or remote address segment, one data segment);
/// everything else, and every error, goes through [`write_send_wqe`].
#[inline(always)]
fn write_list_wqe<P: Platform, const UD: bool, const FAST: bool>(
    p: &P,
    q: &mut Qp,
    c: &mut SqCursor,
    sig_all_be: u32,
    wr: &SendWr<'_, Ah>,
) -> Result<(), verbs::Error> {
    if let (Payload::Sges([sge]), true) = (wr.payload, FAST) {
        let written = match wr.opcode {
            WrOpcode::Send if !UD => {
                write_one_sge(p, q, c, sig_all_be, wr, sge, |_| (opcode::SEND, 16))
            }
            WrOpcode::Send => match &wr.ud {
                Some(d) => write_one_sge(p, q, c, sig_all_be, wr, sge, |w| {
                    w.datagram(&d.ah.av, d.remote_qpn, d.remote_qkey);
                    (opcode::SEND, 64)
                }),
                None => false,
            },
            WrOpcode::RdmaWrite { remote_addr, rkey } if !UD => {
                write_one_sge(p, q, c, sig_all_be, wr, sge, |w| {
                    w.raddr(remote_addr, rkey);
                    (opcode::RDMA_WRITE, 32)
                })
            }
            _ => false,
        };
        if written {
            return Ok(());
        }
    }
    write_list_generic(p, q, c, *wr)
}

/// [`write_list_wqe`]'s other work requests, out of line; the request comes by value, so
/// that a caller making requests on the fly need not keep each in memory for this rare case.
#[inline(never)]
fn write_list_generic<P: Platform>(
    p: &P,
    q: &mut Qp,
    c: &mut SqCursor,
    wr: SendWr<'_, Ah>,
) -> Result<(), verbs::Error> {
    write_send_wqe(p, q, c, &wr, false).map(|_| ())
}

/// A WQE of ctrl, the transport segment `seg` writes (it returns the opcode and where the
/// data segment goes: 16, 32 or 64), and one data segment of `sge` (§5.2), at the cursor's
/// head, published (max_gs ≥ 1, so a data segment after the largest transport segment fits
/// in a slot). False, with nothing written, when the queue has no room.
#[inline(always)]
fn write_one_sge(
    p: &impl Platform,
    q: &mut Qp,
    c: &mut SqCursor,
    sig_all_be: u32,
    wr: &SendWr<'_, Ah>,
    sge: &verbs::Sge,
    seg: impl FnOnce(&mut SendWqe) -> (u32, usize),
) -> bool {
    let Some(mut w) = c.next() else {
        return false;
    };
    let (op, off) = seg(&mut w);
    // SAFETY: [off, off + 16) lies inside the slot (above); off is 16, 32 or 64.
    unsafe { w.data(off, sge.addr, sge.lkey, sge.length) };
    let ds = ((off + 16) >> 4) as u32;
    let (flags_be, fence_be) = CTRL_BITS_BE[(wr.flags.bits() & 7) as usize];
    // Dwords 2–3 as one store: the flags and a zero immediate.
    let mut d23 = [0u8; 8];
    d23[..4].copy_from_slice(&(flags_be | sig_all_be).to_ne_bytes());
    w.ctrl_prepared(fence_be | ds.to_be(), u64::from_ne_bytes(d23));
    c.publish(p, &mut q.sq, &mut w, wr.wr_id, op, false);
    true
}

impl<P: Platform> Hca<P> {
    /// Post one receive work request (§5.6).
    #[inline]
    pub fn post_recv_raw(&mut self, h: QpHandle, wr: &RecvWr<'_>) -> Result<(), verbs::Error> {
        let Some(Some(q)) = self.qps.get_mut(h.slot as usize) else {
            return Err(verbs::Error::InvalidHandle);
        };
        if q.qpn != h.qpn {
            return Err(verbs::Error::InvalidHandle);
        }
        if q.srq.is_some() {
            return Err(verbs::Error::InvalidArgument(
                "the QP takes its receives from an SRQ (post_srq_recv)",
            ));
        }
        post_recv_qp(&self.p, q, wr)
    }
}

/// [`Hca::post_recv_raw`] on a QP already looked up (also the data path's, crate::path).
#[inline]
pub(crate) fn post_recv_qp<P: Platform>(
    p: &P,
    q: &mut Qp,
    wr: &RecvWr<'_>,
) -> Result<(), verbs::Error> {
    if q.state == QpState::Reset || q.state == QpState::Err {
        return Err(verbs::Error::WrongState { state: q.state });
    }
    if q.rq.full() {
        return Err(verbs::Error::QueueFull);
    }
    if wr.sg_list.len() > q.rq.max_gs as usize {
        return Err(verbs::Error::TooManySge {
            n: wr.sg_list.len(),
            max: q.rq.max_gs as usize,
        });
    }
    let ind = q.rq.head;
    let stride = 1usize << q.rq.wqe_shift;
    let start = q.rq.slot_offset(ind);
    // SAFETY: the slot lies inside the QP buffer.
    let w: &mut [u8] =
        unsafe { core::slice::from_raw_parts_mut(q.buf.as_ptr().add(start), stride) };
    // The slot as data segments (stride = 16 · max_gs, so exactly max_gs of them).
    let Ok(segs) = <[DataSeg]>::mut_from_bytes(w) else {
        return Err(verbs::Error::InvalidArgument("receive queue slot"));
    };
    for (seg, s) in segs.iter_mut().zip(wr.sg_list) {
        seg.byte_count.set(s.length);
        seg.lkey.set(s.lkey);
        seg.addr.set(s.addr);
    }
    // Fewer SGEs than max_gs: a terminator entry after them (§5.6).
    if let Some(t) = segs.get_mut(wr.sg_list.len()) {
        t.byte_count.set(0);
        t.lkey.set(INVALID_LKEY);
        t.addr.set(0);
    }
    q.rq.set_wrid((ind & q.rq.mask) as usize, wr.wr_id);
    q.rq.head = ind.wrapping_add(1);
    p.wmb();
    // SAFETY: dbrec points at our doorbell record; the RQ counter is its first dword.
    unsafe { core::ptr::write_volatile(q.dbrec as *mut u32, (q.rq.head & 0xFFFF).to_be()) };
    Ok(())
}

/// ctrl srcrb_flags and the dword-1 fence bit for `f`, without branches: SIGNALED (bit 0)
/// becomes C = 3 (bits 3:2), SOLICITED (bit 1) is already the SE bit, FENCE (bit 2) moves to
/// bit 6 of dword 1 (§5.2).
#[inline(always)]
const fn ctrl_bits(f: SendFlags, sig_all: u32) -> (u32, u32) {
    const _: () = {
        assert!(SendFlags::SIGNALED.bits() == 1);
        assert!(SendFlags::SOLICITED.bits() == ctrl::SOLICITED);
        assert!(SendFlags::FENCE.bits() << 4 == ctrl::FENCE);
    };
    let b = f.bits();
    (
        ((b & 1) * ctrl::CQ_UPDATE) | (b & ctrl::SOLICITED) | sig_all,
        (b & 4) << 4,
    )
}

/// [`ctrl_bits`] of every combination of the three send flags, both dwords big-endian
/// (the fast path looks them up instead of computing them).
pub(crate) const CTRL_BITS_BE: [(u32, u32); 8] = {
    let mut t = [(0, 0); 8];
    let mut b = 0;
    while b < 8 {
        let (flags, fence) = ctrl_bits(SendFlags::from_bits_retain(b), 0);
        t[b as usize] = (flags.to_be(), fence.to_be());
        b += 1;
    }
    t
};

/// The latency path (§5.2, §5.5): ctrl (+ the UD datagram) and one inline segment of
/// `data` (1..=fast_inline bytes, checked by the caller), published and rung through
/// BlueFlame. False, with nothing written, when the QP has no BlueFlame register or no
/// room. `UD` fixes the layout at compile time, so the copy has a constant length: ctrl +
/// datagram fill the first 64 bytes and the inline segment the second (128 bytes); RC/UC
/// put the inline segment right after ctrl, inside the first 64 bytes. The request's fields
/// are read where they are needed, not kept in registers across the stores before.
#[inline(always)]
fn fast_send<P: Platform, const UD: bool>(
    p: &P,
    q: &mut Qp,
    data: &[u8],
    wr: &SendWr<'_, Ah>,
    dest: Option<&verbs::UdDest<Ah>>,
) -> bool {
    let mut c = q.sq_cursor(q.sq.max_post);
    let Some(bf) = &mut q.bf else { return false };
    // SAFETY: the latency path's WQE (two chunks UD, one otherwise) fits a slot: the QP has a
    // fast path (fast_inline > 0) only then (`fast_inline_limit`).
    let Some(mut w) = (unsafe { c.next_short::<UD>() }) else {
        return false;
    };
    if let (true, Some(d)) = (UD, dest) {
        w.datagram(&d.ah.av, d.remote_qpn, d.remote_qkey);
    }
    // SAFETY: 1 ≤ len ≤ fast_inline (caller): the segment ends inside its chunk, which
    // fast_inline_limit keeps inside the slot.
    let ds_be = unsafe { w.inline_short::<UD>(data) };
    let (flags_be, fence_be) = CTRL_BITS_BE[(wr.flags.bits() & 7) as usize];
    // BlueFlame dword 1 = qpn << 8 | fence | ds.
    w.ctrl(
        q.doorbell_qpn | fence_be | ds_be,
        flags_be | q.sig_all.to_be(),
        0,
    );
    c.publish(p, &mut q.sq, &mut w, wr.wr_id, opcode::SEND, true);
    // SAFETY: the WQE's whole 64-byte chunks (2 UD, 1 otherwise) lie inside the slot.
    unsafe { c.ring_blueflame(p, &mut q.sq, &w, bf, if UD { 16 } else { 8 }) };
    true
}

/// Largest inline SEND handled by the fast path: the data must fit, with its 4-byte header,
/// in the 64-byte chunk after the headers (UD: ctrl + datagram = 64, so chunk 1; RC/UC:
/// after the 16-byte ctrl), within the QP's max_inline, and the WQE must fit half a
/// BlueFlame register.
pub fn fast_inline_limit(t: QpType, geo: &SqGeometry, bf_half: Option<usize>) -> u32 {
    let Some(half) = bf_half else { return 0 };
    let (hdr, chunk_end) = if t == QpType::Ud { (64, 128) } else { (16, 64) };
    let room = (chunk_end - hdr - 4) as u32;
    let wqe = chunk_end;
    if wqe > half || wqe > (1usize << geo.wqe_shift) {
        return 0;
    }
    room.min(geo.max_inline)
}

impl Qp {
    pub(crate) fn uses_cq(&self, cqn: u32) -> bool {
        self.send_cqn == cqn || self.recv_cqn == cqn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_vector_layout() {
        let ah = Ah::new(
            0x12,
            &AhAttr {
                dlid: 0x21,
                sl: 3,
                src_path_bits: 1,
                static_rate: 0,
                port: 1,
                grh: None,
            },
        );
        assert_eq!(&ah.av[0..4], &[1, 0, 0, 0x12]);
        assert_eq!(ah.av[5], 1);
        assert_eq!(&ah.av[6..8], &[0, 0x21]);
        assert_eq!(&ah.av[12..16], &[0x30, 0, 0, 0]);
    }

    #[test]
    fn ctrl_bits_map_send_flags() {
        assert_eq!(ctrl_bits(SendFlags::empty(), 0), (0, 0));
        assert_eq!(ctrl_bits(SendFlags::SIGNALED, 0), (ctrl::CQ_UPDATE, 0));
        assert_eq!(
            ctrl_bits(SendFlags::empty(), ctrl::CQ_UPDATE),
            (ctrl::CQ_UPDATE, 0)
        );
        assert_eq!(ctrl_bits(SendFlags::SOLICITED, 0), (ctrl::SOLICITED, 0));
        assert_eq!(ctrl_bits(SendFlags::FENCE, 0), (0, ctrl::FENCE));
        assert_eq!(
            ctrl_bits(SendFlags::all(), 0),
            (ctrl::CQ_UPDATE | ctrl::SOLICITED, ctrl::FENCE)
        );
    }

    #[test]
    fn log2_ceil_of_rd_atomic_depths() {
        assert_eq!(log2_ceil(0), 0);
        assert_eq!(log2_ceil(1), 0);
        assert_eq!(log2_ceil(4), 2);
        assert_eq!(log2_ceil(5), 3);
    }
}
