//! Moving the survivors of a batch combined pass (L§4.2, §6.1, §6.4): the seglets
//! its survivors may take, taken before anything is read; the scan of its victims
//! into a bounded work list; and the copy of that list, oldest first, into new
//! survivor segments. (Compaction and the one-segment pass copy `in_place`.)

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use super::work_list::{combined_work_list_entries, Candidate, WorkList};
use super::{Cleaner, Relocator, RELOCATION_BATCH};
use crate::balancer;
use crate::entry::{EntryType, ScannedLayout};
use crate::log::memory::RelocatedSums;
use crate::log::read::ObjectView;
use crate::log::SegmentMeta;
use crate::pool::AllocClass;
use crate::segment::SegmentWriter;
use crate::tombstones::{Move, PendingMoves};

/// What scanning a batch pass's victims gave.
pub(super) enum Scanned {
    /// The work list of the whole victims scanned (the rest were given back).
    List(WorkList),
    /// The first victim alone has more live entries than the list may hold; the
    /// others were given back.
    FirstTooLarge(SegmentMeta),
}

/// A survivor a pass wrote: already `Pending` in the segment table, with its
/// replication under way (`Cleaner::publish_survivor`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Written {
    pub id: u64,
    pub length: usize,
    pub seglets: usize,
}

/// The survivors a pass wrote, and the bytes it copied into them.
pub(super) struct Survivors {
    pub written: Vec<Written>,
    pub copied: u64,
    /// What was relocated out of each victim (in `WorkList::victims` order), added
    /// to the log's totals when that victim's counts are forgotten.
    pub relocated: Vec<RelocatedSums>,
}

impl Cleaner<'_> {
    /// Takes the seglets the survivors of victims holding `keep_estimate` live
    /// bytes may need, before the scan: the budget includes free seglets that
    /// writers may take while the victims are read, and a pass that found out only
    /// after reading 32 segments would waste all that work (measured: one such pass
    /// after every compaction at 90%, docs/benchmarks.md, session 9). The estimate
    /// is an upper bound of what the scan finds (counters only fall while segments
    /// are closed). `None`, with the victims given back, if the pool refuses.
    pub(super) fn take_stash(
        &self,
        victims: &[SegmentMeta],
        keep_estimate: usize,
    ) -> Option<Vec<u32>> {
        let stash_estimate = self.survivor_seglets_estimate(keep_estimate);
        let mut stash = Vec::with_capacity(stash_estimate);
        if !self
            .log
            .pool
            .allocate(stash_estimate, AllocClass::Cleaner, &mut stash)
        {
            self.no_memory(victims);
            return None;
        }
        Some(stash)
    }

    /// Counts a pass that could not take its seglets and gives its victims back.
    pub(super) fn no_memory(&self, victims: &[SegmentMeta]) {
        self.log
            .counters
            .passes_without_memory
            .fetch_add(1, Ordering::Relaxed);
        self.release_victims(victims);
    }

    /// Reads the victims' live entries into a work list. Every segment in the log
    /// counts in `in_log`, victims included: a tombstone naming a victim dies with
    /// it, but which victims this pass keeps is known only after the scan
    /// (`WorkList::prepare` drops those).
    ///
    /// The list holds 32 bytes per entry and stops taking victims once it holds
    /// `combined_work_list_entries`, so memory outside the log stays bounded
    /// (docs/design-notes.md "Memory outside the log"); it holds only whole
    /// victims, and the victims not scanned go back. Objects are checked in batches
    /// whose buckets are prefetched first.
    pub(super) fn scan_victims(
        &self,
        mut victims: Vec<SegmentMeta>,
        in_log: &HashSet<u64>,
        relocator: &dyn Relocator,
    ) -> Scanned {
        let max_entries = combined_work_list_entries(self.log.config.memory_bytes);
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
            // If that is the first, the pass cleans it alone without a list, so the
            // list never holds more than the bound.
            check_batch(&mut batch, &mut found);
            let (found_before, dropped_before) = (found.len(), tombstones_dropped);
            // At most MAX_SEGMENTS_PER_COMBINED_PASS (32) victims.
            let victim = index as u16;
            for e in self.log.entries(m) {
                if found.len() + batch.len() >= max_entries {
                    batch.clear();
                    found.truncate(found_before);
                    tombstones_dropped = dropped_before;
                    first_too_large = index == 0;
                    break 'victims;
                }
                match (e.kind, e.layout) {
                    (EntryType::Object, ScannedLayout::Object(layout)) => {
                        let view = self.log.object_with_layout(e.at, layout);
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
                    // A completion record lives while its owner needs it (RIFL
                    // §4.1); the lease id stands in for a hash.
                    (EntryType::RpcResult, ScannedLayout::RpcResult { lease_id, seq })
                        if relocator.record_is_live(lease_id, seq, e.at) =>
                    {
                        found.push(Candidate::new(m.created_at, &e, victim, lease_id));
                    }
                    // An undecided prepared op lives; a decided mark lives while
                    // its prepared op's segment is in the log (SOSP'15 §6.2, L§3).
                    (EntryType::TxRecord, ScannedLayout::TxRecord(r))
                        if r.decided_segment.map_or_else(
                            || relocator.tx_record_is_live(&r, e.at),
                            |segment| in_log.contains(&segment),
                        ) =>
                    {
                        found.push(Candidate::new(m.created_at, &e, victim, r.lease_id));
                    }
                    _ => {}
                }
            }
            scanned = index + 1;
        }
        check_batch(&mut batch, &mut found);
        debug_assert!(found.len() <= max_entries, "the work list passed its bound");
        if first_too_large {
            let first = victims.swap_remove(0);
            self.release_victims(&victims);
            return Scanned::FirstTooLarge(first);
        }
        if scanned < victims.len() {
            let rest = victims.split_off(scanned);
            self.release_victims(&rest);
        }
        Scanned::List(WorkList {
            victims,
            entries: found,
            tombstones_dropped,
        })
    }

    /// Fits the stash to what the survivors of `list` may need, if the pass pays.
    /// Never runs a pass that uses more memory than it frees (L§7,
    /// `balancer::combined_pass_pays`): the gain is judged on the survivors' size
    /// as packed (`survivor_seglets_expected`, which the real packing never
    /// exceeds), the stash keeps a safe upper bound for allocation
    /// (`survivor_seglets_for`). The estimate it was taken with covers that unless
    /// the counters were behind the scan; then it is topped up. On `false` the
    /// stash and the victims have been given back.
    pub(super) fn fit_stash(
        &self,
        list: &WorkList,
        stash: &mut Vec<u32>,
        min_gain_seglets: usize,
    ) -> bool {
        let pool = &self.log.pool;
        let stash_seglets = self.survivor_seglets_for(list.lens());
        let expected_seglets = self.survivor_seglets_expected(list.lens());
        let victim_seglets: usize = list.victims.iter().map(|m| m.seglets.len()).sum();
        if !balancer::combined_pass_pays(expected_seglets, victim_seglets, min_gain_seglets) {
            self.log
                .counters
                .combined_passes_refused
                .fetch_add(1, Ordering::Relaxed);
            pool.release(stash);
            self.release_victims(&list.victims);
            return false;
        }
        if stash.len() > stash_seglets {
            let spare = stash.split_off(stash_seglets);
            pool.release(&spare);
        } else if stash.len() < stash_seglets
            && !pool.allocate(stash_seglets - stash.len(), AllocClass::Cleaner, stash)
        {
            pool.release(stash);
            self.no_memory(&list.victims);
            return false;
        }
        true
    }

    /// Copies the work list, in its order, into new survivor segments whose
    /// seglets come from `stash`; unused seglets go back to the pool. Objects are
    /// relocated under their bucket locks (L§6.2), tombstones move in the lists.
    pub(super) fn write_survivors(
        &self,
        list: &WorkList,
        mut stash: Vec<u32>,
        relocator: &dyn Relocator,
    ) -> Survivors {
        let found = &list.entries;
        // Only the survivor being filled; each full one is published (and its
        // replication started) as soon as the next one opens.
        let mut current: Option<SegmentWriter> = None;
        let mut written: Vec<Written> = Vec::new();
        let mut copied = 0u64;
        // Told to the lists a batch at a time: bounded whatever the victims hold.
        let mut moved_tombstones = PendingMoves::new();
        // Added to the log's totals when each victim leaves (`forget_slot_counts`).
        let mut sums = vec![RelocatedSums::default(); list.victims.len()];
        for (i, c) in found.iter().enumerate() {
            // Survivors are written in age order, so consecutive objects hit random
            // buckets: start loading a later one's bucket now.
            if let Some(ahead) = found.get(i + RELOCATION_BATCH) {
                if ahead.kind == EntryType::Object {
                    relocator.prefetch(ahead.hash_or_target);
                }
            }
            let len = c.len as usize;
            if current.as_ref().is_none_or(|w| w.room() < len) {
                if let Some(full) = current.take() {
                    written.push(self.publish_survivor(full, &mut stash));
                }
            }
            let w = current.get_or_insert_with(|| self.open_survivor());
            self.attach_from_stash(w, len, &mut stash);
            let (bytes, tombstone) = match c.kind {
                EntryType::Object => (self.copy_object(c, w, relocator), false),
                EntryType::RpcResult => (self.copy_record(c, w, relocator), false),
                EntryType::TxRecord => (self.copy_tx_record(c, w, relocator), false),
                _ => (
                    self.copy_tombstone(c, w, &list.victims, &mut moved_tombstones),
                    true,
                ),
            };
            sums[c.victim as usize].add(bytes as usize, tombstone);
            copied += bytes;
        }
        moved_tombstones.flush(&self.log.tombstone_targets);
        if let Some(last) = current.take() {
            written.push(self.publish_survivor(last, &mut stash));
        }
        self.log.pool.release(&stash);
        Survivors {
            written,
            copied,
            relocated: sums,
        }
    }

    /// Relocates the object `c` into `w` if the hash table still refers to it;
    /// returns the bytes copied.
    fn copy_object(&self, c: &Candidate, w: &mut SegmentWriter, relocator: &dyn Relocator) -> u64 {
        // Parsed again here rather than kept from the scan: the work list stays at
        // 32 bytes an entry, and the copy reads these bytes next anyway. The scan
        // parsed it, so it parses.
        let Ok(view) = self.log.object(c.at) else {
            debug_assert!(false, "an object parsed by the scan did not parse again");
            return 0;
        };
        let len = c.len as usize;
        let slot = w.slot;
        // Counted in the survivor inside the copy, under the bucket lock: once the
        // lock is released a writer may already count the copy dead.
        let moved = relocator.relocate(&view, c.hash_or_target, &mut || {
            let at = self.log.copy_entry(c.at, len, w);
            self.log.survivor_entry_counted(slot, len, false);
            at
        });
        if moved {
            len as u64
        } else {
            0
        }
    }

    /// Relocates the completion record `c` into `w` if its owner still needs it;
    /// returns the bytes copied.
    fn copy_record(&self, c: &Candidate, w: &mut SegmentWriter, relocator: &dyn Relocator) -> u64 {
        // Parsed again, as objects are: the scan parsed it, so it parses.
        let Ok((_, ScannedLayout::RpcResult { lease_id, seq })) = self.log.scan_entry(c.at) else {
            debug_assert!(false, "a record parsed by the scan did not parse again");
            return 0;
        };
        let len = c.len as usize;
        let slot = w.slot;
        let moved = relocator.relocate_record(lease_id, seq, c.at, &mut || {
            let at = self.log.copy_entry(c.at, len, w);
            self.log.survivor_entry_counted(slot, len, false);
            at
        });
        if moved {
            len as u64
        } else {
            0
        }
    }

    /// Relocates the transaction record `c` into `w`: a prepared op if it is
    /// still undecided, a decided mark always (the scan kept it only while its
    /// prepared op's segment is in the log); returns the bytes copied.
    fn copy_tx_record(
        &self,
        c: &Candidate,
        w: &mut SegmentWriter,
        relocator: &dyn Relocator,
    ) -> u64 {
        // Parsed again, as objects are: the scan parsed it, so it parses.
        let Ok((_, ScannedLayout::TxRecord(r))) = self.log.scan_entry(c.at) else {
            debug_assert!(false, "a tx record parsed by the scan did not parse again");
            return 0;
        };
        let len = c.len as usize;
        let slot = w.slot;
        let mut copy = || {
            let at = self.log.copy_entry(c.at, len, w);
            self.log.survivor_entry_counted(slot, len, false);
            at
        };
        let moved = match r.decided_segment {
            None => relocator.relocate_tx_record(&r, c.at, &mut copy),
            Some(_) => {
                copy();
                true
            }
        };
        if moved {
            len as u64
        } else {
            0
        }
    }

    /// Copies the live tombstone `c` into `w` and records its move in the lists;
    /// returns the bytes copied.
    fn copy_tombstone(
        &self,
        c: &Candidate,
        w: &mut SegmentWriter,
        victims: &[SegmentMeta],
        moved_tombstones: &mut PendingMoves,
    ) -> u64 {
        let len = c.len as usize;
        self.log.copy_entry(c.at, len, w);
        self.log.survivor_entry_counted(w.slot, len, true);
        moved_tombstones.push(
            &self.log.tombstone_targets,
            Move {
                target: c.hash_or_target,
                from: victims[c.victim as usize].id,
                to: w.id,
                to_slot: w.slot,
                bytes: len as u64,
            },
        );
        self.log
            .counters
            .tombstones_moved
            .fetch_add(1, Ordering::Relaxed);
        len as u64
    }

    /// A new survivor segment (its header is written when its first seglet is
    /// attached).
    pub(super) fn open_survivor(&self) -> SegmentWriter {
        let (id, slot) = {
            let mut table = self.log.segments.lock();
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
        let c = &self.log.slots[slot as usize];
        c.segment_id.store(id, Ordering::Release);
        c.live_bytes.store(0, Ordering::Relaxed);
        c.tombstone_bytes.store(0, Ordering::Relaxed);
        // Objects relocated here are read as soon as the hash table names them,
        // before any digest names this segment; their bytes were durable in their
        // victims already, so reads never wait for this segment's replicas. (A
        // reused slot keeps its last segment's flag otherwise: a head's `false`
        // would make such a read wait for a point that is not replicated until
        // the pass publishes the survivor.)
        c.read_durable.store(true, Ordering::Release);
        SegmentWriter::new(id, slot, self.log.config.segment_bytes)
    }

    /// A full survivor (or the pass's last): its unused seglets go back to the
    /// stash, it enters the segment table as `Pending`, and its replication starts
    /// at once, so the backups receive it while the pass copies the next one
    /// (RAMCloud's cleaner replicates each survivor as it fills, L§6.4). Before
    /// issue 17's session 34 every survivor was sent only after the whole copy, and
    /// at 1 GiB the cleaner then waited 2.2–2.4 s of every 10 s for survivors sent
    /// one after another.
    pub(super) fn publish_survivor(&self, mut w: SegmentWriter, stash: &mut Vec<u32>) -> Written {
        stash.extend(w.trim_unused());
        let done = Written {
            id: w.id,
            length: w.length,
            seglets: w.seglets.len(),
        };
        {
            let now = self.log.clock();
            let mut table = self.log.segments.lock();
            self.add_pending_survivor(&mut table, &mut w, now);
        }
        self.send_survivor(done.id, done.length);
        done
    }

    /// Attaches seglets from the pass's stash so `w` can take `extra` more bytes (and
    /// writes the segment header first if `w` is new).
    fn attach_from_stash(&self, w: &mut SegmentWriter, extra: usize, stash: &mut Vec<u32>) {
        let mut header = Vec::new();
        if w.length == 0 {
            crate::entry::encode_segment_header(self.log.config.master_id, w.id, &mut header);
        }
        let n = w.seglets_needed(header.len() + extra);
        assert!(n <= stash.len(), "combined cleaning stash too small");
        let taken = stash.split_off(stash.len() - n);
        let before = w.seglets.len();
        w.attach(&self.log.pool, &taken);
        self.log.map_seglets(w, before);
        if !header.is_empty() {
            w.write(&self.log.pool, &header);
            w.note_entry(header.len());
        }
    }
}
