//! Send and receive WQE segments (§5.2): field definitions and a parsed form (`parse`/`emit`)
//! of each segment the model reads. These are the model's own definitions, written from
//! docs/hardware.md independently of the driver's (`drivers/mlx4/src/layouts.rs` compares
//! the two by emitting on one side and parsing on the other).
//!
//! Offsets are relative to the segment's first byte.

/// Control segment (16 bytes), first in every send WQE.
pub mod ctrl {
    use crate::be::Field;

    pub const SIZE: usize = 16;
    pub const OWNER: Field = Field::bit(0x00, 4, 31);
    /// WQE counter, BlueFlame only.
    pub const BF_WQE_COUNTER: Field = Field::bits(0x00, 4, 8, 16);
    pub const OPCODE: Field = Field::bits(0x00, 4, 0, 5);
    /// QPN, BlueFlame only (the whole dword is `qpn << 8 | fence_size`).
    pub const BF_QPN: Field = Field::bits(0x04, 4, 8, 24);
    pub const FENCE: Field = Field::bit(0x07, 1, 6);
    /// WQE size in 16-byte units.
    pub const DS: Field = Field::bits(0x07, 1, 0, 6);
    /// The flags dword: C, SE and the rest.
    pub const FLAGS: Field = Field::whole(0x08, 4);
    /// C: 3 = generate a CQE.
    pub const CQ_UPDATE: Field = Field::bits(0x08, 4, 2, 2);
    /// SE: solicited event.
    pub const SOLICITED: Field = Field::bit(0x08, 4, 1);
    pub const IMM: Field = Field::whole(0x0c, 4);
}

/// MLX control segment (16 bytes; QP0/QP1 sends that carry their own headers): owner, opcode
/// and DS where the control segment has them.
pub mod mlx {
    use crate::be::Field;

    /// Flags: VL15, SLR, static rate, SL, ICRC, C, force loopback (`smp::mlx_flag`).
    pub const FLAGS: Field = Field::whole(0x08, 4);
    /// The SL, inside the flags word.
    pub const SL: Field = Field::bits(0x08, 4, 8, 4);
    /// The LRH DLID.
    pub const RLID: Field = Field::whole(0x0c, 2);
}

/// UD datagram segment (48 bytes, right after the control segment): the address vector.
pub mod datagram {
    use crate::be::Field;

    pub const SIZE: usize = 48;
    pub const PORT: Field = Field::bits(0x00, 4, 24, 8);
    pub const PD: Field = Field::bits(0x00, 4, 0, 24);
    pub const GRH: Field = Field::bit(0x05, 1, 7);
    pub const SRC_PATH_BITS: Field = Field::bits(0x05, 1, 0, 7);
    pub const DLID: Field = Field::whole(0x06, 2);
    pub const SL: Field = Field::bits(0x0c, 4, 28, 4);
    pub const DEST_QPN: Field = Field::bits(0x20, 4, 0, 24);
    pub const QKEY: Field = Field::whole(0x24, 4);
}

/// Remote address segment (16 bytes; RDMA and atomics).
pub mod raddr {
    use crate::be::Field;

    pub const SIZE: usize = 16;
    pub const VA: Field = Field::whole(0x00, 8);
    pub const RKEY: Field = Field::whole(0x08, 4);
}

/// Atomic segment (16 bytes, after the remote address segment).
pub mod atomic {
    use crate::be::Field;

    pub const SIZE: usize = 16;
    pub const SWAP_ADD: Field = Field::whole(0x00, 8);
    pub const COMPARE: Field = Field::whole(0x08, 8);
}

/// Data segment (16 bytes as a pointer; an inline segment is its 4-byte header and the data).
pub mod data {
    use crate::be::Field;

    pub const SIZE: usize = 16;
    pub const INLINE_HEADER: usize = 4;
    /// Set: an inline segment whose length is `BYTE_COUNT`'s low 31 bits.
    pub const INLINE: Field = Field::bit(0x00, 4, 31);
    pub const INLINE_LEN: Field = Field::bits(0x00, 4, 0, 31);
    pub const BYTE_COUNT: Field = Field::whole(0x00, 4);
    pub const LKEY: Field = Field::whole(0x04, 4);
    pub const ADDR: Field = Field::whole(0x08, 8);
}

/// C = 3 in the control segment: the WQE is signalled.
pub const CQ_UPDATE_ALWAYS: u64 = 3;

/// The fields of a control segment the model acts on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ctrl {
    pub owner: bool,
    pub opcode: u8,
    pub fence: bool,
    pub ds: u8,
    pub signaled: bool,
    pub solicited: bool,
    pub imm: u32,
}

impl Ctrl {
    pub fn parse(b: &[u8]) -> Ctrl {
        Ctrl {
            owner: ctrl::OWNER.get_bool(b),
            opcode: ctrl::OPCODE.get(b) as u8,
            fence: ctrl::FENCE.get_bool(b),
            ds: ctrl::DS.get(b) as u8,
            signaled: ctrl::CQ_UPDATE.get(b) == CQ_UPDATE_ALWAYS,
            solicited: ctrl::SOLICITED.get_bool(b),
            imm: ctrl::IMM.get_u32(b),
        }
    }
    pub fn emit(&self, b: &mut [u8]) {
        ctrl::OWNER.set_bool(b, self.owner);
        ctrl::OPCODE.set(b, self.opcode.into());
        ctrl::FENCE.set_bool(b, self.fence);
        ctrl::DS.set(b, self.ds.into());
        ctrl::CQ_UPDATE.set(b, if self.signaled { CQ_UPDATE_ALWAYS } else { 0 });
        ctrl::SOLICITED.set_bool(b, self.solicited);
        ctrl::IMM.set(b, self.imm.into());
    }
}

/// A UD address vector (the datagram segment's fields the model uses).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Av {
    pub port: u8,
    pub pd: u32,
    pub grh: bool,
    pub src_path_bits: u8,
    pub dlid: u16,
    pub sl: u8,
    pub dest_qpn: u32,
    pub qkey: u32,
}

impl Av {
    pub fn parse(b: &[u8]) -> Av {
        Av {
            port: datagram::PORT.get(b) as u8,
            pd: datagram::PD.get_u32(b),
            grh: datagram::GRH.get_bool(b),
            src_path_bits: datagram::SRC_PATH_BITS.get(b) as u8,
            dlid: datagram::DLID.get(b) as u16,
            sl: datagram::SL.get(b) as u8,
            dest_qpn: datagram::DEST_QPN.get_u32(b),
            qkey: datagram::QKEY.get_u32(b),
        }
    }
    pub fn emit(&self, b: &mut [u8]) {
        datagram::PORT.set(b, self.port.into());
        datagram::PD.set(b, self.pd.into());
        datagram::GRH.set_bool(b, self.grh);
        datagram::SRC_PATH_BITS.set(b, self.src_path_bits.into());
        datagram::DLID.set(b, self.dlid.into());
        datagram::SL.set(b, self.sl.into());
        datagram::DEST_QPN.set(b, self.dest_qpn.into());
        datagram::QKEY.set(b, self.qkey.into());
    }
}

/// A remote address segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Raddr {
    pub va: u64,
    pub rkey: u32,
}

impl Raddr {
    pub fn parse(b: &[u8]) -> Raddr {
        Raddr {
            va: raddr::VA.get(b),
            rkey: raddr::RKEY.get_u32(b),
        }
    }
    pub fn emit(&self, b: &mut [u8]) {
        raddr::VA.set(b, self.va);
        raddr::RKEY.set(b, self.rkey.into());
    }
}

/// An atomic segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Atomic {
    pub swap_add: u64,
    pub compare: u64,
}

impl Atomic {
    pub fn parse(b: &[u8]) -> Atomic {
        Atomic {
            swap_add: atomic::SWAP_ADD.get(b),
            compare: atomic::COMPARE.get(b),
        }
    }
    pub fn emit(&self, b: &mut [u8]) {
        atomic::SWAP_ADD.set(b, self.swap_add);
        atomic::COMPARE.set(b, self.compare);
    }
}

/// A pointer data segment (send gather or receive scatter entry).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Data {
    pub byte_count: u32,
    pub lkey: u32,
    pub addr: u64,
}

impl Data {
    pub fn parse(b: &[u8]) -> Data {
        Data {
            byte_count: data::BYTE_COUNT.get_u32(b),
            lkey: data::LKEY.get_u32(b),
            addr: data::ADDR.get(b),
        }
    }
    pub fn emit(&self, b: &mut [u8]) {
        data::BYTE_COUNT.set(b, self.byte_count.into());
        data::LKEY.set(b, self.lkey.into());
        data::ADDR.set(b, self.addr);
    }
    /// The segment header says inline data follows.
    pub fn is_inline(b: &[u8]) -> bool {
        data::INLINE.get_bool(b)
    }
}
