//! What a plain write pays for the transaction lock check (issue 21): two
//! threads take and drop the writer guard of distinct keys, against the lock
//! table (64 shards) and against one table-wide `RwLock` (the first slice's
//! design), in alternating rounds. Prints ns per guard, median and spread.
//!
//! `cargo run --release -p ramstore-master --example tx_lock_guard`

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Instant;

use parking_lot::RwLock;
use ramstore_master::key_hash;
use ramstore_master::tx::LockTable;

const THREADS: usize = 2;
const GUARDS: usize = 2_000_000;
const ROUNDS: usize = 7;

fn keys(thread: usize) -> Vec<Vec<u8>> {
    (0..1024)
        .map(|i| format!("user-{thread}-{i:06}").into_bytes())
        .collect()
}

/// ns per guard over `THREADS` threads running `f` on their keys.
fn run(f: &(dyn Fn(&[u8]) -> bool + Sync)) -> f64 {
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                let keys = keys(t);
                let mut ok = 0usize;
                for i in 0..GUARDS {
                    ok += usize::from(f(&keys[i % keys.len()]));
                }
                black_box(ok);
            });
        }
    });
    started.elapsed().as_nanos() as f64 / GUARDS as f64
}

fn summary(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    format!("{:.1} [{:.1}..{:.1}]", v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let sharded = LockTable::default();
    let global: RwLock<HashMap<(u64, u64), u64>> = RwLock::new(HashMap::new());
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        a.push(run(&|k| sharded.writer_guard(1, k).is_ok()));
        b.push(run(&|k| {
            // The first slice: one shared guard, then the check (which hashes
            // only when some lock is held).
            let map = global.read();
            map.is_empty() || !map.contains_key(&(1, key_hash(k)))
        }));
    }
    println!("threads {THREADS}, {GUARDS} guards each, {ROUNDS} rounds (ns per guard per thread)");
    println!("sharded (64): {}", summary(a));
    println!("one RwLock:   {}", summary(b));
}
