//! The port-counters line a node prints after each run: its port's traffic counters read
//! before and after the run (docs/benchmarks.md, "Port counters").
//!
//! ```text
//! ibkern-port {"test":"send_lat","transport":"UC","role":"client","command":"ib_send_lat -c UC ...",
//! "port":1,"extended":true,"before":{"xmit_data_words":100,...},"after":{...}}
//! ```

use core::fmt::{self, Display, Write};

use super::emit::Object;
#[cfg(feature = "parse")]
use super::{Fields, Parse, ParseError};
use super::{Kind, Record};
use crate::config::{Role, Test, Transport};

/// A port's traffic counters: PortXmitData and PortRcvData (in 4-byte words), PortXmitPkts,
/// PortRcvPkts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCounts {
    pub xmit_data_words: u64,
    pub rcv_data_words: u64,
    pub xmit_pkts: u64,
    pub rcv_pkts: u64,
}

impl PortCounts {
    /// The keys of the line's `before` and `after` objects, in the order of [`Self::values`].
    pub const NAMES: [&'static str; 4] =
        ["xmit_data_words", "rcv_data_words", "xmit_pkts", "rcv_pkts"];

    pub fn values(&self) -> [u64; 4] {
        [
            self.xmit_data_words,
            self.rcv_data_words,
            self.xmit_pkts,
            self.rcv_pkts,
        ]
    }

    pub fn from_values(v: [u64; 4]) -> PortCounts {
        PortCounts {
            xmit_data_words: v[0],
            rcv_data_words: v[1],
            xmit_pkts: v[2],
            rcv_pkts: v[3],
        }
    }
}

impl From<&verbs::PortTraffic> for PortCounts {
    fn from(t: &verbs::PortTraffic) -> Self {
        PortCounts {
            xmit_data_words: t.xmit_data_words,
            rcv_data_words: t.rcv_data_words,
            xmit_pkts: t.xmit_packets,
            rcv_pkts: t.rcv_packets,
        }
    }
}

/// Everything a port line carries; `C` is the run's command line (anything that displays
/// as it on the emitting side, a `String` once parsed).
#[derive(Clone, Debug, PartialEq)]
pub struct PortLine<C = alloc::string::String> {
    pub test: Test,
    pub transport: Transport,
    pub role: Role,
    /// The run as a perftest command line.
    pub command: C,
    pub port: u8,
    /// Both reads came from PortCountersExtended (64-bit) rather than PortCounters (32-bit).
    pub extended: bool,
    pub before: PortCounts,
    pub after: PortCounts,
}

impl<C> PortLine<C> {
    /// The traffic over the run (`after - before`), or `None` if a counter went backwards.
    pub fn traffic(&self) -> Option<PortCounts> {
        let (a, b) = (self.after.values(), self.before.values());
        let mut t = [0; 4];
        for (i, v) in t.iter_mut().enumerate() {
            *v = a[i].checked_sub(b[i])?;
        }
        Some(PortCounts::from_values(t))
    }
}

fn counts<W: Write>(o: &mut Object<'_, W>, key: &str, c: &PortCounts) -> fmt::Result {
    o.object(key, |o| {
        for (name, v) in PortCounts::NAMES.iter().zip(c.values()) {
            o.raw(name, v)?;
        }
        Ok(())
    })
}

#[cfg(feature = "parse")]
fn read_counts(f: &Fields<'_>, key: &str) -> Result<PortCounts, ParseError> {
    f.object(key, |o| {
        let mut v = [0; 4];
        for (slot, name) in v.iter_mut().zip(PortCounts::NAMES) {
            *slot = o.u64(name)?;
        }
        Ok(PortCounts::from_values(v))
    })
}

impl<C: Display> Record for PortLine<C> {
    const KIND: Kind = Kind::Port;

    fn emit_object<W: Write>(&self, out: &mut W) -> fmt::Result {
        let mut o = Object::start(out)?;
        o.str("test", self.test.name())?;
        o.str("transport", self.transport.name())?;
        o.str("role", self.role.name())?;
        o.str("command", &self.command)?;
        o.raw("port", self.port)?;
        o.raw("extended", self.extended)?;
        counts(&mut o, "before", &self.before)?;
        counts(&mut o, "after", &self.after)?;
        o.end()
    }
}

#[cfg(feature = "parse")]
impl Parse for PortLine {
    fn from_fields(f: &Fields<'_>) -> Result<Self, ParseError> {
        let command = f.str("command")?;
        Ok(PortLine {
            test: f.test("test")?,
            transport: f.transport("transport")?,
            role: f.role("role")?,
            command: command.into(),
            port: f.int("port")?,
            extended: f.bool("extended")?,
            before: read_counts(f, "before")?,
            after: read_counts(f, "after")?,
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use alloc::string::{String, ToString};

    pub fn sample() -> PortLine {
        let c = |x: u64| PortCounts {
            xmit_data_words: 100 * x,
            rcv_data_words: 90 * x,
            xmit_pkts: 10 * x,
            rcv_pkts: 9 * x,
        };
        PortLine {
            test: Test::SendLat,
            transport: Transport::Uc,
            role: Role::Client,
            command: "ib_send_lat -c UC -s 64 -n 20".to_string(),
            port: 1,
            extended: true,
            before: c(1),
            after: c(3),
        }
    }

    #[test]
    fn port_line_is_prefixed_json_with_both_reads() {
        let p = sample();
        let mut s = String::new();
        p.emit(&mut s).unwrap();
        assert_eq!(
            s,
            "ibkern-port {\"test\":\"send_lat\",\"transport\":\"UC\",\"role\":\"client\",\"command\":\"ib_send_lat -c UC -s 64 -n 20\",\"port\":1,\"extended\":true,\"before\":{\"xmit_data_words\":100,\"rcv_data_words\":90,\"xmit_pkts\":10,\"rcv_pkts\":9},\"after\":{\"xmit_data_words\":300,\"rcv_data_words\":270,\"xmit_pkts\":30,\"rcv_pkts\":27}}\n"
        );
        assert_eq!(p.traffic().map(|t| t.values()), Some([200, 180, 20, 18]));
        // A counter that went backwards (a reset in between) gives no traffic.
        let back = PortLine {
            after: PortCounts::default(),
            ..p
        };
        assert_eq!(back.traffic(), None);
    }
}
