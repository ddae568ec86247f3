//! The target's side of a migration (K§2.3): own the tablet at once, let client
//! operations through the gate, apply pulled records.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, MutexGuard};

use super::arrivals::Arrivals;
use super::settled::Settled;
use crate::error::{ReadError, WriteError};
use crate::object_store::{key_hash, ObjectStore};
use crate::rifl::MovedRecord;
use crate::tablets::{Access, Tablet, TabletState};
use crate::{ConfigError, RejectRules};
use ramstore_log::{ObjectView, SideLog};

/// How many hash partitions of the range are pulled in parallel (K§2.3).
pub const PULL_PARTITIONS: u32 = 4;

/// Pulled records hashed, and their buckets prefetched, together before any of
/// them is applied: their cache misses overlap (K§2.4).
pub const APPLY_BATCH: usize = 64;

/// What a client operation on a migrating-in tablet is, for the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientOp {
    /// A write with no reject rules: its result does not depend on the old record,
    /// and its version is above every pulled one, so it goes at once.
    BlindWrite,
    /// Anything that reads the old record (read, conditional write, increment,
    /// delete, which answers whether the object existed).
    ReadsRecord,
    /// An exactly-once RPC (RIFL §4): it needs the key's completion records as
    /// well as its object, so that a retry of an RPC the source carried out gets
    /// the first answer instead of running again (RIFL §4.3: records move with
    /// their objects). Even a blind write waits for them.
    ExactlyOnce,
}

/// The gate's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Carry it out now (with the store's `*_arrived` calls).
    Go,
    /// The key's record may still be on the source: a PriorityPull will bring
    /// it; answer RETRY. `true` if the key was newly queued (wake the puller).
    Wait(bool),
}

/// One record pulled from the source.
#[derive(Debug, Clone, Copy)]
pub struct PulledObject<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub version: u64,
}

/// One migration into this master: its identity, and the arrivals behind a
/// mutex. Thread-safe.
#[derive(Debug)]
pub struct IncomingMigration {
    pub id: u64,
    pub table_id: u64,
    pub start_hash: u64,
    pub end_hash: u64,
    pub source_id: u64,
    pub source_address: String,
    pub safe_version: u64,
    /// Whether a client waiting for a key asks for it by PriorityPull (K§2.3);
    /// `false` only for the benchmark baseline without them.
    pub priority_pulls: bool,
    arrivals: Mutex<Arrivals>,
    /// Which keys are settled, readable without `arrivals` (`settled.rs`):
    /// the gate's fast path, and the apply's per-record check under the key's
    /// bucket lock. Updated while `arrivals` is held, right after it.
    settled: Settled,
    /// One side log per partition (K§2.3 "per-worker side logs"): pulled
    /// records go there, not to the head; a PriorityPull's records go to their
    /// partition's. Committed by [`Self::commit_side_logs`].
    sides: Vec<SideLog>,
    bytes: AtomicU64,
    objects: AtomicU64,
}

impl IncomingMigration {
    pub fn new(
        id: u64,
        (table_id, start_hash, end_hash): (u64, u64, u64),
        source_id: u64,
        source_address: String,
        safe_version: u64,
    ) -> Self {
        let arrivals = Arrivals::new(start_hash, end_hash, PULL_PARTITIONS);
        Self {
            id,
            table_id,
            start_hash,
            end_hash,
            source_id,
            source_address,
            safe_version,
            priority_pulls: true,
            settled: Settled::new(arrivals.partitions()),
            arrivals: Mutex::new(arrivals),
            sides: (0..PULL_PARTITIONS).map(|_| SideLog::new()).collect(),
            bytes: AtomicU64::new(0),
            objects: AtomicU64::new(0),
        }
    }

    /// The same migration without PriorityPulls (a benchmark baseline,
    /// `MigrationMode::NoPriorityPulls`): a client waits for a key until the
    /// background pulls bring it.
    pub fn without_priority_pulls(mut self) -> Self {
        self.priority_pulls = false;
        self
    }

    /// Whether key hash `hash` of `table_id` is in this migration's range.
    pub fn contains(&self, table_id: u64, hash: u64) -> bool {
        self.table_id == table_id && (self.start_hash..=self.end_hash).contains(&hash)
    }

    /// The partitions to pull, with their cursors.
    pub fn partitions(&self) -> Vec<super::Partition> {
        self.arrivals.lock().partitions().to_vec()
    }

    /// Whether client operation `op` on `key` may run now (see [`Gate`]).
    pub fn gate(&self, key: &[u8], op: ClientOp) -> Gate {
        if op == ClientOp::BlindWrite {
            return Gate::Go;
        }
        let hash = key_hash(key);
        // Without the arrivals mutex first: a settled key stays settled, so
        // the answer cannot go stale, and a client operation never waits for
        // the background apply (`settled.rs`).
        if self.settled.is_settled(key, hash)
            && (op != ClientOp::ExactlyOnce || self.settled.has_records(hash))
        {
            return Gate::Go;
        }
        let mut arrivals = self.arrivals.lock();
        let here = arrivals.is_settled_hashed(key, hash)
            && (op != ClientOp::ExactlyOnce || arrivals.has_records(hash));
        if here {
            Gate::Go
        } else if !self.priority_pulls {
            // Nothing is queued: no PriorityPull will be sent, and a queued key
            // would keep the migration from ever looking complete.
            Gate::Wait(false)
        } else if op == ClientOp::ExactlyOnce {
            Gate::Wait(arrivals.request_records(key))
        } else {
            Gate::Wait(arrivals.request(key))
        }
    }

    /// A client wrote `key` here: its record here is authoritative.
    pub fn settle(&self, key: &[u8]) {
        let hash = key_hash(key);
        if self.settled.is_settled(key, hash) {
            return;
        }
        let mut arrivals = self.arrivals.lock();
        arrivals.settle(key);
        self.settled.settle(key, hash);
    }

    /// Applies pulled records of partition `partition`, installs the completion
    /// records that came with them (`records`, RIFL §4.3) and then moves its
    /// cursor to `next` (`None`: the partition is done): the cursor never passes
    /// a key whose records are not installed. A record is applied only while
    /// its key is not settled ("settled stays settled": a key deleted here is
    /// never resurrected; the check is made under the key's bucket lock, so it
    /// is atomic with the replay against the client's delete) and replaces
    /// only an older version (the replay rule, R§7.6); it goes to the
    /// partition's side log. The arrivals mutex is not held while records are
    /// replayed (this runs at low priority, and a client's gate must never
    /// wait for it, `settled.rs`): only to install the records and to move
    /// the cursor. On an error (a full log) the cursor does not move and the
    /// batch can be pulled and applied again.
    pub fn apply_pull<'a>(
        &self,
        store: &ObjectStore,
        partition: usize,
        objects: impl IntoIterator<Item = PulledObject<'a>>,
        records: &[MovedRecord],
        next: Option<u64>,
    ) -> Result<(), WriteError> {
        let side = self.side(partition);
        if !records.is_empty() {
            self.install_records(store, &self.arrivals.lock(), records)?;
        }
        let mut objects = objects.into_iter();
        let mut chunk = Vec::with_capacity(APPLY_BATCH);
        loop {
            chunk.clear();
            chunk.extend(
                objects
                    .by_ref()
                    .take(APPLY_BATCH)
                    .map(|o| (o, key_hash(o.key))),
            );
            if chunk.is_empty() {
                break;
            }
            // The chunk's hash buckets are prefetched back to back before any is
            // locked, so their cache (and TLB) misses overlap: one after another
            // they were 40% of the apply (`examples/pull_apply.rs` under perf;
            // K§2.4: the target's hash-table probes are its costly misses).
            for &(_, hash) in &chunk {
                store.prefetch_hash(hash);
            }
            for &(o, hash) in &chunk {
                self.apply_one(store, side, o, hash)?;
            }
        }
        let mut arrivals = self.arrivals.lock();
        arrivals.advance(partition, next);
        if let Some(p) = arrivals.partitions().get(partition) {
            self.settled.advance(partition, p);
        }
        MutexGuard::unlock_fair(arrivals);
        Ok(())
    }

    /// The side log of partition `partition`.
    fn side(&self, partition: usize) -> &SideLog {
        // `sides` has PULL_PARTITIONS (≥ 1) entries.
        &self.sides[partition % self.sides.len()]
    }

    /// Hands every side log's open segment to replication and returns the ids
    /// of all their segments, to be joined to the log once they are on their
    /// replicas (`Log::join_side_segments`; [`ramstore_log::SideLog`]). Call it
    /// after the pullers have stopped. Never blocks.
    pub fn seal_side_logs(&self, store: &ObjectStore) -> Vec<u64> {
        let sides: Vec<&SideLog> = self.sides.iter().collect();
        store.log().seal_side_logs(&sides)
    }

    /// [`Self::seal_side_logs`], the wait for their replicas and the join, in
    /// one blocking call (for a store without a server around it).
    pub fn commit_side_logs(&self, store: &ObjectStore) -> Vec<u64> {
        let sides: Vec<&SideLog> = self.sides.iter().collect();
        store.log().commit_side_logs(&sides)
    }

    /// The keys of the next PriorityPull (at most `max`), now in flight.
    pub fn take_pending(&self, max: usize) -> Vec<Vec<u8>> {
        self.arrivals.lock().take_pending(max)
    }

    /// The source answered a PriorityPull for `keys` with `objects` (those that
    /// exist) and the completion records of their key hashes (`records`, RIFL
    /// §4.3): installs the records, applies the objects and settles every key,
    /// in one critical section, so no gate lets an exactly-once RPC of these
    /// keys through before its records are here.
    pub fn apply_priority<'a>(
        &self,
        store: &ObjectStore,
        keys: &[Vec<u8>],
        objects: impl IntoIterator<Item = PulledObject<'a>>,
        records: &[MovedRecord],
    ) -> Result<(), WriteError> {
        let mut arrivals = self.arrivals.lock();
        if let Err(e) = self.install_records(store, &arrivals, records) {
            arrivals.priority_failed(keys);
            return Err(e);
        }
        for o in objects {
            let hash = key_hash(o.key);
            let side = self.side_of(&arrivals, hash);
            if let Err(e) = self.apply_one(store, side, o, hash) {
                arrivals.priority_failed(keys);
                return Err(e);
            }
        }
        arrivals.priority_answered(keys);
        for key in keys {
            let hash = key_hash(key);
            self.settled.settle(key, hash);
            self.settled.fetched(hash);
        }
        Ok(())
    }

    /// The PriorityPull for `keys` failed: they go into the next one.
    pub fn priority_failed(&self, keys: &[Vec<u8>]) {
        self.arrivals.lock().priority_failed(keys);
    }

    /// Whether clients wait for keys (pending or in flight).
    pub fn has_waiters(&self) -> bool {
        self.arrivals.lock().has_waiters()
    }

    /// Whether every record has arrived and no client waits.
    pub fn is_complete(&self) -> bool {
        self.arrivals.lock().is_complete()
    }

    /// Bytes (keys and values) and objects pulled and applied so far.
    pub fn progress(&self) -> (u64, u64) {
        (
            self.bytes.load(Ordering::Relaxed),
            self.objects.load(Ordering::Relaxed),
        )
    }

    /// The side log of the partition that holds key hash `hash`.
    fn side_of(&self, arrivals: &Arrivals, hash: u64) -> &SideLog {
        let partition = arrivals
            .partitions()
            .iter()
            .position(|p| (p.lo..=p.hi).contains(&hash))
            .unwrap_or(0);
        self.side(partition)
    }

    /// Installs the completion records of this migration's range among
    /// `records` into the side log of their partition, where their objects go
    /// (RIFL §4.3; one the target knows already is skipped). The caller holds
    /// the arrivals mutex, so no gate decides on these keys meanwhile.
    fn install_records(
        &self,
        store: &ObjectStore,
        arrivals: &Arrivals,
        records: &[MovedRecord],
    ) -> Result<(), WriteError> {
        for r in records {
            if self.contains(r.table_id, r.key_hash) {
                store.install_moved_record(self.side_of(arrivals, r.key_hash), r)?;
            }
        }
        Ok(())
    }

    /// Applies one pulled record `o` whose key hash is `hash` (see
    /// [`Self::apply_pull`]) unless its key is settled, which is checked
    /// under the key's bucket lock: a settle happens before any client
    /// operation that depends on it (the gate lets none through earlier), and
    /// that operation takes the bucket lock too, so a record is either
    /// replayed before it or skipped.
    fn apply_one(
        &self,
        store: &ObjectStore,
        side: &SideLog,
        o: PulledObject<'_>,
        hash: u64,
    ) -> Result<(), WriteError> {
        if !self.contains(self.table_id, hash) {
            return Ok(());
        }
        let record = (self.table_id, o.key, o.value, o.version);
        if store.replay_object_into_unless(side, record, || self.settled.is_settled(o.key, hash))? {
            self.bytes
                .fetch_add((o.key.len() + o.value.len()) as u64, Ordering::Relaxed);
            self.objects.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

impl ObjectStore {
    /// Owns the tablet `[start_hash, end_hash]` of `table_id` at once, as
    /// migrating in (K§2.3), and issues only versions above `safe_version` from
    /// now on (R§3.1). Returns whether the tablet is (still) migrating in:
    /// `false` if it is already normal here (the migration finished; a resent
    /// request). `BadTablet` if the range overlaps another tablet.
    pub fn add_migrating_tablet(
        &self,
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
        safe_version: u64,
    ) -> Result<bool, ConfigError> {
        let bad = ConfigError::BadTablet {
            table_id,
            start_hash,
            end_hash,
        };
        if start_hash > end_hash {
            return Err(bad);
        }
        // Before the tablet exists, so no client write of it gets a lower version.
        self.raise_safe_version(safe_version);
        let shared = &self.inner.shared;
        shared.max_version.fetch_max(safe_version, Ordering::SeqCst);
        let _changing = self.inner.tablet_changes.lock();
        let map = shared.tablets.load();
        match map.overlaps(table_id, start_hash, end_hash) {
            None => {
                // A new tenure of the range (design notes "Tablet ctime"): the
                // coordinator recorded this master's tenure floor, at most the
                // ctime, before ownership moved, and every entry of the range
                // appended here from now on (head, side logs, survivors) lands
                // at or above it.
                let ctime = self.begin_tenure()?;
                let tablet = Tablet::new(table_id, start_hash, end_hash).since(ctime);
                tablet.set_state(TabletState::MigratingIn);
                tablet.set_tombstone_hold(self.log().hold_tombstones().id());
                shared.tablets.store(std::sync::Arc::new(map.with(tablet)));
                Ok(true)
            }
            Some(t) if t.start_hash == start_hash && t.end_hash == end_hash => match t.state() {
                TabletState::MigratingIn => Ok(true),
                TabletState::Normal => Ok(false),
                _ => Err(bad),
            },
            Some(_) => Err(bad),
        }
    }

    /// Every record of the migrating-in tablet has arrived: it becomes normal.
    /// Idempotent; `BadTablet` if no such tablet is owned.
    pub fn finish_migrating_tablet(
        &self,
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
    ) -> Result<(), ConfigError> {
        let _changing = self.inner.tablet_changes.lock();
        let map = self.inner.shared.tablets.load();
        let tablet = map
            .tablets
            .iter()
            .find(|t| {
                t.table_id == table_id && t.start_hash == start_hash && t.end_hash == end_hash
            })
            .ok_or(ConfigError::BadTablet {
                table_id,
                start_hash,
                end_hash,
            })?;
        if tablet.state() == TabletState::MigratingIn {
            tablet.set_state(TabletState::Normal);
        }
        Ok(())
    }

    /// Whether `hash` of `table_id` lies in a tablet migrating in here.
    pub fn is_migrating_in(&self, table_id: u64, hash: u64) -> bool {
        self.inner
            .shared
            .tablets
            .load()
            .find(table_id, hash)
            .is_some_and(|t| t.state() == TabletState::MigratingIn)
    }

    /// [`Self::read_with`] for a key the migration's gate let through.
    pub fn read_with_arrived<R>(
        &self,
        table_id: u64,
        key: &[u8],
        f: impl FnOnce(&ObjectView<'_>) -> R,
    ) -> Result<R, ReadError> {
        self.read_with_as(table_id, key, Access::Arrived, f)
    }

    /// [`Self::write`] for a key the migration's gate let through.
    pub fn write_arrived(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: &RejectRules,
    ) -> Result<u64, WriteError> {
        self.write_as(table_id, key, value, rules, Access::Arrived)
    }

    /// [`Self::write_arrived`] of a key its caller hashed already.
    pub fn write_arrived_hashed(
        &self,
        table_id: u64,
        key: crate::HashedKey<'_>,
        value: &[u8],
        rules: &RejectRules,
    ) -> Result<u64, WriteError> {
        self.write_hashed_as(table_id, key, value, rules, Access::Arrived)
    }

    /// [`Self::remove`] for a key the migration's gate let through.
    pub fn remove_arrived(
        &self,
        table_id: u64,
        key: &[u8],
        rules: &RejectRules,
    ) -> Result<Option<u64>, WriteError> {
        self.remove_as(table_id, key, rules, Access::Arrived)
    }

    /// [`Self::increment_i64`] for a key the migration's gate let through.
    pub fn increment_i64_arrived(
        &self,
        table_id: u64,
        key: &[u8],
        delta: i64,
        rules: &RejectRules,
    ) -> Result<(i64, u64), WriteError> {
        self.increment_i64_as(table_id, key, delta, rules, Access::Arrived)
    }

    /// [`Self::increment_f64`] for a key the migration's gate let through.
    pub fn increment_f64_arrived(
        &self,
        table_id: u64,
        key: &[u8],
        delta: f64,
        rules: &RejectRules,
    ) -> Result<(f64, u64), WriteError> {
        self.increment_f64_as(table_id, key, delta, rules, Access::Arrived)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CleanerMode, StoreConfig};

    fn store() -> ObjectStore {
        let mut config = StoreConfig::new(16 << 20);
        config.segment_bytes = 128 * 1024;
        config.cleaner = CleanerMode::Manual;
        ObjectStore::new(config).expect("store")
    }

    fn pulled<'a>(key: &'a [u8], value: &'a [u8], version: u64) -> PulledObject<'a> {
        PulledObject {
            key,
            value,
            version,
        }
    }

    fn migration() -> IncomingMigration {
        IncomingMigration::new(1, (1, 0, u64::MAX), 2, "source".into(), 100)
    }

    #[test]
    fn add_migrating_tablet_refuses_plain_client_operations() {
        let s = store();
        assert!(s.add_migrating_tablet(1, 0, u64::MAX, 100).expect("added"));
        let mut v = Vec::new();
        assert_eq!(s.read(1, b"k", &mut v), Err(ReadError::Migrating));
        let rules = RejectRules::default();
        assert_eq!(s.write(1, b"k", b"v", &rules), Err(WriteError::Migrating));
        let version = s.write_arrived(1, b"k", b"v", &rules).expect("write");
        assert!(version >= 100, "version {version} below the safe version");
        s.finish_migrating_tablet(1, 0, u64::MAX).expect("finish");
        assert_eq!(s.read(1, b"k", &mut v), Ok(version));
        assert!(!s.add_migrating_tablet(1, 0, u64::MAX, 100).expect("resent"));
    }

    #[test]
    fn apply_pull_keeps_a_newer_blind_write() {
        let s = store();
        s.add_migrating_tablet(1, 0, u64::MAX, 100).expect("added");
        let m = migration();
        assert_eq!(m.gate(b"k", ClientOp::BlindWrite), Gate::Go);
        let rules = RejectRules::default();
        let written = s.write_arrived(1, b"k", b"new", &rules).expect("write");
        m.settle(b"k");
        m.apply_pull(&s, 0, [pulled(b"k", b"old", 99)], &[], None)
            .expect("applied");
        let mut v = Vec::new();
        assert_eq!(s.read_with_arrived(1, b"k", |o| o.version()), Ok(written));
        s.finish_migrating_tablet(1, 0, u64::MAX).expect("finish");
        s.read(1, b"k", &mut v).expect("read");
        assert_eq!(v, b"new");
    }

    #[test]
    fn apply_pull_never_resurrects_a_deleted_key() {
        let s = store();
        s.add_migrating_tablet(1, 0, u64::MAX, 100).expect("added");
        let m = migration();
        // The delete waits for the key's record (a PriorityPull brings it).
        assert_eq!(m.gate(b"k", ClientOp::ReadsRecord), Gate::Wait(true));
        assert_eq!(m.gate(b"k", ClientOp::ReadsRecord), Gate::Wait(false));
        let keys = m.take_pending(10);
        m.apply_priority(&s, &keys, [pulled(b"k", b"v", 42)], &[])
            .expect("applied");
        assert_eq!(m.gate(b"k", ClientOp::ReadsRecord), Gate::Go);
        let rules = RejectRules::default();
        assert_eq!(s.remove_arrived(1, b"k", &rules), Ok(Some(42)));
        // The background pull brings the same old record later.
        m.apply_pull(&s, 0, [pulled(b"k", b"v", 42)], &[], None)
            .expect("applied");
        assert_eq!(
            s.read_with_arrived(1, b"k", |o| o.version()),
            Err(ReadError::ObjectDoesntExist)
        );
    }

    #[test]
    fn apply_pull_applies_every_record_of_many_chunks_once_with_its_version() {
        let s = store();
        s.add_migrating_tablet(1, 0, u64::MAX, 1_000)
            .expect("added");
        let m = migration();
        // Settled before the pull (a client wrote it here): the pulled copy of
        // it must not replace it, whichever chunk it falls in.
        let rules = RejectRules::default();
        let written = s.write_arrived(1, b"key-0100", b"mine", &rules).expect("w");
        m.settle(b"key-0100");
        let n = 3 * APPLY_BATCH + 5;
        let keys: Vec<String> = (0..n).map(|i| format!("key-{i:04}")).collect();
        let pulled_batch = keys
            .iter()
            .enumerate()
            .map(|(i, k)| pulled(k.as_bytes(), b"pulled", 10 + i as u64));
        m.apply_pull(&s, 0, pulled_batch, &[], None)
            .expect("applied");
        assert_eq!(
            m.progress().1,
            n as u64 - 1,
            "each record once, the settled one skipped"
        );
        for (i, k) in keys.iter().enumerate() {
            let version = s.read_with_arrived(1, k.as_bytes(), |o| o.version());
            let expected = if i == 100 { written } else { 10 + i as u64 };
            assert_eq!(version, Ok(expected), "key {k}");
        }
    }

    #[test]
    fn gate_without_priority_pulls_waits_for_the_background_pull() {
        let s = store();
        s.add_migrating_tablet(1, 0, u64::MAX, 100).expect("added");
        let m = migration().without_priority_pulls();
        assert_eq!(m.gate(b"k", ClientOp::ReadsRecord), Gate::Wait(false));
        assert!(
            m.take_pending(10).is_empty(),
            "nothing is asked of the source"
        );
        assert!(!m.has_waiters());
        assert_eq!(m.gate(b"k", ClientOp::BlindWrite), Gate::Go);
        for p in 0..super::PULL_PARTITIONS as usize {
            m.apply_pull(&s, p, [pulled(b"k", b"v", 42)], &[], None)
                .expect("applied");
        }
        assert_eq!(m.gate(b"k", ClientOp::ReadsRecord), Gate::Go);
        assert!(m.is_complete());
    }

    #[test]
    fn priority_pull_of_a_missing_key_settles_it_as_absent() {
        let s = store();
        s.add_migrating_tablet(1, 0, u64::MAX, 100).expect("added");
        let m = migration();
        assert_eq!(m.gate(b"none", ClientOp::ReadsRecord), Gate::Wait(true));
        let keys = m.take_pending(10);
        m.apply_priority(&s, &keys, [], &[]).expect("applied");
        assert_eq!(m.gate(b"none", ClientOp::ReadsRecord), Gate::Go);
        assert!(!m.is_complete(), "partitions are not pulled yet");
        for p in 0..super::PULL_PARTITIONS as usize {
            m.apply_pull(&s, p, [], &[], None).expect("applied");
        }
        assert!(m.is_complete());
    }
    /// Runs `f` on another thread and waits at most 10 s for it: a call that
    /// blocks on a lock the test holds fails the test instead of hanging it.
    fn without_blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("the call waited for the arrivals mutex")
    }

    #[test]
    fn gate_lets_a_settled_key_through_while_the_arrivals_mutex_is_held() {
        // Regression (priority inversion, session 35): the background apply,
        // at `nice` 19, held the arrivals mutex while it replayed; every read
        // of the range waited in the gate whenever it was preempted there.
        let s = store();
        s.add_migrating_tablet(1, 0, u64::MAX, 100).expect("added");
        let m = std::sync::Arc::new(migration());
        m.settle(b"hot");
        assert_eq!(m.gate(b"k", ClientOp::ReadsRecord), Gate::Wait(true));
        let keys = m.take_pending(10);
        m.apply_priority(&s, &keys, [pulled(b"k", b"v", 42)], &[])
            .expect("applied");
        let held = m.arrivals.lock();
        let gated = m.clone();
        let answers = without_blocking(move || {
            [
                gated.gate(b"hot", ClientOp::ReadsRecord),
                gated.gate(b"k", ClientOp::ReadsRecord),
                gated.gate(b"k", ClientOp::ExactlyOnce),
            ]
        });
        assert_eq!(answers, [Gate::Go; 3]);
        let settled_again = m.clone();
        without_blocking(move || settled_again.settle(b"hot"));
        drop(held);
    }

    #[test]
    fn apply_pull_skips_keys_settled_by_a_priority_pull_and_then_deleted() {
        let s = store();
        s.add_migrating_tablet(1, 0, u64::MAX, 100).expect("added");
        let m = migration();
        assert_eq!(m.gate(b"k", ClientOp::ReadsRecord), Gate::Wait(true));
        let keys = m.take_pending(10);
        m.apply_priority(&s, &keys, [pulled(b"k", b"v", 42)], &[])
            .expect("applied");
        let rules = RejectRules::default();
        assert_eq!(s.remove_arrived(1, b"k", &rules), Ok(Some(42)));
        // A later background batch brings the same record, and others.
        let batch = [
            pulled(b"a", b"1", 40),
            pulled(b"k", b"v", 42),
            pulled(b"z", b"2", 41),
        ];
        m.apply_pull(&s, 0, batch, &[], Some(1 << 62))
            .expect("applied");
        assert_eq!(
            s.read_with_arrived(1, b"k", |o| o.version()),
            Err(ReadError::ObjectDoesntExist),
            "the deleted key stays deleted"
        );
        assert_eq!(s.read_with_arrived(1, b"a", |o| o.version()), Ok(40));
        assert_eq!(s.read_with_arrived(1, b"z", |o| o.version()), Ok(41));
    }
}
