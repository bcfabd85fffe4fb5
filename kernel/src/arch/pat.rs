//! Page attribute table layout.
//!
//! | index | type | used for |
//! |---|---|---|
//! | 0 | WB  | RAM (also what bootloader mappings with PAT/PCD/PWT clear mean) |
//! | 1 | WT  | (power-on default kept) |
//! | 2 | UC- | (power-on default kept) |
//! | 3 | UC  | MMIO registers |
//! | 4 | WB  | |
//! | 5 | WC  | write-combining windows (BlueFlame) |
//! | 6 | UC- | |
//! | 7 | UC  | |
//!
//! Indices 0-3 keep their power-on values, so entries written before the switch keep
//! their meaning. See [`crate::mm::paging::Cache`] for the entry encoding.

use super::cpu;

const UC: u64 = 0x00;
const WC: u64 = 0x01;
const WT: u64 = 0x04;
const WB: u64 = 0x06;
const UC_MINUS: u64 = 0x07;

/// The IA32_PAT value.
pub const PAT_VALUE: u64 =
    WB | WT << 8 | UC_MINUS << 16 | UC << 24 | WB << 32 | WC << 40 | UC_MINUS << 48 | UC << 56;

/// The memory type at PAT index `i`.
pub const fn entry(i: u8) -> u8 {
    (PAT_VALUE >> (8 * i as u64)) as u8
}

/// Programs the PAT (call before the page tables that use index 5 go live).
pub fn init() {
    // SAFETY: IA32_PAT exists when CPUID reports PAT (checked by the caller); indices 0-3
    // keep their power-on types so live mappings keep their memory type. Caches are
    // written back and the TLB flushed so no stale attribute survives.
    unsafe {
        cpu::wrmsr(cpu::IA32_PAT, PAT_VALUE);
        core::arch::asm!("wbinvd", options(nostack));
    }
    x86_64::instructions::tlb::flush_all();
}

/// The value currently programmed.
pub fn read() -> u64 {
    // SAFETY: IA32_PAT exists on every x86_64 CPU with PAT (all of them in practice).
    unsafe { cpu::rdmsr(cpu::IA32_PAT) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm::paging::Cache;

    #[test]
    fn cache_types_match_pat_layout() {
        assert_eq!(entry(Cache::WriteBack.pat_index()), 0x06);
        assert_eq!(entry(Cache::Uncached.pat_index()), 0x00);
        assert_eq!(entry(Cache::WriteCombining.pat_index()), 0x01);
        // Power-on defaults for 0..=3 are kept.
        assert_eq!(PAT_VALUE & 0xffff_ffff, 0x0007_0406);
    }
}
