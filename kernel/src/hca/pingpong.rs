//! `mode=pingpong`: the HCA brought up as a `verbs::Device` and the bench's ping-pong sweep
//! (`bench::pingpong::run_sweep`) run on it with the configured keys.
//!
//! Console contract (the runner reads it): the bench's perftest table and one
//! `ibkern-result {...}` line per size, then `pingpong: PASS ...` or `pingpong: FAIL: <why>`.

use crate::arch::tsc;
use crate::config::Config;
use crate::console::Console;
use crate::mm::dma;
use crate::println;
use crate::system::Machine;
use bench::env::BenchEnv;
use verbs::DmaRegion;

use super::{bring_up_with, find, Attached};

/// The kernel under the benchmark.
struct KernelEnv;

impl BenchEnv for KernelEnv {
    #[inline(always)]
    fn cycles(&self) -> u64 {
        tsc::rdtsc()
    }

    fn tsc_mhz(&self) -> f64 {
        tsc::frequency() as f64 / 1e6
    }

    fn now_ns(&self) -> u64 {
        crate::now_ns()
    }

    fn alloc_dma(&mut self, size: usize, align: usize) -> Option<DmaRegion> {
        dma::alloc(size, align).ok()
    }

    fn relax(&mut self) {
        core::hint::spin_loop();
    }
}

/// Runs the configured sweep; true on success.
pub fn run(machine: &Machine, config: &Config) -> bool {
    match sweep(machine, config) {
        Ok(()) => true,
        Err(why) => {
            println!("pingpong: FAIL: {why}");
            false
        }
    }
}

fn sweep(machine: &Machine, config: &Config) -> Result<(), alloc::string::String> {
    use alloc::format;
    // The configuration was checked as a whole when it was parsed (`ibconfig`).
    let cfg = config.bench;
    let role = match config.role {
        Some(role) => role.name(),
        None => return Err("mode=pingpong needs role=client|server".into()),
    };
    let f = find(machine).map_err(|e| format!("{e}"))?;
    let att = Attached::new(machine, f, config.hca_irq).map_err(|e| format!("{e}"))?;
    let before = dma::stats();
    let mut hca = bring_up_with(&att, cfg.port, config.port_wait_ms, config.sm)
        .map_err(|e| format!("{e}"))?;
    let summary = hca.summary();
    println!("{summary}");
    // A run reported as `completion event` must have waited for interrupts (the
    // configuration refuses `hca_irq=poll` with events; this holds it for the device too).
    if cfg.completion == bench::config::Completion::Event
        && hca.irq_mode() == mlx4::hca::IrqMode::Polling
    {
        let _ = hca.close();
        return Err("completion=event, but the HCA takes no interrupts (polling)".into());
    }
    println!(
        "pingpong: {role} {} {} on {} (hca_irq {:?})",
        cfg.test.name(),
        cfg.transport.name(),
        f.bdf,
        config.hca_irq
    );
    let mut env = KernelEnv;
    let result = bench::pingpong::run_sweep(&mut hca, &mut env, &cfg, &mut Console);
    // §1.6: an internal error during the sweep explains any failure better than the symptom
    // (timeouts, error completions), and makes a "successful" sweep's figures suspect.
    let catas = super::check_catas(&hca);
    let closed = hca.close();
    drop(att);
    catas.map_err(|e| format!("after the sweep: {e}"))?;
    let summary = result.map_err(|e| format!("{e}"))?;
    closed.map_err(|e| format!("teardown: {e:?}"))?;
    let after = dma::stats();
    if after != before {
        return Err(format!(
            "DMA leak: {} bytes in {} regions before, {} in {} after",
            before.bytes, before.regions, after.bytes, after.regions
        ));
    }
    println!(
        "pingpong: PASS {} sizes, {} aborted, {} lost, {} retries, {} late repeats; local lid {} qpn {:#x}, peer lid {} qpn {:#x}, mtu {}",
        summary.sizes,
        summary.aborted,
        summary.lost,
        summary.retries,
        summary.late_repeats,
        summary.local.lid,
        summary.local.qpn,
        summary.peer.lid,
        summary.peer.qpn,
        summary.mtu
    );
    Ok(())
}
