//! The async client: the `Client` handle, its shared state and connecting. Routing
//! by the cached tablet map is in `client/map_refresh.rs`, the retry loop every RPC
//! goes through (R§11.4) in `client/retry_loop.rs`, table operations at the
//! coordinator in `client/tables.rs`, single-object operations at masters in
//! `client/objects.rs`, the map, statistics and pings in `client/admin.rs`.
//! Multi-operations are in `multi.rs`, enumeration in `enumerate.rs`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use ramstore_rpc::{RpcError, TcpTransport, Transport};

use crate::error::ClientError;
use crate::options::ClientOptions;
use crate::retry::Retrier;
use crate::tablet_map::TabletMap;

// The operations of `Client`, one family per file; each adds `impl` blocks and
// reaches the client's private state as a child module.
mod admin;
mod expiry;
mod map_refresh;
mod objects;
mod retry_loop;
pub(crate) mod rifl;
mod tables;
mod transaction;

pub use transaction::Transaction;

/// Bytes of a request frame besides its key and value (prefix, header, fixed
/// fields), used to size encode buffers in one allocation.
const REQUEST_OVERHEAD_BYTES: usize = 64;

/// A handle on a ramstore cluster. Cheap to clone (an `Arc` inside); clones share
/// the tablet map cache and the connections. See the crate documentation for an
/// example and for the retry and delivery guarantees.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("options", &self.inner.options)
            .field("map_version", &self.inner.map.read().version())
            .finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    pub(crate) options: ClientOptions,
    pub(crate) transport: Arc<dyn Transport>,
    /// The coordinator addresses ([`ClientOptions::coordinator_addrs`]): the active
    /// coordinator and its standbys (R§9).
    coordinators: Vec<String>,
    /// Index in `coordinators` of the one to ask next; moves on, round-robin, after a
    /// transport failure (a dead coordinator, or a standby, which does not listen).
    current_coordinator: AtomicUsize,
    map: RwLock<TabletMap>,
    /// Refresh attempts completed so far, published after each one. An operation
    /// reads it before it reads the map; if it has moved on by the time the
    /// operation asks for a refresh, a newer map (or a fresh failure) already exists.
    refreshes: AtomicU64,
    /// Held while a GetTabletMap is in flight, so there is only ever one; waiters
    /// take its outcome instead of sending their own.
    refresh: tokio::sync::Mutex<RefreshOutcome>,
    /// The client lease and sequence numbers of exactly-once RPCs (RIFL).
    pub(crate) rifl: rifl::Session,
}

/// The outcome of the last refresh attempt, shared with the callers that waited
/// for it.
struct RefreshOutcome {
    attempts: u64,
    last: Result<(), RefreshError>,
}

/// Why the tablet map could not be fetched.
#[derive(Debug, Clone)]
pub(crate) struct RefreshError {
    /// The whole story, for "last attempt" messages.
    pub(crate) why: String,
    /// Just the failure, without what was being done.
    pub(crate) reason: String,
    /// The coordinator did not answer at all (transport error).
    pub(crate) unreachable: bool,
    /// The peer answered with a status that retrying cannot change (e.g. it is not
    /// a coordinator at all).
    pub(crate) permanent: bool,
}

/// Where an operation was routed: the owner (if the map knows it), and what the
/// map looked like then.
pub(crate) struct Route {
    pub(crate) addr: Option<Arc<str>>,
    pub(crate) seen_refreshes: u64,
    pub(crate) map_version: u64,
}

/// Where a direct request goes.
#[derive(Clone, Copy)]
enum Target<'a> {
    /// The coordinator, whichever of the configured addresses answers.
    Coordinator,
    /// One fixed address (`coordinator`: it is one of the coordinators, for
    /// messages).
    Server { addr: &'a str, coordinator: bool },
}

impl Inner {
    /// The coordinator to ask now, with its index (for [`Self::coordinator_failed`]).
    fn coordinator_addr(&self) -> (usize, &str) {
        let i = self.current_coordinator.load(Ordering::Acquire) % self.coordinators.len();
        (i, &self.coordinators[i])
    }

    /// Coordinator `index` could not be reached: move on to the next address, unless
    /// a concurrent caller already has.
    fn coordinator_failed(&self, index: usize) {
        let next = (index + 1) % self.coordinators.len();
        let _ = self.current_coordinator.compare_exchange(
            index,
            next,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
}

/// A transport error as a short reason (without repeating the address).
fn transport_reason(e: &RpcError) -> String {
    match e {
        RpcError::ConnectFailed { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}

/// The answer to a ping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PingReply {
    /// The id the server has in the cluster (0 if it has not enlisted).
    pub server_id: u64,
    /// How long the ping took, retries included.
    pub round_trip: Duration,
}

impl Client {
    /// Connects to the cluster whose coordinator is at `options.coordinator` over
    /// TCP, and fetches the tablet map. Fails with
    /// [`ClientError::CoordinatorUnreachable`] ("cannot reach coordinator at ADDR:
    /// …") if the coordinator does not answer.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), ramstore_client::ClientError> {
    /// use ramstore_client::{Client, ClientOptions};
    /// let client = Client::connect(ClientOptions::new("127.0.0.1:11100")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(options: ClientOptions) -> Result<Client, ClientError> {
        let transport =
            TcpTransport::with_clock(options.clock.clone()).with_reply_poll(options.reply_poll_us);
        Self::with_transport(options, Arc::new(transport)).await
    }

    /// Like [`Client::connect`], over any [`Transport`] (e.g. a
    /// [`ramstore_rpc::LocalTransport`] with in-process services, for tests).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), ramstore_client::ClientError> {
    /// use std::sync::Arc;
    /// use ramstore_client::{Client, ClientOptions};
    /// use ramstore_rpc::LocalTransport;
    /// let transport = LocalTransport::new();
    /// // transport.register("coordinator", Arc::new(my_fake_coordinator));
    /// let client =
    ///     Client::with_transport(ClientOptions::new("coordinator"), Arc::new(transport)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn with_transport(
        options: ClientOptions,
        transport: Arc<dyn Transport>,
    ) -> Result<Client, ClientError> {
        let coordinators = options.coordinator_addrs();
        let inner = Arc::new(Inner {
            options,
            transport,
            coordinators,
            current_coordinator: AtomicUsize::new(0),
            map: RwLock::new(TabletMap::default()),
            refreshes: AtomicU64::new(0),
            refresh: tokio::sync::Mutex::new(RefreshOutcome {
                attempts: 0,
                last: Ok(()),
            }),
            rifl: rifl::Session::default(),
        });
        let mut retry = Retrier::new(&inner.options, inner.options.operation_deadline);
        // Coordinators that refused in a row: each is tried once before giving up.
        let mut unreachable = 0;
        loop {
            let Some(deadline) = retry.attempt_deadline(inner.options.rpc_deadline) else {
                return Err(retry.deadline_exceeded());
            };
            match inner.refresh_map(inner.refresh_count(), deadline).await {
                Ok(_) => return Ok(Client { inner }),
                // A standby does not listen: go on to the next address at once.
                Err(e) if e.unreachable && unreachable + 1 < inner.coordinators.len() => {
                    unreachable += 1;
                    retry.note(e.why);
                }
                // Fail fast: a wrong address should not take the whole deadline.
                Err(e) if e.unreachable => {
                    return Err(ClientError::CoordinatorUnreachable(format!(
                        "cannot reach coordinator at {}: {}",
                        inner.options.coordinator, e.reason
                    )))
                }
                // Answered with something retrying cannot fix (say, the address is
                // a storage server's): fail now, naming the reason.
                Err(e) if e.permanent => {
                    return Err(ClientError::InvalidRequest(format!(
                        "{} is not answering as a coordinator: {}",
                        inner.options.coordinator, e.reason
                    )))
                }
                // Answered but not ready (RETRY, SERVER_NOT_UP, …): wait for it.
                Err(e) => {
                    unreachable = 0;
                    retry.note(e.why);
                    retry.back_off().await;
                }
            }
        }
    }

    /// The options this client was made with.
    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }
}
