//! The ramstore child of the `memory` scenario: runs one workload against an
//! `ObjectStore` sized by the sizing pass, samples the cleaner (L§4, L§5), checks
//! every live object at the end and reports its peak RSS.

use std::time::Instant;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use ramstore_master::{ObjectStore, StoreConfig};

use crate::report::{self};
use crate::retry::{Abort, Backpressure};
use crate::workload::{self, Counts, Executor, Generator, LiveObj, Scale};

use super::args::{ChildArgs, TABLE};
use super::sizing::prefaulted_live_vec;

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

/// Executes a workload against ramstore.
pub(super) struct RamExec<'s> {
    pub(super) store: &'s ObjectStore,
    pub(super) bp: Backpressure,
    pub(super) ops: u64,
    pub(super) peak_live_entry: u64,
    pub(super) missing_on_delete: u64,
    pub(super) started: Instant,
    pub(super) last_report: Instant,
    pub(super) phase_started: Instant,
    pub(super) phase_seconds: Vec<f64>,
    pub(super) phase: u8,
}

/// Store statistics are sampled once per this many operations (they take a lock).
pub(super) const SAMPLE_EVERY: u64 = 1 << 14;

impl RamExec<'_> {
    pub(super) fn tick(&mut self) {
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

pub(super) fn fill_counts(out: &mut RamstoreChild, c: &Counts) {
    out.writes = c.writes;
    out.deletes = c.deletes;
    out.live_objects = c.live_objects;
    out.live_kv_bytes = c.live_kv_bytes;
}

/// Reads every live object back and compares it with what was written. Returns
/// (objects checked, mismatches).
pub(super) fn verify(store: &ObjectStore, live: &[LiveObj]) -> (u64, u64) {
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
