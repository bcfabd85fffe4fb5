//! Creating a QP at a requested QP number (a well-known rendezvous QPN).

mod common;

use common::*;
use mlx4::Hca;
use sim::FabricConfig;
use verbs::*;

#[test]
fn qp_at_a_requested_number_and_typed_refusals() {
    let (_m, mut ps) = machine(1, FabricConfig::default());
    let p = ps.remove(0);
    let probe = p.clone_handle();
    let mut h = Hca::init(p, test_config()).expect("bring-up");
    let pd = h.alloc_pd().unwrap();
    let cq = h.create_cq(16).unwrap();
    let attr = QpInitAttr {
        pd,
        send_cq: cq,
        recv_cq: cq,
        qp_type: QpType::Ud,
        cap: QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        },
        sq_sig_all: false,
    };
    let q0 = h.create_qp(&attr).unwrap();
    let first = h.qp_num(q0);
    let cap = h.query_device().max_qp;
    let last = first + cap - 1;

    let qp = h
        .create_qp_at(&attr, last)
        .expect("the last QPN of the table");
    assert_eq!(h.qp_num(qp), last);
    // It works like any QP: through INIT/RTR/RTS.
    let mut init = QpAttr::new(QpState::Init);
    init.qkey = 0x4942_4B52;
    h.modify_qp(qp, &init).unwrap();
    h.modify_qp(qp, &QpAttr::new(QpState::Rtr)).unwrap();
    h.modify_qp(qp, &QpAttr::new(QpState::Rts)).unwrap();

    assert!(matches!(
        h.create_qp_at(&attr, last),
        Err(Error::QpnUnavailable { qpn, why: "already in use" }) if qpn == last
    ));
    assert!(matches!(
        h.create_qp_at(&attr, first - 1),
        Err(Error::QpnUnavailable {
            why: "reserved by the firmware",
            ..
        })
    ));
    assert!(matches!(
        h.create_qp_at(&attr, last + 1),
        Err(Error::QpnUnavailable {
            why: "outside the configured table",
            ..
        })
    ));
    assert!(matches!(
        h.create_qp_at(&attr, u32::MAX),
        Err(Error::QpnUnavailable { .. })
    ));
    // Ordinary allocation skips the taken number, and destroying it frees it again.
    for _ in 0..cap - 2 {
        let q = h.create_qp(&attr).unwrap();
        assert_ne!(h.qp_num(q), last);
    }
    assert!(matches!(h.create_qp(&attr), Err(Error::NoResources(_))));
    h.destroy_qp(qp).unwrap();
    let again = h.create_qp_at(&attr, last).expect("freed again");
    assert_eq!(h.qp_num(again), last);
    h.close().unwrap();
    assert_no_violations(&probe);
}
