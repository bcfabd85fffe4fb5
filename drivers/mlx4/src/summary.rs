//! A human-readable bring-up summary for the kernel's boot log: firmware version, ports with
//! state, LID and GID, capacities used, and the memory given to the device.

use core::fmt;

use crate::hca::{IrqMode, MemStats};
use crate::platform::Platform;
use crate::Hca;
use verbs::{PortAttr, PortState};

/// Everything the boot log shows. `Display` prints one line per item, each starting with
/// `mlx4: `.
#[derive(Clone, Copy, Debug)]
pub struct Summary {
    pub fw: (u16, u16, u16),
    pub board_id: [u8; 16],
    pub irq: IrqMode,
    pub num_ports: u8,
    /// Port attributes (or `None` when the query failed).
    pub ports: [Option<PortAttr>; 2],
    pub mem: MemStats,
    pub max_qps: u32,
    pub max_cqs: u32,
    pub max_mrs: u32,
    pub max_mtts: u32,
}

impl<P: Platform> Hca<P> {
    /// Gather the summary (issues MAD_IFC for each port).
    pub fn summary(&mut self) -> Summary {
        let mut ports = [None, None];
        for port in 1..=self.caps.num_ports.min(2) {
            ports[port as usize - 1] = self.port_attr(port).ok();
        }
        Summary {
            fw: (self.fw.major, self.fw.minor, self.fw.subminor),
            board_id: self.adapter.board_id,
            irq: self.irq,
            num_ports: self.caps.num_ports,
            ports,
            mem: self.mem,
            max_qps: self.qpns_capacity(),
            max_cqs: self.cqns_capacity(),
            max_mrs: self.mpts_capacity(),
            max_mtts: self.cfg.max_mtts,
        }
    }
}

fn state_name(s: PortState) -> &'static str {
    match s {
        PortState::Nop => "NOP",
        PortState::Down => "DOWN",
        PortState::Init => "INIT",
        PortState::Armed => "ARMED",
        PortState::Active => "ACTIVE",
        PortState::Other(_) => "UNKNOWN",
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let board_len = self.board_id.iter().position(|&b| b == 0).unwrap_or(16);
        let board = core::str::from_utf8(&self.board_id[..board_len]).unwrap_or("?");
        let irq = match self.irq {
            IrqMode::Msix => "MSI-X",
            IrqMode::Intx => "INTx",
            IrqMode::Polling => "polling",
        };
        writeln!(
            f,
            "mlx4: firmware {}.{}.{}, board {}, {} port(s), interrupts {}",
            self.fw.0, self.fw.1, self.fw.2, board, self.num_ports, irq
        )?;
        for (i, p) in self
            .ports
            .iter()
            .enumerate()
            .take(self.num_ports.min(2) as usize)
        {
            match p {
                Some(a) => {
                    write!(
                        f,
                        "mlx4: port {}: {} lid 0x{:x} sm_lid 0x{:x} gid ",
                        i + 1,
                        state_name(a.state),
                        a.lid,
                        a.sm_lid
                    )?;
                    for (k, pair) in a.gid.0.chunks(2).enumerate() {
                        if k > 0 {
                            f.write_str(":")?;
                        }
                        write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
                    }
                    match a.active_mtu {
                        Some(m) => writeln!(f, " mtu {}", m.bytes())?,
                        None => writeln!(f)?,
                    }
                }
                None => writeln!(f, "mlx4: port {}: query failed", i + 1)?,
            }
        }
        writeln!(
            f,
            "mlx4: memory: firmware area {} KiB, ICM aux {} KiB, ICM mapped {} KiB (ICM virtual {} MiB)",
            self.mem.fa_bytes / 1024,
            self.mem.aux_bytes / 1024,
            self.mem.icm_bytes / 1024,
            self.mem.icm_virtual >> 20
        )?;
        write!(
            f,
            "mlx4: capacities: {} QPs, {} CQs, {} MRs, {} MTT entries",
            self.max_qps, self.max_cqs, self.max_mrs, self.max_mtts
        )
    }
}
