//! The bandwidth stream (`bench::bw`) over the real driver and two in-process model HCAs:
//! sender and receiver stepped alternately while the fabric's clock advances 1 µs per round,
//! the "TSC" being that clock at 1000 MHz. Every message is accounted for, with and without
//! packets dropped by the switch; READ data and atomic results are checked as each message
//! retires; duration mode's sample is counted by an observer and compared; bidirectional runs
//! count both directions.

mod common;

use bench::bw::{
    atomic_expected, atomic_slot, bidir_sum, bw_sizes, resolve_out_reads, write_bw_header,
    write_bw_row, BwDuplexSend, BwDuration, BwParams, BwReceiver, BwReport, BwSender, BwUnit,
    BwVerb, Phase, RecvSetup, RecvTally, StreamError, StreamState, ATOMIC_REMOTE_BYTES,
    ATOMIC_WORDS, DEFAULT_BW_OUT_READS,
};
use bench::config::{AtomicOp, Transport};
use common::*;
use mlx4::CqHandle;
use mlx4::Hca;
use mlx4::{Ah, QpHandle};
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
    pd: mlx4::PdHandle,
    scq: CqHandle,
    rcq: CqHandle,
    qp: QpHandle,
    lid: u16,
    buf: u64,
    mr: mlx4::MrHandle,
}

fn end(p: SimPlatform, t: QpType, buf_bytes: u64) -> End {
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
    let buf = probe.arena.alloc(buf_bytes as usize, 4096).unwrap();
    let mr = h.reg_mr(pd, buf, buf_bytes, ACCESS).unwrap();
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

/// Every access the bandwidth tests use (perftest registers its buffer the same way).
const ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

/// `out_reads`: perftest's `-o`, the READs/atomics each RC QP has in flight as requester
/// (`max_rd_atomic`) and accepts as responder (`max_dest_rd_atomic`).
fn connect(a: &mut End, t: QpType, remote_qpn: u32, remote_lid: u16, out_reads: u8) {
    let mut init = QpAttr::new(QpState::Init);
    init.port_num = 1;
    init.qkey = QKEY;
    init.access = if t == QpType::Uc {
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE
    } else {
        ACCESS
    };
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
        rtr.max_dest_rd_atomic = out_reads;
    }
    a.h.modify_qp(a.qp, &rtr).unwrap();
    let mut rts = QpAttr::new(QpState::Rts);
    rts.port_num = 1;
    if t == QpType::Rc {
        rts.max_rd_atomic = out_reads;
        rts.timeout = 14;
        rts.retry_cnt = 7;
        rts.rnr_retry = 7;
    }
    a.h.modify_qp(a.qp, &rts).unwrap();
}

/// Two connected (or UD) ends; `drop_every` > 0 makes the switch drop every such data packet
/// and count them in the returned counter.
fn pair(t: QpType, drop_every: u64) -> (sim::inproc::SharedMachine, End, End, Arc<AtomicU64>) {
    pair_with(t, drop_every, BUF, 1)
}

/// [`pair`] with `buf_bytes` of registered buffer per end and `out_reads` on RC.
fn pair_with(
    t: QpType,
    drop_every: u64,
    buf_bytes: u64,
    out_reads: u8,
) -> (sim::inproc::SharedMachine, End, End, Arc<AtomicU64>) {
    let (m, a, b) = pair_on(FabricConfig::default(), t, buf_bytes, out_reads);
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

/// Two connected ends on a fabric configured by `cfg`.
fn pair_on(
    cfg: FabricConfig,
    t: QpType,
    buf_bytes: u64,
    out_reads: u8,
) -> (sim::inproc::SharedMachine, End, End) {
    let (m, mut ps) = machine(2, cfg);
    let p1 = ps.remove(1);
    let p0 = ps.remove(0);
    let mut a = end(p0, t, buf_bytes);
    let mut b = end(p1, t, buf_bytes);
    let (qa, qb) = (a.h.qp_num(a.qp), b.h.qp_num(b.qp));
    let (la, lb) = (a.lid, b.lid);
    connect(&mut a, t, qb, lb, out_reads);
    connect(&mut b, t, qa, la, out_reads);
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
    /// The receiver's own row, and the first and last moments an observer saw messages arrive.
    rx_report: Option<BwReport>,
    rx_window: (u64, u64),
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
    let mut rx_window = (0, 0);
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
                let r0 = r.tally().received;
                rx_done = r.step(&mut b.h, t1).expect("receiver") == StreamState::Done;
                if r.tally().received > r0 {
                    if rx_window.0 == 0 {
                        rx_window.0 = t1;
                    }
                    rx_window.1 = t1;
                }
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
    let tally = rx.as_ref().map(|r| r.tally());
    let rx_report = rx
        .as_ref()
        .and_then(|r| r.report(p.size, 1000.0, BwUnit::MBytes).ok());
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
        rx_report,
        rx_window,
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
    // The passive side's row (no peak): n messages from the first arrival to the last.
    let r = o.rx_report.unwrap();
    let cycles = o.rx_window.1 - o.rx_window.0;
    assert_eq!((r.iterations, r.total_cycles, r.bw_peak), (n, cycles, 0.0));
    assert!((r.msg_rate_mpps - n as f64 * 1e3 / cycles as f64).abs() < 1e-9);
    assert!((r.bw_avg - n as f64 * 1024.0 * 1e9 / (cycles as f64 * 1_048_576.0)).abs() < 1e-6);
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
    assert_eq!(o.doorbells, n / 16, "one list post per 16 messages");
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

/// `n` bytes of a node's memory at bus address `at`.
fn bytes(p: &SimPlatform, at: u64, n: usize) -> Vec<u8> {
    let ptr = p.arena.ptr_of(at).unwrap();
    // SAFETY: `at .. at + n` is inside a buffer the test allocated from this arena; the bytes
    // are copied out while the stepping thread (this one) is not inside the model.
    unsafe { std::slice::from_raw_parts(ptr, n) }.to_vec()
}

/// Writes `data` to a node's memory at bus address `at`.
fn write(p: &SimPlatform, at: u64, data: &[u8]) {
    let ptr = p.arena.ptr_of(at).unwrap();
    // SAFETY: as in `bytes`; nothing on the device accesses this range at the time.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, data.len()) };
}

/// The responder's bytes a READ fetches: not zero anywhere, different at every offset
/// within 251 bytes.
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8 + 1).collect()
}

fn clock_of(e: &End) -> impl FnMut() -> u64 {
    let p = e.p.clone_handle();
    move || mlx4::Platform::now_ns(&p)
}

/// Steps one requester (READ, WRITE or atomics) from `a` with `check` until done.
fn drive_requester(
    a: &mut End,
    tx: &mut BwSender<Hca<SimPlatform>>,
    check: &mut impl FnMut(std::ops::Range<u64>) -> std::result::Result<(), u64>,
) {
    let mut clock = clock_of(a);
    for _ in 0..ROUNDS {
        if tx
            .step_checked(&mut a.h, &mut clock, check)
            .expect("requester")
            == StreamState::Done
        {
            return;
        }
        mlx4::Platform::delay_us(&a.p, 1);
    }
    panic!("the requester did not finish in {ROUNDS} µs");
}

fn read_verb(b: &End) -> BwVerb {
    BwVerb::Read {
        remote_addr: b.buf,
        rkey: b.h.mr_rkey(b.mr),
    }
}

fn local_sge(a: &End) -> Sge {
    Sge {
        addr: a.buf,
        length: 0,
        lkey: a.h.mr_lkey(a.mr),
    }
}

#[test]
fn read_bw_reads_the_responders_bytes() {
    // perftest's -o default for ib_read_bw: the device's maximum, 16 on ConnectX-3.
    let out_reads = resolve_out_reads(0, DEFAULT_BW_OUT_READS);
    assert_eq!(out_reads, 16);
    assert_eq!(resolve_out_reads(4, DEFAULT_BW_OUT_READS), 4);
    assert_eq!(resolve_out_reads(40, DEFAULT_BW_OUT_READS), 16);
    let (_m, mut a, b, _d) = pair_with(QpType::Rc, 0, BUF, out_reads);
    let size = 4096usize;
    write(&b.p, b.buf, &pattern(size));
    let n = 300;
    let p = params(size as u32, n, 1, 8).resolve(true).unwrap();
    let verb = read_verb(&b);
    p.check_for(&verb, Transport::Rc, 2048, false).unwrap();
    let mut tx =
        BwSender::<Hca<SimPlatform>>::new(p, verb, a.qp, a.scq, None, local_sge(&a), 1_000_000);
    let pa = a.p.clone_handle();
    let buf = a.buf;
    let mut retired = 0;
    let want = pattern(size);
    let mut check = |r: std::ops::Range<u64>| {
        retired += r.end - r.start;
        // Every READ lands in the same buffer: once one retired, it holds the server's bytes.
        if bytes(&pa, buf, size) == want {
            Ok(())
        } else {
            Err(r.start)
        }
    };
    drive_requester(&mut a, &mut tx, &mut check);
    assert_eq!(retired, n);
    assert_eq!(tx.counts(), (n, n, n.div_ceil(8)));
    // The responder's buffer is as it was: READ only reads it.
    assert_eq!(bytes(&b.p, b.buf, size), pattern(size));
    let r = tx.report(1000.0, BwUnit::MBytes).unwrap();
    assert_eq!((r.size, r.iterations), (size as u64, n));
    assert!(r.bw_peak >= r.bw_avg && r.bw_avg > 0.0, "{r:?}");
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
}

/// perftest's `-o` reaches the HCA as max_rd_atomic / max_dest_rd_atomic: with -o 1, 4 and
/// 16 and a tx-depth of 32 READs (and of 32 atomics) on a fabric that takes 2 µs per packet
/// (so requests pile up), the model never has more than -o in flight, yet reaches -o, and
/// every READ still brings the responder's bytes.
#[test]
fn read_and_atomic_bw_keep_at_most_o_in_flight() {
    for out_reads in [1u8, 4, 16] {
        for atomic in [false, true] {
            let cfg = FabricConfig {
                faults: sim::Faults {
                    delay: std::time::Duration::from_micros(2),
                    ..Default::default()
                },
                ..Default::default()
            };
            let (m, mut a, b) = pair_on(cfg, QpType::Rc, BUF, out_reads);
            let size = if atomic { 8 } else { 1024 };
            write(&b.p, b.buf, &pattern(size));
            let n = 200;
            let p = params(size as u32, n, 1, 1).resolve(true).unwrap();
            assert_eq!(p.tx_depth, TX_DEPTH);
            let verb = if atomic {
                BwVerb::Atomic {
                    op: AtomicOp::FetchAndAdd,
                    remote_addr: b.buf,
                    rkey: b.h.mr_rkey(b.mr),
                }
            } else {
                read_verb(&b)
            };
            let mut tx = BwSender::<Hca<SimPlatform>>::new(
                p,
                verb,
                a.qp,
                a.scq,
                None,
                local_sge(&a),
                1_000_000,
            );
            let pa = a.p.clone_handle();
            let buf = a.buf;
            let want = pattern(size);
            let mut check = |r: std::ops::Range<u64>| {
                if atomic || bytes(&pa, buf, size) == want {
                    Ok(())
                } else {
                    Err(r.start)
                }
            };
            drive_requester(&mut a, &mut tx, &mut check);
            assert_eq!(
                (tx.counts().0, tx.counts().1),
                (n, n),
                "all posted and completed"
            );
            let qpn = a.h.qp_num(a.qp);
            let peak = m.borrow().fabric_ref().rc_rd_atomic_peak(a.p.hca, qpn);
            assert_eq!(
                peak,
                u32::from(out_reads),
                "-o {out_reads} (atomic {atomic}): most in flight"
            );
            assert_no_violations(&a.p);
            assert_no_violations(&b.p);
        }
    }
}

#[test]
fn read_bw_check_catches_wrong_data() {
    // The check is not vacuous: with the responder's buffer zero, the reads bring zeros and
    // the first retirement fails the pattern check.
    let (_m, mut a, b, _d) = pair_with(QpType::Rc, 0, BUF, 16);
    let p = params(256, 16, 1, 1).resolve(true).unwrap();
    let mut tx = BwSender::<Hca<SimPlatform>>::new(
        p,
        read_verb(&b),
        a.qp,
        a.scq,
        None,
        local_sge(&a),
        1_000_000,
    );
    let pa = a.p.clone_handle();
    let buf = a.buf;
    let mut clock = clock_of(&a);
    let mut err = None;
    for _ in 0..ROUNDS {
        let r = tx.step_checked(&mut a.h, &mut clock, &mut |r| {
            if bytes(&pa, buf, 256) == pattern(256) {
                Ok(())
            } else {
                Err(r.start)
            }
        });
        match r {
            Ok(StreamState::Done) => break,
            Ok(StreamState::Running) => mlx4::Platform::delay_us(&a.p, 1),
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    assert_eq!(err, Some(StreamError::Check { message: 0 }));
}

fn atomic_run(op: AtomicOp, n: u64, q: u32) {
    let (_m, mut a, b, _d) = pair_with(QpType::Rc, 0, BUF, 16);
    let verb = BwVerb::Atomic {
        op,
        remote_addr: b.buf,
        rkey: b.h.mr_rkey(b.mr),
    };
    let p = params(8, n, 1, q).resolve(true).unwrap();
    p.check_for(&verb, Transport::Rc, 2048, false).unwrap();
    let mut tx =
        BwSender::<Hca<SimPlatform>>::new(p, verb, a.qp, a.scq, None, local_sge(&a), 1_000_000);
    let pa = a.p.clone_handle();
    let base = a.buf;
    let mut checked = 0;
    let mut check = |r: std::ops::Range<u64>| {
        for m in r {
            let got = bytes(&pa, atomic_slot(base, TX_DEPTH, m), 8);
            if u64::from_be_bytes(got.try_into().unwrap()) != atomic_expected(m) {
                return Err(m);
            }
            checked += 1;
        }
        Ok(())
    };
    drive_requester(&mut a, &mut tx, &mut check);
    assert_eq!(checked, n, "{op:?}");
    assert_eq!(tx.counts(), (n, n, n.div_ceil(u64::from(q))));
    // Each responder word counted exactly the atomics aimed at it (message m at word m % 64).
    let words = bytes(&b.p, b.buf, ATOMIC_REMOTE_BYTES as usize);
    for w in 0..ATOMIC_WORDS {
        let at = (w * 64) as usize;
        let v = u64::from_be_bytes(words[at..at + 8].try_into().unwrap());
        let aimed = n / ATOMIC_WORDS + u64::from(w < n % ATOMIC_WORDS);
        assert_eq!(v, aimed, "{op:?} word {w}");
    }
    let r = tx.report(1000.0, BwUnit::MBytes).unwrap();
    assert_eq!((r.size, r.iterations), (8, n));
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
}

#[test]
fn atomic_bw_fetch_and_add_results_checked() {
    atomic_run(AtomicOp::FetchAndAdd, 1000, 1);
    atomic_run(AtomicOp::FetchAndAdd, 650, 10);
}

#[test]
fn atomic_bw_compare_and_swap_results_checked() {
    atomic_run(AtomicOp::CmpAndSwap, 1000, 1);
    atomic_run(AtomicOp::CmpAndSwap, 650, 10);
}

#[test]
fn read_and_atomics_refuse_other_transports_and_sizes() {
    use bench::bw::BwParamError as E;
    let p = params(64, 100, 1, 1);
    let read = BwVerb::Read {
        remote_addr: 0,
        rkey: 0,
    };
    let at = BwVerb::Atomic {
        op: AtomicOp::FetchAndAdd,
        remote_addr: 0,
        rkey: 0,
    };
    let write = BwVerb::Write {
        remote_addr: 0,
        rkey: 0,
    };
    assert_eq!(
        p.check_for(&read, Transport::Uc, 2048, false),
        Err(E::TransportNotAllowed)
    );
    assert_eq!(
        p.check_for(&write, Transport::Ud, 2048, false),
        Err(E::TransportNotAllowed)
    );
    assert_eq!(
        p.check_for(&at, Transport::Rc, 2048, false),
        Err(E::AtomicSizeNot8)
    );
    assert_eq!(
        params(4096, 10, 1, 1).check_for(&BwVerb::Send, Transport::Ud, 2048, false),
        Err(E::UdSizeOverMtu)
    );
    let mut d = p;
    d.duration = Some(BwDuration {
        margin_cycles: 10,
        sample_cycles: 100,
    });
    assert_eq!(
        d.check_for(&BwVerb::Send, Transport::Rc, 2048, true),
        Err(E::DurationWithAllSizes)
    );
    d.duration = Some(BwDuration {
        margin_cycles: 10,
        sample_cycles: 0,
    });
    assert_eq!(d.resolve(true), Err(E::DurationNotOverTwiceMargin));
}

/// Duration mode's margin and sample in the tests: 20 µs and 100 µs of model time.
const MARGIN: u64 = 20_000;
const SAMPLE: u64 = 100_000;

fn duration_params(size: u32, q: u32) -> BwParams {
    let mut p = params(size, 0, 1, q);
    p.duration = Some(BwDuration {
        margin_cycles: MARGIN,
        sample_cycles: SAMPLE,
    });
    p.resolve(true).expect("valid duration parameters")
}

struct DurationOutcome {
    tx: BwReport,
    /// Messages the observer saw retire while the sender was in its sample.
    tx_observed: u64,
    tx_sample: u64,
    /// (posted, completed, signaled)
    counts: (u64, u64, u64),
    tally: Option<RecvTally>,
    rx: Option<BwReport>,
    rx_observed: u64,
    dropped: u64,
}

/// One duration run from `a` to `b`: SEND (with a receiver) or a requester `verb`.
fn duration_run(
    t: QpType,
    verb: Option<fn(&End) -> BwVerb>,
    q: u32,
    drop_every: u64,
) -> DurationOutcome {
    let size = 1024;
    let p = duration_params(size, q);
    assert!(p.no_peak, "duration mode measures no peak");
    let (_m, mut a, mut b, dropped) = pair_with(t, drop_every, BUF, 16);
    let ud = (t == QpType::Ud).then(|| dest(&mut a, &b));
    let grh = if t == QpType::Ud { 40 } else { 0 };
    let v = verb.map(|f| f(&b)).unwrap_or(BwVerb::Send);
    let mut rx = verb.is_none().then(|| {
        let rsge = Sge {
            addr: b.buf,
            length: size + grh,
            lkey: b.h.mr_lkey(b.mr),
        };
        BwReceiver::new(
            &mut b.h,
            b.qp,
            b.rcq,
            RecvSetup {
                sge: rsge,
                grh,
                rx_depth: 512,
                iterations: 0,
                drain_cycles: 100_000,
                duration: p.duration,
            },
        )
        .unwrap()
    });
    let mut tx = BwSender::<Hca<SimPlatform>>::new(p, v, a.qp, a.scq, ud, local_sge(&a), 1_000_000);
    let now = |e: &End| mlx4::Platform::now_ns(&e.p);
    let mut clock = clock_of(&a);
    let (mut tx_done, mut rx_done) = (false, rx.is_none());
    let (mut tx_observed, mut rx_observed) = (0, 0);
    for _ in 0..ROUNDS {
        if !tx_done {
            let c0 = tx.counts().1;
            tx_done = tx.step(&mut a.h, &mut clock).expect("sender") == StreamState::Done;
            if tx.phase() == Some(Phase::Sample) {
                tx_observed += tx.counts().1 - c0;
            }
            if tx_done {
                if let Some(r) = rx.as_mut() {
                    r.sender_done_total(now(&b), tx.counts().0);
                }
            }
        }
        if let Some(r) = rx.as_mut() {
            if !rx_done {
                let r0 = r.tally().received;
                let t1 = now(&b);
                rx_done = r.step(&mut b.h, t1).expect("receiver") == StreamState::Done;
                if r.phase() == Some(Phase::Sample) {
                    rx_observed += r.tally().received - r0;
                }
            }
        }
        if tx_done && rx_done {
            break;
        }
        mlx4::Platform::delay_us(&a.p, 1);
    }
    assert!(
        tx_done && rx_done,
        "the duration run did not end in {ROUNDS} µs"
    );
    assert_eq!(tx.phase(), Some(Phase::End));
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
    DurationOutcome {
        tx: tx.report(1000.0, BwUnit::MBytes).expect("sender report"),
        tx_observed,
        tx_sample: tx.sample_iterations(),
        counts: tx.counts(),
        tally: rx.as_ref().map(|r| r.tally()),
        rx: rx.as_ref().map(|r| {
            r.report(size, 1000.0, BwUnit::MBytes)
                .expect("receiver report")
        }),
        rx_observed,
        dropped: dropped.load(Ordering::Relaxed),
    }
}

/// perftest's duration figures by hand: `n` messages of 1024 B in exactly the sample.
fn check_duration_report(r: &BwReport, n: u64) {
    assert_eq!((r.size, r.iterations, r.total_cycles), (1024, n, SAMPLE));
    assert_eq!(r.bw_peak, 0.0);
    let mpps = n as f64 * 1e9 / (SAMPLE as f64 * 1e6);
    assert!((r.msg_rate_mpps - mpps).abs() < 1e-12, "{r:?}");
    assert!((r.bw_avg - n as f64 * 1024.0 * 1e9 / (SAMPLE as f64 * 1_048_576.0)).abs() < 1e-9);
}

fn duration_checks(o: &DurationOutcome, q: u64) {
    let (posted, completed, signaled) = o.counts;
    // Every message posted was retired by a signaled completion: posting stopped at a
    // moderation boundary once time was up.
    assert_eq!(posted, completed);
    assert_eq!(completed, signaled * q);
    assert_eq!(o.tx_sample, o.tx_observed);
    assert!(o.tx_sample > 0 && o.tx_sample < completed && o.tx_sample.is_multiple_of(q));
    check_duration_report(&o.tx, o.tx_sample);
}

#[test]
fn duration_send_rc_counts_the_sample_exactly() {
    let o = duration_run(QpType::Rc, None, 8, 0);
    duration_checks(&o, 8);
    let tl = o.tally.unwrap();
    // RC loses nothing: the receiver got every message the sender posted.
    assert_eq!(
        (tl.expected, tl.received, tl.lost()),
        (o.counts.0, o.counts.0, 0)
    );
    assert_eq!(tl.bytes, tl.received * 1024);
    // The receiver's own sample (started by its first message) is counted exactly too.
    assert_eq!(tl.sample, o.rx_observed);
    check_duration_report(&o.rx.unwrap(), tl.sample);
}

#[test]
fn duration_send_ud_and_uc_with_loss_account_every_message() {
    for (t, drop_every) in [(QpType::Ud, 9), (QpType::Uc, 7)] {
        let o = duration_run(t, None, 4, drop_every);
        duration_checks(&o, 4);
        let tl = o.tally.unwrap();
        assert_eq!(tl.expected, o.counts.0, "{t:?}");
        assert!(o.dropped > 0, "{t:?}");
        // One packet per message: the messages lost are the packets the switch dropped.
        assert_eq!(tl.lost(), o.dropped, "{t:?} {tl:?}");
        assert_eq!(tl.received + tl.lost(), o.counts.0, "{t:?}");
        assert_eq!(tl.sample, o.rx_observed, "{t:?}");
    }
}

#[test]
fn duration_write_and_read_rc() {
    let write: fn(&End) -> BwVerb = |b| BwVerb::Write {
        remote_addr: b.buf,
        rkey: b.h.mr_rkey(b.mr),
    };
    duration_checks(&duration_run(QpType::Rc, Some(write), 16, 0), 16);
    duration_checks(&duration_run(QpType::Uc, Some(write), 1, 0), 1);
    duration_checks(&duration_run(QpType::Rc, Some(read_verb), 4, 0), 4);
}

fn recv_setup(e: &End, size: u32, t: QpType, n: u64, duration: Option<BwDuration>) -> RecvSetup {
    let grh = if t == QpType::Ud { 40 } else { 0 };
    RecvSetup {
        sge: Sge {
            addr: e.buf + BUF / 2,
            length: size + grh,
            lkey: e.h.mr_lkey(e.mr),
        },
        grh,
        rx_depth: 512,
        iterations: n,
        drain_cycles: 100_000,
        duration,
    }
}

/// One node of `ib_send_bw -b`: its sender and receiver on its QP.
fn duplex_node(
    e: &mut End,
    peer: &End,
    t: QpType,
    p: BwParams,
    passive: bool,
) -> BwDuplexSend<Hca<SimPlatform>> {
    let ud = (t == QpType::Ud).then(|| dest(e, peer));
    let tx = BwSender::new(p, BwVerb::Send, e.qp, e.scq, ud, local_sge(e), 1_000_000);
    let setup = recv_setup(e, p.size, t, p.iterations, p.duration);
    let rx = BwReceiver::new(&mut e.h, e.qp, e.rcq, setup).unwrap();
    BwDuplexSend::new(tx, rx, passive)
}

struct DuplexOutcome {
    reports: [BwReport; 2],
    /// Per node: its sends retired and messages received while its own phase was the sample.
    observed: [u64; 2],
    /// Per node: (sender counts, receiver tally).
    ends: [((u64, u64, u64), RecvTally); 2],
}

/// Runs `ib_send_bw -b` between two nodes, `a` active (perftest's client) and `b` passive.
fn duplex_send(t: QpType, p: BwParams) -> DuplexOutcome {
    let (_m, mut a, mut b, _d) = pair_with(t, 0, BUF, 1);
    let mut na = duplex_node(&mut a, &b, t, p, false);
    let mut nb = duplex_node(&mut b, &a, t, p, true);
    let mut ca = clock_of(&a);
    let mut cb = clock_of(&b);
    let mut told = [false; 2];
    let mut done = [false; 2];
    let mut observed = [0u64; 2];
    for _ in 0..ROUNDS {
        for (i, (node, e, clock)) in [(&mut na, &mut a, &mut ca), (&mut nb, &mut b, &mut cb)]
            .into_iter()
            .enumerate()
        {
            if done[i] {
                continue;
            }
            let before = node.sender().counts().1 + node.receiver().tally().received;
            done[i] = node.step(&mut e.h, clock).expect("duplex node") == StreamState::Done;
            let after = node.sender().counts().1 + node.receiver().tally().received;
            if node.sender().phase() == Some(Phase::Sample) {
                observed[i] += after - before;
            }
            // The passive node sends nothing before the active one's first message.
            if node.sender().started() {
                assert!(i == 0 || node.receiver().tally().received > 0);
            }
        }
        for (i, told) in told.iter_mut().enumerate() {
            let (from, to) = if i == 0 {
                (&na, &mut nb)
            } else {
                (&nb, &mut na)
            };
            if !*told && from.sender_finished() {
                *told = true;
                let total = from.sender().counts().0;
                to.peer_done(mlx4::Platform::now_ns(&a.p), total);
            }
        }
        if done == [true; 2] {
            break;
        }
        mlx4::Platform::delay_us(&a.p, 1);
    }
    assert_eq!(
        done, [true; 2],
        "the bidirectional run did not end in {ROUNDS} µs"
    );
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
    DuplexOutcome {
        reports: [
            na.report(1000.0, BwUnit::MBytes).unwrap(),
            nb.report(1000.0, BwUnit::MBytes).unwrap(),
        ],
        observed,
        ends: [
            (na.sender().counts(), na.receiver().tally()),
            (nb.sender().counts(), nb.receiver().tally()),
        ],
    }
}

#[test]
fn bidirectional_send_counts_both_directions() {
    for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
        let n = 400;
        let mut p = params(1024, n, 1, 8);
        p.bidirectional = true;
        let o = duplex_send(t, p.resolve(true).unwrap());
        for (counts, tally) in o.ends {
            assert_eq!(counts, (n, n, n / 8), "{t:?}");
            assert_eq!(
                (tally.received, tally.lost(), tally.bytes),
                (n, 0, n * 1024),
                "{t:?}"
            );
        }
        let [ra, rb] = o.reports;
        let row = bidir_sum(&ra, &rb);
        assert_eq!((row.size, row.iterations), (1024, n));
        assert_eq!(row.msg_rate_mpps, ra.msg_rate_mpps + rb.msg_rate_mpps);
        assert_eq!(row.bw_avg, ra.bw_avg + rb.bw_avg);
        assert_eq!(row.bw_peak, ra.bw_peak + rb.bw_peak);
        // Each side's own figures: its n sends over its own first post to last completion.
        for r in [ra, rb] {
            assert!((r.msg_rate_mpps - n as f64 * 1e3 / r.total_cycles as f64).abs() < 1e-9);
        }
    }
}

#[test]
fn bidirectional_send_duration_counts_sends_and_receives_in_the_sample() {
    let mut p = duration_params(1024, 8);
    p.bidirectional = true;
    let o = duplex_send(QpType::Rc, p);
    for i in 0..2 {
        let (counts, tally) = o.ends[i];
        let r = &o.reports[i];
        // perftest's one counter per node: its sends retired plus its receives, both in its
        // sample; over the sample's cycles; the row is printed without the peer's.
        assert_eq!(r.iterations, o.observed[i], "node {i}");
        check_duration_report(r, o.observed[i]);
        assert_eq!(counts.0, counts.1);
        // Each direction exact: every message one side posted, the other received.
        let (peer_counts, _) = o.ends[1 - i];
        assert_eq!(tally.received, peer_counts.0, "node {i}");
    }
}

#[test]
fn bidirectional_write_read_and_atomics_both_sides_request() {
    #[derive(Clone, Copy, PartialEq, Debug)]
    enum K {
        Write,
        Read,
        Atomic,
    }
    for k in [K::Write, K::Read, K::Atomic] {
        let (_m, mut a, mut b, _d) = pair_with(QpType::Rc, 0, BUF, 16);
        let size = if k == K::Atomic { 8 } else { 2048 };
        let n = 300;
        let mut p = params(size, n, 1, 4);
        p.bidirectional = true;
        let p = p.resolve(true).unwrap();
        if k != K::Atomic {
            write(&a.p, a.buf + BUF / 2, &pattern(size as usize));
            write(&b.p, b.buf + BUF / 2, &pattern(size as usize));
        }
        // Each side sends from (or reads into, or fetches into) its lower half and targets
        // the peer's upper half.
        let verb = |peer: &End| {
            let (remote_addr, rkey) = (peer.buf + BUF / 2, peer.h.mr_rkey(peer.mr));
            match k {
                K::Write => BwVerb::Write { remote_addr, rkey },
                K::Read => BwVerb::Read { remote_addr, rkey },
                K::Atomic => BwVerb::Atomic {
                    op: AtomicOp::FetchAndAdd,
                    remote_addr,
                    rkey,
                },
            }
        };
        let mut ta = BwSender::new(p, verb(&b), a.qp, a.scq, None, local_sge(&a), 1_000_000);
        let mut tb = BwSender::new(p, verb(&a), b.qp, b.scq, None, local_sge(&b), 1_000_000);
        let (mut ca, mut cb) = (clock_of(&a), clock_of(&b));
        let (pa, pb) = (a.p.clone_handle(), b.p.clone_handle());
        let (bufa, bufb) = (a.buf, b.buf);
        // Atomics: every value fetched on either side is checked as its message retires.
        let checker = |p: SimPlatform, base: u64| {
            move |r: std::ops::Range<u64>| {
                if k != K::Atomic {
                    return Ok(());
                }
                for m in r {
                    let got = bytes(&p, atomic_slot(base, TX_DEPTH, m), 8);
                    if u64::from_be_bytes(got.try_into().unwrap()) != atomic_expected(m) {
                        return Err(m);
                    }
                }
                Ok(())
            }
        };
        let (mut cha, mut chb) = (checker(pa, bufa), checker(pb, bufb));
        let mut done = [false; 2];
        for _ in 0..ROUNDS {
            if !done[0] {
                done[0] =
                    ta.step_checked(&mut a.h, &mut ca, &mut cha).unwrap() == StreamState::Done;
            }
            if !done[1] {
                done[1] =
                    tb.step_checked(&mut b.h, &mut cb, &mut chb).unwrap() == StreamState::Done;
            }
            if done == [true; 2] {
                break;
            }
            mlx4::Platform::delay_us(&a.p, 1);
        }
        assert_eq!(done, [true; 2], "{k:?}");
        assert_eq!((ta.counts(), tb.counts()), ((n, n, n / 4), (n, n, n / 4)));
        for e in [&a, &b] {
            match k {
                // Each side read the other's pattern into its own lower half.
                K::Read => assert_eq!(bytes(&e.p, e.buf, size as usize), pattern(size as usize)),
                // Each side wrote its zeroed lower half over the other's pattern.
                K::Write => assert_eq!(
                    bytes(&e.p, e.buf + BUF / 2, size as usize),
                    vec![0; size as usize]
                ),
                // Each side's words counted the peer's atomics: 300 over 64 words.
                K::Atomic => {
                    let words = bytes(&e.p, e.buf + BUF / 2, ATOMIC_REMOTE_BYTES as usize);
                    let total: u64 = (0..ATOMIC_WORDS as usize)
                        .map(|w| u64::from_be_bytes(words[w * 64..w * 64 + 8].try_into().unwrap()))
                        .sum();
                    assert_eq!(total, n);
                }
            }
        }
        let ra = ta.report(1000.0, BwUnit::MBytes).unwrap();
        let rb = tb.report(1000.0, BwUnit::MBytes).unwrap();
        let row = bidir_sum(&ra, &rb);
        assert_eq!(row.bw_avg, ra.bw_avg + rb.bw_avg);
        assert_eq!(row.iterations, n);
        assert_no_violations(&a.p);
        assert_no_violations(&b.p);
    }
}

/// Runs every size of `sizes` on one connected pair, a row each, the way a `-a` run does.
/// `read`: READs of each size from `b`'s pattern; otherwise SENDs from `a` to `b`.
/// `tx_depth` small enough that a size takes several rounds: the model completes work in
/// no model time, and a run measured in no time has no figures.
fn all_sizes_rows(t: QpType, read: bool, buf: u64, n: u64, tx_depth: u32) -> (String, Vec<u32>) {
    let (_m, mut a, mut b, _d) = pair_with(t, 0, buf, 16);
    let verb = if read { read_verb(&b) } else { BwVerb::Send };
    let sizes: Vec<u32> = bw_sizes(true, 0, &verb, bench_transport(t), 2048).collect();
    if read {
        write(&b.p, b.buf, &pattern(*sizes.last().unwrap() as usize));
    }
    let ud = (t == QpType::Ud).then(|| dest(&mut a, &b));
    let mut table = String::new();
    write_bw_header(&mut table, BwUnit::MBytes).unwrap();
    for &size in &sizes {
        let mut p = params(size, n, 1, 1);
        p.tx_depth = tx_depth;
        let p = p.resolve(true).unwrap();
        p.check_for(&verb, bench_transport(t), 2048, true).unwrap();
        let mut rx = (!read).then(|| {
            let setup = RecvSetup {
                sge: Sge {
                    addr: b.buf,
                    length: size + if t == QpType::Ud { 40 } else { 0 },
                    lkey: b.h.mr_lkey(b.mr),
                },
                grh: if t == QpType::Ud { 40 } else { 0 },
                rx_depth: 512,
                iterations: n,
                drain_cycles: 100_000,
                duration: None,
            };
            BwReceiver::new(&mut b.h, b.qp, b.rcq, setup).unwrap()
        });
        let mut tx = BwSender::new(p, verb, a.qp, a.scq, ud, local_sge(&a), 10_000_000);
        let mut clock = clock_of(&a);
        let mut done = (false, rx.is_none());
        for _ in 0..ROUNDS {
            if !done.0 {
                done.0 = tx.step(&mut a.h, &mut clock).unwrap() == StreamState::Done;
            }
            if let Some(r) = rx.as_mut().filter(|_| !done.1) {
                let t1 = mlx4::Platform::now_ns(&b.p);
                done.1 = r.step(&mut b.h, t1).unwrap() == StreamState::Done;
            }
            if done == (true, true) {
                break;
            }
            mlx4::Platform::delay_us(&a.p, 1);
        }
        assert_eq!(done, (true, true), "size {size} did not finish");
        assert_eq!(tx.counts().1, n);
        if let Some(r) = rx {
            let tl = r.tally();
            assert_eq!(
                (tl.received, tl.bytes),
                (n, n * u64::from(size)),
                "size {size}"
            );
        } else {
            assert_eq!(
                bytes(&a.p, a.buf, size as usize),
                pattern(size as usize),
                "size {size}"
            );
        }
        write_bw_row(
            &mut table,
            BwUnit::MBytes,
            &tx.report(1000.0, BwUnit::MBytes).unwrap(),
        )
        .unwrap();
    }
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
    (table, sizes)
}

fn bench_transport(t: QpType) -> Transport {
    match t {
        QpType::Ud => Transport::Ud,
        QpType::Uc => Transport::Uc,
        _ => Transport::Rc,
    }
}

/// The table has the header and one row per size, in order, each with its size and count.
fn check_rows(table: &str, sizes: &[u32], n: u64) {
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2 + sizes.len(), "{table}");
    for (line, size) in lines[2..].iter().zip(sizes) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[0], size.to_string(), "{line}");
        assert_eq!(cols[1], n.to_string(), "{line}");
        assert!(cols[3].parse::<f64>().unwrap() > 0.0, "{line}");
    }
}

#[test]
fn all_sizes_send_ud_up_to_the_mtu() {
    let (table, sizes) = all_sizes_rows(QpType::Ud, false, BUF, 20, TX_DEPTH);
    assert_eq!(sizes, [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]);
    check_rows(&table, &sizes, 20);
}

#[test]
fn all_sizes_read_rc_up_to_8_mib() {
    let (table, sizes) = all_sizes_rows(QpType::Rc, true, 8 << 20, 6, 2);
    assert_eq!(sizes.len(), 23);
    assert_eq!(*sizes.last().unwrap(), 8 << 20);
    check_rows(&table, &sizes, 6);
}
