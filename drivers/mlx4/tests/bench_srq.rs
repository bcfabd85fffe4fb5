//! The bench's SRQ ping-pong (`bench::srq`, rdma-core's `ibv_srq_pingpong`) over the real
//! driver and two in-process model HCAs, stepped alternately in one thread while the fabric's
//! clock advances 1 µs per idle step: every message's data is checked by the bench, every QP
//! carries messages both ways, the SRQ is refilled in batches, and everything is freed.

mod common;

use bench::srq::{SrqConfig, SrqPingPong, SrqStatus, SrqSummary};
use bench::{BenchEnv, BenchError};
use common::*;
use mlx4::{DmaRegion, DmaRelease, Hca, Platform};
use sim::FabricConfig;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The benchmark's view of a model node: a 1000 MHz "TSC" that is the fabric's clock.
struct SimEnv {
    p: SimPlatform,
    dma: Arc<Counted>,
}

impl BenchEnv for SimEnv {
    fn cycles(&self) -> u64 {
        self.p.now_ns()
    }
    fn tsc_mhz(&self) -> f64 {
        1000.0
    }
    fn now_ns(&self) -> u64 {
        self.p.now_ns()
    }
    fn alloc_dma(&mut self, size: usize, align: usize) -> Option<DmaRegion> {
        let bus = self.p.arena.alloc(size, align)?;
        let ptr = NonNull::new(self.p.arena.ptr_of(bus)?)?;
        self.dma.live.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `alloc` just handed out these `size` zeroed bytes of the arena, `ptr_of` is
        // their CPU address, and `Counted` frees exactly that block (and keeps the arena alive).
        Some(unsafe { DmaRegion::new(ptr, bus, size, true, self.dma.clone()) })
    }
    fn relax(&mut self) {
        self.p.delay_us(1);
    }
}

/// Gives the benchmark's regions back to the arena and counts those still out.
struct Counted {
    arena: Arc<sim::inproc::DmaArena>,
    live: AtomicUsize,
}

impl DmaRelease for Counted {
    unsafe fn release(&self, _ptr: NonNull<u8>, bus: u64, _size: usize) {
        assert!(self.arena.free(bus), "benchmark freed unknown memory");
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Node {
    hca: Hca<SimPlatform>,
    env: SimEnv,
    probe: SimPlatform,
}

fn node(p: SimPlatform) -> Node {
    let env = SimEnv {
        dma: Arc::new(Counted {
            arena: p.arena.clone(),
            live: AtomicUsize::new(0),
        }),
        p: p.clone_handle(),
    };
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
    assert_eq!(c.env.dma.live.load(Ordering::Relaxed), 0, "client buffer");
    assert_eq!(s.env.dma.live.load(Ordering::Relaxed), 0, "server buffer");
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
    assert_eq!(n.env.dma.live.load(Ordering::Relaxed), 0);
    assert_no_violations(&n.probe);
}
