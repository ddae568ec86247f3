//! A copy of which keys of a migrating-in tablet are settled, readable without
//! the arrivals mutex (K§2.3: the target's client requests come before the
//! background apply, and must not wait for it).
//!
//! Why (issue 20, session 35): the background apply runs at `nice` 19 and held
//! the arrivals mutex while it replayed each chunk of a Pull answer; every
//! client read of the migrating range took that mutex in the gate. When the
//! scheduler preempted the apply thread inside a chunk (likely, as it spends
//! most of its time there, and at `nice` 19 it may wait many milliseconds for a
//! core), client reads of the range waited for it: a priority inversion. Now
//! the gate asks this copy first, and a pulled record is checked against it
//! under its key's bucket lock, so the apply no longer holds the mutex while
//! it replays.
//!
//! Rules: the owner ([`super::IncomingMigration`]) updates this copy while it
//! holds the arrivals mutex, right after [`super::Arrivals`] changes, so the
//! copy never says a key is settled before the arrivals do, and it lags them
//! only while the updater holds the mutex (a gate that finds a key unsettled
//! here takes the mutex, so it waits that out). Settled stays settled, so
//! keys are never removed here: a key later covered by its cursor stays in
//! the set until the migration ends (at most the keys settled one by one
//! during it, usually the workload's hot keys).
//!
//! Thread-safety: `Send + Sync`. Cursors are atomics (published with Release
//! after their records are applied); the keys are behind a read-mostly lock
//! that is never held while another lock is taken.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use parking_lot::RwLock;

use super::arrivals::{Partition, SettledKeys};

/// One partition's cursor, as published.
#[derive(Debug)]
struct Cursor {
    lo: u64,
    hi: u64,
    /// The next hash to pull; meaningless once `done`.
    next: AtomicU64,
    done: AtomicBool,
}

impl Cursor {
    fn covers(&self, hash: u64) -> bool {
        (self.lo..=self.hi).contains(&hash)
            && (self.done.load(Ordering::Acquire) || hash < self.next.load(Ordering::Acquire))
    }
}

/// Keys settled one by one, and key hashes whose completion records a
/// PriorityPull brought.
#[derive(Debug, Default)]
struct Keys {
    settled: SettledKeys,
    fetched: HashSet<u64>,
}

/// The published copy (module doc).
#[derive(Debug)]
pub struct Settled {
    cursors: Vec<Cursor>,
    keys: RwLock<Keys>,
    /// Entries of `keys.settled`, so a probe of an empty set takes no lock.
    individually: AtomicUsize,
}

impl Settled {
    /// Nothing settled yet, for `partitions` (their current cursors).
    pub fn new(partitions: &[Partition]) -> Self {
        let cursors = partitions
            .iter()
            .map(|p| Cursor {
                lo: p.lo,
                hi: p.hi,
                next: AtomicU64::new(p.next.unwrap_or(p.lo)),
                done: AtomicBool::new(p.next.is_none()),
            })
            .collect();
        Self {
            cursors,
            keys: RwLock::new(Keys::default()),
            individually: AtomicUsize::new(0),
        }
    }

    /// Whether `key` (whose hash is `hash`) is settled: covered by its
    /// partition's cursor or settled one by one.
    pub fn is_settled(&self, key: &[u8], hash: u64) -> bool {
        self.covered(hash)
            || (self.individually.load(Ordering::Acquire) > 0
                && self
                    .keys
                    .read()
                    .settled
                    .get(&hash)
                    .is_some_and(|keys| keys.iter().any(|k| k.as_slice() == key)))
    }

    /// Whether the completion records of key hash `hash` have arrived.
    pub fn has_records(&self, hash: u64) -> bool {
        self.covered(hash) || self.keys.read().fetched.contains(&hash)
    }

    fn covered(&self, hash: u64) -> bool {
        self.cursors.iter().any(|c| c.covers(hash))
    }

    /// `key` is settled (the caller settled it in the arrivals, holding their
    /// mutex).
    pub fn settle(&self, key: &[u8], hash: u64) {
        if self.is_settled(key, hash) {
            return;
        }
        let mut keys = self.keys.write();
        keys.settled.entry(hash).or_default().push(key.to_vec());
        self.individually.fetch_add(1, Ordering::Release);
    }

    /// The records of key hash `hash` arrived by PriorityPull.
    pub fn fetched(&self, hash: u64) {
        if !self.covered(hash) {
            self.keys.write().fetched.insert(hash);
        }
    }

    /// Partition `index` moved to `partition`'s cursor (the caller advanced
    /// the arrivals, holding their mutex, after applying the records below it).
    pub fn advance(&self, index: usize, partition: &Partition) {
        let Some(c) = self.cursors.get(index) else {
            return;
        };
        match partition.next {
            Some(next) => c.next.store(next, Ordering::Release),
            None => c.done.store(true, Ordering::Release),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::arrivals::partitions;
    use super::*;
    use ramstore_wire::key_hash;

    fn settled() -> (Settled, Vec<Partition>) {
        let parts = partitions(0, u64::MAX, 4);
        (Settled::new(&parts), parts)
    }

    #[test]
    fn is_settled_follows_the_published_cursor() {
        let (s, mut parts) = settled();
        let hash = parts[1].lo + 10;
        assert!(!s.is_settled(b"k", hash));
        parts[1].next = Some(hash + 1);
        s.advance(1, &parts[1]);
        assert!(s.is_settled(b"k", hash));
        assert!(!s.is_settled(b"k", hash + 1));
        assert!(s.has_records(hash));
        parts[2].next = None;
        s.advance(2, &parts[2]);
        assert!(
            s.is_settled(b"k", parts[2].hi),
            "a done partition covers all of it"
        );
        assert!(!s.is_settled(b"k", parts[3].lo));
    }

    #[test]
    fn settle_keeps_keys_of_one_hash_apart() {
        let (s, _) = settled();
        let hash = key_hash(b"a");
        s.settle(b"a", hash);
        assert!(s.is_settled(b"a", hash));
        assert!(!s.is_settled(b"b", hash), "same hash, other key");
        assert!(!s.has_records(hash), "settling brings no records");
        s.fetched(hash);
        assert!(s.has_records(hash));
    }
}
