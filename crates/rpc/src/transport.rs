//! The client-side transport seam (docs/design.md §7).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;

/// A future that sends one request.
pub type CallFuture<'a> = Pin<Box<dyn Future<Output = Result<Bytes, RpcError>> + Send + 'a>>;

/// Sends request frames to servers and returns their response frames.
///
/// The caller encodes a whole request frame (any request id); the transport assigns
/// the id, so callers never coordinate ids. Implementations are cheap to share.
pub trait Transport: Send + Sync + 'static {
    /// Sends `frame` to the server at `addr` and waits at most `deadline` for the
    /// response frame (length prefix included).
    fn call<'a>(&'a self, addr: &'a str, frame: Vec<u8>, deadline: Duration) -> CallFuture<'a>;
}

/// Why a call produced no response. None of these says whether the server executed
/// the request: callers that retry must be idempotent or accept at-least-once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RpcError {
    /// `refused`: the peer's host answered that nothing listens on the port — the
    /// process is gone (a failure detector may act on this at once, unlike on a
    /// timeout, which a slow but live process also causes).
    #[error("cannot connect to {addr}: {reason}")]
    ConnectFailed {
        addr: String,
        reason: String,
        refused: bool,
    },
    #[error("connection to {0} closed")]
    ConnectionClosed(String),
    #[error("no response within the deadline")]
    DeadlineExceeded,
    #[error("frame length {0} is out of bounds")]
    BadFrameLength(usize),
    #[error("no service at {0}")]
    NoSuchService(String),
}

impl RpcError {
    /// Whether the peer process is certainly gone: nothing listens on its port, or
    /// it closed the connection (a live process does neither).
    pub fn peer_gone(&self) -> bool {
        matches!(
            self,
            RpcError::ConnectFailed { refused: true, .. } | RpcError::ConnectionClosed(_)
        )
    }

    /// Whether the peer may be gone (the caller should refresh its view of the
    /// cluster before retrying).
    pub fn peer_unreachable(&self) -> bool {
        matches!(
            self,
            RpcError::ConnectFailed { .. }
                | RpcError::ConnectionClosed(_)
                | RpcError::NoSuchService(_)
        )
    }
}
