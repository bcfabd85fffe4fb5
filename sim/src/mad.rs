//! Management datagrams (IBA vol. 1 13.4): the common MAD header every management class
//! shares, the directed-route SMP fields (IBA 14.2.1.2), the method and status codes, and the
//! response rule. One typed view serves the firmware's agents behind MAD_IFC (`cmd::port`,
//! `pma`), the firmware SMA answering SMPs on the link (`smp`) and the checks of MADs the
//! driver sends through QP0 and QP1 (`smp`, `gsi`).
//!
//! These definitions are the model's own, written from the IBA specification (cross-checked
//! against Linux's include/rdma/ib_mad.h and ib_smi.h); the driver keeps independent ones.

use crate::be::Field;

/// A MAD is 256 bytes (IBA vol. 1 13.4).
pub const MAD_BYTES: usize = 256;

/// Common MAD header fields (IBA 13.4.2), relative to the MAD.
pub mod hdr {
    use crate::be::Field;

    pub const BASE_VERSION: Field = Field::whole(0x00, 1);
    pub const MGMT_CLASS: Field = Field::whole(0x01, 1);
    pub const CLASS_VERSION: Field = Field::whole(0x02, 1);
    /// Method, with the response bit 7.
    pub const METHOD: Field = Field::whole(0x03, 1);
    pub const STATUS: Field = Field::whole(0x04, 2);
    pub const TID: Field = Field::whole(0x08, 8);
    pub const ATTR_ID: Field = Field::whole(0x10, 2);
    pub const ATTR_MOD: Field = Field::whole(0x14, 4);
    /// End of the header fields the model reads.
    pub const LEN: usize = 0x18;
}

/// Directed-route SMP fields (IBA 14.2.1.2), relative to the MAD.
pub mod dr {
    use crate::be::Field;

    /// The status word's bit 15 is the direction bit D (1 = returning).
    pub const D: Field = Field::bit(0x04, 2, 15);
    pub const HOP_PTR: Field = Field::whole(0x06, 1);
    pub const HOP_CNT: Field = Field::whole(0x07, 1);
    pub const DR_SLID: Field = Field::whole(0x20, 2);
    pub const DR_DLID: Field = Field::whole(0x22, 2);
    /// The 64-byte initial and return paths (one port number per hop).
    pub const INITIAL_PATH: usize = 0x80;
    pub const RETURN_PATH: usize = 0xc0;
}

/// Where the attribute data starts, in SMPs (IBA 14.2.1.1, 14.2.1.2) and in PerfMgt MADs
/// (after 40 reserved bytes, IBA 16.1.1).
pub const DATA: usize = 0x40;
/// SMP data: 64 bytes.
pub const SMP_DATA_LEN: usize = 64;
/// PerfMgt data: the rest of the MAD, 192 bytes.
pub const GS_DATA_LEN: usize = MAD_BYTES - DATA;
pub const SMP_DATA: core::ops::Range<usize> = DATA..DATA + SMP_DATA_LEN;
pub const GS_DATA: core::ops::Range<usize> = DATA..MAD_BYTES;

/// The base and class version of every class the model handles.
pub const VERSION: u8 = 1;

/// Management classes (IBA 13.4.4).
pub mod class {
    /// LID-routed and directed-route subnet management.
    pub const SUBN_LID: u8 = 0x01;
    pub const SUBN_DR: u8 = 0x81;
    /// Performance management (IBA 16.1).
    pub const PERF_MGMT: u8 = 0x04;
}

/// Methods (IBA 13.4.5).
pub mod method {
    pub const GET: u8 = 0x01;
    pub const SET: u8 = 0x02;
    pub const GET_RESP: u8 = 0x81;
}

/// MAD status values (IBA 13.4.7, table 118).
pub mod status {
    pub const BAD_VERSION: u16 = 0x0004;
    pub const UNSUP_METHOD_ATTR: u16 = 0x000c;
    pub const INVALID_ATTR_VALUE: u16 = 0x001c;
}

/// The common header of one MAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MadHeader {
    pub base_version: u8,
    pub mgmt_class: u8,
    pub class_version: u8,
    pub method: u8,
    pub status: u16,
    pub attr_id: u16,
    pub attr_mod: u32,
}

/// Why an agent does not take a MAD as a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// Base version other than 1: the MAD is not understood at all.
    BaseVersion(u8),
    /// A class the agent does not serve, or a class version other than 1.
    ClassVersion,
    /// Neither Get nor Set.
    Method,
}

impl MadHeader {
    pub fn parse(mad: &[u8]) -> MadHeader {
        let g = |f: Field| f.get(mad);
        MadHeader {
            base_version: g(hdr::BASE_VERSION) as u8,
            mgmt_class: g(hdr::MGMT_CLASS) as u8,
            class_version: g(hdr::CLASS_VERSION) as u8,
            method: g(hdr::METHOD) as u8,
            status: g(hdr::STATUS) as u16,
            attr_id: g(hdr::ATTR_ID) as u16,
            attr_mod: g(hdr::ATTR_MOD) as u32,
        }
    }

    /// Whether this is a Get or Set request of one of `classes` in version 1: the checks
    /// every agent of the model makes before it looks at the attribute.
    pub fn check_request(&self, classes: &[u8]) -> Result<(), Reject> {
        if self.base_version != VERSION {
            return Err(Reject::BaseVersion(self.base_version));
        }
        if !classes.contains(&self.mgmt_class) || self.class_version != VERSION {
            return Err(Reject::ClassVersion);
        }
        if !matches!(self.method, method::GET | method::SET) {
            return Err(Reject::Method);
        }
        Ok(())
    }

    pub fn is_set(&self) -> bool {
        self.method == method::SET
    }

    pub fn is_dr(&self) -> bool {
        self.mgmt_class == class::SUBN_DR
    }
}

/// Turn the request `mad` into its GetResp with `status`; a directed-route SMP's response
/// travels back, so its D bit is set (IBA 14.2.2).
pub fn make_response(mad: &mut [u8], status: u16) {
    let dr = MadHeader::parse(mad).is_dr();
    hdr::METHOD.set(mad, method::GET_RESP.into());
    hdr::STATUS.set(mad, status.into());
    dr::D.set_bool(mad, dr);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_response() {
        let mut m = [0u8; MAD_BYTES];
        m[..4].copy_from_slice(&[1, class::SUBN_DR, 1, method::SET]);
        hdr::ATTR_ID.set(&mut m, 0x15);
        hdr::ATTR_MOD.set(&mut m, 0x8000_0001);
        let h = MadHeader::parse(&m);
        assert_eq!(h.attr_id, 0x15);
        assert_eq!(h.attr_mod, 0x8000_0001);
        assert!(h.is_set() && h.is_dr());
        assert_eq!(h.check_request(&[class::SUBN_LID, class::SUBN_DR]), Ok(()));
        assert_eq!(
            h.check_request(&[class::PERF_MGMT]),
            Err(Reject::ClassVersion)
        );
        make_response(&mut m, status::INVALID_ATTR_VALUE);
        assert_eq!(m[3], 0x81);
        assert_eq!(u16::from_be_bytes([m[4], m[5]]), 0x801c, "D bit | status");
        m[0] = 2;
        assert_eq!(
            MadHeader::parse(&m).check_request(&[class::SUBN_DR]),
            Err(Reject::BaseVersion(2))
        );
    }
}
