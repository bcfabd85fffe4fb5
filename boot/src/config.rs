//! The kernel configuration as the host writes it: an [`ibconfig::Config`], the typed
//! value the kernel parses its ramdisk into, written as its text ([`ramdisk`]).
//!
//! The text is the configuration's own emitter's (`ibconfig`'s `Display`, the inverse of
//! its parser): `mode`, one `key=value` per line for each key that differs from its
//! default, then one `run=` line per run of a plan. [`ramdisk`] checks it as the kernel will (the rules
//! between keys, with the kernel's message) and that it reads back as the same
//! configuration; [`crate::ImageBuilder`] writes only configurations that pass.

use std::fmt;

pub use ibconfig::Config;

/// A configuration refused: the kernel's message for it (`config line N: ...` for a line
/// of a text, `config: ...` for a rule between keys).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl From<ibconfig::ConfigError<'_>> for ConfigError {
    fn from(e: ibconfig::ConfigError<'_>) -> Self {
        ConfigError(e.to_string())
    }
}

/// Parses configuration text a person wrote (`key=value` lines, `#` comments, blank
/// lines): every key known and every value valid, no key twice. The rules between keys
/// are [`ramdisk`]'s (a file may be completed by other settings).
pub fn config_text(text: &str) -> Result<Config, ConfigError> {
    Ok(ibconfig::parse_keys(text)?)
}

/// The exact bytes the kernel receives as its ramdisk: `config`'s text, after checking it
/// as the kernel will (the error is the message the kernel would print for this text) and
/// that it reads back as `config` (a field set directly to a value its key cannot write
/// would not).
pub fn ramdisk(config: &Config) -> Result<String, ConfigError> {
    let text = config.to_string();
    let back = ibconfig::parse(&text)?;
    if back != *config {
        return Err(ConfigError(format!(
            "the configuration does not read back from its text ({}): {config:?}",
            text.trim_end().replace('\n', " ")
        )));
    }
    Ok(text)
}

/// The configuration on one line (`key=value ...`), as the runner prints it.
pub fn one_line(config: &Config) -> String {
    config.to_string().trim_end().replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(r: Result<impl fmt::Debug, ConfigError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn a_file_is_read_and_written_canonically() {
        let text = "# node config\n\n mode = pingpong # boot check\n\
                    expect_pci=8086:29c0,1af4:1000\r\nrole=client\nlog=info\n";
        let config = config_text(text).unwrap();
        assert_eq!(
            ramdisk(&config).unwrap(),
            "mode=pingpong\nexpect_pci=8086:29c0,1af4:1000\nrole=client\n",
            "table order, comments and the default log=info dropped"
        );
        assert_eq!(config_text(&ramdisk(&config).unwrap()).unwrap(), config);
        assert_eq!(
            one_line(&config),
            "mode=pingpong expect_pci=8086:29c0,1af4:1000 role=client"
        );
        assert_eq!(one_line(&Config::default()), "mode=selftest");
    }

    #[test]
    fn refusals_are_the_kernels_messages() {
        assert_eq!(
            err(config_text("mode=idle\nselftest\n")),
            "config line 2: expected key=value, found \"selftest\""
        );
        assert_eq!(
            err(config_text("log=info\nlog=warn")),
            "config line 2: key \"log\" given twice"
        );
        let text = "mode=idle\nrole=clinet\n";
        assert_eq!(
            err(config_text(text)),
            ibconfig::parse(text).unwrap_err().to_string()
        );
        // The rules between keys are checked on the whole, with the line numbers of the
        // text the kernel gets.
        let mut config = config_text("mode=pingpong\ntransport=UD").unwrap();
        assert_eq!(
            err(ramdisk(&config)),
            "config: mode=pingpong needs role=client|server"
        );
        config.set_role(ibconfig::Role::Client);
        config.bench.sizes = ibconfig::Sizes::Single(4096);
        assert_eq!(
            err(ramdisk(&config)),
            "config: UD message of 4096 bytes is larger than the path MTU 2048"
        );
        config.bench.sizes = ibconfig::Sizes::Single(64);
        config
            .push_run(ibconfig::Run::parse("ib_send_lat -c UD -s 4096").unwrap())
            .unwrap();
        assert_eq!(
            err(ramdisk(&config)),
            "config line 4: run 1: UD message of 4096 bytes is larger than the path MTU 2048"
        );
    }

    #[test]
    fn a_value_its_key_cannot_write_is_refused() {
        let mut config = Config::default();
        config.bench.wait_timeout_ns = 1_500_000;
        let e = err(ramdisk(&config));
        assert!(
            e.starts_with(
                "the configuration does not read back from its text (mode=selftest timeout_ms=1)"
            ),
            "{e}"
        );
    }
}
