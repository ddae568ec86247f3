//! The TCP transport: one connection per server, many requests in flight on it,
//! responses matched to requests by id (R§5.2).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Mutex};

use ramstore_clock::{system_clock, Clock};

use crate::frame_pool::FramePool;
use crate::reply_wait::{await_polling, MAX_REPLY_POLL_US};
use crate::transport::{CallFuture, RpcError, Transport};
use crate::{frame_len, request_id, set_request_id};

/// How long connecting to a server may take before the call fails.
pub const CONNECT_TIMEOUT_MS: u64 = 2_000;

type Pending = parking_lot::Mutex<HashMap<u64, oneshot::Sender<Bytes>>>;

/// One TCP connection to a server.
struct Connection {
    addr: String,
    writer: Mutex<OwnedWriteHalf>,
    pending: Arc<Pending>,
    closed: Arc<AtomicBool>,
    next_id: AtomicU64,
}

impl Connection {
    async fn open(addr: &str, clock: &Arc<dyn Clock>) -> Result<Arc<Self>, RpcError> {
        let connect = TcpStream::connect(addr);
        let stream = clock
            .timeout(Duration::from_millis(CONNECT_TIMEOUT_MS), connect)
            .await
            .map_err(|_| RpcError::ConnectFailed {
                addr: addr.to_string(),
                reason: "timed out".into(),
                refused: false,
            })?
            .map_err(|e| RpcError::ConnectFailed {
                addr: addr.to_string(),
                reason: e.to_string(),
                refused: e.kind() == std::io::ErrorKind::ConnectionRefused,
            })?;
        let _ = stream.set_nodelay(true);
        let (reader, writer) = stream.into_split();
        let pending: Arc<Pending> = Arc::default();
        let closed = Arc::new(AtomicBool::new(false));
        let pool = FramePool::new(KEPT_RESPONSE_BUFFERS, KEPT_RESPONSE_BUFFER_BYTES);
        tokio::spawn(read_responses(
            reader,
            pending.clone(),
            closed.clone(),
            pool,
        ));
        Ok(Arc::new(Self {
            addr: addr.to_string(),
            writer: Mutex::new(writer),
            pending,
            closed,
            next_id: AtomicU64::new(1),
        }))
    }

    /// Sends `frame` and waits for its answer for at most `deadline` of `clock`
    /// (the timer is armed inline: no allocation, R§5.2's fast path).
    async fn call(
        &self,
        mut frame: Vec<u8>,
        deadline: Duration,
        clock: &Arc<dyn Clock>,
        reply_poll: Duration,
    ) -> Result<Bytes, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        set_request_id(&mut frame, id);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(id, tx);
        if deadline >= crate::NO_DEADLINE {
            return self
                .call_without_deadline(id, &frame, rx, clock, reply_poll)
                .await;
        }
        let sent = clock
            .timeout(deadline, async {
                self.writer.lock().await.write_all(&frame).await
            })
            .await;
        match sent {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                self.pending.lock().remove(&id);
                self.closed.store(true, Ordering::SeqCst);
                return Err(RpcError::ConnectionClosed(self.addr.clone()));
            }
            Err(_) => {
                self.pending.lock().remove(&id);
                return Err(RpcError::DeadlineExceeded);
            }
        }
        let reply = await_polling(rx, reply_poll, clock.as_ref());
        match clock.timeout(deadline, reply).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(_)) => Err(RpcError::ConnectionClosed(self.addr.clone())),
            Err(_) => {
                self.pending.lock().remove(&id);
                Err(RpcError::DeadlineExceeded)
            }
        }
    }
}

impl Connection {
    /// A call whose caller bounds its time itself: no timer is armed (arming one
    /// per call wakes the runtime's timer driver, a cost on every replication
    /// RPC; the replica manager bounds whole rounds instead).
    async fn call_without_deadline(
        &self,
        id: u64,
        frame: &[u8],
        rx: oneshot::Receiver<Bytes>,
        clock: &Arc<dyn Clock>,
        reply_poll: Duration,
    ) -> Result<Bytes, RpcError> {
        if self.writer.lock().await.write_all(frame).await.is_err() {
            self.pending.lock().remove(&id);
            self.closed.store(true, Ordering::SeqCst);
            return Err(RpcError::ConnectionClosed(self.addr.clone()));
        }
        let answer = RemoveOnDrop {
            pending: &self.pending,
            id,
        };
        let result = await_polling(rx, reply_poll, clock.as_ref())
            .await
            .map_err(|_| RpcError::ConnectionClosed(self.addr.clone()));
        drop(answer);
        result
    }
}

/// Removes a call's entry from the pending map when the call ends or is dropped
/// (a caller that gave up), so abandoned calls leave nothing behind.
struct RemoveOnDrop<'a> {
    pending: &'a Pending,
    id: u64,
}

impl Drop for RemoveOnDrop<'_> {
    fn drop(&mut self) {
        self.pending.lock().remove(&self.id);
    }
}

/// Response frames up to this size are read into the connection's shared
/// buffer; larger ones (a Pull answer, an Enumerate batch, a replica read) each
/// into a buffer of the connection's [`FramePool`].
pub const LARGE_RESPONSE_BYTES: usize = 64 * 1024;
/// Large-frame buffers a connection keeps for reuse: a migration target keeps
/// two Pull answers of each of its partitions out at once (design notes
/// "Background pulls").
pub const KEPT_RESPONSE_BUFFERS: usize = 8;
/// The largest buffer a connection keeps: a 1 MiB Pull answer and a 2 MiB
/// Enumerate answer with their headers. Larger frames (whole segments) get a
/// buffer that is freed with them.
pub const KEPT_RESPONSE_BUFFER_BYTES: usize = (2 << 20) + (64 << 10);

/// Reads response frames and completes the matching calls. When the connection
/// ends, every call still waiting fails with `ConnectionClosed`. A frame over
/// [`LARGE_RESPONSE_BYTES`] is read into a buffer of `pool`, reused once the
/// caller drops the frame (no fresh mapping, faults and zeroing per frame).
async fn read_responses(
    mut reader: OwnedReadHalf,
    pending: Arc<Pending>,
    closed: Arc<AtomicBool>,
    pool: Arc<FramePool>,
) {
    let mut buf = BytesMut::with_capacity(LARGE_RESPONSE_BYTES);
    let complete = |frame: Bytes| {
        let id = request_id(&frame);
        if let Some(tx) = pending.lock().remove(&id) {
            // The caller may have given up (deadline): nothing to do then.
            let _ = tx.send(frame);
        }
    };
    'read: loop {
        loop {
            let len = match frame_len(&buf) {
                Ok(Some(len)) if buf.len() >= len => len,
                Ok(_) => break,
                Err(_) => break 'read,
            };
            complete(buf.split_to(len).freeze());
        }
        match frame_len(&buf) {
            Ok(Some(len)) if len > LARGE_RESPONSE_BYTES => {
                // The buffer holds only this frame's beginning (whole frames
                // were handed on above): move it, read the rest in place.
                let mut large = pool.take(len);
                large.vec_mut().extend_from_slice(&buf);
                buf.clear();
                while large.len() < len {
                    let want = len - large.len();
                    match reader.read_buf(&mut large.vec_mut().limit(want)).await {
                        Ok(0) | Err(_) => break 'read,
                        Ok(_) => {}
                    }
                }
                complete(large.freeze());
                continue;
            }
            Ok(Some(len)) => buf.reserve(len.saturating_sub(buf.len())),
            _ if buf.capacity() - buf.len() < 16 * 1024 => buf.reserve(64 * 1024),
            _ => {}
        }
        match reader.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    closed.store(true, Ordering::SeqCst);
    // Dropping the senders wakes every waiting call with an error.
    pending.lock().clear();
}

/// The connection to one server, and the lock that makes concurrent first calls
/// share one connect instead of each opening its own.
#[derive(Default)]
struct Slot {
    connection: parking_lot::Mutex<Option<Arc<Connection>>>,
    connecting: Mutex<()>,
}

impl Slot {
    fn live(&self) -> Option<Arc<Connection>> {
        self.connection
            .lock()
            .as_ref()
            .filter(|c| !c.closed.load(Ordering::SeqCst))
            .cloned()
    }
}

/// A [`Transport`] over TCP with one cached connection per server address.
pub struct TcpTransport {
    slots: parking_lot::Mutex<HashMap<String, Arc<Slot>>>,
    /// The clock call deadlines and connect timeouts run on.
    clock: Arc<dyn Clock>,
    /// How long a call polls for its reply before its thread may sleep
    /// ([`crate::reply_wait`]); zero by default.
    reply_poll: Duration,
}

impl Default for TcpTransport {
    fn default() -> Self {
        Self::new()
    }
}

impl TcpTransport {
    /// A transport whose deadlines run on the system clock.
    pub fn new() -> Self {
        Self::with_clock(system_clock())
    }

    /// A transport whose deadlines run on `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            slots: parking_lot::Mutex::default(),
            clock,
            reply_poll: Duration::ZERO,
        }
    }

    /// This transport with calls that poll for their replies for up to
    /// `window_us` µs (capped at [`MAX_REPLY_POLL_US`]) before their thread may
    /// sleep; 0 (the default) never polls. See [`crate::reply_wait`].
    pub fn with_reply_poll(mut self, window_us: u64) -> Self {
        self.reply_poll = Duration::from_micros(window_us.min(MAX_REPLY_POLL_US));
        self
    }

    async fn connection(&self, addr: &str) -> Result<Arc<Connection>, RpcError> {
        let slot = self
            .slots
            .lock()
            .entry(addr.to_string())
            .or_default()
            .clone();
        if let Some(c) = slot.live() {
            return Ok(c);
        }
        // One connect per server at a time; callers that waited use its result.
        let _connecting = slot.connecting.lock().await;
        if let Some(c) = slot.live() {
            return Ok(c);
        }
        let c = Connection::open(addr, &self.clock).await?;
        *slot.connection.lock() = Some(c.clone());
        Ok(c)
    }
}

impl Transport for TcpTransport {
    fn call<'a>(&'a self, addr: &'a str, frame: Vec<u8>, deadline: Duration) -> CallFuture<'a> {
        Box::pin(async move {
            let connection = self.connection(addr).await?;
            // A closed connection is replaced on the next call (`Slot::live`).
            connection
                .call(frame, deadline, &self.clock, self.reply_poll)
                .await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A response frame for request `id` with a body of `body_len` bytes whose
    /// every byte depends on `id` and its place, so a mixed-up frame shows.
    fn response(id: u64, body_len: usize) -> Vec<u8> {
        let mut f = Vec::with_capacity(crate::LEN_PREFIX_BYTES + crate::HEADER_BYTES + body_len);
        f.extend_from_slice(&((crate::HEADER_BYTES + body_len) as u32).to_le_bytes());
        f.extend_from_slice(&[0u8; crate::HEADER_BYTES]);
        set_request_id(&mut f, id);
        f.extend((0..body_len).map(|i| (i as u64).wrapping_mul(31).wrapping_add(id) as u8));
        f
    }

    /// A reader on one end of a local connection (with `pool`), and the other
    /// end to write responses into.
    async fn connected(
        pool: Arc<FramePool>,
    ) -> (
        Arc<Pending>,
        tokio::net::TcpStream,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let client = TcpStream::connect(addr).await.expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        let (reader, _writer) = client.into_split();
        let pending: Arc<Pending> = Arc::default();
        let closed = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(read_responses(reader, pending.clone(), closed, pool));
        (pending, server, task)
    }

    fn expect(pending: &Pending, id: u64) -> oneshot::Receiver<Bytes> {
        let (tx, rx) = oneshot::channel();
        pending.lock().insert(id, tx);
        rx
    }

    #[tokio::test]
    async fn read_responses_reuses_the_buffer_of_a_dropped_large_frame() {
        let pool = FramePool::new(KEPT_RESPONSE_BUFFERS, KEPT_RESPONSE_BUFFER_BYTES);
        let (pending, mut server, _task) = connected(pool.clone()).await;
        for id in 1..=5u64 {
            let sent = response(id, 1 << 20);
            let rx = expect(&pending, id);
            server.write_all(&sent).await.expect("write");
            let got = rx.await.expect("answered");
            assert_eq!(got[..], sent[..], "frame {id}");
            drop(got);
        }
        assert_eq!(
            pool.allocated(),
            1,
            "each 1 MiB frame after the first reused the first one's buffer"
        );
        assert_eq!(pool.kept(), 1);
    }

    #[tokio::test]
    async fn read_responses_keeps_frames_intact_across_splits() {
        let pool = FramePool::new(2, 256 << 10);
        let (pending, mut server, _task) = connected(pool.clone()).await;
        // Small, just over the large threshold, kept size, over the kept size,
        // back to back and cut at odd places, so frames and their prefixes
        // straddle reads.
        let sizes = [
            20,
            LARGE_RESPONSE_BYTES - crate::HEADER_BYTES - crate::LEN_PREFIX_BYTES,
            LARGE_RESPONSE_BYTES + 1,
            0,
            200 << 10,
            3,
            1 << 20,
            70_000,
        ];
        let mut stream = Vec::new();
        let mut receivers = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            let id = 100 + i as u64;
            let frame = response(id, size);
            receivers.push((expect(&pending, id), frame.clone()));
            stream.extend_from_slice(&frame);
        }
        let mut at = 0;
        for (n, cut) in [1usize, 3, 7, 4093, 65_537, 100_003]
            .iter()
            .cycle()
            .enumerate()
        {
            if at >= stream.len() {
                break;
            }
            let end = (at + cut).min(stream.len());
            server.write_all(&stream[at..end]).await.expect("write");
            server.flush().await.expect("flush");
            at = end;
            if n % 5 == 0 {
                tokio::task::yield_now().await;
            }
        }
        for (rx, sent) in receivers {
            let got = rx.await.expect("answered");
            assert_eq!(got.len(), sent.len());
            assert!(got[..] == sent[..], "frame {} intact", request_id(&sent));
        }
        assert!(pool.kept() <= pool.max_buffers());
    }

    #[tokio::test]
    async fn read_responses_fails_waiting_calls_when_a_large_frame_is_cut_off() {
        let pool = FramePool::new(2, 256 << 10);
        let (pending, mut server, task) = connected(pool).await;
        let rx = expect(&pending, 7);
        let frame = response(7, 100 << 10);
        server.write_all(&frame[..50_000]).await.expect("write");
        drop(server);
        assert!(rx.await.is_err(), "the call fails instead of hanging");
        task.await.expect("the reader ends");
    }
}
