//! The backup's half of crash recovery (R§7.5): when the coordinator announces the
//! partitions of a crashed master, the backup reads every replica of that master it
//! offers, in an order it publishes, and sorts each replica's entries into one
//! bucket per partition; recovery masters then fetch their bucket of each replica.
//!
//! Why buckets: every recovery master needs only its partition's entries, but each
//! replica holds entries of every partition. Splitting once at the backup means each
//! replica is read from disk once and each byte crosses the network once (R§7.5).
//!
//! What goes where: an object or tombstone goes to the partition whose tablet holds
//! its (table, key hash); one no partition covers is dropped (its tablet was not
//! the crashed master's any more). Safe-version entries go to every partition
//! (versions never go back, R§3.1). Headers, digests and tablet statistics are
//! recovery's input at the coordinator and are not replayed.
//!
//! Thread-safety: [`BackupRecoveries`] is shared by every connection; the reading
//! and bucketing runs on one blocking thread per announced recovery. Nothing here
//! is durable: buckets live in memory until the master is removed or a newer
//! recovery of it is announced.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use ramstore_backup::{BackupStore, Disk, ReplicaInfo};
use ramstore_log::entry::{parse_entry, Entry, EntryError};
use ramstore_master::key_hash;
use ramstore_wire::PartitionTablet;

use crate::blocking::Blocking;

/// A store whose disk is chosen at run time: the frames file in production, an
/// in-memory or fault-injecting disk in tests. Defined here, below the backup
/// service that owns the store, so bucketing does not import the service
/// (issue 19: no import circles); the service re-exports it.
pub type ServerBackupStore = BackupStore<Box<dyn Disk>>;

/// Most partitions one recovery may announce (a bound on the buckets per replica).
pub const MAX_RECOVERY_PARTITIONS: usize = 4096;

/// The state of one replica's buckets.
#[derive(Debug, Clone)]
enum Buckets {
    /// Not read yet.
    Pending,
    /// Read: one byte string of entries per partition, indexed by partition id.
    Ready(Arc<Vec<Vec<u8>>>),
    /// Unreadable or corrupt; the recovery master asks another backup.
    Failed(String),
}

/// One announced recovery of one crashed master.
#[derive(Debug)]
struct Partitioning {
    recovery_id: u64,
    /// The replicas, in the order they are read (and published).
    order: Vec<ReplicaInfo>,
    segments: Mutex<HashMap<u64, Buckets>>,
}

/// What a recovery master's fetch found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// The partition's entries of that replica.
    Ready(Arc<Vec<Vec<u8>>>, usize),
    /// Not bucketed yet: ask again shortly.
    NotYet,
    /// No such recovery or replica here.
    Unknown,
    /// The replica could not be read or is corrupt.
    Failed(String),
}

/// The partitionings this backup holds, by crashed master id.
#[derive(Debug, Default)]
pub struct BackupRecoveries {
    by_master: Mutex<HashMap<u64, Arc<Partitioning>>>,
    /// Where bucketing runs (off the async threads, or inline in a simulation).
    blocking: Blocking,
}

impl BackupRecoveries {
    /// No partitionings yet; bucketing runs as `blocking` says.
    pub fn with_blocking(blocking: Blocking) -> Self {
        Self {
            by_master: Mutex::default(),
            blocking,
        }
    }

    /// Starts bucketing the replicas of `master_id` (those in `offered`, read in
    /// segment id order) for `tablets`, unless recovery `recovery_id` is already
    /// under way; returns the published order. A newer recovery id replaces an
    /// older one's buckets.
    pub fn start(
        &self,
        store: &Arc<ServerBackupStore>,
        master_id: u64,
        recovery_id: u64,
        mut offered: Vec<ReplicaInfo>,
        tablets: Vec<PartitionTablet>,
    ) -> Vec<ReplicaInfo> {
        let mut by_master = self.by_master.lock();
        if let Some(p) = by_master.get(&master_id) {
            if p.recovery_id == recovery_id {
                return p.order.clone();
            }
        }
        // Oldest first: the order recovery masters fetch in (any order is correct,
        // R§7.6; a shared one keeps every backup's disk busy from the start).
        offered.sort_by_key(|r| r.segment_id);
        let partitioning = Arc::new(Partitioning {
            recovery_id,
            segments: Mutex::new(
                offered
                    .iter()
                    .map(|r| (r.segment_id, Buckets::Pending))
                    .collect(),
            ),
            order: offered,
        });
        by_master.insert(master_id, partitioning.clone());
        drop(by_master);
        let order = partitioning.order.clone();
        let store = Arc::clone(store);
        self.blocking
            .spawn(move || bucket_all(&store, master_id, &partitioning, &tablets));
        order
    }

    /// The entries of `partition_id` in replica `segment_id` of `master_id`.
    pub fn fetch(
        &self,
        master_id: u64,
        recovery_id: u64,
        segment_id: u64,
        partition_id: u32,
    ) -> Fetched {
        let Some(p) = self.by_master.lock().get(&master_id).cloned() else {
            return Fetched::Unknown;
        };
        if p.recovery_id != recovery_id {
            return Fetched::Unknown;
        }
        let state = p.segments.lock().get(&segment_id).cloned();
        match state {
            None => Fetched::Unknown,
            Some(Buckets::Pending) => Fetched::NotYet,
            Some(Buckets::Failed(why)) => Fetched::Failed(why),
            Some(Buckets::Ready(buckets)) => match usize::try_from(partition_id) {
                Ok(i) if i < buckets.len() => Fetched::Ready(buckets, i),
                _ => Fetched::Unknown,
            },
        }
    }

    /// Forgets the buckets of masters that were removed (their recovery is over).
    pub fn forget(&self, removed: &[u64]) {
        let mut by_master = self.by_master.lock();
        for id in removed {
            by_master.remove(id);
        }
    }

    /// Replicas bucketed or waiting, over every recovery held (for stats).
    pub fn held(&self) -> usize {
        self.by_master.lock().values().map(|p| p.order.len()).sum()
    }
}

/// Reads and buckets every replica of `p`, in its order.
fn bucket_all(
    store: &ServerBackupStore,
    master_id: u64,
    p: &Partitioning,
    tablets: &[PartitionTablet],
) {
    let partitions = tablets
        .iter()
        .map(|t| t.partition_id as usize + 1)
        .max()
        .unwrap_or(0);
    for replica in &p.order {
        let state = match store.read_replica(master_id, replica.segment_id) {
            Ok(bytes) => match bucket(&bytes, tablets, partitions) {
                Ok(b) => Buckets::Ready(Arc::new(b)),
                Err(e) => Buckets::Failed(format!(
                    "replica {} of master {master_id} is corrupt: {e}",
                    replica.segment_id
                )),
            },
            Err(e) => Buckets::Failed(e.to_string()),
        };
        if let Buckets::Failed(why) = &state {
            tracing::warn!(master_id, segment_id = replica.segment_id, %why, "recovery: cannot bucket a replica");
        }
        p.segments.lock().insert(replica.segment_id, state);
    }
}

/// Splits one replica's entries into `partitions` buckets (see the module doc).
/// A corrupt or truncated entry fails the whole replica: another backup's copy is
/// then used (a replica's bytes are all valid or the replica is not used, R§7.4).
pub fn bucket(
    mut bytes: &[u8],
    tablets: &[PartitionTablet],
    partitions: usize,
) -> Result<Vec<Vec<u8>>, EntryError> {
    let mut buckets = vec![Vec::new(); partitions];
    while !bytes.is_empty() {
        let (entry, len) = parse_entry(bytes)?;
        let raw = &bytes[..len];
        bytes = &bytes[len..];
        let (table_id, hash) = match entry {
            Entry::Object(o) => (o.table_id, key_hash(o.key)),
            Entry::Tombstone(t) => (t.table_id, key_hash(t.key)),
            // A completion record goes with its object's key (RIFL §4.3).
            Entry::RpcResult(r) => (r.table_id, r.key_hash),
            // A prepared op (or its decided mark) goes with its object's key, to
            // the recovery master that will hold the object's lock (SOSP'15 §6.2).
            Entry::TxRecord(r) => (r.table_id, r.key_hash),
            Entry::SafeVersion(_) => {
                for b in &mut buckets {
                    b.extend_from_slice(raw);
                }
                continue;
            }
            Entry::SegmentHeader(_) | Entry::LogDigest(_) | Entry::TabletStats(_) => continue,
        };
        if let Some(t) = tablets
            .iter()
            .find(|t| t.table_id == table_id && (t.start_hash..=t.end_hash).contains(&hash))
        {
            buckets[t.partition_id as usize].extend_from_slice(raw);
        }
    }
    Ok(buckets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ramstore_log::entry::{
        encode_log_digest, encode_object, encode_safe_version, encode_segment_header,
        encode_tombstone,
    };

    fn tablets() -> Vec<PartitionTablet> {
        let half = u64::MAX / 2;
        vec![
            PartitionTablet {
                partition_id: 0,
                table_id: 1,
                start_hash: 0,
                end_hash: half,
            },
            PartitionTablet {
                partition_id: 1,
                table_id: 1,
                start_hash: half + 1,
                end_hash: u64::MAX,
            },
            PartitionTablet {
                partition_id: 1,
                table_id: 2,
                start_hash: 0,
                end_hash: u64::MAX,
            },
        ]
    }

    #[test]
    fn bucket_sorts_entries_by_partition_and_copies_safe_versions_to_all() {
        let mut seg = Vec::new();
        encode_segment_header(9, 4, &mut seg);
        encode_log_digest(&[4], &mut seg);
        encode_safe_version(77, &mut seg);
        let keys: Vec<Vec<u8>> = (0..50u32).map(|i| i.to_le_bytes().to_vec()).collect();
        for k in &keys {
            encode_object(1, 5, 0, k, b"v", &mut seg);
        }
        encode_tombstone(2, 6, 3, b"gone", &mut seg);
        encode_object(3, 5, 0, b"not ours", b"v", &mut seg);
        let buckets = bucket(&seg, &tablets(), 2).unwrap();
        let mut seen = [0usize; 2];
        for (p, b) in buckets.iter().enumerate() {
            let mut rest = &b[..];
            let mut safe = 0;
            while !rest.is_empty() {
                let (e, n) = parse_entry(rest).unwrap();
                rest = &rest[n..];
                match e {
                    Entry::SafeVersion(s) => {
                        assert_eq!(s.version, 77);
                        safe += 1
                    }
                    Entry::Object(o) => {
                        assert_eq!(o.table_id, 1);
                        let h = key_hash(o.key);
                        assert_eq!(
                            usize::from(h > u64::MAX / 2),
                            p,
                            "object in the wrong bucket"
                        );
                        seen[p] += 1;
                    }
                    Entry::Tombstone(t) => {
                        assert_eq!((p, t.table_id), (1, 2));
                        seen[p] += 1;
                    }
                    other => panic!("unexpected entry {other:?}"),
                }
            }
            assert_eq!(safe, 1, "partition {p} misses the safe version");
        }
        // Every object of table 1 and the tombstone of table 2 landed somewhere;
        // table 3 belongs to no partition.
        assert_eq!(seen[0] + seen[1], 51);
    }

    #[test]
    fn bucket_of_a_corrupt_replica_is_an_error() {
        let mut seg = Vec::new();
        encode_object(1, 5, 0, b"k", b"value", &mut seg);
        let n = seg.len();
        seg[n - 3] ^= 0x55;
        assert!(bucket(&seg, &tablets(), 2).is_err());
        assert!(bucket(&seg[..n - 1], &tablets(), 2).is_err());
    }
}
