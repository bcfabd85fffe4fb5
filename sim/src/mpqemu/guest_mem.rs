//! Guest RAM as QEMU shares it: the SYNC_SYSMEM regions, mapped from their file descriptors.
//!
//! The region list is an immutable snapshot behind an `Arc`. A DMA takes the current snapshot and
//! copies through it; a SYNC_SYSMEM builds a new snapshot (reusing the mapping of every region
//! whose backing file, offset, size and address did not change) and swaps it in. A mapping is
//! unmapped only when the last snapshot holding it is dropped, so a DMA that started before a
//! SYNC_SYSMEM finishes against the memory it started with.

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use super::wire::SysmemRegion;

/// A guest-physical range that is not (entirely) backed by the shared RAM regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutsideGuestRam {
    /// First byte of the access.
    pub addr: u64,
    /// Length of the access.
    pub len: usize,
}

impl fmt::Display for OutsideGuestRam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bytes at guest-physical {:#x} are outside the shared guest RAM",
            self.len, self.addr
        )
    }
}

/// A region could not be mapped.
#[derive(Debug)]
pub struct MapError {
    pub region: SysmemRegion,
    pub error: io::Error,
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot map guest RAM at {:#x} (+{:#x}, fd offset {:#x}): {} (QEMU needs a share=on memfd or file memory backend)",
            self.region.gpa, self.region.size, self.region.fd_offset, self.error
        )
    }
}

impl std::error::Error for MapError {}

/// One mapped region.
struct Mapping {
    region: SysmemRegion,
    /// Identity of the backing file (device, inode), to recognise an unchanged region.
    file: (u64, u64),
    /// Start of the whole mmap (page-aligned below the region start).
    base: NonNull<u8>,
    /// Length of the whole mmap.
    map_len: usize,
    /// Distance from `base` to the region's first byte.
    lead: usize,
}

// SAFETY: the mapping is plain shared memory owned by this struct; it is only accessed through raw
// byte copies (never through Rust references), so moving or sharing the handle between threads is
// sound. Unmapping happens once, in Drop, when no snapshot refers to it any more.
unsafe impl Send for Mapping {}
// SAFETY: see above; concurrent copies through raw pointers do not create aliasing references.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: base/map_len are exactly what mmap returned; nothing refers to the mapping any more
        // (every snapshot holding this Arc has been dropped).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.map_len);
        }
    }
}

impl Mapping {
    fn map(region: SysmemRegion, fd: &OwnedFd) -> Result<Mapping, MapError> {
        let fail = |error| MapError { region, error };
        let (file, file_len) = file_identity(fd).map_err(fail)?;
        // Touching a shared mapping beyond the end of its file raises SIGBUS: refuse such a region.
        let end = (region.fd_offset as u64).checked_add(region.size);
        if end.is_none_or(|end| end > file_len) {
            return Err(fail(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("region ends beyond the backing file ({file_len:#x} bytes)"),
            )));
        }
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
        let offset = region.fd_offset as u64;
        let aligned = offset & !(page - 1);
        let lead = (offset - aligned) as usize;
        let map_len = (region.size as usize).checked_add(lead).ok_or_else(|| {
            fail(io::Error::new(
                io::ErrorKind::InvalidInput,
                "region too large",
            ))
        })?;
        // SAFETY: a fresh shared mapping of a descriptor we own, at an address of the kernel's
        // choosing; it aliases no Rust object.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                aligned as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(fail(io::Error::last_os_error()));
        }
        let base = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| fail(io::Error::other("mmap returned NULL")))?;
        Ok(Mapping {
            region,
            file,
            base,
            map_len,
            lead,
        })
    }

    fn contains(&self, gpa: u64) -> bool {
        gpa >= self.region.gpa && gpa - self.region.gpa < self.region.size
    }

    /// Pointer to guest-physical `gpa` and how many bytes from there stay inside this region.
    fn locate(&self, gpa: u64) -> (*mut u8, usize) {
        let off = (gpa - self.region.gpa) as usize;
        let room = self.region.size as usize - off;
        // SAFETY: lead + off < map_len because off < region.size; the result stays in the mapping.
        (unsafe { self.base.as_ptr().add(self.lead + off) }, room)
    }
}

/// (device, inode) of the file behind `fd`, and its length.
fn file_identity(fd: &OwnedFd) -> io::Result<((u64, u64), u64)> {
    // SAFETY: stat is plain old data; fstat fills it for a valid descriptor.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is a live descriptor and st a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(((st.st_dev, st.st_ino), st.st_size.max(0) as u64))
}

type Snapshot = Arc<Vec<Arc<Mapping>>>;

/// What a SYNC_SYSMEM changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncOutcome {
    /// Regions whose existing mapping was kept.
    pub kept: usize,
    /// Regions newly mapped.
    pub mapped: usize,
    /// Old regions no longer listed (unmapped once no DMA uses them).
    pub dropped: usize,
}

/// The shared guest RAM of one guest. Cheap to clone; all clones see the same regions.
#[derive(Clone, Default)]
pub struct GuestMemory {
    current: Arc<Mutex<Snapshot>>,
}

impl fmt::Debug for GuestMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuestMemory")
            .field("regions", &self.regions())
            .finish()
    }
}

impl GuestMemory {
    /// Guest memory with no regions yet (every access faults until the first SYNC_SYSMEM).
    pub fn new() -> GuestMemory {
        GuestMemory::default()
    }

    fn snapshot(&self) -> Snapshot {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The regions currently mapped.
    pub fn regions(&self) -> Vec<SysmemRegion> {
        self.snapshot().iter().map(|m| m.region).collect()
    }

    /// Replaces the region list with `regions` (a complete list, as SYNC_SYSMEM sends it). The
    /// descriptors are closed once mapped; unchanged regions keep their mapping. On failure the
    /// previous list stays in force.
    pub fn sync(&self, regions: Vec<(SysmemRegion, OwnedFd)>) -> Result<SyncOutcome, MapError> {
        let old = self.snapshot();
        let mut next: Vec<Arc<Mapping>> = Vec::with_capacity(regions.len());
        let mut outcome = SyncOutcome::default();
        for (region, fd) in regions {
            let (file, _) = file_identity(&fd).map_err(|error| MapError { region, error })?;
            if let Some(same) = old.iter().find(|m| m.region == region && m.file == file) {
                next.push(same.clone());
                outcome.kept += 1;
            } else {
                next.push(Arc::new(Mapping::map(region, &fd)?));
                outcome.mapped += 1;
            }
            // `fd` is closed here: the mapping keeps the file alive.
        }
        outcome.dropped = old
            .iter()
            .filter(|m| !next.iter().any(|n| Arc::ptr_eq(m, n)))
            .count();
        next.sort_by_key(|m| m.region.gpa);
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(next);
        Ok(outcome)
    }

    /// Walks `[addr, addr + len)` region by region, calling `f(host_ptr, offset_in_access, n)`.
    /// Checks the whole range first so a faulting access touches nothing.
    fn walk(
        &self,
        addr: u64,
        len: usize,
        mut f: impl FnMut(*mut u8, usize, usize),
    ) -> Result<(), OutsideGuestRam> {
        let fault = OutsideGuestRam { addr, len };
        if len == 0 {
            return Ok(());
        }
        addr.checked_add(len as u64 - 1).ok_or(fault)?;
        let snap = self.snapshot();
        // Regions do not overlap, so an access touches each at most once: at most MAX_FDS pieces.
        let mut pieces = [(std::ptr::null_mut::<u8>(), 0usize, 0usize); super::wire::MAX_FDS];
        let mut count = 0usize;
        let mut done = 0usize;
        while done < len {
            let gpa = addr + done as u64;
            let m = snap.iter().find(|m| m.contains(gpa)).ok_or(fault)?;
            let (ptr, room) = m.locate(gpa);
            let n = room.min(len - done);
            *pieces.get_mut(count).ok_or(fault)? = (ptr, done, n);
            count += 1;
            done += n;
        }
        for &(ptr, at, n) in &pieces[..count] {
            f(ptr, at, n);
        }
        // `snap` (and with it every mapping used) lives until here.
        drop(snap);
        Ok(())
    }

    /// Copies guest memory at `addr` into `buf`.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), OutsideGuestRam> {
        let dst = buf.as_mut_ptr();
        self.walk(addr, buf.len(), |src, at, n| {
            // SAFETY: `src..src+n` lies inside a live mapping held by the snapshot in `walk`;
            // `dst+at..+n` lies inside `buf`. The guest may change the bytes concurrently, as it
            // may during a real DMA; we copy bytes without forming references to guest memory.
            unsafe { std::ptr::copy_nonoverlapping(src, dst.add(at), n) }
        })
    }

    /// Copies `data` into guest memory at `addr`. The last [`ORDERED_TAIL`] bytes are stored
    /// one by one in ascending order after everything before them, so an owner byte at the end of a
    /// CQE or EQE becomes visible to the guest last.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), OutsideGuestRam> {
        let src = data.as_ptr();
        let bulk_end = data.len().saturating_sub(ORDERED_TAIL);
        self.walk(addr, data.len(), |dst, at, n| {
            let bulk = n.min(bulk_end.saturating_sub(at));
            // SAFETY: as in `read`, with the roles swapped: `dst..dst+n` is inside a live mapping
            // and `src+at..+n` inside `data`.
            unsafe { std::ptr::copy_nonoverlapping(src.add(at), dst, bulk) };
            std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
            for i in bulk..n {
                // SAFETY: same ranges as above, one byte at a time.
                unsafe { std::ptr::write_volatile(dst.add(i), *src.add(at + i)) };
            }
        })
    }
}

/// How many trailing bytes of a DMA write are stored strictly in ascending order, last.
pub const ORDERED_TAIL: usize = 8;

impl crate::host::HostMemory for GuestMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), crate::host::DmaFault> {
        GuestMemory::read(self, addr, buf).map_err(|f| crate::host::DmaFault {
            addr: f.addr,
            len: f.len,
        })
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), crate::host::DmaFault> {
        GuestMemory::write(self, addr, data).map_err(|f| crate::host::DmaFault {
            addr: f.addr,
            len: f.len,
        })
    }
}
