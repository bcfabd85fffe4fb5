//! The device profile: what one emulated HCA reports and offers. Profiles of real cards are
//! files, `sim/profiles/<name>.toml` (built into the crate), each field with the public source it
//! was taken from; [`DeviceProfile::named`] loads one, [`DeviceProfile::default`] is
//! [`DEFAULT_PROFILE`]. docs/model.md ("Device profiles") lists them and what each changes.
//!
//! The file format: top-level `name` and `summary`, a `[sources]` table (short key = the URL or
//! document and what it showed), and one table per group below whose every key is
//! `field = { value = ..., source = "..." }`. A source either starts with the key of a
//! `[sources]` entry and a colon (`"devinfo-2p: max_cq 65408 = 2^16 - 2^7"`) or says
//! `(inferred)` and why. The loader refuses unknown and missing fields, values out of range and
//! sources that cite nothing, so a file cannot silently drift from the struct.

use std::collections::BTreeMap;
use std::fmt;

/// Static description of one emulated HCA. Tests may edit any field before `Fabric::add_hca`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceProfile {
    /// The profile's name (its file name without `.toml`).
    pub name: String,

    // --- PCI identity (§1.1) ---
    pub vendor_id: u16,
    pub device_id: u16,
    pub subsystem_vendor_id: u16,
    pub subsystem_id: u16,
    pub revision: u8,
    /// Class code (base, sub, prog-if): 0x02/0x80/0x00 = "other network controller".
    pub class_code: u32,
    /// BAR0 size in bytes (power of two, >= 1 MiB, §1.1).
    pub bar0_size: u64,
    /// BAR2 size in bytes (power of two, >= 2 x uar area when BlueFlame is on, §1.1).
    pub bar2_size: u64,
    /// Number of MSI-X table entries (§8).
    pub msix_vectors: u16,

    // --- firmware (§1.5) ---
    pub fw_major: u16,
    pub fw_minor: u16,
    pub fw_subminor: u16,
    pub cmd_if_rev: u16,
    /// Size of the firmware area the driver must donate with MAP_FA, in 4 KiB pages.
    pub fw_pages: u16,
    /// log2 of the number of outstanding event-mode commands (QUERY_FW 0x0F).
    pub log_max_cmds: u8,
    /// QUERY_ADAPTER inta_pin (§1.7): bit of the clear-interrupt register.
    pub inta_pin: u8,
    /// Board id string (QUERY_ADAPTER VSD + 0xD0, at most 16 bytes).
    pub board_id: String,
    /// QUERY_HCA 0x0C: the frequency of the free-running clock (QUERY_FW 0x50), in MHz.
    pub hca_core_clock_mhz: u32,

    // --- QUERY_DEV_CAP (§2.4) ---
    pub log_max_qp_sz: u8,
    pub log_rsvd_qps: u8,
    pub log_max_qps: u8,
    pub log_rsvd_srqs: u8,
    pub log_max_srqs: u8,
    pub log_max_srq_sz: u8,
    pub log_max_cq_sz: u8,
    pub log_rsvd_cqs: u8,
    pub log_max_cqs: u8,
    pub log_max_mpts: u8,
    pub log_rsvd_eqs: u8,
    pub log_max_eqs: u8,
    pub log_rsvd_mtts: u8,
    pub log_rsvd_mrws: u8,
    /// QUERY_DEV_CAP 0x26: EQs in SYS_EQS mode; 0 = legacy EQ mode (no QUERY_FUNC).
    pub num_sys_eqs: u16,
    /// log2 of the RDMA READ/atomic depth per QP as requester (0x29) and responder (0x2B),
    /// and of the device-wide responder resources (0x2F).
    pub log_max_req_rdma: u8,
    pub log_max_res_rdma: u8,
    pub log_max_rdma_global: u8,
    pub local_ca_ack_delay: u8,
    pub num_ports: u8,
    pub log_max_msg: u8,
    /// Static-rate support bitmap (0x3C, bit k: rate code k).
    pub stat_rate_support: u16,
    /// Reserved UAR count (QUERY_DEV_CAP 0x48 high nibble).
    pub rsvd_uars: u8,
    /// log2(uar area bytes) - 20 (QUERY_DEV_CAP 0x49).
    pub log_uar_sz_mb: u8,
    /// log2 of the minimum page size (0x4B).
    pub log_min_page_sz: u8,
    pub blueflame: bool,
    pub log_bf_reg_size: u8,
    pub log_bf_regs_per_page: u8,
    pub max_sg_sq: u8,
    pub max_sq_desc_sz: u16,
    pub max_sg_rq: u8,
    pub max_rq_desc_sz: u16,
    pub rsvd_pds: u8,
    pub log_max_pds: u8,
    /// Reserved XRC domains (0x66 high nibble, a count) and log2 of the maximum (0x67).
    pub rsvd_xrcds: u8,
    pub log_max_xrcds: u8,
    pub rdmarc_entry_sz: u16,
    pub qpc_entry_sz: u16,
    pub auxc_entry_sz: u16,
    pub altc_entry_sz: u16,
    pub eqc_entry_sz: u16,
    pub cqc_entry_sz: u16,
    pub srq_entry_sz: u16,
    pub cmpt_entry_sz: u16,
    pub mtt_entry_sz: u16,
    pub dmpt_entry_sz: u16,
    /// Base memory-management extension flags (0x94, `bmme_flags`).
    pub bmme_flags: u32,
    /// Flow counters (QUERY_DEV_CAP 0x68, reported with flag bit 48); the last one is the
    /// sink (Linux `MLX4_SINK_COUNTER_INDEX`).
    pub max_counters: u32,
    pub reserved_lkey: u32,
    pub max_icm_sz: u64,
    /// Device flags (QUERY_DEV_CAP 0x40/0x44 as one u64, [`dev_cap_flags`]).
    pub flags: u64,
    /// Capabilities reported outside the flag words ([`Caps2`]).
    pub caps2: Caps2,

    // --- QUERY_FUNC (SYS_EQS mode only) ---
    pub func_max_eqs: u16,
    pub func_rsvd_eqs: u16,
    pub func_rsvd_uars: u8,

    // --- port (§2.5, §6.2) ---
    /// Max IB MTU enum (5 = 4096).
    pub max_mtu: u8,
    /// Max VLs (PortInfo encoding: 4 = VL0-7).
    pub max_vl: u8,
    /// Log2 of the GID table size and the P_Key table size.
    pub log_max_gids: u8,
    pub log_max_pkeys: u8,
    /// PortInfo CapabilityMask the firmware SMA reports before software changes it.
    pub port_cap_mask: u32,
    /// Node GUID; 0 = assigned by the fabric from the HCA index.
    pub node_guid: u64,
    /// Node description (MAD NodeDescription, 64 bytes max).
    pub node_description: String,
}

/// QUERY_DEV_CAP flag bits (§2.4 0x40/0x44), with the names Linux's mlx4_core gives them
/// (`fw.c` `dump_dev_cap_flags`); the profile files use the snake-case names of [`FLAG_NAMES`].
pub mod dev_cap_flags {
    pub const RC: u64 = 1 << 0;
    pub const UC: u64 = 1 << 1;
    pub const UD: u64 = 1 << 2;
    pub const XRC: u64 = 1 << 3;
    pub const SRQ: u64 = 1 << 6;
    pub const IPOIB_CSUM: u64 = 1 << 7;
    pub const BAD_PKEY_CNTR: u64 = 1 << 8;
    pub const BAD_QKEY_CNTR: u64 = 1 << 9;
    pub const DPDP: u64 = 1 << 12;
    pub const BLH: u64 = 1 << 15;
    pub const MEM_WINDOW: u64 = 1 << 16;
    pub const APM: u64 = 1 << 17;
    pub const ATOMIC: u64 = 1 << 18;
    pub const RAW_MCAST: u64 = 1 << 19;
    pub const UD_AV_PORT: u64 = 1 << 20;
    pub const UD_MCAST: u64 = 1 << 21;
    pub const IBOE: u64 = 1 << 30;
    pub const UC_LOOPBACK: u64 = 1 << 32;
    pub const FCS_KEEP: u64 = 1 << 34;
    pub const WOL_PORT1: u64 = 1 << 37;
    pub const WOL_PORT2: u64 = 1 << 38;
    pub const UDP_RSS: u64 = 1 << 40;
    pub const VEP_UC_STEER: u64 = 1 << 41;
    pub const VEP_MC_STEER: u64 = 1 << 42;
    /// Basic flow counters (Linux `MLX4_DEV_CAP_FLAG_COUNTERS`).
    pub const COUNTERS: u64 = 1 << 48;
    pub const RSS_IP_FRAG: u64 = 1 << 52;
    pub const SET_ETH_SCHED: u64 = 1 << 53;
    pub const SENSE_SUPPORT: u64 = 1 << 55;
    /// The firmware reports port-management changes (event 0x1D) itself.
    pub const PORT_MNG_CHG_EV: u64 = 1 << 59;
    pub const EQE_64B: u64 = 1 << 61;
    pub const CQE_64B: u64 = 1 << 62;
}

/// The `[flags]` keys of a profile file and their bits.
pub const FLAG_NAMES: &[(&str, u64)] = {
    use dev_cap_flags::*;
    &[
        ("rc", RC),
        ("uc", UC),
        ("ud", UD),
        ("xrc", XRC),
        ("srq", SRQ),
        ("ipoib_csum", IPOIB_CSUM),
        ("bad_pkey_counter", BAD_PKEY_CNTR),
        ("bad_qkey_counter", BAD_QKEY_CNTR),
        ("dpdp", DPDP),
        ("big_lso_headers", BLH),
        ("memory_windows", MEM_WINDOW),
        ("apm", APM),
        ("atomics", ATOMIC),
        ("raw_multicast", RAW_MCAST),
        ("ud_av_port_check", UD_AV_PORT),
        ("ud_multicast", UD_MCAST),
        ("iboe", IBOE),
        ("uc_loopback", UC_LOOPBACK),
        ("fcs_keep", FCS_KEEP),
        ("wol_port1", WOL_PORT1),
        ("wol_port2", WOL_PORT2),
        ("udp_rss", UDP_RSS),
        ("vep_uc_steering", VEP_UC_STEER),
        ("vep_mc_steering", VEP_MC_STEER),
        ("counters", COUNTERS),
        ("rss_ip_fragments", RSS_IP_FRAG),
        ("eth_scheduler", SET_ETH_SCHED),
        ("port_sensing", SENSE_SUPPORT),
        ("port_mgmt_change_event", PORT_MNG_CHG_EV),
        ("eqe_64b", EQE_64B),
        ("cqe_64b", CQE_64B),
    ]
};

/// Base memory-management extension flags (QUERY_DEV_CAP 0x94; Linux `MLX4_BMME_FLAG_*`).
pub mod bmme {
    pub const WIN_TYPE_2B: u32 = 1 << 1;
    pub const LOCAL_INV: u32 = 1 << 6;
    pub const REMOTE_INV: u32 = 1 << 7;
    pub const TYPE_2_WIN: u32 = 1 << 9;
    pub const RESERVED_LKEY: u32 = 1 << 10;
    pub const FAST_REG_WR: u32 = 1 << 11;
}

/// Capabilities QUERY_DEV_CAP reports outside the two flag words (Linux folds them into its
/// `flags2`, `fw.c` `mlx4_QUERY_DEV_CAP`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caps2 {
    /// Ext-2 flags (0x70) bit 23: software initialises the CQEs, SW2HW_CQ op_mod 1.
    pub sw_cq_init: bool,
    /// 0x9C bit 7: recoverable-error events (type 0x3E), enabled by INIT_HCA 0x18 bit 31.
    pub recoverable_error_event: bool,
    /// 0x7A bits 6 and 7: CQE and EQE strides above 64 bytes (INIT_HCA 0x5B).
    pub cqe_stride: bool,
    pub eqe_stride: bool,
    /// 0x3E bit 7: CQE timestamps (Linux then reads the core clock with QUERY_HCA).
    pub timestamp: bool,
    /// 0x76 bit 7: device-managed flow steering (INIT_HCA flags bit 6).
    pub flow_steering: bool,
}

/// Profiles built into the crate, `(name, file text)`.
const BUILT_IN: &[(&str, &str)] = &[
    ("cx3-fdr", include_str!("../profiles/cx3-fdr.toml")),
    ("cx3-fdr-2p", include_str!("../profiles/cx3-fdr-2p.toml")),
    ("cx3pro-fdr", include_str!("../profiles/cx3pro-fdr.toml")),
    ("reduced", include_str!("../profiles/reduced.toml")),
];

/// The profile every command and test uses unless told otherwise.
pub const DEFAULT_PROFILE: &str = "reduced";

/// A profile name that is not built in (the error lists the ones that are).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownProfile(pub String);

impl fmt::Display for UnknownProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown device profile {:?}; the profiles are: {}",
            self.0,
            DeviceProfile::names().join(", ")
        )
    }
}

impl std::error::Error for UnknownProfile {}

impl Default for DeviceProfile {
    /// The [`DEFAULT_PROFILE`].
    fn default() -> Self {
        DeviceProfile::named(DEFAULT_PROFILE).expect("the default profile is built in and valid")
    }
}

/// The kinds of value a profile field holds.
enum Slot<'a> {
    U8(&'a mut u8),
    U16(&'a mut u16),
    U32(&'a mut u32),
    U64(&'a mut u64),
    Bool(&'a mut bool),
    Text(&'a mut String),
    /// One bit of a wider word.
    Bit(&'a mut u64, u64),
}

/// Every field of a profile file, by group and key, with the struct field it sets. The one
/// table the loader, the writer and the completeness test use.
fn for_each_field(p: &mut DeviceProfile, mut f: impl FnMut(&str, &str, Slot<'_>)) {
    macro_rules! fields {
        ($group:literal: $($key:ident => $kind:ident),* $(,)?) => {
            $( f($group, stringify!($key), Slot::$kind(&mut p.$key)); )*
        };
    }
    fields!("pci":
        vendor_id => U16, device_id => U16, subsystem_vendor_id => U16, subsystem_id => U16,
        revision => U8, class_code => U32, bar0_size => U64, bar2_size => U64,
        msix_vectors => U16,
    );
    fields!("firmware":
        fw_major => U16, fw_minor => U16, fw_subminor => U16, cmd_if_rev => U16,
        fw_pages => U16, log_max_cmds => U8, inta_pin => U8, board_id => Text,
        hca_core_clock_mhz => U32,
    );
    fields!("dev_cap":
        log_max_qp_sz => U8, log_rsvd_qps => U8, log_max_qps => U8, log_rsvd_srqs => U8,
        log_max_srqs => U8, log_max_srq_sz => U8, log_max_cq_sz => U8, log_rsvd_cqs => U8,
        log_max_cqs => U8, log_max_mpts => U8, log_rsvd_eqs => U8, log_max_eqs => U8,
        log_rsvd_mtts => U8, log_rsvd_mrws => U8, num_sys_eqs => U16, log_max_req_rdma => U8,
        log_max_res_rdma => U8, log_max_rdma_global => U8, local_ca_ack_delay => U8,
        num_ports => U8, log_max_msg => U8, stat_rate_support => U16, rsvd_uars => U8,
        log_uar_sz_mb => U8, log_min_page_sz => U8, blueflame => Bool, log_bf_reg_size => U8,
        log_bf_regs_per_page => U8, max_sg_sq => U8, max_sq_desc_sz => U16, max_sg_rq => U8,
        max_rq_desc_sz => U16, rsvd_pds => U8, log_max_pds => U8, rsvd_xrcds => U8,
        log_max_xrcds => U8, rdmarc_entry_sz => U16, qpc_entry_sz => U16,
        auxc_entry_sz => U16, altc_entry_sz => U16, eqc_entry_sz => U16, cqc_entry_sz => U16,
        srq_entry_sz => U16, cmpt_entry_sz => U16, mtt_entry_sz => U16, dmpt_entry_sz => U16,
        bmme_flags => U32, max_counters => U32, reserved_lkey => U32, max_icm_sz => U64,
    );
    for &(key, bit) in FLAG_NAMES {
        f("flags", key, Slot::Bit(&mut p.flags, bit));
    }
    let c = &mut p.caps2;
    f("caps2", "sw_cq_init", Slot::Bool(&mut c.sw_cq_init));
    f(
        "caps2",
        "recoverable_error_event",
        Slot::Bool(&mut c.recoverable_error_event),
    );
    f("caps2", "cqe_stride", Slot::Bool(&mut c.cqe_stride));
    f("caps2", "eqe_stride", Slot::Bool(&mut c.eqe_stride));
    f("caps2", "timestamp", Slot::Bool(&mut c.timestamp));
    f("caps2", "flow_steering", Slot::Bool(&mut c.flow_steering));
    fields!("query_func":
        func_max_eqs => U16, func_rsvd_eqs => U16, func_rsvd_uars => U8,
    );
    fields!("port":
        max_mtu => U8, max_vl => U8, log_max_gids => U8, log_max_pkeys => U8,
        port_cap_mask => U32, node_guid => U64, node_description => Text,
    );
}

/// A field's value as the file writes it.
fn slot_value(s: &Slot<'_>) -> toml::Value {
    match s {
        Slot::U8(v) => toml::Value::Integer(i64::from(**v)),
        Slot::U16(v) => toml::Value::Integer(i64::from(**v)),
        Slot::U32(v) => toml::Value::Integer(i64::from(**v)),
        Slot::U64(v) => toml::Value::Integer(**v as i64),
        Slot::Bool(v) => toml::Value::Boolean(**v),
        Slot::Text(v) => toml::Value::String((*v).clone()),
        Slot::Bit(w, bit) => toml::Value::Boolean(**w & *bit != 0),
    }
}

/// Store `v` into the slot, or say why it does not fit.
fn set_slot(s: Slot<'_>, v: &toml::Value) -> Result<(), String> {
    let int = |max: u64| -> Result<u64, String> {
        match v {
            toml::Value::Integer(i) if *i >= 0 && (*i as u64) <= max => Ok(*i as u64),
            toml::Value::Integer(i) => Err(format!("{i} is out of range 0..={max}")),
            other => Err(format!("expected an integer, found {}", other.type_str())),
        }
    };
    let boolean = || -> Result<bool, String> {
        v.as_bool()
            .ok_or_else(|| format!("expected true or false, found {}", v.type_str()))
    };
    match s {
        Slot::U8(t) => *t = int(u8::MAX.into())? as u8,
        Slot::U16(t) => *t = int(u16::MAX.into())? as u16,
        Slot::U32(t) => *t = int(u32::MAX.into())? as u32,
        Slot::U64(t) => *t = int(i64::MAX as u64)?,
        Slot::Bool(t) => *t = boolean()?,
        Slot::Text(t) => {
            *t = v
                .as_str()
                .ok_or_else(|| format!("expected a string, found {}", v.type_str()))?
                .to_string()
        }
        Slot::Bit(w, bit) => {
            if boolean()? {
                *w |= bit;
            } else {
                *w &= !bit;
            }
        }
    }
    Ok(())
}

/// The sources a profile file cites, by key.
pub type Sources = BTreeMap<String, String>;

/// A loaded profile file: the profile, its one-line summary, its sources and each field's
/// citation (keyed `group.field`).
#[derive(Clone, Debug)]
pub struct ProfileFile {
    pub profile: DeviceProfile,
    pub summary: String,
    pub sources: Sources,
    pub citations: BTreeMap<String, String>,
}

impl ProfileFile {
    /// Parse and check a profile file (the format is in this module's documentation).
    pub fn parse(text: &str) -> Result<ProfileFile, String> {
        let doc: toml::Table = text.parse().map_err(|e| format!("not TOML: {e}"))?;
        let string = |key: &str| -> Result<String, String> {
            doc.get(key)
                .and_then(toml::Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| format!("`{key}` (a string) is missing"))
        };
        let name = string("name")?;
        let summary = string("summary")?;
        let mut sources = Sources::new();
        let src = doc
            .get("sources")
            .and_then(toml::Value::as_table)
            .ok_or("the [sources] table is missing")?;
        for (k, v) in src {
            let text = v
                .as_str()
                .filter(|s| !s.trim().is_empty())
                .ok_or_else(|| format!("source {k:?} must be a non-empty string"))?;
            sources.insert(k.clone(), text.to_string());
        }
        let mut profile = DeviceProfile::blank(&name);
        let mut citations = BTreeMap::new();
        let mut errors = Vec::new();
        let mut known: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for_each_field(&mut profile, |group, key, slot| {
            known
                .entry(group.to_string())
                .or_default()
                .push(key.to_string());
            let here = format!("{group}.{key}");
            let Some(entry) = doc
                .get(group)
                .and_then(toml::Value::as_table)
                .and_then(|t| t.get(key))
            else {
                errors.push(format!("{here} is missing"));
                return;
            };
            let (Some(value), Some(source)) = (
                entry.get("value"),
                entry.get("source").and_then(toml::Value::as_str),
            ) else {
                errors.push(format!(
                    "{here} must be {{ value = ..., source = \"...\" }}"
                ));
                return;
            };
            if let Err(e) = cited(source, &sources) {
                errors.push(format!("{here}: {e}"));
            }
            if let Err(e) = set_slot(slot, value) {
                errors.push(format!("{here}: {e}"));
            }
            citations.insert(here, source.to_string());
        });
        for (k, v) in &doc {
            match (k.as_str(), known.get(k)) {
                ("name" | "summary" | "sources", _) => {}
                (_, Some(keys)) => {
                    for field in v.as_table().into_iter().flat_map(|t| t.keys()) {
                        if !keys.contains(field) {
                            errors.push(format!("{k}.{field} is not a profile field"));
                        }
                    }
                }
                (_, None) => errors.push(format!("[{k}] is not a profile group")),
            }
        }
        if let Err(e) = profile.validate() {
            errors.push(e);
        }
        if !errors.is_empty() {
            return Err(format!("profile {name:?}: {}", errors.join("; ")));
        }
        Ok(ProfileFile {
            profile,
            summary,
            sources,
            citations,
        })
    }
}

/// A citation is good if it names a source (`key: ...`) or says it is inferred.
fn cited(source: &str, sources: &Sources) -> Result<(), String> {
    let names_source = source
        .split_once(':')
        .is_some_and(|(k, rest)| sources.contains_key(k.trim()) && !rest.trim().is_empty());
    if names_source || source.contains("(inferred)") {
        Ok(())
    } else {
        Err(format!(
            "source {source:?} neither starts with a [sources] key and a colon nor says (inferred)"
        ))
    }
}

impl DeviceProfile {
    /// The names of the built-in profiles.
    pub fn names() -> Vec<&'static str> {
        BUILT_IN.iter().map(|(n, _)| *n).collect()
    }

    /// The built-in profile `name` with its summary, sources and citations.
    pub fn file(name: &str) -> Result<ProfileFile, UnknownProfile> {
        let (_, text) = BUILT_IN
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| UnknownProfile(name.to_string()))?;
        // The built-in files are checked by this crate's tests; a broken one is a build defect.
        Ok(ProfileFile::parse(text).unwrap_or_else(|e| panic!("built-in profile {name}: {e}")))
    }

    /// The built-in profile `name`.
    pub fn named(name: &str) -> Result<DeviceProfile, UnknownProfile> {
        Ok(Self::file(name)?.profile)
    }

    /// Every built-in profile, in [`DeviceProfile::names`] order.
    pub fn all() -> Vec<DeviceProfile> {
        Self::names()
            .into_iter()
            .map(|n| Self::named(n).expect("built in"))
            .collect()
    }

    /// A profile with every field zero or empty (the loader fills it).
    fn blank(name: &str) -> DeviceProfile {
        DeviceProfile {
            name: name.to_string(),
            vendor_id: 0,
            device_id: 0,
            subsystem_vendor_id: 0,
            subsystem_id: 0,
            revision: 0,
            class_code: 0,
            bar0_size: 0,
            bar2_size: 0,
            msix_vectors: 0,
            fw_major: 0,
            fw_minor: 0,
            fw_subminor: 0,
            cmd_if_rev: 0,
            fw_pages: 0,
            log_max_cmds: 0,
            inta_pin: 0,
            board_id: String::new(),
            hca_core_clock_mhz: 0,
            log_max_qp_sz: 0,
            log_rsvd_qps: 0,
            log_max_qps: 0,
            log_rsvd_srqs: 0,
            log_max_srqs: 0,
            log_max_srq_sz: 0,
            log_max_cq_sz: 0,
            log_rsvd_cqs: 0,
            log_max_cqs: 0,
            log_max_mpts: 0,
            log_rsvd_eqs: 0,
            log_max_eqs: 0,
            log_rsvd_mtts: 0,
            log_rsvd_mrws: 0,
            num_sys_eqs: 0,
            log_max_req_rdma: 0,
            log_max_res_rdma: 0,
            log_max_rdma_global: 0,
            local_ca_ack_delay: 0,
            num_ports: 0,
            log_max_msg: 0,
            stat_rate_support: 0,
            rsvd_uars: 0,
            log_uar_sz_mb: 0,
            log_min_page_sz: 0,
            blueflame: false,
            log_bf_reg_size: 0,
            log_bf_regs_per_page: 0,
            max_sg_sq: 0,
            max_sq_desc_sz: 0,
            max_sg_rq: 0,
            max_rq_desc_sz: 0,
            rsvd_pds: 0,
            log_max_pds: 0,
            rsvd_xrcds: 0,
            log_max_xrcds: 0,
            rdmarc_entry_sz: 0,
            qpc_entry_sz: 0,
            auxc_entry_sz: 0,
            altc_entry_sz: 0,
            eqc_entry_sz: 0,
            cqc_entry_sz: 0,
            srq_entry_sz: 0,
            cmpt_entry_sz: 0,
            mtt_entry_sz: 0,
            dmpt_entry_sz: 0,
            bmme_flags: 0,
            max_counters: 0,
            reserved_lkey: 0,
            max_icm_sz: 0,
            flags: 0,
            caps2: Caps2::default(),
            func_max_eqs: 0,
            func_rsvd_eqs: 0,
            func_rsvd_uars: 0,
            max_mtu: 0,
            max_vl: 0,
            log_max_gids: 0,
            log_max_pkeys: 0,
            port_cap_mask: 0,
            node_guid: 0,
            node_description: String::new(),
        }
    }

    /// The profile as a profile file, every field citing `source`: a key of `sources`
    /// followed by what it showed, or a text saying `(inferred)`. [`ProfileFile::parse`]
    /// reads it back.
    pub fn to_toml(&self, summary: &str, sources: &Sources, source: &str) -> String {
        let quote = |s: &str| toml::Value::String(s.to_string()).to_string();
        let mut out = format!(
            "name = {}\nsummary = {}\n\n[sources]\n",
            quote(&self.name),
            quote(summary)
        );
        for (k, v) in sources {
            out.push_str(&format!("{k} = {}\n", quote(v)));
        }
        let mut copy = self.clone();
        let mut group_now = String::new();
        for_each_field(&mut copy, |group, key, slot| {
            if group != group_now {
                out.push_str(&format!("\n[{group}]\n"));
                group_now = group.to_string();
            }
            out.push_str(&format!(
                "{key} = {{ value = {}, source = {} }}\n",
                slot_value(&slot),
                quote(source)
            ));
        });
        out
    }

    /// Is flag `bit` ([`dev_cap_flags`]) offered?
    pub fn offers(&self, bit: u64) -> bool {
        self.flags & bit != 0
    }

    /// Bytes of the UAR area at the start of BAR2 (QUERY_DEV_CAP 0x49, §2.4).
    pub fn uar_size(&self) -> u64 {
        1u64 << (u32::from(self.log_uar_sz_mb & 0x3f) + 20).min(62)
    }
    /// Number of 4 KiB UAR pages.
    pub fn num_uars(&self) -> u64 {
        self.uar_size() / 4096
    }
    pub fn bf_reg_size(&self) -> u64 {
        1u64 << (self.log_bf_reg_size & 0x1f)
    }
    pub fn bf_regs_per_page(&self) -> u64 {
        1u64 << (self.log_bf_regs_per_page & 0x3f).min(12)
    }
    pub fn reserved_qps(&self) -> u32 {
        1 << (self.log_rsvd_qps & 0xf)
    }
    pub fn reserved_cqs(&self) -> u32 {
        1 << (self.log_rsvd_cqs & 0xf)
    }
    pub fn reserved_eqs(&self) -> u32 {
        1 << (self.log_rsvd_eqs & 0xf)
    }
    pub fn reserved_mrws(&self) -> u32 {
        1 << (self.log_rsvd_mrws & 0xf)
    }
    pub fn reserved_mtts(&self) -> u32 {
        1 << (self.log_rsvd_mtts & 0xf)
    }
    pub fn reserved_srqs(&self) -> u32 {
        1 << (self.log_rsvd_srqs & 0xf)
    }
    /// Sanity check of an edited profile; `Fabric::add_hca` refuses nonsense.
    pub fn validate(&self) -> Result<(), String> {
        let pow2 = |v: u64| v != 0 && v.is_power_of_two();
        if !pow2(self.bar0_size) || self.bar0_size < (1 << 20) {
            return Err("BAR0 must be a power of two >= 1 MiB (§1.1)".into());
        }
        if !pow2(self.bar2_size) || self.bar2_size < self.uar_size() {
            return Err("BAR2 must be a power of two >= the UAR area (§1.1)".into());
        }
        if self.blueflame && self.bar2_size < 2 * self.uar_size() {
            return Err("BlueFlame needs BAR2 >= 2 x UAR area (§1.1)".into());
        }
        if self.num_ports == 0 || self.num_ports > 2 {
            return Err("ConnectX-3 has one or two ports".into());
        }
        if self.msix_vectors == 0 || self.msix_vectors > 256 {
            return Err("MSI-X table holds 1..=256 vectors (one 4 KiB page)".into());
        }
        if self.mtt_entry_sz != 8 {
            return Err("MTT entry size must be 8 (§2.4 0x90)".into());
        }
        if self.fw_pages == 0 {
            return Err("fw_pages must be non-zero".into());
        }
        if self.log_min_page_sz > 12 {
            return Err("the minimum page size must be at most 4 KiB (Linux refuses more)".into());
        }
        if self.hca_core_clock_mhz == 0 {
            return Err("the core clock must be non-zero".into());
        }
        if self.board_id.len() > 16 || self.node_description.len() > 64 {
            return Err("board id is at most 16 bytes, node description at most 64".into());
        }
        if self.num_sys_eqs != 0
            && (self.func_max_eqs == 0
                || self.func_max_eqs > self.num_sys_eqs
                || self.func_rsvd_eqs >= self.func_max_eqs)
        {
            return Err("SYS_EQS: QUERY_FUNC's max EQs must be in 1..=num_sys_eqs and above its reserved EQs".into());
        }
        if (self.caps2.cqe_stride || self.caps2.eqe_stride)
            && !(self.offers(dev_cap_flags::CQE_64B) && self.offers(dev_cap_flags::EQE_64B))
        {
            return Err("CQE/EQE strides need 64-byte CQEs and EQEs".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_profile_loads_with_its_name() {
        for name in DeviceProfile::names() {
            let f = DeviceProfile::file(name).unwrap();
            assert_eq!(f.profile.name, name);
            assert!(!f.summary.is_empty());
        }
        assert_eq!(DeviceProfile::default().name, DEFAULT_PROFILE);
        assert!(DeviceProfile::names().contains(&DEFAULT_PROFILE));
    }

    #[test]
    fn every_field_of_every_built_in_profile_cites_a_source() {
        for name in DeviceProfile::names() {
            let f = DeviceProfile::file(name).unwrap();
            let mut fields = 0;
            for_each_field(&mut f.profile.clone(), |group, key, _| {
                fields += 1;
                let c = &f.citations[&format!("{group}.{key}")];
                assert!(cited(c, &f.sources).is_ok(), "{name} {group}.{key}: {c}");
            });
            assert_eq!(f.citations.len(), fields, "{name}");
        }
    }

    #[test]
    fn an_unknown_name_lists_the_profiles() {
        let e = DeviceProfile::named("cx9").unwrap_err();
        let msg = e.to_string();
        for name in DeviceProfile::names() {
            assert!(msg.contains(name), "{msg}");
        }
    }

    #[test]
    fn a_profile_round_trips_through_its_file_format() {
        let mut sources = Sources::new();
        sources.insert("diag".into(), "a mode=diag report".into());
        for p in DeviceProfile::all() {
            let text = p.to_toml("round trip", &sources, "diag: reported");
            let back = ProfileFile::parse(&text).unwrap();
            assert_eq!(back.profile, p);
            assert_eq!(back.summary, "round trip");
        }
    }

    #[test]
    fn the_loader_refuses_what_would_drift() {
        let mut sources = Sources::new();
        sources.insert("s".into(), "somewhere".into());
        let good = DeviceProfile::default().to_toml("x", &sources, "s: here");
        assert!(ProfileFile::parse(&good).is_ok());
        let cases = [
            (
                good.replace("rc = { value = true, source = \"s: here\" }\n", ""),
                "flags.rc is missing",
            ),
            (
                good.replace(
                    "[flags]\n",
                    "[flags]\nsuper_speed = { value = true, source = \"s: x\" }\n",
                ),
                "flags.super_speed is not a profile field",
            ),
            (
                good.replacen("source = \"s: here\"", "source = \"a blog\"", 1),
                "neither starts with a [sources] key",
            ),
            (
                good.replace("num_ports = { value = 1,", "num_ports = { value = 3,"),
                "one or two ports",
            ),
            (
                good.replace("revision = { value = 0,", "revision = { value = 256,"),
                "out of range",
            ),
            (
                format!("{good}\n[extras]\nx = 1\n"),
                "[extras] is not a profile group",
            ),
        ];
        for (text, needle) in cases {
            let e = ProfileFile::parse(&text).unwrap_err();
            assert!(e.contains(needle), "{needle}: {e}");
        }
    }
}
