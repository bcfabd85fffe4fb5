//! The delegate's request handling against the stand-in transport: every op does its job
//! beneath a temporary root, and a hostile client (random bytes, bad paths, symbolic links out
//! of the root, huge lengths, stale and foreign rkeys, unknown and out-of-order requests, a
//! node that vanishes mid-call or goes silent) gets typed failures or is released, with
//! nothing written outside the root.

use std::collections::BTreeSet;
use std::path::{Path as FsPath, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delegate_wire::connect::Reason;
use delegate_wire::*;
use ibkern_delegate::root::{Resolve, Root};
use ibkern_delegate::service::{Delegate, Limits, Outcome};
use ibkern_delegate::standin::{NodeBuffer, StandIn, REM_ACCESS_ERR};

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    delegate: Delegate,
    remote: StandIn,
    node: u32,
    log: Arc<Mutex<Vec<String>>>,
    now: Instant,
    tag: u32,
}

const LIMITS: Limits = Limits {
    max_nodes: 4,
    max_open: 8,
    max_regions: 4,
    max_region_bytes: 1 << 20,
    lease_min: Duration::from_secs(1),
    lease_max: Duration::from_secs(60),
    read_only: false,
};

fn fixture_with(resolve: Resolve) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let outside = dir.path().join("outside");
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret"), b"outside the root").unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = log.clone();
    let r = Root::open(&root).unwrap();
    let r = if resolve == Resolve::NoFollow {
        r.with_resolve(Resolve::NoFollow)
    } else {
        r
    };
    assert_eq!(r.resolve(), resolve, "this kernel has openat2");
    let mut delegate = Delegate::new(
        r,
        LIMITS,
        Box::new(move |l| sink.lock().unwrap().push(l.to_string())),
    );
    let now = Instant::now();
    let node = delegate
        .admit(4, 0x0002_c903_0000_0004, 10_000, now)
        .unwrap()
        .id;
    Fixture {
        _dir: dir,
        root,
        outside,
        delegate,
        remote: StandIn::default(),
        node,
        log,
        now,
        tag: 0,
    }
}

fn fixture_read_only() -> Fixture {
    let mut f = fixture();
    let root = Root::open(&f.root).unwrap();
    f.delegate = Delegate::new(
        root,
        Limits {
            read_only: true,
            ..LIMITS
        },
        Box::new(|_| {}),
    );
    f.node = f.delegate.admit(4, 4, 0, f.now).unwrap().id;
    f
}

fn fixture() -> Fixture {
    fixture_with(Resolve::Beneath)
}

/// What a reply said.
#[derive(Debug, PartialEq)]
enum Got {
    Ok(Vec<u8>),
    Failed(ErrorCode, u32),
    Lost,
}

impl Fixture {
    fn raw(&mut self, msg: &[u8]) -> (Outcome, Vec<u8>) {
        let mut out = vec![0u8; MAX_MESSAGE];
        let o = self
            .delegate
            .call(self.node, &mut self.remote, msg, &mut out, self.now);
        let n = match o {
            Outcome::Reply(n) | Outcome::Goodbye(n) => n,
            Outcome::Lost => 0,
        };
        out.truncate(n);
        (o, out)
    }

    /// Sends `r` and returns the reply's bytes (checked to be a reply to its tag and op).
    fn call(&mut self, r: Request<'_>) -> Got {
        self.tag += 1;
        let mut msg = vec![0u8; MAX_MESSAGE];
        let n = r.emit(self.tag, &mut msg).unwrap();
        let (o, out) = self.raw(&msg[..n]);
        if o == Outcome::Lost {
            return Got::Lost;
        }
        let p = Packet::new_checked(&out[..]).expect("a well-formed reply");
        assert_eq!((p.tag(), p.op()), (self.tag, Ok(r.op())));
        match Reply::parse(&p).expect("a reply that parses") {
            Ok(_) => Got::Ok(out),
            Err(f) => Got::Failed(f.code, f.detail),
        }
    }

    fn ok(&mut self, r: Request<'_>) -> Vec<u8> {
        match self.call(r) {
            Got::Ok(b) => b,
            other => panic!("{r:?}: {other:?}"),
        }
    }

    fn code(&mut self, r: Request<'_>) -> ErrorCode {
        match self.call(r) {
            Got::Failed(c, _) => c,
            other => panic!("{r:?} should fail: {other:?}"),
        }
    }

    fn open(&mut self, path: &str, flags: OpenFlags) -> u32 {
        let b = self.ok(Request::Open {
            flags,
            mode: 0o644,
            path: p(path),
        });
        match reply(&b) {
            Reply::Open { handle, .. } => handle,
            r => panic!("{r:?}"),
        }
    }

    fn open_fds_under_root(&self) -> usize {
        fds_under(&self.root)
    }
}

fn reply(b: &[u8]) -> Reply<'_> {
    Reply::parse(&Packet::new_checked(b).unwrap())
        .unwrap()
        .unwrap()
}

fn p(s: &str) -> Path<'_> {
    Path::new(s.as_bytes()).unwrap()
}

/// Descriptors of this process open on something beneath `dir` (not `dir` itself, which the
/// delegate's root holds).
fn fds_under(dir: &FsPath) -> usize {
    let dir = dir.canonicalize().unwrap();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|t| t.starts_with(&dir) && *t != dir)
        .count()
}

/// Every file and directory beneath `dir`, as relative paths.
fn tree(dir: &FsPath) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let path = e.path();
            out.insert(path.strip_prefix(dir).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                stack.push(path);
            }
        }
    }
    out
}

const RW: OpenFlags = OpenFlags::READ.union(OpenFlags::WRITE);
const CREATE: OpenFlags = RW.union(OpenFlags::CREATE);

#[test]
fn files_beneath_the_root_round_trip_inline_and_by_rdma() {
    let mut f = fixture();
    f.ok(Request::Mkdir {
        mode: 0o755,
        path: p("results"),
    });
    f.ok(Request::Mkdir {
        mode: 0o755,
        path: p("results/node-4"),
    });
    assert_eq!(
        f.code(Request::Mkdir {
            mode: 0o755,
            path: p("results")
        }),
        ErrorCode::Exists
    );
    let h = f.open("results/node-4/run.txt", CREATE);
    let b = f.ok(Request::Pwrite {
        handle: h,
        offset: 0,
        source: Source::Inline(b"hello "),
    });
    assert_eq!(reply(&b), Reply::Pwrite { count: 6 });
    // The node's buffer, pwritten by RDMA READ.
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    f.remote.memory.insert(
        0x77,
        NodeBuffer {
            addr: 0x10_0000,
            bytes: data.clone(),
        },
    );
    let src = Source::Remote {
        addr: 0x10_0000,
        rkey: 0x77,
        len: data.len() as u32,
    };
    assert_eq!(
        reply(&f.ok(Request::Pwrite {
            handle: h,
            offset: 6,
            source: src
        })),
        Reply::Pwrite { count: 100_000 }
    );
    f.ok(Request::Fsync { handle: h });
    let on_disk = std::fs::read(f.root.join("results/node-4/run.txt")).unwrap();
    assert_eq!(&on_disk[..6], b"hello ");
    assert_eq!(&on_disk[6..], &data[..]);
    // pread inline and by RDMA WRITE into another buffer of the node's.
    let b = f.ok(Request::Pread {
        handle: h,
        offset: 0,
        len: 6,
        place: Place::Inline,
    });
    assert_eq!(reply(&b), Reply::Pread(Read::Inline(b"hello ")));
    f.remote.memory.insert(
        0x78,
        NodeBuffer {
            addr: 0x20_0000,
            bytes: vec![0; 200_000],
        },
    );
    let place = Place::Remote {
        addr: 0x20_0000 + 16,
        rkey: 0x78,
    };
    let b = f.ok(Request::Pread {
        handle: h,
        offset: 6,
        len: 150_000,
        place,
    });
    assert_eq!(
        reply(&b),
        Reply::Pread(Read::Remote(100_000)),
        "short at the end of the file"
    );
    assert_eq!(&f.remote.memory[&0x78].bytes[16..100_016], &data[..]);
    assert!(
        f.remote.memory[&0x78].bytes[100_016..]
            .iter()
            .all(|&b| b == 0),
        "nothing past the count"
    );
    match reply(&f.ok(Request::Fstat { handle: h })) {
        Reply::Fstat(s) => {
            assert_eq!(
                (s.size, s.kind, s.perm),
                (100_006, FileKind::File, 0o644 & !umask())
            );
        }
        r => panic!("{r:?}"),
    }
    let b = f.ok(Request::ListDir {
        cookie: 0,
        path: p("results"),
    });
    match reply(&b) {
        Reply::ListDir { next: 0, entries } => {
            let e: Vec<_> = entries.iter().collect();
            assert_eq!(
                e,
                vec![DirEntry {
                    kind: FileKind::Directory,
                    name: b"node-4"
                }]
            );
        }
        r => panic!("{r:?}"),
    }
    assert_eq!(
        f.code(Request::Unlink {
            dir: true,
            path: p("results/node-4")
        }),
        ErrorCode::NotEmpty
    );
    f.ok(Request::Close { handle: h });
    assert_eq!(f.code(Request::Close { handle: h }), ErrorCode::BadHandle);
    f.ok(Request::Unlink {
        dir: false,
        path: p("results/node-4/run.txt"),
    });
    f.ok(Request::Unlink {
        dir: true,
        path: p("results/node-4"),
    });
    assert_eq!(tree(&f.root), BTreeSet::from(["results".to_string()]));
    assert_eq!(f.open_fds_under_root(), 0);
}

fn umask() -> u16 {
    // SAFETY: umask swaps the process mask; it is put back at once.
    let m = unsafe { libc::umask(0o022) };
    // SAFETY: as above.
    unsafe { libc::umask(m) };
    m as u16
}

#[test]
fn null_clock_and_log_lines_tagged_with_the_node() {
    let mut f = fixture();
    assert_eq!(
        reply(&f.ok(Request::Null { payload: b"ping" })),
        Reply::Null { payload: b"ping" }
    );
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let b = f.ok(Request::Clock);
    let after = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    match reply(&b) {
        Reply::Clock {
            realtime_ns,
            monotonic_ns,
        } => {
            assert!((before..=after).contains(&realtime_ns));
            assert!(monotonic_ns > 0);
        }
        r => panic!("{r:?}"),
    }
    f.ok(Request::Log {
        level: LogLevel::Warn,
        text: b"plan 3 \x1b[2Jdone\n",
    });
    let log = f.log.lock().unwrap();
    let line = log.iter().find(|l| l.contains("plan 3")).unwrap();
    assert_eq!(
        line,
        "node 1 (LID 0x0004, GUID 0x0002c90300000004) warn: plan 3 \\x1b[2Jdone\\x0a"
    );
}

#[test]
fn paths_leaving_the_root_are_refused_and_nothing_is_written_outside() {
    for resolve in [Resolve::Beneath, Resolve::NoFollow] {
        let mut f = fixture_with(resolve);
        std::os::unix::fs::symlink(&f.outside, f.root.join("out")).unwrap();
        std::os::unix::fs::symlink("../outside/secret", f.root.join("rel")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", f.root.join("abs")).unwrap();
        std::fs::create_dir(f.root.join("d")).unwrap();
        let outside_before = tree(&f.outside);
        let bad = [
            "..",
            "../outside/secret",
            "d/../../outside/secret",
            "d/..",
            "/etc/passwd",
            "/",
            "out/secret",
            "out/new",
            "rel",
            "abs",
            "out/../x",
            "./../x",
        ];
        for path in bad {
            for flags in [OpenFlags::READ, CREATE.union(OpenFlags::TRUNCATE)] {
                let got = f.call(Request::Open {
                    flags,
                    mode: 0o666,
                    path: p(path),
                });
                assert!(
                    matches!(got, Got::Failed(ErrorCode::BadPath, _)),
                    "{resolve:?} open {path}: {got:?}"
                );
            }
            // Unlinking a link removes the name, never its target: allowed for the links
            // themselves ("rel", "abs"), below.
            let link = path == "rel" || path == "abs";
            let unlinks = [
                Request::Unlink {
                    dir: false,
                    path: p(path),
                },
                Request::Unlink {
                    dir: true,
                    path: p(path),
                },
            ];
            for r in [
                Request::Mkdir {
                    mode: 0o777,
                    path: p(path),
                },
                Request::ListDir {
                    cookie: 0,
                    path: p(path),
                },
                Request::MapRegion {
                    access: Access::READ.union(Access::WRITE),
                    backing: Backing::File {
                        path: p(path),
                        offset: 0,
                        len: 16,
                    },
                },
            ]
            .into_iter()
            .chain(unlinks.into_iter().filter(|_| !link))
            {
                let got = f.call(r);
                assert!(
                    matches!(got, Got::Failed(_, _)),
                    "{resolve:?} {r:?}: {got:?}"
                );
                if path != "rel" && path != "abs" && path != "/" {
                    assert!(
                        matches!(
                            got,
                            Got::Failed(ErrorCode::BadPath | ErrorCode::NotFound, _)
                        ),
                        "{resolve:?} {r:?}: {got:?}"
                    );
                }
            }
        }
        // The links themselves may be removed (unlink acts on the name, never its target).
        f.ok(Request::Unlink {
            dir: false,
            path: p("rel"),
        });
        assert_eq!(tree(&f.outside), outside_before, "{resolve:?}");
        assert_eq!(
            std::fs::read(f.outside.join("secret")).unwrap(),
            b"outside the root"
        );
        assert!(FsPath::new("/etc/passwd").exists());
        // A link that stays inside the root is followed by openat2; without it no link is.
        std::fs::write(f.root.join("d/target"), b"inside").unwrap();
        std::os::unix::fs::symlink("d/target", f.root.join("inside")).unwrap();
        let got = f.call(Request::Open {
            flags: OpenFlags::READ,
            mode: 0,
            path: p("inside"),
        });
        match resolve {
            Resolve::Beneath => assert!(matches!(got, Got::Ok(_)), "{got:?}"),
            Resolve::NoFollow => assert_eq!(got, Got::Failed(ErrorCode::BadPath, 0)),
        }
    }
}

#[test]
fn directories_fifos_and_devices_are_not_opened_as_files_and_never_block() {
    let mut f = fixture();
    std::fs::create_dir(f.root.join("d")).unwrap();
    let fifo = std::ffi::CString::new(f.root.join("fifo").to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path; mkfifo creates the node.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    assert_eq!(
        f.code(Request::Open {
            flags: OpenFlags::READ,
            mode: 0,
            path: p("d")
        }),
        ErrorCode::IsADirectory
    );
    // A FIFO with no writer would block a plain open for reading: opened without blocking
    // and refused.
    assert_eq!(
        f.code(Request::Open {
            flags: OpenFlags::READ,
            mode: 0,
            path: p("fifo")
        }),
        ErrorCode::Invalid
    );
    let region = Backing::File {
        path: p("fifo"),
        offset: 0,
        len: 4096,
    };
    assert_eq!(
        f.code(Request::MapRegion {
            access: Access::READ,
            backing: region
        }),
        ErrorCode::Invalid
    );
    assert_eq!(f.delegate.node(f.node).unwrap().open_files(), 0);
}

#[test]
fn bounds_handles_and_permissions_give_typed_failures() {
    let mut f = fixture();
    let h = f.open("f", CREATE);
    for i in 1..LIMITS.max_open {
        f.open(&format!("g{i}"), CREATE);
    }
    assert_eq!(
        f.call(Request::Open {
            flags: CREATE,
            mode: 0o600,
            path: p("one-more")
        }),
        Got::Failed(ErrorCode::TooMany, 8)
    );
    for r in [
        Request::Close { handle: 999 },
        Request::Fstat { handle: 0 },
        Request::Fsync { handle: u32::MAX },
        Request::Pread {
            handle: 12345,
            offset: 0,
            len: 1,
            place: Place::Inline,
        },
        Request::Pwrite {
            handle: 12345,
            offset: 0,
            source: Source::Inline(b"x"),
        },
    ] {
        assert_eq!(f.code(r), ErrorCode::BadHandle, "{r:?}");
    }
    assert_eq!(
        f.code(Request::UnmapRegion { region: 3 }),
        ErrorCode::BadRegion
    );
    f.ok(Request::Close { handle: h });
    let ro = f.open("f", OpenFlags::READ);
    assert_eq!(
        f.code(Request::Pwrite {
            handle: ro,
            offset: 0,
            source: Source::Inline(b"x")
        }),
        ErrorCode::PermissionDenied
    );
    f.ok(Request::Close { handle: ro });
    let wo = f.open("f", OpenFlags::WRITE);
    assert_eq!(
        f.code(Request::Pread {
            handle: wo,
            offset: 0,
            len: 1,
            place: Place::Inline
        }),
        ErrorCode::PermissionDenied
    );
    // An offset the kernel refuses (past i64).
    let got = f.call(Request::Pwrite {
        handle: wo,
        offset: u64::MAX - 1,
        source: Source::Inline(b"xy"),
    });
    assert!(matches!(got, Got::Failed(ErrorCode::Invalid, _)), "{got:?}");
    f.ok(Request::Close { handle: wo });
    assert_eq!(
        f.code(Request::Open {
            flags: CREATE.union(OpenFlags::EXCLUSIVE),
            mode: 0o600,
            path: p("f")
        }),
        ErrorCode::Exists
    );
    assert_eq!(
        f.code(Request::Open {
            flags: OpenFlags::READ,
            mode: 0,
            path: p("missing")
        }),
        ErrorCode::NotFound
    );
    assert_eq!(
        f.code(Request::Open {
            flags: OpenFlags::READ,
            mode: 0,
            path: p("f/x")
        }),
        ErrorCode::NotADirectory
    );
    // Regions over the node's byte budget, more regions than allowed.
    let huge = Request::MapRegion {
        access: Access::READ,
        backing: Backing::Anonymous { len: u64::MAX },
    };
    assert_eq!(f.call(huge), Got::Failed(ErrorCode::TooLarge, 1 << 20));
    for _ in 0..LIMITS.max_regions {
        f.ok(Request::MapRegion {
            access: Access::READ,
            backing: Backing::Anonymous { len: 4096 },
        });
    }
    let more = Request::MapRegion {
        access: Access::READ,
        backing: Backing::Anonymous { len: 4096 },
    };
    assert_eq!(f.call(more), Got::Failed(ErrorCode::TooMany, 4));
}

/// Replaces the header's body length with the bytes that follow it.
fn fix_len(b: &mut [u8]) {
    let n = (b.len() - HEADER_LEN) as u16;
    b[header_field::LENGTH].copy_from_slice(&n.to_be_bytes());
}

#[test]
fn malformed_unknown_and_misdirected_messages_get_failures_with_their_tag() {
    let mut f = fixture();
    let mut msg = vec![0u8; MAX_MESSAGE];
    let n = Request::Fstat { handle: 1 }.emit(0xabcd, &mut msg).unwrap();
    msg.truncate(n);
    let check = |f: &mut Fixture, m: &[u8], tag: u32, kind: u8, code: ErrorCode, detail: u32| {
        let (o, out) = f.raw(m);
        assert!(matches!(o, Outcome::Reply(_)), "{o:?}");
        let pk = Packet::new_checked(&out[..]).unwrap();
        assert_eq!((pk.tag(), pk.kind()), (tag, kind | REPLY_BIT));
        assert_eq!(Reply::parse(&pk), Ok(Err(Failure::new(code, detail))));
    };
    let with = |at: usize, v: &[u8]| {
        let mut m = msg.clone();
        m[at..at + v.len()].copy_from_slice(v);
        m
    };
    check(
        &mut f,
        &with(5, &[99]),
        0xabcd,
        99,
        ErrorCode::UnknownOp,
        99,
    );
    check(
        &mut f,
        &with(4, &[7]),
        0xabcd,
        Op::Fstat as u8,
        ErrorCode::UnsupportedVersion,
        1,
    );
    check(
        &mut f,
        &with(0, b"XXXX"),
        0xabcd,
        Op::Fstat as u8,
        ErrorCode::Malformed,
        0,
    );
    // A reply sent as a request.
    check(
        &mut f,
        &with(5, &[Op::Fstat as u8 | REPLY_BIT]),
        0xabcd,
        Op::Fstat as u8,
        ErrorCode::Malformed,
        0,
    );
    // Shorter than a header: no tag to answer to.
    check(&mut f, &msg[..7], 0, 0, ErrorCode::Malformed, 0);
    check(&mut f, &[], 0, 0, ErrorCode::Malformed, 0);
    // A transfer over the bound, built by hand (emit refuses it).
    let pread = Request::Pread {
        handle: 1,
        offset: 0,
        len: 8,
        place: Place::Remote { addr: 0, rkey: 1 },
    };
    let mut big = vec![0u8; pread.buffer_len()];
    pread.emit(5, &mut big).unwrap();
    big[HEADER_LEN + 4..HEADER_LEN + 8].copy_from_slice(&u32::MAX.to_be_bytes());
    check(&mut f, &big, 5, Op::Pread as u8, ErrorCode::TooLarge, 0);
    // A message over MAX_MESSAGE.
    let mut huge = vec![0u8; MAX_MESSAGE + 100];
    huge[..HEADER_LEN].copy_from_slice(&msg[..HEADER_LEN]);
    check(
        &mut f,
        &huge,
        0xabcd,
        Op::Fstat as u8,
        ErrorCode::TooLarge,
        0,
    );
    // Calls after goodbye: the node is gone.
    let (o, _) = {
        let mut m = vec![0u8; 64];
        let n = Request::Goodbye.emit(9, &mut m).unwrap();
        f.raw(&m[..n])
    };
    assert!(matches!(o, Outcome::Goodbye(_)));
    assert!(f.delegate.node(f.node).is_none());
    assert_eq!(f.call(Request::Clock), Got::Lost);
}

#[test]
fn stale_and_foreign_rkeys_end_the_connection_and_release_the_node() {
    for case in ["unknown rkey", "foreign range", "past the end", "stale"] {
        let mut f = fixture();
        let h = f.open("data", CREATE);
        f.ok(Request::Pwrite {
            handle: h,
            offset: 0,
            source: Source::Inline(&[1; 512]),
        });
        f.ok(Request::MapRegion {
            access: Access::READ,
            backing: Backing::Anonymous { len: 4096 },
        });
        f.remote.memory.insert(
            0x50,
            NodeBuffer {
                addr: 0x1000,
                bytes: vec![0; 256],
            },
        );
        let (addr, rkey) = match case {
            "unknown rkey" => (0x1000, 0x51),
            "foreign range" => (0x9000, 0x50),
            "past the end" => (0x1000 + 200, 0x50),
            _ => {
                f.remote.memory.remove(&0x50);
                (0x1000, 0x50)
            }
        };
        let live = f.remote.live.clone();
        assert_eq!(live.get(), 1);
        assert!(f.open_fds_under_root() > 0);
        let got = f.call(Request::Pread {
            handle: h,
            offset: 0,
            len: 100,
            place: Place::Remote { addr, rkey },
        });
        assert_eq!(got, Got::Lost, "{case}");
        assert!(f.delegate.node(f.node).is_none(), "{case}: released");
        assert_eq!(live.get(), 0, "{case}: region deregistered");
        assert_eq!(f.open_fds_under_root(), 0, "{case}: files closed");
        let line = f.log.lock().unwrap().last().unwrap().clone();
        assert!(
            line.contains(&format!("completion status {REM_ACCESS_ERR}")),
            "{line}"
        );
        assert!(
            line.contains("1 open files closed, 1 regions unmapped"),
            "{line}"
        );
    }
}

#[test]
fn a_node_that_vanishes_mid_call_or_goes_silent_is_released_within_its_lease() {
    let mut f = fixture();
    let h = f.open("w", CREATE);
    f.ok(Request::MapRegion {
        access: Access::READ.union(Access::WRITE),
        backing: Backing::Anonymous { len: 8192 },
    });
    f.remote.gone = true;
    let src = Source::Remote {
        addr: 0,
        rkey: 1,
        len: 64,
    };
    assert_eq!(
        f.call(Request::Pwrite {
            handle: h,
            offset: 0,
            source: src
        }),
        Got::Lost
    );
    assert!(f.delegate.node(f.node).is_none());
    assert_eq!(f.remote.live.get(), 0);
    assert_eq!(f.open_fds_under_root(), 0);
    assert_eq!(
        std::fs::read(f.root.join("w")).unwrap(),
        b"",
        "nothing written by the lost call"
    );

    // A node that connects and then says nothing: released once its lease has passed.
    let t0 = f.now;
    let a = f.delegate.admit(6, 6, 2_000, t0).unwrap();
    assert_eq!(a.lease, Duration::from_secs(2));
    f.node = a.id;
    f.open("held", CREATE);
    assert!(f
        .delegate
        .expired(t0 + Duration::from_millis(1_999))
        .is_empty());
    f.now = t0 + Duration::from_millis(1_500);
    f.ok(Request::Null { payload: b"" });
    assert!(
        f.delegate
            .expired(t0 + Duration::from_millis(3_400))
            .is_empty(),
        "a call renews the lease"
    );
    let gone = f.delegate.expired(t0 + Duration::from_millis(3_501));
    assert_eq!(gone, vec![a.id]);
    f.delegate.release(a.id, "lease passed");
    assert_eq!(f.open_fds_under_root(), 0);
    // Leases are clamped to the delegate's bounds; 0 asks for the longest.
    assert_eq!(
        f.delegate.admit(7, 7, 1, t0).unwrap().lease,
        LIMITS.lease_min
    );
    assert_eq!(
        f.delegate.admit(8, 8, 0, t0).unwrap().lease,
        LIMITS.lease_max
    );
}

#[test]
fn nodes_are_admitted_up_to_the_limit_and_a_rebooted_node_replaces_itself() {
    let mut f = fixture();
    let now = f.now;
    let h = f.open("mine", CREATE);
    let _ = h;
    let again = f.delegate.admit(4, 0x0002_c903_0000_0004, 0, now).unwrap();
    assert_eq!(again.replaced, Some(f.node));
    assert!(f.delegate.node(f.node).is_none());
    assert_eq!(
        f.open_fds_under_root(),
        0,
        "the old connection's files closed"
    );
    for i in 0..3 {
        f.delegate.admit(10 + i, 10 + u64::from(i), 0, now).unwrap();
    }
    assert_eq!(f.delegate.admit(20, 20, 0, now), Err(Reason::TooManyNodes));
    // Nodes are apart: one's handles mean nothing to another.
    let other = f
        .delegate
        .nodes()
        .map(|n| n.id)
        .find(|&id| id != again.id)
        .unwrap();
    f.node = again.id;
    let h = f.open("a", CREATE);
    f.node = other;
    assert_eq!(f.code(Request::Close { handle: h }), ErrorCode::BadHandle);
}

#[test]
fn regions_grant_what_the_backing_allows_and_are_unmapped() {
    let mut f = fixture();
    let b = f.ok(Request::MapRegion {
        access: Access::READ.union(Access::ATOMIC),
        backing: Backing::Anonymous { len: 5000 },
    });
    let anon = match reply(&b) {
        Reply::MapRegion(r) => r,
        r => panic!("{r:?}"),
    };
    assert_eq!(
        (anon.len, anon.access),
        (5000, Access::READ.union(Access::ATOMIC))
    );
    assert_eq!(anon.addr % 4096, 0);
    assert_eq!(f.remote.registered.last().unwrap().2, anon.access);
    // A file region: the node's writes through it land in the file.
    std::fs::write(f.root.join("shared.bin"), vec![7u8; 3 * 4096]).unwrap();
    let file = Backing::File {
        path: p("shared.bin"),
        offset: 4096,
        len: 8192,
    };
    let b = f.ok(Request::MapRegion {
        access: Access::READ.union(Access::WRITE),
        backing: file,
    });
    let r = match reply(&b) {
        Reply::MapRegion(r) => r,
        x => panic!("{x:?}"),
    };
    assert_eq!(r.access, Access::READ.union(Access::WRITE));
    assert_eq!(
        f.delegate
            .node(f.node)
            .unwrap()
            .region_bytes(r.region)
            .unwrap(),
        &[7u8; 8192][..]
    );
    // SAFETY: the test stands in for the HCA writing into the registered mapping, which the
    // delegate keeps mapped until the region is unmapped below.
    unsafe { std::ptr::write_bytes(r.addr as *mut u8, 9, 10) };
    f.ok(Request::UnmapRegion { region: r.region });
    let on_disk = std::fs::read(f.root.join("shared.bin")).unwrap();
    assert_eq!(&on_disk[4096..4106], &[9; 10]);
    assert_eq!(on_disk[4106], 7);
    // A file the delegate can only read is granted READ only, whatever was asked, and is
    // registered so: the HCA refuses the node's WRITEs and atomics to it. Without write
    // permission on the file (when not run as root, whom permissions do not stop) and on a
    // delegate serving its root read-only.
    std::fs::write(f.root.join("ro.bin"), vec![1u8; 4096]).unwrap();
    std::fs::set_permissions(
        f.root.join("ro.bin"),
        std::os::unix::fs::PermissionsExt::from_mode(0o444),
    )
    .unwrap();
    let ro = Backing::File {
        path: p("ro.bin"),
        offset: 0,
        len: 4096,
    };
    let all = Access::READ.union(Access::WRITE).union(Access::ATOMIC);
    // SAFETY: geteuid only reads the process's credentials.
    if unsafe { libc::geteuid() } != 0 {
        let b = f.ok(Request::MapRegion {
            access: all,
            backing: ro,
        });
        assert!(matches!(reply(&b), Reply::MapRegion(r) if r.access == Access::READ));
        assert_eq!(f.remote.registered.last().unwrap().2, Access::READ);
        assert_eq!(
            f.code(Request::MapRegion {
                access: Access::WRITE,
                backing: ro
            }),
            ErrorCode::PermissionDenied
        );
    }
    let mut g = fixture_read_only();
    std::fs::write(g.root.join("ro.bin"), vec![1u8; 4096]).unwrap();
    let b = g.ok(Request::MapRegion {
        access: all,
        backing: ro,
    });
    assert!(
        matches!(reply(&b), Reply::MapRegion(r) if r.access == Access::READ),
        "{:?}",
        reply(&b)
    );
    assert_eq!(g.remote.registered.last().unwrap().2, Access::READ);
    assert_eq!(
        g.code(Request::MapRegion {
            access: Access::WRITE.union(Access::ATOMIC),
            backing: ro
        }),
        ErrorCode::PermissionDenied
    );
    // Anonymous memory is the node's own: writable on a read-only delegate too.
    let anon = Backing::Anonymous { len: 4096 };
    assert!(
        matches!(reply(&g.ok(Request::MapRegion { access: all, backing: anon })), Reply::MapRegion(r) if r.access == all)
    );
    // Nothing else writes either.
    assert_eq!(
        g.code(Request::Open {
            flags: OpenFlags::WRITE,
            mode: 0,
            path: p("ro.bin")
        }),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        g.code(Request::Open {
            flags: CREATE,
            mode: 0o600,
            path: p("new")
        }),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        g.code(Request::Mkdir {
            mode: 0o700,
            path: p("d")
        }),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        g.code(Request::Unlink {
            dir: false,
            path: p("ro.bin")
        }),
        ErrorCode::PermissionDenied
    );
    let h = g.open("ro.bin", OpenFlags::READ);
    assert_eq!(
        reply(&g.ok(Request::Pread {
            handle: h,
            offset: 0,
            len: 2,
            place: Place::Inline
        })),
        Reply::Pread(Read::Inline(&[1, 1]))
    );
    assert_eq!(tree(&g.root), BTreeSet::from(["ro.bin".to_string()]));
    // Offsets must be page-aligned and the range inside the file.
    let unaligned = Backing::File {
        path: p("shared.bin"),
        offset: 100,
        len: 10,
    };
    assert_eq!(
        f.code(Request::MapRegion {
            access: Access::READ,
            backing: unaligned
        }),
        ErrorCode::Invalid
    );
    let past = Backing::File {
        path: p("shared.bin"),
        offset: 8192,
        len: 8192,
    };
    assert_eq!(
        f.code(Request::MapRegion {
            access: Access::READ,
            backing: past
        }),
        ErrorCode::Invalid
    );
    let wrap = Backing::File {
        path: p("shared.bin"),
        offset: 4096 * 1024,
        len: u64::MAX - 4096,
    };
    assert!(matches!(
        f.call(Request::MapRegion {
            access: Access::READ,
            backing: wrap
        }),
        Got::Failed(_, _)
    ));
}

#[test]
fn long_listings_come_a_reply_at_a_time() {
    let mut f = fixture();
    let mut want = BTreeSet::new();
    for i in 0..60 {
        let name = format!("{i:03}-{}", "n".repeat(200));
        std::fs::write(f.root.join(&name), b"").unwrap();
        want.insert(name);
    }
    let mut got = BTreeSet::new();
    let mut cookie = 0;
    let mut replies = 0;
    loop {
        let b = f.ok(Request::ListDir {
            cookie,
            path: p("."),
        });
        replies += 1;
        let Reply::ListDir { next, entries } = reply(&b) else {
            panic!()
        };
        for e in entries.iter() {
            assert!(got.insert(String::from_utf8(e.name.to_vec()).unwrap()));
        }
        if next == 0 {
            break;
        }
        assert!(next > cookie);
        cookie = next;
    }
    assert_eq!(got, want);
    assert!(replies >= 3, "{replies}");
}

/// xorshift64*, fixed seed.
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

#[test]
fn random_and_mutated_requests_never_crash_or_write_outside_the_root() {
    let mut f = fixture();
    std::os::unix::fs::symlink(&f.outside, f.root.join("out")).unwrap();
    std::fs::write(f.root.join("seed"), b"0123456789").unwrap();
    f.remote.memory.insert(
        0x60,
        NodeBuffer {
            addr: 0x4000,
            bytes: vec![5; 4096],
        },
    );
    let outside_before = tree(&f.outside);
    let seeds: Vec<Request<'static>> = vec![
        Request::Null { payload: b"abc" },
        Request::Clock,
        Request::Open {
            flags: CREATE,
            mode: 0o600,
            path: Path::new(b"seed").unwrap(),
        },
        Request::Open {
            flags: OpenFlags::READ,
            mode: 0,
            path: Path::new(b"out/secret").unwrap(),
        },
        Request::Close { handle: 1 },
        Request::Pread {
            handle: 1,
            offset: 2,
            len: 4,
            place: Place::Inline,
        },
        Request::Pread {
            handle: 1,
            offset: 0,
            len: 8,
            place: Place::Remote {
                addr: 0x4000,
                rkey: 0x60,
            },
        },
        Request::Pwrite {
            handle: 1,
            offset: 3,
            source: Source::Inline(b"xyz"),
        },
        Request::Pwrite {
            handle: 1,
            offset: 0,
            source: Source::Remote {
                addr: 0x4000,
                rkey: 0x60,
                len: 16,
            },
        },
        Request::Fstat { handle: 1 },
        Request::Fsync { handle: 1 },
        Request::Mkdir {
            mode: 0o700,
            path: Path::new(b"dir").unwrap(),
        },
        Request::Unlink {
            dir: true,
            path: Path::new(b"dir").unwrap(),
        },
        Request::ListDir {
            cookie: 0,
            path: Path::new(b".").unwrap(),
        },
        Request::Log {
            level: LogLevel::Info,
            text: b"hi",
        },
        Request::MapRegion {
            access: Access::READ,
            backing: Backing::Anonymous { len: 4096 },
        },
        Request::MapRegion {
            access: Access::WRITE,
            backing: Backing::File {
                path: Path::new(b"seed").unwrap(),
                offset: 0,
                len: 8,
            },
        },
        Request::UnmapRegion { region: 1 },
    ];
    let mut rng = Rng(0x5eed);
    let mut outcomes = [0usize; 3];
    for i in 0..30_000u32 {
        let mut msg = vec![0u8; MAX_MESSAGE];
        let n = seeds[rng.below(seeds.len())].emit(i, &mut msg).unwrap();
        msg.truncate(n);
        match rng.below(4) {
            0 => {
                for _ in 0..=rng.below(4) {
                    let at = rng.below(msg.len());
                    msg[at] = rng.next() as u8;
                }
            }
            1 => {
                let at = HEADER_LEN.min(msg.len() - 1)
                    + rng.below(msg.len() - HEADER_LEN.min(msg.len() - 1));
                msg[at] ^= 1 << rng.below(8);
            }
            2 => {
                let len = HEADER_LEN + rng.below(80);
                msg.resize(len, rng.next() as u8);
                fix_len(&mut msg);
            }
            _ => msg = (0..rng.below(200)).map(|_| rng.next() as u8).collect(),
        }
        let mut out = vec![0u8; MAX_MESSAGE];
        let o = f
            .delegate
            .call(f.node, &mut f.remote, &msg, &mut out, f.now);
        match o {
            Outcome::Reply(n) | Outcome::Goodbye(n) => {
                outcomes[0] += 1;
                let pk = Packet::new_checked(&out[..n]).expect("every reply well-formed");
                assert!(pk.is_reply());
                let _ = Reply::parse(&pk).expect("every reply parses");
                if msg.len() >= HEADER_LEN {
                    assert_eq!(&out[8..12], &msg[8..12], "the call's tag");
                }
                if matches!(o, Outcome::Goodbye(_)) {
                    outcomes[2] += 1;
                    f.node = f.delegate.admit(4, 4, 0, f.now).unwrap().id;
                }
            }
            Outcome::Lost => {
                outcomes[1] += 1;
                f.node = f.delegate.admit(4, 4, 0, f.now).unwrap().id;
            }
        }
    }
    assert_eq!(tree(&f.outside), outside_before);
    assert_eq!(
        std::fs::read(f.outside.join("secret")).unwrap(),
        b"outside the root"
    );
    assert!(outcomes[0] > 20_000, "{outcomes:?}");
}
