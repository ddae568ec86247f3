//! What one migration run reports, cut from its samples: latency percentiles and
//! throughput before, during and after the migration, a per-second series, and
//! the issue's Must lines (issue 20, **Benchmark**).

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::ycsb::Sample;

/// Highest latency the histograms hold (µs); longer ones are clamped to it.
const MAX_LATENCY_US: u64 = 120_000_000;

/// When the migration happened, in seconds after the fixed load started.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Marks {
    /// The measured window starts here (the warm-up before it is left out).
    pub measure_s: f64,
    /// `MigrateTablet` sent.
    pub start_s: f64,
    /// `MigrateTablet` returned: the target owns the range.
    pub ownership_s: f64,
    /// The target reports every record arrived (K§2.3.4: what is left is the
    /// deferred re-replication of its side logs and their commit); the same as
    /// `done_s` when it never did (stop-and-copy).
    #[serde(default)]
    pub arrived_s: f64,
    /// The coordinator lists the migration done.
    pub done_s: f64,
    /// The load stopped.
    pub end_s: f64,
}

/// Latency and throughput of the operations due in one span of time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    pub ops: u64,
    pub ops_per_s: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub failed: u64,
}

/// One second of the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Second {
    /// Seconds after the fixed load started (the second `[t, t + 1)`).
    pub t_s: u64,
    /// Operations that finished in this second (throughput).
    pub ops: u64,
    /// Latency percentiles (and failures) of the operations due in this second.
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub failed: u64,
}

/// One run, as it goes into the JSON: the issue's fields first, then the rest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub mode: String,
    /// Migration rate as K§2.4 measures it: bytes over the time from
    /// `MigrateTablet` to every record at the target (`marks.arrived_s`).
    pub mb_per_s: f64,
    /// Bytes over the time from `MigrateTablet` to the migration listed done:
    /// pulled, re-replicated on the target's backups and committed.
    #[serde(default)]
    pub mb_per_s_durable: f64,
    pub ownership_transfer_ms: f64,
    pub p50_before_us: u64,
    pub p999_before_us: u64,
    pub p50_during_us: u64,
    pub p999_during_us: u64,
    pub failed_ops: u64,
    pub p99_before_us: u64,
    pub p99_during_us: u64,
    pub p50_after_us: u64,
    pub p99_after_us: u64,
    pub p999_after_us: u64,
    /// Bytes (keys and values) the target reports pulled.
    pub migrated_bytes: u64,
    pub migrated_objects: u64,
    /// From `MigrateTablet` sent to the migration listed done.
    pub migration_s: f64,
    /// Objects in the table and bytes of each value.
    pub objects: u64,
    pub value_bytes: usize,
    /// Closed-loop throughput measured first, and the offered load (half of it).
    pub peak_ops_per_s: f64,
    pub offered_ops_per_s: f64,
    pub before: Phase,
    pub during: Phase,
    pub after: Phase,
    pub marks: Marks,
    pub seconds: Vec<Second>,
}

/// Percentiles and counts of the samples due in `[from_s, to_s)`.
pub fn phase(samples: &[Sample], from_s: f64, to_s: f64) -> Phase {
    let (from, to) = ((from_s * 1e6) as u64, (to_s * 1e6) as u64);
    phase_of(samples, to_s - from_s, |s| {
        s.due_us >= from && s.due_us < to
    })
}

/// The phases of a run around the migration `[start_s, done_s)`: *before*, the
/// operations due after `measure_s` that finished before the migration started;
/// *during*, those that overlapped it (due before it ended, finished after it
/// started: an operation due before the start but held up by the migration
/// counts here, not before); *after*, those due once it was done.
pub fn phases(samples: &[Sample], m: &Marks) -> (Phase, Phase, Phase) {
    let us = |s: f64| (s * 1e6) as u64;
    let (measure, start, done, end) = (us(m.measure_s), us(m.start_s), us(m.done_s), us(m.end_s));
    let finished = |s: &Sample| s.due_us + s.latency_us;
    let before = phase_of(samples, m.start_s - m.measure_s, |s| {
        s.due_us >= measure && finished(s) < start
    });
    let during = phase_of(samples, m.done_s - m.start_s, |s| {
        s.due_us >= measure && s.due_us < done && finished(s) >= start
    });
    let after = phase_of(samples, m.end_s - m.done_s, |s| {
        s.due_us >= done && s.due_us < end
    });
    (before, during, after)
}

/// Percentiles and counts of the samples `which` picks, over `secs` seconds.
fn phase_of(samples: &[Sample], secs: f64, which: impl Fn(&Sample) -> bool) -> Phase {
    let mut h = histogram();
    let mut failed = 0;
    for s in samples.iter().filter(|s| which(s)) {
        h.saturating_record(s.latency_us.clamp(1, MAX_LATENCY_US));
        failed += u64::from(s.failed);
    }
    let secs = secs.max(1e-9);
    Phase {
        ops: h.len(),
        ops_per_s: h.len() as f64 / secs,
        p50_us: h.value_at_quantile(0.5),
        p99_us: h.value_at_quantile(0.99),
        p999_us: h.value_at_quantile(0.999),
        max_us: h.max(),
        failed,
    }
}

/// One [`Second`] per whole second from 0 to `end_s`.
pub fn seconds(samples: &[Sample], end_s: f64) -> Vec<Second> {
    let mut finished = vec![0u64; end_s.ceil() as usize + 1];
    for s in samples {
        let t = ((s.due_us + s.latency_us) / 1_000_000) as usize;
        if let Some(n) = finished.get_mut(t) {
            *n += 1;
        }
    }
    (0..end_s.ceil() as u64)
        .map(|t| {
            let p = phase(samples, t as f64, (t + 1) as f64);
            Second {
                t_s: t,
                ops: finished[t as usize],
                p50_us: p.p50_us,
                p99_us: p.p99_us,
                p999_us: p.p999_us,
                failed: p.failed,
            }
        })
        .collect()
}

fn histogram() -> Histogram<u64> {
    // Cannot fail: the bounds are constants with 1 ≤ low, high ≥ 2 × low and 3
    // significant figures (hdrhistogram allows 0..=5).
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid histogram bounds")
}

/// One Must line of the issue and whether `run` meets it.
#[derive(Debug, Clone, PartialEq)]
pub struct Must {
    pub text: String,
    pub pass: bool,
}

/// The issue's Must lines for one run: migration ≥ 300 MB/s; ownership transfer
/// ≤ 20 ms; p99.9 during ≤ 3 × p99.9 before; no failed operation.
pub fn musts(run: &Run) -> Vec<Must> {
    vec![
        Must {
            text: format!(
                "migration ≥ 300 MB/s: {:.1} MB/s until every record is at the target \
                 ({:.1} MB/s until re-replicated and committed)",
                run.mb_per_s, run.mb_per_s_durable
            ),
            pass: run.mb_per_s >= 300.0,
        },
        Must {
            text: format!(
                "ownership transfer ≤ 20 ms: {:.1} ms",
                run.ownership_transfer_ms
            ),
            pass: run.ownership_transfer_ms <= 20.0,
        },
        Must {
            text: format!(
                "p99.9 during ≤ 3 × p99.9 before: {} µs vs 3 × {} µs",
                run.p999_during_us, run.p999_before_us
            ),
            pass: run.p999_during_us <= 3 * run.p999_before_us,
        },
        Must {
            text: format!("no client operation fails: {} failed", run.failed_ops),
            pass: run.failed_ops == 0,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(due_s: f64, latency_us: u64, failed: bool) -> Sample {
        Sample {
            due_us: (due_s * 1e6) as u64,
            latency_us,
            failed,
            ..Sample::default()
        }
    }

    fn run() -> Run {
        Run {
            mode: "rocksteady".into(),
            mb_per_s: 400.0,
            mb_per_s_durable: 200.0,
            ownership_transfer_ms: 3.0,
            p50_before_us: 20,
            p999_before_us: 1000,
            p50_during_us: 25,
            p999_during_us: 3000,
            failed_ops: 0,
            p99_before_us: 100,
            p99_during_us: 200,
            p50_after_us: 20,
            p99_after_us: 100,
            p999_after_us: 1000,
            migrated_bytes: 1 << 27,
            migrated_objects: 1 << 20,
            migration_s: 0.3,
            objects: 1 << 21,
            value_bytes: 128,
            peak_ops_per_s: 40_000.0,
            offered_ops_per_s: 20_000.0,
            before: Phase::default(),
            during: Phase::default(),
            after: Phase::default(),
            marks: Marks {
                measure_s: 1.0,
                start_s: 5.0,
                ownership_s: 5.003,
                arrived_s: 5.2,
                done_s: 5.3,
                end_s: 10.3,
            },
            seconds: Vec::new(),
        }
    }

    #[test]
    fn phase_counts_only_samples_due_inside_it() {
        let samples = [
            sample(0.5, 10, false),
            sample(1.0, 20, true),
            sample(1.5, 30, false),
            sample(2.0, 40, false),
        ];
        let p = phase(&samples, 1.0, 2.0);
        assert_eq!(p.ops, 2);
        assert_eq!(p.failed, 1);
        assert_eq!(p.ops_per_s, 2.0);
        assert_eq!(p.max_us, 30);
        assert_eq!(p.p50_us, 20);
    }

    #[test]
    fn phases_charge_an_operation_held_up_by_the_migration_to_during() {
        let marks = Marks {
            measure_s: 1.0,
            start_s: 5.0,
            ownership_s: 5.001,
            arrived_s: 7.0,
            done_s: 8.0,
            end_s: 10.0,
        };
        let samples = [
            sample(0.5, 10, false),        // warm-up
            sample(2.0, 20, false),        // before
            sample(4.9, 3_000_000, false), // due before, held up: during
            sample(6.0, 40, true),         // during
            sample(9.0, 50, false),        // after
        ];
        let (b, d, a) = phases(&samples, &marks);
        assert_eq!((b.ops, d.ops, a.ops), (1, 2, 1));
        assert_eq!(b.max_us, 20);
        assert!(d.max_us >= 2_990_000, "{d:?}");
        assert_eq!(d.failed, 1);
        assert_eq!(a.max_us, 50);
    }

    #[test]
    fn seconds_cover_the_run_one_per_second() {
        let samples = [sample(0.1, 10, false), sample(1.9, 200_000, false)];
        let s = seconds(&samples, 2.5);
        assert_eq!(s.len(), 3);
        // Throughput counts completions, latency goes to the second it was due.
        assert_eq!((s[0].ops, s[1].ops, s[2].ops), (1, 0, 1));
        assert!(s[1].p999_us >= 199_000, "{:?}", s[1]);
    }

    #[test]
    fn musts_pass_at_their_bounds_and_fail_past_them() {
        let r = run();
        assert!(musts(&r).iter().all(|m| m.pass), "{:?}", musts(&r));
        let mut slow = run();
        slow.mb_per_s = 299.9;
        slow.ownership_transfer_ms = 20.1;
        slow.p999_during_us = 3001;
        slow.failed_ops = 1;
        assert!(musts(&slow).iter().all(|m| !m.pass), "{:?}", musts(&slow));
    }

    #[test]
    fn run_json_has_the_issue_fields_by_name() {
        let json = serde_json::to_value(run()).expect("serialises");
        for field in [
            "mode",
            "mb_per_s",
            "ownership_transfer_ms",
            "p50_before_us",
            "p999_before_us",
            "p50_during_us",
            "p999_during_us",
            "failed_ops",
        ] {
            assert!(json.get(field).is_some(), "{field} missing: {json}");
        }
        assert_eq!(json["mode"], "rocksteady");
        let back: Run = serde_json::from_value(json).expect("reads back");
        assert_eq!(back, run());
    }
}
