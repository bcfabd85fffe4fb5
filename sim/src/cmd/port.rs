//! Port commands: INIT_PORT, CLOSE_PORT, SET_PORT (IB), QUERY_PORT, MAD_IFC with the SMA
//! (§2.5, §6).

use crate::be::{BeRead, BeWrite, Field};
use crate::eq::Event;
use crate::hca::{FabricRequest, Hca};
use crate::hcr::{CmdResult, Command, Status};
use crate::mad::{self, class, status, MadHeader, Reject};
use crate::port::PortState;

/// SET_PORT (IB, op_mod 0) input mailbox (§6.4): the model's own definitions, written from
/// docs/hardware.md.
pub mod set_port {
    use crate::be::Field;

    pub const SIZE: usize = 0x40;
    /// The change flags: MTU cap, VL cap, P_Key table size apply.
    pub const CHANGE_FLAGS: Field = Field::bits(0x00, 4, 20, 3);
    pub const CHANGE_MTU: Field = Field::bit(0x00, 4, 22);
    pub const CHANGE_VL: Field = Field::bit(0x00, 4, 21);
    pub const CHANGE_PKEYS: Field = Field::bit(0x00, 4, 20);
    /// An IB MTU code.
    pub const MTU_CAP: Field = Field::bits(0x00, 4, 12, 4);
    /// A number of data VLs.
    pub const VL_CAP: Field = Field::bits(0x00, 4, 4, 4);
    pub const CAPABILITY_MASK: Field = Field::whole(0x04, 4);
    pub const PKEY_TABLE_SIZE: Field = Field::whole(0x28, 2);
}

/// QUERY_PORT output mailbox (§2.5): the model's own definitions.
pub mod query_port {
    use crate::be::Field;

    pub const SIZE: usize = 0x40;
    pub const LINK_UP: Field = Field::bit(0x00, 1, 7);
    /// Supported port types: bit 0 IB.
    pub const PORT_TYPES: Field = Field::bits(0x00, 1, 0, 2);
    pub const MTU_CAP: Field = Field::bits(0x01, 1, 0, 4);
    /// Supported link speeds (bit per speed: 2.5, 5, 10, 14 Gb/s).
    pub const LINK_SPEEDS: Field = Field::whole(0x04, 1);
    /// Supported link widths (IB width bitmask: 1 = 1x, 2 = 4x).
    pub const LINK_WIDTHS: Field = Field::whole(0x06, 1);
    pub const LOG_MAX_GIDS: Field = Field::bits(0x07, 1, 4, 4);
    pub const LOG_MAX_PKEYS: Field = Field::bits(0x07, 1, 0, 4);
    pub const LOG_MAX_VLANS: Field = Field::bits(0x0a, 1, 4, 4);
    pub const LOG_MAX_MACS: Field = Field::bits(0x0a, 1, 0, 4);
    pub const VL_CAP: Field = Field::bits(0x0b, 1, 0, 4);

    pub const PORT_TYPE_IB: u64 = 1;
    pub const SPEEDS_ALL: u64 = 0x0f;
    pub const WIDTHS_1X_4X: u64 = 0x03;
}

/// SMP attributes the SMA answers (IBA 14.2.5).
pub mod smp_attr {
    pub const NODE_DESCRIPTION: u16 = 0x0010;
    pub const NODE_INFO: u16 = 0x0011;
    pub const GUID_INFO: u16 = 0x0014;
    pub const PORT_INFO: u16 = 0x0015;
    pub const PKEY_TABLE: u16 = 0x0016;
    pub const SL_TO_VL: u16 = 0x0017;
    /// MlnxExtendedPortInfo (vendor-specific range).
    pub const MLNX_EXT_PORT_INFO: u16 = 0xff90;
}

/// NodeInfo (IBA 14.2.5.3), relative to the SMP data.
pub mod node_info {
    use crate::be::Field;

    pub const BASE_VERSION: Field = Field::whole(0, 1);
    pub const CLASS_VERSION: Field = Field::whole(1, 1);
    pub const NODE_TYPE: Field = Field::whole(2, 1);
    pub const NUM_PORTS: Field = Field::whole(3, 1);
    pub const SYSTEM_IMAGE_GUID: Field = Field::whole(4, 8);
    pub const NODE_GUID: Field = Field::whole(12, 8);
    pub const PORT_GUID: Field = Field::whole(20, 8);
    pub const PARTITION_CAP: Field = Field::whole(28, 2);
    pub const DEVICE_ID: Field = Field::whole(30, 2);
    pub const REVISION: Field = Field::whole(32, 4);
    pub const LOCAL_PORT_NUM: Field = Field::whole(36, 1);
    pub const VENDOR_ID: Field = Field::whole(37, 3);

    pub const NODE_TYPE_CA: u64 = 1;
    /// Mellanox's IEEE OUI.
    pub const VENDOR_MELLANOX: u64 = 0x0002c9;
}

/// PortInfo (IBA 14.2.5.6), relative to the SMP data.
pub mod port_info {
    use crate::be::Field;

    pub const GID_PREFIX: Field = Field::whole(8, 8);
    pub const LID: Field = Field::whole(16, 2);
    pub const MASTER_SM_LID: Field = Field::whole(18, 2);
    pub const CAPABILITY_MASK: Field = Field::whole(20, 4);
    pub const LOCAL_PORT_NUM: Field = Field::whole(28, 1);
    pub const LINK_WIDTH_ENABLED: Field = Field::whole(29, 1);
    pub const LINK_WIDTH_SUPPORTED: Field = Field::whole(30, 1);
    pub const LINK_WIDTH_ACTIVE: Field = Field::whole(31, 1);
    pub const LINK_SPEED_SUPPORTED: Field = Field::bits(32, 1, 4, 4);
    pub const PORT_STATE: Field = Field::bits(32, 1, 0, 4);
    pub const PORT_PHYS_STATE: Field = Field::bits(33, 1, 4, 4);
    pub const LINK_DOWN_DEFAULT_STATE: Field = Field::bits(33, 1, 0, 4);
    pub const LMC: Field = Field::bits(34, 1, 0, 3);
    pub const LINK_SPEED_ACTIVE: Field = Field::bits(35, 1, 4, 4);
    pub const LINK_SPEED_ENABLED: Field = Field::bits(35, 1, 0, 4);
    pub const NEIGHBOR_MTU: Field = Field::bits(36, 1, 4, 4);
    pub const MASTER_SM_SL: Field = Field::bits(36, 1, 0, 4);
    pub const VL_CAP: Field = Field::bits(37, 1, 4, 4);
    pub const MTU_CAP: Field = Field::bits(41, 1, 0, 4);
    pub const OPERATIONAL_VLS: Field = Field::bits(43, 1, 4, 4);
    pub const PKEY_VIOLATIONS: Field = Field::whole(46, 2);
    pub const QKEY_VIOLATIONS: Field = Field::whole(48, 2);
    pub const GUID_CAP: Field = Field::whole(50, 1);
    /// ClientReregister (IBA 14.2.5.6): a Set asks the port's clients to re-register.
    pub const CLIENT_REREG: Field = Field::bit(51, 1, 7);
    pub const LINK_SPEED_EXT_ACTIVE: Field = Field::bits(62, 1, 4, 4);
    pub const LINK_SPEED_EXT_SUPPORTED: Field = Field::bits(62, 1, 0, 4);

    /// Link widths 1x | 4x, and 4x alone.
    pub const WIDTHS_1X_4X: u64 = 0x03;
    pub const WIDTH_4X: u64 = 0x02;
    /// Speeds 2.5 | 5 | 10 Gb/s supported; SDR active (the extended speed says FDR); the
    /// enabled speeds "all supported".
    pub const SPEEDS_SDR_DDR_QDR: u64 = 0x7;
    pub const SPEED_SDR: u64 = 1;
    pub const SPEED_ENABLED_ALL: u64 = 0x7;
    /// PortPhysicalState LinkUp and Disabled; LinkDownDefaultState Polling.
    pub const PHYS_LINK_UP: u64 = 5;
    pub const PHYS_DISABLED: u64 = 3;
    pub const DOWN_DEFAULT_POLLING: u64 = 2;
    /// Extended speed FDR.
    pub const SPEED_EXT_FDR: u64 = 1;
    /// AttributeModifier of PortInfo: the port number in bits 7:0; bit 31 of a Set says
    /// LinkSpeedExtEnabled applies.
    pub const MOD_PORT: u32 = 0xff;
    pub const MOD_EXT_SPEED: u32 = 1 << 31;
    /// Lowest multicast LID: unicast LIDs lie below.
    pub const MULTICAST_LID_BASE: u16 = 0xc000;
}

/// GUIDInfo (IBA 14.2.5.5): 8 GUIDs per block.
const GUID_INFO_GUID0: Field = Field::whole(0, 8);

/// P_KeyTable blocks (IBA 14.2.5.7): 32 P_Keys of 2 bytes each.
const PKEYS_PER_BLOCK: usize = 32;

/// The PortInfo values whose change a PORT_MNG_CHG event reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PortInfoSnapshot {
    lid: u16,
    sm_lid: u16,
    sm_sl: u8,
    gid_prefix: u64,
}

impl PortInfoSnapshot {
    fn of(p: &crate::port::Port) -> PortInfoSnapshot {
        PortInfoSnapshot {
            lid: p.lid,
            sm_lid: p.sm_lid,
            sm_sl: p.sm_sl,
            gid_prefix: p.gid_prefix,
        }
    }
}

impl Hca {
    fn port_index(&mut self, port: u32, what: &str) -> Result<usize, Status> {
        if port == 0 || port > u32::from(self.profile.num_ports) {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§6",
                format!(
                    "{what}: port {port} (the HCA has {} port(s))",
                    self.profile.num_ports
                ),
            ));
        }
        Ok(port as usize - 1)
    }

    /// INIT_PORT (0x009): no mailbox with cmd_if_rev 3; brings the physical link up, the port
    /// goes to INIT (§6.5).
    pub(crate) fn cmd_init_port(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        let i = self.port_index(c.in_mod, "INIT_PORT")?;
        let p = &mut self.ports[i];
        if p.opened {
            return Ok(None);
        }
        p.opened = true;
        if !p.cable_cut {
            p.link_up = true;
            p.state = PortState::Init;
            let n = p.number;
            self.requests.push(FabricRequest::PortUp(n));
        }
        Ok(None)
    }

    /// CLOSE_PORT (0x00A).
    pub(crate) fn cmd_close_port(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        let i = self.port_index(c.in_mod, "CLOSE_PORT")?;
        // The port's own QP0 is exempt: Linux's mlx4_ib closes the port first and then moves
        // QP0 to RESET when it destroys QP0 (every unload does this on real hardware). QP0
        // of port p is special QP base + p - 1 (CONF_SPECIAL_QP).
        let qp0 = (self.special_qp_base != 0).then(|| self.special_qp_base + i as u32);
        let qps: Vec<u32> = self
            .qps
            .values()
            .filter(|q| {
                matches!(q.state, crate::qp::QpState::Rtr | crate::qp::QpState::Rts)
                    && usize::from(q.port()) == i + 1
                    && Some(q.qpn) != qp0
            })
            .map(|q| q.qpn)
            .collect();
        if !qps.is_empty() {
            self.violation(
                "§2.2",
                format!(
                    "CLOSE_PORT {} while QPs {qps:x?} on it are in RTR/RTS",
                    i + 1
                ),
            );
        }
        let n = self.ports[i].number;
        self.ports[i].close();
        self.requests.push(FabricRequest::PortDown(n));
        Ok(None)
    }

    /// SET_PORT (0x00C) for IB, op_mod 0 (§6.4).
    pub(crate) fn cmd_set_port(&mut self, c: &Command) -> CmdResult {
        if c.op_mod == 1 {
            return Err(self.cmd_fail(
                Status::BadOp,
                "§6.4",
                "SET_PORT for Ethernet (op_mod 1) on an IB-only port",
            ));
        }
        self.expect_op_mod(c, &[0])?;
        let i = self.port_index(c.in_mod, "SET_PORT")?;
        let mb = self.mailbox_in(c, set_port::SIZE)?;
        let mtu = set_port::MTU_CAP.get(&mb) as u8;
        let vl = set_port::VL_CAP.get(&mb) as u8;
        let (change_mtu, change_vl, change_pkeys) = (
            set_port::CHANGE_MTU.get_bool(&mb),
            set_port::CHANGE_VL.get_bool(&mb),
            set_port::CHANGE_PKEYS.get_bool(&mb),
        );
        // IB MTU encodings are 1 (256) ..= 5 (4096).
        if change_mtu && !(1..=5).contains(&mtu) {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§6.4",
                format!("SET_PORT MTU cap {mtu} (an IB MTU, 1..=5)"),
            ));
        }
        // Linux asks for 4096 (IB_MTU_4096) on every single-function ConnectX-3 whatever
        // the port supports (mlx4_setup_hca), so the firmware must take a cap above the
        // port's own and keep the port's: the cap is clamped, not refused.
        let mtu = mtu.min(self.profile.max_mtu);
        // The VL cap of SET_PORT is a number of data VLs, not PortInfo's VLCap encoding
        // (Linux's mlx4_SET_PORT says so and offers 8, 4, 2, 1 in turn, logging every
        // refusal as an error; a ConnectX-3, VLCap 4 = VL0-7, takes 8 at once).
        let max_vls = vl_count(self.profile.max_vl);
        if change_vl && (vl == 0 || vl > max_vls) {
            // §2.1: Linux retries VL caps 8, 4, 2, 1 while the status is "exceeds limits".
            // No violation: probing is how the driver learns the limit.
            return Err(Status::ExceedLim);
        }
        let pk = set_port::PKEY_TABLE_SIZE.get(&mb);
        if change_pkeys && (pk == 0 || pk > 1u64 << self.profile.log_max_pkeys) {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§6.4",
                format!("SET_PORT P_Key table size {pk}"),
            ));
        }
        let p = &mut self.ports[i];
        if change_mtu {
            p.mtu_cap = mtu;
            p.neighbor_mtu = p.neighbor_mtu.min(mtu);
        }
        if change_vl {
            p.vl_cap = vl_cap_encoding(vl);
            p.operational_vls = p.operational_vls.min(p.vl_cap);
        }
        p.cap_mask = set_port::CAPABILITY_MASK.get_u32(&mb);
        Ok(None)
    }

    /// QUERY_PORT (0x043): output mailbox per §2.5.
    pub(crate) fn cmd_query_port(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        let i = self.port_index(c.in_mod, "QUERY_PORT")?;
        let pr = self.profile.clone();
        let p = &self.ports[i];
        let mut b = vec![0u8; query_port::SIZE];
        use query_port::*;
        let mut put = |f: Field, v: u64| f.set(&mut b, v);
        put(LINK_UP, p.link_up.into());
        put(PORT_TYPES, PORT_TYPE_IB);
        // MTU and VL caps as SET_PORT left them (the device's until then).
        put(MTU_CAP, p.mtu_cap.into());
        put(LINK_SPEEDS, SPEEDS_ALL);
        put(LINK_WIDTHS, WIDTHS_1X_4X);
        put(LOG_MAX_GIDS, pr.log_max_gids.into());
        put(LOG_MAX_PKEYS, pr.log_max_pkeys.into());
        // Log2 of the MAC and VLAN table sizes (128 each on a ConnectX-3; Linux asks for
        // 2^7 of each by default and warns that it is "too much" if the port offers less).
        put(LOG_MAX_VLANS, LOG_MAX_VLANS_CX3);
        put(LOG_MAX_MACS, LOG_MAX_MACS_CX3);
        put(VL_CAP, p.vl_cap.into());
        self.mailbox_out(c, &b)?;
        Ok(None)
    }

    /// MAD_IFC (0x024): hand a MAD to the firmware's SMA (§6.2) or its PerfMgt agent (`pma.rs`).
    pub(crate) fn cmd_mad_ifc(&mut self, c: &Command) -> CmdResult {
        if c.op_mod & !0xf != 0 {
            return Err(self.cmd_fail(
                Status::BadOp,
                "§2.3",
                format!("MAD_IFC op_mod {:#x}", c.op_mod),
            ));
        }
        let i = self.port_index(c.in_mod & 0xffff, "MAD_IFC")?;
        let mut mad = self.mailbox_in(c, mad::MAD_BYTES)?;
        let h = MadHeader::parse(&mad);
        let status = match h.check_request(&[class::SUBN_LID, class::SUBN_DR, class::PERF_MGMT]) {
            Err(Reject::BaseVersion(base)) => {
                // §1.2 0x30: bad management packet (silently discarded).
                return Err(self.cmd_fail(
                    Status::BadMgmtPkt,
                    "§6.2",
                    format!("MAD_IFC with base version {base}"),
                ));
            }
            Err(Reject::ClassVersion) => status::BAD_VERSION,
            Err(Reject::Method) => status::UNSUP_METHOD_ATTR,
            Ok(()) if h.mgmt_class == class::PERF_MGMT => {
                let mut data = [0u8; mad::GS_DATA_LEN];
                data.copy_from_slice(&mad[mad::GS_DATA]);
                match self.pma(h.is_set(), h.attr_id, &mut data) {
                    Ok(()) => {
                        mad[mad::GS_DATA].copy_from_slice(&data);
                        0
                    }
                    Err(s) => s,
                }
            }
            Ok(()) => self.sma_mad(i, &h, &mut mad),
        };
        mad::make_response(&mut mad, status);
        self.mailbox_out(c, &mad)?;
        Ok(None)
    }

    /// Let the SMA answer the SMP `mad` (header `h`) in place; returns the MAD status.
    pub(crate) fn sma_mad(&mut self, pi: usize, h: &MadHeader, mad: &mut [u8]) -> u16 {
        let mut data = [0u8; mad::SMP_DATA_LEN];
        data.copy_from_slice(&mad[mad::SMP_DATA]);
        match self.sma(pi, h.is_set(), h.attr_id, h.attr_mod, &mut data) {
            Ok(()) => {
                mad[mad::SMP_DATA].copy_from_slice(&data);
                0
            }
            Err(s) => s,
        }
    }

    /// The subnet management agent: Get of NodeDescription, NodeInfo, GUIDInfo, PortInfo,
    /// P_KeyTable, SL2VL, MlnxExtendedPortInfo; Set of PortInfo and P_KeyTable (§6.2, §6.3).
    pub(crate) fn sma(
        &mut self,
        pi: usize,
        set: bool,
        attr: u16,
        attr_mod: u32,
        d: &mut [u8; 64],
    ) -> Result<(), u16> {
        let pr = self.profile.clone();
        match (attr, set) {
            (smp_attr::NODE_DESCRIPTION, false) => {
                *d = [0; 64];
                let s = pr.node_description.as_bytes();
                d[..s.len().min(64)].copy_from_slice(&s[..s.len().min(64)]);
            }
            (smp_attr::NODE_INFO, false) => {
                *d = [0; 64];
                use node_info::*;
                let mut put = |f: Field, v: u64| f.set(d, v);
                put(BASE_VERSION, mad::VERSION.into());
                put(CLASS_VERSION, mad::VERSION.into());
                put(NODE_TYPE, NODE_TYPE_CA);
                put(NUM_PORTS, pr.num_ports.into());
                put(SYSTEM_IMAGE_GUID, pr.node_guid);
                put(NODE_GUID, pr.node_guid);
                put(PORT_GUID, self.ports[pi].port_guid);
                put(PARTITION_CAP, 1 << pr.log_max_pkeys.min(15));
                put(DEVICE_ID, pr.device_id.into());
                put(REVISION, pr.revision.into());
                put(LOCAL_PORT_NUM, self.ports[pi].number.into());
                put(VENDOR_ID, VENDOR_MELLANOX);
            }
            (smp_attr::GUID_INFO, false) => {
                *d = [0; 64];
                // Block 0's first GUID is the port GUID; the rest are not assigned.
                if attr_mod == 0 {
                    GUID_INFO_GUID0.set(d, self.ports[pi].port_guid);
                }
            }
            (smp_attr::PORT_INFO, _) => {
                // AttributeModifier: the port number; the extended-speed bit of a Set says
                // LinkSpeedExtEnabled applies (infiniband-diags' ibportstate sets it, as
                // OpenSM does, for every port whose CapabilityMask has
                // IsExtendedSpeedsSupported; the LinkSpeed*Enabled fields are not modelled).
                let known = port_info::MOD_PORT | port_info::MOD_EXT_SPEED;
                if attr_mod & !known != 0 || (!set && attr_mod & port_info::MOD_EXT_SPEED != 0) {
                    return Err(status::INVALID_ATTR_VALUE);
                }
                let n = attr_mod & port_info::MOD_PORT;
                let port = if n == 0 { pi } else { n as usize - 1 };
                if port >= self.ports.len() {
                    return Err(status::INVALID_ATTR_VALUE);
                }
                if set {
                    self.sma_set_port_info(port, d)?;
                }
                *d = self.port_info(port);
            }
            (smp_attr::PKEY_TABLE, _) => {
                let block = attr_mod as usize & 0xffff;
                let n = self.ports[pi].pkeys.len();
                let first = block * PKEYS_PER_BLOCK;
                if first >= n {
                    return Err(status::INVALID_ATTR_VALUE);
                }
                if set {
                    for k in 0..PKEYS_PER_BLOCK.min(n - first) {
                        self.ports[pi].pkeys[first + k] = d.be16(k * 2);
                    }
                }
                *d = [0; 64];
                for k in 0..PKEYS_PER_BLOCK {
                    let v = self.ports[pi].pkeys.get(first + k).copied().unwrap_or(0);
                    d.put16(k * 2, v);
                }
            }
            (smp_attr::SL_TO_VL, false) => *d = [0; 64], // every SL on VL0
            (smp_attr::MLNX_EXT_PORT_INFO, false) => {
                // Mellanox's vendor attribute (Linux mlx4_ib reads it as
                // MLX4_ATTR_EXTENDED_PORT_INFO in `mlx4_ib_query_port`: byte 15 bit 0 is
                // "FDR10 active"; infiniband-diags' ibportstate reads it from every Mellanox
                // port): StateChangeEnable at byte 3, FDR10 LinkSpeedSupported 7, Enabled 11,
                // Active 15. The modelled link runs FDR (PortInfo LinkSpeedExtActive), not
                // FDR10, and FDR10 is not modelled: all zero.
                *d = [0; 64];
            }
            _ => return Err(status::UNSUP_METHOD_ATTR),
        }
        Ok(())
    }

    fn port_info(&self, i: usize) -> [u8; 64] {
        let pr = &self.profile;
        let p = &self.ports[i];
        let mut d = [0u8; 64];
        use port_info::*;
        let mut put = |f: Field, v: u64| f.set(&mut d, v);
        put(GID_PREFIX, p.gid_prefix);
        put(LID, p.lid.into());
        put(MASTER_SM_LID, p.sm_lid.into());
        put(CAPABILITY_MASK, p.cap_mask.into());
        put(LOCAL_PORT_NUM, p.number.into());
        put(LINK_WIDTH_ENABLED, WIDTHS_1X_4X);
        put(LINK_WIDTH_SUPPORTED, WIDTHS_1X_4X);
        put(LINK_WIDTH_ACTIVE, if p.link_up { WIDTH_4X } else { 0 });
        put(LINK_SPEED_SUPPORTED, SPEEDS_SDR_DDR_QDR);
        put(PORT_STATE, p.state as u64);
        let phys = if p.link_up {
            PHYS_LINK_UP
        } else {
            PHYS_DISABLED
        };
        put(PORT_PHYS_STATE, phys);
        put(LINK_DOWN_DEFAULT_STATE, DOWN_DEFAULT_POLLING);
        put(LMC, p.lmc.into());
        put(LINK_SPEED_ACTIVE, SPEED_SDR);
        put(LINK_SPEED_ENABLED, SPEED_ENABLED_ALL);
        put(NEIGHBOR_MTU, p.mtu().into());
        put(MASTER_SM_SL, p.sm_sl.into());
        // VLCap and MTUCap as SET_PORT left them.
        put(VL_CAP, p.vl_cap.into());
        put(MTU_CAP, p.mtu_cap.into());
        put(OPERATIONAL_VLS, p.operational_vls.into());
        put(PKEY_VIOLATIONS, p.bad_pkey_counter.into());
        put(QKEY_VIOLATIONS, p.qkey_violations.into());
        put(GUID_CAP, 1 << pr.log_max_gids.min(7));
        put(LINK_SPEED_EXT_ACTIVE, SPEED_EXT_FDR);
        put(LINK_SPEED_EXT_SUPPORTED, SPEED_EXT_FDR);
        d
    }

    fn sma_set_port_info(&mut self, i: usize, d: &[u8; 64]) -> Result<(), u16> {
        use port_info::*;
        let lid = LID.get(d) as u16;
        let sm_lid = MASTER_SM_LID.get(d) as u16;
        let state = PORT_STATE.get(d);
        let p = &self.ports[i];
        if lid >= MULTICAST_LID_BASE || sm_lid >= MULTICAST_LID_BASE {
            return Err(status::INVALID_ATTR_VALUE);
        }
        // IB port state machine: INIT -> ARMED -> ACTIVE; DOWN is always allowed; 0 = no
        // change. ARMED/ACTIVE need the physical link and a LID.
        let new_state = match state {
            0 => p.state,
            1 => PortState::Down,
            3 if p.state == PortState::Init && p.link_up && (lid != 0 || p.lid != 0) => {
                PortState::Armed
            }
            3 if p.state == PortState::Armed => PortState::Armed,
            4 if p.state == PortState::Armed || p.state == PortState::Active => PortState::Active,
            _ => return Err(status::INVALID_ATTR_VALUE),
        };
        // NeighborMTU and OperationalVLs (an SM sets both for the link): within the caps
        // SET_PORT left; 0 leaves them (OperationalVLs 0 is "no change" in the IBA).
        let (nmtu, opvls) = (NEIGHBOR_MTU.get(d) as u8, OPERATIONAL_VLS.get(d) as u8);
        if nmtu > p.mtu_cap || opvls > p.vl_cap {
            return Err(status::INVALID_ATTR_VALUE);
        }
        let was_active = p.state == PortState::Active;
        let before = PortInfoSnapshot::of(p);
        let p = &mut self.ports[i];
        if nmtu != 0 {
            p.neighbor_mtu = nmtu;
        }
        if opvls != 0 {
            p.operational_vls = opvls;
        }
        if lid != 0 {
            p.lid = lid;
        }
        p.sm_lid = sm_lid;
        p.lmc = LMC.get(d) as u8;
        p.sm_sl = MASTER_SM_SL.get(d) as u8;
        let n = p.number;
        p.state = if new_state == PortState::Down && p.link_up {
            PortState::Init
        } else {
            new_state
        };
        let now_active = p.state == PortState::Active;
        let rereg = CLIENT_REREG.get_bool(d);
        self.port_info_changed(i, before, rereg);
        if now_active != was_active {
            self.port_change_event(n, now_active);
        }
        Ok(())
    }

    /// The firmware SMA changed PortInfo: on a device that reports port-management changes
    /// (QUERY_DEV_CAP flag 59) it posts a PORT_MNG_CHG event saying what changed (Linux's
    /// mlx4_ib then updates its SM address and dispatches LID-change events instead of
    /// snooping SMPs, `handle_port_mgmt_change_event`). Lost if not mapped, like any event.
    pub(crate) fn port_info_changed(&mut self, i: usize, before: PortInfoSnapshot, rereg: bool) {
        use crate::eq::pmc_changed as c;
        if !self
            .profile
            .offers(crate::profile::dev_cap_flags::PORT_MNG_CHG_EV)
        {
            return;
        }
        let Some(p) = self.ports.get(i) else {
            return;
        };
        let now = PortInfoSnapshot::of(p);
        let mut changed = 0;
        for (bit, differs) in [
            (c::LID, now.lid != before.lid),
            (c::SM_LID, now.sm_lid != before.sm_lid),
            (c::SM_SL, now.sm_sl != before.sm_sl),
            (c::GID_PREFIX, now.gid_prefix != before.gid_prefix),
            (c::CLIENT_REREG, rereg),
        ] {
            if differs {
                changed |= bit;
            }
        }
        if changed != 0 {
            self.post_async_event(Event::PortMgmtChange {
                port: p.number,
                changed,
                lid: now.lid,
                sm_lid: now.sm_lid,
                sm_sl: now.sm_sl,
                gid_prefix: now.gid_prefix,
            });
        }
    }

    /// PORT_CHANGE event (§4.1, §6.1): subtype 4 = ACTIVE, 1 = DOWN; port in bits 31:28 of
    /// EQE dword 3.
    pub(crate) fn port_change_event(&mut self, port: u8, active: bool) {
        if !self.post_async_event(Event::PortChange { port, active }) {
            log::debug!(
                "hca{}: port {port} change event not mapped to an EQ",
                self.index
            );
        }
    }

    /// A cable fault reported as a recoverable-error event (Fabric::inject_cable_error).
    pub(crate) fn recoverable_cable_error(&mut self, port: u8, unsupported: bool) -> bool {
        let enabled = self.profile.caps2.recoverable_error_event
            && self
                .fw
                .init
                .as_ref()
                .is_some_and(|p| p.flags2 & crate::icm::INIT_HCA_RECOVERABLE_ERRORS != 0);
        if !enabled || !self.ports.iter().any(|p| p.number == port) {
            return false;
        }
        let kind = if unsupported {
            crate::eq::CableError::Unsupported
        } else {
            crate::eq::CableError::Bad
        };
        self.post_async_event(Event::RecoverableError { port, kind })
    }

    /// Called by the fabric's subnet manager: assign the LID and bring the port ACTIVE (what
    /// its Set(PortInfo) does through the firmware SMA).
    pub(crate) fn sm_configure(&mut self, port: u8, lid: u16, sm_lid: u16) {
        let Some(i) = self.ports.iter().position(|p| p.number == port) else {
            return;
        };
        let p = &mut self.ports[i];
        if !p.link_up {
            return;
        }
        let before = PortInfoSnapshot::of(p);
        p.lid = lid;
        p.sm_lid = sm_lid;
        let was = p.state;
        p.state = PortState::Active;
        self.port_info_changed(i, before, false);
        if was != PortState::Active {
            self.port_change_event(port, true);
        }
    }

    /// Back-to-back link training result (fabric): the physical link of `port` is up or
    /// down. Coming up the port enters INIT; going down it loses its logical state, with a
    /// PORT_CHANGE DOWN event if it was ACTIVE.
    pub(crate) fn set_phys_link(&mut self, port: u8, up: bool) {
        let Some(p) = self.ports.iter_mut().find(|p| p.number == port) else {
            return;
        };
        if up && !p.link_up {
            p.link_up = true;
            p.state = PortState::Init;
        } else if !up && p.link_up {
            let was_active = p.state == PortState::Active;
            p.link_down();
            if was_active {
                self.port_change_event(port, false);
            }
        }
    }

    /// Fabric link state change (fault injection).
    pub(crate) fn set_cable(&mut self, port: u8, connected: bool) {
        let Some(i) = self.ports.iter().position(|p| p.number == port) else {
            return;
        };
        let p = &mut self.ports[i];
        p.cable_cut = !connected;
        if !connected && p.link_up {
            let was_active = p.state == PortState::Active;
            p.link_down();
            if was_active {
                self.port_change_event(port, false);
            }
        } else if connected && p.opened && !p.link_up {
            p.link_up = true;
            p.state = PortState::Init;
            self.requests.push(FabricRequest::PortUp(port));
        }
    }
}

/// Log2 of the per-port MAC table size reported by QUERY_PORT (ConnectX-3: 128).
const LOG_MAX_MACS_CX3: u64 = 7;
/// Log2 of the per-port VLAN table size reported by QUERY_PORT (ConnectX-3: 128).
const LOG_MAX_VLANS_CX3: u64 = 7;

/// Number of data VLs of a PortInfo VLCap value (1 = VL0, 2 = VL0-1, 3 = VL0-3, 4 = VL0-7,
/// 5 = VL0-14).
fn vl_count(vl_cap: u8) -> u8 {
    match vl_cap {
        0 => 0,
        1..=4 => 1 << (vl_cap - 1),
        _ => 15,
    }
}

/// PortInfo VLCap for a number of data VLs (the largest VL set not above `n`).
fn vl_cap_encoding(n: u8) -> u8 {
    match n {
        0 => 0,
        1 => 1,
        2..=3 => 2,
        4..=7 => 3,
        8..=14 => 4,
        _ => 5,
    }
}
