//! ibkern's in-kernel verbs API.
//!
//! Names follow rdma-core (`post_send`, `post_recv`, `poll_cq`, `req_notify_cq`, `modify_qp`,
//! [`QpState`], [`WcStatus`], [`WcOpcode`]) with Rust types doing the checking. Everything is
//! statically dispatched: a driver implements [`Device`] with concrete, `Copy` handle types, and
//! benchmarks are generic over it. Nothing on the post/poll path allocates.
//!
//! ```
//! use verbs::*;
//!
//! /// One signaled 2-byte inline SEND and its completion, on any device.
//! fn send_once<D: Device>(dev: &mut D, qp: D::Qp, cq: D::Cq, dest: Option<UdDest<D::Ah>>) -> Result<WcStatus> {
//!     let wr = SendWr {
//!         wr_id: 7,
//!         opcode: WrOpcode::Send,
//!         payload: Payload::Inline(&[0x5a, 0xa5]),
//!         flags: SendFlags::SIGNALED,
//!         ud: dest,
//!     };
//!     dev.post_send(qp, &wr)?;
//!     let mut wc = [WorkCompletion::default(); 1];
//!     for _ in 0..1_000_000 {
//!         if dev.poll_cq(cq, &mut wc)? == 1 {
//!             return Ok(wc[0].status);
//!         }
//!     }
//!     Err(Error::Timeout("send completion"))
//! }
//! ```
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod dma;
pub use dma::{DmaRegion, DmaRelease};

use bitflags::bitflags;

/// Result of every verb.
pub type Result<T> = core::result::Result<T, Error>;

/// Typed errors of the verbs layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// An argument is out of range or inconsistent (the string says which).
    InvalidArgument(&'static str),
    /// The handle does not name a live object of this device.
    InvalidHandle,
    /// The object is still in use (the string says by what), e.g. an SRQ with QPs attached
    /// (Linux: EBUSY).
    Busy(&'static str),
    /// The QP is not in a state that allows this operation.
    WrongState { state: QpState },
    /// The send or receive queue has no free slot (completions must be polled first).
    QueueFull,
    /// Inline data longer than the QP was created for.
    InlineTooLarge { len: usize, max: usize },
    /// More scatter/gather entries than the QP was created for.
    TooManySge { n: usize, max: usize },
    /// The operation is not supported by this QP type (e.g. RDMA READ on UC).
    UnsupportedOpcode,
    /// The device has no more objects of this kind, or no memory to back them.
    NoResources(&'static str),
    /// The CQ overflowed: completions were lost.
    CqOverrun,
    /// A firmware command failed; `name` and `status_name` say which and why.
    Command {
        opcode: u16,
        name: &'static str,
        status: u8,
        status_name: &'static str,
    },
    /// A bounded wait expired.
    Timeout(&'static str),
    /// The port did not reach the requested state.
    PortNotActive { port: u8, state: PortState },
    /// A QP cannot be created at the requested QP number (`why`: reserved, in use, out of
    /// range, or not supported by this device).
    QpnUnavailable { qpn: u32, why: &'static str },
    /// The device reports an internal (catastrophic) error; `syndrome` is what it reported.
    /// Nothing works until the device is brought up again.
    DeviceFatal { syndrome: u32 },
    /// The command `name` was not posted: an earlier command failed fatally (timed out), so
    /// the driver reset the device and treats it as failed until it is brought up again.
    DeviceFailed { name: &'static str },
    /// The device cannot be used: `why` says what the driver found, `value` the number it
    /// concerns (0 when none).
    DeviceUnavailable { why: &'static str, value: u32 },
    /// The device lacks a capability the operation needs (the string says which).
    Unsupported(&'static str),
    /// The port has no physical link (no peer or cable, or the far end not enabled).
    LinkDown { port: u8 },
    /// A management datagram was answered with a non-zero MAD status.
    MadStatus { attr: u16, status: u16 },
    /// A subnet management packet sent on `port` got no response within the bounded wait.
    SmpTimeout { port: u8, attr: u16 },
    /// A send or receive of subnet management packets on `port` (QP0) completed in error:
    /// the completion's status, and the device's syndrome it was mapped from.
    SmpCompletion {
        port: u8,
        status: WcStatus,
        syndrome: u8,
    },
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::InvalidHandle => f.write_str("the handle names no live object"),
            Error::Busy(what) => write!(f, "still in use: {what}"),
            Error::WrongState { state } => {
                write!(
                    f,
                    "the QP's state ({state:?}) does not allow this operation"
                )
            }
            Error::QueueFull => f.write_str("the work queue is full (poll completions first)"),
            Error::InlineTooLarge { len, max } => {
                write!(f, "{len} bytes of inline data, more than the QP's {max}")
            }
            Error::TooManySge { n, max } => {
                write!(f, "{n} scatter/gather entries, more than the QP's {max}")
            }
            Error::UnsupportedOpcode => {
                f.write_str("the operation is not supported by this QP type")
            }
            Error::NoResources(what) => write!(f, "no resources: {what}"),
            Error::CqOverrun => f.write_str("the CQ overflowed: completions were lost"),
            Error::Command {
                opcode,
                name,
                status,
                status_name,
            } => write!(
                f,
                "command {name} (0x{opcode:03x}) failed: {status_name} (0x{status:02x})"
            ),
            Error::Timeout(what) => write!(f, "timed out waiting for {what}"),
            Error::PortNotActive { port, state } => {
                write!(f, "port {port} is not ACTIVE (state {state:?})")
            }
            Error::QpnUnavailable { qpn, why } => {
                write!(f, "QP number {qpn:#x} is unavailable: {why}")
            }
            Error::DeviceFatal { syndrome } => write!(
                f,
                "the device reports an internal error (syndrome {syndrome:#010x}); it needs \
                 to be brought up again"
            ),
            Error::DeviceFailed { name } => write!(
                f,
                "{name} not posted: the device was reset after an earlier command failed \
                 fatally"
            ),
            Error::DeviceUnavailable { why, value: 0 } => {
                write!(f, "the device cannot be used: {why}")
            }
            Error::DeviceUnavailable { why, value } => {
                write!(f, "the device cannot be used: {why} ({value:#x})")
            }
            Error::Unsupported(what) => write!(f, "not supported by the device: {what}"),
            Error::LinkDown { port } => write!(f, "port {port} has no physical link"),
            Error::MadStatus { attr, status } => write!(
                f,
                "MAD for attribute {attr:#06x} answered with status {status:#06x}"
            ),
            Error::SmpTimeout { port, attr } => write!(
                f,
                "no response on port {port} to the SMP for attribute {attr:#06x}"
            ),
            Error::SmpCompletion {
                port,
                status,
                syndrome,
            } => write!(
                f,
                "an SMP on port {port} completed in error: {status:?} (syndrome {syndrome:#04x})"
            ),
        }
    }
}

/// Why a list post ([`Device::post_send_list`]) stopped: the work request at `index` (counted
/// from 0 in the list) was refused with `error`. The ones before it were posted (and the
/// device told of them); it and the ones after it were not. rdma-core's `bad_wr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadWr {
    pub index: usize,
    pub error: Error,
}

impl From<BadWr> for Error {
    /// The error alone (for callers that do not need the position).
    fn from(b: BadWr) -> Error {
        b.error
    }
}

impl core::fmt::Display for BadWr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "work request {} of the list: {}", self.index, self.error)
    }
}

/// Queue pair transport type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpType {
    Rc,
    Uc,
    Ud,
}

/// QP state machine (the subset a kernel consumer drives).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    Err,
}

/// IB port state as reported by PortInfo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortState {
    Nop,
    Down,
    Init,
    Armed,
    Active,
    Other(u8),
}

impl PortState {
    /// Decode the PortInfo PortState nibble.
    pub fn from_raw(v: u8) -> Self {
        match v {
            0 => PortState::Nop,
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            x => PortState::Other(x),
        }
    }
}

/// IB MTU enum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mtu {
    Mtu256 = 1,
    Mtu512 = 2,
    Mtu1024 = 3,
    Mtu2048 = 4,
    Mtu4096 = 5,
}

impl Mtu {
    /// Bytes in one packet of this MTU.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }
    /// Decode the IB enum value (1..=5).
    pub fn from_raw(v: u8) -> Option<Self> {
        Some(match v {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            _ => return None,
        })
    }
}

bitflags! {
    /// Memory region / QP access rights.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct AccessFlags: u32 {
        const LOCAL_WRITE = 1 << 0;
        const REMOTE_WRITE = 1 << 1;
        const REMOTE_READ = 1 << 2;
        const REMOTE_ATOMIC = 1 << 3;
    }
}

bitflags! {
    /// Per-work-request flags.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct SendFlags: u32 {
        /// Generate a completion for this WR.
        const SIGNALED = 1 << 0;
        /// Set the solicited-event bit.
        const SOLICITED = 1 << 1;
        /// Wait for prior RDMA READ/atomics before this WR.
        const FENCE = 1 << 2;
    }
}

/// 128-bit GID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Gid(pub [u8; 16]);

/// Device attributes (from the device's own capability report).
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceAttr {
    pub fw_ver: (u16, u16, u16),
    pub node_guid: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub phys_port_cnt: u8,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    pub max_inline: u32,
    pub max_msg_sz: u64,
    pub local_dma_lkey: u32,
    /// QP numbers below this one belong to the firmware (ConnectX-3: QUERY_DEV_CAP's
    /// reserved-QP count); the lowest a consumer can be given.
    pub reserved_qps: u32,
}

/// A port's traffic counters (the PMA's PortCounters or PortCountersExtended): data in
/// 4-byte words of every octet from the LRH through the ICRC of each packet, and packets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortTraffic {
    pub xmit_data_words: u64,
    pub rcv_data_words: u64,
    pub xmit_packets: u64,
    pub rcv_packets: u64,
    /// Read from the 64-bit PortCountersExtended; false: the 32-bit PortCounters, which
    /// stop at 0xFFFF_FFFF.
    pub extended: bool,
}

/// Port attributes (PortInfo through MAD_IFC, plus the port GUID).
#[derive(Clone, Copy, Debug)]
pub struct PortAttr {
    pub state: PortState,
    pub phys_state: u8,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub sm_sl: u8,
    pub max_mtu: Option<Mtu>,
    pub active_mtu: Option<Mtu>,
    pub gid: Gid,
}

/// One scatter/gather element: a bus address inside a registered region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// Where the payload of a send comes from.
#[derive(Clone, Copy, Debug)]
pub enum Payload<'a> {
    /// Gather from registered memory.
    Sges(&'a [Sge]),
    /// Copy these bytes into the WQE (no lkey needed).
    Inline(&'a [u8]),
}

/// Operation of a send work request (with its operands).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrOpcode {
    Send,
    /// `imm` is sent as-is (network order is the caller's choice).
    SendWithImm {
        imm: u32,
    },
    RdmaWrite {
        remote_addr: u64,
        rkey: u32,
    },
    RdmaWriteWithImm {
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    },
    RdmaRead {
        remote_addr: u64,
        rkey: u32,
    },
    /// 8-byte compare-and-swap at `remote_addr`; the old value lands in the local SGE.
    AtomicCmpAndSwp {
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    /// 8-byte fetch-and-add at `remote_addr`; the old value lands in the local SGE.
    AtomicFetchAndAdd {
        remote_addr: u64,
        rkey: u32,
        add: u64,
    },
}

/// UD destination of a send.
#[derive(Clone, Copy, Debug)]
pub struct UdDest<Ah> {
    pub ah: Ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// A send work request.
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a, Ah> {
    pub wr_id: u64,
    pub opcode: WrOpcode,
    pub payload: Payload<'a>,
    pub flags: SendFlags,
    /// Required for UD QPs, ignored otherwise.
    pub ud: Option<UdDest<Ah>>,
}

/// A receive work request.
#[derive(Clone, Copy, Debug)]
pub struct RecvWr<'a> {
    pub wr_id: u64,
    pub sg_list: &'a [Sge],
}

/// Completion status (rdma-core `ibv_wc_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WcStatus {
    #[default]
    Success,
    LocLenErr,
    LocQpOpErr,
    LocProtErr,
    WrFlushErr,
    MwBindErr,
    BadRespErr,
    LocAccessErr,
    RemInvReqErr,
    RemAccessErr,
    RemOpErr,
    RetryExcErr,
    RnrRetryExcErr,
    RemAbortErr,
    GeneralErr,
}

/// Completion opcode (rdma-core `ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WcOpcode {
    #[default]
    Send,
    RdmaWrite,
    RdmaRead,
    CompSwap,
    FetchAdd,
    Recv,
    RecvRdmaWithImm,
    /// The device reported an opcode this API does not name.
    Unknown(u8),
}

/// One work completion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkCompletion {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    /// Vendor syndrome byte for errors (0 on success).
    pub vendor_err: u8,
    pub byte_len: u32,
    /// Immediate data if `wc_flags_imm`.
    pub imm_data: u32,
    pub imm: bool,
    pub qp_num: u32,
    pub src_qp: u32,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
    pub grh: bool,
}

/// The part of a work completion a latency loop reads (see [`Device::poll_one`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub byte_len: u32,
}

impl From<&WorkCompletion> for Completion {
    fn from(wc: &WorkCompletion) -> Self {
        Completion {
            wr_id: wc.wr_id,
            status: wc.status,
            opcode: wc.opcode,
            byte_len: wc.byte_len,
        }
    }
}

/// A validated, exclusive borrow of one QP and its send and receive CQs for a post/poll loop
/// (see [`Device::data_path`]): the latency path of a ping-pong.
///
/// Modelled on the ideas of rdma-core's extended verbs (`ibv_qp_ex` work-request builders,
/// `ibv_cq_ex` start/next polling): everything that cannot change while the borrow lives —
/// the handles, the QP state, the CQs' overrun flags, the UD destination — is checked once
/// when the path is made, and a device may precompute the parts of each work request and
/// completion that follow from them. What changes per call (room in the queues, the inline
/// length, the CQE found) is still checked per call, with the same typed errors as the
/// per-call verbs.
///
/// ```
/// use verbs::*;
///
/// /// One ping: a signaled 2-byte inline SEND, its completion and the peer's reply.
/// fn ping<D: Device>(dev: &mut D, qp: D::Qp, scq: D::Cq, rcq: D::Cq,
///                    dest: Option<UdDest<D::Ah>>) -> Result<Completion> {
///     let mut path = dev.data_path(qp, scq, rcq, dest)?; // checked once
///     path.send(1, Payload::Inline(&[0x5a, 0xa5]), SendFlags::SIGNALED)?;
///     let mut sent = None;
///     for _ in 0..1_000_000 {
///         sent = path.poll_send()?;
///         if sent.is_some() {
///             break;
///         }
///     }
///     let sent = sent.ok_or(Error::Timeout("send completion"))?;
///     if sent.status != WcStatus::Success {
///         return Ok(sent);
///     }
///     for _ in 0..1_000_000 {
///         if let Some(c) = path.poll_recv()? {
///             return Ok(c);
///         }
///     }
///     Err(Error::Timeout("reply"))
/// }
/// ```
pub trait DataPath {
    /// Post one SEND of `payload` to the destination bound at creation (UD) or the
    /// connected peer: the same as [`Device::post_send`] with [`WrOpcode::Send`].
    fn send(&mut self, wr_id: u64, payload: Payload<'_>, flags: SendFlags) -> Result<()>;
    /// Post one receive (as [`Device::post_recv`]).
    fn post_recv(&mut self, wr: &RecvWr<'_>) -> Result<()>;
    /// Poll the send CQ for at most one completion (as [`Device::poll_one`]).
    fn poll_send(&mut self) -> Result<Option<Completion>>;
    /// Poll the receive CQ for at most one completion (as [`Device::poll_one`]).
    fn poll_recv(&mut self) -> Result<Option<Completion>>;
}

/// The [`DataPath`] of any device through its per-call verbs: every call re-validates the
/// handles, as the verbs do. A device without a leaner path uses it as its
/// [`Device::DataPath`]; it is also the way to drive the per-call verbs through the
/// `DataPath` interface (e.g. a loop that must also arm CQs, via [`VerbsPath::device`]).
pub struct VerbsPath<'a, D: Device + ?Sized> {
    dev: &'a mut D,
    qp: D::Qp,
    send_cq: D::Cq,
    recv_cq: D::Cq,
    dest: Option<UdDest<D::Ah>>,
}

impl<'a, D: Device + ?Sized> VerbsPath<'a, D> {
    /// Bind `qp`, its CQs and (UD) its destination; nothing is checked here, every call is.
    pub fn new(
        dev: &'a mut D,
        qp: D::Qp,
        send_cq: D::Cq,
        recv_cq: D::Cq,
        dest: Option<UdDest<D::Ah>>,
    ) -> Self {
        VerbsPath {
            dev,
            qp,
            send_cq,
            recv_cq,
            dest,
        }
    }

    /// The device, for the verbs a data path does not offer.
    pub fn device(&mut self) -> &mut D {
        self.dev
    }
}

impl<D: Device + ?Sized> DataPath for VerbsPath<'_, D> {
    fn send(&mut self, wr_id: u64, payload: Payload<'_>, flags: SendFlags) -> Result<()> {
        let wr = SendWr {
            wr_id,
            opcode: WrOpcode::Send,
            payload,
            flags,
            ud: self.dest,
        };
        self.dev.post_send(self.qp, &wr)
    }
    fn post_recv(&mut self, wr: &RecvWr<'_>) -> Result<()> {
        self.dev.post_recv(self.qp, wr)
    }
    fn poll_send(&mut self) -> Result<Option<Completion>> {
        self.dev.poll_one(self.send_cq)
    }
    fn poll_recv(&mut self) -> Result<Option<Completion>> {
        self.dev.poll_one(self.recv_cq)
    }
}

/// Address handle attributes (IB, no GRH unless `grh` is set).
#[derive(Clone, Copy, Debug, Default)]
pub struct AhAttr {
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub port: u8,
    pub grh: Option<GrhAttr>,
}

/// Global route header attributes.
#[derive(Clone, Copy, Debug, Default)]
pub struct GrhAttr {
    pub dgid: Gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// Queue pair capacities requested at creation.
#[derive(Clone, Copy, Debug)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// Creation attributes of a QP.
#[derive(Clone, Copy, Debug)]
pub struct QpInitAttr<Pd, Cq> {
    pub pd: Pd,
    pub send_cq: Cq,
    pub recv_cq: Cq,
    pub qp_type: QpType,
    pub cap: QpCap,
    /// Generate a completion for every send regardless of [`SendFlags::SIGNALED`].
    pub sq_sig_all: bool,
}

/// Attributes of one `modify_qp` transition (rdma-core `ibv_qp_attr` with the relevant subset;
/// the target state selects which fields are used).
#[derive(Clone, Copy, Debug)]
pub struct QpAttr {
    pub qp_state: QpState,
    /// RESET→INIT.
    pub port_num: u8,
    pub pkey_index: u16,
    pub qkey: u32,
    pub access: AccessFlags,
    /// INIT→RTR (RC/UC).
    pub path_mtu: Mtu,
    pub dest_qp_num: u32,
    pub rq_psn: u32,
    pub ah: AhAttr,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    /// RTR→RTS.
    pub sq_psn: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub max_rd_atomic: u8,
}

impl QpAttr {
    /// Attributes with every field at a neutral default, targeting `state`.
    pub fn new(state: QpState) -> Self {
        QpAttr {
            qp_state: state,
            port_num: 1,
            pkey_index: 0,
            qkey: 0,
            access: AccessFlags::empty(),
            path_mtu: Mtu::Mtu2048,
            dest_qp_num: 0,
            rq_psn: 0,
            ah: AhAttr::default(),
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 0,
        }
    }
}

/// Attributes of an SRQ (rdma-core `struct ibv_srq_attr`): at creation the requested
/// `max_wr` / `max_sge` (the granted ones are returned); `srq_limit` arms the limit event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrqAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// An asynchronous event (rdma-core `struct ibv_async_event`, the types this API reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncEvent {
    /// IBV_EVENT_SRQ_LIMIT_REACHED: the SRQ numbered `srq_num` holds fewer receives than its
    /// armed limit; the limit is disarmed.
    SrqLimitReached { srq_num: u32 },
    /// IBV_EVENT_SRQ_ERR.
    SrqErr { srq_num: u32 },
}

/// A verbs provider. Handles are small `Copy` values naming objects the device owns; every
/// operation takes `&mut self`, so the data path is statically dispatched and lock-free.
/// CQ event moderation (rdma-core's `struct ibv_moderate_cq`: `cq_count`, `cq_period` in
/// microseconds); 0 disables a condition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqModeration {
    pub cq_count: u16,
    pub cq_period: u16,
}

pub trait Device {
    type Pd: Copy + core::fmt::Debug;
    type Mr: Copy + core::fmt::Debug;
    type Cq: Copy + core::fmt::Debug;
    type Qp: Copy + core::fmt::Debug;
    type Ah: Copy + core::fmt::Debug;
    type Srq: Copy + core::fmt::Debug;
    /// What [`Device::data_path`] returns: [`VerbsPath`] for a device without a leaner one.
    type DataPath<'a>: DataPath
    where
        Self: 'a;

    fn query_device(&self) -> DeviceAttr;
    fn query_port(&mut self, port: u8) -> Result<PortAttr>;

    fn alloc_pd(&mut self) -> Result<Self::Pd>;
    fn dealloc_pd(&mut self, pd: Self::Pd) -> Result<()>;

    /// Register `len` bytes of physically contiguous memory at bus address `addr`.
    fn reg_mr(
        &mut self,
        pd: Self::Pd,
        addr: u64,
        len: u64,
        access: AccessFlags,
    ) -> Result<Self::Mr>;
    /// Register a buffer made of `pages` (bus addresses of `1 << page_shift`-byte pages),
    /// addressed by the device from `iova`.
    fn reg_mr_pages(
        &mut self,
        pd: Self::Pd,
        iova: u64,
        len: u64,
        pages: &[u64],
        page_shift: u32,
        access: AccessFlags,
    ) -> Result<Self::Mr>;
    fn dereg_mr(&mut self, mr: Self::Mr) -> Result<()>;
    fn mr_lkey(&self, mr: Self::Mr) -> u32;
    fn mr_rkey(&self, mr: Self::Mr) -> u32;

    /// Create a CQ with room for at least `cqe` completions.
    fn create_cq(&mut self, cqe: u32) -> Result<Self::Cq>;
    fn destroy_cq(&mut self, cq: Self::Cq) -> Result<()>;

    fn create_qp(&mut self, attr: &QpInitAttr<Self::Pd, Self::Cq>) -> Result<Self::Qp>;
    /// Create a QP at a caller-chosen QP number, e.g. a well-known rendezvous QPN that a peer
    /// can address before any exchange. Fails with [`Error::QpnUnavailable`] when `qpn` is
    /// reserved, already in use or outside the device's QP table; devices that cannot choose
    /// QP numbers keep this default, which always refuses.
    fn create_qp_at(
        &mut self,
        attr: &QpInitAttr<Self::Pd, Self::Cq>,
        qpn: u32,
    ) -> Result<Self::Qp> {
        let _ = attr;
        Err(Error::QpnUnavailable {
            qpn,
            why: "this device cannot create a QP at a chosen number",
        })
    }
    fn modify_qp(&mut self, qp: Self::Qp, attr: &QpAttr) -> Result<()>;
    fn destroy_qp(&mut self, qp: Self::Qp) -> Result<()>;
    fn qp_num(&self, qp: Self::Qp) -> u32;
    /// Capacities actually granted (at least those requested).
    fn qp_cap(&self, qp: Self::Qp) -> QpCap;

    fn create_ah(&mut self, pd: Self::Pd, attr: &AhAttr) -> Result<Self::Ah>;
    fn destroy_ah(&mut self, ah: Self::Ah) -> Result<()>;

    fn post_send(&mut self, qp: Self::Qp, wr: &SendWr<'_, Self::Ah>) -> Result<()>;
    /// Post a list of send work requests, in order, as one post (rdma-core's
    /// `ibv_post_send` with a chained list): a device tells the hardware of the whole list at
    /// once (mlx4: one doorbell per list instead of one per work request). The list is any
    /// iterator of work requests or references to them — a slice (`&wrs`), or requests made
    /// on the fly (`(0..n).map(...)`) — so nothing is allocated. Returns how many were posted (the
    /// list's length). A refused work request stops the list: those before it are posted,
    /// and [`BadWr`] says which one failed and why. A list of one is the same as
    /// [`Device::post_send`]. The default posts them one by one.
    fn post_send_list<'a, I>(&mut self, qp: Self::Qp, wrs: I) -> core::result::Result<usize, BadWr>
    where
        I: IntoIterator,
        I::Item: core::borrow::Borrow<SendWr<'a, Self::Ah>>,
        Self::Ah: 'a,
    {
        let mut n = 0;
        for wr in wrs {
            self.post_send(qp, core::borrow::Borrow::borrow(&wr))
                .map_err(|error| BadWr { index: n, error })?;
            n += 1;
        }
        Ok(n)
    }
    fn post_recv(&mut self, qp: Self::Qp, wr: &RecvWr<'_>) -> Result<()>;
    /// Poll up to `wc.len()` completions; returns how many were written.
    fn poll_cq(&mut self, cq: Self::Cq, wc: &mut [WorkCompletion]) -> Result<usize>;
    /// Poll at most one completion and return only its [`Completion`] fields (wr_id,
    /// status, opcode, byte_len): the same consumption as `poll_cq` with one entry, for
    /// loops that need no more (a device can then skip reading the rest of the CQE). Use
    /// `poll_cq` for the source QP, LID, immediate data or the vendor syndrome.
    fn poll_one(&mut self, cq: Self::Cq) -> Result<Option<Completion>> {
        let mut wc = [WorkCompletion::default(); 1];
        let n = self.poll_cq(cq, &mut wc)?;
        Ok((n == 1).then(|| Completion::from(&wc[0])))
    }
    /// Borrow `qp` with its send and receive CQs as a [`DataPath`] for a post/poll loop,
    /// sending to `dest` (required for UD, ignored otherwise). The device checks here, once,
    /// what the borrow keeps from changing (handles, QP in RTS, the CQs being the QP's own,
    /// no CQ overrun) and fails with the same typed errors the per-call verbs would; it may
    /// refuse more (e.g. CQs shared with other QPs) with [`Error::InvalidArgument`].
    fn data_path(
        &mut self,
        qp: Self::Qp,
        send_cq: Self::Cq,
        recv_cq: Self::Cq,
        dest: Option<UdDest<Self::Ah>>,
    ) -> Result<Self::DataPath<'_>>;
    /// Completion-event moderation (rdma-core `ibv_modify_cq` with `IBV_CQ_ATTR_MODERATE`):
    /// an armed CQ's event waits for `cq_count` completions or `cq_period` microseconds
    /// after the first of them, whichever comes first; all zero = an event per completion.
    fn modify_cq(&mut self, cq: Self::Cq, moderate: CqModeration) -> Result<()>;
    /// Ask for a completion event on the next (or next solicited) completion.
    fn req_notify_cq(&mut self, cq: Self::Cq, solicited_only: bool) -> Result<()>;
    /// Wait (bounded by `timeout_ns`) for a completion event on `cq`; consumes one event.
    fn get_cq_event(&mut self, cq: Self::Cq, timeout_ns: u64) -> Result<()>;

    /// `ibv_create_srq`: at least `attr.max_wr` receives of `attr.max_sge` SGEs; returns the
    /// SRQ and the granted sizes (`srq_limit` is ignored, as by rdma-core).
    fn create_srq(&mut self, pd: Self::Pd, attr: &SrqAttr) -> Result<(Self::Srq, SrqAttr)>;
    /// `ibv_modify_srq` with IBV_SRQ_LIMIT: arm the limit event at `srq_limit` (0 disarms).
    fn modify_srq(&mut self, srq: Self::Srq, srq_limit: u32) -> Result<()>;
    /// `ibv_query_srq`: the granted sizes and the armed limit as the device reports it.
    fn query_srq(&mut self, srq: Self::Srq) -> Result<SrqAttr>;
    /// `ibv_destroy_srq`: [`Error::Busy`] while QPs still use it.
    fn destroy_srq(&mut self, srq: Self::Srq) -> Result<()>;
    /// `ibv_post_srq_recv` for one work request ([`Error::QueueFull`] when every WQE is
    /// posted).
    fn post_srq_recv(&mut self, srq: Self::Srq, wr: &RecvWr<'_>) -> Result<()>;
    /// `ibv_get_srq_num`.
    fn srq_num(&self, srq: Self::Srq) -> u32;
    /// `ibv_create_qp` with `ibv_qp_init_attr.srq` set: the QP takes its receives from `srq`
    /// (`attr.cap.max_recv_wr` / `max_recv_sge` are ignored, as by Linux).
    fn create_qp_with_srq(
        &mut self,
        attr: &QpInitAttr<Self::Pd, Self::Cq>,
        srq: Self::Srq,
    ) -> Result<Self::Qp>;
    /// `ibv_get_async_event` without blocking: the oldest event not yet returned, after
    /// handling what the device has reported.
    fn get_async_event(&mut self) -> Option<AsyncEvent>;
    /// The port's traffic counters as its performance-management agent keeps them (what
    /// `perfquery` reads).
    fn port_traffic(&mut self, port: u8) -> Result<PortTraffic>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_bytes_follow_the_ib_enum() {
        assert_eq!(Mtu::Mtu256.bytes(), 256);
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
        assert_eq!(Mtu::from_raw(4), Some(Mtu::Mtu2048));
        assert_eq!(Mtu::from_raw(0), None);
        assert_eq!(Mtu::from_raw(6), None);
    }

    #[test]
    fn port_state_decodes_portinfo_nibble() {
        assert_eq!(PortState::from_raw(4), PortState::Active);
        assert_eq!(PortState::from_raw(2), PortState::Init);
        assert_eq!(PortState::from_raw(9), PortState::Other(9));
    }

    #[test]
    fn command_errors_display_names() {
        let e = Error::Command {
            opcode: 0x7,
            name: "INIT_HCA",
            status: 3,
            status_name: "BadParam",
        };
        assert_eq!(
            std::format!("{e}"),
            "command INIT_HCA (0x007) failed: BadParam (0x03)"
        );
    }
}
