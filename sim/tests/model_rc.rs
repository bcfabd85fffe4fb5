//! RC between two HCAs, driven by hand: SEND, RDMA WRITE(+IMM), READ, atomics, remote access
//! errors, RNR and retransmission under packet loss (§7.3).

mod harness;
use harness::*;
use sim::FabricConfig;

const UAR: u32 = 9;
const ACCESS_ALL: u32 = (1 << 10) | (1 << 11) | (1 << 12) | (1 << 13) | (1 << 14);

struct Side {
    qp: QpBufs,
    cq: u64,
    slot: u32,
}

fn rc_pair(cfg: FabricConfig) -> (Rig, Vec<Side>) {
    let mut r = Rig::with(2, cfg, sim::DeviceProfile::default());
    let mut sides = Vec::new();
    for i in 0..2 {
        r.bring_up(i);
        r.create_eq(i, 8, 6, 0);
        assert_eq!(
            r.cmd(i, 0x012, 0, (1 << 0x0a) | (1 << 0x09) | (1 << 0x04), 8, 0),
            0
        );
        r.init_port(i);
        let (cq, _) = r.create_cq(i, 128, 5, UAR, 8);
        let peer_lid = sim::Fabric::sm_lid_for(1 - i, 1);
        let qp = r.qp_to_rts(i, 80, 0, 128, UAR, 1, 0, peer_lid, 80);
        sides.push(Side { qp, cq, slot: 0 });
    }
    (r, sides)
}

/// Write a WQE (already built after the ctrl segment) into the next SQ slot and ring.
fn post(r: &mut Rig, s: &mut [Side], i: usize, opcode: u32, body: &[u8], imm: u32) {
    let slot = s[i].slot;
    s[i].slot += 1;
    let w = s[i].qp.sq + u64::from(slot % 16) * 64;
    r.write(i, w + 16, body);
    let ds = (16 + body.len()).div_ceil(16) as u32;
    r.put32(i, w + 4, ds);
    r.put32(i, w + 8, 3 << 2);
    r.put32(i, w + 12, imm);
    let owner = if slot & 16 != 0 { 1 << 31 } else { 0 };
    r.put32(i, w, owner | opcode);
    let h = r.hca(i);
    r.m.mmio_write(h, 2, u64::from(UAR) * 4096 + 0x14, 4, be32(80 << 8));
}

fn dseg(len: u32, key: u32, addr: u64) -> Vec<u8> {
    let mut v = len.to_be_bytes().to_vec();
    v.extend_from_slice(&key.to_be_bytes());
    v.extend_from_slice(&addr.to_be_bytes());
    v
}

fn raddr(va: u64, rkey: u32) -> Vec<u8> {
    let mut v = va.to_be_bytes().to_vec();
    v.extend_from_slice(&rkey.to_be_bytes());
    v.extend_from_slice(&[0; 4]);
    v
}

fn cqe(r: &Rig, i: usize, cq: u64, n: u64) -> Vec<u8> {
    r.read(i, cq + n * 32, 32)
}

fn post_recv(r: &mut Rig, s: &Side, i: usize, n: u32, buf: u64, len: u32) {
    let w = s.qp.rq + u64::from(n % 16) * 64;
    r.write(i, w, &dseg(len, 0x200, buf));
    r.put32(i, w + 20, 0x100);
    r.put32(i, s.qp.db, n + 1);
}

#[test]
fn rc_send_write_read_and_atomics() {
    let (mut r, mut s) = rc_pair(FabricConfig {
        manual_clock: true,
        ..Default::default()
    });
    let src = r.alloc(0, 8192, 4096);
    r.write(0, src, &(0..8192u32).map(|x| x as u8).collect::<Vec<_>>());
    let dst = r.alloc(1, 16384, 4096);
    let rkey = r.create_mr(1, 32, 0x5a, 1, dst, 16384, ACCESS_ALL, false);
    // SEND of 5000 bytes (2 packets at MTU 4096) into a posted receive.
    let rbuf = r.alloc(1, 8192, 64);
    post_recv(&mut r, &s[1], 1, 0, rbuf, 8192);
    post(&mut r, &mut s, 0, 0x0a, &dseg(5000, 0x200, src), 0);
    let c = cqe(&r, 0, s[0].cq, 0);
    assert_eq!(c[31], 0x40 | 0x0a, "send completed after the ACK");
    let rc = cqe(&r, 1, s[1].cq, 0);
    assert_eq!(rc[31], 0x01);
    assert_eq!(u32::from_be_bytes(rc[0x14..0x18].try_into().unwrap()), 5000);
    assert_eq!(r.read(1, rbuf, 5000), r.read(0, src, 5000));
    // RDMA WRITE of 6000 bytes at dst + 100.
    let mut body = raddr(dst + 100, rkey);
    body.extend(dseg(6000, 0x200, src + 10));
    post(&mut r, &mut s, 0, 0x08, &body, 0);
    assert_eq!(cqe(&r, 0, s[0].cq, 1)[31], 0x40 | 0x08);
    assert_eq!(r.read(1, dst + 100, 6000), r.read(0, src + 10, 6000));
    // RDMA READ 3000 bytes back.
    let back = r.alloc(0, 4096, 64);
    let mut body = raddr(dst + 200, rkey);
    body.extend(dseg(3000, 0x200, back));
    post(&mut r, &mut s, 0, 0x10, &body, 0);
    let c = cqe(&r, 0, s[0].cq, 2);
    assert_eq!(c[31], 0x40 | 0x10);
    assert_eq!(
        u32::from_be_bytes(c[0x14..0x18].try_into().unwrap()),
        3000,
        "READ byte count"
    );
    assert_eq!(r.read(0, back, 3000), r.read(1, dst + 200, 3000));
    // Fetch-and-add then compare-and-swap on a BE u64.
    r.write(1, dst, &40u64.to_be_bytes());
    let res = r.alloc(0, 8, 8);
    let mut body = raddr(dst, rkey);
    body.extend(2u64.to_be_bytes());
    body.extend(0u64.to_be_bytes());
    body.extend(dseg(8, 0x200, res));
    post(&mut r, &mut s, 0, 0x12, &body, 0);
    assert_eq!(cqe(&r, 0, s[0].cq, 3)[31], 0x40 | 0x12);
    assert_eq!(r.read(0, res, 8), 40u64.to_be_bytes());
    assert_eq!(r.read(1, dst, 8), 42u64.to_be_bytes());
    let mut body = raddr(dst, rkey);
    body.extend(7u64.to_be_bytes());
    body.extend(42u64.to_be_bytes());
    body.extend(dseg(8, 0x200, res));
    post(&mut r, &mut s, 0, 0x11, &body, 0);
    assert_eq!(cqe(&r, 0, s[0].cq, 4)[31], 0x40 | 0x11);
    assert_eq!(r.read(1, dst, 8), 7u64.to_be_bytes(), "swapped");
    // RDMA WRITE with immediate consumes a receive WQE.
    post_recv(&mut r, &s[1], 1, 1, rbuf, 16);
    let mut body = raddr(dst + 64, rkey);
    body.extend(dseg(16, 0x200, src));
    post(&mut r, &mut s, 0, 0x09, &body, 0x0102_0304);
    let rc = cqe(&r, 1, s[1].cq, 1);
    assert_eq!(rc[31], 0x00, "RECV_RDMA_WRITE_IMM");
    assert_eq!(&rc[4..8], &[1, 2, 3, 4]);
    r.assert_clean(0);
    r.assert_clean(1);
}

#[test]
fn bad_rkey_is_a_remote_access_error_on_both_sides() {
    let (mut r, mut s) = rc_pair(FabricConfig {
        manual_clock: true,
        ..Default::default()
    });
    let src = r.alloc(0, 4096, 4096);
    let dst = r.alloc(1, 4096, 4096);
    let rkey = r.create_mr(1, 32, 1, 1, dst, 4096, 1 << 12, true); // remote read only
    let mut body = raddr(dst, rkey);
    body.extend(dseg(64, 0x200, src));
    post(&mut r, &mut s, 0, 0x08, &body, 0);
    let c = cqe(&r, 0, s[0].cq, 0);
    assert_eq!(c[31] & 0x1f, 0x1e, "error CQE");
    assert_eq!(c[0x1b], 0x13, "remote access error");
    let mb = r.mailbox(1);
    assert_eq!(r.cmd(1, 0x022, 0, 0, 80, mb), 0);
    assert_eq!(r.get32(1, mb + 8) >> 28, 6, "responder QP in ERR");
    let mb0 = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x022, 0, 0, 80, mb0), 0);
    assert_eq!(r.get32(0, mb0 + 8) >> 28, 6, "requester QP in ERR");
    assert!(r.violations(0).iter().any(|v| v.contains("remote access")));
}

#[test]
fn rnr_then_success_and_loss_is_recovered_by_retransmission() {
    use std::time::Duration;
    let cfg = FabricConfig {
        manual_clock: true,
        seed: 7,
        faults: sim::Faults {
            drop_probability: 0.3,
            ..Default::default()
        },
        ..Default::default()
    };
    let (mut r, mut s) = rc_pair(cfg);
    let src = r.alloc(0, 16384, 4096);
    r.write(0, src, &[0xab; 16384]);
    let rbuf = r.alloc(1, 16384, 64);
    // No receive posted yet: RNR NAK (or loss), then retries.
    post(&mut r, &mut s, 0, 0x0a, &dseg(16000, 0x200, src), 0);
    assert_eq!(
        cqe(&r, 0, s[0].cq, 0),
        vec![0xcc; 32],
        "not complete yet: {:?}",
        r.violations(0)
    );
    post_recv(&mut r, &s[1], 1, 0, rbuf, 16384);
    for _ in 0..200 {
        r.m.fabric().advance(Duration::from_millis(100));
        if cqe(&r, 0, s[0].cq, 0)[31] != 0xcc {
            break;
        }
    }
    let c = cqe(&r, 0, s[0].cq, 0);
    assert_eq!(c[31], 0x40 | 0x0a, "completed despite loss: {c:x?}");
    assert_eq!(r.read(1, rbuf, 16000), vec![0xab; 16000]);
    assert_eq!(cqe(&r, 1, s[1].cq, 0)[31], 0x01);
    assert_eq!(
        cqe(&r, 1, s[1].cq, 1),
        vec![0xcc; 32],
        "exactly one receive completion"
    );
    r.assert_clean(0);
    r.assert_clean(1);
}

#[test]
fn link_down_exhausts_retries() {
    use std::time::Duration;
    let (mut r, mut s) = rc_pair(FabricConfig {
        manual_clock: true,
        ..Default::default()
    });
    let src = r.alloc(0, 4096, 4096);
    let rbuf = r.alloc(1, 4096, 64);
    post_recv(&mut r, &s[1], 1, 0, rbuf, 4096);
    let h1 = r.hca(1);
    r.m.fabric().set_link(h1, 1, false);
    post(&mut r, &mut s, 0, 0x0a, &dseg(100, 0x200, src), 0);
    for _ in 0..20 {
        r.m.fabric().advance(Duration::from_millis(100));
    }
    let c = cqe(&r, 0, s[0].cq, 0);
    assert_eq!(c[31] & 0x1f, 0x1e);
    assert_eq!(c[0x1b], 0x15, "transport retry exceeded");
}
