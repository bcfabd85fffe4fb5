//! What a ping-pong run measures, and the `key=value` names for it (mirroring perftest's flags).

use verbs::Mtu;

/// perftest's default iteration count (`-n`, `DEF_ITERS`).
pub const DEFAULT_ITERATIONS: u32 = 1000;
/// perftest's cap on the receive depth of UC/UD latency tests (`min(iters, 16000)`).
pub const MAX_RX_DEPTH: u32 = 16000;
/// perftest's default inline limit for `ib_send_lat` over UC (and RC) on Mellanox devices.
pub const DEFAULT_INLINE_UC: u32 = 236;
/// perftest's default inline limit for `ib_send_lat` over UD on Mellanox devices.
pub const DEFAULT_INLINE_UD: u32 = 188;
/// perftest's default inline limit for `ib_write_lat` (RC and UC) on Mellanox devices.
pub const DEFAULT_INLINE_WRITE: u32 = 220;
/// perftest's largest accepted inline limit.
pub const MAX_INLINE: u32 = 1024;
/// Smallest size: the payload carries a 2-byte tag (sequence number, size index) so stale
/// and duplicate packets are recognised.
pub const MIN_SIZE: u32 = 2;
/// Largest iteration count accepted (the stamps are kept in memory).
pub const MAX_ITERATIONS: u32 = 1 << 24;
/// Largest `-a` size (2^23 B = 8 MiB, perftest's `size_max_pow` 24 exclusive).
pub const MAX_SWEEP_SIZE: u32 = 1 << 23;
/// perftest's UD Q_Key (`DEF_QKEY`) for the data QPs.
pub const DATA_QKEY: u32 = 0x1111_1111;
/// The rendezvous Q_Key, "IBKR" (bit 31 clear: not a controlled Q_Key).
pub const RDV_QKEY: u32 = 0x4942_4B52;

/// Which perftest latency test runs (the program name: `ib_send_lat`, `ib_write_lat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// `ib_send_lat`: SEND/receive ping-pong (UD, UC).
    SendLat,
    /// `ib_write_lat`: RDMA WRITE ping-pong, each side polling the last byte of its own
    /// buffer (RC, UC).
    WriteLat,
}

impl Test {
    /// The name in result lines and the `test` key ("send_lat", "write_lat").
    pub fn name(self) -> &'static str {
        match self {
            Test::SendLat => "send_lat",
            Test::WriteLat => "write_lat",
        }
    }
    /// The title perftest's banner prints.
    pub fn title(self) -> &'static str {
        match self {
            Test::SendLat => "Send Latency Test",
            Test::WriteLat => "RDMA_Write Latency Test",
        }
    }
}

/// Transport of the data QPs (`-c`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Ud,
    Uc,
    Rc,
}

impl Transport {
    /// The name perftest prints ("UD", "UC", "RC").
    pub fn name(self) -> &'static str {
        match self {
            Transport::Ud => "UD",
            Transport::Uc => "UC",
            Transport::Rc => "RC",
        }
    }
    /// perftest's default inline limit for `ib_send_lat` over this transport.
    pub fn default_inline(self) -> u32 {
        match self {
            Transport::Ud => DEFAULT_INLINE_UD,
            Transport::Uc | Transport::Rc => DEFAULT_INLINE_UC,
        }
    }
    /// Bytes the receive buffer holds beyond the payload (UD: the 40-byte GRH slot).
    pub fn grh_bytes(self) -> u32 {
        match self {
            Transport::Ud => 40,
            Transport::Uc | Transport::Rc => 0,
        }
    }
}

/// Which side of the ping-pong this node is (perftest: the side given a host name is the client).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Sends first.
    Client,
    /// Answers.
    Server,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Server => "server",
        }
    }
}

/// Message sizes to run (`-a` or `-s N`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sizes {
    /// `-a`: 2 B .. 8 MiB for UC, 2 B .. MTU for UD, powers of two.
    All,
    /// `-s N`.
    Single(u32),
}

/// How completions are waited for (`-e` selects events).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Busy-poll the CQ (perftest's default).
    Poll,
    /// Arm the CQ (`req_notify_cq`) and wait for its completion event (`get_cq_event`).
    Event,
}

impl Completion {
    pub fn name(self) -> &'static str {
        match self {
            Completion::Poll => "poll",
            Completion::Event => "event",
        }
    }
}

/// Everything a ping-pong run needs to know. Build it with [`PingPongConfig::new`] and
/// [`PingPongConfig::apply`]; [`PingPongConfig::validate`] runs before any run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PingPongConfig {
    /// `send_lat` (default) or `write_lat`.
    pub test: Test,
    pub transport: Transport,
    pub role: Role,
    pub sizes: Sizes,
    /// Iterations per size (`-n`), at least 5.
    pub iterations: u32,
    /// Inline limit (`-I`); `None` = perftest's default for the transport.
    pub inline_limit: Option<u32>,
    pub completion: Completion,
    /// HCA port (`-i`), 1-based.
    pub port: u8,
    /// The peer's LID; `None` = probe `probe_lids` for it.
    pub peer_lid: Option<u16>,
    /// Path MTU (`-m`); `None` = the port's active MTU, with perftest's ConnectX-3 rule
    /// (4096 becomes 2048).
    pub mtu: Option<Mtu>,
    /// How long one wait (a completion, a reply, a barrier answer) may take before the
    /// engine counts a loss and re-sends.
    pub wait_timeout_ns: u64,
    /// Losses tolerated per size before that size is aborted (reported) and the sweep goes on.
    pub max_losses_per_size: u32,
    /// Bound on the whole rendezvous (the peer booting later) and on any silence of the peer.
    pub peer_timeout_ns: u64,
    /// LIDs probed for the peer when `peer_lid` is `None` (inclusive).
    pub probe_lids: (u16, u16),
    /// The QP number this node creates its rendezvous QP at; `None` = the well-known one
    /// its device implies (`rendezvous::well_known_qpn` of the reserved-QP count).
    pub rdv_qpn: Option<u32>,
    /// Where a client sends its Hellos: the server's rendezvous QPN; `None` = this node's
    /// own rendezvous QPN (two ibkern nodes with the same firmware profile). A peer whose verbs cannot choose a QPN (Linux) prints the one it
    /// got. Everything after the HelloAck goes to that message's source QPN anyway.
    pub peer_rdv_qpn: Option<u32>,
    /// Check every received payload byte against the pattern the peer sent (costs time on
    /// the measured path: for tests, not for published numbers).
    pub verify: bool,
}

impl Default for PingPongConfig {
    fn default() -> Self {
        Self::new(Transport::Ud, Role::Server)
    }
}

/// Why a `key=value` pair or a whole configuration was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// Not a ping-pong key.
    UnknownKey,
    /// The value does not parse or is out of range; the string says what is expected.
    BadValue(&'static str),
    /// The combination is invalid (the string says why).
    Invalid(&'static str),
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConfigError::UnknownKey => write!(f, "unknown key"),
            ConfigError::BadValue(w) => write!(f, "bad value: expected {w}"),
            ConfigError::Invalid(w) => write!(f, "invalid configuration: {w}"),
        }
    }
}

fn parse_u32(v: &str, what: &'static str) -> Result<u32, ConfigError> {
    let v = v.trim();
    let r = if let Some(h) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        u32::from_str_radix(h, 16)
    } else {
        v.parse::<u32>()
    };
    r.map_err(|_| ConfigError::BadValue(what))
}

fn parse_u16(v: &str, what: &'static str) -> Result<u16, ConfigError> {
    u16::try_from(parse_u32(v, what)?).map_err(|_| ConfigError::BadValue(what))
}

impl PingPongConfig {
    /// perftest's defaults: 2-byte messages, 1000 iterations, polling, port 1, MTU rule,
    /// 100 ms per wait, 100 losses per size, 120 s to find the peer, LIDs 1..=64 probed.
    pub fn new(transport: Transport, role: Role) -> Self {
        PingPongConfig {
            test: Test::SendLat,
            transport,
            role,
            sizes: Sizes::Single(2),
            iterations: DEFAULT_ITERATIONS,
            inline_limit: None,
            completion: Completion::Poll,
            port: 1,
            peer_lid: None,
            mtu: None,
            wait_timeout_ns: 100_000_000,
            max_losses_per_size: 100,
            peer_timeout_ns: 120_000_000_000,
            probe_lids: (1, 64),
            rdv_qpn: None,
            peer_rdv_qpn: None,
            verify: false,
        }
    }

    /// Set one option from its `key=value` form (keys in docs/benchmarks.md):
    /// `test=send_lat|write_lat` (the perftest program), `transport=UD|UC|RC` (-c), `size=all|N` (-a/-s), `iters=N` (-n), `inline=N` (-I),
    /// `completion=poll|event` (-e), `mtu=256..4096` (-m), `ib_port=N` (-i),
    /// `role=client|server`, `peer_lid=N`, `loss_limit=N`, `timeout_ms=N`,
    /// `peer_timeout_ms=N`, `probe_lids=A-B`, `rdv_qpn=N`, `peer_rdv_qpn=N`, `verify=0|1`.
    pub fn apply(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let v = value.trim();
        match key.trim() {
            "test" => {
                self.test = if v.eq_ignore_ascii_case("send_lat") {
                    Test::SendLat
                } else if v.eq_ignore_ascii_case("write_lat") {
                    Test::WriteLat
                } else {
                    return Err(ConfigError::BadValue("send_lat or write_lat"));
                }
            }
            "transport" => {
                self.transport = if v.eq_ignore_ascii_case("ud") {
                    Transport::Ud
                } else if v.eq_ignore_ascii_case("uc") {
                    Transport::Uc
                } else if v.eq_ignore_ascii_case("rc") {
                    Transport::Rc
                } else {
                    return Err(ConfigError::BadValue("UD, UC or RC"));
                }
            }
            "size" => {
                self.sizes = if v.eq_ignore_ascii_case("all") {
                    Sizes::All
                } else {
                    let n = parse_u32(v, "all or a size in bytes (2..=8388608)")?;
                    if !(MIN_SIZE..=MAX_SWEEP_SIZE).contains(&n) {
                        return Err(ConfigError::BadValue(
                            "all or a size in bytes (2..=8388608)",
                        ));
                    }
                    Sizes::Single(n)
                }
            }
            "iters" => {
                let n = parse_u32(v, "an iteration count 5..=16777216")?;
                if n < crate::stats::MIN_ITERATIONS as u32 || n > MAX_ITERATIONS {
                    return Err(ConfigError::BadValue("an iteration count 5..=16777216"));
                }
                self.iterations = n;
            }
            "inline" => {
                let n = parse_u32(v, "an inline limit 0..=1024")?;
                if n > MAX_INLINE {
                    return Err(ConfigError::BadValue("an inline limit 0..=1024"));
                }
                self.inline_limit = Some(n);
            }
            "completion" => {
                self.completion = if v.eq_ignore_ascii_case("poll") {
                    Completion::Poll
                } else if v.eq_ignore_ascii_case("event") {
                    Completion::Event
                } else {
                    return Err(ConfigError::BadValue("poll or event"));
                }
            }
            "mtu" => {
                self.mtu = Some(match parse_u32(v, "256, 512, 1024, 2048 or 4096")? {
                    256 => Mtu::Mtu256,
                    512 => Mtu::Mtu512,
                    1024 => Mtu::Mtu1024,
                    2048 => Mtu::Mtu2048,
                    4096 => Mtu::Mtu4096,
                    _ => return Err(ConfigError::BadValue("256, 512, 1024, 2048 or 4096")),
                })
            }
            "ib_port" => {
                let n = parse_u32(v, "a port number 1..=2")?;
                if !(1..=2).contains(&n) {
                    return Err(ConfigError::BadValue("a port number 1..=2"));
                }
                self.port = n as u8;
            }
            "role" => {
                self.role = if v.eq_ignore_ascii_case("client") {
                    Role::Client
                } else if v.eq_ignore_ascii_case("server") {
                    Role::Server
                } else {
                    return Err(ConfigError::BadValue("client or server"));
                }
            }
            "peer_lid" => {
                let n = parse_u16(v, "a unicast LID 1..=0xBFFF")?;
                if !(1..=0xBFFF).contains(&n) {
                    return Err(ConfigError::BadValue("a unicast LID 1..=0xBFFF"));
                }
                self.peer_lid = Some(n);
            }
            "loss_limit" => self.max_losses_per_size = parse_u32(v, "a loss count")?,
            "timeout_ms" => {
                let n = parse_u32(v, "milliseconds 1..=60000")?;
                if !(1..=60_000).contains(&n) {
                    return Err(ConfigError::BadValue("milliseconds 1..=60000"));
                }
                self.wait_timeout_ns = u64::from(n) * 1_000_000;
            }
            "peer_timeout_ms" => {
                let n = parse_u32(v, "milliseconds >= 1")?;
                if n == 0 {
                    return Err(ConfigError::BadValue("milliseconds >= 1"));
                }
                self.peer_timeout_ns = u64::from(n) * 1_000_000;
            }
            "probe_lids" => {
                let (a, b) = v
                    .split_once('-')
                    .ok_or(ConfigError::BadValue("a LID range A-B"))?;
                let (a, b) = (
                    parse_u16(a, "a LID range A-B")?,
                    parse_u16(b, "a LID range A-B")?,
                );
                if a == 0 || a > b || b > 0xBFFF || b - a >= 1024 {
                    return Err(ConfigError::BadValue(
                        "a LID range A-B within 1..=0xBFFF, at most 1024 LIDs",
                    ));
                }
                self.probe_lids = (a, b);
            }
            "rdv_qpn" => {
                let n = parse_u32(v, "a QP number 2..=0xFFFFFF")?;
                if !(2..=0xFF_FFFF).contains(&n) {
                    return Err(ConfigError::BadValue("a QP number 2..=0xFFFFFF"));
                }
                self.rdv_qpn = Some(n);
            }
            "peer_rdv_qpn" => {
                let n = parse_u32(v, "a QP number 2..=0xFFFFFF")?;
                if !(2..=0xFF_FFFF).contains(&n) {
                    return Err(ConfigError::BadValue("a QP number 2..=0xFFFFFF"));
                }
                self.peer_rdv_qpn = Some(n);
            }
            "verify" => {
                self.verify = match v {
                    "1" | "true" | "on" => true,
                    "0" | "false" | "off" => false,
                    _ => return Err(ConfigError::BadValue("0 or 1")),
                }
            }
            _ => return Err(ConfigError::UnknownKey),
        }
        Ok(())
    }

    /// Checks the combination (perftest's `check_mtu` and iteration rules).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.iterations < crate::stats::MIN_ITERATIONS as u32 || self.iterations > MAX_ITERATIONS
        {
            return Err(ConfigError::Invalid("iterations outside 5..=2^24"));
        }
        if self.port == 0 {
            return Err(ConfigError::Invalid("port 0"));
        }
        if self.wait_timeout_ns == 0 || self.peer_timeout_ns == 0 {
            return Err(ConfigError::Invalid("zero timeout"));
        }
        if let Sizes::Single(n) = self.sizes {
            if !(MIN_SIZE..=MAX_SWEEP_SIZE).contains(&n) {
                return Err(ConfigError::Invalid("size outside 2 B..=8 MiB"));
            }
            if self.transport == Transport::Ud {
                if let Some(m) = self.mtu {
                    if n > m.bytes() {
                        return Err(ConfigError::Invalid("UD message larger than the MTU"));
                    }
                }
            }
        }
        match (self.test, self.transport) {
            // perftest's own refusal (`change_conn_type`).
            (Test::WriteLat, Transport::Ud) => {
                return Err(ConfigError::Invalid(
                    "UD connection only possible in SEND verb (write_lat runs over RC or UC)",
                ))
            }
            (Test::SendLat, Transport::Rc) => {
                return Err(ConfigError::Invalid(
                    "send_lat over RC is not implemented (RC is for write_lat)",
                ))
            }
            _ => {}
        }
        if self.test == Test::WriteLat && self.completion == Completion::Event {
            return Err(ConfigError::Invalid(
                "write_lat polls memory for the peer's write: completion=event does not apply",
            ));
        }
        if self.inline_limit.is_some_and(|i| i > MAX_INLINE) {
            return Err(ConfigError::Invalid("inline limit above 1024"));
        }
        if self.role == Role::Server && self.peer_rdv_qpn.is_some() {
            return Err(ConfigError::Invalid(
                "peer_rdv_qpn is a client key (a server answers the Hello's source QPN)",
            ));
        }
        Ok(())
    }

    /// This node's rendezvous QPN on a device reserving `reserved_qps` QPNs: `rdv_qpn`, else
    /// the well-known one.
    pub fn local_rdv_qpn(&self, reserved_qps: u32) -> u32 {
        self.rdv_qpn
            .unwrap_or_else(|| crate::rendezvous::well_known_qpn(reserved_qps))
    }

    /// The QPN a client's Hellos go to: `peer_rdv_qpn`, else this node's own rendezvous QPN.
    pub fn hello_qpn(&self, reserved_qps: u32) -> u32 {
        self.peer_rdv_qpn
            .unwrap_or_else(|| self.local_rdv_qpn(reserved_qps))
    }

    /// The inline limit in force (`-I` or perftest's default for the test and transport:
    /// 220 B for write_lat, 236 B / 188 B for send_lat over UC / UD).
    pub fn inline(&self) -> u32 {
        self.inline_limit.unwrap_or(match self.test {
            Test::WriteLat => DEFAULT_INLINE_WRITE,
            Test::SendLat => self.transport.default_inline(),
        })
    }

    /// perftest's receive depth for UC/UD latency tests: `min(iters, 16000)`.
    pub fn rx_depth(&self) -> u32 {
        self.iterations.min(MAX_RX_DEPTH)
    }

    /// The path MTU: the configured one, else the port's active MTU with perftest's
    /// ConnectX-3 rule (an active 4096 is used as 2048), never above the active MTU.
    pub fn effective_mtu(&self, active: Mtu) -> Mtu {
        match self.mtu {
            Some(m) => m.min(active),
            None if active == Mtu::Mtu4096 => Mtu::Mtu2048,
            None => active,
        }
    }

    /// The sizes this run measures for a given path MTU, in order.
    pub fn size_list(&self, mtu: Mtu) -> SizeIter {
        let max = match self.transport {
            Transport::Ud => mtu.bytes(),
            Transport::Uc | Transport::Rc => MAX_SWEEP_SIZE,
        };
        match self.sizes {
            Sizes::All => SizeIter {
                next: 2,
                last: max,
                single: false,
            },
            Sizes::Single(n) => SizeIter {
                next: n,
                last: n,
                single: true,
            },
        }
    }
}

/// Iterator over the sizes of a run (powers of two for `-a`).
#[derive(Clone, Copy, Debug)]
pub struct SizeIter {
    next: u32,
    last: u32,
    single: bool,
}

impl Iterator for SizeIter {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        if self.next == 0 || self.next > self.last {
            return None;
        }
        let n = self.next;
        self.next = if self.single {
            0
        } else {
            n.checked_mul(2).unwrap_or(0)
        };
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_mirror_perftest_flags() {
        let mut c = PingPongConfig::default();
        c.apply("transport", "uc").unwrap();
        c.apply("size", "all").unwrap();
        c.apply("iters", "20").unwrap();
        c.apply("inline", "64").unwrap();
        c.apply("completion", "event").unwrap();
        c.apply("mtu", "1024").unwrap();
        c.apply("ib_port", "2").unwrap();
        c.apply("role", "client").unwrap();
        c.apply("peer_lid", "0x12").unwrap();
        c.apply("loss_limit", "3").unwrap();
        c.apply("timeout_ms", "5").unwrap();
        c.apply("probe_lids", "1-16").unwrap();
        c.apply("verify", "1").unwrap();
        assert_eq!(c.transport, Transport::Uc);
        assert_eq!(c.sizes, Sizes::All);
        assert_eq!(c.iterations, 20);
        assert_eq!(c.inline(), 64);
        assert_eq!(c.completion, Completion::Event);
        assert_eq!(c.mtu, Some(Mtu::Mtu1024));
        assert_eq!(c.port, 2);
        assert_eq!(c.role, Role::Client);
        assert_eq!(c.peer_lid, Some(0x12));
        assert_eq!(c.max_losses_per_size, 3);
        assert_eq!(c.wait_timeout_ns, 5_000_000);
        assert_eq!(c.probe_lids, (1, 16));
        assert!(c.verify);
        c.apply("size", "4096").unwrap();
        assert_eq!(c.sizes, Sizes::Single(4096));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn bad_values_are_typed_errors() {
        let mut c = PingPongConfig::default();
        let before = c;
        assert_eq!(c.apply("nope", "1"), Err(ConfigError::UnknownKey));
        for (k, v) in [
            ("transport", "RD"),
            ("test", "read_lat"),
            ("size", "0"),
            ("size", "1"),
            ("size", "8388609"),
            ("size", "x"),
            ("iters", "4"),
            ("iters", "-1"),
            ("inline", "1025"),
            ("completion", "spin"),
            ("mtu", "3000"),
            ("ib_port", "0"),
            ("role", "both"),
            ("peer_lid", "0"),
            ("peer_lid", "0xC000"),
            ("peer_lid", "70000"),
            ("timeout_ms", "0"),
            ("probe_lids", "5-1"),
            ("probe_lids", "1-5000"),
            ("rdv_qpn", "1"),
            ("peer_rdv_qpn", "0"),
            ("peer_rdv_qpn", "1"),
            ("peer_rdv_qpn", "0x1000000"),
            ("peer_rdv_qpn", "0x"),
            ("peer_rdv_qpn", "qp"),
            ("peer_rdv_qpn", ""),
            ("verify", "maybe"),
        ] {
            assert!(
                matches!(c.apply(k, v), Err(ConfigError::BadValue(_))),
                "{k}={v}"
            );
        }
        assert_eq!(c, before, "refused values change nothing");
    }

    #[test]
    fn write_lat_runs_over_rc_and_uc_only() {
        let mut c = PingPongConfig::new(Transport::Ud, Role::Client);
        assert_eq!(c.test, Test::SendLat, "send_lat is the default");
        c.apply("test", "write_lat").unwrap();
        assert_eq!(c.test, Test::WriteLat);
        assert_eq!(
            c.validate(),
            Err(ConfigError::Invalid(
                "UD connection only possible in SEND verb (write_lat runs over RC or UC)"
            ))
        );
        c.apply("transport", "rc").unwrap();
        assert_eq!(c.transport, Transport::Rc);
        assert!(c.validate().is_ok());
        assert_eq!(c.inline(), 220, "perftest's write inline default");
        c.apply("transport", "UC").unwrap();
        assert!(c.validate().is_ok());
        assert_eq!(c.inline(), 220);
        c.sizes = Sizes::All;
        let v: Vec<u32> = c.size_list(Mtu::Mtu2048).collect();
        assert_eq!(
            (v.first(), v.last(), v.len()),
            (Some(&2), Some(&(8 << 20)), 23)
        );
        c.apply("completion", "event").unwrap();
        assert!(matches!(c.validate(), Err(ConfigError::Invalid(_))));
        c.apply("completion", "poll").unwrap();
        c.apply("inline", "0").unwrap();
        assert_eq!(c.inline(), 0);
        // send_lat over RC is refused, not silently run as something else.
        c.apply("test", "send_lat").unwrap();
        c.apply("transport", "RC").unwrap();
        assert!(matches!(c.validate(), Err(ConfigError::Invalid(_))));
        assert_eq!(Test::WriteLat.name(), "write_lat");
        assert_eq!(Transport::Rc.name(), "RC");
    }

    #[test]
    fn peer_rdv_qpn_defaults_to_rdv_qpn_and_is_a_client_key() {
        let mut c = PingPongConfig::new(Transport::Ud, Role::Client);
        assert_eq!(c.peer_rdv_qpn, None);
        assert_eq!(c.rdv_qpn, None);
        assert_eq!(c.local_rdv_qpn(64), 0x7F, "derived from the device");
        assert_eq!(c.local_rdv_qpn(128), 0xFF);
        assert_eq!(c.hello_qpn(256), 0x1FF);
        c.apply("rdv_qpn", "0x70").unwrap();
        assert_eq!(
            c.local_rdv_qpn(128),
            0x70,
            "the key overrides the device's rule"
        );
        assert_eq!(c.hello_qpn(128), 0x70, "follows rdv_qpn when not given");
        c.apply("peer_rdv_qpn", "0x208").unwrap();
        assert_eq!(c.peer_rdv_qpn, Some(0x208));
        assert_eq!(c.hello_qpn(128), 0x208);
        assert_eq!(c.rdv_qpn, Some(0x70), "the local QPN is unchanged");
        c.apply("peer_rdv_qpn", "16777215").unwrap();
        assert_eq!(c.hello_qpn(64), 0xFF_FFFF);
        assert!(c.validate().is_ok());
        c.apply("role", "server").unwrap();
        assert_eq!(
            c.validate(),
            Err(ConfigError::Invalid(
                "peer_rdv_qpn is a client key (a server answers the Hello's source QPN)"
            ))
        );
    }

    #[test]
    fn perftest_defaults_and_mtu_rule() {
        let ud = PingPongConfig::new(Transport::Ud, Role::Client);
        let uc = PingPongConfig::new(Transport::Uc, Role::Client);
        assert_eq!(ud.inline(), 188);
        assert_eq!(uc.inline(), 236);
        assert_eq!(ud.iterations, 1000);
        assert_eq!(ud.rx_depth(), 1000);
        let mut big = ud;
        big.iterations = 20_000;
        assert_eq!(big.rx_depth(), 16_000);
        // ConnectX-3 rule: an active 4096 MTU is used as 2048 unless configured.
        assert_eq!(ud.effective_mtu(Mtu::Mtu4096), Mtu::Mtu2048);
        assert_eq!(ud.effective_mtu(Mtu::Mtu1024), Mtu::Mtu1024);
        let mut m = ud;
        m.mtu = Some(Mtu::Mtu4096);
        assert_eq!(m.effective_mtu(Mtu::Mtu4096), Mtu::Mtu4096);
        assert_eq!(m.effective_mtu(Mtu::Mtu2048), Mtu::Mtu2048);
    }

    #[test]
    fn sweeps_cover_perftests_sizes() {
        let mut ud = PingPongConfig::new(Transport::Ud, Role::Client);
        ud.sizes = Sizes::All;
        let v: Vec<u32> = ud.size_list(Mtu::Mtu2048).collect();
        assert_eq!(v.len(), 11);
        assert_eq!(v.first(), Some(&2));
        assert_eq!(v.last(), Some(&2048));
        let mut uc = ud;
        uc.transport = Transport::Uc;
        let v: Vec<u32> = uc.size_list(Mtu::Mtu2048).collect();
        assert_eq!(v.len(), 23);
        assert_eq!(v.last(), Some(&(8 << 20)));
        assert!(v.windows(2).all(|w| w[1] == 2 * w[0]));
        uc.sizes = Sizes::Single(100);
        assert_eq!(uc.size_list(Mtu::Mtu256).collect::<Vec<_>>(), vec![100]);
        ud.sizes = Sizes::Single(4096);
        ud.mtu = Some(Mtu::Mtu2048);
        assert!(ud.validate().is_err());
    }
}
