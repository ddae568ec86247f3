//! A tour of the storage engine in one process: write, read, conditional write,
//! increment, delete, enumerate, then churn enough data through a small log that the
//! two-level cleaner has to work, and print its statistics.
//!
//! Run: `cargo run --release -p ramstore-master --example demo`

use ramstore_master::{ObjectStore, RejectRules, StoreConfig, WriteError};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 64 MiB of log memory, allocated now; the cleaner runs on its own thread.
    let store = ObjectStore::new(StoreConfig::new(64 << 20))?;
    let table = 1;
    store.add_tablet(table, 0, u64::MAX)?;
    let any = RejectRules::default();

    let v1 = store.write(table, b"greeting", b"hello", &any)?;
    let mut value = Vec::new();
    let version = store.read(table, b"greeting", &mut value)?;
    println!(
        "read greeting = {:?} (version {version})",
        String::from_utf8_lossy(&value)
    );

    // Compare-and-swap: succeeds only at the version we read.
    let v2 = store.write(
        table,
        b"greeting",
        b"hello, world",
        &RejectRules::version_must_equal(v1),
    )?;
    match store.write(
        table,
        b"greeting",
        b"lost update",
        &RejectRules::version_must_equal(v1),
    ) {
        Err(WriteError::WrongVersion { current }) => {
            println!("stale compare-and-swap refused: current version is {current} (we wrote {v2})")
        }
        other => println!("unexpected: {other:?}"),
    }

    let (count, _) = store.increment_i64(table, b"counter", 5, &any)?;
    let (count2, _) = store.increment_i64(table, b"counter", -2, &any)?;
    println!("counter: {count} then {count2}");

    store.remove(table, b"greeting", &any)?;
    let recreated = store.write(table, b"greeting", b"back", &any)?;
    println!("deleted and re-created greeting: version {recreated} > {v2}");

    // Churn: 400 MiB of writes over 20,000 keys through a 64 MiB log.
    let started = std::time::Instant::now();
    let mut writes = 0u64;
    let payload = vec![7u8; 1000];
    for i in 0..400_000u64 {
        let key = format!("key-{}", i % 20_000);
        loop {
            match store.write(table, key.as_bytes(), &payload, &any) {
                Ok(_) => break,
                // The log is full until the cleaner catches up: retry.
                Err(WriteError::NoSpace) => std::thread::yield_now(),
                Err(e) => return Err(e.into()),
            }
        }
        writes += 1;
    }
    let secs = started.elapsed().as_secs_f64();

    let mut batch = Vec::new();
    let mut cursor = Some(0);
    while let Some(c) = cursor {
        cursor = store.enumerate(table, c, 1 << 20, &mut batch)?;
    }
    let s = store.stats();
    println!(
        "{writes} writes of 1,000 B in {secs:.2} s ({:.0} writes/s)",
        writes as f64 / secs
    );
    println!(
        "enumerated {} objects; hash table holds {}",
        batch.len(),
        s.objects
    );
    println!(
        "log: {} MiB memory, {:.1} MiB live objects, {:.1} MiB tombstones, {} of {} seglets free",
        s.log.memory_bytes >> 20,
        s.log.live_object_bytes as f64 / 1048576.0,
        s.log.tombstone_bytes as f64 / 1048576.0,
        s.log.seglets_free,
        s.log.seglets_total
    );
    println!(
        "cleaner: {} compactions, {} combined passes, {:.1} MiB copied, {:.2} s CPU",
        s.log.compactions,
        s.log.combined_passes,
        (s.log.compaction_bytes_copied + s.log.combined_bytes_copied) as f64 / 1048576.0,
        s.log.cleaner_cpu_ns as f64 / 1e9
    );
    Ok(())
}
