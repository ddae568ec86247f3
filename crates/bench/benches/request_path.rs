//! Micro-benchmarks of a storage server's request path, in process
//! (`cargo bench -p ramstore-bench --bench request_path`): one request of each
//! front end from arrival to answer, without the network.
//!
//! - `native_read` / `native_write`: a Read or Write frame through
//!   `Service::handle`, its response encoded into a reused buffer (decode, guards,
//!   store call, metrics, encoding).
//! - `direct_read` / `direct_write`: the Redis front end's direct calls
//!   (`StorageService::read_local` / `write_local`) on the same master.
//!
//! The master holds 100,000 objects of 100 bytes, does not replicate (R = 0: no
//! replication wait) and runs its background cleaner, as in a server. Keys are drawn
//! by a fixed-seed generator, so every run issues the same requests.

use std::sync::LazyLock;

use divan::Bencher;
use ramstore_master::{ObjectStore, RejectRules, StoreConfig};
use ramstore_rpc::Service;
use ramstore_server::StorageService;
use ramstore_wire::{encode_request, Request};

const TABLE: u64 = 1;
const OBJECTS: u64 = 100_000;
const VALUE: [u8; 100] = [7u8; 100];

fn main() {
    divan::main();
}

/// A fast deterministic generator (xorshift64*), cheap enough not to blur ns timings.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

fn key(id: u64) -> [u8; 8] {
    id.to_le_bytes()
}

/// The master: 100,000 objects in 256 MiB of log (a small fraction full, so
/// overwrites rarely wait for the cleaner).
static MASTER: LazyLock<StorageService> = LazyLock::new(|| {
    // Creating a store only fails for a bad configuration, which this is not.
    let store = ObjectStore::new(StoreConfig::new(256 << 20)).expect("create store");
    store.add_tablet(TABLE, 0, u64::MAX).expect("add tablet");
    for id in 0..OBJECTS {
        // An empty store of 256 MiB holds 10 MiB of objects without cleaning.
        store
            .write(TABLE, &key(id), &VALUE, &RejectRules::default())
            .expect("load");
    }
    StorageService::new(store)
});

/// Frames of `request(key)` for every key, so encoding is not timed.
fn frames(request: impl Fn(&[u8]) -> Request<'_>) -> Vec<Vec<u8>> {
    (0..OBJECTS)
        .map(|id| {
            let k = key(id);
            let mut frame = Vec::new();
            encode_request(1, &request(&k), &mut frame).expect("encodes");
            frame
        })
        .collect()
}

#[divan::bench]
fn native_read(bencher: Bencher) {
    let master = &*MASTER;
    let frames = frames(|key| Request::Read {
        table_id: TABLE,
        rules: RejectRules::default(),
        key,
    });
    let mut rng = Rng(0x1234_5678);
    let mut out = Vec::with_capacity(4096);
    bencher.bench_local(|| {
        out.clear();
        let frame = &frames[rng.below(OBJECTS) as usize];
        master.handle(divan::black_box(frame), &mut out)
    });
}

#[divan::bench]
fn native_write(bencher: Bencher) {
    let master = &*MASTER;
    let frames = frames(|key| Request::Write {
        table_id: TABLE,
        rules: RejectRules::default(),
        key,
        value: &VALUE,
        rpc_id: None,
    });
    let mut rng = Rng(0x9abc_def0);
    let mut out = Vec::with_capacity(4096);
    bencher.bench_local(|| {
        out.clear();
        let frame = &frames[rng.below(OBJECTS) as usize];
        master.handle(divan::black_box(frame), &mut out)
    });
}

#[divan::bench]
fn direct_read(bencher: Bencher) {
    let master = &*MASTER;
    let mut rng = Rng(0x1234_5678);
    let mut value = Vec::with_capacity(128);
    bencher.bench_local(|| {
        value.clear();
        let k = key(rng.below(OBJECTS));
        master.read_local(TABLE, divan::black_box(&k), &mut value)
    });
}

#[divan::bench]
fn direct_write(bencher: Bencher) {
    let master = &*MASTER;
    let mut rng = Rng(0x9abc_def0);
    let rules = RejectRules::default();
    bencher.bench_local(|| {
        let k = key(rng.below(OBJECTS));
        master.write_local(TABLE, divan::black_box(&k), &VALUE, &rules)
    });
}
