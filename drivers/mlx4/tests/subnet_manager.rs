//! Two nodes cabled back to back, no fabric SM. The driver's subnet manager (QP0,
//! MLX WQEs, directed-route SMPs) discovers the peer, assigns LIDs and brings both ports
//! ACTIVE; then UD traffic flows. Failure cases end in typed errors within bounded waits.

mod common;

use common::pair::{create_qp, poll_one};
use common::*;
use mlx4::mad::method;
use mlx4::{Error, Hca};
use mlx4::{SmConfig, Smp};
use sim::{FabricConfig, Topology};
use verbs::*;

fn back_to_back() -> FabricConfig {
    FabricConfig {
        topology: Topology::BackToBack,
        subnet_manager: false,
        ..FabricConfig::default()
    }
}

fn quick() -> SmConfig {
    SmConfig {
        link_timeout_ms: 100,
        smp_timeout_ms: 20,
        smp_attempts: 2,
        ..SmConfig::default()
    }
}

struct Ud {
    pd: mlx4::PdHandle,
    cq: mlx4::CqHandle,
    qp: mlx4::QpHandle,
    buf: u64,
    mr: mlx4::MrHandle,
}

fn ud_endpoint(h: &mut Hca<SimPlatform>, p: &SimPlatform) -> Ud {
    let pd = h.alloc_pd().unwrap();
    let cq = h.create_cq(64).unwrap();
    let qp = create_qp(h, pd, cq, QpType::Ud, 64, true);
    let buf = p.arena.alloc(8192, 4096).unwrap();
    let mr = h.reg_mr(pd, buf, 8192, AccessFlags::LOCAL_WRITE).unwrap();
    let mut a = QpAttr::new(QpState::Init);
    a.qkey = 0x1111_1111;
    h.modify_qp(qp, &a).unwrap();
    h.modify_qp(qp, &QpAttr::new(QpState::Rtr)).unwrap();
    h.modify_qp(qp, &QpAttr::new(QpState::Rts)).unwrap();
    Ud {
        pd,
        cq,
        qp,
        buf,
        mr,
    }
}

fn poll(h: &mut Hca<SimPlatform>, p: &SimPlatform, cq: mlx4::CqHandle) -> WorkCompletion {
    poll_one(h, p, cq, 100_000)
}

/// `payload` from (ha, a) to (hb, b) at `dlid`; checks both completions and the bytes.
#[allow(clippy::too_many_arguments)]
fn ud_send(
    ha: &mut Hca<SimPlatform>,
    pa: &SimPlatform,
    a: &Ud,
    hb: &mut Hca<SimPlatform>,
    pb: &SimPlatform,
    b: &Ud,
    dlid: u16,
    payload: &[u8],
) {
    let rsge = [Sge {
        addr: b.buf + 4096,
        length: 40 + payload.len() as u32,
        lkey: hb.mr_lkey(b.mr),
    }];
    hb.post_recv(
        b.qp,
        &RecvWr {
            wr_id: 7,
            sg_list: &rsge,
        },
    )
    .unwrap();
    let ah = ha
        .create_ah(
            a.pd,
            &AhAttr {
                dlid,
                port: 1,
                ..AhAttr::default()
            },
        )
        .unwrap();
    let wr: SendWr<'_, mlx4::Ah> = SendWr {
        wr_id: 9,
        opcode: WrOpcode::Send,
        payload: Payload::Inline(payload),
        flags: SendFlags::SIGNALED,
        ud: Some(UdDest {
            ah,
            remote_qpn: hb.qp_num(b.qp),
            remote_qkey: 0x1111_1111,
        }),
    };
    ha.post_send(a.qp, &wr).unwrap();
    let s = poll(ha, pa, a.cq);
    assert_eq!((s.status, s.wr_id), (WcStatus::Success, 9));
    let r = poll(hb, pb, b.cq);
    assert_eq!((r.status, r.wr_id), (WcStatus::Success, 7), "{r:?}");
    assert_eq!(r.byte_len as usize, 40 + payload.len());
    let mut got = vec![0u8; payload.len()];
    pb.arena.read(b.buf + 4096 + 40, &mut got).unwrap();
    assert_eq!(got, payload);
}

#[test]
fn back_to_back_sm_brings_both_ports_active_then_ud_flows() {
    let (_m, mut ps) = machine(2, back_to_back());
    let pb = ps.remove(1);
    let pa = ps.remove(0);
    let (qa, qb) = (pa.clone_handle(), pb.clone_handle());
    let mut a = Hca::init(pa, test_config()).expect("bring-up A");
    let mut b = Hca::init(pb, test_config()).expect("bring-up B");
    for h in [&mut a, &mut b] {
        let attr = h.port_attr(1).unwrap();
        assert_eq!((attr.state, attr.lid), (PortState::Init, 0), "no SM yet");
    }
    let peer_guid = b.node_guid().unwrap();
    let report = a.run_back_to_back_sm(1, &SmConfig::default()).expect("SM");
    assert_eq!((report.local_lid, report.peer_lid), (1, 2));
    assert_eq!(report.peer_node_guid, peer_guid);
    assert_eq!(
        report.smps, 4,
        "NodeInfo, PortInfo, Set ARMED, Set ACTIVE: no retries"
    );
    let pa_attr = a.wait_port_active(1, 100).expect("SM port ACTIVE");
    let pb_attr = b.wait_port_active(1, 100).expect("peer port ACTIVE");
    assert_eq!((pa_attr.lid, pa_attr.sm_lid), (1, 1));
    assert_eq!((pb_attr.lid, pb_attr.sm_lid), (2, 1));
    assert!(b.port_change_events(1) >= 1, "PORT_CHANGE on the peer");
    // The SM set the link as OpenSM does: NeighborMTU = the smaller MTUCap (both 4096 after
    // SET_PORT), OperationalVLs = the smaller VLCap (both VL0-7 after SET_PORT's 8 VLs).
    for h in [&mut a, &mut b] {
        let pi = h.mad_get(1, 0x15, 1).unwrap();
        assert_eq!(
            (pi[41] & 0xF, pi[36] >> 4),
            (5, 5),
            "MTUCap, NeighborMTU 4096"
        );
        assert_eq!(
            (pi[37] >> 4, pi[43] >> 4),
            (4, 4),
            "VLCap, OperationalVLs VL0-7"
        );
    }
    let ua = ud_endpoint(&mut a, &qa);
    let ub = ud_endpoint(&mut b, &qb);
    ud_send(
        &mut a,
        &qa,
        &ua,
        &mut b,
        &qb,
        &ub,
        2,
        b"ping over a back-to-back link",
    );
    ud_send(&mut b, &qb, &ub, &mut a, &qa, &ua, 1, b"pong");
    // QP0 and its special block were released: the firmware answers SMPs again, and the
    // SM can run a second time (idempotent LIDs).
    let again = a
        .run_back_to_back_sm(1, &SmConfig::default())
        .expect("again");
    assert_eq!(again.peer_lid, 2);
    a.close().unwrap();
    b.close().unwrap();
    assert_eq!(
        qa.arena.bytes_in_use() - 8192,
        0,
        "only the test's buffer remains"
    );
    assert_no_violations(&qa);
    assert_no_violations(&qb);
}

#[test]
fn smp_api_reads_the_peer_and_reports_mad_status() {
    let (_m, mut ps) = machine(2, back_to_back());
    let pb = ps.remove(1);
    let pa = ps.remove(0);
    let qa = pa.clone_handle();
    let mut a = Hca::init(pa, test_config()).unwrap();
    let mut b = Hca::init(pb, test_config()).unwrap();
    let mut agent = a.smp_open(1).expect("QP0");
    assert_eq!(agent.qpn() % 8, 0, "QP0 of port 1 = special base");
    let get = |attr: u16| Smp {
        method: method::GET,
        attr,
        attr_mod: 0,
        data: [0; 64],
    };
    let pi = a.smp_dr(&mut agent, &get(0x15), 50).expect("PortInfo");
    assert_eq!(pi[32] & 0xF, 2, "peer INIT");
    // Many SMPs: the SQ and RQ wrap several times.
    for _ in 0..40 {
        let ni = a.smp_dr(&mut agent, &get(0x11), 50).expect("NodeInfo");
        assert_eq!(
            u64::from_be_bytes(ni[12..20].try_into().unwrap()),
            b.node_guid().unwrap()
        );
    }
    match a.smp_dr(&mut agent, &get(0x99), 50) {
        Err(Error::MadStatus { attr: 0x99, status }) => assert_eq!(status, 0x000C),
        other => panic!("expected MadStatus, got {other:?}"),
    }
    a.smp_close(agent).unwrap();
    a.close().unwrap();
    b.close().unwrap();
    assert_eq!(qa.arena.bytes_in_use(), 0);
    assert_no_violations(&qa);
}

#[test]
fn no_peer_is_a_bounded_link_down_error() {
    // Only A is enabled: a back-to-back link needs both ends, so the port stays DOWN.
    let (_m, mut ps) = machine(2, back_to_back());
    let pa = ps.remove(0);
    let qa = pa.clone_handle();
    let mut a = Hca::init(pa, test_config()).unwrap();
    let t0 = mlx4::Platform::now_ns(&qa);
    match a.run_back_to_back_sm(1, &quick()) {
        Err(Error::LinkDown { port: 1 }) => {}
        other => panic!("expected LinkDown, got {other:?}"),
    }
    let waited = mlx4::Platform::now_ns(&qa) - t0;
    assert!(waited < 200_000_000, "bounded: {waited} ns");
    a.close().unwrap();
    assert_eq!(qa.arena.bytes_in_use(), 0);
    assert_no_violations(&qa);
}

#[test]
fn no_sma_at_the_far_end_is_a_bounded_timeout() {
    // On the switch (SM off) the link is up but the switch's SMA is not modelled: the
    // directed-route NodeInfo is never answered.
    let (_m, mut ps) = machine(
        1,
        FabricConfig {
            subnet_manager: false,
            ..FabricConfig::default()
        },
    );
    let pa = ps.remove(0);
    let qa = pa.clone_handle();
    let mut a = Hca::init(pa, test_config()).unwrap();
    let t0 = mlx4::Platform::now_ns(&qa);
    match a.run_back_to_back_sm(1, &quick()) {
        Err(Error::SmpTimeout {
            port: 1,
            attr: 0x11,
        }) => {}
        other => panic!("expected SmpTimeout, got {other:?}"),
    }
    let waited = mlx4::Platform::now_ns(&qa) - t0;
    assert!(waited < 100_000_000, "two 20 ms attempts: {waited} ns");
    assert_eq!(a.port_attr(1).unwrap().state, PortState::Init);
    a.close().unwrap();
    assert_eq!(
        qa.arena.bytes_in_use(),
        0,
        "QP0, its CQ and buffers released"
    );
    assert_no_violations(&qa);
}

#[test]
fn cable_cut_after_discovery_fails_typed() {
    let (m, mut ps) = machine(2, back_to_back());
    let pb = ps.remove(1);
    let pa = ps.remove(0);
    let qa = pa.clone_handle();
    let hb = pb.hca;
    let mut a = Hca::init(pa, test_config()).unwrap();
    let b = Hca::init(pb, test_config()).unwrap();
    let mut agent = a.smp_open(1).unwrap();
    let get = Smp {
        method: method::GET,
        attr: 0x11,
        attr_mod: 0,
        data: [0; 64],
    };
    a.smp_dr(&mut agent, &get, 50).expect("peer answers");
    m.borrow_mut().fabric().set_link(hb, 1, false);
    match a.smp_dr(&mut agent, &get, 50) {
        Err(Error::SmpTimeout { .. }) => {}
        other => panic!("expected SmpTimeout, got {other:?}"),
    }
    a.smp_close(agent).unwrap();
    match a.run_back_to_back_sm(1, &quick()) {
        Err(Error::LinkDown { port: 1 }) => {}
        other => panic!("expected LinkDown, got {other:?}"),
    }
    a.close().unwrap();
    b.close().unwrap();
    assert_no_violations(&qa);
}

/// QP0's RST2INIT failing leaves it in RESET: `smp_open` gives the special block back with
/// CONF_SPECIAL_QP(0) but sends no 2RST_QP, as Linux sends no command for RESET to RESET
/// (a 2RST failure would be fatal and bury the first error under a device reset).
#[test]
fn failed_qp0_rst2init_is_undone_without_a_2rst() {
    let faults = sim::Faults {
        commands: vec![sim::CommandFault {
            hca: None,
            opcode: mlx4::Opcode::RST2INIT_QP.raw(),
            action: sim::CommandFaultAction::Fail(0x03),
            times: 1,
            skip: 0,
        }],
        ..sim::Faults::default()
    };
    let (_m, mut ps) = machine(
        2,
        FabricConfig {
            faults,
            ..back_to_back()
        },
    );
    let pb = ps.remove(1);
    let pa = ps.remove(0);
    let qa = pa.clone_handle();
    let mut a = Hca::init(pa, test_config()).unwrap();
    let b = Hca::init(pb, test_config()).unwrap();
    let from = qa.commands.borrow().len();
    match a.smp_open(1) {
        Err(Error::Cmd(e)) => assert_eq!(e.op, mlx4::Opcode::RST2INIT_QP),
        other => panic!("expected the RST2INIT_QP error, got {:?}", other.err()),
    }
    assert!(!a.device_failed(), "the first error stays the error");
    let ops: Vec<mlx4::Opcode> = qa.commands.borrow()[from..].iter().map(|r| r.op).collect();
    assert!(!ops.contains(&mlx4::Opcode::ERR2RST_QP), "{ops:?}");
    assert_eq!(
        ops.iter()
            .filter(|&&o| o == mlx4::Opcode::CONF_SPECIAL_QP)
            .count(),
        2,
        "the block is taken and given back: {ops:?}"
    );
    a.close().unwrap();
    b.close().unwrap();
    assert_eq!(qa.arena.bytes_in_use(), 0);
    assert_no_violations(&qa);
}
