//! The InfiniBand packet headers the driver writes itself: QP0's MLX sends carry their own
//! LRH, BTH and DETH (IBA vol. 1 7.7, 9.2, 9.3.3; docs/hardware.md §6), as typed big-endian
//! views with their offsets asserted. The model keeps its own definitions (sim/src/smp.rs,
//! `ud`); layouts.rs compares the two.

use core::mem::{offset_of, size_of};

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::be::{Be16, Be32};

/// Local route header (IBA 7.7), 8 bytes.
#[repr(C)]
#[derive(Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct Lrh {
    /// VL 7:4, LVer 3:0.
    pub vl_lver: u8,
    /// SL 7:4, LNH 1:0.
    pub sl_lnh: u8,
    pub dlid: Be16,
    /// PktLen 10:0: 4-byte words from the LRH through the ICRC.
    pub pkt_len: Be16,
    pub slid: Be16,
}

/// LRH link next header: IBA local (a BTH follows, no GRH).
pub const LNH_IBA_LOCAL: u8 = 2;

impl Lrh {
    /// An LRH of link version 0.
    pub fn new(vl: u8, sl: u8, lnh: u8, dlid: u16, pkt_len: u16, slid: u16) -> Lrh {
        Lrh {
            vl_lver: vl << 4,
            sl_lnh: (sl << 4) | (lnh & 3),
            dlid: Be16::new(dlid),
            pkt_len: Be16::new(pkt_len & 0x7FF),
            slid: Be16::new(slid),
        }
    }
    pub fn sl(&self) -> u8 {
        self.sl_lnh >> 4
    }
}

/// The fields the driver only writes, read back where the layouts are compared.
#[cfg(test)]
impl Lrh {
    pub fn vl(&self) -> u8 {
        self.vl_lver >> 4
    }
    pub fn lver(&self) -> u8 {
        self.vl_lver & 0xF
    }
    pub fn lnh(&self) -> u8 {
        self.sl_lnh & 3
    }
    pub fn pkt_len(&self) -> u16 {
        self.pkt_len.get() & 0x7FF
    }
}

/// Base transport header (IBA 9.2), 12 bytes.
#[repr(C)]
#[derive(Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct Bth {
    pub opcode: u8,
    /// SE 7, MigReq 6, PadCnt 5:4, TVer 3:0.
    pub flags: u8,
    pub pkey: Be16,
    /// DestQP 23:0.
    pub dest_qp: Be32,
    /// AckReq 31, PSN 23:0.
    pub psn: Be32,
}

/// BTH opcode of a UD SEND Only (IBA 9.2, table 35).
pub const BTH_UD_SEND_ONLY: u8 = 0x64;

impl Bth {
    /// A BTH of transport version 0, SE and MigReq clear.
    pub fn new(opcode: u8, pad: u8, pkey: u16, dest_qp: u32, psn: u32) -> Bth {
        Bth {
            opcode,
            flags: (pad & 3) << 4,
            pkey: Be16::new(pkey),
            dest_qp: Be32::new(dest_qp & 0xFF_FFFF),
            psn: Be32::new(psn & 0xFF_FFFF),
        }
    }
}

#[cfg(test)]
impl Bth {
    pub fn se(&self) -> bool {
        self.flags & 0x80 != 0
    }
    pub fn pad(&self) -> u8 {
        (self.flags >> 4) & 3
    }
    pub fn tver(&self) -> u8 {
        self.flags & 0xF
    }
    pub fn dest_qp(&self) -> u32 {
        self.dest_qp.get() & 0xFF_FFFF
    }
    pub fn psn(&self) -> u32 {
        self.psn.get() & 0xFF_FFFF
    }
}

/// Datagram extended transport header (IBA 9.3.3), 8 bytes.
#[repr(C)]
#[derive(Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct Deth {
    pub qkey: Be32,
    /// SrcQP 23:0.
    pub src_qp: Be32,
}

impl Deth {
    pub fn new(qkey: u32, src_qp: u32) -> Deth {
        Deth {
            qkey: Be32::new(qkey),
            src_qp: Be32::new(src_qp & 0xFF_FFFF),
        }
    }
}

#[cfg(test)]
impl Deth {
    pub fn src_qp(&self) -> u32 {
        self.src_qp.get() & 0xFF_FFFF
    }
}

/// The headers of a UD packet without a GRH, in wire order: LRH, BTH, DETH (28 bytes).
#[repr(C)]
#[derive(Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct UdHeaders {
    pub lrh: Lrh,
    pub bth: Bth,
    pub deth: Deth,
}

const _: () = {
    assert!(size_of::<Lrh>() == 8);
    assert!(offset_of!(Lrh, sl_lnh) == 1);
    assert!(offset_of!(Lrh, dlid) == 2);
    assert!(offset_of!(Lrh, pkt_len) == 4);
    assert!(offset_of!(Lrh, slid) == 6);
    assert!(size_of::<Bth>() == 12);
    assert!(offset_of!(Bth, flags) == 1);
    assert!(offset_of!(Bth, pkey) == 2);
    assert!(offset_of!(Bth, dest_qp) == 4);
    assert!(offset_of!(Bth, psn) == 8);
    assert!(size_of::<Deth>() == 8);
    assert!(offset_of!(Deth, src_qp) == 4);
    assert!(size_of::<UdHeaders>() == 28);
    assert!(offset_of!(UdHeaders, bth) == 8);
    assert!(offset_of!(UdHeaders, deth) == 20);
};
