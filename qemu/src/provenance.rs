//! What a results file says about where its figures came from: emulated or hardware, which
//! kernel (version and git commit, from each console's boot banner) and runner built them,
//! when, on which CPU with which TSC rate and source, which HCA (PCI id, firmware, board, PCIe
//! link), with which configuration and which runner command line.
//!
//! The node facts are read from the consoles: first the `ibkern-node` line a `mode=pingpong`
//! kernel prints after bring-up (`bench::line::NodeLine`, one JSON object, joined again from
//! a wrapped console as the result lines are, so it survives every mangling the figures
//! survive), then for what it does not give (an older kernel, another mode) the lines the
//! kernel prints at boot and bring-up (docs/kernel.md): `boot: ibkern kernel V commit C
//! starting; ...`, `boot: config: ...`, `cpu: ... hypervisor B`, `cpu: model ...`, `tsc: N
//! MHz from SOURCE`, `hca: BDF VVVV:DDDD PCIe link: ...` (or mode=diag's `diag: BDF PCIe link:
//! ...`), `mlx4: firmware X, board Y, ...` and the PCI scan's line of the Mellanox function.
//! A fact a console does not show (a console saved from the middle) is `None`, printed as
//! "unknown".
//!
//! Whether the figures are emulated or from hardware is read from the CPU ([`Evidence`]):
//! QEMU's TCG CPU cannot drive a real card (VFIO needs KVM), and a kernel not under a
//! hypervisor (bare metal) can only have a real one. Anything else (a virtual machine under
//! KVM, whose HCA may be passed through or the model; a console that shows neither) is
//! unknown, never hardware.

use bench::line::{Kind, Line, NodeLine};
use serde_json::{json, Value};

use crate::console_log::{found_lines, unwrapped_lines};

/// What the figures measure under emulation, said wherever they are shown.
pub const EMULATION_NOTE: &str =
    "emulated: times measure QEMU and ibkern's ConnectX-3 model, not an InfiniBand network \
     (each MMIO access is a round trip to the model); compare operations and PCIe \
     transactions per iteration, not microseconds";

/// What the figures may measure when the consoles do not say, said wherever they are shown.
pub const UNKNOWN_NOTE: &str =
    "source unknown: the consoles do not show whether a real ConnectX-3 or ibkern's model \
     under QEMU produced these figures; do not read them as hardware figures";

/// Where the figures were measured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Platform {
    /// QEMU with the model behind its device proxy.
    Emulated {
        /// "tcg" or "kvm".
        accel: String,
        /// `qemu-system-x86_64 --version`'s first line, if it could be run.
        qemu: Option<String>,
    },
    /// A real HCA (bare metal or VFIO), as far as the consoles tell.
    Hardware,
    /// The consoles do not show which: `why` says what they show.
    Unknown { why: String },
}

/// What one console shows about what drove its HCA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Evidence {
    /// QEMU's TCG CPU: the model (a real card needs KVM for VFIO).
    Emulated,
    /// No hypervisor: bare metal, so a real card.
    Hardware,
    /// Neither: why not.
    Unknown(&'static str),
}

/// The facts one console shows about its node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// "UD server", or the file the console was read from.
    pub name: String,
    pub ibkern_version: Option<String>,
    pub ibkern_commit: Option<String>,
    /// The configuration as the kernel logged it (or as the runner wrote it).
    pub config: Option<String>,
    pub cpu: Option<String>,
    /// "2596.145 MHz from Pit".
    pub tsc: Option<String>,
    /// "00:03.0 15b3:1003".
    pub hca: Option<String>,
    pub firmware: Option<String>,
    pub board: Option<String>,
    /// "capable x8 gen3, running x8 gen3".
    pub pcie_link: Option<String>,
    /// CPUID's hypervisor bit.
    pub hypervisor: Option<bool>,
}

fn after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.find(marker).map(|at| line[at + marker.len()..].trim())
}

impl NodeFacts {
    /// Reads the facts from a console (raw or saved: escapes, prefixes, wrapping and padding
    /// are tolerated): its node line's first, then its boot lines' for what is still missing.
    pub fn from_console(name: &str, console: &str) -> NodeFacts {
        let mut n = NodeFacts {
            name: name.to_string(),
            ..NodeFacts::default()
        };
        let node = found_lines(console)
            .into_iter()
            .filter(|f| f.kind == Kind::Node)
            .find_map(|f| match Line::parse(Kind::Node, f.json.ok()?.as_str()) {
                Ok(Line::Node(l)) => Some(l),
                _ => None,
            });
        if let Some(l) = node {
            n.take_node_line(l);
        }
        let set = |slot: &mut Option<String>, v: &str| {
            if slot.is_none() && !v.is_empty() {
                *slot = Some(v.to_string());
            }
        };
        for line in unwrapped_lines(console) {
            if let Some(rest) = after(&line, "boot: ibkern kernel ") {
                let mut words = rest.split_whitespace();
                if let Some(v) = words.next() {
                    set(&mut n.ibkern_version, v);
                }
                if words.next() == Some("commit") {
                    if let Some(c) = words.next() {
                        set(&mut n.ibkern_commit, c);
                    }
                }
            } else if let Some(rest) = after(&line, "boot: config: ") {
                set(&mut n.config, rest);
            } else if let Some(rest) = after(&line, "cpu: model ") {
                set(&mut n.cpu, rest);
            } else if let Some(rest) = after(&line, "cpu: 1G pages ") {
                // "... invariant tsc B, hypervisor B"
                if n.hypervisor.is_none() {
                    n.hypervisor = match rest.rsplit_once("hypervisor ").map(|(_, b)| b.trim()) {
                        Some("true") => Some(true),
                        Some("false") => Some(false),
                        _ => None,
                    };
                }
            } else if let Some(rest) = after(&line, "tsc: ") {
                if rest.contains(" MHz from ") {
                    set(&mut n.tsc, rest);
                }
            } else if let Some(rest) = after(&line, "PCIe link: ") {
                set(&mut n.pcie_link, rest);
                // "hca: 00:03.0 15b3:1003 PCIe link: ..."
                if let Some(id) = after(&line, "hca: ") {
                    let id = id.split(" PCIe link").next().unwrap_or("");
                    set(&mut n.hca, id);
                }
            } else if let Some(rest) = after(&line, "mlx4: firmware ") {
                let mut parts = rest.split(", ");
                if let Some(fw) = parts.next() {
                    set(&mut n.firmware, fw);
                }
                if let Some(b) = parts.next().and_then(|b| b.strip_prefix("board ")) {
                    set(&mut n.board, b);
                }
            } else if let Some(rest) = after(&line, "pci ") {
                // The scan's function line of a Mellanox device: "pci 00:03.0 15b3:1003 class ...".
                let words: Vec<&str> = rest.split_whitespace().collect();
                if words.len() >= 3 && words[1].starts_with("15b3:") && words[2] == "class" {
                    set(&mut n.hca, &format!("{} {}", words[0], words[1]));
                }
            }
        }
        n
    }

    fn take_node_line(&mut self, l: NodeLine) {
        self.tsc = Some(l.tsc());
        let NodeLine {
            version,
            commit,
            cpu,
            hypervisor,
            hca,
            firmware,
            board,
            pcie_link,
            config,
            ..
        } = l;
        let some = |s: String| (!s.is_empty()).then_some(s);
        self.ibkern_version = some(version);
        self.ibkern_commit = some(commit);
        self.cpu = some(cpu);
        self.hypervisor = Some(hypervisor);
        self.hca = some(hca);
        self.firmware = some(firmware);
        self.board = some(board);
        self.pcie_link = pcie_link.and_then(some);
        self.config = some(config);
    }

    /// A CPU brand string QEMU's TCG reports: such a console cannot have driven real hardware
    /// (VFIO needs KVM).
    pub fn is_tcg(&self) -> bool {
        self.cpu
            .as_deref()
            .is_some_and(|c| c.starts_with("QEMU TCG"))
    }

    /// What the console shows about what drove its HCA.
    pub fn evidence(&self) -> Evidence {
        if self.is_tcg() {
            Evidence::Emulated
        } else if self.hypervisor == Some(false) {
            Evidence::Hardware
        } else if self.hypervisor == Some(true) {
            Evidence::Unknown(
                "a virtual machine under KVM, whose HCA may be passed through or ibkern's model",
            )
        } else {
            Evidence::Unknown("the console shows neither the CPU nor its hypervisor bit")
        }
    }

    fn text(v: &Option<String>) -> &str {
        v.as_deref().unwrap_or("unknown")
    }

    /// One line: kernel, CPU, TSC, HCA, configuration.
    pub fn summary(&self) -> String {
        format!(
            "{}: ibkern {} commit {}; CPU {} (hypervisor {}); TSC {}; HCA {} firmware {} board {} PCIe link {}; config {}",
            self.name,
            Self::text(&self.ibkern_version),
            Self::text(&self.ibkern_commit),
            Self::text(&self.cpu),
            match self.hypervisor {
                Some(true) => "yes",
                Some(false) => "no",
                None => "unknown",
            },
            Self::text(&self.tsc),
            Self::text(&self.hca),
            Self::text(&self.firmware),
            Self::text(&self.board),
            Self::text(&self.pcie_link),
            Self::text(&self.config),
        )
    }

    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "ibkern_version": self.ibkern_version,
            "ibkern_commit": self.ibkern_commit,
            "config": self.config,
            "cpu": self.cpu,
            "tsc": self.tsc,
            "hca": self.hca,
            "firmware": self.firmware,
            "board": self.board,
            "pcie_link": self.pcie_link,
            "hypervisor": self.hypervisor,
        })
    }
}

impl Platform {
    /// What consoles of real or emulated nodes (read back by `cargo qemu results`) show:
    /// emulated when every one shows QEMU's TCG CPU, hardware when every one ran on bare
    /// metal, otherwise unknown (never hardware by default).
    pub fn of_consoles(nodes: &[NodeFacts]) -> Platform {
        let all = |e: Evidence| !nodes.is_empty() && nodes.iter().all(|n| n.evidence() == e);
        if all(Evidence::Emulated) {
            return Platform::Emulated {
                accel: "tcg".to_string(),
                qemu: None,
            };
        }
        if all(Evidence::Hardware) {
            return Platform::Hardware;
        }
        let why = nodes
            .iter()
            .map(|n| match n.evidence() {
                Evidence::Emulated => format!("{}: QEMU's TCG CPU (emulated)", n.name),
                Evidence::Hardware => format!("{}: bare metal (hardware)", n.name),
                Evidence::Unknown(why) => format!("{}: {why}", n.name),
            })
            .collect::<Vec<_>>()
            .join("; ");
        Platform::Unknown {
            why: if why.is_empty() {
                "no console".to_string()
            } else {
                why
            },
        }
    }
}

/// Everything a results file says about its origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provenance {
    pub platform: Platform,
    /// The runner's version and git commit (its build).
    pub runner: String,
    /// When the run (or the `results` command) started, UTC, ISO 8601.
    pub date: String,
    /// The host's CPU (`/proc/cpuinfo`), which is what an emulated guest's times depend on.
    pub host_cpu: Option<String>,
    /// The runner's command line, shell-quoted.
    pub command_line: String,
    /// One per console, in node order.
    pub nodes: Vec<NodeFacts>,
}

/// The runner's own version and build commit.
pub fn runner_version() -> String {
    format!(
        "ibkern-qemu {} commit {}",
        env!("CARGO_PKG_VERSION"),
        env!("IBKERN_GIT_COMMIT")
    )
}

/// The host CPU's model name from `/proc/cpuinfo`.
pub fn host_cpu() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// `qemu --version`'s first line.
pub fn qemu_version(qemu: &std::path::Path) -> Option<String> {
    let out = std::process::Command::new(qemu)
        .arg("--version")
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .map(str::to_string)
}

/// This process's command line, shell-quoted, the program shown as `cargo qemu`.
pub fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut words = vec!["cargo qemu".to_string()];
    words.extend(args.iter().map(|a| crate::command::shell_quote(a)));
    words.join(" ")
}

/// The current time, UTC, ISO 8601 (`2026-11-25T08:45:12Z`).
pub fn now_iso() -> String {
    let name = crate::run_dir::now_name();
    // YYYY-MM-DDTHH-MM-SSZ -> YYYY-MM-DDTHH:MM:SSZ
    match name.split_once('T') {
        Some((d, t)) => format!("{d}T{}", t.replace('-', ":")),
        None => name,
    }
}

impl Provenance {
    /// For consoles this process ran and watched: `nodes` read from them, `platform` as
    /// given, date, host CPU, runner and command line of this process.
    pub fn of_this_run(platform: Platform, date: String, nodes: Vec<NodeFacts>) -> Provenance {
        Provenance {
            platform,
            runner: runner_version(),
            date,
            host_cpu: host_cpu(),
            command_line: command_line(),
            nodes,
        }
    }

    pub fn emulated(&self) -> bool {
        matches!(self.platform, Platform::Emulated { .. })
    }

    /// The mark a table or plot title carries when its figures are not known to be from
    /// hardware: "EMULATED" or "SOURCE UNKNOWN".
    pub fn title_mark(&self) -> Option<&'static str> {
        match self.platform {
            Platform::Emulated { .. } => Some("EMULATED"),
            Platform::Unknown { .. } => Some("SOURCE UNKNOWN"),
            Platform::Hardware => None,
        }
    }

    /// A plot's title with the mark in front (`EMULATED: ...`), so a cropped figure keeps it.
    pub fn marked(&self, title: &str) -> String {
        match self.title_mark() {
            Some(m) => format!("{m}: {title}"),
            None => title.to_string(),
        }
    }

    /// What follows a table's title: `[EMULATED: ...]`, `[SOURCE UNKNOWN: ...]`, or nothing.
    pub fn table_mark(&self) -> Option<String> {
        let why = match self.platform {
            Platform::Emulated { .. } => "times measure QEMU and the model, not the network",
            Platform::Unknown { .. } => {
                "the consoles do not show whether a real HCA or ibkern's model ran"
            }
            Platform::Hardware => return None,
        };
        self.title_mark().map(|m| format!("[{m}: {why}]"))
    }

    /// What the platform line says.
    pub fn platform_text(&self) -> String {
        match &self.platform {
            Platform::Emulated { accel, qemu } => format!(
                "emulated (QEMU {accel}{}; the ConnectX-3 and the fabric are ibkern's model)",
                qemu.as_deref().map_or(String::new(), |q| format!(", {q}"))
            ),
            Platform::Hardware => {
                "hardware (consoles of real nodes; the HCA as the kernel reported it)".to_string()
            }
            Platform::Unknown { why } => {
                format!("unknown (emulated or hardware: the consoles do not say; {why})")
            }
        }
    }

    /// The platform in a few words, for the plot's subtitle.
    pub fn platform_short(&self) -> String {
        match &self.platform {
            Platform::Emulated { accel, qemu } => {
                let version = qemu
                    .as_deref()
                    .and_then(|q| q.split("version ").nth(1))
                    .and_then(|v| v.split_whitespace().next())
                    .map_or(String::new(), |v| format!(" {v}"));
                format!("emulated: QEMU{version} {accel} with ibkern's ConnectX-3 model")
            }
            Platform::Hardware => "hardware: consoles of real nodes".to_string(),
            Platform::Unknown { .. } => {
                "source unknown: emulated or hardware, the consoles do not say".to_string()
            }
        }
    }

    /// A plot's subtitle: the platform, what emulated times measure, date, kernels, runner
    /// and TSC.
    pub fn subtitle(&self) -> Vec<String> {
        let mut v = vec![self.platform_short()];
        if self.emulated() {
            v.push(
                "times measure QEMU and the model, not the network; inline sends cost 8-16 \
                 MMIO round trips to the model"
                    .to_string(),
            );
        }
        let kernels: std::collections::BTreeSet<String> = self
            .nodes
            .iter()
            .filter(|n| n.ibkern_version.is_some())
            .map(|n| {
                format!(
                    "{} {}",
                    Self::or_unknown(&n.ibkern_version),
                    Self::or_unknown(&n.ibkern_commit)
                )
            })
            .collect();
        let kernels: Vec<String> = kernels.into_iter().collect();
        let tsc = self.nodes.iter().find_map(|n| n.tsc.clone());
        v.push(format!(
            "{}; ibkern {}; {}; TSC {}",
            self.date,
            if kernels.is_empty() {
                "unknown".to_string()
            } else {
                kernels.join(", ")
            },
            self.runner,
            tsc.as_deref().unwrap_or("unknown")
        ));
        v
    }

    fn or_unknown(v: &Option<String>) -> &str {
        v.as_deref().unwrap_or("unknown")
    }

    /// The header lines (no comment marker): platform, the emulation note when emulated,
    /// date/runner/command, host CPU, one line per node.
    pub fn lines(&self) -> Vec<String> {
        let mut v = vec![format!("source: {}", self.platform_text())];
        match self.platform {
            Platform::Emulated { .. } => v.push(format!("NOTE: {EMULATION_NOTE}")),
            Platform::Unknown { .. } => v.push(format!("NOTE: {UNKNOWN_NOTE}")),
            Platform::Hardware => {}
        }
        v.push(format!(
            "date {}; {}; command: {}",
            self.date, self.runner, self.command_line
        ));
        v.push(format!(
            "host CPU: {}",
            self.host_cpu.as_deref().unwrap_or("unknown")
        ));
        v.extend(self.nodes.iter().map(|n| format!("node {}", n.summary())));
        v
    }

    pub fn to_json(&self) -> Value {
        let (platform, accel, qemu) = match &self.platform {
            Platform::Emulated { accel, qemu } => ("emulated", Some(accel), qemu.as_ref()),
            Platform::Hardware => ("hardware", None, None),
            Platform::Unknown { .. } => ("unknown", None, None),
        };
        let note = match self.platform {
            Platform::Emulated { .. } => Some(EMULATION_NOTE),
            Platform::Unknown { .. } => Some(UNKNOWN_NOTE),
            Platform::Hardware => None,
        };
        let mut v = json!({
            "platform": platform,
            "accel": accel,
            "qemu": qemu,
            "note": note,
            "date": self.date,
            "runner": self.runner,
            "command_line": self.command_line,
            "host_cpu": self.host_cpu,
            "nodes": self.nodes.iter().map(NodeFacts::to_json).collect::<Vec<_>>(),
        });
        if let Platform::Unknown { why } = &self.platform {
            v["why"] = json!(why);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONSOLE: &str = "\
[    0.000000] INFO  boot: ibkern kernel 0.1.0 commit 2d2c0fb1a2b3-dirty starting; mode Pingpong
[    0.000000] INFO  boot: config: mode=pingpong role=client transport=UD
[    0.000000] INFO  cpu: model Intel(R) Xeon(R) CPU E5-2670 v3 @ 2.30GHz
[    0.961390] INFO  tsc: 2299.998 MHz from Hpet
pci 00:03.0 15b3:1003 class 028000 pin A line 11
pci   bar0 mem64 0xfea00000 size 0x100000
[    0.375472] INFO  hca: 03:00.0 15b3:1003 PCIe link: capable x8 gen3, running x8 gen3
mlx4: firmware 2.42.5000, board MT_1090120019, 1 port(s), interrupts MSI-X
";

    #[test]
    fn node_facts_come_from_the_boot_lines() {
        let n = NodeFacts::from_console("client.log", &format!("\u{1b}[0m{CONSOLE}"));
        assert_eq!(n.ibkern_version.as_deref(), Some("0.1.0"));
        assert_eq!(n.ibkern_commit.as_deref(), Some("2d2c0fb1a2b3-dirty"));
        assert_eq!(
            n.config.as_deref(),
            Some("mode=pingpong role=client transport=UD")
        );
        assert_eq!(
            n.cpu.as_deref(),
            Some("Intel(R) Xeon(R) CPU E5-2670 v3 @ 2.30GHz")
        );
        assert_eq!(n.tsc.as_deref(), Some("2299.998 MHz from Hpet"));
        // The PCI scan's line comes first and wins; the link line gives the link.
        assert_eq!(n.hca.as_deref(), Some("00:03.0 15b3:1003"));
        assert_eq!(
            n.pcie_link.as_deref(),
            Some("capable x8 gen3, running x8 gen3")
        );
        assert_eq!(
            (n.firmware.as_deref(), n.board.as_deref()),
            (Some("2.42.5000"), Some("MT_1090120019"))
        );
        assert!(!n.is_tcg());
        let s = n.summary();
        assert!(
            s.starts_with("client.log: ibkern 0.1.0 commit 2d2c0fb1a2b3-dirty"),
            "{s}"
        );
    }

    #[test]
    fn an_old_console_gives_unknowns_not_guesses() {
        let n = NodeFacts::from_console(
            "x",
            "[    0.0] INFO  boot: ibkern kernel 0.1.0 starting; mode Pingpong\n",
        );
        assert_eq!(n.ibkern_version.as_deref(), Some("0.1.0"));
        assert_eq!(n.ibkern_commit, None);
        assert!(n.summary().contains("commit unknown; CPU unknown"));
    }

    #[test]
    fn emulated_runs_say_what_the_times_measure() {
        let p = Provenance {
            platform: Platform::Emulated {
                accel: "tcg".into(),
                qemu: Some("QEMU emulator version 7.2.0".into()),
            },
            runner: runner_version(),
            date: "2026-11-25T08:45:12Z".into(),
            host_cpu: None,
            command_line: "cargo qemu pingpong -c UD".into(),
            nodes: vec![NodeFacts::from_console("UD server", CONSOLE)],
        };
        let lines = p.lines();
        assert!(lines[0].contains("emulated (QEMU tcg, QEMU emulator version 7.2.0"));
        assert_eq!(
            p.platform_short(),
            "emulated: QEMU 7.2.0 tcg with ibkern's ConnectX-3 model"
        );
        assert!(lines[1].contains("not an InfiniBand network"));
        assert!(lines[2].contains("cargo qemu pingpong -c UD"));
        assert!(lines[2].contains(env!("IBKERN_GIT_COMMIT")));
        let j = p.to_json();
        assert_eq!(j["platform"], "emulated");
        assert!(j["note"].as_str().unwrap().contains("QEMU"));
        assert_eq!(j["nodes"][0]["firmware"], "2.42.5000");
        let hw = Provenance {
            platform: Platform::Hardware,
            ..p
        };
        assert!(hw.to_json()["note"].is_null());
        assert!(!hw.lines().iter().any(|l| l.starts_with("NOTE")));
    }

    #[test]
    fn iso_dates() {
        let d = now_iso();
        assert_eq!(d.len(), 20, "{d}");
        assert_eq!(&d[13..14], ":");
    }

    #[test]
    fn the_node_line_gives_the_facts_even_broken_and_padded() {
        use bench::line::{NodeLine, Record as _};
        let line = NodeLine {
            version: "0.2.0".into(),
            commit: "abcdef123456".into(),
            role: ibconfig::Role::Server,
            cpu: "Intel(R) Xeon(R) CPU E5-2670 v3 @ 2.30GHz".into(),
            hypervisor: false,
            tsc_hz: 2_299_998_000,
            tsc_source: "Hpet".into(),
            hca: "03:00.0 15b3:1003".into(),
            firmware: "2.42.5000".into(),
            board: "MT_1090120019".into(),
            pcie_link: Some("capable x8 gen3, running x8 gen3".into()),
            config: "mode=pingpong role=server".into(),
        };
        let mut text = String::new();
        line.emit(&mut text).unwrap();
        // Broken at 80 columns, each row padded with blanks, after a console with none of
        // the boot lines.
        let chars: Vec<char> = text.trim_end().chars().collect();
        let screen: String = chars
            .chunks(80)
            .map(|c| format!("{:<80}\r\n", c.iter().collect::<String>()))
            .collect();
        let n = NodeFacts::from_console("server.log", &format!("pingpong: PASS\r\n{screen}"));
        assert_eq!(n.ibkern_version.as_deref(), Some("0.2.0"));
        assert_eq!(n.tsc.as_deref(), Some("2299.998 MHz from Hpet"));
        assert_eq!(n.hca.as_deref(), Some("03:00.0 15b3:1003"));
        assert_eq!(
            n.pcie_link.as_deref(),
            Some("capable x8 gen3, running x8 gen3")
        );
        assert_eq!(n.config.as_deref(), Some("mode=pingpong role=server"));
        assert_eq!(
            (n.hypervisor, n.evidence()),
            (Some(false), Evidence::Hardware)
        );
        // The node line wins over boot lines that disagree.
        let both = format!("{CONSOLE}{text}");
        let n = NodeFacts::from_console("x", &both);
        assert_eq!(n.ibkern_version.as_deref(), Some("0.2.0"));
    }

    #[test]
    fn the_source_is_hardware_only_when_every_console_shows_bare_metal() {
        let facts = |cpu: Option<&str>, hypervisor: Option<bool>| NodeFacts {
            name: "n".into(),
            cpu: cpu.map(String::from),
            hypervisor,
            ..NodeFacts::default()
        };
        let tcg = facts(Some("QEMU TCG CPU version 2.5+"), Some(true));
        let metal = facts(Some("Intel(R) Xeon(R)"), Some(false));
        let kvm = facts(Some("Intel(R) Xeon(R)"), Some(true));
        let blank = facts(None, None);
        assert!(matches!(
            Platform::of_consoles(&[tcg.clone(), tcg.clone()]),
            Platform::Emulated { .. }
        ));
        assert_eq!(
            Platform::of_consoles(&[metal.clone(), metal.clone()]),
            Platform::Hardware
        );
        for nodes in [
            vec![kvm.clone()],
            vec![blank.clone()],
            vec![metal.clone(), blank],
            vec![tcg, metal],
            vec![],
        ] {
            let p = Platform::of_consoles(&nodes);
            assert!(matches!(p, Platform::Unknown { .. }), "{nodes:?}: {p:?}");
        }
        let p = Provenance {
            platform: Platform::of_consoles(&[kvm]),
            runner: runner_version(),
            date: "2026-11-25T08:45:12Z".into(),
            host_cpu: None,
            command_line: "cargo qemu results a.log".into(),
            nodes: vec![],
        };
        assert!(p.lines()[0].starts_with("source: unknown (emulated or hardware"));
        assert!(p.lines()[1].contains("do not read them as hardware"));
        assert_eq!(p.to_json()["platform"], "unknown");
        assert!(p.to_json()["why"].as_str().unwrap().contains("under KVM"));
        assert_eq!(p.title_mark(), Some("SOURCE UNKNOWN"));
        assert!(p.table_mark().unwrap().starts_with("[SOURCE UNKNOWN: "));
    }
}
