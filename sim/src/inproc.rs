//! In-process front end for host tests of the real driver.
//!
//! A [`Machine`] owns a [`Fabric`] and, per node, a [`DmaArena`]: one contiguous block of
//! memory at a bus base address that the model reaches through [`HostMemory`] and the test's
//! platform reaches through raw pointers (`ptr_of(bus)` / `bus_of(ptr)`), plus a simple DMA
//! allocator over it and an [`IrqLog`] of the node's interrupts.
//!
//! How a test platform should hold it: share the machine as `SharedMachine =
//! Rc<RefCell<Machine>>` and keep, per driver instance, a clone of that `Rc`, the node's
//! [`HcaId`], its `Arc<DmaArena>` and its [`IrqLog`]. Borrow the machine only for the length of
//! one MMIO/config call (`machine.borrow_mut().mmio_write(..)`), never across driver code, so
//! two drivers on two nodes of one machine can run interleaved on one thread. Memory accesses
//! by the driver go through the arena pointers and need no borrow of the machine.

use std::cell::{RefCell, UnsafeCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::fabric::{Fabric, FabricConfig, HcaId};
use crate::host::{DmaFault, HostMemory, Interrupts};
use crate::profile::DeviceProfile;
use crate::violation::Violation;

/// A machine shared between the test and its platform implementation(s).
pub type SharedMachine = Rc<RefCell<Machine>>;

/// Contiguous host memory at a bus base address, readable by the device model and by test
/// code through raw pointers.
pub struct DmaArena {
    base: u64,
    cells: Box<[UnsafeCell<u8>]>,
    alloc: Mutex<Allocator>,
}

// SAFETY: the bytes live in UnsafeCells and every access (model and test pointers) is a raw
// copy; a data race would need two threads touching the same bytes without synchronisation,
// which the single-threaded in-process front end never does. The allocator is behind a Mutex.
unsafe impl Sync for DmaArena {}

#[derive(Default)]
struct Allocator {
    /// Free blocks: offset -> size.
    free: BTreeMap<usize, usize>,
    /// Allocated blocks: offset -> size.
    used: BTreeMap<usize, usize>,
    /// Blocks freed since the model last looked (bus address, bytes).
    freed: Vec<(u64, u64)>,
}

impl DmaArena {
    /// A zeroed arena of `size` bytes at bus address `base`.
    pub fn new(base: u64, size: usize) -> Arc<DmaArena> {
        let cells: Box<[UnsafeCell<u8>]> = (0..size).map(|_| UnsafeCell::new(0)).collect();
        let mut a = Allocator::default();
        if size > 0 {
            a.free.insert(0, size);
        }
        Arc::new(DmaArena {
            base,
            cells,
            alloc: Mutex::new(a),
        })
    }

    pub fn base(&self) -> u64 {
        self.base
    }

    pub fn size(&self) -> usize {
        self.cells.len()
    }

    fn offset(&self, bus: u64, len: usize) -> Option<usize> {
        let off = bus.checked_sub(self.base)?;
        let off = usize::try_from(off).ok()?;
        (off.checked_add(len)? <= self.cells.len()).then_some(off)
    }

    fn raw(&self) -> *mut u8 {
        // UnsafeCell<u8> has the layout of u8; the slice is one contiguous allocation.
        UnsafeCell::raw_get(self.cells.as_ptr())
    }

    /// Pointer to the byte at bus address `bus` (None outside the arena).
    pub fn ptr_of(&self, bus: u64) -> Option<*mut u8> {
        let off = self.offset(bus, 0)?;
        // SAFETY: off <= len, so the pointer is within or one past the allocation.
        Some(unsafe { self.raw().add(off) })
    }

    /// Bus address of a pointer into the arena (None outside it).
    pub fn bus_of(&self, ptr: *const u8) -> Option<u64> {
        let start = self.raw() as usize;
        let p = ptr as usize;
        (p >= start && p - start <= self.cells.len()).then(|| self.base + (p - start) as u64)
    }

    fn lock(&self) -> MutexGuard<'_, Allocator> {
        self.alloc.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Allocate `size` zeroed bytes aligned to `align` (a power of two); returns the bus
    /// address.
    pub fn alloc(&self, size: usize, align: usize) -> Option<u64> {
        if size == 0 || !align.is_power_of_two() {
            return None;
        }
        let mut a = self.lock();
        let base = self.base as usize;
        let mut pick = None;
        for (&off, &len) in &a.free {
            // Align the bus address, not the offset.
            let addr = base.checked_add(off)?;
            let aligned = addr.checked_add(align - 1)? & !(align - 1);
            let start = aligned - base;
            if start + size <= off + len {
                pick = Some((off, len, start));
                break;
            }
        }
        let (off, len, start) = pick?;
        a.free.remove(&off);
        if start > off {
            a.free.insert(off, start - off);
        }
        if start + size < off + len {
            a.free.insert(start + size, off + len - start - size);
        }
        a.used.insert(start, size);
        drop(a);
        // SAFETY: [start, start+size) is inside the arena and now owned by the caller.
        unsafe { std::ptr::write_bytes(self.raw().add(start), 0, size) };
        Some(self.base + start as u64)
    }

    /// Free a block returned by `alloc`. Returns false for an unknown address.
    pub fn free(&self, bus: u64) -> bool {
        let Some(off) = self.offset(bus, 0) else {
            return false;
        };
        let mut a = self.lock();
        let Some(size) = a.used.remove(&off) else {
            return false;
        };
        a.freed.push((bus, size as u64));
        let (mut start, mut len) = (off, size);
        if let Some((&p, &pl)) = a.free.range(..start).next_back() {
            if p + pl == start {
                a.free.remove(&p);
                start = p;
                len += pl;
            }
        }
        if let Some(&nl) = a.free.get(&(start + len)) {
            a.free.remove(&(start + len));
            len += nl;
        }
        a.free.insert(start, len);
        true
    }

    /// The blocks freed since the last call (bus address, bytes): the model checks them
    /// against the memory the device still holds.
    pub fn take_freed(&self) -> Vec<(u64, u64)> {
        std::mem::take(&mut self.lock().freed)
    }

    /// Bytes currently allocated (for leak checks).
    pub fn bytes_in_use(&self) -> usize {
        self.lock().used.values().sum()
    }

    /// Copy out of the arena.
    pub fn read(&self, bus: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        let off = self.offset(bus, buf.len()).ok_or(DmaFault {
            addr: bus,
            len: buf.len(),
        })?;
        // SAFETY: the range is inside the arena; bytes are UnsafeCell so shared mutation
        // through raw pointers is allowed.
        unsafe { std::ptr::copy(self.raw().add(off), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Copy into the arena (ascending addresses).
    pub fn write(&self, bus: u64, data: &[u8]) -> Result<(), DmaFault> {
        let off = self.offset(bus, data.len()).ok_or(DmaFault {
            addr: bus,
            len: data.len(),
        })?;
        // SAFETY: as in `read`.
        unsafe { std::ptr::copy(data.as_ptr(), self.raw().add(off), data.len()) };
        Ok(())
    }
}

/// The model's view of an arena.
struct ArenaMemory(Arc<DmaArena>);

impl HostMemory for ArenaMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        self.0.read(addr, buf)
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), DmaFault> {
        self.0.write(addr, data)
    }
    fn take_freed(&self) -> Vec<(u64, u64)> {
        self.0.take_freed()
    }
}

/// One interrupt as the node saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrqEvent {
    /// INTA# changed to this level.
    Intx(bool),
    /// MSI-X message.
    Msi { address: u64, data: u32 },
}

#[derive(Default)]
struct IrqState {
    events: Vec<IrqEvent>,
    level: bool,
}

/// Interrupt log of one node (cheap to clone; all clones see the same log).
#[derive(Clone, Default)]
pub struct IrqLog(Arc<Mutex<IrqState>>);

impl IrqLog {
    fn lock(&self) -> MutexGuard<'_, IrqState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Take every event logged so far.
    pub fn drain(&self) -> Vec<IrqEvent> {
        std::mem::take(&mut self.lock().events)
    }
    /// Events logged so far (not drained).
    pub fn events(&self) -> Vec<IrqEvent> {
        self.lock().events.clone()
    }
    /// Current INTA# level.
    pub fn intx_level(&self) -> bool {
        self.lock().level
    }
}

impl Interrupts for IrqLog {
    fn set_intx(&mut self, asserted: bool) {
        let mut s = self.lock();
        s.level = asserted;
        s.events.push(IrqEvent::Intx(asserted));
    }
    fn msi(&mut self, address: u64, data: u32) {
        self.lock().events.push(IrqEvent::Msi { address, data });
    }
}

/// One node of a machine.
#[derive(Clone)]
pub struct Node {
    pub hca: HcaId,
    pub arena: Arc<DmaArena>,
    pub irq: IrqLog,
}

/// A fabric plus per-node memory and interrupt logs.
pub struct Machine {
    fabric: Fabric,
    nodes: Vec<Node>,
}

/// The environment variable that narrows [`test_profiles`]: device profile names,
/// comma-separated (the in-process harness's `--profile`).
pub const PROFILES_ENV: &str = "IBKERN_PROFILES";

/// The device profiles host tests bring the model up with: every built-in one
/// (`DeviceProfile::names`), or the ones `IBKERN_PROFILES=name,name` names. An unknown name
/// is refused with the list.
pub fn test_profiles() -> Result<Vec<DeviceProfile>, crate::profile::UnknownProfile> {
    match std::env::var(PROFILES_ENV) {
        Ok(names) if !names.trim().is_empty() => names
            .split(',')
            .map(|n| DeviceProfile::named(n.trim()))
            .collect(),
        _ => Ok(DeviceProfile::all()),
    }
}

/// Bus address where node n's arena starts: (n + 1) * 64 GiB (1 GiB aligned, far apart).
pub fn arena_base(n: usize) -> u64 {
    (n as u64 + 1) << 36
}

/// Where `setup_pci` puts the BARs of node n (below 4 GiB, sized for the default profile and
/// any power-of-two BAR up to 64 MiB).
pub fn default_bar_addresses(n: usize) -> (u64, u64) {
    let slot = 0xc000_0000u64 + (n as u64) * 0x0800_0000;
    (slot, slot + 0x0400_0000)
}

impl Machine {
    pub fn new(config: FabricConfig) -> Machine {
        Machine {
            fabric: Fabric::new(config),
            nodes: Vec::new(),
        }
    }

    /// A machine ready to share with platforms.
    pub fn shared(config: FabricConfig) -> SharedMachine {
        Rc::new(RefCell::new(Machine::new(config)))
    }

    /// Add a node: an HCA with `profile` and an arena of `mem_size` bytes.
    pub fn add_node(&mut self, profile: DeviceProfile, mem_size: usize) -> HcaId {
        let arena = DmaArena::new(arena_base(self.nodes.len()), mem_size);
        let irq = IrqLog::default();
        let hca = self.fabric.add_hca(
            profile,
            Box::new(ArenaMemory(arena.clone())),
            Box::new(irq.clone()),
        );
        self.nodes.push(Node { hca, arena, irq });
        hca
    }

    pub fn node(&self, hca: HcaId) -> Option<&Node> {
        self.nodes.get(hca.0)
    }

    pub fn arena(&self, hca: HcaId) -> Option<Arc<DmaArena>> {
        self.node(hca).map(|n| n.arena.clone())
    }

    pub fn irq_log(&self, hca: HcaId) -> Option<IrqLog> {
        self.node(hca).map(|n| n.irq.clone())
    }

    pub fn fabric(&mut self) -> &mut Fabric {
        &mut self.fabric
    }

    pub fn fabric_ref(&self) -> &Fabric {
        &self.fabric
    }

    pub fn mmio_read(&mut self, hca: HcaId, bar: u8, offset: u64, len: u8) -> u64 {
        self.fabric.mmio_read(hca, bar, offset, len)
    }

    pub fn mmio_write(&mut self, hca: HcaId, bar: u8, offset: u64, len: u8, value: u64) {
        self.fabric.mmio_write(hca, bar, offset, len, value)
    }

    pub fn cfg_read(&mut self, hca: HcaId, offset: u16, len: u8) -> u32 {
        self.fabric.cfg_read(hca, offset, len)
    }

    pub fn cfg_write(&mut self, hca: HcaId, offset: u16, len: u8, value: u32) {
        self.fabric.cfg_write(hca, offset, len, value)
    }

    pub fn poll(&mut self) {
        self.fabric.poll()
    }

    pub fn violations(&self, hca: HcaId) -> &[Violation] {
        self.fabric.violations(hca)
    }

    pub fn observations(&self, hca: HcaId) -> &[String] {
        self.fabric.observations(hca)
    }

    /// Do what firmware/OS PCI enumeration would: program BAR0/BAR2 at
    /// `default_bar_addresses` and enable memory space and bus mastering. Returns the BAR
    /// addresses.
    pub fn setup_pci(&mut self, hca: HcaId) -> (u64, u64) {
        let (b0, b2) = default_bar_addresses(hca.0);
        for (off, addr) in [(0x10u16, b0), (0x18, b2)] {
            self.fabric.cfg_write(hca, off, 4, addr as u32);
            self.fabric.cfg_write(hca, off + 4, 4, (addr >> 32) as u32);
        }
        let cmd = self.fabric.cfg_read(hca, 0x04, 2);
        self.fabric.cfg_write(hca, 0x04, 2, cmd | 0x6);
        (b0, b2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arena_alloc_free_align_and_bounds() {
        let a = DmaArena::new(1 << 30, 1 << 20);
        let x = a.alloc(100, 4096).unwrap();
        assert_eq!(x % 4096, 0);
        let y = a.alloc(5000, 256).unwrap();
        assert_eq!(y % 256, 0);
        assert!(y >= x + 100 || y + 5000 <= x, "blocks do not overlap");
        assert_eq!(a.bytes_in_use(), 5100);
        a.write(x, &[1, 2, 3]).unwrap();
        let p = a.ptr_of(x).unwrap();
        // SAFETY: p points at 3 initialised bytes of the arena.
        assert_eq!(unsafe { std::slice::from_raw_parts(p, 3) }, &[1, 2, 3]);
        assert_eq!(a.bus_of(p), Some(x));
        assert!(a.free(x));
        assert!(!a.free(x), "double free is refused");
        assert!(a.free(y));
        assert_eq!(a.bytes_in_use(), 0);
        let z = a.alloc(1 << 20, 4096).unwrap();
        assert_eq!(z, 1 << 30, "frees coalesce back into one block");
        assert!(a.read((1 << 30) + (1 << 20) - 2, &mut [0u8; 4]).is_err());
        assert!(a.read(0, &mut [0u8; 1]).is_err());
        assert!(a.alloc(1, 3).is_none());
    }
}
