//! Plans over the real driver and two in-process model HCAs: a client runs a list of runs
//! in one "boot" and a server with no plan of its own follows it (docs/benchmarks.md,
//! "Plans"). Client and server are stepped alternately in one thread on the fabric's
//! virtual clock, as in bench_pingpong.rs.

mod common;

use bench::line::PREFIX;
use bench::plan::{PlanClient, ServeSummary, Server};
use bench::{
    BenchEnv, BenchError, PingPongConfig, Role, Status, StepBudget, SweepSummary, Transport,
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

fn node(p: SimPlatform) -> Node {
    let env = SimEnv::new(&p);
    let mut hca = Hca::init(p, test_config()).expect("bring-up");
    let lid = hca.wait_port_active(1, 5000).expect("port active").lid;
    Node {
        hca,
        env,
        out: String::new(),
        lid,
    }
}

/// The keys both sides share: 2 ms waits, 2 s peer timeout, verified payloads.
fn base(role: Role, peer: u16, kv: &[(&str, &str)]) -> PingPongConfig {
    let mut c = PingPongConfig::new(Transport::Ud, role);
    c.peer_lid = Some(peer);
    c.wait_timeout_ns = 2_000_000;
    c.peer_timeout_ns = 2_000_000_000;
    c.verify = true;
    for (k, v) in kv {
        c.apply(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
    c
}

/// A client plan from `run=` lines (perftest command lines) on top of `base`.
fn plan(base: &PingPongConfig, lines: &[&str]) -> Vec<PingPongConfig> {
    lines
        .iter()
        .map(|l| bench::config::Run::parse(l).expect(l).config(base))
        .collect()
}

struct Outcome {
    /// Per client (in the order they ran): each run's result.
    clients: Vec<Vec<Result<SweepSummary, BenchError>>>,
    server: Result<ServeSummary, BenchError>,
    client_out: String,
    server_out: String,
}

/// Runs the client plans one after another on HCA 0 (each a fresh [`PlanClient`], as a
/// client rebooting) against one [`Server`] on HCA 1. Panics past `max_us` of virtual time.
fn run_plans(
    drop_rule: Option<sim::DropRule>,
    clients: impl FnOnce(u16) -> Vec<(Vec<PingPongConfig>, u32)>,
    server: impl FnOnce(u16) -> (PingPongConfig, bool),
    max_us: u64,
) -> Outcome {
    run_plans_tsc(1, drop_rule, clients, server, max_us)
}

/// [`run_plans`] with both nodes' TSC running `tsc_scale` cycles per nanosecond of the
/// fabric's clock ([`SimEnv::tsc_scale`]).
fn run_plans_tsc(
    tsc_scale: u64,
    drop_rule: Option<sim::DropRule>,
    clients: impl FnOnce(u16) -> Vec<(Vec<PingPongConfig>, u32)>,
    server: impl FnOnce(u16) -> (PingPongConfig, bool),
    max_us: u64,
) -> Outcome {
    let (m, mut ps) = machine_with(2, FabricConfig::default(), DeviceProfile::default());
    m.borrow_mut().fabric().set_drop_rule(drop_rule);
    let p1 = ps.remove(1);
    let p0 = ps.remove(0);
    let mut a = node(p0);
    let mut b = node(p1);
    a.env.tsc_scale = tsc_scale;
    b.env.tsc_scale = tsc_scale;
    let mut plans = clients(b.lid).into_iter();
    let (scfg, events_ok) = server(a.lid);
    let mut srv = Some(Server::<Hca<SimPlatform>>::new(scfg, events_ok));
    let mut cur = plans.next().map(|(runs, n)| PlanClient::new(runs, n, true));
    let budget = StepBudget::interleaved();
    let t0 = a.env.now_ns();
    let mut done_clients = Vec::new();
    let mut rs = None;
    while cur.is_some() || rs.is_none() {
        assert!(
            a.env.now_ns() - t0 < max_us * 1000,
            "not finished in {max_us} µs\nclient:\n{}\nserver:\n{}",
            a.out,
            b.out
        );
        if let Some(c) = cur.as_mut() {
            match c.step(&mut a.hca, &mut a.env, &mut a.out, budget) {
                Ok(Status::Running) => {}
                Ok(Status::Finished) => {
                    let c = cur.take().unwrap();
                    done_clients.push(c.results().to_vec());
                    c.close(&mut a.hca, &mut a.env);
                    cur = plans.next().map(|(runs, n)| PlanClient::new(runs, n, true));
                }
                Err(e) => panic!("client plan: {e}\n{}", a.out),
            }
        }
        if let Some(s) = srv.as_mut() {
            match s.step(&mut b.hca, &mut b.env, &mut b.out, budget) {
                Ok(Status::Running) => {}
                r => {
                    let mut s = srv.take().unwrap();
                    rs = Some(r.map(|_| s.summary()));
                    s.close(&mut b.hca, &mut b.env);
                }
            }
        }
        a.env.p.delay_us(1);
    }
    assert_eq!(a.env.live(), 0, "client buffers freed");
    assert_eq!(b.env.live(), 0, "server buffers freed");
    let (pa, pb) = (a.env.p.clone_handle(), b.env.p.clone_handle());
    a.hca.close().unwrap();
    b.hca.close().unwrap();
    assert_no_violations(&pa);
    assert_no_violations(&pb);
    Outcome {
        clients: done_clients,
        server: rs.unwrap(),
        client_out: a.out,
        server_out: b.out,
    }
}

/// A field of a result line, as text.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let pat = format!("\"{key}\":");
    let at = line.find(&pat).unwrap_or_else(|| panic!("{key} in {line}")) + pat.len();
    let rest = &line[at..];
    rest[..rest.find([',', '}']).unwrap()].trim_matches('"')
}

/// (test, transport, bytes, lost) of every result line, in order.
fn results(out: &str) -> Vec<(String, String, u32, u32)> {
    out.lines()
        .filter(|l| l.starts_with(PREFIX))
        .map(|l| {
            (
                field(l, "test").to_string(),
                field(l, "transport").to_string(),
                field(l, "bytes").parse().unwrap(),
                field(l, "lost").parse().unwrap(),
            )
        })
        .collect()
}

fn lines_with<'a>(out: &'a str, what: &str) -> Vec<&'a str> {
    out.lines().filter(|l| l.contains(what)).collect()
}

const THREE: [&str; 3] = [
    "ib_send_lat -c UD -a -n 20",
    "ib_send_lat -c UC -s 4096 -n 30 -I 0",
    "ib_write_lat -c RC -s 64 -n 25",
];

#[test]
fn a_server_with_no_plan_follows_a_three_run_plan() {
    let o = run_plans(
        None,
        |lid| {
            let b = base(Role::Client, lid, &[]);
            vec![(plan(&b, &THREE), 1)]
        },
        // The server's own test keys are not what it runs: it follows the Hellos.
        |lid| {
            (
                base(Role::Server, lid, &[("transport", "UC"), ("size", "8")]),
                true,
            )
        },
        20_000_000,
    );
    let runs = &o.clients[0];
    assert_eq!(runs.len(), 3);
    for r in runs {
        let s = r.as_ref().expect("every run passes");
        assert!(s.clean_finish && s.lost == 0, "{s:?}");
    }
    assert_eq!(
        (
            runs[0].as_ref().unwrap().sizes,
            runs[1].as_ref().unwrap().sizes
        ),
        (11, 1),
        "UD -a sweeps 2..=2048, UC -s 4096 one size"
    );
    let s = o
        .server
        .expect("server ends after the plan (idle_timeout_ms=0)");
    assert_eq!((s.plans, s.totals.runs, s.totals.passed), (1, 3, 3));
    assert_eq!(s.totals.sizes, 13);
    // Both consoles: each run's header and verdict, and the same result lines, in order.
    for out in [&o.client_out, &o.server_out] {
        for (i, line) in THREE.iter().enumerate() {
            let head = format!("run {}/3 pass 1/1", i + 1);
            let mine = lines_with(out, &head);
            assert!(
                mine.iter().any(|l| l.contains(line)),
                "{head} {line}:\n{out}"
            );
            assert!(mine.iter().any(|l| l.contains(": PASS ")), "{head}:\n{out}");
        }
    }
    let (c, s) = (results(&o.client_out), results(&o.server_out));
    assert_eq!(c.len(), 13);
    let key = |v: &Vec<(String, String, u32, u32)>| {
        v.iter()
            .map(|(t, tr, b, _)| (t.clone(), tr.clone(), *b))
            .collect::<Vec<_>>()
    };
    assert_eq!(key(&c), key(&s), "the server ran what the client asked");
    assert_eq!(c[11], ("send_lat".into(), "UC".into(), 4096, 0));
    assert_eq!(c[12], ("write_lat".into(), "RC".into(), 64, 0));
    // The inline limit followed: -I 0 puts the 4096-byte UC run out of line on both sides
    // (the result line's `inline` is false); the server's own default would be 236 anyway,
    // so check the 2-byte UD run kept its default (inline) too.
    let inline_of = |out: &str, bytes: u32, t: &str| {
        out.lines()
            .filter(|l| l.starts_with(PREFIX))
            .find(|l| field(l, "transport") == t && field(l, "bytes") == bytes.to_string())
            .map(|l| field(l, "inline").to_string())
            .unwrap()
    };
    assert_eq!(inline_of(&o.server_out, 2, "UD"), "true");
    assert_eq!(inline_of(&o.server_out, 4096, "UC"), "false");
    assert!(o.server_out.contains("plan of the client at LID"));
    assert!(o
        .server_out
        .contains("idle_timeout_ms=0, no further client"));
}

#[test]
fn a_run_the_server_cannot_do_is_refused_on_both_consoles_and_the_plan_goes_on() {
    let o = run_plans(
        None,
        |lid| {
            let b = base(Role::Client, lid, &[]);
            let runs = plan(
                &b,
                &[
                    "ib_send_lat -c UD -s 64 -n 20 -e",
                    "ib_send_lat -c UC -s 64 -n 20",
                ],
            );
            vec![(runs, 1)]
        },
        // This server takes no interrupts: it cannot wait for completion events.
        |lid| (base(Role::Server, lid, &[]), false),
        20_000_000,
    );
    let runs = &o.clients[0];
    assert_eq!(runs.len(), 2);
    assert_eq!(
        runs[0],
        Err(BenchError::Refused(
            bench::rendezvous::Refusal::EventsWithoutInterrupts
        ))
    );
    assert!(runs[1].is_ok(), "the plan goes on after a refusal");
    let why = "completion events asked, and the server takes no interrupts (hca_irq=poll)";
    let c = lines_with(&o.client_out, why);
    let s = lines_with(&o.server_out, why);
    assert!(
        c.iter()
            .any(|l| l.starts_with("pingpong: run 1/2 pass 1/1: FAIL: the server refused")),
        "client:\n{}",
        o.client_out
    );
    assert!(
        s.iter()
            .any(|l| l.starts_with("pingpong: run 1/2 pass 1/1: refused the client")),
        "server:\n{}",
        o.server_out
    );
    let sum = o.server.expect("server");
    assert_eq!(
        (sum.totals.refused, sum.totals.passed, sum.plans),
        (1, 1, 1)
    );
    assert_eq!(
        results(&o.client_out).len(),
        1,
        "a refused run measures nothing"
    );
}

#[test]
fn one_server_serves_two_clients_in_a_row_then_ends_after_its_idle_timeout() {
    let o = run_plans(
        None,
        |lid| {
            let b = base(Role::Client, lid, &[]);
            vec![
                (plan(&b, &["ib_send_lat -c UD -s 32 -n 10"]), 2),
                (
                    plan(
                        &b,
                        &[
                            "ib_write_lat -c UC -s 128 -n 10",
                            "ib_send_lat -c UC -s 8 -n 10",
                        ],
                    ),
                    1,
                ),
            ]
        },
        |lid| (base(Role::Server, lid, &[("idle_timeout_ms", "50")]), true),
        20_000_000,
    );
    assert_eq!(o.clients.len(), 2);
    assert!(
        o.clients.iter().flatten().all(|r| r.is_ok()),
        "{:?}",
        o.clients
    );
    assert_eq!(o.clients[0].len(), 2, "repeat=2 runs the plan twice");
    let s = o.server.expect("the idle timeout ends the server cleanly");
    assert_eq!((s.plans, s.totals.runs, s.totals.passed), (2, 4, 4));
    assert!(o.server_out.contains("run 1/1 pass 2/2"));
    assert!(o.server_out.contains("run 2/2 pass 1/1"));
    assert_eq!(
        lines_with(
            &o.server_out,
            "waiting for the next client (idle_timeout_ms=50)"
        )
        .len(),
        2,
        "after each plan:\n{}",
        o.server_out
    );
    assert!(o.server_out.contains("no client for 50 ms, done"));
}

#[test]
fn losses_in_the_middle_of_a_plan_are_counted_and_the_plan_finishes() {
    // Every 7th UC packet is lost, and every 7th UD data packet once run 1's are through:
    // run 1 is clean, runs 2 (UC) and 3 (UD) lose packets.
    let (mut uc, mut ud) = (0u32, 0u32);
    let rule: sim::DropRule = Box::new(move |p: &sim::Packet| match p.transport {
        sim::qp::ServiceType::Uc => {
            uc += 1;
            uc % 7 == 0
        }
        sim::qp::ServiceType::Ud if p.qkey == bench::config::DATA_QKEY => {
            ud += 1;
            ud > 40 && ud % 7 == 0
        }
        _ => false,
    });
    let o = run_plans(
        Some(rule),
        |lid| {
            let b = base(Role::Client, lid, &[]);
            let runs = plan(
                &b,
                &[
                    "ib_send_lat -c UD -s 64 -n 20",
                    "ib_send_lat -c UC -s 256 -n 40",
                    "ib_send_lat -c UD -s 64 -n 40",
                ],
            );
            vec![(runs, 1)]
        },
        |lid| (base(Role::Server, lid, &[]), true),
        60_000_000,
    );
    let runs: Vec<&SweepSummary> = o.clients[0]
        .iter()
        .map(|r| r.as_ref().expect("lossy runs still pass"))
        .collect();
    assert_eq!(runs[0].lost, 0);
    assert!(runs[1].lost > 0 && runs[2].lost > 0, "{runs:?}");
    let r = results(&o.client_out);
    assert_eq!(r.len(), 3);
    assert_eq!((r[1].1.as_str(), r[1].3 as u64), ("UC", runs[1].lost));
    let s = o.server.expect("server");
    assert_eq!((s.plans, s.totals.passed), (1, 3));
    assert!(s.totals.lost > 0, "the server counts them too: {s:?}");
}

#[test]
fn a_server_whose_done_never_arrives_goes_on_with_the_clients_next_run() {
    // Every Done of the client is lost: after its 8 tries the client moves on to its next
    // run; the server, its sizes all reported, takes the new run's Hello as the end of the
    // run instead of waiting out `peer_timeout_ms` in silence.
    let rule: sim::DropRule = Box::new(|p: &sim::Packet| {
        p.src_hca == 0
            && p.qkey == bench::config::RDV_QKEY
            && p.payload.get(5) == Some(&(bench::rendezvous::Kind::Done as u8))
    });
    let o = run_plans(
        Some(rule),
        |lid| {
            let b = base(Role::Client, lid, &[]);
            let runs = plan(
                &b,
                &[
                    "ib_send_lat -c UD -s 64 -n 10",
                    "ib_send_lat -c UC -s 64 -n 10",
                ],
            );
            vec![(runs, 1)]
        },
        |lid| (base(Role::Server, lid, &[]), true),
        20_000_000,
    );
    let runs = &o.clients[0];
    assert!(
        runs.iter()
            .all(|r| r.as_ref().is_ok_and(|s| !s.clean_finish)),
        "{runs:?}"
    );
    // Run 1 ended on the server when run 2 said hello, well before the 2 s peer timeout;
    // run 2, the plan's last, has no next Hello: the server waits its silence bound out.
    let s = o.server.expect("server");
    assert_eq!((s.totals.runs, s.totals.passed), (2, 1), "{s:?}");
    assert!(
        o.server_out.contains("run 1/2 pass 1/1: PASS 1 sizes"),
        "{}",
        o.server_out
    );
    assert!(
        o.server_out.contains("run 2/2 pass 1/1: FAIL: PeerLost"),
        "{}",
        o.server_out
    );
    // The client's verdicts say what is missing: every size passed, the handshake did not.
    assert!(
        o.client_out.contains(
            "run 1/2 pass 1/1: PASS 1 sizes, 0 aborted, 0 lost, 0 retries, 0 late repeats; \
             Done not answered\n"
        ),
        "{}",
        o.client_out
    );
    assert!(
        o.server_out.contains("run 1/2 pass 1/1: PASS 1 sizes, 0 aborted, 0 lost, 0 retries, 0 late repeats; Done not answered\n"),
        "{}",
        o.server_out
    );
}

/// The one-sided tests in a plan: a server with no plan (and send_lat keys of its own)
/// follows read_lat with `-o 16` and atomic_lat with CMP_AND_SWAP (rendezvous version 4
/// carries both), goes through their sizes without printing rows, and the plan goes on to
/// send_lat over RC.
#[test]
fn a_server_follows_read_and_atomic_runs_and_send_over_rc() {
    const RUNS: [&str; 3] = [
        "ib_read_lat -c RC -a -n 10 -o 16",
        "ib_atomic_lat -c RC -s 8 -n 50 -A CMP_AND_SWAP -o 1",
        "ib_send_lat -c RC -s 64 -n 20",
    ];
    let o = run_plans(
        None,
        |lid| {
            let b = base(Role::Client, lid, &[("verify", "1")]);
            vec![(plan(&b, &RUNS), 1)]
        },
        |lid| (base(Role::Server, lid, &[("transport", "UD")]), true),
        200_000_000,
    );
    let runs = &o.clients[0];
    assert_eq!(runs.len(), 3);
    let sizes: Vec<u32> = runs
        .iter()
        .map(|r| {
            let s = r.as_ref().expect("every run passes");
            assert!(s.clean_finish && s.lost == 0, "{s:?}");
            s.sizes
        })
        .collect();
    assert_eq!(sizes, vec![23, 1, 1]);
    let s = o.server.expect("server ends after the plan");
    assert_eq!((s.plans, s.totals.runs, s.totals.passed), (1, 3, 3));
    assert_eq!(s.totals.sizes, 25);
    for (i, line) in RUNS.iter().enumerate() {
        let head = format!("run {}/3 pass 1/1", i + 1);
        assert!(
            lines_with(&o.client_out, &head)
                .iter()
                .any(|l| l.contains(line)),
            "{head} {line}:\n{}",
            o.client_out
        );
        // The server names the client's inline limit (-I) as well; the rest is the same.
        let (program, rest) = line.split_once(" -n ").unwrap();
        assert!(
            lines_with(&o.server_out, &head)
                .iter()
                .any(|l| l.contains(program)
                    && l.contains(rest.split_once(' ').map_or(rest, |x| x.1))),
            "{head} {line}:\n{}",
            o.server_out
        );
    }
    let (c, s) = (results(&o.client_out), results(&o.server_out));
    assert_eq!(c.len(), 25);
    assert_eq!(c[23], ("atomic_lat".into(), "RC".into(), 8, 0));
    assert_eq!(c[24], ("send_lat".into(), "RC".into(), 64, 0));
    // The passive server reports only the send_lat run.
    assert_eq!(s, vec![("send_lat".into(), "RC".into(), 64, 0)]);
}

#[test]
fn modes_run_each_run_once_per_mode_and_the_server_follows_each() {
    // `modes=poll,event,isr`: the client's two runs become six, each announcing its mode in
    // the Hello; the server (keys of its own: polling) follows every one of them.
    let lines = ["ib_send_lat -c UD -s 64 -n 20", "ib_read_lat -s 256 -n 20"];
    let o = run_plans(
        None,
        |lid| {
            let b = base(Role::Client, lid, &[("modes", "poll,event,isr")]);
            let runs: Vec<_> = plan(&b, &lines).iter().flat_map(|r| r.per_mode()).collect();
            vec![(runs, 1)]
        },
        |lid| (base(Role::Server, lid, &[]), true),
        20_000_000,
    );
    let runs = &o.clients[0];
    assert_eq!(runs.len(), 6);
    for r in runs {
        let s = r.as_ref().expect("every run passes");
        assert!(s.clean_finish && s.lost == 0, "{s:?}");
    }
    let modes = ["poll", "event", "isr"];
    // The client's isr runs: every request but the first of the size from the handler.
    assert_eq!(runs[2].as_ref().unwrap().isr_posts, 19);
    assert_eq!(runs[5].as_ref().unwrap().isr_posts, 19);
    assert_eq!(
        runs[0].as_ref().unwrap().isr_calls,
        0,
        "no handler when polling"
    );
    let lines_of = |out: &str| -> Vec<(String, String, String)> {
        out.lines()
            .filter(|l| l.starts_with(PREFIX))
            .map(|l| {
                (
                    field(l, "test").to_string(),
                    field(l, "completion").to_string(),
                    field(l, "interrupts").to_string(),
                )
            })
            .collect()
    };
    let (c, s) = (lines_of(&o.client_out), lines_of(&o.server_out));
    let client_modes: Vec<(&str, &str)> =
        c.iter().map(|(t, m, _)| (t.as_str(), m.as_str())).collect();
    let want: Vec<(&str, &str)> = ["send_lat", "read_lat"]
        .iter()
        .flat_map(|t| modes.map(|m| (*t, m)))
        .collect();
    assert_eq!(client_modes, want, "{}", o.client_out);
    // The server answers send_lat in the client's mode: one interrupt per request in isr
    // mode, none polling; read_lat's passive server prints no line.
    let server_modes: Vec<(&str, &str, &str)> = s
        .iter()
        .map(|(t, m, n)| (t.as_str(), m.as_str(), n.as_str()))
        .collect();
    assert_eq!(server_modes.len(), 3, "{}", o.server_out);
    assert_eq!(server_modes[0], ("send_lat", "poll", "0"));
    assert_eq!(server_modes[1].1, "event");
    assert_eq!(server_modes[2], ("send_lat", "isr", "20"));
    for (i, m) in modes.iter().enumerate() {
        let head = format!("run {}/6 pass 1/1", i + 1);
        assert!(
            lines_with(&o.server_out, &head)
                .iter()
                .any(|l| l.contains("ib_send_lat -c UD -s 64 -n 20")
                    && (*m == "poll" || l.contains(if *m == "isr" { "--isr" } else { " -e" }))),
            "{head} {m}:\n{}",
            o.server_out
        );
    }
}

#[test]
fn a_following_server_measures_its_turnaround_when_the_plan_asks() {
    // A plan with `anatomy=on`: the server has no such key; each run's Hello (version 5)
    // asks, the server follows it and its Acks carry its turnaround back.
    const RUNS: [&str; 2] = [
        "ib_send_lat -c UC -s 64 -n 20",
        "ib_write_lat -c RC -s 32 -n 20",
    ];
    let o = run_plans(
        None,
        |lid| {
            let b = base(Role::Client, lid, &[("anatomy", "on")]);
            vec![(plan(&b, &RUNS), 1)]
        },
        |lid| (base(Role::Server, lid, &[]), true),
        200_000_000,
    );
    assert!(o.clients[0]
        .iter()
        .all(|r| r.as_ref().is_ok_and(|s| s.clean_finish)));
    let lines = lines_with(&o.client_out, bench::line::ANATOMY_PREFIX);
    assert_eq!(lines.len(), 2, "{}", o.client_out);
    for (l, (test, bytes)) in lines.iter().zip([("send_lat", "64"), ("write_lat", "32")]) {
        assert_eq!((field(l, "test"), field(l, "bytes")), (test, bytes), "{l}");
        assert_eq!(field(l, "peer"), "software", "{l}");
        let rtt: f64 = field(l, "rtt_med_us").parse().unwrap();
        let turn: f64 = field(l, "peer_med_us").parse().unwrap();
        assert!(rtt > 0.0 && turn < rtt, "{l}");
    }
    assert!(lines_with(&o.server_out, bench::line::ANATOMY_PREFIX).is_empty());
}

/// The bandwidth tests in a plan: send_bw over UD (every size to the MTU), UC and RC and
/// write_bw over RC, with perftest's -t, -l, -Q, -N and --report_gbits, followed by a server
/// with no plan and latency keys of its own. The client prints perftest's bandwidth table
/// and result lines carrying the server's count: nothing lost on a clean fabric. (The model
/// completes a message as it is posted and its clock moves between steps only: small tx
/// depths keep a size over several steps, so it takes measurable time.)
/// A server configured as the runner configures it for a bandwidth command line (its own
/// test a bandwidth test, with -t and -Q among its keys) still listens (its listener is a
/// plain send_lat run, without the bandwidth keys) and follows the client's runs.
#[test]
fn a_server_with_bandwidth_keys_of_its_own_listens_and_follows() {
    const RUNS: [&str; 2] = [
        "ib_send_bw -c UD -s 256 -n 64 -t 4 -Q 2",
        "ib_send_bw -c RC -s 256 -n 64 -t 4 -Q 2",
    ];
    let server_keys = [
        ("test", "send_bw"),
        ("transport", "UD"),
        ("size", "256"),
        ("tx_depth", "4"),
        ("cq_mod", "2"),
    ];
    let o = run_plans(
        None,
        |lid| {
            let b = base(Role::Client, lid, &[]);
            vec![(plan(&b, &RUNS), 1)]
        },
        |lid| (base(Role::Server, lid, &server_keys), true),
        200_000_000,
    );
    for r in &o.clients[0] {
        let s = r
            .as_ref()
            .unwrap_or_else(|e| panic!("{e}\n{}\n{}", o.client_out, o.server_out));
        assert!(s.clean_finish && s.lost == 0, "{s:?}");
    }
    let s = o.server.expect("server ends after the plan");
    assert_eq!((s.totals.runs, s.totals.passed), (2, 2), "{}", o.server_out);
}

/// A server configured with an atomic test's keys of its own (`-A`, `-o`, which only the
/// atomic and READ tests take) still listens as a plain send_lat run and follows the
/// client's runs, atomic or not.
#[test]
fn a_server_with_atomic_keys_of_its_own_listens_and_follows() {
    const RUNS: [&str; 2] = [
        "ib_atomic_lat -c RC -n 20 -A CMP_AND_SWAP -o 4",
        "ib_send_lat -c UD -s 64 -n 20",
    ];
    let server_keys = [
        ("test", "atomic_lat"),
        ("transport", "RC"),
        ("atomic", "CMP_AND_SWAP"),
        ("outstanding_reads", "4"),
    ];
    let o = run_plans(
        None,
        |lid| {
            let b = base(Role::Client, lid, &[]);
            vec![(plan(&b, &RUNS), 1)]
        },
        |lid| (base(Role::Server, lid, &server_keys), true),
        200_000_000,
    );
    for r in &o.clients[0] {
        let s = r
            .as_ref()
            .unwrap_or_else(|e| panic!("{e}\n{}\n{}", o.client_out, o.server_out));
        assert!(s.clean_finish && s.lost == 0, "{s:?}");
    }
    let s = o.server.expect("server ends after the plan");
    assert_eq!((s.totals.runs, s.totals.passed), (2, 2), "{}", o.server_out);
}

#[test]
fn a_server_follows_bandwidth_runs_and_counts_every_message() {
    const RUNS: [&str; 4] = [
        "ib_send_bw -c UD -a -n 64 -t 4 -Q 2 -m 256",
        "ib_send_bw -c UC -s 4096 -n 40 -t 8 -l 4",
        "ib_send_bw -c RC -s 1024 -n 300 -t 10 -Q 10 -N --report_gbits",
        "ib_write_bw -c RC -s 8192 -n 50 -t 4",
    ];
    let o = run_plans(
        None,
        |lid| {
            let b = base(Role::Client, lid, &[]);
            vec![(plan(&b, &RUNS), 1)]
        },
        |lid| (base(Role::Server, lid, &[("transport", "UD")]), true),
        200_000_000,
    );
    let runs = &o.clients[0];
    let sizes: Vec<u32> = runs
        .iter()
        .map(|r| {
            let s = r
                .as_ref()
                .unwrap_or_else(|e| panic!("{e}\n{}", o.client_out));
            assert!(s.clean_finish && s.lost == 0, "{s:?}");
            s.sizes
        })
        .collect();
    assert_eq!(sizes, vec![8, 1, 1, 1], "UD -a with -m 256: 2..=256");
    let s = o.server.expect("server ends after the plan");
    assert_eq!((s.plans, s.totals.runs, s.totals.passed), (1, 4, 4));
    let client: Vec<&str> = o
        .client_out
        .lines()
        .filter(|l| l.starts_with(PREFIX))
        .collect();
    assert_eq!(client.len(), 11);
    for l in &client {
        let n: u64 = field(l, "iterations").parse().unwrap();
        let bytes: u64 = field(l, "bytes").parse().unwrap();
        assert!(field(l, "bw_avg_mbs").parse::<f64>().unwrap() > 0.0, "{l}");
        assert!(field(l, "msg_rate_mpps").parse::<f64>().unwrap() > 0.0);
        if field(l, "test") == "send_bw" {
            // The server's count reached the client: every message, every byte.
            assert_eq!(field(l, "received"), n.to_string(), "{l}");
            assert_eq!(field(l, "bytes_received"), (n * bytes).to_string(), "{l}");
        } else {
            assert_eq!(field(l, "received"), "null", "write_bw counts nothing: {l}");
        }
        assert_eq!(field(l, "lost"), "0");
    }
    // -N: no peak; -Q and -t as given (lowered to -n where perftest lowers them).
    let rc = client
        .iter()
        .find(|l| field(l, "transport") == "RC")
        .unwrap();
    assert_eq!(field(rc, "bw_peak_mbs"), "0.000");
    assert_eq!((field(rc, "tx_depth"), field(rc, "cq_mod")), ("10", "10"));
    let uc = client
        .iter()
        .find(|l| field(l, "transport") == "UC")
        .unwrap();
    assert_eq!(
        (field(uc, "post_list"), field(uc, "cq_mod")),
        ("4", "4"),
        "-Q follows -l"
    );
    // perftest's tables: the MB/sec header, and the Gb/sec one for --report_gbits.
    assert!(o.client_out.contains(bench::bw::formula::RESULT_HEADER_MBS));
    assert!(o.client_out.contains(bench::bw::formula::RESULT_HEADER_GBS));
    assert!(o.client_out.contains("Send BW Test"));
    assert!(o.client_out.contains("RDMA_Write BW Test"));
    // The server: one line per size, send_bw with its count, write_bw passive.
    let server: Vec<&str> = o
        .server_out
        .lines()
        .filter(|l| l.starts_with(PREFIX))
        .collect();
    assert_eq!(server.len(), 11);
    for l in &server {
        assert_eq!(field(l, "role"), "server");
        assert_eq!(field(l, "bw_avg_mbs"), "null");
    }
    assert!(lines_with(&o.server_out, "run 4/4 pass 1/1")
        .iter()
        .any(|l| l.contains("ib_write_bw -c RC -s 8192 -n 50") && l.ends_with(" -t 4")));
}

/// Loss in a bandwidth run: every 5th UD data packet (and every 9th UC one) is dropped.
/// The server's count reaches the client, whose result lines report exactly what was
/// dropped; the plan finishes, and the next size (and run) starts from a clean QP.
#[test]
fn bandwidth_loss_is_counted_exactly_and_reaches_the_client() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::Arc;
    let dropped_ud = Arc::new(AtomicU64::new(0));
    let dropped_uc = Arc::new(AtomicU64::new(0));
    let (dud, duc) = (dropped_ud.clone(), dropped_uc.clone());
    let (mut ud, mut uc) = (0u32, 0u32);
    let rule: sim::DropRule = Box::new(move |p: &sim::Packet| match p.transport {
        sim::qp::ServiceType::Ud if p.qkey == bench::config::DATA_QKEY => {
            ud += 1;
            let drop = ud.is_multiple_of(5);
            dud.fetch_add(drop as u64, Relaxed);
            drop
        }
        sim::qp::ServiceType::Uc => {
            uc += 1;
            let drop = uc.is_multiple_of(9);
            duc.fetch_add(drop as u64, Relaxed);
            drop
        }
        _ => false,
    });
    let o = run_plans(
        Some(rule),
        |lid| {
            let b = base(Role::Client, lid, &[]);
            let runs = plan(
                &b,
                &[
                    "ib_send_bw -c UD -s 64 -n 50 -t 10 -Q 5",
                    "ib_send_bw -c UD -s 512 -n 40 -t 8",
                    "ib_send_bw -c UC -s 256 -n 45 -t 9 -Q 3",
                ],
            );
            vec![(runs, 1)]
        },
        |lid| (base(Role::Server, lid, &[]), true),
        200_000_000,
    );
    let runs: Vec<&SweepSummary> = o.clients[0]
        .iter()
        .map(|r| r.as_ref().expect("lossy runs still pass"))
        .collect();
    let lost: Vec<u64> = runs.iter().map(|s| s.lost).collect();
    // One packet per message (every size fits the MTU): the UD runs lose every 5th of
    // 50 + 40 messages, the UC run every 9th of 45.
    assert_eq!(lost[0] + lost[1], dropped_ud.load(Relaxed));
    assert_eq!((lost[0], lost[1]), (10, 8));
    assert_eq!(lost[2], dropped_uc.load(Relaxed));
    assert_eq!(lost[2], 5);
    let r = results(&o.client_out);
    assert_eq!(
        r.iter().map(|x| x.3 as u64).collect::<Vec<_>>(),
        lost,
        "the result lines say the same"
    );
    for l in o.client_out.lines().filter(|l| l.starts_with(PREFIX)) {
        let n: u64 = field(l, "iterations").parse().unwrap();
        let got: u64 = field(l, "received").parse().unwrap();
        let lost: u64 = field(l, "lost").parse().unwrap();
        assert_eq!(got + lost, n, "{l}");
    }
    let s = o.server.expect("server");
    assert_eq!((s.plans, s.totals.passed), (1, 3));
    assert_eq!(
        s.totals.lost,
        lost.iter().sum::<u64>(),
        "the server counted them"
    );
}

/// read_bw and atomic_bw in a plan (rendezvous version 5 carries `-o` and `-A`): the server
/// exposes its region and stays passive, the client streams READs and atomics with up to
/// `-o` outstanding and reports perftest's figures; nothing is counted on the server side.
#[test]
fn a_server_follows_read_and_atomic_bandwidth_runs() {
    const RUNS: [&str; 2] = [
        "ib_read_bw -c RC -a -n 40 -t 4 -Q 2 -m 1024 -o 8",
        "ib_atomic_bw -c RC -n 60 -t 4 -A CMP_AND_SWAP",
    ];
    let o = run_plans(
        None,
        |lid| {
            let b = base(Role::Client, lid, &[]);
            let runs = plan(&b, &RUNS);
            assert_eq!(runs[1].outstanding_reads, 16, "perftest's -o for BW");
            vec![(runs, 1)]
        },
        |lid| (base(Role::Server, lid, &[]), true),
        400_000_000,
    );
    let sizes: Vec<u32> = o.clients[0]
        .iter()
        .map(|r| {
            let s = r
                .as_ref()
                .unwrap_or_else(|e| panic!("{e}\n{}", o.client_out));
            assert!(s.clean_finish && s.lost == 0, "{s:?}");
            s.sizes
        })
        .collect();
    assert_eq!(
        sizes,
        vec![23, 1],
        "read_bw -a: 2 B..=8 MiB; atomic_bw: 8 B"
    );
    let client: Vec<&str> = o
        .client_out
        .lines()
        .filter(|l| l.starts_with(PREFIX))
        .collect();
    assert_eq!(client.len(), 24);
    for l in &client {
        assert!(field(l, "bw_avg_mbs").parse::<f64>().unwrap() > 0.0, "{l}");
        assert_eq!((field(l, "received"), field(l, "lost")), ("null", "0"));
    }
    assert_eq!(
        (field(client[23], "test"), field(client[23], "bytes")),
        ("atomic_bw", "8")
    );
    assert!(o.client_out.contains("RDMA_Read BW Test"));
    assert!(o.client_out.contains("Atomic BW Test"));
    assert!(lines_with(&o.server_out, "run 2/2 pass 1/1")
        .iter()
        .any(
            |l| l.contains("ib_atomic_bw -c RC -s 8 -n 60") && l.contains("-A CMP_AND_SWAP -o 16")
        ));
    let s = o.server.expect("server ends after the plan");
    assert_eq!((s.plans, s.totals.passed), (1, 2));
}

/// Duration mode (-D) in a plan: the client streams send_bw over UD for the duration
/// (perftest's margins: a quarter before and after the sample), its Count carries how many
/// messages it sent, and the server's count of them comes back: loss exact although `-n`
/// says nothing. Every 6th data packet is dropped. (The nodes' TSC runs 1000 times faster
/// than it says, so 4 "seconds" pass in 4 ms of model time.)
#[test]
fn duration_mode_counts_every_message_sent() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::Arc;
    let dropped = Arc::new(AtomicU64::new(0));
    let d = dropped.clone();
    let mut n = 0u32;
    let rule: sim::DropRule = Box::new(move |p: &sim::Packet| {
        if p.transport == sim::qp::ServiceType::Ud && p.qkey == bench::config::DATA_QKEY {
            n += 1;
            let drop = n.is_multiple_of(6);
            d.fetch_add(drop as u64, Relaxed);
            return drop;
        }
        false
    });
    let o = run_plans_tsc(
        1000,
        Some(rule),
        |lid| {
            let b = base(Role::Client, lid, &[]);
            vec![(plan(&b, &["ib_send_bw -c UD -s 256 -t 4 -Q 2 -D 4"]), 1)]
        },
        |lid| (base(Role::Server, lid, &[]), true),
        200_000_000,
    );
    let s = o.clients[0][0]
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}\n{}", o.client_out));
    assert_eq!(
        (s.sizes, s.lost),
        (1, dropped.load(Relaxed)),
        "{}\n{}",
        o.client_out,
        o.server_out
    );
    assert!(s.lost > 0, "the rule dropped packets");
    let l = o
        .client_out
        .lines()
        .find(|l| l.starts_with(PREFIX))
        .unwrap();
    let sent: u64 = field(l, "iterations").parse().unwrap();
    let got: u64 = field(l, "received").parse().unwrap();
    assert_eq!(got + s.lost, sent, "{l}");
    assert!(sent > 10, "the stream ran for its duration: {l}");
    assert_eq!(field(l, "bw_peak_mbs"), "0.000", "-D implies -N");
    assert!(
        field(l, "msg_rate_mpps").parse::<f64>().unwrap() > 0.0,
        "{l}"
    );
    let srv = o.server.expect("server");
    assert_eq!(srv.totals.lost, s.lost, "the server counted the same");
}

/// The four numbers of a port line's `before` or `after` object.
fn port_counts(line: &str, which: &str) -> [u64; 4] {
    let at = line.find(&format!("\"{which}\":{{")).unwrap() + which.len() + 3;
    let obj = &line[at..=at + line[at..].find('}').unwrap()];
    bench::line::PortCounts::NAMES.map(|k| field(obj, k).parse().unwrap())
}

/// The client reads its port's PMA counters (through MAD_IFC, no packet on the wire) before
/// and after each run of its plan: over the plan they add up to exactly the packets and
/// words the fabric carried from and to it, nothing moves between runs, and each run moved
/// at least its own iterations each way. The server reads its own around each run it
/// serves.
#[test]
fn the_clients_port_counters_around_each_run_are_the_traffic_it_sent_and_received() {
    use std::sync::{Arc, Mutex};
    // (source HCA, words) of every packet off the special QPs the switch carried.
    let seen: Arc<Mutex<Vec<(usize, u64)>>> = Arc::default();
    let log = seen.clone();
    let rule: sim::DropRule = Box::new(move |p: &sim::Packet| {
        if p.dest_qpn > 1 {
            log.lock()
                .unwrap()
                .push((p.src_hca, u64::from(p.pkt_len_words())));
        }
        false
    });
    const RUNS: [&str; 5] = [
        "ib_send_lat -c UD -s 256 -n 20",
        "ib_send_lat -c RC -s 4096 -n 10",
        "ib_send_lat -c UC -s 64 -n 10 -I 64",
        "ib_read_lat -c RC -s 64 -n 10",
        "ib_atomic_lat -c RC -s 8 -n 10 -A CMP_AND_SWAP",
    ];
    let o = run_plans(
        Some(rule),
        |lid| vec![(plan(&base(Role::Client, lid, &[]), &RUNS), 1)],
        |lid| (base(Role::Server, lid, &[]), true),
        20_000_000,
    );
    assert!(o.clients[0].iter().all(Result::is_ok), "{}", o.client_out);
    let lines = lines_with(&o.client_out, bench::line::PORT_PREFIX);
    assert_eq!(lines.len(), RUNS.len(), "{}", o.client_out);
    let mut total = [0u64; 4];
    let mut last_after: Option<[u64; 4]> = None;
    for (line, run) in lines.iter().zip(RUNS) {
        let canonical = bench::config::Run::parse(run).unwrap().to_string();
        assert_eq!(field(line, "command"), canonical, "{line}");
        assert_eq!(field(line, "role"), "client");
        assert_eq!(field(line, "extended"), "true");
        let (before, after) = (port_counts(line, "before"), port_counts(line, "after"));
        if let Some(prev) = last_after {
            assert_eq!(before, prev, "nothing moves between runs: {line}");
        }
        last_after = Some(after);
        let delta: Vec<u64> = (0..4).map(|i| after[i] - before[i]).collect();
        let n = run
            .split_whitespace()
            .skip_while(|w| *w != "-n")
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap();
        assert!(delta[2] >= n && delta[3] >= n, "{run}: {delta:?}");
        for i in 0..4 {
            total[i] += delta[i];
        }
    }
    let seen = seen.lock().unwrap();
    let sum = |src: usize, words: bool| -> u64 {
        seen.iter()
            .filter(|(s, _)| *s == src)
            .map(|(_, w)| if words { *w } else { 1 })
            .sum()
    };
    // HCA 0 is the client: what it sent left it, what HCA 1 sent reached it.
    assert_eq!(
        total,
        [sum(0, true), sum(1, true), sum(0, false), sum(1, false)],
        "{}",
        o.client_out
    );
    // The server reads its own port from the start of each run it accepted (after the
    // client's Hello) to the run's end: within what the fabric carried, at least the run's
    // iterations each way.
    let lines = lines_with(&o.server_out, bench::line::PORT_PREFIX);
    assert_eq!(lines.len(), RUNS.len(), "{}", o.server_out);
    let mut served = [0u64; 4];
    for (line, run) in lines.iter().zip(RUNS) {
        // The server's command line is the run as it ran it (with the inline limit the
        // client's Hello gave it), the same as the client's: `-I` only when not the default.
        let r = bench::config::Run::parse(run).unwrap();
        assert_eq!(field(line, "command"), r.to_string(), "{line}");
        let (test, transport) = (r.test.name(), r.transport.name());
        assert_eq!(
            (field(line, "test"), field(line, "transport")),
            (test, transport)
        );
        assert_eq!(field(line, "role"), "server");
        let (before, after) = (port_counts(line, "before"), port_counts(line, "after"));
        let n = run
            .split_whitespace()
            .skip_while(|w| *w != "-n")
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap();
        assert!(
            after[2] - before[2] >= n && after[3] - before[3] >= n,
            "{line}"
        );
        for i in 0..4 {
            served[i] += after[i] - before[i];
        }
    }
    let fabric = [sum(1, true), sum(0, true), sum(1, false), sum(0, false)];
    assert!(
        (0..4).all(|i| served[i] <= fabric[i]),
        "{served:?} {fabric:?}"
    );
}

/// The client's `-b` breakdown: (peak, average, msg rate) of the client and of the server.
fn bidir_terms(line: &str) -> ([f64; 3], [f64; 3]) {
    let nums: Vec<f64> = line
        .split([' ', ','])
        .filter_map(|w| w.parse::<f64>().ok())
        .collect();
    assert_eq!(nums.len(), 6, "{line}");
    ([nums[0], nums[2], nums[4]], [nums[1], nums[3], nums[5]])
}

/// `-b` in a plan (perftest's bidirectional runs): send_bw over UD and RC with both sides
/// sending and receiving, write_bw over UC, read_bw and atomic_bw over RC with both sides
/// requesting. Every message arrives, counted in both directions; the client's row is the
/// sum of its own figures and the server's, which reach it in the Report: the terms it
/// prints are bit for bit what the server printed of itself, and the row is their sum.
#[test]
fn bidirectional_runs_count_both_directions_and_print_the_sum() {
    const RUNS: [&str; 5] = [
        "ib_send_bw -c UD -s 512 -n 40 -t 8 -b",
        "ib_send_bw -c RC -s 1024 -n 60 -t 10 -Q 5 -b",
        "ib_write_bw -c UC -s 4096 -n 30 -t 4 -b",
        "ib_read_bw -c RC -s 2048 -n 30 -t 4 -b",
        "ib_atomic_bw -c RC -n 40 -t 4 -b",
    ];
    let o = run_plans(
        None,
        |lid| {
            let b = base(Role::Client, lid, &[]);
            vec![(plan(&b, &RUNS), 1)]
        },
        |lid| (base(Role::Server, lid, &[]), true),
        20_000_000,
    );
    for r in &o.clients[0] {
        let s = r
            .as_ref()
            .unwrap_or_else(|e| panic!("{e}\n{}\n{}", o.client_out, o.server_out));
        assert!(s.clean_finish && s.lost == 0 && s.sizes == 1, "{s:?}");
    }
    let s = o.server.expect("server ends after the plan");
    assert_eq!((s.totals.runs, s.totals.passed), (5, 5));
    // Both directions of send_bw counted exactly: the server's count of the client's
    // messages (in the client's result line) and the client's of the server's.
    let client: Vec<&str> = o
        .client_out
        .lines()
        .filter(|l| l.starts_with(PREFIX))
        .collect();
    assert_eq!(client.len(), 5);
    for (l, n) in client[..2].iter().zip([40u64, 60]) {
        assert_eq!(field(l, "received"), n.to_string(), "{l}");
        assert_eq!(field(l, "lost"), "0");
    }
    let back = lines_with(&o.client_out, "(server to client)");
    assert_eq!(back.len(), 2);
    assert!(
        back[0].contains("received 40 messages, 20480 bytes, 0 lost"),
        "{}",
        back[0]
    );
    assert!(
        back[1].contains("received 60 messages, 61440 bytes, 0 lost"),
        "{}",
        back[1]
    );
    let srv_counts = lines_with(&o.server_out, "messages,");
    assert_eq!(srv_counts.len(), 2, "{}", o.server_out);
    assert!(srv_counts[0].contains("received 40 messages, 20480 bytes, 0 lost"));
    assert!(srv_counts[1].contains("received 60 messages, 61440 bytes, 0 lost"));
    // The sum: every run's terms, the server's as it printed them, the row their sum.
    let sums = lines_with(&o.client_out, " the sum of:");
    let server_own = lines_with(&o.server_out, " this side:");
    assert_eq!((sums.len(), server_own.len()), (5, 5));
    let rows: Vec<&str> = o
        .client_out
        .lines()
        .zip(o.client_out.lines().skip(1))
        .filter(|(_, next)| next.starts_with(" the sum of:"))
        .map(|(row, _)| row)
        .collect();
    for ((sum, own), (row, l)) in sums.iter().zip(&server_own).zip(rows.iter().zip(&client)) {
        let (mine, peer) = bidir_terms(sum);
        let theirs: Vec<f64> = own
            .split([' ', ','])
            .filter_map(|w| w.parse::<f64>().ok())
            .collect();
        assert_eq!(theirs.len(), 3, "{own}");
        for i in 0..3 {
            assert_eq!(peer[i].to_bits(), theirs[i].to_bits(), "{sum} / {own}");
            assert!(
                mine[i] > 0.0 && peer[i] > 0.0,
                "both directions measured: {sum}"
            );
        }
        // The printed row: BW peak, BW average, MsgRate of the sum.
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[2], format!("{:.2}", mine[0] + peer[0]), "{row}");
        assert_eq!(cols[3], format!("{:.2}", mine[1] + peer[1]), "{row}");
        assert_eq!(cols[4], format!("{:.6}", mine[2] + peer[2]), "{row}");
        // The result line's MB/s is the same sum (the runs report MB/s).
        let avg: f64 = field(l, "bw_avg_mbs").parse().unwrap();
        assert!((avg - (mine[1] + peer[1])).abs() < 0.001, "{l} / {sum}");
    }
}

/// `-b` over a lossy fabric: every 7th UD data packet is dropped in either direction. Each
/// side counts what reached it; the server's total reaches the client in its Report, so
/// the client reports the loss of both directions exactly, each as the fabric dropped it.
#[test]
fn bidirectional_loss_is_counted_per_direction() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::Arc;
    let to_server = Arc::new(AtomicU64::new(0));
    let to_client = Arc::new(AtomicU64::new(0));
    let (ts, tc) = (to_server.clone(), to_client.clone());
    let mut n = 0u32;
    let server_lid = Arc::new(AtomicU64::new(0));
    let sl = server_lid.clone();
    let rule: sim::DropRule = Box::new(move |p: &sim::Packet| {
        if p.transport != sim::qp::ServiceType::Ud || p.qkey != bench::config::DATA_QKEY {
            return false;
        }
        n += 1;
        let drop = n.is_multiple_of(7);
        if drop {
            if u64::from(p.dlid) == sl.load(Relaxed) {
                ts.fetch_add(1, Relaxed);
            } else {
                tc.fetch_add(1, Relaxed);
            }
        }
        drop
    });
    let o = run_plans(
        Some(rule),
        |lid| {
            server_lid.store(u64::from(lid), Relaxed);
            let b = base(Role::Client, lid, &[]);
            vec![(plan(&b, &["ib_send_bw -c UD -s 256 -n 70 -t 7 -b"]), 1)]
        },
        |lid| (base(Role::Server, lid, &[]), true),
        20_000_000,
    );
    let run = o.clients[0][0]
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}\n{}\n{}", o.client_out, o.server_out));
    let (ts, tc) = (to_server.load(Relaxed), to_client.load(Relaxed));
    assert_eq!(ts + tc, 20, "every 7th of 140 messages");
    assert!(ts > 0 && tc > 0, "both directions lost some: {ts} {tc}");
    assert_eq!(run.lost, ts + tc, "the client's total is both directions'");
    let l = lines_with(&o.client_out, PREFIX)[0];
    assert_eq!(field(l, "received"), (70 - ts).to_string(), "{l}");
    assert_eq!(field(l, "lost"), (ts + tc).to_string(), "{l}");
    let back = lines_with(&o.client_out, "(server to client)");
    assert!(
        back[0].contains(&format!("received {} messages", 70 - tc))
            && back[0].ends_with(&format!("{tc} lost (server to client)")),
        "{}",
        back[0]
    );
    let srv = lines_with(&o.server_out, "messages,");
    assert!(srv[0].ends_with(&format!("{ts} lost")), "{}", srv[0]);
    assert_eq!(o.server.expect("server").totals.lost, ts);
}
