//! The driver on every device profile of the model (sim/profiles): it takes from each what
//! Linux's mlx4 takes (64-byte EQEs and CQEs, steering mode, memory windows, the events it
//! maps, SW_CQ_INIT, SYS_EQS with QUERY_FUNC, reserved XRC domains) and runs its data paths
//! on it. Paths no built-in profile offers (SW_CQ_INIT, SYS_EQS, recoverable-error events)
//! run on a built-in profile with that capability added.

mod common;

use common::pair::{connect, send_connected, Path, QpNode, RECV_OFFSET};
use common::*;
use mlx4::caps::Steering;
use mlx4::Opcode;
use sim::profile::{bmme, dev_cap_flags as flag};
use sim::{DeviceProfile, FabricConfig};
use verbs::*;

/// Two nodes of `profile`, each with a QP of `qp_type` on port 1.
fn pair(profile: &DeviceProfile, qp_type: QpType) -> (sim::inproc::SharedMachine, QpNode, QpNode) {
    let (m, mut ps) = machine_with(2, FabricConfig::default(), profile.clone());
    let b = QpNode::new(ps.remove(1), 1, qp_type, AccessFlags::all());
    let a = QpNode::new(ps.remove(0), 1, qp_type, AccessFlags::all());
    (m, a, b)
}

/// What Linux's mlx4_core decides for `p`, as the driver reports it.
fn check_choices(p: &DeviceProfile, n: &QpNode) {
    let c = n.h.choices();
    let name = &p.name;
    let size = |bit| if p.offers(bit) { 64 } else { 32 };
    assert_eq!(c.eqe_size, size(flag::EQE_64B), "{name}: EQE size");
    assert_eq!(c.cqe_size, size(flag::CQE_64B), "{name}: CQE size");
    let b0 = p.offers(flag::VEP_UC_STEER) && p.offers(flag::VEP_MC_STEER);
    assert_eq!(c.steering == Steering::B0, b0, "{name}: steering");
    let mw = p.offers(flag::MEM_WINDOW) || p.bmme_flags & bmme::TYPE_2_WIN != 0;
    assert_eq!(c.mw_enabled, mw, "{name}: memory windows");
    assert_eq!(c.sw_cq_init, p.caps2.sw_cq_init, "{name}: SW_CQ_INIT");
    let mut mask: u64 = 0x1d1f_46fe;
    if p.offers(flag::PORT_MNG_CHG_EV) {
        mask |= 1 << 0x1D;
    }
    if p.caps2.recoverable_error_event {
        mask |= 1 << 0x3E;
    }
    assert_eq!(c.async_event_mask, mask, "{name}: events mapped");
    let map_eq =
        n.p.commands
            .borrow()
            .iter()
            .find(|r| r.op == Opcode::MAP_EQ)
            .copied()
            .expect("MAP_EQ");
    assert_eq!(map_eq.in_param, mask, "{name}: MAP_EQ's mask");
    let init_hca = &mailboxes_of(&n.p, Opcode::INIT_HCA)[0];
    let en = u32::from_be_bytes(init_hca[0x58..0x5C].try_into().unwrap());
    assert_eq!(
        en & (1 << 29) != 0,
        c.eqe_size == 64,
        "{name}: INIT_HCA 64-byte EQEs"
    );
    assert_eq!(
        en & (1 << 30) != 0,
        c.cqe_size == 64,
        "{name}: INIT_HCA 64-byte CQEs"
    );
    let sw2hw_cq =
        n.p.commands
            .borrow()
            .iter()
            .find(|r| r.op == Opcode::SW2HW_CQ)
            .copied()
            .expect("SW2HW_CQ");
    assert_eq!(
        sw2hw_cq.op_mod,
        u8::from(p.caps2.sw_cq_init),
        "{name}: SW2HW_CQ op_mod"
    );
}

/// `a` and `b` connected over `qp_type` on port 1 (RC: remote read/write/atomic allowed).
fn connect_pair(a: &mut QpNode, b: &mut QpNode, qp_type: QpType) {
    let path = |dlid| Path {
        port: 1,
        dlid,
        sl: 0,
        psn: 0x10,
        access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
    };
    let (qa, qb) = (a.h.qp_num(a.qp), b.h.qp_num(b.qp));
    let (la, lb) = (a.lids[0], b.lids[0]);
    connect(a, qb, qp_type, &path(lb));
    connect(b, qa, qp_type, &path(la));
}

/// A SEND of `len` patterned bytes from `a` to `b`, every byte checked on arrival.
fn send_and_check(a: &mut QpNode, b: &mut QpNode, len: u32, seed: u8) {
    let pattern: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect();
    write_bytes(a, 0, &pattern);
    let r = send_connected(a, b, len);
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, len), "{r:?}");
    assert_eq!(read_bytes(b, RECV_OFFSET, len as usize), pattern);
}

fn write_bytes(n: &QpNode, off: u64, data: &[u8]) {
    n.p.arena.write(n.buf + off, data).unwrap();
}

fn read_bytes(n: &QpNode, off: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    n.p.arena.read(n.buf + off, &mut v).unwrap();
    v
}

/// RDMA WRITE of `len` bytes from `a`'s buffer into `b`'s receive half, then an RDMA READ of
/// them back into `a`'s receive half; both checked.
fn write_read_and_check(a: &mut QpNode, b: &mut QpNode, len: u32) {
    let pattern: Vec<u8> = (0..len).map(|i| (i as u8) ^ 0x5a).collect();
    write_bytes(a, 0, &pattern);
    let rkey = b.h.mr_rkey(b.mr);
    let lkey = a.h.mr_lkey(a.mr);
    let remote_addr = b.buf + RECV_OFFSET;
    for (op, local) in [
        (WrOpcode::RdmaWrite { remote_addr, rkey }, 0),
        (WrOpcode::RdmaRead { remote_addr, rkey }, RECV_OFFSET),
    ] {
        let sge = [Sge {
            addr: a.buf + local,
            length: len,
            lkey,
        }];
        let wr: SendWr<'_, mlx4::Ah> = SendWr {
            wr_id: 7,
            opcode: op,
            payload: Payload::Sges(&sge),
            flags: SendFlags::SIGNALED,
            ud: None,
        };
        a.h.post_send(a.qp, &wr).unwrap();
        let c = a.poll();
        assert_eq!((c.status, c.wr_id), (WcStatus::Success, 7), "{op:?}: {c:?}");
    }
    assert_eq!(read_bytes(b, RECV_OFFSET, len as usize), pattern, "written");
    assert_eq!(
        read_bytes(a, RECV_OFFSET, len as usize),
        pattern,
        "read back"
    );
}

/// A completion event through the completion EQ: the CQ armed, a SEND, the event.
fn completion_event(a: &mut QpNode, b: &mut QpNode) {
    b.h.req_notify_cq(b.cq, false).unwrap();
    send_and_check(a, b, 64, 0x33);
    b.h.get_cq_event(b.cq, 1_000_000_000)
        .expect("completion event through the completion EQ");
}

fn close(a: QpNode, b: QpNode) {
    for n in [a, b] {
        let probe = n.p.clone_handle();
        n.h.close().expect("teardown");
        assert_eq!(
            probe.arena.bytes_in_use(),
            8192,
            "only the test's buffer left"
        );
        assert_no_violations(&probe);
    }
}

/// Every profile (`sim::inproc::test_profiles`: all built-in ones, or those
/// `IBKERN_PROFILES` names): Linux's choices, then UD, UC and RC traffic with payloads
/// checked (RC also RDMA WRITE and READ), and a completion event.
#[test]
fn every_profile_brings_up_with_linuxs_choices_and_runs_its_data_paths() {
    let all = sim::inproc::test_profiles().expect("IBKERN_PROFILES names built-in profiles");
    for p in &all {
        for qp_type in [QpType::Uc, QpType::Rc] {
            let (_m, mut a, mut b) = pair(p, qp_type);
            check_choices(p, &a);
            connect_pair(&mut a, &mut b, qp_type);
            for (len, seed) in [(1, 1), (300, 2), (4000, 3)] {
                send_and_check(&mut a, &mut b, len, seed);
            }
            if qp_type == QpType::Rc {
                write_read_and_check(&mut a, &mut b, 3000);
            }
            completion_event(&mut a, &mut b);
            close(a, b);
        }
        // UD: a datagram each way.
        let (_m, mut a, mut b) = pair(p, QpType::Ud);
        for n in [&mut a, &mut b] {
            let mut init = QpAttr::new(QpState::Init);
            init.qkey = 0x1234;
            n.h.modify_qp(n.qp, &init).unwrap();
            n.h.modify_qp(n.qp, &QpAttr::new(QpState::Rtr)).unwrap();
            n.h.modify_qp(n.qp, &QpAttr::new(QpState::Rts)).unwrap();
        }
        ud_send_and_check(&mut a, &mut b, 1000);
        ud_send_and_check(&mut b, &mut a, 2000);
        close(a, b);
    }
}

/// A UD datagram of `len` bytes from `a` to `b` (Q_Key 0x1234), its payload checked after
/// the 40-byte GRH area.
fn ud_send_and_check(a: &mut QpNode, b: &mut QpNode, len: u32) {
    let pattern: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_add(3)).collect();
    write_bytes(a, 0, &pattern);
    let rsge = [Sge {
        addr: b.buf + RECV_OFFSET,
        length: 4096,
        lkey: b.h.mr_lkey(b.mr),
    }];
    b.h.post_recv(
        b.qp,
        &RecvWr {
            wr_id: 2,
            sg_list: &rsge,
        },
    )
    .unwrap();
    let ah =
        a.h.create_ah(
            a.pd,
            &AhAttr {
                dlid: b.lids[0],
                port: 1,
                ..AhAttr::default()
            },
        )
        .unwrap();
    let sge = [Sge {
        addr: a.buf,
        length: len,
        lkey: a.h.mr_lkey(a.mr),
    }];
    let wr = SendWr {
        wr_id: 1,
        opcode: WrOpcode::Send,
        payload: Payload::Sges(&sge),
        flags: SendFlags::SIGNALED,
        ud: Some(UdDest {
            ah,
            remote_qpn: b.h.qp_num(b.qp),
            remote_qkey: 0x1234,
        }),
    };
    a.h.post_send(a.qp, &wr).unwrap();
    assert_eq!(a.poll().status, WcStatus::Success);
    let r = b.poll();
    assert_eq!(
        (r.status, r.byte_len),
        (WcStatus::Success, len + 40),
        "{r:?}"
    );
    assert_eq!(read_bytes(b, RECV_OFFSET + 40, len as usize), pattern);
}

/// The first real profile with `f` applied.
fn variant(f: impl FnOnce(&mut DeviceProfile)) -> DeviceProfile {
    let mut p = DeviceProfile::named("cx3-fdr").unwrap();
    f(&mut p);
    p
}

/// SW_CQ_INIT (ext-2 bit 23): as Linux's `mlx4_cq_alloc`, the CQEs are filled with 0xCC and
/// SW2HW_CQ carries op_mod 1; the model leaves the CQEs to software then, and records one
/// left without the hardware owner bit.
#[test]
fn sw_cq_init_fills_the_cqes_and_tells_sw2hw_cq() {
    let p = variant(|p| p.caps2.sw_cq_init = true);
    let (_m, mut a, mut b) = pair(&p, QpType::Rc);
    check_choices(&p, &a);
    connect_pair(&mut a, &mut b, QpType::Rc);
    for len in [8, 2048] {
        send_and_check(&mut a, &mut b, len, 9);
    }
    completion_event(&mut a, &mut b);
    close(a, b);
}

/// SYS_EQS (QUERY_DEV_CAP num_sys_eqs ≠ 0): INIT_HCA takes log_num_eqs 0x1F and num_sys_eqs,
/// QUERY_FUNC follows INIT_HCA, and the EQs start at QUERY_FUNC's reserved EQs, the driver's
/// UAR at its reserved UARs (Linux `mlx4_init_hca`, `mlx4_query_func`).
#[test]
fn sys_eqs_mode_takes_the_eqs_and_uars_of_query_func() {
    let p = variant(|p| {
        p.num_sys_eqs = 64;
        p.func_max_eqs = 64;
        p.func_rsvd_eqs = 12;
        p.func_rsvd_uars = 15;
    });
    let (_m, mut a, mut b) = pair(&p, QpType::Uc);
    check_choices(&p, &a);
    let c = *a.h.choices();
    assert_eq!((c.reserved_eqs, c.reserved_uars), (12, 15));
    let func = c.func.expect("QUERY_FUNC's answer");
    assert_eq!((func.rsvd_eqs, func.max_eqs, func.rsvd_uars), (12, 64, 15));
    // The driver's UAR, every CQ's doorbell page, is the first above QUERY_FUNC's reserved
    // ones (legacy mode keeps Linux's 128 below it).
    let cqc = &mailboxes_of(&a.p, Opcode::SW2HW_CQ)[0];
    assert_eq!(
        u32::from_be_bytes(cqc[0x0C..0x10].try_into().unwrap()) & 0xFF_FFFF,
        15
    );
    let cmds = a.p.commands.borrow().clone();
    let at = |op| cmds.iter().position(|r| r.op == op).unwrap();
    assert_eq!(
        at(Opcode::QUERY_FUNC),
        at(Opcode::INIT_HCA) + 1,
        "QUERY_FUNC right after"
    );
    let init_hca = &mailboxes_of(&a.p, Opcode::INIT_HCA)[0];
    assert_eq!(init_hca[0x87] & 0x1F, 0x1F, "log_num_eqs");
    assert_eq!(u16::from_be_bytes([init_hca[0x8A], init_hca[0x8B]]), 64);
    let eqns: Vec<u32> = cmds
        .iter()
        .filter(|r| r.op == Opcode::SW2HW_EQ)
        .map(|r| r.in_mod)
        .collect();
    assert_eq!(eqns, [12, 13]);
    connect_pair(&mut a, &mut b, QpType::Uc);
    send_and_check(&mut a, &mut b, 1024, 4);
    completion_event(&mut a, &mut b);
    close(a, b);
}

/// Recoverable-error events (QUERY_DEV_CAP 0x9C bit 7): INIT_HCA 0x18 bit 31, MAP_EQ maps
/// event 0x3E, and a cable event reaches the driver as an asynchronous event.
#[test]
fn recoverable_error_events_are_enabled_mapped_and_taken() {
    let p = variant(|p| p.caps2.recoverable_error_event = true);
    let (m, a, b) = pair(&p, QpType::Uc);
    check_choices(&p, &a);
    let init_hca = &mailboxes_of(&a.p, Opcode::INIT_HCA)[0];
    assert_eq!(init_hca[0x18] & 0x80, 0x80, "INIT_HCA 0x18 bit 31");
    let mut a = a;
    let before = a.h.async_events();
    assert!(m.borrow_mut().fabric().inject_cable_error(a.p.hca, 1, true));
    a.h.process_events();
    assert_eq!(a.h.async_events(), before + 1, "the cable event was taken");
    close(a, b);
}

/// BAR0's and BAR2's sizes found as a PCI enumeration finds them: all ones written to the
/// 64-bit BAR, the size read back from the bits that stay 0, the BAR restored.
fn bar_sizes(p: &SimPlatform) -> [Option<u64>; 2] {
    use mlx4::Platform;
    [0x10u16, 0x18].map(|off| {
        let (lo, hi) = (p.config_read32(off), p.config_read32(off + 4));
        p.config_write32(off, u32::MAX);
        p.config_write32(off + 4, u32::MAX);
        let mask =
            (u64::from(p.config_read32(off + 4)) << 32) | u64::from(p.config_read32(off) & !0xF);
        p.config_write32(off, lo);
        p.config_write32(off + 4, hi);
        (mask != 0).then(|| !mask + 1)
    })
}

/// The capability report (`mode=diag`) of the driver on `p`, as the kernel prints it, and
/// the profile file the host tool makes of it: the same profile, on every profile and on the
/// variants that report what no built-in profile does (SYS_EQS with QUERY_FUNC, SW_CQ_INIT,
/// recoverable-error events, strides). The node GUID is written 0 (the fabric's), citing
/// the card's.
#[test]
fn the_diag_report_reads_back_into_the_profile_it_ran_on() {
    let mut profiles = DeviceProfile::all();
    profiles.push(variant(|p| {
        p.name = "variant".into();
        p.num_sys_eqs = 64;
        p.func_max_eqs = 64;
        p.func_rsvd_eqs = 12;
        p.func_rsvd_uars = 15;
        p.caps2.sw_cq_init = true;
        p.caps2.recoverable_error_event = true;
        p.caps2.cqe_stride = true;
        p.caps2.eqe_stride = true;
        p.board_id = "MT_\"odd\"\\id".into();
        p.node_description = "node # one".into();
    }));
    for p in profiles {
        let name = p.name.clone();
        let (_m, mut ps) = machine_with(1, FabricConfig::default(), p.clone());
        let plat = ps.remove(0);
        let bars = bar_sizes(&plat);
        let mut h = mlx4::Hca::init(plat, test_config()).unwrap();
        let report = h.capability_report(bars);
        let text: String = report
            .lines
            .iter()
            .map(|l| format!("diag: {l}\n"))
            .collect();
        let (file_text, file) = sim::diag_profile::profile_from_diag(&text, &name)
            .unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
        let mut want = p.clone();
        want.node_guid = 0;
        assert_eq!(file.profile, want, "{name}\n{text}\n{file_text}");
        let guid = verbs::Device::query_device(&h).node_guid;
        assert!(
            file.citations["port.node_guid"].contains(&format!("{guid:#x}")),
            "{name}: {}",
            file.citations["port.node_guid"]
        );
        assert_eq!(
            file.citations["dev_cap.log_max_qps"],
            "diag: QUERY_DEV_CAP 0x13 bits 4:0"
        );
        // Beside each capability, what the driver made of it.
        let line = |key: &str| {
            report
                .lines
                .iter()
                .find(|l| l.starts_with(&format!("cap {key} = ")))
                .unwrap_or_else(|| panic!("{name}: no {key}"))
                .clone()
        };
        assert!(
            line("flags.eqe_64b").ends_with(if p.offers(flag::EQE_64B) {
                "driver: 64-byte EQEs enabled in INIT_HCA"
            } else {
                "driver: 32-byte EQEs"
            }),
            "{}",
            line("flags.eqe_64b")
        );
        let qpc = h.profile().unwrap().get(mlx4::caps::Table::Qpc).num;
        assert!(
            line("dev_cap.log_max_qps").ends_with(&format!("driver: QP table of {qpc}")),
            "{}",
            line("dev_cap.log_max_qps")
        );
        assert!(report
            .lines
            .iter()
            .any(|l| l.starts_with("chose eq.completion = EQ ")));
        assert!(report
            .lines
            .iter()
            .any(|l| l.starts_with("raw QUERY_DEV_CAP 0f0: ")));
        h.close().unwrap();
    }
}
