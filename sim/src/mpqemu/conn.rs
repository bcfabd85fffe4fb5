//! The per-guest socket loop: decodes QEMU's requests, hands them to a [`ProxiedFunction`] and
//! answers exactly the ones that expect a RET.

use std::fmt;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::guest_mem::{GuestMemory, MapError};
use super::irq::IrqControl;
use super::wire::{self, ProtocolError, Request, RET_ERROR};

/// One PCI function as the front end needs it. Addresses of BAR accesses are absolute
/// guest-physical addresses; the function decodes them against the BAR bases the guest programmed.
pub trait ProxiedFunction {
    /// Reads `len` (1, 2 or 4) bytes of config space at `offset` (`offset + len <= 256`).
    fn cfg_read(&mut self, offset: u16, len: u8) -> u32;
    /// Writes `len` bytes of config space.
    fn cfg_write(&mut self, offset: u16, len: u8, value: u32);
    /// Reads `len` (1, 2, 4, 8) bytes at guest-physical `addr`; `None` if no BAR decodes it.
    fn bar_read(&mut self, addr: u64, len: u8) -> Option<u64>;
    /// Writes `len` bytes at guest-physical `addr`; `false` if no BAR decodes it.
    fn bar_write(&mut self, addr: u64, len: u8, value: u64) -> bool;
    /// Conventional reset (QEMU's DEVICE_RESET).
    fn reset(&mut self);
}

/// Why a connection ended.
#[derive(Debug)]
pub enum ConnectionEnd {
    /// QEMU closed the socket between messages (it exited or unplugged the device).
    Closed,
    /// [`Connection::stop_flag`] was raised.
    Stopped,
    /// QEMU sent something that is not a valid message; the connection was dropped.
    Protocol(ProtocolError),
    /// Guest RAM could not be mapped; the connection was dropped.
    Memory(MapError),
}

impl ConnectionEnd {
    /// Whether the connection ended without an error.
    pub fn is_clean(&self) -> bool {
        matches!(self, ConnectionEnd::Closed | ConnectionEnd::Stopped)
    }
}

impl fmt::Display for ConnectionEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectionEnd::Closed => write!(f, "QEMU closed the connection"),
            ConnectionEnd::Stopped => write!(f, "stopped by the server"),
            ConnectionEnd::Protocol(e) => write!(f, "protocol error: {e}"),
            ConnectionEnd::Memory(e) => write!(f, "guest memory error: {e}"),
        }
    }
}

/// What crossed one connection (a snapshot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrontendCounters {
    pub cfg_reads: u64,
    pub cfg_writes: u64,
    pub bar_reads: u64,
    pub bar_writes: u64,
    /// BAR accesses no BAR decoded (I/O space, or outside every BAR): reads answered all-ones.
    pub unclaimed: u64,
    pub sysmem_syncs: u64,
    pub resets: u64,
    /// Reads of the upper half of a 64-bit BAR answered 0 during QEMU's own probe.
    pub probe_hidden: u64,
    pub set_irqfd: u64,
    /// Whether QEMU's start-up probe of the BARs has finished.
    pub probe_done: bool,
}

#[derive(Default)]
pub(crate) struct Stats {
    cfg_reads: AtomicU64,
    cfg_writes: AtomicU64,
    bar_reads: AtomicU64,
    bar_writes: AtomicU64,
    unclaimed: AtomicU64,
    sysmem_syncs: AtomicU64,
    resets: AtomicU64,
    probe_hidden: AtomicU64,
    set_irqfd: AtomicU64,
    probe_done: AtomicBool,
}

impl Stats {
    pub(crate) fn snapshot(&self) -> FrontendCounters {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FrontendCounters {
            cfg_reads: l(&self.cfg_reads),
            cfg_writes: l(&self.cfg_writes),
            bar_reads: l(&self.bar_reads),
            bar_writes: l(&self.bar_writes),
            unclaimed: l(&self.unclaimed),
            sysmem_syncs: l(&self.sysmem_syncs),
            resets: l(&self.resets),
            probe_hidden: l(&self.probe_hidden),
            set_irqfd: l(&self.set_irqfd),
            probe_done: self.probe_done.load(Ordering::Relaxed),
        }
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// QEMU's proxy probes config offsets 0x10..=0x28 (read, write all-ones, read, write back) and
/// registers every slot as a 32-bit BAR. The upper half of a 64-bit BAR would read back as
/// all-ones and become a bogus I/O BAR, so until the probe is over those slots read as 0 and writes
/// to them are not passed on. The probe ends with the second 4-byte write to 0x28; any BAR access
/// or reset also ends it.
struct Probe {
    active: bool,
    /// Config offsets of upper BAR halves, found from the function's BAR type bits.
    upper: Option<Vec<u16>>,
    writes_at_0x28: u8,
}

const BAR0: u16 = 0x10;
const PROBE_LAST: u16 = 0x28;

impl Probe {
    fn new() -> Probe {
        Probe {
            active: true,
            upper: None,
            writes_at_0x28: 0,
        }
    }

    fn upper_halves<F: ProxiedFunction>(&mut self, func: &mut F) -> &[u16] {
        self.upper.get_or_insert_with(|| {
            let mut upper = Vec::new();
            let mut i = 0u16;
            while i < 6 {
                let v = func.cfg_read(BAR0 + 4 * i, 4);
                let is_mem64 = v & 1 == 0 && (v >> 1) & 3 == 2;
                if is_mem64 && i < 5 {
                    upper.push(BAR0 + 4 * (i + 1));
                    i += 2;
                } else {
                    i += 1;
                }
            }
            upper
        })
    }

    /// Whether a config access overlapping `[offset, offset+len)` touches a hidden upper half.
    fn hides<F: ProxiedFunction>(&mut self, func: &mut F, offset: u16, len: u8) -> bool {
        if !self.active {
            return false;
        }
        let end = offset + len as u16;
        self.upper_halves(func)
            .iter()
            .any(|&u| offset < u + 4 && u < end)
    }
}

/// How long a message may take to arrive in full, or a RET to be accepted.
pub const STALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// One guest's connection.
pub struct Connection {
    stream: UnixStream,
    mem: GuestMemory,
    irq: IrqControl,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    name: String,
}

impl Connection {
    /// A connection serving `stream`, mapping guest RAM into `mem` and steering `irq`.
    pub fn new(name: &str, stream: UnixStream, mem: GuestMemory, irq: IrqControl) -> Connection {
        // Bound every wait inside a message: QEMU sends a message in one go and reads each RET at
        // once, so a stall this long means the peer is broken.
        let _ = stream.set_read_timeout(Some(STALL_TIMEOUT));
        let _ = stream.set_write_timeout(Some(STALL_TIMEOUT));
        Connection {
            stream,
            mem,
            irq,
            stats: Arc::new(Stats::default()),
            stop: Arc::new(AtomicBool::new(false)),
            name: name.to_string(),
        }
    }

    /// Changes how long a message may take to arrive in full (default [`STALL_TIMEOUT`]).
    pub fn set_stall_timeout(&self, timeout: std::time::Duration) -> std::io::Result<()> {
        self.stream.set_read_timeout(Some(timeout))?;
        self.stream.set_write_timeout(Some(timeout))
    }

    /// Raising this flag ends [`Connection::serve`] within 200 ms.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    pub(crate) fn stats_handle(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// A snapshot of this connection's counters.
    pub fn counters(&self) -> FrontendCounters {
        self.stats.snapshot()
    }

    /// Serves requests until QEMU closes the socket, a malformed message arrives, or the stop
    /// flag is raised. Never panics on any input.
    pub fn serve<F: ProxiedFunction>(&mut self, func: &mut F) -> ConnectionEnd {
        let end = self.run(func);
        match &end {
            e if e.is_clean() => log::debug!(target: "mpqemu", "{}: {e}", self.name),
            e => log::error!(target: "mpqemu", "{}: connection dropped: {e}", self.name),
        }
        end
    }

    fn run<F: ProxiedFunction>(&mut self, func: &mut F) -> ConnectionEnd {
        let mut probe = Probe::new();
        let mut resample: Option<OwnedFd> = None;
        self.irq.set_interrupt_line(func.cfg_read(0x3c, 1) as u8);
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return ConnectionEnd::Stopped;
            }
            let mut fds = [
                libc::pollfd {
                    fd: self.stream.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: resample.as_ref().map_or(-1, |f| f.as_raw_fd()),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: `fds` is a live array of two pollfd; a negative fd is ignored by poll.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 200) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return ConnectionEnd::Protocol(ProtocolError::Io(e));
            }
            if fds[1].revents & libc::POLLIN != 0 {
                if let Some(fd) = &resample {
                    let mut buf = [0u8; 8];
                    // SAFETY: reads at most 8 bytes into a live local buffer from an eventfd we own.
                    unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                    self.irq.resample();
                }
            }
            if fds[0].revents == 0 {
                continue;
            }
            let raw = match wire::recv_message(&self.stream) {
                Ok(Some(raw)) => raw,
                Ok(None) => return ConnectionEnd::Closed,
                Err(e) => return ConnectionEnd::Protocol(e),
            };
            let request = match wire::decode(raw.cmd, &raw.payload, raw.fds) {
                Ok(r) => r,
                Err(e) => return ConnectionEnd::Protocol(e),
            };
            let expects_reply = request.expects_reply();
            let reply = match self.handle(func, &mut probe, &mut resample, request) {
                Ok(reply) => reply,
                Err(end) => return end,
            };
            if expects_reply {
                if let Err(e) = wire::send_ret(&self.stream, reply) {
                    return ConnectionEnd::Protocol(ProtocolError::Io(e));
                }
            }
        }
    }

    fn end_probe(&self, probe: &mut Probe) {
        if probe.active {
            probe.active = false;
            self.stats.probe_done.store(true, Ordering::Relaxed);
        }
    }

    /// Carries out one request; returns the RET value (ignored for requests without a reply).
    fn handle<F: ProxiedFunction>(
        &self,
        func: &mut F,
        probe: &mut Probe,
        resample: &mut Option<OwnedFd>,
        request: Request,
    ) -> Result<u64, ConnectionEnd> {
        let stats = &*self.stats;
        Ok(match request {
            Request::CfgRead { offset, len } => {
                bump(&stats.cfg_reads);
                if probe.hides(func, offset, len) {
                    bump(&stats.probe_hidden);
                    0
                } else {
                    func.cfg_read(offset, len) as u64
                }
            }
            Request::CfgWrite { offset, len, value } => {
                bump(&stats.cfg_writes);
                if !probe.hides(func, offset, len) {
                    func.cfg_write(offset, len, value);
                }
                if probe.active && offset == PROBE_LAST && len == 4 {
                    probe.writes_at_0x28 += 1;
                    if probe.writes_at_0x28 == 2 {
                        self.end_probe(probe);
                    }
                }
                if offset <= 0x3c && 0x3c < offset + len as u16 {
                    self.irq.set_interrupt_line(func.cfg_read(0x3c, 1) as u8);
                }
                0
            }
            Request::BarRead { addr, len, memory } => {
                self.end_probe(probe);
                bump(&stats.bar_reads);
                match memory.then(|| func.bar_read(addr, len)).flatten() {
                    Some(v) => v,
                    None => {
                        self.unclaimed(addr, len, memory, "read");
                        RET_ERROR
                    }
                }
            }
            Request::BarWrite {
                addr,
                len,
                value,
                memory,
            } => {
                self.end_probe(probe);
                bump(&stats.bar_writes);
                if !(memory && func.bar_write(addr, len, value)) {
                    self.unclaimed(addr, len, memory, "write");
                }
                0
            }
            Request::SyncSysmem(regions) => {
                bump(&stats.sysmem_syncs);
                let outcome = self.mem.sync(regions).map_err(ConnectionEnd::Memory)?;
                log::debug!(target: "mpqemu", "{}: SYNC_SYSMEM {outcome:?} -> {:x?}", self.name, self.mem.regions());
                0
            }
            Request::SetIrqfd { irqfd, resamplefd } => {
                bump(&stats.set_irqfd);
                self.irq.set_irqfd(irqfd);
                *resample = Some(resamplefd);
                0
            }
            Request::DeviceReset => {
                self.end_probe(probe);
                bump(&stats.resets);
                func.reset();
                self.irq.set_interrupt_line(func.cfg_read(0x3c, 1) as u8);
                0
            }
        })
    }

    fn unclaimed(&self, addr: u64, len: u8, memory: bool, what: &str) {
        if self.stats.unclaimed.fetch_add(1, Ordering::Relaxed) < 16 {
            let space = if memory { "memory" } else { "I/O" };
            log::warn!(target: "mpqemu", "{}: {len}-byte {what} at {space} {addr:#x} decoded by no BAR", self.name);
        }
    }
}
