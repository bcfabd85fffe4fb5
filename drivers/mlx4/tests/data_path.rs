//! The data path (`Device::data_path`, mlx4's `path::DataPath`) against the model: a
//! ping-pong of every inline size the latency path takes and beyond (the generic path),
//! mixed with SGE sends, across many owner-bit wraps, payloads and ids verified; what it
//! refuses at creation and per call, with typed errors; error CQEs; a CQ overrun.

mod common;

use common::*;
use mlx4::CqHandle;
use mlx4::Hca;
use mlx4::{Ah, QpHandle};
use mlx4::{MrHandle, PdHandle};
use sim::FabricConfig;
use verbs::*;

struct End {
    h: Hca<SimPlatform>,
    p: SimPlatform,
    pd: PdHandle,
    scq: CqHandle,
    rcq: CqHandle,
    qp: QpHandle,
    lid: u16,
    buf: u64,
    mr: MrHandle,
}

/// `n` bytes of test memory at bus address `at`.
fn bytes(p: &SimPlatform, at: u64, n: usize) -> Vec<u8> {
    let ptr = p.arena.ptr_of(at).unwrap();
    // SAFETY: `at` is inside a 64 KiB arena allocation owned by the test; copied out.
    unsafe { std::slice::from_raw_parts(ptr, n) }.to_vec()
}

/// Write `data` to test memory at bus address `at`.
fn write(p: &SimPlatform, at: u64, data: &[u8]) {
    let ptr = p.arena.ptr_of(at).unwrap();
    // SAFETY: as in `bytes`; no device access to this range is in flight.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, data.len()) };
}

fn cap(max_inline: u32) -> QpCap {
    QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: max_inline,
    }
}

fn end(p: SimPlatform, t: QpType, max_inline: u32) -> End {
    let probe = p.clone_handle();
    let mut h = Hca::init(p, test_config()).expect("bring-up");
    let lid = h.wait_port_active(1, 5000).expect("port active").lid;
    let pd = h.alloc_pd().unwrap();
    // Small CQs and SQ so that the owner bits wrap many times.
    let scq = h.create_cq(8).unwrap();
    let rcq = h.create_cq(8).unwrap();
    let attr = QpInitAttr {
        pd,
        send_cq: scq,
        recv_cq: rcq,
        qp_type: t,
        cap: cap(max_inline),
        sq_sig_all: false,
    };
    let qp = h.create_qp(&attr).unwrap();
    let buf = probe.arena.alloc(64 << 10, 4096).unwrap();
    let mr = h
        .reg_mr(pd, buf, 64 << 10, AccessFlags::LOCAL_WRITE)
        .unwrap();
    End {
        h,
        p: probe,
        pd,
        scq,
        rcq,
        qp,
        lid,
        buf,
        mr,
    }
}

fn connect(a: &mut End, qp: QpHandle, remote_qpn: u32, remote_lid: u16) {
    let mut init = QpAttr::new(QpState::Init);
    init.qkey = 0x1111_1111;
    a.h.modify_qp(qp, &init).unwrap();
    let mut rtr = QpAttr::new(QpState::Rtr);
    rtr.dest_qp_num = remote_qpn;
    rtr.ah = AhAttr {
        dlid: remote_lid,
        port: 1,
        ..AhAttr::default()
    };
    a.h.modify_qp(qp, &rtr).unwrap();
    a.h.modify_qp(qp, &QpAttr::new(QpState::Rts)).unwrap();
}

fn pair(t: QpType, max_inline: u32) -> (sim::inproc::SharedMachine, End, End) {
    let (m, mut ps) = machine(2, FabricConfig::default());
    let p1 = ps.remove(1);
    let p0 = ps.remove(0);
    let mut a = end(p0, t, max_inline);
    let mut b = end(p1, t, max_inline);
    let (qa, qb) = (a.h.qp_num(a.qp), b.h.qp_num(b.qp));
    let (la, lb) = (a.lid, b.lid);
    let (qpa, qpb) = (a.qp, b.qp);
    connect(&mut a, qpa, qb, lb);
    connect(&mut b, qpb, qa, la);
    (m, a, b)
}

fn dest(a: &mut End, b: &End) -> UdDest<Ah> {
    let attr = AhAttr {
        dlid: b.lid,
        port: 1,
        ..AhAttr::default()
    };
    UdDest {
        ah: a.h.create_ah(a.pd, &attr).unwrap(),
        remote_qpn: b.h.qp_num(b.qp),
        remote_qkey: 0x1111_1111,
    }
}

/// Poll `poll` until it yields a completion (bounded; the model's clock advances by `p`).
fn take<X: DataPath>(x: &mut X, p: &SimPlatform, send: bool) -> Completion {
    for _ in 0..100 {
        let c = if send { x.poll_send() } else { x.poll_recv() };
        if let Some(c) = c.expect("data path poll") {
            return c;
        }
        mlx4::Platform::delay_us(p, 1);
    }
    panic!("no completion (send CQ: {send})");
}

/// A's data path sends, B's receives, for every size 1..=96 three times: the latency path
/// up to its limit (60 bytes UD, 44 UC), the generic path above it, and every fourth send
/// from registered memory (an SGE) instead of inline; 288 sends wrap the SQ and both CQs
/// many times and make the path switch between known and read old WQE sizes for stamping.
fn ping_pong(t: QpType) {
    let (_m, mut a, mut b) = pair(t, 188);
    let ud_a = (t == QpType::Ud).then(|| dest(&mut a, &b));
    let grh = if ud_a.is_some() { 40u32 } else { 0 };
    let (lkey_a, lkey_b) = (a.h.mr_lkey(a.mr), b.h.mr_lkey(b.mr));
    let (sbuf, rbuf) = (a.buf + 4096, b.buf);
    let (pa_probe, pb_probe) = (a.p.clone_handle(), b.p.clone_handle());
    let mut pa = a.h.data_path(a.qp, a.scq, a.rcq, ud_a).expect("A's path");
    // B only receives: its path needs no destination unless UD (any will do).
    let ud_b = ud_a.map(|d| UdDest { remote_qpn: 1, ..d });
    let mut pb = b.h.data_path(b.qp, b.scq, b.rcq, ud_b).expect("B's path");
    let mut n = 0u64;
    for round in 0..3u8 {
        for len in 1..=96usize {
            let msg: Vec<u8> = (0..len)
                .map(|i| (i as u8).wrapping_mul(13) ^ round ^ len as u8)
                .collect();
            let rsge = [Sge {
                addr: rbuf,
                length: len as u32 + grh,
                lkey: lkey_b,
            }];
            let rwr = RecvWr {
                wr_id: 0x1000 + n,
                sg_list: &rsge,
            };
            pb.post_recv(&rwr).unwrap();
            let sge = [Sge {
                addr: sbuf,
                length: len as u32,
                lkey: lkey_a,
            }];
            let payload = if n % 4 == 3 {
                write(&pa_probe, sbuf, &msg);
                Payload::Sges(&sge)
            } else {
                Payload::Inline(&msg)
            };
            pa.send(0x2000 + n, payload, SendFlags::SIGNALED).unwrap();
            let s = take(&mut pa, &pa_probe, true);
            assert_eq!(
                (s.wr_id, s.status, s.opcode),
                (0x2000 + n, WcStatus::Success, WcOpcode::Send),
                "send {n} of {len} bytes"
            );
            let r = take(&mut pb, &pb_probe, false);
            assert_eq!(
                (r.wr_id, r.status, r.opcode, r.byte_len),
                (
                    0x1000 + n,
                    WcStatus::Success,
                    WcOpcode::Recv,
                    len as u32 + grh
                ),
                "receive {n} of {len} bytes"
            );
            let got = bytes(&pb_probe, rbuf + u64::from(grh), len);
            assert_eq!(got, msg, "payload of send {n}");
            n += 1;
        }
    }
    assert_eq!(pa.poll_send(), Ok(None));
    assert_eq!(pb.poll_recv(), Ok(None));
    // The per-call verbs carry on where the paths stopped.
    assert_eq!(a.h.poll_one(a.scq), Ok(None));
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
}

#[test]
fn ud_data_path_ping_pong_every_size_with_wraps() {
    ping_pong(QpType::Ud);
}

#[test]
fn uc_data_path_ping_pong_every_size_with_wraps() {
    ping_pong(QpType::Uc);
}

/// A QP of `t` on `e` with the given CQs, in RTS (UD) or RESET (otherwise).
fn extra_qp(e: &mut End, t: QpType, scq: CqHandle, rcq: CqHandle) -> QpHandle {
    let qp =
        e.h.create_qp(&QpInitAttr {
            pd: e.pd,
            send_cq: scq,
            recv_cq: rcq,
            qp_type: t,
            cap: cap(64),
            sq_sig_all: false,
        })
        .unwrap();
    if t == QpType::Ud {
        let lid = e.lid;
        connect(e, qp, 0, lid);
    }
    qp
}

#[test]
fn creation_refuses_what_the_borrow_cannot_guarantee() {
    let (_m, mut a, b) = pair(QpType::Ud, 64);
    let d = Some(dest(&mut a, &b));
    let (qp, scq, rcq) = (a.qp, a.scq, a.rcq);
    let invalid = |r: Result<_>| match r {
        Err(Error::InvalidArgument(why)) => why,
        other => panic!("expected InvalidArgument, got {:?}", other.map(|_| ())),
    };
    // Not the QP's CQs (swapped), and a UD QP without destination.
    assert!(invalid(a.h.data_path(qp, rcq, scq, d).map(|_| ())).contains("not the QP's"));
    assert!(invalid(a.h.data_path(qp, scq, rcq, None).map(|_| ())).contains("destination"));
    // A CQ that another QP also uses.
    let other = extra_qp(&mut a, QpType::Ud, scq, rcq);
    assert!(invalid(a.h.data_path(qp, scq, rcq, d).map(|_| ())).contains("shared"));
    a.h.destroy_qp(other).unwrap();
    assert!(a.h.data_path(qp, scq, rcq, d).is_ok());
    // One CQ for both directions.
    let both = a.h.create_cq(16).unwrap();
    let one = extra_qp(&mut a, QpType::Ud, both, both);
    assert!(invalid(a.h.data_path(one, both, both, d).map(|_| ())).contains("differ"));
    // A QP not in RTS.
    let (s2, r2) = (a.h.create_cq(8).unwrap(), a.h.create_cq(8).unwrap());
    let reset = extra_qp(&mut a, QpType::Uc, s2, r2);
    assert_eq!(
        a.h.data_path(reset, s2, r2, None).map(|_| ()),
        Err(Error::WrongState {
            state: QpState::Reset
        })
    );
    // Stale handles.
    a.h.destroy_qp(reset).unwrap();
    assert_eq!(
        a.h.data_path(reset, s2, r2, None).map(|_| ()),
        Err(Error::InvalidHandle)
    );
    a.h.destroy_cq(s2).unwrap();
    assert_eq!(
        a.h.data_path(qp, s2, rcq, d).map(|_| ()),
        Err(Error::InvalidHandle)
    );
    assert_no_violations(&a.p);
}

#[test]
fn per_call_errors_are_typed_and_leave_the_path_usable() {
    let (_m, mut a, mut b) = pair(QpType::Uc, 64);
    let granted = a.h.qp_cap(a.qp).max_inline_data as usize;
    let max_post = a.h.qp_cap(a.qp).max_send_wr;
    let (lkey, buf) = (a.h.mr_lkey(a.mr), a.buf);
    let probe = a.p.clone_handle();
    let mut pa = a.h.data_path(a.qp, a.scq, a.rcq, None).unwrap();
    // Inline data beyond what the QP was created for.
    let big = vec![7u8; granted + 1];
    assert_eq!(
        pa.send(1, Payload::Inline(&big), SendFlags::SIGNALED),
        Err(Error::InlineTooLarge {
            len: granted + 1,
            max: granted
        })
    );
    // Fill the send queue without polling: the SQ's max_post, at most what the 16-entry
    // send CQ holds (15).
    let mut posted = 0;
    let full = loop {
        match pa.send(100 + posted, Payload::Inline(&[1, 2]), SendFlags::SIGNALED) {
            Ok(()) => posted += 1,
            Err(e) => break e,
        }
        assert!(posted < 1000, "the send queue never filled");
    };
    assert_eq!(full, Error::QueueFull);
    assert_eq!(posted, u64::from(max_post.min(15)));
    // Completions free the queue again, in order.
    for i in 0..posted {
        let c = take(&mut pa, &probe, true);
        assert_eq!((c.wr_id, c.status), (100 + i, WcStatus::Success));
    }
    pa.send(999, Payload::Inline(&[3]), SendFlags::SIGNALED)
        .unwrap();
    assert_eq!(take(&mut pa, &probe, true).wr_id, 999);
    // Receives: at most what the RQ (and the receive CQ) holds.
    let sge = [Sge {
        addr: buf,
        length: 64,
        lkey,
    }];
    let mut n = 0;
    let full = loop {
        match pa.post_recv(&RecvWr {
            wr_id: n,
            sg_list: &sge,
        }) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 1000, "the receive queue never filled");
    };
    assert_eq!(full, Error::QueueFull);
    assert!(n >= 4, "at least the requested 4 receives");
    assert_no_violations(&a.p);
    let _ = &mut b;
}

#[test]
fn error_cqes_come_back_as_statuses() {
    let (_m, mut a, mut b) = pair(QpType::Ud, 64);
    let d = Some(dest(&mut a, &b));
    let lkey = b.h.mr_lkey(b.mr);
    let probe_b = b.p.clone_handle();
    let probe_a = a.p.clone_handle();
    let d_b = Some(dest(&mut b, &a));
    let mut pa = a.h.data_path(a.qp, a.scq, a.rcq, d).unwrap();
    let mut pb = b.h.data_path(b.qp, b.scq, b.rcq, d_b).unwrap();
    // A receive too small for the datagram: a local length error on B's side.
    let small = [Sge {
        addr: b.buf,
        length: 40 + 4,
        lkey,
    }];
    pb.post_recv(&RecvWr {
        wr_id: 77,
        sg_list: &small,
    })
    .unwrap();
    pa.send(5, Payload::Inline(&[9; 32]), SendFlags::SIGNALED)
        .unwrap();
    assert_eq!(take(&mut pa, &probe_a, true).status, WcStatus::Success);
    let r = take(&mut pb, &probe_b, false);
    assert_eq!((r.wr_id, r.status), (77, WcStatus::LocLenErr));
    // The receive error moved B's QP to the error state (§4.2): nothing more arrives,
    // and A's sends still complete.
    pa.send(6, Payload::Inline(&[8; 32]), SendFlags::SIGNALED)
        .unwrap();
    assert_eq!(take(&mut pa, &probe_a, true).wr_id, 6);
    assert_eq!(pb.poll_recv(), Ok(None));
    let v = violations(&b.p);
    assert!(
        v.len() == 1 && v[0].contains("completed in error"),
        "only the provoked receive error: {v:?}"
    );
    assert_no_violations(&a.p);
}

#[test]
fn an_overrun_cq_is_refused() {
    let (_m, mut a, b) = pair(QpType::Ud, 64);
    let small = a.h.create_cq(1).unwrap();
    let rcq = a.h.create_cq(8).unwrap();
    let qp =
        a.h.create_qp(&QpInitAttr {
            pd: a.pd,
            send_cq: small,
            recv_cq: rcq,
            qp_type: QpType::Ud,
            cap: cap(64),
            sq_sig_all: true,
        })
        .unwrap();
    let lid = a.lid;
    connect(&mut a, qp, 0, lid);
    let d = dest(&mut a, &b);
    // Through the per-call verbs, which cannot know: four completions for a 1-entry CQ.
    let wr: SendWr<'_, Ah> = SendWr {
        wr_id: 1,
        opcode: WrOpcode::Send,
        payload: Payload::Inline(&[1]),
        flags: SendFlags::empty(),
        ud: Some(d),
    };
    // A path on that CQ would have refused to post more than the CQ holds.
    {
        let mut p = a.h.data_path(qp, small, rcq, Some(d)).unwrap();
        p.send(1, Payload::Inline(&[1]), SendFlags::SIGNALED)
            .unwrap();
        assert_eq!(
            p.send(2, Payload::Inline(&[1]), SendFlags::SIGNALED),
            Err(Error::QueueFull)
        );
    }
    for _ in 0..4 {
        a.h.post_send(qp, &wr).unwrap();
    }
    for _ in 0..10 {
        mlx4::Platform::delay_us(&a.p, 10);
    }
    a.h.handle_interrupt();
    assert_eq!(
        a.h.data_path(qp, small, rcq, Some(d)).map(|_| ()),
        Err(Error::CqOverrun)
    );
    let v = violations(&a.p);
    assert!(
        !v.is_empty() && v.iter().all(|s| s.contains("overrun")),
        "only the provoked overrun: {v:?}"
    );
}
