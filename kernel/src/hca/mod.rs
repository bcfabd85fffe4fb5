//! The ConnectX-3 in the kernel: finding it on PCI, the `mlx4::Platform` over the kernel's
//! services ([`platform`]), interrupt set-up, and `mode=hca` (bring-up check).

pub mod cmdlog;
pub mod delegate;
pub mod diag;
pub mod isr;
pub mod pingpong;
pub mod platform;

use core::fmt;

use crate::arch::interrupts::{self, IrqError};
use crate::arch::ioapic::{self, IoApicError};
use crate::config::HcaIrq;
use crate::mm::{dma, Cache, MmError};
use crate::pci::{self, BarError, Bdf, Function};
use crate::println;
use crate::system::Machine;
use platform::{BarWindow, KernelPlatform};

/// Mellanox's PCI vendor id.
pub const VENDOR_MELLANOX: u16 = 0x15b3;
/// ConnectX-3 physical functions this driver runs on (ConnectX-3, ConnectX-3 Pro).
pub const DEVICE_IDS: [u16; 2] = [0x1003, 0x1007];
/// The ConnectX-3 SR-IOV virtual function.
pub const DEVICE_VF: u16 = 0x1004;

/// What can go wrong between PCI and a running driver.
#[derive(Debug)]
pub enum HcaError {
    /// No 15b3:1003/1007 function on the bus.
    NotFound,
    /// Only a virtual function is present.
    VfNotSupported(Bdf),
    /// BAR `n` is missing or not a memory BAR.
    NoBar(u8),
    Bar(BarError),
    Map(MmError),
    Irq(IrqError),
    IoApic(IoApicError),
    /// `hca_irq=intx` but the function has no interrupt pin or no routable line.
    NoIntx {
        pin: u8,
        line: u8,
    },
    /// The driver's error, with what the kernel was doing.
    Driver(&'static str, mlx4::Error),
    /// DMA memory still in use after teardown.
    Leak {
        before: dma::DmaStats,
        after: dma::DmaStats,
    },
    /// The NOP test completed without the interrupt it should raise.
    NoNopInterrupt(&'static str),
    /// The configured port (`ib_port`) does not exist on this card.
    NoSuchPort {
        port: u8,
        ports: u8,
    },
    /// The configured port did not become ACTIVE in time.
    PortNotActive {
        port: u8,
        state: verbs::PortState,
        waited_ms: u64,
    },
    /// `sm=on`: the in-kernel subnet manager failed.
    SubnetManager(mlx4::Error),
}

impl fmt::Display for HcaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HcaError::NotFound => write!(f, "no ConnectX-3 (15b3:1003 or 15b3:1007) on PCI"),
            HcaError::VfNotSupported(bdf) => {
                write!(f, "{bdf} 15b3:1004 is an SR-IOV VF: not supported yet")
            }
            HcaError::NoBar(n) => write!(f, "BAR{n} missing or not memory"),
            HcaError::Bar(e) => write!(f, "BAR: {e:?}"),
            HcaError::Map(e) => write!(f, "mapping: {e:?}"),
            HcaError::Irq(e) => write!(f, "interrupt vector: {e:?}"),
            HcaError::IoApic(e) => write!(f, "I/O APIC: {e:?}"),
            HcaError::NoIntx { pin, line } => {
                write!(f, "INTx unusable: pin {pin}, line {line}")
            }
            HcaError::Driver(what, e) => write!(f, "{what}: {e}"),
            HcaError::Leak { before, after } => write!(
                f,
                "DMA leak: {} bytes in {} regions before, {} bytes in {} regions after",
                before.bytes, before.regions, after.bytes, after.regions
            ),
            HcaError::NoNopInterrupt(kind) => {
                write!(f, "NOP completed but no {kind} interrupt was delivered")
            }
            HcaError::NoSuchPort { port, ports } => {
                write!(f, "ib_port={port}, but the card has {ports} port(s)")
            }
            HcaError::PortNotActive {
                port,
                state,
                waited_ms,
            } => {
                write!(f, "port {port} is {state:?} after {waited_ms} ms: ")?;
                match state {
                    verbs::PortState::Down => write!(
                        f,
                        "no physical link (check the cable and the port at the other end)"
                    ),
                    verbs::PortState::Init | verbs::PortState::Armed => write!(
                        f,
                        "the link is up but no subnet manager has configured the port (run one \
                         on the switch or on a node of the fabric; two nodes cabled back to \
                         back: sm=on on one of them, and a port_wait_ms on the other long \
                         enough for it)"
                    ),
                    _ => write!(f, "not usable"),
                }
            }
            HcaError::SubnetManager(e) => {
                write!(f, "sm=on: the subnet manager failed: {e}")?;
                match e {
                    mlx4::Error::LinkDown { .. } => write!(
                        f,
                        " (is the other node cabled and booted? raise port_wait_ms if it \
                         boots later)"
                    ),
                    mlx4::Error::SmpTimeout { .. } => write!(
                        f,
                        " (nothing answered at the other end of the cable: sm=on supports two \
                         nodes cabled back to back, not a switch)"
                    ),
                    _ => Ok(()),
                }
            }
        }
    }
}

/// Finds the HCA among the enumerated functions.
pub fn find(machine: &Machine) -> Result<&Function, HcaError> {
    let mlx = |f: &&Function| f.vendor == VENDOR_MELLANOX;
    if let Some(f) = machine
        .pci
        .iter()
        .filter(mlx)
        .find(|f| DEVICE_IDS.contains(&f.device))
    {
        return Ok(f);
    }
    match machine
        .pci
        .iter()
        .filter(mlx)
        .find(|f| f.device == DEVICE_VF)
    {
        Some(vf) => Err(HcaError::VfNotSupported(vf.bdf)),
        None => Err(HcaError::NotFound),
    }
}

/// The HCA's function, mapped, with its interrupt vectors allocated and routed.
pub struct Attached {
    pub bdf: Bdf,
    pub irq: HcaIrq,
    bar0: BarWindow,
    bar2: BarWindow,
    /// MSI-X vector (with `hca_irq=msix`).
    pub msix_vector: Option<u8>,
    /// INTx vector and GSI (with `msix`, as the driver's fallback, and `intx`).
    pub intx: Option<(u8, u32)>,
    lapic_id: u8,
}

fn window(f: &Function, index: u8) -> Result<BarWindow, HcaError> {
    let bar = f
        .bars()
        .find(|b| b.index == index)
        .ok_or(HcaError::NoBar(index))?;
    let mmio = pci::map_bar(bar, Cache::Uncached).map_err(HcaError::Bar)?;
    Ok(BarWindow {
        mmio,
        size: bar.size,
    })
}

impl Attached {
    /// Maps BAR0 and BAR2 uncached, enables memory decoding and bus mastering, and sets up
    /// the interrupts `irq` asks for.
    pub fn new(machine: &Machine, f: &Function, irq: HcaIrq) -> Result<Attached, HcaError> {
        let bar0 = window(f, 0)?;
        let bar2 = window(f, 2)?;
        let cfg = pci::access::get().ok_or(HcaError::NotFound)?;
        // Polling: keep the device's INTx off the interrupt controller entirely.
        pci::enable(cfg, f.bdf, irq == HcaIrq::Poll);
        if let Some(link) = f.pcie_link(cfg) {
            log::info!(target: "hca", "{} {:04x}:{:04x} PCIe link: {link}", f.bdf, f.vendor, f.device);
        }
        let mut a = Attached {
            bdf: f.bdf,
            irq,
            bar0,
            bar2,
            msix_vector: None,
            intx: None,
            lapic_id: machine.lapic_id,
        };
        if irq == HcaIrq::Msix {
            a.msix_vector =
                Some(interrupts::allocate(platform::msix_handler).map_err(HcaError::Irq)?);
        }
        if irq != HcaIrq::Poll {
            match a.route_intx(machine, f) {
                Ok(()) => {}
                // With MSI-X the INTx fallback is optional.
                Err(e) if irq == HcaIrq::Msix => {
                    log::warn!(target: "hca", "INTx fallback unavailable: {e}")
                }
                Err(e) => {
                    a.release();
                    return Err(e);
                }
            }
        }
        Ok(a)
    }

    fn route_intx(&mut self, machine: &Machine, f: &Function) -> Result<(), HcaError> {
        let (pin, line) = (f.interrupt_pin, f.interrupt_line);
        if pin == 0 || line == 0xff {
            return Err(HcaError::NoIntx { pin, line });
        }
        let (gsi, polarity, trigger) =
            ioapic::pci_intx_route(&machine.acpi.madt, line).map_err(HcaError::IoApic)?;
        let vector = interrupts::allocate(platform::intx_handler).map_err(HcaError::Irq)?;
        if let Err(e) = platform::route_intx(gsi, vector, polarity, trigger) {
            interrupts::free(vector);
            return Err(HcaError::IoApic(e));
        }
        self.intx = Some((vector, gsi));
        log::info!(target: "hca", "INTx pin {} line {line} -> GSI {gsi} -> vector {vector:#x}", (b'A' + pin - 1) as char);
        Ok(())
    }

    /// A fresh platform for one bring-up (the driver owns it until `close`).
    pub fn platform(&self) -> KernelPlatform {
        let msix = self
            .msix_vector
            .map(|v| pci::msix::message(self.lapic_id, v));
        KernelPlatform::new(self.bdf, self.bar0, self.bar2, msix)
    }

    /// The driver configuration for this interrupt mode (everything else default).
    pub fn driver_config(&self) -> mlx4::Config {
        mlx4::Config {
            use_events: self.irq != HcaIrq::Poll,
            use_msix: self.irq == HcaIrq::Msix,
            ..mlx4::Config::default()
        }
    }

    /// Interrupts delivered so far on the vectors of this mode (MSI-X, INTx).
    pub fn interrupt_counts(&self) -> (u64, u64) {
        (
            self.msix_vector.map_or(0, interrupts::count),
            self.intx.map_or(0, |(v, _)| interrupts::count(v)),
        )
    }

    /// Masks INTx and frees the vectors.
    pub fn release(&mut self) {
        platform::unroute_intx();
        if let Some((v, _)) = self.intx.take() {
            interrupts::free(v);
        }
        if let Some(v) = self.msix_vector.take() {
            interrupts::free(v);
        }
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.release();
    }
}

/// Brings the HCA up: `Hca::init`, the BlueFlame window mapped write-combining, and `port`
/// (the configured `ib_port`) waited for until ACTIVE, bounded by `port_timeout_ms`. Other
/// ports are not waited for: a dual-port card with one port uncabled works on the other, and
/// the summary shows every port's state.
pub fn bring_up(
    att: &Attached,
    port: u8,
    port_timeout_ms: u64,
) -> Result<mlx4::Hca<KernelPlatform>, HcaError> {
    bring_up_with(att, port, port_timeout_ms, false)
}

/// [`bring_up`], and with `sm` (config `sm=on`) the in-kernel subnet manager for two nodes
/// cabled back to back runs first unless the port is ACTIVE already: it waits (bounded by
/// `port_timeout_ms`) for the link, discovers the peer over QP0, gives itself LID 1 and the
/// peer LID 2 and brings both ports ACTIVE (`mlx4::Hca::run_back_to_back_sm`).
pub fn bring_up_with(
    att: &Attached,
    port: u8,
    port_timeout_ms: u64,
    sm: bool,
) -> Result<mlx4::Hca<KernelPlatform>, HcaError> {
    let mut hca = mlx4::Hca::init(att.platform(), att.driver_config())
        .map_err(|e| HcaError::Driver("bring-up", e))?;
    // §1.6: a device with an internal error is not usable (it needs a reset).
    check_catas(&hca)?;
    let uar_size = hca.caps().uar_size;
    match hca.platform().map_blueflame(uar_size) {
        Ok(0) => log::warn!(target: "hca", "no BlueFlame window (uar_size {uar_size:#x})"),
        Ok(len) => {
            log::info!(target: "hca", "BlueFlame: BAR2+{uar_size:#x}, {} KiB write-combining", len >> 10)
        }
        Err(e) => return Err(HcaError::Map(e)),
    }
    let ports = hca.caps().num_ports;
    if port == 0 || port > ports {
        return Err(HcaError::NoSuchPort { port, ports });
    }
    // One bound for the whole wait: the subnet manager's link wait and the ACTIVE wait after
    // it share `port_timeout_ms` (the latter always gets a moment to read the state).
    let start = crate::now_ns();
    if sm {
        run_subnet_manager(&mut hca, port, port_timeout_ms)?;
    }
    let spent_ms = (crate::now_ns() - start) / 1_000_000;
    let left_ms = port_timeout_ms.saturating_sub(spent_ms).max(100);
    match hca.wait_port_active(port, left_ms) {
        Ok(_) => Ok(hca),
        Err(mlx4::Error::PortNotActive { port, state }) => Err(HcaError::PortNotActive {
            port,
            state,
            waited_ms: port_timeout_ms,
        }),
        Err(e) => Err(HcaError::Driver("port", e)),
    }
}

/// `sm=on`: configure both ends of a back-to-back cable unless the port is ACTIVE already.
fn run_subnet_manager(
    hca: &mut mlx4::Hca<KernelPlatform>,
    port: u8,
    wait_ms: u64,
) -> Result<(), HcaError> {
    let state = hca
        .port_attr(port)
        .map_err(|e| HcaError::Driver("port", e))?
        .state;
    if state == verbs::PortState::Active {
        println!("sm: port {port} is ACTIVE already (another subnet manager); nothing to do");
        return Ok(());
    }
    let cfg = mlx4::SmConfig {
        link_timeout_ms: wait_ms,
        ..mlx4::SmConfig::default()
    };
    let r = hca
        .run_back_to_back_sm(port, &cfg)
        .map_err(HcaError::SubnetManager)?;
    println!(
        "sm: port {port}: LID {} (SM), peer node {:#018x} LID {}, {} SMPs",
        r.local_lid, r.peer_node_guid, r.peer_lid, r.smps
    );
    Ok(())
}

/// §1.6: reads the first dword of the catastrophic error buffer, when QUERY_FW placed it
/// inside the mapped BAR; a buffer outside it is reported once and not read (reads there
/// would come back as all ones and look like an internal error).
pub fn check_catas(hca: &mlx4::Hca<KernelPlatform>) -> Result<(), HcaError> {
    let (bar, offset, len) = hca.catas_location();
    if !hca.platform().covers(bar, offset, len) {
        log::warn!(target: "hca", "catastrophic error buffer {bar:?}+{offset:#x} ({len} bytes) lies outside the mapped BAR; not checked");
        return Ok(());
    }
    hca.check_catas()
        .map_err(|e| HcaError::Driver("catastrophic error buffer", e))
}

/// The NOP interrupt test on a running HCA: one NOP, which completes through the EQ and
/// must raise the interrupt of the mode in use (polling: completes by polling).
pub fn nop_test(att: &Attached, hca: &mut mlx4::Hca<KernelPlatform>) -> Result<(), HcaError> {
    // Start from a quiet line: events since bring-up (port changes) may have left INTx
    // asserted, and the handler masks the pin until the driver clears the device's
    // register. Clear and drain, let the deassertion reach the interrupt controller (under
    // QEMU it travels asynchronously), re-arm the pin; repeat while a stale level fires.
    for _ in 0..5 {
        hca.handle_interrupt();
        crate::delay_us(5_000);
        let quiet = att.interrupt_counts();
        platform::unmask_intx();
        crate::delay_us(5_000);
        if att.interrupt_counts() == quiet {
            break;
        }
    }
    let before = att.interrupt_counts();
    hca.nop().map_err(|e| HcaError::Driver("NOP", e))?;
    // The interrupt is raised with the EQE; give it a bounded moment to arrive.
    let start = crate::now_ns();
    let fired = |c: (u64, u64)| match hca.irq_mode() {
        mlx4::IrqMode::Msix => c.0 > before.0,
        mlx4::IrqMode::Intx => c.1 > before.1,
        mlx4::IrqMode::Polling => true,
    };
    while !fired(att.interrupt_counts()) {
        if crate::now_ns() - start > 100_000_000 {
            log::debug!(target: "hca", "NOP test: counts {before:?} -> {:?}, intx handler runs {}", att.interrupt_counts(), platform::INTX_COUNT.load(core::sync::atomic::Ordering::Relaxed));
            return Err(HcaError::NoNopInterrupt(match hca.irq_mode() {
                mlx4::IrqMode::Msix => "MSI-X",
                _ => "INTx",
            }));
        }
        core::hint::spin_loop();
    }
    // INTx: let the driver clear the device's interrupt (and unmask the pin).
    hca.handle_interrupt();
    let _ = hca.take_interrupt(mlx4::IrqLine::Intx);
    let after = att.interrupt_counts();
    match hca.irq_mode() {
        mlx4::IrqMode::Msix => println!(
            "hca: NOP interrupt test passed: MSI-X vector {:#x} ({} interrupt(s))",
            att.msix_vector.unwrap_or(0),
            after.0 - before.0
        ),
        mlx4::IrqMode::Intx => println!(
            "hca: NOP interrupt test passed: INTx GSI {} vector {:#x} ({} interrupt(s))",
            att.intx.map_or(0, |i| i.1),
            att.intx.map_or(0, |i| i.0),
            after.1 - before.1
        ),
        mlx4::IrqMode::Polling => {
            println!("hca: NOP test passed: completed by polling (no interrupts)")
        }
    }
    Ok(())
}

/// `mode=hca`: find, bring up, summary, NOP test, teardown, and once more; DMA memory must
/// be back where it started after each teardown.
pub fn run(
    machine: &Machine,
    irq: HcaIrq,
    port: u8,
    port_wait_ms: u64,
    sm: bool,
) -> Result<(), HcaError> {
    let f = find(machine)?;
    println!(
        "hca: {} {:04x}:{:04x} bar0 {:#x} ({} KiB) bar2 {:#x} ({} KiB), irq {irq:?}",
        f.bdf,
        f.vendor,
        f.device,
        f.bars().find(|b| b.index == 0).map_or(0, |b| b.address),
        f.bars().find(|b| b.index == 0).map_or(0, |b| b.size >> 10),
        f.bars().find(|b| b.index == 2).map_or(0, |b| b.address),
        f.bars().find(|b| b.index == 2).map_or(0, |b| b.size >> 10),
    );
    let att = Attached::new(machine, f, irq)?;
    let before = dma::stats();
    for round in 1..=2 {
        let start = crate::now_ns();
        let mut hca = bring_up_with(&att, port, port_wait_ms, sm)?;
        println!(
            "hca: round {round}: up in {} ms, {} commands",
            (crate::now_ns() - start) / 1_000_000,
            hca.commands_issued()
        );
        let summary = hca.summary();
        println!("{summary}");
        nop_test(&att, &mut hca)?;
        hca.close().map_err(|e| HcaError::Driver("teardown", e))?;
        let after = dma::stats();
        if after != before {
            return Err(HcaError::Leak { before, after });
        }
        println!(
            "hca: round {round}: torn down; DMA in use back to {} bytes in {} regions",
            after.bytes, after.regions
        );
    }
    Ok(())
}
