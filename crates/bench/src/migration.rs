//! Scenario `migration` (issue 20, **Benchmark**; K§2.3, K Fig. 2.x): live
//! migration under a YCSB-B load, for Rocksteady and two baselines, against real
//! processes that `scripts/bench-migration` starts (3 servers, R = 2).
//!
//! `run` does one mode on a fresh cluster: creates table `mig` (one tablet),
//! loads it with multi-writes, splits it at the middle hash (R Fig. 2
//! splitTablet), measures the client's closed-loop peak, then offers half of it
//! open-loop while it migrates the upper half to another server. Latency counts
//! from when an operation was due, so a stall is charged to every operation it
//! delays. `report` gathers the runs, writes `{"runs": [...]}`, the PNG beside it
//! and the Must lines.
//!
//! Single-threaded driver; the client threads share one `BlockingClient`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use ramstore_client::{BlockingClient, ClientOptions, MigrationMode, MultiWriteOp};
use serde::{Deserialize, Serialize};

use crate::report::{self, Machine};

// One idea per file (issue 19): the children name each other, never this parent.
mod args;
mod plot;
mod summary;
mod ycsb;

pub use args::MigrationArgs;
use args::{ReportArgs, RunArgs, Step};
use ramstore_bench::zipfian::{Zipfian, ZIPFIAN_THETA};
use summary::{musts, phase, phases, seconds, Marks, Run};
use ycsb::{key, Load, SPLIT_HASH};

/// The table the benchmark loads and migrates.
const TABLE: &str = "mig";
/// Objects per multi-write while loading.
const LOAD_BATCH: usize = 1000;
/// Threads loading the table.
const LOAD_THREADS: u64 = 2;
/// How often the driver asks whether the migration has arrived (then, whether
/// it is done).
const POLL: Duration = Duration::from_millis(10);
/// Until every record has arrived, the coordinator's list (which asks the
/// target for its statistics too) is read only every this many polls, to see a
/// migration that ended: each statistics answer measures the target's resident
/// memory (`mincore` over its log), and two of them every 10 ms were about 3%
/// of the target's CPU during the migration (docs/benchmarks.md, session 34).
const LIST_EVERY_POLLS: u32 = 10;
/// Seconds of fixed load left out at the start (connections, caches).
const WARMUP_SECS: f64 = 1.0;

/// The benchmark's JSON: the shape plus the machine and command.
#[derive(Debug, Serialize, Deserialize)]
struct Report {
    runs: Vec<Run>,
    machine: Option<serde_json::Value>,
    command: Option<String>,
}

pub fn run(args: &MigrationArgs) -> anyhow::Result<()> {
    match &args.step {
        Step::Run(a) => run_one(a),
        Step::Report(a) => report(a),
    }
}

fn parse_mode(s: &str) -> anyhow::Result<MigrationMode> {
    Ok(match s {
        "rocksteady" => MigrationMode::Rocksteady,
        "no-priority-pulls" => MigrationMode::NoPriorityPulls,
        "stop-and-copy" => MigrationMode::StopAndCopy,
        _ => bail!("unknown mode {s:?} (rocksteady, no-priority-pulls, stop-and-copy)"),
    })
}

fn connect(coordinator: &str) -> anyhow::Result<BlockingClient> {
    let mut options = ClientOptions::new(coordinator);
    // Stop-and-copy answers MigrateTablet only after the whole copy: one attempt
    // must be allowed to wait that long, or its retry finds the migration in
    // progress and is refused.
    options.rpc_deadline = Duration::from_secs(300);
    options.operation_deadline = Duration::from_secs(300);
    BlockingClient::connect(options).context("connecting to the coordinator")
}

fn run_one(a: &RunArgs) -> anyhow::Result<()> {
    let mode = parse_mode(&a.mode)?;
    let client = Arc::new(connect(&a.coordinator)?);
    // The script starts 3 servers; they enlist in the background.
    let waiting = Instant::now();
    let servers = loop {
        let up = up_servers(&client, &a.coordinator)?;
        if up.len() >= 3 || waiting.elapsed() > Duration::from_secs(30) {
            break up;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if servers.len() < 2 {
        bail!(
            "the cluster has {} servers up; 2 or more needed",
            servers.len()
        );
    }
    let table_id = client.create_table(TABLE, 1)?;
    let object_bytes = (key(0).len() + a.value_bytes) as u64;
    let objects = (a.table_bytes / object_bytes).max(1);
    let loaded = Instant::now();
    load(&client, table_id, objects, a.value_bytes)?;
    eprintln!(
        "[{}] loaded {objects} objects of {} B in {:.1} s",
        a.mode,
        a.value_bytes,
        loaded.elapsed().as_secs_f64()
    );
    // Split at the middle hash; the upper half moves (R Fig. 2 splitTablet).
    let split = SPLIT_HASH;
    client.split_tablet(TABLE, split)?;
    let map = client.tablet_map()?;
    let source = map
        .iter()
        .find(|t| t.table_id == table_id && t.start_hash == split)
        .map(|t| t.server_id)
        .context("the upper half's tablet is not in the map")?;
    let (target, target_addr) = servers
        .iter()
        .find(|(s, _)| *s != source)
        .cloned()
        .context("no server other than the source")?;
    let target_addr = target_addr.as_str();

    let mut load = Load {
        client: client.clone(),
        table_id,
        keys: Zipfian::new(objects, ZIPFIAN_THETA),
        value: vec![b'v'; a.value_bytes],
        offered_per_s: None,
        threads: a.clients,
    };
    // The peak: closed loop, after a second of warm-up.
    let peak_samples = timed(
        Arc::new(load.clone()),
        WARMUP_SECS + a.peak_secs,
        |_| Ok(()),
    )?
    .0;
    let peak = phase(&peak_samples, WARMUP_SECS, WARMUP_SECS + a.peak_secs);
    let offered = peak.ops_per_s / 2.0;
    eprintln!(
        "[{}] peak {:.0} ops/s closed-loop ({} threads); offering {offered:.0} ops/s",
        a.mode, peak.ops_per_s, a.clients
    );
    load.offered_per_s = Some(offered);

    let before = a.before_secs.max(WARMUP_SECS + 1.0);
    let after = a.after_secs;
    let (samples, marks, info) = timed(Arc::new(load), f64::INFINITY, |t0| {
        std::thread::sleep(Duration::from_secs_f64(before));
        let start = t0.elapsed().as_secs_f64();
        let id = client.migrate_tablet_with_mode(TABLE, split, u64::MAX, target, mode)?;
        let ownership = t0.elapsed().as_secs_f64();
        let mut arrived = None;
        let info = 'poll: loop {
            // Before the records have arrived, ask the target only, and the
            // coordinator's list only now and then (`LIST_EVERY_POLLS`).
            for _ in 1..LIST_EVERY_POLLS {
                if arrived.is_some() {
                    break;
                }
                if has_arrived(&client, target_addr, id) {
                    arrived = Some(t0.elapsed().as_secs_f64());
                    break;
                }
                std::thread::sleep(POLL);
            }
            let found = client.migrations()?.into_iter().find(|m| m.id == id);
            match found {
                Some(m) if m.is_done() => break 'poll m,
                Some(m) if m.is_finished() => bail!("migration {id} ended {}", m.state),
                Some(_) => {
                    if arrived.is_none() && has_arrived(&client, target_addr, id) {
                        arrived = Some(t0.elapsed().as_secs_f64());
                    }
                    std::thread::sleep(POLL)
                }
                None => bail!("migration {id} is no longer listed"),
            }
        };
        let done = t0.elapsed().as_secs_f64();
        std::thread::sleep(Duration::from_secs_f64(after));
        let marks = Marks {
            measure_s: WARMUP_SECS,
            start_s: start,
            ownership_s: ownership,
            arrived_s: arrived.unwrap_or(done),
            done_s: done,
            end_s: t0.elapsed().as_secs_f64(),
        };
        Ok((marks, info))
    })
    .map(|(s, r)| (s, r.0, r.1))?;

    if let Some(path) = &a.trace {
        ycsb::write_trace(path, &samples)
            .with_context(|| format!("writing the trace {}", path.display()))?;
    }
    let bytes = info.bytes.unwrap_or(0);
    let migration_s = marks.done_s - marks.start_s;
    let arrived_s = marks.arrived_s - marks.start_s;
    let (b, d, f) = phases(&samples, &marks);
    let run = Run {
        mode: mode.name().to_owned(),
        mb_per_s: bytes as f64 / 1e6 / arrived_s.max(1e-9),
        mb_per_s_durable: bytes as f64 / 1e6 / migration_s.max(1e-9),
        ownership_transfer_ms: (marks.ownership_s - marks.start_s) * 1e3,
        p50_before_us: b.p50_us,
        p999_before_us: b.p999_us,
        p50_during_us: d.p50_us,
        p999_during_us: d.p999_us,
        failed_ops: samples.iter().filter(|s| s.failed).count() as u64,
        p99_before_us: b.p99_us,
        p99_during_us: d.p99_us,
        p50_after_us: f.p50_us,
        p99_after_us: f.p99_us,
        p999_after_us: f.p999_us,
        migrated_bytes: bytes,
        migrated_objects: info.objects.unwrap_or(0),
        migration_s,
        objects,
        value_bytes: a.value_bytes,
        peak_ops_per_s: peak.ops_per_s,
        offered_ops_per_s: offered,
        before: b,
        during: d,
        after: f,
        seconds: seconds(&samples, marks.end_s),
        marks,
    };
    report::write_json(&a.out, &run)?;
    eprintln!(
        "[{}] {} MB in {:.2} s ({:.1} MB/s), ownership after {:.1} ms; p99.9 before {} µs, \
         during {} µs; {} failed",
        run.mode,
        bytes / 1_000_000,
        migration_s,
        run.mb_per_s,
        run.ownership_transfer_ms,
        run.p999_before_us,
        run.p999_during_us,
        run.failed_ops
    );
    Ok(())
}

/// Runs `load` from now; `drive` runs on this thread meanwhile (given the
/// start) and the load stops when it returns, or after `secs` if that is
/// finite (then `drive` runs first). The samples of every thread, merged.
fn timed<R>(
    load: Arc<Load>,
    secs: f64,
    drive: impl FnOnce(Instant) -> anyhow::Result<R>,
) -> anyhow::Result<(Vec<ycsb::Sample>, R)> {
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let threads = {
        let stop = stop.clone();
        std::thread::spawn(move || ycsb::run(load, start, stop))
    };
    let result = drive(start);
    if secs.is_finite() {
        std::thread::sleep(Duration::from_secs_f64(secs).saturating_sub(start.elapsed()));
    }
    stop.store(true, Ordering::Relaxed);
    let per_thread = threads
        .join()
        .map_err(|_| anyhow::anyhow!("a client thread panicked"))?;
    let r = result?;
    Ok((per_thread.into_iter().flatten().collect(), r))
}

/// Loads objects `0..objects` with multi-writes from a few threads.
fn load(
    client: &Arc<BlockingClient>,
    table_id: u64,
    objects: u64,
    value_bytes: usize,
) -> anyhow::Result<()> {
    let handles: Vec<_> = (0..LOAD_THREADS)
        .map(|t| {
            let client = client.clone();
            std::thread::spawn(move || -> anyhow::Result<()> {
                let value = vec![b'v'; value_bytes];
                let mine: Vec<u64> = (t..objects).step_by(LOAD_THREADS as usize).collect();
                for chunk in mine.chunks(LOAD_BATCH) {
                    let keys: Vec<Vec<u8>> = chunk.iter().map(|i| key(*i)).collect();
                    let ops: Vec<_> = keys
                        .iter()
                        .map(|k| MultiWriteOp::new(table_id, k, &value))
                        .collect();
                    for r in client.multi_write(&ops) {
                        r.context("loading the table")?;
                    }
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join()
            .map_err(|_| anyhow::anyhow!("a loading thread panicked"))??;
    }
    Ok(())
}

/// Ids and addresses of the servers the coordinator lists as up (its
/// `server.ID=ADDR up …` statistics).
fn up_servers(client: &BlockingClient, coordinator: &str) -> anyhow::Result<Vec<(u64, String)>> {
    let text = client.server_stats(coordinator)?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            let id = k.strip_prefix("server.")?.parse().ok()?;
            let mut fields = v.split_whitespace();
            let addr = fields.next()?.to_owned();
            (fields.next() == Some("up")).then_some((id, addr))
        })
        .collect())
}

/// Whether the target at `addr` reports every record of migration `id` arrived
/// (its `migration.ID.arrived=true` statistic).
fn has_arrived(client: &BlockingClient, addr: &str, id: u64) -> bool {
    let line = format!("migration.{id}.arrived=true");
    client
        .server_stats(addr)
        .is_ok_and(|text| text.lines().any(|l| l == line))
}

fn report(a: &ReportArgs) -> anyhow::Result<()> {
    let mut runs = Vec::new();
    for path in &a.runs {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        runs.push(
            serde_json::from_str::<Run>(&text)
                .with_context(|| format!("parsing {}", path.display()))?,
        );
    }
    let mut machine = Machine::probe();
    machine.finish();
    let out = Report {
        runs,
        machine: serde_json::to_value(&machine).ok(),
        command: Some(report::command_line()),
    };
    report::write_json(&a.json, &out)?;
    let png = a.json.with_extension("png");
    plot::write_png(&png, &out.runs)?;
    println!(
        "{:<18} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "mode",
        "MB/s",
        "owner ms",
        "p50 bef",
        "p99.9 bef",
        "p50 dur",
        "p99.9 dur",
        "ops/s",
        "failed"
    );
    for r in &out.runs {
        println!(
            "{:<18} {:>8.1} {:>10.1} {:>9} {:>9} {:>9} {:>9} {:>9.0} {:>7}",
            r.mode,
            r.mb_per_s,
            r.ownership_transfer_ms,
            r.p50_before_us,
            r.p999_before_us,
            r.p50_during_us,
            r.p999_during_us,
            r.offered_ops_per_s,
            r.failed_ops
        );
    }
    for r in &out.runs {
        for m in musts(r) {
            println!(
                "Must [{}] {}: {}",
                r.mode,
                m.text,
                if m.pass { "PASS" } else { "FAIL" }
            );
        }
    }
    println!(
        "JSON: {}\nplot: {} ({})",
        a.json.display(),
        png.display(),
        plot::LEGEND
    );
    Ok(())
}
