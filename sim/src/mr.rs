//! Memory protection table (dMPT, §4.5) and address translation through MTTs (§4.6): keys,
//! tags, PD, access rights, bounds, physical MRs and the reserved L_Key.

use crate::hca::Hca;

/// MPT flag bits (§4.5 offset 0x00).
pub mod flags {
    pub const LOCAL_READ: u32 = 1 << 10;
    pub const LOCAL_WRITE: u32 = 1 << 11;
    pub const REMOTE_READ: u32 = 1 << 12;
    pub const REMOTE_WRITE: u32 = 1 << 13;
    pub const ATOMIC: u32 = 1 << 14;
    pub const PHYSICAL: u32 = 1 << 9;
    pub const REGION: u32 = 1 << 8;
    /// Set on every MPT by Linux's `mlx4_mr_enable` (`MLX4_MPT_FLAG_MIO`).
    pub const MIO: u32 = 1 << 17;
    /// Status nibble (bits 31:28) of a fast-register MPT in the free state (`MLX4_MPT_FLAG_FREE`).
    pub const STATUS_FREE: u32 = 0x3;
    /// pd_flags (dword 3): remote atomics on a fast-register MPT, fast-register enable.
    pub const PD_RAE: u32 = 1 << 28;
    pub const PD_FAST_REG: u32 = 1 << 27;
    /// The five access bits LOCAL_READ..ATOMIC, as one field (for messages).
    pub const ACCESS_SHIFT: u32 = 10;
    pub const ACCESS_MASK: u32 = 0x1f;
}

/// How an L_Key/R_Key names its MPT (§4.5, inferred): the MPT index in bits 31:8, the tag in
/// bits 7:0; the MPT's own key keeps the tag in its top byte.
pub mod key_layout {
    pub const INDEX_SHIFT: u32 = 8;
    pub const TAG: u32 = 0xff;
    pub const HW_TAG_SHIFT: u32 = 24;
    /// The MPT's own key: the index in bits 23:0.
    pub const HW_INDEX: u32 = 0xff_ffff;
}

/// MTT entries (§4.6): 8 bytes, the page's address with the present bit 0.
pub mod mtt {
    use crate::be::Field;

    pub const ENTRY_SIZE: usize = 8;
    pub const ENTRY: Field = Field::whole(0, 8);
    pub const PRESENT: Field = Field::bit(0, 8, 0);
    /// Bits 11:1, below a page address: not a part of it.
    pub const LOW_BITS: Field = Field::bits(0, 8, 1, 11);
}

/// WRITE_MTT input mailbox (§4.6): the first entry's ICM offset, then the entries at 0x10.
pub mod write_mtt {
    use crate::be::Field;

    pub const START: Field = Field::whole(0x00, 8);
    pub const ENTRIES: usize = 0x10;
    /// Most entries one mailbox carries.
    pub const MAX: usize = 510;
}

/// dMPT entry fields (§4.5): the model's own definitions, written from docs/hardware.md
/// independently of the driver's (`drivers/mlx4/src/layouts.rs` compares them). SW2HW_MPT,
/// QUERY_MPT and the behaviour trace all use these.
pub mod mpt {
    use crate::be::Field;

    pub const SIZE: usize = 64;
    /// Flags dword: status nibble in bits 31:28, the bits of [`super::flags`] below it.
    pub const FLAGS: Field = Field::whole(0x00, 4);
    pub const STATUS: Field = Field::bits(0x00, 4, 28, 4);
    /// Key in hardware order: index in bits 23:0, tag in bits 31:24.
    pub const KEY: Field = Field::whole(0x08, 4);
    pub const KEY_INDEX: Field = Field::bits(0x08, 4, 0, 24);
    pub const KEY_TAG: Field = Field::bits(0x08, 4, 24, 8);
    /// pd_flags dword: PD in bits 16:0, fast-register bits above.
    pub const PD_FLAGS: Field = Field::whole(0x0c, 4);
    pub const PD: Field = Field::bits(0x0c, 4, 0, 17);
    pub const START: Field = Field::whole(0x10, 8);
    pub const LENGTH: Field = Field::whole(0x18, 8);
    pub const LKEY: Field = Field::whole(0x20, 4);
    pub const MTT_ADDR: Field = Field::whole(0x2c, 8);
    pub const MTT_SZ: Field = Field::whole(0x34, 4);
    /// log2 of the page size the MTT entries describe.
    pub const ENTITY_SIZE: Field = Field::whole(0x38, 4);
    pub const FIRST_BYTE_OFFSET: Field = Field::whole(0x3c, 4);
}

/// Largest MTT page (entity_size) Linux ever writes: mlx4_ib's `MLX4_MAX_MTT_SHIFT`.
pub const MAX_MTT_SHIFT: u32 = 31;

/// The key that terminates a receive scatter list (§4.5 `MLX4_INVALID_LKEY`).
pub const INVALID_LKEY: u32 = 0x100;

/// One MPT entry in hardware ownership.
#[derive(Clone, Debug)]
pub struct Mpt {
    pub index: u32,
    pub ctx: Vec<u8>,
    pub flags: u32,
    /// Key field in "hardware order" (index in bits 23:0, tag in 31:24).
    pub hw_key: u32,
    pub pd: u32,
    pub start: u64,
    pub length: u64,
    pub mtt_index: u64,
    pub page_shift: u32,
}

/// Why an access through a key was refused (mapped to CQE syndromes by the caller).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// Bad key, PD, bounds or rights.
    Protection(String),
    /// Translation failed (MTT missing, DMA fault).
    Translation(String),
}

/// Access kind for a key check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    LocalRead,
    LocalWrite,
    RemoteRead,
    RemoteWrite,
    RemoteAtomic,
}

impl Hca {
    /// Writes `data` across the physical pieces a key translation returned (see
    /// [`Hca::translate_key`]), in order. A DMA fault is recorded by `dma_write` as a
    /// violation; the callers have no further way to report it (the region was validated by
    /// the translation, and UC has no response channel).
    pub(crate) fn write_pieces(&mut self, pieces: &[(u64, u64)], data: &[u8], what: &str) {
        let mut done = 0usize;
        for &(pa, n) in pieces {
            let _ = self.dma_write(pa, &data[done..done + n as usize], what);
            done += n as usize;
        }
    }

    /// Translate `[addr, addr + len)` through key `key` for a QP with protection domain `pd`
    /// that may (`rlkey`) use the reserved L_Key. Returns the bus-address pieces.
    pub(crate) fn translate_key(
        &mut self,
        key: u32,
        pd: u32,
        rlkey: bool,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<Vec<(u64, u64)>, KeyError> {
        let local = matches!(access, Access::LocalRead | Access::LocalWrite);
        // §4.5: the reserved L_Key gives physical, untranslated access to QPs with rlkey.
        if key == self.profile.reserved_lkey {
            if !local {
                return Err(KeyError::Protection(format!(
                    "reserved L_Key {key:#x} used as an R_Key"
                )));
            }
            if !rlkey {
                return Err(KeyError::Protection(format!(
                    "reserved L_Key {key:#x} used by a QP without the rlkey bit (QPC 0x0B bit 4)"
                )));
            }
            if addr.checked_add(len).is_none() {
                return Err(KeyError::Protection(format!(
                    "physical range {addr:#x}+{len:#x} wraps"
                )));
            }
            return Ok(if len == 0 { vec![] } else { vec![(addr, len)] });
        }
        let num = 1u64 << self.fw.init.as_ref().map(|p| p.log_num_mpts).unwrap_or(0);
        // §4.5 (inferred): index = (key >> 8) & (num_mpts - 1), tag = key & 0xFF.
        let index = ((u64::from(key) >> key_layout::INDEX_SHIFT) & (num - 1)) as u32;
        let Some(m) = self.mpts.get(&index) else {
            return Err(KeyError::Protection(format!(
                "key {key:#x}: MPT {index:#x} is not in hardware ownership"
            )));
        };
        if m.hw_key >> key_layout::HW_TAG_SHIFT != key & key_layout::TAG {
            return Err(KeyError::Protection(format!(
                "key {key:#x}: tag {:#x} does not match MPT {index:#x} tag {:#x}",
                key & key_layout::TAG,
                m.hw_key >> key_layout::HW_TAG_SHIFT
            )));
        }
        if m.pd != pd {
            return Err(KeyError::Protection(format!(
                "key {key:#x}: MPT PD {:#x} differs from the QP's PD {pd:#x}",
                m.pd
            )));
        }
        let need = match access {
            Access::LocalRead => 0, // local read is always allowed for a valid region
            Access::LocalWrite => flags::LOCAL_WRITE,
            Access::RemoteRead => flags::REMOTE_READ,
            Access::RemoteWrite => flags::REMOTE_WRITE,
            Access::RemoteAtomic => flags::ATOMIC,
        };
        if m.flags & need != need {
            return Err(KeyError::Protection(format!(
                "key {key:#x}: {access:?} not permitted by MPT access flags {:#x}",
                (m.flags >> flags::ACCESS_SHIFT) & flags::ACCESS_MASK
            )));
        }
        let end = addr.checked_add(len);
        let m_end = m.start.saturating_add(m.length);
        if addr < m.start || end.is_none_or(|e| e > m_end) {
            return Err(KeyError::Protection(format!(
                "key {key:#x}: [{addr:#x}, +{len:#x}) is outside the region [{:#x}, +{:#x})",
                m.start, m.length
            )));
        }
        if len == 0 {
            return Ok(vec![]);
        }
        if m.flags & flags::PHYSICAL != 0 {
            return Ok(vec![(addr, len)]);
        }
        let (mtt, shift, base) = (
            m.mtt_index,
            m.page_shift,
            m.start & !((1u64 << m.page_shift) - 1),
        );
        let psz = 1u64 << shift;
        let mut out = Vec::new();
        let mut done = 0u64;
        while done < len {
            let off = addr - base + done;
            let n = (psz - off % psz).min(len - done);
            let pa = self
                .mtt_translate(mtt, shift, off, &format!("key {key:#x}"))
                .map_err(|s| {
                    KeyError::Translation(format!("key {key:#x}: MTT translation failed ({s})"))
                })?;
            out.push((pa, n));
            done += n;
        }
        Ok(out)
    }
}
