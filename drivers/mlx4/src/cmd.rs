//! Command interface: the HCR, mailboxes, polling and event mode (docs/hardware.md §1.2, §1.3).
//!
//! One command is outstanding at a time (the driver is single-threaded per HCA), so event mode
//! uses one token at a time, advancing it per command so a stale completion is recognised.

use crate::error::{CmdError, Error};
use crate::hw::{hcr, Hcr, HcrCommand, HCR_STATUS_DWORD};
use crate::platform::{Bar, DmaRegion, Platform};
use crate::regs::{dcs, FwStatus, Opcode};
use crate::Hca;
use core::mem::offset_of;

/// Size and alignment of a command mailbox (§1.3).
pub const MAILBOX_SIZE: usize = 4096;

/// What a command returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Out {
    /// Nothing.
    None,
    /// A 64-bit immediate in out_param.
    Imm,
    /// The output mailbox is filled.
    Mailbox,
}

/// How one firmware command ended, as the driver saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmdOutcome {
    /// Status 0.
    Ok,
    /// A non-zero firmware status (§1.2).
    Status(FwStatus),
    /// No completion within the command timeout.
    Timeout,
    /// The HCR was still busy from an earlier command; this one was never posted.
    HcrBusy,
    /// Event mode: a completion carried a token this command did not have.
    BadToken(u16),
    /// The mailboxes were gone (the HCA was being dropped); nothing was posted.
    NoMailbox,
    /// The device had been declared failed (and reset) by an earlier command; nothing was
    /// posted. Commands that only release device resources report success this way.
    DeviceFailed,
    /// Any other error of the command path (none today; kept so a new one is not misnamed).
    Failed(Error),
}

/// One firmware command as issued: handed to [`Platform::command_done`] when it ends, so a
/// platform can keep a command log (the kernel's `mode=diag` prints it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmdRecord {
    pub op: Opcode,
    pub op_mod: u8,
    pub in_mod: u32,
    /// in_param as written to the HCR (a mailbox bus address or an immediate).
    pub in_param: u64,
    /// Completion by a CMD EQE (true) or by polling the GO bit.
    pub event: bool,
    pub outcome: CmdOutcome,
    /// From posting (or trying to post) to the outcome.
    pub elapsed_ns: u64,
}

/// Command completion reported by a CMD EQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EventCompletion {
    pub token: u16,
    pub status: u8,
    pub out_param: u64,
}

/// State of the command interface.
pub(crate) struct CmdState {
    /// The T bit to post with next.
    toggle: u32,
    pub use_events: bool,
    token: u16,
    pub timeout_ns: u64,
    pub event_done: Option<EventCompletion>,
    /// Input and output mailboxes; `None` only after the HCA is dropped.
    pub boxes: Option<(DmaRegion, DmaRegion)>,
    /// Commands issued (for reports and tests).
    pub issued: u64,
    /// The fatal error that put the device in the failed state, if one did (see
    /// [`Hca::enter_error_state`]).
    pub failed: Option<Error>,
    /// Whether the reset done on entering the failed state brought the device back (if not,
    /// memory the device may still DMA into is never freed).
    pub reset_ok: bool,
}

impl CmdState {
    /// Allocate the two mailboxes. `t_now` is the T bit the HCR reads now: the next command
    /// must carry the other value (§1.2: after reset T reads 0 and Linux posts T = 1 first).
    pub fn new<P: Platform>(p: &P, t_now: u32, timeout_ns: u64) -> Result<Self, Error> {
        let inbox = p
            .dma_alloc(MAILBOX_SIZE, MAILBOX_SIZE)
            .ok_or(Error::NoMemory("command mailbox"))?;
        // On failure `inbox` is dropped, which frees it.
        let outbox = p
            .dma_alloc(MAILBOX_SIZE, MAILBOX_SIZE)
            .ok_or(Error::NoMemory("command mailbox"))?;
        Ok(CmdState {
            toggle: (t_now & 1) ^ 1,
            use_events: false,
            token: 0,
            timeout_ns,
            event_done: None,
            boxes: Some((inbox, outbox)),
            issued: 0,
            failed: None,
            reset_ok: false,
        })
    }

    /// Free the mailboxes.
    pub fn free(&mut self) {
        self.boxes = None;
    }

    /// The input mailbox, zeroed, ready to be filled (an empty slice once freed).
    pub fn inbox_clear(&mut self) -> &mut [u8] {
        match &mut self.boxes {
            Some((i, _)) => {
                let b = i.bytes_mut();
                b.fill(0);
                b
            }
            None => &mut [],
        }
    }

    /// The output mailbox contents.
    pub fn outbox(&self) -> &[u8] {
        match &self.boxes {
            // SAFETY: the device writes the output mailbox only while a command runs; this is
            // read after the caller's command completed, and posting the next one needs
            // `&mut self`, which this borrow rules out for the slice's life.
            Some((_, o)) => unsafe { o.bytes() },
            None => &[],
        }
    }

    /// The output mailbox viewed as a command's output layout (`crate::outbox`); an error,
    /// not zeros, if the mailbox is gone or shorter than the layout.
    pub fn out_view<T>(&self) -> Result<&T, Error>
    where
        T: zerocopy::FromBytes + zerocopy::KnownLayout + zerocopy::Immutable,
    {
        T::ref_from_prefix(self.outbox())
            .map(|(view, _)| view)
            .map_err(|_| Error::NoMemory("command mailbox"))
    }

    fn bus(&self, out: bool) -> u64 {
        match &self.boxes {
            Some((i, o)) => {
                if out {
                    o.bus()
                } else {
                    i.bus()
                }
            }
            None => 0,
        }
    }
}

/// Commands that only release what the device holds (Linux `mlx4_internal_err_ret_value`):
/// once the device has been reset there is nothing left for them to undo, so in the failed
/// state they succeed without being posted. MAP_EQ counts when it unmaps (in_mod bit 31).
fn releases(op: Opcode, in_mod: u32) -> bool {
    matches!(
        op,
        Opcode::UNMAP_ICM
            | Opcode::UNMAP_ICM_AUX
            | Opcode::UNMAP_FA
            | Opcode::ERR2RST_QP
            | Opcode::HW2SW_EQ
            | Opcode::HW2SW_CQ
            | Opcode::HW2SW_SRQ
            | Opcode::HW2SW_MPT
            | Opcode::CLOSE_HCA
            | Opcode::CLOSE_PORT
    ) || (op == Opcode::MAP_EQ && in_mod & (1 << 31) != 0)
}

/// A failed closing command leaves the device holding something the driver is about to free
/// (Linux `mlx4_closing_cmd_fatal_error`), so it is fatal; HW2SW_MPT is not when the region
/// merely has memory windows bound. Unlike Linux, a failed MAP_EQ unmap is fatal too: the
/// EQ cannot be returned to software while events are still mapped to it (§2.2), so the
/// only safe way on is the reset.
fn closing_fatal(op: Opcode, in_mod: u32, status: FwStatus) -> bool {
    match op {
        Opcode::MAP_EQ => in_mod & (1 << 31) != 0,
        Opcode::CLOSE_HCA
        | Opcode::HW2SW_EQ
        | Opcode::HW2SW_CQ
        | Opcode::HW2SW_SRQ
        | Opcode::ERR2RST_QP
        | Opcode::UNMAP_ICM
        | Opcode::UNMAP_ICM_AUX
        | Opcode::UNMAP_FA => true,
        Opcode::HW2SW_MPT => status != FwStatus::RegBound,
        _ => false,
    }
}

/// BAR0 offset of the HCR's status dword (GO, T, status).
const HCR_STATUS: usize = dcs::HCR + offset_of!(Hcr, status);

/// Current T bit of the HCR.
pub(crate) fn hcr_t_bit<P: Platform>(p: &P) -> u32 {
    Hcr::toggle_of(u32::from_be(p.mmio_read32(Bar::Dcs, HCR_STATUS)))
}

impl<P: Platform> Hca<P> {
    fn hcr_status(&self) -> u32 {
        u32::from_be(self.p.mmio_read32(Bar::Dcs, HCR_STATUS))
    }

    /// §1.2: pending while GO is set or T still equals the toggle we will post next.
    fn hcr_pending(&self) -> bool {
        let s = self.hcr_status();
        s & hcr::GO != 0 || Hcr::toggle_of(s) == self.cmd.toggle
    }

    /// Wait, bounded by the command timeout, with growing delays, until `done` is true.
    fn wait_until(&mut self, done: impl FnMut(&mut Self) -> bool) -> bool {
        self.wait_until_for(self.cmd.timeout_ns, done)
    }

    /// Wait at most `bound_ns`, with growing delays (1 µs up to 1 ms), until `done` is true.
    pub(crate) fn wait_until_for(
        &mut self,
        bound_ns: u64,
        mut done: impl FnMut(&mut Self) -> bool,
    ) -> bool {
        let start = self.p.now_ns();
        let mut delay = 1u64;
        loop {
            if done(self) {
                return true;
            }
            if self.p.now_ns().saturating_sub(start) > bound_ns {
                return done(self);
            }
            self.p.delay_us(delay);
            delay = (delay * 2).min(1000);
        }
    }

    /// Execute one firmware command. Input and output mailboxes are `self.cmd.inbox/outbox`;
    /// `in_param` is passed as is (callers pass the inbox bus address when they use it).
    /// Returns the immediate out_param (0 unless `out == Out::Imm`). The platform is told
    /// how the command ended ([`Platform::command_done`]).
    pub(crate) fn cmd(
        &mut self,
        op: Opcode,
        in_param: u64,
        in_mod: u32,
        op_mod: u8,
        out: Out,
    ) -> Result<u64, Error> {
        let start = self.p.now_ns();
        let event = self.cmd.use_events;
        if self.cmd.failed.is_some() {
            // Linux's internal error state: nothing is posted to a device that was reset.
            let result = if releases(op, in_mod) {
                Ok(0)
            } else {
                Err(Error::DeviceFailed { op })
            };
            self.p.command_done(&CmdRecord {
                op,
                op_mod,
                in_mod,
                in_param,
                event,
                outcome: CmdOutcome::DeviceFailed,
                elapsed_ns: 0,
            });
            return result;
        }
        let result = self.cmd_exec(op, in_param, in_mod, op_mod, out);
        // What Linux's mlx4_cmd_poll/mlx4_cmd_wait treat as fatal: no completion in time, an
        // HCR that never became free, or a closing command that failed. The exception is an
        // event-mode NOP whose completion did not come back while the HCR is free again (the
        // interrupt test: the event was lost, the device is fine).
        let fatal = match result {
            Err(Error::CmdTimeout { .. }) | Err(Error::BadToken { .. }) => {
                !(op == Opcode::NOP && event && !self.hcr_pending())
            }
            Err(Error::HcrBusy { .. }) => true,
            Err(Error::Cmd(e)) => closing_fatal(op, in_mod, e.status),
            _ => false,
        };
        let outcome = match result {
            Ok(_) => CmdOutcome::Ok,
            Err(Error::Cmd(e)) => CmdOutcome::Status(e.status),
            Err(Error::CmdTimeout { .. }) => CmdOutcome::Timeout,
            Err(Error::HcrBusy { .. }) => CmdOutcome::HcrBusy,
            Err(Error::BadToken { token, .. }) => CmdOutcome::BadToken(token),
            Err(Error::NoMemory(_)) => CmdOutcome::NoMailbox,
            Err(other) => CmdOutcome::Failed(other),
        };
        self.p.command_done(&CmdRecord {
            op,
            op_mod,
            in_mod,
            in_param,
            event,
            outcome,
            elapsed_ns: self.p.now_ns().saturating_sub(start),
        });
        if fatal {
            if let Err(e) = result {
                self.enter_error_state(e);
            }
        }
        result
    }

    /// Linux `mlx4_enter_error_state` (catas.c): the device is reset at once, so it stops
    /// using any memory it was given, and treated as failed: later commands are not posted
    /// (releasing ones succeed, others fail with [`Error::DeviceFailed`]), so they cannot each
    /// wait out the command timeout on a stuck HCR. Teardown then frees memory only because
    /// the device has been reset; if the reset fails, that memory is never freed.
    pub(crate) fn enter_error_state(&mut self, first: Error) {
        if self.cmd.failed.is_some() {
            return;
        }
        log::error!("mlx4: {first}: resetting the device; it is treated as failed");
        self.cmd.failed = Some(first);
        self.cmd.use_events = false;
        self.cmd.event_done = None;
        self.cmd.reset_ok = crate::hca::reset(&self.p, &self.cfg).is_ok();
        if !self.cmd.reset_ok {
            log::error!("mlx4: the device did not come back from reset; its memory is kept");
        }
    }

    /// Whether the device was declared failed (and reset) after a fatal command error.
    pub fn device_failed(&self) -> bool {
        self.cmd.failed.is_some()
    }

    fn cmd_exec(
        &mut self,
        op: Opcode,
        in_param: u64,
        in_mod: u32,
        op_mod: u8,
        out: Out,
    ) -> Result<u64, Error> {
        if self.cmd.boxes.is_none() {
            return Err(Error::NoMemory("command mailbox"));
        }
        if !self.wait_until(|h| !h.hcr_pending()) {
            return Err(Error::HcrBusy { op });
        }
        let events = self.cmd.use_events;
        let token = if events {
            self.cmd.token = self.cmd.token.wrapping_add(1);
            if self.cmd.token == hcr::POLL_TOKEN {
                self.cmd.token = 0;
            }
            self.cmd.token
        } else {
            hcr::POLL_TOKEN
        };
        let out_param = if out == Out::Mailbox {
            self.cmd.bus(true)
        } else {
            0
        };
        let dwords = Hcr::command(&HcrCommand {
            opcode: op.raw(),
            op_mod,
            in_param,
            in_mod,
            out_param,
            token,
            toggle: self.cmd.toggle,
            event: events,
        })
        .dwords();
        // Every dword before the status one, then (after the barrier) the status dword with GO.
        for (i, v) in dwords[..HCR_STATUS_DWORD].iter().enumerate() {
            self.p.mmio_write32(Bar::Dcs, dcs::HCR + 4 * i, v.to_be());
        }
        self.p.wmb();
        self.cmd.event_done = None;
        self.p
            .mmio_write32(Bar::Dcs, HCR_STATUS, dwords[HCR_STATUS_DWORD].to_be());
        self.cmd.toggle ^= 1;
        self.cmd.issued += 1;

        let (status, imm) = if events {
            let mut bad_token = None;
            let ok = self.wait_until(|h| {
                h.process_events();
                match h.cmd.event_done.take() {
                    Some(c) if c.token == token => {
                        h.cmd.event_done = Some(c);
                        true
                    }
                    Some(c) => {
                        bad_token = Some(c.token);
                        false
                    }
                    None => false,
                }
            });
            if !ok {
                if let Some(t) = bad_token {
                    return Err(Error::BadToken { op, token: t });
                }
                return Err(Error::CmdTimeout { op });
            }
            let c = self.cmd.event_done.take().ok_or(Error::CmdTimeout { op })?;
            (c.status, c.out_param)
        } else {
            if !self.wait_until(|h| !h.hcr_pending()) {
                return Err(Error::CmdTimeout { op });
            }
            let status = Hcr::status_of(self.hcr_status());
            let out_param = dcs::HCR + offset_of!(Hcr, out_param);
            let r = |off: usize| u64::from(u32::from_be(self.p.mmio_read32(Bar::Dcs, off)));
            let imm = if out == Out::Imm {
                (r(out_param) << 32) | r(out_param + 4)
            } else {
                0
            };
            (status, imm)
        };
        if status != 0 {
            return Err(Error::Cmd(CmdError {
                op,
                status: FwStatus::from_raw(status),
            }));
        }
        Ok(imm)
    }

    /// A command whose input is the inbox (filled by the caller).
    pub(crate) fn cmd_in(&mut self, op: Opcode, in_mod: u32, op_mod: u8) -> Result<(), Error> {
        let bus = self.cmd.bus(false);
        self.cmd(op, bus, in_mod, op_mod, Out::None).map(|_| ())
    }

    /// A command that fills the outbox; the output is then in `self.cmd.outbox`.
    pub(crate) fn cmd_out(
        &mut self,
        op: Opcode,
        in_param: u64,
        in_mod: u32,
        op_mod: u8,
    ) -> Result<(), Error> {
        if let Some((_, o)) = &mut self.cmd.boxes {
            o.bytes_mut()[..1024].fill(0);
        }
        self.cmd(op, in_param, in_mod, op_mod, Out::Mailbox)
            .map(|_| ())
    }
}
