//! perftest's bandwidth tests (`ib_send_bw`, `ib_write_bw`): the figures and table
//! ([`formula`]).

pub mod formula;

pub use formula::{perftest_bw, write_bw_header, write_bw_row, BwError, BwInput, BwReport, BwUnit};
