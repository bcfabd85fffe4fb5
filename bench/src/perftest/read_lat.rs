//! `ib_read_lat`'s measured loop (perftest's `run_iter_lat`), shared with `ib_atomic_lat`:
//! the client alone posts one signaled RDMA READ (or atomic, [`super::atomic_lat`]) at a
//! time and waits for its completion; the server is passive between the barriers. A delta
//! of consecutive stamps is one full round trip, reported whole (rtt_factor 1).

use super::*;

impl<D: Device> PingPong<D> {
    /// Posts one signaled RDMA READ of the current size from the peer's send region into
    /// this node's receive region.
    pub(super) fn post_read(&mut self, dev: &mut D) -> Result<(), BenchError> {
        let (Some(qp), Some(peer)) = (self.res.qp, self.peer) else {
            return Err(BenchError::NoMemory("data QP"));
        };
        let sge = [Sge {
            addr: self.bus() + self.lay.recv as u64,
            length: self.size,
            lkey: self.lkey,
        }];
        let wr = SendWr {
            wr_id: 3,
            opcode: WrOpcode::RdmaRead {
                remote_addr: peer.addr,
                rkey: peer.rkey,
            },
            payload: Payload::Sges(&sge),
            flags: SendFlags::SIGNALED,
            ud: None,
        };
        dev.post_send(qp, &wr).map_err(vb("post RDMA READ"))
    }

    /// The client's request of the current iteration: stamp, post the READ or atomic.
    #[inline]
    pub(super) fn post_one_sided<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &E,
    ) -> Result<(), BenchError> {
        self.stamps[self.seq as usize] = env.cycles();
        if self.cfg.test == Test::AtomicLat {
            self.post_atomic(dev)?;
        } else {
            self.post_read(dev)?;
        }
        self.anatomy_posted(env);
        self.data_posts += 1;
        self.it = It::WaitSend;
        Ok(())
    }

    /// The completion of the client's request (`status`): checked (with `verify`: the
    /// READ's bytes, the atomic's fetched value), the iteration done, the next one due.
    #[inline]
    pub(super) fn one_sided_done(&mut self, status: WcStatus) -> Result<(), BenchError> {
        self.check_send(status)?;
        self.wait.reset();
        self.recv_count += 1;
        if self.cfg.test == Test::AtomicLat {
            self.check_atomic()?;
        } else {
            self.check_payload(self.lay.recv)?;
        }
        self.seq += 1;
        self.it = It::Send;
        Ok(())
    }

    /// The server's part of a one-sided size: nothing to post or poll; the size ends at
    /// once (no row: perftest's passive side prints none) and the server waits at the next
    /// barrier, or for Done, while the client measures.
    pub(super) fn measure_passive(&mut self) {
        self.summary.sizes += 1;
        self.phase = Phase::SizeStart;
    }

    /// The client's loop of read_lat and atomic_lat: stamp, post, wait for the send
    /// completion (busy-polling, or through the CQ's event with `completion=event`), check
    /// (with `verify`: the READ's bytes are the server's pattern, the atomic's fetched
    /// value is the iteration number), next. RC retransmits by itself, so a wait that runs
    /// out is the peer or the fabric gone: an error, not a loss.
    pub(super) fn measure_one_sided<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        budget: StepBudget,
    ) -> Result<(), BenchError> {
        if self.cfg.role == Role::Server {
            self.measure_passive();
            return Ok(());
        }
        let iters = self.cfg.iterations;
        let timeout =
            (self.cfg.wait_timeout_ns + u64::from(self.size) * 20).max(self.cfg.peer_timeout_ns);
        let events = self.cfg.completion == Completion::Event;
        let scq = self.res.scq.ok_or(BenchError::NoMemory("data QP"))?;
        let mut wc = [WorkCompletion::default(); 1];
        for _ in 0..budget.polls {
            match self.it {
                It::Send => self.post_one_sided(dev, env)?,
                It::WaitSend | It::WaitRecv => {
                    let done = if events {
                        self.wait.start(env);
                        self.try_cq(dev, false, &mut wc, budget)?
                    } else {
                        dev.poll_cq(scq, &mut wc).map_err(vb("poll send CQ"))? == 1
                    };
                    if done {
                        self.anatomy_send_done(env);
                        self.one_sided_done(wc[0].status)?;
                        if self.seq == iters {
                            return self.end_size(out, false);
                        }
                    } else if self.wait.expired(env, timeout, events) {
                        return Err(BenchError::SendTimeout);
                    }
                }
            }
        }
        Ok(())
    }
}
