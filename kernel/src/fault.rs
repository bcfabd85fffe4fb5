//! Fault reports (exceptions and panics) and the deliberate faults of `mode=fault`.

use crate::config::FaultKind;
use crate::exit::{exit, Status};
use core::fmt;

/// A decoded page-fault error code (Intel SDM vol. 3, 4.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageFaultError(pub u64);

impl fmt::Display for PageFaultError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.0;
        write!(
            f,
            "{}, {}, {}",
            if e & 1 != 0 {
                "protection violation (present)"
            } else {
                "not-present"
            },
            if e & 2 != 0 { "write" } else { "read" },
            if e & 4 != 0 { "user" } else { "supervisor" },
        )?;
        if e & 8 != 0 {
            write!(f, ", reserved bit set")?;
        }
        if e & 16 != 0 {
            write!(f, ", instruction fetch")?;
        }
        if e & 32 != 0 {
            write!(f, ", protection key")?;
        }
        if e & 64 != 0 {
            write!(f, ", shadow stack")?;
        }
        if e & (1 << 15) != 0 {
            write!(f, ", SGX")?;
        }
        Ok(())
    }
}

/// Names of the architectural exceptions by vector.
pub fn exception_name(vector: u8) -> &'static str {
    match vector {
        0 => "divide error (#DE)",
        1 => "debug (#DB)",
        2 => "non-maskable interrupt (NMI)",
        3 => "breakpoint (#BP)",
        4 => "overflow (#OF)",
        5 => "bound range exceeded (#BR)",
        6 => "invalid opcode (#UD)",
        7 => "device not available (#NM)",
        8 => "double fault (#DF)",
        10 => "invalid TSS (#TS)",
        11 => "segment not present (#NP)",
        12 => "stack-segment fault (#SS)",
        13 => "general protection (#GP)",
        14 => "page fault (#PF)",
        16 => "x87 floating-point error (#MF)",
        17 => "alignment check (#AC)",
        18 => "machine check (#MC)",
        19 => "SIMD floating-point (#XM)",
        20 => "virtualization (#VE)",
        21 => "control protection (#CP)",
        28 => "hypervisor injection (#HV)",
        29 => "VMM communication (#VC)",
        30 => "security (#SX)",
        _ => "reserved exception",
    }
}

/// Register state at an exception.
#[derive(Clone, Copy, Debug)]
pub struct Frame {
    pub rip: u64,
    pub cs: u64,
    pub rflags: u64,
    pub rsp: u64,
    pub ss: u64,
}

/// Prints the exception report and ends the run with the failure status.
pub fn exception(vector: u8, frame: &Frame, error: Option<u64>, cr2: Option<u64>) -> ! {
    let w = crate::console::emergency_write;
    w(format_args!(
        "\n!!! EXCEPTION: {} (vector {})\n",
        exception_name(vector),
        vector
    ));
    if let Some(cr2) = cr2 {
        w(format_args!(
            "!!!   cr2    {cr2:#018x} (faulting address)\n"
        ));
    }
    match (error, vector) {
        (Some(e), 14) => w(format_args!("!!!   error  {e:#x}: {}\n", PageFaultError(e))),
        (Some(e), _) => w(format_args!("!!!   error  {e:#x}\n")),
        (None, _) => {}
    }
    w(format_args!(
        "!!!   rip    {:#018x}  cs {:#x}  rflags {:#x}\n!!!   rsp    {:#018x}  ss {:#x}\n",
        frame.rip, frame.cs, frame.rflags, frame.rsp, frame.ss
    ));
    w(format_args!("!!! kernel stopped: exit status failure\n"));
    exit(Status::Failure)
}

/// Prints the panic report and ends the run with the failure status.
pub fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    crate::console::emergency_write(format_args!(
        "\n!!! PANIC: {info}\n!!! kernel stopped: exit status failure\n"
    ));
    exit(Status::Failure)
}

/// A canonical lower-half address that is never mapped (above any identity mapping the
/// kernel makes for RAM or MMIO below 64 TiB).
pub const UNMAPPED_ADDRESS: u64 = 0x0000_6000_dead_b000;
/// A non-canonical address (bits 63:48 do not copy bit 47).
pub const NON_CANONICAL_ADDRESS: u64 = 0x0000_dead_0000_0000;

/// Triggers the fault (never returns: the handler ends the run).
pub fn trigger(kind: FaultKind) -> ! {
    log::info!("triggering a deliberate {kind:?} fault");
    match kind {
        FaultKind::PageFault => {
            // SAFETY: deliberately faulting; the page-fault handler reports and exits.
            let v = unsafe { core::ptr::read_volatile(UNMAPPED_ADDRESS as *const u64) };
            panic!("read of unmapped address {UNMAPPED_ADDRESS:#x} returned {v:#x}")
        }
        FaultKind::Gpf => {
            // SAFETY: deliberately faulting with a non-canonical access (#GP).
            let v = unsafe { core::ptr::read_volatile(NON_CANONICAL_ADDRESS as *const u64) };
            panic!("read of non-canonical address returned {v:#x}")
        }
        FaultKind::Divide => {
            // SAFETY: a division by zero raises #DE, which the handler reports.
            unsafe {
                core::arch::asm!("xor edx, edx", "xor ecx, ecx", "mov eax, 1", "div ecx", out("eax") _, out("ecx") _, out("edx") _, options(nomem, nostack));
            }
            panic!("division by zero did not fault")
        }
        FaultKind::Panic => panic!("deliberate panic (mode=fault fault=panic)"),
        FaultKind::StackOverflow => {
            let depth = recurse(0);
            panic!("recursed {depth} frames without overflowing the stack")
        }
    }
}

/// Recurses with a 4 KiB frame until the stack's guard page is hit.
#[inline(never)]
fn recurse(depth: u64) -> u64 {
    let frame = core::hint::black_box([depth as u8; 4096]);
    if depth > 1 << 20 {
        return depth;
    }
    core::hint::black_box(recurse(depth + 1)) + frame[depth as usize % 4096] as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    #[test]
    fn page_fault_error_decoding() {
        assert_eq!(
            format!("{}", PageFaultError(0)),
            "not-present, read, supervisor"
        );
        assert_eq!(
            format!("{}", PageFaultError(2)),
            "not-present, write, supervisor"
        );
        assert_eq!(
            format!("{}", PageFaultError(0x7)),
            "protection violation (present), write, user"
        );
        assert_eq!(
            format!("{}", PageFaultError(0x11)),
            "protection violation (present), read, supervisor, instruction fetch"
        );
        assert_eq!(
            format!("{}", PageFaultError(0x9)),
            "protection violation (present), read, supervisor, reserved bit set"
        );
        assert_eq!(exception_name(14), "page fault (#PF)");
        assert_eq!(exception_name(9), "reserved exception");
    }

    #[test]
    fn fault_addresses() {
        use crate::mm::paging::{canonical, LOWER_HALF_END};
        const { assert!(UNMAPPED_ADDRESS < LOWER_HALF_END) };
        assert_eq!(canonical(UNMAPPED_ADDRESS), UNMAPPED_ADDRESS);
        assert_ne!(canonical(NON_CANONICAL_ADDRESS), NON_CANONICAL_ADDRESS);
    }
}
