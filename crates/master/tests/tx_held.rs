//! Votes a recovery manager can trust (issue 21; design notes "Transaction
//! recovery"): a participant votes PREPARED only on objects it holds prepared,
//! a resent prepare locks the ops a recovery did not find, and a commit that
//! other masters take part in is held — durably, through cleaning and replay —
//! until released, so a participant that forgot it cannot make a manager
//! abort what was committed.

use ramstore_log::entry::{encode_tx_prepared, PreparedKind, TxRecordId, HELD_OP_INDEX};
use ramstore_log::CleanKind;
use ramstore_master::tx::prepare::REMEMBERED_DECISIONS;
use ramstore_master::{
    key_hash, CleanerMode, ObjectStore, RejectRules, StoreConfig, Transactions, TxId,
};
use ramstore_wire::{TxOp, TxOpKind, TxVote};

const TABLE: u64 = 1;

fn store() -> ObjectStore {
    let mut cfg = StoreConfig::new(64 << 20);
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

fn obj(key: &[u8]) -> (u64, u64) {
    (TABLE, key_hash(key))
}

/// The held record's key in the store's record map.
fn held_key(seq: u64) -> (u64, u64, u64) {
    (9, seq, HELD_OP_INDEX)
}

/// Commits tx `seq` writing `a` here, with object `(2, 5)` on another master.
fn commit_with_another_owner(s: &ObjectStore, t: &Transactions, seq: u64) {
    let list = [obj(b"a"), (2, 5)];
    let vote = t
        .prepare(s, tx(seq), &[write(b"a", b"1")], &list, false)
        .unwrap();
    assert_eq!(vote, TxVote::Prepared);
    t.decide(s, tx(seq), true).unwrap();
}

/// Closes many mostly dead segments and cleans them.
fn churn_and_clean(s: &ObjectStore) {
    let rules = RejectRules::default();
    let filler = vec![7u8; 1000];
    for _ in 0..6 {
        for i in 0..2000u64 {
            s.write(TABLE, &i.to_le_bytes(), &filler, &rules)
                .expect("filler write");
        }
    }
    s.clean_now(Some(CleanKind::Compaction));
    for _ in 0..50 {
        match s.clean_now(Some(CleanKind::Combined)) {
            Some((_, pass)) if pass.made_progress => {}
            _ => break,
        }
    }
    let log = s.stats().log;
    assert!(log.compactions > 0 && log.segments_cleaned > 0, "{log:?}");
}

/// The forgetful participant: it applied the commit, then decided more
/// transactions than it remembers. Without the held outcome it would answer
/// "never saw it, ABORT", and a manager would abort the other participant's
/// prepared ops of a committed transaction.
#[test]
fn decide_holds_a_commit_with_other_owners_past_the_remembered_decisions() {
    let s = store();
    let t = Transactions::new();
    commit_with_another_owner(&s, &t, 1);
    assert!(t.is_held(tx(1)));
    assert_eq!(t.held_commits(10), vec![(tx(1), vec![obj(b"a"), (2, 5)])]);
    for seq in 1000..1000 + REMEMBERED_DECISIONS as u64 + 1 {
        t.decide(&s, tx(seq), false).unwrap();
    }
    assert_eq!(t.request_vote(tx(1), &[obj(b"a")]), TxVote::Committed);
    assert_eq!(
        t.prepare(&s, tx(1), &[write(b"a", b"1")], &[obj(b"a"), (2, 5)], false)
            .unwrap(),
        TxVote::Committed,
        "a resent prepare hears the held outcome"
    );
    // Released: the record dies and the outcome is remembered as any other.
    t.release_held(&s, tx(1)).unwrap();
    assert!(!t.is_held(tx(1)));
    assert_eq!(s.tx_prepared_record(held_key(1)), None);
    assert_eq!(t.request_vote(tx(1), &[obj(b"a")]), TxVote::Committed);
}

#[test]
fn decide_holds_nothing_when_every_object_is_here_or_on_abort() {
    let s = store();
    let t = Transactions::new();
    let list = [obj(b"a"), obj(b"b")];
    let ops = [write(b"a", b"1"), write(b"b", b"2")];
    t.prepare(&s, tx(1), &ops, &list, false).unwrap();
    t.decide(&s, tx(1), true).unwrap();
    assert_eq!(t.held_count(), 0, "no other owner to tell");
    t.prepare(&s, tx(2), &[write(b"c", b"3")], &[obj(b"c"), (2, 5)], false)
        .unwrap();
    t.decide(&s, tx(2), false).unwrap();
    assert_eq!(t.held_count(), 0, "an abort is never held");
    assert_eq!(s.tx_prepared_records(), 0);
}

/// The held record is live for the cleaner until released, survives a replay
/// on another master (held there), and a replay that finds its release mark
/// remembers the commit without holding it.
#[test]
fn held_commit_survives_cleaning_and_replay_until_released() {
    let s = store();
    let t = Transactions::new();
    commit_with_another_owner(&s, &t, 7);
    let record = s.tx_prepared_record(held_key(7)).expect("held record");
    let segment = s.tx_prepared_segment(held_key(7));
    churn_and_clean(&s);
    assert_ne!(s.tx_prepared_segment(held_key(7)), segment, "it moved");
    assert_eq!(s.tx_prepared_record(held_key(7)), Some(record.clone()));

    // A recovery master replays the held record (and nothing else of tx 7:
    // its prepared op and decided mark were cleaned away).
    let other = store();
    let t2 = Transactions::new();
    assert_eq!(t2.replay_tx_records(&other, [record.as_slice()]), Ok(0));
    assert!(t2.is_held(tx(7)));
    assert_eq!(t2.request_vote(tx(7), &[obj(b"a")]), TxVote::Committed);
    assert_eq!(other.tx_prepared_record(held_key(7)), Some(record.clone()));

    // Released on the first master: its release mark, replayed with the
    // record, leaves the commit remembered but not held.
    t.release_held(&s, tx(7)).unwrap();
    let mark = release_mark(&s, 7);
    let third = store();
    let t3 = Transactions::new();
    assert_eq!(
        t3.replay_tx_records(&third, [mark.as_slice(), record.as_slice()]),
        Ok(0)
    );
    assert!(!t3.is_held(tx(7)));
    assert_eq!(t3.outcome(tx(7)), Some(true));
    assert_eq!(third.tx_prepared_records(), 0);
}

/// The decided mark that released tx `seq`'s held record, built as the store
/// builds it (the test cannot read the store's log).
fn release_mark(s: &ObjectStore, seq: u64) -> Vec<u8> {
    assert_eq!(s.tx_prepared_record(held_key(seq)), None, "not released");
    let id = TxRecordId {
        lease_id: 9,
        tx_seq: seq,
        op_index: HELD_OP_INDEX,
        table_id: TABLE,
        key_hash: key_hash(b"a"),
    };
    let mut mark = Vec::new();
    ramstore_log::entry::encode_tx_decided(&id, true, 1, &mut mark);
    mark
}

/// A master holding a transaction prepared without an op on some asked object
/// never voted PREPARED for it: it answers ABORT, keeps to it, and a commit
/// arriving later does not apply the ops it does hold.
#[test]
fn request_vote_aborts_when_an_asked_object_is_not_prepared_here() {
    let s = store();
    let t = Transactions::new();
    let list = [obj(b"a"), obj(b"b")];
    t.prepare(&s, tx(1), &[write(b"a", b"1")], &list, false)
        .unwrap();
    assert_eq!(t.request_vote(tx(1), &[obj(b"a")]), TxVote::Prepared);
    assert_eq!(
        t.request_vote(tx(1), &[obj(b"a"), obj(b"b")]),
        TxVote::Abort
    );
    assert_eq!(
        t.request_vote(tx(1), &[obj(b"a")]),
        TxVote::Abort,
        "the vote is sticky"
    );
    t.decide(&s, tx(1), true).unwrap();
    assert_eq!(value(&s, b"a"), None, "the first outcome (abort) stays");
    assert!(t.locks().is_empty());
    assert_eq!(t.held_count(), 0);
}

/// Replays the prepared record of op 0 (`a`) of tx 3, whose ops are `a` and
/// `b`, as a recovery would after a log cut among its records; returns the
/// participant list.
fn replay_only_the_first_of_two_ops(s: &ObjectStore, t: &Transactions) -> [(u64, u64); 2] {
    let list = [obj(b"a"), obj(b"b")];
    let id = TxRecordId {
        lease_id: 9,
        tx_seq: 3,
        op_index: 0,
        table_id: TABLE,
        key_hash: key_hash(b"a"),
    };
    let mut first = Vec::new();
    encode_tx_prepared(
        &id,
        PreparedKind::Write,
        None,
        b"a",
        b"1",
        &list,
        &mut first,
    );
    assert_eq!(t.replay_tx_records(s, [first.as_slice()]), Ok(1));
    list
}

/// A recovery replayed only op 0 of a participant's two (a log cut among its
/// records, before its vote): the client's resent prepare checks and locks the
/// missing op and the commit applies both.
#[test]
fn resent_prepare_locks_the_ops_a_recovery_did_not_find() {
    let s = store();
    let t = Transactions::new();
    let list = replay_only_the_first_of_two_ops(&s, &t);
    assert_eq!(t.locks().holder(TABLE, b"b"), None);
    let ops = [write(b"a", b"1"), write(b"b", b"2")];
    assert_eq!(
        t.prepare(&s, tx(3), &ops, &list, false).unwrap(),
        TxVote::Prepared
    );
    assert_eq!(t.locks().holder(TABLE, b"b"), Some(tx(3)));
    assert_eq!(t.request_vote(tx(3), &list), TxVote::Prepared);
    t.decide(&s, tx(3), true).unwrap();
    assert_eq!(value(&s, b"a").as_deref(), Some(&b"1"[..]));
    assert_eq!(value(&s, b"b").as_deref(), Some(&b"2"[..]));
}

/// The same, but another transaction holds the missing op's object: the
/// resend aborts and lets go of the op the recovery found.
#[test]
fn resent_prepare_aborts_when_a_missing_op_conflicts() {
    let s = store();
    let t = Transactions::new();
    let list = replay_only_the_first_of_two_ops(&s, &t);
    t.prepare(&s, tx(4), &[write(b"b", b"x")], &[obj(b"b")], false)
        .unwrap();
    let ops = [write(b"a", b"1"), write(b"b", b"2")];
    assert_eq!(
        t.prepare(&s, tx(3), &ops, &list, false).unwrap(),
        TxVote::Abort
    );
    assert_eq!(t.locks().holder(TABLE, b"a"), None);
    assert_eq!(t.locks().holder(TABLE, b"b"), Some(tx(4)));
    assert_eq!(value(&s, b"a"), None);
}

/// Regression (found in review, session 37): a replay that found one
/// participant's decided COMMIT marks dropped another participant's undecided
/// ops of the same transaction instead of applying them — both partitions
/// recovered on one master, or a cold start. They are prepared again, and the
/// known outcome finishes them.
#[test]
fn replay_keeps_another_participants_undecided_ops_of_a_committed_transaction() {
    let s = store();
    let t = Transactions::new();
    let list = [obj(b"a"), obj(b"b")];
    let record = |op_index: u64, key: &[u8], value: &[u8]| {
        let id = TxRecordId {
            lease_id: 9,
            tx_seq: 5,
            op_index,
            table_id: TABLE,
            key_hash: key_hash(key),
        };
        let mut out = Vec::new();
        let l: &[(u64, u64)] = if op_index == 0 { &list } else { &[] };
        encode_tx_prepared(&id, PreparedKind::Write, None, key, value, l, &mut out);
        (id, out)
    };
    // Participant P applied its op on `a` and marked it; Q never heard.
    let (a_id, a_rec) = record(0, b"a", b"A");
    let (_, b_rec) = record(1, b"b", b"B");
    let mut mark = Vec::new();
    ramstore_log::entry::encode_tx_decided(&a_id, true, 1, &mut mark);
    assert_eq!(
        t.replay_tx_records(&s, [a_rec.as_slice(), mark.as_slice(), b_rec.as_slice()]),
        Ok(1),
        "Q's op is prepared again"
    );
    assert_eq!(t.locks().holder(TABLE, b"b"), Some(tx(5)));
    let seen = t.undecided();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].known_outcome, Some(true));
    assert_eq!(t.request_vote(tx(5), &list), TxVote::Committed);
    // What the recovery loop does with a known outcome.
    t.decide(&s, tx(5), true).unwrap();
    assert_eq!(value(&s, b"b").as_deref(), Some(&b"B"[..]));
    assert!(t.locks().is_empty());
}

/// A migration's target adopts a held commit the source sent with objects of
/// the range (design notes "Held outcomes", *Migration*): it holds it with a
/// record of its own, named by the first listed object of the range, which a
/// recovery of that tablet replays and holds again; a list naming no object of
/// the range, or a commit held already, adds nothing.
#[test]
fn adopt_held_holds_a_moved_commit_durably_under_an_object_of_the_range() {
    let source = store();
    let t = Transactions::new();
    commit_with_another_owner(&source, &t, 3);
    let a = obj(b"a");
    assert_eq!(
        t.held_in_range(TABLE, (a.1, a.1)),
        vec![(tx(3), vec![a, (2, 5)])]
    );
    assert!(
        t.held_in_range(3, (0, u64::MAX)).is_empty(),
        "no object of table 3"
    );

    let target = store();
    let t2 = Transactions::new();
    let list = vec![(2, 5), a];
    t2.adopt_held(&target, tx(3), list.clone(), 3, (0, u64::MAX))
        .unwrap();
    assert!(!t2.is_held(tx(3)), "no object of table 3's range is listed");
    t2.adopt_held(&target, tx(3), list.clone(), TABLE, (0, u64::MAX))
        .unwrap();
    t2.adopt_held(&target, tx(3), list.clone(), TABLE, (0, u64::MAX))
        .unwrap();
    assert!(t2.is_held(tx(3)));
    assert_eq!(t2.held_count(), 1);
    assert_eq!(t2.request_vote(tx(3), &[a]), TxVote::Committed);
    // The record is the target's own, under object a (not (2, 5), listed
    // first but in another table), and a replay holds the commit again.
    let key = (9, 3, HELD_OP_INDEX);
    let record = target.tx_prepared_record(key).expect("held record");
    let recovered = store();
    let t3 = Transactions::new();
    assert_eq!(t3.replay_tx_records(&recovered, [record.as_slice()]), Ok(0));
    assert!(t3.is_held(tx(3)));
    assert_eq!(t3.held_commits(10), vec![(tx(3), list)]);
}

/// A partition recovery that re-took transaction state and then failed drops
/// its tablets; the state re-taken for their objects goes with them (another
/// master recovers the partition and re-takes it): the replayed op's lock is
/// released and its transaction forgotten, a held commit recorded under the
/// tablet is no longer held, and ops and holds on other objects stay.
#[test]
fn forget_tablets_drops_the_locks_and_holds_of_a_failed_partition_only() {
    let s = store();
    let t = Transactions::new();
    // Replayed: op 0 of tx 3, on object a.
    replay_only_the_first_of_two_ops(&s, &t);
    // Prepared here by a client: tx 4 on c, and a commit of tx 5 held under d.
    t.prepare(&s, tx(4), &[write(b"c", b"3")], &[obj(b"c"), (2, 5)], false)
        .unwrap();
    let list = [obj(b"d"), (2, 5)];
    t.prepare(&s, tx(5), &[write(b"d", b"4")], &list, false)
        .unwrap();
    t.decide(&s, tx(5), true).unwrap();
    assert!(t.is_held(tx(5)));
    assert_eq!(t.prepared_count(), 2);

    // The failed partition's tablet is exactly a's hash.
    let a = key_hash(b"a");
    assert_eq!(t.forget_tablets(&[(TABLE, a, a)]), 1);
    assert!(!t.locks().any_in_range(TABLE, a, a), "a's lock released");
    assert_eq!(t.prepared_count(), 1, "tx 4 stays");
    assert!(t.is_held(tx(5)), "d's hold stays");
    let c = key_hash(b"c");
    assert!(t.locks().any_in_range(TABLE, c, c), "c's lock stays");

    // A failed partition holding d's hash takes the hold with it.
    let d = key_hash(b"d");
    assert_eq!(t.forget_tablets(&[(TABLE, d, d)]), 0);
    assert!(!t.is_held(tx(5)));
    assert_eq!(
        t.forget_tablets(&[(TABLE + 5, 0, u64::MAX)]),
        0,
        "another table: nothing"
    );
    assert_eq!(t.prepared_count(), 1);
}
