//! The in-kernel verbs API that benchmarks link against (filled by the driver issue).
#![cfg_attr(not(test), no_std)]
