//! EQs, CQs, interrupts and the UD/UC data path across the fabric, driven by hand (§4-§8).

mod harness;
use harness::*;
use sim::inproc::IrqEvent;

/// UAR used by the rig's CQs/QPs (above the 8 reserved UARs).
const UAR: u32 = 9;

fn uar_off(page: u32, o: u64) -> u64 {
    u64::from(page) * 4096 + o
}

fn setup_node(r: &mut Rig, i: usize) {
    r.bring_up(i);
    r.create_eq(i, 8, 6, 0);
    // MAP_EQ: CMD, PORT_CHANGE, CQ_ERROR to EQ 8.
    let mask = (1u64 << 0x0a) | (1 << 0x09) | (1 << 0x04);
    assert_eq!(r.cmd(i, 0x012, 0, mask, 8, 0), 0, "MAP_EQ");
}

#[test]
fn nop_with_event_writes_cmd_eqe_and_msix_fires() {
    let mut r = Rig::new(1, true);
    setup_node(&mut r, 0);
    let h = r.hca(0);
    // Enable MSI-X, program vector 0, unmask.
    r.m.cfg_write(h, 0x9e, 2, 0x8000);
    r.m.mmio_write(h, 0, 0x7c000, 4, 0xfee0_0000);
    r.m.mmio_write(h, 0, 0x7c008, 4, 0x41);
    r.m.mmio_write(h, 0, 0x7c00c, 4, 0);
    r.nodes[0].irq.drain();
    let eqbuf = 0; // unused
    let _ = eqbuf;
    let (st, _) = r.cmd_full(0, 0x031, 0, 0, 0x1f, 0, true);
    assert_eq!(st, 0);
    let ev = r.nodes[0].irq.drain();
    assert_eq!(
        ev,
        vec![IrqEvent::Msi {
            address: 0xfee0_0000,
            data: 0x41
        }]
    );
    r.assert_clean(0);
}

#[test]
fn eq_owner_init_eqe_format_and_intx_clear() {
    let mut r = Rig::new(1, true);
    r.bring_up(0);
    let buf = r.create_eq(0, 8, 6, 0);
    // §4.1: every EQE starts with the owner bit set.
    for k in 0..64 {
        assert_eq!(r.read(0, buf + k * 32 + 31, 1)[0] & 0x80, 0x80);
    }
    assert_eq!(r.cmd(0, 0x012, 0, 1 << 0x0a, 8, 0), 0);
    let h = r.hca(0);
    let (st, _) = r.cmd_full(0, 0x031, 0, 0, 0x1f, 0, true);
    assert_eq!(st, 0);
    let e = r.read(0, buf, 32);
    assert_eq!(e[1], 0x0a, "CMD event");
    assert_eq!(u16::from_be_bytes([e[6], e[7]]), 0x1234, "token");
    assert_eq!(e[0x0f], 0, "status");
    assert_eq!(e[31] & 0x80, 0, "pass 0 owner bit = 0");
    assert!(r.nodes[0].irq.intx_level(), "INTx asserted (MSI-X off)");
    assert_ne!(r.m.cfg_read(h, 6, 2) & 0x8, 0, "interrupt status bit");
    // §1.7: write BE32(1 << pin) at clr + 4 (pin 2 < 32).
    r.m.mmio_write(h, 0, 0x80704, 4, be32(1 << 2));
    assert!(!r.nodes[0].irq.intx_level());
    // EQ fired: no more interrupts until re-armed.
    r.cmd_full(0, 0x031, 0, 0, 0x1f, 0, true);
    assert!(!r.nodes[0].irq.intx_level(), "fired EQ stays quiet");
    // Consumer index 2 + arm: no pending EQEs beyond it, no interrupt.
    r.m.mmio_write(h, 2, uar_off(2, 0x800), 4, be32(2 | (1 << 31)));
    assert!(!r.nodes[0].irq.intx_level());
    r.cmd_full(0, 0x031, 0, 0, 0x1f, 0, true);
    assert!(r.nodes[0].irq.intx_level(), "re-armed EQ interrupts again");
    r.assert_clean(0);
    // Doorbell for an EQ that does not exist.
    r.m.mmio_write(h, 2, uar_off(2, 0x808), 4, be32(0));
    assert!(r.violations(0)[0].contains("EQ 9"));
}

#[test]
fn cq_owner_init_and_bad_contexts() {
    let mut r = Rig::new(1, true);
    setup_node(&mut r, 0);
    let (buf, _db) = r.create_cq(0, 128, 4, UAR, 8);
    assert_eq!(
        r.read(0, buf, 32),
        vec![0xcc; 32],
        "CQEs initialised to hardware ownership"
    );
    let mb = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x016, 0, mb, 5, 0), 0x05, "reserved CQN");
    assert_eq!(
        r.cmd(0, 0x016, 0, mb, 128, 0),
        0x09,
        "CQ already in HW ownership"
    );
    assert_eq!(r.cmd(0, 0x018, 0, 0, 128, mb), 0, "QUERY_CQ");
    assert_eq!(r.get32(0, mb + 0x0c) >> 24, 4);
    assert_eq!(r.cmd(0, 0x017, 1, 0, 128, 0), 0, "HW2SW_CQ");
    assert_eq!(r.cmd(0, 0x017, 1, 0, 128, 0), 0x09);
}

#[test]
fn qp_state_machine_checks() {
    let mut r = Rig::new(1, true);
    setup_node(&mut r, 0);
    r.create_cq(0, 128, 4, UAR, 8);
    let mb = r.mailbox(0);
    r.put32(0, mb + 8, 2 << 28);
    assert_eq!(r.cmd(0, 0x01a, 0, mb, 70, 0), 0x10, "INIT2RTR from RESET");
    assert_eq!(r.cmd(0, 0x019, 0, mb, 3, 0), 0x05, "reserved QPN");
    r.qp_to_rts(0, 70, 3, 128, UAR, 1, 0x1111, 0, 0);
    assert_eq!(r.cmd(0, 0x022, 0, 0, 70, mb), 0, "QUERY_QP");
    assert_eq!(r.get32(0, mb + 8) >> 28, 3, "RTS");
    assert_eq!(r.get32(0, mb + 8 + 0xa8), 0x1111, "Q_Key");
    assert_eq!(r.cmd(0, 0x021, 2, 0, 70, 0), 0, "2RST");
    assert_eq!(r.cmd(0, 0x022, 0, 0, 70, mb), 0);
    assert_eq!(r.get32(0, mb + 8) >> 28, 0, "RESET");
    // 2RST of a QP already in RESET: a card takes it, Linux never sends it (§4.4).
    let before = r.violations(0).len();
    assert_eq!(r.cmd(0, 0x021, 2, 0, 70, 0), 0, "2RST from RESET");
    let v = r.violations(0);
    assert!(
        v.len() == before + 1 && v[before].contains("2RST of QP 0x46, which is already in RESET"),
        "{v:#?}"
    );
    assert_eq!(r.cmd(0, 0x022, 0, 0, 70, mb), 0);
    assert_eq!(r.get32(0, mb + 8) >> 28, 0, "still RESET");
    let h = r.hca(0);
    let before = r.violations(0).len();
    r.m.mmio_write(h, 2, uar_off(UAR, 0x14), 4, be32(70 << 8));
    let v = r.violations(0);
    assert!(v[before..].iter().any(|x| x.contains("RESET")), "{v:#?}");
}

fn ud_pair(sm: bool) -> (Rig, Vec<QpBufs>, Vec<(u64, u64)>) {
    let mut r = Rig::new(2, sm);
    let mut bufs = Vec::new();
    let mut cqs = Vec::new();
    for i in 0..2 {
        setup_node(&mut r, i);
        r.init_port(i);
        cqs.push(r.create_cq(i, 128, 4, UAR, 8));
        bufs.push(r.qp_to_rts(i, 70, 3, 128, UAR, 1, 0x1111_1111, 0, 0));
    }
    (r, bufs, cqs)
}

/// Receiver: one RQ WQE with a 256-byte buffer under the reserved L_Key.
fn post_recv(r: &mut Rig, i: usize, b: &QpBufs) -> u64 {
    let rbuf = r.alloc(i, 256, 64);
    r.put32(i, b.rq, 256);
    r.put32(i, b.rq + 4, 0x200);
    r.put64(i, b.rq + 8, rbuf);
    r.put32(i, b.rq + 20, 0x100); // terminator
    r.put32(i, b.db, 1);
    rbuf
}

/// The send queue of `b` from its second WQE on (for a second post).
fn second_sq_wqe(b: &QpBufs) -> QpBufs {
    QpBufs {
        buf: 0,
        db: 0,
        sq: b.sq + 64,
        rq: 0,
        mtt: 0,
        mb: 0,
    }
}

/// Sender: UD SEND_IMM with 12 bytes of inline data would not fit the rig's 64-byte stride,
/// so the WQE is ctrl + datagram only (DS 4) with immediate data.
fn post_ud_send_imm(r: &mut Rig, i: usize, b: &QpBufs, dlid: u16, qkey: u32) {
    let sq = b.sq;
    r.put32(i, sq + 4, 4);
    r.put32(i, sq + 8, 3 << 2); // signaled
    r.put32(i, sq + 12, 0xabcd_ef01);
    let d = sq + 16;
    r.put32(i, d, (1 << 24) | 1); // port 1, PD 1
    r.write(i, d + 6, &dlid.to_be_bytes());
    r.put32(i, d + 0x20, 70);
    r.put32(i, d + 0x24, qkey);
    r.put32(i, sq, 0x0b); // SEND_IMM, owner 0 (pass 0)
    let h = r.hca(i);
    r.m.mmio_write(h, 2, uar_off(UAR, 0x14), 4, be32(70 << 8));
}

#[test]
fn ud_send_between_two_hcas_with_sm() {
    let (mut r, bufs, cqs) = ud_pair(true);
    let lid0 = sim::Fabric::sm_lid_for(0, 1);
    let lid1 = sim::Fabric::sm_lid_for(1, 1);
    // The SM brought both ports ACTIVE with a PORT_CHANGE event (§6.1).
    post_recv(&mut r, 1, &bufs[1]);
    post_ud_send_imm(&mut r, 0, &bufs[0], lid1, 0x1111_1111);
    r.assert_clean(0);
    r.assert_clean(1);
    let s = r.read(0, cqs[0].0, 32);
    assert_eq!(s[31], 0x40 | 0x0b, "send CQE: S bit, SEND_IMM, owner 0");
    assert_eq!(u32::from_be_bytes(s[0..4].try_into().unwrap()), 70);
    assert_eq!(u16::from_be_bytes([s[0x18], s[0x19]]), 0, "wqe_index");
    let c = r.read(1, cqs[1].0, 32);
    assert_eq!(c[31], 0x02, "receive SEND_IMM");
    assert_eq!(
        u32::from_be_bytes(c[4..8].try_into().unwrap()),
        0xabcd_ef01,
        "imm"
    );
    assert_eq!(
        u32::from_be_bytes(c[8..12].try_into().unwrap()) & 0xff_ffff,
        70,
        "source QPN"
    );
    assert_eq!(u16::from_be_bytes([c[0x0e], c[0x0f]]), lid0, "SLID");
    assert_eq!(
        u32::from_be_bytes(c[0x14..0x18].try_into().unwrap()),
        40,
        "byte_cnt = payload + 40"
    );
    // Wrong Q_Key: dropped and counted, no CQE.
    post_recv(&mut r, 1, &bufs[1]);
    let sq1 = second_sq_wqe(&bufs[0]);
    post_ud_send_imm(&mut r, 0, &sq1, lid1, 0x2222);
    assert_eq!(
        r.read(1, cqs[1].0 + 32, 32),
        vec![0xcc; 32],
        "no receive completion"
    );
    assert!(r.m.fabric_ref().counters(r.hca(1)).packets_dropped >= 1);
}

#[test]
fn sm_off_ports_stay_init_and_nothing_flows() {
    let (mut r, bufs, cqs) = ud_pair(false);
    let mb = r.mailbox(0);
    // PortInfo via MAD_IFC: state INIT, LID 0 (§6.3).
    r.write(0, mb, &[1, 1, 1, 1]);
    r.write(0, mb + 0x10, &[0, 0x15]);
    let out = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x024, 3, mb, 1, out), 0);
    let pi = r.read(0, out + 0x40, 64);
    assert_eq!(pi[32] & 0xf, 2, "INIT");
    assert_eq!(u16::from_be_bytes([pi[16], pi[17]]), 0, "LID 0");
    post_recv(&mut r, 1, &bufs[1]);
    post_ud_send_imm(&mut r, 0, &bufs[0], 5, 0x1111_1111);
    assert_eq!(r.read(1, cqs[1].0, 32), vec![0xcc; 32], "nothing received");
    r.assert_clean(0);
}

#[test]
fn a_send_queue_switch_is_recorded_once_per_run_of_one_qp() {
    let (mut r, bufs, _) = ud_pair(true);
    let lid1 = sim::Fabric::sm_lid_for(1, 1);
    let h = r.hca(0);
    let before = r.m.fabric_ref().sq_switches(h).len();
    post_recv(&mut r, 1, &bufs[1]);
    let writes = r.m.fabric_ref().counters(h).mmio_writes;
    post_ud_send_imm(&mut r, 0, &bufs[0], lid1, 0x1111_1111);
    let switches = r.m.fabric_ref().sq_switches(h);
    assert_eq!(switches.len(), before + 1, "{switches:?}");
    let s = switches.last().unwrap();
    assert_eq!(s.qpn, 70);
    // Taken as the doorbell arrived: its MMIO write counted, its packet not yet sent.
    assert_eq!(s.counters.mmio_writes, writes + 1);
    assert_eq!(
        s.counters.packets_sent + 1,
        r.m.fabric_ref().counters(h).packets_sent
    );
    // Another WQE on the same QP is the same run: nothing new.
    post_recv(&mut r, 1, &bufs[1]);
    let next = second_sq_wqe(&bufs[0]);
    post_ud_send_imm(&mut r, 0, &next, lid1, 0x1111_1111);
    assert_eq!(r.m.fabric_ref().sq_switches(h).len(), before + 1);
    r.assert_clean(0);
}
