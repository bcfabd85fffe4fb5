//! The send queue's commit (docs/hardware.md §5.3–§5.5), the one every send entry point
//! uses: per-call `post_send` and `post_send_list` (`qp`), the data path (`path`) and QP0's
//! MLX sends (`smp`). Each of them writes only its choice of segments, through
//! [`SendWqe`]; an [`SqCursor`] does the rest, as rdma-core's `mlx4_post_send` does in its
//! one epilogue:
//!
//! 1. [`SqCursor::next`] hands out the slot at the head, if the queue has room, after
//!    stamping the slot `spare` ahead of it;
//! 2. [`SqCursor::publish`] records the work-request id and writes the owner dword last,
//!    behind a write barrier — the opcode, the owner bit of the head's pass and, for
//!    BlueFlame, the WQE counter — and moves the head on;
//! 3. once per post, [`SqCursor::ring_blueflame`] (a post of one WQE with inline data that
//!    fits half a BlueFlame register, [`blueflame_fits`]) or [`SqCursor::ring_doorbell`]
//!    tells the device, and the head is stored back into the queue's [`Wq`].
//!
//! Stamping (§5.4) has one rule, Linux's and rdma-core's: for each WQE `i` posted, the slot
//! `i + spare` gets 0xFFFFFFFF in the first dword of every 64-byte chunk its old WQE used
//! except the first (the old WQE's size is its ctrl DS). The cursor does it when it hands out
//! slot `i`, before the device can be told of WQE `i` (rdma-core stamps the same slot after
//! publishing `i`, the last of a post after ringing; the slot is outside the device's
//! prefetch window until the device has taken WQE `i`, so any of these moments will do, and
//! the earliest leaves the registers free for the WQE). The `spare` slots of headroom
//! ([`spare_wqes`]) are never posted into, so the slots the device may prefetch past the
//! head are always stamped, and their first chunks owned by software. The old WQE's size is
//! read from its ctrl segment, except where the queue knows it: the latency paths write only
//! short WQEs ([`short_ds`]), and [`Wq::short_from`] says from which WQE on every WQE was
//! short, so a slot those left needs chunk 1 stamped (UD) or nothing (RC/UC) without a read.

use crate::hw::ctrl;
use crate::platform::{Bar, Platform};
use crate::wq::Wq;
use crate::wqe::{owner_bit, Bf, SendWqe, WQEBB};

/// Slots of headroom a send queue of `1 << wqe_shift`-byte slots keeps free (§5.3): 2 KiB
/// the device may prefetch, plus one WQE.
pub const fn spare_wqes(wqe_shift: u32) -> u32 {
    (2048 >> wqe_shift) + 1
}

/// Whether a post of one WQE of `ds` 16-byte units goes to the device through BlueFlame
/// (§5.5, rdma-core's condition): the QP has a register, the WQE carries inline data (or is
/// an RDMA READ or a WRITE without gather entries: `inl`), is more than a ctrl segment, and
/// fits half the register.
#[inline(always)]
pub(crate) fn blueflame_fits(bf: Option<&Bf>, inl: bool, ds: u32) -> bool {
    match bf {
        Some(bf) => inl && ds > 1 && ((ds as usize) << 4) <= bf.buf_size,
        None => false,
    }
}

/// Stamp a slot (§5.4): 0xFFFFFFFF in the first dword of every 64-byte chunk but the first,
/// within the `ds` 16-byte units the slot's last WQE used (and within the slot). Chunk 1 by
/// itself (the latency paths' WQEs end there), the rest out of line. The one stamping
/// routine: initialisation and stamping ahead of the head both come here.
///
/// # Safety
/// `slot` is 64-byte aligned and valid for writes of `slot_size` bytes.
#[inline(always)]
unsafe fn stamp_slot(slot: *mut u8, ds: usize, slot_size: usize) {
    let end = (ds << 4).min(slot_size);
    // Volatile: a handful of scattered stores; keeps the compiler from vectorising.
    if end > WQEBB {
        // SAFETY: chunk 1 lies below `end`, inside the slot (caller).
        unsafe { core::ptr::write_volatile(slot.add(WQEBB) as *mut u32, u32::MAX) };
        if end > 2 * WQEBB {
            // SAFETY: `end` is inside the slot (caller).
            unsafe { stamp_rest(slot, end) };
        }
    }
}

/// Stamp chunks 2.. of the slot at `p` below byte `end` (≤ the slot size).
///
/// # Safety
/// `p` is a 64-byte aligned slot valid for `end` bytes.
#[inline(never)]
unsafe fn stamp_rest(p: *mut u8, end: usize) {
    let mut i = 2 * WQEBB;
    while i < end {
        // SAFETY: i < end (caller).
        unsafe { core::ptr::write_volatile(p.add(i) as *mut u32, u32::MAX) };
        i += WQEBB;
    }
}

/// The DS (16-byte units) of the WQE whose ctrl segment starts at `slot`: the low 6 bits of
/// ctrl dword 1, i.e. of its big-endian byte 7.
///
/// # Safety
/// `slot` is readable for 8 bytes.
#[inline(always)]
unsafe fn old_ds(slot: *const u8) -> usize {
    // SAFETY: byte 7 (caller).
    (unsafe { slot.add(7).read() } & ctrl::DS_MASK as u8) as usize
}

/// The largest DS (16-byte units) of a short WQE, the latency paths' shape: two 64-byte
/// chunks on a UD QP (ctrl, datagram, one inline or data segment), one otherwise.
pub(crate) const fn short_ds(ud: bool) -> u32 {
    if ud {
        8
    } else {
        4
    }
}

/// Initialise the `1 << log_cnt` slots of `1 << wqe_shift` bytes at `base` as §5.4 wants
/// them before RST→INIT: owner bit 1 (not valid in pass 0), the slot's size as the ctrl
/// DS, every chunk after the first stamped.
///
/// # Safety
/// `base` is 64-byte aligned and valid for writes of `1 << (log_cnt + wqe_shift)` bytes;
/// `wqe_shift ≥ 6`.
pub(crate) unsafe fn init_slots(base: *mut u8, log_cnt: u32, wqe_shift: u32) {
    let stride = 1usize << wqe_shift;
    for i in 0..1usize << log_cnt {
        // SAFETY: slot i lies inside the queue (caller); 64-byte aligned, `stride` bytes.
        unsafe {
            let s = base.add(i << wqe_shift);
            core::ptr::write_bytes(s, 0, stride);
            (s as *mut u32).write(ctrl::OWNER.to_be());
            (s.add(4) as *mut u32).write(((stride / 16) as u32).to_be());
            stamp_slot(s, stride / 16, stride);
        }
    }
}

/// The send queue as one post sees it: its layout, the head and the room left, in locals
/// (the WQE stores go through raw pointers, after which the compiler would reload every
/// field of a QP; a cursor's fields stay in registers). Made at the start of a post from the
/// queue's [`Wq`]; [`Self::ring_doorbell`] or [`Self::ring_blueflame`] ends the post and
/// stores the head back.
#[must_use = "a post ends by ringing: the head is stored back there"]
pub(crate) struct SqCursor {
    /// The queue's first slot.
    base: *mut u8,
    mask: u32,
    shift: u32,
    spare: u32,
    /// The next WQE number.
    head: u32,
    /// The head when the post began: WQEs from here on are this post's.
    start: u32,
    /// The head may not reach this: the oldest outstanding WQE + the outstanding allowed.
    limit: u32,
    /// Slots minus `spare`: the slot `spare` ahead of WQE `i` last held WQE `i - reuse`.
    reuse: u32,
    /// Every WQE from this number on is short ([`Wq::short_from`]).
    short_from: u32,
}

impl SqCursor {
    /// A cursor over the send queue `sq` whose first slot is at `base`, with `spare` slots of
    /// headroom (`sq.max_post` = slots − `spare`), allowing `max_outstanding` (at most
    /// `sq.max_post`) work requests outstanding.
    ///
    /// # Safety
    /// `base` is the queue `sq` describes: `1 << sq.log_cnt` slots of `1 << sq.wqe_shift ≥
    /// 64` bytes, 64-byte aligned, valid for writes while the cursor is used; the slots
    /// between the tail and the head + `spare` are not the device's.
    #[inline(always)]
    pub unsafe fn new(base: *mut u8, sq: &Wq, spare: u32, max_outstanding: u32) -> SqCursor {
        SqCursor {
            base,
            mask: sq.mask,
            shift: sq.wqe_shift,
            spare,
            head: sq.head,
            start: sq.head,
            limit: sq.tail.wrapping_add(max_outstanding),
            reuse: sq.max_post,
            short_from: sq.short_from,
        }
    }

    /// WQEs published since the post began.
    #[inline(always)]
    pub fn posted(&self) -> u32 {
        self.head.wrapping_sub(self.start)
    }

    /// Whether another WQE may be published.
    #[inline(always)]
    pub fn has_room(&self) -> bool {
        self.head != self.limit
    }

    /// The slot of WQE number `ind`.
    #[inline(always)]
    fn slot(&self, ind: u32) -> *mut u8 {
        self.base
            .wrapping_add(((ind & self.mask) as usize) << self.shift)
    }

    /// Stamp the slot `spare` ahead of WQE `ind` (§5.4): the chunks after the first that
    /// its old WQE used. Only for slots larger than 64 bytes: a 64-byte slot has no chunk
    /// after the first.
    #[inline(always)]
    fn stamp_ahead(&self, ind: u32) {
        debug_assert!(self.shift > 6);
        let s = self.slot(ind.wrapping_add(self.spare));
        // SAFETY: a slot of the queue (`new`), 64-byte aligned, larger than 64 bytes
        // (caller); its ctrl segment says how many of its chunks the old WQE used.
        unsafe { stamp_slot(s, old_ds(s), 1 << self.shift) };
    }

    /// The slot at the head for the next WQE, or `None` if the queue has no room; the slot
    /// `spare` ahead of it is stamped first, by the size its ctrl segment gives. A WQE of
    /// more than the queue's short size ([`short_ds`]) must be noted with
    /// [`Self::note_long`].
    #[inline(always)]
    pub fn next(&mut self) -> Option<SendWqe> {
        if !self.has_room() {
            return None;
        }
        // (A 64-byte slot has no chunk to stamp.)
        if self.shift > 6 {
            self.stamp_ahead(self.head);
        }
        // SAFETY: a slot of the queue (`new`), 64-byte aligned, at least 64 bytes; with room
        // left it is software's (the WQE that used it last has completed).
        Some(unsafe { SendWqe::new(self.slot(self.head)) })
    }

    /// Note that the WQE [`Self::next`] handed out is larger than the queue's short WQEs:
    /// until it has been stamped over, the latency paths leave the stamping to
    /// [`Self::next`].
    #[inline(always)]
    pub fn note_long(&mut self, sq: &mut Wq) {
        self.short_from = self.head.wrapping_add(1);
        sq.short_from = self.short_from;
    }

    /// [`Self::next`] for the latency paths, whose WQEs are short: one 64-byte chunk, or two
    /// with `TWO_CHUNKS` (UD), as [`short_ds`] says. When the slot ahead of the head last held
    /// a short WQE, the slot is stamped without reading its size (chunk 1 with `TWO_CHUNKS`,
    /// nothing otherwise); when it may hold something else, or the queue has no room, the
    /// result is `None`, with nothing written, and the caller hands the request to the
    /// generic writer. Nothing here calls out of line (a call makes the whole inlined path
    /// save registers).
    ///
    /// # Safety
    /// A short WQE fits one slot of the queue.
    #[inline(always)]
    pub unsafe fn next_short<const TWO_CHUNKS: bool>(&mut self) -> Option<SendWqe> {
        if !self.has_room() || self.head.wrapping_sub(self.short_from) < self.reuse {
            return None;
        }
        if TWO_CHUNKS {
            let s = self.slot(self.head.wrapping_add(self.spare));
            // SAFETY: the slot holds two chunks (caller); 4-aligned.
            unsafe { core::ptr::write_volatile(s.add(WQEBB) as *mut u32, u32::MAX) };
        }
        // SAFETY: as in `next`.
        Some(unsafe { SendWqe::new(self.slot(self.head)) })
    }

    /// Publish the WQE written through `w` (the one [`Self::next`] gave): `wr_id` recorded in
    /// `sq`, then, behind a write barrier, the owner dword: `opcode`, the owner bit of the
    /// head's pass, and with `blueflame` the WQE counter (bits 23:8, §5.5). The head moves
    /// on; the device is told by the post's ring.
    #[inline(always)]
    pub fn publish<P: Platform>(
        &mut self,
        p: &P,
        sq: &mut Wq,
        w: &mut SendWqe,
        wr_id: u64,
        opcode: u32,
        blueflame: bool,
    ) {
        let ind = self.head;
        sq.set_wrid((ind & self.mask) as usize, wr_id);
        let counter = if blueflame { (ind & 0xFFFF) << 8 } else { 0 };
        // (The queue's size read here rather than kept by the cursor: one register fewer
        // over the WQE's stores.)
        w.publish(p, opcode | owner_bit(ind, sq.log_cnt) | counter);
        self.head = ind.wrapping_add(1);
    }

    /// End the post with the send doorbell of the QP's UAR page, `db_offset`, written
    /// `BE(qpn << 8)` after a write barrier (§5.3), if anything was published; store the
    /// head in `sq`.
    #[inline(always)]
    pub fn ring_doorbell<P: Platform>(self, p: &P, sq: &mut Wq, db_offset: usize, qpn_be: u32) {
        if self.head != self.start {
            p.wmb();
            p.mmio_write32(Bar::Uar, db_offset, qpn_be);
        }
        sq.head = self.head;
    }

    /// End a post of the one WQE `w` (published with `blueflame`) by copying its first
    /// `words` 64-bit words to the QP's BlueFlame register half `bf`, behind a write barrier,
    /// and switching halves (§5.5); store the head in `sq`.
    ///
    /// # Safety
    /// `words * 8` bytes, whole 64-byte chunks covering the WQE, lie inside its slot.
    #[inline(always)]
    pub unsafe fn ring_blueflame<P: Platform>(
        self,
        p: &P,
        sq: &mut Wq,
        w: &SendWqe,
        bf: &mut Bf,
        words: usize,
    ) {
        // SAFETY: caller.
        unsafe { w.blueflame(p, bf, words) };
        sq.head = self.head;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_platform::Recorder;

    /// A BlueFlame register with halves of 256 bytes.
    fn bf() -> Bf {
        Bf {
            index: 0,
            reg: 0x800,
            half: 0,
            buf_size: 256,
        }
    }

    #[repr(C, align(64))]
    struct Queue([u8; 8 * 256]);

    /// A queue of 8 slots of 256 bytes (`shift` 8) with `spare` 2, initialised.
    fn queue() -> (Box<Queue>, Wq) {
        let mut q = Box::new(Queue([0; 8 * 256]));
        // SAFETY: 8 slots of 256 bytes, 64-byte aligned.
        unsafe { init_slots(q.0.as_mut_ptr(), 3, 8) };
        (q, Wq::new(0, 3, 8, 6, 1))
    }

    fn dword(q: &Queue, off: usize) -> u32 {
        u32::from_be_bytes(q.0[off..off + 4].try_into().unwrap())
    }

    #[test]
    fn stamping_skips_the_first_chunk_and_stays_in_the_slot() {
        #[repr(align(64))]
        struct Slot([u8; 256]);
        let mut s = Slot([0u8; 256]);
        // SAFETY: a 64-byte aligned 256-byte slot.
        unsafe { stamp_slot(s.0.as_mut_ptr(), 16, 256) }; // 256 bytes used
        let s = s.0;
        assert_eq!(&s[0..4], &[0; 4]);
        for c in 1..4 {
            assert_eq!(&s[c * 64..c * 64 + 4], &[0xFF; 4]);
            assert_eq!(s[c * 64 + 4], 0);
        }
        let mut s = Slot([0u8; 256]);
        // SAFETY: as above; 5 units end in chunk 1.
        unsafe { stamp_slot(s.0.as_mut_ptr(), 5, 256) };
        assert_eq!(&s.0[64..68], &[0xFF; 4]);
        assert!(s.0[128..].iter().all(|&b| b == 0), "only the chunks used");
        for (ds, size) in [(4, 64), (16, 64), (63, 128)] {
            let mut s = Slot([0u8; 256]);
            // SAFETY: as above; the first `size` bytes are the slot.
            unsafe { stamp_slot(s.0.as_mut_ptr(), ds, size) };
            let stamped = s.0.iter().filter(|&&b| b == 0xFF).count();
            assert_eq!(
                stamped,
                if size > 64 { 4 } else { 0 },
                "ds {ds} in {size} bytes"
            );
            assert!(s.0[size..].iter().all(|&b| b == 0), "nothing past the slot");
        }
    }

    #[test]
    fn initial_slots_are_software_owned_and_stamped() {
        let (q, _) = queue();
        for s in 0..8 {
            assert_eq!(
                dword(&q, s * 256),
                1 << 31,
                "slot {s}: owner bit 1 in pass 0"
            );
            assert_eq!(dword(&q, s * 256 + 4), 16, "slot {s}: DS of the whole slot");
            for c in 1..4 {
                assert_eq!(dword(&q, s * 256 + c * 64), u32::MAX, "slot {s} chunk {c}");
            }
        }
    }

    /// Write a WQE of `ds` units through `w` for WQE number `ind`: something that is no
    /// stamp in the first dword of every chunk it uses, and its size in the ctrl segment.
    fn fill(base: *mut u8, w: &mut SendWqe, ind: u32, ds: u32) {
        let slot = ((ind & 7) as usize) * 256;
        for chunk in 0..(ds as usize * 16).div_ceil(64) {
            // SAFETY: inside the 256-byte slot.
            unsafe { (base.add(slot + chunk * 64) as *mut u32).write(0x1234_5678) };
        }
        w.ctrl(ds.to_be(), 0, 0);
    }

    /// The headroom: the `spare` (2) slots from the head on hold nothing a prefetch could
    /// take for a WQE chunk: every chunk after the first that their old WQE used is stamped.
    fn assert_headroom_stamped(q: &Queue, sq: &Wq) {
        for ahead in 0..2 {
            let slot = ((sq.head.wrapping_add(ahead) & 7) as usize) * 256;
            let old = (dword(q, slot + 4) & 0x3F) as usize;
            for chunk in 1..(old * 16).div_ceil(64) {
                assert_eq!(
                    dword(q, slot + chunk * 64),
                    u32::MAX,
                    "head {} + {ahead}: chunk {chunk} of an old WQE of {old} units",
                    sq.head
                );
            }
        }
    }

    /// Post WQEs of `ds` units in posts of `per`, rung by doorbell, and check after every
    /// post the stamping rule and the owner dwords.
    fn post_and_check(ds: u32, per: u32, posts: u32) {
        let p = Recorder::default();
        let (mut q, mut sq) = queue();
        let base = q.0.as_mut_ptr();
        for _ in 0..posts {
            // Retire everything: the queue is empty at the start of each post.
            sq.tail = sq.head;
            // SAFETY: the queue `sq` describes, at `base`.
            let mut c = unsafe { SqCursor::new(base, &sq, 2, sq.max_post) };
            for k in 0..per {
                let mut w = c.next().expect("room");
                let ind = sq.head.wrapping_add(k);
                fill(base, &mut w, ind, ds);
                if ds > short_ds(true) {
                    c.note_long(&mut sq);
                }
                c.publish(&p, &mut sq, &mut w, u64::from(k), 0x0A, false);
                let slot = ((ind & 7) as usize) * 256;
                assert_eq!(
                    dword(&q, slot),
                    0x0A | owner_bit(ind, 3),
                    "owner dword of WQE {ind}"
                );
            }
            c.ring_doorbell(&p, &mut sq, 0x14, 0);
            assert_headroom_stamped(&q, &sq);
        }
        assert_eq!(p.doorbells.get(), posts);
    }

    #[test]
    fn the_latency_path_stamps_unread_only_slots_it_knows_held_short_wqes() {
        let p = Recorder::default();
        let (mut q, mut sq) = queue();
        let base = q.0.as_mut_ptr();
        let mut bf = bf();
        // Short WQEs posted since the last long one (the initial slots count as long).
        let mut short = 0;
        for round in 0..60u32 {
            sq.tail = sq.head;
            // SAFETY: the queue `sq` describes, at `base`.
            let mut c = unsafe { SqCursor::new(base, &sq, 2, sq.max_post) };
            let ind = sq.head;
            // SAFETY: a two-chunk WQE fits the 256-byte slots.
            match unsafe { c.next_short::<true>() } {
                Some(mut w) => {
                    assert!(short >= 6, "WQE {ind}: the slot ahead may hold a long WQE");
                    fill(base, &mut w, ind, 6);
                    c.publish(&p, &mut sq, &mut w, 0, 0x0A, true);
                    // SAFETY: two chunks of the slot.
                    unsafe { c.ring_blueflame(&p, &mut sq, &w, &mut bf, 16) };
                    short += 1;
                }
                None => {
                    assert!(short < 6, "WQE {ind}: declined after {short} short WQEs");
                    // The generic writer: every seventh round a long WQE, else a short one.
                    // SAFETY: as above.
                    let mut c = unsafe { SqCursor::new(base, &sq, 2, sq.max_post) };
                    let mut w = c.next().expect("room");
                    let long = round % 7 == 3;
                    fill(base, &mut w, ind, if long { 16 } else { 5 });
                    if long {
                        c.note_long(&mut sq);
                        short = 0;
                    } else {
                        short += 1;
                    }
                    c.publish(&p, &mut sq, &mut w, 0, 0x0A, false);
                    c.ring_doorbell(&p, &mut sq, 0x14, 0);
                }
            }
            assert_headroom_stamped(&q, &sq);
        }
        assert!(p.blueflames.get() > 20, "the latency path ran");
    }

    #[test]
    fn the_slots_ahead_of_the_head_stay_stamped_one_wqe_per_post() {
        post_and_check(9, 1, 40);
    }

    #[test]
    fn the_slots_ahead_of_the_head_stay_stamped_with_lists() {
        post_and_check(16, 3, 40);
        post_and_check(5, 4, 40);
    }

    #[test]
    fn a_full_queue_hands_out_no_slot_and_an_empty_post_rings_nothing() {
        let p = Recorder::default();
        let (mut q, mut sq) = queue();
        // SAFETY: the queue `sq` describes.
        let mut c = unsafe { SqCursor::new(q.0.as_mut_ptr(), &sq, 2, 2) };
        for _ in 0..2 {
            let mut w = c.next().expect("room");
            c.publish(&p, &mut sq, &mut w, 7, 0x0A, false);
        }
        assert!(c.next().is_none());
        assert_eq!(c.posted(), 2);
        c.ring_doorbell(&p, &mut sq, 0x14, 0);
        assert_eq!(sq.head, 2);
        // SAFETY: as above.
        let c = unsafe { SqCursor::new(q.0.as_mut_ptr(), &sq, 2, 6) };
        c.ring_doorbell(&p, &mut sq, 0x14, 0);
        assert_eq!(p.doorbells.get(), 1);
    }

    #[test]
    fn a_blueflame_post_carries_the_wqe_counter_and_keeps_the_headroom_stamped() {
        let p = Recorder::default();
        let (mut q, mut sq) = queue();
        let base = q.0.as_mut_ptr();
        let mut bf = bf();
        for i in 0..20u32 {
            sq.tail = sq.head;
            // SAFETY: the queue `sq` describes, at `base`.
            let mut c = unsafe { SqCursor::new(base, &sq, 2, sq.max_post) };
            let mut w = c.next().expect("room");
            // 9 units: chunk 1 holds data.
            // SAFETY: the first dword of chunk 1 of slot i, inside the queue.
            unsafe { (base.add(((i & 7) as usize) * 256 + 64) as *mut u32).write(0x5A5A_5A5A) };
            w.ctrl(9u32.to_be(), 0, 0);
            c.publish(&p, &mut sq, &mut w, 0, 0x0A, true);
            // SAFETY: 16 words are the slot's first two chunks.
            unsafe { c.ring_blueflame(&p, &mut sq, &w, &mut bf, 16) };
            let slot = ((i & 7) as usize) * 256;
            assert_eq!(dword(&q, slot), 0x0A | owner_bit(i, 3) | (i & 0xFFFF) << 8);
            assert_eq!(sq.head, i + 1);
            let ahead = (((i + 2) & 7) as usize) * 256;
            assert_eq!(
                dword(&q, ahead + 64),
                u32::MAX,
                "WQE {i}: slot ahead stamped"
            );
        }
        assert_eq!((p.blueflames.get(), p.doorbells.get()), (20, 0));
        assert_eq!(bf.half, 0, "the halves alternate");
    }

    #[test]
    fn blueflame_takes_one_small_wqe_with_inline_data() {
        let bf = bf();
        assert!(blueflame_fits(Some(&bf), true, 16));
        assert!(
            !blueflame_fits(Some(&bf), true, 17),
            "larger than half the register"
        );
        assert!(!blueflame_fits(Some(&bf), true, 1), "a ctrl segment alone");
        assert!(!blueflame_fits(Some(&bf), false, 4), "gather entries");
        assert!(!blueflame_fits(None, true, 4), "no register");
    }

    #[test]
    fn headroom_is_2_kib_and_one_wqe() {
        assert_eq!(spare_wqes(6), 33);
        assert_eq!(spare_wqes(7), 17);
        assert_eq!(spare_wqes(9), 5);
        assert_eq!(spare_wqes(11), 2);
    }
}
