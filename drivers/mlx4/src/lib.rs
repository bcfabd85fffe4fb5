//! Native Mellanox ConnectX-3 (mlx4) driver: bring-up from reset by firmware commands, EQs,
//! CQs, QPs, MTT/MPT, UAR and BlueFlame doorbells, and the [`verbs::Device`] implementation.
//!
//! The driver is generic over a [`Platform`] (MMIO, DMA memory, clock, interrupts) and written
//! from the hardware contract in docs/hardware.md; section numbers in comments refer to it.
//! Module split follows Linux's mlx4: `cmd` (HCR), `fw` (firmware commands), `icm`, `eq`,
//! `cq`, `qp`, `mr`, `port`, `wqe`, and `hca` (bring-up order and teardown).
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod be;
pub mod cmd;
pub mod cq;
pub mod device;
pub mod eq;
pub mod error;
pub mod fw;
pub mod hca;
pub mod hw;
pub mod icm;
pub mod mad;
pub mod mr;
pub mod outbox;
pub mod path;
pub mod platform;
pub mod port;
pub mod qp;
pub mod regs;
pub mod report;
pub mod smp;
mod sq;
pub mod srq;
pub mod summary;
#[cfg(test)]
mod test_platform;
pub mod wq;
pub mod wqe;

pub use cmd::{CmdOutcome, CmdRecord};
pub use error::{CmdError, Error};
pub use hca::{Config, Hca, MemStats};
pub use platform::{Bar, DmaRegion, DmaRelease, IrqLine, MsiMessage, Platform};
pub use regs::{FwStatus, Opcode};
pub use report::CapsReport;
pub use summary::Summary;
