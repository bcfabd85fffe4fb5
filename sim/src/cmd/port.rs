//! Port commands: INIT_PORT, CLOSE_PORT, SET_PORT (IB), QUERY_PORT, MAD_IFC with the SMA
//! (§2.5, §6).

use crate::be::{BeRead, BeWrite};
use crate::eq::Event;
use crate::hca::{FabricRequest, Hca};
use crate::hcr::{CmdResult, Command, Status};
use crate::port::PortState;

/// MAD status values (IB spec MAD status field).
const MAD_STATUS_BAD_VERSION: u16 = 0x0004;
const MAD_STATUS_UNSUP_METHOD_ATTR: u16 = 0x000c;
const MAD_STATUS_INVALID_ATTR_VALUE: u16 = 0x001c;
/// SMP attribute MlnxExtendedPortInfo (vendor-specific range, IBA 14.2.5).
const ATTR_MLNX_EXT_PORT_INFO: u16 = 0xff90;

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
        let mb = self.mailbox_in(c, 0x40)?;
        let d0 = mb.be32(0);
        let mtu = ((d0 >> 12) & 0xf) as u8;
        let vl = ((d0 >> 4) & 0xf) as u8;
        // IB MTU encodings are 1 (256) ..= 5 (4096).
        if d0 & (1 << 22) != 0 && !(1..=5).contains(&mtu) {
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
        if d0 & (1 << 21) != 0 && (vl == 0 || vl > max_vls) {
            // §2.1: Linux retries VL caps 8, 4, 2, 1 while the status is "exceeds limits".
            // No violation: probing is how the driver learns the limit.
            return Err(Status::ExceedLim);
        }
        let pk = mb.be16(0x28);
        if d0 & (1 << 20) != 0
            && (pk == 0 || usize::from(pk) > 1usize << self.profile.log_max_pkeys)
        {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§6.4",
                format!("SET_PORT P_Key table size {pk}"),
            ));
        }
        let p = &mut self.ports[i];
        if d0 & (1 << 22) != 0 {
            p.mtu_cap = mtu;
            p.neighbor_mtu = p.neighbor_mtu.min(mtu);
        }
        if d0 & (1 << 21) != 0 {
            p.vl_cap = vl_cap_encoding(vl);
            p.operational_vls = p.operational_vls.min(p.vl_cap);
        }
        p.cap_mask = mb.be32(4);
        Ok(None)
    }

    /// QUERY_PORT (0x043): output mailbox per §2.5.
    pub(crate) fn cmd_query_port(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        let i = self.port_index(c.in_mod, "QUERY_PORT")?;
        let pr = self.profile.clone();
        let p = &self.ports[i];
        let mut b = vec![0u8; 0x40];
        b.put8(0x00, if p.link_up { 0x80 } else { 0 } | 0x01);
        // MTU and VL caps as SET_PORT left them (the device's until then).
        b.put8(0x01, p.mtu_cap & 0xf);
        // link info: speeds (2.5/5/10/14 Gb/s), widths 1x/4x, log GIDs, log P_Keys.
        b.put32(
            0x04,
            (0x0f << 24)
                | (0x03 << 8)
                | (u32::from(pr.log_max_gids & 0xf) << 4)
                | u32::from(pr.log_max_pkeys & 0xf),
        );
        b.put8(0x06, 0x03); // max port width: 1x | 4x (IB width bitmask)
        b.put8(
            0x07,
            ((pr.log_max_gids & 0xf) << 4) | (pr.log_max_pkeys & 0xf),
        );
        // Log2 of the MAC and VLAN table sizes (128 each on a ConnectX-3; Linux asks for
        // 2^7 of each by default and warns that it is "too much" if the port offers less).
        b.put8(0x0a, (LOG_MAX_VLANS << 4) | LOG_MAX_MACS);
        b.put8(0x0b, p.vl_cap & 0xf);
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
        let mut mad = self.mailbox_in(c, 256)?;
        let (base, class, cver, method) = (mad.be8(0), mad.be8(1), mad.be8(2), mad.be8(3));
        if base != 1 {
            // §1.2 0x30: bad management packet (silently discarded).
            return Err(self.cmd_fail(
                Status::BadMgmtPkt,
                "§6.2",
                format!("MAD_IFC with base version {base}"),
            ));
        }
        let mut status = 0u16;
        let attr = mad.be16(0x10);
        let attr_mod = mad.be32(0x14);
        if !matches!(class, 0x01 | 0x81 | crate::pma::CLASS_PERF_MGMT) || cver != 1 {
            status = MAD_STATUS_BAD_VERSION;
        } else if !matches!(method, 0x01 | 0x02) {
            status = MAD_STATUS_UNSUP_METHOD_ATTR;
        } else if class == crate::pma::CLASS_PERF_MGMT {
            // PerfMgt data is the 192 bytes after the 40 reserved bytes (IBA 16.1.1).
            let mut data = [0u8; 192];
            data.copy_from_slice(&mad[0x40..0x100]);
            match self.pma(method == 0x02, attr, &mut data) {
                Ok(()) => mad[0x40..0x100].copy_from_slice(&data),
                Err(s) => status = s,
            }
        } else {
            let mut data = [0u8; 64];
            data.copy_from_slice(&mad[0x40..0x80]);
            match self.sma(i, method == 0x02, attr, attr_mod, &mut data) {
                Ok(()) => mad[0x40..0x80].copy_from_slice(&data),
                Err(s) => status = s,
            }
        }
        mad.put8(3, 0x81); // GetResp
        let dr = if class == 0x81 { 0x8000 } else { 0 };
        mad.put16(4, status | dr);
        self.mailbox_out(c, &mad)?;
        Ok(None)
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
            (0x0010, false) => {
                *d = [0; 64];
                let s = pr.node_description.as_bytes();
                d[..s.len().min(64)].copy_from_slice(&s[..s.len().min(64)]);
            }
            (0x0011, false) => {
                *d = [0; 64];
                d[0] = 1;
                d[1] = 1;
                d[2] = 1; // channel adapter
                d[3] = pr.num_ports;
                d.put64(4, pr.node_guid);
                d.put64(12, pr.node_guid);
                d.put64(20, self.ports[pi].port_guid);
                d.put16(28, 1 << pr.log_max_pkeys.min(15));
                d.put16(30, pr.device_id);
                d.put32(32, u32::from(pr.revision));
                d[36] = self.ports[pi].number;
                d[37..40].copy_from_slice(&[0x00, 0x02, 0xc9]);
            }
            (0x0014, false) => {
                *d = [0; 64];
                if attr_mod == 0 {
                    d.put64(0, self.ports[pi].port_guid);
                }
            }
            (0x0015, _) => {
                // AttributeModifier: the port number in bits 7:0; bit 31 of a Set says
                // LinkSpeedExtEnabled applies (infiniband-diags' ibportstate sets it, as
                // OpenSM does, for every port whose CapabilityMask has
                // IsExtendedSpeedsSupported; the LinkSpeed*Enabled fields are not modelled).
                if attr_mod & 0x7fff_ff00 != 0 || (!set && attr_mod & 0x8000_0000 != 0) {
                    return Err(MAD_STATUS_INVALID_ATTR_VALUE);
                }
                let n = attr_mod & 0xff;
                let port = if n == 0 { pi } else { n as usize - 1 };
                if port >= self.ports.len() {
                    return Err(MAD_STATUS_INVALID_ATTR_VALUE);
                }
                if set {
                    self.sma_set_port_info(port, d)?;
                }
                *d = self.port_info(port);
            }
            (0x0016, _) => {
                let block = attr_mod as usize & 0xffff;
                let n = self.ports[pi].pkeys.len();
                if block * 32 >= n {
                    return Err(MAD_STATUS_INVALID_ATTR_VALUE);
                }
                if set {
                    for k in 0..32 {
                        if block * 32 + k < n {
                            self.ports[pi].pkeys[block * 32 + k] = d.be16(k * 2);
                        }
                    }
                }
                *d = [0; 64];
                for k in 0..32 {
                    let v = self.ports[pi]
                        .pkeys
                        .get(block * 32 + k)
                        .copied()
                        .unwrap_or(0);
                    d.put16(k * 2, v);
                }
            }
            (0x0017, false) => *d = [0; 64], // every SL on VL0
            (ATTR_MLNX_EXT_PORT_INFO, false) => {
                // Mellanox's vendor attribute (Linux mlx4_ib reads it as
                // MLX4_ATTR_EXTENDED_PORT_INFO in `mlx4_ib_query_port`: byte 15 bit 0 is
                // "FDR10 active"; infiniband-diags' ibportstate reads it from every Mellanox
                // port): StateChangeEnable at byte 3, FDR10 LinkSpeedSupported 7, Enabled 11,
                // Active 15. The modelled link runs FDR (PortInfo LinkSpeedExtActive), not
                // FDR10, and FDR10 is not modelled: all zero.
                *d = [0; 64];
            }
            _ => return Err(MAD_STATUS_UNSUP_METHOD_ATTR),
        }
        Ok(())
    }

    fn port_info(&self, i: usize) -> [u8; 64] {
        let pr = &self.profile;
        let p = &self.ports[i];
        let mut d = [0u8; 64];
        d.put64(8, p.gid_prefix);
        d.put16(16, p.lid);
        d.put16(18, p.sm_lid);
        d.put32(20, p.cap_mask);
        d[28] = p.number;
        d[29] = 0x03; // width enabled 1x|4x
        d[30] = 0x03; // width supported
        d[31] = if p.link_up { 0x02 } else { 0 }; // 4x active
        d[32] = (0x7 << 4) | p.state as u8; // speeds supported | state
        let phys = if p.link_up { 5 } else { 3 }; // LinkUp / Disabled
        d[33] = (phys << 4) | 0x2;
        d[34] = p.lmc & 7;
        d[35] = (1 << 4) | 0x7; // speed active SDR (FDR via ext speed) | enabled
        d[36] = (p.mtu() << 4) | (p.sm_sl & 0xf); // NeighborMTU | master SM SL
        d[37] = p.vl_cap << 4; // VLCap (SET_PORT)
        d[41] = p.mtu_cap & 0xf; // MTUCap (SET_PORT)
        d[43] = p.operational_vls << 4;
        d.put16(46, p.bad_pkey_counter);
        d.put16(48, p.qkey_violations);
        d[50] = 1 << pr.log_max_gids.min(7);
        d[62] = (1 << 4) | 1; // ext speed active FDR | supported FDR
        d
    }

    fn sma_set_port_info(&mut self, i: usize, d: &[u8; 64]) -> Result<(), u16> {
        let lid = d.be16(16);
        let sm_lid = d.be16(18);
        let state = d[32] & 0xf;
        let p = &self.ports[i];
        if !(lid == 0 || lid < 0xc000) || sm_lid >= 0xc000 {
            return Err(MAD_STATUS_INVALID_ATTR_VALUE);
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
            _ => return Err(MAD_STATUS_INVALID_ATTR_VALUE),
        };
        // NeighborMTU and OperationalVLs (an SM sets both for the link): within the caps
        // SET_PORT left; 0 leaves them (OperationalVLs 0 is "no change" in the IBA).
        let (nmtu, opvls) = (d[36] >> 4, d[43] >> 4);
        if nmtu > p.mtu_cap || opvls > p.vl_cap {
            return Err(MAD_STATUS_INVALID_ATTR_VALUE);
        }
        let was_active = p.state == PortState::Active;
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
        p.lmc = d[34] & 7;
        p.sm_sl = d[36] & 0xf;
        let n = p.number;
        p.state = if new_state == PortState::Down && p.link_up {
            PortState::Init
        } else {
            new_state
        };
        let now_active = p.state == PortState::Active;
        if now_active != was_active {
            self.port_change_event(n, now_active);
        }
        Ok(())
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

    /// Called by the fabric's subnet manager: assign the LID and bring the port ACTIVE.
    pub(crate) fn sm_configure(&mut self, port: u8, lid: u16, sm_lid: u16) {
        let Some(p) = self.ports.iter_mut().find(|p| p.number == port) else {
            return;
        };
        if !p.link_up {
            return;
        }
        p.lid = lid;
        p.sm_lid = sm_lid;
        let was = p.state;
        p.state = PortState::Active;
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
const LOG_MAX_MACS: u8 = 7;
/// Log2 of the per-port VLAN table size reported by QUERY_PORT (ConnectX-3: 128).
const LOG_MAX_VLANS: u8 = 7;

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
