//! The rendezvous protocol of one run (docs/rendezvous.md): rendezvous QP traffic, the
//! Hello exchange that connects the data QP, the banner, the barrier and Done messages.

use super::*;

impl<D: Device> PingPong<D> {
    pub(super) fn msg(&self, kind: Kind, index: u32) -> Msg {
        Msg {
            kind,
            role: self.cfg.role,
            transport: self.cfg.transport,
            session: self.session,
            peer_session: self.peer_session,
            lid: self.local.lid,
            mtu: self.mtu as u8,
            qpn: self.local.qpn,
            psn: self.local.psn,
            iterations: self.cfg.iterations,
            size: Msg::size_field(self.cfg.sizes),
            index,
            flags: if self.reset_for == Some(index)
                && matches!(kind, Kind::Barrier | Kind::BarrierAck)
            {
                FLAG_RESET
            } else {
                0
            },
            test: self.cfg.test,
            addr: self.local.addr,
            rkey: self.local.rkey,
            plan: self.plan,
            atomic: self.cfg.atomic,
            out_reads: self.cfg.outstanding_reads,
            anatomy: self.anat.on,
            turnaround: match kind {
                Kind::BarrierAck | Kind::DoneAck if self.anat.on => self.anat.pending,
                _ => None,
            },
            bw: self.cfg.bw,
            report: None,
        }
    }

    /// Server: answers `hello` (from LID `slid`, QPN `src_qp`) with a refusal; repeated
    /// Hellos of that session get it again (the client prints it and ends the run).
    pub fn refuse(&mut self, dev: &mut D, hello: &Heard, why: Refusal) -> Result<(), BenchError> {
        self.rdv_lid = Some(hello.lid);
        self.peer_rdv_qpn = hello.qpn;
        let (code, a, b) = why.fields();
        let m = Msg {
            kind: Kind::Refuse,
            peer_session: hello.msg.session,
            index: code,
            rkey: a,
            addr: u64::from(b),
            plan: hello.msg.plan,
            atomic: hello.msg.atomic,
            out_reads: hello.msg.out_reads,
            anatomy: false,
            turnaround: None,
            ..self.msg(Kind::Refuse, 0)
        };
        self.send_rdv(dev, hello.lid, &m)
    }

    /// Sends one rendezvous message to the peer's rendezvous QPN at `lid`; skipped when the
    /// send queue is full (the protocol re-sends anyway).
    pub(super) fn send_rdv(&mut self, dev: &mut D, lid: u16, m: &Msg) -> Result<(), BenchError> {
        let qpn = self.peer_rdv_qpn;
        match self.rdv.as_mut() {
            Some(ch) => ch.send(dev, lid, qpn, &m.encode()).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Takes the rendezvous completions waiting; returns the messages received (at most
    /// 8) other than this node's own, each with the sender's LID and QPN.
    pub(super) fn poll_rdv(
        &mut self,
        dev: &mut D,
        got: &mut [(Msg, u16, u32); 8],
    ) -> Result<usize, BenchError> {
        let Some(ch) = self.rdv.as_mut() else {
            return Ok(0);
        };
        let own = self.session;
        let mut k = 0;
        ch.poll(dev, |b, slid, src_qp| {
            // Anything that is not our protocol (or from ourselves) is ignored.
            if let Ok(m) = Msg::decode(b) {
                if m.session != own && k < got.len() {
                    got[k] = (m, slid, src_qp);
                    k += 1;
                }
            }
        })?;
        Ok(k)
    }

    pub(super) fn check_compatible(&self, m: &Msg) -> Result<(), BenchError> {
        if m.test != self.cfg.test {
            return Err(BenchError::PeerMismatch("test"));
        }
        if m.transport != self.cfg.transport {
            return Err(BenchError::PeerMismatch("transport"));
        }
        if m.role == self.cfg.role {
            return Err(BenchError::PeerMismatch("both nodes have the same role"));
        }
        if m.iterations != self.cfg.iterations {
            return Err(BenchError::PeerMismatch("iterations"));
        }
        if m.size != Msg::size_field(self.cfg.sizes) {
            return Err(BenchError::PeerMismatch("sizes"));
        }
        if Mtu::from_raw(m.mtu).is_none() {
            return Err(BenchError::PeerMismatch("MTU"));
        }
        Ok(())
    }

    /// Moves the data QP to RTR and RTS toward the peer (perftest's `ctx_connect`).
    pub(super) fn connect(&mut self, dev: &mut D, peer: Endpoint) -> Result<(), BenchError> {
        let qp = self.res.qp.ok_or(BenchError::NoMemory("data QP"))?;
        self.ready_data_qp(dev, qp, peer)?;
        if self.cfg.transport == Transport::Ud {
            let pd = self
                .res
                .pd
                .ok_or(BenchError::NoMemory("protection domain"))?;
            let ah = self.res.objs.create_ah(dev, pd, peer.lid, self.cfg.port)?;
            self.ud_dest = Some(UdDest {
                ah,
                remote_qpn: peer.qpn,
                remote_qkey: DATA_QKEY,
            });
        }
        self.peer = Some(peer);
        self.summary.peer = peer;
        self.summary.local = self.local;
        self.summary.mtu = self.mtu.bytes();
        self.sizes = self.cfg.size_list(self.mtu);
        self.total_sizes = self.cfg.size_list(self.mtu).count() as u32;
        Ok(())
    }

    pub(super) fn ready_data_qp(
        &self,
        dev: &mut D,
        qp: D::Qp,
        peer: Endpoint,
    ) -> Result<(), BenchError> {
        let mut rtr = QpAttr::new(QpState::Rtr);
        if self.cfg.transport != Transport::Ud {
            rtr.path_mtu = self.mtu;
            rtr.dest_qp_num = peer.qpn;
            rtr.rq_psn = peer.psn;
            rtr.ah = AhAttr {
                dlid: peer.lid,
                port: self.cfg.port,
                ..AhAttr::default()
            };
        }
        // READs/atomics in flight: perftest's `-o` for read_lat and atomic_lat (both sides
        // take the client's), none otherwise.
        let rd_atomic = if self.cfg.test.one_sided()
            || matches!(self.cfg.test, Test::ReadBw | Test::AtomicBw)
        {
            self.cfg.outstanding_reads
        } else {
            0
        };
        if self.cfg.transport == Transport::Rc {
            // perftest's RC attributes: RNR timer 12 (0.64 ms).
            rtr.max_dest_rd_atomic = rd_atomic;
            rtr.min_rnr_timer = 12;
        }
        dev.modify_qp(qp, &rtr).map_err(vb("data QP to RTR"))?;
        let mut rts = QpAttr::new(QpState::Rts);
        rts.sq_psn = self.local.psn;
        if self.cfg.transport == Transport::Rc {
            // perftest's defaults: ACK timeout 14 (4.096 µs × 2^14 ≈ 67 ms), 7 transport
            // retries, 7 RNR retries (infinite), `-o` outstanding READs/atomics.
            rts.timeout = 14;
            rts.retry_cnt = 7;
            rts.rnr_retry = 7;
            rts.max_rd_atomic = rd_atomic;
        }
        dev.modify_qp(qp, &rts).map_err(vb("data QP to RTS"))?;
        Ok(())
    }

    pub(super) fn rendezvous<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
    ) -> Result<(), BenchError> {
        let now = env.now_ns();
        if now.saturating_sub(self.rdv_start) > self.cfg.peer_timeout_ns {
            return Err(BenchError::PeerNotFound);
        }
        let mut got = [(self.msg(Kind::Hello, 0), 0u16, 0u32); 8];
        let n = match self.pending.take() {
            // A following server starts from the Hello its listener heard.
            Some(h) => {
                got[0] = (h.msg, h.lid, h.qpn);
                1
            }
            None => self.poll_rdv(dev, &mut got)?,
        };
        for &(m, slid, src_qp) in &got[..n] {
            match (self.cfg.role, m.kind) {
                (Role::Server, Kind::Hello) if self.listen => {
                    // A listener only reports what it heard; its owner decides.
                    self.heard = Some(Heard {
                        msg: m,
                        lid: slid,
                        qpn: src_qp,
                    });
                    self.phase = Phase::Done;
                    return Ok(());
                }
                (Role::Server, Kind::Hello) if self.follow.is_some_and(|s| s != m.session) => {}
                (Role::Server, Kind::Hello) => {
                    self.check_compatible(&m)?;
                    let agreed = Mtu::from_raw(m.mtu).map_or(self.mtu, |p| p.min(self.mtu));
                    self.mtu = agreed;
                    self.peer_session = m.session;
                    self.peer_rdv_qpn = src_qp;
                    self.anatomy_from_hello(m.anatomy);
                    self.rdv_lid = Some(slid);
                    let peer = Endpoint {
                        lid: slid,
                        qpn: m.qpn,
                        psn: m.psn,
                        addr: m.addr,
                        rkey: m.rkey,
                    };
                    self.connect(dev, peer)?;
                    let ack = self.msg(Kind::HelloAck, 0);
                    self.send_rdv(dev, slid, &ack)?;
                    self.enter_sizes(env, out)?;
                    return Ok(());
                }
                (Role::Client, Kind::Refuse) if m.peer_session == self.session => {
                    return Err(BenchError::Refused(
                        m.refusal().unwrap_or(Refusal::Unsupported),
                    ));
                }
                (Role::Client, Kind::HelloAck) if m.peer_session == self.session => {
                    self.check_compatible(&m)?;
                    self.mtu = Mtu::from_raw(m.mtu).unwrap_or(self.mtu).min(self.mtu);
                    self.peer_session = m.session;
                    self.peer_rdv_qpn = src_qp;
                    self.rdv_lid = Some(slid);
                    let peer = Endpoint {
                        lid: slid,
                        qpn: m.qpn,
                        psn: m.psn,
                        addr: m.addr,
                        rkey: m.rkey,
                    };
                    self.connect(dev, peer)?;
                    self.enter_sizes(env, out)?;
                    return Ok(());
                }
                _ => {}
            }
        }
        if self.cfg.role == Role::Client && now >= self.next_send_ns {
            self.hello_gap_ns = next_hello_gap(self.hello_gap_ns, self.cfg.wait_timeout_ns);
            self.next_send_ns = now + self.hello_gap_ns;
            let hello = self.msg(Kind::Hello, 0);
            match self.cfg.peer_lid {
                Some(lid) => self.send_rdv(dev, lid, &hello)?,
                None => {
                    let (a, b) = self.cfg.probe_lids;
                    let own = self.local.lid;
                    for lid in (a..=b).filter(|&l| l != own) {
                        self.send_rdv(dev, lid, &hello)?;
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) fn enter_sizes<E: BenchEnv, W: Write>(
        &mut self,
        env: &mut E,
        out: &mut W,
    ) -> Result<(), BenchError> {
        self.last_heard_ns = env.now_ns();
        self.print_banner(out)?;
        self.phase = Phase::SizeStart;
        Ok(())
    }

    pub(super) fn print_banner<W: Write>(&mut self, out: &mut W) -> Result<(), BenchError> {
        let c = &self.cfg;
        let line = report::RESULT_LINE;
        writeln!(out, "{line}")?;
        writeln!(out, "                    {}", c.test.title())?;
        writeln!(out, " Dual-port       : OFF\t\tDevice         : ibkern0")?;
        writeln!(out, " Number of qps   : 1\t\tTransport type : IB")?;
        writeln!(
            out,
            " Connection type : {}\t\tUsing SRQ      : OFF",
            c.transport.name()
        )?;
        writeln!(
            out,
            " ibv_wr* API     : OFF\t\tUsing Enhanced Reorder      : OFF"
        )?;
        match (c.role, c.test.is_bw()) {
            (Role::Client, false) => writeln!(out, " TX depth        : 1")?,
            (Role::Server, false) => writeln!(out, " RX depth        : {}", c.rx_depth())?,
            (Role::Client, true) => {
                let n = c.iterations;
                writeln!(out, " TX depth        : {}", c.bw.tx_depth_for(n))?;
                writeln!(out, " CQ Moderation   : {}", c.bw.cq_mod_for(n))?;
                writeln!(out, " Post List       : {}", c.bw.post_list)?;
            }
            (Role::Server, true) => writeln!(out, " RX depth        : {}", c.bw_rx_depth())?,
        }
        writeln!(out, " Mtu             : {}[B]", self.mtu.bytes())?;
        writeln!(out, " Link type       : IB")?;
        writeln!(out, " Max inline data : {}[B]", self.inline_max)?;
        writeln!(out, " rdma_cm QPs\t : OFF")?;
        writeln!(
            out,
            " Data ex. method : in-band UD (QPN {:#06x})",
            self.rdv_qpn
        )?;
        writeln!(out, " Completion      : {}", c.completion.name())?;
        writeln!(out, "{line}")?;
        let p = self.peer.unwrap_or_default();
        writeln!(
            out,
            " local address: LID {:#04x} QPN {:#06x} PSN {:#06x}",
            self.local.lid, self.local.qpn, self.local.psn
        )?;
        writeln!(
            out,
            " remote address: LID {:#04x} QPN {:#06x} PSN {:#06x}",
            p.lid, p.qpn, p.psn
        )?;
        Ok(())
    }

    /// Answers rendezvous traffic that can arrive at any time after the exchange: repeated
    /// Hellos (our answer was lost), barriers and the final Done. Returns a barrier index or
    /// Done seen from the client (server), or the barrier answer (client).
    pub(super) fn service_rdv<E: BenchEnv>(
        &mut self,
        dev: &mut D,
        env: &mut E,
    ) -> Result<Option<(Kind, u32, u8)>, BenchError> {
        let mut got = [(self.msg(Kind::Hello, 0), 0u16, 0u32); 8];
        let n = self.poll_rdv(dev, &mut got)?;
        let mut event: Option<(Kind, u32, u8)> = None;
        for &(m, slid, _) in &got[..n] {
            if m.session != self.peer_session {
                // A following server whose sizes are all done hears its client's next run:
                // the client gave up waiting for the DoneAck (every Done was lost) and moved
                // on. That Hello is repeated for the listener that comes next.
                if self.follow.is_some()
                    && self.phase == Phase::Finish
                    && m.kind == Kind::Hello
                    && self.peer.is_some_and(|p| p.lid == slid)
                {
                    self.client_moved_on = true;
                }
                continue;
            }
            self.last_heard_ns = env.now_ns();
            let keep = match (self.cfg.role, m.kind) {
                (Role::Server, Kind::Hello) => {
                    if let Some(lid) = self.rdv_lid {
                        let ack = self.msg(Kind::HelloAck, 0);
                        self.send_rdv(dev, lid, &ack)?;
                    }
                    false
                }
                // Done wins over barriers; of barriers, the newest.
                (Role::Server, Kind::Done) => true,
                (Role::Server, Kind::Barrier) => match event {
                    Some((Kind::Done, _, _)) => false,
                    Some((_, i, _)) => m.index > i,
                    None => true,
                },
                (Role::Client, Kind::BarrierAck) => {
                    self.anatomy_peer(m.turnaround);
                    m.index == self.index
                }
                (Role::Client, Kind::DoneAck) => {
                    self.anatomy_peer(m.turnaround);
                    true
                }
                (Role::Server, Kind::Count) => {
                    self.bw_on_count(dev, env, m.index, m.addr)?;
                    false
                }
                (Role::Client, Kind::CountAck) => {
                    if m.index == self.index && self.phase == Phase::Measure {
                        self.bw.ack = Some(m);
                    }
                    false
                }
                (Role::Client, Kind::Report) => {
                    if m.index == self.index && self.phase == Phase::Measure {
                        self.bw.report = m.report;
                    }
                    false
                }
                _ => false,
            };
            if keep {
                event = Some((m.kind, m.index, m.flags));
            }
        }
        Ok(event)
    }

    pub(super) fn rdv_reply(
        &mut self,
        dev: &mut D,
        kind: Kind,
        index: u32,
    ) -> Result<(), BenchError> {
        if let Some(lid) = self.rdv_lid {
            let m = self.msg(kind, index);
            self.send_rdv(dev, lid, &m)?;
        }
        Ok(())
    }

    /// Server: answers the client's Done, and stays in the final phase a little to answer
    /// it again should the answer be lost (the client repeats Done until answered).
    pub(super) fn answer_done(&mut self, dev: &mut D, now: u64) -> Result<(), BenchError> {
        self.rdv_reply(dev, Kind::DoneAck, 0)?;
        self.summary.clean_finish = true;
        self.answered_done = Some(now);
        self.phase = Phase::Finish;
        Ok(())
    }

    pub(super) fn finish<E: BenchEnv, W: Write>(
        &mut self,
        dev: &mut D,
        env: &mut E,
        out: &mut W,
    ) -> Result<(), BenchError> {
        let now = env.now_ns();
        let ev = self.service_rdv(dev, env)?;
        match self.cfg.role {
            Role::Client => {
                if matches!(ev, Some((Kind::DoneAck, _, _))) {
                    self.summary.clean_finish = true;
                    self.phase = Phase::Done;
                    return self.print_anatomy(out);
                }
                if now >= self.next_send_ns {
                    // A server still waiting in an aborted last size looks at the rendezvous
                    // QP once its wait runs out: keep asking for at least two of its
                    // longest waits.
                    let longest = self.cfg.wait_timeout_ns + u64::from(self.size) * 20;
                    let asked = now.saturating_sub(self.done_from);
                    if self.tries >= DONE_TRIES && asked >= 2 * longest {
                        self.phase = Phase::Done;
                        return self.print_anatomy(out);
                    }
                    self.tries += 1;
                    self.next_send_ns = now + self.rdv_gap();
                    self.rdv_reply(dev, Kind::Done, 0)?;
                }
            }
            Role::Server => {
                if self.linger(dev)? {
                    self.last_heard_ns = now;
                }
                if let Some((Kind::Barrier, i, _)) = ev {
                    self.reack_passive(dev, i)?;
                }
                if matches!(ev, Some((Kind::Done, _, _))) {
                    return self.answer_done(dev, now);
                }
                if let Some(since) = self.answered_done {
                    // Answering a repeated Done until the client has been quiet for three of
                    // its gaps (its DoneAck may have been lost), or has moved on.
                    if self.client_moved_on || now.saturating_sub(since) > 3 * self.rdv_gap() {
                        self.phase = Phase::Done;
                    }
                    return Ok(());
                }
                if self.client_moved_on {
                    // Every size was reported; only the final handshake is missing.
                    self.phase = Phase::Done;
                    return Ok(());
                }
                if now.saturating_sub(self.last_heard_ns) > self.silence_bound() {
                    return Err(BenchError::PeerLost);
                }
            }
        }
        Ok(())
    }
}
