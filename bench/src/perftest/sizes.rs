//! One size of a sweep: its start (receives, pattern, QP reset after an abort), the
//! per-size barrier, the server's linger between sizes, and the report (perftest's row and
//! the result line).

use super::*;

impl<D: Device> PingPong<D> {
    pub(super) fn size_start<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
    ) -> Result<(), BenchError> {
        if !self.header_done {
            if self.cfg.test.is_bw() {
                let unit = if self.cfg.bw.report_gbits {
                    crate::bw::BwUnit::Gbits
                } else {
                    crate::bw::BwUnit::MBytes
                };
                crate::bw::write_bw_header(out, unit)?;
            } else {
                report::write_header(out)?;
            }
            self.header_done = true;
        }
        env.progress(self.summary.sizes, self.total_sizes);
        let next = if self.size == 0 {
            self.sizes.next()
        } else {
            self.index += 1;
            self.sizes.next()
        };
        let Some(size) = next else {
            self.phase = Phase::Finish;
            self.next_send_ns = 0;
            self.tries = 0;
            self.done_from = env.now_ns();
            // The peer's silence counts from here, as for a barrier: its data answers during
            // the last size are not rendezvous traffic, and a size may take longer than
            // `peer_timeout` (8 MiB over UC under emulation).
            self.last_heard_ns = env.now_ns();
            return Ok(());
        };
        self.size = size;
        self.loss.start_size(size);
        if let Some(target) = self.skip_to {
            if self.index < target {
                // The client aborted and moved on: report this size as aborted too.
                self.lost = 0;
                self.retries = 0;
                self.report(out, true)?;
                return Ok(());
            }
            self.skip_to = None;
        }
        // Fill the send region once per size (off the clock): the pattern the peer checks.
        // A passive server prepares its region when the client's barrier for the size
        // arrives instead ([`Self::prepare_passive`]): until then the client may still be
        // reading the previous size.
        let passive = self.cfg.role == Role::Server && self.cfg.test.passive_server();
        if !passive {
            self.fill_pattern(size, self.index);
        }
        if self.cfg.test == Test::WriteLat {
            // The byte polled for the peer's iteration tag starts this size cleared; the
            // peer writes nothing of this size before the barrier, and nothing of an
            // earlier (smaller) size reaches this offset.
            let last = self.lay.recv + size as usize - 1;
            self.write_byte(last, 0);
        }
        if self.cfg.test == Test::AtomicLat && self.cfg.role == Role::Client {
            // No fetched value yet: a completion that wrote nothing is caught.
            (0..ATOMIC_SIZE as usize).for_each(|i| self.write_byte(self.lay.recv + i, 0xFF));
        }
        if self.cfg.test == Test::ReadLat && self.cfg.role == Role::Client {
            // The READ's destination holds nothing of this size's pattern beforehand.
            for off in 0..size as usize {
                self.write_byte(self.lay.recv + off, !pattern(off, self.index));
            }
        }
        if self.needs_reset || self.rq_outstanding > 0 {
            // After an aborted size, receives sized for it may be left (a larger message
            // would overrun them) and UC PSNs have drifted: start this size from a clean QP;
            // the barrier tells the peer to do the same.
            self.reset_data_qp(dev)?;
        } else {
            self.post_size_recvs(dev)?;
        }
        self.seq = 0;
        self.attempt = 0;
        self.lost = 0;
        self.retries = 0;
        self.recv_count = 0;
        self.bad.iter_mut().for_each(|b| *b = false);
        self.stamps.iter_mut().for_each(|s| *s = 0);
        self.anat.clear();
        self.it = match self.cfg.role {
            Role::Client => It::Send,
            Role::Server => It::WaitRecv,
        };
        self.wait.reset();
        self.phase = Phase::Barrier;
        self.next_send_ns = 0;
        self.tries = 0;
        self.last_heard_ns = env.now_ns();
        Ok(())
    }

    /// perftest's `ctx_set_recv_wqes`: rx_depth receives for this size, all on one buffer.
    pub(super) fn post_size_recvs(&mut self, dev: &mut D) -> Result<(), BenchError> {
        if self.cfg.test != Test::SendLat {
            return Ok(());
        }
        let mut v = self.verbs_path(dev)?;
        for _ in 0..self.cfg.rx_depth() {
            self.post_data_recv(&mut v)?;
        }
        Ok(())
    }

    /// Data QP back to RESET (dropping every posted receive) and up again with the PSNs of
    /// the exchange; stale completions drained; this size's receives posted.
    pub(super) fn reset_data_qp(&mut self, dev: &mut D) -> Result<(), BenchError> {
        let qp = self.res.qp.ok_or(BenchError::NoMemory("data QP"))?;
        let peer = self.peer.ok_or(BenchError::PeerLost)?;
        dev.modify_qp(qp, &QpAttr::new(QpState::Reset))
            .map_err(vb("data QP to RESET"))?;
        let init = self.data_qp_init();
        let mut wc = [WorkCompletion::default(); 8];
        for cq in [self.res.rcq, self.res.scq].into_iter().flatten() {
            for _ in 0..1_000_000 {
                if dev.poll_cq(cq, &mut wc).map_err(vb("drain CQ"))? == 0 {
                    break;
                }
            }
        }
        self.scq_armed = false;
        self.rcq_armed = false;
        dev.modify_qp(qp, &init).map_err(vb("data QP to INIT"))?;
        self.ready_data_qp(dev, qp, peer)?;
        self.rq_outstanding = 0;
        self.needs_reset = false;
        self.reset_for = Some(self.index);
        self.post_size_recvs(dev)
    }

    pub(super) fn fill_pattern(&mut self, size: u32, index: u32) {
        for off in self.data_from()..size as usize {
            self.write_byte(off, pattern(off, index));
        }
    }

    pub(super) fn post_data_recv<X: DataPath>(&mut self, path: &mut X) -> Result<(), BenchError> {
        let len = self.size + self.cfg.transport.grh_bytes();
        let sge = [Sge {
            addr: self.bus() + self.lay.recv as u64,
            length: len,
            lkey: self.lkey,
        }];
        path.post_recv(&RecvWr {
            wr_id: 0,
            sg_list: &sge,
        })
        .map_err(vb("post_recv"))?;
        self.rq_outstanding += 1;
        Ok(())
    }

    pub(super) fn barrier<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
    ) -> Result<(), BenchError> {
        let now = env.now_ns();
        let ev = self.service_rdv(dev, env)?;
        match self.cfg.role {
            Role::Client => {
                if let Some((Kind::BarrierAck, i, flags)) = ev {
                    if i == self.index {
                        if flags & FLAG_RESET != 0 && self.reset_for != Some(i) {
                            self.reset_data_qp(dev)?;
                        }
                        if self.cfg.test.is_bw() {
                            self.bw_client_begin(dev)?;
                        }
                        self.begin_measure();
                        return Ok(());
                    }
                }
                if now >= self.next_send_ns {
                    self.next_send_ns = now + self.rdv_gap();
                    self.rdv_reply(dev, Kind::Barrier, self.index)?;
                }
            }
            Role::Server => {
                if self.linger(dev)? {
                    self.last_heard_ns = now;
                }
                match ev {
                    Some((Kind::Barrier, i, flags)) if i == self.index => {
                        if flags & FLAG_RESET != 0 && self.reset_for != Some(i) {
                            self.reset_data_qp(dev)?;
                        }
                        self.prepare_passive();
                        if self.cfg.test.is_bw() {
                            self.bw_server_begin(dev, env)?;
                        }
                        self.rdv_reply(dev, Kind::BarrierAck, i)?;
                        self.begin_measure();
                        return Ok(());
                    }
                    Some((Kind::Barrier, i, _)) if i > self.index => {
                        // The client aborted sizes and moved on: so do we.
                        self.skip_to = Some(i);
                        return self.end_size(out, true);
                    }
                    Some((Kind::Done, _, _)) => return self.answer_done(dev, now),
                    Some((Kind::Barrier, i, _)) => self.reack_passive(dev, i)?,
                    _ => {}
                }
            }
        }
        if now.saturating_sub(self.last_heard_ns) > self.silence_bound() {
            return Err(BenchError::PeerLost);
        }
        Ok(())
    }

    /// How long the peer may stay silent before it is taken as lost: `peer_timeout_ms`, but
    /// on a server never less than a client can legitimately spend retrying one request
    /// (`loss_limit + 1` waits of the size in play, plus one for its next message) before
    /// it gives the size up and speaks again. Meanwhile its retries may be lost too, or, after the last size, find no
    /// receive posted (perftest posts exactly `iterations` per size), so the server hears
    /// nothing; it must not end the run under a client that is still going.
    pub(super) fn silence_bound(&self) -> u64 {
        if self.cfg.role == Role::Server
            && (self.cfg.test.passive_server() || self.cfg.test.is_bw())
        {
            // A passive server hears nothing while its client measures a whole size, nor
            // does a bandwidth receiver once a lossy stream stops arriving.
            let per_wait = self.cfg.wait_timeout_ns + u64::from(self.size) * 20;
            return self
                .cfg
                .peer_timeout_ns
                .max(u64::from(self.cfg.iterations).saturating_mul(per_wait));
        }
        let size = match (self.cfg.role, self.phase, self.linger) {
            (Role::Server, Phase::Measure, _) => self.size,
            (Role::Server, _, Some((size, _))) => size,
            _ => return self.cfg.peer_timeout_ns,
        };
        let per_wait = self.cfg.wait_timeout_ns + u64::from(size) * 20;
        let retrying = u64::from(self.cfg.max_losses_per_size)
            .saturating_add(2)
            .saturating_mul(per_wait);
        self.cfg.peer_timeout_ns.max(retrying)
    }

    /// A passive (one-sided) server, as its client's barrier for the current size arrives:
    /// the region the client reads holds this size's pattern, the word its atomics act on
    /// is 0. The client posts nothing of this size before the answer to that barrier.
    pub(super) fn prepare_passive(&mut self) {
        if self.cfg.role != Role::Server {
            return;
        }
        match self.cfg.test {
            Test::ReadLat => self.fill_pattern(self.size, self.index),
            Test::AtomicLat => self.reset_atomic_word(),
            _ => {}
        }
    }

    /// A passive server already past size `i` hears its barrier again: its answer was lost
    /// (the client is still waiting to start that size). Answer it again; its region is
    /// left as it is, the client has not touched it yet.
    pub(super) fn reack_passive(&mut self, dev: &mut D, i: u32) -> Result<(), BenchError> {
        if self.cfg.test.passive_server() && i + 1 == self.index {
            self.rdv_reply(dev, Kind::BarrierAck, i)?;
        }
        Ok(())
    }

    pub(super) fn begin_measure(&mut self) {
        self.phase = Phase::Measure;
        self.wait.reset();
        self.linger = None;
    }

    /// Server between sizes: the client may ask again for the previous size's last answer
    /// (it was lost); answer it so the client can finish that size. Returns whether the
    /// client was heard (any data arrived): a client still asking is alive, however long
    /// its answers keep getting lost.
    pub(super) fn linger(&mut self, dev: &mut D) -> Result<bool, BenchError> {
        let Some((size, index)) = self.linger else {
            return Ok(false);
        };
        let Some(rcq) = self.res.rcq else {
            return Ok(false);
        };
        let mut wc = [WorkCompletion::default(); 1];
        if dev.poll_cq(rcq, &mut wc).map_err(vb("poll_cq (recv)"))? == 0 {
            return Ok(false);
        }
        self.rq_outstanding = self.rq_outstanding.saturating_sub(1);
        let w = wc[0];
        let grh = self.cfg.transport.grh_bytes();
        if w.status == WcStatus::Success && w.byte_len == size + grh {
            let t = [
                self.read_byte(self.payload_off()),
                self.read_byte(self.payload_off() + 1),
            ];
            let (seq, idx, _) = untag(t);
            if idx == index & 0x1F && seq == (self.cfg.iterations - 1) & 0x3FF {
                self.summary.late_repeats += 1;
                let (saved_size, saved_index) = (self.size, self.index);
                self.fill_pattern(size, index);
                self.size = size;
                let r = self
                    .verbs_path(dev)
                    .and_then(|mut v| self.post_data_send(&mut v, t));
                let r = r.and_then(|()| self.wait_send_blocking(dev));
                self.size = saved_size;
                self.fill_pattern(saved_size, saved_index);
                r?;
            }
        }
        // The consumed receive belonged to the new size: replace it.
        let mut v = self.verbs_path(dev)?;
        self.post_data_recv(&mut v)?;
        Ok(true)
    }

    /// First payload byte that carries the pattern: send_lat's first two bytes are its tag;
    /// write_lat's tag is the last byte instead.
    pub(super) fn data_from(&self) -> usize {
        match self.cfg.test {
            Test::SendLat => 2,
            _ => 0,
        }
    }

    pub(super) fn check_payload(&self, off: usize) -> Result<(), BenchError> {
        if !self.cfg.verify {
            return Ok(());
        }
        let end = match self.cfg.test {
            Test::SendLat => self.size as usize,
            // The last byte is the iteration tag.
            Test::WriteLat => self.size as usize - 1,
            Test::ReadLat => self.size as usize,
            // Checked by `check_atomic`; the bandwidth tests check no payload.
            Test::AtomicLat | Test::SendBw | Test::WriteBw | Test::ReadBw | Test::AtomicBw => 0,
        };
        for i in self.data_from()..end {
            if self.read_byte(off + i) != pattern(i, self.index) {
                return Err(BenchError::Payload {
                    bytes: self.size,
                    offset: i as u32,
                });
            }
        }
        Ok(())
    }

    pub(super) fn end_size<W: Write>(
        &mut self,
        out: &mut W,
        aborted: bool,
    ) -> Result<(), BenchError> {
        // Written by `step` once this step is over (with the size's interrupt count).
        let _ = out;
        self.pending_report = Some(aborted);
        self.needs_reset |= aborted;
        self.phase = Phase::SizeStart;
        Ok(())
    }

    /// Statistics over the clean samples, perftest's row and the result line.
    pub(super) fn report<W: Write>(
        &mut self,
        out: &mut W,
        aborted: bool,
    ) -> Result<(), BenchError> {
        // The anatomy reads the stamps before perftest's statistics re-accumulate them.
        self.anatomy_size(aborted);
        let stats = if aborted { None } else { self.clean_stats()? };
        if let Some(s) = &stats {
            // The size's typical round trip, for the next size's waits.
            let factor = if self.cfg.test.one_sided() { 1.0 } else { 2.0 };
            self.loss
                .typical_round_trip((s.t_typical * factor * 1000.0) as u64);
        }
        match &stats {
            Some(s) => report::write_row(out, u64::from(self.size), s)?,
            None => writeln!(
                out,
                " {:<7} {}          (no statistics: {} lost, {})",
                self.size,
                self.cfg.iterations,
                self.lost,
                if aborted {
                    "size aborted"
                } else {
                    "too few clean samples"
                }
            )?,
        }
        let line = LatencyLine {
            test: self.cfg.test,
            transport: self.cfg.transport,
            role: self.cfg.role,
            bytes: self.size,
            iterations: self.cfg.iterations,
            stats,
            tsc_mhz: self.tsc_mhz,
            inline: self.size <= self.inline_max,
            completion: self.cfg.completion,
            mtu: self.mtu.bytes(),
            lost: self.lost,
            retries: self.retries,
            aborted,
            interrupts: self.irq_during,
        };
        line.emit(out)?;
        self.summary.sizes += 1;
        self.summary.aborted += aborted as u32;
        self.summary.lost += u64::from(self.lost);
        self.summary.retries += u64::from(self.retries);
        self.summary.last = Some(SizeResultSummary {
            bytes: self.size,
            samples: stats.map_or(0, |s| s.samples),
        });
        Ok(())
    }

    /// The stamps with every interval that contains a loss wait removed: the clean deltas
    /// are re-accumulated from the first stamp, so `perftest_latency` sees only them.
    pub(super) fn clean_stats(&mut self) -> Result<Option<LatencyStats>, BenchError> {
        let kept = drop_bad_intervals(&mut self.stamps, &self.bad);
        if kept < crate::stats::MIN_ITERATIONS {
            return Ok(None);
        }
        let s = perftest_latency(
            &self.stamps[..kept],
            &mut self.scratch,
            self.tsc_mhz,
            if self.cfg.test.one_sided() {
                RttFactor::Full
            } else {
                RttFactor::Half
            },
        )
        .map_err(BenchError::Stats)?;
        Ok(Some(s))
    }
}
