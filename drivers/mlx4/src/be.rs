//! Big-endian field wrappers for device-visible structures (docs/hardware.md "Conventions": every
//! multi-byte field the device reads or writes is big-endian).
//!
//! The wrappers are zerocopy's big-endian integers: byte arrays with alignment 1, so
//! `#[repr(C)]` structs built from them have no padding and the byte offsets asserted with
//! `offset_of!` are exactly the hardware's. `get`/`set`/`new` convert from and to host integers.

pub use zerocopy::byteorder::big_endian::{U16 as Be16, U32 as Be32, U64 as Be64};

/// Big-endian reads at a constant offset of a fixed-size byte array, for the few structures
/// still decoded field by field (EQEs, MAD data). An offset whose field would end past the
/// array does not compile, so a read never comes back as a made-up 0.
pub trait BeBytes {
    fn be8<const OFF: usize>(&self) -> u8;
    fn be16<const OFF: usize>(&self) -> u16;
    fn be32<const OFF: usize>(&self) -> u32;
    fn be64<const OFF: usize>(&self) -> u64;
}

impl<const N: usize> BeBytes for [u8; N] {
    #[inline(always)]
    fn be8<const OFF: usize>(&self) -> u8 {
        const { assert!(OFF < N, "field past the end") };
        self[OFF]
    }
    #[inline(always)]
    fn be16<const OFF: usize>(&self) -> u16 {
        const { assert!(OFF + 2 <= N, "field past the end") };
        u16::from_be_bytes([self[OFF], self[OFF + 1]])
    }
    #[inline(always)]
    fn be32<const OFF: usize>(&self) -> u32 {
        const { assert!(OFF + 4 <= N, "field past the end") };
        u32::from_be_bytes([self[OFF], self[OFF + 1], self[OFF + 2], self[OFF + 3]])
    }
    #[inline(always)]
    fn be64<const OFF: usize>(&self) -> u64 {
        const { assert!(OFF + 8 <= N, "field past the end") };
        let mut v = [0u8; 8];
        v.copy_from_slice(&self[OFF..OFF + 8]);
        u64::from_be_bytes(v)
    }
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
    fn readers_decode_at_checked_offsets() {
        let b = [0x01u8, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08];
        assert_eq!(b.be8::<7>(), 0x08);
        assert_eq!(b.be16::<1>(), 0x0203);
        assert_eq!(b.be32::<4>(), 0x0506_0708);
        assert_eq!(b.be64::<0>(), 0x0102_0304_0506_0708);
        // `b.be32::<6>()` or `b.be8::<100>()` would not compile.
    }
}
