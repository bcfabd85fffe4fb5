//! System tests: the real kernel, built once, booted under QEMU (TCG) through the runner
//! binary exactly as `cargo qemu` runs it.

mod support;

use std::fs;
use std::time::Duration;

use support::{boot, kernel, runner, scratch, Run};

/// Generous bound for one boot (BIOS boots take about 1 s, UEFI 4 s, PXE 7 s under TCG on an
/// idle machine; CI machines are slower and share their cores).
const BOOT_LIMIT: Duration = Duration::from_secs(180);

/// The runner's exit statuses (docs/runner.md).
const EXIT_GUEST_FAILED: i32 = 1;
const EXIT_HOST: i32 = 3;
const EXIT_TIMEOUT: i32 = 4;

fn assert_selftest_passed(run: &Run) {
    assert_eq!(
        run.code(),
        Some(0),
        "selftest did not pass\n{}",
        run.transcript()
    );
    let summary = run.line_with("selftest: ");
    assert!(summary.contains("PASS"), "{}", run.transcript());
    assert!(
        run.stdout
            .lines()
            .any(|l| l.contains("selftest: ") && l.ends_with(" passed, 0 failed")),
        "no clean summary line\n{}",
        run.transcript()
    );
    assert!(
        !run.stdout.contains("selftest: FAIL"),
        "{}",
        run.transcript()
    );
    assert!(
        run.stderr.contains("selftest PASSED"),
        "{}",
        run.transcript()
    );
}

/// The config the runner generated for this run (it lists the expected PCI devices).
fn generated_config(name: &str) -> String {
    let path = support::scratch_path(name).join("config");
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn selftest_bios_q35_tcg_passes_with_1g_pages() {
    let run = boot("selftest", "bios-q35", BOOT_LIMIT, &["--firmware", "bios"]);
    assert_selftest_passed(&run);
    // TCG's `-cpu max` has 1 GiB pages; the kernel must use them.
    assert!(
        run.line_with("selftest: PASS page-sizes")
            .contains("largest 1G"),
        "{}",
        run.transcript()
    );
    // Every device the q35 machine has is expected and found, through ECAM.
    let config = generated_config("bios-q35");
    assert!(config.contains("mode=selftest\n"), "{config}");
    assert!(config.contains("expect_pci=8086:29c0,"), "{config}");
    assert!(run.line_with("pci-expect 8086:29c0").contains("PASS"));
    assert!(
        run.line_with("pci-enumeration").contains("via ecam"),
        "{}",
        run.transcript()
    );
    // The bootloader is quiet by default: its stage messages stay off the console.
    assert!(!run.stdout.contains("4th Stage"), "{}", run.transcript());
}

#[test]
fn loader_log_flag_shows_the_bootloader_log() {
    let extra = [
        "--loader-log",
        "--set",
        "mode=fault",
        "--set",
        "fault=divide",
    ];
    let run = boot("run", "loader-log", BOOT_LIMIT, &extra);
    assert!(run.stdout.contains("4th Stage"), "{}", run.transcript());
    // The kernel still runs after the loader's messages and reports the divide error.
    assert!(
        run.line_with("EXCEPTION:").contains("divide error"),
        "{}",
        run.transcript()
    );
    assert_eq!(run.code(), Some(EXIT_GUEST_FAILED), "{}", run.transcript());
}

#[test]
fn selftest_uefi_q35_tcg_passes() {
    let run = boot("selftest", "uefi-q35", BOOT_LIMIT, &["--firmware", "uefi"]);
    assert_selftest_passed(&run);
}

#[test]
fn uefi_kernel_maps_and_accesses_a_64bit_bar_above_4g() {
    // ivshmem-plain's BAR2 is a 64-bit prefetchable BAR backed by a host file; OVMF puts it
    // in its 64-bit window, far above RAM. The kernel must map it (uncached, beyond its
    // identity map of RAM), read what the host wrote there and write something the host
    // then finds in the file.
    let dir = scratch("uefi-ivshmem-host");
    let shm = dir.join("shm.bin");
    let first: u64 = 0x1b4e_0000_0000_0000
        | (std::process::id() as u64) << 16
        | (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos() as u64
            & 0xffff);
    let mut bytes = vec![0u8; 1 << 20];
    bytes[..8].copy_from_slice(&first.to_le_bytes());
    fs::write(&shm, &bytes).unwrap();
    let backend = format!(
        "memory-backend-file,id=shm,mem-path={},size=1M,share=on",
        shm.display()
    );
    let run = boot(
        "run",
        "uefi-ivshmem",
        BOOT_LIMIT,
        &[
            "--firmware",
            "uefi",
            "--set",
            "mode=selftest",
            "--",
            "-object",
            &backend,
            "-device",
            "ivshmem-plain,memdev=shm",
        ],
    );
    assert_eq!(run.code(), Some(0), "{}", run.transcript());
    assert!(
        run.stdout.lines().any(|l| l.ends_with(" passed, 0 failed")),
        "{}",
        run.transcript()
    );
    // The scan reads both halves of the 64-bit BAR.
    let bar2 = run
        .stdout
        .lines()
        .skip_while(|l| !l.contains(" 1af4:1110 "))
        .find(|l| l.starts_with("pci   bar2 mem64 pref 0x"))
        .unwrap_or_else(|| panic!("no ivshmem BAR2 line\n{}", run.transcript()));
    let hex: String = bar2["pci   bar2 mem64 pref 0x".len()..]
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    let address = u64::from_str_radix(&hex, 16).unwrap();
    assert!(address >= 1 << 32, "{bar2}");
    let high = run.line_with("selftest: PASS pci-bar-high: ");
    assert!(
        high.contains(&format!(" bar2 {address:#x}+0x100000 uc ")),
        "{high}"
    );
    let access = run.line_with("selftest: PASS ivshmem-bar: ");
    assert!(
        access.contains(&format!("read {first:#018x} at +0")),
        "{access}"
    );
    let file = fs::read(&shm).unwrap();
    let written = u64::from_le_bytes(file[8..16].try_into().unwrap());
    assert_eq!(
        written, !first,
        "the kernel's write did not reach the device memory"
    );
}

#[test]
fn selftest_pxe_q35_tcg_passes_and_sees_virtio_net() {
    let run = boot("selftest", "pxe-q35", BOOT_LIMIT, &["--firmware", "pxe"]);
    assert_selftest_passed(&run);
    // Booted from the TFTP root, whose ramdisk is the generated config.
    let root = support::scratch_path("pxe-q35").join("tftp");
    for file in ["bootloader", "kernel-x86_64", "ramdisk", "boot.json"] {
        assert!(
            root.join(file).is_file(),
            "{file} missing from the TFTP root"
        );
    }
    assert_eq!(
        fs::read_to_string(root.join("ramdisk")).unwrap(),
        generated_config("pxe-q35")
    );
    assert!(
        run.line_with("pci-expect 1af4:1000").contains("PASS"),
        "{}",
        run.transcript()
    );
    // OVMF puts virtio-net's 64-bit BAR4 in its window above 4 GiB; the kernel maps it.
    let high = run.line_with("selftest: PASS pci-bar-high: ");
    assert!(high.contains(" bar4 0x"), "{high}");
}

#[test]
fn selftest_bios_pc_machine_passes_with_port_io_config() {
    let run = boot("selftest", "bios-pc", BOOT_LIMIT, &["--machine", "pc"]);
    assert_selftest_passed(&run);
    assert!(
        run.line_with("pci-expect 8086:1237").contains("PASS"),
        "{}",
        run.transcript()
    );
    assert!(
        run.line_with("pci-enumeration").contains("via port-io"),
        "{}",
        run.transcript()
    );
}

#[test]
fn selftest_bios_qemu64_cpu_passes_with_2m_pages() {
    let run = boot("selftest", "bios-qemu64", BOOT_LIMIT, &["--cpu", "qemu64"]);
    assert_selftest_passed(&run);
    let pages = run.line_with("selftest: PASS page-sizes");
    assert!(
        pages.contains("largest 2M") && pages.contains("1G pages: no"),
        "{pages}"
    );
}

#[test]
fn injected_page_fault_prints_decoded_report_and_fails() {
    let run = boot(
        "run",
        "fault-pagefault",
        BOOT_LIMIT,
        &["--set", "mode=fault", "--set", "fault=pagefault"],
    );
    assert_eq!(run.code(), Some(EXIT_GUEST_FAILED), "{}", run.transcript());
    assert!(
        run.line_with("EXCEPTION:").contains("page fault"),
        "{}",
        run.transcript()
    );
    // The kernel reads its documented unmapped address (kernel/src/fault.rs).
    let cr2 = run.line_with("cr2");
    assert!(cr2.contains("0x00006000deadb000"), "{cr2}");
    // Error code 0: a read of a not-present page in supervisor mode, decoded.
    let error = run.line_with("error ");
    assert!(error.contains("not-present"), "{error}");
    assert!(error.contains("read"), "{error}");
    assert!(error.contains("supervisor"), "{error}");
    let rip = run.line_with("rip ");
    assert!(
        rip.contains("0xffff"),
        "RIP missing or not a kernel address: {rip}"
    );
    assert!(
        run.stderr.contains("QEMU status 35"),
        "{}",
        run.transcript()
    );
}

#[test]
fn injected_panic_is_reported_and_fails() {
    let run = boot(
        "run",
        "fault-panic",
        BOOT_LIMIT,
        &["--set", "mode=fault", "--set", "fault=panic"],
    );
    assert_eq!(run.code(), Some(EXIT_GUEST_FAILED), "{}", run.transcript());
    assert!(
        run.line_with("PANIC:").contains("kernel/src/"),
        "{}",
        run.transcript()
    );
    assert!(
        run.stderr.contains("QEMU status 35"),
        "{}",
        run.transcript()
    );
}

#[test]
fn a_bad_ramdisk_that_bypassed_the_runner_is_named_by_the_kernel_and_fails() {
    // The runner refuses such a configuration before building anything (tests/cli.rs); a
    // ramdisk written by other means (edited by hand on a PXE server) still reaches the
    // kernel, which checks it with the same crate, names the line and key, and fails.
    use ibkern_qemu::command::{BootMedium, QemuCommand};
    use ibkern_qemu::guest::{self, Echo, GuestExit, Input, RunOptions};
    use ibkern_qemu::machine::Accel;
    let dir = scratch("bad-config");
    let ramdisk = dir.join("config");
    fs::write(&ramdisk, "mode=selftest\nno_such_key=1\n").unwrap();
    let image = dir.join("bios.img");
    boot::ImageBuilder::new(kernel())
        .unwrap()
        .bios_image(&ramdisk, &image)
        .unwrap();
    let command = QemuCommand::new(BootMedium::Bios { image }, Accel::Tcg);
    let _guest = support::one_guest();
    let options = RunOptions {
        timeout: Some(BOOT_LIMIT),
        echo: Echo::Quiet,
        input: Input::Null,
    };
    let outcome = guest::run(&command, &options).unwrap();
    let transcript = format!("{}\n{}", outcome.console, outcome.stderr);
    assert_eq!(outcome.exit, GuestExit::KernelFailure, "{transcript}");
    assert!(
        outcome
            .console
            .contains("config line 2: unknown key \"no_such_key\""),
        "{transcript}"
    );
}

#[test]
fn a_kernel_configured_for_com2_boots_and_reports_its_selftest_there() {
    // The runner wires the configured port to stdout (COM1 exists, silent): the verdict it
    // reads can only have come from COM2.
    let run = boot(
        "selftest",
        "console-com2",
        BOOT_LIMIT,
        &["--set", "console=com2"],
    );
    assert!(
        run.stderr.contains("-serial null -serial stdio"),
        "{}",
        run.transcript()
    );
    assert_selftest_passed(&run);
    assert!(
        generated_config("console-com2").contains("console=com2\n"),
        "{}",
        run.transcript()
    );
}

#[test]
fn com1_stays_silent_when_the_console_is_com2_even_for_a_refused_configuration() {
    // COM1 on stdout, COM2 in a file: everything the kernel prints must be in the file, from
    // the first line, and also when the rest of the ramdisk is refused.
    use ibkern_qemu::command::{BootMedium, QemuCommand};
    use ibkern_qemu::guest::{self, Echo, GuestExit, Input, RunOptions};
    use ibkern_qemu::machine::Accel;
    for (name, ramdisk, exit, expected) in [
        (
            "com2-selftest",
            "mode=selftest\nconsole=com2\n",
            GuestExit::KernelSuccess,
            " passed, 0 failed",
        ),
        (
            "com2-refused",
            "console=com2\nlog=loud\n",
            GuestExit::KernelFailure,
            "config line 2: key \"log\": bad value \"loud\"",
        ),
    ] {
        let dir = scratch(name);
        let config = dir.join("config");
        fs::write(&config, ramdisk).unwrap();
        let image = dir.join("bios.img");
        boot::ImageBuilder::new(kernel())
            .unwrap()
            .bios_image(&config, &image)
            .unwrap();
        let com2 = dir.join("com2.log");
        let _ = fs::remove_file(&com2);
        let mut command = QemuCommand::new(BootMedium::Bios { image }, Accel::Tcg);
        command.extra = vec!["-serial".into(), format!("file:{}", com2.display()).into()];
        let _guest = support::one_guest();
        let options = RunOptions {
            timeout: Some(BOOT_LIMIT),
            echo: Echo::Quiet,
            input: Input::Null,
        };
        let outcome = guest::run(&command, &options).unwrap();
        let on_com2 = fs::read_to_string(&com2).unwrap_or_default();
        let transcript = format!(
            "COM1:\n{}\nCOM2:\n{on_com2}\nstderr:\n{}",
            outcome.console, outcome.stderr
        );
        assert_eq!(outcome.exit, exit, "{name}: {transcript}");
        assert!(on_com2.contains(expected), "{name}: {transcript}");
        assert!(
            outcome.console.trim().is_empty(),
            "{name}: COM1 must stay silent\n{transcript}"
        );
    }
}

#[test]
fn timeout_kills_a_hung_guest() {
    // mode=idle never exits on its own: the runner must kill QEMU at the limit.
    let limit = Duration::from_secs(5);
    let run = boot("selftest", "timeout-idle", limit, &["--set", "mode=idle"]);
    assert_eq!(run.code(), Some(EXIT_TIMEOUT), "{}", run.transcript());
    assert!(run.stderr.contains("timed out"), "{}", run.transcript());
    assert!(
        run.stderr.contains("QEMU was killed"),
        "{}",
        run.transcript()
    );
    assert!(
        run.elapsed >= limit,
        "returned before the limit: {:?}",
        run.elapsed
    );
    assert!(
        run.elapsed < limit + Duration::from_secs(20),
        "took {:?}",
        run.elapsed
    );
}

#[test]
fn image_writes_bios_uefi_and_tftp_root_with_the_config() {
    let out = scratch("image");
    let config = out.join("node.cfg");
    fs::write(&config, "# node A\nmode=idle\nlog=debug # chatty\n").unwrap();
    let kernel = kernel().to_str().unwrap();
    let dir = out.join("images");
    let args = [
        "image",
        "--kernel",
        kernel,
        "--config",
        config.to_str().unwrap(),
        "--set",
        "role=server",
        "--out",
        dir.to_str().unwrap(),
    ];
    let run = runner(&args, Duration::from_secs(60));
    assert_eq!(run.code(), Some(0), "{}", run.transcript());
    let canonical = "mode=idle\nlog=debug\nrole=server\n";
    assert_eq!(fs::read_to_string(dir.join("config")).unwrap(), canonical);
    assert_eq!(
        fs::read_to_string(dir.join("tftp/ramdisk")).unwrap(),
        canonical
    );
    assert_eq!(
        fs::read(dir.join("tftp/kernel-x86_64")).unwrap(),
        fs::read(kernel).unwrap()
    );
    // The bootloader's own logging is off by default.
    let boot_json = fs::read_to_string(dir.join("tftp/boot.json")).unwrap();
    assert!(
        boot_json.contains("\"serial_logging\": false"),
        "{boot_json}"
    );
    // Disk images: an MBR boot signature, and a GPT header after the protective MBR.
    let bios = fs::read(dir.join("bios.img")).unwrap();
    assert_eq!(&bios[510..512], [0x55, 0xaa]);
    let uefi = fs::read(dir.join("uefi.img")).unwrap();
    assert_eq!(&uefi[512..520], b"EFI PART");
}

#[test]
fn missing_qemu_is_a_host_error_naming_the_setup_script() {
    let run = boot(
        "selftest",
        "no-qemu",
        BOOT_LIMIT,
        &["--qemu", "no-such-qemu-system-x86_64"],
    );
    assert_eq!(run.code(), Some(EXIT_HOST), "{}", run.transcript());
    assert!(
        run.stderr.contains("Run `.ci/setup`") && run.stderr.contains("qemu-system-x86"),
        "{}",
        run.transcript()
    );
}

#[test]
fn missing_ovmf_is_a_host_error_naming_the_setup_script() {
    let run = boot(
        "selftest",
        "no-ovmf",
        BOOT_LIMIT,
        &["--firmware", "uefi", "--ovmf", "no-such-dir/OVMF.fd"],
    );
    assert_eq!(run.code(), Some(EXIT_HOST), "{}", run.transcript());
    assert!(
        run.stderr.contains("Run `.ci/setup`") && run.stderr.contains("ovmf"),
        "{}",
        run.transcript()
    );
}

#[test]
fn pxe_nodes_boot_from_their_own_per_mac_roots_and_read_their_own_configs() {
    // Two nodes' images from one `image` call; each node PXE-boots from the TFTP root as
    // dnsmasq's --tftp-unique-root=mac would serve it to that MAC, and runs its own config.
    let out = scratch("pxe-nodes");
    let nodes = [
        ("52:54:00:00:00:0a", "mode=selftest\nexpect_pci=1af4:1000\n"),
        (
            "52:54:00:00:00:0b",
            "mode=selftest\nexpect_pci=1af4:1000,8086:29c0\n",
        ),
    ];
    let dir = out.join("images");
    let kernel = kernel().to_str().unwrap().to_string();
    let mut args: Vec<String> = vec!["image".into(), "--kernel".into(), kernel];
    for (i, (mac, config)) in nodes.iter().enumerate() {
        let file = out.join(format!("node{i}.cfg"));
        fs::write(&file, config).unwrap();
        args.push("--node".into());
        args.push(format!("{mac}={}", file.display()));
    }
    args.extend(["--out".into(), dir.to_str().unwrap().into()]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = runner(&argv, Duration::from_secs(60));
    assert_eq!(run.code(), Some(0), "{}", run.transcript());
    let tftp = dir.join("tftp");
    for (mac, config) in nodes {
        let name = mac.replace(':', "-");
        assert_eq!(
            fs::read_to_string(tftp.join(&name).join("ramdisk")).unwrap(),
            config
        );
        assert_eq!(
            fs::read_to_string(dir.join(&name).join("config")).unwrap(),
            config
        );
        assert!(dir.join(&name).join("bios.img").is_file());
        assert!(dir.join(&name).join("uefi.img").is_file());
    }

    let tftp = tftp.to_str().unwrap().to_string();
    for (i, (mac, _)) in nodes.iter().enumerate() {
        let run = boot(
            "run",
            &format!("pxe-node{i}"),
            BOOT_LIMIT,
            &["--firmware", "pxe", "--tftp-root", &tftp, "--mac", mac],
        );
        assert_eq!(run.code(), Some(0), "{}", run.transcript());
        assert!(run
            .line_with_stderr("PXE root ")
            .ends_with(&mac.replace(':', "-")));
        assert!(run.stdout.contains("selftest: PASS pci-expect 1af4:1000"));
        // Only node 1's configuration asks for the host bridge too.
        assert_eq!(
            run.stdout.contains("selftest: PASS pci-expect 8086:29c0"),
            i == 1,
            "{}",
            run.transcript()
        );
        assert!(
            run.stdout
                .lines()
                .any(|l| l.starts_with("selftest: ") && l.ends_with(" passed, 0 failed")),
            "{}",
            run.transcript()
        );
    }
}
