//! One point of the `cleaner` scenario's figure: a fresh store preloaded to the
//! target utilisation, warmed up until the cleaner runs, then measured (L§8.1),
//! with its memory sampled along the way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde::Serialize;

use ramstore_log::LogStats;
use ramstore_master::{ObjectStore, StoreConfig};

use crate::retry::Backpressure;
use crate::throttle::ThrottledReplicas;

use super::args::{mode_name, Dist};
use super::keys::{key_of, Picker};

pub(super) const TABLE: u64 = 1;
pub(super) const MIB: u64 = 1 << 20;
/// L§8.1 keeps 8 MiB segments; so does every run here.
pub(super) const SEGMENT_BYTES: usize = 8 << 20;
/// The clock is read once per this many writes in the measurement loop.
pub(super) const CHECK_EVERY: u64 = 16;
/// One point of the figure.
#[derive(Debug, Clone, Serialize)]
pub struct CleanerRun {
    pub value_size: usize,
    pub distribution: &'static str,
    /// Target live entry bytes ÷ memory.
    pub utilization: f64,
    pub mode: &'static str,
    pub completed: bool,
    pub error: Option<String>,
    /// Writes per second in the measurement window.
    pub ops_per_sec: f64,
    /// Survivor bytes combined cleaning wrote to backups per byte appended to the
    /// head, in the window (L Fig. 7).
    pub cleaner_bytes_per_write_byte: f64,
    /// All bytes the cleaner copied in memory (compaction + combined) per byte
    /// appended, in the window.
    pub memory_copy_per_write_byte: f64,
    /// Passes in the window.
    pub compactions: u64,
    pub combined_passes: u64,
    /// Of `combined_passes`, those that cleaned one segment in place
    /// (`cleaner::incremental`) rather than a batch.
    pub incremental_combined_passes: u64,
    /// Passes in the window that found work but no memory for their output.
    pub passes_without_memory: u64,
    /// Combined passes in the window that read their victims and gave them back.
    pub combined_passes_refused: u64,
    pub cleaner_cpu_seconds: f64,
    /// Wall time cleaning passes waited for their survivors to be durable.
    pub survivor_sync_seconds: f64,
    /// Time cleaner threads slept while cleaning was wanted (no pass they could
    /// start made progress), summed over the threads, and how many sleeps.
    pub cleaner_idle_seconds: f64,
    pub cleaner_idle_waits: u64,
    /// Bytes the cleaner copied in memory (compaction + combined) in the window.
    pub cleaner_bytes_copied: u64,
    /// Cleaner CPU per byte it copied, in ns: its cost per unit of work, which
    /// other processes on a shared machine do not inflate (issue 17).
    pub cleaner_cpu_ns_per_byte_copied: f64,
    /// Live entry bytes ÷ memory at the end of the window.
    pub live_fraction_end: f64,
    pub tombstone_fraction_end: f64,
    pub objects: u64,
    pub memory_bytes: u64,
    /// Share of memory that ordinary writes may never use (the log's emergency,
    /// cleaner and delete reserves).
    pub reserved_fraction: f64,
    /// Target utilisation as a share of the memory writes may use: what the cleaner
    /// really works against.
    pub usable_utilization: f64,
    pub preload_seconds: f64,
    pub warmup_seconds: f64,
    /// Key + value bytes written in the warm-up.
    pub warmup_bytes: u64,
    /// Whether the cleaner ran during the warm-up (steady state).
    pub cleaning_started: bool,
    pub measure_seconds: f64,
    pub measured_writes: u64,
    pub measured_bytes: u64,
    /// Bytes through the replica sink per second in the window.
    pub backup_mb_per_sec: f64,
    /// Share of the window the writer waited for the backup link.
    pub writer_backup_wait_fraction: f64,
    pub nospace_retries: u64,
    pub stalled_seconds: f64,
    pub max_stall_ms: f64,
    /// Means over the window (sampled every 10 ms) of memory fractions: seglets free
    /// in the pool, seglets waiting for their epoch, and bytes of dead entries in
    /// segments (memory the cleaner can win back).
    pub mean_free_fraction: f64,
    pub mean_retired_fraction: f64,
    pub mean_dead_fraction: f64,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct RunSpec {
    pub(super) value_size: usize,
    pub(super) dist: Dist,
    pub(super) utilization: f64,
    pub(super) two_level: bool,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Budget {
    pub(super) memory_bytes: u64,
    pub(super) backup_mbps: u64,
    pub(super) warmup: Duration,
    pub(super) measure: Duration,
    pub(super) stall: Duration,
    pub(super) seed: u64,
    pub(super) tombstone_share: Option<f64>,
    pub(super) clean_ahead_segments: Option<usize>,
    pub(super) cleaner_threads: usize,
}

/// Writes object `id` with `value`, counting key + value bytes.
pub(super) fn put(
    store: &ObjectStore,
    bp: &mut Backpressure,
    id: u64,
    value: &[u8],
    key_buf: &mut [u8; 16],
) -> anyhow::Result<u64> {
    let key = key_of(id, key_buf);
    bp.write(store, TABLE, key, value)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((key.len() + value.len()) as u64)
}

pub(super) fn passes(s: &LogStats) -> u64 {
    s.compactions + s.combined_passes
}

pub(super) fn run_one(spec: RunSpec, budget: Budget) -> CleanerRun {
    let mut out = CleanerRun {
        value_size: spec.value_size,
        distribution: spec.dist.name(),
        utilization: spec.utilization,
        mode: mode_name(spec.two_level),
        completed: false,
        error: None,
        ops_per_sec: 0.0,
        cleaner_bytes_per_write_byte: 0.0,
        memory_copy_per_write_byte: 0.0,
        compactions: 0,
        combined_passes: 0,
        incremental_combined_passes: 0,
        passes_without_memory: 0,
        combined_passes_refused: 0,
        cleaner_cpu_seconds: 0.0,
        survivor_sync_seconds: 0.0,
        cleaner_idle_seconds: 0.0,
        cleaner_idle_waits: 0,
        cleaner_bytes_copied: 0,
        cleaner_cpu_ns_per_byte_copied: 0.0,
        live_fraction_end: 0.0,
        tombstone_fraction_end: 0.0,
        objects: 0,
        memory_bytes: budget.memory_bytes,
        reserved_fraction: 0.0,
        usable_utilization: 0.0,
        preload_seconds: 0.0,
        warmup_seconds: 0.0,
        warmup_bytes: 0,
        cleaning_started: false,
        measure_seconds: 0.0,
        measured_writes: 0,
        measured_bytes: 0,
        backup_mb_per_sec: 0.0,
        writer_backup_wait_fraction: 0.0,
        nospace_retries: 0,
        stalled_seconds: 0.0,
        max_stall_ms: 0.0,
        mean_free_fraction: 0.0,
        mean_retired_fraction: 0.0,
        mean_dead_fraction: 0.0,
    };
    if let Err(e) = measure(spec, budget, &mut out) {
        out.error = Some(format!("{e:#}"));
    }
    out
}

pub(super) fn measure(spec: RunSpec, budget: Budget, out: &mut CleanerRun) -> anyhow::Result<()> {
    let m = budget.memory_bytes;
    let sink = Arc::new(ThrottledReplicas::new(budget.backup_mbps));
    let mut config = StoreConfig::new(m as usize);
    config.segment_bytes = SEGMENT_BYTES;
    config.compaction = spec.two_level;
    config.replicas = sink.clone();
    config.cleaner = ramstore_master::CleanerMode::Background {
        threads: budget.cleaner_threads.max(1),
    };
    if let Some(share) = budget.tombstone_share {
        config.tombstone_share_for_combined = share;
    }
    if let Some(n) = budget.clean_ahead_segments {
        config.clean_ahead_segments = n;
    }
    // Object count estimate: entries of ~12-byte keys plus ~12 bytes of header.
    let entry_estimate = spec.value_size as u64 + 24;
    let expected = (spec.utilization * m as f64) as u64 / entry_estimate;
    config.hash_table_buckets = Some((expected / 4).max(1) as usize);
    let store = ObjectStore::new(config).context("create store")?;
    store.add_tablet(TABLE, 0, u64::MAX).context("add tablet")?;
    let reserves = store.log().pool().reserves();
    let reserved = (reserves.emergency_seglets + reserves.cleaner_seglets + reserves.delete_seglets)
        as f64
        / store.log().pool().seglet_count() as f64;
    out.reserved_fraction = reserved;
    out.usable_utilization = spec.utilization / (1.0 - reserved);
    let value: Vec<u8> = (0..spec.value_size).map(|i| (i % 251) as u8).collect();
    let mut key_buf = [0u8; 16];
    let mut bp = Backpressure::with_limit(budget.stall);

    // Preload objects with sequential keys (L§8.1) until live entries reach u × M.
    let t = Instant::now();
    let target = (spec.utilization * m as f64) as u64;
    let mut n = 0u64;
    loop {
        let live = store.log().stats().live_object_bytes;
        if live >= target {
            break;
        }
        // Write half the estimated remainder before looking again (stats take a
        // lock), and one at a time near the end so the target is not overshot.
        let batch = ((target - live) / entry_estimate / 2).max(1);
        for _ in 0..batch {
            put(&store, &mut bp, n, &value, &mut key_buf)
                .with_context(|| format!("preload: {}", crate::memory::diagnostics(&store)))?;
            n += 1;
        }
    }
    out.objects = n;
    out.preload_seconds = t.elapsed().as_secs_f64();

    let picker = Picker::new(n, spec.dist);
    let mut rng = SmallRng::seed_from_u64(budget.seed ^ spec.value_size as u64);
    let two_m = 2 * m;

    // Warm-up: ~2×M bytes or the time bound, and in any case until the cleaner ran.
    let passes0 = passes(&store.log().stats());
    let t = Instant::now();
    let hard_limit = budget.warmup * 4;
    let mut written = 0u64;
    let mut ops = 0u64;
    loop {
        written += put(&store, &mut bp, picker.pick(&mut rng), &value, &mut key_buf)
            .with_context(|| format!("warm-up: {}", crate::memory::diagnostics(&store)))?;
        ops += 1;
        if ops.is_multiple_of(CHECK_EVERY) {
            let el = t.elapsed();
            if written >= two_m || el >= budget.warmup {
                let started = passes(&store.log().stats()) > passes0;
                if started || el >= hard_limit {
                    out.cleaning_started = started;
                    break;
                }
            }
        }
    }
    out.warmup_seconds = t.elapsed().as_secs_f64();
    out.warmup_bytes = written;

    // Measurement window.
    let s0 = store.log().stats();
    let sink0 = sink.stats();
    let bp0 = bp;
    let t = Instant::now();
    let mut written = 0u64;
    let mut ops = 0u64;
    let sampler = MemorySampler::start(&store);
    loop {
        written += put(&store, &mut bp, picker.pick(&mut rng), &value, &mut key_buf)
            .with_context(|| format!("measure: {}", crate::memory::diagnostics(&store)))?;
        ops += 1;
        if ops.is_multiple_of(CHECK_EVERY) && (written >= two_m || t.elapsed() >= budget.measure) {
            break;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let means = sampler.finish();
    out.mean_free_fraction = means[0];
    out.mean_retired_fraction = means[1];
    out.mean_dead_fraction = means[2];
    let s1 = store.log().stats();
    let sink1 = sink.stats();
    let appended = (s1.appended_bytes - s0.appended_bytes).max(1) as f64;
    out.completed = true;
    out.measure_seconds = secs;
    out.measured_writes = ops;
    out.measured_bytes = written;
    out.ops_per_sec = ops as f64 / secs;
    out.cleaner_bytes_per_write_byte =
        (s1.combined_bytes_copied - s0.combined_bytes_copied) as f64 / appended;
    let bytes_copied = (s1.combined_bytes_copied - s0.combined_bytes_copied)
        + (s1.compaction_bytes_copied - s0.compaction_bytes_copied);
    out.memory_copy_per_write_byte = bytes_copied as f64 / appended;
    out.cleaner_bytes_copied = bytes_copied;
    out.compactions = s1.compactions - s0.compactions;
    out.combined_passes = s1.combined_passes - s0.combined_passes;
    out.incremental_combined_passes =
        s1.incremental_combined_passes - s0.incremental_combined_passes;
    out.passes_without_memory = s1.passes_without_memory - s0.passes_without_memory;
    out.combined_passes_refused = s1.combined_passes_refused - s0.combined_passes_refused;
    out.cleaner_cpu_seconds = (s1.cleaner_cpu_ns - s0.cleaner_cpu_ns) as f64 / 1e9;
    out.survivor_sync_seconds = (s1.survivor_sync_ns - s0.survivor_sync_ns) as f64 / 1e9;
    out.cleaner_idle_seconds = (s1.cleaner_idle_ns - s0.cleaner_idle_ns) as f64 / 1e9;
    out.cleaner_idle_waits = s1.cleaner_idle_waits - s0.cleaner_idle_waits;
    out.cleaner_cpu_ns_per_byte_copied =
        (s1.cleaner_cpu_ns - s0.cleaner_cpu_ns) as f64 / bytes_copied.max(1) as f64;
    out.live_fraction_end = s1.live_object_bytes as f64 / s1.memory_bytes as f64;
    out.tombstone_fraction_end = s1.tombstone_bytes as f64 / s1.memory_bytes as f64;
    out.backup_mb_per_sec = (sink1.bytes - sink0.bytes) as f64 / secs / 1e6;
    // The waits of all threads are summed; the writer is the only one besides the
    // cleaner, whose waits are included (so this is an upper bound).
    out.writer_backup_wait_fraction = (sink1.waited_ns - sink0.waited_ns) as f64 / 1e9 / secs;
    out.nospace_retries = bp.nospace - bp0.nospace;
    out.stalled_seconds = (bp.stalled_ns - bp0.stalled_ns) as f64 / 1e9;
    out.max_stall_ms = bp.max_stall_ns as f64 / 1e6;
    Ok(())
}

/// Samples where the store's memory is, every 10 ms, on its own thread: the means
/// show how much of the memory that live data does not fill is free, waiting for
/// its epoch, or dead inside segments (only the last lowers the cost of cleaning).
pub(super) struct MemorySampler {
    pub(super) stop: Arc<std::sync::atomic::AtomicBool>,
    pub(super) thread: std::thread::JoinHandle<[f64; 3]>,
}

impl MemorySampler {
    const INTERVAL: Duration = Duration::from_millis(10);

    pub(super) fn start(store: &ObjectStore) -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let handle = store.log_handle();
        let thread = std::thread::spawn(move || {
            let mut sums = [0f64; 3];
            let mut n = 0u32;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let Some(sample) = handle.with(|log| {
                    let s = log.stats();
                    let m = s.memory_bytes as f64;
                    let seglet = ramstore_log::SEGLET_BYTES as f64;
                    [
                        s.seglets_free as f64 * seglet / m,
                        log.retired_seglets() as f64 * seglet / m,
                        s.dead_bytes as f64 / m,
                    ]
                }) else {
                    break;
                };
                for (sum, x) in sums.iter_mut().zip(sample) {
                    *sum += x;
                }
                n += 1;
                std::thread::sleep(Self::INTERVAL);
            }
            sums.map(|x| x / n.max(1) as f64)
        });
        Self { stop, thread }
    }

    pub(super) fn finish(self) -> [f64; 3] {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap_or([0.0; 3])
    }
}
