//! The mpqemu wire format: framing, decoding and the RET reply.
//!
//! Every message is a 16-byte header (`i32 cmd`, `u32` padding, `u64 size`) followed by `size`
//! payload bytes, in host byte order (this module only builds for little-endian x86_64 hosts in
//! practice, and encodes explicitly little-endian). File descriptors ride as one `SCM_RIGHTS`
//! control message on the `sendmsg` that carries the header. See `docs/mpqemu.md`.

use std::fmt;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// Length of the message header.
pub const HEADER_LEN: usize = 16;
/// Largest payload QEMU sends (the SYNC_SYSMEM region table).
pub const MAX_PAYLOAD: usize = 192;
/// Most file descriptors one message can carry (QEMU's `REMOTE_MAX_FDS`).
pub const MAX_FDS: usize = 8;

const SYNC_SYSMEM: i32 = 0;
const RET: i32 = 1;
const PCI_CFGWRITE: i32 = 2;
const PCI_CFGREAD: i32 = 3;
const BAR_WRITE: i32 = 4;
const BAR_READ: i32 = 5;
const SET_IRQFD: i32 = 6;
const DEVICE_RESET: i32 = 7;

const CFG_PAYLOAD: usize = 12;
const BAR_PAYLOAD: usize = 24;
/// Size of conventional PCI configuration space, the only part QEMU forwards.
pub const CONFIG_SPACE_LEN: u32 = 256;

/// The value QEMU treats as a failed request when it comes back in a RET.
pub const RET_ERROR: u64 = u64::MAX;

/// One guest RAM region of a SYNC_SYSMEM message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SysmemRegion {
    /// Guest-physical address of the region's first byte.
    pub gpa: u64,
    /// Length in bytes.
    pub size: u64,
    /// Offset of the region's first byte inside the file descriptor.
    pub fd_offset: i64,
}

/// A decoded request from QEMU.
#[derive(Debug)]
pub enum Request {
    /// The complete list of guest RAM regions, each with its own fresh descriptor. No reply.
    SyncSysmem(Vec<(SysmemRegion, OwnedFd)>),
    /// Configuration-space write. Reply: RET 0.
    CfgWrite { offset: u16, len: u8, value: u32 },
    /// Configuration-space read. Reply: RET with the value in the low 32 bits.
    CfgRead { offset: u16, len: u8 },
    /// BAR write at an absolute guest-physical address (or I/O port). Reply: RET 0.
    BarWrite {
        addr: u64,
        len: u8,
        value: u64,
        memory: bool,
    },
    /// BAR read at an absolute guest-physical address (or I/O port). Reply: RET value.
    BarRead { addr: u64, len: u8, memory: bool },
    /// The KVM irqfd and its resample fd. No reply.
    SetIrqfd { irqfd: OwnedFd, resamplefd: OwnedFd },
    /// Device reset. Reply: RET 0.
    DeviceReset,
}

impl Request {
    /// Whether QEMU waits for a RET to this request.
    pub fn expects_reply(&self) -> bool {
        !matches!(self, Request::SyncSysmem(_) | Request::SetIrqfd { .. })
    }
}

/// Why a message from QEMU could not be accepted. Any of these ends the connection: after a
/// malformed message the stream can no longer be trusted to be in step.
#[derive(Debug)]
pub enum ProtocolError {
    /// The socket failed.
    Io(io::Error),
    /// The peer closed the stream in the middle of a message.
    Truncated { wanted: usize, got: usize },
    /// The rest of a message did not arrive within the connection's stall timeout.
    Stalled { wanted: usize, got: usize },
    /// More descriptors than fit the control buffer (more than [`MAX_FDS`]).
    ControlTruncated,
    /// A command number outside 0..=7.
    UnknownCommand(i32),
    /// RET travels only from the model to QEMU.
    UnexpectedRet,
    /// A payload longer than any valid message.
    PayloadTooLarge(u64),
    /// A payload whose size does not match its command.
    BadPayloadSize {
        command: &'static str,
        size: usize,
        expected: usize,
    },
    /// A descriptor count that does not match the command.
    BadFdCount {
        command: &'static str,
        got: usize,
        expected: &'static str,
    },
    /// A configuration access outside conventional config space or of a width other than 1, 2, 4.
    BadConfigAccess { offset: u32, len: i32 },
    /// A BAR access of a width other than 1, 2, 4 or 8.
    BadBarAccess { addr: u64, size: u32 },
    /// A SYNC_SYSMEM region that is empty, wraps, has a negative offset or overlaps another.
    BadRegion {
        index: usize,
        region: SysmemRegion,
        why: &'static str,
    },
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtocolError::Io(e) => write!(f, "socket error: {e}"),
            ProtocolError::Truncated { wanted, got } => {
                write!(
                    f,
                    "stream closed inside a message ({got} of {wanted} bytes)"
                )
            }
            ProtocolError::Stalled { wanted, got } => {
                write!(f, "peer stalled inside a message ({got} of {wanted} bytes)")
            }
            ProtocolError::ControlTruncated => {
                write!(f, "more than {MAX_FDS} file descriptors on one message")
            }
            ProtocolError::UnknownCommand(c) => write!(f, "unknown command {c}"),
            ProtocolError::UnexpectedRet => {
                write!(f, "RET received from QEMU (only the model sends RET)")
            }
            ProtocolError::PayloadTooLarge(s) => {
                write!(f, "payload of {s} bytes (at most {MAX_PAYLOAD} are valid)")
            }
            ProtocolError::BadPayloadSize {
                command,
                size,
                expected,
            } => {
                write!(
                    f,
                    "{command} with a {size}-byte payload (expected {expected})"
                )
            }
            ProtocolError::BadFdCount {
                command,
                got,
                expected,
            } => {
                write!(
                    f,
                    "{command} carrying {got} file descriptors (expected {expected})"
                )
            }
            ProtocolError::BadConfigAccess { offset, len } => {
                write!(f, "config access of {len} bytes at {offset:#x} (outside 256-byte config space or bad width)")
            }
            ProtocolError::BadBarAccess { addr, size } => {
                write!(
                    f,
                    "BAR access of {size} bytes at {addr:#x} (width must be 1, 2, 4 or 8)"
                )
            }
            ProtocolError::BadRegion { index, region, why } => write!(
                f,
                "SYNC_SYSMEM region {index} (gpa {:#x}, size {:#x}, fd offset {:#x}): {why}",
                region.gpa, region.size, region.fd_offset
            ),
        }
    }
}

impl std::error::Error for ProtocolError {}

impl From<io::Error> for ProtocolError {
    fn from(e: io::Error) -> Self {
        ProtocolError::Io(e)
    }
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn expect_size(
    command: &'static str,
    payload: &[u8],
    expected: usize,
) -> Result<(), ProtocolError> {
    if payload.len() == expected {
        Ok(())
    } else {
        Err(ProtocolError::BadPayloadSize {
            command,
            size: payload.len(),
            expected,
        })
    }
}

fn expect_fds(
    command: &'static str,
    fds: &[OwnedFd],
    ok: impl Fn(usize) -> bool,
    expected: &'static str,
) -> Result<(), ProtocolError> {
    if ok(fds.len()) {
        Ok(())
    } else {
        Err(ProtocolError::BadFdCount {
            command,
            got: fds.len(),
            expected,
        })
    }
}

fn decode_cfg(command: &'static str, payload: &[u8]) -> Result<(u16, u8, u32), ProtocolError> {
    expect_size(command, payload, CFG_PAYLOAD)?;
    let offset = le_u32(payload, 0);
    let value = le_u32(payload, 4);
    let len = le_u32(payload, 8) as i32;
    let width_ok = matches!(len, 1 | 2 | 4);
    if !width_ok
        || offset
            .checked_add(len as u32)
            .is_none_or(|end| end > CONFIG_SPACE_LEN)
    {
        return Err(ProtocolError::BadConfigAccess { offset, len });
    }
    Ok((offset as u16, len as u8, value))
}

fn decode_bar(
    command: &'static str,
    payload: &[u8],
) -> Result<(u64, u8, u64, bool), ProtocolError> {
    expect_size(command, payload, BAR_PAYLOAD)?;
    let addr = le_u64(payload, 0);
    let value = le_u64(payload, 8);
    let size = le_u32(payload, 16);
    let memory = payload[20] != 0;
    if !matches!(size, 1 | 2 | 4 | 8) {
        return Err(ProtocolError::BadBarAccess { addr, size });
    }
    Ok((addr, size as u8, value, memory))
}

fn decode_sysmem(payload: &[u8], fds: Vec<OwnedFd>) -> Result<Request, ProtocolError> {
    const NAME: &str = "SYNC_SYSMEM";
    expect_size(NAME, payload, MAX_PAYLOAD)?;
    expect_fds(NAME, &fds, |n| (1..=MAX_FDS).contains(&n), "1 to 8")?;
    let mut regions: Vec<(SysmemRegion, OwnedFd)> = Vec::with_capacity(fds.len());
    for (index, fd) in fds.into_iter().enumerate() {
        let region = SysmemRegion {
            gpa: le_u64(payload, index * 8),
            size: le_u64(payload, 64 + index * 8),
            fd_offset: le_u64(payload, 128 + index * 8) as i64,
        };
        let bad = |why| ProtocolError::BadRegion { index, region, why };
        if region.size == 0 {
            return Err(bad("empty"));
        }
        let Some(end) = region.gpa.checked_add(region.size) else {
            return Err(bad("wraps past the end of the address space"));
        };
        if region.fd_offset < 0 {
            return Err(bad("negative file offset"));
        }
        if usize::try_from(region.size).is_err() {
            return Err(bad("larger than this host can map"));
        }
        if regions
            .iter()
            .any(|(r, _)| region.gpa < r.gpa + r.size && r.gpa < end)
        {
            return Err(bad("overlaps an earlier region"));
        }
        regions.push((region, fd));
    }
    Ok(Request::SyncSysmem(regions))
}

/// Decodes one message from its command number, payload and the descriptors that came with it.
pub fn decode(cmd: i32, payload: &[u8], fds: Vec<OwnedFd>) -> Result<Request, ProtocolError> {
    let no_fds = |name: &'static str, fds: &[OwnedFd]| expect_fds(name, fds, |n| n == 0, "none");
    match cmd {
        SYNC_SYSMEM => decode_sysmem(payload, fds),
        RET => Err(ProtocolError::UnexpectedRet),
        PCI_CFGWRITE => {
            no_fds("PCI_CFGWRITE", &fds)?;
            let (offset, len, value) = decode_cfg("PCI_CFGWRITE", payload)?;
            Ok(Request::CfgWrite { offset, len, value })
        }
        PCI_CFGREAD => {
            no_fds("PCI_CFGREAD", &fds)?;
            let (offset, len, _) = decode_cfg("PCI_CFGREAD", payload)?;
            Ok(Request::CfgRead { offset, len })
        }
        BAR_WRITE => {
            no_fds("BAR_WRITE", &fds)?;
            let (addr, len, value, memory) = decode_bar("BAR_WRITE", payload)?;
            Ok(Request::BarWrite {
                addr,
                len,
                value,
                memory,
            })
        }
        BAR_READ => {
            no_fds("BAR_READ", &fds)?;
            let (addr, len, _, memory) = decode_bar("BAR_READ", payload)?;
            Ok(Request::BarRead { addr, len, memory })
        }
        SET_IRQFD => {
            expect_size("SET_IRQFD", payload, 0)?;
            expect_fds("SET_IRQFD", &fds, |n| n == 2, "2")?;
            let mut it = fds.into_iter();
            match (it.next(), it.next()) {
                (Some(irqfd), Some(resamplefd)) => Ok(Request::SetIrqfd { irqfd, resamplefd }),
                _ => Err(ProtocolError::BadFdCount {
                    command: "SET_IRQFD",
                    got: 0,
                    expected: "2",
                }),
            }
        }
        DEVICE_RESET => {
            no_fds("DEVICE_RESET", &fds)?;
            expect_size("DEVICE_RESET", payload, 0)?;
            Ok(Request::DeviceReset)
        }
        other => Err(ProtocolError::UnknownCommand(other)),
    }
}

/// Encodes a header (used for replies and by scripted clients in tests).
pub fn encode_header(cmd: i32, size: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&cmd.to_le_bytes());
    h[8..16].copy_from_slice(&size.to_le_bytes());
    h
}

/// Encodes a RET message carrying `value`.
pub fn encode_ret(value: u64) -> [u8; HEADER_LEN + 8] {
    let mut m = [0u8; HEADER_LEN + 8];
    m[..HEADER_LEN].copy_from_slice(&encode_header(RET, 8));
    m[HEADER_LEN..].copy_from_slice(&value.to_le_bytes());
    m
}

/// Sends a RET. Uses `MSG_NOSIGNAL` so a vanished peer is an error, not a SIGPIPE.
pub fn send_ret(sock: &UnixStream, value: u64) -> io::Result<()> {
    send_all(sock, &encode_ret(value))
}

/// Writes all of `bytes` with `send(MSG_NOSIGNAL)`.
pub fn send_all(sock: &UnixStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: the pointer and length describe the live `bytes` slice; send does not retain it.
        let n = unsafe {
            libc::send(
                sock.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// A raw message as it came off the socket, before decoding.
pub struct RawMessage {
    pub cmd: i32,
    pub payload: Vec<u8>,
    pub fds: Vec<OwnedFd>,
}

/// Space for one SCM_RIGHTS message with [`MAX_FDS`] descriptors, suitably aligned.
#[repr(C, align(8))]
struct ControlBuffer([u8; 64]);

/// Receives one message. `Ok(None)` is a clean end of stream between messages.
pub fn recv_message(sock: &UnixStream) -> Result<Option<RawMessage>, ProtocolError> {
    let mut header = [0u8; HEADER_LEN];
    let mut got = 0usize;
    let mut fds: Vec<OwnedFd> = Vec::new();
    let stalled = |e: ProtocolError, wanted: usize, got: usize| match e {
        ProtocolError::Io(io)
            if matches!(
                io.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            ProtocolError::Stalled { wanted, got }
        }
        e => e,
    };
    while got < HEADER_LEN {
        let n = recv_with_fds(sock, &mut header[got..], &mut fds)
            .map_err(|e| stalled(e, HEADER_LEN, got))?;
        if n == 0 {
            if got == 0 && fds.is_empty() {
                return Ok(None);
            }
            return Err(ProtocolError::Truncated {
                wanted: HEADER_LEN,
                got,
            });
        }
        got += n;
    }
    let cmd = le_u32(&header, 0) as i32;
    let size = le_u64(&header, 8);
    if size > MAX_PAYLOAD as u64 {
        return Err(ProtocolError::PayloadTooLarge(size));
    }
    let mut payload = vec![0u8; size as usize];
    let mut filled = 0usize;
    let mut reader = sock;
    while filled < payload.len() {
        match reader.read(&mut payload[filled..]) {
            Ok(0) => {
                return Err(ProtocolError::Truncated {
                    wanted: HEADER_LEN + payload.len(),
                    got: HEADER_LEN + filled,
                })
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(stalled(
                    e.into(),
                    HEADER_LEN + payload.len(),
                    HEADER_LEN + filled,
                ))
            }
        }
    }
    Ok(Some(RawMessage { cmd, payload, fds }))
}

/// One `recvmsg` into `buf`, appending any received descriptors to `fds` (close-on-exec).
fn recv_with_fds(
    sock: &UnixStream,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> Result<usize, ProtocolError> {
    let mut control = ControlBuffer([0u8; 64]);
    // SAFETY: CMSG_SPACE is a pure size computation.
    let control_len =
        unsafe { libc::CMSG_SPACE((MAX_FDS * size_of::<libc::c_int>()) as u32) } as usize;
    debug_assert!(control_len <= control.0.len());
    loop {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: msghdr is plain old data; all-zero is a valid empty value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = control_len as _;
        // SAFETY: msg points at a live iovec over `buf` and at `control`, both valid for the
        // lengths given, for the duration of the call.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e.into());
        }
        // Take ownership of whatever descriptors arrived before judging the message, so none leak.
        // SAFETY: the kernel filled `control` up to msg_controllen with well-formed cmsg headers;
        // the CMSG_* macros walk only within that length. Each SCM_RIGHTS entry is a descriptor
        // now owned by this process and by nothing else.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let bytes = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                    let data = libc::CMSG_DATA(c).cast::<libc::c_int>();
                    for i in 0..bytes / size_of::<libc::c_int>() {
                        fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(ProtocolError::ControlTruncated);
        }
        return Ok(n as usize);
    }
}

/// Sends one message with descriptors attached to its header (for scripted clients and tests;
/// the model itself never sends descriptors).
pub fn send_message(
    sock: &UnixStream,
    cmd: i32,
    payload: &[u8],
    fds: &[&dyn AsRawFd],
) -> io::Result<()> {
    let header = encode_header(cmd, payload.len() as u64);
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors",
        ));
    }
    let mut control = ControlBuffer([0u8; 64]);
    let mut iov = libc::iovec {
        iov_base: header.as_ptr() as *mut _,
        iov_len: HEADER_LEN,
    };
    // SAFETY: msghdr is plain old data; all-zero is a valid empty value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let data_len = fds.len() * size_of::<libc::c_int>();
        // SAFETY: `control` is 64 bytes and 8-aligned, enough for CMSG_SPACE of 8 descriptors;
        // the header and data written stay inside CMSG_SPACE(data_len).
        unsafe {
            msg.msg_control = control.0.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(data_len as u32) as _;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(data_len as u32) as _;
            let data = libc::CMSG_DATA(c).cast::<libc::c_int>();
            for (i, fd) in fds.iter().enumerate() {
                data.add(i).write_unaligned(fd.as_raw_fd());
            }
        }
    }
    let mut sent = 0usize;
    while sent == 0 {
        // SAFETY: msg describes the live header buffer and control buffer above.
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        sent = n as usize;
    }
    send_all(sock, &header[sent..])?;
    send_all(sock, payload)
}

/// Command numbers, for scripted clients.
pub mod cmd {
    pub const SYNC_SYSMEM: i32 = super::SYNC_SYSMEM;
    pub const RET: i32 = super::RET;
    pub const PCI_CFGWRITE: i32 = super::PCI_CFGWRITE;
    pub const PCI_CFGREAD: i32 = super::PCI_CFGREAD;
    pub const BAR_WRITE: i32 = super::BAR_WRITE;
    pub const BAR_READ: i32 = super::BAR_READ;
    pub const SET_IRQFD: i32 = super::SET_IRQFD;
    pub const DEVICE_RESET: i32 = super::DEVICE_RESET;
}

/// Payload of a configuration access (for scripted clients).
pub fn cfg_payload(offset: u32, value: u32, len: i32) -> [u8; CFG_PAYLOAD] {
    let mut p = [0u8; CFG_PAYLOAD];
    p[0..4].copy_from_slice(&offset.to_le_bytes());
    p[4..8].copy_from_slice(&value.to_le_bytes());
    p[8..12].copy_from_slice(&len.to_le_bytes());
    p
}

/// Payload of a BAR access (for scripted clients).
pub fn bar_payload(addr: u64, value: u64, size: u32, memory: bool) -> [u8; BAR_PAYLOAD] {
    let mut p = [0u8; BAR_PAYLOAD];
    p[0..8].copy_from_slice(&addr.to_le_bytes());
    p[8..16].copy_from_slice(&value.to_le_bytes());
    p[16..20].copy_from_slice(&size.to_le_bytes());
    p[20] = memory as u8;
    p
}

/// Payload of a SYNC_SYSMEM message (for scripted clients).
pub fn sysmem_payload(regions: &[SysmemRegion]) -> [u8; MAX_PAYLOAD] {
    let mut p = [0u8; MAX_PAYLOAD];
    for (i, r) in regions.iter().take(MAX_FDS).enumerate() {
        p[i * 8..i * 8 + 8].copy_from_slice(&r.gpa.to_le_bytes());
        p[64 + i * 8..72 + i * 8].copy_from_slice(&r.size.to_le_bytes());
        p[128 + i * 8..136 + i * 8].copy_from_slice(&r.fd_offset.to_le_bytes());
    }
    p
}

/// Reads one RET from the model (for scripted clients).
pub fn recv_ret(sock: &UnixStream) -> Result<u64, ProtocolError> {
    match recv_message(sock)? {
        None => Err(ProtocolError::Truncated {
            wanted: HEADER_LEN + 8,
            got: 0,
        }),
        Some(m) if m.cmd != RET => Err(ProtocolError::UnknownCommand(m.cmd)),
        Some(m) => {
            expect_size("RET", &m.payload, 8)?;
            Ok(le_u64(&m.payload, 0))
        }
    }
}
