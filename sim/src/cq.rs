//! Completion queues (§4.2): context, 32-byte CQEs with the owner bit, the doorbell record
//! (set_ci) for overflow detection, arming through the UAR with a sequence number, COMP events
//! and CQ_ERROR on overflow.

use crate::eq::{CqErrorSyndrome, Event};
use crate::hca::Hca;
use crate::uar::db;

pub const CQE_SIZE: u64 = 32;

/// CQ context fields (§4.2): the model's own definitions, written from docs/hardware.md
/// independently of the driver's (`drivers/mlx4/src/layouts.rs` compares them). SW2HW_CQ,
/// MODIFY_CQ, QUERY_CQ and the behaviour trace all use these.
pub mod cqc {
    use crate::be::Field;

    pub const SIZE: usize = 64;
    pub const STATUS: Field = Field::bits(0x00, 4, 28, 4);
    pub const COLLAPSED: Field = Field::bit(0x00, 4, 18);
    pub const STATE: Field = Field::bits(0x00, 4, 8, 4);
    pub const PAGE_OFFSET: Field = Field::whole(0x0a, 2);
    pub const LOG_CQ_SIZE: Field = Field::bits(0x0c, 4, 24, 5);
    /// Hardware index of the UAR page whose doorbells the CQ uses.
    pub const UAR: Field = Field::bits(0x0c, 4, 0, 24);
    pub const CQ_PERIOD: Field = Field::whole(0x10, 2);
    pub const CQ_MAX_COUNT: Field = Field::whole(0x12, 2);
    pub const COMP_EQN: Field = Field::whole(0x17, 1);
    pub const LOG_PAGE_SIZE: Field = Field::bits(0x18, 1, 0, 6);
    pub const MTT_BASE_HI: Field = Field::whole(0x1b, 1);
    pub const MTT_BASE_LO: Field = Field::whole(0x1c, 4);
    pub const CONSUMER_INDEX: Field = Field::bits(0x28, 4, 0, 24);
    pub const PRODUCER_INDEX: Field = Field::bits(0x2c, 4, 0, 24);
    pub const DB_REC_ADDR: Field = Field::whole(0x38, 8);
}

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
    /// The sequence number of the arm that raised the CQ's last completion event: the
    /// driver's next arm must carry the next one (§4.2).
    pub fired_sn: Option<u8>,
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
    /// cq_period and cq_max_count of a CQ context (§4.2).
    pub fn from_context(ctx: &[u8]) -> CqModeration {
        CqModeration {
            period_us: cqc::CQ_PERIOD.get(ctx) as u16,
            max_count: cqc::CQ_MAX_COUNT.get(ctx) as u16,
        }
    }

    /// Store the moderation into a CQ context image.
    pub fn to_context(self, ctx: &mut [u8]) {
        cqc::CQ_PERIOD.set(ctx, self.period_us.into());
        cqc::CQ_MAX_COUNT.set(ctx, self.max_count.into());
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

/// CQE fields (the 32-byte legacy CQE, §4.2): the model's own definitions, written from
/// docs/hardware.md independently of the driver's (`drivers/mlx4/src/layouts.rs` compares
/// them).
pub mod cqe {
    use crate::be::Field;

    pub const MY_QPN: Field = Field::bits(0x00, 4, 0, 24);
    /// Immediate data (BE, passed through), or the P_Key index of a UD receive.
    pub const IMMED: Field = Field::whole(0x04, 4);
    pub const GRH: Field = Field::bit(0x08, 4, 31);
    pub const MY_PATH_BITS: Field = Field::bits(0x08, 4, 24, 7);
    pub const REMOTE_QPN: Field = Field::bits(0x08, 4, 0, 24);
    pub const SL: Field = Field::bits(0x0c, 2, 12, 4);
    pub const SLID: Field = Field::whole(0x0e, 2);
    pub const BYTE_CNT: Field = Field::whole(0x14, 4);
    pub const WQE_INDEX: Field = Field::whole(0x18, 2);
    /// Error CQE only.
    pub const VENDOR_SYNDROME: Field = Field::whole(0x1a, 1);
    /// Error CQE only.
    pub const SYNDROME: Field = Field::whole(0x1b, 1);
    pub const OWNER: Field = Field::bit(0x1f, 1, 7);
    /// S: a send (requester) completion.
    pub const SEND: Field = Field::bit(0x1f, 1, 6);
    pub const OPCODE: Field = Field::bits(0x1f, 1, 0, 5);
}

/// A completion to write (the 32-byte legacy CQE, §4.2), without the owner bit: the parsed
/// form of a CQE. [`Completion::emit`] is the only place the model builds CQE bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    pub qpn: u32,
    pub immed: u32,
    pub grh: bool,
    pub my_path_bits: u8,
    pub remote_qpn: u32,
    pub sl: u8,
    pub slid: u16,
    pub byte_cnt: u32,
    pub wqe_index: u16,
    pub vendor_syndrome: u8,
    pub syndrome: u8,
    pub send: bool,
    pub opcode: u8,
    /// Solicited (for REQ_NOTIFY_SOLICITED); not part of the CQE.
    pub solicited: bool,
}

impl Completion {
    /// A successful send completion: the WQE's opcode echoed with S set.
    pub fn send(qpn: u32, wqe_index: u16, opcode: u8, byte_cnt: u32) -> Completion {
        Completion {
            qpn,
            wqe_index,
            opcode,
            byte_cnt,
            send: true,
            ..Default::default()
        }
    }

    /// An error CQE (opcode 0x1E) with `s`, for the send or the receive side.
    pub fn error(qpn: u32, wqe_index: u16, s: Syndrome, send: bool) -> Completion {
        Completion {
            qpn,
            wqe_index,
            syndrome: s as u8,
            opcode: opcode::ERROR,
            send,
            ..Default::default()
        }
    }

    pub fn is_error(&self) -> bool {
        self.opcode & 0x1f == opcode::ERROR
    }

    /// The CQE bytes with the given owner bit.
    pub fn emit(&self, owner: bool) -> [u8; CQE_SIZE as usize] {
        let mut b = [0u8; CQE_SIZE as usize];
        cqe::MY_QPN.set(&mut b, self.qpn.into());
        cqe::IMMED.set(&mut b, self.immed.into());
        cqe::GRH.set_bool(&mut b, self.grh);
        cqe::MY_PATH_BITS.set(&mut b, self.my_path_bits.into());
        cqe::REMOTE_QPN.set(&mut b, self.remote_qpn.into());
        cqe::SL.set(&mut b, self.sl.into());
        cqe::SLID.set(&mut b, self.slid.into());
        cqe::BYTE_CNT.set(&mut b, self.byte_cnt.into());
        cqe::WQE_INDEX.set(&mut b, self.wqe_index.into());
        cqe::VENDOR_SYNDROME.set(&mut b, self.vendor_syndrome.into());
        cqe::SYNDROME.set(&mut b, self.syndrome.into());
        cqe::SEND.set_bool(&mut b, self.send);
        cqe::OPCODE.set(&mut b, self.opcode.into());
        cqe::OWNER.set_bool(&mut b, owner);
        b
    }

    /// The completion a CQE image describes (its owner bit is not part of it).
    pub fn parse(b: &[u8]) -> Completion {
        Completion {
            qpn: cqe::MY_QPN.get_u32(b),
            immed: cqe::IMMED.get_u32(b),
            grh: cqe::GRH.get_bool(b),
            my_path_bits: cqe::MY_PATH_BITS.get(b) as u8,
            remote_qpn: cqe::REMOTE_QPN.get_u32(b),
            sl: cqe::SL.get(b) as u8,
            slid: cqe::SLID.get(b) as u16,
            byte_cnt: cqe::BYTE_CNT.get_u32(b),
            wqe_index: cqe::WQE_INDEX.get(b) as u16,
            vendor_syndrome: cqe::VENDOR_SYNDROME.get(b) as u8,
            syndrome: cqe::SYNDROME.get(b) as u8,
            send: cqe::SEND.get_bool(b),
            opcode: cqe::OPCODE.get(b) as u8,
            solicited: false,
        }
    }
}

impl Hca {
    /// CQE slots of this HCA (INIT_HCA 0x58 bit 30 / 0x5B, §2.6).
    pub(crate) fn cqe_layout(&self) -> crate::icm::EntryLayout {
        self.fw
            .init
            .as_ref()
            .map_or(crate::icm::EntryLayout::LEGACY, |p| p.cqe_layout())
    }

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
        let ci = db::CQ_RECORD_SET_CI.get_u32(&rec);
        let used = pi.wrapping_sub(ci) & 0xff_ffff;
        if used >= nent {
            if let Some(cq) = self.cqs.get_mut(&cqn) {
                cq.overflowed = true;
            }
            self.violation(
                "§4.2",
                format!("CQ {cqn:#x} overrun: producer {pi:#x}, doorbell-record consumer {ci:#x}, {nent} entries; CQ_ERROR event"),
            );
            let ev = Event::CqError {
                cqn,
                syndrome: CqErrorSyndrome::Overrun,
            };
            if !self.post_async_event(ev) {
                self.violation("§4.1", "CQ_ERROR event (type 0x04) is not mapped to any EQ");
            }
            return false;
        }
        let cqe = c.emit(pi & nent != 0);
        let index = pi & (nent - 1);
        let what = format!("CQE {index} of CQ {cqn:#x}");
        let at = self.cqe_layout();
        if self
            .mtt_write(
                mtt,
                shift,
                u64::from(index) * at.stride + at.offset,
                &cqe,
                &what,
            )
            .is_err()
        {
            if let Some(cq) = self.cqs.get_mut(&cqn) {
                cq.overflowed = true;
            }
            self.post_async_event(Event::CqError {
                cqn,
                syndrome: CqErrorSyndrome::AccessViolation,
            });
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
        cq.fired_sn = Some(cq.arm_sn);
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
        self.post_eqe(eqn, Event::Comp { cqn });
    }

    /// CQ arm doorbell on UAR page `page` (§4.2): dword0 = sn << 28 | cmd << 24 | cqn,
    /// dword1 = consumer index.
    pub(crate) fn cq_arm_doorbell(&mut self, page: u64, dword0: u32, dword1: u32) {
        let d0 = dword0.to_be_bytes();
        let cqn = db::CQ_CQN.get_u32(&d0);
        let cmd = db::CQ_CMD.get_u32(&d0);
        let sn = db::CQ_SN.get(&d0) as u8;
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
        let arm = match cmd {
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
        let (db_rec, fired) = (cq.db_rec, cq.fired_sn);
        // The arm word the driver wrote into the doorbell record before ringing must say
        // what the doorbell says (§4.2: record, barrier, doorbell). Inspected, not counted.
        let mut rec = [0u8; 8];
        if self.peek_host(db_rec, &mut rec) {
            let word = db::CQ_RECORD_ARM.get_u32(&rec);
            let expected = (u32::from(sn) << 28) | (cmd << 24) | (dword1 & 0xff_ffff);
            if word != expected {
                self.violation(
                    "§4.2",
                    format!("CQ {cqn:#x} armed with sn {sn}, command {cmd}, consumer index {:#x}, but the doorbell record's arm word is {word:#010x} (expected {expected:#010x}, written before the doorbell)", dword1 & 0xff_ffff),
                );
            }
        }
        // After an event the next arm carries the next sequence number (mod 4); a card takes
        // an arm with the sequence number of the arm that already fired as stale and ignores
        // it, so an event wait behind it would hang (Linux: `mlx4_cq_completion` increments
        // arm_sn, `mlx4_cq_arm` sends it).
        if let Some(f) = fired {
            let next = (f + 1) & 3;
            if sn != next {
                self.violation(
                    "§4.2",
                    format!("CQ {cqn:#x} armed with sequence number {sn}; the arm that raised its last event had {f}, so the next arm must carry {next}; a card ignores it (stale), and an event wait would hang"),
                );
                return;
            }
        }
        let Some(cq) = self.cqs.get_mut(&cqn) else {
            return;
        };
        cq.arm = arm;
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
        let total = u64::from(cq.nent()) * self.cqe_layout().stride;
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

    /// SW2HW_CQ op_mod 1 (SW_CQ_INIT): software says it gave every CQE to the hardware. A CQE
    /// whose owner bit it left clear looks like a completion to the poller at once, so the
    /// first one found is recorded (the command still succeeds: the card takes software's
    /// word).
    pub(crate) fn cq_check_software_init(&mut self, cqn: u32) -> Result<(), crate::hcr::Status> {
        let Some(cq) = self.cqs.get(&cqn) else {
            return Ok(());
        };
        let (nent, mtt, shift) = (u64::from(cq.nent()), cq.mtt_index, cq.page_shift);
        let at = self.cqe_layout();
        const STEP: u64 = 1 << 16;
        let mut first = 0;
        while first < nent {
            let n = STEP.min(nent - first);
            let mut buf = vec![0u8; (n * at.stride) as usize];
            let what = format!("CQ {cqn:#x} buffer");
            self.mtt_read(mtt, shift, first * at.stride, &mut buf, &what)?;
            let clear = buf
                .chunks(at.stride as usize)
                .position(|slot| !cqe::OWNER.get_bool(&slot[at.offset as usize..]));
            if let Some(k) = clear {
                self.violation(
                    "§4.2",
                    format!("SW2HW_CQ {cqn:#x} op_mod 1 (SW_CQ_INIT): CQE {} has its owner bit clear, so the poller would take it for a completion (software must fill the CQEs, Linux with 0xCC)", first + k as u64),
                );
                return Ok(());
            }
            first += n;
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
        cqc::STATUS.set(&mut c, status.into());
        cqc::STATE.set(&mut c, state.into());
        cqc::PRODUCER_INDEX.set(&mut c, cq.producer.into());
        c
    }
}
