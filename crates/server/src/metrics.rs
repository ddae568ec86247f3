//! Operation counters and latency histograms, lock-free, exported as Prometheus
//! text. Recording costs two relaxed atomic adds: no lock, no allocation.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ramstore_wire::Opcode;

/// The operation families counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
    Remove,
    Increment,
    MultiRead,
    MultiWrite,
    MultiRemove,
    Enumerate,
    Ping,
    BackupWrite,
    BackupFree,
    BackupGetReplicas,
    BackupReadReplica,
    Admin,
    Invalid,
}

const OPS: [(Op, &str); 15] = [
    (Op::Read, "read"),
    (Op::Write, "write"),
    (Op::Remove, "remove"),
    (Op::Increment, "increment"),
    (Op::MultiRead, "multi_read"),
    (Op::MultiWrite, "multi_write"),
    (Op::MultiRemove, "multi_remove"),
    (Op::Enumerate, "enumerate"),
    (Op::Ping, "ping"),
    (Op::BackupWrite, "backup_write"),
    (Op::BackupFree, "backup_free"),
    (Op::BackupGetReplicas, "backup_get_replicas"),
    (Op::BackupReadReplica, "backup_read_replica"),
    (Op::Admin, "admin"),
    (Op::Invalid, "invalid"),
];

impl From<Opcode> for Op {
    fn from(op: Opcode) -> Self {
        match op {
            // An expiry read is a read; an expiry change is a write (the object
            // is appended again).
            Opcode::Read | Opcode::GetExpiry => Op::Read,
            Opcode::Write | Opcode::WriteExpiring | Opcode::SetExpiry => Op::Write,
            Opcode::Remove => Op::Remove,
            Opcode::Increment => Op::Increment,
            Opcode::MultiRead => Op::MultiRead,
            Opcode::MultiWrite => Op::MultiWrite,
            Opcode::MultiRemove => Op::MultiRemove,
            Opcode::Enumerate => Op::Enumerate,
            Opcode::Ping => Op::Ping,
            Opcode::BackupWrite => Op::BackupWrite,
            Opcode::BackupFree => Op::BackupFree,
            Opcode::BackupGetReplicas => Op::BackupGetReplicas,
            Opcode::BackupReadReplica => Op::BackupReadReplica,
            _ => Op::Admin,
        }
    }
}

/// Latency buckets: upper bounds in microseconds, powers of two up to ~1 s.
const BUCKETS: usize = 21;

fn bucket_upper_us(i: usize) -> u64 {
    1u64 << i
}

#[derive(Default)]
struct Histogram {
    counts: [AtomicU64; BUCKETS + 1],
    sum_ns: AtomicU64,
}

/// Counters for one server. Thread-safe.
#[derive(Default)]
pub struct Metrics {
    per_op: [Histogram; OPS.len()],
}

impl Metrics {
    /// Records one operation of `op` that took `elapsed`.
    pub fn record(&self, op: Op, elapsed: Duration) {
        let i = OPS
            .iter()
            .position(|(o, _)| *o == op)
            .unwrap_or(OPS.len() - 1);
        let h = &self.per_op[i];
        let us = elapsed.as_micros() as u64;
        let bucket = if us <= 1 {
            0
        } else {
            (64 - (us - 1).leading_zeros()) as usize
        };
        h.counts[bucket.min(BUCKETS)].fetch_add(1, Ordering::Relaxed);
        h.sum_ns
            .fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Operations of `op` recorded so far.
    pub fn count(&self, op: Op) -> u64 {
        let i = OPS
            .iter()
            .position(|(o, _)| *o == op)
            .unwrap_or(OPS.len() - 1);
        self.per_op[i]
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Appends the Prometheus text exposition of these metrics.
    pub fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP ramstore_op_latency_seconds Server-side latency of operations."
        );
        let _ = writeln!(out, "# TYPE ramstore_op_latency_seconds histogram");
        for ((_, name), h) in OPS.iter().zip(&self.per_op) {
            let mut cumulative = 0;
            for i in 0..BUCKETS {
                cumulative += h.counts[i].load(Ordering::Relaxed);
                let le = bucket_upper_us(i) as f64 / 1e6;
                let _ = writeln!(
                    out,
                    "ramstore_op_latency_seconds_bucket{{op=\"{name}\",le=\"{le}\"}} {cumulative}"
                );
            }
            cumulative += h.counts[BUCKETS].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "ramstore_op_latency_seconds_bucket{{op=\"{name}\",le=\"+Inf\"}} {cumulative}"
            );
            let sum = h.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
            let _ = writeln!(
                out,
                "ramstore_op_latency_seconds_sum{{op=\"{name}\"}} {sum}"
            );
            let _ = writeln!(
                out,
                "ramstore_op_latency_seconds_count{{op=\"{name}\"}} {cumulative}"
            );
        }
    }
}

/// Appends log and cleaner gauges of a store in Prometheus text.
pub fn render_store(stats: &ramstore_master::StoreStats, out: &mut String) {
    let l = &stats.log;
    let gauges: [(&str, &str, f64); 17] = [
        (
            "ramstore_log_memory_bytes",
            "Bytes of log memory.",
            l.memory_bytes as f64,
        ),
        (
            "ramstore_log_live_object_bytes",
            "Bytes of live objects in the log.",
            l.live_object_bytes as f64,
        ),
        (
            "ramstore_log_tombstone_bytes",
            "Bytes of tombstones in the log.",
            l.tombstone_bytes as f64,
        ),
        (
            "ramstore_log_free_seglets",
            "Seglets not in any segment.",
            l.seglets_free as f64,
        ),
        (
            "ramstore_log_utilization",
            "Live object bytes over log memory.",
            l.live_object_bytes as f64 / l.memory_bytes.max(1) as f64,
        ),
        ("ramstore_objects", "Objects stored.", stats.objects as f64),
        (
            "ramstore_cleaner_compactions_total",
            "Segment compactions.",
            l.compactions as f64,
        ),
        (
            "ramstore_cleaner_combined_passes_total",
            "Combined cleaning passes.",
            l.combined_passes as f64,
        ),
        (
            "ramstore_cleaner_bytes_copied_total",
            "Bytes copied by the cleaner.",
            (l.compaction_bytes_copied + l.combined_bytes_copied) as f64,
        ),
        (
            "ramstore_cleaner_cpu_seconds_total",
            "CPU time spent cleaning.",
            l.cleaner_cpu_ns as f64 / 1e9,
        ),
        (
            "ramstore_cleaner_passes_without_memory_total",
            "Cleaning passes that found work but no free seglets for their output.",
            l.passes_without_memory as f64,
        ),
        (
            "ramstore_cleaner_combined_passes_refused_total",
            "Combined cleaning passes that read their victims and gave them back: too little to gain.",
            l.combined_passes_refused as f64,
        ),
        (
            "ramstore_log_appended_bytes_total",
            "Bytes appended to the log head.",
            l.appended_bytes as f64,
        ),
        (
            "ramstore_hash_table_bytes",
            "Bytes of hash table allocated (buckets, locks, overflow chunks and free list).",
            stats.hash_table_bytes as f64,
        ),
        (
            "ramstore_hash_table_resident_bound_bytes",
            "The most bytes of hash table that can be resident: buckets and locks, plus overflow buckets up to their high-water mark (what is resident now: ramstore_resident_bytes{part=\"hash_table\"}).",
            stats.hash_table_resident_bound_bytes as f64,
        ),
        (
            "ramstore_hash_table_overflow_buckets",
            "Overflow buckets linked into hash chains now.",
            stats.hash_table_overflow_buckets_in_use as f64,
        ),
        (
            "ramstore_hash_table_overflow_buckets_high_water",
            "The most overflow buckets ever in use at once (emptied ones are reused).",
            stats.hash_table_overflow_buckets_high_water as f64,
        ),
    ];
    for (name, help, value) in gauges {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    }
}

/// Appends whether the master is refusing writes for lack of memory (L§7: the log
/// is full) in Prometheus text: the NO_SPACE answers so far, and 1 while every
/// write since the last accepted one was refused, with for how long. Clients retry
/// NO_SPACE for a while, so without these a full log shows only as slow writes.
/// `now` is the time on the master's clock.
pub fn render_full_log(
    full_log: &crate::full_log::FullLog,
    now: std::time::Instant,
    out: &mut String,
) {
    let refusing = full_log.refusing_for(now);
    let _ = writeln!(
        out,
        "# HELP ramstore_no_space_answers_total Updates answered NO_SPACE (the log was full).\n\
         # TYPE ramstore_no_space_answers_total counter\n\
         ramstore_no_space_answers_total {}",
        full_log.answers()
    );
    let _ = writeln!(
        out,
        "# HELP ramstore_refusing_writes 1 while the log refuses writes for lack of memory.\n\
         # TYPE ramstore_refusing_writes gauge\n\
         ramstore_refusing_writes {}",
        u8::from(refusing.is_some())
    );
    let _ = writeln!(
        out,
        "# HELP ramstore_refusing_writes_seconds How long the log has been refusing writes.\n\
         # TYPE ramstore_refusing_writes_seconds gauge\n\
         ramstore_refusing_writes_seconds {}",
        refusing.map_or(0.0, |d| d.as_secs_f64())
    );
}

/// Appends a backup store's gauges in Prometheus text.
pub fn render_backup(stats: &ramstore_backup::BackupStats, out: &mut String) {
    let gauges: [(&str, &str, f64); 7] = [
        (
            "ramstore_backup_frames",
            "Frames in the backup's frames file.",
            f64::from(stats.frames_total),
        ),
        (
            "ramstore_backup_free_frames",
            "Frames holding no replica.",
            f64::from(stats.frames_free),
        ),
        (
            "ramstore_backup_replicas",
            "Replicas held (open and closed).",
            f64::from(stats.replicas),
        ),
        (
            "ramstore_backup_open_buffers",
            "Open replicas, each holding one in-memory buffer.",
            f64::from(stats.open_buffers_in_use),
        ),
        (
            "ramstore_backup_open_buffers_max",
            "The bound on open replicas.",
            f64::from(stats.open_buffers_max),
        ),
        (
            "ramstore_backup_disk_bytes",
            "Valid replica bytes written to the frames file.",
            stats.bytes_on_disk as f64,
        ),
        (
            "ramstore_backup_syncs_total",
            "Disk syncs made by backup operations.",
            stats.syncs as f64,
        ),
    ];
    for (name, help, value) in gauges {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn render_full_log_shows_refusing_writes() {
        let now = ramstore_clock::ManualClock::new().origin();
        let full_log = crate::full_log::FullLog::new(std::time::Duration::from_secs(3), now);
        let mut out = String::new();
        render_full_log(&full_log, now, &mut out);
        assert!(out.contains("\nramstore_refusing_writes 0\n"), "{out}");
        full_log.refused(now);
        let mut out = String::new();
        render_full_log(&full_log, now, &mut out);
        assert!(out.contains("\nramstore_refusing_writes 1\n"), "{out}");
        assert!(
            out.contains("\nramstore_no_space_answers_total 1\n"),
            "{out}"
        );
    }

    use super::*;

    #[test]
    fn record_counts_and_renders_cumulative_buckets() {
        let m = Metrics::default();
        m.record(Op::Read, Duration::from_micros(3));
        m.record(Op::Read, Duration::from_micros(100));
        m.record(Op::Write, Duration::from_secs(5));
        assert_eq!(m.count(Op::Read), 2);
        let mut text = String::new();
        m.render(&mut text);
        assert!(text.contains("ramstore_op_latency_seconds_count{op=\"read\"} 2"));
        assert!(text.contains("ramstore_op_latency_seconds_bucket{op=\"write\",le=\"+Inf\"} 1"));
        assert!(text.contains("ramstore_op_latency_seconds_bucket{op=\"read\",le=\"0.000004\"} 1"));
    }
}
