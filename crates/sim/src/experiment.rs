//! `ramstore-sim experiment NAME`: experiments over several simulated clusters,
//! each point in a process of its own (`ramstore-sim recovery-point …`, see
//! [`crate::scaling`]), printed as a table and written as JSON, CSV and SVG.
//!
//! Only `recovery-scaling` exists so far (issue 22). No PNG: no plotting crate
//! is in this workspace's offline registry, so the plot is an SVG drawn here.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cost::CostModel;
use crate::scaling::{Point, PHASES};

/// Why an experiment could not be run.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    #[error("cannot start a point process: {0}")]
    Spawn(std::io::Error),
    #[error("the point with {servers} servers failed: {detail}")]
    Point { servers: usize, detail: String },
    #[error("cannot write {path}: {error}")]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// The parameters of `experiment recovery-scaling`.
#[derive(Debug, Clone)]
pub struct ScalingPlan {
    pub servers: Vec<usize>,
    /// Simulated bytes of values each recovery master recovers.
    pub data_per_server: u64,
    pub seed: u64,
    pub cost: CostModel,
    pub memory_bytes: usize,
    pub segment_bytes: usize,
    pub backup_frames: u32,
}

impl ScalingPlan {
    /// Cluster sizes: 10, 20, 50 (`--quick`) or 10 → 1,000.
    pub fn sizes(quick: bool) -> Vec<usize> {
        if quick {
            vec![10, 20, 50]
        } else {
            vec![10, 20, 50, 100, 200, 500, 1000]
        }
    }
}

/// Runs every point of `plan` with the binary `exe` and returns them in order.
pub fn recovery_scaling(exe: &Path, plan: &ScalingPlan) -> Result<Vec<Point>, ExperimentError> {
    let mut points = Vec::new();
    for &servers in &plan.servers {
        let out = Command::new(exe)
            .args([
                "recovery-point",
                "--servers",
                &servers.to_string(),
                "--data-per-server-bytes",
                &plan.data_per_server.to_string(),
                "--seed",
                &plan.seed.to_string(),
                "--bytes-scale",
                &plan.cost.bytes_scale.to_string(),
                "--cores",
                &plan.cost.cores.to_string(),
                "--server-memory-kib",
                &(plan.memory_bytes / 1024).to_string(),
                "--segment-kib",
                &(plan.segment_bytes / 1024).to_string(),
                "--backup-frames",
                &plan.backup_frames.to_string(),
            ])
            .output()
            .map_err(ExperimentError::Spawn)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let point = stdout.lines().find_map(Point::from_line);
        match point {
            Some(p) if out.status.success() => {
                eprintln!("{}", p.to_line());
                points.push(p);
            }
            _ => {
                return Err(ExperimentError::Point {
                    servers,
                    detail: format!(
                        "exit {:?}: {}{}",
                        out.status.code(),
                        stdout.trim(),
                        String::from_utf8_lossy(&out.stderr).trim()
                    ),
                })
            }
        }
    }
    Ok(points)
}

/// The table printed to stdout.
pub fn table(points: &[Point], bytes_scale: u64) -> String {
    let mut s = String::from(
        "servers | data per server (simulated) | represents | detection s | recovery s | \
         busiest / mean disk read s | setup / reading / replay tail / re-replication / finish s | \
         violations | wall s | max RSS MiB\n",
    );
    for p in points {
        let _ = writeln!(
            s,
            "{:>7} | {:>10} B | {:>8.1} MB | {:>11.3} | {:>10.3} | {:>6.2} / {:>5.2} | \
             {:.3} / {:.3} / {:.3} / {:.3} / {:.3} | {:>10} | {:>6.1} | {:>7}",
            p.servers,
            p.data_per_server_bytes,
            (p.data_per_server_bytes * bytes_scale) as f64 / 1e6,
            p.detection_s,
            p.recovery_s,
            p.disk_read_max_s,
            p.disk_read_mean_s,
            p.phases_s[0],
            p.phases_s[1],
            p.phases_s[2],
            p.phases_s[3],
            p.phases_s[4],
            p.violations,
            p.wall_s,
            p.max_rss_bytes >> 20
        );
    }
    s
}

/// `{"points":[{"servers":N,"data_per_server_bytes":…,"recovery_s":…}, …]}`:
/// `data_per_server_bytes` is what the time stands for (simulated bytes ×
/// `bytes_scale`); the simulated bytes and the scale are beside it.
pub fn json(points: &[Point], bytes_scale: u64) -> String {
    let rows: Vec<String> = points
        .iter()
        .map(|p| {
            format!(
                "{{\"servers\":{},\"data_per_server_bytes\":{},\"recovery_s\":{:.6},\
                 \"detection_s\":{:.6},\"simulated_data_per_server_bytes\":{},\
                 \"bytes_scale\":{},\"disk_read_max_s\":{:.4},\"disk_read_mean_s\":{:.4},\
                 \"phases_s\":{{{}}},\
                 \"violations\":{},\"wall_s\":{:.2},\"max_rss_bytes\":{}}}",
                p.servers,
                p.data_per_server_bytes * bytes_scale,
                p.recovery_s,
                p.detection_s,
                p.data_per_server_bytes,
                bytes_scale,
                p.disk_read_max_s,
                p.disk_read_mean_s,
                PHASES
                    .iter()
                    .zip(&p.phases_s)
                    .map(|(name, t)| format!("\"{name}\":{t:.6}"))
                    .collect::<Vec<_>>()
                    .join(","),
                p.violations,
                p.wall_s,
                p.max_rss_bytes
            )
        })
        .collect();
    format!("{{\"points\":[{}]}}\n", rows.join(","))
}

/// The same as CSV.
pub fn csv(points: &[Point], bytes_scale: u64) -> String {
    let mut s = String::from("servers,data_per_server_bytes,recovery_s,detection_s\n");
    for p in points {
        let _ = writeln!(
            s,
            "{},{},{:.6},{:.6}",
            p.servers,
            p.data_per_server_bytes * bytes_scale,
            p.recovery_s,
            p.detection_s
        );
    }
    s
}

/// Recovery time against cluster size (log scale), as an SVG line plot.
pub fn svg(points: &[Point]) -> String {
    let (w, h, left, bottom, top, right) = (640.0, 400.0, 60.0, 50.0, 30.0, 20.0);
    let max_t = points
        .iter()
        .map(|p| p.recovery_s)
        .fold(0.0f64, f64::max)
        .max(1e-3)
        * 1.2;
    let lx = |n: usize| (n.max(1) as f64).log10();
    let (x0, x1) = (
        lx(1).max(0.9),
        lx(1000).max(lx(points.last().map_or(10, |p| p.servers))),
    );
    let px = |n: usize| left + (lx(n) - x0) / (x1 - x0) * (w - left - right);
    let py = |t: f64| h - bottom - t / max_t * (h - bottom - top);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"18\" text-anchor=\"middle\">recovery time vs cluster size \
         (same data per server, R = 3; simulated)</text>\n",
        w / 2.0
    );
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\
         <line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>",
        h - bottom,
        w - right,
        h - bottom,
        h - bottom
    );
    for n in [10usize, 100, 1000] {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{n}</text>",
            px(n),
            h - bottom + 18.0
        );
    }
    for i in 0..=4 {
        let t = max_t * f64::from(i) / 4.0;
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{t:.2}</text>",
            left - 6.0,
            py(t) + 4.0
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">servers</text>\
         <text x=\"14\" y=\"{:.1}\" transform=\"rotate(-90 14 {:.1})\" \
         text-anchor=\"middle\">recovery s</text>",
        (w + left) / 2.0,
        h - 10.0,
        h / 2.0,
        h / 2.0
    );
    let path: Vec<String> = points
        .iter()
        .map(|p| format!("{:.1},{:.1}", px(p.servers), py(p.recovery_s)))
        .collect();
    let _ = writeln!(
        s,
        "<polyline fill=\"none\" stroke=\"steelblue\" stroke-width=\"2\" points=\"{}\"/>",
        path.join(" ")
    );
    for p in points {
        let _ = writeln!(
            s,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"steelblue\"/>",
            px(p.servers),
            py(p.recovery_s)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Writes `text` to `path`.
pub fn write(path: &Path, text: &str) -> Result<(), ExperimentError> {
    std::fs::write(path, text).map_err(|error| ExperimentError::Write {
        path: path.to_path_buf(),
        error,
    })
}
