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

use std::time::{Duration, Instant};

use crate::report::{self, Machine};

// One idea per file (issue 19). The children name each other and never this
// parent, so the modules form no cycle.
mod args;
mod figure;
mod keys;
mod one_run;

pub use args::CleanerArgs;
use args::{mode_name, parse_mode, Dist};
use figure::{checks, print_figure, CleanerReport};
use one_run::{run_one, Budget, RunSpec, MIB, SEGMENT_BYTES};

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
                        "  {:>5} B {:<7} {:<9} {:>3}%: {:>9} writes/s  cleaner/write {:.2}  copy/write {:.2}  compactions {} combined {} no-memory {} refused {}  live {:.3}  tomb {:.3}  free {:.3} retired {:.3} dead {:.3}  cpu {:.2}s ({:.2} ns/B copied)  survivor sync {:.2}s  stalled {:.2}s  nospace {}  ({:.1}s){}",
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
                        r.survivor_sync_seconds,
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
