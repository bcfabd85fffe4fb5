//! Output mailboxes of the firmware's query commands as `#[repr(C)]` big-endian views, each
//! offset asserted against the table of docs/hardware.md it comes from (§1.5 QUERY_FW, §2.3
//! QUERY_ADAPTER and MOD_STAT_CFG, §2.4 QUERY_DEV_CAP, §2.5 QUERY_PORT). Fields are named as
//! the tables name them and hold the raw bytes; `fw` and `port` decode them (logs into counts,
//! nibbles into fields). Bytes the driver does not read are reserved (`_rsvdN`).
//!
//! As in `hw`, zerocopy's derives check at compile time that a view has no padding, so the
//! driver reads one out of the output mailbox with `ref_from_prefix`, which fails (rather than
//! reading zeros) if the mailbox were shorter than the view. The device model keeps its own
//! definitions of these layouts (sim/src/cmd), written independently; `tests/bringup.rs`
//! (`query_outputs_decode_to_what_the_model_reported`) checks that the two agree field by field.

use crate::be::{Be16, Be32, Be64};
use core::mem::{offset_of, size_of};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

macro_rules! assert_layout {
    ($t:ty, $size:expr, $($f:ident = $o:expr),* $(,)?) => {
        const _: () = {
            assert!(size_of::<$t>() == $size);
            $(assert!(offset_of!($t, $f) == $o);)*
        };
    };
}

/// QUERY_FW output (§1.5), the part up to the catastrophic-error buffer.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct QueryFw {
    /// Firmware area size in 4 KiB pages.
    pub fw_pages: Be16,
    pub fw_rev_major: Be16,
    pub fw_rev_subminor: Be16,
    pub fw_rev_minor: Be16,
    _rsvd0: [u8; 2],
    pub cmd_if_rev: Be16,
    _rsvd1: [u8; 3],
    pub log_max_cmds: u8,
    _rsvd2: [u8; 0x10],
    pub clr_int_base: Be64,
    /// Bits 7:6: the BAR index / 2.
    pub clr_int_bar: u8,
    _rsvd3: [u8; 7],
    pub catas_offset: Be64,
    /// In dwords.
    pub catas_size: Be32,
    /// Bits 7:6: the BAR index / 2.
    pub catas_bar: u8,
    _rsvd4: [u8; 3],
}
assert_layout!(
    QueryFw,
    0x40,
    fw_pages = 0x00,
    fw_rev_major = 0x02,
    fw_rev_subminor = 0x04,
    fw_rev_minor = 0x06,
    cmd_if_rev = 0x0A,
    log_max_cmds = 0x0F,
    clr_int_base = 0x20,
    clr_int_bar = 0x28,
    catas_offset = 0x30,
    catas_size = 0x38,
    catas_bar = 0x3C,
);

/// QUERY_DEV_CAP output (§2.4): every field Linux's `mlx4_QUERY_DEV_CAP` reads, over the
/// whole 0x100-byte output. Single bytes are logs, nibbles or flag bytes as the table says.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct QueryDevCap {
    _rsvd0: [u8; 0x10],
    pub log_max_srq_sz: u8,
    pub log_max_qp_sz: u8,
    pub log_rsvd_qps: u8,
    pub log_max_qps: u8,
    /// High nibble.
    pub log_rsvd_srqs: u8,
    pub log_max_srqs: u8,
    _rsvd1: [u8; 3],
    pub log_max_cq_sz: u8,
    pub log_rsvd_cqs: u8,
    pub log_max_cqs: u8,
    _rsvd2: u8,
    pub log_max_mpts: u8,
    pub log_rsvd_eqs: u8,
    pub log_max_eqs: u8,
    /// High nibble.
    pub log_rsvd_mtts: u8,
    pub log_max_mrw_sz: u8,
    pub log_rsvd_mrws: u8,
    pub log_max_mtt_seg: u8,
    _rsvd4: [u8; 2],
    /// Low 12 bits; non-zero: the device works in SYS_EQS mode (§2.4).
    pub num_sys_eqs: Be16,
    _rsvd5: u8,
    pub log_max_rd_req: u8,
    _rsvd6: u8,
    pub log_max_rd_res: u8,
    _rsvd7: u8,
    /// Low 5 bits: log2 max GSO size (0: none).
    pub log_max_gso: u8,
    /// Bit 5 RSS XOR, bit 4 RSS Toeplitz, low nibble log2 RSS table size.
    pub rss: u8,
    pub log_max_rdma: u8,
    _rsvd8: [u8; 3],
    /// Bit 0: SRQs can be resized.
    pub resize_srq: u8,
    /// Bit 7: port beacon.
    pub port_beacon: u8,
    pub local_ca_ack_delay: u8,
    _rsvd9: u8,
    /// Low nibble: number of ports.
    pub num_ports: u8,
    pub log_max_msg: u8,
    _rsvd10: [u8; 3],
    /// Static rates supported: bit k = rate code k (Linux `stat_rate_support`).
    pub stat_rate_support: Be16,
    /// Bit 7: CQE timestamps.
    pub cq_ts: u8,
    _rsvd11: u8,
    /// Flags bits 63:32 (bits 37/38 of the whole, wake-on-LAN, sit in its low byte).
    pub flags_hi: Be32,
    /// Flags bits 31:0.
    pub flags_lo: Be32,
    /// High nibble: reserved UARs (a count).
    pub rsvd_uars: u8,
    /// Low 6 bits: log2(UAR area size) − 20.
    pub uar_size: u8,
    _rsvd12: u8,
    pub log_min_page_sz: u8,
    /// Bit 7: BlueFlame supported.
    pub bf: u8,
    pub log_bf_reg_sz: u8,
    pub log_bf_regs_per_page: u8,
    pub log_max_bf_pages: u8,
    _rsvd13: u8,
    pub max_sq_sg: u8,
    pub max_sq_desc_sz: Be16,
    _rsvd14: u8,
    pub max_rq_sg: u8,
    pub max_rq_desc_sz: Be16,
    _rsvd15: [u8; 4],
    /// Bit 2: user MAC.
    pub user_mac_en: u8,
    /// Bit 0: S-VLAN by QP.
    pub svlan_by_qp: u8,
    _rsvd16: [u8; 3],
    pub log_max_qp_mcg: u8,
    /// Low nibble: reserved MGMs.
    pub rsvd_mcgs: u8,
    pub log_max_mcgs: u8,
    /// High nibble: reserved PDs (a count).
    pub rsvd_pds: u8,
    pub log_max_pds: u8,
    /// High nibble: reserved XRC domains (a count).
    pub rsvd_xrcds: u8,
    /// Low 5 bits.
    pub log_max_xrcds: u8,
    pub max_counters: Be32,
    pub max_ext_counters: Be32,
    /// The extended flags (bit 23 SW_CQ_INIT, 16 UPDATE_QP, 18/19 loopback source checks,
    /// 20 FSM, 21 80 VFs, 26 VLAN control, 28 PFC counters: the byte 0x70's bit 4).
    pub ext2_flags: Be32,
    /// Bit 7: device-managed flow steering for IPoIB.
    pub fs_ipoib: u8,
    _rsvd17: u8,
    /// Bit 7 flow steering, bit 5 DMFS sniffer, low 5 bits log max unicast QP range.
    pub fs_range_en: u8,
    pub fs_max_qp: u8,
    /// Bit 5: SL-to-VL change event.
    pub sl2vl_event: u8,
    _rsvd18: u8,
    /// Bit 4 QoS per VF, bit 5 Ethernet protocol control, bit 6 CQE stride, bit 7 EQE stride.
    pub cq_eq_stride: u8,
    /// Bit 0: QCN.
    pub ecn_qcn: u8,
    _rsvd19: [u8; 4],
    pub rdmarc_entry_sz: Be16,
    pub qpc_entry_sz: Be16,
    pub auxc_entry_sz: Be16,
    pub altc_entry_sz: Be16,
    pub eqc_entry_sz: Be16,
    pub cqc_entry_sz: Be16,
    pub srq_entry_sz: Be16,
    pub cmpt_entry_sz: Be16,
    pub mtt_entry_sz: Be16,
    pub dmpt_entry_sz: Be16,
    /// BMME flags; the top byte also carries CONFIG_DEV (bit 29) and ignore-FCS (bit 26).
    pub bmme_flags: Be32,
    pub reserved_lkey: Be32,
    /// Bit 0 Ethernet backplane autoneg, bit 7 recoverable-error events, bit 8 driver version
    /// to firmware, bit 17 diagnostics per port; bit 22 (byte 0x9D bit 6) MAC reassignment,
    /// bits 11/13 (byte 0x9E bits 3/5) VXLAN offloads / ETS configuration.
    pub misc_flags: Be32,
    pub max_icm_sz: Be64,
    pub dmfs_high_rate_qpn_base: Be32,
    pub dmfs_high_rate_qpn_range: Be32,
    /// Bit 0: MAD demux.
    pub mad_demux: Be32,
    _rsvd20: [u8; 0x18],
    pub qp_rate_limit_num: Be16,
    _rsvd21: [u8; 2],
    pub qp_rate_limit_max: Be16,
    pub qp_rate_limit_min: Be16,
    _rsvd22: [u8; 0x10],
    pub health_buffer: Be32,
    _rsvd23: [u8; 0x18],
}
assert_layout!(
    QueryDevCap,
    0x100,
    log_max_srq_sz = 0x10,
    log_max_qp_sz = 0x11,
    log_rsvd_qps = 0x12,
    log_max_qps = 0x13,
    log_rsvd_srqs = 0x14,
    log_max_srqs = 0x15,
    log_max_cq_sz = 0x19,
    log_rsvd_cqs = 0x1A,
    log_max_cqs = 0x1B,
    log_max_mpts = 0x1D,
    log_rsvd_eqs = 0x1E,
    log_max_eqs = 0x1F,
    log_rsvd_mtts = 0x20,
    log_max_mrw_sz = 0x21,
    log_rsvd_mrws = 0x22,
    log_max_mtt_seg = 0x23,
    num_sys_eqs = 0x26,
    log_max_rd_req = 0x29,
    log_max_rd_res = 0x2B,
    log_max_gso = 0x2D,
    rss = 0x2E,
    log_max_rdma = 0x2F,
    resize_srq = 0x33,
    port_beacon = 0x34,
    local_ca_ack_delay = 0x35,
    num_ports = 0x37,
    log_max_msg = 0x38,
    stat_rate_support = 0x3C,
    cq_ts = 0x3E,
    flags_hi = 0x40,
    flags_lo = 0x44,
    rsvd_uars = 0x48,
    uar_size = 0x49,
    log_min_page_sz = 0x4B,
    bf = 0x4C,
    log_bf_reg_sz = 0x4D,
    log_bf_regs_per_page = 0x4E,
    log_max_bf_pages = 0x4F,
    max_sq_sg = 0x51,
    max_sq_desc_sz = 0x52,
    max_rq_sg = 0x55,
    max_rq_desc_sz = 0x56,
    user_mac_en = 0x5C,
    svlan_by_qp = 0x5D,
    log_max_qp_mcg = 0x61,
    rsvd_mcgs = 0x62,
    log_max_mcgs = 0x63,
    rsvd_pds = 0x64,
    log_max_pds = 0x65,
    rsvd_xrcds = 0x66,
    log_max_xrcds = 0x67,
    max_counters = 0x68,
    max_ext_counters = 0x6C,
    ext2_flags = 0x70,
    fs_ipoib = 0x74,
    fs_range_en = 0x76,
    fs_max_qp = 0x77,
    sl2vl_event = 0x78,
    cq_eq_stride = 0x7A,
    ecn_qcn = 0x7B,
    rdmarc_entry_sz = 0x80,
    qpc_entry_sz = 0x82,
    auxc_entry_sz = 0x84,
    altc_entry_sz = 0x86,
    eqc_entry_sz = 0x88,
    cqc_entry_sz = 0x8A,
    srq_entry_sz = 0x8C,
    cmpt_entry_sz = 0x8E,
    mtt_entry_sz = 0x90,
    dmpt_entry_sz = 0x92,
    bmme_flags = 0x94,
    reserved_lkey = 0x98,
    misc_flags = 0x9C,
    max_icm_sz = 0xA0,
    dmfs_high_rate_qpn_base = 0xA8,
    dmfs_high_rate_qpn_range = 0xAC,
    mad_demux = 0xB0,
    qp_rate_limit_num = 0xCC,
    qp_rate_limit_max = 0xD0,
    qp_rate_limit_min = 0xD2,
    health_buffer = 0xE4,
);

/// QUERY_FUNC output (§2.3; SYS_EQS devices): the function's EQs and UARs (Linux
/// `mlx4_QUERY_FUNC`).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct QueryFunc {
    /// Low nibble: bus.
    pub bus: u8,
    /// Bits 7:4 and 0: device; bits 2:0 function.
    pub device_function: u8,
    _rsvd0: u8,
    /// Low nibble.
    pub physical_function: u8,
    pub rsvd_eqs: Be16,
    pub max_eqs: Be16,
    _rsvd1: [u8; 3],
    /// Low nibble: reserved UARs.
    pub rsvd_uars: u8,
    _rsvd2: [u8; 4],
}
assert_layout!(
    QueryFunc,
    0x10,
    bus = 0x00,
    device_function = 0x01,
    physical_function = 0x03,
    rsvd_eqs = 0x04,
    max_eqs = 0x06,
    rsvd_uars = 0x0B,
);

/// QUERY_ADAPTER output (§2.3): the INTx pin and the vendor-specific data with the board ID.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct QueryAdapter {
    _rsvd0: [u8; 0x10],
    pub inta_pin: u8,
    _rsvd1: [u8; 0x0F],
    /// Vendor-specific data up to the board ID.
    _vsd: [u8; 0xD0],
    /// The board ID (VSD + 0xD0), 16 characters, each 4-byte word byte-swapped.
    pub board_id: [Be32; 4],
}
assert_layout!(QueryAdapter, 0x100, inta_pin = 0x10, board_id = 0xF0);

/// QUERY_PORT output (§2.5): the bytes the driver reads.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct QueryPort {
    /// Bit 7 physical link up; bit 0 IB supported.
    pub link: u8,
    /// Low nibble: max IB MTU (enum).
    pub ib_mtu: u8,
    _rsvd0: [u8; 9],
    /// Low nibble: max VL.
    pub vl: u8,
}
assert_layout!(QueryPort, 0x0C, link = 0x00, ib_mtu = 0x01, vl = 0x0B);

/// MOD_STAT_CFG op_mod 2 output (§2.3, Linux's `mlx4_get_phys_port_id`): the port's uplink GUID.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PhysPortId {
    _rsvd0: [u8; 0x14],
    pub guid_hi: Be32,
    _rsvd1: [u8; 4],
    pub guid_lo: Be32,
}
assert_layout!(PhysPortId, 0x20, guid_hi = 0x14, guid_lo = 0x1C);

/// The MAD_IFC output mailbox (§6): the response MAD, of which the driver reads the header's
/// status and the data (SMP data: its first 64 bytes; PerfMgt data: all 192).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct MadIfc {
    _rsvd0: [u8; 4],
    pub status: Be16,
    _rsvd1: [u8; 0x3A],
    pub data: [u8; 0xC0],
}
assert_layout!(MadIfc, 0x100, status = 0x04, data = 0x40);
