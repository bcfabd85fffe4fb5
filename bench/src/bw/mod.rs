//! perftest's bandwidth tests (`ib_send_bw`, `ib_write_bw`, `ib_read_bw`, `ib_atomic_bw`):
//! the figures and table ([`formula`]), the streaming sender/requester and SEND receiver
//! ([`stream`]), duration mode's phases ([`duration`]), the bidirectional SEND stream
//! ([`duplex`]) and the `-a` size list ([`sizes`]).

pub mod duplex;
pub mod duration;
pub mod formula;
pub mod sizes;
pub mod stream;

pub use duplex::BwDuplexSend;
pub use duration::{Phase, Phases};
pub use formula::{
    bidir_sum, perftest_bw, write_bw_header, write_bw_row, BwError, BwInput, BwReport, BwUnit,
};
pub use sizes::{bw_sizes, BwSizes};
pub use stream::{
    atomic_expected, atomic_slot, resolve_out_reads, BwDuration, BwParamError, BwParams,
    BwReceiver, BwSender, BwVerb, RecvSetup, RecvTally, StreamError, StreamState,
    ATOMIC_REMOTE_BYTES, ATOMIC_SIZE, ATOMIC_STRIDE, ATOMIC_WORDS, DEFAULT_BW_OUT_READS,
};
