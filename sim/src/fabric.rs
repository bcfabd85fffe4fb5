//! The fabric: N HCAs on one emulated switch, a built-in subnet manager, fault injection and
//! the public API front ends drive (§6, §7).

use std::time::{Duration, Instant};

use crate::counters::Counters;
use crate::hca::{FabricRequest, Hca};
use crate::hcr::CommandFault;
use crate::host::{HostMemory, Interrupts};
use crate::packet::Packet;
use crate::profile::DeviceProfile;
use crate::violation::Violation;

/// Handle of one HCA on the fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HcaId(pub usize);

/// Packet-level faults, drawn from the fabric's seeded generator.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Faults {
    /// Probability in [0, 1] that a data packet is dropped by the switch.
    pub drop_probability: f64,
    /// Extra delay of every data packet through the switch.
    pub delay: Duration,
    pub commands: Vec<CommandFault>,
}

/// How the HCAs are cabled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Topology {
    /// Every HCA port on one switch; data is routed by DLID. The switch's own SMA is not
    /// modelled: SMPs that would reach it are dropped.
    #[default]
    Switch,
    /// Two HCAs cabled back to back, port n to port n, no switch. A physical link trains only
    /// when both ends are enabled (INIT_PORT on both, cables intact); a directed-route SMP
    /// out of a port with hop count 1 reaches the peer's SMA.
    BackToBack,
}

/// Fabric configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct FabricConfig {
    /// Cabling (default: one switch).
    pub topology: Topology,
    /// Run the built-in subnet manager (assigns LIDs, brings ports ACTIVE). Off: ports stay
    /// INIT with LID 0 until configured through SMPs (§6.3). Only the switch topology has
    /// one; back to back it is ignored.
    pub subnet_manager: bool,
    /// Seed of the fault-injection generator.
    pub seed: u64,
    pub faults: Faults,
    /// Manual clock (tests advance it with `Fabric::advance`); otherwise wall-clock time.
    pub manual_clock: bool,
    /// Record every HCA's behaviour trace (`sim::trace`, read with `Fabric::trace`).
    pub trace: bool,
}

impl Default for FabricConfig {
    fn default() -> Self {
        FabricConfig {
            topology: Topology::Switch,
            subnet_manager: true,
            seed: 1,
            faults: Faults::default(),
            manual_clock: false,
            trace: false,
        }
    }
}

/// Small seeded generator (splitmix64) for fault injection.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

/// N HCAs on one switch.
pub struct Fabric {
    config: FabricConfig,
    hcas: Vec<Hca>,
    rng: Rng,
    start: Instant,
    manual_now: u64,
    /// Packets held back by the delay fault: (due time, packet).
    in_flight: Vec<(u64, Packet)>,
    /// Behaviour recording for HCAs added from now on (`set_trace`).
    trace: bool,
    /// A test's own choice of packets to drop (see `set_drop_rule`).
    drop_rule: Option<DropRule>,
}

/// Decides, per data packet leaving an HCA, whether the switch drops it.
pub type DropRule = Box<dyn FnMut(&Packet) -> bool + Send>;

impl Fabric {
    pub fn new(config: FabricConfig) -> Fabric {
        let rng = Rng(config.seed);
        let trace = config.trace;
        Fabric {
            config,
            hcas: Vec::new(),
            rng,
            start: Instant::now(),
            manual_now: 0,
            in_flight: Vec::new(),
            trace,
            drop_rule: None,
        }
    }

    /// Plug an HCA into the switch. A profile that fails `DeviceProfile::validate` is replaced
    /// by the default profile and the problem recorded as a violation of that HCA.
    pub fn add_hca(
        &mut self,
        profile: DeviceProfile,
        mem: Box<dyn HostMemory>,
        irq: Box<dyn Interrupts>,
    ) -> HcaId {
        let index = self.hcas.len();
        let (mut profile, problem) = match profile.validate() {
            Ok(()) => (profile, None),
            Err(e) => (DeviceProfile::default(), Some(e)),
        };
        if profile.node_guid == 0 {
            // Mellanox OUI 00:02:c9, deterministic per HCA index.
            profile.node_guid = 0x0002_c903_0000_0000 | ((index as u64 + 1) << 8);
        }
        let faults = self
            .config
            .faults
            .commands
            .iter()
            .filter(|f| f.hca.is_none_or(|h| h == index))
            .copied()
            .collect();
        let mut hca = Hca::new(index, profile, mem, irq, faults);
        hca.trace.enabled = self.trace;
        if let Some(e) = problem {
            hca.violation(
                "profile",
                format!("invalid device profile, default used: {e}"),
            );
        }
        if self.config.topology == Topology::BackToBack && index >= 2 {
            hca.violation(
                "fabric",
                "a back-to-back fabric cables two HCAs; this one has no cable",
            );
            for p in 1..=hca.profile.num_ports {
                hca.set_cable(p, false);
            }
        }
        hca.now_ns = self.now_ns();
        self.hcas.push(hca);
        HcaId(index)
    }

    pub fn num_hcas(&self) -> usize {
        self.hcas.len()
    }

    fn now_ns(&self) -> u64 {
        if self.config.manual_clock {
            self.manual_now
        } else {
            self.start.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64
        }
    }

    /// Drop exactly the data packets `rule` picks (besides the random drops), e.g. the
    /// answers of one node only; `None` removes the rule. For tests that need one lost
    /// packet at one place.
    pub fn set_drop_rule(&mut self, rule: Option<DropRule>) {
        self.drop_rule = rule;
    }

    /// Change the probability that the switch drops a data packet (`Faults::drop_probability`),
    /// e.g. to end a lossy phase of a test; clamped to [0, 1].
    pub fn set_drop_probability(&mut self, p: f64) {
        self.config.faults.drop_probability = if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) };
    }

    /// Restart the fault-injection generator from `seed` (`FabricConfig::seed`): from here
    /// on, the same seed drops the same packets of the same packet sequence.
    pub fn set_seed(&mut self, seed: u64) {
        self.config.seed = seed;
        self.rng = Rng(seed);
    }

    /// Advance the manual clock (no effect on wall-clock fabrics) and run due work.
    pub fn advance(&mut self, d: Duration) {
        self.manual_now = self
            .manual_now
            .saturating_add(d.as_nanos().min(u128::from(u64::MAX)) as u64);
        self.poll();
    }

    fn hca_mut(&mut self, id: HcaId) -> Option<&mut Hca> {
        let now = self.now_ns();
        let h = self.hcas.get_mut(id.0)?;
        h.now_ns = now;
        Some(h)
    }

    pub fn cfg_read(&mut self, hca: HcaId, offset: u16, len: u8) -> u32 {
        let v = self
            .hca_mut(hca)
            .map(|h| h.cfg_read(offset, len))
            .unwrap_or(u32::MAX);
        self.service();
        v
    }

    pub fn cfg_write(&mut self, hca: HcaId, offset: u16, len: u8, value: u32) {
        if let Some(h) = self.hca_mut(hca) {
            h.cfg_write(offset, len, value);
        }
        self.service();
    }

    pub fn mmio_read(&mut self, hca: HcaId, bar: u8, offset: u64, len: u8) -> u64 {
        let v = self
            .hca_mut(hca)
            .map(|h| h.mmio_read(bar, offset, len))
            .unwrap_or(u64::MAX);
        self.service();
        v
    }

    pub fn mmio_write(&mut self, hca: HcaId, bar: u8, offset: u64, len: u8, value: u64) {
        if let Some(h) = self.hca_mut(hca) {
            h.mmio_write(bar, offset, len, value);
        }
        self.service();
    }

    pub fn bar_decode(&self, hca: HcaId, addr: u64) -> Option<(u8, u64)> {
        self.hcas.get(hca.0)?.bar_decode(addr)
    }

    pub fn pci_reset(&mut self, hca: HcaId) {
        if let Some(h) = self.hca_mut(hca) {
            h.pci_reset();
        }
        self.service();
    }

    /// Run due timed work (delayed commands and packets, subnet manager). Cheap when idle.
    pub fn poll(&mut self) {
        let now = self.now_ns();
        for h in &mut self.hcas {
            h.now_ns = now;
            h.check_freed();
            h.hcr_tick();
            h.rc_tick();
            h.bf_tick();
            h.cq_moderation_tick();
        }
        self.service();
    }

    pub fn violations(&self, hca: HcaId) -> &[Violation] {
        self.hcas.get(hca.0).map(|h| h.violations()).unwrap_or(&[])
    }

    /// Turn the behaviour recorder (`sim::trace`) on or off for every HCA, present and
    /// future. Off by default: it formats a line per command and per WQE.
    pub fn set_trace(&mut self, on: bool) {
        self.trace = on;
        for h in &mut self.hcas {
            h.trace.enabled = on;
        }
    }

    /// The behaviour trace of `hca` in the trace file format (empty if never recorded).
    pub fn trace(&self, hca: HcaId) -> String {
        self.hcas
            .get(hca.0)
            .map(|h| h.trace.to_text())
            .unwrap_or_default()
    }

    /// What the HCA met that is legal but notable (not violations; docs/model.md).
    pub fn observations(&self, hca: HcaId) -> &[String] {
        self.hcas
            .get(hca.0)
            .map(|h| h.observations())
            .unwrap_or(&[])
    }

    pub fn counters(&self, hca: HcaId) -> Counters {
        self.hcas.get(hca.0).map(|h| h.counters).unwrap_or_default()
    }

    /// The most RDMA READ/atomic requests RC QP `qpn` of `hca` has had outstanding at once
    /// as requester since it left RESET (0 for a QP the HCA does not know).
    pub fn rc_rd_atomic_peak(&self, hca: HcaId, qpn: u32) -> u32 {
        self.hcas
            .get(hca.0)
            .and_then(|h| h.qps.get(&qpn))
            .map_or(0, |q| q.rc.rd_atomic_peak)
    }

    /// The HCA's send-queue switches so far ([`crate::SqSwitch`]), oldest first.
    pub fn sq_switches(&self, hca: HcaId) -> Vec<crate::SqSwitch> {
        self.hcas
            .get(hca.0)
            .map(|h| h.sq_switches.clone())
            .unwrap_or_default()
    }

    /// Fault injection: the device reports an internal error by filling its catastrophic
    /// error buffer (§1.6) with `words` (a non-zero first dword is the error). Nothing else
    /// changes: the reference describes no other effect. A device reset clears it.
    pub fn inject_internal_error(&mut self, hca: HcaId, words: &[u32]) {
        if let Some(h) = self.hca_mut(hca) {
            for (slot, w) in h.catas.iter_mut().zip(words) {
                *slot = *w;
            }
        }
    }

    /// A cable fault on `port` that the firmware reports as a recoverable error (event 0x3E,
    /// `unsupported`: an unsupported cable, else a bad one). Only a device that offers the
    /// event (QUERY_DEV_CAP 0x9C bit 7) and whose driver enabled it in INIT_HCA reports it,
    /// and only to an EQ it is mapped to; returns whether an EQE was written.
    pub fn inject_cable_error(&mut self, hca: HcaId, port: u8, unsupported: bool) -> bool {
        self.hca_mut(hca)
            .is_some_and(|h| h.recoverable_cable_error(port, unsupported))
    }

    /// Cut or restore the cable of `port` of `hca` (fault injection, link down/up).
    pub fn set_link(&mut self, hca: HcaId, port: u8, up: bool) {
        if let Some(h) = self.hca_mut(hca) {
            h.set_cable(port, up);
        }
        self.service();
    }

    /// LID the built-in subnet manager gives port `port` of HCA `index`: the switch (and its
    /// SM) is LID 1; HCA ports follow in order (decision, docs/model.md).
    pub fn sm_lid_for(index: usize, port: u8) -> u16 {
        (2 + index * 2 + usize::from(port.max(1)) - 1).min(0xbfff) as u16
    }

    /// LID of the built-in SM.
    pub const SM_LID: u16 = 1;

    /// Handle what the HCAs asked of the fabric and move packets. Bounded: a packet storm
    /// cannot loop forever.
    fn service(&mut self) {
        for i in 0..self.hcas.len() {
            let reqs = std::mem::take(&mut self.hcas[i].requests);
            for r in reqs {
                match r {
                    FabricRequest::PortUp(port) => {
                        // Back to back there is no switch and no fabric SM: only a node's
                        // own SM (over QP0) configures the ports.
                        if self.config.subnet_manager && self.config.topology == Topology::Switch {
                            let lid = Fabric::sm_lid_for(i, port);
                            self.hcas[i].sm_configure(port, lid, Fabric::SM_LID);
                        }
                    }
                    FabricRequest::PortDown(_) => {}
                }
            }
        }
        if self.config.topology == Topology::BackToBack {
            self.train_back_to_back_links();
        }
        let now = self.now_ns();
        for _round in 0..64 {
            let mut moved = false;
            let mut due = Vec::new();
            self.in_flight.retain(|(t, p)| {
                if *t <= now {
                    due.push(p.clone());
                    false
                } else {
                    true
                }
            });
            for p in due {
                moved = true;
                self.deliver(p);
            }
            for i in 0..self.hcas.len() {
                let smps = std::mem::take(&mut self.hcas[i].smp_outbox);
                for p in smps {
                    moved = true;
                    self.deliver_smp(p);
                }
                let out = std::mem::take(&mut self.hcas[i].outbox);
                for p in out {
                    moved = true;
                    if self.drop_rule.as_mut().is_some_and(|r| r(&p)) {
                        log::debug!("fabric: drop rule took a packet from hca{i}");
                        self.hcas[i].rc_response_left(&p);
                        continue;
                    }
                    if self.rng.chance(self.config.faults.drop_probability) {
                        log::debug!("fabric: injected drop of a packet from hca{i}");
                        self.hcas[i].rc_response_left(&p);
                        continue;
                    }
                    let delay = self
                        .config
                        .faults
                        .delay
                        .as_nanos()
                        .min(u128::from(u64::MAX)) as u64;
                    if delay > 0 {
                        self.in_flight.push((now.saturating_add(delay), p));
                    } else {
                        self.deliver(p);
                    }
                }
            }
            if !moved {
                break;
            }
        }
    }

    /// Back-to-back: the other HCA and the same port number at the far end of the cable.
    fn peer_of(&self, hca: usize, port: u8) -> Option<(usize, u8)> {
        let peer = match hca {
            0 => 1,
            1 => 0,
            _ => return None,
        };
        (peer < self.hcas.len()).then_some((peer, port))
    }

    /// Back-to-back: a link is up exactly when both ends are enabled and both cables intact.
    fn train_back_to_back_links(&mut self) {
        for i in 0..self.hcas.len().min(2) {
            for k in 0..self.hcas[i].ports.len() {
                let n = self.hcas[i].ports[k].number;
                let end = |h: &Hca| {
                    h.ports
                        .iter()
                        .find(|p| p.number == n)
                        .is_some_and(|p| p.opened && !p.cable_cut)
                };
                let up = end(&self.hcas[i])
                    && self.peer_of(i, n).is_some_and(|(j, _)| end(&self.hcas[j]));
                self.hcas[i].set_phys_link(n, up);
            }
        }
    }

    /// A VL15 packet leaves a port. Back-to-back: it crosses the cable to the peer's port.
    /// Switch: a LID-routed SMP is forwarded by its DLID like any packet (IBA vol. 1 14.2.2:
    /// LID-routed SMPs use the switches' forwarding tables), to the port with a live link
    /// that owns the LID, the sender's own included; a directed-route SMP (permissive DLID)
    /// is for the switch's SMA first, which is not modelled, so it is dropped.
    fn deliver_smp(&mut self, p: crate::smp::SmpPacket) {
        let now = self.now_ns();
        let target = match self.config.topology {
            Topology::BackToBack => self.peer_of(p.src_hca, p.src_port),
            Topology::Switch => self.smp_route_by_lid(&p.bytes),
        };
        match target {
            Some((j, port)) => {
                let h = &mut self.hcas[j];
                h.now_ns = now;
                h.receive_smp(port, p.bytes);
            }
            None => {
                log::debug!(
                    "fabric: SMP from hca{} port {} dropped (directed route needs the switch SMA, which is not modelled, or no port owns the DLID)",
                    p.src_hca,
                    p.src_port
                );
                if let Some(h) = self.hcas.get_mut(p.src_hca) {
                    h.counters.packets_dropped += 1;
                }
            }
        }
    }

    /// Switch: the HCA port a LID-routed VL15 packet's DLID leads to (its link up and the
    /// LID, with its LMC range, its own), or None for the permissive LID or an unknown LID.
    fn smp_route_by_lid(&self, bytes: &[u8]) -> Option<(usize, u8)> {
        let h = crate::smp::UdHeader::parse(bytes)?;
        if h.dlid == crate::smp::PERMISSIVE_LID || h.dlid == 0 {
            return None;
        }
        self.hcas.iter().enumerate().find_map(|(k, hca)| {
            hca.ports
                .iter()
                .find(|x| x.link_up && x.lid != 0 && (h.dlid & !((1u16 << x.lmc) - 1)) == x.lid)
                .map(|x| (k, x.number))
        })
    }

    /// Deliver a data packet: the switch routes by DLID to the ACTIVE port that owns it;
    /// back to back, the packet reaches the peer's port (or the sender's own, loopback) and
    /// is taken if that port is ACTIVE and owns the DLID.
    fn deliver(&mut self, p: Packet) {
        let now = self.now_ns();
        if let Some(h) = self.hcas.get_mut(p.src_hca) {
            h.rc_response_left(&p);
        }
        let b2b = self.config.topology == Topology::BackToBack;
        let peer = self.peer_of(p.src_hca, p.src_port);
        for (k, h) in self.hcas.iter_mut().enumerate() {
            if b2b && k != p.src_hca && Some(k) != peer.map(|x| x.0) {
                continue;
            }
            let Some(port) = h
                .ports
                .iter()
                .find(|x| {
                    x.active()
                        && x.lid != 0
                        && (p.dlid & !((1u16 << x.lmc) - 1)) == x.lid
                        && (!b2b || x.number == p.src_port)
                })
                .map(|x| x.number)
            else {
                continue;
            };
            h.now_ns = now;
            h.receive_packet(port, p);
            return;
        }
        log::debug!(
            "fabric: no ACTIVE port with LID {:#x}; packet dropped",
            p.dlid
        );
        if let Some(h) = self.hcas.get_mut(p.src_hca) {
            h.counters.packets_dropped += 1;
        }
    }
}
