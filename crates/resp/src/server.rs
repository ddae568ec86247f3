//! The RESP listener and the per-connection loop: read what the socket has, run
//! every complete command in it in order, write all their replies in one write.
//! A connection's memory is bounded (read buffer, with large commands paid from a
//! shared budget; unsent replies) and its time limited (`ramstore_rpc::conns`).

use std::collections::VecDeque;
use std::future::Future;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ramstore_clock::{system_clock, Clock};
use ramstore_rpc::conns::{ConnHandle, ConnLimits, ConnTable};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::backend::Backend;
use crate::cmd::{key_first, Connection, Flow};
use crate::poller::Poller;
use crate::protocol::{parse_command_into, Encoder, Version};

/// Bytes a connection reads at most per socket read (a whole pipeline of small
/// commands usually arrives in one).
pub const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Replies are written out once this many bytes are waiting, even mid-pipeline,
/// so a long pipeline of large GETs does not hold its replies in memory.
pub const FLUSH_REPLY_BYTES: usize = 1 << 20;
/// Commands with at most this many arguments (every GET and SET) pass their
/// arguments on the stack; longer ones in a vector allocated for the command.
const STACK_ARGS: usize = 8;
/// Commands of a pipeline whose keys are prefetched together, ahead of running
/// them: enough to overlap the hash-table cache misses of a `-P 16` batch.
const PREFETCH_AHEAD: usize = 16;
/// Most client connections at once (Redis's `maxclients` default). At the limit a
/// new connection evicts the one idle the longest; if none is idle it is answered
/// an error and closed.
pub const MAX_CONNECTIONS: u64 = 10_000;
/// A connection's read buffer grows beyond this only for a command larger than it,
/// paid for from [`LARGE_COMMAND_BUDGET_BYTES`], and shrinks back to
/// [`READ_CHUNK_BYTES`] once the command has run.
pub const BASE_BUFFER_BYTES: usize = 2 * READ_CHUNK_BYTES;
/// Bytes of read buffer beyond [`BASE_BUFFER_BYTES`] that all connections may hold
/// at once for large partial commands (each at most `MAX_COMMAND_BYTES`, 16 MiB):
/// 100 clients sending 15 MiB of a command each hold this much, not 1.4 GB. A
/// connection whose command does not fit waits without reading until others finish
/// or the request timeout closes it.
pub const LARGE_COMMAND_BUDGET_BYTES: usize = 128 << 20;
/// The first size a read buffer grows to beyond [`BASE_BUFFER_BYTES`]: a command
/// with one value of `MAX_BULK_BYTES` and a key of `MAX_KEY_BYTES` fits. A larger
/// command gets a buffer of `MAX_COMMAND_BYTES` (pages are resident only once
/// written).
const ONE_VALUE_BUFFER_BYTES: usize =
    crate::protocol::MAX_BULK_BYTES + (128 << 10) + READ_CHUNK_BYTES;
/// A reply buffer larger than this after a write is given back.
const RETAINED_REPLY_BUFFER_BYTES: usize = 256 * 1024;

/// How the RESP front end is configured.
#[derive(Debug, Clone)]
pub struct RespConfig {
    /// The password AUTH must give before any other command (`--requirepass`);
    /// `None`: no authentication.
    pub require_pass: Option<String>,
    /// The port the listener is bound to (CONFIG GET port, INFO).
    pub port: u16,
    /// Bytes of log memory of the local master (CONFIG GET maxmemory, INFO).
    pub memory_bytes: u64,
    /// Event-loop threads serving connections; 0: the caller's runtime if it is
    /// a current-thread one, else 1 (see [`crate::start`]).
    pub threads: usize,
    /// How long an event loop keeps polling its sockets after the last read
    /// before it sleeps, in µs (`--resp-poll-us`; 0: sleep at once). See
    /// [`crate::poller`].
    pub poll_before_sleep_us: u64,
    /// The poller of the caller's event loop, for a front end served on it
    /// (`threads` 0 on a current-thread runtime, [`crate::start`]): `ramstore dev`
    /// shares one between its servers' native ports and the Redis port, so
    /// activity on any of them keeps the one loop polling; its owner runs it.
    /// `None`: the front end makes its own, with `poll_before_sleep_us`. Not
    /// used by dedicated event-loop threads (each has its own).
    pub loop_poller: Option<Arc<Poller>>,
    /// How long a command may take to arrive once begun, and a reply write may
    /// stall, before the connection is closed (`--request-timeout-ms`; 0: never).
    /// Redis has no such limit; a partial command must not hold memory forever.
    pub request_timeout_ms: u64,
    /// How long a connection may sit idle before it is closed (`--idle-timeout-ms`,
    /// Redis's `timeout`; 0: never, Redis's default).
    pub idle_timeout_ms: u64,
    /// The clock the time limits and INFO's uptime run on (default: the system
    /// clock).
    pub clock: Arc<dyn Clock>,
}

impl Default for RespConfig {
    fn default() -> Self {
        Self {
            require_pass: None,
            port: 0,
            memory_bytes: 0,
            threads: 1,
            poll_before_sleep_us: crate::poller::DEFAULT_POLL_BEFORE_SLEEP_US,
            loop_poller: None,
            request_timeout_ms: ramstore_rpc::conns::DEFAULT_REQUEST_TIMEOUT_MS,
            idle_timeout_ms: ramstore_rpc::conns::DEFAULT_IDLE_TIMEOUT_MS,
            clock: system_clock(),
        }
    }
}

/// Counters for INFO.
#[derive(Debug, Default)]
pub struct RespStats {
    pub connections_received: AtomicU64,
    pub connected: AtomicU64,
    pub commands_processed: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub protocol_errors: AtomicU64,
}

/// State shared by every connection of one listener.
pub struct Shared {
    pub backend: Backend,
    pub config: RespConfig,
    pub stats: RespStats,
    pub started: Instant,
    /// Every connection, for the connection limit and the time limits.
    pub conns: Arc<ConnTable>,
    /// See [`LARGE_COMMAND_BUDGET_BYTES`]; permits are KiB.
    large_commands: Arc<Semaphore>,
    next_client_id: AtomicU64,
}

impl Shared {
    pub fn new(backend: Backend, config: RespConfig) -> Self {
        let conns = ConnTable::with_clock(
            ConnLimits {
                max_connections: MAX_CONNECTIONS as usize,
                request_timeout_ms: config.request_timeout_ms,
                idle_timeout_ms: config.idle_timeout_ms,
            },
            config.clock.clone(),
        );
        let started = config.clock.now();
        Self {
            backend,
            config,
            conns,
            large_commands: Arc::new(Semaphore::new(LARGE_COMMAND_BUDGET_BYTES / 1024)),
            stats: RespStats::default(),
            started,
            next_client_id: AtomicU64::new(1),
        }
    }

    pub(crate) fn new_client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// Serves RESP connections accepted on `listener` until the task is dropped;
/// `poller` is the event loop's (see [`crate::poller`]).
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, poller: Arc<Poller>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                shared
                    .stats
                    .connections_received
                    .fetch_add(1, Ordering::Relaxed);
                let Some(handle) = shared.conns.admit(stream.as_raw_fd()) else {
                    shared
                        .stats
                        .rejected_connections
                        .fetch_add(1, Ordering::Relaxed);
                    tokio::spawn(async move {
                        let mut stream = stream;
                        let _ = stream
                            .write_all(b"-ERR max number of clients reached\r\n")
                            .await;
                    });
                    continue;
                };
                let shared = shared.clone();
                let poller = poller.clone();
                tokio::spawn(async move {
                    shared.stats.connected.fetch_add(1, Ordering::Relaxed);
                    serve_connection(stream, &shared, poller, handle).await;
                    shared.stats.connected.fetch_sub(1, Ordering::Relaxed);
                });
            }
            // Out of file descriptors and the like: back off instead of spinning.
            Err(_) => {
                let pause = std::time::Duration::from_millis(10);
                shared.config.clock.sleep(pause).await;
            }
        }
    }
}

/// A reply that is written once the write behind it is durable.
pub type LaterReply = Pin<Box<dyn Future<Output = Vec<u8>> + Send>>;

enum Queued {
    Bytes(Vec<u8>),
    Later(LaterReply),
}

/// The replies of one batch of commands, in order. While no reply is waiting for
/// replication they go straight into `out`; after one is, later replies queue
/// behind it so the order on the wire is the order of the commands. Each queued
/// [`Queued::Later`] counts as one durability wait of the loop's [`Poller`]
/// until it is awaited or dropped.
pub struct Sink {
    out: Vec<u8>,
    queue: VecDeque<Queued>,
    /// Bytes of the [`Queued::Bytes`] in `queue`.
    queued_bytes: usize,
    poller: Arc<Poller>,
}

impl Sink {
    fn new(poller: Arc<Poller>) -> Self {
        Self {
            out: Vec::with_capacity(16 * 1024),
            queue: VecDeque::new(),
            queued_bytes: 0,
            poller,
        }
    }

    /// Appends a reply that is known now.
    pub fn reply(&mut self, version: Version, f: impl FnOnce(&mut Encoder<'_>)) {
        if self.queue.is_empty() {
            f(&mut Encoder::new(&mut self.out, version));
        } else {
            let mut bytes = Vec::new();
            f(&mut Encoder::new(&mut bytes, version));
            self.queued_bytes += bytes.len();
            self.queue.push_back(Queued::Bytes(bytes));
        }
    }

    /// Appends a reply that is known once `later` completes.
    pub fn later(&mut self, later: LaterReply) {
        self.poller.durability_wait_started();
        self.queue.push_back(Queued::Later(later));
    }

    /// Reply bytes not yet written, queued behind a replication wait or not: a
    /// pipeline of large GETs behind one SET counts too.
    fn pending_bytes(&self) -> usize {
        self.out.len() + self.queued_bytes
    }

    fn is_empty(&self) -> bool {
        self.out.is_empty() && self.queue.is_empty()
    }

    /// Waits for every queued reply and writes everything out.
    async fn flush(&mut self, stream: &mut TcpStream) -> std::io::Result<()> {
        while let Some(q) = self.queue.pop_front() {
            match q {
                Queued::Bytes(b) => {
                    self.queued_bytes -= b.len();
                    self.out.extend_from_slice(&b);
                }
                Queued::Later(f) => {
                    // Ends the wait even if this future is dropped mid-await.
                    let wait = DurabilityWait(&self.poller);
                    let b = f.await;
                    drop(wait);
                    self.out.extend_from_slice(&b);
                }
            }
        }
        if !self.out.is_empty() {
            stream.write_all(&self.out).await?;
            self.out.clear();
            if self.out.capacity() > RETAINED_REPLY_BUFFER_BYTES {
                self.out = Vec::with_capacity(16 * 1024);
            }
        }
        Ok(())
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        for q in &self.queue {
            if matches!(q, Queued::Later(_)) {
                self.poller.durability_wait_done();
            }
        }
    }
}

/// One reply's wait for replication being awaited; ends it when dropped.
struct DurabilityWait<'a>(&'a Poller);

impl Drop for DurabilityWait<'_> {
    fn drop(&mut self) {
        self.0.durability_wait_done();
    }
}

/// Calls `prefetch` with the key of each of the first [`PREFETCH_AHEAD`] complete
/// commands in `window` that has one (see [`Backend::prefetch`]); returns how
/// many bytes those commands take.
fn prefetch_keys(
    window: &[u8],
    ranges: &mut Vec<std::ops::Range<usize>>,
    mut prefetch: impl FnMut(&[u8]),
) -> usize {
    let mut pos = 0;
    for _ in 0..PREFETCH_AHEAD {
        let Ok(Some(parsed)) = parse_command_into(&window[pos..], ranges) else {
            break;
        };
        if parsed.inline.is_none() && ranges.len() >= 2 {
            let command = &window[pos..];
            if key_first(&command[ranges[0].clone()]) {
                prefetch(&command[ranges[1].clone()]);
            }
        }
        pos += parsed.consumed;
    }
    pos
}

/// Makes room in `buf` for one more read: [`READ_CHUNK_BYTES`] within
/// [`BASE_BUFFER_BYTES`], beyond it [`ONE_VALUE_BUFFER_BYTES`] and then the
/// largest command, paid for from the shared budget
/// (`held`: the KiB permits this connection holds). `false`: no budget came within
/// the request timeout, and the connection should close.
async fn make_room(
    buf: &mut Vec<u8>,
    held: &mut Option<OwnedSemaphorePermit>,
    shared: &Shared,
) -> bool {
    let need = buf.len() + READ_CHUNK_BYTES;
    if need <= buf.capacity() {
        return true;
    }
    if need <= BASE_BUFFER_BYTES {
        buf.reserve(READ_CHUNK_BYTES);
        return true;
    }
    // Two steps, so a connection waiting for budget holds little: enough for any
    // one-value command (a SET of the largest value), then the largest command.
    let cap = if need <= ONE_VALUE_BUFFER_BYTES {
        ONE_VALUE_BUFFER_BYTES
    } else {
        need.max(crate::protocol::MAX_COMMAND_BYTES + READ_CHUNK_BYTES)
    };
    let want = u32::try_from((cap - BASE_BUFFER_BYTES).div_ceil(1024)).unwrap_or(u32::MAX);
    let held_kib = held.as_ref().map_or(0, OwnedSemaphorePermit::num_permits);
    if held_kib < want as usize {
        // Ask only for the difference: the grant held pays for the buffer this
        // connection keeps while it waits.
        let acquire = shared
            .large_commands
            .clone()
            .acquire_many_owned(want - held_kib as u32);
        let timeout_ms = shared.config.request_timeout_ms;
        let permit = if timeout_ms == 0 {
            acquire.await
        } else {
            let limit = std::time::Duration::from_millis(timeout_ms);
            match shared.config.clock.timeout(limit, acquire).await {
                Ok(permit) => permit,
                Err(_) => return false,
            }
        };
        // The budget is never closed.
        let Ok(permit) = permit else { return false };
        match held {
            Some(h) => h.merge(permit),
            None => *held = Some(permit),
        }
    }
    buf.reserve_exact(cap - buf.len());
    true
}

async fn serve_connection(
    mut stream: TcpStream,
    shared: &Arc<Shared>,
    poller: Arc<Poller>,
    handle: ConnHandle,
) {
    // Dropped before the socket (declared after it): the table must never hold an
    // entry for a closed socket (see `ramstore_rpc::conns`).
    let handle = handle;
    // Small replies must not wait for Nagle's algorithm.
    let _ = stream.set_nodelay(true);
    let mut conn = Connection::new(shared.clone());
    let mut sink = Sink::new(poller.clone());
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK_BYTES);
    // Argument ranges of the command being run, reused for every command, and of
    // the commands whose keys are prefetched.
    let mut ranges = Vec::with_capacity(STACK_ARGS);
    let mut ahead = Vec::with_capacity(STACK_ARGS);
    let mut start = 0usize;
    // Commands up to here had their keys prefetched (set for every read).
    let mut prefetched;
    // The budget this connection's buffer holds beyond BASE_BUFFER_BYTES.
    let mut held: Option<OwnedSemaphorePermit> = None;
    // A command ran since the last read (the request timeout restarts).
    let mut progressed = false;
    loop {
        if start == buf.len() {
            buf.clear();
            start = 0;
        } else if start > 0 {
            buf.drain(..start);
            start = 0;
        }
        if buf.capacity() > BASE_BUFFER_BYTES && buf.len() < READ_CHUNK_BYTES {
            // A large command has run: give its buffer back.
            let mut small = Vec::with_capacity(BASE_BUFFER_BYTES);
            small.extend_from_slice(&buf);
            buf = small;
            held = None;
        }
        if buf.is_empty() {
            handle.idle();
        } else {
            handle.reading(progressed);
        }
        progressed = false;
        prefetched = 0;
        if !make_room(&mut buf, &mut held, shared).await {
            return;
        }
        match stream.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                handle.received();
                poller.activity();
            }
        }
        loop {
            let parsed = match parse_command_into(&buf[start..], &mut ranges) {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(e) => {
                    shared.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
                    let version = conn.version();
                    sink.reply(version, |enc| {
                        enc.error(&format!("ERR Protocol error: {e}"))
                    });
                    let _ = sink.flush(&mut stream).await;
                    return;
                }
            };
            // A pipeline: start loading the keys of this command and the next ones
            // into the cache together, so their misses overlap.
            if start >= prefetched && start + parsed.consumed < buf.len() {
                let backend = &shared.backend;
                prefetched =
                    start + prefetch_keys(&buf[start..], &mut ahead, |k| backend.prefetch(k));
            }
            let flow = {
                let window = &buf[start..];
                let argc = parsed.inline.as_ref().map_or(ranges.len(), Vec::len);
                if argc == 0 {
                    Flow::Continue
                } else {
                    shared
                        .stats
                        .commands_processed
                        .fetch_add(1, Ordering::Relaxed);
                    match &parsed.inline {
                        Some(owned) => {
                            let args: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
                            conn.execute(&args, &mut sink).await
                        }
                        None if argc <= STACK_ARGS => {
                            let mut args: [&[u8]; STACK_ARGS] = [&[]; STACK_ARGS];
                            for (a, r) in args.iter_mut().zip(&ranges) {
                                *a = &window[r.clone()];
                            }
                            conn.execute(&args[..argc], &mut sink).await
                        }
                        None => {
                            let args: Vec<&[u8]> =
                                ranges.iter().map(|r| &window[r.clone()]).collect();
                            conn.execute(&args, &mut sink).await
                        }
                    }
                }
            };
            start += parsed.consumed;
            progressed = true;
            if flow == Flow::Close {
                let _ = sink.flush(&mut stream).await;
                return;
            }
            if sink.pending_bytes() >= FLUSH_REPLY_BYTES {
                handle.writing();
                if sink.flush(&mut stream).await.is_err() {
                    return;
                }
            }
        }
        // Redis's order: the replies go out once every connection with commands
        // waiting has run them, so a client with many connections is woken once
        // for a round of replies rather than once per reply (which costs it, and
        // on a small machine the server, more than the commands). With a single
        // client connected there is nothing to wait for.
        if shared.stats.connected.load(Ordering::Relaxed) > 1 {
            tokio::task::yield_now().await;
        }
        if !sink.is_empty() {
            handle.writing();
        }
        if sink.flush(&mut stream).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(args: &[&str]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        out
    }

    #[test]
    fn prefetch_keys_takes_keys_of_complete_commands_only() {
        let mut window = Vec::new();
        for c in [
            &["GET", "a"][..],
            &["PING"],
            &["set", "b", "v"],
            &["ECHO", "not-a-key"],
        ] {
            window.extend_from_slice(&command(c));
        }
        let complete = window.len();
        // An incomplete command ends the scan.
        window.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$1\r\n");
        let mut keys = Vec::new();
        let mut ranges = Vec::new();
        let took = prefetch_keys(&window, &mut ranges, |k| keys.push(k.to_vec()));
        assert_eq!(took, complete);
        assert_eq!(keys, [b"a".to_vec(), b"b".to_vec()]);
    }

    #[test]
    fn prefetch_keys_stops_after_prefetch_ahead_commands() {
        let one = command(&["GET", "k"]);
        let window = one.repeat(PREFETCH_AHEAD + 5);
        let mut n = 0;
        let took = prefetch_keys(&window, &mut Vec::new(), |_| n += 1);
        assert_eq!(n, PREFETCH_AHEAD);
        assert_eq!(took, one.len() * PREFETCH_AHEAD);
    }

    #[test]
    fn prefetch_keys_survives_malformed_input() {
        let mut n = 0;
        assert_eq!(
            prefetch_keys(b"*2\r\n:oops\r\n", &mut Vec::new(), |_| n += 1),
            0
        );
        assert_eq!(n, 0);
    }
}
