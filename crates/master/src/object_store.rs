//! The object store of one master: RAMCloud's object operations over the log and
//! the hash table (R§3, R§4.1, R Fig. 2).
//!
//! Every operation pins a log epoch for its duration, so cleaned memory is never
//! reused under it (L§6.3). Reads take no lock. A write holds the key's bucket lock
//! from reading the current version to publishing the new reference, so versions of
//! a key only grow and the log order of a key's entries matches their versions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use ramstore_index::HashTable;
use ramstore_log::entry::TabletStat;
use ramstore_log::{
    Appended, DeadObject, HeadMetadata, Log, LogConfig, LogRef, NewObject, ObjectView,
    MAX_KEY_BYTES, MAX_VALUE_BYTES,
};
use ramstore_wire::counter::{self, CounterText};

use crate::cleaner_thread::{Cleanable, CleanerThread};
use crate::config::{CleanerMode, StoreConfig};
use crate::error::{ReadError, WriteError};
use crate::tablets::{Access, Tablet, TabletMap};
use crate::ConfigError;
use ramstore_wire::RejectRules;

/// The key hash, defined once in `ramstore-wire` (docs/design.md §4).
pub use ramstore_wire::key_hash;

/// State the log reads when it opens a head segment.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Higher than every version of an object that was deleted (R§3.1).
    pub safe_version: AtomicU64,
    /// The largest version this master has given an object (a migration's safe
    /// version starts above it, K§2.3).
    pub max_version: AtomicU64,
    pub tablets: ArcSwap<TabletMap>,
}

impl HeadMetadata for Shared {
    fn safe_version(&self) -> u64 {
        self.safe_version.load(Ordering::SeqCst)
    }

    fn tablet_stats(&self, out: &mut Vec<TabletStat>) {
        out.extend(self.tablets.load().tablets.iter().map(|t| TabletStat {
            table_id: t.table_id,
            start_hash: t.start_hash,
            end_hash: t.end_hash,
            entry_count: t.entries(),
            bytes: t.bytes(),
        }));
    }
}

/// Everything the cleaner thread shares with request threads.
pub(crate) struct Inner {
    pub log: Log,
    pub index: HashTable,
    pub shared: Arc<Shared>,
    /// Serialises changes of the tablet map (never taken by object operations).
    pub tablet_changes: parking_lot::Mutex<()>,
}

impl Cleanable for Inner {
    fn clean_once(&self) -> bool {
        matches!(self.log.clean(self), Some((_, pass)) if pass.made_progress)
    }

    fn wants_cleaning(&self) -> bool {
        !matches!(self.log.cleaning_needed(), ramstore_log::CleanKind::None)
    }
}

/// The current entry of a key, found under its bucket lock.
struct Current {
    slot: ramstore_index::Slot,
    at: LogRef,
    version: u64,
    len: usize,
}

/// The value a write stores: borrowed from the caller, or computed (increments).
// The counter's text lives on the stack for one write: boxing it would put an
// allocation on every increment, and no collection holds these.
#[allow(clippy::large_enum_variant)]
enum NewValue<'a> {
    Borrowed(&'a [u8]),
    Counter(CounterText),
}

impl NewValue<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            NewValue::Borrowed(b) => b,
            NewValue::Counter(t) => t.as_bytes(),
        }
    }
}

/// One object returned by [`ObjectStore::enumerate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnumeratedObject {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub version: u64,
}

/// Statistics of a store.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoreStats {
    pub log: ramstore_log::LogStats,
    /// Objects in the hash table.
    pub objects: usize,
    /// Bytes of hash table allocated (buckets, locks, overflow chunks, free list).
    pub hash_table_bytes: usize,
    /// The most bytes of hash table that can be resident (`HashTable::
    /// resident_bound_bytes`): buckets and locks, plus 72 B per overflow bucket up
    /// to the overflow arena's high-water mark (emptied overflow buckets are reused,
    /// so this follows the peak of chains, not of churn). What is resident now is
    /// measured, in [`StoreResident::hash_table`].
    pub hash_table_resident_bound_bytes: usize,
    /// Overflow buckets linked into chains now.
    pub hash_table_overflow_buckets_in_use: usize,
    /// The most overflow buckets ever in use at once.
    pub hash_table_overflow_buckets_high_water: usize,
    /// Overflow buckets ever unlinked from emptied chain tails.
    pub hash_table_overflow_buckets_released: u64,
    /// Per-tablet live objects and bytes.
    pub tablets: Vec<TabletStat>,
}

/// How much of a store's two big mappings is resident right now (issue 17): what a
/// server subtracts from its process's resident set to find everything else.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreResident {
    /// Bytes of the seglet pool in memory (`SegletPool::resident_bytes`).
    pub log: Option<usize>,
    /// Bytes of the hash table in memory (`HashTable::resident_bytes`).
    pub hash_table: Option<usize>,
}

/// A weak reference to a store's log (see [`ObjectStore::log_handle`]).
#[derive(Clone)]
pub struct LogHandle(std::sync::Weak<Inner>);

impl LogHandle {
    /// Calls `f` with the log, or returns `None` once the store is gone.
    pub fn with<R>(&self, f: impl FnOnce(&Log) -> R) -> Option<R> {
        self.0.upgrade().map(|inner| f(&inner.log))
    }
}

impl std::fmt::Debug for LogHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogHandle")
    }
}

/// A master's object store. Thread-safe: share it with `Arc` and call from any number
/// of threads. Durability: an acknowledged write has been reported to the replica sink
/// of its `StoreConfig` (a no-op until replication exists: then writes live in DRAM
/// only).
pub struct ObjectStore {
    pub(crate) inner: Arc<Inner>,
    cleaner: Option<CleanerThread>,
    /// The head segment the last write landed in: a new one wakes the cleaner.
    last_head: std::sync::atomic::AtomicU64,
}

impl ObjectStore {
    /// Creates a store: allocates all log memory and the hash table now.
    pub fn new(config: StoreConfig) -> Result<Self, ConfigError> {
        let shared = Arc::new(Shared {
            safe_version: AtomicU64::new(1),
            max_version: AtomicU64::new(0),
            tablets: ArcSwap::from_pointee(TabletMap::default()),
        });
        let log_config = LogConfig {
            memory_bytes: config.memory_bytes,
            segment_bytes: config.segment_bytes,
            master_id: config.master_id,
            disk_expansion_factor: config.disk_expansion_factor,
            compaction: config.compaction,
            delete_reserve_fraction: config.delete_reserve_fraction,
            tombstone_share_for_combined: config.tombstone_share_for_combined,
            clean_ahead_segments: config.clean_ahead_segments,
            replicas: config.replicas.clone(),
            metadata: shared.clone(),
            clock: config.clock.clone(),
        };
        let log = Log::new(log_config)?;
        let buckets = config
            .hash_table_buckets
            .unwrap_or(config.memory_bytes / crate::config::DEFAULT_MEMORY_BYTES_PER_BUCKET)
            .max(1);
        let inner = Arc::new(Inner {
            log,
            index: HashTable::new(buckets),
            shared,
            tablet_changes: parking_lot::Mutex::new(()),
        });
        let cleaner = match config.cleaner {
            CleanerMode::Background { threads } => {
                let clock = config.clock.clone();
                Some(CleanerThread::start(inner.clone(), threads.max(1), clock))
            }
            CleanerMode::Manual => None,
        };
        Ok(Self {
            inner,
            cleaner,
            last_head: std::sync::atomic::AtomicU64::new(u64::MAX),
        })
    }

    /// The log (statistics, tests).
    pub fn log(&self) -> &Log {
        &self.inner.log
    }

    /// The clock this store runs on ([`StoreConfig::clock`]); the storage server
    /// built on it uses the same one.
    pub fn clock(&self) -> &Arc<dyn ramstore_clock::Clock> {
        &self.inner.log.config().clock
    }

    /// A handle on the log that does not keep the store alive: the replica manager
    /// holds it (the log holds the manager, so a strong reference would be a cycle).
    pub fn log_handle(&self) -> LogHandle {
        LogHandle(Arc::downgrade(&self.inner))
    }

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
            let tablet = Tablet::new(table_id, start_hash, end_hash);
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
        let mut next = map.without(table_id, outer_start, outer_end);
        for (s, e) in pieces {
            let tablet = Tablet::new(table_id, s, e);
            let (entries, bytes) = self.count_range(table_id, s, e);
            tablet.set_counts(entries, bytes);
            next = next.with(tablet);
        }
        self.inner.shared.tablets.store(Arc::new(next));
        Ok(())
    }

    /// Adds a tablet that crash recovery is about to fill (R§7.6): replay writes
    /// to it, clients get UNKNOWN_TABLET until [`Self::take_tablet`] hands it over.
    /// Idempotent for a tablet still recovering; a range overlapping any other
    /// owned tablet is refused (`BadTablet`).
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
                let tablet = Tablet::new(table_id, start_hash, end_hash);
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
        if !map
            .tablets
            .iter()
            .any(|t| t.table_id == table_id && t.start_hash == start_hash && t.end_hash == end_hash)
        {
            return;
        }
        self.inner
            .shared
            .tablets
            .store(Arc::new(map.without(table_id, start_hash, end_hash)));
        // Writers check ownership under their epoch pin; once every operation that
        // could have seen the old map is done, no new object of the tablet appears.
        self.inner.log.wait_for_operations();
        self.remove_range(table_id, start_hash, end_hash);
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

    /// The tablets owned now.
    pub fn tablets(&self) -> Arc<TabletMap> {
        self.inner.shared.tablets.load_full()
    }

    /// A hint that `key` will be read or written soon: starts loading its hash
    /// bucket and the bucket's lock into the cache, so a batch of operations (a
    /// pipeline of Redis commands) overlaps those cache misses instead of taking
    /// them one after another, as the cleaner does (R§11.3). Changes nothing.
    pub fn prefetch(&self, key: &[u8]) {
        self.inner.index.prefetch(key_hash(key));
    }

    /// Reads an object: calls `f` with a view of it (value pieces are read in place,
    /// without a copy) and returns what `f` returns.
    pub fn read_with<R>(
        &self,
        table_id: u64,
        key: &[u8],
        f: impl FnOnce(&ObjectView<'_>) -> R,
    ) -> Result<R, ReadError> {
        self.read_with_as(table_id, key, Access::Client, f)
    }

    /// [`Self::read_with`] for `access`: a client's read of a migrating-in tablet
    /// is refused with `Migrating` (the migration's gate decides, K§2.3).
    pub(crate) fn read_with_as<R>(
        &self,
        table_id: u64,
        key: &[u8],
        access: Access,
        f: impl FnOnce(&ObjectView<'_>) -> R,
    ) -> Result<R, ReadError> {
        if key.len() > MAX_KEY_BYTES {
            return Err(ReadError::KeyTooLarge(key.len()));
        }
        let hash = key_hash(key);
        match self.inner.shared.tablets.load().find(table_id, hash) {
            None => return Err(ReadError::UnknownTablet),
            Some(t) => t.admits(access).map_err(ReadError::from)?,
        }
        let log = &self.inner.log;
        let _pin = log.pin();
        let mut found = None;
        self.inner
            .index
            .lookup(hash, |r| match log.object(LogRef(r)) {
                Ok(view) if view.table_id() == table_id && view.key_eq(key) => {
                    found = Some(view);
                    true
                }
                _ => false,
            });
        let view = found.ok_or(ReadError::ObjectDoesntExist)?;
        debug_assert!(view.checksum_ok(), "object entry checksum mismatch");
        Ok(f(&view))
    }

    /// Reads an object's value into `value` (replacing its contents) and returns its
    /// version. Reuses `value`'s capacity: no allocation when it is large enough.
    pub fn read(&self, table_id: u64, key: &[u8], value: &mut Vec<u8>) -> Result<u64, ReadError> {
        self.read_with(table_id, key, |view| {
            value.clear();
            view.copy_value(value);
            view.version()
        })
    }

    /// Writes an object; returns its new version.
    pub fn write(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: &RejectRules,
    ) -> Result<u64, WriteError> {
        self.write_as(table_id, key, value, rules, Access::Client)
    }

    /// [`Self::write`] for `access` (see [`Self::read_with_as`]).
    pub(crate) fn write_as(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: &RejectRules,
        access: Access,
    ) -> Result<u64, WriteError> {
        if value.len() > MAX_VALUE_BYTES {
            return Err(WriteError::ValueTooLarge(value.len()));
        }
        self.update(table_id, key, rules, (access, None), |_| {
            Ok(NewValue::Borrowed(value))
        })
    }

    /// Puts back an object as it was in a log being reloaded (cold start, recovery
    /// replay, R§7.6): with exactly `version`, replacing any current object. The
    /// caller keeps only the newest version of each key and raises the safe version
    /// ([`ObjectStore::raise_safe_version`]) above every version it saw.
    pub fn restore(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        version: u64,
    ) -> Result<(), WriteError> {
        if value.len() > MAX_VALUE_BYTES {
            return Err(WriteError::ValueTooLarge(value.len()));
        }
        self.update(
            table_id,
            key,
            &RejectRules::default(),
            (Access::Replay, Some(version)),
            |_| Ok(NewValue::Borrowed(value)),
        )
        .map(|_| ())
    }

    /// Replays an object of a crashed master's log (R§7.6): it becomes the key's
    /// object, with exactly `version`, unless the key already holds a version at
    /// least as new (entries arrive in any order). Returns whether it was applied.
    /// A replaced object dies as in any overwrite (a tombstone is logged for it),
    /// so the recovered log is as safe to clean as one written by clients.
    pub fn replay_object(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        version: u64,
    ) -> Result<bool, WriteError> {
        if value.len() > MAX_VALUE_BYTES {
            return Err(WriteError::ValueTooLarge(value.len()));
        }
        let applied = self.update(
            table_id,
            key,
            &RejectRules::default(),
            (Access::Replay, Some(version)),
            |current| match current {
                Some(c) if c.version() >= version => Err(WriteError::WrongVersion {
                    current: c.version(),
                }),
                _ => Ok(NewValue::Borrowed(value)),
            },
        );
        match applied {
            Ok(_) => Ok(true),
            Err(WriteError::WrongVersion { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Replays a tombstone of a crashed master's log (R§7.6): the key's object
    /// dies if its version is at most `version`. Returns whether one died.
    pub fn replay_tombstone(
        &self,
        table_id: u64,
        key: &[u8],
        version: u64,
    ) -> Result<bool, WriteError> {
        let rules = RejectRules {
            given_version: version,
            version_gt_given: true,
            ..RejectRules::default()
        };
        match self.remove_as(table_id, key, &rules, Access::Replay) {
            Ok(removed) => Ok(removed.is_some()),
            Err(WriteError::WrongVersion { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Makes every later write of a new object get a version of at least
    /// `version` (R§3.1: versions never go back, also across a reload).
    pub fn raise_safe_version(&self, version: u64) {
        self.inner
            .shared
            .safe_version
            .fetch_max(version, Ordering::SeqCst);
    }

    /// Adds `delta` to an object whose value is an integer in decimal text (a
    /// missing object counts as 0 and is created), and stores the sum as decimal
    /// text: the form Redis's INCR reads and writes ([`ramstore_wire::counter`]),
    /// so native and Redis counters are one. Returns the new value and version.
    /// A value that is not such an integer is `NotNumeric`; a sum outside i64 is
    /// `Overflow`. Atomic: the read, the check of `rules` and the write happen
    /// under the key's bucket lock.
    pub fn increment_i64(
        &self,
        table_id: u64,
        key: &[u8],
        delta: i64,
        rules: &RejectRules,
    ) -> Result<(i64, u64), WriteError> {
        self.increment_i64_as(table_id, key, delta, rules, Access::Client)
    }

    /// [`Self::increment_i64`] for `access` (see [`Self::read_with_as`]).
    pub(crate) fn increment_i64_as(
        &self,
        table_id: u64,
        key: &[u8],
        delta: i64,
        rules: &RejectRules,
        access: Access,
    ) -> Result<(i64, u64), WriteError> {
        let mut new = 0;
        let version = self.update(table_id, key, rules, (access, None), |current| {
            let old = match current {
                Some(view) => counter_text(view, counter::parse_i64)?,
                None => 0,
            };
            new = old.checked_add(delta).ok_or(WriteError::Overflow)?;
            Ok(NewValue::Counter(CounterText::from_i64(new)))
        })?;
        Ok((new, version))
    }

    /// Adds `delta` to an object whose value is a number in decimal text (a
    /// missing object counts as 0.0), and stores the sum as Redis's INCRBYFLOAT
    /// does ([`ramstore_wire::counter`]). A non-finite result is refused as an
    /// overflow.
    pub fn increment_f64(
        &self,
        table_id: u64,
        key: &[u8],
        delta: f64,
        rules: &RejectRules,
    ) -> Result<(f64, u64), WriteError> {
        self.increment_f64_as(table_id, key, delta, rules, Access::Client)
    }

    /// [`Self::increment_f64`] for `access` (see [`Self::read_with_as`]).
    pub(crate) fn increment_f64_as(
        &self,
        table_id: u64,
        key: &[u8],
        delta: f64,
        rules: &RejectRules,
        access: Access,
    ) -> Result<(f64, u64), WriteError> {
        let mut new = 0.0;
        let version = self.update(table_id, key, rules, (access, None), |current| {
            let old = match current {
                Some(view) => counter_text(view, counter::parse_f64)?,
                None => 0.0,
            };
            new = old + delta;
            if !new.is_finite() {
                return Err(WriteError::Overflow);
            }
            // -0 is stored as "0": answer the number stored.
            if new == 0.0 {
                new = 0.0;
            }
            Ok(NewValue::Counter(CounterText::from_f64(new)))
        })?;
        Ok((new, version))
    }

    /// The write path shared by writes and increments: under the key's bucket lock,
    /// find the current object, check the rules, compute the value, append it with a
    /// tombstone for the old version, and publish it. Returns the new version.
    fn update<'v>(
        &self,
        table_id: u64,
        key: &[u8],
        rules: &RejectRules,
        (access, forced_version): (Access, Option<u64>),
        compute: impl FnOnce(Option<&ObjectView<'_>>) -> Result<NewValue<'v>, WriteError>,
    ) -> Result<u64, WriteError> {
        if key.len() > MAX_KEY_BYTES {
            return Err(WriteError::KeyTooLarge(key.len()));
        }
        let hash = key_hash(key);
        let inner = &*self.inner;
        let log = &inner.log;
        let _pin = log.pin();
        let (appended, version) = {
            let mut guard = inner.index.lock(hash);
            let tablets = inner.shared.tablets.load();
            let tablet = tablets
                .find(table_id, hash)
                .ok_or(WriteError::UnknownTablet)?;
            tablet.admits(access).map_err(WriteError::from)?;
            let mut current_view = None;
            let current = guard
                .find(|r| match log.object(LogRef(r)) {
                    Ok(view) if view.table_id() == table_id && view.key_eq(key) => {
                        current_view = Some(view);
                        true
                    }
                    _ => false,
                })
                .and_then(|(slot, r)| {
                    current_view.as_ref().map(|v| Current {
                        slot,
                        at: LogRef(r),
                        version: v.version(),
                        len: v.entry_len(),
                    })
                });
            rules.check(current.as_ref().map(|c| c.version))?;
            let value = compute(current_view.as_ref())?;
            let value = value.bytes();
            let version = match (&current, forced_version) {
                (_, Some(v)) => v,
                (Some(c), None) => c.version + 1,
                (None, None) => inner.shared.safe_version.load(Ordering::SeqCst),
            };
            // A migration's safe version must exceed every version issued (K§2.3);
            // the store-wide maximum is written only when it grows.
            if inner.shared.max_version.load(Ordering::Relaxed) < version {
                inner
                    .shared
                    .max_version
                    .fetch_max(version, Ordering::SeqCst);
            }
            let appended = log.append_object(
                &NewObject {
                    table_id,
                    key,
                    version,
                    value,
                },
                current.as_ref().map(|c| DeadObject {
                    version: c.version,
                    location: c.at,
                }),
            );
            let appended = match appended {
                Ok(a) => a,
                Err(e) => {
                    self.kick_cleaner();
                    return Err(e.into());
                }
            };
            let new_len = object_len(log, appended.entry);
            match &current {
                Some(c) => {
                    guard.replace(c.slot, appended.entry.0);
                    log.object_died(c.at, c.len);
                    tablet.object_removed(c.len);
                }
                None => {
                    if guard.insert(appended.entry.0).is_err() {
                        // The hash table's overflow arena is exhausted: the appended
                        // object was never visible and is simply dead.
                        log.object_died(appended.entry, new_len);
                        return Err(WriteError::NoSpace);
                    }
                }
            }
            tablet.object_added(new_len);
            (appended, version)
        };
        log.replicate(&appended);
        self.note_head(appended.segment_id);
        Ok(version)
    }

    /// Deletes an object; returns the version it had, or `None` if there was none.
    pub fn remove(
        &self,
        table_id: u64,
        key: &[u8],
        rules: &RejectRules,
    ) -> Result<Option<u64>, WriteError> {
        self.remove_as(table_id, key, rules, Access::Client)
    }

    /// [`Self::remove`] for `access`: replay reaches a tablet that is still being
    /// recovered; see also [`Self::read_with_as`].
    pub(crate) fn remove_as(
        &self,
        table_id: u64,
        key: &[u8],
        rules: &RejectRules,
        access: Access,
    ) -> Result<Option<u64>, WriteError> {
        if key.len() > MAX_KEY_BYTES {
            return Err(WriteError::KeyTooLarge(key.len()));
        }
        let hash = key_hash(key);
        let inner = &*self.inner;
        let log = &inner.log;
        let _pin = log.pin();
        let (appended, version): (Appended, u64) = {
            let mut guard = inner.index.lock(hash);
            let tablets = inner.shared.tablets.load();
            let tablet = tablets
                .find(table_id, hash)
                .ok_or(WriteError::UnknownTablet)?;
            tablet.admits(access).map_err(WriteError::from)?;
            let mut current = None;
            let found = guard.find(|r| match log.object(LogRef(r)) {
                Ok(view) if view.table_id() == table_id && view.key_eq(key) => {
                    current = Some((view.version(), view.entry_len()));
                    true
                }
                _ => false,
            });
            rules.check(current.map(|(v, _)| v))?;
            let (Some((slot, r)), Some((version, len))) = (found, current) else {
                return Ok(None);
            };
            // Raise the safe version before the tombstone exists, so that any head
            // opened from now on records it (R§3.1): versions of this key stay
            // monotonic even after the tombstone is cleaned.
            let safe = &inner.shared.safe_version;
            let before = safe.fetch_max(version + 1, Ordering::SeqCst);
            let appended = match log.append_tombstone(
                table_id,
                key,
                DeadObject {
                    version,
                    location: LogRef(r),
                },
            ) {
                Ok(a) => a,
                Err(e) => {
                    // Nothing was deleted: undo our raise unless another delete has
                    // raised it further since (a higher value is never wrong).
                    if before < version + 1 {
                        let _ = safe.compare_exchange(
                            version + 1,
                            before,
                            Ordering::SeqCst,
                            Ordering::SeqCst,
                        );
                    }
                    self.kick_cleaner();
                    return Err(e.into());
                }
            };
            guard.remove(slot);
            log.object_died(LogRef(r), len);
            tablet.object_removed(len);
            (appended, version)
        };
        log.replicate(&appended);
        self.note_head(appended.segment_id);
        Ok(Some(version))
    }

    /// Reads several objects; one result per key, in order.
    pub fn multi_read(&self, items: &[(u64, &[u8])]) -> Vec<Result<(Vec<u8>, u64), ReadError>> {
        items
            .iter()
            .map(|&(table_id, key)| {
                let mut value = Vec::new();
                self.read(table_id, key, &mut value).map(|v| (value, v))
            })
            .collect()
    }

    /// Writes several objects; one result per item, in order.
    pub fn multi_write(&self, items: &[MultiWrite<'_>]) -> Vec<Result<u64, WriteError>> {
        items
            .iter()
            .map(|w| self.write(w.table_id, w.key, w.value, &w.rules))
            .collect()
    }

    /// Deletes several objects; one result per item, in order.
    pub fn multi_remove(
        &self,
        items: &[(u64, &[u8], RejectRules)],
    ) -> Vec<Result<Option<u64>, WriteError>> {
        items
            .iter()
            .map(|(table_id, key, rules)| self.remove(*table_id, key, rules))
            .collect()
    }

    /// Returns the next batch of objects of `table_id` in the tablet holding hash
    /// `cursor`, starting at that hash, and the cursor to continue from (`None` when
    /// the end of the key-hash space is reached; the next cursor may belong to
    /// another master). Batches end at hash-bucket boundaries after at least
    /// `max_bytes` of keys and values, so every object that exists for the whole
    /// enumeration is returned exactly once, even while writes and cleaning go on:
    /// such an object never leaves its bucket, a bucket is read whole, and entries of
    /// other buckets that the walk of a bucket may pass are skipped.
    pub fn enumerate(
        &self,
        table_id: u64,
        cursor: u64,
        max_bytes: usize,
        out: &mut Vec<EnumeratedObject>,
    ) -> Result<Option<u64>, ReadError> {
        let tablets = self.inner.shared.tablets.load();
        let tablet = tablets
            .find_serving(table_id, cursor)
            .ok_or(ReadError::UnknownTablet)?;
        self.scan(table_id, cursor, tablet.end_hash, max_bytes, out)
    }

    /// The bucket-cursor scan of [`Self::enumerate`] over `[cursor, end]`, which
    /// the caller has checked lies in a tablet it may read (also a migration's
    /// pulls, K§2.3).
    pub(crate) fn scan(
        &self,
        table_id: u64,
        cursor: u64,
        end: u64,
        max_bytes: usize,
        out: &mut Vec<EnumeratedObject>,
    ) -> Result<Option<u64>, ReadError> {
        let index = &self.inner.index;
        let log = &self.inner.log;
        let _pin = log.pin();
        let mut bytes = 0usize;
        let mut bucket = index.bucket_of(cursor);
        let mut refs = Vec::new();
        loop {
            refs.clear();
            index.for_each_in_bucket(bucket, |r| refs.push(LogRef(r)));
            for &r in &refs {
                let Ok(view) = log.object(r) else { continue };
                if view.table_id() != table_id {
                    continue;
                }
                let mut key = Vec::with_capacity(view.key_len());
                view.copy_key(&mut key);
                let hash = key_hash(&key);
                // The walk may pass entries of other buckets (an overflow bucket
                // unlinked and reused by another chain while the walk stood in it,
                // `ramstore_index` docs); they are returned with their own bucket,
                // or the batch would hold them twice.
                if hash < cursor || hash > end || index.bucket_of(hash) != bucket {
                    continue;
                }
                let mut value = Vec::with_capacity(view.value_len());
                view.copy_value(&mut value);
                bytes += key.len() + value.len();
                out.push(EnumeratedObject {
                    key,
                    value,
                    version: view.version(),
                });
            }
            let (_, last) = index.bucket_hash_range(bucket);
            if last >= end {
                return Ok(end.checked_add(1));
            }
            if bytes >= max_bytes {
                return Ok(Some(last + 1));
            }
            bucket += 1;
        }
    }

    /// Runs one cleaning pass on the calling thread: `kind` picks the cleaner, or the
    /// balancer decides when `None`. Returns what was done, if anything.
    pub fn clean_now(
        &self,
        kind: Option<ramstore_log::CleanKind>,
    ) -> Option<(ramstore_log::CleanKind, ramstore_log::PassOutcome)> {
        use ramstore_log::CleanKind;
        let inner = &*self.inner;
        inner.log.reclaim();
        let result = match kind {
            None => inner.log.clean(inner),
            Some(CleanKind::Compaction) => {
                inner.log.compact(inner).map(|o| (CleanKind::Compaction, o))
            }
            Some(CleanKind::Combined) => inner
                .log
                .clean_combined(inner)
                .map(|o| (CleanKind::Combined, o)),
            Some(CleanKind::None) => None,
        };
        inner.log.reclaim();
        result
    }

    /// Wakes the cleaner when writes reach a new head (the balancer's inputs
    /// change by at most a segment between heads).
    fn note_head(&self, segment_id: u64) {
        if self.last_head.load(Ordering::Relaxed) != segment_id {
            self.last_head.store(segment_id, Ordering::Relaxed);
            self.kick_cleaner();
        }
    }

    fn kick_cleaner(&self) {
        if let Some(c) = &self.cleaner {
            c.wake();
        }
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> StoreStats {
        let mut tablets = Vec::new();
        self.inner.shared.tablet_stats(&mut tablets);
        StoreStats {
            log: self.inner.log.stats(),
            objects: self.inner.index.len(),
            hash_table_bytes: self.inner.index.memory_bytes(),
            hash_table_resident_bound_bytes: self.inner.index.resident_bound_bytes(),
            hash_table_overflow_buckets_in_use: self.inner.index.overflow_buckets_in_use(),
            hash_table_overflow_buckets_high_water: self.inner.index.overflow_buckets_high_water(),
            hash_table_overflow_buckets_released: self
                .inner
                .index
                .overflow_buckets_released_total(),
            tablets,
        }
    }

    /// The resident bytes of the log and the hash table: asks the kernel which of
    /// their pages are in memory (about one system call per 16 MiB; no lock, no
    /// allocation). `None` parts where it cannot be asked.
    pub fn resident(&self) -> StoreResident {
        StoreResident {
            log: self.inner.log.pool().resident_bytes(),
            hash_table: self.inner.index.resident_bytes(),
        }
    }
}

/// One item of [`ObjectStore::multi_write`].
#[derive(Debug, Clone, Copy)]
pub struct MultiWrite<'a> {
    pub table_id: u64,
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub rules: RejectRules,
}

/// The longest stored value an increment reads as a number: longer than any
/// text [`CounterText`] writes, so every counter either front end made fits.
const MAX_COUNTER_TEXT_BYTES: usize = 400;

/// The number in `view`'s value, read with `parse` (decimal text, see
/// [`ramstore_wire::counter`]), or `NotNumeric`. Copies the value into a stack
/// buffer: a value may span seglets, and an increment must not allocate.
fn counter_text<T>(
    view: &ObjectView<'_>,
    parse: impl FnOnce(&[u8]) -> Option<T>,
) -> Result<T, WriteError> {
    let len = view.value_len();
    if len > MAX_COUNTER_TEXT_BYTES {
        return Err(WriteError::NotNumeric(len));
    }
    let mut buf = [0u8; MAX_COUNTER_TEXT_BYTES];
    let mut at = 0;
    view.value_pieces(|piece| {
        // The pieces add up to `len`, checked above to fit.
        let end = (at + piece.len()).min(buf.len());
        buf[at..end].copy_from_slice(&piece[..end - at]);
        at = end;
    });
    parse(&buf[..at]).ok_or(WriteError::NotNumeric(len))
}

fn object_len(log: &Log, at: LogRef) -> usize {
    // The entry was just appended by this thread: it parses.
    log.object(at).map_or(0, |v| v.entry_len())
}

impl ramstore_log::Relocator for Inner {
    fn hash(&self, object: &ObjectView<'_>) -> u64 {
        hash_of(object)
    }

    fn prefetch(&self, hash: u64) {
        self.index.prefetch(hash);
    }

    fn is_live(&self, object: &ObjectView<'_>, hash: u64) -> bool {
        // Comparing references is comparing keys: a log position holds one object,
        // so an entry of another bucket (a lookup can pass some) never names it.
        let at = object.location().0;
        self.index.lookup(hash, |r| r == at).is_some()
    }

    fn relocate(
        &self,
        object: &ObjectView<'_>,
        hash: u64,
        copy: &mut dyn FnMut() -> LogRef,
    ) -> bool {
        let mut guard = self.index.lock(hash);
        match guard.find_ref(object.location().0) {
            Some(slot) => {
                let new = copy();
                guard.replace(slot, new.0);
                true
            }
            None => false,
        }
    }
}

fn hash_of(object: &ObjectView<'_>) -> u64 {
    match object.key_slice() {
        Some(key) => key_hash(key),
        None => {
            let mut key = Vec::with_capacity(object.key_len());
            object.copy_key(&mut key);
            key_hash(&key)
        }
    }
}

impl Drop for ObjectStore {
    fn drop(&mut self) {
        if let Some(c) = self.cleaner.take() {
            c.stop();
        }
    }
}
