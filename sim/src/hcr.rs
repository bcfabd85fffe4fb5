//! The Host Command Register engine (§1.2): GO/T/E handshake, status codes, immediate
//! out_param, command-completion EQEs in event mode, and command phase rules (§10.1).

use std::fmt;
use std::time::Duration;

use crate::hca::Hca;

/// What to do to a chosen command opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandFaultAction {
    /// Complete with this status code (§1.2 table).
    Fail(u8),
    /// Keep GO set this long before completing.
    Delay(Duration),
}

/// Fault injection for firmware commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandFault {
    /// HCA index it applies to (None = every HCA).
    pub hca: Option<usize>,
    pub opcode: u16,
    pub action: CommandFaultAction,
    /// How many times it fires (0 = every time).
    pub times: u32,
    /// How many commands with this opcode pass untouched before it fires: 0 targets the
    /// first occurrence, n the (n + 1)-th.
    pub skip: u32,
}

/// Firmware command status (§1.2 status table), shown by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    Ok = 0x00,
    InternalErr = 0x01,
    BadOp = 0x02,
    BadParam = 0x03,
    BadSysState = 0x04,
    BadResource = 0x05,
    ResourceBusy = 0x06,
    ExceedLim = 0x08,
    BadResState = 0x09,
    BadIndex = 0x0a,
    BadNvmem = 0x0b,
    IcmError = 0x0c,
    BadPerm = 0x0d,
    BadQpState = 0x10,
    BadSegParam = 0x20,
    RegBound = 0x21,
    LamNotPre = 0x22,
    BadMgmtPkt = 0x30,
    BadSize = 0x40,
    MultiFunc = 0x50,
}

impl Status {
    pub fn from_code(c: u8) -> Option<Status> {
        use Status::*;
        Some(match c {
            0x00 => Ok,
            0x01 => InternalErr,
            0x02 => BadOp,
            0x03 => BadParam,
            0x04 => BadSysState,
            0x05 => BadResource,
            0x06 => ResourceBusy,
            0x08 => ExceedLim,
            0x09 => BadResState,
            0x0a => BadIndex,
            0x0b => BadNvmem,
            0x0c => IcmError,
            0x0d => BadPerm,
            0x10 => BadQpState,
            0x20 => BadSegParam,
            0x21 => RegBound,
            0x22 => LamNotPre,
            0x30 => BadMgmtPkt,
            0x40 => BadSize,
            0x50 => MultiFunc,
            _ => return None,
        })
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?} ({:#04x})", *self as u8)
    }
}

/// Command opcodes (§2.3).
pub mod op {
    pub const QUERY_DEV_CAP: u16 = 0x003;
    pub const QUERY_FW: u16 = 0x004;
    pub const QUERY_ADAPTER: u16 = 0x006;
    pub const INIT_HCA: u16 = 0x007;
    pub const CLOSE_HCA: u16 = 0x008;
    pub const INIT_PORT: u16 = 0x009;
    pub const CLOSE_PORT: u16 = 0x00a;
    pub const SET_PORT: u16 = 0x00c;
    pub const SW2HW_MPT: u16 = 0x00d;
    pub const QUERY_MPT: u16 = 0x00e;
    pub const HW2SW_MPT: u16 = 0x00f;
    pub const WRITE_MTT: u16 = 0x011;
    pub const MAP_EQ: u16 = 0x012;
    pub const SW2HW_EQ: u16 = 0x013;
    pub const HW2SW_EQ: u16 = 0x014;
    pub const QUERY_EQ: u16 = 0x015;
    pub const SW2HW_CQ: u16 = 0x016;
    pub const HW2SW_CQ: u16 = 0x017;
    pub const QUERY_CQ: u16 = 0x018;
    pub const MODIFY_CQ: u16 = 0x02c;
    pub const SW2HW_SRQ: u16 = 0x035;
    pub const HW2SW_SRQ: u16 = 0x036;
    pub const QUERY_SRQ: u16 = 0x037;
    pub const ARM_SRQ: u16 = 0x040;
    pub const QUERY_HCA: u16 = 0x00b;
    pub const RST2INIT_QP: u16 = 0x019;
    pub const INIT2RTR_QP: u16 = 0x01a;
    pub const RTR2RTS_QP: u16 = 0x01b;
    pub const RTS2RTS_QP: u16 = 0x01c;
    pub const ERR_QP: u16 = 0x01e;
    pub const RST_QP: u16 = 0x021;
    pub const QUERY_QP: u16 = 0x022;
    pub const CONF_SPECIAL_QP: u16 = 0x023;
    pub const MAD_IFC: u16 = 0x024;
    pub const DIAG_RPRT: u16 = 0x030;
    pub const NOP: u16 = 0x031;
    pub const MOD_STAT_CFG: u16 = 0x034;
    pub const QUERY_IF_STAT: u16 = 0x054;
    pub const QUERY_PORT: u16 = 0x043;
    pub const QUERY_FUNC: u16 = 0x056;
    pub const RUN_FW: u16 = 0xff6;
    pub const UNMAP_ICM: u16 = 0xff9;
    pub const MAP_ICM: u16 = 0xffa;
    pub const UNMAP_ICM_AUX: u16 = 0xffb;
    pub const MAP_ICM_AUX: u16 = 0xffc;
    pub const SET_ICM_SIZE: u16 = 0xffd;
    pub const UNMAP_FA: u16 = 0xffe;
    pub const MAP_FA: u16 = 0xfff;
}

/// HCR dword 6 bits (§1.2).
pub const HCR_GO: u32 = 1 << 23;
pub const HCR_E: u32 = 1 << 22;
pub const HCR_T: u32 = 1 << 21;

/// The HCR's dwords by index and the fields of dwords 5 and 6 (§1.2), as host integers of
/// the big-endian dwords.
pub mod dw {
    pub const IN_PARAM_HI: usize = 0;
    pub const IN_PARAM_LO: usize = 1;
    pub const IN_MOD: usize = 2;
    pub const OUT_PARAM_HI: usize = 3;
    pub const OUT_PARAM_LO: usize = 4;
    /// The token in bits 31:16; bits 15:0 are reserved (zero).
    pub const TOKEN: usize = 5;
    pub const TOKEN_SHIFT: u32 = 16;
    pub const TOKEN_RSVD: u32 = 0xffff;
    /// Dword 6: status 31:24, GO 23, E 22, T 21, op_mod 19:12, opcode 11:0.
    pub const STATUS_SHIFT: u32 = 24;
    pub const OP_MOD_SHIFT: u32 = 12;
    pub const OP_MOD_MASK: u32 = 0xff;
    pub const OPCODE_MASK: u32 = 0xfff;
}

/// Fields of commands' input modifiers (§2.3).
pub mod in_mod {
    /// A QPN in bits 23:0 (modify/query QP); the bits above are zero, except that
    /// RST2INIT_QP's bit 31 is ignored.
    pub const QPN: u32 = 0xff_ffff;
    /// MAP_EQ: the EQN in bits 9:0 and the unmap flag in bit 31; the bits between are zero.
    pub const MAP_EQ_EQN: u32 = 0x3ff;
    pub const MAP_EQ_UNMAP: u32 = 1 << 31;
}

/// EQE type of a command completion (§4.1).
pub const EVENT_CMD: u8 = 0x0a;

/// One posted command, decoded from the HCR (§1.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Command {
    pub in_param: u64,
    pub in_mod: u32,
    pub out_param: u64,
    pub token: u16,
    pub opcode: u16,
    pub op_mod: u8,
    pub event: bool,
}

/// What a command produced: an immediate out_param (None = out_param untouched).
pub type CmdResult = Result<Option<u64>, Status>;

/// HCR register file.
#[derive(Clone, Debug, Default)]
pub struct Hcr {
    /// Dwords 0..5 as last written (host integers of the BE values).
    pub dwords: [u32; 6],
    pub go: bool,
    pub toggle: bool,
    pub status: u8,
    /// A command whose completion is being delayed by fault injection: (due time, command,
    /// result).
    pub delayed: Option<(u64, Command, CmdResult)>,
}

impl Hca {
    /// Value of HCR dword `i` (host integer of the BE dword).
    pub(crate) fn hcr_read_dword(&mut self, i: usize) -> u32 {
        match i {
            0..=5 => self.hcr.dwords[i],
            _ => {
                (u32::from(self.hcr.status) << dw::STATUS_SHIFT)
                    | if self.hcr.go { HCR_GO } else { 0 }
                    | if self.hcr.toggle { HCR_T } else { 0 }
            }
        }
    }

    pub(crate) fn hcr_write_dword(&mut self, i: usize, v: u32) {
        if self.hcr.go {
            // §1.2 step 1: the driver must wait until the previous command is done.
            self.violation(
                "§1.2",
                format!("HCR dword {i} written ({v:#010x}) while GO is still set; ignored"),
            );
            return;
        }
        if i < 6 {
            self.hcr.dwords[i] = v;
            return;
        }
        if v & HCR_GO == 0 {
            self.violation(
                "§1.2",
                format!("HCR dword 6 written without GO ({v:#010x}); nothing is posted"),
            );
            return;
        }
        let d = self.hcr.dwords;
        let cmd = Command {
            in_param: (u64::from(d[dw::IN_PARAM_HI]) << 32) | u64::from(d[dw::IN_PARAM_LO]),
            in_mod: d[dw::IN_MOD],
            out_param: (u64::from(d[dw::OUT_PARAM_HI]) << 32) | u64::from(d[dw::OUT_PARAM_LO]),
            token: (d[dw::TOKEN] >> dw::TOKEN_SHIFT) as u16,
            opcode: (v & dw::OPCODE_MASK) as u16,
            op_mod: ((v >> dw::OP_MOD_SHIFT) & dw::OP_MOD_MASK) as u8,
            event: v & HCR_E != 0,
        };
        if d[dw::TOKEN] & dw::TOKEN_RSVD != 0 {
            self.violation(
                "§1.2",
                format!(
                    "HCR token dword {:#010x}: bits 15:0 must be zero",
                    d[dw::TOKEN]
                ),
            );
        }
        // §1.2 model recommendation: latch T, set GO.
        self.hcr.toggle = v & HCR_T != 0;
        self.hcr.go = true;
        self.counters.commands += 1;
        let result = self.run_command(&cmd);
        // Fault injection: delay the completion of a chosen opcode.
        if let Some(delay) = self.take_fault(cmd.opcode, true) {
            let due = self.now_ns.saturating_add(delay);
            self.hcr.delayed = Some((due, cmd, result));
            return;
        }
        self.complete_command(cmd, result);
    }

    /// Finish a delayed command if its time has come.
    pub(crate) fn hcr_tick(&mut self) {
        if let Some((due, cmd, res)) = self.hcr.delayed {
            if self.now_ns >= due {
                self.hcr.delayed = None;
                self.complete_command(cmd, res);
            }
        }
    }

    fn run_command(&mut self, cmd: &Command) -> CmdResult {
        if let Some(code) = self.take_fault(cmd.opcode, false) {
            let st = Status::from_code(code as u8).unwrap_or(Status::InternalErr);
            log::debug!(
                "hca{}: injected failure {st} for opcode {:#x}",
                self.index,
                cmd.opcode
            );
            return Err(st);
        }
        let res = self.check_phase(cmd).and_then(|()| self.dispatch(cmd));
        self.trace_command(cmd, &res);
        log::trace!(
            "hca{}: command {:#05x} op_mod {} in_mod {:#x}: {}",
            self.index,
            cmd.opcode,
            cmd.op_mod,
            cmd.in_mod,
            match &res {
                Ok(_) => "ok".to_string(),
                Err(st) => format!("{st}"),
            }
        );
        res
    }

    /// Command phase rules (§10.1, inferred): before RUN_FW only QUERY_FW, MAP_FA, UNMAP_FA and
    /// RUN_FW; commands that need an initialised HCA (objects, ports, MAD_IFC) only after
    /// INIT_HCA.
    fn check_phase(&mut self, cmd: &Command) -> Result<(), Status> {
        let pre_fw = matches!(
            cmd.opcode,
            op::QUERY_FW | op::MAP_FA | op::UNMAP_FA | op::RUN_FW
        );
        if !self.fw.running && !pre_fw {
            return Err(self.cmd_fail(
                Status::BadSysState,
                "§10.1",
                format!("opcode {:#05x} issued before RUN_FW", cmd.opcode),
            ));
        }
        let needs_init = matches!(
            cmd.opcode,
            op::CLOSE_HCA
                | op::INIT_PORT
                | op::CLOSE_PORT
                | op::SET_PORT
                | op::SW2HW_MPT
                | op::QUERY_MPT
                | op::HW2SW_MPT
                | op::WRITE_MTT
                | op::MAP_EQ
                | op::SW2HW_EQ
                | op::HW2SW_EQ
                | op::QUERY_EQ
                | op::SW2HW_CQ
                | op::HW2SW_CQ
                | op::QUERY_CQ
                | op::MODIFY_CQ
                | op::RST2INIT_QP
                | op::INIT2RTR_QP
                | op::RTR2RTS_QP
                | op::RTS2RTS_QP
                | op::ERR_QP
                | op::RST_QP
                | op::QUERY_QP
                | op::CONF_SPECIAL_QP
                | op::MAD_IFC
        );
        if needs_init && self.fw.init.is_none() {
            return Err(self.cmd_fail(
                Status::BadSysState,
                "§10.1",
                format!("opcode {:#05x} issued before INIT_HCA", cmd.opcode),
            ));
        }
        Ok(())
    }

    /// Record a violation and return the status to answer with.
    pub(crate) fn cmd_fail(
        &mut self,
        st: Status,
        sec: &'static str,
        msg: impl Into<String>,
    ) -> Status {
        let msg = msg.into();
        self.violation(sec, format!("command failed with {st}: {msg}"));
        st
    }

    fn complete_command(&mut self, cmd: Command, result: CmdResult) {
        let (status, out) = match result {
            Ok(o) => (Status::Ok, o),
            Err(s) => (s, None),
        };
        if let Some(v) = out {
            self.hcr.dwords[dw::OUT_PARAM_HI] = (v >> 32) as u32;
            self.hcr.dwords[dw::OUT_PARAM_LO] = v as u32;
        }
        self.hcr.status = status as u8;
        // §1.2: GO clears on completion, T keeps the latched value.
        self.hcr.go = false;
        if cmd.event {
            // §1.2 event mode: a CMD EQE carrying token, status and out_param goes to the EQ
            // that event type 0x0A is mapped to.
            let out_param = out.unwrap_or(cmd.out_param);
            let ev = crate::eq::Event::Cmd {
                token: cmd.token,
                status: status as u8,
                out_param,
            };
            if !self.post_async_event(ev) {
                self.violation(
                    "§1.2",
                    format!(
                        "command {:#05x} posted with E=1 but no EQ is mapped for CMD events (type 0x0A); completion only visible in the HCR",
                        cmd.opcode
                    ),
                );
            }
        }
    }

    /// Consume a matching fault-injection entry. `delay = true` looks for delays (returns ns),
    /// `false` for failures (returns the status code).
    fn take_fault(&mut self, opcode: u16, delay: bool) -> Option<u64> {
        let mut pos = None;
        for (i, f) in self.cmd_faults.iter_mut().enumerate() {
            if f.opcode != opcode || matches!(f.action, CommandFaultAction::Delay(_)) != delay {
                continue;
            }
            // Every entry for this opcode counts the occurrence; the first one due fires.
            if f.skip > 0 {
                f.skip -= 1;
            } else if pos.is_none() {
                pos = Some(i);
            }
        }
        let pos = pos?;
        let f = &mut self.cmd_faults[pos];
        let r = match f.action {
            CommandFaultAction::Delay(d) => d.as_nanos().min(u128::from(u64::MAX)) as u64,
            CommandFaultAction::Fail(code) => u64::from(code),
        };
        if f.times > 0 {
            f.times -= 1;
            if f.times == 0 {
                self.cmd_faults.remove(pos);
            }
        }
        Some(r)
    }
}
