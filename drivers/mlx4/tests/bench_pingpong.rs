//! The benchmark (`bench`) over the real driver and two in-process model HCAs: client and
//! server are stepped alternately in one thread while the fabric's clock advances 1 µs per
//! round (virtual time, so latencies are deterministic and timeouts cost nothing).

mod common;

use bench::line::PREFIX;
use bench::{
    BenchEnv, BenchError, PingPong, PingPongConfig, Role, Status, StepBudget, SweepSummary,
    Transport,
};
use common::bench_env::SimEnv;
use common::*;
use mlx4::{Hca, Platform};
use sim::{DeviceProfile, FabricConfig};

struct Node {
    hca: Hca<SimPlatform>,
    env: SimEnv,
    out: String,
    lid: u16,
}

fn node(p: SimPlatform, port: u8) -> Node {
    let env = SimEnv::new(&p);
    let mut hca = Hca::init(p, test_config()).expect("bring-up");
    let lid = hca.wait_port_active(port, 5000).expect("port active").lid;
    Node {
        hca,
        env,
        out: String::new(),
        lid,
    }
}

struct Outcome {
    client: Result<SweepSummary, BenchError>,
    server: Result<SweepSummary, BenchError>,
    client_out: String,
    server_out: String,
    client_lid: u16,
    server_lid: u16,
    client_peer: Option<bench::Endpoint>,
    server_peer: Option<bench::Endpoint>,
    client_progress: Vec<(u32, u32)>,
    /// The model's behaviour traces of both HCAs (empty unless the fabric records them).
    traces: [String; 2],
    /// Interrupts (MSI-X messages and INTx assertions) each model HCA raised, bring-up
    /// included: client, server.
    interrupts: [u64; 2],
    /// isr mode: the model's interrupts handed to the bench's completion handler.
    isr_deliveries: [u64; 2],
    /// The fabric's time from the client's start until both nodes had finished.
    took_us: u64,
}

/// Runs `client` and `server` to completion on one fabric; the server starts `late_us`
/// microseconds after the client. Panics if the pair has not finished within `max_us`.
fn run_pair(
    fabric: FabricConfig,
    client: impl FnOnce(u16) -> PingPongConfig,
    server: impl FnOnce(u16) -> PingPongConfig,
    late_us: u64,
    max_us: u64,
) -> Outcome {
    run_pair_on(
        DeviceProfile::default(),
        1,
        fabric,
        None,
        client,
        server,
        late_us,
        max_us,
    )
}

/// `run_pair` with both HCAs built from `profile`, the LIDs taken on port `port`, and the
/// fabric dropping what `drop_rule` picks (the client is HCA 0, the server HCA 1).
#[allow(clippy::too_many_arguments)]
fn run_pair_on(
    profile: DeviceProfile,
    port: u8,
    fabric: FabricConfig,
    drop_rule: Option<sim::DropRule>,
    client: impl FnOnce(u16) -> PingPongConfig,
    server: impl FnOnce(u16) -> PingPongConfig,
    late_us: u64,
    max_us: u64,
) -> Outcome {
    let nodes = (profile, port, drop_rule);
    run_pair_ticking(nodes, fabric, client, server, late_us, max_us, 1)
}

/// `run_pair_on` with `tick_us` microseconds of the fabric's clock passing between two
/// rounds of steps (1 everywhere else): a test whose waits last seconds of that clock
/// runs them in fewer rounds.
#[allow(clippy::too_many_arguments)]
fn run_pair_ticking(
    (profile, port, drop_rule): (DeviceProfile, u8, Option<sim::DropRule>),
    fabric: FabricConfig,
    client: impl FnOnce(u16) -> PingPongConfig,
    server: impl FnOnce(u16) -> PingPongConfig,
    late_us: u64,
    max_us: u64,
    tick_us: u64,
) -> Outcome {
    let (m, mut ps) = machine_with(2, fabric, profile);
    m.borrow_mut().fabric().set_drop_rule(drop_rule);
    let p1 = ps.remove(1);
    let p0 = ps.remove(0);
    let mut a = node(p0, port);
    let mut b = node(p1, port);
    let ccfg = client(b.lid);
    let scfg = server(a.lid);
    let mut pa = Some(PingPong::start(&mut a.hca, &mut a.env, &ccfg).expect("client start"));
    let mut pb: Option<PingPong<Hca<SimPlatform>>> = None;
    let budget = StepBudget::interleaved();
    let t0 = a.env.now_ns();
    let mut ra: Option<Result<SweepSummary, BenchError>> = None;
    let mut rb: Option<Result<SweepSummary, BenchError>> = None;
    let (mut peer_a, mut peer_b) = (None, None);
    while ra.is_none() || rb.is_none() {
        let now = a.env.now_ns() - t0;
        assert!(
            now < max_us * 1000,
            "the pair did not finish in {max_us} µs"
        );
        if let Some(pp) = pa.as_mut() {
            match pp.step(&mut a.hca, &mut a.env, &mut a.out, budget) {
                Ok(Status::Running) => {}
                r => {
                    let pp = pa.take().unwrap();
                    peer_a = pp.peer();
                    ra = Some(r.map(|_| pp.summary()));
                    pp.close(&mut a.hca, &mut a.env);
                }
            }
        }
        if pb.is_none() && rb.is_none() && now >= late_us * 1000 {
            pb = Some(PingPong::start(&mut b.hca, &mut b.env, &scfg).expect("server start"));
        }
        if let Some(pp) = pb.as_mut() {
            match pp.step(&mut b.hca, &mut b.env, &mut b.out, budget) {
                Ok(Status::Running) => {}
                r => {
                    let pp = pb.take().unwrap();
                    peer_b = pp.peer();
                    rb = Some(r.map(|_| pp.summary()));
                    pp.close(&mut b.hca, &mut b.env);
                }
            }
        }
        a.env.p.delay_us(tick_us);
    }
    let took_us = (a.env.now_ns() - t0) / 1000;
    assert_eq!(a.env.live(), 0, "client buffers freed");
    assert_eq!(b.env.live(), 0, "server buffers freed");
    let (pa_, pb_) = (a.env.p.clone_handle(), b.env.p.clone_handle());
    a.hca.close().unwrap();
    b.hca.close().unwrap();
    assert_no_violations(&pa_);
    assert_no_violations(&pb_);
    let traces = [&pa_, &pb_].map(|p| p.m.borrow().fabric_ref().trace(p.hca));
    let interrupts = [&pa_, &pb_].map(|p| p.m.borrow().fabric_ref().counters(p.hca).interrupts);
    Outcome {
        client: ra.unwrap(),
        server: rb.unwrap(),
        client_out: a.out,
        server_out: b.out,
        client_lid: a.lid,
        server_lid: b.lid,
        client_peer: peer_a,
        server_peer: peer_b,
        client_progress: a.env.progress,
        traces,
        interrupts,
        isr_deliveries: [a.env.isr_deliveries.get(), b.env.isr_deliveries.get()],
        took_us,
    }
}

impl SimEnv {
    /// One microsecond passes for both nodes (they share the fabric's clock).
    fn relax_time(&mut self) {
        self.p.delay_us(1);
    }
}

fn cfg(t: Transport, role: Role, peer: u16, kv: &[(&str, &str)]) -> PingPongConfig {
    let mut c = PingPongConfig::new(t, role);
    c.peer_lid = Some(peer);
    c.wait_timeout_ns = 2_000_000;
    c.peer_timeout_ns = 2_000_000_000;
    c.verify = true;
    for (k, v) in kv {
        c.apply(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
    c
}

/// A field of a result line (number, string or literal), as text.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let pat = format!("\"{key}\":");
    let at = line
        .find(&pat)
        .unwrap_or_else(|| panic!("{key} missing in {line}"))
        + pat.len();
    let rest = &line[at..];
    let end = rest.find([',', '}']).unwrap();
    rest[..end].trim_matches('"')
}

fn num(line: &str, key: &str) -> f64 {
    field(line, key).parse().unwrap()
}

fn results(out: &str) -> Vec<&str> {
    out.lines().filter(|l| l.starts_with(PREFIX)).collect()
}

/// Every size present, in order, with the expected role, sample count and sane statistics.
fn check_sweep(out: &str, role: &str, t: &str, sizes: &[u32], samples: usize, lossless: bool) {
    check_sweep_from(out, role, t, sizes, samples, lossless, true)
}

/// `check_sweep`; with `positive_min` false a sample may be 0 µs: on the in-process fabric a
/// READ or atomic is answered by the peer's HCA within the microsecond of virtual time it
/// was posted in, without the peer's software (a ping-pong always waits for the peer's
/// step).
fn check_sweep_from(
    out: &str,
    role: &str,
    t: &str,
    sizes: &[u32],
    samples: usize,
    lossless: bool,
    positive_min: bool,
) {
    let lines = results(out);
    assert_eq!(lines.len(), sizes.len(), "{role} result lines:\n{out}");
    for (l, &size) in lines.iter().zip(sizes) {
        assert_eq!(num(l, "bytes") as u32, size, "{l}");
        assert_eq!(field(l, "role"), role);
        assert_eq!(field(l, "transport"), t);
        assert_eq!(field(l, "aborted"), "false", "{l}");
        if lossless {
            assert_eq!(num(l, "samples") as usize, samples, "{l}");
            assert_eq!(field(l, "lost"), "0", "{l}");
            assert_eq!(field(l, "retries"), "0", "{l}");
        }
        let (min, typ, max, avg) = (
            num(l, "t_min_us"),
            num(l, "t_typical_us"),
            num(l, "t_max_us"),
            num(l, "t_avg_us"),
        );
        assert!(
            (min > 0.0 || !positive_min)
                && min >= 0.0
                && min <= typ
                && typ <= max
                && min <= avg
                && avg <= max,
            "{l}"
        );
        assert!(num(l, "true_max_us") >= max, "{l}");
        assert_eq!(num(l, "tsc_mhz"), 1000.0);
    }
    // perftest's table: header once, then one row per size.
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with(" #bytes #iterations"))
            .count(),
        1
    );
    let rows = out
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .and_then(|w| w.parse::<u32>().ok())
                .is_some_and(|n| sizes.contains(&n))
                && l.contains('\t')
        })
        .count();
    assert_eq!(rows, sizes.len(), "table rows:\n{out}");
}

fn pow2(from: u32, to: u32) -> Vec<u32> {
    (from.trailing_zeros()..=to.trailing_zeros())
        .map(|s| 1 << s)
        .collect()
}

#[test]
fn ud_sweep_every_size_to_the_mtu_with_verified_payloads() {
    let kv = [("size", "all"), ("iters", "20")];
    let o = run_pair(
        FabricConfig::default(),
        |lid| cfg(Transport::Ud, Role::Client, lid, &kv),
        |lid| cfg(Transport::Ud, Role::Server, lid, &kv),
        0,
        20_000_000,
    );
    let c = o.client.expect("client");
    let s = o.server.expect("server");
    // The model's port is 4096 or 2048: perftest's ConnectX-3 rule gives 2048 either way.
    assert_eq!(c.mtu, 2048);
    let sizes = pow2(2, 2048);
    assert_eq!(sizes.len(), 11);
    check_sweep(&o.client_out, "client", "UD", &sizes, 19, true);
    check_sweep(&o.server_out, "server", "UD", &sizes, 19, true);
    assert_eq!((c.sizes, c.aborted, c.lost), (11, 0, 0));
    assert_eq!((s.sizes, s.aborted, s.lost), (11, 0, 0));
    assert!(c.clean_finish && s.clean_finish);
    // The exchange: each side learned the other's data QP, LID and PSN.
    assert_eq!(o.client_peer.unwrap().lid, o.server_lid);
    assert_eq!(o.server_peer.unwrap().lid, o.client_lid);
    assert_eq!(c.peer, s.local);
    assert_eq!(s.peer, c.local);
    // Inline up to 188 B (perftest's UD default), not from 256 B.
    for l in results(&o.client_out) {
        let inline = num(l, "bytes") <= 188.0;
        assert_eq!(field(l, "inline"), inline.to_string(), "{l}");
    }
    assert!(o.client_out.contains(" Connection type : UD"));
    assert_eq!(o.client_progress.first(), Some(&(0, 11)));
    assert_eq!(o.client_progress.last(), Some(&(11, 11)));
    assert!(o.client_out.contains(" TX depth        : 1"));
    assert!(o.server_out.contains(" RX depth        : 20"));
}

#[test]
fn uc_sweep_every_size_to_8_mib_with_verified_payloads() {
    let kv = [("size", "all"), ("iters", "5")];
    let o = run_pair(
        FabricConfig::default(),
        |lid| cfg(Transport::Uc, Role::Client, lid, &kv),
        |lid| cfg(Transport::Uc, Role::Server, lid, &kv),
        0,
        200_000_000,
    );
    let c = o.client.expect("client");
    o.server.expect("server");
    let sizes = pow2(2, 8 << 20);
    assert_eq!(sizes.len(), 23);
    check_sweep(&o.client_out, "client", "UC", &sizes, 4, true);
    check_sweep(&o.server_out, "server", "UC", &sizes, 4, true);
    assert_eq!(c.sizes, 23);
    for l in results(&o.client_out) {
        let inline = num(l, "bytes") <= 236.0;
        assert_eq!(field(l, "inline"), inline.to_string(), "{l}");
    }
}

#[test]
fn event_driven_completions_measure_like_polling() {
    let kv = [("size", "64"), ("iters", "50"), ("completion", "event")];
    let o = run_pair(
        FabricConfig::default(),
        |lid| cfg(Transport::Uc, Role::Client, lid, &kv),
        |lid| cfg(Transport::Uc, Role::Server, lid, &kv),
        0,
        5_000_000,
    );
    o.client.expect("client");
    o.server.expect("server");
    check_sweep(&o.client_out, "client", "UC", &[64], 49, true);
    let l = results(&o.client_out)[0];
    assert_eq!(field(l, "completion"), "event");
}

#[test]
fn a_last_size_longer_than_the_peer_timeout_still_ends_with_the_handshake() {
    // The peer's data answers are heard during a size, not counted as rendezvous traffic:
    // a last size measured for longer than `peer_timeout` must not make the server give up
    // on the client's Done it is about to receive.
    let kv = [("size", "64"), ("iters", "20000"), ("peer_timeout_ms", "5")];
    let o = run_pair(
        FabricConfig::default(),
        |lid| cfg(Transport::Uc, Role::Client, lid, &kv),
        |lid| cfg(Transport::Uc, Role::Server, lid, &kv),
        0,
        50_000_000,
    );
    let server = o.server.expect("server");
    let client = o.client.expect("client");
    assert!(client.clean_finish && server.clean_finish);
    let l = results(&o.server_out)[0];
    let took_us = num(l, "t_avg_us") * 2.0 * num(l, "iterations");
    assert!(
        took_us > 5_000.0,
        "the size took {took_us} µs, not above 5 ms"
    );
}

#[test]
fn lost_packets_are_counted_and_the_sweep_finishes() {
    let fabric = FabricConfig {
        faults: sim::Faults {
            drop_probability: 0.03,
            ..sim::Faults::default()
        },
        seed: 7,
        ..FabricConfig::default()
    };
    let kv = [
        ("size", "all"),
        ("iters", "100"),
        ("loss_limit", "100"),
        ("timeout_ms", "1"),
    ];
    let o = run_pair(
        fabric,
        |lid| cfg(Transport::Ud, Role::Client, lid, &kv),
        |lid| cfg(Transport::Ud, Role::Server, lid, &kv),
        0,
        60_000_000,
    );
    let c = o.client.expect("client finishes despite losses");
    let s = o.server.expect("server finishes despite losses");
    assert_eq!(c.sizes, 11);
    assert_eq!(c.aborted, 0);
    assert!(c.lost > 0 && c.retries > 0, "losses counted: {c:?}");
    // Every client timeout is one of: the request lost (the server sees the retry flag
    // and counts a loss) or the answer lost (the server sees a duplicate and answers it
    // again: a retry).
    assert!(
        s.lost > 0 && s.retries > 0,
        "server saw retries and duplicates: {s:?}"
    );
    let lines = results(&o.client_out);
    assert_eq!(lines.len(), 11);
    let mut lost_sizes = 0;
    for l in &lines {
        let lost = num(l, "lost") as usize;
        // Intervals containing a wait are excluded from the statistics.
        assert!(num(l, "samples") as usize <= 99 && num(l, "samples") as usize >= 99 - lost);
        if lost > 0 {
            lost_sizes += 1;
            // A 1 ms wait never shows up in the figures: t_max stays far below it.
            assert!(num(l, "true_max_us") < 500.0, "{l}");
        }
    }
    assert!(lost_sizes > 0);
}

#[test]
fn a_lossy_uc_sweep_with_the_default_waits_reports_every_size_and_ends_cleanly() {
    // `cargo qemu pingpong -c UC -a -n 20 --drop-probability 0.01 --seed 7`: the defaults
    // (`loss_limit` 100) and the emulated runs' wait bound (`timeout_ms` 2000). From
    // 128 KiB up most UC round trips lose a packet (64 of 2048 bytes each way), from 512 KiB
    // nearly all: those sizes are given up once their losses show they cannot finish, and
    // each loss waits what the sizes' round trips take (at least a tenth of timeout_ms,
    // 200 ms), not 2 s.
    let kv = [("size", "all"), ("iters", "20"), ("timeout_ms", "2000")];
    let fabric = FabricConfig {
        faults: sim::Faults {
            drop_probability: 0.01,
            ..sim::Faults::default()
        },
        seed: 7,
        ..FabricConfig::default()
    };
    let o = run_pair_ticking(
        (DeviceProfile::default(), 1, None),
        fabric,
        |lid| cfg(Transport::Uc, Role::Client, lid, &kv),
        |lid| cfg(Transport::Uc, Role::Server, lid, &kv),
        0,
        // Every loss waiting 2 s would take longer than this.
        300_000_000,
        // Waits of 100 ms and more: 20 µs rounds keep the run short.
        20,
    );
    let c = o.client.expect("client finishes");
    let s = o.server.expect("server finishes");
    assert!(c.clean_finish, "the client's Done was answered: {c:?}");
    assert!(
        s.clean_finish,
        "the server answered the client's Done: {s:?}"
    );
    let sizes = pow2(2, 8 << 20);
    assert_eq!(c.sizes, sizes.len() as u32);
    for (out, role) in [(&o.client_out, "client"), (&o.server_out, "server")] {
        let lines = results(out);
        let reported: Vec<u32> = lines.iter().map(|l| num(l, "bytes") as u32).collect();
        assert_eq!(
            reported, sizes,
            "{role}: every size reported once, in order"
        );
    }
    let lines = results(&o.client_out);
    let aborted: Vec<&&str> = lines
        .iter()
        .filter(|l| field(l, "aborted") == "true")
        .collect();
    assert_eq!(aborted.len() as u32, c.aborted);
    assert!(c.aborted > 0, "the largest sizes cannot get through: {c:?}");
    for l in &aborted {
        // Given up on its loss rate, long before the loss limit.
        assert!(num(l, "lost") < 20.0, "{l}");
    }
    for l in lines.iter().filter(|l| num(l, "bytes") <= 4096.0) {
        assert_eq!(
            field(l, "aborted"),
            "false",
            "small sizes lose too little: {l}"
        );
    }
    // Every loss waited about what its size's round trips take: the 200 ms floor here
    // (the model delivers at once), so the whole sweep took no more than that per loss,
    // plus a barrier repeat per size.
    let waits = c.lost + u64::from(c.sizes);
    assert!(
        o.took_us <= waits * 250_000,
        "{} µs for {} losses over {} sizes",
        o.took_us,
        c.lost,
        c.sizes
    );
}

#[test]
fn a_lost_done_answer_is_answered_again() {
    // The server's first DoneAck is lost: the client asks again and the server, which
    // stays a little after answering, answers again, so both ends finish cleanly.
    let mut dropped = 0;
    let rule: sim::DropRule = Box::new(move |p: &sim::Packet| {
        let done_ack = p.src_hca == 1
            && p.qkey == bench::config::RDV_QKEY
            && p.payload.get(5) == Some(&(bench::rendezvous::Kind::DoneAck as u8));
        if done_ack && dropped == 0 {
            dropped += 1;
            return true;
        }
        false
    });
    let kv = [("size", "64"), ("iters", "10")];
    let o = run_pair_on(
        DeviceProfile::default(),
        1,
        FabricConfig::default(),
        Some(rule),
        |lid| cfg(Transport::Uc, Role::Client, lid, &kv),
        |lid| cfg(Transport::Uc, Role::Server, lid, &kv),
        0,
        5_000_000,
    );
    let c = o.client.expect("client");
    let s = o.server.expect("server");
    assert!(c.clean_finish, "the repeated Done was answered: {c:?}");
    assert!(s.clean_finish, "{s:?}");
    assert_eq!((c.sizes, c.lost, s.sizes), (1, 0, 1));
}

#[test]
fn a_slow_answer_on_a_lossless_fabric_is_a_retry_not_a_loss() {
    // Every packet takes 3 ms through the switch and the first waits are far shorter
    // (timeout_ms=1): the client's waits run out and it sends retries, but every first try
    // is answered in the end. Nothing was lost, so neither side may count a loss.
    let fabric = FabricConfig {
        faults: sim::Faults {
            delay: std::time::Duration::from_millis(3),
            ..sim::Faults::default()
        },
        ..FabricConfig::default()
    };
    let kv = [("size", "64"), ("iters", "20"), ("timeout_ms", "1")];
    let o = run_pair(
        fabric,
        |lid| cfg(Transport::Ud, Role::Client, lid, &kv),
        |lid| cfg(Transport::Ud, Role::Server, lid, &kv),
        0,
        60_000_000,
    );
    let c = o.client.expect("client");
    let s = o.server.expect("server");
    assert!(c.retries > 0, "the waits ran out: {c:?}");
    assert_eq!((c.sizes, c.aborted, c.lost), (1, 0, 0), "{c:?}");
    assert_eq!((s.aborted, s.lost), (0, 0), "{s:?}");
    for l in results(&o.client_out) {
        assert_eq!(field(l, "lost"), "0", "{l}");
    }
}

#[test]
fn sizes_beyond_the_loss_limit_are_aborted_and_reported() {
    aborted_sizes(Transport::Ud, "all", 11, &[]);
}

#[test]
fn uc_sizes_beyond_the_loss_limit_are_aborted_and_the_qps_resynchronised() {
    // UC PSNs drift when a size is abandoned mid-message: both sides reset their data QPs.
    aborted_sizes(Transport::Uc, "all", 23, &[]);
}

#[test]
fn write_lat_uc_sizes_beyond_the_loss_limit_are_aborted_and_the_qps_resynchronised() {
    aborted_sizes(Transport::Uc, "all", 23, &[("test", "write_lat")]);
}

fn aborted_sizes(t: Transport, size: &str, n: u32, extra: &[(&str, &str)]) {
    let fabric = FabricConfig {
        faults: sim::Faults {
            drop_probability: 0.04,
            ..sim::Faults::default()
        },
        seed: 3,
        ..FabricConfig::default()
    };
    let mut kv = vec![
        ("size", size),
        ("iters", "40"),
        ("loss_limit", "1"),
        ("timeout_ms", "1"),
        ("peer_timeout_ms", "2000"),
    ];
    kv.extend_from_slice(extra);
    let o = run_pair(
        fabric,
        |lid| cfg(t, Role::Client, lid, &kv),
        |lid| cfg(t, Role::Server, lid, &kv),
        0,
        600_000_000,
    );
    let c = o.client.expect("client finishes");
    assert_eq!(c.sizes, n, "every size is reported");
    assert!(c.aborted > 0, "{c:?}");
    assert!(c.aborted < n, "some sizes still complete: {c:?}");
    let lines = results(&o.client_out);
    assert_eq!(lines.len() as u32, n);
    let aborted: Vec<_> = lines
        .iter()
        .filter(|l| field(l, "aborted") == "true")
        .collect();
    assert_eq!(aborted.len() as u32, c.aborted);
    for l in aborted {
        assert_eq!(field(l, "samples"), "0");
        assert_eq!(field(l, "t_typical_us"), "null");
        assert_eq!(num(l, "lost") as u32, 2, "aborted at the second loss: {l}");
    }
    // A size after an aborted one completes again: the two sides resynchronised.
    let first_abort = lines
        .iter()
        .position(|l| field(l, "aborted") == "true")
        .unwrap();
    assert!(
        lines[first_abort..]
            .iter()
            .any(|l| field(l, "aborted") == "false" && num(l, "samples") > 0.0),
        "{}",
        o.client_out
    );
    // The server either finished cleanly or noticed the client leave; it never hangs.
    if let Err(e) = o.server {
        assert_eq!(e, BenchError::PeerLost);
    }
}

#[test]
fn rendezvous_probes_lids_and_waits_for_a_late_server() {
    let kv = [("size", "2"), ("iters", "10"), ("probe_lids", "1-8")];
    let o = run_pair(
        FabricConfig::default(),
        |_| {
            let mut c = cfg(Transport::Ud, Role::Client, 0, &kv);
            c.peer_lid = None;
            c
        },
        |_| {
            let mut c = cfg(Transport::Ud, Role::Server, 0, &kv);
            c.peer_lid = None;
            c
        },
        50_000,
        10_000_000,
    );
    let c = o.client.expect("client");
    o.server.expect("server");
    assert_eq!(c.peer.lid, o.server_lid, "found by probing");
    check_sweep(&o.client_out, "client", "UD", &[2], 9, true);
}

#[test]
fn the_rendezvous_qpn_follows_the_firmware_reserved_qp_count() {
    // Firmware profiles reserving 64, 128 and 256 QPs, two ports, traffic on port 2: both
    // nodes derive the same well-known QPN from their own device and the sweep runs.
    for log_rsvd_qps in [6u8, 7, 8] {
        let profile = DeviceProfile {
            log_rsvd_qps,
            num_ports: 2,
            ..DeviceProfile::default()
        };
        let kv = [("size", "64"), ("iters", "10"), ("ib_port", "2")];
        let o = run_pair_on(
            profile,
            2,
            FabricConfig::default(),
            None,
            |lid| cfg(Transport::Uc, Role::Client, lid, &kv),
            |lid| cfg(Transport::Uc, Role::Server, lid, &kv),
            0,
            10_000_000,
        );
        let reserved = 1u32 << log_rsvd_qps;
        let c = o
            .client
            .unwrap_or_else(|e| panic!("{reserved} reserved QPs, client: {e:?}"));
        let s = o
            .server
            .unwrap_or_else(|e| panic!("{reserved} reserved QPs, server: {e:?}"));
        assert_eq!((c.sizes, c.aborted, s.sizes, s.aborted), (1, 0, 1, 0));
        let qpn = format!("in-band UD (QPN {:#06x})", 2 * reserved - 1);
        assert!(o.client_out.contains(&qpn), "{reserved}: {}", o.client_out);
        assert!(o.server_out.contains(&qpn), "{reserved}: {}", o.server_out);
        check_sweep(&o.client_out, "client", "UC", &[64], 9, true);
        check_sweep(&o.server_out, "server", "UC", &[64], 9, true);
    }
}

#[test]
fn a_server_waits_out_a_client_retrying_a_lost_last_answer() {
    // The server's answer to the last iteration is lost (and so would every answer to a
    // repeat be); the client asks again every wait, `loss_limit` times, for longer than
    // the peer timeout, then gives the size up and ends with Done. The server, in its
    // final phase, cannot even hear the repeats (perftest posts exactly `iterations`
    // receives per size), yet it must not declare a client lost that is still retrying.
    let iters = 10u32;
    let mut answers = 0u32;
    let rule: sim::DropRule = Box::new(move |p: &sim::Packet| {
        if p.src_hca != 1 || p.transport != sim::qp::ServiceType::Uc {
            return false;
        }
        answers += 1;
        answers >= iters
    });
    let kv = [("size", "64"), ("iters", "10"), ("loss_limit", "40")];
    let o = run_pair_on(
        DeviceProfile::default(),
        1,
        FabricConfig::default(),
        Some(rule),
        |lid| {
            let mut c = cfg(Transport::Uc, Role::Client, lid, &kv);
            c.peer_timeout_ns = 30_000_000;
            c
        },
        |lid| {
            let mut c = cfg(Transport::Uc, Role::Server, lid, &kv);
            c.peer_timeout_ns = 30_000_000;
            c
        },
        0,
        2_000_000,
    );
    // 40 losses x 2 ms of waiting: 80 ms of repeats, well beyond the 30 ms peer timeout.
    let c = o.client.expect("client");
    let s = o
        .server
        .expect("a server waits out a client that is still retrying");
    assert_eq!((c.sizes, c.aborted), (1, 1), "the client gave the size up");
    assert!(s.clean_finish, "Done was answered");
    assert!(c.clean_finish, "DoneAck arrived");
}

#[test]
fn a_last_answer_repeated_after_its_report_is_kept_apart_from_the_size_counts() {
    // The server's answer to the last iteration of the first size is lost once: the server
    // has already reported that size when the client asks again, and answers between sizes
    // (after the last size it could not even hear the repeat: no receive is left posted).
    // The client's line counts the loss; the server's summary keeps its repeat apart, so
    // its `lost`/`retries` stay the sums of its result lines.
    let iters = 5u32;
    let mut answers = 0u32;
    let rule: sim::DropRule = Box::new(move |p: &sim::Packet| {
        if p.src_hca != 1 || p.transport != sim::qp::ServiceType::Uc {
            return false;
        }
        answers += 1;
        answers == iters
    });
    let kv = [("size", "all"), ("iters", "5"), ("loss_limit", "5")];
    let o = run_pair_on(
        DeviceProfile::default(),
        1,
        FabricConfig::default(),
        Some(rule),
        |lid| cfg(Transport::Uc, Role::Client, lid, &kv),
        |lid| cfg(Transport::Uc, Role::Server, lid, &kv),
        0,
        60_000_000,
    );
    let c = o.client.expect("client");
    let s = o.server.expect("server");
    assert_eq!(
        (c.sizes, c.aborted, c.lost, c.retries),
        (23, 0, 1, 1),
        "{c:?}"
    );
    let first = results(&o.client_out)[0];
    assert_eq!(
        (num(first, "lost"), num(first, "retries")),
        (1.0, 1.0),
        "{first}"
    );
    let lines = results(&o.server_out);
    let sum = |key: &str| lines.iter().map(|l| num(l, key) as u64).sum::<u64>();
    assert_eq!((s.lost, s.retries), (sum("lost"), sum("retries")), "{s:?}");
    assert_eq!((s.lost, s.late_repeats), (0, 1), "{s:?}");
}

#[test]
fn a_client_reaches_a_server_listening_at_another_rendezvous_qpn() {
    // The server's rendezvous QP is not at the client's well-known QPN (as a Linux server's,
    // whose QPN the verbs assign): the client's Hellos go to `peer_rdv_qpn`, the rest to the
    // HelloAck's source QPN; the server answers the Hello's source QPN (0x7F).
    let common = [("size", "64"), ("iters", "10")];
    let client = [common[0], common[1], ("peer_rdv_qpn", "0x70")];
    let server = [common[0], common[1], ("rdv_qpn", "0x70")];
    let o = run_pair(
        FabricConfig::default(),
        |lid| cfg(Transport::Uc, Role::Client, lid, &client),
        |lid| cfg(Transport::Uc, Role::Server, lid, &server),
        0,
        10_000_000,
    );
    let c = o.client.expect("client");
    let s = o.server.expect("server");
    assert_eq!((c.sizes, c.aborted, s.sizes, s.aborted), (1, 0, 1, 0));
    check_sweep(&o.client_out, "client", "UC", &[64], 9, true);
    check_sweep(&o.server_out, "server", "UC", &[64], 9, true);
}

#[test]
fn hellos_to_a_qpn_nobody_listens_at_end_in_peer_not_found() {
    let o = run_pair(
        FabricConfig::default(),
        |lid| {
            let mut c = cfg(
                Transport::Ud,
                Role::Client,
                lid,
                &[("peer_rdv_qpn", "0x71")],
            );
            c.peer_timeout_ns = 50_000_000;
            c
        },
        |lid| {
            let mut c = cfg(Transport::Ud, Role::Server, lid, &[("rdv_qpn", "0x70")]);
            c.peer_timeout_ns = 50_000_000;
            c
        },
        0,
        1_000_000_000,
    );
    assert_eq!(o.client.unwrap_err(), BenchError::PeerNotFound);
    assert_eq!(o.server.unwrap_err(), BenchError::PeerNotFound);
}

#[test]
fn lossy_rendezvous_still_connects() {
    let fabric = FabricConfig {
        faults: sim::Faults {
            drop_probability: 0.5,
            ..sim::Faults::default()
        },
        seed: 11,
        ..FabricConfig::default()
    };
    let kv = [
        ("size", "2"),
        ("iters", "5"),
        ("loss_limit", "1000"),
        ("timeout_ms", "1"),
    ];
    let o = run_pair(
        fabric,
        |lid| cfg(Transport::Uc, Role::Client, lid, &kv),
        |lid| cfg(Transport::Uc, Role::Server, lid, &kv),
        3_000,
        60_000_000,
    );
    let c = o.client.expect("client");
    assert_eq!(c.sizes, 1);
    assert_eq!(c.aborted, 0);
}

#[test]
fn mismatched_parameters_are_refused_by_both_sides() {
    let o = run_pair(
        FabricConfig::default(),
        |lid| cfg(Transport::Ud, Role::Client, lid, &[("iters", "20")]),
        |lid| cfg(Transport::Ud, Role::Server, lid, &[("iters", "30")]),
        0,
        10_000_000,
    );
    assert_eq!(
        o.server.unwrap_err(),
        BenchError::PeerMismatch("iterations")
    );
    // The client hears nothing back and gives up within its bound.
    assert!(matches!(o.client, Err(BenchError::PeerNotFound)));
}

#[test]
fn a_missing_peer_is_a_bounded_typed_error() {
    let (_m, mut ps) = machine(1, FabricConfig::default());
    let mut a = node(ps.remove(0), 1);
    let mut c = cfg(Transport::Ud, Role::Client, 0, &[]);
    c.peer_lid = Some(0x30);
    c.peer_timeout_ns = 50_000_000;
    let mut pp = PingPong::start(&mut a.hca, &mut a.env, &c).unwrap();
    let t0 = a.env.now_ns();
    let r = loop {
        match pp.step(
            &mut a.hca,
            &mut a.env,
            &mut a.out,
            StepBudget::interleaved(),
        ) {
            Ok(Status::Running) => a.env.relax_time(),
            r => break r,
        }
        assert!(a.env.now_ns() - t0 < 1_000_000_000, "bounded");
    };
    // It gave up once the bound had passed, not long after.
    let waited = a.env.now_ns() - t0;
    assert!((50_000_000..60_000_000).contains(&waited), "{waited}");
    assert_eq!(r, Err(BenchError::PeerNotFound));
    pp.close(&mut a.hca, &mut a.env);
    assert_eq!(a.env.live(), 0);
    let probe = a.env.p.clone_handle();
    a.hca.close().unwrap();
    assert_no_violations(&probe);
}

#[test]
fn run_sweep_without_a_peer_ends_within_its_bound_and_frees_everything() {
    // The kernel's entry point: one node owning the CPU (`relax` lets virtual time pass).
    let (_m, mut ps) = machine(1, FabricConfig::default());
    let mut a = node(ps.remove(0), 1);
    let mut c = cfg(Transport::Uc, Role::Server, 0, &[("size", "all")]);
    c.peer_lid = None;
    c.peer_timeout_ns = 30_000_000;
    let t0 = a.env.now_ns();
    let r = bench::run_sweep(&mut a.hca, &mut a.env, &c, &mut a.out);
    assert_eq!(r, Err(BenchError::PeerNotFound));
    let waited = a.env.now_ns() - t0;
    assert!((30_000_000..40_000_000).contains(&waited), "{waited}");
    assert_eq!(
        a.env.live(),
        0,
        "run_sweep freed its memory on the error path"
    );
    // Everything it created is gone: the well-known QPN can be taken again.
    let mut again = PingPong::start(&mut a.hca, &mut a.env, &c).expect("second start");
    assert_eq!(
        again.step(
            &mut a.hca,
            &mut a.env,
            &mut a.out,
            StepBudget::interleaved()
        ),
        Ok(Status::Running)
    );
    again.close(&mut a.hca, &mut a.env);
    assert_eq!(a.env.live(), 0);
    let probe = a.env.p.clone_handle();
    a.hca.close().unwrap();
    assert_no_violations(&probe);
}

#[test]
fn event_mode_losses_are_bounded_like_polling() {
    let fabric = FabricConfig {
        faults: sim::Faults {
            drop_probability: 0.05,
            ..sim::Faults::default()
        },
        seed: 5,
        ..FabricConfig::default()
    };
    let kv = [
        ("size", "64"),
        ("iters", "200"),
        ("completion", "event"),
        ("timeout_ms", "1"),
    ];
    let o = run_pair(
        fabric,
        |lid| cfg(Transport::Ud, Role::Client, lid, &kv),
        |lid| cfg(Transport::Ud, Role::Server, lid, &kv),
        0,
        60_000_000,
    );
    let c = o.client.expect("client");
    o.server.expect("server");
    assert!(c.lost > 0, "{c:?}");
    let l = results(&o.client_out)[0];
    assert_eq!(field(l, "completion"), "event");
    assert_eq!(field(l, "aborted"), "false");
    assert!(num(l, "true_max_us") < 500.0, "no wait in the figures: {l}");
}

// ---- write_lat (perftest's ib_write_lat) ---------------------------------------------------

#[test]
fn write_lat_over_rc_sweeps_every_size_to_8_mib_with_verified_payloads() {
    let kv = [("test", "write_lat"), ("size", "all"), ("iters", "5")];
    let o = run_pair(
        FabricConfig::default(),
        |lid| cfg(Transport::Rc, Role::Client, lid, &kv),
        |lid| cfg(Transport::Rc, Role::Server, lid, &kv),
        0,
        200_000_000,
    );
    let c = o.client.expect("client");
    let s = o.server.expect("server");
    let sizes = pow2(2, 8 << 20);
    check_sweep(&o.client_out, "client", "RC", &sizes, 4, true);
    check_sweep(&o.server_out, "server", "RC", &sizes, 4, true);
    assert_eq!((c.sizes, c.aborted, c.lost), (23, 0, 0));
    assert!(c.clean_finish && s.clean_finish);
    // The exchange carried each side's receive region and rkey to the other.
    assert_eq!(c.peer, s.local);
    assert_eq!(s.peer, c.local);
    assert!(c.local.addr != 0 && c.local.rkey != 0 && s.local.addr != 0);
    for l in results(&o.client_out) {
        assert_eq!(field(l, "test"), "write_lat", "{l}");
        // perftest's write inline limit: 220 B, so 2..128 B inline, 256 B and up not.
        let inline = num(l, "bytes") <= 220.0;
        assert_eq!(field(l, "inline"), inline.to_string(), "{l}");
    }
    assert!(o.client_out.contains("RDMA_Write Latency Test"));
    assert!(o.client_out.contains(" Connection type : RC"));
    assert!(o.client_out.contains(" Max inline data : 220[B]"));
}

#[test]
fn write_lat_over_uc_inline_and_multi_packet_sizes() {
    // 220 B: the largest inline WRITE; 5000 B: gathered, three packets at MTU 2048.
    for size in ["220", "221", "5000"] {
        let kv = [("test", "write_lat"), ("size", size), ("iters", "50")];
        let o = run_pair(
            FabricConfig::default(),
            |lid| cfg(Transport::Uc, Role::Client, lid, &kv),
            |lid| cfg(Transport::Uc, Role::Server, lid, &kv),
            0,
            20_000_000,
        );
        o.client.expect("client");
        o.server.expect("server");
        let n: u32 = size.parse().unwrap();
        check_sweep(&o.client_out, "client", "UC", &[n], 49, true);
        check_sweep(&o.server_out, "server", "UC", &[n], 49, true);
        let l = results(&o.client_out)[0];
        assert_eq!(field(l, "test"), "write_lat");
        assert_eq!(field(l, "inline"), (n <= 220).to_string(), "{l}");
    }
}

#[test]
fn write_lat_refuses_ud_like_perftest() {
    let (_m, mut ps) = machine(1, FabricConfig::default());
    let mut a = node(ps.remove(0), 1);
    let c = cfg(Transport::Ud, Role::Client, 2, &[("test", "write_lat")]);
    let r = PingPong::start(&mut a.hca, &mut a.env, &c);
    assert!(
        matches!(
            r,
            Err(BenchError::Config(bench::ConfigError::Invalid(
                bench::config::Rule::WriteLatOverUd
            )))
        ),
        "refused before any object exists"
    );
    assert_eq!(a.env.live(), 0);
    let probe = a.env.p.clone_handle();
    a.hca.close().unwrap();
    assert_no_violations(&probe);
}

#[test]
fn write_lat_and_send_lat_peers_refuse_each_other() {
    let o = run_pair(
        FabricConfig::default(),
        |lid| {
            let mut c = cfg(Transport::Uc, Role::Client, lid, &[("test", "write_lat")]);
            c.peer_timeout_ns = 20_000_000;
            c
        },
        |lid| cfg(Transport::Uc, Role::Server, lid, &[]),
        0,
        100_000_000,
    );
    assert_eq!(o.server.unwrap_err(), BenchError::PeerMismatch("test"));
    assert!(matches!(o.client, Err(BenchError::PeerNotFound)));
}

#[test]
fn write_lat_over_uc_counts_lost_writes_and_finishes() {
    let fabric = FabricConfig {
        faults: sim::Faults {
            drop_probability: 0.03,
            ..sim::Faults::default()
        },
        seed: 11,
        ..FabricConfig::default()
    };
    let kv = [
        ("test", "write_lat"),
        ("size", "1024"),
        ("iters", "200"),
        ("loss_limit", "100"),
        ("timeout_ms", "1"),
    ];
    let o = run_pair(
        fabric,
        |lid| cfg(Transport::Uc, Role::Client, lid, &kv),
        |lid| cfg(Transport::Uc, Role::Server, lid, &kv),
        0,
        60_000_000,
    );
    let c = o.client.expect("client finishes despite losses");
    let s = o.server.expect("server finishes despite losses");
    assert_eq!((c.sizes, c.aborted), (1, 0));
    assert!(c.lost > 0 && c.retries > 0, "client re-posted: {c:?}");
    assert!(s.lost > 0, "the server saw silences too: {s:?}");
    let l = results(&o.client_out)[0];
    let lost = num(l, "lost") as usize;
    let samples = num(l, "samples") as usize;
    // Intervals holding a wait leave the statistics; the 1 ms waits never show in them.
    assert!(samples < 199 && samples >= 199 - lost, "{l}");
    assert!(num(l, "true_max_us") < 500.0, "{l}");
}

#[test]
fn write_lat_over_rc_lost_packets_are_retransmitted_by_the_hca() {
    let fabric = FabricConfig {
        faults: sim::Faults {
            drop_probability: 0.02,
            ..sim::Faults::default()
        },
        seed: 5,
        ..FabricConfig::default()
    };
    // The wait outlasts the ACK timeout (14: 4.096 µs x 2^14 ≈ 67 ms): the HCA, not the
    // benchmark, recovers every loss.
    let kv = [
        ("test", "write_lat"),
        ("size", "64"),
        ("iters", "100"),
        ("timeout_ms", "1000"),
    ];
    let o = run_pair(
        fabric,
        |lid| cfg(Transport::Rc, Role::Client, lid, &kv),
        |lid| cfg(Transport::Rc, Role::Server, lid, &kv),
        0,
        2_000_000_000,
    );
    let c = o.client.expect("client");
    let s = o.server.expect("server");
    assert_eq!((c.aborted, c.lost, c.retries), (0, 0, 0), "{c:?}");
    assert_eq!((s.aborted, s.lost, s.retries), (0, 0, 0), "{s:?}");
    let l = results(&o.client_out)[0];
    assert_eq!(num(l, "samples") as u32, 99, "every interval kept: {l}");
    // A retransmitted packet costs one ACK timeout (≈ 67 ms, reported halved as RTT/2):
    // it shows in the raw maximum.
    assert!(num(l, "true_max_us") > 33_000.0, "{l}");
}

#[test]
fn device_rules_are_checked_on_the_device_and_name_both_numbers() {
    use bench::config::Rule;
    // A port whose MTU is 1024: a 2048-byte UD message passes the configuration's own
    // check (at most 2048 without `mtu`) and is refused once the port is known.
    let profile = sim::DeviceProfile {
        max_mtu: 3,
        ..sim::DeviceProfile::default()
    };
    let (_m, mut ps) = machine_with(1, FabricConfig::default(), profile);
    let mut a = node(ps.remove(0), 1);
    let c = cfg(Transport::Ud, Role::Client, 2, &[("size", "2048")]);
    assert_eq!(c.validate(), Ok(()));
    let e = PingPong::start(&mut a.hca, &mut a.env, &c)
        .err()
        .expect("refused");
    assert_eq!(
        e,
        BenchError::Config(bench::ConfigError::Invalid(Rule::UdSizeAboveMtu {
            size: 2048,
            mtu: 1024
        }))
    );
    assert_eq!(
        e.to_string(),
        "configuration: UD message of 2048 bytes is larger than the path MTU 1024"
    );
    // An inline limit above what the device's QPs carry.
    let max_inline = verbs::Device::query_device(&a.hca).max_inline;
    assert!(
        max_inline < 1024,
        "the model's limit is below the key's bound"
    );
    let c = cfg(Transport::Uc, Role::Client, 2, &[("inline", "1024")]);
    let e = PingPong::start(&mut a.hca, &mut a.env, &c)
        .err()
        .expect("refused");
    assert_eq!(
        e,
        BenchError::Config(bench::ConfigError::Invalid(Rule::InlineAboveDevice {
            inline: 1024,
            limit: max_inline
        }))
    );
    assert!(e.to_string().contains(&format!(
        "1024 bytes is more than the device's QP can carry ({max_inline})"
    )));
    assert_eq!(a.env.live(), 0, "nothing left allocated");
    let probe = a.env.p.clone_handle();
    a.hca.close().unwrap();
    assert_no_violations(&probe);
}

/// The differential check against Linux (docs/runner.md, "cargo qemu conformance"): the
/// driver's behaviour on the model, recorded over bring-up, UD and UC ping-pongs, an RC
/// write_lat, the subnet manager on a back-to-back cable, teardown and a second bring-up,
/// against the checked-in trace of Debian's mlx4 on the same model
/// (drivers/mlx4/conformance/linux.trace, kept current by the "linux" system test). Every
/// observation Linux never made must be a reviewed entry of departures.txt, and every entry
/// must still match something.
#[test]
fn driver_behaviour_matches_linux_or_a_reviewed_departure() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance");
    let linux = std::fs::read_to_string(dir.join("linux.trace")).expect("linux.trace");
    let departures = sim::conformance::parse_departures(
        &std::fs::read_to_string(dir.join("departures.txt")).expect("departures.txt"),
    )
    .expect("departures.txt parses");
    let traced = FabricConfig {
        trace: true,
        ..FabricConfig::default()
    };
    let mut traces = Vec::new();
    let runs: [(Transport, &[(&str, &str)]); 4] = [
        (Transport::Ud, &[("size", "64"), ("iters", "5")]),
        (Transport::Ud, &[("size", "1024"), ("iters", "5")]),
        (Transport::Uc, &[("size", "8192"), ("iters", "5")]),
        (
            Transport::Rc,
            &[("test", "write_lat"), ("size", "65536"), ("iters", "5")],
        ),
    ];
    for (t, kv) in runs {
        let o = run_pair(
            traced.clone(),
            |lid| cfg(t, Role::Client, lid, kv),
            |lid| cfg(t, Role::Server, lid, kv),
            0,
            20_000_000,
        );
        o.client.expect("client");
        o.server.expect("server");
        traces.extend(o.traces);
    }
    // The in-kernel subnet manager on a back-to-back cable (QP0, MLX WQEs, SMPs, MAD_IFC
    // Set), then a second bring-up after a full teardown in the same boot, as mode=hca does.
    {
        let (_m, mut ps) = machine(
            2,
            FabricConfig {
                topology: sim::Topology::BackToBack,
                subnet_manager: false,
                trace: true,
                ..FabricConfig::default()
            },
        );
        let pb = ps.remove(1);
        let pa = ps.remove(0);
        let (qa, qb) = (pa.clone_handle(), pb.clone_handle());
        let mut a = Hca::init(pa, test_config()).expect("bring-up A");
        let b = Hca::init(pb, test_config()).expect("bring-up B");
        let report = a
            .run_back_to_back_sm(1, &mlx4::smp::SmConfig::default())
            .expect("SM");
        assert_eq!((report.local_lid, report.peer_lid), (1, 2));
        a.close().unwrap();
        b.close().unwrap();
        Hca::init(qa.clone_handle(), test_config())
            .expect("second bring-up")
            .close()
            .unwrap();
        assert_no_violations(&qa);
        assert_no_violations(&qb);
        for p in [&qa, &qb] {
            traces.push(p.m.borrow().fabric_ref().trace(p.hca));
        }
    }
    let ours = sim::conformance::union(traces.iter().map(String::as_str));
    for prefix in [
        "cmd INIT_HCA ",
        "ctx QPC RC ",
        "wqe UD SEND ",
        "wqe RC RDMA_WRITE ",
        "rqe UD ",
        "wqe MLX SEND ",
        "order UNMAP_FA -> QUERY_FW",
    ] {
        assert!(
            ours.lines().any(|l| l.starts_with(prefix)),
            "no {prefix:?} in the trace:\n{ours}"
        );
    }
    let report = sim::conformance::compare(&ours, &linux, &departures);
    let text = report.render("ibkern", "Linux");
    if let Some(path) = std::env::var_os("IBKERN_CONFORMANCE_OUT") {
        std::fs::write(&path, &ours).expect("writing the trace");
        std::fs::write(format!("{}.report", path.to_string_lossy()), &text)
            .expect("writing the report");
    }
    assert!(
        report.uncovered().is_empty(),
        "the driver does on the card what Linux never does, and departures.txt does not \
         list it:\n{text}"
    );
    // These runs cover every scenario the file describes (bring-up twice, UD, UC, RC, the
    // subnet manager, teardown): an entry that matches nothing is a departure that is gone,
    // and must be removed so that the file stays a true list.
    assert!(
        report.unused.is_empty(),
        "departures.txt lists departures the driver no longer makes; remove them:\n{text}"
    );
}

#[test]
fn send_lat_over_rc_sweeps_every_size_to_8_mib_with_verified_payloads() {
    let kv = [("size", "all"), ("iters", "5")];
    let o = run_pair(
        FabricConfig::default(),
        |lid| cfg(Transport::Rc, Role::Client, lid, &kv),
        |lid| cfg(Transport::Rc, Role::Server, lid, &kv),
        0,
        200_000_000,
    );
    let c = o.client.expect("client");
    let s = o.server.expect("server");
    let sizes = pow2(2, 8 << 20);
    check_sweep(&o.client_out, "client", "RC", &sizes, 4, true);
    check_sweep(&o.server_out, "server", "RC", &sizes, 4, true);
    assert_eq!((c.sizes, c.aborted, c.lost), (23, 0, 0));
    assert!(c.clean_finish && s.clean_finish);
    assert!(o.client_out.contains("Send Latency Test"));
    assert!(o.client_out.contains(" Connection type : RC"));
    // perftest's send inline limit over RC: 236 B.
    for l in results(&o.client_out) {
        assert_eq!(field(l, "test"), "send_lat", "{l}");
        assert_eq!(
            field(l, "inline"),
            (num(l, "bytes") <= 236.0).to_string(),
            "{l}"
        );
    }
}

/// read_lat or atomic_lat over RC: the client reports every size (full round trips), the
/// passive server none; both finish with the handshake.
fn one_sided(kv: &[(&str, &str)], sizes: &[u32], samples: usize) -> Outcome {
    let o = run_pair(
        FabricConfig::default(),
        |lid| cfg(Transport::Rc, Role::Client, lid, kv),
        |lid| cfg(Transport::Rc, Role::Server, lid, kv),
        0,
        200_000_000,
    );
    let (Ok(c), Ok(s)) = (&o.client, &o.server) else {
        panic!(
            "client {:?}, server {:?}\n{}\n{}",
            o.client, o.server, o.client_out, o.server_out
        );
    };
    check_sweep_from(&o.client_out, "client", "RC", sizes, samples, true, false);
    assert!(
        results(&o.server_out).is_empty(),
        "the passive side reports nothing:\n{}",
        o.server_out
    );
    assert_eq!((c.sizes, c.aborted, c.lost), (sizes.len() as u32, 0, 0));
    assert_eq!(
        s.sizes,
        sizes.len() as u32,
        "the server went through every size"
    );
    assert!(c.clean_finish && s.clean_finish);
    assert_eq!(c.peer, s.local);
    assert!(s.local.addr != 0 && s.local.rkey != 0);
    o
}

#[test]
fn read_lat_sweeps_every_size_to_8_mib_reading_the_servers_pattern() {
    // `verify`: after every READ the client's destination holds the server's pattern of
    // that size (filled with its complement beforehand).
    let o = one_sided(
        &[("test", "read_lat"), ("size", "all"), ("iters", "5")],
        &pow2(2, 8 << 20),
        4,
    );
    for l in results(&o.client_out) {
        assert_eq!(field(l, "test"), "read_lat", "{l}");
        assert_eq!(field(l, "inline"), "false", "{l}");
    }
    assert!(o.client_out.contains("RDMA_Read Latency Test"));
}

#[test]
fn read_lat_with_outstanding_reads_and_events() {
    let o = one_sided(
        &[
            ("test", "read_lat"),
            ("size", "4096"),
            ("iters", "20"),
            ("outstanding_reads", "16"),
            ("completion", "event"),
        ],
        &[4096],
        19,
    );
    let l = results(&o.client_out)[0];
    assert_eq!(field(l, "completion"), "event");
}

#[test]
fn atomic_lat_fetched_values_follow_the_sequence() {
    // `verify`: iteration i fetches i (the server's word starts at 0; fetch-and-add adds
    // 1, compare-and-swap swaps i for i + 1), so every atomic was applied exactly once, in
    // order, and every compare matched.
    for op in ["FETCH_AND_ADD", "CMP_AND_SWAP"] {
        for completion in ["poll", "event"] {
            let o = one_sided(
                &[
                    ("test", "atomic_lat"),
                    ("atomic", op),
                    ("iters", "100"),
                    ("completion", completion),
                ],
                &[8],
                99,
            );
            let l = results(&o.client_out)[0];
            assert_eq!(field(l, "test"), "atomic_lat", "{l}");
            assert_eq!(field(l, "completion"), completion, "{l}");
            assert!(o.client_out.contains("Atomic Latency Test"));
        }
    }
}

#[test]
fn read_and_atomic_refuse_uc_like_perftest() {
    let (_m, mut ps) = machine(1, FabricConfig::default());
    let mut a = node(ps.remove(0), 1);
    for test in ["read_lat", "atomic_lat"] {
        let c = cfg(Transport::Uc, Role::Client, 2, &[("test", test)]);
        let r = PingPong::start(&mut a.hca, &mut a.env, &c);
        assert!(
            matches!(
                r,
                Err(BenchError::Config(bench::ConfigError::Invalid(
                    bench::config::Rule::OneSidedNeedsRc { .. }
                )))
            ),
            "{test}: refused before any object exists"
        );
    }
    assert_eq!(a.env.live(), 0);
    let probe = a.env.p.clone_handle();
    a.hca.close().unwrap();
    assert_no_violations(&probe);
}

#[test]
fn the_model_counts_the_completion_interrupts_of_event_mode_per_iteration() {
    // The same send_lat run busy-polling and with events: only the event run arms the CQs
    // and sleeps, so only it raises completion interrupts; bring-up and command interrupts
    // are the same in both runs. At most two per iteration (the send completion and the
    // receive); the server sleeps for every request (one each), the client's answer is
    // often there already when it looks (deterministic virtual time: half its iterations).
    let iters = 50u64;
    let run = |completion: &str| {
        let kv = [("size", "64"), ("iters", "50"), ("completion", completion)];
        let o = run_pair(
            FabricConfig::default(),
            |lid| cfg(Transport::Uc, Role::Client, lid, &kv),
            |lid| cfg(Transport::Uc, Role::Server, lid, &kv),
            0,
            5_000_000,
        );
        o.client.as_ref().expect("client");
        o.server.as_ref().expect("server");
        o.interrupts
    };
    let poll = run("poll");
    let event = run("event");
    let per_iteration: Vec<f64> = (0..2)
        .map(|n| event[n].saturating_sub(poll[n]) as f64 / iters as f64)
        .collect();
    let why = format!("poll {poll:?}, event {event:?}, extra per iteration {per_iteration:?}");
    assert!(
        per_iteration.iter().all(|&x| (0.25..=2.0).contains(&x)),
        "{why}"
    );
    assert!(
        per_iteration[1] >= 0.95,
        "the server sleeps for each request: {why}"
    );
}

/// One send_lat or one-sided run of `iters` iterations at `size` in `mode` over `t`.
fn mode_run(t: Transport, test: &str, size: &str, iters: u32, mode: &str) -> Outcome {
    let n = iters.to_string();
    let kv = [
        ("test", test),
        ("size", size),
        ("iters", n.as_str()),
        ("completion", mode),
    ];
    run_pair(
        FabricConfig::default(),
        |lid| cfg(t, Role::Client, lid, &kv),
        |lid| cfg(t, Role::Server, lid, &kv),
        0,
        20_000_000,
    )
}

#[test]
fn isr_mode_replies_from_the_interrupt_handler_over_ud_uc_and_rc() {
    let iters = 50u64;
    for (t, name) in [
        (Transport::Ud, "UD"),
        (Transport::Uc, "UC"),
        (Transport::Rc, "RC"),
    ] {
        let o = mode_run(t, "send_lat", "64", iters as u32, "isr");
        let c = o
            .client
            .as_ref()
            .unwrap_or_else(|e| panic!("{name} client: {e}"));
        let s = o
            .server
            .as_ref()
            .unwrap_or_else(|e| panic!("{name} server: {e}"));
        check_sweep(&o.client_out, "client", name, &[64], 49, true);
        check_sweep(&o.server_out, "server", name, &[64], 49, true);
        for out in [&o.client_out, &o.server_out] {
            let l = results(out)[0];
            assert_eq!(field(l, "completion"), "isr", "{l}");
        }
        assert!(o.client_out.contains(" Completion      : isr"));
        let why = format!(
            "{name}: client {c:?}, server {s:?}, deliveries {:?}",
            o.isr_deliveries
        );
        // Every interrupt the model delivered ran the bench's handler, and nothing else did.
        assert_eq!(c.isr_calls, o.isr_deliveries[0], "{why}");
        assert_eq!(s.isr_calls, o.isr_deliveries[1], "{why}");
        // The server's every reply and the client's every request but the first (which
        // the measuring loop posts to start the size) were posted inside the handler.
        assert_eq!(s.isr_posts, iters, "{why}");
        assert_eq!(c.isr_posts, iters - 1, "{why}");
        assert!(c.isr_calls >= iters - 1 && s.isr_calls >= iters, "{why}");
    }
}

#[test]
fn interrupts_per_iteration_in_each_mode() {
    // The result line carries the model's interrupts during each size: none when busy
    // polling; with events, the server sleeps for every request (about one per iteration,
    // at most two: its send completion too), the client for some answers; in isr mode
    // exactly one per iteration on each side (the receive that the handler answers).
    let iters = 40u32;
    let per_iter = |o: &Outcome| {
        o.client.as_ref().expect("client");
        o.server.as_ref().expect("server");
        [&o.client_out, &o.server_out].map(|out| {
            let l = results(out)[0];
            let n = num(l, "interrupts");
            assert_eq!(
                num(l, "interrupts_per_iter"),
                (n / f64::from(iters) * 1000.0).round() / 1000.0,
                "{l}"
            );
            n / f64::from(iters)
        })
    };
    for t in [Transport::Ud, Transport::Rc] {
        let poll = per_iter(&mode_run(t, "send_lat", "32", iters, "poll"));
        let event = per_iter(&mode_run(t, "send_lat", "32", iters, "event"));
        let isr = per_iter(&mode_run(t, "send_lat", "32", iters, "isr"));
        let why = format!("{t:?}: poll {poll:?}, event {event:?}, isr {isr:?}");
        assert_eq!(poll, [0.0, 0.0], "{why}");
        assert!(event.iter().all(|x| (0.25..=2.0).contains(x)), "{why}");
        assert!(event[1] >= 0.95, "{why}");
        assert_eq!(isr, [1.0, 1.0], "{why}");
    }
}

#[test]
fn isr_mode_on_the_read_and_atomic_client() {
    // The client's handler takes the READ's (atomic's) completion and posts the next one;
    // the passive server takes no interrupt while the client measures.
    let iters = 30u64;
    for (test, size) in [("read_lat", "256"), ("atomic_lat", "8")] {
        let o = mode_run(Transport::Rc, test, size, iters as u32, "isr");
        let c = o.client.as_ref().unwrap_or_else(|e| panic!("{test}: {e}"));
        o.server.as_ref().expect("server");
        let l = results(&o.client_out)[0];
        assert_eq!(field(l, "completion"), "isr", "{l}");
        assert_eq!(field(l, "lost"), "0", "{l}");
        assert_eq!(num(l, "samples") as u64, iters - 1, "{l}");
        assert_eq!(num(l, "interrupts"), iters as f64, "{l}");
        assert_eq!(c.isr_posts, iters - 1, "{test}: {c:?}");
        assert_eq!(c.isr_calls, o.isr_deliveries[0], "{test}: {c:?}");
        assert!(
            results(&o.server_out).is_empty(),
            "the passive side prints no row"
        );
    }
}

#[test]
fn isr_mode_is_refused_where_no_handler_can_run() {
    // A node whose platform delivers no MSI-X (the kernel on INTx) cannot run isr mode:
    // the client says so before building anything; a server refuses the client's run.
    let (m, mut ps) = machine(1, FabricConfig::default());
    let mut p = ps.remove(0);
    p.msix = false;
    let _ = &m;
    let mut a = node(p, 1);
    let mut c = cfg(Transport::Ud, Role::Client, 2, &[("completion", "isr")]);
    c.peer_timeout_ns = 1_000_000;
    let r = PingPong::start(&mut a.hca, &mut a.env, &c);
    assert!(
        matches!(r, Err(BenchError::IsrUnavailable)),
        "{:?}",
        r.err()
    );
    assert_eq!(a.env.live(), 0);
    a.hca.close().unwrap();
}

#[test]
fn isr_mode_losses_are_bounded_like_polling() {
    // 5 % of the packets lost over UD and UC: a lost request or answer raises no interrupt,
    // so the measuring loop's wait runs out, the client re-posts from the loop and the
    // server answers the repeat from its handler; the run finishes with the losses counted
    // and no wait in the figures.
    for t in [Transport::Ud, Transport::Uc] {
        let fabric = FabricConfig {
            faults: sim::Faults {
                drop_probability: 0.05,
                ..sim::Faults::default()
            },
            seed: 5,
            ..FabricConfig::default()
        };
        let kv = [
            ("size", "64"),
            ("iters", "200"),
            ("completion", "isr"),
            ("timeout_ms", "1"),
        ];
        let o = run_pair(
            fabric,
            |lid| cfg(t, Role::Client, lid, &kv),
            |lid| cfg(t, Role::Server, lid, &kv),
            0,
            60_000_000,
        );
        let c = o.client.unwrap_or_else(|e| panic!("{t:?} client: {e}"));
        let s = o.server.unwrap_or_else(|e| panic!("{t:?} server: {e}"));
        assert!(c.lost > 0 && c.retries > 0, "{t:?}: {c:?}");
        let l = results(&o.client_out)[0];
        assert_eq!(field(l, "completion"), "isr");
        assert_eq!(field(l, "aborted"), "false", "{l}");
        assert!(num(l, "true_max_us") < 500.0, "no wait in the figures: {l}");
        // Every answer the server sent, repeats included, came from its handler.
        assert!(s.isr_posts >= 200, "{t:?}: {s:?}");
        assert_eq!(s.isr_calls, o.isr_deliveries[1], "{t:?}: {s:?}");
    }
}

/// The `ibkern-anatomy` lines of a console.
fn anatomy_lines(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| l.starts_with(bench::line::ANATOMY_PREFIX))
        .collect()
}

/// Every size has its anatomy, after perftest's table, with each component present and
/// the parts ordered as they happen on the model's virtual clock: the post no longer than
/// the post to its send completion, that no longer than the round trip, the peer's turnaround
/// shorter than the round trip, and `2 × wire+NIC + peer turnaround = RTT` exactly.
fn check_anatomy(out: &str, test: &str, t: &str, sizes: &[u32], peer: &str) {
    let lines = anatomy_lines(out);
    assert_eq!(lines.len(), sizes.len(), "anatomy lines:\n{out}");
    let all: Vec<&str> = out.lines().collect();
    let title = all
        .iter()
        .position(|&l| l == bench::perftest::ANATOMY_TITLE)
        .expect("anatomy table title");
    let last_row = all
        .iter()
        .rposition(|l| l.starts_with(PREFIX))
        .expect("result lines");
    assert!(
        title > last_row,
        "the anatomy follows perftest's table:\n{out}"
    );
    assert!(out.contains(bench::perftest::ANATOMY_HEADER));
    for (l, &size) in lines.iter().zip(sizes) {
        assert_eq!(num(l, "bytes") as u32, size, "{l}");
        assert_eq!((field(l, "test"), field(l, "transport")), (test, t), "{l}");
        assert_eq!(field(l, "peer"), peer, "{l}");
        for stat in ["med", "avg"] {
            let g = |part: &str| num(l, &format!("{part}_{stat}_us"));
            let (post, cqe, rtt, turn, wire) =
                (g("post"), g("send_cqe"), g("rtt"), g("peer"), g("wire_nic"));
            assert!(post >= 0.0 && post <= cqe && cqe <= rtt, "{stat}: {l}");
            if peer == "hca" {
                // The peer's HCA answers a READ within the microsecond of virtual time it
                // was posted in (no peer software), so on the model these may all be 0.
                assert!(turn == 0.0 && wire >= 0.0, "{stat}: {l}");
            } else {
                assert!(rtt > 0.0 && turn >= 0.0 && turn < rtt, "{stat}: {l}");
                assert!(wire > 0.0, "{stat}: {l}");
            }
            assert!(
                (2.0 * wire + turn - rtt).abs() < 1e-3,
                "{stat}: the parts add up to the round trip: {l}"
            );
        }
        // The round trip is stamp to stamp over the same iterations as perftest's (which
        // leaves out its largest samples; on the model's clock every delta is the same):
        // twice the half round trip of send/write, as is for read/atomic.
        let r = results(out)
            .into_iter()
            .find(|r| num(r, "bytes") as u32 == size)
            .unwrap();
        assert_eq!(
            num(l, "samples"),
            num(r, "samples"),
            "the same clean intervals as perftest's statistics: {l}\n{r}"
        );
        let factor = if peer == "hca" { 1.0 } else { 2.0 };
        assert!(
            (num(l, "rtt_med_us") - factor * num(r, "t_typical_us")).abs() < 1e-2,
            "{l}\n{r}"
        );
    }
}

#[test]
fn anatomy_splits_each_round_trip_and_the_server_reports_its_turnaround() {
    // send_lat over UD, every size to the MTU; the server has no `anatomy` key: the
    // client's Hello (version 5) asks, and its Acks carry its turnaround back.
    let kv = [("size", "all"), ("iters", "20")];
    let o = run_pair(
        FabricConfig::default(),
        |lid| {
            cfg(
                Transport::Ud,
                Role::Client,
                lid,
                &[kv[0], kv[1], ("anatomy", "on")],
            )
        },
        |lid| cfg(Transport::Ud, Role::Server, lid, &kv),
        0,
        200_000_000,
    );
    let (Ok(c), Ok(s)) = (&o.client, &o.server) else {
        panic!("{:?} {:?}\n{}", o.client, o.server, o.client_out);
    };
    assert!(c.clean_finish && s.clean_finish);
    let sizes = pow2(2, 2048);
    check_sweep(&o.client_out, "client", "UD", &sizes, 19, true);
    check_anatomy(&o.client_out, "send_lat", "UD", &sizes, "software");
    assert!(
        anatomy_lines(&o.server_out).is_empty(),
        "only the client prints the anatomy"
    );
    // The model answers within the microsecond of virtual time it sees a request, so the
    // server's turnaround is 0 there and the round trip is all wire and NIC (the model's).
    let l = anatomy_lines(&o.client_out)[0];
    assert_eq!(num(l, "peer_med_us"), 0.0, "{l}");

    // write_lat over RC, one size: the server sees the written byte and writes back.
    let kv = [("test", "write_lat"), ("size", "64"), ("iters", "20")];
    let o = run_pair(
        FabricConfig::default(),
        |lid| {
            cfg(
                Transport::Rc,
                Role::Client,
                lid,
                &[kv[0], kv[1], kv[2], ("anatomy", "on")],
            )
        },
        |lid| cfg(Transport::Rc, Role::Server, lid, &kv),
        0,
        200_000_000,
    );
    assert!(o.client.as_ref().expect("client").clean_finish);
    check_anatomy(&o.client_out, "write_lat", "RC", &[64], "software");
}

#[test]
fn anatomy_of_read_lat_has_no_software_turnaround() {
    let kv = [("test", "read_lat"), ("size", "4096"), ("iters", "20")];
    let o = run_pair(
        FabricConfig::default(),
        |lid| {
            cfg(
                Transport::Rc,
                Role::Client,
                lid,
                &[kv[0], kv[1], kv[2], ("anatomy", "on")],
            )
        },
        |lid| cfg(Transport::Rc, Role::Server, lid, &kv),
        0,
        200_000_000,
    );
    assert!(o.client.as_ref().expect("client").clean_finish);
    check_sweep_from(&o.client_out, "client", "RC", &[4096], 19, true, false);
    check_anatomy(&o.client_out, "read_lat", "RC", &[4096], "hca");
    assert!(o.client_out.contains("(HCA)"));
}

#[test]
fn without_the_anatomy_nothing_changes_whatever_the_server_says() {
    // The client asks nothing: version-1 messages as before, no anatomy on either side,
    // even with the key on the server (it follows the client's Hello).
    let kv = [("size", "64"), ("iters", "20")];
    let o = run_pair(
        FabricConfig::default(),
        |lid| cfg(Transport::Uc, Role::Client, lid, &kv),
        |lid| {
            cfg(
                Transport::Uc,
                Role::Server,
                lid,
                &[kv[0], kv[1], ("anatomy", "on")],
            )
        },
        0,
        200_000_000,
    );
    assert!(o.client.as_ref().expect("client").clean_finish);
    check_sweep(&o.client_out, "client", "UC", &[64], 19, true);
    assert!(anatomy_lines(&o.client_out).is_empty());
    assert!(!o.client_out.contains(bench::perftest::ANATOMY_TITLE));
    assert!(anatomy_lines(&o.server_out).is_empty());
}

#[test]
fn anatomy_leaves_loss_waits_out_like_perftests_statistics() {
    // UD dropping 3 % of packets, rendezvous included: intervals holding a loss wait leave
    // the anatomy as they leave perftest's figures, and the server's reports still arrive
    // (its Acks are repeated as the client repeats its Barriers and Done).
    let fabric = FabricConfig {
        faults: sim::Faults {
            drop_probability: 0.03,
            ..sim::Faults::default()
        },
        seed: 7,
        ..FabricConfig::default()
    };
    let kv = [
        ("size", "all"),
        ("iters", "100"),
        ("loss_limit", "100"),
        ("timeout_ms", "1"),
    ];
    let o = run_pair(
        fabric,
        |lid| {
            cfg(
                Transport::Ud,
                Role::Client,
                lid,
                &[kv[0], kv[1], kv[2], kv[3], ("anatomy", "on")],
            )
        },
        |lid| cfg(Transport::Ud, Role::Server, lid, &kv),
        0,
        60_000_000,
    );
    let c = o.client.expect("client finishes despite losses");
    assert!(c.lost > 0, "losses happened: {c:?}");
    check_anatomy(&o.client_out, "send_lat", "UD", &pow2(2, 2048), "software");
    for l in anatomy_lines(&o.client_out) {
        // A 1 ms wait never shows up in the parts either.
        assert!(num(l, "rtt_avg_us") < 500.0, "{l}");
    }
}

#[test]
fn anatomy_in_event_mode_names_its_completion_mode() {
    // Completion events on both sides: the same parts, measured around the event waits.
    let kv = [("size", "64"), ("iters", "50"), ("completion", "event")];
    let o = run_pair(
        FabricConfig::default(),
        |lid| {
            cfg(
                Transport::Uc,
                Role::Client,
                lid,
                &[kv[0], kv[1], kv[2], ("anatomy", "on")],
            )
        },
        |lid| cfg(Transport::Uc, Role::Server, lid, &kv),
        0,
        5_000_000,
    );
    assert!(o.client.as_ref().expect("client").clean_finish);
    check_anatomy(&o.client_out, "send_lat", "UC", &[64], "software");
    let l = anatomy_lines(&o.client_out)[0];
    assert_eq!(field(l, "completion"), "event");
}

#[test]
fn anatomy_in_isr_mode_has_no_separate_send_completion_for_a_ping_pong() {
    // isr: the client's handler runs on the reply's interrupt and takes its send completion
    // with it, so send_lat reports no post -> send CQE; the rest is measured as in the other
    // modes (the server answers from its handler, its turnaround timed there). read_lat's
    // completion is its own interrupt: measured.
    for (t, test, size, peer) in [
        (Transport::Uc, "send_lat", "64", "software"),
        (Transport::Rc, "read_lat", "256", "hca"),
    ] {
        let kv = [
            ("test", test),
            ("size", size),
            ("iters", "50"),
            ("completion", "isr"),
        ];
        let o = run_pair(
            FabricConfig::default(),
            |lid| {
                cfg(
                    t,
                    Role::Client,
                    lid,
                    &[kv[0], kv[1], kv[2], kv[3], ("anatomy", "on")],
                )
            },
            |lid| cfg(t, Role::Server, lid, &kv),
            0,
            20_000_000,
        );
        assert!(o.client.as_ref().expect("client").clean_finish, "{test}");
        let lines = anatomy_lines(&o.client_out);
        assert_eq!(lines.len(), 1, "{}", o.client_out);
        let l = lines[0];
        assert_eq!(
            (field(l, "completion"), field(l, "peer")),
            ("isr", peer),
            "{l}"
        );
        assert!(num(l, "samples") > 0.0, "{l}");
        let rtt = num(l, "rtt_med_us");
        assert!(num(l, "post_med_us") <= rtt, "{l}");
        if test == "send_lat" {
            assert_eq!(field(l, "send_cqe_med_us"), "null", "{l}");
            assert!(num(l, "peer_med_us") < rtt, "{l}");
        } else {
            assert!(num(l, "send_cqe_med_us") <= rtt, "{l}");
        }
    }
}
