//! Tablet migration (Rocksteady, K§2.3; design notes "Migration (Rocksteady)"):
//! the persisted record of each migration, the core's operations on it, and
//! [`Migrator`], which drives a migration through its ownership steps.
//!
//! Order of one migration (each step persisted before it is acted on, R§9):
//! 1. [`CoordinatorCore::begin_migration`] checks the request and records the
//!    migration as `Preparing` (the tablet still belongs to the source);
//! 2. the source fences the tablet (`PrepareMigration`) and answers its safe
//!    version;
//! 3. [`CoordinatorCore::migration_ownership_moved`] makes the target the owner
//!    and records `Pulling` (with the safe version) in one document write;
//! 4. the target takes the tablet (`TakeMigratingTablet`, an [`Action`], retried
//!    until it answers) and pulls; the client's request returns here;
//! 5. the target's `MigrationDone` → [`CoordinatorCore::migration_done`] deletes
//!    the record and has the source drop the range (`DropTabletOwnership`).
//!
//! Stop-and-copy (a benchmark baseline, [`MigrationMode::StopAndCopy`]) runs
//! the same steps in another order: after step 2 the record becomes `Copying`
//! with the owner unchanged ([`CoordinatorCore::migration_copying`]), the
//! target copies while clients of the range retry against the fenced source,
//! and ownership moves in the write that step 5 makes; the client's request
//! returns only then.
//!
//! A restarted coordinator resends step 4 for every `Pulling` record
//! ([`CoordinatorCore::reissue_actions`]) and re-drives `Preparing` records from step 2
//! ([`Migrator::resume`]).
//!
//! Thread-safety: [`Migrator`] is `Send + Sync`; it holds the core's lock for one
//! core call at a time, never across a request to a master.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ramstore_wire::{
    decode_response, encode_request, ErrorBody, MigrationMode, Request, Response, Status,
};
use tokio::sync::oneshot;

use crate::cluster::Cluster;
use crate::coordinator::{address_of, take_migrating_action, Action, CoordinatorCore};
use crate::error::CoordinatorError;
use crate::notifier::{Notifier, NOTIFY_DEADLINE_MS};
use crate::server_list::ServerId;

pub use crate::migrations::{MigrationRecord, MigrationState, Migrations};

/// How long the coordinator waits between attempts to reach a source that did
/// not answer PrepareMigration.
const PREPARE_RETRY_MS: u64 = 100;
/// How many finished migrations `ListMigrations` remembers (not persisted).
const DONE_KEPT: usize = 64;

impl CoordinatorCore {
    /// Checks a migration request and records it as `Preparing` (step 1). Refused,
    /// changing nothing: an unknown table; a range that is not exactly one
    /// tablet; a target that is unknown, not an UP master, or the owner; a range
    /// with a migration in progress.
    pub fn begin_migration(
        &mut self,
        name: &str,
        (start_hash, end_hash): (u64, u64),
        target: ServerId,
        mode: MigrationMode,
    ) -> Result<MigrationRecord, CoordinatorError> {
        let state = self.state();
        let table = state
            .tables()
            .get(name)
            .ok_or_else(|| CoordinatorError::TableDoesntExist(name.to_owned()))?;
        let tablet = table
            .tablets
            .iter()
            .find(|t| t.start_hash == start_hash && t.end_hash == end_hash)
            .copied()
            .ok_or_else(|| CoordinatorError::NotOneTablet {
                table: name.to_owned(),
                start_hash,
                end_hash,
            })?;
        let bad = |reason| CoordinatorError::BadMigrationTarget { target, reason };
        let entry = state
            .servers()
            .get(target)
            .ok_or_else(|| bad("no server has that id"))?;
        if !entry.is_up() {
            return Err(bad("the server is not up"));
        }
        if !entry.is_master() {
            return Err(bad("the server runs no master"));
        }
        if tablet.server_id == target {
            return Err(bad("it already owns the tablet"));
        }
        if let Some(m) = state
            .migrations()
            .iter()
            .find(|m| m.overlaps(tablet.table_id, start_hash, end_hash))
        {
            return Err(CoordinatorError::MigrationInProgress(m.id));
        }
        let mut next = state.clone();
        let record = next.migrations_mut().add(MigrationRecord {
            id: 0,
            table_id: tablet.table_id,
            start_hash,
            end_hash,
            source: tablet.server_id,
            target,
            state: MigrationState::Preparing,
            safe_version: 0,
            mode,
            cancelled: false,
            returns: 0,
        });
        self.commit(next)?;
        Ok(record)
    }

    /// The source fenced the tablet and answered `safe_version` (step 3): the
    /// target becomes the owner and the record `Pulling`, in one write. Returns
    /// the action that tells the target. Idempotent.
    pub fn migration_ownership_moved(
        &mut self,
        id: u64,
        safe_version: u64,
    ) -> Result<Vec<Action>, CoordinatorError> {
        let Some(m) = self.state().migrations().get(id).copied() else {
            return Ok(Vec::new());
        };
        let mut next = self.state().clone();
        let Some(table) = next.tables_mut().by_id_mut(m.table_id) else {
            return Ok(Vec::new());
        };
        for t in table
            .tablets
            .iter_mut()
            .filter(|t| t.start_hash == m.start_hash && t.end_hash == m.end_hash)
        {
            t.server_id = m.target;
        }
        let mut moved = m;
        if moved.state == MigrationState::Preparing {
            moved.state = MigrationState::Pulling;
            moved.safe_version = safe_version;
        }
        next.migrations_mut().replace(moved);
        let action = take_migrating_action(&next, &moved);
        self.commit(next)?;
        Ok(vec![action])
    }

    /// Stop-and-copy: the source fenced the tablet and answered `safe_version`;
    /// the record becomes `Copying` and the source stays the owner. Returns the
    /// action that has the target copy. Idempotent.
    pub fn migration_copying(
        &mut self,
        id: u64,
        safe_version: u64,
    ) -> Result<Vec<Action>, CoordinatorError> {
        let Some(mut m) = self.state().migrations().get(id).copied() else {
            return Ok(Vec::new());
        };
        if m.state == MigrationState::Preparing {
            m.state = MigrationState::Copying;
            m.safe_version = safe_version;
        }
        let mut next = self.state().clone();
        next.migrations_mut().replace(m);
        let action = take_migrating_action(&next, &m);
        self.commit(next)?;
        Ok(vec![action])
    }

    /// Forgets a migration that never moved ownership (its source refused or is
    /// gone). Changes nothing for a migration that has moved ownership.
    pub fn abort_migration(&mut self, id: u64) -> Result<(), CoordinatorError> {
        let mut next = self.state().clone();
        next.migrations_mut()
            .remove_if(id, |m| m.state == MigrationState::Preparing);
        self.commit(next)
    }

    /// The target has every record (step 5): the record goes, and the source is
    /// told to drop the range. Idempotent: an unknown id does nothing.
    pub fn migration_done(&mut self, id: u64) -> Result<Vec<Action>, CoordinatorError> {
        let Some(m) = self.state().migrations().get(id).copied() else {
            return Ok(Vec::new());
        };
        if m.state == MigrationState::Preparing {
            return Ok(Vec::new());
        }
        // A target declared crashed is rolled back by lineage recovery
        // (`migration_recovery`), which relies on the source keeping its copy:
        // a late MigrationDone from it must not have the source drop it.
        if !self
            .state()
            .servers()
            .get(m.target)
            .is_some_and(|e| e.is_up())
        {
            return Ok(Vec::new());
        }
        if m.cancelled {
            return self.cancelled_migration_done(&m);
        }
        let mut next = self.state().clone();
        next.migrations_mut().remove_if(id, |_| true);
        if m.state == MigrationState::Copying {
            // Stop-and-copy: ownership moves only now, in the same write.
            if let Some(table) = next.tables_mut().by_id_mut(m.table_id) {
                for t in table
                    .tablets
                    .iter_mut()
                    .filter(|t| t.start_hash == m.start_hash && t.end_hash == m.end_hash)
                {
                    t.server_id = m.target;
                }
            }
        }
        let action = Action::DropTablet {
            server_id: m.source,
            address: address_of(&next, m.source),
            table_id: m.table_id,
            start_hash: m.start_hash,
            end_hash: m.end_hash,
        };
        self.commit(next)?;
        Ok(vec![action])
    }

    /// Every migration in progress, by id.
    pub fn migrations(&self) -> Vec<MigrationRecord> {
        self.state().migrations().iter().copied().collect()
    }
}

/// A finished migration, as `MigrationDone` reported it (kept in memory only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DoneMigration {
    pub record: MigrationRecord,
    pub bytes: u64,
    pub objects: u64,
    /// Bytes and objects of the range when the migration started, if known.
    pub total: Option<(u64, u64)>,
}

/// Drives migrations (see the module doc). Thread-safe.
pub struct Migrator {
    cluster: Arc<Cluster>,
    notifier: Arc<Notifier>,
    done: Mutex<VecDeque<DoneMigration>>,
    /// Stop-and-copy requests waiting for their copy to finish, by migration id.
    copy_waiters: Mutex<Vec<(u64, oneshot::Sender<()>)>>,
    /// Bytes and objects of each migration's range when it started, as its
    /// source counted them (in memory only: a restarted coordinator shows no
    /// total).
    totals: Mutex<HashMap<u64, (u64, u64)>>,
}

/// How the source answered PrepareMigration.
enum Prepared {
    SafeVersion(u64),
    Refused(String),
    Unreachable,
}

impl Migrator {
    pub fn new(cluster: Arc<Cluster>, notifier: Arc<Notifier>) -> Self {
        Self {
            cluster,
            notifier,
            done: Mutex::new(VecDeque::new()),
            copy_waiters: Mutex::new(Vec::new()),
            totals: Mutex::new(HashMap::new()),
        }
    }

    /// Starts migrating the tablet `[start, end]` of `name` to `target`; returns
    /// the migration's id once ownership has moved (steps 1–4; for stop-and-copy
    /// after the copy, step 5).
    pub async fn migrate(
        &self,
        name: &str,
        range: (u64, u64),
        target: ServerId,
        mode: MigrationMode,
    ) -> Result<u64, CoordinatorError> {
        // Refused before anything is recorded, so a refusal changes nothing.
        let totals = crate::master_stats::check_room(&self.cluster, name, range, target).await?;
        let record = self
            .cluster
            .core()
            .begin_migration(name, range, target, mode)?;
        if let Some(totals) = totals {
            self.totals.lock().insert(record.id, totals);
        }
        tracing::info!(
            id = record.id,
            table = name,
            source = record.source.0,
            target = target.0,
            mode = mode.name(),
            "migration recorded"
        );
        let copied = (mode == MigrationMode::StopAndCopy).then(|| {
            let (tx, rx) = oneshot::channel();
            self.copy_waiters.lock().push((record.id, tx));
            rx
        });
        let moved = self.move_ownership(record).await;
        if let Err(e) = moved {
            self.copy_waiters.lock().retain(|(id, _)| *id != record.id);
            return Err(e);
        }
        if let Some(copied) = copied {
            // The sender goes only when `done` fires it; a dropped sender (never
            // happens while the migrator lives) ends the wait all the same.
            let _ = copied.await;
        }
        Ok(record.id)
    }

    /// Re-drives every `Preparing` record a previous coordinator left (R§9).
    pub async fn resume(self: Arc<Self>) {
        let preparing: Vec<MigrationRecord> = self
            .cluster
            .core()
            .migrations()
            .into_iter()
            .filter(|m| m.state == MigrationState::Preparing)
            .collect();
        for record in preparing {
            if let Err(e) = self.move_ownership(record).await {
                tracing::warn!(id = record.id, error = %e, "resumed migration did not start");
            }
        }
    }

    /// Records that migration `id` is cancelled; its range comes back to its
    /// source once it has arrived (`migration_cancel`).
    pub async fn cancel(&self, id: u64) -> Result<(), CoordinatorError> {
        let m = self.cluster.core().cancel_migration(id)?;
        tracing::info!(
            id,
            source = m.source.0,
            target = m.target.0,
            "migration cancelled"
        );
        Ok(())
    }

    /// Before a return migration's first step: the source of the cancelled one
    /// (this one's target) drops its stale fenced copy, awaited so that no
    /// drop can arrive after it has taken the range back (`migration_cancel`).
    async fn drop_stale_copy(&self, record: &MigrationRecord) -> Result<(), CoordinatorError> {
        let drop = Action::DropTablet {
            server_id: record.target,
            address: address_of(self.cluster.core().state(), record.target),
            table_id: record.table_id,
            start_hash: record.start_hash,
            end_hash: record.end_hash,
        };
        loop {
            if !self.cluster.is_up(record.target) {
                // Its crash recovery does not bring the range back (it does not
                // own it); the range stays, whole, on its current owner.
                self.cluster.core().abort_migration(record.id)?;
                return Err(CoordinatorError::MigrationRefused(
                    "the cancelled migration's source is no longer up; the range stays \
                     on its target"
                        .into(),
                ));
            }
            if self.notifier.send(&drop).await {
                return Ok(());
            }
            self.cluster
                .clock
                .sleep(Duration::from_millis(PREPARE_RETRY_MS))
                .await;
        }
    }

    /// Steps 2–4 for a `Preparing` record.
    async fn move_ownership(&self, record: MigrationRecord) -> Result<(), CoordinatorError> {
        if record.returns != 0 {
            self.drop_stale_copy(&record).await?;
        }
        let safe_version = loop {
            match self.prepare(&record).await {
                Prepared::SafeVersion(v) => break v,
                Prepared::Refused(why) => {
                    self.cluster.core().abort_migration(record.id)?;
                    return Err(CoordinatorError::MigrationRefused(why));
                }
                Prepared::Unreachable if !self.cluster.is_up(record.source) => {
                    // Its crash recovery brings the tablet back; it still owns it.
                    self.cluster.core().abort_migration(record.id)?;
                    return Err(CoordinatorError::MigrationRefused(
                        "the source master is no longer up".into(),
                    ));
                }
                Prepared::Unreachable => {
                    self.cluster
                        .clock
                        .sleep(Duration::from_millis(PREPARE_RETRY_MS))
                        .await;
                }
            }
        };
        let actions = if record.mode == MigrationMode::StopAndCopy {
            let actions = self
                .cluster
                .core()
                .migration_copying(record.id, safe_version)?;
            tracing::info!(
                id = record.id,
                safe_version,
                "migration: copying (stop-and-copy)"
            );
            actions
        } else {
            let actions = self
                .cluster
                .core()
                .migration_ownership_moved(record.id, safe_version)?;
            tracing::info!(id = record.id, safe_version, "migration: ownership moved");
            actions
        };
        self.notifier.carry_out(actions).await;
        Ok(())
    }

    async fn prepare(&self, m: &MigrationRecord) -> Prepared {
        let address = address_of(self.cluster.core().state(), m.source);
        let req = Request::PrepareMigration {
            server_id: m.source.0,
            table_id: m.table_id,
            start_hash: m.start_hash,
            end_hash: m.end_hash,
            migration_id: m.id,
        };
        let mut frame = Vec::new();
        if let Err(e) = encode_request(0, &req, &mut frame) {
            return Prepared::Refused(e.to_string());
        }
        let deadline = Duration::from_millis(NOTIFY_DEADLINE_MS);
        let Ok(bytes) = self.cluster.transport.call(&address, frame, deadline).await else {
            return Prepared::Unreachable;
        };
        match decode_response(&bytes) {
            Ok((_, Response::PrepareMigration { safe_version })) => {
                Prepared::SafeVersion(safe_version)
            }
            Ok((h, Response::Error(ErrorBody::Message { message, .. })))
                if h.status == Status::InvalidRequest =>
            {
                Prepared::Refused(message.to_owned())
            }
            _ => Prepared::Unreachable,
        }
    }

    /// The target of migration `id` has every record (step 5).
    pub async fn done(
        self: &Arc<Self>,
        id: u64,
        bytes: u64,
        objects: u64,
    ) -> Result<(), CoordinatorError> {
        // The finished list is locked across the core's step, so a listing (which
        // takes the same lock before the core's) sees the migration in progress
        // or done, never neither (`ramstore rebalance` and `migrate` stop on a
        // migration that is not listed).
        let (record, actions, returning) = {
            let mut done_list = self.done.lock();
            let record = self.cluster.core().state().migrations().get(id).copied();
            let actions = self.cluster.core().migration_done(id)?;
            let returning = self.cluster.core().return_of(id);
            let finished = !actions.is_empty() || returning.is_some();
            // A stop-and-copy migration finishes from `Copying` (ownership moves then).
            let pulling = |r: &MigrationRecord| {
                matches!(r.state, MigrationState::Pulling | MigrationState::Copying)
            };
            if let Some(record) = record.filter(|r| finished && pulling(r)) {
                tracing::info!(id, bytes, objects, "migration done");
                let total = self.totals.lock().remove(&id);
                if done_list.len() == DONE_KEPT {
                    done_list.pop_front();
                }
                done_list.push_back(DoneMigration {
                    record,
                    bytes,
                    objects,
                    total,
                });
            }
            (record, actions, returning)
        };
        if let Some(ret) = returning.filter(|_| record.is_some_and(|r| r.cancelled)) {
            // Not awaited: the target that reported is the return's source and
            // answers its PrepareMigration while this answer is on its way.
            let me = self.clone();
            tokio::spawn(async move {
                if let Err(e) = me.move_ownership(ret).await {
                    tracing::warn!(id = ret.id, error = %e, "return migration did not start");
                }
            });
        }
        self.notifier.carry_out(actions).await;
        let waiter = {
            let mut waiters = self.copy_waiters.lock();
            let found = waiters.iter().position(|(w, _)| *w == id);
            found.map(|i| waiters.swap_remove(i).1)
        };
        if let Some(waiter) = waiter {
            // The receiver may be gone (its request was cancelled): nothing waits.
            let _ = waiter.send(());
        }
        Ok(())
    }

    /// `key=value` lines, one per migration: those in progress (with what their
    /// targets have pulled so far, asked of them now), then those done since
    /// this coordinator started.
    pub async fn list_text(&self) -> String {
        let targets: BTreeSet<ServerId> = self
            .cluster
            .core()
            .migrations()
            .iter()
            .filter(|m| matches!(m.state, MigrationState::Pulling | MigrationState::Copying))
            .map(|m| m.target)
            .collect();
        let mut moved = HashMap::new();
        for target in targets {
            if let Some(stats) = crate::master_stats::fetch(&self.cluster, target).await {
                moved.extend(stats.incoming);
            }
        }
        // Lock order: the finished list, then the core (as in `done`).
        let done_list = self.done.lock();
        let core = self.cluster.core();
        let name_of = |table_id: u64| {
            core.tables()
                .find(|t| t.id == table_id)
                .map_or_else(String::new, |t| t.name.clone())
        };
        let totals = self.totals.lock().clone();
        let mut text = String::new();
        for m in core.migrations() {
            let state = match m.state {
                _ if m.cancelled => "cancelling",
                MigrationState::Preparing => "preparing",
                MigrationState::Pulling => "pulling",
                MigrationState::Copying => "copying",
            };
            let counts = Counts {
                moved: moved.get(&m.id).copied(),
                total: totals.get(&m.id).copied(),
            };
            text.push_str(&line(&m, &name_of(m.table_id), state, counts));
        }
        for d in done_list.iter() {
            let name = name_of(d.record.table_id);
            let counts = Counts {
                moved: Some((d.bytes, d.objects)),
                total: d.total,
            };
            let state = if d.record.cancelled {
                "cancelled"
            } else {
                "done"
            };
            text.push_str(&line(&d.record, &name, state, counts));
        }
        text
    }
}

/// What a listed migration has moved and how much its range held at the start.
struct Counts {
    moved: Option<(u64, u64)>,
    total: Option<(u64, u64)>,
}

fn line(m: &MigrationRecord, table: &str, state: &str, counts: Counts) -> String {
    let mut s = format!(
        "id={} table_id={} start_hash={:#x} end_hash={:#x} source={} target={} state={} mode={}",
        m.id,
        m.table_id,
        m.start_hash,
        m.end_hash,
        m.source.0,
        m.target.0,
        state,
        m.mode.name()
    );
    if let Some((bytes, objects)) = counts.moved {
        s.push_str(&format!(" bytes={bytes} objects={objects}"));
    }
    if m.returns != 0 {
        s.push_str(&format!(" returns={}", m.returns));
    }
    if let Some((bytes, objects)) = counts.total {
        s.push_str(&format!(" total_bytes={bytes} total_objects={objects}"));
    }
    // Last: the rest of the line is the name (names may hold spaces).
    s.push_str(&format!(" table={table}\n"));
    s
}
