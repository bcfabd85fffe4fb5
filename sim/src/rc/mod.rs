//! Reliable Connected transport (§7.3 and the IB spec it refers to): PSN-sequenced requests,
//! ACK/NAK, RNR NAK with retry, go-back-N retransmission on ACK timeout, RDMA READ and
//! atomics with duplicate handling at the responder.
//!
//! [`requester`] posts requests and handles their acknowledgements, responses and timers;
//! [`responder`] executes incoming requests and answers them.

mod requester;
mod responder;

use std::collections::VecDeque;

use crate::hca::Hca;
use crate::packet::{Packet, PacketOp};
use crate::qp::ServiceType;
use crate::wqe::{send_op, Sge};

/// One RC request waiting for its acknowledgement or response.
#[derive(Clone, Debug)]
pub struct RcPending {
    pub wqe_index: u16,
    pub opcode: u8,
    pub signaled: bool,
    pub first_psn: u32,
    pub last_psn: u32,
    /// Packets as sent (for retransmission).
    pub packets: Vec<Packet>,
    /// READ/ATOMIC: local scatter list for the response.
    pub local: Vec<Sge>,
    /// READ: total length and bytes received so far.
    pub len: u64,
    pub received: u64,
}

/// Per-QP RC state.
#[derive(Clone, Debug, Default)]
pub struct RcState {
    pub pending: VecDeque<RcPending>,
    /// ACK timeout deadline (fabric ns) while requests are outstanding.
    pub deadline: Option<u64>,
    /// RNR back-off: retransmit at this time.
    pub rnr_until: Option<u64>,
    pub retries_used: u32,
    pub rnr_retries_used: u32,
    /// Responder: a PSN-sequence NAK was sent for the current gap.
    pub nak_sent: bool,
    /// Responder: recent atomic results for duplicate replay (psn, original value).
    pub atomic_replay: VecDeque<(u32, u64)>,
    /// Requester: the SQ stopped at a READ/atomic WQE because 2^sra_max READs/atomics were
    /// outstanding; the response that retires one resumes it.
    pub sq_held: bool,
    /// Requester: counters of WQEs that came through BlueFlame while the SQ was held (they
    /// run later from the SQ in memory and are traced as BlueFlame).
    pub held_bf: Vec<u16>,
    /// Requester: the most READ/atomic requests outstanding at once since the QP left RESET.
    pub rd_atomic_peak: u32,
    /// Responder: READ/atomic requests executed whose response has not yet reached the
    /// requester (first PSN, last PSN of the response): the RDMARC entries in use.
    pub rdmarc_busy: VecDeque<(u32, u32)>,
}

impl RcState {
    /// READ/atomic requests waiting for their response.
    pub fn rd_atomic_outstanding(&self) -> u32 {
        self.pending
            .iter()
            .filter(|p| is_rd_atomic(p.opcode))
            .count() as u32
    }
}

/// Whether a send opcode is an RDMA READ or an atomic (the requests sra_max/rra_max count).
pub fn is_rd_atomic(opcode: u8) -> bool {
    matches!(
        opcode,
        send_op::RDMA_READ | send_op::ATOMIC_CS | send_op::ATOMIC_FA
    )
}

/// Signed distance a - b of 24-bit PSNs.
pub fn psn_diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

impl Hca {
    /// A packet addressed from this RC QP to its remote peer, and whether its port is active.
    pub(super) fn rc_base_packet(&self, qpn: u32) -> Option<(Packet, bool)> {
        let q = self.qps.get(&qpn)?;
        let p = self.ports.get(usize::from(q.port()) - 1)?;
        let pkey = p
            .pkeys
            .get(usize::from(q.pkey_index()))
            .copied()
            .unwrap_or(0);
        Some((
            Packet {
                src_hca: self.index,
                src_port: q.port(),
                slid: p.lid | u16::from(q.src_path_bits()),
                dlid: q.rlid(),
                sl: q.sl(),
                dest_qpn: q.remote_qpn(),
                src_qpn: qpn,
                transport: ServiceType::Rc,
                op: PacketOp::SendOnly,
                psn: 0,
                pkey,
                qkey: 0,
                imm: None,
                reth: None,
                solicited: false,
                grh: false,
                aeth: None,
                atomic: None,
                atomic_orig: None,
                payload: Vec::new(),
            },
            p.active(),
        ))
    }
}
