//! ibkern's configuration: one typed vocabulary, parsed and checked by one crate on both
//! sides of the boot. The kernel reads it from its ramdisk; the bench runs the ping-pong
//! part of it; the host tools (`boot`, the `cargo qemu` runner) check every configuration
//! they write or are given with this same code before anything boots, so a bad key, value
//! or combination is refused on the host with the message the kernel would print.
//!
//! Syntax ([`entries`]): one `key=value` per line, `#` starts a comment (whole line or after
//! a value), blank lines and surrounding whitespace are ignored. Every key is described once
//! in [`KEYS`] (name, accepted values, parser, emitter); the ping-pong keys in
//! [`bench::BENCH_KEYS`]. Unknown keys, repeated keys and malformed values are errors that
//! name the line and the key: nothing falls back to a default silently. The rules between
//! keys ([`Rule`]) are checked once the whole text is read ([`Config::check`]); the rules
//! that need the device (a UD message against the port's MTU, the inline limit against
//! the QP's) are checked by the bench on the device
//! ([`bench::PingPongConfig::validate_on_device`]).
//!
//! The other direction: a host tool builds a [`Config`] as a value and writes it with its
//! `Display`, the parser's inverse (`parse(&c.to_string()) == Ok(c)`). Each named value
//! (`mode`, `transport`, `test`, ...) is declared once ([`names`]): the parser, the
//! emitter, the messages and, with the `clap` feature, the host tools' command-line value
//! lists take its names from there. Each number key's bounds are one [`Bounds`] constant
//! that its parser, its refusal and the command-line flags share.
//!
//! No allocation: errors borrow the text, the tables are static.
#![cfg_attr(not(any(test, feature = "clap")), no_std)]

use core::fmt;
use core::fmt::Write as _;

pub mod bench;
pub mod names;
pub mod plan;
pub mod srq_plan;

pub use names::Names;
use names::{names, Alternatives};

pub use plan::{Run, MAX_RUNS};
pub use srq_plan::SrqRun;

pub use bench::{
    AtomicOp, Benchmark, BwKeys, Completion, Moderations, Modes, PingPongConfig, Role, Rule, Sizes,
    SrqKeys, Test, Transport, BENCH_KEYS,
};

names! {
    /// What the kernel does after bring-up.
    pub enum Mode (exact case) {
        /// Check the foundations on the running machine and exit with the verdict.
        Selftest = "selftest",
        /// Trigger the fault named by `fault=` (tests the fault report and exit code).
        Fault = "fault",
        /// Enable interrupts and halt forever (interactive runs).
        Idle = "idle",
        /// Find the ConnectX-3 on PCI, bring it up, log the summary, run the NOP interrupt
        /// test, tear down and bring up again once (leak check), exit with the verdict.
        Hca = "hca",
        /// Bring the HCA up and run the ping-pong latency sweep (`role=`, bench keys).
        Pingpong = "pingpong",
        /// Print everything needed to debug on unfamiliar hardware (PCI config space of the
        /// HCA, firmware, capabilities, ports, the command log of bring-up) for a bug report.
        Diag = "diag",
    }
}

names! {
    /// How the HCA's interrupts are delivered (`hca_irq=`).
    pub enum HcaIrq (exact case) {
        /// MSI-X vector 0 (the device's real mode), INTx as the driver's fallback.
        Msix = "msix",
        /// Legacy INTx only, routed from the interrupt-line register.
        Intx = "intx",
        /// No interrupts: commands and completions are polled.
        Poll = "poll",
    }
}

names! {
    /// The serial port of the kernel's console (`console=`): the four ISA serial ports at
    /// their standard I/O addresses. A node's serial-over-LAN may be wired to any of them.
    pub enum Console (exact case) {
        /// COM1, I/O port 0x3f8.
        Com1 = "com1",
        /// COM2, I/O port 0x2f8.
        Com2 = "com2",
        /// COM3, I/O port 0x3e8.
        Com3 = "com3",
        /// COM4, I/O port 0x2e8.
        Com4 = "com4",
    }
}

impl Console {
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

names! {
    /// The deliberate fault of `mode=fault`.
    pub enum FaultKind (exact case) {
        /// Read an unmapped (canonical) address.
        PageFault = "pagefault",
        /// `panic!`.
        Panic = "panic",
        /// Integer division by zero (#DE).
        Divide = "divide",
        /// Access a non-canonical address (#GP).
        Gpf = "gpf",
        /// Unbounded recursion into the stack guard page: the page fault cannot be
        /// delivered on the overflowed stack, so it becomes a double fault handled on the
        /// IST stack.
        StackOverflow = "stack-overflow",
    }
}

names! {
    /// What to do once the kernel has finished (after telling QEMU through isa-debug-exit).
    pub enum OnExit (exact case) {
        /// Halt the CPU forever (metal: the console stays readable).
        Halt = "halt",
        /// Reset the machine (metal: back to PXE for the next job).
        Reset = "reset",
    }
}

names! {
    /// Console verbosity.
    #[derive(PartialOrd, Ord)]
    pub enum LogLevel (exact case) {
        /// Errors only.
        Error = "error",
        /// Errors and warnings.
        Warn = "warn",
        /// What each step did (the default).
        Info = "info",
        /// Details for debugging.
        Debug = "debug",
        /// Everything, every firmware command included.
        Trace = "trace",
    }
}
/// A PCI vendor:device pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciId {
    pub vendor: u16,
    pub device: u16,
}

impl PciId {
    pub const fn new(vendor: u16, device: u16) -> Self {
        PciId { vendor, device }
    }
}

impl fmt::Display for PciId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:04x}", self.vendor, self.device)
    }
}

/// Most `expect_pci` entries one config can name.
pub const MAX_EXPECT_PCI: usize = 16;
/// Bounds of `port_wait_ms`.
pub const PORT_WAIT_MS: Bounds = Bounds::new("milliseconds", 100, 3_600_000);

/// The parsed configuration. `Default` is what the kernel runs without a ramdisk.
///
/// Host tools build one as a value (its fields, and the setters that keep the fields'
/// invariants: [`Config::set_role`], [`Config::push_run`], ...), check it
/// ([`Config::check`]) and write it as the kernel's text with `Display`, the inverse of
/// [`parse`].
#[derive(Clone)]
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

/// The fields, with the lists as long as they are (not their spare room).
impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("mode", &self.mode)
            .field("fault", &self.fault)
            .field("log", &self.log)
            .field("role", &self.role)
            .field("expect_pci", &self.expect_pci())
            .field("on_exit", &self.on_exit)
            .field("acpi_dump", &self.acpi_dump)
            .field("x2apic", &self.x2apic)
            .field("console", &self.console)
            .field("hca_irq", &self.hca_irq)
            .field("sm", &self.sm)
            .field("port_wait_ms", &self.port_wait_ms)
            .field("bench", &self.bench)
            .field("plan", &self.plan())
            .field("srq_plan", &self.srq_plan())
            .finish()
    }
}

/// Two configurations are equal when they configure the same thing: the lines a plan's runs
/// came from (kept for messages) are not part of it.
impl PartialEq for Config {
    fn eq(&self, other: &Self) -> bool {
        let Config {
            mode,
            fault,
            log,
            role,
            expect_pci: _,
            expect_pci_len: _,
            on_exit,
            acpi_dump,
            x2apic,
            console,
            hca_irq,
            sm,
            port_wait_ms,
            bench,
            runs: _,
            run_lines: _,
            runs_len: _,
            srq_runs: _,
            srq_run_lines: _,
            srq_runs_len: _,
        } = self;
        (mode, fault, log, role, on_exit, acpi_dump, x2apic, console)
            == (
                &other.mode,
                &other.fault,
                &other.log,
                &other.role,
                &other.on_exit,
                &other.acpi_dump,
                &other.x2apic,
                &other.console,
            )
            && (hca_irq, sm, port_wait_ms, bench)
                == (&other.hca_irq, &other.sm, &other.port_wait_ms, &other.bench)
            && self.expect_pci() == other.expect_pci()
            && self.plan() == other.plan()
            && self.srq_plan() == other.srq_plan()
    }
}

/// A value as the emitter writes it, on the stack (the crate allocates nothing). The longest
/// value a key can hold (16 PCI ids, 8 moderation settings) fits many times over.
struct ValueText {
    bytes: [u8; 512],
    len: usize,
}

impl ValueText {
    fn new() -> Self {
        ValueText {
            bytes: [0; 512],
            len: 0,
        }
    }

    fn as_str(&self) -> &str {
        // Only whole `&str`s are ever copied in.
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or("")
    }
}

impl fmt::Write for ValueText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        if end > self.bytes.len() {
            return Err(fmt::Error);
        }
        self.bytes[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// The configuration as the text the kernel reads, the inverse of [`parse`]: in the tables'
/// order ([`KEYS`], then [`BENCH_KEYS`]), `mode`, then one `key=value` line for each key
/// whose value changes what the lines before it give (so the defaults are not written, and
/// a key whose parser sets others' defaults, `test`, comes before them), then one `run=`
/// line per run of the plan. `parse(&c.to_string()) == Ok(c)` for every configuration [`parse`] can give
/// (tested over every key's values); a field set directly to a value its key cannot write
/// (a timeout that is not whole milliseconds) would not survive, which is why the runner
/// parses back every text it writes.
impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut so_far = Config::default();
        let kernel = KEYS
            .iter()
            .filter(|k| k.name != "run")
            .map(|k| (k.name, Shown::Kernel(k.show)));
        let bench = BENCH_KEYS.iter().map(|k| {
            if k.name == "role" {
                (k.name, Shown::Role)
            } else {
                (k.name, Shown::Bench(k.show))
            }
        });
        for (name, shown) in kernel.chain(bench) {
            let mut value = ValueText::new();
            let written = match shown {
                Shown::Kernel(show) => show(self, &mut value),
                Shown::Bench(show) => show(&self.bench, &mut value),
                Shown::Role => self.role.map_or(Ok(()), |r| value.write_str(r.name())),
            };
            let value = value.as_str();
            if written.is_err() || value.is_empty() {
                continue;
            }
            let mut next = so_far.clone();
            // `mode` is always written: every text says what the kernel does.
            if next.apply(name, value).is_ok() && (next != so_far || name == "mode") {
                writeln!(f, "{name}={value}")?;
                so_far = next;
            }
        }
        for run in self.plan() {
            writeln!(f, "run={run}")?;
        }
        for run in self.srq_plan() {
            writeln!(f, "run={run}")?;
        }
        Ok(())
    }
}

/// Where the emitter reads a key's value.
#[derive(Clone, Copy)]
enum Shown {
    Kernel(fn(&Config, &mut dyn fmt::Write) -> fmt::Result),
    Bench(fn(&PingPongConfig, &mut dyn fmt::Write) -> fmt::Result),
    /// `role`: as given (the bench's field always holds one).
    Role,
}

/// Why a value was rejected: what the key expects (shown after "expected ").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueError {
    /// In words.
    Expected(&'static str),
    /// One of these names (`a|b|c`), a named value's table ([`names`]).
    OneOf(&'static [&'static str]),
    /// A number in `lo..=hi` (the bounds are the key's constants); `what` says what the
    /// number counts, `hex` writes the bounds in hexadecimal.
    Range {
        what: &'static str,
        lo: u64,
        hi: u64,
        hex: bool,
    },
    /// A list of at most `most` items (`what`: their name, plural).
    AtMost { most: u64, what: &'static str },
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ValueError::Expected(what) => write!(f, "expected {what}"),
            ValueError::OneOf(names) => write!(f, "expected one of {}", Alternatives(names)),
            ValueError::Range {
                what,
                lo,
                hi,
                hex: false,
            } => write!(f, "expected {what} {lo}..={hi}"),
            ValueError::Range {
                what,
                lo,
                hi,
                hex: true,
            } => write!(f, "expected {what} {lo}..={hi:#X}"),
            ValueError::AtMost { most, what } => write!(f, "expected at most {most} {what}"),
        }
    }
}

/// What a key accepts, for its documentation and [`key_names`]: the same names and bounds
/// its parser uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Values {
    /// In words (a syntax).
    Text(&'static str),
    /// One of these names.
    Names(&'static [&'static str]),
    /// A number in `lo..=hi`.
    Range { lo: u64, hi: u64, hex: bool },
}

impl fmt::Display for Values {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Values::Text(t) => f.write_str(t),
            Values::Names(names) => Alternatives(names).fmt(f),
            Values::Range { lo, hi, hex: false } => write!(f, "{lo}..{hi}"),
            Values::Range { lo, hi, hex: true } => write!(f, "{lo}..{hi:#x}"),
        }
    }
}

/// A number key's bounds, written once: its parser, its [`Values`] and its refusal
/// ([`ValueError::Range`]) all come from here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// What the number counts ("an iteration count", "milliseconds", ...).
    pub what: &'static str,
    pub lo: u64,
    pub hi: u64,
    /// Written in hexadecimal (QP numbers, LIDs).
    pub hex: bool,
}

impl Bounds {
    /// Decimal bounds `lo..=hi` of `what`.
    pub const fn new(what: &'static str, lo: u64, hi: u64) -> Bounds {
        Bounds {
            what,
            lo,
            hi,
            hex: false,
        }
    }

    /// The same bounds written in hexadecimal.
    pub const fn hex(self) -> Bounds {
        Bounds { hex: true, ..self }
    }

    /// `v` (decimal or `0x` hex) within the bounds.
    pub fn parse(&self, v: &str) -> Result<u64, ValueError> {
        parse_u64(v)
            .filter(|n| (self.lo..=self.hi).contains(n))
            .ok_or(self.error())
    }

    /// [`Self::parse`] for a bound that fits 32 bits.
    pub fn parse_u32(&self, v: &str) -> Result<u32, ValueError> {
        self.parse(v).map(|n| n as u32)
    }

    /// Whether `n` is within the bounds.
    pub fn contains(&self, n: u64) -> bool {
        (self.lo..=self.hi).contains(&n)
    }

    /// The refusal of a number outside the bounds.
    pub const fn error(&self) -> ValueError {
        ValueError::Range {
            what: self.what,
            lo: self.lo,
            hi: self.hi,
            hex: self.hex,
        }
    }

    /// The key's accepted values.
    pub const fn values(&self) -> Values {
        Values::Range {
            lo: self.lo,
            hi: self.hi,
            hex: self.hex,
        }
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

/// One row of the key table: the key's name, what it accepts, its parser and its emitter
/// (the parser's inverse).
pub struct Key {
    pub name: &'static str,
    /// Accepted values, for messages and documentation.
    pub values: Values,
    parse: fn(&str, &mut Config) -> Result<(), ValueError>,
    /// Writes the key's value in a configuration (nothing when the key is absent: an
    /// option not given).
    show: fn(&Config, &mut dyn fmt::Write) -> fmt::Result,
}

/// The value of a named key ([`names`]), or the refusal naming every value it takes.
pub(crate) fn named<T: Names>(value: &str) -> Result<T, ValueError> {
    T::from_name(value).ok_or(ValueError::OneOf(T::NAMES))
}

/// The word of `words` equal to `value`, or the refusal naming them.
pub(crate) fn word(
    value: &str,
    words: &'static [&'static str],
) -> Result<&'static str, ValueError> {
    words
        .iter()
        .copied()
        .find(|w| *w == value)
        .ok_or(ValueError::OneOf(words))
}

const APIC: &[&str] = &["auto", "x2apic"];
const TRUE_FALSE: &[&str] = &["true", "false"];
const ON_OFF: &[&str] = &["on", "off"];

/// Every key: the kernel's own, then the ping-pong keys (the bench's table, with `role`
/// also recorded as given). The emitter writes them in this order ([`Config`]'s
/// `Display`), so a key whose parser sets defaults for others comes before them.
pub static KEYS: &[Key] = &[
    Key {
        name: "mode",
        values: Values::Names(Mode::NAMES),
        parse: |v, c| {
            c.mode = named(v)?;
            Ok(())
        },
        show: |c, w| w.write_str(c.mode.name()),
    },
    Key {
        name: "fault",
        values: Values::Names(FaultKind::NAMES),
        parse: |v, c| {
            c.fault = Some(named(v)?);
            Ok(())
        },
        show: |c, w| c.fault.map_or(Ok(()), |f| w.write_str(f.name())),
    },
    Key {
        name: "log",
        values: Values::Names(LogLevel::NAMES),
        parse: |v, c| {
            c.log = named(v)?;
            Ok(())
        },
        show: |c, w| w.write_str(c.log.name()),
    },
    Key {
        name: "expect_pci",
        values: Values::Text("vvvv:dddd[,vvvv:dddd...]"),
        parse: parse_expect_pci,
        show: |c, w| {
            for (i, id) in c.expect_pci().iter().enumerate() {
                if i > 0 {
                    w.write_str(",")?;
                }
                write!(w, "{id}")?;
            }
            Ok(())
        },
    },
    Key {
        name: "on_exit",
        values: Values::Names(OnExit::NAMES),
        parse: |v, c| {
            c.on_exit = named(v)?;
            Ok(())
        },
        show: |c, w| w.write_str(c.on_exit.name()),
    },
    Key {
        name: "apic",
        values: Values::Names(APIC),
        parse: |v, c| {
            c.x2apic = word(v, APIC)? == "x2apic";
            Ok(())
        },
        show: |c, w| w.write_str(if c.x2apic { "x2apic" } else { "auto" }),
    },
    Key {
        name: "acpi_dump",
        values: Values::Names(TRUE_FALSE),
        parse: |v, c| {
            c.acpi_dump = word(v, TRUE_FALSE)? == "true";
            Ok(())
        },
        show: |c, w| w.write_str(if c.acpi_dump { "true" } else { "false" }),
    },
    Key {
        name: "console",
        values: Values::Names(Console::NAMES),
        parse: |v, c| {
            c.console = named(v)?;
            Ok(())
        },
        show: |c, w| w.write_str(c.console.name()),
    },
    Key {
        name: "hca_irq",
        values: Values::Names(HcaIrq::NAMES),
        parse: |v, c| {
            c.hca_irq = named(v)?;
            Ok(())
        },
        show: |c, w| w.write_str(c.hca_irq.name()),
    },
    Key {
        name: "sm",
        values: Values::Names(ON_OFF),
        parse: |v, c| {
            c.sm = word(v, ON_OFF)? == "on";
            Ok(())
        },
        show: |c, w| w.write_str(if c.sm { "on" } else { "off" }),
    },
    Key {
        name: "run",
        values: Values::Text("ib_send_lat|ib_write_lat|ib_read_lat|ib_atomic_lat|ib_send_bw|ib_write_bw|ib_read_bw|ib_atomic_bw [-c UD|UC|RC] [-a|-s SIZE] [-n ITERS] [-I INLINE] [-e] [-m MTU] [-A OP] [-o N] [-t DEPTH] [-l LIST] [-Q MOD] [-D SECS] [-b] [-N] [--report_gbits] [--isr], or ibv_srq_pingpong [-q QPS] [-r DEPTH] [-s SIZE] [-n ITERS] [-e] [-m MTU] [--cq-moderation C/P] (repeatable)"),
        parse: |v, c| {
            if v.split_whitespace().next() == Some(srq_plan::PROGRAM) {
                c.push_srq_run(SrqRun::parse(v)?)
            } else {
                c.push_run(plan::Run::parse(v)?)
            }
        },
        // Written by the emitter itself: one line per run, after every other key.
        show: |_, _| Ok(()),
    },
    Key {
        name: "port_wait_ms",
        values: PORT_WAIT_MS.values(),
        parse: |v, c| {
            c.port_wait_ms = PORT_WAIT_MS.parse(v)?;
            Ok(())
        },
        show: |c, w| write!(w, "{}", c.port_wait_ms),
    },
];
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
    const BAD: ValueError = ValueError::Expected("vvvv:dddd[,vvvv:dddd...] (hex)");
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
            return Err(ValueError::AtMost {
                most: MAX_EXPECT_PCI as u64,
                what: "ids",
            });
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

/// Every key name with what it takes: the kernel's, then the ping-pong keys.
pub fn key_names() -> impl Iterator<Item = (&'static str, Values)> {
    KEYS.iter()
        .map(|k| (k.name, k.values))
        .chain(BENCH_KEYS.iter().map(|k| (k.name, k.values)))
}

impl Config {
    /// Devices the selftest must find.
    pub fn expect_pci(&self) -> &[PciId] {
        &self.expect_pci[..self.expect_pci_len]
    }

    /// The defaults with `mode` (what a host tool starts from).
    pub fn with_mode(mode: Mode) -> Config {
        Config {
            mode,
            ..Config::default()
        }
    }

    /// Sets the devices the selftest must find (`expect_pci`).
    pub fn set_expect_pci(&mut self, ids: &[PciId]) -> Result<(), ValueError> {
        if ids.len() > MAX_EXPECT_PCI {
            return Err(ValueError::AtMost {
                most: MAX_EXPECT_PCI as u64,
                what: "ids",
            });
        }
        self.expect_pci[..ids.len()].copy_from_slice(ids);
        self.expect_pci_len = ids.len();
        Ok(())
    }

    /// Sets `role` as given, and the bench's (`role=`).
    pub fn set_role(&mut self, role: Role) {
        self.role = Some(role);
        self.bench.role = role;
    }

    /// Adds a run to the end of the plan (a `run=` line).
    pub fn push_run(&mut self, run: Run) -> Result<(), ValueError> {
        if self.runs_len == MAX_RUNS {
            return Err(ValueError::AtMost {
                most: MAX_RUNS as u64,
                what: "runs",
            });
        }
        self.runs[self.runs_len] = run;
        self.runs_len += 1;
        Ok(())
    }

    /// Adds an SRQ ping-pong run to the end of the plan (a `run=ibv_srq_pingpong ...` line).
    pub fn push_srq_run(&mut self, run: SrqRun) -> Result<(), ValueError> {
        if self.srq_runs_len == MAX_RUNS {
            return Err(ValueError::AtMost {
                most: MAX_RUNS as u64,
                what: "runs",
            });
        }
        self.srq_runs[self.srq_runs_len] = run;
        self.srq_runs_len += 1;
        Ok(())
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
                    next.set_role(next.bench.role);
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
    let mut config = Config::default();
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
                        why: ValueError::Expected("vvvv:dddd[,vvvv:dddd...] (hex)"),
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
                why: ValueError::AtMost {
                    most: 16,
                    what: "ids"
                },
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
        assert!(e.contains("expected one of UD|UC|RC"), "{e}");
        let c = parse("mode=pingpong\nrole=server\ntest=write_lat\ntransport=RC\n").unwrap();
        assert_eq!(c.bench.test, Test::WriteLat);
        assert_eq!(c.bench.transport, Transport::Rc);
        let e = parse("test=read_lat").unwrap_err().to_string();
        assert!(
            e.contains("UD connection only possible in SEND verb"),
            "UD is the default: {e}"
        );
        let e = parse("test=bw").unwrap_err().to_string();
        assert!(e.contains("expected one of send_lat|write_lat|read_lat|atomic_lat|send_bw|write_bw|read_bw|atomic_bw|srq_pingpong"), "{e}");
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

    /// `text` parsed (keys only), written back and parsed again: the same configuration.
    fn round_trip(text: &str) -> std::string::String {
        let c = parse_keys(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let written = c.to_string();
        let again = parse_keys(&written).unwrap_or_else(|e| panic!("{written:?}: {e}"));
        assert_eq!(again, c, "{text:?} written as {written:?}");
        assert_eq!(again.to_string(), written, "the written form is canonical");
        written
    }

    #[test]
    fn the_emitter_writes_what_the_parser_reads_back() {
        // Every value of every key, alone.
        for (key, good, _) in CASES {
            for v in *good {
                round_trip(&std::format!("{key}={v}"));
            }
        }
        // Every pair of keys' values, in both orders (a key setting others' defaults,
        // `test`, before and after them; `completion` against `modes`).
        for (k1, good1, _) in CASES {
            for (k2, good2, _) in CASES {
                if k1 == k2 {
                    continue;
                }
                for v1 in good1.iter().take(2) {
                    for v2 in good2.iter().take(2) {
                        round_trip(&std::format!("{k1}={v1}\n{k2}={v2}"));
                    }
                }
            }
        }
        // Whole configurations, plans included.
        for text in [
            "mode=pingpong\nrole=client\ntest=write_bw\ntransport=RC\niters=1000\nsize=2\nrun=ib_send_lat -c UD -a\nrun=ib_read_bw -o 4\n",
            "mode=pingpong\nrole=server\ntest=srq_pingpong\nqps=4\nrx_depth=8\ncompletion=event\ncq_moderation=1/0,4/16\n",
            "role=client\nrun=ibv_srq_pingpong -q 4 -r 8 -s 64\nrun=ibv_srq_pingpong -q 1 -e --cq-moderation 4/16\n",
            "mode=selftest\nexpect_pci=15b3:1003,8086:29c0\nlog=debug\nconsole=com2\n",
            "modes=isr,event\ncompletion=poll\n",
            "completion=isr\nmodes=event,poll\n",
        ] {
            round_trip(text);
        }
    }

    #[test]
    fn the_written_form_has_the_keys_that_change_something_in_table_order() {
        assert_eq!(
            Config::default().to_string(),
            "mode=selftest\n",
            "the defaults need no line, but mode is always written"
        );
        assert_eq!(
            round_trip("iters=20\nrole=client\nmode=pingpong\nlog=info\ntransport=UD\n"),
            "mode=pingpong\nrole=client\niters=20\n",
            "table order; log=info and transport=UD are the defaults"
        );
        // `test` sets the bandwidth defaults; a later key given the latency default is kept.
        assert_eq!(
            round_trip("size=2\ntest=send_bw\n"),
            "mode=selftest\ntest=send_bw\n",
            "size=2 given first was raised to the bandwidth default"
        );
        assert_eq!(
            round_trip("test=send_bw\nsize=2\n"),
            "mode=selftest\ntest=send_bw\nsize=2\n"
        );
        // A role given as the bench's default is still given (mode=pingpong needs it).
        assert_eq!(round_trip("role=server"), "mode=selftest\nrole=server\n");
        assert_eq!(
            round_trip("peer_lid=18\nrdv_qpn=112\n"),
            "mode=selftest\npeer_lid=0x12\nrdv_qpn=0x70\n"
        );
    }

    #[test]
    fn a_configuration_built_as_values_is_written_as_its_keys() {
        let mut c = Config {
            mode: Mode::Pingpong,
            hca_irq: HcaIrq::Intx,
            ..Config::default()
        };
        c.set_role(Role::Client);
        c.bench.set_benchmark(Benchmark::Perftest(Test::ReadLat));
        c.bench.transport = Transport::Rc;
        c.bench.iterations = 20;
        c.bench.wait_timeout_ns = 2_000_000_000;
        c.bench.set_modes(Modes::parse("event,poll").unwrap());
        c.push_run(Run::parse("ib_send_lat -c UC -s 64").unwrap())
            .unwrap();
        let text = c.to_string();
        assert_eq!(
            text,
            "mode=pingpong\nhca_irq=intx\nrole=client\ntest=read_lat\ntransport=RC\niters=20\nmodes=poll,event\ntimeout_ms=2000\nrun=ib_send_lat -c UC -s 64 -n 1000\n"
        );
        assert_eq!(parse(&text), Ok(c.clone()));
        for _ in 0..MAX_RUNS - 1 {
            c.push_run(Run::parse("ib_send_lat").unwrap()).unwrap();
        }
        assert_eq!(
            c.push_run(Run::parse("ib_send_lat").unwrap())
                .unwrap_err()
                .to_string(),
            "expected at most 16 runs"
        );
    }

    #[test]
    fn every_key_is_listed_once() {
        for (i, k) in KEYS.iter().enumerate() {
            assert!(KEYS[i + 1..].iter().all(|o| o.name != k.name), "{}", k.name);
            assert!(!k.values.to_string().is_empty());
        }
    }

    /// Every key with values it takes and values it refuses; the test fails if a key is
    /// missing here, so a new key comes with its cases.
    const CASES: &[(&str, &[&str], &[&str])] = &[
        (
            "mode",
            &["selftest", "fault", "idle", "hca", "pingpong", "diag"],
            &["", "nope", "Idle"],
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
    fn rules_between_keys() {
        let rule = |text: &str| match parse(text) {
            Err(ConfigError::Rule(r)) => r,
            other => panic!("{text:?}: {other:?}"),
        };
        assert_eq!(rule("mode=fault"), Rule::FaultNeedsMode);
        assert_eq!(rule("fault=panic"), Rule::FaultNeedsMode);
        assert_eq!(rule("mode=pingpong"), Rule::PingpongNeedsRole);
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
    fn atomic_and_outstanding_reads_only_with_the_tests_that_use_them() {
        for (text, message) in [
            (
                "atomic=CMP_AND_SWAP",
                "config: atomic (-A) applies to atomic_lat and atomic_bw only, not to send_lat",
            ),
            (
                "test=write_bw\ntransport=RC\noutstanding_reads=4",
                "config: outstanding_reads (-o) applies to read_lat, atomic_lat, read_bw and atomic_bw only, not to write_bw",
            ),
            (
                "run=ib_send_lat -c UD -A CMP_AND_SWAP",
                "config line 1: run 1: atomic (-A) applies to atomic_lat and atomic_bw only, not to send_lat",
            ),
            (
                "run=ib_send_bw -o 2",
                "config line 1: run 1: outstanding_reads (-o) applies to read_lat, atomic_lat, read_bw and atomic_bw only, not to send_bw",
            ),
        ] {
            assert_eq!(parse(text).unwrap_err().to_string(), message, "{text}");
        }
        for ok in [
            "test=atomic_lat\ntransport=RC\natomic=CMP_AND_SWAP\noutstanding_reads=4",
            "test=read_bw\ntransport=RC\noutstanding_reads=2",
            "atomic=FETCH_AND_ADD\noutstanding_reads=1",
            "run=ib_atomic_bw -A CMP_AND_SWAP -o 8",
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
