//! `ramstore-bench`: named benchmark scenarios for ramstore.
//!
//! - `memory`: memory efficiency under the changing workloads of L Table 1, against
//!   one malloc per object (L§2, Fig. 1).
//! - `cleaner`: write throughput vs memory utilisation with two-level and one-level
//!   cleaning behind a bandwidth-limited backup link (L§8.1, Fig. 6).
//! - `migration`: live migration of half a tablet under a YCSB-B load, for
//!   Rocksteady and two baselines, against a cluster `scripts/bench-migration`
//!   starts (issue 20, K§2.3).
//! - `resp-replay`: one L Table 1 workload through the Redis protocol, for
//!   `scripts/bench-memory-vs-redis` (ramstore's and Redis's peak RSS).
//!
//! Every scenario prints a table and writes a JSON report (`--json FILE`) that
//! records the machine and the command. Micro-benchmarks live in `benches/micro.rs`
//! (`cargo bench -p ramstore-bench`).

mod cleaner;
mod memory;
mod migration;
mod replay;
mod report;
mod resp_replay;
mod retry;
mod throttle;
mod workload;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "ramstore-bench", about = "Benchmark scenarios for ramstore")]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// Memory efficiency: L Table 1 workloads W1–W8, ramstore vs malloc.
    Memory(memory::MemoryArgs),
    /// Write throughput vs memory utilisation (L Fig. 6).
    Cleaner(cleaner::CleanerArgs),
    /// Live migration under load (issue 20): `run` one mode, `report` the runs.
    Migration(migration::MigrationArgs),
    /// Crash-recovery replay on one core (R Table V), in process.
    Replay(replay::ReplayArgs),
    /// One L Table 1 workload through the Redis protocol, against any RESP server
    /// (`scripts/bench-memory-vs-redis`).
    RespReplay(resp_replay::RespReplayArgs),
    /// Child process of `memory`: one workload against ramstore (JSON on stdout).
    #[command(hide = true)]
    MemoryRamstore(memory::ChildArgs),
    /// Child process of `memory`: one workload against the malloc baseline.
    #[command(hide = true)]
    MemoryBaseline(memory::ChildArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match &cli.scenario {
        Scenario::Memory(a) => memory::run(a),
        Scenario::Cleaner(a) => cleaner::run(a),
        Scenario::Migration(a) => migration::run(a),
        Scenario::Replay(a) => replay::run(a),
        Scenario::RespReplay(a) => resp_replay::run(a),
        Scenario::MemoryRamstore(a) => memory::run_ramstore_child(a),
        Scenario::MemoryBaseline(a) => memory::run_baseline_child(a),
    }
}
