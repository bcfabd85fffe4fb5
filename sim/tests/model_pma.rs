//! The firmware's PerfMgt agent through MAD_IFC: PortCounters / PortCountersExtended after
//! known traffic, clearing by CounterSelect, and the MAD statuses of malformed requests.

mod harness;
use harness::*;

const UAR: u32 = 9;

/// A UD SEND with immediate data and no payload on the wire: LRH 8 + BTH 12 + DETH 8 +
/// ImmDt 4 + ICRC 4 bytes = 9 words (IBA: PortXmitData/PortRcvData count the octets from
/// the LRH through the ICRC, divided by 4).
const UD_SEND_IMM_WORDS: u64 = (8 + 12 + 8 + 4 + 4) / 4;

fn setup_node(r: &mut Rig, i: usize) {
    r.bring_up(i);
    r.create_eq(i, 8, 6, 0);
    let mask = (1u64 << 0x0a) | (1 << 0x09) | (1 << 0x04);
    assert_eq!(r.cmd(i, 0x012, 0, mask, 8, 0), 0, "MAP_EQ");
}

/// UD SEND_IMM from QP 70 to QP 70 at `dlid`, WQE slot `slot` (pass 0).
fn post_ud_send_imm(r: &mut Rig, i: usize, b: &QpBufs, slot: u64, dlid: u16) {
    let sq = b.sq + slot * 64;
    r.put32(i, sq + 4, 4);
    r.put32(i, sq + 8, 3 << 2);
    r.put32(i, sq + 12, 0x1234_5678);
    let d = sq + 16;
    r.put32(i, d, (1 << 24) | 1);
    r.write(i, d + 6, &dlid.to_be_bytes());
    r.put32(i, d + 0x20, 70);
    r.put32(i, d + 0x24, 0x1111_1111);
    r.put32(i, sq, 0x0b);
    let h = r.hca(i);
    r.m.mmio_write(h, 2, u64::from(UAR) * 4096 + 0x14, 4, be32(70 << 8));
}

/// MAD_IFC with a PerfMgt MAD (class 0x04, class version `cver`); returns (command status,
/// MAD status, MAD data bytes 64..256).
fn pma(r: &mut Rig, i: usize, cver: u8, method: u8, attr: u16, data: &[u8]) -> (u8, u16, Vec<u8>) {
    let mb = r.mailbox(i);
    let out = r.mailbox(i);
    r.write(i, mb, &[0u8; 256]);
    r.write(i, mb, &[1, 0x04, cver, method]);
    r.write(i, mb + 0x10, &attr.to_be_bytes());
    r.write(i, mb + 0x40, data);
    let st = r.cmd(i, 0x024, 3, mb, 1, out);
    let m = r.read(i, out, 256);
    assert_eq!(m[3], 0x81, "GetResp");
    assert_eq!(m[1], 0x04, "class");
    (st, u16::from_be_bytes([m[4], m[5]]), m[0x40..].to_vec())
}

fn be32_at(d: &[u8], o: usize) -> u64 {
    u64::from(u32::from_be_bytes(d[o..o + 4].try_into().unwrap()))
}
fn be64_at(d: &[u8], o: usize) -> u64 {
    u64::from_be_bytes(d[o..o + 8].try_into().unwrap())
}

/// (xmit data, rcv data, xmit pkts, rcv pkts) from PortCounters.
fn counters(r: &mut Rig, i: usize) -> [u64; 4] {
    let (st, ms, d) = pma(r, i, 1, 1, 0x12, &[0, 1]);
    assert_eq!((st, ms), (0, 0));
    assert_eq!(d[1], 1, "PortSelect echoed");
    [
        be32_at(&d, 24),
        be32_at(&d, 28),
        be32_at(&d, 32),
        be32_at(&d, 36),
    ]
}

/// (xmit data, rcv data, xmit pkts, rcv pkts, unicast xmit, unicast rcv) from
/// PortCountersExtended.
fn counters_ext(r: &mut Rig, i: usize) -> [u64; 6] {
    let (st, ms, d) = pma(r, i, 1, 1, 0x1d, &[0, 1]);
    assert_eq!((st, ms), (0, 0));
    [8, 16, 24, 32, 40, 48].map(|o| be64_at(&d, o))
}

#[test]
fn port_counters_count_packets_and_words_and_clear() {
    let mut r = Rig::new(2, true);
    let mut bufs = Vec::new();
    for i in 0..2 {
        setup_node(&mut r, i);
        r.init_port(i);
        r.create_cq(i, 128, 4, UAR, 8);
        bufs.push(r.qp_to_rts(i, 70, 3, 128, UAR, 1, 0x1111_1111, 0, 0));
    }
    assert_eq!(counters(&mut r, 0), [0; 4], "no traffic yet");
    assert_eq!(counters(&mut r, 1), [0; 4]);
    let lid1 = sim::Fabric::sm_lid_for(1, 1);
    const N: u64 = 5;
    for k in 0..N {
        post_ud_send_imm(&mut r, 0, &bufs[0], k, lid1);
    }
    // The receiver posted no receive WQE: UD drops the messages, but they reached the port.
    let w = N * UD_SEND_IMM_WORDS;
    assert_eq!(counters(&mut r, 0), [w, 0, N, 0], "sender");
    assert_eq!(counters(&mut r, 1), [0, w, 0, N], "receiver");
    assert_eq!(counters_ext(&mut r, 0), [w, 0, N, 0, N, 0]);
    assert_eq!(counters_ext(&mut r, 1), [0, w, 0, N, 0, N]);

    // Set(PortCounters) with CounterSelect PortXmitData | PortXmitPkts: the response carries
    // the cleared values, the receive counters are kept.
    let (st, ms, d) = pma(&mut r, 0, 1, 2, 0x12, &[0, 1, 0x50, 0x00]);
    assert_eq!((st, ms), (0, 0));
    assert_eq!((be32_at(&d, 24), be32_at(&d, 32)), (0, 0));
    assert_eq!(counters(&mut r, 0), [0; 4]);
    post_ud_send_imm(&mut r, 1, &bufs[1], 0, sim::Fabric::sm_lid_for(0, 1));
    assert_eq!(
        counters(&mut r, 1),
        [UD_SEND_IMM_WORDS, w, 1, N],
        "receiver sent one back"
    );
    // Set(PortCountersExtended) clearing PortRcvData (0x0002) and PortRcvPkts (0x0008) only.
    let (st, ms, _) = pma(&mut r, 1, 1, 2, 0x1d, &[0, 1, 0x00, 0x0a]);
    assert_eq!((st, ms), (0, 0));
    assert_eq!(
        counters_ext(&mut r, 1),
        [UD_SEND_IMM_WORDS, 0, 1, 0, 1, N],
        "unicast receive not selected, kept"
    );
    r.assert_clean(0);
    r.assert_clean(1);
}

#[test]
fn class_port_info_and_bad_requests() {
    let mut r = Rig::new(1, true);
    setup_node(&mut r, 0);
    r.init_port(0);
    let (st, ms, d) = pma(&mut r, 0, 1, 1, 0x01, &[]);
    assert_eq!((st, ms), (0, 0));
    assert_eq!((d[0], d[1]), (1, 1), "base and class version");
    assert_ne!(
        u16::from_be_bytes([d[2], d[3]]) & (1 << 9),
        0,
        "PortCountersExtended advertised"
    );
    // PortSelect 0 and a port the HCA does not have: invalid attribute value.
    assert_eq!(pma(&mut r, 0, 1, 1, 0x12, &[0, 0]).1, 0x001c);
    assert_eq!(pma(&mut r, 0, 1, 1, 0x1d, &[0, 2]).1, 0x001c);
    // An attribute the agent does not have, a method other than Get/Set, Set(ClassPortInfo).
    assert_eq!(pma(&mut r, 0, 1, 1, 0x13, &[0, 1]).1, 0x000c);
    assert_eq!(pma(&mut r, 0, 1, 3, 0x12, &[0, 1]).1, 0x000c);
    assert_eq!(pma(&mut r, 0, 1, 2, 0x01, &[]).1, 0x000c);
    // PerfMgt class version 2 does not exist.
    assert_eq!(pma(&mut r, 0, 2, 1, 0x12, &[0, 1]).1, 0x0004);
    r.assert_clean(0);
}
