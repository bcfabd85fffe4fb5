//! The ping-pong's message (versions 1 to 6; docs/rendezvous.md, "Message"): one layout whose
//! later bytes each version gives a meaning.
//!
//! Version 1 is send_lat: bytes 40..64 are zero. Version 2 carries the test and, for the
//! RDMA tests, the remote address and rkey of the sender's data buffer in bytes 40..64. A
//! send_lat message is still emitted as version 1, so send_lat nodes of either version
//! interoperate; a version-1-only node ignores version-2 messages. Version 3 is a run of a
//! plan: on top of version 2 it carries the completion mode, the inline limit and the run's
//! place in the plan, which a server follows; a server's refusal ([`Kind::Refuse`]) is
//! version 3 too. Version 4 is read_lat and atomic_lat: version 3's layout with test codes 3
//! (read), 4 (fetch-and-add) and 5 (compare-and-swap), and the client's outstanding
//! READs/atomics in byte 24, the unused top byte of the PSN word. Version 5 is a run with the
//! latency anatomy, any test: version 4's layout, flag bit 1 set in every message, and in the
//! server's BarrierAck and DoneAck its own turnaround of the last size it measured
//! ([`Turnaround`], bytes 44..56). Version 6 is the bandwidth tests: version 4's layout with
//! test codes 6..=10; its Hello carries the bandwidth flags in fields a Hello leaves unused,
//! the client's [`Kind::Count`] and the server's [`Kind::CountAck`] close each size, and a
//! [`Kind::Report`] has a layout of its own after the common header.

use ibconfig::bench::{AtomicOp, BwKeys, Completion, Role, Sizes, Test, Transport, MAX_OUT_READS};

use crate::be::{get16, get32, get64, put16, put32, put64};
use crate::{DecodeError, Refusal, MAGIC, MSG_LEN};

/// Version of send_lat messages (bytes 40..64 zero).
pub const VERSION: u8 = 1;
/// Version of messages that carry the test, remote address and rkey (write_lat).
pub const VERSION_RDMA: u8 = 2;
/// Version of messages of a run of a plan (completion, inline limit, place in the plan) and
/// of refusals.
pub const VERSION_PLAN: u8 = 3;
/// Version of messages of read_lat and atomic_lat: version 3's layout, test codes 3..=5
/// and the outstanding READs/atomics in byte 24.
pub const VERSION_ONE_SIDED: u8 = 4;
/// Version of every message of a run with the latency anatomy: version 4's layout for every
/// test, [`FLAG_ANATOMY`] set, and the server's [`Turnaround`] in its BarrierAck and DoneAck.
pub const VERSION_ANATOMY: u8 = 5;
/// Version of messages of the bandwidth tests: version 4's layout, test codes 6..=10, the
/// bandwidth flags in the Hello, the Count / CountAck closing each size, the Report.
pub const VERSION_BW: u8 = 6;

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

/// Where each field lies. Later versions give some ranges a second meaning; those are named
/// for the message kind and version that use them.
pub mod field {
    use crate::Field;

    pub const MAGIC: Field = 0..4;
    pub const VERSION: usize = 4;
    pub const KIND: usize = 5;
    /// 1 client, 2 server.
    pub const ROLE: usize = 6;
    /// 1 UD, 2 UC, 3 RC.
    pub const TRANSPORT: usize = 7;
    /// The sender's session (random per run, never 0).
    pub const SESSION: Field = 8..12;
    /// The receiver's session being answered (0 in a Hello).
    pub const PEER_SESSION: Field = 12..16;
    /// Version-6 Hello: the post list (`-l`) and the duration in seconds (`-D`, 0: not
    /// given), in place of the peer session.
    pub const BW_POST_LIST: Field = 12..14;
    pub const BW_DURATION: Field = 14..16;
    pub const LID: Field = 16..18;
    /// The IB enum of the sender's path MTU; in a HelloAck the agreed one.
    pub const MTU: usize = 18;
    pub const FLAGS: usize = 19;
    /// 24 bits.
    pub const QPN: Field = 20..24;
    /// 24 bits (bytes 25..28 of the word).
    pub const PSN: Field = 24..28;
    /// Versions 4 to 6: the client's outstanding READs/atomics (`-o`), the PSN word's top
    /// byte.
    pub const OUT_READS: usize = 24;
    pub const ITERATIONS: Field = 28..32;
    /// 0 for `-a`, else the single size.
    pub const SIZE: Field = 32..36;
    /// Barrier, BarrierAck, Count, CountAck, Report: the size index; Refuse: the reason code.
    pub const INDEX: Field = 36..40;
    /// Version-6 Hello: the tx depth (`-t`) and the CQ moderation (`-Q`, 0: not given), in
    /// place of the index.
    pub const BW_TX_DEPTH: Field = 36..38;
    pub const BW_CQ_MOD: Field = 38..40;
    /// Version 1: bytes 40..64 are zero and unread.
    pub const EXTENSION: Field = 40..64;
    /// Versions 2 to 6: the test (and atomic operation) code.
    pub const TEST: usize = 40;
    /// Versions 3 to 6, in a run of a plan: 1 poll, 2 event, 3 isr.
    pub const COMPLETION: usize = 41;
    /// Versions 3 to 6, in a run of a plan: the client's inline limit in force.
    pub const INLINE: Field = 42..44;
    /// Versions 2 to 6: the rkey and bus address of the region the peer acts on; Refuse:
    /// the reason's first and second numbers.
    pub const RKEY: Field = 44..48;
    pub const ADDR: Field = 48..56;
    /// Version-5 BarrierAck and DoneAck: the server's median and average turnaround (tenths
    /// of ns) and the size index it belongs to plus one (0: none yet), in place of the region.
    pub const TURNAROUND_MEDIAN: Field = 44..48;
    pub const TURNAROUND_AVERAGE: Field = 48..52;
    pub const TURNAROUND_INDEX: Field = 52..56;
    /// Version-6 Count: messages sent; CountAck: messages received (in `RKEY`) and payload
    /// bytes received (here).
    pub const COUNT: Field = 48..56;
    /// Versions 3 to 6, in a run of a plan (0 outside one): run R of N, pass P of M.
    pub const RUN: Field = 56..58;
    pub const RUNS: Field = 58..60;
    pub const PASS: Field = 60..62;
    pub const PASSES: Field = 62..64;
    /// Version-6 Report, after the common header (bytes 0..20): the messages the server
    /// sent, its BW peak, average and MsgRate as IEEE 754 doubles; the index and test code
    /// stay where they are, every other byte is zero.
    pub const REPORT_SENT: Field = 20..28;
    pub const REPORT_BW_PEAK: Field = 28..36;
    pub const REPORT_BW_AVG: Field = 44..52;
    pub const REPORT_MSG_RATE: Field = 52..60;
}

/// A view of a message in any byte buffer, by field. Build it with [`Packet::new_checked`]
/// (which checks the length once) to read a received buffer.
#[derive(Clone, Copy, Debug)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// A view without a length check: the accessors panic on a buffer shorter than
    /// [`MSG_LEN`].
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// A view of `buffer`, which must hold at least [`MSG_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, DecodeError> {
        if buffer.as_ref().len() < MSG_LEN {
            return Err(DecodeError::Short);
        }
        Ok(Packet { buffer })
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn magic(&self) -> u32 {
        get32(self.b(), field::MAGIC)
    }
    pub fn version(&self) -> u8 {
        self.b()[field::VERSION]
    }
    pub fn kind(&self) -> u8 {
        self.b()[field::KIND]
    }
    pub fn role(&self) -> u8 {
        self.b()[field::ROLE]
    }
    pub fn transport(&self) -> u8 {
        self.b()[field::TRANSPORT]
    }
    pub fn session(&self) -> u32 {
        get32(self.b(), field::SESSION)
    }
    pub fn peer_session(&self) -> u32 {
        get32(self.b(), field::PEER_SESSION)
    }
    pub fn bw_post_list(&self) -> u16 {
        get16(self.b(), field::BW_POST_LIST)
    }
    pub fn bw_duration(&self) -> u16 {
        get16(self.b(), field::BW_DURATION)
    }
    pub fn lid(&self) -> u16 {
        get16(self.b(), field::LID)
    }
    pub fn mtu(&self) -> u8 {
        self.b()[field::MTU]
    }
    pub fn flags(&self) -> u8 {
        self.b()[field::FLAGS]
    }
    pub fn qpn(&self) -> u32 {
        get32(self.b(), field::QPN) & 0xFF_FFFF
    }
    pub fn psn(&self) -> u32 {
        get32(self.b(), field::PSN) & 0xFF_FFFF
    }
    pub fn out_reads(&self) -> u8 {
        self.b()[field::OUT_READS]
    }
    pub fn iterations(&self) -> u32 {
        get32(self.b(), field::ITERATIONS)
    }
    pub fn size(&self) -> u32 {
        get32(self.b(), field::SIZE)
    }
    pub fn index(&self) -> u32 {
        get32(self.b(), field::INDEX)
    }
    pub fn bw_tx_depth(&self) -> u16 {
        get16(self.b(), field::BW_TX_DEPTH)
    }
    pub fn bw_cq_mod(&self) -> u16 {
        get16(self.b(), field::BW_CQ_MOD)
    }
    pub fn test(&self) -> u8 {
        self.b()[field::TEST]
    }
    pub fn completion(&self) -> u8 {
        self.b()[field::COMPLETION]
    }
    pub fn inline(&self) -> u16 {
        get16(self.b(), field::INLINE)
    }
    pub fn rkey(&self) -> u32 {
        get32(self.b(), field::RKEY)
    }
    pub fn addr(&self) -> u64 {
        get64(self.b(), field::ADDR)
    }
    pub fn turnaround_median(&self) -> u32 {
        get32(self.b(), field::TURNAROUND_MEDIAN)
    }
    pub fn turnaround_average(&self) -> u32 {
        get32(self.b(), field::TURNAROUND_AVERAGE)
    }
    pub fn turnaround_index(&self) -> u32 {
        get32(self.b(), field::TURNAROUND_INDEX)
    }
    pub fn count(&self) -> u64 {
        get64(self.b(), field::COUNT)
    }
    pub fn run(&self) -> u16 {
        get16(self.b(), field::RUN)
    }
    pub fn runs(&self) -> u16 {
        get16(self.b(), field::RUNS)
    }
    pub fn pass(&self) -> u16 {
        get16(self.b(), field::PASS)
    }
    pub fn passes(&self) -> u16 {
        get16(self.b(), field::PASSES)
    }
    pub fn report_sent(&self) -> u64 {
        get64(self.b(), field::REPORT_SENT)
    }
    pub fn report_bw_peak(&self) -> f64 {
        f64::from_bits(get64(self.b(), field::REPORT_BW_PEAK))
    }
    pub fn report_bw_avg(&self) -> f64 {
        f64::from_bits(get64(self.b(), field::REPORT_BW_AVG))
    }
    pub fn report_msg_rate(&self) -> f64 {
        f64::from_bits(get64(self.b(), field::REPORT_MSG_RATE))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Zeroes the message's bytes (unused fields are zero on the wire).
    pub fn clear(&mut self) {
        self.m()[..MSG_LEN].fill(0);
    }
    pub fn set_magic(&mut self, v: u32) {
        put32(self.m(), field::MAGIC, v)
    }
    pub fn set_version(&mut self, v: u8) {
        self.m()[field::VERSION] = v
    }
    pub fn set_kind(&mut self, v: u8) {
        self.m()[field::KIND] = v
    }
    pub fn set_role(&mut self, v: u8) {
        self.m()[field::ROLE] = v
    }
    pub fn set_transport(&mut self, v: u8) {
        self.m()[field::TRANSPORT] = v
    }
    pub fn set_session(&mut self, v: u32) {
        put32(self.m(), field::SESSION, v)
    }
    pub fn set_peer_session(&mut self, v: u32) {
        put32(self.m(), field::PEER_SESSION, v)
    }
    pub fn set_bw_post_list(&mut self, v: u16) {
        put16(self.m(), field::BW_POST_LIST, v)
    }
    pub fn set_bw_duration(&mut self, v: u16) {
        put16(self.m(), field::BW_DURATION, v)
    }
    pub fn set_lid(&mut self, v: u16) {
        put16(self.m(), field::LID, v)
    }
    pub fn set_mtu(&mut self, v: u8) {
        self.m()[field::MTU] = v
    }
    pub fn set_flags(&mut self, v: u8) {
        self.m()[field::FLAGS] = v
    }
    /// The low 24 bits of `v`.
    pub fn set_qpn(&mut self, v: u32) {
        put32(self.m(), field::QPN, v & 0xFF_FFFF)
    }
    /// The low 24 bits of `v`; the word's top byte is zero (or [`Self::set_out_reads`]).
    pub fn set_psn(&mut self, v: u32) {
        put32(self.m(), field::PSN, v & 0xFF_FFFF)
    }
    pub fn set_out_reads(&mut self, v: u8) {
        self.m()[field::OUT_READS] = v
    }
    pub fn set_iterations(&mut self, v: u32) {
        put32(self.m(), field::ITERATIONS, v)
    }
    pub fn set_size(&mut self, v: u32) {
        put32(self.m(), field::SIZE, v)
    }
    pub fn set_index(&mut self, v: u32) {
        put32(self.m(), field::INDEX, v)
    }
    pub fn set_bw_tx_depth(&mut self, v: u16) {
        put16(self.m(), field::BW_TX_DEPTH, v)
    }
    pub fn set_bw_cq_mod(&mut self, v: u16) {
        put16(self.m(), field::BW_CQ_MOD, v)
    }
    pub fn set_test(&mut self, v: u8) {
        self.m()[field::TEST] = v
    }
    pub fn set_completion(&mut self, v: u8) {
        self.m()[field::COMPLETION] = v
    }
    pub fn set_inline(&mut self, v: u16) {
        put16(self.m(), field::INLINE, v)
    }
    pub fn set_rkey(&mut self, v: u32) {
        put32(self.m(), field::RKEY, v)
    }
    pub fn set_addr(&mut self, v: u64) {
        put64(self.m(), field::ADDR, v)
    }
    pub fn set_turnaround(&mut self, t: Option<Turnaround>) {
        let b = self.m();
        put32(b, field::TURNAROUND_MEDIAN, t.map_or(0, |t| t.median_dns));
        put32(b, field::TURNAROUND_AVERAGE, t.map_or(0, |t| t.average_dns));
        put32(
            b,
            field::TURNAROUND_INDEX,
            t.map_or(0, |t| t.index.saturating_add(1)),
        );
    }
    pub fn set_place(&mut self, run: u16, runs: u16, pass: u16, passes: u16) {
        let b = self.m();
        put16(b, field::RUN, run);
        put16(b, field::RUNS, runs);
        put16(b, field::PASS, pass);
        put16(b, field::PASSES, passes);
    }
    pub fn set_report(&mut self, r: &BwFigures) {
        let b = self.m();
        put64(b, field::REPORT_SENT, r.sent);
        put64(b, field::REPORT_BW_PEAK, r.bw_peak.to_bits());
        put64(b, field::REPORT_BW_AVG, r.bw_avg.to_bits());
        put64(b, field::REPORT_MSG_RATE, r.msg_rate_mpps.to_bits());
    }
}

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

    fn from_code(v: u8) -> Option<Kind> {
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

/// One message, parsed ([`Msg::parse`]) or to be emitted ([`Msg::emit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Msg {
    pub kind: Kind,
    pub role: Role,
    pub transport: Transport,
    /// The sender's per-run nonce.
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

/// The test's code in byte 40 (versions 2 to 6).
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

/// The test a version's code names, if that version has it.
fn test_of(version: u8, code: u8) -> Result<(Test, AtomicOp), DecodeError> {
    let fa = AtomicOp::FetchAndAdd;
    Ok(match (version, code) {
        (VERSION, _) => (Test::SendLat, fa),
        (VERSION_RDMA | VERSION_PLAN | VERSION_ANATOMY, 1) => (Test::SendLat, fa),
        (VERSION_RDMA | VERSION_PLAN | VERSION_ANATOMY, 2) => (Test::WriteLat, fa),
        (VERSION_ONE_SIDED | VERSION_ANATOMY, 3) => (Test::ReadLat, fa),
        (VERSION_ONE_SIDED | VERSION_ANATOMY, 4) => (Test::AtomicLat, fa),
        (VERSION_ONE_SIDED | VERSION_ANATOMY, 5) => (Test::AtomicLat, AtomicOp::CmpAndSwap),
        (VERSION_BW, 6) => (Test::SendBw, fa),
        (VERSION_BW, 7) => (Test::WriteBw, fa),
        (VERSION_BW, 8) => (Test::ReadBw, fa),
        (VERSION_BW, 9) => (Test::AtomicBw, fa),
        (VERSION_BW, 10) => (Test::AtomicBw, AtomicOp::CmpAndSwap),
        (VERSION..=VERSION_BW, _) => return Err(DecodeError::Field("test")),
        (v, _) => return Err(DecodeError::Version(v)),
    })
}

fn role_code(r: Role) -> u8 {
    match r {
        Role::Client => 1,
        Role::Server => 2,
    }
}

fn transport_code(t: Transport) -> u8 {
    match t {
        Transport::Ud => 1,
        Transport::Uc => 2,
        Transport::Rc => 3,
    }
}

fn completion_code(c: Completion) -> u8 {
    match c {
        Completion::Poll => 1,
        Completion::Event => 2,
        Completion::Isr => 3,
    }
}

fn role_transport<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<(Role, Transport), DecodeError> {
    let role = match p.role() {
        1 => Role::Client,
        2 => Role::Server,
        _ => return Err(DecodeError::Field("role")),
    };
    let transport = match p.transport() {
        1 => Transport::Ud,
        2 => Transport::Uc,
        3 => Transport::Rc,
        _ => return Err(DecodeError::Field("transport")),
    };
    Ok((role, transport))
}

/// A 16-bit field's value, saturated.
fn sat16(v: u32) -> u16 {
    v.min(0xFFFF) as u16
}

impl Msg {
    /// The sizes field for a configuration.
    pub fn size_field(s: Sizes) -> u32 {
        match s {
            Sizes::All => 0,
            Sizes::Single(n) => n,
        }
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

    /// Writes the message into `p` in its [`Self::version`]; every byte of the message is
    /// written (unused ones zero).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        let version = self.version();
        let bw_hello = version == VERSION_BW && self.kind == Kind::Hello;
        p.clear();
        p.set_magic(MAGIC);
        p.set_version(version);
        p.set_kind(self.kind as u8);
        p.set_role(role_code(self.role));
        p.set_transport(transport_code(self.transport));
        p.set_session(self.session);
        p.set_lid(self.lid);
        p.set_mtu(self.mtu);
        if version == VERSION_BW && self.kind == Kind::Report {
            // A Report has no QPN, PSN, iterations, sizes, region or plan fields.
            p.set_peer_session(self.peer_session);
            p.set_flags(self.flags);
            p.set_index(self.index);
            p.set_test(test_code(self.test, self.atomic));
            p.set_report(&self.report.unwrap_or_default());
            return;
        }
        if bw_hello {
            let w = &self.bw;
            let flags = [
                (w.no_peak, FLAG_BW_NO_PEAK),
                (w.report_gbits, FLAG_BW_GBITS),
                (w.bidirectional, FLAG_BW_BIDIRECTIONAL),
            ]
            .into_iter()
            .filter(|(on, _)| *on)
            .fold(0, |acc, (_, bit)| acc | bit);
            p.set_flags(flags);
            p.set_bw_post_list(sat16(w.post_list));
            p.set_bw_duration(sat16(w.duration_s.unwrap_or(0)));
            p.set_bw_tx_depth(sat16(w.tx_depth));
            p.set_bw_cq_mod(sat16(w.cq_mod.unwrap_or(0)));
        } else {
            p.set_peer_session(self.peer_session);
            // Version 5 is the anatomy's: its flag is in every message of it.
            let anatomy = if version == VERSION_ANATOMY {
                FLAG_ANATOMY
            } else {
                0
            };
            p.set_flags(self.flags | anatomy);
            p.set_index(self.index);
        }
        p.set_qpn(self.qpn);
        p.set_psn(self.psn);
        if version >= VERSION_ONE_SIDED {
            p.set_out_reads(self.out_reads);
        }
        p.set_iterations(self.iterations);
        p.set_size(self.size);
        if version != VERSION {
            p.set_test(test_code(self.test, self.atomic));
            if version == VERSION_ANATOMY && self.kind.carries_turnaround() {
                // The server's region went out in its HelloAck: these bytes carry its
                // turnaround.
                p.set_turnaround(self.turnaround);
            } else {
                p.set_rkey(self.rkey);
                p.set_addr(self.addr);
            }
        }
        if let Some(plan) = self.plan {
            p.set_completion(completion_code(plan.completion));
            p.set_inline(plan.inline);
            p.set_place(plan.run, plan.runs, plan.pass, plan.passes);
        }
    }

    /// Reads a message: the version, kind, role, transport, test and completion codes must be
    /// known, a version-5 message must have the anatomy flag, the outstanding READs 1..=16, a bandwidth Hello's tx depth and post list
    /// non-zero, a Report's figures numbers of at least zero.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Msg, DecodeError> {
        if p.magic() != MAGIC {
            return Err(DecodeError::Magic);
        }
        let version = p.version();
        let (test, atomic) = test_of(version, p.test())?;
        if version == VERSION_BW && p.kind() == Kind::Report as u8 {
            return Msg::parse_report(p, test, atomic);
        }
        let out_reads = if version >= VERSION_ONE_SIDED {
            p.out_reads()
        } else {
            1
        };
        if out_reads == 0 || u32::from(out_reads) > MAX_OUT_READS {
            return Err(DecodeError::Field("outstanding reads"));
        }
        let kind = Kind::from_code(p.kind()).ok_or(DecodeError::Field("kind"))?;
        let anatomy_ack = version == VERSION_ANATOMY && kind.carries_turnaround();
        // Version 1 leaves bytes 40..64 unused: no address or key is read from them; a
        // version-5 BarrierAck or DoneAck has its turnaround there instead.
        let (addr, rkey) = if version != VERSION && !anatomy_ack {
            (p.addr(), p.rkey())
        } else {
            (0, 0)
        };
        let turnaround = match p.turnaround_index() {
            n if anatomy_ack && n != 0 => Some(Turnaround {
                index: n - 1,
                median_dns: p.turnaround_median(),
                average_dns: p.turnaround_average(),
            }),
            _ => None,
        };
        let (flags, anatomy) = if version == VERSION_ANATOMY {
            if p.flags() & FLAG_ANATOMY == 0 {
                return Err(DecodeError::Field("anatomy flag"));
            }
            (p.flags() & !FLAG_ANATOMY, true)
        } else {
            (p.flags(), false)
        };
        let bw_hello = version == VERSION_BW && kind == Kind::Hello;
        let bw = if bw_hello {
            let nonzero = |v: u16| (v != 0).then_some(u32::from(v));
            let keys = BwKeys {
                tx_depth: u32::from(p.bw_tx_depth()),
                post_list: u32::from(p.bw_post_list()),
                cq_mod: nonzero(p.bw_cq_mod()),
                duration_s: nonzero(p.bw_duration()),
                no_peak: p.flags() & FLAG_BW_NO_PEAK != 0,
                report_gbits: p.flags() & FLAG_BW_GBITS != 0,
                bidirectional: p.flags() & FLAG_BW_BIDIRECTIONAL != 0,
            };
            if keys.tx_depth == 0 || keys.post_list == 0 {
                return Err(DecodeError::Field("bandwidth flags"));
            }
            keys
        } else {
            BwKeys::default()
        };
        let plan = if version >= VERSION_PLAN && p.run() != 0 {
            let completion = match p.completion() {
                1 => Completion::Poll,
                2 => Completion::Event,
                3 => Completion::Isr,
                _ => return Err(DecodeError::Field("completion")),
            };
            Some(PlanRun {
                completion,
                inline: p.inline(),
                run: p.run(),
                runs: p.runs(),
                pass: p.pass(),
                passes: p.passes(),
            })
        } else {
            None
        };
        let (role, transport) = role_transport(p)?;
        Ok(Msg {
            kind,
            role,
            transport,
            session: p.session(),
            peer_session: if bw_hello { 0 } else { p.peer_session() },
            lid: p.lid(),
            mtu: p.mtu(),
            qpn: p.qpn(),
            psn: p.psn(),
            iterations: p.iterations(),
            size: p.size(),
            index: if bw_hello { 0 } else { p.index() },
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
    fn parse_report<T: AsRef<[u8]>>(
        p: &Packet<T>,
        test: Test,
        atomic: AtomicOp,
    ) -> Result<Msg, DecodeError> {
        let (role, transport) = role_transport(p)?;
        let report = BwFigures {
            sent: p.report_sent(),
            bw_peak: p.report_bw_peak(),
            bw_avg: p.report_bw_avg(),
            msg_rate_mpps: p.report_msg_rate(),
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
            session: p.session(),
            peer_session: p.peer_session(),
            lid: p.lid(),
            mtu: p.mtu(),
            qpn: 0,
            psn: 0,
            iterations: 0,
            size: 0,
            index: p.index(),
            flags: p.flags(),
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

    /// The message's bytes ([`Self::emit`] into a fresh buffer).
    pub fn encode(&self) -> [u8; MSG_LEN] {
        let mut b = [0u8; MSG_LEN];
        self.emit(&mut Packet::new_unchecked(&mut b[..]));
        b
    }

    /// Reads a received datagram ([`Packet::new_checked`], then [`Self::parse`]).
    pub fn decode(b: &[u8]) -> Result<Msg, DecodeError> {
        Msg::parse(&Packet::new_checked(b)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Refusal;
    use ibconfig::bench::Rule;

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

#[cfg(test)]
mod random_tests {
    use super::*;
    use crate::testing::Rng;

    /// A message of any kind, test and version with every field random within what its
    /// version carries.
    fn random_msg(r: &mut Rng) -> Msg {
        const TESTS: [(Test, AtomicOp); 10] = [
            (Test::SendLat, AtomicOp::FetchAndAdd),
            (Test::WriteLat, AtomicOp::FetchAndAdd),
            (Test::ReadLat, AtomicOp::FetchAndAdd),
            (Test::AtomicLat, AtomicOp::FetchAndAdd),
            (Test::AtomicLat, AtomicOp::CmpAndSwap),
            (Test::SendBw, AtomicOp::FetchAndAdd),
            (Test::WriteBw, AtomicOp::FetchAndAdd),
            (Test::ReadBw, AtomicOp::FetchAndAdd),
            (Test::AtomicBw, AtomicOp::FetchAndAdd),
            (Test::AtomicBw, AtomicOp::CmpAndSwap),
        ];
        let (test, atomic) = TESTS[r.below(10) as usize];
        let kind = Kind::from_code(1 + r.below(10) as u8).unwrap();
        let kind = if kind == Kind::Report && !test.is_bw() {
            Kind::Count
        } else {
            kind
        };
        let anatomy = !test.is_bw() && r.bool();
        let plan = r.bool().then(|| PlanRun {
            completion: [Completion::Poll, Completion::Event, Completion::Isr][r.below(3) as usize],
            inline: r.next() as u16,
            run: 1 + r.below(0xFFFE) as u16,
            runs: r.next() as u16,
            pass: r.next() as u16,
            passes: r.next() as u16,
        });
        let mut m = Msg {
            kind,
            role: if r.bool() { Role::Client } else { Role::Server },
            transport: [Transport::Ud, Transport::Uc, Transport::Rc][r.below(3) as usize],
            session: r.next() as u32,
            peer_session: r.next() as u32,
            lid: r.next() as u16,
            mtu: r.next() as u8,
            qpn: r.next() as u32 & 0xFF_FFFF,
            psn: r.next() as u32 & 0xFF_FFFF,
            iterations: r.next() as u32,
            size: r.next() as u32,
            index: r.next() as u32,
            flags: r.next() as u8,
            test,
            addr: r.next(),
            rkey: r.next() as u32,
            plan,
            atomic,
            out_reads: 1,
            anatomy,
            turnaround: None,
            bw: BwKeys::default(),
            report: None,
        };
        if m.version() >= VERSION_ONE_SIDED {
            m.out_reads = 1 + r.below(16) as u8;
        }
        if m.version() == VERSION {
            (m.addr, m.rkey) = (0, 0);
        }
        if anatomy {
            m.flags &= !FLAG_ANATOMY;
            if kind.carries_turnaround() {
                (m.addr, m.rkey) = (0, 0);
                m.turnaround = r.bool().then(|| Turnaround {
                    index: r.below(u64::from(u32::MAX)) as u32,
                    median_dns: r.next() as u32,
                    average_dns: r.next() as u32,
                });
            }
        }
        if m.version() == VERSION_BW && kind == Kind::Hello {
            (m.peer_session, m.index, m.flags) = (0, 0, 0);
            m.bw = BwKeys {
                tx_depth: 1 + r.below(0xFFFF) as u32,
                post_list: 1 + r.below(0xFFFF) as u32,
                cq_mod: r.bool().then(|| 1 + r.below(0xFFFF) as u32),
                duration_s: r.bool().then(|| 1 + r.below(0xFFFF) as u32),
                bidirectional: r.bool(),
                no_peak: r.bool(),
                report_gbits: r.bool(),
            };
        }
        if kind == Kind::Report {
            (m.qpn, m.psn, m.iterations, m.size, m.addr, m.rkey) = (0, 0, 0, 0, 0, 0);
            (m.plan, m.out_reads) = (None, 1);
            let f = |r: &mut Rng| (r.next() >> 12) as f64 / 7.0;
            m.report = Some(BwFigures {
                sent: r.next(),
                bw_peak: f(r),
                bw_avg: f(r),
                msg_rate_mpps: f(r),
            });
        }
        m
    }

    #[test]
    fn every_message_parses_back_to_itself_and_emits_the_same_bytes() {
        let mut r = Rng(6);
        for _ in 0..50_000 {
            let m = random_msg(&mut r);
            let b = m.encode();
            assert_eq!(Msg::decode(&b), Ok(m), "{b:?}");
            // The view reads what the representation wrote.
            let p = Packet::new_checked(&b[..]).unwrap();
            assert_eq!((p.version(), p.kind()), (m.version(), m.kind as u8));
            assert_eq!((p.session(), p.lid(), p.mtu()), (m.session, m.lid, m.mtu));
            // A longer buffer (a receive slot) reads the same.
            let mut long = [0xEEu8; 2 * MSG_LEN];
            long[..MSG_LEN].copy_from_slice(&b);
            assert_eq!(Msg::decode(&long), Ok(m));
        }
    }

    #[test]
    fn mangled_messages_are_parsed_or_refused_never_misread() {
        // Every byte of valid messages replaced at random, and random tails: whatever
        // parses re-emits to bytes that parse to the same message (nothing is read that
        // the emitter would not write: no wider field, no flag it drops), and nothing
        // panics.
        let mut r = Rng(7);
        let mut refused = 0;
        for i in 0..50_000 {
            let mut b = random_msg(&mut r).encode();
            if i % 2 == 0 {
                let at = r.below(MSG_LEN as u64) as usize;
                b[at] = r.next() as u8;
            } else {
                let from = 4 + r.below(60) as usize;
                r.fill(&mut b[from..]);
            }
            match Msg::decode(&b) {
                // A message in the version its content calls for comes back whole; one in
                // another version that has the same fields (a send_lat Hello as version 2)
                // is read all the same and re-emitted in its own.
                Ok(d) if d.version() == b[4] => {
                    assert_eq!(Msg::decode(&d.encode()), Ok(d), "{b:?}")
                }
                Ok(d) => assert!(Msg::decode(&d.encode()).is_ok(), "{b:?}"),
                Err(_) => refused += 1,
            }
            for len in [0, 1, 40, 63] {
                assert_eq!(Msg::decode(&b[..len]), Err(DecodeError::Short));
            }
        }
        assert!(refused > 1000, "the mangling reached the checks: {refused}");
        let mut noise = [0u8; MSG_LEN];
        for _ in 0..10_000 {
            r.fill(&mut noise);
            assert_eq!(Msg::decode(&noise), Err(DecodeError::Magic));
        }
    }
}
