//! Replies: the delegate's answer to each request, a [`Reply`] on success or a [`Failure`]
//! (an [`ErrorCode`] and a detail number) otherwise.

use crate::field::{put_u16, put_u32, put_u64, put_u8, u16_at, u32_at, u64_at, u8_at, zero};
use crate::header::{Packet, HEADER_LEN};
use crate::request::Access;
use crate::{Error, ErrorCode, Op, MAX_BODY, MAX_INLINE, MAX_TRANSFER, NAME_MAX};

/// A failed call: what went wrong and a number that says more (see each [`ErrorCode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    pub code: ErrorCode,
    pub detail: u32,
}

impl Failure {
    pub const fn new(code: ErrorCode, detail: u32) -> Failure {
        Failure { code, detail }
    }

    /// Bytes of a failure message.
    pub const BUFFER_LEN: usize = HEADER_LEN + 4;

    /// Writes the failure answering a request whose kind byte was `op_code` (an unknown op
    /// is answered with its own code; a message without a header with 0) and tag `tag`.
    pub fn emit(&self, op_code: u8, tag: u32, buf: &mut [u8]) -> Result<usize, Error> {
        if buf.len() < Self::BUFFER_LEN {
            return Err(Error::Truncated);
        }
        let b = &mut buf[..Self::BUFFER_LEN];
        put_u32(b, crate::header_field::MAGIC, crate::MAGIC);
        put_u8(b, crate::header_field::VERSION, crate::VERSION);
        put_u8(
            b,
            crate::header_field::KIND,
            (op_code & !crate::REPLY_BIT) | crate::REPLY_BIT,
        );
        b[crate::header_field::RESERVED].fill(0);
        put_u32(b, crate::header_field::TAG, tag);
        put_u16(b, crate::header_field::STATUS, self.code as u16);
        put_u16(b, crate::header_field::LENGTH, 4);
        put_u32(b, HEADER_LEN..HEADER_LEN + 4, self.detail);
        Ok(Self::BUFFER_LEN)
    }
}

impl core::fmt::Display for Failure {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} ({})", self.code, self.detail)
    }
}

/// What a directory entry or a file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FileKind {
    File = 1,
    Directory = 2,
    Symlink = 3,
    Other = 4,
}

impl FileKind {
    pub fn from_code(c: u8) -> Result<FileKind, Error> {
        Ok(match c {
            1 => FileKind::File,
            2 => FileKind::Directory,
            3 => FileKind::Symlink,
            4 => FileKind::Other,
            _ => return Err(Error::BadValue),
        })
    }
}

/// What fstat tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub size: u64,
    pub kind: FileKind,
    /// Permission bits, 0..=0o7777.
    pub perm: u16,
    /// Last modification, seconds since the Unix epoch and nanoseconds (< 10⁹).
    pub mtime_s: i64,
    pub mtime_ns: u32,
}

/// A region the delegate mapped and registered for the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionInfo {
    /// The number to unmap it by.
    pub region: u32,
    pub rkey: u32,
    /// The delegate's address of its first byte (page-aligned), as RDMA names it.
    pub addr: u64,
    pub len: u64,
    /// What the node's RDMA may do: what it asked, less what the backing cannot grant.
    pub access: Access,
}

/// How a pread's bytes came back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read<'a> {
    /// In the reply.
    Inline(&'a [u8]),
    /// This many bytes written into the node's buffer before the reply was sent.
    Remote(u32),
}

impl Read<'_> {
    pub fn count(&self) -> u32 {
        match self {
            Read::Inline(d) => d.len() as u32,
            Read::Remote(n) => *n,
        }
    }
}

/// One directory entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirEntry<'a> {
    pub kind: FileKind,
    /// 1 to [`NAME_MAX`] bytes, no NUL or `/`.
    pub name: &'a [u8],
}

/// A reply's directory entries: validated bytes, read with [`DirEntries::iter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirEntries<'a> {
    bytes: &'a [u8],
    count: u16,
}

fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.len() <= NAME_MAX && !name.contains(&0) && !name.contains(&b'/')
}

impl<'a> DirEntries<'a> {
    /// Each entry is a kind byte, a length byte and the name.
    pub fn parse(bytes: &'a [u8], count: u16) -> Result<DirEntries<'a>, Error> {
        let mut at = 0;
        for _ in 0..count {
            let head = bytes.get(at..at + 2).ok_or(Error::Truncated)?;
            FileKind::from_code(head[0])?;
            let n = usize::from(head[1]);
            let name = bytes.get(at + 2..at + 2 + n).ok_or(Error::Truncated)?;
            if !valid_name(name) {
                return Err(Error::BadValue);
            }
            at += 2 + n;
        }
        if at != bytes.len() {
            return Err(Error::TooLong);
        }
        Ok(DirEntries { bytes, count })
    }

    pub fn len(&self) -> usize {
        usize::from(self.count)
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn iter(&self) -> impl Iterator<Item = DirEntry<'a>> + 'a {
        let bytes = self.bytes;
        let mut at = 0;
        core::iter::from_fn(move || {
            let head = bytes.get(at..at + 2)?;
            let n = usize::from(head[1]);
            let name = bytes.get(at + 2..at + 2 + n)?;
            at += 2 + n;
            Some(DirEntry {
                kind: FileKind::from_code(head[0]).ok()?,
                name,
            })
        })
    }
}

/// Builds a listing in a buffer, as many entries as fit.
pub struct DirWriter<'b> {
    buf: &'b mut [u8],
    used: usize,
    count: u16,
}

impl<'b> DirWriter<'b> {
    /// Entries go into `buf`; a ListDir reply holds at most [`DirWriter::CAPACITY`] bytes of
    /// them.
    pub fn new(buf: &'b mut [u8]) -> DirWriter<'b> {
        DirWriter {
            buf,
            used: 0,
            count: 0,
        }
    }

    /// Bytes of entries one reply carries.
    pub const CAPACITY: usize = MAX_BODY - listdir::ENTRIES;

    /// Adds an entry: `Ok(false)` when it does not fit (the caller ends the reply there),
    /// `Err` for a name that cannot be sent.
    pub fn push(&mut self, kind: FileKind, name: &[u8]) -> Result<bool, Error> {
        if !valid_name(name) {
            return Err(Error::BadValue);
        }
        let end = self.used + 2 + name.len();
        if end > self.buf.len().min(Self::CAPACITY) || self.count == u16::MAX {
            return Ok(false);
        }
        self.buf[self.used] = kind as u8;
        self.buf[self.used + 1] = name.len() as u8;
        self.buf[self.used + 2..end].copy_from_slice(name);
        self.used = end;
        self.count += 1;
        Ok(true)
    }

    pub fn finish(self) -> DirEntries<'b> {
        DirEntries {
            bytes: &self.buf[..self.used],
            count: self.count,
        }
    }
}

/// A successful reply, one variant per [`crate::Op`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    Null {
        payload: &'a [u8],
    },
    /// The delegate's CLOCK_REALTIME and CLOCK_MONOTONIC, in nanoseconds.
    Clock {
        realtime_ns: i64,
        monotonic_ns: u64,
    },
    /// The new handle and the file's size.
    Open {
        handle: u32,
        size: u64,
    },
    Close,
    Pread(Read<'a>),
    /// Bytes written.
    Pwrite {
        count: u32,
    },
    Fstat(Stat),
    Fsync,
    Mkdir,
    Unlink,
    /// Entries from the request's cookie on, and the cookie of the next (0: the listing is
    /// complete).
    ListDir {
        next: u32,
        entries: DirEntries<'a>,
    },
    Log,
    MapRegion(RegionInfo),
    UnmapRegion,
    Goodbye,
}

mod clock {
    use crate::Field;
    pub const REALTIME: Field = 0..8;
    pub const MONOTONIC: Field = 8..16;
    pub const LEN: usize = 16;
}
mod open {
    use crate::Field;
    pub const HANDLE: Field = 0..4;
    pub const RESERVED: Field = 4..8;
    pub const SIZE: Field = 8..16;
    pub const LEN: usize = 16;
}
mod pread {
    use crate::Field;
    pub const COUNT: Field = 0..4;
    pub const PLACE: usize = 4;
    pub const RESERVED: Field = 5..8;
    pub const DATA: usize = 8;
}
mod pwrite {
    use crate::Field;
    pub const COUNT: Field = 0..4;
    pub const LEN: usize = 4;
}
mod stat {
    use crate::Field;
    pub const SIZE: Field = 0..8;
    pub const MTIME_S: Field = 8..16;
    pub const MTIME_NS: Field = 16..20;
    pub const KIND: usize = 20;
    pub const RESERVED: usize = 21;
    pub const PERM: Field = 22..24;
    pub const LEN: usize = 24;
}
mod listdir {
    use crate::Field;
    pub const NEXT: Field = 0..4;
    pub const COUNT: Field = 4..6;
    pub const RESERVED: Field = 6..8;
    pub const ENTRIES: usize = 8;
}
mod region {
    use crate::Field;
    pub const REGION: Field = 0..4;
    pub const RKEY: Field = 4..8;
    pub const ADDR: Field = 8..16;
    pub const LEN: Field = 16..24;
    pub const ACCESS: usize = 24;
    pub const RESERVED: Field = 25..32;
    pub const SIZE: usize = 32;
}
const FAILURE_DETAIL: crate::Field = 0..4;

const INLINE: u8 = 0;
const REMOTE: u8 = 1;
const PERM_MAX: u16 = 0o7777;
const NS_PER_S: u32 = 1_000_000_000;

fn exactly(b: &[u8], len: usize) -> Result<(), Error> {
    match b.len() {
        n if n < len => Err(Error::Truncated),
        n if n > len => Err(Error::TooLong),
        _ => Ok(()),
    }
}

impl<'a> Reply<'a> {
    pub fn op(&self) -> Op {
        match self {
            Reply::Null { .. } => Op::Null,
            Reply::Clock { .. } => Op::Clock,
            Reply::Open { .. } => Op::Open,
            Reply::Close => Op::Close,
            Reply::Pread(_) => Op::Pread,
            Reply::Pwrite { .. } => Op::Pwrite,
            Reply::Fstat(_) => Op::Fstat,
            Reply::Fsync => Op::Fsync,
            Reply::Mkdir => Op::Mkdir,
            Reply::Unlink => Op::Unlink,
            Reply::ListDir { .. } => Op::ListDir,
            Reply::Log => Op::Log,
            Reply::MapRegion(_) => Op::MapRegion,
            Reply::UnmapRegion => Op::UnmapRegion,
            Reply::Goodbye => Op::Goodbye,
        }
    }

    /// Parses a checked packet as a reply: `Ok(Err(failure))` for a failed call (whose op
    /// code may be one this crate does not know, or 0), `Ok(Ok(reply))` for a success.
    pub fn parse(packet: &Packet<&'a [u8]>) -> Result<Result<Reply<'a>, Failure>, Error> {
        if !packet.is_reply() {
            return Err(Error::WrongDirection);
        }
        let b = packet.body_ref();
        if packet.status() != 0 {
            let code = ErrorCode::from_code(packet.status()).ok_or(Error::BadValue)?;
            exactly(b, FAILURE_DETAIL.end)?;
            return Ok(Err(Failure::new(code, u32_at(b, FAILURE_DETAIL))));
        }
        let op = packet.op()?;
        let empty = |r: Reply<'a>| exactly(b, 0).map(|_| r);
        Ok(Ok(match op {
            Op::Null => {
                if b.len() > MAX_INLINE {
                    return Err(Error::TooLarge);
                }
                Reply::Null { payload: b }
            }
            Op::Clock => {
                exactly(b, clock::LEN)?;
                Reply::Clock {
                    realtime_ns: u64_at(b, clock::REALTIME) as i64,
                    monotonic_ns: u64_at(b, clock::MONOTONIC),
                }
            }
            Op::Open => {
                exactly(b, open::LEN)?;
                if !zero(b, open::RESERVED) {
                    return Err(Error::Reserved);
                }
                Reply::Open {
                    handle: u32_at(b, open::HANDLE),
                    size: u64_at(b, open::SIZE),
                }
            }
            Op::Pread => {
                use pread::*;
                if b.len() < DATA {
                    return Err(Error::Truncated);
                }
                if !zero(b, RESERVED) {
                    return Err(Error::Reserved);
                }
                let count = u32_at(b, COUNT);
                match u8_at(b, PLACE) {
                    INLINE => {
                        if count as usize > MAX_INLINE {
                            return Err(Error::TooLarge);
                        }
                        exactly(b, DATA + count as usize)?;
                        Reply::Pread(Read::Inline(&b[DATA..]))
                    }
                    REMOTE => {
                        exactly(b, DATA)?;
                        if count > MAX_TRANSFER {
                            return Err(Error::TooLarge);
                        }
                        Reply::Pread(Read::Remote(count))
                    }
                    _ => return Err(Error::BadValue),
                }
            }
            Op::Pwrite => {
                exactly(b, pwrite::LEN)?;
                let count = u32_at(b, pwrite::COUNT);
                if count > MAX_TRANSFER {
                    return Err(Error::TooLarge);
                }
                Reply::Pwrite { count }
            }
            Op::Fstat => {
                use stat::*;
                exactly(b, LEN)?;
                if u8_at(b, RESERVED) != 0 {
                    return Err(Error::Reserved);
                }
                let (perm, mtime_ns) = (u16_at(b, PERM), u32_at(b, MTIME_NS));
                if perm > PERM_MAX || mtime_ns >= NS_PER_S {
                    return Err(Error::BadValue);
                }
                Reply::Fstat(Stat {
                    size: u64_at(b, SIZE),
                    kind: FileKind::from_code(u8_at(b, KIND))?,
                    perm,
                    mtime_s: u64_at(b, MTIME_S) as i64,
                    mtime_ns,
                })
            }
            Op::ListDir => {
                use listdir::*;
                if b.len() < ENTRIES {
                    return Err(Error::Truncated);
                }
                if !zero(b, RESERVED) {
                    return Err(Error::Reserved);
                }
                let entries = DirEntries::parse(&b[ENTRIES..], u16_at(b, COUNT))?;
                Reply::ListDir {
                    next: u32_at(b, NEXT),
                    entries,
                }
            }
            Op::MapRegion => {
                use region::*;
                exactly(b, SIZE)?;
                if !zero(b, RESERVED) {
                    return Err(Error::Reserved);
                }
                let len = u64_at(b, LEN);
                if len == 0 {
                    return Err(Error::BadValue);
                }
                Reply::MapRegion(RegionInfo {
                    region: u32_at(b, REGION),
                    rkey: u32_at(b, RKEY),
                    addr: u64_at(b, ADDR),
                    len,
                    access: Access::from_bits(u8_at(b, ACCESS))?,
                })
            }
            Op::Close => empty(Reply::Close)?,
            Op::Fsync => empty(Reply::Fsync)?,
            Op::Mkdir => empty(Reply::Mkdir)?,
            Op::Unlink => empty(Reply::Unlink)?,
            Op::Log => empty(Reply::Log)?,
            Op::UnmapRegion => empty(Reply::UnmapRegion)?,
            Op::Goodbye => empty(Reply::Goodbye)?,
        }))
    }

    pub fn body_len(&self) -> usize {
        match self {
            Reply::Null { payload } => payload.len(),
            Reply::Clock { .. } => clock::LEN,
            Reply::Open { .. } => open::LEN,
            Reply::Pread(Read::Inline(d)) => pread::DATA + d.len(),
            Reply::Pread(Read::Remote(_)) => pread::DATA,
            Reply::Pwrite { .. } => pwrite::LEN,
            Reply::Fstat(_) => stat::LEN,
            Reply::ListDir { entries, .. } => listdir::ENTRIES + entries.bytes.len(),
            Reply::MapRegion(_) => region::SIZE,
            Reply::Close
            | Reply::Fsync
            | Reply::Mkdir
            | Reply::Unlink
            | Reply::Log
            | Reply::UnmapRegion
            | Reply::Goodbye => 0,
        }
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.body_len()
    }

    /// Writes the reply with `tag`; returns its length. Refuses what a receiver would refuse
    /// (so whatever it emits parses back) and a short buffer.
    pub fn emit(&self, tag: u32, buf: &mut [u8]) -> Result<usize, Error> {
        self.check()?;
        let total = self.buffer_len();
        if total > buf.len() {
            return Err(Error::Truncated);
        }
        let mut p = Packet::new_unchecked(&mut buf[..total]);
        p.emit_header(self.op(), true, tag, 0, total - HEADER_LEN);
        let b = p.body_mut();
        match *self {
            Reply::Null { payload } => b.copy_from_slice(payload),
            Reply::Clock {
                realtime_ns,
                monotonic_ns,
            } => {
                put_u64(b, clock::REALTIME, realtime_ns as u64);
                put_u64(b, clock::MONOTONIC, monotonic_ns);
            }
            Reply::Open { handle, size } => {
                put_u32(b, open::HANDLE, handle);
                b[open::RESERVED].fill(0);
                put_u64(b, open::SIZE, size);
            }
            Reply::Pread(read) => {
                b[pread::RESERVED].fill(0);
                put_u32(b, pread::COUNT, read.count());
                match read {
                    Read::Inline(d) => {
                        put_u8(b, pread::PLACE, INLINE);
                        b[pread::DATA..].copy_from_slice(d);
                    }
                    Read::Remote(_) => put_u8(b, pread::PLACE, REMOTE),
                }
            }
            Reply::Pwrite { count } => put_u32(b, pwrite::COUNT, count),
            Reply::Fstat(s) => {
                put_u64(b, stat::SIZE, s.size);
                put_u64(b, stat::MTIME_S, s.mtime_s as u64);
                put_u32(b, stat::MTIME_NS, s.mtime_ns);
                put_u8(b, stat::KIND, s.kind as u8);
                put_u8(b, stat::RESERVED, 0);
                put_u16(b, stat::PERM, s.perm);
            }
            Reply::ListDir { next, entries } => {
                put_u32(b, listdir::NEXT, next);
                put_u16(b, listdir::COUNT, entries.count);
                b[listdir::RESERVED].fill(0);
                b[listdir::ENTRIES..].copy_from_slice(entries.bytes);
            }
            Reply::MapRegion(r) => {
                put_u32(b, region::REGION, r.region);
                put_u32(b, region::RKEY, r.rkey);
                put_u64(b, region::ADDR, r.addr);
                put_u64(b, region::LEN, r.len);
                put_u8(b, region::ACCESS, r.access.bits());
                b[region::RESERVED].fill(0);
            }
            Reply::Close
            | Reply::Fsync
            | Reply::Mkdir
            | Reply::Unlink
            | Reply::Log
            | Reply::UnmapRegion
            | Reply::Goodbye => {}
        }
        Ok(total)
    }

    fn check(&self) -> Result<(), Error> {
        if self.body_len() > MAX_BODY {
            return Err(Error::TooLarge);
        }
        match *self {
            Reply::Null { payload } | Reply::Pread(Read::Inline(payload))
                if payload.len() > MAX_INLINE =>
            {
                Err(Error::TooLarge)
            }
            Reply::Pread(Read::Remote(n)) | Reply::Pwrite { count: n } if n > MAX_TRANSFER => {
                Err(Error::TooLarge)
            }
            Reply::Fstat(s) if s.perm > PERM_MAX || s.mtime_ns >= NS_PER_S => Err(Error::BadValue),
            Reply::ListDir { entries, .. } => {
                DirEntries::parse(entries.bytes, entries.count).map(|_| ())
            }
            Reply::MapRegion(r) if r.len == 0 => Err(Error::BadValue),
            Reply::MapRegion(r) => Access::from_bits(r.access.bits()).map(|_| ()),
            _ => Ok(()),
        }
    }
}
