//! Walking a closed segment's in-memory chain entry by entry, and copying an entry
//! to a writer: what the cleaner reads and writes with (L§4), and what the
//! tombstone accounting check scans.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use super::{Log, SegmentMeta, SegmentState};
use crate::entry::{EntryType, ScannedLayout};
use crate::pool::SegletPool;
use crate::segment::SegmentWriter;
use crate::{LogRef, SEGLET_BYTES};

/// How far ahead of the entry it parses a segment scan asks for the log's bytes:
/// about eight 100-byte objects, so each line is asked for a few memory latencies
/// before it is read.
const SCAN_PREFETCH_BYTES: usize = 1024;

/// Cache line size the scan's prefetches step by (seglets start on a line).
const CACHE_LINE_BYTES: usize = 64;

/// One entry found by scanning a segment.
#[derive(Clone, Copy)]
pub(crate) struct Found {
    pub at: LogRef,
    /// Where the entry starts in its segment's in-memory chain.
    pub offset: usize,
    pub len: usize,
    pub kind: EntryType,
    /// The entry's fields, parsed once by the scan.
    pub layout: ScannedLayout,
}

impl Log {
    /// Ids of the segments in the log: tombstones naming any other segment are dead.
    /// Holds count as segments in the log until their tombstones expire (`holds`).
    pub(crate) fn live_segment_ids(&self, leaving: &[u64]) -> HashSet<u64> {
        let table = self.segments.lock();
        table
            .by_id
            .values()
            .filter(|m| m.state != SegmentState::Emergency && !leaving.contains(&m.id))
            .map(|m| m.id)
            .chain(table.holds.live())
            .collect()
    }

    /// The entries of a closed segment's in-memory chain, in order. Stops at the first
    /// entry that does not parse (which would mean memory corruption: everything
    /// before it is still returned).
    ///
    /// The scan asks for the cache lines `SCAN_PREFETCH_BYTES` ahead of the entry
    /// it parses: a cleaner pass reads every byte of its victims once, in order
    /// (L§4), and the first read of each entry's header was a cache miss — 23% of
    /// the cleaner's CPU at 90% utilisation before (issue 17, docs/benchmarks.md
    /// session 29). The hardware's own prefetcher stops at every 4 KiB page.
    pub(crate) fn entries<'a>(&'a self, meta: &'a SegmentMeta) -> impl Iterator<Item = Found> + 'a {
        let mut offset = 0;
        // Lines below this offset have been asked for.
        let mut prefetched = 0;
        std::iter::from_fn(move || {
            if offset >= meta.mem_length {
                return None;
            }
            let ahead = (offset + SCAN_PREFETCH_BYTES).min(meta.mem_length);
            while prefetched < ahead {
                if let Some(&seglet) = meta.seglets.get(prefetched / SEGLET_BYTES) {
                    self.pool.prefetch(seglet, prefetched % SEGLET_BYTES);
                }
                prefetched += CACHE_LINE_BYTES;
            }
            let at =
                SegletPool::log_ref(meta.seglets[offset / SEGLET_BYTES], offset % SEGLET_BYTES);
            let Ok((header, layout)) = self.scan_entry(at) else {
                debug_assert!(false, "unparsable entry in segment {} at {offset}", meta.id);
                return None;
            };
            let start = offset;
            offset += header.total_len;
            Some(Found {
                at,
                offset: start,
                len: header.total_len,
                kind: header.entry_type,
                layout,
            })
        })
    }

    /// Copies the entry at `from` (of `len` bytes) to the end of `w`.
    ///
    /// Asks for the writer's lines `SCAN_PREFETCH_BYTES` ahead, as many as this entry
    /// fills: the cleaner writes its output in order too, and a store to a line not
    /// in cache waits for it (the copy's stores were most of its cost, issue 17).
    pub(crate) fn copy_entry(&self, from: LogRef, len: usize, w: &mut SegmentWriter) -> LogRef {
        let at = w.ref_at(w.length);
        let pool = &self.pool;
        pool.for_each_piece(from, len, |piece| w.write(pool, piece));
        w.note_entry(len);
        let end = w.length + SCAN_PREFETCH_BYTES;
        let mut line = (end - len.min(SCAN_PREFETCH_BYTES)) & !(CACHE_LINE_BYTES - 1);
        while line < end {
            match w.seglets.get(line / SEGLET_BYTES) {
                Some(&seglet) => self.pool.prefetch(seglet, line % SEGLET_BYTES),
                None => break,
            }
            line += CACHE_LINE_BYTES;
        }
        at
    }

    /// Checks the live-tombstone accounting against the log itself: every closed
    /// segment's count must equal the bytes of its tombstones whose target is still in
    /// the log (found by scanning), each count must equal what the target lists name,
    /// and the total must be the sum over segments. Only meaningful while no pass runs
    /// (tests call it between operations). Returns the first discrepancy.
    pub fn verify_tombstone_accounting(&self) -> Result<(), String> {
        let _no_combined = self.combined_pass.lock();
        let table = self.segments.lock();
        let in_log: HashSet<u64> = table
            .by_id
            .values()
            .filter(|m| m.state != SegmentState::Emergency)
            .map(|m| m.id)
            .chain(table.holds.live())
            .collect();
        let targets = self.tombstone_targets.lock();
        let mut total = 0u64;
        for m in table.by_id.values() {
            let counted = self.slots[m.slot as usize]
                .tombstone_bytes
                .load(Ordering::Relaxed);
            total += counted;
            let listed = targets.bytes_held_by(m.id);
            if listed != counted {
                return Err(format!(
                    "segment {}: {counted} live tombstone bytes counted, {listed} listed",
                    m.id
                ));
            }
            if m.state != SegmentState::Closed {
                continue;
            }
            let mut scanned = 0u64;
            for e in self.entries(m) {
                if matches!(e.layout, ScannedLayout::Tombstone(t) if in_log.contains(&t.segment_id))
                {
                    scanned += e.len as u64;
                }
            }
            if scanned != counted {
                return Err(format!(
                    "segment {}: {counted} live tombstone bytes counted, {scanned} found",
                    m.id
                ));
            }
        }
        let global = self.tombstone_bytes_total();
        if global != total {
            return Err(format!(
                "{global} live tombstone bytes in total, {total} summed over segments"
            ));
        }
        Ok(())
    }
}
