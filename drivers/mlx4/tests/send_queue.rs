//! The send queue's memory as a prefetching device sees it (docs/hardware.md §5.3, §5.4),
//! after every post of every send entry point: per-call `post_send` (its latency path and
//! the generic writer, with short and long WQEs mixed), `post_send_list`, the data path, and
//! QP0's directed-route SMPs. After each post, the slots of the headroom (2 KiB + one WQE,
//! from the head on) must hold nothing the device could take for part of a WQE: their first
//! chunk not valid in the pass the head is in, and every other chunk their old WQE used
//! stamped (0xFFFFFFFF). The model executes the WQEs; this test reads the queue itself,
//! through a platform that notes where the driver's DMA memory is.

mod common;

use std::cell::RefCell;

use common::*;
use mlx4::mad::method;
use mlx4::Ah;
use mlx4::Smp;
use mlx4::{Bar, DmaRegion, Hca, IrqLine, MsiMessage, Platform};
use sim::{FabricConfig, Topology};
use verbs::*;

/// [`SimPlatform`] noting the bus address and size of every DMA region it hands out.
struct Noting {
    sim: SimPlatform,
    regions: RefCell<Vec<(u64, usize)>>,
}

// SAFETY: everything is `SimPlatform`'s (see its implementation); this only notes the
// address and size of the regions it returns.
unsafe impl Platform for Noting {
    fn mmio_read32(&self, bar: Bar, offset: usize) -> u32 {
        self.sim.mmio_read32(bar, offset)
    }
    fn mmio_write32(&self, bar: Bar, offset: usize, value: u32) {
        self.sim.mmio_write32(bar, offset, value)
    }
    fn mmio_write64(&self, bar: Bar, offset: usize, value: u64) {
        self.sim.mmio_write64(bar, offset, value)
    }
    fn wc_copy(&self, bar: Bar, offset: usize, words: &[u64]) {
        self.sim.wc_copy(bar, offset, words)
    }
    fn dma_alloc(&self, size: usize, align: usize) -> Option<DmaRegion> {
        let r = self.sim.dma_alloc(size, align)?;
        self.regions.borrow_mut().push((r.bus(), r.size()));
        Some(r)
    }
    fn now_ns(&self) -> u64 {
        self.sim.now_ns()
    }
    fn delay_us(&self, us: u64) {
        self.sim.delay_us(us)
    }
    fn config_read32(&self, offset: u16) -> u32 {
        self.sim.config_read32(offset)
    }
    fn config_write32(&self, offset: u16, value: u32) {
        self.sim.config_write32(offset, value)
    }
    fn save_config(&self) {
        self.sim.save_config()
    }
    fn restore_config(&self) {
        self.sim.restore_config()
    }
    fn msix_message(&self, vector: u16) -> Option<MsiMessage> {
        self.sim.msix_message(vector)
    }
    fn take_interrupt(&self, line: IrqLine) -> bool {
        self.sim.take_interrupt(line)
    }
}

type H = Hca<Noting>;

fn bring_up(sim: SimPlatform) -> (H, SimPlatform) {
    let probe = sim.clone_handle();
    let p = Noting {
        sim,
        regions: RefCell::new(Vec::new()),
    };
    (Hca::init(p, test_config()).expect("bring-up"), probe)
}

/// A send queue found in the driver's memory: its slots' bus address, size and count.
#[derive(Clone, Copy, Debug)]
struct Sq {
    bus: u64,
    stride: usize,
    slots: u32,
}

impl Sq {
    /// Among the regions noted from `first` on, the one that starts with send-queue slots
    /// as §5.4 initialises them (owner bit 1, the slot's size in units, chunks stamped):
    /// their stride and how many there are.
    fn find(h: &H, probe: &SimPlatform, first: usize) -> Sq {
        let regions = h.platform().regions.borrow();
        for &(bus, size) in &regions[first..] {
            let dword = |off: usize| {
                let mut b = [0u8; 4];
                probe.arena.read(bus + off as u64, &mut b).unwrap();
                u32::from_be_bytes(b)
            };
            let ds = dword(4) as usize & 0x3F;
            if dword(0) != 1 << 31 || ds < 4 {
                continue;
            }
            let stride = ds * 16;
            let mut slots = 0;
            while (slots + 1) * stride <= size
                && dword(slots * stride) == 1 << 31
                && dword(slots * stride + 4) as usize & 0x3F == ds
            {
                slots += 1;
            }
            return Sq {
                bus,
                stride,
                slots: slots as u32,
            };
        }
        panic!("no initialised send queue among the regions noted");
    }

    /// Linux's headroom for this stride: 2 KiB the device may prefetch, plus one WQE.
    fn spare(&self) -> u32 {
        (2048 / self.stride) as u32 + 1
    }

    /// The headroom after `head` WQEs were posted, as a prefetching device reads it.
    #[track_caller]
    fn assert_headroom(&self, probe: &SimPlatform, head: u32, what: &str) {
        assert!(
            self.slots > self.spare(),
            "{what}: the queue has room beyond its headroom"
        );
        let log = self.slots.trailing_zeros();
        for n in head..head + self.spare() {
            let slot = self.bus + u64::from(n % self.slots) * self.stride as u64;
            let mut b = vec![0u8; self.stride];
            probe.arena.read(slot, &mut b).unwrap();
            let dword = |off: usize| u32::from_be_bytes(b[off..off + 4].try_into().unwrap());
            let pass = (n >> log) & 1;
            assert_ne!(
                dword(0) >> 31,
                pass,
                "{what}: slot of WQE {n} (head {head}) looks valid in its pass"
            );
            let used = (dword(4) as usize & 0x3F) * 16;
            for chunk in (64..used.min(self.stride)).step_by(64) {
                assert_eq!(
                    dword(chunk),
                    u32::MAX,
                    "{what}: head {head}, slot of WQE {n}: chunk {} of its old {used}-byte \
                     WQE is not stamped",
                    chunk / 64
                );
            }
        }
    }
}

/// Two nodes on a switch: the sender (whose queue is read) and a receiver that keeps
/// receives posted.
struct Pair {
    a: H,
    pa: SimPlatform,
    b: H,
    pb: SimPlatform,
    qa: mlx4::QpHandle,
    qb: mlx4::QpHandle,
    scq: mlx4::CqHandle,
    rcq: mlx4::CqHandle,
    brcq: mlx4::CqHandle,
    ah: Option<Ah>,
    qpn_b: u32,
    buf: u64,
    lkey: u32,
    bbuf: u64,
    blkey: u32,
    sq: Sq,
    /// WQEs posted on the sender.
    head: u32,
}

const RECV_SLOTS: u64 = 64;
const RECV_LEN: u32 = 512;

fn pair(t: QpType, max_inline: u32) -> Pair {
    let (_m, mut ps) = machine(2, FabricConfig::default());
    let (mut b, pb) = bring_up(ps.remove(1));
    let (mut a, pa) = bring_up(ps.remove(0));
    let lid_b = b.wait_port_active(1, 5000).unwrap().lid;
    let lid_a = a.wait_port_active(1, 5000).unwrap().lid;
    let make = |h: &mut H, p: &SimPlatform, send_wr: u32| {
        let pd = h.alloc_pd().unwrap();
        let scq = h.create_cq(64).unwrap();
        let rcq = h.create_cq(RECV_SLOTS as u32 + 1).unwrap();
        let first = h.platform().regions.borrow().len();
        let qp = h
            .create_qp(&QpInitAttr {
                pd,
                send_cq: scq,
                recv_cq: rcq,
                qp_type: t,
                cap: QpCap {
                    max_send_wr: send_wr,
                    max_recv_wr: RECV_SLOTS as u32,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: max_inline,
                },
                sq_sig_all: true,
            })
            .unwrap();
        let buf = p.arena.alloc(64 << 10, 4096).unwrap();
        let mr = h
            .reg_mr(pd, buf, 64 << 10, AccessFlags::LOCAL_WRITE)
            .unwrap();
        (pd, scq, rcq, qp, first, buf, h.mr_lkey(mr))
    };
    let (pda, scq, rcq, qa, first, buf, lkey) = make(&mut a, &pa, 16);
    let (_, _, brcq, qb, _, bbuf, blkey) = make(&mut b, &pb, 4);
    let qpn_a = a.qp_num(qa);
    let qpn_b = b.qp_num(qb);
    for (h, qp, remote, lid) in [(&mut a, qa, qpn_b, lid_b), (&mut b, qb, qpn_a, lid_a)] {
        let mut init = QpAttr::new(QpState::Init);
        init.qkey = 0x1111_1111;
        h.modify_qp(qp, &init).unwrap();
        let mut rtr = QpAttr::new(QpState::Rtr);
        rtr.dest_qp_num = remote;
        rtr.ah = AhAttr {
            dlid: lid,
            port: 1,
            ..AhAttr::default()
        };
        h.modify_qp(qp, &rtr).unwrap();
        h.modify_qp(qp, &QpAttr::new(QpState::Rts)).unwrap();
    }
    let ah = (t == QpType::Ud).then(|| {
        a.create_ah(
            pda,
            &AhAttr {
                dlid: lid_b,
                port: 1,
                ..AhAttr::default()
            },
        )
        .unwrap()
    });
    let sq = Sq::find(&a, &pa, first);
    let mut p = Pair {
        a,
        pa,
        b,
        pb,
        qa,
        qb,
        scq,
        rcq,
        brcq,
        ah,
        qpn_b,
        buf,
        lkey,
        bbuf,
        blkey,
        sq,
        head: 0,
    };
    for slot in 0..RECV_SLOTS {
        p.post_recv(slot);
    }
    p.sq.assert_headroom(&p.pa, 0, "initial state");
    p
}

impl Pair {
    fn post_recv(&mut self, slot: u64) {
        let sge = [Sge {
            addr: self.bbuf + slot * u64::from(RECV_LEN),
            length: RECV_LEN,
            lkey: self.blkey,
        }];
        let wr = RecvWr {
            wr_id: slot,
            sg_list: &sge,
        };
        self.b.post_recv(self.qb, &wr).unwrap();
    }

    fn dest(&self) -> Option<UdDest<Ah>> {
        self.ah.map(|ah| UdDest {
            ah,
            remote_qpn: self.qpn_b,
            remote_qkey: 0x1111_1111,
        })
    }

    /// Take `n` send completions and the receiver's `n` receives (reposted), bounded.
    fn complete(&mut self, n: u32) {
        for (h, cq, p, what) in [
            (&mut self.a, self.scq, &self.pa, "send"),
            (&mut self.b, self.brcq, &self.pb, "receive"),
        ] {
            let mut got = 0;
            let mut wc = [WorkCompletion::default(); 8];
            for _ in 0..10_000 {
                let k = h.poll_cq(cq, &mut wc).unwrap();
                for c in &wc[..k] {
                    assert_eq!(c.status, WcStatus::Success, "{what}: {c:?}");
                }
                got += k as u32;
                if got == n {
                    break;
                }
                p.delay_us(1);
            }
            assert_eq!(got, n, "{what} completions");
        }
        // Repost as many receives (any free slot will do: the payload is not checked).
        for slot in 0..u64::from(n) {
            self.post_recv(slot % RECV_SLOTS);
        }
    }

    fn sge(&self, len: u32) -> [Sge; 1] {
        [Sge {
            addr: self.buf,
            length: len,
            lkey: self.lkey,
        }]
    }

    /// One per-call send of `payload`.
    fn post(&mut self, payload: Payload<'_>, what: &str) {
        let wr = SendWr {
            wr_id: u64::from(self.head),
            opcode: WrOpcode::Send,
            payload,
            flags: SendFlags::empty(),
            ud: self.dest(),
        };
        self.a.post_send(self.qa, &wr).unwrap();
        self.head += 1;
        self.sq.assert_headroom(&self.pa, self.head, what);
        self.complete(1);
    }

    /// A list of `n` one-entry SENDs.
    fn post_list(&mut self, n: u32) {
        let sge = self.sge(64);
        let dest = self.dest();
        let wrs: Vec<SendWr<'_, Ah>> = (0..n)
            .map(|i| SendWr {
                wr_id: u64::from(i),
                opcode: WrOpcode::Send,
                payload: Payload::Sges(&sge),
                flags: SendFlags::empty(),
                ud: dest,
            })
            .collect();
        assert_eq!(self.a.post_send_list(self.qa, &wrs).unwrap(), n as usize);
        self.head += n;
        self.sq.assert_headroom(&self.pa, self.head, "list");
        self.complete(n);
    }

    /// `n` sends of `data` inline through the data path.
    fn path_sends(&mut self, n: u32, data: &[u8]) {
        let dest = self.dest();
        for _ in 0..n {
            {
                let mut path = self.a.data_path(self.qa, self.scq, self.rcq, dest).unwrap();
                path.send(1, Payload::Inline(data), SendFlags::empty())
                    .unwrap();
            }
            self.head += 1;
            self.sq.assert_headroom(&self.pa, self.head, "data path");
            self.complete(1);
        }
    }
}

/// Short latency-path sends, long generic WQEs, gather entries and lists, mixed, so that
/// the slots ahead of the head hold old WQEs of every size when they are stamped.
fn mixed(t: QpType, max_inline: u32, long_inline: usize) {
    let mut p = pair(t, max_inline);
    assert!(p.sq.stride >= 256, "slots of several chunks: {:?}", p.sq);
    let short = [0x5Au8; 2];
    let long = vec![0xA5u8; long_inline];
    for round in 0..24 {
        for _ in 0..round % 5 {
            p.post(Payload::Inline(&short), "latency path");
        }
        p.post(Payload::Inline(&long), "generic writer, long inline WQE");
        let sge = p.sge(200);
        p.post(Payload::Sges(&sge), "generic writer, gather entry");
        p.path_sends(round % 7, &short);
        if round % 3 == 0 {
            p.post_list(3);
        }
    }
    assert!(
        p.head > 3 * p.sq.slots,
        "the queue wrapped: {} WQEs",
        p.head
    );
    for pl in [&p.pa, &p.pb] {
        assert_no_violations(pl);
    }
}

#[test]
fn ud_headroom_stays_stamped_under_every_send_entry_point() {
    mixed(QpType::Ud, 188, 150);
}

#[test]
fn uc_headroom_stays_stamped_under_every_send_entry_point() {
    mixed(QpType::Uc, 236, 200);
}

#[test]
fn qp0_has_linux_headroom_and_keeps_it_stamped() {
    let cfg = FabricConfig {
        topology: Topology::BackToBack,
        subnet_manager: false,
        ..FabricConfig::default()
    };
    let (_m, mut ps) = machine(2, cfg);
    let (b, pb) = bring_up(ps.remove(1));
    let (mut a, pa) = bring_up(ps.remove(0));
    let first = a.platform().regions.borrow().len();
    let mut agent = a.smp_open(1).expect("QP0");
    let sq = Sq::find(&a, &pa, first);
    assert_eq!(sq.stride, 128, "an MLX WQE's slot");
    sq.assert_headroom(&pa, 0, "QP0 initial state");
    let get = Smp {
        method: method::GET,
        attr: 0x11,
        attr_mod: 0,
        data: [0; 64],
    };
    for n in 1..=3 * sq.slots {
        a.smp_dr(&mut agent, &get, 50).expect("NodeInfo");
        sq.assert_headroom(&pa, n, "QP0");
    }
    a.smp_close(agent).unwrap();
    a.close().unwrap();
    b.close().unwrap();
    assert_no_violations(&pa);
    assert_no_violations(&pb);
}
