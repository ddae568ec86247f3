//! The replica manager against in-process backups (the `Transport` seam): random
//! writes, overwrites and deletes while backups crash and new ones join; every
//! acknowledged operation must be recoverable from the live backups alone — the
//! newest digest names only segments some live backup offers, and replaying them
//! gives exactly the model (R§4.2, R§7.4, R§8).

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use ramstore_backup::BackupClient;
use ramstore_backup::{BackupConfig, BackupStore, Disk, FaultPlan, FaultyDisk, MemDisk, SyncMode};
use ramstore_master::{CleanerMode, ObjectStore, StoreConfig};
use ramstore_rpc::{LocalTransport, Service};
use ramstore_server::backup_service::{BackupService, ServerState};
use ramstore_server::cold_start::{digest_of, LogReplay};
use ramstore_server::replica_manager::{BackupInfo, ReplicationError};
use ramstore_server::{ReplicaManager, StorageService};
use ramstore_wire::{
    decode_response, encode_request, ErrorBody, RejectRules, Request, Response, Status,
};

/// Small segments, so a few hundred writes roll many heads.
const SEGMENT_BYTES: usize = 128 * 1024;
const MASTER_ID: u64 = 1;
const TABLE: u64 = 7;

#[derive(Debug, Clone)]
enum Op {
    Write {
        key: u8,
        len: u16,
    },
    Remove {
        key: u8,
    },
    /// Crash backup `index` (of the live ones) and start a new one.
    ReplaceBackup {
        index: u8,
    },
    /// Combined-clean and compact now (survivors, frees, digests).
    Clean,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (any::<u8>(), 1u16..6000).prop_map(|(key, len)| Op::Write { key, len }),
        3 => any::<u8>().prop_map(|key| Op::Remove { key }),
        1 => any::<u8>().prop_map(|index| Op::ReplaceBackup { index }),
        1 => Just(Op::Clean),
    ]
}

struct Cluster {
    transport: Arc<LocalTransport>,
    live: Vec<(u64, String)>,
    services: Vec<Arc<StorageService>>,
    next_id: u64,
    manager: Arc<ReplicaManager>,
}

impl Cluster {
    fn add_backup(&mut self) {
        self.add_backup_with_frames(64);
    }

    fn add_backup_with_frames(&mut self, frame_count: u32) {
        self.add_backup_on(Box::new(MemDisk::new()), frame_count);
    }

    fn add_backup_on(&mut self, disk: Box<dyn Disk>, frame_count: u32) {
        let id = self.next_id;
        self.next_id += 1;
        let addr = format!("backup-{id}");
        let config = BackupConfig {
            frame_count,
            segment_bytes: SEGMENT_BYTES as u32,
            max_open_buffers: 16,
            sync_mode: SyncMode::Buffered,
        };
        let store = BackupStore::create(disk, config).unwrap();
        // The backup's own master half is idle: a small log.
        let mut own = StoreConfig::new(2 << 20);
        own.segment_bytes = SEGMENT_BYTES;
        own.cleaner = CleanerMode::Manual;
        let service = StorageService::with_backup(
            ObjectStore::new(own).unwrap(),
            Some(BackupService::new(store)),
        );
        let service = Arc::new(service);
        self.services.push(service.clone());
        self.transport.register(&addr, service);
        self.live.push((id, addr));
        self.publish();
    }

    fn crash_backup(&mut self, index: usize) {
        let (_, addr) = self.live.remove(index % self.live.len());
        self.transport.unregister(&addr);
        self.publish();
    }

    fn publish(&self) {
        self.manager.set_backups(
            self.live
                .iter()
                .map(|(id, addr)| BackupInfo {
                    server_id: *id,
                    address: addr.clone(),
                    failure_domain: String::new(),
                    backup_read_mbps: 100,
                })
                .collect(),
        );
    }

    /// Replays the log as a cold start would, from the live backups only.
    async fn recover(&self) -> BTreeMap<Vec<u8>, (Vec<u8>, u64)> {
        let client = BackupClient::new(self.transport.clone());
        // Segment → (holder, length, closed) of every replica offered.
        let mut holders: BTreeMap<u64, Vec<(String, u32, bool)>> = BTreeMap::new();
        for (_, addr) in &self.live {
            for r in client.get_replicas(addr, MASTER_ID).await.unwrap() {
                holders
                    .entry(r.segment_id)
                    .or_default()
                    .push((addr.clone(), r.length, r.closed));
            }
        }
        let mut digest = None;
        for (&id, addrs) in holders.iter().rev() {
            let bytes = client
                .read_replica(&addrs[0].0, MASTER_ID, id)
                .await
                .unwrap()
                .bytes;
            if let Some(d) = digest_of(&bytes) {
                digest = Some(d);
                break;
            }
        }
        let digest = digest.expect("some live backup offers a head with a digest");
        let mut replay = LogReplay::default();
        for id in digest {
            let addrs = holders
                .get(&id)
                .unwrap_or_else(|| panic!("segment {id} of the digest is on no live backup"));
            // Recovery replays a closed replica if there is one, else the
            // longest open one (`ramstore_coordinator::recovery_log`'s
            // `usable_holders`): an open copy the master replaced after an RPC
            // to it failed (a round past its deadline on a loaded machine) is a
            // stale prefix, freed only once the segment is closed. Of those it
            // may use, replay the shortest, so a copy lacking acknowledged bytes
            // cannot hide behind a complete one.
            let usable = usable_replicas(addrs);
            let mut shortest: Option<bytes::Bytes> = None;
            for addr in usable {
                // The master keeps running: a copy it has since replaced (and
                // freed) may be gone by now; the others must still be there.
                let bytes = match client.read_replica(addr, MASTER_ID, id).await {
                    Ok(r) => r.bytes,
                    Err(ramstore_backup::BackupClientError::UnknownReplica { .. }) => continue,
                    Err(e) => panic!("reading segment {id} from {addr}: {e}"),
                };
                if shortest.as_ref().is_none_or(|s| bytes.len() < s.len()) {
                    shortest = Some(bytes);
                }
            }
            let bytes =
                shortest.unwrap_or_else(|| panic!("segment {id}: no listed holder still has it"));
            replay.add_segment(&bytes).expect("replica parses");
        }
        replay
            .live()
            .filter(|(t, ..)| *t == TABLE)
            .map(|(_, k, v, value)| (k.to_vec(), (value.to_vec(), v)))
            .collect()
    }
}

/// The holders of one segment's replicas that recovery may replay: the closed
/// ones if any, else the longest open ones (the coordinator's rule).
fn usable_replicas(replicas: &[(String, u32, bool)]) -> Vec<&str> {
    let closed: Vec<&str> = replicas
        .iter()
        .filter(|r| r.2)
        .map(|r| r.0.as_str())
        .collect();
    if !closed.is_empty() {
        return closed;
    }
    let longest = replicas.iter().map(|r| r.1).max().unwrap_or(0);
    replicas
        .iter()
        .filter(|r| r.1 == longest)
        .map(|r| r.0.as_str())
        .collect()
}

/// A master's store replicating through a new manager (R = `replicas`) to the
/// in-process backups of an empty cluster; the table owned, nothing started yet.
fn master(replicas: usize, seed: u64) -> (ObjectStore, Arc<ReplicaManager>, Cluster) {
    let transport = Arc::new(LocalTransport::new());
    let manager = ReplicaManager::new(
        replicas,
        BackupClient::new(transport.clone()),
        seed,
        ramstore_clock::system_clock(),
    );
    let mut config = StoreConfig::new(16 << 20);
    config.segment_bytes = SEGMENT_BYTES;
    config.cleaner = CleanerMode::Manual;
    config.replicas = manager.clone();
    let store = ObjectStore::new(config).unwrap();
    store.add_tablet(TABLE, 0, u64::MAX).unwrap();
    let cluster = Cluster {
        transport,
        live: Vec::new(),
        services: Vec::new(),
        next_id: 2,
        manager: manager.clone(),
    };
    (store, manager, cluster)
}

async fn run(ops: Vec<Op>, replicas: usize) {
    let (store, manager, mut cluster) = master(replicas, 42);
    let store = Arc::new(store);
    for _ in 0..replicas + 1 {
        cluster.add_backup();
    }
    let task = manager.start(store.log_handle(), MASTER_ID, "");
    let mut model: BTreeMap<Vec<u8>, (Vec<u8>, u64)> = BTreeMap::new();
    for (n, op) in ops.into_iter().enumerate() {
        match op {
            Op::Write { key, len } => {
                let value = vec![(n % 251) as u8; len as usize];
                let Ok(version) = store.write(TABLE, &[key], &value, &RejectRules::default())
                else {
                    continue; // NoSpace: not acknowledged, not in the model.
                };
                // With R + 1 backups and one failure at a time, R backups are
                // always there: every write becomes durable.
                manager
                    .wait_durable(manager.sync_point())
                    .await
                    .expect("write durable");
                model.insert(vec![key], (value, version));
            }
            Op::Remove { key } => {
                if store.remove(TABLE, &[key], &RejectRules::default()).is_ok() {
                    manager
                        .wait_durable(manager.sync_point())
                        .await
                        .expect("remove durable");
                    model.remove(&vec![key]);
                }
            }
            Op::ReplaceBackup { index } => {
                // One failure at a time: the others hold every acknowledged
                // byte, and the next failure comes only once the replicas lost
                // with this one are re-created (regression: on a loaded
                // machine two crashes in a row took both replicas of a segment
                // before its re-replication ended, and a key was "lost").
                cluster.crash_backup(index as usize);
                cluster.add_backup();
                let rereplicated =
                    tokio::time::timeout(std::time::Duration::from_secs(60), async {
                        while !manager.is_fully_replicated() {
                            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                        }
                    })
                    .await;
                assert!(rereplicated.is_ok(), "lost replicas re-created within 60 s");
            }
            Op::Clean => {
                // The cleaner waits for survivors' replicas: off the async threads.
                let s = store.clone();
                tokio::task::spawn_blocking(move || {
                    s.clean_now(Some(ramstore_log::CleanKind::Combined));
                    s.clean_now(Some(ramstore_log::CleanKind::Compaction));
                })
                .await
                .unwrap();
            }
        }
    }
    // A final write makes every earlier head closed on all replicas (the rule
    // for acknowledging it).
    let version = store
        .write(TABLE, b"last", b"last", &RejectRules::default())
        .unwrap();
    manager.wait_durable(manager.sync_point()).await.unwrap();
    model.insert(b"last".to_vec(), (b"last".to_vec(), version));
    let recovered = cluster.recover().await;
    for (key, (value, version)) in &model {
        let got = recovered
            .get(key)
            .unwrap_or_else(|| panic!("key {key:?} lost"));
        assert_eq!(got.1, *version, "version of key {key:?}");
        assert!(got.0 == *value, "value of key {key:?}");
    }
    for key in recovered.keys() {
        assert!(model.contains_key(key), "deleted key {key:?} came back");
    }
    manager.shutdown();
    task.abort();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn acknowledged_operations_survive_backup_crashes(ops in prop::collection::vec(op(), 50..300)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(run(ops, 2));
    }
}

/// Zombie fence (R§7.11): once a backup says this master was declared crashed,
/// its writes are no longer acknowledged: `wait_durable` reports `Fenced`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_durable_reports_fenced_once_a_backup_fences_the_master() {
    let (store, manager, mut cluster) = master(1, 7);
    let log = store.log_handle();
    let master = StorageService::new(store).with_replicas(manager.clone());
    let store = master.store();
    cluster.add_backup();
    let task = manager.start(log, MASTER_ID, "");
    store
        .write(TABLE, b"a", b"1", &RejectRules::default())
        .unwrap();
    manager.wait_durable(manager.sync_point()).await.unwrap();
    assert!(!manager.is_fenced());

    let backup = cluster.services[0].backup().unwrap();
    backup.apply_server_list(&[(MASTER_ID, ServerState::Crashed), (2, ServerState::Up)]);
    store
        .write(TABLE, b"b", b"2", &RejectRules::default())
        .unwrap();
    assert_eq!(
        manager.wait_durable(manager.sync_point()).await,
        Err(ReplicationError::Fenced)
    );
    assert!(manager.is_fenced());
    // From then on the master serves no object operation, not even a read.
    let read = encode(&Request::Read {
        table_id: TABLE,
        rules: RejectRules::default(),
        key: b"a",
    });
    let mut out = Vec::new();
    assert!(master.handle(&read, &mut out).is_done());
    assert!(matches!(
        decode_response(&out).unwrap().1,
        Response::Error(ErrorBody::Message {
            status: Status::ServerNotUp,
            ..
        })
    ));
    manager.shutdown();
    task.abort();
}

/// A wait that times out because the backups are out of frames says so (R§7.1),
/// rather than only "fewer replicas acknowledged in time": a recovery stalled on
/// full backups names the cause (docs/reliability.md, "A recovery that cannot make
/// its data durable").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_durable_names_full_backups_when_they_refuse_new_replicas() {
    let (store, manager, mut cluster) = master(1, 7);
    let log = store.log_handle();
    // Two frames: the first two heads fit, the third segment's open is refused.
    cluster.add_backup_with_frames(2);
    let task = manager.start(log, MASTER_ID, "");
    let value = vec![7u8; 4_000];
    let mut outcome = Ok(());
    for key in 0..200u32 {
        store
            .write(TABLE, &key.to_le_bytes(), &value, &RejectRules::default())
            .unwrap();
        outcome = manager.wait_durable(manager.sync_point()).await;
        if outcome.is_err() {
            break;
        }
    }
    assert_eq!(outcome, Err(ReplicationError::BackupsFull));
    assert!(ReplicationError::BackupsFull
        .to_string()
        .contains("lack of free frames"));
    // A backup with room joins: replication goes on.
    cluster.add_backup();
    manager.wait_durable(manager.sync_point()).await.unwrap();
    manager.shutdown();
    task.abort();
}

/// Regression (found by the simulator, issue 20: a migration stayed `Pulling` for
/// good): a backup that refuses a new replica because it is out of frames must
/// not be chosen again and again for that segment while another backup has
/// room. Placement prefers the backup holding the fewest of this master's
/// replicas, which is the full one here, so it was retried forever and the
/// segment never became durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_places_a_replica_elsewhere_when_the_preferred_backup_is_full() {
    let (store, manager, mut cluster) = master(1, 5);
    let log = store.log_handle();
    cluster.add_backup_with_frames(2);
    cluster.add_backup();
    let task = manager.start(log, MASTER_ID, "");
    let value = vec![5u8; 4_000];
    // About 12 segments: the small backup fills after two, and from then on it
    // holds fewer of this master's replicas than the other one.
    for key in 0..400u32 {
        store
            .write(TABLE, &key.to_le_bytes(), &value, &RejectRules::default())
            .unwrap();
        assert_eq!(
            manager.wait_durable(manager.sync_point()).await,
            Ok(()),
            "write {key}"
        );
    }
    manager.shutdown();
    task.abort();
}

/// Regression (found by the simulator, issue 20: a migration's target stayed
/// `Pulling` for good and its clients' writes never became durable, seed 168):
/// with every backup excluded for a segment — one full for good, one whose disk
/// ran out of space (ENOSPC) for a while — the manager must go back to the one
/// whose disk healed. It retried only the full one, which placement prefers
/// (it holds the fewest of this master's replicas).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_returns_to_a_backup_whose_disk_healed_while_another_stays_full() {
    let (store, manager, mut cluster) = master(1, 5);
    cluster.add_backup_with_frames(2);
    let disk = Arc::new(FaultyDisk::new(MemDisk::new()));
    cluster.add_backup_on(Box::new(disk.clone()), 64);
    let task = manager.start(store.log_handle(), MASTER_ID, "");
    let value = vec![5u8; 4_000];
    // About 12 segments: the small backup fills after two; the other holds the
    // rest, so from then on placement prefers the small one.
    for key in 0..400u32 {
        store
            .write(TABLE, &key.to_le_bytes(), &value, &RejectRules::default())
            .unwrap();
        assert_eq!(manager.wait_durable(manager.sync_point()).await, Ok(()));
    }
    // The big backup's disk fills up: its replica of the head fails, the head
    // moves, and the new head finds one backup full, the other failing.
    disk.set_plan(FaultPlan {
        space_bytes: Some(0),
        ..FaultPlan::default()
    });
    store
        .write(TABLE, b"during", &value, &RejectRules::default())
        .unwrap();
    let point = manager.sync_point();
    assert!(
        manager.wait_durable(point).await.is_err(),
        "durable with no backup able to hold it"
    );
    disk.heal();
    let started = std::time::Instant::now();
    while let Err(e) = manager.wait_durable(point).await {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "never durable after the disk healed: {e}"
        );
    }
    manager.shutdown();
    task.abort();
}

fn encode(req: &Request<'_>) -> Vec<u8> {
    let mut frame = Vec::new();
    encode_request(1, req, &mut frame).unwrap();
    frame
}

/// Regression (a recovery master whose partitions never became durable): with
/// exactly R backups, an RPC to one that fails while the backup stays in the
/// cluster (a timeout under load) must not exclude it from the segment for good;
/// the replica is re-created there and the write becomes durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_recovers_when_the_only_backups_left_had_a_failed_rpc() {
    let (store, manager, mut cluster) = master(1, 11);
    cluster.add_backup();
    let task = manager.start(store.log_handle(), MASTER_ID, "");
    let value = vec![3u8; 1_000];
    store
        .write(TABLE, b"a", &value, &RejectRules::default())
        .unwrap();
    manager.wait_durable(manager.sync_point()).await.unwrap();
    // The backup stops answering, but stays in the server list.
    let (_, addr) = cluster.live[0].clone();
    let service = cluster.services[0].clone();
    cluster.transport.unregister(&addr);
    store
        .write(TABLE, b"b", &value, &RejectRules::default())
        .unwrap();
    let point = manager.sync_point();
    // Wait for a send to it to fail, then let the backup answer again.
    let failures_before = manager.stats().rpc_failures;
    let waiting = tokio::spawn({
        let manager = manager.clone();
        async move { manager.wait_durable(point).await }
    });
    let started = std::time::Instant::now();
    while manager.stats().rpc_failures == failures_before {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "no send failed while the backup was gone"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    cluster.transport.register(&addr, service);
    tokio::time::timeout(std::time::Duration::from_secs(20), waiting)
        .await
        .expect("the write became durable on the backup it failed on once")
        .unwrap()
        .unwrap();
    manager.shutdown();
    task.abort();
}
