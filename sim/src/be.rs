//! Big-endian field access on device-visible byte images (every multi-byte field the device
//! reads or writes is big-endian, docs/hardware.md "Conventions"). Reads outside the image return
//! 0 and writes outside it are dropped, so a malformed offset can never panic.

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
}
