//! Big-endian field wrappers for device-visible structures (docs/hardware.md "Conventions": every
//! multi-byte field the device reads or writes is big-endian).
//!
//! The wrappers are zerocopy's big-endian integers: byte arrays with alignment 1, so
//! `#[repr(C)]` structs built from them have no padding and the byte offsets asserted with
//! `offset_of!` are exactly the hardware's. `get`/`set`/`new` convert from and to host integers.

pub use zerocopy::byteorder::big_endian::{U16 as Be16, U32 as Be32, U64 as Be64};

/// Read a big-endian u8/u16/u32/u64 at `off` of a byte buffer (for mailbox outputs that are
/// decoded field by field). Out-of-range reads return 0 rather than panicking.
pub fn rd8(b: &[u8], off: usize) -> u8 {
    b.get(off).copied().unwrap_or(0)
}
pub fn rd16(b: &[u8], off: usize) -> u16 {
    match b.get(off..off + 2) {
        Some(s) => u16::from_be_bytes([s[0], s[1]]),
        None => 0,
    }
}
pub fn rd32(b: &[u8], off: usize) -> u32 {
    match b.get(off..off + 4) {
        Some(s) => u32::from_be_bytes([s[0], s[1], s[2], s[3]]),
        None => 0,
    }
}
pub fn rd64(b: &[u8], off: usize) -> u64 {
    ((rd32(b, off) as u64) << 32) | rd32(b, off + 4) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrappers_store_big_endian_bytes() {
        let mut x = Be32::default();
        x.set(0x1234_5678);
        assert_eq!(x.to_bytes(), [0x12, 0x34, 0x56, 0x78]);
        assert_eq!(x.get(), 0x1234_5678);
        assert_eq!(Be16::new(0xABCD).to_bytes(), [0xAB, 0xCD]);
        assert_eq!(Be64::new(1).to_bytes(), [0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(core::mem::align_of::<Be64>(), 1);
    }

    #[test]
    fn readers_decode_and_never_panic() {
        let b = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08];
        assert_eq!(rd16(&b, 1), 0x0203);
        assert_eq!(rd32(&b, 4), 0x0506_0708);
        assert_eq!(rd64(&b, 0), 0x0102_0304_0506_0708);
        assert_eq!(rd32(&b, 6), 0);
        assert_eq!(rd8(&b, 100), 0);
    }
}
