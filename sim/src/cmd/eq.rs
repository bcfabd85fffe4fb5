//! EQ and CQ commands: SW2HW_EQ, HW2SW_EQ, QUERY_EQ, MAP_EQ, SW2HW_CQ, HW2SW_CQ, QUERY_CQ
//! (§2.3, §4.1, §4.2).

use crate::be::Field;
use crate::cq::{cqc, Cq, CqArm, CqModeration};
use crate::eq::{eqc, Eq, EqState};
use crate::hca::Hca;
use crate::hcr::{CmdResult, Command, Status};
use crate::icm::Table;

/// MTT entries per segment of Linux's MTT buddy allocator: `1 << log_mtts_per_seg`, whose
/// default is 0 in the mlx4_core Linux's system tests run (modinfo: "(0-7) (default: 0)").
pub(crate) const MTTS_PER_SEG: u64 = 1;

impl Hca {
    /// Check an object number against the INIT_HCA table size and the firmware-reserved range.
    pub(crate) fn check_obj_index(
        &mut self,
        n: u32,
        log_num: u8,
        reserved: u32,
        what: &str,
    ) -> Result<(), Status> {
        if u64::from(n) >= 1u64 << log_num {
            return Err(self.cmd_fail(
                Status::BadIndex,
                "§2.6",
                format!(
                    "{what} {n:#x} is beyond the {} entries set by INIT_HCA",
                    1u64 << log_num
                ),
            ));
        }
        if n < reserved {
            return Err(self.cmd_fail(
                Status::BadResource,
                "§3.4",
                format!("{what} {n:#x} is in the firmware-reserved range 0..{reserved:#x}"),
            ));
        }
        Ok(())
    }

    /// log_page_size (value + 12 = page shift, §4.1/§4.2/§4.4); at most 1 GiB pages.
    pub(crate) fn parse_page_shift(&mut self, v: u64, what: &str) -> Result<u32, Status> {
        let shift = v as u32 + 12;
        if shift > 30 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.6",
                format!("{what}: log_page_size {v} (page of 2^{shift} bytes)"),
            ));
        }
        Ok(shift)
    }

    /// mtt_base_addr (bits 39:32 in `hi`, 31:0 in `lo`) -> first MTT index (§4.6).
    pub(crate) fn parse_mtt_base(
        &mut self,
        ctx: &[u8],
        (hi, lo): (Field, Field),
        what: &str,
    ) -> Result<u64, Status> {
        let base = (hi.get(ctx) << 32) | lo.get(ctx);
        let esz = u64::from(self.profile.mtt_entry_sz);
        if base % esz != 0 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.6",
                format!(
                    "{what}: mtt_base_addr {base:#x} is not a multiple of the MTT entry size {esz}"
                ),
            ));
        }
        Ok(base / esz)
    }

    /// Where an object's MTT range starts (§4.6): Linux's buddy allocator (mr.c
    /// `mlx4_alloc_mtt_range`, segments of `MTTS_PER_SEG` entries) places a range of n
    /// entries at a multiple of the segment and of 2^ceil(log2 n). `bytes` is what the
    /// object's buffer spans from the start of its first page at 2^`page_shift`-byte pages:
    /// the entries the device reads, never more than Linux allocated. Another placement is a
    /// violation.
    pub(crate) fn check_mtt_range(&mut self, what: &str, index: u64, bytes: u64, page_shift: u32) {
        let entries = bytes.div_ceil(1u64 << page_shift).max(1);
        let align = entries.next_power_of_two().max(MTTS_PER_SEG);
        if !index.is_multiple_of(align) {
            self.violation(
                "§4.6",
                format!(
                    "{what}: MTT range of {entries} entries starts at index {index:#x}, not a multiple of {align} (Linux's buddy allocator places a range of n entries at a multiple of 2^ceil(log2 n))"
                ),
            );
        }
    }

    fn params(&self) -> crate::icm::HcaParams {
        self.fw.init.clone().unwrap_or_default()
    }

    /// The firmware-reserved EQs: QUERY_DEV_CAP's, or QUERY_FUNC's in SYS_EQS mode.
    pub(crate) fn reserved_eqs(&self) -> u32 {
        if self.fw.init.as_ref().is_some_and(|p| p.sys_eqs()) {
            self.profile.func_rsvd_eqs.into()
        } else {
            self.profile.reserved_eqs()
        }
    }

    /// SW2HW_EQ (0x013): EQ context (§4.1) in the mailbox, in_mod = eqn.
    pub(crate) fn cmd_sw2hw_eq(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        let eqn = c.in_mod;
        let p = self.params();
        let rsvd = self.reserved_eqs();
        if u64::from(eqn) >= p.num_eqs() {
            return Err(self.cmd_fail(
                Status::BadIndex,
                "§2.6",
                format!(
                    "EQN {eqn} is beyond the {} EQs set by INIT_HCA",
                    p.num_eqs()
                ),
            ));
        }
        self.check_obj_index(eqn, 31, rsvd, "EQN")?;
        if self.eqs.contains_key(&eqn) {
            return Err(self.cmd_fail(
                Status::BadResState,
                "§4.1",
                format!("SW2HW_EQ: EQ {eqn} is already in hardware ownership"),
            ));
        }
        self.icm_require(Table::Eqc, u64::from(eqn), "SW2HW_EQ")?;
        self.icm_require(Table::CmptEq, u64::from(eqn), "SW2HW_EQ")?;
        let ctx = self.mailbox_in(c, eqc::SIZE)?;
        let status = eqc::STATUS.get(&ctx);
        if status != 0 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.1",
                format!("SW2HW_EQ {eqn}: status field {status:#x} (must be 0 = OK)"),
            ));
        }
        let state = match eqc::STATE.get(&ctx) {
            0x9 => EqState::Armed,
            0xa => EqState::Fired,
            0xb => EqState::AlwaysArmed,
            s => {
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§4.1",
                    format!("SW2HW_EQ {eqn}: state {s:#x} (9 armed, 0xA fired, 0xB always armed)"),
                ))
            }
        };
        let log_size = eqc::LOG_EQ_SIZE.get_u32(&ctx);
        if log_size > 22 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.1",
                format!("SW2HW_EQ {eqn}: log size {log_size}"),
            ));
        }
        let page_offset = eqc::PAGE_OFFSET.get(&ctx);
        if page_offset != 0 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.1",
                format!("SW2HW_EQ {eqn}: page_offset {page_offset:#x} (the model supports 0)"),
            ));
        }
        let page_shift = self.parse_page_shift(eqc::LOG_PAGE_SIZE.get(&ctx), "SW2HW_EQ")?;
        let mtt_base = (eqc::MTT_BASE_HI, eqc::MTT_BASE_LO);
        let mtt_index = self.parse_mtt_base(&ctx, mtt_base, "SW2HW_EQ")?;
        let eq_bytes = (1u64 << log_size) * self.params().eqe_layout().stride;
        self.check_mtt_range(&format!("SW2HW_EQ {eqn}"), mtt_index, eq_bytes, page_shift);
        let eq = Eq {
            eqn,
            ctx: ctx.clone(),
            log_size,
            page_shift,
            mtt_index,
            intr: eqc::INTR.get(&ctx) as u8,
            state,
            producer: eqc::PRODUCER_INDEX.get_u32(&ctx),
            consumer: eqc::CONSUMER_INDEX.get_u32(&ctx),
            overflowed: false,
            write_failed: false,
        };
        if eq.producer != eq.consumer {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.1",
                format!(
                    "SW2HW_EQ {eqn}: producer {:#x} != consumer {:#x}",
                    eq.producer, eq.consumer
                ),
            ));
        }
        let va = self.icm_addr(Table::Eqc, u64::from(eqn));
        self.icm_write(va, &ctx, "EQ context")?;
        self.eqs.insert(eqn, eq);
        // §4.1/§10.4: firmware sets every EQE's owner bit to 1.
        if let Err(st) = self.eq_init_owner(eqn) {
            self.eqs.remove(&eqn);
            return Err(st);
        }
        Ok(None)
    }

    /// HW2SW_EQ (0x014): op_mod 1 = no mailbox, 0 = EQ context to the output mailbox.
    pub(crate) fn cmd_hw2sw_eq(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0, 1])?;
        let eqn = c.in_mod;
        if !self.eqs.contains_key(&eqn) {
            return Err(self.cmd_fail(
                Status::BadResState,
                "§4.1",
                format!("HW2SW_EQ: EQ {eqn} is not in hardware ownership"),
            ));
        }
        if c.op_mod == 0 {
            let ctx = self.eq_context_now(eqn);
            self.mailbox_out(c, &ctx)?;
        }
        for t in 0..64 {
            if self.event_map[t] == Some(eqn) {
                self.violation("§2.2", format!("HW2SW_EQ {eqn} while event type {t:#x} is still mapped to it (MAP_EQ unmap first)"));
                self.event_map[t] = None;
            }
        }
        let users: Vec<u32> = self
            .cqs
            .values()
            .filter(|q| q.comp_eqn == eqn)
            .map(|q| q.cqn)
            .collect();
        if !users.is_empty() {
            self.violation(
                "§2.2",
                format!("HW2SW_EQ {eqn} while CQs {users:x?} still report to it"),
            );
        }
        self.eqs.remove(&eqn);
        Ok(None)
    }

    /// QUERY_EQ (0x015).
    pub(crate) fn cmd_query_eq(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        if !self.eqs.contains_key(&c.in_mod) {
            return Err(self.cmd_fail(
                Status::BadResState,
                "§4.1",
                format!("QUERY_EQ: EQ {} is not in hardware ownership", c.in_mod),
            ));
        }
        let ctx = self.eq_context_now(c.in_mod);
        self.mailbox_out(c, &ctx)?;
        Ok(None)
    }

    /// MAP_EQ (0x012): in_param = event-type bitmask, in_mod = eqn | unmap << 31 (§2.3).
    pub(crate) fn cmd_map_eq(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        use crate::hcr::in_mod::{MAP_EQ_EQN, MAP_EQ_UNMAP};
        let eqn = c.in_mod & MAP_EQ_EQN;
        let unmap = c.in_mod & MAP_EQ_UNMAP != 0;
        if c.in_mod & !(MAP_EQ_EQN | MAP_EQ_UNMAP) != 0 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§2.3",
                format!(
                    "MAP_EQ in_mod {:#x}: only bits 9:0 and 31 are defined",
                    c.in_mod
                ),
            ));
        }
        if !unmap && !self.eqs.contains_key(&eqn) {
            return Err(self.cmd_fail(
                Status::BadResState,
                "§2.3",
                format!("MAP_EQ to EQ {eqn}, which is not in hardware ownership"),
            ));
        }
        if c.in_param & 1 != 0 {
            self.violation("§4.1", "MAP_EQ mask includes COMP (bit 0); completion events go to each CQ's comp_eqn and are never mapped");
        }
        for t in 1..64 {
            if c.in_param & (1u64 << t) != 0 {
                if unmap {
                    if self.event_map[t] == Some(eqn) {
                        self.event_map[t] = None;
                    }
                } else {
                    self.event_map[t] = Some(eqn);
                }
            }
        }
        Ok(None)
    }

    /// SW2HW_CQ (0x016): CQ context (§4.2), in_mod = cqn. op_mod 0: the device gives every
    /// CQE to the hardware (owner bit set); op_mod 1, only with SW_CQ_INIT (QUERY_DEV_CAP ext-2
    /// bit 23): software already did (Linux fills them with 0xCC, `mlx4_cq_alloc`).
    pub(crate) fn cmd_sw2hw_cq(&mut self, c: &Command) -> CmdResult {
        if self.profile.caps2.sw_cq_init {
            self.expect_op_mod(c, &[0, 1])?;
        } else {
            self.expect_op_mod(c, &[0])?;
        }
        let cqn = c.in_mod;
        let p = self.params();
        let rsvd = self.profile.reserved_cqs();
        self.check_obj_index(cqn, p.log_num_cqs, rsvd, "CQN")?;
        if self.cqs.contains_key(&cqn) {
            return Err(self.cmd_fail(
                Status::BadResState,
                "§4.2",
                format!("SW2HW_CQ: CQ {cqn:#x} is already in hardware ownership"),
            ));
        }
        self.icm_require(Table::Cqc, u64::from(cqn), "SW2HW_CQ")?;
        self.icm_require(Table::CmptCq, u64::from(cqn), "SW2HW_CQ")?;
        let ctx = self.mailbox_in(c, cqc::SIZE)?;
        let status = cqc::STATUS.get(&ctx);
        if status != 0 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.2",
                format!("SW2HW_CQ {cqn:#x}: status {status:#x} (must be 0)"),
            ));
        }
        if cqc::COLLAPSED.get_bool(&ctx) {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.2",
                format!("SW2HW_CQ {cqn:#x}: collapsed CQs are not modelled"),
            ));
        }
        let arm = match cqc::STATE.get(&ctx) {
            0 => CqArm::Disarmed,
            6 => CqArm::Solicited,
            9 => CqArm::Next,
            s => {
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§4.2",
                    format!("SW2HW_CQ {cqn:#x}: state {s:#x}"),
                ))
            }
        };
        let log_size = cqc::LOG_CQ_SIZE.get_u32(&ctx);
        let uar = cqc::UAR.get_u32(&ctx);
        if log_size > u32::from(self.profile.log_max_cq_sz) {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.2",
                format!(
                    "SW2HW_CQ {cqn:#x}: log size {log_size} > device max {}",
                    self.profile.log_max_cq_sz
                ),
            ));
        }
        self.check_uar_index(uar, "SW2HW_CQ")?;
        let page_offset = cqc::PAGE_OFFSET.get(&ctx);
        if page_offset != 0 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.2",
                format!("SW2HW_CQ {cqn:#x}: page_offset {page_offset:#x} (the model supports 0)"),
            ));
        }
        let comp_eqn = cqc::COMP_EQN.get_u32(&ctx);
        if !self.eqs.contains_key(&comp_eqn) {
            return Err(self.cmd_fail(
                Status::BadResource,
                "§4.2",
                format!(
                    "SW2HW_CQ {cqn:#x}: comp_eqn {comp_eqn} is not an EQ in hardware ownership"
                ),
            ));
        }
        let page_shift = self.parse_page_shift(cqc::LOG_PAGE_SIZE.get(&ctx), "SW2HW_CQ")?;
        let mtt_base = (cqc::MTT_BASE_HI, cqc::MTT_BASE_LO);
        let mtt_index = self.parse_mtt_base(&ctx, mtt_base, "SW2HW_CQ")?;
        let cq_bytes = (1u64 << log_size) * self.params().cqe_layout().stride;
        self.check_mtt_range(
            &format!("SW2HW_CQ {cqn:#x}"),
            mtt_index,
            cq_bytes,
            page_shift,
        );
        let db_rec = cqc::DB_REC_ADDR.get(&ctx);
        if !db_rec.is_multiple_of(8) || db_rec == 0 {
            return Err(self.cmd_fail(Status::BadParam, "§4.2", format!("SW2HW_CQ {cqn:#x}: doorbell record address {db_rec:#x} is null or not 8-byte aligned")));
        }
        let cq = Cq {
            cqn,
            ctx: ctx.clone(),
            log_size,
            uar,
            comp_eqn,
            page_shift,
            mtt_index,
            db_rec,
            producer: cqc::PRODUCER_INDEX.get_u32(&ctx),
            arm,
            overflowed: false,
            arm_sn: 0,
            fired_sn: None,
            moderation: CqModeration::from_context(&ctx),
            moderated: 0,
            moderation_deadline: None,
        };
        let va = self.icm_addr(Table::Cqc, u64::from(cqn));
        self.icm_write(va, &ctx, "CQ context")?;
        self.cqs.insert(cqn, cq);
        let init = if c.op_mod == 1 {
            self.cq_check_software_init(cqn)
        } else {
            self.cq_init_owner(cqn)
        };
        if let Err(st) = init {
            self.cqs.remove(&cqn);
            return Err(st);
        }
        Ok(None)
    }

    /// A UAR index named in a CQ/QP context must be inside BAR2's UAR area and outside the
    /// firmware-reserved UARs (§2.4 0x48, §5.1).
    pub(crate) fn check_uar_index(&mut self, uar: u32, what: &str) -> Result<(), Status> {
        let n = self.profile.num_uars();
        let rsvd = u32::from(self.profile.rsvd_uars);
        if u64::from(uar) >= n || uar < rsvd {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§5.1",
                format!("{what}: UAR index {uar} is outside {rsvd}..{n} (reserved UARs, UAR area)"),
            ));
        }
        Ok(())
    }

    /// HW2SW_CQ (0x017): op_mod 1 = no mailbox, 0 = output mailbox.
    pub(crate) fn cmd_hw2sw_cq(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0, 1])?;
        let cqn = c.in_mod;
        if !self.cqs.contains_key(&cqn) {
            return Err(self.cmd_fail(
                Status::BadResState,
                "§4.2",
                format!("HW2SW_CQ: CQ {cqn:#x} is not in hardware ownership"),
            ));
        }
        let users: Vec<u32> = self
            .qps
            .values()
            .filter(|q| {
                q.state != crate::qp::QpState::Reset && (q.send_cqn == cqn || q.recv_cqn == cqn)
            })
            .map(|q| q.qpn)
            .collect();
        if !users.is_empty() {
            self.violation(
                "§2.2",
                format!(
                    "HW2SW_CQ {cqn:#x} while QPs {users:x?} (not in RESET) still complete to it"
                ),
            );
        }
        if c.op_mod == 0 {
            let ctx = self.cq_context_now(cqn);
            self.mailbox_out(c, &ctx)?;
        }
        self.cqs.remove(&cqn);
        Ok(None)
    }

    /// QUERY_CQ (0x018).
    pub(crate) fn cmd_query_cq(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        if !self.cqs.contains_key(&c.in_mod) {
            return Err(self.cmd_fail(
                Status::BadResState,
                "§4.2",
                format!("QUERY_CQ: CQ {:#x} is not in hardware ownership", c.in_mod),
            ));
        }
        let ctx = self.cq_context_now(c.in_mod);
        self.mailbox_out(c, &ctx)?;
        Ok(None)
    }

    /// MODIFY_CQ (0x02C): op_mod 1 = moderation, taking cq_period (0x10) and cq_max_count
    /// (0x12) from a CQ context in the input mailbox (Linux cq.c `mlx4_cq_modify`); op_mod 0
    /// (resize) is not modelled.
    pub(crate) fn cmd_modify_cq(&mut self, c: &Command) -> CmdResult {
        if c.op_mod == 0 {
            return Err(self.cmd_fail(
                Status::BadOp,
                "§4.2",
                format!(
                    "MODIFY_CQ op_mod 0 (resize) of CQ {:#x} is not modelled",
                    c.in_mod
                ),
            ));
        }
        self.expect_op_mod(c, &[1])?;
        let cqn = c.in_mod;
        if !self.cqs.contains_key(&cqn) {
            return Err(self.cmd_fail(
                Status::BadResState,
                "§4.2",
                format!("MODIFY_CQ: CQ {cqn:#x} is not in hardware ownership"),
            ));
        }
        let ctx = self.mailbox_in(c, 64)?;
        let m = CqModeration::from_context(&ctx);
        let now = self.now_ns;
        let Some(cq) = self.cqs.get_mut(&cqn) else {
            return Ok(None);
        };
        cq.moderation = m;
        cq.ctx.resize(64, 0);
        m.to_context(&mut cq.ctx);
        // The new values apply to the completions already held back.
        if cq.moderated > 0 {
            if !m.enabled() || (m.max_count != 0 && cq.moderated >= u32::from(m.max_count)) {
                cq.moderation_deadline = Some(now);
            } else if m.period_us == 0 {
                cq.moderation_deadline = None;
            } else if cq.moderation_deadline.is_none() {
                cq.moderation_deadline = Some(now + u64::from(m.period_us) * 1000);
            }
        }
        let ctx = cq.ctx.clone();
        let va = self.icm_addr(Table::Cqc, u64::from(cqn));
        self.icm_write(va, &ctx, "CQ context")?;
        self.cq_moderation_tick();
        Ok(None)
    }
}
