//! Behaviour recorder: what a driver does on the card, per HCA, as a set of comparable
//! observations (docs/model.md, "Behaviour trace"). Three places feed it: the HCR dispatch
//! (every command, with the input mailbox the model read, decoded field by field), WQE
//! execution (send WQEs after a doorbell or from BlueFlame, receive WQEs as they are taken)
//! and the UAR/BlueFlame stores. Values are grouped so that
//! two drivers doing the same thing produce the same lines: flags and enumerations exactly,
//! log sizes as `log=N` (compared as a range, see `conformance`), page sizes as `page=4k` or
//! `page=large`, addresses, keys and object
//! numbers as a shape (`zero`/`set`) or not at all. Bits of a mailbox that no named field
//! covers are recorded raw (`field=dw@0xOFF bits=0x...`), so nothing a driver sets goes
//! unseen.

use std::collections::BTreeSet;

use crate::be;
use crate::hca::Hca;
use crate::hcr::{op, CmdResult, Command};
use crate::qp::{mailbox, optpar, qpc, ServiceType};
use crate::seg::{ctrl, data, datagram};
use crate::wqe::send_op;

/// The recorder of one HCA. Off unless the fabric turns it on (`Fabric::set_trace`).
#[derive(Clone, Debug, Default)]
pub struct Trace {
    pub enabled: bool,
    obs: BTreeSet<String>,
    /// Last bring-up/teardown command, for the `order` lines.
    last_phase_cmd: Option<&'static str>,
    /// Input mailbox of the command being executed (copied by `mailbox_in`).
    pub(crate) mailbox: Option<Vec<u8>>,
}

impl Trace {
    pub fn add(&mut self, line: String) {
        if self.enabled {
            self.obs.insert(line);
        }
    }

    /// Record the line `f` builds, formatting it only while recording (hot paths).
    pub fn note(&mut self, f: impl FnOnce() -> String) {
        if self.enabled {
            self.obs.insert(f());
        }
    }

    pub fn lines(&self) -> impl Iterator<Item = &str> {
        self.obs.iter().map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.obs.is_empty()
    }

    /// The trace file format: one observation per line, sorted, deduplicated.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for l in &self.obs {
            s.push_str(l);
            s.push('\n');
        }
        s
    }
}

/// Command name by opcode (§2.3).
pub fn known_opname(opcode: u16) -> Option<&'static str> {
    Some(match opcode {
        op::QUERY_DEV_CAP => "QUERY_DEV_CAP",
        op::QUERY_FW => "QUERY_FW",
        op::QUERY_ADAPTER => "QUERY_ADAPTER",
        op::INIT_HCA => "INIT_HCA",
        op::CLOSE_HCA => "CLOSE_HCA",
        op::INIT_PORT => "INIT_PORT",
        op::CLOSE_PORT => "CLOSE_PORT",
        op::SET_PORT => "SET_PORT",
        op::SW2HW_MPT => "SW2HW_MPT",
        op::QUERY_MPT => "QUERY_MPT",
        op::HW2SW_MPT => "HW2SW_MPT",
        op::WRITE_MTT => "WRITE_MTT",
        op::MAP_EQ => "MAP_EQ",
        op::SW2HW_EQ => "SW2HW_EQ",
        op::HW2SW_EQ => "HW2SW_EQ",
        op::QUERY_EQ => "QUERY_EQ",
        op::SW2HW_CQ => "SW2HW_CQ",
        op::HW2SW_CQ => "HW2SW_CQ",
        op::QUERY_CQ => "QUERY_CQ",
        op::MODIFY_CQ => "MODIFY_CQ",
        op::QUERY_HCA => "QUERY_HCA",
        op::RST2INIT_QP => "RST2INIT_QP",
        op::INIT2RTR_QP => "INIT2RTR_QP",
        op::RTR2RTS_QP => "RTR2RTS_QP",
        op::RTS2RTS_QP => "RTS2RTS_QP",
        op::ERR_QP => "2ERR_QP",
        op::RST_QP => "2RST_QP",
        op::QUERY_QP => "QUERY_QP",
        op::CONF_SPECIAL_QP => "CONF_SPECIAL_QP",
        op::MAD_IFC => "MAD_IFC",
        op::DIAG_RPRT => "DIAG_RPRT",
        op::NOP => "NOP",
        op::MOD_STAT_CFG => "MOD_STAT_CFG",
        op::QUERY_PORT => "QUERY_PORT",
        op::RUN_FW => "RUN_FW",
        op::UNMAP_ICM => "UNMAP_ICM",
        op::MAP_ICM => "MAP_ICM",
        op::UNMAP_ICM_AUX => "UNMAP_ICM_AUX",
        op::MAP_ICM_AUX => "MAP_ICM_AUX",
        op::SET_ICM_SIZE => "SET_ICM_SIZE",
        op::UNMAP_FA => "UNMAP_FA",
        op::MAP_FA => "MAP_FA",
        op::QUERY_IF_STAT => "QUERY_IF_STAT",
        op::QUERY_FUNC => "QUERY_FUNC",
        _ => return None,
    })
}

/// Command name by opcode, `op_0xNNN` for one without a name.
pub fn opname(opcode: u16) -> String {
    known_opname(opcode).map_or_else(|| format!("op_{opcode:#05x}"), str::to_string)
}

/// How a field's value is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// The value itself (flags, enumerations, small constants).
    Exact,
    /// Every set bit separately (`field=NAME.bitN`), so a missing bit shows as such.
    Bits,
    /// A log2 size: `log=N`, compared as a range.
    Log,
    /// A count or size in bytes: recorded as the log2 rounded up, compared as a range.
    Size,
    /// Address, key or index: only `zero` or `set`.
    Shape,
    /// A page size given as log2 with 4 KiB at this value: `page=4k` or `page=large`. Which
    /// one Linux picks depends on how physically contiguous its pinned buffers happen to be,
    /// so the size itself is not comparable between runs.
    Page(u32),
    /// Not recorded (but counted as known, so its bits are not reported raw).
    Skip,
}

/// A named field of a mailbox image and how its value is recorded. The offsets and bits are
/// the model's own definitions (`be::Field` constants of the context modules, which the
/// command handlers read with), so the trace decodes exactly what the model acts on.
#[derive(Clone, Copy, Debug)]
struct Field {
    name: &'static str,
    at: be::Field,
    kind: Kind,
}

const fn f(name: &'static str, at: be::Field, kind: Kind) -> Field {
    Field { name, at, kind }
}

use Kind::*;

/// INIT_HCA input mailbox (§2.6).
const INIT_HCA_FIELDS: &[Field] = {
    use crate::icm::init_hca::*;
    &[
        f("version", VERSION, Exact),
        f("flags", FLAGS, Bits),
        f("qpc_base", QPC_BASE, Skip),
        f("log_num_qps", LOG_NUM_QPS, Log),
        f("srqc_base", SRQC_BASE, Skip),
        f("log_num_srqs", LOG_NUM_SRQS, Log),
        f("cqc_base", CQC_BASE, Skip),
        f("log_num_cqs", LOG_NUM_CQS, Log),
        f("altc_base", ALTC_BASE, Skip),
        f("auxc_base", AUXC_BASE, Skip),
        f("eqc_base", EQC_BASE, Skip),
        f("log_num_eqs", LOG_NUM_EQS, Log),
        f("rdmarc_base", RDMARC_BASE, Skip),
        f("log_rd_per_qp", LOG_RD_PER_QP, Log),
        f("mc_base", MC_BASE, Skip),
        f("log_mc_entry_sz", LOG_MC_ENTRY_SZ, Log),
        f("log_mc_table_sz", LOG_MC_TABLE_SZ, Log),
        f("dmpt_base", DMPT_BASE, Skip),
        f("log_num_mpts", LOG_NUM_MPTS, Log),
        f("mtt_base", MTT_BASE, Skip),
        f("cmpt_base", CMPT_BASE, Skip),
        f("log_uar_sz", LOG_UAR_SZ, Log),
        f("uar_page_sz", UAR_PAGE_SZ, Exact),
        f("flags2", FLAGS2, Bits),
        f("eqe_64b", EQE_64B, Exact),
        f("cqe_64b", CQE_64B, Exact),
        f("eqe_cqe_stride", EQE_CQE_STRIDE, Exact),
        f("num_sys_eqs", NUM_SYS_EQS, Size),
        f("log_mc_hash_sz", LOG_MC_HASH_SZ, Log),
        f("uc_steering", UC_STEERING, Bits),
        f("mw", MW, Bits),
    ]
};

/// EQ context (§4.1).
const EQC_FIELDS: &[Field] = {
    use crate::eq::eqc::*;
    &[
        f("status", STATUS, Exact),
        f("state", STATE, Exact),
        f("page_offset", PAGE_OFFSET, Exact),
        f("log_eq_size", LOG_EQ_SIZE, Log),
        f("eq_period", EQ_PERIOD, Exact),
        f("eq_max_count", EQ_MAX_COUNT, Exact),
        f("intr", INTR, Skip),
        f("log_page_size", LOG_PAGE_SIZE, Page(0)),
        f("mtt_base_hi", MTT_BASE_HI, Skip),
        f("mtt_base_lo", MTT_BASE_LO, Skip),
        f("consumer_index", CONSUMER_INDEX, Shape),
        f("producer_index", PRODUCER_INDEX, Shape),
    ]
};

/// CQ context (§4.2).
const CQC_FIELDS: &[Field] = {
    use crate::cq::cqc::*;
    &[
        f("status", STATUS, Exact),
        f("state", STATE, Exact),
        f("collapsed", COLLAPSED, Exact),
        f("page_offset", PAGE_OFFSET, Exact),
        f("log_cq_size", LOG_CQ_SIZE, Log),
        f("uar", UAR, Skip),
        f("cq_period", CQ_PERIOD, Exact),
        f("cq_max_count", CQ_MAX_COUNT, Exact),
        f("comp_eqn", COMP_EQN, Skip),
        f("log_page_size", LOG_PAGE_SIZE, Page(0)),
        f("mtt_base_hi", MTT_BASE_HI, Skip),
        f("mtt_base_lo", MTT_BASE_LO, Skip),
        f("consumer_index", CONSUMER_INDEX, Shape),
        f("producer_index", PRODUCER_INDEX, Shape),
        f("db_rec_addr", DB_REC_ADDR, Shape),
    ]
};

/// MODIFY_CQ op_mod 1 (moderation): the two CQ context fields it takes.
const CQ_MODERATION_FIELDS: &[Field] = {
    use crate::cq::cqc::*;
    &[
        f("cq_period", CQ_PERIOD, Exact),
        f("cq_max_count", CQ_MAX_COUNT, Exact),
    ]
};

/// dMPT entry (§4.5), plus the lkey word SW2HW_MPT does not use.
const MPT_FIELDS: &[Field] = {
    use crate::mr::mpt::*;
    &[
        f("flags", FLAGS, Bits),
        f("key_index", KEY_INDEX, Skip),
        f("key_tag", KEY_TAG, Shape),
        f("pd", PD, Skip),
        f("start", START, Skip),
        f("length", LENGTH, Size),
        f("lkey", LKEY, Shape),
        f("mtt_addr", MTT_ADDR, Skip),
        f("mtt_sz", MTT_SZ, Size),
        f("entity_size", ENTITY_SIZE, Page(12)),
        f("first_byte_offset", FIRST_BYTE_OFFSET, Exact),
    ]
};

/// Modify-QP mailbox: optpar, then the QP context at +8 (§4.4, `qp::qpc`).
const fn q(name: &'static str, at: be::Field, kind: Kind) -> Field {
    f(name, at.at(mailbox::CONTEXT), kind)
}
const QPC_FIELDS: &[Field] = {
    use crate::qp::qpc::*;
    &[
        f("optpar", mailbox::OPTPAR, Bits),
        q("state", STATE, Exact),
        q("st", ST, Exact),
        q("pm_state", PM_STATE, Exact),
        q("pd", PD, Skip),
        q("mtu", MTU, Exact),
        q("log_msg_max", LOG_MSG_MAX, Log),
        q("log_rq_size", LOG_RQ_SIZE, Log),
        q("log_rq_stride", LOG_RQ_STRIDE, Log),
        q("log_sq_size", LOG_SQ_SIZE, Log),
        q("log_sq_stride", LOG_SQ_STRIDE, Log),
        q("rlkey", RLKEY, Exact),
        q("usr_page", USR_PAGE, Skip),
        q("local_qpn", LOCAL_QPN, Skip),
        q("remote_qpn", REMOTE_QPN, Skip),
        q("path.pkey_index", pri::PKEY_INDEX, Shape),
        q("path.counter_index", pri::COUNTER_INDEX, Exact),
        q("path.grh", pri::GRH, Exact),
        q("path.src_path_bits", pri::SRC_PATH_BITS, Exact),
        q("path.rlid", pri::RLID, Skip),
        q("path.ackto", pri::ACKTO, Exact),
        q("path.sched_queue", pri::SCHED_QUEUE, Exact),
        q("params1.sra_max", SRA_MAX, Exact),
        q("params1.retry_count", RETRY_COUNT, Exact),
        q("params1.rnr_retry", RNR_RETRY, Exact),
        q("next_send_psn", NEXT_SEND_PSN, Skip),
        q("cqn_send", CQN_SEND, Skip),
        q("params2.rra_max", RRA_MAX, Exact),
        q("params2.rre", RRE, Exact),
        q("params2.rwe", RWE, Exact),
        q("params2.rae", RAE, Exact),
        q("min_rnr_timer", MIN_RNR_TIMER, Exact),
        q("next_rcv_psn", NEXT_RCV_PSN, Skip),
        q("cqn_recv", CQN_RECV, Skip),
        q("db_rec_addr", DB_REC_ADDR, Shape),
        q("qkey", QKEY, Shape),
        q("srqn", SRQN, Skip),
        q("rq_wqe_counter", RQ_WQE_COUNTER, Shape),
        q("sq_wqe_counter", SQ_WQE_COUNTER, Shape),
        q("log_page_size", LOG_PAGE_SIZE, Page(0)),
        q("mtt_base_hi", MTT_BASE_HI, Skip),
        q("mtt_base_lo", MTT_BASE_LO, Skip),
    ]
};

/// SET_PORT (IB) mailbox (§6.4), as `cmd_set_port` reads it.
const SET_PORT_FIELDS: &[Field] = {
    use crate::cmd::port::set_port::*;
    &[
        f("change_flags", CHANGE_FLAGS, Bits),
        f("mtu_cap", MTU_CAP, Exact),
        f("vl_cap", VL_CAP, Exact),
        f("capability_mask", CAPABILITY_MASK, Bits),
        f("pkey_table_size", PKEY_TABLE_SIZE, Exact),
    ]
};

/// MOD_STAT_CFG (op_mod 0) mailbox (§2.3).
const MOD_STAT_CFG_FIELDS: &[Field] = {
    use crate::cmd::fw::mod_stat_cfg::*;
    &[
        f("pg_sz_m", PG_SZ_M, Exact),
        f("log_pg_sz", LOG_PG_SZ, Exact),
    ]
};

/// One entry of MAP_FA / MAP_ICM_AUX / MAP_ICM (§3.3).
const MAP_ENTRY_FIELDS: &[Field] = {
    use crate::cmd::fw::map_entry::*;
    &[
        f("va", VA, Shape),
        f("pa", PA, Skip),
        f("log_chunk", LOG_CHUNK, Log),
    ]
};

/// MAD_IFC: the MAD header (IBA 13.4.2), as `cmd_mad_ifc` reads it.
const MAD_FIELDS: &[Field] = {
    use crate::mad::hdr::*;
    &[
        f("base_version", BASE_VERSION, Exact),
        f("mgmt_class", MGMT_CLASS, Exact),
        f("class_version", CLASS_VERSION, Exact),
        f("method", METHOD, Exact),
        f("attr_id", ATTR_ID, Exact),
        f("attr_mod", ATTR_MOD, Exact),
    ]
};

fn log2_ceil(v: u64) -> u32 {
    if v <= 1 {
        0
    } else {
        64 - (v - 1).leading_zeros()
    }
}

/// Decode `img` with `fields` into `out` lines prefixed by `prefix`; bits no field covers are
/// reported per dword (`dw@0xOFF`), relative to the start of the image.
fn decode(prefix: &str, img: &[u8], fields: &[Field], out: &mut Vec<String>) {
    let mut covered = vec![0u8; img.len()];
    for fd in fields {
        let at = fd.at;
        let m = at.mask() << at.shift;
        for k in 0..at.bytes {
            let byte_mask = (m >> (8 * (at.bytes - 1 - k))) as u8;
            if let Some(c) = covered.get_mut(at.off + k) {
                *c |= byte_mask;
            }
        }
        let v = at.get(img);
        match fd.kind {
            Exact => out.push(format!("{prefix} field={} value={v:#x}", fd.name)),
            Bits => {
                for bit in 0..at.width {
                    if v & (1 << bit) != 0 {
                        out.push(format!(
                            "{prefix} field={}.bit{} value=1",
                            fd.name,
                            bit + at.shift
                        ));
                    }
                }
            }
            Log => out.push(format!("{prefix} field={} log={v}", fd.name)),
            Size => out.push(format!("{prefix} field={} log={}", fd.name, log2_ceil(v))),
            Page(base) => out.push(format!(
                "{prefix} field={} page={}",
                fd.name,
                if v <= u64::from(base) { "4k" } else { "large" }
            )),
            Shape => out.push(format!(
                "{prefix} field={} shape={}",
                fd.name,
                if v == 0 { "zero" } else { "set" }
            )),
            Skip => {}
        }
    }
    for d in (0..img.len()).step_by(4) {
        let mut raw = 0u32;
        for k in 0..4 {
            let b =
                img.get(d + k).copied().unwrap_or(0) & !covered.get(d + k).copied().unwrap_or(0xff);
            raw = (raw << 8) | u32::from(b);
        }
        if raw != 0 {
            out.push(format!("{prefix} field=dw@{d:#05x} bits={raw:#010x}"));
        }
    }
}

/// Transport name of a QP service type.
fn transport(st: Option<ServiceType>) -> &'static str {
    match st {
        Some(ServiceType::Rc) => "RC",
        Some(ServiceType::Uc) => "UC",
        Some(ServiceType::Ud) => "UD",
        Some(ServiceType::Mlx) => "MLX",
        None => "unknown",
    }
}

/// Commands whose order is recorded (bring-up and teardown; not the per-object ones).
fn is_phase_command(opcode: u16) -> bool {
    !matches!(
        opcode,
        op::SW2HW_MPT
            | op::QUERY_MPT
            | op::HW2SW_MPT
            | op::WRITE_MTT
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
            | op::MAD_IFC
            | op::NOP
    )
}

/// The shape of a command's input modifier.
fn in_mod_shape(c: &Command) -> String {
    let v = c.in_mod;
    match c.opcode {
        op::SW2HW_MPT
        | op::QUERY_MPT
        | op::HW2SW_MPT
        | op::SW2HW_CQ
        | op::HW2SW_CQ
        | op::QUERY_CQ
        | op::MODIFY_CQ
        | op::SW2HW_EQ
        | op::HW2SW_EQ
        | op::QUERY_EQ
        | op::RST2INIT_QP
        | op::INIT2RTR_QP
        | op::RTR2RTS_QP
        | op::RTS2RTS_QP
        | op::ERR_QP
        | op::RST_QP
        | op::QUERY_QP
        | op::CONF_SPECIAL_QP => {
            let high = v >> 24;
            if v & 0xff_ffff == 0 {
                format!("zero|{high:#x}")
            } else {
                format!("index|{high:#x}")
            }
        }
        op::MAP_EQ => format!("{}eqn", if v & (1 << 31) != 0 { "unmap|" } else { "" }),
        op::MAP_FA | op::MAP_ICM | op::MAP_ICM_AUX | op::UNMAP_ICM | op::WRITE_MTT => {
            "count".to_string()
        }
        _ if v <= 0xffff => format!("{v:#x}"),
        _ => "large".to_string(),
    }
}

impl Hca {
    /// Record one executed command (called by the HCR engine after dispatch).
    pub(crate) fn trace_command(&mut self, c: &Command, res: &CmdResult) {
        let mailbox = self.trace.mailbox.take();
        if !self.trace.enabled {
            return;
        }
        let name = opname(c.opcode);
        let mut out = Vec::new();
        out.push(format!(
            "cmd {name} op_mod={:#x} in_mod={} mode={}",
            c.op_mod,
            in_mod_shape(c),
            if c.event { "event" } else { "poll" }
        ));
        if let Err(st) = res {
            out.push(format!("cmd {name} op_mod={:#x} status={st:?}", c.op_mod));
        }
        match c.opcode {
            op::MAP_EQ => out.push(format!(
                "cmd MAP_EQ field=event_mask value={:#x}",
                c.in_param
            )),
            op::SET_ICM_SIZE => out.push(format!(
                "cmd SET_ICM_SIZE field=icm_size log={}",
                log2_ceil(c.in_param)
            )),
            op::UNMAP_ICM => out.push(format!(
                "cmd UNMAP_ICM field=count log={}",
                log2_ceil(u64::from(c.in_mod))
            )),
            _ => {}
        }
        if let Some(mb) = mailbox {
            self.trace_mailbox(c, &name, &mb, &mut out);
        }
        if is_phase_command(c.opcode) {
            let prev = self.trace.last_phase_cmd.unwrap_or("start");
            let this = known_opname(c.opcode).unwrap_or("other");
            if prev != this {
                out.push(format!("order {prev} -> {this}"));
            }
            self.trace.last_phase_cmd = Some(this);
        }
        for l in out {
            self.trace.add(l);
        }
    }

    fn trace_mailbox(&mut self, c: &Command, name: &str, mb: &[u8], out: &mut Vec<String>) {
        match c.opcode {
            op::INIT_HCA => decode("cmd INIT_HCA", mb, INIT_HCA_FIELDS, out),
            op::SW2HW_EQ => decode("ctx EQC", mb, EQC_FIELDS, out),
            op::SW2HW_CQ => decode("ctx CQC", mb, CQC_FIELDS, out),
            op::MODIFY_CQ => decode("ctx CQC", mb, CQ_MODERATION_FIELDS, out),
            op::SW2HW_MPT => decode("ctx MPT", mb, MPT_FIELDS, out),
            op::SET_PORT => decode("cmd SET_PORT", mb, SET_PORT_FIELDS, out),
            op::MOD_STAT_CFG => decode("cmd MOD_STAT_CFG", mb, MOD_STAT_CFG_FIELDS, out),
            op::MAD_IFC => {
                let head = &mb[..mb.len().min(crate::mad::hdr::LEN)];
                decode(
                    &format!("cmd MAD_IFC op_mod={:#x}", c.op_mod),
                    head,
                    MAD_FIELDS,
                    out,
                );
            }
            op::MAP_FA | op::MAP_ICM_AUX | op::MAP_ICM => {
                for e in mb.chunks(crate::cmd::fw::map_entry::SIZE) {
                    decode(&format!("cmd {name}"), e, MAP_ENTRY_FIELDS, out);
                }
            }
            op::WRITE_MTT => {
                use crate::mr::{mtt, write_mtt};
                let entries = mb.get(write_mtt::ENTRIES..).unwrap_or(&[]);
                let n = entries.len() / mtt::ENTRY_SIZE;
                out.push(format!(
                    "cmd WRITE_MTT field=entries log={}",
                    log2_ceil(n as u64)
                ));
                for e in entries.as_chunks::<{ mtt::ENTRY_SIZE }>().0 {
                    out.push(format!(
                        "cmd WRITE_MTT field=entry.present value={:#x}",
                        mtt::PRESENT.get(e)
                    ));
                    let low = mtt::LOW_BITS.get_in_place(e);
                    if low != 0 {
                        out.push(format!("cmd WRITE_MTT field=entry.low_bits bits={low:#x}"));
                    }
                }
            }
            op::RST2INIT_QP | op::INIT2RTR_QP | op::RTR2RTS_QP | op::RTS2RTS_QP => {
                // The transport comes from the context itself (RST2INIT) or from the QP.
                let qpn = c.in_mod & crate::hcr::in_mod::QPN;
                let st = if c.opcode == op::RST2INIT_QP {
                    ServiceType::from_code(qpc::ST.at(mailbox::CONTEXT).get(mb) as u8)
                } else {
                    self.qps.get(&qpn).and_then(|q| q.service_type())
                };
                let special = if self.special_qp_base != 0
                    && (self.special_qp_base..self.special_qp_base + 8).contains(&qpn)
                {
                    if qpn - self.special_qp_base < 2 {
                        " qp0"
                    } else {
                        " qp1"
                    }
                } else {
                    ""
                };
                let prefix = format!("ctx QPC {}{special} {name}", transport(st));
                decode(&prefix, mb, QPC_FIELDS, out);
                let unknown = mailbox::OPTPAR.get_u32(mb) & !optpar::KNOWN;
                if unknown != 0 {
                    out.push(format!("{prefix} field=optpar_unknown bits={unknown:#x}"));
                }
            }
            _ => {}
        }
    }

    /// Record the shape of a send WQE about to execute (§5.2), `via` = "doorbell"/"blueflame".
    pub(crate) fn trace_wqe(&mut self, qpn: u32, wqe: &[u8], via: &str) {
        if !self.trace.enabled {
            return;
        }
        let st = self.qps.get(&qpn).and_then(|q| q.service_type());
        let t = transport(st);
        let opcode = ctrl::OPCODE.get(wqe) as u8;
        // Bits of dword 0 no field names (the owner bit and opcode are taken; the WQE
        // counter of a BlueFlame WQE is recorded nowhere).
        let named = [ctrl::OWNER, ctrl::BF_WQE_COUNTER, ctrl::OPCODE]
            .iter()
            .fold(0, |m, f| m | f.place(f.mask()));
        let d0_extra = be::Field::whole(0, 4).get(wqe) & !named;
        let fence = ctrl::FENCE.get(wqe);
        let flags = ctrl::FLAGS.get(wqe);
        let ds = ctrl::DS.get(wqe) as usize;
        let mut segs = vec!["ctrl".to_string()];
        let mut at = ctrl::SIZE;
        match (st, opcode) {
            (Some(ServiceType::Mlx), _) => {}
            (Some(ServiceType::Ud), _) => {
                let d = wqe.get(at..).unwrap_or(&[]);
                segs.push(format!(
                    "ud(port={},grh={},sl={})",
                    datagram::PORT.get(d),
                    datagram::GRH.get(d),
                    datagram::SL.get(d)
                ));
                at += datagram::SIZE;
            }
            (_, send_op::RDMA_WRITE | send_op::RDMA_WRITE_IMM | send_op::RDMA_READ) => {
                segs.push("raddr".into());
                at += crate::seg::raddr::SIZE;
            }
            (_, send_op::ATOMIC_CS | send_op::ATOMIC_FA) => {
                segs.push("raddr".into());
                segs.push("atomic".into());
                at += crate::seg::raddr::SIZE + crate::seg::atomic::SIZE;
            }
            _ => {}
        }
        let end = (ds * 16).min(wqe.len());
        while at + data::INLINE_HEADER <= end {
            let s = &wqe[at..];
            if data::INLINE.get_bool(s) {
                let len = data::INLINE_LEN.get(s) as usize;
                if t == "MLX" {
                    segs.push(format!("inline({len})"));
                } else {
                    segs.push("inline".into());
                }
                at += (data::INLINE_HEADER + len).div_ceil(data::SIZE) * data::SIZE;
            } else {
                segs.push(if data::INLINE_LEN.get(s) == 0 {
                    "data(0)".into()
                } else {
                    "data".into()
                });
                at += data::SIZE;
            }
        }
        let opname = match opcode {
            send_op::NOP => "NOP".to_string(),
            send_op::RDMA_WRITE => "RDMA_WRITE".into(),
            send_op::RDMA_WRITE_IMM => "RDMA_WRITE_IMM".into(),
            send_op::SEND => "SEND".into(),
            send_op::SEND_IMM => "SEND_IMM".into(),
            send_op::RDMA_READ => "RDMA_READ".into(),
            send_op::ATOMIC_CS => "ATOMIC_CS".into(),
            send_op::ATOMIC_FA => "ATOMIC_FA".into(),
            o => format!("op_{o:#x}"),
        };
        let mlx_imm = if t == "MLX" {
            format!(
                " rlid={}",
                if crate::seg::mlx::RLID.get(wqe) == 0 {
                    "zero"
                } else {
                    "set"
                }
            )
        } else {
            String::new()
        };
        self.trace.add(format!(
            "wqe {t} {opname} via={via} ctrl0={d0_extra:#x} fence={fence} flags={flags:#010x}{mlx_imm} segs={}",
            segs.join(",")
        ));
    }

    /// Record the shape of a receive WQE the device takes (§5.6): its scatter entries up to
    /// the terminator (lkey 0x100) or the end of the slot.
    pub(crate) fn trace_rqe(&mut self, qpn: u32, wqe: &[u8]) {
        if !self.trace.enabled {
            return;
        }
        let t = transport(self.qps.get(&qpn).and_then(|q| q.service_type()));
        let mut segs = Vec::new();
        for s in wqe.chunks(data::SIZE) {
            if data::LKEY.get_u32(s) == crate::mr::INVALID_LKEY {
                segs.push("end");
                break;
            }
            segs.push(if data::INLINE_LEN.get(s) == 0 {
                "data(0)"
            } else {
                "data"
            });
        }
        self.trace.add(format!(
            "rqe {t} stride={} segs={}",
            wqe.len(),
            segs.join(",")
        ));
    }
}
