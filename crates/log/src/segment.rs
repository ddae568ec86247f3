//! A segment being written: the head, a survivor of combined cleaning, or the new
//! in-memory copy of a segment being compacted (L§4, L§5.1).
//!
//! Seglets are attached lazily, as bytes arrive, so a short segment holds few seglets.
//! Only the one thread that owns a `SegmentWriter` writes to it, and only past
//! `length`; readers are shown an entry only after it is complete.

use crate::pool::{AllocClass, SegletPool};
use crate::{LogRef, SEGLET_BYTES};

/// The writer of one segment's bytes.
#[derive(Debug)]
pub struct SegmentWriter {
    /// Segment id, unique for the life of the log.
    pub id: u64,
    /// Index of the segment's counters (see `Log`).
    pub slot: u32,
    /// The chain of seglets, in order.
    pub seglets: Vec<u32>,
    /// Bytes written so far.
    pub length: usize,
    /// Most bytes this segment may hold.
    pub limit: usize,
    /// Length of the longest entry written so far: bounds how far a compaction of
    /// this segment runs ahead of the seglets it has freed (`cleaner::in_place`).
    pub max_entry_bytes: usize,
}

impl SegmentWriter {
    pub fn new(id: u64, slot: u32, limit: usize) -> Self {
        Self {
            id,
            slot,
            seglets: Vec::with_capacity(limit.div_ceil(SEGLET_BYTES)),
            length: 0,
            limit,
            max_entry_bytes: 0,
        }
    }

    /// Records that an entry (or a run of entries) of `len` bytes was written.
    pub fn note_entry(&mut self, len: usize) {
        self.max_entry_bytes = self.max_entry_bytes.max(len);
    }

    /// Bytes that still fit under the limit.
    pub fn room(&self) -> usize {
        self.limit - self.length
    }

    /// Seglets that must be attached before `extra` more bytes can be written.
    pub fn seglets_needed(&self, extra: usize) -> usize {
        (self.length + extra)
            .div_ceil(SEGLET_BYTES)
            .saturating_sub(self.seglets.len())
    }

    /// Attaches seglets (already taken from the pool) to the end of the chain.
    pub fn attach(&mut self, pool: &SegletPool, new: &[u32]) {
        for &s in new {
            if let Some(&last) = self.seglets.last() {
                pool.link(last, s);
            }
            self.seglets.push(s);
        }
    }

    /// Takes the seglets needed for `extra` more bytes from the pool; all or none.
    pub fn reserve(&mut self, pool: &SegletPool, extra: usize, class: AllocClass) -> bool {
        let n = self.seglets_needed(extra);
        if n == 0 {
            return true;
        }
        let mut got = Vec::with_capacity(n);
        if !pool.allocate(n, class, &mut got) {
            return false;
        }
        self.attach(pool, &got);
        true
    }

    /// The log reference of byte `offset` of this segment.
    pub fn ref_at(&self, offset: usize) -> LogRef {
        SegletPool::log_ref(self.seglets[offset / SEGLET_BYTES], offset % SEGLET_BYTES)
    }

    /// Appends `data` at the end. The caller reserved the seglets first.
    pub fn write(&mut self, pool: &SegletPool, mut data: &[u8]) {
        assert!(data.len() <= self.room(), "segment {} overfilled", self.id);
        assert_eq!(self.seglets_needed(data.len()), 0, "seglets not reserved");
        while !data.is_empty() {
            let seglet = self.seglets[self.length / SEGLET_BYTES];
            let offset = self.length % SEGLET_BYTES;
            let take = data.len().min(SEGLET_BYTES - offset);
            // SAFETY: bytes past `length` of a segment this writer owns are written by
            // no one else and read by no one until an entry there is published.
            unsafe { pool.write(seglet, offset, &data[..take]) };
            self.length += take;
            data = &data[take..];
        }
    }

    /// Seglets attached beyond those holding written bytes.
    pub fn trim_unused(&mut self) -> Vec<u32> {
        let keep = self.length.div_ceil(SEGLET_BYTES).max(1);
        // The last kept seglet's `next` still names the first spare one; that link is
        // never followed (no entry extends past `length`) and the pool resets `next`
        // when it hands a seglet out again.
        self.seglets.split_off(keep.min(self.seglets.len()))
    }
}
