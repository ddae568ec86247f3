//! The native server reports to its event loop's poller (`serve_with_poller`):
//! every read is activity, and an answer deferred until replication is a
//! durability wait until it is known — what lets `ramstore dev`'s one loop poll,
//! not sleep, through a native durable write (R§5.1; docs/design-notes.md,
//! "Polling before sleeping").

use std::sync::Arc;
use std::time::{Duration, Instant};

use ramstore_rpc::server::SlowFuture;
use ramstore_rpc::{
    frame_len, serve_with_poller, serve_with_table, ConnLimits, ConnTable, Handled, Poller,
    Service, MAX_POLL_BEFORE_SLEEP_US,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Generous wait for something that should happen within milliseconds.
const PATIENCE: Duration = Duration::from_secs(20);

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&((16 + body.len()) as u32).to_le_bytes());
    f.extend_from_slice(&[0u8; 16]);
    f.extend_from_slice(body);
    f
}

/// Echoes every request; b"durable" only once `replicated` lets it, as a write
/// waits for its backups (`Handled::Deferred`).
struct Replicating {
    replicated: Arc<Semaphore>,
}

impl Service for Replicating {
    fn handle(&self, frame: &[u8], out: &mut Vec<u8>) -> Handled {
        if &frame[20..] == b"durable" {
            let replicated = self.replicated.clone();
            let answer = frame.to_vec();
            return Handled::Deferred(Box::pin(async move {
                // Never closed; one permit per answer, taken for good.
                replicated.acquire().await.expect("open").forget();
                answer
            }));
        }
        out.extend_from_slice(frame);
        Handled::Done
    }

    fn handle_slow(self: Arc<Self>, frame: Vec<u8>) -> SlowFuture {
        Box::pin(async move { frame })
    }
}

fn table() -> Arc<ConnTable> {
    ConnTable::new(ConnLimits {
        max_connections: 16,
        request_timeout_ms: 0,
        idle_timeout_ms: 0,
    })
}

async fn start(poller: Option<Arc<Poller>>) -> (String, Arc<Semaphore>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let replicated = Arc::new(Semaphore::new(0));
    let service = Arc::new(Replicating {
        replicated: replicated.clone(),
    });
    match poller {
        Some(poller) => tokio::spawn(serve_with_poller(listener, service, table(), poller)),
        None => tokio::spawn(serve_with_table(listener, service, table())),
    };
    (addr, replicated)
}

async fn read_frame(stream: &mut TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    loop {
        if let Ok(Some(len)) = frame_len(&buf) {
            if buf.len() >= len {
                return buf;
            }
        }
        let mut chunk = [0u8; 256];
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut chunk))
            .await
            .expect("an answer in time")
            .expect("reads");
        assert!(n > 0, "the server closed the connection");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Waits (yielding to the loop) until `done` holds.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < PATIENCE, "{what} never happened");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test]
async fn serve_with_poller_reports_every_read_as_activity() {
    let poller = Arc::new(Poller::sharing_runtime(MAX_POLL_BEFORE_SLEEP_US));
    let (addr, _) = start(Some(poller.clone())).await;
    let mut client = TcpStream::connect(&addr).await.unwrap();
    for i in 1..=3u64 {
        client.write_all(&frame(b"read")).await.unwrap();
        assert_eq!(read_frame(&mut client).await, frame(b"read"));
        assert!(
            poller.activity_rounds() >= i,
            "request {i} was read without the poller hearing of it"
        );
    }
}

#[tokio::test]
async fn serve_with_poller_counts_a_deferred_answer_as_a_durability_wait() {
    let poller = Arc::new(Poller::sharing_runtime(MAX_POLL_BEFORE_SLEEP_US));
    let (addr, replicated) = start(Some(poller.clone())).await;
    let mut client = TcpStream::connect(&addr).await.unwrap();
    client.write_all(&frame(b"durable")).await.unwrap();
    until("the wait for replication", || {
        poller.durability_waits() == 1
    })
    .await;
    // Requests behind it are answered meanwhile; the wait stays counted.
    client.write_all(&frame(b"read")).await.unwrap();
    assert_eq!(read_frame(&mut client).await, frame(b"read"));
    assert_eq!(poller.durability_waits(), 1);
    let rounds = poller.activity_rounds();
    replicated.add_permits(1);
    assert_eq!(read_frame(&mut client).await, frame(b"durable"));
    assert_eq!(
        poller.durability_waits(),
        0,
        "the answer went out, the wait stayed"
    );
    assert!(
        poller.activity_rounds() > rounds,
        "the end of the last wait is activity: the client's next request follows"
    );
}

#[tokio::test]
async fn serve_with_poller_of_its_own_loop_pauses_polling_while_an_answer_waits() {
    // A loop that does not drive replication itself (`Poller::new`) must leave
    // the core to whoever does while an answer waits.
    let poller = Arc::new(Poller::new(MAX_POLL_BEFORE_SLEEP_US));
    let polling = poller.spawn();
    let (addr, replicated) = start(Some(poller.clone())).await;
    let mut client = TcpStream::connect(&addr).await.unwrap();
    client.write_all(&frame(b"durable")).await.unwrap();
    until("the wait for replication", || {
        poller.durability_waits() == 1
    })
    .await;
    until("polling to pause", || !poller.is_polling()).await;
    client.write_all(&frame(b"read")).await.unwrap();
    assert_eq!(read_frame(&mut client).await, frame(b"read"));
    assert!(
        !poller.is_polling(),
        "a read restarted polling during the wait"
    );
    let rounds = poller.activity_rounds();
    replicated.add_permits(1);
    assert_eq!(read_frame(&mut client).await, frame(b"durable"));
    assert_eq!(poller.durability_waits(), 0);
    assert!(
        poller.activity_rounds() > rounds,
        "the end of the wait did not resume polling"
    );
    polling.abort();
}

#[tokio::test]
async fn serve_with_table_answers_deferred_requests_without_a_poller() {
    let (addr, replicated) = start(None).await;
    let mut client = TcpStream::connect(&addr).await.unwrap();
    client.write_all(&frame(b"durable")).await.unwrap();
    replicated.add_permits(1);
    assert_eq!(read_frame(&mut client).await, frame(b"durable"));
}
