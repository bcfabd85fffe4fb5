//! Queue pairs (§4.4): the context image and the fields that matter, the state machine, and
//! the rules for which context fields each transition takes (optpar).

use crate::be::{BeRead, BeWrite, Field};

/// QP context size inside the QP mailbox (mailbox + 8, §4.4).
pub const QPC_SIZE: usize = 248;

/// The modify-QP mailbox (§4.4): the optional-parameter mask, then the context.
pub mod mailbox {
    use crate::be::Field;

    pub const OPTPAR: Field = Field::whole(0x00, 4);
    pub const CONTEXT: usize = 0x08;
}

/// QP states (QPC flags bits 31:28, §4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    Reset = 0,
    Init = 1,
    Rtr = 2,
    Rts = 3,
    Sqe = 4,
    Sqd = 5,
    Err = 6,
}

/// Service types (QPC flags bits 23:16, §4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceType {
    Rc = 0,
    Uc = 1,
    Ud = 3,
    Mlx = 7,
}

impl ServiceType {
    pub fn from_code(c: u8) -> Option<ServiceType> {
        Some(match c {
            0 => ServiceType::Rc,
            1 => ServiceType::Uc,
            3 => ServiceType::Ud,
            7 => ServiceType::Mlx,
            _ => return None,
        })
    }
}

/// QPC field offsets (relative to the context, §4.4).
pub mod off {
    pub const FLAGS: usize = 0x00;
    pub const PD: usize = 0x04;
    pub const MTU_MSGMAX: usize = 0x08;
    pub const RQ_SIZE_STRIDE: usize = 0x09;
    pub const SQ_SIZE_STRIDE: usize = 0x0a;
    pub const RLKEY: usize = 0x0b;
    pub const USR_PAGE: usize = 0x0c;
    pub const LOCAL_QPN: usize = 0x10;
    pub const REMOTE_QPN: usize = 0x14;
    pub const PRI_PATH: usize = 0x18;
    pub const ALT_PATH: usize = 0x44;
    pub const PATH_SIZE: usize = 44;
    pub const PARAMS1: usize = 0x70;
    pub const NEXT_SEND_PSN: usize = 0x78;
    pub const CQN_SEND: usize = 0x7c;
    pub const PARAMS2: usize = 0x90;
    pub const RNR_NEXTRECVPSN: usize = 0x94;
    pub const CQN_RECV: usize = 0x9c;
    pub const DB_REC_ADDR: usize = 0xa0;
    pub const QKEY: usize = 0xa8;
    pub const SRQN: usize = 0xac;
    pub const RQ_WQE_COUNTER: usize = 0xb4;
    pub const SQ_WQE_COUNTER: usize = 0xb6;
    pub const LOG_PAGE_SIZE: usize = 0xc8;
    pub const MTT_BASE_HI: usize = 0xcb;
    /// Within a path (§4.4 mlx4_qp_path).
    pub const PATH_PKEY_INDEX: usize = 0x03;
    pub const PATH_GRH_MYLMC: usize = 0x05;
    pub const PATH_RLID: usize = 0x06;
    pub const PATH_ACKTO: usize = 0x08;
    pub const PATH_COUNTER: usize = 0x04;
    pub const PATH_SCHED_QUEUE: usize = 0x20;
}

/// QPC fields (§4.4): the model's own definitions, written from docs/hardware.md, at the
/// offsets of [`off`] (relative to the context; the modify-QP mailbox carries it at +8). The
/// driver keeps independent ones (`mlx4::hw::QpContext`, `hw::qpc`); `drivers/mlx4/src/
/// layouts.rs` compares the two.
pub mod qpc {
    use super::off;
    use crate::be::Field;

    /// flags: next state (the state QUERY_QP reports), service type, path-migration state.
    pub const STATE: Field = Field::bits(off::FLAGS, 4, 28, 4);
    pub const ST: Field = Field::bits(off::FLAGS, 4, 16, 8);
    pub const PM_STATE: Field = Field::bits(off::FLAGS, 4, 11, 2);
    pub const PD: Field = Field::bits(off::PD, 4, 0, 24);
    /// mtu_msgmax: path MTU (IB MTU code) and log2 of the largest message.
    pub const MTU: Field = Field::bits(off::MTU_MSGMAX, 1, 5, 3);
    pub const LOG_MSG_MAX: Field = Field::bits(off::MTU_MSGMAX, 1, 0, 5);
    /// rq/sq_size_stride: log2 of the WQE count, log2 of the stride − 4.
    pub const LOG_RQ_SIZE: Field = Field::bits(off::RQ_SIZE_STRIDE, 1, 3, 4);
    pub const LOG_RQ_STRIDE: Field = Field::bits(off::RQ_SIZE_STRIDE, 1, 0, 3);
    pub const LOG_SQ_SIZE: Field = Field::bits(off::SQ_SIZE_STRIDE, 1, 3, 4);
    pub const LOG_SQ_STRIDE: Field = Field::bits(off::SQ_SIZE_STRIDE, 1, 0, 3);
    /// rlkey_roce_mode bit 4: the QP may use the reserved L_Key.
    pub const RLKEY: Field = Field::bit(off::RLKEY, 1, 4);
    pub const USR_PAGE: Field = Field::bits(off::USR_PAGE, 4, 0, 24);
    pub const LOCAL_QPN: Field = Field::bits(off::LOCAL_QPN, 4, 0, 24);
    pub const REMOTE_QPN: Field = Field::bits(off::REMOTE_QPN, 4, 0, 24);
    /// params1: ACK request frequency, SRA max (log2 of the requester's RDMA-read/atomic
    /// depth), retry count, RNR retry, fast-registration enable.
    pub const ACK_REQ_FREQ: Field = Field::bits(off::PARAMS1, 4, 28, 4);
    pub const SRA_MAX: Field = Field::bits(off::PARAMS1, 4, 21, 3);
    pub const RETRY_COUNT: Field = Field::bits(off::PARAMS1, 4, 16, 3);
    pub const RNR_RETRY: Field = Field::bits(off::PARAMS1, 4, 13, 3);
    pub const FRE: Field = Field::bit(off::PARAMS1, 4, 11);
    pub const NEXT_SEND_PSN: Field = Field::bits(off::NEXT_SEND_PSN, 4, 0, 24);
    pub const CQN_SEND: Field = Field::bits(off::CQN_SEND, 4, 0, 24);
    /// params2: RRA max (log2 of the responder's depth), remote read/write/atomic enable,
    /// RIC (receives come from an SRQ).
    pub const RRA_MAX: Field = Field::bits(off::PARAMS2, 4, 21, 3);
    pub const RRE: Field = Field::bit(off::PARAMS2, 4, 15);
    pub const RWE: Field = Field::bit(off::PARAMS2, 4, 14);
    pub const RAE: Field = Field::bit(off::PARAMS2, 4, 13);
    pub const RIC: Field = Field::bit(off::PARAMS2, 4, 4);
    /// rnr_nextrecvpsn: the minimum RNR NAK timer code above the next expected PSN.
    pub const MIN_RNR_TIMER: Field = Field::bits(off::RNR_NEXTRECVPSN, 4, 24, 5);
    pub const NEXT_RCV_PSN: Field = Field::bits(off::RNR_NEXTRECVPSN, 4, 0, 24);
    pub const CQN_RECV: Field = Field::bits(off::CQN_RECV, 4, 0, 24);
    pub const DB_REC_ADDR: Field = Field::whole(off::DB_REC_ADDR, 8);
    pub const QKEY: Field = Field::whole(off::QKEY, 4);
    /// srqn: bit 24 says the QP takes its receives from the SRQ in bits 23:0 (§4.7).
    pub const SRQ_EN: Field = Field::bit(off::SRQN, 4, 24);
    pub const SRQN: Field = Field::bits(off::SRQN, 4, 0, 24);
    pub const RQ_WQE_COUNTER: Field = Field::whole(off::RQ_WQE_COUNTER, 2);
    pub const SQ_WQE_COUNTER: Field = Field::whole(off::SQ_WQE_COUNTER, 2);
    /// log2 of the WQ buffer's page size − 12.
    pub const LOG_PAGE_SIZE: Field = Field::bits(off::LOG_PAGE_SIZE, 1, 0, 6);
    pub const MTT_BASE_HI: Field = Field::whole(off::MTT_BASE_HI, 1);
    pub const MTT_BASE_LO: Field = Field::whole(off::MTT_BASE_HI + 1, 4);

    /// Fields of an address path, relative to the path (`.at(off::PRI_PATH)` for the
    /// primary one).
    pub mod path {
        use super::off;
        use crate::be::Field;

        pub const PKEY_INDEX: Field = Field::bits(off::PATH_PKEY_INDEX, 1, 0, 7);
        pub const COUNTER_INDEX: Field = Field::whole(off::PATH_COUNTER, 1);
        /// grh_mylmc: a GRH follows (bit 7); source path bits (6:0).
        pub const GRH: Field = Field::bit(off::PATH_GRH_MYLMC, 1, 7);
        pub const SRC_PATH_BITS: Field = Field::bits(off::PATH_GRH_MYLMC, 1, 0, 7);
        pub const RLID: Field = Field::whole(off::PATH_RLID, 2);
        /// ackto: local ACK timeout code in bits 7:3.
        pub const ACKTO: Field = Field::bits(off::PATH_ACKTO, 1, 3, 5);
        pub const SCHED_QUEUE: Field = Field::whole(off::PATH_SCHED_QUEUE, 1);
        /// sched_queue: port − 1 in bit 6, SL in bits 5:2.
        pub const SCHED_PORT: Field = Field::bit(off::PATH_SCHED_QUEUE, 1, 6);
        pub const SCHED_SL: Field = Field::bits(off::PATH_SCHED_QUEUE, 1, 2, 4);
    }

    /// The primary path's fields, relative to the context.
    pub mod pri {
        use super::{off, path};
        use crate::be::Field;

        pub const PKEY_INDEX: Field = path::PKEY_INDEX.at(off::PRI_PATH);
        pub const COUNTER_INDEX: Field = path::COUNTER_INDEX.at(off::PRI_PATH);
        pub const GRH: Field = path::GRH.at(off::PRI_PATH);
        pub const SRC_PATH_BITS: Field = path::SRC_PATH_BITS.at(off::PRI_PATH);
        pub const RLID: Field = path::RLID.at(off::PRI_PATH);
        pub const ACKTO: Field = path::ACKTO.at(off::PRI_PATH);
        pub const SCHED_QUEUE: Field = path::SCHED_QUEUE.at(off::PRI_PATH);
        pub const SCHED_PORT: Field = path::SCHED_PORT.at(off::PRI_PATH);
        pub const SCHED_SL: Field = path::SCHED_SL.at(off::PRI_PATH);
    }
}

/// The remote operations a responder QP allows (QPC params2, §4.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteAccess {
    pub read: bool,
    pub write: bool,
    pub atomic: bool,
}

/// One QP known to the device (entries persist in RESET after 2RST).
#[derive(Clone, Debug)]
pub struct Qp {
    pub qpn: u32,
    pub state: QpState,
    pub ctx: Vec<u8>,
    pub send_cqn: u32,
    pub recv_cqn: u32,
    /// Device-maintained WQE counters (QPC 0xB4/0xB6).
    pub sq_counter: u16,
    pub rq_counter: u16,
    /// Next PSN to send / expected PSN (24 bits).
    pub sq_psn: u32,
    pub rq_psn: u32,
    /// A send doorbell arrived while the QP could not yet execute (INIT/RTR).
    pub doorbell_pending: bool,
    /// An incomplete BlueFlame burst made the device fetch WQEs of this QP before their
    /// doorbell: the next doorbell may find nothing new (`uar::bf_incomplete`).
    pub bf_ran_ahead: bool,
    /// UC/RC receive: a multi-packet message is being assembled into this RQ WQE.
    pub recv_in_progress: Option<crate::wqe::RecvProgress>,
    /// UC: drop packets until the next FIRST/ONLY (PSN gap, §7.2).
    pub uc_resync: bool,
    /// RC requester and responder state (rc.rs).
    pub rc: crate::rc::RcState,
}

impl Qp {
    pub fn new(qpn: u32) -> Qp {
        Qp {
            qpn,
            state: QpState::Reset,
            ctx: vec![0; QPC_SIZE],
            send_cqn: 0,
            recv_cqn: 0,
            sq_counter: 0,
            rq_counter: 0,
            sq_psn: 0,
            rq_psn: 0,
            doorbell_pending: false,
            bf_ran_ahead: false,
            recv_in_progress: None,
            uc_resync: false,
            rc: crate::rc::RcState::default(),
        }
    }
    fn get(&self, f: Field) -> u32 {
        f.get_u32(&self.ctx)
    }
    pub fn service_type(&self) -> Option<ServiceType> {
        ServiceType::from_code(self.get(qpc::ST) as u8)
    }
    pub fn pd(&self) -> u32 {
        self.get(qpc::PD)
    }
    /// Path MTU in bytes (1 = 256 .. 5 = 4096).
    pub fn mtu_bytes(&self) -> u32 {
        mtu_enum_bytes(self.get(qpc::MTU) as u8)
    }
    pub fn log_msg_max(&self) -> u32 {
        self.get(qpc::LOG_MSG_MAX)
    }
    pub fn rq_log_count(&self) -> u32 {
        self.get(qpc::LOG_RQ_SIZE)
    }
    pub fn rq_log_stride(&self) -> u32 {
        self.get(qpc::LOG_RQ_STRIDE) + 4
    }
    pub fn sq_log_count(&self) -> u32 {
        self.get(qpc::LOG_SQ_SIZE)
    }
    pub fn sq_log_stride(&self) -> u32 {
        self.get(qpc::LOG_SQ_STRIDE) + 4
    }
    pub fn rlkey(&self) -> bool {
        qpc::RLKEY.get_bool(&self.ctx)
    }
    pub fn usr_page(&self) -> u32 {
        self.get(qpc::USR_PAGE)
    }
    pub fn remote_qpn(&self) -> u32 {
        self.get(qpc::REMOTE_QPN)
    }
    pub fn pkey_index(&self) -> u8 {
        self.get(qpc::pri::PKEY_INDEX) as u8
    }
    pub fn rlid(&self) -> u16 {
        self.get(qpc::pri::RLID) as u16
    }
    pub fn src_path_bits(&self) -> u8 {
        self.get(qpc::pri::SRC_PATH_BITS) as u8
    }
    pub fn sched_queue(&self) -> u8 {
        self.get(qpc::pri::SCHED_QUEUE) as u8
    }
    /// Port from the sched_queue (§4.4).
    pub fn port(&self) -> u8 {
        self.get(qpc::pri::SCHED_PORT) as u8 + 1
    }
    /// SL from the sched_queue (§4.4).
    pub fn sl(&self) -> u8 {
        self.get(qpc::pri::SCHED_SL) as u8
    }
    /// The remote access the QP grants (params2 RRE, RWE, RAE).
    pub fn remote_access(&self) -> RemoteAccess {
        RemoteAccess {
            read: qpc::RRE.get_bool(&self.ctx),
            write: qpc::RWE.get_bool(&self.ctx),
            atomic: qpc::RAE.get_bool(&self.ctx),
        }
    }
    /// The SRQ this QP takes receives from (§4.7).
    pub fn srqn(&self) -> Option<u32> {
        qpc::SRQ_EN.get_bool(&self.ctx).then(|| self.get(qpc::SRQN))
    }
    pub fn db_rec(&self) -> u64 {
        qpc::DB_REC_ADDR.get(&self.ctx)
    }
    pub fn qkey(&self) -> u32 {
        self.get(qpc::QKEY)
    }
    pub fn page_shift(&self) -> u32 {
        self.get(qpc::LOG_PAGE_SIZE) + 12
    }
    pub fn mtt_base(&self) -> u64 {
        (u64::from(self.get(qpc::MTT_BASE_HI)) << 32) | u64::from(self.get(qpc::MTT_BASE_LO))
    }
    pub fn retry_count(&self) -> u32 {
        self.get(qpc::RETRY_COUNT)
    }
    pub fn rnr_retry(&self) -> u32 {
        self.get(qpc::RNR_RETRY)
    }
    /// Local ACK timeout code of the primary path (§7.3).
    pub fn ack_timeout(&self) -> u8 {
        self.get(qpc::pri::ACKTO) as u8
    }
    /// Minimum RNR NAK timer code (§4.4).
    pub fn min_rnr_timer(&self) -> u8 {
        self.get(qpc::MIN_RNR_TIMER) as u8
    }
    /// Byte offsets of the SQ and RQ inside the WQ buffer: the queue with the larger stride
    /// comes first, the SQ on a tie (§4.4, inferred).
    /// A QP attached to an SRQ has no RQ: its SQ starts the buffer, whatever the RQ fields
    /// hold (Linux writes `wqe_shift − 4` of an unset stride there, §4.7).
    pub fn sq_rq_offsets(&self) -> (u64, u64) {
        let sq_bytes = 1u64 << (self.sq_log_count() + self.sq_log_stride());
        if self.srqn().is_some() {
            return (0, sq_bytes);
        }
        let rq_bytes = 1u64 << (self.rq_log_count() + self.rq_log_stride());
        if self.rq_log_stride() > self.sq_log_stride() {
            (rq_bytes, 0)
        } else {
            (0, sq_bytes)
        }
    }
    /// log2 of the RDMA READ/atomic requests the QP may have outstanding as requester
    /// (params1 SRA max, §4.4; Linux writes ceil(log2(max_rd_atomic))).
    pub fn sra_max(&self) -> u32 {
        self.get(qpc::SRA_MAX)
    }
    /// log2 of the RDMA READ/atomic requests the QP accepts outstanding as responder
    /// (params2 RRA max, §4.4; Linux writes ceil(log2(max_dest_rd_atomic))).
    pub fn rra_max(&self) -> u32 {
        self.get(qpc::RRA_MAX)
    }
    /// The context as QUERY_QP reports it: state and device-maintained fields filled in.
    pub fn context_now(&self) -> Vec<u8> {
        let mut c = self.ctx.clone();
        qpc::STATE.set(&mut c, self.state as u64);
        c.put32(off::LOCAL_QPN, self.qpn);
        qpc::RQ_WQE_COUNTER.set(&mut c, self.rq_counter.into());
        qpc::SQ_WQE_COUNTER.set(&mut c, self.sq_counter.into());
        c.put32(off::NEXT_SEND_PSN, self.sq_psn & 0xff_ffff);
        qpc::NEXT_RCV_PSN.set(&mut c, self.rq_psn.into());
        c
    }
}

/// IB MTU enum -> bytes (0 for invalid).
pub fn mtu_enum_bytes(e: u8) -> u32 {
    match e {
        1..=5 => 128 << e,
        _ => 0,
    }
}

/// optpar bits (§4.4) the model understands, with the context bytes each controls.
pub mod optpar {
    pub const ALT_PATH: u32 = 1 << 0;
    pub const RRE: u32 = 1 << 1;
    pub const RAE: u32 = 1 << 2;
    pub const RWE: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const QKEY: u32 = 1 << 5;
    pub const RNR_TIMEOUT: u32 = 1 << 6;
    pub const PRIMARY_PATH: u32 = 1 << 7;
    pub const SRA_MAX: u32 = 1 << 8;
    pub const RRA_MAX: u32 = 1 << 9;
    pub const PM_STATE: u32 = 1 << 10;
    pub const RETRY_COUNT: u32 = 1 << 12;
    pub const RNR_RETRY: u32 = 1 << 13;
    pub const ACK_TIMEOUT: u32 = 1 << 14;
    pub const SCHED_QUEUE: u32 = 1 << 16;
    pub const COUNTER_INDEX: u32 = 1 << 20;
    pub const VLAN_STRIP: u32 = 1 << 21;
    pub const KNOWN: u32 = ALT_PATH
        | RRE
        | RAE
        | RWE
        | PKEY_INDEX
        | QKEY
        | RNR_TIMEOUT
        | PRIMARY_PATH
        | SRA_MAX
        | RRA_MAX
        | PM_STATE
        | RETRY_COUNT
        | RNR_RETRY
        | ACK_TIMEOUT
        | SCHED_QUEUE
        | COUNTER_INDEX
        | VLAN_STRIP;
}

fn copy_bytes(dst: &mut [u8], src: &[u8], at: usize, len: usize) {
    if let (Some(d), Some(s)) = (dst.get_mut(at..at + len), src.get(at..at + len)) {
        d.copy_from_slice(s);
    }
}

/// Apply the optional parameters selected by `optpar` from `new` onto `cur` (§4.4 optpar).
pub fn apply_optpar(cur: &mut [u8], new: &[u8], optpar: u32) {
    use off::*;
    if optpar & optpar::ALT_PATH != 0 {
        copy_bytes(cur, new, ALT_PATH, PATH_SIZE);
    }
    if optpar & optpar::PRIMARY_PATH != 0 {
        // The address fields; the P_Key index, counter index and sched queue have their
        // own bits (Linux's `__mlx4_ib_modify_qp` sets SCHED_QUEUE beside PRIMARY_ADDR_PATH).
        let keep = [PATH_PKEY_INDEX, PATH_COUNTER, PATH_SCHED_QUEUE].map(|o| cur.be8(PRI_PATH + o));
        copy_bytes(cur, new, PRI_PATH, PATH_SIZE);
        for (o, v) in [PATH_PKEY_INDEX, PATH_COUNTER, PATH_SCHED_QUEUE]
            .iter()
            .zip(keep)
        {
            cur.put8(PRI_PATH + o, v);
        }
    }
    for (bit, field) in [
        (optpar::RRE, qpc::RRE),
        (optpar::RAE, qpc::RAE),
        (optpar::RWE, qpc::RWE),
        (optpar::PKEY_INDEX, qpc::pri::PKEY_INDEX),
        (optpar::QKEY, qpc::QKEY),
        (optpar::RNR_TIMEOUT, qpc::MIN_RNR_TIMER),
        (optpar::SRA_MAX, qpc::SRA_MAX),
        (optpar::RRA_MAX, qpc::RRA_MAX),
        (optpar::PM_STATE, qpc::PM_STATE),
        (optpar::RETRY_COUNT, qpc::RETRY_COUNT),
        (optpar::RNR_RETRY, qpc::RNR_RETRY),
        (optpar::ACK_TIMEOUT, qpc::pri::ACKTO),
        (optpar::SCHED_QUEUE, qpc::pri::SCHED_QUEUE),
        (optpar::COUNTER_INDEX, qpc::pri::COUNTER_INDEX),
    ] {
        if optpar & bit != 0 {
            field.copy(cur, new);
        }
    }
}

/// INIT->RTR takes the MTU/max message, remote QPN and receive PSN; a UD or MLX QP also takes
/// its sched queue (port and SL), which Linux's `__mlx4_ib_modify_qp` writes for them without
/// an optpar bit. A connected QP's address path (PRIMARY_ADDR_PATH), sched queue
/// (SCHED_QUEUE) and everything else optional come only with their optpar bits, as Linux sets
/// them (decision in docs/model.md).
pub fn take_init2rtr(cur: &mut [u8], new: &[u8], connected: bool) {
    if !connected {
        qpc::pri::SCHED_QUEUE.copy(cur, new);
    }
    copy_bytes(cur, new, off::MTU_MSGMAX, 1);
    copy_bytes(cur, new, off::REMOTE_QPN, 4);
    qpc::NEXT_RCV_PSN.copy(cur, new);
}

/// RTR->RTS takes the next send PSN (§4.4).
pub fn take_rtr2rts(cur: &mut [u8], new: &[u8]) {
    qpc::NEXT_SEND_PSN.copy(cur, new);
    // ACK request frequency and the fast-register bit travel with params1 every time.
    qpc::ACK_REQ_FREQ.copy(cur, new);
    qpc::FRE.copy(cur, new);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::be::{BeRead, BeWrite};

    /// A QP with an SRQ: Linux's rq_size_stride of an unset stride (0 − 4 as a byte) must not
    /// move the SQ away from the start of the buffer (§4.7).
    #[test]
    fn sq_of_a_qp_with_an_srq_starts_the_buffer() {
        use off::*;
        let mut q = Qp::new(0x48);
        q.ctx.put8(SQ_SIZE_STRIDE, (6 << 3) | 2);
        q.ctx.put8(RQ_SIZE_STRIDE, 0u8.wrapping_sub(4));
        assert_eq!(
            q.sq_rq_offsets().0,
            1 << 23,
            "without the SRQ bit the RQ would lead"
        );
        q.ctx.put32(SRQN, (1 << 24) | 0x41);
        assert_eq!(q.srqn(), Some(0x41));
        assert_eq!(q.sq_rq_offsets(), (0, 1 << 12));
    }

    /// Linux's `__mlx4_ib_modify_qp` fills each transition's mailbox with that transition's
    /// fields only: what RST2INIT set (doorbell record, Q_Key, reserved L_Key, MTT, access
    /// bits) and what INIT2RTR set (path, MTU, RNR timer) must survive later mailboxes that
    /// leave them zero.
    #[test]
    fn later_transitions_keep_what_earlier_ones_set() {
        use off::*;
        let mut cur = vec![0u8; QPC_SIZE];
        cur.put64(DB_REC_ADDR, 0x1234_5000);
        cur.put32(QKEY, 0x1111_1111);
        cur.put8(RLKEY, 1 << 4);
        cur.put8(LOG_PAGE_SIZE, 3);
        let rwe = qpc::RWE.place(1) as u32;
        cur.put32(PARAMS2, rwe);
        // INIT2RTR of an RC QP: path with PRIMARY_PATH | SCHED_QUEUE | RNR_TIMEOUT, MTU.
        let mut rtr = vec![0u8; QPC_SIZE];
        rtr.put8(MTU_MSGMAX, (4 << 5) | 30);
        rtr.put16(PRI_PATH + PATH_RLID, 2);
        rtr.put8(PRI_PATH + PATH_SCHED_QUEUE, 0x83);
        rtr.put32(RNR_NEXTRECVPSN, (12 << 24) | 0x77);
        rtr.put32(PARAMS2, rwe);
        take_init2rtr(&mut cur, &rtr, true);
        apply_optpar(
            &mut cur,
            &rtr,
            optpar::PRIMARY_PATH | optpar::SCHED_QUEUE | optpar::RNR_TIMEOUT | optpar::RWE,
        );
        // RTR2RTS: only the send PSN, params1 and the RC optpar fields; the rest zero.
        let mut rts = vec![0u8; QPC_SIZE];
        rts.put32(NEXT_SEND_PSN, 0x55);
        rts.put32(PARAMS1, 0x8000_0800);
        take_rtr2rts(&mut cur, &rts);
        apply_optpar(&mut cur, &rts, optpar::ACK_TIMEOUT | optpar::RETRY_COUNT);
        assert_eq!(cur.be64(DB_REC_ADDR), 0x1234_5000);
        assert_eq!(cur.be32(QKEY), 0x1111_1111);
        assert_eq!(cur.be8(RLKEY), 1 << 4);
        assert_eq!(cur.be8(LOG_PAGE_SIZE), 3);
        assert_eq!(cur.be32(PARAMS2) & rwe, rwe);
        assert_eq!(cur.be8(MTU_MSGMAX), (4 << 5) | 30);
        assert_eq!(cur.be16(PRI_PATH + PATH_RLID), 2);
        assert_eq!(cur.be8(PRI_PATH + PATH_SCHED_QUEUE), 0x83);
        assert_eq!(cur.be32(RNR_NEXTRECVPSN), (12 << 24) | 0x77);
        assert_eq!(cur.be32(NEXT_SEND_PSN), 0x55);
    }
}
