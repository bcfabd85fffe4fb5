//! Special QP0 and subnet management packets: CONF_SPECIAL_QP, QP0 as an MLX QP, MLX send WQEs
//! that carry their own LRH/BTH/DETH, receives on QP0, directed-route SMPs to the node at the
//! other end of a cable, MAD_IFC Set for the local port, and a minimal subnet manager for two
//! nodes cabled back to back.
//!
//! Sources (docs/driver.md "QP0 and SMPs"): docs/hardware.md §4.3 (special QP block, MLX
//! transport), §4.4 (QP0 context: GSI/SMI mtu_msgmax, sched_queue 0x3F | (port − 1) << 6), §5
//! (WQE ownership, doorbells, CQEs), §6.2/§6.3 (MAD_IFC, ports without an SM); the MLX segment
//! (`mlx4_wqe_mlx_seg`) from Linux include/linux/mlx4/qp.h and what `build_mlx_header` in
//! Linux drivers/infiniband/hw/mlx4/qp.c puts in it; packet headers, the directed-route SMP
//! format and the SMI rules C14-9/C14-13 from the IBA specification vol. 1 (§7.7, §9.2,
//! §9.3, §14.2), cross-checked against Linux drivers/infiniband/core/smi.c.
//!
//! All of this is new code beside the data path: QP0 lives outside the verbs QP table, on
//! its own CQ, polled here.

use crate::cmd::Out;
use crate::cq::{next_cqe, CqHandle};
use crate::error::Error;
use crate::headers::{Bth, Deth, Lrh, UdHeaders, BTH_UD_SEND_ONLY, LNH_IBA_LOCAL};
use crate::hw::{ctrl, mlx, opcode, optpar, qpc, DataSeg, QpContext};
use crate::mad::attr;
use crate::platform::{DmaRegion, Platform};
use crate::regs::{uar, Opcode};
use crate::sq::{self, SqCursor};
use crate::wq::Wq;
use crate::wqe::SendWqe;
use crate::Hca;
use zerocopy::{FromBytes, IntoBytes};

pub use crate::mad::method;
use crate::mad::{class, Mad, DR_DIRECTION, INITIAL_PATH, PERMISSIVE_LID};

/// PortInfo port states (§6.2).
pub mod port_state {
    pub const DOWN: u8 = 1;
    pub const ARMED: u8 = 3;
    pub const ACTIVE: u8 = 4;
}

/// QP0 geometry: SQ slots of 128 bytes, 8 RQ slots of 16 bytes (one data segment); SQ first
/// (larger stride). An MLX WQE is 80 bytes (MLX segment, inline headers, one data segment,
/// the ICRC segment), so a slot is the next power of two, as Linux's `set_kernel_sq_size`
/// gives QP0 (its `send_wqe_overhead` for SMI plus one data segment rounds up to 128). The
/// SQ has Linux's headroom (§5.3: 2 KiB + one WQE, 17 slots) on top of the one SMP the agent
/// has outstanding: 32 slots.
const SQ_SHIFT: u32 = 7;
const SQ_SPARE: u32 = sq::spare_wqes(SQ_SHIFT);
const SQ_LOG: u32 = (SQ_SPARE + 1).next_power_of_two().trailing_zeros();
/// DS of an MLX WQE in 16-byte units: MLX segment 1, inline headers 2, data segment 1, ICRC 1.
const MLX_DS: u32 = 5;
const RQ_LOG: u32 = 3;
const RQ_SHIFT: u32 = 4;
const RQ_OFF: usize = 1 << (SQ_LOG + SQ_SHIFT);
/// The QP0 buffer: SQ, then RQ, a power of two.
const BUF_BYTES: usize = (RQ_OFF + (1 << (RQ_LOG + RQ_SHIFT))).next_power_of_two();
/// MAD buffers: the send MAD at 0, receive buffer k at RECV_OFF + k · RECV_STRIDE (40-byte GRH
/// area + 256-byte MAD).
const MAD: usize = crate::mad::MAD_BYTES;
const RECV_OFF: usize = 512;
const RECV_STRIDE: usize = 512;
const RECV_BYTES: u32 = 40 + MAD as u32;

/// QP0 of one port, owned by the driver after CONF_SPECIAL_QP.
pub struct SmpAgent {
    port: u8,
    base: u32,
    qpn: u32,
    pd: u32,
    cq: CqHandle,
    buf: Option<DmaRegion>,
    mads: Option<DmaRegion>,
    mtt: u32,
    /// log2 of the page the buffer's one MTT entry covers.
    page_shift: u32,
    dbrec_idx: usize,
    dbrec: *mut u8,
    dbrec_bus: u64,
    /// The send queue (work-request ids: the SMPs' TIDs).
    sq: Wq,
    rq_head: u32,
    rq_tail: u32,
    psn: u32,
    tid: u64,
    /// CONF_SPECIAL_QP gave the block to the driver (undone with CONF_SPECIAL_QP 0).
    hw_owned: bool,
    /// QP0 left RESET (a 2RST_QP is needed to bring it back; none for a QP still in RESET,
    /// as Linux's `_mlx4_ib_modify_qp` sends no command for RESET to RESET).
    out_of_reset: bool,
}

impl SmpAgent {
    pub fn port(&self) -> u8 {
        self.port
    }
    /// QPN of QP0 (special QP base + port − 1, §4.3).
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
}

/// Which SMP to send: method, attribute, modifier, 64 bytes of SMP data.
#[derive(Clone, Copy, Debug)]
pub struct Smp {
    pub method: u8,
    pub attr: u16,
    pub attr_mod: u32,
    pub data: [u8; 64],
}

/// Build a directed-route SMP for the node one hop away through `port`, as an SM's SMI
/// sends it (IBA vol. 1 14.2 format; C14-9:1 advances the hop pointer to 1 before sending).
pub fn build_dr_smp(b: &mut [u8; MAD], s: &Smp, port: u8, tid: u64) {
    b.fill(0);
    let m = Mad::at_mut(b).expect("a whole MAD");
    m.request(class::SUBN_DR, s.method, s.attr, s.attr_mod);
    // After the sender's SMI: hop pointer 1 of 1 hop.
    m.hop_ptr = 1;
    m.hop_cnt = 1;
    m.tid.set(tid);
    m.dr_slid.set(PERMISSIVE_LID);
    m.dr_dlid.set(PERMISSIVE_LID);
    *m.smp_data_mut() = s.data;
    // Initial path[1]: the port the SMP leaves through.
    m.data[INITIAL_PATH.start + 1] = port;
}

/// The response to `tid` as the SM's SMI accepts it (C14-13:4: D set, hop pointer back at 0):
/// `Some(Ok(data))`, `Some(Err(status))` for a non-zero MAD status, `None` if it is not ours.
pub fn parse_dr_response(m: &[u8], tid: u64, attr_id: u16) -> Option<Result<[u8; 64], u16>> {
    let m = Mad::at(m)?;
    if m.base_version != crate::mad::VERSION
        || m.mgmt_class != class::SUBN_DR
        || m.method != method::GET_RESP
    {
        return None;
    }
    let status = m.status.get();
    if status & DR_DIRECTION == 0 || m.hop_ptr != 0 || m.tid.get() != tid {
        return None;
    }
    if m.attr_id.get() != attr_id {
        return None;
    }
    if status & !DR_DIRECTION != 0 {
        return Some(Err(status & !DR_DIRECTION));
    }
    Some(Ok(*m.smp_data()))
}

/// LRH (VL15, LNH 2), BTH (UD SEND Only) and DETH of an SMP from QP0 to QP0 with a 256-byte
/// payload, DLID = SLID = permissive (IBA vol. 1 7.7, 9.2, 9.3; Linux `build_mlx_header`): pad
/// 0 (256 is 4-aligned), DestQP 0, Q_Key 0 and SrcQP 0 (the logical QP0, as Linux writes it).
pub(crate) fn smp_headers(sl: u8, pkey: u16, psn: u32) -> UdHeaders {
    // PktLen: 4-byte words from the LRH through the ICRC.
    let words = (size_of::<UdHeaders>() + MAD + 4) / 4;
    UdHeaders {
        lrh: Lrh::new(
            15,
            sl,
            LNH_IBA_LOCAL,
            PERMISSIVE_LID,
            words as u16,
            PERMISSIVE_LID,
        ),
        bth: Bth::new(BTH_UD_SEND_ONLY, 0, pkey, 0, psn),
        deth: Deth::new(0, 0),
    }
}

/// An 80-byte MLX send WQE (without the owner/opcode dword, which the poster writes last), laid
/// out as Linux's `_mlx4_ib_post_send` builds one for QP0 (`build_mlx_header`, the data
/// segment, `set_mlx_icrc_seg`): MLX segment; at 16 one inline segment with the 28-byte
/// headers (it ends before the 64-byte boundary, so one segment suffices); at 48 the pointer
/// segment with the MAD; at 64 the ICRC segment, an inline segment of 4 zero bytes that the
/// hardware fills with the packet's ICRC. DS = 5 counts all of them.
///
/// # Safety
/// `w`'s slot is at least 80 bytes (QP0's are 128).
pub(crate) unsafe fn build_mlx_wqe(w: &mut SendWqe, hdr: &UdHeaders, lkey: u32, mad_bus: u64) {
    const { assert!(80 <= 1 << SQ_SHIFT, "an MLX WQE fits one QP0 slot") };
    let sl = u32::from(hdr.lrh.sl());
    let flags = mlx::VL15 | mlx::SLR | ctrl::CQ_UPDATE | (sl << mlx::SL_SHIFT);
    w.mlx(MLX_DS, flags, PERMISSIVE_LID);
    // The headers: one inline segment at 16..48.
    // SAFETY: 16..48 of the slot (caller: at least 80 bytes).
    let end = unsafe { w.inline(16, hdr.as_bytes()) };
    debug_assert_eq!(end, 48);
    // ICRC segment first (it starts a 64-byte chunk: its data before its byte count), then
    // the data segment (byte count last), as Linux orders them.
    // SAFETY: 64..80 of the slot (caller).
    unsafe { w.icrc(64) };
    // SAFETY: 48..64 of the slot (caller).
    unsafe { w.data(48, mad_bus, lkey, MAD as u32) };
}

/// What the back-to-back subnet manager did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmReport {
    pub port: u8,
    pub local_lid: u16,
    pub peer_lid: u16,
    pub peer_node_guid: u64,
    /// SMPs sent (requests, retries included).
    pub smps: u32,
}

/// Subnet manager parameters (all waits bounded).
#[derive(Clone, Copy, Debug)]
pub struct SmConfig {
    /// LID of this (the SM's) port; the SM LID of both ports.
    pub local_lid: u16,
    /// LID given to the peer's port.
    pub peer_lid: u16,
    /// How long to wait for the physical link (the peer may still be booting).
    pub link_timeout_ms: u64,
    /// How long to wait for each SMP response.
    pub smp_timeout_ms: u64,
    /// Attempts per SMP.
    pub smp_attempts: u32,
}

impl Default for SmConfig {
    fn default() -> Self {
        SmConfig {
            local_lid: 1,
            peer_lid: 2,
            link_timeout_ms: 30_000,
            smp_timeout_ms: 200,
            smp_attempts: 5,
        }
    }
}

/// Bytes of a region the device writes, read volatile; `None` (nothing read) if they lie
/// outside it.
fn vread<const N: usize>(r: &DmaRegion, off: usize) -> Option<[u8; N]> {
    if off.checked_add(N)? > r.size() {
        return None;
    }
    let mut out = [0u8; N];
    for (k, b) in out.iter_mut().enumerate() {
        // SAFETY: off + k < size (checked above) and the region is valid for `size` bytes.
        *b = unsafe { core::ptr::read_volatile(r.as_ptr().add(off + k)) };
    }
    Some(out)
}

impl<P: Platform> Hca<P> {
    /// CONF_SPECIAL_QP (0x023): in_mod = base QPN of the 8-QP special block, 0 = release it
    /// (§4.3).
    pub fn conf_special_qp(&mut self, base: u32) -> Result<(), Error> {
        self.cmd(Opcode::CONF_SPECIAL_QP, 0, base, 0, Out::None)
            .map(|_| ())
    }

    /// Take QP0 of `port`: reserve the special block (the first free 8-aligned block),
    /// CONF_SPECIAL_QP, a CQ, QP0 as an MLX QP through RST→INIT→RTR→RTS, and 8 receive
    /// buffers posted. Undo with [`Self::smp_close`] before closing the HCA.
    pub fn smp_open(&mut self, port: u8) -> Result<SmpAgent, Error> {
        self.check_port(port)?;
        let base = self.reserve_special_block()?;
        let mut a = SmpAgent {
            port,
            base,
            qpn: base + u32::from(port) - 1,
            pd: 0,
            cq: CqHandle { slot: 0, cqn: 0 },
            buf: None,
            mads: None,
            mtt: u32::MAX,
            page_shift: 12,
            dbrec_idx: usize::MAX,
            dbrec: core::ptr::null_mut(),
            dbrec_bus: 0,
            sq: Wq::new(0, SQ_LOG, SQ_SHIFT, (1 << SQ_LOG) - SQ_SPARE, 1),
            rq_head: 0,
            rq_tail: 0,
            psn: 0,
            tid: 0x1b6b_0000_0000_0000 | (u64::from(port) << 32),
            hw_owned: false,
            out_of_reset: false,
        };
        match self.smp_open_inner(&mut a) {
            Ok(()) => Ok(a),
            Err(e) => {
                let _ = self.smp_close(a);
                Err(e)
            }
        }
    }

    /// The first 8-aligned block of 8 free QPNs above the reserved ones (Linux puts it right
    /// after them; QPs created earlier may have taken those numbers).
    fn reserve_special_block(&mut self) -> Result<u32, Error> {
        let end = self.caps.reserved_qps + self.qpns_capacity();
        let mut base = self.caps.reserved_qps.div_ceil(8) * 8;
        while base.saturating_add(8) <= end {
            let mut k = 0;
            while k < 8 && self.qpns.alloc_at(base + k).is_ok() {
                k += 1;
            }
            if k == 8 {
                return Ok(base);
            }
            for j in 0..k {
                self.qpns.free(base + j);
            }
            base += 8;
        }
        Err(Error::NoResources(
            "a free block of 8 QPNs for the special QPs",
        ))
    }

    fn smp_open_inner(&mut self, a: &mut SmpAgent) -> Result<(), Error> {
        a.pd = self.pds.alloc().ok_or(Error::NoResources("PDs"))?;
        a.cq = self.create_cq_raw(16)?;
        let buf = self
            .p
            .dma_alloc(BUF_BYTES, BUF_BYTES)
            .ok_or(Error::NoMemory("QP0 buffer"))?;
        // §5.4: every SQ slot starts software-owned in pass 0 (owner bit 1), with its size
        // and every 64-byte chunk after the first stamped, as Linux prepares kernel QPs.
        // SAFETY: the SQ is the first RQ_OFF bytes of the buffer (aligned to its size):
        // 1 << SQ_LOG slots of 1 << SQ_SHIFT bytes.
        unsafe { sq::init_slots(buf.as_ptr(), SQ_LOG, SQ_SHIFT) };
        // One MTT entry covers the contiguous buffer, as for every queue.
        a.page_shift = crate::mr::covering_page_shift(buf.bus(), BUF_BYTES as u64);
        let page = buf.bus() & !((1u64 << a.page_shift) - 1);
        a.buf = Some(buf);
        a.mads = Some(
            self.p
                .dma_alloc(RECV_OFF + 8 * RECV_STRIDE, 4096)
                .ok_or(Error::NoMemory("QP0 MAD buffers"))?,
        );
        a.mtt = self
            .mtts
            .alloc(1)
            .ok_or(Error::NoResources("MTT entries"))?;
        self.write_mtt(a.mtt, &[page])?;
        let (i, bus, ptr) = self.alloc_dbrec()?;
        (a.dbrec_idx, a.dbrec_bus, a.dbrec) = (i, bus, ptr);
        // SAFETY: ptr is our 4-byte RQ doorbell record.
        unsafe { core::ptr::write_volatile(a.dbrec as *mut u32, 0) };
        self.conf_special_qp(a.base)?;
        a.hw_owned = true;
        // optpar bits (§4.4) as Linux's `__mlx4_ib_modify_qp` gives QP0: P_Key index and
        // Q_Key at RST2INIT; at INIT2RTR the sched queue goes without an optpar bit and the
        // port's counter, if any, with COUNTER_INDEX; nothing at RTR2RTS.
        let (counter, with_counter) = self.qp_counter(a.port);
        let rtr_opt = if with_counter {
            optpar::COUNTER_INDEX
        } else {
            0
        };
        for (op, state, opt) in [
            (
                Opcode::RST2INIT_QP,
                qpc::state::INIT,
                optpar::PKEY_INDEX | optpar::Q_KEY,
            ),
            (Opcode::INIT2RTR_QP, qpc::state::RTR, rtr_opt),
            (Opcode::RTR2RTS_QP, qpc::state::RTS, 0),
        ] {
            let mut ctx = self.qp0_context(a, state);
            if state == qpc::state::RTR {
                ctx.pri_path.counter_index = counter;
            }
            let b = self.cmd.inbox_clear();
            if b.len() < 8 + 248 {
                return Err(Error::NoMemory("command mailbox"));
            }
            b[0..4].copy_from_slice(&opt.to_be_bytes());
            // The context lands at mailbox + 8 (§4.4).
            b[8..8 + size_of::<QpContext>()].copy_from_slice(ctx.as_bytes());
            self.cmd_in(op, a.qpn, 0)?;
            a.out_of_reset = true;
        }
        for _ in 0..(1u32 << RQ_LOG) {
            self.qp0_post_recv(a);
        }
        Ok(())
    }

    /// QP0's context for the transition into `state` (INIT, RTR or RTS) (§4.4), with the
    /// fields Linux's `__mlx4_ib_modify_qp` fills for an SMI QP at that transition: sizes,
    /// MTU, UAR, PD, CQs and params1 every time; P_Key index, Q_Key, doorbell record,
    /// reserved L_Key and the MTT at RST2INIT only; the QP0 sched queue at INIT2RTR only.
    fn qp0_context(&self, a: &SmpAgent, state: u32) -> QpContext {
        let mut ctx = QpContext::default();
        ctx.flags
            .set((state << qpc::STATE_SHIFT) | (qpc::st::MLX << qpc::ST_SHIFT) | qpc::PM_MIGRATED);
        ctx.pd.set(a.pd);
        ctx.mtu_msgmax = qpc::MTU_MSGMAX_SMI;
        ctx.rq_size_stride = ((RQ_LOG << 3) | (RQ_SHIFT - 4)) as u8;
        ctx.sq_size_stride = ((SQ_LOG << 3) | (SQ_SHIFT - 4)) as u8;
        ctx.usr_page.set(self.kar);
        ctx.local_qpn.set(a.qpn);
        ctx.params1.set(qpc::ACK_REQ_FREQ | qpc::FRE);
        ctx.cqn_send.set(a.cq.cqn);
        ctx.cqn_recv.set(a.cq.cqn);
        match state {
            qpc::state::INIT => {
                ctx.pri_path.pkey_index = 0;
                ctx.qkey.set(0);
                ctx.db_rec_addr.set(a.dbrec_bus);
                ctx.rlkey_roce_mode = qpc::RLKEY;
                ctx.log_page_size = (a.page_shift - 12) as u8;
                let mtt_addr = u64::from(a.mtt) * 8;
                ctx.mtt_base_addr_h = (mtt_addr >> 32) as u8;
                ctx.mtt_base_addr_l.set(mtt_addr as u32);
            }
            qpc::state::RTR => {
                ctx.pri_path.sched_queue =
                    qpc::SCHED_QUEUE_QP0 | ((a.port - 1) << qpc::SCHED_PORT_SHIFT)
            }
            _ => {}
        }
        ctx
    }

    /// Post receive WQE `rq_head` (§5.6): one data segment over receive buffer slot.
    fn qp0_post_recv(&mut self, a: &mut SmpAgent) {
        let lkey = self.local_dma_lkey();
        let k = (a.rq_head & ((1 << RQ_LOG) - 1)) as usize;
        let Some(mads) = a.mads.as_ref() else { return };
        let addr = mads.bus_at(RECV_OFF + k * RECV_STRIDE);
        let Some(buf) = a.buf.as_mut() else { return };
        let w = &mut buf.bytes_mut()[RQ_OFF + (k << RQ_SHIFT)..][..1 << RQ_SHIFT];
        let Ok(seg) = DataSeg::mut_from_bytes(w) else {
            return;
        };
        seg.byte_count.set(RECV_BYTES);
        seg.lkey.set(lkey);
        seg.addr.set(addr);
        a.rq_head = a.rq_head.wrapping_add(1);
        self.p.wmb();
        // SAFETY: dbrec is our 4-byte RQ doorbell record.
        unsafe { core::ptr::write_volatile(a.dbrec as *mut u32, (a.rq_head & 0xFFFF).to_be()) };
    }

    /// Release QP0 (2RST), the special block (CONF_SPECIAL_QP 0: the firmware answers SMPs
    /// again), its CQ and memory. Best effort: every step runs; the first error is returned.
    pub fn smp_close(&mut self, mut a: SmpAgent) -> Result<(), Error> {
        let mut first = Ok(());
        let mut keep = |r: Result<(), Error>| {
            if first.is_ok() {
                first = r;
            }
        };
        if a.out_of_reset {
            keep(
                self.cmd(Opcode::ERR2RST_QP, 0, a.qpn, 2, Out::None)
                    .map(|_| ()),
            );
        }
        if a.hw_owned {
            keep(self.conf_special_qp(0));
        }
        if a.cq.cqn != 0 {
            let slot = a.cq.slot as usize;
            keep(self.destroy_cq_index(slot));
        }
        if a.dbrec_idx != usize::MAX {
            self.free_dbrec(a.dbrec_idx);
        }
        if a.mtt != u32::MAX {
            self.mtts.free(a.mtt);
        }
        a.buf = None;
        a.mads = None;
        if a.pd != 0 {
            self.pds.free(a.pd);
        }
        for k in 0..8 {
            self.qpns.free(a.base + k);
        }
        first
    }

    /// Send one directed-route SMP to the node at the other end of the agent's port and wait
    /// (bounded by `timeout_ms`) for its response. Errors: [`Error::SmpTimeout`] (no answer:
    /// no peer, link down, SMP discarded), [`Error::MadStatus`], [`Error::SmpSend`].
    pub fn smp_dr(
        &mut self,
        a: &mut SmpAgent,
        s: &Smp,
        timeout_ms: u64,
    ) -> Result<[u8; 64], Error> {
        // Every send gathers from the one MAD buffer: before rewriting it, wait (bounded)
        // until the device has completed the previous send (its CQE retires the slot), so a
        // send that timed out waiting for its answer cannot be read back half rewritten.
        let start = self.p.now_ns();
        while a.sq.head != a.sq.tail {
            // A late answer to the previous SMP is consumed and dropped here.
            let _ = self.qp0_poll(a, a.tid, s.attr)?;
            if a.sq.head == a.sq.tail {
                break;
            }
            if self.p.now_ns().saturating_sub(start) > timeout_ms.saturating_mul(1_000_000) {
                return Err(Error::NoResources(
                    "QP0 send queue (previous send not completed)",
                ));
            }
            self.p.delay_us(100);
        }
        a.tid = a.tid.wrapping_add(1);
        let tid = a.tid;
        let mut mad = [0u8; MAD];
        build_dr_smp(&mut mad, s, a.port, tid);
        let hdr = smp_headers(0, 0xFFFF, a.psn);
        a.psn = a.psn.wrapping_add(1) & 0xFF_FFFF;
        let lkey = self.local_dma_lkey();
        let (Some(buf), Some(mads)) = (a.buf.as_mut(), a.mads.as_mut()) else {
            return Err(Error::InvalidHandle);
        };
        mads.bytes_mut()[..MAD].copy_from_slice(&mad);
        let mad_bus = mads.bus();
        // One SMP outstanding at a time (the wait above).
        // SAFETY: the SQ is the first RQ_OFF bytes of the QP0 buffer, initialised by
        // init_slots, with SQ_SPARE slots of headroom (`a.sq.max_post`).
        let mut c = unsafe { SqCursor::new(buf.as_ptr(), &a.sq, SQ_SPARE, 1) };
        let Some(mut w) = c.next() else {
            return Err(Error::NoResources("QP0 send queue"));
        };
        // SAFETY: the slot is 128 bytes.
        unsafe { build_mlx_wqe(&mut w, &hdr, lkey, mad_bus) };
        c.publish(&self.p, &mut a.sq, &mut w, tid, opcode::SEND, false);
        let db = self.kar as usize * uar::PAGE + uar::SEND_DB;
        c.ring_doorbell(&self.p, &mut a.sq, db, (a.qpn << 8).to_be());
        let start = self.p.now_ns();
        loop {
            if let Some(r) = self.qp0_poll(a, tid, s.attr)? {
                return r.map_err(|status| Error::MadStatus {
                    attr: s.attr,
                    status,
                });
            }
            if self.p.now_ns().saturating_sub(start) > timeout_ms.saturating_mul(1_000_000) {
                return Err(Error::SmpTimeout {
                    port: a.port,
                    attr: s.attr,
                });
            }
            self.p.delay_us(100);
        }
    }

    /// Consume the CQEs of QP0's CQ; returns the response matching `tid` if one arrived.
    #[allow(clippy::type_complexity)]
    fn qp0_poll(
        &mut self,
        a: &mut SmpAgent,
        tid: u64,
        attr_id: u16,
    ) -> Result<Option<Result<[u8; 64], u16>>, Error> {
        let mut found = None;
        for _ in 0..64 {
            let Some(Some(cq)) = self.cqs.get_mut(a.cq.slot as usize) else {
                return Err(Error::InvalidHandle);
            };
            let ci = cq.ci;
            // Ownership first (§4.2), then the rest of the CQE after the read barrier.
            let Some(e) = next_cqe(&self.p, cq.ring(), ci) else {
                break;
            };
            let is_send = e.is_send();
            let wqe_index = e.wqe_index();
            let syndrome = e.syndromes().1;
            let error = e.is_error();
            cq.set_ci(ci.wrapping_add(1));
            if error {
                // A failed send or receive: QP0 is in error and nothing more will come.
                return Err(Error::SmpSend {
                    port: a.port,
                    syndrome,
                });
            }
            if is_send {
                a.sq.retire_send(wqe_index);
                continue;
            }
            let k = (a.rq_tail & ((1 << RQ_LOG) - 1)) as usize;
            a.rq_tail = a.rq_tail.wrapping_add(1);
            // The MAD after the 40-byte GRH area of receive buffer k (inside the MAD
            // buffers by construction; a buffer that is not there holds no response).
            let m = a
                .mads
                .as_ref()
                .and_then(|mads| vread::<MAD>(mads, RECV_OFF + k * RECV_STRIDE + 40));
            self.qp0_post_recv(a);
            if let (None, Some(m)) = (found, m) {
                found = parse_dr_response(&m, tid, attr_id);
            }
        }
        Ok(found)
    }

    /// MAD_IFC SubnSet (LID routed, op_mod 3) to the local SMA; returns the response data.
    pub fn mad_set(
        &mut self,
        port: u8,
        attr_id: u16,
        attr_mod: u32,
        data: &[u8; 64],
    ) -> Result<[u8; 64], Error> {
        self.mad_ifc(port, method::SET, attr_id, attr_mod, Some(data))
    }

    /// A minimal subnet manager for two nodes cabled back to back: wait (bounded)
    /// for the physical link, take QP0, discover the peer with a directed-route
    /// Get(NodeInfo), give it `cfg.peer_lid` and this port `cfg.local_lid` (SM LID = ours on
    /// both) with Set(PortInfo) ARMED, then ACTIVE on both, and release QP0.
    pub fn run_back_to_back_sm(&mut self, port: u8, cfg: &SmConfig) -> Result<SmReport, Error> {
        if cfg.local_lid == 0
            || cfg.peer_lid == 0
            || cfg.local_lid == cfg.peer_lid
            || cfg.local_lid >= 0xC000
            || cfg.peer_lid >= 0xC000
        {
            return Err(Error::InvalidArgument(
                "SM LIDs must be distinct unicast LIDs",
            ));
        }
        // The link of a back-to-back cable trains only once both ends are enabled.
        let start = self.p.now_ns();
        loop {
            self.process_events();
            let pi = self.mad_get(port, attr::PORT_INFO, u32::from(port))?;
            if pi[32] & 0xF != port_state::DOWN {
                break;
            }
            if self.p.now_ns().saturating_sub(start) > cfg.link_timeout_ms.saturating_mul(1_000_000)
            {
                return Err(Error::LinkDown { port });
            }
            self.p.delay_us(1000);
        }
        let mut a = self.smp_open(port)?;
        let r = self.sm_sweep(&mut a, cfg);
        let c = self.smp_close(a);
        let report = r?;
        c?;
        Ok(report)
    }

    fn sm_sweep(&mut self, a: &mut SmpAgent, cfg: &SmConfig) -> Result<SmReport, Error> {
        let mut smps = 0u32;
        let mut dr = |hca: &mut Self, a: &mut SmpAgent, s: Smp| {
            let mut last = Err(Error::SmpTimeout {
                port: a.port,
                attr: s.attr,
            });
            for _ in 0..cfg.smp_attempts.max(1) {
                smps += 1;
                last = hca.smp_dr(a, &s, cfg.smp_timeout_ms);
                if !matches!(last, Err(Error::SmpTimeout { .. })) {
                    break;
                }
            }
            last
        };
        let get = |attr: u16, attr_mod: u32| Smp {
            method: method::GET,
            attr,
            attr_mod,
            data: [0; 64],
        };
        let ni = dr(self, a, get(attr::NODE_INFO, 0))?;
        if ni[2] != 1 {
            return Err(Error::Capability(
                "the node at the other end is not a channel adapter (only back-to-back cabling is supported)",
            ));
        }
        let peer_guid = u64::from_be_bytes(ni[12..20].try_into().unwrap_or([0; 8]));
        let peer_pi = dr(self, a, get(attr::PORT_INFO, 0))?;
        let port = a.port;
        let local_pi = self.mad_get(port, attr::PORT_INFO, u32::from(port))?;
        // A port that is ACTIVE already (a second run) keeps its state (PortState 0 = no
        // change: IBA allows no ACTIVE -> ARMED) and only gets the LIDs.
        let step = |current: &[u8; 64], state: u8| {
            if current[32] & 0xF == port_state::ACTIVE {
                (0, port_state::ACTIVE)
            } else {
                (state, state)
            }
        };
        // As OpenSM does for a link: NeighborMTU the smaller MTUCap of the two ends,
        // OperationalVLs the smaller VLCap (both in PortInfo encoding).
        let link = LinkParams::between(&local_pi, &peer_pi);
        for state in [port_state::ARMED, port_state::ACTIVE] {
            let (set, want) = step(&peer_pi, state);
            let d = port_info_set(&peer_pi, cfg.peer_lid, cfg.local_lid, set, link);
            let got = dr(
                self,
                a,
                Smp {
                    method: method::SET,
                    attr: attr::PORT_INFO,
                    attr_mod: 0,
                    data: d,
                },
            )?;
            if got[32] & 0xF != want {
                return Err(Error::PortStateNotReached {
                    port,
                    peer: true,
                    wanted: want,
                    got: got[32] & 0xF,
                });
            }
            let (set, want) = step(&local_pi, state);
            let d = port_info_set(&local_pi, cfg.local_lid, cfg.local_lid, set, link);
            let got = self.mad_set(port, attr::PORT_INFO, u32::from(port), &d)?;
            if got[32] & 0xF != want {
                return Err(Error::PortStateNotReached {
                    port,
                    peer: false,
                    wanted: want,
                    got: got[32] & 0xF,
                });
            }
        }
        Ok(SmReport {
            port,
            local_lid: cfg.local_lid,
            peer_lid: cfg.peer_lid,
            peer_node_guid: peer_guid,
            smps,
        })
    }
}

/// Link parameters an SM sets on both ends of a link (IBA vol. 1 14.2.5.6 PortInfo; what
/// OpenSM's link setup does): NeighborMTU (byte 36, bits 7:4) = the smaller MTUCap (byte 41,
/// bits 3:0) of the two ports, OperationalVLs (byte 43, bits 7:4) = the smaller VLCap (byte
/// 37, bits 7:4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkParams {
    pub neighbor_mtu: u8,
    pub operational_vls: u8,
}

impl LinkParams {
    pub fn between(a: &[u8; 64], b: &[u8; 64]) -> Self {
        LinkParams {
            neighbor_mtu: (a[41] & 0xF).min(b[41] & 0xF),
            operational_vls: (a[37] >> 4).min(b[37] >> 4),
        }
    }
}

/// PortInfo for a Set (IBA vol. 1 14.2.5, PortInfo): the port's current values with LID,
/// master SM LID, PortState, NeighborMTU and OperationalVLs replaced; PortPhysicalState and
/// LinkDownDefaultState 0 (no change), M_Key 0.
pub fn port_info_set(
    current: &[u8; 64],
    lid: u16,
    sm_lid: u16,
    state: u8,
    link: LinkParams,
) -> [u8; 64] {
    let mut d = *current;
    d[0..8].fill(0);
    d[16..18].copy_from_slice(&lid.to_be_bytes());
    d[18..20].copy_from_slice(&sm_lid.to_be_bytes());
    d[32] = (d[32] & 0xF0) | (state & 0xF);
    d[33] = 0;
    d[36] = (link.neighbor_mtu << 4) | (d[36] & 0xF);
    d[43] = (link.operational_vls << 4) | (d[43] & 0xF);
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dr_smp_layout() {
        let mut m = [0u8; MAD];
        let s = Smp {
            method: method::GET,
            attr: attr::NODE_INFO,
            attr_mod: 0,
            data: [0; 64],
        };
        build_dr_smp(&mut m, &s, 1, 0x42);
        assert_eq!(&m[0..8], &[1, 0x81, 1, 1, 0, 0, 1, 1]);
        assert_eq!(&m[0x10..0x12], &[0x00, 0x11]);
        assert_eq!(&m[0x20..0x24], &[0xFF; 4]);
        assert_eq!(m[0x81], 1);
        assert_eq!(u64::from_be_bytes(m[8..16].try_into().unwrap()), 0x42);
    }

    #[test]
    fn response_must_match_and_have_returned() {
        let mut m = [0u8; MAD];
        m[..4].copy_from_slice(&[1, 0x81, 1, 0x81]);
        m[4] = 0x80;
        m[8..16].copy_from_slice(&7u64.to_be_bytes());
        m[0x11] = 0x11;
        m[0x40] = 9;
        assert_eq!(parse_dr_response(&m, 7, 0x11).unwrap().unwrap()[0], 9);
        assert!(parse_dr_response(&m, 8, 0x11).is_none(), "other TID");
        assert!(parse_dr_response(&m, 7, 0x15).is_none(), "other attribute");
        m[6] = 1;
        assert!(
            parse_dr_response(&m, 7, 0x11).is_none(),
            "hop pointer not back at 0"
        );
        m[6] = 0;
        m[5] = 0x1C;
        assert_eq!(parse_dr_response(&m, 7, 0x11), Some(Err(0x1C)));
        m[4] = 0;
        assert!(parse_dr_response(&m, 7, 0x11).is_none(), "no D bit");
    }

    /// An SMP's MLX WQE, byte for byte, as Linux's `_mlx4_ib_post_send` lays one out on QP0
    /// (`build_mlx_header`: MLX segment with VL15 | SLR | CQ update, rlid permissive, one
    /// inline segment with LRH + BTH + DETH; then the MAD's data segment; then
    /// `set_mlx_icrc_seg`: inline byte count 4 and four zero bytes; DS counts all five units).
    #[test]
    fn mlx_wqe_matches_linux_layout_byte_for_byte() {
        let h = smp_headers(0, 0xFFFF, 5);
        #[repr(align(64))]
        struct Slot([u8; 128]);
        let mut slot = Slot([0u8; 128]);
        // SAFETY: a 64-byte aligned 128-byte slot, written only through `wqe`.
        let mut wqe = unsafe { SendWqe::new(slot.0.as_mut_ptr()) };
        // SAFETY: a 128-byte slot.
        unsafe { build_mlx_wqe(&mut wqe, &h, 0x200, 0x1234_5000) };
        let mut w = slot.0;
        w[0..4].copy_from_slice(&opcode::SEND.to_be_bytes()); // what the poster writes last
        #[rustfmt::skip]
        let expected: [u8; 80] = [
            // 0x00 owner 0 | opcode SEND; 0x07 DS = 5
            0x00, 0x00, 0x00, 0x0A, 0x00, 0x00, 0x00, 0x05,
            // 0x08 flags: VL15 (bit 17), SLR (bit 16), SL 0, C = 3 (bits 3:2); 0x0C rlid
            0x00, 0x03, 0x00, 0x0C, 0xFF, 0xFF, 0x00, 0x00,
            // 0x10 inline segment, 28 bytes
            0x80, 0x00, 0x00, 0x1C,
            // LRH: VL 15 LVer 0, SL 0 LNH 2, DLID 0xFFFF, PktLen 72 words, SLID 0xFFFF
            0xF0, 0x02, 0xFF, 0xFF, 0x00, 0x48, 0xFF, 0xFF,
            // BTH: opcode 0x64, SE/M/Pad/TVer 0, P_Key 0xFFFF, DestQP 0, PSN 5
            0x64, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05,
            // DETH: Q_Key 0, SrcQP 0
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            // 0x30 data segment: 256 bytes, L_Key 0x200, address
            0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x12, 0x34, 0x50, 0x00,
            // 0x40 ICRC segment: inline, 4 bytes, zero
            0x80, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(&w[..80], &expected[..]);
        assert!(w[80..].iter().all(|&b| b == 0), "nothing past DS × 16");
        assert_eq!(usize::from(w[7]) * 16, 80);
    }

    #[test]
    fn port_info_set_keeps_fields_and_clears_no_change_ones() {
        let mut cur = [0u8; 64];
        cur[0] = 0xAA;
        cur[32] = 0x72;
        cur[33] = 0x52;
        cur[36] = 0x53;
        cur[37] = 0x40;
        cur[41] = 5;
        let mut peer = cur;
        peer[41] = 4; // the peer takes 2048 at most
        peer[37] = 0x30; // and VL0-3
        let link = LinkParams::between(&cur, &peer);
        assert_eq!(
            link,
            LinkParams {
                neighbor_mtu: 4,
                operational_vls: 3
            }
        );
        let d = port_info_set(&cur, 2, 1, port_state::ARMED, link);
        assert_eq!(d[0], 0);
        assert_eq!(&d[16..20], &[0, 2, 0, 1]);
        assert_eq!(d[32], 0x73);
        assert_eq!(d[33], 0);
        assert_eq!(d[36], 0x43, "NeighborMTU 2048, master SM SL kept");
        assert_eq!(d[43] >> 4, 3, "OperationalVLs VL0-3");
    }
}
