//! The flags of the `cleaner` scenario: utilisations, value sizes, the key
//! distribution (uniform or hot/cold, L§8.1) and the cleaning modes compared.

use std::path::PathBuf;

use anyhow::bail;

/// `cleaner`: throughput vs utilisation (L Fig. 6).
#[derive(Debug, clap::Args)]
pub struct CleanerArgs {
    /// 128 MiB of log memory and short time bounds (whole run under ~5 minutes).
    #[arg(long)]
    pub quick: bool,
    /// Backup bandwidth in MB/s shared by head appends and survivor segments
    /// (0 = unthrottled).
    #[arg(long, default_value_t = 700)]
    pub backup_mbps: u64,
    /// Log memory in MiB (default 1024, or 128 with --quick).
    #[arg(long)]
    pub memory_mib: Option<u64>,
    /// Value sizes in bytes.
    #[arg(long, value_delimiter = ',', default_values_t = [100usize, 1000, 10000])]
    pub values: Vec<usize>,
    /// Memory utilisations in percent.
    #[arg(long, value_delimiter = ',', default_values_t = [30u32, 50, 70, 80, 90])]
    pub utilizations: Vec<u32>,
    /// Access patterns: uniform, zipfian.
    #[arg(long, value_delimiter = ',', default_values_t = [String::from("uniform"), String::from("zipfian")])]
    pub distributions: Vec<String>,
    /// Cleaning modes: two-level, one-level.
    #[arg(long, value_delimiter = ',', default_values_t = [String::from("two-level"), String::from("one-level")])]
    pub modes: Vec<String>,
    /// Most seconds of warm-up once ~2× memory has not been written yet (the warm-up
    /// goes on past this until the cleaner has run). Default 15, or 2 with --quick.
    #[arg(long)]
    pub warmup_secs: Option<f64>,
    /// Most seconds of measurement. Default 10, or 1.5 with --quick.
    #[arg(long)]
    pub measure_secs: Option<f64>,
    /// Give up on a run after this many seconds without a successful write
    /// (default 30, or 10 with --quick, so a stuck point does not eat the budget).
    #[arg(long)]
    pub stall_secs: Option<f64>,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Share of freeable memory live tombstones may take before combined cleaning is
    /// forced (default: the store's, 0.4 as in L§5.2).
    #[arg(long)]
    pub tombstone_share: Option<f64>,
    /// Most segments' worth of memory the cleaner keeps free ahead of the writer
    /// (default: the store's, 2; 0 = L§5.2's rule alone).
    #[arg(long)]
    pub clean_ahead_segments: Option<usize>,
    /// Cleaner threads. Two by default, as in L§8.1 ("all of our experiments used a
    /// maximum of two threads for cleaning"): a writer waiting for space leaves its
    /// core to the second one (L§6).
    #[arg(long, default_value_t = 2)]
    pub cleaner_threads: usize,
    /// Where to write the JSON report.
    #[arg(long)]
    pub json: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dist {
    Uniform,
    Zipfian,
}

impl Dist {
    pub(super) fn parse(s: &str) -> anyhow::Result<Self> {
        match s {
            "uniform" => Ok(Dist::Uniform),
            "zipfian" | "zipf" => Ok(Dist::Zipfian),
            _ => bail!("unknown distribution {s:?} (uniform, zipfian)"),
        }
    }
    pub(super) fn name(self) -> &'static str {
        match self {
            Dist::Uniform => "uniform",
            Dist::Zipfian => "zipfian",
        }
    }
}

pub(super) fn parse_mode(s: &str) -> anyhow::Result<bool> {
    match s {
        "two-level" => Ok(true),
        "one-level" => Ok(false),
        _ => bail!("unknown mode {s:?} (two-level, one-level)"),
    }
}

pub(super) fn mode_name(two_level: bool) -> &'static str {
    if two_level {
        "two-level"
    } else {
        "one-level"
    }
}
