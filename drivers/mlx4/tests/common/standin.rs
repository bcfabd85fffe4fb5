//! A delegate stand-in on a model HCA, for the client's host tests: it speaks the set-up
//! exchange and the calls of docs/delegation.md through the real driver (its own
//! `Hca<SimPlatform>` on the same fabric), keeps its files in memory, serves regions from
//! its arena, and can misbehave on purpose ([`Fault`]). It runs one step at a time in the
//! client's thread: [`StandInEnv`] steps it whenever the client relaxes.

use std::collections::HashMap;

use bench::env::{IsrHandler, IsrProgress};
use bench::BenchEnv;
use delegate_wire::connect::{self, Kind, Setup};
use delegate_wire::{
    Access, Backing, ErrorCode, Failure, FileKind, Packet, Place, Read, RegionInfo, Reply, Request,
    Source, Stat, MAX_MESSAGE,
};
use mlx4::{Hca, Platform};
use verbs::*;

use super::bench_env::SimEnv;
use super::{test_config, SimPlatform};

/// How the stand-in misbehaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Takes the requests and answers none.
    Silent,
    /// After this many calls, destroys its RC QP (the delegate's process is gone).
    VanishAfter(u32),
    /// Answers every request with bytes that are no reply at all.
    Garbage,
    /// Answers with a well-formed reply of another op (a clock reply to everything).
    WrongOp,
    /// Answers with the request's tag plus one.
    WrongTag,
}

const CREDITS: u16 = 8;
const GRH: usize = 40;
const UD_SLOT: usize = 128;
const UD_RECVS: u32 = 16;
const STAGING: usize = 1 << 20;

struct Conn {
    session: u32,
    accept: [u8; connect::LEN],
    node_lid: u16,
    node_ud_qpn: u32,
    cq: CqH,
    qp: QpH,
    recv: DmaRegion,
    send: DmaRegion,
    staging: DmaRegion,
    mrs: [MrH; 3],
    next_send: usize,
}

type Dev = Hca<SimPlatform>;
type CqH = <Dev as Device>::Cq;
type QpH = <Dev as Device>::Qp;
type MrH = <Dev as Device>::Mr;
type AhH = <Dev as Device>::Ah;

pub struct StandIn {
    pub hca: Dev,
    pub env: SimEnv,
    pub lid: u16,
    pd: <Dev as Device>::Pd,
    ud_cq: CqH,
    ud_qp: QpH,
    ud_buf: DmaRegion,
    ud_mr: MrH,
    ahs: Vec<(u16, AhH)>,
    conn: Option<Conn>,
    pub files: HashMap<String, Vec<u8>>,
    pub dirs: Vec<String>,
    open: HashMap<u32, String>,
    next_handle: u32,
    regions: Vec<(RegionInfo, DmaRegion, MrH)>,
    pub fault: Fault,
    /// Requests taken.
    pub calls: u32,
    /// The log lines the node sent, and what the stand-in noticed.
    pub log: Vec<String>,
    /// Connects answered (repeats included).
    pub accepts: u32,
    pub goodbyes: u32,
    /// Requests that arrived while an RDMA was waited for, served next.
    deferred: Vec<(usize, usize)>,
    /// An RC ib_send_lat server on the same HCA (the benchmark's baseline), stepped with
    /// the stand-in.
    pub pingpong: Option<bench::PingPong<Dev>>,
    pub pingpong_out: String,
    pub pingpong_result: Option<std::result::Result<bench::SweepSummary, bench::BenchError>>,
}

fn ok<T>(r: verbs::Result<T>) -> T {
    r.expect("stand-in verb")
}

impl StandIn {
    /// Brings up the HCA of `p` and listens on a UD QP of the rendezvous Q_Key.
    pub fn new(p: SimPlatform) -> StandIn {
        let env = SimEnv::new(&p);
        let mut hca = Hca::init(p, test_config()).expect("stand-in bring-up");
        let lid = hca.wait_port_active(1, 5000).expect("port active").lid;
        let pd = ok(hca.alloc_pd());
        let ud_cq = ok(hca.create_cq(64));
        let ud_qp = ok(hca.create_qp(&QpInitAttr {
            pd,
            send_cq: ud_cq,
            recv_cq: ud_cq,
            qp_type: QpType::Ud,
            cap: QpCap {
                max_send_wr: 16,
                max_recv_wr: UD_RECVS,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 64,
            },
            sq_sig_all: true,
        }));
        let mut init = QpAttr::new(QpState::Init);
        init.qkey = connect::RDV_QKEY;
        ok(hca.modify_qp(ud_qp, &init));
        ok(hca.modify_qp(ud_qp, &QpAttr::new(QpState::Rtr)));
        ok(hca.modify_qp(ud_qp, &QpAttr::new(QpState::Rts)));
        let mut env = env;
        let ud_buf = env.alloc_dma(UD_RECVS as usize * UD_SLOT, 64).unwrap();
        let ud_mr = ok(hca.reg_mr(
            pd,
            ud_buf.bus(),
            ud_buf.size() as u64,
            AccessFlags::LOCAL_WRITE,
        ));
        let mut s = StandIn {
            hca,
            env,
            lid,
            pd,
            ud_cq,
            ud_qp,
            ud_buf,
            ud_mr,
            ahs: Vec::new(),
            conn: None,
            files: HashMap::new(),
            dirs: Vec::new(),
            open: HashMap::new(),
            next_handle: 1,
            regions: Vec::new(),
            fault: Fault::None,
            calls: 0,
            log: Vec::new(),
            accepts: 0,
            goodbyes: 0,
            deferred: Vec::new(),
            pingpong: None,
            pingpong_out: String::new(),
            pingpong_result: None,
        };
        for i in 0..UD_RECVS {
            s.post_ud_recv(i as usize);
        }
        s
    }

    /// The rendezvous QPN a node sends its Connect to.
    pub fn rdv_qpn(&self) -> u32 {
        self.hca.qp_num(self.ud_qp)
    }

    /// Bytes of a region as the stand-in holds them.
    pub fn region_bytes(&self, region: u32) -> Vec<u8> {
        let (info, buf, _) = self
            .regions
            .iter()
            .find(|(i, _, _)| i.region == region)
            .expect("region");
        (0..info.len as usize)
            .map(|k| buf.read::<1>(k).unwrap()[0])
            .collect()
    }

    fn post_ud_recv(&mut self, i: usize) {
        let sge = [Sge {
            addr: self.ud_buf.bus_at(i * UD_SLOT),
            length: UD_SLOT as u32,
            lkey: self.hca.mr_lkey(self.ud_mr),
        }];
        ok(self.hca.post_recv(
            self.ud_qp,
            &RecvWr {
                wr_id: i as u64,
                sg_list: &sge,
            },
        ));
    }

    /// One step: answers what arrived on the rendezvous QP and on the connection.
    pub fn step(&mut self) {
        let mut wc = [WorkCompletion::default(); 8];
        let n = ok(self.hca.poll_cq(self.ud_cq, &mut wc));
        for w in wc[..n].iter().copied() {
            if w.opcode != WcOpcode::Recv {
                continue;
            }
            let i = w.wr_id as usize;
            let msg: [u8; 64] = self.ud_buf.read(i * UD_SLOT + GRH).unwrap();
            self.post_ud_recv(i);
            if let Ok(Some(s)) = Setup::parse(&msg) {
                if s.kind == Kind::Connect {
                    self.on_connect(&s, w.slid, w.src_qp);
                }
            }
        }
        self.serve();
        if let Some(pp) = self.pingpong.as_mut() {
            let r = pp.step(
                &mut self.hca,
                &mut self.env,
                &mut self.pingpong_out,
                bench::StepBudget::interleaved(),
            );
            if !matches!(r, Ok(bench::Status::Running)) {
                let pp = self.pingpong.take().unwrap();
                self.pingpong_result = Some(r.map(|_| pp.summary()));
                pp.close(&mut self.hca, &mut self.env);
            }
        }
    }

    /// Starts an RC ib_send_lat server at the well-known rendezvous QPN (returned).
    pub fn serve_send_lat(&mut self, cfg: &bench::PingPongConfig) -> u32 {
        let pp = bench::PingPong::start(&mut self.hca, &mut self.env, cfg).expect("server start");
        self.pingpong = Some(pp);
        cfg.local_rdv_qpn(self.hca.query_device().reserved_qps)
    }

    fn on_connect(&mut self, c: &Setup, slid: u16, src_qp: u32) {
        let same = self.conn.as_ref().is_some_and(|k| k.session == c.session);
        if !same {
            if let Some(old) = self.conn.take() {
                self.drop_conn(old);
            }
            let conn = self.make_conn(c, slid, src_qp);
            self.conn = Some(conn);
        }
        let (accept, lid, qpn) = {
            let k = self.conn.as_ref().unwrap();
            (k.accept, k.node_lid, k.node_ud_qpn)
        };
        let ah = match self.ahs.iter().find(|(l, _)| *l == lid) {
            Some((_, ah)) => *ah,
            None => {
                let ah = ok(self.hca.create_ah(
                    self.pd,
                    &AhAttr {
                        dlid: lid,
                        port: 1,
                        ..AhAttr::default()
                    },
                ));
                self.ahs.push((lid, ah));
                ah
            }
        };
        ok(self.hca.post_send(
            self.ud_qp,
            &SendWr {
                wr_id: 1 << 40,
                opcode: WrOpcode::Send,
                payload: Payload::Inline(&accept),
                flags: SendFlags::SIGNALED,
                ud: Some(UdDest {
                    ah,
                    remote_qpn: qpn,
                    remote_qkey: connect::RDV_QKEY,
                }),
            },
        ));
        self.accepts += 1;
    }

    fn make_conn(&mut self, c: &Setup, slid: u16, src_qp: u32) -> Conn {
        let cq = ok(self.hca.create_cq(4 * u32::from(CREDITS) + 8));
        let qp = ok(self.hca.create_qp(&QpInitAttr {
            pd: self.pd,
            send_cq: cq,
            recv_cq: cq,
            qp_type: QpType::Rc,
            cap: QpCap {
                max_send_wr: 2 * u32::from(CREDITS) + 4,
                max_recv_wr: u32::from(CREDITS),
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
        }));
        let bytes = usize::from(CREDITS) * MAX_MESSAGE;
        let recv = self.env.alloc_dma(bytes, 4096).unwrap();
        let send = self.env.alloc_dma(bytes, 4096).unwrap();
        let staging = self.env.alloc_dma(STAGING, 4096).unwrap();
        let mrs = [&recv, &send, &staging].map(|r| {
            ok(self
                .hca
                .reg_mr(self.pd, r.bus(), r.size() as u64, AccessFlags::LOCAL_WRITE))
        });
        let mut init = QpAttr::new(QpState::Init);
        init.access =
            AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
        ok(self.hca.modify_qp(qp, &init));
        for i in 0..usize::from(CREDITS) {
            let sge = [Sge {
                addr: recv.bus_at(i * MAX_MESSAGE),
                length: MAX_MESSAGE as u32,
                lkey: self.hca.mr_lkey(mrs[0]),
            }];
            ok(self.hca.post_recv(
                qp,
                &RecvWr {
                    wr_id: i as u64,
                    sg_list: &sge,
                },
            ));
        }
        let mtu = c.mtu.min(Mtu::Mtu2048 as u8);
        let mut rtr = QpAttr::new(QpState::Rtr);
        rtr.path_mtu = Mtu::from_raw(mtu).unwrap();
        rtr.dest_qp_num = c.qpn;
        rtr.rq_psn = c.psn;
        rtr.ah = AhAttr {
            dlid: slid,
            port: 1,
            ..AhAttr::default()
        };
        rtr.max_dest_rd_atomic = 1;
        rtr.min_rnr_timer = 12;
        ok(self.hca.modify_qp(qp, &rtr));
        let psn = 0x00_1234;
        let mut rts = QpAttr::new(QpState::Rts);
        rts.sq_psn = psn;
        rts.max_rd_atomic = 4;
        ok(self.hca.modify_qp(qp, &rts));
        let mut accept = [0u8; connect::LEN];
        Setup {
            kind: Kind::Accept,
            protocol: delegate_wire::VERSION,
            mtu,
            session: c.session,
            node: 1,
            lid: self.lid,
            qpn: self.hca.qp_num(qp),
            psn,
            credits: CREDITS,
            max_message: MAX_MESSAGE as u16,
            lease_ms: c.lease_ms,
            reason: None,
            guid: 0x5354_414e_4449_4e00,
        }
        .emit(&mut accept)
        .unwrap();
        self.log.push(format!(
            "connect from LID {slid} GUID {:#x} session {:#x}",
            c.guid, c.session
        ));
        Conn {
            session: c.session,
            accept,
            node_lid: slid,
            node_ud_qpn: src_qp,
            cq,
            qp,
            recv,
            send,
            staging,
            mrs,
            next_send: 0,
        }
    }

    fn drop_conn(&mut self, k: Conn) {
        let _ = self.hca.destroy_qp(k.qp);
        let _ = self.hca.destroy_cq(k.cq);
        for mr in k.mrs {
            let _ = self.hca.dereg_mr(mr);
        }
    }

    /// Takes the connection's completions: each request gets its answer.
    fn serve(&mut self) {
        let Some(cq) = self.conn.as_ref().map(|k| k.cq) else {
            return;
        };
        for (i, len) in std::mem::take(&mut self.deferred) {
            if self.conn.is_some() {
                self.on_request(i, len);
            }
        }
        let mut wc = [WorkCompletion::default(); 8];
        let n = match self.hca.poll_cq(cq, &mut wc) {
            Ok(n) => n,
            Err(_) => return,
        };
        for w in wc[..n].iter().copied() {
            if w.opcode != WcOpcode::Recv || w.status != WcStatus::Success {
                continue;
            }
            self.on_request(w.wr_id as usize, w.byte_len as usize);
        }
    }

    fn repost(&mut self, i: usize) {
        let k = self.conn.as_ref().unwrap();
        let sge = [Sge {
            addr: k.recv.bus_at(i * MAX_MESSAGE),
            length: MAX_MESSAGE as u32,
            lkey: self.hca.mr_lkey(k.mrs[0]),
        }];
        let qp = k.qp;
        let _ = self.hca.post_recv(
            qp,
            &RecvWr {
                wr_id: i as u64,
                sg_list: &sge,
            },
        );
    }

    fn on_request(&mut self, i: usize, len: usize) {
        self.calls += 1;
        let msg: Vec<u8> = {
            let k = self.conn.as_ref().unwrap();
            (0..len)
                .map(|b| k.recv.read::<1>(i * MAX_MESSAGE + b).unwrap()[0])
                .collect()
        };
        self.repost(i);
        if let Fault::VanishAfter(n) = self.fault {
            if self.calls > n {
                if let Some(k) = self.conn.take() {
                    self.log.push("vanished".into());
                    self.drop_conn(k);
                }
                return;
            }
        }
        if self.fault == Fault::Silent {
            return;
        }
        let mut out = vec![0u8; MAX_MESSAGE];
        let n = match Packet::new_checked(&msg[..]) {
            Err(e) => Failure::new(e.code(), 0).emit(0, 0, &mut out).unwrap(),
            Ok(p) => {
                let tag = p.tag();
                let kind = p.kind();
                match Request::parse(&p) {
                    Err(e) => Failure::new(e.code(), 0).emit(kind, tag, &mut out).unwrap(),
                    Ok(req) => {
                        let tag = if self.fault == Fault::WrongTag {
                            tag.wrapping_add(1)
                        } else {
                            tag
                        };
                        match self.handle(&req, &mut out, tag) {
                            Ok(n) => n,
                            Err(f) => f.emit(kind, tag, &mut out).unwrap(),
                        }
                    }
                }
            }
        };
        match self.fault {
            Fault::Garbage => {
                for (k, b) in out[..32].iter_mut().enumerate() {
                    *b = 0xA5 ^ k as u8;
                }
                self.send_reply(&out[..32]);
            }
            Fault::WrongOp => {
                let tag = Packet::new_checked(&msg[..]).map(|p| p.tag()).unwrap_or(0);
                let n = Reply::Clock {
                    realtime_ns: 1,
                    monotonic_ns: 2,
                }
                .emit(tag, &mut out)
                .unwrap();
                self.send_reply(&out[..n]);
            }
            _ => self.send_reply(&out[..n]),
        }
    }

    fn send_reply(&mut self, bytes: &[u8]) {
        let k = self.conn.as_mut().unwrap();
        let slot = k.next_send;
        k.next_send = (k.next_send + 1) % usize::from(CREDITS);
        k.send.bytes_mut()[slot * MAX_MESSAGE..slot * MAX_MESSAGE + bytes.len()]
            .copy_from_slice(bytes);
        let sge = [Sge {
            addr: k.send.bus_at(slot * MAX_MESSAGE),
            length: bytes.len() as u32,
            lkey: self.hca.mr_lkey(k.mrs[1]),
        }];
        let qp = k.qp;
        let _ = self.hca.post_send(
            qp,
            &SendWr {
                wr_id: 1 << 32,
                opcode: WrOpcode::Send,
                payload: Payload::Sges(&sge),
                flags: SendFlags::SIGNALED,
                ud: None,
            },
        );
    }

    /// One RDMA between the staging buffer and the node, waited for (bounded).
    fn rdma(&mut self, opcode: WrOpcode, len: u32) -> std::result::Result<(), Failure> {
        let k = self.conn.as_ref().unwrap();
        let sge = [Sge {
            addr: k.staging.bus(),
            length: len,
            lkey: self.hca.mr_lkey(k.mrs[2]),
        }];
        let (qp, cq) = (k.qp, k.cq);
        ok(self.hca.post_send(
            qp,
            &SendWr {
                wr_id: 7 << 40,
                opcode,
                payload: Payload::Sges(&sge),
                flags: SendFlags::SIGNALED,
                ud: None,
            },
        ));
        let mut wc = [WorkCompletion::default(); 1];
        for _ in 0..2_000_000 {
            if ok(self.hca.poll_cq(cq, &mut wc)) == 1 {
                if wc[0].wr_id != 7 << 40 {
                    if wc[0].opcode == WcOpcode::Recv && wc[0].status == WcStatus::Success {
                        self.deferred
                            .push((wc[0].wr_id as usize, wc[0].byte_len as usize));
                    }
                    continue;
                }
                return if wc[0].status == WcStatus::Success {
                    Ok(())
                } else {
                    Err(Failure::new(ErrorCode::RemoteAccess, wc[0].status as u32))
                };
            }
            self.env.p.delay_us(1);
        }
        panic!("the stand-in's RDMA did not complete");
    }

    fn handle(
        &mut self,
        req: &Request<'_>,
        out: &mut [u8],
        tag: u32,
    ) -> std::result::Result<usize, Failure> {
        let reply_len = |r: Reply<'_>, out: &mut [u8]| r.emit(tag, out).unwrap();
        let path = |p: &delegate_wire::Path<'_>| String::from_utf8_lossy(p.as_bytes()).into_owned();
        match *req {
            Request::Null { payload } => {
                let payload = payload.to_vec();
                Ok(reply_len(Reply::Null { payload: &payload }, out))
            }
            Request::Clock => Ok(reply_len(
                Reply::Clock {
                    realtime_ns: 1_700_000_000_000_000_000,
                    monotonic_ns: 42,
                },
                out,
            )),
            Request::Open { flags, path: p, .. } => {
                let name = path(&p);
                if !self.files.contains_key(&name) {
                    if !flags.contains(delegate_wire::OpenFlags::CREATE) {
                        return Err(Failure::new(ErrorCode::NotFound, 2));
                    }
                    self.files.insert(name.clone(), Vec::new());
                }
                if flags.contains(delegate_wire::OpenFlags::TRUNCATE) {
                    self.files.get_mut(&name).unwrap().clear();
                }
                let handle = self.next_handle;
                self.next_handle += 1;
                let size = self.files[&name].len() as u64;
                self.open.insert(handle, name);
                Ok(reply_len(Reply::Open { handle, size }, out))
            }
            Request::Close { handle } => {
                self.open
                    .remove(&handle)
                    .ok_or(Failure::new(ErrorCode::BadHandle, handle))?;
                Ok(reply_len(Reply::Close, out))
            }
            Request::Fstat { handle } | Request::Fsync { handle } => {
                let name = self
                    .open
                    .get(&handle)
                    .ok_or(Failure::new(ErrorCode::BadHandle, handle))?;
                let size = self.files[name].len() as u64;
                let r = if matches!(req, Request::Fsync { .. }) {
                    Reply::Fsync
                } else {
                    Reply::Fstat(Stat {
                        size,
                        kind: FileKind::File,
                        perm: 0o644,
                        mtime_s: 0,
                        mtime_ns: 0,
                    })
                };
                Ok(reply_len(r, out))
            }
            Request::Pread {
                handle,
                offset,
                len,
                place,
            } => {
                let name = self
                    .open
                    .get(&handle)
                    .ok_or(Failure::new(ErrorCode::BadHandle, handle))?;
                let data = &self.files[name];
                let from = (offset as usize).min(data.len());
                let to = (from + len as usize).min(data.len());
                let bytes = data[from..to].to_vec();
                match place {
                    Place::Inline => Ok(reply_len(Reply::Pread(Read::Inline(&bytes)), out)),
                    Place::Remote { addr, rkey } => {
                        if !bytes.is_empty() {
                            let k = self.conn.as_mut().unwrap();
                            k.staging.bytes_mut()[..bytes.len()].copy_from_slice(&bytes);
                            self.rdma(
                                WrOpcode::RdmaWrite {
                                    remote_addr: addr,
                                    rkey,
                                },
                                bytes.len() as u32,
                            )?;
                        }
                        Ok(reply_len(
                            Reply::Pread(Read::Remote(bytes.len() as u32)),
                            out,
                        ))
                    }
                }
            }
            Request::Pwrite {
                handle,
                offset,
                source,
            } => {
                let name = self
                    .open
                    .get(&handle)
                    .ok_or(Failure::new(ErrorCode::BadHandle, handle))?
                    .clone();
                let bytes = match source {
                    Source::Inline(d) => d.to_vec(),
                    Source::Remote { addr, rkey, len } => {
                        self.rdma(
                            WrOpcode::RdmaRead {
                                remote_addr: addr,
                                rkey,
                            },
                            len,
                        )?;
                        let k = self.conn.as_ref().unwrap();
                        (0..len as usize)
                            .map(|b| k.staging.read::<1>(b).unwrap()[0])
                            .collect()
                    }
                };
                let f = self.files.get_mut(&name).unwrap();
                let end = offset as usize + bytes.len();
                if f.len() < end {
                    f.resize(end, 0);
                }
                f[offset as usize..end].copy_from_slice(&bytes);
                Ok(reply_len(
                    Reply::Pwrite {
                        count: bytes.len() as u32,
                    },
                    out,
                ))
            }
            Request::Mkdir { path: p, .. } => {
                let name = path(&p);
                if self.dirs.contains(&name) {
                    return Err(Failure::new(ErrorCode::Exists, 17));
                }
                self.log.push(format!("mkdir {name}"));
                self.dirs.push(name);
                Ok(reply_len(Reply::Mkdir, out))
            }
            Request::Unlink { path: p, .. } => {
                self.files
                    .remove(&path(&p))
                    .ok_or(Failure::new(ErrorCode::NotFound, 2))?;
                Ok(reply_len(Reply::Unlink, out))
            }
            Request::Log { text, .. } => {
                self.log
                    .push(format!("node: {}", String::from_utf8_lossy(text)));
                Ok(reply_len(Reply::Log, out))
            }
            Request::MapRegion { access, backing } => {
                let Backing::Anonymous { len } = backing else {
                    return Err(Failure::new(ErrorCode::Invalid, 0));
                };
                let buf = self
                    .env
                    .alloc_dma(len as usize, 4096)
                    .ok_or(Failure::new(ErrorCode::NoMemory, len as u32))?;
                let mut flags = AccessFlags::LOCAL_WRITE;
                if access.contains(Access::READ) {
                    flags |= AccessFlags::REMOTE_READ;
                }
                if access.contains(Access::WRITE) {
                    flags |= AccessFlags::REMOTE_WRITE;
                }
                if access.contains(Access::ATOMIC) {
                    flags |= AccessFlags::REMOTE_ATOMIC;
                }
                let mr = ok(self.hca.reg_mr(self.pd, buf.bus(), len, flags));
                let info = RegionInfo {
                    region: self.regions.len() as u32 + 1,
                    rkey: self.hca.mr_rkey(mr),
                    addr: buf.bus(),
                    len,
                    access,
                };
                self.regions.push((info, buf, mr));
                Ok(reply_len(Reply::MapRegion(info), out))
            }
            Request::UnmapRegion { region } => {
                let at = self
                    .regions
                    .iter()
                    .position(|(i, _, _)| i.region == region)
                    .ok_or(Failure::new(ErrorCode::BadRegion, region))?;
                let (_, _, mr) = self.regions.remove(at);
                ok(self.hca.dereg_mr(mr));
                Ok(reply_len(Reply::UnmapRegion, out))
            }
            Request::ListDir { .. } => Err(Failure::new(ErrorCode::Io, 38)),
            Request::Goodbye => {
                self.goodbyes += 1;
                Ok(reply_len(Reply::Goodbye, out))
            }
        }
    }

    /// Releases everything; the HCA's bring-up is closed by the caller.
    pub fn close(mut self) -> (Dev, SimEnv) {
        if let Some(k) = self.conn.take() {
            self.drop_conn(k);
        }
        for (_, _, mr) in std::mem::take(&mut self.regions) {
            let _ = self.hca.dereg_mr(mr);
        }
        let _ = self.hca.destroy_qp(self.ud_qp);
        for (_, ah) in std::mem::take(&mut self.ahs) {
            let _ = self.hca.destroy_ah(ah);
        }
        let _ = self.hca.destroy_cq(self.ud_cq);
        let _ = self.hca.dereg_mr(self.ud_mr);
        let _ = self.hca.dealloc_pd(self.pd);
        (self.hca, self.env)
    }
}

/// The client node's environment with the stand-in in its waits: every time the client
/// relaxes, the stand-in takes a step and a microsecond of model time passes.
pub struct StandInEnv {
    pub node: SimEnv,
    pub standin: StandIn,
}

impl BenchEnv for StandInEnv {
    fn cycles(&self) -> u64 {
        self.node.cycles()
    }
    fn tsc_mhz(&self) -> f64 {
        self.node.tsc_mhz()
    }
    fn now_ns(&self) -> u64 {
        self.node.now_ns()
    }
    fn alloc_dma(&mut self, size: usize, align: usize) -> Option<DmaRegion> {
        self.node.alloc_dma(size, align)
    }
    fn relax(&mut self) {
        self.standin.step();
        self.node.relax();
    }
    fn interrupts(&self) -> Option<u64> {
        self.node.interrupts()
    }
    fn isr_capable(&self) -> bool {
        self.node.isr_capable()
    }
    fn isr_wait<H: IsrHandler>(
        &self,
        handler: &mut H,
        progress: &IsrProgress,
        idle_ns: u64,
    ) -> bool {
        self.node.isr_wait(handler, progress, idle_ns)
    }
}
