//! Replica health (R§8, docs/design-notes.md "Replica health"): a backup that is up
//! but no longer holds a replica its master needs — freed behind the master's back
//! here, as one BackupFree RPC or a disk problem would — gets that replica
//! re-created from the master's memory, found either by its answer to the next
//! write or by the periodic replica check; waiting writes then complete, and the
//! backups again hold every acknowledged object.
//!
//! The cluster is the tightest one: R = 2 and exactly two backups, so the only
//! place for the re-created replica is the backup that lost it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ramstore_backup::{BackupClient, BackupReplica};
use ramstore_backup::{BackupConfig, BackupStore, Disk, MemDisk, SyncMode};
use ramstore_master::{CleanerMode, ObjectStore, RejectRules, StoreConfig, WriteError};
use ramstore_rpc::LocalTransport;
use ramstore_server::backup_service::BackupService;
use ramstore_server::cold_start::{digest_of, LogReplay};
use ramstore_server::replica_manager::BackupInfo;
use ramstore_server::{ReplicaManager, StorageService};

/// Small segments, so a few hundred writes close several of them.
const SEGMENT_BYTES: usize = 128 * 1024;
const MASTER_ID: u64 = 1;
const TABLE: u64 = 7;
const BACKUPS: [&str; 2] = ["backup-2", "backup-3"];
/// How long the master may take to notice and re-create a replica: generous, as
/// the machine may be busy (no timing is asserted, only that it happens).
const PATIENCE: Duration = Duration::from_secs(60);

struct Fixture {
    store: Arc<ObjectStore>,
    manager: Arc<ReplicaManager>,
    client: BackupClient,
    task: tokio::task::JoinHandle<()>,
    /// Every acknowledged write: key → (value, version).
    model: BTreeMap<Vec<u8>, (Vec<u8>, u64)>,
}

/// A master (R = 2) replicating to two in-process backups, started, with replica
/// checks every `check_interval_ms` (0: off).
fn fixture(check_interval_ms: u64) -> Fixture {
    fixture_with(
        check_interval_ms,
        SEGMENT_BYTES,
        16 << 20,
        64,
        CleanerMode::Manual,
    )
}

/// [`fixture`] with `segment_bytes` segments, `memory_bytes` of log,
/// `frame_count` frames per backup and the given cleaner.
fn fixture_with(
    check_interval_ms: u64,
    segment_bytes: usize,
    memory_bytes: usize,
    frame_count: u32,
    cleaner: CleanerMode,
) -> Fixture {
    let transport = Arc::new(LocalTransport::new());
    let manager = ReplicaManager::new(
        2,
        BackupClient::new(transport.clone()),
        5,
        ramstore_clock::system_clock(),
    );
    manager.set_replica_check_interval_ms(check_interval_ms);
    let mut config = StoreConfig::new(memory_bytes);
    config.segment_bytes = segment_bytes;
    config.cleaner = cleaner;
    config.replicas = manager.clone();
    let store = Arc::new(ObjectStore::new(config).expect("store"));
    store.add_tablet(TABLE, 0, u64::MAX).expect("tablet");
    for addr in BACKUPS {
        let backup_config = BackupConfig {
            frame_count,
            segment_bytes: segment_bytes as u32,
            max_open_buffers: 16,
            sync_mode: SyncMode::Buffered,
        };
        let backup_store =
            BackupStore::create(Box::new(MemDisk::new()) as Box<dyn Disk>, backup_config)
                .expect("backup store");
        // The backup's own master half is idle: a small log.
        let mut own = StoreConfig::new(2 << 20);
        own.segment_bytes = segment_bytes;
        own.cleaner = CleanerMode::Manual;
        let service = StorageService::with_backup(
            ObjectStore::new(own).expect("backup's store"),
            Some(BackupService::new(backup_store)),
        );
        transport.register(addr, Arc::new(service));
    }
    manager.set_backups(
        BACKUPS
            .iter()
            .enumerate()
            .map(|(i, addr)| BackupInfo {
                server_id: 2 + i as u64,
                address: addr.to_string(),
                failure_domain: String::new(),
                backup_read_mbps: 100,
            })
            .collect(),
    );
    let task = manager.start(store.log_handle(), MASTER_ID, "");
    Fixture {
        store,
        manager,
        client: BackupClient::new(transport),
        task,
        model: BTreeMap::new(),
    }
}

impl Fixture {
    /// Writes `key` and waits until it is durable, retrying a full log (the
    /// cleaner frees memory meanwhile) and the wait (each one ends after
    /// `REPLICATION_WAIT_MS`) for at most [`PATIENCE`].
    async fn write_durably(&mut self, key: &[u8], value: &[u8]) {
        let deadline = Instant::now() + PATIENCE;
        let version = loop {
            match self.store.write(TABLE, key, value, &RejectRules::default()) {
                Ok(version) => break version,
                Err(WriteError::NoSpace) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err(e) => panic!("write of {key:?}: {e:?}; {:?}", self.manager.stats()),
            }
        };
        let point = self.manager.sync_point();
        while let Err(e) = self.manager.wait_durable(point).await {
            assert!(
                Instant::now() < deadline,
                "write of {key:?} not durable after {PATIENCE:?}: {e}; {:?}; disk budget {:?}, balancer {:?}",
                self.manager.stats(),
                self.store.log().disk_budget_bytes(),
                ramstore_log::Cleaner::new(self.store.log()).balancer_input(),
            );
        }
        self.model.insert(key.to_vec(), (value.to_vec(), version));
    }

    async fn replicas_on(&self, addr: &str) -> Vec<BackupReplica> {
        self.client
            .get_replicas(addr, MASTER_ID)
            .await
            .expect("replica list")
    }

    /// Replays the log as recovery would, from the replicas the backups offer,
    /// and checks it against the model. Every segment of the newest digest must
    /// be on both backups (R = 2 replicas each): the invariant this feature keeps.
    async fn assert_recoverable(&self) {
        let mut holders: BTreeMap<u64, Vec<&str>> = BTreeMap::new();
        for addr in BACKUPS {
            for r in self.replicas_on(addr).await {
                holders.entry(r.segment_id).or_default().push(addr);
            }
        }
        let mut digest = None;
        for (&id, addrs) in holders.iter().rev() {
            let bytes = self
                .client
                .read_replica(addrs[0], MASTER_ID, id)
                .await
                .expect("replica read")
                .bytes;
            if let Some(d) = digest_of(&bytes) {
                digest = Some(d);
                break;
            }
        }
        let digest = digest.expect("a backup offers a head with a digest");
        let mut replay = LogReplay::default();
        for id in digest {
            let addrs = holders.get(&id).map(Vec::as_slice).unwrap_or_default();
            assert_eq!(
                addrs.len(),
                BACKUPS.len(),
                "segment {id} of the digest is on {addrs:?}, not on both backups"
            );
            // Recovery may use either replica: replay the shorter, so a copy
            // lacking acknowledged bytes cannot hide behind a complete one.
            let mut shortest: Option<bytes::Bytes> = None;
            for addr in addrs {
                let bytes = self
                    .client
                    .read_replica(addr, MASTER_ID, id)
                    .await
                    .expect("replica read")
                    .bytes;
                if shortest.as_ref().is_none_or(|s| bytes.len() < s.len()) {
                    shortest = Some(bytes);
                }
            }
            let bytes = shortest.expect("two holders");
            replay.add_segment(&bytes).expect("replica parses");
        }
        let recovered: BTreeMap<Vec<u8>, (Vec<u8>, u64)> = replay
            .live()
            .filter(|(t, ..)| *t == TABLE)
            .map(|(_, k, v, value)| (k.to_vec(), (value.to_vec(), v)))
            .collect();
        for (key, (value, version)) in &self.model {
            let got = recovered
                .get(key)
                .unwrap_or_else(|| panic!("acknowledged key {key:?} not recoverable"));
            assert_eq!(got.1, *version, "version of key {key:?}");
            assert!(got.0 == *value, "value of key {key:?}");
        }
    }

    fn stop(self) {
        self.manager.shutdown();
        self.task.abort();
    }
}

/// Waits until `f` holds, at most [`PATIENCE`].
async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + PATIENCE;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The open replica a backup holds (the head's).
async fn open_segment(fx: &Fixture, addr: &str) -> u64 {
    fx.replicas_on(addr)
        .await
        .iter()
        .filter(|r| !r.closed)
        .map(|r| r.segment_id)
        .max()
        .expect("the backup holds the open head")
}

/// Regression (issue 17): the head's replica freed behind the master's back made
/// the backup answer OBJECT_DOESNT_EXIST to the next write; the master counted
/// the backup as failed for that segment, found no other backup for it (R = 2,
/// two backups) and every write after timed out forever. Now the answer to the
/// write alone (periodic checks off) gets the replica re-created, on that same
/// backup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_to_a_freed_head_replica_recreates_it() {
    let mut fx = fixture(0);
    for i in 0..20u32 {
        fx.write_durably(format!("a{i}").as_bytes(), &[1u8; 500])
            .await;
    }
    let head = open_segment(&fx, BACKUPS[0]).await;
    fx.client
        .free(BACKUPS[0], MASTER_ID, head)
        .await
        .expect("free");
    for i in 0..20u32 {
        fx.write_durably(format!("b{i}").as_bytes(), &[2u8; 500])
            .await;
    }
    let stats = fx.manager.stats();
    assert!(stats.replicas_found_lost >= 1, "{stats:?}");
    assert_eq!(stats.replica_checks, 0, "checks were off: {stats:?}");
    // The old head is on both backups again (closed: it was moved, R§8).
    eventually("the freed head to be re-created", || async {
        fx.replicas_on(BACKUPS[0])
            .await
            .iter()
            .any(|r| r.segment_id == head && r.closed)
    })
    .await;
    fx.write_durably(b"last", b"last").await;
    fx.assert_recoverable().await;
    fx.stop();
}

/// A closed segment's replica freed behind the master's back is never written
/// again, so only the periodic replica check can find it: it does, and the
/// replica is re-created whole and closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_check_finds_a_freed_closed_replica_and_recreates_it() {
    let mut fx = fixture(10);
    // About three segments' worth: some closed ones.
    for i in 0..100u32 {
        fx.write_durably(format!("k{i}").as_bytes(), &[3u8; 4_000])
            .await;
    }
    let closed = fx
        .replicas_on(BACKUPS[1])
        .await
        .iter()
        .find(|r| r.closed)
        .map(|r| r.segment_id)
        .expect("a closed replica on the backup");
    fx.client
        .free(BACKUPS[1], MASTER_ID, closed)
        .await
        .expect("free");
    eventually("the freed closed replica to be re-created", || async {
        fx.replicas_on(BACKUPS[1])
            .await
            .iter()
            .any(|r| r.segment_id == closed && r.closed)
    })
    .await;
    let stats = fx.manager.stats();
    assert!(stats.replicas_found_lost >= 1, "{stats:?}");
    assert!(stats.replica_checks >= 1, "{stats:?}");
    fx.write_durably(b"last", b"last").await;
    fx.assert_recoverable().await;
    fx.stop();
}

/// The head's replica freed while no write comes: the check finds it too, and
/// the writes that come later are acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_check_finds_a_freed_head_replica_while_idle() {
    let mut fx = fixture(10);
    for i in 0..20u32 {
        fx.write_durably(format!("a{i}").as_bytes(), &[4u8; 500])
            .await;
    }
    let head = open_segment(&fx, BACKUPS[1]).await;
    fx.client
        .free(BACKUPS[1], MASTER_ID, head)
        .await
        .expect("free");
    eventually("the check to find the freed head replica", || async {
        fx.manager.stats().replicas_found_lost >= 1
    })
    .await;
    eventually("the freed head to be re-created", || async {
        fx.replicas_on(BACKUPS[1])
            .await
            .iter()
            .any(|r| r.segment_id == head && r.closed)
    })
    .await;
    for i in 0..20u32 {
        fx.write_durably(format!("b{i}").as_bytes(), &[5u8; 500])
            .await;
    }
    fx.assert_recoverable().await;
    fx.stop();
}

/// Checks of healthy backups find nothing: no replica is re-created needlessly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_check_of_healthy_backups_recreates_nothing() {
    let mut fx = fixture(10);
    for i in 0..100u32 {
        fx.write_durably(format!("k{i}").as_bytes(), &[6u8; 4_000])
            .await;
    }
    eventually("a few checks", || async {
        fx.manager.stats().replica_checks >= 6
    })
    .await;
    let stats = fx.manager.stats();
    assert_eq!(stats.replicas_found_lost, 0, "{stats:?}");
    assert_eq!(stats.rereplications, 0, "{stats:?}");
    fx.assert_recoverable().await;
    fx.stop();
}

/// Regression (issue 17, docs/design-notes.md "Full backups"): a master whose
/// on-disk log outgrew its backups (here 24 frames each, 20 of them for ordinary
/// opens, while the configured disk limit is 2 × 32 segments of memory) had every
/// new head refused NO_SPACE, and writes waited for good: compaction frees
/// memory, never frames, and the balancer ran no cleaner with memory free. Now
/// the refusal sets the log's disk budget, combined cleaning keeps the log below
/// it using the frames backups keep for cleaning, and writes go on; everything
/// acknowledged stays readable and recoverable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_go_on_when_the_log_outgrows_full_backups() {
    const FRAMES: u32 = 24;
    const SEGMENT: usize = 1 << 20;
    let mut fx = fixture_with(
        0,
        SEGMENT,
        32 * SEGMENT,
        FRAMES,
        CleanerMode::Background { threads: 1 },
    );
    // 64 live keys of 1 KiB, overwritten until 3 × the backups' frames' worth
    // was written.
    let writes = 3 * FRAMES as usize * SEGMENT / 1024;
    for i in 0..writes {
        let value = vec![(i % 251) as u8; 1024];
        fx.write_durably(format!("k{}", i % 64).as_bytes(), &value)
            .await;
    }
    let budget = fx.store.log().disk_budget_bytes();
    assert!(
        budget.is_some(),
        "the backups never refused a replica: the test did not fill them"
    );
    for addr in BACKUPS {
        let held = fx.replicas_on(addr).await.len();
        assert!(held <= FRAMES as usize, "{addr} holds {held} replicas");
    }
    let mut got = Vec::new();
    for (key, (value, version)) in &fx.model {
        let read_version = fx.store.read(TABLE, key, &mut got).expect("read");
        assert_eq!(read_version, *version, "version of {key:?}");
        assert!(got == *value, "value of {key:?}");
    }
    fx.assert_recoverable().await;
    fx.stop();
}
