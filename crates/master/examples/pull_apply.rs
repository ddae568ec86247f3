//! The target's side of a migration pull, alone: how fast one thread applies
//! pulled records through `IncomingMigration::apply_pull` (the replay into a
//! side log that a Rocksteady target runs for every background Pull answer,
//! K§2.3), with no network and no source.
//!
//! `cargo run --release -p ramstore-master --example pull_apply [OBJECTS]`
//! (default 1,000,000 records of 16-byte keys and 128-byte values, the shape of
//! `scripts/bench-migration`, applied in 1 MiB batches); prints MB/s of keys
//! and values per round, alternating rounds with no key settled one by one and
//! with [`SETTLED`] keys settled (what PriorityPulls leave behind: the
//! workload's hot keys), each on a fresh store. Used to measure the settled-set
//! probe (issue 20, docs/benchmarks.md, session 34).

use std::time::Instant;

use ramstore_master::migration::{IncomingMigration, PulledObject};
use ramstore_master::{CleanerMode, ObjectStore, StoreConfig};

const ROUNDS: usize = 6;
const BATCH_BYTES: usize = 1 << 20;
/// Keys settled individually in the rounds that have some.
const SETTLED: usize = 20_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let objects: usize = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 1_000_000,
    };
    let keys: Vec<Vec<u8>> = (0..objects)
        .map(|i| format!("user{i:012}").into_bytes())
        .collect();
    let value = [b'v'; 128];
    let per_batch = BATCH_BYTES / (keys[0].len() + value.len());
    for round in 0..ROUNDS {
        let settled = if round % 2 == 0 { 0 } else { SETTLED };
        let mut config = StoreConfig::new(512 << 20);
        config.cleaner = CleanerMode::Manual;
        let store = ObjectStore::new(config)?;
        store.add_migrating_tablet(1, 0, u64::MAX, 1)?;
        let m = IncomingMigration::new(1, (1, 0, u64::MAX), 2, "source".into(), 1);
        // Keys that are not pulled, so every pulled record is applied and
        // probes the settled set.
        for i in 0..settled {
            m.settle(format!("hot{i:013}").as_bytes());
        }
        // Partition 0's cursor stays at its start: no pulled key is settled by
        // a cursor, so none is skipped.
        let stay = m.partitions()[0].next;
        let began = Instant::now();
        let mut bytes = 0usize;
        for (b, chunk) in keys.chunks(per_batch).enumerate() {
            let batch = chunk.iter().enumerate().map(|(i, k)| PulledObject {
                key: k,
                value: &value,
                version: (b * per_batch + i) as u64 + 2,
            });
            m.apply_pull(&store, 0, batch, &[], stay)?;
            bytes += chunk.len() * (keys[0].len() + value.len());
        }
        let secs = began.elapsed().as_secs_f64();
        assert_eq!(m.progress().1, objects as u64, "every record applied");
        println!(
            "round {round}: {settled:>6} settled: {:.0} MB/s ({objects} records, {bytes} B in {secs:.3} s)",
            bytes as f64 / 1e6 / secs
        );
    }
    Ok(())
}
