//! What every scenario reports besides its numbers: the machine it ran on, the
//! command, process memory (RSS) readings, and small helpers to print tables and
//! write the JSON file.
//!
//! Numbers measured on a shared 2-core machine are only meaningful next to its load,
//! so the load average is recorded at the start and at the end of every scenario.

use std::path::Path;

use anyhow::Context;
use serde::Serialize;

/// Facts about the machine a scenario ran on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub mem_total_bytes: u64,
    pub kernel: String,
    pub cpu_model: String,
    pub hostname: String,
    /// `/proc/loadavg` when the scenario started: other work on the machine makes
    /// throughput numbers noisy.
    pub loadavg_start: String,
    /// `/proc/loadavg` when the scenario ended.
    pub loadavg_end: String,
    /// Git revision of the work tree, when it can be read.
    pub git_rev: Option<String>,
    /// Whether the work tree had uncommitted changes (the binary may include them).
    pub git_dirty: Option<bool>,
}

impl Machine {
    /// Reads what it can; anything unreadable is left empty rather than failing the run.
    pub fn probe() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpu_model = read("/proc/cpuinfo")
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let git_rev = std::process::Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        let git_dirty = std::process::Command::new("git")
            .args(["status", "--porcelain", "--untracked-files=no"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| !o.stdout.is_empty());
        Self {
            nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
            mem_total_bytes: meminfo_total_bytes(),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            cpu_model,
            hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
            loadavg_start: loadavg(),
            loadavg_end: String::new(),
            git_rev,
            git_dirty,
        }
    }

    /// Records the load at the end of the scenario.
    pub fn finish(&mut self) {
        self.loadavg_end = loadavg();
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn meminfo_total_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The command line, as typed (for the JSON file).
pub fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// A field of `/proc/self/status` in bytes (`VmRSS`, `VmHWM`).
pub fn proc_status_bytes(field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status").context("read /proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
        .with_context(|| format!("{field} missing from /proc/self/status"))?;
    let kb: u64 = line[field.len() + 1..]
        .split_whitespace()
        .next()
        .context("empty status field")?
        .parse()
        .with_context(|| format!("parse {line:?}"))?;
    Ok(kb * 1024)
}

/// Resident set size now.
pub fn rss_bytes() -> anyhow::Result<u64> {
    proc_status_bytes("VmRSS")
}

/// Peak resident set size of this process ("high water mark").
pub fn peak_rss_bytes() -> anyhow::Result<u64> {
    proc_status_bytes("VmHWM")
}

/// Writes `value` as pretty JSON to `path`.
pub fn write_json(path: &Path, value: &impl Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value).context("serialize report")?;
    std::fs::write(path, text + "\n").with_context(|| format!("write {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// A plain-text table with right-aligned columns after the first.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut width = vec![0usize; cols];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let line = |r: &Vec<String>| {
            let mut s = String::new();
            for (i, w) in width.iter().enumerate() {
                let c = r.get(i).map_or("", |c| c.as_str());
                if i == 0 {
                    s.push_str(&format!("{c:<w$}"));
                } else {
                    s.push_str(&format!("  {c:>w$}"));
                }
            }
            s.trim_end().to_string()
        };
        let mut out = line(&self.header);
        out.push('\n');
        let total: usize = width.iter().sum::<usize>() + 2 * (cols.saturating_sub(1));
        out.push_str(&"-".repeat(total));
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        out
    }
}

/// `x` with thousands shown as "k" (throughput columns).
pub fn kilo(x: f64) -> String {
    if x >= 10_000.0 {
        format!("{:.0}k", x / 1000.0)
    } else if x >= 1000.0 {
        format!("{:.1}k", x / 1000.0)
    } else {
        format!("{x:.0}")
    }
}

/// Bytes as MiB or GiB, for headings.
pub fn human_bytes(b: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let b = b as f64;
    if b >= 1024.0 * MIB {
        format!("{:.2} GiB", b / (1024.0 * MIB))
    } else {
        format!("{:.1} MiB", b / MIB)
    }
}
