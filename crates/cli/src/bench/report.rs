//! What `ramstore bench` reports: percentiles per operation and the machine it
//! ran on, as a table or as JSON.

use hdrhistogram::Histogram;
use serde::Serialize;

use super::args::Mode;
use super::workload::Workload;

/// Percentiles of one histogram, in µs.
#[derive(Serialize)]
pub(super) struct Summary {
    pub(super) ops: u64,
    pub(super) p50_us: u64,
    pub(super) p90_us: u64,
    pub(super) p99_us: u64,
    pub(super) p999_us: u64,
    pub(super) max_us: u64,
    pub(super) mean_us: f64,
}

impl Summary {
    pub(super) fn of(h: &Histogram<u64>) -> Self {
        Self {
            ops: h.len(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
            mean_us: (h.mean() * 10.0).round() / 10.0,
        }
    }
}

#[derive(Serialize)]
pub(super) struct Machine {
    pub(super) nproc: usize,
    pub(super) model: String,
    pub(super) kernel: String,
    pub(super) loadavg_start: String,
    pub(super) loadavg_end: String,
}

pub(super) fn read_proc(path: &str) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .trim()
        .to_string()
}

pub(super) fn cpu_model() -> String {
    read_proc("/proc/cpuinfo")
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[derive(Serialize)]
pub(super) struct Report {
    pub(super) workload: Workload,
    /// Objects per transaction of the `tx` workload.
    pub(super) tx_objects: u16,
    pub(super) clients: usize,
    pub(super) value_size: usize,
    pub(super) ops_per_sec: f64,
    pub(super) p50_us: u64,
    pub(super) p90_us: u64,
    pub(super) p99_us: u64,
    pub(super) p999_us: u64,
    pub(super) max_us: u64,
    pub(super) mean_us: f64,
    pub(super) keys: u64,
    pub(super) duration_s: f64,
    pub(super) warmup_s: f64,
    /// Operations started in the measured window (errors included).
    pub(super) ops: u64,
    pub(super) errors: u64,
    pub(super) not_found: u64,
    pub(super) mode: Mode,
    pub(super) shared_client: bool,
    /// Whether mutations were sent as exactly-once RPCs (RIFL).
    pub(super) exactly_once: bool,
    pub(super) table: String,
    pub(super) coordinator: String,
    /// Percentiles per kind of operation (mixed workloads).
    pub(super) per_op: std::collections::BTreeMap<&'static str, Summary>,
    pub(super) machine: Machine,
}
