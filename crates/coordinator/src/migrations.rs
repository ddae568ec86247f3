//! The persisted record of each tablet migration in progress (K§2.3; design
//! notes "Migration (Rocksteady)"): part of the coordinator's state document,
//! written before every step is acted on (R§9). Plain data; the steps are in
//! `migration.rs`.

use ramstore_wire::MigrationMode;
use serde::{Deserialize, Serialize};

use crate::server_list::ServerId;
use crate::tables::TabletEntry;

/// Where a migration is (design notes "Migration (Rocksteady)").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MigrationState {
    /// Recorded; the source may be fencing the tablet; it still owns it.
    Preparing,
    /// The target owns the tablet and is pulling its records.
    Pulling,
    /// Stop-and-copy only (a benchmark baseline): the source is fenced and still
    /// owns the tablet while the target copies every record; ownership moves
    /// when the target reports the copy done.
    Copying,
}

/// One migration in progress, as persisted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationRecord {
    pub id: u64,
    pub table_id: u64,
    pub start_hash: u64,
    pub end_hash: u64,
    pub source: ServerId,
    pub target: ServerId,
    pub state: MigrationState,
    /// The source's safe version (0 until `Pulling` or `Copying`).
    pub safe_version: u64,
    /// How the data moves; records of earlier versions are Rocksteady.
    #[serde(default)]
    pub mode: MigrationMode,
    /// An operator cancelled it (design notes "Cancelling a migration"): once
    /// the target has every record, the range migrates back to the source.
    #[serde(default)]
    pub cancelled: bool,
    /// The id of the cancelled migration whose range this one brings back to
    /// its source (0: none).
    #[serde(default)]
    pub returns: u64,
    /// Bytes and objects of the range when the migration started, as its source
    /// counted them (`None`: not known). Persisted with the record, so a
    /// coordinator that takes over still shows them.
    #[serde(default)]
    pub total: Option<(u64, u64)>,
    /// The source's ctime for the range (its tablet's, design notes "Tablet
    /// ctime"), kept while the target owns the range: a crashed source's log
    /// is replayed from it, and a roll-back gives it back to the source's
    /// tablet. 0 (older records): no cutoff.
    #[serde(default)]
    pub source_ctime: u64,
    /// The target's ctime for the range, persisted while `Preparing`, before
    /// ownership moves (R§9): a crashed target's log is replayed from it. 0
    /// (older records, or not known yet): no cutoff.
    #[serde(default)]
    pub target_ctime: u64,
}

/// How a finished migration ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MigrationOutcome {
    /// The target has every record and owns the range.
    Done,
    /// Cancelled: it finished, and its return migration brings the range back.
    Cancelled,
    /// The range is back on its source: the target crashed mid-way (its log
    /// was replayed onto the source, K§2.3.4), or the source of a stop-and-copy
    /// crashed before the copy was done (the range never moved).
    RolledBack,
}

impl MigrationOutcome {
    /// The state `ListMigrations` shows (one word: the list is `key=value`).
    pub fn name(self) -> &'static str {
        match self {
            MigrationOutcome::Done => "done",
            MigrationOutcome::Cancelled => "cancelled",
            MigrationOutcome::RolledBack => "rolled_back",
        }
    }
}

/// A finished migration, as persisted: kept for `ListMigrations`, and until
/// its stale copy is dropped, for the drop to be resent by a coordinator that
/// takes over (R§9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinishedMigration {
    /// The record as it was when the migration finished.
    pub record: MigrationRecord,
    pub outcome: MigrationOutcome,
    /// Bytes and objects the target reported moved (`None`: not reported, as
    /// for a roll-back).
    pub moved: Option<(u64, u64)>,
    /// A master that still holds a stale copy of the range and must drop it
    /// (DropTabletOwnership): the source after `Done`, the target after a
    /// stop-and-copy rolled back; cleared once it has answered.
    #[serde(default)]
    pub stale_copy_on: Option<ServerId>,
}

/// How many finished migrations the state keeps (oldest forgotten first; one
/// whose stale copy is not yet dropped is never forgotten).
pub const FINISHED_KEPT: usize = 64;

impl MigrationRecord {
    pub fn contains(&self, hash: u64) -> bool {
        (self.start_hash..=self.end_hash).contains(&hash)
    }

    /// Whether the record's range meets `[start, end]` of `table_id`.
    pub fn overlaps(&self, table_id: u64, start: u64, end: u64) -> bool {
        self.table_id == table_id && self.start_hash <= end && start <= self.end_hash
    }
}

/// Every migration in progress, and the id the next one gets (ids are never
/// reused, also across coordinator restarts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migrations {
    next_id: u64,
    records: Vec<MigrationRecord>,
    /// Finished migrations, oldest first (at most [`FINISHED_KEPT`] plus those
    /// with a stale copy left); absent from documents written before.
    #[serde(default)]
    finished: Vec<FinishedMigration>,
}

impl Default for Migrations {
    fn default() -> Self {
        Self {
            next_id: 1,
            records: Vec::new(),
            finished: Vec::new(),
        }
    }
}

impl Migrations {
    pub fn iter(&self) -> impl Iterator<Item = &MigrationRecord> {
        self.records.iter()
    }

    pub fn get(&self, id: u64) -> Option<&MigrationRecord> {
        self.records.iter().find(|m| m.id == id)
    }

    /// Finished migrations, oldest first.
    pub fn finished(&self) -> &[FinishedMigration] {
        &self.finished
    }

    /// The finished migration `id`, if it is still kept.
    pub fn finished_get(&self, id: u64) -> Option<&FinishedMigration> {
        self.finished.iter().find(|f| f.record.id == id)
    }

    /// Finished migrations whose stale copy is not dropped yet.
    pub fn stale_copies(&self) -> impl Iterator<Item = &FinishedMigration> {
        self.finished.iter().filter(|f| f.stale_copy_on.is_some())
    }

    /// Forgets the migrations of a dropped table (its tablets, stale copies
    /// included, are dropped with it).
    pub(crate) fn forget_table(&mut self, table_id: u64) {
        self.records.retain(|m| m.table_id != table_id);
        for f in self
            .finished
            .iter_mut()
            .filter(|f| f.record.table_id == table_id)
        {
            f.stale_copy_on = None;
        }
    }

    /// Forgets record `id` and keeps it as finished with `outcome`, in the
    /// same document write (so a listing sees it in progress or finished,
    /// never neither). Does nothing for an unknown id.
    pub(crate) fn finish(
        &mut self,
        id: u64,
        outcome: MigrationOutcome,
        moved: Option<(u64, u64)>,
        stale_copy_on: Option<ServerId>,
    ) {
        let Some(record) = self.get(id).copied() else {
            return;
        };
        self.records.retain(|m| m.id != id);
        if self.finished.len() >= FINISHED_KEPT {
            if let Some(i) = self.finished.iter().position(|f| f.stale_copy_on.is_none()) {
                self.finished.remove(i);
            }
        }
        self.finished.push(FinishedMigration {
            record,
            outcome,
            moved,
            stale_copy_on,
        });
    }

    /// The stale copy of finished migration `id` is dropped.
    pub(crate) fn stale_copy_dropped(&mut self, id: u64) {
        for f in self.finished.iter_mut().filter(|f| f.record.id == id) {
            f.stale_copy_on = None;
        }
    }

    pub(crate) fn validate(&self, server_known: impl Fn(ServerId) -> bool) -> Result<(), String> {
        for m in &self.records {
            if m.id == 0 || m.id >= self.next_id {
                return Err(format!("migration id {} is out of range", m.id));
            }
            if !server_known(m.source) || !server_known(m.target) {
                return Err(format!("migration {} names an unknown server", m.id));
            }
            if m.start_hash > m.end_hash {
                return Err(format!("migration {} has an empty range", m.id));
            }
        }
        Ok(())
    }
}

impl Migrations {
    /// Whether `t` is the range of a migration in `Pulling`: its owner is the
    /// target, which must learn of it as a migration, never as a plain tablet.
    /// (In `Copying` the owner is still the source, whose fenced tablet a plain
    /// TakeTabletOwnership leaves as it is.)
    pub fn is_migrating_in(&self, t: &TabletEntry) -> bool {
        self.records.iter().any(|m| {
            m.state == MigrationState::Pulling
                && m.table_id == t.table_id
                && m.start_hash == t.start_hash
                && m.end_hash == t.end_hash
        })
    }

    /// Records a new migration under the next id.
    pub(crate) fn add(&mut self, mut record: MigrationRecord) -> MigrationRecord {
        record.id = self.next_id;
        self.next_id += 1;
        self.records.push(record);
        record
    }

    /// Replaces the record with `record`'s id.
    pub(crate) fn replace(&mut self, record: MigrationRecord) {
        for r in self.records.iter_mut().filter(|r| r.id == record.id) {
            *r = record;
        }
    }

    /// Forgets migration `id` if `which` says so.
    pub(crate) fn remove_if(&mut self, id: u64, which: impl Fn(&MigrationRecord) -> bool) {
        self.records.retain(|m| m.id != id || !which(m));
    }
}
