//! The mpqemu protocol layer against a scripted QEMU-side client over a socketpair (no QEMU).

mod mpqemu_common;

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use mpqemu_common::*;
use sim::mpqemu::wire::{self, cmd};
use sim::mpqemu::{
    irq_path, Connection, ConnectionEnd, FrontendCounters, GuestMemory, IrqControl, IrqTransport,
    ProtocolError, SysmemRegion,
};

struct Rig {
    client: Client,
    server: JoinHandle<(ConnectionEnd, FrontendCounters)>,
    seen: Arc<Mutex<Seen>>,
    mem: GuestMemory,
    irq: IrqControl,
}

fn rig(transport: IrqTransport) -> Rig {
    let (ours, theirs) = UnixStream::pair().unwrap();
    theirs
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mem = GuestMemory::new();
    let (line, irq) = irq_path("test", transport).unwrap();
    let mut func = StandIn::new(mem.clone(), line);
    let seen = func.seen.clone();
    let mut conn = Connection::new("test", ours, mem.clone(), irq.clone());
    let server = std::thread::spawn(move || {
        let end = conn.serve(&mut func);
        (end, conn.counters())
    });
    Rig {
        client: Client { sock: theirs },
        server,
        seen,
        mem,
        irq,
    }
}

impl Rig {
    /// Closes the client side and returns how the server ended.
    fn finish(self) -> (ConnectionEnd, FrontendCounters) {
        drop(self.client);
        self.server.join().unwrap()
    }

    /// Waits for the server to end on its own (after a malformed message).
    fn ended(self) -> ConnectionEnd {
        let end = self.server.join().unwrap().0;
        // The server closed its end: the client sees EOF, not a RET.
        let mut buf = [0u8; 1];
        assert_eq!(
            std::io::Read::read(&mut &self.client.sock, &mut buf).unwrap(),
            0,
            "socket left open"
        );
        end
    }
}

/// Programs the BARs and enables memory decoding as firmware would.
fn program(c: &Client, bar0: u64, bar2: u64) {
    c.cfg_write(0x10, bar0 as u32, 4);
    c.cfg_write(0x14, (bar0 >> 32) as u32, 4);
    c.cfg_write(0x18, bar2 as u32, 4);
    c.cfg_write(0x1c, (bar2 >> 32) as u32, 4);
    c.cfg_write(0x04, 0x6, 2);
}

#[test]
fn qemu_probe_sees_two_32bit_memory_bars_and_no_bogus_io_bar() {
    let r = rig(IrqTransport::None);
    assert_eq!(r.client.cfg_read(0, 2), 0x15b3);
    let slots = r.client.qemu_probe();
    assert_eq!(slots[0], (BAR0_SIZE as u32, false));
    assert_eq!(
        slots[1],
        (0, false),
        "upper half of BAR0 must look absent during the probe"
    );
    assert_eq!(slots[2], (BAR2_SIZE as u32, false));
    assert_eq!(
        slots[3],
        (0, false),
        "upper half of BAR2 must look absent during the probe"
    );
    assert!(slots[4..].iter().all(|&(size, _)| size == 0));
    // After the probe the upper halves are the function's again: firmware sizes them normally.
    r.client.cfg_write(0x14, 0xffff_ffff, 4);
    assert_eq!(r.client.cfg_read(0x14, 4), 0xffff_ffff);
    r.client.cfg_write(0x14, 0, 4);
    let writes = r.seen.lock().unwrap().cfg_writes.clone();
    let upper: Vec<_> = writes
        .iter()
        .filter(|w| w.0 == 0x14 || w.0 == 0x1c)
        .collect();
    assert_eq!(
        upper,
        [&(0x14, 4, 0xffff_ffff), &(0x14, 4, 0)],
        "probe writes to upper halves are not passed on"
    );
    assert_eq!(
        writes.iter().filter(|w| w.0 == 0x10).count(),
        2,
        "lower halves are probed for real"
    );
    let (end, counters) = r.finish();
    assert!(matches!(end, ConnectionEnd::Closed), "{end}");
    assert!(counters.probe_done);
    assert_eq!(
        counters.probe_hidden, 4,
        "orig and all-ones reads of 0x14 and 0x1c"
    );
    assert_eq!(counters.cfg_reads, 4 + 14 + 2);
}

#[test]
fn bar_accesses_are_routed_by_absolute_address() {
    let r = rig(IrqTransport::None);
    r.client.qemu_probe();
    program(&r.client, 0xfe00_0000, 0x1_0000_0000);
    assert_eq!(r.client.bar_write(0xfe00_0010, 0x1122_3344_5566_7788, 8), 0);
    assert_eq!(r.client.bar_read(0xfe00_0010, 8), 0x1122_3344_5566_7788);
    assert_eq!(r.client.bar_read(0xfe00_0010, 2), 0x7788);
    assert_eq!(r.client.bar_write(0x1_0000_0800, 0xabcd, 4), 0);
    assert_eq!(r.client.bar_read(0x1_0000_0800, 4), 0xabcd);
    // Outside both BARs, and I/O space: all-ones, nothing reaches the function.
    assert_eq!(r.client.bar_read(0xfe10_0000, 4), u64::MAX);
    assert_eq!(r.client.io_read(0xfe00_0010, 4), u64::MAX);
    assert_eq!(r.client.bar_write(0xfd00_0000, 1, 4), 0);
    let seen = r.seen.lock().unwrap().bar_writes.clone();
    assert_eq!(
        seen,
        vec![(0, 0x10, 8, 0x1122_3344_5566_7788), (2, 0x800, 4, 0xabcd)]
    );
    let (end, c) = r.finish();
    assert!(end.is_clean());
    assert_eq!((c.bar_reads, c.bar_writes, c.unclaimed), (5, 3, 3));
}

#[test]
fn sync_sysmem_maps_memfds_and_dma_round_trips() {
    const LOW: u64 = 0xa0000;
    let r = rig(IrqTransport::None);
    let ram = memfd(2 << 20);
    // Two regions of one memfd, as QEMU sends RAM split around the legacy VGA hole.
    let regions = [
        SysmemRegion {
            gpa: 0,
            size: LOW,
            fd_offset: 0,
        },
        SysmemRegion {
            gpa: 0x10_0000,
            size: 0x10_0000,
            fd_offset: 0x10_0000,
        },
    ];
    let dup = |f: &OwnedFd| f.try_clone().unwrap();
    let (a, b) = (dup(&ram), dup(&ram));
    r.client.sync_sysmem(&[(regions[0], &a), (regions[1], &b)]);
    assert!(
        !r.client.has_unsolicited(100),
        "SYNC_SYSMEM must not be answered"
    );
    r.client.qemu_probe();
    program(&r.client, 0xfe00_0000, 0xfd00_0000);
    assert_eq!(r.mem.regions(), regions.to_vec());

    pwrite(&ram, 0x10_0040, &[7u8; 16]);
    r.client
        .bar_write(0xfe00_0000 + REG_DMA_INCREMENT, 0x10_0040, 8);
    assert_eq!(
        pread(&ram, 0x10_0040, 16),
        vec![8u8; 16],
        "DMA read and write through the mapping"
    );
    pwrite(&ram, 0x1000, &[1u8; 16]);
    r.client
        .bar_write(0xfe00_0000 + REG_DMA_INCREMENT, 0x1000, 8);
    assert_eq!(pread(&ram, 0x1000, 16), vec![2u8; 16]);

    // A DMA into the hole, or straddling the end of RAM, faults and touches nothing.
    r.client
        .bar_write(0xfe00_0000 + REG_DMA_INCREMENT, LOW - 8, 8);
    r.client
        .bar_write(0xfe00_0000 + REG_DMA_INCREMENT, 0x20_0000 - 8, 8);
    assert_eq!(
        r.seen.lock().unwrap().dma_faults,
        vec![LOW - 8, 0x20_0000 - 8]
    );
    assert_eq!(pread(&ram, LOW - 8, 8), vec![0u8; 8]);

    // A fresh SYNC_SYSMEM that drops the low region: the high one keeps its mapping.
    let c = dup(&ram);
    r.client.sync_sysmem(&[(regions[1], &c)]);
    r.client
        .bar_write(0xfe00_0000 + REG_DMA_INCREMENT, 0x1000, 8);
    assert_eq!(
        pread(&ram, 0x1000, 16),
        vec![2u8; 16],
        "unlisted region no longer reachable"
    );
    assert_eq!(r.seen.lock().unwrap().dma_faults.len(), 3);
    assert_eq!(r.mem.regions(), vec![regions[1]]);
    let (end, counters) = r.finish();
    assert!(end.is_clean());
    assert_eq!(counters.sysmem_syncs, 2);
}

#[test]
fn guest_memory_keeps_unchanged_mappings_and_survives_swaps_under_dma() {
    let mem = GuestMemory::new();
    let ram = memfd(1 << 20);
    let region = SysmemRegion {
        gpa: 0x4000_0000,
        size: 1 << 20,
        fd_offset: 0,
    };
    let first = mem.sync(vec![(region, ram.try_clone().unwrap())]).unwrap();
    assert_eq!((first.kept, first.mapped, first.dropped), (0, 1, 0));
    let again = mem.sync(vec![(region, ram.try_clone().unwrap())]).unwrap();
    assert_eq!((again.kept, again.mapped, again.dropped), (1, 0, 0));
    // A different file at the same place is remapped.
    let other = memfd(1 << 20);
    let swapped = mem
        .sync(vec![(region, other.try_clone().unwrap())])
        .unwrap();
    assert_eq!((swapped.kept, swapped.mapped, swapped.dropped), (0, 1, 1));
    // DMA on one thread while another keeps replacing the region list: never a fault inside
    // RAM, never a crash.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dma = {
        let (mem, stop) = (mem.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u32;
            loop {
                mem.write(0x4000_0000 + 4096, &n.to_le_bytes()).unwrap();
                let mut b = [0u8; 4];
                mem.read(0x4000_0000 + 4096, &mut b).unwrap();
                n += 1;
                if n >= 1000 && stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return n;
                }
            }
        })
    };
    for i in 0..200 {
        let f = if i % 2 == 0 { &ram } else { &other };
        mem.sync(vec![(region, f.try_clone().unwrap())]).unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(dma.join().unwrap() >= 1000);
    assert!(mem.read(0x3fff_ffff, &mut [0u8; 2]).is_err());
    assert!(mem.write(u64::MAX, &[0u8; 2]).is_err());
}

#[test]
fn device_reset_is_answered_and_resets_the_function() {
    let r = rig(IrqTransport::None);
    r.client.qemu_probe();
    program(&r.client, 0xfe00_0000, 0xfd00_0000);
    r.client.bar_write(0xfe00_0010, 5, 4);
    assert_eq!(r.client.reset(), 0);
    assert_eq!(r.seen.lock().unwrap().resets, 1);
    assert_eq!(r.client.cfg_read(0x10, 4), 0x4, "BAR back to power-on");
    assert_eq!(
        r.client.bar_read(0xfe00_0010, 4),
        u64::MAX,
        "no longer decoded"
    );
    let (end, c) = r.finish();
    assert!(end.is_clean());
    assert_eq!(c.resets, 1);
}

#[test]
fn irqfd_intx_is_signalled_and_resampled_while_asserted() {
    let r = rig(IrqTransport::Irqfd);
    let (irqfd, resample) = (eventfd(), eventfd());
    let (i2, r2) = (irqfd.try_clone().unwrap(), resample.try_clone().unwrap());
    wire::send_message(&r.client.sock, cmd::SET_IRQFD, &[], &[&i2, &r2]).unwrap();
    assert!(
        !r.client.has_unsolicited(100),
        "SET_IRQFD must not be answered"
    );
    r.client.qemu_probe();
    program(&r.client, 0xfe00_0000, 0xfd00_0000);
    r.client.bar_write(0xfe00_0000 + REG_INTX, 1, 4);
    assert_eq!(eventfd_take(&irqfd), 1, "assert writes the irqfd");
    assert!(r.irq.intx_level());
    // Guest EOI while still asserted: the server signals again.
    eventfd_signal(&resample);
    assert!(readable(&irqfd, 2000));
    assert_eq!(eventfd_take(&irqfd), 1);
    r.client.bar_write(0xfe00_0000 + REG_INTX, 0, 4);
    eventfd_signal(&resample);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(eventfd_take(&irqfd), 0, "deasserted: no re-signal");
    // MSI cannot travel through irqfd: counted as undeliverable.
    r.client.bar_write(0xfe00_0000 + REG_MSI, 0x41, 4);
    let s = r.irq.stats();
    assert_eq!(
        (
            s.intx_asserts,
            s.intx_deasserts,
            s.irqfd_signals,
            s.resamples
        ),
        (1, 1, 2, 2)
    );
    assert_eq!((s.msi, s.undeliverable), (1, 1));
    assert!(r.finish().0.is_clean());
}

#[test]
fn interrupt_line_register_is_tracked_for_intx() {
    // No qtest socket exists: the worker gives up, but the routing inputs are still tracked.
    let mut cfg = sim::mpqemu::QtestConfig::new("/nonexistent/qtest.sock", None);
    cfg.connect_timeout = Duration::from_millis(50);
    let r = rig(IrqTransport::Qtest(cfg));
    r.client.qemu_probe();
    program(&r.client, 0xfe00_0000, 0xfd00_0000);
    r.client.cfg_write(0x3c, 0x0b, 1);
    r.client.bar_write(0xfe00_0000 + REG_INTX, 1, 4);
    r.client.bar_write(0xfe00_0000 + REG_MSI, 0x41, 4);
    assert!(r.irq.intx_level());
    r.irq.shutdown();
    let s = r.irq.stats();
    assert_eq!((s.intx_asserts, s.msi, s.qtest_sent), (1, 1, 0));
    assert_eq!(s.undeliverable, 2);
    assert!(r.finish().0.is_clean());
}

fn expect_protocol_error(
    send: impl FnOnce(&UnixStream),
    check: impl FnOnce(&ProtocolError) -> bool,
) {
    let r = rig(IrqTransport::None);
    send(&r.client.sock);
    match r.ended() {
        ConnectionEnd::Protocol(e) => assert!(check(&e), "unexpected error: {e}"),
        other => panic!("connection should fail, ended with: {other}"),
    }
}

#[test]
fn malformed_messages_close_the_connection_with_a_clear_error() {
    let raw = |cmd: i32, size: u64, payload: Vec<u8>| {
        move |s: &UnixStream| {
            wire::send_all(s, &wire::encode_header(cmd, size)).unwrap();
            wire::send_all(s, &payload).unwrap();
        }
    };
    expect_protocol_error(raw(99, 0, vec![]), |e| {
        matches!(e, ProtocolError::UnknownCommand(99))
    });
    expect_protocol_error(raw(-1, 0, vec![]), |e| {
        matches!(e, ProtocolError::UnknownCommand(-1))
    });
    expect_protocol_error(raw(cmd::RET, 8, vec![0; 8]), |e| {
        matches!(e, ProtocolError::UnexpectedRet)
    });
    expect_protocol_error(raw(cmd::PCI_CFGREAD, 1 << 40, vec![]), |e| {
        matches!(e, ProtocolError::PayloadTooLarge(_))
    });
    expect_protocol_error(raw(cmd::PCI_CFGREAD, 8, vec![0; 8]), |e| {
        matches!(
            e,
            ProtocolError::BadPayloadSize {
                size: 8,
                expected: 12,
                ..
            }
        )
    });
    expect_protocol_error(
        raw(cmd::PCI_CFGREAD, 12, wire::cfg_payload(0, 0, 3).to_vec()),
        |e| matches!(e, ProtocolError::BadConfigAccess { len: 3, .. }),
    );
    expect_protocol_error(
        raw(
            cmd::PCI_CFGWRITE,
            12,
            wire::cfg_payload(0xfe, 0, 4).to_vec(),
        ),
        |e| matches!(e, ProtocolError::BadConfigAccess { offset: 0xfe, .. }),
    );
    expect_protocol_error(
        raw(cmd::BAR_READ, 24, wire::bar_payload(0, 0, 3, true).to_vec()),
        |e| matches!(e, ProtocolError::BadBarAccess { size: 3, .. }),
    );
    expect_protocol_error(raw(cmd::DEVICE_RESET, 8, vec![0; 8]), |e| {
        matches!(e, ProtocolError::BadPayloadSize { .. })
    });
    // A header cut short by the peer closing.
    expect_protocol_error(
        |s| {
            wire::send_all(s, &wire::encode_header(cmd::PCI_CFGREAD, 12)[..10]).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
        },
        |e| matches!(e, ProtocolError::Truncated { got: 10, .. }),
    );
    // Descriptor counts that do not match the command.
    expect_protocol_error(
        |s| {
            let e = eventfd();
            wire::send_message(s, cmd::SET_IRQFD, &[], &[&e]).unwrap();
        },
        |e| matches!(e, ProtocolError::BadFdCount { got: 1, .. }),
    );
    expect_protocol_error(
        |s| wire::send_message(s, cmd::SYNC_SYSMEM, &wire::sysmem_payload(&[]), &[]).unwrap(),
        |e| matches!(e, ProtocolError::BadFdCount { got: 0, .. }),
    );
    expect_protocol_error(
        |s| {
            let e = eventfd();
            wire::send_message(s, cmd::PCI_CFGREAD, &wire::cfg_payload(0, 0, 4), &[&e]).unwrap();
        },
        |e| matches!(e, ProtocolError::BadFdCount { got: 1, .. }),
    );
    // Bad region tables.
    let region = |gpa, size| SysmemRegion {
        gpa,
        size,
        fd_offset: 0,
    };
    for (regions, why) in [
        (vec![region(0, 0)], "empty"),
        (vec![region(u64::MAX - 10, 100)], "wraps"),
        (vec![region(0, 0x2000), region(0x1000, 0x2000)], "overlaps"),
    ] {
        expect_protocol_error(
            |s| {
                let fds: Vec<OwnedFd> = regions.iter().map(|_| memfd(0x4000)).collect();
                let refs: Vec<&dyn std::os::fd::AsRawFd> = fds.iter().map(|f| f as _).collect();
                wire::send_message(s, cmd::SYNC_SYSMEM, &wire::sysmem_payload(&regions), &refs)
                    .unwrap();
            },
            |e| matches!(e, ProtocolError::BadRegion { .. }) && e.to_string().contains(why),
        );
    }
}

#[test]
fn unmappable_guest_ram_is_reported_not_crashed() {
    let r = rig(IrqTransport::None);
    // An eventfd cannot be mapped: the server reports it and closes.
    let e = eventfd();
    let region = SysmemRegion {
        gpa: 0,
        size: 0x1000,
        fd_offset: 0,
    };
    wire::send_message(
        &r.client.sock,
        cmd::SYNC_SYSMEM,
        &wire::sysmem_payload(&[region]),
        &[&e],
    )
    .unwrap();
    match r.ended() {
        ConnectionEnd::Memory(err) => assert!(err.to_string().contains("share=on"), "{err}"),
        other => panic!("expected a memory error, got {other}"),
    }
}

#[test]
fn a_region_beyond_its_file_is_refused_instead_of_risking_sigbus() {
    let r = rig(IrqTransport::None);
    let ram = memfd(0x4000);
    let region = SysmemRegion {
        gpa: 0,
        size: 0x8000,
        fd_offset: 0,
    };
    wire::send_message(
        &r.client.sock,
        cmd::SYNC_SYSMEM,
        &wire::sysmem_payload(&[region]),
        &[&ram],
    )
    .unwrap();
    match r.ended() {
        ConnectionEnd::Memory(err) => {
            assert!(err.to_string().contains("beyond the backing file"), "{err}")
        }
        other => panic!("expected a memory error, got {other}"),
    }
}

#[test]
fn a_peer_stalling_inside_a_message_is_dropped() {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let (line, irq) = irq_path("t", IrqTransport::None).unwrap();
    let mem = GuestMemory::new();
    let mut func = StandIn::new(mem.clone(), line);
    let mut conn = Connection::new("t", ours, mem, irq);
    conn.set_stall_timeout(Duration::from_millis(100)).unwrap();
    let t = std::thread::spawn(move || conn.serve(&mut func));
    wire::send_all(&theirs, &wire::encode_header(cmd::PCI_CFGREAD, 12)).unwrap();
    wire::send_all(&theirs, &[0u8; 5]).unwrap();
    match t.join().unwrap() {
        ConnectionEnd::Protocol(ProtocolError::Stalled {
            wanted: 28,
            got: 21,
        }) => {}
        other => panic!("expected a stall, got {other}"),
    }
}

#[test]
fn stop_flag_ends_an_idle_connection() {
    let (ours, _theirs) = UnixStream::pair().unwrap();
    let (line, irq) = irq_path("t", IrqTransport::None).unwrap();
    let mem = GuestMemory::new();
    let mut func = StandIn::new(mem.clone(), line);
    let mut conn = Connection::new("t", ours, mem, irq);
    let stop = conn.stop_flag();
    let t = std::thread::spawn(move || conn.serve(&mut func));
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(matches!(t.join().unwrap(), ConnectionEnd::Stopped));
}
