//! The in-band rendezvous messages (docs/rendezvous.md): fixed 64-byte datagrams sent to the
//! well-known rendezvous QP, all fields big-endian.
//!
//! Version 1 is send_lat: bytes 40..64 are zero. Version 2 carries the test and, for the
//! RDMA tests, the remote address and rkey of the sender's data buffer in bytes 40..64. A
//! send_lat message is still encoded as version 1, byte for byte as before, so send_lat
//! nodes of either version interoperate; a version-1-only node ignores version-2 messages.
//! Version 3 is a run of a plan: on top of version 2 it carries the completion mode, the
//! inline limit and the run's place in the plan, which a server follows; a server's refusal
//! ([`Kind::Refuse`]) is version 3 too. A client that runs no plan (one run from its keys,
//! `repeat=1`) still sends version 1 or 2. Version 4 is read_lat and atomic_lat (with or
//! without a plan): version 3's layout with test codes 3 (read), 4 (fetch-and-add) and 5
//! (compare-and-swap), and the client's outstanding READs/atomics in byte 24, the unused top
//! byte of the PSN word. Version 5 is a run with the latency anatomy (`anatomy=on`), any
//! test: version 4's layout (test codes 1..=5, outstanding READs/atomics in byte 24), flag
//! bit 1 set in every message, and in the server's BarrierAck and DoneAck its own turnaround
//! of the last size it measured ([`Turnaround`], bytes 44..56). A run without the anatomy
//! sends exactly what it sent before.
//! Version 6 is the bandwidth tests: version 4's layout with test codes 6 (send_bw), 7
//! (write_bw), 8 (read_bw), 9 and 10 (atomic_bw fetch-and-add, compare-and-swap); its Hello
//! carries the bandwidth flags (tx depth and CQ moderation in the index field, post list and
//! duration in the peer-session field a Hello leaves empty, the switches in the flags byte),
//! and two more kinds close each size: the client's [`Kind::Count`] (messages sent) and the
//! server's [`Kind::CountAck`] (messages and bytes received), so the client's result line
//! reports exact loss.

use core::fmt;

use crate::config::{AtomicOp, BwKeys, Completion, Role, Rule, Sizes, Test, Transport};

/// "IBKR".
pub const MAGIC: u32 = 0x4942_4B52;
/// Version of send_lat messages (bytes 40..64 zero).
pub const VERSION: u8 = 1;
/// Version of messages that carry the test, remote address and rkey (write_lat).
pub const VERSION_RDMA: u8 = 2;
/// Version of messages of a run of a plan (completion, inline limit, place in the plan) and
/// of refusals.
pub const VERSION_PLAN: u8 = 3;
/// Version of messages of read_lat and atomic_lat: version 3's layout, test codes 3..=5
/// (read, fetch-and-add, compare-and-swap) and the outstanding READs/atomics in byte 24.
pub const VERSION_ONE_SIDED: u8 = 4;
/// Version of every message of a run with the latency anatomy: version 4's layout for every
/// test, [`FLAG_ANATOMY`] set, and the server's [`Turnaround`] in its BarrierAck and DoneAck.
pub const VERSION_ANATOMY: u8 = 5;
/// Version of messages of the bandwidth tests: version 4's layout, test codes 6..=10, the
/// bandwidth flags in the Hello, and the Count / CountAck closing each size.
pub const VERSION_BW: u8 = 6;
/// Bytes of one message.
pub const MSG_LEN: usize = 64;

pub use ibconfig::bench::well_known_rdv_qpn as well_known_qpn;

/// What a message says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Client → any LID: "here are my data QP and parameters".
    Hello = 1,
    /// Server → client: "and here are mine" (echoes the client's session).
    HelloAck = 2,
    /// Client → server: "my receives for size `index` are posted; are yours?"
    Barrier = 3,
    /// Server → client: "mine are posted too, start size `index`".
    BarrierAck = 4,
    /// Client → server: "the sweep is over".
    Done = 5,
    /// Server → client.
    DoneAck = 6,
    /// Server → client: "I cannot run what your Hello asks" ([`Refusal`]; version 3).
    Refuse = 7,
    /// Client → server (bandwidth tests, version 6): "size `index` is sent: `addr` messages".
    Count = 8,
    /// Server → client: "of size `index` I received `rkey` messages, `addr` payload bytes"
    /// ([`FLAG_COUNTED`] set; a passive server, which counts nothing, leaves it clear).
    CountAck = 9,
    /// Server → client, with the CountAck of a bidirectional (`-b`) bandwidth run: the
    /// server's own figures for size `index` and the messages it sent ([`BwFigures`];
    /// version 6, a layout of its own).
    Report = 10,
}

impl Kind {
    /// The server's answers that carry its turnaround in version 5.
    pub fn carries_turnaround(self) -> bool {
        matches!(self, Kind::BarrierAck | Kind::DoneAck)
    }

    fn from_raw(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Hello,
            2 => Kind::HelloAck,
            3 => Kind::Barrier,
            4 => Kind::BarrierAck,
            5 => Kind::Done,
            6 => Kind::DoneAck,
            7 => Kind::Refuse,
            8 => Kind::Count,
            9 => Kind::CountAck,
            10 => Kind::Report,
            _ => return None,
        })
    }
}

/// One decoded rendezvous message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Msg {
    pub kind: Kind,
    pub role: Role,
    pub transport: Transport,
    /// The sender's per-boot nonce.
    pub session: u32,
    /// The receiver's nonce being answered (0 in a Hello).
    pub peer_session: u32,
    pub lid: u16,
    /// IB MTU enum value of the sender's path MTU (the Ack carries the agreed one).
    pub mtu: u8,
    pub qpn: u32,
    pub psn: u32,
    pub iterations: u32,
    /// 0 for `-a`, else the single size.
    pub size: u32,
    /// Barrier: the size index about to run.
    pub index: u32,
    /// Barrier / BarrierAck: [`FLAG_RESET`] when the sender reset its data QP for this size.
    pub flags: u8,
    /// Which test the sender runs (version 1 messages are always send_lat).
    pub test: Test,
    /// write_lat: the bus address the peer writes to (the sender's receive region); 0 in
    /// send_lat.
    pub addr: u64,
    /// write_lat: the rkey of that region; 0 in send_lat.
    pub rkey: u32,
    /// Version 3: the run of a plan this message belongs to (`None` in versions 1 and 2).
    pub plan: Option<PlanRun>,
    /// Version 4, atomic_lat: the operation (fetch-and-add in every other test).
    pub atomic: AtomicOp,
    /// Version 4: the READs/atomics the client may have outstanding (`-o`), which the
    /// server's QP must accept (`max_dest_rd_atomic`); 1 in every other test.
    pub out_reads: u8,
    /// Version 5: the run measures the latency anatomy (the client asks, the server echoes;
    /// flag bit 1).
    pub anatomy: bool,
    /// Version 5 BarrierAck / DoneAck: the server's turnaround of the last size it measured.
    pub turnaround: Option<Turnaround>,
    /// Version 6 Hello: the client's bandwidth flags (the defaults in every other message).
    pub bw: BwKeys,
    /// Version 6 Report: the sender's figures (`None` in every other message).
    pub report: Option<BwFigures>,
}

/// A side's own result of one bandwidth size in a bidirectional run (perftest exchanges its
/// BW report so that a side's row adds the peer's figures to its own): the messages it sent
/// and its BW peak, BW average (in the run's unit) and MsgRate (Mpps), carried as IEEE
/// doubles so the sum is exact.
#[derive(Clone, Copy, Debug, Default)]
pub struct BwFigures {
    pub sent: u64,
    pub bw_peak: f64,
    pub bw_avg: f64,
    pub msg_rate_mpps: f64,
}

impl PartialEq for BwFigures {
    fn eq(&self, o: &Self) -> bool {
        self.sent == o.sent
            && self.bw_peak.to_bits() == o.bw_peak.to_bits()
            && self.bw_avg.to_bits() == o.bw_avg.to_bits()
            && self.msg_rate_mpps.to_bits() == o.msg_rate_mpps.to_bits()
    }
}

impl Eq for BwFigures {}

/// A server's own turnaround over one size (version 5): from seeing a request (a receive
/// completion, or the written byte) to the reply's post returning, median and average over
/// the size's iterations, in tenths of a nanosecond (the nodes' TSCs differ; time does not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Turnaround {
    /// The size index it belongs to.
    pub index: u32,
    pub median_dns: u32,
    pub average_dns: u32,
}

impl Turnaround {
    /// From nanoseconds (saturating at 429 s).
    pub fn from_ns(index: u32, median_ns: f64, average_ns: f64) -> Turnaround {
        // `as` saturates (and takes NaN to 0); + 0.5 rounds the non-negative values.
        let dns = |ns: f64| (ns * 10.0 + 0.5).max(0.0) as u32;
        Turnaround {
            index,
            median_dns: dns(median_ns),
            average_dns: dns(average_ns),
        }
    }
    pub fn median_us(&self) -> f64 {
        f64::from(self.median_dns) / 10_000.0
    }
    pub fn average_us(&self) -> f64 {
        f64::from(self.average_dns) / 10_000.0
    }
}

/// What a version-3 message adds: the parameters a following server takes from the client
/// beyond version 2's, and where the run sits in the client's plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanRun {
    pub completion: Completion,
    /// The client's inline limit in force (bytes).
    pub inline: u16,
    /// 1-based run number and the plan's number of runs.
    pub run: u16,
    pub runs: u16,
    /// 1-based pass (`repeat`) and the number of passes.
    pub pass: u16,
    pub passes: u16,
}

impl PlanRun {
    /// The last run of the last pass: the client's plan ends with it.
    pub fn is_last(&self) -> bool {
        self.run >= self.runs && self.pass >= self.passes
    }
}

/// Why a server refused a client's run, as sent in a [`Kind::Refuse`] message: a code in
/// the index field and up to two numbers (bytes 44..48 and 48..56). Both sides print it
/// with the same words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Code 1: a UD message larger than the server's path MTU.
    UdSizeAboveMtu { size: u32, mtu: u32 },
    /// Code 2: an inline limit above what the server's device carries.
    InlineAboveDevice { inline: u32, limit: u32 },
    /// Code 3: completion events asked of a server that takes no interrupts.
    EventsWithoutInterrupts,
    /// Code 4: the server could not allocate the run's buffers (`bytes`, 0 if unknown).
    NoMemory { bytes: u32 },
    /// Code 5: a combination the server does not run (a ping-pong rule: test and transport,
    /// iteration or size range).
    Unsupported,
    /// Code 6: setting up the run's QPs failed on the server.
    SetupFailed,
    /// Code 7: isr mode asked of a server that cannot run a completion handler in its
    /// interrupt path (not on MSI-X).
    IsrUnavailable,
}

impl Refusal {
    /// The refusal for a rule the client's run breaks on the server.
    pub fn from_rule(r: Rule) -> Refusal {
        match r {
            Rule::UdSizeAboveMtu { size, mtu } => Refusal::UdSizeAboveMtu { size, mtu },
            Rule::InlineAboveDevice { inline, limit } => {
                Refusal::InlineAboveDevice { inline, limit }
            }
            Rule::EventsWithoutInterrupts => Refusal::EventsWithoutInterrupts,
            Rule::IsrNeedsMsix => Refusal::IsrUnavailable,
            _ => Refusal::Unsupported,
        }
    }

    /// Code and the two numbers.
    pub fn fields(&self) -> (u32, u32, u32) {
        match *self {
            Refusal::UdSizeAboveMtu { size, mtu } => (1, size, mtu),
            Refusal::InlineAboveDevice { inline, limit } => (2, inline, limit),
            Refusal::EventsWithoutInterrupts => (3, 0, 0),
            Refusal::NoMemory { bytes } => (4, bytes, 0),
            Refusal::Unsupported => (5, 0, 0),
            Refusal::SetupFailed => (6, 0, 0),
            Refusal::IsrUnavailable => (7, 0, 0),
        }
    }

    pub fn from_fields(code: u32, a: u32, b: u32) -> Option<Refusal> {
        Some(match code {
            1 => Refusal::UdSizeAboveMtu { size: a, mtu: b },
            2 => Refusal::InlineAboveDevice {
                inline: a,
                limit: b,
            },
            3 => Refusal::EventsWithoutInterrupts,
            4 => Refusal::NoMemory { bytes: a },
            5 => Refusal::Unsupported,
            6 => Refusal::SetupFailed,
            7 => Refusal::IsrUnavailable,
            _ => return None,
        })
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Refusal::UdSizeAboveMtu { size, mtu } => write!(
                f,
                "UD message of {size} bytes is larger than the server's path MTU {mtu}"
            ),
            Refusal::InlineAboveDevice { inline, limit } => write!(
                f,
                "inline limit of {inline} bytes is more than the server's QP can carry ({limit})"
            ),
            Refusal::EventsWithoutInterrupts => write!(
                f,
                "completion events asked, and the server takes no interrupts (hca_irq=poll)"
            ),
            Refusal::NoMemory { bytes } => {
                write!(
                    f,
                    "the server has no memory for the run's buffers ({bytes} bytes)"
                )
            }
            Refusal::Unsupported => write!(f, "the server does not run this combination"),
            Refusal::SetupFailed => write!(f, "setting up the run's QPs failed on the server"),
            Refusal::IsrUnavailable => write!(
                f,
                "completion=isr asked, and the server cannot reply from its interrupt handler (its HCA is not on MSI-X)"
            ),
        }
    }
}

/// The sender reset its data QP (PSNs back to the exchanged ones, stale receives gone).
pub const FLAG_RESET: u8 = 1;
/// Version 5: the run measures the latency anatomy.
pub const FLAG_ANATOMY: u8 = 2;
/// Version 6 CountAck: the server counted what arrived (send_bw); clear from a passive
/// server.
pub const FLAG_COUNTED: u8 = 2;
/// Version 6 Hello flags: `-N`, `--report_gbits`, `-b`.
pub const FLAG_BW_NO_PEAK: u8 = 1;
pub const FLAG_BW_GBITS: u8 = 2;
pub const FLAG_BW_BIDIRECTIONAL: u8 = 4;

/// Why a datagram is not a rendezvous message of this version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    Short,
    Magic,
    Version(u8),
    Field(&'static str),
}

fn test_code(t: Test, a: AtomicOp) -> u8 {
    match (t, a) {
        (Test::SendLat, _) => 1,
        (Test::WriteLat, _) => 2,
        (Test::ReadLat, _) => 3,
        (Test::AtomicLat, AtomicOp::FetchAndAdd) => 4,
        (Test::AtomicLat, AtomicOp::CmpAndSwap) => 5,
        (Test::SendBw, _) => 6,
        (Test::WriteBw, _) => 7,
        (Test::ReadBw, _) => 8,
        (Test::AtomicBw, AtomicOp::FetchAndAdd) => 9,
        (Test::AtomicBw, AtomicOp::CmpAndSwap) => 10,
    }
}

fn put16(b: &mut [u8; MSG_LEN], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn put32(b: &mut [u8; MSG_LEN], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn get64(b: &[u8], at: usize) -> u64 {
    (u64::from(get32(b, at)) << 32) | u64::from(get32(b, at + 4))
}

impl Msg {
    /// The sizes field for a configuration.
    pub fn size_field(s: Sizes) -> u32 {
        match s {
            Sizes::All => 0,
            Sizes::Single(n) => n,
        }
    }

    pub fn encode(&self) -> [u8; MSG_LEN] {
        let mut b = [0u8; MSG_LEN];
        put32(&mut b, 0, MAGIC);
        b[4] = self.version();
        b[5] = self.kind as u8;
        b[6] = match self.role {
            Role::Client => 1,
            Role::Server => 2,
        };
        b[7] = match self.transport {
            Transport::Ud => 1,
            Transport::Uc => 2,
            Transport::Rc => 3,
        };
        put32(&mut b, 8, self.session);
        put32(&mut b, 12, self.peer_session);
        b[16..18].copy_from_slice(&self.lid.to_be_bytes());
        b[18] = self.mtu;
        b[19] = self.flags;
        if b[4] == VERSION_ANATOMY && self.anatomy {
            b[19] |= FLAG_ANATOMY;
        }
        put32(&mut b, 20, self.qpn & 0xFF_FFFF);
        put32(&mut b, 24, self.psn & 0xFF_FFFF);
        if b[4] >= VERSION_ONE_SIDED {
            b[24] = self.out_reads;
        }
        put32(&mut b, 28, self.iterations);
        put32(&mut b, 32, self.size);
        put32(&mut b, 36, self.index);
        if b[4] == VERSION_BW && self.kind == Kind::Hello {
            let w = &self.bw;
            b[19] = [
                (w.no_peak, FLAG_BW_NO_PEAK),
                (w.report_gbits, FLAG_BW_GBITS),
                (w.bidirectional, FLAG_BW_BIDIRECTIONAL),
            ]
            .into_iter()
            .filter(|(on, _)| *on)
            .fold(0, |acc, (_, bit)| acc | bit);
            put16(&mut b, 12, w.post_list.min(0xFFFF) as u16);
            put16(&mut b, 14, w.duration_s.unwrap_or(0).min(0xFFFF) as u16);
            put16(&mut b, 36, w.tx_depth.min(0xFFFF) as u16);
            put16(&mut b, 38, w.cq_mod.unwrap_or(0).min(0xFFFF) as u16);
        }
        if b[4] != VERSION {
            b[40] = test_code(self.test, self.atomic);
            put32(&mut b, 44, self.rkey);
            b[48..56].copy_from_slice(&self.addr.to_be_bytes());
        }
        if b[4] == VERSION_ANATOMY && self.kind.carries_turnaround() {
            // The server's region went out in its HelloAck: these bytes carry its turnaround.
            let t = self.turnaround;
            put32(&mut b, 44, t.map_or(0, |t| t.median_dns));
            put32(&mut b, 48, t.map_or(0, |t| t.average_dns));
            put32(&mut b, 52, t.map_or(0, |t| t.index.saturating_add(1)));
        }
        if let Some(p) = self.plan {
            b[41] = match p.completion {
                Completion::Poll => 1,
                Completion::Event => 2,
                Completion::Isr => 3,
            };
            b[42..44].copy_from_slice(&p.inline.to_be_bytes());
            for (at, v) in [(56, p.run), (58, p.runs), (60, p.pass), (62, p.passes)] {
                b[at..at + 2].copy_from_slice(&v.to_be_bytes());
            }
        }
        if b[4] == VERSION_BW && self.kind == Kind::Report {
            // Bytes 20..36 and 41..64 are the figures: a Report has no QPN, PSN, iterations,
            // sizes, region or plan fields.
            let r = self.report.unwrap_or_default();
            b[20..28].copy_from_slice(&r.sent.to_be_bytes());
            b[28..36].copy_from_slice(&r.bw_peak.to_bits().to_be_bytes());
            b[41..64].fill(0);
            b[44..52].copy_from_slice(&r.bw_avg.to_bits().to_be_bytes());
            b[52..60].copy_from_slice(&r.msg_rate_mpps.to_bits().to_be_bytes());
        }
        b
    }

    /// The lowest version that carries this message: 6 for the bandwidth tests, 5 with the
    /// anatomy, 4 for read_lat and atomic_lat, 3 for a run of a plan or a refusal, else 1 for
    /// send_lat and 2 for write_lat.
    pub fn version(&self) -> u8 {
        if self.test.is_bw() {
            VERSION_BW
        } else if self.anatomy || self.turnaround.is_some() {
            VERSION_ANATOMY
        } else if self.test.one_sided() {
            VERSION_ONE_SIDED
        } else if self.plan.is_some() || self.kind == Kind::Refuse {
            VERSION_PLAN
        } else if self.test == Test::SendLat {
            VERSION
        } else {
            VERSION_RDMA
        }
    }

    /// A refusal's reason (the code in `index`, the numbers in `rkey` and `addr`).
    pub fn refusal(&self) -> Option<Refusal> {
        if self.kind != Kind::Refuse {
            return None;
        }
        Refusal::from_fields(self.index, self.rkey, self.addr as u32)
    }

    pub fn decode(b: &[u8]) -> Result<Msg, DecodeError> {
        if b.len() < MSG_LEN {
            return Err(DecodeError::Short);
        }
        if get32(b, 0) != MAGIC {
            return Err(DecodeError::Magic);
        }
        let (test, atomic) = match (b[4], b[40]) {
            (VERSION, _) => (Test::SendLat, AtomicOp::FetchAndAdd),
            (VERSION_RDMA | VERSION_PLAN, 1) => (Test::SendLat, AtomicOp::FetchAndAdd),
            (VERSION_RDMA | VERSION_PLAN, 2) => (Test::WriteLat, AtomicOp::FetchAndAdd),
            (VERSION_ONE_SIDED, 3) => (Test::ReadLat, AtomicOp::FetchAndAdd),
            (VERSION_ONE_SIDED, 4) => (Test::AtomicLat, AtomicOp::FetchAndAdd),
            (VERSION_ONE_SIDED, 5) => (Test::AtomicLat, AtomicOp::CmpAndSwap),
            (VERSION_ANATOMY, 1) => (Test::SendLat, AtomicOp::FetchAndAdd),
            (VERSION_ANATOMY, 2) => (Test::WriteLat, AtomicOp::FetchAndAdd),
            (VERSION_ANATOMY, 3) => (Test::ReadLat, AtomicOp::FetchAndAdd),
            (VERSION_ANATOMY, 4) => (Test::AtomicLat, AtomicOp::FetchAndAdd),
            (VERSION_ANATOMY, 5) => (Test::AtomicLat, AtomicOp::CmpAndSwap),
            (VERSION_BW, 6) => (Test::SendBw, AtomicOp::FetchAndAdd),
            (VERSION_BW, 7) => (Test::WriteBw, AtomicOp::FetchAndAdd),
            (VERSION_BW, 8) => (Test::ReadBw, AtomicOp::FetchAndAdd),
            (VERSION_BW, 9) => (Test::AtomicBw, AtomicOp::FetchAndAdd),
            (VERSION_BW, 10) => (Test::AtomicBw, AtomicOp::CmpAndSwap),
            (VERSION..=VERSION_BW, _) => return Err(DecodeError::Field("test")),
            (v, _) => return Err(DecodeError::Version(v)),
        };
        if b[4] == VERSION_BW && b[5] == Kind::Report as u8 {
            return Msg::decode_report(b, test, atomic);
        }
        let out_reads = if b[4] >= VERSION_ONE_SIDED { b[24] } else { 1 };
        if out_reads == 0 || u32::from(out_reads) > crate::config::MAX_OUT_READS {
            return Err(DecodeError::Field("outstanding reads"));
        }
        let kind = Kind::from_raw(b[5]).ok_or(DecodeError::Field("kind"))?;
        let v5 = b[4] == VERSION_ANATOMY;
        let anatomy_ack = v5 && kind.carries_turnaround();
        // Version 1 leaves bytes 40..64 unused: no address or key is read from them; a
        // version-5 BarrierAck or DoneAck has its turnaround there instead.
        let (addr, rkey) = if b[4] != VERSION && !anatomy_ack {
            (get64(b, 48), get32(b, 44))
        } else {
            (0, 0)
        };
        let turnaround = match get32(b, 52) {
            n if anatomy_ack && n != 0 => Some(Turnaround {
                index: n - 1,
                median_dns: get32(b, 44),
                average_dns: get32(b, 48),
            }),
            _ => None,
        };
        let (flags, anatomy) = if v5 {
            (b[19] & !FLAG_ANATOMY, b[19] & FLAG_ANATOMY != 0)
        } else {
            (b[19], false)
        };
        let get16 = |at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
        let bw_hello = b[4] == VERSION_BW && kind == Kind::Hello;
        let bw = if bw_hello {
            let nonzero = |v: u16| (v != 0).then_some(u32::from(v));
            let keys = BwKeys {
                tx_depth: u32::from(get16(36)),
                post_list: u32::from(get16(12)),
                cq_mod: nonzero(get16(38)),
                duration_s: nonzero(get16(14)),
                no_peak: b[19] & FLAG_BW_NO_PEAK != 0,
                report_gbits: b[19] & FLAG_BW_GBITS != 0,
                bidirectional: b[19] & FLAG_BW_BIDIRECTIONAL != 0,
            };
            if keys.tx_depth == 0 || keys.post_list == 0 {
                return Err(DecodeError::Field("bandwidth flags"));
            }
            keys
        } else {
            BwKeys::default()
        };
        let plan = if b[4] >= VERSION_PLAN && get16(56) != 0 {
            let completion = match b[41] {
                1 => Completion::Poll,
                2 => Completion::Event,
                3 => Completion::Isr,
                _ => return Err(DecodeError::Field("completion")),
            };
            Some(PlanRun {
                completion,
                inline: get16(42),
                run: get16(56),
                runs: get16(58),
                pass: get16(60),
                passes: get16(62),
            })
        } else {
            None
        };
        let (role, transport) = decode_role_transport(b)?;
        Ok(Msg {
            kind,
            role,
            transport,
            session: get32(b, 8),
            peer_session: if bw_hello { 0 } else { get32(b, 12) },
            lid: u16::from_be_bytes([b[16], b[17]]),
            mtu: b[18],
            qpn: get32(b, 20) & 0xFF_FFFF,
            psn: get32(b, 24) & 0xFF_FFFF,
            iterations: get32(b, 28),
            size: get32(b, 32),
            index: if bw_hello { 0 } else { get32(b, 36) },
            flags: if bw_hello { 0 } else { flags },
            test,
            addr,
            rkey,
            plan,
            atomic,
            out_reads,
            anatomy,
            turnaround,
            bw,
            report: None,
        })
    }

    /// A version-6 Report ([`Kind::Report`]): the common header, the index and test, and
    /// the figures in place of the other fields.
    fn decode_report(b: &[u8], test: Test, atomic: AtomicOp) -> Result<Msg, DecodeError> {
        let (role, transport) = decode_role_transport(b)?;
        let f = |at: usize| f64::from_bits(get64(b, at));
        let report = BwFigures {
            sent: get64(b, 20),
            bw_peak: f(28),
            bw_avg: f(44),
            msg_rate_mpps: f(52),
        };
        if ![report.bw_peak, report.bw_avg, report.msg_rate_mpps]
            .iter()
            .all(|v| *v >= 0.0)
        {
            return Err(DecodeError::Field("report figures"));
        }
        Ok(Msg {
            kind: Kind::Report,
            role,
            transport,
            session: get32(b, 8),
            peer_session: get32(b, 12),
            lid: u16::from_be_bytes([b[16], b[17]]),
            mtu: b[18],
            qpn: 0,
            psn: 0,
            iterations: 0,
            size: 0,
            index: get32(b, 36),
            flags: b[19],
            test,
            addr: 0,
            rkey: 0,
            plan: None,
            atomic,
            out_reads: 1,
            anatomy: false,
            turnaround: None,
            bw: BwKeys::default(),
            report: Some(report),
        })
    }
}

fn decode_role_transport(b: &[u8]) -> Result<(Role, Transport), DecodeError> {
    let role = match b[6] {
        1 => Role::Client,
        2 => Role::Server,
        _ => return Err(DecodeError::Field("role")),
    };
    let transport = match b[7] {
        1 => Transport::Ud,
        2 => Transport::Uc,
        3 => Transport::Rc,
        _ => return Err(DecodeError::Field("transport")),
    };
    Ok((role, transport))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let m = Msg {
            kind: Kind::BarrierAck,
            role: Role::Server,
            transport: Transport::Uc,
            session: 0xDEAD_BEEF,
            peer_session: 0x1234_5678,
            lid: 0x0102,
            mtu: 4,
            qpn: 0x4A,
            psn: 0x5A_3B1C,
            iterations: 1000,
            size: 0,
            index: 7,
            flags: FLAG_RESET,
            test: Test::SendLat,
            addr: 0,
            rkey: 0,
            plan: None,
            atomic: AtomicOp::FetchAndAdd,
            out_reads: 1,
            anatomy: false,
            turnaround: None,
            report: None,
            bw: BwKeys::default(),
        };
        let b = m.encode();
        assert_eq!(&b[0..4], b"IBKR");
        assert_eq!(b[5], 4);
        assert_eq!(&b[20..24], &[0, 0, 0, 0x4A]);
        assert_eq!(Msg::decode(&b), Ok(m));
        assert_eq!(Msg::decode(&b[..63]), Err(DecodeError::Short));
        let mut bad = b;
        bad[0] = 0;
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Magic));
        let mut bad = b;
        bad[4] = 9;
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Version(9)));
        let mut bad = b;
        bad[5] = 0;
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Field("kind")));
        let mut bad = b;
        bad[7] = 4;
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Field("transport")));
        // QPN and PSN are 24-bit fields.
        let wide = Msg {
            qpn: 0xFF00_0001,
            psn: 0xFFFF_FFFF,
            ..m
        };
        let d = Msg::decode(&wide.encode()).unwrap();
        assert_eq!((d.qpn, d.psn), (1, 0xFF_FFFF));
    }

    #[test]
    fn send_lat_stays_version_1_and_write_lat_carries_address_and_rkey() {
        let m = Msg {
            kind: Kind::Hello,
            role: Role::Client,
            transport: Transport::Uc,
            session: 0x0102_0304,
            peer_session: 0,
            lid: 3,
            mtu: 4,
            qpn: 0x48,
            psn: 0x12_3456,
            iterations: 20,
            size: 64,
            index: 0,
            flags: 0,
            test: Test::SendLat,
            addr: 0,
            rkey: 0,
            plan: None,
            atomic: AtomicOp::FetchAndAdd,
            out_reads: 1,
            anatomy: false,
            turnaround: None,
            report: None,
            bw: BwKeys::default(),
        };
        let b = m.encode();
        assert_eq!(b[4], 1, "send_lat messages are version 1");
        assert!(b[40..].iter().all(|&x| x == 0), "bytes 40..64 stay zero");
        // A version-1 message with garbage in its tail still decodes (the tail is unused).
        let mut tail = b;
        tail[44..64].fill(0xEE);
        let d = Msg::decode(&tail).unwrap();
        assert_eq!((d.test, d.addr, d.rkey), (Test::SendLat, 0, 0));

        let w = Msg {
            transport: Transport::Rc,
            test: Test::WriteLat,
            addr: 0x0000_0012_3456_7000,
            rkey: 0xABCD_0042,
            ..m
        };
        let b = w.encode();
        assert_eq!(b[4], 2, "write_lat messages are version 2");
        assert_eq!(b[7], 3, "RC");
        assert_eq!(b[40], 2);
        assert_eq!(&b[44..48], &[0xAB, 0xCD, 0x00, 0x42]);
        assert_eq!(&b[48..56], &[0, 0, 0, 0x12, 0x34, 0x56, 0x70, 0]);
        assert!(b[56..].iter().all(|&x| x == 0));
        assert_eq!(Msg::decode(&b), Ok(w));
        let mut bad = b;
        bad[40] = 9;
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Field("test")));
        let mut bad = b;
        bad[4] = VERSION_BW + 1;
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Version(VERSION_BW + 1)));
        // Version 4 names the one-sided tests only.
        let mut bad = b;
        bad[4] = 4;
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Field("test")));
    }

    #[test]
    fn read_and_atomic_are_version_4_with_the_operation_and_outstanding_reads() {
        let m = Msg::decode(
            &Msg {
                kind: Kind::Hello,
                role: Role::Client,
                transport: Transport::Rc,
                session: 7,
                peer_session: 0,
                lid: 3,
                mtu: 4,
                qpn: 0x48,
                psn: 0xAB_CDEF,
                iterations: 1000,
                size: 0,
                index: 0,
                flags: 0,
                test: Test::ReadLat,
                addr: 0x1000,
                rkey: 0x55,
                plan: None,
                atomic: AtomicOp::FetchAndAdd,
                out_reads: 16,
                anatomy: false,
                turnaround: None,
                report: None,
                bw: BwKeys::default(),
            }
            .encode(),
        )
        .unwrap();
        let r = m.encode();
        assert_eq!((r[4], r[40], r[24]), (4, 3, 16));
        assert_eq!((m.psn, m.out_reads, m.test), (0xAB_CDEF, 16, Test::ReadLat));
        for (op, code) in [(AtomicOp::FetchAndAdd, 4), (AtomicOp::CmpAndSwap, 5)] {
            let a = Msg {
                test: Test::AtomicLat,
                atomic: op,
                size: 8,
                out_reads: 1,
                ..m
            };
            let b = a.encode();
            assert_eq!((b[4], b[40], b[24]), (4, code, 1));
            assert_eq!(Msg::decode(&b), Ok(a));
        }
        let mut bad = r;
        bad[24] = 17;
        assert_eq!(
            Msg::decode(&bad),
            Err(DecodeError::Field("outstanding reads"))
        );
        bad[24] = 0;
        assert_eq!(
            Msg::decode(&bad),
            Err(DecodeError::Field("outstanding reads"))
        );
    }

    #[test]
    fn a_run_of_a_plan_is_version_3_and_carries_what_a_server_follows() {
        let plan = PlanRun {
            completion: Completion::Event,
            inline: 188,
            run: 2,
            runs: 3,
            pass: 1,
            passes: 4,
        };
        let m = Msg {
            kind: Kind::Hello,
            role: Role::Client,
            transport: Transport::Ud,
            session: 9,
            peer_session: 0,
            lid: 3,
            mtu: 4,
            qpn: 0x48,
            psn: 1,
            iterations: 20,
            size: 0,
            index: 0,
            flags: 0,
            test: Test::SendLat,
            addr: 0,
            rkey: 0,
            plan: Some(plan),
            atomic: AtomicOp::FetchAndAdd,
            out_reads: 1,
            anatomy: false,
            turnaround: None,
            report: None,
            bw: BwKeys::default(),
        };
        let b = m.encode();
        assert_eq!((b[4], b[40], b[41]), (3, 1, 2));
        assert_eq!(&b[42..44], &[0, 188]);
        assert_eq!(&b[56..64], &[0, 2, 0, 3, 0, 1, 0, 4]);
        assert_eq!(Msg::decode(&b), Ok(m));
        assert!(!plan.is_last());
        assert!(PlanRun {
            run: 3,
            pass: 4,
            ..plan
        }
        .is_last());
        let mut bad = b;
        bad[41] = 7;
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Field("completion")));
        // A refusal: code and numbers, printed the same on both sides.
        let why = Refusal::UdSizeAboveMtu {
            size: 4096,
            mtu: 1024,
        };
        let (code, a, n) = why.fields();
        let r = Msg {
            kind: Kind::Refuse,
            role: Role::Server,
            index: code,
            rkey: a,
            addr: u64::from(n),
            plan: None,
            atomic: AtomicOp::FetchAndAdd,
            out_reads: 1,
            ..m
        };
        let d = Msg::decode(&r.encode()).unwrap();
        assert_eq!(r.encode()[4], 3, "refusals are version 3");
        assert_eq!(d.refusal(), Some(why));
        assert_eq!(
            why.to_string(),
            "UD message of 4096 bytes is larger than the server's path MTU 1024"
        );
        assert_eq!(m.refusal(), None);
        // isr mode is code 3 of the completion byte; a server that cannot run it says so.
        let isr = Msg {
            plan: Some(PlanRun {
                completion: Completion::Isr,
                ..plan
            }),
            ..m
        };
        assert_eq!(isr.encode()[41], 3);
        assert_eq!(Msg::decode(&isr.encode()), Ok(isr));
        for why in [Refusal::IsrUnavailable, Refusal::EventsWithoutInterrupts] {
            let (code, a, n) = why.fields();
            assert_eq!(Refusal::from_fields(code, a, n), Some(why));
        }
        assert_eq!(Refusal::IsrUnavailable.fields().0, 7);
        assert_eq!(
            Refusal::from_rule(Rule::IsrNeedsMsix),
            Refusal::IsrUnavailable
        );
    }

    #[test]
    fn an_anatomy_run_is_version_5_and_the_servers_acks_carry_its_turnaround() {
        let hello = Msg {
            kind: Kind::Hello,
            role: Role::Client,
            transport: Transport::Uc,
            session: 5,
            peer_session: 0,
            lid: 3,
            mtu: 4,
            qpn: 0x48,
            psn: 0x12_3456,
            iterations: 20,
            size: 0,
            index: 0,
            flags: 0,
            test: Test::SendLat,
            addr: 0,
            rkey: 0,
            plan: None,
            atomic: AtomicOp::FetchAndAdd,
            out_reads: 1,
            anatomy: true,
            turnaround: None,
            report: None,
            bw: BwKeys::default(),
        };
        let b = hello.encode();
        assert_eq!((b[4], b[19], b[24], b[40]), (5, FLAG_ANATOMY, 1, 1));
        assert_eq!(Msg::decode(&b), Ok(hello));
        // Without the anatomy the same message is version 1 again, byte for byte.
        let plain = Msg {
            anatomy: false,
            ..hello
        };
        assert_eq!(plain.encode()[4], 1);
        assert!(plain.encode()[40..].iter().all(|&x| x == 0));
        // A reset flag and the anatomy flag travel together.
        let barrier = Msg {
            kind: Kind::Barrier,
            flags: FLAG_RESET,
            index: 3,
            ..hello
        };
        let d = Msg::decode(&barrier.encode()).unwrap();
        assert_eq!((d.flags, d.anatomy, d.index), (FLAG_RESET, true, 3));
        // The server's BarrierAck: its turnaround of size 2 in bytes 44..56, no region.
        let t = Turnaround::from_ns(2, 412.34, 450.06);
        assert_eq!((t.median_dns, t.average_dns), (4123, 4501));
        let ack = Msg {
            kind: Kind::BarrierAck,
            role: Role::Server,
            index: 3,
            addr: 0x1234_5000,
            rkey: 0x77,
            turnaround: Some(t),
            ..hello
        };
        let b = ack.encode();
        assert_eq!(
            &b[44..56],
            &[0, 0, 0x10, 0x1B, 0, 0, 0x11, 0x95, 0, 0, 0, 3]
        );
        let d = Msg::decode(&b).unwrap();
        assert_eq!(d.turnaround, Some(t));
        assert_eq!((d.addr, d.rkey), (0, 0), "no region in an anatomy Ack");
        assert!((t.median_us() - 0.4123).abs() < 1e-12);
        // The first BarrierAck has nothing to report yet; the DoneAck reports the last size.
        let first = Msg {
            turnaround: None,
            report: None,
            ..ack
        };
        assert_eq!(Msg::decode(&first.encode()).unwrap().turnaround, None);
        let done = Msg {
            kind: Kind::DoneAck,
            index: 0,
            turnaround: Some(Turnaround::from_ns(22, 1e12, -1.0)),
            ..ack
        };
        let d = Msg::decode(&done.encode()).unwrap().turnaround.unwrap();
        assert_eq!((d.index, d.median_dns, d.average_dns), (22, u32::MAX, 0));
        // Every test is version 5 with the anatomy, one-sided ones keep their `-o`.
        for (test, atomic, code) in [
            (Test::WriteLat, AtomicOp::FetchAndAdd, 2),
            (Test::ReadLat, AtomicOp::FetchAndAdd, 3),
            (Test::AtomicLat, AtomicOp::CmpAndSwap, 5),
        ] {
            let m = Msg {
                test,
                atomic,
                out_reads: 4,
                transport: Transport::Rc,
                ..hello
            };
            let b = m.encode();
            assert_eq!((b[4], b[24], b[40]), (5, 4, code));
            assert_eq!(Msg::decode(&b), Ok(m));
        }
    }
}

#[cfg(test)]
mod bw_tests {
    use super::*;

    fn hello(test: Test) -> Msg {
        Msg {
            kind: Kind::Hello,
            role: Role::Client,
            transport: Transport::Ud,
            session: 0x0A0B_0C0D,
            peer_session: 0,
            lid: 3,
            mtu: 4,
            qpn: 0x48,
            psn: 0x12_3456,
            iterations: 5000,
            size: 65536,
            index: 0,
            flags: 0,
            test,
            addr: 0,
            rkey: 0,
            plan: None,
            atomic: AtomicOp::FetchAndAdd,
            out_reads: 1,
            anatomy: false,
            turnaround: None,
            report: None,
            bw: BwKeys::default(),
        }
    }

    #[test]
    fn bandwidth_hellos_are_version_5_and_carry_perftests_flags() {
        let keys = BwKeys {
            tx_depth: 15000,
            post_list: 32,
            cq_mod: Some(16),
            duration_s: Some(7),
            bidirectional: true,
            no_peak: true,
            report_gbits: true,
        };
        for (test, code) in [(Test::SendBw, 6), (Test::WriteBw, 7), (Test::ReadBw, 8)] {
            let m = Msg {
                test,
                bw: keys,
                ..hello(test)
            };
            let b = m.encode();
            assert_eq!((b[4], b[40]), (VERSION_BW, code));
            assert_eq!(&b[36..40], &[0x3A, 0x98, 0, 16], "tx depth, CQ moderation");
            assert_eq!(&b[12..16], &[0, 32, 0, 7], "post list, duration");
            assert_eq!(
                b[19],
                FLAG_BW_NO_PEAK | FLAG_BW_GBITS | FLAG_BW_BIDIRECTIONAL
            );
            assert_eq!(Msg::decode(&b), Ok(m));
        }
        for (op, code) in [(AtomicOp::FetchAndAdd, 9), (AtomicOp::CmpAndSwap, 10)] {
            let m = Msg {
                atomic: op,
                out_reads: 16,
                ..hello(Test::AtomicBw)
            };
            let b = m.encode();
            assert_eq!((b[40], b[24]), (code, 16));
            assert_eq!(Msg::decode(&b), Ok(m));
        }
        // Defaults: -Q and -D not given travel as 0 and come back as not given.
        let d = Msg::decode(&hello(Test::SendBw).encode()).unwrap();
        assert_eq!(d.bw, BwKeys::default());
        // A Hello without a tx depth is not a bandwidth Hello.
        let mut bad = hello(Test::SendBw).encode();
        bad[36..38].fill(0);
        assert_eq!(
            Msg::decode(&bad),
            Err(DecodeError::Field("bandwidth flags"))
        );
        // Version 5 names the bandwidth tests only, and older versions none of them.
        let mut bad = hello(Test::SendBw).encode();
        bad[40] = 1;
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Field("test")));
        let mut old = hello(Test::SendBw).encode();
        old[4] = VERSION_ONE_SIDED;
        assert_eq!(Msg::decode(&old), Err(DecodeError::Field("test")));
    }

    #[test]
    fn count_and_its_answer_carry_the_receivers_tally() {
        let count = Msg {
            kind: Kind::Count,
            peer_session: 0x1111,
            index: 3,
            addr: 5000,
            ..hello(Test::SendBw)
        };
        let b = count.encode();
        assert_eq!((b[4], b[5]), (VERSION_BW, 8));
        assert_eq!(Msg::decode(&b), Ok(count));
        let ack = Msg {
            kind: Kind::CountAck,
            role: Role::Server,
            flags: FLAG_COUNTED,
            rkey: 4990,
            addr: 4990 * 65536,
            ..count
        };
        let d = Msg::decode(&ack.encode()).unwrap();
        assert_eq!(
            (d.kind, d.index, d.rkey, d.addr, d.flags),
            (Kind::CountAck, 3, 4990, 4990 * 65536, FLAG_COUNTED)
        );
        // Other kinds keep their own fields: a Barrier's index and reset flag.
        let barrier = Msg {
            kind: Kind::Barrier,
            index: 7,
            flags: FLAG_RESET,
            peer_session: 9,
            ..hello(Test::WriteBw)
        };
        assert_eq!(Msg::decode(&barrier.encode()), Ok(barrier));
    }

    #[test]
    fn a_report_carries_the_servers_figures_bit_for_bit() {
        let figures = BwFigures {
            sent: 0x1_0000_0005,
            bw_peak: 6_123.456_789_012_3,
            bw_avg: 5_987.123_456_789,
            msg_rate_mpps: 0.095_794_975_309_876,
        };
        let r = Msg {
            kind: Kind::Report,
            role: Role::Server,
            peer_session: 0x2222,
            index: 4,
            plan: Some(PlanRun {
                completion: Completion::Poll,
                inline: 0,
                run: 1,
                runs: 2,
                pass: 1,
                passes: 1,
            }),
            report: Some(figures),
            ..hello(Test::AtomicBw)
        };
        let b = r.encode();
        assert_eq!((b[4], b[5], b[40]), (VERSION_BW, 10, 9));
        assert_eq!(&b[20..28], &0x1_0000_0005u64.to_be_bytes());
        assert_eq!(&b[44..52], &figures.bw_avg.to_bits().to_be_bytes());
        let d = Msg::decode(&b).unwrap();
        assert_eq!((d.kind, d.role, d.index), (Kind::Report, Role::Server, 4));
        assert_eq!((d.session, d.peer_session), (r.session, 0x2222));
        assert_eq!(d.report, Some(figures));
        assert_eq!(d.report.unwrap().bw_avg, 5_987.123_456_789);
        // A figure that is not a number or below zero is a bad message (a peak of
        // infinity, from no time between two stamps, is what perftest prints too).
        let mut inf = b;
        inf[28..36].copy_from_slice(&f64::INFINITY.to_bits().to_be_bytes());
        assert_eq!(
            Msg::decode(&inf).unwrap().report.unwrap().bw_peak,
            f64::INFINITY
        );
        let mut bad = b;
        bad[52..60].copy_from_slice(&f64::NAN.to_bits().to_be_bytes());
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Field("report figures")));
        // Kind 10 in an older version is no message of that version.
        let mut old = b;
        old[4] = VERSION_ANATOMY;
        old[40] = 1;
        assert!(Msg::decode(&old).is_err());
    }
}
