//! `ramstore-bench replay`: the CPU cost of crash-recovery replay on one core
//! (R§7.6, R Table V), in process: buckets of log entries as a backup would serve
//! them are replayed into an empty store by [`ramstore_server::recovery_master::Replay`],
//! the same code a recovery master runs. No network and no replication, so this is
//! the replay loop alone; `scripts/bench-recovery` measures it inside a cluster.

use std::time::Instant;

use anyhow::Result;
use ramstore_log::entry::encode_object;
use ramstore_master::{ObjectStore, StoreConfig};
use ramstore_server::recovery_master::Replay;
use serde::Serialize;

/// Bytes of one bucket (about what a backup serves per segment and partition).
const BUCKET_BYTES: usize = 8 << 20;

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// Value sizes to replay, in bytes.
    #[arg(long, value_delimiter = ',', default_value = "64,1024,4096")]
    values: Vec<usize>,
    /// Bytes of entries replayed per value size.
    #[arg(long, default_value_t = 256 << 20)]
    bytes: usize,
    /// Also write the results here as JSON.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

#[derive(Debug, Serialize)]
struct Run {
    value_size: usize,
    objects: u64,
    bytes: u64,
    cpu_seconds: f64,
    objects_per_sec: f64,
    mb_per_sec: f64,
}

/// Buckets holding `bytes` of objects with `value_size`-byte values, keys unique.
fn buckets(value_size: usize, bytes: usize) -> (Vec<Vec<u8>>, u64) {
    let value = vec![0x5au8; value_size];
    let mut out = vec![Vec::with_capacity(BUCKET_BYTES)];
    let mut total = 0;
    let mut objects = 0u64;
    let mut key = Vec::new();
    while total < bytes {
        key.clear();
        key.extend_from_slice(format!("user{objects:012}").as_bytes());
        let bucket = out.last_mut().expect("one bucket at least");
        let before = bucket.len();
        encode_object(1, objects + 1, 0, &key, &value, bucket);
        total += bucket.len() - before;
        objects += 1;
        if bucket.len() >= BUCKET_BYTES {
            out.push(Vec::with_capacity(BUCKET_BYTES));
        }
    }
    (out, objects)
}

pub fn run(args: &ReplayArgs) -> Result<()> {
    let mut runs = Vec::new();
    println!("value     objects/s      MB/s   (one core, CPU time)");
    for &value_size in &args.values {
        let (buckets, objects) = buckets(value_size, args.bytes);
        // Room for every object at low utilisation, so the cleaner stays idle.
        let store = ObjectStore::new(StoreConfig::new(args.bytes * 3 + (256 << 20)))?;
        store.add_tablet(1, 0, u64::MAX)?;
        let mut replay = Replay::default();
        let wall = Instant::now();
        let cpu = ramstore_log::thread_cpu_ns();
        for b in &buckets {
            replay
                .apply(&store, 0, b)
                .map_err(|e| anyhow::anyhow!("replay: {e}"))?;
        }
        let cpu_seconds = (ramstore_log::thread_cpu_ns() - cpu) as f64 / 1e9;
        let bytes = replay.counts().bytes;
        let run = Run {
            value_size,
            objects,
            bytes,
            cpu_seconds,
            objects_per_sec: objects as f64 / cpu_seconds,
            mb_per_sec: bytes as f64 / 1e6 / cpu_seconds,
        };
        println!(
            "{:>5} B {:>12.0} {:>9.0}   ({} objects in {:.2} s CPU, {:.2} s wall)",
            value_size,
            run.objects_per_sec,
            run.mb_per_sec,
            objects,
            cpu_seconds,
            wall.elapsed().as_secs_f64()
        );
        runs.push(run);
    }
    if let Some(path) = &args.json {
        std::fs::write(
            path,
            serde_json::to_vec_pretty(&serde_json::json!({ "runs": runs }))?,
        )?;
    }
    Ok(())
}
