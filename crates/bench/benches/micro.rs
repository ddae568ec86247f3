//! Micro-benchmarks of ramstore's hot paths, in process (`cargo bench -p ramstore-bench`).
//!
//! - `read_100b` / `write_100b`: one read or overwrite of a 100-byte object in a store
//!   of 1M objects (ns per operation; the background cleaner is on, as in a server).
//! - `hash_lookup`: one lock-free lookup in a `ramstore_index::HashTable` of 1M entries.
//! - `clean_compaction` / `clean_combined`: one cleaning pass on a store whose segments
//!   are half dead, reported as bytes of live entries copied per second. Each sample
//!   gets a freshly prepared store (preparation is not timed).
//!
//! Stores are prepared deterministically (fixed seeds, manual cleaning where it is
//! timed), so the bytes a pass copies are the same in every sample; they are measured
//! once up front and used as the throughput counter.

use std::sync::LazyLock;

use divan::counter::BytesCount;
use divan::Bencher;
use ramstore_index::HashTable;
use ramstore_log::CleanKind;
use ramstore_master::{key_hash, CleanerMode, ObjectStore, RejectRules, StoreConfig, WriteError};

const TABLE: u64 = 1;
const OBJECTS: u64 = 1_000_000;
const VALUE: [u8; 100] = [7u8; 100];

fn main() {
    divan::main();
}

/// A fast deterministic generator (xorshift64*), cheap enough not to blur ns timings.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn key(id: u64) -> [u8; 8] {
    id.to_le_bytes()
}

/// Retries `NoSpace` (the cleaner frees room in the background).
fn write_retrying(store: &ObjectStore, k: &[u8], v: &[u8]) {
    loop {
        match store.write(TABLE, k, v, &RejectRules::default()) {
            Ok(_) => return,
            Err(WriteError::NoSpace) => std::thread::yield_now(),
            // A benchmark of a broken store measures nothing: stop loudly.
            Err(e) => panic!("write failed: {e}"),
        }
    }
}

/// 1M objects of 100 bytes in 512 MiB of log (about a quarter full, so overwrites in
/// the write benchmark rarely wait for the cleaner).
static STORE_1M: LazyLock<ObjectStore> = LazyLock::new(|| {
    let mut config = StoreConfig::new(512 << 20);
    config.hash_table_buckets = Some(OBJECTS as usize / 4);
    // Creating a store only fails for a bad configuration, which this is not.
    let store = ObjectStore::new(config).expect("create store");
    store.add_tablet(TABLE, 0, u64::MAX).expect("add tablet");
    for id in 0..OBJECTS {
        write_retrying(&store, &key(id), &VALUE);
    }
    store
});

#[divan::bench]
fn read_100b(bencher: Bencher) {
    let store = &*STORE_1M;
    let mut rng = Rng(0x1234_5678);
    let mut value = Vec::with_capacity(128);
    bencher.bench_local(|| {
        let k = key(rng.below(OBJECTS));
        store.read(TABLE, divan::black_box(&k), &mut value)
    });
}

#[divan::bench]
fn write_100b(bencher: Bencher) {
    let store = &*STORE_1M;
    let mut rng = Rng(0x9abc_def0);
    bencher.bench_local(|| {
        let k = key(rng.below(OBJECTS));
        write_retrying(store, divan::black_box(&k), &VALUE);
    });
}

/// A hash table of 1M entries (reference = index + 1) and the hashes to look up.
static TABLE_1M: LazyLock<(HashTable, Vec<u64>)> = LazyLock::new(|| {
    let table = HashTable::with_capacity(OBJECTS as usize);
    let hashes: Vec<u64> = (0..OBJECTS).map(|i| key_hash(&key(i))).collect();
    for (i, &h) in hashes.iter().enumerate() {
        // with_capacity leaves buckets half full: the overflow arena is never exhausted.
        table.lock(h).insert(i as u64 + 1).expect("insert");
    }
    (table, hashes)
});

#[divan::bench]
fn hash_lookup(bencher: Bencher) {
    let (table, hashes) = &*TABLE_1M;
    let mut rng = Rng(0x5555);
    bencher.bench_local(|| {
        let i = rng.below(OBJECTS) as usize;
        let want = i as u64 + 1;
        table.lookup(divan::black_box(hashes[i]), |r| r == want)
    });
}

/// Memory of the stores the cleaner benchmarks prepare.
const CLEAN_MEMORY: usize = 96 << 20;
/// Object bytes written before the deletes: six 8 MiB segments.
const CLEAN_FILL: usize = 48 << 20;

/// A store with manual cleaning whose closed segments are each half dead: objects
/// written in order, then every other one deleted.
fn half_dead_store(value_size: usize) -> ObjectStore {
    let mut config = StoreConfig::new(CLEAN_MEMORY);
    config.cleaner = CleanerMode::Manual;
    let count = (CLEAN_FILL / (value_size + 20)) as u64;
    config.hash_table_buckets = Some(count as usize / 4);
    let store = ObjectStore::new(config).expect("create store");
    store.add_tablet(TABLE, 0, u64::MAX).expect("add tablet");
    let value = vec![3u8; value_size];
    for id in 0..count {
        // Half the memory stays free, so nothing here can run out of space.
        store
            .write(TABLE, &key(id), &value, &RejectRules::default())
            .expect("prepare: write");
    }
    for id in (0..count).step_by(2) {
        store
            .remove(TABLE, &key(id), &RejectRules::default())
            .expect("prepare: delete");
    }
    store
}

/// Bytes one pass of `kind` copies on a freshly prepared store.
fn bytes_copied(kind: CleanKind, value_size: usize) -> u64 {
    let store = half_dead_store(value_size);
    store
        .clean_now(Some(kind))
        .map_or(0, |(_, outcome)| outcome.bytes_copied)
}

fn bench_pass(bencher: Bencher, kind: CleanKind, value_size: usize) {
    let bytes = bytes_copied(kind, value_size);
    bencher
        .counter(BytesCount::new(bytes))
        .with_inputs(|| half_dead_store(value_size))
        .bench_local_values(|store| {
            store.clean_now(Some(kind));
            // Returned so that dropping the store is not timed.
            store
        });
}

#[divan::bench(args = [100, 1000], sample_count = 10, sample_size = 1)]
fn clean_compaction(bencher: Bencher, value_size: usize) {
    bench_pass(bencher, CleanKind::Compaction, value_size);
}

#[divan::bench(args = [100, 1000], sample_count = 10, sample_size = 1)]
fn clean_combined(bencher: Bencher, value_size: usize) {
    bench_pass(bencher, CleanKind::Combined, value_size);
}
