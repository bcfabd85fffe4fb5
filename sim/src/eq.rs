//! Event queues (§4.1): context, EQE producer with the owner-bit convention, arming and
//! interrupt delivery, overflow detection, and MAP_EQ's event-type routing.

use crate::be::BeWrite;
use crate::hca::Hca;

/// EQE size (32-byte EQEs; 64-byte EQEs are never enabled, §10.9).
pub const EQE_SIZE: u64 = 32;

/// EQ context fields (§4.1): the model's own definitions, written from docs/hardware.md
/// independently of the driver's (`drivers/mlx4/tests/layouts.rs` compares them). SW2HW_EQ,
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
    /// Post an asynchronous event of `event_type` to the EQ MAP_EQ routed it to. Returns false
    /// when no EQ is mapped for that type.
    pub(crate) fn post_async_event(&mut self, event_type: u8, subtype: u8, data: [u8; 24]) -> bool {
        let Some(eqn) = self
            .event_map
            .get(usize::from(event_type))
            .copied()
            .flatten()
        else {
            return false;
        };
        self.post_eqe(eqn, event_type, subtype, data);
        true
    }

    /// Write one EQE to EQ `eqn` and raise its interrupt if it is armed (§4.1, §8).
    pub(crate) fn post_eqe(&mut self, eqn: u32, event_type: u8, subtype: u8, data: [u8; 24]) {
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
            let mut d = [0u8; 24];
            d[0..4].copy_from_slice(&eqn.to_be_bytes());
            if self.event_map[usize::from(event::EQ_OVERFLOW)].is_some_and(|e| e != eqn) {
                self.post_async_event(event::EQ_OVERFLOW, 0, d);
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
        let mut eqe = [0u8; EQE_SIZE as usize];
        eqe.put8(0x01, event_type);
        eqe.put8(0x03, subtype);
        eqe.put_bytes(0x04, &data);
        eqe.put8(0x1f, if owner { 0x80 } else { 0 });
        let what = format!("EQE {index} of EQ {eqn}");
        if self
            .mtt_write(mtt, shift, u64::from(index) * EQE_SIZE, &eqe, &what)
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
        let ci = value & 0xff_ffff;
        let arm = value & (1 << 31) != 0;
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
        let total = u64::from(eq.nent()) * EQE_SIZE;
        let (mtt, shift) = (eq.mtt_index, eq.page_shift);
        let psz = 1u64 << shift;
        let mut off = 0;
        while off < total {
            let n = psz.min(total - off).min(1 << 20) as usize;
            let mut img = vec![0u8; n];
            for e in img.chunks_mut(EQE_SIZE as usize) {
                e.put8(0x1f, 0x80);
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
