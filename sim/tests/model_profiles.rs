//! Device profiles (docs/model.md "Device profiles"): what each built-in profile reports, and
//! what the model does with what a profile offers or refuses, driven by hand (§2.4, §2.6, §4.1,
//! §4.2).

mod harness;
use harness::*;
use sim::{DeviceProfile, FabricConfig};

const UAR: u32 = 9;

fn rig(profile: DeviceProfile) -> Rig {
    Rig::with(
        1,
        FabricConfig {
            manual_clock: true,
            ..Default::default()
        },
        profile,
    )
}

fn query_dev_cap(r: &mut Rig) -> Vec<u8> {
    let out = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x003, 0, 0, 0, out), 0, "QUERY_DEV_CAP");
    r.read(0, out, 0x100)
}

fn be16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}

fn be32v(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes(b[o..o + 4].try_into().unwrap())
}

/// Every built-in profile reaches a driver as Linux's `mlx4_QUERY_DEV_CAP` decodes it.
#[test]
fn query_dev_cap_reports_each_profile_as_linux_decodes_it() {
    for p in DeviceProfile::all() {
        let mut r = rig(p.clone());
        r.start_fw(0);
        let b = query_dev_cap(&mut r);
        let n = &p.name;
        let flags = (u64::from(be32v(&b, 0x40)) << 32) | u64::from(be32v(&b, 0x44));
        assert_eq!(flags, p.flags, "{n}: flags");
        assert_eq!(b[0x37] & 0xf, p.num_ports, "{n}: ports");
        assert_eq!(be16(&b, 0x26) & 0xfff, p.num_sys_eqs, "{n}: num_sys_eqs");
        assert_eq!(1u32 << b[0x4b], 1 << p.log_min_page_sz, "{n}: min page");
        assert_eq!(b[0x29] & 0x3f, p.log_max_req_rdma, "{n}: requester depth");
        assert_eq!(b[0x2b] & 0x3f, p.log_max_res_rdma, "{n}: responder depth");
        assert_eq!(b[0x22] & 0xf, p.log_rsvd_mrws, "{n}: reserved MRWs");
        assert_eq!(b[0x66] >> 4, p.rsvd_xrcds, "{n}: reserved XRC domains");
        assert_eq!(b[0x67] & 0x1f, p.log_max_xrcds, "{n}: XRC domains");
        assert_eq!(be32v(&b, 0x94), p.bmme_flags, "{n}: bmme");
        assert_eq!(be16(&b, 0x3c), p.stat_rate_support, "{n}: static rates");
        let sw_cq_init = be32v(&b, 0x70) & (1 << 23) != 0;
        assert_eq!(sw_cq_init, p.caps2.sw_cq_init, "{n}: SW_CQ_INIT");
        assert_eq!(b[0x7a] & 0xc0 != 0, p.caps2.cqe_stride, "{n}: strides");
        assert_eq!(
            be32v(&b, 0x9c) & (1 << 7) != 0,
            p.caps2.recoverable_error_event,
            "{n}: recoverable errors"
        );
        r.assert_clean(0);
    }
}

/// The real cards' profiles offer what sends Linux down its other paths; the reduced one
/// offers none of it.
#[test]
fn the_real_profiles_offer_what_the_reduced_one_does_not() {
    use sim::profile::dev_cap_flags as f;
    let offered = f::EQE_64B | f::CQE_64B | f::MEM_WINDOW | f::XRC | f::PORT_MNG_CHG_EV;
    for name in ["cx3-fdr", "cx3-fdr-2p", "cx3pro-fdr"] {
        let p = DeviceProfile::named(name).unwrap();
        assert_eq!(p.flags & offered, offered, "{name}");
    }
    assert_eq!(reduced().flags & offered, 0);
    assert_eq!(
        DeviceProfile::named("cx3pro-fdr").unwrap().device_id,
        0x1007
    );
    assert_eq!(DeviceProfile::named("cx3-fdr-2p").unwrap().num_ports, 2);
}

/// INIT_HCA enables only what QUERY_DEV_CAP offered: each capability a reduced card lacks is
/// refused with BAD_PARAM and recorded; the same mailbox passes on a card that has them.
#[test]
fn init_hca_refuses_what_the_profile_does_not_offer() {
    type Edit = fn(&mut Rig, u64);
    let cases: [(&str, Edit); 6] = [
        ("64-byte EQEs", |r, mb| r.put32(0, mb + 0x58, 1 << 29)),
        ("64-byte CQEs", |r, mb| r.put32(0, mb + 0x58, 1 << 30)),
        ("memory windows", |r, mb| r.write(0, mb + 0xf8, &[0x80])),
        ("B0 steering", |r, mb| r.write(0, mb + 0xd8, &[0x08])),
        ("IPoIB checksums", |r, mb| {
            let f = r.get32(0, mb + 0x14);
            r.put32(0, mb + 0x14, f | (1 << 3));
        }),
        ("SYS_EQS", |r, mb| {
            r.write(0, mb + 0x87, &[0x1f]);
            r.write(0, mb + 0x8a, &[0, 64]);
        }),
    ];
    for (what, edit) in cases {
        let mut r = rig(reduced());
        r.start_fw(0);
        assert_eq!(r.init_hca_with(0, edit), 0x03, "{what} on the reduced card");
        let v = r.violations(0);
        assert!(
            v.iter().any(|v| v.contains("does not offer")),
            "{what}: {v:#?}"
        );
        if what != "SYS_EQS" {
            let mut r = rig(DeviceProfile::named("cx3-fdr").unwrap());
            r.start_fw(0);
            assert_eq!(r.init_hca_with(0, edit), 0, "{what} on cx3-fdr");
            r.assert_clean(0);
        }
    }
}

/// A profile offering 64-byte EQEs and CQEs, brought up with both enabled.
fn wide_entries() -> Rig {
    let mut r = rig(DeviceProfile::named("cx3-fdr").unwrap());
    r.start_fw(0);
    assert_eq!(
        r.init_hca_with(0, |r, mb| r.put32(0, mb + 0x58, (1 << 29) | (1 << 30))),
        0
    );
    r.nodes[0].eqe_stride = 64;
    r.nodes[0].cqe_stride = 64;
    r
}

/// With 64-byte entries every EQE and CQE slot is 64 bytes and the 32-byte entry is its second
/// half (Linux `get_eqe` and mlx4_ib `get_sw_cqe` read at +32, the owner bit at byte 63).
#[test]
fn sixty_four_byte_entries_put_the_entry_in_the_second_half() {
    let mut r = wide_entries();
    let eq = r.create_eq(0, 8, 5, 0);
    for k in 0..32 {
        let slot = r.read(0, eq + k * 64, 64);
        assert_eq!(slot[63] & 0x80, 0x80, "EQE {k} owned by hardware");
        assert_eq!(slot[31] & 0x80, 0, "no owner bit in the first half");
    }
    assert_eq!(r.cmd(0, 0x012, 0, 1 << 0x0a, 8, 0), 0, "MAP_EQ CMD");
    let (st, _) = r.cmd_full(0, 0x031, 0, 0, 0x1f, 0, true);
    assert_eq!(st, 0, "NOP");
    let slot = r.read(0, eq, 64);
    assert_eq!(slot[32 + 1], 0x0a, "CMD EQE type at +32+1");
    assert_eq!(slot[1], 0, "nothing in the first half");
    assert_eq!(slot[63] & 0x80, 0, "owner bit of pass 0 at byte 63");

    let (cq, _) = r.create_cq(0, 130, 4, UAR, 8);
    let cqe0 = r.read(0, cq, 64);
    assert!(cqe0.iter().all(|&b| b == 0xcc), "whole slot initialised");
    let qp = r.qp_to_rts(0, 90, 3, 130, UAR, 1, 0x42, 0, 0);
    flush_one_receive(&mut r, &qp, 90);
    let c = r.read(0, cq, 64);
    assert_eq!(c[32 + 31] & 0x1f, 0x1e, "error CQE opcode at +32+31");
    assert_eq!(c[32 + 0x1b], 0x05, "WR flushed");
    assert_eq!(&c[..32], &[0xcc; 32], "first half untouched");
    let next = r.read(0, cq + 64, 64);
    assert_eq!(
        next,
        vec![0xcc; 64],
        "the second CQE is the next 64-byte slot"
    );
    r.assert_clean(0);
}

/// One receive posted on `qpn`, then 2ERR: one "WR flushed" CQE in its CQ.
fn flush_one_receive(r: &mut Rig, qp: &QpBufs, qpn: u32) {
    r.put32(0, qp.rq, 64);
    r.put32(0, qp.rq + 4, 0x200);
    r.put64(0, qp.rq + 8, qp.buf + 3072);
    r.put32(0, qp.rq + 20, 0x100);
    r.put32(0, qp.db, 1);
    r.write(0, qp.mb, &[0u8; 256]);
    r.put32(0, qp.mb + 8, 6 << 28);
    assert_eq!(r.cmd(0, 0x01e, 0, qp.mb, qpn, 0), 0, "2ERR");
}

fn sw_cq_init_profile() -> DeviceProfile {
    let mut p = reduced();
    p.caps2.sw_cq_init = true;
    p
}

/// SW2HW_CQ op_mod 1 (SW_CQ_INIT): only on a device that offers it; then the device leaves
/// the CQEs to software, and a CQE software left with its owner bit clear is recorded.
#[test]
fn sw_cq_init_leaves_the_cqes_to_software() {
    let create = |r: &mut Rig, fill: u8| -> (u8, u64) {
        let buf = r.alloc(0, 4096, 4096);
        r.write(0, buf, &[fill; 4096]);
        let db = r.alloc(0, 8, 8);
        let mtt = r.write_mtts(0, &[buf]);
        let mb = r.mailbox(0);
        r.put32(0, mb + 0x0c, (4 << 24) | UAR);
        r.write(0, mb + 0x17, &[8]);
        r.put32(0, mb + 0x1c, (mtt * 8) as u32);
        r.put64(0, mb + 0x38, db);
        (r.cmd(0, 0x016, 1, mb, 130, 0), buf)
    };
    let mut r = rig(reduced());
    r.bring_up(0);
    r.create_eq(0, 8, 5, 0);
    assert_eq!(create(&mut r, 0xcc).0, 0x02, "op_mod 1 without SW_CQ_INIT");

    let mut r = rig(sw_cq_init_profile());
    r.bring_up(0);
    r.create_eq(0, 8, 5, 0);
    let (st, buf) = create(&mut r, 0xcc);
    assert_eq!(st, 0);
    r.assert_clean(0);
    assert_eq!(r.read(0, buf, 32), vec![0xcc; 32]);

    let mut r = rig(sw_cq_init_profile());
    r.bring_up(0);
    r.create_eq(0, 8, 5, 0);
    let (st, buf) = create(&mut r, 0);
    assert_eq!(st, 0, "the card takes software's word");
    assert_eq!(r.read(0, buf, 32), vec![0; 32], "and writes nothing");
    let v = r.violations(0);
    assert!(
        v.len() == 1 && v[0].contains("CQE 0 has its owner bit clear"),
        "{v:#?}"
    );
}

fn sys_eqs_profile() -> DeviceProfile {
    let mut p = reduced();
    p.num_sys_eqs = 64;
    p.func_max_eqs = 32;
    p.func_rsvd_eqs = 8;
    p.func_rsvd_uars = 2;
    p
}

/// QUERY_FUNC exists on a SYS_EQS device only; INIT_HCA in SYS_EQS mode (log EQs 0x1F,
/// num_sys_eqs) sizes the EQ table, and QUERY_FUNC's reserved EQs bound SW2HW_EQ.
#[test]
fn sys_eqs_and_query_func() {
    let mut r = rig(reduced());
    r.bring_up(0);
    let out = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x056, 0, 0, 0, out), 0x02, "no QUERY_FUNC");

    let mut r = rig(sys_eqs_profile());
    r.start_fw(0);
    let sys = |r: &mut Rig, mb: u64| {
        r.write(0, mb + 0x87, &[0x1f]);
        r.write(0, mb + 0x8a, &[0, 64]);
    };
    assert_eq!(r.init_hca_with(0, sys), 0, "INIT_HCA in SYS_EQS mode");
    let out = r.mailbox(0);
    assert_eq!(r.cmd(0, 0x056, 0, 0, 0, out), 0, "QUERY_FUNC");
    let b = r.read(0, out, 16);
    assert_eq!((be16(&b, 4), be16(&b, 6), b[0xb] & 0xf), (8, 32, 2));
    r.assert_clean(0);
    assert_eq!(r.cmd(0, 0x056, 0, 0, 1, out), 0x03, "function 1");
    let mb = r.mailbox(0);
    r.put32(0, mb, 0x900);
    r.write(0, mb + 0x0c, &[4]);
    assert_eq!(
        r.cmd(0, 0x013, 0, mb, 4, 0),
        0x05,
        "QUERY_FUNC reserves EQ 4"
    );
    assert_eq!(r.cmd(0, 0x013, 0, mb, 64, 0), 0x0a, "beyond num_sys_eqs");
    r.create_eq(0, 40, 5, 0);
    assert_eq!(r.violations(0).len(), 3, "the three refusals only");
}

/// A device that reports port-management changes posts PORT_MNG_CHG (0x1D, subtype PortInfo)
/// with the new LID and SM LID when the SM configures the port; the reduced one does not.
#[test]
fn port_management_change_event_on_a_card_that_reports_it() {
    for (profile, expect) in [
        (DeviceProfile::named("cx3-fdr").unwrap(), true),
        (reduced(), false),
    ] {
        let mut r = Rig::with(
            1,
            FabricConfig {
                manual_clock: true,
                ..Default::default()
            },
            profile,
        );
        r.bring_up(0);
        let eq = r.create_eq(0, 8, 5, 0);
        let mask = (1u64 << 0x1d) | (1 << 0x09);
        assert_eq!(r.cmd(0, 0x012, 0, mask, 8, 0), 0, "MAP_EQ");
        r.init_port(0);
        r.m.fabric().advance(std::time::Duration::from_millis(50));
        let e0 = r.read(0, eq, 32);
        let e1 = r.read(0, eq + 32, 32);
        if expect {
            assert_eq!(
                (e0[1], e0[3]),
                (0x1d, 0x15),
                "PORT_MNG_CHG / PORT_INFO first"
            );
            assert_eq!(e0[7], 1, "port");
            let lid = sim::Fabric::sm_lid_for(0, 1);
            assert_eq!(be16(&e0, 0x0a), lid, "new LID");
            assert_eq!(be16(&e0, 0x08), sim::Fabric::SM_LID, "SM LID");
            let changed = be32v(&e0, 0x0c);
            assert_eq!(
                changed & 0b101,
                0b101,
                "LID and SM LID changed: {changed:#x}"
            );
            assert_eq!((e1[1], e1[3]), (0x09, 4), "then PORT_CHANGE ACTIVE");
        } else {
            assert_eq!((e0[1], e0[3]), (0x09, 4), "only PORT_CHANGE ACTIVE");
        }
        r.assert_clean(0);
    }
}

/// Recoverable-error events (0x3E): reported only when the device offers them and INIT_HCA
/// enabled them.
#[test]
fn recoverable_cable_errors_need_the_offer_and_the_enable() {
    let mut p = reduced();
    p.caps2.recoverable_error_event = true;
    let run = |p: &DeviceProfile, enable: bool| -> (bool, Vec<u8>) {
        let mut r = rig(p.clone());
        r.start_fw(0);
        let st = r.init_hca_with(0, |r, mb| {
            if enable {
                r.put32(0, mb + 0x18, 1 << 31);
            }
        });
        assert_eq!(st, 0);
        let eq = r.create_eq(0, 8, 5, 0);
        assert_eq!(r.cmd(0, 0x012, 0, 1 << 0x3e, 8, 0), 0, "MAP_EQ");
        let h = r.hca(0);
        let posted = r.m.fabric().inject_cable_error(h, 1, false);
        (posted, r.read(0, eq, 32))
    };
    let (posted, e) = run(&p, true);
    assert!(posted);
    assert_eq!((e[1], e[3], e[7]), (0x3e, 1, 1), "bad cable on port 1");
    assert!(!run(&p, false).0, "not enabled in INIT_HCA");
    assert!(!run(&reduced(), false).0, "not offered");
}
