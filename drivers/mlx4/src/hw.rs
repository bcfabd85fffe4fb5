//! Device-visible layouts as `#[repr(C)]` big-endian structs, each offset asserted against the
//! section of docs/hardware.md it comes from. Reserved bytes are named `_rsvdN`.
//!
//! Every struct derives zerocopy's `FromBytes`, `IntoBytes`, `KnownLayout` and `Immutable`:
//! the derives fail to compile if a struct had padding or a field that is not plain bytes, so
//! the code copies a struct into a mailbox with `as_bytes()` and builds a zeroed one with
//! `new_zeroed()`, without `unsafe`.

use crate::be::{Be16, Be32, Be64};
use core::mem::{offset_of, size_of};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

macro_rules! assert_layout {
    ($t:ty, $size:expr, $($f:ident = $o:expr),* $(,)?) => {
        const _: () = {
            assert!(size_of::<$t>() == $size);
            $(assert!(offset_of!($t, $f) == $o);)*
        };
    };
}

/// `Default` = all zero, for structs with reserved arrays longer than 32 bytes.
macro_rules! zero_default {
    ($t:ty) => {
        impl Default for $t {
            fn default() -> Self {
                <$t as FromZeros>::new_zeroed()
            }
        }
    };
}

/// The host command register (§1.2): seven big-endian dwords at BAR0 + `dcs::HCR`. The
/// driver builds one with [`Hcr::command`] and writes it as MMIO a dword at a time
/// ([`Hcr::dwords`]), the status dword (GO) last; it reads the status dword and, for an
/// immediate output, `out_param` back.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct Hcr {
    pub in_param: Be64,
    pub in_mod: Be32,
    pub out_param: Be64,
    /// The token in bits 31:16; bits 15:0 reserved.
    pub token: Be32,
    /// Status 31:24, GO 23, E 22, T 21, op_mod 19:12, opcode 11:0 ([`hcr`] bits).
    pub status: Be32,
}
assert_layout!(
    Hcr,
    28,
    in_param = 0x00,
    in_mod = 0x08,
    out_param = 0x0C,
    token = 0x14,
    status = 0x18
);

/// The HCR's status dword: bits and fields (§1.2).
pub mod hcr {
    pub const GO: u32 = 1 << 23;
    pub const EVENT: u32 = 1 << 22;
    pub const T_SHIFT: u32 = 21;
    pub const OPMOD_SHIFT: u32 = 12;
    pub const OPCODE_MASK: u32 = 0xFFF;
    pub const STATUS_SHIFT: u32 = 24;
    pub const TOKEN_SHIFT: u32 = 16;
    /// Token used in polling mode.
    pub const POLL_TOKEN: u16 = 0xFFFF;
}

/// The HCR dwords, the status dword last: index of the status dword.
pub const HCR_STATUS_DWORD: usize = offset_of!(Hcr, status) / 4;

/// What one command posts in the HCR.
#[derive(Clone, Copy, Debug)]
pub struct HcrCommand {
    pub opcode: u16,
    pub op_mod: u8,
    pub in_param: u64,
    pub in_mod: u32,
    pub out_param: u64,
    pub token: u16,
    /// The T bit this command carries (0 or 1).
    pub toggle: u32,
    /// Completion by event (E) rather than polling.
    pub event: bool,
}

impl Hcr {
    /// The HCR as `c` posts it, GO set.
    pub fn command(c: &HcrCommand) -> Hcr {
        Hcr {
            in_param: Be64::new(c.in_param),
            in_mod: Be32::new(c.in_mod),
            out_param: Be64::new(c.out_param),
            token: Be32::new(u32::from(c.token) << hcr::TOKEN_SHIFT),
            status: Be32::new(
                hcr::GO
                    | ((c.toggle & 1) << hcr::T_SHIFT)
                    | if c.event { hcr::EVENT } else { 0 }
                    | (u32::from(c.op_mod) << hcr::OPMOD_SHIFT)
                    | (u32::from(c.opcode) & hcr::OPCODE_MASK),
            ),
        }
    }

    /// The seven dwords as host integers, in the order of their offsets.
    pub fn dwords(&self) -> [u32; 7] {
        let d: &[Be32; 7] = zerocopy::transmute_ref!(self);
        d.map(|w| w.get())
    }

    /// The firmware status in a status dword read back.
    pub fn status_of(word: u32) -> u8 {
        (word >> hcr::STATUS_SHIFT) as u8
    }

    /// The T bit of a status dword read back.
    pub fn toggle_of(word: u32) -> u32 {
        (word >> hcr::T_SHIFT) & 1
    }
}

/// INIT_HCA input mailbox (§2.6), first 0x130 bytes (the rest stays zero).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct InitHca {
    pub version: u8,
    _rsvd0: [u8; 0x0D],
    pub cacheline: u8,
    _rsvd1: [u8; 5],
    pub flags: Be32,
    pub flags2: Be32,
    _rsvd2: [u8; 0x14],
    pub qpc_base: Be64,
    _rsvd3: [u8; 0x10],
    pub srqc_base: Be64,
    pub cqc_base: Be64,
    pub eqe_cqe_flags: Be32,
    _rsvd4: [u8; 4],
    pub altc_base: Be64,
    _rsvd5: [u8; 8],
    pub auxc_base: Be64,
    _rsvd6: [u8; 8],
    pub eqc_base: Be64,
    _rsvd7: [u8; 2],
    pub num_sys_eqs: Be16,
    _rsvd7b: [u8; 4],
    pub rdmarc_base: Be64,
    _rsvd8: [u8; 0x28],
    pub mc_base: Be64,
    _rsvd9: [u8; 0x0A],
    pub log_mc_entry_sz: Be16,
    _rsvd10: [u8; 2],
    pub log_mc_hash_sz: Be16,
    pub mc_flags: u8,
    _rsvd11: [u8; 2],
    pub log_mc_table_sz: u8,
    _rsvd12: [u8; 0x14],
    pub dmpt_base: Be64,
    pub mw_enable: u8,
    _rsvd13: [u8; 2],
    pub log_mpt_sz: u8,
    _rsvd14: [u8; 4],
    pub mtt_base: Be64,
    pub cmpt_base: Be64,
    _rsvd15: [u8; 0x1A],
    pub log_uar_sz: u8,
    pub uar_page_sz: u8,
    _rsvd16: [u8; 4],
}
zero_default!(InitHca);
zero_default!(QpContext);
assert_layout!(
    InitHca,
    0x130,
    version = 0x000,
    cacheline = 0x00E,
    flags = 0x014,
    flags2 = 0x018,
    qpc_base = 0x030,
    srqc_base = 0x048,
    cqc_base = 0x050,
    eqe_cqe_flags = 0x058,
    altc_base = 0x060,
    auxc_base = 0x070,
    eqc_base = 0x080,
    num_sys_eqs = 0x08A,
    rdmarc_base = 0x090,
    mc_base = 0x0C0,
    log_mc_entry_sz = 0x0D2,
    log_mc_hash_sz = 0x0D6,
    mc_flags = 0x0D8,
    log_mc_table_sz = 0x0DB,
    dmpt_base = 0x0F0,
    mw_enable = 0x0F8,
    log_mpt_sz = 0x0FB,
    mtt_base = 0x100,
    cmpt_base = 0x108,
    log_uar_sz = 0x12A,
    uar_page_sz = 0x12B
);

/// INIT_HCA flags and enables (Linux fw.c `mlx4_INIT_HCA`, §2.6).
pub mod init_hca_flag {
    /// Flags (0x14): check the port of UD address vectors against the QP's port.
    pub const UD_AV_PORT: u32 = 1 << 0;
    /// Flags: IPoIB checksum offload.
    pub const IPOIB_CSUM: u32 = 1 << 3;
    /// Flags: enable flow counters.
    pub const COUNTERS: u32 = 1 << 4;
    /// Flags: spread RSS over fragmented IP packets.
    pub const RSS_IP_FRAG: u32 = 1 << 13;
    /// 0x18: report recoverable-error events.
    pub const RECOVERABLE_ERROR_EVENT: u32 = 1 << 31;
    /// 0x58: 64-byte EQEs.
    pub const EQE_64B: u32 = 1 << 29;
    /// 0x58: 64-byte CQEs.
    pub const CQE_64B: u32 = 1 << 30;
    /// 0xD8 (`mc_flags`): B0 unicast steering.
    pub const UC_STEERING: u8 = 1 << 3;
    /// 0xF8 (`mw_enable`): memory windows.
    pub const MW_ENABLE: u8 = 1 << 7;
    /// 0x87 (log number of EQs) in SYS_EQS mode.
    pub const LOG_NUM_EQS_SYS: u8 = 0x1F;
}

/// Where INIT_HCA carries the driver's version string, when the firmware asks for it
/// (QUERY_DEV_CAP's DRIVER_VERSION_TO_FW), and its room (a NUL-terminated string).
pub const INIT_HCA_DRIVER_VERSION: usize = 0x140;
pub const INIT_HCA_DRIVER_VERSION_LEN: usize = 0x40;

/// Byte offsets of the log-size bytes that overlay the low byte of a base (§2.6).
pub mod init_hca_log {
    pub const QPC: usize = 0x037;
    pub const SRQC: usize = 0x04F;
    pub const CQC: usize = 0x057;
    pub const EQC: usize = 0x087;
    pub const RDMARC: usize = 0x097;
}

/// EQ context (§4.1).
#[repr(C)]
#[derive(Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct EqContext {
    pub flags: Be32,
    _rsvd0: [u8; 6],
    pub page_offset: Be16,
    pub log_eq_size: u8,
    _rsvd1: [u8; 4],
    pub eq_period: u8,
    _rsvd2: u8,
    pub eq_max_count: u8,
    _rsvd3: [u8; 3],
    pub intr: u8,
    pub log_page_size: u8,
    _rsvd4: [u8; 2],
    pub mtt_base_addr_h: u8,
    pub mtt_base_addr_l: Be32,
    _rsvd5: [u8; 8],
    pub consumer_index: Be32,
    pub producer_index: Be32,
    _rsvd6: [u8; 0x10],
}
assert_layout!(
    EqContext,
    64,
    flags = 0x00,
    page_offset = 0x0A,
    log_eq_size = 0x0C,
    eq_period = 0x11,
    eq_max_count = 0x13,
    intr = 0x17,
    log_page_size = 0x18,
    mtt_base_addr_h = 0x1B,
    mtt_base_addr_l = 0x1C,
    consumer_index = 0x28,
    producer_index = 0x2C
);

/// EQ context flags: status OK, state ARMED (§4.1).
pub const EQ_STATE_ARMED: u32 = 0x9 << 8;

/// CQ context (§4.2).
#[repr(C)]
#[derive(Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct CqContext {
    pub flags: Be32,
    _rsvd0: [u8; 6],
    pub page_offset: Be16,
    pub logsize_usrpage: Be32,
    pub cq_period: Be16,
    pub cq_max_count: Be16,
    _rsvd1: [u8; 3],
    pub comp_eqn: u8,
    pub log_page_size: u8,
    _rsvd2: [u8; 2],
    pub mtt_base_addr_h: u8,
    pub mtt_base_addr_l: Be32,
    pub last_notified_index: Be32,
    pub solicit_producer_index: Be32,
    pub consumer_index: Be32,
    pub producer_index: Be32,
    _rsvd3: [u8; 8],
    pub db_rec_addr: Be64,
}
assert_layout!(
    CqContext,
    64,
    flags = 0x00,
    page_offset = 0x0A,
    logsize_usrpage = 0x0C,
    cq_period = 0x10,
    cq_max_count = 0x12,
    comp_eqn = 0x17,
    log_page_size = 0x18,
    mtt_base_addr_h = 0x1B,
    mtt_base_addr_l = 0x1C,
    last_notified_index = 0x20,
    solicit_producer_index = 0x24,
    consumer_index = 0x28,
    producer_index = 0x2C,
    db_rec_addr = 0x38
);

/// Address path inside a QP context (§4.4).
#[repr(C)]
#[derive(Default, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct QpPath {
    pub fl: u8,
    pub vlan_control: u8,
    pub disable_pkey_check: u8,
    pub pkey_index: u8,
    pub counter_index: u8,
    pub grh_mylmc: u8,
    pub rlid: Be16,
    pub ackto: u8,
    pub mgid_index: u8,
    pub static_rate: u8,
    pub hop_limit: u8,
    pub tclass_flowlabel: Be32,
    pub rgid: [u8; 16],
    pub sched_queue: u8,
    pub vlan_index: u8,
    pub feup: u8,
    _rsvd0: [u8; 3],
    pub dmac: [u8; 6],
}
assert_layout!(
    QpPath,
    44,
    pkey_index = 0x03,
    counter_index = 0x04,
    grh_mylmc = 0x05,
    rlid = 0x06,
    ackto = 0x08,
    mgid_index = 0x09,
    static_rate = 0x0A,
    hop_limit = 0x0B,
    tclass_flowlabel = 0x0C,
    rgid = 0x10,
    sched_queue = 0x20,
    vlan_index = 0x21,
    dmac = 0x26
);

/// QP context (§4.4), 248 bytes, at mailbox + 8.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct QpContext {
    pub flags: Be32,
    pub pd: Be32,
    pub mtu_msgmax: u8,
    pub rq_size_stride: u8,
    pub sq_size_stride: u8,
    pub rlkey_roce_mode: u8,
    pub usr_page: Be32,
    pub local_qpn: Be32,
    pub remote_qpn: Be32,
    pub pri_path: QpPath,
    pub alt_path: QpPath,
    pub params1: Be32,
    _rsvd0: [u8; 4],
    pub next_send_psn: Be32,
    pub cqn_send: Be32,
    pub roce_entropy: Be16,
    _rsvd1: [u8; 6],
    pub last_acked_psn: Be32,
    pub ssn: Be32,
    pub params2: Be32,
    pub rnr_nextrecvpsn: Be32,
    pub xrcd: Be32,
    pub cqn_recv: Be32,
    pub db_rec_addr: Be64,
    pub qkey: Be32,
    pub srqn: Be32,
    pub msn: Be32,
    pub rq_wqe_counter: Be16,
    pub sq_wqe_counter: Be16,
    _rsvd2: [u8; 4],
    pub rate_limit_params: Be16,
    _rsvd3: u8,
    pub qos_vport: u8,
    pub param3: Be32,
    pub nummmcpeers_basemkey: Be32,
    pub log_page_size: u8,
    _rsvd4: [u8; 2],
    pub mtt_base_addr_h: u8,
    pub mtt_base_addr_l: Be32,
    _rsvd5: [u8; 40],
}
assert_layout!(
    QpContext,
    248,
    flags = 0x00,
    pd = 0x04,
    mtu_msgmax = 0x08,
    rq_size_stride = 0x09,
    sq_size_stride = 0x0A,
    rlkey_roce_mode = 0x0B,
    usr_page = 0x0C,
    local_qpn = 0x10,
    remote_qpn = 0x14,
    pri_path = 0x18,
    alt_path = 0x44,
    params1 = 0x70,
    next_send_psn = 0x78,
    cqn_send = 0x7C,
    roce_entropy = 0x80,
    last_acked_psn = 0x88,
    ssn = 0x8C,
    params2 = 0x90,
    rnr_nextrecvpsn = 0x94,
    xrcd = 0x98,
    cqn_recv = 0x9C,
    db_rec_addr = 0xA0,
    qkey = 0xA8,
    srqn = 0xAC,
    msn = 0xB0,
    rq_wqe_counter = 0xB4,
    sq_wqe_counter = 0xB6,
    rate_limit_params = 0xBC,
    qos_vport = 0xBF,
    param3 = 0xC0,
    nummmcpeers_basemkey = 0xC4,
    log_page_size = 0xC8,
    mtt_base_addr_h = 0xCB,
    mtt_base_addr_l = 0xCC
);

/// QP context fields' bits (§4.4; Linux's include/linux/mlx4/qp.h names them `MLX4_QP_*`).
pub mod qpc {
    /// flags (0x00): next state, bits 31:28.
    pub const STATE_SHIFT: u32 = 28;
    /// flags: service type, bits 23:16.
    pub const ST_SHIFT: u32 = 16;
    /// flags: path-migration state MIGRATED (bits 12:11 = 3), as Linux sets it.
    pub const PM_MIGRATED: u32 = 3 << 11;

    /// Next-state codes of flags.
    pub mod state {
        pub const RESET: u32 = 0;
        pub const INIT: u32 = 1;
        pub const RTR: u32 = 2;
        pub const RTS: u32 = 3;
        pub const ERR: u32 = 6;
    }

    /// Service types of flags.
    pub mod st {
        pub const RC: u32 = 0;
        pub const UC: u32 = 1;
        pub const UD: u32 = 3;
        pub const MLX: u32 = 7;
    }

    /// mtu_msgmax (0x08): path MTU in bits 7:5, log2 max message size in bits 4:0.
    pub const MTU_SHIFT: u32 = 5;
    /// IB MTU code of 4096 bytes.
    pub const MTU_4096: u8 = 5;
    /// UD QPs: MTU 4096, messages up to 2^13 bytes (Linux's value).
    pub const MTU_MSGMAX_UD: u8 = (MTU_4096 << MTU_SHIFT) | 13;
    /// QP0/QP1: MTU 4096, messages up to 2^11 bytes (Linux's value).
    pub const MTU_MSGMAX_SMI: u8 = (MTU_4096 << MTU_SHIFT) | 11;

    /// rlkey_roce_mode (0x0B): the QP may use the reserved L_Key.
    pub const RLKEY: u8 = 1 << 4;

    /// params1 (0x70): ACK request frequency (bits 31:28), Linux's 8.
    pub const ACK_REQ_FREQ: u32 = 8 << 28;
    /// params1: fast-registration enable (kernel QPs).
    pub const FRE: u32 = 1 << 11;
    /// params1: log2 of the requester's RDMA-read/atomic depth (SRA max), bits 23:21.
    pub const SRA_MAX_SHIFT: u32 = 21;
    /// params1: retry count, bits 18:16.
    pub const RETRY_COUNT_SHIFT: u32 = 16;
    /// params1: RNR retry, bits 15:13.
    pub const RNR_RETRY_SHIFT: u32 = 13;

    /// params2 (0x90): remote read, write and atomic enable.
    pub const RRE: u32 = 1 << 15;
    pub const RWE: u32 = 1 << 14;
    pub const RAE: u32 = 1 << 13;
    /// params2: log2 of the responder's RDMA-read/atomic depth (RRA max), bits 23:21.
    pub const RRA_MAX_SHIFT: u32 = 21;

    /// params2: RIC, the QP's receives come from an SRQ (§4.7).
    pub const RIC: u32 = 1 << 4;

    /// srqn (0xAC): the QP takes its receives from the SRQ in bits 23:0 (§4.7).
    pub const SRQ_EN: u32 = 1 << 24;

    /// rnr_nextrecvpsn (0x94): the RNR NAK timer, bits 28:24, above the PSN.
    pub const MIN_RNR_TIMER_SHIFT: u32 = 24;

    /// Address path grh_mylmc (0x05): a GRH follows; bits 6:0 are the source path bits.
    pub const GRH: u8 = 0x80;
    /// Address path ackto (0x08): local ACK timeout in bits 7:3.
    pub const ACKTO_SHIFT: u32 = 3;
    /// Address path static_rate (0x0A): IB rate enum + this (0 = port rate).
    pub const STATIC_RATE_OFFSET: u8 = 5;
    /// Address path sched_queue (0x20): bits 7, 1, 0 of ordinary QPs (Linux ORs in 0x83).
    pub const SCHED_QUEUE_IB: u8 = 0x83;
    /// sched_queue of QP0 (Linux's value for the SMI QP).
    pub const SCHED_QUEUE_QP0: u8 = 0x3F;
    /// sched_queue: the port − 1 in bit 6.
    pub const SCHED_PORT_SHIFT: u32 = 6;
    /// sched_queue: the SL in bits 5:2 (IB).
    pub const SCHED_SL_SHIFT: u32 = 2;
}

/// dMPT entry (§4.5).
#[repr(C)]
#[derive(Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct MptEntry {
    pub flags: Be32,
    pub qpn: Be32,
    pub key: Be32,
    pub pd_flags: Be32,
    pub start: Be64,
    pub length: Be64,
    pub lkey: Be32,
    pub win_cnt: Be32,
    _rsvd0: [u8; 3],
    pub mtt_rep: u8,
    pub mtt_addr: Be64,
    pub mtt_sz: Be32,
    pub entity_size: Be32,
    pub first_byte_offset: Be32,
}
assert_layout!(
    MptEntry,
    64,
    flags = 0x00,
    qpn = 0x04,
    key = 0x08,
    pd_flags = 0x0C,
    start = 0x10,
    length = 0x18,
    lkey = 0x20,
    win_cnt = 0x24,
    mtt_rep = 0x2B,
    mtt_addr = 0x2C,
    mtt_sz = 0x34,
    entity_size = 0x38,
    first_byte_offset = 0x3C
);

/// MPT flag bits (§4.5).
pub mod mpt {
    pub const SW_OWNS: u32 = 0xF << 28;
    pub const LOCAL_READ: u32 = 1 << 10;
    pub const LOCAL_WRITE: u32 = 1 << 11;
    pub const REMOTE_READ: u32 = 1 << 12;
    pub const REMOTE_WRITE: u32 = 1 << 13;
    pub const ATOMIC: u32 = 1 << 14;
    pub const PHYSICAL: u32 = 1 << 9;
    pub const REGION: u32 = 1 << 8;
    /// Set on every MPT by Linux's `mlx4_mr_enable` (`MLX4_MPT_FLAG_MIO`).
    pub const MIO: u32 = 1 << 17;
    pub const PD_EN_INV: u32 = 3 << 24;
}

/// Event queue entry, 32 bytes (§4.1): the event type and subtype, 24 bytes of event data
/// whose layout the type decides (read through [`Eqe::queue`], [`Eqe::cmd`],
/// [`Eqe::port_change`], [`Eqe::port`]), and the owner bit.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct Eqe {
    _rsvd0: u8,
    pub event_type: u8,
    _rsvd1: u8,
    pub subtype: u8,
    pub data: [u8; 24],
    pub slave_id: u8,
    _rsvd2: [u8; 2],
    pub owner: u8,
}
assert_layout!(
    Eqe,
    32,
    event_type = 0x01,
    subtype = 0x03,
    data = 0x04,
    slave_id = 0x1C,
    owner = 0x1F
);

/// The owner bit in [`Eqe::owner`] (§4.1).
pub const EQE_OWNER: u8 = 0x80;

/// EQE data of a queue's event (completion, CQ error, SRQ limit, SRQ error; §4.1, §4.7):
/// the queue number in the low 24 bits of EQE 0x04; a CQ error's syndrome at EQE 0x0F.
/// Offsets here are from the data, EQE byte 4.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct EqeQueue {
    pub number: Be32,
    _rsvd0: [u8; 7],
    pub syndrome: u8,
    _rsvd1: [u8; 12],
}
assert_layout!(EqeQueue, 24, number = 0x00, syndrome = 0x0B);

impl EqeQueue {
    /// The CQN, SRQN or QPN (24 bits).
    pub fn num(&self) -> u32 {
        self.number.get() & 0xFF_FFFF
    }
}

/// EQE data of a command completion (§1.3): the token at EQE 0x06, the status at 0x0F, the
/// immediate output at 0x10.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct EqeCmd {
    _rsvd0: [u8; 2],
    pub token: Be16,
    _rsvd1: [u8; 7],
    pub status: u8,
    pub out_param: Be64,
    _rsvd2: [u8; 4],
}
assert_layout!(EqeCmd, 24, token = 0x02, status = 0x0B, out_param = 0x0C);

/// EQE data of a port state change (§4.1): the port in bits 31:28 of EQE 0x0C.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct EqePortChange {
    _rsvd0: [u8; 8],
    pub port_word: Be32,
    _rsvd1: [u8; 12],
}
assert_layout!(EqePortChange, 24, port_word = 0x08);

impl EqePortChange {
    pub fn port(&self) -> u8 {
        (self.port_word.get() >> 28) as u8
    }
}

/// EQE data of a port management change or a recoverable (cable) error (§4.1): the port at
/// EQE 0x07.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct EqePort {
    _rsvd0: [u8; 3],
    pub port: u8,
    _rsvd1: [u8; 20],
}
assert_layout!(EqePort, 24, port = 0x03);

impl Eqe {
    pub fn queue(&self) -> &EqeQueue {
        zerocopy::transmute_ref!(&self.data)
    }
    pub fn cmd(&self) -> &EqeCmd {
        zerocopy::transmute_ref!(&self.data)
    }
    pub fn port_change(&self) -> &EqePortChange {
        zerocopy::transmute_ref!(&self.data)
    }
    pub fn port(&self) -> &EqePort {
        zerocopy::transmute_ref!(&self.data)
    }
}

/// Completion queue entry, 32 bytes (§4.2).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct Cqe {
    pub vlan_my_qpn: Be32,
    pub immed_rss_invalid: Be32,
    pub g_mlpath_rqpn: Be32,
    pub sl_vid: Be16,
    pub rlid: Be16,
    pub status: Be16,
    pub ipv6_ext_mask: u8,
    pub badfcs_enc: u8,
    pub byte_cnt: Be32,
    pub wqe_index: Be16,
    pub checksum: Be16,
    _rsvd0: [u8; 3],
    pub owner_sr_opcode: u8,
}
assert_layout!(
    Cqe,
    32,
    vlan_my_qpn = 0x00,
    immed_rss_invalid = 0x04,
    g_mlpath_rqpn = 0x08,
    sl_vid = 0x0C,
    rlid = 0x0E,
    status = 0x10,
    byte_cnt = 0x14,
    wqe_index = 0x18,
    checksum = 0x1A,
    owner_sr_opcode = 0x1F
);

/// Error CQE view: syndromes at 0x1A/0x1B (§4.2).
pub mod err_cqe {
    pub const VENDOR_SYNDROME: usize = 0x1A;
    pub const SYNDROME: usize = 0x1B;
}

/// WQE control segment (§5.2).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct CtrlSeg {
    pub owner_opcode: Be32,
    pub vlan_fence_size: Be32,
    pub srcrb_flags: Be32,
    pub imm: Be32,
}
assert_layout!(
    CtrlSeg,
    16,
    owner_opcode = 0,
    vlan_fence_size = 4,
    srcrb_flags = 8,
    imm = 12
);

/// The ctrl segment of an MLX WQE, QP0's raw packets (§5.2; Linux's `mlx4_wqe_mlx_seg`):
/// dwords 0 and 1 as in [`CtrlSeg`], then the MLX flags and the destination LID.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct MlxSeg {
    pub owner_opcode: Be32,
    pub vlan_fence_size: Be32,
    pub flags: Be32,
    pub rlid: Be16,
    _rsvd0: [u8; 2],
}
assert_layout!(
    MlxSeg,
    16,
    owner_opcode = 0,
    vlan_fence_size = 4,
    flags = 8,
    rlid = 12
);

/// MLX segment flag bits (§5.2; Linux's `MLX4_WQE_MLX_*`): VL 15, the SLID taken from the
/// packet's LRH, the SL in bits 11:8; CQ update as in [`ctrl::CQ_UPDATE`].
pub mod mlx {
    pub const VL15: u32 = 1 << 17;
    pub const SLR: u32 = 1 << 16;
    pub const SL_SHIFT: u32 = 8;
}

/// UD datagram segment (§5.2).
#[repr(C)]
#[derive(Clone, Copy, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct DatagramSeg {
    pub port_pd: Be32,
    _rsvd0: u8,
    pub g_slid: u8,
    pub dlid: Be16,
    _rsvd1: u8,
    pub gid_index: u8,
    pub stat_rate: u8,
    pub hop_limit: u8,
    pub sl_tclass_flowlabel: Be32,
    pub dgid: [u8; 16],
    pub dqpn: Be32,
    pub qkey: Be32,
    pub vlan: Be16,
    pub mac: [u8; 6],
}
assert_layout!(
    DatagramSeg,
    48,
    port_pd = 0x00,
    g_slid = 0x05,
    dlid = 0x06,
    gid_index = 0x09,
    stat_rate = 0x0A,
    hop_limit = 0x0B,
    sl_tclass_flowlabel = 0x0C,
    dgid = 0x10,
    dqpn = 0x20,
    qkey = 0x24,
    vlan = 0x28,
    mac = 0x2A
);

/// Remote address segment (§5.2).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RaddrSeg {
    pub raddr: Be64,
    pub rkey: Be32,
    _rsvd0: u32,
}

impl RaddrSeg {
    pub fn new(raddr: u64, rkey: u32) -> RaddrSeg {
        RaddrSeg {
            raddr: Be64::new(raddr),
            rkey: Be32::new(rkey),
            _rsvd0: 0,
        }
    }
}
assert_layout!(RaddrSeg, 16, raddr = 0, rkey = 8);

/// Atomic segment (§5.2).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct AtomicSeg {
    pub swap_add: Be64,
    pub compare: Be64,
}
assert_layout!(AtomicSeg, 16, swap_add = 0, compare = 8);

/// Data (pointer) segment, also the RQ WQE entry (§5.2, §5.6).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct DataSeg {
    pub byte_count: Be32,
    pub lkey: Be32,
    pub addr: Be64,
}
assert_layout!(DataSeg, 16, byte_count = 0, lkey = 4, addr = 8);

/// Send WQE opcodes (§5.2).
pub mod opcode {
    pub const RDMA_WRITE: u32 = 0x08;
    pub const RDMA_WRITE_IMM: u32 = 0x09;
    pub const SEND: u32 = 0x0A;
    pub const SEND_IMM: u32 = 0x0B;
    pub const RDMA_READ: u32 = 0x10;
    pub const ATOMIC_CS: u32 = 0x11;
    pub const ATOMIC_FA: u32 = 0x12;
}

/// Optional-parameter mask bits of the modify-QP mailbox's first dword (§4.4): which
/// context fields a transition takes.
pub mod optpar {
    pub const RRE: u32 = 1 << 1;
    pub const RAE: u32 = 1 << 2;
    pub const RWE: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const Q_KEY: u32 = 1 << 5;
    pub const RNR_TIMEOUT: u32 = 1 << 6;
    pub const PRIMARY_ADDR_PATH: u32 = 1 << 7;
    pub const SRA_MAX: u32 = 1 << 8;
    pub const RRA_MAX: u32 = 1 << 9;
    pub const RETRY_COUNT: u32 = 1 << 12;
    pub const RNR_RETRY: u32 = 1 << 13;
    pub const ACK_TIMEOUT: u32 = 1 << 14;
    pub const SCHED_QUEUE: u32 = 1 << 16;
    pub const COUNTER_INDEX: u32 = 1 << 20;
}

/// Control segment bits (§5.2).
pub mod ctrl {
    pub const OWNER: u32 = 1 << 31;
    /// The WQE's size in 16-byte units: the low 6 bits of dword 1.
    pub const DS_MASK: u32 = 0x3F;
    pub const FENCE: u32 = 1 << 6;
    pub const CQ_UPDATE: u32 = 3 << 2;
    pub const SOLICITED: u32 = 1 << 1;
    pub const INLINE: u32 = 1 << 31;
    /// A data segment's byte count of 0 means 2 GiB (§5.2); a zero-length SGE is written so.
    pub const ZERO_LENGTH_SGE: u32 = 1 << 31;
}

/// Terminator lkey for receive scatter lists (§4.5, §5.6).
pub const INVALID_LKEY: u32 = 0x100;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_start_zeroed_and_serialise_big_endian_at_their_offsets() {
        let mut q = QpContext::default();
        assert!(q.as_bytes().iter().all(|&b| b == 0));
        q.local_qpn.set(0x00AB_CDEF);
        q.db_rec_addr.set(0x0102_0304_0506_0708);
        q.pri_path.rlid.set(0x1234);
        let b = q.as_bytes();
        assert_eq!(b.len(), 248);
        assert_eq!(b[0x10..0x14], [0x00, 0xAB, 0xCD, 0xEF]);
        assert_eq!(b[0xA0..0xA8], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(b[0x18 + 0x06..0x18 + 0x08], [0x12, 0x34]);
        assert_eq!(b.iter().filter(|&&x| x != 0).count(), 3 + 8 + 2);

        let mut m = InitHca::default();
        m.mtt_base.set(0xFEED_0000);
        let back = InitHca::read_from_bytes(m.as_bytes()).unwrap();
        assert_eq!(back.mtt_base.get(), 0xFEED_0000);
        assert!(InitHca::read_from_bytes(&m.as_bytes()[1..]).is_err());
    }
}
