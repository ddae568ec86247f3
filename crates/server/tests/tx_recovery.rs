//! The transaction recovery manager (SOSP'15 §6.4; `server/src/tx_recovery.rs`):
//! two masters on a local transport and a coordinator that only answers its
//! tablet map. A transaction prepared and never decided (its client crashed)
//! is finished by the master holding its first op: all PREPARED → committed
//! everywhere; one participant that never saw it → aborted everywhere, locks
//! released, and its late prepare refused; a decision the client already
//! delivered somewhere is the one the manager takes.

use std::sync::Arc;
use std::time::Duration;

use ramstore_master::{key_hash, CleanerMode, ObjectStore, StoreConfig};
use ramstore_rpc::server::SlowFuture;
use ramstore_rpc::{Handled, LocalTransport, Service};
use ramstore_server::tx_recovery::{recover_once, Round, State};
use ramstore_server::StorageService;
use ramstore_wire::{
    decode_request, decode_response, encode_request, encode_tx_prepare, encode_tx_request_vote,
    RejectRules, Request, Response, Status, TabletMapEncoder, TxOp, TxOpKind, TxParticipant,
    TxVote,
};

const TABLE: u64 = 1;
const SPLIT: u64 = 1 << 63;
const LEASE: u64 = 5;

/// A coordinator that knows only the tablet map: m1 owns the low half of
/// the table's hashes, m2 the high half.
struct Coordinator;

impl Service for Coordinator {
    fn handle(&self, frame: &[u8], out: &mut Vec<u8>) -> Handled {
        let Ok((header, Request::GetTabletMap)) = decode_request(frame) else {
            panic!("the test coordinator answers only GetTabletMap");
        };
        let mut e = TabletMapEncoder::new(header.request_id, 1, out);
        e.push(TABLE, 0, SPLIT - 1, 1, "m1").expect("push");
        e.push(TABLE, SPLIT, u64::MAX, 2, "m2").expect("push");
        e.finish().expect("finish");
        Handled::Done
    }

    fn handle_slow(self: Arc<Self>, _frame: Vec<u8>) -> SlowFuture {
        Box::pin(async { Vec::new() })
    }
}

struct Cluster {
    transport: Arc<LocalTransport>,
    m1: Arc<StorageService>,
    m2: Arc<StorageService>,
}

fn master(id: u64, start: u64, end: u64) -> Arc<StorageService> {
    let mut config = StoreConfig::new(16 << 20);
    config.cleaner = CleanerMode::Manual;
    let s = StorageService::new(ObjectStore::new(config).expect("store"));
    s.set_server_id(id);
    s.store().add_tablet(TABLE, start, end).expect("tablet");
    Arc::new(s)
}

fn cluster() -> Cluster {
    let transport = Arc::new(LocalTransport::new());
    let m1 = master(1, 0, SPLIT - 1);
    let m2 = master(2, SPLIT, u64::MAX);
    transport.register("m1", m1.clone());
    transport.register("m2", m2.clone());
    transport.register("coord", Arc::new(Coordinator));
    Cluster { transport, m1, m2 }
}

/// A key whose hash falls on m1 (`low`) or m2.
fn key(low: bool, n: u32) -> Vec<u8> {
    (0u32..)
        .map(|i| format!("k{n}-{i}").into_bytes())
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

/// Prepares `ops` of transaction `seq` (whose objects are `all`) on `m`.
async fn prepare(
    m: &Arc<StorageService>,
    seq: u64,
    all: &[&[u8]],
    ops: &[(&[u8], &[u8])],
) -> TxVote {
    let participants: Vec<TxParticipant> = all
        .iter()
        .map(|k| TxParticipant {
            table_id: TABLE,
            key_hash: key_hash(k),
        })
        .collect();
    let ops: Vec<TxOp<'_>> = ops
        .iter()
        .map(|(key, value)| TxOp {
            kind: TxOpKind::Write,
            expected_version: None,
            table_id: TABLE,
            key,
            value,
        })
        .collect();
    let mut frame = Vec::new();
    encode_tx_prepare(1, LEASE, seq, 0, &participants, &ops, &mut frame).expect("encode");
    let out = call(m, frame).await;
    match decode_response(&out).expect("response") {
        (_, Response::TxPrepare { vote }) => vote,
        other => panic!("prepare answered {other:?}"),
    }
}

async fn decide(m: &Arc<StorageService>, seq: u64, commit: bool) {
    let mut frame = Vec::new();
    let req = Request::TxDecision {
        lease_id: LEASE,
        tx_seq: seq,
        commit,
    };
    encode_request(1, &req, &mut frame).expect("encode");
    let out = call(m, frame).await;
    assert_eq!(
        decode_response(&out).expect("response").0.status,
        Status::Ok
    );
}

fn value(m: &StorageService, key: &[u8]) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    m.store().read(TABLE, key, &mut v).ok().map(|_| v)
}

/// Whether a plain write to `key` gets through (no transaction holds it).
async fn writable(m: &Arc<StorageService>, key: &[u8]) -> bool {
    let mut frame = Vec::new();
    let req = Request::Write {
        table_id: TABLE,
        rules: RejectRules::default(),
        key,
        value: b"plain",
        rpc_id: None,
    };
    encode_request(1, &req, &mut frame).expect("encode");
    let out = call(m, frame).await;
    decode_response(&out).expect("response").0.status == Status::Ok
}

async fn round(
    c: &Cluster,
    m: &Arc<StorageService>,
    state: &mut State,
    timeout: Duration,
) -> Round {
    recover_once(m, &*c.transport, "coord", state, timeout).await
}

#[tokio::test]
async fn recover_once_commits_everywhere_when_every_participant_prepared() {
    let c = cluster();
    let (a, b) = (key(true, 1), key(false, 1));
    let all: [&[u8]; 2] = [&a, &b];
    assert_eq!(
        prepare(&c.m1, 1, &all, &[(&a, b"A")]).await,
        TxVote::Prepared
    );
    assert_eq!(
        prepare(&c.m2, 1, &all, &[(&b, b"B")]).await,
        TxVote::Prepared
    );
    // The client crashed: nobody decides. m1 holds op 0 (a) and recovers it.
    let mut state = State::default();
    let done = round(&c, &c.m1, &mut state, Duration::ZERO).await;
    assert_eq!(
        done,
        Round {
            committed: 1,
            aborted: 0,
            retry: 0,
            released: 0,
        }
    );
    assert_eq!(value(&c.m1, &a).as_deref(), Some(&b"A"[..]));
    assert_eq!(value(&c.m2, &b).as_deref(), Some(&b"B"[..]));
    assert!(writable(&c.m1, &a).await && writable(&c.m2, &b).await);
}

#[tokio::test]
async fn recover_once_aborts_everywhere_when_a_participant_never_saw_it() {
    let c = cluster();
    let (a, b) = (key(true, 2), key(false, 2));
    let all: [&[u8]; 2] = [&a, &b];
    // The client crashed before its prepare reached m2.
    assert_eq!(
        prepare(&c.m1, 2, &all, &[(&a, b"A")]).await,
        TxVote::Prepared
    );
    assert!(!writable(&c.m1, &a).await, "prepared: the lock is held");
    let mut state = State::default();
    let done = round(&c, &c.m1, &mut state, Duration::ZERO).await;
    assert_eq!(
        done,
        Round {
            committed: 0,
            aborted: 1,
            retry: 0,
            released: 0,
        }
    );
    assert_eq!(value(&c.m1, &a), None, "nothing applied");
    assert!(writable(&c.m1, &a).await, "the lock is released");
    // The prepare arrives late at m2: refused, nothing locked.
    assert_eq!(prepare(&c.m2, 2, &all, &[(&b, b"B")]).await, TxVote::Abort);
    assert!(writable(&c.m2, &b).await);
}

#[tokio::test]
async fn recover_once_agrees_with_a_decision_the_client_already_delivered() {
    let c = cluster();
    let (a, b) = (key(true, 3), key(false, 3));
    let all: [&[u8]; 2] = [&a, &b];
    prepare(&c.m1, 3, &all, &[(&a, b"A")]).await;
    prepare(&c.m2, 3, &all, &[(&b, b"B")]).await;
    // The client told m2 COMMIT and crashed before telling m1.
    decide(&c.m2, 3, true).await;
    let mut state = State::default();
    let done = round(&c, &c.m1, &mut state, Duration::ZERO).await;
    assert_eq!(done.committed, 1);
    assert_eq!(value(&c.m1, &a).as_deref(), Some(&b"A"[..]));
    // The client's decision arriving after the manager's changes nothing.
    decide(&c.m1, 3, true).await;
    assert_eq!(value(&c.m1, &a).as_deref(), Some(&b"A"[..]));
}

#[tokio::test]
async fn recover_once_waits_for_the_timeout_and_longer_without_the_first_op() {
    let c = cluster();
    let (a, b) = (key(true, 4), key(false, 4));
    let all: [&[u8]; 2] = [&a, &b];
    prepare(&c.m1, 4, &all, &[(&a, b"A")]).await;
    prepare(&c.m2, 4, &all, &[(&b, b"B")]).await;
    let hour = Duration::from_secs(3600);
    let mut s1 = State::default();
    assert_eq!(round(&c, &c.m1, &mut s1, hour).await, Round::default());
    assert!(
        !writable(&c.m1, &a).await,
        "not recovered before its timeout"
    );
    // m2 does not hold op 0: with a zero timeout it still acts (4 × 0), and
    // reaches the same decision m1 would have.
    let mut s2 = State::default();
    assert_eq!(round(&c, &c.m2, &mut s2, Duration::ZERO).await.committed, 1);
    assert_eq!(value(&c.m1, &a).as_deref(), Some(&b"A"[..]));
    assert_eq!(value(&c.m2, &b).as_deref(), Some(&b"B"[..]));
}

#[tokio::test]
async fn tx_request_vote_of_an_object_not_served_here_is_unknown_tablet() {
    let c = cluster();
    let b = key(false, 5);
    let mut frame = Vec::new();
    let object = [TxParticipant {
        table_id: TABLE,
        key_hash: key_hash(&b),
    }];
    encode_tx_request_vote(1, LEASE, 5, &object, &mut frame).expect("encode");
    let out = call(&c.m1, frame).await;
    assert_eq!(
        decode_response(&out).expect("response").0.status,
        Status::UnknownTablet
    );
    // And the refusal decided nothing: m2 still takes the prepare.
    assert_eq!(
        prepare(&c.m2, 5, &[&b], &[(&b, b"B")]).await,
        TxVote::Prepared
    );
}

/// Held commits (design notes "Transaction recovery", *Held outcomes*): each
/// participant that applied the commit holds it until a later round has told
/// every owner; then it is released and nothing is held.
#[tokio::test]
async fn recover_once_releases_held_commits_a_round_after_it_sees_them() {
    let c = cluster();
    let (a, b) = (key(true, 6), key(false, 6));
    let all: [&[u8]; 2] = [&a, &b];
    prepare(&c.m1, 6, &all, &[(&a, b"A")]).await;
    prepare(&c.m2, 6, &all, &[(&b, b"B")]).await;
    decide(&c.m1, 6, true).await;
    decide(&c.m2, 6, true).await;
    assert_eq!(c.m1.transactions().held_count(), 1);
    assert_eq!(c.m2.transactions().held_count(), 1);
    let hour = Duration::from_secs(3600);
    let mut s1 = State::default();
    assert_eq!(
        round(&c, &c.m1, &mut s1, hour).await.released,
        0,
        "first seen"
    );
    assert_eq!(round(&c, &c.m1, &mut s1, hour).await.released, 1);
    assert_eq!(c.m1.transactions().held_count(), 0);
    let mut s2 = State::default();
    round(&c, &c.m2, &mut s2, hour).await;
    assert_eq!(round(&c, &c.m2, &mut s2, hour).await.released, 1);
    assert_eq!(c.m2.transactions().held_count(), 0);
    assert_eq!(value(&c.m1, &a).as_deref(), Some(&b"A"[..]));
    assert_eq!(value(&c.m2, &b).as_deref(), Some(&b"B"[..]));
}

/// The client told only m2 COMMIT and crashed; m2 then forgot every decision
/// it remembered (more than its window since). m2's held commit answers
/// COMMITTED, so m1's manager commits instead of aborting what m2 applied;
/// and m2's release round alone would have finished m1 too.
#[tokio::test]
async fn recover_once_commits_when_the_committed_participant_forgot_its_decisions() {
    let c = cluster();
    let (a, b) = (key(true, 7), key(false, 7));
    let all: [&[u8]; 2] = [&a, &b];
    prepare(&c.m1, 7, &all, &[(&a, b"A")]).await;
    prepare(&c.m2, 7, &all, &[(&b, b"B")]).await;
    decide(&c.m2, 7, true).await;
    let t2 = c.m2.transactions();
    let forget = ramstore_master::tx::prepare::REMEMBERED_DECISIONS as u64 + 1;
    for seq in 1_000..1_000 + forget {
        let id = ramstore_master::TxId {
            lease_id: LEASE + 1,
            tx_seq: seq,
        };
        t2.decide(c.m2.store(), id, false).expect("decide");
    }
    let mut s1 = State::default();
    let done = round(&c, &c.m1, &mut s1, Duration::ZERO).await;
    assert_eq!((done.committed, done.aborted), (1, 0));
    assert_eq!(value(&c.m1, &a).as_deref(), Some(&b"A"[..]));
    assert_eq!(value(&c.m2, &b).as_deref(), Some(&b"B"[..]));
}

/// m2's release round finishes a commit the client delivered only to m2,
/// without waiting for m1's recovery timeout.
#[tokio::test]
async fn release_round_delivers_the_commit_to_a_participant_still_prepared() {
    let c = cluster();
    let (a, b) = (key(true, 8), key(false, 8));
    let all: [&[u8]; 2] = [&a, &b];
    prepare(&c.m1, 8, &all, &[(&a, b"A")]).await;
    prepare(&c.m2, 8, &all, &[(&b, b"B")]).await;
    decide(&c.m2, 8, true).await;
    let hour = Duration::from_secs(3600);
    let mut s2 = State::default();
    round(&c, &c.m2, &mut s2, hour).await;
    assert_eq!(round(&c, &c.m2, &mut s2, hour).await.released, 1);
    assert_eq!(value(&c.m1, &a).as_deref(), Some(&b"A"[..]));
    assert!(writable(&c.m1, &a).await, "m1's lock is released");
}

/// Issue 21: prepared ops do not move with a migration, so the source answers
/// PrepareMigration RETRY while a transaction holds an object of the range,
/// and keeps serving it so the decision applies; then the range may go.
#[tokio::test]
async fn prepare_migration_of_a_range_with_a_prepared_object_is_retry_until_decided() {
    let c = cluster();
    let (a, b) = (key(true, 9), key(false, 9));
    let all: [&[u8]; 2] = [&a, &b];
    prepare(&c.m1, 9, &all, &[(&a, b"A")]).await;
    prepare(&c.m2, 9, &all, &[(&b, b"B")]).await;
    let migrate = |seq: u64| {
        let req = Request::PrepareMigration {
            server_id: 1,
            table_id: TABLE,
            start_hash: 0,
            end_hash: SPLIT - 1,
            migration_id: seq,
        };
        let mut frame = Vec::new();
        encode_request(1, &req, &mut frame).expect("encode");
        frame
    };
    let out = call(&c.m1, migrate(1)).await;
    assert_eq!(
        decode_response(&out).expect("response").0.status,
        Status::Retry
    );
    decide(&c.m1, 9, true).await;
    decide(&c.m2, 9, true).await;
    assert_eq!(value(&c.m1, &a).as_deref(), Some(&b"A"[..]));
    let out = call(&c.m1, migrate(2)).await;
    assert!(matches!(
        decode_response(&out).expect("response"),
        (_, Response::PrepareMigration { .. })
    ));
}

/// Issue 21, bad input: a prepare under a client lease this master knows
/// expired is refused STALE_RPC and locks nothing; a decision under it (a
/// recovery manager's, for a crashed client) still applies.
#[tokio::test]
async fn tx_prepare_under_an_expired_lease_is_stale_and_locks_nothing() {
    let c = cluster();
    let (a, b) = (key(true, 10), key(false, 10));
    let all: [&[u8]; 2] = [&a, &b];
    prepare(&c.m2, 10, &all, &[(&b, b"B")]).await;
    c.m1.store().expire_client_lease(LEASE);
    c.m2.store().expire_client_lease(LEASE);
    let participants: Vec<TxParticipant> = all
        .iter()
        .map(|k| TxParticipant {
            table_id: TABLE,
            key_hash: key_hash(k),
        })
        .collect();
    let op = TxOp {
        kind: TxOpKind::Write,
        expected_version: None,
        table_id: TABLE,
        key: &a,
        value: b"A",
    };
    let mut frame = Vec::new();
    encode_tx_prepare(1, LEASE, 10, 0, &participants, &[op], &mut frame).expect("encode");
    let out = call(&c.m1, frame).await;
    assert_eq!(
        decode_response(&out).expect("response").0.status,
        Status::StaleRpc
    );
    assert!(writable(&c.m1, &a).await, "nothing locked");
    decide(&c.m2, 10, false).await;
    assert!(writable(&c.m2, &b).await, "the abort applied");
}

/// A master whose replay brought a transaction's outcome beside undecided ops
/// of it (`Undecided::known_outcome`) applies it in its next round, without
/// waiting for the timeout or asking anyone.
#[tokio::test]
async fn recover_once_applies_a_known_outcome_at_once() {
    use ramstore_log::entry::{encode_tx_decided, encode_tx_prepared, PreparedKind, TxRecordId};
    let c = cluster();
    let (a, b) = (key(true, 11), key(true, 12));
    let list = [(TABLE, key_hash(&a)), (TABLE, key_hash(&b))];
    let record = |op_index: u64, key: &[u8], l: &[(u64, u64)]| {
        let id = TxRecordId {
            lease_id: LEASE,
            tx_seq: 11,
            op_index,
            table_id: TABLE,
            key_hash: key_hash(key),
        };
        let mut out = Vec::new();
        encode_tx_prepared(&id, PreparedKind::Write, None, key, b"V", l, &mut out);
        (id, out)
    };
    let (a_id, a_rec) = record(0, &a, &list);
    let (_, b_rec) = record(1, &b, &[]);
    let mut mark = Vec::new();
    encode_tx_decided(&a_id, true, 1, &mut mark);
    let t = c.m1.transactions();
    assert_eq!(
        t.replay_tx_records(
            c.m1.store(),
            [a_rec.as_slice(), mark.as_slice(), b_rec.as_slice()]
        ),
        Ok(1)
    );
    let hour = Duration::from_secs(3600);
    let mut state = State::default();
    let done = round(&c, &c.m1, &mut state, hour).await;
    assert_eq!(done.committed, 1);
    assert_eq!(value(&c.m1, &b).as_deref(), Some(&b"V"[..]));
    assert!(writable(&c.m1, &b).await);
}
