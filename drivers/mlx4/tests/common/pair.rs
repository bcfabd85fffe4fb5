//! Two HCAs with one QP each, connected or datagram: the set-up the port, counter and
//! subnet-manager tests share. Every QP has 8 send and 8 receive WRs of one SGE; every node
//! an 8 KiB buffer in its arena, sends from its first half and receives into its second.

use mlx4::CqHandle;
use mlx4::Hca;
use mlx4::QpHandle;
use mlx4::{MrHandle, PdHandle};
use verbs::*;

use super::{test_config, SimPlatform};

/// Bytes of each node's buffer; the receive half starts at [`RECV_OFFSET`].
pub const BUF_LEN: u64 = 8192;
pub const RECV_OFFSET: u64 = 4096;

/// A QP of `qp_type` on `cq` (send and receive) with 8 WRs each way, one SGE, `max_inline`
/// bytes of inline data; `sq_sig_all` signals every send.
pub fn create_qp(
    h: &mut Hca<SimPlatform>,
    pd: PdHandle,
    cq: CqHandle,
    qp_type: QpType,
    max_inline: u32,
    sq_sig_all: bool,
) -> QpHandle {
    h.create_qp(&QpInitAttr {
        pd,
        send_cq: cq,
        recv_cq: cq,
        qp_type,
        cap: QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: max_inline,
        },
        sq_sig_all,
    })
    .unwrap()
}

/// One completion of `cq`, polling for at most `bound_us` microseconds of model time.
pub fn poll_one(
    h: &mut Hca<SimPlatform>,
    p: &SimPlatform,
    cq: CqHandle,
    bound_us: u32,
) -> WorkCompletion {
    let mut wc = [WorkCompletion::default(); 1];
    for _ in 0..bound_us {
        if h.poll_cq(cq, &mut wc).expect("poll_cq") == 1 {
            return wc[0];
        }
        mlx4::Platform::delay_us(p, 1);
    }
    panic!("no completion");
}

/// One node: the HCA up, its ports' LIDs, a PD, a CQ of 64, one QP and the registered buffer.
pub struct QpNode {
    pub h: Hca<SimPlatform>,
    /// A second handle on the node, for the arena and the clock.
    pub p: SimPlatform,
    pub pd: PdHandle,
    pub cq: CqHandle,
    pub qp: QpHandle,
    /// The LID of port n at `lids[n - 1]`, for the ports waited for.
    pub lids: Vec<u16>,
    pub buf: u64,
    pub mr: MrHandle,
}

impl QpNode {
    /// Brings `p`'s HCA up, waits for `ports` to be ACTIVE and makes a QP of `qp_type`
    /// (no inline data, sends signalled per WR) and the buffer registered with `access`.
    pub fn new(p: SimPlatform, ports: u8, qp_type: QpType, access: AccessFlags) -> QpNode {
        let probe = p.clone_handle();
        let mut h = Hca::init(p, test_config()).expect("bring-up");
        let lids = (1..=ports)
            .map(|port| h.wait_port_active(port, 5000).expect("port active").lid)
            .collect();
        let pd = h.alloc_pd().unwrap();
        let cq = h.create_cq(64).unwrap();
        let qp = create_qp(&mut h, pd, cq, qp_type, 0, false);
        let buf = probe.arena.alloc(BUF_LEN as usize, 4096).unwrap();
        let mr = h.reg_mr(pd, buf, BUF_LEN, access).unwrap();
        QpNode {
            h,
            p: probe,
            pd,
            cq,
            qp,
            lids,
            buf,
            mr,
        }
    }

    /// The next completion of the node's CQ (bounded at 200 ms of model time).
    pub fn poll(&mut self) -> WorkCompletion {
        poll_one(&mut self.h, &self.p, self.cq, 200_000)
    }
}

/// Where a connected QP sends: out of `port` to `dlid` with `sl`, both PSNs `psn`, remote
/// access `access`.
#[derive(Clone, Copy, Debug)]
pub struct Path {
    pub port: u8,
    pub dlid: u16,
    pub sl: u8,
    pub psn: u32,
    pub access: AccessFlags,
}

/// Takes `a`'s connected QP through INIT, RTR and RTS towards QP `dest_qpn` along `path`
/// (RC: one outstanding read/atomic each way, RNR timer 12).
pub fn connect(a: &mut QpNode, dest_qpn: u32, qp_type: QpType, path: &Path) {
    let mut init = QpAttr::new(QpState::Init);
    init.port_num = path.port;
    init.access = path.access;
    a.h.modify_qp(a.qp, &init).unwrap();
    let mut rtr = QpAttr::new(QpState::Rtr);
    rtr.port_num = path.port;
    rtr.path_mtu = Mtu::Mtu2048;
    rtr.dest_qp_num = dest_qpn;
    rtr.rq_psn = path.psn;
    rtr.ah = AhAttr {
        dlid: path.dlid,
        sl: path.sl,
        port: path.port,
        ..AhAttr::default()
    };
    if qp_type == QpType::Rc {
        rtr.max_dest_rd_atomic = 1;
        rtr.min_rnr_timer = 12;
    }
    a.h.modify_qp(a.qp, &rtr).unwrap();
    let mut rts = QpAttr::new(QpState::Rts);
    rts.port_num = path.port;
    rts.sq_psn = path.psn;
    rts.max_rd_atomic = u8::from(qp_type == QpType::Rc);
    a.h.modify_qp(a.qp, &rts).unwrap();
}

/// `a` SENDs the first `len` bytes of its buffer to `b`'s receive half over their connected
/// QPs; checks the send completion (success, WR 1) and returns `b`'s receive completion
/// (WR 2) for the caller to check.
pub fn send_connected(a: &mut QpNode, b: &mut QpNode, len: u32) -> WorkCompletion {
    let rsge = [Sge {
        addr: b.buf + RECV_OFFSET,
        length: 4096,
        lkey: b.h.mr_lkey(b.mr),
    }];
    b.h.post_recv(
        b.qp,
        &RecvWr {
            wr_id: 2,
            sg_list: &rsge,
        },
    )
    .unwrap();
    let ssge = [Sge {
        addr: a.buf,
        length: len,
        lkey: a.h.mr_lkey(a.mr),
    }];
    let wr: SendWr<'_, mlx4::Ah> = SendWr {
        wr_id: 1,
        opcode: WrOpcode::Send,
        payload: Payload::Sges(&ssge),
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    a.h.post_send(a.qp, &wr).unwrap();
    let s = a.poll();
    assert_eq!((s.status, s.wr_id), (WcStatus::Success, 1), "{s:?}");
    b.poll()
}
