//! `experiment placement` and `experiment recovery-traffic` (issue 22): each
//! point in a process of its own (`spread-point`, `recovery-point`), printed
//! as a table with the Must verdict, written as JSON, CSV and SVG.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use crate::experiment::ExperimentError;
use crate::scaling::Point;
use crate::spread::SpreadPoint;

/// R§7.1 / Fig. 17's Must: the busiest backup holds at most 10% more of the
/// crashed master's replicas than the mean (scattered placement).
pub const SPREAD_MUST: f64 = 1.10;
/// C§4.2's Must: proximity-aware placement with recovery near the data cuts
/// the recovery shuffle's bytes crossing more than one hop at least 5×.
pub const TRAFFIC_MUST: f64 = 5.0;

/// Runs `exe` with `args` and parses the first line `parse` accepts.
fn point_process<T>(
    exe: &Path,
    args: &[String],
    servers: usize,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<T, ExperimentError> {
    let out = Command::new(exe)
        .args(args)
        .output()
        .map_err(ExperimentError::Spawn)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().find_map(parse) {
        Some(p) if out.status.success() => Ok(p),
        _ => Err(ExperimentError::Point {
            servers,
            detail: format!(
                "exit {:?}: {}{}",
                out.status.code(),
                stdout.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        }),
    }
}

/// The parameters of `experiment placement`.
#[derive(Debug, Clone)]
pub struct PlacementPlan {
    pub servers: Vec<usize>,
    pub seed: u64,
    /// Host 0's replicas per backup on average.
    pub per_backup: u64,
    pub other_bytes: u64,
    /// `--topology …` flags (and any shape flags) every point gets.
    pub common: Vec<String>,
}

/// Every point of `plan`: per size, scattered then proximity placement.
pub fn placement(exe: &Path, plan: &PlacementPlan) -> Result<Vec<SpreadPoint>, ExperimentError> {
    let mut points = Vec::new();
    for &servers in &plan.servers {
        for placement in ["scattered", "proximity"] {
            let mut args: Vec<String> = [
                "spread-point",
                "--servers",
                &servers.to_string(),
                "--seed",
                &plan.seed.to_string(),
                "--placement",
                placement,
                "--per-backup",
                &plan.per_backup.to_string(),
                "--other-bytes",
                &plan.other_bytes.to_string(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            args.extend(plan.common.iter().cloned());
            let p = point_process(exe, &args, servers, SpreadPoint::from_line)?;
            eprintln!("{}", p.to_line());
            points.push(p);
        }
    }
    Ok(points)
}

/// Whether every scattered point keeps its busiest backup within
/// [`SPREAD_MUST`] of the mean.
pub fn placement_must(points: &[SpreadPoint]) -> bool {
    points
        .iter()
        .filter(|p| !p.proximity)
        .all(|p| p.replicas.max_over_mean <= SPREAD_MUST && p.violations == 0)
}

/// The placement table.
pub fn placement_table(points: &[SpreadPoint]) -> String {
    let mut s = String::from(
        "servers | placement | host 0 segments | replicas/backup mean | max/mean | min/mean | CV | \
         first-placed max/mean | one-hop backups: mean, max/mean | cluster max/mean, CV | \
         one hop % | domain breaks | violations | wall s\n",
    );
    for p in points {
        let _ =
            writeln!(
            s,
            "{:>7} | {:>9} | {:>6} | {:>6.2} | {:.3} | {:.3} | {:.3} | {:.3} | {:>6.2}, {:.3} | \
             {:.3}, {:.3} | {:>5.1} | {} | {} | {:.1}",
            p.servers,
            if p.proximity { "proximity" } else { "scattered" },
            p.segments,
            p.replicas.mean,
            p.replicas.max_over_mean,
            p.replicas.min_over_mean,
            p.replicas.cv,
            p.primaries.max_over_mean,
            p.near.mean,
            p.near.max_over_mean,
            p.cluster.max_over_mean,
            p.cluster.cv,
            p.one_hop * 100.0,
            p.domain_breaks,
            p.violations,
            p.wall_s
        );
    }
    let _ = writeln!(
        s,
        "Must (scattered: busiest backup ≤ {SPREAD_MUST:.2} × mean of the crashed master's \
         replicas, 0 violations): {}",
        verdict(placement_must(points))
    );
    s
}

fn verdict(pass: bool) -> &'static str {
    if pass {
        "PASS"
    } else {
        "FAIL"
    }
}

fn spread_json(s: &crate::spread::Spread) -> String {
    format!(
        "{{\"mean\":{:.4},\"max_over_mean\":{:.4},\"min_over_mean\":{:.4},\"cv\":{:.4}}}",
        s.mean, s.max_over_mean, s.min_over_mean, s.cv
    )
}

/// `{"points":[…],"must":{"spread_within_10pct":…}}`.
pub fn placement_json(points: &[SpreadPoint]) -> String {
    let rows: Vec<String> = points
        .iter()
        .map(|p| {
            format!(
                "{{\"servers\":{},\"placement\":\"{}\",\"segments\":{},\"replicas\":{},\
                 \"first_placed\":{},\"one_hop_backups\":{},\"cluster\":{},\"one_hop_fraction\":{:.4},\
                 \"domain_breaks\":{},\"violations\":{},\"wall_s\":{:.2},\"max_rss_bytes\":{}}}",
                p.servers,
                if p.proximity { "proximity" } else { "scattered" },
                p.segments,
                spread_json(&p.replicas),
                spread_json(&p.primaries),
                spread_json(&p.near),
                spread_json(&p.cluster),
                p.one_hop,
                p.domain_breaks,
                p.violations,
                p.wall_s,
                p.max_rss_bytes
            )
        })
        .collect();
    format!(
        "{{\"points\":[{}],\"must\":{{\"spread_within_10pct\":{}}}}}\n",
        rows.join(","),
        placement_must(points)
    )
}

/// The same as CSV.
pub fn placement_csv(points: &[SpreadPoint]) -> String {
    let mut s = String::from(
        "servers,placement,segments,replicas_mean,replicas_max_over_mean,replicas_cv,\
         first_placed_max_over_mean,cluster_max_over_mean,one_hop_fraction\n",
    );
    for p in points {
        let _ = writeln!(
            s,
            "{},{},{},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4}",
            p.servers,
            if p.proximity {
                "proximity"
            } else {
                "scattered"
            },
            p.segments,
            p.replicas.mean,
            p.replicas.max_over_mean,
            p.replicas.cv,
            p.primaries.max_over_mean,
            p.cluster.max_over_mean,
            p.one_hop
        );
    }
    s
}

/// One recovery-traffic configuration: placement and recovery masters.
pub const TRAFFIC_CONFIGS: [(&str, &str); 3] = [
    ("scattered", "anywhere"),
    ("proximity", "anywhere"),
    ("proximity", "near"),
];

/// The parameters of `experiment recovery-traffic`.
#[derive(Debug, Clone)]
pub struct TrafficPlan {
    pub servers: Vec<usize>,
    /// Topologies to run (`tree`, `bcube` or a file).
    pub topologies: Vec<String>,
    pub seed: u64,
    pub data_per_server: u64,
    /// Flags every point gets (racks, shape, cost).
    pub common: Vec<String>,
}

/// One recovery-traffic result: its topology, configuration and point.
#[derive(Debug, Clone)]
pub struct TrafficRow {
    pub topology: String,
    pub placement: &'static str,
    pub recovery_masters: &'static str,
    pub point: Point,
}

/// Every point of `plan`: per topology and size, the three configurations.
pub fn recovery_traffic(
    exe: &Path,
    plan: &TrafficPlan,
) -> Result<Vec<TrafficRow>, ExperimentError> {
    let mut rows = Vec::new();
    for topology in &plan.topologies {
        for &servers in &plan.servers {
            for (placement, recovery_masters) in TRAFFIC_CONFIGS {
                let mut args: Vec<String> = [
                    "recovery-point",
                    "--servers",
                    &servers.to_string(),
                    "--seed",
                    &plan.seed.to_string(),
                    "--data-per-server-bytes",
                    &plan.data_per_server.to_string(),
                    "--topology",
                    topology,
                    "--placement",
                    placement,
                    "--recovery-masters",
                    recovery_masters,
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                args.extend(plan.common.iter().cloned());
                let point = point_process(exe, &args, servers, Point::from_line)?;
                eprintln!(
                    "{topology} {placement} {recovery_masters} {}",
                    point.to_line()
                );
                rows.push(TrafficRow {
                    topology: topology.clone(),
                    placement,
                    recovery_masters,
                    point,
                });
            }
        }
    }
    Ok(rows)
}

/// Bytes of the shuffle that crossed more than one hop.
fn multi_hop(p: &Point) -> u64 {
    p.hops_buckets[2]
}

/// Per (topology, servers): scattered's multi-hop shuffle bytes over
/// proximity-with-near-recovery's (infinite when the latter is 0).
pub fn reductions(rows: &[TrafficRow]) -> Vec<(String, usize, f64)> {
    let find = |t: &str, n: usize, pl: &str, rm: &str| {
        rows.iter().find(|r| {
            r.topology == t && r.point.servers == n && r.placement == pl && r.recovery_masters == rm
        })
    };
    let mut out = Vec::new();
    for r in rows.iter().filter(|r| r.placement == "scattered") {
        if let Some(near) = find(&r.topology, r.point.servers, "proximity", "near") {
            let (a, b) = (multi_hop(&r.point), multi_hop(&near.point));
            let ratio = if b == 0 {
                f64::INFINITY
            } else {
                a as f64 / b as f64
            };
            out.push((r.topology.clone(), r.point.servers, ratio));
        }
    }
    out
}

/// Whether every reduction reaches [`TRAFFIC_MUST`] with 0 violations.
pub fn traffic_must(rows: &[TrafficRow]) -> bool {
    let r = reductions(rows);
    !r.is_empty()
        && r.iter().all(|(_, _, x)| *x >= TRAFFIC_MUST)
        && rows.iter().all(|r| r.point.violations == 0)
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// The recovery-traffic table.
pub fn traffic_table(rows: &[TrafficRow]) -> String {
    let mut s = String::from(
        "topology | servers | placement | recovery masters | recovery s | shuffle MB: total / one hop / >1 hop | \
         >1 hop % | re-replication MB: total / >1 hop | violations\n",
    );
    for r in rows {
        let p = &r.point;
        let total = p.hops_buckets.iter().sum::<u64>();
        let rerep = p.hops_replication.iter().sum::<u64>();
        let _ = writeln!(
            s,
            "{:>8} | {:>7} | {:>9} | {:>8} | {:>7.3} | {:.2} / {:.2} / {:.2} | {:>5.1} | {:.2} / {:.2} | {}",
            r.topology,
            p.servers,
            r.placement,
            r.recovery_masters,
            p.recovery_s,
            mb(total),
            mb(p.hops_buckets[1]),
            mb(p.hops_buckets[2]),
            100.0 * p.hops_buckets[2] as f64 / total.max(1) as f64,
            mb(rerep),
            mb(p.hops_replication[2]),
            p.violations
        );
    }
    for (t, n, x) in reductions(rows) {
        let by = if x.is_finite() {
            format!("{x:.1}×")
        } else {
            "to 0 bytes".to_string()
        };
        let _ = writeln!(
            s,
            "{t} {n} servers: >1-hop shuffle bytes reduced {by} (scattered → proximity + near recovery)"
        );
    }
    let _ = writeln!(
        s,
        "Must (≥ {TRAFFIC_MUST:.0}× fewer shuffle bytes crossing more than one hop, 0 violations): {}",
        verdict(traffic_must(rows))
    );
    s
}

/// `{"points":[…],"reductions":[…],"must":{"reduction_at_least_5x":…}}`
/// (bytes are simulated bytes; `bytes_scale` beside them).
pub fn traffic_json(rows: &[TrafficRow]) -> String {
    let points: Vec<String> = rows
        .iter()
        .map(|r| {
            let p = &r.point;
            format!(
                "{{\"topology\":\"{}\",\"servers\":{},\"placement\":\"{}\",\"recovery_masters\":\"{}\",\
                 \"recovery_s\":{:.6},\"shuffle_bytes\":{{\"local\":{},\"one_hop\":{},\"multi_hop\":{}}},\
                 \"rereplication_bytes\":{{\"local\":{},\"one_hop\":{},\"multi_hop\":{}}},\
                 \"violations\":{},\"wall_s\":{:.2}}}",
                r.topology,
                p.servers,
                r.placement,
                r.recovery_masters,
                p.recovery_s,
                p.hops_buckets[0],
                p.hops_buckets[1],
                p.hops_buckets[2],
                p.hops_replication[0],
                p.hops_replication[1],
                p.hops_replication[2],
                p.violations,
                p.wall_s
            )
        })
        .collect();
    let reductions: Vec<String> = reductions(rows)
        .iter()
        .map(|(t, n, x)| {
            let x = if x.is_finite() {
                format!("{x:.3}")
            } else {
                "null".into()
            };
            format!("{{\"topology\":\"{t}\",\"servers\":{n},\"multi_hop_reduction\":{x}}}")
        })
        .collect();
    format!(
        "{{\"points\":[{}],\"reductions\":[{}],\"must\":{{\"reduction_at_least_5x\":{}}}}}\n",
        points.join(","),
        reductions.join(","),
        traffic_must(rows)
    )
}

/// The same as CSV.
pub fn traffic_csv(rows: &[TrafficRow]) -> String {
    let mut s = String::from(
        "topology,servers,placement,recovery_masters,recovery_s,shuffle_one_hop_bytes,\
         shuffle_multi_hop_bytes,rereplication_multi_hop_bytes\n",
    );
    for r in rows {
        let p = &r.point;
        let _ = writeln!(
            s,
            "{},{},{},{},{:.6},{},{},{}",
            r.topology,
            p.servers,
            r.placement,
            r.recovery_masters,
            p.recovery_s,
            p.hops_buckets[1],
            p.hops_buckets[2],
            p.hops_replication[2]
        );
    }
    s
}

/// Horizontal bars, one per labelled value, scaled to the largest.
pub fn bars_svg(title: &str, bars: &[(String, f64)]) -> String {
    let (w, row, left) = (720.0, 22.0, 300.0);
    let h = 50.0 + row * bars.len() as f64;
    let max = bars.iter().map(|b| b.1).fold(0.0f64, f64::max).max(1e-9);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"18\" text-anchor=\"middle\">{title}</text>\n",
        w / 2.0
    );
    for (i, (label, v)) in bars.iter().enumerate() {
        let y = 32.0 + row * i as f64;
        let len = v / max * (w - left - 80.0);
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>\
             <rect x=\"{left}\" y=\"{y:.1}\" width=\"{len:.1}\" height=\"{}\" fill=\"steelblue\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{v:.3}</text>",
            left - 6.0,
            y + 13.0,
            row - 6.0,
            left + len + 4.0,
            y + 13.0
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The placement plot: max/mean of the crashed master's replicas per point.
pub fn placement_svg(points: &[SpreadPoint]) -> String {
    let bars: Vec<(String, f64)> = points
        .iter()
        .map(|p| {
            let kind = if p.proximity {
                "proximity"
            } else {
                "scattered"
            };
            (
                format!("{} servers, {kind}", p.servers),
                p.replicas.max_over_mean,
            )
        })
        .collect();
    bars_svg(
        "busiest backup / mean, crashed master's replicas (R Fig. 17's measure)",
        &bars,
    )
}

/// The recovery-traffic plot: MB of shuffle crossing more than one hop.
pub fn traffic_svg(rows: &[TrafficRow]) -> String {
    let bars: Vec<(String, f64)> = rows
        .iter()
        .map(|r| {
            (
                format!(
                    "{} {} {}, {}",
                    r.topology, r.point.servers, r.placement, r.recovery_masters
                ),
                mb(r.point.hops_buckets[2]),
            )
        })
        .collect();
    bars_svg(
        "recovery shuffle MB crossing more than one hop (simulated bytes)",
        &bars,
    )
}
