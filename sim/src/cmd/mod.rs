//! Firmware commands, one file per family (§2.3). `dispatch` routes an opcode to its handler;
//! anything the model does not implement answers "bad opcode" (0x02) and is recorded.

mod eq;
pub(crate) mod fw;
mod icm;
mod mr;
pub(crate) mod port;
mod qp;

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
            op::DIAG_RPRT => self.cmd_diag_rprt(c),
            op::QUERY_IF_STAT => self.cmd_query_if_stat(c),
            op::QUERY_FUNC if self.profile.num_sys_eqs != 0 => self.cmd_query_func(c),
            op::NOP => self.cmd_nop(c),
            op::SET_ICM_SIZE => self.cmd_set_icm_size(c),
            op::MAP_ICM_AUX => self.cmd_map_icm_aux(c),
            op::UNMAP_ICM_AUX => self.cmd_unmap_icm_aux(c),
            op::MAP_ICM => self.cmd_map_icm(c),
            op::UNMAP_ICM => self.cmd_unmap_icm(c),
            op::INIT_HCA => self.cmd_init_hca(c),
            op::QUERY_HCA => self.cmd_query_hca(c),
            op::CLOSE_HCA => self.cmd_close_hca(c),
            op::SW2HW_EQ => self.cmd_sw2hw_eq(c),
            op::HW2SW_EQ => self.cmd_hw2sw_eq(c),
            op::QUERY_EQ => self.cmd_query_eq(c),
            op::MAP_EQ => self.cmd_map_eq(c),
            op::SW2HW_CQ => self.cmd_sw2hw_cq(c),
            op::HW2SW_CQ => self.cmd_hw2sw_cq(c),
            op::QUERY_CQ => self.cmd_query_cq(c),
            op::MODIFY_CQ => self.cmd_modify_cq(c),
            op::SW2HW_SRQ => self.cmd_sw2hw_srq(c),
            op::HW2SW_SRQ => self.cmd_hw2sw_srq(c),
            op::QUERY_SRQ => self.cmd_query_srq(c),
            op::ARM_SRQ => self.cmd_arm_srq(c),
            op::SW2HW_MPT => self.cmd_sw2hw_mpt(c),
            op::QUERY_MPT => self.cmd_query_mpt(c),
            op::HW2SW_MPT => self.cmd_hw2sw_mpt(c),
            op::WRITE_MTT => self.cmd_write_mtt(c),
            op::RST2INIT_QP
            | op::INIT2RTR_QP
            | op::RTR2RTS_QP
            | op::RTS2RTS_QP
            | op::ERR_QP
            | op::RST_QP => self.cmd_modify_qp(c),
            op::QUERY_QP => self.cmd_query_qp(c),
            op::CONF_SPECIAL_QP => self.cmd_conf_special_qp(c),
            op::INIT_PORT => self.cmd_init_port(c),
            op::CLOSE_PORT => self.cmd_close_port(c),
            op::SET_PORT => self.cmd_set_port(c),
            op::QUERY_PORT => self.cmd_query_port(c),
            op::MAD_IFC => self.cmd_mad_ifc(c),
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
        if self.trace.enabled {
            self.trace.mailbox = Some(buf.clone());
        }
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
