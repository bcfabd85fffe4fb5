//! `mode=selftest`: checks on the running machine that the foundations hold.
//!
//! Output: one line per check, `selftest: PASS <name>: <detail>` or
//! `selftest: FAIL <name>: <detail>`, then `selftest: N passed, M failed`.

use crate::arch::{hpet, interrupts, ioapic, lapic, pat, pit, tsc};
use crate::config::Config;
use crate::mm::{self, dma, paging::PageSize, Cache};
use crate::system::Machine;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;
use core::sync::atomic::{AtomicU64, Ordering};

/// One check's verdict.
type Verdict = Result<String, String>;

macro_rules! detail {
    ($($arg:tt)*) => { alloc::format!($($arg)*) };
}

struct Tally {
    passed: u32,
    failed: u32,
}

impl Tally {
    fn record(&mut self, name: &str, v: Verdict) {
        match v {
            Ok(d) => {
                self.passed += 1;
                crate::println!("selftest: PASS {name}: {d}");
            }
            Err(d) => {
                self.failed += 1;
                crate::println!("selftest: FAIL {name}: {d}");
            }
        }
    }
}

/// Runs every check; returns whether all passed.
pub fn run(m: &Machine, config: &Config) -> bool {
    let mut t = Tally {
        passed: 0,
        failed: 0,
    };
    t.record("identity-map", identity_map());
    t.record("page-sizes", page_sizes(m));
    t.record("kernel-permissions", kernel_permissions(m));
    t.record("pat", pat_layout(m));
    t.record("heap", heap());
    t.record("dma", dma_alloc());
    t.record("tsc", tsc_vs_second_clock(m));
    t.record("lapic-timer", lapic_timer());
    t.record("ioapic", ioapic_line(m));
    t.record("pci-enumeration", pci_enumeration(m));
    if let Some(f) = m.pci.iter().find(|f| f.msix.is_some()) {
        t.record("msix-table", msix_table(m, f));
    }
    if let Some(f) = m
        .pci
        .iter()
        .find(|f| (f.vendor, f.device) == E1000E && f.msix.is_some())
    {
        t.record("msix-delivery", msix_delivery(m, f));
    }
    if let Some(f) = m
        .pci
        .iter()
        .find(|f| E1000_FAMILY.contains(&(f.vendor, f.device)) && f.interrupt_pin != 0)
    {
        t.record("pci-intx", pci_intx(m, f));
    }
    if m.pci.iter().flat_map(|f| f.bars()).any(is_high_memory_bar) {
        t.record("pci-bar-high", pci_bars_high(m));
    }
    if let Some(f) = m.pci.iter().find(|f| (f.vendor, f.device) == IVSHMEM) {
        t.record("ivshmem-bar", ivshmem_bar(f));
    }
    for id in config.expect_pci() {
        let v = match m
            .pci
            .iter()
            .find(|f| f.vendor == id.vendor && f.device == id.device)
        {
            Some(f) => Ok(detail!("{id} at {} ({} BARs)", f.bdf, f.bars().count())),
            None => Err(detail!("{id} not found among {} functions", m.pci.len())),
        };
        t.record(&detail!("pci-expect {id}"), v);
    }
    crate::println!("selftest: {} passed, {} failed", t.passed, t.failed);
    t.failed == 0
}

fn identity_map() -> Verdict {
    let buf = dma::alloc(4096, 4096).map_err(|e| detail!("no frame: {e:?}"))?;
    let phys = buf.bus();
    let t = mm::translate(phys).ok_or_else(|| detail!("{phys:#x} not mapped"))?;
    if t.phys != phys {
        return Err(detail!("virtual {phys:#x} maps physical {:#x}", t.phys));
    }
    let ident = phys as *mut u64;
    let window = mm::phys_to_window(phys) as *mut u64;
    let pattern = 0x1b6e_44c0_ffee_0000 ^ phys;
    // SAFETY: both pointers reach the frame owned by `buf` (identity and the bootloader's
    // window); volatile accesses make each one really go to memory.
    let (seen_window, seen_ident) = unsafe {
        ident.add(7).write_volatile(pattern);
        let a = window.add(7).read_volatile();
        window.add(9).write_volatile(!pattern);
        (a, ident.add(9).read_volatile())
    };
    if seen_window != pattern || seen_ident != !pattern {
        return Err(detail!(
            "wrote {pattern:#x} at {phys:#x}, window read {seen_window:#x}"
        ));
    }
    Ok(detail!(
        "frame {phys:#x} written at virtual {phys:#x}, read back through {:#x}, and vice versa",
        window as u64
    ))
}

fn page_sizes(m: &Machine) -> Verdict {
    let c = mm::identity_pages();
    let largest = if c.size_1g > 0 {
        "1G"
    } else if c.size_2m > 0 {
        "2M"
    } else {
        "4K"
    };
    let d = detail!(
        "largest {largest} (cpu 1G pages: {}); identity leaves 1G={} 2M={} 4K={}; RAM {} MiB",
        if m.features.page_1g { "yes" } else { "no" },
        c.size_1g,
        c.size_2m,
        c.size_4k,
        m.mm.ram_bytes >> 20
    );
    let expected = match m.mm.largest_page {
        PageSize::Size1G => c.size_1g > 0,
        _ => c.size_2m > 0 && c.size_1g == 0,
    };
    if expected {
        Ok(d)
    } else {
        Err(d)
    }
}

fn kernel_permissions(m: &Machine) -> Verdict {
    if let Some(v) = mm::find_writable_executable() {
        return Err(detail!("page at {v:#x} is writable and executable"));
    }
    let text = mm::translate(m.kernel_text).ok_or("kernel text not mapped")?;
    let stack_probe = 0u64;
    let stack = mm::translate(&stack_probe as *const u64 as u64).ok_or("stack not mapped")?;
    if !text.executable || text.writable || stack.executable || !stack.writable {
        return Err(detail!(
            "text x={} w={}, stack x={} w={}",
            text.executable,
            text.writable,
            stack.executable,
            stack.writable
        ));
    }
    let ram = mm::translate(0x10_0000).ok_or("RAM at 1 MiB not mapped")?;
    if ram.executable {
        return Err("identity-mapped RAM is executable".into());
    }
    Ok(detail!(
        "no W+X page; text {:#x} r-x, stack rw-, identity RAM rw- nx",
        m.kernel_text
    ))
}

fn pat_layout(m: &Machine) -> Verdict {
    let value = pat::read();
    if value != pat::PAT_VALUE {
        return Err(detail!(
            "IA32_PAT {value:#018x}, expected {:#018x}",
            pat::PAT_VALUE
        ));
    }
    // Register windows are uncached: the LAPIC's (xAPIC mode) and every I/O APIC's.
    let mut windows: Vec<(&str, u64)> = m
        .acpi
        .madt
        .ioapics()
        .iter()
        .map(|io| ("IOAPIC", io.address))
        .collect();
    if lapic::mode() == lapic::Mode::XApic {
        windows.push(("LAPIC", m.acpi.madt.lapic_address));
    }
    for (name, at) in &windows {
        let t = mm::translate(*at).ok_or_else(|| detail!("{name} at {at:#x} not mapped"))?;
        if t.cache != Some(Cache::Uncached) {
            return Err(detail!("{name} at {at:#x} mapped {:?}", t.cache));
        }
    }
    // A write-combining window: map it, check the entry, and use it.
    let buf = dma::alloc(2 << 20, 2 << 20).map_err(|e| detail!("no 2 MiB buffer: {e:?}"))?;
    mm::map(buf.bus(), 2 << 20, Cache::WriteCombining).map_err(|e| detail!("map WC: {e:?}"))?;
    let wc = mm::translate(buf.bus() + 4096).ok_or("WC window not mapped")?;
    // SAFETY: `buf` owns the memory; WC stores plus a fence reach memory in order.
    let back = unsafe {
        (buf.as_ptr() as *mut u64).write_volatile(0x5a5a);
        core::arch::asm!("sfence", options(nostack));
        (mm::phys_to_window(buf.bus()) as *const u64).read_volatile()
    };
    let restored = mm::map(buf.bus(), 2 << 20, Cache::WriteBack);
    if wc.cache != Some(Cache::WriteCombining) || back != 0x5a5a || restored.is_err() {
        return Err(detail!(
            "WC mapping {:?}, write seen {back:#x}, restore {restored:?}",
            wc.cache
        ));
    }
    Ok(detail!(
        "IA32_PAT {value:#018x} (0 WB, 3 UC, 5 WC); {} uncached; WC window at {:#x} works",
        windows
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join("+"),
        buf.bus()
    ))
}

fn heap() -> Verdict {
    let before = mm::heap::HEAP.usage().0;
    let v: Vec<u64> = (0..10_000u64).map(|i| i * 3).collect();
    let big: Box<[u8]> = alloc::vec![0xa5u8; 1 << 20].into_boxed_slice();
    let mut s = String::new();
    let _ = write!(s, "{}", v.len());
    let ok = v.iter().enumerate().all(|(i, &x)| x == i as u64 * 3)
        && big.iter().all(|&b| b == 0xa5)
        && s == "10000";
    let during = mm::heap::HEAP.usage().0;
    drop((v, big, s));
    let (after, total) = mm::heap::HEAP.usage();
    if !ok || after != before || during < before + (1 << 20) {
        return Err(detail!(
            "contents ok={ok}, in use before {before} during {during} after {after}"
        ));
    }
    Ok(detail!(
        "1 MiB + 80 KB allocated, verified and freed; {} KiB heap, {after} bytes in use",
        total >> 10
    ))
}

fn dma_alloc() -> Verdict {
    let stats0 = dma::stats();
    let frames0 = mm::free_frame_count();
    let mut bufs = Vec::new();
    for (size, align) in [
        (100usize, 4096usize),
        (64 << 10, 64 << 10),
        (3 << 20, 2 << 20),
        (4096, 1 << 20),
    ] {
        let mut b = dma::alloc(size, align).map_err(|e| detail!("alloc {size}/{align}: {e:?}"))?;
        let t = mm::translate(b.bus()).ok_or("not mapped")?;
        if b.bus() % align as u64 != 0
            || t.phys != b.bus()
            || b.as_ptr() as u64 != b.bus()
            || b.size() < size
            // No device has the region yet: the CPU's own view.
            || b.bytes_mut().iter().any(|&x| x != 0)
        {
            return Err(detail!(
                "buffer {:#x} len {} (asked {size} aligned {align:#x}) bad",
                b.bus(),
                b.size()
            ));
        }
        bufs.push(b);
    }
    // Non-overlapping.
    for (i, a) in bufs.iter().enumerate() {
        for b in &bufs[i + 1..] {
            if a.bus() < b.bus() + b.size() as u64 && b.bus() < a.bus() + a.size() as u64 {
                return Err(detail!("{:#x} and {:#x} overlap", a.bus(), b.bus()));
            }
        }
    }
    let in_use = dma::stats();
    let summary = detail!(
        "4 regions {} KiB, aligned, zeroed, address == pointer",
        (in_use.bytes - stats0.bytes) >> 10
    );
    drop(bufs);
    let after = dma::stats();
    if after != stats0 || mm::free_frame_count() != frames0 {
        return Err(detail!(
            "leak: {after:?} vs {stats0:?}, frames {} vs {frames0}",
            mm::free_frame_count()
        ));
    }
    Ok(detail!(
        "{summary}; all freed ({} bytes in use)",
        after.bytes
    ))
}

fn tsc_vs_second_clock(m: &Machine) -> Verdict {
    let hz = tsc::frequency();
    if hz == 0 {
        return Err("TSC not calibrated".into());
    }
    let (measured, clock) = if let Some(hpet_hz) = m.hpet_hz {
        let f = tsc::measure_against(&hpet::counter, hpet_hz, 50).ok_or("HPET did not advance")?;
        (f, "hpet")
    } else if m.tsc_source != tsc::Source::Pit {
        let (ticks, _) = pit::measure_tsc(59_659).ok_or("PIT did not count")?;
        (
            tsc::freq_from_measurement(ticks, 59_659, pit::PIT_HZ)
                .ok_or("implausible PIT measurement")?,
            "pit",
        )
    } else {
        return Err(
            "calibrated from the PIT and there is no HPET: no independent second clock".into(),
        );
    };
    let ppm = tsc::deviation_ppm(measured, hz);
    let d = detail!(
        "{} MHz from {:?}, {} MHz against the {clock}: {}.{:02}% apart (limit 1%)",
        hz / 1_000_000,
        m.tsc_source,
        measured / 1_000_000,
        ppm / 10_000,
        ppm % 10_000 / 100
    );
    if ppm <= 10_000 {
        Ok(d)
    } else {
        Err(d)
    }
}

static TICKS: AtomicU64 = AtomicU64::new(0);

fn tick(_vector: u8) {
    TICKS.fetch_add(1, Ordering::Relaxed);
}

/// Waits up to `ms` for `TICKS` to reach `n`; returns the count and the time taken.
fn wait_ticks(n: u64, ms: u64) -> (u64, u64) {
    let start = tsc::now_ns();
    while TICKS.load(Ordering::Relaxed) < n && tsc::now_ns() - start < ms * 1_000_000 {
        core::hint::spin_loop();
    }
    (
        TICKS.load(Ordering::Relaxed),
        (tsc::now_ns() - start) / 1_000_000,
    )
}

fn lapic_timer() -> Verdict {
    TICKS.store(0, Ordering::Relaxed);
    interrupts::register(interrupts::TIMER_VECTOR, tick).map_err(|e| detail!("{e:?}"))?;
    lapic::start_timer(interrupts::TIMER_VECTOR, 50_000, true);
    let (n, ms) = wait_ticks(5, 1000);
    lapic::stop_timer();
    interrupts::free(interrupts::TIMER_VECTOR);
    if n < 5 {
        return Err(detail!("{n} timer interrupts in {ms} ms"));
    }
    Ok(detail!(
        "{n} interrupts on vector {:#x} in {ms} ms (periodic, count 50000 / 16)",
        interrupts::TIMER_VECTOR
    ))
}

fn ioapic_line(m: &Machine) -> Verdict {
    TICKS.store(0, Ordering::Relaxed);
    let vector = interrupts::allocate(tick).map_err(|e| detail!("{e:?}"))?;
    let result = (|| {
        let gsi = ioapic::route_isa_irq(&m.acpi.madt, 0, vector)
            .map_err(|e| detail!("route IRQ 0: {e:?}"))?;
        pit::start_periodic(1000);
        let (n, ms) = wait_ticks(5, 1000);
        pit::stop_periodic();
        let _ = ioapic::mask_gsi(gsi);
        if n < 5 {
            return Err(detail!(
                "PIT IRQ 0 -> GSI {gsi} -> vector {vector:#x}: {n} interrupts in {ms} ms"
            ));
        }
        Ok(detail!("PIT IRQ 0 -> GSI {gsi} (MADT override) -> vector {vector:#x}: {n} interrupts in {ms} ms"))
    })();
    interrupts::free(vector);
    result
}

/// Programs entry 0 of a function's MSI-X table (MSI-X itself stays disabled), reads it
/// back and restores the entry.
fn msix_table(m: &Machine, f: &crate::pci::Function) -> Verdict {
    use crate::pci::msix;
    let info = f.msix.ok_or("no MSI-X")?;
    let bar = f
        .bars()
        .find(|b| b.index == info.table_bar)
        .ok_or_else(|| detail!("{}: table BAR{} not implemented", f.bdf, info.table_bar))?;
    let regs =
        crate::pci::map_bar(bar, Cache::Uncached).map_err(|e| detail!("{}: {e:?}", f.bdf))?;
    // SAFETY: the table BAR was mapped uncached just above and the MSI-X capability places
    // the table (entries × 16 bytes, accessed only through `msix::Table`) inside it.
    let table_at = unsafe { crate::mm::mmio::Mmio::new(bar.address + info.table_offset as u64) };
    let saved: [u32; 4] = core::array::from_fn(|i| table_at.read32(4 * i));
    let vector = interrupts::allocate(tick).map_err(|e| detail!("{e:?}"))?;
    let table = msix::Table::new(table_at, info.entries);
    let msg = msix::message(m.lapic_id, vector);
    let result = table
        .program(0, msg)
        .map_err(|e| detail!("{e:?}"))
        .and_then(|_| table.read(0).map_err(|e| detail!("{e:?}")));
    for (i, v) in saved.iter().enumerate() {
        table_at.write32(4 * i, *v);
    }
    interrupts::free(vector);
    let _ = regs;
    match result {
        Ok((back, true)) if back == msg => Ok(detail!(
            "{} {:04x}:{:04x}: entry 0 of {} at bar{}+{:#x} programmed {:#x}/{:#x}, read back masked, restored",
            f.bdf,
            f.vendor,
            f.device,
            info.entries,
            info.table_bar,
            info.table_offset,
            msg.address,
            msg.data
        )),
        Ok((back, masked)) => Err(detail!("{}: wrote {msg:x?}, read {back:x?} masked={masked}", f.bdf)),
        Err(e) => Err(e),
    }
}

/// Intel 82574L (QEMU's `e1000e`): a device whose interrupt can be raised by software.
const E1000E: (u16, u16) = (0x8086, 0x10d3);

/// Intel gigabit NICs QEMU models (82540EM `e1000`, 82574L `e1000e`): same interrupt
/// registers, and software can raise an interrupt cause.
const E1000_FAMILY: [(u16, u16); 2] = [(0x8086, 0x100e), E1000E];

/// Register window of the NIC under test (read by the INTx handler to acknowledge).
static INTX_REGS: AtomicU64 = AtomicU64::new(0);

/// INTx handler: reading ICR clears the causes and deasserts the (level) line.
fn intx_tick(_vector: u8) {
    // SAFETY: `pci_intx` stores the NIC's BAR0 base here after mapping it uncached, before
    // routing this handler; ICR lies inside BAR0.
    let regs = unsafe { crate::mm::mmio::Mmio::new(INTX_REGS.load(Ordering::Relaxed)) };
    let _ = regs.read32(e1000e::ICR);
    TICKS.fetch_add(1, Ordering::Relaxed);
}

/// Legacy INTx end to end: the NIC's interrupt line (firmware-written) is routed through
/// the I/O APIC by `route_pci_intx`, a link-status cause is raised by software, and the
/// vector must fire. This checks the routing assumption documented in docs/kernel.md.
fn pci_intx(m: &Machine, f: &crate::pci::Function) -> Verdict {
    use crate::pci;
    let cfg = pci::access::get().ok_or("no PCI access")?;
    let bar0 = f
        .bars()
        .find(|b| b.index == 0)
        .copied()
        .ok_or("BAR0 missing")?;
    let regs = pci::map_bar(&bar0, Cache::Uncached).map_err(|e| detail!("BAR0: {e:?}"))?;
    INTX_REGS.store(bar0.address, Ordering::Relaxed);
    let saved_command = cfg.read16(f.bdf, pci::regs::COMMAND);
    TICKS.store(0, Ordering::Relaxed);
    let vector = interrupts::allocate(intx_tick).map_err(|e| detail!("{e:?}"))?;
    let result = (|| {
        let gsi = ioapic::route_pci_intx(&m.acpi.madt, f.interrupt_line, vector)
            .map_err(|e| detail!("line {}: {e:?}", f.interrupt_line))?;
        pci::enable(cfg, f.bdf, false);
        regs.write32(e1000e::IMC, u32::MAX);
        let _ = regs.read32(e1000e::ICR);
        regs.write32(e1000e::IMS, e1000e::CAUSE_LSC);
        regs.write32(e1000e::ICS, e1000e::CAUSE_LSC);
        let (n, ms) = wait_ticks(1, 200);
        regs.write32(e1000e::IMC, u32::MAX);
        let _ = regs.read32(e1000e::ICR);
        let _ = ioapic::mask_gsi(gsi);
        let pin = (b'A' + f.interrupt_pin - 1) as char;
        if n == 0 {
            return Err(detail!(
                "{} INT{pin} line {} -> GSI {gsi} -> vector {vector:#x}: no interrupt in {ms} ms",
                f.bdf,
                f.interrupt_line
            ));
        }
        Ok(detail!(
            "{} {:04x}:{:04x} INT{pin} line {} -> GSI {gsi} -> vector {vector:#x}: {n} interrupt(s) in {ms} ms",
            f.bdf,
            f.vendor,
            f.device,
            f.interrupt_line
        ))
    })();
    cfg.write16(f.bdf, pci::regs::COMMAND, saved_command);
    interrupts::free(vector);
    result
}

/// 82574L registers (Intel 82574 datasheet, 10.2): interrupt cause read/set, mask
/// set/clear, and the MSI-X vector allocation for the "other" causes.
mod e1000e {
    pub const ICR: usize = 0xc0;
    pub const ICS: usize = 0xc8;
    pub const IMS: usize = 0xd0;
    pub const IMC: usize = 0xd8;
    pub const IVAR: usize = 0xe4;
    /// Per-vector interrupt throttling (EITR0..4), in 256 ns units.
    pub const EITR0: usize = 0xe8;
    /// Link status change (an "other" cause).
    pub const CAUSE_LSC: u32 = 1 << 2;
    /// The summary bit of the other causes in MSI-X mode.
    pub const CAUSE_OTHER: u32 = 1 << 24;
    /// IVAR: "other" causes go to the vector in bits 18:16 when bit 19 is set.
    pub const IVAR_OTHER_VALID: u32 = 1 << 19;
}

/// End-to-end MSI-X: the e1000e's table entry 0 gets our message, the device is told to
/// raise a link-status interrupt, and the vector must fire. Everything is undone after.
fn msix_delivery(m: &Machine, f: &crate::pci::Function) -> Verdict {
    use crate::pci::{self, msix};
    let cfg = pci::access::get().ok_or("no PCI access")?;
    let info = f.msix.ok_or("no MSI-X")?;
    let bar = |i: u8| {
        f.bars()
            .find(|b| b.index == i)
            .copied()
            .ok_or_else(|| detail!("BAR{i} missing"))
    };
    let regs = pci::map_bar(&bar(0)?, Cache::Uncached).map_err(|e| detail!("BAR0: {e:?}"))?;
    let table_bar = bar(info.table_bar)?;
    pci::map_bar(&table_bar, Cache::Uncached).map_err(|e| detail!("table BAR: {e:?}"))?;
    // SAFETY: the table BAR was mapped uncached just above and the MSI-X capability places
    // the table (entries × 16 bytes, accessed only through `msix::Table`) inside it.
    let table_at =
        unsafe { crate::mm::mmio::Mmio::new(table_bar.address + info.table_offset as u64) };
    let table = msix::Table::new(table_at, info.entries);
    let saved_command = cfg.read16(f.bdf, pci::regs::COMMAND);
    TICKS.store(0, Ordering::Relaxed);
    let vector = interrupts::allocate(tick).map_err(|e| detail!("{e:?}"))?;
    let msg = msix::message(m.lapic_id, vector);

    pci::enable(cfg, f.bdf, true);
    let programmed = table.program(0, msg).and_then(|_| table.unmask(0));
    msix::enable(cfg, f.bdf, &info);
    // No throttling on vector 0: QEMU's model arms a timer per throttled interrupt and
    // aborts if it fires after MSI-X is disabled again.
    let saved_eitr = regs.read32(e1000e::EITR0);
    regs.write32(e1000e::EITR0, 0);
    regs.write32(e1000e::IVAR, e1000e::IVAR_OTHER_VALID);
    regs.write32(e1000e::IMS, e1000e::CAUSE_LSC | e1000e::CAUSE_OTHER);
    regs.write32(e1000e::ICS, e1000e::CAUSE_LSC);
    let (n, ms) = wait_ticks(1, 200);

    // Undo: mask and clear causes, let any throttling interval (at most 0xffff * 256 ns)
    // pass, disable MSI-X, restore the command register.
    regs.write32(e1000e::IMC, u32::MAX);
    let _ = regs.read32(e1000e::ICR);
    regs.write32(e1000e::IVAR, 0);
    tsc::delay_us(20_000);
    regs.write32(e1000e::EITR0, saved_eitr);
    table.mask_all();
    msix::set_control(cfg, f.bdf, &info, false, false);
    cfg.write16(f.bdf, pci::regs::COMMAND, saved_command);
    interrupts::free(vector);

    programmed.map_err(|e| detail!("{e:?}"))?;
    if n == 0 {
        return Err(detail!(
            "{} {:04x}:{:04x}: no interrupt on vector {vector:#x} within {ms} ms",
            f.bdf,
            f.vendor,
            f.device
        ));
    }
    Ok(detail!(
        "{} {:04x}:{:04x}: software-raised cause delivered through MSI-X entry 0 ({:#x}/{:#x}) to vector {vector:#x} ({n} interrupt in {ms} ms)",
        f.bdf,
        f.vendor,
        f.device,
        msg.address,
        msg.data
    ))
}

fn pci_enumeration(m: &Machine) -> Verdict {
    let bridge = m.pci.iter().find(|f| f.is_host_bridge());
    match bridge {
        Some(b) => Ok(detail!(
            "{} functions via {}, host bridge {} {:04x}:{:04x}",
            m.pci.len(),
            m.pci_mechanism,
            b.bdf,
            b.vendor,
            b.device
        )),
        None => Err(detail!(
            "{} functions via {}, no host bridge",
            m.pci.len(),
            m.pci_mechanism
        )),
    }
}

/// A memory BAR the firmware placed at or above 4 GiB.
fn is_high_memory_bar(bar: &crate::pci::Bar) -> bool {
    bar.kind != crate::pci::BarKind::Io && bar.address >= 1 << 32
}

/// Every memory BAR above 4 GiB is identity mapped uncached, past the end of RAM (the
/// identity map of RAM does not reach there). Maps only; reading a device's registers could
/// have side effects, so no access is made here.
fn pci_bars_high(m: &Machine) -> Verdict {
    let mut out = String::new();
    for f in &m.pci {
        for bar in f.bars().filter(|b| is_high_memory_bar(b)) {
            crate::pci::map_bar(bar, Cache::Uncached)
                .map_err(|e| detail!("{} bar{}: {e:?}", f.bdf, bar.index))?;
            for at in [bar.address, bar.address + bar.size - 8] {
                let t = mm::translate(at).ok_or_else(|| detail!("{at:#x} not mapped"))?;
                if t.phys != at || t.cache != Some(Cache::Uncached) || t.executable {
                    return Err(detail!("{} bar{}: {at:#x} -> {t:?}", f.bdf, bar.index));
                }
            }
            let t = mm::translate(bar.address).ok_or("unmapped")?;
            let _ = write!(
                out,
                "{}{} bar{} {:#x}+{:#x} uc {}",
                if out.is_empty() { "" } else { ", " },
                f.bdf,
                bar.index,
                bar.address,
                bar.size,
                t.size
            );
        }
    }
    Ok(detail!("{out} (top of RAM {:#x})", m.mm.top_of_ram))
}

/// QEMU's `ivshmem-plain` (1af4:1110): BAR2 is plain shared memory (a host file), so the
/// kernel may read and write it. The first qword is whatever the host put there; its
/// complement goes into the second qword, where the host can check it arrived.
const IVSHMEM: (u16, u16) = (0x1af4, 0x1110);

fn ivshmem_bar(f: &crate::pci::Function) -> Verdict {
    let bar = f
        .bars()
        .find(|b| b.index == 2)
        .copied()
        .ok_or("BAR2 missing")?;
    if bar.size < 16 {
        return Err(detail!("BAR2 of {:#x} bytes", bar.size));
    }
    let cfg = crate::pci::access::get().ok_or("no PCI access")?;
    crate::pci::enable(cfg, f.bdf, false);
    let mem = crate::pci::map_bar(&bar, Cache::Uncached).map_err(|e| detail!("BAR2: {e:?}"))?;
    let first = mem.read64(0);
    mem.write64(8, !first);
    let back = mem.read64(8);
    if back != !first {
        return Err(detail!(
            "{bar}: wrote {:#018x} at +8, read back {back:#018x}",
            !first
        ));
    }
    Ok(detail!(
        "{} {bar}: read {first:#018x} at +0, wrote and read back {:#018x} at +8",
        f.bdf,
        !first
    ))
}
