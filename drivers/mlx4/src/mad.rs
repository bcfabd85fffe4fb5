//! Management datagrams as the driver builds and reads them (IBA vol. 1 13.4; docs/hardware.md
//! §6.2): the 256-byte MAD with its common header, the SMP fields (M_Key, the directed-route
//! DrSLID/DrDLID and paths) and the class data, one layout-checked view for MAD_IFC's
//! mailbox (SubnGet/Set to the firmware's SMA, PerfMgt to its PMA) and for the SMPs QP0
//! sends and receives.
//!
//! Public: the method codes ([`method`]) and attribute IDs ([`attr`]) that
//! [`Hca::mad_get`](crate::Hca::mad_get), [`Hca::mad_set`](crate::Hca::mad_set) and
//! [`Smp`](crate::Smp) take; the layout itself is the driver's own.
//!
//! The driver's own definitions, written from the IBA specification (cross-checked against
//! Linux's include/rdma/ib_mad.h and ib_smi.h); the model keeps independent ones
//! (sim/src/mad.rs) and the layouts tests (`layouts.rs`) compare the two.

use core::mem::{offset_of, size_of};

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::be::{Be16, Be32, Be64};

/// A MAD is 256 bytes.
pub(crate) const MAD_BYTES: usize = 256;

/// Base and class version of every class the driver sends (SubnMgmt, PerfMgt).
pub(crate) const VERSION: u8 = 1;

/// Management classes (IBA 13.4.4).
pub(crate) mod class {
    /// LID-routed subnet management.
    pub const SUBN_LID: u8 = 0x01;
    /// Directed-route subnet management.
    pub const SUBN_DR: u8 = 0x81;
    /// Performance management (IBA 16.1).
    pub const PERF_MGMT: u8 = 0x04;
}

/// MAD methods (IBA 13.4.5).
pub mod method {
    pub const GET: u8 = 0x01;
    pub const SET: u8 = 0x02;
    pub const GET_RESP: u8 = 0x81;
}

/// SMP attribute IDs (IBA 14.2.5; §6.2).
pub mod attr {
    pub const NODE_INFO: u16 = 0x0011;
    pub const GUID_INFO: u16 = 0x0014;
    pub const PORT_INFO: u16 = 0x0015;
}

/// The status word's direction bit D of a directed-route SMP (1 = returning, IBA 14.2.1.2).
pub(crate) const DR_DIRECTION: u16 = 0x8000;
/// The permissive LID (IBA 4.1.3): DrSLID/DrDLID of an SMP that leaves and reaches an
/// endport by directed route.
pub(crate) const PERMISSIVE_LID: u16 = 0xFFFF;
/// SMP data: the first 64 bytes of [`Mad::data`].
pub(crate) const SMP_DATA_LEN: usize = 64;
/// A directed-route SMP's initial and return paths: 64 bytes each after the SMP data.
pub(crate) const INITIAL_PATH: core::ops::Range<usize> = 64..128;

/// One MAD (IBA 13.4.2 common header; 14.2.1.1 / 14.2.1.2 SMP fields; 16.1.1 PerfMgt).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
pub(crate) struct Mad {
    pub base_version: u8,
    pub mgmt_class: u8,
    pub class_version: u8,
    /// Method; bit 7 set in responses.
    pub method: u8,
    /// Status; a directed-route SMP keeps its direction bit [`DR_DIRECTION`] here.
    pub status: Be16,
    /// Class specific; a directed-route SMP's hop pointer and hop count.
    pub hop_ptr: u8,
    pub hop_cnt: u8,
    pub tid: Be64,
    pub attr_id: Be16,
    _rsvd0: [u8; 2],
    pub attr_mod: Be32,
    /// SMPs: M_Key; PerfMgt: reserved.
    pub m_key: Be64,
    /// Directed-route SMPs: the LIDs of the LID-routed parts of the path.
    pub dr_slid: Be16,
    pub dr_dlid: Be16,
    _rsvd1: [u8; 28],
    /// Class data: an SMP's 64 bytes of data then (directed route) its initial and return
    /// paths; PerfMgt's 192 bytes of data.
    pub data: [u8; 192],
}
const _: () = {
    assert!(size_of::<Mad>() == MAD_BYTES);
    assert!(offset_of!(Mad, status) == 0x04);
    assert!(offset_of!(Mad, hop_ptr) == 0x06);
    assert!(offset_of!(Mad, hop_cnt) == 0x07);
    assert!(offset_of!(Mad, tid) == 0x08);
    assert!(offset_of!(Mad, attr_id) == 0x10);
    assert!(offset_of!(Mad, attr_mod) == 0x14);
    assert!(offset_of!(Mad, m_key) == 0x18);
    assert!(offset_of!(Mad, dr_slid) == 0x20);
    assert!(offset_of!(Mad, dr_dlid) == 0x22);
    assert!(offset_of!(Mad, data) == 0x40);
};

impl Mad {
    /// The MAD at the start of `b` (at least [`MAD_BYTES`] long), for writing.
    pub fn at_mut(b: &mut [u8]) -> Option<&mut Mad> {
        Mad::mut_from_prefix(b).ok().map(|(m, _)| m)
    }

    /// The MAD at the start of `b`, for reading.
    pub fn at(b: &[u8]) -> Option<&Mad> {
        Mad::ref_from_prefix(b).ok().map(|(m, _)| m)
    }

    /// Fill the common header of a request: versions 1, `class`, `method`, `attr_id`,
    /// `attr_mod`; status 0. The rest of the MAD is left as it is.
    pub fn request(&mut self, class: u8, method: u8, attr_id: u16, attr_mod: u32) {
        self.base_version = VERSION;
        self.mgmt_class = class;
        self.class_version = VERSION;
        self.method = method;
        self.status.set(0);
        self.attr_id.set(attr_id);
        self.attr_mod.set(attr_mod);
    }

    /// An SMP's 64 bytes of data.
    pub fn smp_data(&self) -> &[u8; SMP_DATA_LEN] {
        self.data[..SMP_DATA_LEN].try_into().expect("64 of 192")
    }

    /// An SMP's 64 bytes of data, for writing.
    pub fn smp_data_mut(&mut self) -> &mut [u8; SMP_DATA_LEN] {
        (&mut self.data[..SMP_DATA_LEN])
            .try_into()
            .expect("64 of 192")
    }
}

/// PerfMgt class data (IBA 16.1.3; the offsets of Linux's include/rdma/ib_pma.h), the 192
/// bytes at [`Mad::data`]: the attributes the driver reads and asks for, each field it uses by
/// name, the rest reserved for it.
pub(crate) mod pma {
    use core::mem::{offset_of, size_of};

    use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

    use crate::be::{Be16, Be32, Be64};

    /// PerfMgt data length: all of the MAD's class data.
    pub const DATA_LEN: usize = 192;

    /// ClassPortInfo (IBA 13.4.8.1): the versions and the CapabilityMask.
    #[repr(C)]
    #[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
    pub struct ClassPortInfo {
        pub base_version: u8,
        pub class_version: u8,
        pub capability_mask: Be16,
        _rsvd0: [u8; 188],
    }

    /// PortCounters (IBA 16.1.3.5): the port and counter selection of a request, and the four
    /// 32-bit traffic counters (data in 4-byte words, LRH to ICRC).
    #[repr(C)]
    #[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
    pub struct PortCounters {
        _rsvd0: u8,
        pub port_select: u8,
        pub counter_select: Be16,
        /// The error counters, which the driver does not read.
        _errors: [u8; 20],
        pub xmit_data: Be32,
        pub rcv_data: Be32,
        pub xmit_pkts: Be32,
        pub rcv_pkts: Be32,
        _rsvd1: [u8; 152],
    }

    /// PortCountersExtended (IBA 16.1.4.11): the same selection, the four traffic counters in
    /// 64 bits.
    #[repr(C)]
    #[derive(FromBytes, IntoBytes, KnownLayout, Immutable)]
    pub struct PortCountersExt {
        _rsvd0: u8,
        pub port_select: u8,
        pub counter_select: Be16,
        _rsvd1: [u8; 4],
        pub xmit_data: Be64,
        pub rcv_data: Be64,
        pub xmit_pkts: Be64,
        pub rcv_pkts: Be64,
        /// The unicast and multicast packet counters, which the driver does not read.
        _rsvd2: [u8; 152],
    }

    const _: () = {
        assert!(size_of::<ClassPortInfo>() == DATA_LEN);
        assert!(offset_of!(ClassPortInfo, capability_mask) == 2);
        assert!(size_of::<PortCounters>() == DATA_LEN);
        assert!(offset_of!(PortCounters, port_select) == 1);
        assert!(offset_of!(PortCounters, counter_select) == 2);
        assert!(offset_of!(PortCounters, xmit_data) == 24);
        assert!(offset_of!(PortCounters, rcv_data) == 28);
        assert!(offset_of!(PortCounters, xmit_pkts) == 32);
        assert!(offset_of!(PortCounters, rcv_pkts) == 36);
        assert!(size_of::<PortCountersExt>() == DATA_LEN);
        assert!(offset_of!(PortCountersExt, port_select) == 1);
        assert!(offset_of!(PortCountersExt, counter_select) == 2);
        assert!(offset_of!(PortCountersExt, xmit_data) == 8);
        assert!(offset_of!(PortCountersExt, rcv_data) == 16);
        assert!(offset_of!(PortCountersExt, xmit_pkts) == 24);
        assert!(offset_of!(PortCountersExt, rcv_pkts) == 32);
    };
}
