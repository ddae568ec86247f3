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
use ramstore_log::{Cleaner, HeadMetadata, Log, LogConfig, LogRef, ObjectView, MAX_KEY_BYTES};

use crate::cleaner_thread::{Cleanable, CleanerThread};
use crate::config::{CleanerMode, StoreConfig};
use crate::error::ReadError;
use crate::tablets::{Access, TabletMap};
use crate::ConfigError;
use ramstore_wire::RejectRules;

// The operations of `ObjectStore`, one family per file; each adds an `impl
// ObjectStore` block and reaches the store's private state as a child module.
mod enumerate;
mod exactly_once;
mod expire;
mod multi;
mod ownership;
mod relocation;
mod remove;
mod tx_records;
pub use tx_records::{replayed_tx_record, ReplayedPrepared, ReplayedTxRecord, TxRecordKey};
mod write;

pub use exactly_once::OnceUpdate;
pub use expire::{ExpireCondition, ExpireTick, EXPIRE_BUCKETS_PER_TICK, EXPIRE_SAMPLE_PER_TICK};
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
    /// Above every segment that held an entry of a tablet this master has
    /// dropped (the log's next segment id when the drop finished): a tenure
    /// begun with the head below it rolls the head first (design notes
    /// "Tablet ctime").
    pub departed_floor: std::sync::atomic::AtomicU64,
    /// Completion records of exactly-once RPCs (RIFL §4.1).
    pub rpc_results: crate::rifl::UnackedRpcResults,
    /// Undecided prepared ops of transactions (SOSP'15 §6.2).
    pub tx_records: tx_records::TxRecordRefs,
    /// Deadlines of objects with an expiry, for the active expirer.
    pub deadlines: crate::deadlines::DeadlineIndex,
}

impl Cleanable for Inner {
    fn clean_once(&self) -> bool {
        matches!(Cleaner::new(&self.log).clean(self), Some((_, pass)) if pass.made_progress)
    }

    fn wants_cleaning(&self) -> bool {
        !matches!(
            Cleaner::new(&self.log).cleaning_needed(),
            ramstore_log::CleanKind::None
        )
    }

    fn idled(&self, ns: u64) {
        self.log.note_cleaner_idle(ns);
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
    /// The hash bucket the active expirer's next tick starts at (`expire`).
    expire_cursor: std::sync::atomic::AtomicUsize,
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
            departed_floor: std::sync::atomic::AtomicU64::new(0),
            rpc_results: crate::rifl::UnackedRpcResults::with_expired_capacity(
                config.expired_leases_per_shard.max(1),
            ),
            tx_records: tx_records::TxRecordRefs::default(),
            deadlines: crate::deadlines::DeadlineIndex::new(config.max_deadline_notes),
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
            expire_cursor: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// The log (statistics, tests).
    pub fn log(&self) -> &Log {
        &self.inner.log
    }

    /// Faults the store's memory in now: the log's seglet pool and the hash
    /// table's main buckets (each page is otherwise zeroed by its first write:
    /// on a migration's target, the cold hash table was a quarter of the
    /// profile). Safe while the store is in use; call it off the hot path.
    pub fn prefault_memory(&self) -> std::io::Result<()> {
        self.inner.index.prefault()?;
        self.inner.log.prefault_memory()
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

    /// The tablets owned now.
    pub fn tablets(&self) -> Arc<TabletMap> {
        self.inner.shared.tablets.load_full()
    }

    /// A hint that `key` will be read or written soon: starts loading its hash
    /// bucket and the bucket's lock into the cache, so a batch of operations (a
    /// pipeline of Redis commands) overlaps those cache misses instead of taking
    /// them one after another, as the cleaner does (R§11.3). Changes nothing.
    pub fn prefetch(&self, key: &[u8]) {
        self.prefetch_hash(key_hash(key));
    }

    /// [`Self::prefetch`] for a key whose hash (`key_hash`) the caller has.
    pub fn prefetch_hash(&self, hash: u64) {
        self.inner.index.prefetch(hash);
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
        // Lazy expiry: an expired object is absent to every reader; the active
        // expirer (`expire`) logs its tombstone later. A migration's pull sees
        // it absent too, so an expired key is never moved.
        // The clock is read only for an object that has an expiry: GET's hot
        // path stays free of it.
        if view.expires_at().is_some_and(|at| at <= self.now_ms()) {
            return Err(ReadError::ObjectDoesntExist);
        }
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

    /// Makes every later write of a new object get a version of at least
    /// `version` (R§3.1: versions never go back, also across a reload).
    pub fn raise_safe_version(&self, version: u64) {
        self.inner
            .shared
            .safe_version
            .fetch_max(version, Ordering::SeqCst);
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
        let cleaner = Cleaner::new(&inner.log);
        let result = match kind {
            None => cleaner.clean(inner),
            Some(CleanKind::Compaction) => {
                cleaner.compact(inner).map(|o| (CleanKind::Compaction, o))
            }
            Some(CleanKind::Combined) => cleaner
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

/// The key hash of a logged object: read in place when the key lies in one seglet,
/// else copied out first (the cleaner and tablet changes need it; R§4.1).
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
