//! Tablet ownership of an object store: taking, splitting, handing over and
//! dropping tablets (R§5.1, R§7.6). Changes of the tablet map are serialised by
//! `Inner::tablet_changes`; object operations never take that lock.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ramstore_log::{LogRef, TombstoneHold};

use super::{hash_of, key_hash, ObjectStore};
use crate::tablets::Tablet;
use crate::ConfigError;

impl ObjectStore {
    /// Takes ownership of a tablet. Idempotent: taking an owned tablet again is a
    /// no-op. Fails if it overlaps a different tablet of the same table.
    pub fn add_tablet(
        &self,
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
    ) -> Result<(), ConfigError> {
        if start_hash > end_hash {
            return Err(ConfigError::BadTablet {
                table_id,
                start_hash,
                end_hash,
            });
        }
        let _changing = self.inner.tablet_changes.lock();
        let map = self.inner.shared.tablets.load();
        let bad = ConfigError::BadTablet {
            table_id,
            start_hash,
            end_hash,
        };
        let Some(t) = map.overlaps(table_id, start_hash, end_hash) else {
            // A fresh tablet's tenure starts no later than the head: every entry
            // of it is appended from now on. (A range that was here before comes
            // back only through recovery or migration, which roll the head first.)
            let tablet =
                Tablet::new(table_id, start_hash, end_hash).since(self.log().head_segment_id());
            self.inner.shared.tablets.store(Arc::new(map.with(tablet)));
            return Ok(());
        };
        if t.start_hash == start_hash && t.end_hash == end_hash {
            return Ok(());
        }
        if !(t.start_hash <= start_hash && end_hash <= t.end_hash) {
            return Err(bad);
        }
        // A range inside an owned tablet: the coordinator split the tablet (R§3).
        // Split ours to match; the objects stay where they are.
        let (outer_start, outer_end) = (t.start_hash, t.end_hash);
        let mut pieces = vec![(start_hash, end_hash)];
        if outer_start < start_hash {
            pieces.push((outer_start, start_hash - 1));
        }
        if end_hash < outer_end {
            pieces.push((end_hash + 1, outer_end));
        }
        // Only the smaller pieces' buckets are walked: the largest piece's
        // counts are the tablet's less theirs (issue 20: walking every piece
        // walked the whole tablet, a stall of seconds at a GiB, on the thread
        // that answers the split).
        let largest = (0..pieces.len())
            .max_by_key(|&i| pieces[i].1 - pieces[i].0)
            .unwrap_or(0);
        let counts: Vec<Option<(u64, u64)>> = pieces
            .iter()
            .enumerate()
            .map(|(i, &(s, e))| (i != largest).then(|| self.count_range(table_id, s, e)))
            .collect();
        let (other_entries, other_bytes) = counts
            .iter()
            .flatten()
            .fold((0u64, 0u64), |(n, b), &(pn, pb)| (n + pn, b + pb));
        let mut next = map.without(table_id, outer_start, outer_end);
        for (&(s, e), count) in pieces.iter().zip(counts) {
            // A piece inherits the tablet's tenure (R§3: objects stay in place).
            let tablet = Tablet::new(table_id, s, e).since(t.ctime);
            // Every piece of a migrating-in range keeps its deletes' tombstones.
            tablet.set_tombstone_hold(t.tombstone_hold());
            let (entries, bytes) = count.unwrap_or((
                t.entries().saturating_sub(other_entries),
                t.bytes().saturating_sub(other_bytes),
            ));
            tablet.set_counts(entries, bytes);
            next = next.with(tablet);
        }
        self.inner.shared.tablets.store(Arc::new(next));
        Ok(())
    }

    /// Starts a new tenure of some ranges on this master (design notes "Tablet
    /// ctime", issue 20) and returns its ctime: every entry appended from now
    /// on — and so every entry of a tablet added after this call — lies in a
    /// segment whose id is at least the answer, while every entry of an
    /// earlier tenure here (of a range dropped since) lies below it. The head
    /// is rolled only if it was open when such a drop finished: a head
    /// opened after every drop holds no entry of an earlier tenure, and each
    /// roll costs a segment on every backup. `NoSpaceForTenure` if a roll is
    /// needed and not even the emergency reserve gives a head.
    pub fn begin_tenure(&self) -> Result<u64, ConfigError> {
        let floor = self.inner.departed_floor.load(Ordering::Acquire);
        if self.log().head_segment_id() < floor && !self.log().roll_head_now() {
            return Err(ConfigError::NoSpaceForTenure);
        }
        let ctime = self.log().head_segment_id();
        debug_assert!(ctime >= floor, "a tenure must start above every drop");
        Ok(ctime)
    }

    /// A lower bound of the ctime [`Self::begin_tenure`] gives from now on,
    /// for any range this master does not hold now (the coordinator records
    /// it before a migration moves a range here): the head's id, or the
    /// departed floor if that is higher (then the tenure's roll reaches it).
    pub fn tenure_floor(&self) -> u64 {
        self.log()
            .head_segment_id()
            .max(self.inner.departed_floor.load(Ordering::Acquire))
    }

    /// The ctime of the tablet exactly `[start_hash, end_hash]` of `table_id`
    /// (see [`Tablet::ctime`]); `None` if no such tablet is here.
    pub fn tablet_ctime(&self, table_id: u64, start_hash: u64, end_hash: u64) -> Option<u64> {
        let map = self.inner.shared.tablets.load();
        map.tablets
            .iter()
            .find(|t| {
                t.table_id == table_id && t.start_hash == start_hash && t.end_hash == end_hash
            })
            .map(|t| t.ctime)
    }

    /// Adds a tablet that crash recovery is about to fill (R§7.6): replay writes
    /// to it, clients get UNKNOWN_TABLET until [`Self::take_tablet`] hands it over.
    /// Idempotent for a tablet still recovering; a range overlapping any other
    /// owned tablet is refused (`BadTablet`). Its ctime is the current head's
    /// id: the caller starts the tenure first ([`Self::begin_tenure`]).
    pub fn add_recovering_tablet(
        &self,
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
    ) -> Result<(), ConfigError> {
        let bad = ConfigError::BadTablet {
            table_id,
            start_hash,
            end_hash,
        };
        if start_hash > end_hash {
            return Err(bad);
        }
        let _changing = self.inner.tablet_changes.lock();
        let map = self.inner.shared.tablets.load();
        match map.overlaps(table_id, start_hash, end_hash) {
            None => {
                let tablet =
                    Tablet::new(table_id, start_hash, end_hash).since(self.log().head_segment_id());
                tablet.set_recovering(true);
                self.inner.shared.tablets.store(Arc::new(map.with(tablet)));
                Ok(())
            }
            Some(t)
                if t.start_hash == start_hash && t.end_hash == end_hash && t.is_recovering() =>
            {
                Ok(())
            }
            Some(_) => Err(bad),
        }
    }

    /// The coordinator gives this master the tablet (TakeTabletOwnership): a
    /// recovered tablet starts serving; otherwise as [`Self::add_tablet`].
    pub fn take_tablet(
        &self,
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
    ) -> Result<(), ConfigError> {
        {
            let _changing = self.inner.tablet_changes.lock();
            let map = self.inner.shared.tablets.load();
            if let Some(t) = map.overlaps(table_id, start_hash, end_hash) {
                if t.start_hash == start_hash && t.end_hash == end_hash && t.is_recovering() {
                    t.set_recovering(false);
                    return Ok(());
                }
            }
        }
        self.add_tablet(table_id, start_hash, end_hash)
    }

    /// Splits the owned tablet holding `split_hash` so that a tablet starts there.
    /// Idempotent; `BadTablet` if no owned tablet holds the hash.
    pub fn split_tablet(&self, table_id: u64, split_hash: u64) -> Result<(), ConfigError> {
        let map = self.inner.shared.tablets.load_full();
        let Some(t) = map.find(table_id, split_hash) else {
            return Err(ConfigError::BadTablet {
                table_id,
                start_hash: split_hash,
                end_hash: split_hash,
            });
        };
        if t.start_hash == split_hash {
            return Ok(());
        }
        self.add_tablet(table_id, split_hash, t.end_hash)
    }

    /// Live objects and their entry bytes in a hash range of a table (a scan of the
    /// range's buckets; used when tablets split, which is rare).
    fn count_range(&self, table_id: u64, start_hash: u64, end_hash: u64) -> (u64, u64) {
        let index = &self.inner.index;
        let log = &self.inner.log;
        let _pin = log.pin();
        let (mut entries, mut bytes) = (0u64, 0u64);
        let mut bucket = index.bucket_of(start_hash);
        loop {
            index.for_each_in_bucket(bucket, |r| {
                let Ok(view) = log.object(LogRef(r)) else {
                    return;
                };
                let hash = hash_of(&view);
                // The walk may pass entries of other buckets (reused overflow
                // buckets, `ramstore_index` docs): count each in its own bucket only.
                if view.table_id() == table_id
                    && (start_hash..=end_hash).contains(&hash)
                    && index.bucket_of(hash) == bucket
                {
                    entries += 1;
                    bytes += view.entry_len() as u64;
                }
            });
            let (_, last) = index.bucket_hash_range(bucket);
            if last >= end_hash || bucket + 1 == index.bucket_count() {
                return (entries, bytes);
            }
            bucket += 1;
        }
    }

    /// Gives up a tablet and frees its objects. Idempotent.
    pub fn drop_tablet(&self, table_id: u64, start_hash: u64, end_hash: u64) {
        let _changing = self.inner.tablet_changes.lock();
        let map = self.inner.shared.tablets.load();
        let Some(tablet) = map.tablets.iter().find(|t| {
            t.table_id == table_id && t.start_hash == start_hash && t.end_hash == end_hash
        }) else {
            return;
        };
        // Its objects die here: no tombstone of the range is needed any more.
        self.release_hold(tablet.take_tombstone_hold());
        self.inner
            .shared
            .tablets
            .store(Arc::new(map.without(table_id, start_hash, end_hash)));
        // Writers check ownership under their epoch pin; once every operation that
        // could have seen the old map is done, no new object of the tablet appears.
        self.inner.log.wait_for_operations();
        self.remove_range(table_id, start_hash, end_hash);
        // No entry of the range is appended any more: all of this tenure's are
        // in segments below the log's next id (design notes "Tablet ctime").
        self.inner
            .departed_floor
            .fetch_max(self.inner.log.next_segment_id(), Ordering::AcqRel);
    }

    /// The migration into `[start_hash, end_hash]` of `table_id` is recorded done
    /// by the coordinator (or was abandoned): deletes of its keys no longer need
    /// tombstones that outlive cleaning (K§2.3.4), and those written so far may
    /// die as ordinary ones. Idempotent; covers every tablet in the range (a
    /// split one included).
    pub fn release_migration_hold(&self, table_id: u64, start_hash: u64, end_hash: u64) {
        let map = self.inner.shared.tablets.load();
        for t in &map.tablets {
            if t.table_id == table_id && start_hash <= t.end_hash && t.start_hash <= end_hash {
                self.release_hold(t.take_tombstone_hold());
            }
        }
    }

    fn release_hold(&self, hold: u64) {
        if let Some(hold) = TombstoneHold::from_id(hold) {
            self.inner.log.release_tombstones(hold);
        }
    }

    fn remove_range(&self, table_id: u64, start_hash: u64, end_hash: u64) {
        let index = &self.inner.index;
        let log = &self.inner.log;
        let mut victims = Vec::new();
        let mut bucket = index.bucket_of(start_hash);
        loop {
            let _pin = log.pin();
            victims.clear();
            index.for_each_in_bucket(bucket, |r| victims.push(LogRef(r)));
            for &r in &victims {
                let Ok(view) = log.object(r) else { continue };
                if view.table_id() != table_id {
                    continue;
                }
                let mut key = Vec::with_capacity(view.key_len());
                view.copy_key(&mut key);
                let hash = key_hash(&key);
                // An entry of another bucket (seen through a reused overflow
                // bucket) is dealt with when its own bucket is swept.
                if !(start_hash..=end_hash).contains(&hash) || index.bucket_of(hash) != bucket {
                    continue;
                }
                let mut guard = index.lock(hash);
                if let Some(slot) = guard.find_ref(r.0) {
                    guard.remove(slot);
                    log.object_died(r, view.entry_len());
                    // If the tablet comes back, its keys must not reuse versions.
                    self.inner
                        .shared
                        .safe_version
                        .fetch_max(view.version() + 1, Ordering::SeqCst);
                }
            }
            let (_, last) = index.bucket_hash_range(bucket);
            if last >= end_hash || bucket + 1 == index.bucket_count() {
                break;
            }
            bucket += 1;
        }
    }
}
