//! HPET main counter (a second clock for checking the TSC).

use crate::mm::{self, mmio::Mmio, Cache};
use core::sync::atomic::{AtomicU64, Ordering};

const CAPABILITIES: usize = 0x00;
const CONFIG: usize = 0x10;
const COUNTER: usize = 0xf0;
const CONFIG_ENABLE: u64 = 1;

static BASE: AtomicU64 = AtomicU64::new(0);
static HZ: AtomicU64 = AtomicU64::new(0);

/// HPET errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HpetError {
    /// The counter period is zero or above the 100 ns the specification allows.
    BadPeriod(u64),
    Map(mm::MmError),
}

/// Counter frequency from the period in femtoseconds.
pub fn hz_from_period_fs(period: u64) -> Result<u64, HpetError> {
    if period == 0 || period > 100_000_000 {
        return Err(HpetError::BadPeriod(period));
    }
    Ok(1_000_000_000_000_000 / period)
}

/// Maps the HPET at `phys` and starts its main counter; returns its frequency.
pub fn init(phys: u64) -> Result<u64, HpetError> {
    mm::map(phys, 4096, Cache::Uncached).map_err(HpetError::Map)?;
    // SAFETY: the HPET's 4 KiB register block was just mapped uncached; CAPABILITIES, CONFIG
    // and COUNTER lie inside it.
    let r = unsafe { Mmio::new(phys) };
    let hz = hz_from_period_fs(r.read64(CAPABILITIES) >> 32)?;
    let config = r.read64(CONFIG);
    r.write64(CONFIG, config | CONFIG_ENABLE);
    BASE.store(phys, Ordering::Relaxed);
    HZ.store(hz, Ordering::Relaxed);
    Ok(hz)
}

/// Counter frequency (0: no HPET).
pub fn frequency() -> u64 {
    HZ.load(Ordering::Relaxed)
}

/// The main counter (0 before [`init`]).
pub fn counter() -> u64 {
    let base = BASE.load(Ordering::Relaxed);
    if base == 0 {
        return 0;
    }
    // SAFETY: a non-zero BASE is the register block `init` mapped uncached; COUNTER lies in it.
    unsafe { Mmio::new(base) }.read64(COUNTER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn period_conversion() {
        // QEMU's HPET: 10 ns period = 100 MHz.
        assert_eq!(hz_from_period_fs(10_000_000), Ok(100_000_000));
        // Intel PCH: 69.841279 ns = 14.318179 MHz (rounded down).
        assert_eq!(hz_from_period_fs(69_841_279), Ok(14_318_179));
        assert_eq!(hz_from_period_fs(0), Err(HpetError::BadPeriod(0)));
        assert_eq!(
            hz_from_period_fs(100_000_001),
            Err(HpetError::BadPeriod(100_000_001))
        );
    }
}
