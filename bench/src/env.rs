//! What the benchmark needs from the machine it runs on (the kernel, or a host test).

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
}
