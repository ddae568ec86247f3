//! Which tombstones are still live, counted without scanning (L§3, L§5.2).
//!
//! A tombstone lives while the segment of the object it kills is part of the log; once
//! combined cleaning removes that segment, every tombstone naming it is dead, wherever
//! it is. The cleaner must know how many tombstone bytes each segment still holds live:
//! compaction picks segments by the memory it can free, and the balancer forces
//! combined cleaning when live tombstones pile up (T/(1−L) ≥ 40%). If dead tombstones
//! stayed counted until their holder happened to be scanned, a store that deleted most
//! of its objects would see its segments as full of live data and stop cleaning.
//!
//! So the log keeps, for every target segment, the live tombstone bytes naming it,
//! broken down by the segment that holds them. When a target leaves the log, its list
//! says exactly which holders' counters to lower.
//!
//! Invariants:
//! - The bytes listed for a holder, summed over all targets, equal that holder's
//!   `tombstone_bytes` counter (every change to one is made together with the other).
//! - Every listed holder is in the log: a holder leaves only as a victim of combined
//!   cleaning, which moves each of its live tombstones to a survivor (`moved`) and
//!   drops the rest, whose targets have left (and whose entries left with them).
//!
//! Thread-safety: one mutex, a leaf in the log's lock order. Writers add to it under the
//! head lock; combined cleaning (one pass at a time) moves and expires entries. A pass
//! tells the lists about the tombstones it copies in batches of at most
//! [`PENDING_MOVES`] ([`PendingMoves`]) while it copies, so its survivors are listed
//! as holders a little before they join the log; nothing reads the lists by holder in
//! between (expiry is the next combined pass's, and passes run one at a time).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use parking_lot::Mutex;

/// Hashes segment ids (small, dense integers) with one multiplication: this map is
/// touched on every overwrite and delete, and SipHash's DoS resistance buys nothing
/// for ids the log itself hands out.
#[derive(Default)]
pub(crate) struct SegmentIdHasher(u64);

impl Hasher for SegmentIdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The live tombstone bytes one segment holds for one target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Holder {
    pub segment_id: u64,
    pub slot: u32,
    pub bytes: u64,
}

/// Holder lists kept ready at start-up and recycled when their target leaves, so the
/// write path does not allocate (an overwrite's tombstone may name a segment that has
/// no list yet).
const SPARE_HOLDER_LISTS: usize = 64;
/// Room for holders in each spare list before it has to grow.
const HOLDERS_PER_SPARE_LIST: usize = 8;

/// Live tombstone bytes by target segment id, then by holder.
#[derive(Debug, Default)]
pub(crate) struct TombstoneTargets {
    by_target: HashMap<u64, Vec<Holder>, BuildHasherDefault<SegmentIdHasher>>,
    spare: Vec<Vec<Holder>>,
}

impl TombstoneTargets {
    /// Room for `segments` targets (every segment of the log at once), sized at
    /// start-up like the rest of the log's memory.
    pub fn with_capacity(segments: usize) -> Self {
        Self {
            by_target: HashMap::with_capacity_and_hasher(segments, Default::default()),
            spare: (0..SPARE_HOLDER_LISTS)
                .map(|_| Vec::with_capacity(HOLDERS_PER_SPARE_LIST))
                .collect(),
        }
    }

    /// Records `bytes` of tombstones for `target` written into `holder`. Tombstones are
    /// appended to the head, so the holder is usually the list's last element.
    pub fn add(&mut self, target: u64, holder_id: u64, holder_slot: u32, bytes: u64) {
        let spare = &mut self.spare;
        let holders = self
            .by_target
            .entry(target)
            .or_insert_with(|| spare.pop().unwrap_or_default());
        match holders.iter_mut().rev().find(|h| h.segment_id == holder_id) {
            Some(h) => h.bytes += bytes,
            None => holders.push(Holder {
                segment_id: holder_id,
                slot: holder_slot,
                bytes,
            }),
        }
    }

    /// Moves `bytes` of tombstones for `target` from holder `from` to holder `to` (a
    /// combined-cleaning survivor). Returns false if `from` had fewer bytes listed,
    /// which would mean broken accounting (nothing is changed then).
    pub fn moved(&mut self, target: u64, from: u64, to: u64, to_slot: u32, bytes: u64) -> bool {
        let Some(holders) = self.by_target.get_mut(&target) else {
            return false;
        };
        let Some(i) = holders.iter().position(|h| h.segment_id == from) else {
            return false;
        };
        if holders[i].bytes < bytes {
            return false;
        }
        holders[i].bytes -= bytes;
        if holders[i].bytes == 0 {
            holders.swap_remove(i);
        }
        self.add(target, to, to_slot, bytes);
        true
    }

    /// `target` left the log: every tombstone naming it is dead. Returns the holders
    /// whose counters must drop; hand the list back with `recycle`.
    pub fn expire(&mut self, target: u64) -> Vec<Holder> {
        self.by_target.remove(&target).unwrap_or_default()
    }

    /// Keeps an expired list (emptied) for the next new target.
    pub fn recycle(&mut self, mut list: Vec<Holder>) {
        if self.spare.len() < SPARE_HOLDER_LISTS && list.capacity() > 0 {
            list.clear();
            self.spare.push(list);
        }
    }

    /// Live tombstone bytes naming `target`, wherever they are: what dies when it
    /// leaves the log.
    pub fn bytes_naming(&self, target: u64) -> u64 {
        self.by_target
            .get(&target)
            .map_or(0, |holders| holders.iter().map(|h| h.bytes).sum())
    }

    /// Live tombstone bytes listed for `holder` (for tests and assertions; walks
    /// everything).
    pub fn bytes_held_by(&self, holder: u64) -> u64 {
        self.by_target
            .values()
            .flatten()
            .filter(|h| h.segment_id == holder)
            .map(|h| h.bytes)
            .sum()
    }

    /// Target segments with live tombstones.
    #[cfg(test)]
    pub fn targets(&self) -> usize {
        self.by_target.len()
    }
}

/// Tombstone moves a cleaning pass holds before it tells the lists (one lock each
/// time): 40 KiB, whatever the number of tombstones the pass copies. Before, a pass
/// kept every move until it was done — 40 bytes per tombstone, 5.2 MiB for one
/// victim of 131,000 tombstones in L Table 1's W6 (issue 17, docs/benchmarks.md
/// session 27).
pub(crate) const PENDING_MOVES: usize = 1024;

/// One copied tombstone's move: `bytes` for `target`, from holder `from` to the
/// survivor `to` in slot `to_slot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Move {
    pub target: u64,
    pub from: u64,
    pub to: u64,
    pub to_slot: u32,
    pub bytes: u64,
}

/// A pass's tombstone moves not yet applied to the lists, at most
/// [`PENDING_MOVES`]. Moves add up (`moved` of a and then b equals `moved` of
/// a + b) and the listed bytes of a victim only fall while its pass runs, so
/// applying them in batches as the pass copies ends where applying them all at
/// the end did.
pub(crate) struct PendingMoves {
    moves: Vec<Move>,
}

impl PendingMoves {
    /// An empty buffer with room for [`PENDING_MOVES`] moves (allocated once).
    pub fn new() -> Self {
        Self {
            moves: Vec::with_capacity(PENDING_MOVES),
        }
    }

    /// Records a move, applying the buffered ones first when it is full.
    pub fn push(&mut self, targets: &Mutex<TombstoneTargets>, m: Move) {
        if self.moves.len() == PENDING_MOVES {
            self.flush(targets);
        }
        self.moves.push(m);
    }

    /// Applies every buffered move to the lists, under one lock.
    pub fn flush(&mut self, targets: &Mutex<TombstoneTargets>) {
        if self.moves.is_empty() {
            return;
        }
        let mut targets = targets.lock();
        for m in self.moves.drain(..) {
            let listed = targets.moved(m.target, m.from, m.to, m.to_slot, m.bytes);
            debug_assert!(
                listed,
                "tombstone for {} in {} was not counted live",
                m.target, m.from
            );
        }
    }

    /// Moves buffered now (for tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.moves.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_accumulates_per_holder() {
        let mut t = TombstoneTargets::default();
        t.add(1, 10, 0, 40);
        t.add(1, 10, 0, 30);
        t.add(1, 11, 1, 5);
        t.add(2, 11, 1, 7);
        assert_eq!(t.bytes_held_by(10), 70);
        assert_eq!(t.bytes_held_by(11), 12);
        assert_eq!(t.bytes_naming(1), 75);
        assert_eq!(t.bytes_naming(2), 7);
        assert_eq!(t.bytes_naming(3), 0);
        assert_eq!(t.targets(), 2);
    }

    #[test]
    fn moved_transfers_bytes_and_refuses_more_than_listed() {
        let mut t = TombstoneTargets::default();
        t.add(1, 10, 0, 40);
        assert!(t.moved(1, 10, 20, 5, 25));
        assert_eq!(t.bytes_held_by(10), 15);
        assert_eq!(t.bytes_held_by(20), 25);
        assert!(!t.moved(1, 10, 20, 5, 16));
        assert!(!t.moved(3, 10, 20, 5, 1));
        assert!(t.moved(1, 10, 20, 5, 15));
        assert_eq!(t.bytes_held_by(10), 0);
        assert_eq!(t.bytes_held_by(20), 40);
    }

    /// The buffer never holds more than `PENDING_MOVES`, and the lists end where
    /// applying every move at once would leave them.
    #[test]
    fn pending_moves_apply_in_batches_of_a_fixed_size() {
        let n = 3 * PENDING_MOVES as u64 + 7;
        let targets = Mutex::new(TombstoneTargets::default());
        for target in 0..4 {
            targets.lock().add(target, 10, 0, n * 3);
        }
        let mut pending = PendingMoves::new();
        for i in 0..n {
            pending.push(
                &targets,
                Move {
                    target: i % 4,
                    from: 10,
                    to: 20,
                    to_slot: 1,
                    bytes: 3,
                },
            );
            assert!(pending.len() <= PENDING_MOVES);
            assert!(pending.moves.capacity() <= PENDING_MOVES, "it never grows");
        }
        assert!(pending.len() > 0, "the last moves wait for the flush");
        pending.flush(&targets);
        assert_eq!(pending.len(), 0);
        let t = targets.lock();
        assert_eq!(t.bytes_held_by(20), n * 3);
        assert_eq!(t.bytes_held_by(10), 4 * n * 3 - n * 3);
    }

    #[test]
    fn expire_returns_every_holder_once() {
        let mut t = TombstoneTargets::default();
        t.add(1, 10, 0, 40);
        t.add(1, 11, 1, 3);
        let mut gone = t.expire(1);
        gone.sort_by_key(|h| h.segment_id);
        assert_eq!(
            gone,
            vec![
                Holder {
                    segment_id: 10,
                    slot: 0,
                    bytes: 40
                },
                Holder {
                    segment_id: 11,
                    slot: 1,
                    bytes: 3
                }
            ]
        );
        assert!(t.expire(1).is_empty());
        assert_eq!(t.targets(), 0);
    }
}
