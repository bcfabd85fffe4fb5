//! The general services interface, QP1 (§4.3): MLX send WQEs on a GSI QP carry a whole UD
//! packet (LRH, BTH, DETH, a 256-byte MAD) that travels on a data VL like any UD packet, and
//! UD packets addressed to DestQP 1 arrive on the GSI QP of their port.
//!
//! Linux's mlx4_ib owns QP1 once it has issued CONF_SPECIAL_QP: `get_sqp_num` (Linux
//! drivers/infiniband/hw/mlx4/qp.c) places QP1 of port p at special QP base + 2 + p - 1, and
//! `build_mlx_header` writes the headers: VL from the SL-to-VL table (never VL15), DETH source
//! QP 1, the Q_Key of the work request, the P_Key of its P_Key index. Everything a perfquery,
//! smpquery or ibaddr on Linux sends through the umad interface and every answer of the
//! kernel's MAD layer goes this way. The packet's headers are checked like QP0's (smp.rs).

use crate::hca::Hca;
use crate::packet::{Packet, PacketOp};
use crate::qp::ServiceType;
use crate::smp::{hdr, mlx_flag, MlxPacket, SpecialQp, UD_HEADER_BYTES};
use crate::wqe::WqeError;

/// The QP number of every port's GSI QP on the wire (IBA vol. 1 3.9.2).
pub const WIRE_QP1: u32 = 1;

impl Hca {
    /// The port whose GSI QP (QP1) is `qpn`, if it is one (special QP base + 2 + port - 1).
    pub(crate) fn qp1_port(&self, qpn: u32) -> Option<u8> {
        let b = self.special_qp_base;
        (b != 0 && qpn >= b + 2 && qpn < b + 4).then(|| (qpn - b - 1) as u8)
    }

    /// The QP that takes a packet for `dest_qpn` on `port`: DestQP 1 is that port's GSI QP
    /// once the driver has configured the special QPs; every other number is itself.
    pub(crate) fn receiving_qpn(&self, port: u8, dest_qpn: u32) -> u32 {
        if dest_qpn == WIRE_QP1 && self.special_qp_base != 0 {
            self.special_qp_base + 2 + u32::from(port) - 1
        } else {
            dest_qpn
        }
    }

    /// Whether QP `qpn` of service type `st` takes a packet of transport `transport`: its own
    /// transport, or UD for a GSI QP (an MLX QP whose packets are UD on the wire).
    pub(crate) fn takes_transport(
        &self,
        qpn: u32,
        st: Option<ServiceType>,
        transport: ServiceType,
    ) -> bool {
        st == Some(transport)
            || (st == Some(ServiceType::Mlx)
                && transport == ServiceType::Ud
                && self.qp1_port(qpn).is_some())
    }

    /// Execute an MLX send WQE on the GSI QP of `port`: MLX segment, gather list of the
    /// packet from the LRH on, ICRC segment (the layout and header checks QP0 uses, smp.rs).
    pub(crate) fn gsi_send(&mut self, qpn: u32, port: u8, wqe: &[u8]) -> Result<(), WqeError> {
        let MlxPacket { flags, pkt, h, .. } = self.mlx_packet(qpn, port, wqe, SpecialQp::Qp1)?;
        let payload = &pkt[UD_HEADER_BYTES..];
        let Some(p) = self.ports.get(usize::from(port) - 1) else {
            return Ok(());
        };
        let active = p.active();
        let packet = Packet {
            src_hca: self.index,
            src_port: port,
            slid: if flags & mlx_flag::SLR == 0 {
                self.replaced_slid(port, h.slid)
            } else {
                h.slid
            },
            dlid: h.dlid,
            sl: h.sl,
            dest_qpn: h.dest_qp,
            src_qpn: WIRE_QP1,
            transport: ServiceType::Ud,
            op: PacketOp::SendOnly,
            psn: h.psn,
            pkey: h.pkey,
            qkey: h.qkey,
            imm: None,
            reth: None,
            solicited: hdr::SE.get_bool(&pkt),
            grh: false,
            aeth: None,
            atomic: None,
            atomic_orig: None,
            payload: payload.to_vec(),
        };
        // A MAD is a data packet: it passes only an ACTIVE port (§6.3).
        self.send_packet(packet, active);
        Ok(())
    }
}
