//! The Linux delegate from the kernel (docs/delegation.md): `mode=delegate` runs the
//! delegation benchmark (`bench::delegate::benchmark`), and with `delegate=` in its
//! configuration a node in `mode=pingpong` or `mode=delegate` fetches its plan from the
//! delegate's root and writes its results there (`bench::delegate::plans`).
//!
//! Console contract (the runner reads it): `delegate: connected to LID L rendezvous QPN Q
//! as node G ...`, `delegate: plan <path> (N bytes)` or `delegate: no plan on the
//! delegate`, the benchmark's tables and `ibkern-delegate-*` lines, `delegate: results in
//! <dir>`, then `delegate: PASS ...` or `delegate: FAIL: <why>`.

use alloc::format;
use alloc::string::String;
use core::fmt::{self, Write};

use bench::delegate::benchmark::{self, BenchConfig};
use bench::delegate::plans::{self, NodeName};
use bench::delegate::{Client, ClientConfig};
use bench::BenchEnv;
use verbs::Device;

use super::pingpong::KernelEnv;
use super::{bring_up_with, find, Attached};
use crate::config::Config;
use crate::console::Console;
use crate::mm::dma;
use crate::println;
use crate::system::Machine;

/// The client's configuration from the node's keys: the delegate's address, the port,
/// the bounds of the ping-pong keys (its peer timeout bounds the connect, and 100 of its
/// waits a call).
pub fn client_config(config: &Config, credits: u16) -> Option<ClientConfig> {
    let at = config.delegate.at?;
    let b = &config.bench;
    let mut c = ClientConfig::new(at.lid, at.qpn);
    c.port = b.port;
    c.probe_lids = b.probe_lids;
    c.credits = credits;
    c.connect_timeout_ns = b.peer_timeout_ns;
    c.call_timeout_ns = b.wait_timeout_ns.saturating_mul(100).max(10_000_000_000);
    c.wait_slice_ns = c.call_timeout_ns;
    Some(c)
}

/// Connects as `config` says and names the node: its port GUID and LID.
pub fn connect<D: Device, E: BenchEnv>(
    dev: &mut D,
    env: &mut E,
    config: &Config,
    credits: u16,
) -> Result<(Client<D>, NodeName), String> {
    let cfg = client_config(config, credits).ok_or("no delegate= in the configuration")?;
    let port = dev
        .query_port(cfg.port)
        .map_err(|e| format!("query_port: {e}"))?;
    let node = NodeName {
        guid: u64::from_be_bytes(port.gid.0[8..16].try_into().unwrap_or([0; 8])),
        lid: port.lid,
    };
    let client = Client::connect(dev, env, cfg).map_err(|e| format!("connecting: {e}"))?;
    if let Some(a) = client.accepted() {
        println!(
            "delegate: connected to LID {} rendezvous QPN {:#x} as node {node} (LID {}), delegate's node {}, {} credits, lease {} ms",
            a.lid,
            cfg.rdv_qpn,
            node.lid,
            a.node,
            client.credits(),
            a.lease_ms
        );
    }
    Ok((client, node))
}

/// `config` with the node's plan from the delegate laid over it (or as it is, when the
/// delegate holds none for the node).
pub fn with_plan<D: Device, E: BenchEnv>(
    dev: &mut D,
    env: &mut E,
    client: &mut Client<D>,
    node: &NodeName,
    config: &Config,
) -> Result<Config, String> {
    match plans::fetch_plan(dev, env, client, node)
        .map_err(|e| format!("fetching the plan: {e}"))?
    {
        None => {
            println!(
                "delegate: no plan on the delegate for node {node}: the node's own configuration"
            );
            Ok(config.clone())
        }
        Some(plan) => {
            println!("delegate: plan {} ({} bytes)", plan.path, plan.text.len());
            ibconfig::overlay(config, &plan.text)
                .map_err(|e| format!("the plan {}: {e}", plan.path))
        }
    }
}

/// Writes what the node printed of its runs as `console.log` in a new results directory
/// on the delegate; returns that directory.
pub fn store_results<D: Device, E: BenchEnv>(
    dev: &mut D,
    env: &mut E,
    client: &mut Client<D>,
    node: &NodeName,
    transcript: &str,
) -> Result<String, String> {
    let dir = plans::results_dir(dev, env, client, node)
        .map_err(|e| format!("creating the results directory: {e}"))?;
    let path = format!("{dir}/console.log");
    plans::write_file(dev, env, client, &path, transcript.as_bytes())
        .map_err(|e| format!("writing {path}: {e}"))?;
    println!("delegate: results in {dir} ({} bytes)", transcript.len());
    Ok(dir)
}

/// The console, with a copy of everything kept for the results file (up to
/// `plans::MAX_RESULTS` bytes; beyond that the copy says it was cut).
pub struct Transcript {
    pub text: String,
    keep: bool,
    cut: bool,
}

impl Transcript {
    /// The console, and a copy that starts with what the console printed from the boot on
    /// (the facts a results file needs: kernel, CPU, TSC, HCA).
    pub fn new() -> Self {
        Transcript {
            text: crate::console::take_boot_record(),
            keep: true,
            cut: false,
        }
    }

    /// The console alone.
    pub fn console_only() -> Self {
        Transcript {
            text: String::new(),
            keep: false,
            cut: false,
        }
    }

    /// Adds a line to the copy only (one the console shows later, e.g. the verdict).
    pub fn record(&mut self, line: &str) {
        self.keep(line);
        self.keep("\n");
    }

    fn keep(&mut self, s: &str) {
        if !self.keep {
            return;
        }
        if self.text.len() + s.len() <= plans::MAX_RESULTS - 64 {
            self.text.push_str(s);
        } else if !self.cut {
            self.cut = true;
            self.text
                .push_str("\n(the transcript was cut here: too long)\n");
        }
    }
}

impl Default for Transcript {
    fn default() -> Self {
        Self::new()
    }
}

impl Write for Transcript {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        Console.write_str(s)?;
        self.keep(s);
        Ok(())
    }
}

/// `mode=delegate`; true on success.
pub fn run(machine: &Machine, config: &Config) -> bool {
    match bench_mode(machine, config) {
        Ok(()) => true,
        Err(why) => {
            println!("delegate: FAIL: {why}");
            false
        }
    }
}

fn bench_mode(machine: &Machine, config: &Config) -> Result<(), String> {
    let f = find(machine).map_err(|e| format!("{e}"))?;
    let att = Attached::new(machine, f, config.hca_irq).map_err(|e| format!("{e}"))?;
    let before = dma::stats();
    let mut hca = bring_up_with(&att, config.bench.port, config.port_wait_ms, config.sm)
        .map_err(|e| format!("{e}"))?;
    println!("{}", hca.summary());
    let msix = hca.irq_mode() == mlx4::IrqMode::Msix;
    let events_ok = hca.irq_mode() != mlx4::IrqMode::Polling;
    let mut env = KernelEnv { msix };
    let r = session(&mut hca, &mut env, config, events_ok);
    let catas = super::check_catas(&hca);
    let closed = hca.close();
    drop(att);
    catas.map_err(|e| format!("after the benchmark: {e}"))?;
    let summary = r?;
    closed.map_err(|e| format!("teardown: {e:?}"))?;
    let after = dma::stats();
    if after != before {
        return Err(format!(
            "DMA leak: {} bytes in {} regions before, {} in {} after",
            before.bytes, before.regions, after.bytes, after.regions
        ));
    }
    println!("{summary}");
    Ok(())
}

/// Connect, plan, benchmark, results, goodbye: the verdict line's text.
fn session<D: Device>(
    dev: &mut D,
    env: &mut KernelEnv,
    config: &Config,
    events_ok: bool,
) -> Result<String, String> {
    let credits = config.delegate.outstanding.max(16);
    let (mut client, node) = connect(dev, env, config, credits)?;
    let r = (|| -> Result<String, String> {
        let config = with_plan(dev, env, &mut client, &node, config)?;
        let modes: alloc::vec::Vec<_> = config.bench.each_mode().collect();
        if modes.iter().any(|m| m.interrupts()) && !events_ok {
            return Err(
                "completion events asked, but the HCA takes no interrupts (polling)".into(),
            );
        }
        if modes.contains(&bench::Completion::Isr) && !env.msix {
            return Err("completion=isr, but the HCA is not on MSI-X".into());
        }
        let cfg = BenchConfig {
            modes: if config.bench.modes.is_empty() {
                bench::config::Modes::one(config.bench.completion)
            } else {
                config.bench.modes
            },
            iterations: config.bench.iterations,
            max_size: config.delegate.max_size,
            outstanding: config.delegate.outstanding,
            baseline_qpn: config.delegate.baseline_qpn,
            base: config.bench,
        };
        let mut out = Transcript::new();
        let name = format!("{node}");
        let r = benchmark::run(dev, env, &mut client, &cfg, &name, &mut out)
            .map_err(|e| format!("{e}"))
            .map(|s| {
                let ratio = match (s.null_poll_us, s.baseline_rtt_us) {
                    (Some(n), Some(b)) => format!(", null call / RC ib_send_lat {:.2}", n / b),
                    _ => String::new(),
                };
                format!(
                    "delegate: PASS {} latency rows, {} rate rows{ratio}",
                    s.rows, s.rates
                )
            });
        // A failed benchmark's transcript is stored too, with the verdict `run` prints,
        // while the connection still serves: the failure is seen where the results go.
        match &r {
            Ok(verdict) => out.record(verdict),
            Err(why) => out.record(&format!("delegate: FAIL: {why}")),
        }
        let stored = store_results(dev, env, &mut client, &node, &out.text);
        let verdict = r?;
        stored?;
        Ok(verdict)
    })();
    let closed = client.close(dev, env);
    let verdict = r?;
    closed.map_err(|e| format!("goodbye: {e}"))?;
    Ok(verdict)
}
