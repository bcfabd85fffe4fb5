//! Behaviour Linux's own mlx4_core/mlx4_ib (Debian's 6.1) needed from the model, one test per
//! change (docs/model.md, "Changes Linux forced"). Each was found by booting Linux against the
//! model under QEMU (docs/linux-guest.md); each test drives the commands exactly as Linux does
//! and checks what real ConnectX-3s answer.

mod harness;
use harness::*;

fn node() -> Rig {
    let mut r = Rig::new(1, true);
    r.bring_up(0);
    r
}

/// MOD_STAT_CFG op_mod 2 (`mlx4_get_phys_port_id`, in_mod = port << 8): the uplink GUID of
/// the port, high word at 0x14 and low word at 0x1c of the output mailbox.
#[test]
fn mod_stat_cfg_answers_the_uplink_guid_query() {
    let mut r = Rig::new(1, true);
    r.start_fw(0);
    let out = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x034, 2, 0, 1 << 8, out), 0, "port 1");
    let hi = r.get32(0, out + 0x14);
    let lo = r.get32(0, out + 0x1c);
    let guid = (u64::from(hi) << 32) | u64::from(lo);
    assert_ne!(guid, 0);
    // The same GUID the SMA reports as PortGUID (PortInfo is not it; NodeInfo 0x14 is).
    r.init_hca(0);
    let mb = r.mailbox(0);
    r.write(0, mb, &[1, 1, 1, 1]);
    r.write(0, mb + 0x10, &0x11u16.to_be_bytes());
    let mad_out = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x024, 3, mb, 1, mad_out), 0, "NodeInfo");
    let ni = r.read(0, mad_out + 0x40, 64);
    assert_eq!(&ni[20..28], &guid.to_be_bytes(), "NodeInfo PortGUID");
    assert_eq!(r.cmd(0, 0x034, 2, 0, 2 << 8, out), 0x03, "no port 2");
    assert_eq!(
        r.cmd(0, 0x034, 3, 0, 1 << 8, out),
        0x02,
        "other op_mods stay unknown"
    );
    assert_eq!(r.violations(0).len(), 2, "{:#?}", r.violations(0));
}

/// Linux maps the EQ context table for num_phys_eqs entries, beyond its own SET_ICM_SIZE
/// total; the bound is the device's ICM space (QUERY_DEV_CAP max_icm_sz).
#[test]
fn map_icm_may_go_beyond_set_icm_size_but_not_beyond_the_icm_space() {
    let mut r = Rig::new(1, true);
    r.bring_up(0);
    let page = r.alloc(0, 0x10000, 0x10000);
    // The rig's SET_ICM_SIZE total is ICM_SIZE; map 64 KiB right at its end.
    let va = ICM_SIZE.next_multiple_of(0x10000);
    assert_eq!(
        r.map_cmd(0, 0xffa, &[(va, page, 4)]),
        0,
        "past SET_ICM_SIZE"
    );
    let max_icm = 1u64 << 40; // DeviceProfile::default().max_icm_sz
    let page2 = r.alloc(0, 0x1000, 0x1000);
    assert_eq!(
        r.map_cmd(0, 0xffa, &[(max_icm, page2, 0)]),
        0x03,
        "past the ICM space"
    );
    assert_eq!(r.violations(0).len(), 1, "{:#?}", r.violations(0));
}

/// Linux unmaps whole 256 KiB table chunks even where it mapped only a smaller table; the
/// pages of the range that are not mapped are skipped. A range with nothing mapped is refused.
#[test]
fn unmap_icm_of_a_partly_mapped_chunk_unmaps_what_is_mapped() {
    let mut r = Rig::new(1, true);
    r.bring_up(0);
    let va = 0x40_0000_0000u64; // far from the rig's tables, chunk-aligned
    let mem = r.alloc(0, 0x2000, 0x2000);
    assert_eq!(r.map_cmd(0, 0xffa, &[(va, mem, 1)]), 0, "8 KiB");
    assert_eq!(r.cmd(0, 0xff9, 0, va, 64, 0), 0, "UNMAP_ICM of 256 KiB");
    assert_eq!(
        r.cmd(0, 0xff9, 0, va, 64, 0),
        0x03,
        "nothing mapped any more"
    );
    // The pages are back: mapping them again works.
    assert_eq!(r.map_cmd(0, 0xffa, &[(va, mem, 1)]), 0, "remapped");
    assert_eq!(r.violations(0).len(), 1, "{:#?}", r.violations(0));
}

/// SET_PORT's VL cap is a number of data VLs; a ConnectX-3 (VLCap 4 = VL0-7) takes 8, and
/// PortInfo then reports VLCap 4. QUERY_PORT reports 2^7 MACs and VLANs.
#[test]
fn set_port_takes_eight_vls_and_query_port_reports_mac_and_vlan_tables() {
    let mut r = node();
    let mb = r.mailbox(0);
    let out = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x043, 0, 0, 1, out), 0, "QUERY_PORT");
    assert_eq!(
        r.read(0, out + 0x0a, 1)[0],
        0x77,
        "log max VLANs 7 | log max MACs 7"
    );
    r.put32(0, mb, (1 << 21) | (1 << 22) | (5 << 12) | (15 << 4));
    assert_eq!(r.cmd(0, 0x00c, 0, mb, 1, 0), 0x08, "15 VLs exceed");
    r.put32(0, mb, (1 << 21) | (1 << 22) | (5 << 12) | (8 << 4));
    assert_eq!(r.cmd(0, 0x00c, 0, mb, 1, 0), 0, "8 VLs fit");
    r.init_port(0);
    r.write(0, mb, &[0u8; 256]);
    r.write(0, mb, &[1, 1, 1, 1]);
    r.write(0, mb + 0x10, &0x15u16.to_be_bytes());
    r.put32(0, mb + 0x14, 1);
    assert_eq!(r.cmd(0, 0x024, 3, mb, 1, out), 0, "PortInfo");
    assert_eq!(r.read(0, out + 0x40 + 37, 1)[0] >> 4, 4, "VLCap VL0-7");
    r.put32(0, mb, (1 << 21) | (5 << 12) | (2 << 4));
    assert_eq!(r.cmd(0, 0x00c, 0, mb, 1, 0), 0, "2 VLs");
    r.write(0, mb, &[0u8; 256]);
    r.write(0, mb, &[1, 1, 1, 1]);
    r.write(0, mb + 0x10, &0x15u16.to_be_bytes());
    r.put32(0, mb + 0x14, 1);
    assert_eq!(r.cmd(0, 0x024, 3, mb, 1, out), 0, "PortInfo");
    assert_eq!(r.read(0, out + 0x40 + 37, 1)[0] >> 4, 2, "VLCap VL0-1");
    r.assert_clean(0);
}

/// DIAG_RPRT op_mod 2 (mlx4_ib's hw_counters): counters the model does not keep read 0.
#[test]
fn diag_rprt_reports_zero_counters() {
    let mut r = Rig::new(1, true);
    r.start_fw(0);
    let out = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x030, 2, 0, 0, out), 0x04, "before INIT_HCA");
    r.init_hca(0);
    r.write(0, out, &[0xee; 0x200]);
    assert_eq!(r.cmd(0, 0x030, 2, 0, 0, out), 0, "device counters");
    assert!(r.read(0, out, 0x200).iter().all(|&b| b == 0));
    assert_eq!(r.cmd(0, 0x030, 2, 0, 1, out), 0, "port 1 counters");
    assert_eq!(r.cmd(0, 0x030, 2, 0, 2, out), 0x03, "no port 2");
    assert_eq!(r.cmd(0, 0x030, 0, 0, 0, out), 0x02, "other op_mods");
    assert_eq!(r.violations(0).len(), 3, "{:#?}", r.violations(0));
}

/// QUERY_HCA (after each INIT_PORT): the INIT_HCA parameters back, core clock at 0x0c.
#[test]
fn query_hca_echoes_init_hca_and_reports_the_core_clock() {
    let mut r = Rig::new(1, true);
    r.start_fw(0);
    let out = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x00b, 0, 0, 0, out), 0x04, "before INIT_HCA");
    r.init_hca(0);
    assert_eq!(r.cmd(0, 0x00b, 0, 0, 0, out), 0);
    assert_eq!(r.get32(0, out + 0x0c), 1000, "core clock in MHz");
    assert_eq!(r.read(0, out, 1)[0], 2, "version");
    let eqc = r.read(0, out + 0x80, 8);
    assert_eq!(
        u64::from_be_bytes(eqc.try_into().unwrap()) & !0xff,
        EQC_BASE,
        "EQC base as given to INIT_HCA"
    );
    assert_eq!(r.cmd(0, 0x00b, 1, 0, 0, out), 0x02, "op_mod must be 0");
    assert_eq!(r.violations(0).len(), 2, "{:#?}", r.violations(0));
}

/// Flow counters as Linux's mlx4_core/mlx4_ib use them: QUERY_DEV_CAP flag bit 48 with the
/// number of counters at 0x68, INIT_HCA flags bit 4 (the rig sets it, as `mlx4_INIT_HCA`),
/// each QP given its port's default counter at INIT2RTR with COUNTER_INDEX (optpar bit 20),
/// and a freed counter cleared with QUERY_IF_STAT (in_mod = index | 1 << 31,
/// `__mlx4_clear_if_stat`). An index beyond the counters is refused.
#[test]
fn counters_are_enabled_given_to_qps_and_cleared_as_linux_does() {
    let mut r = node();
    let out = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x003, 0, 0, 0, out), 0, "QUERY_DEV_CAP");
    assert_ne!(
        r.get32(0, out + 0x40) & (1 << 16),
        0,
        "flag bit 48: counters"
    );
    let max = r.get32(0, out + 0x68);
    assert_eq!(max, 128, "max counters");
    r.create_eq(0, 8, 5, 0);
    r.create_cq(0, 130, 4, 9, 8);
    r.init_port(0);
    r.nodes[0].qp_counter = Some(0); // port 1's default counter
    r.qp_to_rts(0, 200, 3, 130, 9, 1, 0x1111_1111, 0, 0);
    let q = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x022, 0, 0, 200, q), 0, "QUERY_QP");
    assert_eq!(
        r.read(0, q + 8 + 0x18 + 4, 1)[0],
        0,
        "counter index in the QPC"
    );
    r.nodes[0].qp_counter = Some(max as u8); // one past the sink
    let b = r.qp_to_rts_bufs(0);
    let st = r.qp_modify_to_rts(0, 201, 3, 130, 9, 1, 0x1111_1111, 0, 0, &b);
    assert_eq!(st[1], 0x03, "INIT2RTR with counter {max} of {max}");
    r.write(0, out, &[0xee; 0x28]);
    assert_eq!(
        r.cmd(0, 0x054, 0, 0, 1 << 31, out),
        0,
        "QUERY_IF_STAT clear 0"
    );
    assert_eq!(
        r.read(0, out, 0x28),
        vec![0u8; 0x28],
        "basic counters, all 0"
    );
    assert_eq!(r.cmd(0, 0x054, 0, 0, max, out), 0x03, "no such counter");
    let v = r.violations(0);
    assert!(
        v.iter().any(|x| x.contains("COUNTER_INDEX 128")),
        "the bad counter index is what was refused: {v:#?}"
    );
    assert!(
        v.iter().any(|x| x.contains("QUERY_IF_STAT in_mod 0x80")),
        "{v:#?}"
    );
    assert!(
        v.iter().all(|x| x.contains("COUNTER_INDEX")
            || x.contains("QUERY_IF_STAT")
            || x.contains("RTR2RTS")),
        "nothing else (RTR2RTS of the QP left in INIT follows): {v:#?}"
    );
}

/// mlx4_ib destroys QP0 by closing the port first and then moving QP0 to RESET: that is not a
/// violation. Another QP still in RTS on the port when it is closed still is.
#[test]
fn close_port_before_qp0_reset_is_how_linux_destroys_qp0() {
    let mut r = node();
    r.create_eq(0, 8, 5, 0);
    r.create_cq(0, 130, 4, 9, 8);
    assert_eq!(r.cmd(0, 0x023, 0, 0, 128, 0), 0, "special QPs at 128");
    r.init_port(0);
    // QP0 of port 1 (QPN 128) as MLX, and an ordinary UD QP.
    r.qp_to_rts(0, 128, 7, 130, 9, 1, 0, 0, 0);
    assert_eq!(r.cmd(0, 0x00a, 0, 0, 1, 0), 0, "CLOSE_PORT");
    assert_eq!(r.cmd(0, 0x021, 2, 0, 128, 0), 0, "2RST_QP of QP0");
    r.assert_clean(0);
    r.init_port(0);
    r.qp_to_rts(0, 200, 3, 130, 9, 1, 0x1111_1111, 0, 0);
    assert_eq!(r.cmd(0, 0x00a, 0, 0, 1, 0), 0, "CLOSE_PORT");
    let v = r.violations(0);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert!(v[0].contains("CLOSE_PORT 1 while QPs [c8]"), "{v:#?}");
}

/// The PCI Express capability has Link Capabilities 2 with 2.5/5/8 GT/s (a PCIe 3.0 x8
/// device): Linux reads the maximum link speed there.
#[test]
fn pcie_capability_reports_8_gts_in_link_capabilities_2() {
    let mut r = Rig::new(1, true);
    let h = r.hca(0);
    let mut cfg32 = |off: u16| r.m.cfg_read(h, off, 4);
    let cap = cfg32(0x34) as u16 & 0xff;
    assert_eq!(cfg32(cap) & 0xff, 0x10, "PCI Express capability first");
    assert_eq!((cfg32(cap) >> 16) & 0xf, 2, "capability version 2");
    assert_eq!(cfg32(cap + 0x0c) & 0x3ff, 0x83, "link caps: 8 GT/s, x8");
    assert_eq!(cfg32(cap + 0x2c), 0x0e, "link caps 2: 2.5, 5, 8 GT/s");
    assert_eq!(
        cfg32(cap + 0x10) >> 16 & 0x3ff,
        0x83,
        "link status: 8 GT/s, x8"
    );
}

/// MODIFY_CQ op_mod 1 as Linux's `mlx4_cq_modify` (cq.c) sends it for ib_modify_cq (IPoIB's
/// ethtool coalescing): a CQ context with only cq_period (0x10) and cq_max_count (0x12).
/// An armed CQ's COMP event then waits for cq_max_count completions or cq_period µs of the
/// model's clock after the first, whichever comes first. Resize (op_mod 0) is refused.
#[test]
fn modify_cq_moderation_holds_the_completion_event() {
    const UAR: u32 = 9;
    let mut r = node();
    let eq = r.create_eq(0, 8, 5, 0);
    assert_eq!(r.cmd(0, 0x012, 0, (1 << 0x04) | (1 << 0x0a), 8, 0), 0);
    let (_cq, db) = r.create_cq(0, 130, 4, UAR, 8);
    let qp = r.qp_to_rts(0, 90, 3, 130, UAR, 1, 0x42, 0, 0);
    let h = r.hca(0);
    let lid = sim::Fabric::sm_lid_for(0, 1);
    r.init_port(0);
    let comp_events = |r: &Rig| {
        (0..32u64)
            .map(|n| r.read(0, eq + n * 32, 32))
            .filter(|e| e[31] & 0x80 == 0 && e[1] == 0x00)
            .count()
    };
    let mut sn = 0u32;
    let mut ci = 0u32;
    let mut arm = |r: &mut Rig, ci: u32| {
        sn = (sn + 1) & 3;
        r.m.mmio_write(
            h,
            2,
            u64::from(UAR) * 4096 + 0x20,
            4,
            be32((sn << 28) | (2 << 24) | 130),
        );
        r.m.mmio_write(h, 2, u64::from(UAR) * 4096 + 0x24, 4, be32(ci));
    };
    let mut slot = 0u64;
    let mut send = |r: &mut Rig| {
        let w = qp.sq + (slot % 16) * 64;
        let owner = if (slot / 16) % 2 == 1 { 1u32 << 31 } else { 0 };
        slot += 1;
        r.put32(0, w + 4, 4);
        r.put32(0, w + 8, 3 << 2);
        r.put32(0, w + 16, (1 << 24) | 1);
        r.write(0, w + 16 + 6, &lid.to_be_bytes());
        r.put32(0, w + 16 + 0x20, 90);
        r.put32(0, w + 16 + 0x24, 0x42);
        r.put32(0, w, 0x0a | owner);
        r.m.mmio_write(h, 2, u64::from(UAR) * 4096 + 0x14, 4, be32(90 << 8));
    };
    let modify = |r: &mut Rig, count: u16, period: u16| {
        let mb = r.mailbox(0);
        r.write(0, mb, &[0u8; 64]);
        r.write(0, mb + 0x10, &period.to_be_bytes());
        r.write(0, mb + 0x12, &count.to_be_bytes());
        r.cmd(0, 0x02c, 1, mb, 130, 0)
    };
    // cq_max_count 3: the third completion raises the event.
    assert_eq!(modify(&mut r, 3, 0), 0, "MODIFY_CQ moderation");
    arm(&mut r, ci);
    for _ in 0..2 {
        send(&mut r);
    }
    assert_eq!(comp_events(&r), 0, "two completions held back");
    send(&mut r);
    assert_eq!(comp_events(&r), 1, "event at the third");
    ci += 3;
    r.put32(0, db, ci);
    // cq_period 100 µs alone: the event comes 100 µs after the completion, not before.
    assert_eq!(modify(&mut r, 0, 100), 0);
    arm(&mut r, ci);
    send(&mut r);
    r.m.fabric().advance(std::time::Duration::from_micros(99));
    assert_eq!(comp_events(&r), 1, "held for the period");
    r.m.fabric().advance(std::time::Duration::from_micros(1));
    assert_eq!(comp_events(&r), 2, "event when the period ran out");
    ci += 1;
    r.put32(0, db, ci);
    // Both: count 2 and period 100 µs; the count wins here.
    assert_eq!(modify(&mut r, 2, 100), 0);
    arm(&mut r, ci);
    send(&mut r);
    send(&mut r);
    assert_eq!(comp_events(&r), 3, "count reached before the period");
    ci += 2;
    r.put32(0, db, ci);
    // Moderation off again: an event per completion.
    assert_eq!(modify(&mut r, 0, 0), 0);
    arm(&mut r, ci);
    send(&mut r);
    assert_eq!(comp_events(&r), 4);
    // QUERY_CQ shows the stored fields.
    assert_eq!(modify(&mut r, 7, 9), 0);
    let out = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x018, 0, 0, 130, out), 0);
    assert_eq!(
        r.get32(0, out + 0x10),
        (9 << 16) | 7,
        "cq_period, cq_max_count"
    );
    r.assert_clean(0);
    // Resize is not modelled; a CQ not in hardware ownership is 0x09.
    let mb = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x02c, 0, mb, 130, 0), 0x02, "resize");
    assert_eq!(r.cmd(0, 0x02c, 1, mb, 131, 0), 0x09, "no such CQ");
}
