//! The tablets a master owns: (table id, inclusive key-hash range) with statistics
//! that recovery partitions by (R§7.5).
//!
//! The map is replaced whole on every change (rare) and read without a lock on every
//! operation (`ArcSwap`). A tablet's [`TabletState`] is one atomic byte, so whether
//! it serves clients costs one load on the read path.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// What a tablet is doing, and so who may use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum TabletState {
    /// Served to clients.
    Normal = 0,
    /// Being filled by crash recovery (R§7.6): only replay writes to it, and
    /// clients are answered UNKNOWN_TABLET until the coordinator hands it over,
    /// so a partly replayed tablet is never served.
    Recovering = 1,
    /// Being migrated away (K§2.3): the target owns it now, clients are answered
    /// UNKNOWN_TABLET; only the target's pulls read it.
    MigratingOut = 2,
    /// Being migrated in (K§2.3): owned and served, but a client operation on a
    /// key whose record may not have arrived yet goes through the migration's
    /// gate ([`crate::migration::Arrivals`]).
    MigratingIn = 3,
}

impl TabletState {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => TabletState::Recovering,
            2 => TabletState::MigratingOut,
            3 => TabletState::MigratingIn,
            _ => TabletState::Normal,
        }
    }
}

/// Who is using a tablet: decides whether its state admits the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// A client operation.
    Client,
    /// A client operation on a migrating-in tablet that the migration's gate let
    /// through (the key's record has arrived, or it does not matter: a blind
    /// write).
    Arrived,
    /// Replaying log entries (recovery, cold start, pulled records): any state
    /// but migrating out.
    Replay,
    /// A migration target pulling records: migrating-out tablets only.
    Pull,
}

/// Why a tablet refused an access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not ours to serve this way: UNKNOWN_TABLET.
    NotServing,
    /// A client operation on a migrating-in tablet: the gate decides.
    Migrating,
}

/// One tablet and its live-object statistics.
#[derive(Debug)]
pub struct Tablet {
    pub table_id: u64,
    pub start_hash: u64,
    pub end_hash: u64,
    entries: AtomicU64,
    bytes: AtomicU64,
    /// A [`TabletState`].
    state: AtomicU8,
    /// The log's tombstone hold of a tablet migrating in (its pseudo segment id;
    /// 0: none): deletes of its keys leave tombstones that outlive cleaning
    /// until the coordinator has recorded the migration done, so a roll-back
    /// onto the source still sees them (K§2.3.4; `ramstore_log::TombstoneHold`).
    tombstone_hold: AtomicU64,
    /// The tablet's *ctime* on this master (design notes "Tablet ctime",
    /// issue 20): every log entry this master appended for the range during
    /// its current tenure lies in a segment whose id is at least this. Entries
    /// in older segments belong to an earlier tenure (the range left and came
    /// back) and must never be replayed as the range's.
    pub ctime: u64,
}

impl Tablet {
    pub fn new(table_id: u64, start_hash: u64, end_hash: u64) -> Self {
        Self {
            table_id,
            start_hash,
            end_hash,
            entries: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            state: AtomicU8::new(TabletState::Normal as u8),
            tombstone_hold: AtomicU64::new(0),
            ctime: 0,
        }
    }

    /// The tablet with its tenure starting at segment `ctime`.
    pub(crate) fn since(mut self, ctime: u64) -> Self {
        self.ctime = ctime;
        self
    }

    /// The tombstone hold of the tablet's deletes (0: none).
    pub(crate) fn tombstone_hold(&self) -> u64 {
        self.tombstone_hold.load(Ordering::Acquire)
    }

    pub(crate) fn set_tombstone_hold(&self, hold: u64) {
        self.tombstone_hold.store(hold, Ordering::Release);
    }

    /// Takes the tablet's tombstone hold away (0 if it had none).
    pub(crate) fn take_tombstone_hold(&self) -> u64 {
        self.tombstone_hold.swap(0, Ordering::AcqRel)
    }

    pub fn state(&self) -> TabletState {
        TabletState::from_u8(self.state.load(Ordering::Acquire))
    }

    pub(crate) fn set_state(&self, state: TabletState) {
        self.state.store(state as u8, Ordering::Release);
    }

    /// Whether crash recovery is still filling the tablet.
    pub fn is_recovering(&self) -> bool {
        self.state() == TabletState::Recovering
    }

    pub(crate) fn set_recovering(&self, recovering: bool) {
        let state = if recovering {
            TabletState::Recovering
        } else {
            TabletState::Normal
        };
        self.set_state(state);
    }

    /// Whether the tablet's state admits `access` (one atomic load).
    pub(crate) fn admits(&self, access: Access) -> Result<(), Refused> {
        use TabletState::*;
        match (self.state(), access) {
            (Normal, Access::Client | Access::Arrived | Access::Replay)
            | (MigratingIn, Access::Arrived | Access::Replay)
            | (Recovering, Access::Replay)
            | (MigratingOut, Access::Pull) => Ok(()),
            (MigratingIn, Access::Client) => Err(Refused::Migrating),
            _ => Err(Refused::NotServing),
        }
    }

    pub fn contains(&self, table_id: u64, hash: u64) -> bool {
        self.table_id == table_id && (self.start_hash..=self.end_hash).contains(&hash)
    }

    /// Live objects in the tablet.
    pub fn entries(&self) -> u64 {
        self.entries.load(Ordering::Relaxed)
    }

    /// Bytes of live object entries in the tablet.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn set_counts(&self, entries: u64, bytes: u64) {
        self.entries.store(entries, Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
    }

    pub(crate) fn object_added(&self, bytes: usize) {
        self.entries.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn object_removed(&self, bytes: usize) {
        self.entries.fetch_sub(1, Ordering::Relaxed);
        self.bytes.fetch_sub(bytes as u64, Ordering::Relaxed);
    }
}

/// Tablets sorted by (table id, start hash); ranges of one table never overlap.
#[derive(Debug, Default, Clone)]
pub struct TabletMap {
    pub tablets: Vec<Arc<Tablet>>,
}

impl TabletMap {
    /// The tablet holding `hash` of `table_id`, if it serves clients (is
    /// [`TabletState::Normal`]).
    pub fn find_serving(&self, table_id: u64, hash: u64) -> Option<&Arc<Tablet>> {
        self.find(table_id, hash)
            .filter(|t| t.state() == TabletState::Normal)
    }

    /// The tablet holding `hash` of `table_id`.
    pub fn find(&self, table_id: u64, hash: u64) -> Option<&Arc<Tablet>> {
        let i = self
            .tablets
            .partition_point(|t| (t.table_id, t.start_hash) <= (table_id, hash));
        let t = self.tablets.get(i.checked_sub(1)?)?;
        t.contains(table_id, hash).then_some(t)
    }

    /// Whether a tablet of `table_id` overlaps [start, end].
    pub fn overlaps(&self, table_id: u64, start: u64, end: u64) -> Option<&Arc<Tablet>> {
        self.tablets
            .iter()
            .find(|t| t.table_id == table_id && t.start_hash <= end && start <= t.end_hash)
    }

    pub(crate) fn with(&self, tablet: Tablet) -> Self {
        let mut tablets = self.tablets.clone();
        tablets.push(Arc::new(tablet));
        tablets.sort_by_key(|t| (t.table_id, t.start_hash));
        Self { tablets }
    }

    pub(crate) fn without(&self, table_id: u64, start: u64, end: u64) -> Self {
        let tablets = self
            .tablets
            .iter()
            .filter(|t| !(t.table_id == table_id && t.start_hash == start && t.end_hash == end))
            .cloned()
            .collect();
        Self { tablets }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_picks_the_covering_tablet() {
        let map = TabletMap::default()
            .with(Tablet::new(2, 0, 99))
            .with(Tablet::new(1, 100, u64::MAX))
            .with(Tablet::new(1, 0, 99));
        assert_eq!(map.find(1, 50).map(|t| t.start_hash), Some(0));
        assert_eq!(map.find(1, 100).map(|t| t.start_hash), Some(100));
        assert_eq!(map.find(1, u64::MAX).map(|t| t.start_hash), Some(100));
        assert!(map.find(2, 100).is_none());
        assert!(map.find(3, 0).is_none());
        assert!(map.without(1, 0, 99).find(1, 50).is_none());
    }
}
