//! The reliability harness (issue 6): starts a ramstore cluster as real processes,
//! runs client workers that record every operation, injects faults on a seeded
//! schedule, and checks the recorded history with `ramstore-checker` — every
//! acknowledged write readable, no deleted object back, versions only growing,
//! per-key linearizability.
//!
//! Parts: [`process`] (one child process, logs to a file, waits for ready lines),
//! [`cluster`] (coordinator(s), optional etcd, servers with fixed addresses and
//! disks; kill/stop/continue/restart), [`workload`] (workers and the history),
//! [`faults`] (the injector), and [`run`] tying them together for the chaos test
//! (`crates/cli/tests/chaos.rs`) and `scripts/soak` (the `ramstore-harness`
//! binary).
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
pub mod faults;
pub mod process;
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
    #[error("{0}")]
    Io(String),
    #[error("cluster processes must be spawned from the thread that made the cluster")]
    WrongThread,
}

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
    /// Seed of the fault schedule (the workload has its own in `workload.seed`).
    pub seed: u64,
    /// How long the cluster may take to heal after a fault.
    pub patience: Duration,
    /// Masters the test table is spread over (the other servers start as backups
    /// only).
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
    pub elapsed: Duration,
    pub report: Report,
    /// The recorded history (JSON lines; `ramstore-checker FILE` re-checks it).
    pub history_path: PathBuf,
    /// Every process's log tail (for a failed verdict).
    pub logs: String,
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
    let table = admin.create_table("chaos", config.table_span)?;
    let clock = Instant::now();
    let options = cluster.client_options(config.client_deadline);
    let load = Workload::start(&config.workload, table, clock, || {
        ramstore_client::BlockingClient::connect(options.clone())
    })?;
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
    let outcome = (|| -> Result<(), HarnessError> {
        loop {
            let pause = injector.pause(pause_ms.0, pause_ms.1);
            let sequence_left = matches!(&config.faults, FaultPlan::Sequence(l) if injector.records.len() < l.len());
            if Instant::now() + pause >= deadline && !sequence_left {
                break;
            }
            thread::sleep(pause);
            let Some(fault) = next(&mut injector) else {
                break;
            };
            let record = injector.inject(&mut cluster, &admin, fault)?;
            say(&format!("{record}  (ops so far {})", load.ops()));
        }
        // The rest of the duration under load alone (faults may have ended early).
        while Instant::now() < deadline {
            thread::sleep(Duration::from_millis(100));
            cluster.restart_exited()?;
        }
        cluster.wait_healthy(&admin, config.patience)?;
        Ok(())
    })();
    let history = load.stop(&config.workload, &admin);
    let history_path = cluster.dir().join("history.jsonl");
    if let Ok(mut f) = std::fs::File::create(&history_path) {
        let _ = history.write_jsonl(&mut f);
    }
    outcome?;
    let recoveries = cluster
        .server_states(&admin)?
        .values()
        .filter(|s| *s == "removed")
        .count();
    say(&format!(
        "load stopped after {} operations; checking the history ({})",
        history.ops.len(),
        history_path.display()
    ));
    let report = check(&history, &config.check);
    let logs = if report.is_clean() {
        String::new()
    } else {
        cluster.log_tails()
    };
    Ok(RunReport {
        faults: injector.records,
        recoveries,
        elapsed: started.elapsed(),
        report,
        history_path,
        logs,
    })
}
