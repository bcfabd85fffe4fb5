//! MPT and MTT commands: SW2HW_MPT, QUERY_MPT, HW2SW_MPT, WRITE_MTT (§2.3, §4.5, §4.6).

use crate::hca::Hca;
use crate::hcr::{CmdResult, Command, Status};
use crate::icm::Table;
use crate::mr::{flags, mpt, mtt, write_mtt, Mpt, MAX_MTT_SHIFT};

impl Hca {
    /// SW2HW_MPT (0x00D): in_mod = MPT index, mailbox = 64-byte dMPT entry (§4.5).
    pub(crate) fn cmd_sw2hw_mpt(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        let index = c.in_mod;
        let log = self.fw.init.as_ref().map(|p| p.log_num_mpts).unwrap_or(0);
        let rsvd = self.profile.reserved_mrws();
        self.check_obj_index(index, log, rsvd, "MPT index")?;
        if self.mpts.contains_key(&index) {
            return Err(self.cmd_fail(
                Status::BadResState,
                "§4.5",
                format!("SW2HW_MPT: MPT {index:#x} is already in hardware ownership"),
            ));
        }
        self.icm_require(Table::Dmpt, u64::from(index), "SW2HW_MPT")?;
        let e = self.mailbox_in(c, mpt::SIZE)?;
        let f = mpt::FLAGS.get_u32(&e);
        if f & flags::REGION == 0 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.5",
                format!("SW2HW_MPT {index:#x}: memory windows (REGION bit clear) are not modelled"),
            ));
        }
        let hw_key = mpt::KEY.get_u32(&e);
        if hw_key & crate::mr::key_layout::HW_INDEX & ((1 << log) - 1) != index {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.5",
                format!("SW2HW_MPT {index:#x}: key field {hw_key:#x} (hardware order) does not name this index"),
            ));
        }
        let physical = f & flags::PHYSICAL != 0;
        let mtt_addr = mpt::MTT_ADDR.get(&e);
        let page_shift = mpt::ENTITY_SIZE.get_u32(&e);
        if !physical {
            if !(12..=MAX_MTT_SHIFT).contains(&page_shift) {
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§4.5",
                    format!(
                        "SW2HW_MPT {index:#x}: entity_size {page_shift} (log2 page size 12..={MAX_MTT_SHIFT}, Linux's MLX4_MAX_MTT_SHIFT)"
                    ),
                ));
            }
            if !mtt_addr.is_multiple_of(u64::from(self.profile.mtt_entry_sz)) {
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§4.6",
                    format!("SW2HW_MPT {index:#x}: mtt_addr {mtt_addr:#x} not a multiple of 8"),
                ));
            }
            let fbo = mpt::FIRST_BYTE_OFFSET.get(&e);
            if fbo != 0 {
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§4.5",
                    format!(
                        "SW2HW_MPT {index:#x}: first_byte_offset {fbo:#x} is not modelled (must be 0)"
                    ),
                ));
            }
        }
        // What Linux's `mlx4_mr_enable` writes for every MR (mr.c): MIO set; the MTT size and
        // the PD's RAE bit only for a fast-register MPT in the free state. Anything else is
        // recorded (the entry is still taken: the fields have no effect the model knows).
        let pd_flags = mpt::PD_FLAGS.get_u32(&e);
        let fast_reg =
            mpt::STATUS.get_u32(&e) == flags::STATUS_FREE && pd_flags & flags::PD_FAST_REG != 0;
        if f & flags::MIO == 0 {
            self.violation(
                "§4.5",
                format!(
                    "SW2HW_MPT {index:#x}: MIO (flags bit 17) clear; Linux sets it on every MPT"
                ),
            );
        }
        if !fast_reg && pd_flags & flags::PD_RAE != 0 {
            self.violation(
                "§4.5",
                format!("SW2HW_MPT {index:#x}: PD RAE bit on a region that is not a free fast-register MPT"),
            );
        }
        let mtt_sz = mpt::MTT_SZ.get(&e);
        if !fast_reg && mtt_sz != 0 {
            self.violation(
                "§4.5",
                format!(
                    "SW2HW_MPT {index:#x}: mtt_sz {mtt_sz:#x} on a region that is not a free fast-register MPT (Linux leaves it 0)"
                ),
            );
        }
        if !physical {
            // The entries the region's pages take: mtt_sz (Linux's 1 << order) for a free
            // fast-register MPT, else the pages [start, start + length) touches.
            let page = 1u64 << page_shift;
            let start = mpt::START.get(&e);
            let bytes = if fast_reg {
                mtt_sz.max(1) << page_shift
            } else {
                (start % page).saturating_add(mpt::LENGTH.get(&e))
            };
            let first = mtt_addr / u64::from(self.profile.mtt_entry_sz);
            self.check_mtt_range(&format!("SW2HW_MPT {index:#x}"), first, bytes, page_shift);
        }
        let m = Mpt {
            index,
            ctx: e.clone(),
            flags: f,
            hw_key,
            pd: mpt::PD.get_u32(&e),
            start: mpt::START.get(&e),
            length: mpt::LENGTH.get(&e),
            mtt_index: mtt_addr / u64::from(self.profile.mtt_entry_sz),
            page_shift: if physical { 12 } else { page_shift },
        };
        let va = self.icm_addr(Table::Dmpt, u64::from(index));
        self.icm_write(va, &e, "dMPT entry")?;
        self.mpts.insert(index, m);
        Ok(None)
    }

    fn mpt_image(&self, index: u32) -> Vec<u8> {
        let mut v = self
            .mpts
            .get(&index)
            .map(|m| m.ctx.clone())
            .unwrap_or_default();
        v.resize(mpt::SIZE, 0);
        // Hardware ownership: status nibble 0 (SW owned is 0xF, §4.5).
        mpt::STATUS.set(&mut v, 0);
        v
    }

    /// QUERY_MPT (0x00E).
    pub(crate) fn cmd_query_mpt(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        if !self.mpts.contains_key(&c.in_mod) {
            return Err(self.cmd_fail(
                Status::BadResState,
                "§4.5",
                format!(
                    "QUERY_MPT: MPT {:#x} is not in hardware ownership",
                    c.in_mod
                ),
            ));
        }
        let img = self.mpt_image(c.in_mod);
        self.mailbox_out(c, &img)?;
        Ok(None)
    }

    /// HW2SW_MPT (0x00F): op_mod 1 = no output, 0 = entry to the output mailbox.
    pub(crate) fn cmd_hw2sw_mpt(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0, 1])?;
        if !self.mpts.contains_key(&c.in_mod) {
            return Err(self.cmd_fail(
                Status::BadResState,
                "§4.5",
                format!(
                    "HW2SW_MPT: MPT {:#x} is not in hardware ownership",
                    c.in_mod
                ),
            ));
        }
        if c.op_mod == 0 {
            let img = self.mpt_image(c.in_mod);
            self.mailbox_out(c, &img)?;
        }
        self.mpts.remove(&c.in_mod);
        Ok(None)
    }

    /// WRITE_MTT (0x011): mailbox +0 start, +0x10 entries; in_mod = count (§4.6). The start
    /// is taken as a byte offset into the MTT table (Nautilus on real firmware; decision in
    /// docs/model.md).
    pub(crate) fn cmd_write_mtt(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        let n = c.in_mod as usize;
        if n == 0 || n > write_mtt::MAX {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.6",
                format!("WRITE_MTT with {n} entries (1..=510)"),
            ));
        }
        let entries = write_mtt::ENTRIES..write_mtt::ENTRIES + n * mtt::ENTRY_SIZE;
        let mb = self.mailbox_in(c, entries.end)?;
        let start = write_mtt::START.get(&mb);
        let esz = u64::from(self.profile.mtt_entry_sz);
        if !start.is_multiple_of(esz) {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.6",
                format!("WRITE_MTT start {start:#x} is not a multiple of the entry size"),
            ));
        }
        let first = start / esz;
        for (i, e) in mb[entries.clone()].chunks(mtt::ENTRY_SIZE).enumerate() {
            if !mtt::PRESENT.get_bool(e) {
                let e = mtt::ENTRY.get(e);
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§4.6",
                    format!("WRITE_MTT entry {i} ({e:#x}) lacks the present bit"),
                ));
            }
        }
        for i in 0..n as u64 {
            self.icm_require(Table::Mtt, first + i, "WRITE_MTT")?;
        }
        let va = self.icm_addr(Table::Mtt, first);
        self.icm_write(va, &mb[entries], "MTT entries")?;
        Ok(None)
    }
}
