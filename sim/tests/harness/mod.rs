//! Test rig that drives the model by hand, written from docs/hardware.md (independent of the
//! driver): HCR commands, mailboxes, a small ICM layout, object creation helpers.
#![allow(dead_code, clippy::too_many_arguments)]

use std::sync::Arc;

use sim::inproc::{DmaArena, IrqLog, Machine};
use sim::{DeviceProfile, FabricConfig, HcaId};

pub const HCR: u64 = 0x80680;
pub const GIB: u64 = 1 << 30;
/// ICM layout used by the rig (§2.6 bases).
pub const CMPT_BASE: u64 = 0;
pub const QPC_BASE: u64 = 4 * GIB;
pub const AUXC_BASE: u64 = QPC_BASE + 0x10000;
pub const ALTC_BASE: u64 = AUXC_BASE + 0x4000;
pub const RDMARC_BASE: u64 = ALTC_BASE + 0x4000;
pub const SRQC_BASE: u64 = RDMARC_BASE + 0x2000;
pub const CQC_BASE: u64 = SRQC_BASE + 0x1000;
pub const EQC_BASE: u64 = CQC_BASE + 0x4000;
pub const DMPT_BASE: u64 = EQC_BASE + 0x1000;
pub const MTT_BASE: u64 = DMPT_BASE + 0x8000;
pub const ICM_END: u64 = MTT_BASE + 0x8000;
pub const ICM_SIZE: u64 = ICM_END + 0x10000;

pub fn be32(v: u32) -> u64 {
    u64::from(u32::from_le_bytes(v.to_be_bytes()))
}

pub struct Node {
    pub hca: HcaId,
    pub arena: Arc<DmaArena>,
    pub irq: IrqLog,
    pub toggle: bool,
    pub next_mtt: u64,
    /// Host address backing ICM VA QPC_BASE (the rig maps [QPC_BASE, ICM_END) contiguously).
    pub icm_pa: u64,
    /// Flow counter `qp_modify_to_rts` gives a QP at INIT2RTR with the COUNTER_INDEX optpar
    /// (Linux's default counter of the port); `None`: no counter.
    pub qp_counter: Option<u8>,
    /// RC READ/atomic depths `qp_modify_to_rts` gives a QP, as Linux does: (SRA max at
    /// RTR2RTS with its optpar bit, RRA max at INIT2RTR with its); `None`: both 0 without
    /// the bits.
    pub rd_atomic: Option<(u32, u32)>,
    /// Bytes per EQE and CQE slot `create_eq`/`create_cq` size buffers for (32, or 64 once
    /// INIT_HCA enabled 64-byte entries).
    pub eqe_stride: u64,
    pub cqe_stride: u64,
}

pub struct Rig {
    pub m: Machine,
    pub nodes: Vec<Node>,
}

/// The profile these hand-driven tests are written against (their object numbers, sizes and
/// expected capabilities): the model's reduced profile. Tests of what a real card's profile
/// changes name theirs.
pub fn reduced() -> DeviceProfile {
    DeviceProfile::named("reduced").expect("built in")
}

impl Rig {
    pub fn new(n: usize, sm: bool) -> Rig {
        Rig::with(
            n,
            FabricConfig {
                subnet_manager: sm,
                manual_clock: true,
                ..Default::default()
            },
            reduced(),
        )
    }

    pub fn with(n: usize, cfg: FabricConfig, profile: DeviceProfile) -> Rig {
        let mut m = Machine::new(cfg);
        let mut nodes = Vec::new();
        for _ in 0..n {
            let hca = m.add_node(profile.clone(), 64 << 20);
            m.setup_pci(hca);
            nodes.push(Node {
                hca,
                arena: m.arena(hca).unwrap(),
                irq: m.irq_log(hca).unwrap(),
                toggle: false,
                icm_pa: 0,
                next_mtt: 64,
                qp_counter: None,
                rd_atomic: None,
                eqe_stride: 32,
                cqe_stride: 32,
            });
        }
        Rig { m, nodes }
    }

    pub fn hca(&self, i: usize) -> HcaId {
        self.nodes[i].hca
    }

    pub fn alloc(&self, i: usize, size: usize, align: usize) -> u64 {
        self.nodes[i].arena.alloc(size, align).expect("arena space")
    }

    pub fn write(&self, i: usize, addr: u64, data: &[u8]) {
        self.nodes[i].arena.write(addr, data).unwrap();
    }

    pub fn read(&self, i: usize, addr: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.nodes[i].arena.read(addr, &mut v).unwrap();
        v
    }

    pub fn put32(&self, i: usize, addr: u64, v: u32) {
        self.write(i, addr, &v.to_be_bytes());
    }
    pub fn put64(&self, i: usize, addr: u64, v: u64) {
        self.write(i, addr, &v.to_be_bytes());
    }
    pub fn get32(&self, i: usize, addr: u64) -> u32 {
        u32::from_be_bytes(self.read(i, addr, 4).try_into().unwrap())
    }

    /// Post a command by hand (§1.2) and return (status, out_param).
    pub fn cmd_full(
        &mut self,
        i: usize,
        op: u16,
        op_mod: u8,
        in_param: u64,
        in_mod: u32,
        out_param: u64,
        event: bool,
    ) -> (u8, u64) {
        let h = self.hca(i);
        let go = self.m.mmio_read(h, 0, HCR + 0x18, 4) as u32;
        assert_eq!(
            u32::from_be_bytes(go.to_le_bytes()) & (1 << 23),
            0,
            "GO clear before posting"
        );
        let d = [
            (in_param >> 32) as u32,
            in_param as u32,
            in_mod,
            (out_param >> 32) as u32,
            out_param as u32,
            if event { 0x1234 << 16 } else { 0xffff << 16 },
        ];
        for (k, v) in d.iter().enumerate() {
            self.m.mmio_write(h, 0, HCR + 4 * k as u64, 4, be32(*v));
        }
        self.nodes[i].toggle = !self.nodes[i].toggle;
        let t = u32::from(self.nodes[i].toggle);
        let w = (1 << 23)
            | (t << 21)
            | (u32::from(event) << 22)
            | (u32::from(op_mod) << 12)
            | u32::from(op);
        self.m.mmio_write(h, 0, HCR + 0x18, 4, be32(w));
        let st = u32::from_be_bytes((self.m.mmio_read(h, 0, HCR + 0x18, 4) as u32).to_le_bytes());
        assert_eq!(st & (1 << 23), 0, "command completed (GO clear)");
        assert_eq!((st >> 21) & 1, t, "T latched");
        let hi = u32::from_be_bytes((self.m.mmio_read(h, 0, HCR + 0x0c, 4) as u32).to_le_bytes());
        let lo = u32::from_be_bytes((self.m.mmio_read(h, 0, HCR + 0x10, 4) as u32).to_le_bytes());
        ((st >> 24) as u8, (u64::from(hi) << 32) | u64::from(lo))
    }

    pub fn cmd(
        &mut self,
        i: usize,
        op: u16,
        op_mod: u8,
        in_param: u64,
        in_mod: u32,
        out_param: u64,
    ) -> u8 {
        self.cmd_full(i, op, op_mod, in_param, in_mod, out_param, false)
            .0
    }

    pub fn mailbox(&self, i: usize) -> u64 {
        self.alloc(i, 4096, 4096)
    }

    /// MAP_FA / MAP_ICM_AUX / MAP_ICM entries (§3.3).
    pub fn map_cmd(&mut self, i: usize, op: u16, entries: &[(u64, u64, u32)]) -> u8 {
        let mb = self.mailbox(i);
        for (k, &(va, pa, lg)) in entries.iter().enumerate() {
            self.put64(i, mb + 16 * k as u64, va);
            self.put64(i, mb + 16 * k as u64 + 8, pa | u64::from(lg));
        }
        self.cmd(i, op, 0, mb, entries.len() as u32, 0)
    }

    pub fn violations(&self, i: usize) -> Vec<String> {
        self.m
            .violations(self.hca(i))
            .iter()
            .map(|v| v.to_string())
            .collect()
    }

    pub fn assert_clean(&self, i: usize) {
        let v = self.violations(i);
        assert!(v.is_empty(), "unexpected violations on node {i}: {v:#?}");
    }

    /// QUERY_FW, MAP_FA, RUN_FW (§2.1 step 4).
    pub fn start_fw(&mut self, i: usize) {
        let fa = self.alloc(i, 1 << 20, 1 << 20);
        assert_eq!(self.map_cmd(i, 0xfff, &[(0, fa, 8)]), 0, "MAP_FA");
        assert_eq!(self.cmd(i, 0xff6, 0, 0, 0, 0), 0, "RUN_FW");
    }

    /// SET_ICM_SIZE, MAP_ICM_AUX, MAP_ICM of the rig's tables, INIT_HCA.
    pub fn init_hca(&mut self, i: usize) {
        assert_eq!(self.init_hca_with(i, |_, _| {}), 0, "INIT_HCA");
    }

    /// `init_hca` with `edit(rig, mailbox)` changing the INIT_HCA mailbox before the command;
    /// returns its status.
    pub fn init_hca_with(&mut self, i: usize, edit: impl FnOnce(&mut Rig, u64)) -> u8 {
        let (st, aux) = self.cmd_full(i, 0xffd, 0, ICM_SIZE, 0, 0, false);
        assert_eq!(st, 0, "SET_ICM_SIZE");
        let aux_mem = self.alloc(i, (aux as usize) * 4096, 4096);
        let entries: Vec<_> = (0..aux).map(|k| (0, aux_mem + k * 4096, 0)).collect();
        for chunk in entries.chunks(256) {
            assert_eq!(self.map_cmd(i, 0xffc, chunk), 0, "MAP_ICM_AUX");
        }
        let mut icm = Vec::new();
        let pages = (ICM_END - QPC_BASE) / 4096;
        let mem = self.alloc(i, pages as usize * 4096, 4096);
        self.nodes[i].icm_pa = mem;
        for k in 0..pages {
            icm.push((QPC_BASE + k * 4096, mem + k * 4096, 0));
        }
        for t in 0..4u64 {
            let m2 = self.alloc(i, 0x4000, 4096);
            for k in 0..4 {
                icm.push((CMPT_BASE + t * GIB + k * 4096, m2 + k * 4096, 0));
            }
        }
        assert_eq!(self.map_cmd(i, 0xffa, &icm), 0, "MAP_ICM");
        let mb = self.mailbox(i);
        let p = |o: u64, v: u64| (o, v);
        self.write(i, mb, &[2]);
        for (o, v) in [
            p(0x30, QPC_BASE),
            p(0x48, SRQC_BASE),
            p(0x50, CQC_BASE),
            p(0x60, ALTC_BASE),
            p(0x70, AUXC_BASE),
            p(0x80, EQC_BASE),
            p(0x90, RDMARC_BASE),
            p(0xf0, DMPT_BASE),
            p(0x100, MTT_BASE),
            p(0x108, CMPT_BASE),
        ] {
            self.put64(i, mb + o, v);
        }
        self.write(i, mb + 0x37, &[8]); // 256 QPs
        self.write(i, mb + 0x4f, &[6]);
        self.write(i, mb + 0x57, &[8]);
        self.write(i, mb + 0x87, &[6]);
        self.write(i, mb + 0xfb, &[9]);
        // UD AV port check and flow counters, as Linux's mlx4_INIT_HCA on a device that
        // reports counters (the default profile does).
        self.put32(i, mb + 0x14, 1 | (1 << 4));
        edit(self, mb);
        self.cmd(i, 0x007, 0, mb, 0, 0)
    }

    pub fn bring_up(&mut self, i: usize) {
        self.start_fw(i);
        self.init_hca(i);
    }

    /// Write MTT entries for `pages` host pages directly into ICM (as Linux does, §4.6);
    /// returns the first MTT index.
    /// A range of `n` MTT entries placed as Linux's buddy allocator places it: at a multiple
    /// of the next power of two of `n` (the model checks this, §4.6).
    pub fn alloc_mtt_range(&mut self, i: usize, n: u64) -> u64 {
        let align = n.max(1).next_power_of_two();
        let first = self.nodes[i].next_mtt.next_multiple_of(align);
        self.nodes[i].next_mtt = first + n.max(1);
        first
    }

    pub fn write_mtts(&mut self, i: usize, pages: &[u64]) -> u64 {
        let first = self.alloc_mtt_range(i, pages.len() as u64);
        let mb = self.mailbox(i);
        self.put64(i, mb, first * 8);
        for (k, pa) in pages.iter().enumerate() {
            self.put64(i, mb + 16 + 8 * k as u64, pa | 1);
        }
        assert_eq!(
            self.cmd(i, 0x011, 0, mb, pages.len() as u32, 0),
            0,
            "WRITE_MTT"
        );
        first
    }

    /// Host address of ICM VA `va` in the rig's contiguous range.
    pub fn icm_host(&self, i: usize, va: u64) -> u64 {
        assert!((QPC_BASE..ICM_END).contains(&va));
        self.nodes[i].icm_pa + (va - QPC_BASE)
    }

    /// Write MTT entries straight into the ICM pages, as Linux does (§4.6).
    pub fn write_mtts_direct(&mut self, i: usize, pages: &[u64]) -> u64 {
        let first = self.alloc_mtt_range(i, pages.len() as u64);
        for (k, pa) in pages.iter().enumerate() {
            let at = self.icm_host(i, MTT_BASE + (first + k as u64) * 8);
            self.put64(i, at, pa | 1);
        }
        first
    }

    /// Create EQ `eqn` with 2^log entries, armed, interrupt index `intr`; returns the buffer.
    pub fn create_eq(&mut self, i: usize, eqn: u32, log: u8, intr: u8) -> u64 {
        let size = ((self.nodes[i].eqe_stride as usize) << log).max(4096);
        let buf = self.alloc(i, size, 4096);
        let pages: Vec<u64> = (0..size as u64 / 4096).map(|k| buf + k * 4096).collect();
        let mtt = self.write_mtts(i, &pages);
        let mb = self.mailbox(i);
        self.put32(i, mb, 0x900);
        self.write(i, mb + 0x0c, &[log]);
        self.write(i, mb + 0x17, &[intr]);
        self.put32(i, mb + 0x1c, (mtt * 8) as u32);
        assert_eq!(self.cmd(i, 0x013, 0, mb, eqn, 0), 0, "SW2HW_EQ");
        buf
    }

    /// Create CQ `cqn` with 2^log entries on UAR `uar`, completing to `eqn`; returns (buffer,
    /// doorbell record).
    pub fn create_cq(&mut self, i: usize, cqn: u32, log: u32, uar: u32, eqn: u8) -> (u64, u64) {
        let size = ((self.nodes[i].cqe_stride as usize) << log).max(4096);
        let buf = self.alloc(i, size, 4096);
        let db = self.alloc(i, 8, 8);
        let pages: Vec<u64> = (0..size as u64 / 4096).map(|k| buf + k * 4096).collect();
        let mtt = self.write_mtts(i, &pages);
        let mb = self.mailbox(i);
        self.put32(i, mb + 0x0c, (log << 24) | uar);
        self.write(i, mb + 0x17, &[eqn]);
        self.put32(i, mb + 0x1c, (mtt * 8) as u32);
        self.put64(i, mb + 0x38, db);
        assert_eq!(self.cmd(i, 0x016, 0, mb, cqn, 0), 0, "SW2HW_CQ");
        (buf, db)
    }

    /// A QP's mailbox with the RST2INIT context of a kernel-style QP (§4.4).
    #[allow(clippy::too_many_arguments)]
    pub fn qp_to_rts(
        &mut self,
        i: usize,
        qpn: u32,
        st: u8,
        cq: u32,
        uar: u32,
        pd: u32,
        qkey: u32,
        rlid: u16,
        rqpn: u32,
    ) -> QpBufs {
        let b = self.qp_to_rts_bufs(i);
        let st3 = self.qp_modify_to_rts(i, qpn, st, cq, uar, pd, qkey, rlid, rqpn, &b);
        assert_eq!(st3, [0, 0, 0], "RST2INIT, INIT2RTR, RTR2RTS");
        b
    }

    /// Buffers of a kernel-style QP: SQ 16 x 64 B, RQ 16 x 64 B in one 4 KiB page, SQ first
    /// (tie), doorbell record, MTT entry, mailbox.
    pub fn qp_to_rts_bufs(&mut self, i: usize) -> QpBufs {
        let buf = self.alloc(i, 4096, 4096);
        let db = self.alloc(i, 4, 4);
        let mtt = self.write_mtts(i, &[buf]);
        let mb = self.mailbox(i);
        QpBufs {
            buf,
            db,
            sq: buf,
            rq: buf + 16 * 64,
            mtt,
            mb,
        }
    }

    /// RST2INIT, INIT2RTR, RTR2RTS of a kernel-style QP over existing buffers (§4.4); returns
    /// the three command statuses.
    pub fn qp_modify_to_rts(
        &mut self,
        i: usize,
        qpn: u32,
        st: u8,
        cq: u32,
        uar: u32,
        pd: u32,
        qkey: u32,
        rlid: u16,
        rqpn: u32,
        b: &QpBufs,
    ) -> [u8; 3] {
        // SQ slots start in software ownership for pass 0: owner bit 1 (§5.4).
        for k in 0..16u64 {
            self.put32(i, b.sq + k * 64, 1 << 31);
        }
        self.put32(i, b.db, 0);
        let mb = b.mb;
        self.write(i, mb, &[0u8; 256]);
        let c = mb + 8;
        self.put32(i, c, (1 << 28) | (u32::from(st) << 16) | (3 << 11));
        self.put32(i, c + 0x04, pd);
        // mtu_msgmax: 4096 and log max message 13 (UD) or 31 (connected), as Linux does.
        let log_msg = if st == 3 { 13 } else { 31 };
        self.write(
            i,
            c + 0x08,
            &[(5 << 5) | log_msg, (4 << 3) | 2, (4 << 3) | 2, 0x10],
        );
        self.put32(i, c + 0x0c, uar);
        self.put32(i, c + 0x10, qpn);
        self.put32(i, c + 0x7c, cq);
        self.put32(i, c + 0x9c, cq);
        self.put64(i, c + 0xa0, b.db);
        self.put32(i, c + 0xa8, qkey);
        // RC: ACK request frequency 8, retry 7, RNR retry 7; RRE|RWE|RAE (§4.4).
        self.put32(i, c + 0x70, (8 << 28) | (7 << 16) | (7 << 13));
        self.put32(i, c + 0x90, (1 << 15) | (1 << 14) | (1 << 13));
        self.put32(i, c + 0x94, 1 << 24); // min RNR timer 10 us
        self.write(i, c + 0xcb, &[0]);
        self.put32(i, c + 0xcc, (b.mtt * 8) as u32);
        self.put32(i, mb, (1 << 4) | (1 << 5));
        let s1 = self.cmd(i, 0x019, 0, mb, qpn, 0);
        // INIT2RTR: path with port 1, remote LID / QPN for UC/RC.
        self.put32(i, c, (2 << 28) | (u32::from(st) << 16) | (3 << 11));
        self.write(i, c + 0x18 + 0x20, &[0x83]);
        self.write(i, c + 0x18 + 0x08, &[14 << 3]); // ACK timeout 4.096 us * 2^14
        self.write(i, c + 0x18 + 0x06, &rlid.to_be_bytes());
        self.put32(i, c + 0x14, rqpn);
        // optpar as Linux sets it: a connected QP's address path with PRIMARY_ADDR_PATH and
        // SCHED_QUEUE; UD's sched queue goes without a bit.
        let mut opt = if st == 3 { 0 } else { (1 << 7) | (1 << 16) };
        if let Some(ctr) = self.nodes[i].qp_counter {
            self.write(i, c + 0x18 + 0x04, &[ctr]);
            opt |= 1 << 20;
        }
        let rd = self.nodes[i].rd_atomic;
        if let Some((_, rra)) = rd {
            self.put32(i, c + 0x90, (rra << 21) | (1 << 15) | (1 << 14) | (1 << 13));
            opt |= 1 << 9;
        }
        self.put32(i, mb, opt);
        let s2 = self.cmd(i, 0x01a, 0, mb, qpn, 0);
        self.put32(i, c, (3 << 28) | (u32::from(st) << 16) | (3 << 11));
        self.put32(i, c + 0x78, 0);
        if let Some((sra, _)) = rd {
            self.put32(i, c + 0x70, (8 << 28) | (sra << 21) | (7 << 16) | (7 << 13));
            self.put32(i, mb, opt | (1 << 8));
        }
        let s3 = self.cmd(i, 0x01b, 0, mb, qpn, 0);
        [s1, s2, s3]
    }

    /// Register an MR (SW2HW_MPT, §4.5) over `[start, start+len)` of arena memory with 4 KiB
    /// MTT pages (or physical); returns the key.
    pub fn create_mr(
        &mut self,
        i: usize,
        index: u32,
        tag: u8,
        pd: u32,
        start: u64,
        len: u64,
        access: u32,
        physical: bool,
    ) -> u32 {
        let mb = self.mailbox(i);
        // REGION | MIO, as Linux's mlx4_mr_enable.
        let mut flags = (1 << 17) | (1 << 8) | access;
        if physical {
            flags |= 1 << 9;
        } else {
            let first = start & !0xfff;
            let n = (start + len - first).div_ceil(4096);
            let pages: Vec<u64> = (0..n).map(|k| first + k * 4096).collect();
            let mtt = self.write_mtts(i, &pages);
            self.put64(i, mb + 0x2c, mtt * 8);
            self.put32(i, mb + 0x38, 12);
        }
        self.put32(i, mb, (0xf << 28) | flags);
        self.put32(i, mb + 0x08, (u32::from(tag) << 24) | index);
        self.put32(i, mb + 0x0c, pd);
        self.put64(i, mb + 0x10, start);
        self.put64(i, mb + 0x18, len);
        assert_eq!(self.cmd(i, 0x00d, 0, mb, index, 0), 0, "SW2HW_MPT");
        (index << 8) | u32::from(tag)
    }

    /// Stamp every 64-byte chunk but the first of SQ slots `0..slots` of `stride` bytes with
    /// 0xFFFFFFFF, as Linux does when it creates a QP (§5.4): the device may prefetch them.
    pub fn stamp_sq(&self, i: usize, sq: u64, slots: u64, stride: u64) {
        for k in 0..slots {
            for chunk in 1..stride / 64 {
                self.put32(i, sq + k * stride + chunk * 64, 0xffff_ffff);
            }
        }
    }

    /// Arm CQ `cqn` as Linux's `mlx4_cq_arm` does (§4.2): the arm word (`sn << 28 | cmd << 24
    /// | ci`) into the second dword of the doorbell record at `db`, then the two doorbell
    /// dwords on UAR page `uar`.
    #[allow(clippy::too_many_arguments)]
    pub fn arm_cq(&mut self, i: usize, uar: u32, cqn: u32, db: u64, sn: u32, cmd: u32, ci: u32) {
        let word = (sn << 28) | (cmd << 24) | (ci & 0xff_ffff);
        self.put32(i, db + 4, word);
        let h = self.hca(i);
        let at = u64::from(uar) * 4096 + 0x20;
        self.m
            .mmio_write(h, 2, at, 4, be32((sn << 28) | (cmd << 24) | cqn));
        self.m.mmio_write(h, 2, at + 4, 4, be32(ci));
    }

    pub fn init_port(&mut self, i: usize) {
        assert_eq!(self.cmd(i, 0x009, 0, 0, 1, 0), 0, "INIT_PORT");
    }
}

pub struct QpBufs {
    pub buf: u64,
    pub db: u64,
    pub sq: u64,
    pub rq: u64,
    pub mtt: u64,
    pub mb: u64,
}
