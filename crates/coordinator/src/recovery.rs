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
//! A master that never replicated its log (R = 0) has nothing to recover: its
//! tablets go to other masters empty, as its objects lived only in its DRAM.
//!
//! Restart safety (R§9): everything an attempt learns is recomputed by the next
//! one, and the only persisted effects are the idempotent moves of recovered
//! ranges; so a coordinator that takes over simply starts recovering every
//! Crashed server again.
//!
//! Thread-safety: one task per crashed master; attempts of different masters run
//! concurrently (several crashed masters recover at once). Progress for operators
//! lives in [`Recoveries`].

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ramstore_backup::BackupClient;
use ramstore_clock::Rng;
use ramstore_log::entry::{parse_entry, Entry};
use ramstore_wire::{
    decode_response, PartitionTablet, RecoverPartitionEncoder, RecoveryItem, Response, Status,
};
use rand::seq::SliceRandom;
use tokio::task::JoinSet;

use crate::partition::{partition, PartitionLimits, TabletLoad};
use crate::server_list::{ServerEntry, ServerId, ServerStatus};
use crate::service::CoordinatorService;
use crate::tables::TabletEntry;

/// Pause between two attempts of one recovery (and between checks for new
/// crashed masters).
pub const RETRY_INTERVAL_MS: u64 = 200;
/// Deadline of the RPCs that find the log and announce the partitions (replica
/// lists, the head's bytes): a backup slower than this (frozen, overloaded) is
/// left out of the attempt rather than hold up the recovery.
const FIND_LOG_DEADLINE_MS: u64 = 2_000;
/// How often a running partition checks that its recovery master is still UP.
const WATCH_INTERVAL_MS: u64 = 100;
/// Bytes per entry assumed when estimating entries from bytes (a small object).
const ESTIMATED_ENTRY_BYTES: u64 = 64;
/// Entries of a head read to find its digest and tablet statistics.
const HEAD_ENTRIES_SCANNED: usize = 8;

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

    fn update(&self, id: ServerId, f: impl FnOnce(&mut RecoveryProgress)) {
        f(self.running.lock().entry(id.0).or_default());
    }
}

/// A partition's index, its recovery master, and (entries, bytes) replayed or
/// why it failed.
type PartitionOutcome = (usize, ServerId, Result<(u64, u64), String>);

/// How an attempt ended.
enum Attempt {
    /// The crashed master owns no tablet any more.
    Done,
    /// Try again later, for this reason.
    Again(String),
}

/// The crashed master's log as the newest head describes it.
struct FoundLog {
    /// Segment id → addresses of the backups holding a replica recovery may use
    /// ([`usable_holders`]).
    holders: HashMap<u64, Vec<String>>,
    digest: Vec<u64>,
    stats: Vec<ramstore_log::entry::TabletStat>,
    /// Bytes of the log: the longest replica of each segment the digest names.
    log_bytes: u64,
}

impl CoordinatorService {
    /// Recovers every crashed master that owns tablets, forever (spawn once).
    pub async fn recovery_loop(self: Arc<Self>) {
        let mut running: HashMap<ServerId, tokio::task::JoinHandle<()>> = HashMap::new();
        loop {
            running.retain(|_, task| !task.is_finished());
            let crashed: Vec<ServerId> = self
                .core
                .lock()
                .state()
                .servers()
                .entries()
                .iter()
                .filter(|e| e.status == ServerStatus::Crashed)
                .map(|e| e.id)
                .collect();
            for id in crashed {
                running
                    .entry(id)
                    .or_insert_with(|| tokio::spawn(self.clone().recover_master(id)));
            }
            self.clock
                .sleep(Duration::from_millis(RETRY_INTERVAL_MS))
                .await;
        }
    }

    async fn recover_master(self: Arc<Self>, crashed: ServerId) {
        let started = self.clock.now();
        // A server that told us it was stopping (`Leave`) did not crash: its
        // recovery is how every restart brings data back (R§7), worth an INFO line.
        // Only a crash (detected, declared by an operator, or a restart that found
        // no clean stop) warns.
        let clean = self
            .core
            .lock()
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
        for attempt in 1u64.. {
            self.recoveries.update(crashed, |p| {
                p.attempt = attempt;
                p.partitions_total = 0;
                p.partitions_done = 0;
            });
            match self.recovery_attempt(crashed).await {
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
                    self.clock
                        .sleep(Duration::from_millis(RETRY_INTERVAL_MS))
                        .await;
                }
            }
        }
        self.recoveries.running.lock().remove(&crashed.0);
        self.recoveries.completed.fetch_add(1, Ordering::Relaxed);
        let elapsed_ms = self.clock.elapsed(started).as_millis() as u64;
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

    async fn recovery_attempt(self: &Arc<Self>, crashed: ServerId) -> Attempt {
        let (entry, tablets, backups, masters) = {
            let core = self.core.lock();
            let Some(entry) = core.server(crashed).cloned() else {
                return Attempt::Done;
            };
            let tablets: Vec<TabletEntry> = core
                .state()
                .tables()
                .tablets()
                .filter(|t| t.server_id == crashed)
                .copied()
                .collect();
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
            let masters: Vec<ServerEntry> = up.into_iter().filter(|e| e.is_master()).collect();
            (entry, tablets, backups, masters)
        };
        if entry.status != ServerStatus::Crashed {
            return Attempt::Done;
        }
        if tablets.is_empty() {
            return self.finish(crashed).await;
        }
        if !entry.has_replicated_log() {
            return self.give_away_empty(crashed).await;
        }
        if masters.is_empty() {
            return Attempt::Again("no UP master to recover onto".into());
        }
        self.recoveries
            .update(crashed, |p| p.state = "finding the log".into());
        let client = BackupClient::new(self.transport.clone())
            .with_rpc_deadline(Duration::from_millis(FIND_LOG_DEADLINE_MS));
        let log = match find_log(&client, crashed, &backups).await {
            Ok(log) => log,
            Err(why) => return Attempt::Again(why),
        };
        let loads = tablet_loads(&tablets, &log.stats, log.log_bytes);
        let limits = *self.recoveries.limits.lock();
        let parts = partition(&loads, limits, &mut self.rng.as_rand());
        let recovery_id: u64 = self.rng.next_u64();
        let mut order = masters.clone();
        order.shuffle(&mut self.rng.as_rand());
        // Announce the partitions to every backup holding a replica (R§7.5).
        let announced: Vec<PartitionTablet> = parts
            .iter()
            .enumerate()
            .flat_map(|(i, p)| {
                p.iter().map(move |t| PartitionTablet {
                    partition_id: i as u32,
                    table_id: t.table_id,
                    start_hash: t.start_hash,
                    end_hash: t.end_hash,
                })
            })
            .collect();
        let mut holder_addresses: Vec<String> = log.holders.values().flatten().cloned().collect();
        holder_addresses.sort();
        holder_addresses.dedup();
        let published = announce(&client, crashed, recovery_id, &announced, holder_addresses).await;
        let sources = fetch_order(&log, &published, &*self.rng);
        if let Some(missing) = log
            .digest
            .iter()
            .find(|id| !sources.iter().any(|(s, _)| s == *id))
        {
            return Attempt::Again(format!(
                "segment {missing} of the log is on no backup that started partitioning"
            ));
        }
        tracing::info!(
            crashed_id = crashed.0,
            recovery_id,
            partitions = parts.len(),
            recovery_masters = order.len(),
            segments = sources.len(),
            log_bytes = log.log_bytes,
            "recovery: replaying"
        );
        self.recoveries.update(crashed, |p| {
            p.partitions_total = parts.len() as u64;
            p.state = format!("replaying {} partitions", parts.len());
        });
        let mut running: JoinSet<PartitionOutcome> = JoinSet::new();
        for (i, part) in parts.iter().enumerate() {
            let master = order[i % order.len()].clone();
            let this = self.clone();
            let ranges: Vec<(u64, u64, u64)> = part
                .iter()
                .map(|t| (t.table_id, t.start_hash, t.end_hash))
                .collect();
            let sources = sources.clone();
            running.spawn(async move {
                let result = this
                    .run_partition(crashed, recovery_id, i as u32, &master, &ranges, &sources)
                    .await;
                (i, master.id, result)
            });
        }
        let mut failed = 0;
        while let Some(done) = running.join_next().await {
            let Ok((i, master, result)) = done else {
                failed += 1;
                continue;
            };
            match result {
                Ok((entries, bytes)) => {
                    let ranges: Vec<(u64, u64, u64)> = parts[i]
                        .iter()
                        .map(|t| (t.table_id, t.start_hash, t.end_hash))
                        .collect();
                    let moved = self
                        .core
                        .lock()
                        .recovered_partition(crashed, &ranges, master);
                    match moved {
                        Ok(actions) => {
                            self.carry_out(actions).await;
                            self.recoveries.update(crashed, |p| {
                                p.partitions_done += 1;
                                p.entries_replayed += entries;
                                p.bytes_replayed += bytes;
                            });
                        }
                        Err(e) => {
                            failed += 1;
                            tracing::warn!(crashed_id = crashed.0, partition = i, error = %e, "recovery: cannot hand out a recovered partition");
                        }
                    }
                }
                Err(why) => {
                    failed += 1;
                    tracing::warn!(crashed_id = crashed.0, partition = i, recovery_master = master.0, %why, "recovery: a partition failed; it is retried");
                }
            }
        }
        if failed > 0 {
            return Attempt::Again(format!("{failed} partitions failed"));
        }
        self.finish(crashed).await
    }

    /// Sends one partition to its recovery master and waits for the answer, or
    /// until the recovery master is no longer UP.
    async fn run_partition(
        &self,
        crashed: ServerId,
        recovery_id: u64,
        partition_id: u32,
        master: &ServerEntry,
        ranges: &[(u64, u64, u64)],
        sources: &[(u64, Vec<String>)],
    ) -> Result<(u64, u64), String> {
        let mut frame = Vec::new();
        let mut enc =
            RecoverPartitionEncoder::new(0, crashed.0, recovery_id, partition_id, &mut frame);
        for &(table_id, start_hash, end_hash) in ranges {
            enc.push(&RecoveryItem::Tablet {
                table_id,
                start_hash,
                end_hash,
            })
            .map_err(|e| e.to_string())?;
        }
        for (segment_id, holders) in sources {
            for address in holders {
                enc.push(&RecoveryItem::Replica {
                    segment_id: *segment_id,
                    address,
                })
                .map_err(|e| e.to_string())?;
            }
        }
        enc.finish().map_err(|e| e.to_string())?;
        let call = self
            .transport
            .call(&master.address, frame, ramstore_rpc::NO_DEADLINE);
        tokio::pin!(call);
        let mut watch =
            ramstore_clock::interval(&self.clock, Duration::from_millis(WATCH_INTERVAL_MS));
        let reply = loop {
            tokio::select! {
                reply = &mut call => break reply,
                _ = watch.tick() => {
                    let up = self.core.lock().server(master.id).is_some_and(ServerEntry::is_up);
                    if !up {
                        return Err(format!("recovery master {} is no longer up", master.id.0));
                    }
                }
            }
        };
        let bytes = reply.map_err(|e| e.to_string())?;
        match decode_response(&bytes) {
            Ok((h, Response::RecoverPartition { entries, bytes })) if h.status == Status::Ok => {
                Ok((entries, bytes))
            }
            Ok((_, Response::Error(body))) => Err(format!("{body:?}")),
            Ok((_, other)) => Err(format!("unexpected answer {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The crashed master owns nothing more: Removed (R§8).
    async fn finish(&self, crashed: ServerId) -> Attempt {
        let result = self.core.lock().finish_recovery(crashed);
        match result {
            Ok(actions) => {
                self.carry_out(actions).await;
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
        let result = self.core.lock().remove_server(crashed);
        match result {
            Ok(actions) => {
                self.carry_out(actions).await;
                Attempt::Done
            }
            Err(e) => Attempt::Again(format!("cannot reassign the tablets: {e}")),
        }
    }
}

/// Announces the partitions to every backup in `holders` at once (R§7.5); the
/// order each published. A backup that does not answer within the deadline is
/// left out of this attempt (its replicas are read from the others).
async fn announce(
    client: &BackupClient,
    crashed: ServerId,
    recovery_id: u64,
    tablets: &[PartitionTablet],
    holders: Vec<String>,
) -> HashMap<String, Vec<u64>> {
    let tablets: Arc<[PartitionTablet]> = tablets.into();
    let mut asks = JoinSet::new();
    for address in holders {
        let client = client.clone();
        let tablets = tablets.clone();
        asks.spawn(async move {
            let order = client
                .start_partitioning(&address, crashed.0, recovery_id, &tablets)
                .await;
            (address, order)
        });
    }
    let mut published = HashMap::new();
    while let Some(Ok((address, order))) = asks.join_next().await {
        match order {
            Ok(order) => {
                published.insert(address, order.iter().map(|r| r.segment_id).collect());
            }
            Err(e) => {
                tracing::warn!(crashed_id = crashed.0, backup = %address, error = %e, "recovery: a backup did not start partitioning")
            }
        }
    }
    published
}

/// Finds the crashed master's log: who holds which replica, and the newest
/// digest with the tablet statistics beside it (R§7.4, R§7.5).
async fn find_log(
    client: &BackupClient,
    crashed: ServerId,
    backups: &[String],
) -> Result<FoundLog, String> {
    let mut offered: HashMap<u64, Vec<OfferedReplica>> = HashMap::new();
    let mut lengths: HashMap<u64, u64> = HashMap::new();
    let mut open: std::collections::HashSet<u64> = std::collections::HashSet::new();
    let mut asks: JoinSet<(String, Result<Vec<ramstore_backup::BackupReplica>, String>)> =
        JoinSet::new();
    for address in backups {
        let client = client.clone();
        let address = address.clone();
        asks.spawn(async move {
            let r = client
                .get_replicas(&address, crashed.0)
                .await
                .map_err(|e| e.to_string());
            (address, r)
        });
    }
    while let Some(Ok((address, replicas))) = asks.join_next().await {
        if let Ok(replicas) = replicas {
            for r in replicas {
                offered
                    .entry(r.segment_id)
                    .or_default()
                    .push(OfferedReplica {
                        address: address.clone(),
                        length: u64::from(r.length),
                        closed: r.closed,
                    });
                let longest = lengths.entry(r.segment_id).or_default();
                *longest = (*longest).max(u64::from(r.length));
                if !r.closed {
                    open.insert(r.segment_id);
                }
            }
        }
    }
    if offered.is_empty() {
        return Err("no backup offers any replica of its log yet".into());
    }
    let holders: HashMap<u64, Vec<String>> = offered
        .iter()
        .map(|(&id, replicas)| (id, usable_holders(replicas)))
        .collect();
    let mut ids: Vec<u64> = holders.keys().copied().collect();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    for id in ids {
        for address in &holders[&id] {
            let Ok(replica) = client.read_replica(address, crashed.0, id).await else {
                continue;
            };
            let (digest, stats) = head_contents(&replica.bytes);
            if let Some(digest) = digest {
                // A head is closed only once its successor is open on all its
                // replicas (R§7.4): a closed newest head means the real head is on
                // a backup that is not up (yet), and recovering from this one
                // would lose everything written since.
                if !open.contains(&id) {
                    return Err(format!(
                        "the newest head found (segment {id}) is closed: the log's head is on a backup that is not up"
                    ));
                }
                let missing: Vec<u64> = digest
                    .iter()
                    .copied()
                    .filter(|s| !holders.contains_key(s))
                    .collect();
                if !missing.is_empty() {
                    return Err(format!(
                        "the log is incomplete: segments {missing:?} are on no reachable backup"
                    ));
                }
                let log_bytes = digest.iter().filter_map(|s| lengths.get(s)).sum();
                return Ok(FoundLog {
                    holders,
                    digest,
                    stats,
                    log_bytes,
                });
            }
            // A survivor segment (no digest): look at older ones.
            break;
        }
    }
    Err("no replica with a log digest is readable yet".into())
}

/// One replica a backup offers for recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OfferedReplica {
    address: String,
    length: u64,
    closed: bool,
}

/// Which of the replicas offered for one segment recovery may replay: the closed
/// ones if any (complete), else only the longest open ones.
///
/// Why: a backup can hold a *stale* open replica — the master's RPC to it failed
/// (a timeout under load, not a crash), the master dropped it from the segment's
/// replica set and re-created the replica elsewhere, and went on acknowledging
/// writes there. The stale copy is a prefix of the segment that lacks those
/// writes. The open replicas of one segment are all prefixes of the same bytes
/// (only closed segments are compacted or re-sent whole), so the longest holds
/// every acknowledged byte the others hold. Regression: a 30-minute soak lost
/// ~580 acknowledged updates of a key when recovery replayed such a stale prefix
/// (docs/reliability.md, "Findings").
fn usable_holders(replicas: &[OfferedReplica]) -> Vec<String> {
    let closed: Vec<String> = replicas
        .iter()
        .filter(|r| r.closed)
        .map(|r| r.address.clone())
        .collect();
    if !closed.is_empty() {
        return closed;
    }
    let longest = replicas.iter().map(|r| r.length).max().unwrap_or(0);
    replicas
        .iter()
        .filter(|r| r.length == longest)
        .map(|r| r.address.clone())
        .collect()
}

/// The digest and tablet statistics at the start of a head segment's bytes.
fn head_contents(mut bytes: &[u8]) -> (Option<Vec<u64>>, Vec<ramstore_log::entry::TabletStat>) {
    let mut digest = None;
    let mut stats = Vec::new();
    for _ in 0..HEAD_ENTRIES_SCANNED {
        let Ok((entry, len)) = parse_entry(bytes) else {
            break;
        };
        match entry {
            Entry::LogDigest(d) => digest = Some(d.segment_ids().collect()),
            Entry::TabletStats(s) => stats = s.stats().collect(),
            _ => {}
        }
        bytes = &bytes[len..];
    }
    (digest, stats)
}

/// Each crashed tablet with an estimate of its bytes and entries (R§7.5). The
/// statistics in the head were recorded when the head opened, so they miss what
/// was written since: when the log holds more bytes than they account for, the
/// surplus is shared out in proportion to them (evenly if they are all zero),
/// and entries are estimated at no more than [`ESTIMATED_ENTRY_BYTES`] each, so
/// partitions err on the small side.
fn tablet_loads(
    tablets: &[TabletEntry],
    stats: &[ramstore_log::entry::TabletStat],
    log_bytes: u64,
) -> Vec<TabletLoad> {
    let recorded: Vec<(f64, f64)> = tablets
        .iter()
        .map(|t| {
            let (mut bytes, mut entries) = (0f64, 0f64);
            for s in stats.iter().filter(|s| s.table_id == t.table_id) {
                let lo = s.start_hash.max(t.start_hash);
                let hi = s.end_hash.min(t.end_hash);
                if lo > hi {
                    continue;
                }
                let share = ((hi - lo) as f64 + 1.0) / ((s.end_hash - s.start_hash) as f64 + 1.0);
                bytes += s.bytes as f64 * share;
                entries += s.entry_count as f64 * share;
            }
            (bytes, entries)
        })
        .collect();
    let total: f64 = recorded.iter().map(|(b, _)| b).sum();
    let surplus = (log_bytes as f64 - total).max(0.0);
    tablets
        .iter()
        .zip(&recorded)
        .map(|(t, &(bytes, entries))| {
            let share = if total > 0.0 {
                bytes / total
            } else {
                1.0 / tablets.len() as f64
            };
            let bytes = bytes + surplus * share;
            let entries = entries.max(bytes / ESTIMATED_ENTRY_BYTES as f64);
            TabletLoad {
                table_id: t.table_id,
                start_hash: t.start_hash,
                end_hash: t.end_hash,
                bytes: bytes as u64,
                entries: entries as u64,
            }
        })
        .collect()
}

/// The digest's segments in fetch order, each with the backups that bucket it:
/// segments early in the backups' published orders first, so recovery masters
/// ask for what the backups read first (R§7.5). Holders are shuffled with `rng`.
fn fetch_order(
    log: &FoundLog,
    published: &HashMap<String, Vec<u64>>,
    rng: &dyn Rng,
) -> Vec<(u64, Vec<String>)> {
    let mut rank: HashMap<u64, (usize, Vec<String>)> = HashMap::new();
    for (address, order) in published {
        for (pos, segment) in order.iter().enumerate() {
            // Only a replica recovery may use (`usable_holders`): a backup buckets
            // every replica it holds, stale ones too.
            let usable = log
                .holders
                .get(segment)
                .is_some_and(|h| h.contains(address));
            if !usable {
                continue;
            }
            let e = rank.entry(*segment).or_insert((usize::MAX, Vec::new()));
            e.0 = e.0.min(pos);
            e.1.push(address.clone());
        }
    }
    let mut out: Vec<(usize, u64, Vec<String>)> = log
        .digest
        .iter()
        .filter_map(|id| {
            rank.get(id).map(|(pos, holders)| {
                let mut holders = holders.clone();
                // Spread the load: each segment starts with a random holder.
                holders.shuffle(&mut rng.as_rand());
                (*pos, *id, holders)
            })
        })
        .collect();
    out.sort_by_key(|(pos, id, _)| (*pos, *id));
    out.into_iter().map(|(_, id, h)| (id, h)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ramstore_log::entry::{
        encode_log_digest, encode_segment_header, encode_tablet_stats, TabletStat,
    };

    fn offered(address: &str, length: u64, closed: bool) -> OfferedReplica {
        OfferedReplica {
            address: address.into(),
            length,
            closed,
        }
    }

    #[test]
    fn usable_holders_prefers_closed_replicas() {
        let replicas = [
            offered("stale", 300, false),
            offered("a", 500, true),
            offered("compacted", 200, true),
        ];
        assert_eq!(usable_holders(&replicas), vec!["a", "compacted"]);
    }

    /// Regression (30-minute soak, seed 5): a stale open prefix beside the
    /// re-created replica must not be replayed.
    #[test]
    fn usable_holders_takes_only_the_longest_open_replicas() {
        let replicas = [
            offered("stale", 300, false),
            offered("good", 900, false),
            offered("also-good", 900, false),
        ];
        assert_eq!(usable_holders(&replicas), vec!["good", "also-good"]);
        assert_eq!(usable_holders(&[offered("only", 10, false)]), vec!["only"]);
    }

    /// A backup buckets every replica it holds, stale ones too; recovery masters
    /// must fetch each segment only from the usable holders.
    #[test]
    fn fetch_order_skips_backups_whose_replica_is_not_usable() {
        let log = FoundLog {
            holders: HashMap::from([(3, vec!["good".to_string()]), (4, vec!["stale".into()])]),
            digest: vec![3, 4],
            stats: Vec::new(),
            log_bytes: 0,
        };
        let published = HashMap::from([
            ("stale".to_string(), vec![3, 4]),
            ("good".to_string(), vec![3]),
        ]);
        assert_eq!(
            fetch_order(&log, &published, &ramstore_clock::SeededRng::new(1)),
            vec![
                (3, vec!["good".to_string()]),
                (4, vec!["stale".to_string()])
            ]
        );
    }

    #[test]
    fn head_contents_finds_the_digest_and_stats() {
        let mut head = Vec::new();
        encode_segment_header(3, 9, &mut head);
        encode_log_digest(&[1, 4, 9], &mut head);
        let stat = TabletStat {
            table_id: 2,
            start_hash: 0,
            end_hash: u64::MAX,
            entry_count: 10,
            bytes: 1000,
        };
        encode_tablet_stats(&[stat], &mut head);
        let (digest, stats) = head_contents(&head);
        assert_eq!(digest, Some(vec![1, 4, 9]));
        assert_eq!(stats, vec![stat]);
        assert_eq!(head_contents(&head[..5]).0, None);
    }

    #[test]
    fn tablet_loads_scale_by_overlap() {
        let stat = ramstore_log::entry::TabletStat {
            table_id: 2,
            start_hash: 0,
            end_hash: u64::MAX,
            entry_count: 100,
            bytes: 1000,
        };
        let half = TabletEntry {
            table_id: 2,
            start_hash: 0,
            end_hash: u64::MAX / 2,
            server_id: ServerId(1),
        };
        let loads = tablet_loads(&[half], &[stat], 0);
        assert!((499..=501).contains(&loads[0].bytes), "{loads:?}");
        assert!((49..=51).contains(&loads[0].entries), "{loads:?}");
        // Bytes written since the statistics were recorded are shared out.
        let loads = tablet_loads(&[half], &[stat], 64_000);
        assert!((63_900..=64_100).contains(&loads[0].bytes), "{loads:?}");
        assert!(loads[0].entries >= 998, "{loads:?}");
        // No statistics at all: an even share each.
        let other = TabletEntry {
            start_hash: u64::MAX / 2 + 1,
            end_hash: u64::MAX,
            ..half
        };
        let loads = tablet_loads(&[half, other], &[], 6_400);
        assert_eq!(loads[0].bytes, 3_200);
        assert_eq!(loads[1].entries, 50);
    }
}
