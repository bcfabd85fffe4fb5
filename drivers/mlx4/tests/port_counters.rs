//! The driver reads and clears a port's PerfMgt traffic counters (MAD_IFC, class 0x04) after
//! traffic of known size between two in-process HCAs.

mod common;

use common::*;
use mlx4::port::PortCounters;
use mlx4::Hca;
use sim::FabricConfig;
use verbs::*;

struct Node {
    h: Hca<SimPlatform>,
    p: SimPlatform,
    cq: mlx4::cq::CqHandle,
    qp: mlx4::qp::QpHandle,
    lid: u16,
    buf: u64,
    mr: mlx4::device::MrHandle,
}

const PORT: u8 = 1;
const LEN: u32 = 300;

/// Words of one packet carrying a `LEN`-byte SEND Only on a connected QP: LRH 8 + BTH 12 +
/// payload 300 + ICRC 4 bytes (the IBA's PortXmitData/PortRcvData count the octets from the
/// LRH through the ICRC, divided by 4).
const SEND_WORDS: u64 = (8 + 12 + LEN as u64 + 4) / 4;
/// An RC acknowledgement: LRH 8 + BTH 12 + AETH 4 + ICRC 4 bytes.
const ACK_WORDS: u64 = (8 + 12 + 4 + 4) / 4;

fn node(p: SimPlatform, qp_type: QpType) -> Node {
    let probe = p.clone_handle();
    let mut h = Hca::init(p, test_config()).expect("bring-up");
    let lid = h.wait_port_active(PORT, 5000).expect("port active").lid;
    let pd = h.alloc_pd().unwrap();
    let cq = h.create_cq(64).unwrap();
    let qp = h
        .create_qp(&QpInitAttr {
            pd,
            send_cq: cq,
            recv_cq: cq,
            qp_type,
            cap: QpCap {
                max_send_wr: 8,
                max_recv_wr: 8,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })
        .unwrap();
    let buf = probe.arena.alloc(8192, 4096).unwrap();
    let mr = h.reg_mr(pd, buf, 8192, AccessFlags::LOCAL_WRITE).unwrap();
    Node {
        h,
        p: probe,
        cq,
        qp,
        lid,
        buf,
        mr,
    }
}

fn connect(a: &mut Node, b: &Node, qp_type: QpType) {
    let mut init = QpAttr::new(QpState::Init);
    init.port_num = PORT;
    a.h.modify_qp(a.qp, &init).unwrap();
    let mut rtr = QpAttr::new(QpState::Rtr);
    rtr.port_num = PORT;
    rtr.path_mtu = Mtu::Mtu2048;
    rtr.dest_qp_num = b.h.qp_num(b.qp);
    rtr.ah = AhAttr {
        dlid: b.lid,
        port: PORT,
        ..AhAttr::default()
    };
    if qp_type == QpType::Rc {
        rtr.max_dest_rd_atomic = 1;
        rtr.min_rnr_timer = 12;
    }
    a.h.modify_qp(a.qp, &rtr).unwrap();
    let mut rts = QpAttr::new(QpState::Rts);
    rts.port_num = PORT;
    rts.max_rd_atomic = u8::from(qp_type == QpType::Rc);
    a.h.modify_qp(a.qp, &rts).unwrap();
}

fn poll(n: &mut Node) -> WorkCompletion {
    let mut wc = [WorkCompletion::default(); 1];
    for _ in 0..200_000 {
        if n.h.poll_cq(n.cq, &mut wc).expect("poll_cq") == 1 {
            return wc[0];
        }
        mlx4::Platform::delay_us(&n.p, 1);
    }
    panic!("no completion");
}

fn send(a: &mut Node, b: &mut Node) {
    let rsge = [Sge {
        addr: b.buf + 4096,
        length: 4096,
        lkey: b.h.mr_lkey(b.mr),
    }];
    b.h.post_recv(
        b.qp,
        &RecvWr {
            wr_id: 2,
            sg_list: &rsge,
        },
    )
    .unwrap();
    let ssge = [Sge {
        addr: a.buf,
        length: LEN,
        lkey: a.h.mr_lkey(a.mr),
    }];
    let wr: SendWr<'_, mlx4::qp::Ah> = SendWr {
        wr_id: 1,
        opcode: WrOpcode::Send,
        payload: Payload::Sges(&ssge),
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    a.h.post_send(a.qp, &wr).unwrap();
    let s = poll(a);
    assert_eq!((s.status, s.wr_id), (WcStatus::Success, 1), "{s:?}");
    let r = poll(b);
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
