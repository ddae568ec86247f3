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
//! 5. the target's `MigrationDone` → [`CoordinatorCore::migration_done`] moves
//!    the record to the finished list with the source's copy marked stale, and
//!    [`drop_stale_copy`] has the source drop the range (`DropTabletOwnership`)
//!    until it answers, then records the copy dropped.
//!
//! Stop-and-copy (a benchmark baseline, [`MigrationMode::StopAndCopy`]) runs
//! the same steps in another order: after step 2 the record becomes `Copying`
//! with the owner unchanged ([`CoordinatorCore::migration_copying`]), the
//! target copies while clients of the range retry against the fenced source,
//! and ownership moves in the write that step 5 makes; the client's request
//! returns only then.
//!
//! A restarted coordinator resends step 4 for every `Pulling` record
//! ([`CoordinatorCore::reissue_actions`]), re-drives `Preparing` records from step 2
//! and resends every stale-copy drop still due ([`Migrator::resume`]). Finished
//! migrations (done, cancelled, rolled back) stay in the persisted finished
//! list, with their figures, for `ListMigrations`.
//!
//! Thread-safety: [`Migrator`] is `Send + Sync`; it holds the core's lock for one
//! core call at a time, never across a request to a master.

use std::collections::{BTreeSet, HashMap};
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
use crate::migration_orphans::{drop_orphan_copy, OrphanDrop};
use crate::migration_unmoved::roll_back_unmoved;
use crate::notifier::{Notifier, NOTIFY_DEADLINE_MS};
use crate::server_list::ServerId;

pub use crate::migrations::{
    FinishedMigration, MigrationOutcome, MigrationRecord, MigrationState, Migrations,
};

/// How long the coordinator waits between attempts to reach a source that did
/// not answer PrepareMigration.
const PREPARE_RETRY_MS: u64 = 100;

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
        self.begin_migration_with_total(name, (start_hash, end_hash), target, mode, None)
    }

    /// [`Self::begin_migration`], recording `total` (the range's bytes and
    /// objects at the source) with the migration, so that the figures survive
    /// a coordinator restart.
    pub fn begin_migration_with_total(
        &mut self,
        name: &str,
        (start_hash, end_hash): (u64, u64),
        target: ServerId,
        mode: MigrationMode,
        total: Option<(u64, u64)>,
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
            total,
            source_ctime: tablet.ctime,
            target_ctime: 0,
        });
        self.commit(next)?;
        Ok(record)
    }

    /// Records the target's ctime for a `Preparing` migration (design notes
    /// "Tablet ctime"): persisted before ownership moves (R§9), so the
    /// target's log can always be replayed from the right segment. Does
    /// nothing once the migration has moved on or is gone.
    pub fn migration_target_tenure(&mut self, id: u64, ctime: u64) -> Result<(), CoordinatorError> {
        let Some(mut m) = self.state().migrations().get(id).copied() else {
            return Ok(());
        };
        if m.state != MigrationState::Preparing || m.target_ctime == ctime {
            return Ok(());
        }
        m.target_ctime = ctime;
        let mut next = self.state().clone();
        next.migrations_mut().replace(m);
        self.commit(next)
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
        self.refuse_a_gone_target(&m)?;
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
            t.ctime = m.target_ctime;
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
        self.refuse_a_gone_target(&m)?;
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

    /// `MigrationTargetCrashed` for a `Preparing` migration whose target is
    /// no longer up: moving the range to it would give it to a master whose
    /// crash recovery may be over, and nobody would hold it (issue 20, seed
    /// 285). Checked under the core's lock, in the call that would move it,
    /// so no crash is declared in between; the caller rolls the migration
    /// back instead (`migration_unmoved`).
    fn refuse_a_gone_target(&self, m: &MigrationRecord) -> Result<(), CoordinatorError> {
        let up = self
            .state()
            .servers()
            .get(m.target)
            .is_some_and(|e| e.is_up());
        if m.state == MigrationState::Preparing && !up {
            return Err(CoordinatorError::MigrationTargetCrashed(m.id));
        }
        Ok(())
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
        self.migration_done_moved(id, None)
    }

    /// [`Self::migration_done`] with the bytes and objects the target moved. In
    /// the one document write that forgets the record, the migration joins the
    /// finished list (outcome `done`) with its source's copy marked stale, so a
    /// coordinator that takes over before the source has dropped it resends the
    /// drop (R§9; [`drop_stale_copy`], `Migrator::resume`). A target declared crashed
    /// gets `MigrationTargetCrashed` and nothing changes.
    pub fn migration_done_moved(
        &mut self,
        id: u64,
        moved: Option<(u64, u64)>,
    ) -> Result<Vec<Action>, CoordinatorError> {
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
            return Err(CoordinatorError::MigrationTargetCrashed(id));
        }
        if m.cancelled {
            return self.cancelled_migration_done(&m, moved);
        }
        let mut next = self.state().clone();
        next.migrations_mut()
            .finish(id, MigrationOutcome::Done, moved, Some(m.source));
        if m.state == MigrationState::Copying {
            // Stop-and-copy: ownership moves only now, in the same write.
            if let Some(table) = next.tables_mut().by_id_mut(m.table_id) {
                for t in table
                    .tablets
                    .iter_mut()
                    .filter(|t| t.start_hash == m.start_hash && t.end_hash == m.end_hash)
                {
                    t.server_id = m.target;
                    t.ctime = m.target_ctime;
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

    /// The stale copy of finished migration `id` is dropped (its holder
    /// answered DropTabletOwnership, or is no longer up and its recovery does
    /// not bring the range back): forgotten, in one write.
    pub fn stale_copy_dropped(&mut self, id: u64) -> Result<(), CoordinatorError> {
        let mut next = self.state().clone();
        next.migrations_mut().stale_copy_dropped(id);
        self.commit(next)
    }

    /// The finished migrations with a stale copy still to drop whose range
    /// meets a tablet `crashed` owns (its recovery waits for those drops).
    pub fn stale_copies_overlapping(&self, crashed: ServerId) -> Vec<u64> {
        let state = self.state();
        let owned: Vec<_> = state
            .tables()
            .tablets()
            .filter(|t| t.server_id == crashed)
            .copied()
            .collect();
        state
            .migrations()
            .stale_copies()
            .filter(|f| {
                owned
                    .iter()
                    .any(|t| f.record.overlaps(t.table_id, t.start_hash, t.end_hash))
            })
            .map(|f| f.record.id)
            .collect()
    }

    /// The drop of finished migration `id`'s stale copy, if one is still due.
    pub fn stale_copy_drop(&self, id: u64) -> Option<Action> {
        let state = self.state();
        let f = state.migrations().finished_get(id)?;
        let holder = f.stale_copy_on?;
        Some(Action::DropTablet {
            server_id: holder,
            address: address_of(state, holder),
            table_id: f.record.table_id,
            start_hash: f.record.start_hash,
            end_hash: f.record.end_hash,
        })
    }
}

/// Drives migrations (see the module doc). Thread-safe.
pub struct Migrator {
    cluster: Arc<Cluster>,
    notifier: Arc<Notifier>,
    /// Stop-and-copy requests waiting for their copy to finish, by migration id.
    copy_waiters: Mutex<Vec<(u64, oneshot::Sender<()>)>>,
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
            copy_waiters: Mutex::new(Vec::new()),
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
            .begin_migration_with_total(name, range, target, mode, totals)?;
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
        let moved = self.move_ownership(record, false).await;
        if let Err(e) = moved {
            self.copy_waiters.lock().retain(|(id, _)| *id != record.id);
            return Err(e);
        }
        if let Some(mut copied) = copied {
            // The sender goes only when `done` fires it; a dropped sender (never
            // happens while the migrator lives) ends the wait all the same. A
            // copy that crash recovery rolled back never fires it: checked for.
            loop {
                tokio::select! {
                    _ = &mut copied => break,
                    () = self.cluster.clock.sleep(Duration::from_millis(PREPARE_RETRY_MS)) => {
                        if let Some(e) = self.rolled_back(record.id) {
                            self.copy_waiters.lock().retain(|(id, _)| *id != record.id);
                            return Err(e);
                        }
                    }
                }
            }
        }
        Ok(record.id)
    }

    /// The error to answer for migration `id` if it finished otherwise than
    /// done.
    fn rolled_back(&self, id: u64) -> Option<CoordinatorError> {
        let core = self.cluster.core();
        let f = core.state().migrations().finished_get(id)?;
        (f.outcome == MigrationOutcome::RolledBack).then(|| {
            CoordinatorError::MigrationRefused(format!(
                "migration {id} was rolled back: a master crashed during the copy; the range \
                 stays on its source"
            ))
        })
    }

    /// Re-drives every `Preparing` record a previous coordinator left, and
    /// resends every drop of a stale copy it had not seen answered (R§9).
    pub async fn resume(self: Arc<Self>) {
        let stale: Vec<u64> = self
            .cluster
            .core()
            .state()
            .migrations()
            .stale_copies()
            .map(|f| f.record.id)
            .collect();
        for id in stale {
            let (cluster, notifier) = (self.cluster.clone(), self.notifier.clone());
            tokio::spawn(async move { drop_stale_copy(&cluster, &notifier, id).await });
        }
        let preparing: Vec<MigrationRecord> = self
            .cluster
            .core()
            .migrations()
            .into_iter()
            .filter(|m| m.state == MigrationState::Preparing)
            .collect();
        for record in preparing {
            if let Err(e) = self.move_ownership(record, true).await {
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

    /// Steps 2–4 for a `Preparing` record. `resumed`: a previous coordinator
    /// drove it and may have fenced the source already.
    async fn move_ownership(
        &self,
        record: MigrationRecord,
        resumed: bool,
    ) -> Result<(), CoordinatorError> {
        // A drop still due on the target for a stale copy of this range (a
        // finished migration's) must land before the target takes the range,
        // never after (it would drop the new tablet).
        while self.stale_copy_on_target(&record) {
            self.cluster
                .clock
                .sleep(Duration::from_millis(PREPARE_RETRY_MS))
                .await;
        }
        if record.returns != 0 {
            self.drop_stale_copy(&record).await?;
        }
        // A copy of the range that nothing names (an orphan) goes first, and
        // the target's tenure of the range starts at or above its tenure floor
        // read after that; recorded before anything is fenced or moved (R§9).
        let target_up = self.prepare_target(&record).await?;
        if !target_up && !resumed {
            // Nothing was fenced: this coordinator has sent no PrepareMigration.
            self.cluster.core().abort_migration(record.id)?;
            return Err(CoordinatorError::MigrationRefused(
                "the target master is no longer up".into(),
            ));
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
            let copying = self
                .cluster
                .core()
                .migration_copying(record.id, safe_version);
            tracing::info!(
                id = record.id,
                safe_version,
                ok = copying.is_ok(),
                "migration: copying (stop-and-copy)"
            );
            copying
        } else {
            let moved = self
                .cluster
                .core()
                .migration_ownership_moved(record.id, safe_version);
            tracing::info!(
                id = record.id,
                safe_version,
                ok = moved.is_ok(),
                "migration: ownership moved"
            );
            moved
        };
        let actions = match actions {
            Ok(actions) => actions,
            Err(CoordinatorError::MigrationTargetCrashed(_)) => {
                return Err(roll_back_unmoved(&self.cluster, &self.notifier, &record).await);
            }
            Err(e) => return Err(e),
        };
        self.notifier.carry_out(actions).await;
        Ok(())
    }

    /// Before the source is fenced: the target drops any orphan copy of the
    /// range (`migration_orphans`), then its tenure floor is recorded as the
    /// migration's target ctime. False if the target is no longer up.
    async fn prepare_target(&self, record: &MigrationRecord) -> Result<bool, CoordinatorError> {
        match drop_orphan_copy(&self.cluster, &self.notifier, record).await {
            OrphanDrop::TargetGone => return Ok(false),
            // PrepareMigration finds the source gone and aborts.
            OrphanDrop::SourceGone | OrphanDrop::Dropped => {}
        }
        let target_ctime = loop {
            if let Some(stats) = crate::master_stats::fetch(&self.cluster, record.target).await {
                break stats.tenure_floor;
            }
            if !self.cluster.is_up(record.target) {
                return Ok(false);
            }
            self.cluster
                .clock
                .sleep(Duration::from_millis(PREPARE_RETRY_MS))
                .await;
        };
        self.cluster
            .core()
            .migration_target_tenure(record.id, target_ctime)?;
        Ok(true)
    }

    /// Whether a finished migration's stale copy of `record`'s range waits to be
    /// dropped on `record`'s target.
    fn stale_copy_on_target(&self, record: &MigrationRecord) -> bool {
        self.cluster
            .core()
            .state()
            .migrations()
            .stale_copies()
            .any(|f| {
                f.stale_copy_on == Some(record.target)
                    && f.record
                        .overlaps(record.table_id, record.start_hash, record.end_hash)
            })
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
        // One core step forgets the record and adds it to the finished list
        // in one document write, so a listing (under the same lock) sees the
        // migration in progress or finished, never neither (`ramstore
        // rebalance` and `migrate` stop on a migration that is not listed).
        let (record, returning) = {
            let mut core = self.cluster.core();
            let record = core.state().migrations().get(id).copied();
            core.migration_done_moved(id, Some((bytes, objects)))?;
            (record, core.return_of(id))
        };
        if record.is_some() {
            tracing::info!(id, bytes, objects, "migration done");
        }
        // The source drops its stale copy; resent until it answers, also by a
        // coordinator that takes over (the finished record says it is due).
        let (cluster, notifier) = (self.cluster.clone(), self.notifier.clone());
        tokio::spawn(async move { drop_stale_copy(&cluster, &notifier, id).await });
        if let Some(ret) = returning.filter(|_| record.is_some_and(|r| r.cancelled)) {
            // Not awaited: the target that reported is the return's source and
            // answers its PrepareMigration while this answer is on its way.
            let me = self.clone();
            tokio::spawn(async move {
                if let Err(e) = me.move_ownership(ret, false).await {
                    tracing::warn!(id = ret.id, error = %e, "return migration did not start");
                }
            });
        }
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
        let core = self.cluster.core();
        let name_of = |table_id: u64| {
            core.tables()
                .find(|t| t.id == table_id)
                .map_or_else(String::new, |t| t.name.clone())
        };
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
                total: m.total,
            };
            text.push_str(&line(&m, &name_of(m.table_id), state, counts));
        }
        for f in core.state().migrations().finished() {
            let counts = Counts {
                moved: f.moved,
                total: f.record.total,
            };
            let name = name_of(f.record.table_id);
            text.push_str(&line(&f.record, &name, f.outcome.name(), counts));
        }
        text
    }
}

/// Has the holder of finished migration `id`'s stale copy drop it, resending
/// until it answers, then records the copy dropped (R§9: the finished record
/// says the drop is due until then, so a coordinator that takes over resends
/// it). A holder that is no longer up needs no drop: its crash recovery
/// recovers only what the tablet map gives it, and the range is not its.
pub(crate) async fn drop_stale_copy(cluster: &Cluster, notifier: &Notifier, id: u64) {
    loop {
        let Some(drop) = cluster.core().stale_copy_drop(id) else {
            return;
        };
        let Action::DropTablet { server_id, .. } = &drop else {
            return;
        };
        let dropped = !cluster.is_up(*server_id) || notifier.send(&drop).await;
        if dropped {
            match cluster.core().stale_copy_dropped(id) {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(id, error = %e, "migration: cannot record the stale copy dropped; retried");
                }
            }
        }
        cluster
            .clock
            .sleep(Duration::from_millis(PREPARE_RETRY_MS))
            .await;
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
