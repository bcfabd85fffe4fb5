//! Completion queues: SW2HW_CQ/HW2SW_CQ, polling by owner bit with set_ci, arming with the
//! sequence number, completion events (docs/hardware.md §4.2, §5.7).

use core::mem::offset_of;
use core::ptr::addr_of;

use crate::error::Error;
use crate::hca::{Ids, QueueMem};
use crate::hw::{err_cqe, CqContext, Cqe};
use crate::platform::{Bar, DmaRegion, Platform};
use crate::regs::{uar, Opcode};
use crate::wq::Wq;
use crate::Hca;
use verbs::{Completion, WcOpcode, WcStatus, WorkCompletion};
use zerocopy::IntoBytes;

/// Size of the CQE the driver reads (§4.2). With 64-byte CQEs enabled in INIT_HCA
/// (`Choices::cqe_size`) each entry is 64 bytes and these 32 are its upper half, as Linux's
/// mlx4_ib reads them (`get_sw_cqe`: `cqe + 1`).
pub const CQE_SIZE: usize = 32;

/// SW2HW_CQ op_mod: the driver has filled the CQEs itself (Linux `mlx4_cq_alloc` with the
/// SW_CQ_INIT capability).
pub const SW2HW_CQ_SW_INIT: u8 = 1;

/// The byte Linux fills every CQE with under SW_CQ_INIT (`mlx4_init_kernel_cqes`): its
/// owner bit is set, so every entry is hardware-owned in pass 0.
pub const SW_CQ_INIT_BYTE: u8 = 0xCC;

/// A completion queue.
pub struct Cq {
    pub cqn: u32,
    pub(crate) buf: DmaRegion,
    pub(crate) mask: u32,
    /// Where the entries lie, computed once at creation: the entry size (32 or 64 bytes) is
    /// the CQ's own from then on.
    ring: CqRing,
    pub ci: u32,
    mtt: u32,
    pub(crate) dbrec: *mut u8,
    dbrec_idx: usize,
    pub arm_sn: u32,
    pub events: u32,
    pub overrun: bool,
    hw_owned: bool,
}

impl Cq {
    /// Consume the CQEs before `ci`: remember it and publish it as set_ci in the doorbell
    /// record (§4.2, §5.7 step 5).
    #[inline(always)]
    pub(crate) fn set_ci(&mut self, ci: u32) {
        self.ci = ci;
        // SAFETY: dbrec points at this CQ's 8-byte doorbell record; +0 is set_ci.
        unsafe { core::ptr::write_volatile(self.dbrec as *mut u32, (ci & 0xFF_FFFF).to_be()) };
    }
}

/// Handle of a CQ (slot in the HCA's table + CQN as a generation check).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqHandle {
    pub(crate) slot: u32,
    pub(crate) cqn: u32,
}

impl CqHandle {
    pub fn cqn(&self) -> u32 {
        self.cqn
    }
}

/// CQE opcode / flag fields (§4.2).
pub mod cqe {
    pub const OWNER: u8 = 0x80;
    pub const IS_SEND: u8 = 0x40;
    pub const OPCODE_MASK: u8 = 0x1F;
    pub const OPCODE_ERROR: u8 = 0x1E;
}

/// Map an error-CQE syndrome to a work-completion status (§4.2 table).
pub fn syndrome_status(s: u8) -> WcStatus {
    match s {
        0x01 => WcStatus::LocLenErr,
        0x02 => WcStatus::LocQpOpErr,
        0x04 => WcStatus::LocProtErr,
        0x05 => WcStatus::WrFlushErr,
        0x06 => WcStatus::MwBindErr,
        0x10 => WcStatus::BadRespErr,
        0x11 => WcStatus::LocAccessErr,
        0x12 => WcStatus::RemInvReqErr,
        0x13 => WcStatus::RemAccessErr,
        0x14 => WcStatus::RemOpErr,
        0x15 => WcStatus::RetryExcErr,
        0x16 => WcStatus::RnrRetryExcErr,
        0x22 => WcStatus::RemAbortErr,
        _ => WcStatus::GeneralErr,
    }
}

/// Completion opcode of a successful CQE (§4.2): send side echoes the WQE opcode.
pub const fn wc_opcode(is_send: bool, op: u8) -> (WcOpcode, bool) {
    if is_send {
        let o = match op {
            0x08 | 0x09 => WcOpcode::RdmaWrite,
            0x0A | 0x0B | 0x01 => WcOpcode::Send,
            0x10 => WcOpcode::RdmaRead,
            0x11 | 0x14 => WcOpcode::CompSwap,
            0x12 | 0x15 => WcOpcode::FetchAdd,
            x => WcOpcode::Unknown(x),
        };
        (o, false)
    } else {
        match op {
            0x00 => (WcOpcode::RecvRdmaWithImm, true),
            0x01 | 0x03 => (WcOpcode::Recv, false),
            0x02 => (WcOpcode::Recv, true),
            x => (WcOpcode::Unknown(x), false),
        }
    }
}

/// The two dwords of the CQ arm doorbell (§4.2), as one host-order 64-bit store value whose
/// bytes are BE(dword0) then BE(dword1).
pub fn arm_doorbell_value(sn: u32, cmd: u32, cqn: u32, ci: u32) -> u64 {
    let d0 = ((sn & 3) << 28) | cmd | (cqn & 0xFF_FFFF);
    let d1 = ci & 0xFF_FFFF;
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&d0.to_be_bytes());
    b[4..].copy_from_slice(&d1.to_be_bytes());
    u64::from_ne_bytes(b)
}

/// MODIFY_CQ op_mod for moderation (0 is resize, §2.4 command table).
pub const MODIFY_CQ_MODERATION: u8 = 1;

/// REQ_NOTIFY_SOLICITED / REQ_NOTIFY commands of the arm doorbell.
pub const ARM_SOLICITED: u32 = 1 << 24;
pub const ARM_NEXT: u32 = 2 << 24;

impl<P: Platform> Hca<P> {
    /// Create a CQ of at least `cqe` entries (one spare so full and empty differ).
    pub fn create_cq_raw(&mut self, cqe: u32) -> Result<CqHandle, Error> {
        let nent = cqe
            .checked_add(1)
            .ok_or(Error::InvalidArgument("CQ size"))?
            .next_power_of_two();
        if nent > self.caps.max_cqes || nent < 2 {
            return Err(Error::InvalidArgument("CQ size above the device maximum"));
        }
        let eqn = self.comp_eqn().ok_or(Error::InvalidHandle)?;
        let entry_shift = self.choices.cqe_size.trailing_zeros();
        let sw_init = self.choices.sw_cq_init;
        let size = ((nent as usize) << entry_shift).max(4096);
        let cqn = self.cqns.alloc().ok_or(Error::NoResources("CQ numbers"))?;
        let QueueMem {
            mut buf,
            page_shift,
            mtt,
            dbrec_idx,
            dbrec_bus: db_bus,
            dbrec,
        } = self.queue_mem(Ids::Cqn, cqn, size, "CQ buffer")?;
        if sw_init {
            // Every CQE filled with 0xCC, and SW2HW_CQ told so with op_mod 1, as Linux's
            // `mlx4_cq_alloc` does when the firmware reports SW_CQ_INIT.
            buf.bytes_mut().fill(SW_CQ_INIT_BYTE);
        } else {
            // Hardware-owned in pass 0 (§4.2): the owner byte of each entry, which is the last
            // byte of the 32 the driver reads.
            for e in buf.bytes_mut().chunks_mut(1 << entry_shift) {
                if let Some(owner) = e.last_mut() {
                    *owner = cqe::OWNER;
                }
            }
        }
        let ring = CqRing::new(&buf, 1 << entry_shift, nent);
        let cq = Cq {
            cqn,
            buf,
            mask: nent - 1,
            ring,
            ci: 0,
            mtt,
            dbrec,
            dbrec_idx,
            arm_sn: 1,
            events: 0,
            overrun: false,
            hw_owned: false,
        };
        let slot = (cqn - self.caps.reserved_cqs) as usize;
        if self.cqs.len() <= slot {
            self.cqs.resize_with(slot + 1, || None);
        }
        self.cqs[slot] = Some(cq);
        let r = (|| {
            let mut ctx = CqContext::default();
            ctx.logsize_usrpage
                .set((nent.trailing_zeros() << 24) | (self.kar & 0xFF_FFFF));
            ctx.comp_eqn = eqn as u8;
            ctx.log_page_size = (page_shift - 12) as u8;
            let mtt_addr = mtt as u64 * 8;
            ctx.mtt_base_addr_h = (mtt_addr >> 32) as u8;
            ctx.mtt_base_addr_l.set(mtt_addr as u32);
            ctx.db_rec_addr.set(db_bus);
            let b = self.cmd.inbox_clear();
            if b.len() < 64 {
                return Err(Error::NoMemory("command mailbox"));
            }
            b[..size_of::<CqContext>()].copy_from_slice(ctx.as_bytes());
            self.cmd_in(
                Opcode::SW2HW_CQ,
                cqn,
                if sw_init { SW2HW_CQ_SW_INIT } else { 0 },
            )
        })();
        if let Err(e) = r {
            let _ = self.destroy_cq_index(slot);
            return Err(e);
        }
        if let Some(c) = self.cqs[slot].as_mut() {
            c.hw_owned = true;
        }
        Ok(CqHandle {
            slot: slot as u32,
            cqn,
        })
    }

    /// Completion-event moderation (Linux cq.c `mlx4_cq_modify`: MODIFY_CQ op_mod 1 with
    /// cq_max_count and cq_period in a CQ context): the armed CQ's event waits for `count`
    /// completions or `period_us` microseconds after the first, whichever comes first; 0
    /// disables a condition, both 0 restore an event per completion.
    pub fn modify_cq_raw(&mut self, h: CqHandle, count: u16, period_us: u16) -> Result<(), Error> {
        let cqn = self.cq_mut(h)?.cqn;
        let mut ctx = CqContext::default();
        ctx.cq_max_count.set(count);
        ctx.cq_period.set(period_us);
        let b = self.cmd.inbox_clear();
        if b.len() < 64 {
            return Err(Error::NoMemory("command mailbox"));
        }
        b[..size_of::<CqContext>()].copy_from_slice(ctx.as_bytes());
        self.cmd_in(Opcode::MODIFY_CQ, cqn, MODIFY_CQ_MODERATION)
    }

    /// HW2SW_CQ (if owned by hardware) and free everything of CQ slot `i`.
    pub(crate) fn destroy_cq_index(&mut self, i: usize) -> Result<(), Error> {
        let cq = self
            .cqs
            .get_mut(i)
            .and_then(|c| c.take())
            .ok_or(Error::InvalidHandle)?;
        let r = if cq.hw_owned {
            self.cmd(Opcode::HW2SW_CQ, 0, cq.cqn, 1, crate::cmd::Out::None)
                .map(|_| ())
        } else {
            Ok(())
        };
        self.mtts.free(cq.mtt);
        self.free_dbrec(cq.dbrec_idx);
        self.release_queue_buf(cq.buf);
        self.cqns.free(cq.cqn);
        r
    }

    pub(crate) fn cq_mut(&mut self, h: CqHandle) -> Result<&mut Cq, Error> {
        match self.cqs.get_mut(h.slot as usize) {
            Some(Some(c)) if c.cqn == h.cqn => Ok(c),
            _ => Err(Error::InvalidHandle),
        }
    }

    /// A COMP event for `cqn`: count it and advance the arm sequence number (§4.2).
    pub(crate) fn cq_event(&mut self, cqn: u32) {
        if let Some(c) = cq_by_cqn(&mut self.cqs, self.caps.reserved_cqs, cqn) {
            c.events += 1;
            c.arm_sn = c.arm_sn.wrapping_add(1);
        }
    }

    pub(crate) fn cq_error(&mut self, cqn: u32) {
        if let Some(c) = cq_by_cqn(&mut self.cqs, self.caps.reserved_cqs, cqn) {
            c.overrun = true;
        }
        self.async_events += 1;
    }

    /// Arm the CQ: doorbell record arm word, barrier, then the UAR doorbell (§4.2).
    pub fn arm_cq(&mut self, h: CqHandle, solicited_only: bool) -> Result<(), Error> {
        let kar_off = self.kar as usize * uar::PAGE + uar::CQ_DB;
        let cq = self.cq_mut(h)?;
        let cmd = if solicited_only {
            ARM_SOLICITED
        } else {
            ARM_NEXT
        };
        let sn = cq.arm_sn & 3;
        let word = (sn << 28) | cmd | (cq.ci & 0xFF_FFFF);
        // SAFETY: dbrec points at our 8-byte doorbell record; +4 is the arm word.
        unsafe { core::ptr::write_volatile(cq.dbrec.add(4) as *mut u32, word.to_be()) };
        let v = arm_doorbell_value(sn, cmd, cq.cqn, cq.ci);
        self.p.wmb();
        self.p.mmio_write64(Bar::Uar, kar_off, v);
        Ok(())
    }

    /// Wait (bounded) for a completion event on `h`, draining the EQ meanwhile.
    pub fn wait_cq_event(&mut self, h: CqHandle, timeout_ns: u64) -> Result<(), Error> {
        let start = self.p.now_ns();
        let mut delay = 1;
        loop {
            let cq = self.cq_mut(h)?;
            if cq.events > 0 {
                cq.events -= 1;
                return Ok(());
            }
            self.process_events();
            let cq = self.cq_mut(h)?;
            if cq.events > 0 {
                cq.events -= 1;
                return Ok(());
            }
            if self.p.now_ns().saturating_sub(start) > timeout_ns {
                return Err(Error::CmdTimeout { op: Opcode::NOP });
            }
            self.p.delay_us(delay);
            delay = (delay * 2).min(1000);
        }
    }

    /// Poll up to `wc.len()` completions (§5.7).
    ///
    /// Inlined into the caller, and only the common case: per CQE the owner test, one QP
    /// lookup, the work-request id and a [`WorkCompletion`] built from a few dwords of the
    /// CQE, then one set_ci store per batch. Anything else — a stale handle, an overrun, an
    /// error CQE, a CQE of an unknown QP — hands over to the out-of-line [`Self::poll_cq_from`]
    /// at the CQE where it was met, so the inlined part keeps nothing alive across a call.
    #[inline(always)]
    pub fn poll_cq_raw(
        &mut self,
        h: CqHandle,
        wc: &mut [WorkCompletion],
    ) -> Result<usize, verbs::Error> {
        let reserved_qps = self.caps.reserved_qps;
        let cq = match self.cqs.get_mut(h.slot as usize) {
            Some(Some(cq)) if cq.cqn == h.cqn && !cq.overrun => cq,
            _ => return self.poll_cq_from(h, wc, 0),
        };
        let ring = cq.ring();
        let mut ci = cq.ci;
        let mut n = 0;
        while n < wc.len() {
            let Some(e) = next_cqe(&self.p, ring, ci) else {
                break;
            };
            let qpn = e.qpn();
            let qp = match self.qps.get_mut(qpn.wrapping_sub(reserved_qps) as usize) {
                Some(Some(qp)) if qp.qpn == qpn && !e.is_error() && qp.srq.is_none() => qp,
                _ => {
                    cq.ci = ci;
                    return self.poll_cq_from(h, wc, n);
                }
            };
            ci = ci.wrapping_add(1);
            if let Some(out) = wc.get_mut(n) {
                e.parse(&mut qp.sq, &mut qp.rq, qpn, out);
            }
            n += 1;
        }
        if n > 0 {
            cq.set_ci(ci);
        }
        Ok(n)
    }

    /// Poll at most one completion, returning only wr_id/status/opcode/byte_len (the verbs
    /// `poll_one`): the CQE is consumed exactly as `poll_cq` consumes it (owner test, SQ/RQ
    /// tail, set_ci), but only the dwords those fields need are read. Anything but a
    /// successful CQE of a known QP, and every error, goes through `poll_cq_from`.
    #[inline(always)]
    pub fn poll_one_raw(&mut self, h: CqHandle) -> Result<Option<Completion>, verbs::Error> {
        let reserved_qps = self.caps.reserved_qps;
        let cq = match self.cqs.get_mut(h.slot as usize) {
            Some(Some(cq)) if cq.cqn == h.cqn && !cq.overrun => cq,
            _ => return self.poll_one_slow(h),
        };
        let ci = cq.ci;
        let Some(e) = next_cqe(&self.p, cq.ring(), ci) else {
            return Ok(None);
        };
        let qpn = e.qpn();
        let qp = match self.qps.get_mut(qpn.wrapping_sub(reserved_qps) as usize) {
            Some(Some(qp)) if qp.qpn == qpn && !e.is_error() && qp.srq.is_none() => qp,
            _ => return self.poll_one_slow(h),
        };
        let c = if e.is_send() {
            e.parse_short::<true>(&mut qp.sq, e.opcode())
        } else {
            e.parse_short::<false>(&mut qp.rq, e.opcode())
        };
        cq.set_ci(ci.wrapping_add(1));
        Ok(Some(c))
    }

    /// `poll_one` through the general loop.
    #[inline(never)]
    fn poll_one_slow(&mut self, h: CqHandle) -> Result<Option<Completion>, verbs::Error> {
        let mut wc = [WorkCompletion::default(); 1];
        let n = self.poll_cq_from(h, &mut wc, 0)?;
        Ok((n == 1).then(|| Completion::from(&wc[0])))
    }

    /// The general poll loop, from the CQ's consumer index into `wc[n..]`, `n` completions
    /// already written by the caller: typed errors, error CQEs, unknown QPs (§5.7).
    #[inline(never)]
    pub(crate) fn poll_cq_from(
        &mut self,
        h: CqHandle,
        wc: &mut [WorkCompletion],
        mut n: usize,
    ) -> Result<usize, verbs::Error> {
        let reserved_qps = self.caps.reserved_qps;
        let Some(Some(cq)) = self.cqs.get_mut(h.slot as usize) else {
            return Err(verbs::Error::InvalidHandle);
        };
        if cq.cqn != h.cqn {
            return Err(verbs::Error::InvalidHandle);
        }
        if cq.overrun {
            return Err(verbs::Error::CqOverrun);
        }
        let ring = cq.ring();
        let mut ci = cq.ci;
        while n < wc.len() {
            let Some(e) = next_cqe(&self.p, ring, ci) else {
                break;
            };
            ci = ci.wrapping_add(1);
            let qpn = e.qpn();
            match self.qps.get_mut(qpn.wrapping_sub(reserved_qps) as usize) {
                Some(Some(qp)) if qp.qpn == qpn => {
                    e.parse(&mut qp.sq, &mut qp.rq, qpn, &mut wc[n]);
                    // A receive of a QP with an SRQ: the WQE is the SRQ's (wqe_index, §4.7).
                    if let Some(srq) = qp.srq.filter(|_| !e.is_send()) {
                        let idx = e.wqe_index();
                        wc[n].wr_id = crate::srq::retire_srq_recv(&mut self.srqs, srq.slot, idx);
                    }
                }
                // A CQE for a QP we do not know (destroyed meanwhile).
                _ => {
                    wc[n] = WorkCompletion {
                        qp_num: qpn,
                        status: WcStatus::GeneralErr,
                        ..Default::default()
                    }
                }
            }
            n += 1;
        }
        if n > 0 {
            cq.set_ci(ci);
        }
        Ok(n)
    }
}

impl<P: Platform> Hca<P> {
    /// Remove from CQ `cqn` the completions software has not consumed yet that belong to
    /// QP `qpn`, keeping the others in order, as Linux's `__mlx4_ib_cq_clean` does when a
    /// kernel QP goes to RESET or is destroyed (§5.8): entries from the consumer index up to
    /// the first hardware-owned one (at most one ring) are walked from the newest back;
    /// a matching receive of a QP with an SRQ gives its WQE back to the SRQ; the survivors
    /// move up by the number removed, each keeping the owner bit of the slot it lands in;
    /// the consumer index advances by that number and is published as set_ci.
    pub(crate) fn clean_cq(&mut self, cqn: u32, qpn: u32, srq: Option<crate::srq::SrqHandle>) {
        let Some(cq) = cq_by_cqn(&mut self.cqs, self.caps.reserved_cqs, cqn) else {
            return;
        };
        let ring = cq.ring();
        let cons = cq.ci;
        let mut prod = cons;
        while next_cqe(&self.p, ring, prod).is_some() {
            prod = prod.wrapping_add(1);
            if prod.wrapping_sub(cons) == ring.nent {
                break;
            }
        }
        let slot = |i: u32| -> *mut u8 { ring.cqe_ptr(i).cast_mut() };
        let mut freed = 0u32;
        let mut i = prod;
        while i != cons {
            i = i.wrapping_sub(1);
            // `i` lies between the consumer index and the first hardware-owned entry.
            let Some(e) = next_cqe(&self.p, ring, i) else {
                break;
            };
            if e.qpn() == qpn {
                if let Some(s) = srq.filter(|_| !e.is_send()) {
                    crate::srq::retire_srq_recv(&mut self.srqs, s.slot, e.wqe_index());
                }
                freed += 1;
            } else if freed > 0 {
                let (src, dst) = (slot(i), slot(i.wrapping_add(freed)));
                // SAFETY: the CQEs of two distinct entries of this CQ's buffer (freed <
                // nent), both owned by software; the owner byte is the last one.
                unsafe {
                    let owner = core::ptr::read_volatile(dst.add(CQE_SIZE - 1)) & cqe::OWNER;
                    core::ptr::copy_nonoverlapping(src, dst, CQE_SIZE - 1);
                    let op = core::ptr::read_volatile(src.add(CQE_SIZE - 1)) & !cqe::OWNER;
                    core::ptr::write_volatile(dst.add(CQE_SIZE - 1), op | owner);
                }
            }
        }
        if freed > 0 {
            self.p.wmb();
            cq.set_ci(cons.wrapping_add(freed));
        }
    }
}

/// The CQ numbered `cqn` in `cqs` (slot = CQN − reserved CQs), if it is still there.
fn cq_by_cqn(cqs: &mut [Option<Cq>], reserved_cqs: u32, cqn: u32) -> Option<&mut Cq> {
    match cqs.get_mut(cqn.wrapping_sub(reserved_cqs) as usize) {
        Some(Some(c)) if c.cqn == cqn => Some(c),
        _ => None,
    }
}

/// Where a CQ's entries lie: the CQE of entry 0 (the buffer, or 32 bytes into it with
/// 64-byte CQEs), the entry size, and `nent − 1` / `nent` (a power of two). Computed once
/// when the CQ is created; the data path keeps its CQs' rings.
#[derive(Clone, Copy)]
pub(crate) struct CqRing {
    pub buf: *const u8,
    pub stride: usize,
    pub mask: u32,
    pub nent: u32,
}

impl CqRing {
    /// The ring of `buf`, `nent` entries of `stride` bytes (32 or 64) each.
    fn new(buf: &DmaRegion, stride: usize, nent: u32) -> CqRing {
        debug_assert!(buf.size() >= stride * nent as usize && stride >= CQE_SIZE);
        CqRing {
            // SAFETY: the buffer holds `nent` entries of `stride` bytes, so entry 0's CQE (its
            // last 32 bytes) is inside it.
            buf: unsafe { buf.as_ptr().add(stride - CQE_SIZE) }.cast_const(),
            stride,
            mask: nent - 1,
            nent,
        }
    }

    /// The CQE of entry `i` (wrapping).
    #[inline(always)]
    fn cqe_ptr(self, i: u32) -> *const u8 {
        // SAFETY: (i & mask) < nent and the buffer holds nent entries of `stride` bytes, the
        // CQE being the last 32 bytes of each (`buf` points at entry 0's).
        unsafe { self.buf.add((i & self.mask) as usize * self.stride) }
    }
}

impl Cq {
    /// This CQ's entries.
    #[inline(always)]
    pub(crate) fn ring(&self) -> CqRing {
        self.ring
    }
}

/// Whether software owns a CQE whose last byte is `owner`, at consumer index `ci` of a CQ
/// of `nent` entries: its owner bit equals the parity of the pass, bit log2(nent) of `ci`
/// (§4.2).
#[inline(always)]
fn sw_owned(owner: u8, ci: u32, nent: u32) -> bool {
    (owner & cqe::OWNER != 0) == (ci & nent != 0)
}

/// The CQE at consumer index `ci` of `ring` if software owns it (§4.2, §5.7): the owner byte
/// is read first, then, behind a read barrier, the rest through the returned view. The one
/// reader of CQEs; every poll entry point (per-call, data path, QP0) starts here.
#[inline(always)]
pub(crate) fn next_cqe<P: Platform>(p: &P, ring: CqRing, ci: u32) -> Option<CqeView> {
    let e = ring.cqe_ptr(ci).cast::<Cqe>();
    // SAFETY: the CQE's last byte; the device writes CQEs, so reads are volatile.
    let owner = unsafe { core::ptr::read_volatile(addr_of!((*e).owner_sr_opcode)) };
    if sw_owned(owner, ci, ring.nent) {
        p.rmb();
        Some(CqeView { e, owner })
    } else {
        core::hint::cold_path();
        None
    }
}

/// A CQE software owns (from [`next_cqe`]): its fields by name, read from the typed,
/// layout-checked [`Cqe`] as the device wrote them (volatile, big-endian), and its parse
/// into a completion, retiring the work request it reports.
#[derive(Clone, Copy)]
pub(crate) struct CqeView {
    e: *const Cqe,
    /// `owner_sr_opcode`, read first.
    owner: u8,
}

/// Volatile read of the big-endian `u32` field `$f` of the CQE at `$e`, aligned (CQEs are
/// 32-byte aligned and the field's offset a multiple of 4, asserted at compile time).
macro_rules! cqe_be32 {
    ($e:expr, $f:ident) => {{
        const { assert!(offset_of!(Cqe, $f) % 4 == 0) };
        // SAFETY: a field of a CQE software owns (`CqeView`), 4-aligned.
        u32::from_be(unsafe { core::ptr::read_volatile(addr_of!((*$e).$f).cast::<u32>()) })
    }};
}
/// As [`cqe_be32`], a big-endian `u16` field.
macro_rules! cqe_be16 {
    ($e:expr, $f:ident) => {{
        const { assert!(offset_of!(Cqe, $f) % 2 == 0) };
        // SAFETY: a field of a CQE software owns (`CqeView`), 2-aligned.
        u16::from_be(unsafe { core::ptr::read_volatile(addr_of!((*$e).$f).cast::<u16>()) })
    }};
}

impl CqeView {
    /// The owner/direction/opcode byte (§4.2).
    #[inline(always)]
    pub fn owner_sr_opcode(self) -> u8 {
        self.owner
    }
    /// The opcode: the WQE's for sends, the receive opcode otherwise; [`cqe::OPCODE_ERROR`]
    /// for an error CQE.
    #[inline(always)]
    pub fn opcode(self) -> u8 {
        self.owner & cqe::OPCODE_MASK
    }
    #[inline(always)]
    pub fn is_send(self) -> bool {
        self.owner & cqe::IS_SEND != 0
    }
    #[inline(always)]
    pub fn is_error(self) -> bool {
        self.opcode() == cqe::OPCODE_ERROR
    }
    /// The QPN (low 24 bits of `vlan_my_qpn`).
    #[inline(always)]
    pub fn qpn(self) -> u32 {
        cqe_be32!(self.e, vlan_my_qpn) & 0xFF_FFFF
    }
    /// `vlan_my_qpn` as stored (big-endian), for comparing against a prepared `BE(qpn)`.
    #[inline(always)]
    pub fn my_qpn_as_stored(self) -> u32 {
        // SAFETY: dword 0 of a CQE software owns, 4-aligned.
        unsafe { core::ptr::read_volatile(addr_of!((*self.e).vlan_my_qpn).cast::<u32>()) }
    }
    #[inline(always)]
    pub fn byte_cnt(self) -> u32 {
        cqe_be32!(self.e, byte_cnt)
    }
    /// The 16-bit counter of the send WQE completed.
    #[inline(always)]
    pub fn wqe_index(self) -> u32 {
        cqe_be16!(self.e, wqe_index) as u32
    }
    /// The immediate of a receive with immediate.
    #[inline(always)]
    pub fn immed(self) -> u32 {
        cqe_be32!(self.e, immed_rss_invalid)
    }
    /// GRH flag (bit 31), the sender's path bits (30:24) and source QPN (23:0).
    #[inline(always)]
    pub fn g_mlpath_rqpn(self) -> u32 {
        cqe_be32!(self.e, g_mlpath_rqpn)
    }
    /// The SL in bits 15:12.
    #[inline(always)]
    pub fn sl_vid(self) -> u16 {
        cqe_be16!(self.e, sl_vid)
    }
    #[inline(always)]
    pub fn rlid(self) -> u16 {
        cqe_be16!(self.e, rlid)
    }
    /// An error CQE's vendor syndrome and syndrome (§4.2).
    #[inline(always)]
    pub fn syndromes(self) -> (u8, u8) {
        let b = self.e.cast::<u8>();
        // SAFETY: bytes of a CQE software owns.
        unsafe {
            (
                core::ptr::read_volatile(b.add(err_cqe::VENDOR_SYNDROME)),
                core::ptr::read_volatile(b.add(err_cqe::SYNDROME)),
            )
        }
    }

    /// Parse a successful CQE of the direction `SEND` with opcode `op` (both known to the
    /// caller, who checked them: [`Self::opcode`]) into the short completion, retiring from
    /// `wq` (the send queue if `SEND`, else the receive queue).
    #[inline(always)]
    pub fn parse_short<const SEND: bool>(self, wq: &mut Wq, op: u8) -> Completion {
        let op = (op & cqe::OPCODE_MASK) as usize;
        let byte_len = self.byte_cnt();
        let (wr_id, opcode) = if SEND {
            (wq.retire_send(self.wqe_index()), SEND_OPCODES[op])
        } else {
            (wq.retire_recv(), RECV_OPCODES[op])
        };
        Completion {
            wr_id,
            status: WcStatus::Success,
            opcode,
            byte_len,
        }
    }

    /// Parse the CQE of the QP `qpn` whose queues are `sq` and `rq` into `out`, in place,
    /// retiring the work request it reports (§4.2): the success fields, or for an error CQE
    /// the status from its syndrome.
    #[inline(always)]
    pub fn parse(self, sq: &mut Wq, rq: &mut Wq, qpn: u32, out: &mut WorkCompletion) {
        if self.is_error() {
            *out = self.parse_error(sq, rq, qpn);
            return;
        }
        let op = self.opcode();
        let byte_len = self.byte_cnt();
        if self.is_send() {
            *out = WorkCompletion {
                wr_id: sq.retire_send(self.wqe_index()),
                status: WcStatus::Success,
                opcode: SEND_OPCODES[op as usize],
                vendor_err: 0,
                byte_len,
                imm_data: 0,
                imm: false,
                qp_num: qpn,
                src_qp: 0,
                slid: 0,
                sl: 0,
                dlid_path_bits: 0,
                grh: false,
            };
        } else {
            let opcode = RECV_OPCODES[op as usize];
            // Receive opcodes 0 (RDMA write with immediate) and 2 (send with immediate).
            let imm = op & !2 == 0;
            let (g, imm_data, slid, sl) = (
                self.g_mlpath_rqpn(),
                self.immed(),
                self.rlid(),
                self.sl_vid(),
            );
            *out = WorkCompletion {
                wr_id: rq.retire_recv(),
                status: WcStatus::Success,
                opcode,
                vendor_err: 0,
                byte_len,
                imm_data: if imm { imm_data } else { 0 },
                imm,
                qp_num: qpn,
                src_qp: g & 0xFF_FFFF,
                slid,
                sl: (sl >> 12) as u8,
                dlid_path_bits: ((g >> 24) & 0x7F) as u8,
                grh: g & (1 << 31) != 0,
            };
        }
    }

    /// The completion of an error CQE (syndrome → status, §4.2).
    #[inline(never)]
    fn parse_error(self, sq: &mut Wq, rq: &mut Wq, qpn: u32) -> WorkCompletion {
        let is_send = self.is_send();
        let wr_id = if is_send {
            sq.retire_send(self.wqe_index())
        } else {
            rq.retire_recv()
        };
        let (vendor, synd) = self.syndromes();
        WorkCompletion {
            wr_id,
            status: syndrome_status(synd),
            opcode: if is_send {
                WcOpcode::Send
            } else {
                WcOpcode::Recv
            },
            vendor_err: vendor,
            qp_num: qpn,
            ..Default::default()
        }
    }
}

/// [`wc_opcode`] for every send opcode value, looked up instead of matched on the hot path.
pub(crate) const SEND_OPCODES: [WcOpcode; 32] = {
    let mut t = [WcOpcode::Send; 32];
    let mut i = 0;
    while i < 32 {
        t[i] = wc_opcode(true, i as u8).0;
        i += 1;
    }
    t
};

/// [`wc_opcode`] for every receive opcode value (the immediate flag is `op & !2 == 0`).
pub(crate) const RECV_OPCODES: [WcOpcode; 32] = {
    let mut t = [WcOpcode::Recv; 32];
    let mut i = 0;
    while i < 32 {
        let (o, imm) = wc_opcode(false, i as u8);
        assert!(imm == (i & !2 == 0));
        t[i] = o;
        i += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arm_doorbell_bytes_are_two_be_dwords() {
        let v = arm_doorbell_value(1, ARM_NEXT, 0x85, 0x1234);
        let b = v.to_ne_bytes();
        assert_eq!(&b[..4], &[0x12, 0x00, 0x00, 0x85]);
        assert_eq!(&b[4..], &[0x00, 0x00, 0x12, 0x34]);
        let v = arm_doorbell_value(6, ARM_SOLICITED, 0x80, 0x0100_0001);
        let b = v.to_ne_bytes();
        assert_eq!(&b[..4], &[0x21, 0x00, 0x00, 0x80], "sn masked to 2 bits");
        assert_eq!(&b[4..], &[0x00, 0x00, 0x00, 0x01], "ci masked to 24 bits");
    }

    #[test]
    fn opcode_tables_match_the_mapping() {
        for op in 0..32u8 {
            assert_eq!(SEND_OPCODES[op as usize], wc_opcode(true, op).0);
            let (o, imm) = wc_opcode(false, op);
            assert_eq!(RECV_OPCODES[op as usize], o);
            assert_eq!(op & !2 == 0, imm, "receive opcode {op:#x}");
        }
    }

    #[test]
    fn cqe_opcodes_and_syndromes_map_to_verbs() {
        assert_eq!(wc_opcode(true, 0x0A), (WcOpcode::Send, false));
        assert_eq!(wc_opcode(true, 0x10), (WcOpcode::RdmaRead, false));
        assert_eq!(wc_opcode(true, 0x11), (WcOpcode::CompSwap, false));
        assert_eq!(wc_opcode(true, 0x12), (WcOpcode::FetchAdd, false));
        assert_eq!(wc_opcode(false, 0x02), (WcOpcode::Recv, true));
        assert_eq!(wc_opcode(false, 0x00), (WcOpcode::RecvRdmaWithImm, true));
        assert_eq!(syndrome_status(0x04), WcStatus::LocProtErr);
        assert_eq!(syndrome_status(0x05), WcStatus::WrFlushErr);
        assert_eq!(syndrome_status(0x13), WcStatus::RemAccessErr);
        assert_eq!(syndrome_status(0x99), WcStatus::GeneralErr);
    }
}
