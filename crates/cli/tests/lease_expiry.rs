//! Client lease expiry end to end (RIFL §4.2; issue 21): with a coordinator whose
//! client lease term is short (`--client-lease-term-ms`) and masters that check
//! idle leases often (`--client-lease-check-ms`), a client that stops renewing
//! (dropped without closing anything) loses its completion records once its lease
//! expires, and a late retry of one of its RPCs with its old id is answered
//! STALE_RPC instead of the first answer — and is not executed again.
//!
//! The retry is sent at the RPC level (see `tests/exactly_once.rs`): the frame is
//! sent once (its reply "lost"), then sent again with the same lease, sequence
//! number and window.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::Cluster;
use ramstore_client::{BlockingClient, ClientOptions};
use ramstore_wire::{
    decode_response, encode_request, NumberKind, RejectRules, Request, Response, RpcId, Status,
};

/// The coordinator's client lease term in this test.
const TERM_MS: u64 = 2_000;
/// How often each master asks about leases idle for a round.
const CHECK_MS: u64 = 200;

fn exchange(addr: &str, frame: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    s.write_all(frame).expect("send");
    let mut prefix = [0u8; 4];
    s.read_exact(&mut prefix).expect("a response frame");
    let mut rest = vec![0u8; u32::from_le_bytes(prefix) as usize];
    s.read_exact(&mut rest).expect("the whole frame");
    let mut whole = prefix.to_vec();
    whole.extend_from_slice(&rest);
    whole
}

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
        operation_deadline: Duration::from_secs(30),
        ..ClientOptions::new(cluster.addr())
    })
    .expect("client connects")
}

#[test]
fn lease_expiry_drops_records_and_a_late_retry_is_stale() {
    let term = TERM_MS.to_string();
    let check = CHECK_MS.to_string();
    let mut cluster = Cluster::start_with_coordinator_args(0, &["--client-lease-term-ms", &term]);
    cluster.add_server_with("127.0.0.1:0", &["--client-lease-check-ms", &check]);
    let client = exactly_once_client(&cluster);
    let table = client.create_table("t", 1).expect("table");
    assert_eq!(client.increment_i64(table, b"c", 1).expect("incr").0, 1);
    let lease_id = client.client().client_lease_id().expect("a lease");
    let map = client.tablet_map().expect("map");
    let addr = map
        .iter()
        .find(|t| t.table_id == table)
        .expect("the table's tablet")
        .address
        .clone();
    let frame = increment_frame(
        table,
        b"c",
        RpcId {
            lease_id,
            seq: 1_000,
            first_incomplete: 2,
        },
    );
    let first = increment_answer(&exchange(&addr, &frame)).expect("runs"); // reply lost
    assert_eq!(first.0, 2);
    // While the lease lives, a retry gets the first answer from its record.
    assert_eq!(increment_answer(&exchange(&addr, &frame)), Ok(first));
    // The client goes away without a word: nobody renews its lease.
    drop(client);
    let dropped = Instant::now();
    // Give the lease its term and the master a few check rounds; then retry
    // less often than a round, so the retries themselves do not keep the lease
    // looking busy to the master.
    std::thread::sleep(Duration::from_millis(TERM_MS + 4 * CHECK_MS));
    let deadline = dropped + Duration::from_secs(30);
    loop {
        match increment_answer(&exchange(&addr, &frame)) {
            Err(Status::StaleRpc) => break,
            Ok(answer) => assert_eq!(answer, first, "a retry never runs again"),
            Err(other) => panic!("a late retry answered {other:?}"),
        }
        assert!(
            Instant::now() < deadline,
            "the expired lease's records were not dropped within 30 s"
        );
        std::thread::sleep(Duration::from_millis(5 * CHECK_MS));
    }
    assert!(
        dropped.elapsed() >= Duration::from_millis(TERM_MS),
        "records went before the lease could have expired"
    );
    // The stale retry did not execute: the counter moved once per first attempt.
    let reader = exactly_once_client(&cluster);
    assert_eq!(reader.read(table, b"c").expect("read").0, b"2");
    // A new client gets a new lease and writes exactly-once as before.
    assert_eq!(reader.increment_i64(table, b"c", 1).expect("incr").0, 3);
    assert_ne!(reader.client().client_lease_id(), Some(lease_id));
}

#[test]
fn coordinator_refuses_a_client_lease_term_out_of_range() {
    let out = common::run_cli(
        &[
            "coordinator",
            "--store",
            "file:/nonexistent-ramstore-test",
            "--client-lease-term-ms",
            "10",
        ],
        &[],
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("client-lease-term-ms"), "{out:?}");
}
