//! End to end through QEMU with the real model: a QEMU 7.2 TCG guest (SeaBIOS, no disk) gets the
//! emulated HCA; the test then plays the driver from the host side (commands through the Fabric
//! API, every host structure in the guest's RAM): firmware start, ICM, an EQ on MSI-X vector 0,
//! MAP_EQ for command events, and a NOP in event mode. The model must DMA the CMD EQE into guest
//! RAM and fire MSI-X vector 0, which the front end delivers through qtest into the guest's LAPIC;
//! then, with MSI-X off, the next event must raise INTx in the guest's 8259 until the
//! clear-interrupt register is written.
//! Skipped when qemu-system-x86_64 is not installed.

mod mpqemu_common;

use std::process::{Command, Stdio};
use std::time::Duration;

use mpqemu_common::{wait_quiet, wait_until, TestQmp};
use sim::mpqemu::{GuestMemory, GuestSpec, Server, ServerOptions, SocketDir};
use sim::{Fabric, FabricConfig, HcaId};

const QEMU: &str = "qemu-system-x86_64";
const HCR: u64 = 0x80680;
const MSIX_CAP: u16 = 0x9c;
const MSIX_TABLE: u64 = 0x7c000;
const VECTOR: u32 = 0x41;
/// First EQ number outside the firmware-reserved range of the default profile.
const EQN: u32 = 4;
const GIB: u64 = 1 << 30;
// ICM layout (INIT_HCA bases, docs/hardware.md §2.6), small tables.
const QPC: u64 = 4 * GIB;
const AUXC: u64 = QPC + 0x10000;
const ALTC: u64 = AUXC + 0x4000;
const RDMARC: u64 = ALTC + 0x4000;
const SRQC: u64 = RDMARC + 0x2000;
const CQC: u64 = SRQC + 0x1000;
const EQC: u64 = CQC + 0x4000;
const DMPT: u64 = EQC + 0x1000;
const MTT: u64 = DMPT + 0x4000;
const ICM_END: u64 = MTT + 0x8000;
const ICM_SIZE: u64 = ICM_END + 0x10000;
const CMPT: u64 = 0;

/// The host side of a driver: HCR commands through the fabric, memory in the guest's RAM.
struct HostDriver<'a> {
    server: &'a Server,
    hca: HcaId,
    mem: GuestMemory,
    next: u64,
    toggle: bool,
}

fn be(v: u32) -> u64 {
    u64::from(u32::from_le_bytes(v.to_be_bytes()))
}

impl HostDriver<'_> {
    fn alloc(&mut self, size: u64, align: u64) -> u64 {
        let at = self.next.next_multiple_of(align);
        self.next = at + size;
        self.mem
            .write(at, &vec![0u8; size as usize])
            .expect("allocation inside guest RAM");
        at
    }

    fn put32(&self, addr: u64, v: u32) {
        self.mem.write(addr, &v.to_be_bytes()).unwrap();
    }

    fn put64(&self, addr: u64, v: u64) {
        self.mem.write(addr, &v.to_be_bytes()).unwrap();
    }

    fn put8(&self, addr: u64, v: u8) {
        self.mem.write(addr, &[v]).unwrap();
    }

    fn mmio_write(&self, offset: u64, v: u32) {
        self.server
            .with_fabric(|f| f.mmio_write(self.hca, 0, offset, 4, u64::from(v)));
    }

    fn mmio_read(&self, offset: u64) -> u32 {
        self.server
            .with_fabric(|f| f.mmio_read(self.hca, 0, offset, 4)) as u32
    }

    /// Posts a command (docs/hardware.md §1.2) and returns (status, out_param) from the HCR.
    fn cmd(&mut self, op: u16, in_param: u64, in_mod: u32, out: u64, event: bool) -> (u8, u64) {
        let token = if event { 0x1234 } else { 0xffff };
        let words = [
            (in_param >> 32) as u32,
            in_param as u32,
            in_mod,
            (out >> 32) as u32,
            out as u32,
            token << 16,
        ];
        for (k, w) in words.iter().enumerate() {
            self.mmio_write(HCR + 4 * k as u64, be(*w) as u32);
        }
        self.toggle = !self.toggle;
        let go = (1 << 23) | (u32::from(self.toggle) << 21) | (u32::from(event) << 22);
        self.mmio_write(HCR + 0x18, be(go | u32::from(op)) as u32);
        let read = |d: &Self, o: u64| u32::from_be_bytes(d.mmio_read(HCR + o).to_le_bytes());
        let status = read(self, 0x18);
        assert_eq!(status & (1 << 23), 0, "command {op:#x} still GO");
        (
            ((status >> 24) as u8),
            (u64::from(read(self, 0x0c)) << 32) | u64::from(read(self, 0x10)),
        )
    }

    fn ok(&mut self, op: u16, in_param: u64, in_mod: u32, what: &str) -> u64 {
        let (st, out) = self.cmd(op, in_param, in_mod, 0, false);
        assert_eq!(
            st,
            0,
            "{what} failed: {:?}",
            self.server.violations(self.hca)
        );
        out
    }

    /// MAP_FA / MAP_ICM_AUX / MAP_ICM with (virtual, physical, log2 pages) entries (§3.3).
    fn map(&mut self, op: u16, entries: &[(u64, u64, u64)], what: &str) {
        for chunk in entries.chunks(256) {
            let mb = self.alloc(4096, 4096);
            for (k, &(va, pa, lg)) in chunk.iter().enumerate() {
                self.put64(mb + 16 * k as u64, va);
                self.put64(mb + 16 * k as u64 + 8, pa | lg);
            }
            self.ok(op, mb, chunk.len() as u32, what);
        }
    }
}

#[test]
fn model_eq_event_reaches_the_guest_as_msix_through_qtest() {
    if !Command::new(QEMU)
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        eprintln!("skipped: {QEMU} not installed");
        return;
    }
    let server = Server::new(
        Fabric::new(FabricConfig::default()),
        ServerOptions::default(),
    )
    .unwrap();
    let dir = SocketDir::create("model-irq").unwrap();
    let qmp_path = dir.path().join("test-qmp.sock");
    let argv: Vec<String> = [
        QEMU,
        "-accel",
        "tcg",
        "-machine",
        "q35,memory-backend=mem",
        "-m",
        "256M",
        "-object",
        "memory-backend-memfd,id=mem,size=256M,share=on",
        "-smp",
        "1",
        "-nodefaults",
        "-display",
        "none",
        "-device",
        "x-pci-proxy-dev,id=hca0,fd=@FD@",
        "-qmp",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("unix:{},server=on,wait=off", qmp_path.display())])
    .collect();
    let mut spec = GuestSpec::new("g0", argv);
    spec.stdout = Stdio::null();
    spec.stderr = Stdio::null();
    let mut guest = server.spawn_guest(spec).unwrap();
    let hca = guest.hca();
    // SeaBIOS is done with the function once it has an interrupt line and memory decoding, and
    // has stopped touching its config space (it must not race the host-side driver below).
    let firmware_done = wait_until(Duration::from_secs(20), || {
        server.with_fabric(|f| {
            (1..16).contains(&f.cfg_read(hca, 0x3c, 1)) && f.cfg_read(hca, 4, 2) & 2 != 0
        }) && guest.guest().intx_route().is_some()
    });
    let quiet = wait_quiet(Duration::from_secs(20), || {
        guest.guest().frontend_counters()
    });
    assert!(firmware_done && quiet, "firmware did not finish PCI setup");
    let mut qmp = TestQmp::connect(&qmp_path);
    let lapic_has_vector = |qmp: &mut TestQmp| {
        qmp.hmp("info lapic").lines().any(|l| {
            (l.starts_with("IRR") || l.starts_with("ISR"))
                && l.split_whitespace().any(|w| w == VECTOR.to_string())
        })
    };
    assert!(!lapic_has_vector(&mut qmp));

    let mut d = HostDriver {
        server: &server,
        hca,
        mem: guest.guest().guest_memory().clone(),
        next: 64 << 20,
        toggle: false,
    };
    // Memory decoding and bus mastering on; MSI-X enabled with entry 0 -> APIC 0, vector 0x41.
    server.with_fabric(|f| {
        let cmd = f.cfg_read(hca, 4, 2);
        f.cfg_write(hca, 4, 2, cmd | 0x6);
        let ctl = f.cfg_read(hca, MSIX_CAP + 2, 2);
        f.cfg_write(hca, MSIX_CAP + 2, 2, (ctl | 0x8000) & !0x4000);
    });
    for (k, w) in [0xfee0_0000u32, 0, VECTOR, 0].iter().enumerate() {
        d.mmio_write(MSIX_TABLE + 4 * k as u64, *w);
    }

    // Firmware: MAP_FA, RUN_FW; ICM: SET_ICM_SIZE, MAP_ICM_AUX, MAP_ICM, INIT_HCA.
    let fa = d.alloc(1 << 20, 1 << 20);
    d.map(0xfff, &[(0, fa, 8)], "MAP_FA");
    d.ok(0xff6, 0, 0, "RUN_FW");
    let aux = d.ok(0xffd, ICM_SIZE, 0, "SET_ICM_SIZE");
    let aux_mem = d.alloc(aux * 4096, 4096);
    let aux_pages: Vec<_> = (0..aux).map(|k| (0, aux_mem + k * 4096, 0)).collect();
    d.map(0xffc, &aux_pages, "MAP_ICM_AUX");
    let pages = (ICM_END - QPC) / 4096;
    let icm_mem = d.alloc(pages * 4096, 4096);
    let mut icm: Vec<_> = (0..pages)
        .map(|k| (QPC + k * 4096, icm_mem + k * 4096, 0))
        .collect();
    for t in 0..4u64 {
        let m = d.alloc(0x4000, 4096);
        icm.extend((0..4).map(|k| (CMPT + t * GIB + k * 4096, m + k * 4096, 0)));
    }
    d.map(0xffa, &icm, "MAP_ICM");
    let mb = d.alloc(4096, 4096);
    d.put8(mb, 2);
    for (o, v) in [
        (0x30, QPC),
        (0x48, SRQC),
        (0x50, CQC),
        (0x60, ALTC),
        (0x70, AUXC),
        (0x80, EQC),
        (0x90, RDMARC),
        (0xf0, DMPT),
        (0x100, MTT),
        (0x108, CMPT),
    ] {
        d.put64(mb + o, v);
    }
    for (o, v) in [(0x37, 8), (0x4f, 6), (0x57, 8), (0x87, 6), (0xfb, 8)] {
        d.put8(mb + o, v);
    }
    d.put32(mb + 0x14, 1);
    d.ok(0x007, mb, 0, "INIT_HCA");

    // EQ 4: 64 entries in one page, MTT entry written with WRITE_MTT, armed, MSI-X vector 0.
    let eq = d.alloc(4096, 4096);
    let first_mtt = 64u64;
    let mb = d.alloc(4096, 4096);
    d.put64(mb, first_mtt * 8);
    d.put64(mb + 16, eq | 1);
    d.ok(0x011, mb, 1, "WRITE_MTT");
    let mb = d.alloc(4096, 4096);
    d.put32(mb, 0x900);
    d.put8(mb + 0x0c, 6);
    d.put8(mb + 0x17, 0);
    d.put32(mb + 0x1c, (first_mtt * 8) as u32);
    d.ok(0x013, mb, EQN, "SW2HW_EQ");
    d.ok(0x012, 1 << 0x0a, EQN, "MAP_EQ");

    // NOP in event mode: CMD EQE in guest RAM, then MSI-X vector 0.
    let before = server.counters(hca);
    let (st, _) = d.cmd(0x031, 0, 0x1f, 0, true);
    assert_eq!(st, 0, "NOP: {:?}", server.violations(hca));
    let mut eqe = [0u8; 32];
    d.mem.read(eq, &mut eqe).unwrap();
    assert_eq!(eqe[1], 0x0a, "CMD EQE type: {eqe:02x?}");
    assert_eq!(u16::from_be_bytes([eqe[6], eqe[7]]), 0x1234, "token");
    assert_eq!(eqe[0x0f], 0, "status");
    let after = server.counters(hca);
    assert_eq!(after.msix_messages, before.msix_messages + 1, "{after}");
    assert!(
        wait_until(Duration::from_secs(10), || lapic_has_vector(&mut qmp)),
        "MSI-X vector {VECTOR:#x} never reached the guest LAPIC: {:?}\n{}",
        guest.guest().irq_stats(),
        qmp.hmp("info lapic")
    );
    let irq = guest.guest().irq_stats();
    assert_eq!(
        (irq.msi, irq.qtest_fail, irq.undeliverable),
        (1, 0, 0),
        "{irq:?}"
    );

    // INTx: MSI-X off, EQ consumed and re-armed through its doorbell, another NOP. The model
    // asserts INTA (the front end drives the firmware's line in the IOAPIC and 8259) until the
    // clear-interrupt register is written (§1.7).
    let mb = d.alloc(4096, 4096);
    let (st, _) = d.cmd(0x004, 0, 0, mb, false);
    assert_eq!(st, 0, "QUERY_FW");
    let mut q = [0u8; 0x30];
    d.mem.read(mb, &mut q).unwrap();
    let clr_base = u64::from_be_bytes(q[0x20..0x28].try_into().unwrap());
    let clr_bar = (q[0x28] >> 6) * 2;
    let pin = u32::from(sim::DeviceProfile::default().inta_pin);
    server.with_fabric(|f| {
        let ctl = f.cfg_read(hca, MSIX_CAP + 2, 2);
        f.cfg_write(hca, MSIX_CAP + 2, 2, ctl & !0x8000);
    });
    let doorbell = u64::from(EQN / 4) * 4096 + 0x800 + 8 * u64::from(EQN % 4);
    server.with_fabric(|f| f.mmio_write(hca, 2, doorbell, 4, be(1 | 1 << 31)));
    let line = server.with_fabric(|f| f.cfg_read(hca, 0x3c, 1));
    assert!((1..16).contains(&line), "firmware interrupt line {line}");
    let pic_irr = |qmp: &mut TestQmp| -> u32 {
        let text = qmp.hmp("info pic");
        let (name, bit) = if line < 8 {
            ("pic0:", line)
        } else {
            ("pic1:", line - 8)
        };
        let l = text
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("{text}"));
        let irr = l
            .split_whitespace()
            .find_map(|w| w.strip_prefix("irr="))
            .unwrap();
        (u32::from_str_radix(irr, 16).unwrap() >> bit) & 1
    };
    assert_eq!(pic_irr(&mut qmp), 0);
    let (st, _) = d.cmd(0x031, 0, 0x1f, 0, true);
    assert_eq!(st, 0, "NOP: {:?}", server.violations(hca));
    d.mem.read(eq + 32, &mut eqe).unwrap();
    assert_eq!(eqe[1], 0x0a, "second CMD EQE: {eqe:02x?}");
    assert!(
        wait_until(Duration::from_secs(10), || pic_irr(&mut qmp) == 1),
        "INTx not seen in the 8259"
    );
    let clr = clr_base + if pin < 32 { 4 } else { 0 };
    server.with_fabric(|f| f.mmio_write(hca, clr_bar, clr, 4, be(1 << (pin & 31))));
    assert!(
        wait_until(Duration::from_secs(10), || pic_irr(&mut qmp) == 0),
        "INTx not released: {}",
        qmp.hmp("info pic")
    );
    let irq = guest.guest().irq_stats();
    assert_eq!(
        (irq.intx_asserts, irq.intx_deasserts, irq.qtest_fail),
        (1, 1, 0),
        "{irq:?}"
    );

    assert!(
        server.violations(hca).is_empty(),
        "{:?}",
        server.violations(hca)
    );
    let status = guest.kill().unwrap();
    assert!(status.connection.is_clean(), "{}", status.connection);
}
