//! x86_64 specifics: CPU features, PAT, GDT/TSS, IDT and interrupt dispatch, PIC, local
//! APIC, I/O APIC, PIT, HPET and the TSC.

pub mod cpu;
pub mod gdt;
pub mod hpet;
pub mod interrupts;
pub mod ioapic;
pub mod lapic;
pub mod pat;
pub mod pic;
pub mod pit;
pub mod tsc;
