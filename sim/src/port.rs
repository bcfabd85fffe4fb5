//! Ports (§6): physical link, logical IB state, LID/SM LID, P_Key table, SET_PORT caps, and
//! the violation counters PortInfo reports.

use crate::profile::DeviceProfile;

/// Logical port state (PortInfo encoding, §6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortState {
    Down = 1,
    Init = 2,
    Armed = 3,
    Active = 4,
}

#[derive(Clone, Debug)]
pub struct Port {
    pub number: u8,
    /// Physical link up (INIT_PORT done and the fabric link not cut).
    pub link_up: bool,
    /// INIT_PORT issued (the driver wants the link).
    pub opened: bool,
    pub state: PortState,
    pub lid: u16,
    pub sm_lid: u16,
    pub sm_sl: u8,
    pub lmc: u8,
    pub gid_prefix: u64,
    pub port_guid: u64,
    pub cap_mask: u32,
    /// MTUCap and VLCap (PortInfo encodings), lowered by SET_PORT.
    pub mtu_cap: u8,
    pub vl_cap: u8,
    /// NeighborMTU (the MTU the port sends and accepts) and OperationalVLs, set by the SM
    /// through Set(PortInfo) and never above the caps.
    pub neighbor_mtu: u8,
    pub operational_vls: u8,
    pub pkeys: Vec<u16>,
    pub bad_pkey_counter: u16,
    pub qkey_violations: u16,
    /// PerfMgt traffic counters (PortCounters / PortCountersExtended, `pma.rs`).
    pub traffic: crate::pma::PortTraffic,
    /// Set by the fabric when the switch side of the link is cut (fault injection).
    pub cable_cut: bool,
}

impl Port {
    pub fn new(p: &DeviceProfile, _hca_index: usize, number: u8) -> Port {
        let mut pkeys = vec![0u16; 1 << p.log_max_pkeys.min(15)];
        if let Some(first) = pkeys.first_mut() {
            *first = 0xffff; // default full-member P_Key (§7.1)
        }
        Port {
            number,
            link_up: false,
            opened: false,
            state: PortState::Down,
            lid: 0,
            sm_lid: 0,
            sm_sl: 0,
            lmc: 0,
            gid_prefix: 0xfe80_0000_0000_0000,
            port_guid: p.node_guid.wrapping_add(u64::from(number)),
            // The profile's mask until SET_PORT replaces it.
            cap_mask: p.port_cap_mask,
            mtu_cap: p.max_mtu,
            vl_cap: p.max_vl,
            neighbor_mtu: p.max_mtu,
            operational_vls: 1,
            pkeys,
            bad_pkey_counter: 0,
            qkey_violations: 0,
            traffic: Default::default(),
            cable_cut: false,
        }
    }

    /// CLOSE_PORT / CLOSE_HCA: the link goes down and the logical state is lost.
    pub fn close(&mut self) {
        self.opened = false;
        self.link_down();
    }

    pub fn link_down(&mut self) {
        self.link_up = false;
        self.state = PortState::Down;
        self.lid = 0;
        self.sm_lid = 0;
    }

    /// The MTU enum data packets on this port may use: NeighborMTU within the MTU cap.
    pub fn mtu(&self) -> u8 {
        self.neighbor_mtu.min(self.mtu_cap)
    }

    pub fn active(&self) -> bool {
        self.link_up && self.state == PortState::Active
    }
}
