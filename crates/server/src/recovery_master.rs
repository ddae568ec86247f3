//! The recovery master's half of crash recovery (R§7.6): given one partition of a
//! crashed master (its tablets, and which backups hold which replica), fetch the
//! partition's bucket of every replica with several requests outstanding, replay
//! the entries in whatever order they arrive, make the result durable in this
//! master's own log, and answer the coordinator.
//!
//! Replay keeps the newest state of each key (R§7.6): an object is applied only if
//! the key holds no version at least as new and no tombstone at least as new was
//! replayed; a tombstone kills the key's object if that object's version is at most
//! the tombstone's. Versions never go back (R§3.1): the safe version is raised above
//! every version seen, safe-version entries included.
//!
//! Objects go through the ordinary write path ([`ObjectStore::replay_object`]), so
//! they are appended to this master's log and replicated to its backups like any
//! write; the answer is sent only once everything replayed is durable, so the
//! coordinator never hands out a tablet whose data a second crash could lose.
//!
//! A tablet this master holds fenced for a migration whose target crashed is
//! not added but reclaimed (lineage rollback, K§2.3.4): the target's entries are
//! replayed on top of the source's copy, newest version wins, so every write the
//! target acknowledged (all above the source's safe version) lands and nothing
//! the target never changed moves.
//!
//! The partition's tablets are added in the recovering state: replay fills
//! them, but clients are answered UNKNOWN_TABLET until the coordinator, having
//! recorded the move, sends TakeTabletOwnership — a partly replayed tablet is
//! never served.
//!
//! A partition that fails (a replica no backup can serve, memory full, a
//! replication failure) drops the tablets it added: the coordinator retries the
//! partition elsewhere in a new attempt.
//!
//! Tenures (design notes "Tablet ctime", issue 20): each tablet of the
//! partition comes with its ctime in the crashed master's log, and replay
//! skips the tablet's entries of segments below it — entries of an earlier
//! tenure of the range there, whose tombstones may be in other masters' logs.
//! Before adding the tablets this master starts a tenure of its own
//! ([`ObjectStore::begin_tenure`], a new head), so everything it replays lands
//! at or above its own ctime, which the answer carries for the coordinator to
//! record with the new owner.
//!
//! Thread-safety: one call of [`recover`] per partition; several may run at once
//! (several crashed masters, several partitions), each replaying on the blocking
//! pool.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ramstore_backup::{BackupClient, BackupClientError};
use ramstore_clock::Clock;
use ramstore_log::entry::{parse_entry, Entry};
use ramstore_master::{ObjectStore, WriteError};
use ramstore_wire::{RecoveryItem, Request};
use tokio::task::JoinSet;

use crate::blocking::Blocking;
use crate::replica_manager::ReplicaManager;

/// Bucket fetches a recovery master keeps outstanding (R§7.6: many, so the
/// network and the backups' disks stay busy while it replays). A master
/// fetches a bucket of every segment of the crashed log, 2(N − 1) of them in
/// a cluster of N recovering one partition each, so the count grows with the
/// cluster while each bucket shrinks: with 4 outstanding, recovery time grew
/// with N in the simulator (issue 22: 4.6 s at 10 servers, 9.7 s at 200).
/// With 64 (and the coordinator's round-by-round, staggered fetch order) 500
/// servers recover within 1.22× of the 50-server time (1,000: 1.47×, the
/// busiest disk and read gaps)
/// (docs/bench-notes/scale22-session39.md). Memory: each outstanding fetch
/// holds at most one bucket, a piece of the partition being recovered anyway.
pub const MAX_FETCHES_IN_FLIGHT: usize = 64;
/// How long a fetch keeps asking a backup that is still reading the replica.
const FETCH_PATIENCE_MS: u64 = 120_000;
/// How long a recovered partition may wait to become durable (too few backups,
/// or a large recovery whose re-replication is slower than its replay)
/// before it fails and the coordinator tries again, perhaps elsewhere.
const DURABILITY_PATIENCE_MS: u64 = 30_000;
/// How long replay waits for log memory (the cleaner) before failing the partition.
const NO_SPACE_PATIENCE_MS: u64 = 10_000;

/// One partition to recover, as the coordinator's RecoverPartition names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionJob {
    pub crashed_id: u64,
    pub recovery_id: u64,
    pub partition_id: u32,
    /// (table id, start hash, end hash).
    pub tablets: Vec<(u64, u64, u64)>,
    /// Per tablet (same order): its ctime in the crashed master's log; replay
    /// skips its entries of older segments (0: none skipped).
    pub ctimes: Vec<u64>,
    /// Segment ids in fetch order, each with the backups that hold it.
    pub sources: Vec<(u64, Vec<String>)>,
}

impl PartitionJob {
    /// The job a RecoverPartition request describes; `None` for other requests.
    pub fn from_request(req: &Request<'_>) -> Option<Self> {
        let Request::RecoverPartition {
            crashed_id,
            recovery_id,
            partition_id,
            items,
        } = *req
        else {
            return None;
        };
        let mut job = PartitionJob {
            crashed_id,
            recovery_id,
            partition_id,
            tablets: Vec::new(),
            ctimes: Vec::new(),
            sources: Vec::new(),
        };
        let mut index: HashMap<u64, usize> = HashMap::new();
        for item in items.iter() {
            match item {
                RecoveryItem::Tablet {
                    table_id,
                    start_hash,
                    end_hash,
                    ctime,
                } => {
                    job.tablets.push((table_id, start_hash, end_hash));
                    job.ctimes.push(ctime);
                }
                RecoveryItem::Replica {
                    segment_id,
                    address,
                } => {
                    let i = *index.entry(segment_id).or_insert_with(|| {
                        job.sources.push((segment_id, Vec::new()));
                        job.sources.len() - 1
                    });
                    job.sources[i].1.push(address.to_string());
                }
            }
        }
        Some(job)
    }
}

/// Why a partition's recovery failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecoveryError {
    #[error("no backup could serve segment {segment_id}: {reason}")]
    Fetch { segment_id: u64, reason: String },
    #[error("segment {segment_id}: {reason}")]
    Replay { segment_id: u64, reason: String },
    #[error("tablet {table_id} [{start_hash:#x}, {end_hash:#x}]: {reason}")]
    Tablet {
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
        reason: String,
    },
    #[error("the recovered objects could not be made durable: {0}")]
    Replication(String),
}

/// What a partition's replay applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayCounts {
    /// Entries read from the buckets (objects, tombstones, safe versions).
    pub entries: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Objects that became the key's object (at the time they were replayed).
    pub applied: u64,
    /// Entries skipped as belonging to an earlier tenure of their tablet in the
    /// crashed master's log (a segment below the tablet's ctime).
    pub earlier_tenure: u64,
    /// The recovered tablets' ctime on this master (the lowest, should they
    /// differ: see `partition_ctime`), set when the partition is done.
    pub ctime: u64,
    /// Time spent replaying (parsing and applying; not waiting for fetches), in
    /// microseconds: replay runs on one core per partition, so bytes over this is
    /// the replay rate per core.
    pub replay_micros: u64,
    /// CPU time the replay used, in microseconds: on a shared machine the fair
    /// measure of the replay rate per core.
    pub replay_cpu_micros: u64,
}

/// The replay state of one partition.
#[derive(Debug, Default)]
pub struct Replay {
    /// Newest tombstone version per (table, key): an older object arriving later
    /// must not come back.
    tombstones: HashMap<u64, HashMap<Vec<u8>, u64>>,
    max_version: u64,
    counts: ReplayCounts,
    /// (table id, start hash, end hash, ctime) of each tablet with a ctime
    /// above 0: its entries of segments below the ctime are skipped.
    cutoffs: Vec<(u64, u64, u64, u64)>,
    /// The highest ctime of `cutoffs` (0: none): segments at or above it are
    /// replayed whole without looking a key's tablet up.
    max_cutoff: u64,
    /// Transaction records (log entry type 8) of the partition, re-prepared
    /// once the whole partition is replayed (SOSP'15 §6.2): a decided mark may
    /// arrive after the prepared op it names.
    tx_records: Vec<Vec<u8>>,
}

/// The owner of a recovering store's transactions: it re-takes the locks of the
/// prepared ops a replay found (`ramstore_master::tx::replay`).
pub trait ReplaysTransactions {
    /// Re-prepares the undecided ops among `records`; how many.
    fn replay_tx_records(&self, records: &[Vec<u8>]) -> Result<usize, WriteError>;
    /// The partition failed and `tablets` were dropped: forgets the
    /// transaction state re-taken for their objects; how many ops.
    fn forget_tablets(&self, tablets: &[(u64, u64, u64)]) -> usize;
}

impl Replay {
    /// A replay that skips, for each `(table id, start hash, end hash)` of
    /// `tablets`, its entries of segments below its ctime in `ctimes` (same
    /// order; design notes "Tablet ctime").
    pub fn with_ctimes(tablets: &[(u64, u64, u64)], ctimes: &[u64]) -> Self {
        let cutoffs: Vec<(u64, u64, u64, u64)> = tablets
            .iter()
            .zip(ctimes)
            .filter(|(_, &c)| c > 0)
            .map(|(&(t, s, e), &c)| (t, s, e, c))
            .collect();
        let max_cutoff = cutoffs.iter().map(|c| c.3).max().unwrap_or(0);
        Self {
            cutoffs,
            max_cutoff,
            ..Self::default()
        }
    }

    /// Whether an entry of `table_id`/`key` in segment `segment_id` is from an
    /// earlier tenure of its tablet in the crashed master's log.
    fn earlier_tenure(&self, segment_id: u64, table_id: u64, key: &[u8]) -> bool {
        if segment_id >= self.max_cutoff {
            return false;
        }
        self.earlier_tenure_hash(segment_id, table_id, ramstore_wire::key_hash(key))
    }

    /// [`Self::earlier_tenure`] of a key known by its hash.
    fn earlier_tenure_hash(&self, segment_id: u64, table_id: u64, hash: u64) -> bool {
        if segment_id >= self.max_cutoff {
            return false;
        }
        self.cutoffs
            .iter()
            .any(|&(t, s, e, c)| t == table_id && (s..=e).contains(&hash) && segment_id < c)
    }

    /// The highest version any replayed entry carried.
    pub fn max_version(&self) -> u64 {
        self.max_version
    }

    pub fn counts(&self) -> ReplayCounts {
        self.counts
    }

    /// Replays one bucket's entries, those of segment `segment_id` of the
    /// crashed master's log, into `store` (see the module doc). Waits
    /// (bounded) while the log is full: the cleaner frees space.
    pub fn apply(
        &mut self,
        store: &ObjectStore,
        segment_id: u64,
        mut bytes: &[u8],
    ) -> Result<(), String> {
        while !bytes.is_empty() {
            let (entry, len) = parse_entry(bytes).map_err(|e| e.to_string())?;
            let raw = &bytes[..len];
            bytes = &bytes[len..];
            self.counts.entries += 1;
            self.counts.bytes += len as u64;
            match entry {
                Entry::Object(o) => {
                    // Raising the safe version by a stale entry is harmless
                    // (versions only need to grow, R§3.1).
                    self.max_version = self.max_version.max(o.version);
                    if self.earlier_tenure(segment_id, o.table_id, o.key) {
                        self.counts.earlier_tenure += 1;
                        continue;
                    }
                    if self.tombstoned(o.table_id, o.key, o.version) {
                        continue;
                    }
                    // The expiry is replayed with the object (R§4: the log
                    // is the truth): an expired key stays absent after
                    // recovery, an unexpired one keeps its deadline.
                    let applied = with_space(store.clock(), || {
                        store.replay_object_expiring(
                            o.table_id,
                            o.key,
                            o.value,
                            o.version,
                            o.expires_at,
                        )
                    })?;
                    self.counts.applied += u64::from(applied);
                }
                Entry::Tombstone(t) => {
                    self.max_version = self.max_version.max(t.version);
                    if self.earlier_tenure(segment_id, t.table_id, t.key) {
                        self.counts.earlier_tenure += 1;
                        continue;
                    }
                    // Looked up borrowed: a key already seen costs no allocation.
                    let table = self.tombstones.entry(t.table_id).or_default();
                    match table.get_mut(t.key) {
                        Some(newest) => *newest = (*newest).max(t.version),
                        None => {
                            table.insert(t.key.to_vec(), t.version);
                        }
                    }
                    with_space(store.clock(), || {
                        store.replay_tombstone(t.table_id, t.key, t.version)
                    })?;
                }
                Entry::SafeVersion(v) => self.max_version = self.max_version.max(v.version),
                // A completion record of an object of this partition (RIFL §4.3):
                // kept here, so a retry after recovery gets its first answer.
                Entry::RpcResult(_) => {
                    let kept = with_space(store.clock(), || store.replay_rpc_result(raw))?;
                    self.counts.applied += u64::from(kept);
                }
                // A prepared op or its decided mark (SOSP'15 §6.2): kept until
                // the whole partition is replayed ([`ReplaysTransactions`]).
                Entry::TxRecord(r) => {
                    if !self.earlier_tenure_hash(segment_id, r.table_id, r.key_hash) {
                        self.tx_records.push(raw.to_vec());
                    }
                }
                Entry::SegmentHeader(_) | Entry::LogDigest(_) | Entry::TabletStats(_) => {}
            }
        }
        Ok(())
    }

    /// The transaction records replayed so far (prepared ops and decided marks).
    pub fn tx_records(&self) -> &[Vec<u8>] {
        &self.tx_records
    }

    fn tombstoned(&self, table_id: u64, key: &[u8], version: u64) -> bool {
        !self.tombstones.is_empty()
            && self
                .tombstones
                .get(&table_id)
                .and_then(|t| t.get(key))
                .is_some_and(|&dead| dead >= version)
    }
}

/// Runs `op`, retrying while the log answers NO_SPACE (bounded, on the store's
/// `clock`).
fn with_space(
    clock: &Arc<dyn Clock>,
    mut op: impl FnMut() -> Result<bool, WriteError>,
) -> Result<bool, String> {
    let deadline = clock.deadline_after(Duration::from_millis(NO_SPACE_PATIENCE_MS));
    loop {
        match op() {
            Ok(applied) => return Ok(applied),
            Err(WriteError::NoSpace) if clock.now() < deadline => {
                clock.sleep_blocking(Duration::from_millis(1));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Recovers one partition into the store `owner` holds (see the module doc) and
/// returns what it replayed.
pub async fn recover<S>(
    owner: Arc<S>,
    replicas: Option<Arc<ReplicaManager>>,
    backups: BackupClient,
    job: PartitionJob,
) -> Result<ReplayCounts, RecoveryError>
where
    S: AsRef<ObjectStore> + ReplaysTransactions + Send + Sync + 'static,
{
    recover_with(owner, replicas, backups, job, Blocking::Pool).await
}

/// [`recover`], replaying as `blocking` says (inline in a simulation).
pub async fn recover_with<S>(
    owner: Arc<S>,
    replicas: Option<Arc<ReplicaManager>>,
    backups: BackupClient,
    job: PartitionJob,
    blocking: Blocking,
) -> Result<ReplayCounts, RecoveryError>
where
    S: AsRef<ObjectStore> + ReplaysTransactions + Send + Sync + 'static,
{
    let clock = owner.as_ref().as_ref().clock().clone();
    let started = clock.now();
    // A new tenure here: every entry replayed below lands at or above it.
    if let Err(e) = owner.as_ref().as_ref().begin_tenure() {
        let (table_id, start_hash, end_hash) = job.tablets.first().copied().unwrap_or_default();
        return Err(RecoveryError::Tablet {
            table_id,
            start_hash,
            end_hash,
            reason: e.to_string(),
        });
    }
    // Tablets this master already held fenced for a migration whose target
    // crashed (lineage rollback, K§2.3.4): replay goes on top of the fenced
    // copy, and a failure fences it again instead of dropping it.
    let mut kept = Vec::new();
    for &(table_id, start_hash, end_hash) in &job.tablets {
        // Not served until the coordinator hands it over (TakeTabletOwnership).
        let store = owner.as_ref().as_ref();
        let added = match store.reclaim_fenced_tablet(table_id, start_hash, end_hash) {
            Ok(true) => {
                kept.push((table_id, start_hash, end_hash));
                Ok(())
            }
            Ok(false) => store.add_recovering_tablet(table_id, start_hash, end_hash),
            Err(e) => Err(e),
        };
        if let Err(e) = added {
            drop_tablets(&owner, &job, &kept);
            return Err(RecoveryError::Tablet {
                table_id,
                start_hash,
                end_hash,
                reason: e.to_string(),
            });
        }
    }
    let result = fetch_and_replay(&owner, replicas, &backups, &job, blocking)
        .await
        .map(|mut counts| {
            counts.ctime = partition_ctime(owner.as_ref().as_ref(), &job);
            counts
        });
    match &result {
        Ok(counts) => tracing::info!(
            crashed_id = job.crashed_id,
            partition_id = job.partition_id,
            segments = job.sources.len(),
            entries = counts.entries,
            earlier_tenure = counts.earlier_tenure,
            ctime = counts.ctime,
            bytes = counts.bytes,
            replay_us = counts.replay_micros,
            replay_cpu_us = counts.replay_cpu_micros,
            elapsed_ms = clock.elapsed(started).as_millis() as u64,
            "recovered a partition"
        ),
        Err(e) => {
            tracing::warn!(crashed_id = job.crashed_id, partition_id = job.partition_id, error = %e, "partition recovery failed");
            drop_tablets(&owner, &job, &kept);
            // Locks re-taken for the dropped tablets go with them: the master
            // that recovers the partition next re-takes them (issue 21).
            let dropped: Vec<(u64, u64, u64)> = job
                .tablets
                .iter()
                .filter(|t| !kept.contains(t))
                .copied()
                .collect();
            let forgotten = owner.forget_tablets(&dropped);
            if forgotten > 0 {
                tracing::info!(
                    crashed_id = job.crashed_id,
                    partition_id = job.partition_id,
                    ops = forgotten,
                    "forgot the prepared ops re-taken for the failed partition"
                );
            }
        }
    }
    result
}

/// The ctime the coordinator records for the partition's tablets here: each
/// tablet's own (a fresh one's is the tenure begun for this partition; a
/// reclaimed copy keeps the one of its tenure, whose entries are in this log
/// from then on). A reclaimed copy is recovered in a partition of its own
/// (lineage), so the tablets of one partition share their ctime; were they to
/// differ, the lowest is the one that loses nothing of any of them.
fn partition_ctime(store: &ObjectStore, job: &PartitionJob) -> u64 {
    let ctimes: Vec<u64> = job
        .tablets
        .iter()
        .filter_map(|&(t, s, e)| store.tablet_ctime(t, s, e))
        .collect();
    if ctimes.windows(2).any(|w| w[0] != w[1]) {
        tracing::warn!(
            crashed_id = job.crashed_id,
            partition_id = job.partition_id,
            ?ctimes,
            "the tablets of one partition started their tenures apart; recording the lowest"
        );
    }
    ctimes.into_iter().min().unwrap_or(0)
}

/// Undoes a failed partition: drops the tablets it added, fences again those it
/// `kept` (a source's copy, which holds records found nowhere else).
fn drop_tablets<S: AsRef<ObjectStore>>(
    owner: &Arc<S>,
    job: &PartitionJob,
    kept: &[(u64, u64, u64)],
) {
    let store = owner.as_ref().as_ref();
    for &(table_id, start_hash, end_hash) in &job.tablets {
        if kept.contains(&(table_id, start_hash, end_hash)) {
            store.refence_tablet(table_id, start_hash, end_hash);
        } else {
            store.drop_tablet(table_id, start_hash, end_hash);
        }
    }
}

async fn fetch_and_replay<S>(
    owner: &Arc<S>,
    replicas: Option<Arc<ReplicaManager>>,
    backups: &BackupClient,
    job: &PartitionJob,
    blocking: Blocking,
) -> Result<ReplayCounts, RecoveryError>
where
    S: AsRef<ObjectStore> + ReplaysTransactions + Send + Sync + 'static,
{
    let clock = owner.as_ref().as_ref().clock().clone();
    let mut sources = job.sources.iter().cloned();
    let mut fetches: JoinSet<(u64, Result<Bytes, String>)> = JoinSet::new();
    let spawn_fetch = |fetches: &mut JoinSet<_>, (segment_id, holders): (u64, Vec<String>)| {
        let backups = backups.clone();
        let clock = clock.clone();
        let (crashed_id, recovery_id, partition_id) =
            (job.crashed_id, job.recovery_id, job.partition_id);
        fetches.spawn(async move {
            let fetched = fetch(
                &clock,
                &backups,
                &holders,
                crashed_id,
                recovery_id,
                segment_id,
                partition_id,
            )
            .await;
            (segment_id, fetched)
        });
    };
    for source in sources.by_ref().take(MAX_FETCHES_IN_FLIGHT) {
        spawn_fetch(&mut fetches, source);
    }
    let mut replay = Replay::with_ctimes(&job.tablets, &job.ctimes);
    while let Some(done) = fetches.join_next().await {
        let (segment_id, fetched) = done.map_err(|e| RecoveryError::Fetch {
            segment_id: 0,
            reason: e.to_string(),
        })?;
        let bytes = fetched.map_err(|reason| RecoveryError::Fetch { segment_id, reason })?;
        if let Some(next) = sources.next() {
            spawn_fetch(&mut fetches, next);
        }
        // Replay is CPU work: off the runtime's threads, one bucket at a time.
        let owner = Arc::clone(owner);
        let clock = clock.clone();
        replay = blocking
            .run(move || {
                let started = clock.now();
                let cpu_started = ramstore_log::thread_cpu_ns();
                let applied = replay.apply(owner.as_ref().as_ref(), segment_id, &bytes);
                replay.counts.replay_micros += clock.elapsed(started).as_micros() as u64;
                replay.counts.replay_cpu_micros +=
                    ramstore_log::thread_cpu_ns().saturating_sub(cpu_started) / 1000;
                (replay, applied)
            })
            .await
            .map_err(|e| RecoveryError::Replay {
                segment_id,
                reason: e.to_string(),
            })
            .and_then(|(replay, applied)| match applied {
                Ok(()) => Ok(replay),
                Err(reason) => Err(RecoveryError::Replay { segment_id, reason }),
            })?;
    }
    // Undecided prepared ops lock their objects again before the partition is
    // served (SOSP'15 §6.2); their records are made durable with the rest.
    if !replay.tx_records().is_empty() {
        let records = replay.tx_records().to_vec();
        let owner2 = owner.clone();
        let replayed = blocking
            .run(move || owner2.replay_tx_records(&records))
            .await
            .map_err(|e| RecoveryError::Replay {
                segment_id: 0,
                reason: e.to_string(),
            })?;
        replayed.map_err(|e| RecoveryError::Replay {
            segment_id: 0,
            reason: e.to_string(),
        })?;
    }
    let store = owner.as_ref().as_ref();
    store.raise_safe_version(replay.max_version() + 1);
    if let Some(manager) = replicas {
        // Everything replayed is in the log up to the current head: wait until it
        // is on R backups (R§7.6) before the coordinator hands out the tablets.
        let deadline = clock.deadline_after(Duration::from_millis(DURABILITY_PATIENCE_MS));
        loop {
            match manager.wait_durable(manager.sync_point()).await {
                Ok(()) => break,
                Err(
                    crate::replica_manager::ReplicationError::Timeout
                    | crate::replica_manager::ReplicationError::BackupsFull,
                ) if clock.now() < deadline => continue,
                Err(e) => return Err(RecoveryError::Replication(e.to_string())),
            }
        }
    }
    Ok(replay.counts())
}

/// Fetches one bucket from the first holder that serves it.
async fn fetch(
    clock: &Arc<dyn Clock>,
    backups: &BackupClient,
    holders: &[String],
    crashed_id: u64,
    recovery_id: u64,
    segment_id: u64,
    partition_id: u32,
) -> Result<Bytes, String> {
    let deadline = clock.deadline_after(Duration::from_millis(FETCH_PATIENCE_MS));
    let mut last_error = String::from("no backup holds it");
    for address in holders {
        loop {
            match backups
                .get_recovery_data(address, crashed_id, recovery_id, segment_id, partition_id)
                .await
            {
                Ok(bytes) => return Ok(bytes),
                Err(BackupClientError::Retry { delay_ms, .. }) if clock.now() < deadline => {
                    clock
                        .sleep(Duration::from_millis(u64::from(delay_ms.max(1))))
                        .await;
                }
                Err(e) => {
                    last_error = e.to_string();
                    break;
                }
            }
        }
    }
    Err(last_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ramstore_log::entry::{encode_object, encode_safe_version, encode_tombstone};
    use ramstore_master::StoreConfig;

    fn store() -> ObjectStore {
        let store = ObjectStore::new(StoreConfig::new(16 << 20)).unwrap();
        store.add_tablet(1, 0, u64::MAX).unwrap();
        store
    }

    fn value(store: &ObjectStore, key: &[u8]) -> Option<(u64, Vec<u8>)> {
        let mut v = Vec::new();
        store.read(1, key, &mut v).ok().map(|version| (version, v))
    }

    #[test]
    fn apply_keeps_the_newest_version_whatever_the_order() {
        let mut old = Vec::new();
        encode_object(1, 3, 0, b"k", b"old", &mut old);
        encode_object(1, 5, 0, b"gone", b"x", &mut old);
        let mut new = Vec::new();
        encode_object(1, 4, 0, b"k", b"new", &mut new);
        encode_tombstone(1, 5, 1, b"gone", &mut new);
        encode_safe_version(40, &mut new);
        for order in [[&old, &new], [&new, &old]] {
            let store = store();
            let mut replay = Replay::default();
            for bucket in order {
                replay.apply(&store, 1, bucket).unwrap();
            }
            assert_eq!(value(&store, b"k"), Some((4, b"new".to_vec())));
            assert_eq!(value(&store, b"gone"), None, "a tombstone must win");
            assert_eq!(replay.max_version(), 40);
            assert_eq!(replay.counts().entries, 5);
        }
    }

    #[test]
    fn apply_replays_expiry_so_an_expired_key_never_comes_back() {
        use ramstore_log::entry::encode_object_with_expiry;
        let store = store();
        let now = store.now_ms();
        let mut bucket = Vec::new();
        encode_object_with_expiry(1, 3, 0, Some(now - 1), b"expired", b"x", &mut bucket);
        encode_object_with_expiry(1, 4, 0, Some(now + 3_600_000), b"kept", b"y", &mut bucket);
        encode_object(1, 5, 0, b"plain", b"z", &mut bucket);
        let mut replay = Replay::default();
        replay.apply(&store, 1, &bucket).unwrap();
        assert_eq!(value(&store, b"expired"), None, "an expired key came back");
        assert_eq!(value(&store, b"kept"), Some((4, b"y".to_vec())));
        assert_eq!(store.expiry_of(1, b"kept"), Ok(Some(now + 3_600_000)));
        assert_eq!(store.expiry_of(1, b"plain"), Ok(None));
    }

    #[test]
    fn apply_skips_a_tablets_entries_of_segments_below_its_ctime() {
        // Issue 20: segment 5 holds entries of an earlier tenure of the range
        // (its tombstones are in other masters' logs); the tenure starts at 10.
        let store = store();
        let mut replay = Replay::with_ctimes(&[(1, 0, u64::MAX)], &[10]);
        let mut earlier = Vec::new();
        encode_object(1, 25, 0, b"deleted-elsewhere", b"stale", &mut earlier);
        encode_tombstone(1, 30, 1, b"k", &mut earlier);
        replay.apply(&store, 5, &earlier).unwrap();
        let mut tenure = Vec::new();
        encode_object(1, 30, 0, b"k", b"current", &mut tenure);
        replay.apply(&store, 10, &tenure).unwrap();
        assert_eq!(value(&store, b"deleted-elsewhere"), None);
        assert_eq!(
            value(&store, b"k"),
            Some((30, b"current".to_vec())),
            "a stale tombstone must not kill the tenure's object"
        );
        assert_eq!(replay.counts().earlier_tenure, 2);
        assert_eq!(replay.counts().applied, 1);
    }

    #[test]
    fn apply_with_ctimes_cuts_off_only_the_tablet_they_belong_to() {
        let store = ObjectStore::new(StoreConfig::new(16 << 20)).unwrap();
        let mid = 1u64 << 63;
        store.add_tablet(1, 0, mid - 1).unwrap();
        store.add_tablet(1, mid, u64::MAX).unwrap();
        let mut replay = Replay::with_ctimes(&[(1, 0, mid - 1), (1, mid, u64::MAX)], &[10, 0]);
        let keys: Vec<Vec<u8>> = (0..64u32)
            .map(|i| format!("key-{i}").into_bytes())
            .collect();
        let mut old = Vec::new();
        for k in &keys {
            encode_object(1, 3, 0, k, b"v", &mut old);
        }
        replay.apply(&store, 4, &old).unwrap();
        for k in &keys {
            let upper = ramstore_wire::key_hash(k) >= mid;
            let mut v = Vec::new();
            assert_eq!(
                store.read(1, k, &mut v).is_ok(),
                upper,
                "only the tablet without a ctime replays segment 4"
            );
        }
    }

    #[test]
    fn apply_of_a_corrupt_bucket_is_an_error() {
        let mut bucket = Vec::new();
        encode_object(1, 3, 0, b"k", b"value", &mut bucket);
        let n = bucket.len();
        bucket[n - 2] ^= 1;
        assert!(Replay::default().apply(&store(), 1, &bucket).is_err());
    }

    #[test]
    fn apply_to_a_tablet_not_owned_is_an_error() {
        let mut bucket = Vec::new();
        encode_object(2, 3, 0, b"k", b"value", &mut bucket);
        assert!(Replay::default().apply(&store(), 1, &bucket).is_err());
    }
}
