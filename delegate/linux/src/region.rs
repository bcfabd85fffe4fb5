//! Memory the delegate maps for a node's region: anonymous or a file's pages, unmapped when
//! dropped.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// A live `mmap` of `len` bytes.
#[derive(Debug)]
pub struct Mapping {
    addr: *mut u8,
    len: usize,
}

impl Mapping {
    /// `len` bytes of zeroed memory, readable and writable, shared (so a fork would not copy
    /// what the HCA writes).
    pub fn anonymous(len: usize) -> io::Result<Mapping> {
        // SAFETY: a new anonymous mapping at an address the kernel chooses touches no
        // existing memory; the result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        Self::checked(p, len)
    }

    /// `len` bytes of the file `fd` from `offset` (a multiple of the page size). If
    /// `writable` (the file opened for writing), shared and writable, so writes through the
    /// mapping land in the file. Else private and readable only: Linux before 6.2 pins the
    /// pages of a registration without write access as a forced write, which a shared
    /// mapping without write permission refuses (`ibv_reg_mr` fails with EFAULT) and a
    /// private one answers with private copies. A read-only region thus holds the file's
    /// bytes as they were when registered; whether later changes to the file show through
    /// depends on the kernel.
    pub fn file(fd: &OwnedFd, offset: u64, len: usize, writable: bool) -> io::Result<Mapping> {
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let (prot, flags) = if writable {
            (libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED)
        } else {
            (libc::PROT_READ, libc::MAP_PRIVATE)
        };
        // SAFETY: a new mapping of an open file at an address the kernel chooses touches no
        // existing memory; the result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                flags,
                fd.as_raw_fd(),
                offset,
            )
        };
        Self::checked(p, len)
    }

    fn checked(p: *mut libc::c_void, len: usize) -> io::Result<Mapping> {
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            addr: p.cast(),
            len,
        })
    }

    pub fn addr(&self) -> *mut u8 {
        self.addr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapping's bytes (tests look at what a node's RDMA left there).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is readable for `len` bytes while `self` lives; writes by the
        // HCA race with this read as they would with any reader of RDMA memory.
        unsafe { std::slice::from_raw_parts(self.addr, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `addr..addr + len` is the mapping this value made and nothing refers to it
        // after drop (a region drops its registration before its mapping).
        unsafe {
            libc::munmap(self.addr.cast(), self.len);
        }
    }
}

/// The system's page size.
pub fn page_size() -> u64 {
    // SAFETY: sysconf reads a constant of the running system.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}
