//! The in-band rendezvous's wire messages (docs/rendezvous.md): fixed 64-byte, big-endian
//! UD datagrams sent to a node's well-known rendezvous QP with the Q_Key [`QKEY`].
//!
//! This crate holds the message formats only: no device, no queue pair, no protocol state.
//! The bench runs the protocol over its verbs (`bench::rendezvous`); a Linux program on
//! rdma-core's verbs can speak it by depending on this crate alone. Each format follows
//! smoltcp's shape: a `field` module naming every byte range, a [`Packet`] view (accessors
//! over any byte buffer, checked for length once), and a representation with `parse` and
//! `emit` ([`Msg`] for the ping-pong's messages, [`srq::SrqMsg`] for the SRQ ping-pong's).
//! Parsing trusts nothing: every code is checked against its table, every count against its
//! bound, and a buffer of any content yields a message or a [`DecodeError`], never a panic.
//! What a run asks for (sizes, iterations, ...) is checked by the receiving node against
//! `ibconfig`'s rules, which answer with a [`Refusal`] that names the rule.
#![cfg_attr(not(test), no_std)]

mod message;
mod refusal;
pub mod srq;

pub use message::{
    field, BwFigures, Kind, Msg, Packet, PlanRun, Turnaround, FLAG_ANATOMY, FLAG_BW_BIDIRECTIONAL,
    FLAG_BW_GBITS, FLAG_BW_NO_PEAK, FLAG_COUNTED, FLAG_RESET, VERSION, VERSION_ANATOMY, VERSION_BW,
    VERSION_ONE_SIDED, VERSION_PLAN, VERSION_RDMA,
};
pub use refusal::Refusal;

/// "IBKR", the first four bytes of every message of every version.
pub const MAGIC: u32 = 0x4942_4B52;
/// Bytes of one message.
pub const MSG_LEN: usize = 64;
/// The rendezvous QP's Q_Key, "IBKR" (bit 31 clear: not a controlled Q_Key).
pub const QKEY: u32 = ibconfig::bench::RDV_QKEY;
/// Bytes of the GRH slot at the head of every UD receive: a receive buffer for one message
/// is `GRH + MSG_LEN` bytes.
pub const GRH: usize = 40;

/// The well-known rendezvous QPN of a node whose device reserves `reserved_qps` QP numbers.
pub use ibconfig::bench::well_known_rdv_qpn as well_known_qpn;

/// A byte range of a message.
pub type Field = core::ops::Range<usize>;

/// Why a datagram is not a message of a version this crate reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer than [`MSG_LEN`] bytes.
    Short,
    /// Not "IBKR".
    Magic,
    /// A version this format does not have.
    Version(u8),
    /// A field whose value is not one of its codes or is out of its bounds.
    Field(&'static str),
}

impl core::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DecodeError::Short => write!(f, "shorter than {MSG_LEN} bytes"),
            DecodeError::Magic => write!(f, "not a rendezvous message (magic)"),
            DecodeError::Version(v) => write!(f, "unknown version {v}"),
            DecodeError::Field(name) => write!(f, "bad field: {name}"),
        }
    }
}

/// Big-endian reads and writes of a field (the field's length is fixed by its range).
pub(crate) mod be {
    use super::Field;

    pub fn get16(b: &[u8], f: Field) -> u16 {
        let mut a = [0u8; 2];
        a.copy_from_slice(&b[f]);
        u16::from_be_bytes(a)
    }
    pub fn get32(b: &[u8], f: Field) -> u32 {
        let mut a = [0u8; 4];
        a.copy_from_slice(&b[f]);
        u32::from_be_bytes(a)
    }
    pub fn get64(b: &[u8], f: Field) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[f]);
        u64::from_be_bytes(a)
    }
    pub fn put16(b: &mut [u8], f: Field, v: u16) {
        b[f].copy_from_slice(&v.to_be_bytes());
    }
    pub fn put32(b: &mut [u8], f: Field, v: u32) {
        b[f].copy_from_slice(&v.to_be_bytes());
    }
    pub fn put64(b: &mut [u8], f: Field, v: u64) {
        b[f].copy_from_slice(&v.to_be_bytes());
    }
}

#[cfg(test)]
pub(crate) mod testing {
    /// A small deterministic generator (SplitMix64) for the randomised tests.
    pub struct Rng(pub u64);

    impl Rng {
        pub fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        pub fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
        pub fn bool(&mut self) -> bool {
            self.next() & 1 == 1
        }
        pub fn fill(&mut self, b: &mut [u8]) {
            for x in b {
                *x = self.next() as u8;
            }
        }
    }
}
