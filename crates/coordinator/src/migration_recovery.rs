//! Lineage recovery of migrations (K§2.3.4; design notes "Migration: lineage
//! recovery"): the persisted migration record is the source→target dependency,
//! and crash recovery consults it whenever a crashed master is named by one.
//!
//! * The *target* crashed while `Pulling`: the source still holds its fenced
//!   copy (every record of the range as of the fence, all below the safe
//!   version), and every write the target acknowledged is in the target's log,
//!   above the safe version. Recovery replays the target's log of the range onto
//!   the source (newest version wins, tombstones included), and
//!   [`CoordinatorCore::migration_rolled_back`] makes the source the owner again
//!   and deletes the record in one write: the migration is rolled back.
//! * The *source* crashed while `Pulling`: the records not pulled yet are only in
//!   its log. Recovery replays that log of the range onto another master (never
//!   the target, which owns the range), the coordinator fences the copy there
//!   (PrepareMigration of a recovering tablet) and
//!   [`CoordinatorCore::migration_source_recovered`] records it as the new
//!   source and resends TakeMigratingTablet: the target pulls the rest from it,
//!   applying only keys it has not settled, and the migration completes.
//! * Both crashed: the source's range is recovered onto a new source first (the
//!   target need not be up for that), then the target's rollback onto it.
//!
//! Every step is persisted before it is acted on (R§9) and recomputed by the
//! next attempt, so a coordinator that takes over simply recovers again.
//!
//! Thread-safety: plain functions of the core (under its lock) and one request.

use std::time::Duration;

use ramstore_wire::{decode_response, encode_request, Request, Response};

use crate::cluster::Cluster;
use crate::coordinator::{address_of, take_migrating_action, Action, CoordinatorCore};
use crate::error::CoordinatorError;
use crate::migrations::{MigrationOutcome, MigrationRecord, MigrationState};
use crate::notifier::NOTIFY_DEADLINE_MS;
use crate::server_list::{ServerEntry, ServerId};

/// What crash recovery must do for a migration that names the crashed master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lineage {
    /// The crashed master was the target: recover its log of the range onto the
    /// source and roll the migration back.
    RollBack(MigrationRecord),
    /// The crashed master was the source: recover its log of the range onto
    /// another master, which becomes the source.
    NewSource(MigrationRecord),
}

impl Lineage {
    pub fn record(&self) -> &MigrationRecord {
        match self {
            Lineage::RollBack(m) | Lineage::NewSource(m) => m,
        }
    }

    /// The range, as a recovery partition names it.
    pub fn range(&self) -> (u64, u64, u64) {
        let m = self.record();
        (m.table_id, m.start_hash, m.end_hash)
    }

    /// The ctime of the range in the crashed master's log, from which its
    /// entries are replayed (design notes "Tablet ctime"): the target's for a
    /// roll-back, the source's for a new source.
    pub fn replay_ctime(&self) -> u64 {
        match self {
            Lineage::RollBack(m) => m.target_ctime,
            Lineage::NewSource(m) => m.source_ctime,
        }
    }

    /// The master this range is recovered onto, among the UP `masters`; `None`
    /// if none fits yet (the source of a roll-back is not up).
    pub fn recovery_master(
        &self,
        masters: &[ServerEntry],
        pick: impl FnOnce(&[ServerEntry]) -> Option<ServerEntry>,
    ) -> Option<ServerEntry> {
        match self {
            Lineage::RollBack(m) => masters.iter().find(|e| e.id == m.source).cloned(),
            Lineage::NewSource(m) => {
                let others: Vec<ServerEntry> = masters
                    .iter()
                    .filter(|e| e.id != m.target)
                    .cloned()
                    .collect();
                pick(&others)
            }
        }
    }
}

impl CoordinatorCore {
    /// The migrations in `Pulling` that name `crashed`, and those in `Copying`
    /// whose target it is, as the lineage work its recovery must do. (A
    /// `Preparing` one is aborted or moved on by the migrator: its tablet still
    /// belongs to the source in the map. A `Copying` one whose source crashed
    /// is abandoned first, [`Self::migration_copy_abandoned`]: the range never
    /// moved.) A stop-and-copy target crashing mid-copy rolls back as a
    /// Rocksteady one does: its source still holds the whole range, fenced.
    pub fn lineage_of(&self, crashed: ServerId) -> Vec<Lineage> {
        self.state()
            .migrations()
            .iter()
            .filter_map(|m| match m.state {
                MigrationState::Pulling | MigrationState::Copying if m.target == crashed => {
                    Some(Lineage::RollBack(*m))
                }
                MigrationState::Pulling if m.source == crashed => Some(Lineage::NewSource(*m)),
                _ => None,
            })
            .collect()
    }

    /// The stop-and-copy migrations whose source `crashed` mid-copy.
    pub fn copies_from(&self, crashed: ServerId) -> Vec<MigrationRecord> {
        self.state()
            .migrations()
            .iter()
            .filter(|m| m.state == MigrationState::Copying && m.source == crashed)
            .copied()
            .collect()
    }

    /// The source of stop-and-copy migration `id` crashed before the copy was
    /// done. The range never moved (the source owns it in the map), so its
    /// crash recovery recovers it as any tablet of the source; the migration is
    /// over: in one write the record goes to the finished list (`rolled_back`)
    /// with the target's partial copy marked stale, to be dropped
    /// ([`crate::migration::drop_stale_copy`]) before the recovery places the
    /// range. `LineageChanged` (nothing applied) unless the record is still
    /// `Copying` from `crashed`.
    pub fn migration_copy_abandoned(
        &mut self,
        id: u64,
        crashed: ServerId,
    ) -> Result<(), CoordinatorError> {
        let m = self
            .state()
            .migrations()
            .get(id)
            .copied()
            .filter(|m| m.source == crashed && m.state == MigrationState::Copying)
            .ok_or(CoordinatorError::LineageChanged(id))?;
        let mut next = self.state().clone();
        next.migrations_mut()
            .finish(id, MigrationOutcome::RolledBack, None, Some(m.target));
        self.commit(next)
    }

    /// The crashed target's log of migration `id`'s range was replayed onto the
    /// source: the source owns the tablet again and the record goes, in one
    /// write (R§9). Returns the action that makes the source serve it.
    /// `LineageChanged` (nothing applied) unless the record still names
    /// `crashed` as target and the source is up.
    pub fn migration_rolled_back(
        &mut self,
        id: u64,
        crashed: ServerId,
    ) -> Result<Vec<Action>, CoordinatorError> {
        let m = self
            .state()
            .migrations()
            .get(id)
            .copied()
            .filter(|m| {
                m.target == crashed
                    && matches!(m.state, MigrationState::Pulling | MigrationState::Copying)
            })
            .ok_or(CoordinatorError::LineageChanged(id))?;
        if !self
            .state()
            .servers()
            .get(m.source)
            .is_some_and(ServerEntry::is_up)
        {
            return Err(CoordinatorError::LineageChanged(id));
        }
        let mut next = self.state().clone();
        let table = next
            .tables_mut()
            .by_id_mut(m.table_id)
            .ok_or(CoordinatorError::LineageChanged(id))?;
        let mut moved = None;
        for t in table
            .tablets
            .iter_mut()
            .filter(|t| t.start_hash == m.start_hash && t.end_hash == m.end_hash)
        {
            t.server_id = m.source;
            // The source's tenure never ended: its fenced copy was refilled.
            t.ctime = m.source_ctime;
            moved = Some(*t);
        }
        let moved = moved.ok_or(CoordinatorError::LineageChanged(id))?;
        // Kept as finished (`rolled_back`), in the same write (R§9).
        next.migrations_mut()
            .finish(id, MigrationOutcome::RolledBack, None, None);
        let action = Action::TakeTablet {
            server_id: m.source,
            address: address_of(&next, m.source),
            table_id: moved.table_id,
            start_hash: moved.start_hash,
            end_hash: moved.end_hash,
        };
        self.commit(next)?;
        Ok(vec![action])
    }

    /// The crashed source's log of migration `id`'s range was replayed onto
    /// `new_source`, which has fenced it: it is the source from now on.
    /// Returns the TakeMigratingTablet that points the target at it.
    /// `LineageChanged` (nothing applied) unless the record still names
    /// `crashed` as source.
    pub fn migration_source_recovered(
        &mut self,
        id: u64,
        crashed: ServerId,
        new_source: ServerId,
    ) -> Result<Vec<Action>, CoordinatorError> {
        self.migration_source_recovered_since(id, crashed, new_source, 0)
    }

    /// [`Self::migration_source_recovered`], recording `ctime` as the new
    /// source's ctime for the range (its RecoverPartition answer): a later
    /// crash of it replays its log from there.
    pub fn migration_source_recovered_since(
        &mut self,
        id: u64,
        crashed: ServerId,
        new_source: ServerId,
        ctime: u64,
    ) -> Result<Vec<Action>, CoordinatorError> {
        let mut m = self
            .state()
            .migrations()
            .get(id)
            .copied()
            .filter(|m| m.source == crashed && m.state == MigrationState::Pulling)
            .ok_or(CoordinatorError::LineageChanged(id))?;
        if new_source == m.target
            || !self
                .state()
                .servers()
                .get(new_source)
                .is_some_and(ServerEntry::is_master)
        {
            return Err(CoordinatorError::LineageChanged(id));
        }
        m.source = new_source;
        m.source_ctime = ctime;
        let mut next = self.state().clone();
        next.migrations_mut().replace(m);
        let action = take_migrating_action(&next, &m);
        self.commit(next)?;
        Ok(vec![action])
    }
}

/// Fences the copy `new_source` recovered of `m`'s range (PrepareMigration of a
/// recovering tablet): whether it answered. Idempotent at the master.
pub(crate) async fn fence_new_source(
    cluster: &Cluster,
    m: &MigrationRecord,
    new_source: &ServerEntry,
) -> Result<(), String> {
    let req = Request::PrepareMigration {
        server_id: new_source.id.0,
        table_id: m.table_id,
        start_hash: m.start_hash,
        end_hash: m.end_hash,
        migration_id: m.id,
    };
    let mut frame = Vec::new();
    encode_request(0, &req, &mut frame).map_err(|e| e.to_string())?;
    let deadline = Duration::from_millis(NOTIFY_DEADLINE_MS);
    let bytes = cluster
        .transport
        .call(&new_source.address, frame, deadline)
        .await
        .map_err(|e| e.to_string())?;
    match decode_response(&bytes) {
        Ok((_, Response::PrepareMigration { .. })) => Ok(()),
        Ok((_, other)) => Err(format!("the new source refused to fence: {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}
