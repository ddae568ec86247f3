//! This storage server's side of live tablet migration (Rocksteady, K§2.3;
//! design notes "Migration (Rocksteady)"), as source and as target.
//!
//! * As source (`migration_source.rs`): `PrepareMigration` fences the tablet
//!   and answers the safe version; `Pull` and `PriorityPull` read the fenced
//!   tablet. All three run on the slow path (the blocking pool), never on the
//!   fast path, so the source's own clients are not delayed by them.
//! * As target: `TakeMigratingTablet` owns the tablet at once and starts
//!   [`run_incoming`]: [`PULL_PARTITIONS`] background pullers and one priority
//!   puller, then the finish (durable, tablet normal, `MigrationDone`).
//! * The gate ([`StorageService::migration_gate`]): client operations on a
//!   migrating-in tablet ask the migration whether their key has arrived; a key
//!   that has not is queued for the priority puller and the client is answered
//!   RETRY ([`MIGRATION_RETRY_MS`]), or, on the native front end, parked until
//!   it arrives (`migration_park.rs`). When no migration comes in, the gate is
//!   one relaxed load; on a tablet that is not migrating, one more lock-free
//!   tablet lookup.
//!
//! * Lineage (K§2.3.4): if the source crashes, the coordinator recovers its
//!   copy of the range onto another master and resends `TakeMigratingTablet`
//!   naming it; the pullers go on from their cursors against the new source
//!   ([`Migrations`]'s moved sources). Pulled records are applied only to keys
//!   not settled, so nothing the target wrote or deleted is undone.
//!
//! Thread-safety: [`Migrations`] is `Send + Sync`: a counter, short-held list
//! locks (only for migrating tablets) and set-once links.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use ramstore_master::migration::{ClientOp, Gate, IncomingMigration, PulledObject};
use ramstore_master::{key_hash, TxId};
use ramstore_rpc::Transport;
use ramstore_wire::{
    decode_response, encode_request, encode_response, MultiReadRequestEncoder, Opcode, Request,
    Response, Status, WireError,
};
use tokio::sync::Notify;
use tracing::Instrument;

use super::migration_records::incoming_records;
use super::request_path::Durability;
use super::wire_reply::answer_message;
use super::StorageService;

pub use ramstore_master::migration::Partition;

/// The delay a client is told to wait for a key whose record is being pulled.
pub const MIGRATION_RETRY_MS: u32 = 1;
/// Bytes of one background Pull batch (K§2.3: pulls are sized by bytes).
pub const MIGRATION_PULL_BYTES: u32 = 1 << 20;
/// PriorityPulls of one migration out at once.
pub const PRIORITY_PULLS_IN_FLIGHT: usize = 4;
/// The most keys one PriorityPull asks for.
pub const MAX_PRIORITY_PULL_KEYS: usize = 256;
/// Deadline of one Pull, PriorityPull or MigrationDone.
const MIGRATION_CALL_DEADLINE_MS: u64 = 5_000;
/// Wait after a failed pull before trying again.
const MIGRATION_BACKOFF_MS: u64 = 50;
/// How often a side-log commit looks whether its segments are on their replicas.
const SIDE_LOG_POLL_MS: u64 = 2;
/// How often the priority puller looks for pending keys without being woken.
const PRIORITY_POLL_MS: u64 = 20;
/// Test knob (never set in production): when this environment variable holds a
/// number of milliseconds, background Pulls ask for [`SLOW_PULL_BYTES`] at a
/// time and each puller pauses that long after every batch, so a crash test can
/// reliably kill a server in the middle of a migration.
pub const SLOW_PULL_ENV: &str = "RAMSTORE_TEST_MIGRATION_PULL_PAUSE_MS";
/// Bytes of one background Pull when [`SLOW_PULL_ENV`] is set.
const SLOW_PULL_BYTES: u32 = 16 << 10;

/// The pause after each background Pull batch ([`SLOW_PULL_ENV`]), read once.
fn slow_pull_pause() -> Option<Duration> {
    static PAUSE: OnceLock<Option<Duration>> = OnceLock::new();
    *PAUSE.get_or_init(|| {
        std::env::var(SLOW_PULL_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_millis)
    })
}

/// One migration coming in, with its wake-ups.
struct Incoming {
    migration: Arc<IncomingMigration>,
    signals: Arc<Signals>,
}

/// The wake-ups of one incoming migration.
#[derive(Default)]
pub(crate) struct Signals {
    /// Wakes the priority puller: a client queued a key.
    queued: Notify,
    /// Wakes the client requests parked for keys of this migration
    /// (`migration_park.rs`): records arrived (a PriorityPull's answer or a
    /// background batch was applied), or the migration ended.
    pub(crate) arrived: Notify,
}

/// The migrations of this server. Thread-safe.
#[derive(Default)]
pub(crate) struct Migrations {
    /// How many migrations come in (the gate's fast check).
    active: AtomicUsize,
    incoming: Mutex<Vec<Incoming>>,
    /// How to reach sources and the coordinator (set once enlisted).
    links: OnceLock<(Arc<dyn Transport>, String)>,
    /// Sources that replaced a crashed one, by migration id (lineage recovery,
    /// K§2.3.4): the coordinator recovered the crashed source's copy of the
    /// range onto another master and named it in a resent TakeMigratingTablet.
    moved_sources: Mutex<HashMap<u64, String>>,
    /// Connections of their own for bulk pulls and for PriorityPulls (set by a
    /// real server; a simulation uses `links` for all): a PriorityPull's answer,
    /// which a client waits for, must not queue on a socket behind megabytes of
    /// background Pull answers, and neither must pings or replication.
    lanes: OnceLock<(Arc<dyn Transport>, Arc<dyn Transport>)>,
    /// Client requests parked until their key arrives (`migration_park.rs`).
    pub(crate) parked: AtomicUsize,
}

/// What has arrived of one incoming migration (the server's stats).
pub(crate) struct IncomingProgress {
    pub id: u64,
    pub bytes: u64,
    pub objects: u64,
    /// Every record of the range is here and no client waits for one: what is
    /// left is the side logs' replication and commit (K§2.3.4).
    pub arrived: bool,
}

/// Which connection a migration request goes on ([`Migrations::lanes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    /// MigrationDone and the like: the server's shared transport.
    Control,
    /// Background Pulls.
    Bulk,
    /// PriorityPulls.
    Priority,
}

/// The gate's decision for one client operation.
pub(crate) enum Gated {
    /// Not a migrating-in tablet: the plain store call.
    Plain,
    /// Migrating in, and the key may be used: the `*_arrived` store call (and
    /// for a blind write, settle the key afterwards).
    Arrived(Arc<IncomingMigration>),
    /// Answer RETRY: the key's record is being pulled.
    Wait,
}

impl StorageService {
    /// Where migrations reach sources and the coordinator (`coordinator`: its
    /// addresses separated by commas). Set once, when the server has enlisted.
    pub(crate) fn set_migration_links(&self, transport: Arc<dyn Transport>, coordinator: String) {
        let _ = self.migrations.links.set((transport, coordinator));
    }

    /// Separate transports for bulk Pulls and PriorityPulls ([`Migrations`]'s
    /// `lanes`); without this call both use the one of
    /// [`Self::set_migration_links`].
    pub(crate) fn set_migration_lanes(
        &self,
        bulk: Arc<dyn Transport>,
        priority: Arc<dyn Transport>,
    ) {
        let _ = self.migrations.lanes.set((bulk, priority));
    }

    /// The gate of a client operation `op` on `key` of `table_id` (module doc).
    pub(crate) fn migration_gate(&self, table_id: u64, key: &[u8], op: ClientOp) -> Gated {
        if self.migrations.active.load(Ordering::Relaxed) == 0 {
            return Gated::Plain;
        }
        let hash = key_hash(key);
        if !self.store.is_migrating_in(table_id, hash) {
            return Gated::Plain;
        }
        let incoming = self.migrations.incoming.lock();
        let Some(entry) = incoming
            .iter()
            .find(|e| e.migration.contains(table_id, hash))
        else {
            // The tablet is migrating in but its migration is not registered
            // yet (it is being taken): wait.
            return Gated::Wait;
        };
        match entry.migration.gate(key, op) {
            Gate::Go => Gated::Arrived(entry.migration.clone()),
            Gate::Wait(new) => {
                if new {
                    entry.signals.queued.notify_one();
                }
                Gated::Wait
            }
        }
    }

    /// TakeMigratingTablet (as target): own the tablet now and start pulling.
    pub(super) fn take_migrating_tablet(
        self: &Arc<Self>,
        id: u64,
        migration: IncomingMigration,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let op = Opcode::TakeMigratingTablet;
        let (table_id, start, end) = (migration.table_id, migration.start_hash, migration.end_hash);
        let added = self
            .store
            .add_migrating_tablet(table_id, start, end, migration.safe_version);
        match added {
            Err(e) => answer_message(id, op, Status::InvalidRequest, &e.to_string(), out),
            Ok(still_migrating) => {
                let migration = Arc::new(migration);
                if !still_migrating {
                    // Done before; the coordinator may not have heard it.
                    tokio::spawn(self.clone().report_done(migration).in_current_span());
                } else if let Some(signals) = self.register(&migration) {
                    self.migrations.moved_sources.lock().remove(&migration.id);
                    tracing::info!(
                        migration_id = migration.id,
                        table_id,
                        start_hash = start,
                        end_hash = end,
                        source = %migration.source_address,
                        priority_pulls = migration.priority_pulls,
                        "migration: took tablet; pulling"
                    );
                    tokio::spawn(run_incoming(self.clone(), migration, signals).in_current_span());
                } else {
                    self.note_source(&migration);
                }
                encode_response(id, op, &Response::TakeMigratingTablet, out)
            }
        }
    }

    /// A resent TakeMigratingTablet of a registered migration: if it names
    /// another source (the old one crashed and its copy was recovered there,
    /// K§2.3.4), pulls go there from now on.
    fn note_source(&self, m: &IncomingMigration) {
        let registered = self
            .migrations
            .incoming
            .lock()
            .iter()
            .find(|e| e.migration.id == m.id)
            .map(|e| e.migration.source_address.clone());
        let Some(first) = registered else { return };
        let mut moved = self.migrations.moved_sources.lock();
        if m.source_address == first {
            moved.remove(&m.id);
        } else if moved.get(&m.id) != Some(&m.source_address) {
            tracing::info!(
                migration_id = m.id,
                source = %m.source_address,
                "migration: the source moved (lineage recovery); pulling from it"
            );
            moved.insert(m.id, m.source_address.clone());
        }
    }

    /// Where migration `m` pulls from now: its source, or the master that
    /// replaced it ([`Self::note_source`]).
    fn source_of(&self, m: &IncomingMigration) -> String {
        self.migrations
            .moved_sources
            .lock()
            .get(&m.id)
            .cloned()
            .unwrap_or_else(|| m.source_address.clone())
    }

    /// Registers an incoming migration; `None` if it is registered already.
    fn register(&self, m: &Arc<IncomingMigration>) -> Option<Arc<Signals>> {
        let mut incoming = self.migrations.incoming.lock();
        if incoming.iter().any(|e| e.migration.id == m.id) {
            return None;
        }
        let signals = Arc::new(Signals::default());
        incoming.push(Incoming {
            migration: m.clone(),
            signals: signals.clone(),
        });
        self.migrations.active.fetch_add(1, Ordering::SeqCst);
        Some(signals)
    }

    /// The wake-ups of the incoming migration that holds key hash `hash` of
    /// `table_id`, if it asks for waiting keys by PriorityPull (only then does
    /// a waiting key arrive soon, so only then may a request park for it).
    pub(crate) fn arrival_signals(&self, table_id: u64, hash: u64) -> Option<Arc<Signals>> {
        self.migrations
            .incoming
            .lock()
            .iter()
            .find(|e| e.migration.contains(table_id, hash) && e.migration.priority_pulls)
            .map(|e| e.signals.clone())
    }

    /// `(id, bytes, objects)` pulled so far by each migration coming in (the
    /// `migration.ID.*` statistics the coordinator shows as progress).
    pub(crate) fn incoming_progress(&self) -> Vec<IncomingProgress> {
        // Copied out first: `is_complete` takes a migration's arrivals mutex,
        // which the background apply (at `nice` 19) holds to move a cursor,
        // and every client operation's gate takes the list's lock.
        let incoming: Vec<Arc<IncomingMigration>> = self
            .migrations
            .incoming
            .lock()
            .iter()
            .map(|e| e.migration.clone())
            .collect();
        incoming
            .iter()
            .map(|m| {
                let (bytes, objects) = m.progress();
                IncomingProgress {
                    id: m.id,
                    bytes,
                    objects,
                    arrived: m.is_complete(),
                }
            })
            .collect()
    }

    fn unregister(&self, id: u64) {
        let mut incoming = self.migrations.incoming.lock();
        let before = incoming.len();
        // Requests parked for its keys go on: the tablet is normal now, or gone.
        for e in incoming.iter().filter(|e| e.migration.id == id) {
            e.signals.arrived.notify_waiters();
        }
        incoming.retain(|e| e.migration.id != id);
        self.migrations.moved_sources.lock().remove(&id);
        if incoming.len() < before {
            self.migrations.active.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// One request to `address` on `lane`; the response frame, or `None` on a
    /// transport failure.
    async fn migration_call(
        &self,
        lane: Lane,
        address: &str,
        frame: Vec<u8>,
    ) -> Option<bytes::Bytes> {
        let (control, _) = self.migrations.links.get()?;
        let transport = match (lane, self.migrations.lanes.get()) {
            (Lane::Bulk, Some((bulk, _))) => bulk,
            (Lane::Priority, Some((_, priority))) => priority,
            _ => control,
        };
        let deadline = Duration::from_millis(MIGRATION_CALL_DEADLINE_MS);
        transport.call(address, frame, deadline).await.ok()
    }

    async fn back_off(&self) {
        self.clock
            .sleep(Duration::from_millis(MIGRATION_BACKOFF_MS))
            .await;
    }

    /// Tells the coordinator the migration is done, until it acknowledges (or
    /// the server stops being a member).
    async fn report_done(self: Arc<Self>, m: Arc<IncomingMigration>) {
        let (bytes, objects) = m.progress();
        let req = Request::MigrationDone {
            migration_id: m.id,
            bytes,
            objects,
        };
        let mut frame = Vec::new();
        if encode_request(0, &req, &mut frame).is_err() {
            return;
        }
        let coordinators: Vec<String> = match self.migrations.links.get() {
            Some((_, c)) => c.split(',').map(|s| s.trim().to_owned()).collect(),
            None => return,
        };
        for attempt in 0usize.. {
            if self.is_zombie() {
                return;
            }
            let address = &coordinators[attempt % coordinators.len().max(1)];
            if let Some(answer) = self
                .migration_call(Lane::Control, address, frame.clone())
                .await
            {
                if matches!(decode_response(&answer), Ok((h, _)) if h.status == Status::Ok) {
                    // Recorded done: no roll-back can need this range's
                    // tombstones any more (K§2.3.4).
                    self.store
                        .release_migration_hold(m.table_id, m.start_hash, m.end_hash);
                    tracing::info!(migration_id = m.id, bytes, objects, "migration done");
                    return;
                }
            }
            self.back_off().await;
        }
    }
}

/// The target's work for one incoming migration: pull every partition (in
/// parallel) while answering priority pulls, then finish.
async fn run_incoming(
    service: Arc<StorageService>,
    m: Arc<IncomingMigration>,
    signals: Arc<Signals>,
) {
    let mut pullers = tokio::task::JoinSet::new();
    for (index, p) in m.partitions().into_iter().enumerate() {
        if p.next.is_some() {
            let (service, m, signals) = (service.clone(), m.clone(), signals.clone());
            pullers.spawn(pull_partition(service, m, signals, index, p).in_current_span());
        }
    }
    // Without PriorityPulls (a benchmark baseline) the gate queues no key, so
    // there is nothing for a priority puller to do.
    let priority = m.priority_pulls.then(|| {
        tokio::spawn(priority_puller(service.clone(), m.clone(), signals.clone()).in_current_span())
    });
    while let Some(done) = pullers.join_next().await {
        if !matches!(done, Ok(true)) {
            // The tablet went away (dropped): stop. Its side segments still join
            // the log, so the cleaner reclaims them (their objects died with the
            // tablet).
            if let Some(p) = &priority {
                p.abort();
            }
            pullers.abort_all();
            commit_side_logs(&service, &m).await;
            service.unregister(m.id);
            return;
        }
    }
    // Every partition has arrived; clients may still wait for keys asked of the
    // source before that.
    while !m.is_complete() {
        signals.queued.notify_one();
        service
            .clock
            .sleep(Duration::from_millis(PRIORITY_POLL_MS))
            .await;
    }
    if let Some(p) = &priority {
        p.abort();
    }
    // The pulled records must be on R backups, and in the log, before the source
    // drops its copy: the side logs' segments are replicated whole, then joined
    // by a new head's digest (K§2.3; design notes "Where pulled records go").
    if !commit_side_logs(&service, &m).await {
        return;
    }
    while let Some(wait) = service.durability_wait(Durability::LogEnd) {
        if wait.done().await.is_ok() {
            break;
        }
        if service.is_zombie() {
            return;
        }
        service.back_off().await;
    }
    if let Err(e) = service
        .store
        .finish_migrating_tablet(m.table_id, m.start_hash, m.end_hash)
    {
        tracing::warn!(migration_id = m.id, error = %e, "migration: tablet gone before finishing");
        service.unregister(m.id);
        return;
    }
    service.unregister(m.id);
    service.report_done(m).await;
}

/// Commits the migration's side logs: seals them, waits (polling, so a
/// simulation's single thread keeps running the replicator) until their
/// segments are closed on all replicas, then joins them to the log with a new
/// digest. `false` if the server stopped being a member meanwhile.
async fn commit_side_logs(service: &Arc<StorageService>, m: &IncomingMigration) -> bool {
    let ids = m.seal_side_logs(&service.store);
    if let Some(manager) = &service.replicas {
        while !manager.are_closed_durable(&ids) {
            if service.is_zombie() || manager.is_fenced() {
                return false;
            }
            service
                .clock
                .sleep(Duration::from_millis(SIDE_LOG_POLL_MS))
                .await;
        }
    }
    service.store.log().join_side_segments(&ids);
    tracing::info!(
        migration_id = m.id,
        segments = ids.len(),
        "migration: side logs committed"
    );
    true
}

/// Pulls partition `index` to its end; `false` if the tablet went away.
///
/// The next batch is asked for while the current one is applied (the source
/// scans and the network carries it meanwhile), and applying runs on the
/// background pool at low priority (K§2.3: pulled records are replayed at lower
/// priority than client requests), never on the threads serving clients.
async fn pull_partition(
    service: Arc<StorageService>,
    m: Arc<IncomingMigration>,
    signals: Arc<Signals>,
    index: usize,
    p: Partition,
) -> bool {
    let mut cursor = p.next.unwrap_or(p.lo);
    let mut prefetched: Option<tokio::task::JoinHandle<Option<bytes::Bytes>>> = None;
    loop {
        let answer = match prefetched.take() {
            Some(fetch) => fetch.await.ok().flatten(),
            None => fetch_pull(&service, &m, cursor, p.hi).await,
        };
        let Some(bytes) = answer else {
            service.back_off().await;
            continue;
        };
        let next = match decode_response(&bytes) {
            Ok((
                _,
                Response::Pull {
                    has_next,
                    next_cursor,
                    ..
                },
            )) => has_next.then_some(next_cursor),
            _ => {
                service.back_off().await;
                continue;
            }
        };
        let pause = slow_pull_pause();
        if let (Some(n), None) = (next, pause) {
            prefetched = Some(tokio::spawn({
                let (service, m) = (service.clone(), m.clone());
                async move { fetch_pull(&service, &m, n, p.hi).await }.in_current_span()
            }));
        }
        let applied = {
            let (service, m) = (service.clone(), m.clone());
            service
                .blocking
                .run_background(move || apply_pulled(&service, &m, index, &bytes, next))
                .await
        };
        let failed = match &applied {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = failed {
            // Ask for the same batch again (or stop): drop the one asked for
            // after it.
            if let Some(fetch) = prefetched.take() {
                fetch.abort();
            }
            if matches!(
                applied,
                Ok(Err(ApplyFailed::Write(
                    ramstore_master::WriteError::UnknownTablet
                )))
            ) {
                return false;
            }
            tracing::warn!(migration_id = m.id, error = %why, "migration: applying a pull failed; retrying");
            service.back_off().await;
            continue;
        }
        // The cursor moved past these keys: requests parked for them go on.
        signals.arrived.notify_waiters();
        match next {
            Some(n) => cursor = n,
            None => return true,
        }
        if let Some(pause) = pause {
            service.clock.sleep(pause).await;
        }
    }
}

/// One background Pull of the partition from `cursor` to `end_hash`, from the
/// migration's current source; the answer frame, or `None` on a failure.
async fn fetch_pull(
    service: &StorageService,
    m: &IncomingMigration,
    cursor: u64,
    end_hash: u64,
) -> Option<bytes::Bytes> {
    let req = Request::Pull {
        table_id: m.table_id,
        cursor,
        end_hash,
        max_bytes: if slow_pull_pause().is_some() {
            SLOW_PULL_BYTES
        } else {
            MIGRATION_PULL_BYTES
        },
    };
    let mut frame = Vec::new();
    encode_request(0, &req, &mut frame).ok()?;
    let source = service.source_of(m);
    service.migration_call(Lane::Bulk, &source, frame).await
}

/// Why one Pull answer was not applied.
#[derive(Debug, thiserror::Error)]
enum ApplyFailed {
    #[error(transparent)]
    Write(#[from] ramstore_master::WriteError),
    /// Cannot happen (the caller decoded the same frame first); retried.
    #[error("the Pull answer does not decode")]
    Undecodable,
}

/// Applies the records of one Pull answer `bytes` to partition `index` and
/// advances its cursor to `next`.
fn apply_pulled(
    service: &StorageService,
    m: &IncomingMigration,
    index: usize,
    bytes: &[u8],
    next: Option<u64>,
) -> Result<(), ApplyFailed> {
    let Ok((
        _,
        Response::Pull {
            objects,
            records,
            held,
            ..
        },
    )) = decode_response(bytes)
    else {
        return Err(ApplyFailed::Undecodable);
    };
    // The source's held commits on objects of the range are held here too
    // before the tablet serves votes (issue 21; design notes "Held
    // outcomes"): a recovery manager asks the objects' owner, now this master.
    for h in held.iter() {
        let tx = TxId {
            lease_id: h.lease_id,
            tx_seq: h.tx_seq,
        };
        let participants = h
            .participants
            .iter()
            .map(|p| (p.table_id, p.key_hash))
            .collect();
        service.tx.adopt_held(
            &service.store,
            tx,
            participants,
            m.table_id,
            (m.start_hash, m.end_hash),
        )?;
    }
    let pulled = objects.iter().map(|o| PulledObject {
        key: o.key,
        value: o.value,
        version: o.version,
    });
    let records = incoming_records(&records);
    Ok(m.apply_pull(&service.store, index, pulled, &records, next)?)
}

/// Sends pending keys to the source in PriorityPulls (batched and
/// de-duplicated by the arrivals), up to [`PRIORITY_PULLS_IN_FLIGHT`] at once
/// so a key asked for while one is out does not wait for its answer; applies
/// the answers; runs until aborted.
async fn priority_puller(
    service: Arc<StorageService>,
    m: Arc<IncomingMigration>,
    signals: Arc<Signals>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(PRIORITY_PULLS_IN_FLIGHT));
    let mut in_flight = tokio::task::JoinSet::new();
    loop {
        // Reap finished pulls so the set does not grow.
        while in_flight.try_join_next().is_some() {}
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let keys = m.take_pending(MAX_PRIORITY_PULL_KEYS);
        if keys.is_empty() {
            drop(slot);
            let poll = service.clock.sleep(Duration::from_millis(PRIORITY_POLL_MS));
            tokio::select! {
                _ = signals.queued.notified() => {}
                _ = poll => {}
            }
            continue;
        }
        let (service, m, signals) = (service.clone(), m.clone(), signals.clone());
        in_flight.spawn(
            async move {
                let answered = priority_pull(&service, &m, &keys).await;
                // Its keys are settled (or queued again): requests parked for
                // them look again.
                signals.arrived.notify_waiters();
                if !answered {
                    service.back_off().await;
                }
                drop(slot);
            }
            .in_current_span(),
        );
    }
}

/// One PriorityPull of `keys`, applied; `false` if it failed (the keys are
/// queued again).
async fn priority_pull(service: &StorageService, m: &IncomingMigration, keys: &[Vec<u8>]) -> bool {
    let mut frame = Vec::new();
    let mut enc = MultiReadRequestEncoder::priority_pull(0, &mut frame);
    let encoded = keys.iter().try_for_each(|k| enc.push(m.table_id, k));
    if encoded.and_then(|()| enc.finish()).is_err() {
        m.priority_failed(keys);
        return false;
    }
    let source = service.source_of(m);
    let answer = service.migration_call(Lane::Priority, &source, frame).await;
    match answer.as_deref().map(decode_response) {
        Some(Ok((_, Response::PriorityPull { objects, records }))) => {
            let pulled = objects.iter().map(|o| PulledObject {
                key: o.key,
                value: o.value,
                version: o.version,
            });
            let records = incoming_records(&records);
            // A failed apply queues the keys again itself.
            m.apply_priority(&service.store, keys, pulled, &records)
                .is_ok()
        }
        _ => {
            m.priority_failed(keys);
            false
        }
    }
}
