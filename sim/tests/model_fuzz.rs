//! Seeded random MMIO / config / command / doorbell / WQE sequences: the model never panics
//! and never writes memory it was not given (canary blocks the device never learns about).
#![allow(clippy::needless_range_loop)]

mod harness;
use harness::*;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const UAR: u32 = 9;
/// (QPN, service type) of the fuzzed QPs, the same on both nodes.
const QPS: [(u32, u8); 3] = [(70, 3), (71, 1), (72, 0)];

/// QUERY_QP: (state, SQ counter, RQ counter).
fn query(r: &mut Rig, i: usize, qpn: u32, mb: u64) -> (u32, u16, u16) {
    if r.cmd(i, 0x022, 0, 0, qpn, mb) != 0 {
        return (u32::MAX, 0, 0);
    }
    let c = mb + 8;
    let st = r.get32(i, c) >> 28;
    let w = r.get32(i, c + 0xb4);
    (st, w as u16, (w >> 16) as u16)
}

/// A mostly valid WQE for QP k (one 64-byte slot), perturbed now and then.
fn wqe(g: &mut Rng, k: usize, owner: bool, peer_lid: u16, rkey: u32, remote: u64) -> Vec<u8> {
    let mut w = vec![0u8; 64];
    let st = QPS[k].1;
    let (opcode, body): (u8, Vec<u8>) = match (st, g.next() % 4) {
        (3, _) => {
            let mut d = vec![0u8; 48];
            d[0..4].copy_from_slice(&((1u32 << 24) | 1).to_be_bytes());
            d[6..8].copy_from_slice(&peer_lid.to_be_bytes());
            d[0x20..0x24].copy_from_slice(&70u32.to_be_bytes());
            d[0x24..0x28].copy_from_slice(&0x11u32.to_be_bytes());
            (0x0a, d)
        }
        (_, 0 | 1) => {
            let n = (g.next() % 40) as usize;
            let mut d = (0x8000_0000u32 | n as u32).to_be_bytes().to_vec();
            d.extend((0..n).map(|_| g.next() as u8));
            (0x0a, d)
        }
        (_, 2) => {
            let n = (g.next() % 24) as usize;
            let mut d = (remote + g.next() % 4096).to_be_bytes().to_vec();
            d.extend(rkey.to_be_bytes());
            d.extend([0; 4]);
            d.extend((0x8000_0000u32 | n as u32).to_be_bytes());
            d.extend((0..n).map(|_| g.next() as u8));
            (0x08, d)
        }
        _ => {
            // READ (RC) of up to 4 KiB into local physical memory near the canary-free area.
            let mut d = (remote + g.next() % 4096).to_be_bytes().to_vec();
            d.extend(rkey.to_be_bytes());
            d.extend([0; 4]);
            d.extend(((g.next() % 4096) as u32).to_be_bytes());
            d.extend(0x200u32.to_be_bytes());
            d.extend((remote + 0x10000).to_be_bytes());
            (if st == 0 { 0x10 } else { 0x0a }, d)
        }
    };
    let ds = (16 + body.len()).div_ceil(16).min(4) as u32;
    w[16..16 + body.len().min(48)].copy_from_slice(&body[..body.len().min(48)]);
    w[0..4].copy_from_slice(&((u32::from(owner) << 31) | u32::from(opcode)).to_be_bytes());
    w[4..8].copy_from_slice(&ds.to_be_bytes());
    w[8..12].copy_from_slice(&(((g.next() % 2) as u32 * 3) << 2).to_be_bytes());
    if g.next().is_multiple_of(4) {
        let at = (g.next() % 64) as usize;
        w[at] = g.next() as u8;
    }
    w
}

#[test]
fn random_sequences_never_panic_or_stray() {
    for seed in 1..=8u64 {
        let mut r = Rig::new(2, true);
        let mut qps: Vec<Vec<QpBufs>> = vec![Vec::new(), Vec::new()];
        let mut canaries = Vec::new();
        let mut landing = Vec::new();
        let mut remote = 0;
        let mut rkey = 0;
        for i in 0..2 {
            r.bring_up(i);
            r.create_eq(i, 8, 6, 0);
            assert_eq!(r.cmd(i, 0x012, 0, u64::MAX - 1, 8, 0), 0);
            r.init_port(i);
            r.create_cq(i, 128, 6, UAR, 8);
            let peer = sim::Fabric::sm_lid_for(1 - i, 1);
            for (qpn, st) in QPS {
                let b = r.qp_to_rts(i, qpn, st, 128, UAR, 1, 0x11, peer, qpn);
                qps[i].push(b);
            }
            let c = r.alloc(i, 65536, 4096);
            r.write(i, c, &[0x5a; 65536]);
            canaries.push(c);
            landing.push(r.alloc(i, 8192, 4096));
            if i == 1 {
                remote = r.alloc(1, 0x20000, 4096);
                rkey = r.create_mr(1, 32, 7, 1, remote, 0x20000, 0x7c00, false);
            }
        }
        let mut g = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let scratch = [r.mailbox(0), r.mailbox(1)];
        let mut last_sent = 0;
        for step in 0..2500 {
            let v = g.next();
            let i = (v >> 40) as usize % 2;
            let h = r.hca(i);
            let base = r.nodes[i].arena.base();
            match v % 10 {
                0 => {
                    let off = (g.next() % 0x100000) & !3;
                    r.m.mmio_write(h, 0, off, [1, 2, 4, 8][(v >> 8) as usize % 4], g.next());
                }
                1 => {
                    let off = g.next() % (8 << 20);
                    r.m.mmio_write(h, 2, off & !3, 4, g.next());
                }
                2 => {
                    let off = (g.next() % 0x100) as u16 & !3;
                    if off != 4 && off != 0x10 && off != 0x18 {
                        r.m.cfg_write(h, off, 4, g.next() as u32);
                    }
                }
                3 => {
                    // A random command with random mailbox content.
                    let mb = scratch[i];
                    let bytes: Vec<u8> = (0..512).map(|_| g.next() as u8).collect();
                    r.write(i, mb, &bytes);
                    let ops = [
                        0x13u16, 0x14, 0x16, 0x17, 0x0d, 0x0f, 0x19, 0x1a, 0x1b, 0x1c, 0x1e, 0x21,
                        0x12, 0x24, 0x0c, 0x09, 0x0a, 0x11, 0xffa, 0xff9, 0x031, 0x023, 0x022,
                    ];
                    let op = ops[(g.next() % ops.len() as u64) as usize];
                    let d = [
                        (mb >> 32) as u32,
                        mb as u32,
                        (g.next() % 300) as u32,
                        (mb >> 32) as u32,
                        mb as u32,
                        0,
                    ];
                    for (k, x) in d.iter().enumerate() {
                        r.m.mmio_write(h, 0, HCR + 4 * k as u64, 4, be32(*x));
                    }
                    r.m.mmio_write(
                        h,
                        0,
                        HCR + 0x18,
                        4,
                        be32((1 << 23) | (((g.next() % 4) as u32) << 12) | u32::from(op)),
                    );
                }
                4 => {
                    let _ =
                        r.m.mmio_read(h, (v >> 16) as u8 % 3, g.next() % 0x100000, 4);
                }
                5 => {
                    // Random bytes into driver memory (may hit ICM, MTTs, queues).
                    let a = base + (g.next() % (32 << 20));
                    let c = canaries[i];
                    if a + 8 <= c || a >= c + 65536 {
                        let _ = r.nodes[i].arena.write(a, &g.next().to_le_bytes());
                    }
                }
                6..=8 => {
                    // A mostly valid WQE on a live QP, rung by doorbell or BlueFlame.
                    let k = (g.next() % 3) as usize;
                    let (qpn, st) = QPS[k];
                    let mb = scratch[i];
                    let (state, sqc, rqc) = query(&mut r, i, qpn, mb);
                    if state == 6 || state == 0 || state == u32::MAX {
                        let _ = r.cmd(i, 0x021, 2, 0, qpn, 0);
                        let peer = sim::Fabric::sm_lid_for(1 - i, 1);
                        let b = QpBufs { ..qps[i][k] };
                        let _ = r.qp_modify_to_rts(i, qpn, st, 128, UAR, 1, 0x11, peer, qpn, &b);
                        continue;
                    }
                    // Receive side of the peer: keep a few receives posted.
                    let pb = &qps[1 - i][k];
                    let (_, _, prq) = query(&mut r, 1 - i, qpn, scratch[1 - i]);
                    let _ = rqc;
                    let slot = u64::from(prq % 16);
                    let rb = pb.rq + slot * 64;
                    let mut rw = Vec::new();
                    rw.extend(4096u32.to_be_bytes());
                    rw.extend(0x200u32.to_be_bytes());
                    rw.extend(landing[1 - i].to_be_bytes());
                    rw.extend([0, 0, 0, 0, 0, 0, 1, 0]);
                    r.write(1 - i, rb, &rw);
                    r.put32(1 - i, pb.db, u32::from(prq.wrapping_add(1)));
                    let peer = sim::Fabric::sm_lid_for(1 - i, 1);
                    let w = wqe(&mut g, k, sqc & 16 != 0, peer, rkey, remote);
                    let b = &qps[i][k];
                    r.write(i, b.sq + u64::from(sqc % 16) * 64, &w);
                    if g.next().is_multiple_of(2) {
                        r.m.mmio_write(h, 2, u64::from(UAR) * 4096 + 0x14, 4, be32(qpn << 8));
                    } else {
                        let mut bf = w.clone();
                        bf[1..4].copy_from_slice(&(u32::from(sqc) << 8).to_be_bytes()[1..4]);
                        bf[4..7].copy_from_slice(&(qpn << 8).to_be_bytes()[0..3]);
                        let at = (4 << 20) + u64::from(UAR) * 4096 + (g.next() % 16) * 256;
                        for (j, c) in bf.chunks(8).enumerate() {
                            r.m.mmio_write(
                                h,
                                2,
                                at + 8 * j as u64,
                                8,
                                u64::from_le_bytes(c.try_into().unwrap()),
                            );
                        }
                    }
                }
                _ => {
                    // CQ arm / EQ doorbells with random values.
                    r.m.mmio_write(h, 2, u64::from(UAR) * 4096 + 0x20, 8, g.next());
                    r.m.mmio_write(h, 2, 2 * 4096 + 0x800, 4, g.next() & 0xffff_ffff);
                }
            }
            if step % 50 == 0 {
                r.m.fabric().advance(std::time::Duration::from_millis(20));
            }
            r.m.poll();
            // No packet storm: a step moves a handful of packets, never a livelock's worth
            // (an RNR NAK / PSN-sequence NAK ping-pong was found this way).
            let sent = r.m.fabric_ref().counters(r.hca(0)).packets_sent
                + r.m.fabric_ref().counters(r.hca(1)).packets_sent;
            assert!(
                sent - last_sent < 200,
                "seed {seed} step {step}: {} packets in one step",
                sent - last_sent
            );
            last_sent = sent;
            let c = r.m.cfg_read(h, 4, 2);
            if c & 6 != 6 {
                r.m.setup_pci(h);
            }
        }
        for i in 0..2 {
            assert_eq!(
                r.read(i, canaries[i], 65536),
                vec![0x5a; 65536],
                "seed {seed}: canary of node {i} untouched"
            );
        }
        let c0 = r.m.fabric_ref().counters(r.hca(0));
        let c1 = r.m.fabric_ref().counters(r.hca(1));
        eprintln!("seed {seed}: node0 {c0}\nseed {seed}: node1 {c1}");
        assert!(c0.violations > 0, "the fuzzer provoked violations");
        assert!(
            c0.commands > 300 && c0.blueflame_bytes > 0,
            "the fuzzer reached commands and BlueFlame"
        );
        assert!(
            c0.packets_sent + c1.packets_sent > 0 && c0.packets_received + c1.packets_received > 0,
            "the fuzzer reached the wire"
        );
    }
}
