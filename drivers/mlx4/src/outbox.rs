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

/// QUERY_DEV_CAP output (§2.4): the fields the driver uses, up to the maximum ICM size. Single
/// bytes are logs or nibbles as the table says.
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
    _rsvd3: u8,
    pub log_rsvd_mrws: u8,
    _rsvd4: [u8; 3],
    /// Low 12 bits.
    pub num_sys_eqs: Be16,
    _rsvd5: u8,
    pub log_max_rd_req: u8,
    _rsvd6: u8,
    pub log_max_rd_res: u8,
    _rsvd7: [u8; 9],
    pub local_ca_ack_delay: u8,
    _rsvd8: u8,
    /// Low nibble: number of ports.
    pub num_ports: u8,
    pub log_max_msg: u8,
    _rsvd9: [u8; 7],
    /// Flags bits 63:32.
    pub flags_hi: Be32,
    /// Flags bits 31:0.
    pub flags_lo: Be32,
    /// High nibble: reserved UARs (a count).
    pub rsvd_uars: u8,
    /// Low 6 bits: log2(UAR area size) − 20.
    pub uar_size: u8,
    _rsvd10: u8,
    pub log_min_page_sz: u8,
    /// Bit 7: BlueFlame supported.
    pub bf: u8,
    pub log_bf_reg_sz: u8,
    pub log_bf_regs_per_page: u8,
    _rsvd11: [u8; 2],
    pub max_sq_sg: u8,
    pub max_sq_desc_sz: Be16,
    _rsvd12: u8,
    pub max_rq_sg: u8,
    pub max_rq_desc_sz: Be16,
    _rsvd13: [u8; 0x0C],
    /// High nibble: reserved PDs (a count).
    pub rsvd_pds: u8,
    pub log_max_pds: u8,
    _rsvd14: [u8; 2],
    pub max_counters: Be32,
    _rsvd15: [u8; 4],
    pub ext2_flags: Be32,
    _rsvd16: [u8; 0x0C],
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
    pub bmme_flags: Be32,
    pub reserved_lkey: Be32,
    _rsvd17: [u8; 4],
    pub max_icm_sz: Be64,
}
assert_layout!(
    QueryDevCap,
    0xA8,
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
    log_rsvd_mrws = 0x22,
    num_sys_eqs = 0x26,
    log_max_rd_req = 0x29,
    log_max_rd_res = 0x2B,
    local_ca_ack_delay = 0x35,
    num_ports = 0x37,
    log_max_msg = 0x38,
    flags_hi = 0x40,
    flags_lo = 0x44,
    rsvd_uars = 0x48,
    uar_size = 0x49,
    log_min_page_sz = 0x4B,
    bf = 0x4C,
    log_bf_reg_sz = 0x4D,
    log_bf_regs_per_page = 0x4E,
    max_sq_sg = 0x51,
    max_sq_desc_sz = 0x52,
    max_rq_sg = 0x55,
    max_rq_desc_sz = 0x56,
    rsvd_pds = 0x64,
    log_max_pds = 0x65,
    max_counters = 0x68,
    ext2_flags = 0x70,
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
    max_icm_sz = 0xA0,
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
