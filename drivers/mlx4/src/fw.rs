//! Firmware commands: QUERY_FW, MAP_FA/RUN_FW, QUERY_DEV_CAP, QUERY_ADAPTER, and the page-list
//! commands shared with ICM (docs/hardware.md §1.5, §2.4, §3.3).

use alloc::vec::Vec;

use crate::error::Error;
use crate::outbox;
use crate::platform::{Bar, DmaRegion, Platform};
use crate::regs::Opcode;
use crate::Hca;

/// QUERY_FW output (§1.5).
#[derive(Clone, Copy, Debug, Default)]
pub struct FwInfo {
    pub fw_pages: u32,
    pub major: u16,
    pub minor: u16,
    pub subminor: u16,
    pub cmd_if_rev: u16,
    pub log_max_cmds: u8,
    pub clr_int_base: u64,
    pub clr_int_bar: u8,
    pub catas_offset: u64,
    pub catas_size_dwords: u32,
    pub catas_bar: u8,
}

impl FwInfo {
    pub fn parse(o: &outbox::QueryFw) -> Self {
        FwInfo {
            fw_pages: u32::from(o.fw_pages.get()),
            major: o.fw_rev_major.get(),
            subminor: o.fw_rev_subminor.get(),
            minor: o.fw_rev_minor.get(),
            cmd_if_rev: o.cmd_if_rev.get(),
            log_max_cmds: o.log_max_cmds,
            clr_int_base: o.clr_int_base.get(),
            clr_int_bar: (o.clr_int_bar >> 6) * 2,
            catas_offset: o.catas_offset.get(),
            catas_size_dwords: o.catas_size.get(),
            catas_bar: (o.catas_bar >> 6) * 2,
        }
    }
}

/// Bytes of each query's output the driver keeps for reports (the whole QUERY_DEV_CAP output).
pub const RAW_QUERY_BYTES: usize = 0x100;

/// The outputs of the firmware's queries at bring-up, as the firmware wrote them, for the
/// capability report (`mode=diag`): a bug report carries what the card said, not only what
/// the driver made of it.
#[derive(Clone, Debug)]
pub struct RawQueries {
    pub fw: [u8; RAW_QUERY_BYTES],
    pub dev_cap: [u8; RAW_QUERY_BYTES],
    pub adapter: [u8; RAW_QUERY_BYTES],
    /// SYS_EQS mode only.
    pub func: Option<[u8; RAW_QUERY_BYTES]>,
}

impl Default for RawQueries {
    fn default() -> Self {
        RawQueries {
            fw: [0; RAW_QUERY_BYTES],
            dev_cap: [0; RAW_QUERY_BYTES],
            adapter: [0; RAW_QUERY_BYTES],
            func: None,
        }
    }
}

/// Most dwords of the catastrophic error buffer the driver reads (§1.6; the size is QUERY_FW's).
pub const CATAS_MAX_DWORDS: usize = 64;

/// The catastrophic error buffer as read (§1.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CatasBuffer {
    words: [u32; CATAS_MAX_DWORDS],
    len: usize,
}

impl CatasBuffer {
    /// The dwords read, host order.
    pub fn words(&self) -> &[u32] {
        &self.words[..self.len]
    }

    /// Whether the device reports an internal error (a non-zero first dword).
    pub fn is_error(&self) -> bool {
        self.words().first().is_some_and(|&w| w != 0)
    }
}

/// QUERY_DEV_CAP output, decoded (§2.4) as Linux's `mlx4_QUERY_DEV_CAP` decodes it. Counts
/// are numbers, not logs.
#[derive(Clone, Copy, Debug, Default)]
pub struct DevCaps {
    pub max_qp_sz: u32,
    pub reserved_qps: u32,
    pub max_qps: u32,
    pub reserved_srqs: u32,
    pub max_srqs: u32,
    /// Max WQEs of an SRQ (0x10).
    pub max_srq_wqes: u32,
    pub max_cqes: u32,
    pub reserved_cqs: u32,
    pub max_cqs: u32,
    pub max_mpts: u32,
    /// Reserved EQs: the firmware's count, raised to `reserved_uars × 4` unless the device
    /// is in SYS_EQS mode (Linux: each reserved UAR page holds four EQ doorbells); in SYS_EQS
    /// mode QUERY_FUNC replaces it after INIT_HCA.
    pub reserved_eqs: u32,
    pub max_eqs: u32,
    pub reserved_mtts: u32,
    /// log2 of the largest MR (0x21).
    pub log_max_mrw_sz: u8,
    pub reserved_mrws: u32,
    /// log2 of the MTT segments (0x23).
    pub log_max_mtt_seg: u8,
    /// Non-zero: SYS_EQS mode (`flag2::SYS_EQS`).
    pub num_sys_eqs: u16,
    pub log_max_rd_req: u8,
    pub log_max_rd_res: u8,
    /// Max GSO size in bytes (0: none).
    pub max_gso_sz: u32,
    /// RSS indirection table size (0: no RSS).
    pub max_rss_tbl_sz: u32,
    pub max_rdma_global: u32,
    pub resize_srq: bool,
    pub local_ca_ack_delay: u8,
    pub num_ports: u8,
    pub log_max_msg: u8,
    /// Static-rate codes the device supports (bit k = code k, 0x3C).
    pub stat_rate_support: u16,
    pub flags: u64,
    /// The capabilities Linux gathers from the other fields into `dev_cap->flags2`
    /// ([`flag2`]).
    pub flags2: u64,
    pub reserved_uars: u32,
    pub uar_size: u64,
    pub min_page_sz: u64,
    pub bf: bool,
    pub bf_reg_size: u32,
    pub bf_regs_per_page: u32,
    pub log_max_bf_pages: u8,
    pub max_sq_sg: u32,
    pub max_sq_desc_sz: u32,
    pub max_rq_sg: u32,
    pub max_rq_desc_sz: u32,
    pub max_qp_per_mcg: u32,
    pub reserved_mcgs: u32,
    pub max_mcgs: u32,
    pub reserved_pds: u32,
    pub max_pds: u32,
    /// Reserved XRC domains (0x66 high nibble) and the maximum (0x67), as reported; Linux
    /// takes them only with flag bit 3 (XRC), see [`DevCaps::xrcd_for_srq`].
    pub reserved_xrcds: u32,
    pub max_xrcds: u32,
    pub rdmarc_entry_sz: u32,
    pub qpc_entry_sz: u32,
    pub auxc_entry_sz: u32,
    pub altc_entry_sz: u32,
    pub eqc_entry_sz: u32,
    pub cqc_entry_sz: u32,
    pub srq_entry_sz: u32,
    pub cmpt_entry_sz: u32,
    pub mtt_entry_sz: u32,
    pub dmpt_entry_sz: u32,
    pub bmme_flags: u32,
    pub reserved_lkey: u32,
    pub max_icm_sz: u64,
    pub ext2_flags: u32,
    /// Flow-steering limits (0x76 low bits, 0x77).
    pub fs_log_max_ucast_qp_range: u8,
    pub fs_max_qp_per_entry: u8,
    pub dmfs_high_rate_qpn_base: u32,
    pub dmfs_high_rate_qpn_range: u32,
    /// QP rate limiting (0xCC, 0xD0, 0xD2): number of rates, max and min (value and unit).
    pub qp_rate_limit: [u16; 3],
    pub health_buffer: u32,
    /// Number of flow counters (QUERY_DEV_CAP 0x68, read only when flag bit 48 is set, as
    /// Linux's `mlx4_QUERY_DEV_CAP` does); 0 without counter support.
    pub max_counters: u32,
    /// Each port's QUERY_PORT output, read at bring-up (index = port − 1).
    pub ports: [crate::port::QueryPort; 2],
    /// Each port's uplink GUID (MOD_STAT_CFG op_mod 2), 0 if the firmware did not give it.
    pub uplink_guid: [u64; 2],
}

/// Flag bits of the 64-bit QUERY_DEV_CAP flags (§2.4), Linux's `MLX4_DEV_CAP_FLAG_*`.
pub mod flag {
    pub const RC: u64 = 1 << 0;
    pub const UC: u64 = 1 << 1;
    pub const UD: u64 = 1 << 2;
    pub const XRC: u64 = 1 << 3;
    pub const SRQ: u64 = 1 << 6;
    pub const IPOIB_CSUM: u64 = 1 << 7;
    pub const MEM_WINDOW: u64 = 1 << 16;
    pub const ATOMIC: u64 = 1 << 18;
    pub const UD_AV_PORT: u64 = 1 << 20;
    pub const VEP_UC_STEER: u64 = 1 << 41;
    pub const VEP_MC_STEER: u64 = 1 << 42;
    /// Basic flow counters (Linux `MLX4_DEV_CAP_FLAG_COUNTERS`).
    pub const COUNTERS: u64 = 1 << 48;
    pub const RSS_IP_FRAG: u64 = 1 << 52;
    pub const PORT_MNG_CHG_EV: u64 = 1 << 59;
    pub const EQE_64B: u64 = 1 << 61;
    pub const CQE_64B: u64 = 1 << 62;

    /// Each flag by Linux's name (`MLX4_DEV_CAP_FLAG_<name>`), for reports.
    pub const NAMES: &[(u64, &str)] = &[
        (RC, "RC"),
        (UC, "UC"),
        (UD, "UD"),
        (XRC, "XRC"),
        (SRQ, "SRQ"),
        (IPOIB_CSUM, "IPOIB_CSUM"),
        (1 << 8, "BAD_PKEY_CNTR"),
        (1 << 9, "BAD_QKEY_CNTR"),
        (1 << 12, "DPDP"),
        (1 << 15, "BLH"),
        (MEM_WINDOW, "MEM_WINDOW"),
        (1 << 17, "APM"),
        (ATOMIC, "ATOMIC"),
        (1 << 19, "RAW_MCAST"),
        (UD_AV_PORT, "UD_AV_PORT"),
        (1 << 21, "UD_MCAST"),
        (1 << 30, "IBOE"),
        (1 << 32, "UC_LOOPBACK"),
        (1 << 34, "FCS_KEEP"),
        (1 << 37, "WOL_PORT1"),
        (1 << 38, "WOL_PORT2"),
        (1 << 40, "UDP_RSS"),
        (VEP_UC_STEER, "VEP_UC_STEER"),
        (VEP_MC_STEER, "VEP_MC_STEER"),
        (COUNTERS, "COUNTERS"),
        (RSS_IP_FRAG, "RSS_IP_FRAG"),
        (1 << 53, "SET_ETH_SCHED"),
        (1 << 55, "SENSE_SUPPORT"),
        (PORT_MNG_CHG_EV, "PORT_MNG_CHG_EV"),
        (EQE_64B, "64B_EQE"),
        (CQE_64B, "64B_CQE"),
    ];
}

/// The capabilities Linux's `mlx4_QUERY_DEV_CAP` gathers from single bits all over the output
/// into `dev_cap->flags2`, at Linux's bit positions (`MLX4_DEV_CAP_FLAG2_<name>`,
/// include/linux/mlx4/device.h; FS_A0, bit 19, is derived later from the steering mode and is
/// not here); [`flag2::SOURCES`] says where each comes from.
pub mod flag2 {
    pub const RSS: u64 = 1 << 0;
    pub const RSS_TOP: u64 = 1 << 1;
    pub const RSS_XOR: u64 = 1 << 2;
    pub const FS_EN: u64 = 1 << 3;
    pub const REASSIGN_MAC_EN: u64 = 1 << 4;
    pub const TS: u64 = 1 << 5;
    pub const VLAN_CONTROL: u64 = 1 << 6;
    pub const FSM: u64 = 1 << 7;
    pub const UPDATE_QP: u64 = 1 << 8;
    pub const DMFS_IPOIB: u64 = 1 << 9;
    pub const VXLAN_OFFLOADS: u64 = 1 << 10;
    pub const MAD_DEMUX: u64 = 1 << 11;
    pub const CQE_STRIDE: u64 = 1 << 12;
    pub const EQE_STRIDE: u64 = 1 << 13;
    pub const ETH_PROT_CTRL: u64 = 1 << 14;
    pub const ETH_BACKPL_AN_REP: u64 = 1 << 15;
    pub const CONFIG_DEV: u64 = 1 << 16;
    pub const SYS_EQS: u64 = 1 << 17;
    pub const VFS_80: u64 = 1 << 18;
    pub const RECOVERABLE_ERROR_EVENT: u64 = 1 << 20;
    pub const PORT_REMAP: u64 = 1 << 21;
    pub const QCN: u64 = 1 << 22;
    pub const QP_RATE_LIMIT: u64 = 1 << 23;
    pub const FLOWSTATS_EN: u64 = 1 << 24;
    pub const QOS_VPP: u64 = 1 << 25;
    pub const ETS_CFG: u64 = 1 << 26;
    pub const PORT_BEACON: u64 = 1 << 27;
    pub const IGNORE_FCS: u64 = 1 << 28;
    pub const PHV_EN: u64 = 1 << 29;
    pub const SKIP_OUTER_VLAN: u64 = 1 << 30;
    pub const UPDATE_QP_SRC_CHECK_LB: u64 = 1 << 31;
    pub const LB_SRC_CHK: u64 = 1 << 32;
    pub const ROCE_V1_V2: u64 = 1 << 33;
    pub const DMFS_UC_MC_SNIFFER: u64 = 1 << 34;
    pub const DIAG_PER_PORT: u64 = 1 << 35;
    pub const SVLAN_BY_QP: u64 = 1 << 36;
    pub const SL_TO_VL_CHANGE_EVENT: u64 = 1 << 37;
    pub const USER_MAC_EN: u64 = 1 << 38;
    pub const DRIVER_VERSION_TO_FW: u64 = 1 << 39;
    pub const SW_CQ_INIT: u64 = 1 << 40;

    /// Each capability: its bit here, Linux's name, and where QUERY_DEV_CAP reports it
    /// (byte offset of the field and the bit in it, counting the field as one big-endian
    /// value of its width: 1, 2 or 4 bytes).
    pub const SOURCES: &[(u64, &str, usize, usize, u32)] = &[
        (RSS, "RSS", 0x2E, 1, u32::MAX),
        (RSS_TOP, "RSS_TOP", 0x2E, 1, 4),
        (RSS_XOR, "RSS_XOR", 0x2E, 1, 5),
        (FS_EN, "FS_EN", 0x76, 1, 7),
        (REASSIGN_MAC_EN, "REASSIGN_MAC_EN", 0x9D, 1, 6),
        (TS, "TS", 0x3E, 1, 7),
        (VLAN_CONTROL, "VLAN_CONTROL", 0x70, 4, 26),
        (FSM, "FSM", 0x70, 4, 20),
        (UPDATE_QP, "UPDATE_QP", 0x70, 4, 16),
        (DMFS_IPOIB, "DMFS_IPOIB", 0x74, 1, 7),
        (VXLAN_OFFLOADS, "VXLAN_OFFLOADS", 0x9E, 1, 3),
        (MAD_DEMUX, "MAD_DEMUX", 0xB0, 4, 0),
        (CQE_STRIDE, "CQE_STRIDE", 0x7A, 1, 6),
        (EQE_STRIDE, "EQE_STRIDE", 0x7A, 1, 7),
        (ETH_PROT_CTRL, "ETH_PROT_CTRL", 0x7A, 1, 5),
        (ETH_BACKPL_AN_REP, "ETH_BACKPL_AN_REP", 0x9C, 4, 0),
        (CONFIG_DEV, "CONFIG_DEV", 0x94, 1, 5),
        (SYS_EQS, "SYS_EQS", 0x26, 2, u32::MAX),
        (VFS_80, "80_VFS", 0x70, 4, 21),
        (
            RECOVERABLE_ERROR_EVENT,
            "RECOVERABLE_ERROR_EVENT",
            0x9C,
            4,
            7,
        ),
        (PORT_REMAP, "PORT_REMAP", 0x94, 4, 24),
        (QCN, "QCN", 0x7B, 1, 0),
        (QP_RATE_LIMIT, "QP_RATE_LIMIT", 0xCC, 2, u32::MAX),
        (FLOWSTATS_EN, "FLOWSTATS_EN", 0x70, 1, 4),
        (QOS_VPP, "QOS_VPP", 0x7A, 1, 4),
        (ETS_CFG, "ETS_CFG", 0x9E, 1, 5),
        (PORT_BEACON, "PORT_BEACON", 0x34, 1, 7),
        (IGNORE_FCS, "IGNORE_FCS", 0x94, 1, 2),
        (PHV_EN, "PHV_EN", 0x96, 1, 7),
        (SKIP_OUTER_VLAN, "SKIP_OUTER_VLAN", 0x96, 1, 6),
        (
            UPDATE_QP_SRC_CHECK_LB,
            "UPDATE_QP_SRC_CHECK_LB",
            0x70,
            4,
            18,
        ),
        (LB_SRC_CHK, "LB_SRC_CHK", 0x70, 4, 19),
        (ROCE_V1_V2, "ROCE_V1_V2", 0x94, 4, 19),
        (DMFS_UC_MC_SNIFFER, "DMFS_UC_MC_SNIFFER", 0x76, 1, 5),
        (DIAG_PER_PORT, "DIAG_PER_PORT", 0x9C, 4, 17),
        (SVLAN_BY_QP, "SVLAN_BY_QP", 0x5D, 1, 0),
        (SL_TO_VL_CHANGE_EVENT, "SL_TO_VL_CHANGE_EVENT", 0x78, 1, 5),
        (USER_MAC_EN, "USER_MAC_EN", 0x5C, 1, 2),
        (DRIVER_VERSION_TO_FW, "DRIVER_VERSION_TO_FW", 0x9C, 4, 8),
        (SW_CQ_INIT, "SW_CQ_INIT", 0x70, 4, 23),
    ];
}

impl DevCaps {
    pub fn parse(o: &outbox::QueryDevCap) -> Self {
        let pow = |v: u8| 1u32.checked_shl(v as u32).unwrap_or(0);
        let reserved_uars = u32::from(o.rsvd_uars >> 4);
        let num_sys_eqs = o.num_sys_eqs.get() & 0xFFF;
        let fw_rsvd_eqs = pow(o.log_rsvd_eqs & 0xF);
        let flags = (u64::from(o.flags_hi.get()) << 32) | u64::from(o.flags_lo.get());
        let entry = |v: crate::be::Be16| u32::from(v.get());
        let bytes = zerocopy::IntoBytes::as_bytes(o);
        let mut flags2 = 0;
        for &(f, _, off, width, bit) in flag2::SOURCES {
            let v = bytes[off..off + width]
                .iter()
                .fold(0u32, |v, &b| (v << 8) | u32::from(b));
            let set = match bit {
                // The whole field: non-zero (a count or a table size).
                u32::MAX if f == flag2::RSS => v & 0xF != 0,
                u32::MAX if f == flag2::SYS_EQS => v & 0xFFF != 0,
                u32::MAX => v != 0,
                b => v & (1 << b) != 0,
            };
            if set {
                flags2 |= f;
            }
        }
        let gso = o.log_max_gso & 0x1F;
        let rss = o.rss & 0xF;
        DevCaps {
            max_qp_sz: pow(o.log_max_qp_sz),
            reserved_qps: pow(o.log_rsvd_qps & 0xF),
            max_qps: pow(o.log_max_qps & 0x1F),
            reserved_srqs: pow(o.log_rsvd_srqs >> 4),
            max_srqs: pow(o.log_max_srqs & 0x1F),
            max_srq_wqes: pow(o.log_max_srq_sz),
            max_cqes: pow(o.log_max_cq_sz),
            reserved_cqs: pow(o.log_rsvd_cqs & 0xF),
            max_cqs: pow(o.log_max_cqs & 0x1F),
            max_mpts: pow(o.log_max_mpts & 0x3F),
            reserved_eqs: if num_sys_eqs == 0 {
                fw_rsvd_eqs.max(reserved_uars * 4)
            } else {
                fw_rsvd_eqs
            },
            max_eqs: pow(o.log_max_eqs & 0xF),
            reserved_mtts: pow(o.log_rsvd_mtts >> 4),
            log_max_mrw_sz: o.log_max_mrw_sz,
            reserved_mrws: pow(o.log_rsvd_mrws & 0xF),
            log_max_mtt_seg: o.log_max_mtt_seg,
            num_sys_eqs,
            log_max_rd_req: o.log_max_rd_req & 0x3F,
            log_max_rd_res: o.log_max_rd_res & 0x3F,
            max_gso_sz: if gso == 0 { 0 } else { pow(gso) },
            max_rss_tbl_sz: if rss == 0 { 0 } else { pow(rss) },
            max_rdma_global: pow(o.log_max_rdma & 0x3F),
            resize_srq: o.resize_srq & 1 != 0,
            local_ca_ack_delay: o.local_ca_ack_delay & 0x1F,
            num_ports: o.num_ports & 0xF,
            log_max_msg: o.log_max_msg & 0x1F,
            stat_rate_support: o.stat_rate_support.get(),
            flags,
            flags2,
            reserved_uars,
            uar_size: 1u64 << (u32::from(o.uar_size & 0x3F) + 20),
            min_page_sz: 1u64 << (o.log_min_page_sz & 0x3F),
            bf: o.bf & 0x80 != 0,
            bf_reg_size: pow(o.log_bf_reg_sz & 0x1F),
            bf_regs_per_page: pow(o.log_bf_regs_per_page & 0x3F),
            log_max_bf_pages: o.log_max_bf_pages,
            max_sq_sg: u32::from(o.max_sq_sg),
            max_sq_desc_sz: entry(o.max_sq_desc_sz),
            max_rq_sg: u32::from(o.max_rq_sg),
            max_rq_desc_sz: entry(o.max_rq_desc_sz),
            max_qp_per_mcg: pow(o.log_max_qp_mcg),
            reserved_mcgs: u32::from(o.rsvd_mcgs & 0xF),
            max_mcgs: pow(o.log_max_mcgs),
            reserved_pds: u32::from(o.rsvd_pds >> 4),
            max_pds: pow(o.log_max_pds & 0x3F),
            reserved_xrcds: u32::from(o.rsvd_xrcds >> 4),
            max_xrcds: pow(o.log_max_xrcds & 0x1F),
            rdmarc_entry_sz: entry(o.rdmarc_entry_sz),
            qpc_entry_sz: entry(o.qpc_entry_sz),
            auxc_entry_sz: entry(o.auxc_entry_sz),
            altc_entry_sz: entry(o.altc_entry_sz),
            eqc_entry_sz: entry(o.eqc_entry_sz),
            cqc_entry_sz: entry(o.cqc_entry_sz),
            srq_entry_sz: entry(o.srq_entry_sz),
            cmpt_entry_sz: entry(o.cmpt_entry_sz),
            mtt_entry_sz: entry(o.mtt_entry_sz),
            dmpt_entry_sz: entry(o.dmpt_entry_sz),
            bmme_flags: o.bmme_flags.get(),
            reserved_lkey: o.reserved_lkey.get(),
            max_icm_sz: o.max_icm_sz.get(),
            ext2_flags: o.ext2_flags.get(),
            fs_log_max_ucast_qp_range: o.fs_range_en & 0x1F,
            fs_max_qp_per_entry: o.fs_max_qp,
            dmfs_high_rate_qpn_base: o.dmfs_high_rate_qpn_base.get() & 0xFF_FFFF,
            dmfs_high_rate_qpn_range: o.dmfs_high_rate_qpn_range.get() & 0xFF_FFFF,
            qp_rate_limit: [
                o.qp_rate_limit_num.get(),
                o.qp_rate_limit_max.get(),
                o.qp_rate_limit_min.get(),
            ],
            health_buffer: o.health_buffer.get(),
            max_counters: if flags & flag::COUNTERS != 0 {
                o.max_counters.get()
            } else {
                0
            },
            ports: Default::default(),
            uplink_guid: [0; 2],
        }
    }

    /// Number of UAR pages in BAR2's UAR area.
    pub fn num_uars(&self) -> u32 {
        (self.uar_size / 4096) as u32
    }

    /// The static rate (an IB rate code, 0 = the port's rate) an address vector or path gets
    /// for the requested `rate`: lowered, as Linux's mlx4_ib does (`create_ib_ah`,
    /// `_mlx4_set_path`), until the device supports it (`stat_rate_support` bit rate + 5) or it
    /// reaches 2.5 Gb/s (code 2).
    pub fn supported_static_rate(&self, rate: u8) -> u8 {
        const OFFSET: u8 = 5;
        const RATE_2_5_GBPS: u8 = 2;
        let mut r = rate;
        while r > RATE_2_5_GBPS
            && self.stat_rate_support & (1u16.checked_shl(u32::from(r + OFFSET)).unwrap_or(0)) == 0
        {
            r -= 1;
        }
        r
    }

    /// Whether QUERY_DEV_CAP reported flag2 capability `f`.
    pub fn has2(&self, f: u64) -> bool {
        self.flags2 & f != 0
    }

    /// The XRC domain a basic SRQ names: Linux's `mlx4_ib_create_srq` gives it the device's
    /// reserved XRC domains count (`caps.reserved_xrcds`, 0 unless flag bit 3, XRC, is set).
    pub fn xrcd_for_srq(&self) -> u16 {
        if self.flags & flag::XRC != 0 {
            self.reserved_xrcds as u16
        } else {
            0
        }
    }
}

/// QUERY_FUNC output (§2.3), issued after INIT_HCA in SYS_EQS mode (Linux `mlx4_QUERY_FUNC`
/// from `mlx4_query_func`): the EQs and UARs of this function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuncInfo {
    pub bus: u8,
    pub device: u8,
    pub function: u8,
    pub physical_function: u8,
    pub rsvd_eqs: u32,
    pub max_eqs: u32,
    pub rsvd_uars: u32,
}

impl FuncInfo {
    pub fn parse(o: &outbox::QueryFunc) -> Self {
        FuncInfo {
            bus: o.bus & 0xF,
            device: o.device_function & 0xF1,
            function: o.device_function & 0x7,
            physical_function: o.physical_function & 0xF,
            rsvd_eqs: u32::from(o.rsvd_eqs.get()),
            max_eqs: u32::from(o.max_eqs.get()),
            rsvd_uars: u32::from(o.rsvd_uars & 0xF),
        }
    }
}

/// QUERY_ADAPTER output (§2.3).
#[derive(Clone, Copy, Debug, Default)]
pub struct AdapterInfo {
    pub inta_pin: u8,
    pub board_id: [u8; 16],
}

impl AdapterInfo {
    pub fn parse(o: &outbox::QueryAdapter) -> Self {
        let mut board_id = [0u8; 16];
        // Each 4-byte word of the board ID is byte-swapped.
        for (dst, w) in board_id.as_chunks_mut::<4>().0.iter_mut().zip(&o.board_id) {
            *dst = w.get().to_le_bytes();
        }
        AdapterInfo {
            inta_pin: o.inta_pin,
            board_id,
        }
    }
}

/// Split `[addr, addr + len)` into naturally aligned power-of-two pieces of at most
/// `1 << max_log` bytes (§3.3: each chunk is a power of two ≥ 4 KiB, aligned to its size).
/// Returns (address, log2 size) pairs.
pub fn pow2_pieces(mut addr: u64, len: u64, max_log: u32) -> impl Iterator<Item = (u64, u32)> {
    let end = addr + len;
    core::iter::from_fn(move || {
        if addr >= end {
            return None;
        }
        let align_log = if addr == 0 { 63 } else { addr.trailing_zeros() };
        let fit_log = 63 - (end - addr).leading_zeros();
        let lg = align_log.min(fit_log).min(max_log);
        let piece = (addr, lg);
        addr += 1u64 << lg;
        Some(piece)
    })
}

/// One page-list entry of MAP_FA / MAP_ICM_AUX / MAP_ICM (§3.3).
#[derive(Clone, Copy, Debug)]
pub struct PageEntry {
    pub va: u64,
    pub pa: u64,
    pub log_size: u32,
}

/// Largest chunk the driver allocates for firmware/ICM memory (Linux MLX4_ICM_ALLOC_SIZE).
pub const CHUNK_LOG: u32 = 18;

impl<P: Platform> Hca<P> {
    /// Issue `op` with page-list mailboxes, 256 entries per command (§3.3).
    pub(crate) fn map_pages(&mut self, op: Opcode, entries: &[PageEntry]) -> Result<(), Error> {
        for batch in entries.chunks(256) {
            let b = self.cmd.inbox_clear();
            if b.len() < batch.len() * 16 {
                return Err(Error::NoMemory("command mailbox"));
            }
            // FA and aux pages have no ICM address: Linux's `mlx4_map_cmd` leaves the VA
            // dword of their entries 0 (it passes virt = -1); only MAP_ICM carries VAs.
            let with_va = !matches!(op, Opcode::MAP_FA | Opcode::MAP_ICM_AUX);
            for (i, e) in batch.iter().enumerate() {
                let o = i * 16;
                let va = if with_va { e.va } else { 0 };
                b[o..o + 8].copy_from_slice(&va.to_be_bytes());
                let pa = e.pa | (e.log_size as u64 - 12);
                b[o + 8..o + 16].copy_from_slice(&pa.to_be_bytes());
            }
            self.cmd_in(op, batch.len() as u32, 0)?;
        }
        Ok(())
    }

    /// Allocate `bytes` (a multiple of 4 KiB) of device-private memory as naturally aligned
    /// chunks of at most 256 KiB, appending the regions to `out` and returning page entries
    /// with `va` counting from `va_base`.
    pub(crate) fn alloc_chunks(
        &self,
        va_base: u64,
        bytes: u64,
        out: &mut Vec<DmaRegion>,
        what: &'static str,
    ) -> Result<Vec<PageEntry>, Error> {
        let mut entries = Vec::new();
        for (off, lg) in pow2_pieces(0, bytes, CHUNK_LOG) {
            let size = 1usize << lg;
            let r = self.p.dma_alloc(size, size).ok_or(Error::NoMemory(what))?;
            // Split again by the bus address in case the platform aligned more loosely.
            let bus = r.bus();
            out.push(r);
            for (pa, plg) in pow2_pieces(bus, size as u64, lg) {
                if plg < 12 {
                    return Err(Error::NoMemory("DMA memory not 4 KiB aligned"));
                }
                entries.push(PageEntry {
                    va: va_base + off + (pa - bus),
                    pa,
                    log_size: plg,
                });
            }
        }
        Ok(entries)
    }

    /// Read the catastrophic error buffer (§1.6) that QUERY_FW located: at most
    /// [`CATAS_MAX_DWORDS`] dwords (a longer buffer is cut there).
    pub fn read_catas(&self) -> CatasBuffer {
        let mut buf = CatasBuffer {
            words: [0; CATAS_MAX_DWORDS],
            len: (self.fw.catas_size_dwords as usize).min(CATAS_MAX_DWORDS),
        };
        let (bar, offset, _) = self.catas_location();
        let base = offset as usize;
        for (i, w) in buf.words[..buf.len].iter_mut().enumerate() {
            *w = u32::from_be(self.p.mmio_read32(bar, base + 4 * i));
        }
        buf
    }

    /// §1.6: a non-zero first dword of the catastrophic error buffer means the device had an
    /// internal error (Linux polls it every 5 s and resets the device). Reads that one dword;
    /// returns [`Error::InternalError`] with it.
    pub fn check_catas(&self) -> Result<(), Error> {
        let (bar, offset, len) = self.catas_location();
        if len == 0 {
            return Ok(());
        }
        match u32::from_be(self.p.mmio_read32(bar, offset as usize)) {
            0 => Ok(()),
            syndrome => Err(Error::InternalError { syndrome }),
        }
    }

    /// Where QUERY_FW put the catastrophic error buffer: BAR, offset and length in bytes.
    pub fn catas_location(&self) -> (Bar, u64, u64) {
        let bar = if self.fw.catas_bar == 0 {
            Bar::Dcs
        } else {
            Bar::Uar
        };
        (
            bar,
            self.fw.catas_offset,
            u64::from(self.fw.catas_size_dwords) * 4,
        )
    }

    /// The first [`RAW_QUERY_BYTES`] of the output mailbox, as the command just left it.
    fn raw_output(&self) -> [u8; RAW_QUERY_BYTES] {
        let mut raw = [0; RAW_QUERY_BYTES];
        let out = self.cmd.outbox();
        let n = out.len().min(RAW_QUERY_BYTES);
        raw[..n].copy_from_slice(&out[..n]);
        raw
    }

    pub(crate) fn query_fw(&mut self) -> Result<FwInfo, Error> {
        self.cmd_out(Opcode::QUERY_FW, 0, 0, 0)?;
        self.raw.fw = self.raw_output();
        Ok(FwInfo::parse(self.cmd.out_view()?))
    }

    pub(crate) fn query_dev_cap(&mut self) -> Result<DevCaps, Error> {
        self.cmd_out(Opcode::QUERY_DEV_CAP, 0, 0, 0)?;
        self.raw.dev_cap = self.raw_output();
        Ok(DevCaps::parse(self.cmd.out_view()?))
    }

    pub(crate) fn query_func(&mut self) -> Result<FuncInfo, Error> {
        self.cmd_out(Opcode::QUERY_FUNC, 0, 0, 0)?;
        self.raw.func = Some(self.raw_output());
        Ok(FuncInfo::parse(self.cmd.out_view()?))
    }

    pub(crate) fn query_adapter(&mut self) -> Result<AdapterInfo, Error> {
        self.cmd_out(Opcode::QUERY_ADAPTER, 0, 0, 0)?;
        self.raw.adapter = self.raw_output();
        Ok(AdapterInfo::parse(self.cmd.out_view()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::{FromBytes, Immutable, KnownLayout};

    /// A mailbox image viewed as a command's output.
    fn view<T: FromBytes + KnownLayout + Immutable>(b: &[u8]) -> &T {
        T::ref_from_prefix(b).expect("long enough").0
    }

    #[test]
    fn pieces_are_naturally_aligned_powers_of_two_covering_the_range() {
        for &(addr, len) in &[
            (0u64, 0x5000u64),
            (0x3000, 0x11000),
            (0x40000, 0x80000),
            (0x1000, 0x1000),
            (0x7000, 0x123000),
        ] {
            let mut next = addr;
            for (a, lg) in pow2_pieces(addr, len, CHUNK_LOG) {
                assert_eq!(a, next, "contiguous");
                assert!((12..=CHUNK_LOG).contains(&lg));
                assert_eq!(a & ((1 << lg) - 1), 0, "natural alignment");
                next = a + (1 << lg);
            }
            assert_eq!(next, addr + len);
        }
        let v: Vec<_> = pow2_pieces(0x3000, 0x5000, 18).collect();
        assert_eq!(v, [(0x3000, 12), (0x4000, 14)]);
        let v: Vec<_> = pow2_pieces(0, 0x100000, 18).count().to_be_bytes().to_vec();
        assert_eq!(v, 4usize.to_be_bytes().to_vec());
    }

    #[test]
    fn query_fw_decodes_version_and_bars() {
        let mut b = [0u8; 256];
        b[0..8].copy_from_slice(&0x0010_0002_1388_002Au64.to_be_bytes());
        b[0x0A..0x0C].copy_from_slice(&3u16.to_be_bytes());
        b[0x0F] = 4;
        b[0x20..0x28].copy_from_slice(&0x8_2000u64.to_be_bytes());
        b[0x28] = 0x40;
        let f = FwInfo::parse(view(&b));
        assert_eq!(f.fw_pages, 0x10);
        assert_eq!((f.major, f.minor, f.subminor), (2, 42, 5000));
        assert_eq!(f.cmd_if_rev, 3);
        assert_eq!(f.log_max_cmds, 4);
        assert_eq!(f.clr_int_base, 0x8_2000);
        assert_eq!(f.clr_int_bar, 2);
    }

    #[test]
    fn dev_cap_decodes_logs_counts_and_the_uar_rule() {
        let mut b = [0u8; 256];
        b[0x12] = 6; // 64 reserved QPs
        b[0x13] = 0x11;
        b[0x1E] = 2; // 4 reserved EQs from FW
        b[0x48] = 8 << 4; // 8 reserved UARs -> 32 EQs
        b[0x49] = 2; // 4 MiB UAR area
        b[0x4C] = 0x80;
        b[0x4D] = 9;
        b[0x4E] = 3;
        b[0x82..0x84].copy_from_slice(&256u16.to_be_bytes());
        b[0x98..0x9C].copy_from_slice(&0x100u32.to_be_bytes());
        b[0x44..0x48].copy_from_slice(&0x0010_0007u32.to_be_bytes());
        let c = DevCaps::parse(view(&b));
        assert_eq!(c.reserved_qps, 64);
        assert_eq!(c.max_qps, 1 << 17);
        assert_eq!(c.reserved_eqs, 32);
        assert_eq!(c.uar_size, 4 << 20);
        assert_eq!(c.num_uars(), 1024);
        assert!(c.bf);
        assert_eq!((c.bf_reg_size, c.bf_regs_per_page), (512, 8));
        assert_eq!(c.qpc_entry_sz, 256);
        assert_eq!(c.reserved_lkey, 0x100);
        assert_ne!(c.flags & flag::UD_AV_PORT, 0);
        assert_ne!(c.flags & flag::UD, 0);
        assert_eq!(c.flags2, 0);
        assert_eq!(c.xrcd_for_srq(), 0);
    }

    #[test]
    fn static_rates_are_lowered_to_one_the_device_supports() {
        let c = DevCaps {
            // Codes 7 (2.5 Gb/s + 5), 8, 12 and 15 supported.
            stat_rate_support: 1 << 7 | 1 << 8 | 1 << 12 | 1 << 15,
            ..DevCaps::default()
        };
        assert_eq!(c.supported_static_rate(0), 0, "the port's rate stays");
        assert_eq!(c.supported_static_rate(10), 10, "code 15 supported");
        assert_eq!(
            c.supported_static_rate(9),
            7,
            "codes 14..13 not: down to 12"
        );
        assert_eq!(c.supported_static_rate(5), 3);
        assert_eq!(c.supported_static_rate(2), 2);
        assert_eq!(c.supported_static_rate(1), 1, "below 2.5 Gb/s: as asked");
        let none = DevCaps::default();
        assert_eq!(
            none.supported_static_rate(16),
            2,
            "nothing supported: 2.5 Gb/s"
        );
        assert_eq!(none.supported_static_rate(200), 2, "no overflow");
    }

    #[test]
    fn dev_cap_gathers_flags2_sys_eqs_and_xrc_domains_as_linux_does() {
        let mut b = [0u8; 256];
        b[0x1E] = 2; // 4 reserved EQs from FW
        b[0x48] = 8 << 4; // 8 reserved UARs
        b[0x26..0x28].copy_from_slice(&0x1010u16.to_be_bytes()); // 16 system EQs, high bits ignored
        b[0x2E] = 0x27; // RSS XOR, table 2^7
        b[0x3C..0x3E].copy_from_slice(&0x0ff0u16.to_be_bytes());
        b[0x66] = 3 << 4; // 3 reserved XRC domains
        b[0x67] = 16;
        b[0x70..0x74].copy_from_slice(&(1u32 << 23 | 1 << 16).to_be_bytes());
        b[0x7A] = 0xC0; // CQE and EQE strides
        b[0x9C..0xA0].copy_from_slice(&(1u32 << 7 | 1 << 22).to_be_bytes());
        let c = DevCaps::parse(view(&b));
        assert_eq!(c.num_sys_eqs, 16);
        assert_eq!(c.reserved_eqs, 4, "SYS_EQS mode: no UAR rule");
        assert_eq!(
            c.flags2,
            flag2::SYS_EQS
                | flag2::RSS
                | flag2::RSS_XOR
                | flag2::SW_CQ_INIT
                | flag2::UPDATE_QP
                | flag2::CQE_STRIDE
                | flag2::EQE_STRIDE
                | flag2::RECOVERABLE_ERROR_EVENT
                | flag2::REASSIGN_MAC_EN
        );
        assert_eq!(c.max_rss_tbl_sz, 128);
        assert_eq!(c.stat_rate_support, 0x0ff0);
        assert_eq!((c.reserved_xrcds, c.max_xrcds), (3, 1 << 16));
        assert_eq!(
            c.xrcd_for_srq(),
            0,
            "Linux takes them only with the XRC flag"
        );
        b[0x47] = 1 << 3; // XRC
        assert_eq!(DevCaps::parse(view(&b)).xrcd_for_srq(), 3);
    }
}
