//! Latency-path instruction counts under callgrind: two HCAs on the in-process model, a UD
//! or UC ping-pong of 2-byte inline SENDs, every send signaled, receives pre-posted
//! (perftest's latency loop).
//!
//! ```text
//! cargo build --release -p mlx4 --example hotpath
//! valgrind --tool=callgrind --callgrind-out-file=cg.out \
//!   --toggle-collect='hotpath::measured_*' \
//!   target/release/examples/hotpath ud 1000 [max_inline]
//! callgrind_annotate cg.out | grep 'hotpath::measured_'
//! ```
//! The driver is inlined into the two `measured_*` wrappers; the platform methods are
//! separate (`inline(never)`) functions. The driver's own instructions are therefore the
//! *self* cost of `hotpath::measured_post_send` / `measured_poll_cq` (callgrind_annotate
//! splits a function's self cost by the source file of inlined code: add those lines up).
//! Per iteration there are 2 posts and 4 successful polls (the model is synchronous, so no
//! empty polls). The platform's BlueFlame copy is not included.

#[path = "../tests/common/mod.rs"]
mod common;

use common::*;
use mlx4::cq::CqHandle;
use mlx4::qp::{Ah, QpHandle};
use mlx4::Hca;
use sim::FabricConfig;
use verbs::*;

type H = Hca<SimPlatform>;

#[inline(never)]
fn measured_post_send(h: &mut H, qp: QpHandle, wr: &SendWr<'_, Ah>) -> Result<()> {
    h.post_send(qp, wr)
}

#[inline(never)]
fn measured_poll_cq(h: &mut H, cq: CqHandle, wc: &mut [WorkCompletion]) -> Result<usize> {
    h.poll_cq(cq, wc)
}

struct End {
    h: H,
    scq: CqHandle,
    rcq: CqHandle,
    qp: QpHandle,
    lid: u16,
    pd: mlx4::device::PdHandle,
    buf: u64,
    lkey: u32,
}

fn up(p: SimPlatform, t: QpType, iters: u32, max_inline: u32) -> End {
    let arena = p.arena.clone();
    let mut h = Hca::init(p, test_config()).expect("bring-up");
    let lid = h.wait_port_active(1, 5000).expect("active").lid;
    let pd = h.alloc_pd().unwrap();
    let scq = h.create_cq(16).unwrap();
    let rcq = h.create_cq(iters + 16).unwrap();
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: iters + 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: max_inline,
    };
    let qp = h
        .create_qp(&QpInitAttr {
            pd,
            send_cq: scq,
            recv_cq: rcq,
            qp_type: t,
            cap,
            sq_sig_all: false,
        })
        .unwrap();
    let buf = arena.alloc(1 << 16, 4096).unwrap();
    let mr = h
        .reg_mr(pd, buf, 1 << 16, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let lkey = h.mr_lkey(mr);
    End {
        h,
        scq,
        rcq,
        qp,
        lid,
        pd,
        buf,
        lkey,
    }
}

fn connect(a: &mut End, remote_qpn: u32, remote_lid: u16, t: QpType) {
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
    let _ = t;
}

fn main() {
    let mut args = std::env::args().skip(1);
    let t = match args.next().as_deref() {
        Some("uc") => QpType::Uc,
        _ => QpType::Ud,
    };
    let iters: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1000);
    // perftest's latency defaults: 188 B inline for UD, 236 B for UC.
    let default_inline = if t == QpType::Ud { 188 } else { 236 };
    let max_inline: u32 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default_inline);
    let (_m, mut ps) = machine(2, FabricConfig::default());
    let p1 = ps.remove(1);
    let p0 = ps.remove(0);
    let mut a = up(p0, t, iters, max_inline);
    let mut b = up(p1, t, iters, max_inline);
    let (qa, qb) = (a.h.qp_num(a.qp), b.h.qp_num(b.qp));
    let (la, lb) = (a.lid, b.lid);
    connect(&mut a, qb, lb, t);
    connect(&mut b, qa, la, t);
    let grh = if t == QpType::Ud { 40 } else { 0 };
    for e in [&mut a, &mut b] {
        let s = [Sge {
            addr: e.buf,
            length: 2 + grh,
            lkey: e.lkey,
        }];
        for i in 0..iters {
            e.h.post_recv(
                e.qp,
                &RecvWr {
                    wr_id: i as u64,
                    sg_list: &s,
                },
            )
            .unwrap();
        }
    }
    let ah_a =
        a.h.create_ah(
            a.pd,
            &AhAttr {
                dlid: lb,
                port: 1,
                ..AhAttr::default()
            },
        )
        .unwrap();
    let ah_b =
        b.h.create_ah(
            b.pd,
            &AhAttr {
                dlid: la,
                port: 1,
                ..AhAttr::default()
            },
        )
        .unwrap();
    let msg = [0x5Au8, 0xA5];
    let wr_a = SendWr {
        wr_id: 1,
        opcode: WrOpcode::Send,
        payload: Payload::Inline(&msg),
        flags: SendFlags::SIGNALED,
        ud: (t == QpType::Ud).then_some(UdDest {
            ah: ah_a,
            remote_qpn: qb,
            remote_qkey: 0x1111_1111,
        }),
    };
    let wr_b = SendWr {
        ud: (t == QpType::Ud).then_some(UdDest {
            ah: ah_b,
            remote_qpn: qa,
            remote_qkey: 0x1111_1111,
        }),
        ..wr_a
    };
    let mut wc = [WorkCompletion::default(); 1];
    let mut empty_polls = 0u64;
    let mut wait = |h: &mut H, cq: CqHandle, wc: &mut [WorkCompletion]| {
        loop {
            match measured_poll_cq(h, cq, wc) {
                Ok(1) => break,
                Ok(_) => empty_polls += 1,
                Err(e) => panic!("poll: {e}"),
            }
        }
        assert_eq!(wc[0].status, WcStatus::Success);
    };
    for _ in 0..iters {
        measured_post_send(&mut a.h, a.qp, &wr_a).unwrap();
        wait(&mut a.h, a.scq, &mut wc);
        wait(&mut b.h, b.rcq, &mut wc);
        measured_post_send(&mut b.h, b.qp, &wr_b).unwrap();
        wait(&mut b.h, b.scq, &mut wc);
        wait(&mut a.h, a.rcq, &mut wc);
    }
    println!("{t:?}: {iters} iterations, {empty_polls} empty polls");
}
