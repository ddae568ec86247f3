//! Scenario `memory`: memory efficiency under the changing workloads of L Table 1,
//! ramstore against one `malloc` per object (L§2, Fig. 1).
//!
//! For each workload the parent process
//! 1. replays the workload without a store (a *sizing pass*) to learn the largest
//!    number of live objects and the largest footprint of live log entries (key +
//!    value + the entry's own header and checksum, as `object_entry_len` computes it);
//! 2. runs it in a child process against ramstore, whose log gets just enough memory
//!    for those live entries to fill `--utilization` of it (default
//!    [`DEFAULT_UTILIZATION`]);
//! 3. runs it in another child process against a `HashMap<u64, Box<[u8]>>` that
//!    makes one heap allocation per object under the system allocator, and reads
//!    that child's peak RSS.
//!
//! Children keep the measurements clean: each process's peak RSS covers one store
//! only, and the allocator starts from a fresh heap.
//!
//! Both children allocate (and touch) the generator's bookkeeping before they read
//! their starting RSS, so only the store's own memory is counted.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use ramstore_log::entry::{object_entry_len, tombstone_entry_len};
use ramstore_log::SEGLET_BYTES;
use ramstore_master::{ObjectStore, StoreConfig};

use crate::report::{self, Machine, Table};
use crate::retry::{Abort, Backpressure};
use crate::workload::{self, Counts, Executor, Generator, LiveObj, Scale, WorkloadSpec};

/// Live log entries fill this share of the log's memory at the largest footprint,
/// unless `--utilization` says otherwise (the Must is judged at 90%).
pub const DEFAULT_UTILIZATION: f64 = 0.9;
/// Highest utilisation the bench accepts: L§7's deadlock-free limit is about 98% of
/// memory, and the cleaner's reserves and tombstones need the rest.
pub const MAX_UTILIZATION: f64 = 0.97;
/// The table all objects go to.
const TABLE: u64 = 1;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// `memory`: run W1–W8 against ramstore and the malloc baseline.
#[derive(Debug, clap::Args)]
pub struct MemoryArgs {
    /// 64 MiB live / 320 MiB allocated per phase instead of 1 GiB / 5 GiB.
    #[arg(long)]
    pub quick: bool,
    /// Workloads to run, comma separated (default: all eight).
    #[arg(long, value_delimiter = ',')]
    pub workloads: Vec<String>,
    /// Live key + value bytes, in MiB (overrides the default / --quick).
    #[arg(long)]
    pub live_mib: Option<u64>,
    /// Segment size in MiB. Default 8, or 2 with --quick: the cleaner keeps a whole
    /// segment in reserve, and a 78 MiB log cannot spare 8 MiB (10%) and still reach
    /// 90%; with 2 MiB segments the reserve is 3% and all eight workloads complete.
    #[arg(long)]
    pub segment_mib: Option<u64>,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Share of the log's memory that live entries fill at their largest (L§8.1's
    /// memory utilisation), 0.5 to 0.97. The log is sized from it.
    #[arg(long, default_value_t = DEFAULT_UTILIZATION, value_parser = parse_utilization)]
    pub utilization: f64,
    /// Where to write the JSON report.
    #[arg(long)]
    pub json: PathBuf,
}

/// What a child is told to run (also the hidden subcommands' arguments).
#[derive(Debug, Clone, clap::Args)]
pub struct ChildArgs {
    #[arg(long)]
    pub workload: String,
    #[arg(long)]
    pub live_bytes: u64,
    #[arg(long)]
    pub alloc_bytes: u64,
    #[arg(long)]
    pub seed: u64,
    /// Most live objects at once (from the sizing pass): sizes the bookkeeping, the
    /// hash table and the baseline's map.
    #[arg(long)]
    pub max_objects: u64,
    /// Log memory (ramstore only).
    #[arg(long, default_value_t = 0)]
    pub memory_bytes: u64,
    #[arg(long, default_value_t = 8 << 20)]
    pub segment_bytes: u64,
}

/// Result of the sizing pass.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sizing {
    pub max_live_objects: u64,
    /// Largest total of live object entry bytes at any time.
    pub max_live_entry_bytes: u64,
    /// Average entry overhead (entry − key − value bytes) of the live objects at that
    /// time.
    pub entry_overhead_avg: f64,
    pub writes: u64,
    pub deletes: u64,
    pub final_live_kv_bytes: u64,
}

/// The sizing pass: replays the workload, estimating each entry's length the way the
/// log will encode it (version and birth stamp grow as the run goes on).
struct Sizer {
    segment_bytes: u64,
    appended: u64,
    live_entry: u64,
    live_kv: u64,
    live_objects: u64,
    max_live_entry: u64,
    kv_at_max: u64,
    objects_at_max: u64,
    max_objects: u64,
}

impl Executor for Sizer {
    type Error = Infallible;

    fn write(&mut self, obj: &mut LiveObj, key: &[u8], value: &[u8]) -> Result<(), Infallible> {
        // The log stamps entries with its clock: bytes appended, in 64 KiB units.
        let birth = self.appended >> 16;
        let len = object_entry_len(TABLE, obj.version as u64, birth, key.len(), value.len());
        let overhead = len - key.len() - value.len();
        // At most 38 bytes (all varints at their longest), so it fits a byte.
        obj.aux = overhead as u8;
        self.appended += len as u64;
        self.live_entry += len as u64;
        self.live_kv += (key.len() + value.len()) as u64;
        self.live_objects += 1;
        if self.live_entry > self.max_live_entry {
            self.max_live_entry = self.live_entry;
            self.kv_at_max = self.live_kv;
            self.objects_at_max = self.live_objects;
        }
        self.max_objects = self.max_objects.max(self.live_objects);
        Ok(())
    }

    fn delete(&mut self, obj: &LiveObj, key: &[u8]) -> Result<(), Infallible> {
        let segment_id = self.appended / self.segment_bytes + 1;
        self.appended +=
            tombstone_entry_len(TABLE, obj.version as u64, segment_id, key.len()) as u64;
        self.live_entry -= obj.kv_bytes() + obj.aux as u64;
        self.live_kv -= obj.kv_bytes();
        self.live_objects -= 1;
        Ok(())
    }
}

pub fn size_workload(spec: &WorkloadSpec, scale: Scale, segment_bytes: u64) -> Sizing {
    let mut live = Vec::new();
    let mut sizer = Sizer {
        segment_bytes,
        appended: 0,
        live_entry: 0,
        live_kv: 0,
        live_objects: 0,
        max_live_entry: 0,
        kv_at_max: 0,
        objects_at_max: 0,
        max_objects: 0,
    };
    let counts = match Generator::new(spec, scale.seed, &mut live).run(spec, scale, &mut sizer) {
        Ok(c) => c,
        Err(never) => match never {},
    };
    Sizing {
        max_live_objects: sizer.max_objects,
        max_live_entry_bytes: sizer.max_live_entry,
        entry_overhead_avg: (sizer.max_live_entry - sizer.kv_at_max) as f64
            / sizer.objects_at_max.max(1) as f64,
        writes: counts.writes,
        deletes: counts.deletes,
        final_live_kv_bytes: counts.live_kv_bytes,
    }
}

/// `--utilization`: a share between 0.5 and [`MAX_UTILIZATION`].
fn parse_utilization(s: &str) -> Result<f64, String> {
    let u: f64 = s.parse().map_err(|e| format!("not a number: {e}"))?;
    if !(0.5..=MAX_UTILIZATION).contains(&u) {
        return Err(format!("must be between 0.5 and {MAX_UTILIZATION}"));
    }
    Ok(u)
}

/// Log memory for a workload: live entries at their largest fill `utilization` of
/// it, rounded up to whole seglets.
pub fn memory_for(sizing: &Sizing, utilization: f64) -> u64 {
    let bytes = (sizing.max_live_entry_bytes as f64 / utilization).ceil() as u64;
    bytes.div_ceil(SEGLET_BYTES as u64) * SEGLET_BYTES as u64
}

/// Bookkeeping for the generator, allocated and touched up front so it does not
/// show up as store memory in the RSS readings.
fn prefaulted_live_vec(max_objects: u64) -> Vec<LiveObj> {
    let cap = max_objects as usize + 16;
    let mut v = Vec::with_capacity(cap);
    v.resize(cap, LiveObj::default());
    v.clear();
    v
}

/// Cleaner counters of a ramstore run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CleanerReport {
    pub compactions: u64,
    pub combined_passes: u64,
    pub segments_cleaned: u64,
    pub compaction_bytes_copied: u64,
    pub combined_bytes_copied: u64,
    pub tombstones_dropped: u64,
    pub emergency_heads: u64,
    pub cpu_seconds: f64,
}

impl CleanerReport {
    pub fn from_stats(s: &ramstore_log::LogStats) -> Self {
        Self {
            compactions: s.compactions,
            combined_passes: s.combined_passes,
            segments_cleaned: s.segments_cleaned,
            compaction_bytes_copied: s.compaction_bytes_copied,
            combined_bytes_copied: s.combined_bytes_copied,
            tombstones_dropped: s.tombstones_dropped,
            emergency_heads: s.emergency_heads,
            cpu_seconds: s.cleaner_cpu_ns as f64 / 1e9,
        }
    }
}

/// What the ramstore child reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RamstoreChild {
    pub completed: bool,
    pub error: Option<String>,
    pub writes: u64,
    pub deletes: u64,
    /// Writes + deletes that succeeded (also for a run that stopped early).
    pub ops_done: u64,
    pub seconds: f64,
    pub live_objects: u64,
    pub live_kv_bytes: u64,
    pub memory_bytes: u64,
    pub segment_bytes: u64,
    pub hash_table_buckets: u64,
    pub hash_table_bytes: u64,
    /// Live object entry bytes at the end of the run.
    pub live_entry_bytes: u64,
    /// Largest live object entry bytes sampled during the run.
    pub peak_live_entry_bytes: u64,
    pub tombstone_bytes: u64,
    pub store_objects: u64,
    pub rss_before: u64,
    pub peak_rss: u64,
    pub nospace_retries: u64,
    pub stalled_ops: u64,
    pub stalled_seconds: f64,
    pub max_stall_ms: f64,
    /// Live objects read back after the run and compared with what was written.
    pub verified_objects: u64,
    pub verify_errors: u64,
    /// Deletes of objects the store no longer had.
    pub missing_on_delete: u64,
    pub cleaner: CleanerReport,
    pub phase_seconds: Vec<f64>,
    /// When the run stopped early: the log's statistics and the balancer's view at
    /// that moment (evidence for a stuck cleaner).
    pub stop_diagnostics: Option<String>,
}

/// What the malloc baseline child reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BaselineChild {
    pub writes: u64,
    pub deletes: u64,
    pub seconds: f64,
    pub live_objects: u64,
    pub live_kv_bytes: u64,
    pub rss_before: u64,
    pub peak_rss: u64,
    /// The map's capacity (set from the sizing pass, like ramstore's hash table).
    pub map_capacity: u64,
}

/// Executes a workload against ramstore.
struct RamExec<'s> {
    store: &'s ObjectStore,
    bp: Backpressure,
    ops: u64,
    peak_live_entry: u64,
    missing_on_delete: u64,
    started: Instant,
    last_report: Instant,
    phase_started: Instant,
    phase_seconds: Vec<f64>,
    phase: u8,
}

/// Store statistics are sampled once per this many operations (they take a lock).
const SAMPLE_EVERY: u64 = 1 << 14;

impl RamExec<'_> {
    fn tick(&mut self) {
        self.ops += 1;
        if self.ops.is_multiple_of(SAMPLE_EVERY) {
            let s = self.store.log().stats();
            self.peak_live_entry = self.peak_live_entry.max(s.live_object_bytes);
            if self.last_report.elapsed().as_secs() >= 10 {
                self.last_report = Instant::now();
                eprintln!(
                    "    ramstore phase {} ops {} ({:.0}s) live {:.3} free seglets {} nospace {}",
                    self.phase,
                    self.ops,
                    self.started.elapsed().as_secs_f64(),
                    s.live_object_bytes as f64 / s.memory_bytes as f64,
                    s.seglets_free,
                    self.bp.nospace
                );
            }
        }
    }
}

impl Executor for RamExec<'_> {
    type Error = Abort;

    fn write(&mut self, _obj: &mut LiveObj, key: &[u8], value: &[u8]) -> Result<(), Abort> {
        self.bp.write(self.store, TABLE, key, value)?;
        self.tick();
        Ok(())
    }

    fn delete(&mut self, _obj: &LiveObj, key: &[u8]) -> Result<(), Abort> {
        if !self.bp.remove(self.store, TABLE, key)? {
            self.missing_on_delete += 1;
        }
        self.tick();
        Ok(())
    }

    fn phase(&mut self, n: u8) {
        if n > 1 {
            self.phase_seconds
                .push(self.phase_started.elapsed().as_secs_f64());
        }
        self.phase_started = Instant::now();
        self.phase = n;
    }
}

/// Hidden subcommand `memory-ramstore`: one workload against ramstore; JSON on stdout.
pub fn run_ramstore_child(args: &ChildArgs) -> anyhow::Result<()> {
    let spec = workload::find(&args.workload).context("unknown workload")?;
    let scale = Scale {
        live_target: args.live_bytes,
        alloc_bytes: args.alloc_bytes,
        seed: args.seed,
        key_bytes: None,
    };
    let mut live = prefaulted_live_vec(args.max_objects);
    let rss_before = report::rss_bytes()?;

    let mut config = StoreConfig::new(args.memory_bytes as usize);
    config.segment_bytes = args.segment_bytes as usize;
    // One bucket (8 slots) per 4 objects at the largest object count: buckets about
    // half full, so overflow chains stay rare.
    let buckets = (args.max_objects / 4).max(1);
    config.hash_table_buckets = Some(buckets as usize);
    let store = ObjectStore::new(config).context("create store")?;
    store.add_tablet(TABLE, 0, u64::MAX).context("add tablet")?;

    let mut exec = RamExec {
        store: &store,
        bp: Backpressure::default(),
        ops: 0,
        peak_live_entry: 0,
        missing_on_delete: 0,
        started: Instant::now(),
        last_report: Instant::now(),
        phase_started: Instant::now(),
        phase_seconds: Vec::new(),
        phase: 1,
    };
    let started = Instant::now();
    let outcome = Generator::new(spec, scale.seed, &mut live).run(spec, scale, &mut exec);
    let seconds = started.elapsed().as_secs_f64();
    exec.phase_seconds
        .push(exec.phase_started.elapsed().as_secs_f64());
    let peak_rss = report::peak_rss_bytes()?;
    let stats = store.stats();

    let mut out = RamstoreChild {
        memory_bytes: args.memory_bytes,
        segment_bytes: args.segment_bytes,
        hash_table_buckets: buckets,
        hash_table_bytes: stats.hash_table_bytes as u64,
        live_entry_bytes: stats.log.live_object_bytes,
        peak_live_entry_bytes: exec.peak_live_entry.max(stats.log.live_object_bytes),
        tombstone_bytes: stats.log.tombstone_bytes,
        store_objects: stats.objects as u64,
        rss_before,
        peak_rss,
        seconds,
        ops_done: exec.ops,
        nospace_retries: exec.bp.nospace,
        stalled_ops: exec.bp.stalled_ops,
        stalled_seconds: exec.bp.stalled_ns as f64 / 1e9,
        max_stall_ms: exec.bp.max_stall_ns as f64 / 1e6,
        missing_on_delete: exec.missing_on_delete,
        cleaner: CleanerReport::from_stats(&stats.log),
        phase_seconds: exec.phase_seconds.clone(),
        ..Default::default()
    };
    match outcome {
        Ok(counts) => {
            out.completed = true;
            fill_counts(&mut out, &counts);
            let (verified, errors) = verify(&store, &live);
            out.verified_objects = verified;
            out.verify_errors = errors;
        }
        Err(e) => {
            out.error = Some(e.to_string());
            out.stop_diagnostics = Some(diagnostics(&store));
        }
    }
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}

/// The log's state, for a run that stopped making progress: statistics, the
/// balancer's view, and what manual cleaning passes (run on this thread, next to the
/// background cleaner) achieve from here. The store is left changed: call this only
/// once the run is over.
pub fn diagnostics(store: &ObjectStore) -> String {
    use ramstore_log::CleanKind;
    let log = store.log();
    let mut text = format!(
        "stats: {:?}; balancer input: {:?}; cleaning needed: {:?}; retired seglets: {}; \
         reserves: {:?}; manual passes:",
        log.stats(),
        ramstore_log::Cleaner::new(log).balancer_input(),
        ramstore_log::Cleaner::new(log).cleaning_needed(),
        log.retired_seglets(),
        log.pool().reserves()
    );
    for kind in [
        CleanKind::Compaction,
        CleanKind::Combined,
        CleanKind::Combined,
    ] {
        let before = log.pool().free_seglets();
        let outcome = store.clean_now(Some(kind));
        text.push_str(&format!(
            " [{kind:?}: {outcome:?}, free seglets {before} -> {}]",
            log.pool().free_seglets()
        ));
    }
    text
}

fn fill_counts(out: &mut RamstoreChild, c: &Counts) {
    out.writes = c.writes;
    out.deletes = c.deletes;
    out.live_objects = c.live_objects;
    out.live_kv_bytes = c.live_kv_bytes;
}

/// Reads every live object back and compares it with what was written. Returns
/// (objects checked, mismatches).
fn verify(store: &ObjectStore, live: &[LiveObj]) -> (u64, u64) {
    let values = workload::value_source();
    let mut key_buf = [0u8; workload::MAX_KEY];
    let mut errors = 0;
    for obj in live {
        let key = workload::key_of(obj.id, obj.key_len as usize, &mut key_buf);
        let want = &values[..obj.value_len as usize];
        let ok = store.read_with(TABLE, key, |view| {
            if view.value_len() != want.len() {
                return false;
            }
            let mut at = 0;
            let mut same = true;
            view.value_pieces(|p| {
                same &= want[at..at + p.len()] == *p;
                at += p.len();
            });
            same
        });
        if ok != Ok(true) {
            errors += 1;
        }
    }
    (live.len() as u64, errors)
}

/// The baseline: one heap allocation (key and value together) per object.
struct MallocExec {
    map: HashMap<u64, Box<[u8]>>,
}

impl Executor for MallocExec {
    type Error = anyhow::Error;

    fn write(&mut self, obj: &mut LiveObj, key: &[u8], value: &[u8]) -> anyhow::Result<()> {
        let mut bytes = Vec::with_capacity(key.len() + value.len());
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(value);
        // Capacity is exact, so this does not reallocate.
        self.map.insert(obj.id as u64, bytes.into_boxed_slice());
        Ok(())
    }

    fn delete(&mut self, obj: &LiveObj, _key: &[u8]) -> anyhow::Result<()> {
        if self.map.remove(&(obj.id as u64)).is_none() {
            bail!("baseline lost object {}", obj.id);
        }
        Ok(())
    }
}

/// Hidden subcommand `memory-baseline`: one workload against the malloc baseline.
pub fn run_baseline_child(args: &ChildArgs) -> anyhow::Result<()> {
    let spec = workload::find(&args.workload).context("unknown workload")?;
    let scale = Scale {
        live_target: args.live_bytes,
        alloc_bytes: args.alloc_bytes,
        seed: args.seed,
        key_bytes: None,
    };
    let mut live = prefaulted_live_vec(args.max_objects);
    let rss_before = report::rss_bytes()?;
    // Sized up front like ramstore's hash table, so the baseline never pays for a
    // rehash (old and new table alive at once); this favours the baseline.
    let mut exec = MallocExec {
        map: HashMap::with_capacity(args.max_objects as usize),
    };
    let map_capacity = exec.map.capacity() as u64;
    let started = Instant::now();
    let counts = Generator::new(spec, scale.seed, &mut live).run(spec, scale, &mut exec)?;
    let seconds = started.elapsed().as_secs_f64();
    let peak_rss = report::peak_rss_bytes()?;
    let out = BaselineChild {
        writes: counts.writes,
        deletes: counts.deletes,
        seconds,
        live_objects: counts.live_objects,
        live_kv_bytes: counts.live_kv_bytes,
        rss_before,
        peak_rss,
        map_capacity,
    };
    // Keep the map alive until the peak has been read.
    drop(exec);
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}

/// One workload's line in the report.
#[derive(Debug, Serialize)]
pub struct WorkloadReport {
    pub name: String,
    pub before: String,
    pub delete_fraction: f64,
    pub after: Option<String>,
    pub completed: bool,
    pub error: Option<String>,
    /// Live entry bytes ÷ memory_bytes at the end of the run.
    pub utilization: f64,
    /// Largest live entry bytes ÷ memory_bytes sampled during the run (the phase the
    /// memory was sized for).
    pub peak_utilization: f64,
    /// (memory_bytes + hash_table_bytes) ÷ live key + value bytes.
    pub total_over_live: f64,
    /// Baseline peak RSS growth ÷ live key + value bytes.
    pub malloc_rss_over_live: f64,
    /// ramstore child's peak RSS growth ÷ live key + value bytes.
    pub ramstore_rss_over_live: f64,
    /// Writes + deletes per second in ramstore (cleaning included).
    pub ops_per_sec: f64,
    pub baseline_ops_per_sec: f64,
    pub live_bytes: u64,
    pub live_objects: u64,
    pub memory_bytes: u64,
    pub segment_bytes: u64,
    pub hash_table_bytes: u64,
    pub hash_table_buckets: u64,
    pub writes: u64,
    pub deletes: u64,
    pub seconds: f64,
    pub phase_seconds: Vec<f64>,
    pub baseline_seconds: f64,
    pub tombstone_bytes_at_end: u64,
    pub nospace_retries: u64,
    pub stalled_ops: u64,
    pub stalled_seconds: f64,
    pub max_stall_ms: f64,
    pub verified_objects: u64,
    pub verify_errors: u64,
    pub missing_on_delete: u64,
    pub sizing: Sizing,
    pub cleaner: CleanerReport,
    pub ramstore: RamstoreChild,
    pub baseline: Option<BaselineChild>,
}

#[derive(Debug, Serialize)]
struct MemoryReport {
    machine: Machine,
    command: String,
    live_target_bytes: u64,
    alloc_bytes_per_phase: u64,
    target_utilization: f64,
    seed: u64,
    /// Entry bytes beyond key and value for a typical object (20-byte key, 100-byte
    /// value, table 1, small version and birth), from `object_entry_len`.
    entry_overhead_bytes: usize,
    workloads: Vec<WorkloadReport>,
    must: MustReport,
    /// False while the run is still going (the file is rewritten after each workload).
    finished: bool,
    total_seconds: f64,
}

#[derive(Debug, Serialize)]
struct MustReport {
    all_completed_at_target: bool,
    total_below_malloc_everywhere: bool,
}

fn spawn_child(sub: &str, args: &ChildArgs) -> anyhow::Result<String> {
    // `/proc/self/exe` still names this very binary when `cargo build` has replaced
    // the file since the run started (an hour-long run on a shared work tree); the
    // path from `current_exe` would then point at a deleted file.
    let proc_exe = std::path::Path::new("/proc/self/exe");
    let exe = if proc_exe.exists() {
        proc_exe.to_path_buf()
    } else {
        std::env::current_exe().context("current_exe")?
    };
    let out = Command::new(exe)
        .arg(sub)
        .args(["--workload", &args.workload])
        .args(["--live-bytes", &args.live_bytes.to_string()])
        .args(["--alloc-bytes", &args.alloc_bytes.to_string()])
        .args(["--seed", &args.seed.to_string()])
        .args(["--max-objects", &args.max_objects.to_string()])
        .args(["--memory-bytes", &args.memory_bytes.to_string()])
        .args(["--segment-bytes", &args.segment_bytes.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("run {sub}"))?;
    if !out.status.success() {
        bail!("{sub} exited with {}", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn run(args: &MemoryArgs) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let machine = Machine::probe();
    let live_target = match (args.live_mib, args.quick) {
        (Some(m), _) => m * MIB,
        (None, true) => 64 * MIB,
        (None, false) => GIB,
    };
    // L§2: 50 GB allocated per phase for 10 GB live, i.e. 5×.
    let alloc_bytes = 5 * live_target;
    let segment_bytes = args.segment_mib.unwrap_or(if args.quick { 2 } else { 8 }) * MIB;
    let specs: Vec<&WorkloadSpec> = if args.workloads.is_empty() {
        workload::WORKLOADS.iter().collect()
    } else {
        args.workloads
            .iter()
            .map(|n| workload::find(n).with_context(|| format!("unknown workload {n}")))
            .collect::<anyhow::Result<_>>()?
    };
    eprintln!(
        "memory: live {} / allocated {} per phase, segments {}, utilisation {}, seed {}",
        report::human_bytes(live_target),
        report::human_bytes(alloc_bytes),
        report::human_bytes(segment_bytes),
        args.utilization,
        args.seed
    );

    // The report is rewritten after every workload, so a long run that is stopped
    // early still leaves its finished workloads on disk.
    let mut report = MemoryReport {
        machine,
        command: report::command_line(),
        live_target_bytes: live_target,
        alloc_bytes_per_phase: alloc_bytes,
        target_utilization: args.utilization,
        seed: args.seed,
        entry_overhead_bytes: object_entry_len(TABLE, 1, 0, 20, 100) - 120,
        workloads: Vec::new(),
        must: must_of(&[], args.utilization),
        finished: false,
        total_seconds: 0.0,
    };
    for spec in specs {
        let scale = Scale {
            live_target,
            alloc_bytes,
            seed: args.seed,
            key_bytes: None,
        };
        let t = Instant::now();
        let sizing = size_workload(spec, scale, segment_bytes);
        let memory_bytes = memory_for(&sizing, args.utilization);
        eprintln!(
            "{}: sized in {:.1}s: max {} live objects, max live entries {}, overhead {:.1} B/object -> log memory {}",
            spec.name,
            t.elapsed().as_secs_f64(),
            sizing.max_live_objects,
            report::human_bytes(sizing.max_live_entry_bytes),
            sizing.entry_overhead_avg,
            report::human_bytes(memory_bytes)
        );
        let child = ChildArgs {
            workload: spec.name.to_string(),
            live_bytes: live_target,
            alloc_bytes,
            seed: args.seed,
            max_objects: sizing.max_live_objects,
            memory_bytes,
            segment_bytes,
        };
        let t = Instant::now();
        let ram: RamstoreChild = match spawn_child("memory-ramstore", &child)
            .and_then(|s| serde_json::from_str(s.trim()).context("parse ramstore child output"))
        {
            Ok(r) => r,
            Err(e) => RamstoreChild {
                error: Some(format!("{e:#}")),
                memory_bytes,
                ..Default::default()
            },
        };
        eprintln!(
            "{}: ramstore {} in {:.1}s",
            spec.name,
            if ram.completed { "completed" } else { "FAILED" },
            t.elapsed().as_secs_f64()
        );
        let t = Instant::now();
        let base: Option<BaselineChild> = match spawn_child("memory-baseline", &child)
            .and_then(|s| serde_json::from_str(s.trim()).context("parse baseline child output"))
        {
            Ok(b) => Some(b),
            Err(e) => {
                eprintln!("{}: baseline failed: {e:#}", spec.name);
                None
            }
        };
        eprintln!(
            "{}: baseline done in {:.1}s",
            spec.name,
            t.elapsed().as_secs_f64()
        );
        report
            .workloads
            .push(workload_report(spec, sizing, ram, base));
        report.must = must_of(&report.workloads, args.utilization);
        report.total_seconds = t0.elapsed().as_secs_f64();
        report::write_json(&args.json, &report)?;
    }

    print_table(&report.workloads, live_target);
    println!(
        "Must: all workloads complete at {:.0}% utilisation: {}",
        args.utilization * 100.0,
        pass(report.must.all_completed_at_target)
    );
    println!(
        "Must: total_over_live < malloc_rss_over_live on every workload: {}",
        pass(report.must.total_below_malloc_everywhere)
    );
    report.machine.finish();
    report.finished = true;
    report.total_seconds = t0.elapsed().as_secs_f64();
    report::write_json(&args.json, &report)
}

fn must_of(reports: &[WorkloadReport], target_utilization: f64) -> MustReport {
    MustReport {
        all_completed_at_target: reports.iter().all(|r| {
            r.completed && r.verify_errors == 0 && r.peak_utilization >= target_utilization - 0.01
        }),
        total_below_malloc_everywhere: reports
            .iter()
            .all(|r| r.completed && r.total_over_live < r.malloc_rss_over_live),
    }
}

fn pass(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "FAIL"
    }
}

fn workload_report(
    spec: &WorkloadSpec,
    sizing: Sizing,
    ram: RamstoreChild,
    base: Option<BaselineChild>,
) -> WorkloadReport {
    // The same seed gives the same live set at the end in the sizing pass and both
    // children, so this denominator is also right for a run that stopped early.
    let live = sizing.final_live_kv_bytes.max(1) as f64;
    let mem = ram.memory_bytes.max(1) as f64;
    let malloc = base.as_ref().map_or(f64::NAN, |b| {
        b.peak_rss.saturating_sub(b.rss_before) as f64 / live
    });
    WorkloadReport {
        name: spec.name.to_string(),
        before: spec.before.describe(),
        delete_fraction: spec.delete_fraction,
        after: spec.after.map(|d| d.describe()),
        completed: ram.completed,
        error: ram.error.clone(),
        utilization: ram.live_entry_bytes as f64 / mem,
        peak_utilization: ram.peak_live_entry_bytes as f64 / mem,
        total_over_live: (ram.memory_bytes + ram.hash_table_bytes) as f64 / live,
        malloc_rss_over_live: malloc,
        ramstore_rss_over_live: ram.peak_rss.saturating_sub(ram.rss_before) as f64 / live,
        ops_per_sec: ram.ops_done as f64 / ram.seconds.max(1e-9),
        baseline_ops_per_sec: base
            .as_ref()
            .map_or(0.0, |b| (b.writes + b.deletes) as f64 / b.seconds.max(1e-9)),
        live_bytes: sizing.final_live_kv_bytes,
        live_objects: ram.live_objects,
        memory_bytes: ram.memory_bytes,
        segment_bytes: ram.segment_bytes,
        hash_table_bytes: ram.hash_table_bytes,
        hash_table_buckets: ram.hash_table_buckets,
        writes: ram.writes,
        deletes: ram.deletes,
        seconds: ram.seconds,
        phase_seconds: ram.phase_seconds.clone(),
        baseline_seconds: base.as_ref().map_or(0.0, |b| b.seconds),
        tombstone_bytes_at_end: ram.tombstone_bytes,
        nospace_retries: ram.nospace_retries,
        stalled_ops: ram.stalled_ops,
        stalled_seconds: ram.stalled_seconds,
        max_stall_ms: ram.max_stall_ms,
        verified_objects: ram.verified_objects,
        verify_errors: ram.verify_errors,
        missing_on_delete: ram.missing_on_delete,
        sizing,
        cleaner: ram.cleaner.clone(),
        ramstore: ram,
        baseline: base,
    }
}

fn print_table(reports: &[WorkloadReport], live_target: u64) {
    println!(
        "\nMemory efficiency, L Table 1 workloads, {} live key+value data (ratios are bytes per live byte; lower is better)",
        report::human_bytes(live_target)
    );
    let mut t = Table::new(&[
        "workload",
        "done",
        "util(end)",
        "util(peak)",
        "total/live",
        "malloc_rss/live",
        "ramstore_rss/live",
        "ops/s",
        "malloc ops/s",
        "nospace",
        "stall s",
        "cleaner cpu s",
        "verify",
    ]);
    for r in reports {
        t.row(vec![
            r.name.clone(),
            if r.completed { "yes" } else { "NO" }.to_string(),
            format!("{:.3}", r.utilization),
            format!("{:.3}", r.peak_utilization),
            format!("{:.3}", r.total_over_live),
            format!("{:.3}", r.malloc_rss_over_live),
            format!("{:.3}", r.ramstore_rss_over_live),
            report::kilo(r.ops_per_sec),
            report::kilo(r.baseline_ops_per_sec),
            r.nospace_retries.to_string(),
            format!("{:.2}", r.stalled_seconds),
            format!("{:.1}", r.cleaner.cpu_seconds),
            if r.verify_errors == 0 && r.missing_on_delete == 0 {
                "ok".to_string()
            } else {
                format!("{} bad", r.verify_errors + r.missing_on_delete)
            },
        ]);
    }
    print!("{}", t.render());
}
