//! The migration target's record of which keys of a migrating-in tablet have
//! arrived (K§2.3; design notes "Migration (Rocksteady)"): a pure data structure,
//! no store, no I/O, so its rules are tested on their own (`tests` below and the
//! model test in `tests/migration_arrivals.rs`).
//!
//! A key is *settled* once the target's copy of it is authoritative: its hash is
//! below its partition's pull cursor (or the partition is done), or a
//! PriorityPull answered for it, or a client wrote or deleted it on the target.
//! A settled key never becomes unsettled. Pulled records are applied only for
//! keys that are not settled, so a key deleted on the target is never
//! resurrected by an older pulled copy.
//!
//! A key's *completion records* (RIFL §4.3) have arrived once its hash is below
//! its partition's cursor or a PriorityPull answered for it: the source sends a
//! range's records with its objects. A client's write settles the key but brings
//! no record, so an exactly-once RPC waits for the records, not for settling
//! ([`Arrivals::request_records`]).
//!
//! Thread-safety: none inside; the owner ([`super::IncomingMigration`]) keeps it
//! behind one mutex.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use ramstore_wire::key_hash;

/// Keys settled one by one, by key hash: a pulled record's probe is one integer
/// lookup with the hash its apply has already computed (K§2.3: the target's
/// replay is the migration's bottleneck). With PriorityPulls the set holds the
/// workload's hot keys for the whole pull, so every pulled record probed it: a
/// SipHash of the key into a `HashSet<Vec<u8>>`, 13% of the apply in session
/// 32's profile (docs/benchmarks.md) — and absent without PriorityPulls.
pub(super) type SettledKeys = HashMap<u64, Vec<Vec<u8>>, BuildHasherDefault<KeyHashHasher>>;

/// Hashes a `u64` key hash to itself: it is already xxh3, uniformly spread.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct KeyHashHasher(u64);

impl Hasher for KeyHashHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used (the map's keys are `u64`); fold anything
        // else in so the hasher stays correct if that changes.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// One hash partition of the range, pulled in order of key hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    pub lo: u64,
    pub hi: u64,
    /// The next hash to pull; `None` once the whole partition has arrived.
    pub next: Option<u64>,
}

impl Partition {
    /// Whether every record with key hash `hash` in this partition has arrived.
    fn covers(&self, hash: u64) -> bool {
        (self.lo..=self.hi).contains(&hash) && self.next.is_none_or(|next| hash < next)
    }
}

/// Splits `[start, end]` into at most `parts` (at least 1) contiguous partitions
/// of nearly equal width; none for an empty range (`start > end`, bad input).
pub fn partitions(start: u64, end: u64, parts: u32) -> Vec<Partition> {
    if start > end {
        return Vec::new();
    }
    let width = u128::from(end - start) + 1;
    let parts = u128::from(parts.max(1)).min(width);
    let step = width / parts;
    (0..parts)
        .map(|i| {
            let lo = u128::from(start) + i * step;
            let hi = if i + 1 == parts {
                u128::from(end)
            } else {
                lo + step - 1
            };
            // Both lie within [start, end], so they fit in u64.
            Partition {
                lo: lo as u64,
                hi: hi as u64,
                next: Some(lo as u64),
            }
        })
        .collect()
}

/// What the target knows about the keys of one incoming migration.
#[derive(Debug, Clone)]
pub struct Arrivals {
    partitions: Vec<Partition>,
    /// Keys settled individually (not yet covered by their partition's cursor),
    /// by key hash (keys whose hashes collide share an entry).
    settled: SettledKeys,
    /// Key hashes whose completion records a PriorityPull brought (not yet
    /// covered by their partition's cursor).
    fetched: HashSet<u64>,
    /// Keys a client waits for, not yet asked of the source.
    pending: BTreeSet<Vec<u8>>,
    /// Keys asked of the source by the PriorityPull in flight.
    in_flight: BTreeSet<Vec<u8>>,
}

impl Arrivals {
    /// Nothing has arrived of the range `[start, end]`, pulled in `parts`
    /// partitions.
    pub fn new(start: u64, end: u64, parts: u32) -> Self {
        Self {
            partitions: partitions(start, end, parts),
            settled: SettledKeys::default(),
            fetched: HashSet::new(),
            pending: BTreeSet::new(),
            in_flight: BTreeSet::new(),
        }
    }

    pub fn partitions(&self) -> &[Partition] {
        &self.partitions
    }

    /// Whether the target's copy of `key` is authoritative.
    pub fn is_settled(&self, key: &[u8]) -> bool {
        self.is_settled_hashed(key, key_hash(key))
    }

    /// [`Self::is_settled`] for a key whose hash the caller has: the apply path
    /// asks it once per pulled record, so it must not hash the key again (that
    /// cost 13% of the target's apply, docs/benchmarks.md, issue 20 session 32).
    pub fn is_settled_hashed(&self, key: &[u8], hash: u64) -> bool {
        self.partitions.iter().any(|p| p.covers(hash))
            || self
                .settled
                .get(&hash)
                .is_some_and(|keys| keys.iter().any(|k| k.as_slice() == key))
    }

    /// Whether the completion records of key hash `hash` have arrived (module
    /// doc).
    pub fn has_records(&self, hash: u64) -> bool {
        self.partitions.iter().any(|p| p.covers(hash))
            || (!self.fetched.is_empty() && self.fetched.contains(&hash))
    }

    /// The key is authoritative here from now on (a priority pull answered, or a
    /// client wrote or deleted it on the target).
    pub fn settle(&mut self, key: &[u8]) {
        let hash = key_hash(key);
        if !self.is_settled_hashed(key, hash) {
            self.settled.entry(hash).or_default().push(key.to_vec());
        }
        self.pending.remove(key);
    }

    /// How many keys are settled one by one (not by a cursor).
    pub fn settled_individually(&self) -> usize {
        self.settled.values().map(Vec::len).sum()
    }

    /// A client waits for `key`: it joins the next PriorityPull unless it is
    /// settled, pending or in flight already (de-duplicated). Returns whether it
    /// was added.
    pub fn request(&mut self, key: &[u8]) -> bool {
        if self.is_settled(key) || self.in_flight.contains(key) {
            return false;
        }
        self.pending.insert(key.to_vec())
    }

    /// [`Self::request`] for an exactly-once RPC, which needs the key's
    /// completion records as well as its object: a key settled by a client's
    /// write is still asked for while its records have not arrived.
    pub fn request_records(&mut self, key: &[u8]) -> bool {
        let hash = key_hash(key);
        if (self.is_settled_hashed(key, hash) && self.has_records(hash))
            || self.in_flight.contains(key)
        {
            return false;
        }
        self.pending.insert(key.to_vec())
    }

    /// The keys of the next PriorityPull (every pending key, at most `max`);
    /// they are in flight until [`Self::priority_answered`] or
    /// [`Self::priority_failed`].
    pub fn take_pending(&mut self, max: usize) -> Vec<Vec<u8>> {
        let mut keys = Vec::new();
        while keys.len() < max {
            let Some(key) = self.pending.pop_first() else {
                break;
            };
            self.in_flight.insert(key.clone());
            keys.push(key);
        }
        keys
    }

    /// The source answered for `keys` (the records it had were applied, and
    /// their completion records installed): they are settled, and their
    /// records have arrived.
    pub fn priority_answered(&mut self, keys: &[Vec<u8>]) {
        for key in keys {
            self.in_flight.remove(key);
            self.settle(key);
            let hash = key_hash(key);
            if !self.partitions.iter().any(|p| p.covers(hash)) {
                self.fetched.insert(hash);
            }
        }
    }

    /// The PriorityPull for `keys` failed: they wait for the next one.
    pub fn priority_failed(&mut self, keys: &[Vec<u8>]) {
        for key in keys {
            if self.in_flight.remove(key) && !self.is_settled(key) {
                self.pending.insert(key.clone());
            }
        }
    }

    /// Partition `index` has arrived up to (not including) `next` (`None`: all
    /// of it). Cursors only move forward; settled keys it now covers are
    /// forgotten (the cursor says it).
    pub fn advance(&mut self, index: usize, next: Option<u64>) {
        let Some(p) = self.partitions.get_mut(index) else {
            return;
        };
        let next = match (p.next, next) {
            (None, _) => None,
            (Some(_), None) => None,
            (Some(old), Some(new)) => Some(old.max(new).min(p.hi.saturating_add(1))),
        };
        // A cursor past the partition's end means it is done.
        p.next = next.filter(|n| *n <= p.hi);
        let p = *p;
        self.settled.retain(|&hash, _| !p.covers(hash));
        self.fetched.retain(|h| !p.covers(*h));
    }

    /// Whether some client waits for a key (pending or in flight).
    pub fn has_waiters(&self) -> bool {
        !self.pending.is_empty() || !self.in_flight.is_empty()
    }

    /// Whether every record of the range has arrived and no PriorityPull is
    /// pending or in flight: the tablet can become normal.
    pub fn is_complete(&self) -> bool {
        self.partitions.iter().all(|p| p.next.is_none()) && !self.has_waiters()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_cover_the_range_exactly() {
        for (start, end, parts) in [(0, u64::MAX, 4), (10, 12, 4), (5, 5, 4), (0, 99, 3)] {
            let ps = partitions(start, end, parts);
            assert_eq!(ps[0].lo, start);
            assert_eq!(ps[ps.len() - 1].hi, end);
            for w in ps.windows(2) {
                assert_eq!(w[0].hi + 1, w[1].lo);
            }
            assert!(ps.len() <= parts as usize);
        }
    }

    #[test]
    fn partitions_of_an_empty_range_are_none() {
        assert!(partitions(10, 9, 4).is_empty());
        assert!(Arrivals::new(u64::MAX, 0, 4).partitions().is_empty());
    }

    #[test]
    fn request_deduplicates_and_skips_settled_keys() {
        let mut a = Arrivals::new(0, u64::MAX, 4);
        assert!(a.request(b"k"));
        assert!(!a.request(b"k"), "a pending key is asked for once");
        let keys = a.take_pending(100);
        assert_eq!(keys, vec![b"k".to_vec()]);
        assert!(!a.request(b"k"), "an in-flight key is asked for once");
        a.priority_answered(&keys);
        assert!(a.is_settled(b"k"));
        assert!(!a.request(b"k"));
    }

    #[test]
    fn request_records_asks_for_a_key_settled_without_its_records() {
        let mut a = Arrivals::new(0, u64::MAX, 1);
        a.settle(b"k");
        assert!(!a.request(b"k"), "the object is here");
        assert!(a.request_records(b"k"), "its completion records are not");
        assert!(!a.request_records(b"k"), "asked for once");
        let keys = a.take_pending(10);
        assert!(!a.request_records(b"k"), "in flight");
        a.priority_answered(&keys);
        assert!(a.has_records(key_hash(b"k")));
        assert!(!a.request_records(b"k"));
        assert!(!a.has_records(key_hash(b"other")));
        a.advance(0, None);
        assert!(a.has_records(key_hash(b"other")), "the cursor passed it");
    }

    #[test]
    fn priority_failed_puts_keys_back() {
        let mut a = Arrivals::new(0, u64::MAX, 1);
        a.request(b"k");
        let keys = a.take_pending(10);
        a.priority_failed(&keys);
        assert_eq!(a.take_pending(10), keys);
    }

    #[test]
    fn advance_settles_the_covered_hashes_only() {
        let mut a = Arrivals::new(0, u64::MAX, 1);
        let h = key_hash(b"k");
        assert!(!a.is_settled(b"k"));
        a.advance(0, Some(h));
        assert!(!a.is_settled(b"k"), "the cursor is at the key, not past it");
        a.advance(0, h.checked_add(1));
        assert!(a.is_settled(b"k"));
        a.advance(0, Some(0));
        assert!(a.is_settled(b"k"), "cursors never move back");
    }

    #[test]
    fn settle_keeps_keys_apart_and_advance_forgets_covered_ones() {
        let mut a = Arrivals::new(0, u64::MAX, 1);
        a.settle(b"k1");
        a.settle(b"k1");
        a.settle(b"k2");
        assert_eq!(a.settled_individually(), 2, "a key is settled once");
        assert!(a.is_settled(b"k1") && a.is_settled(b"k2"));
        assert!(!a.is_settled(b"k3"));
        // Same hash, other key: settling k1 says nothing of it.
        assert!(!a.is_settled_hashed(b"k3", key_hash(b"k1")));
        let (h1, h2) = (key_hash(b"k1"), key_hash(b"k2"));
        a.advance(0, Some(h1.min(h2) + 1));
        assert_eq!(a.settled_individually(), 1, "the cursor covers one key now");
        assert!(a.is_settled(b"k1") && a.is_settled(b"k2"));
    }

    #[test]
    fn is_complete_waits_for_every_partition_and_waiter() {
        let mut a = Arrivals::new(0, u64::MAX, 2);
        a.request(b"k");
        let keys = a.take_pending(10);
        a.advance(0, None);
        assert!(!a.is_complete(), "partition 1 is not pulled");
        a.advance(1, Some(u64::MAX));
        assert!(!a.is_complete(), "the last hash is not pulled");
        a.advance(1, None);
        assert!(!a.is_complete(), "a priority pull is in flight");
        a.priority_answered(&keys);
        assert!(a.is_complete());
    }
}
