//! The driver reads and clears a port's PerfMgt traffic counters (MAD_IFC, class 0x04) after
//! traffic of known size between two in-process HCAs.

mod common;

use common::pair::{self, send_connected, Path, QpNode};
use common::*;
use mlx4::PortCounters;
use sim::FabricConfig;
use verbs::*;

const PORT: u8 = 1;
const LEN: u32 = 300;

/// Words of one packet carrying a `LEN`-byte SEND Only on a connected QP: LRH 8 + BTH 12 +
/// payload 300 + ICRC 4 bytes (the IBA's PortXmitData/PortRcvData count the octets from the
/// LRH through the ICRC, divided by 4).
const SEND_WORDS: u64 = (8 + 12 + LEN as u64 + 4) / 4;
/// An RC acknowledgement: LRH 8 + BTH 12 + AETH 4 + ICRC 4 bytes.
const ACK_WORDS: u64 = (8 + 12 + 4 + 4) / 4;

fn node(p: SimPlatform, qp_type: QpType) -> QpNode {
    QpNode::new(p, 1, qp_type, AccessFlags::LOCAL_WRITE)
}

/// `a`'s QP towards `b`'s port 1.
fn connect(a: &mut QpNode, b: &QpNode, qp_type: QpType) {
    let path = Path {
        port: PORT,
        dlid: b.lids[0],
        sl: 0,
        psn: 0,
        access: AccessFlags::empty(),
    };
    pair::connect(a, b.h.qp_num(b.qp), qp_type, &path);
}

fn send(a: &mut QpNode, b: &mut QpNode) {
    let r = send_connected(a, b, LEN);
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, LEN), "{r:?}");
}

fn traffic(c: &PortCounters) -> [u64; 4] {
    [
        c.xmit_data_words,
        c.rcv_data_words,
        c.xmit_packets,
        c.rcv_packets,
    ]
}

fn run(qp_type: QpType) {
    let (_m, mut ps) = machine(2, FabricConfig::default());
    let mut b = node(ps.remove(1), qp_type);
    let mut a = node(ps.remove(0), qp_type);
    connect(&mut a, &b, qp_type);
    connect(&mut b, &a, qp_type);
    for n in [&mut a, &mut b] {
        n.h.clear_port_counters(PORT).expect("clear");
        let c = n.h.port_counters(PORT).expect("counters");
        assert!(c.extended, "the model advertises PortCountersExtended");
        assert_eq!(traffic(&c), [0; 4], "cleared");
    }
    const N: u64 = 4;
    for _ in 0..N {
        send(&mut a, &mut b);
    }
    // RC: every SEND is acknowledged by one ACK packet; UC sends nothing back.
    let (back_pkts, back_words) = match qp_type {
        QpType::Rc => (N, N * ACK_WORDS),
        _ => (0, 0),
    };
    let ca = a.h.port_counters(PORT).unwrap();
    let cb = b.h.port_counters(PORT).unwrap();
    assert_eq!(
        traffic(&ca),
        [N * SEND_WORDS, back_words, N, back_pkts],
        "sender {ca:?}"
    );
    assert_eq!(
        traffic(&cb),
        [back_words, N * SEND_WORDS, back_pkts, N],
        "receiver {cb:?}"
    );
    assert_eq!(ca.xmit_bytes(), N * SEND_WORDS * 4);
    assert!(a.h.port_counters(2).is_err(), "single-port HCA: no port 2");
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
    a.h.close().unwrap();
    b.h.close().unwrap();
}

#[test]
fn uc_sends_are_counted_in_packets_and_words_on_both_ports() {
    run(QpType::Uc);
}

#[test]
fn rc_sends_and_their_acks_are_counted_on_both_ports() {
    run(QpType::Rc);
}
