//! The RC side on rdma-core's verbs through the `sideway` crate: the HCA, one [`Connection`]
//! per peer (its own PD, CQs, RC QP and registered buffers), which both the delegate and the
//! `check` client use, and [`Connection`]'s [`Remote`] implementation for the request handling.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use delegate_wire::{Access, MAX_MESSAGE, MAX_TRANSFER};
use sideway::ibverbs::address::AddressHandleAttribute;
use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, Mtu};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, QueuePairState, QueuePairType,
    SetScatterGatherEntry, WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;

use crate::remote::{Registration, Remote, RemoteError};

/// Local ACK timeout exponent of the RC QPs: 4.096 µs × 2^14 ≈ 67 ms per try.
const ACK_TIMEOUT: u8 = 14;
/// Retries before a send completes in error (retry exceeded): about 0.5 s with the timeout.
const RETRY_CNT: u8 = 7;
/// RNR retries: 7 is "retry for ever" (the peer posts its receives as it can).
const RNR_RETRY: u8 = 7;
/// Longest wait for one work request's completion before the connection is given up: the
/// retries above end far sooner on a live fabric.
pub const COMPLETION_BOUND: Duration = Duration::from_secs(10);
/// A completion that did not come within [`COMPLETION_BOUND`] (not an rdma-core status).
pub const STATUS_TIMED_OUT: u32 = 0xffff;

/// The HCA and port the program uses.
pub struct Hca {
    pub ctx: Arc<DeviceContext>,
    pub name: String,
    pub port: u8,
    pub lid: u16,
    pub guid: u64,
    /// The port's active MTU, IB code 1..=5.
    pub mtu: u8,
    /// READs and atomics a QP may have outstanding toward it (max_qp_rd_atom, at most 16).
    pub rd_atom: u8,
}

impl Hca {
    /// Opens `device` (or the first one) and reads `port`'s attributes; the port must be
    /// active with a LID.
    pub fn open(device: Option<&str>, port: u8) -> io::Result<Hca> {
        let list =
            DeviceList::new().map_err(|e| io::Error::other(format!("no RDMA devices: {e}")))?;
        let dev = match device {
            Some(n) => list.iter().find(|d| d.name() == n),
            None => list.iter().next(),
        }
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("RDMA device {} not found", device.unwrap_or("(any)")),
            )
        })?;
        let name = dev.name();
        let ctx = dev
            .open()
            .map_err(|e| io::Error::other(format!("open {name}: {e}")))?;
        let attr = ctx
            .query_device()
            .map_err(|e| io::Error::other(format!("query_device: {e}")))?;
        let p = ctx
            .query_port(port)
            .map_err(|e| io::Error::other(format!("query_port {port}: {e}")))?;
        if p.lid() == 0 {
            return Err(io::Error::other(format!(
                "{name} port {port} has no LID (not active?)"
            )));
        }
        Ok(Hca {
            name,
            port,
            lid: p.lid(),
            guid: attr.node_guid().as_u64(),
            mtu: p.active_mtu() as u32 as u8,
            rd_atom: attr.max_qp_rd_atom().clamp(1, 16) as u8,
            ctx,
        })
    }
}

/// One RC connection with its own protection domain (so another peer's QP cannot use the
/// rkeys registered here), completion queues and registered buffers: `slots` receive buffers
/// of [`MAX_MESSAGE`], one send buffer, and a staging buffer of [`MAX_TRANSFER`] for RDMA.
pub struct Connection {
    // Field order is drop order: the QP first, then the MRs, then the memory they cover, the
    // CQs and the PD.
    qp: BasicQueuePair,
    recv_mr: Arc<MemoryRegion>,
    send_mr: Arc<MemoryRegion>,
    staging_mr: Arc<MemoryRegion>,
    recv: Vec<u8>,
    send: Vec<u8>,
    staging: Vec<u8>,
    send_cq: Arc<BasicCompletionQueue>,
    recv_cq: Arc<BasicCompletionQueue>,
    pd: Arc<ProtectionDomain>,
    slots: usize,
    port: u8,
    rd_atom: u8,
    pub psn: u32,
    /// Receive completions taken from the CQ and not yet handed out: one poll of sideway's
    /// CQ takes up to its poll batch (32) from the device at once.
    received: VecDeque<Received>,
}

/// A message received on a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// `len` bytes in receive slot `slot` ([`Connection::message`]); repost with
    /// [`Connection::repost`] once read.
    Message { slot: usize, len: usize },
    /// A receive completed in error (the QP is in the error state): the connection is over.
    Failed(u32),
}

const SEND_ID: u64 = 1;

fn err(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

impl Connection {
    /// A connection's resources and its QP in INIT, `slots` receives posted; its QP number
    /// and PSN go to the peer, then [`Connection::connect`].
    pub fn new(hca: &Hca, slots: usize, psn: u32) -> io::Result<Connection> {
        let pd = hca.ctx.alloc_pd().map_err(|e| err("alloc_pd", e))?;
        let send_cq = hca
            .ctx
            .create_cq_builder()
            .setup_cqe(16)
            .build()
            .map_err(|e| err("create_cq", e))?;
        let recv_cq = hca
            .ctx
            .create_cq_builder()
            .setup_cqe(slots as u32 + 1)
            .build()
            .map_err(|e| err("create_cq", e))?;
        let mut qp = pd
            .create_qp_builder()
            .setup_qp_type(QueuePairType::ReliableConnection)
            .setup_max_send_wr(8)
            .setup_max_recv_wr(slots as u32)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .setup_send_cq(send_cq.clone())
            .setup_recv_cq(recv_cq.clone())
            .build()
            .map_err(|e| err("create_qp (RC)", e))?;
        let mut recv = vec![0u8; slots * MAX_MESSAGE];
        let mut send = vec![0u8; MAX_MESSAGE];
        let mut staging = vec![0u8; MAX_TRANSFER as usize];
        let local = AccessFlags::LocalWrite;
        // SAFETY: each buffer is a live allocation of its length, kept in the connection and
        // dropped after its MR (field order).
        let (recv_mr, send_mr, staging_mr) = unsafe {
            (
                pd.reg_mr(recv.as_mut_ptr() as usize, recv.len(), local)
                    .map_err(|e| err("reg_mr", e))?,
                pd.reg_mr(send.as_mut_ptr() as usize, send.len(), local)
                    .map_err(|e| err("reg_mr", e))?,
                pd.reg_mr(staging.as_mut_ptr() as usize, staging.len(), local)
                    .map_err(|e| err("reg_mr", e))?,
            )
        };
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Init)
            .setup_pkey_index(0)
            .setup_port(hca.port)
            .setup_access_flags(
                AccessFlags::RemoteRead | AccessFlags::RemoteWrite | AccessFlags::RemoteAtomic,
            );
        qp.modify(&attr).map_err(|e| err("RC QP to INIT", e))?;
        let mut c = Connection {
            qp,
            recv_mr,
            send_mr,
            staging_mr,
            recv,
            send,
            staging,
            send_cq,
            recv_cq,
            pd,
            slots,
            port: hca.port,
            rd_atom: hca.rd_atom,
            psn: psn & 0xff_ffff,
            received: VecDeque::new(),
        };
        for slot in 0..slots {
            c.repost(slot)?;
        }
        Ok(c)
    }

    pub fn qpn(&self) -> u32 {
        self.qp.qp_number()
    }

    /// Brings the QP to RTR toward the peer's `lid`, `qpn` and first PSN `psn` with path MTU
    /// code `mtu`, then to RTS.
    pub fn connect(&mut self, lid: u16, qpn: u32, psn: u32, mtu: u8) -> io::Result<()> {
        let mut av = AddressHandleAttribute::new();
        av.setup_dest_lid(lid)
            .setup_port(self.port)
            .setup_service_level(0);
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(Mtu::from(u32::from(mtu)))
            .setup_dest_qp_num(qpn)
            .setup_rq_psn(psn)
            .setup_max_dest_read_atomic(self.rd_atom)
            .setup_min_rnr_timer(12)
            .setup_address_vector(&av);
        self.qp.modify(&attr).map_err(|e| err("RC QP to RTR", e))?;
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(self.psn)
            .setup_timeout(ACK_TIMEOUT)
            .setup_retry_cnt(RETRY_CNT)
            .setup_rnr_retry(RNR_RETRY)
            .setup_max_read_atomic(self.rd_atom);
        self.qp.modify(&attr).map_err(|e| err("RC QP to RTS", e))
    }

    /// Posts receive slot `slot` again.
    pub fn repost(&mut self, slot: usize) -> io::Result<()> {
        assert!(slot < self.slots);
        let addr = self.recv[slot * MAX_MESSAGE..].as_mut_ptr() as u64;
        let lkey = self.recv_mr.lkey();
        let mut g = self.qp.start_post_recv();
        // SAFETY: the SGE names registered memory of the connection, alive as long as the QP.
        unsafe {
            g.construct_wr(slot as u64)
                .setup_sge(lkey, addr, MAX_MESSAGE as u32)
        };
        g.post().map_err(|e| err("post_recv (RC)", e))
    }

    /// The next received message, if any.
    pub fn poll_recv(&mut self) -> Option<Received> {
        if self.received.is_empty() {
            // Every completion the poll took, not only the first: the rest are off the CQ.
            if let Ok(poller) = self.recv_cq.start_poll() {
                for wc in poller {
                    self.received.push_back(if wc.status() != 0 {
                        Received::Failed(wc.status())
                    } else {
                        Received::Message {
                            slot: wc.wr_id() as usize,
                            len: (wc.byte_len() as usize).min(MAX_MESSAGE),
                        }
                    });
                }
            }
        }
        self.received.pop_front()
    }

    /// The bytes of a received message.
    pub fn message(&self, slot: usize, len: usize) -> &[u8] {
        &self.recv[slot * MAX_MESSAGE..slot * MAX_MESSAGE + len]
    }

    /// The send buffer, to write the next message into.
    pub fn send_buffer(&mut self) -> &mut [u8] {
        &mut self.send
    }

    /// SENDs `send_buffer()[..len]` and waits for its completion.
    pub fn send(&mut self, len: usize) -> Result<(), RemoteError> {
        let (lkey, addr) = (self.send_mr.lkey(), self.send.as_ptr() as u64);
        let mut g = self.qp.start_post_send();
        let wr = g
            .construct_wr(SEND_ID, WorkRequestFlags::Signaled)
            .setup_send();
        // SAFETY: registered memory of the connection, alive as long as the QP.
        unsafe { wr.setup_sge(lkey, addr, len as u32) };
        g.post().map_err(|_| RemoteError {
            status: 0,
            fatal: true,
        })?;
        self.wait_send()
    }

    /// RDMA READ of `len` bytes at the peer's `addr` under `rkey` into `staging[..len]`, or
    /// RDMA WRITE of `staging[..len]` there when `write`.
    pub fn rdma(
        &mut self,
        write: bool,
        len: usize,
        addr: u64,
        rkey: u32,
    ) -> Result<(), RemoteError> {
        let (lkey, local) = (self.staging_mr.lkey(), self.staging.as_ptr() as u64);
        let mut g = self.qp.start_post_send();
        let h = g.construct_wr(SEND_ID, WorkRequestFlags::Signaled);
        let wr = if write {
            h.setup_write(rkey, addr)
        } else {
            h.setup_read(rkey, addr)
        };
        // SAFETY: registered memory of the connection, alive as long as the QP.
        unsafe { wr.setup_sge(lkey, local, len as u32) };
        g.post().map_err(|_| RemoteError {
            status: 0,
            fatal: true,
        })?;
        self.wait_send()
    }

    /// An atomic on the peer's 8 bytes at `addr` under `rkey`: compare-and-swap when `swap` is
    /// given, else fetch-and-add of `add`; the old value lands in `staging[..8]` and is
    /// returned. ConnectX-3 reads and writes the word big-endian (its byte order, not the
    /// host's), and so is the returned value.
    pub fn atomic(
        &mut self,
        addr: u64,
        rkey: u32,
        add: u64,
        swap: Option<u64>,
    ) -> Result<u64, RemoteError> {
        let (lkey, local) = (self.staging_mr.lkey(), self.staging.as_ptr() as u64);
        let mut g = self.qp.start_post_send();
        let h = g.construct_wr(SEND_ID, WorkRequestFlags::Signaled);
        let wr = match swap {
            Some(s) => h.setup_atomic_compare_swap(rkey, addr, add, s),
            None => h.setup_atomic_fetch_add(rkey, addr, add),
        };
        // SAFETY: registered memory of the connection, alive as long as the QP.
        unsafe { wr.setup_sge(lkey, local, 8) };
        g.post().map_err(|_| RemoteError {
            status: 0,
            fatal: true,
        })?;
        self.wait_send()?;
        Ok(u64::from_be_bytes(
            self.staging[..8].try_into().expect("8 bytes"),
        ))
    }

    /// Waits (bounded) for the completion of the one signaled send work request in flight.
    fn wait_send(&mut self) -> Result<(), RemoteError> {
        let deadline = Instant::now() + COMPLETION_BOUND;
        let mut spins = 0u32;
        loop {
            if let Ok(mut p) = self.send_cq.start_poll() {
                if let Some(wc) = p.next() {
                    return match wc.status() {
                        0 => Ok(()),
                        s => Err(RemoteError {
                            status: s,
                            fatal: true,
                        }),
                    };
                }
            }
            if Instant::now() > deadline {
                return Err(RemoteError {
                    status: STATUS_TIMED_OUT,
                    fatal: true,
                });
            }
            spins += 1;
            if spins > 1000 {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// The protection domain regions are registered on.
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }
}

struct MrRegistration(Arc<MemoryRegion>);

impl Registration for MrRegistration {
    fn rkey(&self) -> u32 {
        self.0.rkey()
    }
}

/// The HCA's access flags for what a region grants: remote write and atomics need local write
/// (rdma-core's rule), and a region granting neither is registered without it, so its pages
/// may be mapped read-only.
pub fn access_flags(a: Access) -> AccessFlags {
    let mut f = AccessFlags::none();
    if a.contains(Access::READ) {
        f |= AccessFlags::RemoteRead;
    }
    if a.contains(Access::WRITE) {
        f |= AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
    }
    if a.contains(Access::ATOMIC) {
        f |= AccessFlags::LocalWrite | AccessFlags::RemoteAtomic;
    }
    f
}

impl Remote for Connection {
    fn staging(&mut self) -> &mut [u8] {
        &mut self.staging
    }

    fn write_staged(&mut self, len: usize, addr: u64, rkey: u32) -> Result<(), RemoteError> {
        self.rdma(true, len, addr, rkey)
    }

    fn read_staged(&mut self, len: usize, addr: u64, rkey: u32) -> Result<(), RemoteError> {
        self.rdma(false, len, addr, rkey)
    }

    unsafe fn register(
        &mut self,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<Box<dyn Registration>, RemoteError> {
        // SAFETY: the caller keeps `addr..addr + len` mapped until the registration drops.
        let mr =
            unsafe { self.pd.reg_mr(addr as usize, len, access_flags(access)) }.map_err(|e| {
                println!(
                    "ibkern-delegate: ibv_reg_mr of {len} bytes (access {}): {e}",
                    access.bits()
                );
                RemoteError {
                    status: 0,
                    fatal: false,
                }
            })?;
        Ok(Box::new(MrRegistration(mr)))
    }
}
