//! ICM commands: SET_ICM_SIZE, MAP_ICM_AUX, UNMAP_ICM_AUX, MAP_ICM, UNMAP_ICM, INIT_HCA,
//! CLOSE_HCA (§2.1, §2.6, §3).

use crate::be::Field;
use crate::hca::{FabricRequest, Hca};
use crate::hcr::{CmdResult, Command, Status};
use crate::icm::{init_hca, HcaParams, Table, PAGE};
use crate::qp::QpState;

/// Aux ICM the model asks for: one 4 KiB page per 16 MiB of ICM, at least one (model choice;
/// the reference only says SET_ICM_SIZE returns the number of aux pages, §2.3).
const ICM_BYTES_PER_AUX_PAGE: u64 = 16 << 20;

impl Hca {
    /// SET_ICM_SIZE (0xFFD): in_param = total ICM bytes; out_param = aux pages needed (§2.3).
    pub(crate) fn cmd_set_icm_size(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        if self.fw.init.is_some() {
            return Err(self.cmd_fail(Status::BadSysState, "§2.1", "SET_ICM_SIZE after INIT_HCA"));
        }
        let size = c.in_param;
        if size == 0 || !size.is_multiple_of(PAGE) {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§3.1",
                format!("SET_ICM_SIZE of {size:#x} bytes (must be a non-zero multiple of 4 KiB)"),
            ));
        }
        if size > self.profile.max_icm_sz {
            return Err(self.cmd_fail(
                Status::ExceedLim,
                "§2.4",
                format!(
                    "SET_ICM_SIZE {size:#x} exceeds max ICM size {:#x}",
                    self.profile.max_icm_sz
                ),
            ));
        }
        let aux = size.div_ceil(ICM_BYTES_PER_AUX_PAGE).max(1);
        self.fw.icm_size = Some(size);
        self.fw.aux_required = aux;
        Ok(Some(aux))
    }

    /// MAP_ICM_AUX (0xFFC): donate aux pages; needs SET_ICM_SIZE first (§10.2).
    pub(crate) fn cmd_map_icm_aux(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        if self.fw.icm_size.is_none() {
            return Err(self.cmd_fail(
                Status::BadSysState,
                "§10.2",
                "MAP_ICM_AUX before SET_ICM_SIZE",
            ));
        }
        if self.fw.init.is_some() {
            return Err(self.cmd_fail(Status::BadSysState, "§2.1", "MAP_ICM_AUX after INIT_HCA"));
        }
        let chunks = self.parse_map_entries(c, "MAP_ICM_AUX")?;
        self.check_not_donated(&chunks, "MAP_ICM_AUX")?;
        self.note_page_va(&chunks, "MAP_ICM_AUX");
        for (_, pa, size) in chunks {
            self.fw.aux.push((pa, size));
            self.fw.donated.insert(pa, size, "ICM aux");
        }
        Ok(None)
    }

    /// UNMAP_ICM_AUX (0xFFB): take the aux pages back (after CLOSE_HCA, §2.2).
    pub(crate) fn cmd_unmap_icm_aux(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        if self.fw.init.is_some() {
            return Err(self.cmd_fail(
                Status::BadSysState,
                "§2.2",
                "UNMAP_ICM_AUX while the HCA is initialised",
            ));
        }
        for (pa, size) in std::mem::take(&mut self.fw.aux) {
            self.fw.donated.remove(pa, size, |v, _| v);
        }
        Ok(None)
    }

    /// MAP_ICM (0xFFA): back ICM VA chunks with host pages (§3.3). The command is atomic:
    /// every entry is checked before any is applied.
    pub(crate) fn cmd_map_icm(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        if self.fw.icm_size.is_none() {
            return Err(self.cmd_fail(Status::BadSysState, "§3.1", "MAP_ICM before SET_ICM_SIZE"));
        }
        // The bound is the device's ICM address space (QUERY_DEV_CAP max_icm_sz), not the
        // size given to SET_ICM_SIZE: Linux maps its EQ context table for all
        // num_phys_eqs (1024 in legacy EQ mode) entries at eqc_base although its profile
        // (and so SET_ICM_SIZE) reserved only min(max_eqs, MAX_MSIX) entries there, and
        // real ConnectX-3s accept that (docs/model.md, changes Linux forced).
        let icm_limit = self.profile.max_icm_sz;
        let chunks = self.parse_map_entries(c, "MAP_ICM")?;
        for (i, &(va, _, size)) in chunks.iter().enumerate() {
            if va % size != 0 {
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§3.3",
                    format!(
                        "MAP_ICM entry {i}: VA {va:#x} is not aligned to its chunk size {size:#x}"
                    ),
                ));
            }
            if va.checked_add(size).is_none_or(|end| end > icm_limit) {
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§3.1",
                    format!("MAP_ICM entry {i}: VA {va:#x}+{size:#x} is beyond the device's ICM space {icm_limit:#x}"),
                ));
            }
            let twice = chunks[..i]
                .iter()
                .any(|c| c.0 < va + size && va < c.0 + c.2);
            if self.icm.any_mapped(va, size) || twice {
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§3.3",
                    format!("MAP_ICM entry {i}: ICM VA range {va:#x}+{size:#x} is already mapped"),
                ));
            }
        }
        self.check_not_donated(&chunks, "MAP_ICM")?;
        for (va, pa, size) in chunks {
            self.icm.insert(va, pa, size);
            self.fw.donated.insert(pa, size, "ICM");
        }
        Ok(None)
    }

    /// UNMAP_ICM (0xFF9): in_param = VA, in_mod = number of 4 KiB pages (§2.3, §3.3).
    pub(crate) fn cmd_unmap_icm(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        let va = c.in_param;
        let n = u64::from(c.in_mod);
        if !va.is_multiple_of(PAGE) || n == 0 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§3.3",
                format!("UNMAP_ICM of {n} pages at VA {va:#x} (VA must be 4 KiB aligned, count non-zero)"),
            ));
        }
        let len = n * PAGE;
        // Linux unmaps whole 256 KiB table chunks (MLX4_TABLE_CHUNK_SIZE) even where it
        // mapped a chunk trimmed to a smaller table, and hardware accepts it: pages of the
        // range that are not mapped are skipped. A range with nothing mapped is refused.
        if !self.icm.any_mapped(va, len) {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§3.3",
                format!("UNMAP_ICM: nothing is mapped in [{va:#x}, +{len:#x})"),
            ));
        }
        if self.fw.init.is_some() {
            let end = va + n * PAGE;
            for (what, a) in self.live_context_addresses() {
                if a >= va && a < end {
                    self.violation(
                        "§3.4",
                        format!("UNMAP_ICM of [{va:#x}, {end:#x}) removes the context of live {what} (ICM VA {a:#x})"),
                    );
                }
            }
        }
        for (pa, l) in self.icm.remove(va, len) {
            self.fw.donated.remove(pa, l, |v, _| v);
        }
        Ok(None)
    }

    /// ICM addresses of the contexts of objects in hardware ownership.
    fn live_context_addresses(&self) -> Vec<(String, u64)> {
        let mut v = Vec::new();
        for &n in self.eqs.keys() {
            v.push((format!("EQ {n}"), self.icm_addr(Table::Eqc, u64::from(n))));
        }
        for &n in self.cqs.keys() {
            v.push((
                format!("CQ {n:#x}"),
                self.icm_addr(Table::Cqc, u64::from(n)),
            ));
        }
        for (&n, _) in self.qps.iter().filter(|(_, q)| q.state != QpState::Reset) {
            v.push((
                format!("QP {n:#x}"),
                self.icm_addr(Table::Qpc, u64::from(n)),
            ));
        }
        for &n in self.mpts.keys() {
            v.push((
                format!("MPT {n:#x}"),
                self.icm_addr(Table::Dmpt, u64::from(n)),
            ));
        }
        v
    }

    /// INIT_HCA (0x007): input mailbox per §2.6.
    pub(crate) fn cmd_init_hca(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        if self.fw.init.is_some() {
            return Err(self.cmd_fail(
                Status::BadSysState,
                "§2.1",
                "INIT_HCA twice (CLOSE_HCA first)",
            ));
        }
        let Some(icm_size) = self.fw.icm_size else {
            return Err(self.cmd_fail(Status::BadSysState, "§2.1", "INIT_HCA before SET_ICM_SIZE"));
        };
        if self.fw.aux_pages() < self.fw.aux_required {
            return Err(self.cmd_fail(
                Status::IcmError,
                "§3.1",
                format!(
                    "INIT_HCA with {} aux pages; SET_ICM_SIZE asked for {}",
                    self.fw.aux_pages(),
                    self.fw.aux_required
                ),
            ));
        }
        let mb = self.mailbox_in(c, init_hca::SIZE)?;
        let version = init_hca::VERSION.get(&mb);
        if version != 2 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§2.6",
                format!("INIT_HCA version {version} (must be 2)"),
            ));
        }
        let base = |f: Field| f.get_in_place(&mb);
        let byte = |f: Field| f.get(&mb) as u8;
        let p = HcaParams {
            flags: init_hca::FLAGS.get_u32(&mb),
            qpc_base: base(init_hca::QPC_BASE),
            log_num_qps: byte(init_hca::LOG_NUM_QPS),
            srqc_base: base(init_hca::SRQC_BASE),
            log_num_srqs: byte(init_hca::LOG_NUM_SRQS),
            cqc_base: base(init_hca::CQC_BASE),
            log_num_cqs: byte(init_hca::LOG_NUM_CQS),
            altc_base: base(init_hca::ALTC_BASE),
            auxc_base: base(init_hca::AUXC_BASE),
            eqc_base: base(init_hca::EQC_BASE),
            log_num_eqs: byte(init_hca::LOG_NUM_EQS),
            rdmarc_base: base(init_hca::RDMARC_BASE),
            log_rd_per_qp: byte(init_hca::LOG_RD_PER_QP),
            mc_base: base(init_hca::MC_BASE),
            log_mc_entry_sz: init_hca::LOG_MC_ENTRY_SZ.get(&mb) as u16,
            log_mc_table_sz: byte(init_hca::LOG_MC_TABLE_SZ),
            dmpt_base: base(init_hca::DMPT_BASE),
            log_num_mpts: byte(init_hca::LOG_NUM_MPTS),
            mtt_base: base(init_hca::MTT_BASE),
            cmpt_base: base(init_hca::CMPT_BASE),
            log_uar_sz: byte(init_hca::LOG_UAR_SZ),
            uar_page_sz: byte(init_hca::UAR_PAGE_SZ),
            flags2: init_hca::FLAGS2.get_u32(&mb),
            eqe_64b: init_hca::EQE_64B.get_bool(&mb),
            cqe_64b: init_hca::CQE_64B.get_bool(&mb),
            eqe_cqe_stride: byte(init_hca::EQE_CQE_STRIDE),
            num_sys_eqs: init_hca::NUM_SYS_EQS.get(&mb) as u16,
            log_mc_hash_sz: init_hca::LOG_MC_HASH_SZ.get(&mb) as u16,
            uc_steering: byte(init_hca::UC_STEERING),
            mw: byte(init_hca::MW),
        };
        self.check_init_hca(&p, icm_size)?;
        self.fw.init = Some(p);
        self.fw.init_mailbox = mb.clone();
        // Every table's reserved entries must be backed: the firmware owns and writes them
        // (§3.4; both Linux and Nautilus map them before INIT_HCA).
        if let Err(st) = self.check_reserved_icm() {
            self.fw.init = None;
            return Err(st);
        }
        // The firmware now uses the aux area.
        // The firmware uses the aux pages it asked for.
        let need = self.fw.aux_required as usize;
        let pages: Vec<u64> = self
            .fw
            .aux
            .iter()
            .flat_map(|&(pa, size)| (0..size / PAGE).map(move |k| pa + k * PAGE))
            .take(need)
            .collect();
        for (i, pa) in pages.iter().enumerate() {
            let img: Vec<u8> = (0..PAGE).map(|j| (0xa0 ^ (i as u64) ^ j) as u8).collect();
            if self.dma_write(*pa, &img, "ICM aux").is_err() {
                self.fw.init = None;
                return Err(Status::InternalErr);
            }
        }
        Ok(None)
    }

    fn check_init_hca(&mut self, p: &HcaParams, icm_size: u64) -> Result<(), Status> {
        let pr = self.profile.clone();
        self.check_init_hca_offers(p)?;
        let mut logs = vec![
            ("QPs", p.log_num_qps, pr.log_max_qps),
            ("SRQs", p.log_num_srqs, pr.log_max_srqs),
            ("CQs", p.log_num_cqs, pr.log_max_cqs),
            ("MPTs", p.log_num_mpts, pr.log_max_mpts),
        ];
        if !p.sys_eqs() {
            logs.push(("EQs", p.log_num_eqs, pr.log_max_eqs));
        }
        for (what, v, max) in logs {
            if v > max {
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§2.6",
                    format!("INIT_HCA log number of {what} {v} exceeds the device maximum {max} (QUERY_DEV_CAP)"),
                ));
            }
        }
        if p.log_rd_per_qp > 7 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§2.6",
                format!(
                    "INIT_HCA log RDMARC entries per QP {} (at most 7)",
                    p.log_rd_per_qp
                ),
            ));
        }
        if p.uar_page_sz != 0 {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§2.6",
                format!(
                    "INIT_HCA UAR page size {} (0x12B); the model supports 4 KiB UAR pages (0)",
                    p.uar_page_sz
                ),
            ));
        }
        let log_uars = pr.num_uars().trailing_zeros() as u8;
        if p.log_uar_sz > log_uars {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§2.6",
                format!(
                    "INIT_HCA log UAR size {} exceeds the {} UAR pages of BAR2",
                    p.log_uar_sz,
                    pr.num_uars()
                ),
            ));
        }
        if p.flags & crate::icm::INIT_HCA_COUNTERS != 0
            && pr.flags & crate::profile::dev_cap_flags::COUNTERS == 0
        {
            return Err(self.cmd_fail(
                Status::BadParam,
                "§2.6",
                "INIT_HCA enables flow counters (flags bit 4) but QUERY_DEV_CAP reports none",
            ));
        }
        if p.flags & crate::icm::INIT_HCA_BIG_ENDIAN != 0 {
            self.violation(
                "§2.6",
                "INIT_HCA says the host is big-endian; the model's hosts are little-endian (x86)",
            );
        }
        let nq = 1u64 << p.log_num_qps;
        let cmpt = u64::from(pr.cmpt_entry_sz);
        let mut tables: Vec<(&str, u64, u64)> = vec![
            ("QPC", p.qpc_base, nq * u64::from(pr.qpc_entry_sz)),
            ("AUXC", p.auxc_base, nq * u64::from(pr.auxc_entry_sz)),
            ("ALTC", p.altc_base, nq * u64::from(pr.altc_entry_sz)),
            (
                "RDMARC",
                p.rdmarc_base,
                (nq * u64::from(pr.rdmarc_entry_sz)) << p.log_rd_per_qp,
            ),
            (
                "SRQC",
                p.srqc_base,
                (1u64 << p.log_num_srqs) * u64::from(pr.srq_entry_sz),
            ),
            (
                "CQC",
                p.cqc_base,
                (1u64 << p.log_num_cqs) * u64::from(pr.cqc_entry_sz),
            ),
            ("EQC", p.eqc_base, p.num_eqs() * u64::from(pr.eqc_entry_sz)),
            (
                "dMPT",
                p.dmpt_base,
                (1u64 << p.log_num_mpts) * u64::from(pr.dmpt_entry_sz),
            ),
            // cMPT: four regions of 2^24 entries (§3.2).
            ("cMPT", p.cmpt_base, 4 * (cmpt << 24)),
            (
                "MTT",
                p.mtt_base,
                u64::from(pr.reserved_mtts()) * u64::from(pr.mtt_entry_sz),
            ),
        ];
        if p.log_mc_entry_sz != 0 {
            tables.push((
                "MCG",
                p.mc_base,
                (1u64 << p.log_mc_entry_sz.min(20)) << p.log_mc_table_sz.min(30),
            ));
        }
        for &(name, base, size) in &tables {
            if base % PAGE != 0 {
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§2.6",
                    format!("INIT_HCA {name} base {base:#x} is not 4 KiB aligned"),
                ));
            }
            if base
                .checked_add(size.max(PAGE))
                .is_none_or(|e| e > icm_size)
            {
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§3.2",
                    format!("INIT_HCA {name} table [{base:#x}, +{size:#x}) exceeds the ICM size {icm_size:#x}"),
                ));
            }
        }
        for (i, a) in tables.iter().enumerate() {
            for b in &tables[i + 1..] {
                let (a0, a1) = (a.1, a.1 + a.2.max(PAGE));
                let (b0, b1) = (b.1, b.1 + b.2.max(PAGE));
                if a0 < b1 && b0 < a1 {
                    return Err(self.cmd_fail(
                        Status::BadParam,
                        "§3.2",
                        format!("INIT_HCA tables {} [{a0:#x}, {a1:#x}) and {} [{b0:#x}, {b1:#x}) overlap", a.0, b.0),
                    ));
                }
            }
        }
        Ok(())
    }

    /// What INIT_HCA enables must be what QUERY_DEV_CAP offered (§2.4, §2.6): a card refuses
    /// the rest, which is how a driver that enables a capability without checking it fails
    /// on a card without it. Linux's `mlx4_INIT_HCA` enables each only when offered.
    fn check_init_hca_offers(&mut self, p: &HcaParams) -> Result<(), Status> {
        use crate::icm::*;
        use crate::profile::dev_cap_flags as f;
        let pr = self.profile.clone();
        let c = pr.caps2;
        let stride_ok =
            |v: u8| v == 0 || ((1..=3).contains(&(v >> 4)) && (1..=3).contains(&(v & 0xf)));
        let checks: [(bool, bool, &str); 10] = [
            (
                p.eqe_64b,
                pr.offers(f::EQE_64B),
                "64-byte EQEs (0x58 bit 29)",
            ),
            (
                p.cqe_64b,
                pr.offers(f::CQE_64B),
                "64-byte CQEs (0x58 bit 30)",
            ),
            (
                p.eqe_cqe_stride != 0,
                c.cqe_stride && c.eqe_stride && stride_ok(p.eqe_cqe_stride),
                "an EQE/CQE stride (0x5B)",
            ),
            (
                p.flags2 & INIT_HCA_RECOVERABLE_ERRORS != 0,
                c.recoverable_error_event,
                "recoverable-error events (0x18 bit 31)",
            ),
            (
                p.flags & INIT_HCA_IPOIB_CSUM != 0,
                pr.offers(f::IPOIB_CSUM),
                "IPoIB checksums (flags bit 3)",
            ),
            (
                p.flags & INIT_HCA_DMFS != 0,
                c.flow_steering,
                "device-managed flow steering (flags bit 6)",
            ),
            (
                p.uc_steering & INIT_HCA_B0_STEERING != 0,
                pr.offers(f::VEP_UC_STEER) && pr.offers(f::VEP_MC_STEER),
                "B0 steering (0xD8 bit 3)",
            ),
            (
                p.mw & INIT_HCA_MW_ENABLE != 0,
                pr.offers(f::MEM_WINDOW) || pr.bmme_flags & crate::profile::bmme::TYPE_2_WIN != 0,
                "memory windows (0xF8 bit 7)",
            ),
            (
                p.sys_eqs() || p.num_sys_eqs != 0,
                pr.num_sys_eqs != 0 && p.sys_eqs() && (1..=pr.num_sys_eqs).contains(&p.num_sys_eqs),
                "SYS_EQS (log EQs 0x1F with num_sys_eqs at 0x8A)",
            ),
            (
                p.eqe_cqe_stride != 0 && (p.eqe_64b || p.cqe_64b),
                false,
                "a stride together with 64-byte entries (Linux clears one for the other)",
            ),
        ];
        for (asked, offered, what) in checks {
            if asked && !offered {
                return Err(self.cmd_fail(
                    Status::BadParam,
                    "§2.6",
                    format!("INIT_HCA enables {what}, which QUERY_DEV_CAP does not offer in this form (profile {})", pr.name),
                ));
            }
        }
        Ok(())
    }

    fn check_reserved_icm(&mut self) -> Result<(), Status> {
        let pr = self.profile.clone();
        let rq = u64::from(pr.reserved_qps());
        let checks = [
            (Table::Qpc, rq),
            (Table::Auxc, rq),
            (Table::Altc, rq),
            (Table::Rdmarc, rq),
            (Table::CmptQp, rq),
            (Table::Cqc, u64::from(pr.reserved_cqs())),
            (Table::CmptCq, u64::from(pr.reserved_cqs())),
            (Table::Srqc, u64::from(pr.reserved_srqs())),
            (Table::CmptSrq, u64::from(pr.reserved_srqs())),
            (Table::Dmpt, u64::from(pr.reserved_mrws())),
            (Table::Mtt, u64::from(pr.reserved_mtts())),
            (Table::Eqc, u64::from(self.reserved_eqs())),
            (Table::CmptEq, u64::from(self.reserved_eqs())),
        ];
        for (t, n) in checks {
            let start = self.icm_addr(t, 0);
            let end = self.icm_addr(t, n);
            let mut v = start & !(PAGE - 1);
            while v < end {
                if !self.icm.is_mapped(v) {
                    return Err(self.cmd_fail(
                        Status::IcmError,
                        "§3.4",
                        format!("INIT_HCA: the reserved {t:?} entries (0..{n}) are not all mapped (VA {v:#x})"),
                    ));
                }
                v += PAGE;
            }
        }
        Ok(())
    }

    /// CLOSE_HCA (0x008): op_mod 0 normal, 1 panic (§2.3).
    pub(crate) fn cmd_close_hca(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0, 1])?;
        // QPs in RESET are software-owned (their entries only keep the RESET state).
        let live_qps = self
            .qps
            .values()
            .filter(|q| q.state != QpState::Reset)
            .count();
        let live = self.eqs.len() + self.cqs.len() + live_qps + self.mpts.len();
        if live != 0 && c.op_mod == 0 {
            self.violation(
                "§2.2",
                format!(
                    "CLOSE_HCA with objects still in hardware ownership: {} EQs, {} CQs, {} QPs, {} MPTs",
                    self.eqs.len(),
                    self.cqs.len(),
                    live_qps,
                    self.mpts.len()
                ),
            );
        }
        self.eqs.clear();
        self.cqs.clear();
        self.srqs.clear();
        self.qps.clear();
        self.mpts.clear();
        self.event_map = [None; 64];
        self.special_qp_base = 0;
        for i in 0..self.ports.len() {
            if self.ports[i].link_up {
                let n = self.ports[i].number;
                self.ports[i].close();
                self.requests.push(FabricRequest::PortDown(n));
            }
        }
        self.fw.init = None;
        Ok(None)
    }

    /// QUERY_HCA (0x00B), op_mod 0: the parameters the HCA was initialised with, in the
    /// INIT_HCA mailbox layout, plus the HCA core clock in MHz at 0x0c (global caps at 0x04
    /// read 0). Linux issues it after every successful INIT_PORT to learn the core clock and
    /// warns ("hca_core_clock update failed") if it fails. The model's free-running clock
    /// (QUERY_FW 0x50) counts nanoseconds, so its core clock is 1000 MHz.
    pub(crate) fn cmd_query_hca(&mut self, c: &Command) -> CmdResult {
        self.expect_op_mod(c, &[0])?;
        if self.fw.init.is_none() {
            return Err(self.cmd_fail(Status::BadSysState, "§2.1", "QUERY_HCA before INIT_HCA"));
        }
        let mut b = self.fw.init_mailbox.clone();
        b.resize(query_hca::SIZE, 0);
        query_hca::GLOBAL_CAPS.set(&mut b, 0);
        query_hca::HCA_CORE_CLOCK.set(&mut b, self.profile.hca_core_clock_mhz.into());
        self.mailbox_out(c, &b)?;
        Ok(None)
    }
}

/// QUERY_HCA output (§2.6): the INIT_HCA layout, with these two fields of its own.
mod query_hca {
    use crate::be::Field;

    pub const SIZE: usize = 0x200;
    pub const GLOBAL_CAPS: Field = Field::whole(0x04, 4);
    /// In MHz.
    pub const HCA_CORE_CLOCK: Field = Field::whole(0x0c, 4);
}
