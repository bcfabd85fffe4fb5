//! Reading a line's JSON object back (feature `parse`): typed getters over its fields, with
//! errors that name the field.

use alloc::boxed::Box;
use alloc::string::{String, ToString};
use core::fmt;

use serde_json::{Map, Value};

use crate::config::{Completion, Role, Test, Transport};

/// Why a line's object could not be read.
#[derive(Clone, Debug, PartialEq)]
pub enum ParseError {
    /// Not JSON at all (a line cut by the console, garbage after the prefix).
    NotJson(String),
    /// JSON, but not an object.
    NotObject,
    Missing(String),
    /// The field is of another type: `what` says what it should be ("a string").
    NotA {
        key: String,
        what: &'static str,
    },
    /// A field that may not be null is.
    Null(String),
    /// An integer too large for the field.
    OutOfRange(String),
    /// A name the field does not know (a test, transport, role, completion mode).
    Unknown {
        key: String,
        value: String,
    },
    /// The fields disagree with each other.
    Inconsistent(String),
    /// A nested object's field.
    In {
        key: String,
        error: Box<ParseError>,
    },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::NotJson(e) => write!(f, "not JSON: {e}"),
            ParseError::NotObject => f.write_str("not a JSON object"),
            ParseError::Missing(k) => write!(f, "missing \"{k}\""),
            ParseError::NotA { key, what } => write!(f, "\"{key}\" is not {what}"),
            ParseError::Null(k) => write!(f, "\"{k}\" is null"),
            ParseError::OutOfRange(k) => write!(f, "\"{k}\" is out of range"),
            ParseError::Unknown { key, value } => write!(f, "unknown {key} {value:?}"),
            ParseError::Inconsistent(why) => f.write_str(why),
            ParseError::In { key, error } => write!(f, "{key}: {error}"),
        }
    }
}

/// Parses `json` (blanks around it ignored) as an object and hands its fields to `read`.
pub(super) fn with_fields<T>(
    json: &str,
    read: impl FnOnce(&Fields<'_>) -> Result<T, ParseError>,
) -> Result<T, ParseError> {
    let v: Value =
        serde_json::from_str(json.trim()).map_err(|e| ParseError::NotJson(e.to_string()))?;
    let o = v.as_object().ok_or(ParseError::NotObject)?;
    read(&Fields(o))
}

/// The fields of one JSON object.
pub struct Fields<'a>(&'a Map<String, Value>);

fn not_a(key: &str, what: &'static str) -> ParseError {
    ParseError::NotA {
        key: key.to_string(),
        what,
    }
}

fn unknown(key: &str, value: &str) -> ParseError {
    ParseError::Unknown {
        key: key.to_string(),
        value: value.to_string(),
    }
}

impl<'a> Fields<'a> {
    fn get(&self, key: &str) -> Result<&'a Value, ParseError> {
        self.0
            .get(key)
            .ok_or_else(|| ParseError::Missing(key.to_string()))
    }

    /// Whether the field is there (null or not).
    pub fn has(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    pub fn str(&self, key: &str) -> Result<&'a str, ParseError> {
        self.get(key)?
            .as_str()
            .ok_or_else(|| not_a(key, "a string"))
    }

    /// A string or null.
    pub fn opt_str(&self, key: &str) -> Result<Option<&'a str>, ParseError> {
        match self.get(key)? {
            Value::Null => Ok(None),
            v => v.as_str().map(Some).ok_or_else(|| not_a(key, "a string")),
        }
    }

    pub fn bool(&self, key: &str) -> Result<bool, ParseError> {
        self.get(key)?
            .as_bool()
            .ok_or_else(|| not_a(key, "a boolean"))
    }

    /// A non-negative integer or null.
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>, ParseError> {
        match self.get(key)? {
            Value::Null => Ok(None),
            v => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| not_a(key, "a non-negative integer")),
        }
    }

    pub fn u64(&self, key: &str) -> Result<u64, ParseError> {
        self.opt_u64(key)?
            .ok_or_else(|| ParseError::Null(key.to_string()))
    }

    /// A non-negative integer that fits `T`.
    pub fn int<T: TryFrom<u64>>(&self, key: &str) -> Result<T, ParseError> {
        T::try_from(self.u64(key)?).map_err(|_| ParseError::OutOfRange(key.to_string()))
    }

    /// A non-negative integer that fits `T`, or null.
    pub fn opt_int<T: TryFrom<u64>>(&self, key: &str) -> Result<Option<T>, ParseError> {
        self.opt_u64(key)?
            .map(|v| T::try_from(v).map_err(|_| ParseError::OutOfRange(key.to_string())))
            .transpose()
    }

    /// A number or null.
    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>, ParseError> {
        match self.get(key)? {
            Value::Null => Ok(None),
            v => v.as_f64().map(Some).ok_or_else(|| not_a(key, "a number")),
        }
    }

    pub fn f64(&self, key: &str) -> Result<f64, ParseError> {
        self.opt_f64(key)?
            .ok_or_else(|| ParseError::Null(key.to_string()))
    }

    /// A nested object's fields, read by `read`; its errors name the object.
    pub fn object<T>(
        &self,
        key: &str,
        read: impl FnOnce(&Fields<'_>) -> Result<T, ParseError>,
    ) -> Result<T, ParseError> {
        let o = self
            .get(key)?
            .as_object()
            .ok_or_else(|| not_a(key, "an object"))?;
        read(&Fields(o)).map_err(|e| ParseError::In {
            key: key.to_string(),
            error: Box::new(e),
        })
    }

    pub fn test(&self, key: &str) -> Result<Test, ParseError> {
        let s = self.str(key)?;
        Test::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| unknown(key, s))
    }

    pub fn transport(&self, key: &str) -> Result<Transport, ParseError> {
        let s = self.str(key)?;
        Transport::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| unknown(key, s))
    }

    pub fn role(&self, key: &str) -> Result<Role, ParseError> {
        let s = self.str(key)?;
        [Role::Client, Role::Server]
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| unknown(key, s))
    }

    pub fn completion(&self, key: &str) -> Result<Completion, ParseError> {
        let s = self.str(key)?;
        Completion::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| unknown(key, s))
    }

    /// `"<name>_med_us"` and `"<name>_avg_us"`: both numbers, or both null.
    pub fn med_avg(&self, name: &str) -> Result<Option<crate::perftest::MedAvg>, ParseError> {
        let med = self.opt_f64(&alloc::format!("{name}_med_us"))?;
        let avg = self.opt_f64(&alloc::format!("{name}_avg_us"))?;
        match (med, avg) {
            (Some(median), Some(average)) => Ok(Some(crate::perftest::MedAvg { median, average })),
            (None, None) => Ok(None),
            _ => Err(ParseError::Inconsistent(alloc::format!(
                "{name}: median and average not both given"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getters_name_the_field_and_what_is_wrong() {
        let read = |json: &str, f: fn(&Fields<'_>) -> Result<(), ParseError>| {
            with_fields(json, f).unwrap_err().to_string()
        };
        assert!(read("{\"a\":", |_| Ok(())).starts_with("not JSON: "));
        assert_eq!(read("[1]", |_| Ok(())), "not a JSON object");
        assert_eq!(read("{}", |f| f.str("a").map(drop)), "missing \"a\"");
        assert_eq!(
            read("{\"a\":1}", |f| f.str("a").map(drop)),
            "\"a\" is not a string"
        );
        assert_eq!(
            read("{\"a\":-1}", |f| f.u64("a").map(drop)),
            "\"a\" is not a non-negative integer"
        );
        assert_eq!(
            read("{\"a\":1.5}", |f| f.u64("a").map(drop)),
            "\"a\" is not a non-negative integer"
        );
        assert_eq!(
            read("{\"a\":null}", |f| f.f64("a").map(drop)),
            "\"a\" is null"
        );
        assert_eq!(
            read("{\"a\":256}", |f| f.int::<u8>("a").map(drop)),
            "\"a\" is out of range"
        );
        assert_eq!(
            read("{\"test\":\"recv_bw\"}", |f| f.test("test").map(drop)),
            "unknown test \"recv_bw\""
        );
        assert_eq!(
            read("{\"role\":\"both\"}", |f| f.role("role").map(drop)),
            "unknown role \"both\""
        );
        assert_eq!(
            read("{\"o\":{\"x\":true}}", |f| f
                .object("o", |o| o.u64("x").map(drop))),
            "o: \"x\" is not a non-negative integer"
        );
        assert_eq!(
            read("{\"p_med_us\":1,\"p_avg_us\":null}", |f| f
                .med_avg("p")
                .map(drop)),
            "p: median and average not both given"
        );
        // Names are matched exactly as the lines write them.
        assert_eq!(
            read("{\"t\":\"ud\"}", |f| f.transport("t").map(drop)),
            "unknown t \"ud\""
        );
    }
}
