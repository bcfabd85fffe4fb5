//! The delegation client (`bench::delegate::Client`) over the real driver and an in-process
//! model HCA, against a delegate stand-in on a second HCA of the same fabric
//! (`common::standin`): set-up, calls in each completion mode, several outstanding, bulk
//! data by the delegate's RDMA into and out of the node's buffers, one-sided regions, and
//! what a vanished, silent or nonsensical delegate gives the caller. Model time is virtual:
//! the stand-in steps whenever the client waits.

mod common;

use bench::delegate::{BufId, Client, ClientConfig, DelegateError};
use bench::{BenchEnv, Completion};
use common::bench_env::SimEnv;
use common::standin::{Fault, StandIn, StandInEnv};
use common::*;
use delegate_wire::{Access, LogLevel, Op, OpenFlags};
use mlx4::Hca;
use sim::FabricConfig;

const CALL_TIMEOUT_NS: u64 = 50_000_000;

struct Node {
    hca: Hca<SimPlatform>,
    env: StandInEnv,
    p: SimPlatform,
    standin_p: SimPlatform,
}

fn node() -> Node {
    let (_m, mut ps) = machine(2, FabricConfig::default());
    let p1 = ps.remove(1);
    let p0 = ps.remove(0);
    let standin_p = p1.clone_handle();
    let standin = StandIn::new(p1);
    let probe = p0.clone_handle();
    let node_env = SimEnv::new(&p0);
    let mut hca = Hca::init(p0, test_config()).expect("bring-up");
    hca.wait_port_active(1, 5000).expect("port active");
    Node {
        hca,
        env: StandInEnv {
            node: node_env,
            standin,
        },
        p: probe,
        standin_p,
    }
}

fn config(n: &Node, completion: Completion) -> ClientConfig {
    let mut c = ClientConfig::new(Some(n.env.standin.lid), n.env.standin.rdv_qpn());
    c.completion = completion;
    c.call_timeout_ns = CALL_TIMEOUT_NS;
    c.connect_timeout_ns = 1_000_000_000;
    c.wait_slice_ns = 0;
    c
}

fn connect(n: &mut Node, completion: Completion) -> Client<Hca<SimPlatform>> {
    let cfg = config(n, completion);
    Client::connect(&mut n.hca, &mut n.env, cfg).expect("connect")
}

/// Closes everything and checks that nothing leaked and the model saw no violation.
fn finish(n: Node) {
    assert_eq!(n.env.node.live(), 0, "the client's buffers are freed");
    let Node {
        hca,
        env,
        p,
        standin_p,
        ..
    } = n;
    hca.close().unwrap();
    let (sh, _) = env.standin.close();
    sh.close().unwrap();
    assert_no_violations(&p);
    assert_no_violations(&standin_p);
}

fn buffer(c: &mut Client<Hca<SimPlatform>>, n: &mut Node, len: usize) -> BufId {
    let region = n.env.alloc_dma(len, 4096).expect("DMA");
    c.register(&mut n.hca, region).expect("register")
}

fn fill(c: &mut Client<Hca<SimPlatform>>, b: BufId, at: usize, bytes: &[u8]) {
    c.buffer_mut(b).unwrap().bytes_mut()[at..at + bytes.len()].copy_from_slice(bytes);
}

fn bytes(c: &Client<Hca<SimPlatform>>, b: BufId, at: usize, len: usize) -> Vec<u8> {
    let r = c.buffer(b).unwrap();
    (at..at + len).map(|k| r.read::<1>(k).unwrap()[0]).collect()
}

/// Every kind of call, blocking, in `completion` mode: echo, clock, a file written and read
/// back by the delegate's RDMA (zero copy here), inline I/O, fstat, a log line, goodbye.
fn calls_in(completion: Completion) {
    let mut n = node();
    let mut c = connect(&mut n, completion);
    assert_eq!(
        c.credits(),
        8,
        "the lesser of the node's 16 and the stand-in's 8"
    );
    c.null(&mut n.hca, &mut n.env, b"hello, delegate").unwrap();
    c.null(&mut n.hca, &mut n.env, &[]).unwrap();
    let (realtime, monotonic) = c.clock(&mut n.hca, &mut n.env).unwrap();
    assert_eq!((realtime, monotonic), (1_700_000_000_000_000_000, 42));

    let buf = buffer(&mut c, &mut n, 8192);
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
    fill(&mut c, buf, 100, &data);
    let rw = OpenFlags::READ
        .union(OpenFlags::WRITE)
        .union(OpenFlags::CREATE);
    let (h, size) = c
        .open(&mut n.hca, &mut n.env, "results/run.txt", rw, 0o644)
        .unwrap();
    assert_eq!(size, 0);
    let wrote = c
        .pwrite(&mut n.hca, &mut n.env, h, 10, buf, 100, data.len() as u32)
        .unwrap();
    assert_eq!(wrote, 5000);
    assert_eq!(&n.env.standin.files["results/run.txt"][10..], &data[..]);
    let read = c
        .pread(&mut n.hca, &mut n.env, h, 10, buf, 6000, 2000)
        .unwrap();
    assert_eq!(read, 2000);
    assert_eq!(bytes(&c, buf, 6000, 2000), data[..2000]);
    // Past the end of the file: what there is.
    let tail = c
        .pread(&mut n.hca, &mut n.env, h, 4000, buf, 0, 4000)
        .unwrap();
    assert_eq!(tail, 1010);
    let inline = c
        .pwrite_inline(&mut n.hca, &mut n.env, h, 0, b"0123456789")
        .unwrap();
    assert_eq!(inline, 10);
    let mut small = [0u8; 12];
    let got = c
        .pread_inline(&mut n.hca, &mut n.env, h, 0, &mut small)
        .unwrap();
    assert_eq!(
        &small[..got],
        &b"0123456789"[..10]
            .iter()
            .chain(&data[..2])
            .copied()
            .collect::<Vec<_>>()[..]
    );
    assert_eq!(c.fstat(&mut n.hca, &mut n.env, h).unwrap().size, 5010);
    c.fsync(&mut n.hca, &mut n.env, h).unwrap();
    c.close_file(&mut n.hca, &mut n.env, h).unwrap();
    // A handle no longer open: the delegate's typed failure reaches the caller.
    match c.fstat(&mut n.hca, &mut n.env, h) {
        Err(DelegateError::Failed {
            op: Op::Fstat,
            failure,
        }) => {
            assert_eq!(failure.code, delegate_wire::ErrorCode::BadHandle);
            assert_eq!(failure.detail, h);
        }
        other => panic!("fstat of a closed handle: {other:?}"),
    }
    c.log(&mut n.hca, &mut n.env, LogLevel::Info, "plan done")
        .unwrap();
    assert!(n.env.standin.log.iter().any(|l| l == "node: plan done"));

    let counters = c.counters();
    match completion {
        Completion::Poll => assert_eq!(counters.events, 0),
        Completion::Event => assert!(counters.events > 0, "{counters:?}"),
        Completion::Isr => {
            assert!(counters.isr_calls > 0, "{counters:?}");
            assert!(counters.isr_completed > 0, "{counters:?}");
            assert!(n.env.node.isr_deliveries.get() > 0);
        }
    }
    c.close(&mut n.hca, &mut n.env).unwrap();
    assert_eq!(n.env.standin.goodbyes, 1);
    finish(n);
}

#[test]
fn calls_complete_by_polling() {
    calls_in(Completion::Poll);
}

#[test]
fn calls_complete_by_events() {
    calls_in(Completion::Event);
}

#[test]
fn calls_complete_in_the_interrupt_handler() {
    calls_in(Completion::Isr);
}

#[test]
fn several_calls_outstanding_complete_by_tag() {
    for completion in Completion::ALL {
        let mut n = node();
        let mut c = connect(&mut n, completion);
        let payloads: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 10 + usize::from(i)]).collect();
        let mut tags = Vec::new();
        for p in &payloads {
            let req = delegate_wire::Request::Null { payload: p };
            tags.push(c.submit(&mut n.hca, &mut n.env, &req).unwrap());
        }
        // Every credit is out.
        let busy = c.submit(
            &mut n.hca,
            &mut n.env,
            &delegate_wire::Request::Null { payload: b"x" },
        );
        assert_eq!(busy, Err(DelegateError::Busy));
        // Taken in reverse order: each reply matched to its call by tag.
        for (tag, p) in tags.iter().zip(&payloads).rev() {
            c.wait(&mut n.hca, &mut n.env, *tag).unwrap();
            let echoed = c
                .take(&mut n.hca, *tag, |r| match r {
                    delegate_wire::Reply::Null { payload } => Ok(payload.to_vec()),
                    _ => panic!("not an echo"),
                })
                .unwrap();
            assert_eq!(&echoed, p);
            assert_eq!(
                c.take(&mut n.hca, *tag, |_| Ok(())),
                Err(DelegateError::UnknownTag),
                "a taken tag is gone"
            );
        }
        // And again with wait_any, many more calls than credits.
        let mut done = 0;
        let mut sent = 0u32;
        while done < 40 {
            while sent < 40 {
                let p = sent.to_be_bytes();
                match c.submit(
                    &mut n.hca,
                    &mut n.env,
                    &delegate_wire::Request::Null { payload: &p },
                ) {
                    Ok(_) => sent += 1,
                    Err(DelegateError::Busy) => break,
                    Err(e) => panic!("{e}"),
                }
            }
            let tag = c.wait_any(&mut n.hca, &mut n.env).unwrap().unwrap();
            c.take(&mut n.hca, tag, |_| Ok(())).unwrap();
            done += 1;
        }
        assert_eq!(c.wait_any(&mut n.hca, &mut n.env).unwrap(), None);
        assert_eq!(n.env.standin.calls, 8 + 40);
        c.close(&mut n.hca, &mut n.env).unwrap();
        finish(n);
    }
}

#[test]
fn regions_are_read_written_and_updated_one_sided() {
    let mut n = node();
    let mut c = connect(&mut n, Completion::Poll);
    let all = Access::READ.union(Access::WRITE).union(Access::ATOMIC);
    let region = c
        .map_region(&mut n.hca, &mut n.env, all, None, 0, 4096)
        .unwrap();
    assert_eq!((region.len, region.access), (4096, all));
    let buf = buffer(&mut c, &mut n, 4096);
    let pattern: Vec<u8> = (0..1024u32).map(|i| (i ^ 0x5a) as u8).collect();
    fill(&mut c, buf, 0, &pattern);
    let calls = n.env.standin.calls;
    c.region_write(&mut n.hca, &mut n.env, &region, 512, buf, 0, 1024)
        .unwrap();
    assert_eq!(
        n.env.standin.region_bytes(region.region)[512..1536],
        pattern[..]
    );
    c.region_read(&mut n.hca, &mut n.env, &region, 512, buf, 2048, 1024)
        .unwrap();
    assert_eq!(bytes(&c, buf, 2048, 1024), pattern);
    assert_eq!(
        n.env.standin.calls, calls,
        "one-sided: the delegate's CPU saw none of it"
    );
    // Atomics on word 0 (zero): fetch-and-add then compare-and-swap.
    let old = c
        .region_fetch_add(&mut n.hca, &mut n.env, &region, 0, 5, buf, 8)
        .unwrap();
    assert_eq!(old, 0);
    let old = c
        .region_cas(&mut n.hca, &mut n.env, &region, 0, 5, 99, buf, 8)
        .unwrap();
    assert_eq!(old, 5);
    assert_eq!(
        n.env.standin.region_bytes(region.region)[..8],
        99u64.to_be_bytes()
    );
    // Outside the region, or what it does not grant: refused before anything is posted.
    assert_eq!(
        c.region_read(&mut n.hca, &mut n.env, &region, 4000, buf, 0, 200),
        Err(DelegateError::OutOfRange)
    );
    let ro = c
        .map_region(&mut n.hca, &mut n.env, Access::READ, None, 0, 4096)
        .unwrap();
    assert_eq!(
        c.region_write(&mut n.hca, &mut n.env, &ro, 0, buf, 0, 8),
        Err(DelegateError::OutOfRange)
    );
    assert_eq!(
        c.region_fetch_add(&mut n.hca, &mut n.env, &ro, 0, 1, buf, 0),
        Err(DelegateError::OutOfRange)
    );
    c.unmap_region(&mut n.hca, &mut n.env, ro.region).unwrap();
    c.unmap_region(&mut n.hca, &mut n.env, region.region)
        .unwrap();
    c.close(&mut n.hca, &mut n.env).unwrap();
    finish(n);
}

/// Model nanoseconds a call took to fail.
fn failing_call(
    n: &mut Node,
    c: &mut Client<Hca<SimPlatform>>,
) -> (Result<(), DelegateError>, u64) {
    let t0 = n.env.now_ns();
    let r = c.null(&mut n.hca, &mut n.env, b"are you there?");
    (r, n.env.now_ns() - t0)
}

#[test]
fn a_delegate_that_vanishes_fails_the_calls_within_their_bound() {
    for completion in Completion::ALL {
        let mut n = node();
        let mut cfg = config(&n, completion);
        // Longer than RC's retries (8 tries 67 ms apart), so those end first.
        cfg.call_timeout_ns = 1_000_000_000;
        let mut c = Client::connect(&mut n.hca, &mut n.env, cfg).unwrap();
        n.env.standin.fault = Fault::VanishAfter(1);
        c.null(&mut n.hca, &mut n.env, b"first").unwrap();
        // The delegate's HCA took (and acknowledged) this request, then its process went:
        // no answer ever comes.
        let (r, took) = failing_call(&mut n, &mut c);
        assert_eq!(
            r,
            Err(DelegateError::Timeout { op: Some(Op::Null) }),
            "{completion:?}"
        );
        assert!(took <= cfg.call_timeout_ns + 1_000_000, "{took} ns");
        assert!(n.env.standin.log.iter().any(|l| l == "vanished"));
        // The next request finds no QP there: RC's retries run out and the connection fails.
        let (r, took) = failing_call(&mut n, &mut c);
        assert_eq!(
            r,
            Err(DelegateError::Disconnected {
                status: verbs::WcStatus::RetryExcErr
            }),
            "{completion:?}"
        );
        assert!(took < cfg.call_timeout_ns, "{took} ns");
        // The connection is given up: later calls fail at once with the same cause.
        let (again, took) = failing_call(&mut n, &mut c);
        assert_eq!(again, r);
        assert_eq!(took, 0);
        assert_eq!(c.broken(), r.err());
        // Closing skips the goodbye and still frees everything.
        c.close(&mut n.hca, &mut n.env).unwrap();
        assert_eq!(n.env.standin.goodbyes, 0);
        finish(n);
    }
}

#[test]
fn a_silent_delegate_times_the_call_out() {
    for completion in Completion::ALL {
        let mut n = node();
        let mut c = connect(&mut n, completion);
        n.env.standin.fault = Fault::Silent;
        let (r, took) = failing_call(&mut n, &mut c);
        assert_eq!(
            r,
            Err(DelegateError::Timeout { op: Some(Op::Null) }),
            "{completion:?}"
        );
        assert!(
            (CALL_TIMEOUT_NS..CALL_TIMEOUT_NS + 1_000_000).contains(&took),
            "{completion:?}: {took} ns"
        );
        // A delegate that answers again serves the next call; nothing is broken.
        n.env.standin.fault = Fault::None;
        c.null(&mut n.hca, &mut n.env, b"back").unwrap();
        assert_eq!(c.broken(), None);
        c.close(&mut n.hca, &mut n.env).unwrap();
        finish(n);
    }
}

#[test]
fn nonsense_from_the_delegate_is_a_typed_error() {
    // Bytes that are no reply: nothing can be matched, the connection is given up.
    let mut n = node();
    let mut c = connect(&mut n, Completion::Poll);
    n.env.standin.fault = Fault::Garbage;
    let (r, _) = failing_call(&mut n, &mut c);
    assert!(
        matches!(r, Err(DelegateError::BadReply { op: None, .. })),
        "{r:?}"
    );
    assert!(c.broken().is_some());
    c.close(&mut n.hca, &mut n.env).unwrap();
    finish(n);

    // A well-formed reply of another op fails the call it answers; the connection stays.
    let mut n = node();
    let mut c = connect(&mut n, Completion::Event);
    n.env.standin.fault = Fault::WrongOp;
    let (r, _) = failing_call(&mut n, &mut c);
    assert!(
        matches!(
            r,
            Err(DelegateError::BadReply {
                op: Some(Op::Null),
                ..
            })
        ),
        "{r:?}"
    );
    assert_eq!(c.broken(), None);
    n.env.standin.fault = Fault::None;
    c.null(&mut n.hca, &mut n.env, b"ok").unwrap();
    c.close(&mut n.hca, &mut n.env).unwrap();
    finish(n);

    // A reply under a tag no call has: dropped as stray, the call times out.
    let mut n = node();
    let mut c = connect(&mut n, Completion::Isr);
    n.env.standin.fault = Fault::WrongTag;
    let (r, _) = failing_call(&mut n, &mut c);
    assert_eq!(r, Err(DelegateError::Timeout { op: Some(Op::Null) }));
    assert_eq!(c.counters().stray, 1);
    n.env.standin.fault = Fault::None;
    c.null(&mut n.hca, &mut n.env, b"ok").unwrap();
    c.close(&mut n.hca, &mut n.env).unwrap();
    finish(n);
}

#[test]
fn no_delegate_at_the_address_is_not_found_within_the_bound() {
    let mut n = node();
    let mut cfg = config(&n, Completion::Poll);
    cfg.rdv_qpn = n.env.standin.rdv_qpn() + 1;
    cfg.connect_timeout_ns = 300_000_000;
    let t0 = n.env.now_ns();
    let r = Client::connect(&mut n.hca, &mut n.env, cfg);
    assert_eq!(r.err(), Some(DelegateError::NotFound { waited_ms: 300 }));
    assert!(n.env.now_ns() - t0 < 400_000_000);
    assert_eq!(n.env.standin.accepts, 0);
    finish(n);
}

#[test]
fn the_delegate_is_found_by_probing_lids() {
    let mut n = node();
    let mut cfg = config(&n, Completion::Poll);
    cfg.lid = None;
    cfg.probe_lids = (1, 16);
    let mut c = Client::connect(&mut n.hca, &mut n.env, cfg).unwrap();
    assert_eq!(c.accepted().unwrap().lid, n.env.standin.lid);
    c.null(&mut n.hca, &mut n.env, b"found").unwrap();
    c.close(&mut n.hca, &mut n.env).unwrap();
    finish(n);
}

/// The delegation benchmark end to end on the stand-in, every completion mode, with the RC
/// ib_send_lat baseline served by a ping-pong server on the stand-in's HCA.
#[test]
fn the_benchmark_measures_every_operation_mode_and_rate_against_the_baseline() {
    use bench::config::Modes;
    use bench::delegate::benchmark::{self, BenchConfig};
    use bench::delegate::line::{BASELINE_PREFIX, RATE_PREFIX, RESULT_PREFIX};
    use bench::{PingPongConfig, Role, Transport};

    let mut n = node();
    let mut server = PingPongConfig::new(Transport::Rc, Role::Server);
    server.wait_timeout_ns = 2_000_000;
    // The run the baseline asks for: the null request's 16 bytes, the benchmark's
    // iterations (as ibk-rdv's server takes them from its command line).
    server.sizes = bench::Sizes::Single(benchmark::NULL_BYTES);
    server.iterations = 6;
    // It waits for the client while the benchmark's other rows run.
    server.peer_timeout_ns = 600_000_000_000;
    let qpn = n.env.standin.serve_send_lat(&server);
    let mut c = connect(&mut n, Completion::Poll);
    let mut base = PingPongConfig::new(Transport::Rc, Role::Client);
    base.wait_timeout_ns = 2_000_000;
    base.peer_timeout_ns = 2_000_000_000;
    let cfg = BenchConfig {
        modes: Modes::parse("poll,event,isr").unwrap(),
        iterations: 6,
        max_size: 256,
        outstanding: 64,
        baseline_qpn: Some(qpn),
        base,
    };
    let mut out = String::new();
    let s = benchmark::run(&mut n.hca, &mut n.env, &mut c, &cfg, "node-a", &mut out)
        .unwrap_or_else(|e| {
            panic!(
                "{e}\nserver: {:?}\n{}",
                n.env.standin.pingpong_result, n.env.standin.pingpong_out
            )
        });
    // 3 modes × (null + 3 sizes × 4 operations); rates 1, 2, 4, 8 (the stand-in's credits).
    assert_eq!((s.rows, s.rates), (3 * 13, 3 * 4), "{out}");
    let results: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with(RESULT_PREFIX))
        .collect();
    assert_eq!(results.len(), 39);
    for mode in ["poll", "event", "isr"] {
        for (op, bytes) in [
            ("null", 0),
            ("pread", 64),
            ("pwrite", 256),
            ("read", 128),
            ("write", 64),
        ] {
            let want = format!(
                "{{\"op\":\"{op}\",\"mode\":\"{mode}\",\"bytes\":{bytes},\"iterations\":6,"
            );
            assert!(results.iter().any(|l| l.contains(&want)), "{want}\n{out}");
        }
    }
    let rates: Vec<&str> = out.lines().filter(|l| l.starts_with(RATE_PREFIX)).collect();
    assert_eq!(rates.len(), 12);
    assert!(
        rates
            .iter()
            .any(|l| l.contains("\"mode\":\"isr\",\"outstanding\":8,\"calls\":48,")),
        "{out}"
    );
    // The baseline ran against the stand-in's server and the ratio is printed.
    let null = s.null_poll_us.unwrap();
    let rtt = s.baseline_rtt_us.unwrap();
    assert!(null > 0.0 && rtt > 0.0, "{null} {rtt}");
    // The server lingers a few rendezvous gaps after the client's Done, in case the client
    // repeats it; it ends within a bound of model time.
    let deadline = n.env.now_ns() + 10_000_000_000;
    while n.env.standin.pingpong_result.is_none() && n.env.now_ns() < deadline {
        n.env.relax();
    }
    assert!(
        matches!(n.env.standin.pingpong_result, Some(Ok(_))),
        "{:?}",
        n.env.standin.pingpong_result
    );
    let baseline = out
        .lines()
        .find(|l| l.starts_with(BASELINE_PREFIX))
        .expect(&out);
    assert!(baseline.contains("\"bytes\":16,"), "{baseline}");
    assert!(
        out.contains(" delegate: one-sided READ vs two-sided pread"),
        "{out}"
    );
    // The scratch file and the region are gone, the buffer is back.
    assert!(!n.env.standin.files.contains_key("bench/node-a.dat"));
    assert!(n.env.standin.log.iter().any(|l| l == "mkdir bench"));
    c.close(&mut n.hca, &mut n.env).unwrap();
    finish(n);
}

/// Plans come from the delegate (by GUID, then LID, then the default) and results go
/// there, in a directory per run named by the delegate's clock.
#[test]
fn plans_are_fetched_and_results_written_on_the_delegate() {
    use bench::delegate::plans::{self, NodeName};

    let mut n = node();
    let mut c = connect(&mut n, Completion::Poll);
    let node = NodeName {
        guid: 0x0002_c903_0000_1234,
        lid: 9,
    };
    assert_eq!(
        plans::fetch_plan(&mut n.hca, &mut n.env, &mut c, &node).unwrap(),
        None
    );
    let files = &mut n.env.standin.files;
    files.insert("plans/default.conf".into(), b"iters=20\n".to_vec());
    let plan = plans::fetch_plan(&mut n.hca, &mut n.env, &mut c, &node)
        .unwrap()
        .unwrap();
    assert_eq!(
        (plan.path.as_str(), plan.text.as_str()),
        ("plans/default.conf", "iters=20\n")
    );
    // A plan longer than one inline reply, by LID.
    let long: String = (0..300).map(|i| format!("# line {i}\n")).collect();
    let files = &mut n.env.standin.files;
    files.insert("plans/lid-9.conf".into(), long.clone().into_bytes());
    let plan = plans::fetch_plan(&mut n.hca, &mut n.env, &mut c, &node)
        .unwrap()
        .unwrap();
    assert_eq!(
        (plan.path.as_str(), plan.text.len()),
        ("plans/lid-9.conf", long.len())
    );
    assert_eq!(plan.text, long);
    let files = &mut n.env.standin.files;
    files.insert(
        "plans/0002c90300001234.conf".into(),
        b"run=ib_read_lat\n".to_vec(),
    );
    let plan = plans::fetch_plan(&mut n.hca, &mut n.env, &mut c, &node)
        .unwrap()
        .unwrap();
    assert_eq!(plan.path, "plans/0002c90300001234.conf");

    // The stand-in's clock says 2023-11-14 22:13:20 UTC.
    let dir = plans::results_dir(&mut n.hca, &mut n.env, &mut c, &node).unwrap();
    assert_eq!(dir, "results/0002c90300001234/20231114T221320Z");
    let again = plans::results_dir(&mut n.hca, &mut n.env, &mut c, &node).unwrap();
    assert_eq!(again, "results/0002c90300001234/20231114T221320Z-2");
    // More than one buffer's worth (1 MiB chunks), written by the delegate's RDMA READs.
    let data: Vec<u8> = (0..2_500_000u32).map(|i| (i % 251) as u8).collect();
    let path = format!("{dir}/console.log");
    plans::write_file(&mut n.hca, &mut n.env, &mut c, &path, &data).unwrap();
    assert_eq!(n.env.standin.files[&path], data);
    plans::write_file(&mut n.hca, &mut n.env, &mut c, &path, b"short").unwrap();
    assert_eq!(
        n.env.standin.files[&path], b"short",
        "truncated, then written"
    );
    c.close(&mut n.hca, &mut n.env).unwrap();
    finish(n);
}
