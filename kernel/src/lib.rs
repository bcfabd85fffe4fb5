//! ibkern kernel library: everything that is not the entry point.
//!
//! The pure logic (page-table construction, frame allocation, configuration, ACPI
//! parsing, PCI decoding, MSI-X encoding, TSC math) is unit-tested on the host; the
//! rest drives the hardware and is exercised by `mode=selftest` on the machine.
#![cfg_attr(not(test), no_std)]
#![feature(abi_x86_interrupt)]

extern crate alloc;

pub mod acpi;
pub mod arch;
pub mod config;
pub mod console;
pub mod exit;
pub mod fault;
pub mod hca;
pub mod mm;
pub mod pci;
pub mod selftest;
pub mod system;

pub use arch::tsc::{delay_us, now_ns};
