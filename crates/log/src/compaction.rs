//! Segment compaction (L§4.1), done incrementally: the pass hands the source
//! segment's seglets back as soon as every entry in them has been copied or found
//! dead, and reuses them for its own output once no reader can still see them.
//!
//! Why incremental: a pass that first takes room for the whole copy holds twice the
//! segment's live data until it ends — up to a whole segment (128 seglets) per
//! cleaner thread. At 90% utilisation that is as much memory as all the dead
//! objects, and while a combined pass holds the cleaner's reserve, a compaction that
//! needs a segment's worth of free seglets cannot start at all
//! (docs/benchmarks.md, issue 2, sessions 5–7). Done incrementally, a pass needs
//! only [`upfront_seglets_for`] its longest entry beyond its own segment: 4 seglets
//! for entries up to 64 KiB, 21 (about 1.3 MiB) for the largest possible one.
//!
//! The bound comes from the segment's longest entry, not from its live-byte
//! counters: a bound taken from counters is only as good as their accounting, and
//! a pass that runs out of seglets half-way cannot stop.
//!
//! Why it is safe:
//! - The output is a subsequence of the source, copied in order apart from
//!   tombstones, which may move ahead of objects still waiting in a batch. So the
//!   output never runs ahead of the scan position, and the seglets it needs beyond
//!   those the pass has already retired are bounded by the span of one batch plus
//!   one entry (see `upfront_seglets_for`). The span is checked after every entry,
//!   tombstones included: a batch left waiting while a run of tombstones was
//!   copied let the copy run megabytes ahead of the retired seglets, and the
//!   pass ran out of them (regression test
//!   `compact_object_followed_by_tombstones_stays_within_upfront_seglets`
//!   in crates/master/tests/compaction.rs).
//! - A source seglet is retired only when every entry that starts or ends in it
//!   has been handled, and reused only after every operation pinned before its
//!   retirement has finished (epochs, L§6.3) — the same rule as for whole segments.
//! - While the pass runs the segment is `Compacting`: its in-memory chain is part
//!   old and part new, so the replica manager waits before copying it
//!   (`Log::copy_for_replica`).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use crate::cleaner::{CpuCharge, PassOutcome, Relocator, RELOCATION_BATCH};
use crate::entry::{EntryType, ScannedLayout};
use crate::log::{Log, ObjectView, SegmentMeta, SegmentState};
use crate::pool::AllocClass;
use crate::segment::SegmentWriter;
use crate::tombstones::{Move, PendingMoves};
use crate::{MAX_KEY_BYTES, MAX_VALUE_BYTES, SEGLET_BYTES};

/// A batch of objects waiting for their buckets is relocated once it spans this
/// many bytes of the source, even if it holds fewer than `RELOCATION_BATCH`
/// objects: it bounds how far the scan runs ahead of the seglets already retired.
const BATCH_SPAN_BYTES: usize = SEGLET_BYTES;

/// Source seglets this pass retired, in order, with the epoch of their retirement.
/// The pass takes them back for its output once their epoch is safe; what it does
/// not need goes to the log's retired list at the end.
#[derive(Default)]
pub(crate) struct Recycler {
    retired: VecDeque<(u64, u32)>,
}

impl Recycler {
    fn retire(&mut self, log: &Log, seglets: &[u32]) {
        if seglets.is_empty() {
            return;
        }
        let epoch = log.epochs.advance();
        self.retired.extend(seglets.iter().map(|&s| (epoch, s)));
    }

    /// Moves up to `n` retired seglets that no reader can see any more to `out`;
    /// with `wait`, waits for the oldest ones' epoch to pass if need be.
    fn take(&mut self, log: &Log, n: usize, wait: bool, out: &mut Vec<u32>) {
        while out.len() < n {
            let Some(&(epoch, seglet)) = self.retired.front() else {
                return;
            };
            if !log.epochs.safe(epoch) {
                if !wait {
                    return;
                }
                // Pins are held only for the length of one synchronous operation
                // (never across a wait for the cleaner), so this ends soon.
                std::thread::yield_now();
                continue;
            }
            self.retired.pop_front();
            log.pool.unlink(seglet);
            out.push(seglet);
        }
    }

    /// Hands what is left to the log's retired list, under the epoch each seglet was
    /// retired in.
    pub(crate) fn finish(self, log: &Log) -> usize {
        let n = self.retired.len();
        let mut run: Vec<u32> = Vec::new();
        let mut run_epoch = 0;
        for (epoch, seglet) in self.retired {
            if epoch != run_epoch && !run.is_empty() {
                log.retire_at(run_epoch, std::mem::take(&mut run));
            }
            run_epoch = epoch;
            run.push(seglet);
        }
        if !run.is_empty() {
            log.retire_at(run_epoch, run);
        }
        n
    }
}

/// A compaction in progress: the source, the new copy and the seglets in between.
/// The same pass, with `survivor` set, copies one segment into a new survivor
/// segment for combined cleaning in bounded memory (`combined_incremental`).
pub(crate) struct Pass<'a> {
    pub(crate) log: &'a Log,
    pub(crate) source: &'a SegmentMeta,
    pub(crate) w: SegmentWriter,
    pub(crate) recycler: Recycler,
    /// Source seglets `[0, retired_upto)` have been retired.
    pub(crate) retired_upto: usize,
    pub(crate) seglets_retired: usize,
    pub(crate) copied: u64,
    /// Set when the copy is a new segment (a survivor of combined cleaning) rather
    /// than the source's own new chain.
    pub(crate) survivor: Option<SurvivorCopy>,
}

/// What a copy into a survivor segment does besides copying: the source's header
/// stays behind (the survivor has its own), tombstones naming the source die with
/// it, and what is copied is counted in the survivor's counters, as in combined
/// cleaning (`cleaner`).
pub(crate) struct SurvivorCopy {
    /// The tombstones copied, moved in the lists a batch at a time (bounded: a
    /// victim may hold hundreds of thousands).
    pub(crate) moved_tombstones: PendingMoves,
    /// Tombstones left behind because their target is not in the log (or is the
    /// source itself).
    pub(crate) tombstones_dropped: u64,
}

impl SurvivorCopy {
    pub(crate) fn new() -> Self {
        Self {
            moved_tombstones: PendingMoves::new(),
            tombstones_dropped: 0,
        }
    }
}

impl Pass<'_> {
    /// Makes room in the copy for `len` more bytes: retired source seglets first
    /// (the pool is for writers), then the pool, then waiting for the epoch of a
    /// retired source seglet. The up-front seglets guarantee the last step always
    /// finds one (module doc).
    pub(crate) fn room_for(&mut self, len: usize) {
        let n = self.w.seglets_needed(len);
        if n == 0 {
            return;
        }
        let log = self.log;
        let mut got = Vec::with_capacity(n);
        self.recycler.take(log, n, false, &mut got);
        if got.len() < n
            && !log
                .pool
                .allocate(n - got.len(), AllocClass::Cleaner, &mut got)
        {
            self.recycler.take(log, n, true, &mut got);
        }
        assert_eq!(
            got.len(),
            n,
            "compaction of segment {} ran out of seglets: the up-front bound is wrong",
            self.source.id
        );
        let before = self.w.seglets.len();
        self.w.attach(&log.pool, &got);
        log.map_seglets(&self.w, before);
    }

    /// Copies the entry at `e` to the end of the new copy (room already made).
    fn copy(&mut self, e: &crate::cleaner::Found) -> crate::LogRef {
        self.log.copy_entry(e.at, e.len, &mut self.w)
    }

    /// Every entry before source offset `done` has been handled: retire the source
    /// seglets wholly before it.
    fn done_until(&mut self, done: usize) {
        let upto = (done / SEGLET_BYTES).min(self.source.seglets.len());
        if upto > self.retired_upto {
            let seglets = &self.source.seglets[self.retired_upto..upto];
            self.recycler.retire(self.log, seglets);
            self.seglets_retired += seglets.len();
            self.retired_upto = upto;
        }
    }
}

/// Seglets a compaction takes before it starts, beyond its own segment's, for a
/// segment whose longest entry is `largest_entry` bytes: enough for the copy to
/// run one batch span plus one such entry ahead of the source seglets it has
/// retired, plus one partly filled seglet at each end.
pub(crate) fn upfront_seglets_for(largest_entry: usize) -> usize {
    (BATCH_SPAN_BYTES + largest_entry).div_ceil(SEGLET_BYTES) + 2
}

/// The most [`upfront_seglets_for`] any segment of a log of `segment_bytes`
/// segments can need: its entries are at most half a segment
/// (`Log::max_entry_bytes`). The cleaner's reserve is sized from it.
pub(crate) fn upfront_seglets(segment_bytes: usize) -> usize {
    upfront_seglets_for(largest_possible_entry(segment_bytes))
}

pub(crate) fn largest_possible_entry(segment_bytes: usize) -> usize {
    (MAX_KEY_BYTES + MAX_VALUE_BYTES + crate::entry::MAX_HEADER_BYTES).min(segment_bytes / 2)
}

impl Log {
    /// Segment compaction (L§4.1): rewrites the closed segment with the most
    /// freeable seglets into fewer seglets, keeping its id, so its replicas on
    /// disk are untouched. Returns `None` when no segment has a seglet to gain or the
    /// pool cannot give the pass its up-front seglets.
    pub fn compact(&self, relocator: &dyn Relocator) -> Option<PassOutcome> {
        let _cpu = CpuCharge::start(&self.counters.cpu_ns);
        let meta = self.pick_for_compaction()?;
        // Both bounds hold whatever the counters say (module doc). A segment that
        // does not know its longest entry gets the largest possible one.
        let largest_entry = match meta.max_entry_bytes {
            0 => largest_possible_entry(self.config.segment_bytes),
            n => n,
        };
        let upfront = meta
            .mem_length
            .min(upfront_seglets_for(largest_entry) * SEGLET_BYTES);
        let mut w = SegmentWriter::new(meta.id, meta.slot, self.config.segment_bytes);
        if !self.cleaner_reserve(&mut w, upfront) {
            self.counters
                .passes_without_memory
                .fetch_add(1, Ordering::Relaxed);
            self.release_victims(std::slice::from_ref(&meta));
            return None;
        }
        // From here on the pass cannot fail: it gives source seglets away as it goes.
        let mut pass = Pass {
            log: self,
            source: &meta,
            w,
            recycler: Recycler::default(),
            retired_upto: 0,
            seglets_retired: 0,
            copied: 0,
            survivor: None,
        };
        self.compact_entries(&mut pass, relocator);
        let Pass {
            mut w,
            recycler,
            retired_upto,
            mut seglets_retired,
            copied,
            ..
        } = pass;
        let spare = w.trim_unused();
        if !spare.is_empty() {
            self.pool.release(&spare);
        }
        let new_seglets = w.seglets.len();
        {
            let mut table = self.segments.lock();
            if let Some(m) = table.by_id.get_mut(&meta.id) {
                m.state = SegmentState::Closed;
                m.mem_length = w.length;
                m.max_entry_bytes = w.max_entry_bytes;
                m.seglets = std::mem::take(&mut w.seglets);
            }
        }
        // Whatever the scan did not reach (nothing, unless an entry failed to parse)
        // leaves with the old chain.
        let rest = meta.seglets[retired_upto..].to_vec();
        seglets_retired += rest.len();
        recycler.finish(self);
        self.retire(rest, None);
        let n = &self.counters;
        n.compactions.fetch_add(1, Ordering::Relaxed);
        n.compaction_bytes_copied
            .fetch_add(copied, Ordering::Relaxed);
        Some(PassOutcome {
            segments: 1,
            bytes_copied: copied,
            seglets_retired,
            survivors: 0,
            output_seglets: new_seglets,
            made_progress: seglets_retired > new_seglets,
        })
    }

    /// The closed segment whose compaction frees the most seglets, marked
    /// `Compacting`.
    fn pick_for_compaction(&self) -> Option<SegmentMeta> {
        let head_id = self.head_id();
        let mut table = self.segments.lock();
        let best = table
            .by_id
            .values()
            .filter(|m| m.state == SegmentState::Closed && m.replicated && m.id != head_id)
            .map(|m| {
                let c = &self.slots[m.slot as usize];
                let keep = c.live_bytes.load(Ordering::Relaxed)
                    + c.tombstone_bytes.load(Ordering::Relaxed)
                    + 64;
                let need = (keep as usize).div_ceil(SEGLET_BYTES);
                (m.seglets.len().saturating_sub(need), m.created_at, m.id)
            })
            .filter(|&(gain, _, _)| gain >= 1)
            // Most seglets gained; among equals the oldest.
            .max_by_key(|&(gain, created, _)| (gain, u64::MAX - created))?;
        let m = table.by_id.get_mut(&best.2)?;
        m.state = SegmentState::Compacting;
        Some(m.clone())
    }

    /// Copies the live entries of `pass.source` into `pass.w` in order, relocating
    /// objects in batches whose buckets are prefetched first, and retires source
    /// seglets as the scan leaves them behind.
    pub(crate) fn compact_entries<'a>(&'a self, pass: &mut Pass<'a>, relocator: &dyn Relocator) {
        // A survivor copy drops the tombstones naming its source: the source leaves
        // the log when the survivor joins it.
        let leaving = [pass.source.id];
        let live_ids = match pass.survivor {
            Some(_) => self.live_segment_ids(&leaving),
            None => self.live_segment_ids(&[]),
        };
        // Objects parsed once, with their hashes and source offsets, waiting for
        // their buckets to load.
        let mut batch: Vec<(ObjectView<'a>, u64, usize)> = Vec::with_capacity(RELOCATION_BATCH);
        let mut scanned_to = 0;
        let mut entries = self.entries(pass.source);
        loop {
            // Collect the next objects and start loading their buckets; metadata and
            // tombstones on the way are handled at once (the header is always first,
            // so it stays first).
            let more = loop {
                let Some(e) = entries.next() else {
                    break false;
                };
                scanned_to = e.offset + e.len;
                match e.kind {
                    // A survivor has its own header, written when it was opened.
                    EntryType::SegmentHeader if pass.survivor.is_some() => {}
                    EntryType::SegmentHeader => {
                        pass.room_for(e.len);
                        pass.copy(&e);
                    }
                    EntryType::Object => {
                        // Parsed once by the scan (a corrupt object is left behind).
                        if let ScannedLayout::Object(layout) = e.layout {
                            let view = self.object_with_layout(e.at, layout);
                            let hash = relocator.hash(&view);
                            relocator.prefetch(hash);
                            batch.push((view, hash, e.offset));
                        }
                    }
                    EntryType::Tombstone => match e.layout {
                        ScannedLayout::Tombstone(t) if live_ids.contains(&t.segment_id) => {
                            pass.room_for(e.len);
                            pass.copy(&e);
                            pass.copied += e.len as u64;
                            if let Some(s) = &mut pass.survivor {
                                self.survivor_bytes_added(
                                    pass.w.slot,
                                    e.len,
                                    true,
                                    pass.source.slot,
                                );
                                s.moved_tombstones.push(
                                    &self.tombstone_targets,
                                    Move {
                                        target: t.segment_id,
                                        from: pass.source.id,
                                        to: pass.w.id,
                                        to_slot: pass.w.slot,
                                        bytes: e.len as u64,
                                    },
                                );
                                self.counters
                                    .tombstones_moved
                                    .fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        // Its target left the log, and its bytes left this segment's
                        // count of live tombstones then (`tombstone_targets_left`);
                        // or, for a survivor copy, its target is the source, and
                        // they leave when the source's counts are forgotten.
                        _ => match &mut pass.survivor {
                            Some(s) => s.tombstones_dropped += 1,
                            None => {
                                self.counters
                                    .tombstones_dropped
                                    .fetch_add(1, Ordering::Relaxed);
                            }
                        },
                    },
                    // Digests, safe versions and tablet statistics matter only in the
                    // head (the newest ones win in recovery), and a closed segment is
                    // never the head.
                    EntryType::LogDigest | EntryType::SafeVersion | EntryType::TabletStats => {}
                }
                // Checked after every entry, not only after objects (module doc).
                match batch.first() {
                    None => pass.done_until(scanned_to),
                    Some(&(_, _, first_offset)) => {
                        let span = scanned_to - first_offset;
                        if batch.len() == RELOCATION_BATCH || span >= BATCH_SPAN_BYTES {
                            break true;
                        }
                    }
                }
            };
            let counted = pass.survivor.is_some();
            for (view, hash, _) in batch.drain(..) {
                let (at, len) = (view.location(), view.entry_len());
                pass.room_for(len);
                let w = &mut pass.w;
                // A survivor counts its objects inside the copy, under the bucket
                // lock, as combined cleaning does: once the lock is released a
                // writer may already count the copy dead.
                let (slot, from_slot) = (w.slot, pass.source.slot);
                let moved = relocator.relocate(&view, hash, &mut || {
                    let at = self.copy_entry(at, len, w);
                    if counted {
                        self.survivor_bytes_added(slot, len, false, from_slot);
                    }
                    at
                });
                if moved {
                    pass.copied += len as u64;
                }
            }
            pass.done_until(scanned_to);
            if !more {
                break;
            }
        }
    }
}
