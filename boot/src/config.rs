//! The kernel configuration as the host sees it: ordered `key=value` settings.
//!
//! The kernel is the authority on which keys and values are valid (unknown keys are reported
//! by the kernel itself, at boot). The host only checks the syntax, so that a typo in a file is
//! reported with its line number before anything boots, and writes a canonical form: one
//! `key=value` per line, no comments, no blank lines, each key once.

use std::fmt;

/// An ordered set of `key=value` settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    entries: Vec<(String, String)>,
}

/// A syntax error in a configuration text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// A line that is neither blank, a `#` comment, nor `key=value`.
    MissingEquals { line: usize, text: String },
    /// A key that is empty or contains characters other than `a-z`, `0-9` and `_`.
    BadKey { line: usize, key: String },
    /// A value containing a control character or `#` (neither survives the kernel's parser).
    BadValue { line: usize, key: String },
    /// The same key given twice.
    Duplicate { line: usize, key: String },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingEquals { line, text } => {
                write!(f, "line {line}: expected `key=value`, found `{text}`")
            }
            Self::BadKey { line, key } => write!(
                f,
                "line {line}: bad key `{key}` (keys use only lowercase letters, digits and `_`)"
            ),
            Self::BadValue { line, key } => {
                write!(
                    f,
                    "line {line}: value of `{key}` contains a control character"
                )
            }
            Self::Duplicate { line, key } => write!(f, "line {line}: key `{key}` given twice"),
        }
    }
}

impl std::error::Error for ConfigError {}

fn key_is_valid(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn value_is_valid(value: &str) -> bool {
    !value.chars().any(|c| c.is_control() || c == '#')
}

impl Config {
    /// An empty configuration.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses configuration text: `key=value` lines, blank lines and `#` comments (whole line
    /// or after a value). Whitespace around keys and values is dropped; a value may contain
    /// `=` but not `#`.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let mut config = Self::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            // `#` starts a comment, on its own line or after a value (as the kernel reads it).
            let without_comment = raw.split_once('#').map_or(raw, |(before, _)| before);
            let trimmed = without_comment.trim();
            if trimmed.is_empty() {
                continue;
            }
            let Some((key, value)) = trimmed.split_once('=') else {
                return Err(ConfigError::MissingEquals {
                    line,
                    text: trimmed.to_string(),
                });
            };
            let (key, value) = (key.trim(), value.trim());
            if !key_is_valid(key) {
                return Err(ConfigError::BadKey {
                    line,
                    key: key.to_string(),
                });
            }
            if !value_is_valid(value) {
                return Err(ConfigError::BadValue {
                    line,
                    key: key.to_string(),
                });
            }
            if config.get(key).is_some() {
                return Err(ConfigError::Duplicate {
                    line,
                    key: key.to_string(),
                });
            }
            config.entries.push((key.to_string(), value.to_string()));
        }
        Ok(config)
    }

    /// Parses one `key=value` assignment (as given on a command line) and applies it.
    pub fn apply(&mut self, assignment: &str) -> Result<(), ConfigError> {
        let parsed = Self::parse(assignment)?;
        if parsed.entries.len() != 1 {
            return Err(ConfigError::MissingEquals {
                line: 1,
                text: assignment.to_string(),
            });
        }
        for (key, value) in parsed.entries {
            self.set(&key, &value)?;
        }
        Ok(())
    }

    /// Sets `key` to `value`, replacing an earlier value in place or appending.
    pub fn set(&mut self, key: &str, value: &str) -> Result<&mut Self, ConfigError> {
        if !key_is_valid(key) {
            return Err(ConfigError::BadKey {
                line: 0,
                key: key.to_string(),
            });
        }
        if !value_is_valid(value) {
            return Err(ConfigError::BadValue {
                line: 0,
                key: key.to_string(),
            });
        }
        match self.entries.iter_mut().find(|(k, _)| k == key) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_canonicalises() {
        let text = "# node config\n\n mode = selftest # boot check\n\
                    expect_pci=8086:29c0,1af4:1000\r\nx=a=b\n";
        let config = Config::parse(text).unwrap();
        assert_eq!(config.get("mode"), Some("selftest"));
        assert_eq!(config.get("expect_pci"), Some("8086:29c0,1af4:1000"));
        assert_eq!(config.get("x"), Some("a=b"));
        assert_eq!(
            config.to_ramdisk(),
            "mode=selftest\nexpect_pci=8086:29c0,1af4:1000\nx=a=b\n"
        );
        // The canonical form parses back to the same settings.
        assert_eq!(Config::parse(&config.to_ramdisk()).unwrap(), config);
    }

    #[test]
    fn reports_syntax_errors_with_line_numbers() {
        assert_eq!(
            Config::parse("mode=idle\nselftest\n"),
            Err(ConfigError::MissingEquals {
                line: 2,
                text: "selftest".into()
            })
        );
        assert_eq!(
            Config::parse("Mode=idle"),
            Err(ConfigError::BadKey {
                line: 1,
                key: "Mode".into()
            })
        );
        assert_eq!(
            Config::parse("=1"),
            Err(ConfigError::BadKey {
                line: 1,
                key: "".into()
            })
        );
        assert_eq!(
            Config::parse("a=1\na=2"),
            Err(ConfigError::Duplicate {
                line: 2,
                key: "a".into()
            })
        );
        assert_eq!(
            Config::parse("a=x\u{7}y"),
            Err(ConfigError::BadValue {
                line: 1,
                key: "a".into()
            })
        );
        let message = Config::parse("a b").unwrap_err().to_string();
        assert_eq!(message, "line 1: expected `key=value`, found `a b`");
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
        assert!(config.set("Bad", "1").is_err());
        assert!(config.set("a", "x#y").is_err());
    }
}
