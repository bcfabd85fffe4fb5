//! One emulated ConnectX-3: the state of every block and the plumbing they share (DMA through
//! the host memory, violation recording, the MMIO entry points). The blocks themselves live in
//! their own modules (`pci`, `regs`, `hcr`, `cmd`, `icm`, `eq`, `cq`, `qp`, `mr`, `uar`, `port`)
//! as `impl Hca` blocks, organised like the device.

use std::collections::BTreeMap;

use crate::counters::Counters;
use crate::cq::Cq;
use crate::eq::Eq;
use crate::hcr::CommandFault;
use crate::hcr::Hcr;
use crate::host::{HostMemory, Interrupts};
use crate::icm::{FwState, IcmMap};
use crate::mr::Mpt;
use crate::packet::Packet;
use crate::pci::PciConfig;
use crate::port::Port;
use crate::profile::DeviceProfile;
use crate::qp::Qp;
use crate::uar::UarState;
use crate::violation::{Violation, MAX_KEPT_VIOLATIONS};

/// Something the HCA asks the fabric to do after an access (the fabric owns the other HCAs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FabricRequest {
    /// INIT_PORT brought the physical link of this port up (§6.5).
    PortUp(u8),
    /// CLOSE_PORT took it down.
    PortDown(u8),
}

/// How many send-queue switches an HCA records (a sweep records two per size).
pub const MAX_SQ_SWITCHES: usize = 1 << 16;

pub struct Hca {
    pub index: usize,
    pub profile: DeviceProfile,
    mem: Box<dyn HostMemory>,
    pub(crate) irq: Box<dyn Interrupts>,
    pub pci: PciConfig,
    pub(crate) intx_pending: u64,
    pub(crate) intx_level: bool,
    pub(crate) owned: bool,
    pub(crate) semaphore_taken: bool,
    pub hcr: Hcr,
    pub fw: FwState,
    pub icm: IcmMap,
    pub eqs: BTreeMap<u32, Eq>,
    /// MAP_EQ: event type -> EQN (§2.3 MAP_EQ, §4.1).
    pub event_map: [Option<u32>; 64],
    pub cqs: BTreeMap<u32, Cq>,
    pub mpts: BTreeMap<u32, Mpt>,
    pub qps: BTreeMap<u32, Qp>,
    pub srqs: BTreeMap<u32, crate::srq::Srq>,
    pub ports: Vec<Port>,
    /// CONF_SPECIAL_QP base (0 = not configured) (§4.3).
    pub special_qp_base: u32,
    /// Catastrophic error buffer (§1.6): all zero unless a test injects an internal error.
    pub(crate) catas: [u32; crate::regs::CATAS_DWORDS as usize],
    pub uar: UarState,
    pub(crate) cmd_faults: Vec<CommandFault>,
    pub(crate) now_ns: u64,
    pub(crate) outbox: Vec<Packet>,
    /// VL15 packets (SMPs) for the link (smp.rs).
    pub(crate) smp_outbox: Vec<crate::smp::SmpPacket>,
    pub(crate) requests: Vec<FabricRequest>,
    violations: Vec<Violation>,
    /// Things a real device meets in correct operation that tests may want to see (not
    /// violations), e.g. a BlueFlame burst that arrived incomplete (docs/model.md).
    observations: Vec<String>,
    pub counters: Counters,
    /// Every switch of send queue ([`Hca::note_send_queue`]), at most [`MAX_SQ_SWITCHES`].
    pub sq_switches: Vec<crate::counters::SqSwitch>,
    /// Behaviour recorder (off unless the fabric turns it on); kept across resets.
    pub trace: crate::trace::Trace,
    /// How the driver handed over the WQEs the SQ walk is running, for the trace: "doorbell",
    /// or "blueflame" while an incomplete BlueFlame burst is being run from memory (the driver
    /// chose BlueFlame; only write-combining split the burst).
    pub(crate) sq_run_via: &'static str,
}

impl Hca {
    pub fn new(
        index: usize,
        profile: DeviceProfile,
        mem: Box<dyn HostMemory>,
        irq: Box<dyn Interrupts>,
        cmd_faults: Vec<CommandFault>,
    ) -> Hca {
        let ports = (1..=profile.num_ports)
            .map(|n| Port::new(&profile, index, n))
            .collect();
        Hca {
            index,
            pci: PciConfig::new(&profile),
            hcr: Hcr::default(),
            fw: FwState::default(),
            icm: IcmMap::default(),
            eqs: BTreeMap::new(),
            event_map: [None; 64],
            cqs: BTreeMap::new(),
            mpts: BTreeMap::new(),
            qps: BTreeMap::new(),
            srqs: BTreeMap::new(),
            ports,
            special_qp_base: 0,
            catas: [0; crate::regs::CATAS_DWORDS as usize],
            uar: UarState::default(),
            intx_pending: 0,
            intx_level: false,
            owned: false,
            semaphore_taken: false,
            profile,
            mem,
            irq,
            cmd_faults,
            now_ns: 0,
            outbox: Vec::new(),
            smp_outbox: Vec::new(),
            requests: Vec::new(),
            violations: Vec::new(),
            observations: Vec::new(),
            counters: Counters::default(),
            sq_switches: Vec::new(),
            trace: crate::trace::Trace::default(),
            sq_run_via: "doorbell",
        }
    }

    /// Record a contract violation (kept up to `MAX_KEPT_VIOLATIONS`, always counted).
    pub(crate) fn violation(&mut self, section: &'static str, description: impl Into<String>) {
        self.counters.violations += 1;
        let description = description.into();
        log::debug!("hca{}: violation [{section}] {description}", self.index);
        if self.violations.len() < MAX_KEPT_VIOLATIONS {
            self.violations.push(Violation {
                section,
                description,
            });
        }
    }

    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// Record an observation: legal behaviour worth knowing about (kept up to
    /// `MAX_KEPT_VIOLATIONS`).
    pub(crate) fn observe(&mut self, description: impl Into<String>) {
        let description = description.into();
        log::debug!("hca{}: observed: {description}", self.index);
        if self.observations.len() < MAX_KEPT_VIOLATIONS {
            self.observations.push(description);
        }
    }

    pub fn observations(&self) -> &[String] {
        &self.observations
    }

    /// Free-running internal clock (QUERY_FW 0x50): fabric time in cycles of the profile's
    /// core clock (QUERY_HCA 0x0C).
    pub(crate) fn clock_ticks(&self) -> u64 {
        (u128::from(self.now_ns) * u128::from(self.profile.hca_core_clock_mhz) / 1000) as u64
    }

    // ---- DMA ----

    /// Device read of host memory. Needs bus mastering; faults are recorded.
    pub(crate) fn dma_read(&mut self, addr: u64, buf: &mut [u8], what: &str) -> Result<(), ()> {
        if !self.pci.bus_master() {
            self.violation(
                "§1.1",
                format!(
                    "DMA read of {what} ({} B at {addr:#x}) with bus mastering disabled",
                    buf.len()
                ),
            );
            return Err(());
        }
        if addr.checked_add(buf.len() as u64).is_none() {
            self.violation(
                "§1.1",
                format!("DMA read of {what} wraps the address space at {addr:#x}"),
            );
            return Err(());
        }
        self.counters.dma_reads += 1;
        self.counters.dma_read_bytes += buf.len() as u64;
        if let Err(f) = self.mem.read(addr, buf) {
            self.violation("§1.1", format!("DMA read of {what}: {f}"));
            return Err(());
        }
        Ok(())
    }

    /// Read `len` bytes at `addr` and append them to `out`, in 1 MiB steps so that the
    /// model never allocates more than the host memory actually delivered.
    pub(crate) fn dma_read_append(
        &mut self,
        addr: u64,
        len: u64,
        out: &mut Vec<u8>,
        what: &str,
    ) -> Result<(), ()> {
        const STEP: u64 = 1 << 20;
        let mut done = 0u64;
        while done < len {
            let n = STEP.min(len - done) as usize;
            let start = out.len();
            out.resize(start + n, 0);
            if let Err(()) = self.dma_read(addr.wrapping_add(done), &mut out[start..], what) {
                out.truncate(start);
                return Err(());
            }
            done += n as u64;
        }
        Ok(())
    }

    /// Read host memory to check what a device may read or relies on (a prefetched WQE slot,
    /// the CQ doorbell record's arm word) without counting it as a transaction or recording
    /// faults: the checks must not change the counts the figures are made of. False when
    /// the memory cannot be read (the check is then skipped).
    pub(crate) fn peek_host(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.pci.bus_master()
            && addr.checked_add(buf.len() as u64).is_some()
            && self.mem.read(addr, buf).is_ok()
    }

    /// Device write of host memory. Needs bus mastering; faults are recorded.
    pub(crate) fn dma_write(&mut self, addr: u64, data: &[u8], what: &str) -> Result<(), ()> {
        if !self.pci.bus_master() {
            self.violation(
                "§1.1",
                format!(
                    "DMA write of {what} ({} B at {addr:#x}) with bus mastering disabled",
                    data.len()
                ),
            );
            return Err(());
        }
        if addr.checked_add(data.len() as u64).is_none() {
            self.violation(
                "§1.1",
                format!("DMA write of {what} wraps the address space at {addr:#x}"),
            );
            return Err(());
        }
        self.counters.dma_writes += 1;
        self.counters.dma_write_bytes += data.len() as u64;
        if let Err(f) = self.mem.write(addr, data) {
            self.violation("§1.1", format!("DMA write of {what}: {f}"));
            return Err(());
        }
        Ok(())
    }

    /// Memory the host freed while the device still holds it (donated with MAP_FA,
    /// MAP_ICM_AUX or MAP_ICM and neither unmapped nor released by a reset): the device may
    /// DMA into it after the host reuses it (§3.1, §2.2).
    pub(crate) fn check_freed(&mut self) {
        for (addr, len) in self.mem.take_freed() {
            if let Some((start, dlen, what)) = self.fw.donated.overlapping(addr, len) {
                self.violation(
                    "§2.2",
                    format!("host freed {len} bytes at {addr:#x} while the device still holds {dlen} bytes at {start:#x} as {what} (no unmap command ran and the device was not reset): it may DMA into freed memory"),
                );
            }
        }
    }

    // ---- MMIO entry points ----

    pub fn mmio_read(&mut self, bar: u8, offset: u64, len: u8) -> u64 {
        self.check_freed();
        self.counters.mmio_reads += 1;
        if !matches!(len, 1 | 2 | 4 | 8) {
            self.violation("§1.1", format!("MMIO read of {len} bytes (only 1/2/4/8)"));
            return u64::MAX;
        }
        if !self.pci.memory_enabled() {
            self.violation(
                "§1.1",
                format!("MMIO read of BAR{bar}+{offset:#x} with memory space disabled"),
            );
            return u64::MAX;
        }
        match bar {
            0 if offset < self.pci.bar_size[0] => self.bar0_read(offset, len),
            2 if offset < self.pci.bar_size[1] => self.bar2_read(offset, len),
            _ => {
                self.violation(
                    "§1.1",
                    format!("MMIO read outside the BARs: BAR{bar}+{offset:#x}"),
                );
                u64::MAX
            }
        }
    }

    /// A doorbell or BlueFlame WQE for `qpn` arrived: if the last one was for another QP,
    /// record the counters ([`crate::SqSwitch`]).
    pub(crate) fn note_send_queue(&mut self, qpn: u32) {
        if self.sq_switches.last().map(|s| s.qpn) != Some(qpn)
            && self.sq_switches.len() < MAX_SQ_SWITCHES
        {
            self.sq_switches.push(crate::counters::SqSwitch {
                qpn,
                counters: self.counters,
            });
        }
    }

    pub fn mmio_write(&mut self, bar: u8, offset: u64, len: u8, value: u64) {
        self.check_freed();
        self.counters.mmio_writes += 1;
        if !matches!(len, 1 | 2 | 4 | 8) {
            self.violation("§1.1", format!("MMIO write of {len} bytes (only 1/2/4/8)"));
            return;
        }
        if !self.pci.memory_enabled() {
            self.violation(
                "§1.1",
                format!("MMIO write of BAR{bar}+{offset:#x} with memory space disabled"),
            );
            return;
        }
        match bar {
            0 if offset < self.pci.bar_size[0] => self.bar0_write(offset, len, value),
            2 if offset < self.pci.bar_size[1] => self.bar2_write(offset, len, value),
            _ => self.violation(
                "§1.1",
                format!("MMIO write outside the BARs: BAR{bar}+{offset:#x}"),
            ),
        }
    }

    /// The reset register (§1.4): the device returns to "no firmware running", forgets every
    /// donation and object, and its PCI configuration returns to power-on values (which is why
    /// the driver saves and restores it). Ownership survives.
    pub(crate) fn device_reset(&mut self) {
        let owned = self.owned;
        self.clear_state();
        self.owned = owned;
    }

    /// PCI function reset (e.g. QEMU system reset): everything, ownership included.
    pub fn pci_reset(&mut self) {
        self.clear_state();
    }

    fn clear_state(&mut self) {
        self.pci = PciConfig::new(&self.profile);
        self.hcr = Hcr::default();
        self.fw = FwState::default();
        self.icm = IcmMap::default();
        self.eqs.clear();
        self.event_map = [None; 64];
        self.cqs.clear();
        self.srqs.clear();
        self.mpts.clear();
        self.qps.clear();
        let index = self.index;
        let was_up: Vec<u8> = self
            .ports
            .iter()
            .filter(|p| p.link_up)
            .map(|p| p.number)
            .collect();
        self.ports = (1..=self.profile.num_ports)
            .map(|n| Port::new(&self.profile, index, n))
            .collect();
        for n in was_up {
            self.requests.push(FabricRequest::PortDown(n));
        }
        self.special_qp_base = 0;
        // A reset is how a driver recovers from an internal error (§1.6: Linux resets).
        self.catas = [0; crate::regs::CATAS_DWORDS as usize];
        self.uar = UarState::default();
        self.intx_pending = 0;
        self.owned = false;
        self.semaphore_taken = false;
        if self.intx_level {
            self.intx_level = false;
            self.irq.set_intx(false);
        }
    }
}
