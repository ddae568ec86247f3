//! The master's part of lineage recovery (K§2.3.4; design notes "Migration:
//! lineage recovery"): a migration's fenced copy on the source can be refilled
//! by crash recovery, and a recovered copy can become a migration's source.
//!
//! * The *target* crashed: the coordinator recovers the target's log of the
//!   range onto the source, which still holds its fenced copy.
//!   [`ObjectStore::reclaim_fenced_tablet`] turns that copy into a recovering
//!   tablet (kept, not emptied), replay applies the target's entries on top
//!   (newest version wins, R§7.6), and TakeTabletOwnership makes it normal: the
//!   migration is rolled back. If the replay fails, [`ObjectStore::refence_tablet`]
//!   puts the copy back as it was, for the next attempt.
//! * The *source* crashed: the coordinator recovers the source's log of the
//!   range onto a third master, whose recovering tablet PrepareMigration then
//!   fences ([`ObjectStore::prepare_migration`] admits a recovering tablet):
//!   it becomes the migration's new source, and the target pulls the rest from it.

use crate::tablets::TabletState;
use crate::{ConfigError, ObjectStore};

impl ObjectStore {
    /// If exactly the tablet `[start_hash, end_hash]` of `table_id` is here and
    /// fenced for migration (or already reclaimed), makes it recovering, keeping
    /// its objects, and returns `true`; `false` if no tablet overlaps the range
    /// (recovery adds a fresh one). `BadTablet` for any other overlap.
    pub fn reclaim_fenced_tablet(
        &self,
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
    ) -> Result<bool, ConfigError> {
        let _changing = self.inner.tablet_changes.lock();
        let map = self.inner.shared.tablets.load();
        match map.overlaps(table_id, start_hash, end_hash) {
            None => Ok(false),
            Some(t) if t.start_hash == start_hash && t.end_hash == end_hash => match t.state() {
                TabletState::MigratingOut | TabletState::Recovering => {
                    t.set_state(TabletState::Recovering);
                    Ok(true)
                }
                _ => Err(ConfigError::BadTablet {
                    table_id,
                    start_hash,
                    end_hash,
                }),
            },
            Some(_) => Err(ConfigError::BadTablet {
                table_id,
                start_hash,
                end_hash,
            }),
        }
    }

    /// Undoes [`Self::reclaim_fenced_tablet`] after a failed replay: the tablet is
    /// fenced again (only pulls read it). A tablet in another state is left alone.
    pub fn refence_tablet(&self, table_id: u64, start_hash: u64, end_hash: u64) {
        let _changing = self.inner.tablet_changes.lock();
        let map = self.inner.shared.tablets.load();
        if let Some(t) = map.tablets.iter().find(|t| {
            t.table_id == table_id
                && t.start_hash == start_hash
                && t.end_hash == end_hash
                && t.state() == TabletState::Recovering
        }) {
            t.set_state(TabletState::MigratingOut);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::error::ReadError;
    use crate::{CleanerMode, ObjectStore, RejectRules, StoreConfig};

    fn store() -> ObjectStore {
        let mut config = StoreConfig::new(16 << 20);
        config.cleaner = CleanerMode::Manual;
        let s = ObjectStore::new(config).expect("store");
        s.add_tablet(1, 0, u64::MAX).expect("tablet");
        s
    }

    #[test]
    fn reclaim_fenced_tablet_keeps_the_objects_and_take_tablet_serves_them() {
        let s = store();
        let version = s.write(1, b"k", b"old", &RejectRules::default()).unwrap();
        s.prepare_migration(1, 0, u64::MAX).unwrap();
        assert_eq!(s.reclaim_fenced_tablet(1, 0, u64::MAX), Ok(true));
        let mut v = Vec::new();
        assert_eq!(
            s.read(1, b"k", &mut v),
            Err(ReadError::UnknownTablet),
            "a recovering tablet is not served"
        );
        // The target's newer write of the key, replayed, wins.
        assert_eq!(s.replay_object(1, b"k", b"new", version + 10), Ok(true));
        assert_eq!(s.replay_object(1, b"k", b"old", version), Ok(false));
        s.take_tablet(1, 0, u64::MAX).unwrap();
        assert_eq!(s.read(1, b"k", &mut v), Ok(version + 10));
        assert_eq!(v, b"new");
    }

    #[test]
    fn reclaim_fenced_tablet_of_a_normal_or_partial_tablet_is_refused() {
        let s = store();
        assert!(s.reclaim_fenced_tablet(1, 0, u64::MAX).is_err(), "normal");
        assert!(s.reclaim_fenced_tablet(1, 0, 10).is_err(), "partial");
        assert_eq!(s.reclaim_fenced_tablet(2, 0, 10), Ok(false), "absent");
    }

    #[test]
    fn refence_tablet_after_a_failed_replay_fences_it_again() {
        let s = store();
        s.write(1, b"k", b"v", &RejectRules::default()).unwrap();
        s.prepare_migration(1, 0, u64::MAX).unwrap();
        s.reclaim_fenced_tablet(1, 0, u64::MAX).unwrap();
        s.refence_tablet(1, 0, u64::MAX);
        let pulled = s.pull_key(1, b"k").unwrap();
        assert!(pulled.is_some(), "pulls read the fenced copy again");
    }

    #[test]
    fn prepare_migration_fences_a_recovered_tablet_as_a_new_source() {
        let s = ObjectStore::new(StoreConfig::new(16 << 20)).unwrap();
        s.add_recovering_tablet(1, 0, u64::MAX).unwrap();
        assert_eq!(s.replay_object(1, b"k", b"v", 7), Ok(true));
        s.raise_safe_version(8);
        let safe = s.prepare_migration(1, 0, u64::MAX).unwrap();
        assert!(safe >= 8, "{safe}");
        assert_eq!(s.pull_key(1, b"k").unwrap().map(|o| o.version), Some(7));
    }
}
