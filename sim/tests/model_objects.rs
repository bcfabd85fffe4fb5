//! Per-command good/bad input for EQ, CQ, MPT, MTT, port and special-QP commands, and the
//! interrupt machinery (§2.3, §4, §6, §8), driven by hand.

mod harness;
use harness::*;
use sim::inproc::IrqEvent;

const UAR: u32 = 9;

fn node() -> Rig {
    let mut r = Rig::new(1, true);
    r.bring_up(0);
    r
}

#[test]
fn mpt_and_mtt_commands() {
    let mut r = node();
    let buf = r.alloc(0, 8192, 4096);
    let key = r.create_mr(0, 20, 0x33, 5, buf, 8192, 1 << 11, false);
    assert_eq!(key, (20 << 8) | 0x33);
    let out = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x00e, 0, 0, 20, out), 0, "QUERY_MPT");
    assert_eq!(
        r.get32(0, out + 8),
        (0x33 << 24) | 20,
        "key in hardware order"
    );
    assert_eq!(r.get32(0, out + 0x0c), 5, "PD");
    assert_eq!(r.get32(0, out) >> 28, 0, "hardware owned");
    let mb = r.mailbox(0);
    r.put32(0, mb, 1 << 8);
    r.put32(0, mb + 8, 20);
    assert_eq!(
        r.cmd(0, 0x00d, 0, mb, 20, 0),
        0x09,
        "already in hardware ownership"
    );
    assert_eq!(r.cmd(0, 0x00d, 0, mb, 3, 0), 0x05, "reserved MPT");
    assert_eq!(
        r.cmd(0, 0x00d, 0, mb, 1 << 9, 0),
        0x0a,
        "beyond the dMPT table"
    );
    r.put32(0, mb + 8, 21);
    assert_eq!(
        r.cmd(0, 0x00d, 0, mb, 22, 0),
        0x03,
        "key field names another index"
    );
    r.put32(0, mb, 0);
    r.put32(0, mb + 8, 22);
    assert_eq!(
        r.cmd(0, 0x00d, 0, mb, 22, 0),
        0x03,
        "memory window (REGION clear)"
    );
    assert_eq!(r.cmd(0, 0x00f, 0, 0, 20, out), 0, "HW2SW_MPT with output");
    assert_eq!(r.get32(0, out + 0x0c), 5);
    assert_eq!(r.cmd(0, 0x00e, 0, 0, 20, out), 0x09, "gone");
    assert_eq!(r.cmd(0, 0x00f, 1, 0, 20, 0), 0x09);
    // WRITE_MTT: entries need the present bit; 1..=510 entries.
    r.put64(0, mb, 100 * 8);
    r.put64(0, mb + 16, 0x1000);
    assert_eq!(r.cmd(0, 0x011, 0, mb, 1, 0), 0x03, "no present bit");
    assert_eq!(r.cmd(0, 0x011, 0, mb, 0, 0), 0x03, "no entries");
    r.put64(0, mb, 100 * 8 + 4);
    r.put64(0, mb + 16, 0x1001);
    assert_eq!(
        r.cmd(0, 0x011, 0, mb, 1, 0),
        0x03,
        "start not a multiple of 8"
    );
    assert_eq!(r.violations(0).len(), 10, "one per refused command");
}

#[test]
fn eq_commands_and_map_eq() {
    let mut r = node();
    let mb = r.mailbox(0);
    r.put32(0, mb, 0x900);
    assert_eq!(r.cmd(0, 0x013, 0, mb, 2, 0), 0x05, "reserved EQN");
    assert_eq!(r.cmd(0, 0x013, 0, mb, 64, 0), 0x0a, "beyond the EQC table");
    r.put32(0, mb, 0x500);
    assert_eq!(r.cmd(0, 0x013, 0, mb, 8, 0), 0x03, "bad state");
    assert_eq!(
        r.cmd(0, 0x012, 0, 1 << 9, 8, 0),
        0x09,
        "MAP_EQ to a missing EQ"
    );
    r.create_eq(0, 8, 4, 0);
    assert_eq!(
        r.cmd(0, 0x012, 0, 1 << 9, 8 | (1 << 20), 0),
        0x03,
        "stray in_mod bits"
    );
    assert_eq!(r.cmd(0, 0x012, 0, 1 << 9, 8, 0), 0);
    let out = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x015, 0, 0, 8, out), 0, "QUERY_EQ");
    assert_eq!((r.get32(0, out) >> 8) & 0xf, 0x9, "armed");
    assert_eq!(r.read(0, out + 0x0c, 1)[0], 4, "log size");
    let before = r.violations(0).len();
    assert_eq!(r.cmd(0, 0x014, 1, 0, 8, 0), 0, "HW2SW_EQ");
    let v = r.violations(0);
    assert!(v[before].contains("still mapped"), "{v:#?}");
    assert_eq!(r.cmd(0, 0x014, 1, 0, 8, 0), 0x09);
}

#[test]
fn eq_overflow_is_caught() {
    let mut r = node();
    r.create_eq(0, 8, 1, 0); // 2 entries
    assert_eq!(r.cmd(0, 0x012, 0, 1 << 0x0a, 8, 0), 0);
    for _ in 0..3 {
        let (st, _) = r.cmd_full(0, 0x031, 0, 0, 0x1f, 0, true);
        assert_eq!(st, 0);
    }
    let v = r.violations(0);
    assert!(v.iter().any(|x| x.contains("EQ 8 overflow")), "{v:#?}");
}

#[test]
fn msix_masks_pba_and_intx_disable() {
    let mut r = node();
    let h = r.hca(0);
    r.create_eq(0, 8, 4, 3);
    assert_eq!(r.cmd(0, 0x012, 0, 1 << 0x0a, 8, 0), 0);
    // MSI-X on, vector 3 programmed but still masked (reset value).
    r.m.cfg_write(h, 0x9e, 2, 0x8000);
    r.m.mmio_write(h, 0, 0x7c030, 8, 0xfee0_1000);
    r.m.mmio_write(h, 0, 0x7c038, 4, 0x63);
    r.cmd_full(0, 0x031, 0, 0, 0x1f, 0, true);
    assert!(
        r.nodes[0].irq.drain().is_empty(),
        "masked vector sends nothing"
    );
    assert_eq!(
        r.m.mmio_read(h, 0, 0x7d000, 8) & (1 << 3),
        1 << 3,
        "pending bit in the PBA"
    );
    r.m.mmio_write(h, 0, 0x7c03c, 4, 0);
    assert_eq!(
        r.nodes[0].irq.drain(),
        vec![IrqEvent::Msi {
            address: 0xfee0_1000,
            data: 0x63
        }],
        "delivered on unmask"
    );
    assert_eq!(r.m.mmio_read(h, 0, 0x7d000, 8) & (1 << 3), 0);
    // Function mask holds messages too.
    r.m.cfg_write(h, 0x9e, 2, 0xc000);
    r.m.mmio_write(h, 2, 2 * 4096 + 0x800, 4, be32(1 | (1 << 31)));
    r.cmd_full(0, 0x031, 0, 0, 0x1f, 0, true);
    assert!(r.nodes[0].irq.drain().is_empty());
    r.m.cfg_write(h, 0x9e, 2, 0x8000);
    assert_eq!(r.nodes[0].irq.drain().len(), 1);
    // INTx with INTx disable: pending shows in status, INTA# stays low until enabled.
    r.m.cfg_write(h, 0x9e, 2, 0);
    let cmd = r.m.cfg_read(h, 4, 2);
    r.m.cfg_write(h, 4, 2, cmd | (1 << 10));
    r.m.mmio_write(h, 2, 2 * 4096 + 0x800, 4, be32(2 | (1 << 31)));
    r.cmd_full(0, 0x031, 0, 0, 0x1f, 0, true);
    assert!(!r.nodes[0].irq.intx_level());
    assert_ne!(r.m.cfg_read(h, 6, 2) & 8, 0, "interrupt status set");
    r.m.cfg_write(h, 4, 2, cmd);
    assert!(r.nodes[0].irq.intx_level(), "asserted once INTx is enabled");
    r.assert_clean(0);
}

#[test]
fn cq_arm_comp_events_and_overrun() {
    let mut r = node();
    let eq = r.create_eq(0, 8, 5, 0);
    assert_eq!(r.cmd(0, 0x012, 0, (1 << 0x04) | (1 << 0x0a), 8, 0), 0);
    let (cq, db) = r.create_cq(0, 130, 1, UAR, 8); // 2 CQEs
    let qp = r.qp_to_rts(0, 90, 3, 130, UAR, 1, 0x42, 0, 0);
    let h = r.hca(0);
    let lid = sim::Fabric::sm_lid_for(0, 1);
    r.init_port(0);
    let eqe = |r: &Rig, n: u64| r.read(0, eq + n * 32, 32);
    // PORT_CHANGE is not mapped to the EQ here, so INIT_PORT left it empty.
    assert_eq!(eqe(&r, 0)[31], 0x80, "EQ still empty");
    // Arm (sn 1, next) with a 64-bit write, the arm word in the doorbell record first, then
    // loop back one UD send to ourselves.
    r.put32(0, db + 4, (1 << 28) | (2 << 24));
    r.m.mmio_write(
        h,
        2,
        u64::from(UAR) * 4096 + 0x20,
        8,
        u64::from_le_bytes({
            let mut b = [0u8; 8];
            b[..4].copy_from_slice(&((1u32 << 28) | (2 << 24) | 130).to_be_bytes());
            b
        }),
    );
    let send = |r: &mut Rig, slot: u64, sig: bool| {
        let w = qp.sq + slot * 64;
        r.put32(0, w + 4, 4);
        r.put32(0, w + 8, if sig { 3 << 2 } else { 0 });
        r.put32(0, w + 16, (1 << 24) | 1);
        r.write(0, w + 16 + 6, &lid.to_be_bytes());
        r.put32(0, w + 16 + 0x20, 90);
        r.put32(0, w + 16 + 0x24, 0x42);
        r.put32(0, w, 0x0a);
        r.m.mmio_write(h, 2, u64::from(UAR) * 4096 + 0x14, 4, be32(90 << 8));
    };
    send(&mut r, 0, true);
    let c = r.read(0, cq, 32);
    assert_eq!(
        c[31],
        0x40 | 0x0a,
        "send CQE (the receive is dropped: no RQ WQE)"
    );
    let e = eqe(&r, 0);
    assert_eq!(e[1], 0x00, "COMP event");
    assert_eq!(u32::from_be_bytes(e[4..8].try_into().unwrap()), 130);
    assert!(r.nodes[0].irq.intx_level());
    // Not re-armed: the next completion raises no event.
    r.m.mmio_write(h, 0, 0x80704, 4, be32(1 << 2));
    r.m.mmio_write(h, 2, 2 * 4096 + 0x800, 4, be32(1 | (1 << 31)));
    send(&mut r, 1, true);
    assert_eq!(
        r.read(0, cq + 32, 32)[31],
        0x40 | 0x0a,
        "second CQE: index 1 of a 2-entry CQ, pass 0 owner"
    );
    assert_eq!(eqe(&r, 1)[31], 0x80, "no second COMP event");
    // Arm with a consumer index behind the producer: fires at once (two 32-bit writes).
    r.arm_cq(0, UAR, 130, db, 2, 2, 1);
    assert_eq!(eqe(&r, 1)[1], 0x00, "immediate COMP event");
    assert_eq!(r.violations(0), Vec::<String>::new());
    // Overrun: doorbell record consumer still 0, two CQEs used, a third completion.
    r.put32(0, db, 0);
    send(&mut r, 2, true);
    let e = eqe(&r, 2);
    assert_eq!(e[1], 0x04, "CQ_ERROR");
    assert_eq!(e[0x0f], 1, "overrun syndrome");
    assert!(r.violations(0).iter().any(|v| v.contains("overrun")));
}

#[test]
fn qp_flush_on_2err_and_rts2rts_optpar() {
    let mut r = node();
    r.create_eq(0, 8, 5, 0);
    let (cq, _) = r.create_cq(0, 130, 4, UAR, 8);
    let qp = r.qp_to_rts(0, 90, 3, 130, UAR, 1, 0x42, 0, 0);
    // RTS2RTS changing the Q_Key with optpar bit 5; a zeroed path must not be taken.
    let mb = qp.mb;
    r.write(0, mb, &[0u8; 256]);
    r.put32(0, mb, 1 << 5);
    r.put32(0, mb + 8, (3 << 28) | (3 << 16));
    r.put32(0, mb + 8 + 0xa8, 0x77);
    assert_eq!(r.cmd(0, 0x01c, 0, mb, 90, 0), 0, "RTS2RTS");
    let out = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x022, 0, 0, 90, out), 0);
    assert_eq!(r.get32(0, out + 8 + 0xa8), 0x77, "Q_Key changed");
    assert_eq!(r.read(0, out + 8 + 0x18 + 0x20, 1)[0], 0x83, "path kept");
    r.put32(0, mb, 1 << 30);
    assert_eq!(r.cmd(0, 0x01c, 0, mb, 90, 0), 0x03, "unknown optpar bit");
    // Two receives posted, then 2ERR: both flushed with syndrome 5.
    for k in 0..2u64 {
        r.put32(0, qp.rq + k * 64, 64);
        r.put32(0, qp.rq + k * 64 + 4, 0x200);
        r.put64(0, qp.rq + k * 64 + 8, qp.buf + 3072);
        r.put32(0, qp.rq + k * 64 + 20, 0x100);
    }
    r.put32(0, qp.db, 2);
    r.put32(0, mb, 0);
    r.put32(0, mb + 8, 6 << 28);
    assert_eq!(r.cmd(0, 0x01e, 0, mb, 90, 0), 0, "2ERR");
    for k in 0..2u64 {
        let c = r.read(0, cq + k * 32, 32);
        assert_eq!(c[31], 0x1e, "receive error CQE");
        assert_eq!(c[0x1b], 0x05, "WR flushed");
        assert_eq!(u16::from_be_bytes([c[0x18], c[0x19]]), k as u16);
    }
    assert_eq!(r.violations(0).len(), 1, "only the unknown optpar bit");
}

#[test]
fn ports_set_query_and_mad_ifc() {
    let mut r = Rig::new(1, false);
    r.bring_up(0);
    let eq = r.create_eq(0, 8, 5, 0);
    assert_eq!(r.cmd(0, 0x012, 0, 1 << 0x09, 8, 0), 0);
    let mb = r.mailbox(0);
    let out = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x043, 0, 0, 1, out), 0, "QUERY_PORT");
    assert_eq!(r.read(0, out, 1)[0] & 0x80, 0, "link down before INIT_PORT");
    assert_eq!(r.cmd(0, 0x043, 0, 0, 2, out), 0x03, "no port 2");
    // SET_PORT: VL cap probing (a number of VLs: 15 exceeds, 8 fits), MTU cap.
    r.put32(0, mb, (1 << 21) | (1 << 22) | (5 << 12) | (15 << 4));
    assert_eq!(r.cmd(0, 0x00c, 0, mb, 1, 0), 0x08);
    r.put32(0, mb, (1 << 21) | (1 << 22) | (5 << 12) | (8 << 4));
    assert_eq!(r.cmd(0, 0x00c, 0, mb, 1, 0), 0);
    r.put32(0, mb, (1 << 22) | (6 << 12));
    assert_eq!(r.cmd(0, 0x00c, 0, mb, 1, 0), 0x03);
    assert_eq!(r.cmd(0, 0x00c, 1, mb, 1, 0), 0x02, "Ethernet SET_PORT");
    r.init_port(0);
    assert_eq!(r.cmd(0, 0x043, 0, 0, 1, out), 0);
    assert_eq!(r.read(0, out, 1)[0] & 0x80, 0x80, "link up");
    // MAD_IFC Gets.
    let mad = |r: &mut Rig, method: u8, attr: u16, amod: u32, data: &[u8]| -> (u8, Vec<u8>) {
        r.write(0, mb, &[0u8; 256]);
        r.write(0, mb, &[1, 1, 1, method]);
        r.write(0, mb + 0x10, &attr.to_be_bytes());
        r.put32(0, mb + 0x14, amod);
        r.write(0, mb + 0x40, data);
        let st = r.cmd(0, 0x024, 3, mb, 1, out);
        (st, r.read(0, out, 256))
    };
    let (st, m) = mad(&mut r, 1, 0x11, 0, &[]);
    assert_eq!(st, 0);
    assert_eq!(m[3], 0x81, "GetResp");
    assert_eq!(u16::from_be_bytes([m[4], m[5]]), 0, "MAD status OK");
    assert_eq!(
        &m[0x40 + 12..0x40 + 20],
        &0x0002_c903_0000_0100u64.to_be_bytes(),
        "node GUID"
    );
    assert_eq!(m[0x40 + 2], 1, "channel adapter");
    let (_, m) = mad(&mut r, 1, 0x10, 0, &[]);
    assert!(m[0x40..].starts_with(b"ibkern-sim"));
    let (_, m) = mad(&mut r, 1, 0x16, 0, &[]);
    assert_eq!(&m[0x40..0x42], &[0xff, 0xff], "P_Key 0 = 0xFFFF");
    let (_, m) = mad(&mut r, 1, 0x14, 0, &[]);
    assert_eq!(
        &m[0x40..0x48],
        &0x0002_c903_0000_0101u64.to_be_bytes(),
        "GUID 0 = port GUID"
    );
    let (_, m) = mad(&mut r, 1, 0x99, 0, &[]);
    assert_eq!(
        u16::from_be_bytes([m[4], m[5]]),
        0x000c,
        "unsupported attribute"
    );
    r.write(0, mb, &[2]);
    assert_eq!(r.cmd(0, 0x024, 3, mb, 1, out), 0x30, "base version 2");
    // SM off: the port is INIT; a small SM configures it through Set(PortInfo).
    let (_, m) = mad(&mut r, 1, 0x15, 1, &[]);
    assert_eq!(m[0x40 + 32] & 0xf, 2, "INIT");
    let mut pi = [0u8; 64];
    pi[16..18].copy_from_slice(&0x55u16.to_be_bytes());
    pi[18..20].copy_from_slice(&0x55u16.to_be_bytes());
    pi[32] = 4;
    let (_, m) = mad(&mut r, 2, 0x15, 1, &pi);
    assert_eq!(
        u16::from_be_bytes([m[4], m[5]]),
        0x001c,
        "INIT -> ACTIVE directly is invalid"
    );
    pi[32] = 3;
    let (_, m) = mad(&mut r, 2, 0x15, 1, &pi);
    assert_eq!(u16::from_be_bytes([m[4], m[5]]), 0);
    assert_eq!(m[0x40 + 32] & 0xf, 3, "ARMED");
    pi[32] = 4;
    let (_, m) = mad(&mut r, 2, 0x15, 1, &pi);
    assert_eq!(m[0x40 + 32] & 0xf, 4, "ACTIVE");
    assert_eq!(
        u16::from_be_bytes([m[0x40 + 16], m[0x40 + 17]]),
        0x55,
        "LID"
    );
    let e = r.read(0, eq, 32);
    assert_eq!((e[1], e[3]), (0x09, 4), "PORT_CHANGE ACTIVE");
    assert_eq!(e[0x0c] >> 4, 1, "port 1");
    // Only the four deliberately bad commands were recorded (no port 2, MTU cap 6,
    // Ethernet SET_PORT, MAD base version 2); the VL probing is not a violation.
    assert_eq!(r.violations(0).len(), 4, "{:#?}", r.violations(0));
}

#[test]
fn conf_special_qp_and_mlx_service_type() {
    let mut r = node();
    r.create_eq(0, 8, 5, 0);
    r.create_cq(0, 130, 4, UAR, 8);
    assert_eq!(r.cmd(0, 0x023, 0, 0, 129, 0), 0x03, "not 8-aligned");
    assert_eq!(r.cmd(0, 0x023, 0, 0, 8, 0), 0x03, "inside the reserved QPs");
    assert_eq!(
        r.cmd(0, 0x023, 0, 0, (1 << 24) | 128, 0),
        0x03,
        "mthca-style type bits"
    );
    let mb = r.mailbox(0);
    r.put32(0, mb + 8, (1 << 28) | (7 << 16));
    r.put32(0, mb + 8 + 0x10, 100);
    assert_eq!(
        r.cmd(0, 0x019, 0, mb, 100, 0),
        0x03,
        "MLX outside the special block"
    );
    assert_eq!(r.cmd(0, 0x023, 0, 0, 128, 0), 0);
    let db = r.alloc(0, 4, 4);
    let buf = r.alloc(0, 4096, 4096);
    let mtt = r.write_mtts(0, &[buf]);
    r.write(0, mb + 8 + 0x08, &[0xab, (4 << 3) | 2, (4 << 3) | 2, 0x10]);
    r.put32(0, mb + 8 + 0x0c, UAR);
    r.put32(0, mb + 8 + 0x10, 130);
    r.put32(0, mb + 8 + 0x7c, 130);
    r.put32(0, mb + 8 + 0x9c, 130);
    r.put64(0, mb + 8 + 0xa0, db);
    r.put32(0, mb + 8 + 0xcc, (mtt * 8) as u32);
    assert_eq!(r.cmd(0, 0x019, 0, mb, 130, 0), 0, "QP1 of port 1 as MLX");
}

#[test]
fn pci_reset_releases_ownership_and_forgets_everything() {
    let mut r = node();
    let h = r.hca(0);
    assert_eq!(r.m.mmio_read(h, 0, 0x8069c, 4), 0);
    r.m.fabric().pci_reset(h);
    r.m.setup_pci(h);
    assert_eq!(r.m.mmio_read(h, 0, 0x8069c, 4), 0, "claimable again");
    let mb = r.mailbox(0);
    assert_eq!(
        r.cmd(0, 0x003, 0, 0, 0, mb),
        0x04,
        "firmware no longer running"
    );
}

#[test]
fn contexts_live_in_icm_and_direct_mtt_writes_work() {
    let mut r = node();
    // An EQ whose buffer is described by MTT entries written straight into ICM (Linux style).
    let buf = r.alloc(0, 4096, 4096);
    let mtt = r.write_mtts_direct(0, &[buf]);
    let mb = r.mailbox(0);
    r.put32(0, mb, 0x900);
    r.write(0, mb + 0x0c, &[4]);
    r.put32(0, mb + 0x1c, (mtt * 8) as u32);
    assert_eq!(r.cmd(0, 0x013, 0, mb, 9, 0), 0, "SW2HW_EQ");
    assert_eq!(
        r.read(0, buf + 31, 1)[0],
        0x80,
        "the device found the buffer through ICM MTTs"
    );
    // The EQ context now sits in the EQC entry of ICM.
    let at = r.icm_host(0, EQC_BASE + 9 * 64);
    assert_eq!(r.read(0, at, 64), r.read(0, mb, 64), "EQC image in ICM");
    // A QP context likewise (QPC entry = context without the optpar header).
    r.create_eq(0, 8, 4, 0);
    r.create_cq(0, 130, 4, UAR, 8);
    let qp = r.qp_to_rts(0, 90, 3, 130, UAR, 1, 0x5151, 0, 0);
    let at = r.icm_host(0, QPC_BASE + 90 * 256);
    assert_eq!(r.get32(0, at + 0xa8), 0x5151, "Q_Key in the ICM QPC");
    assert_eq!(r.get32(0, at) >> 28, 3, "ICM image of the QP in RTS");
    let _ = qp;
    // Breaking an MTT entry in ICM (clearing the present bit) is caught on next use.
    let mtt_at = r.icm_host(0, MTT_BASE + mtt * 8);
    r.put64(0, mtt_at, buf);
    assert_eq!(r.cmd(0, 0x012, 0, 1 << 0x0a, 9, 0), 0);
    let (st, _) = r.cmd_full(0, 0x031, 0, 0, 0x1f, 0, true);
    assert_eq!(st, 0);
    assert!(
        r.violations(0).iter().any(|v| v.contains("present bit")),
        "{:#?}",
        r.violations(0)
    );
}

/// PortInfo through MAD_IFC Get (op_mod 3); returns the 64 bytes of SMP data.
fn port_info(r: &mut Rig) -> Vec<u8> {
    let mb = r.mailbox(0);
    let out = r.mailbox(0);
    r.write(0, mb, &[0u8; 256]);
    r.write(0, mb, &[1, 1, 1, 1]);
    r.write(0, mb + 0x10, &0x15u16.to_be_bytes());
    r.put32(0, mb + 0x14, 1);
    assert_eq!(r.cmd(0, 0x024, 3, mb, 1, out), 0, "PortInfo");
    r.read(0, out + 0x40, 64)
}

/// SET_PORT's caps are what the port advertises (QUERY_PORT, PortInfo MTUCap/VLCap, and
/// NeighborMTU never above the MTU cap) and accepts (a connected QP's path MTU, an SM's
/// NeighborMTU/OperationalVLs); an SM sets NeighborMTU and OperationalVLs within them.
#[test]
fn set_port_caps_govern_what_the_port_advertises_and_accepts() {
    let mut r = node();
    r.init_port(0);
    let pi = port_info(&mut r);
    assert_eq!(
        (pi[41] & 0xf, pi[36] >> 4, pi[37] >> 4),
        (5, 5, 4),
        "defaults"
    );
    // Linux's SET_PORT with MTU cap 2048 (4) and 4 VLs.
    let mb = r.mailbox(0);
    r.put32(0, mb, (1 << 22) | (1 << 21) | (4 << 12) | (4 << 4));
    assert_eq!(r.cmd(0, 0x00c, 0, mb, 1, 0), 0, "SET_PORT");
    let out = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x043, 0, 0, 1, out), 0, "QUERY_PORT");
    assert_eq!(r.read(0, out + 1, 1)[0] & 0xf, 4, "QUERY_PORT max MTU");
    assert_eq!(
        r.read(0, out + 0x0b, 1)[0] & 0xf,
        3,
        "QUERY_PORT max VL (VL0-3)"
    );
    let pi = port_info(&mut r);
    assert_eq!(pi[41] & 0xf, 4, "MTUCap");
    assert_eq!(pi[37] >> 4, 3, "VLCap");
    assert_eq!(pi[36] >> 4, 4, "NeighborMTU lowered with the cap");
    // An SM's Set(PortInfo): NeighborMTU 1024 and OperationalVLs VL0-1 are taken ...
    let set = |r: &mut Rig, b36: u8, b43: u8| -> u16 {
        let mut d = port_info(r);
        d[0..8].fill(0);
        d[32] &= 0xf0; // PortState: no change
        d[33] = 0;
        d[36] = (b36 << 4) | (d[36] & 0xf);
        d[43] = (b43 << 4) | (d[43] & 0xf);
        let mb = r.mailbox(0);
        let out = r.mailbox(0);
        r.write(0, mb, &[0u8; 256]);
        r.write(0, mb, &[1, 1, 1, 2]);
        r.write(0, mb + 0x10, &0x15u16.to_be_bytes());
        r.put32(0, mb + 0x14, 1);
        r.write(0, mb + 0x40, &d);
        assert_eq!(r.cmd(0, 0x024, 3, mb, 1, out), 0, "MAD_IFC Set");
        u16::from_be_bytes([r.read(0, out + 4, 1)[0], r.read(0, out + 5, 1)[0]]) & 0x7fff
    };
    assert_eq!(set(&mut r, 3, 2), 0, "within the caps");
    let pi = port_info(&mut r);
    assert_eq!((pi[36] >> 4, pi[43] >> 4), (3, 2));
    // ... values above the caps are invalid attribute values.
    assert_eq!(
        set(&mut r, 5, 0),
        0x1c,
        "NeighborMTU 4096 above the 2048 cap"
    );
    assert_eq!(set(&mut r, 0, 4), 0x1c, "OperationalVLs VL0-7 above VL0-3");
    // A connected QP's path MTU (the rig asks for 4096) must fit the cap.
    r.create_eq(0, 8, 5, 0);
    r.create_cq(0, 130, 4, UAR, 8);
    let b = r.qp_to_rts_bufs(0);
    let st = r.qp_modify_to_rts(0, 200, 0, 130, UAR, 1, 0, 5, 201, &b);
    assert_eq!(st[1], 0x03, "RC INIT2RTR with path MTU 4096 on a 2048 port");
    let v = r.violations(0);
    assert!(v.iter().any(|x| x.contains("MTU cap 4")), "{v:#?}");
}

/// MPT entries as Linux's mlx4_mr_enable writes them pass clean; MIO clear, RAE or mtt_sz on
/// an ordinary region are recorded (still taken); an MTT page above 2^31 is refused.
#[test]
fn mpt_fields_linux_sets_are_checked() {
    let mut r = node();
    let buf = r.alloc(0, 8192, 4096);
    r.create_mr(0, 20, 0, 5, buf, 8192, 1 << 11, false);
    r.assert_clean(0);
    let mb = r.mailbox(0);
    let mtt = r.write_mtts(0, &[buf]);
    let entry = |r: &mut Rig, index: u32, flags: u32, pd_flags: u32, mtt_sz: u32, shift: u32| {
        r.write(0, mb, &[0u8; 64]);
        r.put32(0, mb, (0xf << 28) | (1 << 8) | flags);
        r.put32(0, mb + 0x08, index);
        r.put32(0, mb + 0x0c, pd_flags);
        r.put64(0, mb + 0x10, buf);
        r.put64(0, mb + 0x18, 8192);
        r.put64(0, mb + 0x2c, mtt * 8);
        r.put32(0, mb + 0x34, mtt_sz);
        r.put32(0, mb + 0x38, shift);
        r.cmd(0, 0x00d, 0, mb, index, 0)
    };
    assert_eq!(entry(&mut r, 21, 0, 5, 0, 13), 0, "no MIO: taken");
    assert_eq!(
        entry(&mut r, 22, 1 << 17, 5 | (1 << 28), 0, 13),
        0,
        "RAE: taken"
    );
    assert_eq!(entry(&mut r, 23, 1 << 17, 5, 1, 13), 0, "mtt_sz: taken");
    assert_eq!(entry(&mut r, 24, 1 << 17, 5, 0, 32), 0x03, "4 GiB MTT page");
    let v = r.violations(0);
    assert_eq!(v.len(), 4, "{v:#?}");
    assert!(v[0].contains("MIO"), "{v:#?}");
    assert!(v[1].contains("RAE"), "{v:#?}");
    assert!(v[2].contains("mtt_sz"), "{v:#?}");
    assert!(v[3].contains("entity_size 32"), "{v:#?}");
}

/// One CQ with a loopback UD QP on node 0, its EQ's EQEs and a signalled UD send that
/// completes on the CQ: (rig, EQ buffer, CQ doorbell record, send).
fn armed_cq_rig() -> (Rig, u64, u64, impl Fn(&mut Rig, u64)) {
    let mut r = node();
    let eq = r.create_eq(0, 8, 5, 0);
    assert_eq!(r.cmd(0, 0x012, 0, (1 << 0x04) | (1 << 0x0a), 8, 0), 0);
    let (_cq, db) = r.create_cq(0, 130, 4, UAR, 8);
    let qp = r.qp_to_rts(0, 90, 3, 130, UAR, 1, 0x42, 0, 0);
    let h = r.hca(0);
    let lid = sim::Fabric::sm_lid_for(0, 1);
    r.init_port(0);
    let send = move |r: &mut Rig, slot: u64| {
        let w = qp.sq + slot * 64;
        r.put32(0, w + 4, 4);
        r.put32(0, w + 8, 3 << 2);
        r.put32(0, w + 16, (1 << 24) | 1);
        r.write(0, w + 16 + 6, &lid.to_be_bytes());
        r.put32(0, w + 16 + 0x20, 90);
        r.put32(0, w + 16 + 0x24, 0x42);
        r.put32(0, w, 0x0a);
        r.m.mmio_write(h, 2, u64::from(UAR) * 4096 + 0x14, 4, be32(90 << 8));
    };
    (r, eq, db, send)
}

fn comp_events(r: &Rig, eq: u64) -> usize {
    (0..32u64)
        .map(|n| r.read(0, eq + n * 32, 32))
        .filter(|e| e[31] & 0x80 == 0 && e[1] == 0x00)
        .count()
}

/// The arm doorbell must agree with the arm word the driver wrote into the CQ's doorbell
/// record before it (§4.2, as Linux's `mlx4_cq_arm` writes both): a record that says
/// otherwise is recorded. The arm itself still takes effect.
#[test]
fn a_cq_arm_without_its_doorbell_record_word_is_recorded() {
    let (mut r, eq, db, send) = armed_cq_rig();
    let h = r.hca(0);
    r.put32(0, db + 4, 0);
    let at = u64::from(UAR) * 4096 + 0x20;
    r.m.mmio_write(h, 2, at, 4, be32((1 << 28) | (2 << 24) | 130));
    r.m.mmio_write(h, 2, at + 4, 4, be32(0));
    let v = r.violations(0);
    assert!(
        v.len() == 1 && v[0].contains("arm word is 0x00000000 (expected 0x12000000"),
        "{v:#?}"
    );
    send(&mut r, 0);
    assert_eq!(comp_events(&r, eq), 1, "armed all the same");
}

/// After a completion event the next arm must carry the next sequence number (mod 4): an
/// arm repeating the one that fired is stale, recorded and ignored, as a card ignores it
/// (an event wait behind it would hang); the next one in sequence arms the CQ.
#[test]
fn a_cq_arm_with_a_stale_sequence_number_is_recorded_and_ignored() {
    let (mut r, eq, db, send) = armed_cq_rig();
    r.arm_cq(0, UAR, 130, db, 1, 2, 0);
    send(&mut r, 0);
    assert_eq!(comp_events(&r, eq), 1);
    r.put32(0, db, 1);
    r.assert_clean(0);
    r.arm_cq(0, UAR, 130, db, 1, 2, 1);
    let v = r.violations(0);
    assert!(
        v.len() == 1 && v[0].contains("sequence number 1") && v[0].contains("must carry 2"),
        "{v:#?}"
    );
    send(&mut r, 1);
    assert_eq!(comp_events(&r, eq), 1, "the stale arm armed nothing");
    r.put32(0, db, 2);
    r.arm_cq(0, UAR, 130, db, 2, 2, 2);
    send(&mut r, 2);
    assert_eq!(
        comp_events(&r, eq),
        2,
        "the next sequence number arms the CQ"
    );
    assert_eq!(r.violations(0).len(), 1);
}

/// SW2HW_SRQ of basic SRQ `srqn` (2^4 WQEs of 64 bytes, one 4 KiB page) in XRC domain `xrcd`
/// on node 0; returns the command status.
fn basic_srq(r: &mut Rig, srqn: u32, xrcd: u16) -> u8 {
    let buf = r.alloc(0, 4096, 4096);
    let db = r.alloc(0, 8, 8);
    let mtt = r.write_mtts(0, &[buf]);
    let mb = r.mailbox(0);
    r.write(0, mb, &[0u8; 64]);
    r.put32(0, mb, (4 << 24) | srqn);
    r.write(0, mb + 0x04, &[2]); // stride 2^(2+4) = 64 bytes
    r.write(0, mb + 0x06, &xrcd.to_be_bytes());
    r.put32(0, mb + 0x14, (mtt * 8) as u32);
    r.put32(0, mb + 0x18, 1);
    r.put64(0, mb + 0x28, db);
    r.cmd(0, 0x035, 0, mb, srqn, 0)
}

/// A basic SRQ belongs to the device's reserved XRC domain, as Linux's mlx4_ib gives it
/// (QUERY_DEV_CAP's reserved XRC domains on a device with XRC, else 0): another domain
/// would make an XRC SRQ, which the model does not implement, so it is refused and recorded.
#[test]
fn a_basic_srq_outside_the_reserved_xrc_domain_is_refused() {
    let mut p = harness::reduced();
    p.flags |= sim::profile::dev_cap_flags::XRC;
    p.rsvd_xrcds = 3;
    p.log_rsvd_srqs = 5; // SRQs 32..64 of the rig's table of 64 are free
    let mut r = Rig::with(1, sim::FabricConfig::default(), p);
    r.bring_up(0);
    assert_eq!(
        basic_srq(&mut r, 32, 0),
        0x03,
        "xrcd 0 on a device reserving 3"
    );
    let v = r.violations(0);
    assert!(
        v.len() == 1 && v[0].contains("XRC domain 0") && v[0].contains("reserved XRC domain 3"),
        "{v:#?}"
    );
    assert_eq!(basic_srq(&mut r, 33, 3), 0, "the reserved domain");
    assert_eq!(r.violations(0).len(), 1);
}

/// MTT ranges are placed as Linux's buddy allocator places them (§4.6): a range of n entries
/// at a multiple of 2^ceil(log2 n). An object whose range starts elsewhere is recorded (the
/// command still succeeds: the card reads any range).
#[test]
fn an_mtt_range_placed_off_linuxs_alignment_is_recorded() {
    let mut r = node();
    r.create_eq(0, 8, 5, 0);
    r.assert_clean(0);
    // A CQ of 2^8 32-byte CQEs (two 4 KiB pages) whose two MTT entries start at an odd index.
    let buf = r.alloc(0, 8192, 4096);
    let db = r.alloc(0, 8, 8);
    let first = r.alloc_mtt_range(0, 4) + 1;
    for k in 0..2u64 {
        let at = r.icm_host(0, MTT_BASE + (first + k) * 8);
        r.put64(0, at, (buf + k * 4096) | 1);
    }
    let mb = r.mailbox(0);
    r.write(0, mb, &[0u8; 64]);
    r.put32(0, mb + 0x0c, (8 << 24) | UAR);
    r.write(0, mb + 0x17, &[8]);
    r.put32(0, mb + 0x1c, (first * 8) as u32);
    r.put64(0, mb + 0x38, db);
    assert_eq!(r.cmd(0, 0x016, 0, mb, 130, 0), 0, "SW2HW_CQ");
    let v = r.violations(0);
    assert!(
        v.len() == 1
            && v[0].contains("SW2HW_CQ 0x82: MTT range of 2 entries")
            && v[0].contains("not a multiple of 2"),
        "{v:#?}"
    );
    // The same CQ at a multiple of 2 is clean.
    let good = r.write_mtts_direct(0, &[buf, buf + 4096]);
    r.put32(0, mb + 0x1c, (good * 8) as u32);
    assert_eq!(r.cmd(0, 0x016, 0, mb, 131, 0), 0, "SW2HW_CQ");
    assert_eq!(r.violations(0).len(), 1);
}
