//! The device profile: everything a test may want to change about the emulated HCA.
//! The default mirrors a single-port ConnectX-3 FDR PF (§1.1, §1.5, §2.4 "typical CX3 values").

/// Static description of one emulated HCA. Tests may edit any field before `Fabric::add_hca`.
#[derive(Clone, Debug)]
pub struct DeviceProfile {
    // --- PCI identity (§1.1) ---
    pub vendor_id: u16,
    pub device_id: u16,
    pub subsystem_vendor_id: u16,
    pub subsystem_id: u16,
    pub revision: u8,
    /// Class code (base, sub, prog-if): 0x02/0x80/0x00 = "other network controller".
    pub class_code: u32,
    /// BAR0 size in bytes (power of two, >= 1 MiB, §1.1).
    pub bar0_size: u64,
    /// BAR2 size in bytes (power of two, >= 2 x uar area when BlueFlame is on, §1.1).
    pub bar2_size: u64,
    /// Number of MSI-X table entries (§8).
    pub msix_vectors: u16,

    // --- firmware (§1.5) ---
    pub fw_major: u16,
    pub fw_minor: u16,
    pub fw_subminor: u16,
    pub cmd_if_rev: u16,
    /// Size of the firmware area the driver must donate with MAP_FA, in 4 KiB pages.
    pub fw_pages: u16,
    /// log2 of the number of outstanding event-mode commands (QUERY_FW 0x0F).
    pub log_max_cmds: u8,
    /// QUERY_ADAPTER inta_pin (§1.7): bit of the clear-interrupt register.
    pub inta_pin: u8,
    /// Board id string (QUERY_ADAPTER VSD + 0xD0, at most 16 bytes).
    pub board_id: String,

    // --- QUERY_DEV_CAP (§2.4) ---
    pub log_max_qp_sz: u8,
    pub log_rsvd_qps: u8,
    pub log_max_qps: u8,
    pub log_rsvd_srqs: u8,
    pub log_max_srqs: u8,
    pub log_max_srq_sz: u8,
    pub log_max_cq_sz: u8,
    pub log_rsvd_cqs: u8,
    pub log_max_cqs: u8,
    pub log_max_mpts: u8,
    pub log_rsvd_eqs: u8,
    pub log_max_eqs: u8,
    pub log_rsvd_mtts: u8,
    pub log_rsvd_mrws: u8,
    pub log_max_rdma_depth: u8,
    pub local_ca_ack_delay: u8,
    pub num_ports: u8,
    pub log_max_msg: u8,
    /// Device flags (QUERY_DEV_CAP 0x40/0x44 as one u64).
    pub flags: u64,
    /// Reserved UAR count (QUERY_DEV_CAP 0x48 high nibble).
    pub rsvd_uars: u8,
    /// log2(uar area bytes) - 20 (QUERY_DEV_CAP 0x49).
    pub log_uar_sz_mb: u8,
    pub blueflame: bool,
    pub log_bf_reg_size: u8,
    pub log_bf_regs_per_page: u8,
    pub max_sg_sq: u8,
    pub max_sq_desc_sz: u16,
    pub max_sg_rq: u8,
    pub max_rq_desc_sz: u16,
    pub rsvd_pds: u8,
    pub log_max_pds: u8,
    pub rdmarc_entry_sz: u16,
    pub qpc_entry_sz: u16,
    pub auxc_entry_sz: u16,
    pub altc_entry_sz: u16,
    pub eqc_entry_sz: u16,
    pub cqc_entry_sz: u16,
    pub srq_entry_sz: u16,
    pub cmpt_entry_sz: u16,
    pub mtt_entry_sz: u16,
    pub dmpt_entry_sz: u16,
    pub bmme_flags: u32,
    /// Flow counters (QUERY_DEV_CAP 0x68, reported with flag bit 48); the last one is the
    /// sink (Linux `MLX4_SINK_COUNTER_INDEX`).
    pub max_counters: u32,
    pub reserved_lkey: u32,
    pub max_icm_sz: u64,

    // --- port (§2.5, §6.2) ---
    /// Max IB MTU enum (5 = 4096).
    pub max_mtu: u8,
    /// Max VLs (PortInfo encoding: 4 = VL0-7).
    pub max_vl: u8,
    /// Log2 of the GID table size and the P_Key table size.
    pub log_max_gids: u8,
    pub log_max_pkeys: u8,
    /// Node GUID; 0 = assigned by the fabric from the HCA index.
    pub node_guid: u64,
    /// Node description (MAD NodeDescription, 64 bytes max).
    pub node_description: String,
}

/// QUERY_DEV_CAP flag bits (§2.4 0x40/0x44).
pub mod dev_cap_flags {
    pub const RC: u64 = 1 << 0;
    pub const UC: u64 = 1 << 1;
    pub const UD: u64 = 1 << 2;
    pub const SRQ: u64 = 1 << 6;
    pub const ATOMIC: u64 = 1 << 18;
    pub const UD_AV_PORT: u64 = 1 << 20;
    /// Basic flow counters (Linux `MLX4_DEV_CAP_FLAG_COUNTERS`).
    pub const COUNTERS: u64 = 1 << 48;
    pub const EQE_64B: u64 = 1 << 61;
    pub const CQE_64B: u64 = 1 << 62;
}

impl Default for DeviceProfile {
    fn default() -> Self {
        DeviceProfile {
            vendor_id: 0x15b3,
            device_id: 0x1003,
            subsystem_vendor_id: 0x15b3,
            subsystem_id: 0x0050,
            revision: 0,
            class_code: 0x02_80_00,
            bar0_size: 1 << 20,
            bar2_size: 8 << 20,
            msix_vectors: 128,
            fw_major: 2,
            fw_minor: 42,
            fw_subminor: 5000,
            cmd_if_rev: 3,
            fw_pages: 256,
            log_max_cmds: 4,
            inta_pin: 2,
            board_id: "MT_1090120019".to_string(),
            log_max_qp_sz: 14,
            log_rsvd_qps: 6,
            log_max_qps: 19,
            log_rsvd_srqs: 6,
            log_max_srqs: 16,
            log_max_srq_sz: 14,
            log_max_cq_sz: 22,
            log_rsvd_cqs: 7,
            log_max_cqs: 16,
            log_max_mpts: 19,
            log_rsvd_eqs: 2,
            log_max_eqs: 9,
            log_rsvd_mtts: 4,
            log_rsvd_mrws: 4,
            log_max_rdma_depth: 4,
            local_ca_ack_delay: 15,
            num_ports: 1,
            log_max_msg: 30,
            flags: dev_cap_flags::RC
                | dev_cap_flags::UC
                | dev_cap_flags::UD
                | dev_cap_flags::SRQ
                | dev_cap_flags::ATOMIC
                | dev_cap_flags::UD_AV_PORT
                | dev_cap_flags::COUNTERS,
            rsvd_uars: 8,
            log_uar_sz_mb: 2,
            blueflame: true,
            log_bf_reg_size: 9,
            log_bf_regs_per_page: 3,
            max_sg_sq: 62,
            max_sq_desc_sz: 1008,
            max_sg_rq: 32,
            max_rq_desc_sz: 512,
            rsvd_pds: 4,
            log_max_pds: 15,
            rdmarc_entry_sz: 32,
            qpc_entry_sz: 256,
            auxc_entry_sz: 64,
            altc_entry_sz: 64,
            eqc_entry_sz: 64,
            cqc_entry_sz: 64,
            srq_entry_sz: 64,
            cmpt_entry_sz: 64,
            mtt_entry_sz: 8,
            dmpt_entry_sz: 64,
            bmme_flags: 1 << 10,
            max_counters: 128,
            reserved_lkey: 0x0000_0200,
            max_icm_sz: 1 << 40,
            max_mtu: 5,
            max_vl: 4,
            log_max_gids: 7,
            log_max_pkeys: 7,
            node_guid: 0,
            node_description: "ibkern-sim ConnectX-3".to_string(),
        }
    }
}

impl DeviceProfile {
    /// Bytes of the UAR area at the start of BAR2 (QUERY_DEV_CAP 0x49, §2.4).
    pub fn uar_size(&self) -> u64 {
        1u64 << (u32::from(self.log_uar_sz_mb & 0x3f) + 20).min(62)
    }
    /// Number of 4 KiB UAR pages.
    pub fn num_uars(&self) -> u64 {
        self.uar_size() / 4096
    }
    pub fn bf_reg_size(&self) -> u64 {
        1u64 << (self.log_bf_reg_size & 0x1f)
    }
    pub fn bf_regs_per_page(&self) -> u64 {
        1u64 << (self.log_bf_regs_per_page & 0x3f).min(12)
    }
    pub fn reserved_qps(&self) -> u32 {
        1 << (self.log_rsvd_qps & 0xf)
    }
    pub fn reserved_cqs(&self) -> u32 {
        1 << (self.log_rsvd_cqs & 0xf)
    }
    pub fn reserved_eqs(&self) -> u32 {
        1 << (self.log_rsvd_eqs & 0xf)
    }
    pub fn reserved_mrws(&self) -> u32 {
        1 << (self.log_rsvd_mrws & 0xf)
    }
    pub fn reserved_mtts(&self) -> u32 {
        1 << (self.log_rsvd_mtts & 0xf)
    }
    pub fn reserved_srqs(&self) -> u32 {
        1 << (self.log_rsvd_srqs & 0xf)
    }
    /// Sanity check of an edited profile; `Fabric::add_hca` refuses nonsense.
    pub fn validate(&self) -> Result<(), String> {
        let pow2 = |v: u64| v != 0 && v.is_power_of_two();
        if !pow2(self.bar0_size) || self.bar0_size < (1 << 20) {
            return Err("BAR0 must be a power of two >= 1 MiB (§1.1)".into());
        }
        if !pow2(self.bar2_size) || self.bar2_size < self.uar_size() {
            return Err("BAR2 must be a power of two >= the UAR area (§1.1)".into());
        }
        if self.blueflame && self.bar2_size < 2 * self.uar_size() {
            return Err("BlueFlame needs BAR2 >= 2 x UAR area (§1.1)".into());
        }
        if self.num_ports == 0 || self.num_ports > 2 {
            return Err("ConnectX-3 has one or two ports".into());
        }
        if self.msix_vectors == 0 || self.msix_vectors > 256 {
            return Err("MSI-X table holds 1..=256 vectors (one 4 KiB page)".into());
        }
        if self.mtt_entry_sz != 8 {
            return Err("MTT entry size must be 8 (§2.4 0x90)".into());
        }
        if self.fw_pages == 0 {
            return Err("fw_pages must be non-zero".into());
        }
        Ok(())
    }
}
