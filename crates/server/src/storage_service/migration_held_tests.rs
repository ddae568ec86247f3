//! Held commits move with a migration (issue 21; design notes "Held outcomes",
//! *Migration*): a participant that applied a multi-server commit holds it
//! until every other owner applied it too, and a recovery manager asks the
//! owner of each object for its vote. Once the objects migrate, the new owner
//! must answer COMMITTED as the old one did, or a manager finishing the
//! transaction for a crashed client would abort, on a participant still
//! prepared, what was committed here.
//!
//! Three masters on a local transport: m1 owns the table's low half, m2 the
//! high half, m3 nothing until m1's half migrates to it, pulled for real from
//! m1 (`run_incoming`).

use std::sync::Arc;
use std::time::Duration;

use ramstore_master::{key_hash, CleanerMode, ObjectStore, StoreConfig, TxId};
use ramstore_rpc::server::SlowFuture;
use ramstore_rpc::{Handled, LocalTransport, Service};
use ramstore_wire::{
    decode_request, decode_response, encode_request, encode_response, encode_tx_prepare,
    encode_tx_request_vote, MigrationMode, Opcode, Request, Response, Status, TxOp, TxOpKind,
    TxParticipant, TxVote,
};

use super::StorageService;

const TABLE: u64 = 3;
const SPLIT: u64 = 1 << 63;
const LEASE: u64 = 11;

/// A coordinator that only acknowledges a finished migration.
struct Coordinator;

impl Service for Coordinator {
    fn handle(&self, frame: &[u8], out: &mut Vec<u8>) -> Handled {
        let Ok((header, Request::MigrationDone { .. })) = decode_request(frame) else {
            panic!("the test coordinator answers only MigrationDone");
        };
        encode_response(
            header.request_id,
            Opcode::MigrationDone,
            &Response::MigrationDone,
            out,
        )
        .expect("encodes");
        Handled::Done
    }

    fn handle_slow(self: Arc<Self>, _frame: Vec<u8>) -> SlowFuture {
        Box::pin(async { Vec::new() })
    }
}

fn master(
    id: u64,
    tablet: Option<(u64, u64)>,
    transport: &Arc<LocalTransport>,
) -> Arc<StorageService> {
    let mut config = StoreConfig::new(16 << 20);
    config.cleaner = CleanerMode::Manual;
    let s = Arc::new(StorageService::new(
        ObjectStore::new(config).expect("store"),
    ));
    s.set_server_id(id);
    if let Some((start, end)) = tablet {
        s.store().add_tablet(TABLE, start, end).expect("tablet");
    }
    s.set_migration_links(transport.clone(), "coord".into());
    transport.register(&format!("m{id}"), s.clone());
    s
}

/// A key whose hash falls on the low half (`low`) or the high half.
fn key(low: bool, n: u32) -> Vec<u8> {
    (0u32..)
        .map(|i| format!("held{n}-{i}").into_bytes())
        .find(|k| (key_hash(k) < SPLIT) == low)
        .expect("keys on both sides")
}

async fn call(service: &Arc<StorageService>, frame: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::new();
    match service.handle(&frame, &mut out) {
        Handled::Done => out,
        Handled::Slow => service.clone().handle_slow(frame).await,
        Handled::Deferred(answer) => answer.await,
    }
}

fn participants(all: &[&[u8]]) -> Vec<TxParticipant> {
    all.iter()
        .map(|k| TxParticipant {
            table_id: TABLE,
            key_hash: key_hash(k),
        })
        .collect()
}

/// Prepares a write of `key` in transaction `seq` (whose objects are `all`).
async fn prepare(m: &Arc<StorageService>, seq: u64, all: &[&[u8]], key: &[u8]) {
    let ops = [TxOp {
        kind: TxOpKind::Write,
        expected_version: None,
        table_id: TABLE,
        key,
        value: b"v",
    }];
    let mut frame = Vec::new();
    encode_tx_prepare(1, LEASE, seq, 0, &participants(all), &ops, &mut frame).expect("encode");
    let answer = call(m, frame).await;
    assert!(matches!(
        decode_response(&answer).expect("response"),
        (
            _,
            Response::TxPrepare {
                vote: TxVote::Prepared
            }
        )
    ));
}

async fn request(m: &Arc<StorageService>, req: &Request<'_>) -> Vec<u8> {
    let mut frame = Vec::new();
    encode_request(1, req, &mut frame).expect("encode");
    call(m, frame).await
}

async fn vote(m: &Arc<StorageService>, seq: u64, objects: &[&[u8]]) -> Result<TxVote, Status> {
    let mut frame = Vec::new();
    encode_tx_request_vote(1, LEASE, seq, &participants(objects), &mut frame).expect("encode");
    match decode_response(&call(m, frame).await).expect("response") {
        (_, Response::TxRequestVote { vote }) => Ok(vote),
        (h, _) => Err(h.status),
    }
}

#[tokio::test]
async fn migration_moves_a_held_commit_so_the_new_owner_votes_committed() {
    let transport = Arc::new(LocalTransport::new());
    transport.register("coord", Arc::new(Coordinator));
    let m1 = master(1, Some((0, SPLIT - 1)), &transport);
    let m2 = master(2, Some((SPLIT, u64::MAX)), &transport);
    let m3 = master(3, None, &transport);
    // Transaction 1 writes a (m1) and b (m2); its client delivered COMMIT to
    // m1 only, then crashed: m1 holds the commit, m2 is still prepared.
    let (a, b) = (key(true, 1), key(false, 1));
    let all: [&[u8]; 2] = [&a, &b];
    prepare(&m1, 1, &all, &a).await;
    prepare(&m2, 1, &all, &b).await;
    let decision = Request::TxDecision {
        lease_id: LEASE,
        tx_seq: 1,
        commit: true,
    };
    let answer = request(&m1, &decision).await;
    assert_eq!(
        decode_response(&answer).expect("response").0.status,
        Status::Ok
    );
    let tx = TxId {
        lease_id: LEASE,
        tx_seq: 1,
    };
    assert!(
        m1.tx.is_held(tx),
        "a commit other owners have not applied is held"
    );
    // A Pull answer covering a's hash carries it; one covering only another
    // key's hash does not.
    let c = key(true, 2);
    assert_eq!(m1.tx.held_in_range(TABLE, (0, SPLIT - 1)).len(), 1);
    let (ha, hc) = (key_hash(&a), key_hash(&c));
    assert_eq!(m1.tx.held_in_range(TABLE, (ha, ha)).len(), 1);
    assert!(m1.tx.held_in_range(TABLE, (hc, hc)).is_empty());
    assert!(m1.tx.held_in_range(TABLE + 1, (0, u64::MAX)).is_empty());

    // m1's half migrates to m3, pulled for real.
    let prepared = request(
        &m1,
        &Request::PrepareMigration {
            server_id: 1,
            table_id: TABLE,
            start_hash: 0,
            end_hash: SPLIT - 1,
            migration_id: 7,
        },
    )
    .await;
    let Ok((_, Response::PrepareMigration { safe_version })) = decode_response(&prepared) else {
        panic!("the source fences: {:?}", decode_response(&prepared));
    };
    let take = request(
        &m3,
        &Request::TakeMigratingTablet {
            server_id: 3,
            table_id: TABLE,
            start_hash: 0,
            end_hash: SPLIT - 1,
            migration_id: 7,
            source_server_id: 1,
            safe_version,
            source_address: "m1",
            mode: MigrationMode::Rocksteady,
        },
    )
    .await;
    assert_eq!(
        decode_response(&take).expect("response").0.status,
        Status::Ok
    );
    let serving = tokio::time::timeout(Duration::from_secs(30), async {
        while m3
            .store()
            .tablets()
            .find_serving(TABLE, key_hash(&a))
            .is_none()
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    assert!(serving.is_ok(), "the migration finishes");

    // The new owner of a holds the commit: a manager asking it about a gets
    // COMMITTED, so it commits b on m2 instead of aborting it.
    assert!(m3.tx.is_held(tx), "the held commit moved with its object");
    assert_eq!(vote(&m3, 1, &[&a]).await, Ok(TxVote::Committed));
    assert_eq!(vote(&m2, 1, &[&b]).await, Ok(TxVote::Prepared));
    // A transaction the source did not hold is unknown at the target, as before.
    assert_eq!(vote(&m3, 2, &[&a]).await, Ok(TxVote::Abort));
}
