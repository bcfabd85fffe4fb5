//! The SRQ ping-pong between two nodes (`test=srq_pingpong`): the exchange of the QPs'
//! addresses that replaces the example's TCP socket, the runs (one per `cq_moderation`
//! setting, `repeat` times over), and the output: the example's address lines and figures
//! plus one `ibkern-srq-result` line per run (docs/benchmarks.md, "SRQ ping-pong").
//!
//! The exchange uses the rendezvous channel (docs/rendezvous.md) with messages of their own
//! version (`ibrendezvous::srq`), which the ping-pong's parser refuses. A
//! client offers a run: its settings and its QPs' numbers, seven per message, every
//! message repeated every 10 ms until the server accepts with its own QPs' numbers. The
//! server sets the run up from the offer, connects its QPs to the client's, and only then
//! answers (so the client's first sends find it ready); it answers a repeated offer again
//! until the run's first message arrives. Nothing else is exchanged: each side ends when it
//! has sent and received `iters` messages, as the example does.

use alloc::vec::Vec;
use core::fmt::Write;

use verbs::{CqModeration, Device};

use super::{SrqConfig, SrqEndpoint, SrqPingPong, SrqStatus, SrqSummary};
use crate::config::{Completion, PingPongConfig, Role, Sizes};
use crate::env::BenchEnv;
use crate::line::{Record, SrqLine};
use crate::perftest::BenchError;
use crate::rendezvous::srq::{Moderation, SrqKind as Kind, SrqMsg as Msg, QPNS_PER_MSG};
use crate::rendezvous::Channel;

/// How often a client repeats its offer (and a server its answer to a repeated offer).
const RESEND_NS: u64 = 10_000_000;
/// Event mode: longest one sleep lasts before polling anyway (above the longest cq_period,
/// 65.535 ms, so a period always fires first).
const EVENT_FALLBACK_NS: u64 = 100_000_000;

fn vb(during: &'static str) -> impl FnOnce(verbs::Error) -> BenchError {
    move |err| BenchError::Verbs { during, err }
}

/// Takes every rendezvous completion waiting; the SRQ exchange's messages received, each with
/// the sender's LID and QPN, go to `got`.
fn poll<D: Device>(
    ch: &mut Channel<D>,
    dev: &mut D,
    got: &mut Vec<(Msg, u16, u32)>,
) -> Result<(), BenchError> {
    while ch.poll(dev, |b, slid, src| {
        if let Ok(m) = Msg::decode(b) {
            got.push((m, slid, src));
        }
    })? > 0
    {}
    Ok(())
}

/// Sends `m` to `qpn` at `lid`; false when the send queue is full (try again later).
fn send<D: Device>(
    ch: &mut Channel<D>,
    dev: &mut D,
    lid: u16,
    qpn: u32,
    m: &Msg,
) -> Result<bool, BenchError> {
    ch.send(dev, lid, qpn, &m.encode())
}

/// Totals over the runs of one node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrqTotals {
    pub runs: u32,
    pub passed: u32,
    pub failed: u32,
}

impl SrqTotals {
    /// Count one run's outcome and print its verdict, `srq_pingpong: run i/n: PASS` or
    /// `... FAIL: <why>`. A console that cannot be written to ends the session (the error).
    fn record<W: Write>(
        &mut self,
        r: Result<(), BenchError>,
        spec: &RunSpec,
        out: &mut W,
    ) -> Result<(), BenchError> {
        self.runs += 1;
        match r {
            Ok(()) => {
                self.passed += 1;
                writeln!(out, "srq_pingpong: run {}/{}: PASS", spec.run, spec.runs)?;
            }
            Err(BenchError::Output) => return Err(BenchError::Output),
            Err(e) => {
                self.failed += 1;
                writeln!(
                    out,
                    "srq_pingpong: run {}/{}: FAIL: {e}",
                    spec.run, spec.runs
                )?;
            }
        }
        Ok(())
    }
}

/// One run's settings as both sides agree on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RunSpec {
    qps: u32,
    rx_depth: u32,
    size: u32,
    iters: u32,
    events: bool,
    moderation: Option<CqModeration>,
    run: u16,
    runs: u16,
}

impl RunSpec {
    fn config(&self, client: bool, keys: &PingPongConfig, mtu: verbs::Mtu) -> SrqConfig {
        SrqConfig {
            client,
            port: keys.port,
            qps: self.qps,
            size: self.size,
            rx_depth: self.rx_depth,
            iters: self.iters,
            mtu,
            // A moderated event may take a whole period plus the fallback sleep.
            wait_timeout_ns: keys.wait_timeout_ns.max(4 * EVENT_FALLBACK_NS),
            events: self.events,
            moderation: self.moderation,
            event_fallback_ns: EVENT_FALLBACK_NS,
        }
    }

    fn msg(&self, kind: Kind, session: u32, lid: u16) -> Msg {
        Msg {
            kind,
            chunk: 0,
            chunks: Msg::chunks_for(self.qps),
            session,
            lid,
            qps: self.qps as u8,
            events: self.events,
            moderation: self.moderation.map(|m| Moderation {
                cq_count: m.cq_count,
                cq_period: m.cq_period,
            }),
            size: self.size,
            rx_depth: self.rx_depth,
            iters: self.iters,
            run: self.run,
            runs: self.runs,
            qpns: [0; QPNS_PER_MSG],
        }
    }

    fn from_msg(m: &Msg) -> RunSpec {
        RunSpec {
            qps: u32::from(m.qps),
            rx_depth: m.rx_depth,
            size: m.size,
            iters: m.iters,
            events: m.events,
            moderation: m.moderation.map(|m| CqModeration {
                cq_count: m.cq_count,
                cq_period: m.cq_period,
            }),
            run: m.run,
            runs: m.runs,
        }
    }
}

/// The run as `ibv_srq_pingpong`'s command line, plus the moderation if set.
struct CommandLine<'a>(&'a RunSpec);

impl core::fmt::Display for CommandLine<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let r = self.0;
        write!(
            f,
            "ibv_srq_pingpong -q {} -r {} -s {} -n {}",
            r.qps, r.rx_depth, r.size, r.iters
        )?;
        if r.events {
            write!(f, " -e")?;
        }
        if let Some(m) = r.moderation {
            write!(f, " (cq_moderation {}/{})", m.cq_count, m.cq_period)?;
        }
        Ok(())
    }
}

/// All chunks of a message (one per seven QPs), `qpns` spread over them.
fn chunks(template: Msg, qpns: &[u32]) -> impl Iterator<Item = Msg> + '_ {
    qpns.chunks(QPNS_PER_MSG).enumerate().map(move |(i, part)| {
        let mut m = template;
        m.chunk = i as u8;
        m.qpns = [0; QPNS_PER_MSG];
        m.qpns[..part.len()].copy_from_slice(part);
        m
    })
}

/// Collects the QP numbers of one session's chunks.
struct Gather {
    session: u32,
    qpns: Vec<u32>,
    got: u16,
    first: Option<(Msg, u16, u32)>,
}

impl Gather {
    fn new() -> Self {
        Gather {
            session: 0,
            qpns: Vec::new(),
            got: 0,
            first: None,
        }
    }

    /// Adds a chunk; true once every chunk of the session has arrived. A chunk of another
    /// session starts over.
    fn add(&mut self, m: &Msg, slid: u16, src_qp: u32) -> bool {
        if m.session != self.session || self.first.is_none_or(|f| f.0.qps != m.qps) {
            self.session = m.session;
            self.qpns.clear();
            self.qpns.resize(m.qps as usize, 0);
            self.got = 0;
            self.first = Some((*m, slid, src_qp));
        }
        let at = m.chunk as usize * QPNS_PER_MSG;
        let n = (m.qps as usize - at).min(QPNS_PER_MSG);
        self.qpns[at..at + n].copy_from_slice(&m.qpns[..n]);
        self.got |= 1 << m.chunk;
        self.got.count_ones() == u32::from(m.chunks)
    }
}

fn session_id<E: BenchEnv>(env: &E, lid: u16, run: u16) -> u32 {
    let mut z = env
        .cycles()
        .wrapping_add(u64::from(lid) << 32 | u64::from(run))
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) as u32) | 1
}

/// The local and remote addresses of every QP, as the example prints them (no GID: ibkern
/// addresses by LID).
fn write_addresses<W: Write>(
    out: &mut W,
    local: &[SrqEndpoint],
    remote: &[SrqEndpoint],
) -> core::fmt::Result {
    for e in local {
        writeln!(
            out,
            "  local address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}",
            e.lid, e.qpn, e.psn
        )?;
    }
    for e in remote {
        writeln!(
            out,
            "  remote address: LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}",
            e.lid, e.qpn, e.psn
        )?;
    }
    Ok(())
}

/// The example's two figure lines and the run's result line.
fn write_figures<W: Write>(
    out: &mut W,
    client: bool,
    spec: &RunSpec,
    s: &SrqSummary,
    interrupts: u64,
    tsc_mhz: f64,
) -> core::fmt::Result {
    let secs = s.elapsed_ns as f64 / 1e9;
    writeln!(
        out,
        "{} bytes in {:.2} seconds = {:.2} Mbit/sec",
        s.bytes(),
        secs,
        s.mbit_per_sec()
    )?;
    writeln!(
        out,
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        s.iters,
        secs,
        s.usec_per_iter()
    )?;
    SrqLine {
        role: if client { Role::Client } else { Role::Server },
        run: spec.run,
        runs: spec.runs,
        qps: spec.qps,
        rx_depth: spec.rx_depth,
        bytes: spec.size,
        iterations: spec.iters,
        completion: if spec.events {
            Completion::Event
        } else {
            Completion::Poll
        },
        moderation: spec.moderation,
        elapsed_us: s.elapsed_ns as f64 / 1000.0,
        mbit_per_sec: s.mbit_per_sec(),
        usec_per_iter: s.usec_per_iter(),
        rtt: s.rtt,
        cq_events: s.events,
        fallbacks: s.fallbacks,
        interrupts,
        interrupts_per_message: interrupts as f64 / f64::from(s.iters.max(1)),
        refills: s.refills,
        tsc_mhz,
    }
    .emit(out)
}

/// Steps a connected run to its end; every step's sleep is bounded by the event fallback.
fn drive<D: Device, E: BenchEnv>(
    pp: &mut SrqPingPong<D>,
    dev: &mut D,
    env: &mut E,
    mut between: impl FnMut(&mut SrqPingPong<D>, &mut D, &mut E) -> Result<(), BenchError>,
) -> Result<(), BenchError> {
    loop {
        match pp.step_waiting(dev, env, RESEND_NS)? {
            SrqStatus::Done => return Ok(()),
            SrqStatus::Running => between(pp, dev, env)?,
        }
    }
}

/// The path MTU both sides use: the `mtu` key, else the port's active MTU with perftest's
/// ConnectX-3 rule.
fn path_mtu<D: Device>(dev: &mut D, keys: &PingPongConfig) -> Result<verbs::Mtu, BenchError> {
    let port = dev.query_port(keys.port).map_err(vb("query_port"))?;
    if port.state != verbs::PortState::Active {
        return Err(BenchError::PortNotActive {
            port: keys.port,
            state: port.state,
        });
    }
    Ok(keys.effective_mtu(port.active_mtu.unwrap_or(verbs::Mtu::Mtu2048)))
}

/// The runs a client does: its plan's `ibv_srq_pingpong` lines, or else one per
/// `cq_moderation` setting of its keys (or one); the whole list `repeat` times over.
fn client_specs(keys: &PingPongConfig, plan: &[crate::config::SrqRun]) -> Vec<RunSpec> {
    if !plan.is_empty() {
        let passes = keys.repeat.max(1);
        let total = plan.len() as u32 * passes;
        let mut v = Vec::new();
        for _ in 0..passes {
            for r in plan {
                v.push(RunSpec {
                    qps: r.qps,
                    rx_depth: r.rx_depth,
                    size: r.size,
                    iters: r.iterations,
                    events: r.completion == Completion::Event,
                    moderation: r.moderation,
                    run: v.len() as u16 + 1,
                    runs: total as u16,
                });
            }
        }
        return v;
    }
    let size = match keys.sizes {
        Sizes::Single(n) => n,
        Sizes::All => super::HEADER as u32,
    };
    let settings: Vec<Option<CqModeration>> = if keys.srq.moderation.as_slice().is_empty() {
        alloc::vec![None]
    } else {
        keys.srq
            .moderation
            .as_slice()
            .iter()
            .copied()
            .map(Some)
            .collect()
    };
    let total = settings.len() as u32 * keys.repeat.max(1);
    let mut v = Vec::new();
    for _ in 0..keys.repeat.max(1) {
        for &moderation in &settings {
            v.push(RunSpec {
                qps: keys.srq.qps,
                rx_depth: keys.srq.rx_depth,
                size,
                iters: keys.iterations,
                events: keys.completion == Completion::Event,
                moderation,
                run: v.len() as u16 + 1,
                runs: total as u16,
            });
        }
    }
    v
}

/// Client: every run of its plan (`ibv_srq_pingpong` lines, else its keys) against one
/// server. `interrupts` reads the node's device
/// interrupt count (the kernel's counter); each run's result line carries the difference
/// from just before its first send to its end. A failed run is reported and the next one
/// runs.
pub fn run_client<D: Device, E: BenchEnv, W: Write>(
    dev: &mut D,
    env: &mut E,
    keys: &PingPongConfig,
    plan: &[crate::config::SrqRun],
    interrupts: &mut dyn FnMut() -> u64,
    out: &mut W,
) -> Result<SrqTotals, BenchError> {
    let mtu = path_mtu(dev, keys)?;
    let lid = dev.query_port(keys.port).map_err(vb("query_port"))?.lid;
    let reserved = dev.query_device().reserved_qps;
    let mut ch = Channel::open(dev, env, keys.port, keys.local_rdv_qpn(reserved))?;
    let target_qpn = keys.hello_qpn(reserved);
    let targets: Vec<u16> = match keys.peer_lid {
        Some(l) => alloc::vec![l],
        None => (keys.probe_lids.0..=keys.probe_lids.1)
            .filter(|&l| l != lid)
            .collect(),
    };
    let mut totals = SrqTotals::default();
    let mut result = Ok(());
    for spec in client_specs(keys, plan) {
        writeln!(
            out,
            "srq_pingpong: run {}/{}: {}",
            spec.run,
            spec.runs,
            CommandLine(&spec)
        )?;
        let r = client_run(
            dev,
            env,
            &mut ch,
            keys,
            &spec,
            mtu,
            lid,
            (&targets, target_qpn),
            interrupts,
            out,
        );
        if let Err(e) = totals.record(r, &spec, out) {
            result = Err(e);
            break;
        }
    }
    ch.close(dev, env);
    result.map(|()| totals)
}

#[allow(clippy::too_many_arguments)]
fn client_run<D: Device, E: BenchEnv, W: Write>(
    dev: &mut D,
    env: &mut E,
    ch: &mut Channel<D>,
    keys: &PingPongConfig,
    spec: &RunSpec,
    mtu: verbs::Mtu,
    lid: u16,
    (targets, target_qpn): (&[u16], u32),
    interrupts: &mut dyn FnMut() -> u64,
    out: &mut W,
) -> Result<(), BenchError> {
    let mut pp = SrqPingPong::new(dev, env, spec.config(true, keys, mtu))?;
    let r = (|| {
        let local: Vec<SrqEndpoint> = pp.endpoints().collect();
        let qpns: Vec<u32> = local.iter().map(|e| e.qpn).collect();
        let session = session_id(env, lid, spec.run);
        let offer = spec.msg(Kind::Offer, session, lid);
        let start = env.now_ns();
        let mut next_send = start;
        let mut next_target = 0usize;
        let mut gather = Gather::new();
        let mut got = Vec::new();
        let peer_lid = loop {
            let now = env.now_ns();
            if now.saturating_sub(start) > keys.peer_timeout_ns {
                return Err(BenchError::PeerNotFound);
            }
            if now >= next_send && !targets.is_empty() {
                // Every target in turn, as many as the send queue takes this round.
                'round: for _ in 0..targets.len() {
                    let t = targets[next_target % targets.len()];
                    for m in chunks(offer, &qpns) {
                        if !send(ch, dev, t, target_qpn, &m)? {
                            break 'round;
                        }
                    }
                    next_target = next_target.wrapping_add(1);
                }
                next_send = now + RESEND_NS;
            }
            got.clear();
            poll(ch, dev, &mut got)?;
            let mut done = None;
            for (m, slid, src) in &got {
                if m.kind == Kind::Accept
                    && m.session == session
                    && u32::from(m.qps) == spec.qps
                    && gather.add(m, *slid, *src)
                {
                    done = Some(m.lid);
                }
            }
            if let Some(l) = done {
                break l;
            }
            env.relax();
        };
        let remote: Vec<SrqEndpoint> = gather
            .qpns
            .iter()
            .map(|&qpn| SrqEndpoint {
                lid: peer_lid,
                qpn,
                psn: 0,
            })
            .collect();
        write_addresses(out, &local, &remote)?;
        pp.connect(dev, env, &remote)?;
        // After connect: its modify commands' completion interrupts are not the run's, and
        // no CQ is armed before the first step.
        let before = interrupts();
        drive(&mut pp, dev, env, |_, _, _| Ok(()))?;
        let irqs = interrupts().saturating_sub(before);
        let s = pp.summary();
        write_figures(out, true, spec, &s, irqs, env.tsc_mhz())?;
        Ok(())
    })();
    pp.close(dev);
    r
}

/// Server: serves SRQ runs, each set up from the client's offer, until no offer comes
/// within `peer_timeout_ms` (the first, and the next run of a plan) or `idle_timeout_ms`
/// after the last run of a client's runs (0: it ends then).
pub fn serve<D: Device, E: BenchEnv, W: Write>(
    dev: &mut D,
    env: &mut E,
    keys: &PingPongConfig,
    interrupts: &mut dyn FnMut() -> u64,
    out: &mut W,
) -> Result<SrqTotals, BenchError> {
    let mtu = path_mtu(dev, keys)?;
    let lid = dev.query_port(keys.port).map_err(vb("query_port"))?.lid;
    let reserved = dev.query_device().reserved_qps;
    let mut ch = Channel::open(dev, env, keys.port, keys.local_rdv_qpn(reserved))?;
    let mut totals = SrqTotals::default();
    let mut served: Option<u32> = None;
    let mut wait_ns = keys.peer_timeout_ns;
    let mut result = Ok(());
    let mut gather = Gather::new();
    let mut got = Vec::new();
    'listen: loop {
        let start = env.now_ns();
        let offer = loop {
            if env.now_ns().saturating_sub(start) > wait_ns {
                if totals.runs == 0 {
                    result = Err(BenchError::PeerNotFound);
                }
                break 'listen;
            }
            got.clear();
            if let Err(e) = poll(&mut ch, dev, &mut got) {
                result = Err(e);
                break 'listen;
            }
            let mut done = None;
            for (m, slid, src) in &got {
                if m.kind == Kind::Offer && Some(m.session) != served && gather.add(m, *slid, *src)
                {
                    done = gather.first.map(|(_, s, q)| (*m, s, q));
                }
            }
            if let Some(d) = done {
                break d;
            }
            env.relax();
        };
        let (m, slid, src_qp) = offer;
        let spec = RunSpec::from_msg(&m);
        served = Some(m.session);
        writeln!(
            out,
            "srq_pingpong: run {}/{}: {}",
            spec.run,
            spec.runs,
            CommandLine(&spec)
        )?;
        let client: Vec<SrqEndpoint> = gather
            .qpns
            .iter()
            .map(|&qpn| SrqEndpoint {
                lid: m.lid,
                qpn,
                psn: 0,
            })
            .collect();
        let r = server_run(
            dev,
            env,
            &mut ch,
            keys,
            &spec,
            mtu,
            lid,
            (&client, m.session, slid, src_qp),
            interrupts,
            out,
        );
        if let Err(e) = totals.record(r, &spec, out) {
            result = Err(e);
            break;
        }
        wait_ns = if spec.run >= spec.runs {
            if keys.idle_timeout_ns == 0 {
                break;
            }
            keys.idle_timeout_ns
        } else {
            keys.peer_timeout_ns
        };
    }
    ch.close(dev, env);
    result.map(|()| totals)
}

#[allow(clippy::too_many_arguments)]
fn server_run<D: Device, E: BenchEnv, W: Write>(
    dev: &mut D,
    env: &mut E,
    ch: &mut Channel<D>,
    keys: &PingPongConfig,
    spec: &RunSpec,
    mtu: verbs::Mtu,
    lid: u16,
    (client, session, slid, src_qp): (&[SrqEndpoint], u32, u16, u32),
    interrupts: &mut dyn FnMut() -> u64,
    out: &mut W,
) -> Result<(), BenchError> {
    let mut pp = SrqPingPong::new(dev, env, spec.config(false, keys, mtu))?;
    let r = (|| {
        let local: Vec<SrqEndpoint> = pp.endpoints().collect();
        let qpns: Vec<u32> = local.iter().map(|e| e.qpn).collect();
        write_addresses(out, &local, client)?;
        pp.connect(dev, env, client)?;
        let before = interrupts();
        let accept = spec.msg(Kind::Accept, session, lid);
        let answer = |ch: &mut Channel<D>, dev: &mut D| -> Result<(), BenchError> {
            for m in chunks(accept, &qpns) {
                send(ch, dev, slid, src_qp, &m)?;
            }
            Ok(())
        };
        answer(ch, dev)?;
        let mut next_check = env.now_ns() + RESEND_NS;
        let mut got = Vec::new();
        drive(&mut pp, dev, env, |pp, dev, env| {
            // Until the client's first message arrives it may not have our answer: answer
            // its repeated offers again (looked at every 10 ms).
            if pp.received() == 0 && env.now_ns() >= next_check {
                next_check = env.now_ns() + RESEND_NS;
                got.clear();
                poll(ch, dev, &mut got)?;
                if got
                    .iter()
                    .any(|(m, _, _)| m.kind == Kind::Offer && m.session == session)
                {
                    answer(ch, dev)?;
                }
            }
            Ok(())
        })?;
        let irqs = interrupts().saturating_sub(before);
        let s = pp.summary();
        write_figures(out, false, spec, &s, irqs, env.tsc_mhz())?;
        Ok(())
    })();
    pp.close(dev);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offer_in_chunks_gives_back_the_run_and_every_qpn() {
        let spec = RunSpec {
            qps: 16,
            rx_depth: 500,
            size: 4096,
            iters: 1000,
            events: true,
            moderation: Some(CqModeration {
                cq_count: 4,
                cq_period: 16,
            }),
            run: 2,
            runs: 3,
        };
        let qpns: Vec<u32> = (0x48..0x58).collect();
        let all: Vec<Msg> = chunks(spec.msg(Kind::Offer, 0xABCD, 7), &qpns).collect();
        assert_eq!(all.len(), 3);
        let mut g = Gather::new();
        let mut complete = false;
        for m in &all {
            let d = Msg::decode(&m.encode()).expect("decodes");
            assert_eq!(&d, m);
            assert_eq!(RunSpec::from_msg(&d), spec);
            complete = g.add(&d, 7, 0x7F);
        }
        assert!(complete);
        assert_eq!(g.qpns, qpns);
    }

    #[test]
    fn the_keys_make_one_run_per_moderation_setting_repeated() {
        let mut k = PingPongConfig::default();
        k.apply("test", "srq_pingpong").unwrap();
        k.apply("completion", "event").unwrap();
        k.apply("cq_moderation", "1/0,4/16").unwrap();
        k.apply("repeat", "2").unwrap();
        let v = client_specs(&k, &[]);
        assert_eq!(v.len(), 4);
        assert_eq!(
            v.iter().map(|s| (s.run, s.runs)).collect::<Vec<_>>(),
            vec![(1, 4), (2, 4), (3, 4), (4, 4)]
        );
        assert_eq!(v[1].moderation.map(|m| m.cq_period), Some(16));
        assert_eq!(v[2].moderation.map(|m| m.cq_count), Some(1));
        assert!(v.iter().all(|s| s.events && s.qps == 16 && s.size == 4096));
        assert_eq!(
            CommandLine(&v[1]).to_string(),
            "ibv_srq_pingpong -q 16 -r 500 -s 4096 -n 1000 -e (cq_moderation 4/16)"
        );
        // A plan's lines replace the keys' runs; `repeat` still applies.
        let plan = [
            crate::config::SrqRun::parse("ibv_srq_pingpong -q 2 -r 4 -s 64 -n 20").unwrap(),
            crate::config::SrqRun::parse("ibv_srq_pingpong -q 1 -e --cq-moderation 8/32").unwrap(),
        ];
        let v = client_specs(&k, &plan);
        assert_eq!(v.len(), 4);
        assert_eq!((v[0].qps, v[0].size, v[0].events), (2, 64, false));
        assert_eq!((v[3].qps, v[3].run, v[3].runs), (1, 4, 4));
        assert_eq!(v[3].moderation.map(|m| m.cq_count), Some(8));
    }
}
