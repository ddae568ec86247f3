//! The two-level cleaner: segment compaction and combined cleaning (L§4–7).
//!
//! Both copy live entries out of old memory and then retire it through epochs. The
//! log decides what is live only for tombstones (a tombstone lives while the segment
//! of the object it kills is still in the log, L§3); for objects it asks the
//! [`Relocator`], which owns the hash table (L§6.2).
//!
//! Every pass takes all the seglets it may need from the pool *before* it copies
//! anything, from the cleaner's reserve if need be, so a pass never stops half-way
//! and the cleaner can always run (L§7). Passes may run on several threads at once:
//! a segment being cleaned is marked `Cleaning` and no other pass picks it.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use crate::balancer::{self, BalancerInput, CleanKind};
use crate::entry::{EntryType, ScannedLayout};
use crate::log::{Log, ObjectView, SegmentMeta, SegmentState, SegmentTable};
use crate::pool::{AllocClass, SegletPool};
use crate::replica::SegmentRole;
use crate::segment::SegmentWriter;
use crate::tombstones::{Move, PendingMoves};
use crate::{LogRef, SEGLET_BYTES};

/// The owner of the hash table, as the cleaner sees it.
pub trait Relocator: Send + Sync {
    /// The hash the table files this object under.
    fn hash(&self, object: &ObjectView<'_>) -> u64;

    /// A hint that `hash`'s bucket is needed soon (the cleaner issues it for a batch
    /// of objects before relocating them, so their cache misses overlap).
    fn prefetch(&self, _hash: u64) {}

    /// Lock-free hint: does the hash table still refer to this object entry?
    fn is_live(&self, object: &ObjectView<'_>, hash: u64) -> bool;

    /// Under the object's bucket lock: if the hash table refers to exactly this entry,
    /// call `copy` (which writes the entry to its new place and returns the new
    /// reference), point the hash table at the copy and return true; otherwise return
    /// false without calling `copy`. `hash` is `self.hash(object)`.
    fn relocate(
        &self,
        object: &ObjectView<'_>,
        hash: u64,
        copy: &mut dyn FnMut() -> LogRef,
    ) -> bool;
}

/// Objects relocated together: their buckets are prefetched as a batch. Enough to
/// cover a few memory latencies, small enough to stay in L1.
pub(crate) const RELOCATION_BATCH: usize = 16;

/// Most segments one combined pass cleans; bounds the pass's memory and latency.
pub const MAX_SEGMENTS_PER_COMBINED_PASS: usize = 32;
/// Segments live above this fraction (on disk) are not worth combined cleaning.
pub const MAX_UTILIZATION_TO_CLEAN: f64 = 0.98;

/// What one cleaning pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassOutcome {
    /// Segments compacted or cleaned.
    pub segments: usize,
    /// Bytes of live entries copied.
    pub bytes_copied: u64,
    /// Seglets handed to the epoch mechanism for reuse.
    pub seglets_retired: usize,
    /// Survivor segments written (combined cleaning only).
    pub survivors: usize,
    /// Seglets the pass's output holds: the survivors, or the compacted copy.
    pub output_seglets: usize,
    /// Whether the pass freed memory, disk space or tombstones; a cleaner whose
    /// passes make no progress should wait instead of trying again at once.
    pub made_progress: bool,
}

/// CPU time the calling thread has used, in nanoseconds (0 if the clock is
/// unavailable): costs are measured in CPU time, which other processes on a
/// shared machine do not inflate.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; the call only writes it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Adds the CPU time the calling thread spends from its creation to its drop to a
/// counter: a pass holds one, so passes that give up (no memory, too little gain)
/// are charged too — they are cleaner work the writers pay for all the same.
pub(crate) struct CpuCharge<'a> {
    counter: &'a std::sync::atomic::AtomicU64,
    start_ns: u64,
}

impl<'a> CpuCharge<'a> {
    pub(crate) fn start(counter: &'a std::sync::atomic::AtomicU64) -> Self {
        Self {
            counter,
            start_ns: thread_cpu_ns(),
        }
    }
}

impl Drop for CpuCharge<'_> {
    fn drop(&mut self) {
        self.counter.fetch_add(
            thread_cpu_ns().saturating_sub(self.start_ns),
            Ordering::Relaxed,
        );
    }
}

/// What `Log::pick_for_combined` chose, each marked `Cleaning`.
enum Victims {
    /// Victims for a batch pass, and an upper bound of their live bytes.
    Batch(Vec<SegmentMeta>, usize),
    /// The best victim, whose live data does not fit the memory free for a batch
    /// pass's survivors: cleaned alone in bounded memory (`combined_incremental`).
    Alone(SegmentMeta),
}

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

/// One live entry a combined pass will copy: 32 bytes, where a scanned entry with
/// its parsed layout takes 128 — at 100-byte objects the work list of a pass was
/// as large as the data it cleaned (issue 17).
#[derive(Clone, Copy)]
pub(crate) struct Candidate {
    /// The object's birth (or, for a tombstone, its segment's): the copy order.
    pub birth: u64,
    pub at: LogRef,
    /// An object's key hash, or the segment a tombstone names.
    pub hash_or_target: u64,
    /// Entry bytes (entries are at most half a segment, ≤ 128 MiB).
    pub len: u32,
    /// Index of the victim holding it.
    pub victim: u16,
    pub kind: EntryType,
}

impl Candidate {
    fn new(birth: u64, e: &Found, victim: u16, hash_or_target: u64) -> Self {
        Self {
            birth,
            at: e.at,
            hash_or_target,
            // `Log::new` caps entries at half a segment, and segments at 256 MiB.
            len: e.len as u32,
            victim,
            kind: e.kind,
        }
    }
}

const _: () = assert!(std::mem::size_of::<Candidate>() == 32);
const _: () = assert!(MAX_SEGMENTS_PER_COMBINED_PASS <= u16::MAX as usize);

/// Bytes of the combined pass's work list per byte of log memory: 1/128 (0.8%),
/// enough for about a segment of 100-byte objects per 128 MiB of memory (1/32
/// before: the list was the largest transient outside the log, ≈ 4 MiB of a
/// 160 MiB server's peak in L Table 1's W1, docs/benchmarks.md issue 17). The list
/// holds whole victims only and never passes the bound: a victim that would take it
/// past is given back, and a first victim that would is cleaned alone without a
/// list (`combined_incremental`).
pub const COMBINED_WORK_LIST_SHARE: usize = 128;

/// Entries a combined pass's work list takes before it stops taking victims: see
/// [`COMBINED_WORK_LIST_SHARE`]; at least 64 Ki entries (2 MiB).
pub fn combined_work_list_entries(memory_bytes: usize) -> usize {
    (memory_bytes / COMBINED_WORK_LIST_SHARE / std::mem::size_of::<Candidate>()).max(1 << 16)
}

impl Log {
    /// The balancer's view of the log right now.
    pub fn balancer_input(&self) -> BalancerInput {
        let memory = self.pool.bytes() as f64;
        let stats_disk: u64 = {
            let table = self.segments.lock();
            table.by_id.values().map(|m| m.disk_length as u64).sum()
        };
        BalancerInput {
            free_fraction: (self.pool.available(AllocClass::Write) * SEGLET_BYTES) as f64 / memory,
            live_fraction: self.live_object_bytes() as f64 / memory,
            tombstone_fraction: self.tombstone_bytes_total() as f64 / memory,
            disk_log_bytes: stats_disk,
            disk_limit_bytes: (self.config.disk_expansion_factor * memory) as u64,
            compaction: self.config.compaction,
            tombstone_share_for_combined: self.config.tombstone_share_for_combined,
            clean_ahead_fraction: match self.config.clean_ahead_segments {
                0 => 1.0,
                n => ((n * self.config.segment_bytes) as f64 / memory)
                    .min(balancer::CLEAN_AHEAD_MAX_MEMORY_SHARE),
            },
        }
    }

    /// Which cleaner the balancer would run now.
    pub fn cleaning_needed(&self) -> CleanKind {
        balancer::choose(&self.balancer_input())
    }

    /// Runs one pass of whichever cleaner the balancer picks; `None` if no cleaning
    /// was needed or nothing could be cleaned.
    pub fn clean(&self, relocator: &dyn Relocator) -> Option<(CleanKind, PassOutcome)> {
        self.reclaim();
        let kind = self.cleaning_needed();
        let outcome = match kind {
            CleanKind::None => return None,
            CleanKind::Compaction => self
                .compact(relocator)
                .map(|o| (CleanKind::Compaction, o))
                .or_else(|| {
                    self.try_clean_combined(relocator, 1)
                        .map(|o| (CleanKind::Combined, o))
                }),
            // Combined cleaning forced by tombstones or by the disk log may free no
            // memory (it frees tombstones or disk space); otherwise it must.
            CleanKind::Combined => {
                let combined = self
                    .try_clean_combined(
                        relocator,
                        usize::from(!balancer::needs_combined(&self.balancer_input())),
                    )
                    .map(|o| (CleanKind::Combined, o));
                // A forced pass that freed no memory while writers wait for it is
                // followed by a compaction. Otherwise, when the combined budget is
                // too small for victims that matter, forced passes clean one small
                // segment after another and the writers starve (measured: W7 at 95%,
                // 217,000 passes of 40 KB each with the disk log near its limit,
                // docs/benchmarks.md, session 10).
                let freed_memory = combined
                    .as_ref()
                    .is_some_and(|(_, o)| o.seglets_retired > o.output_seglets + 1);
                let writers_wait = self.pool.available(AllocClass::Write) == 0;
                if self.config.compaction && (combined.is_none() || (!freed_memory && writers_wait))
                {
                    match self.compact(relocator) {
                        Some(o) if o.made_progress || combined.is_none() => {
                            Some((CleanKind::Compaction, o))
                        }
                        _ => combined,
                    }
                } else {
                    combined
                }
            }
        };
        // L§7: when no other pass can make progress, clean one segment in bounded
        // memory (`combined_incremental`). Without it a log whose segments hold
        // only live data and tombstones, with less free than one victim's live
        // data, could never collect those tombstones again.
        let outcome = outcome.or_else(|| {
            let forced = balancer::needs_combined(&self.balancer_input());
            self.clean_combined_incremental(relocator, forced)
                .map(|o| (CleanKind::Combined, o))
        });
        self.reclaim();
        outcome
    }

    /// Ids of the segments in the log: tombstones naming any other segment are dead.
    pub(crate) fn live_segment_ids(&self, leaving: &[u64]) -> HashSet<u64> {
        let table = self.segments.lock();
        table
            .by_id
            .values()
            .filter(|m| m.state != SegmentState::Emergency && !leaving.contains(&m.id))
            .map(|m| m.id)
            .collect()
    }

    /// Calls `f` for every entry of a closed segment's in-memory chain, in order.
    fn scan(&self, meta: &SegmentMeta, f: impl FnMut(Found)) {
        self.entries(meta).for_each(f);
    }

    /// The entries of a closed segment's in-memory chain, in order. Stops at the first
    /// entry that does not parse (which would mean memory corruption: everything
    /// before it is still returned).
    pub(crate) fn entries<'a>(&'a self, meta: &'a SegmentMeta) -> impl Iterator<Item = Found> + 'a {
        let mut offset = 0;
        std::iter::from_fn(move || {
            if offset >= meta.mem_length {
                return None;
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
    pub(crate) fn copy_entry(&self, from: LogRef, len: usize, w: &mut SegmentWriter) -> LogRef {
        let at = w.ref_at(w.length);
        let pool = &self.pool;
        pool.for_each_piece(from, len, |piece| w.write(pool, piece));
        w.note_entry(len);
        at
    }

    /// Combined cleaning (L§4.2, §6.1, §6.4): picks segments by cost-benefit, copies
    /// their live entries sorted by age into new survivor segments, makes the
    /// survivors part of the log with a new digest, then frees the cleaned segments.
    pub fn clean_combined(&self, relocator: &dyn Relocator) -> Option<PassOutcome> {
        self.clean_combined_with_gain(relocator, 1)
    }

    /// Combined cleaning that runs only if it frees at least `min_gain_seglets` of
    /// memory (0: passes that only shrink the disk log or collect tombstones are
    /// allowed, but never one that uses more memory than it frees).
    pub fn clean_combined_with_gain(
        &self,
        relocator: &dyn Relocator,
        min_gain_seglets: usize,
    ) -> Option<PassOutcome> {
        // One pass at a time: segments leave the log only here, which keeps the
        // live-tombstone accounting exact (see `tombstones`).
        let _one_pass = self.combined_pass.lock();
        self.clean_combined_locked(relocator, min_gain_seglets)
    }

    /// `clean_combined_with_gain`, or `None` at once if another combined pass is
    /// running: a second cleaner thread compacts meanwhile instead of waiting (L§6).
    fn try_clean_combined(
        &self,
        relocator: &dyn Relocator,
        min_gain_seglets: usize,
    ) -> Option<PassOutcome> {
        let _one_pass = self.combined_pass.try_lock()?;
        self.clean_combined_locked(relocator, min_gain_seglets)
    }

    /// The body of a combined pass; the caller holds `combined_pass`.
    fn clean_combined_locked(
        &self,
        relocator: &dyn Relocator,
        min_gain_seglets: usize,
    ) -> Option<PassOutcome> {
        let _cpu = CpuCharge::start(&self.counters.cpu_ns);
        let head_id = self.head_id();
        let budget_seglets = balancer::combined_budget_seglets(
            self.pool.available(AllocClass::Cleaner),
            self.config
                .compaction
                .then(|| self.pool.reserves().cleaner_seglets),
        );
        let (mut victims, keep_estimate) =
            match self.pick_for_combined(head_id, budget_seglets, min_gain_seglets)? {
                Victims::Batch(victims, keep) => (victims, keep),
                // The victim that gains most does not fit the memory free for
                // survivors: clean it alone, reusing its own seglets (L§7).
                Victims::Alone(victim) => {
                    return self.clean_one_combined_locked(victim, relocator);
                }
            };
        // Take the survivors' seglets now, before the scan (module doc): the budget
        // above includes free seglets that writers may take while the victims are
        // read, and a pass that found out only after reading 32 segments would
        // waste all that work (measured: one such pass after every compaction at
        // 90%, docs/benchmarks.md, session 9). The estimate is an upper bound of
        // what the scan finds (counters only fall while segments are closed).
        let stash_estimate = self.survivor_seglets_estimate(keep_estimate);
        let mut stash = Vec::with_capacity(stash_estimate);
        if !self
            .pool
            .allocate(stash_estimate, AllocClass::Cleaner, &mut stash)
        {
            self.counters
                .passes_without_memory
                .fetch_add(1, Ordering::Relaxed);
            self.release_victims(&victims);
            return None;
        }
        // Every segment in the log, victims included: a tombstone naming a victim
        // dies with it, but which victims this pass keeps is known only after the
        // scan (the work list may fill first, below).
        let in_log = self.live_segment_ids(&[]);
        // A writer appends under the head lock but publishes the new reference in the
        // hash table afterwards. If the head rolled in between, a victim can hold an
        // object that the lock-free liveness check below would call dead. Every such
        // writer is pinned, so waiting for the pinned operations closes the window.
        self.wait_for_operations();

        // Live entries, oldest first: segregating old from young data makes later
        // cleaning cheaper (L§4.3). The work list holds 32 bytes per entry and stops
        // taking victims once it holds `combined_work_list_entries`, so memory outside
        // the log stays bounded (docs/design-notes.md "Memory outside the log");
        // victims not scanned go back.
        // Objects are checked in batches whose buckets are prefetched first.
        let max_entries = combined_work_list_entries(self.config.memory_bytes);
        let mut found: Vec<Candidate> = Vec::new();
        let mut tombstones_dropped = 0u64;
        let mut batch: Vec<(Candidate, ObjectView<'_>)> = Vec::with_capacity(RELOCATION_BATCH);
        let check_batch = |batch: &mut Vec<(Candidate, ObjectView<'_>)>,
                           found: &mut Vec<Candidate>| {
            for (c, view) in batch.drain(..) {
                if relocator.is_live(&view, c.hash_or_target) {
                    found.push(c);
                }
            }
        };
        let mut scanned = 0;
        let mut first_too_large = false;
        'victims: for (index, m) in victims.iter().enumerate() {
            // The list holds only whole victims: a victim whose entries would take
            // it past the bound is given back unscanned-for (its entries dropped).
            // If that is the first, the pass cleans it alone without a list (below),
            // so the list never holds more than the bound.
            check_batch(&mut batch, &mut found);
            let (found_before, dropped_before) = (found.len(), tombstones_dropped);
            // At most MAX_SEGMENTS_PER_COMBINED_PASS (32) victims.
            let victim = index as u16;
            for e in self.entries(m) {
                if found.len() + batch.len() >= max_entries {
                    batch.clear();
                    found.truncate(found_before);
                    tombstones_dropped = dropped_before;
                    first_too_large = index == 0;
                    break 'victims;
                }
                match (e.kind, e.layout) {
                    (EntryType::Object, ScannedLayout::Object(layout)) => {
                        let view = self.object_with_layout(e.at, layout);
                        let hash = relocator.hash(&view);
                        relocator.prefetch(hash);
                        let c = Candidate::new(view.birth(), &e, victim, hash);
                        batch.push((c, view));
                        if batch.len() == RELOCATION_BATCH {
                            check_batch(&mut batch, &mut found);
                        }
                    }
                    (EntryType::Tombstone, ScannedLayout::Tombstone(t))
                        if in_log.contains(&t.segment_id) =>
                    {
                        found.push(Candidate::new(m.created_at, &e, victim, t.segment_id));
                    }
                    (EntryType::Tombstone, _) => tombstones_dropped += 1,
                    _ => {}
                }
            }
            scanned = index + 1;
        }
        check_batch(&mut batch, &mut found);
        debug_assert!(found.len() <= max_entries, "the work list passed its bound");
        if first_too_large {
            // A victim with more live entries than the list holds (in L Table 1's
            // W6, a segment of 131,000 live tombstones: 9.4 MiB of list and moves
            // where the bound is 2 MiB) is cleaned alone, the way the bounded
            // one-segment pass cleans (L§7, `combined_incremental`): no list, its
            // own seglets reused as it goes. The stash goes back first; that pass
            // needs only what the cleaner's reserve holds.
            self.pool.release(&stash);
            let first = victims.swap_remove(0);
            self.release_victims(&victims);
            return self.clean_one_combined_locked(first, relocator);
        }
        if scanned < victims.len() {
            let rest = victims.split_off(scanned);
            self.release_victims(&rest);
        }
        let victim_ids: Vec<u64> = victims.iter().map(|m| m.id).collect();
        // Tombstones naming a segment that leaves with this pass die with it.
        found.retain(|c| {
            let dies = c.kind == EntryType::Tombstone && victim_ids.contains(&c.hash_or_target);
            tombstones_dropped += u64::from(dies);
            !dies
        });
        // Unstable: entries of equal birth may go in any order, and the in-place sort
        // moves less memory than a merge sort.
        found.sort_unstable_by_key(|c| c.birth);

        // Never run a pass that uses more memory than it frees (L§7,
        // `balancer::combined_pass_pays`). The stash is a safe upper bound for
        // allocation; the gain is judged on the survivors' size as packed
        // (`survivor_seglets_expected`, which the real packing never exceeds).
        let lens = || found.iter().map(|c| c.len as usize);
        let stash_seglets = self.survivor_seglets_for(lens());
        let expected_seglets = self.survivor_seglets_expected(lens());
        let victim_seglets: usize = victims.iter().map(|m| m.seglets.len()).sum();
        if !balancer::combined_pass_pays(expected_seglets, victim_seglets, min_gain_seglets) {
            self.counters
                .combined_passes_refused
                .fetch_add(1, Ordering::Relaxed);
            self.pool.release(&stash);
            self.release_victims(&victims);
            return None;
        }
        // Keep exactly what the survivors may need. The estimate covers it unless
        // the counters were behind the scan; then top the stash up, or give up.
        if stash.len() > stash_seglets {
            let spare = stash.split_off(stash_seglets);
            self.pool.release(&spare);
        } else if stash.len() < stash_seglets
            && !self
                .pool
                .allocate(stash_seglets - stash.len(), AllocClass::Cleaner, &mut stash)
        {
            self.counters
                .passes_without_memory
                .fetch_add(1, Ordering::Relaxed);
            self.pool.release(&stash);
            self.release_victims(&victims);
            return None;
        }

        let mut survivors: Vec<SegmentWriter> = Vec::new();
        let mut copied = 0u64;
        // Told to the lists a batch at a time: bounded whatever the victims hold.
        let mut moved_tombstones = PendingMoves::new();
        for (i, c) in found.iter().enumerate() {
            // Survivors are written in age order, so consecutive objects hit random
            // buckets: start loading a later one's bucket now.
            if let Some(ahead) = found.get(i + RELOCATION_BATCH) {
                if ahead.kind == EntryType::Object {
                    relocator.prefetch(ahead.hash_or_target);
                }
            }
            let len = c.len as usize;
            let need_new = survivors.last().is_none_or(|w| w.room() < len);
            if need_new {
                survivors.push(self.open_survivor());
            }
            let Some(w) = survivors.last_mut() else {
                unreachable!("a survivor was just opened")
            };
            self.attach_from_stash(w, len, &mut stash);
            match c.kind {
                EntryType::Object => {
                    // Parsed again here rather than kept from the scan: the work
                    // list stays at 32 bytes an entry, and the copy reads these
                    // bytes next anyway. The scan parsed it, so it parses.
                    let Ok(view) = self.object(c.at) else {
                        debug_assert!(false, "an object parsed by the scan did not parse again");
                        continue;
                    };
                    let (slot, from_slot) = (w.slot, victims[c.victim as usize].slot);
                    // Counted inside the copy, under the bucket lock: once the lock is
                    // released a writer may already count the copy dead.
                    let moved = relocator.relocate(&view, c.hash_or_target, &mut || {
                        let at = self.copy_entry(c.at, len, w);
                        self.survivor_bytes_added(slot, len, false, from_slot);
                        at
                    });
                    if moved {
                        copied += len as u64;
                    }
                }
                _ => {
                    self.copy_entry(c.at, len, w);
                    self.survivor_bytes_added(w.slot, len, true, victims[c.victim as usize].slot);
                    moved_tombstones.push(
                        &self.tombstone_targets,
                        Move {
                            target: c.hash_or_target,
                            from: victims[c.victim as usize].id,
                            to: w.id,
                            to_slot: w.slot,
                            bytes: len as u64,
                        },
                    );
                    copied += len as u64;
                    self.counters
                        .tombstones_moved
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        moved_tombstones.flush(&self.tombstone_targets);
        for w in &mut survivors {
            stash.extend(w.trim_unused());
        }
        self.pool.release(&stash);

        // Join the survivors to the log and drop the victims from it, then write a
        // digest that says so (L§6.4: survivors are replicated before the digest).
        let now = self.clock();
        let survivor_seglets: usize = survivors.iter().map(|w| w.seglets.len()).sum();
        let survivor_bytes: usize = survivors.iter().map(|w| w.length).sum();
        let victim_disk_bytes: usize = victims.iter().map(|m| m.disk_length).sum();
        let written: Vec<(u64, usize)> = survivors.iter().map(|w| (w.id, w.length)).collect();
        {
            // The victims stay in the log until the survivors are durable.
            let mut table = self.segments.lock();
            for w in &mut survivors {
                self.add_pending_survivor(&mut table, w, now);
            }
        }
        self.swap_in_survivors(&written, &victim_ids);

        let mut retired = 0;
        for m in victims {
            self.forget_slot_counts(m.slot);
            retired += m.seglets.len();
            self.retire(m.seglets, Some(m.slot));
        }
        let tombstone_bytes_expired = self.tombstone_targets_left(&victim_ids);
        let n = &self.counters;
        n.combined_passes.fetch_add(1, Ordering::Relaxed);
        n.segments_cleaned
            .fetch_add(victim_ids.len() as u64, Ordering::Relaxed);
        n.combined_bytes_copied.fetch_add(copied, Ordering::Relaxed);
        n.tombstones_dropped
            .fetch_add(tombstones_dropped, Ordering::Relaxed);
        Some(PassOutcome {
            segments: victim_ids.len(),
            bytes_copied: copied,
            seglets_retired: retired,
            survivors: written.len(),
            output_seglets: survivor_seglets,
            made_progress: retired > survivor_seglets + 1
                || tombstones_dropped > 0
                || tombstone_bytes_expired > 0
                || survivor_bytes < victim_disk_bytes,
        })
    }

    /// Chooses victims for combined cleaning by cost-benefit — counting, besides the
    /// disk space a victim frees, the live tombstones elsewhere that die with it
    /// (`balancer::combined_benefit`) — and marks them
    /// `Cleaning`; their live bytes fit in `budget_seglets` with room for survivor
    /// fragmentation.
    ///
    /// When the best victim's live data does not fit the budget, it alone is
    /// returned, for the one-segment pass that needs no budget (`Victims::Alone`),
    /// rather than a batch of worse victims that fit. The budget is free memory, and
    /// a segment's live data is a fixed size: 7 MiB of a 90%-live 8 MiB segment is
    /// 0.7% of 1 GiB but 5.5% of 128 MiB, more than a log at 90% ever has free. At
    /// 128 MiB the batch pass then only ever cleaned the few segments already nearly
    /// empty on disk; the on-disk log grew to 1.3× memory, live tombstones (which
    /// live while the segment of the object they kill is on disk, L§3) took 6% of
    /// memory, and compaction copied 70 bytes per byte written where 1 GiB copies
    /// 12 (docs/benchmarks.md, issue 17 session 28). `min_gain_seglets` > 0 (the
    /// pass must free memory) admits only a victim that frees a seglet alone.
    fn pick_for_combined(
        &self,
        head_id: u64,
        budget_seglets: usize,
        min_gain_seglets: usize,
    ) -> Option<Victims> {
        let now = self.clock();
        let mut table = self.segments.lock();
        // Lock order: segments, then the tombstone lists (a leaf).
        let targets = self.tombstone_targets.lock();
        let mut scored: Vec<(f64, u64, usize, usize)> = table
            .by_id
            .values()
            .filter(|m| {
                m.state == SegmentState::Closed
                    && m.replicated
                    && m.id != head_id
                    && m.disk_length > 0
            })
            .filter_map(|m| {
                let c = &self.slots[m.slot as usize];
                let keep = (c.live_bytes.load(Ordering::Relaxed)
                    + c.tombstone_bytes.load(Ordering::Relaxed))
                    as usize;
                let naming = targets.bytes_naming(m.id);
                let u = keep as f64 / m.disk_length.max(1) as f64;
                (u < MAX_UTILIZATION_TO_CLEAN || naming > 0).then(|| {
                    let age = now.saturating_sub(m.created_at);
                    let score = balancer::combined_benefit(m.disk_length, keep, naming, age);
                    (score, m.id, keep, m.seglets.len())
                })
            })
            .collect();
        drop(targets);
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        if let Some(&(_, id, keep, seglets)) = scored.first() {
            // A victim with less than a seglet of live data always fits a budget
            // that can hold anything; and one alone must gain what the caller asks.
            let alone = self.survivor_seglets_estimate(keep) > budget_seglets
                && keep >= SEGLET_BYTES
                && (min_gain_seglets == 0
                    || seglets >= keep.div_ceil(SEGLET_BYTES) + 1 + min_gain_seglets);
            if alone {
                let m = table.by_id.get_mut(&id)?;
                m.state = SegmentState::Cleaning;
                return Some(Victims::Alone(m.clone()));
            }
        }
        let mut chosen = Vec::new();
        let mut keep_total = 0usize;
        for (_, id, keep, _) in scored {
            if chosen.len() == MAX_SEGMENTS_PER_COMBINED_PASS {
                break;
            }
            if self.survivor_seglets_estimate(keep_total + keep) > budget_seglets {
                continue;
            }
            keep_total += keep;
            chosen.push(id);
        }
        if chosen.is_empty() {
            return None;
        }
        let victims = chosen
            .iter()
            .filter_map(|id| {
                table.by_id.get_mut(id).map(|m| {
                    m.state = SegmentState::Cleaning;
                    m.clone()
                })
            })
            .collect();
        Some(Victims::Batch(victims, keep_total))
    }

    /// Seglets the survivors of entries of these lengths (in copy order) occupy at
    /// most: the cleaner packs them in that order and starts a new survivor when the
    /// next entry does not fit, exactly as simulated here with a header at least as
    /// long as the real one. That packing never needs more survivors than this
    /// simulation (next-fit needs no more bins as capacity grows), and each survivor
    /// adds at most one partly filled seglet.
    fn survivor_seglets_for(&self, lens: impl Iterator<Item = usize>) -> usize {
        const HEADER_BOUND_BYTES: usize = 32;
        let limit = self.config.segment_bytes;
        let (mut survivors, mut bytes, mut current) = (0usize, 0usize, 0usize);
        for len in lens {
            if survivors == 0 || current + len > limit {
                survivors += 1;
                current = HEADER_BOUND_BYTES;
                bytes += HEADER_BOUND_BYTES;
            }
            current += len;
            bytes += len;
        }
        bytes.div_ceil(SEGLET_BYTES) + survivors + 1
    }

    /// Seglets the survivors of these entries are expected to occupy: their bytes
    /// and headers, rounded up to whole seglets once per survivor.
    fn survivor_seglets_expected(&self, lens: impl Iterator<Item = usize>) -> usize {
        const HEADER_BYTES: usize = 32;
        let limit = self.config.segment_bytes;
        let (mut seglets, mut current) = (0usize, 0usize);
        for len in lens {
            if current == 0 || current + len > limit {
                seglets += current.div_ceil(SEGLET_BYTES);
                current = HEADER_BYTES;
            }
            current += len;
        }
        seglets + current.div_ceil(SEGLET_BYTES)
    }

    /// A quick estimate of `survivor_seglets_for` before the victims are scanned (the
    /// exact figure decides after the scan).
    fn survivor_seglets_estimate(&self, live_bytes: usize) -> usize {
        let survivors = live_bytes.div_ceil(self.config.segment_bytes / 2) + 1;
        live_bytes.div_ceil(SEGLET_BYTES) + survivors + 1
    }

    /// Enters survivor `w` in the segment table as `Pending`, taking its seglets:
    /// the replica manager reads its bytes from here, but no digest names it until
    /// its replicas are closed (L§6.4). Its entries were durable in its victims
    /// already, so reads of relocated objects never wait.
    pub(crate) fn add_pending_survivor(
        &self,
        table: &mut SegmentTable,
        w: &mut SegmentWriter,
        now: u64,
    ) {
        self.slots[w.slot as usize]
            .read_durable
            .store(true, Ordering::Release);
        table.by_id.insert(
            w.id,
            SegmentMeta {
                id: w.id,
                slot: w.slot,
                seglets: std::mem::take(&mut w.seglets),
                mem_length: w.length,
                disk_length: w.length,
                created_at: now,
                max_entry_bytes: w.max_entry_bytes,
                state: SegmentState::Pending,
                replicated: self.config.replicas.durable_on_close(),
            },
        );
    }

    /// Replicates the pending survivors (id, length), waits until they are durable
    /// (L§6.4: before any digest names them), then joins them to the log and drops
    /// `victim_ids` from it with a new head's digest, and tells the sink which
    /// segments it may free.
    pub(crate) fn swap_in_survivors(&self, survivors: &[(u64, usize)], victim_ids: &[u64]) {
        let sink = &self.config.replicas;
        for &(id, length) in survivors {
            sink.opened(id, SegmentRole::Survivor);
            sink.replicate(id, 0, length);
            sink.close(id);
        }
        let survivor_ids: Vec<u64> = survivors.iter().map(|&(id, _)| id).collect();
        sink.sync_closed(&survivor_ids);
        {
            let mut table = self.segments.lock();
            for id in &survivor_ids {
                if let Some(m) = table.by_id.get_mut(id) {
                    m.state = SegmentState::Closed;
                }
            }
            for id in victim_ids {
                table.by_id.remove(id);
            }
        }
        self.roll_head_for_cleaner();
        sink.cleaned(&survivor_ids, victim_ids);
    }

    /// Removes a cleaned segment's remaining live and tombstone bytes (counted in
    /// its slot) from the totals.
    pub(crate) fn forget_slot_counts(&self, slot: u32) {
        let c = &self.slots[slot as usize];
        let live = c.live_bytes.swap(0, Ordering::Relaxed);
        let tomb = c.tombstone_bytes.swap(0, Ordering::Relaxed);
        // The totals drop first, then the second counts of what this victim's
        // survivors hold: a reader in between sees the totals briefly low rather
        // than the relocating sums above them.
        self.forget_counted(live, tomb);
        let moved_live = c.relocated_live_bytes.swap(0, Ordering::Relaxed);
        let moved_tomb = c.relocated_tombstone_bytes.swap(0, Ordering::Relaxed);
        self.relocation_done(moved_live, moved_tomb);
    }

    pub(crate) fn release_victims(&self, victims: &[SegmentMeta]) {
        let mut table = self.segments.lock();
        for v in victims {
            if let Some(m) = table.by_id.get_mut(&v.id) {
                m.state = SegmentState::Closed;
            }
        }
    }

    /// A new survivor segment (its header is written when its first seglet is
    /// attached).
    pub(crate) fn open_survivor(&self) -> SegmentWriter {
        let (id, slot) = {
            let mut table = self.segments.lock();
            // Every slot in use belongs to a segment holding at least one seglet that
            // is not free (survivors get theirs at once from the stash), and there
            // are more slots than seglets: a slot is always free here. Running out
            // would mean lost accounting, and continuing would free live data.
            let slot = table
                .free_slots
                .pop()
                .expect("segment slots exhausted: more segments than seglets");
            let id = table.next_id;
            table.next_id += 1;
            (id, slot)
        };
        let c = &self.slots[slot as usize];
        c.segment_id.store(id, Ordering::Release);
        c.live_bytes.store(0, Ordering::Relaxed);
        c.tombstone_bytes.store(0, Ordering::Relaxed);
        c.relocated_live_bytes.store(0, Ordering::Relaxed);
        c.relocated_tombstone_bytes.store(0, Ordering::Relaxed);
        SegmentWriter::new(id, slot, self.config.segment_bytes)
    }

    /// Attaches seglets from the pass's stash so `w` can take `extra` more bytes (and
    /// writes the segment header first if `w` is new).
    fn attach_from_stash(&self, w: &mut SegmentWriter, extra: usize, stash: &mut Vec<u32>) {
        let mut header = Vec::new();
        if w.length == 0 {
            crate::entry::encode_segment_header(self.config.master_id, w.id, &mut header);
        }
        let n = w.seglets_needed(header.len() + extra);
        assert!(n <= stash.len(), "combined cleaning stash too small");
        let taken = stash.split_off(stash.len() - n);
        let before = w.seglets.len();
        w.attach(&self.pool, &taken);
        self.map_seglets(w, before);
        if !header.is_empty() {
            w.write(&self.pool, &header);
            w.note_entry(header.len());
        }
    }
}

impl Log {
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
            self.scan(m, |e| {
                if matches!(e.layout, ScannedLayout::Tombstone(t) if in_log.contains(&t.segment_id))
                {
                    scanned += e.len as u64;
                }
            });
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
