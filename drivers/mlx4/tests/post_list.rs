//! List posts (`verbs::Device::post_send_list`) on two HCAs of the model: one send doorbell
//! per list, every WQE executed and completed in order with its payload, BlueFlame only for a
//! list of one, a full queue and a refused work request in the middle of a list (the ones
//! before it posted, its index reported), the ring's wrap, and RDMA WRITE lists.

mod common;

use common::*;
use mlx4::CqHandle;
use mlx4::Hca;
use mlx4::{Ah, QpHandle};
use mlx4::{MrHandle, PdHandle};
use sim::FabricConfig;
use verbs::*;

/// Bytes of each node's buffer: messages are sent from the first half, received into the
/// second.
const BUF: u64 = 64 << 10;
const RECV: u64 = BUF / 2;
/// Bytes per message.
const MSG: u32 = 64;
/// Receive slot stride (room for UD's 40-byte GRH slot ahead of the payload).
const RSTRIDE: u64 = 128;

struct Node {
    h: Hca<SimPlatform>,
    p: SimPlatform,
    pd: PdHandle,
    scq: CqHandle,
    rcq: CqHandle,
    qp: QpHandle,
    lid: u16,
    buf: u64,
    mr: MrHandle,
    /// Receives posted so far (ids 0, 1, 2 ...; slot `id % 256`).
    recvs: u64,
}

impl Node {
    fn up(p: SimPlatform, t: QpType, max_send_wr: u32) -> Node {
        let probe = p.clone_handle();
        let mut h = Hca::init(p, test_config()).expect("bring-up");
        let lid = h.wait_port_active(1, 5000).expect("port active").lid;
        let pd = h.alloc_pd().unwrap();
        let scq = h.create_cq(256).unwrap();
        let rcq = h.create_cq(256).unwrap();
        let qp = h
            .create_qp(&QpInitAttr {
                pd,
                send_cq: scq,
                recv_cq: rcq,
                qp_type: t,
                cap: QpCap {
                    max_send_wr,
                    max_recv_wr: 256,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            })
            .unwrap();
        let buf = probe.arena.alloc(BUF as usize, 4096).unwrap();
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mr = h.reg_mr(pd, buf, BUF, access).unwrap();
        Node {
            h,
            p: probe,
            pd,
            scq,
            rcq,
            qp,
            lid,
            buf,
            mr,
            recvs: 0,
        }
    }

    fn lkey(&self) -> u32 {
        self.h.mr_lkey(self.mr)
    }

    fn counters(&self) -> sim::Counters {
        self.p.m.borrow().fabric_ref().counters(self.p.hca)
    }

    fn read(&self, at: u64, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        self.p.arena.read(at, &mut v).unwrap();
        v
    }

    /// Post `n` receives of one message (plus the GRH slot) each.
    fn post_recvs(&mut self, n: u64) {
        for _ in 0..n {
            let s = [Sge {
                addr: self.buf + RECV + (self.recvs % 256) * RSTRIDE,
                length: RSTRIDE as u32,
                lkey: self.lkey(),
            }];
            let wr = RecvWr {
                wr_id: self.recvs,
                sg_list: &s,
            };
            self.h.post_recv(self.qp, &wr).unwrap();
            self.recvs += 1;
        }
    }

    /// The next completion of `cq`, bounded at 200 ms of model time.
    fn poll(&mut self, cq: CqHandle) -> WorkCompletion {
        let mut wc = [WorkCompletion::default(); 1];
        for _ in 0..200_000 {
            if self.h.poll_cq(cq, &mut wc).expect("poll_cq") == 1 {
                return wc[0];
            }
            mlx4::Platform::delay_us(&self.p, 1);
        }
        panic!("no completion on {cq:?}");
    }

    /// Polls `cq` for 1 ms of model time and asserts it stays empty.
    fn assert_empty(&mut self, cq: CqHandle, why: &str) {
        let mut wc = [WorkCompletion::default(); 1];
        for _ in 0..100 {
            assert_eq!(self.h.poll_cq(cq, &mut wc).unwrap(), 0, "{why}");
            mlx4::Platform::delay_us(&self.p, 10);
        }
    }
}

fn connect(a: &mut Node, b: &Node, t: QpType) {
    let mut init = QpAttr::new(QpState::Init);
    init.qkey = 0x1111_1111;
    init.access = AccessFlags::REMOTE_WRITE;
    a.h.modify_qp(a.qp, &init).unwrap();
    let mut rtr = QpAttr::new(QpState::Rtr);
    if t != QpType::Ud {
        rtr.path_mtu = Mtu::Mtu2048;
        rtr.dest_qp_num = b.h.qp_num(b.qp);
        rtr.rq_psn = 0x42;
        rtr.ah = AhAttr {
            dlid: b.lid,
            port: 1,
            ..AhAttr::default()
        };
        rtr.min_rnr_timer = 12;
    }
    a.h.modify_qp(a.qp, &rtr).unwrap();
    let mut rts = QpAttr::new(QpState::Rts);
    rts.sq_psn = 0x42;
    a.h.modify_qp(a.qp, &rts).unwrap();
}

/// Two connected nodes with QPs of `t` (`max_send_wr` sends), `a` sending to `b`, and the UD
/// destination of `b` from `a` (None for RC/UC).
fn pair(
    t: QpType,
    max_send_wr: u32,
) -> (sim::inproc::SharedMachine, Node, Node, Option<UdDest<Ah>>) {
    let (m, mut ps) = machine(2, FabricConfig::default());
    let p1 = ps.remove(1);
    let p0 = ps.remove(0);
    let mut a = Node::up(p0, t, max_send_wr);
    let mut b = Node::up(p1, t, max_send_wr);
    connect(&mut a, &b, t);
    connect(&mut b, &a, t);
    for i in 0..BUF / 2 {
        // Message k is at k * MSG: each byte tells its message and position apart.
        let v = (i as u8).wrapping_mul(7) ^ ((i / u64::from(MSG)) as u8).wrapping_mul(13);
        a.p.arena.write(a.buf + i, &[v]).unwrap();
    }
    let dest = (t == QpType::Ud).then(|| {
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
    });
    (m, a, b, dest)
}

/// Message `k` of `a`'s send half as one gather entry.
fn sge(a: &Node, k: u64) -> Sge {
    Sge {
        addr: a.buf + (k % 256) * u64::from(MSG),
        length: MSG,
        lkey: a.lkey(),
    }
}

/// The SEND of message `k` (wr_id `k`), signaled if `signaled`.
fn send_wr<'a>(sges: &'a [Sge], k: u64, signaled: bool, ud: Option<UdDest<Ah>>) -> SendWr<'a, Ah> {
    SendWr {
        wr_id: k,
        opcode: WrOpcode::Send,
        payload: Payload::Sges(sges),
        flags: if signaled {
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        },
        ud,
    }
}

/// `b` received messages `first..first + n` of `a`, in order, each intact.
fn check_received(a: &Node, b: &mut Node, t: QpType, first: u64, n: u64) {
    let grh = if t == QpType::Ud { 40 } else { 0 };
    for k in first..first + n {
        let rcq = b.rcq;
        let c = b.poll(rcq);
        assert_eq!(c.status, WcStatus::Success, "receive of message {k}: {c:?}");
        assert_eq!(c.byte_len, MSG + grh, "message {k}");
        let at = b.buf + RECV + (c.wr_id % 256) * RSTRIDE + u64::from(grh);
        let sent = a.read(a.buf + (k % 256) * u64::from(MSG), MSG as usize);
        assert_eq!(b.read(at, MSG as usize), sent, "payload of message {k}");
    }
}

#[test]
fn a_list_rings_one_doorbell_and_every_message_arrives_in_order() {
    for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
        let (_m, mut a, mut b, dest) = pair(t, 64);
        b.post_recvs(32);
        let sges: Vec<[Sge; 1]> = (0..32).map(|k| [sge(&a, k)]).collect();
        let before = a.counters();
        // 32 messages, the last one signaled (perftest's -l 32 -Q 32).
        let list = (0..32u64).map(|k| send_wr(&sges[k as usize], k, k == 31, dest));
        assert_eq!(a.h.post_send_list(a.qp, list), Ok(32), "{t:?}");
        let after = a.counters();
        assert_eq!(
            after.mmio_writes - before.mmio_writes,
            1,
            "{t:?}: one doorbell for the list"
        );
        assert_eq!(
            after.blueflame_bytes, before.blueflame_bytes,
            "{t:?}: no BlueFlame"
        );
        check_received(&a, &mut b, t, 0, 32);
        let scq = a.scq;
        let c = a.poll(scq);
        assert_eq!(
            (c.status, c.wr_id, c.opcode),
            (WcStatus::Success, 31, WcOpcode::Send),
            "{t:?}: the one signaled completion is the last message's"
        );
        a.assert_empty(scq, "one completion per list");
        assert_no_violations(&a.p);
        assert_no_violations(&b.p);
    }
}

#[test]
fn every_signaled_wqe_of_a_list_completes_with_its_wr_id() {
    let (_m, mut a, mut b, dest) = pair(QpType::Rc, 64);
    b.post_recvs(16);
    let sges: Vec<[Sge; 1]> = (0..16).map(|k| [sge(&a, k)]).collect();
    let list: Vec<_> = (0..16u64)
        .map(|k| send_wr(&sges[k as usize], 100 + k, true, dest))
        .collect();
    // A slice's work requests, as a caller holding them would pass them.
    assert_eq!(a.h.post_send_list(a.qp, list.iter().copied()), Ok(16));
    for k in 0..16 {
        let scq = a.scq;
        let c = a.poll(scq);
        assert_eq!((c.status, c.wr_id), (WcStatus::Success, 100 + k));
    }
    for _ in 0..16 {
        let rcq = b.rcq;
        assert_eq!(b.poll(rcq).status, WcStatus::Success);
    }
    assert_no_violations(&a.p);
}

#[test]
fn a_list_of_one_is_a_post_send_and_an_empty_list_posts_nothing() {
    let (_m, mut a, mut b, dest) = pair(QpType::Uc, 64);
    b.post_recvs(2);
    // An empty list: nothing written, nothing rung.
    let before = a.counters();
    assert_eq!(
        a.h.post_send_list(a.qp, core::iter::empty::<SendWr<'_, Ah>>()),
        Ok(0)
    );
    assert_eq!(a.counters(), before);
    // One small inline SEND: BlueFlame, as post_send (rdma-core: only a list of one).
    let msg = [0x5Au8, 0xA5];
    let wr = SendWr {
        wr_id: 9,
        opcode: WrOpcode::Send,
        payload: Payload::Inline(&msg),
        flags: SendFlags::SIGNALED,
        ud: dest,
    };
    assert_eq!(a.h.post_send_list(a.qp, [wr]), Ok(1));
    let after = a.counters();
    assert_eq!(
        after.blueflame_bytes - before.blueflame_bytes,
        64,
        "BlueFlame"
    );
    let scq = a.scq;
    assert_eq!(a.poll(scq).wr_id, 9);
    let rcq = b.rcq;
    let c = b.poll(rcq);
    assert_eq!((c.status, c.byte_len), (WcStatus::Success, 2));
    // Two of them: the doorbell, no BlueFlame (both WQEs fetched from the SQ).
    b.post_recvs(2);
    let before = a.counters();
    let two = [wr, SendWr { wr_id: 10, ..wr }];
    assert_eq!(a.h.post_send_list(a.qp, two), Ok(2));
    let after = a.counters();
    assert_eq!(after.blueflame_bytes, before.blueflame_bytes);
    assert_eq!(after.mmio_writes - before.mmio_writes, 1);
    assert_eq!(a.poll(scq).wr_id, 9);
    assert_eq!(a.poll(scq).wr_id, 10);
    for _ in 0..2 {
        let c = b.poll(rcq);
        assert_eq!((c.status, c.byte_len), (WcStatus::Success, 2));
    }
    assert_no_violations(&a.p);
}

#[test]
fn a_full_queue_posts_what_fits_and_names_the_first_that_does_not() {
    for t in [QpType::Uc, QpType::Ud] {
        let (_m, mut a, mut b, dest) = pair(t, 16);
        let max = a.h.qp_cap(a.qp).max_send_wr as u64;
        let n = max + 3;
        b.post_recvs(n);
        let sges: Vec<[Sge; 1]> = (0..n).map(|k| [sge(&a, k)]).collect();
        let before = a.counters();
        let list = (0..n).map(|k| send_wr(&sges[k as usize], k, k + 1 == max, dest));
        let r = a.h.post_send_list(a.qp, list);
        assert_eq!(
            r,
            Err(BadWr {
                index: max as usize,
                error: Error::QueueFull
            }),
            "{t:?}"
        );
        assert_eq!(a.counters().mmio_writes - before.mmio_writes, 1, "{t:?}");
        check_received(&a, &mut b, t, 0, max);
        let scq = a.scq;
        assert_eq!(a.poll(scq).wr_id, max - 1, "{t:?}");
        let rcq = b.rcq;
        b.assert_empty(rcq, "nothing beyond the full queue was sent");
        // The queue has room again: the rest goes as a list of its own.
        let rest = (max..n).map(|k| send_wr(&sges[k as usize], k, k + 1 == n, dest));
        assert_eq!(a.h.post_send_list(a.qp, rest), Ok(3), "{t:?}");
        check_received(&a, &mut b, t, max, 3);
        assert_eq!(a.poll(scq).wr_id, n - 1);
        assert_no_violations(&a.p);
        assert_no_violations(&b.p);
    }
}

#[test]
fn a_bad_work_request_mid_list_posts_those_before_it() {
    let (_m, mut a, mut b, dest) = pair(QpType::Rc, 64);
    b.post_recvs(8);
    let sges: Vec<[Sge; 1]> = (0..8).map(|k| [sge(&a, k)]).collect();
    let two = [sge(&a, 3), sge(&a, 4)];
    let before = a.counters();
    // Message 3 has two gather entries; the QP was made for one.
    let list = (0..8u64).map(|k| {
        let s: &[Sge] = if k == 3 { &two } else { &sges[k as usize] };
        send_wr(s, k, k == 2, dest)
    });
    let r = a.h.post_send_list(a.qp, list);
    assert_eq!(
        r,
        Err(BadWr {
            index: 3,
            error: Error::TooManySge { n: 2, max: 1 }
        })
    );
    assert_eq!(
        Error::from(r.unwrap_err()),
        Error::TooManySge { n: 2, max: 1 }
    );
    assert_eq!(a.counters().mmio_writes - before.mmio_writes, 1);
    check_received(&a, &mut b, QpType::Rc, 0, 3);
    let scq = a.scq;
    assert_eq!(a.poll(scq).wr_id, 2);
    let rcq = b.rcq;
    b.assert_empty(rcq, "nothing after the bad work request");
    // The SQ goes on where the list stopped.
    let list = (3..8u64).map(|k| send_wr(&sges[k as usize], k, k == 7, dest));
    assert_eq!(a.h.post_send_list(a.qp, list), Ok(5));
    check_received(&a, &mut b, QpType::Rc, 3, 5);
    assert_eq!(a.poll(scq).wr_id, 7);
    // A bad first entry: nothing posted, nothing rung.
    let before = a.counters();
    let bad = [
        send_wr(&two, 0, true, dest),
        send_wr(&sges[0], 1, true, dest),
    ];
    let r = a.h.post_send_list(a.qp, bad);
    assert_eq!(r.map_err(|b| b.index), Err(0));
    assert_eq!(a.counters(), before);
    assert_no_violations(&a.p);
}

#[test]
fn lists_wrap_the_ring_many_times() {
    // 9 messages per list on an SQ of a few dozen slots: the owner bit flips every pass
    // and lists straddle the wrap.
    let (_m, mut a, mut b, dest) = pair(QpType::Uc, 24);
    let sges: Vec<[Sge; 1]> = (0..256).map(|k| [sge(&a, k)]).collect();
    let mut next = 0u64;
    for _ in 0..30 {
        b.post_recvs(9);
        let list =
            (next..next + 9).map(|k| send_wr(&sges[(k % 256) as usize], k, k % 9 == 8, dest));
        assert_eq!(a.h.post_send_list(a.qp, list), Ok(9));
        check_received(&a, &mut b, QpType::Uc, next, 9);
        let scq = a.scq;
        assert_eq!(a.poll(scq).wr_id, next + 8);
        next += 9;
    }
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
}

#[test]
fn mixed_lists_take_the_generic_writer_for_the_others() {
    let (_m, mut a, mut b, dest) = pair(QpType::Rc, 64);
    b.post_recvs(4);
    let s0 = [sge(&a, 0)];
    let msg = *b"inline in a list";
    let empty: [Sge; 0] = [];
    let list = [
        send_wr(&s0, 0, false, dest),
        SendWr {
            wr_id: 1,
            opcode: WrOpcode::Send,
            payload: Payload::Inline(&msg),
            flags: SendFlags::empty(),
            ud: dest,
        },
        send_wr(&empty, 2, false, dest),
        SendWr {
            opcode: WrOpcode::SendWithImm { imm: 0x1234_5678 },
            ..send_wr(&s0, 3, true, dest)
        },
    ];
    let before = a.counters();
    assert_eq!(a.h.post_send_list(a.qp, list), Ok(4));
    let after = a.counters();
    assert_eq!(after.mmio_writes - before.mmio_writes, 1);
    assert_eq!(after.blueflame_bytes, before.blueflame_bytes);
    let rcq = b.rcq;
    let want = [MSG, msg.len() as u32, 0, MSG];
    for (k, len) in want.into_iter().enumerate() {
        let c = b.poll(rcq);
        assert_eq!(
            (c.status, c.byte_len),
            (WcStatus::Success, len),
            "message {k}"
        );
        if k == 1 {
            let at = b.buf + RECV + (c.wr_id % 256) * RSTRIDE;
            assert_eq!(b.read(at, msg.len()), msg);
        }
    }
    let scq = a.scq;
    assert_eq!(a.poll(scq).wr_id, 3);
    assert_no_violations(&a.p);
}

#[test]
fn rdma_write_lists_land_in_the_remote_buffer() {
    let (_m, mut a, b, dest) = pair(QpType::Rc, 64);
    let rkey = b.h.mr_rkey(b.mr);
    let sges: Vec<[Sge; 1]> = (0..16).map(|k| [sge(&a, k)]).collect();
    let list = (0..16u64).map(|k| SendWr {
        opcode: WrOpcode::RdmaWrite {
            remote_addr: b.buf + RECV + k * u64::from(MSG),
            rkey,
        },
        ..send_wr(&sges[k as usize], k, k == 15, dest)
    });
    assert_eq!(a.h.post_send_list(a.qp, list), Ok(16));
    let scq = a.scq;
    let c = a.poll(scq);
    assert_eq!(
        (c.status, c.wr_id, c.opcode),
        (WcStatus::Success, 15, WcOpcode::RdmaWrite)
    );
    let n = 16 * MSG as usize;
    assert_eq!(b.read(b.buf + RECV, n), a.read(a.buf, n));
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
}

#[test]
fn a_list_on_a_qp_not_ready_to_send_is_refused_at_its_first_entry() {
    let (m, mut ps) = machine(2, FabricConfig::default());
    let _keep = (m, ps.remove(1));
    let mut a = Node::up(ps.remove(0), QpType::Uc, 16);
    let sges = [sge(&a, 0)];
    let before = a.counters();
    let list = [send_wr(&sges, 0, true, None), send_wr(&sges, 1, true, None)];
    let r = a.h.post_send_list(a.qp, list);
    assert_eq!(
        r,
        Err(BadWr {
            index: 0,
            error: Error::WrongState {
                state: QpState::Reset
            }
        })
    );
    assert_eq!(a.counters(), before, "nothing rung");
    // A stale handle too.
    let stale = {
        let q = a.qp;
        a.h.destroy_qp(q).unwrap();
        q
    };
    let r = a.h.post_send_list(stale, list);
    assert_eq!(r.map_err(|b| b.error), Err(Error::InvalidHandle));
}

#[test]
fn a_ud_request_without_destination_mid_list_is_named() {
    let (_m, mut a, mut b, dest) = pair(QpType::Ud, 64);
    b.post_recvs(6);
    let sges: Vec<[Sge; 1]> = (0..6).map(|k| [sge(&a, k)]).collect();
    let msg = *b"inline, UD";
    // 0, 1: gathered; 2: inline (generic writer, in the same list); 3: no destination.
    let list = (0..6u64).map(|k| match k {
        2 => SendWr {
            wr_id: 2,
            opcode: WrOpcode::Send,
            payload: Payload::Inline(&msg),
            flags: SendFlags::SIGNALED,
            ud: dest,
        },
        3 => send_wr(&sges[3], 3, true, None),
        _ => send_wr(&sges[k as usize], k, false, dest),
    });
    let before = a.counters();
    let r = a.h.post_send_list(a.qp, list);
    assert_eq!(r.map_err(|b| b.index), Err(3));
    assert!(matches!(
        r,
        Err(BadWr {
            error: Error::InvalidArgument(_),
            ..
        })
    ));
    let after = a.counters();
    assert_eq!(after.mmio_writes - before.mmio_writes, 1);
    assert_eq!(after.blueflame_bytes, before.blueflame_bytes);
    check_received(&a, &mut b, QpType::Ud, 0, 2);
    let rcq = b.rcq;
    let c = b.poll(rcq);
    assert_eq!(
        (c.status, c.byte_len),
        (WcStatus::Success, 40 + msg.len() as u32)
    );
    let at = b.buf + RECV + (c.wr_id % 256) * RSTRIDE + 40;
    assert_eq!(b.read(at, msg.len()), msg);
    let scq = a.scq;
    assert_eq!(a.poll(scq).wr_id, 2);
    b.assert_empty(rcq, "nothing from the refused request on");
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
}
