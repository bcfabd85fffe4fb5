//! Event queues: creation (SW2HW_EQ, MAP_EQ), the doorbell, draining by owner bit, event
//! dispatch, MSI-X/INTx and the NOP interrupt test (docs/hardware.md §4.1, §8, §1.7).
//!
//! As Linux's `mlx4_init_eq_table`, there are two kinds of EQ: the async EQ (asynchronous and
//! command events, `MAP_EQ` with the async event mask) of 256 + 128 entries, and a completion
//! EQ, the `comp_eqn` of every CQ, sized for every CQ the ICM table holds plus Linux's 128
//! spare entries. EQEs are 32 bytes, or 64 when INIT_HCA enabled 64-byte EQEs; then the
//! 32 bytes Linux reads are the upper half of each entry.

use alloc::vec::Vec;

use crate::cmd::{EventCompletion, Out};
use crate::error::Error;
use crate::fw::{flag, flag2};
use crate::hca::IrqMode;
use crate::hw::{EqContext, Eqe, EQE_OWNER, EQ_STATE_ARMED};
use crate::icm::Table;
use crate::platform::{Bar, DmaRegion, IrqLine, Platform};
use crate::regs::{uar, EventType, Opcode, ASYNC_EVENT_MASK};
use crate::Hca;
use core::mem::{offset_of, size_of};
use zerocopy::IntoBytes;

/// Size of the event data every EQE carries (the whole entry without 64-byte EQEs).
pub const EQE_SIZE: usize = size_of::<Eqe>();

/// Linux's `MLX4_NUM_SPARE_EQE`: entries every EQ has beyond what it is sized for, and the
/// most EQEs consumed before the consumer index is told to the device.
pub const SPARE_EQES: u32 = 128;

/// Linux's `MLX4_NUM_ASYNC_EQE`: the async EQ's entries before the spares.
pub const ASYNC_EQES: u32 = 256;

/// The event types MAP_EQ routes to the async EQ (Linux eq.c `get_async_ev_mask`): the fixed
/// mask, plus PORT_MNG_CHG (0x1D) with flag bit 59 and RECOVERABLE_ERROR (0x3E) with the
/// recoverable-error capability.
pub fn async_event_mask(flags: u64, flags2: u64) -> u64 {
    let mut mask = ASYNC_EVENT_MASK;
    if flags & flag::PORT_MNG_CHG_EV != 0 {
        mask |= 1 << EventType::PortMngChg.raw();
    }
    if flags2 & flag2::RECOVERABLE_ERROR_EVENT != 0 {
        mask |= 1 << EventType::RecoverableError.raw();
    }
    mask
}

/// Which EQ of [`Hca::eqs`]: the async EQ, then the completion EQ.
pub(crate) const ASYNC_EQ: usize = 0;
pub(crate) const COMP_EQ: usize = 1;
/// The EQs the driver creates.
pub const NUM_EQS: u32 = 2;

pub(crate) struct Eq {
    pub eqn: u32,
    pub log_nent: u32,
    pub buf: DmaRegion,
    pub mtt: u32,
    pub ci: u32,
    /// BAR2 offset of this EQ's doorbell.
    pub db: usize,
    /// log2 of the entry size: 5 (32 bytes) or 6 (64 bytes).
    pub entry_shift: u32,
    pub hw_owned: bool,
}

impl Eq {
    /// Byte offset of the 32 bytes of entry `i` Linux reads (`get_eqe`: the upper half of a
    /// 64-byte EQE).
    fn event_offset(&self, i: u32) -> usize {
        let entry = 1usize << self.entry_shift;
        (((i & ((1 << self.log_nent) - 1)) as usize) << self.entry_shift) + entry - EQE_SIZE
    }
}

/// BAR2 offset of the doorbell of EQ `eqn` (§4.1: UAR page eqn/4, 0x800 + 8 * (eqn % 4)).
pub fn eq_doorbell_offset(eqn: u32) -> usize {
    (eqn as usize / 4) * uar::PAGE + uar::EQ_DB + 8 * (eqn as usize % 4)
}

/// Whether entry `ci` with owner byte `owner` belongs to software (§4.1 ownership rule).
#[inline(always)]
pub fn sw_owns(owner: u8, ci: u32, log_nent: u32) -> bool {
    u32::from(owner & EQE_OWNER != 0) == (ci >> log_nent) & 1
}

/// An EQE's event as the driver acts on it, read through the typed entry ([`Eqe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EqEvent {
    Cmd(EventCompletion),
    Comp { cqn: u32 },
    CqError { cqn: u32 },
    PortChange { port: u8 },
    SrqLimit { srqn: u32 },
    SrqCatasError { srqn: u32 },
    LocalCatasError,
    PortMngChg { port: u8 },
    RecoverableError { port: u8, subtype: u8 },
    Other { ty: EventType, subtype: u8 },
}

impl EqEvent {
    pub(crate) fn parse(e: &Eqe) -> EqEvent {
        match EventType::from_raw(e.event_type) {
            EventType::Cmd => {
                let c = e.cmd();
                EqEvent::Cmd(EventCompletion {
                    token: c.token.get(),
                    status: c.status,
                    out_param: c.out_param.get(),
                })
            }
            EventType::Comp => EqEvent::Comp {
                cqn: e.queue().num(),
            },
            EventType::CqError => EqEvent::CqError {
                cqn: e.queue().num(),
            },
            EventType::PortChange => EqEvent::PortChange {
                port: e.port_change().port(),
            },
            EventType::SrqLimit => EqEvent::SrqLimit {
                srqn: e.queue().num(),
            },
            EventType::SrqCatasError => EqEvent::SrqCatasError {
                srqn: e.queue().num(),
            },
            EventType::LocalCatasError => EqEvent::LocalCatasError,
            EventType::PortMngChg => EqEvent::PortMngChg {
                port: e.port().port,
            },
            EventType::RecoverableError => EqEvent::RecoverableError {
                port: e.port().port,
                subtype: e.subtype,
            },
            ty => EqEvent::Other {
                ty,
                subtype: e.subtype,
            },
        }
    }
}

/// How long the NOP test waits for its interrupt after the completion event (1 s; an
/// interrupt on hardware follows in microseconds).
const NOP_IRQ_WAIT_NS: u64 = 1_000_000_000;

impl<P: Platform> Hca<P> {
    /// The EQs, the interrupt line and the event routing, as Linux's `mlx4_init_eq_table`:
    /// MSI-X vector 0 if the platform delivers it and `msix` allows it, else INTx; the async
    /// EQ (SW2HW_EQ), the completion EQ (SW2HW_EQ), MAP_EQ of the async event mask to the
    /// async EQ, and its doorbell armed. On failure the caller's teardown undoes what exists.
    pub(crate) fn create_eqs(&mut self, msix: bool) -> Result<(), Error> {
        if msix && self.enable_msix() {
            self.irq = IrqMode::Msix;
        }
        let first = self.choices.reserved_eqs;
        let async_nent = self.cfg.eq_entries.max(64);
        // Linux sizes each completion EQ for every CQ of the table beyond the reserved ones,
        // plus the spares.
        let cqs = self
            .profile
            .as_ref()
            .map_or(0, |p| p.get(Table::Cqc).num as u32)
            .saturating_sub(self.caps.reserved_cqs);
        let comp_nent = cqs + SPARE_EQES;
        self.create_eq(first, async_nent)?;
        self.create_eq(first + 1, comp_nent)?;
        let mask = self.choices.async_event_mask;
        self.cmd(Opcode::MAP_EQ, mask, first, 0, Out::None)?;
        self.eq_mapped = true;
        self.eq_doorbell(ASYNC_EQ, true);
        Ok(())
    }

    /// One EQ of at least `entries` entries (rounded up to a power of two) as EQN `eqn`,
    /// appended to [`Hca::eqs`].
    fn create_eq(&mut self, eqn: u32, entries: u32) -> Result<(), Error> {
        const PAGE: usize = 4096;
        let nent = entries.max(2).next_power_of_two();
        let entry_shift = self.choices.eqe_size.trailing_zeros();
        let size = (nent as usize) << entry_shift;
        // Laid out as Linux's `mlx4_create_eq`: 4 KiB pages, one MTT entry each, EQC
        // log_page_size 0. (Linux allocates each page on its own; one contiguous region cut
        // into pages gives the device the same view.)
        let npages = size.div_ceil(PAGE);
        let mut buf = self
            .p
            .dma_alloc(npages * PAGE, PAGE)
            .ok_or(Error::NoMemory("EQ"))?;
        // Owner bit 1 = hardware owned in pass 0 (§4.1; firmware also does this at SW2HW_EQ):
        // the last byte of every entry, which is the owner byte of the 32 bytes Linux reads.
        for e in buf.bytes_mut().chunks_mut(1 << entry_shift) {
            if let Some(owner) = e.last_mut() {
                *owner = EQE_OWNER;
            }
        }
        // On failure `buf` is dropped, which frees it.
        let mtt = self
            .mtts
            .alloc(npages as u32)
            .ok_or(Error::NoResources("MTT entries"))?;
        let pages: Vec<u64> = (0..npages).map(|k| buf.bus() + (k * PAGE) as u64).collect();
        self.eqs.push(Eq {
            eqn,
            log_nent: nent.trailing_zeros(),
            buf,
            mtt,
            ci: 0,
            db: eq_doorbell_offset(eqn),
            entry_shift,
            hw_owned: false,
        });
        let at = self.eqs.len() - 1;
        self.write_mtt(mtt, &pages)?;
        let mut ctx = EqContext::default();
        ctx.flags.set(EQ_STATE_ARMED);
        ctx.log_eq_size = nent.trailing_zeros() as u8;
        // One interrupt vector serves every EQ (MSI-X entry 0, or INTx).
        ctx.intr = 0;
        ctx.log_page_size = 0; // 4 KiB pages
        let mtt_addr = mtt as u64 * 8;
        ctx.mtt_base_addr_h = (mtt_addr >> 32) as u8;
        ctx.mtt_base_addr_l.set(mtt_addr as u32);
        ctx.page_offset.set(0);
        let b = self.cmd.inbox_clear();
        if b.len() < 64 {
            return Err(Error::NoMemory("command mailbox"));
        }
        b[..size_of::<EqContext>()].copy_from_slice(ctx.as_bytes());
        self.cmd_in(Opcode::SW2HW_EQ, eqn, 0)?;
        self.eqs[at].hw_owned = true;
        Ok(())
    }

    /// MAP_EQ (unmap), HW2SW_EQ for every EQ, MSI-X off, the buffers freed (Linux's
    /// `mlx4_cleanup_eq_table`). Every step runs; the first error is returned.
    pub(crate) fn destroy_eqs(&mut self) -> Result<(), Error> {
        let mut r = Ok(());
        if self.eq_mapped {
            if let Some(eqn) = self.eqs.first().map(|e| e.eqn) {
                let mask = self.choices.async_event_mask;
                r = self
                    .cmd(Opcode::MAP_EQ, mask, eqn | (1 << 31), 0, Out::None)
                    .map(|_| ());
            }
            self.eq_mapped = false;
        }
        for i in 0..self.eqs.len() {
            if self.eqs[i].hw_owned {
                let eqn = self.eqs[i].eqn;
                let r2 = self.cmd(Opcode::HW2SW_EQ, 0, eqn, 1, Out::None).map(|_| ());
                r = r.and(r2);
                self.eqs[i].hw_owned = false;
            }
        }
        self.disable_msix();
        for eq in core::mem::take(&mut self.eqs) {
            self.mtts.free(eq.mtt);
            self.release_queue_buf(eq.buf);
        }
        r
    }

    /// The EQN a new CQ's completion events go to.
    pub(crate) fn comp_eqn(&self) -> Option<u32> {
        self.eqs.get(COMP_EQ).map(|e| e.eqn)
    }

    /// Write EQ `i`'s consumer index, optionally re-arming (§4.1).
    fn eq_doorbell(&self, i: usize, arm: bool) {
        if let Some(eq) = self.eqs.get(i) {
            let v = (eq.ci & 0xFF_FFFF) | if arm { 1 << 31 } else { 0 };
            self.p.mmio_write32(Bar::Uar, eq.db, v.to_be());
        }
    }

    /// Drain every EQ (the async one first): dispatch every software-owned EQE, update the
    /// consumer index (at least every [`SPARE_EQES`] entries) and re-arm. Returns the number
    /// of EQEs handled.
    pub fn process_events(&mut self) -> usize {
        let mut all = 0;
        for i in 0..self.eqs.len() {
            all += self.drain_eq(i);
        }
        all
    }

    fn drain_eq(&mut self, i: usize) -> usize {
        let mut n = 0usize;
        loop {
            let Some(eq) = self.eqs.get(i) else { return n };
            let off = eq.event_offset(eq.ci);
            // The device writes the EQ: owner byte first, then (after the barrier) the entry,
            // both through volatile reads.
            let Some([owner]) = eq.buf.read::<1>(off + offset_of!(Eqe, owner)) else {
                break;
            };
            if !sw_owns(owner, eq.ci, eq.log_nent) {
                break;
            }
            self.p.rmb();
            let Some(bytes) = eq.buf.read::<EQE_SIZE>(off) else {
                break;
            };
            let eqe: Eqe = zerocopy::transmute!(bytes);
            if let Some(eq) = self.eqs.get_mut(i) {
                eq.ci = eq.ci.wrapping_add(1);
            }
            self.dispatch(EqEvent::parse(&eqe));
            n += 1;
            if n.is_multiple_of(SPARE_EQES as usize) {
                self.eq_doorbell(i, false);
            }
        }
        // Re-arm only after consuming entries: an armed EQ with nothing consumed is still
        // armed, and polling loops should not write the doorbell on every pass.
        if n > 0 {
            self.eq_doorbell(i, true);
        }
        n
    }

    fn dispatch(&mut self, ev: EqEvent) {
        match ev {
            EqEvent::Cmd(c) => {
                self.cmd.event_done = Some(c);
            }
            EqEvent::Comp { cqn } => self.cq_event(cqn),
            EqEvent::CqError { cqn } => self.cq_error(cqn),
            // A PortInfo (or GUID/P_Key table) change the firmware's SMA reports itself
            // (flag 59) is a port event of its port, as Linux's mlx4_ib takes it.
            EqEvent::PortChange { port } | EqEvent::PortMngChg { port } => {
                if (1..=2).contains(&port) {
                    self.port_events[usize::from(port) - 1] += 1;
                }
                self.async_events += 1;
            }
            EqEvent::SrqLimit { srqn } => {
                self.srq_limit_event(srqn);
                self.async_events += 1;
            }
            EqEvent::SrqCatasError { srqn } => {
                self.queue_async_event(verbs::AsyncEvent::SrqErr { srq_num: srqn });
                self.async_events += 1;
            }
            EqEvent::LocalCatasError => {
                self.catas = true;
                self.async_events += 1;
            }
            // Linux's `mlx4_eq_int` warns of a bad (subtype 1) or unsupported (2) cable.
            EqEvent::RecoverableError { port, subtype } => {
                let what = match subtype {
                    1 => "bad cable",
                    2 => "unsupported cable",
                    _ => "recoverable error",
                };
                log::warn!("mlx4: port {port}: {what} (subtype {subtype})");
                self.async_events += 1;
            }
            EqEvent::Other { ty, subtype } => {
                log::debug!("mlx4: event {ty:?} subtype {subtype}");
                self.async_events += 1;
            }
        }
    }

    /// Find the MSI-X capability, program entry 0 and enable MSI-X. Returns false (and leaves
    /// MSI-X off) if the platform cannot deliver vector 0 or the table is not in BAR0.
    fn enable_msix(&mut self) -> bool {
        let Some(msg) = self.p.msix_message(0) else {
            return false;
        };
        let Some(cap) = self.find_cap(0x11) else {
            return false;
        };
        let table = self.p.config_read32(cap + 4);
        if table & 7 != 0 {
            return false; // table not in BAR0
        }
        let off = (table & !7) as usize;
        // MSI-X table entries are little-endian PCI structures.
        self.p
            .mmio_write32(Bar::Dcs, off, (msg.address as u32).to_le());
        self.p
            .mmio_write32(Bar::Dcs, off + 4, ((msg.address >> 32) as u32).to_le());
        self.p.mmio_write32(Bar::Dcs, off + 8, msg.data.to_le());
        self.p.mmio_write32(Bar::Dcs, off + 12, 0u32.to_le());
        let ctl = self.p.config_read32(cap);
        self.p.config_write32(cap, (ctl | (1 << 31)) & !(1 << 30));
        self.msix_cap = Some(cap);
        true
    }

    fn disable_msix(&mut self) {
        if let Some(cap) = self.msix_cap.take() {
            let ctl = self.p.config_read32(cap);
            self.p.config_write32(cap, ctl & !(1 << 31));
        }
        if self.irq == IrqMode::Msix {
            self.irq = IrqMode::Polling;
        }
    }

    /// Walk the PCI capability list for `id` (bounded to 48 entries).
    pub(crate) fn find_cap(&self, id: u8) -> Option<u16> {
        let mut ptr = (self.p.config_read32(0x34) & 0xFC) as u16;
        for _ in 0..48 {
            if ptr < 0x40 {
                return None;
            }
            let d = self.p.config_read32(ptr);
            if d as u8 == id {
                return Some(ptr);
            }
            ptr = ((d >> 8) & 0xFC) as u16;
        }
        None
    }

    /// INTx: write the clear-interrupt register for our pin (§1.7).
    pub(crate) fn clear_intx(&self) {
        let pin = self.adapter.inta_pin as u32;
        let bar = if self.fw.clr_int_bar == 0 {
            Bar::Dcs
        } else {
            Bar::Uar
        };
        let off = self.fw.clr_int_base as usize + if pin < 32 { 4 } else { 0 };
        self.p.mmio_write32(bar, off, (1u32 << (pin & 31)).to_be());
    }

    /// Switch commands to events and prove that an interrupt arrives (§8 NOP test). When the
    /// MSI-X interrupt does not come, Linux's `mlx4_load_one` runs its EQ setup again without
    /// MSI-X: back to polled commands, the EQs torn down (MAP_EQ unmap, HW2SW_EQ) and created
    /// anew for INTx, then the NOP test again. So does this.
    pub(crate) fn enable_events_and_test_interrupts(&mut self) -> Result<(), Error> {
        loop {
            let mode = self.irq;
            let line = match mode {
                IrqMode::Msix => IrqLine::Msix(0),
                _ => IrqLine::Intx,
            };
            self.irq = if mode == IrqMode::Msix {
                IrqMode::Msix
            } else {
                IrqMode::Intx
            };
            self.cmd.use_events = true;
            let _ = self.p.take_interrupt(line);
            self.nop()?;
            // The completion event can be in the EQ before the interrupt message is
            // delivered (under emulation the two travel separately); Linux's NOP test
            // likewise waits for its interrupt handler (`mlx4_test_interrupt`).
            if self.wait_until_for(NOP_IRQ_WAIT_NS, |h| h.p.take_interrupt(line)) {
                if line == IrqLine::Intx {
                    self.clear_intx();
                }
                return Ok(());
            }
            log::warn!("mlx4: NOP completed by event but no {:?} interrupt", mode);
            self.cmd.use_events = false;
            if mode != IrqMode::Msix {
                self.irq = IrqMode::Polling;
                return Err(Error::NoInterrupt);
            }
            self.destroy_eqs()?;
            self.irq = IrqMode::Polling;
            self.create_eqs(false)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eq_doorbells_follow_uar_pages() {
        assert_eq!(eq_doorbell_offset(0), 0x800);
        assert_eq!(eq_doorbell_offset(3), 0x818);
        assert_eq!(eq_doorbell_offset(4), 0x1800);
        assert_eq!(eq_doorbell_offset(33), 8 * 4096 + 0x808);
    }

    #[test]
    fn ownership_alternates_per_pass() {
        // nent = 8: pass 0 (ci 0..7) valid with owner 0, pass 1 (8..15) with owner 1.
        assert!(sw_owns(0x00, 0, 3));
        assert!(!sw_owns(0x80, 0, 3));
        assert!(sw_owns(0x80, 8, 3));
        assert!(!sw_owns(0x00, 15, 3));
        assert!(sw_owns(0x00, 16, 3));
        assert!(sw_owns(0x7F, 1, 3), "only bit 7 counts");
    }

    #[test]
    fn async_mask_adds_port_management_and_recoverable_error_events_when_offered() {
        assert_eq!(async_event_mask(0, 0), ASYNC_EVENT_MASK);
        assert_eq!(
            async_event_mask(flag::PORT_MNG_CHG_EV, 0),
            ASYNC_EVENT_MASK | 1 << 0x1D
        );
        assert_eq!(
            async_event_mask(0, flag2::RECOVERABLE_ERROR_EVENT),
            ASYNC_EVENT_MASK | 1 << 0x3E
        );
        // Linux's mask with neither, as its trace on the model shows it.
        assert_eq!(ASYNC_EVENT_MASK, 0x1d1f_46fe);
    }
}
