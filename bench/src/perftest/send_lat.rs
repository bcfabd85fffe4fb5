//! `ib_send_lat`'s measured loop (perftest's `run_iter_lat_send`): SEND ping-pong over
//! UD or UC, busy-polling or with completion events, and its loss recovery.

use super::*;

impl<D: Device> PingPong<D> {
    /// Posts one data SEND of the current size whose first two bytes are `t`.
    #[inline]
    pub(super) fn post_data_send<X: DataPath>(
        &mut self,
        path: &mut X,
        t: [u8; 2],
    ) -> Result<(), BenchError> {
        self.write_tag(t);
        self.post_data(path)
    }

    #[inline]
    pub(super) fn write_tag(&mut self, t: [u8; 2]) {
        self.write_byte(0, t[0]);
        self.write_byte(1, t[1]);
    }

    /// Posts one signaled data SEND of the current size from the send region.
    #[inline]
    pub(super) fn post_data<X: DataPath>(&mut self, path: &mut X) -> Result<(), BenchError> {
        let size = self.size;
        let sge = [Sge {
            addr: self.bus(),
            length: size,
            lkey: self.lkey,
        }];
        // SAFETY: the first `size` bytes of the DMA buffer are the send region, written only
        // by this node; the slice lives only for this post (the WQE copies inline data).
        let inline_bytes = unsafe { core::slice::from_raw_parts(self.base(), size as usize) };
        let payload = if size <= self.inline_max {
            Payload::Inline(inline_bytes)
        } else {
            Payload::Sges(&sge)
        };
        // The UD destination was bound when the path was made.
        path.send(1, payload, SendFlags::SIGNALED)
            .map_err(vb("post_send"))?;
        self.data_posts += 1;
        Ok(())
    }

    /// One look at a CQ in event mode: poll; else arm it (and poll once more, for a
    /// completion that beat the arm); else wait, bounded by the step budget, for its event.
    /// (Busy-poll mode polls through the data path, [`Self::measure_polling`].)
    #[inline]
    pub(super) fn try_cq(
        &mut self,
        dev: &mut D,
        recv: bool,
        wc: &mut [WorkCompletion; 1],
        budget: StepBudget,
    ) -> Result<bool, BenchError> {
        let cq = if recv { self.res.rcq } else { self.res.scq };
        let Some(cq) = cq else {
            return Ok(false);
        };
        if dev.poll_cq(cq, wc).map_err(vb("poll_cq"))? == 1 {
            return Ok(true);
        }
        let armed = if recv {
            &mut self.rcq_armed
        } else {
            &mut self.scq_armed
        };
        if !*armed {
            dev.req_notify_cq(cq, false).map_err(vb("req_notify_cq"))?;
            *armed = true;
            // A completion that arrived before the arm raises no event: look again.
            return Ok(dev.poll_cq(cq, wc).map_err(vb("poll_cq"))? == 1);
        }
        match dev.get_cq_event(cq, budget.event_wait_ns) {
            Ok(()) => {
                *armed = false;
                Ok(dev.poll_cq(cq, wc).map_err(vb("poll_cq"))? == 1)
            }
            Err(verbs::Error::Timeout(_)) => Ok(false),
            Err(e) => Err(BenchError::Verbs {
                during: "get_cq_event",
                err: e,
            }),
        }
    }

    pub(super) fn measure<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        budget: StepBudget,
    ) -> Result<(), BenchError> {
        if self.cfg.completion == Completion::Poll {
            return self.measure_polling(dev, env, out, budget);
        }
        // From here on: event mode. Every wait reads the clock, since each look at a CQ may
        // block for an event.
        let iters = self.cfg.iterations;
        let timeout = self.loss_wait();
        let recv_wait = self.recv_wait();
        let mut wc = [WorkCompletion::default(); 1];
        for _ in 0..budget.polls {
            match self.it {
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
                It::WaitSend => {
                    self.wait.start(env);
                    if self.try_cq(dev, false, &mut wc, budget)? {
                        self.anatomy_send_done(env);
                        self.check_send(wc[0].status)?;
                        self.wait.reset();
                        if self.cfg.role == Role::Server {
                            self.seq += 1;
                            if self.seq == iters {
                                self.linger = Some((self.size, self.index));
                                return self.end_size(out, false);
                            }
                        }
                        self.it = It::WaitRecv;
                    } else if self.wait.expired(env, timeout, true) {
                        return Err(BenchError::SendTimeout);
                    }
                }
                It::WaitRecv => {
                    self.wait.start(env);
                    if self.try_cq(dev, true, &mut wc, budget)? {
                        let w = wc[0];
                        let mut v = self.verbs_path(dev)?;
                        self.on_recv(&mut v, env, w.status, w.byte_len)?;
                        if self.phase != Phase::Measure {
                            return Ok(());
                        }
                        if self.seq == iters && self.cfg.role == Role::Client {
                            return self.end_size(out, false);
                        }
                    } else if self.wait.expired(env, recv_wait, true) {
                        self.on_timeout(dev, env, out)?;
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }

    /// The measured loop in busy-poll mode, through the device's [`DataPath`]: the data QP
    /// and its CQs are validated once per step, not per verb (docs/performance.md). The
    /// same state machine as [`Self::measure`]; a receive timeout leaves the path to look
    /// at the rendezvous QP.
    pub(super) fn measure_polling<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        budget: StepBudget,
    ) -> Result<(), BenchError> {
        let iters = self.cfg.iterations;
        let timeout = self.loss_wait();
        let recv_wait = self.recv_wait();
        let r = &self.res;
        let (Some(qp), Some(scq), Some(rcq)) = (r.qp, r.scq, r.rcq) else {
            return Err(BenchError::NoMemory("data QP"));
        };
        let mut path = dev
            .data_path(qp, scq, rcq, self.ud_dest)
            .map_err(vb("data path"))?;
        for _ in 0..budget.polls {
            match self.it {
                It::Send => {
                    // Client only: stamp just before the post (first attempt of an iteration).
                    self.write_tag(tag(self.seq, self.index, self.attempt > 0));
                    if self.attempt == 0 {
                        self.stamps[self.seq as usize] = env.cycles();
                    }
                    self.post_data(&mut path)?;
                    self.anatomy_posted(env);
                    self.it = It::WaitSend;
                }
                It::WaitSend => match path.poll_send().map_err(vb("poll send CQ"))? {
                    Some(c) => {
                        self.anatomy_send_done(env);
                        self.check_send(c.status)?;
                        self.wait.reset();
                        if self.cfg.role == Role::Server {
                            self.seq += 1;
                            if self.seq == iters {
                                self.linger = Some((self.size, self.index));
                                return self.end_size(out, false);
                            }
                        }
                        self.it = It::WaitRecv;
                    }
                    None if self.wait.expired(env, timeout, false) => {
                        return Err(BenchError::SendTimeout)
                    }
                    None => {}
                },
                It::WaitRecv => match path.poll_recv().map_err(vb("poll receive CQ"))? {
                    Some(c) => {
                        self.on_recv(&mut path, env, c.status, c.byte_len)?;
                        if self.phase != Phase::Measure {
                            return Ok(());
                        }
                        if self.seq == iters && self.cfg.role == Role::Client {
                            return self.end_size(out, false);
                        }
                    }
                    None if self.wait.expired(env, recv_wait, false) => {
                        drop(path);
                        return self.on_timeout(dev, env, out);
                    }
                    None => {}
                },
            }
        }
        Ok(())
    }

    /// perftest's refill rule (`rcnt + rx_depth <= iters`), applied to received messages
    /// that advanced the ping-pong; messages caused by loss recovery are always replaced.
    #[inline]
    pub(super) fn refill<X: DataPath>(
        &mut self,
        path: &mut X,
        artifact: bool,
    ) -> Result<(), BenchError> {
        let rule = self.recv_count + self.cfg.rx_depth() <= self.cfg.iterations;
        if artifact || rule {
            self.post_data_recv(path)?;
        }
        Ok(())
    }

    /// A receive completion (`status`, `byte_len`) in the measured loop; answers and
    /// refills go through `path`.
    pub(super) fn on_recv<X: DataPath, E: BenchEnv>(
        &mut self,
        path: &mut X,
        env: &E,
        status: WcStatus,
        byte_len: u32,
    ) -> Result<(), BenchError> {
        let seen = self.anatomy_seen(env);
        self.rq_outstanding = self.rq_outstanding.saturating_sub(1);
        self.wait.reset();
        match status {
            WcStatus::Success => {}
            // A stale, larger message from an earlier aborted size can hit a smaller
            // receive: that datagram is lost, the queue lives on.
            WcStatus::LocLenErr if self.cfg.transport == Transport::Ud => {
                self.lost += 1;
                return self.refill(path, true);
            }
            s => {
                return Err(BenchError::Completion {
                    during: "receive",
                    status: s,
                })
            }
        }
        let grh = self.cfg.transport.grh_bytes();
        let off = self.payload_off();
        let t = [self.read_byte(off), self.read_byte(off + 1)];
        let (seq, idx, retry) = untag(t);
        let fresh = byte_len == self.size + grh && idx == self.index & 0x1F;
        let want = self.seq & 0x3FF;
        match self.cfg.role {
            Role::Client => {
                if !(fresh && seq == want) {
                    // A late answer to an earlier try, or a leftover of another size.
                    return self.refill(path, true);
                }
                self.check_payload(off)?;
                if self.attempt > 0 && !retry {
                    // The answer to the first try, after its wait ran out: it was slow, not
                    // lost (the server echoes the retry flag). The losses its waits counted
                    // are taken back; the retries were sent and stay counted.
                    let took = env.cycles().saturating_sub(self.stamps[self.seq as usize]);
                    self.loss.late_answer(self.cycles_ns(took));
                    self.lost = self.lost.saturating_sub(self.attempt);
                }
                self.recv_count += 1;
                self.seq += 1;
                self.attempt = 0;
                self.it = It::Send;
                self.refill(path, false)
            }
            Role::Server => {
                self.last_heard_ns = env.now_ns();
                if fresh && seq == want {
                    if retry {
                        // The client's first try was lost: the interval ending here holds
                        // the client's timeout.
                        self.lost += 1;
                        if self.seq > 0 {
                            self.bad[self.seq as usize - 1] = true;
                        }
                    }
                    self.check_payload(off)?;
                    self.recv_count += 1;
                    self.write_tag(t);
                    // perftest's server: stamp just before answering.
                    self.stamps[self.seq as usize] = env.cycles();
                    self.post_data(path)?;
                    self.anatomy_answered(env, seen);
                    self.it = It::WaitSend;
                    self.refill(path, false)
                } else if fresh && self.seq > 0 && seq == (self.seq - 1) & 0x3FF {
                    // The client asked again: our answer was lost, or only late (the client
                    // alone can tell, and counts the loss if there was one). Answer again;
                    // the interval from that answer to the next one holds the client's wait.
                    self.retries += 1;
                    self.bad[self.seq as usize - 1] = true;
                    self.seq -= 1;
                    self.post_data_send(path, t)?;
                    self.it = It::WaitSend;
                    self.refill(path, true)
                } else {
                    self.refill(path, true)
                }
            }
        }
    }

    /// A wait for a receive ran out.
    pub(super) fn on_timeout<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
    ) -> Result<(), BenchError> {
        self.wait.reset();
        self.measure_round_trip();
        match self.cfg.role {
            Role::Client => {
                // Also keep the rendezvous QP drained (late barrier answers).
                self.service_rdv(dev, env)?;
                self.lost += 1;
                let (done, n) = (self.seq, self.cfg.iterations);
                if loss::give_up(self.lost, done, n, self.cfg.max_losses_per_size) {
                    return self.end_size(out, true);
                }
                self.retries += 1;
                self.attempt += 1;
                self.bad[self.seq as usize] = true;
                self.it = It::Send;
            }
            Role::Server => {
                // Silence: the client may have aborted this size, finished, or re-sent a
                // barrier whose answer was lost.
                match self.service_rdv(dev, env)? {
                    Some((Kind::Barrier, i, _)) if i == self.index => {
                        self.rdv_reply(dev, Kind::BarrierAck, i)?;
                    }
                    Some((Kind::Barrier, i, _)) if i > self.index => {
                        self.skip_to = Some(i);
                        return self.end_size(out, true);
                    }
                    Some((Kind::Done, _, _)) => {
                        self.end_size(out, true)?;
                        return self.answer_done(dev, env.now_ns());
                    }
                    _ => {}
                }
                if env.now_ns().saturating_sub(self.last_heard_ns) > self.silence_bound() {
                    return Err(BenchError::PeerLost);
                }
            }
        }
        Ok(())
    }
}
