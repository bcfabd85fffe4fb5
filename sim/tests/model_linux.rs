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
    let max_icm = 1u64 << 40; // harness::reduced().max_icm_sz
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
        r.arm_cq(0, UAR, 130, db, sn, 2, ci);
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

/// A directed-route SMP through MAD_IFC (class 0x81, hop count 0: the local port, as Linux's
/// MAD layer hands a local DR SMP to `mlx4_ib_process_mad`); returns (command status, MAD
/// status without the D bit, the 64 SMP data bytes).
fn local_smp(
    r: &mut Rig,
    method: u8,
    attr: u16,
    attr_mod: u32,
    data: &[u8; 64],
) -> (u8, u16, [u8; 64]) {
    let mb = r.mailbox(0);
    let out = r.mailbox(0);
    r.write(0, mb, &[0u8; 256]);
    r.write(0, mb, &[1, 0x81, 1, method]);
    r.write(0, mb + 0x10, &attr.to_be_bytes());
    r.write(0, mb + 0x14, &attr_mod.to_be_bytes());
    r.write(0, mb + 0x40, data);
    let st = r.cmd(0, 0x024, 3, mb, 1, out);
    let m = r.read(0, out, 256);
    let status = u16::from_be_bytes([m[4], m[5]]) & 0x7fff;
    (st, status, m[0x40..0x80].try_into().unwrap())
}

/// infiniband-diags' ibportstate on a Mellanox port: Get PortInfo, Get MlnxExtendedPortInfo
/// (0xFF90, which Linux's mlx4_ib also reads as MLX4_ATTR_EXTENDED_PORT_INFO), then Set
/// PortInfo with what it read, PortState/PortPhysicalState 0 (no change) except the op, and
/// LinkSpeedEnabled 15, LinkSpeedExtEnabled 31, LinkWidthEnabled 255 ("set to supported"),
/// and AttributeModifier bit 31 (LinkSpeedExtEnabled applies) because the port reports
/// IsExtendedSpeedsSupported.
/// `down` takes an ACTIVE port to INIT (the link stays up), `arm` and `active` bring it back,
/// each change with its PORT_CHANGE event.
#[test]
fn ibportstate_reads_mlnx_ext_port_info_and_moves_the_port_down_and_back() {
    let mut r = node();
    r.init_port(0);
    let (st, ms, pi) = local_smp(&mut r, 1, 0x15, 1, &[0; 64]);
    assert_eq!((st, ms), (0, 0), "Get PortInfo");
    assert_ne!(
        u32::from_be_bytes(pi[20..24].try_into().unwrap()) & 0x4000,
        0,
        "CapabilityMask: IsExtendedSpeedsSupported"
    );
    assert_eq!(pi[32] & 0xf, 4, "ACTIVE");
    let (st, ms, ext) = local_smp(&mut r, 1, 0xff90, 1, &[0; 64]);
    assert_eq!((st, ms), (0, 0), "Get MlnxExtendedPortInfo");
    assert_eq!(ext[15] & 1, 0, "not FDR10 active (the link runs FDR)");
    let set = |r: &mut Rig, state: u8| {
        let mut d = pi;
        d[32] = (d[32] & 0xf0) | state;
        d[33] &= 0x0f; // PortPhysicalState: no change
        d[35] = (d[35] & 0xf0) | 15; // LinkSpeedEnabled
        d[29] = 255; // LinkWidthEnabled
        d[63] = (d[63] & 0xe0) | 31; // LinkSpeedExtEnabled
                                     // Port 1 with bit 31: LinkSpeedExtEnabled applies.
        local_smp(r, 2, 0x15, 0x8000_0001, &d)
    };
    for (op, state, want) in [("down", 1, 2), ("arm", 3, 3), ("active", 4, 4)] {
        let (st, ms, now) = set(&mut r, state);
        assert_eq!((st, ms), (0, 0), "Set PortInfo {op}");
        assert_eq!(now[32] & 0xf, want, "{op}");
    }
    let (st, ms, _) = local_smp(&mut r, 1, 0x15, 0x100, &[0; 64]);
    assert_eq!(
        (st, ms),
        (0, 0x1c),
        "bits 30:8 of the modifier are not a port"
    );
    r.assert_clean(0);
}

const GSI_BASE: u32 = 128; // CONF_SPECIAL_QP base: QP0 of port 1 = 128, QP1 of port 1 = 130
const GSI_QP1: u32 = GSI_BASE + 2;
const GSI_CQ: u32 = 128;
const GSI_UAR: u32 = 9;
/// The rig's reserved L_Key (profile default).
const GSI_LKEY: u32 = 0x200;

/// Firmware up, port ACTIVE (the fabric's SM), CONF_SPECIAL_QP, CQ 128 and QP1 of port 1
/// (MLX, st 7) in RTS with the GSI Q_Key 0x8001_0000 as Linux's MAD layer sets it: SQ 16 x
/// 128 B (an MLX WQE with a MAD is 80 bytes), RQ 16 x 64 B; returns (SQ, RQ, doorbell, CQ).
fn gsi_node(r: &mut Rig, i: usize) -> (u64, u64, u64, u64) {
    r.bring_up(i);
    r.create_eq(i, 8, 6, 0);
    let mask = (1u64 << 0x0a) | (1 << 0x09) | (1 << 0x04);
    assert_eq!(r.cmd(i, 0x012, 0, mask, 8, 0), 0, "MAP_EQ");
    let (cq, _) = r.create_cq(i, GSI_CQ, 5, GSI_UAR, 8);
    r.init_port(i);
    assert_eq!(r.cmd(i, 0x023, 0, 0, GSI_BASE, 0), 0, "CONF_SPECIAL_QP");
    let (sq, rq, db) = special_qp_up(r, i, GSI_QP1, 0x8001_0000);
    (sq, rq, db, cq)
}

/// A special QP (MLX) of port 1 to RTS over fresh buffers; returns (SQ, RQ, doorbell).
fn special_qp_up(r: &mut Rig, i: usize, qpn: u32, qkey: u32) -> (u64, u64, u64) {
    let buf = r.alloc(i, 4096, 4096);
    let db = r.alloc(i, 4, 4);
    let mtt = r.write_mtts(i, &[buf]);
    let (sq, rq) = (buf, buf + 16 * 128);
    for k in 0..16u64 {
        r.put32(i, sq + k * 128, 1 << 31);
    }
    r.stamp_sq(i, sq, 16, 128);
    r.put32(i, db, 0);
    let mb = r.mailbox(i);
    r.write(i, mb, &[0u8; 256]);
    let c = mb + 8;
    r.put32(i, c, (1 << 28) | (7 << 16) | (3 << 11));
    r.put32(i, c + 0x04, 1);
    r.write(
        i,
        c + 0x08,
        &[(5 << 5) | 11, (4 << 3) | 2, (4 << 3) | 3, 0x10],
    );
    r.put32(i, c + 0x0c, GSI_UAR);
    r.put32(i, c + 0x10, qpn);
    r.put32(i, c + 0x7c, GSI_CQ);
    r.put32(i, c + 0x9c, GSI_CQ);
    r.put64(i, c + 0xa0, db);
    r.put32(i, c + 0xa8, qkey);
    r.put32(i, c + 0xcc, (mtt * 8) as u32);
    r.put32(i, mb, (1 << 4) | (1 << 5));
    assert_eq!(r.cmd(i, 0x019, 0, mb, qpn, 0), 0, "RST2INIT");
    r.put32(i, c, (2 << 28) | (7 << 16) | (3 << 11));
    r.write(i, c + 0x18 + 0x20, &[0x3f]);
    r.put32(i, mb, 0);
    assert_eq!(r.cmd(i, 0x01a, 0, mb, qpn, 0), 0, "INIT2RTR");
    r.put32(i, c, (3 << 28) | (7 << 16) | (3 << 11));
    assert_eq!(r.cmd(i, 0x01b, 0, mb, qpn, 0), 0, "RTR2RTS");
    (sq, rq, db)
}

/// What Linux's `build_mlx_header` writes for a LID-routed GMP from QP1: LRH (VL 0 from the
/// SL-to-VL table, SL 0, LNH 2, DLID, SLID = only the path bits, 0, PktLen), BTH (UD SEND
/// Only, P_Key 0xFFFF, DestQP 1), DETH (GSI Q_Key, SrcQP 1).
fn gmp_headers(dlid: u16) -> [u8; 28] {
    let mut h = [0u8; 28];
    h[1] = 0x02;
    h[2..4].copy_from_slice(&dlid.to_be_bytes());
    h[4..6].copy_from_slice(&(((28 + 256 + 4) / 4) as u16).to_be_bytes());
    h[8] = 0x64;
    h[10..12].copy_from_slice(&[0xff, 0xff]);
    h[15] = 1;
    h[20..24].copy_from_slice(&0x8001_0000u32.to_be_bytes());
    h[27] = 1;
    h
}

/// MLX WQE `k` on QP1 (MLX segment with `flags` and `rlid`, inline headers, the MAD by
/// pointer, the ICRC segment: DS 5) and the send doorbell.
fn post_gsi_send(r: &mut Rig, i: usize, sq: u64, k: u64, flags: u32, hdr: &[u8; 28], mad: &[u8]) {
    post_mlx_on(r, i, GSI_QP1, sq, k, flags, hdr, mad);
}

/// MLX WQE `k` on special QP `qpn` (the layout of `post_gsi_send`).
#[allow(clippy::too_many_arguments)]
fn post_mlx_on(
    r: &mut Rig,
    i: usize,
    qpn: u32,
    sq: u64,
    k: u64,
    flags: u32,
    hdr: &[u8; 28],
    mad: &[u8],
) {
    let mbuf = r.alloc(i, 256, 64);
    r.write(i, mbuf, mad);
    let w = sq + k * 128;
    let rlid = u16::from_be_bytes([hdr[2], hdr[3]]);
    r.write(i, w + 4, &[0, 0, 0, 5]);
    r.put32(i, w + 8, flags);
    r.write(i, w + 12, &[(rlid >> 8) as u8, rlid as u8, 0, 0]);
    r.put32(i, w + 16, 0x8000_0000 | 28);
    r.write(i, w + 20, hdr);
    r.put32(i, w + 48, mad.len() as u32);
    r.put32(i, w + 52, GSI_LKEY);
    r.put64(i, w + 56, mbuf);
    r.write(i, w + 64, &[0x80, 0, 0, 4, 0, 0, 0, 0]);
    r.put32(i, w, 0x0a);
    let h = r.hca(i);
    r.m.mmio_write(h, 2, u64::from(GSI_UAR) * 4096 + 0x14, 4, be32(qpn << 8));
    // The 16-slot ring has no headroom beyond the device's prefetch window: restamp the slot
    // the device has run, before its next pass comes into that window (§5.4).
    r.stamp_sq(i, w, 1, 128);
}

/// QP1 (GSI): every perfquery, smpquery by LID or ibaddr on Linux goes through it. An MLX
/// WQE on QP1 leaves as a UD packet on a data VL with the port's own LID as SLID (Linux
/// writes only the path bits and leaves SLR clear), crosses the switch to DestQP 1 and lands
/// in the peer's QP1 receive queue like a UD message (GRH area, source QP 1, the sender's
/// LID). A QP1 WQE asking for VL15 is refused.
#[test]
fn gsi_mads_travel_as_ud_packets_with_the_port_lid_as_source() {
    let mut r = Rig::new(2, true);
    let (sq0, _, _, cq0) = gsi_node(&mut r, 0);
    let (_, rq1, db1, cq1) = gsi_node(&mut r, 1);
    let (lid0, lid1) = (sim::Fabric::sm_lid_for(0, 1), sim::Fabric::sm_lid_for(1, 1));
    let rbuf = r.alloc(1, 296, 64);
    r.put32(1, rq1, 296);
    r.put32(1, rq1 + 4, GSI_LKEY);
    r.put64(1, rq1 + 8, rbuf);
    r.put32(1, rq1 + 20, 0x100);
    r.put32(1, db1, 1);
    let mut mad = [0u8; 256];
    mad[..4].copy_from_slice(&[1, 0x04, 1, 1]); // PerfMgt Get
    mad[8..16].copy_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
    mad[0x10..0x12].copy_from_slice(&0x12u16.to_be_bytes());
    post_gsi_send(&mut r, 0, sq0, 0, 3 << 2, &gmp_headers(lid1), &mad);
    let send = r.read(0, cq0, 32);
    assert_ne!(
        send[0x1f] & 0x1f,
        0x1e,
        "send completion without error: {send:02x?}"
    );
    let c = r.read(1, cq1, 32);
    assert_ne!(
        c[0x1f] & 0x1f,
        0x1e,
        "receive completion without error: {c:02x?}"
    );
    assert_eq!(
        u32::from_be_bytes(c[0..4].try_into().unwrap()) & 0xff_ffff,
        GSI_QP1
    );
    assert_eq!(
        u32::from_be_bytes(c[8..12].try_into().unwrap()) & 0xff_ffff,
        1,
        "source QP 1"
    );
    assert_eq!(
        u16::from_be_bytes([c[0x0e], c[0x0f]]),
        lid0,
        "SLID: the sender's LID"
    );
    assert_eq!(u32::from_be_bytes(c[0x14..0x18].try_into().unwrap()), 296);
    assert_eq!(
        r.read(1, rbuf + 40, 256),
        mad.to_vec(),
        "the MAD after the GRH area"
    );
    r.assert_clean(0);
    r.assert_clean(1);
    // VL15 is QP0's.
    post_gsi_send(
        &mut r,
        0,
        sq0,
        1,
        (1 << 17) | (3 << 2),
        &gmp_headers(lid1),
        &mad,
    );
    let v = r.violations(0);
    assert!(v.iter().any(|x| x.contains("VL15 flag")), "{v:#?}");
}

/// smpquery/ibaddr by LID on Linux: a LID-routed SMP from QP0 (VL15, SLR clear, SLID = path
/// bits only) to the peer's LID or to the sender's own crosses the switch by its DLID and
/// arrives in that port's QP0 receive queue with the sender's LID as SLID.
#[test]
fn lid_routed_smps_cross_the_switch_to_the_peer_and_back_to_the_sender() {
    let mut r = Rig::new(2, true);
    let (_, _, _, cq0) = gsi_node(&mut r, 0);
    let (qp0_sq, qp0_rq, qp0_db) = special_qp_up(&mut r, 0, GSI_BASE, 0);
    let (_, _, _, cq1) = gsi_node(&mut r, 1);
    let (_, p1_rq, p1_db) = special_qp_up(&mut r, 1, GSI_BASE, 0);
    let (lid0, lid1) = (sim::Fabric::sm_lid_for(0, 1), sim::Fabric::sm_lid_for(1, 1));
    let recv = |r: &mut Rig, i: usize, rq: u64, db: u64, k: u32| {
        let buf = r.alloc(i, 296, 64);
        let w = rq + u64::from(k) * 64;
        r.put32(i, w, 296);
        r.put32(i, w + 4, GSI_LKEY);
        r.put64(i, w + 8, buf);
        r.put32(i, w + 20, 0x100);
        r.put32(i, db, k + 1);
        buf
    };
    let b1 = recv(&mut r, 1, p1_rq, p1_db, 0);
    let b0 = recv(&mut r, 0, qp0_rq, qp0_db, 0);
    let mut smp = [0u8; 256];
    smp[..4].copy_from_slice(&[1, 0x01, 1, 1]); // LID-routed Get
    smp[0x10..0x12].copy_from_slice(&0x11u16.to_be_bytes()); // NodeInfo
    let headers = |dlid: u16| {
        let mut h = gmp_headers(dlid);
        h[0] = 0xf0; // VL15
        h[15] = 0; // DestQP 0
        h[20..24].copy_from_slice(&[0; 4]); // Q_Key 0
        h[27] = 0; // SrcQP 0
        h
    };
    let flags = (1 << 17) | (3 << 2); // VL15, SLR clear, signaled
    post_mlx_on(&mut r, 0, GSI_BASE, qp0_sq, 0, flags, &headers(lid1), &smp);
    post_mlx_on(&mut r, 0, GSI_BASE, qp0_sq, 1, flags, &headers(lid0), &smp);
    // Both nodes' QP0 and QP1 share CQ 128: the receive completions are its entries.
    let at_peer = r.read(1, cq1, 32);
    assert_eq!(
        u32::from_be_bytes(at_peer[0..4].try_into().unwrap()) & 0xff_ffff,
        GSI_BASE
    );
    assert_eq!(
        u16::from_be_bytes([at_peer[0x0e], at_peer[0x0f]]),
        lid0,
        "SLID"
    );
    assert_eq!(r.read(1, b1 + 40, 256), smp.to_vec());
    let cqes: Vec<Vec<u8>> = (0..3).map(|n| r.read(0, cq0 + n * 32, 32)).collect();
    let own = cqes
        .iter()
        .find(|c| c[0x1f] & 0x40 == 0 && c[0x1f] & 0x1f == 0x01)
        .unwrap_or_else(|| panic!("no receive completion at the sender: {cqes:02x?}"));
    assert_eq!(u16::from_be_bytes([own[0x0e], own[0x0f]]), lid0, "SLID");
    assert_eq!(r.read(0, b0 + 40, 256), smp.to_vec());
    r.assert_clean(0);
    r.assert_clean(1);
}
