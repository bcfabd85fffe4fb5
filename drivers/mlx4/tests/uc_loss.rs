//! A multi-packet UC SEND stream over a lossy fabric, receives accounted exactly: a message
//! cut short by a lost packet completes nothing and leaves its receive WQE for the next
//! message (docs/model.md, "UC receive"), so every completion's wr_id names the buffer that
//! holds its data, and once the losses stop every posted receive is still there.

mod common;

use common::*;
use mlx4::Hca;
use sim::{FabricConfig, Faults};
use verbs::*;

const SLOTS: u64 = 16;
const MSG: usize = 8192;

struct Side {
    h: Hca<SimPlatform>,
    p: SimPlatform,
    scq: mlx4::CqHandle,
    rcq: mlx4::CqHandle,
    qp: mlx4::QpHandle,
    lid: u16,
    buf: u64,
    lkey: u32,
}

fn side(p: SimPlatform) -> Side {
    let probe = p.clone_handle();
    let mut h = Hca::init(p, test_config()).expect("bring-up");
    let lid = h.wait_port_active(1, 5000).expect("port active").lid;
    let pd = h.alloc_pd().unwrap();
    let scq = h.create_cq(SLOTS as u32 * 2).unwrap();
    let rcq = h.create_cq(SLOTS as u32 * 2).unwrap();
    let qp = h
        .create_qp(&QpInitAttr {
            pd,
            send_cq: scq,
            recv_cq: rcq,
            qp_type: QpType::Uc,
            cap: QpCap {
                max_send_wr: 4,
                max_recv_wr: SLOTS as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })
        .unwrap();
    let len = SLOTS as usize * MSG;
    let buf = probe.arena.alloc(len, 4096).unwrap();
    let mr = h
        .reg_mr(pd, buf, len as u64, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let lkey = h.mr_lkey(mr);
    Side {
        h,
        p: probe,
        scq,
        rcq,
        qp,
        lid,
        buf,
        lkey,
    }
}

fn connect(s: &mut Side, remote_qpn: u32, remote_lid: u16) {
    s.h.modify_qp(s.qp, &QpAttr::new(QpState::Init)).unwrap();
    let mut rtr = QpAttr::new(QpState::Rtr);
    rtr.dest_qp_num = remote_qpn;
    rtr.path_mtu = Mtu::Mtu2048;
    rtr.ah = AhAttr {
        dlid: remote_lid,
        port: 1,
        ..AhAttr::default()
    };
    s.h.modify_qp(s.qp, &rtr).unwrap();
    s.h.modify_qp(s.qp, &QpAttr::new(QpState::Rts)).unwrap();
}

fn mem(p: &SimPlatform, at: u64, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    p.arena.read(at, &mut v).unwrap();
    v
}

/// Message `m`: its number in the first 4 bytes, then bytes derived from it.
fn message(m: u32) -> Vec<u8> {
    let mut v: Vec<u8> = (0..MSG).map(|i| (m as usize * 7 + i) as u8).collect();
    v[..4].copy_from_slice(&m.to_le_bytes());
    v
}

fn post_recv(r: &mut Side, wr_id: u64) {
    let sge = [Sge {
        addr: r.buf + (wr_id % SLOTS) * MSG as u64,
        length: MSG as u32,
        lkey: r.lkey,
    }];
    r.h.post_recv(
        r.qp,
        &RecvWr {
            wr_id,
            sg_list: &sge,
        },
    )
    .unwrap();
}

/// Sends messages `first..first + n` from `s` to `r`; returns the message numbers `r`
/// completed, each checked against the buffer its wr_id names. Every completed receive is
/// re-posted with the next wr_id.
fn stream(s: &mut Side, r: &mut Side, first: u32, n: u32, next_wr: &mut u64) -> Vec<u32> {
    let mut got = Vec::new();
    let mut wc = [WorkCompletion::default(); 8];
    for m in first..first + n {
        s.p.arena.write(s.buf, &message(m)).unwrap();
        let sge = [Sge {
            addr: s.buf,
            length: MSG as u32,
            lkey: s.lkey,
        }];
        s.h.post_send(
            s.qp,
            &SendWr {
                wr_id: u64::from(m),
                opcode: WrOpcode::Send,
                payload: Payload::Sges(&sge),
                flags: SendFlags::SIGNALED,
                ud: None,
            },
        )
        .unwrap();
        let mut sent = false;
        for _ in 0..1000 {
            mlx4::Platform::delay_us(&s.p, 1);
            if s.h.poll_cq(s.scq, &mut wc).unwrap() > 0 {
                assert_eq!(wc[0].status, WcStatus::Success);
                assert_eq!(wc[0].wr_id, u64::from(m));
                sent = true;
                break;
            }
        }
        assert!(sent, "message {m}: no send completion");
        // UC: the sender's completion says nothing of delivery; give the fabric time.
        mlx4::Platform::delay_us(&s.p, 20);
        loop {
            let k = r.h.poll_cq(r.rcq, &mut wc).unwrap();
            if k == 0 {
                break;
            }
            for c in &wc[..k] {
                assert_eq!(c.status, WcStatus::Success, "{c:?}");
                assert_eq!(c.byte_len as usize, MSG);
                let data = mem(&r.p, r.buf + (c.wr_id % SLOTS) * MSG as u64, MSG);
                let held = u32::from_le_bytes(data[..4].try_into().unwrap());
                assert_eq!(
                    data,
                    message(held),
                    "wr_id {} (slot {}) completed but its buffer does not hold one whole message",
                    c.wr_id,
                    c.wr_id % SLOTS
                );
                assert!(
                    got.last().is_none_or(|&l| held > l) && held >= first && held <= m,
                    "wr_id {}: its buffer holds message {held}, not a new one (completed so far: {got:?})",
                    c.wr_id
                );
                got.push(held);
                post_recv(r, *next_wr);
                *next_wr += 1;
            }
        }
    }
    got
}

#[test]
fn uc_messages_cut_by_loss_leave_their_receive_for_the_next_message() {
    let fabric = FabricConfig {
        seed: 7,
        faults: Faults {
            drop_probability: 0.05,
            ..Faults::default()
        },
        ..FabricConfig::default()
    };
    let (m, mut ps) = machine(2, fabric);
    let mut r = side(ps.remove(1));
    let mut s = side(ps.remove(0));
    let (qs, qr) = (s.h.qp_num(s.qp), r.h.qp_num(r.qp));
    let (ls, lr) = (s.lid, r.lid);
    connect(&mut s, qr, lr);
    connect(&mut r, qs, ls);
    let mut next_wr = 0;
    while next_wr < SLOTS {
        post_recv(&mut r, next_wr);
        next_wr += 1;
    }

    // 8 KiB at MTU 2048 is four packets; at 5 % loss about one message in five is cut.
    let lossy = 300;
    let got = stream(&mut s, &mut r, 0, lossy, &mut next_wr);
    let lost = lossy as usize - got.len();
    assert!(
        lost > 20 && got.len() > 150,
        "{lost} of {lossy} messages lost, {} completed",
        got.len()
    );

    // Losses stop: every message completes, in the receives still posted, wr_ids in order.
    m.borrow_mut().fabric().set_drop_probability(0.0);
    let clean = 3 * SLOTS as u32;
    let before = next_wr;
    let got = stream(&mut s, &mut r, lossy, clean, &mut next_wr);
    assert_eq!(got, (lossy..lossy + clean).collect::<Vec<_>>());
    assert_eq!(next_wr - before, u64::from(clean));

    let (ps_, pr_) = (s.p.clone_handle(), r.p.clone_handle());
    s.h.close().unwrap();
    r.h.close().unwrap();
    assert_no_violations(&ps_);
    assert_no_violations(&pr_);
}
