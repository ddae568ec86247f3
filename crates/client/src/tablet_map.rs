//! The client's copy of the coordinator's tablet map: which master owns each
//! (table, key-hash range). Sorted by `(table_id, start_hash)`, so a lookup is one
//! binary search; addresses are shared `Arc<str>`s, so routing a request copies no
//! string.

use std::sync::Arc;

use ramstore_wire::TabletMapEntry;

/// One tablet of the map: the key hashes `[start_hash, end_hash]` (inclusive) of
/// table `table_id`, owned by server `server_id` at `address`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TabletInfo {
    pub table_id: u64,
    pub start_hash: u64,
    pub end_hash: u64,
    pub server_id: u64,
    pub address: String,
}

#[derive(Debug, Clone)]
struct Tablet {
    table_id: u64,
    start_hash: u64,
    end_hash: u64,
    server_id: u64,
    address: Arc<str>,
}

/// Where a key hash of a table leads in the map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Locate {
    /// The owner's address.
    Owner(Arc<str>),
    /// The table has tablets, but none holds the hash; the next one starts at this
    /// hash (`None`: no tablet of the table lies after it).
    Uncovered(Option<u64>),
    /// The map has no tablet of the table.
    NoTable,
}

/// A snapshot of the tablet map at `version`.
#[derive(Debug, Clone, Default)]
pub(crate) struct TabletMap {
    version: u64,
    tablets: Vec<Tablet>,
}

impl TabletMap {
    /// The map from a GetTabletMap response.
    pub(crate) fn from_entries<'a>(
        version: u64,
        entries: impl IntoIterator<Item = TabletMapEntry<'a>>,
    ) -> Self {
        // Servers own many tablets: share one string per address.
        let mut addresses: Vec<Arc<str>> = Vec::new();
        let mut tablets: Vec<Tablet> = entries
            .into_iter()
            .map(|e| {
                let address = match addresses.iter().find(|a| ***a == *e.address) {
                    Some(a) => a.clone(),
                    None => {
                        let a: Arc<str> = Arc::from(e.address);
                        addresses.push(a.clone());
                        a
                    }
                };
                Tablet {
                    table_id: e.table_id,
                    start_hash: e.start_hash,
                    end_hash: e.end_hash,
                    server_id: e.server_id,
                    address,
                }
            })
            .collect();
        tablets.sort_by_key(|t| (t.table_id, t.start_hash));
        TabletMap { version, tablets }
    }

    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// The index of the last tablet starting at or before `(table_id, hash)`.
    fn at_or_before(&self, table_id: u64, hash: u64) -> Option<usize> {
        self.tablets
            .partition_point(|t| (t.table_id, t.start_hash) <= (table_id, hash))
            .checked_sub(1)
    }

    /// The owner of `hash` in `table_id`, if the map knows one.
    pub(crate) fn owner(&self, table_id: u64, hash: u64) -> Option<&Arc<str>> {
        let t = self.tablets.get(self.at_or_before(table_id, hash)?)?;
        (t.table_id == table_id && hash <= t.end_hash).then_some(&t.address)
    }

    /// Where `hash` of `table_id` leads (for walks such as enumeration that must
    /// tell "no table" from "no tablet here").
    pub(crate) fn locate(&self, table_id: u64, hash: u64) -> Locate {
        if let Some(a) = self.owner(table_id, hash) {
            return Locate::Owner(a.clone());
        }
        let next = self.at_or_before(table_id, hash).map_or(0, |i| i + 1);
        match self.tablets.get(next) {
            Some(t) if t.table_id == table_id => Locate::Uncovered(Some(t.start_hash)),
            _ if self.has_table(table_id) => Locate::Uncovered(None),
            _ => Locate::NoTable,
        }
    }

    /// Whether the map has any tablet of `table_id`.
    pub(crate) fn has_table(&self, table_id: u64) -> bool {
        let i = self.tablets.partition_point(|t| t.table_id < table_id);
        self.tablets.get(i).is_some_and(|t| t.table_id == table_id)
    }

    pub(crate) fn to_infos(&self) -> Vec<TabletInfo> {
        self.tablets
            .iter()
            .map(|t| TabletInfo {
                table_id: t.table_id,
                start_hash: t.start_hash,
                end_hash: t.end_hash,
                server_id: t.server_id,
                address: t.address.to_string(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(table_id: u64, start_hash: u64, end_hash: u64, address: &str) -> TabletMapEntry<'_> {
        TabletMapEntry {
            table_id,
            start_hash,
            end_hash,
            server_id: 1,
            address,
        }
    }

    #[test]
    fn lookup_finds_the_owning_tablet() {
        // Deliberately unsorted, with a gap in table 2.
        let map = TabletMap::from_entries(
            3,
            [
                entry(2, 100, 199, "c"),
                entry(1, 1 << 63, u64::MAX, "b"),
                entry(1, 0, (1 << 63) - 1, "a"),
                entry(2, 0, 49, "a"),
            ],
        );
        assert_eq!(map.version(), 3);
        assert_eq!(map.owner(1, 0).map(|a| &**a), Some("a"));
        assert_eq!(map.owner(1, (1 << 63) - 1).map(|a| &**a), Some("a"));
        assert_eq!(map.owner(1, 1 << 63).map(|a| &**a), Some("b"));
        assert_eq!(map.owner(1, u64::MAX).map(|a| &**a), Some("b"));
        assert_eq!(map.owner(2, 49).map(|a| &**a), Some("a"));
        assert_eq!(map.owner(2, 50), None);
        assert_eq!(map.owner(2, 200), None);
        assert_eq!(map.owner(3, 0), None);
        assert_eq!(map.owner(0, 5), None);
        assert_eq!(map.locate(2, 50), Locate::Uncovered(Some(100)));
        assert_eq!(map.locate(2, 300), Locate::Uncovered(None));
        assert_eq!(map.locate(3, 0), Locate::NoTable);
        assert_eq!(map.locate(0, 0), Locate::NoTable);
        assert!(map.has_table(1) && map.has_table(2) && !map.has_table(3));
        // Addresses are shared, not copied per tablet.
        let a1 = map.owner(1, 0).cloned();
        let a2 = map.owner(2, 0).cloned();
        assert!(matches!((a1, a2), (Some(x), Some(y)) if Arc::ptr_eq(&x, &y)));
        let infos = map.to_infos();
        assert_eq!(infos.len(), 4);
        assert_eq!((infos[0].table_id, infos[0].start_hash), (1, 0));
    }
}
