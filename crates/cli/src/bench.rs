//! `ramstore bench`: closed-loop latency and throughput of a running cluster.
//!
//! The table is created if missing and (unless `--no-load`) its `--keys` objects are
//! written with multi-writes. Then `--clients` closed-loop clients each issue one
//! operation at a time for a warm-up (not measured) and then `--duration` seconds;
//! every operation that *starts* inside the measured window is timed on its own and
//! recorded in an HDR histogram (µs, 3 significant digits).
//!
//! # How clients are driven (`--mode`)
//!
//! - `threads` (default): each client is an OS thread running its own current-thread
//!   tokio runtime and its own [`Client`] (own TCP connection to the master). The
//!   request is written and the response read on the same thread, so one operation
//!   costs what an async application with a runtime per thread pays: no hand-off
//!   between threads on the client side.
//! - `tasks`: every client is a task on one shared multi-thread runtime (one worker
//!   per CPU), each with its own `Client`. The usual shape of a tokio service; the
//!   response can wake the waiting task on another worker.
//! - `blocking`: each client is an OS thread with its own [`BlockingClient`], whose
//!   runtime thread reads the response and then wakes the calling thread: one more
//!   thread wake-up per operation than `threads`.
//!
//! With `--shared-client` all clients use one `Client` (one connection per master,
//! requests multiplexed on it) instead of one each.
//!
//! # Workloads
//!
//! `read` and `write` pick keys uniformly. `ycsb-a` (50% read, 50% update),
//! `ycsb-b` (95/5), `ycsb-c` (100% read) and `ycsb-f` (50% read, 50%
//! read-modify-write, as YCSB's workload F; a read-modify-write is a read and then a
//! write of the same key, timed and counted as one operation) pick keys from YCSB's
//! scrambled Zipfian distribution (θ = 0.99): Zipfian ranks hashed with 64-bit FNV
//! over the key space so the hot keys are spread out.
//!
//! `tx` commits one transaction per operation, writing `--tx-objects` distinct
//! uniform keys (blind writes: the client buffers them, so the operation's time is
//! the commit: one prepare per participant master in parallel, then the decision;
//! one round trip on one master). `bank` moves 1 between two distinct uniform
//! accounts in a transaction that reads both and writes both, retried on abort
//! (the time and count are of committed transfers, retries included).
//!
//! Errors are counted and reported, not fatal. A read of a missing object
//! (`--no-load` on an empty table) is a complete round trip: it is timed and counted
//! as `not_found`, not as an error.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result};
use ramstore_client::{Client, ClientError};
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

// One idea per file (issue 19); the children never name this parent, so the
// modules form no cycle.
mod args;
mod clients;
mod report;
mod workload;

pub use args::BenchArgs;
use args::Mode;
use clients::{client_options, load, run_clients, Shared};
use report::{cpu_model, read_proc, Machine, Report, Summary};
use workload::{KeyChooser, Zipfian, OPS, ZIPFIAN_THETA};

pub fn run(args: BenchArgs) -> Result<()> {
    // Bad values are usage errors (exit code 2), found before anything starts.
    let usage = |m: &str| -> Result<()> { Err(crate::reach::Exit::Usage(m.to_string()).into()) };
    if args.clients == 0 {
        return usage("--clients must be at least 1");
    }
    if args.keys == 0 {
        return usage("--keys must be at least 1");
    }
    if (args.keys as usize) < args.workload.objects(usize::from(args.tx_objects)) {
        return usage("--keys must be at least the objects each transaction touches");
    }
    if !(args.duration > 0.0 && args.duration.is_finite()) {
        return usage("--duration must be a positive number of seconds");
    }
    if !(args.warmup >= 0.0 && args.warmup.is_finite()) {
        return usage("--warmup must be zero or a positive number of seconds");
    }
    let loadavg_start = read_proc("/proc/loadavg");
    let do_load = !args.no_load;

    // Set up on a runtime of its own, dropped before the clients start.
    let setup = crate::runtime()?;
    let table_id = setup.block_on(async {
        let client = Client::connect(client_options(&args))
            .await
            .map_err(|e| match e {
                ClientError::CoordinatorUnreachable(_) => anyhow::anyhow!(
                    "cannot reach coordinator at {} (is `ramstore dev` running? set --coordinator or RAMSTORE_COORDINATOR)",
                    args.coordinator()
                ),
                e => anyhow::anyhow!("cannot connect to coordinator at {}: {e}", args.coordinator()),
            })?;
        let table_id = match client.get_table_id(&args.table).await {
            Ok(id) => id,
            Err(ClientError::TableDoesntExist) => client
                .create_table(&args.table, 1)
                .await
                .with_context(|| format!("creating table '{}'", args.table))?,
            Err(e) => return Err(anyhow::anyhow!("looking up table '{}': {e}", args.table)),
        };
        anyhow::Ok((client, table_id))
    })?;
    let (setup_client, table_id) = table_id;

    let mut value = vec![0u8; args.value_size];
    SmallRng::seed_from_u64(args.seed).fill_bytes(&mut value);
    let shared = Arc::new(Shared {
        table_id,
        workload: args.workload,
        key_count: args.keys,
        value,
        chooser: if args.workload.zipfian() {
            KeyChooser::Zipfian(Zipfian::new(args.keys, ZIPFIAN_THETA))
        } else {
            KeyChooser::Uniform(args.keys)
        },
        warmup: Duration::from_secs_f64(args.warmup),
        duration: Duration::from_secs_f64(args.duration),
        seed: args.seed,
        tx_objects: usize::from(args.tx_objects),
        start: OnceLock::new(),
        failed: AtomicBool::new(false),
    });
    if do_load {
        setup.block_on(load(&setup_client, &shared))?;
    }
    drop(setup_client);
    drop(setup);

    eprintln!(
        "running {} with {} client(s) ({}{}, {}): {} s warm-up, then {} s measured",
        args.workload.name(),
        args.clients,
        match args.mode {
            Mode::Threads => "a thread and runtime each",
            Mode::Tasks => "tasks on a multi-thread runtime",
            Mode::Blocking => "a thread and BlockingClient each",
        },
        if args.shared_client {
            ", one shared client"
        } else {
            ""
        },
        if args.exactly_once() {
            "exactly-once"
        } else {
            "at-least-once"
        },
        args.warmup,
        args.duration
    );
    let stats = run_clients(&args, shared.clone())?;
    let all = Summary::of(&stats.all);
    let ops_per_sec = (stats.ops as f64 / args.duration * 10.0).round() / 10.0;
    let per_op: std::collections::BTreeMap<_, _> = OPS
        .iter()
        .filter(|op| !stats.by_op[op.index()].is_empty())
        .map(|op| (op.name(), Summary::of(&stats.by_op[op.index()])))
        .collect();

    println!(
        "{:<10} {:>7} {:>6} {:>10} {:>8} {:>8} {:>8} {:>9} {:>8} {:>7}",
        "WORKLOAD",
        "CLIENTS",
        "VALUE",
        "OPS/S",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "p99.9 µs",
        "max µs",
        "ERRORS"
    );
    let row = |name: &str, ops: f64, s: &Summary, errors: u64| {
        println!(
            "{name:<10} {:>7} {:>6} {ops:>10.0} {:>8} {:>8} {:>8} {:>9} {:>8} {errors:>7}",
            args.clients, args.value_size, s.p50_us, s.p90_us, s.p99_us, s.p999_us, s.max_us
        )
    };
    row(args.workload.name(), ops_per_sec, &all, stats.errors);
    if per_op.len() > 1 {
        for (name, s) in &per_op {
            row(&format!("  {name}"), s.ops as f64 / args.duration, s, 0);
        }
    }
    if stats.not_found > 0 {
        println!(
            "{} operation(s) found no object (was the table loaded? drop --no-load)",
            stats.not_found
        );
    }
    if stats.errors > 0 {
        println!(
            "{} operation(s) failed; the first: {}",
            stats.errors,
            stats.first_error.as_deref().unwrap_or("?")
        );
    }

    if let Some(path) = &args.json {
        let report = Report {
            workload: args.workload,
            tx_objects: args.tx_objects,
            clients: args.clients,
            value_size: args.value_size,
            ops_per_sec,
            p50_us: all.p50_us,
            p90_us: all.p90_us,
            p99_us: all.p99_us,
            p999_us: all.p999_us,
            max_us: all.max_us,
            mean_us: all.mean_us,
            keys: args.keys,
            duration_s: args.duration,
            warmup_s: args.warmup,
            ops: stats.ops,
            errors: stats.errors,
            not_found: stats.not_found,
            mode: args.mode,
            shared_client: args.shared_client,
            exactly_once: args.exactly_once(),
            table: args.table.clone(),
            coordinator: args.coordinator().to_string(),
            per_op,
            machine: Machine {
                nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
                model: cpu_model(),
                kernel: read_proc("/proc/sys/kernel/osrelease"),
                loadavg_start,
                loadavg_end: read_proc("/proc/loadavg"),
            },
        };
        let text = serde_json::to_string_pretty(&report)? + "\n";
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
