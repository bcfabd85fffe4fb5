//! Interrupt delivery from the model to the guest.
//!
//! The model sees an [`IrqLine`] (its `Interrupts` implementation): `set_intx(level)` and
//! `msi(address, data)`. Neither ever blocks. Where they go depends on the [`IrqTransport`]:
//!
//! - [`IrqTransport::Qtest`] (TCG): commands are queued to a worker thread that owns the qtest
//!   connection. INTx becomes `set_irq_in <ioapic> unnamed-gpio-in <gsi> <level>` (plus the
//!   matching 8259 pin for GSI < 16, as QEMU's own GSI fan-out does), with the GSI taken from
//!   config register 0x3c; MSI/MSI-X becomes `writel <address> <data>`. Replies are read by a
//!   separate thread and only counted: nothing waits for them (a blocking wait deadlocks when
//!   QEMU's main thread is itself inside a proxy call).
//! - [`IrqTransport::Irqfd`] (KVM): asserting INTx writes the irqfd; when the guest's EOI fires
//!   the resamplefd and the line is still asserted, the connection writes the irqfd again. MSI
//!   cannot be delivered this way (the protocol has no message for it) and is counted as dropped.
//! - [`IrqTransport::None`]: interrupts are only counted.

use std::io::{self, BufRead, BufReader};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::qmp::{connect_until, IntxRoute, Qmp};

/// Highest IOAPIC input plus one: a `set_irq_in` beyond it aborts QEMU.
pub const IOAPIC_PINS: u32 = 24;

/// How one guest's interrupts reach QEMU.
#[derive(Debug, Clone)]
pub enum IrqTransport {
    /// QEMU under TCG: through its qtest socket (`-qtest unix:PATH,server=on,wait=off`).
    Qtest(QtestConfig),
    /// QEMU under KVM: INTx through the irqfd/resamplefd pair of SET_IRQFD.
    Irqfd,
    /// Count interrupts only.
    None,
}

/// Where the qtest worker connects and how it routes INTx.
#[derive(Debug, Clone)]
pub struct QtestConfig {
    /// QEMU's qtest socket.
    pub qtest: PathBuf,
    /// A QMP socket used once to find the IOAPIC and 8259 QOM paths. Without it INTx cannot be
    /// delivered (MSI still can).
    pub qmp: Option<PathBuf>,
    /// Drive this IOAPIC pin instead of the one in config register 0x3c.
    pub intx_gsi: Option<u32>,
    /// How long to keep trying to connect to QEMU's sockets and to wait for each QMP reply.
    pub connect_timeout: Duration,
}

impl QtestConfig {
    /// qtest at `qtest`, route lookup through `qmp`, 10 s to connect.
    pub fn new(qtest: impl Into<PathBuf>, qmp: Option<PathBuf>) -> QtestConfig {
        QtestConfig {
            qtest: qtest.into(),
            qmp,
            intx_gsi: None,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// Counts of what the interrupt path did (a snapshot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IrqStats {
    /// Transitions of the INTx line to asserted.
    pub intx_asserts: u64,
    /// Transitions of the INTx line to deasserted.
    pub intx_deasserts: u64,
    /// MSI/MSI-X messages the model sent.
    pub msi: u64,
    /// Interrupts that could not be delivered (MSI under irqfd, no qtest connection, no route,
    /// GSI out of range).
    pub undeliverable: u64,
    /// qtest commands written.
    pub qtest_sent: u64,
    /// qtest replies starting with OK.
    pub qtest_ok: u64,
    /// qtest replies starting with FAIL.
    pub qtest_fail: u64,
    /// irqfd writes.
    pub irqfd_signals: u64,
    /// resamplefd events (guest EOIs under KVM).
    pub resamples: u64,
}

#[derive(Default)]
struct Counters {
    intx_asserts: AtomicU64,
    intx_deasserts: AtomicU64,
    msi: AtomicU64,
    undeliverable: AtomicU64,
    qtest_sent: AtomicU64,
    qtest_ok: AtomicU64,
    qtest_fail: AtomicU64,
    irqfd_signals: AtomicU64,
    resamples: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// No interrupt line programmed yet (0xff in config register 0x3c means "unknown").
const NO_LINE: u32 = 0xff;

enum Command {
    Intx { level: bool, gsi: u32 },
    Msi { address: u64, data: u32 },
}

struct Shared {
    kind: Kind,
    level: AtomicBool,
    line: AtomicU32,
    irqfd: Mutex<Option<OwnedFd>>,
    queue: Mutex<Option<Sender<Command>>>,
    route: Mutex<Option<IntxRoute>>,
    counters: Counters,
    name: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Qtest,
    Irqfd,
    None,
}

/// The model's interrupt outputs for one HCA. Cheap, never blocks.
pub struct IrqLine {
    shared: Arc<Shared>,
}

/// The front end's handle on the same interrupt path: config register 0x3c, the irqfds, stats.
#[derive(Clone)]
pub struct IrqControl {
    shared: Arc<Shared>,
    worker: Arc<Mutex<Option<JoinHandle<()>>>>,
}

/// Creates the interrupt path of one guest. `name` labels log lines. For
/// [`IrqTransport::Qtest`] a worker thread starts connecting to QEMU at once.
pub fn irq_path(name: &str, transport: IrqTransport) -> io::Result<(IrqLine, IrqControl)> {
    let kind = match transport {
        IrqTransport::Qtest(_) => Kind::Qtest,
        IrqTransport::Irqfd => Kind::Irqfd,
        IrqTransport::None => Kind::None,
    };
    let shared = Arc::new(Shared {
        kind,
        level: AtomicBool::new(false),
        line: AtomicU32::new(NO_LINE),
        irqfd: Mutex::new(None),
        queue: Mutex::new(None),
        route: Mutex::new(None),
        counters: Counters::default(),
        name: name.to_string(),
    });
    let mut worker = None;
    if let IrqTransport::Qtest(config) = transport {
        let (tx, rx) = mpsc::channel();
        *lock(&shared.queue) = Some(tx);
        let s = shared.clone();
        worker = Some(
            std::thread::Builder::new()
                .name(format!("{name}-qtest"))
                .spawn(move || qtest_worker(config, rx, s))?,
        );
    }
    Ok((
        IrqLine {
            shared: shared.clone(),
        },
        IrqControl {
            shared,
            worker: Arc::new(Mutex::new(worker)),
        },
    ))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl IrqLine {
    /// Sets the level of the INTx line (the model passes "pending and INTx-disable clear").
    pub fn set_intx(&mut self, asserted: bool) {
        let s = &*self.shared;
        if s.level.swap(asserted, Ordering::SeqCst) == asserted {
            return;
        }
        bump(if asserted {
            &s.counters.intx_asserts
        } else {
            &s.counters.intx_deasserts
        });
        match s.kind {
            Kind::Qtest => {
                let gsi = s.line.load(Ordering::SeqCst);
                self.queue(Command::Intx {
                    level: asserted,
                    gsi,
                });
            }
            Kind::Irqfd if asserted => signal_irqfd(s),
            Kind::Irqfd | Kind::None => {}
        }
    }

    /// Sends an MSI/MSI-X message (a DWORD write of `data` to `address`).
    pub fn msi(&mut self, address: u64, data: u32) {
        let s = &*self.shared;
        bump(&s.counters.msi);
        match s.kind {
            Kind::Qtest => self.queue(Command::Msi { address, data }),
            Kind::Irqfd => {
                if s.counters.undeliverable.fetch_add(1, Ordering::Relaxed) == 0 {
                    log::warn!(target: "mpqemu", "{}: MSI to {address:#x} cannot be delivered through irqfd (INTx only under KVM)", s.name);
                }
            }
            Kind::None => {}
        }
    }

    fn queue(&self, cmd: Command) {
        let sent = lock(&self.shared.queue)
            .as_ref()
            .is_some_and(|q| q.send(cmd).is_ok());
        if !sent {
            bump(&self.shared.counters.undeliverable);
        }
    }
}

impl crate::host::Interrupts for IrqLine {
    fn set_intx(&mut self, asserted: bool) {
        IrqLine::set_intx(self, asserted)
    }

    fn msi(&mut self, address: u64, data: u32) {
        IrqLine::msi(self, address, data)
    }
}

fn signal_irqfd(s: &Shared) {
    let guard = lock(&s.irqfd);
    let Some(fd) = guard.as_ref() else {
        bump(&s.counters.undeliverable);
        return;
    };
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live local buffer to an eventfd we own.
    let n = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    if n == 8 {
        bump(&s.counters.irqfd_signals);
    } else {
        bump(&s.counters.undeliverable);
        log::warn!(target: "mpqemu", "{}: irqfd write failed: {}", s.name, io::Error::last_os_error());
    }
}

impl IrqControl {
    /// Records the interrupt line (config register 0x3c) the guest's firmware programmed.
    pub fn set_interrupt_line(&self, line: u8) {
        self.shared.line.store(line as u32, Ordering::SeqCst);
    }

    /// Installs the irqfd from SET_IRQFD (made non-blocking).
    pub fn set_irqfd(&self, fd: OwnedFd) {
        // SAFETY: fcntl on a descriptor we own; O_NONBLOCK so a saturated eventfd never blocks us.
        unsafe {
            let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
        }
        *lock(&self.shared.irqfd) = Some(fd);
    }

    /// The guest EOI'd the INTx line (resamplefd fired): re-signal if still asserted.
    pub fn resample(&self) {
        let s = &*self.shared;
        bump(&s.counters.resamples);
        if s.kind == Kind::Irqfd && s.level.load(Ordering::SeqCst) {
            signal_irqfd(s);
        }
    }

    /// Whether the INTx line is asserted now.
    pub fn intx_level(&self) -> bool {
        self.shared.level.load(Ordering::SeqCst)
    }

    /// The IOAPIC and 8259 paths found through QMP, once the lookup is done.
    pub fn route(&self) -> Option<IntxRoute> {
        lock(&self.shared.route).clone()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> IrqStats {
        let c = &self.shared.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IrqStats {
            intx_asserts: l(&c.intx_asserts),
            intx_deasserts: l(&c.intx_deasserts),
            msi: l(&c.msi),
            undeliverable: l(&c.undeliverable),
            qtest_sent: l(&c.qtest_sent),
            qtest_ok: l(&c.qtest_ok),
            qtest_fail: l(&c.qtest_fail),
            irqfd_signals: l(&c.irqfd_signals),
            resamples: l(&c.resamples),
        }
    }

    /// Stops the qtest worker (interrupts raised afterwards are counted as undeliverable) and
    /// waits for it, bounded by its own socket timeouts.
    pub fn shutdown(&self) {
        lock(&self.shared.queue).take();
        if let Some(w) = lock(&self.worker).take() {
            let _ = w.join();
        }
    }
}

/// Owns the qtest connection: connects, looks up the INTx route, then turns queued commands into
/// qtest lines until the queue closes or QEMU goes away.
fn qtest_worker(config: QtestConfig, rx: Receiver<Command>, shared: Arc<Shared>) {
    let name = shared.name.clone();
    let deadline = Instant::now() + config.connect_timeout;
    let stream = match connect_until(&config.qtest, deadline) {
        Ok(s) => s,
        Err(e) => {
            log::error!(target: "mpqemu", "{name}: qtest: {e}; interrupts will not be delivered");
            for _ in rx {
                bump(&shared.counters.undeliverable);
            }
            return;
        }
    };
    // Replies are consumed by their own thread so the writer never waits on QEMU.
    if let Ok(read_half) = stream.try_clone() {
        let s = shared.clone();
        let _ = std::thread::Builder::new()
            .name(format!("{name}-qtest-rx"))
            .spawn(move || {
                for line in BufReader::new(read_half).lines() {
                    let Ok(line) = line else { break };
                    if line.starts_with("OK") {
                        bump(&s.counters.qtest_ok);
                    } else if line.starts_with("FAIL") {
                        bump(&s.counters.qtest_fail);
                        log::warn!(target: "mpqemu", "{}: qtest: {line}", s.name);
                    }
                }
            });
    }
    let route = match &config.qmp {
        Some(qmp) => match Qmp::connect(qmp, deadline, config.connect_timeout)
            .and_then(|mut q| q.lookup_intx_route())
        {
            Ok(r) => {
                log::debug!(target: "mpqemu", "{name}: INTx route {r:?}");
                *lock(&shared.route) = Some(r.clone());
                Some(r)
            }
            Err(e) => {
                log::error!(target: "mpqemu", "{name}: INTx route lookup failed: {e}; INTx will not be delivered");
                None
            }
        },
        None => None,
    };
    // A QEMU whose main loop stops reading qtest must not wedge this thread forever.
    let _ = stream.set_write_timeout(Some(config.connect_timeout));
    let writer = stream;
    let mut driven: Option<u32> = None;
    for cmd in rx.iter() {
        let lines = match cmd {
            Command::Msi { address, data } => vec![format!("writel {address:#x} {data:#x}")],
            Command::Intx { level, gsi } => {
                let gsi = if level {
                    let gsi = config.intx_gsi.unwrap_or(gsi);
                    if gsi >= IOAPIC_PINS {
                        log::warn!(target: "mpqemu", "{name}: INTx asserted with interrupt line {gsi}: not an IOAPIC input, not driven");
                        bump(&shared.counters.undeliverable);
                        continue;
                    }
                    driven = Some(gsi);
                    gsi
                } else {
                    match driven.take() {
                        Some(g) => g,
                        None => continue,
                    }
                };
                match &route {
                    Some(r) => intx_lines(r, gsi, level),
                    None => {
                        bump(&shared.counters.undeliverable);
                        continue;
                    }
                }
            }
        };
        for line in lines {
            if let Err(e) = super::wire::send_all(&writer, format!("{line}\n").as_bytes()) {
                log::warn!(target: "mpqemu", "{name}: qtest connection lost: {e}");
                for _ in rx.iter() {
                    bump(&shared.counters.undeliverable);
                }
                return;
            }
            bump(&shared.counters.qtest_sent);
        }
    }
}

/// The qtest lines that set INTx on `gsi` to `level`: the IOAPIC input, and for GSI < 16 the
/// matching 8259 input, as QEMU fans out its own GSIs.
pub fn intx_lines(route: &IntxRoute, gsi: u32, level: bool) -> Vec<String> {
    let v = level as u8;
    let mut lines = vec![format!(
        "set_irq_in {} unnamed-gpio-in {gsi} {v}",
        route.ioapic
    )];
    let pic = match gsi {
        0..=7 => route.pic_master.as_ref().map(|p| (p, gsi)),
        8..=15 => route.pic_slave.as_ref().map(|p| (p, gsi - 8)),
        _ => None,
    };
    if let Some((path, pin)) = pic {
        lines.push(format!("set_irq_in {path} unnamed-gpio-in {pin} {v}"));
    }
    lines
}
