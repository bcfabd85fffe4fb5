//! Big-endian field access on device-visible byte images (every multi-byte field the device
//! reads or writes is big-endian, docs/hardware.md "Conventions"). Reads outside the image return
//! 0 and writes outside it are dropped, so a malformed offset can never panic.
//!
//! [`Field`] names one field of such an image (offset, width, bit range); the model's typed
//! views of device structures (CQE, WQE segments, contexts, INIT_HCA...) are built from
//! `Field` constants, and the behaviour recorder (`trace`) decodes images with the same
//! constants. These definitions are the model's own, written from docs/hardware.md; the driver
//! keeps independent ones, and `drivers/mlx4/src/layouts.rs` compares the two.

pub trait BeRead {
    fn be8(&self, off: usize) -> u8;
    fn be16(&self, off: usize) -> u16;
    fn be32(&self, off: usize) -> u32;
    fn be64(&self, off: usize) -> u64;
}

pub trait BeWrite {
    fn put8(&mut self, off: usize, v: u8);
    fn put16(&mut self, off: usize, v: u16);
    fn put32(&mut self, off: usize, v: u32);
    fn put64(&mut self, off: usize, v: u64);
    fn put_bytes(&mut self, off: usize, v: &[u8]);
}

fn get<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(s) = off.checked_add(N).and_then(|end| b.get(off..end)) {
        out.copy_from_slice(s);
    }
    out
}

impl BeRead for [u8] {
    fn be8(&self, off: usize) -> u8 {
        self.get(off).copied().unwrap_or(0)
    }
    fn be16(&self, off: usize) -> u16 {
        u16::from_be_bytes(get(self, off))
    }
    fn be32(&self, off: usize) -> u32 {
        u32::from_be_bytes(get(self, off))
    }
    fn be64(&self, off: usize) -> u64 {
        u64::from_be_bytes(get(self, off))
    }
}

impl BeWrite for [u8] {
    fn put8(&mut self, off: usize, v: u8) {
        self.put_bytes(off, &[v]);
    }
    fn put16(&mut self, off: usize, v: u16) {
        self.put_bytes(off, &v.to_be_bytes());
    }
    fn put32(&mut self, off: usize, v: u32) {
        self.put_bytes(off, &v.to_be_bytes());
    }
    fn put64(&mut self, off: usize, v: u64) {
        self.put_bytes(off, &v.to_be_bytes());
    }
    fn put_bytes(&mut self, off: usize, v: &[u8]) {
        if let Some(s) = off
            .checked_add(v.len())
            .and_then(|end| self.get_mut(off..end))
        {
            s.copy_from_slice(v);
        }
    }
}

/// One field of a big-endian device structure: bits `shift..shift + width` of the
/// `bytes`-wide big-endian integer at byte `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub off: usize,
    pub bytes: usize,
    pub shift: u32,
    pub width: u32,
}

impl Field {
    /// Bits `shift..shift + width` of the `bytes`-wide integer at `off`.
    pub const fn bits(off: usize, bytes: usize, shift: u32, width: u32) -> Field {
        Field {
            off,
            bytes,
            shift,
            width,
        }
    }
    /// The whole `bytes`-wide integer at `off`.
    pub const fn whole(off: usize, bytes: usize) -> Field {
        Field::bits(off, bytes, 0, bytes as u32 * 8)
    }
    /// One bit of the `bytes`-wide integer at `off`.
    pub const fn bit(off: usize, bytes: usize, bit: u32) -> Field {
        Field::bits(off, bytes, bit, 1)
    }
    /// The same field moved `by` bytes further (a structure embedded at an offset).
    pub const fn at(self, by: usize) -> Field {
        Field::bits(self.off + by, self.bytes, self.shift, self.width)
    }
    pub const fn mask(&self) -> u64 {
        if self.width >= 64 {
            u64::MAX
        } else {
            (1u64 << self.width) - 1
        }
    }
    /// `v` (truncated to the field's width) at the field's bits of its integer.
    pub const fn place(&self, v: u64) -> u64 {
        (v & self.mask()) << self.shift
    }
    fn raw(&self, b: &[u8]) -> u64 {
        (0..self.bytes).fold(0u64, |acc, i| (acc << 8) | u64::from(b.be8(self.off + i)))
    }
    /// The field's value (0 where the image is too short).
    pub fn get(&self, b: &[u8]) -> u64 {
        (self.raw(b) >> self.shift) & self.mask()
    }
    /// The field's bits left in place (the integer with every other bit cleared): for an
    /// address whose low bits hold another field.
    pub fn get_in_place(&self, b: &[u8]) -> u64 {
        self.raw(b) & (self.mask() << self.shift)
    }
    pub fn get_u32(&self, b: &[u8]) -> u32 {
        self.get(b) as u32
    }
    pub fn get_bool(&self, b: &[u8]) -> bool {
        self.get(b) != 0
    }
    /// Store `v` (truncated to the field's width), keeping the other bits of its integer.
    pub fn set(&self, b: &mut [u8], v: u64) {
        let m = self.mask() << self.shift;
        let word = (self.raw(b) & !m) | ((v << self.shift) & m);
        for i in 0..self.bytes {
            let byte = (word >> (8 * (self.bytes - 1 - i))) as u8;
            b.put8(self.off + i, byte);
        }
    }
    pub fn set_bool(&self, b: &mut [u8], v: bool) {
        self.set(b, u64::from(v));
    }
    /// Copy this field's bits from `src` into `dst`, keeping `dst`'s other bits.
    pub fn copy(&self, dst: &mut [u8], src: &[u8]) {
        self.set(dst, self.get(src));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_out_of_range() {
        let mut b = [0u8; 16];
        b.put32(4, 0x1234_5678);
        assert_eq!(&b[4..8], &[0x12, 0x34, 0x56, 0x78]);
        assert_eq!(b.be32(4), 0x1234_5678);
        b.put64(8, 0x0102_0304_0506_0708);
        assert_eq!(b.be64(8), 0x0102_0304_0506_0708);
        assert_eq!(b.be16(8), 0x0102);
        assert_eq!(b.be32(14), 0, "read across the end yields 0");
        b.put32(14, 0xffff_ffff);
        assert_eq!(b[14], 0x07, "write across the end is dropped");
    }

    #[test]
    fn field_bits() {
        let mut b = [0u8; 8];
        let hi = Field::bits(0, 4, 24, 5);
        let lo = Field::bits(0, 4, 0, 24);
        hi.set(&mut b, 0x3f);
        lo.set(&mut b, 0x12_3456);
        assert_eq!(
            b.be32(0),
            0x1f12_3456,
            "value truncated to 5 bits, neighbours kept"
        );
        assert_eq!(hi.get(&b), 0x1f);
        assert_eq!(lo.get(&b), 0x12_3456);
        Field::whole(4, 4).set(&mut b, 0xdead_beef);
        assert_eq!(Field::whole(4, 4).get(&b), 0xdead_beef);
        assert_eq!(
            Field::whole(6, 4).get(&b),
            0xbeef_0000,
            "short image reads as 0"
        );
        assert!(Field::bit(0, 4, 28).get_bool(&b));
    }
}
