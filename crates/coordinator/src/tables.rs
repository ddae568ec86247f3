//! Tables and their tablets (R§3): a table is split into tablets, each a contiguous,
//! inclusive range of the 64-bit key-hash space stored on one master.
//!
//! Invariant of every table: its tablets, sorted by `start_hash`, are contiguous,
//! disjoint and together cover exactly `[0, u64::MAX]`, so every key of the table has
//! exactly one owner. Table ids start at 1 and are never reused (also across drops and
//! coordinator restarts), so a master holding a stale tablet of a dropped table can
//! never serve it as part of a new table.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::server_list::ServerId;

/// The longest table name, in bytes (names are non-empty UTF-8).
pub const MAX_TABLE_NAME_BYTES: usize = 255;
/// The most tablets `create_table` splits a new table into.
pub const MAX_SERVER_SPAN: u32 = 1024;
const _: () = assert!(MAX_SERVER_SPAN >= 1);

/// One tablet: keys of `table_id` whose hash lies in `[start_hash, end_hash]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TabletEntry {
    pub table_id: u64,
    pub start_hash: u64,
    /// Inclusive, so a tablet can end at `u64::MAX`.
    pub end_hash: u64,
    /// The master that owns (or, if it crashed, owned) the tablet.
    pub server_id: ServerId,
    /// The tablet's *ctime* in its owner's log (design notes "Tablet ctime",
    /// issue 20): every entry the owner appended for the range in its current
    /// tenure is in a segment with at least this id; older segments may hold
    /// entries of an earlier tenure there, which recovery must not replay.
    /// 0 (also for documents written before it existed): no cutoff.
    #[serde(default)]
    pub ctime: u64,
}

impl TabletEntry {
    pub fn contains(&self, hash: u64) -> bool {
        (self.start_hash..=self.end_hash).contains(&hash)
    }
}

/// One table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Table {
    pub id: u64,
    pub name: String,
    /// Sorted by `start_hash`; covers `[0, u64::MAX]` exactly.
    pub tablets: Vec<TabletEntry>,
}

/// All tables by name, with the tablet map's version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tables {
    /// Incremented by the coordinator on every operation that changes any tablet
    /// (create, drop, split, reassignment), so clients can tell a stale map.
    version: u64,
    /// The id the next created table gets; persisted so ids are never reused.
    next_id: u64,
    by_name: BTreeMap<String, Table>,
}

impl Default for Tables {
    fn default() -> Self {
        Self {
            version: 0,
            next_id: 1,
            by_name: BTreeMap::new(),
        }
    }
}

impl Tables {
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The id the next created table will get.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    pub fn get(&self, name: &str) -> Option<&Table> {
        self.by_name.get(name)
    }

    /// Every table, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &Table> {
        self.by_name.values()
    }

    /// Every tablet of every table.
    pub fn tablets(&self) -> impl Iterator<Item = &TabletEntry> {
        self.by_name.values().flat_map(|t| t.tablets.iter())
    }

    pub(crate) fn tablets_mut(&mut self) -> impl Iterator<Item = &mut TabletEntry> {
        self.by_name.values_mut().flat_map(|t| t.tablets.iter_mut())
    }

    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut Table> {
        self.by_name.get_mut(name)
    }

    pub(crate) fn by_id_mut(&mut self, table_id: u64) -> Option<&mut Table> {
        self.by_name.values_mut().find(|t| t.id == table_id)
    }

    /// Adds a table under the next id with one tablet per `(range, owner)`; `ranges`
    /// must come from [`split_hash_space`].
    pub(crate) fn create(&mut self, name: &str, tablets: &[((u64, u64), ServerId)]) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let tablets = tablets
            .iter()
            .map(|&((start_hash, end_hash), server_id)| TabletEntry {
                table_id: id,
                start_hash,
                end_hash,
                server_id,
                // Table ids are never reused, so no log holds an entry of
                // this table from before: nothing to cut off.
                ctime: 0,
            })
            .collect();
        self.by_name.insert(
            name.to_owned(),
            Table {
                id,
                name: name.to_owned(),
                tablets,
            },
        );
        id
    }

    pub(crate) fn remove(&mut self, name: &str) -> Option<Table> {
        self.by_name.remove(name)
    }

    pub(crate) fn bump_version(&mut self) {
        self.version += 1;
    }

    /// Checks the invariants a restored map must satisfy; `server_known` says whether
    /// an owner id is in the server list.
    pub(crate) fn validate(&self, server_known: impl Fn(ServerId) -> bool) -> Result<(), String> {
        if self.next_id == 0 {
            return Err("next table id is 0".to_owned());
        }
        let mut ids = std::collections::BTreeSet::new();
        for (name, table) in &self.by_name {
            if *name != table.name {
                return Err(format!("table {name:?} is stored as {:?}", table.name));
            }
            validate_table_name(name).map_err(|e| format!("table {name:?}: {e}"))?;
            if table.id == 0 || table.id >= self.next_id || !ids.insert(table.id) {
                return Err(format!(
                    "table {name:?} has a bad or duplicate id {}",
                    table.id
                ));
            }
            let mut expected_start = Some(0u64);
            for t in &table.tablets {
                if t.table_id != table.id {
                    return Err(format!(
                        "table {name:?} holds a tablet of table {}",
                        t.table_id
                    ));
                }
                if Some(t.start_hash) != expected_start || t.end_hash < t.start_hash {
                    return Err(format!("table {name:?}: tablets are not contiguous"));
                }
                if !server_known(t.server_id) {
                    return Err(format!(
                        "table {name:?}: tablet owner {} unknown",
                        t.server_id
                    ));
                }
                expected_start = t.end_hash.checked_add(1);
            }
            if expected_start.is_some() {
                return Err(format!("table {name:?}: tablets do not reach u64::MAX"));
            }
        }
        Ok(())
    }
}

impl Table {
    /// Makes `split_hash` the start of a tablet, splitting the tablet that
    /// contains it (both halves keep its owner and its ctime: the objects stay
    /// where they are in the owner's log). Nothing happens if a tablet
    /// already starts there (0 always does).
    pub(crate) fn split_at(&mut self, split_hash: u64) {
        if self.tablets.iter().any(|t| t.start_hash == split_hash) {
            return;
        }
        // The tablets cover [0, u64::MAX] from 0, so some tablet before the
        // partition point strictly contains split_hash.
        let Some(i) = self
            .tablets
            .partition_point(|t| t.start_hash <= split_hash)
            .checked_sub(1)
        else {
            return;
        };
        let old = self.tablets[i];
        self.tablets[i].end_hash = split_hash - 1;
        self.tablets.insert(
            i + 1,
            TabletEntry {
                start_hash: split_hash,
                ..old
            },
        );
    }
}

/// Checks a table name: 1 to [`MAX_TABLE_NAME_BYTES`] bytes of UTF-8 (which `&str`
/// already guarantees).
pub fn validate_table_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        Err("table names must not be empty")
    } else if name.len() > MAX_TABLE_NAME_BYTES {
        Err("table names are limited to 255 bytes")
    } else if name.contains(char::is_control) {
        Err("table names must not contain control characters (line breaks, tabs)")
    } else {
        Ok(())
    }
}

/// Splits the key-hash space into `parts` (at least 1) contiguous inclusive ranges of
/// equal width covering `[0, u64::MAX]` exactly; the last range absorbs the remainder.
pub fn split_hash_space(parts: u32) -> Vec<(u64, u64)> {
    let parts = u128::from(parts.max(1));
    let space = 1u128 << 64;
    let width = space / parts;
    (0..parts)
        .map(|i| {
            let start = i * width;
            let end = if i + 1 == parts {
                space - 1
            } else {
                start + width - 1
            };
            // Both are below 2^64: start < end + 1 <= 2^64, so the casts are exact.
            (start as u64, end as u64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_hash_space_covers_everything() {
        assert_eq!(split_hash_space(0), vec![(0, u64::MAX)]);
        assert_eq!(split_hash_space(1), vec![(0, u64::MAX)]);
        assert_eq!(
            split_hash_space(2),
            vec![(0, (1 << 63) - 1), (1 << 63, u64::MAX)]
        );
        for parts in [3u32, 7, 1000, 1024] {
            let ranges = split_hash_space(parts);
            assert_eq!(ranges.len(), parts as usize);
            assert_eq!(ranges[0].0, 0);
            assert_eq!(ranges[ranges.len() - 1].1, u64::MAX);
            for w in ranges.windows(2) {
                assert_eq!(w[0].1 + 1, w[1].0);
            }
        }
    }

    #[test]
    fn validate_table_name_limits() {
        assert!(validate_table_name("").is_err());
        assert!(validate_table_name("t").is_ok());
        assert!(validate_table_name(&"n".repeat(MAX_TABLE_NAME_BYTES)).is_ok());
        assert!(validate_table_name(&"n".repeat(MAX_TABLE_NAME_BYTES + 1)).is_err());
    }
}
