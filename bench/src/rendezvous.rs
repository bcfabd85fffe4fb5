//! The in-band rendezvous messages (docs/rendezvous.md): fixed 64-byte datagrams sent to the
//! well-known rendezvous QP, all fields big-endian.
//!
//! Version 1 is send_lat: bytes 40..64 are zero. Version 2 carries the test and, for the
//! RDMA tests, the remote address and rkey of the sender's data buffer in bytes 40..64. A
//! send_lat message is still encoded as version 1, byte for byte as before, so send_lat
//! nodes of either version interoperate; a version-1-only node ignores version-2 messages.

use crate::config::{Role, Sizes, Test, Transport};

/// "IBKR".
pub const MAGIC: u32 = 0x4942_4B52;
/// Version of send_lat messages (bytes 40..64 zero).
pub const VERSION: u8 = 1;
/// Version of messages that carry the test, remote address and rkey (write_lat).
pub const VERSION_RDMA: u8 = 2;
/// Bytes of one message.
pub const MSG_LEN: usize = 64;

pub use ibconfig::bench::well_known_rdv_qpn as well_known_qpn;

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
    /// Which test the sender runs (version 1 messages are always send_lat).
    pub test: Test,
    /// write_lat: the bus address the peer writes to (the sender's receive region); 0 in
    /// send_lat.
    pub addr: u64,
    /// write_lat: the rkey of that region; 0 in send_lat.
    pub rkey: u32,
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

fn test_code(t: Test) -> u8 {
    match t {
        Test::SendLat => 1,
        Test::WriteLat => 2,
    }
}

fn put32(b: &mut [u8; MSG_LEN], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn get64(b: &[u8], at: usize) -> u64 {
    (u64::from(get32(b, at)) << 32) | u64::from(get32(b, at + 4))
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
        b[4] = match self.test {
            Test::SendLat => VERSION,
            Test::WriteLat => VERSION_RDMA,
        };
        b[5] = self.kind as u8;
        b[6] = match self.role {
            Role::Client => 1,
            Role::Server => 2,
        };
        b[7] = match self.transport {
            Transport::Ud => 1,
            Transport::Uc => 2,
            Transport::Rc => 3,
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
        if self.test != Test::SendLat {
            b[40] = test_code(self.test);
            put32(&mut b, 44, self.rkey);
            b[48..56].copy_from_slice(&self.addr.to_be_bytes());
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<Msg, DecodeError> {
        if b.len() < MSG_LEN {
            return Err(DecodeError::Short);
        }
        if get32(b, 0) != MAGIC {
            return Err(DecodeError::Magic);
        }
        let test = match b[4] {
            VERSION => Test::SendLat,
            VERSION_RDMA => match b[40] {
                1 => Test::SendLat,
                2 => Test::WriteLat,
                _ => return Err(DecodeError::Field("test")),
            },
            v => return Err(DecodeError::Version(v)),
        };
        // Version 1 leaves bytes 40..64 unused: no address or key is read from them.
        let (addr, rkey) = if b[4] == VERSION_RDMA {
            (get64(b, 48), get32(b, 44))
        } else {
            (0, 0)
        };
        let kind = Kind::from_raw(b[5]).ok_or(DecodeError::Field("kind"))?;
        let role = match b[6] {
            1 => Role::Client,
            2 => Role::Server,
            _ => return Err(DecodeError::Field("role")),
        };
        let transport = match b[7] {
            1 => Transport::Ud,
            2 => Transport::Uc,
            3 => Transport::Rc,
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
            test,
            addr,
            rkey,
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
            test: Test::SendLat,
            addr: 0,
            rkey: 0,
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
        bad[7] = 4;
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

    #[test]
    fn send_lat_stays_version_1_and_write_lat_carries_address_and_rkey() {
        let m = Msg {
            kind: Kind::Hello,
            role: Role::Client,
            transport: Transport::Uc,
            session: 0x0102_0304,
            peer_session: 0,
            lid: 3,
            mtu: 4,
            qpn: 0x48,
            psn: 0x12_3456,
            iterations: 20,
            size: 64,
            index: 0,
            flags: 0,
            test: Test::SendLat,
            addr: 0,
            rkey: 0,
        };
        let b = m.encode();
        assert_eq!(b[4], 1, "send_lat messages are version 1");
        assert!(b[40..].iter().all(|&x| x == 0), "bytes 40..64 stay zero");
        // A version-1 message with garbage in its tail still decodes (the tail is unused).
        let mut tail = b;
        tail[44..64].fill(0xEE);
        let d = Msg::decode(&tail).unwrap();
        assert_eq!((d.test, d.addr, d.rkey), (Test::SendLat, 0, 0));

        let w = Msg {
            transport: Transport::Rc,
            test: Test::WriteLat,
            addr: 0x0000_0012_3456_7000,
            rkey: 0xABCD_0042,
            ..m
        };
        let b = w.encode();
        assert_eq!(b[4], 2, "write_lat messages are version 2");
        assert_eq!(b[7], 3, "RC");
        assert_eq!(b[40], 2);
        assert_eq!(&b[44..48], &[0xAB, 0xCD, 0x00, 0x42]);
        assert_eq!(&b[48..56], &[0, 0, 0, 0x12, 0x34, 0x56, 0x70, 0]);
        assert!(b[56..].iter().all(|&x| x == 0));
        assert_eq!(Msg::decode(&b), Ok(w));
        let mut bad = b;
        bad[40] = 9;
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Field("test")));
        let mut bad = b;
        bad[4] = 3;
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Version(3)));
    }
}
