//! `cargo qemu fabric`: the emulated fabric (one `sim::mpqemu::Server`, N HCAs on one switch,
//! its subnet manager on) as a process of its own, which `cargo qemu node --fabric DIR --index
//! I` processes attach their QEMU to, as real nodes plug into a switch.
//!
//! The fabric listens on one UNIX socket per node, `DIR/node<I>.sock`. A node attaches in three
//! steps over that socket (the attach protocol, text lines):
//!
//! 1. the node creates the proxy socket pair and sends, in one `sendmsg`, the line
//!    `attach NAME qtest=PATH qmp=PATH [profile=NAME]` with the model's end of the pair as
//!    `SCM_RIGHTS` (PATH: the qtest and QMP sockets the node's QEMU will create, through which
//!    the model delivers interrupts under TCG, as for guests the runner starts itself; NAME:
//!    the device profile the node asks for, else the fabric's own for that index);
//! 2. the fabric plugs a new HCA with that profile into the fabric, serves the socket (`Server::attach`) and
//!    answers `ok hca N` (or `error MESSAGE`); the node then starts QEMU with its end of the
//!    pair (`x-pci-proxy-dev,fd=...`). Guest RAM reaches the model as the proxy's own
//!    SYNC_SYSMEM memfds over that socket (docs/mpqemu.md), so nothing else is shared;
//! 3. whenever the node sends `report` (at its table header, at each result line and when its
//!    QEMU has ended) the fabric answers `counters ...` (`sim::Counters`' display), `pcie
//!    V,...` (the values of `pingpong::PCIE_COLUMNS`), one `violation ...` line per contract
//!    violation and `end N`.
//!
//! The connection stays open for the node's whole run: when it closes the fabric frees the
//! index (the HCA stays on the fabric with its counters, as with the in-process server); when
//! the fabric stops, the node sees the connection close and stops its QEMU.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use sim::mpqemu::{IrqTransport, QtestConfig, Server, ServerOptions};
use sim::{Fabric, FabricConfig};

use crate::{say, Exit};

/// Most nodes one fabric process serves (the switch's ports in use; LIDs are given in attach
/// order by the fabric's subnet manager).
pub const MAX_NODES: usize = 16;

/// How long either side waits for the other's answer in the attach protocol.
pub const PROTOCOL_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest line of the attach protocol.
const MAX_LINE: usize = 4096;

/// `cargo qemu fabric`.
#[derive(Debug, clap::Args)]
pub struct FabricArgs {
    /// Number of nodes (one listening socket each, `DIR/node0.sock` ...), 1..=16.
    #[arg(long, value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u16).range(1..=MAX_NODES as i64))]
    pub nodes: u16,
    /// Directory for the node sockets (created mode 0700 if missing; the sockets are removed
    /// at exit) [default: a fresh directory under the system temporary directory, removed at
    /// exit].
    #[arg(long, value_name = "DIR")]
    pub socket_dir: Option<PathBuf>,
    /// Device profile of each node's HCA, by index, for nodes whose `node --profile` names
    /// none.
    #[command(flatten)]
    pub profile: crate::device_profile::ProfileArgs,
}

/// The socket of node `index` in `dir`.
pub fn node_socket(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("node{index}.sock"))
}

/// What a node asks when it attaches.
#[derive(Clone, Debug, PartialEq)]
pub struct AttachRequest {
    pub name: String,
    pub qtest: PathBuf,
    pub qmp: PathBuf,
    /// Set the fabric's packet loss: the drop probability in [0, 1) and the loss generator's
    /// seed (`node --drop-probability P --seed N`). Fabric-wide: the last node to ask sets it.
    pub loss: Option<(f64, u64)>,
    /// Record the model's behaviour trace (every HCA's, from here on; `node --trace`).
    pub trace: bool,
    /// The device profile the node's HCA is to have (`node --profile`); `None`: the fabric's.
    pub profile: Option<String>,
}

impl AttachRequest {
    /// The request line (without the newline).
    pub fn line(&self) -> String {
        let mut line = format!(
            "attach {} qtest={} qmp={}",
            self.name,
            self.qtest.display(),
            self.qmp.display()
        );
        if let Some((p, seed)) = self.loss {
            line.push_str(&format!(" drop={p} seed={seed}"));
        }
        if self.trace {
            line.push_str(" trace=on");
        }
        if let Some(p) = &self.profile {
            line.push_str(&format!(" profile={p}"));
        }
        line
    }

    /// Parses a request line; `Err` says what is wrong.
    pub fn parse(line: &str) -> Result<AttachRequest, String> {
        let mut words = line.trim_end().split(' ');
        if words.next() != Some("attach") {
            return Err(format!(
                "expected `attach NAME qtest=PATH qmp=PATH`, got {line:?}"
            ));
        }
        let name = words
            .next()
            .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_graphic()))
            .ok_or("attach: no node name")?
            .to_string();
        let mut qtest = None;
        let mut qmp = None;
        let mut drop = None;
        let mut seed = None;
        let mut trace = false;
        let mut profile = None;
        for word in words {
            match word.split_once('=') {
                Some(("qtest", p)) if !p.is_empty() => qtest = Some(PathBuf::from(p)),
                Some(("qmp", p)) if !p.is_empty() => qmp = Some(PathBuf::from(p)),
                Some(("drop", p)) => {
                    drop = Some(
                        crate::args::parse_drop_probability(p)
                            .map_err(|e| format!("attach: drop={e}"))?,
                    )
                }
                Some(("seed", n)) => {
                    seed = Some(
                        n.parse::<u64>()
                            .map_err(|_| format!("attach: seed={n:?} is not a number"))?,
                    )
                }
                Some(("trace", "on")) => trace = true,
                Some(("profile", p)) => {
                    sim::DeviceProfile::named(p).map_err(|e| format!("attach: {e}"))?;
                    profile = Some(p.to_string());
                }
                _ => return Err(format!("attach: unexpected {word:?}")),
            }
        }
        let loss = match (drop, seed) {
            (Some(p), Some(seed)) => Some((p, seed)),
            (None, None) => None,
            _ => return Err("attach: drop= and seed= go together".into()),
        };
        match (qtest, qmp) {
            (Some(qtest), Some(qmp)) => Ok(AttachRequest {
                name,
                qtest,
                qmp,
                loss,
                trace,
                profile,
            }),
            _ => Err("attach: qtest= and qmp= are both needed".into()),
        }
    }
}

/// Sends `line` and a newline with `fd` attached (`SCM_RIGHTS`) in one `sendmsg`.
pub fn send_with_fd(sock: &UnixStream, line: &str, fd: RawFd) -> io::Result<()> {
    let mut data = line.as_bytes().to_vec();
    data.push(b'\n');
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty message header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: msg_control points at `space` bytes, enough for one header carrying one fd
    // (CMSG_SPACE above), so CMSG_FIRSTHDR is non-null and CMSG_DATA has room for the fd.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
    }
    // SAFETY: every pointer in `msg` refers to live buffers of the stated lengths.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != data.len() {
        return Err(io::Error::other("attach request sent in part"));
    }
    Ok(())
}

/// Receives one line (up to [`MAX_LINE`] bytes, read in as many `recvmsg` as it takes within
/// the socket's read timeout) and the descriptors that came with it (close-on-exec).
pub fn recv_line_with_fds(sock: &UnixStream) -> io::Result<(String, Vec<OwnedFd>)> {
    let mut line = Vec::new();
    let mut fds = Vec::new();
    loop {
        let mut buf = [0u8; 512];
        let mut control = [0u64; 16];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: an all-zero msghdr is a valid empty message header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // A peek first, so bytes after the newline stay in the socket for the next reader.
        // SAFETY: `msg` points at live buffers of the stated lengths.
        let n = unsafe {
            libc::recvmsg(
                sock.as_raw_fd(),
                &mut msg,
                libc::MSG_CMSG_CLOEXEC | libc::MSG_PEEK,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let peeked = &buf[..n as usize];
        let take = peeked
            .iter()
            .position(|&b| b == b'\n')
            .map_or(n as usize, |i| i + 1);
        // The real read, of exactly the bytes up to the newline (the descriptors ride on the
        // first byte of the message and are received with it).
        let mut exact = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: take,
        };
        msg.msg_iov = &mut exact;
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: as above.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel filled msg_control; CMSG_FIRSTHDR/NXTHDR walk it within
        // msg_controllen, and each SCM_RIGHTS payload is an array of descriptors now ours.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let bytes = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                    for i in 0..bytes / std::mem::size_of::<RawFd>() {
                        fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
        line.extend_from_slice(&buf[..n as usize]);
        if line.ends_with(b"\n") {
            line.pop();
            return Ok((String::from_utf8_lossy(&line).into_owned(), fds));
        }
        if line.len() > MAX_LINE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "attach protocol line too long",
            ));
        }
    }
}

/// The model's report on one node, as the fabric sends it after `report`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelReport {
    /// The counters line (`sim::Counters`' display).
    pub counters: String,
    /// The counters the runners report as PCIe traffic, in the order of
    /// [`crate::pingpong::PCIE_COLUMNS`].
    pub pcie: Option<[u64; 12]>,
    /// The HCA's send-queue switches (`sim::SqSwitch`): the QP and the PCIe counters then.
    pub sq_switches: Vec<(u32, [u64; 12])>,
    pub violations: Vec<String>,
}

impl ModelReport {
    /// The PCIe counters as a `sim::Counters` (the others zero).
    pub fn pcie_counters(&self) -> Option<sim::Counters> {
        self.pcie.map(counters_from_pcie)
    }
}

/// PCIe counter values in the order of [`crate::pingpong::PCIE_COLUMNS`] as a
/// `sim::Counters` (the others zero).
pub fn counters_from_pcie(values: [u64; 12]) -> sim::Counters {
    let [mmio_writes, mmio_reads, blueflame_bytes, dma_reads, dma_read_bytes, icm_reads, dma_writes, dma_write_bytes, icm_writes, interrupts, packets_sent, packets_received] =
        values;
    sim::Counters {
        mmio_writes,
        mmio_reads,
        blueflame_bytes,
        dma_reads,
        dma_read_bytes,
        icm_reads,
        dma_writes,
        dma_write_bytes,
        icm_writes,
        interrupts,
        packets_sent,
        packets_received,
        ..sim::Counters::default()
    }
}

/// Parses a `pcie v,v,...` line's values.
fn parse_pcie(values: &str) -> Option<[u64; 12]> {
    let parsed: Vec<u64> = values
        .split(',')
        .map(|v| v.trim().parse().ok())
        .collect::<Option<_>>()?;
    parsed.try_into().ok()
}

/// One attached node's control connection, served on its own thread until the node closes it
/// or the fabric stops. `release` frees the index as soon as the node has gone (before the
/// HCA's connection is wound down, which may wait for its interrupt worker).
fn serve_node(
    server: &Server,
    index: usize,
    default_profile: sim::DeviceProfile,
    stream: UnixStream,
    stop: &AtomicBool,
    release: &dyn Fn(),
) -> Result<()> {
    stream.set_read_timeout(Some(PROTOCOL_TIMEOUT))?;
    let (line, mut fds) = recv_line_with_fds(&stream).context("reading the attach request")?;
    let mut writer = stream.try_clone()?;
    let request = match AttachRequest::parse(&line) {
        Ok(r) if fds.len() == 1 => r,
        Ok(_) => {
            let _ = writeln!(writer, "error expected one descriptor, got {}", fds.len());
            bail!("attach with {} descriptors", fds.len());
        }
        Err(e) => {
            let _ = writeln!(writer, "error {e}");
            bail!("{e}");
        }
    };
    let proxy = UnixStream::from(fds.remove(0));
    let name = format!("node{index}");
    let transport = IrqTransport::Qtest(QtestConfig {
        connect_timeout: Duration::from_secs(30),
        ..QtestConfig::new(request.qtest.clone(), Some(request.qmp.clone()))
    });
    let profile = match &request.profile {
        // Checked by `AttachRequest::parse`.
        Some(p) => sim::DeviceProfile::named(p)?,
        None => default_profile,
    };
    let profile_name = profile.name.clone();
    let mut guest = server
        .attach(&name, proxy, profile, transport)
        .with_context(|| format!("attaching {}", request.name))?;
    let hca = guest.hca();
    server.with_fabric(|f| {
        if let Some((p, seed)) = request.loss {
            f.set_drop_probability(p);
            f.set_seed(seed);
        }
        if request.trace {
            f.set_trace(true);
        }
    });
    if let Some((p, seed)) = request.loss {
        say(&format!(
            "{name}: {} sets the fabric's drop probability {p} (seed {seed})",
            request.name
        ));
    }
    writeln!(writer, "ok hca {}", hca.0)?;
    say(&format!(
        "{name}: {} attached (HCA {} on the switch, profile {profile_name})",
        request.name, hca.0
    ));
    // Wait for `report` or the end of the connection, checking for the fabric's stop.
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut reader = BufReader::new(stream);
    let mut pending = String::new();
    loop {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        match reader.read_line(&mut pending) {
            Ok(0) => break,
            Ok(_) if pending.ends_with('\n') => {
                let command = std::mem::take(&mut pending);
                if command.trim() == "report" {
                    let counters = server.counters(hca);
                    let violations = server.violations(hca);
                    let values = crate::pingpong::pcie_values(&counters).map(|v| v.to_string());
                    let mut text = format!("counters {counters}\npcie {}\n", values.join(","));
                    for s in server.with_fabric(|f| f.sq_switches(hca)) {
                        let v = crate::pingpong::pcie_values(&s.counters).map(|v| v.to_string());
                        text.push_str(&format!("sq {:#x} {}\n", s.qpn, v.join(",")));
                    }
                    for v in &violations {
                        text.push_str(&format!("violation {}\n", v.to_string().replace('\n', " ")));
                    }
                    text.push_str(&format!("end {}\n", violations.len()));
                    writer.write_all(text.as_bytes())?;
                    say(&format!("{name}: model counters: {counters}"));
                    say(&format!("{name}: model violations: {}", violations.len()));
                } else if command.trim() == "trace" {
                    let trace = server.with_fabric(|f| f.trace(hca));
                    writeln!(writer, "trace {}", trace.len())?;
                    writer.write_all(trace.as_bytes())?;
                } else {
                    let _ = writeln!(writer, "error unknown request {:?}", command.trim());
                }
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e.into()),
        }
    }
    release();
    let end = guest.stop();
    say(&format!("{name}: {} detached ({end:?})", request.name));
    Ok(())
}

/// The socket directory and what to remove at exit.
struct Sockets {
    dir: PathBuf,
    /// The directory was created by this process (removed whole at exit).
    created: bool,
    paths: Vec<PathBuf>,
}

impl Drop for Sockets {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
        }
        if self.created {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Creates (or takes) the socket directory and binds one listener per node. A socket a live
/// fabric answers on is refused (exit 2); a stale one is replaced.
fn listen(dir: Option<&Path>, nodes: usize) -> Result<(Sockets, Vec<UnixListener>)> {
    let (dir, created) = match dir {
        Some(d) if d.is_dir() => (d.to_path_buf(), false),
        Some(d) => {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(d)
                .with_context(|| format!("creating {}", d.display()))?;
            (d.to_path_buf(), true)
        }
        None => {
            let d = std::env::temp_dir().join(format!("ibkern-fabric-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&d)
                .with_context(|| format!("creating {}", d.display()))?;
            (d, true)
        }
    };
    let mut sockets = Sockets {
        dir: dir.clone(),
        created,
        paths: Vec::new(),
    };
    let mut listeners = Vec::new();
    for index in 0..nodes {
        let path = node_socket(&dir, index);
        if path.as_os_str().len() > 100 {
            crate::usage!(
                "--socket-dir {}: socket paths must stay under 100 bytes (a UNIX socket's limit)",
                dir.display()
            );
        }
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            if !meta.file_type().is_socket() {
                crate::usage!("{} exists and is not a socket", path.display());
            }
            if UnixStream::connect(&path).is_ok() {
                crate::usage!(
                    "{}: another fabric is serving this directory",
                    path.display()
                );
            }
            std::fs::remove_file(&path)?;
        }
        let listener =
            UnixListener::bind(&path).with_context(|| format!("binding {}", path.display()))?;
        listener.set_nonblocking(true)?;
        sockets.paths.push(path);
        listeners.push(listener);
    }
    Ok((sockets, listeners))
}

/// Runs the fabric until SIGINT, SIGTERM or SIGHUP.
pub fn fabric_command(args: FabricArgs) -> Result<Exit> {
    let nodes = usize::from(args.nodes);
    let _active = crate::interrupt::Active::enter();
    crate::interrupt::check()?;
    let (sockets, listeners) = listen(args.socket_dir.as_deref(), nodes)?;
    let fabric = FabricConfig::default();
    let server = Arc::new(
        Server::new(
            Fabric::new(fabric),
            ServerOptions {
                connect_timeout: Duration::from_secs(30),
                ..ServerOptions::default()
            },
        )
        .context("starting the model server")?,
    );
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Arc<Mutex<Vec<bool>>> = Arc::new(Mutex::new(vec![false; nodes]));
    let dir = sockets.dir.display().to_string();
    let quoted = crate::command::shell_quote(&dir);
    println!(
        "fabric: {nodes} node(s) on one switch (subnet manager on, profile {}); sockets in {dir}",
        args.profile.names()
    );
    for index in 0..nodes {
        let role = if index == 0 { "server" } else { "client" };
        println!(
            "  node {index}: cargo qemu node --fabric {quoted} --index {index} --role {role} [-c UD -s 64 ...]"
        );
    }
    println!("fabric: ready; stop it with Ctrl-C or SIGTERM");
    let _ = io::stdout().flush();
    let mut threads = Vec::new();
    while crate::interrupt::check().is_ok() {
        for (index, listener) in listeners.iter().enumerate() {
            let stream = match listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e).context("accepting a node"),
            };
            stream.set_nonblocking(false)?;
            {
                let mut b = busy.lock().unwrap_or_else(|e| e.into_inner());
                if b[index] {
                    let mut s = &stream;
                    let _ = writeln!(s, "error node {index} is already attached");
                    say(&format!("node{index}: refused a second attach"));
                    continue;
                }
                b[index] = true;
            }
            let (server, stop, busy) = (server.clone(), stop.clone(), busy.clone());
            let profile = args.profile.for_node(index);
            threads.push(std::thread::spawn(move || {
                let release = || busy.lock().unwrap_or_else(|e| e.into_inner())[index] = false;
                if let Err(e) = serve_node(&server, index, profile, stream, &stop, &release) {
                    say(&format!("node{index}: {e:#}"));
                }
                release();
            }));
        }
        threads.retain(|t| !t.is_finished());
        std::thread::sleep(Duration::from_millis(20));
    }
    let sig = crate::interrupt::received().unwrap_or(0);
    let attached = busy
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|b| **b)
        .count();
    say(&format!(
        "{}: stopping the fabric ({attached} node(s) attached: their connections close, \
         and each node stops its QEMU)",
        crate::interrupt::name(sig)
    ));
    stop.store(true, Ordering::SeqCst);
    drop(listeners);
    let deadline = Instant::now() + Duration::from_secs(5);
    for t in threads {
        while !t.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if t.is_finished() {
            let _ = t.join();
        }
    }
    drop(sockets);
    say("fabric stopped");
    Ok(Exit::Success)
}

/// A node's side of the attach protocol: its connection to the fabric.
pub struct Attachment {
    stream: UnixStream,
    reader: BufReader<UnixStream>,
    /// The HCA's index on the fabric.
    pub hca: usize,
}

impl Attachment {
    /// Connects to node `index`'s socket in `dir` and hands over `proxy` (the model's end of
    /// the proxy socket pair) with the request. Usage errors for a missing fabric.
    pub fn connect(
        dir: &Path,
        index: usize,
        request: &AttachRequest,
        proxy: OwnedFd,
    ) -> Result<Attachment> {
        let path = node_socket(dir, index);
        if !path.exists() {
            bail!(
                "no fabric socket {} (is `cargo qemu fabric --nodes {}` running with this \
                 --socket-dir?)",
                path.display(),
                index + 1
            );
        }
        let stream = UnixStream::connect(&path)
            .with_context(|| format!("connecting to the fabric at {}", path.display()))?;
        stream.set_read_timeout(Some(PROTOCOL_TIMEOUT))?;
        send_with_fd(&stream, &request.line(), proxy.as_raw_fd())
            .context("sending the attach request")?;
        drop(proxy);
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut answer = String::new();
        reader
            .read_line(&mut answer)
            .context("waiting for the fabric's answer")?;
        let answer = answer.trim_end();
        let hca = match answer.strip_prefix("ok hca ") {
            Some(n) => n.parse().context("the fabric's answer")?,
            None => bail!(
                "the fabric refused node {index}: {}",
                answer.strip_prefix("error ").unwrap_or(answer)
            ),
        };
        Ok(Attachment {
            stream,
            reader,
            hca,
        })
    }

    /// Has the fabric closed the connection (stopped)? Never blocks.
    pub fn fabric_gone(&self) -> bool {
        let mut byte = [0u8; 1];
        // SAFETY: recv into a live one-byte buffer; MSG_PEEK leaves the data in place.
        let n = unsafe {
            libc::recv(
                self.stream.as_raw_fd(),
                byte.as_mut_ptr().cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        n == 0
            || (n < 0
                && !matches!(
                    io::Error::last_os_error().kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ))
    }

    /// Asks for the model's behaviour trace of this node's HCA (recorded when the node
    /// attached with `trace`; empty otherwise).
    pub fn trace(&mut self) -> Result<String> {
        (&self.stream)
            .write_all(b"trace\n")
            .context("asking the fabric for the model's trace")?;
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            bail!("the fabric closed the connection before the trace");
        }
        let len: usize = match line.trim_end().strip_prefix("trace ") {
            Some(n) => n
                .parse()
                .with_context(|| format!("bad trace line {line:?}"))?,
            None => bail!("unexpected answer {:?} to `trace`", line.trim_end()),
        };
        let mut text = vec![0u8; len];
        self.reader
            .read_exact(&mut text)
            .context("reading the model's trace")?;
        String::from_utf8(text).context("the model's trace is not UTF-8")
    }

    /// Asks for the model's report on this node's HCA.
    pub fn report(&mut self) -> Result<ModelReport> {
        (&self.stream)
            .write_all(b"report\n")
            .context("asking the fabric for the model's report")?;
        let mut report = ModelReport::default();
        let mut lines = 0;
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line)? == 0 {
                bail!("the fabric closed the connection before its report");
            }
            let line = line.trim_end();
            if let Some(c) = line.strip_prefix("counters ") {
                report.counters = c.to_string();
            } else if let Some(v) = line.strip_prefix("pcie ") {
                report.pcie =
                    Some(parse_pcie(v).with_context(|| format!("bad report line {line:?}"))?);
            } else if let Some(v) = line.strip_prefix("sq ") {
                let parsed = v.split_once(' ').and_then(|(qpn, values)| {
                    let qpn = u32::from_str_radix(qpn.strip_prefix("0x")?, 16).ok()?;
                    Some((qpn, parse_pcie(values)?))
                });
                report
                    .sq_switches
                    .push(parsed.with_context(|| format!("bad report line {line:?}"))?);
            } else if let Some(v) = line.strip_prefix("violation ") {
                report.violations.push(v.to_string());
            } else if line.starts_with("end ") {
                return Ok(report);
            } else {
                bail!("unexpected report line {line:?}");
            }
            lines += 1;
            if lines > 100_000 {
                bail!("the fabric's report does not end");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_requests_round_trip_and_bad_ones_are_refused() {
        let r = AttachRequest {
            name: "server".into(),
            qtest: "run/d/qtest.sock".into(),
            qmp: "run/d/qmp.sock".into(),
            loss: None,
            trace: false,
            profile: None,
        };
        assert_eq!(AttachRequest::parse(&r.line()), Ok(r.clone()));
        let lossy = AttachRequest {
            loss: Some((0.25, 7)),
            trace: true,
            profile: Some("cx3pro-fdr".into()),
            ..r
        };
        assert!(lossy
            .line()
            .ends_with(" drop=0.25 seed=7 trace=on profile=cx3pro-fdr"));
        assert_eq!(AttachRequest::parse(&lossy.line()), Ok(lossy));
        for bad in [
            "",
            "hello",
            "attach",
            "attach x",
            "attach x qtest=/a",
            "attach x qtest=/a qmp=",
            "attach x qtest=/a qmp=/b extra",
            "attach x qtest=/a qmp=/b drop=0.5",
            "attach x qtest=/a qmp=/b profile=cx9",
            "attach x qtest=/a qmp=/b drop=1 seed=1",
            "attach x qtest=/a qmp=/b drop=0.5 seed=-1",
            "attach x qtest=/a qmp=/b trace=off",
        ] {
            assert!(AttachRequest::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn pcie_values_come_back_as_the_same_counters() {
        let c = sim::Counters {
            mmio_writes: 1,
            mmio_reads: 2,
            blueflame_bytes: 3,
            dma_reads: 4,
            dma_read_bytes: 5,
            icm_reads: 6,
            dma_writes: 7,
            dma_write_bytes: 8,
            icm_writes: 9,
            interrupts: 10,
            packets_sent: 11,
            packets_received: 12,
            ..sim::Counters::default()
        };
        let line = crate::pingpong::pcie_values(&c)
            .map(|v| v.to_string())
            .join(",");
        let report = ModelReport {
            pcie: parse_pcie(&line),
            ..ModelReport::default()
        };
        assert_eq!(report.pcie_counters(), Some(c));
        assert_eq!(parse_pcie("1,2"), None);
        assert_eq!(parse_pcie("1,2,3,4,5,6,7,8,9,10,11,x"), None);
    }

    #[test]
    fn a_descriptor_travels_with_its_line_and_the_next_line_stays_queued() {
        let (a, b) = UnixStream::pair().unwrap();
        let (x, mut y) = UnixStream::pair().unwrap();
        send_with_fd(&a, "attach n qtest=/q qmp=/m", x.as_raw_fd()).unwrap();
        (&a).write_all(b"report\n").unwrap();
        b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let (line, fds) = recv_line_with_fds(&b).unwrap();
        assert_eq!(line, "attach n qtest=/q qmp=/m");
        assert_eq!(fds.len(), 1);
        // The received descriptor is the same socket: what is written to it reaches `y`.
        let mut passed = UnixStream::from(fds.into_iter().next().unwrap());
        passed.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        y.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        let (line, fds) = recv_line_with_fds(&b).unwrap();
        assert_eq!((line.as_str(), fds.len()), ("report", 0));
        drop(a);
        assert_eq!(
            recv_line_with_fds(&b).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        drop(x);
    }
}
