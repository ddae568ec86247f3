//! Model-based test: random operations on a small hash space, compared with a
//! `HashMap` of keys and with a model of every chain's layout.
//!
//! Keys hash into only a few buckets and tags (including the reserved 0xFFFF),
//! so equal hashes, equal tags and long overflow chains are the norm. As in the
//! real object store, the table never sees keys: the match closure looks the
//! candidate reference up in a side map (standing in for reading the key from
//! the log) and compares keys.
//!
//! Besides writes and deletes of a small key space, keys are churned as in a
//! Redis-style workload (insert a fresh key, delete the oldest), so chains
//! grow, empty their overflow tails (which must be unlinked) and grow again
//! (taking unlinked buckets back, possibly from another chain). The layout
//! model says which buckets each chain has and where each entry sits, so the
//! check compares enumeration order slot by slot and the arena's counters of
//! overflow buckets in use, free and ever touched.

use std::collections::{HashMap, VecDeque};

use proptest::prelude::*;
use ramstore_index::HashTable;

/// The hash of `key`: one of 4 top-bit groups and one of 4 low-16-bit tags.
fn hash_of(key: u64) -> u64 {
    const TAGS: [u64; 4] = [0x0000, 0x0001, 0xFFFE, 0xFFFF];
    let top = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 62) << 62;
    top | 0x00AB_CDEF_0000 | TAGS[(key % 4) as usize]
}

#[derive(Debug, Clone)]
enum Op {
    /// Write the key: replace its reference if present, insert otherwise.
    Put(u64),
    /// Delete the key if present.
    Remove(u64),
    /// Look the key up without a lock.
    Lookup(u64),
    /// Relocate the key's entry as the cleaner does: find_ref of the current reference, then replace.
    Relocate(u64),
    /// Insert a key never used before.
    InsertFresh,
    /// Delete the oldest key inserted by `InsertFresh` that is still present.
    RemoveOldest,
}

/// Keys of `InsertFresh` start here, above those of the other operations.
const FIRST_FRESH_KEY: u64 = 1_000;

fn op() -> impl Strategy<Value = Op> {
    let key = 0u64..48;
    prop_oneof![
        4 => key.clone().prop_map(Op::Put),
        2 => key.clone().prop_map(Op::Remove),
        2 => key.clone().prop_map(Op::Lookup),
        1 => key.prop_map(Op::Relocate),
        3 => Just(Op::InsertFresh),
        3 => Just(Op::RemoveOldest),
    ]
}

/// Where entries sit: per main bucket, its chain of buckets (main bucket first),
/// each eight slots holding a reference or 0. In all but the last bucket slot 7
/// is the link (0 here).
///
/// The rules it encodes: an insert takes the first empty slot of the chain; a
/// full chain grows by a bucket holding the last slot's entry, then the new one;
/// a remove empties the slot, then drops the empty overflow buckets that end the
/// chain.
struct Layout {
    chains: Vec<Vec<[u64; 8]>>,
    /// The most overflow buckets in use at once so far.
    peak_overflow: usize,
}

impl Layout {
    fn new(bucket_count: usize) -> Self {
        Layout {
            chains: vec![vec![[0; 8]]; bucket_count],
            peak_overflow: 0,
        }
    }

    fn overflow_in_use(&self) -> usize {
        self.chains.iter().map(|c| c.len() - 1).sum()
    }

    fn insert(&mut self, bucket: usize, reference: u64) {
        let chain = &mut self.chains[bucket];
        let last = chain.len() - 1;
        for (i, slots) in chain.iter_mut().enumerate() {
            let usable = if i == last { 8 } else { 7 };
            if let Some(slot) = slots[..usable].iter_mut().find(|s| **s == 0) {
                *slot = reference;
                return;
            }
        }
        let moved = std::mem::take(&mut chain[last][7]);
        let mut fresh = [0; 8];
        fresh[0] = moved;
        fresh[1] = reference;
        chain.push(fresh);
        self.peak_overflow = self.peak_overflow.max(self.overflow_in_use());
    }

    fn replace(&mut self, bucket: usize, old: u64, new: u64) {
        let slot = self.chains[bucket]
            .iter_mut()
            .flat_map(|b| b.iter_mut())
            .find(|s| **s == old)
            .expect("layout: replaced entry missing");
        *slot = new;
    }

    fn remove(&mut self, bucket: usize, reference: u64) {
        let chain = &mut self.chains[bucket];
        let slot = chain
            .iter_mut()
            .flat_map(|b| b.iter_mut())
            .find(|s| **s == reference)
            .expect("layout: removed entry missing");
        *slot = 0;
        while chain.len() > 1 && chain.last().is_some_and(|b| b.iter().all(|&s| s == 0)) {
            chain.pop();
        }
    }

    /// The references of `bucket`'s chain in the order a walk meets them.
    fn walk_order(&self, bucket: usize) -> Vec<u64> {
        self.chains[bucket]
            .iter()
            .flat_map(|b| b.iter().copied())
            .filter(|&r| r != 0)
            .collect()
    }
}

struct Harness {
    table: HashTable,
    /// The model: key → its current reference.
    model: HashMap<u64, u64>,
    /// The model of where entries sit.
    layout: Layout,
    /// Every reference ever written → its key (the "log").
    log: HashMap<u64, u64>,
    next_ref: u64,
    /// Keys of `InsertFresh`, oldest first (some may have been deleted since).
    fresh: VecDeque<u64>,
    next_fresh: u64,
}

impl Harness {
    fn new(bucket_count: usize) -> Self {
        Harness {
            table: HashTable::new(bucket_count),
            model: HashMap::new(),
            layout: Layout::new(bucket_count),
            log: HashMap::new(),
            next_ref: 1,
            fresh: VecDeque::new(),
            next_fresh: FIRST_FRESH_KEY,
        }
    }

    fn bucket(&self, key: u64) -> usize {
        self.table.bucket_of(hash_of(key))
    }

    /// Appends a new version of `key` to the "log" and returns its reference.
    fn append(&mut self, key: u64) -> u64 {
        let reference = self.next_ref;
        self.next_ref += 1;
        self.log.insert(reference, key);
        reference
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Put(key) => self.put(key),
            Op::Remove(key) => self.remove(key),
            Op::InsertFresh => {
                let key = self.next_fresh;
                self.next_fresh += 1;
                self.fresh.push_back(key);
                self.put(key);
            }
            Op::RemoveOldest => {
                while let Some(key) = self.fresh.pop_front() {
                    if self.model.contains_key(&key) {
                        self.remove(key);
                        break;
                    }
                }
            }
            Op::Lookup(key) => {
                let log = &self.log;
                let found = self.table.lookup(hash_of(key), |r| log[&r] == key);
                assert_eq!(found, self.model.get(&key).copied());
            }
            Op::Relocate(key) => {
                let Some(&old) = self.model.get(&key) else {
                    return;
                };
                let reference = self.append(key);
                let mut guard = self.table.lock(hash_of(key));
                let slot = guard
                    .find_ref(old)
                    .expect("live entry not found by reference");
                guard.replace(slot, reference);
                assert_eq!(guard.find_ref(old), None);
                drop(guard);
                self.layout.replace(self.bucket(key), old, reference);
                self.model.insert(key, reference);
            }
        }
    }

    /// Writes `key`: replaces its reference if present, inserts it otherwise.
    fn put(&mut self, key: u64) {
        let reference = self.append(key);
        let log = &self.log;
        let mut guard = self.table.lock(hash_of(key));
        match guard.find(|r| log[&r] == key) {
            Some((slot, old)) => {
                assert_eq!(Some(&old), self.model.get(&key));
                guard.replace(slot, reference);
                drop(guard);
                self.layout.replace(self.bucket(key), old, reference);
            }
            None => {
                assert!(!self.model.contains_key(&key));
                let slot = guard.insert(reference).expect("table full");
                assert_eq!(guard.find_ref(reference), Some(slot));
                drop(guard);
                self.layout.insert(self.bucket(key), reference);
            }
        }
        self.model.insert(key, reference);
    }

    /// Deletes `key` if present.
    fn remove(&mut self, key: u64) {
        let log = &self.log;
        let mut guard = self.table.lock(hash_of(key));
        let found = guard.find(|r| log[&r] == key);
        assert_eq!(found.map(|(_, r)| r), self.model.get(&key).copied());
        if let Some((slot, reference)) = found {
            guard.remove(slot);
            drop(guard);
            self.layout.remove(self.bucket(key), reference);
            self.model.remove(&key);
        }
    }

    /// Checks the whole table against the model.
    fn check(&self) {
        assert_eq!(self.table.len(), self.model.len());
        for (&key, &reference) in &self.model {
            let found = self.table.lookup(hash_of(key), |r| self.log[&r] == key);
            assert_eq!(found, Some(reference), "key {key}");
            let guard = self.table.lock(hash_of(key));
            assert!(guard.find_ref(reference).is_some(), "key {key}");
        }
        let mut enumerated = Vec::new();
        for bucket in 0..self.table.bucket_count() {
            let (first, last) = self.table.bucket_hash_range(bucket);
            let mut in_bucket = Vec::new();
            // No writer runs during the walk, so it meets no entry of another bucket.
            self.table.for_each_in_bucket(bucket, |r| {
                let hash = hash_of(self.log[&r]);
                assert!(first <= hash && hash <= last, "entry in the wrong bucket");
                in_bucket.push(r);
            });
            assert_eq!(
                in_bucket,
                self.layout.walk_order(bucket),
                "layout of bucket {bucket}"
            );
            enumerated.extend(in_bucket);
        }
        enumerated.sort_unstable();
        let mut expected: Vec<u64> = self.model.values().copied().collect();
        expected.sort_unstable();
        assert_eq!(enumerated, expected);
        // Emptied tails went back to the arena, and the arena only grew to the
        // most overflow buckets ever in use at once.
        assert_eq!(
            self.table.overflow_buckets_in_use(),
            self.layout.overflow_in_use()
        );
        assert_eq!(
            self.table.overflow_buckets_high_water(),
            self.layout.peak_overflow
        );
        assert_eq!(
            self.table.overflow_buckets_free(),
            self.layout.peak_overflow - self.layout.overflow_in_use()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn model_random_ops_match_hashmap(
        bucket_count in prop_oneof![Just(1usize), Just(2), Just(4), Just(8)],
        ops in prop::collection::vec(op(), 1..400),
    ) {
        let mut harness = Harness::new(bucket_count);
        for (i, op) in ops.iter().enumerate() {
            harness.apply(op);
            if i % 32 == 0 {
                harness.check();
            }
        }
        harness.check();
    }
}
