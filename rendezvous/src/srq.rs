//! The SRQ ping-pong's exchange (version 16; docs/rendezvous.md, "SRQ ping-pong exchange"):
//! a client's Offer and a server's Accept, each the run's settings and seven of the
//! sender's QP numbers per message, in as many chunks as its QPs need. The ping-pong's
//! parser rejects version 16, and this one every other version.

use ibconfig::bench::SRQ_MAX_QPS;

use crate::be::{get16, get32, put16, put32};
use crate::{DecodeError, MAGIC, MSG_LEN};

/// The version byte of the SRQ exchange's messages.
pub const VERSION_SRQ: u8 = 16;
/// QP numbers carried per message.
pub const QPNS_PER_MSG: usize = 7;

/// Where each field lies.
pub mod field {
    use crate::Field;

    pub const MAGIC: Field = 0..4;
    pub const VERSION: usize = 4;
    /// 1 Offer (client), 2 Accept (server).
    pub const KIND: usize = 5;
    /// 0-based chunk index and the number of chunks, `ceil(qps / 7)`.
    pub const CHUNK: usize = 6;
    pub const CHUNKS: usize = 7;
    /// The client's session (random per run, never 0).
    pub const SESSION: Field = 8..12;
    pub const LID: Field = 12..14;
    /// 1..=64.
    pub const QPS: usize = 14;
    /// Bit 0 completion events, bit 1 moderation set.
    pub const FLAGS: usize = 15;
    pub const SIZE: Field = 16..20;
    pub const RX_DEPTH: Field = 20..24;
    pub const ITERATIONS: Field = 24..28;
    /// With flag bit 1: cq_max_count and cq_period (µs).
    pub const CQ_COUNT: Field = 28..30;
    pub const CQ_PERIOD: Field = 30..32;
    /// 1-based run and the client's runs (`repeat` passes included).
    pub const RUN: Field = 32..34;
    pub const RUNS: Field = 34..36;
    /// Seven QPNs of 24 bits in 4 bytes each: those of QPs `7 × chunk` onwards, 0 past the
    /// last.
    pub const QPNS: Field = 36..64;
    pub const fn qpn(i: usize) -> Field {
        QPNS.start + 4 * i..QPNS.start + 4 * i + 4
    }
}

const FLAG_EVENTS: u8 = 1;
const FLAG_MODERATION: u8 = 2;

/// A view of an SRQ exchange message in any byte buffer.
#[derive(Clone, Copy, Debug)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// A view without a length check: the accessors panic on a buffer shorter than
    /// [`MSG_LEN`].
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }
    /// A view of `buffer`, which must hold at least [`MSG_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, DecodeError> {
        if buffer.as_ref().len() < MSG_LEN {
            return Err(DecodeError::Short);
        }
        Ok(Packet { buffer })
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn magic(&self) -> u32 {
        get32(self.b(), field::MAGIC)
    }
    pub fn version(&self) -> u8 {
        self.b()[field::VERSION]
    }
    pub fn kind(&self) -> u8 {
        self.b()[field::KIND]
    }
    pub fn chunk(&self) -> u8 {
        self.b()[field::CHUNK]
    }
    pub fn chunks(&self) -> u8 {
        self.b()[field::CHUNKS]
    }
    pub fn session(&self) -> u32 {
        get32(self.b(), field::SESSION)
    }
    pub fn lid(&self) -> u16 {
        get16(self.b(), field::LID)
    }
    pub fn qps(&self) -> u8 {
        self.b()[field::QPS]
    }
    pub fn flags(&self) -> u8 {
        self.b()[field::FLAGS]
    }
    pub fn size(&self) -> u32 {
        get32(self.b(), field::SIZE)
    }
    pub fn rx_depth(&self) -> u32 {
        get32(self.b(), field::RX_DEPTH)
    }
    pub fn iterations(&self) -> u32 {
        get32(self.b(), field::ITERATIONS)
    }
    pub fn cq_count(&self) -> u16 {
        get16(self.b(), field::CQ_COUNT)
    }
    pub fn cq_period(&self) -> u16 {
        get16(self.b(), field::CQ_PERIOD)
    }
    pub fn run(&self) -> u16 {
        get16(self.b(), field::RUN)
    }
    pub fn runs(&self) -> u16 {
        get16(self.b(), field::RUNS)
    }
    /// QPN `i` (0..7) of this chunk, 24 bits.
    pub fn qpn(&self, i: usize) -> u32 {
        get32(self.b(), field::qpn(i)) & 0xFF_FFFF
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    pub fn clear(&mut self) {
        self.m()[..MSG_LEN].fill(0);
    }
    pub fn set_magic(&mut self, v: u32) {
        put32(self.m(), field::MAGIC, v)
    }
    pub fn set_version(&mut self, v: u8) {
        self.m()[field::VERSION] = v
    }
    pub fn set_kind(&mut self, v: u8) {
        self.m()[field::KIND] = v
    }
    pub fn set_chunk(&mut self, chunk: u8, chunks: u8) {
        self.m()[field::CHUNK] = chunk;
        self.m()[field::CHUNKS] = chunks;
    }
    pub fn set_session(&mut self, v: u32) {
        put32(self.m(), field::SESSION, v)
    }
    pub fn set_lid(&mut self, v: u16) {
        put16(self.m(), field::LID, v)
    }
    pub fn set_qps(&mut self, v: u8) {
        self.m()[field::QPS] = v
    }
    pub fn set_flags(&mut self, v: u8) {
        self.m()[field::FLAGS] = v
    }
    pub fn set_size(&mut self, v: u32) {
        put32(self.m(), field::SIZE, v)
    }
    pub fn set_rx_depth(&mut self, v: u32) {
        put32(self.m(), field::RX_DEPTH, v)
    }
    pub fn set_iterations(&mut self, v: u32) {
        put32(self.m(), field::ITERATIONS, v)
    }
    pub fn set_moderation(&mut self, cq_count: u16, cq_period: u16) {
        put16(self.m(), field::CQ_COUNT, cq_count);
        put16(self.m(), field::CQ_PERIOD, cq_period);
    }
    pub fn set_place(&mut self, run: u16, runs: u16) {
        put16(self.m(), field::RUN, run);
        put16(self.m(), field::RUNS, runs);
    }
    /// QPN `i` (0..7) of this chunk: the low 24 bits of `v`.
    pub fn set_qpn(&mut self, i: usize, v: u32) {
        put32(self.m(), field::qpn(i), v & 0xFF_FFFF)
    }
}

/// Which side sends the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SrqKind {
    /// Client → server: the run's settings and the client's QPs.
    Offer = 1,
    /// Server → client: the server's QPs, connected to the client's.
    Accept = 2,
}

/// CQ event moderation (`modify_cq`): completions and microseconds per event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Moderation {
    pub cq_count: u16,
    pub cq_period: u16,
}

/// One chunk of an Offer or Accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqMsg {
    pub kind: SrqKind,
    pub chunk: u8,
    pub chunks: u8,
    /// The client's session (random per run, never 0).
    pub session: u32,
    pub lid: u16,
    /// The run's QPs (1..=64).
    pub qps: u8,
    pub events: bool,
    pub moderation: Option<Moderation>,
    pub size: u32,
    pub rx_depth: u32,
    pub iters: u32,
    pub run: u16,
    pub runs: u16,
    /// The QPNs of QPs `7 × chunk` onwards (24 bits), 0 past the last.
    pub qpns: [u32; QPNS_PER_MSG],
}

impl SrqMsg {
    /// The chunks `qps` QPs need.
    pub fn chunks_for(qps: u32) -> u8 {
        (qps as usize).div_ceil(QPNS_PER_MSG) as u8
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.clear();
        p.set_magic(MAGIC);
        p.set_version(VERSION_SRQ);
        p.set_kind(self.kind as u8);
        p.set_chunk(self.chunk, self.chunks);
        p.set_session(self.session);
        p.set_lid(self.lid);
        p.set_qps(self.qps);
        let flag = |on: bool, bit: u8| if on { bit } else { 0 };
        p.set_flags(
            flag(self.events, FLAG_EVENTS) | flag(self.moderation.is_some(), FLAG_MODERATION),
        );
        p.set_size(self.size);
        p.set_rx_depth(self.rx_depth);
        p.set_iterations(self.iters);
        let m = self.moderation.unwrap_or_default();
        p.set_moderation(m.cq_count, m.cq_period);
        p.set_place(self.run, self.runs);
        for (i, &q) in self.qpns.iter().enumerate() {
            p.set_qpn(i, q);
        }
    }

    /// Reads a chunk: the kind must be known, the QPs 1..=64, the chunk count the one the
    /// QPs need and the chunk below it, the session non-zero.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<SrqMsg, DecodeError> {
        if p.magic() != MAGIC {
            return Err(DecodeError::Magic);
        }
        if p.version() != VERSION_SRQ {
            return Err(DecodeError::Version(p.version()));
        }
        let kind = match p.kind() {
            1 => SrqKind::Offer,
            2 => SrqKind::Accept,
            _ => return Err(DecodeError::Field("kind")),
        };
        let qps = p.qps();
        if qps == 0 || u32::from(qps) > SRQ_MAX_QPS {
            return Err(DecodeError::Field("qps"));
        }
        if p.chunks() != SrqMsg::chunks_for(u32::from(qps)) || p.chunk() >= p.chunks() {
            return Err(DecodeError::Field("chunk"));
        }
        if p.session() == 0 {
            return Err(DecodeError::Field("session"));
        }
        let mut qpns = [0u32; QPNS_PER_MSG];
        for (i, q) in qpns.iter_mut().enumerate() {
            *q = p.qpn(i);
        }
        Ok(SrqMsg {
            kind,
            chunk: p.chunk(),
            chunks: p.chunks(),
            session: p.session(),
            lid: p.lid(),
            qps,
            events: p.flags() & FLAG_EVENTS != 0,
            moderation: (p.flags() & FLAG_MODERATION != 0).then(|| Moderation {
                cq_count: p.cq_count(),
                cq_period: p.cq_period(),
            }),
            size: p.size(),
            rx_depth: p.rx_depth(),
            iters: p.iterations(),
            run: p.run(),
            runs: p.runs(),
            qpns,
        })
    }

    /// The message's bytes.
    pub fn encode(&self) -> [u8; MSG_LEN] {
        let mut b = [0u8; MSG_LEN];
        self.emit(&mut Packet::new_unchecked(&mut b[..]));
        b
    }

    /// Reads a received datagram.
    pub fn decode(b: &[u8]) -> Result<SrqMsg, DecodeError> {
        SrqMsg::parse(&Packet::new_checked(b)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Rng;

    fn offer() -> SrqMsg {
        SrqMsg {
            kind: SrqKind::Offer,
            chunk: 1,
            chunks: 3,
            session: 0xABCD,
            lid: 7,
            qps: 16,
            events: true,
            moderation: Some(Moderation {
                cq_count: 4,
                cq_period: 16,
            }),
            size: 4096,
            rx_depth: 500,
            iters: 1000,
            run: 2,
            runs: 3,
            qpns: [0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0xFF_FFFF],
        }
    }

    #[test]
    fn fields_lie_where_the_document_says() {
        let b = offer().encode();
        assert_eq!(&b[0..8], &[b'I', b'B', b'K', b'R', 16, 1, 1, 3]);
        assert_eq!(&b[8..16], &[0, 0, 0xAB, 0xCD, 0, 7, 16, 3]);
        assert_eq!(&b[16..20], &4096u32.to_be_bytes());
        assert_eq!(&b[20..24], &500u32.to_be_bytes());
        assert_eq!(&b[24..28], &1000u32.to_be_bytes());
        assert_eq!(&b[28..36], &[0, 4, 0, 16, 0, 2, 0, 3]);
        assert_eq!(&b[36..40], &[0, 0, 0, 0x50]);
        assert_eq!(&b[60..64], &[0, 0xFF, 0xFF, 0xFF]);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            (p.chunk(), p.chunks(), p.qps(), p.qpn(6)),
            (1, 3, 16, 0xFF_FFFF)
        );
        assert_eq!(SrqMsg::decode(&b), Ok(offer()));
    }

    #[test]
    fn malformed_chunks_are_refused() {
        let good = offer().encode();
        let bad = |at: usize, v: u8| {
            let mut b = good;
            b[at] = v;
            SrqMsg::decode(&b)
        };
        assert_eq!(bad(4, 3), Err(DecodeError::Version(3)));
        assert_eq!(bad(0, 0), Err(DecodeError::Magic));
        assert_eq!(bad(5, 3), Err(DecodeError::Field("kind")));
        assert_eq!(bad(7, 2), Err(DecodeError::Field("chunk")));
        assert_eq!(bad(6, 3), Err(DecodeError::Field("chunk")));
        assert_eq!(bad(14, 0), Err(DecodeError::Field("qps")));
        assert_eq!(bad(14, 65), Err(DecodeError::Field("qps")));
        let mut b = good;
        b[8..12].fill(0);
        assert_eq!(SrqMsg::decode(&b), Err(DecodeError::Field("session")));
        assert_eq!(SrqMsg::decode(&good[..40]), Err(DecodeError::Short));
        // A QPN wider than 24 bits is read as its 24 bits.
        let mut b = good;
        b[36] = 0xFF;
        assert_eq!(SrqMsg::decode(&b).unwrap().qpns[0], 0x50);
    }

    #[test]
    fn random_messages_round_trip_and_random_bytes_never_panic() {
        let mut r = Rng(16);
        for _ in 0..20_000 {
            let qps = 1 + r.below(64) as u8;
            let chunks = SrqMsg::chunks_for(u32::from(qps));
            let mut qpns = [0u32; QPNS_PER_MSG];
            qpns.iter_mut()
                .for_each(|q| *q = r.next() as u32 & 0xFF_FFFF);
            let m = SrqMsg {
                kind: if r.bool() {
                    SrqKind::Offer
                } else {
                    SrqKind::Accept
                },
                chunk: r.below(u64::from(chunks)) as u8,
                chunks,
                session: r.next() as u32 | 1,
                lid: r.next() as u16,
                qps,
                events: r.bool(),
                moderation: r.bool().then(|| Moderation {
                    cq_count: r.next() as u16,
                    cq_period: r.next() as u16,
                }),
                size: r.next() as u32,
                rx_depth: r.next() as u32,
                iters: r.next() as u32,
                run: r.next() as u16,
                runs: r.next() as u16,
                qpns,
            };
            assert_eq!(SrqMsg::decode(&m.encode()), Ok(m));
            // Any bytes after a valid header: parsed or refused, and what parses emits the
            // same message again.
            let mut b = m.encode();
            let from = 5 + r.below(59) as usize;
            r.fill(&mut b[from..]);
            if let Ok(d) = SrqMsg::decode(&b) {
                assert_eq!(SrqMsg::decode(&d.encode()), Ok(d));
            }
        }
    }
}
