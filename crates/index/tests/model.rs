//! Model-based test: random operations on a small hash space, compared with a `HashMap`.
//!
//! Keys hash into only a few buckets and tags (including the reserved 0xFFFF),
//! so equal hashes, equal tags and long overflow chains are the norm. As in the
//! real object store, the table never sees keys: the match closure looks the
//! candidate reference up in a side map (standing in for reading the key from
//! the log) and compares keys.

use std::collections::HashMap;

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
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u64..48;
    prop_oneof![
        4 => key.clone().prop_map(Op::Put),
        2 => key.clone().prop_map(Op::Remove),
        2 => key.clone().prop_map(Op::Lookup),
        1 => key.prop_map(Op::Relocate),
    ]
}

struct Harness {
    table: HashTable,
    /// The model: key → its current reference.
    model: HashMap<u64, u64>,
    /// Every reference ever written → its key (the "log").
    log: HashMap<u64, u64>,
    next_ref: u64,
}

impl Harness {
    fn new(bucket_count: usize) -> Self {
        Harness {
            table: HashTable::new(bucket_count),
            model: HashMap::new(),
            log: HashMap::new(),
            next_ref: 1,
        }
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
            Op::Put(key) => {
                let reference = self.append(key);
                let log = &self.log;
                let mut guard = self.table.lock(hash_of(key));
                match guard.find(|r| log[&r] == key) {
                    Some((slot, old)) => {
                        assert_eq!(Some(&old), self.model.get(&key));
                        guard.replace(slot, reference);
                    }
                    None => {
                        assert!(!self.model.contains_key(&key));
                        let slot = guard.insert(reference).expect("table full");
                        assert_eq!(guard.find_ref(reference), Some(slot));
                    }
                }
                self.model.insert(key, reference);
            }
            Op::Remove(key) => {
                let log = &self.log;
                let mut guard = self.table.lock(hash_of(key));
                let found = guard.find(|r| log[&r] == key);
                assert_eq!(found.map(|(_, r)| r), self.model.get(&key).copied());
                if let Some((slot, _)) = found {
                    guard.remove(slot);
                    self.model.remove(&key);
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
                self.model.insert(key, reference);
            }
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
            self.table.for_each_in_bucket(bucket, |r| {
                let hash = hash_of(self.log[&r]);
                assert!(first <= hash && hash <= last, "entry in the wrong bucket");
                enumerated.push(r);
            });
        }
        enumerated.sort_unstable();
        let mut expected: Vec<u64> = self.model.values().copied().collect();
        expected.sort_unstable();
        assert_eq!(enumerated, expected);
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
