//! Shared receive queues (§4.7): the SRQ context in ICM, SW2HW_SRQ / HW2SW_SRQ / QUERY_SRQ /
//! ARM_SRQ, the WQE free list the device follows through `next_wqe_index`, and the limit event.
//! QPs whose context names an SRQ (QPC 0xAC bit 24) take their receive WQEs from here
//! (`wqe.rs` `rq_peek` / `rq_consume`).

use crate::hca::Hca;
use crate::hcr::{CmdResult, Command, Status};
use crate::icm::Table;
use crate::mr::INVALID_LKEY;
use crate::seg::{self, Data};
use crate::wqe::{werr, Sge, WqeError};

/// Bytes of the SRQ context that carry fields (§4.7).
pub const SRQC_SIZE: usize = 0x30;

/// SRQ context fields (§4.7): the model's own definitions.
pub mod srqc {
    use crate::be::Field;

    pub const STATE: Field = Field::bits(0x00, 4, 28, 4);
    pub const LOG_SIZE: Field = Field::bits(0x00, 4, 24, 4);
    pub const SRQN: Field = Field::bits(0x00, 4, 0, 24);
    /// log2 stride − 4.
    pub const LOGSTRIDE: Field = Field::bits(0x04, 1, 0, 3);
    pub const XRCD: Field = Field::whole(0x06, 2);
    pub const CQN: Field = Field::bits(0x08, 4, 0, 24);
    pub const LOG_PAGE_SIZE: Field = Field::bits(0x10, 1, 0, 6);
    pub const MTT_BASE_HI: Field = Field::whole(0x13, 1);
    pub const MTT_BASE_LO: Field = Field::whole(0x14, 4);
    pub const PD: Field = Field::bits(0x18, 4, 0, 24);
    pub const LIMIT_WATERMARK: Field = Field::whole(0x1c, 2);
    pub const WQE_CNT: Field = Field::whole(0x1e, 2);
    pub const WQE_COUNTER: Field = Field::whole(0x22, 2);
    pub const DB_REC_ADDR: Field = Field::whole(0x28, 8);
}

/// SRQ WQE fields (§4.7): `next_wqe_index` in the 16-byte next segment.
pub mod srq_wqe {
    use crate::be::Field;

    pub const NEXT_WQE_INDEX: Field = Field::whole(0x02, 2);
}

/// Size of the next segment that precedes the data segments (§4.7).
pub const NEXT_SEG_SIZE: usize = 16;

/// One SRQ in hardware ownership.
#[derive(Clone, Debug)]
pub struct Srq {
    pub srqn: u32,
    /// The context as SW2HW_SRQ wrote it.
    pub ctx: Vec<u8>,
    pub log_size: u32,
    pub log_stride: u32,
    pub page_shift: u32,
    /// First MTT index of the buffer.
    pub mtt_index: u64,
    pub pd: u32,
    pub db_rec: u64,
    /// Armed limit (0 = not armed).
    pub limit: u16,
    /// WQEs the device has taken (16 bits, compared with the doorbell record).
    pub counter: u16,
    /// Index of the WQE the device takes next (starts at 0, then follows next_wqe_index).
    pub next: u16,
    /// Limit events posted.
    pub limit_events: u32,
}

impl Srq {
    /// The context as QUERY_SRQ / HW2SW_SRQ return it: the image with the live limit and counter.
    pub fn context_now(&self) -> Vec<u8> {
        let mut c = self.ctx.clone();
        srqc::LIMIT_WATERMARK.set(&mut c, self.limit.into());
        srqc::WQE_COUNTER.set(&mut c, self.counter.into());
        c
    }
}

impl Hca {
    /// The SRQ a QP context names, if any (QPC 0xAC: bit 24 = in use, bits 23:0 SRQN; §4.4).
    pub(crate) fn qp_srqn(&self, qpn: u32) -> Option<u32> {
        self.qps.get(&qpn).and_then(|q| q.srqn())
    }

    /// RST2INIT of a QP that names SRQ `srqn`: the SRQ must be in hardware ownership (§4.7).
    pub(crate) fn check_qp_srq(&mut self, qpn: u32, srqn: u32) -> Result<(), Status> {
        if self.srqs.contains_key(&srqn) {
            return Ok(());
        }
        Err(self.cmd_fail(
            Status::BadResource,
            "§4.7",
            format!("RST2INIT QP {qpn:#x}: SRQ {srqn:#x} is not in hardware ownership"),
        ))
    }

    fn srq_missing(&mut self, cmd: &str, srqn: u32) -> Status {
        self.cmd_fail(
            Status::BadResState,
            "§4.7",
            format!("{cmd}: SRQ {srqn:#x} is not in hardware ownership"),
        )
    }

    /// SW2HW_SRQ (0x035): SRQ context in the mailbox, in_mod = SRQN.
    pub(crate) fn cmd_sw2hw_srq(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        let srqn = c.in_mod;
        let log_num = self.fw.init.as_ref().map(|p| p.log_num_srqs).unwrap_or(0);
        let rsvd = self.profile.reserved_srqs();
        self.check_obj_index(srqn, log_num, rsvd, "SRQN")?;
        if self.srqs.contains_key(&srqn) {
            return Err(self.cmd_fail(
                Status::BadResState,
                "§4.7",
                format!("SW2HW_SRQ: SRQ {srqn:#x} is already in hardware ownership"),
            ));
        }
        self.icm_require(Table::Srqc, u64::from(srqn), "SW2HW_SRQ")?;
        self.icm_require(Table::CmptSrq, u64::from(srqn), "SW2HW_SRQ")?;
        let ctx = self.mailbox_in(c, SRQC_SIZE)?;
        let fail = |h: &mut Hca, why: String| {
            Err(h.cmd_fail(
                Status::BadParam,
                "§4.7",
                format!("SW2HW_SRQ {srqn:#x}: {why}"),
            ))
        };
        let state = srqc::STATE.get(&ctx);
        if state != 0 {
            return fail(self, format!("state {state:#x} (must be 0)"));
        }
        let named = srqc::SRQN.get_u32(&ctx);
        if named != srqn {
            return fail(self, format!("context SRQN {named:#x} differs from in_mod"));
        }
        let log_size = srqc::LOG_SIZE.get_u32(&ctx);
        if log_size > u32::from(self.profile.log_max_srq_sz) {
            return fail(
                self,
                format!(
                    "2^{log_size} WQEs exceed the device maximum 2^{}",
                    self.profile.log_max_srq_sz
                ),
            );
        }
        let log_stride = srqc::LOGSTRIDE.get_u32(&ctx) + 4;
        if log_stride < 5 {
            return fail(
                self,
                format!(
                    "WQE stride {} bytes (Linux's minimum is 32)",
                    1 << log_stride
                ),
            );
        }
        if srqc::CQN.get(&ctx) != 0 {
            return fail(
                self,
                "XRC SRQs (a CQN in the context) are not modelled".into(),
            );
        }
        // A basic SRQ belongs to the device's reserved XRC domain: QUERY_DEV_CAP's reserved
        // XRC domains (0x66) on a device with XRC, else 0 (Linux mlx4_ib `mlx4_ib_create_srq`
        // passes `caps.reserved_xrcds`, which `mlx4_dev_cap` zeroes without XRC).
        let xrcd = srqc::XRCD.get(&ctx);
        let reserved = if self.profile.offers(crate::profile::dev_cap_flags::XRC) {
            u64::from(self.profile.rsvd_xrcds)
        } else {
            0
        };
        if xrcd != reserved {
            return fail(
                self,
                format!("XRC domain {xrcd} for a basic SRQ: it must be the device's reserved XRC domain {reserved} (another domain makes an XRC SRQ, which is not modelled)"),
            );
        }
        let page_shift = self.parse_page_shift(srqc::LOG_PAGE_SIZE.get(&ctx), "SW2HW_SRQ")?;
        let mtt_index =
            self.parse_mtt_base(&ctx, (srqc::MTT_BASE_HI, srqc::MTT_BASE_LO), "SW2HW_SRQ")?;
        let srq_bytes = 1u64 << (log_size + log_stride);
        self.check_mtt_range(
            &format!("SW2HW_SRQ {srqn:#x}"),
            mtt_index,
            srq_bytes,
            page_shift,
        );
        let db_rec = srqc::DB_REC_ADDR.get(&ctx);
        if db_rec == 0 || !db_rec.is_multiple_of(4) {
            return fail(
                self,
                format!("doorbell record address {db_rec:#x} is null or not 4-byte aligned"),
            );
        }
        let srq = Srq {
            srqn,
            ctx: ctx.clone(),
            log_size,
            log_stride,
            page_shift,
            mtt_index,
            pd: srqc::PD.get_u32(&ctx),
            db_rec,
            limit: 0,
            counter: 0,
            next: 0,
            limit_events: 0,
        };
        let va = self.icm_addr(Table::Srqc, u64::from(srqn));
        self.icm_write(va, &ctx, "SRQ context")?;
        self.srqs.insert(srqn, srq);
        Ok(None)
    }

    /// HW2SW_SRQ (0x036): op_mod 1 = no mailbox, 0 = context to the output mailbox.
    pub(crate) fn cmd_hw2sw_srq(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0, 1])?;
        let srqn = c.in_mod;
        let Some(srq) = self.srqs.get(&srqn) else {
            return Err(self.srq_missing("HW2SW_SRQ", srqn));
        };
        let ctx = srq.context_now();
        let users: Vec<u32> = self
            .qps
            .values()
            .filter(|q| q.state != crate::qp::QpState::Reset && q.srqn() == Some(srqn))
            .map(|q| q.qpn)
            .collect();
        if !users.is_empty() {
            self.violation(
                "§4.7",
                format!("HW2SW_SRQ {srqn:#x} while QPs {users:x?} (not in RESET) still use it"),
            );
        }
        if c.op_mod == 0 {
            self.mailbox_out(c, &ctx)?;
        }
        self.srqs.remove(&srqn);
        Ok(None)
    }

    /// QUERY_SRQ (0x037): the context, with the armed limit, to the output mailbox.
    pub(crate) fn cmd_query_srq(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        let Some(srq) = self.srqs.get(&c.in_mod) else {
            return Err(self.srq_missing("QUERY_SRQ", c.in_mod));
        };
        let ctx = srq.context_now();
        self.mailbox_out(c, &ctx)?;
        Ok(None)
    }

    /// ARM_SRQ (0x040): in_param = limit watermark, in_mod = SRQN; no mailbox.
    pub(crate) fn cmd_arm_srq(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        let srqn = c.in_mod;
        let Some(srq) = self.srqs.get(&srqn) else {
            return Err(self.srq_missing("ARM_SRQ", srqn));
        };
        let size = 1u64 << srq.log_size;
        if c.in_param >= size {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.7",
                format!(
                    "ARM_SRQ {srqn:#x}: limit {} is not below the {size} WQEs",
                    c.in_param
                ),
            ));
        }
        if let Some(s) = self.srqs.get_mut(&srqn) {
            s.limit = c.in_param as u16;
        }
        let va = self.icm_addr(Table::Srqc, u64::from(srqn));
        let mut lw = [0u8; 2];
        lw.copy_from_slice(&(c.in_param as u16).to_be_bytes());
        let at = srqc::LIMIT_WATERMARK.off as u64;
        self.icm_write(va + at, &lw, "SRQ context")?;
        Ok(None)
    }

    /// WQEs posted to SRQ `srqn` and not yet taken: the doorbell record's count minus the
    /// device's counter (§4.7). None when the record cannot be read.
    fn srq_available(&mut self, srqn: u32) -> Option<u16> {
        let (db, counter, size) = {
            let s = self.srqs.get(&srqn)?;
            (s.db_rec, s.counter, 1u32 << s.log_size)
        };
        let mut rec = [0u8; 4];
        self.dma_read(db, &mut rec, "SRQ doorbell record").ok()?;
        let head = (u32::from_be_bytes(rec) & 0xffff) as u16;
        let posted = head.wrapping_sub(counter);
        if u32::from(posted) >= size {
            self.violation(
                "§4.7",
                format!(
                    "SRQ {srqn:#x}: doorbell record {head} is {posted} WQEs ahead of the device counter {counter}, more than the {size}-entry SRQ holds (one slot stays free)"
                ),
            );
            return None;
        }
        Some(posted)
    }

    /// The SRQ WQE the device takes next, read without consuming it: its index and scatter
    /// list. `Ok(None)` when nothing is posted.
    pub(crate) fn srq_peek(&mut self, srqn: u32) -> Result<Option<(u16, Vec<Sge>)>, WqeError> {
        if !self.srqs.contains_key(&srqn) {
            self.violation(
                "§4.7",
                format!(
                    "a QP takes receives from SRQ {srqn:#x}, which is not in hardware ownership"
                ),
            );
            return Err(werr(
                crate::cq::Syndrome::LocalQpOperation,
                "SRQ not in hardware ownership",
            ));
        }
        match self.srq_available(srqn) {
            Some(0) => return Ok(None),
            Some(_) => {}
            None => {
                return Err(werr(
                    crate::cq::Syndrome::LocalQpOperation,
                    "SRQ doorbell record unreadable or overrun",
                ))
            }
        }
        let Some(s) = self.srqs.get(&srqn) else {
            return Ok(None);
        };
        let (idx, ls, size, mtt, shift) = (
            s.next,
            s.log_stride,
            1u32 << s.log_size,
            s.mtt_index,
            s.page_shift,
        );
        if u32::from(idx) >= size {
            self.violation(
                "§4.7",
                format!("SRQ {srqn:#x}: next_wqe_index {idx} is outside the {size}-entry SRQ"),
            );
            return Err(werr(
                crate::cq::Syndrome::LocalQpOperation,
                "SRQ next_wqe_index out of range",
            ));
        }
        let mut w = vec![0u8; 1 << ls];
        self.mtt_read(
            mtt,
            shift,
            u64::from(idx) << ls,
            &mut w,
            &format!("SRQ {srqn:#x} WQE {idx}"),
        )
        .map_err(|_| {
            werr(
                crate::cq::Syndrome::LocalQpOperation,
                "SRQ WQE fetch failed",
            )
        })?;
        let mut sges = Vec::new();
        for s in w[NEXT_SEG_SIZE..].chunks(seg::data::SIZE) {
            let Data {
                byte_count: bc,
                lkey,
                addr,
            } = Data::parse(s);
            if lkey == INVALID_LKEY {
                break;
            }
            if Data::is_inline(s) {
                return Err(werr(
                    crate::cq::Syndrome::LocalQpOperation,
                    "inline segment in an SRQ WQE",
                ));
            }
            sges.push((lkey, addr, bc));
        }
        Ok(Some((idx, sges)))
    }

    /// Take SRQ WQE `idx` (the one `srq_peek` returned): the counter moves on, the next WQE
    /// is the one its `next_wqe_index` names, and an armed limit fires when the WQEs left
    /// drop below it.
    pub(crate) fn srq_consume(&mut self, srqn: u32, idx: u16) {
        let Some(s) = self.srqs.get(&srqn) else {
            return;
        };
        let (ls, mtt, shift) = (s.log_stride, s.mtt_index, s.page_shift);
        let mut next = [0u8; 4];
        let read = self.mtt_read(
            mtt,
            shift,
            u64::from(idx) << ls,
            &mut next,
            &format!("SRQ {srqn:#x} WQE {idx} next segment"),
        );
        let next_idx = if read.is_ok() {
            srq_wqe::NEXT_WQE_INDEX.get(&next) as u16
        } else {
            idx
        };
        if let Some(s) = self.srqs.get_mut(&srqn) {
            s.counter = s.counter.wrapping_add(1);
            s.next = next_idx;
        }
        let left = self.srq_available(srqn).unwrap_or(0);
        let Some(s) = self.srqs.get_mut(&srqn) else {
            return;
        };
        if s.limit != 0 && left < s.limit {
            s.limit = 0;
            s.limit_events += 1;
            if !self.post_async_event(crate::eq::Event::SrqLimit { srqn }) {
                self.observe(format!(
                    "SRQ {srqn:#x} limit reached with no EQ mapped for the SRQ_LIMIT event"
                ));
            }
        }
    }
}
