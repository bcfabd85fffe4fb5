//! WQE arithmetic shared by the send path and its tests (docs/hardware.md §5.2–§5.4): inline
//! segmentation at 64-byte boundaries, owner bits per pass, stamping, SQ sizing.

use crate::hw::ctrl;

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
pub unsafe fn clear_inline_padding(wqe: *mut u8, end: usize) {
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
/// `inline_end(off, data.len())` bytes; callers check the QP's max_inline first.
#[inline(always)]
pub unsafe fn write_inline(wqe: *mut u8, off: usize, data: &[u8]) -> usize {
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
        // src has `rest >= n` bytes left.
        unsafe {
            if n <= 8 {
                for i in 0..n {
                    *wqe.add(p + i) = *src.add(i);
                }
            } else {
                core::ptr::copy_nonoverlapping(src, wqe.add(p), n);
            }
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

/// Stamp a slot (§5.4): 0xFFFFFFFF in the first dword of every 64-byte chunk but the first,
/// within the `ds` 16-byte units the slot's last WQE used.
pub fn stamp(slot: &mut [u8], ds: usize) {
    let end = (ds * 16).min(slot.len());
    let mut i = WQEBB;
    while i < end {
        slot[i..i + 4].copy_from_slice(&[0xFF; 4]);
        i += WQEBB;
    }
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
    let spare = (2048 >> wqe_shift) + 1;
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
                    let n = (h & 0x3FF) as usize;
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
    fn inline_sizes_match_the_formula() {
        // UD: header at 64 (after ctrl + datagram): 2 bytes -> one segment, ends at 70.
        assert_eq!(inline_end(64, 2), 70);
        // UC: header at 16: 44 bytes fit in the first chunk; 45 need a second header.
        assert_eq!(inline_end(16, 44), 64);
        assert_eq!(inline_end(16, 45), 64 + 4 + 1);
        assert_eq!(inline_end(16, 0), 16);
    }

    #[test]
    fn stamping_skips_the_first_chunk() {
        let mut s = [0u8; 256];
        stamp(&mut s, 16); // 256 bytes used
        assert_eq!(&s[0..4], &[0; 4]);
        for c in 1..4 {
            assert_eq!(&s[c * 64..c * 64 + 4], &[0xFF; 4]);
            assert_eq!(s[c * 64 + 4], 0);
        }
        let mut s = [0u8; 64];
        stamp(&mut s, 4);
        assert_eq!(s, [0u8; 64]);
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
