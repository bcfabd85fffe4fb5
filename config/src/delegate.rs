//! The delegation keys (docs/delegation.md): where the node's Linux delegate is, and what
//! the delegation benchmark (`mode=delegate`) measures beyond the ping-pong keys it shares
//! (`iters`, `completion`, `modes`, `ib_port`).
//!
//! - `delegate=LID:QPN` (or `probe:QPN`): the delegate's LID (or probe `probe_lids` for it)
//!   and its rendezvous QPN, which it prints when it starts. With it, a node in
//!   `mode=pingpong` or `mode=delegate` fetches its plan from the delegate and writes its
//!   results there.
//! - `delegate_max=SIZE`: the largest size of the benchmark's pread, pwrite, READ and WRITE
//!   sweep (64 B up to it, powers of two; 64..=1 MiB, default 1 MiB).
//! - `delegate_outstanding=N`: the most null calls the rate test keeps outstanding (1, 2,
//!   4, ... up to N; 1..=64, default 64).
//! - `delegate_baseline=QPN`: the rendezvous QPN of an RC `ib_send_lat` server at the
//!   delegate's LID, whose round trip the benchmark measures beside the null call's.

use crate::bench::{MAX_UNICAST_LID, QPN_RANGE};
use crate::{parse_u32, parse_u64, Bounds, ValueError};

/// Where the delegate is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DelegateAt {
    /// Its LID; `None`: probe `probe_lids`.
    pub lid: Option<u16>,
    /// Its rendezvous QPN.
    pub qpn: u32,
}

/// Bounds of `delegate_max`.
pub const MAX_SIZE: Bounds = Bounds::new("bytes", 64, 1 << 20);
/// Bounds of `delegate_outstanding`.
pub const OUTSTANDING: Bounds = Bounds::new("calls outstanding", 1, 64);

/// The delegation keys' values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DelegateKeys {
    pub at: Option<DelegateAt>,
    pub max_size: u32,
    pub outstanding: u16,
    pub baseline_qpn: Option<u32>,
}

impl Default for DelegateKeys {
    fn default() -> Self {
        DelegateKeys {
            at: None,
            max_size: MAX_SIZE.hi as u32,
            outstanding: OUTSTANDING.hi as u16,
            baseline_qpn: None,
        }
    }
}

fn qpn(v: &str) -> Option<u32> {
    parse_u32(v).filter(|q| (QPN_RANGE.0..=QPN_RANGE.1).contains(q))
}

/// `LID:QPN` or `probe:QPN`.
pub fn parse_at(v: &str) -> Result<DelegateAt, ValueError> {
    const BAD: ValueError =
        ValueError::Expected("LID:QPN or probe:QPN (LID 1..=0xBFFF, QPN 2..=0xFFFFFF)");
    let (lid, q) = v.split_once(':').ok_or(BAD)?;
    let lid = match lid.trim() {
        "probe" => None,
        l => Some(
            parse_u64(l)
                .filter(|n| (1..=u64::from(MAX_UNICAST_LID)).contains(n))
                .ok_or(BAD)? as u16,
        ),
    };
    Ok(DelegateAt {
        lid,
        qpn: qpn(q.trim()).ok_or(BAD)?,
    })
}

pub fn parse_max_size(v: &str) -> Result<u32, ValueError> {
    MAX_SIZE.parse(v).map(|n| n as u32)
}

pub fn parse_outstanding(v: &str) -> Result<u16, ValueError> {
    OUTSTANDING.parse(v).map(|n| n as u16)
}

pub fn parse_baseline(v: &str) -> Result<u32, ValueError> {
    qpn(v).ok_or(ValueError::Expected("a QPN in 2..=0xFFFFFF"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delegates_address_parses_with_a_lid_or_probing() {
        assert_eq!(
            parse_at("2:0x208"),
            Ok(DelegateAt {
                lid: Some(2),
                qpn: 0x208
            })
        );
        assert_eq!(
            parse_at("0x10 : 520"),
            Ok(DelegateAt {
                lid: Some(16),
                qpn: 520
            })
        );
        assert_eq!(
            parse_at("probe:0x208"),
            Ok(DelegateAt {
                lid: None,
                qpn: 0x208
            })
        );
        for bad in [
            "",
            "2",
            "0:0x208",
            "0xC000:0x208",
            "2:1",
            "2:0x1000000",
            "x:5",
            "2:",
        ] {
            assert!(parse_at(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes_and_counts_are_bounded() {
        assert_eq!(parse_max_size("64"), Ok(64));
        assert_eq!(parse_max_size("1048576"), Ok(1 << 20));
        assert!(parse_max_size("63").is_err());
        assert!(parse_max_size("1048577").is_err());
        assert_eq!(parse_outstanding("64"), Ok(64));
        assert!(parse_outstanding("0").is_err());
        assert!(parse_outstanding("65").is_err());
        assert_eq!(parse_baseline("0x209"), Ok(0x209));
        assert!(parse_baseline("1").is_err());
    }
}
