//! perftest's bandwidth tests (`ib_send_bw`, `ib_write_bw`): the figures and table
//! ([`formula`]) and the streaming sender and receiver ([`stream`]).

pub mod formula;
pub mod stream;

pub use formula::{perftest_bw, write_bw_header, write_bw_row, BwError, BwInput, BwReport, BwUnit};
pub use stream::{
    BwParamError, BwParams, BwReceiver, BwSender, BwVerb, RecvSetup, RecvTally, StreamError,
    StreamState,
};
