//! Requests: what a node asks of its delegate, one [`Request`] per op with its body layout.

use crate::field::{put_u16, put_u32, put_u64, put_u8, u16_at, u32_at, u64_at, u8_at, zero};
use crate::header::{Packet, HEADER_LEN};
use crate::{Error, Field, Op, MAX_BODY, MAX_INLINE, MAX_PATH, MAX_TRANSFER};

/// A path relative to the delegate's root: 1 to [`MAX_PATH`] bytes, no NUL. Whether it stays
/// under the root is the delegate's check, made by the kernel's path resolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Path<'a>(&'a [u8]);

impl<'a> Path<'a> {
    pub fn new(bytes: &'a [u8]) -> Result<Path<'a>, Error> {
        if bytes.is_empty() || bytes.len() > MAX_PATH || bytes.contains(&0) {
            return Err(Error::BadPath);
        }
        Ok(Path(bytes))
    }

    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }
}

/// How a file is opened (a bit set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFlags(u32);

impl OpenFlags {
    pub const READ: OpenFlags = OpenFlags(1);
    pub const WRITE: OpenFlags = OpenFlags(2);
    /// Create the file if it does not exist.
    pub const CREATE: OpenFlags = OpenFlags(4);
    /// With CREATE: fail if it exists.
    pub const EXCLUSIVE: OpenFlags = OpenFlags(8);
    /// With WRITE: cut it to length 0.
    pub const TRUNCATE: OpenFlags = OpenFlags(16);
    const KNOWN: u32 = 31;

    /// The flags of these bits: unknown bits, neither READ nor WRITE, or CREATE/TRUNCATE
    /// without WRITE, EXCLUSIVE without CREATE are refused.
    pub fn from_bits(bits: u32) -> Result<OpenFlags, Error> {
        let f = OpenFlags(bits);
        if bits & !Self::KNOWN != 0 {
            return Err(Error::Reserved);
        }
        let rw = f.contains(Self::READ) || f.contains(Self::WRITE);
        let needs_write = f.contains(Self::CREATE) || f.contains(Self::TRUNCATE);
        if !rw
            || (needs_write && !f.contains(Self::WRITE))
            || (f.contains(Self::EXCLUSIVE) && !f.contains(Self::CREATE))
        {
            return Err(Error::BadValue);
        }
        Ok(f)
    }

    pub const fn bits(self) -> u32 {
        self.0
    }

    pub const fn contains(self, other: OpenFlags) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn union(self, other: OpenFlags) -> OpenFlags {
        OpenFlags(self.0 | other.0)
    }
}

/// The remote access a region grants (a bit set): what the node's RDMA may do to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access(u8);

impl Access {
    pub const READ: Access = Access(1);
    pub const WRITE: Access = Access(2);
    pub const ATOMIC: Access = Access(4);
    const KNOWN: u8 = 7;

    /// Unknown bits and an empty set are refused.
    pub fn from_bits(bits: u8) -> Result<Access, Error> {
        if bits & !Self::KNOWN != 0 {
            return Err(Error::Reserved);
        }
        if bits == 0 {
            return Err(Error::BadValue);
        }
        Ok(Access(bits))
    }

    pub const fn bits(self) -> u8 {
        self.0
    }

    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }

    /// True if the node may change the region (WRITE or atomics).
    pub const fn modifies(self) -> bool {
        self.0 & (Self::WRITE.0 | Self::ATOMIC.0) != 0
    }
}

/// Where a pread's bytes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// In the reply (at most [`MAX_INLINE`] bytes).
    Inline,
    /// The node's memory at `addr` under `rkey`, written by the delegate's RDMA WRITE (at most
    /// [`MAX_TRANSFER`] bytes).
    Remote { addr: u64, rkey: u32 },
}

/// Where a pwrite's bytes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source<'a> {
    /// In the request (at most [`MAX_INLINE`] bytes).
    Inline(&'a [u8]),
    /// `len` bytes of the node's memory at `addr` under `rkey`, read by the delegate's RDMA
    /// READ (at most [`MAX_TRANSFER`]).
    Remote { addr: u64, rkey: u32, len: u32 },
}

impl Source<'_> {
    pub fn len(&self) -> u32 {
        match self {
            Source::Inline(d) => d.len() as u32,
            Source::Remote { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a region holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing<'a> {
    /// Zeroed memory of `len` bytes.
    Anonymous { len: u64 },
    /// `len` bytes of a file from `offset` (page-aligned), shared: the node's writes land in
    /// the file.
    File {
        path: Path<'a>,
        offset: u64,
        len: u64,
    },
}

/// A log line's level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum LogLevel {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
}

impl LogLevel {
    pub fn from_code(c: u8) -> Result<LogLevel, Error> {
        Ok(match c {
            1 => LogLevel::Error,
            2 => LogLevel::Warn,
            3 => LogLevel::Info,
            4 => LogLevel::Debug,
            _ => return Err(Error::BadValue),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
        }
    }
}

/// A request, one variant per [`Op`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// Echo `payload` (at most [`MAX_INLINE`] bytes).
    Null {
        payload: &'a [u8],
    },
    Clock,
    /// Open `path` (`mode`: the permission bits, 0..=0o777, for a file it creates).
    Open {
        flags: OpenFlags,
        mode: u16,
        path: Path<'a>,
    },
    Close {
        handle: u32,
    },
    /// Read up to `len` bytes from `offset` into `place`.
    Pread {
        handle: u32,
        offset: u64,
        len: u32,
        place: Place,
    },
    Pwrite {
        handle: u32,
        offset: u64,
        source: Source<'a>,
    },
    Fstat {
        handle: u32,
    },
    Fsync {
        handle: u32,
    },
    Mkdir {
        mode: u16,
        path: Path<'a>,
    },
    /// Remove a file, or an empty directory when `dir`.
    Unlink {
        dir: bool,
        path: Path<'a>,
    },
    /// Names of the directory `path` (`.` is the root) from position `cookie` (0 first; a
    /// reply gives the next).
    ListDir {
        cookie: u32,
        path: Path<'a>,
    },
    Log {
        level: LogLevel,
        text: &'a [u8],
    },
    MapRegion {
        access: Access,
        backing: Backing<'a>,
    },
    UnmapRegion {
        region: u32,
    },
    Goodbye,
}

/// Place codes of pread and pwrite.
const INLINE: u8 = 0;
const REMOTE: u8 = 1;
const ANONYMOUS: u8 = 0;
const FILE: u8 = 1;

/// Body layouts (offsets in the body).
mod body {
    use crate::Field;

    pub mod open {
        use super::Field;
        pub const FLAGS: Field = 0..4;
        pub const MODE: Field = 4..6;
        pub const PATH_LEN: Field = 6..8;
        pub const PATH: usize = 8;
    }
    /// Close, Fstat, Fsync, UnmapRegion.
    pub mod handle {
        use super::Field;
        pub const HANDLE: Field = 0..4;
        pub const LEN: usize = 4;
    }
    /// Pread and Pwrite; a pwrite's inline data follows.
    pub mod io {
        use super::Field;
        pub const HANDLE: Field = 0..4;
        pub const LEN: Field = 4..8;
        pub const OFFSET: Field = 8..16;
        pub const PLACE: usize = 16;
        pub const RESERVED: Field = 17..20;
        pub const RKEY: Field = 20..24;
        pub const ADDR: Field = 24..32;
        pub const DATA: usize = 32;
    }
    /// Mkdir (MODE_OR_FLAGS is the mode), Unlink (bit 0: a directory).
    pub mod path_op {
        use super::Field;
        pub const MODE_OR_FLAGS: Field = 0..2;
        pub const PATH_LEN: Field = 2..4;
        pub const PATH: usize = 4;
    }
    pub mod listdir {
        use super::Field;
        pub const COOKIE: Field = 0..4;
        pub const PATH_LEN: Field = 4..6;
        pub const RESERVED: Field = 6..8;
        pub const PATH: usize = 8;
    }
    pub mod log {
        use super::Field;
        pub const LEVEL: usize = 0;
        pub const RESERVED: usize = 1;
        pub const TEXT_LEN: Field = 2..4;
        pub const TEXT: usize = 4;
    }
    pub mod region {
        use super::Field;
        pub const ACCESS: usize = 0;
        pub const BACKING: usize = 1;
        pub const PATH_LEN: Field = 2..4;
        pub const RESERVED: Field = 4..8;
        pub const OFFSET: Field = 8..16;
        pub const LEN: Field = 16..24;
        pub const PATH: usize = 24;
    }
}

/// Most permission bits a mode may carry.
const MODE_MAX: u16 = 0o777;

fn need(b: &[u8], len: usize) -> Result<(), Error> {
    match b.len() {
        n if n < len => Err(Error::Truncated),
        n if n > len => Err(Error::TooLong),
        _ => Ok(()),
    }
}

fn at_least(b: &[u8], len: usize) -> Result<(), Error> {
    if b.len() < len {
        Err(Error::Truncated)
    } else {
        Ok(())
    }
}

/// The variable part of `b` at `from`, `len_field` bytes long, which must end the body.
fn tail(b: &[u8], from: usize, len_field: Field) -> Result<&[u8], Error> {
    at_least(b, from)?;
    let n = usize::from(u16_at(b, len_field));
    need(b, from + n)?;
    Ok(&b[from..])
}

fn mode(v: u16) -> Result<u16, Error> {
    if v > MODE_MAX {
        Err(Error::BadValue)
    } else {
        Ok(v)
    }
}

impl<'a> Request<'a> {
    pub fn op(&self) -> Op {
        match self {
            Request::Null { .. } => Op::Null,
            Request::Clock => Op::Clock,
            Request::Open { .. } => Op::Open,
            Request::Close { .. } => Op::Close,
            Request::Pread { .. } => Op::Pread,
            Request::Pwrite { .. } => Op::Pwrite,
            Request::Fstat { .. } => Op::Fstat,
            Request::Fsync { .. } => Op::Fsync,
            Request::Mkdir { .. } => Op::Mkdir,
            Request::Unlink { .. } => Op::Unlink,
            Request::ListDir { .. } => Op::ListDir,
            Request::Log { .. } => Op::Log,
            Request::MapRegion { .. } => Op::MapRegion,
            Request::UnmapRegion { .. } => Op::UnmapRegion,
            Request::Goodbye => Op::Goodbye,
        }
    }

    /// Parses a checked packet ([`Packet::new_checked`]) as a request; its tag is the packet's.
    pub fn parse(packet: &Packet<&'a [u8]>) -> Result<Request<'a>, Error> {
        if packet.is_reply() {
            return Err(Error::WrongDirection);
        }
        if packet.status() != 0 {
            return Err(Error::Reserved);
        }
        let op = packet.op()?;
        let b = packet.body_ref();
        Ok(match op {
            Op::Null => {
                if b.len() > MAX_INLINE {
                    return Err(Error::TooLarge);
                }
                Request::Null { payload: b }
            }
            Op::Clock => {
                need(b, 0)?;
                Request::Clock
            }
            Op::Goodbye => {
                need(b, 0)?;
                Request::Goodbye
            }
            Op::Open => {
                use body::open::*;
                let path = tail(b, PATH, PATH_LEN)?;
                Request::Open {
                    flags: OpenFlags::from_bits(u32_at(b, FLAGS))?,
                    mode: mode(u16_at(b, MODE))?,
                    path: Path::new(path)?,
                }
            }
            Op::Close | Op::Fstat | Op::Fsync | Op::UnmapRegion => {
                need(b, body::handle::LEN)?;
                let handle = u32_at(b, body::handle::HANDLE);
                match op {
                    Op::Close => Request::Close { handle },
                    Op::Fstat => Request::Fstat { handle },
                    Op::Fsync => Request::Fsync { handle },
                    _ => Request::UnmapRegion { region: handle },
                }
            }
            Op::Pread | Op::Pwrite => {
                use body::io::*;
                at_least(b, DATA)?;
                if !zero(b, RESERVED) {
                    return Err(Error::Reserved);
                }
                let handle = u32_at(b, HANDLE);
                let offset = u64_at(b, OFFSET);
                let len = u32_at(b, LEN);
                let (addr, rkey) = (u64_at(b, ADDR), u32_at(b, RKEY));
                let remote = match u8_at(b, PLACE) {
                    INLINE => {
                        if addr != 0 || rkey != 0 {
                            return Err(Error::Reserved);
                        }
                        if len as usize > MAX_INLINE {
                            return Err(Error::TooLarge);
                        }
                        false
                    }
                    REMOTE => {
                        if len > MAX_TRANSFER {
                            return Err(Error::TooLarge);
                        }
                        true
                    }
                    _ => return Err(Error::BadValue),
                };
                if op == Op::Pwrite && !remote {
                    need(b, DATA + len as usize)?;
                    let source = Source::Inline(&b[DATA..]);
                    Request::Pwrite {
                        handle,
                        offset,
                        source,
                    }
                } else {
                    need(b, DATA)?;
                    match (op, remote) {
                        (Op::Pread, false) => Request::Pread {
                            handle,
                            offset,
                            len,
                            place: Place::Inline,
                        },
                        (Op::Pread, true) => Request::Pread {
                            handle,
                            offset,
                            len,
                            place: Place::Remote { addr, rkey },
                        },
                        _ => Request::Pwrite {
                            handle,
                            offset,
                            source: Source::Remote { addr, rkey, len },
                        },
                    }
                }
            }
            Op::Mkdir | Op::Unlink => {
                use body::path_op::*;
                let path = Path::new(tail(b, PATH, PATH_LEN)?)?;
                let v = u16_at(b, MODE_OR_FLAGS);
                if op == Op::Mkdir {
                    Request::Mkdir {
                        mode: mode(v)?,
                        path,
                    }
                } else {
                    if v > 1 {
                        return Err(Error::Reserved);
                    }
                    Request::Unlink { dir: v == 1, path }
                }
            }
            Op::ListDir => {
                use body::listdir::*;
                let path = tail(b, PATH, PATH_LEN)?;
                if !zero(b, RESERVED) {
                    return Err(Error::Reserved);
                }
                Request::ListDir {
                    cookie: u32_at(b, COOKIE),
                    path: Path::new(path)?,
                }
            }
            Op::Log => {
                use body::log::*;
                let text = tail(b, TEXT, TEXT_LEN)?;
                if u8_at(b, RESERVED) != 0 {
                    return Err(Error::Reserved);
                }
                if text.len() > MAX_INLINE {
                    return Err(Error::TooLarge);
                }
                Request::Log {
                    level: LogLevel::from_code(u8_at(b, LEVEL))?,
                    text,
                }
            }
            Op::MapRegion => {
                use body::region::*;
                let path = tail(b, PATH, PATH_LEN)?;
                if !zero(b, RESERVED) {
                    return Err(Error::Reserved);
                }
                let access = Access::from_bits(u8_at(b, ACCESS))?;
                let (offset, len) = (u64_at(b, OFFSET), u64_at(b, LEN));
                if len == 0 {
                    return Err(Error::BadValue);
                }
                let backing = match u8_at(b, BACKING) {
                    ANONYMOUS => {
                        if !path.is_empty() || offset != 0 {
                            return Err(Error::Reserved);
                        }
                        Backing::Anonymous { len }
                    }
                    FILE => Backing::File {
                        path: Path::new(path)?,
                        offset,
                        len,
                    },
                    _ => return Err(Error::BadValue),
                };
                Request::MapRegion { access, backing }
            }
        })
    }

    /// Bytes of the body this request emits.
    pub fn body_len(&self) -> usize {
        match self {
            Request::Null { payload } => payload.len(),
            Request::Clock | Request::Goodbye => 0,
            Request::Open { path, .. } => body::open::PATH + path.0.len(),
            Request::Close { .. }
            | Request::Fstat { .. }
            | Request::Fsync { .. }
            | Request::UnmapRegion { .. } => body::handle::LEN,
            Request::Pread { .. } => body::io::DATA,
            Request::Pwrite { source, .. } => match source {
                Source::Inline(d) => body::io::DATA + d.len(),
                Source::Remote { .. } => body::io::DATA,
            },
            Request::Mkdir { path, .. } | Request::Unlink { path, .. } => {
                body::path_op::PATH + path.0.len()
            }
            Request::ListDir { path, .. } => body::listdir::PATH + path.0.len(),
            Request::Log { text, .. } => body::log::TEXT + text.len(),
            Request::MapRegion { backing, .. } => {
                body::region::PATH
                    + match backing {
                        Backing::Anonymous { .. } => 0,
                        Backing::File { path, .. } => path.0.len(),
                    }
            }
        }
    }

    /// Bytes of the whole message.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.body_len()
    }

    /// Writes the message with `tag` into the start of `buf`; returns its length. Refuses what
    /// a receiver would refuse (a bound exceeded, a bad mode or flags) and a short buffer, so
    /// whatever it emits parses back to `self`.
    pub fn emit(&self, tag: u32, buf: &mut [u8]) -> Result<usize, Error> {
        self.check()?;
        let total = self.buffer_len();
        if total > buf.len() {
            return Err(Error::Truncated);
        }
        let mut p = Packet::new_unchecked(&mut buf[..total]);
        p.emit_header(self.op(), false, tag, 0, total - HEADER_LEN);
        let b = p.body_mut();
        match *self {
            Request::Null { payload } => b.copy_from_slice(payload),
            Request::Clock | Request::Goodbye => {}
            Request::Open { flags, mode, path } => {
                use body::open::*;
                put_u32(b, FLAGS, flags.bits());
                put_u16(b, MODE, mode);
                put_path(b, PATH_LEN, PATH, path);
            }
            Request::Close { handle }
            | Request::Fstat { handle }
            | Request::Fsync { handle }
            | Request::UnmapRegion { region: handle } => put_u32(b, body::handle::HANDLE, handle),
            Request::Pread {
                handle,
                offset,
                len,
                place,
            } => {
                let (code, addr, rkey) = match place {
                    Place::Inline => (INLINE, 0, 0),
                    Place::Remote { addr, rkey } => (REMOTE, addr, rkey),
                };
                put_io(b, handle, offset, len, code, addr, rkey);
            }
            Request::Pwrite {
                handle,
                offset,
                source,
            } => match source {
                Source::Inline(d) => {
                    put_io(b, handle, offset, d.len() as u32, INLINE, 0, 0);
                    b[body::io::DATA..].copy_from_slice(d);
                }
                Source::Remote { addr, rkey, len } => {
                    put_io(b, handle, offset, len, REMOTE, addr, rkey)
                }
            },
            Request::Mkdir { mode, path } => {
                use body::path_op::*;
                put_u16(b, MODE_OR_FLAGS, mode);
                put_path(b, PATH_LEN, PATH, path);
            }
            Request::Unlink { dir, path } => {
                use body::path_op::*;
                put_u16(b, MODE_OR_FLAGS, u16::from(dir));
                put_path(b, PATH_LEN, PATH, path);
            }
            Request::ListDir { cookie, path } => {
                use body::listdir::*;
                put_u32(b, COOKIE, cookie);
                b[RESERVED].fill(0);
                put_path(b, PATH_LEN, PATH, path);
            }
            Request::Log { level, text } => {
                use body::log::*;
                put_u8(b, LEVEL, level as u8);
                put_u8(b, RESERVED, 0);
                put_u16(b, TEXT_LEN, text.len() as u16);
                b[TEXT..].copy_from_slice(text);
            }
            Request::MapRegion { access, backing } => {
                use body::region::*;
                put_u8(b, ACCESS, access.bits());
                b[RESERVED].fill(0);
                match backing {
                    Backing::Anonymous { len } => {
                        put_u8(b, BACKING, ANONYMOUS);
                        put_u16(b, PATH_LEN, 0);
                        put_u64(b, OFFSET, 0);
                        put_u64(b, LEN, len);
                    }
                    Backing::File { path, offset, len } => {
                        put_u8(b, BACKING, FILE);
                        put_u64(b, OFFSET, offset);
                        put_u64(b, LEN, len);
                        put_path(b, PATH_LEN, PATH, path);
                    }
                }
            }
        }
        Ok(total)
    }

    /// What [`Request::parse`] would refuse in this value.
    fn check(&self) -> Result<(), Error> {
        if self.body_len() > MAX_BODY {
            return Err(Error::TooLarge);
        }
        match *self {
            Request::Null { payload } if payload.len() > MAX_INLINE => Err(Error::TooLarge),
            Request::Log { text, .. } if text.len() > MAX_INLINE => Err(Error::TooLarge),
            Request::Open {
                flags,
                mode: m,
                path,
            } => {
                OpenFlags::from_bits(flags.bits())?;
                mode(m)?;
                Path::new(path.0).map(|_| ())
            }
            Request::Mkdir { mode: m, path } => {
                mode(m)?;
                Path::new(path.0).map(|_| ())
            }
            Request::Unlink { path, .. } | Request::ListDir { path, .. } => {
                Path::new(path.0).map(|_| ())
            }
            Request::Pread {
                len,
                place: Place::Inline,
                ..
            } if len as usize > MAX_INLINE => Err(Error::TooLarge),
            Request::Pread {
                len,
                place: Place::Remote { .. },
                ..
            } if len > MAX_TRANSFER => Err(Error::TooLarge),
            Request::Pwrite {
                source: Source::Inline(d),
                ..
            } if d.len() > MAX_INLINE => Err(Error::TooLarge),
            Request::Pwrite {
                source: Source::Remote { len, .. },
                ..
            } if len > MAX_TRANSFER => Err(Error::TooLarge),
            Request::MapRegion { access, backing } => {
                Access::from_bits(access.bits())?;
                match backing {
                    Backing::Anonymous { len: 0 } | Backing::File { len: 0, .. } => {
                        Err(Error::BadValue)
                    }
                    Backing::File { path, .. } => Path::new(path.0).map(|_| ()),
                    Backing::Anonymous { .. } => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }
}

fn put_path(b: &mut [u8], len_field: Field, at: usize, path: Path<'_>) {
    put_u16(b, len_field, path.0.len() as u16);
    b[at..at + path.0.len()].copy_from_slice(path.0);
}

fn put_io(b: &mut [u8], handle: u32, offset: u64, len: u32, place: u8, addr: u64, rkey: u32) {
    use body::io::*;
    put_u32(b, HANDLE, handle);
    put_u32(b, LEN, len);
    put_u64(b, OFFSET, offset);
    put_u8(b, PLACE, place);
    b[RESERVED].fill(0);
    put_u32(b, RKEY, rkey);
    put_u64(b, ADDR, addr);
}
