//! ibkern's configuration: one typed vocabulary, parsed and checked by one crate on both
//! sides of the boot. The kernel reads it from its ramdisk; the bench runs the ping-pong
//! part of it; the host tools (`boot`, the `cargo qemu` runner) check every configuration
//! they write or are given with this same code before anything boots, so a bad key, value
//! or combination is refused on the host with the message the kernel would print.
//!
//! Syntax ([`entries`]): one `key=value` per line, `#` starts a comment (whole line or after
//! a value), blank lines and surrounding whitespace are ignored. Every key is described once
//! in [`KEYS`] (name, accepted values, parser); the ping-pong keys in
//! [`bench::BENCH_KEYS`]. Unknown keys, repeated keys and malformed values are errors that
//! name the line and the key: nothing falls back to a default silently. The rules between
//! keys ([`Rule`]) are checked once the whole text is read ([`Config::check`]); the rules
//! that need the device (a UD message against the port's MTU, the inline limit against
//! the QP's) are checked again by the bench on the device
//! ([`bench::PingPongConfig::validate_on_device`]).
//!
//! No allocation: errors borrow the text, the tables are static.
#![cfg_attr(not(test), no_std)]

use core::fmt;

pub mod bench;
pub mod delegate;
pub mod plan;
pub mod srq_plan;

pub use plan::{Run, MAX_RUNS};
pub use srq_plan::SrqRun;

pub use bench::{
    AtomicOp, BwKeys, Completion, Moderations, Modes, PingPongConfig, Role, Rule, Sizes, SrqKeys,
    Test, Transport, BENCH_KEYS,
};

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
    /// Bring the HCA up, connect to the Linux delegate (`delegate=`) and run the delegation
    /// benchmark (docs/delegation.md).
    Delegate,
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

impl HcaIrq {
    /// The `hca_irq` value ("msix", "intx", "poll").
    pub fn name(self) -> &'static str {
        match self {
            HcaIrq::Msix => "msix",
            HcaIrq::Intx => "intx",
            HcaIrq::Poll => "poll",
        }
    }
}

/// The serial port of the kernel's console (`console=`): the four ISA serial ports at their
/// standard I/O addresses. A node's serial-over-LAN may be wired to any of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Console {
    Com1,
    Com2,
    Com3,
    Com4,
}

impl Console {
    /// Every port, in order (COM1 first).
    pub const ALL: [Console; 4] = [Console::Com1, Console::Com2, Console::Com3, Console::Com4];

    /// The `console` value ("com1" .. "com4").
    pub fn name(self) -> &'static str {
        match self {
            Console::Com1 => "com1",
            Console::Com2 => "com2",
            Console::Com3 => "com3",
            Console::Com4 => "com4",
        }
    }

    /// The UART's I/O base address.
    pub fn io_port(self) -> u16 {
        match self {
            Console::Com1 => 0x3f8,
            Console::Com2 => 0x2f8,
            Console::Com3 => 0x3e8,
            Console::Com4 => 0x2e8,
        }
    }

    /// 0 for COM1 .. 3 for COM4: which ISA serial port this is (QEMU wires its n-th
    /// `-serial` option to the n-th port).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The port named by a `console` value.
    pub fn from_name(name: &str) -> Option<Console> {
        Console::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// The console port a ramdisk asks for, read from its `console=` line alone, so that a
/// configuration refused for another line can still be reported where its reader looks.
/// `None`: no valid `console=` line (not text, no such line, a bad value, or given twice).
pub fn console_of(bytes: &[u8]) -> Option<Console> {
    let text = core::str::from_utf8(bytes).ok()?;
    let mut found = None;
    for e in entries(text).flatten().filter(|e| e.key == "console") {
        if found.is_some() {
            return None;
        }
        found = Some(Console::from_name(e.value)?);
    }
    found
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

/// What to do once the kernel has finished (after telling QEMU through isa-debug-exit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnExit {
    /// Halt the CPU forever (metal: the console stays readable).
    Halt,
    /// Reset the machine (metal: back to PXE for the next job).
    Reset,
}

/// Console verbosity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
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
/// Bounds of `port_wait_ms`.
pub const PORT_WAIT_MS: (u64, u64) = (100, 3_600_000);

/// The parsed configuration. `Default` is what the kernel runs without a ramdisk.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub mode: Mode,
    pub fault: Option<FaultKind>,
    pub log: LogLevel,
    /// `role=` as given (`None`: not given; `bench.role` then holds the bench's default).
    pub role: Option<Role>,
    expect_pci: [PciId; MAX_EXPECT_PCI],
    expect_pci_len: usize,
    pub on_exit: OnExit,
    /// Hex-dump the ACPI tables on the console (used to capture test data).
    pub acpi_dump: bool,
    /// Switch the local APIC to x2APIC mode (`apic=x2apic`) instead of keeping the mode
    /// the firmware handed over (`apic=auto`).
    pub x2apic: bool,
    /// The serial port the console is on (`console=`, default COM1).
    pub console: Console,
    /// HCA interrupt delivery for `mode=hca|pingpong`.
    pub hca_irq: HcaIrq,
    /// Run the in-kernel subnet manager for two nodes cabled back to back (`sm=on`).
    pub sm: bool,
    /// How long `mode=hca|pingpong` wait for the port (and, with `sm=on`, for the link).
    pub port_wait_ms: u64,
    /// The ping-pong keys (`test`, `transport`, `size`, `iters`, `role`, `peer_lid`, ...).
    pub bench: PingPongConfig,
    /// Where the delegate is and what `mode=delegate` measures ([`delegate`]).
    pub delegate: delegate::DelegateKeys,
    /// The plan: `run=` lines in order ([`plan`]), with the line each came from.
    runs: [Run; MAX_RUNS],
    run_lines: [usize; MAX_RUNS],
    runs_len: usize,
    /// The plan's SRQ ping-pong runs (`run=ibv_srq_pingpong ...` lines), in order.
    srq_runs: [SrqRun; MAX_RUNS],
    srq_run_lines: [usize; MAX_RUNS],
    srq_runs_len: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: Mode::Selftest,
            fault: None,
            log: LogLevel::Info,
            role: None,
            expect_pci: [PciId {
                vendor: 0,
                device: 0,
            }; MAX_EXPECT_PCI],
            expect_pci_len: 0,
            on_exit: OnExit::Halt,
            acpi_dump: false,
            x2apic: false,
            console: Console::Com1,
            hca_irq: HcaIrq::Msix,
            sm: false,
            port_wait_ms: 10_000,
            bench: PingPongConfig::default(),
            delegate: delegate::DelegateKeys::default(),
            runs: [plan::Run {
                transport: Transport::Rc,
                ..plan::Run::of(&PingPongConfig::default())
            }; MAX_RUNS],
            run_lines: [0; MAX_RUNS],
            runs_len: 0,
            srq_runs: [SrqRun::default(); MAX_RUNS],
            srq_run_lines: [0; MAX_RUNS],
            srq_runs_len: 0,
        }
    }
}

/// Why a value was rejected: what the key expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValueError(pub &'static str);

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "expected {}", self.0)
    }
}

/// Why one `key=value` was refused (no line: see [`ConfigError`] for that).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// A key the configuration does not have.
    Unknown,
    /// A known key with a value it does not accept.
    BadValue(ValueError),
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
    /// The keys are each fine but break a rule together.
    Rule(Rule),
    /// Run `run` (1-based) of the plan, from line `line`, breaks a rule.
    RunRule { line: usize, run: usize, rule: Rule },
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
            ConfigError::Rule(rule) => write!(f, "config: {rule}"),
            ConfigError::RunRule { line, run, rule } => {
                write!(f, "config line {line}: run {run}: {rule}")
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

/// Every key: the kernel's own, then the ping-pong keys (the bench's table, with `role`
/// also recorded as given).
pub static KEYS: &[Key] = &[
    Key {
        name: "mode",
        values: "selftest|fault|idle|hca|pingpong|diag|delegate",
        parse: |v, c| {
            let t = [
                ("selftest", Mode::Selftest),
                ("fault", Mode::Fault),
                ("idle", Mode::Idle),
                ("hca", Mode::Hca),
                ("pingpong", Mode::Pingpong),
                ("diag", Mode::Diag),
                ("delegate", Mode::Delegate),
            ];
            c.mode = one_of(v, "one of selftest|fault|idle|hca|pingpong|diag|delegate", &t)?;
            Ok(())
        },
    },
    Key {
        name: "fault",
        values: "pagefault|panic|divide|gpf|stack-overflow",
        parse: |v, c| {
            let t = [
                ("pagefault", FaultKind::PageFault),
                ("panic", FaultKind::Panic),
                ("divide", FaultKind::Divide),
                ("gpf", FaultKind::Gpf),
                ("stack-overflow", FaultKind::StackOverflow),
            ];
            c.fault = Some(one_of(
                v,
                "one of pagefault|panic|divide|gpf|stack-overflow",
                &t,
            )?);
            Ok(())
        },
    },
    Key {
        name: "log",
        values: "error|warn|info|debug|trace",
        parse: |v, c| {
            let t = [
                ("error", LogLevel::Error),
                ("warn", LogLevel::Warn),
                ("info", LogLevel::Info),
                ("debug", LogLevel::Debug),
                ("trace", LogLevel::Trace),
            ];
            c.log = one_of(v, "one of error|warn|info|debug|trace", &t)?;
            Ok(())
        },
    },
    Key {
        name: "expect_pci",
        values: "vvvv:dddd[,vvvv:dddd...]",
        parse: parse_expect_pci,
    },
    Key {
        name: "on_exit",
        values: "halt|reset",
        parse: |v, c| {
            let t = [("halt", OnExit::Halt), ("reset", OnExit::Reset)];
            c.on_exit = one_of(v, "one of halt|reset", &t)?;
            Ok(())
        },
    },
    Key {
        name: "apic",
        values: "auto|x2apic",
        parse: |v, c| {
            c.x2apic = one_of(
                v,
                "one of auto|x2apic",
                &[("auto", false), ("x2apic", true)],
            )?;
            Ok(())
        },
    },
    Key {
        name: "acpi_dump",
        values: "true|false",
        parse: |v, c| {
            c.acpi_dump = one_of(v, "one of true|false", &[("true", true), ("false", false)])?;
            Ok(())
        },
    },
    Key {
        name: "console",
        values: "com1|com2|com3|com4",
        parse: |v, c| {
            c.console = Console::from_name(v).ok_or(ValueError("one of com1|com2|com3|com4"))?;
            Ok(())
        },
    },
    Key {
        name: "hca_irq",
        values: "msix|intx|poll",
        parse: |v, c| {
            let t = [
                ("msix", HcaIrq::Msix),
                ("intx", HcaIrq::Intx),
                ("poll", HcaIrq::Poll),
            ];
            c.hca_irq = one_of(v, "one of msix|intx|poll", &t)?;
            Ok(())
        },
    },
    Key {
        name: "sm",
        values: "on|off",
        parse: |v, c| {
            c.sm = one_of(v, "one of on|off", &[("on", true), ("off", false)])?;
            Ok(())
        },
    },
    Key {
        name: "run",
        values: "ib_send_lat|ib_write_lat|ib_read_lat|ib_atomic_lat [-c UD|UC|RC] [-a|-s SIZE] [-n ITERS] [-I INLINE] [-e] [-m MTU] [-A OP] [-o N], or ibv_srq_pingpong [-q QPS] [-r DEPTH] [-s SIZE] [-n ITERS] [-e] [-m MTU] [--cq-moderation C/P] (repeatable)",
        parse: |v, c| {
            if v.split_whitespace().next() == Some(srq_plan::PROGRAM) {
                let run = SrqRun::parse(v)?;
                if c.srq_runs_len == MAX_RUNS {
                    return Err(ValueError("at most 16 runs"));
                }
                c.srq_runs[c.srq_runs_len] = run;
                c.srq_runs_len += 1;
                return Ok(());
            }
            let run = plan::Run::parse(v)?;
            if c.runs_len == MAX_RUNS {
                return Err(ValueError("at most 16 runs"));
            }
            c.runs[c.runs_len] = run;
            c.runs_len += 1;
            Ok(())
        },
    },
    Key {
        name: "delegate",
        values: "LID:QPN|probe:QPN",
        parse: |v, c| {
            c.delegate.at = Some(delegate::parse_at(v)?);
            Ok(())
        },
    },
    Key {
        name: "delegate_max",
        values: "64..1048576",
        parse: |v, c| {
            c.delegate.max_size = delegate::parse_max_size(v)?;
            Ok(())
        },
    },
    Key {
        name: "delegate_outstanding",
        values: "1..64",
        parse: |v, c| {
            c.delegate.outstanding = delegate::parse_outstanding(v)?;
            Ok(())
        },
    },
    Key {
        name: "delegate_baseline",
        values: "QPN",
        parse: |v, c| {
            c.delegate.baseline_qpn = Some(delegate::parse_baseline(v)?);
            Ok(())
        },
    },
    Key {
        name: "port_wait_ms",
        values: "100..3600000",
        parse: |v, c| {
            c.port_wait_ms = parse_u64(v)
                .filter(|n| (PORT_WAIT_MS.0..=PORT_WAIT_MS.1).contains(n))
                .ok_or(ValueError("a number in 100..3600000"))?;
            Ok(())
        },
    },
];

/// Picks the value paired with the word equal to `value`.
fn one_of<T: Copy>(
    value: &str,
    expected: &'static str,
    table: &[(&str, T)],
) -> Result<T, ValueError> {
    table
        .iter()
        .find(|(w, _)| *w == value)
        .map(|(_, v)| *v)
        .ok_or(ValueError(expected))
}

/// Parses a decimal or `0x` hexadecimal unsigned number.
pub fn parse_u64(v: &str) -> Option<u64> {
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() => u64::from_str_radix(hex, 16).ok(),
        Some(_) => None,
        None => v.parse().ok(),
    }
}

/// [`parse_u64`] for values that fit 32 bits.
pub fn parse_u32(v: &str) -> Option<u32> {
    parse_u64(v).and_then(|n| u32::try_from(n).ok())
}

fn parse_hex16(s: &str) -> Option<u16> {
    if s.len() != 4 {
        return None;
    }
    u16::from_str_radix(s, 16).ok()
}

fn parse_expect_pci(v: &str, c: &mut Config) -> Result<(), ValueError> {
    const BAD: ValueError = ValueError("vvvv:dddd[,vvvv:dddd...] (hex)");
    let mut ids = [PciId {
        vendor: 0,
        device: 0,
    }; MAX_EXPECT_PCI];
    let mut n = 0;
    for item in v.split(',') {
        let (ven, dev) = item.trim().split_once(':').ok_or(BAD)?;
        let id = PciId {
            vendor: parse_hex16(ven).ok_or(BAD)?,
            device: parse_hex16(dev).ok_or(BAD)?,
        };
        if n == MAX_EXPECT_PCI {
            return Err(ValueError("at most 16 ids"));
        }
        ids[n] = id;
        n += 1;
    }
    c.expect_pci = ids;
    c.expect_pci_len = n;
    Ok(())
}

/// Where a key lives: the kernel's table or the bench's.
#[derive(Clone, Copy)]
enum Slot {
    Kernel(usize),
    Bench(usize),
}

fn find_key(key: &str) -> Option<Slot> {
    if let Some(i) = KEYS.iter().position(|k| k.name == key) {
        return Some(Slot::Kernel(i));
    }
    BENCH_KEYS
        .iter()
        .position(|k| k.name == key)
        .map(Slot::Bench)
}

/// Every key name: the kernel's, then the ping-pong keys.
pub fn key_names() -> impl Iterator<Item = (&'static str, &'static str)> {
    KEYS.iter()
        .map(|k| (k.name, k.values))
        .chain(BENCH_KEYS.iter().map(|k| (k.name, k.values)))
}

impl Config {
    /// Devices the selftest must find.
    pub fn expect_pci(&self) -> &[PciId] {
        &self.expect_pci[..self.expect_pci_len]
    }

    /// The plan's runs as given (`run=` lines), in order.
    pub fn plan(&self) -> &[Run] {
        &self.runs[..self.runs_len]
    }

    /// The plan's SRQ ping-pong runs as given (`run=ibv_srq_pingpong ...` lines), in order.
    pub fn srq_plan(&self) -> &[SrqRun] {
        &self.srq_runs[..self.srq_runs_len]
    }

    /// Whether the node runs the SRQ ping-pong (`test=srq_pingpong`, or SRQ run lines).
    pub fn srq_mode(&self) -> bool {
        self.bench.srq.enabled || self.srq_runs_len > 0
    }

    /// The ping-pong of each run of the plan: the shared keys with the run's own.
    pub fn runs(&self) -> impl Iterator<Item = PingPongConfig> + '_ {
        self.plan().iter().map(|r| r.config(&self.bench))
    }

    /// What a client runs, in order: the plan's runs or, without `run=` lines, one run of
    /// the ping-pong keys themselves; with `modes`, each of them once per mode, one after
    /// another (poll, event, isr).
    pub fn client_runs(&self) -> impl Iterator<Item = PingPongConfig> + '_ {
        let keys = (self.runs_len == 0).then_some(self.bench);
        keys.into_iter()
            .chain(self.runs())
            .flat_map(|r| r.per_mode())
    }

    /// Each run of the plan against the ping-pong rules; the error names the run (1-based)
    /// and its line.
    pub fn check_runs(&self) -> Result<(), (usize, usize, Rule)> {
        for (i, run) in self.runs().enumerate() {
            run.validate()
                .and_then(|()| self.check_interrupts(&run))
                .map_err(|r| (i + 1, self.run_lines[i], r))?;
        }
        let base = PingPongConfig {
            srq: bench::SrqKeys::default(),
            ..self.bench
        };
        for (i, run) in self.srq_plan().iter().enumerate() {
            run.validate(&base)
                .and_then(|()| self.check_interrupts(&run.config(&base)))
                .map_err(|r| (i + 1, self.srq_run_lines[i], r))?;
        }
        Ok(())
    }

    /// Sets one key from its value (trimmed); `run` adds a run to the plan. A refused value
    /// changes nothing.
    pub fn apply(&mut self, key: &str, value: &str) -> Result<(), KeyError> {
        let value = value.trim();
        let mut next = self.clone();
        match find_key(key.trim()).ok_or(KeyError::Unknown)? {
            Slot::Kernel(i) => (KEYS[i].parse)(value, &mut next),
            Slot::Bench(i) => {
                let r = BENCH_KEYS[i].apply(value, &mut next.bench);
                if r.is_ok() && BENCH_KEYS[i].name == "role" {
                    next.role = Some(next.bench.role);
                }
                r
            }
        }
        .map_err(KeyError::BadValue)?;
        *self = next;
        Ok(())
    }

    /// The rules between keys: `mode=fault` with `fault=`, `mode=pingpong` with `role=`,
    /// and the ping-pong rules ([`PingPongConfig::validate`]), whatever the mode (a
    /// configuration is refused for a combination it could not run).
    pub fn check(&self) -> Result<(), Rule> {
        if (self.mode == Mode::Fault) != self.fault.is_some() {
            return Err(Rule::FaultNeedsMode);
        }
        if self.mode == Mode::Pingpong && self.role.is_none() {
            return Err(Rule::PingpongNeedsRole);
        }
        if self.mode == Mode::Delegate && self.delegate.at.is_none() {
            return Err(Rule::OutOfRange(
                "mode=delegate needs delegate=LID:QPN (the delegate prints its LID and rendezvous QPN)",
            ));
        }
        self.check_interrupts(&self.bench)?;
        if self.srq_mode() && self.runs_len > 0 {
            return Err(Rule::OutOfRange(
                "a plan's run= lines are all ibv_srq_pingpong runs or all perftest runs (test=srq_pingpong takes ibv_srq_pingpong lines)",
            ));
        }
        if self.srq_runs_len > 0 && !self.bench.srq.moderation.as_slice().is_empty() {
            return Err(Rule::OutOfRange(
                "cq_moderation is for a plan of the keys; an ibv_srq_pingpong line takes --cq-moderation C/P",
            ));
        }
        self.bench.validate()
    }

    /// Completion events need the HCA's interrupts: a run labelled `event` must have
    /// waited for them; `isr` replies from the MSI-X handler. Checked for every mode of
    /// `modes`.
    fn check_interrupts(&self, run: &PingPongConfig) -> Result<(), Rule> {
        for completion in run.each_mode() {
            match (completion, self.hca_irq) {
                (Completion::Event, HcaIrq::Poll) => return Err(Rule::EventsWithoutInterrupts),
                (Completion::Isr, HcaIrq::Poll | HcaIrq::Intx) => return Err(Rule::IsrNeedsMsix),
                _ => {}
            }
        }
        Ok(())
    }
}

/// One `key=value` line of a configuration text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// 1-based line number.
    pub line: usize,
    pub key: &'a str,
    pub value: &'a str,
}

/// The `key=value` lines of `text`, comments and blank lines skipped, key and value
/// trimmed; a non-empty line without `=` is an error. The syntax only: what the keys mean
/// is [`parse`]'s.
pub fn entries(text: &str) -> impl Iterator<Item = Result<Entry<'_>, ConfigError<'_>>> {
    text.lines().enumerate().filter_map(|(index, raw)| {
        let line = index + 1;
        let content = raw.split_once('#').map_or(raw, |(before, _)| before).trim();
        if content.is_empty() {
            return None;
        }
        Some(match content.split_once('=') {
            Some((key, value)) => Ok(Entry {
                line,
                key: key.trim(),
                value: value.trim(),
            }),
            None => Err(ConfigError::MissingEquals {
                line,
                text: content,
            }),
        })
    })
}

/// Checks one line's key and value (unknown key, bad value), as [`parse`] does, on top of
/// `config`.
pub fn apply_entry<'a>(config: &mut Config, e: Entry<'a>) -> Result<(), ConfigError<'a>> {
    config.apply(e.key, e.value).map_err(|err| match err {
        KeyError::Unknown => ConfigError::UnknownKey {
            line: e.line,
            key: e.key,
        },
        KeyError::BadValue(why) => ConfigError::BadValue {
            line: e.line,
            key: e.key,
            value: e.value,
            why,
        },
    })
}

/// Parses the keys of `text` without the rules between them (a partial configuration,
/// e.g. one file the runner completes with its own keys).
pub fn parse_keys(text: &str) -> Result<Config, ConfigError<'_>> {
    parse_keys_onto(Config::default(), text)
}

/// The keys a plan fetched from the delegate may not set: the node already runs in its
/// mode, connected to its delegate.
const NOT_IN_A_PLAN: [&str; 2] = ["mode", "delegate"];

/// `base` with the keys of `text` applied on top, checked as a whole: a plan the node
/// fetched from its delegate (docs/delegation.md, "Plans and results"). Each key at most
/// once in `text` (it replaces `base`'s value), `run=` lines after `base`'s; `mode` and
/// `delegate` are refused.
pub fn overlay<'a>(base: &Config, text: &'a str) -> Result<Config, ConfigError<'a>> {
    for e in entries(text).flatten() {
        if NOT_IN_A_PLAN.contains(&e.key) {
            return Err(ConfigError::BadValue {
                line: e.line,
                key: e.key,
                value: e.value,
                why: ValueError("no such key in a plan (the node's own configuration sets it)"),
            });
        }
    }
    let config = parse_keys_onto(base.clone(), text)?;
    config.check().map_err(ConfigError::Rule)?;
    config
        .check_runs()
        .map_err(|(run, line, rule)| ConfigError::RunRule { line, run, rule })?;
    Ok(config)
}

fn parse_keys_onto(mut config: Config, text: &str) -> Result<Config, ConfigError<'_>> {
    let mut seen = [false; 64];
    debug_assert!(KEYS.len() + BENCH_KEYS.len() <= seen.len());
    for entry in entries(text) {
        let e = entry?;
        let slot = match find_key(e.key) {
            Some(Slot::Kernel(i)) => i,
            Some(Slot::Bench(i)) => KEYS.len() + i,
            None => {
                return Err(ConfigError::UnknownKey {
                    line: e.line,
                    key: e.key,
                })
            }
        };
        // `run` is the one key given once per run.
        if seen[slot] && e.key != "run" {
            return Err(ConfigError::Repeated {
                line: e.line,
                key: e.key,
            });
        }
        seen[slot] = true;
        apply_entry(&mut config, e)?;
        if e.key == "run" {
            if e.value.split_whitespace().next() == Some(srq_plan::PROGRAM) {
                config.srq_run_lines[config.srq_runs_len - 1] = e.line;
            } else {
                config.run_lines[config.runs_len - 1] = e.line;
            }
        }
    }
    Ok(config)
}

/// Parses and checks the configuration text: every key and value, then the rules.
pub fn parse(text: &str) -> Result<Config, ConfigError<'_>> {
    let config = parse_keys(text)?;
    config.check().map_err(ConfigError::Rule)?;
    config
        .check_runs()
        .map_err(|(run, line, rule)| ConfigError::RunRule { line, run, rule })?;
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
        assert_eq!(c.bench.peer_lid, Some(0x1f));
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
    }

    #[test]
    fn fault_mode_needs_kind_and_vice_versa() {
        let c = parse("mode=fault\nfault=pagefault\n").unwrap();
        assert_eq!((c.mode, c.fault), (Mode::Fault, Some(FaultKind::PageFault)));
        assert_eq!(
            parse("mode=fault\n"),
            Err(ConfigError::Rule(Rule::FaultNeedsMode))
        );
        assert_eq!(
            parse("fault=gpf\n"),
            Err(ConfigError::Rule(Rule::FaultNeedsMode))
        );
        let c = parse("mode=fault\nfault=stack-overflow\n").unwrap();
        assert_eq!(c.fault, Some(FaultKind::StackOverflow));
    }

    #[test]
    fn console_port_key() {
        let c = parse_bytes(None).unwrap();
        assert_eq!((c.console, c.console.io_port()), (Console::Com1, 0x3f8));
        let ports: std::vec::Vec<_> = ["com1", "com2", "com3", "com4"]
            .iter()
            .map(|v| {
                let c = parse(&std::format!("console={v}")).unwrap().console;
                assert_eq!(c.name(), *v);
                (c.index(), c.io_port())
            })
            .collect();
        assert_eq!(ports, [(0, 0x3f8), (1, 0x2f8), (2, 0x3e8), (3, 0x2e8)]);
        assert_eq!(
            parse("console=com5").unwrap_err().to_string(),
            "config line 1: key \"console\": bad value \"com5\": expected one of com1|com2|com3|com4"
        );
    }

    #[test]
    fn the_console_line_is_found_in_a_refused_configuration() {
        // The rest refused, the console line alone still says where to report it.
        let text = "mode=pingpong\nconsole=com2 # SOL\nlog=loud\n";
        assert!(parse(text).is_err());
        assert_eq!(console_of(text.as_bytes()), Some(Console::Com2));
        assert_eq!(console_of(b"mode=idle\nconsole=com4"), Some(Console::Com4));
        assert_eq!(
            console_of(b"mode=idle\nnot a line\nconsole=com3"),
            Some(Console::Com3)
        );
        for none in [
            &b"mode=idle"[..],
            b"console=com9",
            b"console=com2\nconsole=com3",
            b"\xff\xfe console=com2",
            b"",
        ] {
            assert_eq!(
                console_of(none),
                None,
                "{:?}",
                std::string::String::from_utf8_lossy(none)
            );
        }
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
        assert_eq!(
            parse("peer_lid=49151").unwrap().bench.peer_lid,
            Some(0xbfff)
        );
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
                        why: ValueError("vvvv:dddd[,vvvv:dddd...] (hex)"),
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
                why: ValueError("at most 16 ids"),
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
        assert_eq!(c.bench.transport, Transport::Uc);
        assert_eq!(c.bench.sizes, Sizes::All);
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
        assert_eq!(c.bench.test, Test::WriteLat);
        assert_eq!(c.bench.transport, Transport::Rc);
        let e = parse("test=read_lat").unwrap_err().to_string();
        assert!(
            e.contains("UD connection only possible in SEND verb"),
            "UD is the default: {e}"
        );
        let e = parse("test=bw").unwrap_err().to_string();
        assert!(e.contains("atomic_bw or srq_pingpong"), "{e}");
        // The bandwidth tests are keys too, with perftest's defaults and rules.
        let c = parse("mode=pingpong\nrole=client\ntest=send_bw\ntransport=UD\nsize=2048\ntx_depth=32\ncq_mod=8\npost_list=8\niters=64\nno_peak=1\nreport_gbits=1\n").unwrap();
        assert_eq!(
            (c.bench.test, c.bench.sizes),
            (Test::SendBw, Sizes::Single(2048))
        );
        assert_eq!(
            c.bench.bw,
            BwKeys {
                tx_depth: 32,
                post_list: 8,
                cq_mod: Some(8),
                duration_s: None,
                bidirectional: false,
                no_peak: true,
                report_gbits: true
            }
        );
        let w = parse("test=write_bw\ntransport=RC").unwrap().bench;
        assert_eq!((w.sizes, w.iterations), (Sizes::Single(65536), 5000));
        let e = parse("test=send_bw\ntransport=UD\nsize=4096")
            .unwrap_err()
            .to_string();
        assert!(e.contains("larger than the path MTU 2048"), "{e}");
        let e = parse("test=send_lat\npost_list=4").unwrap_err().to_string();
        assert!(e.contains("post_list is a bandwidth key"), "{e}");
        for t in [
            "send_bw\ntransport=UD\nsize=1024",
            "write_bw\ntransport=UC",
            "atomic_bw\ntransport=RC",
        ] {
            let b = parse(&format!("test={t}\nbidirectional=1")).unwrap().bench;
            assert!(b.bw.bidirectional, "{t}");
        }
        let b = parse("test=send_bw\ntransport=RC\nbidirectional=1\nduration=2")
            .unwrap()
            .bench;
        assert_eq!((b.bw.bidirectional, b.bw.duration_s), (true, Some(2)));
        let e = parse("test=send_lat\nbidirectional=1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bidirectional is a bandwidth key"), "{e}");
        let r = parse("test=read_bw\ntransport=RC").unwrap().bench;
        assert_eq!((r.sizes, r.outstanding_reads), (Sizes::Single(65536), 16));
        // A client facing a server whose rendezvous QPN was assigned (a Linux peer).
        let c = parse("mode=pingpong\nrole=client\npeer_rdv_qpn=0x208\n").unwrap();
        assert_eq!(c.bench.peer_rdv_qpn, Some(0x208));
        assert_eq!(c.bench.rdv_qpn, None);
        assert_eq!(c.bench.local_rdv_qpn(64), 0x7F, "derived from the device");
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

    /// Every key with values it takes and values it refuses; the test fails if a key is
    /// missing here, so a new key comes with its cases.
    const CASES: &[(&str, &[&str], &[&str])] = &[
        (
            "mode",
            &[
                "selftest", "fault", "idle", "hca", "pingpong", "diag", "delegate",
            ],
            &["", "nope", "Idle"],
        ),
        (
            "delegate",
            &["2:0x208", "0xBFFF:2", "probe:0xFFFFFF"],
            &["", "2", "0:0x208", "2:1", "probe", "2:0x1000000"],
        ),
        ("delegate_max", &["64", "1048576"], &["", "63", "1048577"]),
        ("delegate_outstanding", &["1", "64"], &["0", "65", "x"]),
        (
            "delegate_baseline",
            &["2", "0x209"],
            &["1", "0x1000000", ""],
        ),
        (
            "fault",
            &["pagefault", "panic", "divide", "gpf", "stack-overflow"],
            &["", "oops"],
        ),
        (
            "log",
            &["error", "warn", "info", "debug", "trace"],
            &["loud", "INFO"],
        ),
        (
            "expect_pci",
            &["15b3:1003", "15b3:1003,8086:29c0"],
            &["15b3", "15b3:zzzz", ""],
        ),
        ("on_exit", &["halt", "reset"], &["reboot"]),
        ("apic", &["auto", "x2apic"], &["xapic"]),
        ("acpi_dump", &["true", "false"], &["1", "yes"]),
        (
            "console",
            &["com1", "com2", "com3", "com4"],
            &["com5", "COM2", "ttyS1", ""],
        ),
        ("hca_irq", &["msix", "intx", "poll"], &["msi", ""]),
        ("sm", &["on", "off"], &["yes"]),
        (
            "port_wait_ms",
            &["100", "3600000", "0x2710"],
            &["99", "3600001", "x"],
        ),
        (
            "test",
            &[
                "send_lat",
                "write_lat",
                "WRITE_LAT",
                "read_lat",
                "atomic_lat",
                "send_bw",
                "WRITE_BW",
                "read_bw",
                "atomic_bw",
                "srq_pingpong",
            ],
            &["bw", "", "send"],
        ),
        ("transport", &["UD", "uc", "RC"], &["XY", "RD", ""]),
        (
            "size",
            &["all", "2", "8388608", "0x40"],
            &["0", "1", "8388609", "16777216", "x"],
        ),
        (
            "iters",
            &["5", "1000", "16777216"],
            &["0", "1", "4", "16777217", "-1"],
        ),
        ("inline", &["0", "1024"], &["1025", "5000", "x"]),
        (
            "completion",
            &["poll", "event", "isr", "ISR"],
            &["spin", ""],
        ),
        (
            "modes",
            &["poll", "poll,event,isr", "isr, event", "EVENT"],
            &["", "poll,poll", "poll,spin", "poll,", ","],
        ),
        (
            "mtu",
            &["256", "512", "1024", "2048", "4096"],
            &["3000", "128", "8192"],
        ),
        ("ib_port", &["1", "2"], &["0", "3"]),
        ("role", &["client", "server"], &["clinet", "both", ""]),
        (
            "peer_lid",
            &["1", "0xbfff", "49151"],
            &["0", "0xc000", "zz", "0x", ""],
        ),
        ("loss_limit", &["0", "100"], &["-1", "many"]),
        ("timeout_ms", &["1", "60000"], &["0", "60001"]),
        ("peer_timeout_ms", &["1", "120000"], &["0", "x"]),
        (
            "probe_lids",
            &["1-64", "1-1024", "0x10-0x20"],
            &["5-1", "1-5000", "0-4", "1", "a-b"],
        ),
        (
            "rdv_qpn",
            &["2", "0x7f", "0xffffff"],
            &["0", "1", "0x1000000", "qp"],
        ),
        (
            "peer_rdv_qpn",
            &["2", "0x208", "16777215"],
            &["0", "1", "0x1000000", "0x", ""],
        ),
        ("verify", &["0", "1", "true", "off"], &["maybe"]),
        ("anatomy", &["on", "off", "1", "0"], &["yes", ""]),
        (
            "atomic",
            &["FETCH_AND_ADD", "cmp_and_swap"],
            &["ADD", "", "CAS"],
        ),
        ("outstanding_reads", &["1", "16"], &["0", "17", "x"]),
        ("qps", &["1", "16", "64"], &["0", "65", "x"]),
        ("rx_depth", &["1", "500", "16000"], &["0", "16001", ""]),
        (
            "cq_moderation",
            &["0/0", "1/0,4/16,16/64", "65535/0x10"],
            &[
                "",
                "4",
                "4/",
                "65536/0",
                "1/0,1/0,1/0,1/0,1/0,1/0,1/0,1/0,1/0",
            ],
        ),
        ("tx_depth", &["1", "128", "15000"], &["0", "15001", "x"]),
        ("post_list", &["1", "1024"], &["0", "1025", ""]),
        ("cq_mod", &["1", "100", "1024"], &["0", "1025", "-1"]),
        ("duration", &["1", "3600"], &["0", "3601", "5s"]),
        ("bidirectional", &["0", "1", "on"], &["yes", "2"]),
        ("no_peak", &["1", "false"], &["N"]),
        ("report_gbits", &["1", "0"], &["gbits"]),
        ("repeat", &["1", "1000"], &["0", "1001", "x"]),
        ("idle_timeout_ms", &["0", "600000"], &["86400001", "-1"]),
        (
            "run",
            &[
                "ib_send_lat -c UD -a",
                "ib_write_lat -c RC -s 64 -n 20",
                "ibv_srq_pingpong -q 4 -e --cq-moderation 4/16",
                "ib_send_bw -c UD -s 1024 -t 64 -Q 8 -N",
            ],
            &[
                "",
                "ib_bw",
                "ib_send_lat -q",
                "ib_atomic_lat -A X",
                "ibv_srq_pingpong -q 99",
                "ib_send_bw -t 0",
            ],
        ),
    ];

    #[test]
    fn srq_pingpong_runs_its_keys_and_takes_no_plan_lines() {
        let c = parse(
            "mode=pingpong\nrole=client\ntest=srq_pingpong\nqps=4\nrx_depth=8\ncompletion=event\ncq_moderation=1/0,4/16\n",
        )
        .unwrap();
        assert!(c.bench.srq.enabled);
        assert_eq!(c.bench.srq.moderation.as_slice().len(), 2);
        let e = parse("mode=pingpong\nrole=client\ntest=srq_pingpong\nrun=ib_send_lat -c UD\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("all ibv_srq_pingpong runs or all perftest runs"),
            "{e}"
        );
        // A plan of SRQ runs: srq mode without the test key, each line checked with its
        // own line number, mixing refused.
        let c = parse(
            "mode=pingpong\nrole=client\nrun=ibv_srq_pingpong -q 4 -r 8 -s 64\nrun=ibv_srq_pingpong -q 1 -e --cq-moderation 4/16\n",
        )
        .unwrap();
        assert!(c.srq_mode() && !c.bench.srq.enabled);
        assert_eq!(c.srq_plan().len(), 2);
        assert_eq!(c.srq_plan()[1].moderation.map(|m| m.cq_period), Some(16));
        assert!(c.plan().is_empty());
        let e = parse(
            "mode=pingpong\nrole=client\nrun=ibv_srq_pingpong\nrun=ibv_srq_pingpong -q 16 -r 8\n",
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                ConfigError::RunRule {
                    line: 4,
                    run: 2,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = parse("mode=pingpong\nrole=client\nrun=ibv_srq_pingpong\nrun=ib_send_lat -c UD\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("all ibv_srq_pingpong runs or all perftest runs"),
            "{e}"
        );
        let e = parse("mode=pingpong\nrole=client\nrun=ibv_srq_pingpong -e\nhca_irq=poll\n")
            .unwrap_err();
        assert!(
            matches!(
                e,
                ConfigError::RunRule {
                    rule: Rule::EventsWithoutInterrupts,
                    ..
                }
            ),
            "{e:?}"
        );
        // Events need interrupts, as for every test.
        let e = parse(
            "mode=pingpong\nrole=client\ntest=srq_pingpong\ncompletion=event\nhca_irq=poll\n",
        )
        .unwrap_err();
        assert!(
            matches!(e, ConfigError::Rule(Rule::EventsWithoutInterrupts)),
            "{e}"
        );
    }

    #[test]
    fn every_key_takes_its_values_and_refuses_others() {
        for (name, _) in key_names() {
            assert!(
                CASES.iter().any(|(k, _, _)| *k == name),
                "key {name} has no test cases"
            );
        }
        for (key, good, bad) in CASES {
            assert!(key_names().any(|(k, _)| k == *key), "{key} is not a key");
            for v in *good {
                let mut c = Config::default();
                assert_eq!(c.apply(key, v), Ok(()), "{key}={v}");
                // As a line of a ramdisk too.
                let text = std::format!("{key}={v}");
                assert!(parse_keys(&text).is_ok(), "{text}");
            }
            for v in *bad {
                let mut c = Config::default();
                let before = c.clone();
                assert!(
                    matches!(c.apply(key, v), Err(KeyError::BadValue(_))),
                    "{key}={v} accepted"
                );
                assert_eq!(c, before, "{key}={v}: a refused value changes nothing");
                let text = std::format!("# node\n{key}={v}\n");
                match parse(&text) {
                    Err(ConfigError::BadValue {
                        line: 2,
                        key: k,
                        value,
                        why,
                    }) => {
                        assert_eq!((k, value), (*key, *v));
                        let message = ConfigError::BadValue {
                            line: 2,
                            key: k,
                            value,
                            why,
                        }
                        .to_string();
                        assert!(
                            message.starts_with(&std::format!(
                                "config line 2: key {key:?}: bad value {v:?}: expected "
                            )),
                            "{message}"
                        );
                    }
                    other => panic!("{text:?}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn values_land_in_their_typed_fields() {
        let text = "mode=pingpong\nrole=client\ntest=write_lat\ntransport=rc\nsize=4096\n\
                    iters=20\ninline=64\nmtu=1024\nib_port=2\npeer_lid=0x12\nloss_limit=3\n\
                    timeout_ms=2000\npeer_timeout_ms=5000\nprobe_lids=2-9\nrdv_qpn=0x70\n\
                    peer_rdv_qpn=0x208\nverify=1\nhca_irq=poll\nsm=on\nport_wait_ms=120000\n\
                    on_exit=reset\nacpi_dump=true\nlog=trace\nconsole=com3\n";
        let c = parse(text).unwrap();
        assert_eq!(c.console, Console::Com3);
        let b = &c.bench;
        assert_eq!((c.mode, c.role), (Mode::Pingpong, Some(Role::Client)));
        assert_eq!(
            (b.test, b.transport, b.role),
            (Test::WriteLat, Transport::Rc, Role::Client)
        );
        assert_eq!(
            (b.sizes, b.iterations, b.inline()),
            (Sizes::Single(4096), 20, 64)
        );
        assert_eq!(
            (b.mtu, b.port, b.peer_lid),
            (Some(verbs::Mtu::Mtu1024), 2, Some(0x12))
        );
        assert_eq!(
            (b.max_losses_per_size, b.wait_timeout_ns),
            (3, 2_000_000_000)
        );
        assert_eq!((b.peer_timeout_ns, b.probe_lids), (5_000_000_000, (2, 9)));
        assert_eq!(
            (b.local_rdv_qpn(64), b.hello_qpn(64), b.verify),
            (0x70, 0x208, true)
        );
        assert_eq!(
            (c.hca_irq, c.sm, c.port_wait_ms),
            (HcaIrq::Poll, true, 120_000)
        );
        assert_eq!(
            (c.on_exit, c.acpi_dump, c.log),
            (OnExit::Reset, true, LogLevel::Trace)
        );
        // rdv_qpn stays optional: not given, the device's rule applies.
        let d = parse("mode=idle").unwrap().bench;
        assert_eq!((d.rdv_qpn, d.local_rdv_qpn(128)), (None, 0xFF));
    }

    #[test]
    fn a_plan_overlays_the_nodes_configuration() {
        let base = parse("mode=pingpong\nrole=client\ndelegate=2:0x208\niters=50\nhca_irq=msix\n")
            .unwrap();
        let c = overlay(
            &base,
            "# from the delegate\niters=20\nrun=ib_send_lat -c UC -s 64\nrun=ib_read_lat\n",
        )
        .unwrap();
        assert_eq!(c.bench.iterations, 20);
        assert_eq!(c.plan().len(), 2);
        assert_eq!((c.mode, c.delegate.at), (base.mode, base.delegate.at));
        // An empty plan changes nothing.
        assert_eq!(overlay(&base, "\n# nothing\n").unwrap(), base);
        // What a plan may not say, a key twice, and the rules over the whole.
        for (text, line) in [("mode=hca", 1), ("iters=5\ndelegate=3:0x300", 2)] {
            match overlay(&base, text) {
                Err(ConfigError::BadValue { line: l, why, .. }) => {
                    assert_eq!(l, line, "{text}");
                    assert!(why.0.contains("plan"), "{why}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        assert!(matches!(
            overlay(&base, "iters=5\niters=6"),
            Err(ConfigError::Repeated { line: 2, .. })
        ));
        assert!(matches!(
            overlay(&base, "run=ib_read_lat -c UD"),
            Err(ConfigError::RunRule {
                run: 1,
                line: 1,
                ..
            })
        ));
        assert!(matches!(
            overlay(&base, "completion=isr\nhca_irq=poll"),
            Err(ConfigError::Rule(Rule::IsrNeedsMsix))
        ));
    }

    #[test]
    fn rules_between_keys() {
        let rule = |text: &str| match parse(text) {
            Err(ConfigError::Rule(r)) => r,
            other => panic!("{text:?}: {other:?}"),
        };
        assert_eq!(rule("mode=fault"), Rule::FaultNeedsMode);
        assert_eq!(rule("fault=panic"), Rule::FaultNeedsMode);
        assert_eq!(rule("mode=pingpong"), Rule::PingpongNeedsRole);
        assert!(
            matches!(rule("mode=delegate"), Rule::OutOfRange(m) if m.contains("delegate=LID:QPN"))
        );
        let d = parse("mode=delegate\ndelegate=2:0x208\ndelegate_max=4096\ndelegate_baseline=0x209\nmodes=poll,isr\niters=20").unwrap();
        assert_eq!(d.mode, Mode::Delegate);
        assert_eq!(
            d.delegate,
            delegate::DelegateKeys {
                at: Some(delegate::DelegateAt {
                    lid: Some(2),
                    qpn: 0x208
                }),
                max_size: 4096,
                outstanding: 64,
                baseline_qpn: Some(0x209),
            }
        );
        assert_eq!(rule("test=write_lat\ntransport=UD"), Rule::WriteLatOverUd);
        assert_eq!(
            rule("test=write_lat"),
            Rule::WriteLatOverUd,
            "UD is the default"
        );
        assert_eq!(
            rule("test=read_lat\ntransport=UC"),
            Rule::OneSidedNeedsRc {
                transport: Transport::Uc
            }
        );
        assert_eq!(
            rule("test=atomic_lat\ntransport=UD"),
            Rule::OneSidedNeedsRc {
                transport: Transport::Ud
            }
        );
        assert_eq!(
            rule("test=atomic_lat\ntransport=RC\nsize=16"),
            Rule::AtomicSize { size: 16 }
        );
        assert_eq!(
            rule("test=write_lat\ntransport=UC\ncompletion=event"),
            Rule::WriteLatWithEvents
        );
        assert_eq!(
            rule("role=server\npeer_rdv_qpn=0x208"),
            Rule::PeerRdvQpnOnServer
        );
        // Events need interrupts: polled bring-up cannot run a run labelled event.
        assert_eq!(
            rule("hca_irq=poll\ncompletion=event"),
            Rule::EventsWithoutInterrupts
        );
        assert_eq!(
            parse("mode=pingpong\nrole=client\nhca_irq=poll\ncompletion=event")
                .unwrap_err()
                .to_string(),
            "config: completion=event waits for completion interrupts, and hca_irq=poll takes none (use hca_irq=msix or intx)"
        );
        // In a plan, the run that asks for events is named.
        assert_eq!(
            parse("hca_irq=poll\nrun=ib_send_lat -c UD\nrun=ib_send_lat -c UC -e"),
            Err(ConfigError::RunRule {
                line: 3,
                run: 2,
                rule: Rule::EventsWithoutInterrupts
            })
        );
        assert_eq!(
            rule("transport=UD\nsize=4096"),
            Rule::UdSizeAboveMtu {
                size: 4096,
                mtu: 2048
            }
        );
        assert_eq!(
            rule("size=2048\nmtu=1024"),
            Rule::UdSizeAboveMtu {
                size: 2048,
                mtu: 1024
            }
        );
        assert_eq!(
            parse("transport=UD\nsize=4096").unwrap_err().to_string(),
            "config: UD message of 4096 bytes is larger than the path MTU 2048"
        );
        // What the rules allow.
        for ok in [
            "size=2048",
            "size=4096\nmtu=4096",
            "size=8388608\ntransport=UC",
            "test=write_lat\ntransport=RC\nsize=all",
            "mode=pingpong\nrole=client\npeer_rdv_qpn=0x208",
            "mode=fault\nfault=gpf",
            "transport=UD\nsize=all\ncompletion=event",
            "hca_irq=msix\ncompletion=event",
            "hca_irq=intx\ncompletion=event",
            "hca_irq=poll\ncompletion=poll",
            "hca_irq=intx\nrun=ib_send_lat -c UC -e",
        ] {
            assert!(parse(ok).is_ok(), "{ok}: {:?}", parse(ok));
        }
    }

    #[test]
    fn modes_make_one_run_per_mode_in_a_fixed_order() {
        let c = parse("mode=pingpong\nrole=client\nmodes=isr,poll,event\nsize=64").unwrap();
        let runs: Vec<_> = c.client_runs().collect();
        let modes: Vec<_> = runs.iter().map(|r| r.completion).collect();
        assert_eq!(
            modes,
            [Completion::Poll, Completion::Event, Completion::Isr],
            "poll, event, isr whatever order they were listed in"
        );
        assert!(runs
            .iter()
            .all(|r| r.modes.is_empty() && r.sizes == Sizes::Single(64)));
        assert_eq!(c.bench.modes.to_string(), "poll,event,isr");
        // In a plan, every run once per mode, run by run; `modes` wins over `-e`.
        let c =
            parse("role=client\nmodes=poll,isr\nrun=ib_send_lat -c UD\nrun=ib_read_lat -e -n 10")
                .unwrap();
        let runs: Vec<_> = c.client_runs().map(|r| (r.test, r.completion)).collect();
        assert_eq!(
            runs,
            [
                (Test::SendLat, Completion::Poll),
                (Test::SendLat, Completion::Isr),
                (Test::ReadLat, Completion::Poll),
                (Test::ReadLat, Completion::Isr),
            ]
        );
        // `completion` after `modes` goes back to one mode, and the reverse.
        let c = parse("modes=poll,event\ncompletion=isr").unwrap();
        assert_eq!(c.client_runs().count(), 1);
        assert_eq!(c.bench.completion, Completion::Isr);
        let c = parse("completion=event\nmodes=event,isr").unwrap();
        assert_eq!(c.client_runs().count(), 2);
        // Without `modes`: one run, `completion`'s mode.
        let c = parse("completion=event").unwrap();
        let one: Vec<_> = c.client_runs().map(|r| r.completion).collect();
        assert_eq!(one, [Completion::Event]);
        // `--isr` on a run line, printed back the same way.
        let r = Run::parse("ib_send_lat -c RC --isr").unwrap();
        assert_eq!(r.completion, Completion::Isr);
        assert_eq!(r.to_string(), "ib_send_lat -c RC -s 2 -n 1000 --isr");
    }

    #[test]
    fn every_mode_of_modes_is_checked_against_the_interrupts() {
        let rule = |text: &str| match parse(text) {
            Err(ConfigError::Rule(r)) => r,
            other => panic!("{text:?}: {other:?}"),
        };
        assert_eq!(rule("hca_irq=intx\ncompletion=isr"), Rule::IsrNeedsMsix);
        assert_eq!(rule("hca_irq=poll\nmodes=poll,isr"), Rule::IsrNeedsMsix);
        assert_eq!(
            rule("hca_irq=poll\nmodes=poll,event"),
            Rule::EventsWithoutInterrupts
        );
        assert_eq!(
            rule("test=write_lat\ntransport=RC\nmodes=poll,isr"),
            Rule::WriteLatWithEvents
        );
        assert_eq!(
            parse("hca_irq=intx\nrun=ib_send_lat -c UC\nrun=ib_send_lat --isr"),
            Err(ConfigError::RunRule {
                line: 3,
                run: 2,
                rule: Rule::IsrNeedsMsix
            })
        );
        assert_eq!(
            parse("hca_irq=intx\ncompletion=isr").unwrap_err().to_string(),
            "config: completion=isr posts the reply from the completion interrupt's handler: it needs hca_irq=msix"
        );
        for ok in [
            "hca_irq=msix\nmodes=poll,event,isr",
            "modes=poll,event,isr\ntransport=RC\nsize=all",
            "test=read_lat\ntransport=RC\nmodes=poll,event,isr",
            "hca_irq=intx\nmodes=poll,event",
            "test=write_lat\ntransport=RC\nmodes=poll",
        ] {
            assert!(parse(ok).is_ok(), "{ok}: {:?}", parse(ok));
        }
    }

    #[test]
    fn rules_that_need_the_device_name_both_numbers() {
        use verbs::Mtu;
        let c = parse("transport=UD\nsize=2048").unwrap().bench;
        let mtu = c.effective_mtu(Mtu::Mtu1024);
        let e = c.validate_on_device(mtu, 936).unwrap_err();
        assert_eq!(
            e,
            Rule::UdSizeAboveMtu {
                size: 2048,
                mtu: 1024
            }
        );
        assert_eq!(
            e.to_string(),
            "UD message of 2048 bytes is larger than the path MTU 1024"
        );
        assert_eq!(
            c.validate_on_device(c.effective_mtu(Mtu::Mtu4096), 936),
            Ok(())
        );
        let c = parse("transport=UC\ninline=1024").unwrap().bench;
        let e = c.validate_on_device(Mtu::Mtu2048, 936).unwrap_err();
        assert_eq!(
            e,
            Rule::InlineAboveDevice {
                inline: 1024,
                limit: 936
            }
        );
        assert_eq!(
            e.to_string(),
            "inline limit of 1024 bytes is more than the device's QP can carry (936)"
        );
        // The defaults (236 B for UC) fit.
        assert!(parse("transport=UC")
            .unwrap()
            .bench
            .validate_on_device(Mtu::Mtu2048, 936)
            .is_ok());
    }

    #[test]
    fn syntax_entries_are_what_the_host_and_kernel_both_read() {
        let text = "# c\n\n a = b # x\nc=d=e\r\n";
        let got: std::vec::Vec<_> = entries(text).collect();
        assert_eq!(
            got,
            [
                Ok(Entry {
                    line: 3,
                    key: "a",
                    value: "b"
                }),
                Ok(Entry {
                    line: 4,
                    key: "c",
                    value: "d=e"
                })
            ]
        );
        assert_eq!(
            entries("x").next(),
            Some(Err(ConfigError::MissingEquals { line: 1, text: "x" }))
        );
    }
}
