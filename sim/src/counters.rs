//! Per-HCA counters of what would cross PCIe, plus a few fabric-level counts.

use std::fmt;

/// Traffic counters of one HCA. DMA counts include ICM accesses (context and MTT reads), which
/// are also counted separately in `icm_reads`/`icm_writes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub mmio_reads: u64,
    pub mmio_writes: u64,
    pub blueflame_bytes: u64,
    pub dma_reads: u64,
    pub dma_read_bytes: u64,
    pub dma_writes: u64,
    pub dma_write_bytes: u64,
    pub icm_reads: u64,
    pub icm_writes: u64,
    pub interrupts: u64,
    pub msix_messages: u64,
    pub intx_assertions: u64,
    pub commands: u64,
    pub packets_sent: u64,
    pub packets_received: u64,
    /// Packets nobody could take: no ACTIVE port with the DLID, no QP in RTR/RTS for it, no
    /// receive WQE (UD), a P_Key or Q_Key mismatch, a port not ACTIVE. In a ping-pong run
    /// these are mostly the client's rendezvous probes before the server's QP listens. The
    /// fabric's injected losses (`Faults::drop_probability`) are not counted here.
    pub packets_dropped: u64,
    pub violations: u64,
}

/// The counters of one HCA when it started running the send queue of `qpn` after running
/// another QP's (doorbell or BlueFlame): the boundaries of a run's per-QP phases, e.g. a
/// benchmark's measured loop on its data QP between its rendezvous messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqSwitch {
    pub qpn: u32,
    /// The counters as the doorbell (or BlueFlame burst) that started the run arrived; that
    /// doorbell's own MMIO writes and BlueFlame bytes are already counted.
    pub counters: Counters,
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "mmio r/w {}/{}, bf bytes {}, dma r {} ({} B) w {} ({} B), icm r/w {}/{}, irqs {} (msix {}, intx {}), cmds {}, pkts tx/rx/undeliverable {}/{}/{}, violations {}",
            self.mmio_reads,
            self.mmio_writes,
            self.blueflame_bytes,
            self.dma_reads,
            self.dma_read_bytes,
            self.dma_writes,
            self.dma_write_bytes,
            self.icm_reads,
            self.icm_writes,
            self.interrupts,
            self.msix_messages,
            self.intx_assertions,
            self.commands,
            self.packets_sent,
            self.packets_received,
            self.packets_dropped,
            self.violations
        )
    }
}
