//! Writing a line's JSON object field by field, without allocating.

use core::fmt::{self, Display, Write};

/// Writes the fields of one JSON object: `{`, then `"key":value` pairs separated by commas,
/// then `}` from [`Object::end`].
pub struct Object<'w, W: Write> {
    out: &'w mut W,
    first: bool,
}

impl<'w, W: Write> Object<'w, W> {
    pub fn start(out: &'w mut W) -> Result<Self, fmt::Error> {
        out.write_char('{')?;
        Ok(Object { out, first: true })
    }

    fn key(&mut self, key: impl Display) -> fmt::Result {
        if !self.first {
            self.out.write_char(',')?;
        }
        self.first = false;
        write!(self.out, "\"{key}\":")
    }

    /// A string, escaped as JSON needs.
    pub fn str(&mut self, key: impl Display, v: impl Display) -> fmt::Result {
        self.key(key)?;
        self.out.write_char('"')?;
        write!(Escaped(self.out), "{v}")?;
        self.out.write_char('"')
    }

    /// An integer, a bool, or anything whose `Display` is its JSON form.
    pub fn raw(&mut self, key: impl Display, v: impl Display) -> fmt::Result {
        self.key(key)?;
        write!(self.out, "{v}")
    }

    /// An integer or `null`.
    pub fn opt(&mut self, key: impl Display, v: Option<u64>) -> fmt::Result {
        match v {
            Some(n) => self.raw(key, n),
            None => self.raw(key, "null"),
        }
    }

    /// A number with `decimals` decimals, or `null` when `None` or not finite.
    pub fn fixed(&mut self, key: impl Display, v: Option<f64>, decimals: usize) -> fmt::Result {
        self.key(key)?;
        match v {
            Some(x) if x.is_finite() => write!(self.out, "{x:.decimals$}"),
            _ => self.out.write_str("null"),
        }
    }

    /// A nested object, its fields written by `f`.
    pub fn object(
        &mut self,
        key: impl Display,
        f: impl FnOnce(&mut Object<'_, W>) -> fmt::Result,
    ) -> fmt::Result {
        self.key(key)?;
        let mut inner = Object::start(self.out)?;
        f(&mut inner)?;
        inner.end()
    }

    pub fn end(self) -> fmt::Result {
        self.out.write_char('}')
    }
}

/// A writer that escapes what goes through it as the inside of a JSON string.
struct Escaped<'w, W: Write>(&'w mut W);

impl<W: Write> Write for Escaped<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            match c {
                '"' => self.0.write_str("\\\"")?,
                '\\' => self.0.write_str("\\\\")?,
                '\n' => self.0.write_str("\\n")?,
                '\r' => self.0.write_str("\\r")?,
                '\t' => self.0.write_str("\\t")?,
                c if (c as u32) < 0x20 => write!(self.0, "\\u{:04x}", c as u32)?,
                c => self.0.write_char(c)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;

    #[test]
    fn fields_are_separated_escaped_and_rounded() {
        let mut s = String::new();
        let mut o = Object::start(&mut s).unwrap();
        o.str("a", "x \"y\" \\ \n\u{1}").unwrap();
        o.raw("b", 7).unwrap();
        o.fixed("c", Some(1.23456), 3).unwrap();
        o.fixed("d", Some(f64::NAN), 3).unwrap();
        o.opt("e", None).unwrap();
        o.object("f", |i| i.raw("g", true)).unwrap();
        o.end().unwrap();
        assert_eq!(
            s,
            r#"{"a":"x \"y\" \\ \n\u0001","b":7,"c":1.235,"d":null,"e":null,"f":{"g":true}}"#
        );
    }
}
