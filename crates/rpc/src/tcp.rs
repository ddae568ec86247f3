//! The TCP transport: one connection per server, many requests in flight on it,
//! responses matched to requests by id (R§5.2).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Mutex};

use ramstore_clock::{system_clock, Clock};

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
        tokio::spawn(read_responses(reader, pending.clone(), closed.clone()));
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
    ) -> Result<Bytes, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        set_request_id(&mut frame, id);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(id, tx);
        if deadline >= crate::NO_DEADLINE {
            return self.call_without_deadline(id, &frame, rx).await;
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
        match clock.timeout(deadline, rx).await {
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
        let result = rx
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

/// Reads response frames and completes the matching calls. When the connection
/// ends, every call still waiting fails with `ConnectionClosed`.
async fn read_responses(mut reader: OwnedReadHalf, pending: Arc<Pending>, closed: Arc<AtomicBool>) {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    'read: loop {
        loop {
            let len = match frame_len(&buf) {
                Ok(Some(len)) if buf.len() >= len => len,
                Ok(_) => break,
                Err(_) => break 'read,
            };
            let frame = buf.split_to(len).freeze();
            let id = request_id(&frame);
            if let Some(tx) = pending.lock().remove(&id) {
                // The caller may have given up (deadline): nothing to do then.
                let _ = tx.send(frame);
            }
        }
        if let Ok(Some(len)) = frame_len(&buf) {
            buf.reserve(len.saturating_sub(buf.len()));
        } else if buf.capacity() - buf.len() < 16 * 1024 {
            buf.reserve(64 * 1024);
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
        }
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
            connection.call(frame, deadline, &self.clock).await
        })
    }
}
