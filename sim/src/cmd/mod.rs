//! Firmware commands, one file per family (§2.3). `dispatch` routes an opcode to its handler;
//! anything the model does not implement answers "bad opcode" (0x02) and is recorded.

mod fw;
mod icm;

use crate::hca::Hca;
use crate::hcr::{op, CmdResult, Command, Status};

/// Size of a command mailbox (§1.3).
pub const MAILBOX_SIZE: usize = 4096;

impl Hca {
    pub(crate) fn dispatch(&mut self, c: &Command) -> CmdResult {
        match c.opcode {
            op::QUERY_FW => self.cmd_query_fw(c),
            op::MAP_FA => self.cmd_map_fa(c),
            op::UNMAP_FA => self.cmd_unmap_fa(c),
            op::RUN_FW => self.cmd_run_fw(c),
            op::QUERY_DEV_CAP => self.cmd_query_dev_cap(c),
            op::QUERY_ADAPTER => self.cmd_query_adapter(c),
            op::MOD_STAT_CFG => self.cmd_mod_stat_cfg(c),
            op::NOP => self.cmd_nop(c),
            op::SET_ICM_SIZE => self.cmd_set_icm_size(c),
            op::MAP_ICM_AUX => self.cmd_map_icm_aux(c),
            op::UNMAP_ICM_AUX => self.cmd_unmap_icm_aux(c),
            op::MAP_ICM => self.cmd_map_icm(c),
            op::UNMAP_ICM => self.cmd_unmap_icm(c),
            op::INIT_HCA => self.cmd_init_hca(c),
            op::CLOSE_HCA => self.cmd_close_hca(c),
            other => Err(self.cmd_fail(
                Status::BadOp,
                "§2.3",
                format!(
                    "opcode {other:#05x} (op_mod {}) is not implemented by the device model",
                    c.op_mod
                ),
            )),
        }
    }

    /// Check that a command carries the op_mod its definition requires (§2.3).
    pub(crate) fn expect_op_mod(&mut self, c: &Command, allowed: &[u8]) -> Result<(), Status> {
        if allowed.contains(&c.op_mod) {
            Ok(())
        } else {
            Err(self.cmd_fail(
                Status::BadOp,
                "§2.3",
                format!(
                    "opcode {:#05x} with op_mod {} (allowed {allowed:?})",
                    c.opcode, c.op_mod
                ),
            ))
        }
    }

    fn mailbox_addr(&mut self, addr: u64, what: &str) -> Result<u64, Status> {
        // §1.3: Linux masks the low 8 bits of mailbox addresses (INBOX_MASK); the model
        // requires them to be zero (decision, see docs/model.md).
        if addr & 0xff != 0 || addr == 0 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§1.3",
                format!("{what} mailbox address {addr:#x} is null or not 256-byte aligned"),
            ));
        }
        Ok(addr)
    }

    /// DMA-read `len` bytes of the input mailbox at in_param.
    pub(crate) fn mailbox_in(&mut self, c: &Command, len: usize) -> Result<Vec<u8>, Status> {
        let addr = self.mailbox_addr(c.in_param, "input")?;
        let mut buf = vec![0u8; len.min(MAILBOX_SIZE)];
        self.dma_read(addr, &mut buf, "input mailbox")
            .map_err(|_| Status::InternalErr)?;
        Ok(buf)
    }

    /// DMA-write the output mailbox at out_param.
    pub(crate) fn mailbox_out(&mut self, c: &Command, data: &[u8]) -> Result<(), Status> {
        let addr = self.mailbox_addr(c.out_param, "output")?;
        let n = data.len().min(MAILBOX_SIZE);
        self.dma_write(addr, &data[..n], "output mailbox")
            .map_err(|_| Status::InternalErr)
    }
}
