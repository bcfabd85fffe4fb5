//! The command log: every firmware command the driver issued, kept in a fixed ring so it
//! costs no allocation and survives a failed bring-up. `mode=diag` prints it; the data path
//! issues no commands, so recording costs nothing there.

use core::fmt;

use mlx4::{CmdOutcome, CmdRecord};
use spin::Mutex;

/// Records kept (a bring-up issues about a hundred commands, a teardown about thirty).
pub const CAPACITY: usize = 512;

/// A ring of the last [`CAPACITY`] command records.
pub struct CmdLog {
    ring: [Option<CmdRecord>; CAPACITY],
    /// Commands recorded since the last clear (may exceed `CAPACITY`).
    total: u64,
    /// While paused, commands are only counted here.
    paused: Option<u64>,
}

impl CmdLog {
    pub const fn new() -> Self {
        CmdLog {
            ring: [None; CAPACITY],
            total: 0,
            paused: None,
        }
    }

    pub fn push(&mut self, r: CmdRecord) {
        if let Some(skipped) = &mut self.paused {
            *skipped += 1;
            return;
        }
        self.ring[(self.total % CAPACITY as u64) as usize] = Some(r);
        self.total += 1;
    }

    /// Stop recording (e.g. during a polling wait); commands are counted, not kept.
    pub fn pause(&mut self) {
        self.paused.get_or_insert(0);
    }

    /// Record again; returns how many commands went by while paused.
    pub fn resume(&mut self) -> u64 {
        self.paused.take().unwrap_or(0)
    }

    pub fn clear(&mut self) {
        *self = CmdLog::new();
    }

    /// Commands recorded since the last clear, including any the ring no longer holds.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The records still held, oldest first, each with its sequence number (0-based).
    pub fn iter(&self) -> impl Iterator<Item = (u64, &CmdRecord)> {
        let kept = self.total.min(CAPACITY as u64);
        let first = self.total - kept;
        (first..self.total).filter_map(move |seq| {
            self.ring[(seq % CAPACITY as u64) as usize]
                .as_ref()
                .map(|r| (seq, r))
        })
    }
}

impl Default for CmdLog {
    fn default() -> Self {
        CmdLog::new()
    }
}

/// The kernel's log (one HCA is driven at a time).
pub static LOG: Mutex<CmdLog> = Mutex::new(CmdLog::new());

/// One record as a line: sequence, opcode name and number, op_mod, in_mod, in_param, how it
/// completed (poll or event), the outcome and the time it took.
pub struct Line<'a>(pub u64, pub &'a CmdRecord);

impl fmt::Display for Line<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Line(seq, r) = *self;
        write!(
            f,
            "#{seq:<4} {:<14} 0x{:03x} op_mod {} in_mod {:#x} in_param {:#x} {} ",
            r.op.name(),
            r.op.raw(),
            r.op_mod,
            r.in_mod,
            r.in_param,
            if r.event { "event" } else { "poll" },
        )?;
        match r.outcome {
            CmdOutcome::Ok => f.write_str("ok")?,
            CmdOutcome::Status(s) => write!(f, "status {} (0x{:02x})", s.name(), s.raw())?,
            CmdOutcome::Timeout => f.write_str("TIMEOUT")?,
            CmdOutcome::HcrBusy => f.write_str("HCR busy, not posted")?,
            CmdOutcome::BadToken(t) => write!(f, "completion with foreign token {t:#x}")?,
            CmdOutcome::NoMailbox => f.write_str("no mailbox, not posted")?,
            CmdOutcome::DeviceFailed => f.write_str("device failed earlier, not posted")?,
            CmdOutcome::Failed(e) => write!(f, "failed: {e}")?,
        }
        write!(f, " {} us", r.elapsed_ns / 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::vec::Vec;
    use mlx4::{FwStatus, Opcode};

    fn rec(op: Opcode, outcome: CmdOutcome) -> CmdRecord {
        CmdRecord {
            op,
            op_mod: 0,
            in_mod: 1,
            in_param: 0x1000,
            event: false,
            outcome,
            elapsed_ns: 12_345,
        }
    }

    #[test]
    fn ring_keeps_the_newest_in_order_and_counts_all() {
        let mut log = CmdLog::new();
        assert_eq!(log.iter().count(), 0);
        for i in 0..CAPACITY as u32 + 3 {
            let mut r = rec(Opcode::NOP, CmdOutcome::Ok);
            r.in_mod = i;
            log.push(r);
        }
        assert_eq!(log.total(), CAPACITY as u64 + 3);
        let kept: Vec<(u64, u32)> = log.iter().map(|(s, r)| (s, r.in_mod)).collect();
        assert_eq!(kept.len(), CAPACITY);
        assert_eq!(kept[0], (3, 3), "the three oldest were overwritten");
        assert_eq!(
            *kept.last().unwrap(),
            (CAPACITY as u64 + 2, CAPACITY as u32 + 2)
        );
        log.clear();
        assert_eq!((log.total(), log.iter().count()), (0, 0));
    }

    #[test]
    fn paused_commands_are_counted_not_kept() {
        let mut log = CmdLog::new();
        log.push(rec(Opcode::QUERY_FW, CmdOutcome::Ok));
        log.pause();
        for _ in 0..CAPACITY + 10 {
            log.push(rec(Opcode::MAD_IFC, CmdOutcome::Ok));
        }
        assert_eq!(log.resume(), CAPACITY as u64 + 10);
        log.push(rec(Opcode::CLOSE_PORT, CmdOutcome::Ok));
        let ops: Vec<Opcode> = log.iter().map(|(_, r)| r.op).collect();
        assert_eq!(ops, [Opcode::QUERY_FW, Opcode::CLOSE_PORT]);
        assert_eq!(log.total(), 2);
        assert_eq!(log.resume(), 0, "not paused");
    }

    #[test]
    fn line_names_the_command_and_its_outcome() {
        let ok = format!("{}", Line(0, &rec(Opcode::QUERY_FW, CmdOutcome::Ok)));
        assert_eq!(
            ok,
            "#0    QUERY_FW       0x004 op_mod 0 in_mod 0x1 in_param 0x1000 poll ok 12 us"
        );
        let bad = rec(Opcode::INIT_HCA, CmdOutcome::Status(FwStatus::BadParam));
        let line = format!("{}", Line(7, &bad));
        assert!(
            line.contains("INIT_HCA       0x007") && line.ends_with("status BadParam (0x03) 12 us"),
            "{line}"
        );
        let t = format!("{}", Line(8, &rec(Opcode::NOP, CmdOutcome::Timeout)));
        assert!(t.contains(" TIMEOUT "), "{t}");
    }
}
