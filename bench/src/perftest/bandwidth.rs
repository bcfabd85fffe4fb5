//! The bandwidth tests inside a run (`send_bw`, `write_bw`, `read_bw`, `atomic_bw`): the
//! same rendezvous, per-size barrier and final handshake as the latency tests, with the
//! stream of [`crate::bw`] in place of the ping-pong.
//!
//! Per size, after the barrier: the client streams with a [`BwSender`] (perftest's
//! `run_iter_bw`: `-t`, `-l`, `-Q`, `-I`, `-N`, `-D`), then sends [`Kind::Count`] (messages
//! sent) until the server's [`Kind::CountAck`] arrives, and prints perftest's row and its result
//! line with the server's count: exact loss for send_bw over UD and UC. The send_bw server
//! posts its receives before answering the barrier ([`BwReceiver`]), counts completions and
//! bytes, and once the client's Count says the stream is over, waits `timeout_ms` without a
//! completion before taking what is missing as lost. The write_bw, read_bw and atomic_bw
//! servers are passive, as perftest's: they expose their region and answer the Count
//! without counting.
//!
//! A server answers a repeated Count (its CountAck was lost) from the tally it kept, in any
//! later phase of the run.
//!
//! `-b` (perftest's bidirectional runs): both sides stream at once. send_bw runs a
//! [`BwDuplexSend`] on each side (the server's sender starts with its first message, as
//! perftest's `run_iter_bi`); write_bw, read_bw and atomic_bw run a [`BwSender`] on each side,
//! each toward the other's region. The server answers the Count only once its own stream is
//! over, with the CountAck and a [`Kind::Report`] (its figures and the messages it sent); the
//! client takes the server's total as the end of what it receives (exact loss in that
//! direction too) and prints perftest's sum of the two sides' figures (`bidir_sum`), except
//! for send_bw with `-D`, whose row perftest prints from the node's own sample, which counts
//! both directions.

use super::*;
use crate::bw::{
    bidir_sum, write_bw_row, BwDuplexSend, BwDuration, BwParams, BwReceiver, BwReport, BwSender,
    BwUnit, BwVerb, RecvSetup, RecvTally, StreamError, StreamState,
};
use crate::line::{BandwidthLine, Record};
use crate::rendezvous::{BwFigures, FLAG_COUNTED};
use alloc::boxed::Box;

/// The bandwidth side of this node for the size in progress.
pub(super) enum BwSide<D: Device> {
    Idle,
    Sender(BwSender<D>),
    Receiver(BwReceiver<D>),
    /// `-b` send_bw: this side's sender and receiver on the one QP (boxed: the largest
    /// variant by far).
    Duplex(Box<BwDuplexSend<D>>),
}

/// Where the bandwidth size stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BwStage {
    /// Streaming (client) or receiving (server).
    Stream,
    /// Client: the stream is retired; asking the server for its count.
    Count,
}

/// The bandwidth state of a run.
pub(super) struct BwState<D: Device> {
    pub(super) side: BwSide<D>,
    pub(super) stage: BwStage,
    /// Server: the last size's tally (`None` when passive), answered to repeated Counts.
    pub(super) tally: Option<(u32, Option<RecvTally>)>,
    /// Server: the client's Count for the size in progress arrived.
    pub(super) count_asked: bool,
    /// Client: the server's answer to this size's Count.
    pub(super) ack: Option<Msg>,
    /// `-b`, client: the server's Report of this size. Server: its own, sent with the
    /// CountAck (again to a repeated Count).
    pub(super) report: Option<BwFigures>,
    /// `-b`, client: the server's total was handed to this side's receiver.
    pub(super) peer_total_given: bool,
}

impl<D: Device> BwState<D> {
    pub(super) fn new() -> Self {
        BwState {
            side: BwSide::Idle,
            stage: BwStage::Stream,
            tally: None,
            count_asked: false,
            ack: None,
            report: None,
            peer_total_given: false,
        }
    }
}

fn stream_err(e: StreamError) -> BenchError {
    match e {
        StreamError::Verbs(err) => BenchError::Verbs {
            during: "bandwidth stream",
            err,
        },
        StreamError::Completion { status, .. } => BenchError::Completion {
            during: "bandwidth stream",
            status,
        },
        StreamError::Stalled { .. } => BenchError::SendTimeout,
        StreamError::Check { .. } => BenchError::Unexpected("bandwidth data check"),
    }
}

impl<D: Device> PingPong<D> {
    fn ns_to_cycles(&self, ns: u64) -> u64 {
        (ns as f64 * self.tsc_mhz / 1000.0) as u64
    }

    fn bw_unit(&self) -> BwUnit {
        if self.cfg.bw.report_gbits {
            BwUnit::Gbits
        } else {
            BwUnit::MBytes
        }
    }

    /// `-D`: the stream's phases in TSC cycles (perftest's margin: a quarter of it).
    fn bw_duration(&self) -> Result<Option<BwDuration>, BenchError> {
        self.cfg
            .bw
            .duration_s
            .map(|s| BwDuration::from_secs(s, None, self.tsc_mhz))
            .transpose()
            .map_err(|_| {
                BenchError::Config(ConfigError::Invalid(Rule::OutOfRange(
                    "duration (-D) against the TSC rate",
                )))
            })
    }

    /// The stream's parameters for the current size, with perftest's dependencies applied.
    fn bw_params(&self) -> Result<BwParams, BenchError> {
        let b = &self.cfg.bw;
        let n = self.cfg.iterations;
        BwParams {
            size: self.size,
            iterations: u64::from(n),
            tx_depth: b.tx_depth_for(n),
            post_list: b.post_list,
            cq_mod: b.cq_mod_for(n),
            inline_size: self.inline_max,
            no_peak: b.no_peak,
            duration: self.bw_duration()?,
            bidirectional: self.cfg.bw.bidirectional,
        }
        .resolve(true)
        .map_err(|_| {
            BenchError::Config(ConfigError::Invalid(Rule::OutOfRange(
                "bandwidth flags (-t, -l, -Q, -n)",
            )))
        })
    }

    /// This side's sender of the size: the client's, or with `-b` the server's too (toward
    /// the client's region, which the client's Hello named).
    fn bw_sender(&self) -> Result<BwSender<D>, BenchError> {
        let p = self.bw_params()?;
        let (Some(qp), Some(scq), Some(peer)) = (self.res.qp, self.res.scq, self.peer) else {
            return Err(BenchError::NoMemory("data QP"));
        };
        let verb = match self.cfg.test {
            Test::SendBw => BwVerb::Send,
            Test::WriteBw => BwVerb::Write {
                remote_addr: peer.addr,
                rkey: peer.rkey,
            },
            Test::ReadBw => BwVerb::Read {
                remote_addr: peer.addr,
                rkey: peer.rkey,
            },
            Test::AtomicBw => BwVerb::Atomic {
                op: self.cfg.atomic,
                remote_addr: peer.addr,
                rkey: peer.rkey,
            },
            _ => {
                return Err(BenchError::Config(ConfigError::Invalid(Rule::BwNotYet {
                    what: self.cfg.test.name(),
                })))
            }
        };
        // SEND and WRITE send from the send region; READ lands in the receive region,
        // atomics put their results in 8-byte slots there.
        let from = match self.cfg.test {
            Test::ReadBw | Test::AtomicBw => self.lay.recv,
            _ => 0,
        };
        let sge = Sge {
            addr: self.bus() + from as u64,
            length: self.size,
            lkey: self.lkey,
        };
        // A stall is a dead peer or fabric: no completion for ten waits (RC retransmits
        // within one).
        let stall = self.ns_to_cycles(self.cfg.wait_timeout_ns.saturating_mul(10));
        Ok(BwSender::new(p, verb, qp, scq, self.ud_dest, sge, stall))
    }

    /// The receiver of a send_bw size (posting its first receives now).
    fn bw_receiver(&self, dev: &mut D) -> Result<BwReceiver<D>, BenchError> {
        let (Some(qp), Some(rcq)) = (self.res.qp, self.res.rcq) else {
            return Err(BenchError::NoMemory("data QP"));
        };
        let grh = self.cfg.transport.grh_bytes();
        let setup = RecvSetup {
            sge: Sge {
                addr: self.bus() + self.lay.recv as u64,
                length: self.size + grh,
                lkey: self.lkey,
            },
            grh,
            rx_depth: self.cfg.bw_rx_depth(),
            iterations: u64::from(self.cfg.iterations),
            drain_cycles: self.ns_to_cycles(self.cfg.wait_timeout_ns),
            duration: self.bw_duration()?,
        };
        BwReceiver::new(dev, qp, rcq, setup).map_err(stream_err)
    }

    /// Client, as the barrier's answer arrives: the sender of this size (with `-b` and
    /// send_bw, with a receiver beside it, posted before its first message goes out).
    pub(super) fn bw_client_begin(&mut self, dev: &mut D) -> Result<(), BenchError> {
        let tx = self.bw_sender()?;
        self.bw.side = if self.cfg.bw.bidirectional && self.cfg.test == Test::SendBw {
            let rx = self.bw_receiver(dev)?;
            BwSide::Duplex(Box::new(BwDuplexSend::new(tx, rx, false)))
        } else {
            BwSide::Sender(tx)
        };
        self.bw.stage = BwStage::Stream;
        self.bw.ack = None;
        self.bw.report = None;
        self.bw.peer_total_given = false;
        Ok(())
    }

    /// Server, as the client's barrier for the size arrives: send_bw posts its receives
    /// (before the answer, so no message finds the queue empty); write_bw has nothing to do.
    pub(super) fn bw_server_begin<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &E,
    ) -> Result<(), BenchError> {
        self.bw.count_asked = false;
        self.bw.report = None;
        let bidir = self.cfg.bw.bidirectional;
        self.bw.side = match (self.cfg.test, bidir) {
            (Test::SendBw, false) => BwSide::Receiver(self.bw_receiver(dev)?),
            (Test::SendBw, true) => {
                let rx = self.bw_receiver(dev)?;
                BwSide::Duplex(Box::new(BwDuplexSend::new(self.bw_sender()?, rx, true)))
            }
            (_, true) => BwSide::Sender(self.bw_sender()?),
            (_, false) => BwSide::Idle,
        };
        if matches!(self.bw.side, BwSide::Idle) {
            return Ok(());
        }
        self.bw.stage = BwStage::Stream;
        self.last_heard_ns = env.now_ns();
        Ok(())
    }

    /// A Count from the client for size `index`, `sent` messages (server, any phase):
    /// answered from the tally kept for it, or, for the size being received, taken as the
    /// end of the stream (and, with `-D`, as the number of messages to expect).
    pub(super) fn bw_on_count<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &E,
        index: u32,
        sent: u64,
    ) -> Result<(), BenchError> {
        if self.phase == Phase::Measure && index == self.index {
            self.bw.count_asked = true;
            match &mut self.bw.side {
                BwSide::Receiver(r) => r.sender_done_total(env.cycles(), sent),
                BwSide::Duplex(d) => d.peer_done(env.cycles(), sent),
                _ => {}
            }
            return Ok(());
        }
        if let Some((i, tally)) = self.bw.tally {
            if i == index {
                self.send_count_ack(dev, index, tally)?;
            }
        }
        Ok(())
    }

    fn send_count_ack(
        &mut self,
        dev: &mut D,
        index: u32,
        tally: Option<RecvTally>,
    ) -> Result<(), BenchError> {
        let Some(lid) = self.rdv_lid else {
            return Ok(());
        };
        let t = tally.unwrap_or_default();
        let m = Msg {
            flags: if tally.is_some() { FLAG_COUNTED } else { 0 },
            rkey: t.received as u32,
            addr: t.bytes,
            ..self.msg(Kind::CountAck, index)
        };
        self.send_rdv(dev, lid, &m)?;
        if let Some(r) = self.bw.report {
            let m = Msg {
                report: Some(r),
                ..self.msg(Kind::Report, index)
            };
            self.send_rdv(dev, lid, &m)?;
        }
        Ok(())
    }

    /// The measured phase of a bandwidth size.
    pub(super) fn measure_bw<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        budget: StepBudget,
    ) -> Result<(), BenchError> {
        match self.cfg.role {
            Role::Client => self.measure_bw_client(dev, env, out, budget),
            Role::Server => self.measure_bw_server(dev, env, out, budget),
        }
    }

    fn measure_bw_client<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        budget: StepBudget,
    ) -> Result<(), BenchError> {
        if self.bw.stage == BwStage::Stream {
            let mut clock = || env.cycles();
            let mut sent = false;
            for _ in 0..budget.polls.max(1) {
                sent = match &mut self.bw.side {
                    BwSide::Sender(s) => {
                        s.step(dev, &mut clock).map_err(stream_err)? == StreamState::Done
                    }
                    BwSide::Duplex(d) => {
                        d.step(dev, &mut clock).map_err(stream_err)?;
                        d.sender_finished()
                    }
                    _ => return Err(BenchError::Unexpected("bandwidth size without a sender")),
                };
                if sent {
                    break;
                }
            }
            if sent {
                self.bw.stage = BwStage::Count;
                self.next_send_ns = 0;
                self.tries = 0;
                self.last_heard_ns = env.now_ns();
            }
            return Ok(());
        }
        // Count: ask the server what arrived until it answers; with -b send_bw, go on
        // receiving its messages meanwhile.
        let now = env.now_ns();
        self.service_rdv(dev, env)?;
        let bidir = self.cfg.bw.bidirectional;
        let mut received_all = true;
        if let BwSide::Duplex(d) = &mut self.bw.side {
            if let (false, Some(r)) = (self.bw.peer_total_given, self.bw.report) {
                d.peer_done(env.cycles(), r.sent);
                self.bw.peer_total_given = true;
            }
            let before = d.receiver().tally().received;
            let mut clock = || env.cycles();
            let mut state = StreamState::Running;
            for _ in 0..budget.polls.max(1) {
                state = d.step(dev, &mut clock).map_err(stream_err)?;
                if state == StreamState::Done {
                    break;
                }
            }
            if d.receiver().tally().received != before {
                self.last_heard_ns = now;
            }
            received_all = state == StreamState::Done;
        }
        let answered = self.bw.ack.is_some() && (!bidir || self.bw.report.is_some());
        if answered && received_all {
            let ack = self.bw.ack.take().expect("checked above");
            return self.bw_client_report(out, ack);
        }
        if now >= self.next_send_ns {
            self.next_send_ns = now + self.cfg.wait_timeout_ns;
            if let Some(lid) = self.rdv_lid {
                let m = Msg {
                    addr: self.bw_sent(),
                    ..self.msg(Kind::Count, self.index)
                };
                self.send_rdv(dev, lid, &m)?;
            }
        }
        if now.saturating_sub(self.last_heard_ns) > self.cfg.peer_timeout_ns {
            return Err(BenchError::PeerLost);
        }
        Ok(())
    }

    /// Messages this side's stream sent: `-n`, or with `-D` what it posted in all.
    fn bw_sent(&self) -> u64 {
        match &self.bw.side {
            BwSide::Sender(s) if self.cfg.bw.duration_s.is_some() => s.counts().0,
            BwSide::Duplex(d) if self.cfg.bw.duration_s.is_some() => d.sender().counts().0,
            _ => u64::from(self.cfg.iterations),
        }
    }

    /// This side's own figures in `unit`: its sender's, or the duplex node's (with `-D`
    /// its sample counts both directions).
    fn bw_own_report(&mut self, unit: BwUnit) -> Result<BwReport, BenchError> {
        let tsc = self.tsc_mhz;
        match &mut self.bw.side {
            BwSide::Sender(s) => s.report(tsc, unit),
            BwSide::Duplex(d) => d.report(tsc, unit),
            _ => return Err(BenchError::Unexpected("bandwidth report without a sender")),
        }
        .map_err(BenchError::Bandwidth)
    }

    /// Whether the row adds the peer's figures: every `-b` run but send_bw with `-D`
    /// (perftest exchanges no reports there; the node's sample holds both directions).
    fn bw_sums_peer(&self) -> bool {
        self.cfg.bw.bidirectional
            && !(self.cfg.test == Test::SendBw && self.cfg.bw.duration_s.is_some())
    }

    fn bw_client_report<W: Write>(&mut self, out: &mut W, ack: Msg) -> Result<(), BenchError> {
        let unit = self.bw_unit();
        let sent = self.bw_sent();
        let mut row = self.bw_own_report(unit)?;
        let mut mbs = self.bw_own_report(BwUnit::MBytes)?;
        let counted = ack.flags & FLAG_COUNTED != 0;
        let received = counted.then_some(u64::from(ack.rkey));
        let mut lost = received.map_or(0, |r| sent.saturating_sub(r));
        if let (true, Some(peer)) = (self.bw_sums_peer(), self.bw.report) {
            // The server's figures are in the run's unit; MB/s for the result line is the
            // same sum scaled by the units' ratio.
            let in_unit = BwReport {
                bw_peak: peer.bw_peak,
                bw_avg: peer.bw_avg,
                msg_rate_mpps: peer.msg_rate_mpps,
                ..row
            };
            let k = unit.factor() as f64 / BwUnit::MBytes.factor() as f64;
            let in_mbs = BwReport {
                bw_peak: peer.bw_peak * k,
                bw_avg: peer.bw_avg * k,
                ..in_unit
            };
            let own = row;
            row = bidir_sum(&row, &in_unit);
            mbs = bidir_sum(&mbs, &in_mbs);
            write_bw_row(out, unit, &row)?;
            // The row's two terms at full precision (shortest exact decimal of each double).
            writeln!(
                out,
                " the sum of: BW peak {} + {}, BW average {} + {}, MsgRate {} + {} (client + server)",
                own.bw_peak, peer.bw_peak, own.bw_avg, peer.bw_avg, own.msg_rate_mpps,
                peer.msg_rate_mpps
            )?;
        } else {
            write_bw_row(out, unit, &row)?;
        }
        if let BwSide::Duplex(d) = &self.bw.side {
            let t = d.receiver().tally();
            let back = t.lost();
            // The lost receives stay posted, sized for this size: reset before the next.
            self.needs_reset |= t.posted > t.received;
            writeln!(
                out,
                " {:<7}    {:<10}       received {} messages, {} bytes, {} lost (server to client)",
                self.size, t.expected, t.received, t.bytes, back
            )?;
            lost += back;
        }
        let line = self.bw_line(sent, Some(mbs), received, counted.then_some(ack.addr), lost);
        line.emit(out)?;
        self.bw.side = BwSide::Idle;
        self.bw.stage = BwStage::Stream;
        self.bw_size_done(lost);
        Ok(())
    }

    /// A result line of the current size; `sent` is the messages of the size (`-n`, or
    /// with `-D` the total the sender posted), which the line's `iterations` carries.
    fn bw_line(
        &self,
        sent: u64,
        figures: Option<crate::bw::BwReport>,
        received: Option<u64>,
        bytes_received: Option<u64>,
        lost: u64,
    ) -> BandwidthLine {
        let n = self.cfg.iterations;
        BandwidthLine {
            test: self.cfg.test,
            transport: self.cfg.transport,
            role: self.cfg.role,
            bytes: self.size,
            iterations: u32::try_from(sent).unwrap_or(u32::MAX),
            figures: figures.as_ref().map(Into::into),
            tsc_mhz: self.tsc_mhz,
            inline: self.size <= self.inline_max,
            mtu: self.mtu.bytes(),
            tx_depth: self.cfg.bw.tx_depth_for(n),
            post_list: self.cfg.bw.post_list,
            cq_mod: self.cfg.bw.cq_mod_for(n),
            received,
            bytes_received,
            lost,
        }
    }

    /// The size's totals into the summary; on to the next size.
    fn bw_size_done(&mut self, lost: u64) {
        self.summary.sizes += 1;
        self.summary.lost += lost;
        self.summary.last = Some(SizeResultSummary {
            bytes: self.size,
            samples: self.cfg.iterations as usize,
        });
        self.phase = Phase::SizeStart;
    }

    fn measure_bw_server<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        budget: StepBudget,
    ) -> Result<(), BenchError> {
        // A passive server (write_bw without -b) ends the size at once: it answers the
        // Count from wherever it waits next.
        if matches!(self.bw.side, BwSide::Idle) {
            self.bw.tally = Some((self.index, None));
            let line = self.bw_line(u64::from(self.cfg.iterations), None, None, None, 0);
            line.emit(out)?;
            self.bw_size_done(0);
            return Ok(());
        }
        self.service_rdv(dev, env)?;
        let polls = budget.polls.max(1);
        let mut state = StreamState::Running;
        let mut clock = || env.cycles();
        // Progress of the stream: messages received, or with -b sends retired.
        let progress = |side: &BwSide<D>| match side {
            BwSide::Receiver(r) => r.tally().received,
            BwSide::Duplex(d) => d.receiver().tally().received + d.sender().counts().1,
            BwSide::Sender(s) => s.counts().1,
            BwSide::Idle => 0,
        };
        let before = progress(&self.bw.side);
        for _ in 0..polls {
            state = match &mut self.bw.side {
                BwSide::Receiver(r) => r.step(dev, clock()),
                BwSide::Duplex(d) => d.step(dev, &mut clock),
                BwSide::Sender(s) => s.step(dev, &mut clock),
                BwSide::Idle => return Ok(()),
            }
            .map_err(stream_err)?;
            if state == StreamState::Done {
                break;
            }
        }
        if progress(&self.bw.side) != before {
            self.last_heard_ns = env.now_ns();
        }
        if state == StreamState::Done {
            return self.bw_server_done(dev, out);
        }
        if env.now_ns().saturating_sub(self.last_heard_ns) > self.silence_bound() {
            return Err(BenchError::PeerLost);
        }
        Ok(())
    }

    /// Server: the size's stream is over (and with -b its own sending too): its row (-b),
    /// its count and result line; the CountAck (with -b the Report) if the client asked.
    fn bw_server_done<W: Write>(&mut self, dev: &mut D, out: &mut W) -> Result<(), BenchError> {
        let tally = match &self.bw.side {
            BwSide::Receiver(r) => Some(r.tally()),
            BwSide::Duplex(d) => Some(d.receiver().tally()),
            _ => None,
        };
        if self.cfg.bw.bidirectional {
            let unit = self.bw_unit();
            let own = self.bw_own_report(unit)?;
            // perftest prints the sum on both sides; this server prints its own direction
            // (the client's row is the sum).
            write_bw_row(out, unit, &own)?;
            writeln!(
                out,
                " this side: BW peak {}, BW average {}, MsgRate {} (server)",
                own.bw_peak, own.bw_avg, own.msg_rate_mpps
            )?;
            self.bw.report = Some(BwFigures {
                sent: self.bw_sent(),
                bw_peak: own.bw_peak,
                bw_avg: own.bw_avg,
                msg_rate_mpps: own.msg_rate_mpps,
            });
        }
        let lost = tally.map_or(0, |t| t.lost());
        if let Some(t) = tally {
            // Receives left posted (messages lost) are sized for this size: the next size
            // starts from a reset QP, and the barrier tells the client so.
            self.needs_reset |= t.posted > t.received;
            writeln!(
                out,
                " {:<7}    {:<10}       received {} messages, {} bytes, {} lost",
                self.size, t.expected, t.received, t.bytes, lost
            )?;
        }
        let line = match tally {
            Some(t) => self.bw_line(t.expected, None, Some(t.received), Some(t.bytes), lost),
            None => self.bw_line(u64::from(self.cfg.iterations), None, None, None, 0),
        };
        line.emit(out)?;
        self.bw.side = BwSide::Idle;
        self.bw.tally = Some((self.index, tally));
        if self.bw.count_asked {
            self.send_count_ack(dev, self.index, tally)?;
        }
        self.bw_size_done(lost);
        Ok(())
    }
}
