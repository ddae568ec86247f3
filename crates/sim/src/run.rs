//! One simulated run: start the cluster, run the workload under the fault
//! schedule for the simulated time asked, heal, read every key once more, check
//! the history.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use ramstore_backup::FaultPlan;
use ramstore_checker::{check, Call, CheckOptions, History};
use ramstore_client::{Client, ClientOptions};
use ramstore_clock::{Clock, Rng, SeededRng};

use crate::clock::SimClock;
use crate::cluster::{Cluster, Layout, ServerShape, COORDINATOR};
use crate::cost::{CostModel, Costs};
use crate::migrate::MigrationStats;
use crate::trace::{Kind, Trace};
use crate::workload::{self, Recorder};

/// What to simulate.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub seed: u64,
    pub servers: usize,
    pub sim_seconds: u64,
    /// Run the fault schedule (crashes, partitions, loss, delay, full disks,
    /// coordinator failover).
    pub faults: bool,
    /// Plant a bug: backups acknowledge data writes without storing them.
    pub planted_bug: bool,
    /// Client workers.
    pub clients: usize,
    /// Print every fault as it happens (to stderr).
    pub verbose: bool,
    /// Keep migrating random tablets while the clients run (K§2.3,
    /// [`crate::migrate`]).
    pub migrations: bool,
    /// Move a range only to a master never seen owning it in this run.
    pub fresh_targets: bool,
    /// What each server is given (log memory, segment size, backup frames).
    pub shape: ServerShape,
    /// Charge simulated NIC, disk and CPU time ([`crate::cost`]); `None`: off.
    pub cost: Option<CostModel>,
    /// Topology, placement rule and recovery masters (issue 22); the default
    /// (flat, scattered, anywhere) keeps every seed's trace.
    pub layout: Layout,
}

/// What a run did and found.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub seed: u64,
    pub servers: usize,
    pub sim_seconds: u64,
    pub ops: usize,
    pub unknown: usize,
    pub violations: usize,
    pub inconclusive: usize,
    pub faults: u64,
    pub crashes: u64,
    pub failovers: u64,
    pub recoveries: u64,
    /// Tablet migrations that finished with the target owning the range.
    pub migrations: u64,
    /// Tablet migrations that lineage recovery rolled back (K§2.3.4).
    pub migrations_rolled_back: u64,
    /// Tablet migrations still recorded when the run ended, or whose range no
    /// longer was one tablet: half-applied. Each is a violation.
    pub migrations_stuck: u64,
    /// Faults aimed at a migration in progress: its source, its target or both
    /// crashed, or the coordinator failed over.
    pub migration_crashes: u64,
    /// The same by kind: source, target, both, coordinator.
    pub migration_crashes_by_kind: [u64; 4],
    /// Keys the final read could not read (no definite answer after every
    /// fault healed): what they hold goes unchecked, so each is a violation.
    pub unreadable: u64,
    pub delivered: u64,
    pub dropped: u64,
    pub events: u64,
    pub trace: u64,
    pub wall_seconds: f64,
    /// The checker's report, for the printout.
    pub report: String,
    /// The recorded history (for `--history FILE` and the checker's driver).
    pub history: History,
}

impl Summary {
    /// The last line of the printout: the one-line reproduction and its verdict.
    pub fn last_line(&self) -> String {
        format!(
            "seed={} servers={} sim_seconds={} ops={} violations={} inconclusive={} \
             migrations_done={} migrations_rolled_back={} migration_crashes={} trace={:016x}",
            self.seed,
            self.servers,
            self.sim_seconds,
            self.ops,
            self.violations,
            self.inconclusive,
            self.migrations,
            self.migrations_rolled_back,
            self.migration_crashes,
            self.trace
        )
    }
}

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("cannot build the simulation runtime: {0}")]
    Runtime(std::io::Error),
    #[error("the cluster did not come up: {0}")]
    Setup(String),
}

/// A fresh single-threaded runtime with paused time: where every simulation runs.
pub(crate) fn paused_runtime() -> Result<tokio::runtime::Runtime, SimError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(SimError::Runtime)
}

/// Runs `config` on a fresh single-threaded runtime with paused time.
pub fn run(config: &SimConfig) -> Result<Summary, SimError> {
    let runtime = paused_runtime()?;
    let started = Instant::now();
    let mut summary = runtime.block_on(simulate(config.clone()))?;
    summary.wall_seconds = started.elapsed().as_secs_f64();
    // Leftover tasks of crashed nodes are dropped with the runtime.
    runtime.shutdown_background();
    Ok(summary)
}

fn client_options(cluster: &Cluster, rng: &dyn Rng) -> ClientOptions {
    let clock: Arc<dyn Clock> = cluster.clock.clone();
    ClientOptions {
        clock,
        rng: SeededRng::handle(rng.next_u64()),
        // The checker counts a duplicate as a violation (issue 21).
        exactly_once: true,
        ..ClientOptions::new(COORDINATOR)
    }
}

pub(crate) async fn connect(
    cluster: &Cluster,
    rng: &dyn Rng,
    name: &str,
) -> Result<Client, SimError> {
    let endpoint = cluster.net.client_endpoint(name);
    Client::with_transport(client_options(cluster, rng), endpoint)
        .await
        .map_err(|e| SimError::Setup(format!("client {name}: {e}")))
}

async fn simulate(config: SimConfig) -> Result<Summary, SimError> {
    config.shape.check().map_err(SimError::Setup)?;
    let clock = SimClock::handle();
    let rng = SeededRng::handle(config.seed);
    let trace = Arc::new(Trace::default());
    let cluster = Cluster::new(
        clock.clone(),
        SeededRng::handle(rng.next_u64()),
        trace.clone(),
        config.servers,
        config.planted_bug,
        config.shape,
        Arc::new(Costs::new(
            config.cost.unwrap_or_default(),
            config.cost.is_some(),
        )),
    );
    cluster.set_layout(config.layout.clone());
    cluster.start_coordinator();
    for i in 0..config.servers {
        cluster.start_server(i);
    }
    let up_by = clock.elapsed() + Duration::from_secs(30);
    while cluster.running().len() < config.servers {
        if clock.elapsed() > up_by {
            return Err(SimError::Setup(format!(
                "{} of {} servers enlisted",
                cluster.running().len(),
                config.servers
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let admin = connect(&cluster, rng.as_ref(), "client-admin").await?;
    let span = u32::try_from(config.servers)
        .unwrap_or(u32::MAX)
        .min(ramstore_coordinator::MAX_SERVER_SPAN);
    let table = admin
        .create_table("sim", span)
        .await
        .map_err(|e| SimError::Setup(format!("create table: {e}")))?;
    let recorder = Arc::new(Recorder::new(clock.clone(), trace.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..config.clients {
        let client = connect(&cluster, rng.as_ref(), &format!("client-{w}")).await?;
        workers.push(tokio::spawn(workload::worker(
            client,
            recorder.clone(),
            SeededRng::handle(rng.next_u64()),
            w as u64,
            table,
            stop.clone(),
        )));
    }
    let end = clock.elapsed() + Duration::from_secs(config.sim_seconds);
    let faults = Arc::new(Faults::new(
        cluster.clone(),
        SeededRng::handle(rng.next_u64()),
        config.verbose,
    ));
    let driver = config
        .faults
        .then(|| tokio::spawn(faults.clone().drive(end)));
    let watcher = tokio::spawn(faults.clone().restart_zombies());
    let migration_stats = Arc::new(MigrationStats::default());
    let migrator = if config.migrations {
        let admin = connect(&cluster, rng.as_ref(), "client-migrator").await?;
        Some(tokio::spawn(crate::migrate::drive(
            admin,
            ("sim", table),
            cluster.clone(),
            SeededRng::handle(rng.next_u64()),
            migration_stats.clone(),
            crate::migrate::DrivePlan {
                end,
                verbose: config.verbose,
                fresh_targets: config.fresh_targets,
            },
        )))
    } else {
        None
    };
    // Faults aimed at migrations in progress (source, target, both,
    // coordinator), drawn from a generator of their own so that runs without
    // migrations keep their traces.
    let migration_faults = (config.faults && config.migrations).then(|| {
        tokio::spawn(faults.clone().migration_faults(
            end,
            migration_stats.attempts.subscribe(),
            SeededRng::handle(rng.next_u64()),
        ))
    });
    let reporter = config.verbose.then(|| {
        let cluster = cluster.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                report_in_flight(&cluster);
            }
        })
    });
    tokio::time::sleep_until(tokio::time::Instant::now() + (end - clock.elapsed())).await;
    stop.store(true, Ordering::SeqCst);
    if let Some(d) = driver {
        d.abort();
    }
    if let Some(d) = migration_faults {
        d.abort();
    }
    faults.heal_everything();
    // The migrator stops at `end`; a migration it started and that has not
    // ended yet must still end, once the faults are healed.
    let unfinished = match migrator {
        Some(m) => m.await.ok().flatten(),
        None => None,
    };
    for w in workers {
        // A worker ends after its current operation; it cannot fail.
        let _ = w.await;
    }
    // Let recoveries started by the last faults finish before the final reads.
    let settle_by = clock.elapsed() + Duration::from_secs(30);
    tokio::time::sleep(Duration::from_secs(2)).await;
    while cluster.recoveries_in_progress() > 0 && clock.elapsed() < settle_by {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if config.migrations {
        // Every migration ends done or rolled back (K§2.3.4); give lineage
        // recovery and re-sourcing time to finish what the last faults left.
        let by = clock.elapsed() + MIGRATIONS_END_WITHIN;
        if let Some(m) = unfinished {
            migration_stats
                .finish(&cluster, m, by, config.verbose)
                .await;
        }
        // A `MigrateTablet` whose answer was lost may have been recorded too.
        while !cluster.migrations_in_progress().is_empty() && clock.elapsed() < by {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let left = cluster.migrations_in_progress().len() as u64;
        migration_stats.stuck.fetch_add(left, Ordering::Relaxed);
        if config.verbose && left > 0 {
            eprintln!(
                "{:>10.3} s  still recorded: {:?}",
                clock.elapsed().as_secs_f64(),
                cluster.migrations_in_progress()
            );
        }
    }
    watcher.abort();
    let reader = config.clients as u64;
    let keys = workload::all_keys();
    let mut unreadable = 0u64;
    for (n, key) in keys.iter().enumerate() {
        let outcome = recorder
            .record(&admin, reader, table, key, Call::Read)
            .await;
        if !outcome.is_definite() {
            // Each indefinite read waits out the client's deadline: the rest
            // are counted, not tried.
            unreadable = (keys.len() - n) as u64;
            break;
        }
    }
    if let Some(r) = reporter {
        r.abort();
        report_in_flight(&cluster);
    }
    let history = History {
        ops: std::mem::take(&mut *recorder.ops.lock()),
    };
    let unknown = history.ops.iter().filter(|o| !o.is_definite()).count();
    // The simulated clients send exactly-once RPCs (the client default), so a
    // duplicate is a violation, with migrations too: completion records move
    // with their objects (design notes "Exactly-once RPCs", records in migration).
    let options = CheckOptions::default();
    let report = check(&history, &options);
    let recoveries = cluster.recoveries_completed();
    let stuck = migration_stats.stuck.load(Ordering::Relaxed);
    let mut shown = report.to_string();
    if stuck > 0 {
        shown.push_str(&format!(
            "{stuck} migrations half-applied (neither done nor rolled back)\n"
        ));
    }
    if unreadable > 0 {
        shown.push_str(&format!(
            "{unreadable} keys unreadable after every fault healed\n"
        ));
    }
    let by_kind = faults.migration_crashes_by_kind();
    Ok(Summary {
        seed: config.seed,
        servers: config.servers,
        sim_seconds: config.sim_seconds,
        ops: history.ops.len(),
        unknown,
        violations: report.violations.len() + stuck as usize + unreadable as usize,
        inconclusive: report.inconclusive.len(),
        faults: faults.count.load(Ordering::Relaxed),
        crashes: cluster.stats.crashes.load(Ordering::Relaxed),
        failovers: cluster.stats.failovers.load(Ordering::Relaxed),
        recoveries,
        migrations: migration_stats.done.load(Ordering::Relaxed),
        migrations_rolled_back: migration_stats.rolled_back.load(Ordering::Relaxed),
        migrations_stuck: stuck,
        migration_crashes: by_kind.iter().sum(),
        migration_crashes_by_kind: by_kind,
        unreadable,
        delivered: cluster.net.stats.delivered.load(Ordering::Relaxed),
        dropped: cluster.net.stats.dropped.load(Ordering::Relaxed),
        events: trace.events(),
        trace: trace.hash(),
        wall_seconds: 0.0,
        report: shown,
        history,
    })
}

/// Prints the calls in progress (`--verbose`): what a stuck run waits for.
fn report_in_flight(cluster: &Cluster) {
    let at = cluster.clock.elapsed().as_secs_f64();
    for ((from, to, opcode), n) in cluster.net.in_flight() {
        let op = ramstore_wire::Opcode::try_from(opcode)
            .map_or_else(|_| format!("opcode {opcode}"), |o| format!("{o:?}"));
        eprintln!("{at:>10.3} s  in flight: {n} × {op} {from} -> {to}");
    }
}

/// How long, after the faults heal and recoveries settle, migrations still
/// recorded get to end (a re-source waits for a master to recover onto, then
/// pulls what is left; a roll-back replays the target's log).
const MIGRATIONS_END_WITHIN: Duration = Duration::from_secs(60);

/// Names of the fault codes in the trace (for `--verbose`).
const FAULT_NAMES: [&str; 16] = [
    "",
    "crash",
    "partition",
    "heal",
    "weather",
    "clear-weather",
    "full-disk",
    "disk-ok",
    "coordinator-failover",
    "zombie-exit",
    "slow-disk",
    "disk-fast",
    "migration-source-crash",
    "migration-target-crash",
    "migration-source-and-target-crash",
    "migration-coordinator-failover",
];

/// The fault schedule.
struct Faults {
    cluster: Arc<Cluster>,
    rng: Arc<dyn Rng>,
    /// Hosts crashed, cut off, or restarting: at most R - 1 at once, so no
    /// segment can lose its master and all R backups (no data loss by design:
    /// any lost acknowledged write is a real violation).
    disrupted: Mutex<BTreeSet<usize>>,
    /// Host pairs cut now.
    cuts: Mutex<Vec<(String, String)>>,
    count: AtomicU64,
    /// Faults aimed at a migration in progress, by kind: source, target, both,
    /// coordinator.
    migration_crashes: [AtomicU64; 4],
    verbose: bool,
}

/// A migration fault strikes this long (at most) after the migrator asks for
/// the migration, uniformly. A simulated migration of the workload's small
/// tablets takes about 20 ms without faults (about 12 ms to the ownership
/// move, 8 ms of pulls and commit), so the seeds spread the faults over every
/// step, and some land after the end (no fault then).
const MIGRATION_FAULT_WITHIN_US: u64 = 30_000;

/// How long a disruption lasts: `lo..hi` ms.
fn between(rng: &dyn Rng, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(lo + rng.next_u64() % (hi - lo).max(1))
}

impl Faults {
    fn new(cluster: Arc<Cluster>, rng: Arc<dyn Rng>, verbose: bool) -> Self {
        Self {
            verbose,
            cluster,
            rng,
            disrupted: Mutex::default(),
            cuts: Mutex::default(),
            count: AtomicU64::new(0),
            migration_crashes: Default::default(),
        }
    }

    fn migration_crashes_by_kind(&self) -> [u64; 4] {
        std::array::from_fn(|k| self.migration_crashes[k].load(Ordering::Relaxed))
    }

    fn note(&self, code: u64, host: &str) {
        self.count.fetch_add(1, Ordering::Relaxed);
        if self.verbose {
            eprintln!(
                "{:>10.3} s  fault {} {host}",
                self.cluster.clock.elapsed().as_secs_f64(),
                FAULT_NAMES.get(code as usize).copied().unwrap_or("?")
            );
        }
        self.cluster
            .trace
            .event(self.cluster.clock.elapsed_ns(), Kind::Fault, host, "", code);
    }

    fn max_disrupted(&self) -> usize {
        self.cluster.replicas.saturating_sub(1)
    }

    /// A running host that may be disrupted now, if any.
    fn victim(&self) -> Option<usize> {
        let disrupted = self.disrupted.lock();
        if disrupted.len() >= self.max_disrupted() || self.cluster.recoveries_in_progress() > 0 {
            return None;
        }
        let candidates: Vec<usize> = self
            .cluster
            .running()
            .into_iter()
            .filter(|i| !disrupted.contains(i))
            .collect();
        if candidates.is_empty() {
            return None;
        }
        Some(candidates[(self.rng.next_u64() % candidates.len() as u64) as usize])
    }

    /// Draws faults until `end` (simulated), one every 0.5–4 s.
    async fn drive(self: Arc<Self>, end: Duration) {
        let clock = self.cluster.clock.clone();
        while clock.elapsed() < end {
            tokio::time::sleep(between(self.rng.as_ref(), 500, 4_000)).await;
            match self.rng.next_u64() % 10 {
                0..=2 => self.crash(),
                3..=4 => self.partition(),
                5 => self.weather(),
                6 => self.full_disk(),
                7 => self.failover(),
                8 => self.slow_disk(),
                _ => {}
            }
        }
    }

    fn crash(self: &Arc<Self>) {
        let Some(i) = self.victim() else { return };
        self.disrupted.lock().insert(i);
        self.note(1, &format!("s{i}"));
        self.crash_and_restart(i);
    }

    /// Crashes host `i` (already counted disrupted) and restarts it 1–8 s
    /// later.
    fn crash_and_restart(self: &Arc<Self>, i: usize) {
        self.cluster.crash_server(i);
        let me = self.clone();
        let down = between(self.rng.as_ref(), 1_000, 8_000);
        tokio::spawn(async move {
            tokio::time::sleep(down).await;
            me.restart(i).await;
        });
    }

    /// After each migration the migrator asks for (two in three of them), at a
    /// point drawn from `rng` within [`MIGRATION_FAULT_WITHIN_US`], strikes
    /// the migration in progress then, if any: crashes its source, its target,
    /// or both (K§2.3.4: roll back onto the source, re-source onto a third
    /// master, or both), or fails the coordinator over (R§9: the successor
    /// re-drives the persisted record). Crashes keep to the schedule's rules:
    /// at most R − 1 hosts disrupted and none while a recovery runs.
    async fn migration_faults(
        self: Arc<Self>,
        end: Duration,
        mut attempts: tokio::sync::watch::Receiver<u64>,
        rng: Arc<dyn Rng>,
    ) {
        let clock = self.cluster.clock.clone();
        while attempts.changed().await.is_ok() && clock.elapsed() < end {
            // Some migrations run undisturbed by these faults (the random
            // schedule may still hit them).
            if rng.next_u64().is_multiple_of(3) {
                continue;
            }
            let at = Duration::from_micros(rng.next_u64() % MIGRATION_FAULT_WITHIN_US);
            tokio::time::sleep(at).await;
            self.strike_migration(rng.as_ref());
        }
    }

    /// One migration fault (see [`Faults::migration_faults`]); nothing if no
    /// migration is in progress or the rules forbid the crash now.
    fn strike_migration(self: &Arc<Self>, rng: &dyn Rng) {
        let records = self.cluster.migrations_in_progress();
        if records.is_empty() {
            return;
        }
        let m = records[(rng.next_u64() % records.len() as u64) as usize];
        let kind = (rng.next_u64() % 4) as usize;
        let servers = match kind {
            0 => vec![m.source.0],
            1 => vec![m.target.0],
            2 => vec![m.source.0, m.target.0],
            _ => {
                self.note(15, COORDINATOR);
                self.migration_crashes[3].fetch_add(1, Ordering::Relaxed);
                self.cluster.fail_over_coordinator();
                return;
            }
        };
        let hosts: Option<Vec<usize>> = servers.iter().map(|&s| self.cluster.host_of(s)).collect();
        // A source or target that is down already (a crash the recovery of
        // which runs now) is left alone.
        let Some(hosts) = hosts else { return };
        {
            let mut disrupted = self.disrupted.lock();
            if disrupted.len() + hosts.len() > self.max_disrupted()
                || hosts.iter().any(|h| disrupted.contains(h))
                || self.cluster.recoveries_in_progress() > 0
            {
                return;
            }
            disrupted.extend(hosts.iter().copied());
        }
        self.migration_crashes[kind].fetch_add(1, Ordering::Relaxed);
        for &i in &hosts {
            self.note(12 + kind as u64, &format!("s{i}"));
            self.crash_and_restart(i);
        }
    }

    /// Starts host `i` again and, once it runs (or gave up), counts it healthy.
    async fn restart(&self, i: usize) {
        self.cluster.start_server(i);
        for _ in 0..600 {
            if self.cluster.running().contains(&i) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.disrupted.lock().remove(&i);
    }

    fn partition(self: &Arc<Self>) {
        let Some(i) = self.victim() else { return };
        self.disrupted.lock().insert(i);
        let me = format!("s{i}");
        let mut cut = Vec::new();
        for j in 0..self.cluster.hosts() {
            if j != i {
                cut.push((me.clone(), format!("s{j}")));
            }
        }
        // Half the partitions also cut the host off from the coordinator.
        if self.rng.next_u64().is_multiple_of(2) {
            cut.push((me.clone(), COORDINATOR.to_string()));
        }
        for (a, b) in &cut {
            self.cluster.net.set_cut(a, b, true);
        }
        self.cuts.lock().extend(cut.iter().cloned());
        self.note(2, &me);
        let this = self.clone();
        let heal_after = between(self.rng.as_ref(), 300, 3_000);
        tokio::spawn(async move {
            tokio::time::sleep(heal_after).await;
            for (a, b) in &cut {
                this.cluster.net.set_cut(a, b, false);
            }
            this.note(3, &format!("s{i}"));
            this.disrupted.lock().remove(&i);
        });
    }

    fn weather(self: &Arc<Self>) {
        let loss_ppm = self.rng.next_u64() % 20_000;
        let delay = Duration::from_micros(self.rng.next_u64() % 20_000);
        self.cluster.net.set_weather(loss_ppm, delay);
        self.note(4, "net");
        let this = self.clone();
        let clear_after = between(self.rng.as_ref(), 1_000, 5_000);
        tokio::spawn(async move {
            tokio::time::sleep(clear_after).await;
            this.cluster.net.set_weather(0, Duration::ZERO);
            this.note(5, "net");
        });
    }

    fn full_disk(self: &Arc<Self>) {
        let running = self.cluster.running();
        if running.is_empty() {
            return;
        }
        let i = running[(self.rng.next_u64() % running.len() as u64) as usize];
        self.cluster.set_disk_plan(
            i,
            FaultPlan {
                space_bytes: Some(0),
                ..FaultPlan::default()
            },
        );
        self.note(6, &format!("s{i}"));
        let this = self.clone();
        let clear_after = between(self.rng.as_ref(), 1_000, 5_000);
        tokio::spawn(async move {
            tokio::time::sleep(clear_after).await;
            this.cluster.set_disk_plan(i, FaultPlan::default());
            this.note(7, &format!("s{i}"));
        });
    }

    fn slow_disk(self: &Arc<Self>) {
        let running = self.cluster.running();
        if running.is_empty() {
            return;
        }
        let i = running[(self.rng.next_u64() % running.len() as u64) as usize];
        let delay = between(self.rng.as_ref(), 5, 300);
        self.cluster.net.set_slow_disk(&format!("s{i}"), delay);
        self.note(10, &format!("s{i}"));
        let this = self.clone();
        let clear_after = between(self.rng.as_ref(), 1_000, 5_000);
        tokio::spawn(async move {
            tokio::time::sleep(clear_after).await;
            this.cluster
                .net
                .set_slow_disk(&format!("s{i}"), Duration::ZERO);
            this.note(11, &format!("s{i}"));
        });
    }

    fn failover(&self) {
        self.note(8, COORDINATOR);
        self.cluster.fail_over_coordinator();
    }

    /// A server the coordinator declared crashed (a zombie, R§7.11) exits, as
    /// the `ramstore` binary does, and its supervisor starts it again.
    async fn restart_zombies(self: Arc<Self>) {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            for i in self.cluster.zombies() {
                self.note(9, &format!("s{i}"));
                self.cluster.crash_server(i);
                let this = self.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    this.cluster.start_server(i);
                });
            }
        }
    }

    /// Ends every fault: links healed, weather clear, disks well.
    fn heal_everything(&self) {
        self.cluster.net.heal_all();
        self.cluster.net.set_weather(0, Duration::ZERO);
        self.cluster.net.heal_disks();
        for i in 0..self.cluster.hosts() {
            self.cluster.set_disk_plan(i, FaultPlan::default());
        }
        self.cuts.lock().clear();
    }
}
