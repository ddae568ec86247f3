//! A participant's side of transaction recovery (Lee et al. SOSP'15 §6.4;
//! design notes "Transaction recovery"): what a recovery loop sees of the
//! undecided transactions, the decision rule over votes, sticky outcomes, and
//! outcomes that survive a replay.

use ramstore_log::entry::{encode_tx_decided, encode_tx_prepared, PreparedKind, TxRecordId};
use ramstore_master::{
    decision_of, key_hash, CleanerMode, ObjectStore, StoreConfig, Transactions, TxId,
};
use ramstore_wire::{TxOp, TxOpKind, TxVote};

const TABLE: u64 = 1;

fn store() -> ObjectStore {
    let mut cfg = StoreConfig::new(16 << 20);
    cfg.segment_bytes = 1 << 20;
    cfg.cleaner = CleanerMode::Manual;
    let s = ObjectStore::new(cfg).expect("store");
    s.add_tablet(TABLE, 0, u64::MAX).expect("tablet");
    s
}

fn tx(seq: u64) -> TxId {
    TxId {
        lease_id: 9,
        tx_seq: seq,
    }
}

fn write<'a>(key: &'a [u8], value: &'a [u8]) -> TxOp<'a> {
    TxOp {
        kind: TxOpKind::Write,
        expected_version: None,
        table_id: TABLE,
        key,
        value,
    }
}

fn value(s: &ObjectStore, key: &[u8]) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    s.read(TABLE, key, &mut v).ok().map(|_| v)
}

#[test]
fn undecided_lists_prepared_transactions_with_participants_and_first_op() {
    let s = store();
    let t = Transactions::new();
    // Objects a, b here; c on another master. This master holds op 0 (a).
    let list = [(TABLE, key_hash(b"a")), (TABLE, key_hash(b"b")), (2, 5)];
    t.prepare(
        &s,
        tx(1),
        &[write(b"a", b"1"), write(b"b", b"2")],
        &list,
        false,
    )
    .unwrap();
    // Another transaction whose first object lives elsewhere.
    let other = [(2, 6), (TABLE, key_hash(b"d"))];
    t.prepare(&s, tx(2), &[write(b"d", b"4")], &other, false)
        .unwrap();
    let mut seen = t.undecided();
    seen.sort_by_key(|u| u.id);
    assert_eq!(seen.len(), 2);
    assert_eq!((seen[0].id, seen[0].holds_first_op), (tx(1), true));
    assert_eq!(seen[0].participants, list);
    assert_eq!((seen[1].id, seen[1].holds_first_op), (tx(2), false));
    assert_eq!(seen[1].participants, other);
    t.decide(&s, tx(1), true).unwrap();
    assert_eq!(
        t.undecided().len(),
        1,
        "a decided transaction is not listed"
    );
}

#[test]
fn decision_of_commits_when_one_committed_or_none_voted_abort() {
    use TxVote::*;
    assert_eq!(decision_of(&[Prepared, Prepared]), Some(true));
    assert_eq!(decision_of(&[Prepared, Committed]), Some(true));
    assert_eq!(decision_of(&[Prepared, Abort]), Some(false));
    // A participant that applied the commit and forgot it answers ABORT; the
    // COMMITTED beside it is the decision (held outcomes).
    assert_eq!(decision_of(&[Prepared, Committed, Abort]), Some(true));
    assert_eq!(decision_of(&[Abort]), Some(false));
    assert_eq!(decision_of(&[]), None);
}

/// Regression: a stray abort (a client's late decision, say) after a commit
/// overwrote the remembered outcome, so a recovery manager asking later heard
/// ABORT from a participant that had committed.
#[test]
fn decide_after_a_decision_keeps_the_first_outcome() {
    let s = store();
    let t = Transactions::new();
    t.prepare(&s, tx(1), &[write(b"a", b"1")], &[], false)
        .unwrap();
    t.decide(&s, tx(1), true).unwrap();
    t.decide(&s, tx(1), false).unwrap();
    assert_eq!(t.outcome(tx(1)), Some(true));
    assert_eq!(t.request_vote(tx(1), &[]), TxVote::Committed);
    assert_eq!(value(&s, b"a").as_deref(), Some(&b"1"[..]));
    // And the other way round: a participant that answered "never saw it,
    // ABORT" to a manager keeps ABORT even if a commit arrives.
    assert_eq!(t.request_vote(tx(2), &[]), TxVote::Abort);
    t.decide(&s, tx(2), true).unwrap();
    assert_eq!(t.request_vote(tx(2), &[]), TxVote::Abort);
}

/// A recovery manager that decided COMMIT, applied it to its own op 0 and
/// crashed before telling the others: its recovery master replays op 0's
/// record and its decided mark, and answers the next manager COMMITTED — not
/// "never saw it", which would abort the others and split the transaction.
#[test]
fn replay_of_a_decided_op_remembers_its_outcome_for_a_vote_request() {
    let s = store();
    let t = Transactions::new();
    let id = TxRecordId {
        lease_id: 9,
        tx_seq: 3,
        op_index: 0,
        table_id: TABLE,
        key_hash: key_hash(b"a"),
    };
    let mut prepared = Vec::new();
    let list = [(TABLE, key_hash(b"a")), (2, 5)];
    encode_tx_prepared(
        &id,
        PreparedKind::Write,
        None,
        b"a",
        b"v",
        &list,
        &mut prepared,
    );
    let mut mark = Vec::new();
    encode_tx_decided(&id, true, 1, &mut mark);
    assert_eq!(
        t.replay_tx_records(&s, [prepared.as_slice(), mark.as_slice()]),
        Ok(0)
    );
    assert_eq!(t.request_vote(tx(3), &[]), TxVote::Committed);
}

/// A replayed undecided op 0 carries the participant list, so the recovery
/// master can drive the transaction's recovery.
#[test]
fn replay_of_an_undecided_first_op_keeps_its_participant_list() {
    let s = store();
    let t = Transactions::new();
    let list = [(TABLE, key_hash(b"a")), (2, 5)];
    let id = TxRecordId {
        lease_id: 9,
        tx_seq: 4,
        op_index: 0,
        table_id: TABLE,
        key_hash: key_hash(b"a"),
    };
    let mut prepared = Vec::new();
    encode_tx_prepared(
        &id,
        PreparedKind::Write,
        None,
        b"a",
        b"v",
        &list,
        &mut prepared,
    );
    assert_eq!(t.replay_tx_records(&s, [prepared.as_slice()]), Ok(1));
    let seen = t.undecided();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].id, tx(4));
    assert!(seen[0].holds_first_op);
    assert_eq!(seen[0].participants, list);
}
