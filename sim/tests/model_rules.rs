//! Contract rules that are easy to break: each test breaks one and checks the answer and the
//! recorded violation (§2.2, §4, §5, §7).

mod harness;
use harness::*;

const UAR: u32 = 9;

fn pair() -> (Rig, Vec<QpBufs>, Vec<u64>) {
    let mut r = Rig::new(2, true);
    let mut qps = Vec::new();
    let mut cqs = Vec::new();
    for i in 0..2 {
        r.bring_up(i);
        r.create_eq(i, 8, 6, 0);
        assert_eq!(
            r.cmd(i, 0x012, 0, (1 << 0x09) | (1 << 0x04) | (1 << 0x0a), 8, 0),
            0
        );
        r.init_port(i);
        cqs.push(r.create_cq(i, 128, 6, UAR, 8).0);
        qps.push(r.qp_to_rts(i, 70, 3, 128, UAR, 1, 0x4242, 0, 0));
    }
    (r, qps, cqs)
}

fn ud_send(r: &mut Rig, qp: &QpBufs, slot: u64, dlid: u16, qkey: u32) {
    let w = qp.sq + slot * 64;
    r.put32(0, w + 4, 4);
    r.put32(0, w + 8, 3 << 2);
    r.put32(0, w + 16, (1 << 24) | 1);
    r.write(0, w + 16 + 6, &dlid.to_be_bytes());
    r.put32(0, w + 16 + 0x20, 70);
    r.put32(0, w + 16 + 0x24, qkey);
    let owner = if slot & 16 != 0 { 1 << 31 } else { 0 };
    r.put32(0, w, owner | 0x0a);
    let h = r.hca(0);
    r.m.mmio_write(h, 2, u64::from(UAR) * 4096 + 0x14, 4, be32(70 << 8));
}

fn post_recv(r: &mut Rig, qp: &QpBufs, n: u32, buf: u64, len: u32) {
    let w = qp.rq + u64::from(n % 16) * 64;
    r.put32(1, w, len);
    r.put32(1, w + 4, 0x200);
    r.put64(1, w + 8, buf);
    r.put32(1, w + 20, 0x100);
    r.put32(1, qp.db, n + 1);
}

#[test]
fn qkey_with_bit_31_uses_the_qps_own_qkey() {
    let (mut r, qps, cqs) = pair();
    let rb = r.alloc(1, 64, 64);
    post_recv(&mut r, &qps[1], 0, rb, 64);
    ud_send(
        &mut r,
        &qps[0],
        0,
        sim::Fabric::sm_lid_for(1, 1),
        0x8000_0000,
    );
    assert_eq!(
        r.read(1, cqs[1], 32)[31],
        0x01,
        "delivered with the sender QP's Q_Key 0x4242"
    );
    r.assert_clean(0);
    r.assert_clean(1);
}

#[test]
fn ud_receive_buffer_too_small_is_a_local_length_error() {
    let (mut r, qps, cqs) = pair();
    let rb = r.alloc(1, 64, 64);
    post_recv(&mut r, &qps[1], 0, rb, 39); // less than the 40-byte GRH area
    ud_send(&mut r, &qps[0], 0, sim::Fabric::sm_lid_for(1, 1), 0x4242);
    let c = r.read(1, cqs[1], 32);
    assert_eq!(c[31], 0x1e);
    assert_eq!(c[0x1b], 0x01, "local length");
    assert!(r.violations(1).iter().any(|v| v.contains("GRH")));
}

#[test]
fn pkey_mismatch_drops_and_counts() {
    let (mut r, qps, cqs) = pair();
    // Node 1 replaces P_Key 0 with a limited member of another partition via Set(P_KeyTable).
    let mb = r.mailbox(1);
    let out = r.mailbox(1);
    r.write(1, mb, &[1, 1, 1, 2]);
    r.write(1, mb + 0x10, &[0, 0x16]);
    r.write(1, mb + 0x40, &[0x00, 0x05]);
    assert_eq!(r.cmd(1, 0x024, 3, mb, 1, out), 0);
    let rb = r.alloc(1, 64, 64);
    post_recv(&mut r, &qps[1], 0, rb, 64);
    ud_send(&mut r, &qps[0], 0, sim::Fabric::sm_lid_for(1, 1), 0x4242);
    assert_eq!(r.read(1, cqs[1], 32), vec![0xcc; 32], "dropped");
    // PortInfo bad P_Key counter (offset 46).
    r.write(1, mb, &[1, 1, 1, 1]);
    r.write(1, mb + 0x10, &[0, 0x15]);
    assert_eq!(r.cmd(1, 0x024, 3, mb, 1, out), 0);
    assert_eq!(
        u16::from_be_bytes(r.read(1, out + 0x40 + 46, 2).try_into().unwrap()),
        1
    );
}

#[test]
fn teardown_order_violations_are_recorded() {
    let (mut r, qps, _) = pair();
    let _ = qps;
    // HW2SW_CQ while a QP (not in RESET) still completes to it.
    assert_eq!(r.cmd(0, 0x017, 1, 0, 128, 0), 0);
    assert!(r
        .violations(0)
        .iter()
        .any(|v| v.contains("still complete to it")));
    // UNMAP_ICM of the page holding QP 70's context.
    let va = QPC_BASE + (70 * 256 / 4096) * 4096;
    assert_eq!(r.cmd(0, 0xff9, 0, va, 1, 0), 0);
    assert!(r.violations(0).iter().any(|v| v.contains("live QP 0x46")));
    // CLOSE_HCA with the EQ and QP still in hardware ownership.
    assert_eq!(r.cmd(0, 0x008, 0, 0, 0, 0), 0);
    assert!(r
        .violations(0)
        .iter()
        .any(|v| v.contains("CLOSE_HCA with objects")));
}

#[test]
fn doorbells_on_the_wrong_uar_or_offset_are_recorded() {
    let (mut r, _, _) = pair();
    let h = r.hca(0);
    // CQ 128 lives on UAR 9; arm it through UAR 10.
    r.m.mmio_write(
        h,
        2,
        10 * 4096 + 0x20,
        8,
        u64::from_le_bytes({
            let mut b = [0u8; 8];
            b[..4].copy_from_slice(&((1u32 << 28) | (2 << 24) | 128).to_be_bytes());
            b
        }),
    );
    // Send doorbell for QP 70 on UAR 10.
    r.m.mmio_write(h, 2, 10 * 4096 + 0x14, 4, be32(70 << 8));
    // A write where no doorbell exists, and a read of the write-only area.
    r.m.mmio_write(h, 2, 9 * 4096 + 0x40, 4, 0);
    r.m.mmio_read(h, 2, 0x14, 4);
    // One BlueFlame store that no other follows: not a violation (write-combining may flush
    // part of a burst), but the device gives up on it and records that.
    r.m.mmio_write(h, 2, (4 << 20) + 9 * 4096 + 8, 8, 0);
    r.m.fabric()
        .advance(std::time::Duration::from_nanos(sim::uar::BF_STALE_NS));
    // A BlueFlame store crossing the end of its half.
    r.m.mmio_write(h, 2, (4 << 20) + 9 * 4096 + 252, 8, 0);
    let v = r.violations(0);
    assert_eq!(v.len(), 5, "{v:#?}");
    assert!(v[0].contains("names UAR 9"));
    assert!(v[1].contains("its context names UAR 9"));
    assert!(v[2].contains("no doorbell there"));
    assert!(v[3].contains("write-only"));
    assert!(v[4].contains("crosses the end of its half"));
    let o = r.m.observations(h);
    assert_eq!(o.len(), 1, "{o:#?}");
    assert!(o[0].contains("half 0x0 incomplete (8 bytes"), "{o:#?}");
}

#[test]
fn msix_vector_beyond_the_table_is_recorded() {
    let p = sim::DeviceProfile {
        msix_vectors: 4,
        ..harness::reduced()
    };
    let mut r = Rig::with(
        1,
        sim::FabricConfig {
            manual_clock: true,
            ..Default::default()
        },
        p,
    );
    r.bring_up(0);
    r.create_eq(0, 8, 4, 9); // interrupt index 9 of a 4-entry table
    assert_eq!(r.cmd(0, 0x012, 0, 1 << 0x0a, 8, 0), 0);
    let h = r.hca(0);
    r.m.cfg_write(h, 0x9e, 2, 0x8000);
    r.cmd_full(0, 0x031, 0, 0, 0x1f, 0, true);
    assert!(r
        .violations(0)
        .iter()
        .any(|v| v.contains("beyond the MSI-X table")));
    assert!(r.nodes[0].irq.drain().is_empty());
}

#[test]
fn always_armed_eq_interrupts_on_every_eqe() {
    let mut r = Rig::new(1, true);
    r.bring_up(0);
    let buf = r.alloc(0, 4096, 4096);
    let mtt = r.write_mtts(0, &[buf]);
    let mb = r.mailbox(0);
    r.put32(0, mb, 0xb00);
    r.write(0, mb + 0x0c, &[4]);
    r.put32(0, mb + 0x1c, (mtt * 8) as u32);
    assert_eq!(r.cmd(0, 0x013, 0, mb, 8, 0), 0);
    assert_eq!(r.cmd(0, 0x012, 0, 1 << 0x0a, 8, 0), 0);
    let h = r.hca(0);
    r.m.cfg_write(h, 0x9e, 2, 0x8000);
    r.m.mmio_write(h, 0, 0x7c00c, 4, 0);
    r.nodes[0].irq.drain();
    for _ in 0..3 {
        r.cmd_full(0, 0x031, 0, 0, 0x1f, 0, true);
    }
    assert_eq!(
        r.nodes[0].irq.drain().len(),
        3,
        "one MSI-X message per EQE without re-arming"
    );
    r.assert_clean(0);
}
