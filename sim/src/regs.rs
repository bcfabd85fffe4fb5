//! BAR0 register map outside the HCR (§1.1, §1.4, §1.5, §1.6, §1.7) and its MMIO dispatch.

use crate::hca::Hca;
use crate::pci::{MSIX_PBA, MSIX_TABLE};

/// HCR: 7 dwords at BAR0 + 0x80680 (§1.2).
pub const HCR_BASE: u64 = 0x80680;
pub const HCR_SIZE: u64 = 0x1c;
/// Ownership word (§1.4).
pub const OWNERSHIP: u64 = 0x8069c;
/// Reset block (§1.4).
pub const RESET_BLOCK: u64 = 0xf0000;
pub const RESET: u64 = RESET_BLOCK + 0x10;
pub const SEMAPHORE: u64 = RESET_BLOCK + 0x3fc;
/// Clear-interrupt register (8 bytes), reported by QUERY_FW 0x20/0x28 (§1.5, §1.7).
/// The offset is the model's choice (the reference says it comes from QUERY_FW).
pub const CLR_INT: u64 = 0x80700;
/// Catastrophic error buffer, reported by QUERY_FW 0x30/0x38/0x3C (§1.6).
pub const CATAS: u64 = 0x80800;
pub const CATAS_DWORDS: u32 = 16;
/// Internal free-running clock (QUERY_FW 0x50/0x58): high dword at +0, low at +4, BE.
pub const CLOCK: u64 = 0x80900;

impl Hca {
    pub(crate) fn bar0_read(&mut self, offset: u64, len: u8) -> u64 {
        match offset {
            o if (MSIX_TABLE..MSIX_PBA + 0x1000).contains(&o) => {
                if !self.aligned_32_or_64(o, len, "§8", "MSI-X table/PBA") {
                    return u64::MAX;
                }
                self.msix_read(o, len)
            }
            o if (HCR_BASE..HCR_BASE + HCR_SIZE).contains(&o) => {
                // §1.2: all HCR accesses are 32-bit.
                if len != 4 || o % 4 != 0 {
                    self.violation(
                        "§1.2",
                        format!("HCR read of {len} bytes at +{:#x}: the HCR only supports aligned 32-bit accesses", o - HCR_BASE),
                    );
                    return u64::MAX;
                }
                u64::from(u32::from_le_bytes(
                    self.hcr_read_dword(((o - HCR_BASE) / 4) as usize)
                        .to_be_bytes(),
                ))
            }
            OWNERSHIP => {
                if len != 4 {
                    self.violation(
                        "§1.4",
                        "ownership word accessed with a width other than 32 bits",
                    );
                    return u64::MAX;
                }
                // §1.4 (inferred read-to-claim): the first read returns 0 and claims the
                // device; later reads return non-zero until ownership is released by writing 0.
                if self.owned {
                    u64::from(u32::from_le_bytes(1u32.to_be_bytes()))
                } else {
                    self.owned = true;
                    0
                }
            }
            SEMAPHORE => {
                if len != 4 {
                    self.violation(
                        "§1.4",
                        "HW semaphore accessed with a width other than 32 bits",
                    );
                    return u64::MAX;
                }
                // §1.4: a read returning 0 takes the semaphore; it stays taken (reads return
                // non-zero) until the reset it protects, or a write of 0.
                if self.semaphore_taken {
                    u64::from(u32::from_le_bytes(1u32.to_be_bytes()))
                } else {
                    self.semaphore_taken = true;
                    0
                }
            }
            o if (CLR_INT..CLR_INT + 8).contains(&o) => {
                if !self.aligned_32_or_64(o, len, "§1.7", "clear-interrupt register") {
                    return u64::MAX;
                }
                let be = self.intx_pending.to_be_bytes();
                let start = (o - CLR_INT) as usize;
                let mut v = [0u8; 8];
                v[..len as usize].copy_from_slice(&be[start..start + len as usize]);
                u64::from_le_bytes(v)
            }
            o if (CATAS..CATAS + u64::from(CATAS_DWORDS) * 4).contains(&o) => {
                // §1.6: all-zero unless a test injected an internal error
                // (`Fabric::inject_internal_error`); the model never has one by itself.
                if !self.aligned_32_or_64(o, len, "§1.6", "catastrophic error buffer") {
                    return u64::MAX;
                }
                let mut v = [0u8; 8];
                for (i, chunk) in v[..len as usize].chunks_mut(4).enumerate() {
                    let word = ((o - CATAS) / 4) as usize + i;
                    let value = self.catas.get(word).copied().unwrap_or(0);
                    chunk.copy_from_slice(&value.to_be_bytes());
                }
                u64::from_le_bytes(v)
            }
            o if (CLOCK..CLOCK + 8).contains(&o) => {
                if !self.aligned_32_or_64(o, len, "§1.5", "internal clock") {
                    return u64::MAX;
                }
                let be = self.clock_ticks().to_be_bytes();
                let start = (o - CLOCK) as usize;
                let mut v = [0u8; 8];
                v[..len as usize].copy_from_slice(&be[start..start + len as usize]);
                u64::from_le_bytes(v)
            }
            _ => {
                self.violation(
                    "§1.1",
                    format!("BAR0 read of {len} bytes at {offset:#x}: no register there"),
                );
                0
            }
        }
    }

    pub(crate) fn bar0_write(&mut self, offset: u64, len: u8, value: u64) {
        let bytes = value.to_le_bytes();
        match offset {
            o if (MSIX_TABLE..MSIX_PBA + 0x1000).contains(&o) => {
                if self.aligned_32_or_64(o, len, "§8", "MSI-X table/PBA") {
                    self.msix_write(o, len, value);
                }
            }
            o if (HCR_BASE..HCR_BASE + HCR_SIZE).contains(&o) => {
                // §1.2: "writes narrower than 32 bits to the HCR do not work".
                if len != 4 || o % 4 != 0 {
                    self.violation(
                        "§1.2",
                        format!("HCR write of {len} bytes at +{:#x} ignored: the HCR only accepts aligned 32-bit writes", o - HCR_BASE),
                    );
                    return;
                }
                let v = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                self.hcr_write_dword(((o - HCR_BASE) / 4) as usize, v);
            }
            OWNERSHIP => {
                let v = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                if len != 4 || v != 0 {
                    self.violation(
                        "§1.4",
                        format!("ownership word written with {len} bytes value {v:#x}; only a 32-bit write of 0 (release) is defined"),
                    );
                    return;
                }
                self.owned = false;
            }
            SEMAPHORE => {
                let v = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                if len != 4 || v != 0 {
                    self.violation(
                        "§1.4",
                        format!("HW semaphore written with {v:#x}; only 0 (release) is defined"),
                    );
                    return;
                }
                self.semaphore_taken = false;
            }
            RESET => {
                let v = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                if len != 4 || v != 1 {
                    self.violation(
                        "§1.4",
                        format!("reset register written with {len} bytes value {v:#x}; the reset is a 32-bit BE write of 1"),
                    );
                    return;
                }
                if !self.semaphore_taken {
                    self.violation(
                        "§1.4",
                        "reset written without holding the HW semaphore at 0xF03FC",
                    );
                }
                self.device_reset();
            }
            o if (CLR_INT..CLR_INT + 8).contains(&o) => {
                if !self.aligned_32_or_64(o, len, "§1.7", "clear-interrupt register") {
                    return;
                }
                // §1.7: a 64-bit BE bitmask; writing 1 to bit n clears interrupt pin n.
                let mut be = [0u8; 8];
                let start = (o - CLR_INT) as usize;
                be[start..start + len as usize].copy_from_slice(&bytes[..len as usize]);
                let clear = u64::from_be_bytes(be);
                self.intx_pending &= !clear;
                self.update_intx();
            }
            _ => {
                self.violation(
                    "§1.1",
                    format!("BAR0 write of {len} bytes value {value:#x} at {offset:#x}: no writable register there"),
                );
            }
        }
    }

    fn aligned_32_or_64(&mut self, o: u64, len: u8, sec: &'static str, what: &str) -> bool {
        if !matches!(len, 4 | 8) || !o.is_multiple_of(u64::from(len)) {
            self.violation(
                sec,
                format!("{what} accessed with {len} bytes at {o:#x}; needs aligned 32/64-bit"),
            );
            return false;
        }
        true
    }
}
