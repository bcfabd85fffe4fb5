//! Test platform: the driver's `Platform` over the in-process device model (`sim::inproc`).
//!
//! Time is virtual: `delay_us` advances the fabric's manual clock, so the driver's 1 s reset
//! wait and its bounded waits cost nothing and timeouts are deterministic.
#![allow(dead_code)]

pub mod bench_env;
pub mod pair;
pub mod standin;

use std::cell::{Cell, RefCell};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use mlx4::{Bar, DmaRegion, DmaRelease, IrqLine, MsiMessage, Platform};
use sim::inproc::{DmaArena, IrqEvent, IrqLog, Machine, SharedMachine};
use sim::{DeviceProfile, FabricConfig, HcaId};

/// Arena size per node.
pub const MEM: usize = 64 << 20;

/// MSI-X message data base (vector n → data MSI_DATA + n).
pub const MSI_DATA: u32 = 0x40;
pub const MSI_ADDR: u64 = 0xFEE0_0000;

pub struct SimPlatform {
    pub m: SharedMachine,
    pub hca: HcaId,
    pub arena: Arc<DmaArena>,
    /// What the platform's regions go back to: the same arena.
    release: Arc<dyn DmaRelease>,
    pub irq: IrqLog,
    now: Rc<Cell<u64>>,
    saved: RefCell<Vec<u32>>,
    pub msix: bool,
    /// MSI-X is offered (a vector and its message) but its messages never reach the CPU, as
    /// when firmware or an IOMMU drops them: the driver must fall back to INTx.
    pub msix_lost: bool,
    pending_msi: RefCell<Vec<u32>>,
    pending_intx: Cell<bool>,
    /// Interrupts the node has raised (MSI-X messages and INTA# assertions), counted as
    /// the platform takes them from the model's log; shared by all handles on the node.
    raised: Rc<Cell<u64>>,
    /// Every firmware command the driver reported ([`Platform::command_done`]), shared by
    /// all handles on this node so it survives a failed `Hca::init`.
    pub commands: Rc<RefCell<Vec<mlx4::CmdRecord>>>,
    /// For each reported command, the first [`MAILBOX_COPY`] bytes at its in_param when that
    /// is an address in the node's memory (its input mailbox), else empty: what the driver
    /// gave the device, which the next command's mailbox overwrites.
    pub mailboxes: Rc<RefCell<Vec<Vec<u8>>>>,
}

/// Bytes of each input mailbox [`SimPlatform::mailboxes`] keeps.
pub const MAILBOX_COPY: usize = 0x200;

use std::rc::Rc;

/// Gives a region back to the node's arena when it is dropped.
pub struct ArenaRelease(pub Arc<DmaArena>);

impl DmaRelease for ArenaRelease {
    unsafe fn release(&self, _ptr: NonNull<u8>, bus: u64, _size: usize) {
        assert!(self.0.free(bus), "freeing unknown DMA region {bus:#x}");
    }
}

/// A machine with `n` HCAs (default profile), PCI set up, manual clock.
pub fn machine(n: usize, cfg: FabricConfig) -> (SharedMachine, Vec<SimPlatform>) {
    machine_with(n, cfg, DeviceProfile::default())
}

pub fn machine_with(
    n: usize,
    mut cfg: FabricConfig,
    profile: DeviceProfile,
) -> (SharedMachine, Vec<SimPlatform>) {
    cfg.manual_clock = true;
    let m = Machine::shared(cfg);
    let now = Rc::new(Cell::new(0));
    let mut v = Vec::new();
    for _ in 0..n {
        let hca = m.borrow_mut().add_node(profile.clone(), MEM);
        m.borrow_mut().setup_pci(hca);
        let arena = m.borrow().arena(hca).unwrap();
        let irq = m.borrow().irq_log(hca).unwrap();
        v.push(SimPlatform {
            m: m.clone(),
            hca,
            release: Arc::new(ArenaRelease(arena.clone())),
            arena,
            irq,
            now: now.clone(),
            saved: RefCell::new(Vec::new()),
            msix: true,
            msix_lost: false,
            pending_msi: RefCell::new(Vec::new()),
            pending_intx: Cell::new(false),
            raised: Rc::new(Cell::new(0)),
            commands: Rc::new(RefCell::new(Vec::new())),
            mailboxes: Rc::new(RefCell::new(Vec::new())),
        });
    }
    (m, v)
}

impl SimPlatform {
    /// A second platform handle on the same node (for re-initialising after a close).
    pub fn clone_handle(&self) -> SimPlatform {
        SimPlatform {
            m: self.m.clone(),
            hca: self.hca,
            arena: self.arena.clone(),
            release: self.release.clone(),
            irq: self.irq.clone(),
            now: self.now.clone(),
            saved: RefCell::new(Vec::new()),
            msix: self.msix,
            msix_lost: self.msix_lost,
            pending_msi: RefCell::new(Vec::new()),
            pending_intx: Cell::new(false),
            raised: self.raised.clone(),
            commands: self.commands.clone(),
            mailboxes: self.mailboxes.clone(),
        }
    }

    fn bar(b: Bar) -> u8 {
        match b {
            Bar::Dcs => 0,
            Bar::Uar => 2,
        }
    }

    /// Interrupts the model has raised on this node so far (MSI-X messages and INTA#
    /// assertions).
    pub fn interrupts_raised(&self) -> u64 {
        self.collect_irqs();
        self.raised.get()
    }

    fn collect_irqs(&self) {
        for e in self.irq.drain() {
            match e {
                IrqEvent::Msi { data, .. } => {
                    self.raised.set(self.raised.get() + 1);
                    self.pending_msi.borrow_mut().push(data)
                }
                IrqEvent::Intx(true) => {
                    self.raised.set(self.raised.get() + 1);
                    self.pending_intx.set(true)
                }
                IrqEvent::Intx(false) => {}
            }
        }
    }
}

// `inline(never)` so instruction-count runs can exclude the model behind each call.
// SAFETY: DMA memory is carved from the node's `DmaArena` (one zeroed host allocation the
// model reads and writes as the device's memory): `alloc` hands out disjoint, aligned, zeroed
// blocks whose bus address maps to the pointer, and the arena outlives every region (each
// region holds an `Arc` of it). MMIO and configuration accesses are calls into the model, which
// checks offsets and touches no host memory.
unsafe impl Platform for SimPlatform {
    #[inline(never)]
    fn mmio_read32(&self, bar: Bar, offset: usize) -> u32 {
        self.m
            .borrow_mut()
            .mmio_read(self.hca, Self::bar(bar), offset as u64, 4) as u32
    }
    #[inline(never)]
    fn mmio_write32(&self, bar: Bar, offset: usize, value: u32) {
        self.m
            .borrow_mut()
            .mmio_write(self.hca, Self::bar(bar), offset as u64, 4, value as u64)
    }
    #[inline(never)]
    fn mmio_write64(&self, bar: Bar, offset: usize, value: u64) {
        self.m
            .borrow_mut()
            .mmio_write(self.hca, Self::bar(bar), offset as u64, 8, value)
    }
    #[inline(never)]
    fn wc_copy(&self, bar: Bar, offset: usize, words: &[u64]) {
        let mut m = self.m.borrow_mut();
        for (i, w) in words.iter().enumerate() {
            m.mmio_write(self.hca, Self::bar(bar), (offset + 8 * i) as u64, 8, *w);
        }
    }
    #[inline(never)]
    fn dma_alloc(&self, size: usize, align: usize) -> Option<DmaRegion> {
        let bus = self.arena.alloc(size, align)?;
        let ptr = NonNull::new(self.arena.ptr_of(bus)?)?;
        // SAFETY: `alloc` just handed out these `size` zeroed bytes of the arena (disjoint from
        // every other block), `ptr_of` is their CPU address, and `release` frees exactly that
        // block; the region's `Arc` keeps the arena alive.
        Some(unsafe { DmaRegion::new(ptr, bus, size, true, self.release.clone()) })
    }
    #[inline(never)]
    fn now_ns(&self) -> u64 {
        self.now.get()
    }
    #[inline(never)]
    fn delay_us(&self, us: u64) {
        self.now.set(self.now.get() + us * 1000);
        self.m
            .borrow_mut()
            .fabric()
            .advance(Duration::from_micros(us));
    }
    #[inline(never)]
    fn config_read32(&self, offset: u16) -> u32 {
        self.m.borrow_mut().cfg_read(self.hca, offset, 4)
    }
    #[inline(never)]
    fn config_write32(&self, offset: u16, value: u32) {
        self.m.borrow_mut().cfg_write(self.hca, offset, 4, value)
    }
    #[inline(never)]
    fn save_config(&self) {
        let mut s = self.saved.borrow_mut();
        s.clear();
        for i in 0..64u16 {
            s.push(self.config_read32(i * 4));
        }
    }
    #[inline(never)]
    fn restore_config(&self) {
        let s = self.saved.borrow();
        if s.len() < 16 {
            return;
        }
        // Dwords 2..15 first, COMMAND (dword 1) last (§1.4 step 5).
        for i in 2..16u16 {
            self.config_write32(i * 4, s[i as usize]);
        }
        self.config_write32(4, s[1] & 0xFFFF);
    }
    #[inline(never)]
    fn msix_message(&self, vector: u16) -> Option<MsiMessage> {
        self.msix.then_some(MsiMessage {
            address: MSI_ADDR,
            data: MSI_DATA + vector as u32,
        })
    }
    #[inline(never)]
    fn take_interrupt(&self, line: IrqLine) -> bool {
        self.collect_irqs();
        match line {
            IrqLine::Msix(v) => {
                let mut p = self.pending_msi.borrow_mut();
                let before = p.len();
                p.retain(|d| *d != MSI_DATA + v as u32);
                p.len() != before && !self.msix_lost
            }
            IrqLine::Intx => self.pending_intx.replace(false),
        }
    }
    fn command_done(&self, record: &mlx4::CmdRecord) {
        self.commands.borrow_mut().push(*record);
        let mut copy = vec![0; MAILBOX_COPY];
        if self.arena.read(record.in_param, &mut copy).is_err() {
            copy.clear();
        }
        self.mailboxes.borrow_mut().push(copy);
    }
}

/// Model violations recorded for this node, as strings.
pub fn violations(p: &SimPlatform) -> Vec<String> {
    p.m.borrow()
        .violations(p.hca)
        .iter()
        .map(|v| v.to_string())
        .collect()
}

/// Assert that the model recorded no contract violation for `p`'s node.
#[track_caller]
pub fn assert_no_violations(p: &SimPlatform) {
    let v = violations(p);
    assert!(
        v.is_empty(),
        "model violations on HCA {}:\n{}",
        p.hca.0,
        v.join("\n")
    );
}

/// The input mailboxes of every `op` command `p`'s node reported, in order.
pub fn mailboxes_of(p: &SimPlatform, op: mlx4::Opcode) -> Vec<Vec<u8>> {
    let cmds = p.commands.borrow();
    let boxes = p.mailboxes.borrow();
    cmds.iter()
        .zip(boxes.iter())
        .filter(|(r, b)| r.op == op && !b.is_empty())
        .map(|(_, b)| b.clone())
        .collect()
}

/// Test-friendly driver configuration: short command timeout.
pub fn test_config() -> mlx4::Config {
    mlx4::Config {
        cmd_timeout_ms: 2000,
        ..mlx4::Config::default()
    }
}
