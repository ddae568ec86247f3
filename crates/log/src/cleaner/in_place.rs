//! Copying one segment in bounded memory, as segment compaction (L§4.1) and the
//! one-segment combined pass (`incremental`, L§7) do: the pass hands the source
//! segment's seglets back as soon as every entry in them has been copied or found
//! dead, and reuses them for its own output once no reader can still see them.
//!
//! Why incremental: a pass that first takes room for the whole copy holds twice the
//! segment's live data until it ends — up to a whole segment (128 seglets) per
//! cleaner thread. At 90% utilisation that is as much memory as all the dead
//! objects, and while a combined pass holds the cleaner's reserve, a compaction that
//! needs a segment's worth of free seglets cannot start at all
//! (docs/benchmarks.md, issue 2, sessions 5–7). Done incrementally, a pass needs
//! only `upfront::upfront_seglets_for` its longest entry beyond its own segment: 4 seglets
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
//!   one entry (see `upfront::upfront_seglets_for`). The span is checked after every entry,
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

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;

use super::{Cleaner, Relocator, RELOCATION_BATCH};
use crate::entry::{EntryType, ScannedLayout};
use crate::log::memory::RelocatedSums;
use crate::log::read::ObjectView;
use crate::log::scan::Found;
use crate::log::{Log, SegmentMeta};
use crate::pool::AllocClass;
use crate::segment::SegmentWriter;
use crate::tombstones::{Move, PendingMoves};
use crate::upfront::BATCH_SPAN_BYTES;
use crate::{LogRef, SEGLET_BYTES};

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
/// segment for combined cleaning in bounded memory (`incremental`).
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
/// cleaning (`combined`).
pub(crate) struct SurvivorCopy {
    /// The tombstones copied, moved in the lists a batch at a time (bounded: a
    /// victim may hold hundreds of thousands).
    pub(crate) moved_tombstones: PendingMoves,
    /// Tombstones left behind because their target is not in the log (or is the
    /// source itself).
    pub(crate) tombstones_dropped: u64,
    /// What was relocated out of the source, added to the log's totals when the
    /// source leaves (`Cleaner::forget_slot_counts`).
    pub(crate) sums: RelocatedSums,
}

impl SurvivorCopy {
    pub(crate) fn new() -> Self {
        Self {
            moved_tombstones: PendingMoves::new(),
            tombstones_dropped: 0,
            sums: RelocatedSums::default(),
        }
    }
}

impl<'a> Pass<'a> {
    /// A pass copying `source` into `w`, which already holds the up-front seglets;
    /// `survivor` when `w` is a new survivor segment.
    pub(crate) fn new(
        log: &'a Log,
        source: &'a SegmentMeta,
        w: SegmentWriter,
        survivor: Option<SurvivorCopy>,
    ) -> Self {
        Self {
            log,
            source,
            w,
            recycler: Recycler::default(),
            retired_upto: 0,
            seglets_retired: 0,
            copied: 0,
            survivor,
        }
    }

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
    fn copy(&mut self, e: &Found) -> LogRef {
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

impl<'a> Cleaner<'a> {
    /// Copies the live entries of `pass.source` into `pass.w` in order, relocating
    /// objects in batches whose buckets are prefetched first, and retires source
    /// seglets as the scan leaves them behind.
    pub(super) fn copy_in_place(&self, pass: &mut Pass<'a>, relocator: &dyn Relocator) {
        // A survivor copy drops the tombstones naming its source: the source leaves
        // the log when the survivor joins it.
        let leaving = [pass.source.id];
        let live_ids = match pass.survivor {
            Some(_) => self.log.live_segment_ids(&leaving),
            None => self.log.live_segment_ids(&[]),
        };
        // Objects parsed once, with their hashes and source offsets, waiting for
        // their buckets to load.
        let mut batch: Batch<'a> = Vec::with_capacity(RELOCATION_BATCH);
        let mut scanned_to = 0;
        let mut entries = self.log.entries(pass.source);
        loop {
            // Collect the next objects (parsed, hashed); metadata and
            // tombstones on the way are handled at once (the header is always first,
            // so it stays first).
            let more = loop {
                let Some(e) = entries.next() else {
                    break false;
                };
                scanned_to = e.offset + e.len;
                pass.take(&e, &live_ids, &mut batch, relocator);
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
            // The batch's buckets are prefetched back to back, not one by one as
            // the scan parses their objects: a random bucket is mostly a TLB miss
            // (in a VM, a two-dimensional page walk), and a prefetch retires only
            // once its walk is done, so prefetches far apart in the instruction
            // stream walk one after another while adjacent ones walk in parallel.
            // Measured: 1.161 → 1.119 ns per byte copied, median of 11 runs each
            // (docs/benchmarks.md, issue 17 session 31).
            for &(_, hash, _) in batch.iter() {
                relocator.prefetch(hash);
            }
            pass.relocate_batch(&mut batch, relocator);
            pass.done_until(scanned_to);
            if !more {
                break;
            }
        }
    }
}

/// Objects waiting for their buckets to load: each parsed once, with its hash and
/// its offset in the source.
type Batch<'a> = Vec<(ObjectView<'a>, u64, usize)>;

impl<'a> Pass<'a> {
    /// Handles one scanned entry: an object joins the batch (its bucket is
    /// prefetched when the batch is full), a header or a live tombstone is copied at once, anything else stays
    /// behind.
    fn take(
        &mut self,
        e: &Found,
        live_ids: &HashSet<u64>,
        batch: &mut Batch<'a>,
        relocator: &dyn Relocator,
    ) {
        match e.kind {
            // A survivor has its own header, written when it was opened.
            EntryType::SegmentHeader if self.survivor.is_some() => {}
            EntryType::SegmentHeader => {
                self.room_for(e.len);
                self.copy(e);
            }
            EntryType::Object => {
                // Parsed once by the scan (a corrupt object is left behind).
                if let ScannedLayout::Object(layout) = e.layout {
                    let view = self.log.object_with_layout(e.at, layout);
                    // Its bucket is prefetched with the rest of the batch
                    // (`copy_in_place`).
                    let hash = relocator.hash(&view);
                    batch.push((view, hash, e.offset));
                }
            }
            EntryType::Tombstone => match e.layout {
                ScannedLayout::Tombstone(t) if live_ids.contains(&t.segment_id) => {
                    self.copy_tombstone(e, t.segment_id)
                }
                _ => self.drop_tombstone(),
            },
            // Digests, safe versions and tablet statistics matter only in the head
            // (the newest ones win in recovery), and a closed segment is never the
            // head.
            EntryType::LogDigest | EntryType::SafeVersion | EntryType::TabletStats => {}
            // A completion record moves while its owner needs it (RIFL §4.1).
            EntryType::RpcResult => {
                if let ScannedLayout::RpcResult { lease_id, seq } = e.layout {
                    self.relocate_record(e, lease_id, seq, relocator);
                }
            }
            // A prepared op moves while undecided; its decided mark while the
            // prepared op's segment is in the log (SOSP'15 §6.2; L§3).
            EntryType::TxRecord => {
                if let ScannedLayout::TxRecord(r) = e.layout {
                    match r.decided_segment {
                        None => self.copy_if(e.at, e.len, |copy| {
                            relocator.relocate_tx_record(&r, e.at, copy)
                        }),
                        Some(segment) if live_ids.contains(&segment) => {
                            self.copy_if(e.at, e.len, |copy| {
                                copy();
                                true
                            })
                        }
                        Some(_) => {}
                    }
                }
            }
        }
    }

    /// Copies the completion record `e` if its owner still needs it.
    fn relocate_record(&mut self, e: &Found, lease_id: u64, seq: u64, relocator: &dyn Relocator) {
        self.copy_if(e.at, e.len, |copy| {
            relocator.relocate_record(lease_id, seq, e.at, copy)
        });
    }

    /// Makes room for the live entry of `len` bytes at `at` and hands `relocate`
    /// the copy to make under its owner's lock (which calls it only if the
    /// owner still refers to that entry); counts what was copied.
    fn copy_if(
        &mut self,
        at: LogRef,
        len: usize,
        relocate: impl FnOnce(&mut dyn FnMut() -> LogRef) -> bool,
    ) {
        let log = self.log;
        let counted = self.survivor.is_some();
        self.room_for(len);
        let w = &mut self.w;
        // A survivor counts its entries inside the copy, under the owner's lock,
        // as combined cleaning does: once the lock is released a writer may
        // already count the copy dead.
        let slot = w.slot;
        let moved = relocate(&mut || {
            let to = log.copy_entry(at, len, w);
            if counted {
                log.survivor_entry_counted(slot, len, false);
            }
            to
        });
        if moved {
            self.copied += len as u64;
            if let Some(s) = &mut self.survivor {
                s.sums.add(len, false);
            }
        }
    }

    /// Copies a live tombstone naming segment `target`; into a survivor it is
    /// counted there and moved in the lists (L§3).
    fn copy_tombstone(&mut self, e: &Found, target: u64) {
        self.room_for(e.len);
        self.copy(e);
        self.copied += e.len as u64;
        let log = self.log;
        if let Some(s) = &mut self.survivor {
            log.survivor_entry_counted(self.w.slot, e.len, true);
            s.sums.add(e.len, true);
            s.moved_tombstones.push(
                &log.tombstone_targets,
                Move {
                    target,
                    from: self.source.id,
                    to: self.w.id,
                    to_slot: self.w.slot,
                    bytes: e.len as u64,
                },
            );
            log.counters
                .tombstones_moved
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Leaves a dead tombstone behind. Its target left the log, and its bytes left
    /// this segment's count of live tombstones then (`tombstone_targets_left`); or,
    /// for a survivor copy, its target is the source, and they leave when the
    /// source's counts are forgotten.
    fn drop_tombstone(&mut self) {
        match &mut self.survivor {
            Some(s) => s.tombstones_dropped += 1,
            None => {
                self.log
                    .counters
                    .tombstones_dropped
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Relocates the batch's objects that the hash table still refers to (L§6.2).
    fn relocate_batch(&mut self, batch: &mut Batch<'a>, relocator: &dyn Relocator) {
        for (view, hash, _) in batch.drain(..) {
            let (at, len) = (view.location(), view.entry_len());
            self.copy_if(at, len, |copy| relocator.relocate(&view, hash, copy));
        }
    }
}
