//! Parked requests (`migration_park.rs`): a target answers a read of a key
//! still on the source once its PriorityPull arrives, not with RETRY; over the
//! bound, past the wait, and without PriorityPulls it answers RETRY as before.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ramstore_master::{CleanerMode, ObjectStore, StoreConfig};
use ramstore_rpc::server::SlowFuture;
use ramstore_rpc::{Handled, LocalTransport, Service};
use ramstore_wire::{
    decode_request, decode_response, encode_request, MigrationMode, PriorityPullResponseEncoder,
    RejectRules, Request, Response, Status,
};
use tokio::sync::Semaphore;

use super::migration_park::MAX_PARKED;
use super::StorageService;

const TABLE: u64 = 7;
const TARGET_ID: u64 = 2;
/// The record the source holds for every key asked of it.
const VALUE: &[u8] = b"pulled value";
const VERSION: u64 = 5;

/// A source that never answers background Pulls (so nothing arrives but by
/// PriorityPull) and answers each PriorityPull only when the test releases it,
/// with a record for every key asked.
struct HeldSource {
    release: Semaphore,
    asked: AtomicUsize,
}

impl Service for HeldSource {
    fn handle(&self, _frame: &[u8], _out: &mut Vec<u8>) -> Handled {
        Handled::Slow
    }

    fn handle_slow(self: Arc<Self>, frame: Vec<u8>) -> SlowFuture {
        Box::pin(async move {
            let Ok((header, Request::PriorityPull(items))) = decode_request(&frame) else {
                // A background Pull: held until the caller's deadline.
                return std::future::pending().await;
            };
            self.asked.fetch_add(1, Ordering::SeqCst);
            // The semaphore is never closed.
            let permit = self.release.acquire().await.expect("open");
            permit.forget();
            let mut out = Vec::new();
            let mut enc = PriorityPullResponseEncoder::new(header.request_id, &mut out);
            for item in items.iter() {
                enc.push_parts(VERSION, item.key, &[VALUE])
                    .expect("encodes");
            }
            enc.finish().expect("encodes");
            out
        })
    }
}

/// A target that has taken all of `TABLE` as migrating in from a
/// [`HeldSource`] at "source", in `mode`.
async fn target(mode: MigrationMode) -> (Arc<StorageService>, Arc<HeldSource>) {
    let mut config = StoreConfig::new(16 << 20);
    config.segment_bytes = 128 * 1024;
    config.cleaner = CleanerMode::Manual;
    let service = Arc::new(StorageService::new(
        ObjectStore::new(config).expect("store"),
    ));
    service.set_server_id(TARGET_ID);
    let source = Arc::new(HeldSource {
        release: Semaphore::new(0),
        asked: AtomicUsize::new(0),
    });
    let transport = LocalTransport::new();
    transport.register("source", source.clone());
    service.set_migration_links(Arc::new(transport), "coordinator".into());
    let take = frame(&Request::TakeMigratingTablet {
        server_id: TARGET_ID,
        table_id: TABLE,
        start_hash: 0,
        end_hash: u64::MAX,
        migration_id: 1,
        source_server_id: 1,
        safe_version: 10,
        source_address: "source",
        mode,
    });
    let answer = answer(&service, take).await;
    assert_eq!(status(&answer), Status::Ok, "the target takes the tablet");
    (service, source)
}

fn frame(req: &Request<'_>) -> Vec<u8> {
    let mut frame = Vec::new();
    encode_request(9, req, &mut frame).expect("encodes");
    frame
}

fn read(key: &[u8]) -> Vec<u8> {
    frame(&Request::Read {
        table_id: TABLE,
        rules: RejectRules::default(),
        key,
    })
}

/// The answer to `frame`, wherever the service serves it.
async fn answer(service: &Arc<StorageService>, frame: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::new();
    match service.handle(&frame, &mut out) {
        Handled::Done => out,
        Handled::Slow => service.clone().handle_slow(frame).await,
        Handled::Deferred(answer) => answer.await,
    }
}

fn status(answer: &[u8]) -> Status {
    decode_response(answer)
        .expect("the answer decodes")
        .0
        .status
}

/// Waits until the source has been asked `n` PriorityPulls.
async fn asked(source: &HeldSource, n: usize) {
    while source.asked.load(Ordering::SeqCst) < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test]
async fn read_of_a_key_being_pulled_is_answered_when_it_arrives() {
    let (service, source) = target(MigrationMode::Rocksteady).await;
    let mut out = Vec::new();
    assert_eq!(
        service.handle(&read(b"k"), &mut out),
        Handled::Slow,
        "the read is parked, not answered RETRY"
    );
    let parked = tokio::spawn({
        let service = service.clone();
        async move { service.handle_slow(read(b"k")).await }
    });
    asked(&source, 1).await;
    source.release.add_permits(1);
    let answer = parked.await.expect("the parked read finishes");
    match decode_response(&answer).expect("decodes").1 {
        Response::Read { version, value } => {
            assert_eq!(version, VERSION);
            assert_eq!(value, VALUE);
        }
        other => panic!("expected the pulled record, got {other:?}"),
    }
    assert_eq!(service.migrations.parked.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn parked_read_is_answered_retry_when_its_key_does_not_arrive_in_time() {
    let (service, source) = target(MigrationMode::Rocksteady).await;
    let answer = answer(&service, read(b"k")).await;
    assert_eq!(status(&answer), Status::Retry);
    assert_eq!(source.asked.load(Ordering::SeqCst), 1, "one PriorityPull");
    // The wait was bounded by PARK_MS: the source's answer never came.
    assert_eq!(service.migrations.parked.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn parks_answers_retry_over_the_bound() {
    let (service, _source) = target(MigrationMode::Rocksteady).await;
    service
        .migrations
        .parked
        .store(MAX_PARKED, Ordering::SeqCst);
    let mut out = Vec::new();
    assert_eq!(service.handle(&read(b"k"), &mut out), Handled::Done);
    assert_eq!(status(&out), Status::Retry);
    service.migrations.parked.store(0, Ordering::SeqCst);
}

#[tokio::test]
async fn parks_nothing_without_priority_pulls() {
    let (service, source) = target(MigrationMode::NoPriorityPulls).await;
    let mut out = Vec::new();
    assert_eq!(service.handle(&read(b"k"), &mut out), Handled::Done);
    assert_eq!(status(&out), Status::Retry);
    assert_eq!(source.asked.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn parks_never_a_blind_write() {
    let (service, _source) = target(MigrationMode::Rocksteady).await;
    let write = frame(&Request::Write {
        table_id: TABLE,
        rules: RejectRules::default(),
        key: b"k",
        value: b"new",
        rpc_id: None,
    });
    let mut out = Vec::new();
    assert_eq!(service.handle(&write, &mut out), Handled::Done);
    assert_eq!(status(&out), Status::Ok);
}
