//! Byte ranges of fixed fields and big-endian access to them. Every accessor is handed a
//! slice already checked to be long enough by the view that owns it, so the reads and writes
//! here index inside bounds.

use core::ops::Range;

/// A field: its byte range inside a message or a body.
pub type Field = Range<usize>;

pub(crate) fn u8_at(b: &[u8], at: usize) -> u8 {
    b[at]
}

pub(crate) fn u16_at(b: &[u8], f: Field) -> u16 {
    let mut v = [0u8; 2];
    v.copy_from_slice(&b[f]);
    u16::from_be_bytes(v)
}

pub(crate) fn u32_at(b: &[u8], f: Field) -> u32 {
    let mut v = [0u8; 4];
    v.copy_from_slice(&b[f]);
    u32::from_be_bytes(v)
}

pub(crate) fn u64_at(b: &[u8], f: Field) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[f]);
    u64::from_be_bytes(v)
}

pub(crate) fn put_u8(b: &mut [u8], at: usize, v: u8) {
    b[at] = v;
}

pub(crate) fn put_u16(b: &mut [u8], f: Field, v: u16) {
    b[f].copy_from_slice(&v.to_be_bytes());
}

pub(crate) fn put_u32(b: &mut [u8], f: Field, v: u32) {
    b[f].copy_from_slice(&v.to_be_bytes());
}

pub(crate) fn put_u64(b: &mut [u8], f: Field, v: u64) {
    b[f].copy_from_slice(&v.to_be_bytes());
}

/// True when every byte of `b[f]` is zero (reserved bytes must be).
pub(crate) fn zero(b: &[u8], f: Field) -> bool {
    b[f].iter().all(|&x| x == 0)
}
