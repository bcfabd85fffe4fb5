//! The delegate's loop: set-up datagrams on the rendezvous QP, each node's calls on its RC
//! connection, leases. One thread polls everything; one node's call is answered before the
//! next message is taken.

use std::collections::{BTreeMap, VecDeque};
use std::io::{self, Write};
use std::time::{Duration, Instant};

use delegate_wire::connect::{self, Kind, Reason, Setup};
use delegate_wire::{MAX_MESSAGE, VERSION};

use crate::rc::{Connection, Hca};
use crate::rdv::{Datagram, Rendezvous};
use crate::service::{Delegate, Outcome};

/// How the delegate serves.
#[derive(Clone, Copy, Debug)]
pub struct ServeConfig {
    /// Calls a node may have outstanding (receives posted per node).
    pub credits: u16,
    /// End once no node has been connected for this long (after the first one left, or from
    /// the start); `None`: serve until killed.
    pub idle_exit: Option<Duration>,
}

struct Peer {
    conn: Connection,
    lid: u16,
    session: u32,
    accept: [u8; connect::LEN],
}

/// Refusals remembered so a repeated Connect gets the same answer.
const REFUSALS_KEPT: usize = 64;

/// A random 32-bit number from the kernel.
pub fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: getrandom writes at most the 4 bytes it is given.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 4, 0) };
    if n == 4 {
        u32::from_ne_bytes(b)
    } else {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.subsec_nanos())
    }
}

pub fn serve(hca: &Hca, delegate: &mut Delegate, cfg: ServeConfig, root: &str) -> io::Result<()> {
    let mut rdv = Rendezvous::new(&hca.ctx, hca.port)?;
    println!(
        "ibkern-delegate: listening on LID 0x{:04x} rendezvous QPN 0x{:06x} ({} port {}), root {root}",
        hca.lid,
        rdv.qpn(),
        hca.name,
        hca.port
    );
    io::stdout().flush()?;
    let mut peers: BTreeMap<u32, Peer> = BTreeMap::new();
    let mut refused: VecDeque<((u16, u32), [u8; connect::LEN])> = VecDeque::new();
    let mut out = vec![0u8; MAX_MESSAGE];
    let mut msg = vec![0u8; MAX_MESSAGE];
    let mut idle_since = Instant::now();
    let mut quiet_rounds = 0u32;
    loop {
        let mut busy = false;
        while let Some(d) = rdv.poll()? {
            busy = true;
            setup(hca, delegate, &cfg, &mut rdv, &mut peers, &mut refused, &d)?;
        }
        let ids: Vec<u32> = peers.keys().copied().collect();
        for id in ids {
            let Some(peer) = peers.get_mut(&id) else {
                continue;
            };
            let mut end = None;
            for _ in 0..cfg.credits {
                match peer.conn.poll_recv() {
                    None => break,
                    Some(crate::rc::Received::Failed(status)) => {
                        end = Some(format!("its QP failed, receive completion status {status}"));
                        break;
                    }
                    Some(crate::rc::Received::Message { slot, len }) => {
                        busy = true;
                        msg[..len].copy_from_slice(peer.conn.message(slot, len));
                        peer.conn.repost(slot)?;
                        match delegate.call(
                            id,
                            &mut peer.conn,
                            &msg[..len],
                            &mut out,
                            Instant::now(),
                        ) {
                            Outcome::Reply(n) | Outcome::Goodbye(n) => {
                                peer.conn.send_buffer()[..n].copy_from_slice(&out[..n]);
                                if let Err(e) = peer.conn.send(n) {
                                    end = Some(format!(
                                        "its reply was not delivered, completion status {}",
                                        e.status
                                    ));
                                    break;
                                }
                                if delegate.node(id).is_none() {
                                    end = Some(String::new());
                                    break;
                                }
                            }
                            Outcome::Lost => {
                                end = Some(String::new());
                                break;
                            }
                        }
                    }
                }
            }
            if let Some(why) = end {
                if !why.is_empty() {
                    delegate.release(id, &why);
                }
                peers.remove(&id);
            }
        }
        for id in delegate.expired(Instant::now()) {
            delegate.release(id, "lease passed without a call");
            peers.remove(&id);
        }
        if !peers.is_empty() {
            idle_since = Instant::now();
        } else if cfg.idle_exit.is_some_and(|d| idle_since.elapsed() > d) {
            println!(
                "ibkern-delegate: no node for {:?}: exiting",
                cfg.idle_exit.unwrap_or_default()
            );
            return Ok(());
        }
        if busy {
            quiet_rounds = 0;
        } else {
            quiet_rounds += 1;
            if quiet_rounds > 2000 {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn setup(
    hca: &Hca,
    delegate: &mut Delegate,
    cfg: &ServeConfig,
    rdv: &mut Rendezvous,
    peers: &mut BTreeMap<u32, Peer>,
    refused: &mut VecDeque<((u16, u32), [u8; connect::LEN])>,
    d: &Datagram,
) -> io::Result<()> {
    let s = match Setup::parse(&d.bytes[..d.len]) {
        Ok(Some(s)) if s.kind == Kind::Connect => s,
        // Another protocol on the rendezvous QP, an answer (the delegate sends those), or a
        // malformed set-up message: nothing to answer.
        _ => return Ok(()),
    };
    if let Some(p) = peers
        .values()
        .find(|p| p.lid == d.slid && p.session == s.session)
    {
        return rdv.send(d.slid, d.src_qp, &p.accept);
    }
    if let Some((_, r)) = refused.iter().find(|(k, _)| *k == (d.slid, s.session)) {
        return rdv.send(d.slid, d.src_qp, r);
    }
    let refuse =
        |rdv: &mut Rendezvous, refused: &mut VecDeque<_>, reason: Reason| -> io::Result<()> {
            println!(
                "ibkern-delegate: refused LID 0x{:04x}: {}",
                d.slid,
                reason.name()
            );
            let mut b = [0u8; connect::LEN];
            Setup::refuse(&s, hca.lid, hca.guid, reason)
                .emit(&mut b)
                .map_err(|e| io::Error::other(e.to_string()))?;
            if refused.len() == REFUSALS_KEPT {
                refused.pop_front();
            }
            refused.push_back(((d.slid, s.session), b));
            rdv.send(d.slid, d.src_qp, &b)
        };
    if s.protocol != VERSION {
        return refuse(rdv, refused, Reason::Version);
    }
    let admitted = match delegate.admit(d.slid, s.guid, s.lease_ms, Instant::now()) {
        Ok(a) => a,
        Err(r) => return refuse(rdv, refused, r),
    };
    if let Some(old) = admitted.replaced {
        peers.remove(&old);
    }
    let mtu = s.mtu.min(hca.mtu);
    let conn = Connection::new(hca, usize::from(cfg.credits), crate::serve::random_u32())
        .and_then(|mut c| c.connect(d.slid, s.qpn, s.psn, mtu).map(|_| c));
    let conn = match conn {
        Ok(c) => c,
        Err(e) => {
            println!("ibkern-delegate: LID 0x{:04x}: {e}", d.slid);
            delegate.release(admitted.id, "connection set-up failed");
            return refuse(rdv, refused, Reason::Resources);
        }
    };
    let accept = Setup {
        kind: Kind::Accept,
        protocol: VERSION,
        mtu,
        session: s.session,
        node: admitted.id,
        lid: hca.lid,
        qpn: conn.qpn(),
        psn: conn.psn,
        credits: cfg.credits,
        max_message: MAX_MESSAGE as u16,
        lease_ms: u32::try_from(admitted.lease.as_millis()).unwrap_or(u32::MAX),
        reason: None,
        guid: hca.guid,
    };
    let mut b = [0u8; connect::LEN];
    accept
        .emit(&mut b)
        .map_err(|e| io::Error::other(e.to_string()))?;
    rdv.send(d.slid, d.src_qp, &b)?;
    peers.insert(
        admitted.id,
        Peer {
            conn,
            lid: d.slid,
            session: s.session,
            accept: b,
        },
    );
    Ok(())
}
