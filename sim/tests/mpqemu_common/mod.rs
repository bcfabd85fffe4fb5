//! Shared pieces of the mpqemu tests: a small stand-in PCI function (not the ConnectX-3 model)
//! with the BAR layout of a ConnectX-3, and a scripted QEMU-side client.
#![allow(dead_code)]

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use sim::mpqemu::wire::{self, cmd};
use sim::mpqemu::{GuestMemory, IrqLine, ProxiedFunction, SysmemRegion};
use std::time::{Duration, Instant};

pub const BAR0_SIZE: u64 = 1 << 20;
pub const BAR2_SIZE: u64 = 8 << 20;
/// Stand-in registers (test-only, not ConnectX-3 registers).
pub const REG_DMA_INCREMENT: u64 = 0x200;
pub const REG_INTX: u64 = 0x300;
pub const REG_MSI: u64 = 0x308;

/// What the stand-in function saw.
#[derive(Default, Debug)]
pub struct Seen {
    pub cfg_writes: Vec<(u16, u8, u32)>,
    pub bar_writes: Vec<(u8, u64, u8, u64)>,
    pub dma_faults: Vec<u64>,
    pub resets: u32,
}

/// A PCI function with 15b3:1003's identity, a 64-bit 1 MiB BAR0 and a 64-bit prefetchable
/// 8 MiB BAR2, INTA, and three test registers in BAR0: a DMA that increments 16 bytes at the
/// guest-physical address written, INTx level, and an MSI to 0xfee00000 with the data written.
pub struct StandIn {
    cfg: [u8; 256],
    regs: HashMap<(u8, u64), u64>,
    mem: GuestMemory,
    /// Shared so a test can raise interrupts while the function serves QEMU.
    pub irq: Arc<Mutex<IrqLine>>,
    pub seen: Arc<Mutex<Seen>>,
}

impl StandIn {
    pub fn new(mem: GuestMemory, irq: IrqLine) -> StandIn {
        StandIn {
            cfg: power_on_config(),
            regs: HashMap::new(),
            mem,
            irq: Arc::new(Mutex::new(irq)),
            seen: Arc::default(),
        }
    }

    fn dword(&self, off: usize) -> u32 {
        u32::from_le_bytes(self.cfg[off..off + 4].try_into().unwrap())
    }

    fn bar_base(&self, lo: usize) -> u64 {
        ((self.dword(lo + 4) as u64) << 32 | self.dword(lo) as u64) & !0xf
    }

    fn decode(&self, addr: u64) -> Option<(u8, u64)> {
        if self.cfg[4] & 2 == 0 {
            return None;
        }
        for (bar, lo, size) in [(0u8, 0x10usize, BAR0_SIZE), (2, 0x18, BAR2_SIZE)] {
            let base = self.bar_base(lo);
            if base != 0 && addr >= base && addr - base < size {
                return Some((bar, addr - base));
            }
        }
        None
    }
}

fn power_on_config() -> [u8; 256] {
    let mut c = [0u8; 256];
    c[0..2].copy_from_slice(&0x15b3u16.to_le_bytes());
    c[2..4].copy_from_slice(&0x1003u16.to_le_bytes());
    c[0x0a] = 0x80; // subclass: other network (InfiniBand is 0x0207 on real parts; irrelevant here)
    c[0x0b] = 0x02;
    c[0x10] = 0x04; // 64-bit memory
    c[0x18] = 0x0c; // 64-bit prefetchable memory
    c[0x2c..0x2e].copy_from_slice(&0x15b3u16.to_le_bytes());
    c[0x3c] = 0xff;
    c[0x3d] = 1;
    c
}

impl ProxiedFunction for StandIn {
    fn cfg_read(&mut self, offset: u16, len: u8) -> u32 {
        let mut v = 0u32;
        for i in 0..len as usize {
            v |= (self.cfg[offset as usize + i] as u32) << (8 * i);
        }
        v
    }

    fn cfg_write(&mut self, offset: u16, len: u8, value: u32) {
        self.seen
            .lock()
            .unwrap()
            .cfg_writes
            .push((offset, len, value));
        for i in 0..len as usize {
            let off = offset as usize + i;
            let byte = (value >> (8 * i)) as u8;
            match off {
                0x04 => self.cfg[off] = byte & 0x06,
                0x05 => self.cfg[off] = byte & 0x04,
                0x3c => self.cfg[off] = byte,
                0x10..=0x1f => self.cfg[off] = byte,
                _ => {}
            }
        }
        // BAR low halves keep their type bits and only the bits above their size.
        for (lo, size, flags) in [(0x10usize, BAR0_SIZE, 0x4u32), (0x18, BAR2_SIZE, 0xc)] {
            let v = (self.dword(lo) & !(size as u32 - 1) & !0xf) | flags;
            self.cfg[lo..lo + 4].copy_from_slice(&v.to_le_bytes());
        }
    }

    fn bar_read(&mut self, addr: u64, len: u8) -> Option<u64> {
        let (bar, off) = self.decode(addr)?;
        let v = self.regs.get(&(bar, off)).copied().unwrap_or(0);
        Some(if len == 8 {
            v
        } else {
            v & ((1u64 << (8 * len)) - 1)
        })
    }

    fn bar_write(&mut self, addr: u64, len: u8, value: u64) -> bool {
        let Some((bar, off)) = self.decode(addr) else {
            return false;
        };
        self.seen
            .lock()
            .unwrap()
            .bar_writes
            .push((bar, off, len, value));
        self.regs.insert((bar, off), value);
        match (bar, off) {
            (0, REG_DMA_INCREMENT) => {
                let mut buf = [0u8; 16];
                match self.mem.read(value, &mut buf) {
                    Ok(()) => {
                        for b in &mut buf {
                            *b = b.wrapping_add(1);
                        }
                        self.mem.write(value, &buf).unwrap();
                    }
                    Err(_) => self.seen.lock().unwrap().dma_faults.push(value),
                }
            }
            (0, REG_INTX) => self.irq.lock().unwrap().set_intx(value != 0),
            (0, REG_MSI) => self.irq.lock().unwrap().msi(0xfee0_0000, value as u32),
            _ => {}
        }
        true
    }

    fn reset(&mut self) {
        self.seen.lock().unwrap().resets += 1;
        self.cfg = power_on_config();
        self.regs.clear();
        self.irq.lock().unwrap().set_intx(false);
    }
}

/// The QEMU side of a proxy socket, driven by hand.
pub struct Client {
    pub sock: UnixStream,
}

impl Client {
    pub fn cfg_read(&self, offset: u32, len: i32) -> u32 {
        wire::send_message(
            &self.sock,
            cmd::PCI_CFGREAD,
            &wire::cfg_payload(offset, 0, len),
            &[],
        )
        .unwrap();
        wire::recv_ret(&self.sock).unwrap() as u32
    }

    pub fn cfg_write(&self, offset: u32, value: u32, len: i32) -> u64 {
        wire::send_message(
            &self.sock,
            cmd::PCI_CFGWRITE,
            &wire::cfg_payload(offset, value, len),
            &[],
        )
        .unwrap();
        wire::recv_ret(&self.sock).unwrap()
    }

    pub fn bar_read(&self, addr: u64, size: u32) -> u64 {
        wire::send_message(
            &self.sock,
            cmd::BAR_READ,
            &wire::bar_payload(addr, 0, size, true),
            &[],
        )
        .unwrap();
        wire::recv_ret(&self.sock).unwrap()
    }

    pub fn io_read(&self, port: u64, size: u32) -> u64 {
        wire::send_message(
            &self.sock,
            cmd::BAR_READ,
            &wire::bar_payload(port, 0, size, false),
            &[],
        )
        .unwrap();
        wire::recv_ret(&self.sock).unwrap()
    }

    pub fn bar_write(&self, addr: u64, value: u64, size: u32) -> u64 {
        wire::send_message(
            &self.sock,
            cmd::BAR_WRITE,
            &wire::bar_payload(addr, value, size, true),
            &[],
        )
        .unwrap();
        wire::recv_ret(&self.sock).unwrap()
    }

    pub fn reset(&self) -> u64 {
        wire::send_message(&self.sock, cmd::DEVICE_RESET, &[], &[]).unwrap();
        wire::recv_ret(&self.sock).unwrap()
    }

    pub fn sync_sysmem(&self, regions: &[(SysmemRegion, &OwnedFd)]) {
        let list: Vec<SysmemRegion> = regions.iter().map(|(r, _)| *r).collect();
        let fds: Vec<&dyn AsRawFd> = regions.iter().map(|(_, f)| *f as &dyn AsRawFd).collect();
        wire::send_message(
            &self.sock,
            cmd::SYNC_SYSMEM,
            &wire::sysmem_payload(&list),
            &fds,
        )
        .unwrap();
    }

    /// Whether the model sent anything within `ms` milliseconds (it never should unasked).
    pub fn has_unsolicited(&self, ms: i32) -> bool {
        readable(&self.sock, ms)
    }

    /// QEMU's own start-up probe, as hw/remote/proxy.c does it; returns (size, is_io) per slot.
    pub fn qemu_probe(&self) -> Vec<(u32, bool)> {
        for (off, len) in [(0x00, 2), (0x02, 2), (0x0a, 2), (0x2e, 2)] {
            self.cfg_read(off, len);
        }
        (0..7)
            .map(|i| {
                let off = 0x10 + 4 * i;
                let orig = self.cfg_read(off, 4);
                self.cfg_write(off, 0xffff_ffff, 4);
                let new = self.cfg_read(off, 4);
                self.cfg_write(off, orig, 4);
                ((!(new & 0xffff_fff0)).wrapping_add(1), new & 1 == 1)
            })
            .collect()
    }
}

pub fn readable(fd: &impl AsRawFd, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

/// A memfd of `size` bytes.
pub fn memfd(size: usize) -> OwnedFd {
    // SAFETY: a NUL-terminated name; memfd_create returns a new descriptor or -1.
    let fd = unsafe { libc::memfd_create(c"guest-ram".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create failed");
    // SAFETY: fd is new and owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ftruncate on a descriptor we own.
    let r = unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) };
    assert_eq!(r, 0);
    fd
}

pub fn pwrite(fd: &OwnedFd, off: u64, data: &[u8]) {
    // SAFETY: writes from a live slice to a descriptor we own.
    let n = unsafe {
        libc::pwrite(
            fd.as_raw_fd(),
            data.as_ptr().cast(),
            data.len(),
            off as libc::off_t,
        )
    };
    assert_eq!(n as usize, data.len());
}

pub fn pread(fd: &OwnedFd, off: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    // SAFETY: reads into a live buffer of `len` bytes from a descriptor we own.
    let n = unsafe {
        libc::pread(
            fd.as_raw_fd(),
            v.as_mut_ptr().cast(),
            len,
            off as libc::off_t,
        )
    };
    assert_eq!(n as usize, len);
    v
}

pub fn eventfd() -> OwnedFd {
    // SAFETY: eventfd returns a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(fd >= 0);
    // SAFETY: fd is new and owned by nothing else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Reads an eventfd counter (0 if not signalled).
pub fn eventfd_take(fd: &OwnedFd) -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: reads 8 bytes into a live buffer from a non-blocking eventfd we own.
    let n = unsafe { libc::read(fd.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
    if n == 8 {
        u64::from_ne_bytes(b)
    } else {
        0
    }
}

pub fn eventfd_signal(fd: &OwnedFd) {
    let b = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live buffer to an eventfd we own.
    let n = unsafe { libc::write(fd.as_raw_fd(), b.as_ptr().cast(), 8) };
    assert_eq!(n, 8);
}

/// Polls `cond` every 20 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Waits until `snapshot` stays the same over 300 ms (the firmware has stopped touching the
/// function). Needed before a test makes BAR accesses from QEMU's main thread (QMP): QEMU's
/// proxy can deadlock when those meet a vCPU's config accesses, the same lock-order problem that
/// makes guests need -smp 1.
pub fn wait_quiet<T: PartialEq>(timeout: Duration, mut snapshot: impl FnMut() -> T) -> bool {
    let mut last = snapshot();
    wait_until(timeout, || {
        std::thread::sleep(Duration::from_millis(300));
        let now = snapshot();
        std::mem::replace(&mut last, now) == last
    })
}

/// A minimal QMP client for tests (human-monitor-command to inspect guest interrupt state).
pub struct TestQmp {
    reader: std::io::BufReader<UnixStream>,
    writer: UnixStream,
}

impl TestQmp {
    pub fn connect(path: &std::path::Path) -> TestQmp {
        let end = Instant::now() + Duration::from_secs(10);
        let s = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) if Instant::now() > end => panic!("QMP connect: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut q = TestQmp {
            writer: s.try_clone().unwrap(),
            reader: std::io::BufReader::new(s),
        };
        q.line();
        q.execute(r#"{"execute":"qmp_capabilities"}"#);
        q
    }

    fn line(&mut self) -> serde_json::Value {
        let mut l = String::new();
        std::io::BufRead::read_line(&mut self.reader, &mut l).unwrap();
        serde_json::from_str(&l).unwrap()
    }

    pub fn execute(&mut self, json: &str) -> serde_json::Value {
        std::io::Write::write_all(&mut self.writer, format!("{json}\n").as_bytes()).unwrap();
        loop {
            let v = self.line();
            if let Some(r) = v.get("return") {
                return r.clone();
            }
            assert!(v.get("error").is_none(), "QMP error {v}");
        }
    }

    pub fn hmp(&mut self, cmd: &str) -> String {
        let r = self.execute(&format!(
            r#"{{"execute":"human-monitor-command","arguments":{{"command-line":"{cmd}"}}}}"#
        ));
        r.as_str().unwrap_or_default().to_string()
    }
}
