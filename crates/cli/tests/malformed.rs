//! Raw TCP to a storage server (and the coordinator): bad length prefixes close the
//! connection; frames that cannot be decoded get an error response with their own
//! request id and opcode, and the connection stays usable; random bytes never take
//! a server down; and a well-behaved client is served throughout.

mod common;

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::Cluster;
use ramstore_client::BlockingClient;
use ramstore_wire::{encode_request, RejectRules, Request};

const PING: u16 = 1;
const READ: u16 = 5;
const WRITE: u16 = 6;
const MULTI_READ: u16 = 9;
const STATUS_OK: u16 = 0;
const INVALID_REQUEST: u16 = 7;
const TOO_LARGE: u16 = 8;
const UNKNOWN_OPCODE: u16 = 14;
const FLAG_RESPONSE: u32 = 1;
const MAX_FRAME: u32 = ramstore_wire::MAX_FRAME_BYTES as u32;
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// The frames in `bytes` (whole, back to back).
fn bytes_frames(mut bytes: &[u8]) -> Vec<&[u8]> {
    let mut frames = Vec::new();
    while !bytes.is_empty() {
        let len = 4 + u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
        frames.push(&bytes[..len]);
        bytes = &bytes[len..];
    }
    frames
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A frame with this header and body; the length prefix says `header + body`.
fn frame(opcode: u16, status: u16, flags: u32, id: u64, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(20 + body.len());
    f.extend_from_slice(&(16 + body.len() as u32).to_le_bytes());
    f.extend_from_slice(&opcode.to_le_bytes());
    f.extend_from_slice(&status.to_le_bytes());
    f.extend_from_slice(&flags.to_le_bytes());
    f.extend_from_slice(&id.to_le_bytes());
    f.extend_from_slice(body);
    f
}

/// A well-formed request frame with request id `id`.
fn request(id: u64, req: &Request<'_>) -> Vec<u8> {
    let mut f = Vec::new();
    encode_request(id, req, &mut f).expect("encodes");
    f
}

/// A response's header fields and body.
#[derive(Debug)]
struct Raw {
    opcode: u16,
    status: u16,
    flags: u32,
    id: u64,
    body: Vec<u8>,
}

impl Raw {
    /// The message of an error body (`u16 len + UTF-8`).
    fn message(&self) -> String {
        let len = u16::from_le_bytes([self.body[0], self.body[1]]) as usize;
        assert_eq!(self.body.len(), 2 + len, "{self:?}");
        String::from_utf8(self.body[2..].to_vec()).expect("UTF-8 message")
    }
}

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Reads one response frame.
fn read_frame(s: &mut TcpStream) -> Raw {
    let mut prefix = [0u8; 4];
    s.read_exact(&mut prefix).expect("a response frame");
    let len = u32::from_le_bytes(prefix) as usize;
    assert!((16..=MAX_FRAME as usize).contains(&len), "length {len}");
    let mut rest = vec![0u8; len];
    s.read_exact(&mut rest).expect("the whole frame");
    Raw {
        opcode: u16::from_le_bytes([rest[0], rest[1]]),
        status: u16::from_le_bytes([rest[2], rest[3]]),
        flags: u32::from_le_bytes(rest[4..8].try_into().unwrap()),
        id: u64::from_le_bytes(rest[8..16].try_into().unwrap()),
        body: rest[16..].to_vec(),
    }
}

/// Sends `bytes` and reads the one response they get.
fn exchange(s: &mut TcpStream, bytes: &[u8]) -> Raw {
    s.write_all(bytes).expect("send");
    let r = read_frame(s);
    assert_eq!(r.flags, FLAG_RESPONSE, "{r:?}");
    r
}

/// Asserts the server closes the connection (EOF or reset) without answering.
fn expect_closed(s: &mut TcpStream, what: &str) {
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("{what}: got {n} bytes instead of a closed connection"),
        Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => {}
        Err(e) => panic!("{what}: connection not closed: {e}"),
    }
}

/// Checks the connection still works: a Ping is answered with its nonce.
fn assert_ping(s: &mut TcpStream, server_id: u64) {
    let nonce = 0x1234_5678_9abc_def0;
    let r = exchange(
        s,
        &request(
            77,
            &Request::Ping {
                nonce,
                caller_id: 0,
            },
        ),
    );
    assert_eq!((r.opcode, r.status, r.id), (PING, STATUS_OK, 77), "{r:?}");
    let mut expected = nonce.to_le_bytes().to_vec();
    expected.extend_from_slice(&server_id.to_le_bytes());
    assert_eq!(r.body, expected);
}

/// A client that writes and reads back its own keys until stopped.
struct ClientLoop {
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    handle: Option<thread::JoinHandle<Vec<String>>>,
}

impl ClientLoop {
    fn start(client: BlockingClient, table: u64) -> ClientLoop {
        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(AtomicU64::new(0));
        let (s, o) = (stop.clone(), ops.clone());
        let handle = thread::spawn(move || {
            let mut errors = Vec::new();
            let mut i = 0u64;
            while !s.load(Ordering::Relaxed) && errors.len() < 10 {
                let key = format!("good-{}", i % 100);
                let value = format!("value-{i}");
                match client.write(table, key.as_bytes(), value.as_bytes()) {
                    Ok(v) => match client.read(table, key.as_bytes()) {
                        Ok(got) if got == (value.clone().into_bytes(), v) => {}
                        other => errors.push(format!("read {key}: {other:?}")),
                    },
                    Err(e) => errors.push(format!("write {key}: {e}")),
                }
                o.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            errors
        });
        ClientLoop {
            stop,
            ops,
            handle: Some(handle),
        }
    }

    /// Stops the loop; asserts it made progress without a single error.
    fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let errors = self.handle.take().unwrap().join().expect("client thread");
        assert!(errors.is_empty(), "the good client saw errors: {errors:?}");
        assert!(self.ops.load(Ordering::Relaxed) > 0, "the good client ran");
    }
}

impl Drop for ClientLoop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A length prefix below the 16-byte header or above the frame limit (a whole
/// 8 MiB segment plus 64 KiB) leaves no way to find the next frame: the server
/// closes the connection without answering (at once, even with the rest of the
/// announced frame never sent).
#[test]
fn bad_length_prefixes_close_the_connection() {
    let cluster = Cluster::start(1);
    let addr = &cluster.servers[0].addr;
    for len in [0u32, 1, 15, MAX_FRAME + 1, 1 << 30, u32::MAX] {
        let mut s = connect(addr);
        let mut bytes = len.to_le_bytes().to_vec();
        bytes.extend_from_slice(&[0u8; 16]);
        s.write_all(&bytes).unwrap();
        expect_closed(&mut s, &format!("length prefix {len}"));
    }
    // After a good frame on the same connection too.
    let mut s = connect(addr);
    assert_ping(&mut s, cluster.servers[0].id);
    s.write_all(&(MAX_FRAME + 1).to_le_bytes()).unwrap();
    expect_closed(&mut s, "bad prefix after a good frame");
    // The largest prefix is accepted: the server waits for the rest.
    let mut s = connect(addr);
    s.write_all(&MAX_FRAME.to_le_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 1];
    let e = s.read(&mut buf).expect_err("nothing to read yet");
    assert!(
        matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "a largest frame is waited for: {e}"
    );
    // And the server is fine.
    assert_ping(&mut connect(addr), cluster.servers[0].id);
}

/// An unknown opcode is answered UNKNOWN_OPCODE (14) under the same opcode and
/// request id, with a message; the connection stays usable.
#[test]
fn unknown_opcode_is_answered_with_its_request_id() {
    let cluster = Cluster::start(1);
    let server = &cluster.servers[0];
    let mut s = connect(&server.addr);
    // The first code after the highest opcode this version knows, and the first
    // unused code below it (opcodes 44–49 are left free).
    let codes: Vec<u16> = ramstore_wire::Opcode::ALL
        .iter()
        .map(|&o| o as u16)
        .collect();
    let highest = codes.iter().copied().max().unwrap_or(0);
    let next = highest + 1;
    let gap = (1..highest).find(|c| !codes.contains(c)).unwrap_or(next);
    for (opcode, id) in [
        (0u16, 1u64),
        (next, 0xdead_beef),
        (gap, 0xfeed),
        (999, u64::MAX),
        (u16::MAX, 0),
    ] {
        for body in [&b""[..], b"some body bytes"] {
            let r = exchange(&mut s, &frame(opcode, 0, 0, id, body));
            assert_eq!(r.status, UNKNOWN_OPCODE, "{r:?}");
            assert_eq!((r.opcode, r.id), (opcode, id), "{r:?}");
            assert!(r.message().contains("opcode"), "{r:?}");
        }
        assert_ping(&mut s, server.id);
    }
    // The coordinator answers the same way.
    let mut c = connect(cluster.addr());
    let r = exchange(&mut c, &frame(4242, 0, 0, 9, b""));
    assert_eq!(
        (r.opcode, r.status, r.id),
        (4242, UNKNOWN_OPCODE, 9),
        "{r:?}"
    );
    c.write_all(&7u32.to_le_bytes()).unwrap();
    expect_closed(&mut c, "coordinator, length prefix 7");
}

/// Frames whose body is cut short, too long, or otherwise malformed (bad flags, a
/// non-OK status in a request, unknown reject-rule bits, invalid UTF-8, a list
/// count the body cannot hold) are answered INVALID_REQUEST (7) with the request's
/// opcode and id, and the connection stays usable.
#[test]
fn malformed_bodies_are_invalid_request() {
    let cluster = Cluster::start(1);
    let server = &cluster.servers[0];
    let mut s = connect(&server.addr);
    let write = request(
        0,
        &Request::Write {
            table_id: 1,
            rules: RejectRules::default(),
            key: b"key",
            value: b"value",
            rpc_id: None,
        },
    );
    let body = &write[20..];
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    for cut in [1, 5, body.len() - 8, body.len() - 1, body.len()] {
        cases.push((
            "truncated write",
            frame(WRITE, 0, 0, 100 + cut as u64, &body[..body.len() - cut]),
        ));
    }
    cases.push(("truncated read", frame(READ, 0, 0, 7, &1u64.to_le_bytes())));
    cases.push(("truncated ping", frame(PING, 0, 0, 8, &[1, 2, 3, 4])));
    cases.push(("trailing bytes", frame(PING, 0, 0, 9, &[0u8; 9])));
    cases.push((
        "response flag",
        frame(PING, 0, FLAG_RESPONSE, 10, &[0u8; 8]),
    ));
    cases.push(("unknown flag", frame(PING, 0, 4, 11, &[0u8; 8])));
    cases.push(("status in a request", frame(PING, 3, 0, 12, &[0u8; 8])));
    let mut bad_rules = body.to_vec();
    bad_rules[16] = 0x80; // rule bits after table id (8) and given version (8)
    cases.push(("unknown rule bits", frame(WRITE, 0, 0, 13, &bad_rules)));
    let mut name = 5u32.to_le_bytes().to_vec(); // span
    name.extend_from_slice(&2u16.to_le_bytes());
    name.extend_from_slice(&[0xff, 0xfe]);
    cases.push(("invalid UTF-8 name", frame(2, 0, 0, 14, &name)));
    cases.push((
        "list count over the bytes",
        frame(MULTI_READ, 0, 0, 15, &10u32.to_le_bytes()),
    ));
    cases.push(("coordinator op", request(16, &Request::GetTabletMap)));

    for (what, bytes) in &cases {
        let id = u64::from_le_bytes(bytes[12..20].try_into().unwrap());
        let opcode = u16::from_le_bytes([bytes[4], bytes[5]]);
        let r = exchange(&mut s, bytes);
        assert_eq!(r.status, INVALID_REQUEST, "{what}: {r:?}");
        assert_eq!((r.opcode, r.id), (opcode, id), "{what}: {r:?}");
        assert!(!r.message().is_empty(), "{what}: a message says why");
    }
    assert_ping(&mut s, server.id);

    // All at once, pipelined in one write: one answer each, in order.
    let all: Vec<u8> = cases.iter().flat_map(|(_, b)| b.clone()).collect();
    s.write_all(&all).unwrap();
    for (what, bytes) in &cases {
        let r = read_frame(&mut s);
        let id = u64::from_le_bytes(bytes[12..20].try_into().unwrap());
        assert_eq!((r.status, r.id), (INVALID_REQUEST, id), "{what}: {r:?}");
    }
    assert_ping(&mut s, server.id);
}

/// A value length field over 1 MiB is TOO_LARGE (8), whether or not the bytes
/// follow; so is a multi-operation count over 4096 items. The connection stays
/// usable.
#[test]
fn oversize_length_fields_are_too_large() {
    let cluster = Cluster::start(1);
    let server = &cluster.servers[0];
    let mut s = connect(&server.addr);
    let value_header = |len: u32| {
        let mut b = 1u64.to_le_bytes().to_vec(); // table id
        b.extend_from_slice(&[0u8; 9]); // rules
        b.extend_from_slice(&1u16.to_le_bytes());
        b.push(b'k');
        b.extend_from_slice(&len.to_le_bytes());
        b
    };
    for len in [(1u32 << 20) + 1, u32::MAX] {
        let r = exchange(&mut s, &frame(WRITE, 0, 0, 21, &value_header(len)));
        assert_eq!((r.opcode, r.status, r.id), (WRITE, TOO_LARGE, 21), "{r:?}");
        assert!(r.message().contains("value"), "{r:?}");
    }
    let mut whole = value_header((1 << 20) + 1);
    whole.resize(whole.len() + (1 << 20) + 1, b'v');
    let r = exchange(&mut s, &frame(WRITE, 0, 0, 22, &whole));
    assert_eq!((r.opcode, r.status, r.id), (WRITE, TOO_LARGE, 22), "{r:?}");
    let r = exchange(&mut s, &frame(MULTI_READ, 0, 0, 23, &4097u32.to_le_bytes()));
    assert_eq!(
        (r.opcode, r.status, r.id),
        (MULTI_READ, TOO_LARGE, 23),
        "{r:?}"
    );
    assert_ping(&mut s, server.id);
}

/// While other connections send junk — bad prefixes, random bytes, random frames,
/// frames announced but never finished, connections dropped mid-frame — a
/// well-behaved client on the same server sees no error at all, every random frame
/// with a valid prefix gets exactly one answer with its request id, and the server
/// answers pings afterwards.
#[test]
fn misbehaving_connections_do_not_disturb_a_good_client() {
    let cluster = Cluster::start(1);
    let server = &cluster.servers[0];
    let addr = server.addr.clone();
    let c = cluster.client();
    let table = c.create_table("good", 1).unwrap();
    let good = ClientLoop::start(cluster.client(), table);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);

    // A connection that announces a largest frame and sends only part of it, and one
    // that stops mid-header, both kept open for the whole test.
    let mut stalled = connect(&addr);
    stalled.write_all(&MAX_FRAME.to_le_bytes()).unwrap();
    stalled.write_all(&rng.bytes(100_000)).unwrap();
    let mut half_header = connect(&addr);
    half_header.write_all(&[20, 0, 0, 0, 6, 0]).unwrap();

    for round in 0..400 {
        let mut s = connect(&addr);
        match round % 4 {
            // Pure junk, then end the stream: the server must close its side too,
            // and anything it sent must be whole response frames.
            0 => {
                let n = 1 + rng.below(3000) as usize;
                let junk = rng.bytes(n);
                // The server may close as soon as it sees a bad prefix.
                let _ = s.write_all(&junk);
                let _ = s.shutdown(Shutdown::Write);
                let mut got = Vec::new();
                match s.read_to_end(&mut got) {
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
                    Err(e) => panic!("round {round}: server did not end the stream: {e}"),
                }
                let mut at = 0;
                while at < got.len() {
                    let len = u32::from_le_bytes(got[at..at + 4].try_into().unwrap()) as usize;
                    let flags = u32::from_le_bytes(got[at + 8..at + 12].try_into().unwrap());
                    assert_eq!(flags, FLAG_RESPONSE, "round {round}");
                    at += 4 + len;
                }
                assert_eq!(at, got.len(), "round {round}: whole frames only");
            }
            // Random frames with valid prefixes (random opcode near the known ones,
            // mostly-valid header, random body), pipelined, then a ping: one answer
            // per frame, matched by request id (slow operations may answer later).
            1 => {
                let mut ids = HashMap::new();
                let mut bytes = Vec::new();
                for _ in 0..20 {
                    let id = rng.next();
                    let opcode = match rng.below(4) {
                        0 => rng.next() as u16,
                        _ => rng.below(24) as u16,
                    };
                    // Storage operations with a table id no test uses.
                    let n = rng.below(64) as usize;
                    let mut body = rng.bytes(n);
                    if body.len() >= 8 {
                        body[..8].copy_from_slice(&(1_000_000 + rng.below(1000)).to_le_bytes());
                    }
                    let status = if rng.below(8) == 0 {
                        rng.below(20) as u16
                    } else {
                        0
                    };
                    let flags = if rng.below(8) == 0 {
                        rng.next() as u32
                    } else {
                        0
                    };
                    bytes.extend_from_slice(&frame(opcode, status, flags, id, &body));
                    ids.insert(id, opcode);
                }
                s.write_all(&bytes).unwrap();
                for _ in 0..ids.len() {
                    let r = read_frame(&mut s);
                    assert_eq!(r.flags, FLAG_RESPONSE, "round {round}: {r:?}");
                    let opcode = ids
                        .remove(&r.id)
                        .unwrap_or_else(|| panic!("round {round}: unexpected answer {r:?}"));
                    assert_eq!(r.opcode, opcode, "round {round}: {r:?}");
                }
                assert_ping(&mut s, server.id);
            }
            // Valid requests (for a table no test uses) with one byte after the
            // length prefix replaced: one answer each, under the id they carry.
            2 => {
                let value = rng.bytes(100);
                let requests = [
                    Request::Write {
                        table_id: 1_000_000,
                        rules: RejectRules::default(),
                        key: b"key",
                        value: &value,
                        rpc_id: None,
                    },
                    Request::Read {
                        table_id: 1_000_000,
                        rules: RejectRules::default(),
                        key: b"some key",
                    },
                    Request::Enumerate {
                        table_id: 1_000_000,
                        cursor: 0,
                        max_bytes: 1000,
                    },
                    Request::Ping {
                        nonce: 3,
                        caller_id: 0,
                    },
                ];
                let mut ids = HashMap::new();
                let mut bytes = Vec::new();
                for (i, req) in requests.iter().enumerate() {
                    let mut f = request(round as u64 * 10 + i as u64, req);
                    let at = 4 + rng.below(f.len() as u64 - 4) as usize;
                    f[at] = rng.next() as u8;
                    let id = u64::from_le_bytes(f[12..20].try_into().unwrap());
                    ids.insert(id, u16::from_le_bytes([f[4], f[5]]));
                    bytes.extend_from_slice(&f);
                }
                s.write_all(&bytes).unwrap();
                // Mutated ids may collide: count answers per id.
                let mut expected: HashMap<u64, usize> = HashMap::new();
                for f in bytes_frames(&bytes) {
                    *expected
                        .entry(u64::from_le_bytes(f[12..20].try_into().unwrap()))
                        .or_default() += 1;
                }
                for _ in 0..requests.len() {
                    let r = read_frame(&mut s);
                    assert_eq!(r.flags, FLAG_RESPONSE, "round {round}: {r:?}");
                    let left = expected
                        .get_mut(&r.id)
                        .unwrap_or_else(|| panic!("round {round}: unexpected answer {r:?}"));
                    assert!(*left > 0, "round {round}: too many answers for {r:?}");
                    *left -= 1;
                    assert_eq!(Some(&r.opcode), ids.get(&r.id), "round {round}: {r:?}");
                }
                assert_ping(&mut s, server.id);
            }
            // A frame cut off by a closed connection.
            _ => {
                let mut f = request(
                    5,
                    &Request::Write {
                        table_id: 1_000_000,
                        rules: RejectRules::default(),
                        key: b"k",
                        value: &[1u8; 5000],
                        rpc_id: None,
                    },
                );
                let cut = 1 + rng.below(f.len() as u64 - 1) as usize;
                f.truncate(cut);
                s.write_all(&f).unwrap();
            }
        }
        drop(s);
    }
    // Bad prefixes.
    for len in [3u32, MAX_FRAME + 1] {
        let mut s = connect(&addr);
        s.write_all(&len.to_le_bytes()).unwrap();
        expect_closed(&mut s, "bad prefix");
    }
    good.finish();
    assert_ping(&mut connect(&addr), server.id);
    drop((stalled, half_header));
    let stats = c.server_stats(&addr).unwrap();
    assert!(stats.contains("server_id="), "{stats}");
}
