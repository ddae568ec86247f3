//! The TCP transport against a real socket on 127.0.0.1.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ramstore_rpc::server::SlowFuture;
use ramstore_rpc::{
    frame_len, request_id, serve, serve_with_limit, Handled, RpcError, Service, TcpTransport,
    Transport,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Echoes the body back; a body starting with b"slow" is answered after 200 ms on
/// its own task, b"hang" is never answered.
struct Echo;

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&((16 + body.len()) as u32).to_le_bytes());
    f.extend_from_slice(&[0u8; 16]);
    f.extend_from_slice(body);
    f
}

impl Service for Echo {
    fn handle(&self, frame: &[u8], out: &mut Vec<u8>) -> Handled {
        let body = &frame[20..];
        if body.starts_with(b"slow") {
            return Handled::Slow;
        }
        if !body.starts_with(b"hang") {
            out.extend_from_slice(frame);
        }
        Handled::Done
    }

    fn handle_slow(self: Arc<Self>, frame: Vec<u8>) -> SlowFuture {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            frame
        })
    }

    fn refuse(&self, frame: &[u8], out: &mut Vec<u8>) {
        let mut answer = self::frame(b"busy");
        answer[12..20].copy_from_slice(&request_id(frame).to_le_bytes());
        out.extend_from_slice(&answer);
    }
}

async fn start() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(serve(listener, Arc::new(Echo)));
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_returns_matching_response() {
    let addr = start().await;
    let t = TcpTransport::new();
    let r = t
        .call(&addr, frame(b"hello"), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(&r[20..], b"hello");
    assert_eq!(frame_len(&r).unwrap(), Some(r.len()));
}

/// Many concurrent calls on a fresh transport share one connection (regression:
/// each first call used to open its own connection, so ids repeated across them)
/// and each gets its own request id and its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_many_in_flight_are_matched_by_id() {
    let addr = start().await;
    let t = Arc::new(TcpTransport::new());
    let mut tasks = Vec::new();
    for i in 0..200u32 {
        let t = t.clone();
        let addr = addr.clone();
        tasks.push(tokio::spawn(async move {
            let body = format!("msg-{i}");
            let r = t
                .call(&addr, frame(body.as_bytes()), Duration::from_secs(5))
                .await
                .unwrap();
            assert_eq!(&r[20..], body.as_bytes());
            request_id(&r)
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 200, "every call got its own request id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_request_does_not_delay_fast_ones_on_the_same_connection() {
    let addr = start().await;
    let t = Arc::new(TcpTransport::new());
    // Warm the connection so both calls share it.
    t.call(&addr, frame(b"warm"), Duration::from_secs(5))
        .await
        .unwrap();
    let slow = {
        let t = t.clone();
        let addr = addr.clone();
        tokio::spawn(async move { t.call(&addr, frame(b"slow"), Duration::from_secs(5)).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    let started = Instant::now();
    let fast = t
        .call(&addr, frame(b"fast"), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(&fast[20..], b"fast");
    assert!(!slow.is_finished(), "the fast answer overtook the slow one");
    assert!(started.elapsed() < Duration::from_millis(150));
    assert_eq!(&slow.await.unwrap().unwrap()[20..], b"slow");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_without_answer_hits_its_deadline() {
    let addr = start().await;
    let t = TcpTransport::new();
    let r = t
        .call(&addr, frame(b"hang"), Duration::from_millis(100))
        .await;
    assert_eq!(r, Err(RpcError::DeadlineExceeded));
    // The connection still works afterwards.
    let ok = t
        .call(&addr, frame(b"after"), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(&ok[20..], b"after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_to_closed_port_fails_to_connect() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let t = TcpTransport::new();
    let r = t.call(&addr, frame(b"x"), Duration::from_secs(1)).await;
    assert!(matches!(r, Err(RpcError::ConnectFailed { .. })), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_length_prefix_closes_only_that_connection() {
    let addr = start().await;
    let mut raw = tokio::net::TcpStream::connect(&addr).await.unwrap();
    raw.write_all(&u32::MAX.to_le_bytes()).await.unwrap();
    let mut byte = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(5), raw.read(&mut byte))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 0, "server closed the connection");
    let t = TcpTransport::new();
    let ok = t
        .call(&addr, frame(b"still here"), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(&ok[20..], b"still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_frames_in_one_write_are_all_answered() {
    let addr = start().await;
    let mut raw = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut batch = Vec::new();
    for i in 0..50u8 {
        batch.extend_from_slice(&frame(&[b'p', i]));
    }
    raw.write_all(&batch).await.unwrap();
    let mut got = vec![0u8; batch.len()];
    tokio::time::timeout(Duration::from_secs(5), raw.read_exact(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, batch);
}

/// A frame carrying a whole 8 MiB segment (a backup write or a replica read in
/// recovery) goes through both ends of the transport, in both directions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_with_a_whole_segment_round_trips() {
    let addr = start().await;
    let t = TcpTransport::new();
    let body: Vec<u8> = (0..(8u32 << 20) + 32).map(|i| (i % 251) as u8).collect();
    let request = frame(&body);
    assert!(request.len() - 4 <= ramstore_rpc::MAX_FRAME_BYTES);
    let r = t
        .call(&addr, request, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(r.len(), 20 + body.len());
    assert!(r[20..] == body[..], "the echoed segment differs");
    // The connection is still usable afterwards.
    let r = t
        .call(&addr, frame(b"after"), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(&r[20..], b"after");
}

/// Sends one frame with `body` on `stream` and returns the body of the answer, or
/// `None` if the connection closed first.
async fn exchange(stream: &mut tokio::net::TcpStream, body: &[u8]) -> Option<Vec<u8>> {
    stream.write_all(&frame(body)).await.ok()?;
    let mut buf = Vec::new();
    loop {
        if let Ok(Some(len)) = frame_len(&buf) {
            if buf.len() >= len {
                return Some(buf[20..len].to_vec());
            }
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_limit_refuses_connections_over_the_limit_when_none_is_idle() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(serve_with_limit(listener, Arc::new(Echo), 2));

    let mut first = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut second = tokio::net::TcpStream::connect(&addr).await.unwrap();
    assert_eq!(
        exchange(&mut first, b"one").await.as_deref(),
        Some(&b"one"[..])
    );
    assert_eq!(
        exchange(&mut second, b"two").await.as_deref(),
        Some(&b"two"[..])
    );

    // Both are busy (each has part of a frame in), so neither can be evicted: a
    // third connection gets the service's refusal, then is closed.
    // The partial frames go with a whole one in one write, answered only once the
    // server has buffered them, so neither connection is ever seen idle.
    let partial = &frame(b"never completed")[..10];
    for stream in [&mut first, &mut second] {
        let mut both = frame(b"busy now");
        both.extend_from_slice(partial);
        stream.write_all(&both).await.unwrap();
        let mut answer = vec![0u8; 20 + 8];
        stream.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer[20..], b"busy now");
    }
    let mut third = tokio::net::TcpStream::connect(&addr).await.unwrap();
    assert_eq!(
        exchange(&mut third, b"three").await.as_deref(),
        Some(&b"busy"[..])
    );
    let mut rest = [0u8; 16];
    assert_eq!(
        third.read(&mut rest).await.unwrap_or(0),
        0,
        "closed after refusing"
    );

    // The connections within the limit are still served.
    first
        .write_all(&frame(b"never completed")[10..])
        .await
        .unwrap();
    assert_eq!(
        exchange(&mut first, b"again").await.as_deref(),
        Some(&b"never completed"[..])
    );

    // Once one closes, a new connection is served (the server notices the close
    // asynchronously: retry for a while).
    drop(second);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut next = tokio::net::TcpStream::connect(&addr).await.unwrap();
        match exchange(&mut next, b"four").await.as_deref() {
            Some(b"four") => break,
            Some(b"busy") | None if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            other => panic!("a slot freed by a closed connection was not reused: {other:?}"),
        }
    }
}

/// Issue 17: a transport whose calls poll for their replies still gets every
/// answer — a fast one while it polls, a slow one (200 ms, far past the
/// window) after it went back to sleeping, with and without a call deadline —
/// on the current-thread runtime a client thread uses.
#[tokio::test(flavor = "current_thread")]
async fn call_with_reply_poll_gets_fast_and_slow_answers() {
    let addr = start().await;
    let t = TcpTransport::new().with_reply_poll(200);
    for deadline in [Duration::from_secs(5), ramstore_rpc::NO_DEADLINE] {
        let fast = t.call(&addr, frame(b"fast"), deadline).await.unwrap();
        assert_eq!(&fast[20..], b"fast");
        let slow = t.call(&addr, frame(b"slow"), deadline).await.unwrap();
        assert_eq!(&slow[20..], b"slow");
    }
    let r = t
        .call(&addr, frame(b"hang"), Duration::from_millis(50))
        .await;
    assert!(matches!(r, Err(RpcError::DeadlineExceeded)), "{r:?}");
}
