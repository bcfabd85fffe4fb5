//! Several QEMU guests on one [`Fabric`]: a thread per guest connection, the fabric behind a
//! mutex, and a timer thread that runs the fabric's timed work.

use std::io;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::conn::{Connection, ConnectionEnd, FrontendCounters, ProxiedFunction, Stats};
use super::guest_mem::GuestMemory;
use super::irq::{irq_path, IrqControl, IrqStats, IrqTransport, QtestConfig};
use super::launch::{proxy_socketpair, qtest_args, spawn_qemu, SocketDir};
use super::qmp::IntxRoute;
use crate::counters::Counters;
use crate::fabric::{Fabric, HcaId};
use crate::profile::DeviceProfile;
use crate::violation::Violation;

/// Server-wide settings.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// How often the timer thread calls [`Fabric::poll`].
    pub poll_interval: Duration,
    /// Where QEMU writes its qtest log (`-qtest-log`); without one QEMU logs every interrupt
    /// command to its stderr.
    pub qtest_log: PathBuf,
    /// How long a guest's interrupt worker tries to reach QEMU's qtest and QMP sockets.
    pub connect_timeout: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            poll_interval: Duration::from_millis(1),
            qtest_log: PathBuf::from("/dev/null"),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// How a spawned guest's interrupts reach it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestIrq {
    /// QEMU under TCG: the server adds `-qtest`/`-qtest-log`/`-qmp` options with private sockets
    /// and delivers INTx and MSI/MSI-X through qtest.
    Qtest,
    /// QEMU under KVM: INTx through irqfd; MSI/MSI-X cannot be delivered.
    Irqfd,
    /// Interrupts are counted, never delivered.
    None,
}

/// One guest to start.
#[derive(Debug)]
pub struct GuestSpec {
    /// Label for log lines.
    pub name: String,
    /// QEMU's argument list, program first, containing [`super::FD_PLACEHOLDER`] where the proxy
    /// socket's descriptor number goes (`-device x-pci-proxy-dev,id=hca0,fd=@FD@`).
    pub qemu: Vec<String>,
    /// The emulated HCA's profile.
    pub profile: DeviceProfile,
    pub irq: GuestIrq,
    /// Drive this IOAPIC input for INTx instead of config register 0x3c (qtest only).
    pub intx_gsi: Option<u32>,
    /// QEMU's stdout (its serial console with `-serial stdio`). Default: inherited.
    pub stdout: Stdio,
    /// QEMU's stderr. Default: inherited.
    pub stderr: Stdio,
}

impl GuestSpec {
    /// A guest running `qemu` with the default profile and qtest interrupts.
    pub fn new(name: impl Into<String>, qemu: Vec<String>) -> GuestSpec {
        GuestSpec {
            name: name.into(),
            qemu,
            profile: DeviceProfile::default(),
            irq: GuestIrq::Qtest,
            intx_gsi: None,
            stdout: Stdio::inherit(),
            stderr: Stdio::inherit(),
        }
    }
}

struct Shared {
    fabric: Mutex<Fabric>,
    stop: AtomicBool,
}

impl Shared {
    fn fabric(&self) -> MutexGuard<'_, Fabric> {
        // A panic inside the model would already have aborted (panic = "abort"); recovering the
        // guard keeps the other guests' threads from cascading if that ever changes.
        self.fabric.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One HCA of the fabric as the connection loop sees it. Each call takes the fabric lock once.
struct FabricFunction {
    shared: Arc<Shared>,
    hca: HcaId,
}

impl ProxiedFunction for FabricFunction {
    fn cfg_read(&mut self, offset: u16, len: u8) -> u32 {
        self.shared.fabric().cfg_read(self.hca, offset, len)
    }

    fn cfg_write(&mut self, offset: u16, len: u8, value: u32) {
        self.shared.fabric().cfg_write(self.hca, offset, len, value)
    }

    fn bar_read(&mut self, addr: u64, len: u8) -> Option<u64> {
        let mut f = self.shared.fabric();
        let (bar, offset) = f.bar_decode(self.hca, addr)?;
        Some(f.mmio_read(self.hca, bar, offset, len))
    }

    fn bar_write(&mut self, addr: u64, len: u8, value: u64) -> bool {
        let mut f = self.shared.fabric();
        match f.bar_decode(self.hca, addr) {
            Some((bar, offset)) => {
                f.mmio_write(self.hca, bar, offset, len, value);
                true
            }
            None => false,
        }
    }

    fn reset(&mut self) {
        self.shared.fabric().pci_reset(self.hca)
    }
}

/// The mpqemu server: one fabric, any number of guests.
pub struct Server {
    shared: Arc<Shared>,
    options: ServerOptions,
    poller: Option<JoinHandle<()>>,
}

impl Server {
    /// Takes ownership of `fabric` and starts the timer thread.
    pub fn new(fabric: Fabric, options: ServerOptions) -> io::Result<Server> {
        let shared = Arc::new(Shared {
            fabric: Mutex::new(fabric),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let interval = options.poll_interval.max(Duration::from_micros(100));
        let poller = std::thread::Builder::new()
            .name("fabric-poll".into())
            .spawn(move || {
                while !s.stop.load(Ordering::SeqCst) {
                    std::thread::sleep(interval);
                    s.fabric().poll();
                }
            })?;
        Ok(Server {
            shared,
            options,
            poller: Some(poller),
        })
    }

    /// Runs `f` with the fabric locked (to read state or change fault injection mid-run).
    pub fn with_fabric<R>(&self, f: impl FnOnce(&mut Fabric) -> R) -> R {
        f(&mut self.shared.fabric())
    }

    /// The HCA's traffic counters.
    pub fn counters(&self, hca: HcaId) -> Counters {
        self.shared.fabric().counters(hca)
    }

    /// The HCA's recorded contract violations.
    pub fn violations(&self, hca: HcaId) -> Vec<Violation> {
        self.shared.fabric().violations(hca).to_vec()
    }

    /// Starts QEMU as `spec` says, plugs a new HCA into the fabric and serves it. QEMU is started
    /// first: if that fails, the fabric is unchanged.
    pub fn spawn_guest(&self, spec: GuestSpec) -> io::Result<GuestHandle> {
        let sockets = match spec.irq {
            GuestIrq::Qtest => Some(SocketDir::create(&sanitize(&spec.name))?),
            GuestIrq::Irqfd | GuestIrq::None => None,
        };
        let extra = sockets
            .as_ref()
            .map(|d| qtest_args(d, &self.options.qtest_log))
            .unwrap_or_default();
        let transport = match &sockets {
            Some(d) => IrqTransport::Qtest(QtestConfig {
                qtest: d.qtest(),
                qmp: Some(d.qmp()),
                intx_gsi: spec.intx_gsi,
                connect_timeout: self.options.connect_timeout,
            }),
            None if spec.irq == GuestIrq::Irqfd => IrqTransport::Irqfd,
            None => IrqTransport::None,
        };
        let (ours, theirs) = proxy_socketpair()?;
        let child = spawn_qemu(&spec.qemu, &extra, &theirs, spec.stdout, spec.stderr)?;
        drop(theirs);
        let mut child = KillOnDrop(Some(child));
        let guest = self.attach(&spec.name, ours, spec.profile, transport)?;
        let child = child
            .0
            .take()
            .ok_or_else(|| io::Error::other("child vanished"))?;
        Ok(GuestHandle {
            guest,
            child,
            _sockets: sockets,
        })
    }

    /// Serves a proxy socket whose QEMU the caller started itself (with `transport` describing
    /// how its interrupts travel). Plugs a new HCA into the fabric.
    pub fn attach(
        &self,
        name: &str,
        stream: UnixStream,
        profile: DeviceProfile,
        transport: IrqTransport,
    ) -> io::Result<AttachedGuest> {
        let mem = GuestMemory::new();
        let (line, irq) = irq_path(name, transport)?;
        let hca = self
            .shared
            .fabric()
            .add_hca(profile, Box::new(mem.clone()), Box::new(line));
        let mut conn = Connection::new(name, stream, mem.clone(), irq.clone());
        let stats = conn.stats_handle();
        let stop = conn.stop_flag();
        let mut func = FabricFunction {
            shared: self.shared.clone(),
            hca,
        };
        let thread = std::thread::Builder::new()
            .name(format!("{name}-mpqemu"))
            .spawn(move || conn.serve(&mut func))?;
        Ok(AttachedGuest {
            name: name.to_string(),
            hca,
            mem,
            irq,
            stats,
            stop,
            thread: Some(thread),
            end: None,
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(p) = self.poller.take() {
            let _ = p.join();
        }
    }
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(24)
        .collect()
}

struct KillOnDrop(Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A guest connection being served (QEMU started by the caller or by [`Server::spawn_guest`]).
pub struct AttachedGuest {
    name: String,
    hca: HcaId,
    mem: GuestMemory,
    irq: IrqControl,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<ConnectionEnd>>,
    end: Option<ConnectionEnd>,
}

impl AttachedGuest {
    /// The guest's label.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The HCA this guest sees.
    pub fn hca(&self) -> HcaId {
        self.hca
    }

    /// The guest's RAM as the front end mapped it.
    pub fn guest_memory(&self) -> &GuestMemory {
        &self.mem
    }

    /// What crossed the proxy socket so far.
    pub fn frontend_counters(&self) -> FrontendCounters {
        self.stats.snapshot()
    }

    /// What the interrupt path did so far.
    pub fn irq_stats(&self) -> IrqStats {
        self.irq.stats()
    }

    /// The IOAPIC/8259 paths found through QMP (qtest guests, once looked up).
    pub fn intx_route(&self) -> Option<IntxRoute> {
        self.irq.route()
    }

    /// Whether the connection has ended.
    pub fn is_finished(&self) -> bool {
        self.end.is_some() || self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// How the connection ended, once it has (`None` while it is being served).
    pub fn connection_end(&mut self) -> Option<&ConnectionEnd> {
        if self.end.is_none() && self.thread.as_ref().is_some_and(|t| t.is_finished()) {
            self.collect();
        }
        self.end.as_ref()
    }

    fn collect(&mut self) {
        if let Some(t) = self.thread.take() {
            self.end = Some(t.join().unwrap_or_else(|_| {
                ConnectionEnd::Protocol(super::wire::ProtocolError::Io(io::Error::other(
                    "connection thread panicked",
                )))
            }));
            self.irq.shutdown();
        }
    }

    /// Stops serving (within 200 ms) and returns how the connection ended.
    pub fn stop(&mut self) -> &ConnectionEnd {
        self.stop.store(true, Ordering::SeqCst);
        self.collect();
        self.end.get_or_insert(ConnectionEnd::Stopped)
    }
}

impl Drop for AttachedGuest {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How a spawned guest finished.
#[derive(Debug)]
pub struct GuestStatus {
    /// QEMU's exit status.
    pub exit: ExitStatus,
    /// How the proxy connection ended. Only the first call that sees QEMU's exit gets the
    /// real end; later ones report `Stopped`.
    pub connection: ConnectionEnd,
}

/// A guest started by [`Server::spawn_guest`]. Dropping it kills QEMU.
pub struct GuestHandle {
    guest: AttachedGuest,
    child: Child,
    _sockets: Option<SocketDir>,
}

impl GuestHandle {
    /// The connection and HCA.
    pub fn guest(&self) -> &AttachedGuest {
        &self.guest
    }

    /// The HCA this guest sees.
    pub fn hca(&self) -> HcaId {
        self.guest.hca
    }

    /// QEMU's process (take its piped stdout/stderr here to capture the console).
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// QEMU's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Returns the status if QEMU has exited, without blocking.
    pub fn try_wait(&mut self) -> io::Result<Option<GuestStatus>> {
        match self.child.try_wait()? {
            Some(exit) => Ok(Some(self.finish(exit))),
            None => Ok(None),
        }
    }

    /// Waits up to `timeout` for QEMU to exit.
    pub fn wait_timeout(&mut self, timeout: Duration) -> io::Result<Option<GuestStatus>> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(s) = self.try_wait()? {
                return Ok(Some(s));
            }
            if Instant::now() >= end {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills QEMU and returns its status.
    pub fn kill(&mut self) -> io::Result<GuestStatus> {
        let _ = self.child.kill();
        let exit = self.child.wait()?;
        Ok(self.finish(exit))
    }

    fn finish(&mut self, exit: ExitStatus) -> GuestStatus {
        // QEMU is gone, so its end of the socket is closed and the loop sees EOF at once; the
        // stop flag bounds the wait in case a descendant still holds the socket.
        let end = Instant::now() + Duration::from_secs(2);
        while !self.guest.is_finished() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.guest.stop();
        let connection = self.guest.end.take().unwrap_or(ConnectionEnd::Stopped);
        GuestStatus { exit, connection }
    }
}

impl Drop for GuestHandle {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
