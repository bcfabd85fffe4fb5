//! A work queue (the send or the receive queue of a QP, docs/hardware.md §5.3, §5.6): where
//! its slots lie in the QP buffer, producer and consumer counters, the work-request ids, and
//! retirement when a completion arrives. Both the posting side (`qp`, `path`) and the polling
//! side (`cq`, `path`) use it, so neither has to know the other.

use alloc::vec::Vec;

/// Work queue bookkeeping. `head` and `tail` are free-running counters; the slot of WQE
/// number `ind` is `ind & mask`.
pub(crate) struct Wq {
    /// Byte offset of the queue in the QP buffer.
    pub off: usize,
    pub log_cnt: u32,
    pub mask: u32,
    pub wqe_shift: u32,
    /// Next WQE number to post.
    pub head: u32,
    /// Oldest WQE number not yet completed.
    pub tail: u32,
    /// Work requests that may be outstanding.
    pub max_post: u32,
    /// Scatter/gather entries per WQE.
    pub max_gs: u32,
    /// Work-request id per slot.
    pub wrid: Vec<u64>,
    /// Send queues: every WQE from this number on was short (`sq::short_ds`), so the slots
    /// they leave are stamped without reading their size (§5.4).
    pub short_from: u32,
}

impl Wq {
    /// An empty queue of `1 << log_cnt` slots of `1 << wqe_shift` bytes at byte `off` of the
    /// QP buffer.
    pub fn new(off: usize, log_cnt: u32, wqe_shift: u32, max_post: u32, max_gs: u32) -> Wq {
        Wq {
            off,
            log_cnt,
            mask: (1 << log_cnt) - 1,
            wqe_shift,
            head: 0,
            tail: 0,
            max_post,
            max_gs,
            wrid: alloc::vec![0; 1 << log_cnt],
            short_from: 0,
        }
    }

    /// Byte offset in the QP buffer of the slot of WQE number `ind`.
    #[inline(always)]
    pub fn slot_offset(&self, ind: u32) -> usize {
        self.off + (((ind & self.mask) as usize) << self.wqe_shift)
    }

    /// Whether `max_post` work requests are outstanding.
    #[inline(always)]
    pub fn full(&self) -> bool {
        self.head.wrapping_sub(self.tail) >= self.max_post
    }

    /// Record `wr_id` for the WQE in slot `slot` (< the queue's size).
    #[inline(always)]
    pub fn set_wrid(&mut self, slot: usize, wr_id: u64) {
        // wrid has exactly one entry per slot, so this never misses.
        if let Some(id) = self.wrid.get_mut(slot) {
            *id = wr_id;
        }
    }

    /// Back to empty (the QP went to RESET).
    pub fn reset(&mut self) {
        self.head = 0;
        self.tail = 0;
        self.short_from = 0;
    }

    /// Retire the send WQE `wqe_index` (a CQE's 16-bit WQE counter) and return its
    /// work-request id (§5.2 unsignaled sends): the tail moves past it, so the unsignaled WQEs
    /// before it are retired too.
    #[inline(always)]
    pub fn retire_send(&mut self, wqe_index: u32) -> u64 {
        let d = wqe_index.wrapping_sub(self.tail) & 0xFFFF;
        self.tail = self.tail.wrapping_add(d + 1);
        self.wrid
            .get((wqe_index & self.mask) as usize)
            .copied()
            .unwrap_or(0)
    }

    /// Retire the oldest receive WQE and return its work-request id: receive WQEs complete
    /// in order (§5.6).
    #[inline(always)]
    pub fn retire_recv(&mut self) -> u64 {
        let t = self.tail;
        self.tail = t.wrapping_add(1);
        self.wrid
            .get((t & self.mask) as usize)
            .copied()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_retirement_covers_unsignaled_wqes_and_wraps() {
        let mut sq = Wq::new(0, 2, 6, 3, 1);
        for (i, id) in sq.wrid.iter_mut().enumerate() {
            *id = 100 + i as u64;
        }
        sq.head = 3;
        // A CQE for WQE 2 retires 0, 1 and 2.
        assert_eq!(sq.retire_send(2), 102);
        assert_eq!(sq.tail, 3);
        assert!(!sq.full());
        // The 16-bit WQE counter wraps: tail 0xFFFF, CQE for 0x0001 (counter 0x10001).
        sq.tail = 0xFFFF;
        assert_eq!(sq.retire_send(1), 101);
        assert_eq!(sq.tail, 0x1_0002);
    }

    #[test]
    fn receive_retirement_is_in_order() {
        let mut rq = Wq::new(0, 1, 4, 2, 1);
        rq.wrid = alloc::vec![7, 8];
        rq.head = 2;
        assert!(rq.full());
        assert_eq!(rq.retire_recv(), 7);
        assert_eq!(rq.retire_recv(), 8);
        assert_eq!(rq.retire_recv(), 7, "slot of WQE 2 is slot 0");
        assert_eq!(rq.slot_offset(3), 16);
    }
}
