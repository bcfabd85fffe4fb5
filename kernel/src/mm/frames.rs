//! Physical frame allocator: one bit per 4 KiB frame over the span of usable RAM.
//!
//! Allocations are runs of contiguous frames with a power-of-two alignment, so the same
//! allocator serves page tables, the heap and DMA buffers; freeing really returns frames.
//! The bitmap lives in memory the caller provides (a slice on the host, usable RAM in the
//! kernel). A set bit means "not available".

pub const FRAME: u64 = 4096;

/// A half-open physical range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub start: u64,
    pub end: u64,
}

/// Errors of the frame allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// No free run of the requested size and alignment.
    OutOfMemory,
    /// Zero size, alignment not a power of two (or below 4 KiB), or a range outside the
    /// allocator, or freeing frames that are not allocated.
    BadRequest,
}

/// The bitmap allocator.
pub struct FrameAllocator<'a> {
    bits: &'a mut [u64],
    /// Physical address of frame 0 of the bitmap.
    base: u64,
    frames: u64,
    free: u64,
    /// Where the next search starts (frame index).
    hint: u64,
}

/// Words of bitmap needed to cover `[base, end)`.
pub fn bitmap_words(span: Range) -> usize {
    let frames = (span.end - span.start).div_ceil(FRAME);
    frames.div_ceil(64) as usize
}

impl<'a> FrameAllocator<'a> {
    /// Covers `span` (frame aligned); every frame starts used. Mark RAM with [`Self::add_free`].
    pub fn new(bits: &'a mut [u64], span: Range) -> Result<Self, FrameError> {
        if !span.start.is_multiple_of(FRAME)
            || span.end < span.start
            || bits.len() < bitmap_words(span)
        {
            return Err(FrameError::BadRequest);
        }
        bits.fill(u64::MAX);
        let frames = (span.end - span.start) / FRAME;
        Ok(FrameAllocator {
            bits,
            base: span.start,
            frames,
            free: 0,
            hint: 0,
        })
    }

    fn is_used(&self, i: u64) -> bool {
        self.bits[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    fn set(&mut self, i: u64, used: bool) {
        let word = &mut self.bits[(i / 64) as usize];
        if used {
            *word |= 1 << (i % 64);
        } else {
            *word &= !(1 << (i % 64));
        }
    }

    /// Frames of `r` that lie inside the allocator (rounded inwards to whole frames).
    fn frames_of(&self, r: Range) -> (u64, u64) {
        let start = r.start.max(self.base).div_ceil(FRAME) * FRAME;
        let end = (r.end.min(self.base + self.frames * FRAME) / FRAME) * FRAME;
        if end <= start {
            return (0, 0);
        }
        ((start - self.base) / FRAME, (end - self.base) / FRAME)
    }

    /// Marks usable RAM as available.
    pub fn add_free(&mut self, r: Range) {
        let (a, b) = self.frames_of(r);
        for i in a..b {
            if self.is_used(i) {
                self.set(i, false);
                self.free += 1;
            }
        }
    }

    /// Marks a range as taken (the bitmap itself, the kernel's early allocations).
    pub fn reserve(&mut self, r: Range) {
        let start = r.start / FRAME * FRAME;
        let end = r.end.div_ceil(FRAME) * FRAME;
        let (a, b) = self.frames_of(Range { start, end });
        for i in a..b {
            if !self.is_used(i) {
                self.set(i, true);
                self.free -= 1;
            }
        }
    }

    /// Allocates `count` contiguous frames aligned to `align` bytes; returns the physical
    /// address of the first.
    pub fn alloc(&mut self, count: u64, align: u64) -> Result<u64, FrameError> {
        if count == 0 || !align.is_power_of_two() || align < FRAME {
            return Err(FrameError::BadRequest);
        }
        if count > self.free {
            return Err(FrameError::OutOfMemory);
        }
        let step = align / FRAME;
        // Search from the hint, then wrap around once.
        for (from, to) in [(self.hint, self.frames), (0, self.frames)] {
            if let Some(first) = self.find_run(from, to, count, step) {
                for i in first..first + count {
                    self.set(i, true);
                }
                self.free -= count;
                self.hint = first + count;
                return Ok(self.base + first * FRAME);
            }
        }
        Err(FrameError::OutOfMemory)
    }

    fn find_run(&self, from: u64, to: u64, count: u64, step: u64) -> Option<u64> {
        // First candidate index >= from whose physical address is aligned.
        let base_frame = self.base / FRAME;
        let mut i = (base_frame + from).div_ceil(step) * step - base_frame;
        while i + count <= to {
            // Skip whole used words quickly.
            if i.is_multiple_of(64) && self.bits[(i / 64) as usize] == u64::MAX {
                i += 64;
                i = (base_frame + i).div_ceil(step) * step - base_frame;
                continue;
            }
            match (i..i + count).find(|&k| self.is_used(k)) {
                None => return Some(i),
                Some(used) => i = (base_frame + used + 1).div_ceil(step) * step - base_frame,
            }
        }
        None
    }

    /// Returns `count` frames starting at `phys` (all must be allocated).
    pub fn free(&mut self, phys: u64, count: u64) -> Result<(), FrameError> {
        if !phys.is_multiple_of(FRAME) || phys < self.base || count == 0 {
            return Err(FrameError::BadRequest);
        }
        let first = (phys - self.base) / FRAME;
        if first.checked_add(count).is_none_or(|e| e > self.frames)
            || (first..first + count).any(|i| !self.is_used(i))
        {
            return Err(FrameError::BadRequest);
        }
        for i in first..first + count {
            self.set(i, false);
        }
        self.free += count;
        Ok(())
    }

    /// Free frames.
    pub fn free_frames(&self) -> u64 {
        self.free
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    fn alloc_over(
        span: Range,
        free: &[Range],
    ) -> (std::vec::Vec<u64>, Range, std::vec::Vec<Range>) {
        (vec![0; bitmap_words(span)], span, free.to_vec())
    }

    #[test]
    fn allocates_only_usable_ram_with_alignment() {
        let (mut bits, span, free) = alloc_over(
            Range {
                start: 0,
                end: 0x40_0000,
            },
            &[
                Range {
                    start: 0x1000,
                    end: 0x9f000,
                },
                Range {
                    start: 0x10_0000,
                    end: 0x40_0000,
                },
            ],
        );
        let mut a = FrameAllocator::new(&mut bits, span).unwrap();
        for r in free {
            a.add_free(r);
        }
        assert_eq!(a.free_frames(), 0x9e + 0x300);
        let p = a.alloc(1, FRAME).unwrap();
        assert_eq!(p, 0x1000);
        let big = a.alloc(16, 0x10_0000).unwrap();
        assert_eq!(big, 0x10_0000);
        let q = a.alloc(0x9e, FRAME).unwrap();
        assert!(q >= 0x11_0000, "run must not span the hole: {q:#x}");
        a.free(big, 16).unwrap();
        let again = a.alloc(16, 0x10_0000).unwrap();
        assert_eq!(again % 0x10_0000, 0);
    }

    #[test]
    fn free_returns_memory_and_catches_double_free() {
        let (mut bits, span, _) = alloc_over(
            Range {
                start: 0x10_0000,
                end: 0x20_0000,
            },
            &[],
        );
        let mut a = FrameAllocator::new(&mut bits, span).unwrap();
        a.add_free(span);
        let total = a.free_frames();
        let mut held = std::vec::Vec::new();
        for _ in 0..10 {
            held.push(a.alloc(3, 0x4000).unwrap());
        }
        for p in &held {
            assert_eq!(p % 0x4000, 0);
        }
        assert_eq!(a.free_frames(), total - 30);
        for p in held.drain(..) {
            a.free(p, 3).unwrap();
        }
        assert_eq!(a.free_frames(), total);
        assert_eq!(a.free(0x10_0000, 1), Err(FrameError::BadRequest));
        assert_eq!(a.free(0x30_0000, 1), Err(FrameError::BadRequest));
        // The whole span, then nothing.
        let all = a.alloc(total, FRAME).unwrap();
        assert_eq!(all, 0x10_0000);
        assert_eq!(a.alloc(1, FRAME), Err(FrameError::OutOfMemory));
    }

    #[test]
    fn reserve_and_bad_requests() {
        let (mut bits, span, _) = alloc_over(
            Range {
                start: 0,
                end: 0x10_0000,
            },
            &[],
        );
        let mut a = FrameAllocator::new(&mut bits, span).unwrap();
        a.add_free(Range {
            start: 0x800,
            end: 0x10_0000,
        });
        assert_eq!(a.free_frames(), 255, "partial frame at 0x800 is not usable");
        a.reserve(Range {
            start: 0x1000,
            end: 0x2001,
        });
        assert_eq!(a.free_frames(), 253);
        assert_eq!(a.alloc(1, FRAME).unwrap(), 0x3000);
        assert_eq!(a.alloc(0, FRAME), Err(FrameError::BadRequest));
        assert_eq!(a.alloc(1, 3000), Err(FrameError::BadRequest));
        assert_eq!(a.alloc(1000, FRAME), Err(FrameError::OutOfMemory));
        assert_eq!(a.alloc(200, 0x10_0000), Err(FrameError::OutOfMemory));
    }

    #[test]
    fn unaligned_span_base_still_aligns_physically() {
        let span = Range {
            start: 0x3000,
            end: 0x103000,
        };
        let mut bits = vec![0; bitmap_words(span)];
        let mut a = FrameAllocator::new(&mut bits, span).unwrap();
        a.add_free(span);
        let p = a.alloc(2, 0x8000).unwrap();
        assert_eq!(p, 0x8000);
    }
}
