//! Configuration-space access: ECAM (memory mapped, from the MCFG) or the legacy
//! 0xcf8/0xcfc port pair.

use super::{Bdf, ConfigAccess};
use crate::mm::{self, Cache};
use spin::Mutex;
use x86_64::instructions::port::Port;

/// An ECAM window for buses `bus_start..=bus_end` of segment 0.
pub struct Ecam {
    base: u64,
    bus_start: u8,
    bus_end: u8,
}

impl Ecam {
    /// Maps the window uncached.
    pub fn new(info: &crate::acpi::Ecam) -> Result<Self, mm::MmError> {
        // Map from bus 0's position so the window covers exactly the buses it decodes.
        let first = info.base + ((info.bus_start as u64) << 20);
        mm::map(first, info.len(), Cache::Uncached)?;
        Ok(Ecam {
            base: info.base,
            bus_start: info.bus_start,
            bus_end: info.bus_end,
        })
    }

    fn address(&self, bdf: Bdf, offset: u16) -> Option<u64> {
        if bdf.bus < self.bus_start
            || bdf.bus > self.bus_end
            || offset >= 4096
            || bdf.device > 31
            || bdf.function > 7
        {
            return None;
        }
        Some(
            self.base
                + ((bdf.bus as u64) << 20
                    | (bdf.device as u64) << 15
                    | (bdf.function as u64) << 12
                    | (offset & !3) as u64),
        )
    }
}

impl ConfigAccess for Ecam {
    fn read32(&self, bdf: Bdf, offset: u16) -> u32 {
        match self.address(bdf, offset) {
            // SAFETY: the address lies inside the ECAM window mapped uncached in `new`.
            Some(a) => unsafe { core::ptr::read_volatile(a as *const u32) },
            None => 0xffff_ffff,
        }
    }
    fn write32(&self, bdf: Bdf, offset: u16, value: u32) {
        if let Some(a) = self.address(bdf, offset) {
            // SAFETY: as for `read32`.
            unsafe { core::ptr::write_volatile(a as *mut u32, value) }
        }
    }
}

/// Configuration mechanism #1 (ports 0xcf8/0xcfc, first 256 bytes only).
pub struct PortIo {
    lock: Mutex<()>,
}

impl PortIo {
    pub const fn new() -> Self {
        PortIo {
            lock: Mutex::new(()),
        }
    }

    fn address(bdf: Bdf, offset: u16) -> Option<u32> {
        if offset >= 256 || bdf.device > 31 || bdf.function > 7 {
            return None;
        }
        Some(
            0x8000_0000
                | (bdf.bus as u32) << 16
                | (bdf.device as u32) << 11
                | (bdf.function as u32) << 8
                | (offset as u32 & 0xfc),
        )
    }
}

impl Default for PortIo {
    fn default() -> Self {
        Self::new()
    }
}

impl ConfigAccess for PortIo {
    fn read32(&self, bdf: Bdf, offset: u16) -> u32 {
        let Some(addr) = Self::address(bdf, offset) else {
            return 0xffff_ffff;
        };
        let _g = self.lock.lock();
        // SAFETY: 0xcf8/0xcfc are the PCI configuration ports, serialised by the lock.
        unsafe {
            Port::<u32>::new(0xcf8).write(addr);
            Port::<u32>::new(0xcfc).read()
        }
    }
    fn write32(&self, bdf: Bdf, offset: u16, value: u32) {
        let Some(addr) = Self::address(bdf, offset) else {
            return;
        };
        let _g = self.lock.lock();
        // SAFETY: as for `read32`.
        unsafe {
            Port::<u32>::new(0xcf8).write(addr);
            Port::<u32>::new(0xcfc).write(value);
        }
    }
}

/// The mechanism in use.
pub enum Mechanism {
    Ecam(Ecam),
    PortIo(PortIo),
}

impl Mechanism {
    pub fn name(&self) -> &'static str {
        match self {
            Mechanism::Ecam(_) => "ecam",
            Mechanism::PortIo(_) => "port-io",
        }
    }
    pub fn access(&self) -> &dyn ConfigAccess {
        match self {
            Mechanism::Ecam(e) => e,
            Mechanism::PortIo(p) => p,
        }
    }
}

static ACCESS: spin::Once<Mechanism> = spin::Once::new();

/// Chooses ECAM for segment 0 when the MCFG describes it, else port I/O.
pub fn init(ecam: &[crate::acpi::Ecam]) -> Result<&'static Mechanism, mm::MmError> {
    let m = match ecam.iter().find(|e| e.segment == 0) {
        Some(e) => Mechanism::Ecam(Ecam::new(e)?),
        None => Mechanism::PortIo(PortIo::new()),
    };
    Ok(ACCESS.call_once(|| m))
}

/// Configuration access for drivers (after `init`).
pub fn get() -> Option<&'static dyn ConfigAccess> {
    ACCESS.get().map(|m| m.access())
}
