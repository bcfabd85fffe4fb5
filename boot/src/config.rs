//! The kernel configuration as the host sees it: ordered `key=value` settings.
//!
//! Keys, values and the rules between them are the `ibconfig` crate's, the same code the
//! kernel parses its ramdisk with: every key and value is checked as it is read or set, and
//! [`Config::check`] applies the rules between keys to the whole, so a configuration is
//! refused on the host with the message the kernel would print, before anything boots.
//! [`crate::ImageBuilder`] writes only configurations that pass. The written form is
//! canonical: one `key=value` per line, no comments, no blank lines, each key once.

use std::fmt;

/// An ordered set of `key=value` settings, each key and value valid.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    entries: Vec<(String, String)>,
}

/// A configuration refused: the kernel's message for it (`config line N: ...` for a line of
/// a text, `key "k": ...` for a single setting, `config: ...` for a rule between keys).
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

/// Checks one setting as the kernel would (a known key, a value it accepts; no control
/// character, which could not survive as one line of the ramdisk).
fn check_setting(key: &str, value: &str) -> Result<(), ConfigError> {
    if value.chars().any(|c| c.is_control() || c == '#') {
        return Err(ConfigError(format!(
            "key {key:?}: bad value {value:?}: contains a control character or `#`"
        )));
    }
    match ibconfig::Config::default().apply(key, value) {
        Ok(()) => Ok(()),
        Err(ibconfig::KeyError::Unknown) => Err(ConfigError(format!("unknown key {key:?}"))),
        Err(ibconfig::KeyError::BadValue(why)) => Err(ConfigError(format!(
            "key {key:?}: bad value {value:?}: {why}"
        ))),
    }
}

impl Config {
    /// An empty configuration.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses configuration text: `key=value` lines, blank lines and `#` comments (whole line
    /// or after a value), every key known and every value valid, no key twice; the rules
    /// between keys are [`Config::check`]'s (a file may be completed by other settings).
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        ibconfig::parse_keys(text)?;
        let mut config = Self::new();
        for entry in ibconfig::entries(text) {
            let e = entry?;
            config
                .entries
                .push((e.key.to_string(), e.value.to_string()));
        }
        Ok(config)
    }

    /// Parses one `key=value` assignment (as given on a command line) and applies it.
    pub fn apply(&mut self, assignment: &str) -> Result<(), ConfigError> {
        let Some((key, value)) = assignment.split_once('=') else {
            return Err(ConfigError(format!(
                "expected key=value, found {assignment:?}"
            )));
        };
        self.set(key.trim(), value.trim())?;
        Ok(())
    }

    /// Sets `key` to `value`, replacing an earlier value in place or appending; `run` (one
    /// line per run of a plan) is always appended.
    pub fn set(&mut self, key: &str, value: &str) -> Result<&mut Self, ConfigError> {
        check_setting(key, value)?;
        match self
            .entries
            .iter_mut()
            .find(|(k, _)| k == key && k != "run")
        {
            Some(entry) => entry.1 = value.to_string(),
            None => self.entries.push((key.to_string(), value.to_string())),
        }
        Ok(self)
    }

    /// Sets `key` only if it is not set yet.
    pub fn set_default(&mut self, key: &str, value: &str) -> Result<&mut Self, ConfigError> {
        if self.get(key).is_none() {
            self.set(key, value)?;
        }
        Ok(self)
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// All settings in order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The exact bytes the kernel receives as its ramdisk: `key=value\n` per setting.
    pub fn to_ramdisk(&self) -> String {
        self.entries
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect()
    }

    /// The whole configuration as the kernel will parse it, rules between keys included;
    /// the error is the message the kernel would print.
    pub fn check(&self) -> Result<ibconfig::Config, ConfigError> {
        Ok(ibconfig::parse(&self.to_ramdisk())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(r: Result<impl fmt::Debug, ConfigError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn parses_and_canonicalises() {
        let text = "# node config\n\n mode = selftest # boot check\n\
                    expect_pci=8086:29c0,1af4:1000\r\nlog=debug\n";
        let config = Config::parse(text).unwrap();
        assert_eq!(config.get("mode"), Some("selftest"));
        assert_eq!(config.get("expect_pci"), Some("8086:29c0,1af4:1000"));
        assert_eq!(
            config.to_ramdisk(),
            "mode=selftest\nexpect_pci=8086:29c0,1af4:1000\nlog=debug\n"
        );
        // The canonical form parses back to the same settings.
        assert_eq!(Config::parse(&config.to_ramdisk()).unwrap(), config);
        assert!(config.check().is_ok());
    }

    #[test]
    fn reports_what_the_kernel_would_with_line_numbers() {
        assert_eq!(
            err(Config::parse("mode=idle\nselftest\n")),
            "config line 2: expected key=value, found \"selftest\""
        );
        assert_eq!(
            err(Config::parse("Mode=idle")),
            "config line 1: unknown key \"Mode\""
        );
        assert_eq!(
            err(Config::parse("mode=idle\n\nfrobnicate=1")),
            "config line 3: unknown key \"frobnicate\""
        );
        assert_eq!(
            err(Config::parse("log=info\nlog=warn")),
            "config line 2: key \"log\" given twice"
        );
        assert_eq!(
            err(Config::parse("iters=0")),
            "config line 1: key \"iters\": bad value \"0\": expected an iteration count 5..=16777216"
        );
        // The exact message the kernel prints for the same text.
        let text = "mode=idle\nrole=clinet\n";
        assert_eq!(
            err(Config::parse(text)),
            ibconfig::parse(text).unwrap_err().to_string()
        );
    }

    #[test]
    fn settings_are_checked_as_they_are_set() {
        let mut config = Config::new();
        assert_eq!(
            err(config.apply("role=clinet")),
            "key \"role\": bad value \"clinet\": expected one of client|server"
        );
        assert_eq!(
            err(config.apply("frobnicate=1")),
            "unknown key \"frobnicate\""
        );
        assert_eq!(err(config.apply("x")), "expected key=value, found \"x\"");
        assert!(config.set("peer_lid", "zz").is_err());
        assert!(config.set("transport", "XY").is_err());
        assert!(config.set("log", "info\nmode=fault").is_err());
        assert!(config.set("log", "info#x").is_err());
        assert_eq!(config, Config::new(), "refused settings change nothing");
    }

    #[test]
    fn rules_between_keys_are_checked_on_the_whole() {
        let mut config = Config::parse("mode=pingpong\ntransport=UD").unwrap();
        assert_eq!(
            err(config.check()),
            "config: mode=pingpong needs role=client|server"
        );
        config.set("role", "client").unwrap();
        config.set("size", "4096").unwrap();
        assert_eq!(
            err(config.check()),
            "config: UD message of 4096 bytes is larger than the path MTU 2048"
        );
        config.set("mtu", "4096").unwrap();
        let checked = config.check().unwrap();
        assert_eq!(checked.bench.sizes, ibconfig::Sizes::Single(4096));
    }

    #[test]
    fn a_plan_keeps_every_run_line() {
        let mut config = Config::parse("role=client\nrun=ib_send_lat -c UD -a\n").unwrap();
        config.apply("run=ib_send_lat -c UC -s 64").unwrap();
        assert_eq!(
            config.to_ramdisk(),
            "role=client\nrun=ib_send_lat -c UD -a\nrun=ib_send_lat -c UC -s 64\n"
        );
        assert_eq!(config.check().unwrap().plan().len(), 2);
        config.apply("run=ib_send_lat -c UD -s 4096").unwrap();
        assert_eq!(
            err(config.check()),
            "config line 4: run 3: UD message of 4096 bytes is larger than the path MTU 2048"
        );
    }

    #[test]
    fn set_replaces_in_place_and_defaults_do_not_override() {
        let mut config = Config::parse("mode=idle\nlog=info").unwrap();
        config.set("mode", "selftest").unwrap();
        config.set_default("log", "trace").unwrap();
        config.set_default("role", "server").unwrap();
        config.apply("peer_lid=2").unwrap();
        assert_eq!(
            config.to_ramdisk(),
            "mode=selftest\nlog=info\nrole=server\npeer_lid=2\n"
        );
        assert!(config.apply("nonsense").is_err());
        assert!(config.apply("a=1\nb=2").is_err());
    }
}
