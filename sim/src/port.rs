//! Ports (§6).

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
    pub link_up: bool,
    pub state: PortState,
    pub lid: u16,
    pub sm_lid: u16,
    pub port_guid: u64,
}

impl Port {
    pub fn new(p: &DeviceProfile, _hca_index: usize, number: u8) -> Port {
        Port {
            number,
            link_up: false,
            state: PortState::Down,
            lid: 0,
            sm_lid: 0,
            port_guid: p.node_guid.wrapping_add(u64::from(number)),
        }
    }
    pub fn close(&mut self) {
        self.link_up = false;
        self.state = PortState::Down;
        self.lid = 0;
        self.sm_lid = 0;
    }
}
