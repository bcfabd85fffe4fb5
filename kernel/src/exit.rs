//! Ending a run: the exit contract with the runner.
//!
//! The kernel always first writes its status to QEMU's isa-debug-exit device (I/O port
//! 0xf4, 4 bytes wide): 0x10 for success (QEMU exits with status 33), 0x11 for failure
//! (status 35). On a machine without that device the write is ignored and the kernel
//! then halts forever (`on_exit=halt`, the default) or resets the machine
//! (`on_exit=reset`).

use crate::config::OnExit;
use core::sync::atomic::{AtomicBool, Ordering};
use x86_64::instructions::port::Port;

/// isa-debug-exit I/O base.
pub const DEBUG_EXIT_PORT: u16 = 0xf4;

/// The run's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Status {
    Success = 0x10,
    Failure = 0x11,
}

impl Status {
    /// The status QEMU exits with: (value << 1) | 1.
    pub const fn qemu_exit_status(self) -> i32 {
        ((self as u32) << 1 | 1) as i32
    }
}

static RESET: AtomicBool = AtomicBool::new(false);

/// Chooses what happens after the QEMU exit write.
pub fn set_policy(p: OnExit) {
    RESET.store(p == OnExit::Reset, Ordering::Relaxed);
}

/// Ends the run.
pub fn exit(status: Status) -> ! {
    x86_64::instructions::interrupts::disable();
    // SAFETY: port 0xf4 is QEMU's debug-exit device or unclaimed on real machines.
    unsafe { Port::<u32>::new(DEBUG_EXIT_PORT).write(status as u32) };
    if RESET.load(Ordering::Relaxed) {
        // Let the UART drain its FIFO before the machine goes away.
        crate::arch::tsc::delay_us(100_000);
        reset();
    }
    halt_forever()
}

/// Halts with interrupts disabled (NMIs wake `hlt`, hence the loop).
pub fn halt_forever() -> ! {
    loop {
        x86_64::instructions::interrupts::disable();
        x86_64::instructions::hlt();
    }
}

/// Resets the machine: PCI reset control (0xcf9), then the keyboard controller, then a
/// triple fault.
pub fn reset() -> ! {
    // SAFETY: standard PC reset mechanisms; the machine restarts or the write is ignored.
    unsafe {
        Port::<u8>::new(0xcf9).write(0x02);
        crate::arch::tsc::delay_us(10);
        Port::<u8>::new(0xcf9).write(0x06);
        crate::arch::tsc::delay_us(50_000);
        Port::<u8>::new(0x64).write(0xfe);
        crate::arch::tsc::delay_us(50_000);
        // An empty IDT turns the breakpoint into a triple fault.
        static EMPTY: x86_64::structures::DescriptorTablePointer =
            x86_64::structures::DescriptorTablePointer {
                limit: 0,
                base: x86_64::VirtAddr::zero(),
            };
        x86_64::instructions::tables::lidt(&EMPTY);
        core::arch::asm!("int3", options(nomem, nostack));
    }
    halt_forever()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qemu_statuses() {
        assert_eq!(Status::Success.qemu_exit_status(), 33);
        assert_eq!(Status::Failure.qemu_exit_status(), 35);
    }
}
