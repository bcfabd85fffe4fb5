//! `ib_atomic_lat`'s work request and check: one 8-byte FETCH_AND_ADD or CMP_AND_SWAP on
//! a word of the server's receive region, the old value landing in the client's. The loop
//! is read_lat's ([`PingPong::measure_one_sided`]).
//!
//! The operands make every result checkable: the server's word starts each size at 0;
//! iteration `i` adds 1, or compares with `i` and swaps in `i + 1`, so the value fetched by
//! iteration `i` is `i` either way and every compare-and-swap succeeds. The word is in the
//! responder's memory as the HCA keeps it (big-endian, the wire's order).

use super::*;

impl<D: Device> PingPong<D> {
    /// The big-endian word an atomic of iteration `seq` fetches.
    pub(super) fn atomic_expected(seq: u32) -> [u8; 8] {
        u64::from(seq).to_be_bytes()
    }

    /// Posts iteration `seq`'s atomic.
    pub(super) fn post_atomic(&mut self, dev: &mut D) -> Result<(), BenchError> {
        let (Some(qp), Some(peer)) = (self.res.qp, self.peer) else {
            return Err(BenchError::NoMemory("data QP"));
        };
        let sge = [Sge {
            addr: self.bus() + self.lay.recv as u64,
            length: ATOMIC_SIZE,
            lkey: self.lkey,
        }];
        let seq = u64::from(self.seq);
        let opcode = match self.cfg.atomic {
            AtomicOp::FetchAndAdd => WrOpcode::AtomicFetchAndAdd {
                remote_addr: peer.addr,
                rkey: peer.rkey,
                add: 1,
            },
            AtomicOp::CmpAndSwap => WrOpcode::AtomicCmpAndSwp {
                remote_addr: peer.addr,
                rkey: peer.rkey,
                compare: seq,
                swap: seq + 1,
            },
        };
        let wr = SendWr {
            wr_id: 4,
            opcode,
            payload: Payload::Sges(&sge),
            flags: SendFlags::SIGNALED,
            ud: None,
        };
        dev.post_send(qp, &wr).map_err(vb("post atomic"))
    }

    /// With `verify`: the value the atomic just completed fetched is its iteration number.
    pub(super) fn check_atomic(&self) -> Result<(), BenchError> {
        if !self.cfg.verify {
            return Ok(());
        }
        let want = Self::atomic_expected(self.seq);
        for (i, &b) in want.iter().enumerate() {
            if self.read_byte(self.lay.recv + i) != b {
                return Err(BenchError::AtomicResult {
                    iteration: self.seq,
                });
            }
        }
        Ok(())
    }

    /// Server, before each size's barrier: the word the client's atomics act on, zeroed.
    pub(super) fn reset_atomic_word(&mut self) {
        for i in 0..ATOMIC_SIZE as usize {
            self.write_byte(self.lay.recv + i, 0);
        }
    }
}
