//! The source's side of a migration (K§2.3): fence, then serve pulls.

use std::sync::atomic::Ordering;

use crate::error::ReadError;
use crate::object_store::{EnumeratedObject, ObjectStore};
use crate::tablets::{Access, TabletState};
use crate::ConfigError;

impl ObjectStore {
    /// Fences the tablet `[start_hash, end_hash]` of `table_id` for migration:
    /// from now on clients get UNKNOWN_TABLET and only pulls read it. Waits until
    /// every operation that may have seen it serving has finished (the log's
    /// operation epochs), then returns the safe version: above every version this
    /// master issued, so the target's versions of every key stay monotonic
    /// (K§2.3, R§3.1). Idempotent on a fenced tablet. `BadTablet` unless the range
    /// is exactly one tablet that is normal, recovering (a copy lineage
    /// recovery rebuilt, becoming the new source, K§2.3.4) or already fenced.
    pub fn prepare_migration(
        &self,
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
    ) -> Result<u64, ConfigError> {
        self.prepare_migration_unless(table_id, start_hash, end_hash, &|| false)
    }

    /// [`Self::prepare_migration`], refused with `TransactionsInFlight` (and
    /// the tablet serving again) if `busy()` says, once every operation that
    /// saw the tablet serving has finished, that a transaction holds an
    /// object of the range prepared (issue 21): prepared ops and their locks
    /// do not move with a migration, so their decision must find them where
    /// they are. Asked only when this call fenced a serving tablet; a fence
    /// already in place (a resent request) or a recovered copy becoming the
    /// source is kept as before. The caller retries later: a prepared op
    /// waits only for its client's decision (a round trip or two).
    pub fn prepare_migration_unless(
        &self,
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
        busy: &dyn Fn() -> bool,
    ) -> Result<u64, ConfigError> {
        let mut fenced_here = None;
        let bad = || ConfigError::BadTablet {
            table_id,
            start_hash,
            end_hash,
        };
        {
            let _changing = self.inner.tablet_changes.lock();
            let map = self.inner.shared.tablets.load();
            let tablet = map
                .tablets
                .iter()
                .find(|t| {
                    t.table_id == table_id && t.start_hash == start_hash && t.end_hash == end_hash
                })
                .ok_or_else(bad)?;
            match tablet.state() {
                TabletState::Normal => {
                    tablet.set_state(TabletState::MigratingOut);
                    fenced_here = Some(tablet.clone());
                }
                // A copy crash recovery rebuilt from a crashed source's log:
                // it becomes the migration's new source (K§2.3.4, `lineage.rs`).
                // Recovering tablets are never served, so nothing to wait for.
                TabletState::Recovering => tablet.set_state(TabletState::MigratingOut),
                TabletState::MigratingOut => {}
                _ => return Err(bad()),
            }
        }
        self.inner.log.wait_for_operations();
        // After the wait: a prepare that checked a version before the fence has
        // taken its locks by now, and none can check one after it.
        if let Some(tablet) = fenced_here {
            if busy() {
                let _changing = self.inner.tablet_changes.lock();
                if tablet.state() == TabletState::MigratingOut {
                    tablet.set_state(TabletState::Normal);
                }
                return Err(ConfigError::TransactionsInFlight);
            }
        }
        let shared = &self.inner.shared;
        let issued = shared.max_version.load(Ordering::SeqCst).saturating_add(1);
        Ok(shared.safe_version.load(Ordering::SeqCst).max(issued))
    }

    /// The next batch of the fenced tablet's records with key hash in `[cursor,
    /// end_hash]`, whole hash buckets, about `max_bytes` of keys and values (the
    /// enumeration scan, R§3), and the cursor to go on from (`None`: done).
    /// UNKNOWN_TABLET unless `cursor` lies in a tablet fenced for migration.
    pub fn pull(
        &self,
        table_id: u64,
        cursor: u64,
        end_hash: u64,
        max_bytes: usize,
        out: &mut Vec<EnumeratedObject>,
    ) -> Result<Option<u64>, ReadError> {
        self.pull_with(
            table_id,
            cursor,
            end_hash,
            max_bytes,
            |version, key, value| {
                out.push(EnumeratedObject {
                    key: key.to_vec(),
                    value: value.to_vec(),
                    version,
                })
            },
        )
    }

    /// [`Self::pull`], calling `visit(version, key, value)` with each record in
    /// place in the log instead of copying it, so the answer is encoded straight
    /// from the log (K§2.3: the source's work per pulled byte is one copy into
    /// the response). `visit` runs under an epoch pin: it must not block. On an
    /// error `visit` was not called.
    pub fn pull_with(
        &self,
        table_id: u64,
        cursor: u64,
        end_hash: u64,
        max_bytes: usize,
        visit: impl FnMut(u64, &[u8], &[u8]),
    ) -> Result<Option<u64>, ReadError> {
        let end = {
            let map = self.inner.shared.tablets.load();
            let tablet = map.find(table_id, cursor).ok_or(ReadError::UnknownTablet)?;
            tablet.admits(Access::Pull).map_err(ReadError::from)?;
            tablet.end_hash.min(end_hash)
        };
        if end < cursor {
            return Ok(None);
        }
        let next = self.scan_with(table_id, cursor, end, max_bytes, visit)?;
        // The scan stops at the tablet's end or `end`; past `end_hash` is done.
        Ok(next.filter(|n| *n <= end_hash))
    }

    /// The record of `key` in a tablet fenced for migration (a PriorityPull):
    /// `Ok(None)` if there is none.
    pub fn pull_key(
        &self,
        table_id: u64,
        key: &[u8],
    ) -> Result<Option<EnumeratedObject>, ReadError> {
        let found = self.read_with_as(table_id, key, Access::Pull, |view| {
            let mut value = Vec::with_capacity(view.value_len());
            view.copy_value(&mut value);
            EnumeratedObject {
                key: key.to_vec(),
                value,
                version: view.version(),
            }
        });
        match found {
            Ok(o) => Ok(Some(o)),
            Err(ReadError::ObjectDoesntExist) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object_store::key_hash;
    use crate::{CleanerMode, RejectRules, StoreConfig};

    fn store() -> ObjectStore {
        let mut config = StoreConfig::new(16 << 20);
        config.segment_bytes = 128 * 1024;
        config.cleaner = CleanerMode::Manual;
        let s = ObjectStore::new(config).expect("store");
        s.add_tablet(1, 0, u64::MAX).expect("tablet");
        s
    }

    /// Issue 21: a range with an object prepared by a transaction is not let
    /// go; the tablet keeps serving, and a later try fences it.
    #[test]
    fn prepare_migration_unless_busy_refuses_and_keeps_serving() {
        let s = store();
        s.write(1, b"k", b"v", &RejectRules::default())
            .expect("write");
        assert_eq!(
            s.prepare_migration_unless(1, 0, u64::MAX, &|| true),
            Err(ConfigError::TransactionsInFlight)
        );
        let mut v = Vec::new();
        assert!(s.read(1, b"k", &mut v).is_ok(), "still serving");
        assert!(s
            .prepare_migration_unless(1, 0, u64::MAX, &|| false)
            .is_ok());
        assert!(s.read(1, b"k", &mut v).is_err(), "fenced");
        // A fence already in place is kept, whatever `busy` says.
        assert!(s.prepare_migration_unless(1, 0, u64::MAX, &|| true).is_ok());
    }

    #[test]
    fn prepare_migration_fences_clients_and_bounds_versions() {
        let s = store();
        let rules = RejectRules::default();
        for i in 0..5 {
            s.write(1, b"hot", format!("{i}").as_bytes(), &rules)
                .expect("write");
        }
        let mut v = Vec::new();
        let hot = s.read(1, b"hot", &mut v).expect("read");
        let safe = s.prepare_migration(1, 0, u64::MAX).expect("prepared");
        assert!(safe > hot, "safe version {safe} must exceed issued {hot}");
        assert_eq!(s.read(1, b"hot", &mut v), Err(ReadError::UnknownTablet));
        assert_eq!(
            s.write(1, b"k", b"v", &rules),
            Err(crate::WriteError::UnknownTablet)
        );
        assert_eq!(s.prepare_migration(1, 0, u64::MAX).expect("again"), safe);
        let pulled = s.pull_key(1, b"hot").expect("pull").expect("exists");
        assert_eq!(pulled.version, hot);
        assert!(s.pull_key(1, b"none").expect("pull").is_none());
    }

    #[test]
    fn prepare_migration_refuses_a_range_that_is_not_one_tablet() {
        let s = store();
        assert!(s.prepare_migration(1, 0, 10).is_err());
        assert!(s.prepare_migration(2, 0, u64::MAX).is_err());
    }

    #[test]
    fn pull_returns_every_record_once_across_batches() {
        let s = store();
        let rules = RejectRules::default();
        for i in 0..500 {
            s.write(1, format!("k{i}").as_bytes(), &[7u8; 100], &rules)
                .expect("write");
        }
        let mut out = Vec::new();
        assert_eq!(
            s.pull(1, 0, u64::MAX, 1000, &mut out),
            Err(ReadError::UnknownTablet),
            "an unfenced tablet is not pulled"
        );
        s.prepare_migration(1, 0, u64::MAX).expect("prepared");
        let mut cursor = Some(0);
        let mut seen = std::collections::BTreeSet::new();
        while let Some(c) = cursor {
            out.clear();
            cursor = s.pull(1, c, u64::MAX, 2000, &mut out).expect("pull");
            for o in &out {
                assert!(key_hash(&o.key) >= c);
                assert!(seen.insert(o.key.clone()), "pulled twice");
            }
        }
        assert_eq!(seen.len(), 500);
    }
}
