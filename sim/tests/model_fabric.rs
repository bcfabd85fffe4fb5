//! Fabric tests driven by hand: four HCAs, UC segmentation and PSN resynchronisation under
//! loss, UC RDMA WRITE, BlueFlame execution, link down/up events, local protection errors
//! (§5.5, §6, §7).
#![allow(clippy::needless_range_loop)]

mod harness;
use harness::*;
use sim::FabricConfig;

const UAR: u32 = 9;

fn node_up(r: &mut Rig, i: usize) -> u64 {
    r.bring_up(i);
    let eq = r.create_eq(i, 8, 6, 0);
    assert_eq!(
        r.cmd(i, 0x012, 0, (1 << 0x09) | (1 << 0x04) | (1 << 0x0a), 8, 0),
        0
    );
    r.init_port(i);
    eq
}

fn post_recv(r: &mut Rig, i: usize, b: &QpBufs, n: u32, buf: u64, len: u32) {
    let w = b.rq + u64::from(n % 16) * 64;
    r.put32(i, w, len);
    r.put32(i, w + 4, 0x200);
    r.put64(i, w + 8, buf);
    r.put32(i, w + 20, 0x100);
    r.put32(i, b.db, n + 1);
}

/// Post one WQE (ctrl + body) in SQ slot `n` and ring the doorbell of `qpn`.
fn post(r: &mut Rig, i: usize, b: &QpBufs, qpn: u32, n: u32, opcode: u32, body: &[u8]) {
    let w = b.sq + u64::from(n % 16) * 64;
    r.write(i, w + 16, body);
    r.put32(i, w + 4, (16 + body.len()).div_ceil(16) as u32);
    r.put32(i, w + 8, 3 << 2);
    let owner = if n & 16 != 0 { 1 << 31 } else { 0 };
    r.put32(i, w, owner | opcode);
    let h = r.hca(i);
    r.m.mmio_write(h, 2, u64::from(UAR) * 4096 + 0x14, 4, be32(qpn << 8));
}

fn dseg(len: u32, key: u32, addr: u64) -> Vec<u8> {
    let mut v = len.to_be_bytes().to_vec();
    v.extend(key.to_be_bytes());
    v.extend(addr.to_be_bytes());
    v
}

fn ud_av(dlid: u16, dqpn: u32, qkey: u32) -> Vec<u8> {
    let mut d = vec![0u8; 48];
    d[0..4].copy_from_slice(&((1u32 << 24) | 1).to_be_bytes());
    d[6..8].copy_from_slice(&dlid.to_be_bytes());
    d[0x20..0x24].copy_from_slice(&dqpn.to_be_bytes());
    d[0x24..0x28].copy_from_slice(&qkey.to_be_bytes());
    d
}

#[test]
fn four_hcas_ud_all_pairs() {
    let mut r = Rig::new(4, true);
    let mut qps = Vec::new();
    let mut cqs = Vec::new();
    for i in 0..4 {
        node_up(&mut r, i);
        cqs.push(r.create_cq(i, 128, 6, UAR, 8).0);
        qps.push(r.qp_to_rts(i, 70, 3, 128, UAR, 1, 0x1234, 0, 0));
    }
    let mut sent = [0u32; 4];
    let mut recv = [0u32; 4];
    for a in 0..4 {
        for b in 0..4 {
            if a == b {
                continue;
            }
            let rb = r.alloc(b, 256, 64);
            post_recv(&mut r, b, &qps[b], recv[b], rb, 256);
            // UD WQE: ctrl + AV only (64 bytes = the SQ stride), SEND_IMM carrying a, b.
            let w = qps[a].sq + u64::from(sent[a] % 16) * 64;
            r.put32(a, w + 12, (a as u32) << 8 | b as u32);
            post(
                &mut r,
                a,
                &qps[a],
                70,
                sent[a],
                0x0b,
                &ud_av(sim::Fabric::sm_lid_for(b, 1), 70, 0x1234),
            );
            sent[a] += 1;
            recv[b] += 1;
        }
    }
    for b in 0..4 {
        let mut from = Vec::new();
        // 3 sends and 3 receives per node on one CQ.
        for k in 0..6u64 {
            let c = r.read(b, cqs[b] + k * 32, 32);
            assert_ne!(c[31], 0xcc, "node {b} CQE {k} written");
            if c[31] & 0x40 == 0 {
                assert_eq!(c[31] & 0x1f, 0x02, "SEND_IMM receive");
                let imm = u32::from_be_bytes(c[4..8].try_into().unwrap());
                assert_eq!(imm & 0xff, b as u32);
                assert_eq!(
                    u16::from_be_bytes([c[0x0e], c[0x0f]]),
                    sim::Fabric::sm_lid_for((imm >> 8) as usize, 1)
                );
                from.push(imm >> 8);
            }
        }
        from.sort();
        let expect: Vec<u32> = (0..4u32).filter(|&x| x != b as u32).collect();
        assert_eq!(from, expect, "node {b} heard from every other node once");
        r.assert_clean(b);
    }
}

#[test]
fn uc_segmentation_resync_under_loss_and_rdma_write() {
    let cfg = FabricConfig {
        manual_clock: true,
        seed: 3,
        faults: sim::Faults {
            drop_probability: 0.25,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut r = Rig::with(2, cfg, harness::reduced());
    let mut qps = Vec::new();
    let mut cqs = Vec::new();
    for i in 0..2 {
        node_up(&mut r, i);
        cqs.push(r.create_cq(i, 128, 6, UAR, 8).0);
        qps.push(r.qp_to_rts(
            i,
            71,
            1,
            128,
            UAR,
            1,
            0,
            sim::Fabric::sm_lid_for(1 - i, 1),
            71,
        ));
    }
    let src = r.alloc(0, 10000, 4096);
    let data: Vec<u8> = (0..10000u32).map(|x| (x * 7) as u8).collect();
    r.write(0, src, &data);
    let rbufs: Vec<u64> = (0..12).map(|_| r.alloc(1, 10000, 64)).collect();
    for (n, b) in rbufs.iter().enumerate() {
        post_recv(&mut r, 1, &qps[1], n as u32, *b, 10000);
    }
    for n in 0..12 {
        post(&mut r, 0, &qps[0], 71, n, 0x0a, &dseg(10000, 0x200, src));
        assert_eq!(
            r.read(0, cqs[0] + u64::from(n) * 32, 32)[31],
            0x40 | 0x0a,
            "UC send completes on transmit"
        );
    }
    // Every receive completion is a whole, correct message; lost packets lose messages.
    let mut got = 0;
    for k in 0..12u64 {
        let c = r.read(1, cqs[1] + k * 32, 32);
        if c[31] == 0xcc {
            break;
        }
        assert_eq!(c[31], 0x01);
        assert_eq!(u32::from_be_bytes(c[0x14..0x18].try_into().unwrap()), 10000);
        let idx = u16::from_be_bytes([c[0x18], c[0x19]]) as usize;
        assert_eq!(r.read(1, rbufs[idx], 10000), data, "message {k} intact");
        got += 1;
    }
    assert!(
        got > 0 && got < 12,
        "with 25% loss of 3-packet messages some, not all, arrive ({got})"
    );
    r.assert_clean(0);
    r.assert_clean(1);
}

#[test]
fn uc_rdma_write_needs_rwe_and_a_valid_rkey() {
    let mut r = Rig::new(2, true);
    let mut qps = Vec::new();
    for i in 0..2 {
        node_up(&mut r, i);
        r.create_cq(i, 128, 6, UAR, 8);
        qps.push(r.qp_to_rts(
            i,
            71,
            1,
            128,
            UAR,
            1,
            0,
            sim::Fabric::sm_lid_for(1 - i, 1),
            71,
        ));
    }
    let src = r.alloc(0, 8192, 4096);
    r.write(0, src, &[0x3c; 8192]);
    let dst = r.alloc(1, 8192, 4096);
    let rkey = r.create_mr(1, 40, 9, 1, dst, 8192, 1 << 13, false);
    let mut body = (dst + 8).to_be_bytes().to_vec();
    body.extend(rkey.to_be_bytes());
    body.extend([0; 4]);
    body.extend(dseg(6000, 0x200, src));
    post(&mut r, 0, &qps[0], 71, 0, 0x08, &body);
    assert_eq!(r.read(1, dst + 8, 6000), vec![0x3c; 6000]);
    assert_eq!(r.read(1, dst, 8), vec![0; 8], "nothing before the target");
    // A wrong tag: the message is silently dropped at the responder (UC has no NAK).
    let mut body = dst.to_be_bytes().to_vec();
    body.extend((rkey ^ 1).to_be_bytes());
    body.extend([0; 4]);
    body.extend(dseg(16, 0x200, src));
    r.write(0, src, &[0x77; 16]);
    post(&mut r, 0, &qps[0], 71, 1, 0x08, &body);
    assert_eq!(
        r.read(1, dst, 8),
        vec![0; 8],
        "write with a bad R_Key dropped"
    );
    r.assert_clean(0);
}

#[test]
fn blueflame_wqe_runs_from_the_written_bytes() {
    let mut r = Rig::new(2, true);
    let mut qps = Vec::new();
    let mut cqs = Vec::new();
    for i in 0..2 {
        node_up(&mut r, i);
        cqs.push(r.create_cq(i, 128, 6, UAR, 8).0);
        qps.push(r.qp_to_rts(i, 70, 3, 128, UAR, 1, 0x99, 0, 0));
    }
    let rb = r.alloc(1, 256, 64);
    post_recv(&mut r, 1, &qps[1], 0, rb, 256);
    // Build the WQE only in BlueFlame: the SQ slot in memory keeps its "not valid" owner bit.
    let mut w = [0u8; 64];
    w[0..4].copy_from_slice(&0x0000_000bu32.to_be_bytes()); // SEND_IMM, counter 0, owner 0
    w[4..8].copy_from_slice(&((70u32 << 8) | 4).to_be_bytes());
    w[8..12].copy_from_slice(&(3u32 << 2).to_be_bytes());
    w[12..16].copy_from_slice(&0xfeed_beefu32.to_be_bytes());
    w[16..64].copy_from_slice(&ud_av(sim::Fabric::sm_lid_for(1, 1), 70, 0x99));
    let h = r.hca(0);
    let bf = (4u64 << 20) + u64::from(UAR) * 4096;
    let read_bytes_before = r.m.fabric_ref().counters(h).dma_read_bytes;
    for (j, c) in w.chunks(8).enumerate() {
        r.m.mmio_write(
            h,
            2,
            bf + 8 * j as u64,
            8,
            u64::from_le_bytes(c.try_into().unwrap()),
        );
    }
    let c = r.read(1, cqs[1], 32);
    assert_eq!(c[31], 0x02, "received");
    assert_eq!(&c[4..8], &0xfeed_beefu32.to_be_bytes());
    assert_eq!(r.read(0, cqs[0], 32)[31], 0x40 | 0x0b, "send completion");
    let cn = r.m.fabric_ref().counters(h);
    assert_eq!(cn.blueflame_bytes, 64);
    // The SQ slot in memory still says "not valid", so only the BlueFlame bytes can have
    // been executed; and the send side fetched no WQE and did not look at the next slot
    // (§5.5). What it read is the send completion's: the CQ doorbell record (4 bytes, the
    // overflow check) and the MTT entry translating the CQE slot (8 bytes).
    assert_eq!(
        cn.dma_read_bytes - read_bytes_before,
        4 + 8,
        "the BlueFlame send read more than its completion needs"
    );
    r.assert_clean(0);
    r.assert_clean(1);
    // A BlueFlame burst with the wrong WQE counter is recorded and treated as a doorbell.
    w[1..4].copy_from_slice(&[0, 5, 0]);
    for (j, c) in w.chunks(8).enumerate() {
        r.m.mmio_write(
            h,
            2,
            bf + 256 + 8 * j as u64,
            8,
            u64::from_le_bytes(c.try_into().unwrap()),
        );
    }
    assert!(r.violations(0).iter().any(|v| v.contains("WQE counter 5")));
}

/// Two UD nodes with QP 70 on UAR `UAR`, eight receives posted at node 1; returns the QP
/// buffers and CQ addresses.
fn bf_rig(r: &mut Rig) -> (Vec<QpBufs>, Vec<u64>) {
    let mut qps = Vec::new();
    let mut cqs = Vec::new();
    for i in 0..2 {
        node_up(r, i);
        cqs.push(r.create_cq(i, 128, 6, UAR, 8).0);
        qps.push(r.qp_to_rts(i, 70, 3, 128, UAR, 1, 0x99, 0, 0));
    }
    for n in 0..8 {
        let rb = r.alloc(1, 256, 64);
        post_recv(r, 1, &qps[1], n, rb, 256);
    }
    (qps, cqs)
}

/// The 64-byte SEND_IMM WQE for WQE counter `n` of node 0's QP 70, in its BlueFlame form
/// (dword 1 = qpn << 8 | DS).
fn bf_wqe(n: u32, imm: u32) -> [u8; 64] {
    let mut w = [0u8; 64];
    let owner = if n & 16 != 0 { 1u32 << 31 } else { 0 };
    w[0..4].copy_from_slice(&(owner | (n & 0xffff) << 8 | 0x0b).to_be_bytes());
    w[4..8].copy_from_slice(&((70u32 << 8) | 4).to_be_bytes());
    w[8..12].copy_from_slice(&(3u32 << 2).to_be_bytes());
    w[12..16].copy_from_slice(&imm.to_be_bytes());
    w[16..64].copy_from_slice(&ud_av(sim::Fabric::sm_lid_for(1, 1), 70, 0x99));
    w
}

/// The same WQE in the SQ in memory, owner bit valid, as rdma-core writes it before the copy
/// (dword 1 there has no QP number).
fn bf_wqe_to_sq(r: &mut Rig, b: &QpBufs, n: u32, w: &[u8; 64]) {
    let slot = b.sq + u64::from(n % 16) * 64;
    let mut m = *w;
    m[4..7].fill(0);
    r.write(0, slot + 4, &m[4..]);
    r.write(0, slot, &m[..4]);
}

fn bf_store(r: &mut Rig, half: u64, w: &[u8; 64], chunk: usize) {
    let h = r.hca(0);
    let bf = (4u64 << 20) + u64::from(UAR) * 4096 + half;
    let c = &w[chunk * 8..chunk * 8 + 8];
    r.m.mmio_write(
        h,
        2,
        bf + 8 * chunk as u64,
        8,
        u64::from_le_bytes(c.try_into().unwrap()),
    );
}

#[test]
fn blueflame_stores_in_any_order_make_one_wqe() {
    let mut r = Rig::new(2, true);
    let (qps, cqs) = bf_rig(&mut r);
    let h = r.hca(0);
    // Write-combining may flush the pieces of a burst in any order.
    let orders: [[usize; 8]; 3] = [
        [7, 6, 5, 4, 3, 2, 1, 0],
        [3, 1, 7, 0, 5, 2, 6, 4],
        [1, 2, 3, 4, 5, 6, 7, 0],
    ];
    for (n, order) in orders.iter().enumerate() {
        let w = bf_wqe(n as u32, 0xbeef_0000 + n as u32);
        bf_wqe_to_sq(&mut r, &qps[0], n as u32, &w);
        let read_before = r.m.fabric_ref().counters(h).dma_read_bytes;
        let half = if n % 2 == 0 { 0 } else { 256 };
        let empty = r.read(1, cqs[1] + 32 * n as u64, 32);
        for (k, &chunk) in order.iter().enumerate() {
            bf_store(&mut r, half, &w, chunk);
            if k < 7 {
                assert_eq!(
                    r.read(1, cqs[1] + 32 * n as u64, 32),
                    empty,
                    "nothing runs before the burst is whole"
                );
            }
        }
        let c = r.read(1, cqs[1] + 32 * n as u64, 32);
        assert_eq!(c[31] & 0x7f, 0x02, "order {order:?}: received");
        assert_eq!(&c[4..8], &(0xbeef_0000 + n as u32).to_be_bytes());
        assert_eq!(
            r.read(0, cqs[0] + 32 * n as u64, 32)[31] & 0x7f,
            0x40 | 0x0b
        );
        // Run from the written bytes: only the completion's reads (CQ doorbell record and
        // the MTT entry of the CQE slot), no WQE fetch.
        let read = r.m.fabric_ref().counters(h).dma_read_bytes - read_before;
        assert_eq!(read, 4 + 8, "order {order:?}");
    }
    r.m.fabric()
        .advance(std::time::Duration::from_nanos(sim::uar::BF_STALE_NS + 1));
    assert!(r.m.observations(h).is_empty(), "{:?}", r.m.observations(h));
    r.assert_clean(0);
    r.assert_clean(1);
}

#[test]
fn an_incomplete_blueflame_burst_is_a_doorbell_and_recorded() {
    let mut r = Rig::new(2, true);
    let (qps, cqs) = bf_rig(&mut r);
    let h = r.hca(0);
    let advance = |r: &mut Rig, ns: u64| r.m.fabric().advance(std::time::Duration::from_nanos(ns));

    // WQE 0: chunks 0..5 arrive (QP number included), 6 and 7 never do. Nothing runs until
    // the device gives up on the burst, then it fetches the WQE from the SQ in memory.
    let w = bf_wqe(0, 0x0000_0a0a);
    bf_wqe_to_sq(&mut r, &qps[0], 0, &w);
    let empty = r.read(1, cqs[1], 32);
    for chunk in 0..6 {
        bf_store(&mut r, 0, &w, chunk);
    }
    advance(&mut r, 1_000);
    assert_eq!(r.read(1, cqs[1], 32), empty, "not yet");
    assert!(r.m.observations(h).is_empty());
    advance(&mut r, sim::uar::BF_STALE_NS);
    let c = r.read(1, cqs[1], 32);
    assert_eq!(c[31] & 0x7f, 0x02, "the WQE ran from memory");
    assert_eq!(&c[4..8], &0x0000_0a0au32.to_be_bytes());
    let o = r.m.observations(h).to_vec();
    assert_eq!(o.len(), 1, "{o:?}");
    assert!(
        o[0].contains("incomplete (48 of 64 bytes") && o[0].contains("doorbell for QP 0x46"),
        "{o:?}"
    );
    // The missing stores arrive after all: they complete the burst given up on (a late
    // copy of WQE 0, which has run), not a new burst without its head. A doorbell the
    // driver might still ring for it finds nothing new, which is no fault of the driver.
    bf_store(&mut r, 0, &w, 7);
    bf_store(&mut r, 0, &w, 6);
    let o = r.m.observations(h).to_vec();
    assert_eq!(o.len(), 2, "{o:?}");
    assert!(o[1].contains("WQE 0 for QP 0x46 completed after"), "{o:?}");
    r.m.mmio_write(h, 2, u64::from(UAR) * 4096 + 0x14, 4, be32(70 << 8));
    r.assert_clean(0);
    let before = r.m.observations(h).len();

    // WQE 1: the first store (WQE counter, QP number, DS) never arrives, and the next
    // post's burst (WQE 2, the other half) begins: the device gives up on burst 1 at once
    // and, not knowing its QP, rings every QP of the UAR page. Both WQEs are in the SQ, so
    // both run from memory; burst 2, completed later, is then a late copy of WQE 2.
    let w1 = bf_wqe(1, 0x0000_0b0b);
    bf_wqe_to_sq(&mut r, &qps[0], 1, &w1);
    for chunk in 1..8 {
        bf_store(&mut r, 256, &w1, chunk);
    }
    let w2 = bf_wqe(2, 0x0000_0c0c);
    bf_wqe_to_sq(&mut r, &qps[0], 2, &w2);
    bf_store(&mut r, 0, &w2, 3);
    let c = r.read(1, cqs[1] + 32, 32);
    assert_eq!(
        &c[4..8],
        &0x0000_0b0bu32.to_be_bytes(),
        "WQE 1 ran from memory"
    );
    let c = r.read(1, cqs[1] + 64, 32);
    assert_eq!(
        &c[4..8],
        &0x0000_0c0cu32.to_be_bytes(),
        "WQE 2 ran from memory"
    );
    for chunk in [7, 6, 5, 4, 2, 1, 0] {
        bf_store(&mut r, 0, &w2, chunk);
    }
    // WQE 3: half a burst, then another burst over the same half (WQE 4): burst 3 is given
    // up on and rung as a doorbell for its QP, which runs WQEs 3 and 4 from memory.
    let w3 = bf_wqe(3, 0x0000_0d0d);
    bf_wqe_to_sq(&mut r, &qps[0], 3, &w3);
    for chunk in 0..4 {
        bf_store(&mut r, 256, &w3, chunk);
    }
    let w4 = bf_wqe(4, 0x0000_0e0e);
    bf_wqe_to_sq(&mut r, &qps[0], 4, &w4);
    for chunk in 0..8 {
        bf_store(&mut r, 256, &w4, chunk);
    }
    for (n, imm) in [(3u64, 0x0000_0d0du32), (4, 0x0000_0e0e)] {
        let c = r.read(1, cqs[1] + 32 * n, 32);
        assert_eq!(&c[4..8], &imm.to_be_bytes(), "WQE {n}");
    }
    let o: Vec<String> = r.m.observations(h)[before - 1..].to_vec();
    assert_eq!(o.len(), 5, "{o:#?}");
    assert!(
        o[1].contains("half 0x100 incomplete (56 bytes; a burst started in the other half)")
            && o[1].contains("every QP on UAR page"),
        "{o:#?}"
    );
    assert!(o[2].contains("WQE 2 for QP 0x46 completed after"), "{o:#?}");
    assert!(
        o[3].contains("incomplete (32 of 64 bytes; a new burst wrote over it)")
            && o[3].contains("QP 0x46"),
        "{o:#?}"
    );
    assert!(o[4].contains("WQE 4 for QP 0x46 completed after"), "{o:#?}");
    // Five sends, five send completions, five receives: nothing ran twice.
    for n in 0..5u64 {
        assert_eq!(
            r.read(0, cqs[0] + 32 * n, 32)[31] & 0x7f,
            0x40 | 0x0b,
            "send {n}"
        );
        assert_eq!(
            r.read(1, cqs[1] + 32 * n, 32)[31] & 0x7f,
            0x02,
            "receive {n}"
        );
    }
    assert_eq!(
        r.read(0, cqs[0] + 160, 32),
        empty,
        "no sixth send completion"
    );
    r.assert_clean(0);
    r.assert_clean(1);
}

#[test]
fn link_down_and_up_raise_port_change_events() {
    let mut r = Rig::new(2, true);
    let eq = node_up(&mut r, 0);
    node_up(&mut r, 1);
    let e = r.read(0, eq, 32);
    assert_eq!(
        (e[1], e[3]),
        (0x09, 4),
        "ACTIVE after INIT_PORT with the SM"
    );
    let h = r.hca(0);
    r.m.fabric().set_link(h, 1, false);
    let e = r.read(0, eq + 32, 32);
    assert_eq!((e[1], e[3]), (0x09, 1), "DOWN");
    r.m.fabric().set_link(h, 1, true);
    let e = r.read(0, eq + 64, 32);
    assert_eq!((e[1], e[3]), (0x09, 4), "ACTIVE again");
    r.assert_clean(0);
}

#[test]
fn bad_lkey_is_a_local_protection_error() {
    let mut r = Rig::new(2, true);
    let mut qps = Vec::new();
    let mut cqs = Vec::new();
    for i in 0..2 {
        node_up(&mut r, i);
        cqs.push(r.create_cq(i, 128, 6, UAR, 8).0);
        qps.push(r.qp_to_rts(
            i,
            71,
            1,
            128,
            UAR,
            1,
            0,
            sim::Fabric::sm_lid_for(1 - i, 1),
            71,
        ));
    }
    let src = r.alloc(0, 4096, 4096);
    let key = r.create_mr(0, 40, 1, 2, src, 4096, 1 << 11, true); // PD 2 != QP PD 1
    post(&mut r, 0, &qps[0], 71, 0, 0x0a, &dseg(64, key, src));
    let c = r.read(0, cqs[0], 32);
    assert_eq!(c[31], 0x40 | 0x1e);
    assert_eq!(c[0x1b], 0x04, "local protection");
    assert!(r.violations(0).iter().any(|v| v.contains("PD")));
    let out = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x022, 0, 0, 71, out), 0);
    assert_eq!(r.get32(0, out + 8) >> 28, 6, "QP in ERR");
}

#[test]
fn packet_delay_holds_packets_until_time_passes() {
    use std::time::Duration;
    let cfg = FabricConfig {
        manual_clock: true,
        faults: sim::Faults {
            delay: Duration::from_millis(2),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut r = Rig::with(2, cfg, harness::reduced());
    let mut qps = Vec::new();
    let mut cqs = Vec::new();
    for i in 0..2 {
        node_up(&mut r, i);
        cqs.push(r.create_cq(i, 128, 6, UAR, 8).0);
        qps.push(r.qp_to_rts(i, 70, 3, 128, UAR, 1, 0x99, 0, 0));
    }
    let rb = r.alloc(1, 256, 64);
    post_recv(&mut r, 1, &qps[1], 0, rb, 256);
    post(
        &mut r,
        0,
        &qps[0],
        70,
        0,
        0x0a,
        &ud_av(sim::Fabric::sm_lid_for(1, 1), 70, 0x99),
    );
    assert_eq!(r.read(1, cqs[1], 32), vec![0xcc; 32], "still on the wire");
    r.m.fabric().advance(Duration::from_millis(1));
    assert_eq!(r.read(1, cqs[1], 32), vec![0xcc; 32], "1 ms is not enough");
    r.m.fabric().advance(Duration::from_millis(1));
    assert_eq!(r.read(1, cqs[1], 32)[31], 0x01, "delivered after 2 ms");
    r.assert_clean(0);
    r.assert_clean(1);
}

#[test]
fn doorbell_without_a_hardware_owned_wqe_is_recorded() {
    let mut r = Rig::new(1, true);
    node_up(&mut r, 0);
    r.create_cq(0, 128, 6, UAR, 8);
    let qp = r.qp_to_rts(0, 70, 3, 128, UAR, 1, 0x99, 0, 0);
    // WQE 0 written with owner bit 1 (pass 1) instead of 0, then the doorbell.
    let w = qp.sq;
    r.write(0, w + 16, &ud_av(2, 70, 0x99));
    r.put32(0, w + 4, 4);
    r.put32(0, w, (1 << 31) | 0x0a);
    let h = r.hca(0);
    r.m.mmio_write(h, 2, u64::from(UAR) * 4096 + 0x14, 4, be32(70 << 8));
    let v = r.violations(0);
    assert_eq!(v.len(), 1);
    assert!(v[0].contains("not hardware-owned"), "{v:?}");
}
