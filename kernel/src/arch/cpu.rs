//! CPUID feature discovery (decoded by the `raw-cpuid` crate) and model-specific registers.

use raw_cpuid::{CpuId, CpuIdReader, CpuIdReaderNative};

/// Features the kernel cares about.
#[derive(Clone, Copy, Debug, Default)]
pub struct Features {
    /// Highest basic and extended CPUID leaves (EAX of leaves 0 and 0x8000_0000).
    pub max_leaf: u32,
    pub max_ext_leaf: u32,
    pub page_1g: bool,
    pub nx: bool,
    pub pat: bool,
    pub apic: bool,
    pub x2apic: bool,
    pub invariant_tsc: bool,
    pub hypervisor: bool,
    pub initial_apic_id: u8,
}

/// This CPU's CPUID.
pub fn cpuid() -> CpuId<CpuIdReaderNative> {
    CpuId::new()
}

/// Reads the features.
pub fn features() -> Features {
    features_from(CpuIdReaderNative)
}

/// The features as `read` (a CPUID instruction, or a recorded CPU in tests) reports them;
/// a leaf the CPU does not have reads as "feature absent".
pub fn features_from<R: CpuIdReader>(read: R) -> Features {
    let max_leaf = read.cpuid1(0).eax;
    let max_ext_leaf = read.cpuid1(0x8000_0000).eax;
    let c = CpuId::with_cpuid_reader(read);
    let basic = c.get_feature_info();
    let ext = c.get_extended_processor_and_feature_identifiers();
    let basic_has = |f: fn(&raw_cpuid::FeatureInfo) -> bool| basic.as_ref().is_some_and(f);
    Features {
        max_leaf,
        max_ext_leaf,
        page_1g: ext.as_ref().is_some_and(|e| e.has_1gib_pages()),
        nx: ext.as_ref().is_some_and(|e| e.has_execute_disable()),
        pat: basic_has(raw_cpuid::FeatureInfo::has_pat),
        apic: basic_has(raw_cpuid::FeatureInfo::has_apic),
        x2apic: basic_has(raw_cpuid::FeatureInfo::has_x2apic),
        invariant_tsc: c
            .get_advanced_power_mgmt_info()
            .is_some_and(|a| a.has_invariant_tsc()),
        hypervisor: basic_has(raw_cpuid::FeatureInfo::has_hypervisor),
        initial_apic_id: basic.as_ref().map_or(0, |b| b.initial_local_apic_id()),
    }
}

/// The processor brand string (CPUID 0x8000_0002..=0x8000_0004), NUL padded; all zero when
/// the CPU does not report one.
pub fn brand() -> [u8; 48] {
    brand_from(CpuIdReaderNative)
}

fn brand_from<R: CpuIdReader>(read: R) -> [u8; 48] {
    let mut out = [0u8; 48];
    if let Some(b) = CpuId::with_cpuid_reader(read).get_processor_brand_string() {
        let s = b.as_str().as_bytes();
        out[..s.len()].copy_from_slice(s);
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use raw_cpuid::CpuIdResult;

    /// A CPU answering from a table of (leaf, eax, ebx, ecx, edx); other leaves read zero.
    pub(crate) fn cpu(leaves: &'static [(u32, u32, u32, u32, u32)]) -> impl CpuIdReader {
        move |leaf: u32, _sub: u32| {
            let (eax, ebx, ecx, edx) = leaves
                .iter()
                .find(|l| l.0 == leaf)
                .map_or((0, 0, 0, 0), |l| (l.1, l.2, l.3, l.4));
            CpuIdResult { eax, ebx, ecx, edx }
        }
    }

    /// Leaf 0's EBX, ECX, EDX of an Intel CPU ("Genu", "ntel", "ineI": the vendor string
    /// reads EBX, EDX, ECX).
    const INTEL: (u32, u32, u32) = (0x756e_6547, 0x6c65_746e, 0x4965_6e69);

    #[test]
    fn feature_bits() {
        static LEAVES: [(u32, u32, u32, u32, u32); 5] = [
            (0, 0x16, INTEL.0, INTEL.1, INTEL.2),
            // APIC id 5 in EBX[31:24]; ECX: x2APIC (21), hypervisor (31); EDX: APIC (9), PAT (16).
            (
                1,
                0x506e3,
                5 << 24,
                (1 << 21) | (1 << 31),
                (1 << 9) | (1 << 16),
            ),
            (0x8000_0000, 0x8000_0008, 0, 0, 0),
            // EDX: NX (20), 1 GiB pages (26).
            (0x8000_0001, 0, 0, 0, (1 << 20) | (1 << 26)),
            // EDX: invariant TSC (8).
            (0x8000_0007, 0, 0, 0, 1 << 8),
        ];
        let f = features_from(cpu(&LEAVES));
        assert_eq!((f.max_leaf, f.max_ext_leaf), (0x16, 0x8000_0008));
        assert!(f.page_1g && f.nx && f.pat && f.apic && f.x2apic);
        assert!(f.invariant_tsc && f.hypervisor);
        assert_eq!(f.initial_apic_id, 5);
    }

    #[test]
    fn missing_leaves_read_as_absent() {
        // Extended leaves stop at 0x8000_0001: leaf 0x8000_0007 is not read even though the
        // table would answer it.
        static LEAVES: [(u32, u32, u32, u32, u32); 4] = [
            (0, 1, INTEL.0, INTEL.1, INTEL.2),
            (0x8000_0000, 0x8000_0001, 0, 0, 0),
            (0x8000_0001, 0, 0, 0, 1 << 20),
            (0x8000_0007, 0, 0, 0, 1 << 8),
        ];
        let f = features_from(cpu(&LEAVES));
        assert!(f.nx && !f.page_1g && !f.invariant_tsc && !f.x2apic);
        assert_eq!(brand_from(cpu(&LEAVES)), [0; 48]);
    }

    /// A Xeon E5-2660 (Sandy Bridge-EP, the CPU of many ConnectX-3 era servers) as recorded
    /// in the test data of the Go package github.com/klauspost/cpuid (`TestPhysical`):
    /// (leaf, eax, ebx, ecx, edx) of the leaves the kernel reads.
    pub(crate) static XEON_E5_2660: [(u32, u32, u32, u32, u32); 8] = [
        (0, 0x0000_000d, 0x756e_6547, 0x6c65_746e, 0x4965_6e69),
        (1, 0x0002_06d7, 0x0320_0800, 0x1fbe_e3ff, 0xbfeb_fbff),
        (0x8000_0000, 0x8000_0008, 0, 0, 0),
        (0x8000_0001, 0, 0, 0x0000_0001, 0x2c10_0800),
        (
            0x8000_0002,
            0x2020_2020,
            0x4920_2020,
            0x6c65_746e,
            0x2029_5228,
        ),
        (
            0x8000_0003,
            0x6e6f_6558,
            0x2029_5228,
            0x2055_5043,
            0x322d_3545,
        ),
        (
            0x8000_0004,
            0x2030_3636,
            0x2040_2030,
            0x3032_2e32,
            0x007a_4847,
        ),
        (0x8000_0007, 0, 0, 0, 0x0000_0100),
    ];

    #[test]
    fn sandy_bridge_ep_server() {
        let f = features_from(cpu(&XEON_E5_2660));
        assert_eq!((f.max_leaf, f.max_ext_leaf), (0xd, 0x8000_0008));
        assert!(f.page_1g && f.nx && f.pat && f.apic && f.x2apic && f.invariant_tsc);
        assert!(!f.hypervisor);
        assert_eq!(f.initial_apic_id, 3);
        let brand = brand_from(cpu(&XEON_E5_2660));
        let text = core::str::from_utf8(&brand)
            .unwrap()
            .trim_matches(['\0', ' ']);
        assert_eq!(text, "Intel(R) Xeon(R) CPU E5-2660 0 @ 2.20GHz");
    }

    #[test]
    fn brand_string() {
        // "QEMU Virtual CPU version 2.5+" over leaves 0x8000_0002..4, NUL padded.
        const fn word(s: &[u8; 48], i: usize) -> u32 {
            u32::from_le_bytes([s[i], s[i + 1], s[i + 2], s[i + 3]])
        }
        const S: &[u8; 48] = b"QEMU Virtual CPU version 2.5+\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";
        static LEAVES: [(u32, u32, u32, u32, u32); 4] = [
            (0x8000_0000, 0x8000_0004, 0, 0, 0),
            (0x8000_0002, word(S, 0), word(S, 4), word(S, 8), word(S, 12)),
            (
                0x8000_0003,
                word(S, 16),
                word(S, 20),
                word(S, 24),
                word(S, 28),
            ),
            (
                0x8000_0004,
                word(S, 32),
                word(S, 36),
                word(S, 40),
                word(S, 44),
            ),
        ];
        assert_eq!(&brand_from(cpu(&LEAVES)), S);
    }
}
