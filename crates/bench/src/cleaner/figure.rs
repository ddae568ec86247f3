//! The `cleaner` scenario's report: the checks against the paper's ratios
//! (L Figs. 6 and 7) and the figure printed as a table.

use serde::Serialize;

use crate::report::{self, Machine, Table};

use super::one_run::CleanerRun;

#[derive(Debug, Serialize)]
pub(super) struct CleanerReport {
    pub(super) machine: Machine,
    pub(super) command: String,
    pub(super) memory_bytes: u64,
    pub(super) segment_bytes: usize,
    pub(super) backup_mbps: u64,
    pub(super) warmup_secs: f64,
    pub(super) measure_secs: f64,
    pub(super) runs: Vec<CleanerRun>,
    pub(super) checks: Vec<Check>,
    pub(super) total_seconds: f64,
}

#[derive(Debug, Serialize)]
pub(super) struct Check {
    pub(super) name: String,
    pub(super) ratio: Option<f64>,
    pub(super) threshold: f64,
    pub(super) pass: Option<bool>,
    /// Why there is no ratio (a run missing or stalled).
    pub(super) note: Option<String>,
}
pub(super) fn find<'a>(
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
pub(super) fn ratio_check(
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

pub(super) fn checks(runs: &[CleanerRun]) -> Vec<Check> {
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

pub(super) fn print_figure(runs: &[CleanerRun], utilizations: &[u32]) {
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
