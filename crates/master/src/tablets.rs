//! The tablets a master owns: (table id, inclusive key-hash range) with statistics
//! that recovery partitions by (R§7.5).
//!
//! The map is replaced whole on every change (rare) and read without a lock on every
//! operation (`ArcSwap`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// One tablet and its live-object statistics.
#[derive(Debug)]
pub struct Tablet {
    pub table_id: u64,
    pub start_hash: u64,
    pub end_hash: u64,
    entries: AtomicU64,
    bytes: AtomicU64,
    /// Being filled by crash recovery (R§7.6): only replay writes to it, and
    /// clients are answered UNKNOWN_TABLET until the coordinator hands it over,
    /// so a partly replayed tablet is never served.
    recovering: AtomicBool,
}

impl Tablet {
    pub fn new(table_id: u64, start_hash: u64, end_hash: u64) -> Self {
        Self {
            table_id,
            start_hash,
            end_hash,
            entries: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            recovering: AtomicBool::new(false),
        }
    }

    /// Whether crash recovery is still filling the tablet (see the field).
    pub fn is_recovering(&self) -> bool {
        self.recovering.load(Ordering::Acquire)
    }

    pub(crate) fn set_recovering(&self, recovering: bool) {
        self.recovering.store(recovering, Ordering::Release);
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
    /// The tablet holding `hash` of `table_id`, if it serves clients (is not
    /// being recovered).
    pub fn find_serving(&self, table_id: u64, hash: u64) -> Option<&Arc<Tablet>> {
        self.find(table_id, hash).filter(|t| !t.is_recovering())
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
