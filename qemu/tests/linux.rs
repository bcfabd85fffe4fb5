//! System tests "linux": Debian's own Linux (kernel with mlx4_core/mlx4_ib, rdma-core,
//! perftest) booted under QEMU (TCG) with the emulated ConnectX-3, built by the runner from
//! Debian packages (`apt-get download`, cached in out/linux/debs). They are slow (about 70 s
//! together): run them alone with `cargo test -p ibkern-qemu --test linux`. If the packages
//! cannot be downloaded they fail with apt's message; they never skip. See
//! docs/linux-guest.md.

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use ibkern_qemu::linux::image::{self, LinuxImage};
use ibkern_qemu::linux::run::{free_ports, run_linux, LinuxOutcome, LinuxRun};
use ibkern_qemu::machine::Machine;

fn work_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join("out/linux")
}

/// The guest image, built once per test binary (the debs are downloaded the first time).
fn linux_image() -> &'static LinuxImage {
    static IMAGE: OnceLock<Result<LinuxImage, String>> = OnceLock::new();
    IMAGE
        .get_or_init(|| image::build(&work_root()).map_err(|e| format!("{e:#}")))
        .as_ref()
        .unwrap_or_else(|e| panic!("building the Linux guest from Debian packages failed: {e}"))
}

/// One QEMU run at a time: they share two cores with everything else.
fn boot(name: &str, guests: usize, msix: bool, script: &str) -> LinuxOutcome {
    boot_on(name, guests, msix, script, sim::profile::DEFAULT_PROFILE)
}

/// `boot` with the emulated HCAs built from device profile `profile`.
fn boot_on(name: &str, guests: usize, msix: bool, script: &str, profile: &str) -> LinuxOutcome {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let image = linux_image();
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let work = work_root().join(format!("test-{name}"));
    std::fs::create_dir_all(&work).expect("work dir");
    let run = LinuxRun {
        trace: true,
        guests,
        msix,
        machine: Machine::Pc,
        script: script.to_string(),
        timeout: Duration::from_secs(300),
        test_timeout: 120,
        link_ports: free_ports().expect("ports"),
        profiles: vec![sim::DeviceProfile::named(profile).expect("a built-in profile")],
    };
    let outcome = run_linux(image, &run, &work).expect("running the Linux guests");
    for line in outcome.report() {
        eprintln!("{line}");
    }
    outcome
}

fn transcript(o: &LinuxOutcome) -> String {
    o.guests
        .iter()
        .map(|g| format!("--- {} console ---\n{}", g.node.name, g.node.console))
        .collect::<Vec<_>>()
        .join("\n")
}

/// mlx4_core, mlx4_ib and ib_uverbs load without a complaint about the device, the port is
/// ACTIVE with the LID the fabric's SM assigned, and ibv_devinfo shows the HCA.
fn check_single(o: &LinuxOutcome) {
    assert!(o.passed(), "{}\n{}", o.report().join("\n"), transcript(o));
    let g = &o.guests[0];
    assert_eq!(g.modprobes.len(), 3, "{:?}", g.modprobes);
    assert!(g.complaints.is_empty(), "{:?}", g.complaints);
    assert_eq!(g.lid, Some(sim::Fabric::sm_lid_for(0, 1)));
    let c = &g.node.console;
    for needle in [
        "hca_id:\tmlx4_0",
        "fw_ver:\t\t\t\t2.42.5000",
        "vendor_part_id:\t\t\t4099",
        "state:\t\t\tPORT_ACTIVE (4)",
        "port_lid:\t\t2",
        "sm_lid:\t\t\t1",
        "link_layer:\t\tInfiniBand",
    ] {
        assert!(c.contains(needle), "ibv_devinfo lacks {needle:?}\n{c}");
    }
}

#[test]
fn linux_mlx4_loads_with_msix_and_ibv_devinfo_shows_the_active_port() {
    let o = boot("msix", 1, true, "ibk_run ibv_devinfo -v\n");
    check_single(&o);
    let k = &o.guests[0].node.counters;
    assert!(k.msix_messages > 0 && k.intx_assertions == 0, "{k}");
    assert!(
        o.guests[0].modprobes[0] == "modprobe mlx4_core: ok",
        "{:?}",
        o.guests[0].modprobes
    );
}

#[test]
fn linux_mlx4_loads_with_intx() {
    let o = boot("intx", 1, false, "ibk_run ibv_devinfo -v\n");
    check_single(&o);
    let k = &o.guests[0].node.counters;
    assert!(k.intx_assertions > 0 && k.msix_messages == 0, "{k}");
    assert_eq!(o.guests[0].modprobes[0], "modprobe mlx4_core msi_x=0: ok");
}

/// The pair run whose behaviour trace is Linux's reference on a device profile.
const PAIR_SCRIPT: &str = "\
ibk_pair ib_send_lat -c UD -n 5 -s 64
ibk_pair ib_send_lat -c UD -n 5 -s 1024
ibk_pair ib_send_lat -c UC -n 5 -s 8192
ibk_pair ib_write_lat -n 5 -s 65536
ibk_pair ibv_ud_pingpong -n 5 -s 1024 -c
ibk_pair ibv_uc_pingpong -n 5 -s 4096 -c
ibk_run cat /sys/class/infiniband/mlx4_0/ports/1/counters/port_xmit_data
";

/// Two guests on one fabric, perftest's TCP rendezvous over the guests' Ethernet link: each
/// test completes on both sides (perftest checks every completion; the ping-pongs' -c checks
/// the received data), and every packet sent was received. A read of a port counter in
/// sysfs puts Linux's own PMA read (MAD_IFC, PortCountersExtended) in the trace.
#[test]
fn linux_pair_runs_perftest_and_pingpong_over_the_emulated_fabric() {
    pair_on(sim::profile::DEFAULT_PROFILE);
}

/// The same pair run on a real card's profile (64-byte CQEs and EQEs, the steering, memory
/// window and XRC capabilities a ConnectX-3's firmware reports), whose trace is Linux's
/// reference there. `IBKERN_PROFILE=NAME` runs it on another built-in profile, which is how
/// the traces of the other profiles are recorded (docs/runner.md, "cargo qemu conformance").
#[test]
fn linux_pair_on_a_real_cards_profile_matches_its_trace() {
    let profile = std::env::var("IBKERN_PROFILE").unwrap_or_else(|_| "cx3-fdr".to_string());
    pair_on(&profile);
}

fn pair_on(profile: &str) {
    let o = boot_on(&format!("pair-{profile}"), 2, true, PAIR_SCRIPT, profile);
    assert!(o.passed(), "{}\n{}", o.report().join("\n"), transcript(&o));
    for g in &o.guests {
        assert_eq!(g.results.len(), 7, "{:?}", g.results);
        assert!(g.results.iter().all(|(rc, _)| *rc == 0), "{:?}", g.results);
        let k = &g.node.counters;
        assert!(k.packets_sent > 0 && k.packets_received > 0, "{k}");
        assert_eq!(k.packets_dropped, 0, "{k}");
    }
    // The latency lines: one row per test with 5 iterations (perftest prints "#bytes
    // #iterations ..." then the row).
    let client = &o.guests[1].node.console;
    for row in [" 64      5 ", " 1024    5 ", " 8192    5 ", " 65536   5 "] {
        assert!(client.contains(row), "no perftest row {row:?}\n{client}");
    }
    check_linux_trace(&o.trace(), profile);
}

/// The behaviour trace of this pair run on `profile` is the reference of the conformance
/// check on that profile (docs/runner.md, "cargo qemu conformance"); the checked-in copy must
/// be exactly what Linux does now, so it cannot go stale. `IBKERN_BLESS_TRACE=1` rewrites it.
fn check_linux_trace(trace: &str, profile: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join(ibkern_qemu::conformance::linux_trace(profile));
    assert!(
        trace.lines().any(|l| l.starts_with("cmd INIT_HCA "))
            && trace.lines().any(|l| l.starts_with("ctx QPC RC "))
            && trace.lines().any(|l| l.starts_with("wqe UD SEND ")),
        "the Linux trace lacks bring-up, RC contexts or UD WQEs:\n{trace}"
    );
    if std::env::var_os("IBKERN_BLESS_TRACE").is_some() {
        std::fs::write(&path, trace).expect("writing the Linux trace");
        return;
    }
    // Page sizes (`page=4k|large`) depend on how contiguous Linux's pinned buffers happen to
    // be in this boot: for those only the fields must be the same, not the values.
    let comparable = |t: &str| -> std::collections::BTreeSet<String> {
        t.lines()
            .map(|l| match l.rsplit_once(" page=") {
                Some((field, _)) => format!("{field} page=*"),
                None => l.to_string(),
            })
            .collect()
    };
    let stored = std::fs::read_to_string(&path).unwrap_or_default();
    let (old, new) = (comparable(&stored), comparable(trace));
    if old != new {
        let gone: Vec<&String> = old.difference(&new).collect();
        let added: Vec<&String> = new.difference(&old).collect();
        panic!(
            "{} differs from what Linux does now (rerun with IBKERN_BLESS_TRACE=1 to accept \
             it, then review the conformance check):\n  no longer seen: {gone:#?}\n  new: {added:#?}",
            path.display()
        );
    }
}
