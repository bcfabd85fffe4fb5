//! The two things a front end hands the model for each HCA: the machine memory the device
//! reaches by DMA (bus address space) and the place its interrupts go.

use std::fmt;

/// A DMA access the host memory could not satisfy (outside the memory the model was given).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaFault {
    /// First bus address of the failed access.
    pub addr: u64,
    /// Length of the failed access in bytes.
    pub len: usize,
}

impl fmt::Display for DmaFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DMA of {} bytes at {:#x} is outside host memory",
            self.len, self.addr
        )
    }
}

/// The machine memory the device DMAs into, addressed by bus address.
///
/// `write` must store the bytes in ascending address order: the model writes a CQE/EQE in
/// one call and relies on the owner byte (the last byte) becoming visible last.
pub trait HostMemory: Send {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaFault>;
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), DmaFault>;
    /// Host memory the host has freed since the last call (bus address, bytes), if the
    /// front end can tell: the model records a violation when the device still holds any
    /// of it. The default knows of no frees.
    fn take_freed(&self) -> Vec<(u64, u64)> {
        Vec::new()
    }
}

/// Where the device's interrupts go.
pub trait Interrupts: Send {
    /// New level of INTA# (called only on changes).
    fn set_intx(&mut self, asserted: bool);
    /// An MSI-X message write (address/data from the MSI-X table entry).
    fn msi(&mut self, address: u64, data: u32);
}
