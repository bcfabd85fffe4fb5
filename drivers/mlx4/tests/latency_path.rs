//! The latency path against the model: the inlined fast `post_send` for every inline size
//! it takes (and the sizes just beyond, which take the general path), owner-bit wraps of
//! the SQ and both CQs, `poll_one` against `poll_cq`, and the hand-over from the inlined
//! poll to the general loop in the middle of a batch.

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

impl End {
    fn bytes(&self, off: u64, n: usize) -> Vec<u8> {
        let ptr = self.p.arena.ptr_of(self.buf + off).unwrap();
        // SAFETY: [buf, buf + 64 KiB) is an arena allocation owned by this test; copied out.
        unsafe { std::slice::from_raw_parts(ptr, n) }.to_vec()
    }
}

fn end(p: SimPlatform, t: QpType) -> End {
    let probe = p.clone_handle();
    let mut h = Hca::init(p, test_config()).expect("bring-up");
    let lid = h.wait_port_active(1, 5000).expect("port active").lid;
    let pd = h.alloc_pd().unwrap();
    // Small CQs and SQ so that the owner bits wrap many times.
    let scq = h.create_cq(8).unwrap();
    let rcq = h.create_cq(8).unwrap();
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 188,
    };
    let attr = QpInitAttr {
        pd,
        send_cq: scq,
        recv_cq: rcq,
        qp_type: t,
        cap,
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

fn connect(a: &mut End, remote_qpn: u32, remote_lid: u16) {
    let mut init = QpAttr::new(QpState::Init);
    init.qkey = 0x1111_1111;
    a.h.modify_qp(a.qp, &init).unwrap();
    let mut rtr = QpAttr::new(QpState::Rtr);
    rtr.dest_qp_num = remote_qpn;
    rtr.ah = AhAttr {
        dlid: remote_lid,
        port: 1,
        ..AhAttr::default()
    };
    a.h.modify_qp(a.qp, &rtr).unwrap();
    a.h.modify_qp(a.qp, &QpAttr::new(QpState::Rts)).unwrap();
}

fn pair(t: QpType) -> (sim::inproc::SharedMachine, End, End) {
    let (m, mut ps) = machine(2, FabricConfig::default());
    let p1 = ps.remove(1);
    let p0 = ps.remove(0);
    let mut a = end(p0, t);
    let mut b = end(p1, t);
    let (qa, qb) = (a.h.qp_num(a.qp), b.h.qp_num(b.qp));
    let (la, lb) = (a.lid, b.lid);
    connect(&mut a, qb, lb);
    connect(&mut b, qa, la);
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

/// One completion through `poll_one` or `poll_cq` (alternating with `n`), bounded.
fn take(e: &mut End, cq: CqHandle, n: usize) -> Completion {
    for _ in 0..100 {
        if n.is_multiple_of(2) {
            if let Some(c) = e.h.poll_one(cq).expect("poll_one") {
                return c;
            }
        } else {
            let mut wc = [WorkCompletion::default(); 2];
            match e.h.poll_cq(cq, &mut wc).expect("poll_cq") {
                0 => {}
                1 => return Completion::from(&wc[0]),
                k => panic!("{k} completions for one send"),
            }
        }
        mlx4::Platform::delay_us(&e.p, 1);
    }
    panic!("no completion on {cq:?}");
}

fn every_inline_size(t: QpType) {
    let (_m, mut a, mut b) = pair(t);
    let ud = (t == QpType::Ud).then(|| dest(&mut a, &b));
    let grh = if ud.is_some() { 40 } else { 0 };
    let mut n = 0;
    // Three rounds of 1..=64 bytes: every branch of the small copy, the fast path's limit
    // (60 UD, 44 UC) and beyond; 192 sends wrap the 64-slot SQ and the 16-entry CQs.
    for round in 0..3u8 {
        for len in 1..=64usize {
            let msg: Vec<u8> = (0..len)
                .map(|i| (i as u8).wrapping_mul(7) ^ round ^ len as u8)
                .collect();
            let rsge = [Sge {
                addr: b.buf,
                length: (len + grh) as u32,
                lkey: b.h.mr_lkey(b.mr),
            }];
            let rwr = RecvWr {
                wr_id: 0x1000 + n as u64,
                sg_list: &rsge,
            };
            b.h.post_recv(b.qp, &rwr).unwrap();
            let wr = SendWr {
                wr_id: 0x2000 + n as u64,
                opcode: WrOpcode::Send,
                payload: Payload::Inline(&msg),
                flags: SendFlags::SIGNALED,
                ud,
            };
            a.h.post_send(a.qp, &wr).unwrap();
            let scq = a.scq;
            let s = take(&mut a, scq, n);
            assert_eq!(
                (s.wr_id, s.status, s.opcode),
                (0x2000 + n as u64, WcStatus::Success, WcOpcode::Send),
                "send of {len} bytes"
            );
            let rcq = b.rcq;
            let r = take(&mut b, rcq, n + 1);
            assert_eq!(
                (r.wr_id, r.status, r.opcode, r.byte_len),
                (
                    0x1000 + n as u64,
                    WcStatus::Success,
                    WcOpcode::Recv,
                    (len + grh) as u32
                ),
                "receive of {len} bytes"
            );
            assert_eq!(b.bytes(grh as u64, len), msg, "payload of {len} bytes");
            n += 1;
        }
    }
    // Nothing left over on either CQ.
    assert_eq!(a.h.poll_one(a.scq), Ok(None));
    assert_eq!(b.h.poll_one(b.rcq), Ok(None));
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
}

#[test]
fn ud_fast_path_every_inline_size_with_wraps() {
    every_inline_size(QpType::Ud);
}

#[test]
fn uc_fast_path_every_inline_size_with_wraps() {
    every_inline_size(QpType::Uc);
}

#[test]
fn a_batch_hands_over_to_the_general_loop_at_an_error_cqe() {
    let (_m, mut a, b) = pair(QpType::Ud);
    let d = dest(&mut a, &b);
    let msg = [1u8, 2];
    for id in 1..=2 {
        let wr = SendWr {
            wr_id: id,
            opcode: WrOpcode::Send,
            payload: Payload::Inline(&msg),
            flags: SendFlags::SIGNALED,
            ud: Some(d),
        };
        a.h.post_send(a.qp, &wr).unwrap();
    }
    let bad = [Sge {
        addr: a.buf,
        length: 8,
        lkey: a.h.mr_lkey(a.mr) ^ 0x300,
    }];
    let wr = SendWr {
        wr_id: 3,
        opcode: WrOpcode::Send,
        payload: Payload::Sges(&bad),
        flags: SendFlags::SIGNALED,
        ud: Some(d),
    };
    a.h.post_send(a.qp, &wr).unwrap();
    // Two successes through the inlined loop, then the error CQE through the general one.
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(a.h.poll_cq(a.scq, &mut wc), Ok(3));
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[1].wr_id, wc[1].status),
        (1, WcStatus::Success, 2, WcStatus::Success)
    );
    assert_eq!((wc[2].wr_id, wc[2].status), (3, WcStatus::LocProtErr));
    assert_eq!(wc[2].qp_num, a.h.qp_num(a.qp));
    // The consumer index moved past all three: nothing is reported twice.
    assert_eq!(a.h.poll_cq(a.scq, &mut wc), Ok(0));
    assert_eq!(a.h.poll_one(a.scq), Ok(None));
    let v = violations(&a.p);
    assert!(
        v.len() == 1 && v[0].contains("LocalProtection"),
        "only the provoked error: {v:?}"
    );
}

#[test]
fn poll_one_reports_error_cqes_and_stale_handles() {
    let (_m, mut a, b) = pair(QpType::Ud);
    let d = dest(&mut a, &b);
    let bad = [Sge {
        addr: a.buf,
        length: 8,
        lkey: a.h.mr_lkey(a.mr) ^ 0x300,
    }];
    let wr = SendWr {
        wr_id: 9,
        opcode: WrOpcode::Send,
        payload: Payload::Sges(&bad),
        flags: SendFlags::SIGNALED,
        ud: Some(d),
    };
    a.h.post_send(a.qp, &wr).unwrap();
    let c = a.h.poll_one(a.scq).unwrap().expect("error completion");
    assert_eq!((c.wr_id, c.status), (9, WcStatus::LocProtErr));
    assert_eq!(a.h.poll_one(a.scq), Ok(None));
    // A destroyed CQ's handle is refused, by both verbs.
    let spare = a.h.create_cq(4).unwrap();
    a.h.destroy_cq(spare).unwrap();
    assert_eq!(a.h.poll_one(spare), Err(Error::InvalidHandle));
    let mut wc = [WorkCompletion::default(); 1];
    assert_eq!(a.h.poll_cq(spare, &mut wc), Err(Error::InvalidHandle));
}
