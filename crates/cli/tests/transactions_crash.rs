//! Durable prepared ops across a participant crash (SOSP'15 §6.2; issue 21):
//! a transaction prepared on two masters, one of which is killed (SIGKILL)
//! between its PREPARED vote and the decision. The recovery master replays the
//! prepared op's log record, re-takes its lock (a plain write to the object is
//! answered RETRY), and the commit decision sent afterwards applies on both
//! sides: the transaction is never half-applied.
//!
//! The client side is driven frame by frame (as `exactly_once.rs` does), so
//! the crash falls exactly between the votes and the decision.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::Cluster;
use ramstore_client::{BlockingClient, ClientOptions, TabletInfo};
use ramstore_wire::{
    decode_response, encode_request, encode_tx_prepare, key_hash, ErrorBody, RejectRules, Request,
    Response, TxOp, TxOpKind, TxParticipant, TxVote,
};

const PATIENCE: Duration = Duration::from_secs(60);

/// One request/response exchange on a fresh connection to `addr`.
fn exchange(addr: &str, frame: &[u8]) -> Response<'static> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(frame).expect("send");
    let mut prefix = [0u8; 4];
    s.read_exact(&mut prefix).expect("a response frame");
    let mut rest = vec![0u8; u32::from_le_bytes(prefix) as usize];
    s.read_exact(&mut rest).expect("the whole frame");
    let mut whole = prefix.to_vec();
    whole.extend_from_slice(&rest);
    // Leaked: a test's few responses, so they can outlive this call.
    let whole: &'static [u8] = Box::leak(whole.into_boxed_slice());
    decode_response(whole).expect("a response").1
}

fn owner<'a>(map: &'a [TabletInfo], table: u64, key: &[u8]) -> &'a TabletInfo {
    let h = key_hash(key);
    map.iter()
        .find(|t| t.table_id == table && (t.start_hash..=t.end_hash).contains(&h))
        .expect("a tablet owns every key")
}

/// A key of `table` that `server_id` does (or does not) own.
fn key_on(map: &[TabletInfo], table: u64, server_id: u64, owned: bool) -> Vec<u8> {
    (0..10_000)
        .map(|i| format!("key-{i}").into_bytes())
        .find(|k| (owner(map, table, k).server_id == server_id) == owned)
        .expect("a key on each side")
}

#[test]
fn prepared_participant_crash_keeps_lock_and_commit_applies_everywhere() {
    let mut cluster = Cluster::start_with_coordinator_args(0, &[]);
    // R = 2 needs two backups besides each master after one is killed.
    for i in 0..4 {
        let dir = cluster
            .dir
            .path()
            .join(format!("server-{i}"))
            .display()
            .to_string();
        cluster.add_server_with(
            "127.0.0.1:0",
            &[
                "--replicas",
                "2",
                "--backup-dir",
                &dir,
                "--backup-frames",
                "24",
                "--memory",
                "96MiB",
                // This test sends the decision itself, after checking the
                // recovered lock: no recovery manager may decide first.
                "--tx-recovery-timeout-ms",
                "0",
            ],
        );
    }
    let client = BlockingClient::connect(ClientOptions {
        operation_deadline: Duration::from_secs(60),
        ..ClientOptions::new(cluster.addr())
    })
    .expect("client connects");
    let table = client.create_table("t", 2).unwrap();
    let map = client.tablet_map().expect("tablet map");
    let victim = map.iter().find(|t| t.table_id == table).unwrap().server_id;
    let a = key_on(&map, table, victim, true);
    let b = key_on(&map, table, victim, false);
    assert_ne!(owner(&map, table, &b).server_id, victim);
    client.write(table, &a, b"old-a").unwrap();
    client.write(table, &b, b"old-b").unwrap();
    let (lease_id, tx_seq) = (77, 1);
    let participants = [
        TxParticipant {
            table_id: table,
            key_hash: key_hash(&a),
        },
        TxParticipant {
            table_id: table,
            key_hash: key_hash(&b),
        },
    ];
    for (key, value) in [(&a, &b"new-a"[..]), (&b, &b"new-b"[..])] {
        let op = TxOp {
            kind: TxOpKind::Write,
            expected_version: None,
            table_id: table,
            key,
            value,
        };
        let mut frame = Vec::new();
        encode_tx_prepare(1, lease_id, tx_seq, 0, &participants, &[op], &mut frame).unwrap();
        let vote = exchange(&owner(&map, table, key).address, &frame);
        assert!(
            matches!(
                vote,
                Response::TxPrepare {
                    vote: TxVote::Prepared
                }
            ),
            "{vote:?}"
        );
    }
    // The participant holding `a` dies before the decision.
    let at = cluster
        .servers
        .iter()
        .position(|s| s.id == victim)
        .expect("the victim is one of ours");
    drop(cluster.servers.remove(at)); // SIGKILL
    client.crash_server(victim).expect("declared crashed");
    let deadline = Instant::now() + PATIENCE;
    let map = loop {
        let map = client.tablet_map().expect("tablet map");
        if owner(&map, table, &a).server_id != victim && client.read(table, &a).is_ok() {
            break map;
        }
        if Instant::now() > deadline {
            eprintln!("{}", cluster.coordinator.proc.transcript());
            for s in &cluster.servers {
                eprintln!("{}", s.proc.transcript());
            }
            panic!("not recovered in {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Still undecided: readers see the committed value, a plain writer waits.
    assert_eq!(client.read(table, &a).unwrap().0, b"old-a");
    let mut plain = Vec::new();
    let write = Request::Write {
        table_id: table,
        rules: RejectRules::default(),
        key: &a,
        value: b"plain",
        rpc_id: None,
    };
    encode_request(2, &write, &mut plain).unwrap();
    let refused = exchange(&owner(&map, table, &a).address, &plain);
    assert!(
        matches!(refused, Response::Error(ErrorBody::Retry { .. })),
        "the recovered lock refuses a plain write: {refused:?}"
    );
    // The decision reaches the masters that own the objects now.
    let decision = Request::TxDecision {
        lease_id,
        tx_seq,
        commit: true,
    };
    let mut frame = Vec::new();
    encode_request(3, &decision, &mut frame).unwrap();
    for key in [&a, &b] {
        let answer = exchange(&owner(&map, table, key).address, &frame);
        assert!(matches!(answer, Response::TxDecision), "{answer:?}");
    }
    assert_eq!(client.read(table, &a).unwrap().0, b"new-a");
    assert_eq!(client.read(table, &b).unwrap().0, b"new-b");
    // Both locks are gone.
    client.write(table, &a, b"after").expect("a is unlocked");
    client.write(table, &b, b"after").expect("b is unlocked");
}
