//! The SRQ ping-pong between two nodes (`test=srq_pingpong`): the exchange of the QPs'
//! addresses that replaces the example's TCP socket, the runs (one per `cq_moderation`
//! setting, `repeat` times over), and the output: the example's address lines and figures
//! plus one `ibkern-srq-result` line per run (docs/benchmarks.md, "SRQ ping-pong").
//!
//! The exchange uses the rendezvous QP's well-known QPN and Q_Key (docs/rendezvous.md) with
//! messages of its own version, [`VERSION_SRQ`], which the ping-pong's decoder ignores. A
//! client offers a run: its settings and its QPs' numbers, seven per message, every
//! message repeated every 10 ms until the server accepts with its own QPs' numbers. The
//! server sets the run up from the offer, connects its QPs to the client's, and only then
//! answers (so the client's first sends find it ready); it answers a repeated offer again
//! until the run's first message arrives. Nothing else is exchanged: each side ends when it
//! has sent and received `iters` messages, as the example does.

use alloc::vec::Vec;
use core::fmt::Write;
use core::ptr;

use verbs::{
    AccessFlags, AhAttr, CqModeration, Device, DmaRegion, Payload, QpAttr, QpCap, QpInitAttr,
    QpState, QpType, RecvWr, SendFlags, SendWr, Sge, UdDest, WcOpcode, WcStatus, WorkCompletion,
    WrOpcode,
};

use super::{SrqConfig, SrqEndpoint, SrqPingPong, SrqStatus, SrqSummary};
use crate::config::{Completion, PingPongConfig, Sizes, RDV_QKEY};
use crate::env::BenchEnv;
use crate::pingpong::BenchError;
use crate::rendezvous::MAGIC;

/// The version byte of the SRQ exchange's messages.
pub const VERSION_SRQ: u8 = 16;
/// The prefix of the SRQ ping-pong's result line.
pub const PREFIX: &str = "ibkern-srq-result ";
const MSG_LEN: usize = 64;
/// QP numbers carried per message.
const QPNS_PER_MSG: usize = 7;
const SLOTS: u32 = 32;
const SLOT: usize = 128;
const GRH: usize = 40;
/// Sends the exchange QP may have outstanding.
const SQ: u32 = 128;
const SEND_WRID: u64 = 1 << 63;
/// How often a client repeats its offer (and a server its answer to a repeated offer).
const RESEND_NS: u64 = 10_000_000;
/// Event mode: longest one sleep lasts before polling anyway (above the longest cq_period,
/// 65.535 ms, so a period always fires first).
const EVENT_FALLBACK_NS: u64 = 100_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Offer = 1,
    Accept = 2,
}

/// One message of the exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Msg {
    kind: Kind,
    chunk: u8,
    chunks: u8,
    /// The client's session (random per run, never 0).
    session: u32,
    lid: u16,
    qps: u8,
    events: bool,
    moderation: Option<CqModeration>,
    size: u32,
    rx_depth: u32,
    iters: u32,
    run: u16,
    runs: u16,
    qpns: [u32; QPNS_PER_MSG],
}

impl Msg {
    fn encode(&self) -> [u8; MSG_LEN] {
        let mut b = [0u8; MSG_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_be_bytes());
        b[4] = VERSION_SRQ;
        b[5] = self.kind as u8;
        b[6] = self.chunk;
        b[7] = self.chunks;
        b[8..12].copy_from_slice(&self.session.to_be_bytes());
        b[12..14].copy_from_slice(&self.lid.to_be_bytes());
        b[14] = self.qps;
        b[15] = u8::from(self.events) | (u8::from(self.moderation.is_some()) << 1);
        b[16..20].copy_from_slice(&self.size.to_be_bytes());
        b[20..24].copy_from_slice(&self.rx_depth.to_be_bytes());
        b[24..28].copy_from_slice(&self.iters.to_be_bytes());
        let m = self.moderation.unwrap_or_default();
        b[28..30].copy_from_slice(&m.cq_count.to_be_bytes());
        b[30..32].copy_from_slice(&m.cq_period.to_be_bytes());
        b[32..34].copy_from_slice(&self.run.to_be_bytes());
        b[34..36].copy_from_slice(&self.runs.to_be_bytes());
        for (i, q) in self.qpns.iter().enumerate() {
            b[36 + 4 * i..40 + 4 * i].copy_from_slice(&(q & 0xFF_FFFF).to_be_bytes());
        }
        b
    }

    /// `None` for anything that is not a well-formed message of this exchange.
    fn decode(b: &[u8]) -> Option<Msg> {
        if b.len() < MSG_LEN || b[0..4] != MAGIC.to_be_bytes() || b[4] != VERSION_SRQ {
            return None;
        }
        let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let kind = match b[5] {
            1 => Kind::Offer,
            2 => Kind::Accept,
            _ => return None,
        };
        let (chunk, chunks, qps) = (b[6], b[7], b[14]);
        if qps == 0
            || u32::from(qps) > crate::config::SRQ_MAX_QPS
            || chunks as usize != (qps as usize).div_ceil(QPNS_PER_MSG)
            || chunk >= chunks
            || u32_at(8) == 0
        {
            return None;
        }
        let mut qpns = [0u32; QPNS_PER_MSG];
        for (i, q) in qpns.iter_mut().enumerate() {
            *q = u32_at(36 + 4 * i);
        }
        Some(Msg {
            kind,
            chunk,
            chunks,
            session: u32_at(8),
            lid: u16_at(12),
            qps,
            events: b[15] & 1 != 0,
            moderation: (b[15] & 2 != 0).then(|| CqModeration {
                cq_count: u16_at(28),
                cq_period: u16_at(30),
            }),
            size: u32_at(16),
            rx_depth: u32_at(20),
            iters: u32_at(24),
            run: u16_at(32),
            runs: u16_at(34),
            qpns,
        })
    }
}

fn vb(during: &'static str) -> impl FnOnce(verbs::Error) -> BenchError {
    move |err| BenchError::Verbs { during, err }
}

/// The UD QP of the exchange at the rendezvous QPN, with its receive slots.
struct Channel<D: Device> {
    buf: Option<DmaRegion>,
    pd: Option<D::Pd>,
    mr: Option<D::Mr>,
    cq: Option<D::Cq>,
    qp: Option<D::Qp>,
    ahs: Vec<(u16, D::Ah)>,
    lkey: u32,
    port: u8,
    inflight: u32,
}

impl<D: Device> Channel<D> {
    fn open<E: BenchEnv>(dev: &mut D, env: &mut E, port: u8, qpn: u32) -> Result<Self, BenchError> {
        let mut ch = Channel {
            buf: None,
            pd: None,
            mr: None,
            cq: None,
            qp: None,
            ahs: Vec::new(),
            lkey: 0,
            port,
            inflight: 0,
        };
        if let Err(e) = ch.build(dev, env, qpn) {
            ch.close(dev, env);
            return Err(e);
        }
        Ok(ch)
    }

    fn build<E: BenchEnv>(&mut self, dev: &mut D, env: &mut E, qpn: u32) -> Result<(), BenchError> {
        let total = SLOTS as usize * SLOT;
        let buf = env
            .alloc_dma(total, 4096)
            .ok_or(BenchError::NoMemory("srq exchange buffer"))?;
        let bus = buf.bus();
        self.buf = Some(buf);
        let pd = dev.alloc_pd().map_err(vb("alloc_pd"))?;
        self.pd = Some(pd);
        let mr = dev
            .reg_mr(pd, bus, total as u64, AccessFlags::LOCAL_WRITE)
            .map_err(vb("reg_mr"))?;
        self.mr = Some(mr);
        self.lkey = dev.mr_lkey(mr);
        let cq = dev
            .create_cq(SLOTS + SQ + 1)
            .map_err(vb("create_cq (srq exchange)"))?;
        self.cq = Some(cq);
        let qp = dev
            .create_qp_at(
                &QpInitAttr {
                    pd,
                    send_cq: cq,
                    recv_cq: cq,
                    qp_type: QpType::Ud,
                    cap: QpCap {
                        max_send_wr: SQ,
                        max_recv_wr: SLOTS,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: MSG_LEN as u32,
                    },
                    sq_sig_all: false,
                },
                qpn,
            )
            .map_err(vb("create the exchange QP at the rendezvous QPN"))?;
        self.qp = Some(qp);
        let mut init = QpAttr::new(QpState::Init);
        init.port_num = self.port;
        init.qkey = RDV_QKEY;
        dev.modify_qp(qp, &init)
            .map_err(vb("exchange QP to INIT"))?;
        dev.modify_qp(qp, &QpAttr::new(QpState::Rtr))
            .map_err(vb("exchange QP to RTR"))?;
        let mut rts = QpAttr::new(QpState::Rts);
        rts.sq_psn = 0;
        dev.modify_qp(qp, &rts).map_err(vb("exchange QP to RTS"))?;
        for slot in 0..SLOTS {
            self.post_recv(dev, slot)?;
        }
        Ok(())
    }

    fn post_recv(&mut self, dev: &mut D, slot: u32) -> Result<(), BenchError> {
        let (Some(qp), Some(buf)) = (self.qp, self.buf.as_ref()) else {
            return Ok(());
        };
        let sge = [Sge {
            addr: buf.bus_at(slot as usize * SLOT),
            length: (GRH + MSG_LEN) as u32,
            lkey: self.lkey,
        }];
        dev.post_recv(
            qp,
            &RecvWr {
                wr_id: u64::from(slot),
                sg_list: &sge,
            },
        )
        .map_err(vb("post exchange receive"))
    }

    fn ah(&mut self, dev: &mut D, lid: u16) -> Result<D::Ah, BenchError> {
        if let Some(&(_, ah)) = self.ahs.iter().find(|(l, _)| *l == lid) {
            return Ok(ah);
        }
        let pd = self.pd.ok_or(BenchError::NoMemory("protection domain"))?;
        let ah = dev
            .create_ah(
                pd,
                &AhAttr {
                    dlid: lid,
                    port: self.port,
                    ..AhAttr::default()
                },
            )
            .map_err(vb("create_ah"))?;
        self.ahs.push((lid, ah));
        Ok(ah)
    }

    /// Sends `m` to `qpn` at `lid`; false when the send queue is full (try again later).
    fn send(&mut self, dev: &mut D, lid: u16, qpn: u32, m: &Msg) -> Result<bool, BenchError> {
        let Some(qp) = self.qp else {
            return Ok(false);
        };
        if self.inflight >= SQ - 1 {
            return Ok(false);
        }
        let ah = self.ah(dev, lid)?;
        let bytes = m.encode();
        let wr = SendWr {
            wr_id: SEND_WRID,
            opcode: WrOpcode::Send,
            payload: Payload::Inline(&bytes),
            flags: SendFlags::SIGNALED,
            ud: Some(UdDest {
                ah,
                remote_qpn: qpn,
                remote_qkey: RDV_QKEY,
            }),
        };
        match dev.post_send(qp, &wr) {
            Ok(()) => {
                self.inflight += 1;
                Ok(true)
            }
            Err(verbs::Error::QueueFull) => Ok(false),
            Err(err) => Err(BenchError::Verbs {
                during: "post exchange send",
                err,
            }),
        }
    }

    /// Takes every completion waiting; the messages of this exchange received, each with
    /// the sender's LID and QPN, go to `got`.
    fn poll(&mut self, dev: &mut D, got: &mut Vec<(Msg, u16, u32)>) -> Result<(), BenchError> {
        let Some(cq) = self.cq else {
            return Ok(());
        };
        loop {
            let mut wc = [WorkCompletion::default(); 8];
            let n = dev.poll_cq(cq, &mut wc).map_err(vb("poll exchange CQ"))?;
            if n == 0 {
                return Ok(());
            }
            for w in &wc[..n] {
                if w.wr_id & SEND_WRID != 0 {
                    self.inflight = self.inflight.saturating_sub(1);
                    continue;
                }
                let slot = (w.wr_id as u32).min(SLOTS - 1);
                if w.status == WcStatus::Success && w.opcode == WcOpcode::Recv {
                    let mut b = [0u8; MSG_LEN];
                    if let Some(buf) = self.buf.as_ref() {
                        let at = slot as usize * SLOT + GRH;
                        for (i, x) in b.iter_mut().enumerate() {
                            // SAFETY: `at + i` < SLOTS * SLOT, inside the region this channel
                            // owns; this slot's receive completed and is posted again only
                            // below, so the device is not writing it (volatile all the same).
                            *x = unsafe { ptr::read_volatile(buf.as_ptr().add(at + i)) };
                        }
                    }
                    if let Some(m) = Msg::decode(&b) {
                        got.push((m, w.slid, w.src_qp));
                    }
                } else if w.status == WcStatus::WrFlushErr {
                    return Err(BenchError::Completion {
                        during: "exchange receive",
                        status: w.status,
                    });
                }
                self.post_recv(dev, slot)?;
            }
        }
    }

    /// Waits (bounded) for the sends in flight, then releases everything.
    fn close<E: BenchEnv>(&mut self, dev: &mut D, env: &mut E) {
        let start = env.now_ns();
        let mut sink = Vec::new();
        while self.inflight > 0 && env.now_ns().saturating_sub(start) < 10_000_000 {
            sink.clear();
            if self.poll(dev, &mut sink).is_err() {
                break;
            }
            env.relax();
        }
        if let Some(qp) = self.qp.take() {
            let _ = dev.destroy_qp(qp);
        }
        for (_, ah) in self.ahs.drain(..) {
            let _ = dev.destroy_ah(ah);
        }
        if let Some(cq) = self.cq.take() {
            let _ = dev.destroy_cq(cq);
        }
        if let Some(mr) = self.mr.take() {
            let _ = dev.dereg_mr(mr);
        }
        if let Some(pd) = self.pd.take() {
            let _ = dev.dealloc_pd(pd);
        }
        self.buf = None;
    }
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
            chunks: (self.qps as usize).div_ceil(QPNS_PER_MSG) as u8,
            session,
            lid,
            qps: self.qps as u8,
            events: self.events,
            moderation: self.moderation,
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
            moderation: m.moderation,
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
    let m = spec.moderation;
    write!(
        out,
        "{PREFIX}{{\"test\":\"srq_pingpong\",\"role\":\"{}\",\"run\":{},\"runs\":{},\"qps\":{},\"rx_depth\":{},\"bytes\":{},\"iterations\":{},\"completion\":\"{}\"",
        if client { "client" } else { "server" },
        spec.run,
        spec.runs,
        spec.qps,
        spec.rx_depth,
        spec.size,
        spec.iters,
        if spec.events { "event" } else { "poll" },
    )?;
    match m {
        Some(m) => write!(
            out,
            ",\"cq_count\":{},\"cq_period_us\":{}",
            m.cq_count, m.cq_period
        )?,
        None => write!(out, ",\"cq_count\":null,\"cq_period_us\":null")?,
    }
    write!(
        out,
        ",\"elapsed_us\":{:.3},\"mbit_per_sec\":{:.2},\"usec_per_iter\":{:.3}",
        s.elapsed_ns as f64 / 1000.0,
        s.mbit_per_sec(),
        s.usec_per_iter()
    )?;
    match s.rtt {
        Some(r) => write!(
            out,
            ",\"rtt_samples\":{},\"rtt_typical_us\":{:.3},\"rtt_avg_us\":{:.3}",
            r.samples, r.typical_us, r.avg_us
        )?,
        None => write!(
            out,
            ",\"rtt_samples\":0,\"rtt_typical_us\":null,\"rtt_avg_us\":null"
        )?,
    }
    writeln!(
        out,
        ",\"cq_events\":{},\"fallbacks\":{},\"interrupts\":{},\"interrupts_per_message\":{:.4},\"refills\":{},\"tsc_mhz\":{:.3}}}",
        s.events,
        s.fallbacks,
        interrupts,
        interrupts as f64 / f64::from(s.iters.max(1)),
        s.refills,
        tsc_mhz
    )
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
                        if !ch.send(dev, t, target_qpn, &m)? {
                            break 'round;
                        }
                    }
                    next_target = next_target.wrapping_add(1);
                }
                next_send = now + RESEND_NS;
            }
            got.clear();
            ch.poll(dev, &mut got)?;
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
            if let Err(e) = ch.poll(dev, &mut got) {
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
                ch.send(dev, slid, src_qp, &m)?;
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
                ch.poll(dev, &mut got)?;
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
    fn messages_round_trip_and_foreign_ones_are_ignored() {
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
        // Not this exchange: another version, a bad chunk count, session 0, 65 QPs.
        let mut b = all[0].encode();
        b[4] = 3;
        assert_eq!(Msg::decode(&b), None);
        let mut b = all[0].encode();
        b[7] = 2;
        assert_eq!(Msg::decode(&b), None);
        let mut b = all[0].encode();
        b[8..12].copy_from_slice(&[0; 4]);
        assert_eq!(Msg::decode(&b), None);
        let mut b = all[0].encode();
        b[14] = 65;
        b[7] = 10;
        assert_eq!(Msg::decode(&b), None);
        assert_eq!(Msg::decode(&b[..40]), None);
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
