//! Event queues (§4.1): context, EQE producer with the owner-bit convention, arming and
//! interrupt delivery, overflow detection, and MAP_EQ's event-type routing.

use crate::hca::Hca;
use crate::uar::db;

/// EQE size (32-byte EQEs; 64-byte EQEs are never enabled, §10.9).
pub const EQE_SIZE: u64 = 32;

/// EQ context fields (§4.1): the model's own definitions, written from docs/hardware.md
/// independently of the driver's (`drivers/mlx4/src/layouts.rs` compares them). SW2HW_EQ,
/// QUERY_EQ and the behaviour trace all use these.
pub mod eqc {
    use crate::be::Field;

    pub const SIZE: usize = 64;
    pub const STATUS: Field = Field::bits(0x00, 4, 28, 4);
    pub const STATE: Field = Field::bits(0x00, 4, 8, 4);
    pub const PAGE_OFFSET: Field = Field::whole(0x0a, 2);
    pub const LOG_EQ_SIZE: Field = Field::bits(0x0c, 1, 0, 5);
    pub const EQ_PERIOD: Field = Field::whole(0x10, 2);
    pub const EQ_MAX_COUNT: Field = Field::whole(0x12, 2);
    pub const INTR: Field = Field::whole(0x17, 1);
    pub const LOG_PAGE_SIZE: Field = Field::bits(0x18, 1, 0, 6);
    pub const MTT_BASE_HI: Field = Field::whole(0x1b, 1);
    pub const MTT_BASE_LO: Field = Field::whole(0x1c, 4);
    pub const CONSUMER_INDEX: Field = Field::bits(0x28, 4, 0, 24);
    pub const PRODUCER_INDEX: Field = Field::bits(0x2c, 4, 0, 24);
}

/// EQ arm state (EQC 0x00 bits 11:8, §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EqState {
    Armed = 0x9,
    Fired = 0xa,
    AlwaysArmed = 0xb,
}

/// Event types used by the model (§4.1 table).
pub mod event {
    pub const COMP: u8 = 0x00;
    pub const CQ_ERROR: u8 = 0x04;
    pub const WQ_CATAS_ERROR: u8 = 0x05;
    pub const PORT_CHANGE: u8 = 0x09;
    pub const CMD: u8 = 0x0a;
    pub const EQ_OVERFLOW: u8 = 0x0f;
    pub const WQ_INVAL_REQ_ERROR: u8 = 0x10;
    pub const WQ_ACCESS_ERROR: u8 = 0x11;
    pub const SRQ_LIMIT: u8 = 0x14;
    /// Reported only by a device whose QUERY_DEV_CAP flag 59 offers it.
    pub const PORT_MNG_CHG: u8 = 0x1d;
    /// Reported only when INIT_HCA enabled them (0x18 bit 31).
    pub const RECOVERABLE_ERROR: u8 = 0x3e;
}

/// EQE fields (§4.1), offsets from the start of the EQE: the model's own definitions, written
/// from docs/hardware.md independently of the driver's (`drivers/mlx4/src/layouts.rs`
/// compares them).
pub mod eqe {
    use crate::be::Field;

    pub const EVENT_TYPE: Field = Field::whole(0x01, 1);
    pub const SUBTYPE: Field = Field::whole(0x03, 1);
    pub const OWNER: Field = Field::bit(0x1f, 1, 7);
    /// COMP, CQ_ERROR: the CQ.
    pub const CQN: Field = Field::bits(0x04, 4, 0, 24);
    /// CQ_ERROR: 1 overrun, 2 access violation.
    pub const CQ_SYNDROME: Field = Field::whole(0x0f, 1);
    /// EQ_OVERFLOW: the EQ that overflowed (the model's choice; the reference gives no data).
    pub const EQN: Field = Field::whole(0x04, 4);
    /// PORT_CHANGE: the port.
    pub const PORT: Field = Field::bits(0x0c, 4, 28, 4);
    /// CMD: token, status and out_param of the completed command.
    pub const CMD_TOKEN: Field = Field::whole(0x06, 2);
    pub const CMD_STATUS: Field = Field::whole(0x0f, 1);
    pub const CMD_OUT_PARAM: Field = Field::whole(0x10, 8);
    /// SRQ_LIMIT: the SRQ (§4.7).
    pub const SRQN: Field = Field::bits(0x04, 4, 0, 24);
    /// PORT_MNG_CHG (subtype PORT_INFO): the port and the PortInfo values that changed
    /// (Linux `struct mlx4_eqe` `port_mgmt_change`).
    pub const PMC_PORT: Field = Field::whole(0x07, 1);
    pub const PMC_SM_LID: Field = Field::whole(0x08, 2);
    pub const PMC_LID: Field = Field::whole(0x0a, 2);
    pub const PMC_CHANGED: Field = Field::whole(0x0c, 4);
    pub const PMC_SM_SL: Field = Field::bits(0x13, 1, 0, 4);
    pub const PMC_GID_PREFIX: Field = Field::whole(0x14, 8);
    /// RECOVERABLE_ERROR: the port of a cable event.
    pub const CABLE_PORT: Field = Field::whole(0x07, 1);
}

/// PORT_CHANGE subtypes (§4.1).
/// PORT_MNG_CHG subtype: a PortInfo change, and what changed (Linux
/// `MLX4_DEV_PMC_SUBTYPE_PORT_INFO`, `MLX4_EQ_PORT_INFO_*_MASK`).
pub const PMC_SUBTYPE_PORT_INFO: u8 = 0x15;
pub mod pmc_changed {
    pub const SM_LID: u32 = 1 << 0;
    pub const GID_PREFIX: u32 = 1 << 1;
    pub const LID: u32 = 1 << 2;
    pub const CLIENT_REREG: u32 = 1 << 3;
    pub const SM_SL: u32 = 1 << 4;
}

/// RECOVERABLE_ERROR subtypes (Linux `MLX4_RECOVERABLE_ERROR_EVENT_SUBTYPE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum CableError {
    Bad = 1,
    Unsupported = 2,
}

pub const PORT_CHANGE_DOWN: u8 = 1;
pub const PORT_CHANGE_ACTIVE: u8 = 4;

/// CQ_ERROR syndromes (§4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum CqErrorSyndrome {
    Overrun = 1,
    AccessViolation = 2,
}

/// An event as an EQE carries it (§4.1). [`Event::emit`] is the only place the model builds
/// EQE bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    Comp {
        cqn: u32,
    },
    CqError {
        cqn: u32,
        syndrome: CqErrorSyndrome,
    },
    PortChange {
        port: u8,
        active: bool,
    },
    Cmd {
        token: u16,
        status: u8,
        out_param: u64,
    },
    EqOverflow {
        eqn: u32,
    },
    SrqLimit {
        srqn: u32,
    },
    /// The firmware SMA changed PortInfo values (`changed`: [`pmc_changed`] bits).
    PortMgmtChange {
        port: u8,
        changed: u32,
        lid: u16,
        sm_lid: u16,
        sm_sl: u8,
        gid_prefix: u64,
    },
    RecoverableError {
        port: u8,
        kind: CableError,
    },
}

impl Event {
    pub fn event_type(&self) -> u8 {
        match self {
            Event::Comp { .. } => event::COMP,
            Event::CqError { .. } => event::CQ_ERROR,
            Event::PortChange { .. } => event::PORT_CHANGE,
            Event::Cmd { .. } => event::CMD,
            Event::EqOverflow { .. } => event::EQ_OVERFLOW,
            Event::SrqLimit { .. } => event::SRQ_LIMIT,
            Event::PortMgmtChange { .. } => event::PORT_MNG_CHG,
            Event::RecoverableError { .. } => event::RECOVERABLE_ERROR,
        }
    }

    pub fn subtype(&self) -> u8 {
        match self {
            Event::PortChange { active: true, .. } => PORT_CHANGE_ACTIVE,
            Event::PortChange { active: false, .. } => PORT_CHANGE_DOWN,
            Event::PortMgmtChange { .. } => PMC_SUBTYPE_PORT_INFO,
            Event::RecoverableError { kind, .. } => *kind as u8,
            _ => 0,
        }
    }

    /// The EQE bytes with the given owner bit.
    pub fn emit(&self, owner: bool) -> [u8; EQE_SIZE as usize] {
        let mut b = [0u8; EQE_SIZE as usize];
        eqe::EVENT_TYPE.set(&mut b, self.event_type().into());
        eqe::SUBTYPE.set(&mut b, self.subtype().into());
        match *self {
            Event::Comp { cqn } => eqe::CQN.set(&mut b, cqn.into()),
            Event::CqError { cqn, syndrome } => {
                eqe::CQN.set(&mut b, cqn.into());
                eqe::CQ_SYNDROME.set(&mut b, syndrome as u64);
            }
            Event::PortChange { port, .. } => eqe::PORT.set(&mut b, port.into()),
            Event::Cmd {
                token,
                status,
                out_param,
            } => {
                eqe::CMD_TOKEN.set(&mut b, token.into());
                eqe::CMD_STATUS.set(&mut b, status.into());
                eqe::CMD_OUT_PARAM.set(&mut b, out_param);
            }
            Event::EqOverflow { eqn } => eqe::EQN.set(&mut b, eqn.into()),
            Event::SrqLimit { srqn } => eqe::SRQN.set(&mut b, srqn.into()),
            Event::PortMgmtChange {
                port,
                changed,
                lid,
                sm_lid,
                sm_sl,
                gid_prefix,
            } => {
                eqe::PMC_PORT.set(&mut b, port.into());
                eqe::PMC_SM_LID.set(&mut b, sm_lid.into());
                eqe::PMC_LID.set(&mut b, lid.into());
                eqe::PMC_CHANGED.set(&mut b, changed.into());
                eqe::PMC_SM_SL.set(&mut b, sm_sl.into());
                eqe::PMC_GID_PREFIX.set(&mut b, gid_prefix);
            }
            Event::RecoverableError { port, .. } => eqe::CABLE_PORT.set(&mut b, port.into()),
        }
        eqe::OWNER.set_bool(&mut b, owner);
        b
    }
}

/// One EQ in hardware ownership.
#[derive(Clone, Debug)]
pub struct Eq {
    pub eqn: u32,
    /// The EQC image as last written (64 bytes).
    pub ctx: Vec<u8>,
    pub log_size: u32,
    pub page_shift: u32,
    /// First MTT index of the buffer (mtt_base_addr / 8, §4.6).
    pub mtt_index: u64,
    pub intr: u8,
    pub state: EqState,
    /// Producer and consumer indices (24-bit counters, §4.1).
    pub producer: u32,
    pub consumer: u32,
    pub overflowed: bool,
    pub write_failed: bool,
}

impl Eq {
    pub fn nent(&self) -> u32 {
        1 << self.log_size
    }
}

impl Hca {
    /// EQE slots of this HCA (INIT_HCA 0x58 bit 29 / 0x5B, §2.6).
    pub(crate) fn eqe_layout(&self) -> crate::icm::EntryLayout {
        self.fw
            .init
            .as_ref()
            .map_or(crate::icm::EntryLayout::LEGACY, |p| p.eqe_layout())
    }

    /// Post an asynchronous event to the EQ MAP_EQ routed its type to. Returns false when no
    /// EQ is mapped for that type.
    pub(crate) fn post_async_event(&mut self, ev: Event) -> bool {
        let Some(eqn) = self
            .event_map
            .get(usize::from(ev.event_type()))
            .copied()
            .flatten()
        else {
            return false;
        };
        self.post_eqe(eqn, ev);
        true
    }

    /// Write one EQE to EQ `eqn` and raise its interrupt if it is armed (§4.1, §8).
    pub(crate) fn post_eqe(&mut self, eqn: u32, ev: Event) {
        let event_type = ev.event_type();
        let Some(eq) = self.eqs.get(&eqn) else {
            self.violation("§4.1", format!("event {event_type:#x} for EQ {eqn}, which is not in hardware ownership; dropped"));
            return;
        };
        if eq.overflowed || eq.write_failed {
            return;
        }
        let nent = eq.nent();
        let used = eq.producer.wrapping_sub(eq.consumer) & 0xff_ffff;
        if used >= nent {
            // §4.1 (inferred): the device compares its producer with the last consumer index
            // written; a full EQ overflows.
            if let Some(eq) = self.eqs.get_mut(&eqn) {
                eq.overflowed = true;
            }
            self.violation(
                "§4.1",
                format!("EQ {eqn} overflow: {used} unconsumed EQEs in a {nent}-entry EQ (consumer index doorbell not written often enough); event {event_type:#x} lost"),
            );
            if self.event_map[usize::from(event::EQ_OVERFLOW)].is_some_and(|e| e != eqn) {
                self.post_async_event(Event::EqOverflow { eqn });
            }
            return;
        }
        let (index, owner, mtt, shift, intr, state) = (
            eq.producer & (nent - 1),
            eq.producer & nent != 0,
            eq.mtt_index,
            eq.page_shift,
            eq.intr,
            eq.state,
        );
        let eqe = ev.emit(owner);
        let what = format!("EQE {index} of EQ {eqn}");
        let at = self.eqe_layout();
        if self
            .mtt_write(
                mtt,
                shift,
                u64::from(index) * at.stride + at.offset,
                &eqe,
                &what,
            )
            .is_err()
        {
            if let Some(eq) = self.eqs.get_mut(&eqn) {
                eq.write_failed = true;
            }
            self.violation(
                "§4.1",
                format!("EQ {eqn}: EQE write failed; EQ moved to write-failure status"),
            );
            return;
        }
        let Some(eq) = self.eqs.get_mut(&eqn) else {
            return;
        };
        eq.producer = eq.producer.wrapping_add(1) & 0xff_ffff;
        match state {
            EqState::Armed => {
                eq.state = EqState::Fired;
                self.raise_interrupt(intr);
            }
            EqState::AlwaysArmed => self.raise_interrupt(intr),
            EqState::Fired => {}
        }
    }

    /// EQ doorbell (§4.1): `(ci & 0xFFFFFF) | arm << 31` for EQN `4 * page + k`.
    pub(crate) fn eq_doorbell(&mut self, eqn: u32, value: u32) {
        let Some(eq) = self.eqs.get_mut(&eqn) else {
            self.violation(
                "§4.1",
                format!(
                    "EQ doorbell {value:#010x} for EQ {eqn}, which is not in hardware ownership"
                ),
            );
            return;
        };
        let v = value.to_be_bytes();
        let ci = db::EQ_CI.get_u32(&v);
        let arm = db::EQ_ARM.get_bool(&v);
        let nent = eq.nent();
        let new_used = eq.producer.wrapping_sub(ci) & 0xff_ffff;
        let old_used = eq.producer.wrapping_sub(eq.consumer) & 0xff_ffff;
        if new_used > old_used || new_used > nent {
            let (p, c) = (eq.producer, eq.consumer);
            self.violation(
                "§4.1",
                format!("EQ {eqn} doorbell consumer index {ci:#x} is beyond the producer {p:#x} (previous consumer {c:#x}); ignored"),
            );
            return;
        }
        eq.consumer = ci;
        if arm {
            if eq.state == EqState::Fired {
                eq.state = EqState::Armed;
            }
            // Decision (docs/model.md): arming an EQ that already holds unconsumed EQEs fires
            // at once, so an event written between the last poll and the arm is not lost.
            if eq.state == EqState::Armed && eq.producer != eq.consumer {
                eq.state = EqState::Fired;
                let intr = eq.intr;
                self.raise_interrupt(intr);
            }
        }
    }

    /// Initialise every EQE's owner bit to 1 (hardware ownership) at SW2HW_EQ (§4.1, §10.4).
    pub(crate) fn eq_init_owner(&mut self, eqn: u32) -> Result<(), crate::hcr::Status> {
        let Some(eq) = self.eqs.get(&eqn) else {
            return Ok(());
        };
        let at = self.eqe_layout();
        let total = u64::from(eq.nent()) * at.stride;
        let (mtt, shift) = (eq.mtt_index, eq.page_shift);
        let psz = 1u64 << shift;
        let mut off = 0;
        while off < total {
            let n = psz.min(total - off).min(1 << 20) as usize;
            let mut img = vec![0u8; n];
            // Pieces are whole slots: pages and the 1 MiB step are multiples of the stride.
            for slot in img.chunks_mut(at.stride as usize) {
                if let Some(e) = slot.get_mut(at.offset as usize..) {
                    eqe::OWNER.set_bool(e, true);
                }
            }
            self.mtt_write(mtt, shift, off, &img, &format!("EQ {eqn} buffer"))?;
            off += n as u64;
        }
        Ok(())
    }

    /// The EQC image with the current state, indices and status (QUERY_EQ / HW2SW_EQ).
    pub(crate) fn eq_context_now(&self, eqn: u32) -> Vec<u8> {
        let Some(eq) = self.eqs.get(&eqn) else {
            return vec![0; 64];
        };
        let mut c = eq.ctx.clone();
        c.resize(64, 0);
        let status: u32 = if eq.write_failed { 0xa } else { 0 };
        eqc::STATUS.set(&mut c, status.into());
        eqc::STATE.set(&mut c, eq.state as u64);
        eqc::CONSUMER_INDEX.set(&mut c, eq.consumer.into());
        eqc::PRODUCER_INDEX.set(&mut c, eq.producer.into());
        c
    }
}
