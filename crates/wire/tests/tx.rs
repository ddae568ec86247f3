//! The TxPrepare, TxRequestVote and TxDecisions frames (`wire/src/tx.rs`,
//! `tx_vote.rs`): round trips, and their limits.

use ramstore_wire::{
    decode_request, encode_request, encode_tx_decisions, encode_tx_prepare, encode_tx_request_vote,
    Request, TxKey, TxOp, TxOpKind, TxParticipant, MAX_TX_DECISIONS, MAX_TX_OBJECTS, TX_DECIDE_NOW,
};

#[test]
fn encode_tx_prepare_round_trips_through_decode_and_encode() {
    let ops = [
        TxOp {
            kind: TxOpKind::Read,
            expected_version: Some(7),
            table_id: 1,
            key: b"a",
            value: b"",
        },
        TxOp {
            kind: TxOpKind::Write,
            expected_version: None,
            table_id: 1,
            key: b"b",
            value: b"v",
        },
    ];
    let parts = [TxParticipant {
        table_id: 1,
        key_hash: 9,
    }];
    let mut frame = Vec::new();
    encode_tx_prepare(5, 3, 4, TX_DECIDE_NOW, &parts, &ops, &mut frame).unwrap();
    let (header, req) = decode_request(&frame).unwrap();
    assert_eq!(header.request_id, 5);
    let Request::TxPrepare(p) = req else {
        panic!("decoded {req:?}");
    };
    assert_eq!((p.lease_id, p.tx_seq, p.flags), (3, 4, TX_DECIDE_NOW));
    assert_eq!(p.ops.iter().collect::<Vec<_>>(), ops);
    assert_eq!(p.participants.iter().collect::<Vec<_>>(), parts);
    let mut again = Vec::new();
    encode_request(5, &req, &mut again).unwrap();
    assert_eq!(again, frame);
}

#[test]
fn decode_tx_prepare_rejects_a_read_without_version() {
    let ops = [TxOp {
        kind: TxOpKind::Read,
        expected_version: None,
        table_id: 1,
        key: b"a",
        value: b"",
    }];
    let mut frame = Vec::new();
    encode_tx_prepare(1, 3, 4, 0, &[], &ops, &mut frame).unwrap();
    assert!(decode_request(&frame).is_err());
}

#[test]
fn encode_tx_prepare_refuses_too_many_objects() {
    let op = TxOp {
        kind: TxOpKind::Remove,
        expected_version: None,
        table_id: 1,
        key: b"a",
        value: b"",
    };
    let ops = vec![op; MAX_TX_OBJECTS + 1];
    let mut frame = Vec::new();
    assert!(encode_tx_prepare(1, 3, 4, 0, &[], &ops, &mut frame).is_err());
    assert!(frame.is_empty());
}

#[test]
fn encode_tx_request_vote_round_trips_through_decode_and_encode() {
    let objects = [
        TxParticipant {
            table_id: 1,
            key_hash: 9,
        },
        TxParticipant {
            table_id: 2,
            key_hash: 10,
        },
    ];
    let mut frame = Vec::new();
    encode_tx_request_vote(5, 3, 4, &objects, &mut frame).unwrap();
    let (header, req) = decode_request(&frame).unwrap();
    assert_eq!(header.request_id, 5);
    let Request::TxRequestVote(v) = req else {
        panic!("decoded {req:?}");
    };
    assert_eq!((v.lease_id, v.tx_seq), (3, 4));
    assert_eq!(v.objects.iter().collect::<Vec<_>>(), objects);
    let mut again = Vec::new();
    encode_request(5, &req, &mut again).unwrap();
    assert_eq!(again, frame);
}

#[test]
fn decode_tx_request_vote_rejects_no_objects_and_a_zero_id() {
    let object = [TxParticipant {
        table_id: 1,
        key_hash: 9,
    }];
    for (lease, seq, objects) in [(3, 4, &[][..]), (0, 4, &object[..]), (3, 0, &object[..])] {
        let mut frame = Vec::new();
        encode_tx_request_vote(1, lease, seq, objects, &mut frame).unwrap();
        assert!(
            decode_request(&frame).is_err(),
            "lease {lease} seq {seq} objects {}",
            objects.len()
        );
    }
}

#[test]
fn encode_tx_request_vote_refuses_too_many_objects() {
    let objects = vec![
        TxParticipant {
            table_id: 1,
            key_hash: 9,
        };
        MAX_TX_OBJECTS + 1
    ];
    let mut frame = Vec::new();
    assert!(encode_tx_request_vote(1, 3, 4, &objects, &mut frame).is_err());
    assert!(frame.is_empty());
}

#[test]
fn encode_tx_decisions_round_trips_through_decode_and_encode() {
    let txs = [
        TxKey {
            lease_id: 3,
            tx_seq: 4,
        },
        TxKey {
            lease_id: u64::MAX,
            tx_seq: 1,
        },
    ];
    for commit in [true, false] {
        let mut frame = Vec::new();
        encode_tx_decisions(8, commit, &txs, &mut frame).unwrap();
        let (header, req) = decode_request(&frame).unwrap();
        assert_eq!(header.request_id, 8);
        let Request::TxDecisions(d) = req else {
            panic!("decoded {req:?}");
        };
        assert_eq!(d.commit, commit);
        assert_eq!(d.txs.iter().collect::<Vec<_>>(), txs);
        let mut again = Vec::new();
        encode_request(8, &req, &mut again).unwrap();
        assert_eq!(again, frame);
    }
}

#[test]
fn tx_decisions_refuse_none_too_many_and_a_zero_id() {
    let mut frame = Vec::new();
    assert!(encode_tx_decisions(1, true, &[], &mut frame).is_err());
    let many = vec![
        TxKey {
            lease_id: 1,
            tx_seq: 1,
        };
        MAX_TX_DECISIONS + 1
    ];
    assert!(encode_tx_decisions(1, true, &many, &mut frame).is_err());
    assert!(frame.is_empty());
    let zero = [TxKey {
        lease_id: 0,
        tx_seq: 1,
    }];
    encode_tx_decisions(1, true, &zero, &mut frame).unwrap();
    assert!(decode_request(&frame).is_err());
}
