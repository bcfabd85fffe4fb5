//! ibkern kernel library: everything that is not the entry point.
#![cfg_attr(not(test), no_std)]
