//! The in-band rendezvous messages (docs/rendezvous.md): fixed 64-byte datagrams sent to the
//! well-known rendezvous QP, all fields big-endian.

use crate::config::{Role, Sizes, Transport};

/// "IBKR".
pub const MAGIC: u32 = 0x4942_4B52;
/// Protocol version carried in every message.
pub const VERSION: u8 = 1;
/// Bytes of one message.
pub const MSG_LEN: usize = 64;

/// What a message says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Client → any LID: "here are my data QP and parameters".
    Hello = 1,
    /// Server → client: "and here are mine" (echoes the client's session).
    HelloAck = 2,
    /// Client → server: "my receives for size `index` are posted; are yours?"
    Barrier = 3,
    /// Server → client: "mine are posted too, start size `index`".
    BarrierAck = 4,
    /// Client → server: "the sweep is over".
    Done = 5,
    /// Server → client.
    DoneAck = 6,
}

impl Kind {
    fn from_raw(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Hello,
            2 => Kind::HelloAck,
            3 => Kind::Barrier,
            4 => Kind::BarrierAck,
            5 => Kind::Done,
            6 => Kind::DoneAck,
            _ => return None,
        })
    }
}

/// One decoded rendezvous message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Msg {
    pub kind: Kind,
    pub role: Role,
    pub transport: Transport,
    /// The sender's per-boot nonce.
    pub session: u32,
    /// The receiver's nonce being answered (0 in a Hello).
    pub peer_session: u32,
    pub lid: u16,
    /// IB MTU enum value of the sender's path MTU (the Ack carries the agreed one).
    pub mtu: u8,
    pub qpn: u32,
    pub psn: u32,
    pub iterations: u32,
    /// 0 for `-a`, else the single size.
    pub size: u32,
    /// Barrier: the size index about to run.
    pub index: u32,
    /// Barrier / BarrierAck: [`FLAG_RESET`] when the sender reset its data QP for this size.
    pub flags: u8,
}

/// The sender reset its data QP (PSNs back to the exchanged ones, stale receives gone).
pub const FLAG_RESET: u8 = 1;

/// Why a datagram is not a rendezvous message of this version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    Short,
    Magic,
    Version(u8),
    Field(&'static str),
}

fn put32(b: &mut [u8; MSG_LEN], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl Msg {
    /// The sizes field for a configuration.
    pub fn size_field(s: Sizes) -> u32 {
        match s {
            Sizes::All => 0,
            Sizes::Single(n) => n,
        }
    }

    pub fn encode(&self) -> [u8; MSG_LEN] {
        let mut b = [0u8; MSG_LEN];
        put32(&mut b, 0, MAGIC);
        b[4] = VERSION;
        b[5] = self.kind as u8;
        b[6] = match self.role {
            Role::Client => 1,
            Role::Server => 2,
        };
        b[7] = match self.transport {
            Transport::Ud => 1,
            Transport::Uc => 2,
        };
        put32(&mut b, 8, self.session);
        put32(&mut b, 12, self.peer_session);
        b[16..18].copy_from_slice(&self.lid.to_be_bytes());
        b[18] = self.mtu;
        b[19] = self.flags;
        put32(&mut b, 20, self.qpn & 0xFF_FFFF);
        put32(&mut b, 24, self.psn & 0xFF_FFFF);
        put32(&mut b, 28, self.iterations);
        put32(&mut b, 32, self.size);
        put32(&mut b, 36, self.index);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Msg, DecodeError> {
        if b.len() < MSG_LEN {
            return Err(DecodeError::Short);
        }
        if get32(b, 0) != MAGIC {
            return Err(DecodeError::Magic);
        }
        if b[4] != VERSION {
            return Err(DecodeError::Version(b[4]));
        }
        let kind = Kind::from_raw(b[5]).ok_or(DecodeError::Field("kind"))?;
        let role = match b[6] {
            1 => Role::Client,
            2 => Role::Server,
            _ => return Err(DecodeError::Field("role")),
        };
        let transport = match b[7] {
            1 => Transport::Ud,
            2 => Transport::Uc,
            _ => return Err(DecodeError::Field("transport")),
        };
        Ok(Msg {
            kind,
            role,
            transport,
            session: get32(b, 8),
            peer_session: get32(b, 12),
            lid: u16::from_be_bytes([b[16], b[17]]),
            mtu: b[18],
            qpn: get32(b, 20) & 0xFF_FFFF,
            psn: get32(b, 24) & 0xFF_FFFF,
            iterations: get32(b, 28),
            size: get32(b, 32),
            index: get32(b, 36),
            flags: b[19],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let m = Msg {
            kind: Kind::BarrierAck,
            role: Role::Server,
            transport: Transport::Uc,
            session: 0xDEAD_BEEF,
            peer_session: 0x1234_5678,
            lid: 0x0102,
            mtu: 4,
            qpn: 0x4A,
            psn: 0x5A_3B1C,
            iterations: 1000,
            size: 0,
            index: 7,
            flags: FLAG_RESET,
        };
        let b = m.encode();
        assert_eq!(&b[0..4], b"IBKR");
        assert_eq!(b[5], 4);
        assert_eq!(&b[20..24], &[0, 0, 0, 0x4A]);
        assert_eq!(Msg::decode(&b), Ok(m));
        assert_eq!(Msg::decode(&b[..63]), Err(DecodeError::Short));
        let mut bad = b;
        bad[0] = 0;
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Magic));
        let mut bad = b;
        bad[4] = 9;
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Version(9)));
        let mut bad = b;
        bad[5] = 0;
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Field("kind")));
        let mut bad = b;
        bad[7] = 3;
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Field("transport")));
        // QPN and PSN are 24-bit fields.
        let wide = Msg {
            qpn: 0xFF00_0001,
            psn: 0xFFFF_FFFF,
            ..m
        };
        let d = Msg::decode(&wide.encode()).unwrap();
        assert_eq!((d.qpn, d.psn), (1, 0xFF_FFFF));
    }
}
