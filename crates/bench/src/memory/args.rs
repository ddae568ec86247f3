//! The flags of the `memory` scenario and of its two children, and the limits on
//! `--utilization` (L§7: about 98% of memory is the deadlock-free limit).

use std::path::PathBuf;

/// Live log entries fill this share of the log's memory at the largest footprint,
/// unless `--utilization` says otherwise (the Must is judged at 90%).
pub const DEFAULT_UTILIZATION: f64 = 0.9;
/// Highest utilisation the bench accepts: L§7's deadlock-free limit is about 98% of
/// memory, and the cleaner's reserves and tombstones need the rest.
pub const MAX_UTILIZATION: f64 = 0.97;
/// The table all objects go to.
pub(super) const TABLE: u64 = 1;
pub(super) const MIB: u64 = 1 << 20;
pub(super) const GIB: u64 = 1 << 30;

/// `memory`: run W1–W8 against ramstore and the malloc baseline.
#[derive(Debug, clap::Args)]
pub struct MemoryArgs {
    /// 64 MiB live / 320 MiB allocated per phase instead of 1 GiB / 5 GiB.
    #[arg(long)]
    pub quick: bool,
    /// Workloads to run, comma separated (default: all eight).
    #[arg(long, value_delimiter = ',')]
    pub workloads: Vec<String>,
    /// Live key + value bytes, in MiB (overrides the default / --quick).
    #[arg(long)]
    pub live_mib: Option<u64>,
    /// Segment size in MiB. Default 8, or 2 with --quick: the cleaner keeps a whole
    /// segment in reserve, and a 78 MiB log cannot spare 8 MiB (10%) and still reach
    /// 90%; with 2 MiB segments the reserve is 3% and all eight workloads complete.
    #[arg(long)]
    pub segment_mib: Option<u64>,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Share of the log's memory that live entries fill at their largest (L§8.1's
    /// memory utilisation), 0.5 to 0.97. The log is sized from it.
    #[arg(long, default_value_t = DEFAULT_UTILIZATION, value_parser = parse_utilization)]
    pub utilization: f64,
    /// Where to write the JSON report.
    #[arg(long)]
    pub json: PathBuf,
}

/// What a child is told to run (also the hidden subcommands' arguments).
#[derive(Debug, Clone, clap::Args)]
pub struct ChildArgs {
    #[arg(long)]
    pub workload: String,
    #[arg(long)]
    pub live_bytes: u64,
    #[arg(long)]
    pub alloc_bytes: u64,
    #[arg(long)]
    pub seed: u64,
    /// Most live objects at once (from the sizing pass): sizes the bookkeeping, the
    /// hash table and the baseline's map.
    #[arg(long)]
    pub max_objects: u64,
    /// Log memory (ramstore only).
    #[arg(long, default_value_t = 0)]
    pub memory_bytes: u64,
    #[arg(long, default_value_t = 8 << 20)]
    pub segment_bytes: u64,
}

/// `--utilization`: a share between 0.5 and [`MAX_UTILIZATION`].
pub(super) fn parse_utilization(s: &str) -> Result<f64, String> {
    let u: f64 = s.parse().map_err(|e| format!("not a number: {e}"))?;
    if !(0.5..=MAX_UTILIZATION).contains(&u) {
        return Err(format!("must be between 0.5 and {MAX_UTILIZATION}"));
    }
    Ok(u)
}
