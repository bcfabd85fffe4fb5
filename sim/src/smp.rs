//! Special QP0 and subnet management packets (§4.3, §6.2, §6.3): execution of MLX send WQEs
//! on QP0 (the WQE carries the packet's own LRH/BTH/DETH), VL15 packets on the link, the
//! firmware SMA answering SMPs that arrive while the driver has not taken QP0 with
//! CONF_SPECIAL_QP, and delivery to the QP0 receive queue when it has.
//!
//! Sources beyond docs/hardware.md (recorded in docs/model.md): the MLX segment layout
//! (`mlx4_wqe_mlx_seg`, Linux include/linux/mlx4/qp.h) and what mlx4_ib's `build_mlx_header`
//! writes (Linux drivers/infiniband/hw/mlx4/qp.c); the packet headers, the directed-route SMP
//! format and the SMI rules C14-9/C14-13 come from the IBA specification vol. 1 (ch. 5, 13.4,
//! 14.2), cross-checked against Linux drivers/infiniband/core/smi.c.

use crate::be::Field;
use crate::cq::{opcode as cqe_op, Completion, Syndrome};
use crate::gsi::WIRE_QP1;
use crate::hca::Hca;
use crate::mad::{self, class, dr, MadHeader};
use crate::qp::QpState;
use crate::seg;
use crate::wqe::{send_op, werr, WqeError};

/// Flags of the MLX segment (dword 2, Linux `mlx4_wqe_mlx_seg`).
pub mod mlx_flag {
    /// Send on VL15 (QP0).
    pub const VL15: u32 = 1 << 17;
    /// Source LID as written: set, the header's SLID is sent unchanged (Linux sets it exactly
    /// when the DLID is the permissive LID); clear, the port replaces it with its own LID
    /// (`Hca::replaced_slid`).
    pub const SLR: u32 = 1 << 16;
    /// Software supplies the ICRC.
    pub const ICRC: u32 = 1 << 4;
    /// Force loopback.
    pub const FORCE_LOOPBACK: u32 = 1;
}

/// Permissive LID (IBA vol. 1 ch. 4, addressing).
pub const PERMISSIVE_LID: u16 = 0xffff;
/// LRH + BTH + DETH without GRH (IBA 5.2, 9.2, 9.3.3).
pub const UD_HEADER_BYTES: usize = 8 + 12 + 8;
/// The ICRC segment that ends every MLX WQE (Linux `set_mlx_icrc_seg`): an inline segment of
/// 4 bytes reserving the packet's ICRC, which the hardware computes.
pub const ICRC_SEG: u32 = 0x8000_0004;
pub use crate::mad::MAD_BYTES;
/// BTH opcode of a UD SEND Only (IBA 9.2, table 35).
pub const BTH_UD_SEND_ONLY: u8 = 0x64;
/// LRH link next header: 2 = IBA local (BTH follows), 3 = IBA global (GRH follows).
pub const LNH_LOCAL: u8 = 2;
/// The VL of subnet management packets.
pub const VL15: u8 = 15;

/// LRH, BTH and DETH fields of a UD packet without a GRH (IBA 7.7, 9.2, 9.3.3), relative to
/// the LRH: the model's own definitions.
pub mod hdr {
    use crate::be::Field;

    pub const VL: Field = Field::bits(0, 1, 4, 4);
    pub const LVER: Field = Field::bits(0, 1, 0, 4);
    pub const SL: Field = Field::bits(1, 1, 4, 4);
    pub const LNH: Field = Field::bits(1, 1, 0, 2);
    pub const DLID: Field = Field::whole(2, 2);
    /// Packet length in 4-byte words, LRH to ICRC.
    pub const PKT_LEN: Field = Field::bits(4, 2, 0, 11);
    pub const SLID: Field = Field::whole(6, 2);
    pub const OPCODE: Field = Field::whole(8, 1);
    /// Solicited event.
    pub const SE: Field = Field::bit(9, 1, 7);
    pub const PAD: Field = Field::bits(9, 1, 4, 2);
    pub const TVER: Field = Field::bits(9, 1, 0, 4);
    pub const PKEY: Field = Field::whole(10, 2);
    pub const DEST_QP: Field = Field::bits(12, 4, 0, 24);
    pub const PSN: Field = Field::bits(16, 4, 0, 24);
    pub const QKEY: Field = Field::whole(20, 4);
    pub const SRC_QP: Field = Field::bits(24, 4, 0, 24);
}

/// A VL15 packet on the link: the bytes the MLX WQE supplied, from the LRH to the end of the
/// payload (the CRCs are not modelled).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmpPacket {
    pub src_hca: usize,
    pub src_port: u8,
    pub bytes: Vec<u8>,
}

/// Parsed LRH/BTH/DETH of a local (no GRH) UD packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdHeader {
    pub vl: u8,
    pub sl: u8,
    pub lnh: u8,
    pub dlid: u16,
    pub pkt_len_words: u16,
    pub slid: u16,
    pub opcode: u8,
    pub pad: u8,
    pub pkey: u16,
    pub dest_qp: u32,
    pub psn: u32,
    pub qkey: u32,
    pub src_qp: u32,
}

impl UdHeader {
    pub fn parse(b: &[u8]) -> Option<UdHeader> {
        if b.len() < UD_HEADER_BYTES {
            return None;
        }
        let g = |f: Field| f.get(b);
        Some(UdHeader {
            vl: g(hdr::VL) as u8,
            sl: g(hdr::SL) as u8,
            lnh: g(hdr::LNH) as u8,
            dlid: g(hdr::DLID) as u16,
            pkt_len_words: g(hdr::PKT_LEN) as u16,
            slid: g(hdr::SLID) as u16,
            opcode: g(hdr::OPCODE) as u8,
            pad: g(hdr::PAD) as u8,
            pkey: g(hdr::PKEY) as u16,
            dest_qp: g(hdr::DEST_QP) as u32,
            psn: g(hdr::PSN) as u32,
            qkey: g(hdr::QKEY) as u32,
            src_qp: g(hdr::SRC_QP) as u32,
        })
    }

    /// Pack the header for a payload of `payload_len` bytes (PktLen counts 4-byte words from
    /// the LRH to the ICRC inclusive, IBA vol. 1 7.7).
    pub fn pack(&self, payload_len: usize) -> [u8; UD_HEADER_BYTES] {
        let mut b = [0u8; UD_HEADER_BYTES];
        let pad = (4 - payload_len % 4) % 4;
        let mut put = |f: Field, v: u64| f.set(&mut b, v);
        put(hdr::VL, self.vl.into());
        put(hdr::SL, self.sl.into());
        put(hdr::LNH, LNH_LOCAL.into());
        put(hdr::DLID, self.dlid.into());
        put(
            hdr::PKT_LEN,
            ((UD_HEADER_BYTES + payload_len + pad + 4) / 4) as u64,
        );
        put(hdr::SLID, self.slid.into());
        put(hdr::OPCODE, self.opcode.into());
        put(hdr::PAD, pad as u64);
        put(hdr::PKEY, self.pkey.into());
        put(hdr::DEST_QP, self.dest_qp.into());
        put(hdr::PSN, self.psn.into());
        put(hdr::QKEY, self.qkey.into());
        put(hdr::SRC_QP, self.src_qp.into());
        b
    }
}

/// Words from the LRH through the ICRC of a VL15 packet whose `bytes` run from the LRH to the
/// end of the payload (the ICRC is not carried; CRCs are not modelled).
fn wire_words(bytes: &[u8]) -> u32 {
    (bytes.len() + 4).div_ceil(4) as u32
}

impl Hca {
    /// QP0 of the port whose special QP block holds `qpn`, if `qpn` is a QP0 (§4.3: base + 0 is
    /// QP0 of port 1, base + 1 QP0 of port 2).
    pub(crate) fn qp0_port(&self, qpn: u32) -> Option<u8> {
        let b = self.special_qp_base;
        (b != 0 && qpn >= b && qpn < b + 2).then(|| (qpn - b + 1) as u8)
    }

    /// The SLID the port puts into an MLX packet whose MLX segment leaves SLR clear: its own
    /// LID, with the low LMC bits (path bits) from the LID field the WQE's header carries.
    /// Linux's `build_mlx_header` writes only the path bits there (`g_slid & 0x7f`) and sets
    /// SLR exactly when the DLID is permissive (then the header's permissive SLID is sent as
    /// it is), so every LID-routed MAD it sends depends on this replacement.
    pub(crate) fn replaced_slid(&self, port: u8, header_slid: u16) -> u16 {
        let Some(p) = self.ports.get(usize::from(port).wrapping_sub(1)) else {
            return header_slid;
        };
        let path_bits = header_slid & ((1u16 << p.lmc) - 1);
        p.lid | path_bits
    }

    /// Execute an MLX send WQE (§4.3): MLX segment, then a gather list whose bytes are the
    /// whole packet from the LRH on (Linux writes the headers inline, the MAD as a pointer
    /// segment), then the 4-byte ICRC segment. QP0 sends VL15 SMPs here; QP1 (GSI) sends
    /// MADs as UD packets on a data VL (gsi.rs).
    pub(crate) fn mlx_send(&mut self, qpn: u32, wqe: &[u8]) -> Result<(), WqeError> {
        if let Some(port) = self.qp1_port(qpn) {
            return self.gsi_send(qpn, port, wqe);
        }
        let Some(port) = self.qp0_port(qpn) else {
            return Err(werr(
                Syndrome::LocalQpOperation,
                format!("MLX WQE on QP {qpn:#x}, which is neither a QP0 nor a QP1 of the CONF_SPECIAL_QP block"),
            ));
        };
        let MlxPacket { flags, pkt, h, .. } = self.mlx_packet(qpn, port, wqe, SpecialQp::Qp0)?;
        let Some(p) = self.ports.get(usize::from(port) - 1) else {
            return Ok(());
        };
        if !p.link_up {
            // Like any send on a dead link: the WQE completes, the packet is lost.
            self.counters.packets_dropped += 1;
            log::debug!("hca{}: SMP dropped, port {port} link down", self.index);
            return Ok(());
        }
        let mut pkt = pkt;
        if flags & mlx_flag::SLR == 0 {
            hdr::SLID.set(&mut pkt, self.replaced_slid(port, h.slid).into());
        }
        // §6.3 (IBA 7.2): SMPs pass in INIT, ARMED and ACTIVE.
        self.counters.packets_sent += 1;
        self.count_xmit(port, wire_words(&pkt));
        self.smp_outbox.push(SmpPacket {
            src_hca: self.index,
            src_port: port,
            bytes: pkt,
        });
        Ok(())
    }

    /// What QP0 and QP1 sends share (§4.3): the QP's port, SEND as the opcode, the VL15 flag
    /// as the special QP requires, no ICRC/force-loopback flags, the ICRC segment last, a
    /// gathered packet long enough for LRH+BTH+DETH, and headers that agree with the MLX
    /// segment and the special QP ([`MlxPacket::header_faults`]).
    pub(crate) fn mlx_packet(
        &mut self,
        qpn: u32,
        port: u8,
        wqe: &[u8],
        special: SpecialQp,
    ) -> Result<MlxPacket, WqeError> {
        let name = special.name();
        let q_port = self.qps.get(&qpn).map(|q| q.port()).unwrap_or(0);
        if q_port != port {
            return Err(werr(
                Syndrome::LocalQpOperation,
                format!("{name} {qpn:#x} of port {port} has port {q_port} in its sched_queue"),
            ));
        }
        let opcode = seg::ctrl::OPCODE.get(wqe) as u8;
        if opcode != send_op::SEND {
            let why = match special {
                SpecialQp::Qp0 => "(QP0 sends SMPs with SEND, 0x0a)",
                SpecialQp::Qp1 => "on QP1 (MADs are sent with SEND, 0x0a)",
            };
            return Err(werr(
                Syndrome::LocalQpOperation,
                format!("MLX WQE opcode {opcode:#x} {why}"),
            ));
        }
        let flags = seg::mlx::FLAGS.get_u32(wqe);
        let rlid = seg::mlx::RLID.get(wqe) as u16;
        match (special, flags & mlx_flag::VL15 != 0) {
            (SpecialQp::Qp0, false) => {
                return Err(werr(
                    Syndrome::LocalQpOperation,
                    "MLX WQE on QP0 without the VL15 flag (QP0 packets use VL15)",
                ))
            }
            (SpecialQp::Qp1, true) => {
                return Err(werr(
                    Syndrome::LocalQpOperation,
                    "MLX WQE on QP1 with the VL15 flag (only QP0 sends on VL15)",
                ))
            }
            _ => {}
        }
        if flags & (mlx_flag::ICRC | mlx_flag::FORCE_LOOPBACK) != 0 {
            return Err(werr(
                Syndrome::LocalQpOperation,
                format!("MLX flags {flags:#x}: ICRC and force-loopback are not modelled"),
            ));
        }
        // Linux's `_mlx4_ib_post_send` ends every MLX WQE with the ICRC segment (inline, 4
        // bytes, counted in DS): the last 16-byte unit. Its bytes are the ICRC's place in the
        // packet, filled by the hardware (CRCs are not modelled), so they are not gathered.
        let icrc_at = wqe.len().saturating_sub(16);
        if icrc_at < 32 || Field::whole(icrc_at, 4).get(wqe) != u64::from(ICRC_SEG) {
            return Err(werr(
                Syndrome::LocalQpOperation,
                format!(
                    "MLX WQE of {} bytes does not end with the ICRC segment (inline byte count 4, {ICRC_SEG:#x}, in its last 16-byte unit)",
                    wqe.len()
                ),
            ));
        }
        let pkt = self.gather(qpn, &wqe[..icrc_at], 16, UD_HEADER_BYTES + MAD_BYTES)?;
        let Some(h) = UdHeader::parse(&pkt) else {
            return Err(werr(
                Syndrome::LocalLength,
                format!(
                    "MLX WQE gathers {} bytes, less than LRH+BTH+DETH ({UD_HEADER_BYTES})",
                    pkt.len()
                ),
            ));
        };
        let sl = seg::mlx::SL.get(wqe) as u8;
        let p = MlxPacket {
            flags,
            rlid,
            sl,
            pkt,
            h,
        };
        let bad = p.header_faults(special);
        if !bad.is_empty() {
            return Err(werr(
                Syndrome::LocalQpOperation,
                format!("malformed MLX WQE on {name}: {}", bad.join("; ")),
            ));
        }
        Ok(p)
    }

    /// A VL15 packet arrived on `port` from the link.
    pub(crate) fn receive_smp(&mut self, port: u8, bytes: Vec<u8>) {
        let pi = usize::from(port) - 1;
        let Some(p) = self.ports.get(pi) else { return };
        if p.link_up {
            self.count_rcv(port, wire_words(&bytes));
        }
        let Some(p) = self.ports.get(pi) else { return };
        let lid_ok = |dlid: u16| {
            dlid == PERMISSIVE_LID || (p.lid != 0 && (dlid & !((1u16 << p.lmc) - 1)) == p.lid)
        };
        let Some(h) = UdHeader::parse(&bytes) else {
            self.counters.packets_dropped += 1;
            return;
        };
        if !p.link_up || h.vl != 15 || h.dest_qp != 0 || !lid_ok(h.dlid) {
            self.counters.packets_dropped += 1;
            log::debug!(
                "hca{}: VL15 packet dropped on port {port} (link {}, DLID {:#x}, DestQP {:#x})",
                self.index,
                p.link_up,
                h.dlid,
                h.dest_qp
            );
            return;
        }
        self.counters.packets_received += 1;
        let mad = bytes[UD_HEADER_BYTES..].to_vec();
        let qp0 = self.special_qp_base + u32::from(port) - 1;
        if self.special_qp_base != 0 {
            self.qp0_receive(qp0, port, &h, &mad);
        } else {
            self.firmware_sma(port, &h, mad);
        }
    }

    /// The driver owns QP0 (CONF_SPECIAL_QP issued): the SMP goes to its receive queue like a
    /// UD message (40-byte GRH area first, §7.1), with no P_Key or Q_Key check (decision:
    /// SMPs are not subject to partition enforcement in the IBA, and Linux sends them with
    /// Q_Key 0 to a QP0 whose Q_Key it never sets).
    fn qp0_receive(&mut self, qpn: u32, port: u8, h: &UdHeader, mad: &[u8]) {
        let ready = self
            .qps
            .get(&qpn)
            .is_some_and(|q| matches!(q.state, QpState::Rtr | QpState::Rts) && q.port() == port);
        if !ready {
            self.counters.packets_dropped += 1;
            log::debug!(
                "hca{}: SMP for QP0 {qpn:#x} dropped (not in RTR/RTS on port {port})",
                self.index
            );
            return;
        }
        let (idx, sges) = match self.rq_take(qpn) {
            Ok(Some(x)) => x,
            Ok(None) => {
                self.counters.packets_dropped += 1;
                return;
            }
            Err(e) => return self.recv_error(qpn, 0, e),
        };
        let total: u64 = sges.iter().map(|s| u64::from(s.2)).sum();
        if total < 40 + mad.len() as u64 {
            let e = werr(
                Syndrome::LocalLength,
                format!(
                    "SMP of {} bytes + 40-byte GRH area exceeds the {total}-byte receive buffer",
                    mad.len()
                ),
            );
            return self.recv_error(qpn, idx, e);
        }
        if let Err(e) = self.scatter(qpn, &sges, 40, mad) {
            return self.recv_error(qpn, idx, e);
        }
        let Some(q) = self.qps.get(&qpn) else { return };
        let c = Completion {
            qpn,
            immed: u32::from(q.pkey_index()),
            remote_qpn: h.src_qp,
            sl: h.sl,
            slid: h.slid,
            byte_cnt: mad.len() as u32 + 40,
            wqe_index: idx,
            opcode: cqe_op::RECV_SEND,
            ..Default::default()
        };
        let cqn = q.recv_cqn;
        self.push_cqe(cqn, c);
    }

    /// The firmware's SMA answers an SMP itself (the driver has not configured special QPs;
    /// §6.3, marked unverified there). Requests (Get, Set) get a GetResp back on the same port;
    /// everything else is dropped, as an SMA that is not an SM ignores it.
    fn firmware_sma(&mut self, port: u8, h: &UdHeader, mut mad: Vec<u8>) {
        if mad.len() != MAD_BYTES {
            self.counters.packets_dropped += 1;
            return;
        }
        let m = MadHeader::parse(&mad);
        if m.check_request(&[class::SUBN_LID, class::SUBN_DR]).is_err() {
            self.counters.packets_dropped += 1;
            return;
        }
        let dr = m.is_dr();
        if dr && !self.smi_dr_recv(port, &mut mad) {
            self.counters.packets_dropped += 1;
            log::debug!("hca{}: DR SMP discarded by the SMI (C14-9)", self.index);
            return;
        }
        let pi = usize::from(port) - 1;
        let status = self.sma_mad(pi, &m, &mut mad);
        mad::make_response(&mut mad, status);
        if dr && !smi_dr_send_response(port, &mut mad) {
            self.counters.packets_dropped += 1;
            log::debug!(
                "hca{}: DR SMP response discarded by the SMI (C14-13)",
                self.index
            );
            return;
        }
        let p = &self.ports[pi];
        let resp = UdHeader {
            vl: VL15,
            sl: h.sl,
            lnh: LNH_LOCAL,
            dlid: h.slid,
            pkt_len_words: 0,
            slid: if h.slid == PERMISSIVE_LID || p.lid == 0 {
                PERMISSIVE_LID
            } else {
                p.lid
            },
            opcode: BTH_UD_SEND_ONLY,
            pad: 0,
            pkey: h.pkey,
            dest_qp: h.src_qp,
            psn: 0,
            qkey: 0,
            src_qp: 0,
        };
        let mut bytes = resp.pack(mad.len()).to_vec();
        bytes.extend_from_slice(&mad);
        if !p.link_up {
            self.counters.packets_dropped += 1;
            return;
        }
        self.counters.packets_sent += 1;
        self.count_xmit(port, wire_words(&bytes));
        self.smp_outbox.push(SmpPacket {
            src_hca: self.index,
            src_port: port,
            bytes,
        });
    }

    /// IBA C14-9 (outgoing direction, D = 0) at a channel adapter receiving a DR SMP on
    /// `port`: returns whether the SMP is for this node's SMA (updating the return path).
    fn smi_dr_recv(&self, port: u8, mad: &mut [u8]) -> bool {
        let d_bit = dr::D.get_bool(mad);
        let (hop_ptr, hop_cnt) = (dr::HOP_PTR.get(mad) as u8, dr::HOP_CNT.get(mad) as u8);
        if d_bit || hop_cnt > 63 {
            // A request travels with D = 0; returning SMPs are for an SM.
            return false;
        }
        if hop_cnt != 0 && hop_ptr == 0 {
            return false; // C14-9:1: the sender must have advanced the hop pointer.
        }
        if hop_ptr != 0 && hop_ptr < hop_cnt {
            return false; // C14-9:2: an intermediate hop needs a switch.
        }
        if hop_ptr == hop_cnt {
            // C14-9:3: end of the directed path.
            if hop_cnt != 0 {
                mad[dr::RETURN_PATH + usize::from(hop_ptr)] = port;
            }
            return dr::DR_DLID.get(mad) == u64::from(PERMISSIVE_LID);
        }
        hop_ptr == hop_cnt + 1 // C14-9:4; anything else is C14-9:5
    }
}

/// IBA C14-13 (returning direction, D = 1) at the responding channel adapter sending on
/// `port`: update the hop pointer; false = discard.
fn smi_dr_send_response(port: u8, mad: &mut [u8]) -> bool {
    let (hop_ptr, hop_cnt) = (dr::HOP_PTR.get(mad) as u8, dr::HOP_CNT.get(mad) as u8);
    if hop_cnt != 0 && hop_ptr == hop_cnt + 1 {
        dr::HOP_PTR.set(mad, (hop_ptr - 1).into());
        return mad[dr::RETURN_PATH + usize::from(hop_ptr - 1)] == port;
    }
    if (2..=hop_cnt).contains(&hop_ptr) {
        return false; // a switch's job
    }
    if hop_ptr == 1 {
        dr::HOP_PTR.set(mad, 0);
        return dr::DR_SLID.get(mad) == u64::from(PERMISSIVE_LID);
    }
    hop_ptr == 0
}

/// The special QP an MLX WQE is sent on: QP0 (SMPs on VL15) or QP1 (GSI MADs on a data VL).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum SpecialQp {
    Qp0,
    Qp1,
}

impl SpecialQp {
    fn name(self) -> &'static str {
        match self {
            SpecialQp::Qp0 => "QP0",
            SpecialQp::Qp1 => "QP1",
        }
    }
}

impl MlxPacket {
    /// What is wrong with the headers the WQE supplied (IBA 5.2, 9.2; §4.3): each must agree
    /// with the MLX segment and with what the special QP sends, and the payload must be a
    /// MAD of the special QP's kind (an SMP on QP0). Empty when nothing is.
    fn header_faults(&self, special: SpecialQp) -> Vec<String> {
        let MlxPacket {
            flags,
            rlid,
            sl,
            ref pkt,
            h,
        } = *self;
        let payload = &pkt[UD_HEADER_BYTES..];
        let qp0 = special == SpecialQp::Qp0;
        let mut bad = Vec::new();
        if qp0 && h.vl != VL15 {
            bad.push(format!("LRH VL {} (QP0 sends on VL15)", h.vl));
        }
        if !qp0 && h.vl == VL15 {
            bad.push("LRH VL 15 (QP1 sends on a data VL)".to_string());
        }
        let lver = hdr::LVER.get(pkt);
        if lver != 0 {
            bad.push(format!("LRH LVer {lver}"));
        }
        if h.lnh != LNH_LOCAL {
            bad.push(if qp0 {
                format!("LRH LNH {} (an SMP carries no GRH: 2)", h.lnh)
            } else {
                format!("LRH LNH {} (a GRH on QP1 is not modelled: 2 only)", h.lnh)
            });
        }
        if h.sl != sl {
            bad.push(format!(
                "LRH SL {} differs from the MLX segment SL {sl}",
                h.sl
            ));
        }
        if h.dlid != rlid {
            bad.push(format!(
                "LRH DLID {:#x} differs from the MLX segment rlid {rlid:#x}",
                h.dlid
            ));
        }
        if qp0 && (h.dlid == PERMISSIVE_LID) != (flags & mlx_flag::SLR != 0) {
            bad.push("SLR flag must be set exactly when the DLID is permissive".into());
        }
        let want_len = (pkt.len() + 4).div_ceil(4);
        if usize::from(h.pkt_len_words) != want_len
            || !(payload.len() + usize::from(h.pad)).is_multiple_of(4)
        {
            bad.push(format!(
                "LRH PktLen {} / BTH pad {} do not match {} gathered bytes (expected PktLen {want_len})",
                h.pkt_len_words, h.pad, pkt.len()
            ));
        }
        if h.opcode != BTH_UD_SEND_ONLY {
            bad.push(format!("BTH opcode {:#x} (UD SEND Only is 0x64)", h.opcode));
        }
        let tver = hdr::TVER.get(pkt);
        if tver != 0 {
            bad.push(format!("BTH TVer {tver}"));
        }
        if qp0 && (h.dest_qp != 0 || h.src_qp != 0) {
            bad.push(format!(
                "BTH DestQP {:#x} / DETH SrcQP {:#x} (SMPs go from QP0 to QP0)",
                h.dest_qp, h.src_qp
            ));
        }
        if !qp0 && h.src_qp != WIRE_QP1 {
            bad.push(format!("DETH SrcQP {:#x} (QP1 sends as QP 1)", h.src_qp));
        }
        let m = MadHeader::parse(payload);
        if qp0
            && (payload.len() != MAD_BYTES
                || !matches!(m.mgmt_class, class::SUBN_LID | class::SUBN_DR))
        {
            bad.push(format!(
                "payload is not a 256-byte SMP ({} bytes, class {:#x}); VL15 carries only SMPs",
                payload.len(),
                m.mgmt_class
            ));
        }
        if !qp0 && (payload.len() != MAD_BYTES || m.base_version != mad::VERSION) {
            bad.push(format!(
                "payload is not a 256-byte MAD ({} bytes, base version {})",
                payload.len(),
                m.base_version
            ));
        }
        bad
    }
}

/// An MLX WQE's packet as [`Hca::mlx_packet`] gathered it, with the MLX segment's fields.
pub(crate) struct MlxPacket {
    /// The MLX segment's flags word (VL15, SLR, SL, ...).
    pub flags: u32,
    /// The MLX segment's remote LID.
    pub rlid: u16,
    /// The MLX segment's SL.
    pub sl: u8,
    /// The packet from the LRH on, without the ICRC.
    pub pkt: Vec<u8>,
    /// Its parsed LRH/BTH/DETH.
    pub h: UdHeader,
}
