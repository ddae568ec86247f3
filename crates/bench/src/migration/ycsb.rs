//! The YCSB-B client of the migration benchmark: 95% reads and 5% updates of
//! 128-byte values, keys from YCSB's scrambled Zipfian distribution (θ = 0.99),
//! run by a few threads either closed-loop (to find the peak) or open-loop at a
//! fixed offered load. Every operation is recorded as a [`Sample`]; phases and
//! per-second figures are cut from the samples afterwards (`summary.rs`).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ramstore_bench::zipfian::Zipfian;
use ramstore_client::BlockingClient;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The hash the table is split at; the half from here up is migrated.
pub const SPLIT_HASH: u64 = 1 << 63;

/// Percentage of updates in YCSB B.
const UPDATE_PERCENT: u32 = 5;

/// One operation: when it was due (µs after the run's start; for a closed loop,
/// when it was sent), how long it took from then, and whether it failed; for the
/// per-operation trace (`--trace`), how long it took from when it was sent (its
/// service time, without the wait for its thread), whether it was an update, and
/// whether its key lies in the migrated half (hash at or above [`SPLIT_HASH`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sample {
    pub thread: u32,
    pub due_us: u64,
    pub latency_us: u64,
    pub failed: bool,
    pub service_us: u64,
    pub write: bool,
    pub upper: bool,
}

/// The key of object `i`: `user` and 12 digits (16 bytes), as `ramstore bench`.
pub fn key(i: u64) -> Vec<u8> {
    format!("user{i:012}").into_bytes()
}

/// What the client threads share.
#[derive(Clone)]
pub struct Load {
    pub client: Arc<BlockingClient>,
    pub table_id: u64,
    pub keys: Zipfian,
    pub value: Vec<u8>,
    /// Operations per second of the whole client; `None`: closed loop.
    pub offered_per_s: Option<f64>,
    pub threads: usize,
}

/// Runs the load on `threads` threads from `start` until `stop` is set; each
/// thread's samples, in order.
pub fn run(load: Arc<Load>, start: Instant, stop: Arc<AtomicBool>) -> Vec<Vec<Sample>> {
    let handles: Vec<_> = (0..load.threads)
        .map(|t| {
            let load = load.clone();
            let stop = stop.clone();
            std::thread::spawn(move || one_thread(&load, t, start, &stop))
        })
        .collect();
    handles
        .into_iter()
        // A thread panics only on a bug of this benchmark; its samples are lost.
        .filter_map(|h| h.join().ok())
        .collect()
}

fn one_thread(load: &Load, thread: usize, start: Instant, stop: &AtomicBool) -> Vec<Sample> {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0000 + thread as u64);
    // Open loop: this thread's share of the offered load, on a fixed schedule
    // (latency counts from when an operation was due, so a stall is charged to
    // every operation it delayed, not only to the one it hit).
    let interval = load
        .offered_per_s
        .map(|r| Duration::from_secs_f64(load.threads as f64 / r.max(1e-3)));
    // Threads start staggered so their schedules interleave.
    let mut due =
        start + interval.map_or(Duration::ZERO, |i| i * thread as u32 / load.threads as u32);
    let mut samples = Vec::with_capacity(1 << 16);
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if interval.is_none() {
            due = now;
        } else if due > now {
            std::thread::sleep(due - now);
        }
        let k = key(load.keys.next_scrambled(&mut rng));
        let write = rng.gen_range(0..100) < UPDATE_PERCENT;
        let sent = Instant::now();
        let failed = if write {
            load.client.write(load.table_id, &k, &load.value).is_err()
        } else {
            load.client.read(load.table_id, &k).is_err()
        };
        let done = Instant::now();
        samples.push(Sample {
            thread: thread as u32,
            due_us: due.saturating_duration_since(start).as_micros() as u64,
            latency_us: done.saturating_duration_since(due).as_micros() as u64,
            failed,
            service_us: done.saturating_duration_since(sent).as_micros() as u64,
            write,
            upper: ramstore_master::key_hash(&k) >= SPLIT_HASH,
        });
        if let Some(interval) = interval {
            due += interval;
        }
    }
    samples
}

/// Writes `samples` as CSV to `path` (the `--trace` option): one line per
/// operation, in the order given.
pub fn write_trace(path: &Path, samples: &[Sample]) -> std::io::Result<()> {
    let mut out = BufWriter::new(File::create(path)?);
    writeln!(
        out,
        "thread,due_us,latency_us,service_us,write,upper,failed"
    )?;
    for s in samples {
        writeln!(
            out,
            "{},{},{},{},{},{},{}",
            s.thread,
            s.due_us,
            s.latency_us,
            s.service_us,
            u8::from(s.write),
            u8::from(s.upper),
            u8::from(s.failed)
        )?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_sixteen_bytes() {
        assert_eq!(key(7), b"user000000000007");
        assert_eq!(key(999_999_999_999).len(), 16);
    }
}
