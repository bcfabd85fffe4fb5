//! The node line: what ran the benchmark, printed once per boot before the first run, so a
//! results file can say where its figures came from even when the console was saved from a
//! screen that broke and padded its lines (the runner joins this object as it joins the
//! result lines).
//!
//! ```text
//! ibkern-node {"version":"0.1.0","commit":"2d2c0fb1a2b3","role":"client","cpu":"QEMU TCG CPU
//! version 2.5+","hypervisor":true,"tsc_hz":2596144000,"tsc_source":"Pit","hca":"00:03.0 15b3:1003",
//! "firmware":"2.42.5000","board":"MT_1090120019","pcie_link":"capable x8 gen3, running x8 gen3",
//! "config":"mode=pingpong role=client ..."}
//! ```

use alloc::string::String;
use core::fmt::{self, Write};

use super::emit::Object;
#[cfg(feature = "parse")]
use super::{Fields, Parse, ParseError};
use super::{Kind, Record};
use crate::config::Role;

/// Everything a node line carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeLine {
    /// The kernel's version and git commit.
    pub version: String,
    pub commit: String,
    pub role: Role,
    /// The CPU's brand string.
    pub cpu: String,
    /// CPUID's hypervisor bit: the kernel runs in a virtual machine.
    pub hypervisor: bool,
    /// The TSC rate and the timer it was calibrated against.
    pub tsc_hz: u64,
    pub tsc_source: String,
    /// The HCA's PCI address and vendor:device ("00:03.0 15b3:1003").
    pub hca: String,
    /// Its firmware version and board id.
    pub firmware: String,
    pub board: String,
    /// Its PCIe link ("capable x8 gen3, running x8 gen3"), if it has a PCIe capability.
    pub pcie_link: Option<String>,
    /// The configuration, as the kernel read it.
    pub config: String,
}

impl NodeLine {
    /// The TSC as the boot log prints it: "2596.144 MHz from Pit".
    pub fn tsc(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "{}.{:03} MHz from {}",
            self.tsc_hz / 1_000_000,
            self.tsc_hz / 1000 % 1000,
            self.tsc_source
        );
        s
    }
}

impl Record for NodeLine {
    const KIND: Kind = Kind::Node;

    fn emit_object<W: Write>(&self, out: &mut W) -> fmt::Result {
        let mut o = Object::start(out)?;
        o.str("version", &self.version)?;
        o.str("commit", &self.commit)?;
        o.str("role", self.role.name())?;
        o.str("cpu", &self.cpu)?;
        o.raw("hypervisor", self.hypervisor)?;
        o.raw("tsc_hz", self.tsc_hz)?;
        o.str("tsc_source", &self.tsc_source)?;
        o.str("hca", &self.hca)?;
        o.str("firmware", &self.firmware)?;
        o.str("board", &self.board)?;
        match &self.pcie_link {
            Some(l) => o.str("pcie_link", l)?,
            None => o.raw("pcie_link", "null")?,
        }
        o.str("config", &self.config)?;
        o.end()
    }
}

#[cfg(feature = "parse")]
impl Parse for NodeLine {
    fn from_fields(f: &Fields<'_>) -> Result<Self, ParseError> {
        let s = |k: &str| f.str(k).map(String::from);
        Ok(NodeLine {
            version: s("version")?,
            commit: s("commit")?,
            role: f.role("role")?,
            cpu: s("cpu")?,
            hypervisor: f.bool("hypervisor")?,
            tsc_hz: f.u64("tsc_hz")?,
            tsc_source: s("tsc_source")?,
            hca: s("hca")?,
            firmware: s("firmware")?,
            board: s("board")?,
            pcie_link: f.opt_str("pcie_link")?.map(String::from),
            config: s("config")?,
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub fn sample() -> NodeLine {
        NodeLine {
            version: "0.1.0".into(),
            commit: "2d2c0fb1a2b3-dirty".into(),
            role: Role::Client,
            cpu: "QEMU TCG CPU version 2.5+".into(),
            hypervisor: true,
            tsc_hz: 2_596_144_500,
            tsc_source: "Pit".into(),
            hca: "00:03.0 15b3:1003".into(),
            firmware: "2.42.5000".into(),
            board: "MT_1090120019".into(),
            pcie_link: Some("capable x8 gen3, running x8 gen3".into()),
            config: "mode=pingpong role=client run=\"ib_send_lat -c UD\"".into(),
        }
    }

    #[test]
    fn node_line_carries_the_node_and_escapes_its_strings() {
        let mut s = String::new();
        sample().emit(&mut s).unwrap();
        assert_eq!(
            s,
            "ibkern-node {\"version\":\"0.1.0\",\"commit\":\"2d2c0fb1a2b3-dirty\",\"role\":\"client\",\"cpu\":\"QEMU TCG CPU version 2.5+\",\"hypervisor\":true,\"tsc_hz\":2596144500,\"tsc_source\":\"Pit\",\"hca\":\"00:03.0 15b3:1003\",\"firmware\":\"2.42.5000\",\"board\":\"MT_1090120019\",\"pcie_link\":\"capable x8 gen3, running x8 gen3\",\"config\":\"mode=pingpong role=client run=\\\"ib_send_lat -c UD\\\"\"}\n"
        );
        assert_eq!(sample().tsc(), "2596.144 MHz from Pit");
        let mut s = String::new();
        NodeLine {
            pcie_link: None,
            ..sample()
        }
        .emit(&mut s)
        .unwrap();
        assert!(s.contains(",\"pcie_link\":null,"), "{s}");
    }
}
