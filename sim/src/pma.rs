//! The firmware's performance-management agent (PerfMgt class 0x04) behind MAD_IFC:
//! ClassPortInfo, PortCounters (0x12) and PortCountersExtended (0x1D), Get and Set.
//!
//! Layouts: [`class_port_info`], [`port_counters`] (32-bit counters, saturating at
//! 0xFFFF_FFFF) and [`port_counters_ext`] (64-bit), written from IBA vol. 1 16.1.3 (the same
//! offsets as Linux's include/rdma/ib_pma.h), relative to the MAD data (`mad::DATA`).

use crate::be::Field;
use crate::hca::Hca;
use crate::mad::{self, status};

pub const ATTR_CLASS_PORT_INFO: u16 = 0x0001;
pub const ATTR_PORT_COUNTERS: u16 = 0x0012;
pub const ATTR_PORT_COUNTERS_EXT: u16 = 0x001d;

/// ClassPortInfo CapabilityMask bit 9: PortCountersExtended is supported (Linux's
/// `IB_PMA_CLASS_CAP_EXT_WIDTH`, which drivers/infiniband/core/sysfs.c checks before using
/// the 64-bit counters).
pub const CAP_EXT_WIDTH: u16 = 1 << 9;

/// ClassPortInfo (IBA 13.4.8.1), relative to the MAD data.
pub mod class_port_info {
    use crate::be::Field;

    pub const BASE_VERSION: Field = Field::whole(0, 1);
    pub const CLASS_VERSION: Field = Field::whole(1, 1);
    pub const CAPABILITY_MASK: Field = Field::whole(2, 2);
}

/// PortCounters (IBA 16.1.3.5), relative to the MAD data.
pub mod port_counters {
    use crate::be::Field;

    pub const PORT_SELECT: Field = Field::whole(1, 1);
    pub const COUNTER_SELECT: Field = Field::whole(2, 2);
    pub const XMIT_DATA: Field = Field::whole(24, 4);
    pub const RCV_DATA: Field = Field::whole(28, 4);
    pub const XMIT_PKTS: Field = Field::whole(32, 4);
    pub const RCV_PKTS: Field = Field::whole(36, 4);
}

/// PortCountersExtended (IBA 16.1.4.11), relative to the MAD data. The multicast packet
/// counters (56, 64) stay 0: multicast is not modelled.
pub mod port_counters_ext {
    use crate::be::Field;

    pub const PORT_SELECT: Field = Field::whole(1, 1);
    pub const COUNTER_SELECT: Field = Field::whole(2, 2);
    pub const XMIT_DATA: Field = Field::whole(8, 8);
    pub const RCV_DATA: Field = Field::whole(16, 8);
    pub const XMIT_PKTS: Field = Field::whole(24, 8);
    pub const RCV_PKTS: Field = Field::whole(32, 8);
    pub const UNICAST_XMIT_PKTS: Field = Field::whole(40, 8);
    pub const UNICAST_RCV_PKTS: Field = Field::whole(48, 8);
}

/// PortCounters CounterSelect bits of the four traffic counters.
pub mod sel {
    pub const XMIT_DATA: u16 = 0x1000;
    pub const RCV_DATA: u16 = 0x2000;
    pub const XMIT_PKTS: u16 = 0x4000;
    pub const RCV_PKTS: u16 = 0x8000;
}

/// PortCountersExtended CounterSelect bits.
pub mod selx {
    pub const XMIT_DATA: u16 = 0x0001;
    pub const RCV_DATA: u16 = 0x0002;
    pub const XMIT_PKTS: u16 = 0x0004;
    pub const RCV_PKTS: u16 = 0x0008;
    pub const UNICAST_XMIT: u16 = 0x0010;
    pub const UNICAST_RCV: u16 = 0x0020;
}

/// Traffic counters of one port. Data is counted in 4-byte words from the LRH through the
/// ICRC (the packet's LRH PktLen), packets one each; VL15 (SMP) packets are counted too,
/// since the IBA counts packets on all VLs. One 64-bit set backs both attributes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortTraffic {
    pub xmit_data: u64,
    pub rcv_data: u64,
    pub xmit_pkts: u64,
    pub rcv_pkts: u64,
    /// PortUnicastXmitPkts / PortUnicastRcvPkts: every modelled packet is unicast (no
    /// multicast), but each is cleared by its own CounterSelect bit.
    pub xmit_unicast: u64,
    pub rcv_unicast: u64,
}

fn sat32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl Hca {
    /// A packet of `words` 4-byte words (LRH PktLen) left port `port`.
    pub(crate) fn count_xmit(&mut self, port: u8, words: u32) {
        if let Some(p) = self.ports.get_mut(usize::from(port).wrapping_sub(1)) {
            p.traffic.xmit_pkts += 1;
            p.traffic.xmit_unicast += 1;
            p.traffic.xmit_data += u64::from(words);
        }
    }

    /// A packet of `words` 4-byte words arrived on port `port` (whatever happens to it next).
    pub(crate) fn count_rcv(&mut self, port: u8, words: u32) {
        if let Some(p) = self.ports.get_mut(usize::from(port).wrapping_sub(1)) {
            p.traffic.rcv_pkts += 1;
            p.traffic.rcv_unicast += 1;
            p.traffic.rcv_data += u64::from(words);
        }
    }

    /// The PerfMgt agent: `d` is the MAD data. Err is the MAD status.
    pub(crate) fn pma(
        &mut self,
        set: bool,
        attr: u16,
        d: &mut [u8; mad::GS_DATA_LEN],
    ) -> Result<(), u16> {
        if attr == ATTR_CLASS_PORT_INFO {
            if set {
                return Err(status::UNSUP_METHOD_ATTR);
            }
            *d = [0; mad::GS_DATA_LEN];
            class_port_info::BASE_VERSION.set(d, mad::VERSION.into());
            class_port_info::CLASS_VERSION.set(d, mad::VERSION.into());
            class_port_info::CAPABILITY_MASK.set(d, CAP_EXT_WIDTH.into());
            return Ok(());
        }
        if attr != ATTR_PORT_COUNTERS && attr != ATTR_PORT_COUNTERS_EXT {
            return Err(status::UNSUP_METHOD_ATTR);
        }
        // Both attributes place PortSelect and CounterSelect alike.
        const _: () = assert!(
            port_counters::PORT_SELECT.off == port_counters_ext::PORT_SELECT.off
                && port_counters::COUNTER_SELECT.off == port_counters_ext::COUNTER_SELECT.off
        );
        // PortSelect names one of this CA's ports (AllPortSelect is not advertised).
        let port = port_counters::PORT_SELECT.get(d) as u8;
        if port == 0 || port > self.profile.num_ports {
            return Err(status::INVALID_ATTR_VALUE);
        }
        let pi = usize::from(port) - 1;
        let select = port_counters::COUNTER_SELECT.get(d) as u16;
        let ext = attr == ATTR_PORT_COUNTERS_EXT;
        if set {
            let (xd, rd, xp, rp) = if ext {
                (
                    selx::XMIT_DATA,
                    selx::RCV_DATA,
                    selx::XMIT_PKTS,
                    selx::RCV_PKTS,
                )
            } else {
                (sel::XMIT_DATA, sel::RCV_DATA, sel::XMIT_PKTS, sel::RCV_PKTS)
            };
            let t = &mut self.ports[pi].traffic;
            if select & xd != 0 {
                t.xmit_data = 0;
            }
            if select & rd != 0 {
                t.rcv_data = 0;
            }
            if select & xp != 0 {
                t.xmit_pkts = 0;
            }
            if select & rp != 0 {
                t.rcv_pkts = 0;
            }
            if ext && select & selx::UNICAST_XMIT != 0 {
                t.xmit_unicast = 0;
            }
            if ext && select & selx::UNICAST_RCV != 0 {
                t.rcv_unicast = 0;
            }
        }
        // A Set answers like a Get, with the values after clearing (IBA 13.4.6.2: the
        // response carries the attribute's current value).
        let t = self.ports[pi].traffic;
        *d = [0; mad::GS_DATA_LEN];
        let mut put = |f: Field, v: u64| f.set(d, v);
        put(port_counters::PORT_SELECT, port.into());
        put(port_counters::COUNTER_SELECT, select.into());
        if ext {
            use port_counters_ext::*;
            put(XMIT_DATA, t.xmit_data);
            put(RCV_DATA, t.rcv_data);
            put(XMIT_PKTS, t.xmit_pkts);
            put(RCV_PKTS, t.rcv_pkts);
            put(UNICAST_XMIT_PKTS, t.xmit_unicast);
            put(UNICAST_RCV_PKTS, t.rcv_unicast);
        } else {
            use port_counters::*;
            put(XMIT_DATA, sat32(t.xmit_data).into());
            put(RCV_DATA, sat32(t.rcv_data).into());
            put(XMIT_PKTS, sat32(t.xmit_pkts).into());
            put(RCV_PKTS, sat32(t.rcv_pkts).into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{Packet, PacketOp};
    use crate::qp::ServiceType;
    use crate::smp::UdHeader;

    fn ud(payload: usize, imm: bool) -> Packet {
        Packet {
            src_hca: 0,
            src_port: 1,
            slid: 2,
            dlid: 4,
            sl: 0,
            dest_qpn: 70,
            src_qpn: 70,
            transport: ServiceType::Ud,
            op: PacketOp::SendOnly,
            psn: 0,
            pkey: 0xffff,
            qkey: 1,
            imm: imm.then_some(7),
            reth: None,
            solicited: false,
            grh: false,
            aeth: None,
            atomic: None,
            atomic_orig: None,
            payload: vec![0; payload],
        }
    }

    #[test]
    fn words_of_a_ud_packet_are_its_lrh_pkt_len() {
        // The SMP path packs real headers: its PktLen field must agree with the structured
        // packets' count for the same UD SEND Only without immediate data.
        for len in [0usize, 1, 3, 4, 5, 256, 2047] {
            let h = UdHeader {
                vl: 0,
                sl: 0,
                lnh: 2,
                dlid: 4,
                pkt_len_words: 0,
                slid: 2,
                opcode: 0x64,
                pad: 0,
                pkey: 0xffff,
                dest_qp: 70,
                psn: 0,
                qkey: 1,
                src_qp: 70,
            };
            let packed = h.pack(len);
            let pkt_len = u16::from_be_bytes([packed[4], packed[5]]);
            assert_eq!(ud(len, false).pkt_len_words(), u32::from(pkt_len), "{len}");
        }
        assert_eq!(ud(0, true).pkt_len_words(), 9, "LRH+BTH+DETH+ImmDt+ICRC");
        let mut ack = ud(0, false);
        ack.transport = ServiceType::Rc;
        ack.op = PacketOp::Acknowledge;
        assert_eq!(ack.pkt_len_words(), 7, "LRH+BTH+AETH+ICRC");
    }

    #[test]
    fn port_counters_saturate_at_32_bits() {
        assert_eq!(sat32(5), 5);
        assert_eq!(sat32(u64::from(u32::MAX)), u32::MAX);
        assert_eq!(sat32(1 << 40), u32::MAX);
    }
}
