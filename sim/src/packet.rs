//! Packets on the emulated wire: one MTU-sized IB packet with its headers kept as fields,
//! the BTH opcode family and the RC acknowledgement kinds. The HCA model produces and
//! consumes them; the fabric routes them.

use crate::qp::ServiceType;

/// Packet opcode: the BTH opcode family of one packet (IB spec), first/middle/last/only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketOp {
    SendFirst,
    SendMiddle,
    SendLast,
    SendOnly,
    WriteFirst,
    WriteMiddle,
    WriteLast,
    WriteOnly,
    /// RC only: RDMA READ request and its response packets.
    ReadRequest,
    ReadResponseFirst,
    ReadResponseMiddle,
    ReadResponseLast,
    ReadResponseOnly,
    /// RC only: atomics and acknowledgements.
    CompareSwap,
    FetchAdd,
    Acknowledge,
    AtomicAcknowledge,
}

impl PacketOp {
    pub fn for_position(write: bool, first: bool, last: bool) -> PacketOp {
        match (write, first, last) {
            (false, true, true) => PacketOp::SendOnly,
            (false, true, false) => PacketOp::SendFirst,
            (false, false, true) => PacketOp::SendLast,
            (false, false, false) => PacketOp::SendMiddle,
            (true, true, true) => PacketOp::WriteOnly,
            (true, true, false) => PacketOp::WriteFirst,
            (true, false, true) => PacketOp::WriteLast,
            (true, false, false) => PacketOp::WriteMiddle,
        }
    }
    pub fn is_write(self) -> bool {
        matches!(
            self,
            PacketOp::WriteFirst
                | PacketOp::WriteMiddle
                | PacketOp::WriteLast
                | PacketOp::WriteOnly
        )
    }
    pub fn is_first_or_only(self) -> bool {
        matches!(
            self,
            PacketOp::SendFirst | PacketOp::SendOnly | PacketOp::WriteFirst | PacketOp::WriteOnly
        )
    }
    /// Packets a responder sends back to a requester (RC).
    pub fn is_response(self) -> bool {
        matches!(
            self,
            PacketOp::ReadResponseFirst
                | PacketOp::ReadResponseMiddle
                | PacketOp::ReadResponseLast
                | PacketOp::ReadResponseOnly
                | PacketOp::Acknowledge
                | PacketOp::AtomicAcknowledge
        )
    }
    pub fn is_last_or_only(self) -> bool {
        matches!(
            self,
            PacketOp::SendLast | PacketOp::SendOnly | PacketOp::WriteLast | PacketOp::WriteOnly
        )
    }
}

/// A packet on the wire (one MTU-sized IB packet, headers kept as fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    pub src_hca: usize,
    pub src_port: u8,
    pub slid: u16,
    pub dlid: u16,
    pub sl: u8,
    pub dest_qpn: u32,
    pub src_qpn: u32,
    pub transport: ServiceType,
    pub op: PacketOp,
    pub psn: u32,
    pub pkey: u16,
    /// DETH Q_Key (UD).
    pub qkey: u32,
    /// Immediate data (on the last/only packet).
    pub imm: Option<u32>,
    /// RETH (first/only packet of an RDMA WRITE, READ request, atomics).
    pub reth: Option<Reth>,
    pub solicited: bool,
    pub grh: bool,
    /// RC AETH of acknowledgements and read responses.
    pub aeth: Option<Aeth>,
    /// RC AtomicETH operands (the RETH carries the address and R_Key).
    pub atomic: Option<AtomicEth>,
    /// RC AtomicAckETH: the original value.
    pub atomic_orig: Option<u64>,
    pub payload: Vec<u8>,
}

impl Packet {
    /// The packet's length on the wire in 4-byte words from the LRH through the ICRC (the
    /// LRH PktLen field, IBA vol. 1 7.7.8): LRH 8, GRH 40 if present, BTH 12, the extended
    /// transport headers of its opcode (DETH 8 for UD; RETH 16 on the first/only packet of
    /// an RDMA WRITE and on a READ request; AtomicETH 28; AETH 4 on acknowledgements and
    /// first/last/only READ responses, plus AtomicAckETH 8; ImmDt 4), the payload padded
    /// to 4 bytes, ICRC 4.
    pub fn pkt_len_words(&self) -> u32 {
        let mut bytes = 8 + 12 + 4;
        if self.grh {
            bytes += 40;
        }
        if self.transport == ServiceType::Ud {
            bytes += 8;
        }
        bytes += match self.op {
            PacketOp::WriteFirst | PacketOp::WriteOnly | PacketOp::ReadRequest => 16,
            PacketOp::CompareSwap | PacketOp::FetchAdd => 28,
            PacketOp::Acknowledge
            | PacketOp::ReadResponseFirst
            | PacketOp::ReadResponseLast
            | PacketOp::ReadResponseOnly => 4,
            PacketOp::AtomicAcknowledge => 4 + 8,
            _ => 0,
        };
        if self.imm.is_some() {
            bytes += 4;
        }
        bytes += self.payload.len().div_ceil(4) * 4;
        (bytes / 4) as u32
    }
}

/// RDMA extended transport header: the remote buffer of an RDMA WRITE or READ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reth {
    pub va: u64,
    pub rkey: u32,
    /// DMA length of the whole message.
    pub len: u32,
}

/// Atomic extended transport header operands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtomicEth {
    /// Swap value (compare-and-swap) or addend (fetch-and-add).
    pub swap_add: u64,
    pub compare: u64,
}

/// RC acknowledgement kinds (IB AETH syndrome classes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aeth {
    Ack,
    /// RNR NAK with the responder's minimum RNR timer code.
    RnrNak(u8),
    NakPsnSequence,
    NakInvalidRequest,
    NakRemoteAccess,
    NakRemoteOperation,
}
