//! Bring-up, teardown, events and ports against the in-process model.

mod common;

use common::*;
use mlx4::hca::IrqMode;
use mlx4::{Config, Error, FwStatus, Hca, Opcode};
use sim::{CommandFault, CommandFaultAction, FabricConfig, Faults};
use verbs::{Device, PortState};

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
#[test]
fn failing_command_at_every_bring_up_step_is_typed_and_cleaned_up() {
    let steps = [
        Opcode::QUERY_FW,
        Opcode::MAP_FA,
        Opcode::RUN_FW,
        Opcode::MOD_STAT_CFG,
        Opcode::QUERY_DEV_CAP,
        Opcode::SET_ICM_SIZE,
        Opcode::MAP_ICM_AUX,
        Opcode::MAP_ICM,
        Opcode::INIT_HCA,
        Opcode::QUERY_ADAPTER,
        Opcode::MAD_IFC,
        Opcode::SW2HW_EQ,
        Opcode::MAP_EQ,
        Opcode::NOP,
        Opcode::SET_PORT,
        Opcode::INIT_PORT,
    ];
    for op in steps {
        let faults = Faults {
            commands: vec![CommandFault {
                hca: None,
                opcode: op.raw(),
                action: CommandFaultAction::Fail(0x03),
                times: 1,
            }],
            ..Faults::default()
        };
        let (_m, mut ps) = machine(
            1,
            FabricConfig {
                faults,
                ..FabricConfig::default()
            },
        );
        let p = ps.remove(0);
        let probe = p.clone_handle();
        match Hca::init(p, test_config()) {
            Err(Error::Cmd(e)) => {
                assert_eq!(e.op, op);
                assert_eq!(e.status, FwStatus::BadParam);
            }
            Err(other) => panic!("{op:?}: unexpected error {other:?}"),
            Ok(_) => panic!("{op:?}: bring-up succeeded despite the fault"),
        }
        assert_eq!(probe.arena.bytes_in_use(), 0, "{op:?}: leaked DMA memory");
        // The device can be brought up again.
        let h = Hca::init(probe.clone_handle(), test_config())
            .unwrap_or_else(|e| panic!("{op:?}: re-init failed: {e}"));
        h.close().unwrap();
        assert_no_violations(&probe);
    }
}

#[test]
fn command_that_never_completes_times_out() {
    let faults = Faults {
        commands: vec![CommandFault {
            hca: None,
            opcode: Opcode::QUERY_DEV_CAP.raw(),
            action: CommandFaultAction::Delay(std::time::Duration::from_secs(3600)),
            times: 1,
        }],
        ..Faults::default()
    };
    let (_m, mut ps) = machine(
        1,
        FabricConfig {
            faults,
            ..FabricConfig::default()
        },
    );
    let p = ps.remove(0);
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
    let faults = Faults {
        commands: vec![CommandFault {
            hca: None,
            opcode: Opcode::NOP.raw(),
            action: CommandFaultAction::Delay(std::time::Duration::from_millis(150)),
            times: 2, // the bring-up NOP test is delayed too (it still passes: 150 < 2000)
        }],
        ..Faults::default()
    };
    let (_m, mut ps) = machine(
        1,
        FabricConfig {
            faults,
            ..FabricConfig::default()
        },
    );
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
    let faults = Faults {
        commands: vec![CommandFault {
            hca: None,
            opcode: Opcode::SW2HW_CQ.raw(),
            action: CommandFaultAction::Delay(std::time::Duration::from_millis(150)),
            times: 1,
        }],
        ..Faults::default()
    };
    let (_m, mut ps) = machine(
        1,
        FabricConfig {
            faults,
            ..FabricConfig::default()
        },
    );
    let p = ps.remove(0);
    let probe = p.clone_handle();
    let cfg = Config {
        init_ports: false,
        cmd_timeout_ms: 100,
        ..test_config()
    };
    let mut h = Hca::init(p, cfg).expect("bring-up");
    match h.create_cq(8) {
        Err(verbs::Error::Timeout(name)) => assert_eq!(name, "SW2HW_CQ"),
        other => panic!("expected a SW2HW_CQ timeout, got {other:?}"),
    }
    // The HCR frees up after the delay; the stale completion is ignored by token.
    h.nop().expect("NOP after the timed-out command");
    // The late SW2HW_CQ left a CQ in hardware ownership whose buffer the driver already
    // freed: teardown must still finish (errors are reported, memory is returned).
    let _ = h.close();
    assert_eq!(probe.arena.bytes_in_use(), 0);
}

#[test]
fn every_command_is_reported_to_the_platform_with_its_outcome() {
    // A failing INIT_HCA: the log shows the bring-up up to it, the failure with its firmware
    // status, then the teardown of what was built (what `mode=diag` prints).
    let faults = Faults {
        commands: vec![CommandFault {
            hca: None,
            opcode: Opcode::INIT_HCA.raw(),
            action: CommandFaultAction::Fail(0x03),
            times: 1,
        }],
        ..Faults::default()
    };
    let (_m, mut ps) = machine(
        1,
        FabricConfig {
            faults,
            ..FabricConfig::default()
        },
    );
    let p = ps.remove(0);
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
        caps.flags & mlx4::fw::flag::COUNTERS,
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
    let faults = Faults {
        commands: vec![CommandFault {
            hca: None,
            opcode: Opcode::SET_PORT.raw(),
            action: CommandFaultAction::Fail(0x08),
            times: 1,
        }],
        ..Faults::default()
    };
    let (_m, mut ps) = machine(
        1,
        FabricConfig {
            faults,
            ..FabricConfig::default()
        },
    );
    let p = ps.remove(0);
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
