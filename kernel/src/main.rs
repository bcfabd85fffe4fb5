//! ibkern entry point: the bring-up sequence, top to bottom.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod entry {
    use bootloader_api::config::{BootloaderConfig, Mapping};
    use bootloader_api::{entry_point, BootInfo};
    use kernel::arch::{cpu, gdt, hpet, interrupts, ioapic, lapic, pat, pic, tsc};
    use kernel::config::{self, Mode};
    use kernel::exit::{exit, Status};
    use kernel::{acpi, console, mm, pci, println, selftest, system};

    /// Physical memory at a fixed upper-half offset (identity is impossible with this
    /// bootloader, see docs/kernel.md); every other mapping also in the upper half, so the
    /// lower half is free for the kernel's identity map.
    pub static BOOTLOADER_CONFIG: BootloaderConfig = {
        let mut c = BootloaderConfig::new_default();
        c.mappings.physical_memory = Some(Mapping::FixedAddress(mm::PHYS_OFFSET));
        c.mappings.dynamic_range_start = Some(mm::UPPER_HALF);
        c.kernel_stack_size = 256 * 1024;
        c
    };

    entry_point!(kernel_main, config = &BOOTLOADER_CONFIG);

    /// An optional address for the boot log: `0x...` or `none`.
    struct HexOpt(Option<u64>);

    impl core::fmt::Display for HexOpt {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            match self.0 {
                Some(a) => write!(f, "{a:#x}"),
                None => f.write_str("none"),
            }
        }
    }

    /// Logs the error and ends the run with the failure status.
    fn fail(what: &str, e: &dyn core::fmt::Debug) -> ! {
        log::error!(target: "boot", "{what}: {e:?}");
        println!("boot failed: {what}: {e:?}");
        exit(Status::Failure)
    }

    fn kernel_main(boot: &'static mut BootInfo) -> ! {
        // 1. Clock origin, configuration, console. The configuration is read first (the
        // bootloader mapped the ramdisk; parsing needs nothing else) so that every line goes
        // to the console port it names; nothing is printed before.
        tsc::mark_boot();
        let ramdisk = boot.ramdisk_addr.into_option().map(|a| {
            // SAFETY: the bootloader mapped the ramdisk at this address with this length.
            unsafe { core::slice::from_raw_parts(a as *const u8, boot.ramdisk_len as usize) }
        });
        let parsed = config::parse_bytes(ramdisk);
        console::init(match &parsed {
            Ok(c) => c.console,
            // Refused: reported on the port of its `console=` line if that line is valid.
            Err(_) => ramdisk
                .and_then(config::console_of)
                .unwrap_or(config::Console::Com1),
        });
        console::init_logger(log::LevelFilter::Info);
        let config = match parsed {
            Ok(c) => c,
            Err(e) => {
                println!("{e}");
                println!("boot failed: bad configuration");
                exit(Status::Failure)
            }
        };
        kernel::exit::set_policy(config.on_exit);
        // The banner and the configuration at info level before `log=` applies: every console
        // says which kernel ran with which settings (the runner's `results` reads them).
        log::info!(
            target: "boot",
            "ibkern kernel {} commit {} starting; mode {:?}",
            env!("CARGO_PKG_VERSION"),
            env!("IBKERN_GIT_COMMIT"),
            config.mode
        );
        log::info!(target: "boot", "config: {}", config::Settings(ramdisk.unwrap_or(&[])));
        log::set_max_level(config::log_filter(config.log));

        // 2. Descriptor tables: from here on every exception is reported.
        gdt::init();
        interrupts::init();

        // 3. CPU features and the TSC.
        let features = cpu::features();
        log::info!(
            target: "cpu",
            "1G pages {}, nx {}, pat {}, x2apic {}, invariant tsc {}, hypervisor {}",
            features.page_1g, features.nx, features.pat, features.x2apic, features.invariant_tsc, features.hypervisor
        );
        let brand = cpu::brand();
        log::info!(target: "cpu", "model {}", core::str::from_utf8(&brand).unwrap_or("?").trim_matches(['\0', ' ']));
        let (tsc_hz, tsc_source) = tsc::calibrate().unwrap_or_else(|e| fail("tsc", &e));
        log::info!(target: "tsc", "{}.{:03} MHz from {:?}", tsc_hz / 1_000_000, tsc_hz / 1000 % 1000, tsc_source);

        // 4. Memory: PAT, frames, our own page tables (identity map), heap.
        if !features.pat || !features.nx {
            fail("cpu", &"PAT and NX are required");
        }
        pat::init();
        let kernel_text = kernel_main as *const () as u64;
        let mm_report = mm::init(&boot.memory_regions, features.page_1g, kernel_text)
            .unwrap_or_else(|e| fail("mm", &e));
        log::info!(
            target: "mm",
            "{} MiB RAM, top {:#x}, {} MiB free; identity map up to {} pages: 1G={} 2M={} 4K={}",
            mm_report.ram_bytes >> 20,
            mm_report.top_of_ram,
            (mm_report.free_frames * 4096) >> 20,
            mm_report.largest_page,
            mm_report.identity.size_1g,
            mm_report.identity.size_2m,
            mm_report.identity.size_4k
        );
        let (heap_at, heap_size) = mm::heap::init().unwrap_or_else(|e| fail("heap", &e));
        log::info!(target: "heap", "{} KiB at {heap_at:#x}", heap_size >> 10);

        // 5. ACPI.
        let rsdp = boot
            .rsdp_addr
            .into_option()
            .unwrap_or_else(|| fail("acpi", &"no RSDP from the bootloader"));
        let acpi =
            acpi::parse(&acpi::firmware::Firmware, rsdp).unwrap_or_else(|e| fail("acpi", &e));
        if config.acpi_dump {
            acpi::firmware::dump_all(
                &acpi::firmware::Firmware,
                rsdp,
                acpi.rsdp.root,
                &acpi.tables,
            );
        }
        log::info!(
            target: "acpi",
            "rev {} {} at {:#x}; {} cpus, {} ioapics, {} overrides, lapic {:#x}, hpet {}, ecam {}",
            acpi.rsdp.revision,
            if acpi.rsdp.xsdt { "XSDT" } else { "RSDT" },
            acpi.rsdp.root,
            acpi.madt.cpus().len(),
            acpi.madt.ioapics().len(),
            acpi.madt.overrides().len(),
            acpi.madt.lapic_address,
            HexOpt(acpi.hpet.map(|h| h.address)),
            HexOpt(acpi.ecam().first().map(|e| e.base))
        );

        // 6. Interrupt controllers: PIC off, local APIC, I/O APICs; then interrupts on.
        pic::remap_and_mask();
        let nmi_lint = acpi
            .madt
            .nmis()
            .iter()
            .find(|n| n.processor_uid == 0xff || n.processor_uid == 0)
            .map(|n| n.lint);
        let apic_mode = lapic::init(
            acpi.madt.lapic_address,
            interrupts::SPURIOUS_VECTOR,
            nmi_lint,
            config.x2apic,
        )
        .unwrap_or_else(|e| fail("lapic", &e));
        let lapic_id = lapic::id();
        let pins =
            ioapic::init(acpi.madt.ioapics(), lapic_id).unwrap_or_else(|e| fail("ioapic", &e));
        log::info!(target: "apic", "local APIC id {lapic_id} ({apic_mode:?}), {pins} I/O APIC pins, all masked");
        let hpet_hz = acpi.hpet.and_then(|h| match hpet::init(h.address) {
            Ok(hz) => Some(hz),
            Err(e) => {
                log::warn!(target: "hpet", "{e:?}");
                None
            }
        });
        interrupts::enable();

        // 7. PCI.
        let mechanism = pci::access::init(acpi.ecam()).unwrap_or_else(|e| fail("pci", &e));
        let mut functions = alloc::vec::Vec::new();
        pci::enumerate(mechanism.access(), 0, &mut |f| functions.push(*f));
        log::info!(target: "pci", "{} functions via {}", functions.len(), mechanism.name());
        for f in &functions {
            let _ = f.describe(&mut console::Console);
        }

        let machine = system::set(system::Machine {
            features,
            tsc_hz,
            tsc_source,
            mm: mm_report,
            acpi,
            lapic_id,
            hpet_hz,
            pci_mechanism: mechanism.name(),
            pci: functions,
            kernel_text,
        });
        log::info!(target: "boot", "complete at {} us", kernel::now_ns() / 1000);

        // 8. The job.
        match config.mode {
            Mode::Selftest => {
                let ok = selftest::run(machine, &config);
                exit(if ok { Status::Success } else { Status::Failure })
            }
            Mode::Fault => match config.fault {
                Some(kind) => kernel::fault::trigger(kind),
                None => fail("config", &"mode=fault without fault="),
            },
            Mode::Hca => match kernel::hca::run(
                machine,
                config.hca_irq,
                config.bench.port,
                config.port_wait_ms,
                config.sm,
            ) {
                Ok(()) => {
                    println!("hca: PASS");
                    exit(Status::Success)
                }
                Err(e) => {
                    println!("hca: FAIL: {e}");
                    exit(Status::Failure)
                }
            },
            Mode::Diag => {
                let settings = config::Settings(ramdisk.unwrap_or(&[]));
                let ok = kernel::hca::diag::run(machine, &config, settings);
                exit(if ok { Status::Success } else { Status::Failure })
            }
            Mode::Pingpong => {
                let settings = config::Settings(ramdisk.unwrap_or(&[]));
                let ok = kernel::hca::pingpong::run(machine, &config, settings);
                exit(if ok { Status::Success } else { Status::Failure })
            }
            Mode::Idle => {
                log::info!(target: "idle", "halting with interrupts enabled");
                loop {
                    x86_64::instructions::hlt();
                }
            }
        }
    }

    #[panic_handler]
    fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
        kernel::fault::panic(info)
    }
}

#[cfg(target_os = "none")]
extern crate alloc;

#[cfg(not(target_os = "none"))]
fn main() {}
