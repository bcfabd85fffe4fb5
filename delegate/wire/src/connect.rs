//! Connection set-up: 64-byte UD datagrams on the rendezvous QP (docs/rendezvous.md: its
//! Q_Key `0x49424B52` and the `"IBKR"` magic in bytes 0..4), with a version of their own,
//! [`SETUP_VERSION`], which the benchmarks' decoders ignore, as every other version of theirs
//! is ignored by this one.
//!
//! A node sends [`Kind::Connect`] (its RC QP, PSN, MTU, how many replies it can take at once
//! and the lease it asks for) until the delegate answers [`Kind::Accept`] (the delegate's RC
//! QP, PSN, the agreed MTU, how many requests it takes at once and the lease granted) or
//! [`Kind::Refuse`] (a [`Reason`]). The delegate answers a repeated Connect of the same session
//! with the same answer.

use crate::field::{put_u16, put_u32, put_u64, put_u8, u16_at, u32_at, u64_at, u8_at, zero};
use crate::{Error, MAX_MESSAGE, VERSION};

/// `"IBKR"`, the rendezvous magic.
pub const RDV_MAGIC: u32 = 0x4942_4B52;
/// The rendezvous Q_Key (docs/rendezvous.md).
pub const RDV_QKEY: u32 = 0x4942_4B52;
/// The rendezvous version byte of delegation set-up messages.
pub const SETUP_VERSION: u8 = 32;
/// Bytes of a set-up message.
pub const LEN: usize = 64;
/// Most calls one side may have outstanding toward the other.
pub const MAX_CREDITS: u16 = 256;

/// The set-up message's fields (big-endian).
pub mod field {
    use crate::Field;
    pub const MAGIC: Field = 0..4;
    pub const VERSION: usize = 4;
    pub const KIND: usize = 5;
    /// The call protocol's version ([`crate::VERSION`]): asked in a Connect, spoken in an
    /// Accept, the highest spoken in a Refuse.
    pub const PROTOCOL: usize = 6;
    /// IB MTU code (1 = 256 ... 5 = 4096): the node's in a Connect, the agreed one after.
    pub const MTU: usize = 7;
    /// The node's session: random per connection attempt, never 0; echoed by the answers.
    pub const SESSION: Field = 8..12;
    /// The delegate's number for the node (Accept; 0 otherwise).
    pub const NODE: Field = 12..16;
    pub const LID: Field = 16..18;
    pub const RESERVED_A: Field = 18..20;
    /// The sender's RC QP number (24 bits; 0 in a Refuse).
    pub const QPN: Field = 20..24;
    /// The sender's first PSN (24 bits).
    pub const PSN: Field = 24..28;
    /// Calls the sender takes at once: the receives it keeps posted.
    pub const CREDITS: Field = 28..30;
    /// The largest message the sender receives (at most [`crate::MAX_MESSAGE`]).
    pub const MAX_MESSAGE: Field = 30..32;
    /// Milliseconds: asked (Connect) or granted (Accept) without a call before the delegate
    /// releases the node.
    pub const LEASE_MS: Field = 32..36;
    /// Refuse: the [`super::Reason`] code.
    pub const REASON: Field = 36..40;
    /// The sender's port GUID (names the node in the delegate's log and files).
    pub const GUID: Field = 40..48;
    pub const RESERVED_B: Field = 48..64;
}

/// The message kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Node → delegate.
    Connect = 1,
    /// Delegate → node.
    Accept = 2,
    /// Delegate → node: it will not serve this Connect.
    Refuse = 3,
}

/// Why a delegate refuses a Connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Reason {
    /// The protocol version asked is not spoken (the Refuse carries the one that is).
    Version = 1,
    /// The delegate serves as many nodes as it was told to.
    TooManyNodes = 2,
    /// Creating or connecting the node's QP or buffers failed.
    Resources = 3,
}

impl Reason {
    pub fn from_code(c: u32) -> Result<Reason, Error> {
        Ok(match c {
            1 => Reason::Version,
            2 => Reason::TooManyNodes,
            3 => Reason::Resources,
            _ => return Err(Error::BadValue),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Reason::Version => "protocol version not spoken",
            Reason::TooManyNodes => "the delegate serves as many nodes as it may",
            Reason::Resources => "the delegate could not set up the connection",
        }
    }
}

/// A set-up message, typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    pub kind: Kind,
    /// The call protocol's version (see [`field::PROTOCOL`]).
    pub protocol: u8,
    /// IB MTU code, 1..=5.
    pub mtu: u8,
    pub session: u32,
    /// The delegate's number for the node (Accept), else 0.
    pub node: u32,
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
    pub credits: u16,
    pub max_message: u16,
    pub lease_ms: u32,
    /// Refuse only.
    pub reason: Option<Reason>,
    pub guid: u64,
}

const QPN_MAX: u32 = 0x00ff_ffff;

impl Setup {
    /// Parses a received datagram (its first [`LEN`] bytes; a UD receive may be longer than
    /// the message). `Ok(None)`: a rendezvous message of another version or not one at all,
    /// which this protocol ignores; `Err`: a set-up message that is malformed.
    pub fn parse(b: &[u8]) -> Result<Option<Setup>, Error> {
        if b.len() < LEN {
            return if b.len() > field::VERSION
                && u32_at(b, field::MAGIC) == RDV_MAGIC
                && b[field::VERSION] == SETUP_VERSION
            {
                Err(Error::Truncated)
            } else {
                Ok(None)
            };
        }
        let b = &b[..LEN];
        if u32_at(b, field::MAGIC) != RDV_MAGIC || u8_at(b, field::VERSION) != SETUP_VERSION {
            return Ok(None);
        }
        if !zero(b, field::RESERVED_A) || !zero(b, field::RESERVED_B) {
            return Err(Error::Reserved);
        }
        let kind = match u8_at(b, field::KIND) {
            1 => Kind::Connect,
            2 => Kind::Accept,
            3 => Kind::Refuse,
            _ => return Err(Error::BadValue),
        };
        let s = Setup {
            kind,
            protocol: u8_at(b, field::PROTOCOL),
            mtu: u8_at(b, field::MTU),
            session: u32_at(b, field::SESSION),
            node: u32_at(b, field::NODE),
            lid: u16_at(b, field::LID),
            qpn: u32_at(b, field::QPN),
            psn: u32_at(b, field::PSN),
            credits: u16_at(b, field::CREDITS),
            max_message: u16_at(b, field::MAX_MESSAGE),
            lease_ms: u32_at(b, field::LEASE_MS),
            reason: match (kind, u32_at(b, field::REASON)) {
                (Kind::Refuse, c) => Some(Reason::from_code(c)?),
                (_, 0) => None,
                _ => return Err(Error::Reserved),
            },
            guid: u64_at(b, field::GUID),
        };
        s.check()?;
        Ok(Some(s))
    }

    /// What a receiver refuses.
    fn check(&self) -> Result<(), Error> {
        if self.session == 0 || self.qpn > QPN_MAX || self.psn > QPN_MAX {
            return Err(Error::BadValue);
        }
        if self.kind == Kind::Refuse {
            return if self.reason.is_some() {
                Ok(())
            } else {
                Err(Error::BadValue)
            };
        }
        if self.reason.is_some()
            || !(1..=5).contains(&self.mtu)
            || self.qpn == 0
            || self.credits == 0
            || self.credits > MAX_CREDITS
            || usize::from(self.max_message) < crate::HEADER_LEN + 64
            || usize::from(self.max_message) > MAX_MESSAGE
            || (self.kind == Kind::Connect && self.node != 0)
        {
            return Err(Error::BadValue);
        }
        Ok(())
    }

    /// Writes the message into `buf[..LEN]`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        self.check()?;
        if buf.len() < LEN {
            return Err(Error::Truncated);
        }
        let b = &mut buf[..LEN];
        b.fill(0);
        put_u32(b, field::MAGIC, RDV_MAGIC);
        put_u8(b, field::VERSION, SETUP_VERSION);
        put_u8(b, field::KIND, self.kind as u8);
        put_u8(b, field::PROTOCOL, self.protocol);
        put_u8(b, field::MTU, self.mtu);
        put_u32(b, field::SESSION, self.session);
        put_u32(b, field::NODE, self.node);
        put_u16(b, field::LID, self.lid);
        put_u32(b, field::QPN, self.qpn);
        put_u32(b, field::PSN, self.psn);
        put_u16(b, field::CREDITS, self.credits);
        put_u16(b, field::MAX_MESSAGE, self.max_message);
        put_u32(b, field::LEASE_MS, self.lease_ms);
        put_u32(b, field::REASON, self.reason.map_or(0, |r| r as u32));
        put_u64(b, field::GUID, self.guid);
        Ok(LEN)
    }

    /// A Connect for this crate's protocol version.
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        session: u32,
        lid: u16,
        guid: u64,
        qpn: u32,
        psn: u32,
        mtu: u8,
        credits: u16,
        lease_ms: u32,
    ) -> Setup {
        Setup {
            kind: Kind::Connect,
            protocol: VERSION,
            mtu,
            session,
            node: 0,
            lid,
            qpn,
            psn,
            credits,
            max_message: MAX_MESSAGE as u16,
            lease_ms,
            reason: None,
            guid,
        }
    }

    /// The delegate's refusal of `connect`.
    pub fn refuse(connect: &Setup, lid: u16, guid: u64, reason: Reason) -> Setup {
        Setup {
            kind: Kind::Refuse,
            protocol: VERSION,
            mtu: 0,
            session: connect.session,
            node: 0,
            lid,
            qpn: 0,
            psn: 0,
            credits: 0,
            max_message: 0,
            lease_ms: 0,
            reason: Some(reason),
            guid,
        }
    }
}
