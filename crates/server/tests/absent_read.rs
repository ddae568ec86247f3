//! A read that finds no object must not reveal a delete that is not durable yet
//! (docs/design.md §1: a read never returns what is not durable). Regression: a master cut
//! off from its backups answered "doesn't exist" for a key whose delete it could not
//! replicate; after recovery the key was back with its old value (found by the
//! partition test's zombie probe, `crates/cli/tests/partition.rs`).

use std::sync::Arc;

use ramstore_backup::BackupClient;
use ramstore_master::{CleanerMode, ObjectStore, StoreConfig};
use ramstore_rpc::{Handled, LocalTransport, Service};
use ramstore_server::{ReplicaManager, StorageService};
use ramstore_wire::{
    decode_response, encode_request, ErrorBody, MultiReadRequestEncoder, RejectRules, Request,
    Response, Status,
};

const TABLE: u64 = 7;
mod common;

const SEGMENT_BYTES: usize = 128 * 1024;

/// A master replicating with R = 1 through a manager that is never started: no
/// backup ever acknowledges, so nothing written becomes durable.
fn stalled_master() -> StorageService {
    let transport = Arc::new(LocalTransport::new());
    let manager = ReplicaManager::new(
        1,
        BackupClient::new(transport),
        1,
        ramstore_clock::system_clock(),
    );
    let mut config = StoreConfig::new(16 << 20);
    config.segment_bytes = SEGMENT_BYTES;
    config.cleaner = CleanerMode::Manual;
    config.replicas = manager.clone();
    let store = ObjectStore::new(config).expect("store");
    store.add_tablet(TABLE, 0, u64::MAX).expect("tablet");
    StorageService::new(store).with_replicas(manager)
}

fn read(key: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    let req = Request::Read {
        table_id: TABLE,
        rules: RejectRules::default(),
        key,
    };
    encode_request(1, &req, &mut frame).expect("encodes");
    frame
}

fn multi_read(key: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    let mut enc = MultiReadRequestEncoder::new(1, &mut frame);
    enc.push(TABLE, key).expect("one small item fits");
    enc.finish().expect("encodes");
    frame
}

#[tokio::test]
async fn read_of_a_key_deleted_but_not_durable_waits_and_is_not_answered_absent() {
    let master = stalled_master();
    let store = master.store();
    store
        .write(TABLE, b"k", b"old", &RejectRules::default())
        .expect("write");
    store
        .remove(TABLE, b"k", &RejectRules::default())
        .expect("remove");

    for frame in [read(b"k"), multi_read(b"k")] {
        let mut out = Vec::new();
        let answer = match master.handle(&frame, &mut out) {
            Handled::Deferred(answer) => answer.await,
            other => panic!(
                "answered at once ({other:?}): {:?}",
                decode_response(&out).map(|r| r.1)
            ),
        };
        // The delete never becomes durable: the read is told to retry, never
        // that the key does not exist.
        match decode_response(&answer).expect("decodes").1 {
            Response::Error(ErrorBody::Retry { .. }) => {}
            Response::MultiRead(items) => {
                let statuses: Vec<Status> = items.iter().map(|i| i.status).collect();
                assert_ne!(statuses, [Status::ObjectDoesntExist], "{items:?}");
            }
            other => panic!("expected RETRY, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_of_a_missing_key_is_answered_at_once_once_the_log_is_durable() {
    // The same master, replicating to one in-process backup.
    let manager = common::manager_with_one_backup(SEGMENT_BYTES);
    let mut config = StoreConfig::new(16 << 20);
    config.segment_bytes = SEGMENT_BYTES;
    config.cleaner = CleanerMode::Manual;
    config.replicas = manager.clone();
    let store = ObjectStore::new(config).expect("store");
    store.add_tablet(TABLE, 0, u64::MAX).expect("tablet");
    let log = store.log_handle();
    let master = StorageService::new(store).with_replicas(manager.clone());
    let task = manager.start(log, 1, "");
    master
        .store()
        .write(TABLE, b"k", b"v", &RejectRules::default())
        .expect("write");
    master
        .store()
        .remove(TABLE, b"k", &RejectRules::default())
        .expect("remove");
    manager
        .wait_durable(manager.sync_point())
        .await
        .expect("the backup acknowledges");

    // Nothing is pending: "doesn't exist" goes out at once.
    for key in [&b"k"[..], b"never-written"] {
        let mut out = Vec::new();
        assert!(master.handle(&read(key), &mut out).is_done());
        assert!(matches!(
            decode_response(&out).expect("decodes").1,
            Response::Error(ErrorBody::Message {
                status: Status::ObjectDoesntExist,
                ..
            })
        ));
    }
    manager.shutdown();
    task.abort();
}
