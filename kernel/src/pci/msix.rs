//! MSI-X: message encoding for the local APIC and table programming.
//!
//! The table is reached through [`Registers`] (32-bit accesses at byte offsets from the
//! table start), implemented over an uncached BAR mapping in the kernel and over an array
//! in the host tests. Layout (PCI 3.0, 6.8.2): 16 bytes per entry, message address low,
//! high, data, vector control (bit 0 = masked).

use super::{regs, Bdf, ConfigAccess, MsixInfo};

/// 32-bit register access.
pub trait Registers {
    fn read32(&self, offset: usize) -> u32;
    fn write32(&self, offset: usize, value: u32);
}

/// Bytes per table entry.
pub const ENTRY_SIZE: usize = 16;
const ADDR_LO: usize = 0;
const ADDR_HI: usize = 4;
const DATA: usize = 8;
const CONTROL: usize = 12;
const CONTROL_MASKED: u32 = 1;

/// Message-control bits in the capability (offset 2).
pub const CTRL_ENABLE: u16 = 1 << 15;
pub const CTRL_FUNCTION_MASK: u16 = 1 << 14;

/// An MSI message for the xAPIC: fixed delivery, physical destination, edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    pub address: u64,
    pub data: u32,
}

/// The message that delivers `vector` to the local APIC `apic_id` (Intel SDM vol. 3,
/// 11.11: address 0xFEE0_0000 | destination << 12, data = vector).
pub fn message(apic_id: u8, vector: u8) -> Message {
    Message {
        address: 0xfee0_0000 | (apic_id as u64) << 12,
        data: vector as u32,
    }
}

/// Table errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsixError {
    /// Entry index beyond the table size.
    NoSuchEntry(u16),
}

/// An MSI-X table of `entries` entries.
pub struct Table<R: Registers> {
    regs: R,
    entries: u16,
}

impl<R: Registers> Table<R> {
    pub fn new(regs: R, entries: u16) -> Self {
        Table { regs, entries }
    }

    pub fn entries(&self) -> u16 {
        self.entries
    }

    fn base(&self, index: u16) -> Result<usize, MsixError> {
        if index >= self.entries {
            return Err(MsixError::NoSuchEntry(index));
        }
        Ok(index as usize * ENTRY_SIZE)
    }

    /// Writes `msg` into entry `index`, leaving it masked (unmask it once the handler is
    /// in place).
    pub fn program(&self, index: u16, msg: Message) -> Result<(), MsixError> {
        let b = self.base(index)?;
        self.mask(index)?;
        self.regs.write32(b + ADDR_LO, msg.address as u32);
        self.regs.write32(b + ADDR_HI, (msg.address >> 32) as u32);
        self.regs.write32(b + DATA, msg.data);
        Ok(())
    }

    /// Reads entry `index` back.
    pub fn read(&self, index: u16) -> Result<(Message, bool), MsixError> {
        let b = self.base(index)?;
        let address =
            (self.regs.read32(b + ADDR_HI) as u64) << 32 | self.regs.read32(b + ADDR_LO) as u64;
        let msg = Message {
            address,
            data: self.regs.read32(b + DATA),
        };
        Ok((msg, self.regs.read32(b + CONTROL) & CONTROL_MASKED != 0))
    }

    pub fn mask(&self, index: u16) -> Result<(), MsixError> {
        let b = self.base(index)?;
        let c = self.regs.read32(b + CONTROL);
        self.regs.write32(b + CONTROL, c | CONTROL_MASKED);
        Ok(())
    }

    pub fn unmask(&self, index: u16) -> Result<(), MsixError> {
        let b = self.base(index)?;
        let c = self.regs.read32(b + CONTROL);
        self.regs.write32(b + CONTROL, c & !CONTROL_MASKED);
        Ok(())
    }

    /// Masks every entry.
    pub fn mask_all(&self) {
        for i in 0..self.entries {
            let _ = self.mask(i);
        }
    }
}

/// Sets the MSI-X enable and function-mask bits in the capability.
pub fn set_control(
    cfg: &dyn ConfigAccess,
    bdf: Bdf,
    info: &MsixInfo,
    enable: bool,
    function_mask: bool,
) {
    let at = info.cap_offset as u16 + 2;
    let mut c = cfg.read16(bdf, at) & !(CTRL_ENABLE | CTRL_FUNCTION_MASK);
    if enable {
        c |= CTRL_ENABLE;
    }
    if function_mask {
        c |= CTRL_FUNCTION_MASK;
    }
    cfg.write16(bdf, at, c);
}

/// Enables MSI-X the safe way: function masked while enabling, INTx disabled, then the
/// function mask dropped (individual entries stay as programmed).
pub fn enable(cfg: &dyn ConfigAccess, bdf: Bdf, info: &MsixInfo) {
    set_control(cfg, bdf, info, true, true);
    let command = cfg.read16(bdf, regs::COMMAND) | regs::CMD_INTX_DISABLE;
    cfg.write16(bdf, regs::COMMAND, command);
    set_control(cfg, bdf, info, true, false);
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::RefCell;
    use std::vec;
    use std::vec::Vec;

    struct FakeTable(RefCell<Vec<u32>>);
    impl Registers for &FakeTable {
        fn read32(&self, offset: usize) -> u32 {
            assert_eq!(offset % 4, 0);
            self.0.borrow()[offset / 4]
        }
        fn write32(&self, offset: usize, value: u32) {
            self.0.borrow_mut()[offset / 4] = value;
        }
    }

    #[test]
    fn message_encoding() {
        assert_eq!(
            message(0, 0x40),
            Message {
                address: 0xfee0_0000,
                data: 0x40
            }
        );
        assert_eq!(
            message(3, 0x41),
            Message {
                address: 0xfee0_3000,
                data: 0x41
            }
        );
        assert_eq!(message(0xff, 0xef).address, 0xfeef_f000);
    }

    #[test]
    fn program_mask_unmask() {
        // Entries come out of reset masked (control = 1).
        let fake = FakeTable(RefCell::new(vec![0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1]));
        let t = Table::new(&fake, 3);
        t.program(1, message(2, 0x51)).unwrap();
        assert_eq!(&fake.0.borrow()[4..8], &[0xfee0_2000, 0, 0x51, 1]);
        t.unmask(1).unwrap();
        assert_eq!(t.read(1).unwrap(), (message(2, 0x51), false));
        assert_eq!(fake.0.borrow()[7], 0);
        // Reserved control bits are preserved.
        fake.0.borrow_mut()[7] = 0x8000_0000;
        t.mask(1).unwrap();
        assert_eq!(fake.0.borrow()[7], 0x8000_0001);
        assert_eq!(
            t.program(3, message(0, 0x40)),
            Err(MsixError::NoSuchEntry(3))
        );
        // Reprogramming masks first.
        t.unmask(0).unwrap();
        t.program(0, message(1, 0x60)).unwrap();
        assert_eq!(t.read(0).unwrap(), (message(1, 0x60), true));
        t.mask_all();
        assert!((0..3).all(|i| t.read(i).unwrap().1));
    }
}
