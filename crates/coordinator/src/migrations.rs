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
}

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
}

impl Default for Migrations {
    fn default() -> Self {
        Self {
            next_id: 1,
            records: Vec::new(),
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

    /// Forgets the migrations of a dropped table.
    pub(crate) fn forget_table(&mut self, table_id: u64) {
        self.records.retain(|m| m.table_id != table_id);
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
