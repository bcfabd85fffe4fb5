//! CPUID feature discovery and model-specific registers.

use core::arch::x86_64::{__cpuid_count, CpuidResult};

/// Executes CPUID.
pub fn cpuid(leaf: u32, subleaf: u32) -> CpuidResult {
    __cpuid_count(leaf, subleaf)
}

/// Features the kernel cares about.
#[derive(Clone, Copy, Debug, Default)]
pub struct Features {
    pub max_leaf: u32,
    pub max_ext_leaf: u32,
    /// 1 GiB pages (CPUID 0x8000_0001 EDX bit 26).
    pub page_1g: bool,
    pub nx: bool,
    pub pat: bool,
    pub apic: bool,
    pub x2apic: bool,
    pub invariant_tsc: bool,
    pub hypervisor: bool,
    pub initial_apic_id: u8,
}

/// Reads the features.
pub fn features() -> Features {
    let l0 = cpuid(0, 0);
    let l1 = cpuid(1, 0);
    let e0 = cpuid(0x8000_0000, 0);
    let e1 = if e0.eax >= 0x8000_0001 {
        cpuid(0x8000_0001, 0)
    } else {
        CpuidResult {
            eax: 0,
            ebx: 0,
            ecx: 0,
            edx: 0,
        }
    };
    let e7 = if e0.eax >= 0x8000_0007 {
        cpuid(0x8000_0007, 0).edx
    } else {
        0
    };
    Features {
        max_leaf: l0.eax,
        max_ext_leaf: e0.eax,
        page_1g: e1.edx & (1 << 26) != 0,
        nx: e1.edx & (1 << 20) != 0,
        pat: l1.edx & (1 << 16) != 0,
        apic: l1.edx & (1 << 9) != 0,
        x2apic: l1.ecx & (1 << 21) != 0,
        invariant_tsc: e7 & (1 << 8) != 0,
        hypervisor: l1.ecx & (1 << 31) != 0,
        initial_apic_id: (l1.ebx >> 24) as u8,
    }
}

/// The processor brand string (CPUID 0x8000_0002..=0x8000_0004, 48 bytes, NUL padded); all
/// zero when the CPU does not report one.
pub fn brand() -> [u8; 48] {
    let mut out = [0u8; 48];
    if cpuid(0x8000_0000, 0).eax < 0x8000_0004 {
        return out;
    }
    for (i, leaf) in (0x8000_0002u32..=0x8000_0004).enumerate() {
        let r = cpuid(leaf, 0);
        for (j, reg) in [r.eax, r.ebx, r.ecx, r.edx].iter().enumerate() {
            let at = i * 16 + j * 4;
            out[at..at + 4].copy_from_slice(&reg.to_le_bytes());
        }
    }
    out
}

/// Reads an MSR.
///
/// # Safety
/// The MSR must exist (else #GP).
pub unsafe fn rdmsr(msr: u32) -> u64 {
    // SAFETY: the caller guarantees the MSR exists.
    unsafe { x86_64::registers::model_specific::Msr::new(msr).read() }
}

/// Writes an MSR.
///
/// # Safety
/// The MSR must exist and the value must be valid and not break memory safety.
pub unsafe fn wrmsr(msr: u32, value: u64) {
    // SAFETY: the caller guarantees the MSR and value are valid.
    unsafe { x86_64::registers::model_specific::Msr::new(msr).write(value) }
}

pub const IA32_APIC_BASE: u32 = 0x1b;
pub const IA32_PAT: u32 = 0x277;
pub const IA32_EFER: u32 = 0xc000_0080;
