//! `mode=pingpong`: the HCA brought up as a `verbs::Device`; a client runs its plan
//! (`bench::plan::run_plan`: the `run=` lines, or one run of the ping-pong keys, `repeat`
//! times), a server follows its clients (`bench::plan::serve`) until no client comes
//! within `idle_timeout_ms` after a plan.
//!
//! Console contract (the runner reads it): after bring-up one `ibkern-node {...}` line (the
//! kernel, CPU, TSC, HCA and configuration: `bench::line::NodeLine`), then per run a
//! `pingpong: run R/N pass P/M: ...`
//! header, the bench's perftest table and one `ibkern-result {...}` line per size, and the
//! run's verdict; at the end `pingpong: PASS ...` (totals over the runs) or
//! `pingpong: FAIL: <why>` (any run failed or was refused).
//!
//! `test=srq_pingpong` (or a plan of `run=ibv_srq_pingpong ...` lines) runs the SRQ
//! ping-pong instead (`bench::srq::session`): per run a
//! `srq_pingpong: run R/N: ibv_srq_pingpong ...` header, the QPs' addresses, the example's
//! two figure lines, one `ibkern-srq-result {...}` line and the run's verdict; at the end
//! `pingpong: PASS srq_pingpong N runs` or `pingpong: FAIL: <why>`.

use crate::arch::tsc;
use crate::config::{Config, Settings};
use crate::console::Console;
use crate::mm::dma;
use crate::println;
use crate::system::Machine;
use bench::env::{BenchEnv, IsrHandler, IsrProgress};
use verbs::DmaRegion;

use super::{bring_up_with, find, Attached};

/// The kernel under the benchmark.
struct KernelEnv {
    /// The HCA takes its interrupts on MSI-X: isr mode's handler can run in its path.
    msix: bool,
}

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

    fn interrupts(&self) -> Option<u64> {
        Some(super::platform::interrupt_count())
    }

    fn isr_capable(&self) -> bool {
        self.msix
    }

    fn isr_wait<H: IsrHandler>(
        &self,
        handler: &mut H,
        progress: &IsrProgress,
        idle_ns: u64,
    ) -> bool {
        if !self.msix {
            return false;
        }
        super::isr::wait(handler, progress, idle_ns);
        true
    }
}

/// `test=srq_pingpong`: the SRQ ping-pong's runs (`bench::srq::session`), each result line
/// carrying the device interrupts counted by the kernel around the run.
fn srq<H: verbs::Device>(
    hca: &mut H,
    env: &mut KernelEnv,
    att: &Attached,
    config: &Config,
    role: bench::config::Role,
    events_ok: bool,
) -> Result<bench::srq::session::SrqTotals, alloc::string::String> {
    use alloc::format;
    use bench::config::{Completion, Role};
    let cfg = &config.bench;
    let plan = config.srq_plan();
    let mut interrupts = || {
        let (msix, intx) = att.interrupt_counts();
        msix + intx
    };
    match role {
        Role::Client => {
            let events = cfg.completion == Completion::Event
                || plan.iter().any(|r| r.completion == Completion::Event);
            if events && !events_ok {
                return Err("completion=event, but the HCA takes no interrupts (polling)".into());
            }
            if plan.is_empty() {
                println!(
                    "pingpong: srq_pingpong client: {} QPs, rx_depth {}, {} moderation settings, repeat {}",
                    cfg.srq.qps,
                    cfg.srq.rx_depth,
                    cfg.srq.moderation.as_slice().len(),
                    cfg.repeat
                );
            } else {
                println!(
                    "pingpong: srq_pingpong client: a plan of {} runs, repeat {}",
                    plan.len(),
                    cfg.repeat
                );
            }
            bench::srq::session::run_client(hca, env, cfg, plan, &mut interrupts, &mut Console)
        }
        Role::Server => {
            println!(
                "pingpong: srq_pingpong server, following its client; idle_timeout_ms={}",
                cfg.idle_timeout_ns / 1_000_000
            );
            bench::srq::session::serve(hca, env, cfg, &mut interrupts, &mut Console)
        }
    }
    .map_err(|e| format!("{e}"))
}

/// What this node is, for the results' provenance: the `ibkern-node` line.
fn node_line(
    machine: &Machine,
    f: &crate::pci::Function,
    summary: &mlx4::Summary,
    role: bench::config::Role,
    settings: Settings<'_>,
) -> bench::line::NodeLine {
    use alloc::format;
    use alloc::string::{String, ToString};
    let brand = crate::arch::cpu::brand();
    let text = |b: &[u8]| {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from(core::str::from_utf8(&b[..end]).unwrap_or("?").trim())
    };
    let link = crate::pci::access::get().and_then(|cfg| f.pcie_link(cfg));
    bench::line::NodeLine {
        version: env!("CARGO_PKG_VERSION").into(),
        commit: env!("IBKERN_GIT_COMMIT").into(),
        role,
        cpu: text(&brand),
        hypervisor: machine.features.hypervisor,
        tsc_hz: machine.tsc_hz,
        tsc_source: format!("{:?}", machine.tsc_source),
        hca: format!("{} {:04x}:{:04x}", f.bdf, f.vendor, f.device),
        firmware: format!("{}.{}.{}", summary.fw.0, summary.fw.1, summary.fw.2),
        board: text(&summary.board_id),
        pcie_link: link.map(|l| l.to_string()),
        config: settings.to_string(),
    }
}

/// Runs the configured sweep; true on success.
pub fn run(machine: &Machine, config: &Config, settings: Settings<'_>) -> bool {
    match sweep(machine, config, settings) {
        Ok(()) => true,
        Err(why) => {
            println!("pingpong: FAIL: {why}");
            false
        }
    }
}

fn sweep(
    machine: &Machine,
    config: &Config,
    settings: Settings<'_>,
) -> Result<(), alloc::string::String> {
    use alloc::format;
    use bench::config::{Completion, Role};
    // The configuration was checked as a whole when it was parsed (`ibconfig`): with
    // mode=pingpong it has a role, which the bench's keys hold.
    let cfg = config.bench;
    let role = cfg.role;
    let f = find(machine).map_err(|e| format!("{e}"))?;
    let att = Attached::new(machine, f, config.hca_irq).map_err(|e| format!("{e}"))?;
    let before = dma::stats();
    let mut hca = bring_up_with(&att, cfg.port, config.port_wait_ms, config.sm)
        .map_err(|e| format!("{e}"))?;
    let summary = hca.summary();
    println!("{summary}");
    {
        use bench::line::Record;
        let _ = node_line(machine, f, &summary, role, settings).emit(&mut Console);
    }
    // A run reported as `completion event` must have waited for interrupts (the
    // configuration refuses `hca_irq=poll` with events; this holds it for the device too,
    // and a server refuses a client's run with events).
    let events_ok = hca.irq_mode() != mlx4::hca::IrqMode::Polling;
    let msix = hca.irq_mode() == mlx4::hca::IrqMode::Msix;
    let runs: alloc::vec::Vec<_> = config.client_runs().collect();
    if role == Role::Client && !events_ok && runs.iter().any(|r| r.completion == Completion::Event)
    {
        let _ = hca.close();
        return Err("completion=event, but the HCA takes no interrupts (polling)".into());
    }
    // isr mode replies from the MSI-X handler (the configuration asks hca_irq=msix; this
    // holds it when the driver fell back to INTx).
    if role == Role::Client && !msix && runs.iter().any(|r| r.completion == Completion::Isr) {
        let _ = hca.close();
        return Err(
            "completion=isr, but the HCA is not on MSI-X (the driver fell back to INTx or polling)"
                .into(),
        );
    }
    let mut env = KernelEnv { msix };
    if config.srq_mode() {
        let r = srq(&mut hca, &mut env, &att, config, role, events_ok);
        let catas = super::check_catas(&hca);
        let closed = hca.close();
        drop(att);
        catas.map_err(|e| format!("after the runs: {e}"))?;
        let totals = r?;
        closed.map_err(|e| format!("teardown: {e:?}"))?;
        let after = dma::stats();
        if after != before {
            return Err(format!(
                "DMA leak: {} bytes in {} regions before, {} in {} after",
                before.bytes, before.regions, after.bytes, after.regions
            ));
        }
        if totals.failed > 0 || totals.runs == 0 {
            return Err(format!(
                "srq_pingpong: {} of {} runs failed",
                totals.failed, totals.runs
            ));
        }
        println!("pingpong: PASS srq_pingpong {} runs", totals.runs);
        return Ok(());
    }
    let result = match role {
        Role::Client => {
            println!(
                "pingpong: client on {} (hca_irq {:?}): {} runs, repeat {}",
                f.bdf,
                config.hca_irq,
                runs.len(),
                cfg.repeat
            );
            let as_plan = !config.plan().is_empty();
            bench::plan::run_plan(&mut hca, &mut env, runs, cfg.repeat, as_plan, &mut Console)
                .map(|t| (t, 0))
        }
        Role::Server => {
            println!(
                "pingpong: server on {} (hca_irq {:?}), following its clients; idle_timeout_ms={}",
                f.bdf,
                config.hca_irq,
                cfg.idle_timeout_ns / 1_000_000
            );
            bench::plan::serve(&mut hca, &mut env, &cfg, events_ok, &mut Console)
                .map(|s| (s.totals, s.incomplete_plans))
        }
    };
    // §1.6: an internal error during the runs explains any failure better than the symptom
    // (timeouts, error completions), and makes a "successful" run's figures suspect.
    let catas = super::check_catas(&hca);
    let closed = hca.close();
    drop(att);
    catas.map_err(|e| format!("after the runs: {e}"))?;
    let (totals, incomplete) = result.map_err(|e| format!("{e}"))?;
    closed.map_err(|e| format!("teardown: {e:?}"))?;
    let after = dma::stats();
    if after != before {
        return Err(format!(
            "DMA leak: {} bytes in {} regions before, {} in {} after",
            before.bytes, before.regions, after.bytes, after.regions
        ));
    }
    if totals.failed > 0 || incomplete > 0 || totals.runs == 0 {
        return Err(format!(
            "{} of {} runs failed ({} refused), {} plans incomplete",
            totals.failed, totals.runs, totals.refused, incomplete
        ));
    }
    let last = totals.last.unwrap_or_default();
    println!(
        "pingpong: PASS {} sizes, {} aborted, {} lost, {} retries, {} late repeats; local lid {} qpn {:#x}, peer lid {} qpn {:#x}, mtu {}; {} runs",
        totals.sizes,
        totals.aborted,
        totals.lost,
        totals.retries,
        totals.late_repeats,
        last.local.lid,
        last.local.qpn,
        last.peer.lid,
        last.peer.qpn,
        last.mtu,
        totals.runs
    );
    Ok(())
}
