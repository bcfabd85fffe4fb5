//! The capability report `mode=diag` prints: every capability the device reported, where it
//! came from, and what the driver made of it, in lines a user pastes into a bug report and a
//! host tool reads back into a device profile file (`sim::diag_profile`).
//!
//! Line kinds (the kernel prefixes each with `diag: `):
//!
//! - `cap <group>.<key> = <value>  # <where>; driver: <what it did with it>`: one field of a
//!   device profile file (`sim/profiles/*.toml`, groups `pci`, `firmware`, `dev_cap`,
//!   `flags`, `caps2`, `query_func`, `port`), in that file's encoding (logs as logs, counts as
//!   counts) and with the file's key. The part up to `#` is a TOML key-value line; the value
//!   is a decimal or `0x` hex integer, `true`/`false`, or a TOML basic string.
//! - `info <text>`: what the device reported that no profile field holds (every flag bit by
//!   Linux's name, the flags2 capabilities, the second port).
//! - `chose <what> = <value>  # <why>`: a decision of the driver's that follows from several
//!   fields (INIT_HCA's flags, ICM tables, EQs, UAR page, steering).
//! - `raw <QUERY> <offset>: <16 bytes>`: the query outputs as the firmware wrote them
//!   (QUERY_FW, QUERY_DEV_CAP, QUERY_ADAPTER, QUERY_FUNC in SYS_EQS mode, QUERY_PORT).
//!
//! The report never stops early: a query that fails becomes an `info ... failed` line and its
//! fields are missing, which the host tool names.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write};

use crate::be::BeBytes;
use crate::fw::{flag, flag2};
use crate::hca::Steering;
use crate::icm::Table;
use crate::outbox;
use crate::platform::Platform;
use crate::regs::Opcode;
use crate::Hca;

/// SMP attribute NodeDescription (IBA 14.2.5.2): 64 bytes of text.
const NODE_DESCRIPTION: u16 = 0x0010;
/// PortInfo CapabilityMask: SMP data bytes 20..24 (IBA 14.2.5.6).
const PORT_INFO_CAP_MASK: usize = 20;
/// QUERY_HCA's core clock, in MHz (Linux fw.c `QUERY_HCA_CORE_CLOCK_OFFSET`).
const QUERY_HCA_CORE_CLOCK: usize = 0x0C;
/// QUERY_PORT output bytes kept for the report (the fields Linux reads end at 0x0C).
const QUERY_PORT_BYTES: usize = 0x10;

/// A capability's value as the report writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// A count or a log, written in decimal.
    Dec(u64),
    /// An identifier, mask or size, written as `0x` hex.
    Hex(u64),
    Bool(bool),
    Text(String),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Dec(v) => write!(f, "{v}"),
            Value::Hex(v) => write!(f, "{v:#x}"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Text(s) => {
                // A TOML basic string: quote and backslash escaped, control characters as
                // \uXXXX.
                f.write_char('"')?;
                for c in s.chars() {
                    match c {
                        '"' => f.write_str("\\\"")?,
                        '\\' => f.write_str("\\\\")?,
                        c if (c as u32) < 0x20 || c as u32 == 0x7F => {
                            write!(f, "\\u{:04X}", c as u32)?
                        }
                        c => f.write_char(c)?,
                    }
                }
                f.write_char('"')
            }
        }
    }
}

/// Text up to the first NUL, bytes outside printable ASCII as U+00XX.
fn text(bytes: &[u8]) -> String {
    bytes
        .iter()
        .take_while(|&&b| b != 0)
        .map(|&b| b as char)
        .collect()
}

/// The report, line by line (without the kernel's `diag: ` prefix).
#[derive(Clone, Debug, Default)]
pub struct CapsReport {
    pub lines: Vec<String>,
}

impl CapsReport {
    fn cap(
        &mut self,
        group: &str,
        key: &str,
        value: Value,
        from: impl fmt::Display,
        driver: impl fmt::Display,
    ) {
        let driver = format!("{driver}");
        let mut line = format!("cap {group}.{key} = {value}  # {from}");
        if !driver.is_empty() {
            let _ = write!(line, "; driver: {driver}");
        }
        self.lines.push(line);
    }

    fn info(&mut self, text: impl fmt::Display) {
        self.lines.push(format!("info {text}"));
    }

    fn chose(&mut self, what: &str, value: impl fmt::Display, why: impl fmt::Display) {
        self.lines.push(format!("chose {what} = {value}  # {why}"));
    }

    fn raw(&mut self, query: &str, bytes: &[u8]) {
        for (i, row) in bytes.chunks(16).enumerate() {
            let mut line = format!("raw {query} {:03x}:", i * 16);
            for b in row {
                let _ = write!(line, " {b:02x}");
            }
            self.lines.push(line);
        }
    }
}

impl<P: Platform> Hca<P> {
    /// The capability report of this device (module documentation). `bar_sizes`: the sizes
    /// of BAR0 and BAR2 as the platform's PCI enumeration found them (the driver does not
    /// size BARs itself), `None` where unknown. Issues QUERY_HCA, QUERY_PORT and MAD_IFC
    /// (NodeDescription, PortInfo) besides what bring-up already asked.
    pub fn capability_report(&mut self, bar_sizes: [Option<u64>; 2]) -> CapsReport {
        let mut r = CapsReport::default();
        self.report_pci(&mut r, bar_sizes);
        self.report_firmware(&mut r);
        self.report_dev_cap(&mut r);
        self.report_flags(&mut r);
        self.report_query_func(&mut r);
        self.report_ports(&mut r);
        self.report_choices(&mut r);
        r.raw("QUERY_FW", &self.raw.fw[..0x60]);
        r.raw("QUERY_DEV_CAP", &self.raw.dev_cap);
        r.raw("QUERY_ADAPTER", &self.raw.adapter);
        if let Some(func) = self.raw.func {
            r.raw("QUERY_FUNC", &func[..0x20]);
        }
        r
    }

    fn report_pci(&mut self, r: &mut CapsReport, bar_sizes: [Option<u64>; 2]) {
        let id = self.p.config_read32(0x00);
        let class = self.p.config_read32(0x08);
        let sub = self.p.config_read32(0x2C);
        let g = "pci";
        r.cap(
            g,
            "vendor_id",
            Value::Hex(u64::from(id & 0xFFFF)),
            "config 0x00",
            "",
        );
        r.cap(
            g,
            "device_id",
            Value::Hex(u64::from(id >> 16)),
            "config 0x02",
            "drives 0x1003 (PF) and 0x1007 (ConnectX-3 Pro PF)",
        );
        r.cap(
            g,
            "subsystem_vendor_id",
            Value::Hex(u64::from(sub & 0xFFFF)),
            "config 0x2C",
            "",
        );
        r.cap(
            g,
            "subsystem_id",
            Value::Hex(u64::from(sub >> 16)),
            "config 0x2E",
            "",
        );
        r.cap(
            g,
            "revision",
            Value::Dec(u64::from(class & 0xFF)),
            "config 0x08",
            "",
        );
        r.cap(
            g,
            "class_code",
            Value::Hex(u64::from(class >> 8)),
            "config 0x09",
            "",
        );
        let bar_note = [
            "the registers (HCR, clear-interrupt, catastrophic error buffer, MSI-X table)",
            "UAR pages, then BlueFlame registers",
        ];
        for (i, (key, size)) in ["bar0_size", "bar2_size"].iter().zip(bar_sizes).enumerate() {
            match size {
                Some(s) => r.cap(
                    g,
                    key,
                    Value::Dec(s),
                    "BAR sizing by the platform",
                    bar_note[i],
                ),
                None => r.info(format_args!("pci.{key}: not known to the platform")),
            }
        }
        match self.find_cap(0x11) {
            Some(cap) => {
                let control = self.p.config_read32(cap) >> 16;
                r.cap(
                    g,
                    "msix_vectors",
                    Value::Dec(u64::from(control & 0x7FF) + 1),
                    format_args!("MSI-X capability at {cap:#x}, table size + 1"),
                    format_args!("one vector (0) for both EQs; interrupts now {:?}", self.irq),
                );
            }
            None => r.info("pci.msix_vectors: no MSI-X capability"),
        }
    }

    fn report_firmware(&mut self, r: &mut CapsReport) {
        let f = self.fw;
        let g = "firmware";
        r.cap(
            g,
            "fw_major",
            Value::Dec(f.major.into()),
            "QUERY_FW 0x02",
            "",
        );
        r.cap(
            g,
            "fw_minor",
            Value::Dec(f.minor.into()),
            "QUERY_FW 0x06",
            "",
        );
        r.cap(
            g,
            "fw_subminor",
            Value::Dec(f.subminor.into()),
            "QUERY_FW 0x04",
            "",
        );
        r.cap(
            g,
            "cmd_if_rev",
            Value::Dec(f.cmd_if_rev.into()),
            "QUERY_FW 0x0A",
            "needs 3 (the new port commands), as Linux uses them from 3",
        );
        r.cap(
            g,
            "fw_pages",
            Value::Dec(f.fw_pages.into()),
            "QUERY_FW 0x00, 4 KiB pages",
            format_args!("MAP_FA of {} KiB", self.mem.fa_bytes / 1024),
        );
        r.cap(
            g,
            "log_max_cmds",
            Value::Dec(f.log_max_cmds.into()),
            "QUERY_FW 0x0F",
            "one command outstanding at a time",
        );
        r.cap(
            g,
            "inta_pin",
            Value::Dec(self.adapter.inta_pin.into()),
            "QUERY_ADAPTER 0x10",
            "the clear-interrupt bit for INTx",
        );
        r.cap(
            g,
            "board_id",
            Value::Text(text(&self.adapter.board_id)),
            "QUERY_ADAPTER 0xF0, each dword byte-swapped",
            "",
        );
        match self.cmd_out(Opcode::QUERY_HCA, 0, 0, 0) {
            Ok(()) => {
                let mut clock = [0u8; 4];
                let out = self.cmd.outbox();
                if out.len() >= QUERY_HCA_CORE_CLOCK + 4 {
                    clock.copy_from_slice(&out[QUERY_HCA_CORE_CLOCK..QUERY_HCA_CORE_CLOCK + 4]);
                }
                r.cap(
                    g,
                    "hca_core_clock_mhz",
                    Value::Dec(u32::from_be_bytes(clock).into()),
                    "QUERY_HCA 0x0C (issued for this report)",
                    "not used: no CQE timestamps",
                );
            }
            Err(e) => r.info(format_args!("QUERY_HCA failed: {e}")),
        }
    }

    fn report_dev_cap(&mut self, r: &mut CapsReport) {
        use zerocopy::FromBytes;
        let Ok(o) = outbox::QueryDevCap::ref_from_bytes(&self.raw.dev_cap[..]) else {
            return;
        };
        let c = self.caps;
        let layout = self.profile.clone();
        let table = |t: Table| layout.as_ref().map_or(0, |p| p.get(t).num);
        let g = "dev_cap";
        let dec = |v: u8| Value::Dec(v.into());
        let at = |off: usize, bits: &str| format!("QUERY_DEV_CAP {off:#04x}{bits}");
        r.cap(
            g,
            "log_max_qp_sz",
            dec(o.log_max_qp_sz),
            at(0x11, ""),
            "the largest QP ring it accepts",
        );
        r.cap(
            g,
            "log_rsvd_qps",
            dec(o.log_rsvd_qps & 0xF),
            at(0x12, " bits 3:0"),
            format_args!("its QPNs start at {}", c.reserved_qps),
        );
        r.cap(
            g,
            "log_max_qps",
            dec(o.log_max_qps & 0x1F),
            at(0x13, " bits 4:0"),
            format_args!("QP table of {}", table(Table::Qpc)),
        );
        r.cap(
            g,
            "log_rsvd_srqs",
            dec(o.log_rsvd_srqs >> 4),
            at(0x14, " bits 7:4"),
            format_args!("its SRQNs start at {}", c.reserved_srqs),
        );
        r.cap(
            g,
            "log_max_srqs",
            dec(o.log_max_srqs & 0x1F),
            at(0x15, " bits 4:0"),
            format_args!("SRQ table of {}", table(Table::Srqc)),
        );
        r.cap(
            g,
            "log_max_srq_sz",
            dec(o.log_max_srq_sz),
            at(0x10, ""),
            "the largest SRQ it accepts",
        );
        r.cap(
            g,
            "log_max_cq_sz",
            dec(o.log_max_cq_sz),
            at(0x19, ""),
            "the largest CQ it accepts",
        );
        r.cap(
            g,
            "log_rsvd_cqs",
            dec(o.log_rsvd_cqs & 0xF),
            at(0x1A, " bits 3:0"),
            format_args!("its CQNs start at {}", c.reserved_cqs),
        );
        r.cap(
            g,
            "log_max_cqs",
            dec(o.log_max_cqs & 0x1F),
            at(0x1B, " bits 4:0"),
            format_args!("CQ table of {}", table(Table::Cqc)),
        );
        r.cap(
            g,
            "log_max_mpts",
            dec(o.log_max_mpts & 0x3F),
            at(0x1D, " bits 5:0"),
            format_args!("dMPT table of {}", table(Table::Dmpt)),
        );
        r.cap(
            g,
            "log_rsvd_eqs",
            dec(o.log_rsvd_eqs & 0xF),
            at(0x1E, " bits 3:0"),
            format_args!(
                "{} EQs reserved (legacy mode: at least 4 per reserved UAR page)",
                c.reserved_eqs
            ),
        );
        r.cap(
            g,
            "log_max_eqs",
            dec(o.log_max_eqs & 0xF),
            at(0x1F, " bits 3:0"),
            format_args!("EQ table of {}", table(Table::Eqc)),
        );
        r.cap(
            g,
            "log_rsvd_mtts",
            dec(o.log_rsvd_mtts >> 4),
            at(0x20, " bits 7:4"),
            format_args!(
                "its MTT entries start at {} (rounded to whole cache lines)",
                crate::icm::reserved_mtts(&c)
            ),
        );
        r.cap(
            g,
            "log_rsvd_mrws",
            dec(o.log_rsvd_mrws & 0xF),
            at(0x22, " bits 3:0"),
            format_args!("its MPT indices start at {}", c.reserved_mrws),
        );
        r.cap(
            g,
            "num_sys_eqs",
            Value::Dec((o.num_sys_eqs.get() & 0xFFF).into()),
            at(0x26, " bits 11:0"),
            if c.num_sys_eqs != 0 {
                "SYS_EQS mode: QUERY_FUNC after INIT_HCA, INIT_HCA num_sys_eqs"
            } else {
                "0: legacy EQ mode"
            },
        );
        r.cap(
            g,
            "log_max_req_rdma",
            dec(o.log_max_rd_req & 0x3F),
            at(0x29, " bits 5:0"),
            "bounds a QP's initiator depth",
        );
        r.cap(
            g,
            "log_max_res_rdma",
            dec(o.log_max_rd_res & 0x3F),
            at(0x2B, " bits 5:0"),
            format_args!(
                "bounds a QP's responder resources; RDMARC of 2^{} per QP",
                layout.as_ref().map_or(0, |p| p.log_rdmarc_per_qp)
            ),
        );
        r.cap(
            g,
            "log_max_rdma_global",
            dec(o.log_max_rdma & 0x3F),
            at(0x2F, " bits 5:0"),
            "",
        );
        r.cap(
            g,
            "local_ca_ack_delay",
            dec(o.local_ca_ack_delay & 0x1F),
            at(0x35, " bits 4:0"),
            "reported by query_device",
        );
        r.cap(
            g,
            "num_ports",
            dec(o.num_ports & 0xF),
            at(0x37, " bits 3:0"),
            "INIT_PORT on each (at most 2)",
        );
        r.cap(
            g,
            "log_max_msg",
            dec(o.log_max_msg & 0x1F),
            at(0x38, " bits 4:0"),
            "the QP context's log_max_msg",
        );
        r.cap(
            g,
            "stat_rate_support",
            Value::Hex(o.stat_rate_support.get().into()),
            at(0x3C, ""),
            "a requested static rate is lowered to one whose bit (rate + 5) is set, down to 2.5 Gb/s",
        );
        r.cap(
            g,
            "rsvd_uars",
            dec(o.rsvd_uars >> 4),
            at(0x48, " bits 7:4, a count"),
            format_args!(
                "{} UAR pages kept below its own",
                self.choices.reserved_uars
            ),
        );
        r.cap(
            g,
            "log_uar_sz_mb",
            dec(o.uar_size & 0x3F),
            at(0x49, " bits 5:0"),
            format_args!("{} UAR pages, INIT_HCA log_uar_sz", c.num_uars()),
        );
        r.cap(
            g,
            "log_min_page_sz",
            dec(o.log_min_page_sz),
            at(0x4B, ""),
            "4 KiB pages everywhere (Linux refuses a minimum above 4 KiB)",
        );
        r.cap(
            g,
            "blueflame",
            Value::Bool(o.bf & 0x80 != 0),
            at(0x4C, " bit 7"),
            format_args!("{} BlueFlame registers per page used", self.bf_per_page()),
        );
        r.cap(
            g,
            "log_bf_reg_size",
            dec(o.log_bf_reg_sz & 0x1F),
            at(0x4D, " bits 4:0"),
            "",
        );
        r.cap(
            g,
            "log_bf_regs_per_page",
            dec(o.log_bf_regs_per_page & 0x3F),
            at(0x4E, " bits 5:0"),
            "",
        );
        r.cap(
            g,
            "max_sg_sq",
            dec(o.max_sq_sg),
            at(0x51, ""),
            "bounds a send WQE's scatter/gather entries",
        );
        r.cap(
            g,
            "max_sq_desc_sz",
            Value::Dec(o.max_sq_desc_sz.get().into()),
            at(0x52, ""),
            "bounds a send WQE's size",
        );
        r.cap(
            g,
            "max_sg_rq",
            dec(o.max_rq_sg),
            at(0x55, ""),
            "bounds a receive WQE's scatter/gather entries",
        );
        r.cap(
            g,
            "max_rq_desc_sz",
            Value::Dec(o.max_rq_desc_sz.get().into()),
            at(0x56, ""),
            "",
        );
        r.cap(
            g,
            "rsvd_pds",
            dec(o.rsvd_pds >> 4),
            at(0x64, " bits 7:4, a count"),
            "its PDs start after them",
        );
        r.cap(
            g,
            "log_max_pds",
            dec(o.log_max_pds & 0x3F),
            at(0x65, " bits 5:0"),
            "",
        );
        r.cap(
            g,
            "rsvd_xrcds",
            dec(o.rsvd_xrcds >> 4),
            at(0x66, " bits 7:4, a count"),
            format_args!(
                "XRC domain {} in a basic SRQ (the reserved count with flag xrc, else 0)",
                self.choices.xrcd
            ),
        );
        r.cap(
            g,
            "log_max_xrcds",
            dec(o.log_max_xrcds & 0x1F),
            at(0x67, " bits 4:0"),
            "",
        );
        let entries: [(&str, usize, u16, Option<Table>); 10] = [
            (
                "rdmarc_entry_sz",
                0x80,
                o.rdmarc_entry_sz.get(),
                Some(Table::Rdmarc),
            ),
            ("qpc_entry_sz", 0x82, o.qpc_entry_sz.get(), Some(Table::Qpc)),
            (
                "auxc_entry_sz",
                0x84,
                o.auxc_entry_sz.get(),
                Some(Table::Auxc),
            ),
            (
                "altc_entry_sz",
                0x86,
                o.altc_entry_sz.get(),
                Some(Table::Altc),
            ),
            ("eqc_entry_sz", 0x88, o.eqc_entry_sz.get(), Some(Table::Eqc)),
            ("cqc_entry_sz", 0x8A, o.cqc_entry_sz.get(), Some(Table::Cqc)),
            (
                "srq_entry_sz",
                0x8C,
                o.srq_entry_sz.get(),
                Some(Table::Srqc),
            ),
            (
                "cmpt_entry_sz",
                0x8E,
                o.cmpt_entry_sz.get(),
                Some(Table::Cmpt),
            ),
            ("mtt_entry_sz", 0x90, o.mtt_entry_sz.get(), Some(Table::Mtt)),
            (
                "dmpt_entry_sz",
                0x92,
                o.dmpt_entry_sz.get(),
                Some(Table::Dmpt),
            ),
        ];
        for (key, off, v, t) in entries {
            let note = t
                .and_then(|t| layout.as_ref().map(|p| *p.get(t)))
                .map(|l| {
                    format!(
                        "ICM table of {} x {} bytes at {:#x}",
                        l.num, l.entry, l.base
                    )
                })
                .unwrap_or_default();
            r.cap(g, key, Value::Dec(v.into()), at(off, ""), note);
        }
        r.cap(
            g,
            "bmme_flags",
            Value::Hex(o.bmme_flags.get().into()),
            at(0x94, ""),
            format_args!(
                "memory windows {} in INIT_HCA (flag memory_windows or bit 9, type-2 windows)",
                if self.choices.mw_enabled {
                    "enabled"
                } else {
                    "not enabled"
                }
            ),
        );
        r.cap(
            g,
            "max_counters",
            Value::Dec(o.max_counters.get().into()),
            at(0x68, ""),
            if c.flags & flag::COUNTERS != 0 {
                format!(
                    "read with flag counters, as Linux; counter {} is the sink",
                    c.max_counters.saturating_sub(1)
                )
            } else {
                String::from("ignored: flag counters is clear, as Linux ignores it")
            },
        );
        r.cap(
            g,
            "reserved_lkey",
            Value::Hex(o.reserved_lkey.get().into()),
            at(0x98, ""),
            "",
        );
        r.cap(
            g,
            "max_icm_sz",
            Value::Dec(o.max_icm_sz.get()),
            at(0xA0, ""),
            format_args!("ICM of {} bytes", self.mem.icm_virtual),
        );
    }

    fn report_flags(&mut self, r: &mut CapsReport) {
        let c = self.caps;
        let ch = self.choices;
        let flags = c.flags;
        for &(key, bit, note) in PROFILE_FLAGS {
            let driver = match bit {
                flag::IPOIB_CSUM | flag::COUNTERS | flag::RSS_IP_FRAG => {
                    if flags & bit != 0 {
                        "enabled in INIT_HCA"
                    } else {
                        "not enabled"
                    }
                }
                flag::EQE_64B => {
                    if ch.eqe_size == 64 {
                        "64-byte EQEs enabled in INIT_HCA"
                    } else {
                        "32-byte EQEs"
                    }
                }
                flag::CQE_64B => {
                    if ch.cqe_size == 64 {
                        "64-byte CQEs enabled in INIT_HCA"
                    } else {
                        "32-byte CQEs"
                    }
                }
                flag::PORT_MNG_CHG_EV => {
                    if flags & bit != 0 {
                        "event 0x1D mapped to the async EQ"
                    } else {
                        "not mapped"
                    }
                }
                flag::VEP_UC_STEER | flag::VEP_MC_STEER => match ch.steering {
                    Steering::B0 => "B0 steering (both VEP flags)",
                    Steering::A0 => "A0 steering",
                },
                flag::MEM_WINDOW => {
                    if ch.mw_enabled {
                        "memory windows enabled in INIT_HCA"
                    } else {
                        "not enabled"
                    }
                }
                _ => note,
            };
            let n = bit.trailing_zeros();
            let word = if n >= 32 { 0x40 } else { 0x44 };
            r.cap(
                "flags",
                key,
                Value::Bool(flags & bit != 0),
                format_args!("QUERY_DEV_CAP {word:#04x} bit {} (flag {n})", n % 32),
                driver,
            );
        }
        let caps2: [(&str, u64, &str); 6] = [
            (
                "sw_cq_init",
                flag2::SW_CQ_INIT,
                if ch.sw_cq_init {
                    "CQEs filled with 0xCC, SW2HW_CQ op_mod 1"
                } else {
                    "the device initialises CQEs"
                },
            ),
            (
                "recoverable_error_event",
                flag2::RECOVERABLE_ERROR_EVENT,
                if ch.init_hca_flags2 != 0 {
                    "enabled in INIT_HCA, event 0x3E mapped to the async EQ"
                } else {
                    "not enabled"
                },
            ),
            (
                "cqe_stride",
                flag2::CQE_STRIDE,
                "not used: strides beyond 64 bytes are for 128-byte cache lines",
            ),
            (
                "eqe_stride",
                flag2::EQE_STRIDE,
                "not used: strides beyond 64 bytes are for 128-byte cache lines",
            ),
            ("timestamp", flag2::TS, "not used: no CQE timestamps"),
            (
                "flow_steering",
                flag2::FS_EN,
                "not used: Linux takes device-managed steering only when asked",
            ),
        ];
        for (key, f, note) in caps2 {
            let from = flag2::SOURCES
                .iter()
                .find(|s| s.0 == f)
                .map(|&(_, name, off, width, bit)| {
                    if bit == u32::MAX {
                        format!("QUERY_DEV_CAP {off:#04x} ({width} bytes) non-zero, Linux {name}")
                    } else {
                        format!("QUERY_DEV_CAP {off:#04x} bit {bit}, Linux {name}")
                    }
                })
                .unwrap_or_default();
            r.cap("caps2", key, Value::Bool(c.has2(f)), from, note);
        }
        let mut names = String::new();
        for &(bit, name) in flag::NAMES {
            if flags & bit != 0 {
                let _ = write!(names, " {name}");
            }
        }
        let known = flag::NAMES.iter().fold(0u64, |m, &(b, _)| m | b);
        r.info(format_args!(
            "QUERY_DEV_CAP flags {flags:#018x}:{names}{}",
            if flags & !known != 0 {
                format!(" (unnamed bits {:#x})", flags & !known)
            } else {
                String::new()
            }
        ));
        let mut names2 = String::new();
        for &(f, name, ..) in flag2::SOURCES {
            if c.flags2 & f != 0 {
                let _ = write!(names2, " {name}");
            }
        }
        r.info(format_args!("flags2 {:#x}:{names2}", c.flags2));
        r.info(format_args!(
            "ext2 flags (QUERY_DEV_CAP 0x70) {:#010x}",
            c.ext2_flags
        ));
    }

    fn report_query_func(&mut self, r: &mut CapsReport) {
        match self.choices.func {
            Some(f) => {
                let g = "query_func";
                r.cap(
                    g,
                    "func_max_eqs",
                    Value::Dec(f.max_eqs.into()),
                    "QUERY_FUNC 0x06",
                    "",
                );
                r.cap(
                    g,
                    "func_rsvd_eqs",
                    Value::Dec(f.rsvd_eqs.into()),
                    "QUERY_FUNC 0x04",
                    "its EQs follow them",
                );
                r.cap(
                    g,
                    "func_rsvd_uars",
                    Value::Dec(f.rsvd_uars.into()),
                    "QUERY_FUNC 0x0B",
                    format_args!("its UAR page is {}", self.kar),
                );
            }
            None => r.info("query_func: not issued (legacy EQ mode, num_sys_eqs 0, as Linux)"),
        }
    }

    fn report_ports(&mut self, r: &mut CapsReport) {
        let ports = self.caps.num_ports.min(2);
        for port in 1..=ports {
            let at_bring_up = self.caps.ports[usize::from(port) - 1];
            let raw = match self.cmd_out(Opcode::QUERY_PORT, 0, port.into(), 0) {
                Ok(()) => {
                    let mut b = [0u8; QUERY_PORT_BYTES];
                    let out = self.cmd.outbox();
                    let n = out.len().min(QUERY_PORT_BYTES);
                    b[..n].copy_from_slice(&out[..n]);
                    Some(b)
                }
                Err(e) => {
                    r.info(format_args!("port {port}: QUERY_PORT failed: {e}"));
                    None
                }
            };
            let pi = self.mad_get(port, crate::mad::attr::PORT_INFO, port.into());
            if port > 1 {
                r.info(format_args!(
                    "port {port}: max_mtu {} max_vl {} (QUERY_PORT at bring-up){}",
                    at_bring_up.max_mtu,
                    at_bring_up.max_vl,
                    match &pi {
                        Ok(d) => format!(
                            ", PortInfo CapabilityMask {:#010x}",
                            d.be32::<PORT_INFO_CAP_MASK>()
                        ),
                        Err(e) => format!(", PortInfo failed: {e}"),
                    }
                ));
                if let Some(b) = raw {
                    r.raw(&format!("QUERY_PORT{port}"), &b);
                }
                continue;
            }
            let g = "port";
            r.cap(
                g,
                "max_mtu",
                Value::Dec(at_bring_up.max_mtu.into()),
                "QUERY_PORT 0x01 bits 3:0 at bring-up",
                "SET_PORT MTU cap 4096, the port's IB MTU",
            );
            r.cap(
                g,
                "max_vl",
                Value::Dec(at_bring_up.max_vl.into()),
                "QUERY_PORT 0x0B bits 3:0 at bring-up",
                "SET_PORT VL cap: the most data VLs the port takes",
            );
            if let Some(b) = raw {
                r.cap(
                    g,
                    "log_max_gids",
                    Value::Dec((b[0x07] >> 4).into()),
                    "QUERY_PORT 0x07 bits 7:4",
                    "GID index 0 only",
                );
                r.cap(
                    g,
                    "log_max_pkeys",
                    Value::Dec((b[0x07] & 0xF).into()),
                    "QUERY_PORT 0x07 bits 3:0",
                    "P_Key index 0 only",
                );
            }
            match pi {
                Ok(d) => r.cap(
                    g,
                    "port_cap_mask",
                    Value::Hex(d.be32::<PORT_INFO_CAP_MASK>().into()),
                    "PortInfo CapabilityMask (MAD_IFC)",
                    "sets no capability bits of its own",
                ),
                Err(e) => r.info(format_args!("port 1: PortInfo failed: {e}")),
            }
            r.cap(
                g,
                "node_guid",
                Value::Hex(self.node_guid),
                "NodeInfo NodeGUID (MAD_IFC at bring-up)",
                "",
            );
            match self.mad_get(1, NODE_DESCRIPTION, 0) {
                Ok(d) => r.cap(
                    g,
                    "node_description",
                    Value::Text(text(&d)),
                    "NodeDescription (MAD_IFC)",
                    "left as the firmware set it",
                ),
                Err(e) => r.info(format_args!("NodeDescription failed: {e}")),
            }
            if let Some(b) = raw {
                r.raw("QUERY_PORT1", &b);
            }
        }
    }

    fn report_choices(&mut self, r: &mut CapsReport) {
        let ch = self.choices;
        r.chose(
            "init_hca.flags",
            format_args!("{:#010x}", ch.init_hca_flags),
            "INIT_HCA 0x14: UD address-vector port check, and checksums, counters, IP fragments as offered",
        );
        r.chose(
            "init_hca.flags2",
            format_args!("{:#010x}", ch.init_hca_flags2),
            "INIT_HCA 0x18: recoverable-error events when offered",
        );
        r.chose(
            "init_hca.eqe_cqe",
            format_args!("{:#010x}", ch.eqe_cqe_flags),
            "INIT_HCA 0x58: 64-byte EQEs/CQEs when offered",
        );
        r.chose("eqe_size", ch.eqe_size, "bytes; the event in the last 32");
        r.chose(
            "cqe_size",
            ch.cqe_size,
            "bytes; the completion in the last 32",
        );
        r.chose(
            "steering",
            format_args!("{:?}", ch.steering),
            "B0 with both VEP flags, else A0, as Linux's choose_steering_mode",
        );
        r.chose(
            "driver_version",
            ch.driver_version,
            "INIT_HCA carries the driver's version when flags2 DRIVER_VERSION_TO_FW",
        );
        r.chose(
            "async_event_mask",
            format_args!("{:#018x}", ch.async_event_mask),
            "MAP_EQ to the async EQ",
        );
        r.chose(
            "reserved_eqs",
            ch.reserved_eqs,
            if ch.func.is_some() {
                "QUERY_FUNC's"
            } else {
                "QUERY_DEV_CAP's, at least 4 per reserved UAR page"
            },
        );
        r.chose(
            "reserved_uars",
            ch.reserved_uars,
            if ch.func.is_some() {
                "QUERY_FUNC's"
            } else {
                "QUERY_DEV_CAP's, at least 128 (Linux keeps them for EQ doorbells)"
            },
        );
        r.chose("uar_page", self.kar, "the page of its CQ/QP doorbells");
        for (name, i) in [
            ("async", crate::eq::ASYNC_EQ),
            ("completion", crate::eq::COMP_EQ),
        ] {
            if let Some(eq) = self.eqs.get(i) {
                r.chose(
                    &format!("eq.{name}"),
                    format_args!(
                        "EQ {} of {} x {}-byte entries",
                        eq.eqn,
                        1u32 << eq.log_nent,
                        1u32 << eq.entry_shift
                    ),
                    if i == crate::eq::ASYNC_EQ {
                        "256 + 128 spare, as Linux's async EQ"
                    } else {
                        "the CQ table less the reserved CQs, + 128 spare, as Linux's completion EQs"
                    },
                );
            }
        }
        r.chose(
            "interrupts",
            format_args!("{:?}", self.irq),
            "MSI-X vector 0 when its NOP interrupt arrives, else INTx with the EQs rebuilt",
        );
        if let Some(p) = self.profile.clone() {
            r.chose(
                "icm",
                format_args!("{} bytes", p.total),
                "SET_ICM_SIZE; tables sized to the driver's configuration plus the reserved entries",
            );
        }
    }

    /// The BlueFlame registers of one page the driver hands out (as `setup_resources`).
    fn bf_per_page(&self) -> u32 {
        let c = &self.caps;
        if c.bf && c.bf_reg_size >= 64 && c.bf_regs_per_page > 0 {
            (4096 / c.bf_reg_size).min(c.bf_regs_per_page)
        } else {
            0
        }
    }
}

/// The profile file's `[flags]` keys, their QUERY_DEV_CAP flag bits (Linux's
/// `MLX4_DEV_CAP_FLAG_*` positions), and what the driver does with each it does not decide
/// on (the others are described where the choice is made).
const PROFILE_FLAGS: &[(&str, u64, &str)] = &[
    ("rc", 1 << 0, "RC QPs"),
    ("uc", 1 << 1, "UC QPs"),
    ("ud", 1 << 2, "UD QPs"),
    ("xrc", flag::XRC, "not used except the SRQ's XRC domain"),
    ("srq", flag::SRQ, "SRQs"),
    ("ipoib_csum", flag::IPOIB_CSUM, ""),
    ("bad_pkey_counter", 1 << 8, ""),
    ("bad_qkey_counter", 1 << 9, ""),
    ("dpdp", 1 << 12, "not used: IB ports only"),
    ("big_lso_headers", 1 << 15, "not used: no LSO"),
    ("memory_windows", flag::MEM_WINDOW, ""),
    ("apm", 1 << 17, "not used: no alternate paths"),
    ("atomics", flag::ATOMIC, "atomic operations offered to QPs"),
    ("raw_multicast", 1 << 19, "not used"),
    (
        "ud_av_port_check",
        flag::UD_AV_PORT,
        "enabled in INIT_HCA regardless, as Linux",
    ),
    ("ud_multicast", 1 << 21, "not used: no multicast"),
    ("iboe", 1 << 30, "not used: IB ports only"),
    ("uc_loopback", 1 << 32, "not used (Ethernet)"),
    ("fcs_keep", 1 << 34, "not used (Ethernet)"),
    ("wol_port1", 1 << 37, "not used (Ethernet)"),
    ("wol_port2", 1 << 38, "not used (Ethernet)"),
    ("udp_rss", 1 << 40, "not used (Ethernet)"),
    ("vep_uc_steering", flag::VEP_UC_STEER, ""),
    ("vep_mc_steering", flag::VEP_MC_STEER, ""),
    ("counters", flag::COUNTERS, ""),
    ("rss_ip_fragments", flag::RSS_IP_FRAG, ""),
    ("eth_scheduler", 1 << 53, "not used (Ethernet)"),
    ("port_sensing", 1 << 55, "not used: IB ports only"),
    ("port_mgmt_change_event", flag::PORT_MNG_CHG_EV, ""),
    ("eqe_64b", flag::EQE_64B, ""),
    ("cqe_64b", flag::CQE_64B, ""),
];

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn values_are_written_as_toml_values() {
        assert_eq!(Value::Dec(42).to_string(), "42");
        assert_eq!(Value::Hex(0x15b3).to_string(), "0x15b3");
        assert_eq!(Value::Bool(true).to_string(), "true");
        assert_eq!(
            Value::Text("MT_\"1\"\\x\u{1}".into()).to_string(),
            "\"MT_\\\"1\\\"\\\\x\\u0001\""
        );
    }

    #[test]
    fn text_stops_at_the_first_nul() {
        assert_eq!(text(b"MT_1100120019\0\0\0"), "MT_1100120019");
        assert_eq!(text(b"abc"), "abc");
    }
}
