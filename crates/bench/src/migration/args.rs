//! Command-line arguments of `ramstore-bench migration`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct MigrationArgs {
    #[command(subcommand)]
    pub step: Step,
}

#[derive(Debug, Subcommand)]
pub enum Step {
    /// One run against a fresh cluster: load the table, split it at the middle
    /// hash, measure the peak, then run YCSB-B at half of it before, during and
    /// after migrating the upper half. Writes the run as JSON.
    Run(RunArgs),
    /// Gathers runs into the benchmark's JSON, draws the PNG beside it and
    /// prints the Must lines with PASS/FAIL.
    Report(ReportArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The coordinator's address.
    #[arg(long)]
    pub coordinator: String,
    /// `rocksteady`, `no-priority-pulls` or `stop-and-copy`.
    #[arg(long)]
    pub mode: String,
    /// Bytes of the table (keys and values; the upper half moves).
    #[arg(long, default_value_t = 1 << 30)]
    pub table_bytes: u64,
    /// Bytes of each value.
    #[arg(long, default_value_t = 128)]
    pub value_bytes: usize,
    /// Client threads (closed loop for the peak, open loop after).
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// Seconds of the closed-loop peak measurement (after one of warm-up).
    #[arg(long, default_value_t = 3.0)]
    pub peak_secs: f64,
    /// Seconds of fixed load before the migration (the first one is warm-up,
    /// left out of "before").
    #[arg(long, default_value_t = 5.0)]
    pub before_secs: f64,
    /// Seconds of fixed load after the migration is done.
    #[arg(long, default_value_t = 5.0)]
    pub after_secs: f64,
    /// Where the run's JSON goes.
    #[arg(long)]
    pub out: PathBuf,
    /// Also write every operation of the fixed load as CSV here (thread, due,
    /// latency and service time in µs, update, migrated half, failed), to see
    /// which operations wait during the migration.
    #[arg(long)]
    pub trace: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The benchmark's JSON (`{"runs": [...]}`); the PNG goes beside it.
    #[arg(long)]
    pub json: PathBuf,
    /// The runs' files, as `run` wrote them.
    pub runs: Vec<PathBuf>,
}
