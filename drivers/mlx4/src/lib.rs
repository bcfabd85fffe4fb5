//! Native ConnectX-3 driver (filled by the driver issue).
#![cfg_attr(not(test), no_std)]
extern crate alloc;
