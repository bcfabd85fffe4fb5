//! Seeded random MMIO / config / command / doorbell sequences: the model never panics and
//! never writes memory it was not given (a canary block the device never learns about).

mod harness;
use harness::*;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn random_sequences_never_panic_or_stray() {
    for seed in 1..=4u64 {
        let mut r = Rig::new(2, true);
        r.bring_up(0);
        let canary = r.alloc(0, 65536, 4096);
        r.write(0, canary, &[0x5a; 65536]);
        let mb = r.mailbox(0);
        let base = r.nodes[0].arena.base();
        let mut g = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let h = r.hca(0);
        for _ in 0..3000 {
            let v = g.next();
            match v % 6 {
                0 => {
                    let off = (g.next() % 0x100000) & !3;
                    r.m.mmio_write(h, 0, off, [1, 2, 4, 8][(v >> 8) as usize % 4], g.next());
                }
                1 => {
                    let off = g.next() % (8 << 20);
                    r.m.mmio_write(h, 2, off & !3, 4, g.next());
                }
                2 => {
                    let off = (g.next() % 0x100) as u16;
                    if off != 4 {
                        r.m.cfg_write(h, off & !3, 4, g.next() as u32);
                    }
                }
                3 => {
                    // Random command with a random mailbox content.
                    let bytes: Vec<u8> = (0..512).map(|_| g.next() as u8).collect();
                    r.write(0, mb, &bytes);
                    let op = [
                        0x13u16, 0x16, 0x0d, 0x19, 0x1a, 0x1b, 0x1e, 0x21, 0x12, 0x24, 0x0c, 0x09,
                        0x11, 0xffa, 0xff9, 0x031,
                    ][(g.next() % 16) as usize];
                    let h0 = r.hca(0);
                    let d = [
                        (mb >> 32) as u32,
                        mb as u32,
                        (g.next() % 300) as u32,
                        (mb >> 32) as u32,
                        mb as u32,
                        0,
                    ];
                    for (k, x) in d.iter().enumerate() {
                        r.m.mmio_write(h0, 0, HCR + 4 * k as u64, 4, be32(*x));
                    }
                    r.m.mmio_write(
                        h0,
                        0,
                        HCR + 0x18,
                        4,
                        be32((1 << 23) | (((g.next() % 4) as u32) << 12) | u32::from(op)),
                    );
                }
                4 => {
                    let _ =
                        r.m.mmio_read(h, (v >> 16) as u8 % 3, g.next() % 0x100000, 4);
                }
                _ => {
                    // Random bytes somewhere in the arena's first 32 MiB (driver memory).
                    let a = base + (g.next() % (32 << 20));
                    if a + 8 <= canary || a >= canary + 65536 {
                        let _ = r.nodes[0].arena.write(a, &g.next().to_le_bytes());
                    }
                }
            }
            r.m.poll();
            // Keep memory space and bus mastering on so the fuzzer reaches deep paths.
            let c = r.m.cfg_read(h, 4, 2);
            if c & 6 != 6 {
                r.m.setup_pci(h);
            }
        }
        assert_eq!(
            r.read(0, canary, 65536),
            vec![0x5a; 65536],
            "seed {seed}: canary untouched"
        );
        assert!(
            r.m.fabric_ref().counters(h).violations > 0,
            "the fuzzer did provoke violations"
        );
    }
}
