//! What the request handling needs from the connection to one node, so that it knows no
//! transport: the RC connection ([`crate::rc`]) implements it with RDMA, the host tests with a
//! stand-in ([`crate::standin`]).

use delegate_wire::Access;

/// An RDMA toward the node failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteError {
    /// The completion status (rdma-core's `ibv_wc_status`), or 0 when nothing was posted.
    pub status: u32,
    /// The connection is unusable (on RC, a failed RDMA moves the QP to the error state):
    /// the node is released without a reply.
    pub fatal: bool,
}

/// A registration of region memory for the node's RDMA: deregistered when dropped.
pub trait Registration {
    fn rkey(&self) -> u32;
}

/// The connection to one node, as the request handling uses it.
pub trait Remote {
    /// The delegate's registered buffer that bulk data passes through, at least
    /// [`delegate_wire::MAX_TRANSFER`] bytes.
    fn staging(&mut self) -> &mut [u8];

    /// RDMA WRITE of `staging()[..len]` to the node's `addr` under `rkey`, completed before
    /// it returns (so a reply sent after it follows the data).
    fn write_staged(&mut self, len: usize, addr: u64, rkey: u32) -> Result<(), RemoteError>;

    /// RDMA READ of `len` bytes at the node's `addr` under `rkey` into `staging()[..len]`,
    /// completed before it returns.
    fn read_staged(&mut self, len: usize, addr: u64, rkey: u32) -> Result<(), RemoteError>;

    /// Registers `len` bytes at `addr` (memory the caller keeps mapped until the
    /// registration is dropped) for the node's RDMA with `access`.
    ///
    /// # Safety
    /// `addr..addr + len` must be mapped, and stay mapped until the returned registration is
    /// dropped.
    unsafe fn register(
        &mut self,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<Box<dyn Registration>, RemoteError>;
}
