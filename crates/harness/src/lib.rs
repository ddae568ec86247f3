//! The reliability harness (issue 6): starts a ramstore cluster as real processes,
//! runs client workers that record every operation, injects faults on a seeded
//! schedule, and checks the recorded history with `ramstore-checker` — every
//! acknowledged write readable, no deleted object back, versions only growing,
//! per-key linearizability.
//!
//! Parts: [`process`] (one child process: waits for ready lines, keeps its output,
//! optionally logs to a file), [`local`] (the end-to-end tests' fixtures: a
//! coordinator, servers and `ramstore dev` on 127.0.0.1, one-shot CLI commands),
//! [`etcd`] (a throwaway etcd, also the fixture of the coordinator's etcd tests),
//! [`cluster`] (coordinator(s), optional etcd, servers with fixed addresses and
//! disks; kill/stop/continue/restart/partition/delay), [`netns`] (network
//! namespaces and nftables rules, root only), [`proxy`] (a delaying TCP proxy in
//! front of each server), [`workload`] (workers and the history), [`faults`] (the
//! injector), and [`run`] tying them together for the chaos and partition tests
//! (`crates/cli/tests/chaos.rs`, `partition.rs`) and `scripts/soak` (the
//! `ramstore-harness` binary). See docs/reliability.md.
//!
//! This is the workspace's test-support crate: fixtures that start real processes
//! (etcd, clusters) and [`counting_alloc`] (the counting global allocator of the
//! `no_alloc` tests) live here rather than in a product library, and only tests,
//! `scripts/soak` and other test-support code depend on it, so the `ramstore`
//! binary never links it.
//!
//! Invariants: every process the harness starts is killed when its owner is
//! dropped or its spawning thread ends; the injector waits for the cluster to be
//! whole (all servers up, no recovery running) before the next fault, and a cluster
//! that does not heal within the patience is an error carrying every process's log.
//!
//! Thread-safety: a [`cluster::Cluster`] is used from the thread that made it (the
//! methods that spawn processes check this); workers run on their own threads with
//! their own clients.

pub mod cluster;
pub mod counting_alloc;
pub mod disk;
pub mod etcd;
pub mod faults;
pub mod interrupt;
pub mod local;
pub mod netns;
pub mod process;
pub mod proxy;
pub mod workload;

use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use ramstore_checker::{check, CheckOptions, Report};
use ramstore_client::ClientError;

pub use cluster::{Cluster, ClusterConfig};
pub use faults::{Fault, FaultRecord, Injector};
pub use workload::{Workload, WorkloadConfig};

/// What went wrong while running a cluster (not a checker verdict).
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("cannot start {name}: {why}")]
    Spawn { name: String, why: String },
    #[error("{name} not ready: {why}\n{log}")]
    NotReady {
        name: String,
        why: String,
        log: String,
    },
    #[error("timed out waiting for {what}\n{logs}")]
    Timeout { what: String, logs: String },
    #[error("client: {0}")]
    Client(#[from] ClientError),
    #[error("etcd: {0}")]
    Etcd(String),
    #[error("network namespaces: {0}")]
    Netns(String),
    #[error("{0}")]
    Io(String),
    #[error("cluster processes must be spawned from the thread that made the cluster")]
    WrongThread,
}

/// Operation deadline of the final reads that end a window.
pub const FINAL_READ_DEADLINE: Duration = Duration::from_secs(15);

/// Which faults to inject.
#[derive(Clone, Debug)]
pub enum FaultPlan {
    /// These faults in this order (pauses drawn between them), then load alone
    /// until the run's duration is up.
    Sequence(Vec<Fault>),
    /// A fault drawn from `kinds` after every pause drawn from `pause_ms`, until the
    /// duration is up.
    Random {
        kinds: Vec<Fault>,
        pause_ms: (u64, u64),
    },
}

/// A whole run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub cluster: ClusterConfig,
    pub workload: WorkloadConfig,
    pub faults: FaultPlan,
    /// How long the load runs (at least until the fault sequence is done).
    pub duration: Duration,
    /// Long runs are checked in windows of this length: each window's workers use
    /// a table of their own, and its history is checked (on another thread) and
    /// dropped when the window ends, so memory stays bounded. `None`: one window.
    pub window: Option<Duration>,
    /// Seed of the fault schedule (the workload has its own in `workload.seed`).
    pub seed: u64,
    /// How long the cluster may take to heal after a fault.
    pub patience: Duration,
    /// Masters each test table is spread over (the other servers start as
    /// backups only).
    pub table_span: u32,
    /// Operation deadline of the workers' clients.
    pub client_deadline: Duration,
    pub check: CheckOptions,
}

/// What a run did and what the checker found.
#[derive(Debug)]
pub struct RunReport {
    pub faults: Vec<FaultRecord>,
    /// Crashed server ids recovered (removed from the coordinator's list).
    pub recoveries: usize,
    /// Windows checked.
    pub windows: usize,
    pub elapsed: Duration,
    /// The checker's findings over every window.
    pub report: Report,
    /// Histories of windows that were not clean (JSON lines; `ramstore-checker
    /// FILE` re-checks one).
    pub failed_histories: Vec<PathBuf>,
    /// Every process's log tail (when the verdict is not clean).
    pub logs: String,
}

/// One window's load: its table and workers.
struct Window {
    index: usize,
    load: Workload,
    started: Instant,
}

fn start_window(
    index: usize,
    config: &RunConfig,
    cluster: &Cluster,
    admin: &ramstore_client::BlockingClient,
    clock: Instant,
) -> Result<Window, HarnessError> {
    let table = admin.create_table(&format!("chaos-{index}"), config.table_span)?;
    let options = cluster.client_options(config.client_deadline);
    let mut workload = config.workload.clone();
    workload.seed = workload.seed.wrapping_add(index as u64 * 7919);
    let load = Workload::start(
        &workload,
        table,
        clock,
        &options,
        cluster.clients_namespace(),
    )?;
    Ok(Window {
        index,
        load,
        started: Instant::now(),
    })
}

/// Stops a window's load and checks its history on another thread (saving the
/// history next to the logs if it is not clean).
fn finish_window(
    window: Window,
    config: &RunConfig,
    cluster: &Cluster,
    admin: &ramstore_client::BlockingClient,
) -> WindowCheck {
    let history = window.load.stop(&config.workload, admin);
    let options = config.check.clone();
    let path = cluster
        .dir()
        .join(format!("history-{}.jsonl", window.index));
    thread::spawn(move || {
        let report = check(&history, &options);
        let saved = (!report.is_clean())
            .then(|| {
                let mut f = std::fs::File::create(&path).ok()?;
                history.write_jsonl(&mut f).ok()?;
                Some(path)
            })
            .flatten();
        (report, saved)
    })
}

/// A window's check running on its own thread: the report, and where the history
/// was saved if it was not clean.
type WindowCheck = thread::JoinHandle<(Report, Option<PathBuf>)>;

/// Merges the checks that have finished (all of them, waiting, when `wait`) into
/// `report`, saying each window's verdict; returns how many were merged.
fn collect(
    checks: &mut Vec<(usize, WindowCheck)>,
    report: &mut Report,
    failed: &mut Vec<PathBuf>,
    say: &mut impl FnMut(&str),
    wait: bool,
) -> Result<usize, HarnessError> {
    let mut merged = 0;
    let mut i = 0;
    while i < checks.len() {
        if !wait && !checks[i].1.is_finished() {
            i += 1;
            continue;
        }
        let (index, handle) = checks.remove(i);
        // A checker thread panics only on a checker bug; that is a failed run.
        let (r, saved) = handle
            .join()
            .map_err(|_| HarnessError::Io("the checker panicked".into()))?;
        say(&format!(
            "window {index}: {} operations on {} keys, {}",
            r.ops,
            r.keys,
            if r.is_clean() {
                "clean".to_string()
            } else {
                format!(
                    "{} violations, {} keys inconclusive",
                    r.violations.len(),
                    r.inconclusive.len()
                )
            }
        ));
        report.merge(r);
        failed.extend(saved);
        merged += 1;
    }
    Ok(merged)
}

/// Runs `config`, printing progress through `say`, and checks the history.
pub fn run(config: &RunConfig, mut say: impl FnMut(&str)) -> Result<RunReport, HarnessError> {
    let started = Instant::now();
    let mut cluster = Cluster::start(config.cluster.clone())?;
    say(&format!(
        "cluster up: {} servers (R = {}), coordinators {}{}, dir {}",
        config.cluster.servers,
        config.cluster.replicas,
        cluster.coordinator_addrs(),
        if config.cluster.etcd { " on etcd" } else { "" },
        cluster.dir().display()
    ));
    let admin = cluster.client(config.client_deadline)?;
    // The final read of each window's keys: a read that cannot be answered within
    // this means the cluster is not whole, and the pass stops.
    let final_reader = cluster.client(FINAL_READ_DEADLINE)?;
    let clock = Instant::now();
    let mut window = Some(start_window(0, config, &cluster, &admin, clock)?);
    let mut checks: Vec<(usize, WindowCheck)> = Vec::new();
    let mut report = Report::default();
    let mut failed_histories = Vec::new();
    let mut windows = 0usize;
    let mut injector = Injector::new(config.seed, config.patience);
    let deadline = clock + config.duration;
    let next = |injector: &mut Injector| -> Option<Fault> {
        match &config.faults {
            FaultPlan::Sequence(list) => list.get(injector.records.len()).copied(),
            FaultPlan::Random { kinds, .. } => injector.pick(kinds),
        }
    };
    let pause_ms = match &config.faults {
        FaultPlan::Sequence(_) => (1_000, 3_000),
        FaultPlan::Random { pause_ms, .. } => *pause_ms,
    };
    let mut ops_done = 0u64;
    let outcome = (|| -> Result<(), HarnessError> {
        loop {
            let pause = injector.pause(pause_ms.0, pause_ms.1);
            let sequence_left = matches!(&config.faults, FaultPlan::Sequence(l) if injector.records.len() < l.len());
            if Instant::now() + pause >= deadline && !sequence_left {
                break;
            }
            thread::sleep(pause);
            if let (Some(length), Some(w)) = (config.window, window.as_ref()) {
                if w.started.elapsed() >= length {
                    let w = window.take().expect("checked just above");
                    let index = w.index;
                    ops_done += w.load.ops();
                    checks.push((index, finish_window(w, config, &cluster, &final_reader)));
                    window = Some(start_window(index + 1, config, &cluster, &admin, clock)?);
                    say(&format!("window {index} done; checking it meanwhile"));
                }
            }
            windows += collect(
                &mut checks,
                &mut report,
                &mut failed_histories,
                &mut say,
                false,
            )?;
            let Some(fault) = next(&mut injector) else {
                break;
            };
            let record = injector.inject(&mut cluster, &admin, fault)?;
            let ops_now = ops_done + window.as_ref().map_or(0, |w| w.load.ops());
            say(&format!("{record}  (ops so far {ops_now})"));
        }
        // The rest of the duration under load alone (faults may have ended early).
        while Instant::now() < deadline {
            thread::sleep(Duration::from_millis(100));
            cluster.restart_exited()?;
        }
        cluster.wait_healthy(&admin, config.patience)?;
        Ok(())
    })();
    if let Some(w) = window.take() {
        checks.push((w.index, finish_window(w, config, &cluster, &final_reader)));
    }
    windows += collect(
        &mut checks,
        &mut report,
        &mut failed_histories,
        &mut say,
        true,
    )?;
    outcome?;
    let recoveries = cluster
        .server_states(&admin)?
        .values()
        .filter(|s| *s == "removed")
        .count();
    let logs = if report.is_clean() {
        String::new()
    } else {
        cluster.log_tails()
    };
    Ok(RunReport {
        faults: injector.records,
        recoveries,
        windows,
        elapsed: started.elapsed(),
        report,
        failed_histories,
        logs,
    })
}
