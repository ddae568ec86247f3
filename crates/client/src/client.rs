//! The async client: routing by the cached tablet map, the retry loop every RPC goes
//! through (R§11.4), table operations at the coordinator and single-object
//! operations at masters. Multi-operations are in `multi.rs`, enumeration in
//! `enumerate.rs`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use ramstore_rpc::{RpcError, TcpTransport, Transport};
use ramstore_wire::{
    decode_response, encode_request, key_hash, NumberKind, Opcode, RejectRules, Request, Response,
    WireError,
};

use crate::error::{describe_body, encode_error, ClientError, Outcome};
use crate::options::ClientOptions;
use crate::retry::Retrier;
use crate::tablet_map::{TabletInfo, TabletMap};

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

    pub(crate) fn route(&self, table_id: u64, hash: u64) -> Route {
        // Read the refresh count before the map: a refresh that completes in between
        // is then merely repeated, never missed.
        let seen_refreshes = self.refreshes.load(Ordering::Acquire);
        let map = self.map.read();
        Route {
            addr: map.owner(table_id, hash).cloned(),
            seen_refreshes,
            map_version: map.version(),
        }
    }

    pub(crate) fn map(&self) -> parking_lot::RwLockReadGuard<'_, TabletMap> {
        self.map.read()
    }

    pub(crate) fn refresh_count(&self) -> u64 {
        self.refreshes.load(Ordering::Acquire)
    }

    /// Fetches the tablet map unless a refresh completed since the caller saw
    /// `seen_refreshes`; concurrent callers share one GetTabletMap. Returns the map
    /// version now held.
    pub(crate) async fn refresh_map(
        &self,
        seen_refreshes: u64,
        deadline: Duration,
    ) -> Result<u64, RefreshError> {
        let mut state = self.refresh.lock().await;
        if state.attempts == seen_refreshes {
            // A caller dropped mid-fetch leaves the count alone: the next one fetches.
            state.last = self.fetch_map(deadline).await;
            state.attempts += 1;
            self.refreshes.store(state.attempts, Ordering::Release);
        }
        state.last.clone().map(|()| self.map.read().version())
    }

    /// One GetTabletMap; installs the answer unless it is older than the map held.
    async fn fetch_map(&self, deadline: Duration) -> Result<(), RefreshError> {
        let (index, coordinator) = self.coordinator_addr();
        let fail = |reason: String, unreachable: bool| RefreshError {
            why: format!("fetching the tablet map from coordinator {coordinator}: {reason}"),
            reason,
            unreachable,
            permanent: false,
        };
        let mut frame = Vec::with_capacity(REQUEST_OVERHEAD_BYTES);
        encode_request(0, &Request::GetTabletMap, &mut frame)
            .map_err(|e| fail(e.to_string(), false))?;
        let bytes = match self.transport.call(coordinator, frame, deadline).await {
            Ok(bytes) => bytes,
            Err(e) => {
                // R§9: the coordinator may have failed over; try the next one.
                self.coordinator_failed(index);
                return Err(fail(transport_reason(&e), true));
            }
        };
        let (header, response) =
            decode_response(&bytes).map_err(|e| fail(format!("malformed response: {e}"), false))?;
        match response {
            Response::GetTabletMap {
                map_version,
                tablets,
            } if header.opcode == Opcode::GetTabletMap => {
                let fresh = TabletMap::from_entries(map_version, tablets);
                let mut map = self.map.write();
                // Never go backwards: an answer that was overtaken by a newer one
                // (or a lagging coordinator) is dropped.
                if fresh.version() >= map.version() {
                    *map = fresh;
                }
                Ok(())
            }
            Response::Error(body) => {
                let transient = matches!(
                    body.status(),
                    ramstore_wire::Status::Retry
                        | ramstore_wire::Status::ServerNotUp
                        | ramstore_wire::Status::NoSpace
                );
                Err(RefreshError {
                    permanent: !transient,
                    ..fail(describe_body(&body), false)
                })
            }
            _ => Err(fail("unexpected response".into(), false)),
        }
    }

    /// Refreshes the map within what is left of the operation's time; failures
    /// are noted in `retry` (the caller backs off anyway).
    pub(crate) async fn refresh_noting(
        &self,
        retry: &mut Retrier<'_>,
        seen_refreshes: u64,
    ) -> Option<u64> {
        let deadline = retry.attempt_deadline(self.options.rpc_deadline)?;
        match self.refresh_map(seen_refreshes, deadline).await {
            Ok(version) => Some(version),
            Err(e) => {
                retry.note(format!("{} (after: {})", e.why, retry.last()));
                None
            }
        }
    }

    /// One request about the object with key hash `hash` of `table_id`, sent to its
    /// owner and retried until it gets an answer the caller must handle.
    ///
    /// `encode` appends the request frame (it runs once per attempt, so a warm map
    /// costs one encode and one call); `parse` turns an OK response into the result
    /// (`None`: a response of another kind).
    pub(crate) async fn keyed<T>(
        &self,
        op: Opcode,
        table_id: u64,
        hash: u64,
        size_hint: usize,
        encode: impl Fn(&mut Vec<u8>) -> Result<(), WireError>,
        parse: impl FnOnce(Response<'_>) -> Option<T>,
    ) -> Result<T, ClientError> {
        let mut retry = Retrier::new(&self.options, self.options.operation_deadline)
            .with_no_space_patience(self.options.no_space_patience);
        loop {
            let Some(deadline) = retry.attempt_deadline(self.options.rpc_deadline) else {
                return Err(retry.deadline_exceeded());
            };
            let route = self.route(table_id, hash);
            let Some(addr) = route.addr else {
                self.find_route(&mut retry, table_id, hash, route.seen_refreshes, deadline)
                    .await?;
                continue;
            };
            let what = || format!("{op:?} in table {table_id} at {addr}");
            let mut frame = Vec::with_capacity(size_hint);
            encode(&mut frame).map_err(encode_error)?;
            let bytes = match self.transport.call(&addr, frame, deadline).await {
                Ok(bytes) => bytes,
                Err(e) => {
                    retry.note(format!("{}: {e}", what()));
                    // The server may be gone and its tablets elsewhere.
                    self.refresh_noting(&mut retry, route.seen_refreshes).await;
                    retry.back_off().await;
                    continue;
                }
            };
            let (header, response) = decode_response(&bytes).map_err(|e| {
                ClientError::Internal(format!("malformed response to {}: {e}", what()))
            })?;
            if header.opcode != op {
                return Err(ClientError::Internal(format!(
                    "{} answered opcode {:?}",
                    what(),
                    header.opcode
                )));
            }
            let body = match response {
                Response::Error(body) => body,
                ok => {
                    return parse(ok).ok_or_else(|| {
                        ClientError::Internal(format!("unexpected response to {}", what()))
                    })
                }
            };
            retry.note(format!("{}: {}", what(), describe_body(&body)));
            match Outcome::of_body(&body) {
                Outcome::Fail(e) => return Err(e),
                Outcome::RetryAfter(ms) => retry.wait_as_told(ms).await,
                Outcome::BackOff => retry.back_off().await,
                Outcome::NoSpace => match retry.no_space(&addr) {
                    Some(e) => return Err(e),
                    None => retry.back_off().await,
                },
                Outcome::RefreshMap => {
                    match self.refresh_noting(&mut retry, route.seen_refreshes).await {
                        // The map changed: the tablet has likely moved; go now.
                        Some(version) if version > route.map_version => {}
                        _ => retry.back_off().await,
                    }
                }
                Outcome::RefreshAndBackOff => {
                    self.refresh_noting(&mut retry, route.seen_refreshes).await;
                    retry.back_off().await;
                }
            }
        }
    }

    /// The map had no owner for `hash` of `table_id`: refresh it. Fails with
    /// TABLE_DOESNT_EXIST when a fresh map has no tablet of the table.
    pub(crate) async fn find_route(
        &self,
        retry: &mut Retrier<'_>,
        table_id: u64,
        hash: u64,
        seen_refreshes: u64,
        deadline: Duration,
    ) -> Result<(), ClientError> {
        match self.refresh_map(seen_refreshes, deadline).await {
            Ok(_) => {
                let map = self.map.read();
                if !map.has_table(table_id) {
                    return Err(ClientError::TableDoesntExist);
                }
                if map.owner(table_id, hash).is_some() {
                    return Ok(());
                }
                retry.note(format!(
                    "the tablet map (version {}) has no tablet of table {table_id} \
                     holding key hash {hash:#018x}",
                    map.version()
                ));
            }
            Err(e) => retry.note(e.why),
        }
        retry.back_off().await;
        Ok(())
    }

    /// A request to the coordinator (moving on to the next configured address after
    /// each transport failure) or to one server named by address, retried on RETRY,
    /// back-pressure and transport errors for `total`. When the target is a
    /// coordinator and the last failure was a transport error, giving up says the
    /// coordinator is unreachable.
    async fn direct<T>(
        &self,
        target: Target<'_>,
        total: Duration,
        op: Opcode,
        encode: impl Fn(&mut Vec<u8>) -> Result<(), WireError>,
        parse: impl FnOnce(Response<'_>) -> Option<T>,
    ) -> Result<T, ClientError> {
        let mut retry = Retrier::new(&self.options, total);
        let mut unreachable = false;
        let coordinator = match target {
            Target::Coordinator => true,
            Target::Server { coordinator, .. } => coordinator,
        };
        loop {
            let (index, addr) = match target {
                Target::Coordinator => {
                    let (i, addr) = self.coordinator_addr();
                    (Some(i), addr)
                }
                Target::Server { addr, .. } => (None, addr),
            };
            let what = || {
                if coordinator {
                    format!("{op:?} at coordinator {addr}")
                } else {
                    format!("{op:?} at {addr}")
                }
            };
            let Some(deadline) = retry.attempt_deadline(self.options.rpc_deadline) else {
                if coordinator && unreachable {
                    let at = match target {
                        Target::Coordinator => self.options.coordinator.as_str(),
                        Target::Server { addr, .. } => addr,
                    };
                    return Err(ClientError::CoordinatorUnreachable(format!(
                        "cannot reach coordinator at {at}: {}",
                        retry.last()
                    )));
                }
                return Err(retry.deadline_exceeded());
            };
            let mut frame = Vec::with_capacity(REQUEST_OVERHEAD_BYTES);
            encode(&mut frame).map_err(encode_error)?;
            let bytes = match self.transport.call(addr, frame, deadline).await {
                Ok(bytes) => bytes,
                Err(e) => {
                    unreachable = true;
                    retry.note(if coordinator {
                        format!("{addr}: {}", transport_reason(&e))
                    } else {
                        format!("{}: {e}", what())
                    });
                    if let Some(i) = index {
                        // R§9: the coordinator may have failed over; try the next.
                        self.coordinator_failed(i);
                    }
                    retry.back_off().await;
                    continue;
                }
            };
            unreachable = false;
            let (header, response) = decode_response(&bytes).map_err(|e| {
                ClientError::Internal(format!("malformed response to {}: {e}", what()))
            })?;
            let body = match response {
                Response::Error(body) => body,
                ok if header.opcode == op => {
                    return parse(ok).ok_or_else(|| {
                        ClientError::Internal(format!("unexpected response to {}", what()))
                    })
                }
                _ => {
                    return Err(ClientError::Internal(format!(
                        "{} answered opcode {:?}",
                        what(),
                        header.opcode
                    )))
                }
            };
            retry.note(format!("{}: {}", what(), describe_body(&body)));
            match Outcome::of_body(&body) {
                Outcome::Fail(e) => return Err(e),
                Outcome::RetryAfter(ms) => retry.wait_as_told(ms).await,
                Outcome::BackOff
                | Outcome::NoSpace
                | Outcome::RefreshMap
                | Outcome::RefreshAndBackOff => retry.back_off().await,
            }
        }
    }

    /// Where a request "to `addr`" goes: the configured coordinator string means the
    /// active coordinator; anything else is one server.
    fn target<'a>(&self, addr: &'a str) -> Target<'a> {
        if addr == self.options.coordinator {
            Target::Coordinator
        } else {
            Target::Server {
                addr,
                coordinator: self.coordinators.iter().any(|c| c == addr),
            }
        }
    }

    /// A request to the coordinator, within the operation deadline.
    pub(crate) async fn coordinator<T>(
        &self,
        req: Request<'_>,
        parse: impl FnOnce(Response<'_>) -> Option<T>,
    ) -> Result<T, ClientError> {
        self.direct(
            Target::Coordinator,
            self.options.operation_deadline,
            req.opcode(),
            |out| encode_request(0, &req, out),
            parse,
        )
        .await
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
        let transport = TcpTransport::with_clock(options.clock.clone());
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

    // ----- tables -------------------------------------------------------------

    /// Creates table `name` spread over `server_span` masters and returns its id;
    /// if the table exists, returns its id (the request is idempotent).
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// let table_id = client.create_table("users", 4).await?;
    /// # Ok(()) }
    /// ```
    pub async fn create_table(&self, name: &str, server_span: u32) -> Result<u64, ClientError> {
        self.inner
            .coordinator(Request::CreateTable { server_span, name }, |r| match r {
                Response::CreateTable { table_id } => Some(table_id),
                _ => None,
            })
            .await
    }

    /// The id of table `name`; [`ClientError::TableDoesntExist`] if there is none.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// let table_id = client.get_table_id("users").await?;
    /// # Ok(()) }
    /// ```
    pub async fn get_table_id(&self, name: &str) -> Result<u64, ClientError> {
        self.inner
            .coordinator(Request::GetTableId { name }, |r| match r {
                Response::GetTableId { table_id } => Some(table_id),
                _ => None,
            })
            .await
    }

    /// Asks the coordinator to treat server `server_id` as crashed and recover its
    /// tablets elsewhere (R§7; for drills and tests). Crashing a server that is
    /// already crashed or removed changes nothing.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// client.crash_server(3).await?;
    /// # Ok(()) }
    /// ```
    pub async fn crash_server(&self, server_id: u64) -> Result<(), ClientError> {
        self.inner
            .coordinator(Request::CrashServer { server_id }, |r| match r {
                Response::CrashServer => Some(()),
                _ => None,
            })
            .await
    }

    /// Drops table `name` and all its objects. A retried drop whose first attempt
    /// took effect may report [`ClientError::TableDoesntExist`].
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// client.drop_table("users").await?;
    /// # Ok(()) }
    /// ```
    pub async fn drop_table(&self, name: &str) -> Result<(), ClientError> {
        self.inner
            .coordinator(Request::DropTable { name }, |r| match r {
                Response::DropTable => Some(()),
                _ => None,
            })
            .await?;
        // Drop the table's tablets from the cache now rather than at the next
        // UNKNOWN_TABLET; a failure here changes nothing the caller relies on.
        self.refresh_now().await.ok();
        Ok(())
    }

    /// Makes `split_hash` the first key hash of a tablet of table `name` (a no-op
    /// if it already is). The tablet stays on its master until it is migrated.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// client.split_tablet("users", 1 << 63).await?;
    /// # Ok(()) }
    /// ```
    pub async fn split_tablet(&self, name: &str, split_hash: u64) -> Result<(), ClientError> {
        self.inner
            .coordinator(Request::SplitTablet { name, split_hash }, |r| match r {
                Response::SplitTablet => Some(()),
                _ => None,
            })
            .await
    }

    // ----- single objects -----------------------------------------------------

    /// Reads an object: its value and version; [`ClientError::ObjectDoesntExist`]
    /// if there is none.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// let (value, version) = client.read(table_id, b"alice").await?;
    /// # Ok(()) }
    /// ```
    pub async fn read(&self, table_id: u64, key: &[u8]) -> Result<(Vec<u8>, u64), ClientError> {
        self.read_with_rules(table_id, key, &RejectRules::default())
            .await
    }

    /// Reads an object unless `rules` reject it (e.g. fail with
    /// [`ClientError::WrongVersion`] unless its version is still 7).
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// use ramstore_client::RejectRules;
    /// let (value, _) = client
    ///     .read_with_rules(table_id, b"alice", &RejectRules::version_must_equal(7))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn read_with_rules(
        &self,
        table_id: u64,
        key: &[u8],
        rules: &RejectRules,
    ) -> Result<(Vec<u8>, u64), ClientError> {
        let req = Request::Read {
            table_id,
            rules: *rules,
            key,
        };
        self.inner
            .keyed(
                Opcode::Read,
                table_id,
                key_hash(key),
                REQUEST_OVERHEAD_BYTES + key.len(),
                |out| encode_request(0, &req, out),
                |r| match r {
                    Response::Read { version, value } => Some((value.to_vec(), version)),
                    _ => None,
                },
            )
            .await
    }

    /// Writes an object (creating or replacing it) and returns its new version.
    ///
    /// A write that is retried after a lost response may be applied twice
    /// (at-least-once) until exactly-once RPCs land; see the crate documentation.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// let version = client.write(table_id, b"alice", b"{\"age\":30}").await?;
    /// # Ok(()) }
    /// ```
    pub async fn write(&self, table_id: u64, key: &[u8], value: &[u8]) -> Result<u64, ClientError> {
        self.write_with_rules(table_id, key, value, &RejectRules::default())
            .await
    }

    /// Writes an object unless `rules` reject it (conditional write): e.g.
    /// compare-and-swap with [`RejectRules::version_must_equal`], create-only with
    /// [`RejectRules::must_not_exist`]. Returns the new version.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// use ramstore_client::{ClientError, RejectRules};
    /// let (value, version) = client.read(table_id, b"counter").await?;
    /// match client
    ///     .write_with_rules(table_id, b"counter", b"new", &RejectRules::version_must_equal(version))
    ///     .await
    /// {
    ///     Ok(_new_version) => {}
    ///     Err(ClientError::WrongVersion { current }) => { /* someone else won; reread */ }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn write_with_rules(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: &RejectRules,
    ) -> Result<u64, ClientError> {
        let req = Request::Write {
            table_id,
            rules: *rules,
            key,
            value,
        };
        self.inner
            .keyed(
                Opcode::Write,
                table_id,
                key_hash(key),
                REQUEST_OVERHEAD_BYTES + key.len() + value.len(),
                |out| encode_request(0, &req, out),
                |r| match r {
                    Response::Write { version } => Some(version),
                    _ => None,
                },
            )
            .await
    }

    /// Removes an object; returns the version removed, or `None` if there was no
    /// such object.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// if let Some(version) = client.remove(table_id, b"alice").await? {
    ///     println!("removed version {version}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn remove(&self, table_id: u64, key: &[u8]) -> Result<Option<u64>, ClientError> {
        self.remove_with_rules(table_id, key, &RejectRules::default())
            .await
    }

    /// Removes an object unless `rules` reject it; returns the version removed, or
    /// `None` if there was no such object.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// use ramstore_client::RejectRules;
    /// client
    ///     .remove_with_rules(table_id, b"alice", &RejectRules::version_must_equal(3))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn remove_with_rules(
        &self,
        table_id: u64,
        key: &[u8],
        rules: &RejectRules,
    ) -> Result<Option<u64>, ClientError> {
        let req = Request::Remove {
            table_id,
            rules: *rules,
            key,
        };
        self.inner
            .keyed(
                Opcode::Remove,
                table_id,
                key_hash(key),
                REQUEST_OVERHEAD_BYTES + key.len(),
                |out| encode_request(0, &req, out),
                |r| match r {
                    Response::Remove { existed, version } => Some(existed.then_some(version)),
                    _ => None,
                },
            )
            .await
    }

    /// Atomically adds `delta` to the object's value read as an integer in decimal
    /// text (an absent object counts as 0) and stores the sum as decimal text;
    /// returns the new value and version. Counters are stored exactly as Redis's
    /// INCR stores them ([`crate::counter`]), so the same key can be incremented
    /// and read through either protocol. [`ClientError::NotNumeric`] if the value
    /// is not such an integer (`"41"` is, `"+41"`, `" 41"` and `"041"` are not),
    /// [`ClientError::Overflow`] if the sum leaves i64.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// let (hits, _version) = client.increment_i64(table_id, b"hits", 1).await?;
    /// # Ok(()) }
    /// ```
    pub async fn increment_i64(
        &self,
        table_id: u64,
        key: &[u8],
        delta: i64,
    ) -> Result<(i64, u64), ClientError> {
        let (value, version) = self
            .increment(table_id, key, NumberKind::I64, delta.to_le_bytes())
            .await?;
        Ok((i64::from_le_bytes(value), version))
    }

    /// Atomically adds `delta` to the object's value read as a number in decimal
    /// text (an absent object counts as 0) and stores the sum as Redis's
    /// INCRBYFLOAT does (`"10.5"`, `"3"`; [`crate::counter`]); returns the new
    /// value and version. [`ClientError::NotNumeric`] if the value is not a
    /// number, [`ClientError::Overflow`] if the result is not finite.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client, table_id: u64) -> Result<(), ramstore_client::ClientError> {
    /// let (balance, _version) = client.increment_f64(table_id, b"balance", -2.5).await?;
    /// # Ok(()) }
    /// ```
    pub async fn increment_f64(
        &self,
        table_id: u64,
        key: &[u8],
        delta: f64,
    ) -> Result<(f64, u64), ClientError> {
        let (value, version) = self
            .increment(table_id, key, NumberKind::F64, delta.to_le_bytes())
            .await?;
        Ok((f64::from_le_bytes(value), version))
    }

    async fn increment(
        &self,
        table_id: u64,
        key: &[u8],
        kind: NumberKind,
        delta: [u8; 8],
    ) -> Result<([u8; 8], u64), ClientError> {
        let req = Request::Increment {
            table_id,
            rules: RejectRules::default(),
            kind,
            delta,
            key,
        };
        self.inner
            .keyed(
                Opcode::Increment,
                table_id,
                key_hash(key),
                REQUEST_OVERHEAD_BYTES + key.len(),
                |out| encode_request(0, &req, out),
                |r| match r {
                    Response::Increment { version, value } => Some((value, version)),
                    _ => None,
                },
            )
            .await
    }

    // ----- administration -----------------------------------------------------

    /// Fetches the tablet map from the coordinator (refreshing the cache) and
    /// returns it, sorted by table id and start hash.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// for t in client.tablet_map().await? {
    ///     println!("table {} [{:#x}, {:#x}] on {}", t.table_id, t.start_hash, t.end_hash, t.address);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn tablet_map(&self) -> Result<Vec<TabletInfo>, ClientError> {
        self.refresh_now().await?;
        Ok(self.cached_tablet_map())
    }

    /// The tablet map as cached now, without asking the coordinator.
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::Client) {
    /// let tablets = client.cached_tablet_map();
    /// # }
    /// ```
    pub fn cached_tablet_map(&self) -> Vec<TabletInfo> {
        self.inner.map().to_infos()
    }

    /// The version of the cached tablet map.
    ///
    /// ```no_run
    /// # fn demo(client: ramstore_client::Client) {
    /// println!("map version {}", client.tablet_map_version());
    /// # }
    /// ```
    pub fn tablet_map_version(&self) -> u64 {
        self.inner.map().version()
    }

    /// Refreshes the cached map, retrying until the operation deadline.
    pub(crate) async fn refresh_now(&self) -> Result<(), ClientError> {
        let inner = &*self.inner;
        let mut retry = Retrier::new(&inner.options, inner.options.operation_deadline);
        let mut unreachable = None;
        loop {
            let Some(deadline) = retry.attempt_deadline(inner.options.rpc_deadline) else {
                if let Some(reason) = unreachable {
                    return Err(ClientError::CoordinatorUnreachable(format!(
                        "cannot reach coordinator at {}: {reason}",
                        inner.options.coordinator
                    )));
                }
                return Err(retry.deadline_exceeded());
            };
            match inner.refresh_map(inner.refresh_count(), deadline).await {
                Ok(_) => return Ok(()),
                Err(e) => {
                    unreachable = e.unreachable.then(|| e.reason.clone());
                    retry.note(e.why);
                    retry.back_off().await;
                }
            }
        }
    }

    /// The statistics text (`key=value` lines) of the server at `addr`. Tried for
    /// at most one [`ClientOptions::rpc_deadline`]. An `addr` equal to
    /// [`ClientOptions::coordinator`] (also a comma-separated list) means whichever
    /// coordinator is active.
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// println!("{}", client.server_stats("10.0.0.7:11101").await?);
    /// # Ok(()) }
    /// ```
    pub async fn server_stats(&self, addr: &str) -> Result<String, ClientError> {
        let inner = &*self.inner;
        inner
            .direct(
                inner.target(addr),
                inner.options.rpc_deadline,
                Opcode::GetServerStats,
                |out| encode_request(0, &Request::GetServerStats, out),
                |r| match r {
                    Response::GetServerStats { text } => Some(text.to_string()),
                    _ => None,
                },
            )
            .await
    }

    /// Pings the server at `addr`: its server id and the round-trip time. Tried for
    /// at most one [`ClientOptions::rpc_deadline`].
    ///
    /// ```no_run
    /// # async fn demo(client: ramstore_client::Client) -> Result<(), ramstore_client::ClientError> {
    /// let reply = client.ping("10.0.0.7:11101").await?;
    /// println!("server {} answered in {:?}", reply.server_id, reply.round_trip);
    /// # Ok(()) }
    /// ```
    pub async fn ping(&self, addr: &str) -> Result<PingReply, ClientError> {
        let inner = &*self.inner;
        let nonce: u64 = inner.options.rng.next_u64();
        let start = inner.options.clock.now();
        let server_id = inner
            .direct(
                inner.target(addr),
                inner.options.rpc_deadline,
                Opcode::Ping,
                // caller_id 0: a client is not a server (R§7.11).
                |out| {
                    let ping = Request::Ping {
                        nonce,
                        caller_id: 0,
                    };
                    encode_request(0, &ping, out)
                },
                |r| match r {
                    Response::Ping {
                        nonce: echoed,
                        server_id,
                    } if echoed == nonce => Some(server_id),
                    _ => None,
                },
            )
            .await?;
        Ok(PingReply {
            server_id,
            round_trip: inner.options.clock.elapsed(start),
        })
    }
}
