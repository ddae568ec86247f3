//! ramstore's RPC transport (docs/design.md §6, R§5.2, R§11.4).
//!
//! Frames are length-prefixed (`u32` LE length of the rest) and carry a 16-byte header
//! whose bytes 8..16 (after the prefix) are the request id; everything else about
//! frames belongs to `ramstore-wire`. This crate moves frames:
//!
//! - [`server::serve`]: accepts TCP connections and hands each request frame to a
//!   [`Service`] *on the task that read it* (no hand-off on the fast path). Responses
//!   to pipelined requests are batched into one write. Requests the service marks slow
//!   run on their own task, so long work never holds up pings or reads. Every
//!   connection's memory is bounded (read buffer, unsent replies, slow requests in
//!   flight; frames over 64 KiB share a per-port budget) and its time limited.
//! - [`conns`]: the table of a port's connections: request and idle timeouts, and
//!   eviction of the oldest idle connection at the connection limit.
//! - [`poller`]: keeps an event loop polling its sockets for a moment after the
//!   last read instead of sleeping at once (R§5.1, R§5.3); the native server
//!   reports to one with [`serve_with_poller`], the Redis front end always does.
//! - [`reply_wait`]: the client side of the same idea — a call polls for its reply
//!   for a bounded window before its thread sleeps
//!   ([`TcpTransport::with_reply_poll`]).
//! - [`Transport`]: the client-side seam. [`TcpTransport`] keeps one connection per
//!   server with many requests in flight, answered out of order and matched by
//!   request id, each with its own deadline. [`LocalTransport`] calls services in
//!   process, for tests (RAMCloud's BindTransport).
//!
//! Time: every deadline, timeout and sleep here runs on a `ramstore_clock::Clock`
//! — the connection table's ([`ConnTable::with_clock`]) on the server side, the
//! transport's ([`TcpTransport::with_clock`], [`LocalTransport::with_clock`]) on
//! the client side; `new()` uses the system clock. A call's deadline on the system
//! clock is a tokio timer held inline in the call's future (no allocation).
//!
//! Invariants: a connection that sends a frame whose length prefix is out of bounds
//! is closed (the stream cannot be re-synchronised); every other malformed request is
//! the service's to answer. Thread-safety: everything here is `Send + Sync`.
//! Durability: none.

pub mod conns;
pub mod frame_pool;
pub mod local;
pub mod poller;
pub mod reply_wait;
pub mod server;
pub mod tcp;
pub mod transport;

pub use conns::{ConnLimits, ConnTable};
pub use local::{Dispatch, LocalTransport};
pub use poller::{Poller, DEFAULT_POLL_BEFORE_SLEEP_US, MAX_POLL_BEFORE_SLEEP_US};
pub use server::{
    serve, serve_with_limit, serve_with_poller, serve_with_table, Handled, Service,
    DEFAULT_MAX_CONNECTIONS,
};
pub use tcp::TcpTransport;
pub use transport::{RpcError, Transport};

/// Bytes of the length prefix.
pub const LEN_PREFIX_BYTES: usize = 4;
/// A call deadline meaning "none": the caller bounds the call itself (for example
/// by dropping it). At least this long is treated as no deadline by the transports.
pub const NO_DEADLINE: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);
/// Bytes of the frame header after the length prefix.
pub const HEADER_BYTES: usize = 16;
/// Largest frame accepted (prefix excluded): a whole 8 MiB log segment (a backup
/// write re-replicating a segment, or a replica read in recovery, R§7.4) plus
/// 64 KiB for the header and fixed fields. Equals `ramstore_wire::MAX_FRAME_BYTES`
/// (this crate does not depend on `ramstore-wire`; the storage server asserts it).
pub const MAX_FRAME_BYTES: usize = (8 << 20) + (64 << 10);
/// Offset of the request id within a frame (prefix included).
const REQUEST_ID_OFFSET: usize = LEN_PREFIX_BYTES + 8;

/// Length of the first frame in `buf` (prefix included): `Ok(None)` until the prefix
/// has arrived, an error if the length is out of bounds.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, RpcError> {
    let Some(prefix) = buf.get(..LEN_PREFIX_BYTES) else {
        return Ok(None);
    };
    let mut le = [0u8; 4];
    le.copy_from_slice(prefix);
    let len = u32::from_le_bytes(le) as usize;
    if !(HEADER_BYTES..=MAX_FRAME_BYTES).contains(&len) {
        return Err(RpcError::BadFrameLength(len));
    }
    Ok(Some(LEN_PREFIX_BYTES + len))
}

/// The request id of a whole frame (caller checked its length).
pub fn request_id(frame: &[u8]) -> u64 {
    let mut id = [0u8; 8];
    id.copy_from_slice(&frame[REQUEST_ID_OFFSET..REQUEST_ID_OFFSET + 8]);
    u64::from_le_bytes(id)
}

/// Overwrites the request id of a whole frame.
pub fn set_request_id(frame: &mut [u8], id: u64) {
    frame[REQUEST_ID_OFFSET..REQUEST_ID_OFFSET + 8].copy_from_slice(&id.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_len_accepts_a_whole_segment_and_no_more() {
        let prefix = |len: usize| (len as u32).to_le_bytes();
        let segment_frame = HEADER_BYTES + 32 + (8 << 20);
        assert_eq!(
            frame_len(&prefix(segment_frame)),
            Ok(Some(LEN_PREFIX_BYTES + segment_frame))
        );
        assert_eq!(
            frame_len(&prefix(MAX_FRAME_BYTES)),
            Ok(Some(LEN_PREFIX_BYTES + MAX_FRAME_BYTES))
        );
        assert_eq!(
            frame_len(&prefix(MAX_FRAME_BYTES + 1)),
            Err(RpcError::BadFrameLength(MAX_FRAME_BYTES + 1))
        );
        assert_eq!(
            frame_len(&prefix(HEADER_BYTES - 1)),
            Err(RpcError::BadFrameLength(HEADER_BYTES - 1))
        );
        assert_eq!(frame_len(&[1, 0]), Ok(None));
    }
}
