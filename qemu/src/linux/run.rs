//! Booting the Linux guest(s) with the emulated HCA, and judging the run from their consoles
//! and the model's records.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::image::{self, LinuxImage};
use crate::command::{BootMedium, QemuCommand, SocketLink};
use crate::guest::GuestExit;
use crate::hca::{run_nodes_on, NodeOutcome, NodeSpec};
use crate::machine::{Accel, Machine};

/// What to run.
#[derive(Clone, Debug)]
pub struct LinuxRun {
    /// 1 or 2 guests on one fabric.
    pub guests: usize,
    /// MSI-X (true) or `msi_x=0` (INTx).
    pub msix: bool,
    pub machine: Machine,
    /// The guest script (`/etc/ibkern/script`).
    pub script: String,
    pub timeout: Duration,
    /// Seconds per test program inside the guest.
    pub test_timeout: u64,
    /// UDP ports on 127.0.0.1 of the guests' Ethernet link ends (two guests).
    pub link_ports: [u16; 2],
    /// Record the model's behaviour trace of every guest's HCA (`NodeOutcome::trace`).
    pub trace: bool,
    /// The device profile of each guest's HCA in order (the last one repeats; none: the
    /// default profile).
    pub profiles: Vec<sim::DeviceProfile>,
}

impl LinuxRun {
    /// The profile of guest `node`'s HCA.
    pub fn profile(&self, node: usize) -> sim::DeviceProfile {
        self.profiles
            .get(node)
            .or(self.profiles.last())
            .cloned()
            .unwrap_or_default()
    }
}

/// Two UDP ports on 127.0.0.1 that are free right now (for the guest link's ends).
pub fn free_ports() -> Result<[u16; 2]> {
    let a = std::net::UdpSocket::bind("127.0.0.1:0").context("finding a free UDP port")?;
    let b = std::net::UdpSocket::bind("127.0.0.1:0").context("finding a free UDP port")?;
    Ok([a.local_addr()?.port(), b.local_addr()?.port()])
}

/// One guest's verdict, from its console.
#[derive(Debug)]
pub struct GuestVerdict {
    pub node: NodeOutcome,
    /// `ibkern-linux: modprobe ...` lines.
    pub modprobes: Vec<String>,
    /// Kernel lines from mlx4_core/mlx4_ib that report a problem with the device.
    pub complaints: Vec<String>,
    /// The LID sysfs reported for port 1 and the state.
    pub port_state: Option<String>,
    pub lid: Option<u16>,
    /// The script's exit status (`ibkern-linux: script exit N`).
    pub script_exit: Option<i32>,
    /// `ibkern-linux: result rc=N: CMD` lines.
    pub results: Vec<(i32, String)>,
    /// The LID the fabric's subnet manager gave this HCA.
    pub expected_lid: u16,
}

impl GuestVerdict {
    pub fn passed(&self) -> bool {
        self.modprobes.iter().all(|l| l.ends_with(": ok"))
            && self.modprobes.len() >= 3
            && self.complaints.is_empty()
            && self
                .port_state
                .as_deref()
                .is_some_and(|s| s.contains("ACTIVE"))
            && self.lid == Some(self.expected_lid)
            && self.script_exit == Some(0)
            && self.node.violations.is_empty()
            && !matches!(self.node.exit, GuestExit::TimedOut(_))
    }
}

/// The whole run.
#[derive(Debug)]
pub struct LinuxOutcome {
    pub guests: Vec<GuestVerdict>,
    pub elapsed: Duration,
}

impl LinuxOutcome {
    /// The union of the guests' behaviour traces (empty unless `LinuxRun::trace`).
    pub fn trace(&self) -> String {
        sim::conformance::union(self.guests.iter().map(|g| g.node.trace.as_str()))
    }
    pub fn passed(&self) -> bool {
        !self.guests.is_empty() && self.guests.iter().all(GuestVerdict::passed)
    }
    pub fn timed_out(&self) -> bool {
        self.guests
            .iter()
            .any(|g| matches!(g.node.exit, GuestExit::TimedOut(_)))
    }
    /// What the runner prints at the end.
    pub fn report(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for g in &self.guests {
            let n = &g.node.name;
            match g.node.exit {
                GuestExit::Status(0) => lines.push(format!("{n}: QEMU: the guest powered off")),
                ref other => lines.push(format!("{n}: QEMU: {other}")),
            }
            for m in &g.modprobes {
                lines.push(format!("{n}: {m}"));
            }
            lines.push(format!(
                "{n}: port 1 {} lid {} (fabric assigned {})",
                g.port_state.as_deref().unwrap_or("?"),
                g.lid.map_or("?".to_string(), |l| l.to_string()),
                g.expected_lid
            ));
            for c in &g.complaints {
                lines.push(format!("{n}: device complaint: {c}"));
            }
            for (rc, cmd) in &g.results {
                lines.push(format!(
                    "{n}: {} rc={rc}: {cmd}",
                    if *rc == 0 { "ok  " } else { "FAIL" }
                ));
            }
            lines.push(format!(
                "{n}: script exit {}",
                g.script_exit.map_or("none".to_string(), |c| c.to_string())
            ));
            lines.extend(crate::hca::report_lines(&g.node));
            lines.push(format!("{n}: {}", if g.passed() { "PASS" } else { "FAIL" }));
        }
        lines.push(format!(
            "Linux guests: {} in {:.1} s",
            if self.passed() { "PASS" } else { "FAIL" },
            self.elapsed.as_secs_f64()
        ));
        lines
    }
}

/// Does a kernel console line report a problem with the HCA? (mlx4_core/mlx4_ib lines that
/// say fail, error, warn, timed out, "too much", or a firmware status.)
pub fn is_device_complaint(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    let ours = l.contains("mlx4_core") || l.contains("mlx4_ib") || l.contains("mlx4:");
    ours && [
        "fail",
        "error",
        "warn",
        "timed out",
        "too much",
        "fw status",
        "unable",
        "bug",
    ]
    .iter()
    .any(|w| l.contains(w))
}

/// Judges one guest's console.
pub fn judge(node: NodeOutcome, expected_lid: u16) -> GuestVerdict {
    let mut v = GuestVerdict {
        modprobes: Vec::new(),
        complaints: Vec::new(),
        port_state: None,
        lid: None,
        script_exit: None,
        results: Vec::new(),
        expected_lid,
        node,
    };
    for line in v.node.console.lines() {
        if let Some(rest) = line.find("ibkern-linux: ").map(|i| &line[i + 14..]) {
            if rest.starts_with("modprobe ") {
                v.modprobes.push(rest.to_string());
            } else if let Some(p) = rest.strip_prefix("port 1 state: ") {
                // "4: ACTIVE, lid 2"
                let (state, lid) = p.split_once(", lid ").unwrap_or((p, ""));
                v.port_state = Some(state.trim().to_string());
                v.lid = lid
                    .trim()
                    .strip_prefix("0x")
                    .and_then(|h| u16::from_str_radix(h, 16).ok())
                    .or_else(|| lid.trim().parse().ok());
            } else if let Some(code) = rest.strip_prefix("script exit ") {
                v.script_exit = code.trim().parse().ok();
            } else if let Some(r) = rest.strip_prefix("result rc=") {
                if let Some((rc, cmd)) = r.split_once(": ") {
                    v.results.push((rc.parse().unwrap_or(-1), cmd.to_string()));
                }
            }
        } else if is_device_complaint(line) {
            v.complaints.push(line.trim().to_string());
        }
    }
    v
}

/// The guests' boot specifications (writes the run's initramfs with the script into `work`).
pub fn node_specs(image: &LinuxImage, run: &LinuxRun, work: &Path) -> Result<Vec<NodeSpec>> {
    let initrd = image::with_script(image, &run.script, &work.join("initrd-run.cpio"))?;
    node_specs_with_initrd(image, run, &initrd)
}

/// [`node_specs`] with an initramfs already written (e.g. with extra files).
pub fn node_specs_with_initrd(
    image: &LinuxImage,
    run: &LinuxRun,
    initrd: &Path,
) -> Result<Vec<NodeSpec>> {
    anyhow::ensure!((1..=2).contains(&run.guests), "1 or 2 guests");
    let initrd = initrd.to_path_buf();
    let mut specs = Vec::new();
    for node in 0..run.guests {
        let append = format!(
            "console=ttyS0 panic=-1 quiet IBK_NODE={node} IBK_NODES={} IBK_MSIX={} IBK_TIMEOUT={}",
            run.guests,
            u8::from(run.msix),
            run.test_timeout
        );
        let mut command = QemuCommand::new(
            BootMedium::LinuxKernel {
                kernel: image.kernel.clone(),
                initrd: initrd.clone(),
                append,
            },
            Accel::Tcg,
        );
        command.machine = run.machine;
        if run.guests > 1 {
            command.socket_link = Some(SocketLink {
                local_port: run.link_ports[node],
                peer_port: run.link_ports[1 - node],
                mac_last: node as u8 + 1,
            });
        }
        specs.push(NodeSpec {
            name: format!("linux{node}"),
            command,
            profile: run.profile(node),
            console_log: None,
        });
    }
    Ok(specs)
}

/// Judges every guest of a run (node `i` got the fabric's `i`-th LID).
pub fn judge_nodes(nodes: Vec<NodeOutcome>, elapsed: Duration) -> LinuxOutcome {
    let guests = nodes
        .into_iter()
        .enumerate()
        .map(|(i, n)| judge(n, sim::Fabric::sm_lid_for(i, 1)))
        .collect();
    LinuxOutcome { guests, elapsed }
}

/// Is this init's port line with the port ACTIVE (`ibkern-linux: port 1 state: 4: ACTIVE,
/// lid 2`)? Init prints it once the modules are loaded and sysfs shows the port ACTIVE
/// (polled every 0.2 s), i.e. when the HCA is ready for traffic.
pub fn is_ready_line(line: &str) -> bool {
    line.find("ibkern-linux: port 1 state: ")
        .is_some_and(|at| line[at..].contains("ACTIVE"))
}

/// Boots the guests on one fabric (built-in subnet manager on) and judges them.
pub fn run_linux(image: &LinuxImage, run: &LinuxRun, work: &Path) -> Result<LinuxOutcome> {
    run_linux_with_files(image, run, work, &[])
}

/// [`run_linux`] with extra files in the guests (path without the leading `/`, mode,
/// contents), e.g. a program built for the run.
pub fn run_linux_with_files(
    image: &LinuxImage,
    run: &LinuxRun,
    work: &Path,
    files: &[(&str, u32, Vec<u8>)],
) -> Result<LinuxOutcome> {
    let files: Vec<(&str, u32, &[u8])> = files.iter().map(|(p, m, b)| (*p, *m, &b[..])).collect();
    let initrd =
        image::with_script_and_files(image, &run.script, &files, &work.join("initrd-run.cpio"))?;
    let specs = node_specs_with_initrd(image, run, &initrd)?;
    let start = Instant::now();
    let fabric = sim::FabricConfig {
        trace: run.trace,
        ..sim::FabricConfig::default()
    };
    let nodes = run_nodes_on(fabric, specs, run.timeout, &mut |_, _, _, _| {})?;
    Ok(judge_nodes(nodes, start.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_complaints_are_mlx4_lines_with_trouble_words() {
        assert!(is_device_complaint(
            "[    4.06] mlx4_core 0000:00:03.0: command 0x34 failed: fw status = 0x2"
        ));
        assert!(is_device_complaint(
            "[ 3.72] mlx4_core 0000:00:03.0: Requested number of MACs is too much for port 1"
        ));
        assert!(!is_device_complaint(
            "[ 2.68] mlx4_core: Mellanox ConnectX core driver v4.0-0"
        ));
        assert!(!is_device_complaint("[ 1.0] ACPI: failed to something"));
    }
}
