//! Scenario `cleaner`: write throughput as a function of memory utilisation, with
//! two-level and one-level cleaning (L§8.1, Figs. 6 and 7).
//!
//! Each run preloads a fresh store until live object entries fill the target share
//! `u` of its memory, then one writer thread overwrites random objects (uniformly, or
//! 90% of writes to a hot 15% of the objects) while the background cleaner runs on its
//! own threads (two by default, as in L§8.1). Every byte the log reports for replication — head appends and combined
//! cleaning's survivor segments — goes through [`ThrottledReplicas`] at the backup
//! bandwidth, so one-level cleaning pays for its disk traffic as it does in the paper.
//!
//! Throughput is measured only after a warm-up that has written about twice the
//! memory size (or a time bound, whichever comes first) *and* seen the cleaner run:
//! before the cleaner starts, a store at any utilisation is just appending.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use ramstore_log::LogStats;
use ramstore_master::{ObjectStore, StoreConfig};

use crate::report::{self, Machine, Table};
use crate::retry::Backpressure;
use crate::throttle::ThrottledReplicas;

const TABLE: u64 = 1;
const MIB: u64 = 1 << 20;
/// L§8.1 keeps 8 MiB segments; so does every run here.
const SEGMENT_BYTES: usize = 8 << 20;
/// Hot set of the skewed ("zipfian") distribution: 15% of the objects (3 of every 20
/// ids, spread over the whole key space) get 90% of the writes (L§8.1).
const HOT_PER_20: u64 = 3;
const HOT_WRITE_SHARE: f64 = 0.9;
/// The clock is read once per this many writes in the measurement loop.
const CHECK_EVERY: u64 = 16;

/// `cleaner`: throughput vs utilisation (L Fig. 6).
#[derive(Debug, clap::Args)]
pub struct CleanerArgs {
    /// 128 MiB of log memory and short time bounds (whole run under ~5 minutes).
    #[arg(long)]
    pub quick: bool,
    /// Backup bandwidth in MB/s shared by head appends and survivor segments
    /// (0 = unthrottled).
    #[arg(long, default_value_t = 700)]
    pub backup_mbps: u64,
    /// Log memory in MiB (default 1024, or 128 with --quick).
    #[arg(long)]
    pub memory_mib: Option<u64>,
    /// Value sizes in bytes.
    #[arg(long, value_delimiter = ',', default_values_t = [100usize, 1000, 10000])]
    pub values: Vec<usize>,
    /// Memory utilisations in percent.
    #[arg(long, value_delimiter = ',', default_values_t = [30u32, 50, 70, 80, 90])]
    pub utilizations: Vec<u32>,
    /// Access patterns: uniform, zipfian.
    #[arg(long, value_delimiter = ',', default_values_t = [String::from("uniform"), String::from("zipfian")])]
    pub distributions: Vec<String>,
    /// Cleaning modes: two-level, one-level.
    #[arg(long, value_delimiter = ',', default_values_t = [String::from("two-level"), String::from("one-level")])]
    pub modes: Vec<String>,
    /// Most seconds of warm-up once ~2× memory has not been written yet (the warm-up
    /// goes on past this until the cleaner has run). Default 15, or 2 with --quick.
    #[arg(long)]
    pub warmup_secs: Option<f64>,
    /// Most seconds of measurement. Default 10, or 1.5 with --quick.
    #[arg(long)]
    pub measure_secs: Option<f64>,
    /// Give up on a run after this many seconds without a successful write
    /// (default 30, or 10 with --quick, so a stuck point does not eat the budget).
    #[arg(long)]
    pub stall_secs: Option<f64>,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Share of freeable memory live tombstones may take before combined cleaning is
    /// forced (default: the store's, 0.4 as in L§5.2).
    #[arg(long)]
    pub tombstone_share: Option<f64>,
    /// Most segments' worth of memory the cleaner keeps free ahead of the writer
    /// (default: the store's, 2; 0 = L§5.2's rule alone).
    #[arg(long)]
    pub clean_ahead_segments: Option<usize>,
    /// Cleaner threads. Two by default, as in L§8.1 ("all of our experiments used a
    /// maximum of two threads for cleaning"): a writer waiting for space leaves its
    /// core to the second one (L§6).
    #[arg(long, default_value_t = 2)]
    pub cleaner_threads: usize,
    /// Where to write the JSON report.
    #[arg(long)]
    pub json: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dist {
    Uniform,
    Zipfian,
}

impl Dist {
    fn parse(s: &str) -> anyhow::Result<Self> {
        match s {
            "uniform" => Ok(Dist::Uniform),
            "zipfian" | "zipf" => Ok(Dist::Zipfian),
            _ => bail!("unknown distribution {s:?} (uniform, zipfian)"),
        }
    }
    fn name(self) -> &'static str {
        match self {
            Dist::Uniform => "uniform",
            Dist::Zipfian => "zipfian",
        }
    }
}

fn parse_mode(s: &str) -> anyhow::Result<bool> {
    match s {
        "two-level" => Ok(true),
        "one-level" => Ok(false),
        _ => bail!("unknown mode {s:?} (two-level, one-level)"),
    }
}

fn mode_name(two_level: bool) -> &'static str {
    if two_level {
        "two-level"
    } else {
        "one-level"
    }
}

/// Picks object ids to overwrite.
struct Picker {
    n: u64,
    dist: Dist,
    hot: u64,
    cold: u64,
}

impl Picker {
    fn new(n: u64, dist: Dist) -> Self {
        let hot = HOT_PER_20 * (n / 20) + (n % 20).min(HOT_PER_20);
        Self {
            n,
            dist,
            hot,
            cold: n - hot,
        }
    }

    fn pick(&self, rng: &mut SmallRng) -> u64 {
        match self.dist {
            Dist::Uniform => rng.gen_range(0..self.n),
            Dist::Zipfian => {
                // Ids with id % 20 < 3 are hot: k-th hot id = 20·(k/3) + k%3, k-th
                // cold id = 20·(k/17) + 3 + k%17.
                let cold_per_20 = 20 - HOT_PER_20;
                if self.cold == 0 || (self.hot > 0 && rng.gen_bool(HOT_WRITE_SHARE)) {
                    let k = rng.gen_range(0..self.hot);
                    20 * (k / HOT_PER_20) + k % HOT_PER_20
                } else {
                    let k = rng.gen_range(0..self.cold);
                    20 * (k / cold_per_20) + HOT_PER_20 + k % cold_per_20
                }
            }
        }
    }
}

/// Key of object `id`: its 8 bytes, padded to 8–16 bytes (length fixed per id).
fn key_of(id: u64, buf: &mut [u8; 16]) -> &[u8] {
    buf[..8].copy_from_slice(&id.to_le_bytes());
    buf[8..].fill(b'.');
    // A cheap mix of the id picks the length, so a key's length never changes.
    let len = 8 + (id.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60) as usize % 9;
    &buf[..len]
}

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
    /// Passes in the window that found work but no memory for their output.
    pub passes_without_memory: u64,
    /// Combined passes in the window that read their victims and gave them back.
    pub combined_passes_refused: u64,
    pub cleaner_cpu_seconds: f64,
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
struct RunSpec {
    value_size: usize,
    dist: Dist,
    utilization: f64,
    two_level: bool,
}

#[derive(Debug, Clone, Copy)]
struct Budget {
    memory_bytes: u64,
    backup_mbps: u64,
    warmup: Duration,
    measure: Duration,
    stall: Duration,
    seed: u64,
    tombstone_share: Option<f64>,
    clean_ahead_segments: Option<usize>,
    cleaner_threads: usize,
}

/// Writes object `id` with `value`, counting key + value bytes.
fn put(
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

fn passes(s: &LogStats) -> u64 {
    s.compactions + s.combined_passes
}

fn run_one(spec: RunSpec, budget: Budget) -> CleanerRun {
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
        passes_without_memory: 0,
        combined_passes_refused: 0,
        cleaner_cpu_seconds: 0.0,
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

fn measure(spec: RunSpec, budget: Budget, out: &mut CleanerRun) -> anyhow::Result<()> {
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
    out.passes_without_memory = s1.passes_without_memory - s0.passes_without_memory;
    out.combined_passes_refused = s1.combined_passes_refused - s0.combined_passes_refused;
    out.cleaner_cpu_seconds = (s1.cleaner_cpu_ns - s0.cleaner_cpu_ns) as f64 / 1e9;
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
struct MemorySampler {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<[f64; 3]>,
}

impl MemorySampler {
    const INTERVAL: Duration = Duration::from_millis(10);

    fn start(store: &ObjectStore) -> Self {
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

    fn finish(self) -> [f64; 3] {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap_or([0.0; 3])
    }
}

#[derive(Debug, Serialize)]
struct CleanerReport {
    machine: Machine,
    command: String,
    memory_bytes: u64,
    segment_bytes: usize,
    backup_mbps: u64,
    warmup_secs: f64,
    measure_secs: f64,
    runs: Vec<CleanerRun>,
    checks: Vec<Check>,
    total_seconds: f64,
}

#[derive(Debug, Serialize)]
struct Check {
    name: String,
    ratio: Option<f64>,
    threshold: f64,
    pass: Option<bool>,
    /// Why there is no ratio (a run missing or stalled).
    note: Option<String>,
}

pub fn run(args: &CleanerArgs) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let mut machine = Machine::probe();
    let memory_bytes = args
        .memory_mib
        .unwrap_or(if args.quick { 128 } else { 1024 })
        * MIB;
    let budget = Budget {
        memory_bytes,
        backup_mbps: args.backup_mbps,
        warmup: Duration::from_secs_f64(args.warmup_secs.unwrap_or(if args.quick {
            2.0
        } else {
            15.0
        })),
        measure: Duration::from_secs_f64(args.measure_secs.unwrap_or(if args.quick {
            1.5
        } else {
            10.0
        })),
        stall: Duration::from_secs_f64(args.stall_secs.unwrap_or(if args.quick {
            10.0
        } else {
            30.0
        })),
        seed: args.seed,
        tombstone_share: args.tombstone_share,
        clean_ahead_segments: args.clean_ahead_segments,
        cleaner_threads: args.cleaner_threads,
    };
    let dists = args
        .distributions
        .iter()
        .map(|d| Dist::parse(d))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let modes = args
        .modes
        .iter()
        .map(|m| parse_mode(m))
        .collect::<anyhow::Result<Vec<_>>>()?;
    eprintln!(
        "cleaner: memory {}, segments 8 MiB, backup {} MB/s, warm-up ≤{:?} (until cleaning), measure ≤{:?}",
        report::human_bytes(memory_bytes),
        args.backup_mbps,
        budget.warmup,
        budget.measure
    );
    let mut runs = Vec::new();
    for &value_size in &args.values {
        for &dist in &dists {
            for &two_level in &modes {
                for &u in &args.utilizations {
                    let spec = RunSpec {
                        value_size,
                        dist,
                        utilization: u as f64 / 100.0,
                        two_level,
                    };
                    let t = Instant::now();
                    let r = run_one(spec, budget);
                    eprintln!(
                        "  {:>5} B {:<7} {:<9} {:>3}%: {:>9} writes/s  cleaner/write {:.2}  copy/write {:.2}  compactions {} combined {} no-memory {} refused {}  live {:.3}  tomb {:.3}  free {:.3} retired {:.3} dead {:.3}  cpu {:.2}s ({:.2} ns/B copied)  stalled {:.2}s  nospace {}  ({:.1}s){}",
                        value_size,
                        dist.name(),
                        mode_name(two_level),
                        u,
                        report::kilo(r.ops_per_sec),
                        r.cleaner_bytes_per_write_byte,
                        r.memory_copy_per_write_byte,
                        r.compactions,
                        r.combined_passes,
                        r.passes_without_memory,
                        r.combined_passes_refused,
                        r.live_fraction_end,
                        r.tombstone_fraction_end,
                        r.mean_free_fraction,
                        r.mean_retired_fraction,
                        r.mean_dead_fraction,
                        r.cleaner_cpu_seconds,
                        r.cleaner_cpu_ns_per_byte_copied,
                        r.stalled_seconds,
                        r.nospace_retries,
                        t.elapsed().as_secs_f64(),
                        r.error.as_deref().map(|e| format!("  ERROR: {e}")).unwrap_or_default()
                    );
                    runs.push(r);
                }
            }
        }
    }
    print_figure(&runs, &args.utilizations);
    if let Some(r) = runs.iter().find(|r| r.reserved_fraction > 0.0) {
        println!(
            "\nThe log keeps {:.1}% of its {} for its reserves (cleaner, deletes, emergency heads): \
             {}% utilisation is {:.1}% of the memory writes may use.",
            100.0 * r.reserved_fraction,
            report::human_bytes(memory_bytes),
            args.utilizations.iter().max().copied().unwrap_or(90),
            100.0 * args.utilizations.iter().max().copied().unwrap_or(90) as f64
                / 100.0
                / (1.0 - r.reserved_fraction)
        );
    }
    let checks = checks(&runs);
    for c in &checks {
        println!(
            "{}: {} (need ≥ {:.2}) {}{}",
            c.name,
            c.ratio.map_or("n/a".to_string(), |r| format!("{r:.2}")),
            c.threshold,
            match c.pass {
                Some(true) => "PASS",
                Some(false) => "FAIL",
                None => "NO MEASUREMENT",
            },
            c.note
                .as_deref()
                .map(|n| format!(" [{n}]"))
                .unwrap_or_default()
        );
    }
    machine.finish();
    let report = CleanerReport {
        machine,
        command: report::command_line(),
        memory_bytes,
        segment_bytes: SEGMENT_BYTES,
        backup_mbps: args.backup_mbps,
        warmup_secs: budget.warmup.as_secs_f64(),
        measure_secs: budget.measure.as_secs_f64(),
        runs,
        checks,
        total_seconds: t0.elapsed().as_secs_f64(),
    };
    report::write_json(&args.json, &report)
}

fn find<'a>(
    runs: &'a [CleanerRun],
    value: usize,
    dist: &str,
    mode: &str,
    u: f64,
) -> Option<&'a CleanerRun> {
    runs.iter().find(|r| {
        r.value_size == value
            && r.distribution == dist
            && r.mode == mode
            && (r.utilization - u).abs() < 1e-9
    })
}

/// `num / den ≥ threshold`, judged only when both runs completed: a run that stalled
/// (no write went through for the stall limit) measured no throughput at all.
fn ratio_check(
    name: &str,
    num: Option<&CleanerRun>,
    den: Option<&CleanerRun>,
    threshold: f64,
) -> Check {
    let describe = |r: Option<&CleanerRun>| match r {
        None => "not run".to_string(),
        Some(r) if !r.completed => format!(
            "{} B {} {} {:.0}% did not complete ({})",
            r.value_size,
            r.distribution,
            r.mode,
            100.0 * r.utilization,
            r.error
                .as_deref()
                .and_then(|e| e.rsplit(": ").next())
                .unwrap_or("error")
        ),
        Some(_) => String::new(),
    };
    let (ratio, note) = match (num, den) {
        (Some(a), Some(b)) if a.completed && b.completed && b.ops_per_sec > 0.0 => {
            (Some(a.ops_per_sec / b.ops_per_sec), None)
        }
        _ => (
            None,
            Some(
                [describe(num), describe(den)]
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
        ),
    };
    Check {
        name: name.to_string(),
        ratio,
        threshold,
        pass: ratio.map(|r| r >= threshold),
        note,
    }
}

fn checks(runs: &[CleanerRun]) -> Vec<Check> {
    let mut v = vec![ratio_check(
        "100 B uniform two-level: 90% / 30% throughput",
        find(runs, 100, "uniform", "two-level", 0.9),
        find(runs, 100, "uniform", "two-level", 0.3),
        0.5,
    )];
    for dist in ["uniform", "zipfian"] {
        v.push(ratio_check(
            &format!("10,000 B {dist} at 90%: two-level / one-level throughput"),
            find(runs, 10_000, dist, "two-level", 0.9),
            find(runs, 10_000, dist, "one-level", 0.9),
            2.0,
        ));
    }
    v
}

fn print_figure(runs: &[CleanerRun], utilizations: &[u32]) {
    let mut header = vec!["value  dist     mode".to_string()];
    header.extend(utilizations.iter().map(|u| format!("{u}%")));
    let header_refs: Vec<&str> = header.iter().map(|s| s.as_str()).collect();
    let mut ops = Table::new(&header_refs);
    let mut cleaner = Table::new(&header_refs);
    let mut seen: Vec<(usize, &str, &str)> = Vec::new();
    for r in runs {
        let k = (r.value_size, r.distribution, r.mode);
        if !seen.contains(&k) {
            seen.push(k);
        }
    }
    for (value, dist, mode) in seen {
        let label = format!("{value:>5}  {dist:<7}  {mode}");
        let cell = |u: u32, f: &dyn Fn(&CleanerRun) -> String| {
            runs.iter()
                .find(|r| {
                    r.value_size == value
                        && r.distribution == dist
                        && r.mode == mode
                        && (r.utilization - u as f64 / 100.0).abs() < 1e-9
                })
                .map_or("-".to_string(), |r| {
                    if r.completed {
                        f(r)
                    } else {
                        "FAIL".to_string()
                    }
                })
        };
        let mut row = vec![label.clone()];
        row.extend(
            utilizations
                .iter()
                .map(|&u| cell(u, &|r| report::kilo(r.ops_per_sec))),
        );
        ops.row(row);
        let mut row = vec![label];
        row.extend(utilizations.iter().map(|&u| {
            cell(u, &|r| {
                format!(
                    "{:.2}/{:.2}",
                    r.cleaner_bytes_per_write_byte, r.memory_copy_per_write_byte
                )
            })
        }));
        cleaner.row(row);
    }
    println!("\nWrite throughput (writes/s) vs memory utilisation (cf. L Fig. 6)");
    print!("{}", ops.render());
    println!(
        "\nCleaner bytes per byte written: to backups (combined) / copied in memory (all) (cf. L Fig. 7)"
    );
    print!("{}", cleaner.render());
}
