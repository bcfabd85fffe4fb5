//! A dual-port HCA: connected QPs on port 2 with SL 3. The model applies a connected QP's
//! address path and sched queue at INIT→RTR only with the PRIMARY_ADDR_PATH and SCHED_QUEUE
//! optpar bits (as Linux sets them), so a wrong optpar mask would leave the QP on port 1 with
//! SL 0 and this test would see the wrong source LID and SL.

mod common;

use common::pair::{self, send_connected, Path, QpNode, RECV_OFFSET};
use common::*;
use sim::{DeviceProfile, FabricConfig};
use verbs::*;

const PORT: u8 = 2;
const SL: u8 = 3;

fn node(p: SimPlatform, qp_type: QpType) -> QpNode {
    QpNode::new(
        p,
        2,
        qp_type,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    )
}

/// `a`'s QP towards `b`'s port 2 out of its own port 2, SL 3.
fn connect(a: &mut QpNode, b: &QpNode, qp_type: QpType) {
    let path = Path {
        port: PORT,
        dlid: b.lids[1],
        sl: SL,
        psn: 7,
        access: AccessFlags::REMOTE_WRITE,
    };
    pair::connect(a, b.h.qp_num(b.qp), qp_type, &path);
}

/// `a` sends 300 bytes to `b`; `b`'s receive completion names `a`'s port-2 LID and SL 3.
fn send(a: &mut QpNode, b: &mut QpNode, seed: u8) {
    let data: Vec<u8> = (0..300u32).map(|i| (i as u8).wrapping_mul(seed)).collect();
    let ptr = a.p.arena.ptr_of(a.buf).unwrap();
    // SAFETY: the first 300 bytes of `a`'s 8 KiB arena buffer, owned by this test.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, data.len()) };
    let r = send_connected(a, b, 300);
    assert_eq!((r.status, r.wr_id), (WcStatus::Success, 2), "{r:?}");
    assert_eq!(r.byte_len, 300);
    assert_eq!(r.slid, a.lids[1], "sent from port 2 (its LID), not port 1");
    assert_eq!(r.sl, SL, "the QP's SL travels in the packet");
    let got = b.p.arena.ptr_of(b.buf + RECV_OFFSET).unwrap();
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
    assert_ne!(a.lids[0], a.lids[1], "each port has its own LID");
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
