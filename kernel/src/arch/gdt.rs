//! GDT with a TSS whose IST slot 0 is the double-fault stack.

use spin::Once;
use x86_64::instructions::segmentation::{Segment, CS, DS, ES, SS};
use x86_64::instructions::tables::load_tss;
use x86_64::structures::gdt::{Descriptor, GlobalDescriptorTable, SegmentSelector};
use x86_64::structures::tss::TaskStateSegment;
use x86_64::VirtAddr;

/// IST index used by the double-fault (and NMI, machine-check) handlers.
pub const DOUBLE_FAULT_IST: u16 = 0;

const IST_STACK_SIZE: usize = 32 * 1024;

#[repr(align(16))]
struct Stack {
    _bytes: [u8; IST_STACK_SIZE],
}

static mut DOUBLE_FAULT_STACK: Stack = Stack {
    _bytes: [0; IST_STACK_SIZE],
};

static TSS: Once<TaskStateSegment> = Once::new();
static GDT: Once<(
    GlobalDescriptorTable,
    SegmentSelector,
    SegmentSelector,
    SegmentSelector,
)> = Once::new();

/// Loads the GDT and TSS and reloads the segment registers.
pub fn init() {
    let tss = TSS.call_once(|| {
        let mut tss = TaskStateSegment::new();
        let start = VirtAddr::from_ptr(&raw const DOUBLE_FAULT_STACK);
        tss.interrupt_stack_table[DOUBLE_FAULT_IST as usize] = start + IST_STACK_SIZE as u64;
        tss
    });
    let (gdt, code, data, tss_sel) = GDT.call_once(|| {
        let mut gdt = GlobalDescriptorTable::new();
        let code = gdt.append(Descriptor::kernel_code_segment());
        let data = gdt.append(Descriptor::kernel_data_segment());
        let tss_sel = gdt.append(Descriptor::tss_segment(tss));
        (gdt, code, data, tss_sel)
    });
    gdt.load();
    // SAFETY: the selectors index valid descriptors of the GDT just loaded.
    unsafe {
        CS::set_reg(*code);
        SS::set_reg(*data);
        DS::set_reg(*data);
        ES::set_reg(*data);
        load_tss(*tss_sel);
    }
}
