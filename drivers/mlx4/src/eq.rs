//! Event queue: creation (SW2HW_EQ, MAP_EQ), the doorbell, draining by owner bit, event
//! dispatch, MSI-X/INTx and the NOP interrupt test (docs/hardware.md §4.1, §8, §1.7).

use crate::be::BeBytes;
use crate::cmd::{EventCompletion, Out};
use crate::error::Error;
use crate::hca::IrqMode;
use crate::hw::{EqContext, EQ_STATE_ARMED};
use crate::platform::{Bar, DmaRegion, IrqLine, Platform};
use crate::regs::{uar, EventType, Opcode, ASYNC_EVENT_MASK};
use crate::Hca;
use zerocopy::IntoBytes;

/// EQE size in bytes (no 64-byte EQEs are enabled in INIT_HCA).
pub const EQE_SIZE: usize = 32;

pub(crate) struct Eq {
    pub eqn: u32,
    pub log_nent: u32,
    pub buf: DmaRegion,
    pub mtt: u32,
    pub ci: u32,
    /// BAR2 offset of this EQ's doorbell.
    pub db: usize,
    pub hw_owned: bool,
}

/// BAR2 offset of the doorbell of EQ `eqn` (§4.1: UAR page eqn/4, 0x800 + 8 * (eqn % 4)).
pub fn eq_doorbell_offset(eqn: u32) -> usize {
    (eqn as usize / 4) * uar::PAGE + uar::EQ_DB + 8 * (eqn as usize % 4)
}

/// Whether entry `ci` with owner byte `owner` belongs to software (§4.1 ownership rule).
#[inline(always)]
pub fn sw_owns(owner: u8, ci: u32, log_nent: u32) -> bool {
    ((owner >> 7) as u32) == ((ci >> log_nent) & 1)
}

/// How long the NOP test waits for its interrupt after the completion event (1 s; an
/// interrupt on hardware follows in microseconds).
const NOP_IRQ_WAIT_NS: u64 = 1_000_000_000;

impl<P: Platform> Hca<P> {
    /// Create the EQ that receives async, command and completion events (vector 0).
    pub(crate) fn create_async_eq(&mut self) -> Result<(), Error> {
        const PAGE: usize = 4096;
        let eqn = self.caps.reserved_eqs;
        let nent = self.cfg.eq_entries.max(64).next_power_of_two();
        let size = nent as usize * EQE_SIZE;
        // Laid out as Linux's `mlx4_create_eq`: 4 KiB pages, one MTT entry each, EQC
        // log_page_size 0. (Linux allocates each page on its own; one contiguous region cut
        // into pages gives the device the same view.)
        let npages = size.div_ceil(PAGE);
        let size_alloc = npages * PAGE;
        let mut buf = self
            .p
            .dma_alloc(size_alloc, PAGE)
            .ok_or(Error::NoMemory("EQ"))?;
        // Owner bit 1 = hardware owned in pass 0 (§4.1; firmware also does this at SW2HW_EQ).
        for e in buf.bytes_mut().as_chunks_mut::<EQE_SIZE>().0 {
            e[EQE_SIZE - 1] = 0x80;
        }
        // On failure `buf` is dropped, which frees it.
        let mtt = self
            .mtts
            .alloc(npages as u32)
            .ok_or(Error::NoResources("MTT entries"))?;
        let pages: alloc::vec::Vec<u64> =
            (0..npages).map(|k| buf.bus() + (k * PAGE) as u64).collect();
        let eq = Eq {
            eqn,
            log_nent: nent.trailing_zeros(),
            buf,
            mtt,
            ci: 0,
            db: eq_doorbell_offset(eqn),
            hw_owned: false,
        };
        self.eq = Some(eq);
        self.write_mtt(mtt, &pages)?;

        // MSI-X vector 0 if the platform delivers it; the EQ's intr field is 0 either way.
        if self.cfg.use_msix && self.enable_msix() {
            self.irq = IrqMode::Msix;
        }
        let mut ctx = EqContext::default();
        ctx.flags.set(EQ_STATE_ARMED);
        ctx.log_eq_size = nent.trailing_zeros() as u8;
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
        if let Some(eq) = &mut self.eq {
            eq.hw_owned = true;
        }
        self.cmd(Opcode::MAP_EQ, ASYNC_EVENT_MASK, eqn, 0, Out::None)?;
        self.eq_mapped = true;
        self.eq_doorbell(true);
        Ok(())
    }

    /// MAP_EQ (unmap), HW2SW_EQ, MSI-X off, free the buffer.
    pub(crate) fn destroy_async_eq(&mut self) -> Result<(), Error> {
        let Some(eqn) = self.eq.as_ref().map(|e| e.eqn) else {
            return Ok(());
        };
        let mut r = Ok(());
        if self.eq_mapped {
            r = self
                .cmd(
                    Opcode::MAP_EQ,
                    ASYNC_EVENT_MASK,
                    eqn | (1 << 31),
                    0,
                    Out::None,
                )
                .map(|_| ());
            self.eq_mapped = false;
        }
        if self.eq.as_ref().is_some_and(|e| e.hw_owned) {
            let r2 = self.cmd(Opcode::HW2SW_EQ, 0, eqn, 1, Out::None).map(|_| ());
            r = r.and(r2);
        }
        self.disable_msix();
        if let Some(eq) = self.eq.take() {
            self.mtts.free(eq.mtt);
            drop(eq.buf);
        }
        r
    }

    /// Write the EQ consumer index, optionally re-arming (§4.1).
    fn eq_doorbell(&self, arm: bool) {
        if let Some(eq) = &self.eq {
            let v = (eq.ci & 0xFF_FFFF) | if arm { 1 << 31 } else { 0 };
            self.p.mmio_write32(Bar::Uar, eq.db, v.to_be());
        }
    }

    /// Drain the EQ: dispatch every software-owned EQE, update the consumer index (at least
    /// every 128 entries) and re-arm. Returns the number of EQEs handled.
    pub fn process_events(&mut self) -> usize {
        let mut n = 0usize;
        loop {
            let Some(eq) = &self.eq else { return 0 };
            let nent = 1u32 << eq.log_nent;
            let off = ((eq.ci & (nent - 1)) as usize) * EQE_SIZE;
            // The device writes the EQ: owner byte first, then (after the barrier) the entry,
            // both through volatile reads.
            let Some([owner]) = eq.buf.read::<1>(off + EQE_SIZE - 1) else {
                break;
            };
            if !sw_owns(owner, eq.ci, eq.log_nent) {
                break;
            }
            self.p.rmb();
            let Some(eqe) = eq.buf.read::<EQE_SIZE>(off) else {
                break;
            };
            if let Some(eq) = &mut self.eq {
                eq.ci = eq.ci.wrapping_add(1);
            }
            self.dispatch_eqe(&eqe);
            n += 1;
            if n.is_multiple_of(128) {
                self.eq_doorbell(false);
            }
        }
        // Re-arm only after consuming entries: an armed EQ with nothing consumed is still
        // armed, and polling loops should not write the doorbell on every pass.
        if n > 0 {
            self.eq_doorbell(true);
        }
        n
    }

    fn dispatch_eqe(&mut self, e: &[u8; EQE_SIZE]) {
        let ty = EventType::from_raw(e[1]);
        match ty {
            EventType::Cmd => {
                self.cmd.event_done = Some(EventCompletion {
                    token: e.be16::<0x06>(),
                    status: e[0x0F],
                    out_param: e.be64::<0x10>(),
                });
            }
            EventType::Comp => self.cq_event(e.be32::<0x04>() & 0xFF_FFFF),
            EventType::CqError => self.cq_error(e.be32::<0x04>() & 0xFF_FFFF),
            EventType::PortChange => {
                let port = (e.be32::<0x0C>() >> 28) as usize;
                if (1..=2).contains(&port) {
                    self.port_events[port - 1] += 1;
                }
                self.async_events += 1;
            }
            EventType::SrqLimit => {
                self.srq_limit_event(e.be32::<0x04>() & 0xFF_FFFF);
                self.async_events += 1;
            }
            EventType::SrqCatasError => {
                let srq_num = e.be32::<0x04>() & 0xFF_FFFF;
                self.queue_async_event(verbs::AsyncEvent::SrqErr { srq_num });
                self.async_events += 1;
            }
            EventType::LocalCatasError => {
                self.catas = true;
                self.async_events += 1;
            }
            _ => {
                log::debug!("mlx4: event {:?} subtype {}", ty, e[3]);
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
    fn find_cap(&self, id: u8) -> Option<u16> {
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

    /// Switch commands to events and prove that an interrupt arrives (§8 NOP test), falling
    /// back from MSI-X to INTx like Linux.
    pub(crate) fn enable_events_and_test_interrupts(&mut self) -> Result<(), Error> {
        self.cmd.use_events = true;
        let lines: &[IrqMode] = if self.irq == IrqMode::Msix {
            &[IrqMode::Msix, IrqMode::Intx]
        } else {
            &[IrqMode::Intx]
        };
        for &mode in lines {
            if mode == IrqMode::Intx && self.irq == IrqMode::Msix {
                self.disable_msix();
            }
            self.irq = mode;
            let line = if mode == IrqMode::Msix {
                IrqLine::Msix(0)
            } else {
                IrqLine::Intx
            };
            let _ = self.p.take_interrupt(line);
            self.nop()?;
            // The completion event can be in the EQ before the interrupt message is
            // delivered (under emulation the two travel separately); Linux's NOP test
            // likewise waits for its interrupt handler (`mlx4_test_interrupt`).
            if self.wait_until_for(NOP_IRQ_WAIT_NS, |h| h.p.take_interrupt(line)) {
                if mode == IrqMode::Intx {
                    self.clear_intx();
                }
                return Ok(());
            }
            log::warn!("mlx4: NOP completed by event but no {:?} interrupt", mode);
        }
        self.irq = IrqMode::Polling;
        self.cmd.use_events = false;
        Err(Error::NoInterrupt)
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
}
