//! The delegate's root directory: every path a node names is resolved beneath it by the
//! kernel, never by string checks alone. With `openat2(2)` and `RESOLVE_BENEATH` (Linux 5.6+)
//! the kernel refuses, atomically, any resolution that would leave the root (`..` above it,
//! an absolute path, a symbolic link pointing out); without it each component is opened with
//! `O_NOFOLLOW` under the directory descriptor of the one before, so no symbolic link is
//! followed at all.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use delegate_wire::{ErrorCode, Failure};

/// How paths are resolved beneath the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolve {
    /// `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`.
    Beneath,
    /// Component by component with `O_NOFOLLOW` (kernels without `openat2`).
    NoFollow,
}

/// The open root directory.
#[derive(Debug)]
pub struct Root {
    dir: OwnedFd,
    resolve: Resolve,
}

/// `struct open_how` of openat2(2) (linux/openat2.h), the version-0 size the call is given.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// A path split into the directory to resolve and its last component.
struct Split {
    parent: CString,
    name: CString,
}

impl Root {
    /// Opens `path` as the root, resolving with `openat2` if the kernel has it.
    pub fn open(path: &Path) -> io::Result<Root> {
        let dir = std::fs::File::open(path)?;
        if !dir.metadata()?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the root is not a directory",
            ));
        }
        let mut root = Root {
            dir: dir.into(),
            resolve: Resolve::Beneath,
        };
        let probe = CString::new(".").expect("no NUL");
        match root.openat2(
            root.dir.as_raw_fd(),
            &probe,
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        ) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => root.resolve = Resolve::NoFollow,
            Err(e) => return Err(e),
        }
        Ok(root)
    }

    /// The same root resolved the other way (tests run both).
    pub fn with_resolve(self, resolve: Resolve) -> Root {
        Root { resolve, ..self }
    }

    pub fn resolve(&self) -> Resolve {
        self.resolve
    }

    /// Opens `path` beneath the root with `flags` (plus `O_CLOEXEC`; `O_NOFOLLOW` on every
    /// component when resolving without `openat2`).
    pub fn open_at(&self, path: &[u8], flags: i32, mode: u32) -> Result<OwnedFd, Failure> {
        let components = components(path)?;
        match self.resolve {
            Resolve::Beneath => {
                let c = CString::new(path).map_err(|_| bad_path())?;
                self.openat2(self.dir.as_raw_fd(), &c, flags, mode)
                    .map_err(|e| from_io(&e))
            }
            Resolve::NoFollow => {
                let (dirs, last) = components.split_at(components.len() - 1);
                let parent = self.walk(dirs)?;
                let base = parent
                    .as_ref()
                    .map_or(self.dir.as_raw_fd(), |f| f.as_raw_fd());
                openat(base, &last[0], flags | libc::O_NOFOLLOW, mode)
            }
        }
    }

    /// Opens the directory holding `path`'s last component and returns it with that name; the
    /// name is never `.` or `..` (refused: mkdir and unlink act on a name inside a directory).
    pub fn parent_of(&self, path: &[u8]) -> Result<(OwnedFd, CString), Failure> {
        let s = split(path)?;
        let dir = match self.resolve {
            Resolve::Beneath => self
                .openat2(
                    self.dir.as_raw_fd(),
                    &s.parent,
                    libc::O_PATH | libc::O_DIRECTORY,
                    0,
                )
                .map_err(|e| from_io(&e))?,
            Resolve::NoFollow => {
                let comps = components_or_root(s.parent.as_bytes())?;
                match self.walk(&comps)? {
                    Some(fd) => fd,
                    None => dup(self.dir.as_raw_fd())?,
                }
            }
        };
        Ok((dir, s.name))
    }

    /// Opens each directory of `dirs` under the one before with `O_NOFOLLOW`; `None` for no
    /// components (the root itself).
    fn walk(&self, dirs: &[CString]) -> Result<Option<OwnedFd>, Failure> {
        let mut cur: Option<OwnedFd> = None;
        for d in dirs {
            let base = cur.as_ref().map_or(self.dir.as_raw_fd(), |f| f.as_raw_fd());
            let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
            match openat(base, d, flags, 0) {
                Ok(fd) => cur = Some(fd),
                // A symbolic link where a directory belongs is not followed: refused as
                // one, not reported as "not a directory".
                Err(f) if f.code == ErrorCode::NotADirectory && is_symlink(base, d) => {
                    return Err(bad_path())
                }
                Err(f) => return Err(f),
            }
        }
        Ok(cur)
    }

    fn openat2(&self, dir: RawFd, path: &CString, flags: i32, mode: u32) -> io::Result<OwnedFd> {
        let how = OpenHow {
            flags: (flags | libc::O_CLOEXEC) as u64,
            mode: if flags & libc::O_CREAT != 0 {
                u64::from(mode)
            } else {
                0
            },
            resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS,
        };
        // SAFETY: `path` is a NUL-terminated string and `how` a valid open_how that outlive
        // the call; the size passed is that of the struct; the kernel reads both and returns a
        // new descriptor or -1.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir,
                path.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    }
}

/// The components of a relative path, `.` and empty ones dropped; refuses an absolute path,
/// any `..` and a path with no component left (the root itself is `.`, which only a
/// directory listing may name: see [`Root::open_dir`]).
fn components(path: &[u8]) -> Result<Vec<CString>, Failure> {
    let out = components_or_root(path)?;
    if out.is_empty() {
        return Err(bad_path());
    }
    Ok(out)
}

/// As [`components`], but no component (the root itself) is allowed.
fn components_or_root(path: &[u8]) -> Result<Vec<CString>, Failure> {
    if path.first() == Some(&b'/') {
        return Err(bad_path());
    }
    let mut out = Vec::new();
    for c in path.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err(bad_path()),
            c => out.push(CString::new(c).map_err(|_| bad_path())?),
        }
    }
    Ok(out)
}

fn split(path: &[u8]) -> Result<Split, Failure> {
    let comps = components(path)?;
    let (dirs, last) = comps.split_at(comps.len() - 1);
    let mut parent = Vec::new();
    for d in dirs {
        parent.extend_from_slice(d.as_bytes());
        parent.push(b'/');
    }
    if parent.is_empty() {
        parent.push(b'.');
    }
    Ok(Split {
        parent: CString::new(parent).map_err(|_| bad_path())?,
        name: last[0].clone(),
    })
}

impl Root {
    /// Opens a directory beneath the root for listing; `.` (or an empty path after dropping
    /// `.` components) is the root itself.
    pub fn open_dir(&self, path: &[u8]) -> Result<OwnedFd, Failure> {
        let flags = libc::O_RDONLY | libc::O_DIRECTORY;
        if path.first() != Some(&b'/')
            && path
                .split(|&b| b == b'/')
                .all(|c| c.is_empty() || c == b".")
        {
            let dot = CString::new(".").expect("no NUL");
            return openat(self.dir.as_raw_fd(), &dot, flags, 0);
        }
        self.open_at(path, flags, 0)
    }
}

fn openat(dir: RawFd, name: &CString, flags: i32, mode: u32) -> Result<OwnedFd, Failure> {
    // SAFETY: `name` is NUL-terminated and outlives the call; openat returns a new
    // descriptor or -1.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC, mode) };
    if fd < 0 {
        return Err(from_io(&io::Error::last_os_error()));
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn is_symlink(dir: RawFd, name: &CString) -> bool {
    // SAFETY: an all-zero `stat` is a valid value for the kernel to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated and `st` a writable stat; fstatat fills it or fails.
    let r = unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFLNK
}

fn dup(fd: RawFd) -> Result<OwnedFd, Failure> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) on a descriptor we own returns a new one or -1.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if new < 0 {
        return Err(from_io(&io::Error::last_os_error()));
    }
    // SAFETY: the new descriptor is ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

fn bad_path() -> Failure {
    Failure::new(ErrorCode::BadPath, 0)
}

/// The reply for a failed system call: the errno's code and the errno as detail.
pub fn from_io(e: &io::Error) -> Failure {
    let errno = e.raw_os_error().unwrap_or(0);
    let code = match errno {
        libc::ENOENT => ErrorCode::NotFound,
        libc::EEXIST => ErrorCode::Exists,
        libc::EACCES | libc::EPERM | libc::EROFS | libc::EBADF => ErrorCode::PermissionDenied,
        libc::ENOTDIR => ErrorCode::NotADirectory,
        libc::EISDIR => ErrorCode::IsADirectory,
        libc::ENOTEMPTY => ErrorCode::NotEmpty,
        libc::ENOSPC | libc::EDQUOT => ErrorCode::NoSpace,
        // openat2 refusing to leave the root, a symbolic link where none may be followed, a
        // name too long for the file system.
        libc::EXDEV | libc::ELOOP | libc::ENAMETOOLONG => ErrorCode::BadPath,
        libc::EINVAL | libc::EFBIG | libc::EOVERFLOW => ErrorCode::Invalid,
        libc::ENOMEM => ErrorCode::NoMemory,
        libc::EMFILE | libc::ENFILE => ErrorCode::TooMany,
        _ => ErrorCode::Io,
    };
    if code == ErrorCode::BadPath {
        return bad_path();
    }
    Failure::new(code, errno as u32)
}
