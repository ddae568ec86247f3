//! `ramstore-sim`: one simulated run per process (see the library's doc).
//!
//! `ramstore-sim --servers N --seed S --sim-seconds T` prints a summary whose
//! last line holds `violations=V` and `trace=HEX`; it exits 1 when the checker
//! found violations, 2 when the run could not be made.

use std::sync::atomic::{AtomicU64, Ordering};

use clap::{Parser, Subcommand, ValueEnum};
use ramstore_server::placement::Placement;
use ramstore_sim::cluster::{Layout, ServerShape};
use ramstore_sim::cost::CostModel;
use ramstore_sim::experiment::{self, ScalingPlan};
use ramstore_sim::scaling::{self, PointConfig};
use ramstore_sim::spread::{self, SpreadConfig};
use ramstore_sim::topology::{default_racks, Topology, TopologyError};
use ramstore_sim::topology_experiments::{self, PlacementPlan, TrafficPlan};
use ramstore_sim::topology_file;
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
    #[command(flatten)]
    layout: LayoutArgs,
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

/// Where servers sit and how replicas and recoveries use it (issue 22;
/// docs/operations.md, "Network topology").
#[derive(clap::Args, Debug, Clone)]
struct LayoutArgs {
    /// flat (default: no switches named), tree (racks behind ToR switches),
    /// bcube (BCube(n, 1): two switches per server, C§2.2) or a TOML file.
    #[arg(long, default_value = "flat", global = true)]
    topology: String,
    /// Racks of a tree (default: racks of about 10 servers, at least 4).
    #[arg(long, global = true)]
    racks: Option<usize>,
    /// n of a BCube(n, 1) (default: ⌈√servers⌉).
    #[arg(long, global = true)]
    bcube_n: Option<usize>,
    /// Replica placement: scattered (R§7.1) or proximity (C§3.2).
    #[arg(long, value_enum, default_value_t = PlacementArg::Scattered, global = true)]
    placement: PlacementArg,
    /// Recovery masters: anywhere (R§7.4) or near the crashed log's holders
    /// (C§4.2).
    #[arg(long, value_enum, default_value_t = RecoveryMastersArg::Anywhere, global = true)]
    recovery_masters: RecoveryMastersArg,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum PlacementArg {
    Scattered,
    Proximity,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum RecoveryMastersArg {
    Anywhere,
    Near,
}

impl LayoutArgs {
    fn topology(&self, servers: usize) -> Result<Topology, TopologyError> {
        match self.topology.as_str() {
            "flat" => Ok(Topology::flat()),
            "tree" => Topology::tree(servers, self.racks.unwrap_or(default_racks(servers))),
            "bcube" => Topology::bcube(servers, self.bcube_n.unwrap_or(0)),
            path => topology_file::read(std::path::Path::new(path), servers),
        }
    }

    fn layout(&self, servers: usize) -> Result<Layout, TopologyError> {
        let topology = self.topology(servers)?;
        // R = min(3, N − 1), as the cluster gives its servers.
        topology.check_domains(servers.saturating_sub(1).min(3))?;
        Ok(Layout {
            topology,
            placement: match self.placement {
                PlacementArg::Scattered => Placement::Scattered,
                PlacementArg::Proximity => Placement::Proximity,
            },
            recovery_near: self.recovery_masters == RecoveryMastersArg::Near,
        })
    }

    /// The flags that give a point process this topology (`default` when
    /// flat was left as is).
    fn topology_args(&self, default: &str) -> Vec<String> {
        let topology = if self.topology == "flat" {
            default
        } else {
            &self.topology
        };
        let mut out = vec!["--topology".to_string(), topology.to_string()];
        out.extend(self.sizing_args());
        out
    }

    /// The racks and BCube n flags, if given.
    fn sizing_args(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(r) = self.racks {
            out.extend(["--racks".to_string(), r.to_string()]);
        }
        if let Some(n) = self.bcube_n {
            out.extend(["--bcube-n".to_string(), n.to_string()]);
        }
        out
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
        /// Simulated bytes of values each recovery master recovers
        /// (recovery-scaling: 256 KiB; recovery-traffic: 64 KiB).
        #[arg(long)]
        data_per_server_bytes: Option<u64>,
        /// placement: host 0's replicas per backup on average (default 20).
        #[arg(long, default_value_t = 20)]
        per_backup: u64,
        /// placement: bytes of values every other master writes.
        #[arg(long, default_value_t = 512 << 10)]
        other_bytes: u64,
        /// recovery-traffic: topologies to compare (default tree,bcube).
        #[arg(long, value_delimiter = ',')]
        topologies: Option<Vec<String>>,
    },
    /// One point of the placement experiment.
    #[command(hide = true)]
    SpreadPoint {
        #[arg(long, default_value_t = 20)]
        per_backup: u64,
        #[arg(long, default_value_t = 512 << 10)]
        other_bytes: u64,
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
    /// Replica spread over backups, scattered vs proximity (R Fig. 17).
    Placement,
    /// Recovery bytes crossing more than one hop (C§4.2).
    RecoveryTraffic,
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
            let layout = match args.layout.layout(args.servers) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("error: {e}");
                    return 2;
                }
            };
            let config = PointConfig {
                layout,
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
        Cmd::SpreadPoint {
            per_backup,
            other_bytes,
        } => spread_point(args, *per_backup, *other_bytes),
        Cmd::Experiment {
            name: ExperimentName::Placement,
            quick,
            json,
            sizes,
            per_backup,
            other_bytes,
            ..
        } => {
            let plan = PlacementPlan {
                servers: sizes.clone().unwrap_or_else(|| {
                    if *quick {
                        vec![20, 50]
                    } else {
                        vec![50, 100, 200]
                    }
                }),
                seed: args.seed,
                per_backup: *per_backup,
                other_bytes: *other_bytes,
                common: args.layout.topology_args("tree"),
            };
            finish(
                topology_experiments::placement(&exe_or_exit(), &plan),
                json.as_deref(),
                topology_experiments::placement_table,
                topology_experiments::placement_json,
                topology_experiments::placement_csv,
                topology_experiments::placement_svg,
                topology_experiments::placement_must,
            )
        }
        Cmd::Experiment {
            name: ExperimentName::RecoveryTraffic,
            quick,
            json,
            sizes,
            data_per_server_bytes,
            topologies,
            ..
        } => {
            let plan = TrafficPlan {
                servers: sizes.clone().unwrap_or_else(|| {
                    if *quick {
                        vec![50]
                    } else {
                        vec![100, 200]
                    }
                }),
                topologies: topologies.clone().unwrap_or_else(|| {
                    if *quick {
                        vec!["tree".into()]
                    } else {
                        vec!["tree".into(), "bcube".into()]
                    }
                }),
                seed: args.seed,
                data_per_server: data_per_server_bytes.unwrap_or(TRAFFIC_DATA_PER_SERVER),
                common: args.layout.sizing_args(),
            };
            finish(
                topology_experiments::recovery_traffic(&exe_or_exit(), &plan),
                json.as_deref(),
                topology_experiments::traffic_table,
                topology_experiments::traffic_json,
                topology_experiments::traffic_csv,
                topology_experiments::traffic_svg,
                topology_experiments::traffic_must,
            )
        }
        Cmd::Experiment {
            name: ExperimentName::RecoveryScaling,
            quick,
            json,
            sizes,
            data_per_server_bytes,
            ..
        } => {
            let plan = ScalingPlan {
                servers: sizes.clone().unwrap_or_else(|| ScalingPlan::sizes(*quick)),
                data_per_server: data_per_server_bytes.unwrap_or(DATA_PER_SERVER),
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

/// Simulated bytes each recovery master recovers in recovery-traffic: 64
/// KiB, so the few near recovery masters of a rack (C§4.2) hold what the
/// whole cluster's would with room in their 4 MiB logs.
const TRAFFIC_DATA_PER_SERVER: u64 = 64 << 10;

/// This binary, to run points with; exits 2 if it cannot be found.
fn exe_or_exit() -> std::path::PathBuf {
    std::env::current_exe().unwrap_or_else(|e| {
        eprintln!("error: cannot find this binary: {e}");
        std::process::exit(2)
    })
}

/// Prints an experiment's table and writes its JSON, CSV and SVG; exit 0
/// when `must` holds, 1 when it does not, 2 when it could not run.
fn finish<T>(
    points: Result<Vec<T>, experiment::ExperimentError>,
    json: Option<&std::path::Path>,
    table: impl Fn(&[T]) -> String,
    to_json: impl Fn(&[T]) -> String,
    csv: impl Fn(&[T]) -> String,
    svg: impl Fn(&[T]) -> String,
    must: impl Fn(&[T]) -> bool,
) -> i32 {
    let points = match points {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    print!("{}", table(&points));
    if let Some(path) = json {
        let written = experiment::write(path, &to_json(&points))
            .and_then(|()| experiment::write(&path.with_extension("csv"), &csv(&points)))
            .and_then(|()| experiment::write(&path.with_extension("svg"), &svg(&points)));
        if let Err(e) = written {
            eprintln!("error: {e}");
            return 2;
        }
    }
    i32::from(!must(&points))
}

/// `spread-point`: one point of the placement experiment.
fn spread_point(args: &Args, per_backup: u64, other_bytes: u64) -> i32 {
    let layout = match args.layout.layout(args.servers) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let mut shape = args.shape.shape(scaling_shape());
    // Host 0's near backups hold far more of its replicas under proximity
    // placement (a rack's share, not the cluster's): frames are cheap, only
    // the chunks written are held (`SparseDisk`).
    if args.shape.backup_frames.is_none() {
        shape.backup_frames = 512;
    }
    let config = SpreadConfig {
        servers: args.servers,
        seed: args.seed,
        per_backup,
        other_bytes,
        shape,
        layout,
    };
    match spread::run_spread(&config) {
        Ok(p) => {
            println!("{}", p.to_line());
            i32::from(p.violations > 0 || p.domain_breaks > 0)
        }
        Err(e) => {
            eprintln!("error: {e}");
            2
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
        layout: match args.layout.layout(args.servers.max(1)) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(2);
            }
        },
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
