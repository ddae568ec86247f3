//! The `memory` scenario's report: one line per workload comparing ramstore's
//! footprint with malloc's, the Must, and the table printed.

use serde::Serialize;

use crate::report::{self, Machine, Table};
use crate::workload::WorkloadSpec;

use super::baseline_child::BaselineChild;
use super::ramstore_child::{CleanerReport, RamstoreChild};
use super::sizing::Sizing;

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
pub(super) struct MemoryReport {
    pub(super) machine: Machine,
    pub(super) command: String,
    pub(super) live_target_bytes: u64,
    pub(super) alloc_bytes_per_phase: u64,
    pub(super) target_utilization: f64,
    pub(super) seed: u64,
    /// Entry bytes beyond key and value for a typical object (20-byte key, 100-byte
    /// value, table 1, small version and birth), from `object_entry_len`.
    pub(super) entry_overhead_bytes: usize,
    pub(super) workloads: Vec<WorkloadReport>,
    pub(super) must: MustReport,
    /// False while the run is still going (the file is rewritten after each workload).
    pub(super) finished: bool,
    pub(super) total_seconds: f64,
}

#[derive(Debug, Serialize)]
pub(super) struct MustReport {
    pub(super) all_completed_at_target: bool,
    pub(super) total_below_malloc_everywhere: bool,
}

pub(super) fn must_of(reports: &[WorkloadReport], target_utilization: f64) -> MustReport {
    MustReport {
        all_completed_at_target: reports.iter().all(|r| {
            r.completed && r.verify_errors == 0 && r.peak_utilization >= target_utilization - 0.01
        }),
        total_below_malloc_everywhere: reports
            .iter()
            .all(|r| r.completed && r.total_over_live < r.malloc_rss_over_live),
    }
}

pub(super) fn pass(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "FAIL"
    }
}

pub(super) fn workload_report(
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

pub(super) fn print_table(reports: &[WorkloadReport], live_target: u64) {
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
