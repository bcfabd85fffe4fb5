//! QP commands: RST2INIT, INIT2RTR, RTR2RTS, RTS2RTS, 2ERR, 2RST, QUERY_QP, CONF_SPECIAL_QP
//! (§2.3, §4.3, §4.4).

use crate::be::BeRead;
use crate::hca::Hca;
use crate::hcr::{in_mod, op, CmdResult, Command, Status};
use crate::icm::Table;
use crate::qp::{self, mailbox, off, optpar, qpc, Qp, QpState, ServiceType, QPC_SIZE};

impl Hca {
    pub(crate) fn qp_state(&self, qpn: u32) -> QpState {
        self.qps
            .get(&qpn)
            .map(|q| q.state)
            .unwrap_or(QpState::Reset)
    }

    fn is_special_qpn(&self, qpn: u32) -> bool {
        self.special_qp_base != 0 && qpn >= self.special_qp_base && qpn < self.special_qp_base + 8
    }

    /// A modify-QP command (§4.4): check the current state, merge the context fields this
    /// transition takes, validate, store in ICM, then apply the transition's effects.
    pub(crate) fn cmd_modify_qp(&mut self, c: &Command) -> CmdResult {
        let (from, to): (&[QpState], QpState) = match c.opcode {
            op::RST2INIT_QP => (&[QpState::Reset], QpState::Init),
            op::INIT2RTR_QP => (&[QpState::Init], QpState::Rtr),
            op::RTR2RTS_QP => (&[QpState::Rtr], QpState::Rts),
            op::RTS2RTS_QP => (&[QpState::Rts], QpState::Rts),
            op::ERR_QP => (
                &[
                    QpState::Reset,
                    QpState::Init,
                    QpState::Rtr,
                    QpState::Rts,
                    QpState::Sqe,
                    QpState::Sqd,
                    QpState::Err,
                ],
                QpState::Err,
            ),
            _ => (
                &[
                    QpState::Reset,
                    QpState::Init,
                    QpState::Rtr,
                    QpState::Rts,
                    QpState::Sqe,
                    QpState::Sqd,
                    QpState::Err,
                ],
                QpState::Reset,
            ),
        };
        let qpn = c.in_mod & in_mod::QPN;
        if c.opcode == op::RST_QP {
            // §2.3: 2RST_QP has no mailbox and op_mod 2.
            self.expect_op_mod(c, &[2])?;
        } else {
            self.expect_op_mod(c, &[0])?;
            let extra = if c.opcode == op::RST2INIT_QP {
                !in_mod::QPN & !(1 << 31)
            } else {
                !in_mod::QPN
            };
            if c.in_mod & extra != 0 {
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§2.3",
                    format!(
                        "QP command in_mod {:#x}: bits above the QPN are set",
                        c.in_mod
                    ),
                ));
            }
        }
        let log = self.fw.init.as_ref().map(|p| p.log_num_qps).unwrap_or(0);
        let rsvd = if self.is_special_qpn(qpn) {
            0
        } else {
            self.profile.reserved_qps()
        };
        self.check_obj_index(qpn, log, rsvd, "QPN")?;
        let cur = self.qp_state(qpn);
        if !from.contains(&cur) {
            return Err(self.cmd_fail(
                Status::BadQpState,
                "§4.4",
                format!("QP {qpn:#x}: {} from state {cur:?}", opname(c.opcode)),
            ));
        }
        if c.opcode == op::RST_QP {
            if cur == QpState::Reset {
                // The QP is already in RESET: Linux sends no command for RESET->RESET
                // (mlx4_ib `_mlx4_ib_modify_qp` returns at once, `destroy_qp_common` modifies
                // only a QP not in RESET). The state stays what it is.
                self.violation(
                    "§4.4",
                    format!("2RST of QP {qpn:#x}, which is already in RESET (Linux sends no command for RESET to RESET)"),
                );
            }
            if let Some(q) = self.qps.get_mut(&qpn) {
                *q = Qp::new(qpn);
            }
            return Ok(None);
        }
        let mb = self.mailbox_in(c, mailbox::CONTEXT + QPC_SIZE)?;
        let opt = mailbox::OPTPAR.get_u32(&mb);
        let new = &mb[mailbox::CONTEXT..];
        if opt & !optpar::KNOWN != 0 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.4",
                format!(
                    "QP {qpn:#x}: unknown optpar bits {:#x}",
                    opt & !optpar::KNOWN
                ),
            ));
        }
        let next = qpc::STATE.get_u32(new);
        if next != to as u32 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.4",
                format!(
                    "QP {qpn:#x}: {} carries next-state {next} in the context flags (expected {})",
                    opname(c.opcode),
                    to as u32
                ),
            ));
        }
        let mut ctx = self
            .qps
            .get(&qpn)
            .map(|q| q.ctx.clone())
            .unwrap_or_else(|| vec![0; QPC_SIZE]);
        match c.opcode {
            op::RST2INIT_QP => {
                ctx.copy_from_slice(new);
                qpc::RQ_WQE_COUNTER.set(&mut ctx, 0);
                qpc::SQ_WQE_COUNTER.set(&mut ctx, 0);
            }
            op::INIT2RTR_QP => {
                let st = ServiceType::from_code(qpc::ST.get(&ctx) as u8);
                let connected = matches!(st, Some(ServiceType::Rc | ServiceType::Uc));
                qp::take_init2rtr(&mut ctx, new, connected);
                qp::apply_optpar(&mut ctx, new, opt);
            }
            op::RTR2RTS_QP => {
                qp::take_rtr2rts(&mut ctx, new);
                qp::apply_optpar(&mut ctx, new, opt);
            }
            op::RTS2RTS_QP => qp::apply_optpar(&mut ctx, new, opt),
            _ => {} // 2ERR takes nothing
        }
        if opt & optpar::COUNTER_INDEX != 0 && c.opcode != op::RST2INIT_QP {
            // Linux gives each QP its port's flow counter (or none: then the sink index goes
            // without the optpar bit); the index must name a counter of an HCA that enabled
            // them in INIT_HCA.
            let enabled = self
                .fw
                .init
                .as_ref()
                .is_some_and(|p| p.flags & crate::icm::INIT_HCA_COUNTERS != 0);
            let idx = qpc::pri::COUNTER_INDEX.get_u32(&ctx);
            if !enabled || idx >= self.profile.max_counters {
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§4.4",
                    format!(
                        "QP {qpn:#x}: COUNTER_INDEX {idx} with counters {} ({} counters)",
                        if enabled {
                            "enabled"
                        } else {
                            "not enabled in INIT_HCA"
                        },
                        self.profile.max_counters
                    ),
                ));
            }
        }
        let mut q = self.qps.get(&qpn).cloned().unwrap_or_else(|| Qp::new(qpn));
        q.ctx = ctx;
        if c.opcode == op::RST2INIT_QP {
            self.validate_rst2init(qpn, &mut q)?;
        }
        if c.opcode == op::INIT2RTR_QP {
            self.validate_path(qpn, &q)?;
            q.rq_psn = qpc::NEXT_RCV_PSN.get_u32(&q.ctx);
        }
        if c.opcode == op::RTR2RTS_QP {
            q.sq_psn = qpc::NEXT_SEND_PSN.get_u32(&q.ctx);
        }
        if matches!(c.opcode, op::RTR2RTS_QP | op::RTS2RTS_QP) {
            // The path (port, MTU, P_Key index) may change with optpar; re-check it.
            self.validate_path(qpn, &q)?;
        }
        q.state = to;
        let va = self.icm_addr(Table::Qpc, u64::from(qpn));
        let img = q.context_now();
        self.icm_write(va, &img, "QP context")?;
        self.qps.insert(qpn, q);
        match to {
            QpState::Err => self.qp_flush(qpn),
            QpState::Rts if self.qps.get(&qpn).is_some_and(|q| q.doorbell_pending) => {
                self.sq_run(qpn);
            }
            // RTS2RTS may raise SRA max over an SQ held at a READ/atomic.
            QpState::Rts => self.rc_resume_sq(qpn),
            _ => {}
        }
        Ok(None)
    }

    fn validate_rst2init(&mut self, qpn: u32, q: &mut Qp) -> Result<(), Status> {
        let sec = "§4.4";
        let ctx = q.ctx.clone();
        let Some(st) = q.service_type() else {
            return Err(self.cmd_fail(
                Status::BadParam,
                sec,
                format!(
                    "RST2INIT QP {qpn:#x}: service type {:#x} (0 RC, 1 UC, 3 UD, 7 MLX)",
                    qpc::ST.get(&ctx)
                ),
            ));
        };
        let supported = match st {
            ServiceType::Rc => self.profile.flags & crate::profile::dev_cap_flags::RC != 0,
            ServiceType::Uc => self.profile.flags & crate::profile::dev_cap_flags::UC != 0,
            ServiceType::Ud => self.profile.flags & crate::profile::dev_cap_flags::UD != 0,
            ServiceType::Mlx => self.is_special_qpn(qpn),
        };
        if !supported {
            return Err(self.cmd_fail(Status::BadParam, sec, format!("RST2INIT QP {qpn:#x}: service type {st:?} not supported here (MLX only for the CONF_SPECIAL_QP block)")));
        }
        if qpc::LOCAL_QPN.get_u32(&ctx) != qpn {
            return Err(self.cmd_fail(
                Status::BadParam,
                sec,
                format!(
                    "RST2INIT QP {qpn:#x}: local_qpn field is {:#x}",
                    ctx.be32(off::LOCAL_QPN)
                ),
            ));
        }
        if u64::from(q.pd()) >= 1u64 << self.profile.log_max_pds {
            return Err(self.cmd_fail(
                Status::BadParam,
                sec,
                format!(
                    "RST2INIT QP {qpn:#x}: PD {:#x} beyond the device maximum",
                    q.pd()
                ),
            ));
        }
        if q.sq_log_stride() < 6 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§5.2",
                format!(
                    "RST2INIT QP {qpn:#x}: SQ stride {} bytes (at least one 64-byte WQEBB)",
                    1u32 << q.sq_log_stride()
                ),
            ));
        }
        let srqn = q.srqn();
        // §4.7: the RQ fields of a QP attached to an SRQ are unused.
        let rq_log = if srqn.is_some() { 0 } else { q.rq_log_count() };
        for (what, lc) in [("SQ", q.sq_log_count()), ("RQ", rq_log)] {
            if lc > u32::from(self.profile.log_max_qp_sz) {
                return Err(self.cmd_fail(Status::BadParam, sec, format!("RST2INIT QP {qpn:#x}: {what} of 2^{lc} WQEs exceeds the device maximum 2^{}", self.profile.log_max_qp_sz)));
            }
        }
        if let Some(srqn) = srqn {
            self.check_qp_srq(qpn, srqn)?;
        }
        let uar = q.usr_page();
        self.check_uar_index(uar, "RST2INIT")?;
        q.send_cqn = qpc::CQN_SEND.get_u32(&ctx);
        q.recv_cqn = qpc::CQN_RECV.get_u32(&ctx);
        for (what, cqn) in [("send", q.send_cqn), ("receive", q.recv_cqn)] {
            if !self.cqs.contains_key(&cqn) {
                return Err(self.cmd_fail(
                    Status::BadResource,
                    sec,
                    format!(
                        "RST2INIT QP {qpn:#x}: {what} CQ {cqn:#x} is not in hardware ownership"
                    ),
                ));
            }
        }
        let db = q.db_rec();
        if srqn.is_none() && (db == 0 || !db.is_multiple_of(4)) {
            return Err(self.cmd_fail(Status::BadParam, "§5.6", format!("RST2INIT QP {qpn:#x}: RQ doorbell record address {db:#x} is null or not 4-byte aligned")));
        }
        let esz = u64::from(self.profile.mtt_entry_sz);
        if !q.mtt_base().is_multiple_of(esz) {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.6",
                format!(
                    "RST2INIT QP {qpn:#x}: mtt_base_addr {:#x} is not a multiple of 8",
                    q.mtt_base()
                ),
            ));
        }
        // The buffer holds the SQ and the RQ, or only the SQ on an SRQ (`sq_rq_offsets`).
        let sq_bytes = 1u64 << (q.sq_log_count() + q.sq_log_stride());
        let rq_bytes = match srqn {
            Some(_) => 0,
            None => 1u64 << (q.rq_log_count() + q.rq_log_stride()),
        };
        let wq_bytes = sq_bytes + rq_bytes;
        let mtt_index = q.mtt_base() / esz;
        self.check_mtt_range(
            &format!("RST2INIT QP {qpn:#x}"),
            mtt_index,
            wq_bytes,
            q.page_shift(),
        );
        for t in [
            Table::Qpc,
            Table::Auxc,
            Table::Altc,
            Table::Rdmarc,
            Table::CmptQp,
        ] {
            self.icm_require(t, u64::from(qpn), "RST2INIT")?;
        }
        q.sq_counter = 0;
        q.rq_counter = 0;
        q.doorbell_pending = false;
        q.recv_in_progress = None;
        Ok(())
    }

    fn validate_path(&mut self, qpn: u32, q: &Qp) -> Result<(), Status> {
        let mtu = qpc::MTU.get(&q.ctx) as u8;
        if !(1..=5).contains(&mtu) || mtu > self.profile.max_mtu {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.4",
                format!(
                    "QP {qpn:#x}: path MTU enum {mtu} (1..={})",
                    self.profile.max_mtu
                ),
            ));
        }
        if q.port() > self.profile.num_ports {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.4",
                format!(
                    "QP {qpn:#x}: sched_queue {:#x} names port {} of {}",
                    q.sched_queue(),
                    q.port(),
                    self.profile.num_ports
                ),
            ));
        }
        let connected = matches!(q.service_type(), Some(ServiceType::Rc | ServiceType::Uc));
        // A connected QP's path MTU must fit the port's MTU cap (SET_PORT); UD and MLX QPs
        // carry 4096 whatever the port (Linux), their messages are bounded when sent.
        let cap = self
            .ports
            .get(usize::from(q.port()) - 1)
            .map_or(0, |p| p.mtu_cap);
        if connected && mtu > cap {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.4",
                format!(
                    "QP {qpn:#x}: path MTU enum {mtu} above port {}'s MTU cap {cap} (SET_PORT)",
                    q.port()
                ),
            ));
        }
        if connected && q.rlid() == 0 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.4",
                format!("QP {qpn:#x}: connected QP with remote LID 0"),
            ));
        }
        if usize::from(q.pkey_index()) >= 1usize << self.profile.log_max_pkeys {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.4",
                format!(
                    "QP {qpn:#x}: P_Key index {} beyond the table",
                    q.pkey_index()
                ),
            ));
        }
        Ok(())
    }

    /// QUERY_QP (0x022): the context at mailbox + 8 (§2.3).
    pub(crate) fn cmd_query_qp(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        let qpn = c.in_mod & in_mod::QPN;
        let log = self.fw.init.as_ref().map(|p| p.log_num_qps).unwrap_or(0);
        if u64::from(qpn) >= 1u64 << log || c.in_mod & !in_mod::QPN != 0 {
            return Err(self.cmd_fail(
                Status::BadIndex,
                "§4.4",
                format!("QUERY_QP of QPN {:#x} beyond the QP table", c.in_mod),
            ));
        }
        let img = self
            .qps
            .get(&qpn)
            .map(|q| q.context_now())
            .unwrap_or_else(|| Qp::new(qpn).context_now());
        let mut mb = vec![0u8; mailbox::CONTEXT + QPC_SIZE];
        mb[mailbox::CONTEXT..].copy_from_slice(&img);
        self.mailbox_out(c, &mb)?;
        Ok(None)
    }

    /// CONF_SPECIAL_QP (0x023): in_mod = base QPN of the 8-QP special block, 0 = disable
    /// (§4.3; the Linux encoding, decision in docs/model.md).
    pub(crate) fn cmd_conf_special_qp(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        let base = c.in_mod;
        let log = self.fw.init.as_ref().map(|p| p.log_num_qps).unwrap_or(0);
        if base != 0
            && (!base.is_multiple_of(8)
                || base < self.profile.reserved_qps()
                || u64::from(base) + 8 > 1u64 << log)
        {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§4.3",
                format!("CONF_SPECIAL_QP base {base:#x}: must be 8-aligned, above the {} reserved QPs and inside the QP table", self.profile.reserved_qps()),
            ));
        }
        self.special_qp_base = base;
        Ok(None)
    }
}

fn opname(op: u16) -> &'static str {
    match op {
        op::RST2INIT_QP => "RST2INIT",
        op::INIT2RTR_QP => "INIT2RTR",
        op::RTR2RTS_QP => "RTR2RTS",
        op::RTS2RTS_QP => "RTS2RTS",
        op::ERR_QP => "2ERR",
        _ => "2RST",
    }
}
