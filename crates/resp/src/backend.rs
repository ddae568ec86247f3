//! The store behind the Redis commands: object operations on the local master when
//! it owns the key, through the client library (one extra hop) when it does not.
//!
//! Local reads, writes and removes go straight to the master ([`LocalObjects`],
//! implemented by the storage server): no native request is encoded and decoded
//! in between, which per command cost more than the RESP parsing itself. The
//! storage server runs them through the one request path its native requests take
//! too (fencing, zombie and membership checks, tablet ownership, the same
//! replication wait): a write is applied to the master's memory at once (so later
//! commands on the connection see it) and its reply is held until the write is on
//! all R backups ([`Outcome::Pending`]); pipelined writes thus wait for replication
//! together, not one after another. Whatever the master does not carry out itself
//! ([`Direct::Elsewhere`]: not its tablet, not confirmed alive, fenced) is
//! forwarded through the client library, i.e. as a native request.
//!
//! A full local log (NO_SPACE, L§7) is retried here, on the local master, with
//! short sleeps for at most [`Backend::no_space_patience`]; then the command is
//! answered `-OOM`. Once the master has been refusing writes for longer than that
//! patience it answers a refused write as final ([`Direct::Failed`] with
//! NO_SPACE), so the later writes of a pipeline are answered `-OOM` at once
//! instead of each waiting out the patience again. Deletes need no free memory
//! beyond the log's reserve and keep working; a delete that finds the reserve
//! used up is never final at once (the master answers it "not now" however long
//! it has refused writes), since waiting for the cleaner to reclaim what earlier
//! deletes freed is what makes room.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ramstore_client::{Client, ClientError, EnumeratedObject};
use ramstore_wire::{ExpireCondition, ExpiryChange, RejectRules, Status};

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
    /// The local master's log is full and stayed full for the whole patience
    /// ([`Backend::no_space_patience`]): the write was not applied.
    #[error("{0}")]
    OutOfMemory(String),
}

/// The start of the error a write refused for lack of memory gets: Redis's own
/// words, which clients and their users recognise (and some match on).
pub const OOM_MESSAGE: &str = "OOM command not allowed when used memory > 'maxmemory'.";

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
            StoreError::OutOfMemory(why) => format!("{OOM_MESSAGE} ramstore: {why}"),
            StoreError::Client(e @ ClientError::NoSpace { .. }) => {
                format!("{OOM_MESSAGE} ramstore: {e}")
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

/// A read into the caller's buffer ([`Backend::read_into`]).
pub enum ReadInto {
    /// Known now: the version (the value is in the buffer), or `None`.
    Ready(Result<Option<u64>, StoreError>),
    /// Known once the object read is durable; the value comes with the answer.
    Pending(PendingResult<ReadResult>),
}

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

/// What the local master did with a direct operation ([`LocalObjects`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direct<T> {
    /// Carried out, or refused by its reject rules: this is the answer.
    Done(T),
    /// Refused for a reason the client must hear (TOO_LARGE, INTERNAL, …).
    Failed(Status),
    /// Not carried out by this master now (UNKNOWN_TABLET, RETRY, SERVER_NOT_UP),
    /// with the master's message: the client library routes and retries it.
    /// Answered before any replication wait, so the command is forwarded in
    /// order. NO_SPACE (the log is full, for now) is retried on the local master
    /// instead, for at most [`Backend::no_space_patience`]; a master that has
    /// been refusing writes for longer answers [`Direct::Failed`] with NO_SPACE.
    Elsewhere(Status, &'static str),
}

/// A direct operation's answer: now, or once the log is durable up to it.
pub enum DirectAnswer<T> {
    Now(Direct<T>),
    /// Resolves once the write (or the not-yet-durable object read) is on all R
    /// backups; [`Direct::Elsewhere`] if it could not be made durable in time or
    /// the master was fenced off meanwhile.
    Later(Pin<Box<dyn Future<Output = Direct<T>> + Send>>),
}

/// A master's object operations called in-process, without the native wire format.
/// The storage server implements it on the request path its native requests take
/// too, so the guards and the replication wait are exactly theirs (see
/// `ramstore_server`'s `StorageService::serve`).
pub trait LocalObjects: Send + Sync {
    /// Reads `key` of `table_id`: its version, with its value appended to `value`,
    /// or `None` if there is no such object.
    fn read_local(
        &self,
        table_id: u64,
        key: &[u8],
        value: &mut Vec<u8>,
    ) -> DirectAnswer<Option<u64>>;

    /// Writes `key` of `table_id` unless `rules` refuse it.
    fn write_local(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: &RejectRules,
    ) -> DirectAnswer<WriteResult>;

    /// Removes `key` of `table_id`: the version removed, or `None` if there was none.
    fn remove_local(&self, table_id: u64, key: &[u8]) -> DirectAnswer<Option<u64>>;

    /// [`Self::write_local`] that changes the expiry time as `expiry` says.
    /// By default not carried out here: the front end forwards it as a native
    /// WriteExpiring.
    fn write_expiring_local(
        &self,
        _table_id: u64,
        _key: &[u8],
        _value: &[u8],
        _rules: &RejectRules,
        _expiry: ExpiryChange,
    ) -> DirectAnswer<WriteResult> {
        DirectAnswer::Now(Direct::Elsewhere(Status::Retry, NOT_LOCAL))
    }

    /// Gives `key` of `table_id` expiry `expires_at` if `condition` admits it:
    /// whether it changed. By default forwarded (a native SetExpiry).
    fn set_expiry_local(
        &self,
        _table_id: u64,
        _key: &[u8],
        _expires_at: Option<u64>,
        _condition: ExpireCondition,
    ) -> DirectAnswer<bool> {
        DirectAnswer::Now(Direct::Elsewhere(Status::Retry, NOT_LOCAL))
    }

    /// The expiry time of `key` of `table_id`: `None` if there is no such
    /// object, `Some(None)` if it never expires. By default forwarded (a
    /// native GetExpiry).
    fn expiry_local(&self, _table_id: u64, _key: &[u8]) -> DirectAnswer<Option<Option<u64>>> {
        DirectAnswer::Now(Direct::Elsewhere(Status::Retry, NOT_LOCAL))
    }

    /// A hint that `key` will be read or written soon (a later command of the same
    /// pipeline): the master may start loading what that takes into the cache.
    fn prefetch(&self, _key: &[u8]) {}

    /// The server's statistics as `key=value` lines (what a native GetServerStats
    /// answers), for `INFO`.
    fn stats_text(&self) -> String;
}

/// Why a direct operation a master does not implement is forwarded.
const NOT_LOCAL: &str = "not carried out on the direct path";

/// The master in this process.
pub struct LocalMaster {
    /// The master's object operations (reads, writes, removes) and statistics.
    pub objects: Arc<dyn LocalObjects>,
}

/// Most tables (databases) whose ids are cached.
pub const MAX_CACHED_TABLES: usize = 1024;

/// First sleep before a write refused NO_SPACE by the local master is tried again.
pub const NO_SPACE_RETRY_INITIAL_MS: u64 = 1;
/// The sleeps between tries double up to this: short enough that a cleaner that
/// freed space is noticed soon, long enough not to spin on a full log.
pub const NO_SPACE_RETRY_MAX_MS: u64 = 50;

/// The store the commands use. Thread-safe; shared by every connection.
pub struct Backend {
    local: Option<LocalMaster>,
    /// How long a write the local master refuses NO_SPACE is retried.
    no_space_patience: Duration,
    client: Client,
    /// `db{n}` → table id, filled on first use.
    tables: Mutex<HashMap<u32, u64>>,
    /// Masters each table created through RESP spans.
    table_span: u32,
}

impl Backend {
    /// A backend serving local keys through `local` (the storage server's own
    /// master; `None`: forward everything) and the rest through `client`.
    pub fn new(local: Option<LocalMaster>, client: Client, table_span: u32) -> Self {
        Self {
            local,
            no_space_patience: Duration::from_millis(ramstore_client::DEFAULT_NO_SPACE_PATIENCE_MS),
            client,
            tables: Mutex::new(HashMap::new()),
            table_span: table_span.max(1),
        }
    }

    /// The same backend, retrying a write the local master refuses for lack of
    /// memory (NO_SPACE) for at most `patience` before answering `-OOM`
    /// (`ramstore server --no-space-wait-ms`; default
    /// [`ramstore_client::DEFAULT_NO_SPACE_PATIENCE_MS`]).
    pub fn with_no_space_patience(mut self, patience: Duration) -> Self {
        self.no_space_patience = patience;
        self
    }

    /// How long a write the local master refuses NO_SPACE is retried before it is
    /// answered `-OOM`.
    pub fn no_space_patience(&self) -> Duration {
        self.no_space_patience
    }

    /// The client library instance that forwards commands (exactly-once), for
    /// what runs only through it: MULTI/EXEC's transactions.
    pub fn client(&self) -> &Client {
        &self.client
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

    /// Runs an operation on the local master (`direct`) if there is one and it
    /// carries it out; otherwise forwards it through the client library
    /// (`forward`). A full local log is waited for here (see the module doc):
    /// the command holds its place in the pipeline meanwhile, so the commands
    /// after it still run after it.
    async fn run<T, F, Fut>(
        &self,
        direct: impl Fn(&dyn LocalObjects) -> DirectAnswer<T>,
        forward: F,
    ) -> Outcome<T>
    where
        T: Send + 'static,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        if let Some(local) = &self.local {
            // The client's clock: the one the forwarded commands' deadlines run on.
            let clock = &self.client.options().clock;
            let mut full_since: Option<std::time::Instant> = None;
            let mut sleep_ms = NO_SPACE_RETRY_INITIAL_MS;
            loop {
                match direct(local.objects.as_ref()) {
                    DirectAnswer::Now(Direct::Elsewhere(Status::NoSpace, why)) => {
                        let since = *full_since.get_or_insert_with(|| clock.now());
                        let waited = clock.elapsed(since);
                        if waited >= self.no_space_patience {
                            return Outcome::Ready(Err(StoreError::OutOfMemory(format!(
                                "this server's log stayed full for {} ms ({why}); deletes \
                                 still work",
                                waited.as_millis()
                            ))));
                        }
                        let left = self.no_space_patience - waited;
                        clock.sleep(Duration::from_millis(sleep_ms).min(left)).await;
                        sleep_ms = (sleep_ms * 2).min(NO_SPACE_RETRY_MAX_MS);
                    }
                    DirectAnswer::Now(Direct::Elsewhere(status, why)) => {
                        tracing::trace!(%status, why, "forwarding a Redis command");
                        break;
                    }
                    DirectAnswer::Now(d) => return Outcome::Ready(final_result(d)),
                    DirectAnswer::Later(f) => {
                        return Outcome::Pending(Box::pin(async move { final_result(f.await) }));
                    }
                }
            }
        }
        Outcome::Ready(forward().await)
    }

    /// Reads `key` of `table`.
    pub async fn read(&self, table_id: u64, key: &[u8]) -> Outcome<ReadResult> {
        let mut value = Vec::new();
        match self.read_into(table_id, key, &mut value).await {
            ReadInto::Ready(r) => Outcome::Ready(r.map(|found| found.map(|v| (value, v)))),
            ReadInto::Pending(f) => Outcome::Pending(f),
        }
    }

    /// Reads `key` of `table` into `value` (cleared first), for replies that are
    /// known now; no allocation once `value` is large enough. A read that must
    /// wait for durability answers with its own copy of the value instead.
    pub async fn read_into(&self, table_id: u64, key: &[u8], value: &mut Vec<u8>) -> ReadInto {
        value.clear();
        if let Some(local) = &self.local {
            match local.objects.read_local(table_id, key, value) {
                DirectAnswer::Now(Direct::Elsewhere(status, why)) => {
                    tracing::trace!(%status, why, "forwarding a Redis command");
                    value.clear();
                }
                DirectAnswer::Now(d) => return ReadInto::Ready(final_result(d)),
                DirectAnswer::Later(f) => {
                    let held = std::mem::take(value);
                    return ReadInto::Pending(Box::pin(async move {
                        final_result(f.await).map(|found| found.map(|v| (held, v)))
                    }));
                }
            }
        }
        match self.client.read(table_id, key).await {
            Ok((found, version)) => {
                value.extend_from_slice(&found);
                ReadInto::Ready(Ok(Some(version)))
            }
            Err(ClientError::ObjectDoesntExist) => ReadInto::Ready(Ok(None)),
            Err(e) => ReadInto::Ready(Err(e.into())),
        }
    }

    /// Writes `key` of `table` unless `rules` refuse it.
    pub async fn write(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: RejectRules,
    ) -> Outcome<WriteResult> {
        self.run(
            |local| local.write_local(table_id, key, value, &rules),
            || async {
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
            },
        )
        .await
    }

    /// Writes `key` of `table` unless `rules` refuse it, changing its expiry
    /// time as `expiry` says (SET's EX/PX/EXAT/PXAT/KEEPTTL, SETEX, and the
    /// read-modify-writes that keep a TTL, as Redis's APPEND does).
    pub async fn write_expiring(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: RejectRules,
        expiry: ExpiryChange,
    ) -> Outcome<WriteResult> {
        self.run(
            |local| local.write_expiring_local(table_id, key, value, &rules, expiry),
            || async {
                let r = self
                    .client
                    .write_expiring(table_id, key, value, &rules, expiry)
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
            },
        )
        .await
    }

    /// Gives `key` of `table` expiry `expires_at` (wall-clock ms; `None`:
    /// never) if `condition` admits it: whether it changed (EXPIRE, PERSIST).
    pub async fn set_expiry(
        &self,
        table_id: u64,
        key: &[u8],
        expires_at: Option<u64>,
        condition: ExpireCondition,
    ) -> Outcome<bool> {
        self.run(
            |local| local.set_expiry_local(table_id, key, expires_at, condition),
            || async {
                Ok(self
                    .client
                    .set_expiry(table_id, key, expires_at, condition)
                    .await?)
            },
        )
        .await
    }

    /// The expiry time of `key` of `table`: `None` if there is no such key,
    /// `Some(None)` if it never expires (TTL and its family).
    pub async fn expiry(&self, table_id: u64, key: &[u8]) -> Outcome<Option<Option<u64>>> {
        self.run(
            |local| local.expiry_local(table_id, key),
            || async {
                match self.client.expiry(table_id, key).await {
                    Ok(at) => Ok(Some(at)),
                    Err(ClientError::ObjectDoesntExist) => Ok(None),
                    Err(e) => Err(e.into()),
                }
            },
        )
        .await
    }

    /// The wall-clock time expiry times are computed from, in ms since the
    /// Unix epoch (the client's clock, which the server shares in-process).
    pub fn now_ms(&self) -> u64 {
        self.client.wall_ms()
    }

    /// Removes `key` of `table`: the version removed, or `None` if there was none.
    pub async fn remove(&self, table_id: u64, key: &[u8]) -> Outcome<Option<u64>> {
        self.run(
            |local| local.remove_local(table_id, key),
            || async { Ok(self.client.remove(table_id, key).await?) },
        )
        .await
    }

    /// A hint that `key` will be used soon (see [`LocalObjects::prefetch`]).
    pub fn prefetch(&self, key: &[u8]) {
        if let Some(local) = &self.local {
            local.objects.prefetch(key);
        }
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
    /// master), called directly: no native request in between.
    pub async fn local_stats(&self) -> String {
        self.local
            .as_ref()
            .map_or_else(String::new, |local| local.objects.stats_text())
    }
}

/// The final result of a direct operation: its answer, or the error to reply. A
/// deferred answer that turned out not carried out (the replication wait timed out,
/// or the master was fenced off meanwhile) was applied but not acknowledged: the
/// client is told to try again.
fn final_result<T>(d: Direct<T>) -> Result<T, StoreError> {
    match d {
        Direct::Done(v) => Ok(v),
        // The local store says only TOO_LARGE: name what is limited (an APPEND
        // past 1 MiB lands here), not the bare status.
        Direct::Failed(Status::TooLarge) => Err(StoreError::Client(ClientError::TooLarge(
            "the key or the value would be over the limit".into(),
        ))),
        Direct::Failed(status) => Err(client_error(status, format!("{status}: "))),
        Direct::Elsewhere(status, why) => Err(StoreError::NotDurable(format!("{status}: {why}"))),
    }
}

fn client_error(status: Status, text: String) -> StoreError {
    match status {
        // The master has been refusing writes for longer than its patience.
        Status::NoSpace => StoreError::OutOfMemory(
            "this server's log is full and has been refusing writes for longer than \
             its patience; deletes still work"
                .into(),
        ),
        Status::TooLarge => StoreError::Client(ClientError::TooLarge(text)),
        Status::InvalidRequest => StoreError::Client(ClientError::InvalidRequest(text)),
        Status::TableDoesntExist => StoreError::Client(ClientError::TableDoesntExist),
        _ => StoreError::BadAnswer(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp_message_out_of_memory_is_redis_oom() {
        let local = StoreError::OutOfMemory("this server's log stayed full".into());
        assert!(local.resp_message().starts_with(OOM_MESSAGE), "{local:?}");
        let forwarded = StoreError::Client(ClientError::NoSpace {
            server: "10.0.0.9:11101".into(),
            waited: Duration::from_secs(3),
        });
        let line = forwarded.resp_message();
        assert!(line.starts_with("OOM "), "{line}");
        assert!(line.contains("10.0.0.9:11101"), "{line}");
    }

    #[test]
    fn final_result_of_a_failed_no_space_is_out_of_memory() {
        let r: Result<(), StoreError> = final_result(Direct::Failed(Status::NoSpace));
        assert!(matches!(r, Err(StoreError::OutOfMemory(_))), "{r:?}");
    }
}
