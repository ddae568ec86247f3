//! UnackedRpcResults (RIFL §4.1, RAMCloud's `UnackedRpcResults`): per client lease,
//! the completion records a master still keeps, so a retried RPC gets its first
//! answer instead of running again.
//!
//! Each lease has a window: sequence numbers below `first_incomplete` were
//! acknowledged by the client (it has their answers), so their records are
//! forgotten and a retry of one is stale. Within the window a sequence number is
//! new, in progress (running now: a duplicate must wait) or completed (its outcome
//! and where its record lies in the log). A lease the coordinator says expired is
//! forgotten whole; its id is remembered (in bounded memory: `super::expired`), so
//! a late retry is stale rather than new.
//!
//! Which leases to ask the coordinator about: each lease notes the *epoch* it was
//! last used in; the lease-expiry loop advances the epoch every round
//! ([`UnackedRpcResults::leases_to_check`]), and a lease not used for a whole
//! round is idle and worth a `CheckClientLease`. A client that keeps sending
//! costs no check.
//!
//! The cleaner asks here whether a record is live and re-points it when it moves
//! (`ramstore_log::Relocator`), under the same shard lock as every other change,
//! so a record is never both forgotten and moved.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use ramstore_log::{Log, LogRef};
use ramstore_wire::RpcId;

use super::expired::{ExpiredLeases, Known, DEFAULT_EXPIRED_PER_SHARD};
use super::outcome::RpcOutcome;

/// Shards of the table, by lease id: writes of different clients rarely share a
/// lock.
const SHARDS: usize = 16;

/// What [`UnackedRpcResults::check`] found for an RPC.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Check {
    /// Never seen (or seen and failed without effect): execute it; it is now in
    /// progress.
    New,
    /// Being executed now by another request: answer RETRY.
    InProgress,
    /// Executed before: answer this without executing again.
    Completed(RpcOutcome),
    /// Below the acknowledged window, or its lease expired: its record is gone.
    Stale,
    /// A lease unknown here with an id so old that it may have expired and been
    /// forgotten (`super::expired`): answer RETRY until the coordinator says.
    Unverified,
}

#[derive(Debug, Clone, Copy)]
enum Record {
    InProgress,
    Completed {
        outcome: RpcOutcome,
        at: LogRef,
        len: u32,
        /// The (table id, key hash) of the object the RPC wrote: the record moves
        /// with that object in a migration (RIFL §4.3, K§2.3).
        place: (u64, u64),
    },
}

/// A completed record of a key range, as a migration's source sends it to the
/// target (RIFL §4.3: records move with their objects).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MovedRecord {
    pub lease_id: u64,
    pub seq: u64,
    pub table_id: u64,
    pub key_hash: u64,
    pub outcome: RpcOutcome,
}

#[derive(Debug, Default)]
struct LeaseRecords {
    first_incomplete: u64,
    records: BTreeMap<u64, Record>,
    /// The epoch this lease was last used in.
    touched: u64,
}

#[derive(Debug)]
struct Shard {
    leases: HashMap<u64, LeaseRecords>,
    /// Leases the coordinator said expired, in bounded memory.
    expired: ExpiredLeases,
}

/// The completion records of one master.
#[derive(Debug)]
pub struct UnackedRpcResults {
    shards: Box<[Mutex<Shard>]>,
    /// Advanced by every round of the lease-expiry loop.
    epoch: AtomicU64,
}

impl Default for UnackedRpcResults {
    fn default() -> Self {
        Self::with_expired_capacity(DEFAULT_EXPIRED_PER_SHARD)
    }
}

impl LeaseRecords {
    /// Forgets the records below `first_incomplete` (the client has their answers),
    /// telling the log their bytes are dead.
    fn acknowledge(&mut self, first_incomplete: u64, log: &Log) {
        if first_incomplete <= self.first_incomplete {
            return;
        }
        self.first_incomplete = first_incomplete;
        let kept = self.records.split_off(&first_incomplete);
        for record in std::mem::replace(&mut self.records, kept).into_values() {
            if let Record::Completed { at, len, .. } = record {
                log.object_died(at, len as usize);
            }
        }
    }
}

impl UnackedRpcResults {
    /// A table whose shards remember up to `per_shard` expired lease ids each.
    pub fn with_expired_capacity(per_shard: usize) -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        leases: HashMap::new(),
                        expired: ExpiredLeases::new(per_shard),
                    })
                })
                .collect(),
            epoch: AtomicU64::new(0),
        }
    }

    fn shard(&self, lease_id: u64) -> &Mutex<Shard> {
        // Lease ids are handed out in sequence: the low bits spread them.
        &self.shards[(lease_id % SHARDS as u64) as usize]
    }

    /// RIFL's checkDuplicate: first moves the lease's window up to the RPC's
    /// `first_incomplete` (garbage-collecting what the client acknowledged),
    /// then classifies the RPC; a new one is marked in progress.
    pub fn check(&self, id: RpcId, log: &Log) -> Check {
        let mut shard = self.shard(id.lease_id).lock();
        if !shard.leases.contains_key(&id.lease_id) {
            match shard.expired.classify(id.lease_id) {
                Known::Expired => return Check::Stale,
                Known::Unverified => {
                    shard.expired.note_unverified(id.lease_id);
                    return Check::Unverified;
                }
                Known::New => {}
            }
        }
        let lease = shard.leases.entry(id.lease_id).or_default();
        lease.touched = self.epoch.load(Ordering::Relaxed);
        lease.acknowledge(id.first_incomplete, log);
        if id.seq < lease.first_incomplete {
            return Check::Stale;
        }
        match lease.records.get(&id.seq) {
            Some(Record::InProgress) => Check::InProgress,
            Some(Record::Completed { outcome, .. }) => Check::Completed(*outcome),
            None => {
                lease.records.insert(id.seq, Record::InProgress);
                Check::New
            }
        }
    }

    /// Records that the in-progress RPC `id` completed with `outcome`, its record
    /// of `len` bytes at `at` in `log`, for the object at `place` (table id, key
    /// hash).
    pub fn complete(
        &self,
        id: RpcId,
        (outcome, place): (RpcOutcome, (u64, u64)),
        at: LogRef,
        len: usize,
        log: &Log,
    ) {
        let mut shard = self.shard(id.lease_id).lock();
        let record = shard
            .leases
            .get_mut(&id.lease_id)
            .and_then(|l| l.records.get_mut(&id.seq));
        match record {
            Some(r) => {
                debug_assert!(matches!(r, Record::InProgress), "completed twice");
                *r = Record::Completed {
                    outcome,
                    at,
                    len: len as u32,
                    place,
                };
            }
            // The lease expired while the RPC ran: nobody will ask for the record.
            None => log.object_died(at, len),
        }
    }

    /// Forgets the in-progress RPC `id`, which failed without effect: a retry
    /// executes it afresh (it never took effect, so that is still exactly once).
    pub fn abandon(&self, id: RpcId) {
        let mut shard = self.shard(id.lease_id).lock();
        if let Some(lease) = shard.leases.get_mut(&id.lease_id) {
            if matches!(lease.records.get(&id.seq), Some(Record::InProgress)) {
                lease.records.remove(&id.seq);
            }
        }
    }

    /// Puts back a record found in a log being replayed (crash recovery, cold
    /// start; RIFL §4.3) or pulled by a migration, now at `at` in this master's
    /// log. Returns false (and the caller counts the new copy dead) if the record
    /// is already here, was acknowledged, or its lease expired.
    pub fn restore(&self, r: &MovedRecord, at: LogRef, len: usize) -> bool {
        let (lease_id, seq) = (r.lease_id, r.seq);
        let mut shard = self.shard(lease_id).lock();
        if shard.expired.is_expired(lease_id) {
            return false;
        }
        // A lease below the floor is restored too: the expiry loop will ask
        // about it, as it is idle.
        let touched = self.epoch.load(Ordering::Relaxed);
        let lease = shard
            .leases
            .entry(lease_id)
            .or_insert_with(|| LeaseRecords {
                touched,
                ..LeaseRecords::default()
            });
        if seq < lease.first_incomplete || lease.records.contains_key(&seq) {
            return false;
        }
        lease.records.insert(
            seq,
            Record::Completed {
                outcome: r.outcome,
                at,
                len: len as u32,
                place: (r.table_id, r.key_hash),
            },
        );
        true
    }

    /// Appends to `out` every completed record of an object of `table_id` whose
    /// key hash lies in `[lo, hi]`: what a migration's source sends with the
    /// objects of that range (RIFL §4.3). Records in progress are left out: on a
    /// tablet fenced for migration only RPCs that will fail (and leave no
    /// record) can be in progress (`ObjectStore::prepare_migration` waits for
    /// the others). Walks every record: O(records kept), which the clients'
    /// acknowledgements keep small.
    pub fn records_in(&self, table_id: u64, (lo, hi): (u64, u64), out: &mut Vec<MovedRecord>) {
        for shard in self.shards.iter() {
            let shard = shard.lock();
            for (&lease_id, lease) in &shard.leases {
                for (&seq, record) in &lease.records {
                    if let Record::Completed {
                        outcome,
                        place: (t, hash),
                        ..
                    } = *record
                    {
                        if t == table_id && (lo..=hi).contains(&hash) {
                            out.push(MovedRecord {
                                lease_id,
                                seq,
                                table_id,
                                key_hash: hash,
                                outcome,
                            });
                        }
                    }
                }
            }
        }
    }

    /// Whether (lease, seq) has a record here, or can have none (acknowledged,
    /// or its lease expired): a replayed copy of it is not needed.
    pub fn is_known(&self, lease_id: u64, seq: u64) -> bool {
        let shard = self.shard(lease_id).lock();
        shard.expired.is_expired(lease_id)
            || shard
                .leases
                .get(&lease_id)
                .is_some_and(|l| seq < l.first_incomplete || l.records.contains_key(&seq))
    }

    /// Whether `lease_id` is remembered as expired.
    pub fn is_expired_lease(&self, lease_id: u64) -> bool {
        self.shard(lease_id).lock().expired.is_expired(lease_id)
    }

    /// Forgets every record of `lease_id`, whose lease the coordinator says has
    /// expired (RIFL §4.2), and refuses its RPCs as stale from now on.
    pub fn expire_lease(&self, lease_id: u64, log: &Log) {
        let mut shard = self.shard(lease_id).lock();
        if let Some(mut lease) = shard.leases.remove(&lease_id) {
            lease.acknowledge(u64::MAX, log);
        }
        shard.expired.insert(lease_id);
    }

    /// The coordinator says `lease_id` is live: a lease waiting for that
    /// (unverified) is admitted, and its RPCs run from now on.
    pub fn lease_is_live(&self, lease_id: u64) {
        let mut shard = self.shard(lease_id).lock();
        if shard.expired.verified_live(lease_id) {
            let touched = self.epoch.load(Ordering::Relaxed);
            shard
                .leases
                .entry(lease_id)
                .or_insert_with(|| LeaseRecords {
                    touched,
                    ..LeaseRecords::default()
                });
        }
    }

    /// One round of the lease-expiry loop: the leases to ask the coordinator
    /// about (those not used since the previous round, and the unverified
    /// ones); then starts a new epoch.
    pub fn leases_to_check(&self) -> Vec<u64> {
        let epoch = self.epoch.load(Ordering::Relaxed);
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let shard = shard.lock();
            out.extend(
                shard
                    .leases
                    .iter()
                    .filter(|(_, l)| l.touched < epoch)
                    .map(|(id, _)| *id),
            );
            out.extend(shard.expired.unverified());
        }
        self.epoch.fetch_add(1, Ordering::Relaxed);
        out
    }

    /// Expired and unverified lease ids remembered now (bounded: `super::expired`).
    pub fn remembered_expired(&self) -> usize {
        self.shards.iter().map(|s| s.lock().expired.len()).sum()
    }

    /// The leases with records here now (for the expiry check).
    pub fn leases(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            out.extend(shard.lock().leases.keys().copied());
        }
        out
    }

    /// Records kept now, in progress or completed.
    pub fn records(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .leases
                    .values()
                    .map(|l| l.records.len())
                    .sum::<usize>()
            })
            .sum()
    }

    /// The cleaner's liveness hint: is (lease, seq) completed with its record at `at`?
    pub fn is_live(&self, lease_id: u64, seq: u64, at: LogRef) -> bool {
        let shard = self.shard(lease_id).lock();
        matches!(
            shard.leases.get(&lease_id).and_then(|l| l.records.get(&seq)),
            Some(Record::Completed { at: a, .. }) if *a == at
        )
    }

    /// The cleaner moves the record of (lease, seq) from `at`: under the shard
    /// lock, if it is still needed there, `copy` it and point at the copy.
    pub fn relocate(
        &self,
        lease_id: u64,
        seq: u64,
        at: LogRef,
        copy: &mut dyn FnMut() -> LogRef,
    ) -> bool {
        let mut shard = self.shard(lease_id).lock();
        match shard
            .leases
            .get_mut(&lease_id)
            .and_then(|l| l.records.get_mut(&seq))
        {
            Some(Record::Completed { at: a, .. }) if *a == at => {
                *a = copy();
                true
            }
            _ => false,
        }
    }
}
