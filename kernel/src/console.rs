//! Serial console on a 16550 UART (COM1 unless the configuration's `console=` names another
//! port) and the `log` backend.
//!
//! Log lines look like `[    1.234567] INFO  pci: message`: seconds since boot from the
//! calibrated TSC (zero before calibration), the level, the module (the crate prefix
//! dropped) and the message. Report lines (PCI inventory, selftest verdicts) are printed
//! with [`println!`](crate::println) without a prefix so tests can match them exactly.

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicU16, Ordering};
use ibconfig::Console as Port;
use spin::Mutex;
use uart_16550::backend::PioBackend;
use uart_16550::{Config, Uart16550, Uart16550Tty};

static SERIAL: Mutex<Option<Uart16550Tty<PioBackend>>> = Mutex::new(None);

/// The I/O base of the UART [`init`] opened (0: none yet).
static BASE: AtomicU16 = AtomicU16::new(0);

/// Initialises the UART of `port` (115200 8N1). Without a UART there (some servers) output
/// is dropped.
pub fn init(port: Port) {
    let base = port.io_port();
    // SAFETY: the port's eight I/O addresses belong to this driver alone for the kernel's
    // lifetime (the kernel opens one console).
    let tty = unsafe { Uart16550Tty::new_port(base, Config::default()) }.ok();
    BASE.store(if tty.is_some() { base } else { 0 }, Ordering::Relaxed);
    *SERIAL.lock() = tty;
}

/// Bytes of the console kept from the boot on ([`take_boot_record`]).
const RECORD_LEN: usize = 32 << 10;

/// The console's first [`RECORD_LEN`] bytes, until taken: what a results file needs to say
/// where its figures came from (the boot banner, CPU, TSC, HCA and firmware lines).
struct Record {
    buf: [u8; RECORD_LEN],
    len: usize,
    on: bool,
}

impl Write for Record {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.on {
            let n = s.len().min(RECORD_LEN - self.len);
            self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
            self.len += n;
        }
        Ok(())
    }
}

static RECORD: Mutex<Record> = Mutex::new(Record {
    buf: [0; RECORD_LEN],
    len: 0,
    on: true,
});

/// Writes formatted text (interrupts are held off so a handler cannot deadlock on the lock).
pub fn write_fmt(args: fmt::Arguments<'_>) {
    x86_64::instructions::interrupts::without_interrupts(|| {
        if let Some(tty) = SERIAL.lock().as_mut() {
            let _ = tty.write_fmt(args);
        }
        let _ = RECORD.lock().write_fmt(args);
    });
}

/// What the console printed from the boot on (its first 32 KiB), once: recording stops
/// here, so a transcript that starts with it and goes on from here repeats nothing.
pub fn take_boot_record() -> alloc::string::String {
    x86_64::instructions::interrupts::without_interrupts(|| {
        let mut r = RECORD.lock();
        r.on = false;
        let text = alloc::string::String::from_utf8_lossy(&r.buf[..r.len]).into_owned();
        r.len = 0;
        text
    })
}

/// Writes from a context that may have interrupted a writer holding the lock (panic and
/// exception reports): takes the lock if free, else talks to the already initialised UART
/// directly.
pub fn emergency_write(args: fmt::Arguments<'_>) {
    if let Some(mut guard) = SERIAL.try_lock() {
        if let Some(tty) = guard.as_mut() {
            let _ = tty.write_fmt(args);
        }
        return;
    }
    let base = BASE.load(Ordering::Relaxed);
    if base == 0 {
        return;
    }
    // SAFETY: the UART at `base` was initialised by `init`; the lock holder is suspended
    // beneath us and we never return to it (reports end in `exit`), so at worst a line is
    // interleaved.
    if let Ok(raw) = unsafe { Uart16550::new_port(base) } {
        let _ = Uart16550Tty::from_inner(raw).write_fmt(args);
    }
}

/// Prints a line without a log prefix.
#[macro_export]
macro_rules! println {
    () => { $crate::console::write_fmt(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::console::write_fmt(format_args!("{}\n", format_args!($($arg)*))) };
}

/// An adapter so `fmt::Write` users (e.g. `Function::describe`) can print to the console.
pub struct Console;

impl Write for Console {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        write_fmt(format_args!("{s}"));
        Ok(())
    }
}

struct Logger;

static LOGGER: Logger = Logger;

/// Formats the timestamp prefix of a log line.
pub struct Timestamp(pub u64);

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{:5}.{:06}]",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000 / 1000
        )
    }
}

/// The module shown in a log line: the target without the `kernel::` prefix.
pub fn short_target(target: &str) -> &str {
    target.strip_prefix("kernel::").unwrap_or(target)
}

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            write_fmt(format_args!(
                "{} {:<5} {}: {}\n",
                Timestamp(crate::arch::tsc::now_ns()),
                record.level(),
                short_target(record.target()),
                record.args()
            ));
        }
    }

    fn flush(&self) {}
}

/// Installs the logger at `level`.
pub fn init_logger(level: log::LevelFilter) {
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    #[test]
    fn timestamp_and_target() {
        assert_eq!(format!("{}", Timestamp(1_234_567_890)), "[    1.234567]");
        assert_eq!(format!("{}", Timestamp(0)), "[    0.000000]");
        assert_eq!(
            format!("{}", Timestamp(123_456_000_999_999)),
            "[123456.000999]"
        );
        assert_eq!(short_target("kernel::pci"), "pci");
        assert_eq!(short_target("mlx4::cmd"), "mlx4::cmd");
    }
}
