//! IDT: a report for every exception, and a table of handlers for vectors 32..=255.
//!
//! Vector plan: 0x20-0x2f legacy PIC (masked; only spurious IRQs arrive), 0x30-0xef
//! handed out by [`allocate`], 0xf0 local APIC timer, 0xff APIC spurious. A handler is a
//! plain `fn(vector)` stored in an atomic slot, so dispatch takes no lock and allocates
//! nothing; the dispatcher signals end-of-interrupt to the local APIC afterwards.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use spin::Once;
use x86_64::structures::idt::{
    HandlerFunc, InterruptDescriptorTable, InterruptStackFrame, PageFaultErrorCode,
};

use super::gdt::DOUBLE_FAULT_IST;
use crate::fault::{self, Frame};

/// First and last vectors handed out to drivers.
pub const FIRST_DYNAMIC: u8 = 0x30;
pub const LAST_DYNAMIC: u8 = 0xef;
/// Local APIC timer.
pub const TIMER_VECTOR: u8 = 0xf0;
/// APIC spurious-interrupt vector (no EOI).
pub const SPURIOUS_VECTOR: u8 = 0xff;
/// The PIC's remapped range.
pub const PIC_BASE: u8 = 0x20;

/// An interrupt handler: runs with interrupts disabled, must not block or allocate.
pub type Handler = fn(vector: u8);

static HANDLERS: [AtomicUsize; 256] = [const { AtomicUsize::new(0) }; 256];
static COUNTS: [AtomicU64; 256] = [const { AtomicU64::new(0) }; 256];
static IDT: Once<InterruptDescriptorTable> = Once::new();

/// Interrupt-registration errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrqError {
    /// Every dynamic vector is taken.
    NoFreeVector,
    /// The vector is reserved or already has a handler.
    VectorBusy(u8),
}

/// Takes a free vector in 0x30..=0xef and installs `handler` on it.
pub fn allocate(handler: Handler) -> Result<u8, IrqError> {
    for v in FIRST_DYNAMIC..=LAST_DYNAMIC {
        if HANDLERS[v as usize]
            .compare_exchange(0, handler as usize, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return Ok(v);
        }
    }
    Err(IrqError::NoFreeVector)
}

/// Installs `handler` on a specific vector (0x30..=0xfe) that has none. Exceptions, the
/// PIC range (no APIC EOI is sent there) and the spurious vector are refused.
pub fn register(vector: u8, handler: Handler) -> Result<(), IrqError> {
    if !(FIRST_DYNAMIC..SPURIOUS_VECTOR).contains(&vector) {
        return Err(IrqError::VectorBusy(vector));
    }
    HANDLERS[vector as usize]
        .compare_exchange(0, handler as usize, Ordering::AcqRel, Ordering::Relaxed)
        .map(|_| ())
        .map_err(|_| IrqError::VectorBusy(vector))
}

/// Removes the handler of `vector` (the device must no longer send it).
pub fn free(vector: u8) {
    HANDLERS[vector as usize].store(0, Ordering::Release);
}

/// How many times `vector` was delivered.
pub fn count(vector: u8) -> u64 {
    COUNTS[vector as usize].load(Ordering::Relaxed)
}

fn dispatch(vector: u8) {
    COUNTS[vector as usize].fetch_add(1, Ordering::Relaxed);
    let h = HANDLERS[vector as usize].load(Ordering::Acquire);
    if h != 0 {
        // SAFETY: only `Handler` values are stored in HANDLERS (see allocate/register).
        let f: Handler = unsafe { core::mem::transmute::<usize, Handler>(h) };
        f(vector);
    }
    // PIC-range vectors are spurious 8259 interrupts (all lines masked): no APIC EOI.
    // The APIC spurious vector must not be acknowledged either.
    if vector >= FIRST_DYNAMIC && vector != SPURIOUS_VECTOR {
        super::lapic::eoi();
    }
}

extern "x86-interrupt" fn irq<const V: u8>(_frame: InterruptStackFrame) {
    dispatch(V);
}

const STUBS: [HandlerFunc; 224] = [
    irq::<32>, irq::<33>, irq::<34>, irq::<35>, irq::<36>, irq::<37>, irq::<38>, irq::<39>,
    irq::<40>, irq::<41>, irq::<42>, irq::<43>, irq::<44>, irq::<45>, irq::<46>, irq::<47>,
    irq::<48>, irq::<49>, irq::<50>, irq::<51>, irq::<52>, irq::<53>, irq::<54>, irq::<55>,
    irq::<56>, irq::<57>, irq::<58>, irq::<59>, irq::<60>, irq::<61>, irq::<62>, irq::<63>,
    irq::<64>, irq::<65>, irq::<66>, irq::<67>, irq::<68>, irq::<69>, irq::<70>, irq::<71>,
    irq::<72>, irq::<73>, irq::<74>, irq::<75>, irq::<76>, irq::<77>, irq::<78>, irq::<79>,
    irq::<80>, irq::<81>, irq::<82>, irq::<83>, irq::<84>, irq::<85>, irq::<86>, irq::<87>,
    irq::<88>, irq::<89>, irq::<90>, irq::<91>, irq::<92>, irq::<93>, irq::<94>, irq::<95>,
    irq::<96>, irq::<97>, irq::<98>, irq::<99>, irq::<100>, irq::<101>, irq::<102>, irq::<103>,
    irq::<104>, irq::<105>, irq::<106>, irq::<107>, irq::<108>, irq::<109>, irq::<110>, irq::<111>,
    irq::<112>, irq::<113>, irq::<114>, irq::<115>, irq::<116>, irq::<117>, irq::<118>, irq::<119>,
    irq::<120>, irq::<121>, irq::<122>, irq::<123>, irq::<124>, irq::<125>, irq::<126>, irq::<127>,
    irq::<128>, irq::<129>, irq::<130>, irq::<131>, irq::<132>, irq::<133>, irq::<134>, irq::<135>,
    irq::<136>, irq::<137>, irq::<138>, irq::<139>, irq::<140>, irq::<141>, irq::<142>, irq::<143>,
    irq::<144>, irq::<145>, irq::<146>, irq::<147>, irq::<148>, irq::<149>, irq::<150>, irq::<151>,
    irq::<152>, irq::<153>, irq::<154>, irq::<155>, irq::<156>, irq::<157>, irq::<158>, irq::<159>,
    irq::<160>, irq::<161>, irq::<162>, irq::<163>, irq::<164>, irq::<165>, irq::<166>, irq::<167>,
    irq::<168>, irq::<169>, irq::<170>, irq::<171>, irq::<172>, irq::<173>, irq::<174>, irq::<175>,
    irq::<176>, irq::<177>, irq::<178>, irq::<179>, irq::<180>, irq::<181>, irq::<182>, irq::<183>,
    irq::<184>, irq::<185>, irq::<186>, irq::<187>, irq::<188>, irq::<189>, irq::<190>, irq::<191>,
    irq::<192>, irq::<193>, irq::<194>, irq::<195>, irq::<196>, irq::<197>, irq::<198>, irq::<199>,
    irq::<200>, irq::<201>, irq::<202>, irq::<203>, irq::<204>, irq::<205>, irq::<206>, irq::<207>,
    irq::<208>, irq::<209>, irq::<210>, irq::<211>, irq::<212>, irq::<213>, irq::<214>, irq::<215>,
    irq::<216>, irq::<217>, irq::<218>, irq::<219>, irq::<220>, irq::<221>, irq::<222>, irq::<223>,
    irq::<224>, irq::<225>, irq::<226>, irq::<227>, irq::<228>, irq::<229>, irq::<230>, irq::<231>,
    irq::<232>, irq::<233>, irq::<234>, irq::<235>, irq::<236>, irq::<237>, irq::<238>, irq::<239>,
    irq::<240>, irq::<241>, irq::<242>, irq::<243>, irq::<244>, irq::<245>, irq::<246>, irq::<247>,
    irq::<248>, irq::<249>, irq::<250>, irq::<251>, irq::<252>, irq::<253>, irq::<254>, irq::<255>,
];

fn frame(f: &InterruptStackFrame) -> Frame {
    Frame {
        rip: f.instruction_pointer.as_u64(),
        cs: f.code_segment.0 as u64,
        rflags: f.cpu_flags.bits(),
        rsp: f.stack_pointer.as_u64(),
        ss: f.stack_segment.0 as u64,
    }
}

macro_rules! exception {
    ($name:ident, $vector:expr) => {
        extern "x86-interrupt" fn $name(f: InterruptStackFrame) {
            fault::exception($vector, &frame(&f), None, None)
        }
    };
    ($name:ident, $vector:expr, error) => {
        extern "x86-interrupt" fn $name(f: InterruptStackFrame, code: u64) {
            fault::exception($vector, &frame(&f), Some(code), None)
        }
    };
}

exception!(divide_error, 0);
exception!(debug, 1);
exception!(nmi, 2);
exception!(breakpoint, 3);
exception!(overflow, 4);
exception!(bound_range, 5);
exception!(invalid_opcode, 6);
exception!(device_not_available, 7);
exception!(invalid_tss, 10, error);
exception!(segment_not_present, 11, error);
exception!(stack_segment, 12, error);
exception!(general_protection, 13, error);
exception!(x87_floating_point, 16);
exception!(alignment_check, 17, error);
exception!(simd_floating_point, 19);
exception!(virtualization, 20);
exception!(control_protection, 21, error);
exception!(hv_injection, 28);
exception!(vmm_communication, 29, error);
exception!(security, 30, error);

extern "x86-interrupt" fn double_fault(f: InterruptStackFrame, code: u64) -> ! {
    fault::exception(8, &frame(&f), Some(code), None)
}

extern "x86-interrupt" fn machine_check(f: InterruptStackFrame) -> ! {
    fault::exception(18, &frame(&f), None, None)
}

extern "x86-interrupt" fn page_fault(f: InterruptStackFrame, code: PageFaultErrorCode) {
    let cr2 = x86_64::registers::control::Cr2::read_raw();
    fault::exception(14, &frame(&f), Some(code.bits()), Some(cr2))
}

/// Builds and loads the IDT.
pub fn init() {
    let idt = IDT.call_once(|| {
        let mut idt = InterruptDescriptorTable::new();
        idt.divide_error.set_handler_fn(divide_error);
        idt.debug.set_handler_fn(debug);
        idt.breakpoint.set_handler_fn(breakpoint);
        idt.overflow.set_handler_fn(overflow);
        idt.bound_range_exceeded.set_handler_fn(bound_range);
        idt.invalid_opcode.set_handler_fn(invalid_opcode);
        idt.device_not_available
            .set_handler_fn(device_not_available);
        idt.invalid_tss.set_handler_fn(invalid_tss);
        idt.segment_not_present.set_handler_fn(segment_not_present);
        idt.stack_segment_fault.set_handler_fn(stack_segment);
        idt.general_protection_fault
            .set_handler_fn(general_protection);
        idt.page_fault.set_handler_fn(page_fault);
        idt.x87_floating_point.set_handler_fn(x87_floating_point);
        idt.alignment_check.set_handler_fn(alignment_check);
        idt.simd_floating_point.set_handler_fn(simd_floating_point);
        idt.virtualization.set_handler_fn(virtualization);
        idt.cp_protection_exception
            .set_handler_fn(control_protection);
        idt.hv_injection_exception.set_handler_fn(hv_injection);
        idt.vmm_communication_exception
            .set_handler_fn(vmm_communication);
        idt.security_exception.set_handler_fn(security);
        // SAFETY: the IST slot holds a valid, otherwise unused stack (gdt.rs).
        unsafe {
            idt.double_fault
                .set_handler_fn(double_fault)
                .set_stack_index(DOUBLE_FAULT_IST);
            idt.non_maskable_interrupt
                .set_handler_fn(nmi)
                .set_stack_index(DOUBLE_FAULT_IST);
            idt.machine_check
                .set_handler_fn(machine_check)
                .set_stack_index(DOUBLE_FAULT_IST);
        }
        for (i, stub) in STUBS.iter().enumerate() {
            idt[32 + i as u8].set_handler_fn(*stub);
        }
        idt
    });
    idt.load();
}

/// Enables interrupts.
pub fn enable() {
    x86_64::instructions::interrupts::enable();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h1(_: u8) {}
    fn h2(_: u8) {}

    #[test]
    fn allocation_register_free() {
        let a = allocate(h1).unwrap();
        let b = allocate(h2).unwrap();
        assert!((FIRST_DYNAMIC..=LAST_DYNAMIC).contains(&a));
        assert_ne!(a, b);
        assert_eq!(register(a, h2), Err(IrqError::VectorBusy(a)));
        assert_eq!(register(3, h2), Err(IrqError::VectorBusy(3)));
        assert_eq!(register(0x27, h2), Err(IrqError::VectorBusy(0x27)));
        assert_eq!(
            register(SPURIOUS_VECTOR, h2),
            Err(IrqError::VectorBusy(0xff))
        );
        register(0xf1, h2).unwrap();
        free(0xf1);
        free(a);
        register(a, h2).unwrap();
        free(a);
        free(b);
    }
}
