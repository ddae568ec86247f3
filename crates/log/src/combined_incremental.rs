//! Combined cleaning of one segment in bounded memory (L§4.2, L§7): the cleaner
//! that cannot get stuck.
//!
//! A batch combined pass (`cleaner`) takes every seglet its survivors may need
//! before it reads its victims, so a victim whose live data is larger than the free
//! memory cannot be cleaned at all. That is exactly the state a full log reaches:
//! compaction has squeezed every segment down to its live objects and tombstones,
//! the tombstones name segments that are still in the on-disk log, and only
//! cleaning those segments on disk — a combined pass — can kill them. With 8 MiB
//! segments and the pool down to the cleaner's reserve (23 seglets, about 1.4 MiB)
//! no victim fits, no compaction gains a seglet, and the log stopped for good at
//! 64–128 MiB of memory (issue 17: free seglets stuck at 35–45, "cleaning needed:
//! Combined", every manual pass `None`).
//!
//! This pass cleans one segment the way compaction does (`compaction`), reusing the
//! victim's own seglets for its survivor as it goes, so it needs only
//! [`crate::compaction::upfront_seglets_for`] its longest entry (plus one seglet
//! for the survivor's header) beyond its victim: always within the cleaner's
//! reserve. What differs from compaction:
//! - the copy is a new segment with its own header and id (a survivor), counted in
//!   its own counters, and the tombstones moved into it are moved in the lists;
//! - tombstones naming the victim itself stay behind (they die with it);
//! - once the copy is done the victim is `Leaving` — in the log until the
//!   survivor's replicas are durable and a new digest drops it (L§6.4), but no
//!   longer in memory, so re-replication treats it as gone (`copy_for_replica`).
//!
//! On its own it runs only when no other pass could make progress (`Log::clean`):
//! it cleans one segment where a batch pass cleans up to 32 sorted by age, and it
//! writes a whole segment to backups where a compaction writes nothing. A batch
//! pass also hands it a first victim with more live entries than the batch's work
//! list may hold (`cleaner::combined_work_list_entries`), so that list stays within
//! its bound (docs/design-notes.md "Memory outside the log"), and the victim that
//! gains most when its live data does not fit the memory free for the batch's
//! survivors — at 128 MiB and 90% utilisation almost every victim worth cleaning
//! (docs/design-notes.md "Cleaning always makes progress").

use std::sync::atomic::Ordering;

use crate::balancer;
use crate::cleaner::MAX_UTILIZATION_TO_CLEAN;
use crate::cleaner::{CpuCharge, PassOutcome, Relocator};
use crate::compaction::SurvivorCopy;
use crate::compaction::{largest_possible_entry, upfront_seglets_for, Pass, Recycler};
use crate::log::{Log, SegmentMeta, SegmentState};
use crate::pool::AllocClass;
use crate::SEGLET_BYTES;

impl Log {
    /// Combined cleaning of the one segment that gains the most, in bounded memory
    /// (module doc). With `forced` (tombstones or the disk log force combined
    /// cleaning, `balancer::needs_combined`) a segment that only shrinks the disk
    /// log qualifies too; otherwise the victim must free memory or kill tombstones.
    /// `None` if no segment qualifies, another combined pass is running, or the pool
    /// cannot give the up-front seglets.
    pub fn clean_combined_incremental(
        &self,
        relocator: &dyn Relocator,
        forced: bool,
    ) -> Option<PassOutcome> {
        let _one_pass = self.combined_pass.try_lock()?;
        let _cpu = CpuCharge::start(&self.counters.cpu_ns);
        let victim = self.pick_one_for_combined(forced)?;
        self.clean_one_combined_locked(victim, relocator)
    }

    /// The body of a one-segment combined pass over `victim`, a closed segment
    /// taken out of the cleaners' reach (`Cleaning` or `Compacting`; it is marked
    /// `Compacting` here: its chain is rewritten seglet by seglet). The caller holds
    /// `combined_pass` and charges the CPU time. A batch pass hands over a victim
    /// too large for its work list this way (`clean_combined_locked`). `None` if
    /// the pool cannot give the up-front seglets (the victim is given back).
    pub(crate) fn clean_one_combined_locked(
        &self,
        victim: SegmentMeta,
        relocator: &dyn Relocator,
    ) -> Option<PassOutcome> {
        if let Some(m) = self.segments.lock().by_id.get_mut(&victim.id) {
            m.state = SegmentState::Compacting;
        }
        let largest_entry = match victim.max_entry_bytes {
            0 => largest_possible_entry(self.config.segment_bytes),
            n => n,
        };
        // The survivor's header is at most a few bytes longer than the victim's
        // (a larger id), hence one seglet more than a compaction takes.
        let upfront = (victim.mem_length.div_ceil(SEGLET_BYTES) + 1)
            .min(upfront_seglets_for(largest_entry) + 1);
        let mut got = Vec::with_capacity(upfront);
        if !self.pool.allocate(upfront, AllocClass::Cleaner, &mut got) {
            self.counters
                .passes_without_memory
                .fetch_add(1, Ordering::Relaxed);
            self.release_victims(std::slice::from_ref(&victim));
            return None;
        }
        let mut w = self.open_survivor();
        w.attach(&self.pool, &got);
        self.map_seglets(&w, 0);
        let mut header = Vec::new();
        crate::entry::encode_segment_header(self.config.master_id, w.id, &mut header);
        w.write(&self.pool, &header);
        w.note_entry(header.len());
        // The append-then-publish window: see `clean_combined_locked`.
        self.wait_for_operations();

        // From here on the pass cannot fail: it gives the victim's seglets away as
        // it goes.
        let mut pass = Pass {
            log: self,
            source: &victim,
            w,
            recycler: Recycler::default(),
            retired_upto: 0,
            seglets_retired: 0,
            copied: 0,
            survivor: Some(SurvivorCopy::new()),
        };
        self.compact_entries(&mut pass, relocator);
        let Pass {
            mut w,
            recycler,
            retired_upto,
            copied,
            survivor,
            ..
        } = pass;
        // `survivor` was set above and `compact_entries` never clears it.
        let mut copy = survivor.unwrap_or_else(SurvivorCopy::new);
        copy.moved_tombstones.flush(&self.tombstone_targets);
        let spare = w.trim_unused();
        if !spare.is_empty() {
            self.pool.release(&spare);
        }
        let (survivor_id, survivor_seglets, survivor_bytes) = (w.id, w.seglets.len(), w.length);
        let now = self.clock();
        {
            // As in a batch pass; the victim stays in the log until the survivor is
            // durable, but its memory is the survivor's now.
            let mut table = self.segments.lock();
            self.add_pending_survivor(&mut table, &mut w, now);
            if let Some(m) = table.by_id.get_mut(&victim.id) {
                m.state = SegmentState::Leaving;
                m.seglets.clear();
                m.mem_length = 0;
            }
        }
        self.swap_in_survivors(&[(survivor_id, survivor_bytes)], &[victim.id]);
        self.forget_slot_counts(victim.slot);
        // Whatever the scan did not reach (nothing, unless an entry failed to
        // parse) leaves with the victim's slot.
        let rest = victim.seglets[retired_upto..].to_vec();
        recycler.finish(self);
        self.retire(rest, Some(victim.slot));
        let tombstone_bytes_expired = self.tombstone_targets_left(&[victim.id]);
        let n = &self.counters;
        n.combined_passes.fetch_add(1, Ordering::Relaxed);
        n.incremental_combined_passes
            .fetch_add(1, Ordering::Relaxed);
        n.segments_cleaned.fetch_add(1, Ordering::Relaxed);
        n.combined_bytes_copied.fetch_add(copied, Ordering::Relaxed);
        n.tombstones_dropped
            .fetch_add(copy.tombstones_dropped, Ordering::Relaxed);
        let victim_seglets = victim.seglets.len();
        Some(PassOutcome {
            segments: 1,
            bytes_copied: copied,
            seglets_retired: victim_seglets,
            survivors: 1,
            output_seglets: survivor_seglets,
            made_progress: victim_seglets > survivor_seglets + 1
                || copy.tombstones_dropped > 0
                || tombstone_bytes_expired > 0
                || survivor_bytes < victim.disk_length,
        })
    }

    /// The closed segment a one-segment combined pass gains most from, marked
    /// `Compacting` (its chain is rewritten seglet by seglet, as in a compaction).
    /// Qualifies: a segment that frees at least one seglet beyond the head the pass
    /// opens, or that live tombstones elsewhere name (they die with it), or — when
    /// `forced` — one whose on-disk bytes are not almost all live. Ranked as batch
    /// victims are (`balancer::combined_benefit`).
    fn pick_one_for_combined(&self, forced: bool) -> Option<SegmentMeta> {
        let head_id = self.head_id();
        let now = self.clock();
        let mut table = self.segments.lock();
        // Lock order: segments, then the tombstone lists (a leaf).
        let targets = self.tombstone_targets.lock();
        let best = table
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
                let frees_memory = m.seglets.len() >= keep.div_ceil(SEGLET_BYTES) + 2;
                let shrinks_disk =
                    forced && (keep as f64) < MAX_UTILIZATION_TO_CLEAN * m.disk_length as f64;
                (frees_memory || naming > 0 || shrinks_disk).then(|| {
                    let age = now.saturating_sub(m.created_at);
                    let score = balancer::combined_benefit(m.disk_length, keep, naming, age);
                    (score, m.id)
                })
            })
            .max_by(|a, b| a.0.total_cmp(&b.0))?;
        drop(targets);
        let m = table.by_id.get_mut(&best.1)?;
        m.state = SegmentState::Compacting;
        Some(m.clone())
    }
}
