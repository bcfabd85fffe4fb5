//! Bring-up and teardown (docs/hardware.md §2), readable top to bottom like Linux's
//! `mlx4_load_one` + `mlx4_init_hca` + `mlx4_setup_hca`. Every step is a typed error; a
//! failure part-way drops the half-built [`Hca`], whose teardown undoes exactly what exists.

use alloc::vec::Vec;

use crate::cmd::{hcr_t_bit, CmdState, Out};
use crate::cq::Cq;
use crate::eq::Eq;
use crate::error::Error;
use crate::fw::{flag, flag2, AdapterInfo, DevCaps, FuncInfo, FwInfo};
use crate::hw::{
    init_hca_flag, init_hca_log, InitHca, INIT_HCA_DRIVER_VERSION, INIT_HCA_DRIVER_VERSION_LEN,
};
use crate::icm::{IcmChunk, Profile, Table, LOG_MGM_ENTRY_SIZE};
use crate::mr::{IdAlloc, MrState, MttAlloc};
use crate::platform::{Bar, DmaRegion, IrqLine, Platform};
use crate::qp::Qp;
use crate::regs::{dcs, Opcode};
use zerocopy::IntoBytes;

/// What the driver is configured to use. ICM is sized from these plus the device's reserved
/// counts (never more than the device's maxima).
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub max_qps: u32,
    pub max_cqs: u32,
    /// SRQs beyond the reserved ones.
    pub max_srqs: u32,
    pub max_mrs: u32,
    pub max_mtts: u32,
    pub log_num_mcg: u32,
    pub log_rdmarc_per_qp: u8,
    /// Entries of the async EQ (asynchronous and command events; rounded up to a power of
    /// two). The completion EQ is sized from the CQ table (docs/driver.md, "Bring-up").
    pub eq_entries: u32,
    /// Bound on every command (Linux: 60 s).
    pub cmd_timeout_ms: u64,
    /// Wait after writing the reset register (§1.4: 1 s).
    pub reset_wait_ms: u64,
    /// Switch commands to event mode and run the NOP interrupt test.
    pub use_events: bool,
    /// Try MSI-X before INTx.
    pub use_msix: bool,
    /// Issue INIT_PORT for every port at bring-up.
    pub init_ports: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_qps: 64,
            max_cqs: 64,
            max_srqs: 16,
            max_mrs: 64,
            max_mtts: 4096,
            log_num_mcg: 6,
            // Linux's profile (mlx4_main.c `default_profile`): 16 RDMA READ/atomic
            // responder resources per QP, the most perftest's `-o` asks of ConnectX.
            log_rdmarc_per_qp: 4,
            eq_entries: crate::eq::ASYNC_EQES + crate::eq::SPARE_EQES,
            cmd_timeout_ms: 60_000,
            reset_wait_ms: 1000,
            use_events: true,
            use_msix: true,
            init_ports: true,
        }
    }
}

/// Host memory given to the device (reported at boot).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemStats {
    /// Firmware area (MAP_FA).
    pub fa_bytes: u64,
    /// ICM auxiliary memory (MAP_ICM_AUX).
    pub aux_bytes: u64,
    /// ICM backing pages (MAP_ICM).
    pub icm_bytes: u64,
    /// Total ICM virtual size told to SET_ICM_SIZE.
    pub icm_virtual: u64,
}

/// The multicast steering mode (Linux `choose_steering_mode`): B0 when the device offers
/// both VEP steering flags, else A0. Device-managed steering, which Linux takes only when its
/// `log_num_mgm_entry_size` parameter is −1, is never chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Steering {
    #[default]
    A0,
    B0,
}

/// What the driver takes of what the device offers, decided at bring-up as Linux's mlx4_core
/// decides it; `mode=diag` prints it beside the capabilities.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Choices {
    /// INIT_HCA's flags (0x14), the dword at 0x18 and the 64-byte EQE/CQE enables at 0x58
    /// (`hw::init_hca_flag`).
    pub init_hca_flags: u32,
    pub init_hca_flags2: u32,
    pub eqe_cqe_flags: u32,
    /// EQE and CQE sizes in bytes: 64 when the device offers them (QUERY_DEV_CAP flag bits
    /// 61/62), as Linux enables them by default (`enable_64b_cqe_eqe`); the stride extension
    /// (flags2 CQE/EQE_STRIDE) is not used with 64-byte cache lines, as in Linux.
    pub eqe_size: u32,
    pub cqe_size: u32,
    /// SW2HW_CQ with op_mod 1 over CQEs filled with 0xCC (flags2 SW_CQ_INIT).
    pub sw_cq_init: bool,
    pub steering: Steering,
    /// Memory windows enabled in INIT_HCA (flag bit 16 or BMME type-2 windows).
    pub mw_enabled: bool,
    /// The driver's version string went to the firmware in INIT_HCA.
    pub driver_version: bool,
    /// Event types MAP_EQ routes to the async EQ.
    pub async_event_mask: u64,
    /// QUERY_FUNC's answer in SYS_EQS mode.
    pub func: Option<FuncInfo>,
    /// EQs and UAR pages below the driver's: QUERY_DEV_CAP's (after the UAR rule), or in
    /// SYS_EQS mode QUERY_FUNC's; the UAR count at least 128 in legacy mode, as Linux keeps
    /// the first 128 for EQ doorbells.
    pub reserved_eqs: u32,
    pub reserved_uars: u32,
    /// The XRC domain basic SRQs name.
    pub xrcd: u16,
}

impl Choices {
    /// Linux's choices for the device `caps` describes (before INIT_HCA; QUERY_FUNC's part is
    /// filled after it).
    pub fn for_caps(c: &DevCaps) -> Self {
        let mut flags = init_hca_flag::UD_AV_PORT;
        if c.flags & flag::IPOIB_CSUM != 0 {
            flags |= init_hca_flag::IPOIB_CSUM;
        }
        if c.flags & flag::COUNTERS != 0 {
            flags |= init_hca_flag::COUNTERS;
        }
        if c.flags & flag::RSS_IP_FRAG != 0 {
            flags |= init_hca_flag::RSS_IP_FRAG;
        }
        let mut eqe_cqe_flags = 0;
        let (mut eqe_size, mut cqe_size) = (32, 32);
        if c.flags & flag::EQE_64B != 0 {
            eqe_cqe_flags |= init_hca_flag::EQE_64B;
            eqe_size = 64;
        }
        if c.flags & flag::CQE_64B != 0 {
            eqe_cqe_flags |= init_hca_flag::CQE_64B;
            cqe_size = 64;
        }
        let both_vep = flag::VEP_UC_STEER | flag::VEP_MC_STEER;
        Choices {
            init_hca_flags: flags,
            init_hca_flags2: if c.has2(flag2::RECOVERABLE_ERROR_EVENT) {
                init_hca_flag::RECOVERABLE_ERROR_EVENT
            } else {
                0
            },
            eqe_cqe_flags,
            eqe_size,
            cqe_size,
            sw_cq_init: c.has2(flag2::SW_CQ_INIT),
            steering: if c.flags & both_vep == both_vep {
                Steering::B0
            } else {
                Steering::A0
            },
            mw_enabled: c.flags & flag::MEM_WINDOW != 0 || c.bmme_flags & BMME_TYPE_2_WIN != 0,
            driver_version: c.has2(flag2::DRIVER_VERSION_TO_FW),
            async_event_mask: crate::eq::async_event_mask(c.flags, c.flags2),
            func: None,
            reserved_eqs: c.reserved_eqs,
            reserved_uars: c.reserved_uars.max(128.min(c.num_uars().saturating_sub(1))),
            xrcd: c.xrcd_for_srq(),
        }
    }
}

/// BMME flag: type-2 memory windows (Linux `MLX4_BMME_FLAG_TYPE_2_WIN`).
pub const BMME_TYPE_2_WIN: u32 = 1 << 9;

/// The version string INIT_HCA carries when the firmware asks for it (Linux sends
/// `Linux,mlx4_core,<version>`).
pub const DRIVER_VERSION: &str = concat!("ibkern,mlx4,", env!("CARGO_PKG_VERSION"));

/// Where interrupts come from after bring-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrqMode {
    /// No interrupt was proven to work (commands are polled).
    Polling,
    Msix,
    Intx,
}

/// A ConnectX-3 brought up and owned by this driver.
/// Which allocator a queue number came from (see [`Hca::queue_mem`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ids {
    Qpn,
    Cqn,
    Srqn,
}

/// What [`Hca::queue_mem`] gives a queue: its buffer, the MTT entry mapping it and its
/// doorbell record (index, bus address, pointer).
pub(crate) struct QueueMem {
    pub buf: DmaRegion,
    pub page_shift: u32,
    pub mtt: u32,
    pub dbrec_idx: usize,
    pub dbrec_bus: u64,
    pub dbrec: *mut u8,
}

pub struct Hca<P: Platform> {
    pub(crate) p: P,
    pub(crate) cfg: Config,
    pub(crate) cmd: CmdState,
    pub(crate) fw: FwInfo,
    pub(crate) caps: DevCaps,
    pub(crate) adapter: AdapterInfo,
    /// The queries' outputs as the firmware wrote them.
    pub(crate) raw: alloc::boxed::Box<crate::fw::RawQueries>,
    pub(crate) mem: MemStats,
    // Bring-up progress, for teardown.
    owned: bool,
    fa: Vec<DmaRegion>,
    fa_mapped: bool,
    fw_running: bool,
    pub(crate) aux: Vec<DmaRegion>,
    pub(crate) aux_mapped: bool,
    pub(crate) profile: Option<Profile>,
    pub(crate) icm: Vec<IcmChunk>,
    hca_open: bool,
    /// The async EQ and the completion EQ (`eq::ASYNC_EQ`, `eq::COMP_EQ`).
    pub(crate) eqs: Vec<Eq>,
    pub(crate) eq_mapped: bool,
    /// What the driver took of what the device offers.
    pub(crate) choices: Choices,
    pub(crate) irq: IrqMode,
    pub(crate) msix_cap: Option<u16>,
    pub(crate) ports_up: [bool; 2],
    pub(crate) port_events: [u32; 2],
    /// UAR page used for CQ/QP doorbells ("kar") and the BlueFlame page after it.
    pub(crate) kar: u32,
    pub(crate) bf_free: Vec<u32>,
    pub(crate) dbrec: Option<DmaRegion>,
    pub(crate) dbrec_used: Vec<bool>,
    // Object tables.
    pub(crate) pds: IdAlloc,
    pub(crate) mpts: IdAlloc,
    pub(crate) mtts: MttAlloc,
    pub(crate) cqns: IdAlloc,
    pub(crate) srqns: IdAlloc,
    pub(crate) qpns: IdAlloc,
    pub(crate) mrs: Vec<Option<MrState>>,
    pub(crate) cqs: Vec<Option<Cq>>,
    pub(crate) srqs: Vec<Option<crate::srq::Srq>>,
    pub(crate) qps: Vec<Option<Qp>>,
    pub(crate) async_events: u64,
    /// Events for `get_async_event`, oldest first, at most [`crate::srq::MAX_QUEUED_EVENTS`].
    pub(crate) async_queue: alloc::collections::VecDeque<verbs::AsyncEvent>,
    pub(crate) catas: bool,
    pub(crate) node_guid: u64,
    /// Each port's default flow counter (Linux `mlx4_allocate_default_counters`: index
    /// port − 1 from the counter bitmap), given to every QP of the port at INIT→RTR with
    /// the COUNTER_INDEX optpar; `None` without counters (the QPC then names the sink).
    pub(crate) port_counter: [Option<u8>; 2],
    /// The sink counter index, `max_counters − 1` (Linux `MLX4_SINK_COUNTER_INDEX`; 0xFF
    /// without counters).
    pub(crate) sink_counter: u8,
}

impl<P: Platform> Hca<P> {
    /// Bring the adapter up from reset (§2.1). On error everything built so far is torn down
    /// (the partially built `Hca` is dropped).
    pub fn init(p: P, cfg: Config) -> Result<Self, Error> {
        // Ownership (§1.4): reading 0 claims the device.
        if p.mmio_read32(Bar::Dcs, dcs::OWNERSHIP) != 0 {
            return Err(Error::NotOwner);
        }
        if let Err(e) = reset(&p, &cfg) {
            p.mmio_write32(Bar::Dcs, dcs::OWNERSHIP, 0);
            return Err(e);
        }
        let cmd = match CmdState::new(&p, hcr_t_bit(&p), cfg.cmd_timeout_ms * 1_000_000) {
            Ok(c) => c,
            Err(e) => {
                p.mmio_write32(Bar::Dcs, dcs::OWNERSHIP, 0);
                return Err(e);
            }
        };
        let mut h = Hca {
            p,
            cfg,
            cmd,
            fw: FwInfo::default(),
            caps: DevCaps::default(),
            adapter: AdapterInfo::default(),
            raw: alloc::boxed::Box::default(),
            mem: MemStats::default(),
            owned: true,
            fa: Vec::new(),
            fa_mapped: false,
            fw_running: false,
            aux: Vec::new(),
            aux_mapped: false,
            profile: None,
            icm: Vec::new(),
            hca_open: false,
            eqs: Vec::new(),
            eq_mapped: false,
            choices: Choices::default(),
            irq: IrqMode::Polling,
            msix_cap: None,
            ports_up: [false; 2],
            port_events: [0; 2],
            kar: 0,
            bf_free: Vec::new(),
            dbrec: None,
            dbrec_used: Vec::new(),
            pds: IdAlloc::new(0, 0),
            mpts: IdAlloc::new(0, 0),
            mtts: MttAlloc::new(0, 0),
            cqns: IdAlloc::new(0, 0),
            srqns: IdAlloc::new(0, 0),
            qpns: IdAlloc::new(0, 0),
            mrs: Vec::new(),
            cqs: Vec::new(),
            srqs: Vec::new(),
            qps: Vec::new(),
            async_events: 0,
            async_queue: alloc::collections::VecDeque::new(),
            catas: false,
            node_guid: 0,
            port_counter: [None; 2],
            sink_counter: 0xFF,
        };

        // Firmware (§1.5, §2.1 step 4).
        h.fw = h.query_fw()?;
        if h.fw.cmd_if_rev != 3 {
            // Revision 2 needs the old port commands (INIT_PORT with a mailbox), not written.
            return Err(Error::UnsupportedCmdIfRev(h.fw.cmd_if_rev));
        }
        h.load_fw()?;
        // Linux's `mlx4_init_fw`: MOD_STAT_CFG right after RUN_FW (4 KiB pages).
        h.mod_stat_cfg()?;

        // Capabilities (§2.4), and what to take of them.
        h.caps = h.query_dev_cap()?;
        h.check_caps()?;
        h.read_port_caps()?;
        h.choices = Choices::for_caps(&h.caps);

        // ICM (§3) and INIT_HCA (§2.6).
        let profile = Profile::new(&h.caps, &h.cfg)?;
        h.mem.icm_virtual = profile.total;
        h.map_icm_aux(profile.total)?;
        h.map_icm_tables(&profile)?;
        h.profile = Some(profile);
        h.init_hca_cmd()?;
        h.hca_open = true;
        // SYS_EQS mode: the function's EQs and UARs (Linux `mlx4_query_func`).
        if h.caps.has2(flag2::SYS_EQS) {
            let func = h.query_func()?;
            h.use_func(func)?;
        }
        h.adapter = h.query_adapter()?;

        // Driver resources: UAR, BlueFlame registers, doorbell records, object allocators.
        h.setup_resources()?;

        // EQs, MSI-X or INTx, command events, NOP interrupt test (§4.1, §8).
        h.create_eqs(h.cfg.use_msix)?;
        if h.cfg.use_events {
            h.enable_events_and_test_interrupts()?;
        }
        // Node GUID from the firmware's SMA (§6.2 NodeInfo), for the device attributes; with
        // command events on, as Linux's mlx4_ib reads it.
        h.node_guid = h.node_guid()?;

        // Default counters, then SET_PORT for every port, as Linux's `mlx4_setup_hca` ends.
        h.setup_counters();
        for port in 1..=h.caps.num_ports.min(2) {
            h.set_port_ib(port)?;
        }

        // Ports (§6.5): INIT_PORT directly (Linux's mlx4_ib issues it when QP0 reaches RTR;
        // this driver has no QP0 outside the subnet manager, docs/driver.md).
        if h.cfg.init_ports {
            for port in 1..=h.caps.num_ports.min(2) {
                h.init_port(port)?;
            }
        }
        log::info!(
            "mlx4: fw {}.{}.{}, {} ports, memory: FA {} KiB, ICM aux {} KiB, ICM {} KiB",
            h.fw.major,
            h.fw.minor,
            h.fw.subminor,
            h.caps.num_ports,
            h.mem.fa_bytes / 1024,
            h.mem.aux_bytes / 1024,
            h.mem.icm_bytes / 1024
        );
        Ok(h)
    }

    /// MAP_FA then RUN_FW (§2.1 step 4).
    fn load_fw(&mut self) -> Result<(), Error> {
        let bytes = self.fw.fw_pages as u64 * 4096;
        let mut regions = Vec::new();
        let entries = self.alloc_chunks(0, bytes, &mut regions, "firmware area");
        self.mem.fa_bytes = regions.iter().map(|r| r.size() as u64).sum();
        self.fa = regions;
        self.map_pages(Opcode::MAP_FA, &entries?)?;
        self.fa_mapped = true;
        self.cmd(Opcode::RUN_FW, 0, 0, 0, Out::None)?;
        self.fw_running = true;
        Ok(())
    }

    /// MOD_STAT_CFG as Linux's `mlx4_init_fw` sends it (fw.c `mlx4_MOD_STAT_CFG`): a 256-byte
    /// mailbox with log_pg_sz_m = 1 at byte 2 and log_pg_sz = 0 (4 KiB pages) at byte 3.
    /// Linux returns its failure from `mlx4_init_fw`, which aborts the load; so does this.
    fn mod_stat_cfg(&mut self) -> Result<(), Error> {
        let b = self.cmd.inbox_clear();
        if b.len() < 256 {
            return Err(Error::NoMemory("command mailbox"));
        }
        b[2] = 1; // log_pg_sz_m: the page size below is to be applied
        b[3] = 0; // log_pg_sz: 4 KiB << 0
        self.cmd_in(Opcode::MOD_STAT_CFG, 0, 0)
    }

    /// Default flow counters (Linux `mlx4_init_counters_table` and
    /// `mlx4_allocate_default_counters`): indices `[0, max_counters − 1)` are allocatable,
    /// `max_counters − 1` is the sink; port p gets index p − 1 if there is room. No command.
    fn setup_counters(&mut self) {
        let max = self.caps.max_counters;
        self.sink_counter = max.wrapping_sub(1) as u8;
        for p in 0..self.caps.num_ports.min(2) as u32 {
            self.port_counter[p as usize] = (max > 0 && p < max - 1).then_some(p as u8);
        }
    }

    fn check_caps(&self) -> Result<(), Error> {
        let c = &self.caps;
        if c.min_page_sz > 4096 {
            return Err(Error::Capability("minimum page size above 4 KiB"));
        }
        if c.num_ports == 0 {
            return Err(Error::Capability("no ports"));
        }
        if c.num_uars() == 0 {
            return Err(Error::Capability("no UAR pages"));
        }
        if c.max_sq_desc_sz < 64 || c.max_rq_sg == 0 || c.max_sq_sg == 0 {
            return Err(Error::Capability("WQE limits"));
        }
        Ok(())
    }

    /// SYS_EQS mode: QUERY_FUNC's reserved EQs and UARs replace QUERY_DEV_CAP's (Linux
    /// `mlx4_init_hca` after `mlx4_query_func`); the driver's EQs must fit the EQ table.
    fn use_func(&mut self, func: FuncInfo) -> Result<(), Error> {
        self.choices.func = Some(func);
        self.choices.reserved_eqs = func.rsvd_eqs;
        self.choices.reserved_uars = func.rsvd_uars;
        let table = self
            .profile
            .as_ref()
            .map_or(0, |p| p.get(Table::Eqc).num as u32);
        let end = func.rsvd_eqs + crate::eq::NUM_EQS;
        if end > table || (func.max_eqs != 0 && end > func.max_eqs) {
            return Err(Error::Capability("EQs after the function's reserved ones"));
        }
        Ok(())
    }

    /// INIT_HCA (§2.6): the profile's bases and sizes, and what the driver enables of what
    /// the device offers, as Linux's `mlx4_INIT_HCA` ([`Choices`]).
    fn init_hca_cmd(&mut self) -> Result<(), Error> {
        let prof = self.profile.as_ref().ok_or(Error::InvalidHandle)?;
        let t = |x: Table| *prof.get(x);
        let ch = self.choices;
        let mut m = InitHca::default();
        m.version = 2;
        // 64-byte cache lines: ((log2(64) - 4) << 5) | (1 << 4) = 0x50.
        m.cacheline = (2 << 5) | (1 << 4);
        m.flags.set(ch.init_hca_flags);
        m.flags2.set(ch.init_hca_flags2);
        m.eqe_cqe_flags.set(ch.eqe_cqe_flags);
        if ch.steering == Steering::B0 {
            m.mc_flags = init_hca_flag::UC_STEERING;
        }
        if ch.mw_enabled {
            m.mw_enable = init_hca_flag::MW_ENABLE;
        }
        let sys_eqs = self.caps.has2(flag2::SYS_EQS);
        if sys_eqs {
            m.num_sys_eqs.set(self.caps.num_sys_eqs);
        }
        m.qpc_base.set(t(Table::Qpc).base);
        m.srqc_base.set(t(Table::Srqc).base);
        m.cqc_base.set(t(Table::Cqc).base);
        m.altc_base.set(t(Table::Altc).base);
        m.auxc_base.set(t(Table::Auxc).base);
        m.eqc_base.set(t(Table::Eqc).base);
        m.rdmarc_base.set(t(Table::Rdmarc).base);
        let mcg = t(Table::Mcg);
        m.mc_base.set(mcg.base);
        m.log_mc_entry_sz.set(LOG_MGM_ENTRY_SIZE as u16);
        m.log_mc_hash_sz.set(mcg.log_num().saturating_sub(1) as u16);
        m.log_mc_table_sz = mcg.log_num();
        m.dmpt_base.set(t(Table::Dmpt).base);
        m.log_mpt_sz = t(Table::Dmpt).log_num();
        m.mtt_base.set(t(Table::Mtt).base);
        m.cmpt_base.set(t(Table::Cmpt).base);
        m.log_uar_sz = self.caps.num_uars().trailing_zeros() as u8;
        m.uar_page_sz = 0;
        let log_eqs = if sys_eqs {
            init_hca_flag::LOG_NUM_EQS_SYS
        } else {
            t(Table::Eqc).log_num()
        };
        let logs = [
            (init_hca_log::QPC, t(Table::Qpc).log_num()),
            (init_hca_log::SRQC, t(Table::Srqc).log_num()),
            (init_hca_log::CQC, t(Table::Cqc).log_num()),
            (init_hca_log::EQC, log_eqs),
            (init_hca_log::RDMARC, prof.log_rdmarc_per_qp),
        ];
        let b = self.cmd.inbox_clear();
        if b.len() < 0x200 {
            return Err(Error::NoMemory("command mailbox"));
        }
        b[..size_of::<InitHca>()].copy_from_slice(m.as_bytes());
        if ch.driver_version {
            let v = DRIVER_VERSION.as_bytes();
            let n = v.len().min(INIT_HCA_DRIVER_VERSION_LEN - 1);
            b[INIT_HCA_DRIVER_VERSION..][..n].copy_from_slice(&v[..n]);
        }
        // The log bytes overlay the low byte of their bases: write them after (§2.6).
        for (off, v) in logs {
            b[off] |= v;
        }
        self.cmd_in(Opcode::INIT_HCA, 0, 0)
    }

    /// The QPC counter index for a QP on `port` at INIT→RTR and whether the COUNTER_INDEX
    /// optpar carries it (Linux `__mlx4_ib_modify_qp`: the port's default counter with the
    /// optpar, else the sink index without).
    pub(crate) fn qp_counter(&self, port: u8) -> (u8, bool) {
        match self.port_counter.get(usize::from(port.max(1)) - 1) {
            Some(&Some(c)) => (c, true),
            _ => (self.sink_counter, false),
        }
    }

    /// UAR, BlueFlame registers, doorbell-record page and object allocators.
    fn setup_resources(&mut self) -> Result<(), Error> {
        let c = self.caps;
        // EQ doorbells live in UAR page eqn/4; Linux reserves at least 128 UAR pages for
        // them (§2.4 "derived"). The driver's own UAR is the first page after both. In
        // SYS_EQS mode the reserved pages are QUERY_FUNC's, as Linux takes them.
        let num_eqs = self
            .profile
            .as_ref()
            .map_or(0, |p| p.get(Table::Eqc).num as u32);
        self.kar = if self.choices.func.is_some() {
            self.choices.reserved_uars
        } else {
            self.choices.reserved_uars.max(num_eqs.div_ceil(4))
        };
        if self.kar >= c.num_uars() {
            return Err(Error::Capability("no free UAR page"));
        }
        if c.bf && c.bf_reg_size >= 64 && c.bf_regs_per_page > 0 {
            let fit = (4096 / c.bf_reg_size).min(c.bf_regs_per_page);
            self.bf_free = (0..fit).rev().collect();
        }
        let db = self
            .p
            .dma_alloc(4096, 4096)
            .ok_or(Error::NoMemory("doorbell records"))?;
        self.dbrec = Some(db);
        self.dbrec_used = alloc::vec![false; 4096 / 8];
        let prof = self.profile.as_ref().ok_or(Error::InvalidHandle)?;
        let max_pds = if c.max_pds == 0 { 1 << 16 } else { c.max_pds };
        self.pds = IdAlloc::new(c.reserved_pds.max(1), max_pds.min(1 << 16));
        self.mpts = IdAlloc::new(c.reserved_mrws, prof.get(Table::Dmpt).num as u32);
        self.mtts = MttAlloc::new(
            crate::icm::reserved_mtts(&c),
            prof.get(Table::Mtt).num as u32,
        );
        self.cqns = IdAlloc::new(c.reserved_cqs, prof.get(Table::Cqc).num as u32);
        self.srqns = IdAlloc::new(c.reserved_srqs, prof.get(Table::Srqc).num as u32);
        self.qpns = IdAlloc::new(c.reserved_qps, prof.get(Table::Qpc).num as u32);
        Ok(())
    }

    /// Allocate an 8-byte doorbell record; returns (index, bus address).
    pub(crate) fn alloc_dbrec(&mut self) -> Result<(usize, u64, *mut u8), Error> {
        let db = self
            .dbrec
            .as_ref()
            .ok_or(Error::NoResources("doorbell records"))?;
        let i = self
            .dbrec_used
            .iter()
            .position(|u| !u)
            .ok_or(Error::NoResources("doorbell records"))?;
        self.dbrec_used[i] = true;
        // SAFETY: i < 512, so the 8 bytes at i*8 are inside the 4 KiB page.
        let ptr = unsafe { db.as_ptr().add(i * 8) };
        // SAFETY: as above; the record is ours and zeroed for its new user.
        unsafe { core::ptr::write_bytes(ptr, 0, 8) };
        Ok((i, db.bus() + (i * 8) as u64, ptr))
    }

    pub(crate) fn free_dbrec(&mut self, i: usize) {
        if let Some(u) = self.dbrec_used.get_mut(i) {
            *u = false;
        }
    }

    /// The memory of work or completion queue number `id` (already taken from `ids`): a
    /// zeroed buffer of `size` bytes aligned to its size, the MTT entry that maps it (written
    /// to the device) and a doorbell record. This is the one unwind point of the creates: on
    /// any failure everything it took goes back, `id` included, so the caller has nothing to
    /// give back.
    pub(crate) fn queue_mem(
        &mut self,
        ids: Ids,
        id: u32,
        size: usize,
        what: &'static str,
    ) -> Result<QueueMem, Error> {
        let mut mtt = None;
        let mut dbrec = None;
        let r = self.queue_mem_steps(size, what, &mut mtt, &mut dbrec);
        if r.is_err() {
            if let Some(i) = dbrec {
                self.free_dbrec(i);
            }
            if let Some(m) = mtt {
                self.mtts.free(m);
            }
            match ids {
                Ids::Qpn => self.qpns.free(id),
                Ids::Cqn => self.cqns.free(id),
                Ids::Srqn => self.srqns.free(id),
            }
        }
        r
    }

    /// The fallible steps of [`Hca::queue_mem`], recording each ID in `mtt` / `dbrec` as soon
    /// as it is taken.
    fn queue_mem_steps(
        &mut self,
        size: usize,
        what: &'static str,
        mtt: &mut Option<u32>,
        dbrec: &mut Option<usize>,
    ) -> Result<QueueMem, Error> {
        let buf = self.p.dma_alloc(size, size).ok_or(Error::NoMemory(what))?;
        let page_shift = crate::mr::covering_page_shift(buf.bus(), size as u64);
        let page = buf.bus() & !((1u64 << page_shift) - 1);
        let m = self
            .mtts
            .alloc(1)
            .ok_or(Error::NoResources("MTT entries"))?;
        *mtt = Some(m);
        let (dbrec_idx, dbrec_bus, ptr) = self.alloc_dbrec()?;
        *dbrec = Some(dbrec_idx);
        self.write_mtt(m, &[page])?;
        Ok(QueueMem {
            buf,
            page_shift,
            mtt: m,
            dbrec_idx,
            dbrec_bus,
            dbrec: ptr,
        })
    }

    /// Give back the buffer of a queue the device was told about: freed, unless the device
    /// failed and did not come back from its reset, so that it may still write into it; then
    /// it is never freed (as [`Self::abandon_device_memory`] does at teardown).
    pub(crate) fn release_queue_buf(&self, buf: DmaRegion) {
        if self.cmd.failed.is_some() && !self.cmd.reset_ok {
            buf.leak();
        }
    }

    /// Host memory given to the device.
    pub fn mem_stats(&self) -> MemStats {
        self.mem
    }
    /// QUERY_FW results.
    pub fn fw_info(&self) -> &FwInfo {
        &self.fw
    }
    /// QUERY_DEV_CAP results.
    pub fn caps(&self) -> &DevCaps {
        &self.caps
    }
    /// What the driver took of what the device offers.
    pub fn choices(&self) -> &Choices {
        &self.choices
    }
    /// QUERY_ADAPTER results.
    pub fn adapter(&self) -> &AdapterInfo {
        &self.adapter
    }
    /// The ICM layout in use.
    pub fn profile(&self) -> Option<&Profile> {
        self.profile.as_ref()
    }
    /// How interrupts are delivered.
    pub fn irq_mode(&self) -> IrqMode {
        self.irq
    }
    /// Commands issued so far.
    pub fn commands_issued(&self) -> u64 {
        self.cmd.issued
    }
    /// Whether commands complete by event.
    pub fn events_enabled(&self) -> bool {
        self.cmd.use_events
    }
    /// The platform.
    pub fn platform(&self) -> &P {
        &self.p
    }
    /// Asynchronous events seen (not counting command and completion events).
    pub fn async_events(&self) -> u64 {
        self.async_events
    }

    /// Issue a NOP command (event mode: completes through the EQ).
    pub fn nop(&mut self) -> Result<(), Error> {
        self.cmd(Opcode::NOP, 0, 0x1F, 0, Out::None).map(|_| ())
    }

    /// Tear down in reverse (§2.2) and release the device. Returns the first error; teardown
    /// continues past errors so the device can be brought up again.
    pub fn close(mut self) -> Result<(), Error> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), Error> {
        if self.cmd.failed.is_some() && !self.cmd.reset_ok {
            self.abandon_device_memory();
        }
        let mut first: Result<(), Error> = Ok(());
        let mut note = |r: Result<(), Error>| {
            if first.is_ok() {
                first = r;
            }
        };
        // Objects: QPs, CQs, MRs (HW2SW_*).
        for i in 0..self.qps.len() {
            if self.qps[i].is_some() {
                note(self.destroy_qp_index(i));
            }
        }
        for i in 0..self.srqs.len() {
            if self.srqs[i].is_some() {
                note(self.destroy_srq_index(i));
            }
        }
        for i in 0..self.cqs.len() {
            if self.cqs[i].is_some() {
                note(self.destroy_cq_index(i));
            }
        }
        for i in 0..self.mrs.len() {
            if self.mrs[i].is_some() {
                note(self.dereg_mr_index(i));
            }
        }
        for port in 1..=2u8 {
            if self.ports_up[port as usize - 1] {
                note(self.close_port(port));
            }
        }
        // Back to polling, then the EQ (MAP_EQ unmap, HW2SW_EQ), then MSI-X off.
        self.cmd.use_events = false;
        note(self.destroy_eqs());
        self.dbrec = None;
        if self.hca_open {
            note(self.cmd(Opcode::CLOSE_HCA, 0, 0, 0, Out::None).map(|_| ()));
            self.hca_open = false;
        }
        note(self.unmap_icm_tables());
        self.profile = None;
        if self.aux_mapped {
            note(
                self.cmd(Opcode::UNMAP_ICM_AUX, 0, 0, 0, Out::None)
                    .map(|_| ()),
            );
            self.aux_mapped = false;
        }
        self.aux.clear();
        self.mem.aux_bytes = 0;
        if self.fa_mapped || self.fw_running {
            note(self.cmd(Opcode::UNMAP_FA, 0, 0, 0, Out::None).map(|_| ()));
            self.fa_mapped = false;
            self.fw_running = false;
        }
        self.fa.clear();
        self.mem.fa_bytes = 0;
        self.cmd.free();
        if self.owned {
            self.p.mmio_write32(Bar::Dcs, dcs::OWNERSHIP, 0);
            self.owned = false;
        }
        first
    }

    /// The device failed and did not come back from reset, so it may still DMA into what it
    /// was given: leak (never free) every region it could reach, and issue nothing more.
    fn abandon_device_memory(&mut self) {
        use core::mem::{forget, take};
        forget(take(&mut self.fa));
        self.fa_mapped = false;
        self.fw_running = false;
        forget(take(&mut self.aux));
        self.aux_mapped = false;
        forget(take(&mut self.icm));
        self.hca_open = false;
        forget(take(&mut self.eqs));
        self.eq_mapped = false;
        forget(self.dbrec.take());
        forget(take(&mut self.qps));
        forget(take(&mut self.srqs));
        forget(take(&mut self.cqs));
        self.mrs.clear();
        self.ports_up = [false; 2];
        forget(self.cmd.boxes.take());
    }

    /// Wait for the next interrupt-or-event work: drains the EQ (call from an interrupt
    /// handler or a polling loop). Clears the INTx register first when INTx is in use (§1.7).
    pub fn handle_interrupt(&mut self) {
        if self.irq == IrqMode::Intx {
            self.clear_intx();
        }
        self.process_events();
    }

    /// Whether `line` fired (forwarded to the platform).
    pub fn take_interrupt(&self, line: IrqLine) -> bool {
        self.p.take_interrupt(line)
    }
}

// SAFETY: the raw pointers inside an Hca (doorbell records, queue buffers) point into DMA
// regions the Hca itself owns; nothing else holds them, so moving the whole Hca to another
// thread moves that ownership with it (like a Box). The platform must be Send itself.
unsafe impl<P: Platform + Send> Send for Hca<P> {}

impl<P: Platform> Drop for Hca<P> {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// Reset (§1.4): take the semaphore, write the reset register, wait, wait for the device to
/// answer config reads again, restore config space.
pub(crate) fn reset<P: Platform>(p: &P, cfg: &Config) -> Result<(), Error> {
    let start = p.now_ns();
    while p.mmio_read32(Bar::Dcs, dcs::SEMAPHORE) != 0 {
        if p.now_ns().saturating_sub(start) > 10_000_000_000 {
            return Err(Error::SemaphoreTimeout);
        }
        p.delay_us(1000);
    }
    p.save_config();
    p.mmio_write32(Bar::Dcs, dcs::RESET, 1u32.to_be());
    p.delay_us(cfg.reset_wait_ms * 1000);
    let start = p.now_ns();
    while p.config_read32(0) & 0xFFFF == 0xFFFF {
        if p.now_ns().saturating_sub(start) > 2_000_000_000 {
            return Err(Error::ResetTimeout);
        }
        p.delay_us(1000);
    }
    p.restore_config();
    Ok(())
}

impl<P: Platform> Hca<P> {
    pub(crate) fn qpns_capacity(&self) -> u32 {
        self.profile
            .as_ref()
            .map_or(0, |p| p.get(Table::Qpc).num as u32 - self.caps.reserved_qps)
    }
    pub(crate) fn cqns_capacity(&self) -> u32 {
        self.profile
            .as_ref()
            .map_or(0, |p| p.get(Table::Cqc).num as u32 - self.caps.reserved_cqs)
    }
    pub(crate) fn mpts_capacity(&self) -> u32 {
        self.profile.as_ref().map_or(0, |p| {
            p.get(Table::Dmpt).num as u32 - self.caps.reserved_mrws
        })
    }
}

#[cfg(test)]
mod send_tests {
    use super::*;

    use crate::test_platform::Recorder as NullPlatform;

    #[test]
    fn hca_is_send_so_a_kernel_can_keep_it_in_a_static_mutex() {
        fn assert_send<T: Send>() {}
        assert_send::<Hca<NullPlatform>>();
    }

    #[test]
    fn bring_up_without_dma_memory_is_a_typed_error() {
        // Ownership reads 0, semaphore 0, vendor ID 0 (not 0xFFFF): the first failure is
        // the mailbox allocation.
        match Hca::init(NullPlatform::default(), Config::default()) {
            Err(Error::NoMemory(what)) => assert_eq!(what, "command mailbox"),
            other => panic!("expected NoMemory, got {:?}", other.err()),
        }
    }
}
