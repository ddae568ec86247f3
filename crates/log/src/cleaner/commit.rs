//! Committing a pass (L§4.1, L§6.3, L§6.4): publishing its output — a compacted
//! segment's new chain, or survivor segments that join the log with a new digest
//! once their replicas are durable — then retiring the victims' memory through
//! epochs and counting what the pass did.

use std::sync::atomic::Ordering;

use super::copy::Survivors;
use super::in_place::{Pass, SurvivorCopy};
use super::work_list::WorkList;
use super::{Cleaner, PassOutcome};
use crate::log::memory::RelocatedSums;
use crate::log::{SegmentMeta, SegmentState, SegmentTable};
use crate::replica::SegmentRole;
use crate::segment::SegmentWriter;

impl Cleaner<'_> {
    /// Joins a batch pass's survivors to the log and drops its victims from it,
    /// with a digest that says so (L§6.4: survivors are replicated before the
    /// digest), then retires the victims' memory.
    pub(super) fn commit_combined(&self, list: WorkList, survivors: Survivors) -> PassOutcome {
        let log = self.log;
        let Survivors {
            written,
            copied,
            relocated,
        } = survivors;
        let victim_ids = list.victim_ids();
        let survivor_seglets: usize = written.iter().map(|w| w.seglets).sum();
        let survivor_bytes: usize = written.iter().map(|w| w.length).sum();
        let victim_disk_bytes: usize = list.victims.iter().map(|m| m.disk_length).sum();
        let survivor_ids: Vec<u64> = written.iter().map(|w| w.id).collect();
        {
            // The survivors are `Pending` and being replicated already
            // (`publish_survivor`). The victims stay in the log until the
            // survivors are durable (the digest names them), but no longer in
            // memory: `Leaving`, as after a one-segment pass, so re-replication
            // treats them as gone.
            let mut table = log.segments.lock();
            for m in &list.victims {
                if let Some(t) = table.by_id.get_mut(&m.id) {
                    t.state = SegmentState::Leaving;
                    t.seglets.clear();
                    t.mem_length = 0;
                }
            }
        }
        // Their memory goes back before the wait for the survivors' replicas
        // (about 12 ms per 8 MiB survivor at 700 MB/s), which used to hold every
        // victim's seglets while writers and the other cleaner thread waited for
        // memory (issue 17, session 33). Readers are covered by the retirement
        // epoch (L§6.3); each slot stays, with its counters, until the victim
        // leaves the table.
        let mut retired = 0;
        let mut victims = list.victims;
        for m in &mut victims {
            retired += m.seglets.len();
            log.retire(std::mem::take(&mut m.seglets), None);
        }
        self.swap_in_survivors(&survivor_ids, &victim_ids);
        for (m, moved) in victims.into_iter().zip(relocated) {
            self.forget_slot_counts(m.slot, moved);
            log.retire(Vec::new(), Some(m.slot));
        }
        let tombstone_bytes_expired = log.tombstone_targets_left(&victim_ids);
        let tombstones_dropped = list.tombstones_dropped;
        let n = &log.counters;
        n.combined_passes.fetch_add(1, Ordering::Relaxed);
        n.segments_cleaned
            .fetch_add(victim_ids.len() as u64, Ordering::Relaxed);
        n.combined_bytes_copied.fetch_add(copied, Ordering::Relaxed);
        n.tombstones_dropped
            .fetch_add(tombstones_dropped, Ordering::Relaxed);
        PassOutcome {
            segments: victim_ids.len(),
            bytes_copied: copied,
            seglets_retired: retired,
            survivors: survivor_ids.len(),
            output_seglets: survivor_seglets,
            made_progress: retired > survivor_seglets + 1
                || tombstones_dropped > 0
                || tombstone_bytes_expired > 0
                || survivor_bytes < victim_disk_bytes,
        }
    }

    /// Publishes a compacted segment's new chain under its old id (its replicas
    /// are untouched, L§4.1) and retires what is left of the old one.
    pub(super) fn commit_compaction(&self, meta: &SegmentMeta, pass: Pass<'_>) -> PassOutcome {
        let log = self.log;
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
            log.pool.release(&spare);
        }
        let new_seglets = w.seglets.len();
        {
            let mut table = log.segments.lock();
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
        recycler.finish(log);
        log.retire(rest, None);
        let n = &log.counters;
        n.compactions.fetch_add(1, Ordering::Relaxed);
        n.compaction_bytes_copied
            .fetch_add(copied, Ordering::Relaxed);
        PassOutcome {
            segments: 1,
            bytes_copied: copied,
            seglets_retired,
            survivors: 0,
            output_seglets: new_seglets,
            made_progress: seglets_retired > new_seglets,
        }
    }

    /// Joins a one-segment pass's survivor to the log in its victim's place, as a
    /// batch pass does (L§6.4), and retires what is left of the victim.
    pub(super) fn commit_incremental(&self, victim: &SegmentMeta, pass: Pass<'_>) -> PassOutcome {
        let log = self.log;
        let Pass {
            mut w,
            recycler,
            retired_upto,
            copied,
            survivor,
            ..
        } = pass;
        // `survivor` was set by the pass and `copy_in_place` never clears it.
        let mut copy = survivor.unwrap_or_else(SurvivorCopy::new);
        copy.moved_tombstones.flush(&log.tombstone_targets);
        let spare = w.trim_unused();
        if !spare.is_empty() {
            log.pool.release(&spare);
        }
        let (survivor_id, survivor_seglets, survivor_bytes) = (w.id, w.seglets.len(), w.length);
        let now = log.clock();
        {
            // As in a batch pass; the victim stays in the log until the survivor is
            // durable, but its memory is the survivor's now.
            let mut table = log.segments.lock();
            self.add_pending_survivor(&mut table, &mut w, now);
            if let Some(m) = table.by_id.get_mut(&victim.id) {
                m.state = SegmentState::Leaving;
                m.seglets.clear();
                m.mem_length = 0;
            }
        }
        // The source seglets the copy did not reuse are the pass's gain. Nothing
        // needs them any more — the victim is `Leaving`, so re-replication no longer
        // reads it, and readers are covered by their retirement epochs (L§6.3) — so
        // they go back now, not after the survivor's replicas are durable: that
        // wait (about 12 ms per 8 MiB at 700 MB/s) used to hold them while writers
        // stalled for memory (issue 17, session 33).
        recycler.finish(log);
        self.send_survivor(survivor_id, survivor_bytes);
        self.swap_in_survivors(&[survivor_id], &[victim.id]);
        self.forget_slot_counts(victim.slot, copy.sums);
        // Whatever the scan did not reach (nothing, unless an entry failed to
        // parse) leaves with the victim's slot, whose counters stay until the
        // victim leaves the table.
        let rest = victim.seglets[retired_upto..].to_vec();
        log.retire(rest, Some(victim.slot));
        let tombstone_bytes_expired = log.tombstone_targets_left(&[victim.id]);
        let n = &log.counters;
        n.combined_passes.fetch_add(1, Ordering::Relaxed);
        n.incremental_combined_passes
            .fetch_add(1, Ordering::Relaxed);
        n.segments_cleaned.fetch_add(1, Ordering::Relaxed);
        n.combined_bytes_copied.fetch_add(copied, Ordering::Relaxed);
        n.tombstones_dropped
            .fetch_add(copy.tombstones_dropped, Ordering::Relaxed);
        let victim_seglets = victim.seglets.len();
        PassOutcome {
            segments: 1,
            bytes_copied: copied,
            seglets_retired: victim_seglets,
            survivors: 1,
            output_seglets: survivor_seglets,
            made_progress: victim_seglets > survivor_seglets + 1
                || copy.tombstones_dropped > 0
                || tombstone_bytes_expired > 0
                || survivor_bytes < victim.disk_length,
        }
    }

    /// Enters survivor `w` in the segment table as `Pending`, taking its seglets:
    /// the replica manager reads its bytes from here, but no digest names it until
    /// its replicas are closed (L§6.4). Its entries were durable in its victims
    /// already, so reads of relocated objects never wait.
    pub(super) fn add_pending_survivor(
        &self,
        table: &mut SegmentTable,
        w: &mut SegmentWriter,
        now: u64,
    ) {
        self.log.slots[w.slot as usize]
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
                replicated: self.log.config.replicas.durable_on_close(),
            },
        );
    }

    /// Hands the pending survivor `id` (complete, `length` bytes) to the replica
    /// sink: opened, replicated whole and closed at once. The sink may send it in
    /// the background; `swap_in_survivors` waits for it.
    pub(super) fn send_survivor(&self, id: u64, length: usize) {
        let sink = &self.log.config.replicas;
        sink.opened(id, SegmentRole::Survivor);
        sink.replicate(id, 0, length);
        sink.close(id);
    }

    /// Waits until the pending survivors, already sent (`send_survivor`), are
    /// durable (L§6.4: before any digest names them), then joins them to the log
    /// and drops `victim_ids` from it with a new head's digest, and tells the sink
    /// which segments it may free.
    pub(super) fn swap_in_survivors(&self, survivor_ids: &[u64], victim_ids: &[u64]) {
        let sink = &self.log.config.replicas;
        let clock = &self.log.config.clock;
        let began = clock.now();
        sink.sync_closed(survivor_ids);
        let waited_ns = u64::try_from(clock.now().saturating_duration_since(began).as_nanos())
            .unwrap_or(u64::MAX);
        self.log
            .counters
            .survivor_sync_ns
            .fetch_add(waited_ns, std::sync::atomic::Ordering::Relaxed);
        {
            let mut table = self.log.segments.lock();
            for id in survivor_ids {
                if let Some(m) = table.by_id.get_mut(id) {
                    m.state = SegmentState::Closed;
                }
            }
            for id in victim_ids {
                table.by_id.remove(id);
            }
        }
        self.log.roll_head_for_cleaner();
        sink.cleaned(survivor_ids, victim_ids);
    }

    /// A victim leaves the log: its remaining live and tombstone bytes (counted in
    /// its slot) leave the totals, and what the pass relocated out of it
    /// (`moved`, counted in its survivors only) joins them, in one step each.
    pub(super) fn forget_slot_counts(&self, slot: u32, moved: RelocatedSums) {
        let c = &self.log.slots[slot as usize];
        let live = c.live_bytes.swap(0, Ordering::Relaxed);
        let tomb = c.tombstone_bytes.swap(0, Ordering::Relaxed);
        self.log.victim_left(live, tomb, moved);
    }
}
