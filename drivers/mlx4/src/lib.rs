//! Native Mellanox ConnectX-3 (mlx4) driver: bring-up from reset by firmware commands, EQs,
//! CQs, QPs, MTT/MPT, UAR and BlueFlame doorbells, and the [`verbs::Device`] implementation.
//!
//! The driver is generic over a [`Platform`] (MMIO, DMA memory, clock, interrupts) and written
//! from the hardware contract in docs/hardware.md; section numbers in comments refer to it.
//! Module split follows Linux's mlx4: `cmd` (HCR), `fw` (firmware commands), `icm`, `eq`,
//! `cq`, `qp`, `mr`, `port`, `wqe`, and `hca` (bring-up order and teardown).
#![cfg_attr(not(test), no_std)]

extern crate alloc;

mod be;
mod cmd;
mod cq;
mod device;
mod eq;
mod error;
mod fw;
mod hca;
mod headers;
mod hw;
mod icm;
#[cfg(test)]
mod layouts;
pub mod mad;
mod mr;
mod outbox;
mod path;
mod platform;
mod port;
mod qp;
mod regs;
mod report;
mod smp;
mod sq;
mod srq;
mod summary;
#[cfg(test)]
mod test_platform;
mod wq;
mod wqe;

pub use cmd::{CmdOutcome, CmdRecord};
pub use cq::CqHandle;
pub use device::{MrHandle, PdHandle};
pub use error::{CmdError, Error};
pub use hca::{Config, Hca, IrqMode, MemStats};
pub use path::DataPath;
pub use platform::{Bar, DmaRegion, DmaRelease, IrqLine, MsiMessage, Platform};
pub use port::PortCounters;
pub use qp::{Ah, QpHandle};
pub use regs::{FwStatus, Opcode};
pub use report::CapsReport;
pub use smp::{SmConfig, SmReport, Smp, SmpAgent};
pub use srq::SrqHandle;
pub use summary::Summary;

/// What the device reported at bring-up and what the driver chose from it: the decoded
/// query outputs, the capability flags by name, the ICM profile. Read through
/// [`Hca::fw_info`], [`Hca::caps`], [`Hca::adapter`], [`Hca::choices`] and [`Hca::profile`]
/// (the kernel's `mode=diag`, tests).
pub mod caps {
    pub use crate::fw::{
        flag, flag2, AdapterInfo, CatasBuffer, DevCaps, FuncInfo, FwInfo, RawQueries,
    };
    pub use crate::hca::{Choices, Steering};
    pub use crate::icm::{Profile, Table, TableLayout};
    pub use crate::port::QueryPort;
}
