//! Time-stamp counter: frequency discovery, calibration and conversion.
//!
//! The frequency comes from CPUID 0x15 (crystal ratio) or 0x16 (base frequency) when the
//! leaf is present and the value agrees with a short PIT measurement; otherwise from a
//! longer PIT measurement. The conversion math is pure and unit-tested.

use core::sync::atomic::{AtomicU64, Ordering};

/// Frequencies outside this range are not believed (100 MHz ..= 10 GHz).
pub const PLAUSIBLE_HZ: core::ops::RangeInclusive<u64> = 100_000_000..=10_000_000_000;

/// TSC Hz from CPUID leaf 0x15 (`eax` = denominator, `ebx` = numerator, `ecx` = crystal
/// Hz); `None` when the leaf does not enumerate the ratio or the crystal.
pub fn freq_from_leaf15(eax: u32, ebx: u32, ecx: u32) -> Option<u64> {
    if eax == 0 || ebx == 0 || ecx == 0 {
        return None;
    }
    Some(ecx as u64 * ebx as u64 / eax as u64).filter(|f| PLAUSIBLE_HZ.contains(f))
}

/// TSC Hz from CPUID leaf 0x16 (`eax` = base frequency in MHz).
pub fn freq_from_leaf16(eax: u32) -> Option<u64> {
    Some((eax & 0xffff) as u64 * 1_000_000).filter(|f| PLAUSIBLE_HZ.contains(f))
}

/// TSC Hz from `tsc_ticks` counted while a reference clock of `ref_hz` advanced `ref_ticks`.
pub fn freq_from_measurement(tsc_ticks: u64, ref_ticks: u64, ref_hz: u64) -> Option<u64> {
    if ref_ticks == 0 {
        return None;
    }
    let f = (tsc_ticks as u128 * ref_hz as u128 / ref_ticks as u128) as u64;
    Some(f).filter(|f| PLAUSIBLE_HZ.contains(f))
}

/// Nanoseconds in `ticks` at `hz` (no overflow for centuries of uptime).
pub fn ticks_to_ns(ticks: u64, hz: u64) -> u64 {
    if hz == 0 {
        return 0;
    }
    (ticks as u128 * 1_000_000_000 / hz as u128) as u64
}

/// Ticks in `ns` at `hz`, rounded up (a delay never ends early).
pub fn ns_to_ticks(ns: u64, hz: u64) -> u64 {
    (ns as u128 * hz as u128).div_ceil(1_000_000_000) as u64
}

/// |a - b| / b in parts per million.
pub fn deviation_ppm(a: u64, b: u64) -> u64 {
    if b == 0 {
        return u64::MAX;
    }
    (a.abs_diff(b) as u128 * 1_000_000 / b as u128) as u64
}

/// The median of three measurements (robust against one disturbed run).
pub fn median3(mut v: [u64; 3]) -> u64 {
    v.sort_unstable();
    v[1]
}

/// The median of an odd number of measurements and their spread (largest deviation from
/// the median, in ppm): robust against up to half of the windows being disturbed.
pub fn median_spread<const N: usize>(mut v: [u64; N]) -> (u64, u64) {
    v.sort_unstable();
    let m = v[N / 2];
    let spread = v.iter().map(|&x| deviation_ppm(x, m)).max().unwrap_or(0);
    (m, spread)
}

/// Calibration windows of the PIT (odd, for a median): on a loaded host (two TCG guests
/// on two cores) single windows were seen off by several percent; the median of five
/// precise windows stays within the selftest's 1 %.
pub const PIT_WINDOWS: usize = 5;

/// Where the frequency came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Cpuid15,
    Cpuid16,
    Pit,
}

static FREQ_HZ: AtomicU64 = AtomicU64::new(0);
static BOOT_TSC: AtomicU64 = AtomicU64::new(0);

/// Reads the TSC.
#[inline]
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no side effects; CR4.TSD is clear in ring 0 anyway.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Records the boot instant (timestamps count from here).
pub fn mark_boot() {
    BOOT_TSC.store(rdtsc(), Ordering::Relaxed);
}

/// Sets the frequency once calibrated.
pub fn set_frequency(hz: u64) {
    FREQ_HZ.store(hz, Ordering::Relaxed);
}

/// TSC Hz, 0 before calibration.
pub fn frequency() -> u64 {
    FREQ_HZ.load(Ordering::Relaxed)
}

/// Nanoseconds since boot (0 before calibration).
pub fn now_ns() -> u64 {
    ticks_to_ns(
        rdtsc().wrapping_sub(BOOT_TSC.load(Ordering::Relaxed)),
        frequency(),
    )
}

/// Busy-waits `us` microseconds. Returns at once before calibration (the kernel calibrates
/// before anything that needs a delay runs).
pub fn delay_us(us: u64) {
    let hz = frequency();
    if hz == 0 {
        return;
    }
    let end = rdtsc().saturating_add(ns_to_ticks(us.saturating_mul(1000), hz));
    while rdtsc() < end {
        core::hint::spin_loop();
    }
}

/// PIT ticks of the short check measurement (10 ms) and the calibration one (50 ms).
const PIT_CHECK_TICKS: u16 = 11_932;
const PIT_CALIBRATE_TICKS: u16 = 59_659;
/// CPUID's value is taken only if it agrees with the PIT within this (0.5 %).
const CPUID_AGREEMENT_PPM: u64 = 5_000;

/// A measurement is kept only if its brackets took at most this share of it (0.1 %).
pub const MAX_UNCERTAINTY_PPM: u64 = 1_000;
/// Attempts per sample before a disturbed measurement is accepted anyway.
const ATTEMPTS: usize = 8;

/// Whether a measurement of `ticks` with `uncertainty` is precise enough.
pub fn precise(ticks: u64, uncertainty: u64) -> bool {
    uncertainty as u128 * 1_000_000 <= ticks as u128 * MAX_UNCERTAINTY_PPM as u128
}

/// Median of [`PIT_WINDOWS`] PIT measurements, each retried while disturbed (the least
/// uncertain attempt is used if none is precise).
fn pit_frequency(ticks: u16) -> Option<u64> {
    let mut runs = [0u64; PIT_WINDOWS];
    for r in runs.iter_mut() {
        let mut best: Option<(u64, u64)> = None;
        for _ in 0..ATTEMPTS {
            let (tsc, uncertainty) = super::pit::measure_tsc(ticks)?;
            log::debug!(target: "tsc", "pit: {ticks} ticks = {tsc} tsc ticks +- {uncertainty}");
            if best.is_none_or(|(_, u)| uncertainty < u) {
                best = Some((tsc, uncertainty));
            }
            if precise(tsc, uncertainty) {
                break;
            }
        }
        *r = freq_from_measurement(best?.0, ticks as u64, super::pit::PIT_HZ)?;
    }
    let (hz, spread) = median_spread(runs);
    log::debug!(target: "tsc", "pit: {PIT_WINDOWS} windows of {ticks} ticks: median {hz} Hz, spread {spread} ppm");
    Some(hz)
}

/// Reads `read` with the TSC just before and after; retries while the pair is further
/// apart than `max_gap` TSC ticks. Returns (counter, TSC midpoint).
fn bracketed(read: &dyn Fn() -> u64, max_gap: u64) -> (u64, u64) {
    let mut last = (0, 0);
    for _ in 0..ATTEMPTS {
        let a = rdtsc();
        let c = read();
        let b = rdtsc();
        last = (c, a + (b - a) / 2);
        if b - a <= max_gap {
            break;
        }
    }
    last
}

/// Measures the TSC frequency against a free-running counter `read` of `hz` over about
/// `ms` milliseconds (median of three; needs a calibrated TSC for the time bound).
pub fn measure_against(read: &dyn Fn() -> u64, hz: u64, ms: u64) -> Option<u64> {
    let tsc_hz = frequency();
    if tsc_hz == 0 || hz == 0 || ms == 0 {
        return None;
    }
    let want = hz * ms / 1000;
    // Each bracket may take half the allowed uncertainty.
    let max_gap = ns_to_ticks(ms * 1_000_000, tsc_hz) * MAX_UNCERTAINTY_PPM / 2_000_000;
    let mut runs = [0u64; 3];
    for r in runs.iter_mut() {
        let (c0, t0) = bracketed(read, max_gap);
        let deadline = t0 + ns_to_ticks(ms * 4 * 1_000_000, tsc_hz);
        while read().wrapping_sub(c0) < want {
            if rdtsc() > deadline {
                return None;
            }
            core::hint::spin_loop();
        }
        let (c1, t1) = bracketed(read, max_gap);
        *r = freq_from_measurement(t1 - t0, c1.wrapping_sub(c0), hz)?;
    }
    Some(median3(runs))
}

/// Errors of [`calibrate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CalibrationError {
    /// Neither CPUID nor the PIT gave a plausible frequency.
    NoClock,
}

/// The TSC frequency CPUID states (leaf 0x15, else 0x16), if plausible; `None` when the
/// CPU has neither leaf or they do not give a frequency.
pub fn cpuid_frequency<R: raw_cpuid::CpuIdReader>(read: R) -> Option<(u64, Source)> {
    let cpuid = raw_cpuid::CpuId::with_cpuid_reader(read);
    let from15 = cpuid
        .get_tsc_info()
        .and_then(|t| freq_from_leaf15(t.denominator(), t.numerator(), t.nominal_frequency()));
    let from16 = cpuid
        .get_processor_frequency_info()
        .and_then(|p| freq_from_leaf16(p.processor_base_frequency() as u32));
    from15
        .map(|f| (f, Source::Cpuid15))
        .or(from16.map(|f| (f, Source::Cpuid16)))
}

/// Determines the TSC frequency and makes it current.
pub fn calibrate() -> Result<(u64, Source), CalibrationError> {
    let cpuid = cpuid_frequency(raw_cpuid::CpuIdReaderNative);
    let check = pit_frequency(PIT_CHECK_TICKS);
    let chosen = match (cpuid, check) {
        (Some((f, src)), Some(pit)) if deviation_ppm(f, pit) <= CPUID_AGREEMENT_PPM => {
            Some((f, src))
        }
        (Some((f, src)), None) => Some((f, src)),
        _ => pit_frequency(PIT_CALIBRATE_TICKS).map(|f| (f, Source::Pit)),
    };
    let (hz, src) = chosen.ok_or(CalibrationError::NoClock)?;
    if let (Some((f, s)), Source::Pit) = (cpuid, src) {
        log::warn!("tsc: CPUID {s:?} says {f} Hz but the PIT measures {hz} Hz; using the PIT");
    }
    set_frequency(hz);
    Ok((hz, src))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuid_leaves() {
        // Skylake-like: crystal 24 MHz, ratio 2:216 -> 2.592 GHz.
        assert_eq!(freq_from_leaf15(2, 216, 24_000_000), Some(2_592_000_000));
        assert_eq!(freq_from_leaf15(2, 216, 0), None);
        assert_eq!(freq_from_leaf15(0, 216, 24_000_000), None);
        assert_eq!(
            freq_from_leaf15(1000, 1, 24_000_000),
            None,
            "24 kHz is not plausible"
        );
        assert_eq!(freq_from_leaf16(2100), Some(2_100_000_000));
        assert_eq!(
            freq_from_leaf16(0xdead_0834),
            Some(2_100_000_000),
            "upper bits reserved"
        );
        assert_eq!(freq_from_leaf16(0), None);
    }

    #[test]
    fn cpuid_frequency_leaves() {
        use crate::arch::cpu::tests::{cpu, XEON_E5_2660};
        // Sandy Bridge-EP stops at leaf 0xd: no CPUID frequency, the PIT decides.
        assert_eq!(cpuid_frequency(cpu(&XEON_E5_2660)), None);
        // Leaf 0x15 with a crystal wins over 0x16.
        static WITH_15: [(u32, u32, u32, u32, u32); 3] = [
            (0, 0x16, 0x756e_6547, 0x6c65_746e, 0x4965_6e69),
            (0x15, 2, 216, 24_000_000, 0),
            (0x16, 2600, 3900, 100, 0),
        ];
        assert_eq!(
            cpuid_frequency(cpu(&WITH_15)),
            Some((2_592_000_000, Source::Cpuid15))
        );
        // Leaf 0x15 without the crystal (Skylake-SP reports 0 there): leaf 0x16 is used.
        static NO_CRYSTAL: [(u32, u32, u32, u32, u32); 3] = [
            (0, 0x16, 0x756e_6547, 0x6c65_746e, 0x4965_6e69),
            (0x15, 2, 176, 0, 0),
            (0x16, 2100, 3700, 100, 0),
        ];
        assert_eq!(
            cpuid_frequency(cpu(&NO_CRYSTAL)),
            Some((2_100_000_000, Source::Cpuid16))
        );
    }

    #[test]
    fn measurement() {
        // 50 ms of PIT (59659 ticks at 1.193182 MHz) while the TSC advanced 150 M ticks.
        let f = freq_from_measurement(150_000_000, 59_659, 1_193_182).unwrap();
        assert!(f.abs_diff(3_000_000_000) < 100_000, "{f}");
        assert_eq!(freq_from_measurement(1, 0, 1_193_182), None);
        assert_eq!(freq_from_measurement(10, 59_659, 1_193_182), None);
    }

    #[test]
    fn conversions() {
        assert_eq!(ticks_to_ns(3_000_000_000, 3_000_000_000), 1_000_000_000);
        assert_eq!(ticks_to_ns(3, 3_000_000_000), 1);
        assert_eq!(ticks_to_ns(u64::MAX, 1_000_000_000), u64::MAX);
        assert_eq!(ticks_to_ns(5, 0), 0);
        assert_eq!(ns_to_ticks(1, 3_000_000_000), 3);
        assert_eq!(ns_to_ticks(1, 2_500_000_000), 3, "rounded up");
        assert_eq!(ns_to_ticks(1_000, 2_500_000_000), 2_500);
        // 100 years in ns at 5 GHz does not overflow the intermediate.
        let century = 100 * 365 * 86_400 * 1_000_000_000u64;
        assert_eq!(
            ticks_to_ns(ns_to_ticks(century, 5_000_000_000), 5_000_000_000),
            century
        );
    }

    #[test]
    fn precision_limit() {
        assert!(precise(100_000_000, 100_000));
        assert!(!precise(100_000_000, 100_001));
        assert!(precise(0, 0));
    }

    #[test]
    fn deviation_and_median() {
        assert_eq!(deviation_ppm(1_010_000, 1_000_000), 10_000);
        assert_eq!(deviation_ppm(990_000, 1_000_000), 10_000);
        assert_eq!(deviation_ppm(5, 0), u64::MAX);
        assert_eq!(median3([3, 1, 2]), 2);
        assert_eq!(median3([9, 9, 1]), 9);
        // Two disturbed windows of five (one 4 % fast, one 30 % slow) do not move the median.
        let (m, spread) = median_spread([1_000_000, 1_040_000, 700_000, 1_000_100, 999_900]);
        assert_eq!(m, 1_000_000);
        assert_eq!(spread, 300_000);
        assert_eq!(median_spread([5u64]), (5, 0));
    }
}
