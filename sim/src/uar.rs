//! BAR2: UAR pages (send doorbell, CQ arm doorbell, EQ doorbells) and BlueFlame registers
//! (§5.1, §5.5).

use crate::hca::Hca;
use crate::seg;
use std::collections::BTreeMap;

/// UAR page offsets (§5.1).
pub const SEND_DOORBELL: u64 = 0x14;
pub const CQ_DOORBELL: u64 = 0x20;
pub const EQ_DOORBELLS: u64 = 0x800;

/// Fields of the doorbell words and doorbell records (§4.1, §4.2, §5.1), each relative to
/// the big-endian image of the store or record: the model's own definitions, written from
/// docs/hardware.md.
pub mod db {
    use crate::be::Field;

    /// The first and second dword of a doorbell store, whole.
    pub const DWORD0: Field = Field::whole(0, 4);
    pub const DWORD1: Field = Field::whole(4, 4);
    /// Send doorbell: the QPN in bits 31:8; bits 7:0 must be zero.
    pub const SEND_QPN: Field = Field::bits(0, 4, 8, 24);
    pub const SEND_LOW: Field = Field::bits(0, 4, 0, 8);
    /// CQ arm doorbell, dword 0: sequence number, command, CQN; dword 1: consumer index.
    pub const CQ_SN: Field = Field::bits(0, 4, 28, 2);
    pub const CQ_CMD: Field = Field::bits(0, 4, 24, 4);
    pub const CQ_CQN: Field = Field::bits(0, 4, 0, 24);
    pub const CQ_CI: Field = Field::whole(4, 4);
    /// EQ doorbell: arm in bit 31, bits 30:24 unused, consumer index in bits 23:0.
    pub const EQ_ARM: Field = Field::bit(0, 4, 31);
    pub const EQ_UNUSED: Field = Field::bits(0, 4, 24, 7);
    pub const EQ_CI: Field = Field::bits(0, 4, 0, 24);
    /// CQ doorbell record: set_ci (the consumer index) in the first dword; the arm word in
    /// the second, `sn << 28 | cmd << 24 | consumer index` as the arm doorbell carries them.
    pub const CQ_RECORD_SET_CI: Field = Field::bits(0, 4, 0, 24);
    pub const CQ_RECORD_ARM: Field = Field::whole(4, 4);
    /// RQ doorbell record: the receive WQE counter.
    pub const RQ_RECORD_COUNTER: Field = Field::bits(0, 4, 0, 16);
}

/// A BlueFlame half being filled by write-combined stores, which may arrive in any order.
#[derive(Clone, Debug, Default)]
pub struct BfBuffer {
    pub bytes: Vec<u8>,
    /// Which bytes of `bytes` this burst has written.
    pub written: Vec<bool>,
    /// When the burst's first store arrived (fabric time).
    pub since_ns: u64,
    /// Already given up on (taken as a doorbell) for staleness: stores still arriving for
    /// it complete it quietly instead of starting a headless burst.
    pub given_up: bool,
}

impl BfBuffer {
    fn has(&self, r: std::ops::Range<usize>) -> bool {
        self.written.get(r).is_some_and(|w| w.iter().all(|&b| b))
    }
    fn count(&self) -> usize {
        self.written.iter().filter(|&&b| b).count()
    }
}

/// How long a BlueFlame burst may stay incomplete before the device gives up on the missing
/// stores and treats what it has as a doorbell (docs/model.md, "BlueFlame"): long enough that
/// a burst from a QEMU guest, one proxy round trip per store, never trips it.
pub const BF_STALE_NS: u64 = 10_000_000;

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
                let v = db::DWORD0.get(data);
                if db::SEND_LOW.get(data) != 0 {
                    self.violation(
                        "§5.1",
                        format!("send doorbell {v:#010x}: bits 7:0 must be 0"),
                    );
                    return;
                }
                self.trace.note(|| "db send store=4".to_string());
                self.send_doorbell(page, db::SEND_QPN.get_u32(data));
            }
            (CQ_DOORBELL, 8) => {
                self.uar.cq_db_latch.remove(&page);
                let cmd = db::CQ_CMD.get(data);
                self.trace
                    .note(|| format!("db cq_arm cmd={cmd:#x} stores=1x8"));
                self.cq_arm_doorbell(page, db::DWORD0.get_u32(data), db::DWORD1.get_u32(data));
            }
            (CQ_DOORBELL, 4) => {
                self.uar.cq_db_latch.insert(page, db::DWORD0.get_u32(data));
            }
            (o, 4) if o == CQ_DOORBELL + 4 => {
                // §4.2: 32-bit hosts write dword0 then dword1.
                match self.uar.cq_db_latch.remove(&page) {
                    Some(d0) => {
                        let cmd = db::CQ_CMD.get(&d0.to_be_bytes());
                        self.trace
                            .note(|| format!("db cq_arm cmd={cmd:#x} stores=2x4"));
                        self.cq_arm_doorbell(page, d0, db::DWORD0.get_u32(data))
                    }
                    None => self.violation(
                        "§4.2",
                        format!("CQ doorbell dword1 on UAR page {page} without a preceding dword0"),
                    ),
                }
            }
            (o, 4) if (EQ_DOORBELLS..EQ_DOORBELLS + 32).contains(&o) && o % 8 == 0 => {
                let eqn = (page * 4 + (o - EQ_DOORBELLS) / 8) as u32;
                let (arm, unused) = (db::EQ_ARM.get(data), db::EQ_UNUSED.get(data));
                self.trace
                    .note(|| format!("db eq arm={arm} bits={unused:#x}"));
                self.eq_doorbell(eqn, db::DWORD0.get_u32(data));
            }
            _ => self.violation(
                "§5.1",
                format!("{len}-byte UAR write at page {page} offset {o:#x}: no doorbell there"),
            ),
        }
    }

    /// Send doorbell for `qpn` rung on UAR page `page` (§5.3).
    fn send_doorbell(&mut self, page: u64, qpn: u32) {
        self.note_send_queue(qpn);
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

    /// A store into a BlueFlame register (§5.5). Write-combining may deliver the stores of
    /// one burst in any order, so they are collected per half until the WQE they carry is
    /// whole; a burst that stays incomplete becomes a doorbell (`bf_incomplete`).
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
        if rel + data.len() > half as usize {
            self.violation(
                "§5.5",
                format!("BlueFlame write at page {page} offset {o:#x} crosses the end of its half"),
            );
            return;
        }
        let key = (page, base);
        // Bursts are ordered (the driver flushes write-combining between them), so a store to
        // the other half of this register, or over bytes this burst already wrote, means the
        // burst in progress there will get no more stores.
        let other = (page, base ^ half);
        if let Some(b) = self.uar.bf.remove(&other) {
            if !b.given_up {
                self.bf_incomplete(other, b, "a burst started in the other half");
            }
        }
        if self
            .uar
            .bf
            .get(&key)
            .is_some_and(|b| b.written[rel..rel + data.len()].iter().any(|&w| w))
        {
            let b = self.uar.bf.remove(&key).unwrap_or_default();
            if !b.given_up {
                self.bf_incomplete(key, b, "a new burst wrote over it");
            }
        }
        let now = self.now_ns;
        let buf = self.uar.bf.entry(key).or_insert_with(|| BfBuffer {
            bytes: vec![0; half as usize],
            written: vec![false; half as usize],
            since_ns: now,
            given_up: false,
        });
        buf.bytes[rel..rel + data.len()].copy_from_slice(data);
        buf.written[rel..rel + data.len()].fill(true);
        if !buf.has(0..8) {
            return;
        }
        let ds = crate::seg::ctrl::DS.get(&buf.bytes) as usize;
        let need = (ds * 16).div_ceil(64) * 64;
        if ds == 0 || need > buf.bytes.len() {
            self.uar.bf.remove(&key);
            self.violation(
                "§5.5",
                format!("BlueFlame WQE with DS {ds} does not fit a {half}-byte BlueFlame half"),
            );
            return;
        }
        if buf.has(0..need) {
            let wqe = buf.bytes[..ds * 16].to_vec();
            self.uar.bf.remove(&key);
            self.bf_execute(page, wqe);
        }
    }

    /// Bursts that have waited `BF_STALE_NS` for their missing stores are given up on.
    pub(crate) fn bf_tick(&mut self) {
        if self.uar.bf.is_empty() {
            return;
        }
        let now = self.now_ns;
        let stale: Vec<(u64, u64)> = self
            .uar
            .bf
            .iter()
            .filter(|(_, b)| !b.given_up && now.saturating_sub(b.since_ns) >= BF_STALE_NS)
            .map(|(k, _)| *k)
            .collect();
        for key in stale {
            let Some(b) = self.uar.bf.get_mut(&key) else {
                continue;
            };
            // Kept, so that late stores of this burst complete it rather than start a new
            // one without its head.
            b.given_up = true;
            let b = b.clone();
            self.bf_incomplete(key, b, "its remaining stores did not arrive");
        }
    }

    /// A burst that will not be completed: the device cannot run a partial WQE, so it takes
    /// the burst as a doorbell for the QP it names (dword 1) and fetches the WQE from the SQ
    /// in memory, where the driver wrote it with a valid owner bit before the copy (§5.5).
    /// Without dword 1 it cannot know the QP and looks at every QP on that UAR page.
    fn bf_incomplete(&mut self, (page, base): (u64, u64), b: BfBuffer, why: &str) {
        let got = b.count();
        let need = if b.has(0..8) {
            format!(
                " of {}",
                (seg::ctrl::DS.get(&b.bytes) as usize * 16).div_ceil(64) * 64
            )
        } else {
            String::new()
        };
        let qpns: Vec<u32> = if b.has(4..7) {
            vec![seg::ctrl::BF_QPN.get_u32(&b.bytes)]
        } else {
            self.qps
                .iter()
                .filter(|(_, q)| u64::from(q.usr_page()) == page)
                .map(|(n, _)| *n)
                .collect()
        };
        let named = if b.has(4..7) {
            format!("QP {:#x}", qpns[0])
        } else {
            format!("every QP on UAR page {page} (the QP number did not arrive)")
        };
        self.observe(format!(
            "BlueFlame burst at page {page} half {base:#x} incomplete ({got}{need} bytes; {why}): treated as a doorbell for {named}"
        ));
        let counter = b
            .has(0..4)
            .then(|| seg::ctrl::BF_WQE_COUNTER.get(&b.bytes) as u16);
        for qpn in qpns {
            let Some(q) = self.qps.get(&qpn) else {
                continue;
            };
            if u64::from(q.usr_page()) != page || q.state == crate::qp::QpState::Reset {
                continue;
            }
            let expected = q.sq_counter;
            if self.sq_head_hw_owned(qpn) {
                self.sq_run_via = "blueflame";
                self.sq_run(qpn);
                self.sq_run_via = "doorbell";
                if let Some(q) = self.qps.get_mut(&qpn) {
                    q.bf_ran_ahead = true;
                }
            } else if counter == Some(expected) && q_is_rts(self, qpn) {
                self.violation(
                    "§5.5",
                    format!("incomplete BlueFlame burst for WQE {expected} of QP {qpn:#x}, and that WQE is not in the SQ with a valid owner bit: the driver must write it there before the BlueFlame copy; nothing executed"),
                );
            }
        }
    }
}

fn q_is_rts(h: &Hca, qpn: u32) -> bool {
    h.qps
        .get(&qpn)
        .is_some_and(|q| q.state == crate::qp::QpState::Rts)
}
