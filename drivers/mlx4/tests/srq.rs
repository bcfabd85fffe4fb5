//! Shared receive queues on two in-process HCAs (docs/hardware.md §4.7): several RC QPs take
//! their receives from one SRQ, each completion's wr_id names the buffer that holds its
//! message, the limit event fires once when the posted receives drop below the armed limit,
//! a full SRQ and bad arguments are typed errors, and an SRQ with QPs attached is not
//! destroyed.

mod common;

use common::*;
use mlx4::Hca;
use sim::FabricConfig;
use verbs::*;

const QPS: usize = 3;
const MSG: usize = 256;
/// Receives the SRQ is asked for: 15 → 16 WQEs, 15 usable.
const SRQ_WR: u32 = 15;
const LIMIT: u32 = 4;

struct Side {
    h: Hca<SimPlatform>,
    p: SimPlatform,
    pd: mlx4::PdHandle,
    scq: mlx4::CqHandle,
    rcq: mlx4::CqHandle,
    qps: Vec<mlx4::QpHandle>,
    lid: u16,
    buf: u64,
    lkey: u32,
}

fn side(p: SimPlatform) -> Side {
    let probe = p.clone_handle();
    let mut h = Hca::init(p, test_config()).expect("bring-up");
    let lid = h.wait_port_active(1, 5000).expect("port active").lid;
    let pd = h.alloc_pd().unwrap();
    let scq = h.create_cq(64).unwrap();
    let rcq = h.create_cq(64).unwrap();
    let len = 64 * MSG;
    let buf = probe.arena.alloc(len, 4096).unwrap();
    let mr = h
        .reg_mr(pd, buf, len as u64, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let lkey = h.mr_lkey(mr);
    Side {
        h,
        p: probe,
        pd,
        scq,
        rcq,
        qps: Vec::new(),
        lid,
        buf,
        lkey,
    }
}

fn qp_attr(s: &Side) -> QpInitAttr<mlx4::PdHandle, mlx4::CqHandle> {
    QpInitAttr {
        pd: s.pd,
        send_cq: s.scq,
        recv_cq: s.rcq,
        qp_type: QpType::Rc,
        cap: QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    }
}

fn connect(s: &mut Side, i: usize, remote_qpn: u32, remote_lid: u16) {
    let qp = s.qps[i];
    s.h.modify_qp(qp, &QpAttr::new(QpState::Init)).unwrap();
    let mut rtr = QpAttr::new(QpState::Rtr);
    rtr.dest_qp_num = remote_qpn;
    rtr.path_mtu = Mtu::Mtu2048;
    rtr.min_rnr_timer = 12;
    rtr.ah = AhAttr {
        dlid: remote_lid,
        port: 1,
        ..AhAttr::default()
    };
    s.h.modify_qp(qp, &rtr).unwrap();
    s.h.modify_qp(qp, &QpAttr::new(QpState::Rts)).unwrap();
}

/// Message `m` from client QP `q`: both numbers first, then bytes derived from them.
fn message(q: usize, m: u32) -> Vec<u8> {
    let mut v: Vec<u8> = (0..MSG)
        .map(|i| (m as usize * 13 + q * 5 + i) as u8)
        .collect();
    v[..4].copy_from_slice(&m.to_le_bytes());
    v[4] = q as u8;
    v
}

fn slot_addr(s: &Side, wr_id: u64) -> u64 {
    s.buf + (wr_id % 64) * MSG as u64
}

fn post_srq(s: &mut Side, srq: mlx4::SrqHandle, wr_id: u64) -> Result<()> {
    let sge = [Sge {
        addr: slot_addr(s, wr_id),
        length: MSG as u32,
        lkey: s.lkey,
    }];
    s.h.post_srq_recv(
        srq,
        &RecvWr {
            wr_id,
            sg_list: &sge,
        },
    )
}

/// Client QP `q` sends message `m`; waits for its send completion.
fn send(c: &mut Side, q: usize, m: u32) {
    let src = c.buf + (q as u64) * MSG as u64;
    c.p.arena.write(src, &message(q, m)).unwrap();
    let sge = [Sge {
        addr: src,
        length: MSG as u32,
        lkey: c.lkey,
    }];
    c.h.post_send(
        c.qps[q],
        &SendWr {
            wr_id: u64::from(m),
            opcode: WrOpcode::Send,
            payload: Payload::Sges(&sge),
            flags: SendFlags::SIGNALED,
            ud: None,
        },
    )
    .unwrap();
    let mut wc = [WorkCompletion::default(); 4];
    for _ in 0..5000 {
        mlx4::Platform::delay_us(&c.p, 1);
        if c.h.poll_cq(c.scq, &mut wc).unwrap() > 0 {
            assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
            assert_eq!(wc[0].wr_id, u64::from(m));
            return;
        }
    }
    panic!("QP {q} message {m}: no send completion");
}

/// Polls the server's receive CQ for `n` completions; checks each against the buffer its
/// wr_id names and returns (server QPN, client QP index, message number, wr_id).
fn receive(s: &mut Side, n: usize) -> Vec<(u32, usize, u32, u64)> {
    let mut got = Vec::new();
    let mut wc = [WorkCompletion::default(); 8];
    for _ in 0..5000 {
        if got.len() == n {
            break;
        }
        mlx4::Platform::delay_us(&s.p, 1);
        let k = s.h.poll_cq(s.rcq, &mut wc).unwrap();
        for c in &wc[..k] {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            assert_eq!(c.opcode, WcOpcode::Recv);
            assert_eq!(c.byte_len as usize, MSG);
            let mut data = vec![0u8; MSG];
            s.p.arena.read(slot_addr(s, c.wr_id), &mut data).unwrap();
            let m = u32::from_le_bytes(data[..4].try_into().unwrap());
            let q = data[4] as usize;
            assert_eq!(
                data,
                message(q, m),
                "wr_id {}: its buffer does not hold one whole message",
                c.wr_id
            );
            got.push((c.qp_num, q, m, c.wr_id));
        }
    }
    assert_eq!(got.len(), n, "receive completions: {got:?}");
    got
}

#[test]
fn qps_share_one_srq_with_limit_event_errors_and_teardown_order() {
    let (_m, mut ps) = machine(2, FabricConfig::default());
    let mut s = side(ps.remove(1));
    let mut c = side(ps.remove(0));

    // Errors at creation, as Linux's mlx4_ib_create_srq checks them.
    let too_big = SrqAttr {
        max_wr: 1 << 20,
        max_sge: 1,
        srq_limit: 0,
    };
    assert!(matches!(
        s.h.create_srq(s.pd, &too_big),
        Err(Error::InvalidArgument(_))
    ));
    let (srq, granted) =
        s.h.create_srq(
            s.pd,
            &SrqAttr {
                max_wr: SRQ_WR,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
    assert_eq!(granted.max_wr, SRQ_WR, "16 WQEs, one kept free");
    assert_eq!(granted.max_sge, 1);

    for _ in 0..QPS {
        let a = qp_attr(&s);
        let qp = s.h.create_qp_with_srq(&a, srq).unwrap();
        assert_eq!(s.h.qp_cap(qp).max_recv_wr, 0, "the QP has no RQ of its own");
        s.qps.push(qp);
        let a = qp_attr(&c);
        let qp = c.h.create_qp(&a).unwrap();
        c.qps.push(qp);
    }
    for i in 0..QPS {
        let (sq, cq) = (s.h.qp_num(s.qps[i]), c.h.qp_num(c.qps[i]));
        let (sl, cl) = (s.lid, c.lid);
        connect(&mut s, i, cq, cl);
        connect(&mut c, i, sq, sl);
    }
    // As Linux's `mlx4_ib_create_srq` and `__mlx4_ib_modify_qp`: the SRQ names the device's
    // reserved XRC domain (none without the XRC flag), and every transition of a QP on it
    // leaves the RQ size unset with the wrapped 0 − 4 of a stride never set (0xFC).
    let srqc = mailboxes_of(&s.p, mlx4::Opcode::SW2HW_SRQ);
    let xrcd = u16::from_be_bytes([srqc[0][0x06], srqc[0][0x07]]);
    assert_eq!(xrcd, s.h.caps().xrcd_for_srq());
    for op in [
        mlx4::Opcode::RST2INIT_QP,
        mlx4::Opcode::INIT2RTR_QP,
        mlx4::Opcode::RTR2RTS_QP,
    ] {
        for qpc in mailboxes_of(&s.p, op) {
            assert_eq!(qpc[8 + 0x09], 0xFC, "{op:?} rq_size_stride");
        }
    }
    assert!(matches!(
        s.h.post_recv(
            s.qps[0],
            &RecvWr {
                wr_id: 0,
                sg_list: &[]
            }
        ),
        Err(Error::InvalidArgument(_))
    ));

    // Fill the SRQ; one more is a typed error, so is a WR with too many SGEs.
    for wr in 0..u64::from(SRQ_WR) {
        post_srq(&mut s, srq, wr).unwrap();
    }
    assert_eq!(post_srq(&mut s, srq, 99), Err(Error::QueueFull));
    let two = [Sge {
        addr: s.buf,
        length: 8,
        lkey: s.lkey,
    }; 2];
    assert!(matches!(
        s.h.post_srq_recv(
            srq,
            &RecvWr {
                wr_id: 98,
                sg_list: &two
            }
        ),
        Err(Error::TooManySge { n: 2, max: 1 })
    ));

    // Arm the limit; Linux refuses a limit not below the SRQ's size.
    assert!(matches!(
        s.h.modify_srq(srq, 16),
        Err(Error::InvalidArgument(_))
    ));
    s.h.modify_srq(srq, LIMIT).unwrap();
    assert_eq!(s.h.query_srq(srq).unwrap().srq_limit, LIMIT);

    // 11 messages over the three QPs leave 4 receives: not below the limit yet.
    let first = SRQ_WR - LIMIT;
    for m in 0..first {
        send(&mut c, m as usize % QPS, m);
    }
    let got = receive(&mut s, first as usize);
    assert_eq!(s.h.get_async_event(), None, "4 receives left, limit 4");
    // One more: 3 left, below the limit: one event, and the SRQ is disarmed.
    send(&mut c, 0, first);
    let more = receive(&mut s, 1);
    let srqn = s.h.srq_num(srq);
    assert_eq!(
        s.h.get_async_event(),
        Some(AsyncEvent::SrqLimitReached { srq_num: srqn })
    );
    assert_eq!(s.h.get_async_event(), None);
    assert_eq!(s.h.query_srq(srq).unwrap().srq_limit, 0, "disarmed");

    // Every server QP took receives from the SRQ, each message arrived on the QP connected
    // to its sender, and every wr_id was used once.
    let all: Vec<_> = got.iter().chain(more.iter()).copied().collect();
    for (qpn, q, m, _) in &all {
        assert_eq!(
            *qpn,
            s.h.qp_num(s.qps[*q]),
            "message {m} from client QP {q}"
        );
    }
    for i in 0..QPS {
        let qpn = s.h.qp_num(s.qps[i]);
        assert!(
            all.iter().any(|r| r.0 == qpn),
            "QP {qpn:#x} received nothing"
        );
    }
    let mut ids: Vec<u64> = all.iter().map(|r| r.3).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(
        ids.len(),
        all.len(),
        "a receive WQE completed twice: {all:?}"
    );

    // The completed WQEs went back to the free list: post 12 more, send 12 more.
    for wr in 100..100 + u64::from(first + 1) {
        post_srq(&mut s, srq, wr).unwrap();
    }
    assert_eq!(post_srq(&mut s, srq, 199), Err(Error::QueueFull));
    for m in 0..=first {
        send(&mut c, (m as usize + 1) % QPS, 1000 + m);
    }
    let again = receive(&mut s, first as usize + 1);
    let mut ms: Vec<u32> = again.iter().map(|r| r.2).collect();
    ms.sort();
    assert_eq!(ms, (1000..=1000 + first).collect::<Vec<_>>());
    assert_eq!(s.h.get_async_event(), None, "the limit fires once per arm");

    // Teardown order: the SRQ stays while QPs use it.
    assert!(matches!(s.h.destroy_srq(srq), Err(Error::Busy(_))));
    for qp in s.qps.drain(..) {
        s.h.destroy_qp(qp).unwrap();
    }
    s.h.destroy_srq(srq).unwrap();
    assert_eq!(s.h.destroy_srq(srq), Err(Error::InvalidHandle));
    assert_no_violations(&s.p);
    assert_no_violations(&c.p);
}

/// Destroying a QP drops its completions that were not polled yet from the shared receive
/// CQ (the other QPs' stay, in order) and gives the SRQ back the WQEs they used
/// (docs/hardware.md §5.8).
#[test]
fn destroying_a_qp_cleans_its_unpolled_completions_and_returns_its_srq_wqes() {
    let (_m, mut ps) = machine(2, FabricConfig::default());
    let mut s = side(ps.remove(1));
    let mut c = side(ps.remove(0));
    let attr = SrqAttr {
        max_wr: SRQ_WR,
        max_sge: 1,
        srq_limit: 0,
    };
    let (srq, _) = s.h.create_srq(s.pd, &attr).unwrap();
    for _ in 0..QPS {
        let a = qp_attr(&s);
        s.qps.push(s.h.create_qp_with_srq(&a, srq).unwrap());
        let a = qp_attr(&c);
        c.qps.push(c.h.create_qp(&a).unwrap());
    }
    for i in 0..QPS {
        let (sq, cq) = (s.h.qp_num(s.qps[i]), c.h.qp_num(c.qps[i]));
        let (sl, cl) = (s.lid, c.lid);
        connect(&mut s, i, cq, cl);
        connect(&mut c, i, sq, sl);
    }
    // As Linux's `mlx4_ib_create_srq` and `__mlx4_ib_modify_qp`: the SRQ names the device's
    // reserved XRC domain (none without the XRC flag), and every transition of a QP on it
    // leaves the RQ size unset with the wrapped 0 − 4 of a stride never set (0xFC).
    let srqc = mailboxes_of(&s.p, mlx4::Opcode::SW2HW_SRQ);
    let xrcd = u16::from_be_bytes([srqc[0][0x06], srqc[0][0x07]]);
    assert_eq!(xrcd, s.h.caps().xrcd_for_srq());
    for op in [
        mlx4::Opcode::RST2INIT_QP,
        mlx4::Opcode::INIT2RTR_QP,
        mlx4::Opcode::RTR2RTS_QP,
    ] {
        for qpc in mailboxes_of(&s.p, op) {
            assert_eq!(qpc[8 + 0x09], 0xFC, "{op:?} rq_size_stride");
        }
    }
    for wr in 0..u64::from(SRQ_WR) {
        post_srq(&mut s, srq, wr).unwrap();
    }
    // Six messages round-robin over the three QPs; each send completion (an RC ACK) means
    // the server's receive CQE is written. The server polls nothing yet.
    for m in 0..6 {
        send(&mut c, m as usize % QPS, m);
    }
    let gone = s.qps.remove(1);
    s.h.destroy_qp(gone).unwrap();

    let got = receive(&mut s, 4);
    let order: Vec<(usize, u32)> = got.iter().map(|r| (r.1, r.2)).collect();
    assert_eq!(order, [(0, 0), (2, 2), (0, 3), (2, 5)]);
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(s.h.poll_cq(s.rcq, &mut wc).unwrap(), 0, "{:?}", &wc[..1]);

    // 4 WQEs came back through the polls and 2 through the clean: 6 posts fit, not 7.
    for wr in 100..106 {
        post_srq(&mut s, srq, wr).unwrap();
    }
    assert_eq!(post_srq(&mut s, srq, 106), Err(Error::QueueFull));
    assert_no_violations(&s.p);
    assert_no_violations(&c.p);
}

/// HW2SW_SRQ is one of Linux's closing commands (`mlx4_closing_cmd_fatal_error`): when it
/// fails the device still owns the SRQ and may write its buffer, so the failure is fatal and
/// the device is reset before the buffer goes back; once failed, HW2SW_SRQ only releases
/// (`mlx4_internal_err_ret_value`), so teardown of a second SRQ succeeds without posting it.
#[test]
fn a_failed_hw2sw_srq_resets_the_device_and_later_srq_teardown_succeeds() {
    let faults = sim::Faults {
        commands: vec![sim::CommandFault {
            hca: None,
            opcode: mlx4::Opcode::HW2SW_SRQ.raw(),
            action: sim::CommandFaultAction::Fail(0x03),
            times: 1,
            skip: 0,
        }],
        ..sim::Faults::default()
    };
    let (_m, mut ps) = machine(
        1,
        FabricConfig {
            faults,
            ..FabricConfig::default()
        },
    );
    let p = ps.remove(0);
    let probe = p.clone_handle();
    let mut h = Hca::init(p, test_config()).expect("bring-up");
    let pd = h.alloc_pd().unwrap();
    let attr = SrqAttr {
        max_wr: 7,
        max_sge: 1,
        srq_limit: 0,
    };
    let (first, _) = h.create_srq(pd, &attr).unwrap();
    let (_second, _) = h.create_srq(pd, &attr).unwrap();
    assert!(!h.device_failed());
    let e = h.destroy_srq(first).expect_err("HW2SW_SRQ fails");
    assert!(
        e.to_string().contains("HW2SW_SRQ"),
        "the command's own error: {e}"
    );
    assert!(h.device_failed(), "a failed HW2SW_SRQ is fatal");
    assert!(
        matches!(h.create_cq(4), Err(Error::DeviceFailed { .. })),
        "nothing more is posted to the failed device"
    );
    let issued = probe.commands.borrow().len();
    h.close()
        .expect("teardown releases the second SRQ without a command");
    assert!(
        probe.commands.borrow()[issued..]
            .iter()
            .filter(|r| r.op == mlx4::Opcode::HW2SW_SRQ)
            .all(|r| r.outcome == mlx4::CmdOutcome::DeviceFailed),
        "HW2SW_SRQ not posted after the reset"
    );
    assert_eq!(probe.arena.bytes_in_use(), 0, "nothing leaked");
    assert_no_violations(&probe);
}
