//! The bench's SRQ ping-pong (`bench::srq`, rdma-core's `ibv_srq_pingpong`) over the real
//! driver and two in-process model HCAs, stepped alternately in one thread while the fabric's
//! clock advances 1 µs per idle step: every message's data is checked by the bench, every QP
//! carries messages both ways, the SRQ is refilled in batches, and everything is freed.

mod common;

use bench::srq::{SrqConfig, SrqPingPong, SrqStatus, SrqSummary};
use bench::{BenchEnv, BenchError};
use common::bench_env::SimEnv;
use common::*;
use mlx4::{Hca, Platform};
use sim::FabricConfig;

struct Node {
    hca: Hca<SimPlatform>,
    env: SimEnv,
    probe: SimPlatform,
}

fn node(p: SimPlatform) -> Node {
    let env = SimEnv::new(&p);
    let probe = p.clone_handle();
    let mut hca = Hca::init(p, test_config()).expect("bring-up");
    hca.wait_port_active(1, 5000).expect("port active");
    Node { hca, env, probe }
}

fn cfg(client: bool, qps: u32, rx_depth: u32, iters: u32, size: u32) -> SrqConfig {
    SrqConfig {
        qps,
        rx_depth,
        iters,
        size,
        wait_timeout_ns: 200_000_000,
        ..SrqConfig::new(client)
    }
}

/// Runs a client and a server with these settings to the end; returns both summaries.
fn run(qps: u32, rx_depth: u32, iters: u32, size: u32) -> (SrqSummary, SrqSummary) {
    let (_m, mut ps) = machine(2, FabricConfig::default());
    let mut s = node(ps.remove(1));
    let mut c = node(ps.remove(0));
    let mut sp = SrqPingPong::new(
        &mut s.hca,
        &mut s.env,
        cfg(false, qps, rx_depth, iters, size),
    )
    .expect("server set-up");
    let mut cp = SrqPingPong::new(
        &mut c.hca,
        &mut c.env,
        cfg(true, qps, rx_depth, iters, size),
    )
    .expect("client set-up");
    let s_eps: Vec<_> = sp.endpoints().collect();
    let c_eps: Vec<_> = cp.endpoints().collect();
    assert_eq!(s_eps.len(), qps as usize);
    sp.connect(&mut s.hca, &s.env, &c_eps)
        .expect("server connect");
    cp.connect(&mut c.hca, &c.env, &s_eps)
        .expect("client connect");

    // Virtual time: the fabric's clock advances 1 µs per round, so the figures are
    // deterministic and the bound costs nothing.
    let t0 = c.env.now_ns();
    let (mut c_done, mut s_done) = (false, false);
    while !(c_done && s_done) {
        assert!(
            c.env.now_ns() - t0 < 2_000_000_000,
            "the run did not finish"
        );
        if !c_done {
            c_done = cp.step(&mut c.hca, &mut c.env).expect("client step") == SrqStatus::Done;
        }
        if !s_done {
            s_done = sp.step(&mut s.hca, &mut s.env).expect("server step") == SrqStatus::Done;
        }
        c.probe.delay_us(1);
    }
    let total = c.env.now_ns() - t0;
    eprintln!("client {:?}\nserver {:?}", cp.summary(), sp.summary());
    let (cs, ss) = (cp.summary(), sp.summary());
    cp.close(&mut c.hca);
    sp.close(&mut s.hca);
    assert_eq!(c.env.live(), 0, "client buffer");
    assert_eq!(s.env.live(), 0, "server buffer");
    assert_no_violations(&c.probe);
    assert_no_violations(&s.probe);
    for sum in [&cs, &ss] {
        assert!(
            sum.elapsed_ns > 0 && sum.elapsed_ns <= total,
            "{sum:?}, run {total} ns"
        );
    }
    (cs, ss)
}

#[test]
fn sixteen_qps_share_one_srq_every_qp_carries_checked_messages() {
    // The example's 16 QPs; a receive queue small enough to be refilled many times.
    let (qps, rx_depth, iters, size) = (16, 40, 400, 1024);
    let (cs, ss) = run(qps, rx_depth, iters, size);
    for (who, s) in [("client", &cs), ("server", &ss)] {
        assert_eq!(s.iters, iters);
        assert_eq!(s.received_per_qp.len(), qps as usize, "{who}");
        assert_eq!(
            s.received_per_qp.iter().sum::<u32>(),
            iters,
            "{who}: every message arrived once: {:?}",
            s.received_per_qp
        );
        // Every QP opens with one message and the sides take turns per QP, so each QP
        // carries iters / qps messages each way.
        for (q, &n) in s.received_per_qp.iter().enumerate() {
            assert_eq!(n, iters / qps, "{who}: QP {q}: {:?}", s.received_per_qp);
        }
        // rx_depth 40, refilled once no more than 16 are left: at least (400 - 40) / 24
        // refills besides the first fill.
        assert!(
            s.refills > (iters - rx_depth) / (rx_depth - qps),
            "{who}: {s:?}"
        );
    }
}

#[test]
fn one_qp_and_a_message_no_bigger_than_its_header() {
    let (cs, ss) = run(1, 2, 25, 8);
    assert_eq!(cs.received_per_qp, vec![25]);
    assert_eq!(ss.received_per_qp, vec![25]);
}

#[test]
fn bad_settings_are_refused_before_anything_is_created() {
    let (_m, mut ps) = machine(1, FabricConfig::default());
    let mut n = node(ps.remove(0));
    for (bad, why) in [
        (cfg(true, 16, 8, 100, 64), "rx_depth"),
        (cfg(true, 0, 8, 100, 64), "qps"),
        (cfg(true, 65, 100, 100, 64), "qps"),
        (cfg(true, 4, 8, 100, 4), "size"),
        (cfg(true, 4, 8, 0, 64), "iters"),
    ] {
        match SrqPingPong::new(&mut n.hca, &mut n.env, bad) {
            Err(BenchError::BadArgument(what)) => assert!(what.contains(why), "{what}"),
            Err(e) => panic!("{bad:?}: {e}"),
            Ok(_) => panic!("{bad:?} accepted"),
        }
    }
    assert_eq!(n.env.live(), 0);
    assert_no_violations(&n.probe);
}
