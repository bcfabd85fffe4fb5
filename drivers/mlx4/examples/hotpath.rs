//! Latency-path instruction counts: a reproducible benchmark that prints them.
//!
//! ```text
//! cargo run -p mlx4 --release --example hotpath            # needs valgrind on PATH
//! cargo run -p mlx4 --release --example hotpath -- 5000    # more measured iterations
//! ```
//!
//! Without arguments (or with an iteration count) the program re-runs itself under
//! `valgrind --tool=callgrind` once per case, reads callgrind's output file and prints, per
//! call, the instructions of `post_send` (2-byte inline SEND), of `poll_cq` taking the send
//! CQE, of `poll_cq` taking the receive CQE, of an empty `poll_cq`, and the per-iteration
//! total on one side (post + the two polls that find a CQE), as perftest's latency loop does.
//! `hotpath run <ud|uc|uc28> <iters>` is the worker callgrind runs (usable on its own too).
//! After the latency tables it counts the bandwidth case (`hotpath bw [LISTS]` alone; worker
//! `hotpath run bw LISTS`): RC lists of 32 64-byte SENDs with one signaled, per message, and
//! the model's PCIe transactions per message (docs/performance.md, "The bandwidth path").
//!
//! The workload: two HCAs of the in-process device model, one QP each, every send signaled,
//! receives pre-posted, a warm-up of [`WARMUP`] iterations (so every SQ slot has been used
//! and stamped once, and the counts are steady state), then the measured iterations.
//!
//! What is counted: each verb is called through an `inline(never)` wrapper (`m_post_send`,
//! `m_poll_send`, `m_poll_recv`, `m_poll_empty`); the driver is inlined into it, so the
//! wrapper's instructions are the driver's plus the wrapper's own prologue, return and one
//! marker store (subtracted; it keeps the compiler from folding identical wrappers into
//! one symbol). Functions a wrapper calls (out-of-line driver code) are counted inclusive
//! and named in a note. The benchmark platform's UAR/BlueFlame methods do what the
//! kernel's do — volatile 64-bit stores of the WQE into a memory-backed page, then
//! `sfence` (or one 32-bit doorbell store) — and are inlined like the kernel's, so those
//! stores **are** counted, plus two stores recording where the write went. The device
//! model is **not** counted: the harness delivers the recorded write to it after the
//! measured call returns (as hardware sees the write on the bus while the CPU goes on).
//! Polls never call the platform (the read barrier is a compiler fence on x86-64).

#[path = "../tests/common/mod.rs"]
mod common;

use std::cell::Cell;
use std::hint::black_box;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use common::*;
use mlx4::cq::CqHandle;
use mlx4::qp::{Ah, QpHandle};
use mlx4::{Bar, DmaRegion, Hca, IrqLine, MsiMessage, Platform};
use sim::FabricConfig;
use verbs::*;

/// Unmeasured iterations before the measured ones.
const WARMUP: u32 = 300;

/// The benchmark cases: name, QP type, max_inline requested.
const CASES: [(&str, QpType, u32, &str); 3] = [
    ("ud", QpType::Ud, 188, "UD, max_inline 188 (512 B slots)"),
    ("uc", QpType::Uc, 236, "UC, max_inline 236 (512 B slots)"),
    ("uc28", QpType::Uc, 28, "UC, max_inline 28 (64 B slots)"),
];

/// The measured wrappers, in report order: (symbol suffix, label).
const MEASURED: [(&str, &str); 7] = [
    ("m_post_send", "post_send"),
    ("m_poll_send", "poll_cq send"),
    ("m_poll_recv", "poll_cq recv"),
    ("m_poll_empty", "poll_cq empty"),
    ("m_one_send", "poll_one send"),
    ("m_one_recv", "poll_one recv"),
    ("m_one_empty", "poll_one empty"),
];

/// The data path's measured wrappers, in report order: (symbol suffix, label).
const PATH: [(&str, &str); 4] = [
    ("m_path_send", "send"),
    ("m_path_scqe", "poll_send"),
    ("m_path_rcqe", "poll_recv"),
    ("m_path_empty", "poll empty"),
];

/// The kernel-like platform. UAR/BlueFlame writes are stores into a memory-backed page,
/// exactly what the kernel's MMIO methods execute (counted); where they went is noted in
/// two cells, and the harness hands the write to the device model after the measured call
/// returns ([`BenchPlatform::deliver`], not counted), as hardware sees the write on the
/// bus while the CPU goes on. Everything else goes straight to the model.
struct BenchPlatform {
    sim: SimPlatform,
    /// Stands in for BAR2: two pages, so that a write at any in-page offset stays inside.
    page: Box<[u64; 1024]>,
    /// BAR2 offset of the last write not yet delivered.
    pending_off: Cell<usize>,
    /// Its length in 64-bit words (0: nothing pending; [`DOORBELL32`]: a 32-bit doorbell).
    pending_len: Cell<usize>,
}

/// `pending_len` of a 32-bit doorbell write.
const DOORBELL32: usize = usize::MAX;

impl BenchPlatform {
    /// Hand the pending UAR/BlueFlame write (if any) to the device model.
    #[inline(never)]
    fn deliver(&self) {
        let (off, len) = (self.pending_off.get(), self.pending_len.replace(0));
        let in_page = (off & 0xFFF) >> 3;
        if len == DOORBELL32 {
            let v = (self.page[in_page] >> ((off & 4) * 8)) as u32;
            self.sim.mmio_write32(Bar::Uar, off, v);
        } else if len > 0 {
            self.sim
                .wc_copy(Bar::Uar, off, &self.page[in_page..in_page + len]);
        }
    }
}

// SAFETY: DMA memory and everything but UAR writes come from `SimPlatform` (see its impl);
// UAR writes are stores into `page`, masked to an in-page offset of a two-page buffer, so they
// stay inside it.
unsafe impl Platform for BenchPlatform {
    fn mmio_read32(&self, bar: Bar, offset: usize) -> u32 {
        self.sim.mmio_read32(bar, offset)
    }
    #[inline(always)]
    fn mmio_write32(&self, bar: Bar, offset: usize, value: u32) {
        if bar == Bar::Dcs {
            return self.sim.mmio_write32(bar, offset, value);
        }
        let base = self.page.as_ptr() as *mut u32;
        // SAFETY: the index is below 1024, inside the first 4 KiB page.
        unsafe { core::ptr::write_volatile(base.add((offset & 0xFFF) >> 2), value) };
        self.pending_off.set(offset);
        self.pending_len.set(DOORBELL32);
    }
    fn mmio_write64(&self, bar: Bar, offset: usize, value: u64) {
        self.sim.mmio_write64(bar, offset, value)
    }
    #[inline(always)]
    fn wc_copy(&self, bar: Bar, offset: usize, words: &[u64]) {
        // SAFETY: the in-page offset is below 4096 and a BlueFlame half at most 2048 bytes
        // (QUERY_DEV_CAP), so every store stays inside the two pages.
        let dst = unsafe { (self.page.as_ptr() as *mut u64).add((offset & 0xFFF) >> 3) };
        for (i, w) in words.iter().enumerate().take(256) {
            // SAFETY: as above (at most 256 words).
            unsafe { core::ptr::write_volatile(dst.add(i), *w) };
        }
        // SAFETY: sfence only orders stores.
        unsafe { core::arch::asm!("sfence", options(nostack, preserves_flags)) };
        debug_assert_eq!(bar, Bar::Uar);
        self.pending_off.set(offset);
        self.pending_len.set(words.len().min(256));
    }
    fn dma_alloc(&self, size: usize, align: usize) -> Option<DmaRegion> {
        self.sim.dma_alloc(size, align)
    }
    fn now_ns(&self) -> u64 {
        self.sim.now_ns()
    }
    fn delay_us(&self, us: u64) {
        self.sim.delay_us(us)
    }
    fn config_read32(&self, offset: u16) -> u32 {
        self.sim.config_read32(offset)
    }
    fn config_write32(&self, offset: u16, value: u32) {
        self.sim.config_write32(offset, value)
    }
    fn save_config(&self) {
        self.sim.save_config()
    }
    fn restore_config(&self) {
        self.sim.restore_config()
    }
    fn msix_message(&self, vector: u16) -> Option<MsiMessage> {
        self.sim.msix_message(vector)
    }
    fn take_interrupt(&self, line: IrqLine) -> bool {
        self.sim.take_interrupt(line)
    }
}

type H = Hca<BenchPlatform>;
type Path<'a> = mlx4::path::DataPath<'a, BenchPlatform>;

/// Each wrapper starts with one store of its own number here, so that the compiler cannot
/// fold identical wrappers into one symbol (it would: `m_poll_send` and `m_poll_recv` have
/// the same body). That one `mov` per call is subtracted in the report.
static MARK: AtomicU32 = AtomicU32::new(0);

/// Instructions per wrapper call that are not the driver's: the `MARK` store.
const MARK_COST: f64 = 1.0;

#[inline(never)]
fn m_post_send(h: &mut H, qp: QpHandle, wr: &SendWr<'_, Ah>) -> Result<()> {
    MARK.store(1, Relaxed);
    h.post_send(qp, wr)
}

#[inline(never)]
fn m_poll_send(h: &mut H, cq: CqHandle, wc: &mut [WorkCompletion]) -> Result<usize> {
    MARK.store(2, Relaxed);
    h.poll_cq(cq, wc)
}

#[inline(never)]
fn m_poll_recv(h: &mut H, cq: CqHandle, wc: &mut [WorkCompletion]) -> Result<usize> {
    MARK.store(3, Relaxed);
    h.poll_cq(cq, wc)
}

#[inline(never)]
fn m_poll_empty(h: &mut H, cq: CqHandle, wc: &mut [WorkCompletion]) -> Result<usize> {
    MARK.store(4, Relaxed);
    h.poll_cq(cq, wc)
}

#[inline(never)]
fn m_one_send(h: &mut H, cq: CqHandle) -> Result<Option<Completion>> {
    MARK.store(7, Relaxed);
    h.poll_one(cq)
}

#[inline(never)]
fn m_one_recv(h: &mut H, cq: CqHandle) -> Result<Option<Completion>> {
    MARK.store(8, Relaxed);
    h.poll_one(cq)
}

#[inline(never)]
fn m_one_empty(h: &mut H, cq: CqHandle) -> Result<Option<Completion>> {
    MARK.store(9, Relaxed);
    h.poll_one(cq)
}

/// The send as the benchmark crate's loop makes it (bench/src/perftest/send_lat.rs `post_data`): work
/// request id 1 and `SIGNALED` are constants there too; the data (pointer and length) is not.
#[inline(never)]
fn m_path_send(pa: &mut Path<'_>, data: &[u8]) -> Result<()> {
    MARK.store(13, Relaxed);
    pa.send(1, Payload::Inline(data), SendFlags::SIGNALED)
}

#[inline(never)]
fn m_path_scqe(pa: &mut Path<'_>) -> Result<Option<Completion>> {
    MARK.store(14, Relaxed);
    pa.poll_send()
}

#[inline(never)]
fn m_path_rcqe(pa: &mut Path<'_>) -> Result<Option<Completion>> {
    MARK.store(15, Relaxed);
    pa.poll_recv()
}

#[inline(never)]
fn m_path_empty(pa: &mut Path<'_>) -> Result<Option<Completion>> {
    MARK.store(16, Relaxed);
    pa.poll_send()
}

/// A whole iteration of side A through the data path in one function: post, then (not
/// counted) the peer's turn, then A takes its send CQE and the reply. Of the completions it
/// reads what the benchmark crate's loop reads: both statuses and the receive's byte_len.
#[inline(never)]
fn m_iter_path(pa: &mut Path<'_>, pb: &mut Path<'_>, data: &[u8], rlen: u32) -> bool {
    MARK.store(17, Relaxed);
    let sent = pa.send(1, Payload::Inline(data), SendFlags::SIGNALED);
    if sent.is_err() {
        return false;
    }
    x_peer_turn_path(pa, pb, data);
    let s = pa.poll_send();
    let r = pa.poll_recv();
    matches!(s, Ok(Some(c)) if c.status == WcStatus::Success)
        && matches!(r, Ok(Some(c)) if c.status == WcStatus::Success && c.byte_len == rlen)
}

/// A whole iteration of side A through the data path in one function, rotated so that no
/// call sits inside it: take the send CQE and the reply of the previous send, then send
/// again; the peer's turn runs between two calls (not counted). The same work as
/// [`m_iter_path`] per call: one send, one send CQE, one receive CQE, the same fields read.
#[inline(never)]
fn m_loop_path(pa: &mut Path<'_>, data: &[u8], rlen: u32) -> bool {
    MARK.store(21, Relaxed);
    let s = pa.poll_send();
    let r = pa.poll_recv();
    let ok = matches!(s, Ok(Some(c)) if c.status == WcStatus::Success)
        && matches!(r, Ok(Some(c)) if c.status == WcStatus::Success && c.byte_len == rlen);
    ok && pa
        .send(1, Payload::Inline(data), SendFlags::SIGNALED)
        .is_ok()
}

/// [`m_loop_path`] reading every field of both completions (wr_id, status, opcode,
/// byte_len), as a loop that needs them all would.
#[inline(never)]
fn m_loop_all(pa: &mut Path<'_>, data: &[u8], rlen: u32) -> bool {
    MARK.store(22, Relaxed);
    let s = pa.poll_send();
    let r = pa.poll_recv();
    let want_s = (1, WcStatus::Success, WcOpcode::Send, 0);
    let want_r = (WcStatus::Success, WcOpcode::Recv, rlen);
    let ok = matches!(s, Ok(Some(c)) if (c.wr_id, c.status, c.opcode, c.byte_len) == want_s)
        && matches!(r, Ok(Some(c)) if c.wr_id != u64::MAX && (c.status, c.opcode, c.byte_len) == want_r);
    ok && pa
        .send(1, Payload::Inline(data), SendFlags::SIGNALED)
        .is_ok()
}

/// Not counted: as [`x_peer_turn`], through B's data path.
#[inline(never)]
fn x_peer_turn_path(pa: &mut Path<'_>, pb: &mut Path<'_>, data: &[u8]) {
    pa.platform().deliver();
    take_path(w_path_rcqe, pb);
    w_path_send(pb, data).unwrap();
    pb.platform().deliver();
    take_path(w_path_scqe, pb);
}

#[inline(never)]
fn w_path_send(pb: &mut Path<'_>, data: &[u8]) -> Result<()> {
    MARK.store(18, Relaxed);
    pb.send(1, Payload::Inline(data), SendFlags::SIGNALED)
}

#[inline(never)]
fn w_path_scqe(pb: &mut Path<'_>) -> Result<Option<Completion>> {
    MARK.store(19, Relaxed);
    pb.poll_send()
}

#[inline(never)]
fn w_path_rcqe(pb: &mut Path<'_>) -> Result<Option<Completion>> {
    MARK.store(20, Relaxed);
    pb.poll_recv()
}

/// Poll a data path until one completion arrives (bounded).
fn take_path(
    poll: fn(&mut Path<'_>) -> Result<Option<Completion>>,
    p: &mut Path<'_>,
) -> Completion {
    for _ in 0..1_000 {
        if let Some(c) = poll(p).expect("data path poll") {
            assert_eq!(c.status, WcStatus::Success);
            return c;
        }
    }
    panic!("no completion after 1000 polls");
}

/// A whole iteration of side A in one function, the verbs inlined as in an application's
/// loop: post, then (not counted) the fabric and side B's turn, then A takes its send CQE
/// and B's reply. Returns false if anything was not as expected.
#[inline(never)]
fn m_iter_one(a: &mut End, b: &mut End, wr_a: &SendWr<'_, Ah>, wr_b: &SendWr<'_, Ah>) -> bool {
    MARK.store(10, Relaxed);
    if a.h.post_send(a.qp, wr_a).is_err() {
        return false;
    }
    x_peer_turn(a, b, wr_b);
    let s = a.h.poll_one(a.scq);
    let r = a.h.poll_one(a.rcq);
    matches!(s, Ok(Some(c)) if c.status == WcStatus::Success)
        && matches!(r, Ok(Some(c)) if c.status == WcStatus::Success)
}

/// The same with `poll_cq`.
#[inline(never)]
fn m_iter_cq(a: &mut End, b: &mut End, wr_a: &SendWr<'_, Ah>, wr_b: &SendWr<'_, Ah>) -> bool {
    MARK.store(11, Relaxed);
    if a.h.post_send(a.qp, wr_a).is_err() {
        return false;
    }
    x_peer_turn(a, b, wr_b);
    let mut wc = [WorkCompletion::default(); 1];
    let s = matches!(a.h.poll_cq(a.scq, &mut wc), Ok(1)) && wc[0].status == WcStatus::Success;
    let r = matches!(a.h.poll_cq(a.rcq, &mut wc), Ok(1)) && wc[0].status == WcStatus::Success;
    s && r
}

/// Not counted (`x_` callees are excluded): A's write reaches the device, B receives,
/// replies and takes its send CQE, B's write reaches the device.
#[inline(never)]
fn x_peer_turn(a: &mut End, b: &mut End, wr_b: &SendWr<'_, Ah>) {
    a.h.platform().deliver();
    let rcq = b.rcq;
    take_one(w_one, &mut b.h, rcq);
    w_post_send(&mut b.h, b.qp, wr_b).unwrap();
    b.h.platform().deliver();
    let scq = b.scq;
    take_one(w_one, &mut b.h, scq);
}

#[inline(never)]
fn w_one(h: &mut H, cq: CqHandle) -> Result<Option<Completion>> {
    MARK.store(12, Relaxed);
    h.poll_one(cq)
}

/// Poll with `poll_one` until one completion arrives (bounded).
fn take_one(
    poll: fn(&mut H, CqHandle) -> Result<Option<Completion>>,
    h: &mut H,
    cq: CqHandle,
) -> Completion {
    for _ in 0..1_000 {
        if let Some(c) = poll(h, cq).expect("poll_one") {
            assert_eq!(c.status, WcStatus::Success);
            return c;
        }
    }
    panic!("no completion after 1000 polls");
}

/// The same calls, not measured (warm-up).
#[inline(never)]
fn w_post_send(h: &mut H, qp: QpHandle, wr: &SendWr<'_, Ah>) -> Result<()> {
    MARK.store(5, Relaxed);
    h.post_send(qp, wr)
}

#[inline(never)]
fn w_poll(h: &mut H, cq: CqHandle, wc: &mut [WorkCompletion]) -> Result<usize> {
    MARK.store(6, Relaxed);
    h.poll_cq(cq, wc)
}

struct End {
    h: H,
    scq: CqHandle,
    rcq: CqHandle,
    qp: QpHandle,
    lid: u16,
    pd: mlx4::device::PdHandle,
    buf: u64,
    lkey: u32,
    /// Receives posted so far (their work-request ids are 0, 1, 2 ...).
    posted: u64,
}

impl End {
    /// Post `n` more receives of `len` bytes (not measured).
    fn post_recvs(&mut self, n: u32, len: u32) {
        let s = [Sge {
            addr: self.buf,
            length: len,
            lkey: self.lkey,
        }];
        for _ in 0..n {
            let wr = RecvWr {
                wr_id: self.posted,
                sg_list: &s,
            };
            self.h.post_recv(self.qp, &wr).unwrap();
            self.posted += 1;
        }
    }
}

fn up(sim: SimPlatform, t: QpType, nrecv: u32, max_inline: u32) -> End {
    up_with(sim, t, nrecv, max_inline, 16)
}

/// [`up`] with `max_send_wr` sends.
fn up_with(sim: SimPlatform, t: QpType, nrecv: u32, max_inline: u32, max_send_wr: u32) -> End {
    let arena = sim.arena.clone();
    let p = BenchPlatform {
        sim,
        page: Box::new([0; 1024]),
        pending_off: Cell::new(0),
        pending_len: Cell::new(0),
    };
    let mut h = Hca::init(p, test_config()).expect("bring-up");
    let lid = h.wait_port_active(1, 5000).expect("active").lid;
    let pd = h.alloc_pd().unwrap();
    let scq = h.create_cq(16).unwrap();
    let rcq = h.create_cq(nrecv + 16).unwrap();
    let cap = QpCap {
        max_send_wr,
        max_recv_wr: nrecv + 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: max_inline,
    };
    let qp = h
        .create_qp(&QpInitAttr {
            pd,
            send_cq: scq,
            recv_cq: rcq,
            qp_type: t,
            cap,
            sq_sig_all: false,
        })
        .unwrap();
    let buf = arena.alloc(1 << 16, 4096).unwrap();
    let mr = h
        .reg_mr(pd, buf, 1 << 16, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let lkey = h.mr_lkey(mr);
    End {
        h,
        scq,
        rcq,
        qp,
        lid,
        pd,
        buf,
        lkey,
        posted: 0,
    }
}

fn connect(a: &mut End, remote_qpn: u32, remote_lid: u16) {
    let mut init = QpAttr::new(QpState::Init);
    init.qkey = 0x1111_1111;
    a.h.modify_qp(a.qp, &init).unwrap();
    let mut rtr = QpAttr::new(QpState::Rtr);
    rtr.dest_qp_num = remote_qpn;
    rtr.ah = AhAttr {
        dlid: remote_lid,
        port: 1,
        ..AhAttr::default()
    };
    a.h.modify_qp(a.qp, &rtr).unwrap();
    a.h.modify_qp(a.qp, &QpAttr::new(QpState::Rts)).unwrap();
}

/// Poll until one CQE arrives (the model is synchronous: the first poll finds it).
fn take(
    poll: fn(&mut H, CqHandle, &mut [WorkCompletion]) -> Result<usize>,
    h: &mut H,
    cq: CqHandle,
    wc: &mut [WorkCompletion],
) -> u32 {
    let mut empty = 0;
    for _ in 0..1_000 {
        match poll(h, cq, wc) {
            Ok(1) => {
                assert_eq!(wc[0].status, WcStatus::Success);
                return empty;
            }
            Ok(_) => empty += 1,
            Err(e) => panic!("poll_cq: {e}"),
        }
    }
    panic!("no completion after 1000 polls");
}

/// The worker: bring up two HCAs, connect, run the ping-pong.
fn run(case: &str, iters: u32) {
    let &(_, t, max_inline, _) = CASES
        .iter()
        .find(|c| c.0 == case)
        .unwrap_or_else(|| panic!("unknown case {case}"));
    let (_m, mut ps) = machine(2, FabricConfig::default());
    let p1 = ps.remove(1);
    let p0 = ps.remove(0);
    // Receives for the warm-up and two loops at a time, refilled between (not measured).
    let nrecv = 2 * iters + WARMUP;
    let mut a = up(p0, t, nrecv, max_inline);
    let mut b = up(p1, t, nrecv, max_inline);
    let (qa, qb) = (a.h.qp_num(a.qp), b.h.qp_num(b.qp));
    let (la, lb) = (a.lid, b.lid);
    connect(&mut a, qb, lb);
    connect(&mut b, qa, la);
    let grh = if t == QpType::Ud { 40 } else { 0 };
    for e in [&mut a, &mut b] {
        e.post_recvs(nrecv, 2 + grh);
    }
    let ah = |e: &mut End, dlid: u16| {
        let attr = AhAttr {
            dlid,
            port: 1,
            ..AhAttr::default()
        };
        e.h.create_ah(e.pd, &attr).unwrap()
    };
    let (ah_a, ah_b) = (ah(&mut a, lb), ah(&mut b, la));
    let msg = [0x5Au8, 0xA5];
    let wr_a = SendWr {
        wr_id: 1,
        opcode: WrOpcode::Send,
        payload: Payload::Inline(&msg),
        flags: SendFlags::SIGNALED,
        ud: (t == QpType::Ud).then_some(UdDest {
            ah: ah_a,
            remote_qpn: qb,
            remote_qkey: 0x1111_1111,
        }),
    };
    let wr_b = SendWr {
        ud: (t == QpType::Ud).then_some(UdDest {
            ah: ah_b,
            remote_qpn: qa,
            remote_qkey: 0x1111_1111,
        }),
        ..wr_a
    };
    let mut wc = [WorkCompletion::default(); 1];
    let mut empty = 0;
    for _ in 0..WARMUP {
        w_post_send(&mut a.h, a.qp, &wr_a).unwrap();
        a.h.platform().deliver();
        empty += take(w_poll, &mut a.h, a.scq, &mut wc);
        empty += take(w_poll, &mut b.h, b.rcq, &mut wc);
        w_post_send(&mut b.h, b.qp, &wr_b).unwrap();
        b.h.platform().deliver();
        empty += take(w_poll, &mut b.h, b.scq, &mut wc);
        empty += take(w_poll, &mut a.h, a.rcq, &mut wc);
    }
    for _ in 0..iters {
        m_post_send(&mut a.h, a.qp, &wr_a).unwrap();
        a.h.platform().deliver();
        empty += take(m_poll_send, &mut a.h, a.scq, &mut wc);
        empty += take(m_poll_recv, &mut b.h, b.rcq, &mut wc);
        assert_eq!(wc[0].byte_len, 2 + grh);
        m_post_send(&mut b.h, b.qp, &wr_b).unwrap();
        b.h.platform().deliver();
        empty += take(m_poll_send, &mut b.h, b.scq, &mut wc);
        empty += take(m_poll_recv, &mut a.h, a.rcq, &mut wc);
        // One poll of the now empty send CQ: the cost of a miss.
        assert_eq!(m_poll_empty(&mut a.h, a.scq, &mut wc), Ok(0));
    }
    // The same loop with the lean verb.
    for _ in 0..iters {
        m_post_send(&mut a.h, a.qp, &wr_a).unwrap();
        a.h.platform().deliver();
        take_one(m_one_send, &mut a.h, a.scq);
        let c = take_one(m_one_recv, &mut b.h, b.rcq);
        assert_eq!(c.byte_len, 2 + grh);
        m_post_send(&mut b.h, b.qp, &wr_b).unwrap();
        b.h.platform().deliver();
        take_one(m_one_send, &mut b.h, b.scq);
        take_one(m_one_recv, &mut a.h, a.rcq);
        assert_eq!(m_one_empty(&mut a.h, a.scq), Ok(None));
    }
    for e in [&mut a, &mut b] {
        e.post_recvs(2 * iters, 2 + grh);
    }
    // Whole iterations, each verb inlined into one function.
    for _ in 0..iters {
        assert!(
            m_iter_cq(&mut a, &mut b, &wr_a, &wr_b),
            "iteration (poll_cq)"
        );
    }
    for _ in 0..iters {
        assert!(
            m_iter_one(&mut a, &mut b, &wr_a, &wr_b),
            "iteration (poll_one)"
        );
    }
    assert_eq!(empty, 0, "the model completes synchronously");
    for e in [&mut a, &mut b] {
        e.post_recvs(2 * iters, 2 + grh);
    }
    // The data path: each side borrows its QP and CQs once, then the same loops.
    let (da, db) = (wr_a.ud, wr_b.ud);
    let mut pa = a.h.data_path(a.qp, a.scq, a.rcq, da).expect("data path A");
    let mut pb = b.h.data_path(b.qp, b.scq, b.rcq, db).expect("data path B");
    let mut last_a = None;
    for _ in 0..iters {
        m_path_send(&mut pa, black_box(&msg[..])).unwrap();
        pa.platform().deliver();
        let c = take_path(m_path_scqe, &mut pa);
        assert_eq!((c.wr_id, c.opcode, c.byte_len), (1, WcOpcode::Send, 0));
        let c = take_path(w_path_rcqe, &mut pb);
        assert_eq!((c.byte_len, c.opcode), (2 + grh, WcOpcode::Recv));
        w_path_send(&mut pb, &msg).unwrap();
        pb.platform().deliver();
        take_path(w_path_scqe, &mut pb);
        let c = take_path(m_path_rcqe, &mut pa);
        assert_eq!((c.byte_len, c.opcode), (2 + grh, WcOpcode::Recv));
        // Receives were posted with ids 0, 1, 2 ... and complete in order.
        assert!(last_a.is_none_or(|l| c.wr_id == l + 1), "receive order");
        last_a = Some(c.wr_id);
        assert_eq!(m_path_empty(&mut pa), Ok(None));
    }
    for _ in 0..iters {
        let ok = m_iter_path(&mut pa, &mut pb, black_box(&msg[..]), black_box(2 + grh));
        assert!(ok, "iteration (data path)");
    }
    // Receives for the rotated loop, through the paths (not measured).
    for (p, e) in [
        (&mut pa, (a.buf, a.lkey, &mut a.posted)),
        (&mut pb, (b.buf, b.lkey, &mut b.posted)),
    ] {
        let s = [Sge {
            addr: e.0,
            length: 2 + grh,
            lkey: e.1,
        }];
        for _ in 0..=2 * iters {
            let wr = RecvWr {
                wr_id: *e.2,
                sg_list: &s,
            };
            p.post_recv(&wr).unwrap();
            *e.2 += 1;
        }
    }
    // Rotated: A's first send before the loop, its last completions after (not counted).
    w_path_send(&mut pa, &msg).unwrap();
    for _ in 0..iters {
        x_peer_turn_path(&mut pa, &mut pb, &msg);
        let ok = m_loop_path(&mut pa, black_box(&msg[..]), black_box(2 + grh));
        assert!(ok, "iteration (data path, rotated)");
    }
    for _ in 0..iters {
        x_peer_turn_path(&mut pa, &mut pb, &msg);
        let ok = m_loop_all(&mut pa, black_box(&msg[..]), black_box(2 + grh));
        assert!(ok, "iteration (data path, rotated, every field)");
    }
    x_peer_turn_path(&mut pa, &mut pb, &msg);
    take_path(w_path_scqe, &mut pa);
    take_path(w_path_rcqe, &mut pa);
    for e in [&a, &b] {
        let mut got = [0u8; 2];
        let at = e.buf + u64::from(grh);
        e.h.platform()
            .sim
            .arena
            .read(at, &mut got)
            .expect("payload");
        assert_eq!(got, msg, "the last message received");
    }
    // Reading MARK keeps its stores (an only-stored static would be optimised away).
    assert_eq!(
        MARK.load(Relaxed),
        20,
        "the last wrapper entered was w_path_rcqe (A's last reply)"
    );
    for e in [&a, &b] {
        assert!(violations(&e.h.platform().sim).is_empty());
    }
    println!("{case}: {WARMUP} warm-up + {iters} measured iterations, no model violations");
}

/// The bandwidth case: messages per posted list (perftest `-l 32`, one signaled per list:
/// `-Q 32`), bytes per message, QP send depth (perftest's default `-t 128`).
const BW_LIST: u64 = 32;
const BW_SIZE: u32 = 64;
const BW_DEPTH: u32 = 128;
/// Unmeasured lists before the measured ones (every SQ slot used at least once).
const BW_WARMUP: u32 = 20;
/// Completions per poll (perftest's `CTX_POLL_BATCH`).
const BW_BATCH: usize = 16;
/// Measured lists by default.
const BW_LISTS: u32 = 300;

/// The bandwidth case's measured wrappers: (symbol suffix, label).
const BW: [(&str, &str); 4] = [
    ("m_bw_post", "post_send_list (32)"),
    ("m_bw_post_slice", "the same, prebuilt"),
    ("m_bw_poll", "poll_cq, 1 CQE"),
    ("m_bw_empty", "poll_cq, empty"),
];

/// One list of `BW_LIST` SENDs of the same gather entry, work-request ids `base..`, the
/// last one signaled: what the bandwidth sender posts (bench/src/bw/stream.rs).
#[inline(always)]
fn bw_list(
    h: &mut H,
    qp: QpHandle,
    sge: &[Sge; 1],
    base: u64,
) -> std::result::Result<usize, BadWr> {
    h.post_send_list(
        qp,
        (0..BW_LIST).map(|i| SendWr {
            wr_id: base + i,
            opcode: WrOpcode::Send,
            payload: Payload::Sges(sge),
            flags: if i == BW_LIST - 1 {
                SendFlags::SIGNALED
            } else {
                SendFlags::empty()
            },
            ud: None,
        }),
    )
}

#[inline(never)]
fn m_bw_post(
    h: &mut H,
    qp: QpHandle,
    sge: &[Sge; 1],
    base: u64,
) -> std::result::Result<usize, BadWr> {
    MARK.store(30, Relaxed);
    bw_list(h, qp, sge, base)
}

/// The same list prebuilt, as perftest keeps its work requests (and rdma-core's harness
/// posts them): passed as a slice.
#[inline(never)]
fn m_bw_post_slice(
    h: &mut H,
    qp: QpHandle,
    list: &[SendWr<'_, Ah>],
) -> std::result::Result<usize, BadWr> {
    MARK.store(34, Relaxed);
    h.post_send_list(qp, list)
}

#[inline(never)]
fn w_bw_post(
    h: &mut H,
    qp: QpHandle,
    sge: &[Sge; 1],
    base: u64,
) -> std::result::Result<usize, BadWr> {
    MARK.store(31, Relaxed);
    bw_list(h, qp, sge, base)
}

#[inline(never)]
fn m_bw_poll(h: &mut H, cq: CqHandle, wc: &mut [WorkCompletion; BW_BATCH]) -> Result<usize> {
    MARK.store(32, Relaxed);
    h.poll_cq(cq, wc)
}

#[inline(never)]
fn m_bw_empty(h: &mut H, cq: CqHandle, wc: &mut [WorkCompletion; BW_BATCH]) -> Result<usize> {
    MARK.store(33, Relaxed);
    h.poll_cq(cq, wc)
}

/// Not counted: the receiver takes the `BW_LIST` receive completions of one list (checking
/// each) and posts as many receives again.
#[inline(never)]
fn x_bw_receive(b: &mut End, first: u64) {
    let mut wc = [WorkCompletion::default(); BW_BATCH];
    let mut got = 0;
    for _ in 0..1_000 {
        let n = b.h.poll_cq(b.rcq, &mut wc).expect("receiver poll_cq");
        for c in &wc[..n] {
            assert_eq!((c.status, c.byte_len), (WcStatus::Success, BW_SIZE));
            assert_eq!(c.wr_id, first + got, "receive order");
            got += 1;
        }
        if got == BW_LIST {
            b.post_recvs(BW_LIST as u32, BW_SIZE);
            return;
        }
    }
    panic!("receiver: {got} of {BW_LIST} messages after 1000 polls");
}

/// Not counted: time passes on the model (the RC acknowledgements come back).
#[inline(never)]
fn x_bw_settle(a: &End) {
    a.h.platform().sim.delay_us(50);
}

fn connect_rc(a: &mut End, remote_qpn: u32, remote_lid: u16) {
    a.h.modify_qp(a.qp, &QpAttr::new(QpState::Init)).unwrap();
    let mut rtr = QpAttr::new(QpState::Rtr);
    rtr.path_mtu = Mtu::Mtu2048;
    rtr.dest_qp_num = remote_qpn;
    rtr.rq_psn = 0x42;
    rtr.min_rnr_timer = 12;
    rtr.ah = AhAttr {
        dlid: remote_lid,
        port: 1,
        ..AhAttr::default()
    };
    a.h.modify_qp(a.qp, &rtr).unwrap();
    let mut rts = QpAttr::new(QpState::Rts);
    rts.sq_psn = 0x42;
    a.h.modify_qp(a.qp, &rts).unwrap();
}

fn counters(e: &End) -> sim::Counters {
    let s = &e.h.platform().sim;
    s.m.borrow().fabric_ref().counters(s.hca)
}

/// The bandwidth worker: RC QPs as ib_send_bw makes them (depth 128, no inline, one
/// gather entry: 64-byte SQ slots), `lists` measured lists of 32 64-byte SENDs after
/// [`BW_WARMUP`]; per list A posts the list (one doorbell), the write reaches the model, B
/// takes and re-posts its receives, time passes, and A polls once for the list's one
/// completion, then once more on the empty CQ. Prints the model's PCIe counts per message
/// of the measured lists.
fn run_bw(lists: u32) {
    let (_m, mut ps) = machine(2, FabricConfig::default());
    let p1 = ps.remove(1);
    let p0 = ps.remove(0);
    let nrecv = 2 * BW_LIST as u32;
    let mut a = up_with(p0, QpType::Rc, nrecv, 0, BW_DEPTH);
    let mut b = up_with(p1, QpType::Rc, nrecv, 0, BW_DEPTH);
    let (qa, qb) = (a.h.qp_num(a.qp), b.h.qp_num(b.qp));
    let (la, lb) = (a.lid, b.lid);
    connect_rc(&mut a, qb, lb);
    connect_rc(&mut b, qa, la);
    b.post_recvs(nrecv, BW_SIZE);
    let payload: Vec<u8> = (0..BW_SIZE as u8)
        .map(|i| i.wrapping_mul(37) ^ 0x5A)
        .collect();
    a.h.platform().sim.arena.write(a.buf, &payload).unwrap();
    let sge = [Sge {
        addr: a.buf,
        length: BW_SIZE,
        lkey: a.lkey,
    }];
    let mut prebuilt: Vec<SendWr<'_, Ah>> = (0..BW_LIST)
        .map(|i| SendWr {
            wr_id: i,
            opcode: WrOpcode::Send,
            payload: Payload::Sges(&sge),
            flags: if i == BW_LIST - 1 {
                SendFlags::SIGNALED
            } else {
                SendFlags::empty()
            },
            ud: None,
        })
        .collect();
    let mut wc = [WorkCompletion::default(); BW_BATCH];
    let (mut ca, mut cb) = (counters(&a), counters(&b));
    for l in 0..BW_WARMUP + lists {
        let measured = l >= BW_WARMUP;
        if l == BW_WARMUP {
            (ca, cb) = (counters(&a), counters(&b));
        }
        let base = u64::from(l) * BW_LIST;
        let posted = if measured && l % 2 == 1 {
            for (i, wr) in prebuilt.iter_mut().enumerate() {
                wr.wr_id = base + i as u64;
            }
            m_bw_post_slice(&mut a.h, a.qp, black_box(&prebuilt))
        } else if measured {
            m_bw_post(&mut a.h, a.qp, black_box(&sge), black_box(base))
        } else {
            w_bw_post(&mut a.h, a.qp, &sge, base)
        };
        assert_eq!(posted, Ok(BW_LIST as usize));
        a.h.platform().deliver();
        x_bw_receive(&mut b, base);
        x_bw_settle(&a);
        let n = if measured {
            m_bw_poll(&mut a.h, a.scq, &mut wc)
        } else {
            a.h.poll_cq(a.scq, &mut wc)
        };
        assert_eq!(n, Ok(1), "list {l}: its one signaled completion");
        assert_eq!(
            (wc[0].status, wc[0].wr_id, wc[0].opcode),
            (WcStatus::Success, base + BW_LIST - 1, WcOpcode::Send)
        );
        if measured {
            assert_eq!(m_bw_empty(&mut a.h, a.scq, &mut wc), Ok(0));
        }
    }
    let mut got = vec![0u8; BW_SIZE as usize];
    b.h.platform().sim.arena.read(b.buf, &mut got).unwrap();
    assert_eq!(got, payload, "the last message received");
    assert_eq!(
        MARK.load(Relaxed),
        33,
        "the last wrapper entered was m_bw_empty"
    );
    for e in [&a, &b] {
        assert!(violations(&e.h.platform().sim).is_empty());
    }
    let msgs = f64::from(lists) * BW_LIST as f64;
    let (da, db) = (delta(counters(&a), ca), delta(counters(&b), cb));
    println!("bw: {BW_WARMUP} warm-up + {lists} measured lists of {BW_LIST}, no model violations");
    for (who, d) in [("sender", da), ("receiver", db)] {
        let per = |v: u64| v as f64 / msgs;
        println!(
            "pcie {who}: mmio_writes {:.4} bf_bytes {:.4} dma_reads {:.4} dma_read_bytes {:.4} \
             icm_reads {:.4} dma_writes {:.4} dma_write_bytes {:.4} packets_sent {:.4} \
             packets_received {:.4} interrupts {:.4}",
            per(d.mmio_writes),
            per(d.blueflame_bytes),
            per(d.dma_reads),
            per(d.dma_read_bytes),
            per(d.icm_reads),
            per(d.dma_writes),
            per(d.dma_write_bytes),
            per(d.packets_sent),
            per(d.packets_received),
            per(d.interrupts),
        );
    }
}

/// `after - before`, field by field.
fn delta(after: sim::Counters, before: sim::Counters) -> sim::Counters {
    sim::Counters {
        mmio_reads: after.mmio_reads - before.mmio_reads,
        mmio_writes: after.mmio_writes - before.mmio_writes,
        blueflame_bytes: after.blueflame_bytes - before.blueflame_bytes,
        dma_reads: after.dma_reads - before.dma_reads,
        dma_read_bytes: after.dma_read_bytes - before.dma_read_bytes,
        dma_writes: after.dma_writes - before.dma_writes,
        dma_write_bytes: after.dma_write_bytes - before.dma_write_bytes,
        icm_reads: after.icm_reads - before.icm_reads,
        icm_writes: after.icm_writes - before.icm_writes,
        interrupts: after.interrupts - before.interrupts,
        msix_messages: after.msix_messages - before.msix_messages,
        intx_assertions: after.intx_assertions - before.intx_assertions,
        commands: after.commands - before.commands,
        packets_sent: after.packets_sent - before.packets_sent,
        packets_received: after.packets_received - before.packets_received,
        packets_dropped: after.packets_dropped - before.packets_dropped,
        violations: after.violations - before.violations,
    }
}

/// Run the bandwidth worker under callgrind and print its table.
fn report_bw(lists: u32) -> std::result::Result<(), String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::env::temp_dir().join(format!("hotpath-{}-bw.callgrind", std::process::id()));
    let st = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg("--compress-strings=no")
        .arg("--compress-pos=no")
        .arg(&me)
        .args(["run", "bw", &lists.to_string()])
        .output()
        .map_err(|e| format!("cannot run valgrind ({e}); install valgrind"))?;
    if !st.status.success() {
        return Err(format!(
            "callgrind run for bw failed:\n{}",
            String::from_utf8_lossy(&st.stderr)
        ));
    }
    let text = std::fs::read_to_string(&out).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&out);
    let prof = parse_callgrind(&text);
    let mut per = [0f64; BW.len()];
    let mut notes = Vec::new();
    for (i, (name, _)) in BW.iter().enumerate() {
        let (ir, calls, outlined) =
            cost_of(&prof, name).ok_or(format!("bw: no calls of {name} recorded"))?;
        per[i] = ir as f64 / calls as f64 - MARK_COST;
        for f in outlined {
            notes.push(format!("bw: {name} calls {f} (not inlined; counted)"));
        }
    }
    println!();
    println!(
        "Bandwidth path (RC, lists of {BW_LIST} {BW_SIZE}-byte SENDs from one gather entry, one \
         signaled per list, {lists} measured lists after {BW_WARMUP}): instructions per call, \
         and per message (the list's post and its one completion's poll, divided by {BW_LIST}), \
         the list made on the fly or prebuilt:"
    );
    println!();
    print!("| {:<12}", "case");
    for (_, label) in BW {
        print!(" | {label:>19}");
    }
    println!(" | per message, on the fly | **per message, prebuilt** |");
    print!("|{}", "-".repeat(14));
    for _ in 0..BW.len() {
        print!("|{}:", "-".repeat(20));
    }
    println!("|{}:|{}:|", "-".repeat(24), "-".repeat(26));
    print!("| {:<12}", "RC, 64 B");
    for v in per {
        print!(" | {v:>19.1}");
    }
    let n = BW_LIST as f64;
    println!(
        " | {:>23.2} | {:>25.2} |",
        (per[0] + per[2]) / n,
        (per[1] + per[2]) / n
    );
    for n in notes {
        println!("  note: {n}");
    }
    let stdout = String::from_utf8_lossy(&st.stdout);
    println!();
    println!("PCIe per message (the device model's counters over the measured lists):");
    for line in stdout.lines().filter(|l| l.starts_with("pcie ")) {
        println!("  {}", &line[5..]);
    }
    Ok(())
}

/// Per-function costs from a callgrind output file (`--compress-strings=no
/// --compress-pos=no`, event Ir only).
#[derive(Default)]
struct Profile {
    /// (function, self Ir) in file order, summed per function.
    self_ir: Vec<(String, u64)>,
    /// (caller, callee, calls, inclusive Ir).
    arcs: Vec<(String, String, u64, u64)>,
}

fn parse_callgrind(text: &str) -> Profile {
    let mut p = Profile::default();
    let mut cur = String::new();
    let mut callee: Option<String> = None;
    let mut pending_calls: Option<u64> = None;
    let add_self = |p: &mut Profile, f: &str, v: u64| {
        if let Some(e) = p.self_ir.iter_mut().find(|e| e.0 == f) {
            e.1 += v;
        } else {
            p.self_ir.push((f.to_string(), v));
        }
    };
    for line in text.lines() {
        if let Some(f) = line.strip_prefix("fn=") {
            cur = f.to_string();
            continue;
        }
        if let Some(f) = line.strip_prefix("cfn=") {
            callee = Some(f.to_string());
            continue;
        }
        if let Some(c) = line.strip_prefix("calls=") {
            pending_calls = c.split_whitespace().next().and_then(|n| n.parse().ok());
            continue;
        }
        let first = line.chars().next().unwrap_or(' ');
        if !(first.is_ascii_digit() || first == '+' || first == '-' || first == '*') {
            continue;
        }
        // A cost line: position(s) then the Ir count (the last field).
        let Some(ir) = line
            .split_whitespace()
            .last()
            .and_then(|v| v.parse::<u64>().ok())
        else {
            continue;
        };
        match pending_calls.take() {
            Some(n) => {
                let to = callee.take().unwrap_or_default();
                p.arcs.push((cur.clone(), to, n, ir));
            }
            None => add_self(&mut p, &cur, ir),
        }
    }
    p
}

/// Instructions and call count of the wrapper whose name ends in `name`, and the functions
/// it calls that were not inlined: its self cost plus the inclusive cost of its calls (the
/// model is never called from a measured wrapper, see [`BenchPlatform`]).
fn cost_of(p: &Profile, name: &str) -> Option<(u64, u64, Vec<String>)> {
    let sym = |f: &str| f.ends_with(&format!("::{name}"));
    let calls: u64 = p.arcs.iter().filter(|a| sym(&a.1)).map(|a| a.2).sum();
    if calls == 0 {
        return None;
    }
    let own: u64 = p.self_ir.iter().filter(|e| sym(&e.0)).map(|e| e.1).sum();
    let callees = p.arcs.iter().filter(|a| sym(&a.0) && !a.1.contains("::x_"));
    let inclusive: u64 = callees.clone().map(|a| a.3).sum();
    let names = callees.map(|a| a.1.clone()).collect();
    Some((own + inclusive, calls, names))
}

fn report(iters: u32) -> std::result::Result<(), String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = std::env::temp_dir();
    println!(
        "Latency path, instructions per call (callgrind Ir, {iters} measured iterations after \
         {WARMUP} warm-up, steady state)"
    );
    println!(
        "counted: the driver and its memory-backed UAR/BlueFlame stores; not counted: the \
         device model. Iteration = post_send + poll of the send CQE + poll of the receive CQE."
    );
    println!();
    print!("| {:<32}", "case");
    for (_, label) in MEASURED {
        print!(" | {label:>14}");
    }
    println!(" | iteration, poll_cq | iteration, poll_one |");
    print!("|{}", "-".repeat(34));
    for _ in 0..MEASURED.len() + 2 {
        print!("|{}:", "-".repeat(15));
    }
    println!("|");
    let mut iterations = Vec::new();
    let mut paths = Vec::new();
    for (case, _, _, desc) in CASES {
        let out = dir.join(format!("hotpath-{}-{case}.callgrind", std::process::id()));
        let st = Command::new("valgrind")
            .arg("--tool=callgrind")
            .arg(format!("--callgrind-out-file={}", out.display()))
            .arg("--compress-strings=no")
            .arg("--compress-pos=no")
            .arg(&me)
            .args(["run", case, &iters.to_string()])
            .output()
            .map_err(|e| format!("cannot run valgrind ({e}); install valgrind"))?;
        if !st.status.success() {
            return Err(format!(
                "callgrind run for {case} failed:\n{}",
                String::from_utf8_lossy(&st.stderr)
            ));
        }
        let text = std::fs::read_to_string(&out).map_err(|e| e.to_string())?;
        let _ = std::fs::remove_file(&out);
        let prof = parse_callgrind(&text);
        print!("| {desc:<32}");
        let mut notes = Vec::new();
        let mut per = [0f64; MEASURED.len()];
        for (i, (name, _)) in MEASURED.iter().enumerate() {
            let (ir, calls, outlined) =
                cost_of(&prof, name).ok_or(format!("{case}: no calls of {name} recorded"))?;
            per[i] = ir as f64 / calls as f64 - MARK_COST;
            for f in outlined {
                notes.push(format!("{case}: {name} calls {f} (not inlined; counted)"));
            }
            print!(" | {:>14.1}", per[i]);
        }
        println!(
            " | {:>18.1} | {:>19.1} |",
            per[0] + per[1] + per[2],
            per[0] + per[4] + per[5]
        );
        for n in notes {
            println!("  note: {n}");
        }
        let mut whole = Vec::new();
        for name in ["m_iter_cq", "m_iter_one"] {
            let (ir, calls, outlined) =
                cost_of(&prof, name).ok_or(format!("{case}: no calls of {name} recorded"))?;
            whole.push(ir as f64 / calls as f64 - MARK_COST);
            for f in outlined {
                println!("  note: {case}: {name} calls {f} (not inlined; counted)");
            }
        }
        iterations.push((desc, whole[0], whole[1]));
        let mut dp = [0f64; PATH.len() + 3];
        let whole = ["m_iter_path", "m_loop_path", "m_loop_all"];
        for (i, name) in PATH.iter().map(|p| p.0).chain(whole).enumerate() {
            let (ir, calls, outlined) =
                cost_of(&prof, name).ok_or(format!("{case}: no calls of {name} recorded"))?;
            dp[i] = ir as f64 / calls as f64 - MARK_COST;
            for f in outlined {
                println!("  note: {case}: {name} calls {f} (not inlined; counted)");
            }
        }
        paths.push((desc, dp));
    }
    println!();
    println!(
        "Whole iteration in one function (the three verbs inlined into one loop body, as an \
         application's loop; the peer's turn in between is not counted, the call to it is):"
    );
    println!();
    println!(
        "| {:<32} | iteration, poll_cq | iteration, poll_one |",
        "case"
    );
    println!(
        "|{}|{}:|{}:|",
        "-".repeat(34),
        "-".repeat(19),
        "-".repeat(20)
    );
    for (desc, cq, one) in iterations {
        println!("| {desc:<32} | {cq:>18.1} | {one:>19.1} |");
    }
    println!();
    println!(
        "Data path (verbs::DataPath, validated once per loop; the benchmark crate's measured \
         loop): per call, the iteration as the sum of send + send CQE + receive CQE, and the \
         whole iteration in one function, reading what the benchmark reads (both statuses, the \
         receive's byte_len) or every field:"
    );
    println!();
    print!("| {:<32}", "case");
    for (_, label) in PATH {
        print!(" | {label:>14}");
    }
    println!(
        " | iteration (sum) | one function, call inside | one function, rotated | rotated, every field |"
    );
    print!("|{}", "-".repeat(34));
    for _ in 0..PATH.len() {
        print!("|{}:", "-".repeat(15));
    }
    let w = [16, 26, 22, 20];
    let dashes = w.map(|n| "-".repeat(n));
    println!(
        "|{}:|{}:|{}:|{}:|",
        dashes[0], dashes[1], dashes[2], dashes[3]
    );
    for (desc, dp) in paths {
        print!("| {desc:<32}");
        for v in &dp[..PATH.len()] {
            print!(" | {v:>14.1}");
        }
        println!(
            " | {:>15.1} | {:>25.1} | {:>21.1} | {:>19.1} |",
            dp[0] + dp[1] + dp[2],
            dp[PATH.len()],
            dp[PATH.len() + 1],
            dp[PATH.len() + 2]
        );
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run") => {
            let case = args.get(1).map_or("ud", String::as_str);
            let iters = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
            if case == "bw" {
                run_bw(iters);
            } else {
                run(case, iters);
            }
        }
        Some("bw") => {
            let lists = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(BW_LISTS);
            if let Err(e) = report_bw(lists) {
                eprintln!("hotpath: {e}");
                std::process::exit(1);
            }
        }
        other => {
            let iters = other.and_then(|s| s.parse().ok()).unwrap_or(1000);
            if let Err(e) = report(iters).and_then(|()| report_bw(BW_LISTS)) {
                eprintln!("hotpath: {e}");
                std::process::exit(1);
            }
        }
    }
}
