//! Exactly-once RPCs across real processes (RIFL §4; R§10.3; issue 21): an
//! increment whose reply is lost and which is retried with the same rpc id runs
//! once and answers its first result, also after the master that ran it crashed
//! and was recovered (its completion record travelled with the object).
//!
//! The lost reply is modelled at the RPC level: the frame is sent, its reply read
//! and thrown away, and the same frame (same lease, sequence number and window)
//! is sent again, which is what a client does after an RPC deadline.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::Cluster;
use ramstore_client::{BlockingClient, ClientOptions};
use ramstore_wire::{
    decode_response, encode_request, MultiRemoveRequestEncoder, MultiWriteRequestEncoder,
    NumberKind, RejectRules, Request, Response, RpcId, Status,
};

const PATIENCE: Duration = Duration::from_secs(60);

/// One request/response exchange on a fresh connection to `addr`.
fn exchange(addr: &str, frame: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(frame).expect("send");
    let mut prefix = [0u8; 4];
    s.read_exact(&mut prefix).expect("a response frame");
    let mut rest = vec![0u8; u32::from_le_bytes(prefix) as usize];
    s.read_exact(&mut rest).expect("the whole frame");
    let mut whole = prefix.to_vec();
    whole.extend_from_slice(&rest);
    whole
}

/// The answer of an increment frame: (value, version), or the status.
fn increment_answer(reply: &[u8]) -> Result<(i64, u64), Status> {
    match decode_response(reply).expect("a response") {
        (_, Response::Increment { version, value }) => Ok((i64::from_le_bytes(value), version)),
        (h, _) => Err(h.status),
    }
}

fn increment_frame(table_id: u64, key: &[u8], rpc_id: RpcId) -> Vec<u8> {
    let mut out = Vec::new();
    encode_request(
        1,
        &Request::Increment {
            table_id,
            rules: RejectRules::default(),
            kind: NumberKind::I64,
            delta: 1i64.to_le_bytes(),
            key,
            rpc_id: Some(rpc_id),
        },
        &mut out,
    )
    .expect("encodes");
    out
}

fn exactly_once_client(cluster: &Cluster) -> BlockingClient {
    BlockingClient::connect(ClientOptions {
        exactly_once: true,
        operation_deadline: Duration::from_secs(60),
        ..ClientOptions::new(cluster.addr())
    })
    .expect("client connects")
}

/// The address of the master owning `table` now.
fn owner_addr(client: &BlockingClient, table: u64) -> (u64, String) {
    let map = client.tablet_map().expect("tablet map");
    let t = map
        .iter()
        .find(|t| t.table_id == table)
        .expect("the table has a tablet");
    (t.server_id, t.address.clone())
}

#[test]
fn increment_retried_after_a_lost_reply_executes_once() {
    let cluster = Cluster::start(1);
    let client = exactly_once_client(&cluster);
    let table = client.create_table("t", 1).unwrap();
    // The client's own increment opens its lease.
    assert_eq!(client.increment_i64(table, b"c", 1).unwrap().0, 1);
    let lease_id = client
        .client()
        .client_lease_id()
        .expect("an exactly-once client holds a lease");
    let (_, addr) = owner_addr(&client, table);
    let rpc = RpcId {
        lease_id,
        seq: 1_000,
        first_incomplete: 2,
    };
    let frame = increment_frame(table, b"c", rpc);
    let first = increment_answer(&exchange(&addr, &frame)); // reply lost
    assert_eq!(first, Ok((2, 2)));
    for _ in 0..3 {
        assert_eq!(
            increment_answer(&exchange(&addr, &frame)),
            first,
            "a retry answers the first result"
        );
    }
    assert_eq!(client.read(table, b"c").unwrap().0, b"2", "executed once");
    // Once the client's window passes it, a late retry is stale, not run again.
    let ack = increment_frame(
        table,
        b"d",
        RpcId {
            lease_id,
            seq: 1_001,
            first_incomplete: 1_001,
        },
    );
    increment_answer(&exchange(&addr, &ack)).expect("a new rpc runs");
    assert_eq!(
        increment_answer(&exchange(&addr, &frame)),
        Err(Status::StaleRpc)
    );
    assert_eq!(client.read(table, b"c").unwrap().0, b"2");
}

/// A MultiWrite frame of `(key, value, rules)` items, each its own
/// exactly-once rpc (`seqs[i]` under `lease_id`).
fn multi_write_frame(
    table_id: u64,
    items: &[(&[u8], &[u8], RejectRules)],
    lease_id: u64,
    seqs: &[u64],
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut e = MultiWriteRequestEncoder::new(1, &mut out);
    for (key, value, rules) in items {
        e.push(table_id, *rules, key, value).expect("item fits");
    }
    e.finish_with_rpc_ids(lease_id, seqs[0], seqs)
        .expect("ids fit");
    out
}

/// Each item's (status, version) of a MultiWrite answer.
fn multi_write_answer(reply: &[u8]) -> Vec<(Status, u64)> {
    match decode_response(reply).expect("a response") {
        (_, Response::MultiWrite(items)) => items.iter().map(|r| (r.status, r.version)).collect(),
        (h, other) => panic!("{:?}: {other:?}", h.status),
    }
}

/// Issue 21: a MultiWrite whose reply is lost and which is retried with the
/// same per-op rpc ids runs each op once and answers each op's first outcome —
/// a conditional create answers OK with its version again, not OBJECT_EXISTS,
/// and a blind write is not applied a second time (its version stays). A
/// MultiRemove likewise answers "existed" again for the object it removed.
#[test]
fn multi_write_retried_after_a_lost_reply_executes_each_op_once() {
    let cluster = Cluster::start(1);
    let client = exactly_once_client(&cluster);
    let table = client.create_table("t", 1).unwrap();
    client.write(table, b"blind", b"0").unwrap();
    let lease_id = client
        .client()
        .client_lease_id()
        .expect("an exactly-once client holds a lease");
    let (_, addr) = owner_addr(&client, table);
    let items: [(&[u8], &[u8], RejectRules); 2] = [
        (b"blind", b"1", RejectRules::default()),
        (b"fresh", b"2", RejectRules::must_not_exist()),
    ];
    let frame = multi_write_frame(table, &items, lease_id, &[2_000, 2_001]);
    let first = multi_write_answer(&exchange(&addr, &frame)); // reply lost
    assert!(first.iter().all(|(s, _)| *s == Status::Ok), "{first:?}");
    for _ in 0..3 {
        assert_eq!(
            multi_write_answer(&exchange(&addr, &frame)),
            first,
            "a retry answers every op's first outcome"
        );
    }
    assert_eq!(
        client.read(table, b"blind").unwrap(),
        (b"1".to_vec(), first[0].1)
    );
    assert_eq!(
        client.read(table, b"fresh").unwrap(),
        (b"2".to_vec(), first[1].1)
    );

    let mut remove = Vec::new();
    let mut e = MultiRemoveRequestEncoder::new(1, &mut remove);
    e.push(table, RejectRules::default(), b"fresh")
        .expect("fits");
    e.finish_with_rpc_ids(lease_id, 2_000, &[2_002])
        .expect("ids fit");
    let removed = |reply: &[u8]| match decode_response(reply).expect("a response") {
        (_, Response::MultiRemove(items)) => items
            .iter()
            .map(|r| (r.status, r.existed, r.version))
            .collect::<Vec<_>>(),
        (h, other) => panic!("{:?}: {other:?}", h.status),
    };
    let once = removed(&exchange(&addr, &remove)); // reply lost
    assert_eq!(once, vec![(Status::Ok, true, first[1].1)]);
    assert_eq!(
        removed(&exchange(&addr, &remove)),
        once,
        "the retry answers existed"
    );
    assert!(client.read(table, b"fresh").is_err(), "removed");
}

#[test]
fn completion_record_survives_crash_recovery() {
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
            ],
        );
    }
    let client = exactly_once_client(&cluster);
    let table = client.create_table("t", 1).unwrap();
    client.increment_i64(table, b"c", 1).unwrap();
    let lease_id = client.client().client_lease_id().expect("a lease");
    let (owner, addr) = owner_addr(&client, table);
    let frame = increment_frame(
        table,
        b"c",
        RpcId {
            lease_id,
            seq: 500,
            first_incomplete: 2,
        },
    );
    let first = increment_answer(&exchange(&addr, &frame)).expect("runs"); // reply lost
    assert_eq!(first.0, 2);
    // The master dies before the client retries.
    let at = cluster
        .servers
        .iter()
        .position(|s| s.id == owner)
        .expect("the owner is one of ours");
    drop(cluster.servers.remove(at)); // SIGKILL
    client.crash_server(owner).expect("declared crashed");
    let deadline = Instant::now() + PATIENCE;
    let addr = loop {
        let (now_owner, addr) = owner_addr(&client, table);
        if now_owner != owner && client.read(table, b"c").is_ok() {
            break addr;
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
    assert_eq!(
        increment_answer(&exchange(&addr, &frame)),
        Ok(first),
        "the recovery master answers the first result"
    );
    assert_eq!(
        client.read(table, b"c").unwrap().0,
        b"2",
        "not executed twice"
    );
}
