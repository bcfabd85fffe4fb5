//! The delegation protocol: what an ibkern node and its Linux delegate say to each other
//! (docs/delegation.md). One definition for both ends: the kernel's client and the Linux
//! program `ibkern-delegate` each depend on this crate, never on each other.
//!
//! Two kinds of message:
//! - **Set-up** ([`connect`]): 64-byte UD datagrams on the rendezvous QP (docs/rendezvous.md's
//!   well-known Q_Key and `"IBKR"` header, a version of their own), by which a node asks for a
//!   connection and the delegate answers with its RC QP.
//! - **Calls** ([`Packet`], [`Request`], [`Reply`]): one SEND per request and per reply on the
//!   node's RC QP, a 16-byte header (magic, protocol version, op, tag, status, body length)
//!   and a body whose layout the op gives. Bulk data does not travel in them: a request names
//!   a buffer of the node's ([`Place::Remote`]: address and rkey) and the delegate moves the
//!   bytes with RDMA WRITE (pread) or RDMA READ (pwrite); regions ([`Request::MapRegion`]) are
//!   the delegate's memory, which the node reaches one-sided.
//!
//! Every view checks its length before it reads, every variable part has a bound
//! ([`MAX_MESSAGE`], [`MAX_PATH`], [`MAX_INLINE`], [`MAX_TRANSFER`], [`NAME_MAX`]), reserved
//! bytes must be zero, and parsing never panics: a message that is not exactly what this crate
//! emits is an [`Error`], which the delegate answers with [`Error::code`].
#![no_std]

#[cfg(test)]
extern crate std;

pub mod connect;
mod field;
mod header;
mod reply;
mod request;

pub use field::Field;
pub use header::{field as header_field, Packet, HEADER_LEN};
pub use reply::{
    DirEntries, DirEntry, DirWriter, Failure, FileKind, Read, RegionInfo, Reply, Stat,
};
pub use request::{Access, Backing, LogLevel, OpenFlags, Path, Place, Request, Source};

/// `"IBKD"`: the first four bytes of every call message.
pub const MAGIC: u32 = 0x4942_4B44;
/// The protocol version this crate speaks (byte 4 of every call message, and the version a
/// [`connect::Connect`] asks for).
pub const VERSION: u8 = 1;
/// Largest call message, header included: the receive buffers both ends post are this size.
pub const MAX_MESSAGE: usize = 4096;
/// Largest body.
pub const MAX_BODY: usize = MAX_MESSAGE - HEADER_LEN;
/// Longest path, in bytes (relative to the delegate's root).
pub const MAX_PATH: usize = 1024;
/// Longest name of a directory entry (Linux's NAME_MAX).
pub const NAME_MAX: usize = 255;
/// Most bytes carried inside a message (a null call's payload, inline pread/pwrite data, a log
/// line).
pub const MAX_INLINE: usize = 2048;
/// Most bytes one pread or pwrite moves by RDMA.
pub const MAX_TRANSFER: u32 = 1 << 20;

/// What a call asks for (byte 5 of the header; a reply sets bit 7, [`REPLY_BIT`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// Echo the payload.
    Null = 1,
    /// The delegate's wall time and monotonic clock.
    Clock = 2,
    /// Open or create a file under the root: a handle.
    Open = 3,
    Close = 4,
    Pread = 5,
    Pwrite = 6,
    Fstat = 7,
    Fsync = 8,
    Mkdir = 9,
    /// Remove a file or an empty directory.
    Unlink = 10,
    /// Names in a directory, a reply's worth at a time.
    ListDir = 11,
    /// A line for the delegate's log, tagged with the node.
    Log = 12,
    /// Map a file or anonymous memory and register it for the node's RDMA: address, length,
    /// rkey.
    MapRegion = 13,
    UnmapRegion = 14,
    /// The node is done: the delegate releases everything of it.
    Goodbye = 15,
}

/// Bit 7 of the kind byte: the message is a reply.
pub const REPLY_BIT: u8 = 0x80;

impl Op {
    /// Every op, in code order.
    pub const ALL: [Op; 15] = [
        Op::Null,
        Op::Clock,
        Op::Open,
        Op::Close,
        Op::Pread,
        Op::Pwrite,
        Op::Fstat,
        Op::Fsync,
        Op::Mkdir,
        Op::Unlink,
        Op::ListDir,
        Op::Log,
        Op::MapRegion,
        Op::UnmapRegion,
        Op::Goodbye,
    ];

    pub fn from_code(code: u8) -> Option<Op> {
        Op::ALL.iter().copied().find(|op| *op as u8 == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            Op::Null => "null",
            Op::Clock => "clock",
            Op::Open => "open",
            Op::Close => "close",
            Op::Pread => "pread",
            Op::Pwrite => "pwrite",
            Op::Fstat => "fstat",
            Op::Fsync => "fsync",
            Op::Mkdir => "mkdir",
            Op::Unlink => "unlink",
            Op::ListDir => "listdir",
            Op::Log => "log",
            Op::MapRegion => "map_region",
            Op::UnmapRegion => "unmap_region",
            Op::Goodbye => "goodbye",
        }
    }
}

/// Why a message does not parse. Each maps to the [`ErrorCode`] the delegate answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Shorter than its header or than its op's fixed fields.
    Truncated,
    /// Longer than [`MAX_MESSAGE`], or longer than its header and op say.
    TooLong,
    /// The header's body length is not the bytes that follow it.
    BadLength,
    BadMagic,
    /// A protocol version this crate does not speak.
    BadVersion(u8),
    /// An op code that is not an [`Op`].
    UnknownOp(u8),
    /// A reply where a request was expected, or the other way round.
    WrongDirection,
    /// A reserved byte or flag bit that is not zero.
    Reserved,
    /// A field holds a value outside its range (a place, a backing, a level, a status code).
    BadValue,
    /// A path that is empty, longer than [`MAX_PATH`] or holds a NUL byte.
    BadPath,
    /// An inline part longer than [`MAX_INLINE`], a transfer over [`MAX_TRANSFER`], a name over
    /// [`NAME_MAX`].
    TooLarge,
}

impl Error {
    /// The code a delegate answers this with.
    pub fn code(self) -> ErrorCode {
        match self {
            Error::BadVersion(_) => ErrorCode::UnsupportedVersion,
            Error::UnknownOp(_) => ErrorCode::UnknownOp,
            Error::BadPath => ErrorCode::BadPath,
            Error::TooLarge | Error::TooLong => ErrorCode::TooLarge,
            _ => ErrorCode::Malformed,
        }
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated => f.write_str("message truncated"),
            Error::TooLong => f.write_str("message longer than its fields"),
            Error::BadLength => f.write_str("body length does not match the message"),
            Error::BadMagic => f.write_str("bad magic"),
            Error::BadVersion(v) => write!(f, "unsupported protocol version {v}"),
            Error::UnknownOp(op) => write!(f, "unknown op {op}"),
            Error::WrongDirection => f.write_str("a reply where a request belongs, or the reverse"),
            Error::Reserved => f.write_str("reserved bits set"),
            Error::BadValue => f.write_str("a field out of its range"),
            Error::BadPath => f.write_str("path empty, too long or with a NUL byte"),
            Error::TooLarge => f.write_str("a length over its bound"),
        }
    }
}

/// The status of a reply (bytes 12..14 of the header): 0 is success, every other value one of
/// these, with a detail number in the body ([`Failure`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ErrorCode {
    /// The request did not parse (detail: 0).
    Malformed = 1,
    /// The header's protocol version is not spoken (detail: the highest version spoken).
    UnsupportedVersion = 2,
    /// The op code is unknown (detail: the code).
    UnknownOp = 3,
    /// A length, count or offset over its bound (detail: the bound).
    TooLarge = 4,
    /// No open file has this handle (detail: the handle).
    BadHandle = 5,
    /// No region has this number (detail: the number).
    BadRegion = 6,
    /// A path that is malformed or leaves the root: absolute, `..`, a symbolic link out of it.
    BadPath = 7,
    NotFound = 8,
    Exists = 9,
    /// The delegate's permissions refuse it, or the handle was not opened for it.
    PermissionDenied = 10,
    NotADirectory = 11,
    IsADirectory = 12,
    NotEmpty = 13,
    NoSpace = 14,
    /// The node holds as many open files or regions as the delegate allows (detail: the limit).
    TooMany = 15,
    /// The RDMA READ or WRITE to the node's buffer failed (detail: the completion status).
    RemoteAccess = 16,
    /// Any other failure of the delegate's system (detail: the errno).
    Io = 17,
    /// An argument out of its meaning: an offset past the end of a file for a region, a
    /// region's access bits the backing cannot grant (detail: 0).
    Invalid = 18,
    /// The delegate cannot allocate or register memory for it (detail: bytes asked).
    NoMemory = 19,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 19] = [
        ErrorCode::Malformed,
        ErrorCode::UnsupportedVersion,
        ErrorCode::UnknownOp,
        ErrorCode::TooLarge,
        ErrorCode::BadHandle,
        ErrorCode::BadRegion,
        ErrorCode::BadPath,
        ErrorCode::NotFound,
        ErrorCode::Exists,
        ErrorCode::PermissionDenied,
        ErrorCode::NotADirectory,
        ErrorCode::IsADirectory,
        ErrorCode::NotEmpty,
        ErrorCode::NoSpace,
        ErrorCode::TooMany,
        ErrorCode::RemoteAccess,
        ErrorCode::Io,
        ErrorCode::Invalid,
        ErrorCode::NoMemory,
    ];

    pub fn from_code(code: u16) -> Option<ErrorCode> {
        ErrorCode::ALL.iter().copied().find(|c| *c as u16 == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::Malformed => "malformed request",
            ErrorCode::UnsupportedVersion => "unsupported protocol version",
            ErrorCode::UnknownOp => "unknown op",
            ErrorCode::TooLarge => "over a bound",
            ErrorCode::BadHandle => "no such handle",
            ErrorCode::BadRegion => "no such region",
            ErrorCode::BadPath => "path refused",
            ErrorCode::NotFound => "not found",
            ErrorCode::Exists => "already exists",
            ErrorCode::PermissionDenied => "permission denied",
            ErrorCode::NotADirectory => "not a directory",
            ErrorCode::IsADirectory => "is a directory",
            ErrorCode::NotEmpty => "directory not empty",
            ErrorCode::NoSpace => "no space left",
            ErrorCode::TooMany => "too many open",
            ErrorCode::RemoteAccess => "remote access failed",
            ErrorCode::Io => "I/O error",
            ErrorCode::Invalid => "invalid argument",
            ErrorCode::NoMemory => "no memory",
        }
    }
}

impl core::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}
