//! The master's replica manager: every segment of the log on R backups (R§4.2,
//! R§7.4, R§8, L§6.4). It is the log's [`ReplicaSink`].
//!
//! # How bytes travel
//! The log reports what it appended (`replicate`) under no lock of ours but our own
//! state mutex, and never waits. One replicator task per master plans *rounds*: a
//! round takes one segment's new bytes, copied once from the log, to each of its R
//! backups in concurrent BackupWrite RPCs (at most [`SURVIVOR_ROUND_BYTES`] of a
//! segment complete when opened — a survivor or a migration's side-log segment —
//! so a head's small writes never queue behind a whole 8 MiB segment). A segment has at most one round in
//! flight; bytes appended meanwhile wait for the next round and go together — that
//! is group commit (docs/design.md §5 "Write"). Writers wait on a *sync point*, the end of
//! the newest head when their operation finished; the manager wakes them when it is
//! durable.
//!
//! # Ordering (R§7.4, L§6.4) — see docs/design-notes.md "Segment transitions"
//! - A head's first RPC opens it; its digest is its first bytes.
//! - A head's close is sent only once a newer head's open is durable, so an open
//!   head with the newest digest always exists on backups.
//! - A write in a head is acknowledged only once every older head is closed on all
//!   its replicas (and its own bytes are on all R): so acknowledged data never sits
//!   behind an open predecessor.
//! - Survivors of combined cleaning are closed on all replicas before the cleaner
//!   writes the digest naming them (`sync_closed`), and the replicas of the
//!   segments they replace are freed only once a head opened after that digest is
//!   durable.
//!
//! # Failures (R§8)
//! A backup that fails an RPC, or that the server list says is down, loses its
//! replicas: each is re-created on another backup in atomic mode (never offered in
//! recovery until complete) from the segment's bytes in memory. A head that lost a
//! replica is closed and a new head opened first (the replacement of a segment that
//! still grows cannot be atomic). A write is never acknowledged with fewer than R
//! replicas: it waits, and after [`REPLICATION_WAIT_MS`] answers RETRY.
//!
//! # Replica health (R§8) — see docs/design-notes.md "Replica health"
//! Every segment still in the log has R replicas the manager believes exist. A
//! backup that is up but no longer holds one (freed behind the master's back, a
//! disk problem) is found out by its answer to a write (OBJECT_DOESNT_EXIST:
//! [`BackupClientError::UnknownReplica`]) or by a periodic check (one
//! BackupGetReplicas per [`DEFAULT_REPLICA_CHECK_INTERVAL_MS`], backups in
//! turn); the replica is then dropped and re-created from memory exactly as for a
//! crashed backup, on any eligible backup, that one included.
//!
//! Files: this one holds the state, the public API and the log's sink; the
//! replicator task's rounds are in `replica_manager/replicator.rs` and the replica
//! checks in `replica_manager/checks.rs` (methods over the same state).
//!
//! Thread-safety: `Send + Sync`; the state is one mutex, never held while calling
//! the log (the log calls us with its head lock held, so the lock order is log →
//! manager).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::placement::Placement;
use parking_lot::{Condvar, Mutex};
use ramstore_backup::BackupClient;
use ramstore_clock::Clock;
use ramstore_log::{ReplicaSink, SegmentRole, SEGMENT_BYTES};
use ramstore_master::LogHandle;
use ramstore_wire::BackupWriteFlags;
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::Notify;
use tracing::Instrument;

/// Replica checks: methods of [`ReplicaManager`].
mod checks;
/// The replicator task's rounds: methods of [`ReplicaManager`].
mod replicator;

/// Replicas per segment in a cluster (R§4.2).
pub const DEFAULT_REPLICAS: usize = 3;
/// Most replicas per segment a master may be configured with.
pub const MAX_REPLICAS: usize = 8;
/// How long a write (or a read of a not yet durable object) waits for its replicas
/// before it answers RETRY; below the client's 2 s RPC deadline, so the client sees
/// the RETRY rather than a timeout.
pub const REPLICATION_WAIT_MS: u64 = 1_000;
/// Most bytes one round of a segment that is complete when opened (a survivor
/// of cleaning, a migration's side-log segment) sends: an 8 MiB BackupWrite on
/// the connection a head's small writes share would hold their
/// acknowledgements up behind it (K§2.3: pulled records are replicated at lower
/// priority than client writes).
pub const SURVIVOR_ROUND_BYTES: usize = 1 << 20;
/// Most rounds of such segments in flight at once, across all of them: a
/// migration seals dozens of side segments at once, and sending them all
/// together queued tens of megabytes on the backups' connections ahead of every
/// client write's round (the client stalled for the whole re-replication). Two
/// keep a backup busy while one round's acknowledgement travels.
pub const MAX_SURVIVOR_ROUNDS_IN_FLIGHT: usize = 2;
/// Pause before a segment that found no backup (or a backup that asked to retry)
/// is tried again.
const RETRY_BACKOFF_MS: u64 = 20;
/// Longest a replication round may wait for its backups before the replicas it
/// waits for count as failed (a whole 8 MiB segment in fsync mode fits easily).
const ROUND_DEADLINE_MS: u64 = 10_000;
/// How often the replicator looks for rounds past their deadline.
const ROUND_CHECK_MS: u64 = 500;
/// Longest a free of a replica may take (fire and forget).
const FREE_DEADLINE_MS: u64 = 10_000;
/// Most stale replicas remembered for freeing on restarted backups.
const MAX_STALE_REPLICAS: usize = 65_536;
/// How soon the replicator sends bytes of a head that no writer is driving.
const SWEEP_MS: u64 = 5;
/// How often `sync_closed` re-checks while it waits (it is also woken).
const SYNC_CLOSED_POLL_MS: u64 = 100;
/// Default pause between two replica checks (one BackupGetReplicas to one backup,
/// the backups in turn): a replica a backup lost without telling is found within
/// about this times the number of backups holding this master's replicas.
pub const DEFAULT_REPLICA_CHECK_INTERVAL_MS: u64 = 1_000;
/// Shortest configurable pause between replica checks: bounds their rate (at most
/// one in flight, so at most one RPC per interval per master).
pub const MIN_REPLICA_CHECK_INTERVAL_MS: u64 = 10;
/// Longest configurable pause between replica checks (one hour).
pub const MAX_REPLICA_CHECK_INTERVAL_MS: u64 = 3_600_000;
/// Longest a replica check may wait for its backup's answer; one that does not
/// answer is the failure detector's business (R§7.2), not the check's.
const REPLICA_CHECK_DEADLINE_MS: u64 = 10_000;

/// A backup the master may place replicas on, from the coordinator's server list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupInfo {
    pub server_id: u64,
    pub address: String,
    pub failure_domain: String,
    pub backup_read_mbps: u32,
}

/// Why a wait for durability ended without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplicationError {
    /// Not all R replicas acknowledged within [`REPLICATION_WAIT_MS`] (too few
    /// backups up, or they are slow). The operation may be retried.
    #[error("fewer than the configured replicas acknowledged in time")]
    Timeout,
    /// Like [`Self::Timeout`], but backups refused to open replicas for lack of
    /// free frames or buffers during the wait (R§7.1): replication stalls until
    /// frames are freed (cleaning, recoveries ending) or backups join. The
    /// operation may be retried.
    #[error(
        "fewer than the configured replicas acknowledged in time: backups refused new \
         replicas for lack of free frames (free space on the backups, or add backups)"
    )]
    BackupsFull,
    /// A backup refused this master's replication because the coordinator
    /// declared it crashed (zombie fence, R§7.11): it must serve nothing more.
    #[error("this master was declared crashed; its backups refuse its replication")]
    Fenced,
}

/// Counters for `GetServerStats` and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicaStats {
    pub replicas_per_segment: usize,
    /// Segments the manager tracks (in the log, or waiting to be freed).
    pub segments: usize,
    pub rounds: u64,
    pub bytes_sent: u64,
    pub rpc_failures: u64,
    /// Replicas re-created after a backup failed or left.
    pub rereplications: u64,
    pub replicas_freed: u64,
    /// Replicas an up backup no longer held (its answer to a write, or a check):
    /// each was re-created (R§8).
    pub replicas_found_lost: u64,
    /// Replica checks answered (BackupGetReplicas to one backup each).
    pub replica_checks: u64,
}

#[derive(Debug, Clone)]
struct Replica {
    /// Unique among this manager's replicas: a check answered after this replica
    /// was dropped and re-placed on the same backup must not drop the new one.
    id: u64,
    backup: u64,
    address: String,
    /// Bytes the backup acknowledged.
    acked: usize,
    opened: bool,
    closed: bool,
    /// Written in atomic mode: a re-replica of a segment that no longer grows,
    /// sent whole with its close and never offered in recovery before (R§8).
    atomic: bool,
    /// Free whatever the backup holds of this segment before opening it.
    clear_first: bool,
}

#[derive(Debug)]
struct Segment {
    role: SegmentRole,
    /// Bytes the log reported (at least; a round may send more).
    appended: usize,
    close_requested: bool,
    in_flight: bool,
    replicas: Vec<Replica>,
    /// Backups that refused or failed this segment, oldest first ([`exclude`]):
    /// not chosen again for it while another backup is eligible.
    excluded: Vec<u64>,
    /// Some RPC for it succeeded.
    started: bool,
    /// Some of its bytes were on all R replicas (so may have been acknowledged).
    acknowledged: bool,
    /// A replica was dropped: a backup chosen from now on may hold a stale copy
    /// (e.g. it restarted and kept it, R§8), which is freed before the new open.
    clear_first: bool,
    /// Bytes on all R replicas.
    durable: usize,
    closed_durable: bool,
    retry_at: Option<Instant>,
    /// The round in flight: when it started and how to cancel it (a backup that
    /// hangs, or leaves the server list, must not hold the segment up).
    round: Option<(Instant, Arc<Notify>)>,
}

impl Segment {
    fn new(role: SegmentRole) -> Self {
        Self {
            role,
            appended: 0,
            close_requested: false,
            in_flight: false,
            replicas: Vec::new(),
            excluded: Vec::new(),
            started: false,
            acknowledged: false,
            clear_first: false,
            durable: 0,
            closed_durable: false,
            retry_at: None,
            round: None,
        }
    }
}

/// What one replica gets in a round.
struct Send {
    /// The replica's `Replica::id`: its answer is applied only if it is still
    /// in the segment's list (a check may drop it meanwhile).
    replica: u64,
    backup: u64,
    address: String,
    from: usize,
    flags: BackupWriteFlags,
    clear_first: bool,
}

struct Round {
    master_id: u64,
    cancel: Arc<Notify>,
    segment_id: u64,
    from: usize,
    /// Send only the bytes before this offset (a survivor or side-log segment's
    /// round is capped at [`SURVIVOR_ROUND_BYTES`]; its close goes with the last).
    until: Option<usize>,
    sends: Vec<Send>,
}

#[derive(Default)]
struct State {
    master_id: u64,
    master_domain: String,
    /// Scattered (R§7.1) or proximity-aware (C§3.2) placement, issue 22.
    placement: Placement,
    segments: BTreeMap<u64, Segment>,
    /// Segments that may have work.
    dirty: BTreeSet<u64>,
    /// Heads not yet closed on all replicas (for the acknowledgement rule).
    open_heads: BTreeSet<u64>,
    /// The newest head whose open is durable.
    newest_open_head: Option<u64>,
    /// The newest head and how far the log reported it: writers' sync point.
    head_position: (u64, usize),
    /// Segments to free once a head with at least this id is open durably.
    pending_frees: Vec<(u64, Vec<u64>)>,
    backups: Vec<BackupInfo>,
    /// Bytes of this master's replicas on each backup (placement's refinement).
    bytes_on: HashMap<u64, u64>,
    roll_head: bool,
    /// The server is stopping: nobody waits for replication any more.
    stopping: bool,
    /// A backup fenced this master off (R§7.11).
    fenced: bool,
    /// When a backup last refused to open a replica because it was full.
    refused_full_at: Option<Instant>,
    /// (address, segment) of replicas on backups that left the list: freed once a
    /// backup restarted on that address is listed and the segment is safe elsewhere.
    stale: Vec<(String, u64)>,
    /// The id the next replica gets (`Replica::id`).
    next_replica_id: u64,
    /// Where the next replica check starts looking in `backups`.
    check_cursor: usize,
    /// A replica check is in flight (at most one).
    checking: bool,
    /// When the next replica check is due.
    next_check_at: Option<Instant>,
    stats: ReplicaStats,
}

/// One replica check: the replicas the manager believed `backup` held when it
/// was planned, as (segment, replica id, bytes acknowledged, closed).
struct Check {
    master_id: u64,
    backup: u64,
    address: String,
    believed: Vec<(u64, u64, usize, bool)>,
}

/// The replica manager of one master. Share it as `Arc`; it is the log's sink.
pub struct ReplicaManager {
    replicas: usize,
    state: Mutex<State>,
    /// Wakes `sync_closed` waiters.
    closed: Condvar,
    /// Wakes the replicator task.
    wake: Notify,
    /// Wakes writers waiting for durability.
    durable_changed: Notify,
    /// Set once by `start`; read by every round without a lock.
    log: std::sync::OnceLock<LogHandle>,
    client: BackupClient,
    rng: Mutex<StdRng>,
    /// The time rounds, retries, checks and durability waits run on.
    clock: Arc<dyn Clock>,
    /// Mirror of `State::fenced`, readable without the state lock.
    fenced: AtomicBool,
    /// Pause between replica checks in ms; 0: no periodic checks.
    check_interval_ms: AtomicU64,
}

impl std::fmt::Debug for ReplicaManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaManager")
            .field("replicas", &self.replicas)
            .finish_non_exhaustive()
    }
}

impl ReplicaManager {
    /// A manager keeping `replicas` copies of each segment (1..=[`MAX_REPLICAS`]),
    /// talking to backups through `client`, placing replicas with a generator
    /// seeded with `seed`, and timing everything on `clock`. Nothing is sent
    /// before [`ReplicaManager::start`].
    pub fn new(
        replicas: usize,
        client: BackupClient,
        seed: u64,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        assert!((1..=MAX_REPLICAS).contains(&replicas));
        Arc::new(Self {
            replicas,
            state: Mutex::new(State::default()),
            closed: Condvar::new(),
            wake: Notify::new(),
            durable_changed: Notify::new(),
            log: std::sync::OnceLock::new(),
            client,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            clock,
            fenced: AtomicBool::new(false),
            check_interval_ms: AtomicU64::new(DEFAULT_REPLICA_CHECK_INTERVAL_MS),
        })
    }

    /// Sets the pause between replica checks (see the module doc), clamped to
    /// [`MIN_REPLICA_CHECK_INTERVAL_MS`]..=[`MAX_REPLICA_CHECK_INTERVAL_MS`]; 0
    /// turns periodic checks off (answers to writes still find lost replicas).
    pub fn set_replica_check_interval_ms(&self, interval_ms: u64) {
        let interval_ms = match interval_ms {
            0 => 0,
            ms => ms.clamp(MIN_REPLICA_CHECK_INTERVAL_MS, MAX_REPLICA_CHECK_INTERVAL_MS),
        };
        self.check_interval_ms.store(interval_ms, Ordering::Relaxed);
        self.state.lock().next_check_at = None;
        self.wake.notify_one();
    }

    /// Chooses how new replicas are placed (scattered by default; issue 22).
    /// Replicas already placed stay where they are.
    pub fn set_placement(&self, placement: Placement) {
        self.state.lock().placement = placement;
    }

    /// Each segment's replica places, in the order they were filled (the
    /// first is the one placed first): what the placement experiment counts.
    pub fn replica_places(&self) -> Vec<(u64, Vec<u64>)> {
        let st = self.state.lock();
        st.segments
            .iter()
            .map(|(id, s)| (*id, s.replicas.iter().map(|r| r.backup).collect()))
            .collect()
    }

    /// Replicas per segment.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// Whether every segment of the log (not one waiting to be freed) has all R
    /// replicas holding all its bytes, closed ones closed on all of them: no
    /// replica lost with a failed or departed backup is still being re-created
    /// (R§8). R replicas tolerate R - 1 backup failures *at a time*; a caller
    /// that injects failures one at a time waits for this between them.
    pub fn is_fully_replicated(&self) -> bool {
        let st = self.state.lock();
        let freeing: BTreeSet<u64> = st
            .pending_frees
            .iter()
            .flat_map(|(_, ids)| ids.iter().copied())
            .collect();
        st.segments
            .iter()
            .filter(|(id, _)| !freeing.contains(id))
            .all(|(_, s)| {
                // A closed segment counts once closed on all R replicas (its
                // reported length may exceed what the rounds measured); an
                // open one once all its reported bytes are on all R.
                s.replicas.len() >= self.replicas
                    && if s.close_requested {
                        s.closed_durable
                    } else {
                        s.durable >= s.appended
                    }
            })
    }

    /// Connects the manager to its log and master identity and starts replicating;
    /// returns the replicator task.
    pub fn start(
        self: &Arc<Self>,
        log: LogHandle,
        master_id: u64,
        master_domain: &str,
    ) -> tokio::task::JoinHandle<()> {
        // A second `start` keeps the first log: a manager serves one store.
        let _ = self.log.set(log);
        {
            let mut st = self.state.lock();
            st.master_id = master_id;
            st.master_domain = master_domain.to_string();
            let all: Vec<u64> = st.segments.keys().copied().collect();
            st.dirty.extend(all);
        }
        let me = self.clone();
        tokio::spawn(async move { me.run().await }.in_current_span())
    }

    /// The coordinator's view of the backups changed: replicas on backups that are
    /// no longer listed as UP are re-created elsewhere (R§8).
    pub fn set_backups(&self, backups: Vec<BackupInfo>) {
        let mut st = self.state.lock();
        let up: BTreeSet<u64> = backups.iter().map(|b| b.server_id).collect();
        st.backups = backups;
        // New backups may fill places now: retry at once, not after the backoff.
        for seg in st.segments.values_mut() {
            seg.retry_at = None;
        }
        let lost: Vec<u64> = st
            .segments
            .values()
            .flat_map(|s| s.replicas.iter().map(|r| r.backup))
            .filter(|b| !up.contains(b))
            .collect::<BTreeSet<u64>>()
            .into_iter()
            .collect();
        for backup in lost {
            tracing::warn!(
                backup,
                "backup left the cluster; re-replicating its replicas"
            );
            lose_backup(&mut st, backup);
        }
        drop(st);
        self.wake.notify_one();
    }

    /// Where a writer's operation must be durable before it is acknowledged: the
    /// newest head and its reported end.
    pub fn sync_point(&self) -> (u64, usize) {
        self.state.lock().head_position
    }

    /// The sync point a writer must wait for, or `None` if the log is already
    /// durable up to it: one lock for the common check on the write path.
    pub fn pending_sync_point(&self) -> Option<(u64, usize)> {
        let st = self.state.lock();
        let point = st.head_position;
        (!durable_at(&st, point)).then_some(point)
    }

    /// Whether everything up to `point` is durable (see the module doc's rule).
    pub fn is_durable(&self, point: (u64, usize)) -> bool {
        durable_at(&self.state.lock(), point)
    }

    /// Whether every segment of `segment_ids` is closed on all its replicas (or
    /// no longer tracked): the check of `sync_closed`, without the wait, for a
    /// caller that polls on its own clock (a migration's side-log commit, K§2.3).
    pub fn are_closed_durable(&self, segment_ids: &[u64]) -> bool {
        let st = self.state.lock();
        segment_ids
            .iter()
            .all(|id| st.segments.get(id).is_none_or(|s| s.closed_durable))
    }

    /// Waits until everything up to `point` is durable on all R replicas, at most
    /// [`REPLICATION_WAIT_MS`].
    ///
    /// The waiting writer sends the head's round itself when none is in flight
    /// (R§4.2: the worker thread replicates): no task hand-off on the write path.
    /// Writers arriving while it is in flight wait, and the next of them sends
    /// everything appended meanwhile (group commit).
    pub async fn wait_durable(&self, point: (u64, usize)) -> Result<(), ReplicationError> {
        // On the write path: the deadline's timer is held inline (no allocation).
        let deadline = self
            .clock
            .deadline_after(Duration::from_millis(REPLICATION_WAIT_MS));
        loop {
            let notified = self.durable_changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_durable(point) {
                return Ok(());
            }
            if self.is_fenced() {
                return Err(ReplicationError::Fenced);
            }
            if let Some(round) = self.plan_inline(point.0) {
                self.run_round(round).await;
                continue;
            }
            if self.clock.timeout_at(deadline, notified).await.is_err() {
                return if self.is_durable(point) {
                    Ok(())
                } else {
                    Err(self.why_not_durable())
                };
            }
        }
    }

    /// Why a wait for durability timed out: full backups if one refused a replica
    /// during the last wait's length, else plain slowness or too few backups.
    fn why_not_durable(&self) -> ReplicationError {
        let wait = Duration::from_millis(REPLICATION_WAIT_MS);
        match self.state.lock().refused_full_at {
            Some(at) if self.clock.elapsed(at) <= wait => ReplicationError::BackupsFull,
            _ => ReplicationError::Timeout,
        }
    }

    /// The server is stopping (its replicator task is gone): waits in the cleaner
    /// end now instead of never.
    pub fn shutdown(&self) {
        self.state.lock().stopping = true;
        self.closed.notify_all();
    }

    /// Whether a backup fenced this master off (R§7.11).
    /// One atomic load: the storage service asks on every request.
    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    /// Counters.
    pub fn stats(&self) -> ReplicaStats {
        let st = self.state.lock();
        let mut s = st.stats;
        s.replicas_per_segment = self.replicas;
        s.segments = st.segments.len();
        s
    }

    fn with_log<R>(&self, f: impl FnOnce(&ramstore_log::Log) -> R) -> Option<R> {
        self.log.get()?.with(f)
    }
}

enum Planned {
    Round(Round),
    Nothing,
    Retry,
}

/// The acknowledgement rule: `point`'s head holds its bytes on all R replicas and
/// every older head is closed on all of its.
fn durable_at(st: &State, (head, end): (u64, usize)) -> bool {
    if st.open_heads.range(..head).next().is_some() {
        return false;
    }
    st.segments.get(&head).is_none_or(|s| s.durable >= end)
}

/// Recomputes a segment's durable bytes and states; returns its id if it just
/// became closed on all replicas.
fn update_durability(st: &mut State, id: u64, replicas: usize) -> Option<u64> {
    let seg = st.segments.get_mut(&id)?;
    seg.durable = if seg.replicas.len() < replicas {
        0
    } else {
        seg.replicas.iter().map(|r| r.acked).min().unwrap_or(0)
    };
    seg.acknowledged |= seg.durable > 0;
    let opened = seg.replicas.len() == replicas && seg.replicas.iter().all(|r| r.opened);
    let all_closed = seg.replicas.len() == replicas && seg.replicas.iter().all(|r| r.closed);
    if seg.role == SegmentRole::Head
        && opened
        && !seg.replicas.iter().any(|r| r.atomic && !r.closed)
    {
        st.newest_open_head = Some(st.newest_open_head.map_or(id, |h| h.max(id)));
        // A newer durable head lets older heads close.
        let older: Vec<u64> = st.open_heads.range(..id).copied().collect();
        st.dirty.extend(older);
    }
    let seg = st.segments.get_mut(&id)?;
    if all_closed && !seg.closed_durable {
        seg.closed_durable = true;
        st.open_heads.remove(&id);
        return Some(id);
    }
    None
}

/// Excludes `backup` for `seg` (placement passes it over), as its newest
/// exclusion: `excluded` is ordered oldest first, once each, so that when every
/// backup left is excluded `place` tries the one excluded longest ago first.
fn exclude(seg: &mut Segment, backup: u64) {
    seg.excluded.retain(|&b| b != backup);
    seg.excluded.push(backup);
}

/// Removes `backup`'s replica of segment `id`; the next plan places a new one. A
/// head that lost a replica is moved (R§8).
///
/// `failed`: the backup failed (excluded for this segment from now on); otherwise
/// it only refused to open the replica for now (full). A head some of whose bytes
/// were acknowledged is moved (closed), since its new replica must be atomic and
/// an atomic replica is sent whole; before that, the place is simply filled again.
fn drop_replica(st: &mut State, id: u64, backup: u64, failed: bool) {
    let Some(seg) = st.segments.get_mut(&id) else {
        return;
    };
    let Some(index) = seg.replicas.iter().position(|r| r.backup == backup) else {
        return;
    };
    seg.replicas.remove(index);
    if failed {
        exclude(seg, backup);
    }
    seg.closed_durable = false;
    seg.clear_first = true;
    let moves_head = seg.acknowledged && seg.role == SegmentRole::Head && !seg.close_requested;
    if let Some(b) = st.bytes_on.get_mut(&backup) {
        *b = b.saturating_sub(SEGMENT_BYTES as u64);
    }
    if moves_head {
        st.roll_head = true;
    }
    st.dirty.insert(id);
}

/// The replicas `backup` should hold that a replica check can verify, as
/// (segment, replica id, bytes acknowledged, closed): opened ones, except atomic
/// ones not yet closed (a backup never offers those, R§8), of segments not
/// waiting to be freed.
fn believed_on(st: &State, backup: u64, pending: &BTreeSet<u64>) -> Vec<(u64, u64, usize, bool)> {
    st.segments
        .iter()
        .filter(|(id, _)| !pending.contains(id))
        .flat_map(|(&id, s)| {
            s.replicas
                .iter()
                .filter(|r| r.backup == backup && r.opened && (r.closed || !r.atomic))
                .map(move |r| (id, r.id, r.acked, r.closed))
        })
        .collect()
}

fn lose_backup(st: &mut State, backup: u64) {
    let ids: Vec<u64> = st
        .segments
        .iter()
        .filter(|(_, s)| s.replicas.iter().any(|r| r.backup == backup))
        .map(|(&id, _)| id)
        .collect();
    let address = st
        .segments
        .values()
        .flat_map(|s| s.replicas.iter())
        .find(|r| r.backup == backup)
        .map(|r| r.address.clone());
    for &id in &ids {
        if let Some((_, cancel)) = st.segments.get(&id).and_then(|s| s.round.as_ref()) {
            cancel.notify_one();
        }
        drop_replica(st, id, backup, true);
    }
    // R§8: a backup restarted on the same address keeps these replicas while this
    // master is UP, until the master frees them once re-replicated (`stale_frees`).
    if let Some(address) = address {
        let room = MAX_STALE_REPLICAS.saturating_sub(st.stale.len());
        st.stale
            .extend(ids.into_iter().take(room).map(|id| (address.clone(), id)));
    }
    st.bytes_on.remove(&backup);
}

/// Stale replicas on restarted backups, or on live backups whose RPC failed, that
/// may be freed now: a backup at the address is listed (again, perhaps under a new
/// id), and the segment is gone from the log or closed on R replicas none of which
/// is on that backup. The backup is then
/// excluded for that segment, so no later replica of it can land there and be hit
/// by this free. Entries whose address nobody listens on stay.
fn stale_frees(st: &mut State) -> Vec<(u64, String, u64)> {
    let mut out = Vec::new();
    let stale = std::mem::take(&mut st.stale);
    for (address, id) in stale {
        let Some(backup) = st
            .backups
            .iter()
            .find(|b| b.address == address)
            .map(|b| b.server_id)
        else {
            st.stale.push((address, id));
            continue;
        };
        match st.segments.get_mut(&id) {
            None => out.push((backup, address, id)),
            Some(seg) if seg.replicas.iter().any(|r| r.backup == backup) => {
                // Re-placed on the restarted backup itself: its stale copy was
                // freed before the new open (`clear_first`).
            }
            Some(seg) if seg.closed_durable => {
                exclude(seg, backup);
                out.push((backup, address, id));
            }
            Some(_) => st.stale.push((address, id)),
        }
    }
    out
}

/// Segments whose replicas may be freed now (their freeing head is open durably):
/// (backup, address, segment) for each replica; the segments are forgotten.
fn take_frees(st: &mut State) -> Vec<(u64, String, u64)> {
    let Some(newest) = st.newest_open_head else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut keep = Vec::new();
    for (after, ids) in std::mem::take(&mut st.pending_frees) {
        if after > newest {
            keep.push((after, ids));
            continue;
        }
        for id in ids {
            if let Some(seg) = st.segments.get(&id) {
                if seg.in_flight {
                    keep.push((after, vec![id]));
                    continue;
                }
            }
            if let Some(seg) = st.segments.remove(&id) {
                for r in seg.replicas {
                    if let Some(b) = st.bytes_on.get_mut(&r.backup) {
                        *b = b.saturating_sub(SEGMENT_BYTES as u64);
                    }
                    out.push((r.backup, r.address, id));
                }
            }
            st.open_heads.remove(&id);
        }
    }
    st.pending_frees = keep;
    out
}

impl ReplicaSink for ReplicaManager {
    fn opened(&self, segment_id: u64, role: SegmentRole) {
        let mut st = self.state.lock();
        st.segments.insert(segment_id, Segment::new(role));
        if role == SegmentRole::Head {
            st.open_heads.insert(segment_id);
            if segment_id >= st.head_position.0 {
                st.head_position = (segment_id, 0);
            }
        }
    }

    fn replicate(&self, segment_id: u64, offset: usize, len: usize) {
        let end = offset + len;
        {
            let mut st = self.state.lock();
            let Some(seg) = st.segments.get_mut(&segment_id) else {
                return;
            };
            seg.appended = seg.appended.max(end);
            let head = seg.role == SegmentRole::Head;
            if head && segment_id == st.head_position.0 {
                st.head_position.1 = st.head_position.1.max(end);
            }
            st.dirty.insert(segment_id);
            // A head's data is sent by the writers waiting for it; its opening
            // bytes (digest) and survivors are the replicator's.
            if head && offset > 0 {
                return;
            }
        }
        self.wake.notify_one();
    }

    fn close(&self, segment_id: u64) {
        {
            let mut st = self.state.lock();
            if let Some(seg) = st.segments.get_mut(&segment_id) {
                seg.close_requested = true;
            }
            st.dirty.insert(segment_id);
        }
        self.wake.notify_one();
    }

    fn sync_closed(&self, segment_ids: &[u64]) {
        let mut st = self.state.lock();
        loop {
            let done = segment_ids
                .iter()
                .all(|id| st.segments.get(id).is_none_or(|s| s.closed_durable));
            if done || st.stopping {
                return;
            }
            self.clock.wait_for(
                &self.closed,
                &mut st,
                Duration::from_millis(SYNC_CLOSED_POLL_MS),
            );
        }
    }

    fn cleaned(&self, _survivors: &[u64], freed: &[u64]) {
        if freed.is_empty() {
            return;
        }
        {
            let mut st = self.state.lock();
            // Freed once a head opened after the digest that dropped them is
            // durable (L§6.4): the current newest head is such a head.
            let after = st.head_position.0;
            st.pending_frees.push((after, freed.to_vec()));
        }
        self.wake.notify_one();
    }
}
