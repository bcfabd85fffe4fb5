//! Boot configuration: `key=value` lines delivered as the bootloader ramdisk.
//!
//! Syntax: one `key=value` per line, `#` starts a comment (whole line or after a value),
//! blank lines and surrounding whitespace are ignored. Every key is described once in
//! [`KEYS`] (name, accepted values, parse function), so later issues add a key by adding
//! a field to [`Config`] and one row to the table. Unknown keys, repeated keys and
//! malformed values are errors that name the line and the key: the kernel never falls
//! back to a default silently.

use core::fmt;

/// What the kernel does after bring-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Check the foundations on the running machine and exit with the verdict.
    Selftest,
    /// Trigger the fault named by `fault=` (tests the fault report and exit code).
    Fault,
    /// Enable interrupts and halt forever (interactive runs).
    Idle,
    /// Find the ConnectX-3 on PCI, bring it up, log the summary, run the NOP interrupt
    /// test, tear down and bring up again once (leak check), exit with the verdict.
    Hca,
    /// Bring the HCA up and run the ping-pong latency sweep (`role=`, bench keys).
    Pingpong,
    /// Print everything needed to debug on unfamiliar hardware (PCI config space of the HCA,
    /// firmware, capabilities, ports, the command log of bring-up) for a bug report.
    Diag,
}

/// How the HCA's interrupts are delivered (`hca_irq=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HcaIrq {
    /// MSI-X vector 0 (the device's real mode), INTx as the driver's fallback.
    Msix,
    /// Legacy INTx only, routed from the interrupt-line register.
    Intx,
    /// No interrupts: commands and completions are polled.
    Poll,
}

/// The deliberate fault of `mode=fault`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Read an unmapped (canonical) address.
    PageFault,
    /// `panic!`.
    Panic,
    /// Integer division by zero (#DE).
    Divide,
    /// Access a non-canonical address (#GP).
    Gpf,
    /// Unbounded recursion into the stack guard page: the page fault cannot be delivered
    /// on the overflowed stack, so it becomes a double fault handled on the IST stack.
    StackOverflow,
}

/// Node role in a two-node run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// What to do once the kernel has finished (after telling QEMU through isa-debug-exit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnExit {
    /// Halt the CPU forever (metal: the console stays readable).
    Halt,
    /// Reset the machine (metal: back to PXE for the next job).
    Reset,
}

/// Console verbosity (maps onto `log::LevelFilter`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    pub fn filter(self) -> log::LevelFilter {
        match self {
            LogLevel::Error => log::LevelFilter::Error,
            LogLevel::Warn => log::LevelFilter::Warn,
            LogLevel::Info => log::LevelFilter::Info,
            LogLevel::Debug => log::LevelFilter::Debug,
            LogLevel::Trace => log::LevelFilter::Trace,
        }
    }
}

/// A PCI vendor:device pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PciId {
    pub vendor: u16,
    pub device: u16,
}

impl fmt::Display for PciId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:04x}", self.vendor, self.device)
    }
}

/// Most `expect_pci` entries one config can name.
pub const MAX_EXPECT_PCI: usize = 16;

/// The parsed configuration. `Default` is what the kernel runs without a ramdisk.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub mode: Mode,
    pub fault: Option<FaultKind>,
    pub log: LogLevel,
    pub role: Option<Role>,
    pub peer_lid: Option<u16>,
    expect_pci: [PciId; MAX_EXPECT_PCI],
    expect_pci_len: usize,
    pub on_exit: OnExit,
    /// Hex-dump the ACPI tables on the console (used to capture test data).
    pub acpi_dump: bool,
    /// Switch the local APIC to x2APIC mode (`apic=x2apic`) instead of keeping the mode
    /// the firmware handed over (`apic=auto`).
    pub x2apic: bool,
    /// HCA interrupt delivery for `mode=hca|pingpong`.
    pub hca_irq: HcaIrq,
    /// Run the in-kernel subnet manager for two nodes cabled back to back (`sm=on`).
    pub sm: bool,
    /// How long `mode=hca|pingpong` wait for the port (and, with `sm=on`, for the link).
    pub port_wait_ms: u64,
    /// The ping-pong keys (`transport`, `size`, `iters`, ...) as the bench parses them;
    /// `role` and `peer_lid` are applied from the kernel keys at run time.
    pub bench: bench::config::PingPongConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: Mode::Selftest,
            fault: None,
            log: LogLevel::Info,
            role: None,
            peer_lid: None,
            expect_pci: [PciId {
                vendor: 0,
                device: 0,
            }; MAX_EXPECT_PCI],
            expect_pci_len: 0,
            on_exit: OnExit::Halt,
            acpi_dump: false,
            x2apic: false,
            hca_irq: HcaIrq::Msix,
            sm: false,
            port_wait_ms: 10_000,
            bench: bench::config::PingPongConfig::default(),
        }
    }
}

impl Config {
    /// Devices the selftest must find.
    pub fn expect_pci(&self) -> &[PciId] {
        &self.expect_pci[..self.expect_pci_len]
    }
}

/// Why a value was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueError {
    /// Not one of the listed words.
    NotOneOf(&'static str),
    /// A number that does not parse or lies outside the range given.
    BadNumber(&'static str),
    /// A PCI id list entry that is not `vvvv:dddd`.
    BadPciId,
    /// More `expect_pci` entries than [`MAX_EXPECT_PCI`].
    TooManyPciIds,
    /// A ping-pong key the bench refused (its words).
    Bench(bench::config::ConfigError),
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueError::NotOneOf(words) => write!(f, "expected one of {words}"),
            ValueError::BadNumber(range) => write!(f, "expected a number in {range}"),
            ValueError::BadPciId => write!(f, "expected vvvv:dddd[,vvvv:dddd...] (hex)"),
            ValueError::TooManyPciIds => write!(f, "at most {MAX_EXPECT_PCI} ids"),
            ValueError::Bench(e) => write!(f, "{e}"),
        }
    }
}

/// A configuration error, naming the line (1-based) and, where known, the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError<'a> {
    /// The ramdisk is not UTF-8 text.
    NotText,
    /// A non-empty line without `=`.
    MissingEquals { line: usize, text: &'a str },
    /// A key the kernel does not know.
    UnknownKey { line: usize, key: &'a str },
    /// The same key given twice.
    Repeated { line: usize, key: &'a str },
    /// A known key with a value it does not accept.
    BadValue {
        line: usize,
        key: &'a str,
        value: &'a str,
        why: ValueError,
    },
    /// `mode=fault` without `fault=`, or `fault=` without `mode=fault`.
    FaultNeedsMode,
}

impl fmt::Display for ConfigError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::NotText => write!(f, "config: the ramdisk is not UTF-8 text"),
            ConfigError::MissingEquals { line, text } => {
                write!(f, "config line {line}: expected key=value, found {text:?}")
            }
            ConfigError::UnknownKey { line, key } => {
                write!(f, "config line {line}: unknown key {key:?}")
            }
            ConfigError::Repeated { line, key } => {
                write!(f, "config line {line}: key {key:?} given twice")
            }
            ConfigError::BadValue {
                line,
                key,
                value,
                why,
            } => {
                write!(
                    f,
                    "config line {line}: key {key:?}: bad value {value:?}: {why}"
                )
            }
            ConfigError::FaultNeedsMode => {
                write!(
                    f,
                    "config: mode=fault and fault=<kind> must be given together"
                )
            }
        }
    }
}

/// One row of the key table.
pub struct Key {
    pub name: &'static str,
    /// Accepted values, for messages and documentation.
    pub values: &'static str,
    parse: fn(&str, &mut Config) -> Result<(), ValueError>,
}

/// Every key the kernel understands.
pub static KEYS: &[Key] = &[
    Key {
        name: "mode",
        values: "selftest|fault|idle|hca|pingpong|diag",
        parse: parse_mode,
    },
    Key {
        name: "fault",
        values: "pagefault|panic|divide|gpf|stack-overflow",
        parse: parse_fault,
    },
    Key {
        name: "log",
        values: "error|warn|info|debug|trace",
        parse: parse_log,
    },
    Key {
        name: "role",
        values: "client|server",
        parse: parse_role,
    },
    Key {
        name: "peer_lid",
        values: "1..0xbfff",
        parse: parse_peer_lid,
    },
    Key {
        name: "expect_pci",
        values: "vvvv:dddd[,vvvv:dddd...]",
        parse: parse_expect_pci,
    },
    Key {
        name: "on_exit",
        values: "halt|reset",
        parse: parse_on_exit,
    },
    Key {
        name: "apic",
        values: "auto|x2apic",
        parse: parse_apic,
    },
    Key {
        name: "acpi_dump",
        values: "true|false",
        parse: parse_acpi_dump,
    },
    Key {
        name: "hca_irq",
        values: "msix|intx|poll",
        parse: parse_hca_irq,
    },
    Key {
        name: "sm",
        values: "on|off",
        parse: parse_sm,
    },
    Key {
        name: "port_wait_ms",
        values: "100..3600000",
        parse: parse_port_wait_ms,
    },
    bench_key!("test", "send_lat|write_lat"),
    bench_key!("transport", "UD|UC|RC"),
    bench_key!("size", "all|2..8388608"),
    bench_key!("iters", "5..16777216"),
    bench_key!("inline", "bytes"),
    bench_key!("completion", "poll|event"),
    bench_key!("mtu", "256|512|1024|2048|4096"),
    bench_key!("ib_port", "1|2"),
    bench_key!("loss_limit", "count"),
    bench_key!("timeout_ms", "ms"),
    bench_key!("peer_timeout_ms", "ms"),
    bench_key!("probe_lids", "A-B"),
    bench_key!("rdv_qpn", "QP number"),
    bench_key!("peer_rdv_qpn", "QP number"),
    bench_key!("verify", "0|1"),
];

/// A ping-pong key: parsed by `bench::config::PingPongConfig::apply` into `Config::bench`.
macro_rules! bench_key {
    ($name:literal, $values:literal) => {
        Key {
            name: $name,
            values: $values,
            parse: |v, c| c.bench.apply($name, v).map_err(ValueError::Bench),
        }
    };
}
use bench_key;

/// Picks `words[i]`'s value for the word equal to `value`.
fn one_of<T: Copy>(value: &str, words: &'static str, table: &[(&str, T)]) -> Result<T, ValueError> {
    table
        .iter()
        .find(|(w, _)| *w == value)
        .map(|(_, v)| *v)
        .ok_or(ValueError::NotOneOf(words))
}

fn parse_mode(v: &str, c: &mut Config) -> Result<(), ValueError> {
    let t = [
        ("selftest", Mode::Selftest),
        ("fault", Mode::Fault),
        ("idle", Mode::Idle),
        ("hca", Mode::Hca),
        ("pingpong", Mode::Pingpong),
        ("diag", Mode::Diag),
    ];
    c.mode = one_of(v, "selftest|fault|idle|hca|pingpong|diag", &t)?;
    Ok(())
}

fn parse_fault(v: &str, c: &mut Config) -> Result<(), ValueError> {
    let t = [
        ("pagefault", FaultKind::PageFault),
        ("panic", FaultKind::Panic),
        ("divide", FaultKind::Divide),
        ("gpf", FaultKind::Gpf),
        ("stack-overflow", FaultKind::StackOverflow),
    ];
    c.fault = Some(one_of(v, "pagefault|panic|divide|gpf|stack-overflow", &t)?);
    Ok(())
}

fn parse_log(v: &str, c: &mut Config) -> Result<(), ValueError> {
    let t = [
        ("error", LogLevel::Error),
        ("warn", LogLevel::Warn),
        ("info", LogLevel::Info),
        ("debug", LogLevel::Debug),
        ("trace", LogLevel::Trace),
    ];
    c.log = one_of(v, "error|warn|info|debug|trace", &t)?;
    Ok(())
}

fn parse_role(v: &str, c: &mut Config) -> Result<(), ValueError> {
    let t = [("client", Role::Client), ("server", Role::Server)];
    c.role = Some(one_of(v, "client|server", &t)?);
    Ok(())
}

fn parse_on_exit(v: &str, c: &mut Config) -> Result<(), ValueError> {
    let t = [("halt", OnExit::Halt), ("reset", OnExit::Reset)];
    c.on_exit = one_of(v, "halt|reset", &t)?;
    Ok(())
}

fn parse_apic(v: &str, c: &mut Config) -> Result<(), ValueError> {
    c.x2apic = one_of(v, "auto|x2apic", &[("auto", false), ("x2apic", true)])?;
    Ok(())
}

fn parse_hca_irq(v: &str, c: &mut Config) -> Result<(), ValueError> {
    let t = [
        ("msix", HcaIrq::Msix),
        ("intx", HcaIrq::Intx),
        ("poll", HcaIrq::Poll),
    ];
    c.hca_irq = one_of(v, "msix|intx|poll", &t)?;
    Ok(())
}

fn parse_sm(v: &str, c: &mut Config) -> Result<(), ValueError> {
    c.sm = one_of(v, "on|off", &[("on", true), ("off", false)])?;
    Ok(())
}

fn parse_port_wait_ms(v: &str, c: &mut Config) -> Result<(), ValueError> {
    match parse_u64(v) {
        Some(n) if (100..=3_600_000).contains(&n) => {
            c.port_wait_ms = n;
            Ok(())
        }
        _ => Err(ValueError::BadNumber("100..3600000")),
    }
}

fn parse_acpi_dump(v: &str, c: &mut Config) -> Result<(), ValueError> {
    c.acpi_dump = one_of(v, "true|false", &[("true", true), ("false", false)])?;
    Ok(())
}

/// Parses a decimal or `0x` hexadecimal unsigned number.
pub fn parse_u64(v: &str) -> Option<u64> {
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() => u64::from_str_radix(hex, 16).ok(),
        Some(_) => None,
        None => v.parse().ok(),
    }
}

fn parse_peer_lid(v: &str, c: &mut Config) -> Result<(), ValueError> {
    // Unicast LIDs are 0x0001..=0xbfff (IBA 4.1.3); 0 is reserved and 0xc000.. is multicast.
    let range = "1..0xbfff";
    match parse_u64(v) {
        Some(n @ 1..=0xbfff) => {
            c.peer_lid = Some(n as u16);
            Ok(())
        }
        _ => Err(ValueError::BadNumber(range)),
    }
}

fn parse_hex16(s: &str) -> Option<u16> {
    if s.len() != 4 {
        return None;
    }
    u16::from_str_radix(s, 16).ok()
}

fn parse_expect_pci(v: &str, c: &mut Config) -> Result<(), ValueError> {
    let mut n = 0;
    for item in v.split(',') {
        let (ven, dev) = item.trim().split_once(':').ok_or(ValueError::BadPciId)?;
        let id = PciId {
            vendor: parse_hex16(ven).ok_or(ValueError::BadPciId)?,
            device: parse_hex16(dev).ok_or(ValueError::BadPciId)?,
        };
        if n == MAX_EXPECT_PCI {
            return Err(ValueError::TooManyPciIds);
        }
        c.expect_pci[n] = id;
        n += 1;
    }
    c.expect_pci_len = n;
    Ok(())
}

/// Parses the configuration text.
pub fn parse(text: &str) -> Result<Config, ConfigError<'_>> {
    let mut config = Config::default();
    let mut seen = [false; 64];
    debug_assert!(KEYS.len() <= seen.len());
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let content = raw.split_once('#').map_or(raw, |(before, _)| before).trim();
        if content.is_empty() {
            continue;
        }
        let (key, value) = content.split_once('=').ok_or(ConfigError::MissingEquals {
            line,
            text: content,
        })?;
        let (key, value) = (key.trim(), value.trim());
        let slot = KEYS
            .iter()
            .position(|k| k.name == key)
            .ok_or(ConfigError::UnknownKey { line, key })?;
        if seen[slot] {
            return Err(ConfigError::Repeated { line, key });
        }
        seen[slot] = true;
        (KEYS[slot].parse)(value, &mut config).map_err(|why| ConfigError::BadValue {
            line,
            key,
            value,
            why,
        })?;
    }
    if (config.mode == Mode::Fault) != config.fault.is_some() {
        return Err(ConfigError::FaultNeedsMode);
    }
    Ok(config)
}

/// Parses the raw ramdisk bytes (`None`: no ramdisk, use the defaults).
pub fn parse_bytes(bytes: Option<&[u8]>) -> Result<Config, ConfigError<'_>> {
    match bytes {
        None => Ok(Config::default()),
        Some(b) => parse(core::str::from_utf8(b).map_err(|_| ConfigError::NotText)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn defaults_without_ramdisk() {
        let c = parse_bytes(None).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.mode, Mode::Selftest);
        assert_eq!(c.log, LogLevel::Info);
        assert_eq!(c.on_exit, OnExit::Halt);
        assert!(c.expect_pci().is_empty());
    }

    #[test]
    fn full_config_with_comments_and_blanks() {
        let text = "# ibkern node config\n\nmode=selftest\n  log = debug  # chatty\nrole=server\n\
                    peer_lid=0x1f\nexpect_pci=15b3:1003, 8086:29c0\non_exit=reset\n";
        let c = parse(text).unwrap();
        assert_eq!(c.mode, Mode::Selftest);
        assert_eq!(c.log, LogLevel::Debug);
        assert_eq!(c.role, Some(Role::Server));
        assert_eq!(c.peer_lid, Some(0x1f));
        assert_eq!(
            c.expect_pci(),
            &[
                PciId {
                    vendor: 0x15b3,
                    device: 0x1003
                },
                PciId {
                    vendor: 0x8086,
                    device: 0x29c0
                }
            ]
        );
        assert_eq!(c.on_exit, OnExit::Reset);
        assert!(!c.x2apic);
        assert!(parse("apic=x2apic").unwrap().x2apic);
        assert!(parse("apic=xapic").is_err());
        assert_eq!(c.log.filter(), log::LevelFilter::Debug);
    }

    #[test]
    fn fault_mode_needs_kind_and_vice_versa() {
        let c = parse("mode=fault\nfault=pagefault\n").unwrap();
        assert_eq!((c.mode, c.fault), (Mode::Fault, Some(FaultKind::PageFault)));
        assert_eq!(parse("mode=fault\n"), Err(ConfigError::FaultNeedsMode));
        assert_eq!(parse("fault=gpf\n"), Err(ConfigError::FaultNeedsMode));
        let c = parse("mode=fault\nfault=stack-overflow\n").unwrap();
        assert_eq!(c.fault, Some(FaultKind::StackOverflow));
    }

    #[test]
    fn sm_and_port_wait_keys() {
        let c = parse_bytes(None).unwrap();
        assert!(!c.sm, "sm defaults to off");
        assert_eq!(c.port_wait_ms, 10_000);
        let c = parse("sm=on\nport_wait_ms=120000\n").unwrap();
        assert!(c.sm);
        assert_eq!(c.port_wait_ms, 120_000);
        assert!(!parse("sm=off").unwrap().sm);
        let e = parse("sm=yes").unwrap_err();
        assert_eq!(
            e.to_string(),
            "config line 1: key \"sm\": bad value \"yes\": expected one of on|off"
        );
        assert!(parse("port_wait_ms=5").is_err(), "below the bound");
        assert!(parse("port_wait_ms=9999999").is_err(), "above the bound");
    }

    #[test]
    fn unknown_key_names_line_and_key() {
        let e = parse("mode=idle\n\nfrobnicate=1\n").unwrap_err();
        assert_eq!(
            e,
            ConfigError::UnknownKey {
                line: 3,
                key: "frobnicate"
            }
        );
        assert_eq!(e.to_string(), "config line 3: unknown key \"frobnicate\"");
    }

    #[test]
    fn malformed_values_are_errors_not_defaults() {
        let e = parse("log=loud").unwrap_err();
        assert_eq!(e.to_string(), "config line 1: key \"log\": bad value \"loud\": expected one of error|warn|info|debug|trace");
        for bad in [
            "peer_lid=0",
            "peer_lid=0xc000",
            "peer_lid=abc",
            "peer_lid=0x",
            "peer_lid=",
        ] {
            assert!(
                matches!(
                    parse(bad),
                    Err(ConfigError::BadValue {
                        key: "peer_lid",
                        ..
                    })
                ),
                "{bad}"
            );
        }
        assert_eq!(parse("peer_lid=49151").unwrap().peer_lid, Some(0xbfff));
        for bad in [
            "expect_pci=15b3",
            "expect_pci=15b3:10033",
            "expect_pci=15b3:zzzz",
            "expect_pci=15b3:1003,",
        ] {
            assert!(
                matches!(
                    parse(bad),
                    Err(ConfigError::BadValue {
                        key: "expect_pci",
                        why: ValueError::BadPciId,
                        ..
                    })
                ),
                "{bad}"
            );
        }
        let many = "expect_pci=".to_string() + &["1234:5678"; 17].join(",");
        assert!(matches!(
            parse(&many),
            Err(ConfigError::BadValue {
                why: ValueError::TooManyPciIds,
                ..
            })
        ));
    }

    #[test]
    fn missing_equals_and_repeats() {
        assert_eq!(
            parse("mode=idle\nselftest\n"),
            Err(ConfigError::MissingEquals {
                line: 2,
                text: "selftest"
            })
        );
        assert_eq!(
            parse("log=info\nlog=warn\n"),
            Err(ConfigError::Repeated {
                line: 2,
                key: "log"
            })
        );
    }

    #[test]
    fn not_text_and_crlf() {
        assert_eq!(parse_bytes(Some(&[0xff, 0xfe])), Err(ConfigError::NotText));
        assert_eq!(
            parse_bytes(Some(b"mode=idle\r\nlog=warn\r\n")).unwrap().log,
            LogLevel::Warn
        );
    }

    #[test]
    fn hca_and_pingpong_keys() {
        let c = parse("mode=pingpong\nrole=client\nhca_irq=intx\ntransport=UC\nsize=all\niters=20\ninline=0\n").unwrap();
        assert_eq!(c.mode, Mode::Pingpong);
        assert_eq!(c.hca_irq, HcaIrq::Intx);
        assert_eq!(c.bench.transport, bench::config::Transport::Uc);
        assert_eq!(c.bench.sizes, bench::config::Sizes::All);
        assert_eq!(c.bench.iterations, 20);
        assert_eq!(c.bench.inline_limit, Some(0));
        assert_eq!(parse("mode=hca").unwrap().hca_irq, HcaIrq::Msix);
        let e = parse("hca_irq=msi").unwrap_err().to_string();
        assert_eq!(
            e,
            "config line 1: key \"hca_irq\": bad value \"msi\": expected one of msix|intx|poll"
        );
        // The bench's own refusal is passed on with the line and key.
        let e = parse("mode=pingpong\niters=3").unwrap_err().to_string();
        assert!(
            e.starts_with("config line 2: key \"iters\": bad value \"3\": "),
            "{e}"
        );
        let e = parse("transport=RD").unwrap_err().to_string();
        assert!(e.contains("UD, UC or RC"), "{e}");
        let c = parse("mode=pingpong\nrole=server\ntest=write_lat\ntransport=RC\n").unwrap();
        assert_eq!(c.bench.test, bench::config::Test::WriteLat);
        assert_eq!(c.bench.transport, bench::config::Transport::Rc);
        let e = parse("test=read_lat").unwrap_err().to_string();
        assert!(e.contains("send_lat or write_lat"), "{e}");
        // A client facing a server whose rendezvous QPN was assigned (a Linux peer).
        let c = parse("mode=pingpong\nrole=client\npeer_rdv_qpn=0x208\n").unwrap();
        assert_eq!(c.bench.peer_rdv_qpn, Some(0x208));
        assert_eq!(c.bench.rdv_qpn, None, "derived from the device at start");
        assert_eq!(parse("mode=idle").unwrap().bench.peer_rdv_qpn, None);
        let e = parse("peer_rdv_qpn=0x1000000").unwrap_err().to_string();
        assert!(
            e.starts_with("config line 1: key \"peer_rdv_qpn\": bad value \"0x1000000\": "),
            "{e}"
        );
        // A key neither the kernel nor the bench knows is still an error.
        assert!(matches!(
            parse("iterations=20"),
            Err(ConfigError::UnknownKey { line: 1, .. })
        ));
    }

    #[test]
    fn every_key_is_listed_once() {
        for (i, k) in KEYS.iter().enumerate() {
            assert!(KEYS[i + 1..].iter().all(|o| o.name != k.name), "{}", k.name);
            assert!(!k.values.is_empty());
        }
    }
}
