//! Boot configuration: `key=value` lines delivered as the bootloader ramdisk.
//!
//! The vocabulary (every key, its values and the rules between keys) and the parser are
//! the `ibconfig` crate's, shared with the bench and with the host tools, which check every
//! configuration before anything boots (docs/kernel.md). The kernel still parses and checks
//! its ramdisk itself: a hand-edited ramdisk on a PXE server has been through no host tool.

pub use ibconfig::{
    console_of, parse, parse_bytes, Config, ConfigError, Console, FaultKind, HcaIrq, LogLevel,
    Mode, OnExit, PciId, Role,
};

/// The `log::LevelFilter` of a `log=` level.
pub fn log_filter(level: LogLevel) -> log::LevelFilter {
    match level {
        LogLevel::Error => log::LevelFilter::Error,
        LogLevel::Warn => log::LevelFilter::Warn,
        LogLevel::Info => log::LevelFilter::Info,
        LogLevel::Debug => log::LevelFilter::Debug,
        LogLevel::Trace => log::LevelFilter::Trace,
    }
}

/// The ramdisk's settings on one line (`key=value` pairs, comments and blanks dropped) for the
/// boot log, so every console says which configuration ran.
pub struct Settings<'a>(pub &'a [u8]);

impl core::fmt::Display for Settings<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let text = core::str::from_utf8(self.0).unwrap_or("");
        let mut first = true;
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("").trim();
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            if !first {
                f.write_str(" ")?;
            }
            write!(f, "{}={}", k.trim(), v.trim())?;
            first = false;
        }
        if first {
            f.write_str("(none: the defaults)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_logged_one_line() {
        use std::string::ToString;
        let s = Settings(b"# node\nmode=pingpong\n  role = client # first\n\n").to_string();
        assert_eq!(s, "mode=pingpong role=client");
        assert_eq!(Settings(b"").to_string(), "(none: the defaults)");
    }

    #[test]
    fn log_levels_map_onto_filters_in_order() {
        let levels = [
            LogLevel::Error,
            LogLevel::Warn,
            LogLevel::Info,
            LogLevel::Debug,
            LogLevel::Trace,
        ];
        let filters = levels.map(log_filter);
        assert_eq!(
            filters,
            [
                log::LevelFilter::Error,
                log::LevelFilter::Warn,
                log::LevelFilter::Info,
                log::LevelFilter::Debug,
                log::LevelFilter::Trace
            ]
        );
        assert!(filters.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn the_ramdisk_is_parsed_by_the_shared_crate() {
        let c = parse_bytes(Some(b"mode=pingpong\nrole=client\nlog=debug\n")).unwrap();
        assert_eq!((c.mode, c.role), (Mode::Pingpong, Some(Role::Client)));
        assert_eq!(log_filter(c.log), log::LevelFilter::Debug);
        assert!(parse("mode=pingpong").is_err(), "needs a role");
    }
}
