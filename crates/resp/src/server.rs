//! The RESP listener and the per-connection loop: read what the socket has, run
//! every complete command in it in order, write all their replies in one write.
//! A connection's memory is bounded (read buffer, with large commands paid from a
//! shared budget; unsent replies) and its time limited (`ramstore_rpc::conns`).

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use ramstore_rpc::conns::ConnHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;

use crate::cmd::{key_first, Connection, Flow};
use crate::poller::Poller;
use crate::protocol::parse_command_into;
use crate::shared::Shared;
use crate::sink::Sink;

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
/// A connection's read buffer grows beyond this only for a command larger than it,
/// paid for from [`LARGE_COMMAND_BUDGET_BYTES`], and shrinks back to
/// [`READ_CHUNK_BYTES`] once the command has run.
pub const BASE_BUFFER_BYTES: usize = 2 * READ_CHUNK_BYTES;
/// The first size a read buffer grows to beyond [`BASE_BUFFER_BYTES`]: a command
/// with one value of `MAX_BULK_BYTES` and a key of `MAX_KEY_BYTES` fits. A larger
/// command gets a buffer of `MAX_COMMAND_BYTES` (pages are resident only once
/// written).
const ONE_VALUE_BUFFER_BYTES: usize =
    crate::protocol::MAX_BULK_BYTES + (128 << 10) + READ_CHUNK_BYTES;

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
        let Ok(Some(parsed)) = parse_command_into(&window[pos..], ranges, true) else {
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
            let parsed = match parse_command_into(&buf[start..], &mut ranges, conn.authenticated())
            {
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
