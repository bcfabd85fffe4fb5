//! The 16-byte header of every call message, as a typed view over a buffer.

use crate::field::{put_u16, put_u32, put_u8, u16_at, u32_at, u8_at};
use crate::{Error, Op, MAGIC, MAX_MESSAGE, REPLY_BIT, VERSION};

/// The header's fields (big-endian).
pub mod field {
    use crate::Field;

    /// `"IBKD"` ([`crate::MAGIC`]).
    pub const MAGIC: Field = 0..4;
    /// The protocol version ([`crate::VERSION`]).
    pub const VERSION: usize = 4;
    /// The op code ([`crate::Op`]), bit 7 set in a reply.
    pub const KIND: usize = 5;
    /// Reserved, zero.
    pub const RESERVED: Field = 6..8;
    /// Chosen by the node per call, echoed by the reply.
    pub const TAG: Field = 8..12;
    /// Zero in a request and in a successful reply; an [`crate::ErrorCode`] otherwise.
    pub const STATUS: Field = 12..14;
    /// Bytes of body after the header.
    pub const LENGTH: Field = 14..16;
    pub const BODY: usize = 16;
}

/// Bytes of the header.
pub const HEADER_LEN: usize = field::BODY;

/// A call message: header and body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// A view without checks: accessors may panic on a short buffer. Use [`Packet::new_checked`]
    /// for anything received.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// A view of a received message: at least a header, at most [`MAX_MESSAGE`], the body
    /// length exactly what follows the header, the magic, version and reserved bytes right.
    /// The op is not checked here, so a request with an unknown op still has a tag to answer.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let p = Packet { buffer };
        let len = p.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if len > MAX_MESSAGE {
            return Err(Error::TooLong);
        }
        if p.magic() != MAGIC {
            return Err(Error::BadMagic);
        }
        if p.version() != VERSION {
            return Err(Error::BadVersion(p.version()));
        }
        if p.buffer.as_ref()[field::RESERVED].iter().any(|&b| b != 0) {
            return Err(Error::Reserved);
        }
        if usize::from(p.body_len()) != len - HEADER_LEN {
            return Err(Error::BadLength);
        }
        Ok(p)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn magic(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::MAGIC)
    }

    pub fn version(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::VERSION)
    }

    /// The raw kind byte.
    pub fn kind(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::KIND)
    }

    pub fn is_reply(&self) -> bool {
        self.kind() & REPLY_BIT != 0
    }

    /// The op, if the code is known.
    pub fn op(&self) -> Result<Op, Error> {
        let code = self.kind() & !REPLY_BIT;
        Op::from_code(code).ok_or(Error::UnknownOp(code))
    }

    pub fn tag(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::TAG)
    }

    pub fn status(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::STATUS)
    }

    pub fn body_len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::LENGTH)
    }

    /// The bytes after the header.
    pub fn body(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<'a> Packet<&'a [u8]> {
    /// The body, with the lifetime of the buffer.
    pub fn body_ref(&self) -> &'a [u8] {
        &self.buffer[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes a header for `op` (a reply when `reply`) with this tag, status and body length:
    /// magic, version and reserved bytes too.
    pub fn emit_header(&mut self, op: Op, reply: bool, tag: u32, status: u16, body_len: usize) {
        debug_assert!(body_len <= MAX_MESSAGE - HEADER_LEN);
        let b = self.buffer.as_mut();
        put_u32(b, field::MAGIC, MAGIC);
        put_u8(b, field::VERSION, VERSION);
        put_u8(b, field::KIND, op as u8 | if reply { REPLY_BIT } else { 0 });
        b[field::RESERVED].fill(0);
        put_u32(b, field::TAG, tag);
        put_u16(b, field::STATUS, status);
        put_u16(b, field::LENGTH, body_len as u16);
    }

    pub fn body_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}
