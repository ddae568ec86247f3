//! [`EtcdStorage`]: the coordinator's external storage on an etcd cluster, which is
//! what lets standby coordinators take over (R§9: "the coordinator writes the metadata
//! to an external fault-tolerant key-value store").
//!
//! Keys live under a prefix, `/ramstore/<cluster>/data/` (see
//! [`EtcdSpec::data_prefix`]; the leader key is `/ramstore/<cluster>/leader`), so
//! several clusters can share one etcd. Values are stored as they are: etcd keeps
//! its own checksums and replicates every write with Raft before answering.
//!
//! Threading: [`ExternalStorage`] is synchronous and the coordinator calls it while
//! it holds the lock of its core, from inside async RPC handlers. The etcd client is
//! async (tonic). So every `EtcdStorage` owns one dedicated thread running its own
//! current-thread tokio runtime, which owns the etcd client; a call sends a job over
//! a channel and waits for the answer on a std channel with a timeout
//! ([`EtcdSpec::op_timeout_ms`]), returning [`StorageError::Backend`] when it
//! expires. The calling thread blocks for at most that long, as it would on a disk
//! write of [`crate::FileStorage`]; it never needs the caller's runtime, so a call
//! from a current-thread runtime cannot deadlock. The election's lease keepalive
//! ([`crate::election`]) runs on the same dedicated thread, so it keeps going while
//! the coordinator's own workers are busy.
//!
//! Fencing (R§9 leader lease): once a coordinator has won the election, every `put`
//! and `delete` is an etcd transaction that only applies if the leader key still has
//! the create revision this coordinator wrote it with. A deposed leader (its lease
//! expired and a successor created the key anew) therefore cannot overwrite its
//! successor's state; its write fails with [`StorageError::NotLeader`] and the
//! election's "lost" callback runs (the coordinator process exits).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, Txn, TxnOp,
};
use parking_lot::Mutex;
use ramstore_clock::{system_clock, Clock};

use crate::storage::{validate_key, ExternalStorage, StorageError};

/// How long one etcd operation may take before it fails with
/// [`StorageError::Backend`] (default of [`EtcdSpec::op_timeout_ms`]).
pub const ETCD_OP_TIMEOUT_MS: u64 = 2_000;
/// How long connecting to an etcd endpoint may take.
pub const ETCD_CONNECT_TIMEOUT_MS: u64 = 2_000;
/// The most etcd endpoints a store spec may list.
pub const MAX_ETCD_ENDPOINTS: usize = 16;
/// The longest cluster name (it becomes part of every key).
pub const MAX_CLUSTER_NAME_BYTES: usize = 64;
/// The cluster name when `etcd://…` names none.
pub const DEFAULT_CLUSTER_NAME: &str = "default";
/// Extra time the caller waits beyond the operation timeout for the etcd thread to
/// report that timeout itself (so the usual error is etcd's, not "no answer").
const REPLY_SLACK_MS: u64 = 500;

/// Where an etcd store is: parsed from `etcd://HOST:PORT[,HOST:PORT…][/CLUSTER]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdSpec {
    /// `host:port` of each etcd member (client URLs, plain HTTP).
    pub endpoints: Vec<String>,
    /// The cluster's name: its keys live under `/ramstore/<cluster>/`.
    pub cluster: String,
    /// Timeout of one operation, in milliseconds.
    pub op_timeout_ms: u64,
}

impl EtcdSpec {
    /// Parses `etcd://HOST:PORT[,HOST:PORT…][/CLUSTER]` (the scheme included).
    pub fn parse(s: &str) -> Result<Self, String> {
        let rest = s.strip_prefix("etcd://").ok_or_else(|| {
            format!("{s:?} is not an etcd store: use etcd://HOST:PORT[,HOST:PORT]")
        })?;
        let (hosts, cluster) = match rest.split_once('/') {
            Some((hosts, cluster)) => (hosts, cluster),
            None => (rest, DEFAULT_CLUSTER_NAME),
        };
        if cluster.is_empty()
            || cluster.len() > MAX_CLUSTER_NAME_BYTES
            || !cluster
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        {
            return Err(format!(
                "bad cluster name {cluster:?} in {s:?}: 1 to {MAX_CLUSTER_NAME_BYTES} of \
                 A-Z a-z 0-9 - _ ."
            ));
        }
        let mut endpoints = Vec::new();
        for host in hosts.split(',') {
            let host = host.trim();
            let (name, port) = host.rsplit_once(':').ok_or_else(|| {
                format!(
                    "etcd endpoint {host:?} in {s:?} needs a port: HOST:PORT (e.g. 127.0.0.1:2379)"
                )
            })?;
            if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c == '/') {
                return Err(format!("etcd endpoint {host:?} in {s:?} has no valid host"));
            }
            if port.parse::<u16>().map_or(true, |p| p == 0) {
                return Err(format!(
                    "etcd endpoint {host:?} in {s:?}: port {port:?} is not a number from 1 to 65535"
                ));
            }
            endpoints.push(host.to_owned());
        }
        if endpoints.len() > MAX_ETCD_ENDPOINTS {
            return Err(format!(
                "{} etcd endpoints in {s:?}; at most {MAX_ETCD_ENDPOINTS}",
                endpoints.len()
            ));
        }
        Ok(Self {
            endpoints,
            cluster: cluster.to_owned(),
            op_timeout_ms: ETCD_OP_TIMEOUT_MS,
        })
    }

    /// The prefix of every key of this cluster: `/ramstore/<cluster>/`.
    pub fn prefix(&self) -> String {
        format!("/ramstore/{}/", self.cluster)
    }

    /// The prefix of the coordinator's state keys: `/ramstore/<cluster>/data/`.
    pub fn data_prefix(&self) -> String {
        format!("{}data/", self.prefix())
    }

    /// The leader key (R§9's "leader object"): `/ramstore/<cluster>/leader`, bound
    /// to the active coordinator's lease, its value the coordinator's address.
    pub fn leader_key(&self) -> String {
        format!("{}leader", self.prefix())
    }
}

impl std::fmt::Display for EtcdSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "etcd://{}/{}", self.endpoints.join(","), self.cluster)
    }
}

/// A future the etcd thread runs.
pub(crate) type JobFuture = Pin<Box<dyn Future<Output = ()> + Send>>;
/// Work for the etcd thread: given the client, the future to spawn there.
pub(crate) type Job = Box<dyn FnOnce(Client) -> JobFuture + Send>;

/// The etcd thread: owns the client and a current-thread runtime, and spawns every
/// job it is sent. It ends when every sender is gone.
#[derive(Clone)]
pub(crate) struct EtcdThread {
    jobs: tokio::sync::mpsc::UnboundedSender<Job>,
    pub(crate) op_timeout: Duration,
    /// The time operation timeouts and the leader lease (`crate::election`) run on.
    pub(crate) clock: Arc<dyn Clock>,
}

/// Waits for `rx`'s answer for at most `timeout` of `clock`; `None` if none came
/// (or the sender is gone).
fn recv_within<T>(
    clock: &Arc<dyn Clock>,
    rx: &std::sync::mpsc::Receiver<T>,
    timeout: Duration,
) -> Option<T> {
    let mut answer = None;
    clock.block_until(
        clock.deadline_after(timeout),
        &mut |slice| match rx.recv_timeout(slice) {
            Ok(value) => {
                answer = Some(value);
                true
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => false,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => true,
        },
    );
    answer
}

impl EtcdThread {
    /// Starts the thread and connects; fails if the runtime cannot be built or the
    /// endpoints are malformed (etcd itself is contacted lazily).
    fn start(spec: &EtcdSpec, clock: Arc<dyn Clock>) -> Result<Self, StorageError> {
        let op_timeout = Duration::from_millis(spec.op_timeout_ms);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| backend("start", "", format!("cannot build the etcd runtime: {e}")))?;
        let (jobs, mut queue) = tokio::sync::mpsc::unbounded_channel::<Job>();
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<Result<(), String>>(1);
        let endpoints: Vec<String> = spec
            .endpoints
            .iter()
            .map(|e| format!("http://{e}"))
            .collect();
        std::thread::Builder::new()
            .name("etcd-client".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let options = ConnectOptions::new()
                        .with_connect_timeout(Duration::from_millis(ETCD_CONNECT_TIMEOUT_MS))
                        .with_timeout(op_timeout)
                        .with_keep_alive(op_timeout, op_timeout);
                    let client = match Client::connect(endpoints, Some(options)).await {
                        Ok(c) => {
                            let _ = ready_tx.send(Ok(()));
                            c
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.to_string()));
                            return;
                        }
                    };
                    while let Some(job) = queue.recv().await {
                        tokio::spawn(job(client.clone()));
                    }
                })
            })
            .map_err(|e| backend("start", "", format!("cannot start the etcd thread: {e}")))?;
        let ready = Duration::from_millis(ETCD_CONNECT_TIMEOUT_MS + REPLY_SLACK_MS);
        match recv_within(&clock, &ready_rx, ready) {
            Some(Ok(())) => Ok(Self {
                jobs,
                op_timeout,
                clock,
            }),
            Some(Err(e)) => Err(backend("connect", "", e)),
            None => Err(backend(
                "connect",
                "",
                "the etcd client did not start".into(),
            )),
        }
    }

    /// Sends a job; false if the thread is gone.
    pub(crate) fn submit(&self, job: Job) -> bool {
        self.jobs.send(job).is_ok()
    }

    /// Runs `op` on the etcd thread with the operation timeout and waits for its
    /// result on this (any) thread.
    fn call_blocking<T, F, Fut>(&self, op: &'static str, key: &str, f: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(Client) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StorageError>> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let timeout = self.op_timeout;
        let key_owned = key.to_owned();
        let clock = self.clock.clone();
        let sent = self.submit(Box::new(move |client| {
            Box::pin(async move {
                let result = match clock.timeout(timeout, f(client)).await {
                    Ok(r) => r,
                    Err(_) => Err(backend(
                        op,
                        &key_owned,
                        format!("no answer from etcd within {} ms", timeout.as_millis()),
                    )),
                };
                let _ = tx.send(result);
            })
        }));
        if !sent {
            return Err(backend(
                op,
                key,
                "the etcd client thread has stopped".into(),
            ));
        }
        match recv_within(
            &self.clock,
            &rx,
            timeout + Duration::from_millis(REPLY_SLACK_MS),
        ) {
            Some(r) => r,
            None => Err(backend(
                op,
                key,
                format!("no answer from etcd within {} ms", timeout.as_millis()),
            )),
        }
    }

    /// Runs `op` on the etcd thread with the operation timeout; for async callers.
    pub(crate) async fn call<T, F, Fut>(&self, op: &'static str, f: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(Client) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StorageError>> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let timeout = self.op_timeout;
        let clock = self.clock.clone();
        let sent = self.submit(Box::new(move |client| {
            Box::pin(async move {
                let result = match clock.timeout(timeout, f(client)).await {
                    Ok(r) => r,
                    Err(_) => Err(backend(
                        op,
                        "",
                        format!("no answer from etcd within {} ms", timeout.as_millis()),
                    )),
                };
                let _ = tx.send(result);
            })
        }));
        if !sent {
            return Err(backend(op, "", "the etcd client thread has stopped".into()));
        }
        rx.await
            .unwrap_or_else(|_| Err(backend(op, "", "the etcd client thread has stopped".into())))
    }
}

pub(crate) fn backend(op: &'static str, key: &str, reason: String) -> StorageError {
    StorageError::Backend {
        op,
        key: key.to_owned(),
        reason,
    }
}

/// What fences this store's writes once this coordinator has won the election
/// (R§9; [`crate::election`]'s leader state implements it). A trait here, so the
/// store does not import the election that is built on it (issue 19: no import
/// circles).
pub(crate) trait WriteFence: Send + Sync {
    /// The leader key and its create revision, to fence a write with; `None` once
    /// leadership is lost or given up.
    fn fence(&self) -> Option<(String, i64)>;
    /// Why leadership was lost, for errors.
    fn lost_reason(&self) -> String;
    /// Records the loss of leadership (a fenced write was refused).
    fn lose(&self, reason: &str);
}

/// External storage on etcd; see the module documentation.
pub struct EtcdStorage {
    spec: EtcdSpec,
    prefix: String,
    thread: EtcdThread,
    /// Set once this coordinator has won the election: writes are then fenced by
    /// the leader key's create revision (R§9).
    leader: Mutex<Option<Arc<dyn WriteFence>>>,
}

impl std::fmt::Debug for EtcdStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStorage")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl EtcdStorage {
    /// Connects to the etcd cluster of `spec` and checks that it answers (one read),
    /// so a wrong address fails at start-up with a clear error.
    pub fn connect(spec: &EtcdSpec) -> Result<Self, StorageError> {
        Self::connect_with_clock(spec, system_clock())
    }

    /// [`EtcdStorage::connect`] with operation timeouts and the leader lease on
    /// `clock`.
    pub fn connect_with_clock(
        spec: &EtcdSpec,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StorageError> {
        let thread = EtcdThread::start(spec, clock)?;
        let storage = Self {
            spec: spec.clone(),
            prefix: spec.data_prefix(),
            thread,
            leader: Mutex::new(None),
        };
        storage.get_raw(&storage.prefix).map_err(|e| match e {
            StorageError::Backend { reason, .. } => backend(
                "connect",
                "",
                format!(
                    "etcd at {} does not answer: {reason}",
                    spec.endpoints.join(",")
                ),
            ),
            e => e,
        })?;
        Ok(storage)
    }

    /// The store's spec.
    pub fn spec(&self) -> &EtcdSpec {
        &self.spec
    }

    /// The prefix of every stored key (`/ramstore/<cluster>/data/`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub(crate) fn thread(&self) -> &EtcdThread {
        &self.thread
    }

    /// From now on every write is fenced by `leader` (see the module documentation).
    pub(crate) fn set_leader(&self, leader: Arc<dyn WriteFence>) {
        *self.leader.lock() = Some(leader);
    }

    fn full_key(&self, key: &str) -> Result<String, StorageError> {
        validate_key(key)?;
        Ok(format!("{}{key}", self.prefix))
    }

    fn get_raw(&self, full: &str) -> Result<Option<Vec<u8>>, StorageError> {
        let k = full.to_owned();
        self.thread
            .call_blocking("get", full, move |mut client| async move {
                let resp = client
                    .get(k.as_bytes(), None)
                    .await
                    .map_err(|e| backend("get", &k, e.to_string()))?;
                Ok(resp.kvs().first().map(|kv| kv.value().to_vec()))
            })
    }

    /// Applies `op` to etcd: plainly, or as a transaction conditional on still
    /// holding leadership once this coordinator has won the election.
    fn write(&self, what: &'static str, key: &str, op: TxnOp) -> Result<(), StorageError> {
        let leader = self.leader.lock().clone();
        let fence = match &leader {
            Some(l) => Some(l.fence().ok_or_else(|| StorageError::NotLeader {
                reason: l.lost_reason(),
            })?),
            None => None,
        };
        let k = key.to_owned();
        let result = self
            .thread
            .call_blocking(what, key, move |mut client| async move {
                // etcd-client panics if `when` follows `and_then`: compare first.
                let compares = match &fence {
                    Some((leader_key, revision)) => vec![Compare::create_revision(
                        leader_key.as_bytes(),
                        CompareOp::Equal,
                        *revision,
                    )],
                    None => Vec::new(),
                };
                let txn = Txn::new().when(compares).and_then(vec![op]);
                let resp = client
                    .txn(txn)
                    .await
                    .map_err(|e| backend(what, &k, e.to_string()))?;
                if resp.succeeded() {
                    Ok(())
                } else {
                    Err(StorageError::NotLeader {
                        reason: "the leader key is no longer this coordinator's (its lease \
                             expired and another coordinator may have taken over)"
                            .into(),
                    })
                }
            });
        if let (Err(StorageError::NotLeader { reason }), Some(l)) = (&result, &leader) {
            // R§9: a coordinator that is not the leader must stop at once.
            l.lose(&format!("a fenced {what} of {key:?} was refused: {reason}"));
        }
        result
    }
}

impl ExternalStorage for EtcdStorage {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        let full = self.full_key(key)?;
        self.get_raw(&full)
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<(), StorageError> {
        let full = self.full_key(key)?;
        self.write(
            "put",
            key,
            TxnOp::put(full.as_bytes(), value.to_vec(), None),
        )
    }

    fn delete(&self, key: &str) -> Result<(), StorageError> {
        let full = self.full_key(key)?;
        self.write(
            "delete",
            key,
            TxnOp::delete(full.as_bytes(), None::<DeleteOptions>),
        )
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StorageError> {
        let full = format!("{}{prefix}", self.prefix);
        let strip = self.prefix.len();
        let k = full.clone();
        self.thread
            .call_blocking("list", prefix, move |mut client| async move {
                let resp = client
                    .get(k.as_bytes(), Some(GetOptions::new().with_prefix()))
                    .await
                    .map_err(|e| backend("list", &k, e.to_string()))?;
                let mut out = Vec::with_capacity(resp.kvs().len());
                for kv in resp.kvs() {
                    let key = kv.key_str().map_err(|e| StorageError::Corrupt {
                        key: String::from_utf8_lossy(kv.key()).into_owned(),
                        reason: format!("key is not UTF-8: {e}"),
                    })?;
                    // Keys come back with the prefix they were asked for.
                    let Some(key) = key.get(strip..) else {
                        continue;
                    };
                    out.push((key.to_owned(), kv.value().to_vec()));
                }
                // etcd returns keys sorted by their bytes, which is the order of `str`.
                Ok(out)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_endpoints_and_cluster() {
        let s = EtcdSpec::parse("etcd://127.0.0.1:2379").unwrap();
        assert_eq!(s.endpoints, vec!["127.0.0.1:2379"]);
        assert_eq!(s.cluster, DEFAULT_CLUSTER_NAME);
        assert_eq!(s.prefix(), "/ramstore/default/");
        assert_eq!(s.data_prefix(), "/ramstore/default/data/");
        assert_eq!(s.leader_key(), "/ramstore/default/leader");
        let s = EtcdSpec::parse("etcd://a:1,b.example:2/prod-1").unwrap();
        assert_eq!(s.endpoints, vec!["a:1", "b.example:2"]);
        assert_eq!(s.cluster, "prod-1");
        assert_eq!(s.to_string(), "etcd://a:1,b.example:2/prod-1");
    }

    #[test]
    fn parse_rejects_bad_specs() {
        for (bad, says) in [
            ("etcd://", "needs a port"),
            ("etcd://host", "needs a port"),
            ("etcd://host:", "not a number"),
            ("etcd://host:0", "not a number"),
            ("etcd://host:99999", "not a number"),
            ("etcd://:2379", "no valid host"),
            ("etcd://a:1,,b:2", "needs a port"),
            ("etcd://a:1/", "bad cluster name"),
            ("etcd://a:1/x/y", "bad cluster name"),
            ("file:/x", "not an etcd store"),
        ] {
            let e = EtcdSpec::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
