//! The behaviour recorder (`sim::trace`): commands, mailbox fields decoded by name, raw bits
//! nobody names, order, and failures, recorded only when the fabric asks for it.

mod harness;
use harness::*;
use sim::FabricConfig;

fn traced_rig() -> Rig {
    Rig::with(
        1,
        FabricConfig {
            subnet_manager: true,
            manual_clock: true,
            trace: true,
            ..Default::default()
        },
        harness::reduced(),
    )
}

#[test]
fn bring_up_is_recorded_by_name_with_grouped_values_and_order() {
    let mut r = traced_rig();
    r.bring_up(0);
    let t = r.m.fabric_ref().trace(r.hca(0));
    let lines: Vec<&str> = t.lines().collect();
    let mut sorted = lines.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(lines, sorted, "sorted and deduplicated");
    for want in [
        "cmd MAP_FA op_mod=0x0 in_mod=count mode=poll",
        "cmd MAP_FA field=va shape=zero",
        "cmd MAP_FA field=log_chunk log=8",
        "cmd RUN_FW op_mod=0x0 in_mod=0x0 mode=poll",
        "cmd INIT_HCA field=version value=0x2",
        "cmd INIT_HCA field=log_num_qps log=8",
        "cmd INIT_HCA field=flags.bit0 value=1",
        "order start -> MAP_FA",
        "order MAP_FA -> RUN_FW",
        "order MAP_ICM -> INIT_HCA",
    ] {
        assert!(lines.contains(&want), "{want:?} missing:\n{t}");
    }
    // Addresses are not recorded: no line carries the FA page's bus address.
    assert!(!t.contains("qpc_base"), "{t}");
}

#[test]
fn bits_no_field_names_are_recorded_raw_and_failures_with_their_status() {
    let mut r = traced_rig();
    r.start_fw(0);
    let mb = r.mailbox(0);
    // MOD_STAT_CFG: a named field (log_pg_sz = 0) and an unnamed bit in dword 1.
    r.put32(0, mb, 0x0000_0000);
    r.put32(0, mb + 4, 0x0000_8000);
    assert_eq!(r.cmd(0, 0x034, 0, mb, 0, 0), 0);
    // An opcode the model does not implement.
    assert_eq!(r.cmd(0, 0x0ab, 0, 0, 0, 0), 0x02);
    let t = r.m.fabric_ref().trace(r.hca(0));
    for want in [
        "cmd MOD_STAT_CFG field=log_pg_sz value=0x0",
        "cmd MOD_STAT_CFG field=dw@0x004 bits=0x00008000",
        "cmd op_0x0ab op_mod=0x0 in_mod=0x0 mode=poll",
        "cmd op_0x0ab op_mod=0x0 status=BadOp",
    ] {
        assert!(t.lines().any(|l| l == want), "{want:?} missing:\n{t}");
    }
}

#[test]
fn nothing_is_recorded_unless_asked() {
    let mut r = Rig::new(1, true);
    r.bring_up(0);
    assert_eq!(r.m.fabric_ref().trace(r.hca(0)), "");
    r.m.fabric().set_trace(true);
    assert_eq!(r.cmd(0, 0x031, 0, 0, 0, 0), 0, "NOP");
    assert_eq!(
        r.m.fabric_ref().trace(r.hca(0)),
        "cmd NOP op_mod=0x0 in_mod=0x0 mode=poll\n"
    );
}
