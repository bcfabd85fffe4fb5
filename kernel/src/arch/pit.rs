//! 8254 programmable interval timer: TSC measurement on channel 2 (gated through port
//! 0x61, polled, no interrupt) and a periodic channel 0 as a known interrupt source.

use x86_64::instructions::port::Port;

/// The PIT's input clock.
pub const PIT_HZ: u64 = 1_193_182;

/// Polls of OUT2 before giving up (a missing PIT must not hang the boot): far more than
/// the 65535-tick maximum needs at any plausible port-I/O speed.
const MAX_POLLS: u64 = 200_000_000;

/// Counts TSC ticks while channel 2 counts down `ticks` PIT ticks. Returns the count
/// (midpoints of the start and end brackets) and its uncertainty in TSC ticks (how long
/// the gate write and the final poll took: large when the CPU was preempted, e.g. by a
/// busy host); `None` if the PIT never signalled the end.
pub fn measure_tsc(ticks: u16) -> Option<(u64, u64)> {
    // SAFETY: ports 0x42, 0x43 and 0x61 belong to this driver; channel 2 drives only the
    // PC speaker gate, which is kept off.
    unsafe {
        let mut ctl = Port::<u8>::new(0x61);
        let mut cmd = Port::<u8>::new(0x43);
        let mut ch2 = Port::<u8>::new(0x42);
        let gate = ctl.read();
        // Gate low while loading, speaker off.
        ctl.write(gate & !0x03);
        // Channel 2, low then high byte, mode 0 (interrupt on terminal count), binary.
        cmd.write(0b1011_0000);
        ch2.write(ticks as u8);
        // The count starts at the gate's rising edge (QEMU: when the high byte is
        // written), so the start bracket covers both writes.
        let s0 = super::tsc::rdtsc();
        ch2.write((ticks >> 8) as u8);
        ctl.write((gate & !0x02) | 0x01);
        let s1 = super::tsc::rdtsc();
        // OUT2 rose between the last poll that saw it low and the first that saw it
        // high: the end bracket spans both (a preemption between polls widens it).
        let mut polls = 0u64;
        let mut previous = s1;
        let (e0, e1) = loop {
            let before = super::tsc::rdtsc();
            let high = ctl.read() & 0x20 != 0;
            if high {
                break (previous, super::tsc::rdtsc());
            }
            previous = before;
            polls += 1;
            if polls == MAX_POLLS {
                ctl.write(gate & !0x03);
                return None;
            }
        };
        ctl.write(gate & !0x03);
        let mid = |a: u64, b: u64| a + (b - a) / 2;
        Some((mid(e0, e1) - mid(s0, s1), (s1 - s0) + (e1 - e0)))
    }
}

/// Starts channel 0 as a rate generator at about `hz` (IRQ 0).
pub fn start_periodic(hz: u32) {
    let divisor = (PIT_HZ / hz.max(19) as u64).min(0xffff) as u16;
    // SAFETY: ports 0x40 and 0x43 belong to this driver.
    unsafe {
        Port::<u8>::new(0x43).write(0b0011_0100); // channel 0, lo/hi, mode 2, binary
        let mut ch0 = Port::<u8>::new(0x40);
        ch0.write(divisor as u8);
        ch0.write((divisor >> 8) as u8);
    }
}

/// Stops channel 0 (mode 0 without a count: OUT0 stays low, no more edges).
pub fn stop_periodic() {
    // SAFETY: port 0x43 belongs to this driver.
    unsafe { Port::<u8>::new(0x43).write(0b0011_0000) };
}
