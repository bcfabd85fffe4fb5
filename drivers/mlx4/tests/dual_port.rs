//! A dual-port HCA: connected QPs on port 2 with SL 3. The model applies a connected QP's
//! address path and sched queue at INIT→RTR only with the PRIMARY_ADDR_PATH and SCHED_QUEUE
//! optpar bits (as Linux sets them), so a wrong optpar mask would leave the QP on port 1 with
//! SL 0 and this test would see the wrong source LID and SL.

mod common;

use common::*;
use mlx4::Hca;
use sim::{DeviceProfile, FabricConfig};
use verbs::*;

struct Node {
    h: Hca<SimPlatform>,
    p: SimPlatform,
    pd: mlx4::device::PdHandle,
    cq: mlx4::cq::CqHandle,
    qp: mlx4::qp::QpHandle,
    lid: [u16; 2],
    buf: u64,
    mr: mlx4::device::MrHandle,
}

const PORT: u8 = 2;
const SL: u8 = 3;

fn node(p: SimPlatform, qp_type: QpType) -> Node {
    let probe = p.clone_handle();
    let mut h = Hca::init(p, test_config()).expect("bring-up");
    let l1 = h.wait_port_active(1, 5000).expect("port 1 active").lid;
    let l2 = h.wait_port_active(2, 5000).expect("port 2 active").lid;
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
    let mr = h
        .reg_mr(
            pd,
            buf,
            8192,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    Node {
        h,
        p: probe,
        pd,
        cq,
        qp,
        lid: [l1, l2],
        buf,
        mr,
    }
}

fn connect(a: &mut Node, b: &Node, qp_type: QpType) {
    let mut init = QpAttr::new(QpState::Init);
    init.port_num = PORT;
    init.access = AccessFlags::REMOTE_WRITE;
    a.h.modify_qp(a.qp, &init).unwrap();
    let mut rtr = QpAttr::new(QpState::Rtr);
    rtr.port_num = PORT;
    rtr.path_mtu = Mtu::Mtu2048;
    rtr.dest_qp_num = b.h.qp_num(b.qp);
    rtr.rq_psn = 7;
    rtr.ah = AhAttr {
        dlid: b.lid[1],
        sl: SL,
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
    rts.sq_psn = 7;
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

/// `a` sends 300 bytes to `b`; `b`'s receive completion names `a`'s port-2 LID and SL 3.
fn send(a: &mut Node, b: &mut Node, seed: u8) {
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
    let data: Vec<u8> = (0..300u32).map(|i| (i as u8).wrapping_mul(seed)).collect();
    let ptr = a.p.arena.ptr_of(a.buf).unwrap();
    // SAFETY: the first 300 bytes of `a`'s 8 KiB arena buffer, owned by this test.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, data.len()) };
    let ssge = [Sge {
        addr: a.buf,
        length: 300,
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
    assert_eq!((r.status, r.wr_id), (WcStatus::Success, 2), "{r:?}");
    assert_eq!(r.byte_len, 300);
    assert_eq!(r.slid, a.lid[1], "sent from port 2 (its LID), not port 1");
    assert_eq!(r.sl, SL, "the QP's SL travels in the packet");
    let got = b.p.arena.ptr_of(b.buf + 4096).unwrap();
    // SAFETY: 300 bytes of `b`'s receive half, written by the device.
    let got = unsafe { std::slice::from_raw_parts(got, 300) };
    assert!(got == &data[..], "payload");
}

fn run(qp_type: QpType) {
    let profile = DeviceProfile {
        num_ports: 2,
        ..DeviceProfile::default()
    };
    let (_m, mut ps) = machine_with(2, FabricConfig::default(), profile);
    let mut b = node(ps.remove(1), qp_type);
    let mut a = node(ps.remove(0), qp_type);
    assert_ne!(a.lid[0], a.lid[1], "each port has its own LID");
    connect(&mut a, &b, qp_type);
    connect(&mut b, &a, qp_type);
    send(&mut a, &mut b, 3);
    send(&mut b, &mut a, 5);
    let _ = (a.pd, b.pd);
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
    a.h.close().unwrap();
    b.h.close().unwrap();
}

#[test]
fn rc_qp_on_port_2_with_sl_3_reaches_port_2_with_sl_3() {
    run(QpType::Rc);
}

#[test]
fn uc_qp_on_port_2_with_sl_3_reaches_port_2_with_sl_3() {
    run(QpType::Uc);
}
