//! The server side: accept connections and serve request frames (R§5, R§11.3).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, Semaphore};

use crate::frame_len;

/// What [`Service::handle`] did with a request.
pub enum Handled {
    /// The whole response frame was appended to `out`.
    Done,
    /// The request is long work: call [`Service::handle_slow`] on its own task.
    Slow,
    /// The request was carried out but its answer must wait (a write waiting for
    /// its replicas, R§4.2): the future yields the response frame. It runs on its
    /// own task, so requests behind it on the connection are not held up.
    Deferred(SlowFuture),
}

impl Handled {
    /// True for [`Handled::Done`].
    pub fn is_done(&self) -> bool {
        matches!(self, Handled::Done)
    }
}

/// Compares the kind of answer; two deferred answers are never equal (their
/// futures cannot be compared).
impl PartialEq for Handled {
    fn eq(&self, other: &Self) -> bool {
        matches!(
            (self, other),
            (Handled::Done, Handled::Done) | (Handled::Slow, Handled::Slow)
        )
    }
}

impl std::fmt::Debug for Handled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Handled::Done => "Done",
            Handled::Slow => "Slow",
            Handled::Deferred(_) => "Deferred",
        })
    }
}

/// A future producing a response frame.
pub type SlowFuture = Pin<Box<dyn Future<Output = Vec<u8>> + Send + 'static>>;

/// Something that answers request frames.
pub trait Service: Send + Sync + 'static {
    /// Answers `frame` (one whole request frame, prefix included) by appending one
    /// whole response frame to `out`, or returns `Slow`. Runs on the task that read
    /// the request, so it must be quick: no blocking, no waiting on other servers.
    fn handle(&self, frame: &[u8], out: &mut Vec<u8>) -> Handled;

    /// Answers a request `handle` called slow; runs on its own task.
    fn handle_slow(self: Arc<Self>, frame: Vec<u8>) -> SlowFuture;

    /// Answers a request that arrived on a connection over the server's limit
    /// ([`serve_with_limit`]): append one response frame saying so (a storage server
    /// answers RETRY), or nothing. Either way the connection is closed afterwards.
    fn refuse(&self, _frame: &[u8], _out: &mut Vec<u8>) {}
}

/// Initial read buffer per connection; it grows to the largest frame seen.
pub const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Connections a server serves at once unless told otherwise. Each costs a task, a
/// file descriptor and up to [`READ_BUFFER_BYTES`] × 2 of buffers; the limit keeps
/// a flood of clients from exhausting descriptors the server needs for its own
/// outgoing connections (replication, pings).
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// Connections over the limit being answered at once; beyond this they are closed
/// without an answer, so refusing costs bounded resources too.
pub const MAX_REFUSALS_IN_FLIGHT: usize = 64;
/// How long a connection over the limit may take to send its first request.
pub const REFUSAL_READ_TIMEOUT_MS: u64 = 1_000;

/// Serves connections accepted on `listener` until the task is dropped, at most
/// [`DEFAULT_MAX_CONNECTIONS`] at once.
pub async fn serve<S: Service>(listener: TcpListener, service: Arc<S>) {
    serve_with_limit(listener, service, DEFAULT_MAX_CONNECTIONS).await
}

/// Serves connections accepted on `listener` until the task is dropped. While
/// `max_connections` are open, a new connection's first request is answered by
/// [`Service::refuse`] and the connection closed: the client gets a clear answer
/// (and retries later) instead of a server that has run out of descriptors.
pub async fn serve_with_limit<S: Service>(
    listener: TcpListener,
    service: Arc<S>,
    max_connections: usize,
) {
    let open = Arc::new(Semaphore::new(max_connections.max(1)));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSALS_IN_FLIGHT));
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let service = service.clone();
                if let Ok(permit) = open.clone().try_acquire_owned() {
                    tokio::spawn(async move {
                        serve_connection(stream, peer, service).await;
                        drop(permit);
                    });
                } else if let Ok(permit) = refusing.clone().try_acquire_owned() {
                    tokio::spawn(async move {
                        refuse_connection(stream, service).await;
                        drop(permit);
                    });
                }
                // else: dropping `stream` closes it at once.
            }
            // Out of file descriptors and the like: back off instead of spinning.
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
        }
    }
}

/// Reads the first request of a connection over the limit, answers it with
/// [`Service::refuse`] and closes the connection.
async fn refuse_connection<S: Service>(mut stream: TcpStream, service: Arc<S>) {
    let mut buf = BytesMut::with_capacity(READ_BUFFER_BYTES);
    let deadline = std::time::Duration::from_millis(REFUSAL_READ_TIMEOUT_MS);
    let frame_end = tokio::time::timeout(deadline, async {
        loop {
            match frame_len(&buf) {
                Ok(Some(len)) if buf.len() >= len => return Some(len),
                // A frame larger than one read buffer is not worth reading to refuse
                // it: answer from its header alone.
                Ok(Some(_)) if buf.len() >= READ_BUFFER_BYTES => return Some(buf.len()),
                Ok(_) => {}
                Err(_) => return None,
            }
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    })
    .await;
    if let Ok(Some(len)) = frame_end {
        let mut out = Vec::new();
        service.refuse(&buf[..len], &mut out);
        if !out.is_empty() {
            let _ = stream.write_all(&out).await;
        }
    }
}

async fn serve_connection<S: Service>(stream: TcpStream, _peer: SocketAddr, service: Arc<S>) {
    // Small frames must not wait for Nagle's algorithm (R§5: latency first).
    let _ = stream.set_nodelay(true);
    let (mut reader, writer) = stream.into_split();
    let writer = Arc::new(Mutex::new(writer));
    let mut buf = BytesMut::with_capacity(READ_BUFFER_BYTES);
    let mut out = Vec::with_capacity(READ_BUFFER_BYTES);
    loop {
        // Serve every whole frame already buffered, then write their responses in one
        // go: pipelined requests cost one write.
        let mut consumed = 0;
        loop {
            let rest = &buf[consumed..];
            let len = match frame_len(rest) {
                Ok(Some(len)) if rest.len() >= len => len,
                Ok(_) => break,
                // A bad length prefix leaves no way to find the next frame: close.
                Err(_) => return,
            };
            let frame = &rest[..len];
            match service.handle(frame, &mut out) {
                Handled::Done => {}
                Handled::Slow => {
                    let frame = frame.to_vec();
                    let service = service.clone();
                    let writer = writer.clone();
                    tokio::spawn(async move {
                        let response = service.handle_slow(frame).await;
                        let _ = write_all(&writer, &response).await;
                    });
                }
                Handled::Deferred(answer) => {
                    let writer = writer.clone();
                    tokio::spawn(async move {
                        let response = answer.await;
                        let _ = write_all(&writer, &response).await;
                    });
                }
            }
            consumed += len;
        }
        buf.advance(consumed);
        if !out.is_empty() {
            if write_all(&writer, &out).await.is_err() {
                return;
            }
            out.clear();
        }
        // Make room for the rest of a partly received frame in one step.
        let want = match frame_len(&buf) {
            Ok(Some(len)) => len.saturating_sub(buf.len()).max(READ_BUFFER_BYTES / 4),
            _ => READ_BUFFER_BYTES / 4,
        };
        if buf.capacity() - buf.len() < want {
            buf.reserve(want);
        }
        match reader.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

async fn write_all(writer: &Mutex<OwnedWriteHalf>, bytes: &[u8]) -> std::io::Result<()> {
    writer.lock().await.write_all(bytes).await
}
