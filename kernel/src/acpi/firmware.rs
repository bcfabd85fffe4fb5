//! Reading the machine's ACPI tables through the identity map, and the table dump used
//! to capture test data (`acpi_dump=true`).

use super::{PhysRead, TableList};
use crate::mm::{self, Cache};

/// Firmware memory, identity-mapped write-back on demand.
pub struct Firmware;

impl PhysRead for Firmware {
    fn read(&self, phys: u64, buf: &mut [u8]) -> bool {
        if buf.is_empty() {
            return true;
        }
        if mm::map(phys, buf.len() as u64, Cache::WriteBack).is_err() {
            return false;
        }
        for (i, b) in buf.iter_mut().enumerate() {
            // SAFETY: the range was identity-mapped just above; firmware tables are plain
            // memory. Volatile byte reads keep the compiler from assuming anything.
            *b = unsafe { core::ptr::read_volatile((phys as usize + i) as *const u8) };
        }
        true
    }
}

/// Prints `len` bytes at `phys` as `acpi-dump <address> <hex bytes>` lines of 32 bytes.
pub fn dump_range(mem: &dyn PhysRead, phys: u64, len: usize) {
    let mut off = 0;
    while off < len {
        let n = (len - off).min(32);
        let mut line = [0u8; 32];
        if !mem.read(phys + off as u64, &mut line[..n]) {
            crate::println!("acpi-dump {:#x} unreadable", phys + off as u64);
            return;
        }
        crate::console::write_fmt(format_args!("acpi-dump {:x}", phys + off as u64));
        for b in &line[..n] {
            crate::console::write_fmt(format_args!(" {b:02x}"));
        }
        crate::println!();
        off += n;
    }
}

/// Dumps the RSDP, the root table and every table it lists.
pub fn dump_all(mem: &dyn PhysRead, rsdp: u64, root: u64, tables: &TableList) {
    dump_range(mem, rsdp, 36);
    for at in core::iter::once(root).chain(tables.iter().map(|(a, _)| *a)) {
        let mut header = [0u8; 8];
        if mem.read(at, &mut header) {
            let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
            dump_range(mem, at, len.min(64 * 1024));
        }
    }
    // The DSDT (FADT offset 40, or X_DSDT at 140) is not needed by the parser.
}
