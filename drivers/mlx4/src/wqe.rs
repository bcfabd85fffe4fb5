//! Send WQEs (docs/hardware.md §5.2–§5.5): the one writer of their segments that every send
//! entry point uses ([`SendWqe`]: one method per segment, the owner dword, the BlueFlame
//! copy), inline segmentation at 64-byte boundaries, owner bits per pass, and SQ sizing. Like
//! rdma-core's providers/mlx4 `mlx4_post_send`, a send is a sequence of small segment
//! writers; the latency paths call the same writers with values prepared ahead. Handing out
//! slots, publishing, stamping and ringing is the send queue's one commit, `crate::sq`.
//!
//! Segments are written through the typed, layout-checked structs of `crate::hw`; the
//! values the latency paths prepare are stored as they are (already big-endian).

use core::mem::offset_of;
use core::ptr::addr_of_mut;

use crate::be::{Be32, Be64};
use crate::hw::{ctrl, AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, MlxSeg, RaddrSeg};
use crate::platform::{Bar, Platform};

/// A WQE basic block / the inline alignment unit (§5.2 `MLX4_INLINE_ALIGN`).
pub const WQEBB: usize = 64;

/// Owner bit (bit 31 of owner_opcode) for WQE number `ind` in a queue of `1 << log_cnt`
/// entries: the parity of the pass (§5.3). No division.
#[inline(always)]
pub fn owner_bit(ind: u32, log_cnt: u32) -> u32 {
    ((ind >> log_cnt) & 1) << 31
}

/// End offset (relative to the WQE start, which is 64-byte aligned) of `len` inline bytes
/// whose first segment header sits at `off`; each segment is a 4-byte header plus data and
/// no segment crosses a 64-byte boundary (§5.2 "Inline data").
pub fn inline_end(off: usize, len: usize) -> usize {
    if len == 0 {
        return off;
    }
    let mut p = off + 4;
    let mut rest = len;
    loop {
        let space = WQEBB - (p & (WQEBB - 1));
        if rest <= space {
            return p + rest;
        }
        rest -= space;
        p += space + 4;
    }
}

/// Zero the dword after the last inline segment ending at `end` when the WQE's last 16-byte
/// unit has room for it. The bytes up to the unit's end are padding (§5.2: the size counts
/// whole units); left as they were, an old WQE's bytes there can look like one more inline
/// header (bit 31 set) to a device that walks the segments. When fewer than 4 bytes of
/// padding remain there is nothing a header could be read from.
///
/// # Safety
/// `wqe` is valid for writes up to the 16-byte unit containing `end - 1`.
#[inline(always)]
unsafe fn clear_inline_padding(wqe: *mut u8, end: usize) {
    let pad = end.wrapping_neg() & 15;
    if pad >= 4 {
        // SAFETY: [end, end + 4) lies inside the unit (pad ≥ 4), which the caller covers.
        unsafe { (wqe.add(end) as *mut u32).write_unaligned(0) };
    }
}

/// Write `data` as inline segments into the WQE at `wqe`, first header at byte `off`;
/// returns the end offset. Each header is written after its data (§5.2).
///
/// # Safety
/// `wqe` must be 64-byte aligned (WQE slots are) and valid for writes of
/// `inline_end(off, data.len())` bytes rounded up to 16; callers check the QP's max_inline.
#[inline(always)]
unsafe fn write_inline(wqe: *mut u8, off: usize, data: &[u8]) -> usize {
    if data.is_empty() {
        return off;
    }
    let mut hdr = off;
    let mut p = off + 4;
    let mut src = data.as_ptr();
    let mut rest = data.len();
    loop {
        let space = WQEBB - (p & (WQEBB - 1));
        let n = if rest < space { rest } else { space };
        // SAFETY: [p, p + n) and [hdr, hdr + 4) lie within inline_end(off, len) (caller);
        // src has `rest >= n` bytes left; 1 ≤ n ≤ 60 (a segment stays in its 64-byte chunk).
        unsafe {
            copy_upto64(src, wqe.add(p), n);
            core::sync::atomic::fence(core::sync::atomic::Ordering::Release);
            (wqe.add(hdr) as *mut u32).write_unaligned((ctrl::INLINE | n as u32).to_be());
            src = src.add(n);
        }
        rest -= n;
        p += n;
        if rest == 0 {
            // SAFETY: the WQE's size is rounded up to the unit containing p - 1 (caller).
            unsafe { clear_inline_padding(wqe, p) };
            return p;
        }
        hdr = p;
        p += 4;
    }
}

/// Copy `len` bytes with two overlapping loads/stores of the widest of 2, 4, 8, 16 or 32
/// bytes that fits: no loop and no `memcpy` call (a call would make the whole inlined
/// latency path save registers). The one copy routine of the send path.
///
/// # Safety
/// `1 ≤ len ≤ 64` (with 0 it would still copy one byte); `src` is readable and `dst`
/// writable for `len` bytes; they do not overlap.
#[inline(always)]
pub(crate) unsafe fn copy_upto64(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: every access below is within [0, len) of both buffers (caller).
    unsafe {
        if len < 4 {
            // The latency path's usual sizes first (perftest's default is 2 bytes).
            if len >= 2 {
                let a = (src as *const u16).read_unaligned();
                let b = (src.add(len - 2) as *const u16).read_unaligned();
                (dst as *mut u16).write_unaligned(a);
                (dst.add(len - 2) as *mut u16).write_unaligned(b);
            } else {
                *dst = *src;
            }
        } else if len <= 8 {
            let a = (src as *const u32).read_unaligned();
            let b = (src.add(len - 4) as *const u32).read_unaligned();
            (dst as *mut u32).write_unaligned(a);
            (dst.add(len - 4) as *mut u32).write_unaligned(b);
        } else if len <= 16 {
            let a = (src as *const u64).read_unaligned();
            let b = (src.add(len - 8) as *const u64).read_unaligned();
            (dst as *mut u64).write_unaligned(a);
            (dst.add(len - 8) as *mut u64).write_unaligned(b);
        } else if len <= 32 {
            let a = (src as *const u128).read_unaligned();
            let b = (src.add(len - 16) as *const u128).read_unaligned();
            (dst as *mut u128).write_unaligned(a);
            (dst.add(len - 16) as *mut u128).write_unaligned(b);
        } else {
            let a = (src as *const [u128; 2]).read_unaligned();
            let b = (src.add(len - 32) as *const [u128; 2]).read_unaligned();
            (dst as *mut [u128; 2]).write_unaligned(a);
            (dst.add(len - 32) as *mut [u128; 2]).write_unaligned(b);
        }
    }
}

/// Per inline length 0..64 of the latency paths, RC/UC ([0], inline segment at byte 16) and
/// UD ([1], at byte 64), as stored: the WQE size in 16-byte units as ctrl dword 1's BE byte
/// 7 (§5.2), the inline segment header `BE(INLINE | len)`, and the offset of the dword that
/// clears the padding after the data ([`clear_inline_padding`]): the one after the data when
/// its 16-byte unit has room for it, else ctrl dword 2, which is written afterwards.
static INLINE_WORDS: [[[u32; 3]; 64]; 2] = [inline_words(16), inline_words(64)];

const fn inline_words(hdr: usize) -> [[u32; 3]; 64] {
    let mut t = [[0; 3]; 64];
    let mut len = 0;
    while len < 64 {
        let end = hdr + 4 + len;
        let ds = (end + 15) >> 4;
        let pad = if end.wrapping_neg() & 15 >= 4 { end } else { 8 };
        t[len] = [
            (ds as u32).to_be(),
            (ctrl::INLINE | len as u32).to_be(),
            pad as u32,
        ];
        len += 1;
    }
    t
}

/// BlueFlame register owned by a QP (§5.5).
pub(crate) struct Bf {
    pub index: u32,
    /// BAR2 offset of the register.
    pub reg: usize,
    /// Half currently to be written (0 or buf_size).
    pub half: usize,
    pub buf_size: usize,
}

/// A send WQE being written in its slot (§5.2), handed out by `sq::SqCursor`. The segment
/// methods may come in any order; [`Self::publish`] writes the owner/opcode dword last,
/// behind a write barrier (the cursor's publish calls it), and [`Self::blueflame`] copies
/// the WQE to a BlueFlame register (the cursor's BlueFlame ring).
pub(crate) struct SendWqe {
    w: *mut u8,
}

impl SendWqe {
    /// The WQE in the slot at `w`.
    ///
    /// # Safety
    /// `w` is a send-queue slot: 64-byte aligned, at least 64 bytes, valid for writes and
    /// owned by software (its previous WQE completed) while the `SendWqe` lives. The
    /// methods with an offset say what they add to this.
    #[inline(always)]
    pub unsafe fn new(w: *mut u8) -> SendWqe {
        SendWqe { w }
    }

    #[inline(always)]
    fn ctrl_seg(&self) -> *mut CtrlSeg {
        self.w.cast()
    }

    /// Ctrl dwords 1–3, each already big-endian: fence and size (BlueFlame: with the QPN),
    /// the flags (srcrb), the immediate.
    #[inline(always)]
    pub fn ctrl(&mut self, fence_size_be: u32, flags_be: u32, imm_be: u32) {
        let c = self.ctrl_seg();
        // SAFETY: the ctrl segment is the slot's first 16 bytes (`new`).
        unsafe {
            addr_of_mut!((*c).vlan_fence_size).write(be32_raw(fence_size_be));
            addr_of_mut!((*c).srcrb_flags).write(be32_raw(flags_be));
            addr_of_mut!((*c).imm).write(be32_raw(imm_be));
        }
    }

    /// Ctrl dwords 1–3 prepared ahead: dword 1 and dwords 2–3 as stored (one 64-bit store).
    #[inline(always)]
    pub fn ctrl_prepared(&mut self, fence_size_be: u32, flags_imm: u64) {
        const { assert!(offset_of!(CtrlSeg, imm) == offset_of!(CtrlSeg, srcrb_flags) + 4) };
        let c = self.ctrl_seg();
        // SAFETY: the ctrl segment is the slot's first 16 bytes (`new`); srcrb_flags is at
        // byte 8 of a 64-byte aligned slot, so the 64-bit store is aligned.
        unsafe {
            addr_of_mut!((*c).vlan_fence_size).write(be32_raw(fence_size_be));
            addr_of_mut!((*c).srcrb_flags)
                .cast::<u64>()
                .write(flags_imm);
        }
    }

    /// The owner/opcode dword (§5.3), written last: a write barrier orders every other
    /// store of the WQE before it.
    #[inline(always)]
    pub fn publish<P: Platform>(&mut self, p: &P, owner_opcode: u32) {
        p.wmb();
        let c = self.ctrl_seg();
        // SAFETY: dword 0 of the slot; 4-aligned.
        unsafe {
            addr_of_mut!((*c).owner_opcode)
                .cast::<u32>()
                .write(owner_opcode.to_be())
        };
    }

    /// The UD datagram segment at byte 16: the address vector of an address handle (the
    /// segment's first 32 bytes), the remote QPN and Q_Key, no VLAN/MAC.
    #[inline(always)]
    pub fn datagram(&mut self, av: &[u8; 32], remote_qpn: u32, qkey: u32) {
        let d: *mut DatagramSeg = self.w.wrapping_add(size_of::<CtrlSeg>()).cast();
        const { assert!(offset_of!(DatagramSeg, dqpn) == 32) };
        // SAFETY: bytes 16..64 of the slot (`new`: at least 64 bytes); the first 32 bytes of
        // the segment are the AV; vlan and mac (bytes 40..48) are one aligned 64-bit zero.
        unsafe {
            core::ptr::copy_nonoverlapping(av.as_ptr(), d.cast::<u8>(), 32);
            addr_of_mut!((*d).vlan).cast::<u64>().write(0);
            addr_of_mut!((*d).dqpn).write(Be32::new(remote_qpn & 0xFF_FFFF));
            addr_of_mut!((*d).qkey).write(Be32::new(qkey));
        }
    }

    /// The UD datagram segment at byte 16 prepared ahead: its 48 bytes as stored.
    #[inline(always)]
    pub fn datagram_prepared(&mut self, d: &[u64; 6]) {
        const { assert!(size_of::<DatagramSeg>() == size_of::<[u64; 6]>()) };
        // SAFETY: bytes 16..64 of the slot, 8-aligned.
        unsafe {
            core::ptr::copy_nonoverlapping(
                d.as_ptr(),
                self.w.add(size_of::<CtrlSeg>()).cast::<u64>(),
                6,
            )
        };
    }

    /// The remote address segment of RDMA and atomics, at byte 16 (§5.2).
    #[inline(always)]
    pub fn raddr(&mut self, raddr: u64, rkey: u32) {
        // SAFETY: bytes 16..32 of the slot (`new`).
        unsafe {
            self.w
                .add(size_of::<CtrlSeg>())
                .cast::<RaddrSeg>()
                .write(RaddrSeg::new(raddr, rkey))
        };
    }

    /// The atomic segment, after ctrl and remote address: at byte 32 (§5.2).
    #[inline(always)]
    pub fn atomic(&mut self, swap_add: u64, compare: u64) {
        let a: *mut AtomicSeg = self.w.wrapping_add(32).cast();
        // SAFETY: bytes 32..48 of the slot (`new`).
        unsafe {
            addr_of_mut!((*a).swap_add).write(Be64::new(swap_add));
            addr_of_mut!((*a).compare).write(Be64::new(compare));
        }
    }

    /// A data (pointer) segment at byte `off`: the byte count last, behind a barrier, so a
    /// prefetching device never sees a valid count with a stale address (§5.2); a zero
    /// length is written as [`ctrl::ZERO_LENGTH_SGE`].
    ///
    /// # Safety
    /// `[off, off + 16)` lies inside the slot; `off` is a multiple of 16.
    #[inline(always)]
    pub unsafe fn data(&mut self, off: usize, addr: u64, lkey: u32, length: u32) {
        // SAFETY: caller.
        let d: *mut DataSeg = unsafe { self.w.add(off) }.cast();
        let count = if length == 0 {
            ctrl::ZERO_LENGTH_SGE
        } else {
            length
        };
        // SAFETY: caller.
        unsafe {
            addr_of_mut!((*d).lkey).write(Be32::new(lkey));
            addr_of_mut!((*d).addr).write(Be64::new(addr));
            core::sync::atomic::fence(core::sync::atomic::Ordering::Release);
            addr_of_mut!((*d).byte_count).write(Be32::new(count));
        }
    }

    /// `data` as inline segments from byte `off` (§5.2: each header after its data, none
    /// crossing a 64-byte boundary, the padding after the last cleared); returns the end.
    ///
    /// # Safety
    /// `inline_end(off, data.len())`, rounded up to 16, is at most the slot size.
    #[inline(always)]
    pub unsafe fn inline(&mut self, off: usize, data: &[u8]) -> usize {
        // SAFETY: caller.
        unsafe { write_inline(self.w, off, data) }
    }

    /// One inline segment of `data` (1..=60 bytes) right after the headers of a latency-path
    /// WQE: at byte 16 (RC/UC, `UD` false) or 64 (UD), inside one 64-byte chunk. Returns the
    /// WQE's size in 16-byte units as ctrl dword 1's big-endian byte 7.
    ///
    /// # Safety
    /// `1 ≤ data.len()` and the segment ends inside its chunk (`hdr + 4 + len ≤ hdr's chunk
    /// end`), which lies inside the slot.
    #[inline(always)]
    pub unsafe fn inline_short<const UD: bool>(&mut self, data: &[u8]) -> u32 {
        let hdr = if UD { 64 } else { 16 };
        let len = data.len();
        // SAFETY: [hdr + 4, hdr + 4 + len) lies inside the chunk (caller), so len ≤ 60.
        unsafe { copy_upto64(data.as_ptr(), self.w.add(hdr + 4), len) };
        let words = &INLINE_WORDS[UD as usize][len & 63];
        // SAFETY: the dword after the data inside its last 16-byte unit, or ctrl dword 2
        // (which the caller writes afterwards) when that unit has no room for it.
        unsafe { (self.w.add(words[2] as usize) as *mut u32).write_unaligned(0) };
        // The segment header after its data (§5.2): it overwrites the stamp of chunk 1 (UD).
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::Release);
        // SAFETY: the header dword at hdr, 4-aligned.
        unsafe { (self.w.add(hdr) as *mut u32).write(words[1]) };
        words[0]
    }

    /// The ctrl segment of an MLX WQE (QP0): MLX flags and destination LID (§5.2).
    #[inline(always)]
    pub fn mlx(&mut self, ds: u32, flags: u32, rlid: u16) {
        let m: *mut MlxSeg = self.w.cast();
        // SAFETY: the slot's first 16 bytes (`new`).
        unsafe {
            addr_of_mut!((*m).vlan_fence_size).write(Be32::new(ds));
            addr_of_mut!((*m).flags).write(Be32::new(flags));
            addr_of_mut!((*m).rlid).write(crate::be::Be16::new(rlid));
            // The two reserved bytes after the LID.
            addr_of_mut!((*m).rlid)
                .add(1)
                .cast::<u8>()
                .write_bytes(0, 2);
        }
    }

    /// The ICRC segment of an MLX WQE at byte `off` (§5.2): an inline segment of 4 zero
    /// bytes the device replaces with the packet's ICRC; its data before its header, and the
    /// rest of its 16-byte unit zero.
    ///
    /// # Safety
    /// `[off, off + 16)` lies inside the slot; `off` is a multiple of 16.
    #[inline(always)]
    pub unsafe fn icrc(&mut self, off: usize) {
        // SAFETY: caller.
        unsafe {
            core::ptr::write_bytes(self.w.add(off + 4), 0, 12);
            core::sync::atomic::fence(core::sync::atomic::Ordering::Release);
            (self.w.add(off) as *mut u32).write((ctrl::INLINE | 4).to_be());
        }
    }

    /// Copy the WQE's first `n` 64-bit words to the QP's BlueFlame register half (§5.5),
    /// behind a write barrier, and switch halves.
    ///
    /// # Safety
    /// `n * 8` bytes (whole 64-byte chunks covering the WQE) lie inside the slot.
    #[inline(always)]
    pub unsafe fn blueflame<P: Platform>(&self, p: &P, bf: &mut Bf, n: usize) {
        // SAFETY: caller; the slot is 8-aligned.
        let words = unsafe { core::slice::from_raw_parts(self.w as *const u64, n) };
        p.wmb();
        p.wc_copy(Bar::Uar, bf.reg + bf.half, words);
        bf.half ^= bf.buf_size;
    }
}

/// A [`Be32`] from a value already in big-endian byte order (as the latency paths prepare
/// them).
#[inline(always)]
const fn be32_raw(v: u32) -> Be32 {
    Be32::from_bytes(v.to_ne_bytes())
}

/// Send queue geometry for a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqGeometry {
    /// log2 of the slot size (≥ 6).
    pub wqe_shift: u32,
    /// log2 of the number of slots.
    pub log_cnt: u32,
    /// Slots kept free for prefetch headroom (§5.3).
    pub spare: u32,
    /// WRs that can be outstanding.
    pub max_post: u32,
    pub max_inline: u32,
    pub max_sge: u32,
}

/// Bytes of transport segments after the ctrl segment before pointer segments: UD datagram
/// (48), or RC/UC remote address + atomic (32, the largest RC/UC combination).
pub fn transport_bytes(ud: bool) -> usize {
    if ud {
        48
    } else {
        32
    }
}

/// Bytes of transport segments before inline data: UD datagram (48), or the remote address
/// of an inline RDMA WRITE (16; READ and atomics cannot be inline).
pub fn inline_transport_bytes(ud: bool) -> usize {
    if ud {
        48
    } else {
        16
    }
}

/// Size the SQ: one slot per WR, big enough for `max_sge` pointer segments or `max_inline`
/// inline bytes after ctrl + transport segments; limited by the device's max descriptor size.
pub fn sq_geometry(
    ud: bool,
    max_wr: u32,
    max_sge: u32,
    max_inline: u32,
    max_desc: u32,
    max_qp_sz: u32,
) -> Option<SqGeometry> {
    if max_inline > max_desc || max_sge > max_desc / 16 {
        return None;
    }
    let hdr = 16 + transport_bytes(ud);
    let inl_hdr = 16 + inline_transport_bytes(ud);
    let sge_end = hdr + 16 * max_sge.max(1) as usize;
    let inl_end = (inline_end(inl_hdr, max_inline as usize) + 15) & !15;
    let need = sge_end.max(inl_end).max(WQEBB);
    if need > max_desc as usize {
        return None;
    }
    let wqe_shift = need.next_power_of_two().trailing_zeros();
    let slot = 1usize << wqe_shift;
    // Grant what fits in the slot.
    let max_sge = ((slot.min(max_desc as usize) - hdr) / 16) as u32;
    let mut max_inline = max_inline;
    while inline_end(inl_hdr, max_inline as usize + 1) <= slot.min(max_desc as usize) {
        max_inline += 1;
    }
    let spare = crate::sq::spare_wqes(wqe_shift);
    let cnt = max_wr
        .max(1)
        .checked_add(spare)?
        .checked_next_power_of_two()?;
    if cnt > max_qp_sz {
        return None;
    }
    Some(SqGeometry {
        wqe_shift,
        log_cnt: cnt.trailing_zeros(),
        spare,
        max_post: cnt - spare,
        max_inline,
        max_sge,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_bit_is_pass_parity() {
        assert_eq!(owner_bit(0, 3), 0);
        assert_eq!(owner_bit(7, 3), 0);
        assert_eq!(owner_bit(8, 3), 1 << 31);
        assert_eq!(owner_bit(16, 3), 0);
        assert_eq!(owner_bit(u32::MAX, 3), 1 << 31);
    }

    #[test]
    fn inline_segments_never_cross_64_byte_boundaries() {
        for off in [16usize, 32, 48, 64] {
            for len in [0usize, 1, 2, 40, 44, 45, 59, 60, 61, 124, 200, 500] {
                #[repr(align(64))]
                struct Buf([u8; 1024]);
                let mut b = Buf([0u8; 1024]);
                let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
                // SAFETY: 1024 bytes, 64-byte aligned, more than inline_end(off, len).
                let end = unsafe { write_inline(b.0.as_mut_ptr(), off, &data) };
                let w = b.0;
                assert_eq!(end, inline_end(off, len));
                // Walk the segments back and reassemble.
                let mut p = off;
                let mut got = Vec::new();
                while got.len() < len {
                    let h = u32::from_be_bytes(w[p..p + 4].try_into().unwrap());
                    assert_ne!(h & ctrl::INLINE, 0, "inline bit");
                    let n = (h & !ctrl::INLINE) as usize;
                    assert!(n > 0);
                    assert_eq!(p / 64, (p + 4 + n - 1) / 64, "off {off} len {len}: crosses");
                    got.extend_from_slice(&w[p + 4..p + 4 + n]);
                    p += 4 + n;
                }
                assert_eq!(got, (0..len).map(|i| i as u8).collect::<Vec<_>>());
                assert_eq!(p, end);
            }
        }
    }

    #[test]
    fn inline_padding_cannot_look_like_a_header() {
        for off in [16usize, 64] {
            for len in 1..=120usize {
                #[repr(align(64))]
                struct Buf([u8; 256]);
                let mut b = Buf([0xFF; 256]);
                let data = vec![0x11u8; len];
                // SAFETY: 256 bytes, 64-byte aligned, more than inline_end(off, len) + 16.
                let end = unsafe { write_inline(b.0.as_mut_ptr(), off, &data) };
                let unit_end = (end + 15) & !15;
                if unit_end - end >= 4 {
                    assert_eq!(&b.0[end..end + 4], &[0; 4], "off {off} len {len}");
                }
                // Nothing beyond the WQE's last unit is touched.
                assert!(
                    b.0[unit_end..].iter().all(|&x| x == 0xFF),
                    "off {off} len {len}"
                );
            }
        }
    }

    #[test]
    fn copy_upto64_copies_exactly_len_bytes() {
        for len in 1..=64usize {
            let src: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(13) | 1).collect();
            let mut dst = [0u8; 80];
            // SAFETY: src has len bytes, dst 80 ≥ len; distinct buffers.
            unsafe { copy_upto64(src.as_ptr(), dst.as_mut_ptr(), len) };
            assert_eq!(&dst[..len], &src[..], "len {len}");
            assert!(
                dst[len..].iter().all(|&b| b == 0),
                "len {len}: wrote past the end"
            );
        }
    }

    #[test]
    fn inline_sizes_match_the_formula() {
        // UD: header at 64 (after ctrl + datagram): 2 bytes -> one segment, ends at 70.
        assert_eq!(inline_end(64, 2), 70);
        // UC: header at 16: 44 bytes fit in the first chunk; 45 need a second header.
        assert_eq!(inline_end(16, 44), 64);
        assert_eq!(inline_end(16, 45), 64 + 4 + 1);
        assert_eq!(inline_end(16, 0), 16);
    }

    #[test]
    fn sq_geometry_for_latency_qps_uses_64_byte_slots() {
        let g = sq_geometry(false, 16, 1, 28, 1008, 16384).unwrap();
        assert_eq!(g.wqe_shift, 6);
        assert_eq!(g.spare, 33);
        assert_eq!(g.max_post, 64 - 33);
        assert!(g.max_inline >= 28);
        let g = sq_geometry(true, 16, 1, 188, 1008, 16384).unwrap();
        assert_eq!(
            g.wqe_shift, 9,
            "188 B inline after a datagram needs 4 segments"
        );
        let g = sq_geometry(true, 16, 1, 140, 1008, 16384).unwrap();
        assert_eq!(g.wqe_shift, 8);
        assert!(inline_end(64, g.max_inline as usize) <= 256);
        assert!(inline_end(64, g.max_inline as usize + 1) > 256);
        assert!(sq_geometry(true, 16, 1, 2000, 1008, 16384).is_none());
        assert!(sq_geometry(true, 20000, 1, 0, 1008, 16384).is_none());
        assert!(sq_geometry(true, u32::MAX, 1, 0, 1008, 16384).is_none());
        assert!(sq_geometry(false, 16, 1, u32::MAX, 1008, 16384).is_none());
        assert!(sq_geometry(false, 16, u32::MAX, 0, 1008, 16384).is_none());
    }
}
