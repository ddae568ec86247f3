//! `ramstore-sim`: one simulated run per process (see the library's doc).
//!
//! `ramstore-sim --servers N --seed S --sim-seconds T` prints a summary whose
//! last line holds `violations=V` and `trace=HEX`; it exits 1 when the checker
//! found violations, 2 when the run could not be made.

use std::sync::atomic::{AtomicU64, Ordering};

use clap::{Parser, Subcommand, ValueEnum};
use ramstore_sim::cluster::ServerShape;
use ramstore_sim::cost::CostModel;
use ramstore_sim::experiment::{self, ScalingPlan};
use ramstore_sim::scaling::{self, PointConfig};
use ramstore_sim::{run, SimConfig};

/// Seed of the process's `getrandom` stream (set from `--seed` before anything
/// asks for random bytes: std's HashMap keys, tokio's select! order).
static ENTROPY: AtomicU64 = AtomicU64::new(0x5eed);

/// SplitMix64 step over [`ENTROPY`].
fn entropy_u64() -> u64 {
    let mut z = ENTROPY
        .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn fill(buf: *mut u8, len: usize) {
    // SAFETY: the caller (libc's contract for getrandom/getentropy) gives a
    // writable buffer of `len` bytes.
    let out = unsafe { std::slice::from_raw_parts_mut(buf, len) };
    for chunk in out.chunks_mut(8) {
        let bits = entropy_u64().to_le_bytes();
        chunk.copy_from_slice(&bits[..chunk.len()]);
    }
}

/// Replaces libc's `getrandom` in this binary with a seeded stream (as madsim
/// does): std's `RandomState` and tokio's select! randomness draw from it, so
/// HashMap iteration orders and select! choices repeat for a seed.
///
/// # Safety
/// `buf` must be writable for `buflen` bytes (getrandom(2)'s contract).
#[no_mangle]
pub unsafe extern "C" fn getrandom(buf: *mut u8, buflen: usize, _flags: u32) -> isize {
    fill(buf, buflen);
    buflen as isize
}

/// The same for `getentropy` (at most 256 bytes, 0 on success).
///
/// # Safety
/// `buf` must be writable for `buflen` bytes.
#[no_mangle]
pub unsafe extern "C" fn getentropy(buf: *mut u8, buflen: usize) -> i32 {
    fill(buf, buflen);
    0
}

#[derive(Parser, Debug)]
#[command(about = "Run a ramstore cluster in one process on simulated time, network and disks")]
struct Args {
    /// Storage servers (master + backup each).
    #[arg(long, default_value_t = 10, global = true)]
    servers: usize,
    /// The seed: the same seed gives the same run and trace.
    #[arg(long, default_value_t = 1, global = true)]
    seed: u64,
    /// Simulated seconds of workload.
    #[arg(long, default_value_t = 60)]
    sim_seconds: u64,
    /// Client workers.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Run without faults.
    #[arg(long)]
    no_faults: bool,
    /// Plant a bug (backups acknowledge data writes without storing them), to
    /// show the simulator finds it.
    #[arg(long)]
    planted_bug: bool,
    /// Keep migrating random tablets to other masters while the clients run.
    #[arg(long)]
    migrations: bool,
    /// With --migrations: move a range only to a master never seen owning it.
    #[arg(long)]
    fresh_targets: bool,
    /// Print every fault as it happens (stderr).
    #[arg(long)]
    verbose: bool,
    /// Write the recorded history here (JSON lines, as `ramstore-checker` reads).
    #[arg(long)]
    history: Option<std::path::PathBuf>,
    /// Print the HashMap iteration order of this process and exit (a check that
    /// the getrandom override is in effect).
    #[arg(long, hide = true)]
    hash_order: bool,
    #[command(flatten)]
    shape: ShapeArgs,
    #[command(flatten)]
    cost: CostArgs,
    /// Charge simulated NIC, disk and CPU time (crates/sim/src/cost.rs); off
    /// by default, so seeds keep their traces.
    #[arg(long)]
    cost_model: bool,
    #[command(subcommand)]
    command: Option<Cmd>,
}

/// What each simulated server is given (issue 22; docs/operations.md,
/// "Simulating large clusters").
#[derive(clap::Args, Debug, Clone)]
struct ShapeArgs {
    /// Log memory per server, MiB (default 16). Touched lazily: what a server
    /// holds resident follows its data.
    #[arg(long, global = true)]
    server_memory_mib: Option<usize>,
    /// The same in KiB (for clusters of very small servers); wins over MiB.
    #[arg(long, hide = true, global = true)]
    server_memory_kib: Option<usize>,
    /// Segment size, KiB (default 128).
    #[arg(long, global = true)]
    segment_kib: Option<usize>,
    /// Frames per backup disk (default 128).
    #[arg(long, global = true)]
    backup_frames: Option<u32>,
}

impl ShapeArgs {
    fn shape(&self, base: ServerShape) -> ServerShape {
        ServerShape {
            memory_bytes: self
                .server_memory_kib
                .map(|k| k << 10)
                .or(self.server_memory_mib.map(|m| m << 20))
                .unwrap_or(base.memory_bytes),
            first_memory_bytes: base.first_memory_bytes,
            segment_bytes: self.segment_kib.map_or(base.segment_bytes, |k| k << 10),
            backup_frames: self.backup_frames.unwrap_or(base.backup_frames),
        }
    }
}

/// The cost model's knobs (the rest keep their calibrated defaults).
#[derive(clap::Args, Debug, Clone)]
struct CostArgs {
    /// Real bytes each simulated byte stands for in the cost model.
    #[arg(long, global = true)]
    bytes_scale: Option<u64>,
    /// CPU cores per simulated server.
    #[arg(long, global = true)]
    cores: Option<usize>,
}

impl CostArgs {
    fn model(&self, bytes_scale: u64) -> CostModel {
        let d = CostModel::default();
        CostModel {
            bytes_scale: self.bytes_scale.unwrap_or(bytes_scale),
            cores: self.cores.unwrap_or(d.cores),
            ..d
        }
    }
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run an experiment over several cluster sizes (each point in a process
    /// of its own); print a table, write JSON, CSV and SVG.
    Experiment {
        name: ExperimentName,
        /// Small sizes only (10, 20, 50 servers).
        #[arg(long)]
        quick: bool,
        /// Write the points here as JSON (and FILE.csv, FILE.svg beside it).
        #[arg(long)]
        json: Option<std::path::PathBuf>,
        /// Cluster sizes instead of the default ones (comma-separated).
        #[arg(long, value_delimiter = ',')]
        sizes: Option<Vec<usize>>,
        /// Simulated bytes of values each recovery master recovers.
        #[arg(long, default_value_t = DATA_PER_SERVER)]
        data_per_server_bytes: u64,
    },
    /// One point of recovery-scaling (what `experiment` runs per size).
    #[command(hide = true)]
    RecoveryPoint {
        #[arg(long, default_value_t = DATA_PER_SERVER)]
        data_per_server_bytes: u64,
    },
}

#[derive(ValueEnum, Debug, Clone, Copy)]
enum ExperimentName {
    /// Recovery time vs cluster size, data per server fixed (R Fig. 16).
    RecoveryScaling,
}

/// Simulated bytes each recovery master recovers by default: 256 KiB, so a
/// 1,000-server point holds 250 MiB on its one loaded master (and 3× that in
/// replicas) and fits this machine.
const DATA_PER_SERVER: u64 = 256 << 10;
/// What each simulated byte stands for in the experiment by default: 2,048,
/// so 256 KiB per server stands for 512 MiB — R Fig. 16's 500 MB per node.
const EXPERIMENT_BYTES_SCALE: u64 = 2048;

/// The servers of a scaling point: 4 MiB of log each, 128 KiB segments (the
/// least the log takes), 64 frames (room for 3 × 256 KiB of the loaded
/// master's replicas and the recovered data's, with headroom).
fn scaling_shape() -> ServerShape {
    ServerShape {
        memory_bytes: 4 << 20,
        first_memory_bytes: None,
        segment_bytes: 128 << 10,
        backup_frames: 64,
    }
}

fn run_command(args: &Args, cmd: &Cmd) -> i32 {
    let shape = args.shape.shape(scaling_shape());
    let cost = args.cost.model(EXPERIMENT_BYTES_SCALE);
    match cmd {
        Cmd::RecoveryPoint {
            data_per_server_bytes,
        } => {
            let config = PointConfig {
                servers: args.servers,
                data_per_server: *data_per_server_bytes,
                seed: args.seed,
                cost,
                memory_bytes: shape.memory_bytes,
                segment_bytes: shape.segment_bytes,
                backup_frames: shape.backup_frames,
            };
            match scaling::run_point(&config) {
                Ok(p) => {
                    println!("{}", p.to_line());
                    i32::from(p.violations > 0)
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    2
                }
            }
        }
        Cmd::Experiment {
            name: ExperimentName::RecoveryScaling,
            quick,
            json,
            sizes,
            data_per_server_bytes,
        } => {
            let plan = ScalingPlan {
                servers: sizes.clone().unwrap_or_else(|| ScalingPlan::sizes(*quick)),
                data_per_server: *data_per_server_bytes,
                seed: args.seed,
                cost,
                memory_bytes: shape.memory_bytes,
                segment_bytes: shape.segment_bytes,
                backup_frames: shape.backup_frames,
            };
            let exe = match std::env::current_exe() {
                Ok(e) => e,
                Err(e) => {
                    eprintln!("error: cannot find this binary: {e}");
                    return 2;
                }
            };
            let points = match experiment::recovery_scaling(&exe, &plan) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("error: {e}");
                    return 2;
                }
            };
            print!("{}", experiment::table(&points, cost.bytes_scale));
            if let Some(path) = json {
                let written = experiment::write(path, &experiment::json(&points, cost.bytes_scale))
                    .and_then(|()| {
                        experiment::write(
                            &path.with_extension("csv"),
                            &experiment::csv(&points, cost.bytes_scale),
                        )
                    })
                    .and_then(|()| {
                        experiment::write(&path.with_extension("svg"), &experiment::svg(&points))
                    });
                if let Err(e) = written {
                    eprintln!("error: {e}");
                    return 2;
                }
            }
            i32::from(points.iter().any(|p| p.violations > 0))
        }
    }
}

fn main() {
    let args = Args::parse();
    // RUST_LOG=info shows the servers' and coordinator's logs, stamped with
    // the simulated time (as the --verbose lines are) and named by the server
    // that logged them (`server{server=s1.1}`); colours only on a terminal.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_timer(SimTime)
            .init();
    }
    ENTROPY.store(args.seed ^ 0x5eed_0000_0000, Ordering::Relaxed);
    if args.hash_order {
        let map: std::collections::HashMap<u32, ()> = (0..16).map(|i| (i, ())).collect();
        println!("{:?}", map.keys().collect::<Vec<_>>());
        return;
    }
    if let Some(cmd) = &args.command {
        std::process::exit(run_command(&args, cmd));
    }
    let config = SimConfig {
        seed: args.seed,
        servers: args.servers.max(1),
        sim_seconds: args.sim_seconds,
        faults: !args.no_faults,
        planted_bug: args.planted_bug,
        migrations: args.migrations,
        fresh_targets: args.fresh_targets,
        clients: args.clients.max(1),
        verbose: args.verbose,
        shape: args.shape.shape(ServerShape::default()),
        cost: args
            .cost_model
            .then(|| args.cost.model(CostModel::default().bytes_scale)),
    };
    let summary = match run(&config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    if let Some(path) = &args.history {
        let written = std::fs::File::create(path)
            .map(std::io::BufWriter::new)
            .and_then(|mut f| summary.history.write_jsonl(&mut f));
        if let Err(e) = written {
            eprintln!("error: cannot write the history to {}: {e}", path.display());
        }
    }
    print!("{}", summary.report);
    println!(
        "faults={} crashes={} failovers={} recoveries={} migrations={} messages={} dropped={} events={} unknown_ops={}",
        summary.faults,
        summary.crashes,
        summary.failovers,
        summary.recoveries,
        summary.migrations,
        summary.delivered,
        summary.dropped,
        summary.events,
        summary.unknown
    );
    let [source, target, both, coordinator] = summary.migration_crashes_by_kind;
    println!(
        "migrations_done={} migrations_rolled_back={} migrations_stuck={} \
         migration_crashes: source={source} target={target} both={both} coordinator={coordinator} \
         unreadable_keys={}",
        summary.migrations,
        summary.migrations_rolled_back,
        summary.migrations_stuck,
        summary.unreadable
    );
    println!(
        "wall_seconds={:.2} sim_seconds_per_wall_second={:.2}",
        summary.wall_seconds,
        summary.sim_seconds as f64 / summary.wall_seconds.max(1e-9)
    );
    println!("{}", summary.last_line());
    if summary.violations > 0 {
        std::process::exit(1);
    }
}

/// Log timestamps in simulated seconds ([`ramstore_sim::clock::log_time`]).
struct SimTime;

impl tracing_subscriber::fmt::time::FormatTime for SimTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        write!(
            w,
            "{:>10.3} s",
            ramstore_sim::clock::log_time().as_secs_f64()
        )
    }
}
