//! What the benchmark needs from the machine it runs on (the kernel, or a host test).

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use verbs::DmaRegion;

/// The machine under the benchmark. Only `cycles` is on the measured path.
pub trait BenchEnv {
    /// The time-stamp counter: perftest's `get_cycles()` is a plain `rdtsc`.
    fn cycles(&self) -> u64;
    /// The TSC rate in MHz (cycles per microsecond), calibrated by the platform.
    fn tsc_mhz(&self) -> f64;
    /// Monotonic nanoseconds, for the bounded waits (off the measured path).
    fn now_ns(&self) -> u64;
    /// Physically contiguous, zeroed DMA memory of `size` bytes aligned to `align`, from the
    /// platform's DMA allocator (the same kind of region the driver gets); dropping it frees it.
    fn alloc_dma(&mut self, size: usize, align: usize) -> Option<DmaRegion>;
    /// Called when a step found nothing to do (kernel: a pause; host tests: let time pass).
    fn relax(&mut self) {}
    /// Called after each size: `done` of `total` sizes finished (for progress display).
    fn progress(&mut self, done: u32, total: u32) {
        let _ = (done, total);
    }
    /// Interrupts the device has raised so far (the kernel: its interrupt vectors' counts;
    /// host tests: the model's count), read around each size for the result line's
    /// interrupts per iteration; `None` when the environment cannot tell.
    fn interrupts(&self) -> Option<u64> {
        None
    }
    /// isr mode: whether this environment can run a completion handler in the device's
    /// interrupt path ([`Self::isr_wait`]); the kernel needs the HCA on MSI-X.
    fn isr_capable(&self) -> bool {
        false
    }
    /// isr mode: puts `handler` in the path of the device's completion interrupt, delivers
    /// an interrupt that arrived while none was installed, and waits until `progress` is
    /// finished or has not moved for `idle_ns` (0: only deliver what is pending). The
    /// handler is out of the interrupt path again when this returns. Returns false when the
    /// environment cannot do this ([`Self::isr_capable`]).
    fn isr_wait<H: IsrHandler>(
        &self,
        handler: &mut H,
        progress: &IsrProgress,
        idle_ns: u64,
    ) -> bool {
        let _ = (handler, progress, idle_ns);
        false
    }
}

/// What the interrupt path reports to the loop waiting for it (isr mode): how many
/// iterations it has completed and whether the size is done. Shared between the handler
/// (in the interrupt) and the waiting loop through atomics only.
#[derive(Debug, Default)]
pub struct IsrProgress {
    count: AtomicU32,
    finished: AtomicBool,
}

impl IsrProgress {
    /// Progress starting at `count` iterations.
    pub fn new(count: u32) -> Self {
        IsrProgress {
            count: AtomicU32::new(count),
            finished: AtomicBool::new(false),
        }
    }
    /// Iterations completed so far.
    pub fn count(&self) -> u32 {
        self.count.load(Ordering::Acquire)
    }
    /// Whether the handler has nothing more to do (the size is done, or it failed).
    pub fn finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }
    /// Handler side: `count` iterations done, and whether that is all.
    pub fn publish(&self, count: u32, finished: bool) {
        self.count.store(count, Ordering::Release);
        if finished {
            self.finished.store(true, Ordering::Release);
        }
    }
}

/// A completion handler the environment calls from the device's interrupt path (isr
/// mode). It runs where the platform's interrupt handler runs (the kernel: with interrupts
/// disabled), so it must not block beyond a bound or allocate.
pub trait IsrHandler {
    /// One interrupt of the device: drain its events, take the completions, post what they
    /// call for, re-arm.
    fn on_interrupt(&mut self);
}
