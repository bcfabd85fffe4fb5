//! `mode=diag`: everything needed to debug ibkern on unfamiliar hardware, printed so a user
//! can paste it into a bug report. Every line starts with `diag: `. It never stops early:
//! whatever fails is reported and the rest still printed.
//!
//! Order: the kernel (version, git commit, configuration), the machine (CPU features, TSC,
//! memory, PCI mechanism), every Mellanox function
//! with its whole configuration space and decoded capabilities, then one bring-up of the
//! first ConnectX-3 physical function with firmware, capabilities, adapter, memory given to
//! the device, the capability report (`mlx4::report`: every capability as a device profile
//! file field, with what the driver chose, and the raw query outputs), each port (QUERY_PORT,
//! PortInfo decoded and raw), the catastrophic error buffer, and the firmware command log of
//! the bring-up (and of its teardown).
//!
//! Identifiers are printed as Linux's tools print them, so a report reads against `ibstat`
//! and `ibv_devinfo -v` output: GUIDs as `0x0002c90300010001` (ibstat) followed by
//! `0002:c903:0001:0001` (ibv_devinfo), GIDs as eight groups of four hex digits
//! (`fe80:0000:0000:0000:0002:c903:0001:0001`), LIDs in decimal with their hex value.

use core::fmt;

use crate::config::{Config, HcaIrq, Settings};
use crate::pci::{self, cap, regs, Function};
use crate::println;
use crate::system::Machine;

use super::cmdlog::{self, Line};
use super::{find, Attached, HcaError, VENDOR_MELLANOX};

/// How long diag waits for the configured port to become ACTIVE before it reports the state
/// it sees (a port without a subnet manager stays INIT).
const PORT_WAIT_MS: u64 = 3_000;

/// A GUID as ibstat prints it, then as ibv_devinfo does: `0x0002c90300010001
/// (0002:c903:0001:0001)`.
pub struct Guid(pub u64);

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.0;
        write!(
            f,
            "{g:#018x} ({:04x}:{:04x}:{:04x}:{:04x})",
            g >> 48,
            (g >> 32) & 0xffff,
            (g >> 16) & 0xffff,
            g & 0xffff
        )
    }
}

/// A GID as ibv_devinfo prints it: eight groups of four hex digits.
pub struct GidText<'a>(pub &'a verbs::Gid);

impl fmt::Display for GidText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0 .0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

/// A LID in decimal (as ibstat and ibv_devinfo print it) and in hex.
pub struct Lid(pub u16);

impl fmt::Display for Lid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:#06x})", self.0, self.0)
    }
}

/// PortInfo's PortPhysicalState (IBA 14.2.5.6) by the name ibstat prints.
fn phys_state_name(state: u8) -> &'static str {
    match state {
        1 => "Sleep",
        2 => "Polling",
        3 => "Disabled",
        4 => "PortConfigurationTraining",
        5 => "LinkUp",
        6 => "LinkErrorRecovery",
        7 => "PhyTest",
        _ => "?",
    }
}

/// One port's attributes on one line, identifiers in their usual notation.
pub struct PortLine<'a>(pub &'a verbs::PortAttr);

impl fmt::Display for PortLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = self.0;
        let mtu = |m: Option<verbs::Mtu>| m.map_or(0, |m| m.bytes());
        let port_guid = u64::from_be_bytes(a.gid.0[8..].try_into().unwrap_or([0; 8]));
        write!(
            f,
            "state {:?}, physical state {} ({}), lid {}, sm_lid {}, lmc {}, sm_sl {}, mtu active {} max {}, port GUID {}, GID[0] {}",
            a.state,
            a.phys_state,
            phys_state_name(a.phys_state),
            Lid(a.lid),
            Lid(a.sm_lid),
            a.lmc,
            a.sm_sl,
            mtu(a.active_mtu),
            mtu(a.max_mtu),
            Guid(port_guid),
            GidText(&a.gid)
        )
    }
}

/// Runs the report. True when the HCA came up with the configured port ACTIVE and no
/// internal error; the report is complete either way. `settings`: the ramdisk's lines.
pub fn run(machine: &Machine, config: &Config, settings: Settings<'_>) -> bool {
    let (irq, port) = (config.hca_irq, config.bench.port);
    println!(
        "diag: ibkern {} commit {} mode=diag",
        env!("CARGO_PKG_VERSION"),
        env!("IBKERN_GIT_COMMIT")
    );
    println!("diag: config: {settings}");
    println!(
        "diag: in effect: hca_irq={} ib_port={port} console={} log={} apic={} (port wait {PORT_WAIT_MS} ms)",
        irq.name(),
        config.console.name(),
        alloc::format!("{:?}", config.log).to_lowercase(),
        if config.x2apic { "x2apic" } else { "auto" },
    );
    machine_report(machine);
    let mellanox: alloc::vec::Vec<&Function> = machine
        .pci
        .iter()
        .filter(|f| f.vendor == VENDOR_MELLANOX)
        .collect();
    println!("diag: {} Mellanox function(s)", mellanox.len());
    for f in &mellanox {
        config_space_report(f);
    }
    let ok = match find(machine) {
        Ok(f) => hca_report(machine, f, irq, port),
        Err(e) => {
            println!("diag: no bring-up: {e}");
            false
        }
    };
    println!(
        "diag: end ({})",
        if ok { "healthy" } else { "problems above" }
    );
    ok
}

fn machine_report(m: &Machine) {
    let f = &m.features;
    println!(
        "diag: cpu: max leaf {:#x}/{:#x}, 1G pages {}, NX {}, PAT {}, x2APIC {}, invariant TSC {}, hypervisor {}, APIC id {}",
        f.max_leaf,
        f.max_ext_leaf,
        f.page_1g,
        f.nx,
        f.pat,
        f.x2apic,
        f.invariant_tsc,
        f.hypervisor,
        m.lapic_id
    );
    println!(
        "diag: tsc: {} Hz ({:?}); hpet: {:?} Hz",
        m.tsc_hz, m.tsc_source, m.hpet_hz
    );
    println!("diag: memory: {:?}", m.mm);
    println!(
        "diag: pci: {} functions via {}",
        m.pci.len(),
        m.pci_mechanism
    );
}

/// The function's identity, BARs, capabilities (decoded where the HCA's matter: PCIe link,
/// MSI-X) and its configuration space as hex, 16 bytes a line; with ECAM also the extended
/// space's capability headers.
fn config_space_report(f: &Function) {
    let mut line = alloc::string::String::new();
    let _ = f.describe(&mut line);
    for l in line.lines() {
        println!("diag: {l}");
    }
    let Some(cfg) = pci::access::get() else {
        println!("diag: no configuration access");
        return;
    };
    control_report(f, "at boot");
    if let Some(link) = f.pcie_link(cfg) {
        println!("diag: {} PCIe link: {link}", f.bdf);
    }
    println!("diag: {} config space:", f.bdf);
    for row in 0..16u16 {
        let mut text = alloc::string::String::new();
        for dword in 0..4u16 {
            let v = cfg.read32(f.bdf, row * 16 + dword * 4);
            for b in v.to_le_bytes() {
                text.push_str(&alloc::format!(" {b:02x}"));
            }
        }
        println!("diag:   {:03x}:{text}", row * 16);
    }
    // Extended capabilities (ECAM only; port I/O reaches the first 256 bytes).
    let mut off = 0x100u16;
    for _ in 0..32 {
        let header = cfg.read32(f.bdf, off);
        if header == 0 || header == u32::MAX {
            break;
        }
        println!(
            "diag: {} extended capability {:#06x} version {} at {off:#05x}",
            f.bdf,
            header & 0xffff,
            (header >> 16) & 0xf
        );
        let next = (header >> 20) as u16 & 0xffc;
        if next < 0x100 || next <= off {
            break;
        }
        off = next;
    }
}

/// The command and status registers and the MSI-X control word, decoded (`when`: at boot,
/// after bring-up).
fn control_report(f: &Function, when: &str) {
    let Some(cfg) = pci::access::get() else {
        return;
    };
    let command = cfg.read16(f.bdf, regs::COMMAND);
    let status = cfg.read16(f.bdf, regs::STATUS);
    println!(
        "diag: {} {when}: command {command:#06x} (memory {}, bus master {}, INTx disabled {}) status {status:#06x} (interrupt pending {})",
        f.bdf,
        command & regs::CMD_MEMORY != 0,
        command & regs::CMD_BUS_MASTER != 0,
        command & regs::CMD_INTX_DISABLE != 0,
        status & (1 << 3) != 0
    );
    if let Some(off) = f.find_cap(cap::MSIX) {
        let control = cfg.read16(f.bdf, off as u16 + 2);
        println!(
            "diag: {} {when}: MSI-X control {control:#06x} (enabled {}, function mask {})",
            f.bdf,
            control & 0x8000 != 0,
            control & 0x4000 != 0
        );
    }
}

fn hca_report(machine: &Machine, f: &Function, irq: HcaIrq, port: u8) -> bool {
    cmdlog::LOG.lock().clear();
    let att = match Attached::new(machine, f, irq) {
        Ok(a) => a,
        Err(e) => {
            println!("diag: cannot attach {}: {e}", f.bdf);
            return false;
        }
    };
    let start = crate::now_ns();
    let mut ok = true;
    match mlx4::Hca::init(att.platform(), att.driver_config()) {
        Err(e) => {
            println!(
                "diag: bring-up FAILED after {} ms: {}",
                (crate::now_ns() - start) / 1_000_000,
                HcaError::Driver("bring-up", e)
            );
            ok = false;
        }
        Ok(mut hca) => {
            println!(
                "diag: bring-up ok in {} ms ({} commands), interrupts {:?}",
                (crate::now_ns() - start) / 1_000_000,
                hca.commands_issued(),
                hca.irq_mode()
            );
            control_report(f, "after bring-up");
            println!(
                "diag: node GUID {}",
                Guid(verbs::Device::query_device(&hca).node_guid)
            );
            println!("diag: firmware {:?}", hca.fw_info());
            println!("diag: caps {:?}", hca.caps());
            println!("diag: adapter {:?}", hca.adapter());
            println!("diag: memory given to the device {:?}", hca.mem_stats());
            // The capability report: each capability in the device profile file's terms,
            // beside what the driver made of it (`ibkern-diag-profile` reads it back).
            let bars = [0u8, 2].map(|i| f.bars().find(|b| b.index == i).map(|b| b.size));
            for line in hca.capability_report(bars).lines {
                println!("diag: {line}");
            }
            ok &= ports_report(&mut hca, port);
            let (bar, offset, len) = hca.catas_location();
            let catas = hca.read_catas();
            if !hca.platform().covers(bar, offset, len) {
                println!(
                    "diag: catastrophic error buffer: {bar:?}+{offset:#x} ({len} bytes) lies outside the mapped BAR; not read"
                );
                ok = false;
            } else if catas.is_error() {
                println!(
                    "diag: catastrophic error buffer: INTERNAL ERROR {:08x?}",
                    catas.words()
                );
                ok = false;
            } else {
                println!(
                    "diag: catastrophic error buffer: {} dwords, no internal error",
                    catas.words().len()
                );
            }
            match hca.close() {
                Ok(()) => println!("diag: teardown ok"),
                Err(e) => {
                    println!("diag: teardown FAILED: {e}");
                    ok = false;
                }
            }
        }
    }
    drop(att);
    let log = cmdlog::LOG.lock();
    println!(
        "diag: command log: {} command(s){}",
        log.total(),
        if log.total() > cmdlog::CAPACITY as u64 {
            " (oldest not kept)"
        } else {
            ""
        }
    );
    for (seq, r) in log.iter() {
        println!("diag:   {}", Line(seq, r));
    }
    ok
}

/// Each port: QUERY_PORT, PortInfo decoded and raw, PerfMgt traffic counters. Waits a bounded time for `wanted` to
/// become ACTIVE; false when it does not.
fn ports_report(hca: &mut mlx4::Hca<super::platform::KernelPlatform>, wanted: u8) -> bool {
    let ports = hca.caps().num_ports;
    let active = if wanted == 0 || wanted > ports {
        println!("diag: ib_port={wanted}, but the card has {ports} port(s)");
        false
    } else {
        // The wait polls PortInfo by MAD_IFC every millisecond: thousands of commands that
        // would push the bring-up out of the log ring. Count them instead of recording them.
        cmdlog::LOG.lock().pause();
        let r = hca.wait_port_active(wanted, PORT_WAIT_MS);
        let skipped = cmdlog::LOG.lock().resume();
        println!("diag: port wait: {skipped} MAD_IFC polls, not in the command log");
        match r {
            Ok(_) => true,
            Err(e) => {
                println!("diag: port {wanted} not ACTIVE after {PORT_WAIT_MS} ms: {e}");
                false
            }
        }
    };
    for p in 1..=ports.min(2) {
        match hca.query_port_cmd(p) {
            Ok(q) => println!("diag: port {p} QUERY_PORT {q:?}"),
            Err(e) => println!("diag: port {p} QUERY_PORT failed: {e}"),
        }
        match hca.port_attr(p) {
            Ok(a) => println!("diag: port {p}: {}", PortLine(&a)),
            Err(e) => println!("diag: port {p} PortInfo failed: {e}"),
        }
        if let Ok(raw) = hca.mad_get(p, mlx4::mad::attr::PORT_INFO, p as u32) {
            for (i, chunk) in raw.chunks(16).enumerate() {
                let mut text = alloc::string::String::new();
                for b in chunk {
                    text.push_str(&alloc::format!(" {b:02x}"));
                }
                println!("diag: port {p} PortInfo {:02x}:{text}", i * 16);
            }
        }
        println!("diag: port {p} change events {}", hca.port_change_events(p));
        // PerfMgt traffic counters (MAD_IFC class 0x04): data in 4-byte words, LRH to ICRC.
        match hca.port_counters(p) {
            Ok(c) => println!(
                "diag: port {p} counters ({}): xmit {} packets {} words, rcv {} packets {} words",
                if c.extended { "64-bit" } else { "32-bit" },
                c.xmit_packets,
                c.xmit_data_words,
                c.rcv_packets,
                c.rcv_data_words
            ),
            Err(e) => println!("diag: port {p} counters failed: {e}"),
        }
    }
    active
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn identifiers_print_as_ibstat_and_ibv_devinfo_print_them() {
        assert_eq!(
            Guid(0x0002_c903_0001_0001).to_string(),
            "0x0002c90300010001 (0002:c903:0001:0001)"
        );
        assert_eq!(
            Guid(0x1).to_string(),
            "0x0000000000000001 (0000:0000:0000:0001)"
        );
        let mut gid = [0u8; 16];
        gid[..2].copy_from_slice(&[0xfe, 0x80]);
        gid[8..].copy_from_slice(&0x0002_c903_0001_0001u64.to_be_bytes());
        assert_eq!(
            GidText(&verbs::Gid(gid)).to_string(),
            "fe80:0000:0000:0000:0002:c903:0001:0001"
        );
        assert_eq!(Lid(2).to_string(), "2 (0x0002)");
        assert_eq!(Lid(0xbfff).to_string(), "49151 (0xbfff)");
        let attr = verbs::PortAttr {
            state: verbs::PortState::Active,
            phys_state: 5,
            lid: 2,
            sm_lid: 1,
            lmc: 0,
            sm_sl: 0,
            max_mtu: Some(verbs::Mtu::Mtu4096),
            active_mtu: Some(verbs::Mtu::Mtu2048),
            gid: verbs::Gid(gid),
        };
        assert_eq!(
            PortLine(&attr).to_string(),
            "state Active, physical state 5 (LinkUp), lid 2 (0x0002), sm_lid 1 (0x0001), lmc 0, sm_sl 0, \
             mtu active 2048 max 4096, port GUID 0x0002c90300010001 (0002:c903:0001:0001), \
             GID[0] fe80:0000:0000:0000:0002:c903:0001:0001"
        );
    }
}
