//! Concurrency stress test: lock-free readers against writers on long chains.
//!
//! Two writers insert, replace and remove keys they own (each key has one
//! owner) in a table of four buckets, so chains are long. The transient key
//! space is large and removals are rarer than inserts, so chains keep growing
//! while readers run; every growth moves the entry in the chain's last slot
//! into a new overflow bucket, the delicate case for lock-free readers.
//!
//! Two readers check that
//! - every *permanent* key (inserted before the readers start and afterwards
//!   only replaced) is always found, with a reference that was written for it,
//!   and is enumerated exactly once per pass over the buckets;
//! - every other key that nobody modified during a lookup is found with
//!   exactly its current reference, or not found if it is absent. A per-key
//!   sequence number (a seqlock written by the key's owner) tells the reader
//!   whether the key was modified during its lookup.
//!
//! A reference encodes its key and a version (`key << 32 | version`), so the
//! match closure can decode the key from it, as the real store reads the key
//! from the log entry the reference points at.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ramstore_index::HashTable;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const WRITERS: u64 = 2;
const READERS: usize = 2;
/// Permanent keys are `0..PERMANENT`; transient ones are `PERMANENT..KEYS`.
const PERMANENT: u64 = 64;
const KEYS: u64 = PERMANENT + 1536;
/// Probability that a writer removes a present transient key (else it replaces it).
const REMOVE_PROBABILITY: f64 = 0.3;
const ROUNDS: usize = 6;
const ROUND_TIME: Duration = Duration::from_millis(150);

/// Only the top 2 bits (4 buckets) and 16 tags: many tag collisions, long chains.
fn hash_of(key: u64) -> u64 {
    let mixed = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed & 0xC000_0000_0000_0000) | (key % 16)
}

fn reference(key: u64, version: u64) -> u64 {
    debug_assert!(key < 1 << 16 && (1..1 << 32).contains(&version));
    key << 32 | version
}

fn key_of(reference: u64) -> u64 {
    reference >> 32
}

fn version_of(reference: u64) -> u64 {
    reference & 0xFFFF_FFFF
}

/// What the test knows about one key.
#[derive(Default)]
struct KeyState {
    /// The highest version ever allocated; published before any entry holds it.
    latest: AtomicU64,
    /// Seqlock: odd while the owner is modifying the key, bumped twice per modification.
    seq: AtomicU64,
    /// The version the table holds for the key, 0 if absent; valid when `seq` is even.
    current: AtomicU64,
}

/// Checks that `found` is a reference written for `key`: its version was
/// published in `latest` before the entry was stored.
fn check_written(states: &[KeyState], key: u64, found: u64) {
    assert_eq!(key_of(found), key, "reference of another key");
    let version = version_of(found);
    assert!(version >= 1, "version 0 was never written");
    assert!(
        version <= states[key as usize].latest.load(Ordering::Acquire),
        "key {key}: version {version} was never written"
    );
}

fn writer(table: &HashTable, states: &[KeyState], me: u64, stop: &AtomicBool) -> usize {
    let mut rng = StdRng::seed_from_u64(me);
    let mut ops = 0;
    while !stop.load(Ordering::Relaxed) {
        let key = rng.gen_range(0..KEYS / WRITERS) * WRITERS + me;
        let state = &states[key as usize];
        // Publish the version before any entry holds it, so readers can check it.
        let version = state.latest.fetch_add(1, Ordering::AcqRel) + 1;
        let new_ref = reference(key, version);
        let mut guard = table.lock(hash_of(key));
        // Only this writer stores the key's seq, so a load/store pair is enough.
        let seq = state.seq.load(Ordering::Relaxed);
        state.seq.store(seq + 1, Ordering::Relaxed);
        // Orders the odd seq before the table stores below, for readers' Acquire fence.
        fence(Ordering::Release);
        let found = guard.find(|r| key_of(r) == key);
        let now = if key < PERMANENT {
            let (slot, _) = found.expect("permanent key missing under lock");
            guard.replace(slot, new_ref);
            version
        } else {
            match found {
                Some((slot, _)) if rng.gen_bool(REMOVE_PROBABILITY) => {
                    guard.remove(slot);
                    0
                }
                Some((slot, _)) => {
                    guard.replace(slot, new_ref);
                    version
                }
                None => {
                    guard.insert(new_ref).expect("table full");
                    version
                }
            }
        };
        state.current.store(now, Ordering::Relaxed);
        state.seq.store(seq + 2, Ordering::Release);
        drop(guard);
        ops += 1;
    }
    ops
}

fn reader(table: &HashTable, states: &[KeyState], stop: &AtomicBool) -> (usize, usize) {
    let mut passes = 0;
    let mut stable_checks = 0;
    let mut counts = vec![0u32; PERMANENT as usize];
    while !stop.load(Ordering::Relaxed) {
        for key in 0..KEYS {
            let state = &states[key as usize];
            let seq_before = state.seq.load(Ordering::Acquire);
            let expected = state.current.load(Ordering::Relaxed);
            let found = table.lookup(hash_of(key), |r| key_of(r) == key);
            // Orders the lookup's loads before the second seq load (seqlock read side).
            fence(Ordering::Acquire);
            let seq_after = state.seq.load(Ordering::Relaxed);
            if key < PERMANENT {
                let found = found.unwrap_or_else(|| panic!("permanent key {key} not found"));
                check_written(states, key, found);
            } else if let Some(found) = found {
                check_written(states, key, found);
            }
            if seq_before & 1 == 0 && seq_before == seq_after {
                // Nobody touched the key during the lookup: the answer is exact.
                let want = (expected != 0).then(|| reference(key, expected));
                assert_eq!(found, want, "key {key} unmodified during lookup");
                stable_checks += 1;
            }
        }
        counts.iter_mut().for_each(|c| *c = 0);
        for bucket in 0..table.bucket_count() {
            table.for_each_in_bucket(bucket, |r| {
                let key = key_of(r);
                check_written(states, key, r);
                if key < PERMANENT {
                    counts[key as usize] += 1;
                }
            });
        }
        for (key, &count) in counts.iter().enumerate() {
            assert_eq!(count, 1, "permanent key {key} enumerated {count} times");
        }
        passes += 1;
    }
    (passes, stable_checks)
}

#[test]
fn stress_readers_always_find_present_keys() {
    for _round in 0..ROUNDS {
        let table = HashTable::new(4);
        let states: Vec<KeyState> = (0..KEYS).map(|_| KeyState::default()).collect();
        for key in 0..PERMANENT {
            let state = &states[key as usize];
            state.latest.store(1, Ordering::Relaxed);
            state.current.store(1, Ordering::Relaxed);
            table
                .lock(hash_of(key))
                .insert(reference(key, 1))
                .expect("table full");
        }
        let overflow_before = table.overflow_buckets_in_use();
        let stop = AtomicBool::new(false);
        let passes = AtomicUsize::new(0);
        let stable_checks = AtomicUsize::new(0);
        let writes = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..READERS {
                let (table, states, stop) = (&table, &states, &stop);
                let (passes, stable_checks) = (&passes, &stable_checks);
                s.spawn(move || {
                    let (p, c) = reader(table, states, stop);
                    passes.fetch_add(p, Ordering::Relaxed);
                    stable_checks.fetch_add(c, Ordering::Relaxed);
                });
            }
            for w in 0..WRITERS {
                let (table, states, stop, writes) = (&table, &states, &stop, &writes);
                s.spawn(move || {
                    writes.fetch_add(writer(table, states, w, stop), Ordering::Relaxed);
                });
            }
            let deadline = Instant::now() + ROUND_TIME;
            while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert!(
            passes.load(Ordering::Relaxed) > 0,
            "readers made no progress"
        );
        assert!(stable_checks.load(Ordering::Relaxed) > 0, "no exact checks");
        assert!(
            writes.load(Ordering::Relaxed) > 0,
            "writers made no progress"
        );
        assert!(
            table.overflow_buckets_in_use() > overflow_before,
            "chains never grew while readers ran"
        );
        // Quiescent check: the table holds exactly each key's current version.
        let mut present = 0;
        for key in 0..KEYS {
            let found = table.lookup(hash_of(key), |r| key_of(r) == key);
            let current = states[key as usize].current.load(Ordering::Relaxed);
            assert_eq!(found, (current != 0).then(|| reference(key, current)));
            present += usize::from(current != 0);
        }
        assert_eq!(table.len(), present);
    }
}
