//! Shared receive queues (docs/hardware.md §4.7), as Linux's mlx4 drivers run them
//! (`mlx4_ib_create_srq`, `mlx4_srq_alloc`, `mlx4_ib_post_srq_recv`, `mlx4_ib_free_srq_wqe`,
//! `mlx4_ib_modify_srq`, `mlx4_srq_query`, `mlx4_srq_free`): a buffer of WQEs linked into a
//! free list through their next segments, one MTT entry, a doorbell record holding the count
//! of WQEs posted, and SW2HW_SRQ / ARM_SRQ / QUERY_SRQ / HW2SW_SRQ.

use alloc::vec::Vec;
use core::mem::{offset_of, size_of};

use crate::be::{Be16, Be32, Be64};
use crate::error::Error;
use crate::hca::{Ids, QueueMem};
use crate::hw::INVALID_LKEY;
use crate::platform::{DmaRegion, Platform};
use crate::regs::Opcode;
use crate::Hca;
use verbs::RecvWr;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// SRQ context (§4.7), the 48 bytes SW2HW_SRQ takes and QUERY_SRQ returns.
#[repr(C)]
#[derive(Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct SrqContext {
    /// bits 31:28 state, 27:24 log2 WQEs, 23:0 SRQN.
    pub state_logsize_srqn: Be32,
    /// log2 WQE stride − 4.
    pub logstride: u8,
    _rsvd0: u8,
    pub xrcd: Be16,
    pub pg_offset_cqn: Be32,
    _rsvd1: [u8; 4],
    pub log_page_size: u8,
    _rsvd2: [u8; 2],
    pub mtt_base_addr_h: u8,
    pub mtt_base_addr_l: Be32,
    pub pd: Be32,
    pub limit_watermark: Be16,
    pub wqe_cnt: Be16,
    _rsvd3: [u8; 2],
    pub wqe_counter: Be16,
    _rsvd4: [u8; 4],
    pub db_rec_addr: Be64,
}
const _: () = {
    assert!(size_of::<SrqContext>() == 0x30);
    assert!(offset_of!(SrqContext, logstride) == 0x04);
    assert!(offset_of!(SrqContext, xrcd) == 0x06);
    assert!(offset_of!(SrqContext, pg_offset_cqn) == 0x08);
    assert!(offset_of!(SrqContext, log_page_size) == 0x10);
    assert!(offset_of!(SrqContext, mtt_base_addr_h) == 0x13);
    assert!(offset_of!(SrqContext, mtt_base_addr_l) == 0x14);
    assert!(offset_of!(SrqContext, pd) == 0x18);
    assert!(offset_of!(SrqContext, limit_watermark) == 0x1C);
    assert!(offset_of!(SrqContext, wqe_cnt) == 0x1E);
    assert!(offset_of!(SrqContext, wqe_counter) == 0x22);
    assert!(offset_of!(SrqContext, db_rec_addr) == 0x28);
};

/// Size of the next segment at the head of every SRQ WQE; `next_wqe_index` is its bytes 2..3.
pub const NEXT_SEG: usize = 16;
const NEXT_WQE_INDEX: usize = 2;

/// How many asynchronous events wait for `get_async_event` before the oldest is dropped.
pub const MAX_QUEUED_EVENTS: usize = 64;

/// Handle of an SRQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqHandle {
    pub(crate) slot: u32,
    pub(crate) srqn: u32,
}

impl SrqHandle {
    pub fn srqn(&self) -> u32 {
        self.srqn
    }
}

/// What an SRQ was created with: Linux's `max_wr` (WQEs − 1) and `max_sge`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqCap {
    pub max_wr: u32,
    pub max_sge: u32,
}

pub struct Srq {
    pub srqn: u32,
    pub(crate) buf: DmaRegion,
    /// Number of WQEs (a power of two).
    pub(crate) size: u32,
    pub(crate) wqe_shift: u32,
    pub(crate) max_gs: u32,
    /// Free list: the next WQE to post into, and the last free WQE (never posted into
    /// while it is the only one left, §4.7).
    pub(crate) head: u32,
    pub(crate) tail: u32,
    /// WQEs posted so far (16 bits, written to the doorbell record).
    pub(crate) wqe_ctr: u16,
    pub(crate) wrid: Vec<u64>,
    mtt: u32,
    dbrec: *mut u8,
    dbrec_idx: usize,
    /// QPs created with this SRQ and not yet destroyed.
    pub(crate) users: u32,
    /// Limit events seen since creation.
    pub(crate) limit_events: u32,
    hw_owned: bool,
}

impl Srq {
    fn wqe(&mut self, i: u32) -> &mut [u8] {
        let stride = 1usize << self.wqe_shift;
        let start = ((i & (self.size - 1)) as usize) << self.wqe_shift;
        &mut self.buf.bytes_mut()[start..start + stride]
    }

    fn next_of(&mut self, i: u32) -> u32 {
        let w = self.wqe(i);
        u16::from_be_bytes([w[NEXT_WQE_INDEX], w[NEXT_WQE_INDEX + 1]]) as u32
    }

    fn set_next(&mut self, i: u32, next: u32) {
        let w = self.wqe(i);
        w[NEXT_WQE_INDEX..NEXT_WQE_INDEX + 2].copy_from_slice(&(next as u16).to_be_bytes());
    }

    /// The work-request id of the receive that completed in WQE `index`, and the WQE back
    /// at the tail of the free list (`mlx4_ib_free_srq_wqe`).
    pub(crate) fn retire(&mut self, index: u32) -> u64 {
        let index = index & (self.size - 1);
        let id = self.wrid.get(index as usize).copied().unwrap_or(0);
        let tail = self.tail;
        self.set_next(tail, index);
        self.tail = index;
        id
    }
}

/// Work-request id of a receive CQE (`wqe_index` at CQE 0x18) of a QP attached to the SRQ in
/// `slot`; the WQE returns to the free list.
pub(crate) fn retire_srq_recv(srqs: &mut [Option<Srq>], slot: u32, wqe_index: u32) -> u64 {
    match srqs.get_mut(slot as usize) {
        Some(Some(s)) => s.retire(wqe_index),
        _ => 0,
    }
}

impl<P: Platform> Hca<P> {
    pub(crate) fn srq_mut(&mut self, h: SrqHandle) -> Result<&mut Srq, Error> {
        match self.srqs.get_mut(h.slot as usize) {
            Some(Some(s)) if s.srqn == h.srqn => Ok(s),
            _ => Err(Error::InvalidHandle),
        }
    }

    /// Create an SRQ of at least `max_wr` receives of up to `max_sge` SGEs in PD `pd`, with
    /// Linux's checks and sizes (§4.7). Returns the handle and what was granted.
    pub fn create_srq_raw(
        &mut self,
        pd: u32,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<(SrqHandle, SrqCap), Error> {
        let c = self.caps;
        if c.flags & crate::fw::flag::SRQ == 0 {
            return Err(Error::Capability("SRQs not supported"));
        }
        let max_srq_sge = c.max_rq_sg.saturating_sub(1);
        if max_wr >= c.max_srq_wqes || max_sge > max_srq_sge {
            return Err(Error::InvalidArgument(
                "SRQ larger than the device allows (max_wr, max_sge)",
            ));
        }
        let size = (max_wr + 1).next_power_of_two();
        let desc = ((NEXT_SEG as u32) + 16 * max_sge)
            .next_power_of_two()
            .max(32);
        let wqe_shift = desc.trailing_zeros();
        let bytes = ((size as usize) << wqe_shift).max(4096);
        let srqn = self
            .srqns
            .alloc()
            .ok_or(Error::NoResources("SRQ numbers"))?;
        let QueueMem {
            buf,
            page_shift,
            mtt,
            dbrec_idx,
            dbrec_bus: db_bus,
            dbrec,
        } = self.queue_mem(Ids::Srqn, srqn, bytes, "SRQ buffer")?;
        let mut srq = Srq {
            srqn,
            buf,
            size,
            wqe_shift,
            max_gs: max_sge,
            head: 0,
            tail: size - 1,
            wqe_ctr: 0,
            wrid: alloc::vec![0; size as usize],
            mtt,
            dbrec,
            dbrec_idx,
            users: 0,
            limit_events: 0,
            hw_owned: false,
        };
        // Every WQE links to the next, and every data segment ends the scatter list.
        for i in 0..size {
            srq.set_next(i, (i + 1) & (size - 1));
            let w = srq.wqe(i);
            for seg in w[NEXT_SEG..].as_chunks_mut::<16>().0 {
                seg[4..8].copy_from_slice(&INVALID_LKEY.to_be_bytes());
            }
        }
        let slot = (srqn - c.reserved_srqs) as usize;
        if self.srqs.len() <= slot {
            self.srqs.resize_with(slot + 1, || None);
        }
        self.srqs[slot] = Some(srq);
        let r = (|| {
            let mut ctx = SrqContext::default();
            ctx.state_logsize_srqn
                .set((size.trailing_zeros() << 24) | (srqn & 0xFF_FFFF));
            ctx.logstride = (wqe_shift - 4) as u8;
            // A basic SRQ names the device's reserved XRC domain, as Linux's
            // `mlx4_ib_create_srq` does; its CQN stays 0 (only XRC SRQs have one).
            ctx.xrcd.set(c.xrcd_for_srq());
            ctx.log_page_size = (page_shift - 12) as u8;
            let mtt_addr = mtt as u64 * 8;
            ctx.mtt_base_addr_h = (mtt_addr >> 32) as u8;
            ctx.mtt_base_addr_l.set(mtt_addr as u32);
            ctx.pd.set(pd);
            ctx.db_rec_addr.set(db_bus);
            let b = self.cmd.inbox_clear();
            if b.len() < size_of::<SrqContext>() {
                return Err(Error::NoMemory("command mailbox"));
            }
            b[..size_of::<SrqContext>()].copy_from_slice(ctx.as_bytes());
            self.cmd_in(Opcode::SW2HW_SRQ, srqn, 0)
        })();
        if let Err(e) = r {
            let _ = self.destroy_srq_index(slot);
            return Err(e);
        }
        if let Some(s) = self.srqs[slot].as_mut() {
            s.hw_owned = true;
        }
        let h = SrqHandle {
            slot: slot as u32,
            srqn,
        };
        Ok((
            h,
            SrqCap {
                max_wr: size - 1,
                max_sge,
            },
        ))
    }

    /// Arm the limit event (`mlx4_ib_modify_srq` with IB_SRQ_LIMIT): ARM_SRQ with the
    /// watermark; a limit not below the number of WQEs is refused, 0 disarms.
    pub fn arm_srq_raw(&mut self, h: SrqHandle, limit: u32) -> Result<(), Error> {
        let s = self.srq_mut(h)?;
        if limit >= s.size {
            return Err(Error::InvalidArgument("SRQ limit not below the SRQ size"));
        }
        let srqn = s.srqn;
        self.cmd(
            Opcode::ARM_SRQ,
            limit as u64,
            srqn,
            0,
            crate::cmd::Out::None,
        )
        .map(|_| ())
    }

    /// The armed limit as the device reports it (QUERY_SRQ's limit_watermark), and the
    /// granted capacities.
    pub fn query_srq_raw(&mut self, h: SrqHandle) -> Result<(u32, SrqCap), Error> {
        let s = self.srq_mut(h)?;
        let (srqn, cap) = (
            s.srqn,
            SrqCap {
                max_wr: s.size - 1,
                max_sge: s.max_gs,
            },
        );
        self.cmd_out(Opcode::QUERY_SRQ, 0, srqn, 0)?;
        let o = self.cmd.outbox();
        let ctx = SrqContext::read_from_prefix(o)
            .map_err(|_| Error::NoMemory("command mailbox"))?
            .0;
        Ok((u32::from(ctx.limit_watermark.get()), cap))
    }

    /// Destroy an SRQ: refused while QPs still use it (Linux: EBUSY), else HW2SW_SRQ
    /// (op_mod 1, no mailbox) and everything freed. HW2SW_SRQ is a closing command (Linux
    /// `mlx4_closing_cmd_fatal_error`): if it fails, the device is reset before the buffer
    /// goes back.
    pub fn destroy_srq_raw(&mut self, h: SrqHandle) -> Result<(), Error> {
        if self.srq_mut(h)?.users != 0 {
            return Err(Error::Busy("the SRQ has QPs attached"));
        }
        self.destroy_srq_index(h.slot as usize)
    }

    pub(crate) fn destroy_srq_index(&mut self, i: usize) -> Result<(), Error> {
        let s = self
            .srqs
            .get_mut(i)
            .and_then(|s| s.take())
            .ok_or(Error::InvalidHandle)?;
        let r = if s.hw_owned {
            self.cmd(Opcode::HW2SW_SRQ, 0, s.srqn, 1, crate::cmd::Out::None)
                .map(|_| ())
        } else {
            Ok(())
        };
        self.mtts.free(s.mtt);
        self.free_dbrec(s.dbrec_idx);
        self.srqns.free(s.srqn);
        self.release_queue_buf(s.buf);
        r
    }

    /// Post one receive to an SRQ (`mlx4_ib_post_srq_recv`): too many SGEs and a full SRQ
    /// (only the free list's tail left) are typed errors; otherwise the WR goes into the
    /// WQE at the head of the free list and the doorbell record gets the new count.
    pub fn post_srq_recv_raw(&mut self, h: SrqHandle, wr: &RecvWr<'_>) -> Result<(), verbs::Error> {
        let Some(Some(s)) = self.srqs.get_mut(h.slot as usize) else {
            return Err(verbs::Error::InvalidHandle);
        };
        if s.srqn != h.srqn {
            return Err(verbs::Error::InvalidHandle);
        }
        if wr.sg_list.len() > s.max_gs as usize {
            return Err(verbs::Error::TooManySge {
                n: wr.sg_list.len(),
                max: s.max_gs as usize,
            });
        }
        if s.head == s.tail {
            return Err(verbs::Error::QueueFull);
        }
        let ind = s.head;
        s.wrid[ind as usize] = wr.wr_id;
        let next = s.next_of(ind);
        let max_gs = s.max_gs as usize;
        let w = s.wqe(ind);
        for (i, sge) in wr.sg_list.iter().enumerate() {
            let o = NEXT_SEG + 16 * i;
            w[o..o + 4].copy_from_slice(&sge.length.to_be_bytes());
            w[o + 4..o + 8].copy_from_slice(&sge.lkey.to_be_bytes());
            w[o + 8..o + 16].copy_from_slice(&sge.addr.to_be_bytes());
        }
        if wr.sg_list.len() < max_gs {
            let o = NEXT_SEG + 16 * wr.sg_list.len();
            w[o..o + 4].copy_from_slice(&0u32.to_be_bytes());
            w[o + 4..o + 8].copy_from_slice(&INVALID_LKEY.to_be_bytes());
            w[o + 8..o + 16].copy_from_slice(&0u64.to_be_bytes());
        }
        s.head = next;
        s.wqe_ctr = s.wqe_ctr.wrapping_add(1);
        let ctr = s.wqe_ctr;
        let dbrec = s.dbrec;
        self.p.wmb();
        // SAFETY: dbrec points at the SRQ's 8-byte doorbell record; the count is its first
        // dword, big-endian.
        unsafe { core::ptr::write_volatile(dbrec as *mut u32, u32::from(ctr).to_be()) };
        Ok(())
    }

    /// An SRQ_LIMIT event for `srqn` (§4.7): counted on the SRQ and queued for
    /// [`Hca::get_async_event`].
    pub(crate) fn srq_limit_event(&mut self, srqn: u32) {
        let rsvd = self.caps.reserved_srqs;
        if let Some(Some(s)) = self.srqs.get_mut(srqn.wrapping_sub(rsvd) as usize) {
            if s.srqn == srqn {
                s.limit_events += 1;
            }
        }
        self.queue_async_event(verbs::AsyncEvent::SrqLimitReached { srq_num: srqn });
    }

    /// Queue an event for [`Hca::get_async_event`]; when the queue is full the oldest goes.
    pub(crate) fn queue_async_event(&mut self, e: verbs::AsyncEvent) {
        if self.async_queue.len() >= MAX_QUEUED_EVENTS {
            self.async_queue.pop_front();
        }
        self.async_queue.push_back(e);
    }

    /// The oldest asynchronous event not yet returned, after draining the EQ.
    pub fn get_async_event(&mut self) -> Option<verbs::AsyncEvent> {
        self.process_events();
        self.async_queue.pop_front()
    }

    /// Limit events an SRQ has seen since creation.
    pub fn srq_limit_events(&mut self, h: SrqHandle) -> Result<u32, Error> {
        Ok(self.srq_mut(h)?.limit_events)
    }
}
