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
use verbs::CqModeration;

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
    let o = run_cfg(
        cfg(true, qps, rx_depth, iters, size),
        cfg(false, qps, rx_depth, iters, size),
    );
    (o.client, o.server)
}

/// What one run did on both nodes.
struct Outcome {
    client: SrqSummary,
    server: SrqSummary,
    /// Interrupts the model raised on each node from the end of `connect` (the client's
    /// first sends posted, no CQ armed yet) to the end of the run.
    client_irqs: u64,
    server_irqs: u64,
}

/// Runs a client and a server with these configurations to the end.
fn run_cfg(c_cfg: SrqConfig, s_cfg: SrqConfig) -> Outcome {
    run_on(FabricConfig::default(), c_cfg, s_cfg)
}

/// A switch that delays every packet by `us` microseconds, so that a side finds its CQ
/// empty between messages and sleeps.
fn slow_switch(us: u64) -> FabricConfig {
    let mut f = FabricConfig::default();
    f.faults.delay = std::time::Duration::from_micros(us);
    f
}

fn run_on(fabric: FabricConfig, c_cfg: SrqConfig, s_cfg: SrqConfig) -> Outcome {
    let qps = c_cfg.qps;
    let (_m, mut ps) = machine(2, fabric);
    let mut s = node(ps.remove(1));
    let mut c = node(ps.remove(0));
    let mut sp = SrqPingPong::new(&mut s.hca, &mut s.env, s_cfg).expect("server set-up");
    let mut cp = SrqPingPong::new(&mut c.hca, &mut c.env, c_cfg).expect("client set-up");
    let s_eps: Vec<_> = sp.endpoints().collect();
    let c_eps: Vec<_> = cp.endpoints().collect();
    assert_eq!(s_eps.len(), qps as usize);

    sp.connect(&mut s.hca, &s.env, &c_eps)
        .expect("server connect");
    cp.connect(&mut c.hca, &c.env, &s_eps)
        .expect("client connect");
    // From here on: the QPs are connected (their modify commands, whose completions are
    // interrupts too, are done) and no CQ is armed yet.
    let (c_irq0, s_irq0) = (c.probe.interrupts_raised(), s.probe.interrupts_raised());

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
    let client_irqs = c.probe.interrupts_raised() - c_irq0;
    let server_irqs = s.probe.interrupts_raised() - s_irq0;
    let (cs, ss) = (cp.summary(), sp.summary());
    eprintln!("client {cs:?}\nserver {ss:?}");
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
    Outcome {
        client: cs,
        server: ss,
        client_irqs,
        server_irqs,
    }
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
        (cfg(true, 4, 8, (1 << 24) + 1, 64), "iters"),
        (cfg(true, 4, 16001, 100, 64), "rx_depth"),
        (cfg(true, 4, 8, 100, (8 << 20) + 1), "size"),
    ] {
        match SrqPingPong::new(&mut n.hca, &mut n.env, bad) {
            Err(BenchError::Config(bench::ConfigError::Invalid(rule))) => {
                assert!(rule.to_string().contains(why), "{rule}")
            }
            Err(e) => panic!("{bad:?}: {e}"),
            Ok(_) => panic!("{bad:?} accepted"),
        }
    }
    assert_eq!(n.env.live(), 0);
    assert_no_violations(&n.probe);
}

fn with_events(mut c: SrqConfig, moderation: Option<CqModeration>) -> SrqConfig {
    c.events = true;
    c.moderation = moderation;
    // Well above every period of the sweep, well below the run's wait timeout.
    c.event_fallback_ns = 2_000_000;
    c
}

/// One QP, event mode: every message still arrives checked, each side sleeps on its CQ's
/// events, and the interrupts the model raised on each node during the run are exactly
/// the events that side took (one CQ, one EQ, no command in flight).
#[test]
fn event_mode_sleeps_on_completion_events_and_every_message_arrives() {
    let iters = 50;
    let o = run_on(
        slow_switch(5),
        with_events(cfg(true, 1, 4, iters, 64), None),
        with_events(cfg(false, 1, 4, iters, 64), None),
    );
    for (who, s, irqs) in [
        ("client", &o.client, o.client_irqs),
        ("server", &o.server, o.server_irqs),
    ] {
        assert_eq!(s.received_per_qp, vec![iters], "{who}");
        // One message outstanding: a side sleeps once per message it waits for.
        assert!(s.events >= iters, "{who}: an event per message: {s:?}");
        assert_eq!(s.fallbacks, 0, "{who}: every sleep ended in its event");
        assert_eq!(
            irqs,
            u64::from(s.events),
            "{who}: every interrupt was an event taken"
        );
    }
    // Sixteen QPs: the same with messages of every QP in flight at once.
    let o = run_on(
        slow_switch(5),
        with_events(cfg(true, 16, 40, 320, 256), None),
        with_events(cfg(false, 16, 40, 320, 256), None),
    );
    assert_eq!(o.client.received_per_qp, vec![20; 16]);
    assert_eq!(o.server.received_per_qp, vec![20; 16]);
    assert!(o.client.events > 0 && o.server.events > 0);
    assert_eq!(o.client_irqs, u64::from(o.client.events));
    assert_eq!(o.server_irqs, u64::from(o.server.events));
    // Busy-polling: no CQ is ever armed, so the run raises no interrupt at all.
    let o = run_on(
        slow_switch(5),
        cfg(true, 16, 40, 320, 256),
        cfg(false, 16, 40, 320, 256),
    );
    assert_eq!((o.client_irqs, o.server_irqs), (0, 0));
    assert_eq!((o.client.events, o.server.events), (0, 0));
}

/// Runs the SRQ ping-pong in event mode on a 5 µs switch once per moderation setting
/// (applied on both sides); per setting: the client's interrupts per message received (the
/// model's count during the run) and its round trips.
fn sweep(qps: u32, iters: u32, settings: &[(u16, u16)]) -> Vec<(f64, bench::srq::Rtt)> {
    settings
        .iter()
        .map(|&(count, period)| {
            let m = Some(CqModeration {
                cq_count: count,
                cq_period: period,
            });
            let rx = 2 * qps + 2;
            let o = run_on(
                slow_switch(5),
                with_events(cfg(true, qps, rx, iters, 64), m),
                with_events(cfg(false, qps, rx, iters, 64), m),
            );
            assert_eq!(
                o.client.received_per_qp.iter().sum::<u32>(),
                iters,
                "{count}/{period}"
            );
            let per_msg = o.client_irqs as f64 / f64::from(iters);
            let rtt = o.client.rtt.expect("round trips");
            eprintln!(
                "q {qps} {count}/{period}: {per_msg:.3} interrupts/message, rtt typical {} avg {} us, {} fallbacks, {} events, server {} irqs {} events",
                rtt.typical_us, rtt.avg_us, o.client.fallbacks, o.client.events, o.server_irqs, o.server.events
            );
            (per_msg, rtt)
        })
        .collect()
}

/// One message outstanding (one QP): after a side's arm exactly one completion arrives
/// before it needs the next, so a count above 1 is never reached and only the period
/// timer fires: interrupts per message stay at exactly one, and each round trip becomes
/// the period (started by that one completion) plus the unmoderated round trip, exactly,
/// on the model's clock.
#[test]
fn moderation_with_one_message_outstanding_fires_on_the_period_timer() {
    let settings = [(0u16, 0u16), (4, 50), (16, 200)];
    let rows = sweep(1, 40, &settings);
    let base = rows[0].1.typical_us;
    for (r, &(count, period)) in rows.iter().zip(&settings) {
        // One wake, one interrupt, per message received, whatever the setting.
        assert_eq!(r.0, 1.0, "{count}/{period}: {rows:?}");
        if period > 0 {
            assert_eq!(
                r.1.typical_us,
                f64::from(period) + base,
                "{count}/{period}: {rows:?}"
            );
        }
    }
}

/// Sixteen QPs, a message in flight on each: on the model every QP's message of a round
/// arrives in the same microsecond, so one wake takes the whole burst, and moderation has
/// nothing left to merge: the client's interrupts per message are the same whatever the
/// setting. A count the round cannot reach (64 against its 32 completions) waits for the
/// period: the typical round trip is then the period plus the unmoderated one, exactly;
/// counts the round reaches leave it as it was.
#[test]
fn moderation_with_a_burst_per_round_leaves_one_interrupt_per_burst() {
    let (qps, iters) = (16, 640);
    let settings = [(0u16, 0u16), (4, 20), (16, 100), (64, 200)];
    let rows = sweep(qps, iters, &settings);
    let base = rows[0].1.typical_us;
    for (r, &(count, period)) in rows.iter().zip(&settings) {
        // One interrupt per round of 16 messages, whatever the setting.
        assert_eq!(r.0, 1.0 / f64::from(qps), "{count}/{period}: {rows:?}");
        let expected = if count > 2 * qps as u16 {
            f64::from(period) + base
        } else {
            base
        };
        assert_eq!(r.1.typical_us, expected, "{count}/{period}: {rows:?}");
    }
}
