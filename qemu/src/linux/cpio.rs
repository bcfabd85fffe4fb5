//! The initramfs archive: the "newc" cpio format the Linux kernel unpacks (its
//! `init/initramfs.c`), written by the `cpio` crate's `newc` module (a 110-byte ASCII header
//! of `070701` and thirteen 8-digit hex fields, the path and its NUL, the data, each padded
//! to 4 bytes, and a closing `TRAILER!!!` entry).
//!
//! This module adds what the guest image needs on top: paths checked (relative, non-empty,
//! no NUL, not the trailer's name), only permission bits taken from callers, a fresh inode
//! number per entry (the kernel links regular files that share one), uid/gid and mtime 0 so
//! the same inputs give the same archive, and the archive's size. Directories must come
//! before what they contain.

use std::io::{self, Write};

/// What an entry is (the file-type bits of its mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Directory,
    File,
    Symlink,
}

impl Kind {
    fn type_bits(self) -> u32 {
        match self {
            Kind::Directory => 0o040000,
            Kind::File => 0o100000,
            Kind::Symlink => 0o120000,
        }
    }
}

/// Writes entries in order; `finish` writes the trailer.
pub struct CpioWriter<W: Write> {
    out: Counted<W>,
    next_ino: u32,
}

const TRAILER: &str = "TRAILER!!!";

/// The output, counting the bytes written.
struct Counted<W> {
    inner: W,
    written: u64,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<W: Write> CpioWriter<W> {
    pub fn new(out: W) -> Self {
        Self {
            out: Counted {
                inner: out,
                written: 0,
            },
            next_ino: 1,
        }
    }

    /// A directory (mode bits like 0o755).
    pub fn directory(&mut self, path: &str, mode: u32) -> io::Result<()> {
        self.entry(path, Kind::Directory, mode, &[])
    }

    /// A regular file with its contents.
    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) -> io::Result<()> {
        self.entry(path, Kind::File, mode, data)
    }

    /// A symbolic link to `target`.
    pub fn symlink(&mut self, path: &str, target: &str) -> io::Result<()> {
        self.entry(path, Kind::Symlink, 0o777, target.as_bytes())
    }

    /// Writes the trailer and returns the output and the archive's size in bytes.
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        cpio::newc::trailer(&mut self.out)?;
        self.out.flush()?;
        Ok((self.out.inner, self.out.written))
    }

    fn entry(&mut self, path: &str, kind: Kind, mode: u32, data: &[u8]) -> io::Result<()> {
        let bad =
            |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{why}: {path:?}"));
        if path.is_empty() || path.starts_with('/') || path.contains('\0') {
            return Err(bad(
                "cpio paths must be relative, non-empty and without NUL",
            ));
        }
        if path == TRAILER {
            return Err(bad("reserved cpio name"));
        }
        if mode & !0o7777 != 0 {
            return Err(bad("mode has more than permission bits"));
        }
        let Ok(size) = u32::try_from(data.len()) else {
            return Err(bad("entry larger than 4 GiB"));
        };
        let ino = self.next_ino;
        self.next_ino += 1;
        let nlink = if kind == Kind::Directory { 2 } else { 1 };
        // uid, gid, mtime and the device numbers stay 0 (the builder's defaults).
        let mut w = cpio::newc::Builder::new(path)
            .ino(ino)
            .mode(kind.type_bits() | mode)
            .nlink(nlink)
            .write(&mut self.out, size);
        // The whole size, or the crate would leave the entry unpadded: `write_all` gives it
        // all or fails.
        w.write_all(data)?;
        w.finish()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal newc reader for the tests: (name, mode, data) per entry, trailer included.
    fn parse(mut b: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut offset = 0usize;
        loop {
            assert_eq!(&b[..6], b"070701", "magic at offset {offset}");
            let field = |i: usize| {
                u32::from_str_radix(std::str::from_utf8(&b[6 + 8 * i..14 + 8 * i]).unwrap(), 16)
                    .unwrap()
            };
            let (mode, size, name_size) = (field(1), field(6) as usize, field(11) as usize);
            let name = std::str::from_utf8(&b[110..110 + name_size - 1])
                .unwrap()
                .to_string();
            assert_eq!(b[110 + name_size - 1], 0, "name NUL");
            let data_at = (110 + name_size).next_multiple_of(4);
            let data = b[data_at..data_at + size].to_vec();
            let next = (data_at + size).next_multiple_of(4);
            assert!(
                b[data_at + size..next].iter().all(|&x| x == 0),
                "zero padding"
            );
            offset += next;
            b = &b[next..];
            let done = name == TRAILER;
            out.push((name, mode, data));
            if done {
                assert!(b.is_empty(), "nothing after the trailer");
                return out;
            }
        }
    }

    #[test]
    fn entries_round_trip_with_alignment() {
        let mut w = CpioWriter::new(Vec::new());
        w.directory("bin", 0o755).unwrap();
        w.file("bin/a", 0o755, b"abc").unwrap();
        w.file("init", 0o755, b"#!/bin/sh\n").unwrap();
        w.file("empty", 0o644, b"").unwrap();
        w.symlink("bin/sh", "busybox").unwrap();
        let (bytes, size) = w.finish().unwrap();
        assert_eq!(size as usize, bytes.len());
        assert_eq!(bytes.len() % 4, 0);
        let e = parse(&bytes);
        let names: Vec<&str> = e.iter().map(|x| x.0.as_str()).collect();
        assert_eq!(names, ["bin", "bin/a", "init", "empty", "bin/sh", TRAILER]);
        assert_eq!(e[0].1, 0o040755);
        assert_eq!(e[1], ("bin/a".into(), 0o100755, b"abc".to_vec()));
        assert_eq!(e[3].2, b"");
        assert_eq!(e[4], ("bin/sh".into(), 0o120777, b"busybox".to_vec()));
    }

    #[test]
    fn the_same_input_gives_the_same_archive() {
        let build = || {
            let mut w = CpioWriter::new(Vec::new());
            w.file("x", 0o644, b"1234567").unwrap();
            w.finish().unwrap().0
        };
        assert_eq!(build(), build());
    }

    #[test]
    fn bad_entries_are_refused() {
        let mut w = CpioWriter::new(Vec::new());
        assert!(w.file("/abs", 0o644, b"").is_err());
        assert!(w.file("", 0o644, b"").is_err());
        assert!(w.file("a\0b", 0o644, b"").is_err());
        assert!(w.file(TRAILER, 0o644, b"").is_err());
        assert!(w.file("m", 0o100644, b"").is_err());
        // Refused entries wrote nothing.
        let (bytes, _) = w.finish().unwrap();
        assert_eq!(parse(&bytes).len(), 1);
    }
}
