//! PCI function: type-0 configuration space, the two 64-bit memory BARs, the command/status
//! registers (memory space, bus master, INTx disable, interrupt status), interrupt pin A, a PCI
//! Express capability and the MSI-X capability whose table and PBA live in BAR0 (§1.1, §8).

use crate::hca::Hca;

/// Config-space offsets (PCI local bus / PCIe base spec, standard header).
pub mod cfg {
    pub const VENDOR_ID: u16 = 0x00;
    pub const COMMAND: u16 = 0x04;
    pub const STATUS: u16 = 0x06;
    pub const BAR0: u16 = 0x10;
    pub const BAR2: u16 = 0x18;
    pub const INTERRUPT_LINE: u16 = 0x3c;
    pub const INTERRUPT_PIN: u16 = 0x3d;
    pub const CAP_PTR: u16 = 0x34;
    /// PCI Express capability (Linux restores its Device/Link Control after reset, §1.4).
    pub const PCIE_CAP: u16 = 0x60;
    /// MSI-X capability (§8).
    pub const MSIX_CAP: u16 = 0x9c;
}

pub const CMD_MEMORY: u16 = 1 << 1;
pub const CMD_BUS_MASTER: u16 = 1 << 2;
pub const CMD_INTX_DISABLE: u16 = 1 << 10;
const CMD_WRITABLE: u16 = CMD_MEMORY | CMD_BUS_MASTER | (1 << 6) | (1 << 8) | CMD_INTX_DISABLE;
pub const STATUS_INTERRUPT: u16 = 1 << 3;
const STATUS_CAP_LIST: u16 = 1 << 4;

/// MSI-X table and PBA location in BAR0 (§8: "commonly table at BAR0 + 0x7C000, PBA at 0x7D000").
pub const MSIX_TABLE: u64 = 0x7c000;
pub const MSIX_PBA: u64 = 0x7d000;
const MSIX_CTRL_ENABLE: u16 = 1 << 15;
const MSIX_CTRL_MASK_ALL: u16 = 1 << 14;

/// One MSI-X table entry: address low/high, data, vector control.
#[derive(Clone, Copy, Debug)]
pub struct MsixEntry {
    pub words: [u32; 4],
}

impl Default for MsixEntry {
    fn default() -> Self {
        // Vector control bit 0 (masked) is set after reset (PCI spec).
        MsixEntry {
            words: [0, 0, 0, 1],
        }
    }
}

/// Configuration-space state of the function.
#[derive(Clone, Debug)]
pub struct PciConfig {
    space: [u8; 256],
    pub bar_addr: [u64; 2],
    pub bar_size: [u64; 2],
    pub msix_table: Vec<MsixEntry>,
    pub msix_pending: Vec<bool>,
}

impl PciConfig {
    pub fn new(p: &crate::profile::DeviceProfile) -> PciConfig {
        let mut s = [0u8; 256];
        let put16 = |s: &mut [u8; 256], off: u16, v: u16| {
            s[off as usize..off as usize + 2].copy_from_slice(&v.to_le_bytes())
        };
        let put32 = |s: &mut [u8; 256], off: u16, v: u32| {
            s[off as usize..off as usize + 4].copy_from_slice(&v.to_le_bytes())
        };
        put16(&mut s, 0x00, p.vendor_id);
        put16(&mut s, 0x02, p.device_id);
        put16(&mut s, cfg::STATUS, STATUS_CAP_LIST);
        put32(&mut s, 0x08, (p.class_code << 8) | u32::from(p.revision));
        put16(&mut s, 0x2c, p.subsystem_vendor_id);
        put16(&mut s, 0x2e, p.subsystem_id);
        s[cfg::CAP_PTR as usize] = cfg::PCIE_CAP as u8;
        s[cfg::INTERRUPT_PIN as usize] = 1; // INTA#
                                            // PCI Express capability v2, endpoint; link: 8 GT/s x8.
        let e = cfg::PCIE_CAP;
        s[e as usize] = 0x10;
        s[e as usize + 1] = cfg::MSIX_CAP as u8;
        put16(&mut s, e + 2, 0x0002);
        put32(&mut s, e + 4, 0x0000_8002); // device caps: 512 B max payload, role-based errors
        put16(&mut s, e + 8, 0x2810); // device control (power-on value)
        put32(&mut s, e + 0x0c, 0x0000_0083); // link caps: speed 3, width 8
        put16(&mut s, e + 0x12, 0x0083); // link status: speed 3, width 8
                                         // Link capabilities 2: supported link speeds 2.5, 5 and 8 GT/s (bits 1..3). A PCIe
                                         // 3.0 device has it; Linux takes the maximum speed from it (from link caps alone it
                                         // knows only 2.5 and 5 GT/s) and printed "Unknown x8 link" without it.
        put32(&mut s, e + 0x2c, 0x0000_000e);
        // MSI-X capability: table size, table/PBA in BAR0 (BIR 0).
        let m = cfg::MSIX_CAP;
        s[m as usize] = 0x11;
        s[m as usize + 1] = 0;
        put16(&mut s, m + 2, p.msix_vectors.saturating_sub(1) & 0x7ff);
        put32(&mut s, m + 4, MSIX_TABLE as u32);
        put32(&mut s, m + 8, MSIX_PBA as u32);
        PciConfig {
            space: s,
            bar_addr: [0, 0],
            bar_size: [p.bar0_size, p.bar2_size],
            msix_table: vec![MsixEntry::default(); usize::from(p.msix_vectors)],
            msix_pending: vec![false; usize::from(p.msix_vectors)],
        }
    }

    fn raw16(&self, off: u16) -> u16 {
        u16::from_le_bytes([self.space[off as usize], self.space[off as usize + 1]])
    }
    fn set_raw16(&mut self, off: u16, v: u16) {
        self.space[off as usize..off as usize + 2].copy_from_slice(&v.to_le_bytes());
    }
    pub fn command(&self) -> u16 {
        self.raw16(cfg::COMMAND)
    }
    pub fn memory_enabled(&self) -> bool {
        self.command() & CMD_MEMORY != 0
    }
    pub fn bus_master(&self) -> bool {
        self.command() & CMD_BUS_MASTER != 0
    }
    pub fn intx_disabled(&self) -> bool {
        self.command() & CMD_INTX_DISABLE != 0
    }
    pub fn msix_control(&self) -> u16 {
        self.raw16(cfg::MSIX_CAP + 2)
    }
    pub fn msix_enabled(&self) -> bool {
        self.msix_control() & MSIX_CTRL_ENABLE != 0
    }
    pub fn msix_function_masked(&self) -> bool {
        self.msix_control() & MSIX_CTRL_MASK_ALL != 0
    }
    pub fn set_interrupt_status(&mut self, on: bool) {
        let st = self.raw16(cfg::STATUS) & !STATUS_INTERRUPT;
        self.set_raw16(cfg::STATUS, st | if on { STATUS_INTERRUPT } else { 0 });
    }

    /// The dword at a 4-aligned offset, as the function presents it.
    fn read_dword(&self, off: u16) -> u32 {
        match off {
            0x10 => (self.bar_addr[0] as u32 & 0xffff_fff0) | 0x4,
            0x14 => (self.bar_addr[0] >> 32) as u32,
            0x18 => (self.bar_addr[1] as u32 & 0xffff_fff0) | 0xc,
            0x1c => (self.bar_addr[1] >> 32) as u32,
            0x100..=0xfff => 0, // no extended capabilities
            _ => {
                let o = off as usize;
                u32::from_le_bytes([
                    self.space[o],
                    self.space[o + 1],
                    self.space[o + 2],
                    self.space[o + 3],
                ])
            }
        }
    }

    /// Apply a dword write (after merging partial-width writes).
    fn write_dword(&mut self, off: u16, v: u32) {
        let lo16 = v as u16;
        let hi16 = (v >> 16) as u16;
        match off {
            0x04 => {
                let cmd = (self.command() & !CMD_WRITABLE) | (lo16 & CMD_WRITABLE);
                self.set_raw16(cfg::COMMAND, cmd);
                // Status bits we model are read-only; error bits are RW1C and never set.
            }
            0x0c => {
                self.space[0x0c] = v as u8; // cache line size
                self.space[0x0d] = (v >> 8) as u8; // latency timer
            }
            0x10 | 0x18 => {
                let i = usize::from(off == 0x18);
                let mask = !(self.bar_size[i] - 1) & 0xffff_fff0;
                self.bar_addr[i] = (self.bar_addr[i] & !0xffff_ffff) | (u64::from(v) & mask);
            }
            0x14 | 0x1c => {
                let i = usize::from(off == 0x1c);
                let hi_mask = !(self.bar_size[i] - 1) >> 32;
                self.bar_addr[i] =
                    (self.bar_addr[i] & 0xffff_ffff) | ((u64::from(v) & hi_mask) << 32);
            }
            0x3c => self.space[0x3c] = v as u8,
            o if o == cfg::PCIE_CAP + 8 => self.set_raw16(o, lo16), // device control
            o if o == cfg::PCIE_CAP + 0x10 => self.set_raw16(o, lo16), // link control
            o if o == cfg::MSIX_CAP => {
                let ctl = self.msix_control();
                let keep = ctl & 0x07ff;
                let rw = hi16 & (MSIX_CTRL_ENABLE | MSIX_CTRL_MASK_ALL);
                self.set_raw16(cfg::MSIX_CAP + 2, keep | rw);
            }
            _ => {} // read-only or reserved
        }
    }
}

impl Hca {
    /// PCI configuration read of 1, 2 or 4 bytes; bad widths and offsets read as all-ones and
    /// are recorded.
    pub fn cfg_read(&mut self, offset: u16, len: u8) -> u32 {
        if !matches!(len, 1 | 2 | 4) || offset >= 0x1000 || !offset.is_multiple_of(u16::from(len)) {
            self.violation(
                "§1.1",
                format!("config read of {len} bytes at {offset:#x}: not a naturally aligned 1/2/4-byte access in 4 KiB"),
            );
            return u32::MAX;
        }
        let dword = self.pci.read_dword(offset & !3);
        let shift = u32::from(offset & 3) * 8;
        let mask = if len == 4 {
            u32::MAX
        } else {
            (1u32 << (u32::from(len) * 8)) - 1
        };
        (dword >> shift) & mask
    }

    /// PCI configuration write of 1, 2 or 4 bytes.
    pub fn cfg_write(&mut self, offset: u16, len: u8, value: u32) {
        if !matches!(len, 1 | 2 | 4) || offset >= 0x1000 || !offset.is_multiple_of(u16::from(len)) {
            self.violation(
                "§1.1",
                format!("config write of {len} bytes at {offset:#x}: not a naturally aligned 1/2/4-byte access in 4 KiB"),
            );
            return;
        }
        let base = offset & !3;
        if base >= 0x100 {
            return;
        }
        let shift = u32::from(offset & 3) * 8;
        let mask = if len == 4 {
            u32::MAX
        } else {
            ((1u32 << (u32::from(len) * 8)) - 1) << shift
        };
        let old = match base {
            // BAR sizing: merge against the stored address, not the read-back flags.
            0x10 => self.pci.bar_addr[0] as u32,
            0x14 => (self.pci.bar_addr[0] >> 32) as u32,
            0x18 => self.pci.bar_addr[1] as u32,
            0x1c => (self.pci.bar_addr[1] >> 32) as u32,
            _ => self.pci.read_dword(base),
        };
        let merged = (old & !mask) | ((value << shift) & mask);
        let was_msix = self.pci.msix_enabled();
        let was_masked = self.pci.msix_function_masked();
        self.pci.write_dword(base, merged);
        if base == cfg::COMMAND || was_msix != self.pci.msix_enabled() {
            self.update_intx();
        }
        if self.pci.msix_enabled() && (was_masked && !self.pci.msix_function_masked() || !was_msix)
        {
            self.deliver_pending_msix();
        }
    }

    /// Guest-physical address -> (BAR index, offset), with memory space enabled.
    pub fn bar_decode(&self, addr: u64) -> Option<(u8, u64)> {
        if !self.pci.memory_enabled() {
            return None;
        }
        for (i, bar) in [(0u8, 0usize), (2, 1)] {
            let base = self.pci.bar_addr[bar];
            let size = self.pci.bar_size[bar];
            if base != 0 && addr >= base && addr - base < size {
                return Some((i, addr - base));
            }
        }
        None
    }

    // ---- MSI-X table and PBA (BAR0) ----

    pub(crate) fn msix_read(&mut self, offset: u64, len: u8) -> u64 {
        if offset >= MSIX_PBA {
            let bit0 = (offset - MSIX_PBA) * 8;
            let mut v = 0u64;
            for b in 0..u64::from(len) * 8 {
                let idx = (bit0 + b) as usize;
                if self.pci.msix_pending.get(idx).copied().unwrap_or(false) {
                    v |= 1 << b;
                }
            }
            return v;
        }
        let rel = offset - MSIX_TABLE;
        let mut v = 0u64;
        for i in 0..u64::from(len / 4) {
            let w = rel / 4 + i;
            let e = (w / 4) as usize;
            let word = self
                .pci
                .msix_table
                .get(e)
                .map(|x| x.words[(w % 4) as usize])
                .unwrap_or(0);
            v |= u64::from(word) << (32 * i);
        }
        v
    }

    pub(crate) fn msix_write(&mut self, offset: u64, len: u8, value: u64) {
        if offset >= MSIX_PBA {
            self.violation(
                "§8",
                format!("write to the read-only MSI-X PBA at BAR0+{offset:#x}"),
            );
            return;
        }
        let rel = offset - MSIX_TABLE;
        for i in 0..u64::from(len / 4) {
            let w = rel / 4 + i;
            let e = (w / 4) as usize;
            let word = (value >> (32 * i)) as u32;
            let Some(entry) = self.pci.msix_table.get_mut(e) else {
                self.violation(
                    "§8",
                    format!(
                        "MSI-X table write beyond the {} entries",
                        self.pci.msix_table.len()
                    ),
                );
                return;
            };
            entry.words[(w % 4) as usize] = word;
        }
        self.deliver_pending_msix();
    }

    /// Send every pending vector that is no longer masked.
    pub(crate) fn deliver_pending_msix(&mut self) {
        if !self.pci.msix_enabled() || self.pci.msix_function_masked() {
            return;
        }
        for v in 0..self.pci.msix_pending.len() {
            if self.pci.msix_pending[v] && self.pci.msix_table[v].words[3] & 1 == 0 {
                self.pci.msix_pending[v] = false;
                self.send_msi(v);
            }
        }
    }

    fn send_msi(&mut self, v: usize) {
        let e = self.pci.msix_table[v];
        if !self.pci.bus_master() {
            self.violation(
                "§8",
                format!("MSI-X vector {v} fired with bus mastering disabled; message lost"),
            );
            return;
        }
        let addr = u64::from(e.words[0]) | (u64::from(e.words[1]) << 32);
        self.counters.interrupts += 1;
        self.counters.msix_messages += 1;
        self.irq.msi(addr, e.words[2]);
    }

    /// An EQ with interrupt index `vector` fired (§8): MSI-X message, or INTx via the
    /// clear-interrupt register.
    pub(crate) fn raise_interrupt(&mut self, vector: u8) {
        if self.pci.msix_enabled() {
            let v = usize::from(vector);
            if v >= self.pci.msix_table.len() {
                self.violation(
                    "§8",
                    format!(
                        "EQ interrupt index {vector} is beyond the MSI-X table ({} entries)",
                        self.pci.msix_table.len()
                    ),
                );
                return;
            }
            if self.pci.msix_function_masked() || self.pci.msix_table[v].words[3] & 1 != 0 {
                self.pci.msix_pending[v] = true;
                return;
            }
            self.send_msi(v);
        } else {
            // §1.7: INTx sets the bit `inta_pin` of the clear-interrupt register.
            let pin = self.profile.inta_pin & 63;
            self.intx_pending |= 1u64 << pin;
            self.counters.interrupts += 1;
            self.update_intx();
        }
    }

    /// Recompute the INTA# level and the status register's interrupt bit.
    pub(crate) fn update_intx(&mut self) {
        let pending = self.intx_pending != 0 && !self.pci.msix_enabled();
        self.pci.set_interrupt_status(pending);
        let level = pending && !self.pci.intx_disabled();
        if level != self.intx_level {
            self.intx_level = level;
            if level {
                self.counters.intx_assertions += 1;
            }
            self.irq.set_intx(level);
        }
    }
}
