//! The wire format both ways: every message parses back to what was emitted, every malformed
//! shape is refused with the right error, random and mutated bytes never panic, and whatever
//! parses is canonical (emitting it again gives the same bytes).

use delegate_wire::connect::{self, Kind, Reason, Setup};
use delegate_wire::*;

fn path(s: &str) -> Path<'_> {
    Path::new(s.as_bytes()).unwrap()
}

const RW: OpenFlags = OpenFlags::READ.union(OpenFlags::WRITE);

/// One request of every op and every variant of each.
fn requests() -> Vec<Request<'static>> {
    static DATA: [u8; MAX_INLINE] = [0xa5; MAX_INLINE];
    let long_path: &'static str = Box::leak("d/".repeat(MAX_PATH / 2).into_boxed_str());
    vec![
        Request::Null { payload: &[] },
        Request::Null { payload: b"ping" },
        Request::Null { payload: &DATA },
        Request::Clock,
        Request::Open {
            flags: OpenFlags::READ,
            mode: 0,
            path: path("a"),
        },
        Request::Open {
            flags: RW
                .union(OpenFlags::CREATE)
                .union(OpenFlags::EXCLUSIVE)
                .union(OpenFlags::TRUNCATE),
            mode: 0o644,
            path: Path::new(long_path.as_bytes()).unwrap(),
        },
        Request::Close { handle: 7 },
        Request::Pread {
            handle: 1,
            offset: 0,
            len: 0,
            place: Place::Inline,
        },
        Request::Pread {
            handle: 1,
            offset: u64::MAX,
            len: MAX_INLINE as u32,
            place: Place::Inline,
        },
        Request::Pread {
            handle: u32::MAX,
            offset: 4096,
            len: MAX_TRANSFER,
            place: Place::Remote {
                addr: 0x1234_5678_9abc,
                rkey: 0xdead_beef,
            },
        },
        Request::Pwrite {
            handle: 2,
            offset: 9,
            source: Source::Inline(b"hello"),
        },
        Request::Pwrite {
            handle: 2,
            offset: 9,
            source: Source::Inline(&DATA),
        },
        Request::Pwrite {
            handle: 2,
            offset: 0,
            source: Source::Remote {
                addr: 1,
                rkey: 2,
                len: 3,
            },
        },
        Request::Fstat { handle: 3 },
        Request::Fsync { handle: 4 },
        Request::Mkdir {
            mode: 0o755,
            path: path("results/node-4"),
        },
        Request::Unlink {
            dir: false,
            path: path("f"),
        },
        Request::Unlink {
            dir: true,
            path: path("d"),
        },
        Request::ListDir {
            cookie: 0,
            path: path("."),
        },
        Request::ListDir {
            cookie: 77,
            path: path("results"),
        },
        Request::Log {
            level: LogLevel::Error,
            text: b"",
        },
        Request::Log {
            level: LogLevel::Debug,
            text: &DATA,
        },
        Request::Log {
            level: LogLevel::Info,
            text: b"plan started",
        },
        Request::Log {
            level: LogLevel::Warn,
            text: b"\x1b[31mnot text\xff",
        },
        Request::MapRegion {
            access: Access::READ,
            backing: Backing::Anonymous { len: 1 },
        },
        Request::MapRegion {
            access: Access::READ.union(Access::WRITE).union(Access::ATOMIC),
            backing: Backing::File {
                path: path("region.bin"),
                offset: 8192,
                len: u64::MAX,
            },
        },
        Request::UnmapRegion { region: 5 },
        Request::Goodbye,
    ]
}

/// One reply of every op and variant, and one failure of every code.
fn replies() -> Vec<Result<Reply<'static>, Failure>> {
    static DATA: [u8; MAX_INLINE] = [0x3c; MAX_INLINE];
    let dir: &'static mut [u8] = Box::leak(vec![0u8; 4096].into_boxed_slice());
    let mut w = DirWriter::new(dir);
    assert!(w.push(FileKind::File, b"plan.txt").unwrap());
    assert!(w.push(FileKind::Directory, b"results").unwrap());
    assert!(w.push(FileKind::Symlink, &[b'x'; NAME_MAX]).unwrap());
    assert!(w.push(FileKind::Other, b"fifo").unwrap());
    let entries = w.finish();
    let mut v: Vec<Result<Reply<'static>, Failure>> = vec![
        Reply::Null { payload: &[] },
        Reply::Null { payload: &DATA },
        Reply::Clock {
            realtime_ns: 1_700_000_000_123_456_789,
            monotonic_ns: 42,
        },
        Reply::Clock {
            realtime_ns: -1,
            monotonic_ns: u64::MAX,
        },
        Reply::Open { handle: 1, size: 0 },
        Reply::Open {
            handle: u32::MAX,
            size: u64::MAX,
        },
        Reply::Close,
        Reply::Pread(Read::Inline(b"")),
        Reply::Pread(Read::Inline(&DATA)),
        Reply::Pread(Read::Remote(MAX_TRANSFER)),
        Reply::Pwrite { count: 17 },
        Reply::Fstat(Stat {
            size: 99,
            kind: FileKind::Directory,
            perm: 0o7777,
            mtime_s: -5,
            mtime_ns: 999_999_999,
        }),
        Reply::Fsync,
        Reply::Mkdir,
        Reply::Unlink,
        Reply::ListDir {
            next: 0,
            entries: DirEntries::parse(&[], 0).unwrap(),
        },
        Reply::ListDir { next: 4, entries },
        Reply::Log,
        Reply::MapRegion(RegionInfo {
            region: 2,
            rkey: 0x1000_0201,
            addr: 0x7f00_0000_0000,
            len: 1 << 30,
            access: Access::READ.union(Access::ATOMIC),
        }),
        Reply::UnmapRegion,
        Reply::Goodbye,
    ]
    .into_iter()
    .map(Ok)
    .collect();
    v.extend(
        ErrorCode::ALL
            .iter()
            .map(|&c| Err(Failure::new(c, 0xfeed_f00d))),
    );
    v
}

fn emit_request(r: &Request<'_>, tag: u32) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let n = r.emit(tag, &mut buf).unwrap();
    assert_eq!(n, r.buffer_len());
    buf.truncate(n);
    buf
}

fn emit_answer(a: &Result<Reply<'_>, Failure>, op: Op, tag: u32) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let n = match a {
        Ok(r) => r.emit(tag, &mut buf).unwrap(),
        Err(f) => f.emit(op as u8, tag, &mut buf).unwrap(),
    };
    buf.truncate(n);
    buf
}

fn parse_request(b: &[u8]) -> Result<(u32, Request<'_>), Error> {
    let p = Packet::new_checked(b)?;
    Ok((p.tag(), Request::parse(&p)?))
}

fn parse_answer(b: &[u8]) -> Result<(u32, Result<Reply<'_>, Failure>), Error> {
    let p = Packet::new_checked(b)?;
    Ok((p.tag(), Reply::parse(&p)?))
}

#[test]
fn every_request_round_trips() {
    let all = requests();
    let ops: std::collections::HashSet<Op> = all.iter().map(|r| r.op()).collect();
    assert_eq!(ops.len(), Op::ALL.len(), "every op has an example");
    for (i, r) in all.iter().enumerate() {
        let tag = 0x0100_0000 + i as u32;
        let b = emit_request(r, tag);
        assert!(b.len() <= MAX_MESSAGE);
        assert_eq!(parse_request(&b), Ok((tag, *r)), "{r:?}");
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.op(), p.is_reply(), p.status()), (Ok(r.op()), false, 0));
        // A request is not a reply.
        assert_eq!(Reply::parse(&p), Err(Error::WrongDirection));
    }
}

#[test]
fn every_reply_and_failure_round_trips() {
    for (i, a) in replies().iter().enumerate() {
        let op = match a {
            Ok(r) => r.op(),
            Err(_) => Op::ALL[i % Op::ALL.len()],
        };
        let b = emit_answer(a, op, i as u32);
        let (tag, back) = parse_answer(&b).unwrap();
        assert_eq!((tag, back), (i as u32, *a));
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.op(), Ok(op));
        assert_eq!(Request::parse(&p), Err(Error::WrongDirection));
    }
    // A failure answering an op this crate does not know keeps that op's code.
    let mut buf = [0u8; 64];
    let n = Failure::new(ErrorCode::UnknownOp, 99)
        .emit(99, 5, &mut buf)
        .unwrap();
    let p = Packet::new_checked(&buf[..n]).unwrap();
    assert_eq!(p.kind(), 99 | REPLY_BIT);
    assert_eq!(
        Reply::parse(&p),
        Ok(Err(Failure::new(ErrorCode::UnknownOp, 99)))
    );
}

#[test]
fn directory_entries_read_back_in_order_and_stop_when_full() {
    let mut buf = [0u8; MAX_BODY];
    let mut w = DirWriter::new(&mut buf);
    let name = [b'n'; NAME_MAX];
    let mut pushed = 0;
    while w.push(FileKind::File, &name).unwrap() {
        pushed += 1;
    }
    assert_eq!(pushed, DirWriter::CAPACITY / (NAME_MAX + 2));
    let e = w.finish();
    assert_eq!(e.len(), pushed);
    assert!(e.iter().all(|d| d.name == name && d.kind == FileKind::File));
    let reply = Reply::ListDir {
        next: pushed as u32,
        entries: e,
    };
    assert!(reply.buffer_len() <= MAX_MESSAGE);
    let b = emit_answer(&Ok(reply), Op::ListDir, 1);
    assert_eq!(parse_answer(&b).unwrap().1, Ok(reply));
    let mut small = [0u8; 8];
    let mut w = DirWriter::new(&mut small);
    assert_eq!(w.push(FileKind::File, b"123456"), Ok(true));
    assert_eq!(w.push(FileKind::File, b"1"), Ok(false));
    for bad in [&b""[..], b"a/b", b"a\0", &[b'x'; NAME_MAX + 1]] {
        assert_eq!(w.push(FileKind::File, bad), Err(Error::BadValue));
    }
}

/// Rewrites the header's body length to match `b`'s length (so the body's own checks are
/// what refuses it).
fn fix_len(b: &mut [u8]) {
    let n = (b.len() - HEADER_LEN) as u16;
    b[header_field::LENGTH].copy_from_slice(&n.to_be_bytes());
}

#[test]
fn every_truncation_and_extension_is_refused() {
    for r in requests() {
        let b = emit_request(&r, 1);
        for cut in 0..b.len() {
            let short = &b[..cut];
            assert!(parse_request(short).is_err(), "{r:?} cut at {cut}");
            if cut >= HEADER_LEN && !matches!(r, Request::Null { .. }) {
                let mut fixed = short.to_vec();
                fix_len(&mut fixed);
                assert!(
                    parse_request(&fixed).is_err(),
                    "{r:?} cut at {cut}, length fixed"
                );
            }
        }
        let mut long = b.clone();
        long.push(0);
        assert_eq!(parse_request(&long), Err(Error::BadLength));
        if !matches!(r, Request::Null { .. }) && long.len() <= MAX_MESSAGE {
            fix_len(&mut long);
            assert!(parse_request(&long).is_err(), "{r:?} one byte longer");
        }
    }
    for (i, a) in replies().iter().enumerate() {
        let op = a.as_ref().map_or(Op::Null, |r| r.op());
        let b = emit_answer(a, op, i as u32);
        for cut in 0..b.len() {
            assert!(parse_answer(&b[..cut]).is_err());
            if cut >= HEADER_LEN && !matches!(a, Ok(Reply::Null { .. })) {
                let mut fixed = b[..cut].to_vec();
                fix_len(&mut fixed);
                assert!(parse_answer(&fixed).is_err(), "{a:?} cut at {cut}");
            }
        }
        if !matches!(a, Ok(Reply::Null { .. })) {
            let mut long = b.clone();
            long.push(0);
            fix_len(&mut long);
            assert!(parse_answer(&long).is_err(), "{a:?} one byte longer");
        }
    }
}

fn with(b: &[u8], at: usize, v: &[u8]) -> Vec<u8> {
    let mut b = b.to_vec();
    b[at..at + v.len()].copy_from_slice(v);
    b
}

#[test]
fn every_malformed_header_is_refused_with_its_error() {
    let b = emit_request(&Request::Fstat { handle: 1 }, 9);
    assert_eq!(parse_request(&with(&b, 0, b"IBKX")), Err(Error::BadMagic));
    assert_eq!(parse_request(&with(&b, 4, &[2])), Err(Error::BadVersion(2)));
    assert_eq!(Error::BadVersion(2).code(), ErrorCode::UnsupportedVersion);
    assert_eq!(parse_request(&with(&b, 6, &[1])), Err(Error::Reserved));
    assert_eq!(parse_request(&with(&b, 7, &[1])), Err(Error::Reserved));
    assert_eq!(parse_request(&with(&b, 5, &[0])), Err(Error::UnknownOp(0)));
    assert_eq!(
        parse_request(&with(&b, 5, &[16])),
        Err(Error::UnknownOp(16))
    );
    assert_eq!(Error::UnknownOp(16).code(), ErrorCode::UnknownOp);
    assert_eq!(
        parse_request(&with(&b, 5, &[Op::Fstat as u8 | REPLY_BIT])),
        Err(Error::WrongDirection)
    );
    assert_eq!(parse_request(&with(&b, 12, &[0, 1])), Err(Error::Reserved));
    assert_eq!(parse_request(&with(&b, 14, &[0, 5])), Err(Error::BadLength));
    assert_eq!(
        parse_request(&with(&b, 14, &[0xff, 0xff])),
        Err(Error::BadLength)
    );
    let huge = vec![0u8; MAX_MESSAGE + 1];
    assert_eq!(Packet::new_checked(&huge[..]), Err(Error::TooLong));
    // A tag is readable whenever a header is there, so even a bad op is answered to its call.
    let p = Packet::new_unchecked(&with(&b, 5, &[200])[..]).tag();
    assert_eq!(p, 9);
    // Replies: an unknown status, a failure whose body is not the detail.
    let f = emit_answer(&Err(Failure::new(ErrorCode::Io, 5)), Op::Open, 3);
    assert_eq!(parse_answer(&with(&f, 12, &[0, 200])), Err(Error::BadValue));
    let mut long = f.clone();
    long.extend_from_slice(&[0; 4]);
    fix_len(&mut long);
    assert_eq!(parse_answer(&long), Err(Error::TooLong));
}

#[test]
fn every_malformed_body_is_refused_with_its_error() {
    let h = HEADER_LEN;
    let open = emit_request(
        &Request::Open {
            flags: OpenFlags::READ,
            mode: 0o600,
            path: path("f"),
        },
        1,
    );
    for (flags, err) in [
        (0u32, Error::BadValue),
        (32, Error::Reserved),
        (4 | 1, Error::BadValue),
        (8 | 2, Error::BadValue),
        (16 | 1, Error::BadValue),
    ] {
        assert_eq!(
            parse_request(&with(&open, h, &flags.to_be_bytes())),
            Err(err),
            "flags {flags}"
        );
    }
    assert_eq!(
        parse_request(&with(&open, h + 4, &0o1000u16.to_be_bytes())),
        Err(Error::BadValue)
    );
    assert_eq!(
        parse_request(&with(&open, h + 8, b"\0")),
        Err(Error::BadPath)
    );
    assert_eq!(Error::BadPath.code(), ErrorCode::BadPath);
    // An empty path: length 0 and no bytes.
    let mut empty = open[..h + 8].to_vec();
    empty[h + 6..h + 8].copy_from_slice(&[0, 0]);
    fix_len(&mut empty);
    assert_eq!(parse_request(&empty), Err(Error::BadPath));
    // A path over the bound (the message itself is within its own).
    let mut long = open[..h + 8].to_vec();
    long.extend(std::iter::repeat_n(b'p', MAX_PATH + 1));
    long[h + 6..h + 8].copy_from_slice(&((MAX_PATH + 1) as u16).to_be_bytes());
    fix_len(&mut long);
    assert_eq!(parse_request(&long), Err(Error::BadPath));
    // A path length that disagrees with the body.
    assert_eq!(
        parse_request(&with(&open, h + 6, &[0, 2])),
        Err(Error::Truncated)
    );
    assert_eq!(
        parse_request(&with(&open, h + 6, &[0, 0])),
        Err(Error::TooLong)
    );

    let rd = emit_request(
        &Request::Pread {
            handle: 1,
            offset: 0,
            len: 8,
            place: Place::Inline,
        },
        1,
    );
    assert_eq!(
        parse_request(&with(&rd, h + 16, &[2])),
        Err(Error::BadValue)
    );
    assert_eq!(
        parse_request(&with(&rd, h + 17, &[1])),
        Err(Error::Reserved)
    );
    assert_eq!(
        parse_request(&with(&rd, h + 20, &[0, 0, 0, 1])),
        Err(Error::Reserved)
    );
    assert_eq!(
        parse_request(&with(&rd, h + 31, &[1])),
        Err(Error::Reserved)
    );
    let over_inline = (MAX_INLINE as u32 + 1).to_be_bytes();
    assert_eq!(
        parse_request(&with(&rd, h + 4, &over_inline)),
        Err(Error::TooLarge)
    );
    let remote = with(&rd, h + 16, &[1]);
    assert!(parse_request(&remote).is_ok());
    assert_eq!(
        parse_request(&with(&remote, h + 4, &(MAX_TRANSFER + 1).to_be_bytes())),
        Err(Error::TooLarge)
    );
    assert_eq!(
        parse_request(&with(&remote, h + 4, &u32::MAX.to_be_bytes())),
        Err(Error::TooLarge)
    );
    assert_eq!(Error::TooLarge.code(), ErrorCode::TooLarge);
    let wr = emit_request(
        &Request::Pwrite {
            handle: 1,
            offset: 0,
            source: Source::Inline(b"abcd"),
        },
        1,
    );
    assert_eq!(
        parse_request(&with(&wr, h + 4, &[0, 0, 0, 5])),
        Err(Error::Truncated)
    );
    assert_eq!(
        parse_request(&with(&wr, h + 4, &[0, 0, 0, 3])),
        Err(Error::TooLong)
    );
    // A remote pwrite carries no data.
    assert_eq!(parse_request(&with(&wr, h + 16, &[1])), Err(Error::TooLong));

    let mk = emit_request(
        &Request::Mkdir {
            mode: 0o755,
            path: path("d"),
        },
        1,
    );
    assert_eq!(
        parse_request(&with(&mk, h, &0o1777u16.to_be_bytes())),
        Err(Error::BadValue)
    );
    let ul = emit_request(
        &Request::Unlink {
            dir: false,
            path: path("d"),
        },
        1,
    );
    assert_eq!(parse_request(&with(&ul, h, &[0, 2])), Err(Error::Reserved));
    let ls = emit_request(
        &Request::ListDir {
            cookie: 0,
            path: path("."),
        },
        1,
    );
    assert_eq!(
        parse_request(&with(&ls, h + 6, &[0, 1])),
        Err(Error::Reserved)
    );
    let log = emit_request(
        &Request::Log {
            level: LogLevel::Info,
            text: b"x",
        },
        1,
    );
    assert_eq!(parse_request(&with(&log, h, &[0])), Err(Error::BadValue));
    assert_eq!(parse_request(&with(&log, h, &[5])), Err(Error::BadValue));
    assert_eq!(
        parse_request(&with(&log, h + 1, &[1])),
        Err(Error::Reserved)
    );
    let mut big_log = log[..h + 4].to_vec();
    big_log.extend(std::iter::repeat_n(b'l', MAX_INLINE + 1));
    big_log[h + 2..h + 4].copy_from_slice(&((MAX_INLINE + 1) as u16).to_be_bytes());
    fix_len(&mut big_log);
    assert_eq!(parse_request(&big_log), Err(Error::TooLarge));
    let mut big_null = emit_request(&Request::Null { payload: &[] }, 1);
    big_null.extend(std::iter::repeat_n(0, MAX_INLINE + 1));
    fix_len(&mut big_null);
    assert_eq!(parse_request(&big_null), Err(Error::TooLarge));
    for op in [
        Op::Clock,
        Op::Goodbye,
        Op::Close,
        Op::Fstat,
        Op::Fsync,
        Op::UnmapRegion,
    ] {
        let mut b = emit_request(&Request::Clock, 1);
        b[header_field::KIND] = op as u8;
        b.push(0);
        fix_len(&mut b);
        if matches!(op, Op::Clock | Op::Goodbye) {
            assert_eq!(parse_request(&b), Err(Error::TooLong), "{op:?}");
        } else {
            assert_eq!(parse_request(&b), Err(Error::Truncated), "{op:?}");
        }
    }

    let anon = emit_request(
        &Request::MapRegion {
            access: Access::READ,
            backing: Backing::Anonymous { len: 4096 },
        },
        1,
    );
    assert_eq!(parse_request(&with(&anon, h, &[0])), Err(Error::BadValue));
    assert_eq!(parse_request(&with(&anon, h, &[8])), Err(Error::Reserved));
    assert_eq!(
        parse_request(&with(&anon, h + 1, &[2])),
        Err(Error::BadValue)
    );
    assert_eq!(
        parse_request(&with(&anon, h + 4, &[1])),
        Err(Error::Reserved)
    );
    assert_eq!(
        parse_request(&with(&anon, h + 15, &[1])),
        Err(Error::Reserved)
    );
    assert_eq!(
        parse_request(&with(&anon, h + 16, &[0; 8])),
        Err(Error::BadValue)
    );
    // A file backing needs a path.
    assert_eq!(
        parse_request(&with(&anon, h + 1, &[1])),
        Err(Error::BadPath)
    );
}

#[test]
fn emit_refuses_what_parse_would_refuse() {
    let mut buf = vec![0u8; MAX_MESSAGE * 2];
    let big = vec![0u8; MAX_INLINE + 1];
    let bad: Vec<Request<'_>> = vec![
        Request::Null { payload: &big },
        Request::Log {
            level: LogLevel::Info,
            text: &big,
        },
        Request::Pread {
            handle: 1,
            offset: 0,
            len: MAX_INLINE as u32 + 1,
            place: Place::Inline,
        },
        Request::Pread {
            handle: 1,
            offset: 0,
            len: MAX_TRANSFER + 1,
            place: Place::Remote { addr: 0, rkey: 0 },
        },
        Request::Pwrite {
            handle: 1,
            offset: 0,
            source: Source::Inline(&big),
        },
        Request::Pwrite {
            handle: 1,
            offset: 0,
            source: Source::Remote {
                addr: 0,
                rkey: 0,
                len: MAX_TRANSFER + 1,
            },
        },
        Request::Mkdir {
            mode: 0o1000,
            path: path("d"),
        },
        Request::MapRegion {
            access: Access::READ,
            backing: Backing::Anonymous { len: 0 },
        },
    ];
    for r in bad {
        assert!(r.emit(1, &mut buf).is_err(), "{r:?}");
    }
    assert_eq!(
        Request::Clock.emit(1, &mut buf[..HEADER_LEN - 1]),
        Err(Error::Truncated)
    );
    assert_eq!(
        Failure::new(ErrorCode::Io, 1).emit(1, 1, &mut buf[..19]),
        Err(Error::Truncated)
    );
    let r = Reply::Fstat(Stat {
        size: 0,
        kind: FileKind::File,
        perm: 0o10000,
        mtime_s: 0,
        mtime_ns: 0,
    });
    assert_eq!(r.emit(1, &mut buf), Err(Error::BadValue));
    assert_eq!(
        Reply::Pwrite {
            count: MAX_TRANSFER + 1
        }
        .emit(1, &mut buf),
        Err(Error::TooLarge)
    );
    assert!(Path::new(&[b'a'; MAX_PATH + 1]).is_err());
    assert!(Path::new(b"").is_err());
}

/// xorshift64*: a fixed-seed generator, so every run checks the same inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Whatever parses re-emits to the same bytes: the encoding has one form, so no two nodes can
/// read one message differently.
fn check_canonical(b: &[u8]) -> bool {
    let Ok(p) = Packet::new_checked(b) else {
        return false;
    };
    let mut out = vec![0u8; MAX_MESSAGE];
    if p.is_reply() {
        match Reply::parse(&p) {
            Ok(Ok(r)) => {
                let n = r.emit(p.tag(), &mut out).unwrap();
                assert_eq!(&out[..n], b, "{r:?}");
            }
            Ok(Err(f)) => {
                let n = f.emit(p.kind(), p.tag(), &mut out).unwrap();
                assert_eq!(&out[..n], b, "{f:?}");
            }
            Err(_) => return false,
        }
    } else {
        match Request::parse(&p) {
            Ok(r) => {
                let n = r.emit(p.tag(), &mut out).unwrap();
                assert_eq!(&out[..n], b, "{r:?}");
            }
            Err(_) => return false,
        }
    }
    true
}

#[test]
fn random_bytes_and_mutations_never_panic_and_what_parses_is_canonical() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut seeds: Vec<Vec<u8>> = requests().iter().map(|r| emit_request(r, 3)).collect();
    for (i, a) in replies().iter().enumerate() {
        seeds.push(emit_answer(
            a,
            a.as_ref().map_or(Op::ALL[i % 15], |r| r.op()),
            4,
        ));
    }
    let mut accepted = 0;
    for _ in 0..200_000 {
        let seed = &seeds[rng.below(seeds.len())];
        let mut b = seed.clone();
        match rng.below(4) {
            0 => {
                // One to four random bytes changed.
                for _ in 0..=rng.below(4) {
                    let at = rng.below(b.len());
                    b[at] = rng.next() as u8;
                }
            }
            1 => {
                // A bit flipped.
                let at = rng.below(b.len());
                b[at] ^= 1 << rng.below(8);
            }
            2 => {
                // Cut or grown, with the length field kept consistent.
                let n = rng.below(b.len() + 64).max(HEADER_LEN);
                b.resize(n, rng.next() as u8);
                fix_len(&mut b);
            }
            _ => {
                // Noise.
                let n = rng.below(MAX_MESSAGE + 2);
                b = (0..n).map(|_| rng.next() as u8).collect();
            }
        }
        if check_canonical(&b) {
            accepted += 1;
        }
    }
    // Mutations of valid messages are often still valid (a changed tag, offset or payload
    // byte): the canonical check above ran on those.
    assert!(accepted > 1000, "only {accepted} mutated messages parsed");
}

fn setups() -> Vec<Setup> {
    let c = Setup::connect(
        0x1234_5678,
        4,
        0x0002_c903_0000_0001,
        0x48,
        0xabcdef,
        5,
        16,
        30_000,
    );
    let accept = Setup {
        kind: Kind::Accept,
        node: 1,
        lid: 2,
        qpn: 0x209,
        psn: 0x10,
        mtu: 4,
        credits: 32,
        ..c
    };
    vec![
        c,
        accept,
        Setup::refuse(&c, 2, 9, Reason::Version),
        Setup::refuse(&c, 2, 9, Reason::TooManyNodes),
        Setup::refuse(&c, 2, 9, Reason::Resources),
    ]
}

#[test]
fn setup_messages_round_trip_and_malformed_ones_are_refused() {
    for s in setups() {
        let mut b = [0u8; 128];
        assert_eq!(s.emit(&mut b), Ok(connect::LEN));
        assert_eq!(Setup::parse(&b[..connect::LEN]), Ok(Some(s)));
        // A UD receive longer than the message: the rest is ignored.
        assert_eq!(Setup::parse(&b), Ok(Some(s)));
        for cut in 0..connect::LEN {
            let r = Setup::parse(&b[..cut]);
            assert!(r.is_err() || r == Ok(None), "cut {cut}");
            if cut > 4 {
                assert_eq!(r, Err(Error::Truncated));
            }
        }
    }
    let mut b = [0u8; connect::LEN];
    let c = setups()[0];
    c.emit(&mut b).unwrap();
    // Another rendezvous version (the benchmarks') or not the rendezvous at all: ignored.
    assert_eq!(Setup::parse(&with(&b, 4, &[3])), Ok(None));
    assert_eq!(Setup::parse(&with(&b, 0, b"IBKD")), Ok(None));
    for (at, v, what) in [
        (5, &[0u8][..], "kind 0"),
        (5, &[4], "kind 4"),
        (7, &[0], "mtu 0"),
        (7, &[6], "mtu 6"),
        (8, &[0, 0, 0, 0], "session 0"),
        (12, &[0, 0, 0, 1], "node in a Connect"),
        (18, &[1], "reserved"),
        (20, &[0, 0, 0, 0], "qpn 0"),
        (20, &[1, 0, 0, 0], "qpn over 24 bits"),
        (24, &[1, 0, 0, 0], "psn over 24 bits"),
        (28, &[0, 0], "no credits"),
        (28, &[1, 1], "credits over the bound"),
        (30, &[0x10, 1], "message over the bound"),
        (30, &[0, 8], "message under the bound"),
        (36, &[0, 0, 0, 1], "reason in a Connect"),
        (63, &[1], "reserved tail"),
    ] {
        assert!(Setup::parse(&with(&b, at, v)).is_err(), "{what}");
    }
    let mut r = [0u8; connect::LEN];
    Setup::refuse(&c, 1, 1, Reason::Version)
        .emit(&mut r)
        .unwrap();
    assert_eq!(
        Setup::parse(&with(&r, 36, &[0, 0, 0, 0])),
        Err(Error::BadValue)
    );
    assert_eq!(
        Setup::parse(&with(&r, 36, &[0, 0, 0, 4])),
        Err(Error::BadValue)
    );
    let mut rng = Rng(7);
    let mut parsed = 0;
    for _ in 0..100_000 {
        let mut m = b;
        for _ in 0..=rng.below(3) {
            m[rng.below(connect::LEN)] = rng.next() as u8;
        }
        if let Ok(Some(s)) = Setup::parse(&m) {
            let mut out = [0u8; connect::LEN];
            s.emit(&mut out).unwrap();
            assert_eq!(out, m, "canonical");
            parsed += 1;
        }
    }
    assert!(parsed > 100);
}
