//! Two HCAs on one fabric: CQ/QP creation, UD/UC ping-pong with payload checks, RC
//! operations, and data-path error paths.

mod common;

use common::*;
use mlx4::CqHandle;
use mlx4::Hca;
use mlx4::{Ah, QpHandle};
use mlx4::{MrHandle, PdHandle};
use sim::FabricConfig;
use verbs::*;

pub struct Side {
    pub h: Hca<SimPlatform>,
    pub p: SimPlatform,
    pub pd: PdHandle,
    pub scq: CqHandle,
    pub rcq: CqHandle,
    pub qp: QpHandle,
    pub lid: u16,
    pub mtu: Mtu,
    /// Registered buffer: first half for sends, second half for receives.
    pub buf: u64,
    pub len: u64,
    pub mr: MrHandle,
}

impl Side {
    // The arena is memory shared with the device model (UnsafeCell bytes); tests view it
    // through short-lived slices, never two overlapping ones at once.
    #[allow(clippy::mut_from_ref)]
    pub fn bytes(&self, off: u64, n: usize) -> &mut [u8] {
        let ptr = self.p.arena.ptr_of(self.buf + off).unwrap();
        // SAFETY: [buf, buf + len) is an arena allocation owned by this test.
        unsafe { std::slice::from_raw_parts_mut(ptr, n) }
    }
}

pub fn bring_up(p: SimPlatform, qp_type: QpType, buf_len: u64, cap: QpCap) -> Side {
    let probe = p.clone_handle();
    let mut h = Hca::init(p, test_config()).expect("bring-up");
    let attr = h.wait_port_active(1, 5000).expect("port active");
    let pd = h.alloc_pd().unwrap();
    let scq = h.create_cq(64).unwrap();
    let rcq = h.create_cq(1024).unwrap();
    let qp = h
        .create_qp(&QpInitAttr {
            pd,
            send_cq: scq,
            recv_cq: rcq,
            qp_type,
            cap,
            sq_sig_all: false,
        })
        .unwrap();
    let buf = probe.arena.alloc(buf_len as usize, 4096).unwrap();
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let mr = h.reg_mr(pd, buf, buf_len, access).unwrap();
    Side {
        h,
        p: probe,
        pd,
        scq,
        rcq,
        qp,
        lid: attr.lid,
        mtu: attr.active_mtu.unwrap_or(Mtu::Mtu2048),
        buf,
        len: buf_len,
        mr,
    }
}

pub fn connect(a: &mut Side, b: &Side, qp_type: QpType) {
    let mut init = QpAttr::new(QpState::Init);
    init.qkey = 0x1111_1111;
    init.access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    a.h.modify_qp(a.qp, &init).unwrap();
    let mut rtr = QpAttr::new(QpState::Rtr);
    if qp_type != QpType::Ud {
        rtr.path_mtu = a.mtu.min(b.mtu);
        rtr.dest_qp_num = b.h.qp_num(b.qp);
        rtr.rq_psn = 0x123;
        rtr.ah = AhAttr {
            dlid: b.lid,
            port: 1,
            ..AhAttr::default()
        };
        rtr.max_dest_rd_atomic = 4;
        rtr.min_rnr_timer = 12;
    }
    a.h.modify_qp(a.qp, &rtr).unwrap();
    let mut rts = QpAttr::new(QpState::Rts);
    rts.sq_psn = 0x123;
    rts.max_rd_atomic = 4;
    a.h.modify_qp(a.qp, &rts).unwrap();
}

/// Poll one completion, bounded; lets the fabric run between polls.
pub fn poll_one(s: &mut Side, cq: CqHandle) -> WorkCompletion {
    let mut wc = [WorkCompletion::default(); 1];
    for _ in 0..200_000 {
        let n = s.h.poll_cq(cq, &mut wc).expect("poll_cq");
        if n == 1 {
            return wc[0];
        }
        mlx4::Platform::delay_us(&s.p, 1);
    }
    panic!("no completion on CQ {:?}", cq);
}

fn pair(qp_type: QpType, buf_len: u64, cap: QpCap) -> (sim::inproc::SharedMachine, Side, Side) {
    pair_on(FabricConfig::default(), qp_type, buf_len, cap)
}

/// [`pair`] on a fabric that drops every data packet.
fn lossy_pair(qp_type: QpType) -> (sim::inproc::SharedMachine, Side, Side) {
    let faults = sim::Faults {
        drop_probability: 1.0,
        ..sim::Faults::default()
    };
    let fabric = FabricConfig {
        faults,
        ..FabricConfig::default()
    };
    pair_on(fabric, qp_type, 64 << 10, cap(64))
}

/// Two nodes on a fabric of `fabric`, brought up and connected to each other.
fn pair_on(
    fabric: FabricConfig,
    qp_type: QpType,
    buf_len: u64,
    cap: QpCap,
) -> (sim::inproc::SharedMachine, Side, Side) {
    let (m, mut ps) = machine(2, fabric);
    let p1 = ps.remove(1);
    let p0 = ps.remove(0);
    let mut a = bring_up(p0, qp_type, buf_len, cap);
    let mut b = bring_up(p1, qp_type, buf_len, cap);
    connect(&mut a, &b, qp_type);
    connect(&mut b, &a, qp_type);
    (m, a, b)
}

/// The UD destination of `b`'s QP, through an address handle of `a` (port 1).
fn ud_dest(a: &mut Side, b: &Side) -> UdDest<Ah> {
    let ah =
        a.h.create_ah(
            a.pd,
            &AhAttr {
                dlid: b.lid,
                port: 1,
                ..AhAttr::default()
            },
        )
        .unwrap();
    UdDest {
        ah,
        remote_qpn: b.h.qp_num(b.qp),
        remote_qkey: 0x1111_1111,
    }
}

/// Posts one signalled SEND of `payload` on `a`'s QP (to `ud` on a UD QP) and returns its
/// completion from `a`'s send CQ.
fn send_signaled(
    a: &mut Side,
    wr_id: u64,
    payload: Payload<'_>,
    ud: Option<UdDest<Ah>>,
) -> WorkCompletion {
    let wr: SendWr<'_, Ah> = SendWr {
        wr_id,
        opcode: WrOpcode::Send,
        payload,
        flags: SendFlags::SIGNALED,
        ud,
    };
    a.h.post_send(a.qp, &wr).unwrap();
    let c = a.scq;
    poll_one(a, c)
}

/// Polls `b`'s receive CQ for 10 ms of model time and asserts it stays empty (`why`).
fn assert_nothing_received(b: &mut Side, why: &str) {
    let mut w = [WorkCompletion::default(); 1];
    for _ in 0..1000 {
        assert_eq!(b.h.poll_cq(b.rcq, &mut w).unwrap(), 0, "{why}");
        mlx4::Platform::delay_us(&b.p, 10);
    }
}

fn cap(inline: u32) -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 64,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: inline,
    }
}

fn fill(s: &Side, off: u64, n: usize, seed: u8) {
    for (i, b) in s.bytes(off, n).iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
    }
}

/// One message from `a` to `b` of `size` bytes; checks the completion and the payload.
fn send_one(a: &mut Side, b: &mut Side, size: usize, ud: bool, seed: u8) {
    let half = a.len / 2;
    let grh = if ud { 40 } else { 0 };
    b.bytes(half, size + grh).fill(0);
    let rsge = [Sge {
        addr: b.buf + half,
        length: (size + grh) as u32,
        lkey: b.h.mr_lkey(b.mr),
    }];
    b.h.post_recv(
        b.qp,
        &RecvWr {
            wr_id: 0xB000 + size as u64,
            sg_list: &rsge,
        },
    )
    .unwrap();
    fill(a, 0, size, seed);
    let max_inline = a.h.qp_cap(a.qp).max_inline_data as usize;
    let ssge = [Sge {
        addr: a.buf,
        length: size as u32,
        lkey: a.h.mr_lkey(a.mr),
    }];
    let data: Vec<u8> = a.bytes(0, size).to_vec();
    let payload = if size <= max_inline {
        Payload::Inline(&data)
    } else {
        Payload::Sges(&ssge)
    };
    let dest = ud.then(|| ud_dest(a, b));
    let wr: SendWr<'_, Ah> = SendWr {
        wr_id: 0xA000 + size as u64,
        opcode: WrOpcode::Send,
        payload,
        flags: SendFlags::SIGNALED,
        ud: dest,
    };
    a.h.post_send(a.qp, &wr)
        .unwrap_or_else(|e| panic!("post_send {size}: {e}"));
    let swc = {
        let c = a.scq;
        poll_one(a, c)
    };
    assert_eq!(swc.status, WcStatus::Success, "send {size}: {swc:?}");
    assert_eq!(swc.wr_id, 0xA000 + size as u64);
    assert_eq!(swc.opcode, WcOpcode::Send);
    let rwc = {
        let c = b.rcq;
        poll_one(b, c)
    };
    assert_eq!(rwc.status, WcStatus::Success, "recv {size}: {rwc:?}");
    assert_eq!(rwc.wr_id, 0xB000 + size as u64);
    assert_eq!(rwc.opcode, WcOpcode::Recv);
    assert_eq!(rwc.byte_len as usize, size + grh, "byte_len of {size}");
    assert_eq!(rwc.qp_num, b.h.qp_num(b.qp));
    if ud {
        assert_eq!(rwc.src_qp, a.h.qp_num(a.qp));
        assert_eq!(rwc.slid, a.lid);
    }
    let got = b.bytes(half + grh as u64, size).to_vec();
    assert!(got == data, "payload of {size} bytes differs");
}

#[test]
fn cq_and_qp_creation_and_state_machine() {
    let (_m, mut ps) = machine(1, FabricConfig::default());
    let p = ps.remove(0);
    let mut s = bring_up(p, QpType::Ud, 8192, cap(64));
    let c = s.h.qp_cap(s.qp);
    assert!(c.max_inline_data >= 64 && c.max_send_wr >= 16 && c.max_recv_wr >= 64);
    // Posting before RTS is refused with the state.
    let wr: SendWr<'_, Ah> = SendWr {
        wr_id: 1,
        opcode: WrOpcode::Send,
        payload: Payload::Inline(&[1, 2]),
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    assert_eq!(
        s.h.post_send(s.qp, &wr),
        Err(Error::WrongState {
            state: QpState::Reset
        })
    );
    let rsge = [Sge {
        addr: s.buf,
        length: 64,
        lkey: s.h.mr_lkey(s.mr),
    }];
    assert_eq!(
        s.h.post_recv(
            s.qp,
            &RecvWr {
                wr_id: 1,
                sg_list: &rsge
            }
        ),
        Err(Error::WrongState {
            state: QpState::Reset
        })
    );
    // A bad transition is refused without a command, and RESET to RESET needs none
    // (Linux's `_mlx4_ib_modify_qp` returns at once).
    let issued = s.p.commands.borrow().len();
    assert!(s.h.modify_qp(s.qp, &QpAttr::new(QpState::Rts)).is_err());
    s.h.modify_qp(s.qp, &QpAttr::new(QpState::Reset)).unwrap();
    assert_eq!(
        s.p.commands.borrow().len(),
        issued,
        "no command for a bad transition or for RESET to RESET"
    );
    let mut init = QpAttr::new(QpState::Init);
    init.qkey = 7;
    s.h.modify_qp(s.qp, &init).unwrap();
    s.h.modify_qp(s.qp, &QpAttr::new(QpState::Rtr)).unwrap();
    s.h.modify_qp(s.qp, &QpAttr::new(QpState::Rts)).unwrap();
    s.h.modify_qp(s.qp, &QpAttr::new(QpState::Err)).unwrap();
    s.h.modify_qp(s.qp, &QpAttr::new(QpState::Reset)).unwrap();
    // Destroying a CQ still used by a QP is refused.
    assert!(s.h.destroy_cq(s.scq).is_err());
    s.h.destroy_qp(s.qp).unwrap();
    assert_eq!(
        s.h.destroy_qp(s.qp),
        Err(Error::InvalidHandle),
        "stale handle"
    );
    s.h.destroy_cq(s.scq).unwrap();
    s.h.destroy_cq(s.rcq).unwrap();
    s.h.dereg_mr(s.mr).unwrap();
    let probe = s.p.clone_handle();
    assert_no_violations(&probe);
    s.h.close().unwrap();
    assert!(probe.arena.free(s.buf));
    assert_eq!(probe.arena.bytes_in_use(), 0);
}

/// §2.2/§4.4: 2RST_QP returns a QP to software (there is no HW2SW_QP); CLOSE_HCA after
/// destroying every QP this way must not find QPs in hardware ownership.
#[test]
fn close_hca_after_destroying_a_used_qp_has_no_violations() {
    let (_m, mut ps) = machine(1, FabricConfig::default());
    let p = ps.remove(0);
    let mut s = bring_up(p, QpType::Ud, 8192, cap(64));
    let mut init = QpAttr::new(QpState::Init);
    init.qkey = 7;
    s.h.modify_qp(s.qp, &init).unwrap();
    s.h.destroy_qp(s.qp).unwrap();
    let probe = s.p.clone_handle();
    s.h.close().unwrap();
    assert_no_violations(&probe);
}

#[test]
fn ud_packet_loss_completes_the_send_and_loses_the_receive() {
    let (m, mut a, mut b) = lossy_pair(QpType::Ud);
    let rsge = [Sge {
        addr: b.buf,
        length: 100,
        lkey: b.h.mr_lkey(b.mr),
    }];
    b.h.post_recv(
        b.qp,
        &RecvWr {
            wr_id: 1,
            sg_list: &rsge,
        },
    )
    .unwrap();
    let dest = ud_dest(&mut a, &b);
    let wc = send_signaled(&mut a, 2, Payload::Inline(&[1, 2, 3, 4]), Some(dest));
    assert_eq!(wc.status, WcStatus::Success, "UD send completes locally");
    assert_nothing_received(&mut b, "the packet was dropped");
    assert!(m.borrow().fabric_ref().counters(b.p.hca).packets_received == 0);
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
}

#[test]
fn ud_ping_pong_every_power_of_two_up_to_the_mtu() {
    let (_m, mut a, mut b) = pair(QpType::Ud, 64 << 10, cap(188));
    let mtu = a.mtu.min(b.mtu).bytes() as usize;
    let mut size = 1;
    let mut k = 0u8;
    while size <= mtu {
        send_one(&mut a, &mut b, size, true, k);
        send_one(&mut b, &mut a, size, true, k.wrapping_add(1));
        size *= 2;
        k = k.wrapping_add(2);
    }
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
}

#[test]
fn uc_ping_pong_every_power_of_two_up_to_8_mib() {
    let (_m, mut a, mut b) = pair(QpType::Uc, 16 << 20, cap(236));
    let mut size = 1;
    let mut k = 0u8;
    while size <= 8 << 20 {
        send_one(&mut a, &mut b, size, false, k);
        send_one(&mut b, &mut a, size, false, k.wrapping_add(1));
        size *= 2;
        k = k.wrapping_add(2);
    }
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
}

#[test]
fn rc_send_write_read_and_atomics() {
    let (_m, mut a, mut b) = pair(QpType::Rc, 1 << 20, cap(64));
    send_one(&mut a, &mut b, 100, false, 1);
    send_one(&mut a, &mut b, 9000, false, 2);
    send_one(&mut b, &mut a, 3, false, 3);
    let half = b.len / 2;
    let lkey = a.h.mr_lkey(a.mr);
    let rkey = b.h.mr_rkey(b.mr);

    // RDMA WRITE 64 KiB into b's second half.
    let n = 64 << 10;
    fill(&a, 0, n, 9);
    b.bytes(half, n).fill(0);
    let s = [Sge {
        addr: a.buf,
        length: n as u32,
        lkey,
    }];
    let wr: SendWr<'_, Ah> = SendWr {
        wr_id: 1,
        opcode: WrOpcode::RdmaWrite {
            remote_addr: b.buf + half,
            rkey,
        },
        payload: Payload::Sges(&s),
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    a.h.post_send(a.qp, &wr).unwrap();
    let wc = {
        let c = a.scq;
        poll_one(&mut a, c)
    };
    assert_eq!(
        (wc.status, wc.opcode, wc.wr_id),
        (WcStatus::Success, WcOpcode::RdmaWrite, 1)
    );
    assert!(b.bytes(half, n) == a.bytes(0, n), "RDMA WRITE payload");

    // RDMA READ it back into a's second half.
    a.bytes(half, n).fill(0);
    let s = [Sge {
        addr: a.buf + half,
        length: n as u32,
        lkey,
    }];
    let wr: SendWr<'_, Ah> = SendWr {
        wr_id: 2,
        opcode: WrOpcode::RdmaRead {
            remote_addr: b.buf + half,
            rkey,
        },
        payload: Payload::Sges(&s),
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    a.h.post_send(a.qp, &wr).unwrap();
    let wc = {
        let c = a.scq;
        poll_one(&mut a, c)
    };
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len),
        (WcStatus::Success, WcOpcode::RdmaRead, n as u32)
    );
    assert!(a.bytes(half, n) == a.bytes(0, n), "RDMA READ payload");

    // Atomics on an 8-byte word of b.
    let word = b.buf + 4096;
    b.bytes(4096, 8).copy_from_slice(&100u64.to_be_bytes());
    let res = [Sge {
        addr: a.buf + 8192,
        length: 8,
        lkey,
    }];
    let wr: SendWr<'_, Ah> = SendWr {
        wr_id: 3,
        opcode: WrOpcode::AtomicFetchAndAdd {
            remote_addr: word,
            rkey,
            add: 5,
        },
        payload: Payload::Sges(&res),
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    a.h.post_send(a.qp, &wr).unwrap();
    let wc = {
        let c = a.scq;
        poll_one(&mut a, c)
    };
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::FetchAdd)
    );
    assert_eq!(
        a.bytes(8192, 8),
        &100u64.to_be_bytes(),
        "old value returned"
    );
    assert_eq!(b.bytes(4096, 8), &105u64.to_be_bytes(), "added");
    let wr: SendWr<'_, Ah> = SendWr {
        wr_id: 4,
        opcode: WrOpcode::AtomicCmpAndSwp {
            remote_addr: word,
            rkey,
            compare: 105,
            swap: 7,
        },
        payload: Payload::Sges(&res),
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    a.h.post_send(a.qp, &wr).unwrap();
    let wc = {
        let c = a.scq;
        poll_one(&mut a, c)
    };
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::CompSwap)
    );
    assert_eq!(a.bytes(8192, 8), &105u64.to_be_bytes());
    assert_eq!(b.bytes(4096, 8), &7u64.to_be_bytes(), "swapped");
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
}

#[test]
fn completion_events_after_req_notify_cq() {
    let (_m, mut a, mut b) = pair(QpType::Ud, 64 << 10, cap(64));
    b.h.req_notify_cq(b.rcq, false).unwrap();
    assert!(
        b.h.get_cq_event(b.rcq, 1_000_000).is_err(),
        "no event before a completion"
    );
    let _ = b.h.take_interrupt(mlx4::IrqLine::Msix(0));
    send_one(&mut a, &mut b, 16, true, 5);
    assert!(
        b.h.take_interrupt(mlx4::IrqLine::Msix(0)),
        "the COMP event raised MSI-X vector 0"
    );
    b.h.get_cq_event(b.rcq, 1_000_000_000)
        .expect("completion event");
    // Not re-armed: the next completion raises no event.
    send_one(&mut a, &mut b, 16, true, 6);
    assert!(b.h.get_cq_event(b.rcq, 1_000_000).is_err());
    // Re-armed (sequence number advanced by the event): the next one does.
    b.h.req_notify_cq(b.rcq, false).unwrap();
    send_one(&mut a, &mut b, 16, true, 7);
    b.h.get_cq_event(b.rcq, 1_000_000_000)
        .expect("second completion event");
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
}

/// MODIFY_CQ moderation: with cq_count 3 the armed receive CQ's event waits for the third
/// completion; with only cq_period 20 ms one completion's event comes once the period has
/// passed on the model's clock (not at once); both 0 restore an event per completion.
#[test]
fn cq_moderation_holds_the_event_for_count_completions_or_period() {
    let (_m, mut a, mut b) = pair(QpType::Ud, 64 << 10, cap(64));
    let mod_cq = |b: &mut Side, cq_count, cq_period| {
        b.h.modify_cq(
            b.rcq,
            CqModeration {
                cq_count,
                cq_period,
            },
        )
        .expect("MODIFY_CQ")
    };
    mod_cq(&mut b, 3, 0);
    b.h.req_notify_cq(b.rcq, false).unwrap();
    for seed in 0..2 {
        send_one(&mut a, &mut b, 16, true, seed);
        assert!(
            b.h.get_cq_event(b.rcq, 1_000_000).is_err(),
            "no event after completion {}",
            seed + 1
        );
    }
    send_one(&mut a, &mut b, 16, true, 2);
    b.h.get_cq_event(b.rcq, 1_000_000)
        .expect("event at the third");

    mod_cq(&mut b, 0, 20_000);
    b.h.req_notify_cq(b.rcq, false).unwrap();
    let _ = b.h.take_interrupt(mlx4::IrqLine::Msix(0));
    send_one(&mut a, &mut b, 16, true, 3);
    assert!(
        !b.h.take_interrupt(mlx4::IrqLine::Msix(0)),
        "the completion alone raises no interrupt"
    );
    assert!(
        b.h.get_cq_event(b.rcq, 5_000_000).is_err(),
        "nothing within 5 ms of a 20 ms period"
    );
    b.h.get_cq_event(b.rcq, 100_000_000)
        .expect("event once the period has passed");

    mod_cq(&mut b, 0, 0);
    b.h.req_notify_cq(b.rcq, false).unwrap();
    send_one(&mut a, &mut b, 16, true, 4);
    b.h.get_cq_event(b.rcq, 1_000_000)
        .expect("moderation off: event at the first completion");
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
}

#[test]
fn data_path_bad_input_is_typed() {
    let (_m, mut a, b) = pair(QpType::Uc, 64 << 10, cap(32));
    let max = a.h.qp_cap(a.qp).max_inline_data as usize;
    let big = vec![0u8; max + 1];
    let wr: SendWr<'_, Ah> = SendWr {
        wr_id: 1,
        opcode: WrOpcode::Send,
        payload: Payload::Inline(&big),
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    assert_eq!(
        a.h.post_send(a.qp, &wr),
        Err(Error::InlineTooLarge { len: max + 1, max })
    );
    // READ and atomics are not UC operations.
    let s = [Sge {
        addr: a.buf,
        length: 8,
        lkey: a.h.mr_lkey(a.mr),
    }];
    let wr: SendWr<'_, Ah> = SendWr {
        wr_id: 2,
        opcode: WrOpcode::RdmaRead {
            remote_addr: b.buf,
            rkey: b.h.mr_rkey(b.mr),
        },
        payload: Payload::Sges(&s),
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    assert_eq!(a.h.post_send(a.qp, &wr), Err(Error::UnsupportedOpcode));
    let many = [s[0]; 8];
    let wr: SendWr<'_, Ah> = SendWr {
        wr_id: 3,
        opcode: WrOpcode::Send,
        payload: Payload::Sges(&many),
        flags: SendFlags::empty(),
        ud: None,
    };
    assert!(matches!(
        a.h.post_send(a.qp, &wr),
        Err(Error::TooManySge { .. })
    ));
    // A full send queue: unsignaled sends without polling.
    let max_wr = a.h.qp_cap(a.qp).max_send_wr;
    let small: SendWr<'_, Ah> = SendWr {
        wr_id: 4,
        opcode: WrOpcode::RdmaWrite {
            remote_addr: b.buf,
            rkey: b.h.mr_rkey(b.mr),
        },
        payload: Payload::Inline(&[1, 2, 3, 4]),
        flags: SendFlags::empty(),
        ud: None,
    };
    for _ in 0..max_wr {
        a.h.post_send(a.qp, &small).unwrap();
    }
    assert_eq!(a.h.post_send(a.qp, &small), Err(Error::QueueFull));
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
}

#[test]
fn bad_rkey_ends_in_a_remote_access_error() {
    let (_m, mut a, mut b) = pair(QpType::Rc, 64 << 10, cap(32));
    let s = [Sge {
        addr: a.buf,
        length: 64,
        lkey: a.h.mr_lkey(a.mr),
    }];
    let wr: SendWr<'_, Ah> = SendWr {
        wr_id: 9,
        opcode: WrOpcode::RdmaWrite {
            remote_addr: b.buf,
            rkey: b.h.mr_rkey(b.mr) ^ 0x100,
        },
        payload: Payload::Sges(&s),
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    a.h.post_send(a.qp, &wr).unwrap();
    let wc = {
        let c = a.scq;
        poll_one(&mut a, c)
    };
    assert_eq!(wc.wr_id, 9);
    assert_eq!(wc.status, WcStatus::RemAccessErr, "{wc:?}");
    let v = violations(&a.p);
    assert!(
        v.len() == 1 && v[0].contains("remote access"),
        "only the provoked error: {v:?}"
    );
    assert_no_violations(&b.p);
    let _ = &mut b;
}

#[test]
fn bad_lkey_ends_in_a_local_protection_error() {
    let (_m, mut a, b) = pair(QpType::Ud, 64 << 10, cap(0));
    let s = [Sge {
        addr: a.buf,
        length: 64,
        lkey: a.h.mr_lkey(a.mr) ^ 0x300,
    }];
    let dest = ud_dest(&mut a, &b);
    let wc = send_signaled(&mut a, 7, Payload::Sges(&s), Some(dest));
    assert_eq!(wc.wr_id, 7);
    assert_eq!(wc.status, WcStatus::LocProtErr, "{wc:?}");
    let v = violations(&a.p);
    assert!(
        v.len() == 1 && v[0].contains("LocalProtection"),
        "only the provoked error: {v:?}"
    );
}

fn counters(s: &Side) -> sim::Counters {
    s.p.m.borrow().fabric_ref().counters(s.p.hca)
}

#[test]
fn small_inline_sends_go_through_blueflame_large_ones_through_the_doorbell() {
    let (_m, mut a, mut b) = pair(QpType::Uc, 64 << 10, cap(64));
    let bf0 = counters(&a).blueflame_bytes;
    send_one(&mut a, &mut b, 2, false, 1);
    let bf1 = counters(&a).blueflame_bytes;
    assert_eq!(
        bf1 - bf0,
        64,
        "a 2-byte inline UC SEND is one 64-byte BlueFlame write"
    );
    send_one(&mut a, &mut b, 4096, false, 2);
    assert_eq!(
        counters(&a).blueflame_bytes,
        bf1,
        "a gathered send rings the doorbell"
    );
    // A zero-length SEND (no data segment at all) rings the doorbell too.
    let bf2 = counters(&a).blueflame_bytes;
    send_one(&mut a, &mut b, 0, false, 3);
    assert_eq!(counters(&a).blueflame_bytes, bf2);
    // Many posts alternate BlueFlame halves without the model objecting.
    for i in 0..50 {
        send_one(&mut a, &mut b, 8, false, i);
    }
    assert_eq!(counters(&a).blueflame_bytes - bf2, 50 * 64);
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
}

#[test]
fn mtt_mr_over_scattered_pages_translates_rdma_writes() {
    let (_m, mut a, mut b) = pair(QpType::Uc, 64 << 10, cap(32));
    // Four single pages of b, allocated apart and listed in reverse address order.
    let mut pages = Vec::new();
    let mut spacers = Vec::new();
    for _ in 0..4 {
        pages.push(b.p.arena.alloc(4096, 4096).unwrap());
        spacers.push(b.p.arena.alloc(4096, 4096).unwrap());
    }
    pages.reverse();
    let iova = 0x7000_0000u64;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mtts_before = b.h.mtts_in_use();
    let mr =
        b.h.reg_mr_pages(b.pd, iova, 4 * 4096, &pages, 12, access)
            .unwrap();
    assert_eq!(b.h.mtts_in_use(), mtts_before + 4, "one MTT entry per page");
    let n = 4 * 4096;
    fill(&a, 0, n, 77);
    let s = [Sge {
        addr: a.buf,
        length: n as u32,
        lkey: a.h.mr_lkey(a.mr),
    }];
    let wr: SendWr<'_, Ah> = SendWr {
        wr_id: 1,
        opcode: WrOpcode::RdmaWrite {
            remote_addr: iova,
            rkey: b.h.mr_rkey(mr),
        },
        payload: Payload::Sges(&s),
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    a.h.post_send(a.qp, &wr).unwrap();
    let wc = {
        let c = a.scq;
        poll_one(&mut a, c)
    };
    assert_eq!(wc.status, WcStatus::Success);
    // UC has no ACK: give the fabric time to deliver, then check every page.
    for _ in 0..100 {
        mlx4::Platform::delay_us(&b.p, 10);
    }
    for (k, &pg) in pages.iter().enumerate() {
        let ptr = b.p.arena.ptr_of(pg).unwrap();
        // SAFETY: a 4 KiB arena page allocated above.
        let got = unsafe { std::slice::from_raw_parts(ptr, 4096) };
        assert!(
            got == a.bytes(k as u64 * 4096, 4096),
            "page {k} holds bytes {k}*4096.."
        );
    }
    b.h.dereg_mr(mr).unwrap();
    assert_eq!(b.h.mtts_in_use(), mtts_before);
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
}

/// A physically contiguous MR straddling a 2 GiB boundary: one covering MTT page would be
/// 2^37 bytes here (the arena starts at a multiple of 2^36), beyond Linux's largest MTT page
/// (`MLX4_MAX_MTT_SHIFT` = 31); `reg_mr` uses two 8 KiB pages instead, the model accepts the
/// MPT (it refuses entity sizes above 31), and an RDMA READ through the upper page returns
/// the bytes there. The lower page lies below the arena and is never touched.
#[test]
fn mr_straddling_a_2_gib_boundary_uses_pages_of_at_most_2_gib() {
    let (_m, mut a, mut b) = pair(QpType::Rc, 64 << 10, cap(0));
    let boundary = b.p.arena.base();
    assert_eq!(
        boundary % (1 << 31),
        0,
        "the arena starts on a 2 GiB boundary"
    );
    let mtts_before = b.h.mtts_in_use();
    let mr =
        b.h.reg_mr(b.pd, boundary - 4096, 8192, AccessFlags::REMOTE_READ)
            .unwrap();
    assert_eq!(b.h.mtts_in_use(), mtts_before + 2, "two MTT pages");
    let s = [Sge {
        addr: a.buf,
        length: 4096,
        lkey: a.h.mr_lkey(a.mr),
    }];
    let wr: SendWr<'_, Ah> = SendWr {
        wr_id: 9,
        opcode: WrOpcode::RdmaRead {
            remote_addr: boundary,
            rkey: b.h.mr_rkey(mr),
        },
        payload: Payload::Sges(&s),
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    a.h.post_send(a.qp, &wr).unwrap();
    let wc = {
        let c = a.scq;
        poll_one(&mut a, c)
    };
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    let ptr = b.p.arena.ptr_of(boundary).unwrap();
    // SAFETY: the first 4 KiB of b's arena (driver memory b does not change meanwhile: no
    // command runs between the READ and this comparison); read only.
    let there = unsafe { std::slice::from_raw_parts(ptr, 4096) }.to_vec();
    assert!(
        a.bytes(0, 4096) == &there[..],
        "READ returns the bytes above the boundary"
    );
    b.h.dereg_mr(mr).unwrap();
    assert_eq!(b.h.mtts_in_use(), mtts_before);
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
}

/// The optpar masks and access bits of an RC QP's transitions, read from the command
/// mailboxes as the device got them: Linux's `__mlx4_ib_modify_qp` with
/// `to_mlx4_access_flags` (RRE/RAE masked while max_dest_rd_atomic is 0).
#[test]
fn rc_transitions_carry_linux_optpar_and_access_bits() {
    let (_m, mut ps) = machine(2, FabricConfig::default());
    let p0 = ps.remove(0);
    let mut a = bring_up(p0, QpType::Rc, 8192, cap(0));
    // (optpar, params2, counter index) of the last `op` command's mailbox.
    let last = |a: &Side, op: mlx4::Opcode| {
        let r =
            *a.p.commands
                .borrow()
                .iter()
                .rev()
                .find(|r| r.op == op)
                .unwrap();
        let mb = a.p.arena.ptr_of(r.in_param).unwrap();
        // SAFETY: the driver's 4 KiB command inbox; no command runs while it is read.
        let b = unsafe { std::slice::from_raw_parts(mb, 256) };
        let be = |o: usize| u32::from_be_bytes(b[o..o + 4].try_into().unwrap());
        (be(0), be(8 + 0x90), b[8 + 0x18 + 4], b[8 + 0x18 + 0x20])
    };
    let mut init = QpAttr::new(QpState::Init);
    init.access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    a.h.modify_qp(a.qp, &init).unwrap();
    let (opt, params2, _, _) = last(&a, mlx4::Opcode::RST2INIT_QP);
    assert_eq!(
        opt,
        (1 << 4) | (1 << 3) | (1 << 1) | (1 << 2),
        "P_Key index | RWE | RRE | RAE"
    );
    assert_eq!(
        params2 & (7 << 13),
        1 << 14,
        "only RWE while max_dest_rd_atomic is 0"
    );
    let mut rtr = QpAttr::new(QpState::Rtr);
    rtr.dest_qp_num = 0x99;
    rtr.ah = AhAttr {
        dlid: a.lid,
        sl: 2,
        port: 1,
        ..AhAttr::default()
    };
    rtr.max_dest_rd_atomic = 4;
    rtr.min_rnr_timer = 12;
    a.h.modify_qp(a.qp, &rtr).unwrap();
    let (opt, params2, counter, sched) = last(&a, mlx4::Opcode::INIT2RTR_QP);
    let want =
        (1 << 7) | (1 << 16) | (1 << 9) | (1 << 3) | (1 << 1) | (1 << 2) | (1 << 6) | (1 << 20);
    assert_eq!(
        opt, want,
        "PRIMARY_ADDR_PATH | SCHED_QUEUE | RRA_MAX | RWE | RRE | RAE | RNR_TIMEOUT | COUNTER_INDEX"
    );
    assert_eq!(
        params2 & (7 << 13),
        7 << 13,
        "RWE | RRE | RAE with responder resources"
    );
    assert_eq!(params2 >> 21 & 7, 2, "log2 of 4 responder resources");
    assert_eq!(counter, 0, "port 1's default counter");
    assert_eq!(sched, 0x83 | (2 << 2), "port 1, SL 2");
    assert_no_violations(&a.p);
}

#[test]
fn reserved_lkey_and_physical_mr_reach_any_memory() {
    let (_m, mut a, mut b) = pair(QpType::Ud, 64 << 10, cap(0));
    // Sender: an unregistered buffer through the device's reserved L_Key (rlkey QPC bit).
    let src = a.p.arena.alloc(4096, 64).unwrap();
    let sp = a.p.arena.ptr_of(src).unwrap();
    // SAFETY: 4096 bytes just allocated.
    let sbytes = unsafe { std::slice::from_raw_parts_mut(sp, 4096) };
    for (i, x) in sbytes.iter_mut().enumerate() {
        *x = (i * 7) as u8;
    }
    // Receiver: a physical MR (no MTT), any bus address.
    let pmr = b.h.reg_phys_mr(b.pd, AccessFlags::LOCAL_WRITE).unwrap();
    let dst = b.p.arena.alloc(4096 + 40, 64).unwrap();
    let rsge = [Sge {
        addr: dst,
        length: 2048 + 40,
        lkey: b.h.mr_lkey(pmr),
    }];
    b.h.post_recv(
        b.qp,
        &RecvWr {
            wr_id: 5,
            sg_list: &rsge,
        },
    )
    .unwrap();
    let dest = ud_dest(&mut a, &b);
    let ssge = [Sge {
        addr: src,
        length: 2048,
        lkey: a.h.local_dma_lkey(),
    }];
    let wc = send_signaled(&mut a, 6, Payload::Sges(&ssge), Some(dest));
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    let wc = {
        let c = b.rcq;
        poll_one(&mut b, c)
    };
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 2048 + 40));
    let dp = b.p.arena.ptr_of(dst + 40).unwrap();
    // SAFETY: 2048 bytes inside the 4136-byte allocation.
    let got = unsafe { std::slice::from_raw_parts(dp, 2048) };
    assert!(got == &sbytes[..2048]);
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
}

#[test]
fn cq_overrun_is_a_typed_error() {
    let (_m, mut a, mut b) = pair(QpType::Ud, 64 << 10, cap(64));
    let small = a.h.create_cq(1).unwrap();
    let qp =
        a.h.create_qp(&QpInitAttr {
            pd: a.pd,
            send_cq: small,
            recv_cq: a.rcq,
            qp_type: QpType::Ud,
            cap: cap(64),
            sq_sig_all: true,
        })
        .unwrap();
    let mut init = QpAttr::new(QpState::Init);
    init.qkey = 0x1111_1111;
    a.h.modify_qp(qp, &init).unwrap();
    a.h.modify_qp(qp, &QpAttr::new(QpState::Rtr)).unwrap();
    a.h.modify_qp(qp, &QpAttr::new(QpState::Rts)).unwrap();
    let wr: SendWr<'_, Ah> = SendWr {
        wr_id: 1,
        opcode: WrOpcode::Send,
        payload: Payload::Inline(&[1]),
        flags: SendFlags::empty(),
        ud: Some(ud_dest(&mut a, &b)),
    };
    for _ in 0..4 {
        a.h.post_send(qp, &wr).unwrap();
    }
    for _ in 0..10 {
        mlx4::Platform::delay_us(&a.p, 10);
    }
    a.h.handle_interrupt();
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(a.h.poll_cq(small, &mut wc), Err(Error::CqOverrun));
    let v = violations(&a.p);
    assert!(
        !v.is_empty() && v.iter().all(|s| s.contains("overrun")),
        "only the provoked overrun: {v:?}"
    );
    let _ = &mut b;
}

#[test]
fn sge_outside_its_mr_ends_in_a_local_protection_error() {
    let (_m, mut a, b) = pair(QpType::Ud, 64 << 10, cap(0));
    // Valid lkey, but the SGE runs 32 bytes past the end of the registered range.
    let s = [Sge {
        addr: a.buf + a.len - 32,
        length: 64,
        lkey: a.h.mr_lkey(a.mr),
    }];
    let dest = ud_dest(&mut a, &b);
    let wc = send_signaled(&mut a, 8, Payload::Sges(&s), Some(dest));
    assert_eq!(wc.wr_id, 8);
    assert_eq!(wc.status, WcStatus::LocProtErr, "{wc:?}");
    let v = violations(&a.p);
    assert!(
        v.len() == 1 && v[0].contains("outside the region"),
        "only the provoked error: {v:?}"
    );
    assert_no_violations(&b.p);
}

#[test]
fn uc_packet_loss_completes_the_send_and_loses_the_message() {
    let (m, mut a, mut b) = lossy_pair(QpType::Uc);
    let rsge = [Sge {
        addr: b.buf,
        length: 8192,
        lkey: b.h.mr_lkey(b.mr),
    }];
    b.h.post_recv(
        b.qp,
        &RecvWr {
            wr_id: 1,
            sg_list: &rsge,
        },
    )
    .unwrap();
    let ssge = [Sge {
        addr: a.buf,
        length: 8192,
        lkey: a.h.mr_lkey(a.mr),
    }];
    let wc = send_signaled(&mut a, 2, Payload::Sges(&ssge), None);
    assert_eq!(
        wc.status,
        WcStatus::Success,
        "UC has no ACK: the send completes locally"
    );
    assert_nothing_received(&mut b, "the message was lost");
    assert_eq!(
        m.borrow().fabric_ref().counters(b.p.hca).packets_received,
        0
    );
    assert_no_violations(&a.p);
    assert_no_violations(&b.p);
}

#[test]
fn absurd_creation_parameters_are_typed_errors() {
    let (_m, mut ps) = machine(1, FabricConfig::default());
    let p = ps.remove(0);
    let mut s = bring_up(p, QpType::Uc, 8192, cap(8));
    assert!(matches!(
        s.h.create_cq(u32::MAX),
        Err(Error::InvalidArgument(_))
    ));
    for bad in [
        QpCap {
            max_send_wr: u32::MAX,
            ..cap(8)
        },
        QpCap {
            max_recv_wr: u32::MAX,
            ..cap(8)
        },
        QpCap {
            max_inline_data: u32::MAX,
            ..cap(8)
        },
        QpCap {
            max_send_sge: u32::MAX,
            ..cap(8)
        },
        QpCap {
            max_recv_sge: u32::MAX,
            ..cap(8)
        },
    ] {
        let r = s.h.create_qp(&QpInitAttr {
            pd: s.pd,
            send_cq: s.scq,
            recv_cq: s.rcq,
            qp_type: QpType::Uc,
            cap: bad,
            sq_sig_all: false,
        });
        assert!(
            matches!(r, Err(Error::InvalidArgument(_))),
            "{bad:?}: {r:?}"
        );
    }
    let pages = [s.buf];
    assert!(s
        .h
        .reg_mr_pages(
            s.pd,
            u64::MAX - 10,
            100,
            &pages,
            12,
            AccessFlags::LOCAL_WRITE
        )
        .is_err());
    assert!(s
        .h
        .reg_mr(s.pd, u64::MAX - 10, 100, AccessFlags::LOCAL_WRITE)
        .is_err());
    assert!(s
        .h
        .reg_mr(s.pd, s.buf, 0, AccessFlags::LOCAL_WRITE)
        .is_err());
    let mut bad_port = QpAttr::new(QpState::Init);
    bad_port.port_num = 9;
    assert!(s.h.modify_qp(s.qp, &bad_port).is_err());
    s.h.modify_qp(s.qp, &QpAttr::new(QpState::Init)).unwrap();
    let mut deep = QpAttr::new(QpState::Rtr);
    deep.max_dest_rd_atomic = 255;
    assert!(matches!(
        s.h.modify_qp(s.qp, &deep),
        Err(Error::InvalidArgument(_))
    ));
    assert_no_violations(&s.p);
}

/// A static rate the device does not support is lowered to one it does, as Linux's mlx4_ib
/// does for address vectors and paths (`create_ib_ah`, `_mlx4_set_path`): the model reports
/// rate codes 0..=11, so 2 × 40 Gb/s (IB rate 10, code 15) becomes code 11.
#[test]
fn address_vectors_and_paths_take_a_static_rate_the_device_supports() {
    let (_m, mut ps) = machine(1, FabricConfig::default());
    let p = ps.remove(0);
    let mut s = bring_up(p, QpType::Uc, 8192, cap(0));
    assert_eq!(s.h.caps().stat_rate_support, 0x0fff);
    let attr = AhAttr {
        dlid: 1,
        static_rate: 10,
        port: 1,
        ..AhAttr::default()
    };
    let ah = s.h.create_ah(s.pd, &attr).unwrap();
    assert_eq!(ah.as_bytes()[0x0A], 11, "address vector stat_rate");
    let mut init = QpAttr::new(QpState::Init);
    init.qkey = 7;
    s.h.modify_qp(s.qp, &init).unwrap();
    let mut rtr = QpAttr::new(QpState::Rtr);
    rtr.dest_qp_num = 0x99;
    rtr.ah = attr;
    s.h.modify_qp(s.qp, &rtr).unwrap();
    let qpc = mailboxes_of(&s.p, mlx4::Opcode::INIT2RTR_QP);
    // The primary path at QPC 0x18 (mailbox + 8), static_rate at path + 0x0A.
    assert_eq!(qpc[0][8 + 0x18 + 0x0A], 11, "path static_rate");
    s.h.close().unwrap();
}
