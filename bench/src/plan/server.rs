//! The server side: no plan of its own. It listens for a Hello, checks the run the client
//! asks for against its own limits, runs it, and goes back to listening; after a client's
//! plan it waits `idle_timeout_ms` for the next client.

use core::fmt::Write;

use verbs::Device;

use super::{write_verdict, CommandLine, Place, PlanTotals};
use crate::config::{Completion, PingPongConfig, Role, Sizes, Test, Transport};
use crate::env::BenchEnv;
use crate::perftest::{BenchError, Heard, PingPong, RunStart, Status, StepBudget};
use crate::rendezvous::{Kind, Refusal};
use crate::step::{run_to_end, Steps};

/// What a server did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServeSummary {
    /// Runs served (passed or failed) and refused, with the sizes and losses of the passed.
    pub totals: PlanTotals,
    /// Client plans seen to their last run.
    pub plans: u32,
    /// A client fell silent in the middle of its plan (its next run never came).
    pub incomplete_plans: u32,
}

enum State<D: Device> {
    /// About to listen.
    Idle,
    Listening(PingPong<D>),
    Running(PingPong<D>, Heard),
    Done,
}

/// Why the server is waiting, which sets how long it waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Waiting {
    /// For the first client: `peer_timeout_ms`, then `PeerNotFound`.
    First,
    /// For the next run of a client's plan: `peer_timeout_ms`, then the plan is counted
    /// incomplete and the server waits for a new client like after a plan.
    NextRun,
    /// For the next client after a plan: `idle_timeout_ms` (0: the server ends at once).
    NextClient,
}

/// A server following its clients. See the module documentation.
pub struct Server<D: Device> {
    base: PingPongConfig,
    /// Whether this node takes completion interrupts (runs with events are refused if not).
    events_ok: bool,
    state: State<D>,
    waiting: Waiting,
    /// The session of the last run accepted: its late Hellos are not a new run.
    last_session: u32,
    /// The last refusal, repeated to its session's repeated Hellos.
    refused: Option<(u32, Refusal)>,
    summary: ServeSummary,
    /// The run accepted by the listener, started once the listener is closed.
    to_start: Option<(PingPongConfig, Heard)>,
    /// The port's traffic counters read just before the current run started, and that run.
    port_before: super::PortBefore,
}

impl<D: Device> Server<D> {
    /// A server with the configuration's shared keys (`port`, timeouts, `verify`, ...);
    /// `events_ok` says whether completion events can be waited for on this node.
    pub fn new(base: PingPongConfig, events_ok: bool) -> Self {
        Server {
            base: PingPongConfig {
                role: Role::Server,
                ..base
            },
            events_ok,
            state: State::Idle,
            waiting: Waiting::First,
            last_session: 0,
            refused: None,
            summary: ServeSummary::default(),
            to_start: None,
            port_before: None,
        }
    }

    pub fn summary(&self) -> ServeSummary {
        self.summary
    }

    /// The bound of the wait in progress.
    fn wait_bound(&self) -> u64 {
        match self.waiting {
            Waiting::First | Waiting::NextRun => self.base.peer_timeout_ns,
            Waiting::NextClient => self.base.idle_timeout_ns,
        }
    }

    /// What a listener is: the smallest run (UD send_lat, 2 bytes, 5 iterations, no
    /// bandwidth, atomic or READ keys), so its buffers and QPs are small and it is valid
    /// whatever the server's keys say.
    fn listener_config(&self) -> PingPongConfig {
        PingPongConfig {
            test: Test::SendLat,
            bw: Default::default(),
            atomic: crate::config::AtomicOp::FetchAndAdd,
            outstanding_reads: crate::config::DEFAULT_OUT_READS,
            transport: Transport::Ud,
            sizes: Sizes::Single(crate::config::MIN_SIZE),
            iterations: crate::config::MIN_ITERATIONS,
            inline_limit: None,
            completion: Completion::Poll,
            peer_timeout_ns: self.wait_bound(),
            ..self.base
        }
    }

    /// The run a Hello asks for: its test, transport, sizes and iterations, (version 3) its
    /// completion mode and inline limit, (version 5) the anatomy; everything else is the
    /// server's own.
    pub fn run_config(&self, hello: &Heard) -> PingPongConfig {
        let m = &hello.msg;
        PingPongConfig {
            test: m.test,
            transport: m.transport,
            sizes: match m.size {
                0 => Sizes::All,
                n => Sizes::Single(n),
            },
            iterations: m.iterations,
            inline_limit: m
                .plan
                .map_or(self.base.inline_limit, |p| Some(p.inline.into())),
            completion: m.plan.map_or(self.base.completion, |p| p.completion),
            atomic: m.atomic,
            outstanding_reads: m.out_reads,
            anatomy: m.anatomy,
            bw: m.bw,
            ..self.base
        }
    }

    /// Checks a client's run against what this server can do: the ping-pong rules, events
    /// against this node's interrupts, and the device's rules (the UD size against this
    /// port's path MTU, the inline limit against the device's).
    fn check(&self, dev: &mut D, cfg: &PingPongConfig) -> Result<(), Refusal> {
        cfg.validate().map_err(Refusal::from_rule)?;
        if cfg.completion == Completion::Event && !self.events_ok {
            return Err(Refusal::EventsWithoutInterrupts);
        }
        let port = dev.query_port(cfg.port).map_err(|_| Refusal::SetupFailed)?;
        let mtu = cfg.effective_mtu(port.active_mtu.unwrap_or(verbs::Mtu::Mtu2048));
        cfg.validate_on_device(mtu, dev.query_device().max_inline)
            .map_err(Refusal::from_rule)
    }

    /// Advances the server by a bounded amount of work.
    pub fn step<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        budget: StepBudget,
    ) -> Result<Status, BenchError> {
        match core::mem::replace(&mut self.state, State::Done) {
            State::Done => Ok(Status::Finished),
            State::Idle => {
                if self.waiting == Waiting::NextClient && self.base.idle_timeout_ns == 0 {
                    writeln!(
                        out,
                        "pingpong: server: idle_timeout_ms=0, no further client"
                    )?;
                    return Ok(Status::Finished);
                }
                let bound_ms = self.wait_bound() / 1_000_000;
                match self.waiting {
                    Waiting::First => writeln!(
                        out,
                        "pingpong: server waiting for a client (peer_timeout_ms={bound_ms})"
                    )?,
                    Waiting::NextClient => writeln!(
                        out,
                        "pingpong: server waiting for the next client (idle_timeout_ms={bound_ms})"
                    )?,
                    Waiting::NextRun => {}
                }
                let cfg = self.listener_config();
                let how = RunStart {
                    listen: true,
                    ..RunStart::default()
                };
                self.state = State::Listening(PingPong::start_with(dev, env, &cfg, how)?);
                Ok(Status::Running)
            }
            State::Listening(mut pp) => {
                let r = self.listening(dev, env, out, budget, &mut pp);
                match r {
                    Ok((status, true)) => {
                        self.state = State::Listening(pp);
                        return Ok(status);
                    }
                    _ => pp.close(dev, env),
                }
                let status = r?.0;
                if let Some((cfg, hello)) = self.to_start.take() {
                    self.start_run(dev, env, out, cfg, hello)?;
                }
                Ok(status)
            }
            State::Running(mut pp, hello) => {
                let r = match pp.step(dev, env, out, budget) {
                    Ok(Status::Running) => {
                        self.state = State::Running(pp, hello);
                        return Ok(Status::Running);
                    }
                    Ok(Status::Finished) => Ok(pp.summary()),
                    Err(BenchError::Output) => {
                        pp.close(dev, env);
                        return Err(BenchError::Output);
                    }
                    Err(e) => Err(e),
                };
                pp.close(dev, env);
                super::write_port_after(dev, out, self.port_before.take())?;
                write_verdict(out, Place(hello.msg.plan), &r)?;
                self.summary.totals.add(&r);
                let last = hello.msg.plan.is_none_or(|p| p.is_last());
                if last {
                    self.summary.plans += 1;
                    writeln!(
                        out,
                        "pingpong: server: plan of the client at LID {:#x} ended",
                        hello.lid
                    )?;
                }
                self.waiting = if last {
                    Waiting::NextClient
                } else {
                    Waiting::NextRun
                };
                self.state = State::Idle;
                Ok(Status::Running)
            }
        }
    }

    /// One step of listening. Returns the status and whether the listener stays.
    fn listening<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        budget: StepBudget,
        pp: &mut PingPong<D>,
    ) -> Result<(Status, bool), BenchError> {
        match pp.step(dev, env, out, budget) {
            Ok(Status::Running) => return Ok((Status::Running, true)),
            Ok(Status::Finished) => {}
            Err(BenchError::PeerNotFound) => {
                let ms = self.wait_bound() / 1_000_000;
                return match self.waiting {
                    Waiting::First => Err(BenchError::PeerNotFound),
                    Waiting::NextRun => {
                        self.summary.incomplete_plans += 1;
                        writeln!(
                            out,
                            "pingpong: server: the client's next run did not come within {ms} ms (plan incomplete)"
                        )?;
                        self.waiting = Waiting::NextClient;
                        self.state = State::Idle;
                        Ok((Status::Running, false))
                    }
                    Waiting::NextClient => {
                        writeln!(out, "pingpong: server: no client for {ms} ms, done")?;
                        Ok((Status::Finished, false))
                    }
                };
            }
            Err(e) => return Err(e),
        }
        let Some(hello) = pp.heard() else {
            return Ok((Status::Running, true));
        };
        let m = hello.msg;
        let left = self
            .wait_bound()
            .saturating_sub(env.now_ns().saturating_sub(pp.started_ns()));
        if m.kind != Kind::Hello || m.session == self.last_session {
            // A late Hello of the run just served.
            pp.listen_again(env, left);
            return Ok((Status::Running, true));
        }
        if let Some((session, why)) = self.refused {
            if session == m.session {
                pp.refuse(dev, &hello, why)?;
                pp.listen_again(env, left);
                return Ok((Status::Running, true));
            }
        }
        let cfg = self.run_config(&hello);
        let place = Place(m.plan);
        let isr_ok = cfg.completion != Completion::Isr || env.isr_capable();
        let checked = self
            .check(dev, &cfg)
            .and_then(|()| isr_ok.then_some(()).ok_or(Refusal::IsrUnavailable));
        if let Err(why) = checked {
            writeln!(
                out,
                "pingpong: {place}: refused the client at LID {:#x} ({}): {why}",
                hello.lid,
                CommandLine(&cfg)
            )?;
            self.refuse_run(&hello, why);
            pp.refuse(dev, &hello, why)?;
            pp.listen_again(env, left);
            return Ok((Status::Running, true));
        }
        writeln!(
            out,
            "pingpong: {place}: client at LID {:#x}: {}",
            hello.lid,
            CommandLine(&cfg)
        )?;
        // The listener's rendezvous QP gives way to the run's (the same QPN): the caller
        // closes the listener, then starts the run.
        self.to_start = Some((cfg, hello));
        Ok((Status::Running, false))
    }

    /// Starts the run a client asked for; a failure to set it up becomes a refusal, sent by
    /// the next listener to the client's repeated Hello.
    fn start_run<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        cfg: PingPongConfig,
        hello: Heard,
    ) -> Result<(), BenchError> {
        let how = RunStart {
            follow: Some(hello),
            ..RunStart::default()
        };
        // Read through the device's local MAD path: no packet on the wire.
        let before = super::port_before(dev, &cfg);
        match PingPong::start_with(dev, env, &cfg, how) {
            Ok(pp) => {
                self.port_before = before;
                self.last_session = hello.msg.session;
                self.state = State::Running(pp, hello);
            }
            Err(e) => {
                let why = match e {
                    BenchError::NoMemory(_) => Refusal::NoMemory { bytes: 0 },
                    BenchError::Config(crate::config::ConfigError::Invalid(r)) => {
                        Refusal::from_rule(r)
                    }
                    _ => Refusal::SetupFailed,
                };
                writeln!(
                    out,
                    "pingpong: {}: refused the client at LID {:#x}: {why} ({e})",
                    Place(hello.msg.plan),
                    hello.lid
                )?;
                self.refuse_run(&hello, why);
                self.state = State::Idle;
            }
        }
        Ok(())
    }

    fn refuse_run(&mut self, hello: &Heard, why: Refusal) {
        self.refused = Some((hello.msg.session, why));
        self.summary.totals.add(&Err(BenchError::Refused(why)));
    }
}

impl<D: Device> Steps<D> for Server<D> {
    type Summary = ServeSummary;

    fn step<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        budget: StepBudget,
    ) -> Result<Status, BenchError> {
        Server::step(self, dev, env, out, budget)
    }

    fn summary(&self) -> ServeSummary {
        self.summary
    }

    fn close<E: BenchEnv>(mut self, dev: &mut D, env: &mut E) {
        Server::close(&mut self, dev, env)
    }
}

/// Serves clients on one node until no client comes within the wait bound (`peer_timeout_ms`
/// for the first, `idle_timeout_ms` after a plan; with `idle_timeout_ms=0`, right after the
/// first client's plan).
pub fn serve<D: Device, E: BenchEnv, W: Write>(
    dev: &mut D,
    env: &mut E,
    base: &PingPongConfig,
    events_ok: bool,
    out: &mut W,
) -> Result<ServeSummary, BenchError> {
    let budget = StepBudget::exclusive(base);
    run_to_end(Server::new(*base, events_ok), dev, env, out, budget)
}

impl<D: Device> Server<D> {
    /// Releases the listener or run in progress, if any.
    pub fn close<E: BenchEnv>(&mut self, dev: &mut D, env: &mut E) {
        match core::mem::replace(&mut self.state, State::Done) {
            State::Listening(pp) | State::Running(pp, _) => pp.close(dev, env),
            State::Idle | State::Done => {}
        }
    }
}
