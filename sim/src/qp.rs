//! Queue pairs (§4.4): the context image and the fields that matter, the state machine, and
//! the rules for which context fields each transition takes (optpar).

use crate::be::{BeRead, BeWrite};

/// QP context size inside the QP mailbox (mailbox + 8, §4.4).
pub const QPC_SIZE: usize = 248;

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

/// params2 bits (§4.4).
pub const PARAMS2_RRE: u32 = 1 << 15;
pub const PARAMS2_RWE: u32 = 1 << 14;
pub const PARAMS2_RAE: u32 = 1 << 13;

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
    pub fn service_type(&self) -> Option<ServiceType> {
        ServiceType::from_code(((self.ctx.be32(off::FLAGS) >> 16) & 0xff) as u8)
    }
    pub fn pd(&self) -> u32 {
        self.ctx.be32(off::PD) & 0xff_ffff
    }
    /// Path MTU in bytes from mtu_msgmax bits 7:5 (1 = 256 .. 5 = 4096).
    pub fn mtu_bytes(&self) -> u32 {
        mtu_enum_bytes(self.ctx.be8(off::MTU_MSGMAX) >> 5)
    }
    pub fn log_msg_max(&self) -> u32 {
        u32::from(self.ctx.be8(off::MTU_MSGMAX) & 0x1f)
    }
    pub fn rq_log_count(&self) -> u32 {
        u32::from((self.ctx.be8(off::RQ_SIZE_STRIDE) >> 3) & 0xf)
    }
    pub fn rq_log_stride(&self) -> u32 {
        u32::from(self.ctx.be8(off::RQ_SIZE_STRIDE) & 7) + 4
    }
    pub fn sq_log_count(&self) -> u32 {
        u32::from((self.ctx.be8(off::SQ_SIZE_STRIDE) >> 3) & 0xf)
    }
    pub fn sq_log_stride(&self) -> u32 {
        u32::from(self.ctx.be8(off::SQ_SIZE_STRIDE) & 7) + 4
    }
    pub fn rlkey(&self) -> bool {
        self.ctx.be8(off::RLKEY) & 0x10 != 0
    }
    pub fn usr_page(&self) -> u32 {
        self.ctx.be32(off::USR_PAGE) & 0xff_ffff
    }
    pub fn remote_qpn(&self) -> u32 {
        self.ctx.be32(off::REMOTE_QPN) & 0xff_ffff
    }
    pub fn pkey_index(&self) -> u8 {
        self.ctx.be8(off::PRI_PATH + off::PATH_PKEY_INDEX) & 0x7f
    }
    pub fn rlid(&self) -> u16 {
        self.ctx.be16(off::PRI_PATH + off::PATH_RLID)
    }
    pub fn src_path_bits(&self) -> u8 {
        self.ctx.be8(off::PRI_PATH + off::PATH_GRH_MYLMC) & 0x7f
    }
    pub fn sched_queue(&self) -> u8 {
        self.ctx.be8(off::PRI_PATH + off::PATH_SCHED_QUEUE)
    }
    /// Port from sched_queue bit 6 (§4.4).
    pub fn port(&self) -> u8 {
        ((self.sched_queue() >> 6) & 1) + 1
    }
    /// SL from sched_queue bits 5:2 (§4.4).
    pub fn sl(&self) -> u8 {
        (self.sched_queue() >> 2) & 0xf
    }
    pub fn params2(&self) -> u32 {
        self.ctx.be32(off::PARAMS2)
    }
    /// The SRQ this QP takes receives from (QPC 0xAC: bit 24 in use, bits 23:0 SRQN).
    pub fn srqn(&self) -> Option<u32> {
        let v = self.ctx.be32(off::SRQN);
        (v & (1 << 24) != 0).then_some(v & 0xff_ffff)
    }
    pub fn db_rec(&self) -> u64 {
        self.ctx.be64(off::DB_REC_ADDR)
    }
    pub fn qkey(&self) -> u32 {
        self.ctx.be32(off::QKEY)
    }
    pub fn page_shift(&self) -> u32 {
        u32::from(self.ctx.be8(off::LOG_PAGE_SIZE) & 0x3f) + 12
    }
    pub fn mtt_base(&self) -> u64 {
        (u64::from(self.ctx.be8(off::MTT_BASE_HI)) << 32)
            | u64::from(self.ctx.be32(off::MTT_BASE_HI + 1))
    }
    pub fn retry_count(&self) -> u32 {
        (self.ctx.be32(off::PARAMS1) >> 16) & 7
    }
    pub fn rnr_retry(&self) -> u32 {
        (self.ctx.be32(off::PARAMS1) >> 13) & 7
    }
    /// Local ACK timeout code (primary path 0x08 bits 7:3, §7.3).
    pub fn ack_timeout(&self) -> u8 {
        self.ctx.be8(off::PRI_PATH + off::PATH_ACKTO) >> 3
    }
    /// Minimum RNR NAK timer code (QPC 0x94 bits 28:24, §4.4).
    pub fn min_rnr_timer(&self) -> u8 {
        ((self.ctx.be32(off::RNR_NEXTRECVPSN) >> 24) & 0x1f) as u8
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
    /// The context as QUERY_QP reports it: state and device-maintained fields filled in.
    pub fn context_now(&self) -> Vec<u8> {
        let mut c = self.ctx.clone();
        let f = (c.be32(off::FLAGS) & 0x0fff_ffff) | ((self.state as u32) << 28);
        c.put32(off::FLAGS, f);
        c.put32(off::LOCAL_QPN, self.qpn);
        c.put16(off::RQ_WQE_COUNTER, self.rq_counter);
        c.put16(off::SQ_WQE_COUNTER, self.sq_counter);
        c.put32(off::NEXT_SEND_PSN, self.sq_psn & 0xff_ffff);
        let r = (c.be32(off::RNR_NEXTRECVPSN) & 0xff00_0000) | (self.rq_psn & 0xff_ffff);
        c.put32(off::RNR_NEXTRECVPSN, r);
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

fn copy_bits(dst: &mut [u8], src: &[u8], at: usize, mask: u32) {
    let v = (dst.be32(at) & !mask) | (src.be32(at) & mask);
    dst.put32(at, v);
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
    if optpar & optpar::RRE != 0 {
        copy_bits(cur, new, PARAMS2, PARAMS2_RRE);
    }
    if optpar & optpar::RAE != 0 {
        copy_bits(cur, new, PARAMS2, PARAMS2_RAE);
    }
    if optpar & optpar::RWE != 0 {
        copy_bits(cur, new, PARAMS2, PARAMS2_RWE);
    }
    if optpar & optpar::PKEY_INDEX != 0 {
        copy_bytes(cur, new, PRI_PATH + PATH_PKEY_INDEX, 1);
    }
    if optpar & optpar::QKEY != 0 {
        copy_bytes(cur, new, QKEY, 4);
    }
    if optpar & optpar::RNR_TIMEOUT != 0 {
        copy_bits(cur, new, RNR_NEXTRECVPSN, 0x1f00_0000);
    }
    if optpar & optpar::SRA_MAX != 0 {
        copy_bits(cur, new, PARAMS1, 7 << 21);
    }
    if optpar & optpar::RRA_MAX != 0 {
        copy_bits(cur, new, PARAMS2, 7 << 21);
    }
    if optpar & optpar::PM_STATE != 0 {
        copy_bits(cur, new, FLAGS, 3 << 11);
    }
    if optpar & optpar::RETRY_COUNT != 0 {
        copy_bits(cur, new, PARAMS1, 7 << 16);
    }
    if optpar & optpar::RNR_RETRY != 0 {
        copy_bits(cur, new, PARAMS1, 7 << 13);
    }
    if optpar & optpar::ACK_TIMEOUT != 0 {
        let a = PRI_PATH + PATH_ACKTO;
        let v = (cur.be8(a) & 0x07) | (new.be8(a) & 0xf8);
        cur.put8(a, v);
    }
    if optpar & optpar::SCHED_QUEUE != 0 {
        copy_bytes(cur, new, PRI_PATH + PATH_SCHED_QUEUE, 1);
    }
    if optpar & optpar::COUNTER_INDEX != 0 {
        copy_bytes(cur, new, PRI_PATH + PATH_COUNTER, 1);
    }
}

/// INIT->RTR takes the MTU/max message, remote QPN and receive PSN; a UD or MLX QP also takes
/// its sched queue (port and SL), which Linux's `__mlx4_ib_modify_qp` writes for them without
/// an optpar bit. A connected QP's address path (PRIMARY_ADDR_PATH), sched queue
/// (SCHED_QUEUE) and everything else optional come only with their optpar bits, as Linux sets
/// them (decision in docs/model.md).
pub fn take_init2rtr(cur: &mut [u8], new: &[u8], connected: bool) {
    use off::*;
    if !connected {
        copy_bytes(cur, new, PRI_PATH + PATH_SCHED_QUEUE, 1);
    }
    copy_bytes(cur, new, MTU_MSGMAX, 1);
    copy_bytes(cur, new, REMOTE_QPN, 4);
    copy_bits(cur, new, RNR_NEXTRECVPSN, 0x00ff_ffff);
}

/// RTR->RTS takes the next send PSN (§4.4).
pub fn take_rtr2rts(cur: &mut [u8], new: &[u8]) {
    copy_bits(cur, new, off::NEXT_SEND_PSN, 0x00ff_ffff);
    // ACK request frequency and the fast-register bit travel with params1 every time.
    copy_bits(cur, new, off::PARAMS1, 0xf000_0800);
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
        cur.put32(PARAMS2, PARAMS2_RWE);
        // INIT2RTR of an RC QP: path with PRIMARY_PATH | SCHED_QUEUE | RNR_TIMEOUT, MTU.
        let mut rtr = vec![0u8; QPC_SIZE];
        rtr.put8(MTU_MSGMAX, (4 << 5) | 30);
        rtr.put16(PRI_PATH + PATH_RLID, 2);
        rtr.put8(PRI_PATH + PATH_SCHED_QUEUE, 0x83);
        rtr.put32(RNR_NEXTRECVPSN, (12 << 24) | 0x77);
        rtr.put32(PARAMS2, PARAMS2_RWE);
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
        assert_eq!(cur.be32(PARAMS2) & PARAMS2_RWE, PARAMS2_RWE);
        assert_eq!(cur.be8(MTU_MSGMAX), (4 << 5) | 30);
        assert_eq!(cur.be16(PRI_PATH + PATH_RLID), 2);
        assert_eq!(cur.be8(PRI_PATH + PATH_SCHED_QUEUE), 0x83);
        assert_eq!(cur.be32(RNR_NEXTRECVPSN), (12 << 24) | 0x77);
        assert_eq!(cur.be32(NEXT_SEND_PSN), 0x55);
    }
}
