//! `ib_write_lat`'s measured loop (perftest's `run_iter_lat_write`): RDMA WRITE
//! ping-pong over RC or UC, polling the last byte of the receive region.

use super::*;

impl<D: Device> PingPong<D> {
    /// The byte write_lat's iteration `seq` (0-based) carries in the last byte of its
    /// message: perftest's `(char)++scnt`, i.e. `seq + 1` mod 256.
    pub(super) fn iter_tag(seq: u32) -> u8 {
        (seq.wrapping_add(1) & 0xFF) as u8
    }

    /// Posts one signaled RDMA WRITE of the current size from the send region to the peer's
    /// receive region, with `tag` in its last byte (inline up to the inline limit).
    pub(super) fn post_write(&mut self, dev: &mut D, tag: u8) -> Result<(), BenchError> {
        let (Some(qp), Some(peer)) = (self.res.qp, self.peer) else {
            return Err(BenchError::NoMemory("data QP"));
        };
        let size = self.size;
        self.write_byte(size as usize - 1, tag);
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
        let wr = SendWr {
            wr_id: 2,
            opcode: WrOpcode::RdmaWrite {
                remote_addr: peer.addr,
                rkey: peer.rkey,
            },
            payload,
            flags: SendFlags::SIGNALED,
            ud: None,
        };
        dev.post_send(qp, &wr).map_err(vb("post RDMA WRITE"))
    }

    /// perftest's `run_iter_lat_write`: per iteration the client stamps, writes `seq + 1`
    /// into the last byte of its message, posts one signaled WRITE, polls its send CQ, then
    /// spins on the last byte of its own receive region until the server's write with the
    /// same tag lands; the server spins first, then stamps and writes back. Through the
    /// per-call verbs (the device's `DataPath` only sends); busy-polling only.
    pub(super) fn measure_write<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
        budget: StepBudget,
    ) -> Result<(), BenchError> {
        let iters = self.cfg.iterations;
        let timeout = self.loss_wait();
        // RC: a lost packet is retransmitted by the HCA after its ACK timeout, and the
        // send completion waits for the ACK; the HCA itself fails the WRITE (retry
        // exceeded) after 8 ACK timeouts. Bound the wait by the peer timeout, not a loss wait.
        let send_timeout = match self.cfg.transport {
            Transport::Rc => timeout.max(self.cfg.peer_timeout_ns),
            _ => timeout,
        };
        let scq = self.res.scq.ok_or(BenchError::NoMemory("data QP"))?;
        let polled = self.lay.recv + self.size as usize - 1;
        let mut wc = [WorkCompletion::default(); 1];
        for _ in 0..budget.polls {
            match self.it {
                It::Send => {
                    if self.attempt == 0 {
                        self.stamps[self.seq as usize] = env.cycles();
                    }
                    self.post_write(dev, Self::iter_tag(self.seq))?;
                    if self.anat.on {
                        if self.cfg.role == Role::Server {
                            let seen = self.anat.event.get(self.seq as usize).copied();
                            self.anatomy_answered(env, seen.unwrap_or(0));
                        } else {
                            self.anatomy_posted(env);
                        }
                    }
                    self.it = It::WaitSend;
                }
                It::WaitSend => {
                    if dev.poll_cq(scq, &mut wc).map_err(vb("poll send CQ"))? == 1 {
                        self.anatomy_send_done(env);
                        self.check_send(wc[0].status)?;
                        self.wait.reset();
                        if self.cfg.role == Role::Server {
                            self.seq += 1;
                            if self.seq == iters {
                                return self.end_size(out, false);
                            }
                        }
                        self.it = It::WaitRecv;
                    } else if self.wait.expired(env, send_timeout, false) {
                        return Err(BenchError::SendTimeout);
                    }
                }
                It::WaitRecv => {
                    if self.read_byte(polled) == Self::iter_tag(self.seq) {
                        if self.anat.on && self.cfg.role == Role::Server {
                            let seen = self.anatomy_seen(env);
                            if let Some(t) = self.anat.event.get_mut(self.seq as usize) {
                                *t = seen;
                            }
                        }
                        self.wait.reset();
                        self.last_heard_ns = env.now_ns();
                        self.check_payload(self.lay.recv)?;
                        self.recv_count += 1;
                        self.attempt = 0;
                        match self.cfg.role {
                            Role::Client => {
                                self.seq += 1;
                                if self.seq == iters {
                                    return self.end_size(out, false);
                                }
                            }
                            // perftest's server: stamp just before answering (in `Send`).
                            Role::Server => {}
                        }
                        self.it = It::Send;
                    } else if self.wait.expired(env, timeout, false) {
                        return self.on_write_timeout(dev, env, out);
                    }
                }
            }
        }
        Ok(())
    }

    /// write_lat: a wait for the peer's write ran out (UC: a packet was lost; RC: the HCA's
    /// retransmission took longer than the wait). A WRITE is idempotent, so each side
    /// re-posts its last write: the client the one it waits an answer to, the server its
    /// last answer. Whichever of the two was lost, the peer then sees the tag it waits for;
    /// a duplicate only rewrites bytes the peer already holds. The interval holding the wait
    /// leaves the statistics; past the loss limit the client aborts the size.
    pub(super) fn on_write_timeout<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
    ) -> Result<(), BenchError> {
        match self.cfg.role {
            Role::Client if self.seq + 1 == self.cfg.iterations && self.attempt > 0 => {
                // The last answer is still missing after one re-post: the server has most
                // likely finished this size and its answer was lost. No interval ends with
                // this answer (the last stamp is taken before the last write), so the
                // statistics are complete: count the loss and end the size.
                self.wait.reset();
                self.service_rdv(dev, env)?;
                self.lost += 1;
                self.end_size(out, false)
            }
            // Counts the loss, marks the interval, aborts past the limit, re-posts.
            Role::Client => self.on_timeout(dev, env, out),
            Role::Server => {
                // Services the rendezvous (the client may have aborted this size or
                // finished) and bounds the silence.
                self.on_timeout(dev, env, out)?;
                if self.phase == Phase::Measure && self.seq > 0 {
                    // Re-post answer `seq - 1` unstamped; its completion brings `seq` back.
                    self.lost += 1;
                    self.retries += 1;
                    self.bad[self.seq as usize - 1] = true;
                    self.seq -= 1;
                    self.attempt = 1;
                    self.it = It::Send;
                }
                Ok(())
            }
        }
    }
}
