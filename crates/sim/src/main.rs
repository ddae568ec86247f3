//! `ramstore-sim`: one simulated run per process (see the library's doc).
//!
//! `ramstore-sim --servers N --seed S --sim-seconds T` prints a summary whose
//! last line holds `violations=V` and `trace=HEX`; it exits 1 when the checker
//! found violations, 2 when the run could not be made.

use std::sync::atomic::{AtomicU64, Ordering};

use clap::Parser;
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
    #[arg(long, default_value_t = 10)]
    servers: usize,
    /// The seed: the same seed gives the same run and trace.
    #[arg(long, default_value_t = 1)]
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
