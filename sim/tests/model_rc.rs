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
    let mut r = Rig::with(2, cfg, harness::reduced());
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

/// An RC pair whose QPs have SRA max `sra` (requester) and RRA max `rra` (responder) on
/// both sides, set as Linux sets them (RTR2RTS / INIT2RTR with their optpar bits).
fn rc_pair_rd(cfg: FabricConfig, sra: u32, rra: u32) -> (Rig, Vec<Side>) {
    let mut r = Rig::with(2, cfg, harness::reduced());
    for n in &mut r.nodes {
        n.rd_atomic = Some((sra, rra));
    }
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

/// Write WQEs (opcode, body after the ctrl segment) into the next SQ slots of side 0 and
/// ring the doorbell once for all of them.
fn post_batch(r: &mut Rig, s: &mut [Side], wqes: &[(u32, Vec<u8>)]) {
    for (opcode, body) in wqes {
        let slot = s[0].slot;
        s[0].slot += 1;
        let w = s[0].qp.sq + u64::from(slot % 16) * 64;
        r.write(0, w + 16, body);
        r.put32(0, w + 4, (16 + body.len()).div_ceil(16) as u32);
        r.put32(0, w + 8, 3 << 2);
        let owner = if slot & 16 != 0 { 1 << 31 } else { 0 };
        r.put32(0, w, owner | opcode);
    }
    let h = r.hca(0);
    r.m.mmio_write(h, 2, u64::from(UAR) * 4096 + 0x14, 4, be32(80 << 8));
}

/// Status byte of CQE `n` (owner/opcode byte), or 0xcc while the slot is untouched.
fn cqe_done(r: &Rig, cq: u64, n: u64) -> bool {
    cqe(r, 0, cq, n)[31] != 0xcc
}

/// A deep queue of READs (and a WRITE behind them) against SRA max 0, 2 and 4 (1, 4 and 16
/// outstanding, Linux's max_rd_atomic 1, 4, 16): with the fabric delaying every packet,
/// the doorbell sends exactly the first 2^sra_max READs and nothing behind them; each
/// response lets one more go, in SQ order; all complete with the responder's bytes and the
/// model never had more than the limit outstanding.
#[test]
fn reads_beyond_sra_max_wait_for_earlier_ones() {
    use std::time::Duration;
    for (sra, reads) in [(0u32, 15u64), (2, 15), (4, 15)] {
        let limit = 1u64 << sra;
        let cfg = FabricConfig {
            manual_clock: true,
            faults: sim::Faults {
                delay: Duration::from_micros(1),
                ..Default::default()
            },
            ..Default::default()
        };
        let (mut r, mut s) = rc_pair_rd(cfg, sra, sra);
        let src = r.alloc(1, 16 * 1024, 4096);
        let pattern: Vec<u8> = (0..16 * 1024u32).map(|x| (x * 7 + sra) as u8).collect();
        r.write(1, src, &pattern);
        let rkey = r.create_mr(1, 32, 0x5a, 1, src, 16 * 1024, ACCESS_ALL, false);
        let dst = r.alloc(0, 16 * 1024, 4096);
        // The WRITE lands in the region's last 64 bytes, beyond what the READs read.
        let wdst = src + 16 * 1024 - 64;
        // READ k: 1000 bytes at src + 1000 k into dst + 1000 k (one response packet each).
        let mut wqes: Vec<(u32, Vec<u8>)> = (0..reads)
            .map(|k| {
                let mut body = raddr(src + 1000 * k, rkey);
                body.extend(dseg(1000, 0x200, dst + 1000 * k));
                (0x10, body)
            })
            .collect();
        let wsrc = r.alloc(0, 16, 16);
        r.write(0, wsrc, &[0xa5; 16]);
        let mut body = raddr(wdst, rkey);
        body.extend(dseg(16, 0x200, wsrc));
        wqes.push((0x08, body));
        let sent_before = r.m.fabric_ref().counters(r.hca(0)).packets_sent;
        post_batch(&mut r, &mut s, &wqes);
        let sent = r.m.fabric_ref().counters(r.hca(0)).packets_sent - sent_before;
        // Within the limit everything leaves at once (the WRITE is one packet).
        let expect = if limit < reads { limit } else { reads + 1 };
        assert_eq!(
            sent, expect,
            "SRA max {sra}: only the first {limit} READs leave before a response"
        );
        for _ in 0..200 {
            r.m.fabric().advance(Duration::from_micros(1));
            if cqe_done(&r, s[0].cq, reads) {
                break;
            }
        }
        for k in 0..=reads {
            let c = cqe(&r, 0, s[0].cq, k);
            let op = if k < reads { 0x10 } else { 0x08 };
            assert_eq!(
                c[31],
                0x40 | op,
                "SRA max {sra}: WQE {k} completed in order: {c:?}"
            );
        }
        assert_eq!(
            r.read(0, dst, 1000 * reads as usize),
            pattern[..1000 * reads as usize].to_vec(),
            "SRA max {sra}: every READ brought the responder's bytes"
        );
        assert_eq!(r.read(1, wdst, 16), vec![0xa5; 16], "the WRITE behind");
        let peak = r.m.fabric_ref().rc_rd_atomic_peak(r.hca(0), 80);
        assert_eq!(
            peak as u64,
            limit.min(reads),
            "SRA max {sra}: peak in flight"
        );
        r.assert_clean(0);
        r.assert_clean(1);
    }
}

/// Atomics count against the same limit: fetch-and-adds on one word with SRA max 1 (two
/// outstanding) all apply, each returning the value before it.
#[test]
fn atomics_are_held_like_reads() {
    let (mut r, mut s) = rc_pair_rd(
        FabricConfig {
            manual_clock: true,
            ..Default::default()
        },
        1,
        1,
    );
    let word = r.alloc(1, 8, 8);
    r.write(1, word, &100u64.to_be_bytes());
    let rkey = r.create_mr(1, 32, 0x5b, 1, word, 8, ACCESS_ALL, false);
    let res = r.alloc(0, 8 * 12, 8);
    let wqes: Vec<(u32, Vec<u8>)> = (0..12u64)
        .map(|k| {
            let mut body = raddr(word, rkey);
            body.extend(1u64.to_be_bytes());
            body.extend(0u64.to_be_bytes());
            body.extend(dseg(8, 0x200, res + 8 * k));
            (0x12, body)
        })
        .collect();
    post_batch(&mut r, &mut s, &wqes);
    for k in 0..12u64 {
        assert_eq!(cqe(&r, 0, s[0].cq, k)[31], 0x40 | 0x12, "atomic {k}");
        assert_eq!(r.read(0, res + 8 * k, 8), (100 + k).to_be_bytes());
    }
    assert_eq!(r.read(1, word, 8), 112u64.to_be_bytes());
    assert_eq!(r.m.fabric_ref().rc_rd_atomic_peak(r.hca(0), 80), 2);
    r.assert_clean(0);
    r.assert_clean(1);
}

/// A requester allowed four READs (SRA max 2) against a responder that accepts one (RRA max
/// 0): the first READ is answered; the second finds the responder's only RDMARC entry in
/// use and is NAKed Invalid Request (IB spec), which completes it with "remote invalid
/// request" (0x12), flushes the rest and moves both QPs to ERR. The requester's driver
/// configured the mismatch, so the violation is recorded on its side only.
#[test]
fn over_limit_requester_gets_invalid_request_nak() {
    let mut r = Rig::with(
        2,
        FabricConfig {
            manual_clock: true,
            ..Default::default()
        },
        harness::reduced(),
    );
    r.nodes[0].rd_atomic = Some((2, 2));
    r.nodes[1].rd_atomic = Some((0, 0));
    let mut s = Vec::new();
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
        s.push(Side { qp, cq, slot: 0 });
    }
    let src = r.alloc(1, 4096, 4096);
    r.write(1, src, &[0x5c; 4096]);
    let rkey = r.create_mr(1, 32, 0x5a, 1, src, 4096, ACCESS_ALL, false);
    let dst = r.alloc(0, 4096, 4096);
    let wqes: Vec<(u32, Vec<u8>)> = (0..4u64)
        .map(|k| {
            let mut body = raddr(src + 512 * k, rkey);
            body.extend(dseg(512, 0x200, dst + 512 * k));
            (0x10, body)
        })
        .collect();
    post_batch(&mut r, &mut s, &wqes);
    assert_eq!(
        cqe(&r, 0, s[0].cq, 0)[31],
        0x40 | 0x10,
        "first READ answered"
    );
    assert_eq!(r.read(0, dst, 512), vec![0x5c; 512]);
    let c = cqe(&r, 0, s[0].cq, 1);
    assert_eq!(c[31] & 0x1f, 0x1e, "error CQE: {c:?}");
    assert_eq!(c[0x1b], 0x12, "remote invalid request");
    for k in 2..4 {
        let c = cqe(&r, 0, s[0].cq, k);
        assert_eq!((c[31] & 0x1f, c[0x1b]), (0x1e, 0x05), "READ {k} flushed");
    }
    for i in 0..2 {
        let mb = r.mailbox(i);
        assert_eq!(r.cmd(i, 0x022, 0, 0, 80, mb), 0);
        assert_eq!(r.get32(i, mb + 8) >> 28, 6, "QP of HCA {i} in ERR");
    }
    assert!(r
        .violations(0)
        .iter()
        .any(|v| v.contains("invalid request")));
    assert!(
        r.violations(1).is_empty(),
        "the responder's driver did nothing wrong: {:?}",
        r.violations(1)
    );
}

/// A WQE written through BlueFlame while the SQ waits at a READ over SRA max 0 is neither
/// run ahead of the READ nor a violation: it runs from the SQ in memory, in order, once the
/// READ's response arrives, and the trace still says it came through BlueFlame.
#[test]
fn blueflame_wqe_behind_a_held_read_runs_in_order() {
    use std::time::Duration;
    let cfg = FabricConfig {
        manual_clock: true,
        trace: true,
        faults: sim::Faults {
            delay: Duration::from_micros(1),
            ..Default::default()
        },
        ..Default::default()
    };
    let (mut r, mut s) = rc_pair_rd(cfg, 0, 0);
    let src = r.alloc(1, 4096, 4096);
    r.write(1, src, &[0x3c; 4096]);
    let rkey = r.create_mr(1, 32, 0x5a, 1, src, 4096, ACCESS_ALL, false);
    let dst = r.alloc(0, 4096, 4096);
    let reads: Vec<(u32, Vec<u8>)> = (0..2u64)
        .map(|k| {
            let mut body = raddr(src + 256 * k, rkey);
            body.extend(dseg(256, 0x200, dst + 256 * k));
            (0x10, body)
        })
        .collect();
    post_batch(&mut r, &mut s, &reads);
    // WQE 2: an RDMA WRITE of 16 inline bytes into src + 2048, in the SQ and through
    // BlueFlame (counter 2, QPN in dword 1).
    let mut w = [0u8; 64];
    w[0..4].copy_from_slice(&((2u32 << 8) | 0x08).to_be_bytes());
    w[4..8].copy_from_slice(&((80u32 << 8) | 4).to_be_bytes());
    w[8..12].copy_from_slice(&(3u32 << 2).to_be_bytes());
    w[16..32].copy_from_slice(&raddr(src + 2048, rkey));
    w[32..36].copy_from_slice(&(0x8000_0000u32 | 16).to_be_bytes());
    w[36..52].copy_from_slice(&[0xe7; 16]);
    let slot = s[0].qp.sq + 2 * 64;
    r.write(0, slot + 4, &4u32.to_be_bytes());
    r.write(0, slot + 8, &w[8..64]);
    r.put32(0, slot, 0x08);
    s[0].slot += 1;
    let h = r.hca(0);
    let sent = r.m.fabric_ref().counters(h).packets_sent;
    let bf = (4u64 << 20) + u64::from(UAR) * 4096;
    for (j, c) in w.chunks(8).enumerate() {
        r.m.mmio_write(
            h,
            2,
            bf + 8 * j as u64,
            8,
            u64::from_le_bytes(c.try_into().unwrap()),
        );
    }
    assert_eq!(
        r.m.fabric_ref().counters(h).packets_sent,
        sent,
        "the WRITE waits behind the held READ"
    );
    assert_eq!(r.read(1, src + 2048, 16), vec![0x3c; 16]);
    for _ in 0..100 {
        r.m.fabric().advance(Duration::from_micros(1));
        if cqe_done(&r, s[0].cq, 2) {
            break;
        }
    }
    for (k, op) in [(0u64, 0x10u8), (1, 0x10), (2, 0x08)] {
        let c = cqe(&r, 0, s[0].cq, k);
        assert_eq!(
            c[31],
            0x40 | op,
            "WQE {k} in order: {c:?} {:?}",
            r.violations(0)
        );
    }
    assert_eq!(r.read(0, dst, 512), vec![0x3c; 512]);
    assert_eq!(r.read(1, src + 2048, 16), vec![0xe7; 16]);
    assert!(
        r.m.fabric_ref().trace(h).contains("via=blueflame"),
        "the WRITE is traced as BlueFlame"
    );
    r.assert_clean(0);
    r.assert_clean(1);
}

/// Under 20 % packet loss, a requester at the responder's limit (SRA max = RRA max = 2)
/// recovers every lost request and response by retransmission: duplicates (go-back-N
/// resends every outstanding READ) are served without a new RDMARC entry, so the responder
/// never mistakes the retries for a requester over its limit.
#[test]
fn reads_at_the_limit_survive_loss() {
    use std::time::Duration;
    let cfg = FabricConfig {
        manual_clock: true,
        seed: 11,
        faults: sim::Faults {
            drop_probability: 0.2,
            delay: Duration::from_micros(1),
            ..Default::default()
        },
        ..Default::default()
    };
    let (mut r, mut s) = rc_pair_rd(cfg, 2, 2);
    let src = r.alloc(1, 16 * 1024, 4096);
    let pattern: Vec<u8> = (0..16 * 1024u32).map(|x| (x * 13) as u8).collect();
    r.write(1, src, &pattern);
    let rkey = r.create_mr(1, 32, 0x5a, 1, src, 16 * 1024, ACCESS_ALL, false);
    let dst = r.alloc(0, 16 * 1024, 4096);
    // 15 READs of 5000 bytes at MTU 4096: two response packets each.
    let wqes: Vec<(u32, Vec<u8>)> = (0..3u64)
        .map(|k| {
            let mut body = raddr(src + 5000 * k, rkey);
            body.extend(dseg(5000, 0x200, dst + 5000 * k));
            (0x10, body)
        })
        .cycle()
        .take(15)
        .collect();
    post_batch(&mut r, &mut s, &wqes);
    for _ in 0..2000 {
        r.m.fabric().advance(Duration::from_millis(10));
        if cqe_done(&r, s[0].cq, 14) {
            break;
        }
    }
    for k in 0..15 {
        let c = cqe(&r, 0, s[0].cq, k);
        assert_eq!(c[31], 0x40 | 0x10, "READ {k}: {c:?} {:?}", r.violations(0));
    }
    assert_eq!(r.read(0, dst, 15000), pattern[..15000].to_vec());
    assert!(r.m.fabric_ref().rc_rd_atomic_peak(r.hca(0), 80) <= 4);
    assert!(
        r.m.fabric_ref().counters(r.hca(0)).packets_sent > 15,
        "the loss made the requester retransmit"
    );
    r.assert_clean(0);
    r.assert_clean(1);
}
