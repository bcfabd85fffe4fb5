//! Functional model of the Mellanox ConnectX-3 HCA (PCI 15b3:1003) and an InfiniBand fabric.
//!
//! The model is test equipment: it implements the hardware contract of
//! `docs/hardware.md` (sections cited as "§n" throughout), checks everything that contract says
//! the device checks, never panics on driver input, and records every breach as a
//! [`Violation`]. Front ends: [`inproc`] (host tests) and `mpqemu` (QEMU guests).

pub mod be;
pub mod cmd;
pub mod conformance;
pub mod counters;
pub mod cq;
pub mod diag_profile;
pub mod eq;
pub mod fabric;
pub mod gsi;
pub mod hca;
pub mod hcr;
pub mod host;
pub mod icm;
pub mod inproc;
pub mod mad;
pub mod mpqemu;
pub mod mr;
pub mod packet;
pub mod pci;
pub mod pma;
pub mod port;
pub mod profile;
pub mod qp;
pub mod rc;
pub mod regs;
pub mod seg;
pub mod smp;
pub mod srq;
pub mod trace;
pub mod uar;
pub mod violation;
pub mod wqe;

pub use counters::{Counters, SqSwitch};
pub use fabric::{DropRule, Fabric, FabricConfig, Faults, HcaId, Topology};
pub use hcr::{CommandFault, CommandFaultAction, Status};
pub use host::{DmaFault, HostMemory, Interrupts};
pub use packet::{Packet, PacketOp};
pub use profile::DeviceProfile;
pub use violation::Violation;
