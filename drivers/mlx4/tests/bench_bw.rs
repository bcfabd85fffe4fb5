//! The bandwidth stream (`bench::bw`) over the real driver and two in-process model HCAs:
//! sender and receiver stepped alternately while the fabric's clock advances 1 µs per round,
//! the "TSC" being that clock at 1000 MHz. Every message is accounted for, with and without
//! packets dropped by the switch.

mod common;

use bench::bw::{
    BwParams, BwReceiver, BwSender, BwUnit, BwVerb, RecvSetup, RecvTally, StreamError, StreamState,
};
use common::*;
use mlx4::cq::CqHandle;
use mlx4::qp::{Ah, QpHandle};
use mlx4::Hca;
use sim::FabricConfig;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use verbs::*;

const QKEY: u32 = 0x1111_1111;
const BUF: u64 = 64 << 10;
const TX_DEPTH: u32 = 32;
/// Receives the receiver's QP can hold; tests keep `rx_depth` at or below it.
const RX_DEPTH: u32 = 1024;
/// Rounds (µs of model time) a test may take at most.
const ROUNDS: u64 = 200_000;

struct End {
    h: Hca<SimPlatform>,
    p: SimPlatform,
    pd: mlx4::device::PdHandle,
    scq: CqHandle,
    rcq: CqHandle,
    qp: QpHandle,
    lid: u16,
    buf: u64,
    mr: mlx4::device::MrHandle,
}

fn end(p: SimPlatform, t: QpType) -> End {
    let probe = p.clone_handle();
    let mut h = Hca::init(p, test_config()).expect("bring-up");
    let lid = h.wait_port_active(1, 5000).expect("port active").lid;
    let pd = h.alloc_pd().unwrap();
    let scq = h.create_cq(TX_DEPTH).unwrap();
    let rcq = h.create_cq(RX_DEPTH).unwrap();
    let qp = h
        .create_qp(&QpInitAttr {
            pd,
            send_cq: scq,
            recv_cq: rcq,
            qp_type: t,
            cap: QpCap {
                max_send_wr: TX_DEPTH,
                max_recv_wr: RX_DEPTH,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 188,
            },
            sq_sig_all: false,
        })
        .unwrap();
    let buf = probe.arena.alloc(BUF as usize, 4096).unwrap();
    let mr = h
        .reg_mr(
            pd,
            buf,
            BUF,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
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

fn connect(a: &mut End, t: QpType, remote_qpn: u32, remote_lid: u16) {
    let mut init = QpAttr::new(QpState::Init);
    init.port_num = 1;
    init.qkey = QKEY;
    init.access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    a.h.modify_qp(a.qp, &init).unwrap();
    let mut rtr = QpAttr::new(QpState::Rtr);
    rtr.port_num = 1;
    rtr.path_mtu = Mtu::Mtu2048;
    rtr.dest_qp_num = remote_qpn;
    rtr.ah = AhAttr {
        dlid: remote_lid,
        port: 1,
        ..AhAttr::default()
    };
    if t == QpType::Rc {
        rtr.min_rnr_timer = 12;
    }
    a.h.modify_qp(a.qp, &rtr).unwrap();
    let mut rts = QpAttr::new(QpState::Rts);
    rts.port_num = 1;
    a.h.modify_qp(a.qp, &rts).unwrap();
}

/// Two connected (or UD) ends; `drop_every` > 0 makes the switch drop every such data packet
/// and count them in the returned counter.
fn pair(t: QpType, drop_every: u64) -> (sim::inproc::SharedMachine, End, End, Arc<AtomicU64>) {
    let (m, mut ps) = machine(2, FabricConfig::default());
    let p1 = ps.remove(1);
    let p0 = ps.remove(0);
    let mut a = end(p0, t);
    let mut b = end(p1, t);
    let (qa, qb) = (a.h.qp_num(a.qp), b.h.qp_num(b.qp));
    let (la, lb) = (a.lid, b.lid);
    connect(&mut a, t, qb, lb);
    connect(&mut b, t, qa, la);
    let dropped = Arc::new(AtomicU64::new(0));
    if drop_every > 0 {
        let seen = AtomicU64::new(0);
        let d = dropped.clone();
        m.borrow_mut()
            .fabric()
            .set_drop_rule(Some(Box::new(move |_p: &_| {
                let k = seen.fetch_add(1, Ordering::Relaxed) + 1;
                let drop = k.is_multiple_of(drop_every);
                if drop {
                    d.fetch_add(1, Ordering::Relaxed);
                }
                drop
            })));
    }
    (m, a, b, dropped)
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
        remote_qkey: QKEY,
    }
}

struct Outcome {
    tally: Option<RecvTally>,
    /// (posted, completed, signaled completions seen)
    counts: (u64, u64, u64),
    doorbells: u64,
    report: bench::bw::BwReport,
    elapsed_us: u64,
}

/// Runs one size from `a` to `b` with `p` (unresolved; `q_given` says whether `-Q` was).
fn run(t: QpType, write: bool, p: BwParams, q_given: bool, drop_every: u64) -> Outcome {
    run_rx(t, write, p, q_given, drop_every, RX_DEPTH, true)
}

/// [`run`] with the receiver keeping `rx_depth` receives posted; `exact_loss` checks that
/// the messages lost are exactly the packets the switch dropped (one packet per message).
fn run_rx(
    t: QpType,
    write: bool,
    p: BwParams,
    q_given: bool,
    drop_every: u64,
    rx_depth: u32,
    exact_loss: bool,
) -> Outcome {
    let p = p.resolve(q_given).expect("valid parameters");
    let (_m, mut a, mut b, dropped) = pair(t, drop_every);
    let ud = (t == QpType::Ud).then(|| dest(&mut a, &b));
    let grh = if t == QpType::Ud { 40 } else { 0 };
    let verb = if write {
        BwVerb::Write {
            remote_addr: b.buf,
            rkey: b.h.mr_rkey(b.mr),
        }
    } else {
        BwVerb::Send
    };
    let sge = Sge {
        addr: a.buf,
        length: 0,
        lkey: a.h.mr_lkey(a.mr),
    };
    let now = |e: &End| mlx4::Platform::now_ns(&e.p);
    let mut rx = (!write).then(|| {
        let rsge = Sge {
            addr: b.buf,
            length: p.size + grh,
            lkey: b.h.mr_lkey(b.mr),
        };
        BwReceiver::new(
            &mut b.h,
            b.qp,
            b.rcq,
            RecvSetup {
                sge: rsge,
                grh,
                rx_depth,
                iterations: p.iterations,
                drain_cycles: 100_000,
                duration: None,
            },
        )
        .unwrap()
    });
    let mut tx = BwSender::<Hca<SimPlatform>>::new(p, verb, a.qp, a.scq, ud, sge, 1_000_000);
    let start = now(&a);
    let (mut tx_done, mut rx_done) = (false, rx.is_none());
    for _ in 0..ROUNDS {
        if !tx_done {
            let pa = a.p.clone_handle();
            let mut clock = || mlx4::Platform::now_ns(&pa);
            tx_done = tx.step(&mut a.h, &mut clock).expect("sender") == StreamState::Done;
            if tx_done {
                if let Some(r) = rx.as_mut() {
                    r.sender_done(now(&b));
                }
            }
        }
        if let Some(r) = rx.as_mut() {
            if !rx_done {
                let t1 = now(&b);
                rx_done = r.step(&mut b.h, t1).expect("receiver") == StreamState::Done;
            }
        }
        if tx_done && rx_done {
            break;
        }
        mlx4::Platform::delay_us(&a.p, 1);
    }
    assert!(
        tx_done && rx_done,
        "the stream did not finish in {ROUNDS} µs"
    );
    let elapsed_us = (now(&a) - start) / 1000;
    let report = tx.report(1000.0, BwUnit::MBytes).expect("report");
    let tally = rx.map(|r| r.tally());
    if let Some(tl) = tally.filter(|_| exact_loss) {
        assert_eq!(tl.lost(), dropped.load(Ordering::Relaxed), "{tl:?}");
    }
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
    Outcome {
        tally,
        counts: tx.counts(),
        doorbells: tx.doorbells(),
        report,
        elapsed_us,
    }
}

fn params(size: u32, n: u64, l: u32, q: u32) -> BwParams {
    BwParams {
        size,
        iterations: n,
        tx_depth: TX_DEPTH,
        post_list: l,
        cq_mod: q,
        inline_size: 0,
        no_peak: false,
        duration: None,
        bidirectional: false,
    }
}

fn lossless_send(t: QpType) {
    let n = 500;
    let o = run(t, false, params(1024, n, 1, 8), true, 0);
    let tl = o.tally.unwrap();
    assert_eq!((tl.received, tl.lost(), tl.bytes), (n, 0, n * 1024));
    // Every message received had a receive posted; no receive more than messages.
    assert_eq!(tl.posted, n);
    assert_eq!(o.counts, (n, n, n.div_ceil(8)));
    assert_eq!(o.doorbells, n);
    check_report(&o, 1024, n);
}

/// The figures are consistent with the run: the average covers at most the whole run, the
/// rate is messages over the measured cycles, the peak is not below the average.
fn check_report(o: &Outcome, size: u64, n: u64) {
    let r = &o.report;
    assert_eq!((r.size, r.iterations), (size, n));
    assert!(r.total_cycles > 0 && r.total_cycles <= o.elapsed_us * 1000 + 1000);
    let rate = n as f64 * 1e9 / (r.total_cycles as f64 * 1e6);
    assert!((r.msg_rate_mpps - rate).abs() < 1e-9);
    assert!((r.bw_avg - rate * 1e6 * size as f64 / 1_048_576.0).abs() < 1e-6);
    assert!(r.bw_peak >= r.bw_avg, "{r:?}");
}

#[test]
fn send_bw_rc_accounts_every_message() {
    lossless_send(QpType::Rc);
}

#[test]
fn send_bw_uc_accounts_every_message() {
    lossless_send(QpType::Uc);
}

#[test]
fn send_bw_ud_accounts_every_message() {
    lossless_send(QpType::Ud);
}

#[test]
fn send_bw_ud_counts_dropped_messages() {
    // One packet per message: every 7th dropped is exactly one message lost.
    let n = 700;
    let o = run(QpType::Ud, false, params(2048, n, 1, 16), true, 7);
    let tl = o.tally.unwrap();
    assert_eq!(tl.lost(), n / 7);
    assert_eq!(tl.bytes, tl.received * 2048);
    // The sender's view is complete: UD completes locally whether delivered or not.
    assert_eq!(o.counts.1, n);
}

#[test]
fn send_bw_uc_counts_dropped_messages() {
    let n = 350;
    let o = run(QpType::Uc, false, params(512, n, 1, 4), true, 5);
    let tl = o.tally.unwrap();
    assert_eq!(tl.lost(), n / 5);
    assert_eq!(tl.received + tl.lost(), n);
    assert_eq!(tl.bytes, tl.received * 512);
}

#[test]
fn ud_receiver_overrun_is_counted_as_loss() {
    // 16 receives posted against a sender 32 deep: when the receive queue runs dry the
    // model drops the datagram, as the hardware does; the tally still adds up.
    let n = 500;
    let o = run_rx(QpType::Ud, false, params(256, n, 1, 1), true, 0, 16, false);
    let tl = o.tally.unwrap();
    assert_eq!(tl.received + tl.lost(), n);
    assert_eq!(tl.bytes, tl.received * 256);
    assert!(
        tl.lost() > 0 && tl.received >= 16 && tl.posted <= n,
        "{tl:?}"
    );
}

#[test]
fn write_bw_rc_and_uc_complete_every_message() {
    for t in [QpType::Rc, QpType::Uc] {
        let n = 400;
        let o = run(t, true, params(4096, n, 1, 16), true, 0);
        assert!(o.tally.is_none());
        assert_eq!(o.counts, (n, n, n / 16), "{t:?}");
        check_report(&o, 4096, n);
    }
}

#[test]
fn post_list_sets_moderation_and_signals_one_per_list() {
    let n = 256;
    // -l 16 without -Q: moderation becomes 16, one signaled completion per list.
    let o = run(QpType::Rc, true, params(64, n, 16, 100), false, 0);
    assert_eq!(o.counts, (n, n, n / 16));
    assert_eq!(o.doorbells, n);
    // -l 16 -Q 4: four completions per list.
    let o = run(QpType::Rc, true, params(64, n, 16, 4), true, 0);
    assert_eq!(o.counts, (n, n, n / 4));
}

#[test]
fn inline_messages_and_no_peak() {
    let mut p = params(64, 200, 1, 10);
    p.inline_size = 188;
    p.no_peak = true;
    let o = run(QpType::Ud, false, p, true, 0);
    let tl = o.tally.unwrap();
    assert_eq!((tl.received, tl.bytes), (200, 200 * 64));
    assert_eq!(o.report.bw_peak, 0.0);
    assert!(o.report.bw_avg > 0.0);
}

#[test]
fn parameter_rules_are_perftests() {
    use bench::bw::BwParamError as E;
    let p = params(64, 96, 8, 3);
    assert_eq!(p.resolve(true), Err(E::PostListNotMultipleOfCqMod));
    assert_eq!(
        params(64, 100, 16, 100).resolve(false),
        Err(E::IterationsNotMultipleOfPostList)
    );
    assert_eq!(
        params(64, 96, 64, 1).resolve(true),
        Err(E::PostListOverTxDepth)
    );
    // -Q is clamped to the tx depth.
    assert_eq!(
        params(64, 100, 1, 100).resolve(true).unwrap().cq_mod,
        TX_DEPTH
    );
    assert_eq!(params(64, 0, 1, 1).resolve(true), Err(E::ZeroIterations));
}

#[test]
fn a_dead_peer_stalls_the_sender_with_an_error_not_a_hang() {
    // RC towards a QP that does not answer: the sender's retries run out or the stall bound
    // ends the run; either way it returns an error within the bound.
    let (_m, mut a, b, _d) = pair(QpType::Rc, 1);
    let p = params(1024, 64, 1, 8).resolve(true).unwrap();
    let sge = Sge {
        addr: a.buf,
        length: 0,
        lkey: a.h.mr_lkey(a.mr),
    };
    let mut tx = BwSender::<Hca<SimPlatform>>::new(p, BwVerb::Send, a.qp, a.scq, None, sge, 50_000);
    let _ = b;
    let mut err = None;
    for _ in 0..ROUNDS {
        let pa = a.p.clone_handle();
        match tx.step(&mut a.h, &mut || mlx4::Platform::now_ns(&pa)) {
            Ok(StreamState::Done) => panic!("a stream with every packet dropped finished"),
            Ok(StreamState::Running) => {}
            Err(e) => {
                err = Some(e);
                break;
            }
        }
        mlx4::Platform::delay_us(&a.p, 1);
    }
    let e = err.expect("no error within the bound");
    assert!(
        matches!(
            e,
            StreamError::Stalled { .. } | StreamError::Completion { .. }
        ),
        "{e:?}"
    );
}
