//! isr mode (`completion=isr`): the completion is handled inside the device's interrupt
//! handler, which posts the reply itself (the "ISR" case of kernel-level InfiniBand
//! studies, between busy polling and a process woken by the interrupt).
//!
//! The per-test logic is the one the other modes run: [`PingPong::isr_advance`] is the
//! measured state machine of send_lat ([`PingPong::on_recv`] answers, the client's next
//! request) and of the read_lat/atomic_lat client ([`PingPong::one_sided_done`], the next
//! READ or atomic), taken as far as the completions already there allow and up to the
//! next post, then the CQ is armed. The environment ([`BenchEnv::isr_wait`]) puts a
//! [`IsrRun`] in the path of the device's completion interrupt: each interrupt drains the
//! device's event queue and consumes the CQ's event ([`verbs::Device::get_cq_event`] with
//! no wait), then runs `isr_advance`. The measuring loop only waits, bounded, for the
//! handler's progress; it posts a size's first request, re-posts after a timeout, and
//! ends the size.
//!
//! The CQ that interrupts is the receive CQ in send_lat, the send CQ (the READ's or
//! atomic's completion) on the one-sided client; the send CQ of send_lat is not armed: its
//! completions are taken when the next receive's interrupt comes (a send completes before
//! the peer can answer it). Nothing here allocates; every loop is bounded.

use super::*;
use crate::env::{IsrHandler, IsrProgress};

/// Most state-machine steps one call of the handler takes (it runs with interrupts off).
const ISR_BURST: u32 = 64;

/// One node's run as the interrupt path sees it while the measuring loop waits.
struct IsrRun<'a, D: Device, E: BenchEnv> {
    pp: &'a mut PingPong<D>,
    dev: &'a mut D,
    env: &'a E,
    progress: &'a IsrProgress,
}

impl<D: Device, E: BenchEnv> IsrHandler for IsrRun<'_, D, E> {
    fn on_interrupt(&mut self) {
        let pp = &mut *self.pp;
        pp.summary.isr_calls += 1;
        if pp.isr_error.is_none() {
            let before = pp.data_posts;
            let r = pp
                .isr_take_event(self.dev)
                .and_then(|()| pp.isr_advance(self.dev, self.env, true));
            pp.summary.isr_posts += pp.data_posts - before;
            if let Err(e) = r {
                pp.isr_error = Some(e);
            }
        }
        let finished = pp.isr_error.is_some() || pp.isr_finished();
        self.progress.publish(pp.recv_count, finished);
    }
}

impl<D: Device> PingPong<D> {
    /// The CQ whose interrupt drives the run, and whether it is the receive CQ.
    fn isr_cq(&self) -> Result<(D::Cq, bool), BenchError> {
        let recv = !self.cfg.test.one_sided();
        let cq = if recv { self.res.rcq } else { self.res.scq };
        Ok((cq.ok_or(BenchError::NoMemory("data QP"))?, recv))
    }

    /// Drains the device's events and takes the CQ's (its arm is spent). An interrupt for
    /// something else (a port event) finds none, which is no error.
    fn isr_take_event(&mut self, dev: &mut D) -> Result<(), BenchError> {
        let (cq, recv) = self.isr_cq()?;
        match dev.get_cq_event(cq, 0) {
            Ok(()) => {
                if recv {
                    self.rcq_armed = false;
                } else {
                    self.scq_armed = false;
                }
                Ok(())
            }
            Err(verbs::Error::Timeout(_)) => Ok(()),
            Err(err) => Err(BenchError::Verbs {
                during: "get_cq_event (isr)",
                err,
            }),
        }
    }

    /// Whether the handler has nothing more to do in this size: the client has its last
    /// answer (or last READ/atomic), the server has posted its last reply.
    pub(super) fn isr_finished(&self) -> bool {
        match self.cfg.role {
            Role::Client => self.seq >= self.cfg.iterations,
            Role::Server => self.recv_count >= self.cfg.iterations,
        }
    }

    /// The measured state machine, as far as the completions already there take it (at
    /// most [`ISR_BURST`] steps, only with `poll`), up to the next post: what was posted
    /// completes as the next interrupt. Then the interrupting CQ is armed. The device raises
    /// the event at once when completions beyond the consumer index are already there at
    /// the arm (the arm doorbell carries the consumer index for that; Linux's mlx4 driver
    /// reports no missed events and relies on it), so none is missed.
    ///
    /// The handler calls it with `poll`; the measuring loop without, to post a size's first
    /// request (or a re-post) and arm, and with `poll` once a whole wait went by without an
    /// interrupt.
    pub(super) fn isr_advance<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &E,
        poll: bool,
    ) -> Result<(), BenchError> {
        let (Some(scq), Some(rcq)) = (self.res.scq, self.res.rcq) else {
            return Err(BenchError::NoMemory("data QP"));
        };
        let one_sided = self.cfg.test.one_sided();
        for _ in 0..ISR_BURST {
            if self.isr_finished() {
                return Ok(());
            }
            let posts = self.data_posts;
            match self.it {
                It::Send if one_sided => self.post_one_sided(dev, env)?,
                It::Send => {
                    // Client only: stamp just before the post (first attempt of an iteration).
                    self.write_tag(tag(self.seq, self.index, self.attempt > 0));
                    if self.attempt == 0 {
                        self.stamps[self.seq as usize] = env.cycles();
                    }
                    self.post_data(&mut self.verbs_path(dev)?)?;
                    self.anatomy_posted(env);
                    self.it = It::WaitSend;
                }
                _ if !poll => break,
                It::WaitSend => match dev.poll_one(scq).map_err(vb("poll send CQ"))? {
                    Some(c) if one_sided => {
                        self.anatomy_send_done(env);
                        self.one_sided_done(c.status)?
                    }
                    Some(c) => {
                        self.check_send(c.status)?;
                        self.wait.reset();
                        if self.cfg.role == Role::Server {
                            self.seq += 1;
                        }
                        self.it = It::WaitRecv;
                    }
                    None => break,
                },
                It::WaitRecv => match dev.poll_one(rcq).map_err(vb("poll receive CQ"))? {
                    Some(c) => {
                        let mut v = self.verbs_path(dev)?;
                        self.on_recv(&mut v, env, c.status, c.byte_len)?;
                    }
                    None => break,
                },
            }
            if self.data_posts != posts {
                break;
            }
        }
        if self.isr_finished() {
            return Ok(());
        }
        let (cq, armed) = if one_sided {
            (scq, &mut self.scq_armed)
        } else {
            (rcq, &mut self.rcq_armed)
        };
        if !*armed {
            dev.req_notify_cq(cq, false).map_err(vb("req_notify_cq"))?;
            *armed = true;
        }
        Ok(())
    }

    /// The measured loop in isr mode: start the size (or re-post after a timeout) here,
    /// then wait, bounded, while the interrupt path runs the ping-pong; end the size.
    pub(super) fn measure_isr<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        budget: StepBudget,
    ) -> Result<(), BenchError> {
        let one_sided = self.cfg.test.one_sided();
        let per_wait = self.loss_wait();
        // As the other modes: RC retransmits by itself on the one-sided client, so only the
        // peer gone ends its wait.
        let timeout = if one_sided {
            per_wait.max(self.cfg.peer_timeout_ns)
        } else {
            per_wait
        };
        if !self.isr_finished() {
            // Outside the handler: a size's first request and arm, a re-post after a
            // timeout; otherwise everything happens in the interrupt path.
            if self.isr_started != Some(self.index) || self.it == It::Send {
                self.isr_started = Some(self.index);
                self.isr_advance(dev, env, false)?;
            }
            let start = self.recv_count;
            let progress = IsrProgress::new(start);
            let delivered = {
                let env: &E = env;
                let mut run = IsrRun {
                    pp: self,
                    dev,
                    env,
                    progress: &progress,
                };
                env.isr_wait(&mut run, &progress, budget.event_wait_ns)
            };
            if !delivered {
                return Err(BenchError::IsrUnavailable);
            }
            if let Some(e) = self.isr_error.take() {
                return Err(e);
            }
            if progress.count() != start {
                self.wait.reset();
            }
        }
        if self.isr_finished() {
            if self.cfg.role == Role::Server && self.it == It::WaitSend {
                // The last reply's completion (no receive follows to interrupt for it).
                let scq = self.res.scq.ok_or(BenchError::NoMemory("data QP"))?;
                match dev.poll_one(scq).map_err(vb("poll send CQ"))? {
                    Some(c) => {
                        self.check_send(c.status)?;
                        self.seq += 1;
                        self.it = It::WaitRecv;
                    }
                    None => {
                        self.wait.start(env);
                        if self.wait.expired(env, timeout, true) {
                            return Err(BenchError::SendTimeout);
                        }
                        return Ok(());
                    }
                }
            }
            self.wait.reset();
            if self.cfg.role == Role::Server {
                self.linger = Some((self.size, self.index));
            }
            return self.end_size(out, false);
        }
        self.wait.start(env);
        if !self.wait.expired(env, timeout, true) {
            return Ok(());
        }
        // Nothing for a whole wait: look once more outside the handler (an interrupt may
        // have been missed), then it is a loss as in the other modes.
        let start = self.recv_count;
        self.isr_advance(dev, env, true)?;
        if self.recv_count != start || self.isr_finished() {
            self.wait.reset();
            return Ok(());
        }
        if one_sided || self.it == It::WaitSend {
            return Err(BenchError::SendTimeout);
        }
        self.on_timeout(dev, env, out)
    }
}
