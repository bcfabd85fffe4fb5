//! `ibkern-delegate check`: a client on Linux's verbs that connects to a delegate the way an
//! ibkern node does (a Connect on the rendezvous QP, then RC) and runs every op once, checking
//! each answer, then reads a file through a region it was granted read-only and writes to it,
//! which the HCA must refuse. It proves a delegate on a fabric without an ibkern node.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use delegate_wire::connect::{self, Kind, Setup};
use delegate_wire::*;
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::AccessFlags;

use crate::rc::{Connection, Hca, Received};
use crate::rdv::Rendezvous;
use crate::serve::random_u32;

/// rdma-core's IBV_WC_REM_ACCESS_ERR.
const REM_ACCESS_ERR: u32 = 10;

pub struct CheckConfig {
    pub peer_lid: u16,
    pub peer_qpn: u32,
    pub timeout: Duration,
}

struct Client {
    conn: Connection,
    tag: u32,
    timeout: Duration,
    /// A buffer of the client's that the delegate's RDMA reads and writes.
    _mr: Arc<MemoryRegion>,
    buf: Vec<u8>,
    rkey: u32,
}

fn fail(what: impl std::fmt::Display) -> io::Error {
    io::Error::other(what.to_string())
}

impl Client {
    /// Sends `r` and returns the reply (or the failure), waiting at most the timeout.
    fn call(&mut self, r: Request<'_>) -> io::Result<(Vec<u8>, Duration)> {
        self.tag += 1;
        let t0 = Instant::now();
        let n = r.emit(self.tag, self.conn.send_buffer()).map_err(fail)?;
        self.conn.send(n).map_err(|e| {
            fail(format!(
                "{}: send failed, status {}",
                r.op().name(),
                e.status
            ))
        })?;
        let deadline = t0 + self.timeout;
        loop {
            match self.conn.poll_recv() {
                Some(Received::Message { slot, len }) => {
                    let m = self.conn.message(slot, len).to_vec();
                    self.conn.repost(slot)?;
                    let p = Packet::new_checked(&m[..]).map_err(fail)?;
                    if p.tag() != self.tag {
                        return Err(fail(format!(
                            "{}: reply to tag {} (expected {})",
                            r.op().name(),
                            p.tag(),
                            self.tag
                        )));
                    }
                    return Ok((m.clone(), t0.elapsed()));
                }
                Some(Received::Failed(s)) => {
                    return Err(fail(format!(
                        "{}: receive failed, status {s}",
                        r.op().name()
                    )))
                }
                None if Instant::now() > deadline => {
                    return Err(fail(format!(
                        "{}: no reply within {:?}",
                        r.op().name(),
                        self.timeout
                    )))
                }
                None => std::thread::sleep(Duration::from_micros(20)),
            }
        }
    }

    /// A call that must succeed.
    fn ok(&mut self, r: Request<'_>) -> io::Result<Vec<u8>> {
        let (m, t) = self.call(r)?;
        let p = Packet::new_checked(&m[..]).map_err(fail)?;
        match Reply::parse(&p).map_err(fail)? {
            Ok(reply) => {
                println!(
                    "ibkern-delegate check: {} ok in {} us: {}",
                    r.op().name(),
                    t.as_micros(),
                    describe(&reply)
                );
                Ok(m)
            }
            Err(f) => Err(fail(format!("{}: {f}", r.op().name()))),
        }
    }
}

fn reply(m: &[u8]) -> Reply<'_> {
    let p = Packet::new_checked(m).expect("checked by Client::ok");
    Reply::parse(&p).expect("checked").expect("a success")
}

fn describe(r: &Reply<'_>) -> String {
    match r {
        Reply::Null { payload } => format!("{} bytes echoed", payload.len()),
        Reply::Clock { realtime_ns, .. } => format!(
            "delegate's time {}.{:09} s",
            realtime_ns / 1_000_000_000,
            realtime_ns % 1_000_000_000
        ),
        Reply::Open { handle, size } => format!("handle {handle}, size {size}"),
        Reply::Pread(Read::Inline(d)) => format!("{} bytes inline", d.len()),
        Reply::Pread(Read::Remote(n)) => format!("{n} bytes by RDMA WRITE"),
        Reply::Pwrite { count } => format!("{count} bytes"),
        Reply::Fstat(s) => format!("size {}, mode {:o}", s.size, s.perm),
        Reply::ListDir { next, entries } => format!("{} entries, next {next}", entries.len()),
        Reply::MapRegion(i) => format!(
            "region {} at 0x{:x}, {} bytes, rkey 0x{:x}, access {}",
            i.region,
            i.addr,
            i.len,
            i.rkey,
            i.access.bits()
        ),
        _ => String::new(),
    }
}

pub fn check(hca: &Hca, cfg: &CheckConfig) -> io::Result<()> {
    let mut rdv = Rendezvous::new(&hca.ctx, hca.port)?;
    let mut conn = Connection::new(hca, 4, random_u32())?;
    let session = random_u32() | 1;
    let connect_msg = Setup::connect(
        session,
        hca.lid,
        hca.guid,
        conn.qpn(),
        conn.psn,
        hca.mtu,
        4,
        30_000,
    );
    let mut b = [0u8; connect::LEN];
    connect_msg.emit(&mut b).map_err(fail)?;
    let t0 = Instant::now();
    let mut gap = Duration::from_millis(10);
    let accept = 'found: loop {
        rdv.send(cfg.peer_lid, cfg.peer_qpn, &b)?;
        let until = Instant::now() + gap;
        while Instant::now() < until {
            if let Some(d) = rdv.poll()? {
                if let Ok(Some(s)) = Setup::parse(&d.bytes[..d.len]) {
                    if s.session == session && s.kind == Kind::Accept {
                        break 'found (s, d.slid);
                    }
                    if s.session == session && s.kind == Kind::Refuse {
                        return Err(fail(format!(
                            "refused: {}",
                            s.reason.map_or("?", |r| r.name())
                        )));
                    }
                }
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        if t0.elapsed() > cfg.timeout {
            return Err(fail(format!(
                "no Accept from LID 0x{:04x} QPN 0x{:x} within {:?}",
                cfg.peer_lid, cfg.peer_qpn, cfg.timeout
            )));
        }
        gap = (gap * 2).min(Duration::from_millis(160));
    };
    let (s, slid) = accept;
    conn.connect(slid, s.qpn, s.psn, s.mtu)?;
    println!(
        "ibkern-delegate check: connected as node {} to LID 0x{slid:04x} QPN 0x{:06x} in {} ms (credits {}, lease {} ms)",
        s.node,
        s.qpn,
        t0.elapsed().as_millis(),
        s.credits,
        s.lease_ms
    );
    let mut buf = vec![0u8; 1 << 16];
    // SAFETY: `buf` lives in the client beside the MR, which it outlives (dropped after it in
    // `Client`'s field order: `_mr` before `buf`).
    let mr = unsafe {
        conn.pd().reg_mr(
            buf.as_mut_ptr() as usize,
            buf.len(),
            AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead,
        )
    }
    .map_err(fail)?;
    let rkey = mr.rkey();
    let mut c = Client {
        conn,
        tag: 0,
        timeout: cfg.timeout,
        _mr: mr,
        buf,
        rkey,
    };
    run_calls(&mut c, hca.guid)
}

fn run_calls(c: &mut Client, guid: u64) -> io::Result<()> {
    let expect = |ok: bool, what: &str| {
        if ok {
            Ok(())
        } else {
            Err(fail(what.to_string()))
        }
    };
    let m = c.ok(Request::Null { payload: b"ping" })?;
    expect(
        reply(&m) == Reply::Null { payload: b"ping" },
        "null: payload not echoed",
    )?;
    c.ok(Request::Clock)?;
    let dir = format!("check-{guid:016x}");
    let dir_path = Path::new(dir.as_bytes()).map_err(fail)?;
    let (m, _) = c.call(Request::Mkdir {
        mode: 0o755,
        path: dir_path,
    })?;
    let p = Packet::new_checked(&m[..]).map_err(fail)?;
    match Reply::parse(&p).map_err(fail)? {
        Ok(_) => println!("ibkern-delegate check: mkdir ok"),
        Err(f) if f.code == ErrorCode::Exists => println!("ibkern-delegate check: mkdir: exists"),
        Err(f) => return Err(fail(format!("mkdir: {f}"))),
    }
    let file = format!("{dir}/data.bin");
    let fpath = Path::new(file.as_bytes()).map_err(fail)?;
    let flags = OpenFlags::READ
        .union(OpenFlags::WRITE)
        .union(OpenFlags::CREATE)
        .union(OpenFlags::TRUNCATE);
    let Reply::Open { handle, .. } = reply(&c.ok(Request::Open {
        flags,
        mode: 0o644,
        path: fpath,
    })?) else {
        return Err(fail("open: not an open reply"));
    };
    c.ok(Request::Pwrite {
        handle,
        offset: 0,
        source: Source::Inline(b"inline bytes;"),
    })?;
    let addr = c.buf.as_ptr() as u64;
    for (i, b) in c.buf.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let src = Source::Remote {
        addr,
        rkey: c.rkey,
        len: 60_000,
    };
    c.ok(Request::Pwrite {
        handle,
        offset: 13,
        source: src,
    })?;
    c.ok(Request::Fsync { handle })?;
    let Reply::Fstat(st) = reply(&c.ok(Request::Fstat { handle })?) else {
        return Err(fail("fstat"));
    };
    expect(st.size == 60_013, "fstat: size is not 60013")?;
    let want: Vec<u8> = c.buf[..60_000].to_vec();
    c.buf.fill(0);
    let place = Place::Remote { addr, rkey: c.rkey };
    let m = c.ok(Request::Pread {
        handle,
        offset: 13,
        len: 65_536,
        place,
    })?;
    expect(
        reply(&m) == Reply::Pread(Read::Remote(60_000)),
        "pread: count",
    )?;
    expect(
        c.buf[..60_000] == want[..],
        "pread: the bytes written by RDMA WRITE differ",
    )?;
    let m = c.ok(Request::Pread {
        handle,
        offset: 0,
        len: 13,
        place: Place::Inline,
    })?;
    expect(
        reply(&m) == Reply::Pread(Read::Inline(b"inline bytes;")),
        "pread inline",
    )?;
    let m = c.ok(Request::ListDir {
        cookie: 0,
        path: dir_path,
    })?;
    let Reply::ListDir { entries, .. } = reply(&m) else {
        return Err(fail("listdir"));
    };
    expect(
        entries.iter().any(|e| e.name == b"data.bin"),
        "listdir: data.bin missing",
    )?;
    c.ok(Request::Log {
        level: LogLevel::Info,
        text: b"ibkern-delegate check says hello",
    })?;
    // A region of anonymous memory: write, add and read back one-sided. ConnectX-3's atomics
    // act on big-endian 64-bit words (and return the old value as such), so the word is
    // written big-endian.
    let all = Access::READ.union(Access::WRITE).union(Access::ATOMIC);
    let m = c.ok(Request::MapRegion {
        access: all,
        backing: Backing::Anonymous { len: 4096 },
    })?;
    let Reply::MapRegion(r) = reply(&m) else {
        return Err(fail("map_region"));
    };
    crate::remote::Remote::staging(&mut c.conn)[..8].copy_from_slice(&41u64.to_be_bytes());
    c.conn
        .rdma(true, 8, r.addr, r.rkey)
        .map_err(|e| fail(format!("region WRITE: status {}", e.status)))?;
    let old = c
        .conn
        .atomic(r.addr, r.rkey, 1, None)
        .map_err(|e| fail(format!("region FETCH_ADD: status {}", e.status)))?;
    expect(
        old == 41,
        &format!("region FETCH_ADD: old value {old:#x}, not 41"),
    )?;
    c.conn
        .rdma(false, 8, r.addr, r.rkey)
        .map_err(|e| fail(format!("region READ: status {}", e.status)))?;
    let now = u64::from_be_bytes(
        crate::remote::Remote::staging(&mut c.conn)[..8]
            .try_into()
            .expect("8"),
    );
    expect(
        now == 42,
        &format!("region READ: the value is {now:#x}, not 42"),
    )?;
    println!("ibkern-delegate check: region WRITE, FETCH_ADD and READ one-sided ok");
    c.ok(Request::UnmapRegion { region: r.region })?;
    c.ok(Request::Close { handle })?;
    // A region of the file granted READ only: it reads the file's bytes one-sided, and the
    // HCA must refuse the WRITE (which ends the connection).
    let m = c.ok(Request::MapRegion {
        access: Access::READ,
        backing: Backing::File {
            path: fpath,
            offset: 0,
            len: 4096,
        },
    })?;
    let Reply::MapRegion(r) = reply(&m) else {
        return Err(fail("map_region"));
    };
    expect(
        r.access == Access::READ,
        "read-only region: access granted is not READ",
    )?;
    c.conn
        .rdma(false, 13, r.addr, r.rkey)
        .map_err(|e| fail(format!("read-only region READ: status {}", e.status)))?;
    expect(
        crate::remote::Remote::staging(&mut c.conn)[..13] == *b"inline bytes;",
        "read-only region READ: not the file's bytes",
    )?;
    match c.conn.rdma(true, 8, r.addr, r.rkey) {
        Err(e) if e.status == REM_ACCESS_ERR => {
            println!("ibkern-delegate check: WRITE to a read-only region refused by the HCA (status {REM_ACCESS_ERR})");
        }
        Err(e) => {
            return Err(fail(format!(
                "WRITE to a read-only region: status {} (expected {REM_ACCESS_ERR})",
                e.status
            )))
        }
        Ok(()) => return Err(fail("WRITE to a read-only region succeeded")),
    }
    println!("ibkern-delegate check: PASS");
    Ok(())
}
