//! Bounded per-connection memory and time (issue 17), counted inside the server:
//! unread replies stop a connection executing its requests, slow requests in
//! flight per connection are capped, a partial frame times out, and at the
//! connection limit the oldest idle connection makes room for a new one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ramstore_rpc::server::{SlowFuture, MAX_SLOW_IN_FLIGHT, MAX_UNSENT_REPLY_BYTES};
use ramstore_rpc::{frame_len, serve_with_table, ConnLimits, ConnTable, Handled, Service};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Bytes of the answer [`Counting`] gives to a request whose body is b"big".
const BIG_ANSWER_BYTES: usize = 1 << 20;
/// Generous wait for something that should happen within milliseconds.
const PATIENCE: Duration = Duration::from_secs(20);

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&((16 + body.len()) as u32).to_le_bytes());
    f.extend_from_slice(&[0u8; 16]);
    f.extend_from_slice(body);
    f
}

/// Answers b"big" with a 1 MiB frame, b"slow" on its own task once `gate` lets
/// it, anything else by echoing it; counts what it was asked.
struct Counting {
    handled: AtomicUsize,
    slow_started: AtomicUsize,
    gate: Arc<Semaphore>,
}

impl Default for Counting {
    fn default() -> Self {
        Self {
            handled: AtomicUsize::new(0),
            slow_started: AtomicUsize::new(0),
            gate: Arc::new(Semaphore::new(0)),
        }
    }
}

impl Service for Counting {
    fn handle(&self, frame: &[u8], out: &mut Vec<u8>) -> Handled {
        self.handled.fetch_add(1, Ordering::SeqCst);
        match &frame[20..] {
            b"big" => out.extend_from_slice(&self::frame(&vec![7u8; BIG_ANSWER_BYTES - 20])),
            b"slow" => return Handled::Slow,
            _ => out.extend_from_slice(frame),
        }
        Handled::Done
    }

    fn handle_slow(self: Arc<Self>, frame: Vec<u8>) -> SlowFuture {
        Box::pin(async move {
            self.slow_started.fetch_add(1, Ordering::SeqCst);
            // Closed never; a permit is taken for good, one per answer.
            self.gate.acquire().await.expect("open").forget();
            frame
        })
    }
}

async fn start(service: Arc<Counting>, limits: ConnLimits) -> (String, Arc<ConnTable>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let table = ConnTable::new(limits);
    tokio::spawn(serve_with_table(listener, service, table.clone()));
    (addr, table)
}

fn limits(max_connections: usize) -> ConnLimits {
    ConnLimits {
        max_connections,
        request_timeout_ms: 0,
        idle_timeout_ms: 0,
    }
}

/// Reads `n` whole frames from `stream`; returns their total length.
async fn read_frames(stream: &mut TcpStream, n: usize) -> usize {
    let mut buf = Vec::new();
    let (mut frames, mut bytes) = (0, 0);
    while frames < n {
        while let Ok(Some(len)) = frame_len(&buf) {
            if buf.len() < len {
                break;
            }
            buf.drain(..len);
            frames += 1;
            bytes += len;
        }
        if frames == n {
            break;
        }
        let mut chunk = vec![0u8; 256 * 1024];
        let got = tokio::time::timeout(PATIENCE, stream.read(&mut chunk))
            .await
            .expect("answers keep coming")
            .expect("read");
        assert!(got > 0, "closed after {frames} of {n} answers");
        buf.extend_from_slice(&chunk[..got]);
    }
    bytes
}

/// Waits until `f` has returned the same value for a while; returns it.
async fn settled(f: impl Fn() -> usize) -> usize {
    let mut last = f();
    let deadline = Instant::now() + PATIENCE;
    let mut same_since = Instant::now();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = f();
        if now != last {
            last = now;
            same_since = Instant::now();
        } else if same_since.elapsed() >= Duration::from_millis(500) {
            break;
        }
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_replies_stop_the_connection_executing_its_requests() {
    let service = Arc::new(Counting::default());
    let (addr, _table) = start(service.clone(), limits(16)).await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    // 400 requests for 1 MiB each, 8 KB in all, and no answer read.
    const REQUESTS: usize = 400;
    let pipeline: Vec<u8> = (0..REQUESTS).flat_map(|_| frame(b"big")).collect();
    stream.write_all(&pipeline).await.unwrap();
    let handled = settled(|| service.handled.load(Ordering::SeqCst)).await;
    // What the server holds (MAX_UNSENT_REPLY_BYTES plus one answer) and what the
    // kernel's socket buffers absorbed (a few MiB each way on loopback).
    let bound = MAX_UNSENT_REPLY_BYTES / BIG_ANSWER_BYTES + 1 + 48;
    assert!(
        handled <= bound,
        "{handled} of {REQUESTS} requests ran with their answers unread (bound {bound})"
    );
    // Reading the answers lets the rest run: nothing is lost.
    let bytes = read_frames(&mut stream, REQUESTS).await;
    assert_eq!(bytes, REQUESTS * BIG_ANSWER_BYTES);
    assert_eq!(service.handled.load(Ordering::SeqCst), REQUESTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_requests_in_flight_per_connection_are_capped() {
    let service = Arc::new(Counting::default());
    let (addr, _table) = start(service.clone(), limits(16)).await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    const REQUESTS: usize = 3 * MAX_SLOW_IN_FLIGHT;
    let pipeline: Vec<u8> = (0..REQUESTS).flat_map(|_| frame(b"slow")).collect();
    stream.write_all(&pipeline).await.unwrap();
    let started = settled(|| service.slow_started.load(Ordering::SeqCst)).await;
    assert_eq!(started, MAX_SLOW_IN_FLIGHT, "slow requests running at once");
    // A second connection is not held up by the first one's cap.
    let mut other = TcpStream::connect(&addr).await.unwrap();
    other.write_all(&frame(b"ping")).await.unwrap();
    assert_eq!(read_frames(&mut other, 1).await, 24);
    // As answers go out, the rest run.
    service.gate.add_permits(REQUESTS);
    assert_eq!(read_frames(&mut stream, REQUESTS).await, REQUESTS * 24);
    assert_eq!(service.slow_started.load(Ordering::SeqCst), REQUESTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_trickling_in_is_dropped_after_the_request_timeout() {
    let service = Arc::new(Counting::default());
    let (addr, table) = start(
        service.clone(),
        ConnLimits {
            request_timeout_ms: 300,
            ..limits(16)
        },
    )
    .await;
    let mut idle = TcpStream::connect(&addr).await.unwrap();
    let mut slow = TcpStream::connect(&addr).await.unwrap();
    let request = frame(b"a frame sent one byte at a time");
    let started = Instant::now();
    let mut closed = false;
    for byte in &request[..request.len() - 1] {
        if slow.write_all(&[*byte]).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        if started.elapsed() > PATIENCE {
            break;
        }
    }
    if !closed {
        let mut rest = [0u8; 16];
        let got = tokio::time::timeout(PATIENCE, slow.read(&mut rest)).await;
        closed = matches!(got, Ok(Ok(0)) | Ok(Err(_)));
    }
    assert!(closed, "a connection sending a byte per 100 ms is dropped");
    assert_eq!(service.handled.load(Ordering::SeqCst), 0);
    assert_eq!(table.counters.request_timeouts.load(Ordering::SeqCst), 1);
    // An idle connection is not timed out (no idle timeout) and is served.
    idle.write_all(&frame(b"still here")).await.unwrap();
    assert_eq!(read_frames(&mut idle, 1).await, 20 + 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_limit_a_new_connection_evicts_the_oldest_idle_one() {
    let service = Arc::new(Counting::default());
    let (addr, table) = start(service.clone(), limits(2)).await;
    let mut oldest = TcpStream::connect(&addr).await.unwrap();
    oldest.write_all(&frame(b"one")).await.unwrap();
    read_frames(&mut oldest, 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut newer = TcpStream::connect(&addr).await.unwrap();
    newer.write_all(&frame(b"two")).await.unwrap();
    read_frames(&mut newer, 1).await;
    // The sweeper's clock ticks at least once a second: let the two idle marks
    // differ.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    newer.write_all(&frame(b"two again")).await.unwrap();
    read_frames(&mut newer, 1).await;

    let mut new = TcpStream::connect(&addr).await.unwrap();
    new.write_all(&frame(b"three")).await.unwrap();
    assert_eq!(
        read_frames(&mut new, 1).await,
        20 + 5,
        "the new client is served"
    );
    let mut rest = [0u8; 16];
    let got = tokio::time::timeout(PATIENCE, oldest.read(&mut rest)).await;
    assert!(
        matches!(got, Ok(Ok(0)) | Ok(Err(_))),
        "the oldest idle connection is closed"
    );
    newer.write_all(&frame(b"four")).await.unwrap();
    assert_eq!(
        read_frames(&mut newer, 1).await,
        20 + 4,
        "the newer one stays"
    );
    assert_eq!(table.counters.evicted.load(Ordering::SeqCst), 1);
}
