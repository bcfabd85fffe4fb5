//! QP0, MLX WQEs and SMPs across a back-to-back link, driven by hand from the reference
//! (independent of the driver): the MLX segment as Linux's mlx4_wqe_mlx_seg lays it out, the
//! LRH/BTH/DETH as the IBA defines them, directed-route SMPs per IBA 14.2 (docs/model.md).
mod harness;
use harness::*;
use sim::{FabricConfig, Topology};

const UAR: u32 = 9;
const BASE: u32 = 128; // CONF_SPECIAL_QP base: QP0 of port 1 = 128
const QP0: u32 = BASE;
const CQ: u32 = 128;
const RKEY: u32 = 0x200; // the rig's reserved L_Key (profile default)
/// QP0's SQ stride: an MLX WQE is 80 bytes (Linux gives QP0 128-byte slots).
const SQ_STRIDE: u64 = 128;

fn uar_off(page: u32, o: u64) -> u64 {
    u64::from(page) * 4096 + o
}

fn b2b() -> Rig {
    Rig::with(
        2,
        FabricConfig {
            topology: Topology::BackToBack,
            subnet_manager: false,
            manual_clock: true,
            ..Default::default()
        },
        harness::reduced(),
    )
}

/// Firmware up, EQ 8 with PORT_CHANGE/CQ_ERROR/CMD mapped, CQ 128.
fn setup(r: &mut Rig, i: usize) -> (u64, u64) {
    r.bring_up(i);
    let eq = r.create_eq(i, 8, 6, 0);
    let mask = (1u64 << 0x0a) | (1 << 0x09) | (1 << 0x04);
    assert_eq!(r.cmd(i, 0x012, 0, mask, 8, 0), 0, "MAP_EQ");
    let (cq, _) = r.create_cq(i, CQ, 5, UAR, 8);
    (eq, cq)
}

/// CONF_SPECIAL_QP and QP0 (MLX, st 7) of port 1 to RTS: SQ 16 x 128 B then RQ 16 x 64 B,
/// GSI/SMI mtu_msgmax (5 << 5 | 11), sched_queue 0x3F | (port - 1) << 6 (§4.3, §4.4).
fn qp0_up(r: &mut Rig, i: usize) -> QpBufs {
    assert_eq!(r.cmd(i, 0x023, 0, 0, BASE, 0), 0, "CONF_SPECIAL_QP");
    let buf = r.alloc(i, 4096, 4096);
    let db = r.alloc(i, 4, 4);
    let mtt = r.write_mtts(i, &[buf]);
    let mb = r.mailbox(i);
    let b = QpBufs {
        buf,
        db,
        sq: buf,
        rq: buf + 16 * SQ_STRIDE,
        mtt,
        mb,
    };
    for k in 0..16u64 {
        r.put32(i, b.sq + k * SQ_STRIDE, 1 << 31);
    }
    r.stamp_sq(i, b.sq, 16, SQ_STRIDE);
    r.put32(i, db, 0);
    r.write(i, mb, &[0u8; 256]);
    let c = mb + 8;
    r.put32(i, c, (1 << 28) | (7 << 16) | (3 << 11));
    r.put32(i, c + 0x04, 1);
    r.write(
        i,
        c + 0x08,
        &[(5 << 5) | 11, (4 << 3) | 2, (4 << 3) | 3, 0x10],
    );
    r.put32(i, c + 0x0c, UAR);
    r.put32(i, c + 0x10, QP0);
    r.put32(i, c + 0x7c, CQ);
    r.put32(i, c + 0x9c, CQ);
    r.put64(i, c + 0xa0, db);
    r.put32(i, c + 0xcc, (mtt * 8) as u32);
    r.put32(i, mb, (1 << 4) | (1 << 5));
    assert_eq!(r.cmd(i, 0x019, 0, mb, QP0, 0), 0, "RST2INIT QP0");
    r.put32(i, c, (2 << 28) | (7 << 16) | (3 << 11));
    r.write(i, c + 0x18 + 0x20, &[0x3f]);
    r.put32(i, mb, 0);
    assert_eq!(r.cmd(i, 0x01a, 0, mb, QP0, 0), 0, "INIT2RTR QP0");
    r.put32(i, c, (3 << 28) | (7 << 16) | (3 << 11));
    assert_eq!(r.cmd(i, 0x01b, 0, mb, QP0, 0), 0, "RTR2RTS QP0");
    b
}

/// Post RQ WQE `k` of QP0 with a 296-byte buffer (40-byte GRH area + 256-byte MAD).
fn post_qp0_recv(r: &mut Rig, i: usize, b: &QpBufs, k: u64) -> u64 {
    let rbuf = r.alloc(i, 296, 64);
    let w = b.rq + (k % 16) * 64;
    r.put32(i, w, 296);
    r.put32(i, w + 4, RKEY);
    r.put64(i, w + 8, rbuf);
    r.put32(i, w + 20, 0x100);
    r.put32(i, b.db, (k + 1) as u32);
    rbuf
}

/// A directed-route SMP as an SM's SMI sends it out of port 1 with hop count 1: hop pointer
/// already advanced to 1, initial path [_, 1], DrSLID = DrDLID = permissive (IBA 14.2.2).
fn dr_smp(method: u8, attr: u16, amod: u32, data: &[u8; 64]) -> [u8; 256] {
    let mut m = [0u8; 256];
    m[..4].copy_from_slice(&[1, 0x81, 1, method]);
    m[6] = 1; // hop pointer
    m[7] = 1; // hop count
    m[8..16].copy_from_slice(&0x1122_3344_5566_7788u64.to_be_bytes());
    m[0x10..0x12].copy_from_slice(&attr.to_be_bytes());
    m[0x14..0x18].copy_from_slice(&amod.to_be_bytes());
    m[0x20..0x24].copy_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    m[0x40..0x80].copy_from_slice(data);
    m[0x80 + 1] = 1; // initial path: out of port 1
    m
}

/// LRH (VL15, SL 0, LNH 2, DLID/SLID permissive, PktLen) + BTH (UD SEND Only, P_Key 0xFFFF,
/// DestQP 0) + DETH (Q_Key 0, SrcQP 0) for a 256-byte MAD: 28 bytes (IBA 7.7, 9.2, 9.3.3).
fn smp_headers() -> [u8; 28] {
    let mut h = [0u8; 28];
    h[0] = 0xf0;
    h[1] = 0x02;
    h[2..4].copy_from_slice(&[0xff, 0xff]);
    h[4..6].copy_from_slice(&(((28 + 256 + 4) / 4) as u16).to_be_bytes());
    h[6..8].copy_from_slice(&[0xff, 0xff]);
    h[8] = 0x64;
    h[10..12].copy_from_slice(&[0xff, 0xff]);
    h
}

/// Write MLX WQE `k` (Linux's layout: MLX segment, one inline segment with the headers, one
/// pointer segment with the MAD, the ICRC segment; DS 5) and ring the send doorbell.
#[allow(clippy::too_many_arguments)]
fn post_mlx(
    r: &mut Rig,
    i: usize,
    b: &QpBufs,
    k: u64,
    flags: u32,
    rlid: u16,
    hdr: &[u8; 28],
    mad: &[u8],
) {
    post_mlx_raw(r, i, b, k, flags, rlid, hdr, mad, true);
}

/// `post_mlx`, optionally without the trailing ICRC segment (DS 4).
#[allow(clippy::too_many_arguments)]
fn post_mlx_raw(
    r: &mut Rig,
    i: usize,
    b: &QpBufs,
    k: u64,
    flags: u32,
    rlid: u16,
    hdr: &[u8; 28],
    mad: &[u8],
    icrc: bool,
) {
    let mbuf = r.alloc(i, 256, 64);
    r.write(i, mbuf, mad);
    let w = b.sq + (k % 16) * SQ_STRIDE;
    r.write(i, w + 4, &[0, 0, 0, if icrc { 5 } else { 4 }]);
    r.put32(i, w + 8, flags);
    r.write(i, w + 12, &[(rlid >> 8) as u8, rlid as u8, 0, 0]);
    r.put32(i, w + 16, 0x8000_0000 | 28);
    r.write(i, w + 20, hdr);
    r.put32(i, w + 48, mad.len() as u32);
    r.put32(i, w + 52, RKEY);
    r.put64(i, w + 56, mbuf);
    if icrc {
        r.write(i, w + 64, &[0x80, 0, 0, 4, 0, 0, 0, 0]);
    }
    let owner = if k & 16 != 0 { 1u32 << 31 } else { 0 };
    r.put32(i, w, owner | 0x0a);
    let h = r.hca(i);
    r.m.mmio_write(h, 2, uar_off(UAR, 0x14), 4, be32(QP0 << 8));
    // The 16-slot ring has no headroom beyond the device's prefetch window: restamp the slot
    // the device has run, before its next pass comes into that window (§5.4).
    r.stamp_sq(i, w, 1, SQ_STRIDE);
}

const GOOD_FLAGS: u32 = (1 << 17) | (1 << 16) | (3 << 2); // VL15 | SLR | signaled

fn cqe(r: &Rig, i: usize, cq: u64, n: u64) -> Vec<u8> {
    r.read(i, cq + n * 32, 32)
}

fn port_state_via_mad_ifc(r: &mut Rig, i: usize) -> (u8, u16) {
    let mb = r.mailbox(i);
    let out = r.mailbox(i);
    r.write(i, mb, &[0u8; 256]);
    r.write(i, mb, &[1, 1, 1, 1]);
    r.write(i, mb + 0x10, &0x15u16.to_be_bytes());
    r.put32(i, mb + 0x14, 1);
    assert_eq!(r.cmd(i, 0x024, 3, mb, 1, out), 0);
    let m = r.read(i, out, 256);
    (m[0x40 + 32] & 0xf, u16::from_be_bytes([m[0x50], m[0x51]]))
}

#[test]
fn back_to_back_link_trains_only_with_both_ends_enabled() {
    let mut r = b2b();
    setup(&mut r, 0);
    setup(&mut r, 1);
    let out = r.mailbox(0);
    r.init_port(0);
    assert_eq!(r.cmd(0, 0x043, 0, 0, 1, out), 0);
    assert_eq!(r.read(0, out, 1)[0] & 0x80, 0, "peer not enabled: no link");
    assert_eq!(port_state_via_mad_ifc(&mut r, 0), (1, 0), "DOWN");
    r.init_port(1);
    assert_eq!(r.cmd(0, 0x043, 0, 0, 1, out), 0);
    assert_eq!(r.read(0, out, 1)[0] & 0x80, 0x80, "link up");
    assert_eq!(
        port_state_via_mad_ifc(&mut r, 0),
        (2, 0),
        "INIT, LID 0: no SM"
    );
    assert_eq!(port_state_via_mad_ifc(&mut r, 1), (2, 0));
    let h1 = r.hca(1);
    r.m.fabric().set_link(h1, 1, false);
    assert_eq!(
        port_state_via_mad_ifc(&mut r, 0),
        (1, 0),
        "cable cut at the far end"
    );
    r.assert_clean(0);
    r.assert_clean(1);
}

#[test]
fn sm_over_qp0_discovers_the_peer_and_brings_both_ports_active() {
    let mut r = b2b();
    let (_eq0, cq0) = setup(&mut r, 0);
    let (eq1, cq1) = setup(&mut r, 1);
    let b = qp0_up(&mut r, 0);
    r.init_port(0);
    r.init_port(1);
    // UD QPs on both nodes for the data check (QPN 70, Q_Key 0x11111111, CQ 128).
    let ud: Vec<QpBufs> = (0..2)
        .map(|i| r.qp_to_rts(i, 70, 3, CQ, UAR, 1, 0x1111_1111, 0, 0))
        .collect();
    let mut n0 = 0u64; // CQEs consumed on node 0
    let rb = post_qp0_recv(&mut r, 0, &b, 0);

    // Get(NodeInfo) by directed route: the peer's firmware SMA answers (no CONF_SPECIAL_QP).
    post_mlx(
        &mut r,
        0,
        &b,
        0,
        GOOD_FLAGS,
        0xffff,
        &smp_headers(),
        &dr_smp(1, 0x11, 0, &[0; 64]),
    );
    let s = cqe(&r, 0, cq0, n0);
    assert_eq!(s[31] & 0x7f, 0x40 | 0x0a, "send CQE, SEND");
    assert_eq!(u32::from_be_bytes(s[0..4].try_into().unwrap()), QP0);
    let c = cqe(&r, 0, cq0, n0 + 1);
    n0 += 2;
    assert_eq!(c[31] & 0x7f, 0x01, "receive CQE: SEND");
    assert_eq!(u32::from_be_bytes(c[0..4].try_into().unwrap()), QP0);
    assert_eq!(
        u32::from_be_bytes(c[8..12].try_into().unwrap()) & 0xff_ffff,
        0,
        "src QP 0"
    );
    assert_eq!(
        u16::from_be_bytes([c[0x0e], c[0x0f]]),
        0xffff,
        "SLID permissive"
    );
    assert_eq!(
        u32::from_be_bytes(c[0x14..0x18].try_into().unwrap()),
        296,
        "MAD + GRH area"
    );
    let m = r.read(0, rb + 40, 256);
    assert_eq!(&m[..4], &[1, 0x81, 1, 0x81], "DR GetResp");
    assert_eq!(u16::from_be_bytes([m[4], m[5]]), 0x8000, "D bit, status 0");
    assert_eq!((m[6], m[7]), (0, 1), "hop pointer back to 0, hop count 1");
    assert_eq!(&m[8..16], &0x1122_3344_5566_7788u64.to_be_bytes(), "TID");
    assert_eq!(m[0xc0 + 1], 1, "return path: the peer's port 1");
    let d = &m[0x40..0x80];
    assert_eq!(d[2], 1, "channel adapter");
    assert_eq!(
        &d[12..20],
        &0x0002_c903_0000_0200u64.to_be_bytes(),
        "peer node GUID"
    );
    assert_eq!(d[36], 1, "local port");

    // Data does not pass while the ports are INIT; SMPs did.
    let dropped = counters(&mut r, 0).packets_dropped;
    send_ud(&mut r, 0, &ud[0], 2);
    let s = cqe(&r, 0, cq0, n0);
    n0 += 1;
    assert_eq!(s[31] & 0x7f, 0x40 | 0x0b, "UD SEND_IMM completes");
    assert!(
        counters(&mut r, 0).packets_dropped > dropped,
        "but the packet is dropped"
    );
    assert_eq!(
        r.read(1, cq1, 32),
        vec![0xcc; 32],
        "nothing received on the peer"
    );

    // Set(PortInfo) on the peer: LID 2, SM LID 1, ARMED, then ACTIVE.
    let mut pi = [0u8; 64];
    pi[16..18].copy_from_slice(&2u16.to_be_bytes());
    pi[18..20].copy_from_slice(&1u16.to_be_bytes());
    pi[32] = 3;
    for (k, state) in [(1u64, 3u8), (2, 4)] {
        pi[32] = state;
        let rb = post_qp0_recv(&mut r, 0, &b, k);
        post_mlx(
            &mut r,
            0,
            &b,
            k,
            GOOD_FLAGS,
            0xffff,
            &smp_headers(),
            &dr_smp(2, 0x15, 0, &pi),
        );
        let c = cqe(&r, 0, cq0, n0 + 1);
        n0 += 2;
        assert_eq!(c[31] & 0x7f, 0x01);
        let m = r.read(0, rb + 40, 256);
        assert_eq!(u16::from_be_bytes([m[4], m[5]]), 0x8000, "Set accepted");
        assert_eq!(m[0x40 + 32] & 0xf, state, "peer port state");
        assert_eq!(u16::from_be_bytes([m[0x50], m[0x51]]), 2, "peer LID");
        assert_eq!(u16::from_be_bytes([m[0x52], m[0x53]]), 1, "peer SM LID");
    }
    let e = r.read(1, eq1, 32);
    assert_eq!((e[1], e[3]), (0x09, 4), "PORT_CHANGE ACTIVE on the peer");
    assert_eq!(port_state_via_mad_ifc(&mut r, 1), (4, 2));

    // The SM's own port through MAD_IFC (LID 1, ARMED, ACTIVE), then data flows.
    let mb = r.mailbox(0);
    let out = r.mailbox(0);
    for state in [3u8, 4] {
        let mut pi = [0u8; 64];
        pi[16..18].copy_from_slice(&1u16.to_be_bytes());
        pi[18..20].copy_from_slice(&1u16.to_be_bytes());
        pi[32] = state;
        r.write(0, mb, &[0u8; 256]);
        r.write(0, mb, &[1, 1, 1, 2]);
        r.write(0, mb + 0x10, &0x15u16.to_be_bytes());
        r.put32(0, mb + 0x14, 1);
        r.write(0, mb + 0x40, &pi);
        assert_eq!(r.cmd(0, 0x024, 3, mb, 1, out), 0);
    }
    assert_eq!(port_state_via_mad_ifc(&mut r, 0), (4, 1));
    let rbuf = r.alloc(1, 256, 64);
    r.put32(1, ud[1].rq, 256);
    r.put32(1, ud[1].rq + 4, RKEY);
    r.put64(1, ud[1].rq + 8, rbuf);
    r.put32(1, ud[1].rq + 20, 0x100);
    r.put32(1, ud[1].db, 1);
    send_ud(&mut r, 0, &ud[0], 2);
    let c = r.read(1, cq1, 32);
    assert_eq!(
        c[31] & 0x7f,
        0x02,
        "UD SEND_IMM received once both ports are ACTIVE"
    );
    assert_eq!(
        u16::from_be_bytes([c[0x0e], c[0x0f]]),
        1,
        "SLID = the SM's LID"
    );
    let _ = n0;
    r.assert_clean(0);
    r.assert_clean(1);
}

/// UD SEND_IMM from QP 70 (next WQE slot tracked by the QP's SQ position) to QP 70 at `dlid`.
fn send_ud(r: &mut Rig, i: usize, b: &QpBufs, dlid: u16) {
    // Find the first slot still owned by software in pass 0 (owner bit 1 from setup).
    let mut k = 0u64;
    while r.get32(i, b.sq + k * 64) >> 31 == 0 {
        k += 1;
    }
    let sq = b.sq + k * 64;
    r.put32(i, sq + 4, 4);
    r.put32(i, sq + 8, 3 << 2);
    r.put32(i, sq + 12, 0xabcd_ef01);
    let d = sq + 16;
    r.put32(i, d, (1 << 24) | 1);
    r.write(i, d + 6, &dlid.to_be_bytes());
    r.put32(i, d + 0x20, 70);
    r.put32(i, d + 0x24, 0x1111_1111);
    r.put32(i, sq, 0x0b);
    let h = r.hca(i);
    r.m.mmio_write(h, 2, uar_off(UAR, 0x14), 4, be32(70 << 8));
}

/// One malformed MLX WQE on a fresh pair: error CQE, a recorded violation naming `what`,
/// nothing reaches the peer.
fn malformed(flags: u32, rlid: u16, hdr: [u8; 28], mad: [u8; 256], what: &str) {
    malformed_raw(flags, rlid, hdr, mad, true, what)
}

fn malformed_raw(flags: u32, rlid: u16, hdr: [u8; 28], mad: [u8; 256], icrc: bool, what: &str) {
    let mut r = b2b();
    let (_, cq0) = setup(&mut r, 0);
    setup(&mut r, 1);
    let b = qp0_up(&mut r, 0);
    r.init_port(0);
    r.init_port(1);
    post_qp0_recv(&mut r, 0, &b, 0);
    let rx = counters(&mut r, 1).packets_received;
    post_mlx_raw(&mut r, 0, &b, 0, flags, rlid, &hdr, &mad, icrc);
    let c = cqe(&r, 0, cq0, 0);
    assert_eq!(c[31] & 0x1f, 0x1e, "error CQE for {what}");
    assert_eq!(c[0x1b], 0x02, "local QP operation error for {what}");
    let v = r.violations(0);
    assert!(v.iter().any(|x| x.contains(what)), "{what}: {v:#?}");
    assert_eq!(counters(&mut r, 1).packets_received, rx, "nothing sent");
}

#[test]
fn malformed_mlx_wqes_are_recorded_and_fail() {
    let smp = dr_smp(1, 0x11, 0, &[0; 64]);
    let h = smp_headers();
    malformed(
        (1 << 16) | (3 << 2),
        0xffff,
        h,
        smp,
        "without the VL15 flag",
    );
    malformed(
        GOOD_FLAGS,
        0x0002,
        h,
        smp,
        "differs from the MLX segment rlid",
    );
    let mut bad_vl = h;
    bad_vl[0] = 0x00;
    malformed(GOOD_FLAGS, 0xffff, bad_vl, smp, "LRH VL 0");
    let mut bad_len = h;
    bad_len[4..6].copy_from_slice(&10u16.to_be_bytes());
    malformed(GOOD_FLAGS, 0xffff, bad_len, smp, "PktLen");
    let mut bad_qp = h;
    bad_qp[15] = 1;
    malformed(GOOD_FLAGS, 0xffff, bad_qp, smp, "SMPs go from QP0 to QP0");
    let mut not_smp = smp;
    not_smp[1] = 0x04; // performance management class
    malformed(GOOD_FLAGS, 0xffff, h, not_smp, "VL15 carries only SMPs");
    malformed(GOOD_FLAGS & !(1 << 16), 0xffff, h, smp, "SLR flag");
    // Linux ends every MLX WQE with the 4-byte ICRC segment; one without it is refused.
    malformed_raw(GOOD_FLAGS, 0xffff, h, smp, false, "ICRC segment");
}

#[test]
fn smi_rules_and_unmodelled_far_ends_drop_smps() {
    // C14-9:1: a sender that did not advance the hop pointer; C14-9:3: DrDLID not
    // permissive at the end of the path. The peer's SMI discards both; no response.
    for (what, patch) in [("hop pointer 0", (6usize, 0u8)), ("DrDLID", (0x22, 0x00))] {
        let mut r = b2b();
        let (_, cq0) = setup(&mut r, 0);
        setup(&mut r, 1);
        let b = qp0_up(&mut r, 0);
        r.init_port(0);
        r.init_port(1);
        post_qp0_recv(&mut r, 0, &b, 0);
        let mut smp = dr_smp(1, 0x11, 0, &[0; 64]);
        smp[patch.0] = patch.1;
        let d1 = counters(&mut r, 1).packets_dropped;
        post_mlx(&mut r, 0, &b, 0, GOOD_FLAGS, 0xffff, &smp_headers(), &smp);
        assert_eq!(
            cqe(&r, 0, cq0, 0)[31] & 0x7f,
            0x4a,
            "{what}: the send completes"
        );
        assert_eq!(cqe(&r, 0, cq0, 1), vec![0xcc; 32], "{what}: no response");
        assert_eq!(counters(&mut r, 1).packets_dropped, d1 + 1, "{what}");
        r.assert_clean(0);
        r.assert_clean(1);
    }
    // On the switch the far end is the switch's SMA, which is not modelled: dropped.
    let mut r = Rig::new(2, false);
    let (_, cq0) = setup(&mut r, 0);
    let b = qp0_up(&mut r, 0);
    r.init_port(0);
    post_qp0_recv(&mut r, 0, &b, 0);
    post_mlx(
        &mut r,
        0,
        &b,
        0,
        GOOD_FLAGS,
        0xffff,
        &smp_headers(),
        &dr_smp(1, 0x11, 0, &[0; 64]),
    );
    assert_eq!(cqe(&r, 0, cq0, 0)[31] & 0x7f, 0x4a);
    assert_eq!(
        cqe(&r, 0, cq0, 1),
        vec![0xcc; 32],
        "no answer through the switch"
    );
    r.assert_clean(0);
}

#[test]
fn a_peer_that_owns_qp0_gets_the_smp_in_its_receive_queue() {
    let mut r = b2b();
    let (_, cq0) = setup(&mut r, 0);
    let (_, cq1) = setup(&mut r, 1);
    let b0 = qp0_up(&mut r, 0);
    let b1 = qp0_up(&mut r, 1);
    r.init_port(0);
    r.init_port(1);
    post_qp0_recv(&mut r, 0, &b0, 0);
    let rb1 = post_qp0_recv(&mut r, 1, &b1, 0);
    let smp = dr_smp(1, 0x11, 0, &[0; 64]);
    post_mlx(&mut r, 0, &b0, 0, GOOD_FLAGS, 0xffff, &smp_headers(), &smp);
    let c = r.read(1, cq1, 32);
    assert_eq!(c[31] & 0x7f, 0x01, "the request lands in the peer's QP0 RQ");
    assert_eq!(
        r.read(1, rb1 + 40, 256),
        smp.to_vec(),
        "unchanged: the SMI is software's"
    );
    assert_eq!(
        cqe(&r, 0, cq0, 1),
        vec![0xcc; 32],
        "the firmware did not answer"
    );
    r.assert_clean(0);
    r.assert_clean(1);
}

fn counters(r: &mut Rig, i: usize) -> sim::Counters {
    let h = r.hca(i);
    r.m.fabric().counters(h)
}

/// The send queue's prefetch (§5.4): after a doorbell the device may read the slots after
/// the last posted WQE, so each one in its window must look invalid: a slot whose further
/// 64-byte chunks are not stamped, or whose owner bit says hardware-owned past a free slot,
/// is recorded. The WQE the doorbell announced still runs, as a card runs it.
#[test]
fn an_unstamped_or_hardware_owned_slot_the_device_may_prefetch_is_recorded() {
    let smp = dr_smp(1, 0x11, 0, &[0; 64]);
    let h = smp_headers();
    for (what, spoil) in [("not stamped", 0x40u64), ("hardware-owned", 0u64)] {
        let mut r = b2b();
        let (_, cq0) = setup(&mut r, 0);
        setup(&mut r, 1);
        let b = qp0_up(&mut r, 0);
        r.init_port(0);
        r.init_port(1);
        post_qp0_recv(&mut r, 0, &b, 0);
        // Slot 3, two past the next free one: a chunk left as a WQE wrote it, or an owner
        // bit of 0 (hardware-owned in pass 0).
        r.put32(0, b.sq + 3 * SQ_STRIDE + spoil, 0x0000_000a);
        post_mlx(&mut r, 0, &b, 0, GOOD_FLAGS, 0xffff, &h, &smp);
        assert_eq!(
            cqe(&r, 0, cq0, 0)[31] & 0x1f,
            0x0a,
            "the SMP was sent ({what})"
        );
        let v = r.violations(0);
        assert!(
            v.len() == 1 && v[0].contains("SQ slot 3") && v[0].contains(what),
            "{what}: {v:#?}"
        );
    }
}
