//! The source's side of a migration pull, alone: how fast one thread scans a
//! fenced tablet through `ObjectStore::pull_with` (the hash-bucket walk that a
//! Rocksteady pull answers from, K§2.3), with no network and no target.
//!
//! `cargo run --release -p ramstore-master --example pull_scan [OBJECTS]`
//! (default 2,000,000 objects of 100-byte values in 1 GiB); prints MB/s of keys
//! and values per round. Used to measure the scan's prefetching (issue 20,
//! docs/benchmarks.md).

use std::time::Instant;

use ramstore_master::{CleanerMode, ObjectStore, RejectRules, StoreConfig};

const ROUNDS: usize = 5;
const BATCH_BYTES: usize = 1 << 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let objects: u64 = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 2_000_000,
    };
    let mut config = StoreConfig::new(1 << 30);
    config.cleaner = CleanerMode::Manual;
    let store = ObjectStore::new(config)?;
    store.add_tablet(1, 0, u64::MAX)?;
    let rules = RejectRules::default();
    for i in 0..objects {
        store.write(1, format!("key{i:012}").as_bytes(), &[7u8; 100], &rules)?;
    }
    store.prepare_migration(1, 0, u64::MAX)?;
    for round in 0..ROUNDS {
        let began = Instant::now();
        let mut cursor = Some(0u64);
        let (mut bytes, mut records) = (0usize, 0u64);
        while let Some(c) = cursor {
            cursor = store.pull_with(1, c, u64::MAX, BATCH_BYTES, |_, key, value| {
                bytes += key.len() + value.len();
                records += 1;
            })?;
        }
        let secs = began.elapsed().as_secs_f64();
        println!(
            "round {round}: {:.0} MB/s ({records} records, {bytes} B in {secs:.3} s)",
            bytes as f64 / 1e6 / secs
        );
    }
    Ok(())
}
