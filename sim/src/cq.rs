//! Completion queues (§4.2): context, 32-byte CQEs with the owner bit, the doorbell record
//! (set_ci) for overflow detection, arming through the UAR with a sequence number, COMP events
//! and CQ_ERROR on overflow.

use crate::be::{BeRead, BeWrite};
use crate::eq::event;
use crate::hca::Hca;

pub const CQE_SIZE: u64 = 32;

/// CQ notification request (§4.2 arm doorbell cmd).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqArm {
    Disarmed,
    /// REQ_NOTIFY_SOLICITED (cmd 1): solicited or error completions.
    Solicited,
    /// REQ_NOTIFY (cmd 2): the next completion.
    Next,
}

/// CQE opcodes (§4.2).
pub mod opcode {
    pub const RECV_RDMA_WRITE_IMM: u8 = 0x00;
    pub const RECV_SEND: u8 = 0x01;
    pub const RECV_SEND_IMM: u8 = 0x02;
    pub const ERROR: u8 = 0x1e;
}

/// CQE error syndromes (§4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Syndrome {
    LocalLength = 0x01,
    LocalQpOperation = 0x02,
    LocalProtection = 0x04,
    WrFlushed = 0x05,
    MwBind = 0x06,
    BadResponse = 0x10,
    LocalAccess = 0x11,
    RemoteInvalidRequest = 0x12,
    RemoteAccess = 0x13,
    RemoteOperation = 0x14,
    TransportRetryExceeded = 0x15,
    RnrRetryExceeded = 0x16,
    RemoteAborted = 0x22,
}

/// One CQ in hardware ownership.
#[derive(Clone, Debug)]
pub struct Cq {
    pub cqn: u32,
    pub ctx: Vec<u8>,
    pub log_size: u32,
    pub uar: u32,
    pub comp_eqn: u32,
    pub page_shift: u32,
    pub mtt_index: u64,
    pub db_rec: u64,
    pub producer: u32,
    pub arm: CqArm,
    pub overflowed: bool,
    /// Last arm sequence number seen on the arm doorbell.
    pub arm_sn: u8,
    /// Event moderation (CQ context cq_max_count / cq_period).
    pub moderation: CqModeration,
    /// Completions that would have raised the armed event but are held back by moderation.
    pub moderated: u32,
    /// When the held-back event is due (model clock, ns): cq_period after the first of them.
    pub moderation_deadline: Option<u64>,
}

/// CQ event moderation: the completion event of an armed CQ waits until `max_count`
/// completions have arrived or `period_us` microseconds have passed since the first of
/// them, whichever comes first; a zero field disables its condition, both zero = an event at
/// every completion (see docs/model.md, "CQ moderation").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqModeration {
    pub max_count: u16,
    pub period_us: u16,
}

impl CqModeration {
    /// cq_period at 0x10 and cq_max_count at 0x12 of a CQ context (§4.2).
    pub fn from_context(ctx: &[u8]) -> CqModeration {
        CqModeration {
            period_us: ctx.be16(0x10),
            max_count: ctx.be16(0x12),
        }
    }

    pub fn enabled(&self) -> bool {
        self.max_count != 0 || self.period_us != 0
    }
}

impl Cq {
    pub fn nent(&self) -> u32 {
        1 << self.log_size
    }
}

/// A completion to write (the 32-byte legacy CQE, §4.2), without the owner bit.
#[derive(Clone, Copy, Debug, Default)]
pub struct Completion {
    pub bytes: [u8; 32],
    /// Solicited (for REQ_NOTIFY_SOLICITED).
    pub solicited: bool,
}

impl Completion {
    pub fn is_error(&self) -> bool {
        self.bytes[0x1f] & 0x1f == opcode::ERROR
    }
}

impl Hca {
    /// Append a CQE to CQ `cqn`. Returns false if it could not be written (no such CQ,
    /// overflow, write failure), each recorded.
    pub(crate) fn push_cqe(&mut self, cqn: u32, c: Completion) -> bool {
        let Some(cq) = self.cqs.get(&cqn) else {
            self.violation(
                "§4.2",
                format!("completion for CQ {cqn:#x}, which is not in hardware ownership; lost"),
            );
            return false;
        };
        if cq.overflowed {
            return false;
        }
        let (db, nent, pi, mtt, shift) = (
            cq.db_rec,
            cq.nent(),
            cq.producer,
            cq.mtt_index,
            cq.page_shift,
        );
        // §4.2 (inferred): the device reads set_ci from the doorbell record to know how much
        // room is left.
        let mut rec = [0u8; 4];
        if self.dma_read(db, &mut rec, "CQ doorbell record").is_err() {
            return false;
        }
        let ci = rec.be32(0) & 0xff_ffff;
        let used = pi.wrapping_sub(ci) & 0xff_ffff;
        if used >= nent {
            if let Some(cq) = self.cqs.get_mut(&cqn) {
                cq.overflowed = true;
            }
            self.violation(
                "§4.2",
                format!("CQ {cqn:#x} overrun: producer {pi:#x}, doorbell-record consumer {ci:#x}, {nent} entries; CQ_ERROR event"),
            );
            let mut d = [0u8; 24];
            d.put32(0, cqn & 0xff_ffff);
            d.put8(0x0b, 1); // syndrome 1 = overrun (EQE 0x0F)
            if !self.post_async_event(event::CQ_ERROR, 0, d) {
                self.violation("§4.1", "CQ_ERROR event (type 0x04) is not mapped to any EQ");
            }
            return false;
        }
        let mut cqe = c.bytes;
        let owner = pi & nent != 0;
        cqe[0x1f] = (cqe[0x1f] & 0x7f) | if owner { 0x80 } else { 0 };
        let index = pi & (nent - 1);
        let what = format!("CQE {index} of CQ {cqn:#x}");
        if self
            .mtt_write(mtt, shift, u64::from(index) * CQE_SIZE, &cqe, &what)
            .is_err()
        {
            if let Some(cq) = self.cqs.get_mut(&cqn) {
                cq.overflowed = true;
            }
            let mut d = [0u8; 24];
            d.put32(0, cqn & 0xff_ffff);
            d.put8(0x0b, 2); // access violation
            self.post_async_event(event::CQ_ERROR, 0, d);
            return false;
        }
        let Some(cq) = self.cqs.get_mut(&cqn) else {
            return false;
        };
        cq.producer = cq.producer.wrapping_add(1) & 0xff_ffff;
        let trigger = match cq.arm {
            CqArm::Next => true,
            CqArm::Solicited => c.solicited || c.is_error(),
            CqArm::Disarmed => false,
        };
        if !trigger {
            return true;
        }
        let m = cq.moderation;
        cq.moderated += 1;
        let fire = !m.enabled() || (m.max_count != 0 && cq.moderated >= u32::from(m.max_count));
        if fire {
            self.cq_fire(cqn);
        } else if m.period_us != 0 && cq.moderation_deadline.is_none() {
            cq.moderation_deadline = Some(self.now_ns + u64::from(m.period_us) * 1000);
        }
        true
    }

    /// Raise the armed CQ's completion event and disarm it.
    fn cq_fire(&mut self, cqn: u32) {
        let Some(cq) = self.cqs.get_mut(&cqn) else {
            return;
        };
        cq.arm = CqArm::Disarmed;
        cq.moderated = 0;
        cq.moderation_deadline = None;
        let eqn = cq.comp_eqn;
        self.comp_event(cqn, eqn);
    }

    /// Raise the events whose moderation period has run out.
    pub(crate) fn cq_moderation_tick(&mut self) {
        let now = self.now_ns;
        let due: Vec<u32> = self
            .cqs
            .values()
            .filter(|q| q.moderation_deadline.is_some_and(|d| d <= now))
            .map(|q| q.cqn)
            .collect();
        for cqn in due {
            self.cq_fire(cqn);
        }
    }

    fn comp_event(&mut self, cqn: u32, eqn: u32) {
        let mut d = [0u8; 24];
        d.put32(0, cqn & 0xff_ffff);
        self.post_eqe(eqn, event::COMP, 0, d);
    }

    /// CQ arm doorbell on UAR page `page` (§4.2): dword0 = sn << 28 | cmd << 24 | cqn,
    /// dword1 = consumer index.
    pub(crate) fn cq_arm_doorbell(&mut self, page: u64, dword0: u32, dword1: u32) {
        let cqn = dword0 & 0xff_ffff;
        let cmd = (dword0 >> 24) & 0xf;
        let sn = ((dword0 >> 28) & 3) as u8;
        let Some(cq) = self.cqs.get_mut(&cqn) else {
            self.violation(
                "§4.2",
                format!("CQ arm doorbell for CQ {cqn:#x}, which is not in hardware ownership"),
            );
            return;
        };
        if u64::from(cq.uar) != page {
            let u = cq.uar;
            self.violation(
                "§4.2",
                format!("CQ {cqn:#x} armed through UAR page {page}, but its context names UAR {u} (inferred rule); ignored"),
            );
            return;
        }
        cq.arm = match cmd {
            1 => CqArm::Solicited,
            2 => CqArm::Next,
            _ => {
                self.violation(
                    "§4.2",
                    format!(
                        "CQ {cqn:#x} arm doorbell with command {cmd} (1 = solicited, 2 = next)"
                    ),
                );
                return;
            }
        };
        cq.arm_sn = sn;
        cq.moderated = 0;
        cq.moderation_deadline = None;
        let ci = dword1 & 0xff_ffff;
        // §4.2 (unverified, decision): completions already beyond the consumer index given
        // in the doorbell fire at once, moderation or not (they were written before the arm).
        if cq.producer != ci {
            self.cq_fire(cqn);
        }
    }

    /// Fill every CQE with 0xCC (owner bit 1 = hardware owned) at SW2HW_CQ op_mod 0 (§4.2).
    pub(crate) fn cq_init_owner(&mut self, cqn: u32) -> Result<(), crate::hcr::Status> {
        let Some(cq) = self.cqs.get(&cqn) else {
            return Ok(());
        };
        let total = u64::from(cq.nent()) * CQE_SIZE;
        let (mtt, shift) = (cq.mtt_index, cq.page_shift);
        let psz = 1u64 << shift;
        let mut off = 0;
        while off < total {
            let n = psz.min(total - off).min(1 << 20) as usize;
            self.mtt_write(
                mtt,
                shift,
                off,
                &vec![0xcc; n],
                &format!("CQ {cqn:#x} buffer"),
            )?;
            off += n as u64;
        }
        Ok(())
    }

    pub(crate) fn cq_context_now(&self, cqn: u32) -> Vec<u8> {
        let Some(cq) = self.cqs.get(&cqn) else {
            return vec![0; 64];
        };
        let mut c = cq.ctx.clone();
        c.resize(64, 0);
        let status: u32 = if cq.overflowed { 9 } else { 0 };
        let state: u32 = match cq.arm {
            CqArm::Disarmed => 0,
            CqArm::Solicited => 6,
            CqArm::Next => 9,
        };
        let flags = (c.be32(0) & !0xf000_0f00) | (status << 28) | (state << 8);
        c.put32(0x00, flags);
        c.put32(0x2c, cq.producer);
        c
    }
}
