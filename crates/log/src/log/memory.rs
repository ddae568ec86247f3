//! The log's accounting of its memory: live and tombstone bytes per segment and in
//! total, seglets retired through epochs and freed once no operation can see them
//! (L§6.3), and the statistics snapshot.

use std::sync::atomic::{AtomicU64, Ordering};

use super::Log;
use crate::LogRef;
use crate::SEGLET_BYTES;

/// Bytes a pass relocated out of one victim: counted in its survivors' slots as
/// they were copied, and in the log's totals only when the victim leaves
/// (`Log::victim_left`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RelocatedSums {
    pub live: u64,
    pub tombstone: u64,
}

impl RelocatedSums {
    /// Notes an entry of `len` bytes relocated.
    pub(crate) fn add(&mut self, len: usize, tombstone: bool) {
        let len = len as u64;
        if tombstone {
            self.tombstone += len;
        } else {
            self.live += len;
        }
    }
}

impl Log {
    /// Records that the object entry at `r` (of `len` bytes) is no longer live: it was
    /// overwritten, deleted or its tablet dropped.
    pub fn object_died(&self, r: LogRef, len: usize) {
        let slot = self.slot_of(r);
        let c = &self.slots[slot as usize].live_bytes;
        let before = c.fetch_sub(len as u64, Ordering::Relaxed);
        debug_assert!(
            before >= len as u64,
            "live bytes of slot {slot} went negative"
        );
        self.live_object_bytes
            .fetch_sub(len as u64, Ordering::Relaxed);
    }

    /// Segments `gone` have left the log (combined cleaning removed them): every
    /// tombstone naming one of them is dead now, wherever it is, so its holder's count
    /// of live tombstone bytes drops at once (L§3). Holders among `gone` are skipped:
    /// their counters were already forgotten. Returns the bytes that died.
    pub(crate) fn tombstone_targets_left(&self, gone: &[u64]) -> u64 {
        let mut expired = 0u64;
        let mut targets = self.tombstone_targets.lock();
        for &target in gone {
            let holders = targets.expire(target);
            for &h in &holders {
                if gone.contains(&h.segment_id) {
                    continue;
                }
                let c = &self.slots[h.slot as usize];
                // Only a corrupt, unparsable tombstone in a cleaned segment could leave
                // its holder listed after the holder left the log; its slot may belong
                // to another segment by now, whose counts must not change.
                let holder_in_log = c.segment_id.load(Ordering::Relaxed) == h.segment_id;
                debug_assert!(holder_in_log, "tombstone holder left the log while listed");
                if !holder_in_log {
                    continue;
                }
                let before = c.tombstone_bytes.fetch_sub(h.bytes, Ordering::Relaxed);
                debug_assert!(
                    before >= h.bytes,
                    "tombstone bytes of a segment went negative"
                );
                expired += h.bytes;
            }
            targets.recycle(holders);
        }
        drop(targets);
        self.tombstone_bytes.fetch_sub(expired, Ordering::Relaxed);
        expired
    }

    /// A live entry of `len` bytes was copied into the survivor in `slot`: counted
    /// in the slot at once (under the bucket lock for an object: once the lock is
    /// released a writer may count the copy dead, `object_died`), and in the log's
    /// totals only when its victim leaves (`victim_left`). Until then the victim's
    /// count, part of the totals, holds it: so the totals count every entry once
    /// while a pass copies and replicates (L§5.2; regression: issue 17, up to 4% of
    /// a 128 MiB log counted twice), and the copy costs one atomic add.
    pub(crate) fn survivor_entry_counted(&self, slot: u32, len: usize, tombstone: bool) {
        let c = &self.slots[slot as usize];
        let counter = if tombstone {
            &c.tombstone_bytes
        } else {
            &c.live_bytes
        };
        counter.fetch_add(len as u64, Ordering::Relaxed);
    }

    /// A victim left the log: its remaining counts (`live_bytes`,
    /// `tombstone_bytes`, which include everything relocated out of it) leave the
    /// totals and what its survivors hold of it (`moved`) joins them. One
    /// subtraction each: `moved` never exceeds what the victim still counts, since
    /// a relocated entry dies in its survivor's count, not the victim's.
    pub(crate) fn victim_left(&self, live_bytes: u64, tombstone_bytes: u64, moved: RelocatedSums) {
        debug_assert!(moved.live <= live_bytes && moved.tombstone <= tombstone_bytes);
        self.live_object_bytes
            .fetch_sub(live_bytes.saturating_sub(moved.live), Ordering::Relaxed);
        self.tombstone_bytes.fetch_sub(
            tombstone_bytes.saturating_sub(moved.tombstone),
            Ordering::Relaxed,
        );
    }

    /// Hands seglets (and a slot) back once no operation can still see them.
    pub(crate) fn retire(&self, seglets: Vec<u32>, slot: Option<u32>) {
        let epoch = self.epochs.advance();
        self.retired.lock().push((epoch, seglets, slot));
    }

    /// Hands seglets retired earlier, at `epoch` (a value of `Epochs::advance`),
    /// to the retired list.
    pub(crate) fn retire_at(&self, epoch: u64, seglets: Vec<u32>) {
        self.retired.lock().push((epoch, seglets, None));
    }

    pub(super) fn retire_locked(&self, seglets: Vec<u32>, slot: Option<u32>) {
        // Same as `retire`; `segments` is held but `retired` is a leaf lock.
        self.retire(seglets, slot)
    }

    /// Frees retired seglets whose epoch has passed. Returns how many were freed.
    pub fn reclaim(&self) -> usize {
        let mut retired = self.retired.lock();
        if retired.is_empty() {
            return 0;
        }
        let oldest = self.epochs.oldest_pinned();
        let mut freed = 0;
        let mut slots = Vec::new();
        retired.retain_mut(|(epoch, seglets, slot)| {
            if *epoch > oldest {
                return true;
            }
            self.pool.release(seglets);
            freed += seglets.len();
            if let Some(s) = slot {
                slots.push(*s);
            }
            false
        });
        drop(retired);
        if !slots.is_empty() {
            let mut table = self.segments.lock();
            for s in slots {
                self.slots[s as usize]
                    .segment_id
                    .store(0, Ordering::Relaxed);
                table.free_slots.push(s);
            }
        }
        self.counters
            .seglets_freed
            .fetch_add(freed as u64, Ordering::Relaxed);
        freed
    }

    /// Waits until every operation that was pinned when this was called has finished.
    /// Must not be called while holding a pin.
    pub fn wait_for_operations(&self) {
        let epoch = self.epochs.advance();
        while !self.epochs.safe(epoch) {
            std::thread::yield_now();
        }
    }

    /// Seglets waiting for their epoch to pass.
    pub fn retired_seglets(&self) -> usize {
        self.retired.lock().iter().map(|(_, s, _)| s.len()).sum()
    }

    /// Live object bytes, each entry counted once (see `survivor_entry_counted`).
    pub(crate) fn live_object_bytes(&self) -> u64 {
        self.live_object_bytes.load(Ordering::Relaxed)
    }

    /// Tombstone bytes, each entry counted once.
    pub(crate) fn tombstone_bytes_total(&self) -> u64 {
        self.tombstone_bytes.load(Ordering::Relaxed)
    }
}

/// A snapshot of the log's statistics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogStats {
    pub memory_bytes: usize,
    pub seglets_total: usize,
    pub seglets_free: usize,
    /// Bytes of live object entries.
    pub live_object_bytes: u64,
    /// Bytes of tombstone entries not yet cleaned away.
    pub tombstone_bytes: u64,
    /// Bytes of memory in seglets that hold neither live objects nor tombstones.
    pub dead_bytes: u64,
    pub segments: usize,
    /// Bytes of the log on backups (every segment at its pre-compaction length).
    pub disk_log_bytes: u64,
    /// Bytes ever appended to the head.
    pub appended_bytes: u64,
    pub compactions: u64,
    pub combined_passes: u64,
    pub segments_cleaned: u64,
    pub compaction_bytes_copied: u64,
    pub combined_bytes_copied: u64,
    pub seglets_freed: u64,
    pub tombstones_dropped: u64,
    pub cleaner_cpu_ns: u64,
    pub emergency_heads: u64,
    /// Wall time cleaning passes spent waiting for their survivors to be durable
    /// on the backups (L§6.4) before the victims could leave the log.
    pub survivor_sync_ns: u64,
    /// Wall time cleaner threads slept while the balancer wanted cleaning, because
    /// no pass they could start made progress (another thread held the combined
    /// pass, or nothing was worth cleaning), and how many such sleeps.
    pub cleaner_idle_ns: u64,
    pub cleaner_idle_waits: u64,
    /// Cleaning passes that found work but could not take the seglets for their
    /// output (the cleaner then waits for memory to come back).
    pub passes_without_memory: u64,
    /// Combined passes that read their victims and gave them back: the survivors
    /// would not have freed enough memory.
    pub combined_passes_refused: u64,
    /// Combined passes that cleaned one segment in bounded memory because no other
    /// pass could make progress (`cleaner::incremental`; also in `combined_passes`).
    pub incremental_combined_passes: u64,
    /// Live tombstones combined cleaning copied into survivors (their targets were
    /// still in the log).
    pub tombstones_moved: u64,
}

impl Log {
    /// A cleaner thread slept `ns` while cleaning was wanted but no pass it could
    /// start made progress (counted in [`LogStats::cleaner_idle_ns`]).
    pub fn note_cleaner_idle(&self, ns: u64) {
        self.counters
            .cleaner_idle_ns
            .fetch_add(ns, Ordering::Relaxed);
        self.counters
            .cleaner_idle_waits
            .fetch_add(1, Ordering::Relaxed);
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> LogStats {
        let table = self.segments.lock();
        let disk_log_bytes = table
            .by_id
            .values()
            .map(|m| m.disk_length as u64)
            .sum::<u64>()
            + self.head.try_lock().map_or(0, |h| h.writer.length as u64);
        let segments = table.by_id.len();
        drop(table);
        let seglets_total = self.pool.seglet_count() - 1;
        let seglets_free = self.pool.free_seglets();
        let (live, tomb) = (self.live_object_bytes(), self.tombstone_bytes_total());
        let used = ((seglets_total - seglets_free) * SEGLET_BYTES) as u64;
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LogStats {
            memory_bytes: self.pool.bytes(),
            seglets_total,
            seglets_free,
            live_object_bytes: live,
            tombstone_bytes: tomb,
            dead_bytes: used.saturating_sub(live + tomb),
            segments,
            disk_log_bytes,
            appended_bytes: get(&self.appended_bytes),
            compactions: get(&c.compactions),
            combined_passes: get(&c.combined_passes),
            segments_cleaned: get(&c.segments_cleaned),
            compaction_bytes_copied: get(&c.compaction_bytes_copied),
            combined_bytes_copied: get(&c.combined_bytes_copied),
            seglets_freed: get(&c.seglets_freed),
            tombstones_dropped: get(&c.tombstones_dropped),
            passes_without_memory: get(&c.passes_without_memory),
            combined_passes_refused: get(&c.combined_passes_refused),
            incremental_combined_passes: get(&c.incremental_combined_passes),
            tombstones_moved: get(&c.tombstones_moved),
            cleaner_cpu_ns: get(&c.cpu_ns),
            emergency_heads: get(&c.emergency_heads),
            survivor_sync_ns: get(&c.survivor_sync_ns),
            cleaner_idle_ns: get(&c.cleaner_idle_ns),
            cleaner_idle_waits: get(&c.cleaner_idle_waits),
        }
    }
}
