//! The QEMU front end: an mpqemu remote server that makes the model's ConnectX-3 appear to QEMU
//! guests as PCI function 15b3:1003 behind `-device x-pci-proxy-dev,fd=N`.
//!
//! Layers, bottom up:
//! - [`wire`]: the message format (header, SCM_RIGHTS descriptors, payloads, RET).
//! - [`guest_mem`]: guest RAM from SYNC_SYSMEM, mapped from QEMU's memfds; the model's
//!   `HostMemory`.
//! - [`irq`]: the model's `Interrupts`: INTx and MSI through qtest (TCG) or irqfd (KVM).
//! - [`conn`]: the per-guest request loop over any [`ProxiedFunction`], with the 64-bit BAR
//!   probe workaround.
//! - [`server`]: several guests on one [`crate::fabric::Fabric`]: spawning QEMU, a thread per
//!   guest, a timer that runs the fabric's timed work.
//!
//! `docs/mpqemu.md` describes the protocol, the interrupt paths and the limits.

pub mod conn;
pub mod guest_mem;
pub mod irq;
pub mod launch;
mod qmp;
pub mod server;
pub mod wire;

pub use conn::{Connection, ConnectionEnd, FrontendCounters, ProxiedFunction};
pub use guest_mem::{GuestMemory, MapError, OutsideGuestRam};
pub use irq::{irq_path, IrqControl, IrqLine, IrqStats, IrqTransport, QtestConfig};
pub use launch::{SocketDir, FD_PLACEHOLDER};
pub use qmp::IntxRoute;
pub use server::{
    AttachedGuest, GuestHandle, GuestIrq, GuestSpec, GuestStatus, Server, ServerOptions,
};
pub use wire::{ProtocolError, SysmemRegion};
