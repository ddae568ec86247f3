//! Master crash recovery, the coordinator's part (R§7.4–7.10): for every crashed
//! master that still owns tablets, find its log on the backups, split its tablets
//! into partitions, have recovery masters replay them, then hand the tablets out.
//!
//! # One attempt
//! 1. Ask every UP backup which replicas of the crashed master it holds (R§7.4).
//! 2. Read the newest replica that starts with a log digest: the digest names every
//!    segment of the log, and the tablet statistics beside it size the tablets
//!    (R§7.5). If some named segment is on no backup, the log is incomplete: the
//!    attempt ends and the next one (after [`RETRY_INTERVAL_MS`]) asks again —
//!    recovery waits rather than serve partial data.
//! 3. Partition the tablets ([`crate::partition`]), give each partition to an UP
//!    master, and announce the partitions to every backup holding replicas, which
//!    start bucketing their entries (R§7.5).
//! 4. Send each recovery master its partition with the replica locations; they
//!    replay in parallel (R§7.6). Each partition that succeeds is handed out at
//!    once ([`CoordinatorCore::recovered_partition`], persisted first, R§9); one
//!    that fails (its recovery master crashed, or a replica could not be read) is
//!    left to the next attempt, which recovers only what is still unrecovered.
//! 5. When the crashed master owns no tablet, it becomes Removed and its backups
//!    free its replicas ([`CoordinatorCore::finish_recovery`]).
//!
//! A range a migration in progress names the crashed master for is recovered
//! by lineage (K§2.3.4, [`crate::migration_recovery`]): in a partition of its
//! own, onto the source (the target crashed: roll back) or onto a master other
//! than the target (the source crashed: the new source).
//!
//! A master that never replicated its log (R = 0) has nothing to recover: its
//! tablets go to other masters empty, as its objects lived only in its DRAM.
//!
//! Restart safety (R§9): everything an attempt learns is recomputed by the next
//! one, and the only persisted effects are the idempotent moves of recovered
//! ranges; so a coordinator that takes over simply starts recovering every
//! Crashed server again.
//!
//! The recovery driver ([`RecoveryDriver`]) owns the progress ([`Recoveries`]) and
//! runs the attempts; finding the log and planning the replay, which need no
//! service state, are in [`crate::recovery_log`]; persisted moves go through the
//! core and their notifications through [`crate::notifier`].
//!
//! Thread-safety: one task per crashed master; attempts of different masters run
//! concurrently (several crashed masters recover at once). Progress for operators
//! lives in [`Recoveries`].

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ramstore_backup::BackupClient;
use ramstore_wire::{
    decode_response, PartitionTablet, RecoverPartitionEncoder, RecoveryItem, Response, Status,
};
use rand::seq::SliceRandom;
use tokio::task::JoinSet;

use crate::cluster::Cluster;
use crate::migration_recovery::{fence_new_source, Lineage};
use crate::notifier::Notifier;
use crate::partition::{partition, PartitionLimits};
use crate::recovery_log::{announce, fetch_order, find_log, staggered, tablet_loads, FoundLog};
use crate::recovery_near::{add_fallbacks, Near};
use crate::server_list::{ServerEntry, ServerId, ServerStatus};
use crate::tables::TabletEntry;

/// Pause between two attempts of one recovery (and between checks for new
/// crashed masters).
pub const RETRY_INTERVAL_MS: u64 = 200;
/// Deadline of the RPCs that find the log and announce the partitions (replica
/// lists, the head's bytes): a backup slower than this (frozen, overloaded) is
/// left out of the attempt rather than hold up the recovery.
const FIND_LOG_DEADLINE_MS: u64 = 2_000;
/// Attempts of one recovery made near the data (`--recovery-masters near`)
/// before the next ones recover anywhere (C§4.3).
const NEAR_ATTEMPTS: u64 = 2;
/// How often a running partition checks that its recovery master is still UP.
const WATCH_INTERVAL_MS: u64 = 100;

/// Progress of one crashed master's recovery, for `ramstore status`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryProgress {
    pub attempt: u64,
    pub partitions_total: u64,
    pub partitions_done: u64,
    pub entries_replayed: u64,
    pub bytes_replayed: u64,
    /// What the recovery is doing or waiting for.
    pub state: String,
}

/// Recoveries in progress and what recovery has done so far. Thread-safe.
#[derive(Debug, Default)]
pub struct Recoveries {
    running: Mutex<BTreeMap<u64, RecoveryProgress>>,
    completed: AtomicU64,
    limits: Mutex<PartitionLimits>,
    /// Recover onto masters near the crashed log's holders (issue 22, C§4.2;
    /// `recovery_near`); off: any master, any holder (R§7.4).
    near: AtomicBool,
}

impl Recoveries {
    /// Recoveries in progress, by crashed server id.
    pub fn in_progress(&self) -> BTreeMap<u64, RecoveryProgress> {
        self.running.lock().clone()
    }

    /// Recoveries finished since this coordinator started.
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Relaxed)
    }

    /// Sets the partition bounds used from the next attempt on.
    pub fn set_limits(&self, limits: PartitionLimits) {
        *self.limits.lock() = limits;
    }

    /// Chooses recovery masters near the data (C§3.2, §4.2) from the next
    /// attempt on, or anywhere (R§7.4, the default).
    pub fn set_near(&self, near: bool) {
        self.near.store(near, Ordering::Relaxed);
    }

    /// Whether recovery masters are chosen near the data.
    pub fn near(&self) -> bool {
        self.near.load(Ordering::Relaxed)
    }

    fn update(&self, id: ServerId, f: impl FnOnce(&mut RecoveryProgress)) {
        f(self.running.lock().entry(id.0).or_default());
    }

    /// The recovery of `id` is over: no longer in progress, one more completed.
    fn finished(&self, id: ServerId) {
        self.running.lock().remove(&id.0);
        self.completed.fetch_add(1, Ordering::Relaxed);
    }
}

/// A partition's index, its recovery master, and (entries, bytes replayed, the
/// tablets' ctime on the recovery master) or why it failed.
type PartitionOutcome = (usize, ServerId, Result<(u64, u64, u64), String>);

/// How an attempt ended.
enum Attempt {
    /// The crashed master owns no tablet any more.
    Done,
    /// Try again later, for this reason.
    Again(String),
}

/// What an attempt starts from, read from the core under one lock.
struct Snapshot {
    entry: ServerEntry,
    /// The crashed master's tablets (not those migrating in).
    tablets: Vec<TabletEntry>,
    /// Migrations that name the crashed master (K§2.3.4).
    lineage: Vec<Lineage>,
    /// Addresses of the UP backups.
    backups: Vec<String>,
    /// The UP masters, candidates to recover onto.
    masters: Vec<ServerEntry>,
    /// Every UP server (their failure-domain fields place them, C§3).
    up: Vec<ServerEntry>,
}

/// An attempt's replay plan (R§7.5): the partitions, who replays each, and
/// where each segment is read from.
struct Plan {
    recovery_id: u64,
    /// Each partition's tablets, as (table, start hash, end hash).
    parts: Vec<Vec<(u64, u64, u64)>>,
    /// Per partition, per tablet (same order): its ctime in the crashed
    /// master's log, from which replay takes its entries (design notes
    /// "Tablet ctime").
    ctimes: Vec<Vec<u64>>,
    /// The recovery masters, in the order partitions are dealt to them.
    masters: Vec<ServerEntry>,
    /// The digest's segments in fetch order, with the backups bucketing each.
    sources: Vec<(u64, Vec<String>)>,
    /// Per partition: the lineage range it recovers and the master it must be
    /// recovered onto (`None`: an ordinary partition, dealt round-robin).
    pinned: Vec<Option<(Lineage, ServerEntry)>>,
    /// Lineage ranges left for a later attempt (no master fits yet).
    waiting: usize,
}

/// Recovers crashed masters and keeps their progress. Thread-safe.
pub struct RecoveryDriver {
    cluster: Arc<Cluster>,
    notifier: Arc<Notifier>,
    recoveries: Recoveries,
}

impl RecoveryDriver {
    /// A driver with no recovery done yet.
    pub fn new(cluster: Arc<Cluster>, notifier: Arc<Notifier>) -> Self {
        Self {
            cluster,
            notifier,
            recoveries: Recoveries::default(),
        }
    }

    /// Crash recoveries in progress and completed.
    pub fn recoveries(&self) -> &Recoveries {
        &self.recoveries
    }

    /// Recovers every crashed master that owns tablets, forever (spawn once).
    pub async fn run(self: Arc<Self>) {
        let mut running: HashMap<ServerId, tokio::task::JoinHandle<()>> = HashMap::new();
        loop {
            running.retain(|_, task| !task.is_finished());
            for id in self.crashed_servers() {
                running
                    .entry(id)
                    .or_insert_with(|| tokio::spawn(self.clone().recover_master(id)));
            }
            self.sleep_retry_interval().await;
        }
    }

    fn crashed_servers(&self) -> Vec<ServerId> {
        self.cluster
            .core()
            .state()
            .servers()
            .entries()
            .iter()
            .filter(|e| e.status == ServerStatus::Crashed)
            .map(|e| e.id)
            .collect()
    }

    async fn sleep_retry_interval(&self) {
        self.cluster
            .clock
            .sleep(Duration::from_millis(RETRY_INTERVAL_MS))
            .await;
    }

    async fn recover_master(self: Arc<Self>, crashed: ServerId) {
        let started = self.cluster.clock.now();
        let clean = self.log_start(crashed);
        for attempt in 1u64.. {
            self.recoveries.update(crashed, |p| {
                p.attempt = attempt;
                p.partitions_total = 0;
                p.partitions_done = 0;
            });
            // C§4.3: when the one-hop structure cannot take the data, RAMCube
            // "performs similar to RAMCloud" — after NEAR_ATTEMPTS failed near
            // attempts the next ones recover anywhere (a rack whose only
            // survivor cannot place its replicas retried for good).
            let near = self.recoveries.near() && attempt <= NEAR_ATTEMPTS;
            match self.attempt(crashed, near).await {
                Attempt::Done => break,
                Attempt::Again(why) => {
                    // After a clean stop the backups holding the log are often
                    // restarting too: a wait is expected at first, not later.
                    if attempt % 25 == 0 || (attempt == 1 && !clean) {
                        tracing::warn!(crashed_id = crashed.0, attempt, %why, "recovery will try again");
                    } else if attempt == 1 {
                        tracing::info!(crashed_id = crashed.0, attempt, %why, "recovery will try again");
                    }
                    self.recoveries.update(crashed, |p| p.state = why);
                    self.sleep_retry_interval().await;
                }
            }
        }
        self.recoveries.finished(crashed);
        let elapsed_ms = self.cluster.clock.elapsed(started).as_millis() as u64;
        if clean {
            tracing::info!(
                crashed_id = crashed.0,
                elapsed_ms,
                "recovery after a clean stop finished"
            );
        } else {
            tracing::warn!(
                crashed_id = crashed.0,
                elapsed_ms,
                "recovery of a crashed master finished"
            );
        }
    }

    /// Logs the start of `crashed`'s recovery; whether it stopped cleanly. A
    /// server that told us it was stopping (`Leave`) did not crash: its recovery
    /// is how every restart brings data back (R§7), worth an INFO line. Only a
    /// crash (detected, declared by an operator, or a restart that found no clean
    /// stop) warns.
    fn log_start(&self, crashed: ServerId) -> bool {
        let clean = self
            .cluster
            .core()
            .server(crashed)
            .is_some_and(|e| e.stopped_cleanly);
        if clean {
            tracing::info!(
                crashed_id = crashed.0,
                server = %ramstore_wire::server_id::Show(crashed.0),
                "recovering the data of a server that stopped cleanly (restart)"
            );
        } else {
            tracing::warn!(crashed_id = crashed.0, server = %ramstore_wire::server_id::Show(crashed.0), "recovering a crashed master");
        }
        clean
    }

    /// One attempt (see the module doc).
    async fn attempt(self: &Arc<Self>, crashed: ServerId, near: bool) -> Attempt {
        // A migration from the crashed master still `Preparing` may yet have
        // its target drop an orphan copy of the range (`migration_orphans`);
        // the migrator resolves it soon (PrepareMigration finds the source
        // gone), and only then may the range be placed, on any master.
        let preparing = self.cluster.core().migrations_preparing_from(crashed);
        if preparing > 0 {
            return Attempt::Again(format!(
                "{preparing} migrations from it are still being prepared"
            ));
        }
        // A stop-and-copy from the crashed master is over (the range never
        // moved): recorded so, and the target's partial copy dropped, before
        // the range is placed (the target may be picked for it).
        let copies = self.cluster.core().copies_from(crashed);
        for m in copies {
            let abandoned = self.cluster.core().migration_copy_abandoned(m.id, crashed);
            if let Err(e) = abandoned {
                return Attempt::Again(e.to_string());
            }
            tracing::info!(
                crashed_id = crashed.0,
                migration_id = m.id,
                "recovery: the source of a stop-and-copy crashed; the migration is rolled back"
            );
            crate::migration::drop_stale_copy(&self.cluster, &self.notifier, m.id).await;
        }
        // Any stale copy of a range being recovered goes first: a recovery
        // master reclaims a fenced copy it finds (`reclaim_fenced_tablet`), and
        // a drop arriving later would remove the recovered tablet.
        let stale = self.cluster.core().stale_copies_overlapping(crashed);
        for id in stale {
            crate::migration::drop_stale_copy(&self.cluster, &self.notifier, id).await;
        }
        let Some(view) = self.snapshot(crashed) else {
            return Attempt::Done;
        };
        if view.entry.status != ServerStatus::Crashed {
            return Attempt::Done;
        }
        if view.tablets.is_empty() && view.lineage.is_empty() {
            return self.finish(crashed).await;
        }
        if !view.entry.has_replicated_log() {
            return self.give_away_empty(crashed).await;
        }
        if view.masters.is_empty() {
            return Attempt::Again("no UP master to recover onto".into());
        }
        self.recoveries
            .update(crashed, |p| p.state = "finding the log".into());
        let client = BackupClient::new(self.cluster.transport.clone())
            .with_rpc_deadline(Duration::from_millis(FIND_LOG_DEADLINE_MS));
        let log = match find_log(&client, crashed, &view.backups).await {
            Ok(log) => log,
            Err(why) => return Attempt::Again(why),
        };
        let plan = match self.plan(&client, crashed, &view, &log, near).await {
            Ok(plan) => plan,
            Err(why) => return Attempt::Again(why),
        };
        tracing::info!(
            crashed_id = crashed.0,
            recovery_id = plan.recovery_id,
            partitions = plan.parts.len(),
            recovery_masters = plan.masters.len(),
            segments = plan.sources.len(),
            log_bytes = log.log_bytes,
            "recovery: replaying"
        );
        self.recoveries.update(crashed, |p| {
            p.partitions_total = plan.parts.len() as u64;
            p.state = format!("replaying {} partitions", plan.parts.len());
        });
        let waiting = plan.waiting;
        match self.replay(crashed, plan).await {
            0 if waiting == 0 => self.finish(crashed).await,
            0 => Attempt::Again(format!(
                "{waiting} migrating ranges wait for their source to be recovered"
            )),
            failed => Attempt::Again(format!("{failed} partitions failed")),
        }
    }

    /// The crashed server's entry and tablets, and the UP backups and masters.
    fn snapshot(&self, crashed: ServerId) -> Option<Snapshot> {
        let core = self.cluster.core();
        let entry = core.server(crashed).cloned()?;
        let migrations = core.state().migrations();
        let tablets: Vec<TabletEntry> = core
            .state()
            .tables()
            .tablets()
            .filter(|t| t.server_id == crashed)
            // A tablet still migrating in is partly on the source: recovering
            // only the target's log would serve it without the records not
            // pulled yet. Lineage recovery replays it onto the source instead.
            .filter(|t| !migrations.is_migrating_in(t))
            .copied()
            .collect();
        let lineage = core.lineage_of(crashed);
        let up: Vec<ServerEntry> = core
            .state()
            .servers()
            .entries()
            .iter()
            .filter(|e| e.is_up())
            .cloned()
            .collect();
        let backups: Vec<String> = up
            .iter()
            .filter(|e| e.is_backup())
            .map(|e| e.address.clone())
            .collect();
        let masters: Vec<ServerEntry> = up.iter().filter(|e| e.is_master()).cloned().collect();
        Some(Snapshot {
            entry,
            tablets,
            lineage,
            backups,
            masters,
            up,
        })
    }

    /// Partitions the tablets, deals the partitions to the masters, announces them
    /// to every backup holding a replica (R§7.5) and orders the fetches; an error
    /// if some segment of the log is on no backup that started partitioning.
    async fn plan(
        &self,
        client: &BackupClient,
        crashed: ServerId,
        view: &Snapshot,
        log: &FoundLog,
        near: bool,
    ) -> Result<Plan, String> {
        let rng = &self.cluster.rng;
        let loads = tablet_loads(&view.tablets, &log.stats, log.log_bytes);
        let limits = *self.recoveries.limits.lock();
        let parts = partition(&loads, limits, &mut rng.as_rand());
        let recovery_id: u64 = rng.next_u64();
        let near = near
            .then(|| Near::choose(&view.entry, &view.up, log))
            .flatten();
        let mut masters = near
            .as_ref()
            .map_or_else(|| view.masters.clone(), |n| n.masters(&view.masters));
        masters.shuffle(&mut rng.as_rand());
        let mut parts: Vec<Vec<(u64, u64, u64)>> = parts
            .iter()
            .map(|p| {
                p.iter()
                    .map(|t| (t.table_id, t.start_hash, t.end_hash))
                    .collect()
            })
            .collect();
        // A piece has the ctime of the tablet it was cut from.
        let mut ctimes: Vec<Vec<u64>> = parts
            .iter()
            .map(|p| {
                p.iter()
                    .map(|&(table_id, start_hash, _)| {
                        view.tablets
                            .iter()
                            .find(|t| t.table_id == table_id && t.contains(start_hash))
                            .map_or(0, |t| t.ctime)
                    })
                    .collect()
            })
            .collect();
        let mut pinned: Vec<Option<(Lineage, ServerEntry)>> = vec![None; parts.len()];
        let mut waiting = 0;
        for l in &view.lineage {
            let pick = |c: &[ServerEntry]| c.choose(&mut rng.as_rand()).cloned();
            match l.recovery_master(&view.masters, pick) {
                Some(master) => {
                    tracing::info!(
                        crashed_id = crashed.0,
                        migration_id = l.record().id,
                        recovery_master = master.id.0,
                        lineage = ?l,
                        "recovery: a migrating range is recovered by lineage (K§2.3.4)"
                    );
                    parts.push(vec![l.range()]);
                    ctimes.push(vec![l.replay_ctime()]);
                    pinned.push(Some((*l, master)));
                }
                None => waiting += 1,
            }
        }
        let announced = announced_tablets(&parts);
        let mut holder_addresses: Vec<String> = log.holders.values().flatten().cloned().collect();
        holder_addresses.sort();
        holder_addresses.dedup();
        let published = announce(client, crashed, recovery_id, &announced, holder_addresses).await;
        let sources = match &near {
            Some(n) => {
                let mut sources = fetch_order(&n.restrict(log), &published, &**rng);
                add_fallbacks(&mut sources, log);
                tracing::info!(
                    crashed_id = crashed.0,
                    switch = %n.switch,
                    recovery_masters = masters.len(),
                    "recovery: near the data (C§4.2)"
                );
                sources
            }
            None => fetch_order(log, &published, &**rng),
        };
        if let Some(missing) = log
            .digest
            .iter()
            .find(|id| !sources.iter().any(|(s, _)| s == *id))
        {
            return Err(format!(
                "segment {missing} of the log is on no backup that started partitioning"
            ));
        }
        Ok(Plan {
            recovery_id,
            parts,
            ctimes,
            masters,
            sources,
            pinned,
            waiting,
        })
    }

    /// Runs every partition of `plan` at once and hands out each that succeeds
    /// (persisted first, R§9) as soon as it does; how many failed (left to the
    /// next attempt).
    ///
    /// Each partition's task hands its own partition out: handed out one after
    /// another here, the partitions that all finish at the end of a recovery
    /// waited for each other's notifications, a tail that grew with the
    /// cluster (issue 22: 1.9 s of an 8.4 s recovery at 500 simulated servers,
    /// docs/bench-notes/scale22-session39.md). The core records each move under
    /// its lock; the notifications are idempotent and go to different masters.
    async fn replay(self: &Arc<Self>, crashed: ServerId, plan: Plan) -> usize {
        let plan = Arc::new(plan);
        let mut running: JoinSet<bool> = JoinSet::new();
        for i in 0..plan.parts.len() {
            let master = match &plan.pinned[i] {
                Some((_, master)) => master.clone(),
                None => plan.masters[i % plan.masters.len()].clone(),
            };
            let (this, plan) = (self.clone(), plan.clone());
            running.spawn(async move {
                let result = this.run_partition(crashed, &plan, i, &master).await;
                this.hand_out_outcome(crashed, &plan, (i, master.id, result))
                    .await
            });
        }
        let mut failed = 0;
        while let Some(done) = running.join_next().await {
            if !done.unwrap_or(false) {
                failed += 1;
            }
        }
        failed
    }

    /// Hands out partition `i` if its recovery master replayed it; false if it
    /// failed or could not be handed out.
    async fn hand_out_outcome(
        &self,
        crashed: ServerId,
        plan: &Plan,
        (i, master, result): PartitionOutcome,
    ) -> bool {
        match (result, &plan.pinned[i]) {
            (Ok(replayed), Some((lineage, master))) => {
                self.hand_out_lineage(crashed, *lineage, master, replayed)
                    .await
            }
            (Ok(replayed), None) => {
                self.hand_out(crashed, i, &plan.parts[i], master, replayed)
                    .await
            }
            (Err(why), _) => {
                tracing::warn!(crashed_id = crashed.0, partition = i, recovery_master = master.0, %why, "recovery: a partition failed; it is retried");
                false
            }
        }
    }

    /// Moves recovered partition `i` (`ranges`) to `master`, which replayed
    /// `(entries, bytes)`, and sends the notifications; false if the move could
    /// not be recorded.
    async fn hand_out(
        &self,
        crashed: ServerId,
        i: usize,
        ranges: &[(u64, u64, u64)],
        master: ServerId,
        (entries, bytes, ctime): (u64, u64, u64),
    ) -> bool {
        let moved = self
            .cluster
            .core()
            .recovered_partition_since(crashed, ranges, master, ctime);
        match moved {
            Ok(actions) => {
                self.notifier.carry_out(actions).await;
                self.recoveries.update(crashed, |p| {
                    p.partitions_done += 1;
                    p.entries_replayed += entries;
                    p.bytes_replayed += bytes;
                });
                true
            }
            Err(e) => {
                tracing::warn!(crashed_id = crashed.0, partition = i, error = %e, "recovery: cannot hand out a recovered partition");
                false
            }
        }
    }

    /// A lineage range was replayed onto `master` (K§2.3.4): roll the migration
    /// back (the target crashed) or make `master` its source (the source
    /// crashed; fenced first, then recorded, R§9). False if it must be retried.
    async fn hand_out_lineage(
        &self,
        crashed: ServerId,
        lineage: Lineage,
        master: &ServerEntry,
        (entries, bytes, ctime): (u64, u64, u64),
    ) -> bool {
        let id = lineage.record().id;
        let recorded = match lineage {
            Lineage::RollBack(_) => self.cluster.core().migration_rolled_back(id, crashed),
            Lineage::NewSource(m) => match fence_new_source(&self.cluster, &m, master).await {
                Ok(()) => self
                    .cluster
                    .core()
                    .migration_source_recovered_since(id, crashed, master.id, ctime),
                Err(why) => {
                    tracing::warn!(crashed_id = crashed.0, migration_id = id, new_source = master.id.0, %why, "recovery: cannot fence the migration's new source; retried");
                    return false;
                }
            },
        };
        match recorded {
            Ok(actions) => {
                tracing::info!(
                    crashed_id = crashed.0,
                    migration_id = id,
                    master = master.id.0,
                    entries,
                    lineage = ?lineage,
                    "recovery: migrating range recovered by lineage"
                );
                self.notifier.carry_out(actions).await;
                self.recoveries.update(crashed, |p| {
                    p.partitions_done += 1;
                    p.entries_replayed += entries;
                    p.bytes_replayed += bytes;
                });
                true
            }
            Err(e) => {
                // The migration finished or moved meanwhile: the copy on
                // `master` is not needed (and never served: it is fenced or
                // recovering). The next attempt sees the new state.
                tracing::warn!(crashed_id = crashed.0, migration_id = id, error = %e, "recovery: lineage range not handed out; retried");
                if let Lineage::NewSource(m) = lineage {
                    self.notifier
                        .carry_out(vec![crate::coordinator::Action::DropTablet {
                            server_id: master.id,
                            address: master.address.clone(),
                            table_id: m.table_id,
                            start_hash: m.start_hash,
                            end_hash: m.end_hash,
                        }])
                        .await;
                }
                false
            }
        }
    }

    /// Sends partition `i` of `plan` to its recovery master and waits for the
    /// answer, or until the recovery master is no longer UP.
    async fn run_partition(
        &self,
        crashed: ServerId,
        plan: &Plan,
        i: usize,
        master: &ServerEntry,
    ) -> Result<(u64, u64, u64), String> {
        let frame = partition_frame(crashed, plan, i).map_err(|e| e.to_string())?;
        let call = self
            .cluster
            .transport
            .call(&master.address, frame, ramstore_rpc::NO_DEADLINE);
        tokio::pin!(call);
        let watch_every = Duration::from_millis(WATCH_INTERVAL_MS);
        let mut watch = ramstore_clock::interval(&self.cluster.clock, watch_every);
        let reply = loop {
            tokio::select! {
                reply = &mut call => break reply,
                _ = watch.tick() => {
                    if !self.cluster.core().server(master.id).is_some_and(ServerEntry::is_up) {
                        return Err(format!("recovery master {} is no longer up", master.id.0));
                    }
                }
            }
        };
        let bytes = reply.map_err(|e| e.to_string())?;
        match decode_response(&bytes) {
            Ok((
                h,
                Response::RecoverPartition {
                    entries,
                    bytes,
                    ctime,
                },
            )) if h.status == Status::Ok => Ok((entries, bytes, ctime)),
            Ok((_, Response::Error(body))) => Err(format!("{body:?}")),
            Ok((_, other)) => Err(format!("unexpected answer {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The crashed master owns nothing more: Removed (R§8).
    async fn finish(&self, crashed: ServerId) -> Attempt {
        let result = self.cluster.core().finish_recovery(crashed);
        match result {
            Ok(actions) => {
                self.notifier.carry_out(actions).await;
                Attempt::Done
            }
            Err(e) => Attempt::Again(format!("cannot record the end of recovery: {e}")),
        }
    }

    /// A master without a replicated log: its tablets restart empty elsewhere.
    async fn give_away_empty(&self, crashed: ServerId) -> Attempt {
        tracing::warn!(
            crashed_id = crashed.0,
            "crashed master kept its objects in DRAM only (no replicas): its tablets restart empty on other masters"
        );
        let result = self.cluster.core().remove_server(crashed);
        match result {
            Ok(actions) => {
                self.notifier.carry_out(actions).await;
                Attempt::Done
            }
            Err(e) => Attempt::Again(format!("cannot reassign the tablets: {e}")),
        }
    }
}

/// Every partition's tablets as announced to the backups (R§7.5).
fn announced_tablets(parts: &[Vec<(u64, u64, u64)>]) -> Vec<PartitionTablet> {
    parts
        .iter()
        .enumerate()
        .flat_map(|(i, p)| {
            p.iter()
                .map(move |&(table_id, start_hash, end_hash)| PartitionTablet {
                    partition_id: i as u32,
                    table_id,
                    start_hash,
                    end_hash,
                })
        })
        .collect()
}

/// The `RecoverPartition` request for partition `i` of `plan`: its tablets, then
/// every replica location in fetch order, staggered ([`staggered`]).
fn partition_frame(
    crashed: ServerId,
    plan: &Plan,
    i: usize,
) -> Result<Vec<u8>, ramstore_wire::WireError> {
    let mut frame = Vec::new();
    let mut enc =
        RecoverPartitionEncoder::new(0, crashed.0, plan.recovery_id, i as u32, &mut frame);
    for (&(table_id, start_hash, end_hash), &ctime) in plan.parts[i].iter().zip(&plan.ctimes[i]) {
        enc.push(&RecoveryItem::Tablet {
            table_id,
            start_hash,
            end_hash,
            ctime,
        })?;
    }
    for (segment_id, holders) in staggered(&plan.sources, i, plan.parts.len()) {
        for address in holders {
            enc.push(&RecoveryItem::Replica {
                segment_id: *segment_id,
                address,
            })?;
        }
    }
    enc.finish()?;
    Ok(frame)
}
