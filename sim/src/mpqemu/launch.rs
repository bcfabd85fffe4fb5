//! Starting QEMU with its end of the proxy socket, and the per-guest socket directory.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// The token in a QEMU argument list that is replaced by the proxy socket's descriptor number.
pub const FD_PLACEHOLDER: &str = "@FD@";

/// A private directory for one guest's qtest and QMP sockets, removed (with its contents) on drop.
#[derive(Debug)]
pub struct SocketDir {
    path: PathBuf,
}

impl SocketDir {
    /// Creates a fresh mode-0700 directory under the system temporary directory.
    pub fn create(label: &str) -> io::Result<SocketDir> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("ibkern-mpqemu-{}-{n}-{label}", std::process::id()));
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        let s = path.to_string_lossy();
        // Socket paths go into QEMU's comma-separated option syntax and into sun_path (108 bytes).
        if s.contains(',') || s.len() > 80 {
            let _ = std::fs::remove_dir(&path);
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("unusable socket directory {s}"),
            ));
        }
        Ok(SocketDir { path })
    }

    /// The qtest socket path.
    pub fn qtest(&self) -> PathBuf {
        self.path.join("qtest.sock")
    }

    /// The QMP socket path (used by the front end for the INTx route lookup).
    pub fn qmp(&self) -> PathBuf {
        self.path.join("qmp.sock")
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        // The directory was created fresh by `create` and is private to this process: remove it
        // with whatever a caller put beside the sockets.
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The QEMU options that give the front end its qtest and QMP sockets.
pub fn qtest_args(dir: &SocketDir, qtest_log: &Path) -> Vec<String> {
    vec![
        "-qtest".into(),
        format!("unix:{},server=on,wait=off", dir.qtest().display()),
        "-qtest-log".into(),
        qtest_log.display().to_string(),
        "-qmp".into(),
        format!("unix:{},server=on,wait=off", dir.qmp().display()),
    ]
}

/// Creates a socketpair (both ends close-on-exec), returning (ours, QEMU's).
pub fn proxy_socketpair() -> io::Result<(UnixStream, OwnedFd)> {
    let mut sv = [0 as libc::c_int; 2];
    // SAFETY: socketpair writes two descriptors into the live two-element array.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            sv.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    let (ours, theirs) = unsafe { (UnixStream::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };
    Ok((ours, theirs))
}

/// Spawns `argv` (program first) with QEMU's end of the proxy socket inherited, every
/// [`FD_PLACEHOLDER`] replaced by its number, and `extra` appended. The descriptor loses
/// close-on-exec only in the child, so concurrently spawned guests never inherit each other's.
pub fn spawn_qemu(
    argv: &[String],
    extra: &[String],
    theirs: &OwnedFd,
    stdout: Stdio,
    stderr: Stdio,
) -> io::Result<Child> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty QEMU command"))?;
    if !args.iter().any(|a| a.contains(FD_PLACEHOLDER)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("QEMU command has no {FD_PLACEHOLDER} (expected -device x-pci-proxy-dev,id=...,fd={FD_PLACEHOLDER})"),
        ));
    }
    let fd = theirs.as_raw_fd();
    let mut cmd = Command::new(program);
    cmd.args(
        args.iter()
            .map(|a| a.replace(FD_PLACEHOLDER, &fd.to_string())),
    )
    .args(extra)
    .stdin(Stdio::null())
    .stdout(stdout)
    .stderr(stderr);
    // SAFETY: the closure runs in the forked child before exec and only calls fcntl, which is
    // async-signal-safe; it touches no memory shared with the parent.
    unsafe {
        cmd.pre_exec(move || {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}
