//! The UD QP of the rendezvous (docs/rendezvous.md): where set-up datagrams arrive and leave.
//! sideway 0.4 creates no UD QP (it cannot set a Q_Key), makes no address handles and does
//! not report a completion's source LID and QP, so this module drives them through sideway's
//! own bindings crate (rdma-mummy-sys), on sideway's PD, CQ and MR. It is the only place the
//! delegate calls libibverbs directly.

use std::collections::HashMap;
use std::io;
use std::ptr::{null_mut, NonNull};
use std::sync::Arc;
use std::time::{Duration, Instant};

use delegate_wire::connect::{self, RDV_QKEY};
use rdma_mummy_sys as sys;
use sideway::ibverbs::completion::{BasicCompletionQueue, CompletionQueue};
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::AccessFlags;

/// Receives kept posted.
const SLOTS: usize = 32;
/// A UD receive starts with the 40-byte GRH space.
const GRH: usize = 40;
const SLOT: usize = GRH + connect::LEN;
/// Sends in flight at most.
const MAX_SENDS: usize = 63;
const SEND_ID: u64 = u64::MAX;

/// A datagram received.
pub struct Datagram {
    pub bytes: [u8; connect::LEN],
    /// Bytes received (after the GRH), at most [`connect::LEN`] kept.
    pub len: usize,
    pub slid: u16,
    pub src_qp: u32,
}

pub struct Rendezvous {
    qp: NonNull<sys::ibv_qp>,
    ahs: HashMap<u16, NonNull<sys::ibv_ah>>,
    port: u8,
    sends: usize,
    // Dropped after the QP and address handles (see Drop), in this order: the MR before
    // the buffers it covers.
    mr: Arc<MemoryRegion>,
    bufs: Vec<u8>,
    cq: Arc<BasicCompletionQueue>,
    pd: Arc<ProtectionDomain>,
}

fn os(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn check(ret: i32, what: &str) -> io::Result<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::new(
            io::Error::from_raw_os_error(ret).kind(),
            format!("{what}: errno {ret}"),
        ))
    }
}

impl Rendezvous {
    /// A UD QP on `port` with the rendezvous Q_Key, in RTS, its receives posted.
    pub fn new(ctx: &Arc<DeviceContext>, port: u8) -> io::Result<Rendezvous> {
        let pd = ctx
            .alloc_pd()
            .map_err(|e| io::Error::other(format!("alloc_pd: {e}")))?;
        let cq = ctx
            .create_cq_builder()
            .setup_cqe((SLOTS + MAX_SENDS + 1) as u32)
            .build()
            .map_err(|e| io::Error::other(format!("create_cq: {e}")))?;
        let mut bufs = vec![0u8; SLOTS * SLOT];
        // SAFETY: `bufs` is a live allocation of this length, kept in the struct beside the
        // MR, which is dropped first.
        let mr = unsafe {
            pd.reg_mr(
                bufs.as_mut_ptr() as usize,
                bufs.len(),
                AccessFlags::LocalWrite,
            )
        }
        .map_err(|e| io::Error::other(format!("reg_mr: {e}")))?;
        // SAFETY: sideway's PD and CQ pointers are live while `pd` and `cq` are, which the
        // struct holds for as long as the QP.
        let (pd_ptr, cq_ptr) = unsafe { (pd.pd().as_ptr(), cq.cq().as_ptr()) };
        let mut init = sys::ibv_qp_init_attr {
            qp_context: null_mut(),
            send_cq: cq_ptr,
            recv_cq: cq_ptr,
            srq: null_mut(),
            cap: sys::ibv_qp_cap {
                max_send_wr: MAX_SENDS as u32 + 1,
                max_recv_wr: SLOTS as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: connect::LEN as u32,
            },
            qp_type: sys::ibv_qp_type::IBV_QPT_UD,
            sq_sig_all: 0,
        };
        // SAFETY: `init` is a valid attribute block naming live CQs; the PD is live.
        let qp = unsafe { sys::ibv_create_qp(pd_ptr, &mut init) };
        let qp = NonNull::new(qp).ok_or_else(|| os("ibv_create_qp (UD)"))?;
        let mut r = Rendezvous {
            qp,
            ahs: HashMap::new(),
            port,
            sends: 0,
            mr,
            bufs,
            cq,
            pd,
        };
        r.bring_up()?;
        for slot in 0..SLOTS {
            r.post_recv(slot)?;
        }
        Ok(r)
    }

    pub fn qpn(&self) -> u32 {
        // SAFETY: the QP is live while `self` is.
        unsafe { self.qp.as_ref().qp_num }
    }

    fn modify(
        &mut self,
        attr: &mut sys::ibv_qp_attr,
        mask: sys::ibv_qp_attr_mask,
        what: &str,
    ) -> io::Result<()> {
        // SAFETY: the QP is live and `attr` a valid attribute block for the mask.
        let ret = unsafe { sys::ibv_modify_qp(self.qp.as_ptr(), attr, mask.0 as i32) };
        check(ret, what)
    }

    fn bring_up(&mut self) -> io::Result<()> {
        use sys::ibv_qp_attr_mask as m;
        // SAFETY: ibv_qp_attr is plain data for which all zeroes is a valid value.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = self.port;
        a.qkey = RDV_QKEY;
        self.modify(
            &mut a,
            m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_QKEY,
            "UD QP to INIT",
        )?;
        a.qp_state = sys::ibv_qp_state::IBV_QPS_RTR;
        self.modify(&mut a, m::IBV_QP_STATE, "UD QP to RTR")?;
        a.qp_state = sys::ibv_qp_state::IBV_QPS_RTS;
        a.sq_psn = 0;
        self.modify(&mut a, m::IBV_QP_STATE | m::IBV_QP_SQ_PSN, "UD QP to RTS")
    }

    fn post_recv(&mut self, slot: usize) -> io::Result<()> {
        let mut sge = sys::ibv_sge {
            addr: self.bufs[slot * SLOT..].as_ptr() as u64,
            length: SLOT as u32,
            lkey: self.mr.lkey(),
        };
        let mut wr = sys::ibv_recv_wr {
            wr_id: slot as u64,
            next: null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = null_mut();
        // SAFETY: the QP is live, `wr` and `sge` outlive the call (the provider copies them),
        // and the SGE names registered memory that stays allocated while the QP lives.
        let ret = unsafe { sys::ibv_post_recv(self.qp.as_ptr(), &mut wr, &mut bad) };
        check(ret, "ibv_post_recv (UD)")
    }

    /// The next datagram received, if any (send completions are consumed on the way).
    pub fn poll(&mut self) -> io::Result<Option<Datagram>> {
        loop {
            // SAFETY: ibv_wc is plain data; all zeroes is valid.
            let mut wc: sys::ibv_wc = unsafe { std::mem::zeroed() };
            // SAFETY: the CQ is live; the provider writes at most one entry into `wc`.
            let n = unsafe { sys::ibv_poll_cq(self.cq.cq().as_ptr(), 1, &mut wc) };
            if n < 0 {
                return Err(io::Error::other(format!("ibv_poll_cq (UD): {n}")));
            }
            if n == 0 {
                return Ok(None);
            }
            if wc.wr_id == SEND_ID {
                self.sends -= 1;
                continue;
            }
            let slot = wc.wr_id as usize;
            let ok = wc.status == sys::ibv_wc_status::IBV_WC_SUCCESS;
            let mut d = Datagram {
                bytes: [0; connect::LEN],
                len: 0,
                slid: wc.slid,
                src_qp: wc.src_qp,
            };
            if ok && slot < SLOTS {
                let len = (wc.byte_len as usize).saturating_sub(GRH).min(connect::LEN);
                let start = slot * SLOT + GRH;
                d.bytes[..len].copy_from_slice(&self.bufs[start..start + len]);
                d.len = len;
            }
            if slot < SLOTS {
                self.post_recv(slot)?;
            }
            if ok {
                return Ok(Some(d));
            }
        }
    }

    fn ah(&mut self, lid: u16) -> io::Result<NonNull<sys::ibv_ah>> {
        if let Some(ah) = self.ahs.get(&lid) {
            return Ok(*ah);
        }
        // SAFETY: ibv_ah_attr is plain data; all zeroes is valid (no GRH).
        let mut attr: sys::ibv_ah_attr = unsafe { std::mem::zeroed() };
        attr.dlid = lid;
        attr.port_num = self.port;
        // SAFETY: the PD is live; `attr` a valid attribute block.
        let ah = unsafe { sys::ibv_create_ah(self.pd.pd().as_ptr(), &mut attr) };
        let ah = NonNull::new(ah).ok_or_else(|| os("ibv_create_ah"))?;
        self.ahs.insert(lid, ah);
        Ok(ah)
    }

    /// Sends `msg` (inline) to `qpn` at `lid` with the rendezvous Q_Key.
    pub fn send(&mut self, lid: u16, qpn: u32, msg: &[u8; connect::LEN]) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(1);
        while self.sends >= MAX_SENDS {
            if let Some(d) = self.poll()? {
                // A datagram arriving while the send queue drains is dropped, as a lost one.
                let _ = d;
            }
            if Instant::now() > deadline {
                return Err(io::Error::other("UD send queue did not drain within 1 s"));
            }
        }
        let ah = self.ah(lid)?;
        let mut sge = sys::ibv_sge {
            addr: msg.as_ptr() as u64,
            length: msg.len() as u32,
            lkey: 0,
        };
        // SAFETY: ibv_send_wr is plain data; all zeroes is valid before the fields are set.
        let mut wr: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = SEND_ID;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = sys::ibv_wr_opcode::IBV_WR_SEND;
        wr.send_flags =
            (sys::ibv_send_flags::IBV_SEND_SIGNALED | sys::ibv_send_flags::IBV_SEND_INLINE).0;
        wr.wr.ud = sys::ud_t {
            ah: ah.as_ptr(),
            remote_qpn: qpn,
            remote_qkey: RDV_QKEY,
        };
        let mut bad = null_mut();
        // SAFETY: the QP and AH are live; the data is inline, copied by the provider during
        // the call, so `msg` need not outlive it.
        let ret = unsafe { sys::ibv_post_send(self.qp.as_ptr(), &mut wr, &mut bad) };
        check(ret, "ibv_post_send (UD)")?;
        self.sends += 1;
        Ok(())
    }
}

impl Drop for Rendezvous {
    fn drop(&mut self) {
        // SAFETY: the QP and AHs were made by this value and are destroyed once, before the
        // CQ, MR and PD they use (dropped with the fields after this).
        unsafe {
            sys::ibv_destroy_qp(self.qp.as_ptr());
            for ah in self.ahs.values() {
                sys::ibv_destroy_ah(ah.as_ptr());
            }
        }
    }
}
