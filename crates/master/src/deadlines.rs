//! The active expirer's index of deadlines: which key hashes have an object
//! due to expire, by time slot, so the expirer visits the objects that are due
//! and nothing else.
//!
//! Sampling the whole hash table (Redis's way, `expire_tick`) costs a cache
//! miss per object examined: with a million keys expiring over a minute, the
//! sweep that kept deletions within 2 s of their deadlines took a quarter of a
//! GET load's throughput on 2 vCPUs (docs/benchmarks.md, issue 24). Here every
//! write of an object with an expiry notes `(deadline slot, key hash)`; the
//! expirer takes the hashes of slots that have ended and deletes the expired
//! objects it finds under them, so its work is one hash-table lookup per
//! expiring write (design notes "Key expiry").
//!
//! **What an entry promises:** only that an object with this key hash was
//! written with a deadline in this slot. It may since have been overwritten,
//! deleted, given another deadline (noted again) or moved away: the expirer
//! checks the object itself, so stale entries cost a lookup and nothing else.
//! Duplicates are harmless for the same reason.
//!
//! **Bound:** at most `max_entries` entries (8 bytes each, in per-slot
//! vectors); a note beyond it is dropped and counted, and the store then falls
//! back on sampled sweeps in earnest ([`DeadlineIndex::is_complete`] false),
//! which note again every expiring object they pass. The index is complete
//! once two whole sweeps have passed since the last drop: the second began
//! after it, and noted every expiring object written before it (one written
//! since was noted by its write) — unless a note was dropped meanwhile, which
//! starts the count again. A sweep re-notes only objects due in a slot that
//! lost notes ([`DeadlineIndex::slot_lost_notes`]): re-noting every expiring
//! object would duplicate the notes still held, keep a full index full and
//! the sweep in earnest for good (measured: 16% of a GET load's throughput).
//! Re-notes may still duplicate the notes a slot kept (harmless, see above).
//! (Regression, session 41: the sweeps did not note, so the index called
//! itself complete with the dropped objects still unnoted, and the slow
//! safety-net sweep left them up to 5 s past their deadlines.)
//!
//! **Thread safety:** `Send + Sync`. Notes and takes lock one of
//! [`DEADLINE_SHARDS`] mutexes, chosen by key hash, so writers of different
//! keys rarely meet; no lock is taken on the read path.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

/// Width of one deadline slot in ms: an object is deleted at most one slot
/// (plus the expirer's interval) after its deadline.
pub const DEADLINE_SLOT_MS: u64 = 64;

/// Mutexes the index is split over (by key hash).
pub const DEADLINE_SHARDS: usize = 16;

/// One shard: key hashes by deadline slot.
type Slots = Mutex<BTreeMap<u64, Vec<u64>>>;

/// Deadlines of objects with an expiry, by slot (module doc).
pub struct DeadlineIndex {
    shards: Box<[Slots]>,
    entries: AtomicUsize,
    max_entries: usize,
    /// Notes dropped because the index was full (ever).
    dropped: AtomicU64,
    /// Whole sampled sweeps of the hash table finished (ever).
    sweeps: AtomicU64,
    /// The index is complete again once `sweeps` reaches this (two sweeps
    /// after a drop: the one under way may have passed the dropped key).
    complete_at_sweep: AtomicU64,
    /// The slots that lost notes since the index was last complete, so a
    /// sweep re-notes only objects due in them (re-noting every expiring
    /// object duplicates the notes still held, and a full index never
    /// becomes complete; module doc). Bounded by [`MAX_DROPPED_SLOTS`].
    dropped_slots: Mutex<DroppedSlots>,
}

/// Most slots [`DeadlineIndex`] remembers as having lost notes (about 70
/// minutes of deadlines, 512 KiB); beyond it every slot counts as one.
pub const MAX_DROPPED_SLOTS: usize = 65_536;

/// Which slots lost notes since the index was last complete.
#[derive(Default)]
struct DroppedSlots {
    slots: std::collections::BTreeSet<u64>,
    /// More slots lost notes than are remembered: treat every slot as one.
    all: bool,
}

impl DeadlineIndex {
    /// An empty index holding at most `max_entries` notes.
    pub fn new(max_entries: usize) -> Self {
        Self {
            shards: (0..DEADLINE_SHARDS)
                .map(|_| Mutex::new(BTreeMap::new()))
                .collect(),
            entries: AtomicUsize::new(0),
            max_entries,
            dropped: AtomicU64::new(0),
            sweeps: AtomicU64::new(0),
            complete_at_sweep: AtomicU64::new(0),
            dropped_slots: Mutex::default(),
        }
    }

    fn shard(&self, hash: u64) -> &Slots {
        // The top bits: the hash table's bucket uses the high bits too, but a
        // shard is only a lock, so sharing them costs nothing.
        &self.shards[(hash >> 60) as usize % DEADLINE_SHARDS]
    }

    /// Notes that an object with key hash `hash` expires at `expires_at_ms`.
    pub fn note(&self, hash: u64, expires_at_ms: u64) {
        if self.entries.fetch_add(1, Ordering::Relaxed) >= self.max_entries {
            self.entries.fetch_sub(1, Ordering::Relaxed);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            // Under the dropped-slots lock, which `sweep_finished` takes to
            // clear the record: a drop is never cleared by a completion it
            // postponed.
            let mut dropped = self.dropped_slots.lock();
            if dropped.slots.len() < MAX_DROPPED_SLOTS {
                dropped.slots.insert(expires_at_ms / DEADLINE_SLOT_MS);
            } else {
                dropped.all = true;
            }
            let after = self.sweeps.load(Ordering::Relaxed) + 2;
            self.complete_at_sweep.fetch_max(after, Ordering::Relaxed);
            return;
        }
        self.shard(hash)
            .lock()
            .entry(expires_at_ms / DEADLINE_SLOT_MS)
            .or_default()
            .push(hash);
    }

    /// Moves into `out` at most `max` hashes of slots that ended by `now_ms`
    /// (every deadline in them has passed), oldest slots first; returns how
    /// many it moved.
    pub fn take_due(&self, now_ms: u64, max: usize, out: &mut Vec<u64>) -> usize {
        let start = out.len();
        // Slot s holds deadlines in [s·W, (s+1)·W): it has ended once
        // (s+1)·W <= now, i.e. s < now / W.
        let first_open_slot = now_ms / DEADLINE_SLOT_MS;
        for shard in self.shards.iter() {
            let mut slots = shard.lock();
            while out.len() - start < max {
                let Some(mut entry) = slots.first_entry() else {
                    break;
                };
                if *entry.key() >= first_open_slot {
                    break;
                }
                let room = max - (out.len() - start);
                let hashes = entry.get_mut();
                if hashes.len() <= room {
                    out.append(hashes);
                    entry.remove();
                } else {
                    out.extend(hashes.drain(hashes.len() - room..));
                }
            }
        }
        let taken = out.len() - start;
        self.entries.fetch_sub(taken, Ordering::Relaxed);
        taken
    }

    /// Notes held now.
    pub fn len(&self) -> usize {
        self.entries.load(Ordering::Relaxed)
    }

    /// Whether nothing is noted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Notes dropped because the index was full, ever.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Records that a sampled sweep of the whole hash table finished.
    pub fn sweep_finished(&self) {
        let mut dropped = self.dropped_slots.lock();
        self.sweeps.fetch_add(1, Ordering::Relaxed);
        if self.is_complete() {
            dropped.slots.clear();
            dropped.all = false;
        }
    }

    /// Whether a note with deadline `expires_at_ms` may have been dropped
    /// since the index was last complete: what a sweep re-notes.
    pub fn slot_lost_notes(&self, expires_at_ms: u64) -> bool {
        let dropped = self.dropped_slots.lock();
        dropped.all || dropped.slots.contains(&(expires_at_ms / DEADLINE_SLOT_MS))
    }

    /// Whether every live object with an expiry is noted here: false from a
    /// dropped note until two whole sweeps later (the sweeps note what they
    /// pass while this is false; module documentation).
    pub fn is_complete(&self) -> bool {
        self.sweeps.load(Ordering::Relaxed) >= self.complete_at_sweep.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_due_returns_only_ended_slots_oldest_first() {
        let d = DeadlineIndex::new(100);
        d.note(1, 10 * DEADLINE_SLOT_MS + 5);
        d.note(2, 3 * DEADLINE_SLOT_MS);
        d.note(3, 20 * DEADLINE_SLOT_MS);
        let mut out = Vec::new();
        // At 11·W slot 10 has ended (its deadlines are all < 11·W).
        assert_eq!(d.take_due(11 * DEADLINE_SLOT_MS, 10, &mut out), 2);
        assert_eq!(out, vec![2, 1]);
        assert_eq!(d.len(), 1);
        out.clear();
        assert_eq!(d.take_due(20 * DEADLINE_SLOT_MS, 10, &mut out), 0);
        assert_eq!(d.take_due(21 * DEADLINE_SLOT_MS, 10, &mut out), 1);
        assert_eq!(out, vec![3]);
        assert!(d.is_empty());
    }

    #[test]
    fn take_due_stops_at_its_bound_and_keeps_the_rest() {
        let d = DeadlineIndex::new(1_000);
        for h in 0..100u64 {
            d.note(h, 0);
        }
        let mut out = Vec::new();
        assert_eq!(d.take_due(DEADLINE_SLOT_MS, 30, &mut out), 30);
        assert_eq!(d.len(), 70);
        assert_eq!(d.take_due(DEADLINE_SLOT_MS, 1_000, &mut out), 70);
        out.sort_unstable();
        assert_eq!(out, (0..100).collect::<Vec<_>>());
    }

    /// Only the slots that lost notes are re-noted, and the record is
    /// forgotten once the index is complete again.
    #[test]
    fn slot_lost_notes_names_the_slots_of_dropped_notes_until_complete() {
        let d = DeadlineIndex::new(1);
        let (kept, lost) = (0, 5 * DEADLINE_SLOT_MS);
        d.note(1, kept);
        d.note(2, lost);
        assert!(!d.slot_lost_notes(kept));
        assert!(d.slot_lost_notes(lost));
        assert!(d.slot_lost_notes(lost + DEADLINE_SLOT_MS - 1), "same slot");
        assert!(!d.slot_lost_notes(lost + DEADLINE_SLOT_MS));
        d.sweep_finished();
        assert!(d.slot_lost_notes(lost));
        d.sweep_finished();
        assert!(d.is_complete());
        assert!(!d.slot_lost_notes(lost));
    }

    #[test]
    fn note_beyond_the_bound_is_dropped_and_incomplete_for_two_sweeps() {
        let d = DeadlineIndex::new(2);
        d.note(1, 0);
        d.note(2, 0);
        assert!(d.is_complete());
        d.note(3, 0);
        assert_eq!(d.len(), 2);
        assert_eq!(d.dropped(), 1);
        assert!(!d.is_complete());
        d.sweep_finished();
        assert!(
            !d.is_complete(),
            "the sweep under way may have passed key 3"
        );
        d.sweep_finished();
        assert!(d.is_complete());
    }
}
