//! The message sizes of a bandwidth run: `-s N`, or `-a`, every power of two from 2 B to
//! 8 MiB (perftest's `2^1 .. 2^23`), up to the path MTU on UD. Atomics are always 8 bytes
//! (perftest's `ib_atomic_bw` runs its one size under `-a`).

use super::stream::{BwVerb, ATOMIC_SIZE};
use crate::config::{Transport, MAX_SWEEP_SIZE};

/// Iterator over a run's sizes, ascending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BwSizes {
    next: u32,
    last: u32,
    step_pow2: bool,
}

impl Iterator for BwSizes {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        if self.next == 0 || self.next > self.last {
            return None;
        }
        let n = self.next;
        self.next = if self.step_pow2 {
            n.checked_mul(2).unwrap_or(0)
        } else {
            0
        };
        Some(n)
    }
}

/// The sizes to run: `all` (`-a`) or the single `size`, for `verb` over `transport` with a
/// path MTU of `mtu` bytes.
pub fn bw_sizes(all: bool, size: u32, verb: &BwVerb, transport: Transport, mtu: u32) -> BwSizes {
    if matches!(verb, BwVerb::Atomic { .. }) {
        return BwSizes {
            next: ATOMIC_SIZE,
            last: ATOMIC_SIZE,
            step_pow2: false,
        };
    }
    if !all {
        return BwSizes {
            next: size,
            last: size,
            step_pow2: false,
        };
    }
    let last = match transport {
        Transport::Ud => mtu.min(MAX_SWEEP_SIZE),
        Transport::Uc | Transport::Rc => MAX_SWEEP_SIZE,
    };
    BwSizes {
        next: 2,
        last,
        step_pow2: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn all_sizes_are_perftests() {
        let rc: Vec<u32> = bw_sizes(true, 0, &BwVerb::Send, Transport::Rc, 2048).collect();
        assert_eq!(rc.len(), 23);
        assert_eq!((rc[0], rc[22]), (2, 8 << 20));
        assert!(rc.windows(2).all(|w| w[1] == 2 * w[0]));
        let read = BwVerb::Read {
            remote_addr: 0,
            rkey: 0,
        };
        assert_eq!(bw_sizes(true, 0, &read, Transport::Rc, 2048).count(), 23);
        let ud: Vec<u32> = bw_sizes(true, 0, &BwVerb::Send, Transport::Ud, 2048).collect();
        assert_eq!(ud, [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]);
    }

    #[test]
    fn single_size_and_atomics() {
        assert_eq!(
            bw_sizes(false, 4096, &BwVerb::Send, Transport::Uc, 2048).collect::<Vec<_>>(),
            [4096]
        );
        let at = BwVerb::Atomic {
            op: crate::config::AtomicOp::FetchAndAdd,
            remote_addr: 0,
            rkey: 0,
        };
        assert_eq!(
            bw_sizes(true, 0, &at, Transport::Rc, 2048).collect::<Vec<_>>(),
            [8]
        );
    }
}
