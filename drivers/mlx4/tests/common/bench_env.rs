//! The benchmark's view of a model node, shared by the bench tests: a 1000 MHz "TSC" that
//! is the fabric's clock, DMA regions from the node's arena counted so that a test can check
//! the benchmark freed them all, and the progress reports it made.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use std::cell::Cell;

use bench::env::{IsrHandler, IsrProgress};
use bench::BenchEnv;
use mlx4::{DmaRegion, DmaRelease, IrqLine, Platform};

use super::SimPlatform;

pub struct SimEnv {
    pub p: SimPlatform,
    /// The benchmark's own regions, counted so that tests can check it freed them all.
    dma: Arc<Counted>,
    /// Every `(done, total)` the benchmark reported through [`BenchEnv::progress`].
    pub progress: Vec<(u32, u32)>,
    /// isr mode: the model's MSI-X interrupts of this node handed to the bench's
    /// completion handler ([`BenchEnv::isr_wait`]).
    pub isr_deliveries: Cell<u64>,
    /// TSC cycles per nanosecond of the fabric's clock, while the TSC still says it runs at
    /// 1000 MHz (1: it does). A larger scale makes TSC-timed phases (a bandwidth run's `-D`
    /// seconds) pass in less model time; timeouts in nanoseconds shrink with them.
    pub tsc_scale: u64,
}

impl SimEnv {
    /// The environment of the node `p` is a handle of (allocating from its arena).
    pub fn new(p: &SimPlatform) -> Self {
        SimEnv {
            dma: Arc::new(Counted {
                arena: p.arena.clone(),
                live: AtomicUsize::new(0),
            }),
            p: p.clone_handle(),
            progress: Vec::new(),
            isr_deliveries: Cell::new(0),
            tsc_scale: 1,
        }
    }

    /// The benchmark's regions not yet freed.
    pub fn live(&self) -> usize {
        self.dma.live.load(Ordering::Relaxed)
    }
}

impl BenchEnv for SimEnv {
    fn cycles(&self) -> u64 {
        self.p.now_ns() * self.tsc_scale
    }
    fn tsc_mhz(&self) -> f64 {
        1000.0
    }
    fn now_ns(&self) -> u64 {
        self.p.now_ns()
    }
    fn alloc_dma(&mut self, size: usize, align: usize) -> Option<DmaRegion> {
        let bus = self.p.arena.alloc(size, align)?;
        let ptr = NonNull::new(self.p.arena.ptr_of(bus)?)?;
        self.dma.live.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `alloc` just handed out these `size` zeroed bytes of the arena, `ptr_of` is
        // their CPU address, and `Counted` frees exactly that block (and keeps the arena alive).
        Some(unsafe { DmaRegion::new(ptr, bus, size, true, self.dma.clone()) })
    }
    fn relax(&mut self) {
        self.p.delay_us(1);
    }
    fn progress(&mut self, done: u32, total: u32) {
        self.progress.push((done, total));
    }
    fn interrupts(&self) -> Option<u64> {
        Some(
            self.p
                .m
                .borrow()
                .fabric_ref()
                .counters(self.p.hca)
                .interrupts,
        )
    }
    fn isr_capable(&self) -> bool {
        self.p.msix
    }
    /// The model's interrupt delivery: every MSI-X message the node's HCA raised for vector
    /// 0 since the last look is one call of the handler, as the kernel's MSI-X handler makes
    /// it. Nodes share one thread, so this never waits: the next step looks again.
    fn isr_wait<H: IsrHandler>(
        &self,
        handler: &mut H,
        progress: &IsrProgress,
        _idle_ns: u64,
    ) -> bool {
        if !self.p.msix {
            return false;
        }
        for _ in 0..64 {
            if progress.finished() || !self.p.take_interrupt(IrqLine::Msix(0)) {
                break;
            }
            self.isr_deliveries.set(self.isr_deliveries.get() + 1);
            handler.on_interrupt();
        }
        true
    }
}

/// Gives the benchmark's regions back to the arena and counts those still out.
struct Counted {
    arena: Arc<sim::inproc::DmaArena>,
    live: AtomicUsize,
}

impl DmaRelease for Counted {
    unsafe fn release(&self, _ptr: NonNull<u8>, bus: u64, _size: usize) {
        assert!(self.arena.free(bus), "benchmark freed unknown memory");
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}
