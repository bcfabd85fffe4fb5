//! A stand-in for the RC connection, for host tests of the request handling: the node's
//! memory is a table of buffers by rkey, RDMA is a checked copy, and a node can vanish.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;

use delegate_wire::{Access, MAX_TRANSFER};

use crate::remote::{Registration, Remote, RemoteError};

/// rdma-core's `IBV_WC_REM_ACCESS_ERR`: what a requester sees when the responder refuses the
/// rkey or the range.
pub const REM_ACCESS_ERR: u32 = 10;
/// rdma-core's `IBV_WC_RETRY_EXC_ERR`: what a requester sees when the peer no longer answers.
pub const RETRY_EXC_ERR: u32 = 12;

/// One buffer of the node's, registered for remote access.
#[derive(Clone, Debug)]
pub struct NodeBuffer {
    pub addr: u64,
    pub bytes: Vec<u8>,
}

pub struct StandIn {
    staging: Vec<u8>,
    /// The node's buffers by rkey.
    pub memory: BTreeMap<u32, NodeBuffer>,
    /// Every RDMA fails from now on as toward a node that is gone.
    pub gone: bool,
    /// Registrations alive (made and not dropped).
    pub live: Rc<Cell<usize>>,
    /// What each registration was asked for.
    pub registered: Vec<(u64, usize, Access)>,
    next_rkey: u32,
}

impl Default for StandIn {
    fn default() -> StandIn {
        StandIn {
            staging: vec![0; MAX_TRANSFER as usize],
            memory: BTreeMap::new(),
            gone: false,
            live: Rc::new(Cell::new(0)),
            registered: Vec::new(),
            next_rkey: 0x100,
        }
    }
}

impl StandIn {
    fn range(&mut self, len: usize, addr: u64, rkey: u32) -> Result<&mut [u8], RemoteError> {
        if self.gone {
            return Err(RemoteError {
                status: RETRY_EXC_ERR,
                fatal: true,
            });
        }
        let refused = RemoteError {
            status: REM_ACCESS_ERR,
            fatal: true,
        };
        let b = self.memory.get_mut(&rkey).ok_or(refused)?;
        let start = addr.checked_sub(b.addr).ok_or(refused)? as usize;
        let end = start.checked_add(len).ok_or(refused)?;
        b.bytes.get_mut(start..end).ok_or(refused)
    }
}

struct StandInRegistration {
    rkey: u32,
    live: Rc<Cell<usize>>,
}

impl Registration for StandInRegistration {
    fn rkey(&self) -> u32 {
        self.rkey
    }
}

impl Drop for StandInRegistration {
    fn drop(&mut self) {
        self.live.set(self.live.get() - 1);
    }
}

impl Remote for StandIn {
    fn staging(&mut self) -> &mut [u8] {
        &mut self.staging
    }

    fn write_staged(&mut self, len: usize, addr: u64, rkey: u32) -> Result<(), RemoteError> {
        let data = self.staging[..len].to_vec();
        self.range(len, addr, rkey)?.copy_from_slice(&data);
        Ok(())
    }

    fn read_staged(&mut self, len: usize, addr: u64, rkey: u32) -> Result<(), RemoteError> {
        let data = self.range(len, addr, rkey)?.to_vec();
        self.staging[..len].copy_from_slice(&data);
        Ok(())
    }

    unsafe fn register(
        &mut self,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<Box<dyn Registration>, RemoteError> {
        self.registered.push((addr as u64, len, access));
        self.live.set(self.live.get() + 1);
        self.next_rkey += 1;
        Ok(Box::new(StandInRegistration {
            rkey: self.next_rkey,
            live: self.live.clone(),
        }))
    }
}
