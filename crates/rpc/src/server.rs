//! The server side: accept connections and serve request frames (R§5, R§11.3),
//! with every connection's memory bounded (read buffer, unsent replies, requests in
//! flight) and its time limited (see [`crate::conns`]). Served with
//! [`serve_with_poller`], every connection reports its reads and its deferred
//! answers to the event loop's [`Poller`] (see [`crate::poller`]).

use std::future::Future;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};

use ramstore_clock::Clock;

use crate::conns::{ConnHandle, ConnLimits, ConnTable};
use crate::frame_len;
use crate::frame_pool::FramePool;
use crate::poller::Poller;

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

/// Read buffer per connection. A frame up to this size is read into it; a larger
/// one gets a buffer of exactly its size, paid for from the listener's
/// [`LARGE_FRAME_BUDGET_BYTES`], and the connection goes back to a buffer of this
/// size once the frame is served.
pub const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Buffers for frames larger than [`READ_BUFFER_BYTES`] that a listener keeps
/// for reuse once served ([`FramePool`]): a backup receives a master's 1 MiB
/// replication rounds one after another, and a fresh buffer per frame was
/// mapped, faulted in and zeroed each time (issue 20, session 35). Kept
/// buffers are outside [`LARGE_FRAME_BUDGET_BYTES`] (which bounds frames being
/// received); they add at most this many × [`KEPT_FRAME_BYTES`] to a server
/// that receives large frames at all.
pub const KEPT_FRAMES: usize = 2;
/// The largest frame buffer a listener keeps: a 1 MiB replication round or
/// Pull request with its header. Whole-segment frames are freed once served.
pub const KEPT_FRAME_BYTES: usize = (1 << 20) + (64 << 10);
/// Bytes of frames larger than [`READ_BUFFER_BYTES`] that all connections of one
/// listener may be receiving at once: 15 whole-segment replication frames (R§4.2,
/// `MAX_FRAME_BYTES`). A connection whose frame does not fit waits, without
/// reading, until others finish or the request timeout closes it: 200 clients
/// sending nearly complete 8 MiB frames hold this much, not 1.6 GB.
pub const LARGE_FRAME_BUDGET_BYTES: usize = 128 << 20;
/// Response bytes a connection buffers before it writes them and stops reading and
/// executing its requests until they are sent: a client that pipelines reads of
/// large values and never reads the replies holds at most this plus one response.
pub const MAX_UNSENT_REPLY_BYTES: usize = 4 << 20;
/// A response buffer larger than this after a write is given back (replaced by one
/// of [`READ_BUFFER_BYTES`]).
const RETAINED_REPLY_BUFFER_BYTES: usize = 4 * READ_BUFFER_BYTES;
/// Slow requests ([`Handled::Slow`]) of one connection running at once; the
/// connection stops reading while this many run. Enumerate is slow and answers up
/// to 2 MiB, so a pipeline of Enumerates holds at most 32 MiB of answers.
pub const MAX_SLOW_IN_FLIGHT: usize = 16;
/// Deferred answers ([`Handled::Deferred`], writes waiting for their replicas) of
/// one connection pending at once; each holds only a small response.
pub const MAX_DEFERRED_IN_FLIGHT: usize = 4096;

/// Connections a server serves at once unless told otherwise. Each costs a task, a
/// file descriptor and about [`READ_BUFFER_BYTES`] × 2 of buffers; the limit keeps
/// a flood of clients from exhausting descriptors the server needs for its own
/// outgoing connections (replication, pings).
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// Connections over the limit being answered at once; beyond this they are closed
/// without an answer, so refusing costs bounded resources too.
pub const MAX_REFUSALS_IN_FLIGHT: usize = 64;
/// How long a connection over the limit may take to send its first request.
pub const REFUSAL_READ_TIMEOUT_MS: u64 = 1_000;

/// Serves connections accepted on `listener` until the task is dropped, with the
/// default limits ([`DEFAULT_MAX_CONNECTIONS`], [`ConnLimits`]).
pub async fn serve<S: Service>(listener: TcpListener, service: Arc<S>) {
    serve_with_limit(listener, service, DEFAULT_MAX_CONNECTIONS).await
}

/// [`serve`] with at most `max_connections` at once and the default timeouts.
pub async fn serve_with_limit<S: Service>(
    listener: TcpListener,
    service: Arc<S>,
    max_connections: usize,
) {
    let table = ConnTable::new(ConnLimits::with_max_connections(max_connections));
    serve_with_table(listener, service, table).await
}

/// Serves connections accepted on `listener` until the task is dropped, under the
/// limits of `table` (which the caller may keep for its counters). At the limit a
/// new connection evicts the connection idle the longest; if none is idle, its
/// first request is answered by [`Service::refuse`] and it is closed: the client
/// gets a clear answer (and retries later) instead of a server that has run out of
/// descriptors.
pub async fn serve_with_table<S: Service>(
    listener: TcpListener,
    service: Arc<S>,
    table: Arc<ConnTable>,
) {
    // A disabled poller costs one branch per read and per deferred answer.
    serve_with_poller(listener, service, table, Arc::new(Poller::new(0))).await
}

/// [`serve_with_table`] on an event loop that polls before it sleeps: every
/// connection calls [`Poller::activity`] after each read, and each
/// [`Handled::Deferred`] answer is one durability wait of `poller` until it is
/// known (or its connection closes). `ramstore dev` gives every server's port and
/// its Redis port one [`Poller::sharing_runtime`] on its one event loop, so a
/// native durable write — the client's request, the BackupWrites to the other
/// in-process servers, their acknowledgements — runs without the loop sleeping
/// (R§5.1; docs/design-notes.md, "Polling before sleeping"). The caller runs the
/// poller ([`Poller::spawn`]) on the same loop.
pub async fn serve_with_poller<S: Service>(
    listener: TcpListener,
    service: Arc<S>,
    table: Arc<ConnTable>,
    poller: Arc<Poller>,
) {
    let refusing = Arc::new(Semaphore::new(MAX_REFUSALS_IN_FLIGHT));
    let large_frames = Arc::new(Semaphore::new(LARGE_FRAME_BUDGET_BYTES / 1024));
    let kept_frames = FramePool::new(KEPT_FRAMES, KEPT_FRAME_BYTES);
    let sweeper = table.clone().run_sweeper();
    tokio::pin!(sweeper);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut sweeper => continue,
        };
        match accepted {
            Ok((stream, _peer)) => {
                let service = service.clone();
                if let Some(conn) = table.admit(stream.as_raw_fd()) {
                    let large = (large_frames.clone(), kept_frames.clone());
                    let poller = poller.clone();
                    tokio::spawn(serve_connection(stream, service, large, conn, poller));
                } else if let Ok(permit) = refusing.clone().try_acquire_owned() {
                    let clock = table.clock().clone();
                    tokio::spawn(async move {
                        refuse_connection(stream, service, &clock).await;
                        drop(permit);
                    });
                }
                // else: dropping `stream` closes it at once.
            }
            // Out of file descriptors and the like: back off instead of spinning.
            Err(_) => {
                table
                    .clock()
                    .sleep(std::time::Duration::from_millis(10))
                    .await
            }
        }
    }
}

/// Reads the first request of a connection over the limit, answers it with
/// [`Service::refuse`] and closes the connection.
async fn refuse_connection<S: Service>(
    mut stream: TcpStream,
    service: Arc<S>,
    clock: &Arc<dyn Clock>,
) {
    let mut buf = BytesMut::with_capacity(READ_BUFFER_BYTES);
    let deadline = std::time::Duration::from_millis(REFUSAL_READ_TIMEOUT_MS);
    let frame_end = clock
        .timeout(deadline, async {
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

/// KiB permits of [`LARGE_FRAME_BUDGET_BYTES`] a frame of `len` bytes takes.
fn budget_kib(len: usize) -> u32 {
    u32::try_from(len.div_ceil(1024)).unwrap_or(u32::MAX)
}

/// Takes a permit of `semaphore` for a request the connection hands to a task,
/// waiting (busy, so neither timed out nor evicted) while the connection's own
/// tasks hold them all.
async fn in_flight_permit(semaphore: &Arc<Semaphore>, conn: &ConnHandle) -> OwnedSemaphorePermit {
    if let Ok(permit) = semaphore.clone().try_acquire_owned() {
        return permit;
    }
    conn.busy();
    // The semaphore is never closed, so acquiring can only wait, not fail.
    semaphore
        .clone()
        .acquire_owned()
        .await
        .expect("connection semaphores are never closed")
}

async fn serve_connection<S: Service>(
    stream: TcpStream,
    service: Arc<S>,
    (large_frames, kept_frames): (Arc<Semaphore>, Arc<FramePool>),
    conn: ConnHandle,
    poller: Arc<Poller>,
) {
    // Small frames must not wait for Nagle's algorithm (R§5: latency first).
    let _ = stream.set_nodelay(true);
    let (mut reader, writer) = stream.into_split();
    let writer = Arc::new(Mutex::new(writer));
    // Declared after the socket's halves so it is dropped first: the table must
    // never hold an entry for a closed socket (see `conns`).
    let conn = conn;
    let request_timeout_ms = conn.limits().request_timeout_ms;
    let slow = Arc::new(Semaphore::new(MAX_SLOW_IN_FLIGHT));
    let deferred = Arc::new(Semaphore::new(MAX_DEFERRED_IN_FLIGHT));
    let mut buf = BytesMut::with_capacity(READ_BUFFER_BYTES);
    let mut out = Vec::with_capacity(READ_BUFFER_BYTES);
    // The budget (KiB permits) held for a frame larger than READ_BUFFER_BYTES.
    let mut large: Option<OwnedSemaphorePermit> = None;
    loop {
        // Serve every whole frame already buffered, then write their responses in one
        // go: pipelined requests cost one write. Responses beyond
        // MAX_UNSENT_REPLY_BYTES are written first, and the rest of the frames wait.
        let mut consumed = 0;
        let mut backlog = false;
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
                    let permit = in_flight_permit(&slow, &conn).await;
                    let task = conn.task_started();
                    let frame = frame.to_vec();
                    let service = service.clone();
                    let writer = writer.clone();
                    tokio::spawn(async move {
                        let response = service.handle_slow(frame).await;
                        let _ = write_all(&writer, &response).await;
                        drop((permit, task));
                    });
                }
                Handled::Deferred(answer) => {
                    let permit = in_flight_permit(&deferred, &conn).await;
                    let task = conn.task_started();
                    let writer = writer.clone();
                    // Counted until the answer is known: a loop of its own stops
                    // polling meanwhile, a sharing one keeps reading the
                    // acknowledgements (`crate::poller`). Dropped with the task
                    // if the connection goes first.
                    let wait = poller.durability_wait();
                    tokio::spawn(async move {
                        let response = answer.await;
                        // The answer is known: the end of the last wait is
                        // activity, so the loop polls for the client's next
                        // request instead of sleeping.
                        drop(wait);
                        let _ = write_all(&writer, &response).await;
                        drop((permit, task));
                    });
                }
            }
            consumed += len;
            if out.len() >= MAX_UNSENT_REPLY_BYTES {
                backlog = true;
                break;
            }
        }
        buf.advance(consumed);
        if !out.is_empty() {
            conn.writing();
            if write_all(&writer, &out).await.is_err() {
                return;
            }
            out.clear();
            if out.capacity() > RETAINED_REPLY_BUFFER_BYTES {
                out = Vec::with_capacity(READ_BUFFER_BYTES);
            }
        }
        if backlog {
            continue;
        }
        let pending = match frame_len(&buf) {
            Ok(pending) => pending,
            // A bad length prefix (beyond MAX_FRAME_BYTES: refused from its
            // header, before any of it is buffered) leaves no way to find the next
            // frame: close.
            Err(_) => return,
        };
        if buf.is_empty() {
            conn.idle();
        } else {
            conn.reading(consumed > 0);
        }
        match pending {
            Some(len) if len > READ_BUFFER_BYTES => {
                let held = large.as_ref().map_or(0, OwnedSemaphorePermit::num_permits);
                let want = budget_kib(len);
                if held < want as usize {
                    // Ask only for the difference: the grant held pays for the
                    // buffer this connection still has while it waits.
                    let more = want - held as u32;
                    let acquire = large_frames.clone().acquire_many_owned(more);
                    let permit = if request_timeout_ms == 0 {
                        acquire.await
                    } else {
                        let limit = std::time::Duration::from_millis(request_timeout_ms);
                        match conn.clock().timeout(limit, acquire).await {
                            Ok(permit) => permit,
                            // No budget within the request timeout: drop the
                            // connection as the sweeper would.
                            Err(_) => return,
                        }
                    };
                    // The budget is never closed.
                    let Ok(permit) = permit else { return };
                    match &mut large {
                        Some(held) => held.merge(permit),
                        None => large = Some(permit),
                    }
                }
                if buf.capacity() < len {
                    // Room for the frame (a kept buffer when one fits, else
                    // exactly the frame): reads stop at its end, so the buffer
                    // never outgrows the budget it holds.
                    let mut large_buf = kept_frames.take_vec(len);
                    large_buf.extend_from_slice(&buf);
                    let old = std::mem::replace(&mut buf, vec_into_bytes_mut(large_buf));
                    if old.capacity() > READ_BUFFER_BYTES {
                        kept_frames.put(Vec::from(old));
                    }
                }
            }
            _ => {
                if large.take().is_some() || buf.capacity() > 2 * READ_BUFFER_BYTES {
                    // Give a large frame's buffer back, to the listener's kept
                    // buffers (the rest is at most a small frame's beginning).
                    let mut small = BytesMut::with_capacity(READ_BUFFER_BYTES);
                    small.extend_from_slice(&buf);
                    kept_frames.put(Vec::from(std::mem::replace(&mut buf, small)));
                }
                // Make room for the rest of a partly received frame in one step.
                let want = pending
                    .map_or(0, |len| len.saturating_sub(buf.len()))
                    .max(READ_BUFFER_BYTES / 4);
                if buf.capacity() - buf.len() < want {
                    buf.reserve(want);
                }
            }
        }
        match reader.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                conn.received();
                poller.activity();
            }
        }
    }
}

/// `vec` as a `BytesMut` over the same allocation (its capacity kept), so a
/// kept buffer goes back to its pool whole (`Vec::from`).
fn vec_into_bytes_mut(vec: Vec<u8>) -> BytesMut {
    // A `Bytes` made from a vector is its only handle, so it converts back
    // without a copy; the copying fallback is never taken.
    bytes::Bytes::from(vec)
        .try_into_mut()
        .unwrap_or_else(|b| BytesMut::from(&b[..]))
}

async fn write_all(writer: &Mutex<OwnedWriteHalf>, bytes: &[u8]) -> std::io::Result<()> {
    writer.lock().await.write_all(bytes).await
}
