//! Ports: INIT_PORT/CLOSE_PORT, QUERY_PORT and subnet attributes through MAD_IFC
//! (docs/hardware.md §2.5, §6).

use crate::be::BeBytes;
use crate::cmd::Out;
use crate::error::Error;
use crate::mad::attr;
use crate::outbox;
use crate::platform::Platform;
use crate::regs::{FwStatus, Opcode};
use crate::Hca;
use verbs::{Gid, Mtu, PortAttr, PortState};
use zerocopy::FromZeros;

/// Performance management (PerfMgt, management class 0x04) through MAD_IFC, as Linux's
/// mlx4_ib forwards it (`ib_process_mad`). Layouts: IBA vol. 1 16.1.3, the offsets of
/// Linux's include/rdma/ib_pma.h, relative to the MAD data at byte 64.
pub mod pma {
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    pub const PORT_COUNTERS: u16 = 0x0012;
    pub const PORT_COUNTERS_EXT: u16 = 0x001D;
    /// ClassPortInfo CapabilityMask (data offset 2) bit 9: PortCountersExtended supported.
    pub const CAP_EXT_WIDTH: u16 = 1 << 9;
    /// PortCounters CounterSelect bits of PortXmitData, PortRcvData, PortXmitPkts, PortRcvPkts.
    pub const SEL_TRAFFIC: u16 = 0xF000;
    /// PortCountersExtended CounterSelect bits of the same four counters.
    pub const SELX_TRAFFIC: u16 = 0x000F;
    pub use crate::mad::pma::DATA_LEN;
}

/// A port's traffic counters (PortCounters or PortCountersExtended). Data counters are in
/// 4-byte words of every octet from the LRH through the ICRC of each packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    pub xmit_data_words: u64,
    pub rcv_data_words: u64,
    pub xmit_packets: u64,
    pub rcv_packets: u64,
    /// Read from the 64-bit PortCountersExtended; false: the 32-bit PortCounters, whose
    /// values stop at 0xFFFF_FFFF.
    pub extended: bool,
}

impl PortCounters {
    /// Decode PortCounters (`extended` false) or PortCountersExtended data.
    pub(crate) fn parse(d: &[u8; pma::DATA_LEN], extended: bool) -> PortCounters {
        if extended {
            let c: &mad_pma::PortCountersExt = zerocopy::transmute_ref!(d);
            PortCounters {
                xmit_data_words: c.xmit_data.get(),
                rcv_data_words: c.rcv_data.get(),
                xmit_packets: c.xmit_pkts.get(),
                rcv_packets: c.rcv_pkts.get(),
                extended,
            }
        } else {
            let c: &mad_pma::PortCounters = zerocopy::transmute_ref!(d);
            PortCounters {
                xmit_data_words: u64::from(c.xmit_data.get()),
                rcv_data_words: u64::from(c.rcv_data.get()),
                xmit_packets: u64::from(c.xmit_pkts.get()),
                rcv_packets: u64::from(c.rcv_pkts.get()),
                extended,
            }
        }
    }

    pub fn xmit_bytes(&self) -> u64 {
        self.xmit_data_words.saturating_mul(4)
    }

    pub fn rcv_bytes(&self) -> u64 {
        self.rcv_data_words.saturating_mul(4)
    }
}

/// QUERY_PORT output (§2.5).
#[derive(Clone, Copy, Debug, Default)]
pub struct QueryPort {
    pub link_up: bool,
    pub ib_supported: bool,
    pub max_mtu: u8,
    pub max_vl: u8,
}

/// SET_PORT (IB, op_mod 0) mailbox dword 0 (Linux port.c `mlx4_SET_PORT`): change bits for the
/// MTU and VL caps, and the caps themselves.
pub mod set_port {
    pub const CHANGE_MTU_CAP: u32 = 1 << 22;
    pub const CHANGE_VL_CAP: u32 = 1 << 21;
    pub const MTU_CAP_SHIFT: u32 = 12;
    pub const VL_CAP_SHIFT: u32 = 4;
    /// The MTU cap Linux gives a native (non-SR-IOV) port: IB_MTU_4096.
    pub const MTU_4096: u32 = 5;
    /// VL caps offered in turn: numbers of data VLs, not PortInfo's VLCap encoding.
    pub const VL_CAPS: [u32; 4] = [8, 4, 2, 1];
}

/// SET_PORT mailbox dword 0 for an MTU cap and a VL cap (a number of VLs).
pub fn set_port_word0(mtu_cap: u32, vl_cap: u32) -> u32 {
    set_port::CHANGE_MTU_CAP
        | set_port::CHANGE_VL_CAP
        | (mtu_cap << set_port::MTU_CAP_SHIFT)
        | (vl_cap << set_port::VL_CAP_SHIFT)
}

/// PortInfo CapabilityMask (IBA 14.2.5.6: SMP data offset 20).
const PORT_INFO_CAP_MASK: usize = 20;

use crate::mad::{class, method, pma as mad_pma, Mad};

/// A PortCounters or PortCountersExtended request's data: the port and the counters to
/// clear (the two attributes place them alike).
pub(crate) fn counters_request(port: u8, select: u16) -> [u8; pma::DATA_LEN] {
    let mut r = mad_pma::PortCounters::new_zeroed();
    r.port_select = port;
    r.counter_select.set(select);
    zerocopy::transmute!(r)
}

/// Decode PortInfo SMP data (§6.2 table) plus a GUID into port attributes.
pub fn parse_port_info(d: &[u8; 64], guid0: u64) -> PortAttr {
    let mut gid = [0u8; 16];
    gid[..8].copy_from_slice(&d[8..16]);
    gid[8..].copy_from_slice(&guid0.to_be_bytes());
    PortAttr {
        state: PortState::from_raw(d.be8::<32>() & 0xF),
        phys_state: d.be8::<33>() >> 4,
        lid: d.be16::<16>(),
        sm_lid: d.be16::<18>(),
        lmc: d.be8::<34>() & 7,
        sm_sl: d.be8::<36>() & 0xF,
        active_mtu: Mtu::from_raw(d.be8::<36>() >> 4),
        max_mtu: Mtu::from_raw(d.be8::<41>() & 0xF),
        gid: Gid(gid),
    }
}

impl<P: Platform> Hca<P> {
    /// INIT_PORT (cmd_if_rev 3: no mailbox).
    pub fn init_port(&mut self, port: u8) -> Result<(), Error> {
        self.check_port(port)?;
        self.cmd(Opcode::INIT_PORT, 0, port as u32, 0, Out::None)?;
        self.ports_up[port as usize - 1] = true;
        Ok(())
    }

    /// SET_PORT for an IB port as Linux's `mlx4_setup_hca` issues it before the port is used
    /// (port.c `mlx4_SET_PORT`): the port's default capability mask (PortInfo CapabilityMask,
    /// read through MAD_IFC as `mlx4_get_port_ib_caps` does; 0 if the firmware refuses it), MTU
    /// cap 4096 whatever the port's own maximum, and VL caps 8, 4, 2, 1 in turn while the firmware answers "exceeds limits" or "bad
    /// size" (the statuses Linux maps to -ENOMEM). Any other failure, or 1 VL refused, is the
    /// command's error. Returns the VL cap the firmware took.
    pub fn set_port_ib(&mut self, port: u8) -> Result<u32, Error> {
        self.check_port(port)?;
        // A failed status or MAD status leaves the mask 0, as Linux goes on; a command that
        // never completed means the device failed, which ends the bring-up.
        let cap_mask = match self.mad_get(port, attr::PORT_INFO, port as u32) {
            Ok(d) => d.be32::<PORT_INFO_CAP_MASK>(),
            Err(Error::Cmd(_) | Error::MadStatus { .. }) => 0,
            Err(e) => return Err(e),
        };
        // Linux gives every port of a single-function card IB_MTU_4096, whatever the port's
        // own maximum (mlx4_setup_hca); the firmware keeps the port's maximum below that.
        let mtu_cap = set_port::MTU_4096;
        let mut last = Error::Capability("SET_PORT");
        for vl in set_port::VL_CAPS {
            let b = self.cmd.inbox_clear();
            if b.len() < 256 {
                return Err(Error::NoMemory("command mailbox"));
            }
            b[0..4].copy_from_slice(&set_port_word0(mtu_cap, vl).to_be_bytes());
            b[4..8].copy_from_slice(&cap_mask.to_be_bytes());
            match self.cmd_in(Opcode::SET_PORT, port as u32, 0) {
                Ok(()) => return Ok(vl),
                Err(e @ Error::Cmd(c))
                    if matches!(c.status, FwStatus::ExceedLim | FwStatus::BadSize) =>
                {
                    last = e
                }
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// CLOSE_PORT.
    pub fn close_port(&mut self, port: u8) -> Result<(), Error> {
        self.check_port(port)?;
        self.ports_up[port as usize - 1] = false;
        self.cmd(Opcode::CLOSE_PORT, 0, port as u32, 0, Out::None)
            .map(|_| ())
    }

    pub(crate) fn check_port(&self, port: u8) -> Result<(), Error> {
        if port == 0 || port > self.caps.num_ports.min(2) {
            return Err(Error::InvalidArgument("port number"));
        }
        Ok(())
    }

    /// QUERY_PORT (§2.5).
    pub fn query_port_cmd(&mut self, port: u8) -> Result<QueryPort, Error> {
        self.check_port(port)?;
        self.cmd_out(Opcode::QUERY_PORT, 0, port as u32, 0)?;
        let o: &outbox::QueryPort = self.cmd.out_view()?;
        Ok(QueryPort {
            link_up: o.link & 0x80 != 0,
            ib_supported: o.link & 1 != 0,
            max_mtu: o.ib_mtu & 0xF,
            max_vl: o.vl & 0xF,
        })
    }

    /// Port capabilities at bring-up, read where Linux reads them, between QUERY_DEV_CAP and
    /// the ICM sizing: QUERY_PORT for every port (Linux's `mlx4_dev_cap`; a failure ends the
    /// bring-up), then every port's uplink GUID by MOD_STAT_CFG op_mod 2, in_mod port << 8,
    /// output high word at 0x14 and low word at 0x1c (Linux's `mlx4_get_phys_port_id`, which
    /// logs a failed status and goes on: the GUID stays 0; a timeout is the device's failure).
    pub(crate) fn read_port_caps(&mut self) -> Result<(), Error> {
        let ports = self.caps.num_ports.min(2);
        for port in 1..=ports {
            self.caps.ports[port as usize - 1] = self.query_port_cmd(port)?;
        }
        for port in 1..=ports {
            let guid = match self.cmd_out(Opcode::MOD_STAT_CFG, 0, u32::from(port) << 8, 2) {
                Ok(()) => {
                    let o: &outbox::PhysPortId = self.cmd.out_view()?;
                    (u64::from(o.guid_hi.get()) << 32) | u64::from(o.guid_lo.get())
                }
                // A firmware status is logged and the GUID left 0; a command that never
                // completed means the device failed, which ends the bring-up.
                Err(e @ Error::Cmd(_)) => {
                    log::warn!("mlx4: port {port}: no uplink GUID ({e})");
                    0
                }
                Err(e) => return Err(e),
            };
            self.caps.uplink_guid[port as usize - 1] = guid;
        }
        Ok(())
    }

    /// Send a SubnGet SMP to the firmware's SMA through MAD_IFC (op_mod 3: ignore M_Key and
    /// B_Key) and return the 64 bytes of SMP data.
    pub fn mad_get(&mut self, port: u8, attr_id: u16, attr_mod: u32) -> Result<[u8; 64], Error> {
        self.mad_ifc(port, method::GET, attr_id, attr_mod, None)
    }

    /// One LID-routed SubnGet/SubnSet through MAD_IFC to the local SMA (§6.2; op_mod 3), with
    /// `data` as the SMP data of a Set. Returns the response's SMP data, or the MAD status.
    pub(crate) fn mad_ifc(
        &mut self,
        port: u8,
        method: u8,
        attr_id: u16,
        attr_mod: u32,
        data: Option<&[u8; 64]>,
    ) -> Result<[u8; 64], Error> {
        self.check_port(port)?;
        let b = self.cmd.inbox_clear();
        if b.len() < 256 {
            return Err(Error::NoMemory("command mailbox"));
        }
        let m = Mad::at_mut(b).ok_or(Error::NoMemory("command mailbox"))?;
        m.request(class::SUBN_LID, method, attr_id, attr_mod);
        if let Some(d) = data {
            *m.smp_data_mut() = *d;
        }
        let inbox = self.cmd.boxes.as_ref().map_or(0, |(i, _)| i.bus());
        self.cmd_out(Opcode::MAD_IFC, inbox, port as u32, 3)?;
        let o: &outbox::MadIfc = self.cmd.out_view()?;
        let status = o.status.get();
        if status != 0 {
            return Err(Error::MadStatus {
                attr: attr_id,
                status,
            });
        }
        let mut d = [0u8; 64];
        d.copy_from_slice(&o.data[..64]);
        Ok(d)
    }

    /// One PerfMgt Get/Set through MAD_IFC (op_mod 3, as Linux's `mlx4_MAD_IFC` without a work
    /// completion). `data` is the start of the PerfMgt data; returns the response's data.
    fn pma_mad(
        &mut self,
        port: u8,
        method: u8,
        attr_id: u16,
        data: &[u8],
    ) -> Result<[u8; pma::DATA_LEN], Error> {
        self.check_port(port)?;
        let b = self.cmd.inbox_clear();
        if b.len() < 256 || data.len() > pma::DATA_LEN {
            return Err(Error::NoMemory("command mailbox"));
        }
        let m = Mad::at_mut(b).ok_or(Error::NoMemory("command mailbox"))?;
        m.request(class::PERF_MGMT, method, attr_id, 0);
        m.data[..data.len()].copy_from_slice(data);
        let inbox = self.cmd.boxes.as_ref().map_or(0, |(i, _)| i.bus());
        self.cmd_out(Opcode::MAD_IFC, inbox, port as u32, 3)?;
        let o: &outbox::MadIfc = self.cmd.out_view()?;
        let status = o.status.get();
        if status != 0 {
            return Err(Error::MadStatus {
                attr: attr_id,
                status,
            });
        }
        Ok(o.data)
    }

    /// Whether the PerfMgt agent has PortCountersExtended (ClassPortInfo CapabilityMask).
    pub fn pma_has_extended(&mut self, port: u8) -> Result<bool, Error> {
        let d = self.pma_mad(port, method::GET, pma::CLASS_PORT_INFO, &[])?;
        let info: &mad_pma::ClassPortInfo = zerocopy::transmute_ref!(&d);
        Ok(info.capability_mask.get() & pma::CAP_EXT_WIDTH != 0)
    }

    /// The port's traffic counters: PortCountersExtended if ClassPortInfo advertises it,
    /// else PortCounters (the choice Linux's ib_core sysfs makes).
    pub fn port_counters(&mut self, port: u8) -> Result<PortCounters, Error> {
        let ext = self.pma_has_extended(port)?;
        let attr = if ext {
            pma::PORT_COUNTERS_EXT
        } else {
            pma::PORT_COUNTERS
        };
        let d = self.pma_mad(port, method::GET, attr, &counters_request(port, 0))?;
        Ok(PortCounters::parse(&d, ext))
    }

    /// Clear the four traffic counters of the port (Set with CounterSelect, on both
    /// attributes when the extended one exists).
    pub fn clear_port_counters(&mut self, port: u8) -> Result<(), Error> {
        let clear = counters_request(port, pma::SEL_TRAFFIC);
        self.pma_mad(port, method::SET, pma::PORT_COUNTERS, &clear)?;
        if self.pma_has_extended(port)? {
            let clear = counters_request(port, pma::SELX_TRAFFIC);
            self.pma_mad(port, method::SET, pma::PORT_COUNTERS_EXT, &clear)?;
        }
        Ok(())
    }

    /// Port attributes: PortInfo (state, LID, SM LID, MTU, GID prefix) and GUIDInfo block 0.
    pub fn port_attr(&mut self, port: u8) -> Result<PortAttr, Error> {
        let pi = self.mad_get(port, attr::PORT_INFO, port as u32)?;
        let gi = self.mad_get(port, attr::GUID_INFO, 0)?;
        Ok(parse_port_info(&pi, gi.be64::<0>()))
    }

    /// Node GUID from NodeInfo (§6.2).
    pub fn node_guid(&mut self) -> Result<u64, Error> {
        let ni = self.mad_get(1, attr::NODE_INFO, 0)?;
        Ok(ni.be64::<12>())
    }

    /// Wait (bounded) until the port's logical state is ACTIVE; needs a subnet manager.
    pub fn wait_port_active(&mut self, port: u8, timeout_ms: u64) -> Result<PortAttr, Error> {
        let start = self.p.now_ns();
        loop {
            self.process_events();
            let a = self.port_attr(port)?;
            if a.state == PortState::Active {
                return Ok(a);
            }
            if self.p.now_ns().saturating_sub(start) > timeout_ms * 1_000_000 {
                return Err(Error::PortNotActive {
                    port,
                    state: a.state,
                });
            }
            self.p.delay_us(1000);
        }
    }

    /// PORT_CHANGE events seen for `port`.
    pub fn port_change_events(&self, port: u8) -> u32 {
        match port {
            1 | 2 => self.port_events[port as usize - 1],
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_port_word0_is_linux_layout() {
        // MTU cap 4096 (5) in bits 15:12, 8 VLs in bits 7:4, change bits 22 and 21.
        assert_eq!(set_port_word0(set_port::MTU_4096, 8), 0x0060_5080);
        assert_eq!(set_port_word0(set_port::MTU_4096, 1), 0x0060_5010);
    }

    #[test]
    fn port_counters_decode_both_layouts() {
        let mut d = [0u8; 192];
        d[24..28].copy_from_slice(&0xFFFF_FFFFu32.to_be_bytes());
        d[28..32].copy_from_slice(&9u32.to_be_bytes());
        d[32..36].copy_from_slice(&3u32.to_be_bytes());
        d[36..40].copy_from_slice(&1u32.to_be_bytes());
        let c = PortCounters::parse(&d, false);
        assert_eq!(
            (
                c.xmit_data_words,
                c.rcv_data_words,
                c.xmit_packets,
                c.rcv_packets
            ),
            (0xFFFF_FFFF, 9, 3, 1)
        );
        assert_eq!(c.rcv_bytes(), 36);
        let mut x = [0u8; 192];
        x[8..16].copy_from_slice(&(1u64 << 40).to_be_bytes());
        x[16..24].copy_from_slice(&7u64.to_be_bytes());
        x[24..32].copy_from_slice(&5u64.to_be_bytes());
        x[32..40].copy_from_slice(&6u64.to_be_bytes());
        let c = PortCounters::parse(&x, true);
        assert_eq!(
            (
                c.xmit_data_words,
                c.rcv_data_words,
                c.xmit_packets,
                c.rcv_packets
            ),
            (1 << 40, 7, 5, 6)
        );
        assert!(c.extended);
    }

    #[test]
    fn smp_header_is_subn_get() {
        let mut b = [0u8; 256];
        Mad::at_mut(&mut b)
            .unwrap()
            .request(class::SUBN_LID, method::GET, attr::PORT_INFO, 1);
        assert_eq!(&b[0..4], &[1, 1, 1, 1]);
        assert_eq!(&b[0x10..0x12], &[0x00, 0x15]);
        assert_eq!(&b[0x14..0x18], &[0, 0, 0, 1]);
    }

    #[test]
    fn port_info_decodes_state_lids_mtu_and_gid() {
        let mut d = [0u8; 64];
        d[8..16].copy_from_slice(&0xFE80_0000_0000_0000u64.to_be_bytes());
        d[16..18].copy_from_slice(&0x0021u16.to_be_bytes());
        d[18..20].copy_from_slice(&0x0001u16.to_be_bytes());
        d[32] = 0x04;
        d[33] = 0x50;
        d[36] = 0x40 | 0x3;
        d[41] = 5;
        let a = parse_port_info(&d, 0x0002_c903_0001_0203);
        assert_eq!(a.state, PortState::Active);
        assert_eq!(a.phys_state, 5);
        assert_eq!((a.lid, a.sm_lid), (0x21, 1));
        assert_eq!(a.active_mtu, Some(Mtu::Mtu2048));
        assert_eq!(a.max_mtu, Some(Mtu::Mtu4096));
        assert_eq!(a.sm_sl, 3);
        assert_eq!(a.gid.0[0], 0xFE);
        assert_eq!(a.gid.0[15], 0x03);
    }
}
