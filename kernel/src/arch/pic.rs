//! Legacy 8259 PICs: remapped away from the exception vectors and fully masked, so only
//! their spurious IRQs (7 and 15) can ever arrive (ignored by the dispatcher).

use super::interrupts::PIC_BASE;
use x86_64::instructions::port::Port;

/// Remaps the master to 0x20..0x27 and the slave to 0x28..0x2f, then masks every line.
pub fn remap_and_mask() {
    // SAFETY: the 8259 ports are owned by this module; the ICW sequence is the
    // documented initialisation (8259A data sheet) and ends with all lines masked.
    unsafe {
        let mut wait = Port::<u8>::new(0x80);
        for (port, value) in [
            (0x20u16, 0x11u8), // ICW1 (master): edge, cascade, ICW4 follows
            (0xa0, 0x11),      // ICW1 (slave)
            (0x21, PIC_BASE),  // ICW2: vector bases
            (0xa1, PIC_BASE + 8),
            (0x21, 4), // ICW3: slave on IRQ2
            (0xa1, 2),
            (0x21, 1), // ICW4: 8086 mode
            (0xa1, 1),
            (0x21, 0xff), // mask every line
            (0xa1, 0xff),
        ] {
            Port::<u8>::new(port).write(value);
            wait.write(0);
        }
    }
}
