//! The request handling, independent of any transport: the nodes the delegate serves, what
//! each holds (open files, regions, its lease), and one call at a time turned into one reply.
//! It trusts nothing in a message: whatever fails to parse, names a handle or region the node
//! does not hold, leaves the root or passes a bound gets a failure reply with its code.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use delegate_wire::connect::Reason;
use delegate_wire::{
    Access, Backing, DirWriter, ErrorCode, Failure, FileKind, LogLevel, OpenFlags, Packet, Place,
    Read, RegionInfo, Reply, Request, Source, Stat, HEADER_LEN, MAX_INLINE, MAX_MESSAGE, REPLY_BIT,
    VERSION,
};

use crate::region::{page_size, Mapping};
use crate::remote::{Registration, Remote};
use crate::root::{from_io, Root};

/// What the delegate allows each node, and how many nodes.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_nodes: usize,
    /// Open files per node.
    pub max_open: usize,
    /// Regions per node.
    pub max_regions: usize,
    /// Bytes of all of one node's regions together.
    pub max_region_bytes: u64,
    /// The lease a node may ask for: bounds of the one granted.
    pub lease_min: Duration,
    pub lease_max: Duration,
    /// Serve the root read-only: no file opened for writing, no mkdir or unlink, file regions
    /// readable only (anonymous regions are the node's own memory and stay writable).
    pub read_only: bool,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_nodes: 16,
            max_open: 64,
            max_regions: 16,
            max_region_bytes: 256 << 20,
            lease_min: Duration::from_secs(1),
            lease_max: Duration::from_secs(120),
            read_only: false,
        }
    }
}

/// Most names a listing reads from one directory.
pub const MAX_LISTING: usize = 1 << 16;

struct OpenFile {
    file: File,
    read: bool,
    write: bool,
}

struct Region {
    /// Declared before the mapping: dropped (deregistered) first.
    _registration: Box<dyn Registration>,
    mapping: Mapping,
}

/// One node the delegate serves.
pub struct Node {
    pub id: u32,
    pub lid: u16,
    pub guid: u64,
    lease: Duration,
    last_heard: Instant,
    files: BTreeMap<u32, OpenFile>,
    next_handle: u32,
    regions: BTreeMap<u32, Region>,
    next_region: u32,
    region_bytes: u64,
}

impl Node {
    pub fn open_files(&self) -> usize {
        self.files.len()
    }

    pub fn regions(&self) -> usize {
        self.regions.len()
    }

    /// A region's bytes as the delegate sees them.
    pub fn region_bytes(&self, region: u32) -> Option<&[u8]> {
        self.regions.get(&region).map(|r| r.mapping.bytes())
    }

    pub fn lease(&self) -> Duration {
        self.lease
    }

    fn name(&self) -> String {
        format!(
            "node {} (LID 0x{:04x}, GUID 0x{:016x})",
            self.id, self.lid, self.guid
        )
    }
}

/// What became of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Send the reply of this many bytes.
    Reply(usize),
    /// Send the reply, then the node is released (it said goodbye).
    Goodbye(usize),
    /// The connection failed under the call (an RDMA toward the node failed on a QP that is
    /// now in error): the node was released, nothing is sent.
    Lost,
}

/// A node admitted by [`Delegate::admit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    pub id: u32,
    pub lease: Duration,
    /// A node of the same LID and GUID that this one replaces (it rebooted): released.
    pub replaced: Option<u32>,
}

/// Where log lines go.
pub type LogSink = Box<dyn FnMut(&str) + Send>;

/// The delegate's state: its root, its limits and the nodes it serves.
pub struct Delegate {
    root: Root,
    limits: Limits,
    nodes: BTreeMap<u32, Node>,
    next_node: u32,
    log: LogSink,
}

impl Delegate {
    pub fn new(root: Root, limits: Limits, log: LogSink) -> Delegate {
        Delegate {
            root,
            limits,
            nodes: BTreeMap::new(),
            next_node: 1,
            log,
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn node(&self, id: u32) -> Option<&Node> {
        self.nodes.get(&id)
    }

    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values()
    }

    /// Takes a node on (a Connect): a number, the lease granted (`lease_ms` clamped to the
    /// limits; 0 asks for the longest), or the reason it is refused.
    pub fn admit(
        &mut self,
        lid: u16,
        guid: u64,
        lease_ms: u32,
        now: Instant,
    ) -> Result<Admitted, Reason> {
        let replaced = self
            .nodes
            .values()
            .find(|n| n.lid == lid && n.guid == guid)
            .map(|n| n.id);
        if let Some(old) = replaced {
            self.release(old, "connected again");
        }
        if self.nodes.len() >= self.limits.max_nodes {
            return Err(Reason::TooManyNodes);
        }
        let lease = if lease_ms == 0 {
            self.limits.lease_max
        } else {
            Duration::from_millis(u64::from(lease_ms))
                .clamp(self.limits.lease_min, self.limits.lease_max)
        };
        let id = self.next_node;
        self.next_node = self.next_node.checked_add(1).unwrap_or(1);
        let node = Node {
            id,
            lid,
            guid,
            lease,
            last_heard: now,
            files: BTreeMap::new(),
            next_handle: 1,
            regions: BTreeMap::new(),
            next_region: 1,
            region_bytes: 0,
        };
        (self.log)(&format!(
            "{}: connected, lease {} ms",
            node.name(),
            lease.as_millis()
        ));
        self.nodes.insert(id, node);
        Ok(Admitted {
            id,
            lease,
            replaced,
        })
    }

    /// Releases a node: its regions are deregistered and unmapped, its files closed.
    pub fn release(&mut self, id: u32, why: &str) {
        if let Some(node) = self.nodes.remove(&id) {
            (self.log)(&format!(
                "{}: released ({why}): {} open files closed, {} regions unmapped",
                node.name(),
                node.files.len(),
                node.regions.len()
            ));
        }
    }

    /// Nodes whose lease has passed without a call.
    pub fn expired(&self, now: Instant) -> Vec<u32> {
        self.nodes
            .values()
            .filter(|n| now.saturating_duration_since(n.last_heard) > n.lease)
            .map(|n| n.id)
            .collect()
    }

    /// Handles one received message from node `id` and writes the reply into `out` (at least
    /// [`MAX_MESSAGE`] bytes).
    pub fn call<R: Remote>(
        &mut self,
        id: u32,
        remote: &mut R,
        msg: &[u8],
        out: &mut [u8],
        now: Instant,
    ) -> Outcome {
        assert!(out.len() >= MAX_MESSAGE, "reply buffer under MAX_MESSAGE");
        let Some(node) = self.nodes.get_mut(&id) else {
            return Outcome::Lost;
        };
        node.last_heard = now;
        let (tag, op_code) = if msg.len() >= HEADER_LEN {
            (
                u32::from_be_bytes([msg[8], msg[9], msg[10], msg[11]]),
                msg[5] & !REPLY_BIT,
            )
        } else {
            (0, 0)
        };
        let parsed = Packet::new_checked(msg).and_then(|p| Request::parse(&p));
        let request = match parsed {
            Ok(r) => r,
            Err(e) => {
                let detail = match e {
                    delegate_wire::Error::BadVersion(_) => u32::from(VERSION),
                    delegate_wire::Error::UnknownOp(c) => u32::from(c),
                    _ => 0,
                };
                return Outcome::Reply(emit_failure(
                    Failure::new(e.code(), detail),
                    op_code,
                    tag,
                    out,
                ));
            }
        };
        let mut inline = [0u8; MAX_INLINE];
        let mut entries = [0u8; MAX_MESSAGE];
        let result = serve(
            &self.root,
            &self.limits,
            node,
            remote,
            &mut self.log,
            request,
            &mut inline,
            &mut entries,
        );
        match result {
            Ok(reply) => {
                let n = reply
                    .emit(tag, out)
                    .expect("the delegate's replies are within the protocol's bounds");
                if request == Request::Goodbye {
                    self.release(id, "goodbye");
                    Outcome::Goodbye(n)
                } else {
                    Outcome::Reply(n)
                }
            }
            Err(Served::Failed(f)) => Outcome::Reply(emit_failure(f, op_code, tag, out)),
            Err(Served::Lost(status)) => {
                self.release(
                    id,
                    &format!("RDMA to it failed, completion status {status}"),
                );
                Outcome::Lost
            }
        }
    }
}

fn emit_failure(f: Failure, op_code: u8, tag: u32, out: &mut [u8]) -> usize {
    f.emit(op_code, tag, out)
        .expect("a failure fits any reply buffer")
}

/// Why a call produced no reply of its own.
enum Served {
    Failed(Failure),
    Lost(u32),
}

impl From<Failure> for Served {
    fn from(f: Failure) -> Served {
        Served::Failed(f)
    }
}

fn fail(code: ErrorCode, detail: u32) -> Served {
    Served::Failed(Failure::new(code, detail))
}

fn io_fail(e: io::Error) -> Served {
    Served::Failed(from_io(&e))
}

#[allow(clippy::too_many_arguments)]
fn serve<'b, R: Remote>(
    root: &Root,
    limits: &Limits,
    node: &mut Node,
    remote: &mut R,
    log: &mut LogSink,
    request: Request<'b>,
    inline: &'b mut [u8; MAX_INLINE],
    entries: &'b mut [u8; MAX_MESSAGE],
) -> Result<Reply<'b>, Served> {
    Ok(match request {
        Request::Null { payload } => Reply::Null { payload },
        Request::Clock => {
            let realtime_ns = match SystemTime::now().duration_since(UNIX_EPOCH) {
                Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
                Err(e) => -i64::try_from(e.duration().as_nanos()).unwrap_or(i64::MAX),
            };
            Reply::Clock {
                realtime_ns,
                monotonic_ns: monotonic_ns(),
            }
        }
        Request::Open { flags, mode, path } => {
            let writes = flags.contains(OpenFlags::WRITE);
            if limits.read_only && writes {
                return Err(fail(ErrorCode::PermissionDenied, libc::EROFS as u32));
            }
            if node.files.len() >= limits.max_open {
                return Err(fail(ErrorCode::TooMany, limits.max_open as u32));
            }
            let fd = root.open_at(path.as_bytes(), open_flags(flags), u32::from(mode))?;
            let file = regular(fd)?;
            let size = file.metadata().map_err(io_fail)?.len();
            let handle = next_free(&mut node.next_handle, |h| node.files.contains_key(&h));
            let read = flags.contains(OpenFlags::READ);
            let write = flags.contains(OpenFlags::WRITE);
            node.files.insert(handle, OpenFile { file, read, write });
            Reply::Open { handle, size }
        }
        Request::Close { handle } => {
            node.files
                .remove(&handle)
                .ok_or(fail(ErrorCode::BadHandle, handle))?;
            Reply::Close
        }
        Request::Pread {
            handle,
            offset,
            len,
            place,
        } => {
            let f = node
                .files
                .get(&handle)
                .ok_or(fail(ErrorCode::BadHandle, handle))?;
            if !f.read {
                return Err(fail(ErrorCode::PermissionDenied, libc::EBADF as u32));
            }
            match place {
                Place::Inline => {
                    let buf = &mut inline[..len as usize];
                    let n = read_full_at(&f.file, buf, offset).map_err(io_fail)?;
                    Reply::Pread(Read::Inline(&inline[..n]))
                }
                Place::Remote { addr, rkey } => {
                    let n = read_full_at(&f.file, &mut remote.staging()[..len as usize], offset)
                        .map_err(io_fail)?;
                    if n > 0 {
                        remote.write_staged(n, addr, rkey).map_err(remote_fail)?;
                    }
                    Reply::Pread(Read::Remote(n as u32))
                }
            }
        }
        Request::Pwrite {
            handle,
            offset,
            source,
        } => {
            let f = node
                .files
                .get(&handle)
                .ok_or(fail(ErrorCode::BadHandle, handle))?;
            if !f.write {
                return Err(fail(ErrorCode::PermissionDenied, libc::EBADF as u32));
            }
            match source {
                Source::Inline(data) => f.file.write_all_at(data, offset).map_err(io_fail)?,
                Source::Remote { addr, rkey, len } => {
                    let len = len as usize;
                    if len > 0 {
                        remote.read_staged(len, addr, rkey).map_err(remote_fail)?;
                    }
                    f.file
                        .write_all_at(&remote.staging()[..len], offset)
                        .map_err(io_fail)?;
                }
            }
            Reply::Pwrite {
                count: source.len(),
            }
        }
        Request::Fstat { handle } => {
            let f = node
                .files
                .get(&handle)
                .ok_or(fail(ErrorCode::BadHandle, handle))?;
            let m = f.file.metadata().map_err(io_fail)?;
            let ft = m.file_type();
            let kind = if ft.is_file() {
                FileKind::File
            } else if ft.is_dir() {
                FileKind::Directory
            } else if ft.is_symlink() {
                FileKind::Symlink
            } else {
                FileKind::Other
            };
            Reply::Fstat(Stat {
                size: m.len(),
                kind,
                perm: (m.permissions().mode() & 0o7777) as u16,
                mtime_s: m.mtime(),
                mtime_ns: m.mtime_nsec().clamp(0, 999_999_999) as u32,
            })
        }
        Request::Fsync { handle } => {
            let f = node
                .files
                .get(&handle)
                .ok_or(fail(ErrorCode::BadHandle, handle))?;
            f.file.sync_all().map_err(io_fail)?;
            Reply::Fsync
        }
        Request::Mkdir { .. } | Request::Unlink { .. } if limits.read_only => {
            return Err(fail(ErrorCode::PermissionDenied, libc::EROFS as u32));
        }
        Request::Mkdir { mode, path } => {
            let (dir, name) = root.parent_of(path.as_bytes())?;
            // SAFETY: `name` is NUL-terminated and `dir` an open directory; mkdirat reads both.
            let r =
                unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), libc::mode_t::from(mode)) };
            if r != 0 {
                return Err(io_fail(io::Error::last_os_error()));
            }
            Reply::Mkdir
        }
        Request::Unlink { dir, path } => {
            let (parent, name) = root.parent_of(path.as_bytes())?;
            let flags = if dir { libc::AT_REMOVEDIR } else { 0 };
            // SAFETY: as for mkdirat.
            let r = unsafe { libc::unlinkat(parent.as_raw_fd(), name.as_ptr(), flags) };
            if r != 0 {
                return Err(io_fail(io::Error::last_os_error()));
            }
            Reply::Unlink
        }
        Request::ListDir { cookie, path } => {
            let fd = root.open_dir(path.as_bytes())?;
            let mut names = list(fd)?;
            names.sort_by(|a, b| a.0.cmp(&b.0));
            let mut w = DirWriter::new(&mut entries[..]);
            let mut next = 0;
            for (i, (name, kind)) in names.iter().enumerate().skip(cookie as usize) {
                if !w.push(*kind, name).map_err(|_| fail(ErrorCode::Io, 0))? {
                    next = i as u32;
                    break;
                }
            }
            Reply::ListDir {
                next,
                entries: w.finish(),
            }
        }
        Request::Log { level, text } => {
            log(&format!(
                "{} {}: {}",
                node.name(),
                level_name(level),
                escape(text)
            ));
            Reply::Log
        }
        Request::MapRegion { access, backing } => {
            map_region(root, limits, node, remote, access, backing)?
        }
        Request::UnmapRegion { region } => {
            let r = node
                .regions
                .remove(&region)
                .ok_or(fail(ErrorCode::BadRegion, region))?;
            node.region_bytes -= r.mapping.len() as u64;
            Reply::UnmapRegion
        }
        Request::Goodbye => Reply::Goodbye,
    })
}

fn map_region<'b, R: Remote>(
    root: &Root,
    limits: &Limits,
    node: &mut Node,
    remote: &mut R,
    access: Access,
    backing: Backing<'_>,
) -> Result<Reply<'b>, Served> {
    if node.regions.len() >= limits.max_regions {
        return Err(fail(ErrorCode::TooMany, limits.max_regions as u32));
    }
    let len = match backing {
        Backing::Anonymous { len } | Backing::File { len, .. } => len,
    };
    let room = limits.max_region_bytes - node.region_bytes;
    if len > room {
        return Err(fail(
            ErrorCode::TooLarge,
            u32::try_from(limits.max_region_bytes).unwrap_or(u32::MAX),
        ));
    }
    let size = len as usize;
    let (mapping, granted) = match backing {
        Backing::Anonymous { .. } => (
            Mapping::anonymous(size).map_err(|_| fail(ErrorCode::NoMemory, size as u32))?,
            access,
        ),
        Backing::File { path, offset, .. } => {
            if offset % page_size() != 0 {
                return Err(fail(ErrorCode::Invalid, 0));
            }
            let mut granted = access;
            let fd = if access.modifies() && limits.read_only {
                granted = read_only(access)?;
                root.open_at(path.as_bytes(), libc::O_RDONLY | libc::O_NONBLOCK, 0)?
            } else if access.modifies() {
                match root.open_at(path.as_bytes(), libc::O_RDWR | libc::O_NONBLOCK, 0) {
                    Err(f) if f.code == ErrorCode::PermissionDenied => {
                        granted = read_only(access)?;
                        root.open_at(path.as_bytes(), libc::O_RDONLY | libc::O_NONBLOCK, 0)?
                    }
                    other => other?,
                }
            } else {
                root.open_at(path.as_bytes(), libc::O_RDONLY | libc::O_NONBLOCK, 0)?
            };
            let file = regular(fd)?;
            let file_len = file.metadata().map_err(io_fail)?.len();
            if offset.checked_add(len).is_none_or(|end| end > file_len) {
                return Err(fail(ErrorCode::Invalid, 0));
            }
            let fd: OwnedFd = file.into();
            let m = Mapping::file(&fd, offset, size, granted.modifies()).map_err(io_fail)?;
            (m, granted)
        }
    };
    // SAFETY: the mapping lives in the region beside the registration, which is declared
    // first and so dropped (deregistered) before the mapping is unmapped.
    let registration = unsafe { remote.register(mapping.addr(), mapping.len(), granted) }
        .map_err(|_| fail(ErrorCode::NoMemory, size as u32))?;
    let info = RegionInfo {
        region: next_free(&mut node.next_region, |r| node.regions.contains_key(&r)),
        rkey: registration.rkey(),
        addr: mapping.addr() as u64,
        len,
        access: granted,
    };
    node.region_bytes += len;
    node.regions.insert(
        info.region,
        Region {
            _registration: registration,
            mapping,
        },
    );
    Ok(Reply::MapRegion(info))
}

/// `access` less what a file opened read-only cannot grant; refused if nothing is left.
fn read_only(access: Access) -> Result<Access, Served> {
    if access.contains(Access::READ) {
        Ok(Access::READ)
    } else {
        Err(fail(ErrorCode::PermissionDenied, libc::EACCES as u32))
    }
}

fn remote_fail(e: crate::remote::RemoteError) -> Served {
    if e.fatal {
        Served::Lost(e.status)
    } else {
        fail(ErrorCode::RemoteAccess, e.status)
    }
}

/// The next number from `next` that `used` does not hold, never 0.
fn next_free(next: &mut u32, used: impl Fn(u32) -> bool) -> u32 {
    loop {
        let n = *next;
        *next = next.checked_add(1).unwrap_or(1);
        if n != 0 && !used(n) {
            return n;
        }
    }
}

fn open_flags(f: OpenFlags) -> i32 {
    let rw = match (f.contains(OpenFlags::READ), f.contains(OpenFlags::WRITE)) {
        (true, true) => libc::O_RDWR,
        (false, true) => libc::O_WRONLY,
        _ => libc::O_RDONLY,
    };
    let mut flags = rw | libc::O_NOCTTY | libc::O_NONBLOCK;
    if f.contains(OpenFlags::CREATE) {
        flags |= libc::O_CREAT;
    }
    if f.contains(OpenFlags::EXCLUSIVE) {
        flags |= libc::O_EXCL;
    }
    if f.contains(OpenFlags::TRUNCATE) {
        flags |= libc::O_TRUNC;
    }
    flags
}

/// The file if it is a regular one (opened with `O_NONBLOCK`, so a FIFO or device never made
/// the open wait): a directory is refused as such, anything else as invalid.
fn regular(fd: OwnedFd) -> Result<File, Served> {
    let file = File::from(fd);
    let ft = file.metadata().map_err(io_fail)?.file_type();
    if ft.is_dir() {
        return Err(fail(ErrorCode::IsADirectory, libc::EISDIR as u32));
    }
    if !ft.is_file() {
        return Err(fail(ErrorCode::Invalid, 0));
    }
    Ok(file)
}

/// Reads until `buf` is full or the file ends.
fn read_full_at(f: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        let at = offset
            .checked_add(n as u64)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        match f.read_at(&mut buf[n..], at) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The names in a directory (without `.` and `..`) and their kinds, at most [`MAX_LISTING`].
fn list(fd: OwnedFd) -> Result<Vec<(Vec<u8>, FileKind)>, Served> {
    // The directory stream takes the descriptor over (closedir closes it).
    let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
    // SAFETY: `raw` is an open directory descriptor that we own and hand to the stream.
    let dir = unsafe { libc::fdopendir(raw) };
    if dir.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so the descriptor is still ours to close.
        unsafe { libc::close(raw) };
        return Err(io_fail(e));
    }
    let mut out = Vec::new();
    let result = loop {
        // SAFETY: `dir` is an open stream; readdir returns an entry valid until the next call
        // or null at the end.
        let e = unsafe { libc::readdir(dir) };
        if e.is_null() {
            break Ok(());
        }
        // SAFETY: a non-null entry from readdir holds a NUL-terminated name.
        let (name, kind) = unsafe {
            (
                CStr::from_ptr((*e).d_name.as_ptr()).to_bytes().to_vec(),
                (*e).d_type,
            )
        };
        if name == b"." || name == b".." {
            continue;
        }
        if out.len() == MAX_LISTING {
            break Err(fail(ErrorCode::TooLarge, MAX_LISTING as u32));
        }
        let kind = match kind {
            libc::DT_REG => FileKind::File,
            libc::DT_DIR => FileKind::Directory,
            libc::DT_LNK => FileKind::Symlink,
            _ => FileKind::Other,
        };
        out.push((name, kind));
    };
    // SAFETY: `dir` is the stream opened above, closed once.
    unsafe { libc::closedir(dir) };
    result.map(|_| out)
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

fn level_name(l: LogLevel) -> &'static str {
    l.name()
}

/// A node's text for the log: printable ASCII kept, everything else as `\xNN`, so no byte from
/// the wire reaches the terminal as a control sequence.
pub fn escape(text: &[u8]) -> String {
    let mut s = String::with_capacity(text.len());
    for &b in text {
        if (0x20..0x7f).contains(&b) && b != b'\\' {
            s.push(b as char);
        } else {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    s
}
