//! The store behind the Redis commands: object operations on the local master when
//! it owns the key, through the client library (one extra hop) when it does not.
//!
//! Local operations are ordinary native requests handed to the storage server's own
//! [`Service`] in-process: the same decoding, fencing, zombie checks, metrics and,
//! above all, the same replication wait as a native request over TCP. A write is
//! applied to the master's memory at once (so later commands on the connection see
//! it) and its reply is held until the write is on all R backups
//! ([`Outcome::Pending`]); pipelined writes thus wait for replication together, not
//! one after another.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use parking_lot::Mutex;
use ramstore_client::{key_hash, Client, ClientError, EnumeratedObject, RejectRules};
use ramstore_rpc::{Handled, Service};
use ramstore_wire::{decode_response, encode_request, ErrorBody, Request, Response, Status};

/// Why a store operation failed (beyond the outcomes commands handle themselves).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The client library's error (forwarded operations, tables, enumeration).
    #[error("{0}")]
    Client(#[from] ClientError),
    /// The write was applied in the master's memory but could not be made durable
    /// in time (or the master was fenced off meanwhile): it was not acknowledged,
    /// and may or may not survive. The client should retry.
    #[error("the write could not be confirmed durable: {0}")]
    NotDurable(String),
    /// The local master answered something that does not fit the request.
    #[error("unexpected answer from the master: {0}")]
    BadAnswer(String),
}

impl StoreError {
    /// The RESP error line (code and message) for this error.
    pub fn resp_message(&self) -> String {
        match self {
            StoreError::NotDurable(_)
            | StoreError::Client(ClientError::DeadlineExceeded { .. })
            | StoreError::Client(ClientError::CoordinatorUnreachable(_)) => {
                format!("TRYAGAIN {self}")
            }
            StoreError::Client(ClientError::TooLarge(what)) => {
                format!("ERR too large: {what} (keys are at most 64 KiB, values 1 MiB)")
            }
            _ => format!("ERR {self}"),
        }
    }
}

/// A result whose reply must wait for replication.
pub type PendingResult<T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send>>;

/// The outcome of an operation: known now, or known once the write (or the read
/// of a not-yet-durable object) is durable.
pub enum Outcome<T> {
    Ready(Result<T, StoreError>),
    Pending(PendingResult<T>),
}

impl<T> Outcome<T> {
    /// Waits for the outcome (for commands that need it to go on).
    pub async fn resolve(self) -> Result<T, StoreError> {
        match self {
            Outcome::Ready(r) => r,
            Outcome::Pending(f) => f.await,
        }
    }
}

/// A read: the value and version, or `None` if there is no such object.
pub type ReadResult = Option<(Vec<u8>, u64)>;

/// What a conditional write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteResult {
    /// Written with this new version.
    Written(u64),
    /// Refused: the object exists (a create-only rule).
    Exists,
    /// Refused: the object does not exist (an update-only rule).
    Missing,
    /// Refused: the object has this other version.
    WrongVersion(u64),
}

/// The answer to a native request handed to the local service.
enum Local {
    /// The response frame.
    Now(Vec<u8>),
    /// The response frame, once the write is durable.
    Later(Pin<Box<dyn Future<Output = Vec<u8>> + Send>>),
}

/// What a response frame says, for the typed operations.
enum Decoded<T> {
    Final(Result<T, StoreError>),
    /// Not this master's to answer now (UNKNOWN_TABLET, RETRY, SERVER_NOT_UP,
    /// NO_SPACE): the client library routes and retries it.
    Elsewhere(String),
}

/// The master in this process: its request handler and which keys it serves.
pub struct LocalMaster {
    /// The storage server's own service, called in-process.
    pub service: Arc<dyn Service>,
    /// True if the master serves (table id, key hash) now. Checked before a
    /// request is handed to `service`: a write to a key it does not own would
    /// otherwise be answered UNKNOWN_TABLET only after the replication wait
    /// behind it, too late to forward it in command order.
    pub serves: Box<dyn Fn(u64, u64) -> bool + Send + Sync>,
}

/// Most tables (databases) whose ids are cached.
pub const MAX_CACHED_TABLES: usize = 1024;

/// The store the commands use. Thread-safe; shared by every connection.
pub struct Backend {
    local: Option<LocalMaster>,
    client: Client,
    /// `db{n}` → table id, filled on first use.
    tables: Mutex<HashMap<u32, u64>>,
    /// Masters each table created through RESP spans.
    table_span: u32,
}

impl Backend {
    /// A backend serving local keys through `local` (the storage server's own
    /// service; `None`: forward everything) and the rest through `client`.
    pub fn new(local: Option<LocalMaster>, client: Client, table_span: u32) -> Self {
        Self {
            local,
            client,
            tables: Mutex::new(HashMap::new()),
            table_span: table_span.max(1),
        }
    }

    /// The id of table `db{db}`, creating the table on first use.
    pub async fn table_id(&self, db: u32) -> Result<u64, StoreError> {
        if let Some(&id) = self.tables.lock().get(&db) {
            return Ok(id);
        }
        let id = self
            .client
            .create_table(&format!("db{db}"), self.table_span)
            .await?;
        let mut tables = self.tables.lock();
        if tables.len() < MAX_CACHED_TABLES {
            tables.insert(db, id);
        }
        Ok(id)
    }

    /// The databases this server has used so far (for INFO's keyspace section).
    pub fn known_databases(&self) -> Vec<(u32, u64)> {
        let mut dbs: Vec<(u32, u64)> = self.tables.lock().iter().map(|(&d, &t)| (d, t)).collect();
        dbs.sort_unstable();
        dbs
    }

    /// Hands one native request to the local service; `None` without one, or if
    /// the request's key (`Some((table id, key))`) is not this master's.
    fn local(&self, req: &Request<'_>, key: Option<(u64, &[u8])>) -> Option<Local> {
        let local = self.local.as_ref()?;
        if let Some((table_id, key)) = key {
            if !(local.serves)(table_id, key_hash(key)) {
                return None;
            }
        }
        let service = &local.service;
        let mut frame = Vec::with_capacity(64);
        // A request built from checked arguments always encodes; if it somehow
        // does not, the client library reports the problem on the forwarded path.
        encode_request(1, req, &mut frame).ok()?;
        let mut out = Vec::with_capacity(128);
        Some(match service.handle(&frame, &mut out) {
            Handled::Done => Local::Now(out),
            Handled::Deferred(f) => Local::Later(f),
            Handled::Slow => Local::Later(service.clone().handle_slow(frame)),
        })
    }

    /// Runs `req` locally if this master can answer it; otherwise forwards through
    /// the client library (`forward`).
    async fn run<T, D, F, Fut>(
        &self,
        req: Request<'_>,
        key: (u64, &[u8]),
        decode: D,
        forward: F,
    ) -> Outcome<T>
    where
        T: Send + 'static,
        D: Fn(&[u8]) -> Decoded<T> + Send + Copy + 'static,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        match self.local(&req, Some(key)) {
            Some(Local::Now(frame)) => match decode(&frame) {
                Decoded::Final(r) => return Outcome::Ready(r),
                Decoded::Elsewhere(why) => tracing::trace!(%why, "forwarding a Redis command"),
            },
            Some(Local::Later(f)) => {
                return Outcome::Pending(Box::pin(async move {
                    let frame = f.await;
                    match decode(&frame) {
                        Decoded::Final(r) => r,
                        // Applied, but the replication wait failed (RETRY) or the
                        // master was fenced off meanwhile (SERVER_NOT_UP); or the
                        // tablet left between the ownership check and the request
                        // (UNKNOWN_TABLET). The client is told to try again.
                        Decoded::Elsewhere(why) => Err(StoreError::NotDurable(why)),
                    }
                }));
            }
            None => {}
        }
        Outcome::Ready(forward().await)
    }

    /// Reads `key` of `table`.
    pub async fn read(&self, table_id: u64, key: &[u8]) -> Outcome<ReadResult> {
        let req = Request::Read {
            table_id,
            rules: Default::default(),
            key,
        };
        self.run(req, (table_id, key), decode_read, || async {
            match self.client.read(table_id, key).await {
                Ok(found) => Ok(Some(found)),
                Err(ClientError::ObjectDoesntExist) => Ok(None),
                Err(e) => Err(e.into()),
            }
        })
        .await
    }

    /// Writes `key` of `table` unless `rules` refuse it.
    pub async fn write(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: RejectRules,
    ) -> Outcome<WriteResult> {
        let req = Request::Write {
            table_id,
            rules: rules.into(),
            key,
            value,
        };
        self.run(req, (table_id, key), decode_write, || async {
            let r = self
                .client
                .write_with_rules(table_id, key, value, &rules)
                .await;
            match r {
                Ok(version) => Ok(WriteResult::Written(version)),
                Err(ClientError::ObjectExists) => Ok(WriteResult::Exists),
                Err(ClientError::ObjectDoesntExist) => Ok(WriteResult::Missing),
                Err(ClientError::WrongVersion { current }) => {
                    Ok(WriteResult::WrongVersion(current))
                }
                Err(e) => Err(e.into()),
            }
        })
        .await
    }

    /// Removes `key` of `table`: the version removed, or `None` if there was none.
    pub async fn remove(&self, table_id: u64, key: &[u8]) -> Outcome<Option<u64>> {
        let req = Request::Remove {
            table_id,
            rules: Default::default(),
            key,
        };
        self.run(req, (table_id, key), decode_remove, || async {
            Ok(self.client.remove(table_id, key).await?)
        })
        .await
    }

    /// One batch of `table`'s objects from `cursor` (0: the start) and where the
    /// next batch starts (`None`: the table is done). Through the client library:
    /// the batch comes from whichever master owns the cursor's tablet.
    pub async fn scan_batch(
        &self,
        table_id: u64,
        cursor: u64,
    ) -> Result<(Vec<EnumeratedObject>, Option<u64>), StoreError> {
        let mut e = self.client.enumerate_from(table_id, cursor);
        match e.next_batch().await {
            None => Ok((Vec::new(), None)),
            Some(Ok(batch)) => Ok((batch, e.cursor())),
            Some(Err(e)) => Err(e.into()),
        }
    }

    /// The local server's statistics as `key=value` lines (empty without a local
    /// service).
    pub async fn local_stats(&self) -> String {
        let Some(local) = self.local(&Request::GetServerStats, None) else {
            return String::new();
        };
        let frame = match local {
            Local::Now(f) => f,
            Local::Later(f) => f.await,
        };
        match decode_response(&frame) {
            Ok((_, Response::GetServerStats { text })) => text.to_string(),
            _ => String::new(),
        }
    }
}

/// The statuses the client library retries or reroutes: the local master did not
/// carry the request out, so it may be forwarded.
fn is_elsewhere(status: Status) -> bool {
    matches!(
        status,
        Status::UnknownTablet | Status::Retry | Status::ServerNotUp | Status::NoSpace
    )
}

fn error_status(body: &ErrorBody<'_>) -> (Status, String) {
    match body {
        ErrorBody::Message { status, message } => (*status, format!("{status}: {message}")),
        other => (other.status(), other.status().to_string()),
    }
}

fn client_error(status: Status, text: String) -> StoreError {
    match status {
        Status::TooLarge => StoreError::Client(ClientError::TooLarge(text)),
        Status::InvalidRequest => StoreError::Client(ClientError::InvalidRequest(text)),
        Status::TableDoesntExist => StoreError::Client(ClientError::TableDoesntExist),
        _ => StoreError::BadAnswer(text),
    }
}

fn decode_read(frame: &[u8]) -> Decoded<ReadResult> {
    match decode_response(frame) {
        Ok((_, Response::Read { version, value })) => {
            Decoded::Final(Ok(Some((value.to_vec(), version))))
        }
        Ok((_, Response::Error(body))) => match error_status(&body) {
            (Status::ObjectDoesntExist, _) => Decoded::Final(Ok(None)),
            (s, text) if is_elsewhere(s) => Decoded::Elsewhere(text),
            (s, text) => Decoded::Final(Err(client_error(s, text))),
        },
        Ok((_, other)) => Decoded::Final(Err(StoreError::BadAnswer(format!("{other:?}")))),
        Err(e) => Decoded::Final(Err(StoreError::BadAnswer(e.to_string()))),
    }
}

fn decode_write(frame: &[u8]) -> Decoded<WriteResult> {
    match decode_response(frame) {
        Ok((_, Response::Write { version })) => Decoded::Final(Ok(WriteResult::Written(version))),
        Ok((_, Response::Error(ErrorBody::WrongVersion { current_version }))) => {
            Decoded::Final(Ok(WriteResult::WrongVersion(current_version)))
        }
        Ok((_, Response::Error(body))) => match error_status(&body) {
            (Status::ObjectExists, _) => Decoded::Final(Ok(WriteResult::Exists)),
            (Status::ObjectDoesntExist, _) => Decoded::Final(Ok(WriteResult::Missing)),
            (s, text) if is_elsewhere(s) => Decoded::Elsewhere(text),
            (s, text) => Decoded::Final(Err(client_error(s, text))),
        },
        Ok((_, other)) => Decoded::Final(Err(StoreError::BadAnswer(format!("{other:?}")))),
        Err(e) => Decoded::Final(Err(StoreError::BadAnswer(e.to_string()))),
    }
}

fn decode_remove(frame: &[u8]) -> Decoded<Option<u64>> {
    match decode_response(frame) {
        Ok((_, Response::Remove { existed, version })) => {
            Decoded::Final(Ok(existed.then_some(version)))
        }
        Ok((_, Response::Error(body))) => match error_status(&body) {
            (s, text) if is_elsewhere(s) => Decoded::Elsewhere(text),
            (s, text) => Decoded::Final(Err(client_error(s, text))),
        },
        Ok((_, other)) => Decoded::Final(Err(StoreError::BadAnswer(format!("{other:?}")))),
        Err(e) => Decoded::Final(Err(StoreError::BadAnswer(e.to_string()))),
    }
}
