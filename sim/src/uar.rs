//! BAR2: UAR pages (send doorbell, CQ arm doorbell, EQ doorbells) and BlueFlame registers
//! (§5.1, §5.5).

use crate::be::BeRead;
use crate::hca::Hca;
use std::collections::BTreeMap;

/// UAR page offsets (§5.1).
pub const SEND_DOORBELL: u64 = 0x14;
pub const CQ_DOORBELL: u64 = 0x20;
pub const EQ_DOORBELLS: u64 = 0x800;

/// A BlueFlame half being filled by write-combined stores.
#[derive(Clone, Debug, Default)]
pub struct BfBuffer {
    pub bytes: Vec<u8>,
    /// Bytes written so far (contiguous from 0).
    pub filled: usize,
}

#[derive(Clone, Debug, Default)]
pub struct UarState {
    /// First dword of a CQ arm doorbell written as two 32-bit stores, per UAR page.
    pub cq_db_latch: BTreeMap<u64, u32>,
    /// BlueFlame halves being filled, keyed by (UAR page, byte offset of the half).
    pub bf: BTreeMap<(u64, u64), BfBuffer>,
}

impl Hca {
    pub(crate) fn bar2_read(&mut self, offset: u64, len: u8) -> u64 {
        self.violation(
            "§5.1",
            format!(
                "read of {len} bytes from the write-only UAR/BlueFlame area at BAR2+{offset:#x}"
            ),
        );
        0
    }

    pub(crate) fn bar2_write(&mut self, offset: u64, len: u8, value: u64) {
        let bytes = value.to_le_bytes();
        let data = &bytes[..usize::from(len)];
        let uar_size = self.profile.uar_size();
        if offset >= uar_size {
            if !self.profile.blueflame || offset >= 2 * uar_size {
                self.violation("§5.5", format!("write at BAR2+{offset:#x}: beyond the UAR area and BlueFlame is not offered there"));
                return;
            }
            let page = (offset - uar_size) / 4096;
            self.trace.note(|| format!("bf store len={len}"));
            self.bf_write(page, offset % 4096, data);
            return;
        }
        let page = offset / 4096;
        let o = offset % 4096;
        if !o.is_multiple_of(u64::from(len)) {
            self.violation(
                "§5.1",
                format!("misaligned {len}-byte UAR write at page {page} offset {o:#x}"),
            );
            return;
        }
        match (o, len) {
            (SEND_DOORBELL, 4) => {
                // §5.3: BE qpn << 8.
                let v = data.be32(0);
                if v & 0xff != 0 {
                    self.violation(
                        "§5.1",
                        format!("send doorbell {v:#010x}: bits 7:0 must be 0"),
                    );
                    return;
                }
                self.trace.note(|| "db send store=4".to_string());
                self.send_doorbell(page, v >> 8);
            }
            (CQ_DOORBELL, 8) => {
                self.uar.cq_db_latch.remove(&page);
                let cmd = (data.be32(0) >> 24) & 0xf;
                self.trace
                    .note(|| format!("db cq_arm cmd={cmd:#x} stores=1x8"));
                self.cq_arm_doorbell(page, data.be32(0), data.be32(4));
            }
            (CQ_DOORBELL, 4) => {
                self.uar.cq_db_latch.insert(page, data.be32(0));
            }
            (o, 4) if o == CQ_DOORBELL + 4 => {
                // §4.2: 32-bit hosts write dword0 then dword1.
                match self.uar.cq_db_latch.remove(&page) {
                    Some(d0) => {
                        let cmd = (d0 >> 24) & 0xf;
                        self.trace
                            .note(|| format!("db cq_arm cmd={cmd:#x} stores=2x4"));
                        self.cq_arm_doorbell(page, d0, data.be32(0))
                    }
                    None => self.violation(
                        "§4.2",
                        format!("CQ doorbell dword1 on UAR page {page} without a preceding dword0"),
                    ),
                }
            }
            (o, 4) if (EQ_DOORBELLS..EQ_DOORBELLS + 32).contains(&o) && o % 8 == 0 => {
                let eqn = (page * 4 + (o - EQ_DOORBELLS) / 8) as u32;
                let v = data.be32(0);
                self.trace
                    .note(|| format!("db eq arm={} bits={:#x}", v >> 31, (v >> 24) & 0x7f));
                self.eq_doorbell(eqn, data.be32(0));
            }
            _ => self.violation(
                "§5.1",
                format!("{len}-byte UAR write at page {page} offset {o:#x}: no doorbell there"),
            ),
        }
    }

    /// Send doorbell for `qpn` rung on UAR page `page` (§5.3).
    fn send_doorbell(&mut self, page: u64, qpn: u32) {
        let Some(q) = self.qps.get(&qpn) else {
            self.violation(
                "§5.3",
                format!("send doorbell for QP {qpn:#x}, which is in RESET (never initialised)"),
            );
            return;
        };
        if q.state == crate::qp::QpState::Reset {
            self.violation("§10.6", format!("send doorbell for QP {qpn:#x} in RESET"));
            return;
        }
        if u64::from(q.usr_page()) != page {
            let u = q.usr_page();
            self.violation("§5.1", format!("send doorbell for QP {qpn:#x} on UAR page {page}; its context names UAR {u}; ignored"));
            return;
        }
        self.sq_doorbell(qpn);
    }

    /// A store into a BlueFlame register (§5.5).
    fn bf_write(&mut self, page: u64, o: u64, data: &[u8]) {
        self.counters.blueflame_bytes += data.len() as u64;
        let half = self.profile.bf_reg_size() / 2;
        let regs_end = self.profile.bf_reg_size() * self.profile.bf_regs_per_page();
        if o >= regs_end || half == 0 {
            self.violation(
                "§5.5",
                format!(
                    "BlueFlame write at page {page} offset {o:#x}: beyond the BlueFlame registers"
                ),
            );
            return;
        }
        let base = o - o % half;
        let rel = (o - base) as usize;
        let key = (page, base);
        if rel == 0 {
            self.uar.bf.insert(
                key,
                BfBuffer {
                    bytes: vec![0; half as usize],
                    filled: 0,
                },
            );
        }
        let Some(buf) = self.uar.bf.get_mut(&key) else {
            self.violation("§5.5", format!("BlueFlame write at page {page} offset {o:#x} does not continue a burst started at the half's start"));
            return;
        };
        if rel != buf.filled || rel + data.len() > buf.bytes.len() {
            self.uar.bf.remove(&key);
            self.violation("§5.5", format!("BlueFlame stores at page {page} half {base:#x} are not in ascending order from the start"));
            return;
        }
        buf.bytes[rel..rel + data.len()].copy_from_slice(data);
        buf.filled += data.len();
        if buf.filled >= 8 {
            let ds = usize::from(buf.bytes[7] & 0x3f);
            let need = (ds * 16).div_ceil(64) * 64;
            if ds == 0 || need > buf.bytes.len() {
                self.uar.bf.remove(&key);
                self.violation(
                    "§5.5",
                    format!("BlueFlame WQE with DS {ds} does not fit a {half}-byte BlueFlame half"),
                );
                return;
            }
            if buf.filled >= need {
                let wqe = buf.bytes[..ds * 16].to_vec();
                self.uar.bf.remove(&key);
                self.bf_execute(page, wqe);
            }
        }
    }
}
