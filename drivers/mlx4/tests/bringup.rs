//! Bring-up, teardown, events and ports against the in-process model.

mod common;

use common::*;
use mlx4::IrqMode;
use mlx4::{Config, Error, FwStatus, Hca, Opcode};
use sim::{CommandFault, CommandFaultAction, DeviceProfile, FabricConfig, Faults};
use verbs::{Device, PortState};

/// One node whose model applies `action` to `opcode` commands `times` times after letting
/// `skip` of them pass; the machine (keep it while the node is used) and the node.
fn node_with_command_fault(
    opcode: Opcode,
    action: CommandFaultAction,
    times: u32,
    skip: u32,
) -> (sim::inproc::SharedMachine, SimPlatform) {
    let faults = Faults {
        commands: vec![CommandFault {
            hca: None,
            opcode: opcode.raw(),
            action,
            times,
            skip,
        }],
        ..Faults::default()
    };
    let fabric = FabricConfig {
        faults,
        ..FabricConfig::default()
    };
    let (m, mut ps) = machine(1, fabric);
    (m, ps.remove(0))
}

#[test]
fn bring_up_to_init_hca_and_tear_down_polling() {
    let (_m, mut ps) = machine(1, FabricConfig::default());
    let p = ps.remove(0);
    let probe = p.clone_handle();
    let cfg = Config {
        use_events: false,
        init_ports: false,
        ..test_config()
    };
    let h = Hca::init(p, cfg).expect("bring-up");
    assert_eq!(h.fw_info().cmd_if_rev, 3);
    assert_eq!(
        (h.fw_info().major, h.fw_info().minor, h.fw_info().subminor),
        (2, 42, 5000)
    );
    let mem = h.mem_stats();
    assert_eq!(mem.fa_bytes, 256 * 4096, "FA = fw_pages x 4 KiB");
    assert!(mem.aux_bytes >= 4096);
    assert!(
        mem.icm_bytes > 0 && mem.icm_bytes < 8 << 20,
        "ICM sized to the config: {mem:?}"
    );
    assert!(probe.arena.bytes_in_use() > 0);
    assert!(!h.events_enabled(), "commands stay polled");
    h.close().expect("teardown");
    assert_eq!(probe.arena.bytes_in_use(), 0, "all DMA memory returned");
    assert_no_violations(&probe);
}

#[test]
fn event_queue_command_events_and_nop_interrupt_msix() {
    let (_m, mut ps) = machine(1, FabricConfig::default());
    let p = ps.remove(0);
    let probe = p.clone_handle();
    let mut h = Hca::init(
        p,
        Config {
            init_ports: false,
            ..test_config()
        },
    )
    .expect("bring-up");
    assert!(h.events_enabled());
    assert_eq!(h.irq_mode(), IrqMode::Msix);
    // Every further command completes through the EQ; each NOP raises vector 0.
    for _ in 0..5 {
        h.nop().expect("NOP by event");
        assert!(
            h.take_interrupt(mlx4::IrqLine::Msix(0)),
            "MSI-X vector 0 fired"
        );
    }
    h.close().expect("teardown");
    assert_eq!(probe.arena.bytes_in_use(), 0);
    assert_no_violations(&probe);
}

#[test]
fn intx_fallback_when_the_platform_has_no_msix() {
    let (_m, mut ps) = machine(1, FabricConfig::default());
    let mut p = ps.remove(0);
    p.msix = false;
    let probe = p.clone_handle();
    let mut h = Hca::init(
        p,
        Config {
            init_ports: false,
            ..test_config()
        },
    )
    .expect("bring-up");
    assert_eq!(h.irq_mode(), IrqMode::Intx);
    h.nop().expect("NOP by event");
    assert!(h.take_interrupt(mlx4::IrqLine::Intx));
    h.handle_interrupt();
    h.close().expect("teardown");
    assert_no_violations(&probe);
}

/// MSI-X offered but its messages lost: as Linux's `mlx4_load_one` runs its EQ setup again
/// without MSI-X, the driver tears the EQs down (MAP_EQ unmap, HW2SW_EQ, polled) and creates
/// them anew for INTx before the second NOP test, rather than only switching the line.
#[test]
fn lost_msix_interrupts_rebuild_the_eqs_for_intx() {
    let (_m, mut ps) = machine(1, FabricConfig::default());
    let mut p = ps.remove(0);
    p.msix_lost = true;
    let probe = p.clone_handle();
    let mut h = Hca::init(
        p,
        Config {
            init_ports: false,
            ..test_config()
        },
    )
    .expect("bring-up");
    assert_eq!(h.irq_mode(), IrqMode::Intx);
    let cmds = probe.commands.borrow().clone();
    let nops: Vec<usize> = (0..cmds.len())
        .filter(|&i| cmds[i].op == Opcode::NOP)
        .collect();
    assert_eq!(nops.len(), 2, "one NOP test per line");
    let between: Vec<(Opcode, bool)> = cmds[nops[0] + 1..nops[1]]
        .iter()
        .map(|r| (r.op, r.event))
        .collect();
    let unmap = (Opcode::MAP_EQ, false);
    assert_eq!(
        between,
        [
            unmap,
            (Opcode::HW2SW_EQ, false),
            (Opcode::HW2SW_EQ, false),
            (Opcode::SW2HW_EQ, false),
            (Opcode::SW2HW_EQ, false),
            (Opcode::MAP_EQ, false),
        ],
        "the EQs rebuilt, polled, between the two NOP tests"
    );
    assert!(cmds[nops[1]].event, "the second NOP completes by event");
    h.nop().expect("NOP by event");
    assert!(h.take_interrupt(mlx4::IrqLine::Intx));
    h.handle_interrupt();
    h.close().expect("teardown");
    assert_eq!(probe.arena.bytes_in_use(), 0);
    assert_no_violations(&probe);
}

/// Linux's EQs (`mlx4_init_eq_table`): the async EQ of 256 + 128 entries takes the async
/// and command events (MAP_EQ); a completion EQ of `CQs − reserved CQs + 128` entries, the
/// next EQN, is every CQ's `comp_eqn`; both in 4 KiB pages with one MTT entry each.
#[test]
fn eqs_are_split_async_and_completion_sized_as_linux_sizes_them() {
    let (_m, mut ps) = machine(1, FabricConfig::default());
    let p = ps.remove(0);
    let probe = p.clone_handle();
    let cfg = Config {
        init_ports: false,
        max_cqs: 1000,
        ..test_config()
    };
    let mut h = Hca::init(p, cfg).expect("bring-up");
    let cq = h.create_cq(16).unwrap();
    let rsvd_eqs = h.caps().reserved_eqs;
    let cq_table = h.profile().unwrap().get(mlx4::caps::Table::Cqc).num as u32;
    let cqs = cq_table - h.caps().reserved_cqs;
    assert!(cqs >= 1000);
    let eq_cmds: Vec<mlx4::CmdRecord> = probe
        .commands
        .borrow()
        .iter()
        .filter(|r| r.op == Opcode::SW2HW_EQ || r.op == Opcode::MAP_EQ)
        .copied()
        .collect();
    let eqns: Vec<u32> = eq_cmds.iter().map(|r| r.in_mod).collect();
    assert_eq!(
        eqns,
        [rsvd_eqs, rsvd_eqs + 1, rsvd_eqs],
        "SW2HW_EQ ×2, MAP_EQ"
    );
    assert_eq!(eq_cmds[2].in_param, 0x1d1f_46fe, "Linux's async event mask");
    let log_sizes: Vec<u8> = mailboxes_of(&probe, Opcode::SW2HW_EQ)
        .iter()
        .map(|b| b[0x0C])
        .collect();
    let comp = (cqs + 128).next_power_of_two().trailing_zeros() as u8;
    assert_eq!(log_sizes, [9, comp]);
    let cqc = mailboxes_of(&probe, Opcode::SW2HW_CQ);
    assert_eq!(u32::from(cqc[0][0x17]), rsvd_eqs + 1, "comp_eqn");
    // Completion events still arrive (through the completion EQ).
    h.req_notify_cq(cq, false).unwrap();
    h.close().expect("teardown");
    assert_eq!(probe.arena.bytes_in_use(), 0);
    assert_no_violations(&probe);
}

#[test]
fn bring_up_and_tear_down_ten_times_without_leaks() {
    let (_m, mut ps) = machine(1, FabricConfig::default());
    let p = ps.remove(0);
    let mut first_mem = None;
    for i in 0..10 {
        let mut h =
            Hca::init(p.clone_handle(), test_config()).unwrap_or_else(|e| panic!("round {i}: {e}"));
        // Create and destroy some objects each round too.
        let pd = h.alloc_pd().unwrap();
        let cq = h.create_cq(64).unwrap();
        let buf = p.arena.alloc(8192, 4096).unwrap();
        let mr = h
            .reg_mr(pd, buf, 8192, verbs::AccessFlags::LOCAL_WRITE)
            .unwrap();
        assert!(h.mtts_in_use() > 0);
        let mem = h.mem_stats();
        if let Some(m) = first_mem {
            assert_eq!(m, mem, "same memory every round");
        }
        first_mem = Some(mem);
        h.dereg_mr(mr).unwrap();
        h.destroy_cq(cq).unwrap();
        h.close()
            .unwrap_or_else(|e| panic!("round {i} teardown: {e}"));
        assert!(p.arena.free(buf));
        assert_eq!(p.arena.bytes_in_use(), 0, "round {i}: leaked DMA memory");
    }
    assert_no_violations(&p);
}

#[test]
fn init_port_reaches_active_with_lid_from_the_subnet_manager() {
    let (_m, mut ps) = machine(2, FabricConfig::default());
    let p1 = ps.remove(1);
    let p0 = ps.remove(0);
    let probe = p0.clone_handle();
    let mut h0 = Hca::init(p0, test_config()).expect("bring-up 0");
    let mut h1 = Hca::init(p1, test_config()).expect("bring-up 1");
    let a0 = h0.wait_port_active(1, 5000).expect("port 1 active");
    let a1 = h1.wait_port_active(1, 5000).expect("port 1 active");
    assert_eq!(a0.state, PortState::Active);
    assert_ne!(a0.lid, 0);
    assert_ne!(a0.lid, a1.lid, "distinct LIDs");
    assert_ne!(a0.sm_lid, 0);
    assert_eq!(a0.gid.0[0], 0xFE, "link-local GID prefix");
    assert_ne!(a0.gid, a1.gid);
    let q = h0.query_port(1).unwrap();
    assert_eq!(q.lid, a0.lid);
    let guid = h0.node_guid().unwrap();
    assert_ne!(guid, 0);
    assert_eq!(h0.query_device().node_guid, guid);
    let qp = h0.query_port_cmd(1).unwrap();
    assert!(qp.link_up);
    let text = std::format!("{}", h0.summary());
    assert!(
        text.starts_with(
            "mlx4: firmware 2.42.5000, board MT_1090120019, 1 port(s), interrupts MSI-X\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(&std::format!(
            "mlx4: port 1: ACTIVE lid 0x{:x} sm_lid 0x{:x} gid fe80:",
            a0.lid,
            a0.sm_lid
        )),
        "{text}"
    );
    assert!(
        text.contains("mlx4: memory: firmware area 1024 KiB"),
        "{text}"
    );
    // Usable objects: table size (reserved + configured, rounded up) minus reserved.
    assert!(text.contains("mlx4: capacities: 64 QPs, "), "{text}");
    assert!(text.ends_with(", 4096 MTT entries"), "{text}");
    h0.close().unwrap();
    h1.close().unwrap();
    assert_no_violations(&probe);
}

#[test]
fn port_without_subnet_manager_stays_init_and_wait_is_bounded() {
    let (_m, mut ps) = machine(
        1,
        FabricConfig {
            subnet_manager: false,
            ..FabricConfig::default()
        },
    );
    let p = ps.remove(0);
    let probe = p.clone_handle();
    let mut h = Hca::init(p, test_config()).expect("bring-up");
    match h.wait_port_active(1, 50) {
        Err(Error::PortNotActive { port: 1, state }) => assert_eq!(state, PortState::Init),
        other => panic!("expected PortNotActive, got {other:?}"),
    }
    h.close().unwrap();
    assert_no_violations(&probe);
}

/// Each bring-up command failing in turn ends in a typed error naming it, and everything
/// built before it is torn down (no leaked memory, device reusable).
/// What the every-step test runs: bring-up, a few objects (so teardown has QP, CQ and MR
/// commands to issue), teardown. Returns the outcome of bring-up, or of teardown, and the
/// virtual time each took.
struct Run {
    init: Result<(), Error>,
    close: Option<Result<(), Error>>,
    init_ns: u64,
    close_ns: u64,
}

fn life(p: SimPlatform, cfg: Config) -> Run {
    let clock = p.clone_handle();
    let t0 = mlx4::Platform::now_ns(&clock);
    let mut h = match Hca::init(p, cfg) {
        Ok(h) => h,
        Err(e) => {
            return Run {
                init: Err(e),
                close: None,
                init_ns: mlx4::Platform::now_ns(&clock) - t0,
                close_ns: 0,
            }
        }
    };
    let init_ns = mlx4::Platform::now_ns(&clock) - t0;
    let buf = clock.arena.alloc(8192, 4096).unwrap();
    let pd = h.alloc_pd().unwrap();
    let mr = h.reg_mr(pd, buf, 8192, verbs::AccessFlags::LOCAL_WRITE);
    let cq = h.create_cq(8);
    let qp = cq.as_ref().ok().map(|&cq| {
        let qp = h.create_qp(&verbs::QpInitAttr {
            pd,
            send_cq: cq,
            recv_cq: cq,
            qp_type: verbs::QpType::Ud,
            cap: verbs::QpCap {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        });
        if let Ok(qp) = qp {
            let mut a = verbs::QpAttr::new(verbs::QpState::Init);
            a.qkey = 1;
            h.modify_qp(qp, &a).expect("QP to INIT");
        }
        qp
    });
    assert!(
        mr.is_ok() && cq.is_ok() && matches!(qp, Some(Ok(_))),
        "objects"
    );
    let t1 = mlx4::Platform::now_ns(&clock);
    let close = h.close();
    let close_ns = mlx4::Platform::now_ns(&clock) - t1;
    assert!(clock.arena.free(buf));
    Run {
        init: Ok(()),
        close: Some(close),
        init_ns,
        close_ns,
    }
}

/// Every bring-up and teardown command in turn — each occurrence of each opcode — fails with
/// a firmware status, or never completes. Each time the run ends with that first error
/// (bring-up's from `Hca::init`, teardown's from `close`), promptly (within one command
/// timeout and one reset of the clean run's time, in the model's virtual time), no memory
/// the device still holds is freed (the model checks every free against what was donated
/// with MAP_FA, MAP_ICM_AUX and MAP_ICM), nothing leaks, and the device comes up again.
#[test]
fn every_bring_up_and_teardown_command_failing_or_stuck_ends_promptly_and_safely() {
    let cfg = Config {
        cmd_timeout_ms: 100,
        ..test_config()
    };
    // The clean run: which commands bring-up and teardown issue, and how long they take.
    let (_m, mut ps) = machine(1, FabricConfig::default());
    let p = ps.remove(0);
    let probe = p.clone_handle();
    let clean = life(p, cfg);
    assert!(clean.init.is_ok() && matches!(clean.close, Some(Ok(()))));
    assert_no_violations(&probe);
    let log: Vec<Opcode> = probe.commands.borrow().iter().map(|r| r.op).collect();
    let op_mods: Vec<u8> = probe.commands.borrow().iter().map(|r| r.op_mod).collect();
    // Bring-up commands whose failed status Linux only logs, so the driver goes on: the uplink
    // GUID query (MOD_STAT_CFG op_mod 2, mlx4_get_phys_port_id) and the PortInfo read whose
    // capability mask goes into SET_PORT (the MAD_IFC right before it, mlx4_get_port_ib_caps:
    // "continuing with caps = 0").
    let tolerated = |k: usize| {
        (log[k] == Opcode::MOD_STAT_CFG && op_mods[k] == 2)
            || (log[k] == Opcode::MAD_IFC && log.get(k + 1) == Some(&Opcode::SET_PORT))
    };
    let init_len = log
        .iter()
        .rposition(|&op| op == Opcode::INIT_PORT)
        .expect("INIT_PORT")
        + 1;
    let close_from = log
        .iter()
        .rposition(|&op| op == Opcode::ERR2RST_QP)
        .expect("the QP is reset first in teardown");
    assert!(log[init_len..close_from].contains(&Opcode::SW2HW_CQ));
    let teardown = &log[close_from..];
    for op in [
        Opcode::HW2SW_CQ,
        Opcode::HW2SW_MPT,
        Opcode::CLOSE_PORT,
        Opcode::MAP_EQ,
        Opcode::HW2SW_EQ,
        Opcode::CLOSE_HCA,
        Opcode::UNMAP_ICM,
        Opcode::UNMAP_ICM_AUX,
        Opcode::UNMAP_FA,
    ] {
        assert!(teardown.contains(&op), "{op:?} in {teardown:?}");
    }
    let slack = 100 * 1_000_000 + cfg.reset_wait_ms * 1_000_000 + 50_000_000;

    let steps = (0..init_len).chain(close_from..log.len());
    let mut runs = 0;
    for k in steps {
        let op = log[k];
        let nth = log[..k].iter().filter(|&&o| o == op).count() as u32;
        for action in [
            CommandFaultAction::Fail(0x03),
            CommandFaultAction::Delay(std::time::Duration::from_secs(3600)),
        ] {
            let what = format!("{op:?} #{nth} {action:?}");
            let (_m, p) = node_with_command_fault(op, action, 1, nth);
            let probe = p.clone_handle();
            let run = life(p, cfg);
            if k < init_len && tolerated(k) && matches!(action, CommandFaultAction::Fail(_)) {
                assert!(run.init.is_ok(), "{what}: {:?}", run.init);
                assert!(matches!(run.close, Some(Ok(()))), "{what}: {:?}", run.close);
                let v = violations(&probe);
                assert!(v.is_empty(), "{what}: model violations:\n{}", v.join("\n"));
                assert_eq!(probe.arena.bytes_in_use(), 0, "{what}: leaked DMA memory");
                runs += 1;
                continue;
            }
            let first = if k < init_len {
                assert!(run.close.is_none(), "{what}: bring-up succeeded");
                assert!(
                    run.init_ns <= clean.init_ns + slack,
                    "{what}: bring-up took {} ms",
                    run.init_ns / 1_000_000
                );
                run.init.unwrap_err()
            } else {
                assert!(run.init.is_ok(), "{what}: {:?}", run.init);
                assert!(
                    run.close_ns <= clean.close_ns + slack,
                    "{what}: teardown took {} ms",
                    run.close_ns / 1_000_000
                );
                run.close.unwrap().unwrap_err()
            };
            match (action, first) {
                (CommandFaultAction::Fail(_), Error::Cmd(e)) => {
                    assert_eq!((e.op, e.status), (op, FwStatus::BadParam), "{what}")
                }
                (CommandFaultAction::Delay(_), Error::CmdTimeout { op: o }) => {
                    assert_eq!(o, op, "{what}")
                }
                (_, e) => panic!("{what}: first error {e:?}"),
            }
            let v = violations(&probe);
            assert!(v.is_empty(), "{what}: model violations:\n{}", v.join("\n"));
            assert_eq!(probe.arena.bytes_in_use(), 0, "{what}: leaked DMA memory");
            // The device comes up again (once per step: the reset path is the stuck one).
            if matches!(action, CommandFaultAction::Delay(_)) {
                let h = Hca::init(probe.clone_handle(), test_config())
                    .unwrap_or_else(|e| panic!("{what}: re-init failed: {e}"));
                h.close().unwrap();
                let v = violations(&probe);
                assert!(v.is_empty(), "{what}: after re-init:\n{}", v.join("\n"));
            }
            runs += 1;
        }
    }
    assert!(runs > 2 * 40, "{runs} runs");
}

#[test]
fn command_that_never_completes_times_out() {
    let (_m, p) = node_with_command_fault(
        Opcode::QUERY_DEV_CAP,
        CommandFaultAction::Delay(std::time::Duration::from_secs(3600)),
        1,
        0,
    );
    let probe = p.clone_handle();
    let cfg = Config {
        cmd_timeout_ms: 100,
        ..test_config()
    };
    match Hca::init(p, cfg) {
        Err(Error::CmdTimeout { op }) => assert_eq!(op, Opcode::QUERY_DEV_CAP),
        other => panic!("expected a timeout, got {:?}", other.err()),
    }
    assert_eq!(probe.arena.bytes_in_use(), 0);
}

/// In event mode a command whose completion is late times out (typed, bounded); a later
/// command ignores the stale completion (token mismatch) and succeeds.
#[test]
fn late_command_in_event_mode_times_out_and_the_next_command_still_works() {
    // Twice: the bring-up NOP test is delayed too (it still passes: 150 < 2000).
    let (_m, p) = node_with_command_fault(
        Opcode::NOP,
        CommandFaultAction::Delay(std::time::Duration::from_millis(150)),
        2,
        0,
    );
    let probe = p.clone_handle();
    let mut h = Hca::init(
        p,
        Config {
            init_ports: false,
            ..test_config()
        },
    )
    .expect("bring-up");
    assert!(h.events_enabled());
    // Shorten nothing: the second NOP is delayed 150 ms; 2000 ms timeout passes it. Use a
    // CQ creation after it to show the stream of tokens stays consistent.
    h.nop().expect("delayed NOP completes within the timeout");
    let cq = h.create_cq(8).expect("next command after a delayed one");
    h.destroy_cq(cq).unwrap();
    h.close().unwrap();
    assert_eq!(probe.arena.bytes_in_use(), 0);
    assert_no_violations(&probe);
}

#[test]
fn command_timeout_in_event_mode_is_typed_and_bounded() {
    let (_m, p) = node_with_command_fault(
        Opcode::SW2HW_CQ,
        CommandFaultAction::Delay(std::time::Duration::from_millis(150)),
        1,
        0,
    );
    let probe = p.clone_handle();
    let cfg = Config {
        init_ports: false,
        cmd_timeout_ms: 100,
        ..test_config()
    };
    let mut h = Hca::init(p, cfg).expect("bring-up");
    let t0 = mlx4::Platform::now_ns(&probe);
    match h.create_cq(8) {
        Err(verbs::Error::Timeout(name)) => assert_eq!(name, "SW2HW_CQ"),
        other => panic!("expected a SW2HW_CQ timeout, got {other:?}"),
    }
    // As Linux: the device is reset at once (so the CQ it may have taken cannot be written
    // into the buffer the driver then frees) and treated as failed.
    assert!(h.device_failed());
    let waited = mlx4::Platform::now_ns(&probe) - t0;
    assert!(
        waited <= (100 + 1000 + 50) * 1_000_000,
        "one timeout and one reset, not more: {} ms",
        waited / 1_000_000
    );
    // Later commands are not posted: they fail at once instead of waiting on the HCR.
    let t1 = mlx4::Platform::now_ns(&probe);
    assert_eq!(h.nop(), Err(Error::DeviceFailed { op: Opcode::NOP }));
    assert!(matches!(
        h.create_cq(8),
        Err(verbs::Error::DeviceFailed { name: "SW2HW_CQ" })
    ));
    assert_eq!(mlx4::Platform::now_ns(&probe), t1, "no wait at all");
    let log = probe.commands.borrow().clone();
    assert_eq!(log.last().unwrap().outcome, mlx4::CmdOutcome::DeviceFailed);
    // Teardown's releasing commands succeed without being posted; everything is freed,
    // after the reset, so nothing the device held is freed under it.
    h.close().expect("teardown of a failed device");
    assert_eq!(probe.arena.bytes_in_use(), 0);
    assert_no_violations(&probe);
}

#[test]
fn every_command_is_reported_to_the_platform_with_its_outcome() {
    // A failing INIT_HCA: the log shows the bring-up up to it, the failure with its firmware
    // status, then the teardown of what was built (what `mode=diag` prints).
    let (_m, p) = node_with_command_fault(Opcode::INIT_HCA, CommandFaultAction::Fail(0x03), 1, 0);
    let probe = p.clone_handle();
    assert!(Hca::init(p, test_config()).is_err());
    let log = probe.commands.borrow().clone();
    let ops: Vec<Opcode> = log.iter().map(|r| r.op).collect();
    assert_eq!(ops[0], Opcode::QUERY_FW, "{ops:?}");
    let failed = log
        .iter()
        .position(|r| r.outcome != mlx4::CmdOutcome::Ok)
        .expect("a failed command");
    assert_eq!(log[failed].op, Opcode::INIT_HCA);
    assert_eq!(
        log[failed].outcome,
        mlx4::CmdOutcome::Status(FwStatus::BadParam)
    );
    // Teardown after the failure: ICM and the firmware area are unmapped again.
    let after: Vec<Opcode> = ops[failed + 1..].to_vec();
    assert!(after.contains(&Opcode::UNMAP_ICM_AUX), "{after:?}");
    assert!(after.contains(&Opcode::UNMAP_FA), "{after:?}");
    assert!(log[failed + 1..]
        .iter()
        .all(|r| r.outcome == mlx4::CmdOutcome::Ok));
    assert!(
        log.iter().all(|r| !r.event),
        "events are enabled after INIT_HCA"
    );

    // A full bring-up: one record per command issued, the later ones completed by events.
    probe.commands.borrow_mut().clear();
    let h = Hca::init(probe.clone_handle(), test_config()).expect("bring-up");
    let log = probe.commands.borrow().clone();
    assert_eq!(log.len() as u64, h.commands_issued());
    assert!(log.iter().all(|r| r.outcome == mlx4::CmdOutcome::Ok));
    let nop = log.iter().find(|r| r.op == Opcode::NOP).expect("NOP test");
    assert!(nop.event, "the NOP test runs with command events");
    let init_port = log.iter().find(|r| r.op == Opcode::INIT_PORT).unwrap();
    assert_eq!(init_port.in_mod, 1, "INIT_PORT in_mod = port");
    h.close().unwrap();
    assert_no_violations(&probe);
}

#[test]
fn catastrophic_error_buffer_is_read_and_an_internal_error_is_typed() {
    let (m, mut ps) = machine(1, FabricConfig::default());
    let p = ps.remove(0);
    let probe = p.clone_handle();
    let h = Hca::init(p, test_config()).expect("bring-up");
    let clean = h.read_catas();
    assert_eq!(clean.words().len(), 16, "QUERY_FW's buffer size");
    assert!(!clean.is_error());
    assert_eq!(h.check_catas(), Ok(()));

    m.borrow_mut()
        .fabric()
        .inject_internal_error(probe.hca, &[0x0000_0b0e, 0x1234_5678]);
    let buf = h.read_catas();
    assert!(buf.is_error());
    assert_eq!(&buf.words()[..3], &[0x0000_0b0e, 0x1234_5678, 0]);
    assert_eq!(
        h.check_catas(),
        Err(Error::InternalError { syndrome: 0x0b0e })
    );
    assert_eq!(
        verbs::Error::from(Error::InternalError { syndrome: 0x0b0e }),
        verbs::Error::DeviceFatal { syndrome: 0x0b0e }
    );
    h.close().unwrap();
    assert_no_violations(&probe);
    // The reset of the next bring-up clears it.
    let h = Hca::init(probe.clone_handle(), test_config()).expect("bring-up");
    assert_eq!(h.check_catas(), Ok(()));
    h.close().unwrap();
}

/// Bring-up in Linux's order (mlx4_core `mlx4_init_fw`, `mlx4_init_hca`, `mlx4_setup_hca`):
/// MOD_STAT_CFG right after RUN_FW with log_pg_sz_m = 1 / log_pg_sz = 0, INIT_HCA with the
/// UD AV port check and counters, SET_PORT (MTU cap 4096, 8 VLs, the port's capability mask)
/// after the NOP test and before INIT_PORT.
#[test]
fn bring_up_follows_linux_order_with_mod_stat_cfg_and_set_port() {
    let (_m, mut ps) = machine(1, FabricConfig::default());
    let p = ps.remove(0);
    let probe = p.clone_handle();
    let h = Hca::init(p, test_config()).expect("bring-up");
    let ops: Vec<Opcode> = probe.commands.borrow().iter().map(|r| r.op).collect();
    let at = |op: Opcode| {
        ops.iter()
            .position(|&o| o == op)
            .unwrap_or_else(|| panic!("{op:?} not issued: {ops:?}"))
    };
    assert_eq!(at(Opcode::MOD_STAT_CFG), at(Opcode::RUN_FW) + 1, "{ops:?}");
    assert!(at(Opcode::MOD_STAT_CFG) < at(Opcode::QUERY_DEV_CAP));
    assert!(at(Opcode::NOP) < at(Opcode::SET_PORT));
    assert!(at(Opcode::SET_PORT) < at(Opcode::INIT_PORT));
    assert_eq!(
        ops.iter().filter(|&&o| o == Opcode::SET_PORT).count(),
        1,
        "the model takes 8 VLs at once, as a ConnectX-3"
    );
    let caps = h.caps();
    assert_ne!(
        caps.flags & mlx4::caps::flag::COUNTERS,
        0,
        "the model reports counters"
    );
    assert_eq!(caps.max_counters, 128);
    h.close().unwrap();
    assert_no_violations(&probe);
}

/// SET_PORT's VL cap is probed 8, 4, 2, 1 while the firmware answers "exceeds limits" (Linux's
/// `mlx4_SET_PORT` retries on -ENOMEM); the port then advertises the cap that was taken.
#[test]
fn set_port_offers_fewer_vls_while_the_firmware_says_exceeds_limits() {
    let (_m, p) = node_with_command_fault(Opcode::SET_PORT, CommandFaultAction::Fail(0x08), 1, 0);
    let probe = p.clone_handle();
    let mut h = Hca::init(p, test_config()).expect("bring-up survives one refusal");
    let set_ports: Vec<_> = probe
        .commands
        .borrow()
        .iter()
        .filter(|r| r.op == Opcode::SET_PORT)
        .map(|r| r.outcome)
        .collect();
    assert_eq!(
        set_ports,
        vec![
            mlx4::CmdOutcome::Status(FwStatus::ExceedLim),
            mlx4::CmdOutcome::Ok
        ]
    );
    let pi = h.mad_get(1, 0x15, 1).unwrap();
    assert_eq!(pi[37] >> 4, 3, "VLCap VL0-3: the 4 VLs of the second offer");
    assert_eq!(pi[41] & 0xF, 5, "MTUCap 4096");
    h.close().unwrap();
    assert_no_violations(&probe);
}

/// The driver's views of the query commands' output mailboxes (`mlx4::outbox`) and the model's
/// own writers of them (sim/src/cmd) are independent definitions of the same layouts: what the
/// driver decodes must be exactly what the model's profile says it reported, field by field.
/// Every field is set to a value distinct from its neighbours so that a shifted offset shows.
#[test]
fn query_outputs_decode_to_what_the_model_reported() {
    let profile = DeviceProfile {
        log_max_qp_sz: 13,
        log_rsvd_qps: 5,
        log_max_qps: 17,
        log_rsvd_srqs: 3,
        log_max_srqs: 9,
        log_max_cq_sz: 21,
        log_rsvd_cqs: 6,
        log_max_cqs: 15,
        log_max_mpts: 18,
        log_rsvd_mtts: 4,
        log_rsvd_mrws: 2,
        local_ca_ack_delay: 14,
        log_max_msg: 30,
        max_sg_sq: 61,
        max_sq_desc_sz: 1008,
        max_sg_rq: 31,
        max_rq_desc_sz: 512,
        rdmarc_entry_sz: 32,
        auxc_entry_sz: 72,
        altc_entry_sz: 88,
        eqc_entry_sz: 96,
        cqc_entry_sz: 112,
        srq_entry_sz: 128,
        cmpt_entry_sz: 144,
        dmpt_entry_sz: 160,
        bmme_flags: 0x0000_0c42,
        reserved_lkey: 0x0000_0123,
        max_icm_sz: 0x0000_0012_3400_0000,
        inta_pin: 3,
        board_id: "MT_1234567890".to_string(),
        ..DeviceProfile::default()
    };
    let (_m, mut ps) = machine_with(1, FabricConfig::default(), profile.clone());
    let p = ps.remove(0);
    let probe = p.clone_handle();
    let cfg = Config {
        init_ports: false,
        ..test_config()
    };
    let h = Hca::init(p, cfg).expect("bring-up");
    let f = h.fw_info();
    assert_eq!(
        (f.major, f.minor, f.subminor, f.cmd_if_rev),
        (
            profile.fw_major,
            profile.fw_minor,
            profile.fw_subminor,
            profile.cmd_if_rev
        )
    );
    assert_eq!(f.fw_pages, u32::from(profile.fw_pages));
    assert_eq!(f.log_max_cmds, profile.log_max_cmds);
    let c = h.caps();
    let pow = |v: u8| 1u32 << v;
    assert_eq!(c.max_qp_sz, pow(profile.log_max_qp_sz));
    assert_eq!(c.reserved_qps, pow(profile.log_rsvd_qps));
    assert_eq!(c.max_qps, pow(profile.log_max_qps));
    assert_eq!(c.reserved_srqs, pow(profile.log_rsvd_srqs));
    assert_eq!(c.max_srqs, pow(profile.log_max_srqs));
    assert_eq!(c.max_cqes, pow(profile.log_max_cq_sz));
    assert_eq!(c.reserved_cqs, pow(profile.log_rsvd_cqs));
    assert_eq!(c.max_cqs, pow(profile.log_max_cqs));
    assert_eq!(c.max_mpts, pow(profile.log_max_mpts));
    assert_eq!(c.max_eqs, pow(profile.log_max_eqs));
    assert_eq!(
        c.reserved_eqs,
        pow(profile.log_rsvd_eqs).max(u32::from(profile.rsvd_uars) * 4)
    );
    assert_eq!(c.reserved_mtts, pow(profile.log_rsvd_mtts));
    assert_eq!(c.reserved_mrws, pow(profile.log_rsvd_mrws));
    assert_eq!(c.local_ca_ack_delay, profile.local_ca_ack_delay);
    assert_eq!(c.num_ports, profile.num_ports);
    assert_eq!(c.log_max_msg, profile.log_max_msg);
    assert_eq!(c.flags, profile.flags);
    assert_eq!(c.reserved_uars, u32::from(profile.rsvd_uars));
    assert_eq!(c.uar_size, 1 << (u32::from(profile.log_uar_sz_mb) + 20));
    assert_eq!(c.bf, profile.blueflame);
    assert_eq!(c.bf_reg_size, pow(profile.log_bf_reg_size));
    assert_eq!(c.bf_regs_per_page, pow(profile.log_bf_regs_per_page));
    assert_eq!(
        (c.max_sq_sg, c.max_sq_desc_sz, c.max_rq_sg, c.max_rq_desc_sz),
        (
            u32::from(profile.max_sg_sq),
            u32::from(profile.max_sq_desc_sz),
            u32::from(profile.max_sg_rq),
            u32::from(profile.max_rq_desc_sz)
        )
    );
    assert_eq!(c.reserved_pds, u32::from(profile.rsvd_pds));
    assert_eq!(c.max_pds, pow(profile.log_max_pds));
    let sizes = [
        (c.rdmarc_entry_sz, profile.rdmarc_entry_sz),
        (c.qpc_entry_sz, profile.qpc_entry_sz),
        (c.auxc_entry_sz, profile.auxc_entry_sz),
        (c.altc_entry_sz, profile.altc_entry_sz),
        (c.eqc_entry_sz, profile.eqc_entry_sz),
        (c.cqc_entry_sz, profile.cqc_entry_sz),
        (c.srq_entry_sz, profile.srq_entry_sz),
        (c.cmpt_entry_sz, profile.cmpt_entry_sz),
        (c.mtt_entry_sz, profile.mtt_entry_sz),
        (c.dmpt_entry_sz, profile.dmpt_entry_sz),
    ];
    for (i, (got, want)) in sizes.into_iter().enumerate() {
        assert_eq!(got, u32::from(want), "entry size {i}");
    }
    assert_eq!(c.bmme_flags, profile.bmme_flags);
    assert_eq!(c.reserved_lkey, profile.reserved_lkey);
    assert_eq!(c.max_icm_sz, profile.max_icm_sz);
    assert_eq!(c.max_counters, profile.max_counters);
    for port in &c.ports[..usize::from(profile.num_ports.min(2))] {
        assert_eq!(port.max_mtu, profile.max_mtu);
    }
    let a = h.adapter();
    assert_eq!(a.inta_pin, profile.inta_pin);
    let id = profile.board_id.as_bytes();
    assert_eq!(&a.board_id[..id.len()], id);
    assert!(a.board_id[id.len()..].iter().all(|&b| b == 0));
    h.close().expect("teardown");
    assert_no_violations(&probe);
}

/// How many CQs, then QPs on the first of them, the device still gives before the first
/// error (and that error).
fn fill_cqs_and_qps(h: &mut Hca<SimPlatform>) -> (u32, verbs::Error, u32, verbs::Error) {
    let pd = h.alloc_pd().unwrap();
    let mut cqs = Vec::new();
    let cq_err = loop {
        match h.create_cq(1) {
            Ok(cq) => cqs.push(cq),
            Err(e) => break e,
        }
    };
    // Make room for QPs' CQ: give one CQ back.
    let last = cqs.pop().expect("at least one CQ");
    h.destroy_cq(last).unwrap();
    let cq = cqs[0];
    let mut qps = 0;
    let qp_err = loop {
        let attr = verbs::QpInitAttr {
            pd,
            send_cq: cq,
            recv_cq: cq,
            qp_type: verbs::QpType::Ud,
            cap: verbs::QpCap {
                max_send_wr: 1,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        };
        match h.create_qp(&attr) {
            Ok(_) => qps += 1,
            Err(e) => break e,
        }
    };
    (cqs.len() as u32 + 1, cq_err, qps, qp_err)
}

/// A create_cq or create_qp that finds no memory for its queue gives back everything it took
/// (queue number, MTT entry, doorbell record): afterwards the device gives as many CQs and
/// QPs as a fresh one.
#[test]
fn failed_queue_creates_leave_the_allocators_as_before() {
    let (_m, mut ps) = machine(1, FabricConfig::default());
    let mut h = Hca::init(ps.remove(0), test_config()).unwrap();
    let fresh = fill_cqs_and_qps(&mut h);
    assert!(fresh.0 > 1 && fresh.2 > 0, "{fresh:?}");
    drop(h);

    let (_m, mut ps) = machine(1, FabricConfig::default());
    let p = ps.remove(0);
    let probe = p.clone_handle();
    let mut h = Hca::init(p, test_config()).unwrap();
    let mtts = h.mtts_in_use();
    let pd = h.alloc_pd().unwrap();
    let cq = h.create_cq(1).unwrap();
    // Take all the DMA memory left.
    let mut hog = Vec::new();
    while let Some(bus) = probe.arena.alloc(4096, 4096) {
        hog.push(bus);
    }
    assert!(matches!(
        h.create_cq_raw(1),
        Err(Error::NoMemory("CQ buffer"))
    ));
    let attr = verbs::QpInitAttr {
        pd,
        send_cq: cq,
        recv_cq: cq,
        qp_type: verbs::QpType::Ud,
        cap: verbs::QpCap {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    };
    assert!(h.create_qp(&attr).is_err());
    for bus in hog {
        assert!(probe.arena.free(bus));
    }
    h.destroy_cq(cq).unwrap();
    h.dealloc_pd(pd).unwrap();
    assert_eq!(h.mtts_in_use(), mtts, "a failed create kept an MTT entry");
    let after = fill_cqs_and_qps(&mut h);
    assert_eq!(format!("{after:?}"), format!("{fresh:?}"));
    drop(h);
    assert_eq!(probe.arena.bytes_in_use(), 0, "leaked DMA memory");
}

/// INIT_HCA takes what the device offers as Linux's `mlx4_INIT_HCA` and `choose_steering_mode`
/// do: with IPoIB checksums, memory windows and both VEP steering flags offered, flags bit 3,
/// memory windows (0xF8 bit 7) and B0 unicast steering (0xD8 bit 3) are set; without them,
/// none of those.
#[test]
fn init_hca_enables_what_the_device_offers_as_linux_does() {
    // QUERY_DEV_CAP flag bits (§2.4): IPoIB checksums, memory windows, VEP unicast and
    // multicast steering.
    let offered: u64 = 1 << 7 | 1 << 16 | 1 << 41 | 1 << 42;
    for (flags, on) in [
        (DeviceProfile::default().flags | offered, true),
        (DeviceProfile::default().flags & !offered, false),
    ] {
        let profile = DeviceProfile {
            flags,
            bmme_flags: 0,
            ..DeviceProfile::default()
        };
        let (_m, mut ps) = machine_with(1, FabricConfig::default(), profile);
        let p = ps.remove(0);
        let probe = p.clone_handle();
        let cfg = Config {
            init_ports: false,
            ..test_config()
        };
        let h = Hca::init(p, cfg).expect("bring-up");
        let b = &mailboxes_of(&probe, Opcode::INIT_HCA)[0];
        let flags = u32::from_be_bytes(b[0x14..0x18].try_into().unwrap());
        assert_eq!(flags & 1, 1, "UD address-vector port check, always");
        assert_eq!(flags & (1 << 3) != 0, on, "IPoIB checksums");
        assert!(flags & (1 << 4) != 0, "counters (the profile has them)");
        assert_eq!(b[0xF8] & 0x80 != 0, on, "memory windows");
        assert_eq!(b[0xD8] & 0x08 != 0, on, "B0 unicast steering");
        let steering = if on {
            mlx4::caps::Steering::B0
        } else {
            mlx4::caps::Steering::A0
        };
        assert_eq!(h.choices().steering, steering);
        assert_eq!(b[0x58..0x5C], [0; 4], "no 64-byte EQEs/CQEs offered");
        h.close().expect("teardown");
        assert_no_violations(&probe);
    }
}
