//! Too many connections (issue 6, resource exhaustion): a storage server started
//! with `--max-connections N` whose N connections are all busy (none idle to
//! evict, issue 17) answers the first request of every connection beyond N with
//! RETRY and closes it, stays up, keeps serving the connections it has, and serves
//! new ones once old ones close. Nothing acknowledged is lost.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::Cluster;
use ramstore_client::BlockingClient;
use ramstore_wire::{decode_header, encode_request, frame_len, Request, Status};

const LIMIT: usize = 8;
/// More raw connections than the limit, whatever the coordinator and peers hold.
const CONNECTIONS: usize = 3 * LIMIT;

/// Sends a ping on `stream` and returns the status of the answer, or `None` if the
/// connection closed (or said nothing for 10 s) first.
fn ping(stream: &mut TcpStream, request_id: u64) -> Option<Status> {
    stream.write_all(&ping_frame(request_id)).ok()?;
    answer(stream)
}

fn ping_frame(request_id: u64) -> Vec<u8> {
    let mut frame = Vec::new();
    encode_request(
        request_id,
        &Request::Ping {
            nonce: request_id,
            caller_id: 0,
        },
        &mut frame,
    )
    .unwrap();
    frame
}

/// Bytes of a ping sent to keep a connection busy (not idle, so not evicted).
const PARTIAL_BYTES: usize = 10;

/// The status of the next answer on `stream`, or `None` if the connection closed
/// (or said nothing for 10 s) first.
fn answer(stream: &mut TcpStream) -> Option<Status> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = Vec::new();
    loop {
        if let Ok(Some(len)) = frame_len(&buf) {
            if buf.len() >= len {
                return Some(decode_header(&buf[..len]).expect("a valid answer").status);
            }
        }
        let mut chunk = [0u8; 512];
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn refused_so_far(client: &BlockingClient, addr: &str) -> u64 {
    client
        .server_stats(addr)
        .expect("server stats")
        .lines()
        .find_map(|l| l.strip_prefix("connections_refused="))
        .expect("connections_refused in the stats")
        .parse()
        .unwrap()
}

#[test]
fn max_connections_refuses_extra_connections_with_retry_and_keeps_serving() {
    let mut cluster = Cluster::start(0);
    let limit = LIMIT.to_string();
    cluster.add_server_with("127.0.0.1:0", &["--max-connections", &limit]);
    let addr = cluster.servers[0].addr.clone();
    let client =
        BlockingClient::connect(cluster.options(Duration::from_secs(30))).expect("client connects");
    let table = client.create_table("conns", 1).expect("create table");
    let version = client.write(table, b"kept", b"value").expect("write");

    let mut open = Vec::new();
    let (mut served, mut refused) = (0, 0);
    for i in 0..CONNECTIONS {
        let mut stream = TcpStream::connect(&addr).expect("the server accepts TCP");
        // A ping and the start of another in one write: once served, the
        // connection is never idle, so it keeps its slot.
        let mut frames = ping_frame(i as u64 + 1);
        frames.extend_from_slice(&ping_frame(500 + i as u64)[..PARTIAL_BYTES]);
        stream.write_all(&frames).expect("requests sent");
        match answer(&mut stream) {
            Some(Status::Ok) => {
                served += 1;
                open.push((stream, 500 + i as u64));
            }
            Some(Status::Retry) => {
                refused += 1;
                // Refused connections are closed after the answer.
                let mut rest = [0u8; 16];
                stream
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                assert_eq!(stream.read(&mut rest).unwrap_or(0), 0, "closed after RETRY");
            }
            other => panic!("connection {i}: unexpected answer {other:?}"),
        }
    }
    assert!(
        (1..=LIMIT).contains(&served),
        "served {served} of limit {LIMIT}"
    );
    assert!(refused >= CONNECTIONS - LIMIT, "refused only {refused}");

    // The connections within the limit are still served.
    for (i, (stream, partial_id)) in open.iter_mut().enumerate() {
        stream
            .write_all(&ping_frame(*partial_id)[PARTIAL_BYTES..])
            .expect("rest of the request");
        assert_eq!(answer(stream), Some(Status::Ok));
        assert_eq!(ping(stream, 1000 + i as u64), Some(Status::Ok));
    }
    // Freed slots are reused: the client (whose own connection may have been one of
    // the refused, and which retries RETRY) reads what it wrote.
    drop(open);
    let deadline = Instant::now() + Duration::from_secs(30);
    let read = loop {
        match client.read(table, b"kept") {
            Ok(r) => break r,
            Err(e) if Instant::now() < deadline => {
                eprintln!("read after freeing connections: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("the server no longer serves reads: {e}"),
        }
    };
    assert_eq!(read, (b"value".to_vec(), version));
    assert!(refused_so_far(&client, &addr) >= refused as u64);
    assert!(
        cluster.servers[0]
            .proc
            .wait_timeout(Duration::ZERO)
            .is_none(),
        "the server stays up"
    );
}
