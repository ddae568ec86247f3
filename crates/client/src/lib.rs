//! ramstore's client library (docs/design.md §2, R Fig. 2): tables, single-object reads,
//! writes, removes and increments, conditional operations, multi-operations and
//! enumeration, over an async [`Client`] and a blocking facade
//! ([`BlockingClient`]).
//!
//! ```no_run
//! use ramstore_client::{Client, ClientError, ClientOptions, MultiWriteOp, RejectRules};
//!
//! # async fn demo() -> Result<(), ClientError> {
//! let client = Client::connect(ClientOptions::new("127.0.0.1:11100")).await?;
//! let users = client.create_table("users", 2).await?;
//!
//! let v1 = client.write(users, b"alice", b"30").await?;
//! let (value, version) = client.read(users, b"alice").await?;
//! assert_eq!((value.as_slice(), version), (&b"30"[..], v1));
//!
//! // Compare-and-swap: only if nobody wrote "alice" since we read it.
//! match client
//!     .write_with_rules(users, b"alice", b"31", &RejectRules::version_must_equal(version))
//!     .await
//! {
//!     Ok(_) | Err(ClientError::WrongVersion { .. }) => {}
//!     Err(e) => return Err(e),
//! }
//!
//! // Many objects at once: grouped by master, masters asked in parallel.
//! let ops = [MultiWriteOp::new(users, b"bob", b"25"), MultiWriteOp::new(users, b"carol", b"41")];
//! for result in client.multi_write(&ops).await {
//!     result?;
//! }
//!
//! // Every object of the table, as a stream.
//! let mut objects = client.enumerate(users);
//! while let Some(object) = objects.next().await {
//!     let object = object?;
//!     println!("{:?} = {:?}", object.key, object.value);
//! }
//! # Ok(()) }
//! ```
//!
//! # Routing
//!
//! The client caches the coordinator's tablet map (table id + key-hash range →
//! master) and sends each request straight to the owning master: with a warm map a
//! single-object operation is one RPC. The key hash is xxh3-64 of the key
//! ([`key_hash`]), the same as the masters'. The map is refreshed when a master says
//! it does not own a key (UNKNOWN_TABLET) or cannot be reached; concurrent refreshes
//! are coalesced into one GetTabletMap, and the cached map never goes back to an
//! older version.
//!
//! # Retries and deadlines (R§11.4)
//!
//! Errors are only the outcomes a caller must handle ([`ClientError`]). Everything
//! else is retried inside, with exponential backoff and jitter, until
//! [`ClientOptions::operation_deadline`] (30 s by default): RETRY (after the delay
//! the server asked for), UNKNOWN_TABLET (after refreshing the map), SERVER_NOT_UP
//! and transport errors (after refreshing the map, with backoff). NO_SPACE (a
//! master's log is full until its cleaner runs, L§7) is retried only for
//! [`ClientOptions::no_space_patience`] (3 s by default) from the first one; then
//! the operation fails with [`ClientError::NoSpace`], which names the full server. Each attempt may take at most
//! [`ClientOptions::rpc_deadline`] (2 s). When the operation deadline passes the
//! result is [`ClientError::DeadlineExceeded`], whose message says what was tried
//! last and why it failed.
//!
//! # Time and randomness
//!
//! Every deadline, backoff sleep and round-trip time is measured on
//! [`ClientOptions::clock`], and backoff jitter and ping nonces are drawn from
//! [`ClientOptions::rng`] (`ramstore_clock`; the system's by default), so a client
//! runs unchanged on a simulated clock. An operation borrows both (no reference
//! count per operation); [`Client::connect`] gives its transport the same clock.
//!
//! # Counters
//!
//! [`Client::increment_i64`] and [`Client::increment_f64`] store decimal text, the
//! form Redis's INCR and INCRBYFLOAT use ([`counter`]): a counter is an ordinary
//! value (`read` gives `b"42"`), and the Redis commands and native increments work
//! on the same keys.
//!
//! # Delivery: exactly-once
//!
//! A retried request may have been executed by the server already (its response
//! was lost, or it timed out just after taking effect). Writes, removes and
//! increments — and each object's op of a multi-write or multi-remove — are
//! therefore sent as exactly-once RPCs (RIFL, Lee et al. SOSP'15;
//! [`ClientOptions::exactly_once`], on by default): the client opens a lease at
//! the coordinator at its first mutation, numbers every mutating RPC and keeps the
//! number across that operation's retries; the master writes a completion record
//! into its log with the effect, and a retry gets the first answer instead of
//! executing again — across master crashes and recovery too. A retry that
//! outlives the client's lease (the client was cut off for a whole lease term,
//! 30 s) fails with [`ClientError::StaleRpc`]: its outcome can no longer be told,
//! but it is never applied twice.
//!
//! With `exactly_once` off, retries are **at-least-once**: an increment may be
//! applied twice, a
//! conditional write may fail with [`ClientError::WrongVersion`] because its own
//! first attempt succeeded, and a retried remove may report `None`.
//!
//! Server-to-server calls are not here: the typed calls to backups
//! (`BackupClient`) live in `ramstore-backup`, beside the store they reach.
//!
//! # Threads
//!
//! [`Client`] is `Send + Sync` and cheap to clone; share it freely across tasks.
//! [`BlockingClient`] owns a small runtime and must not be used from inside an
//! async runtime.

#[cfg(not(madsim))]
mod blocking;
mod client;
mod enumerate;
mod error;
mod migration;
mod multi;
mod options;
mod retry;
mod tablet_map;

#[cfg(not(madsim))]
pub use blocking::{
    BlockingClient, BlockingEnumeration, BlockingTransaction, BLOCKING_RUNTIME_THREADS,
};
pub use client::{Client, PingReply, Transaction};
pub use enumerate::{EnumeratedObject, Enumeration, ENUMERATE_BATCH_BYTES};
pub use error::ClientError;
pub use migration::MigrationInfo;
pub use multi::{MultiRemoveOp, MultiWriteOp};
pub use options::{
    ClientOptions, DEFAULT_EXACTLY_ONCE, DEFAULT_NO_SPACE_PATIENCE_MS,
    DEFAULT_OPERATION_DEADLINE_MS, DEFAULT_REPLY_POLL_US, DEFAULT_RPC_DEADLINE_MS,
};
/// How counters are stored (decimal text, as Redis stores them): to read a counter
/// written by `increment_i64` or Redis's INCR, `counter::parse_i64(&value)`.
pub use ramstore_wire::counter;
/// Server ids (a stable index and an incarnation in one `u64`), e.g. to show a
/// [`TabletInfo::server_id`] as `ramstore status` does: `server_id::Show(id)`.
pub use ramstore_wire::server_id;
/// Reject rules (conditional operations, R§3 Fig. 2) and the key hash that places a
/// key in a tablet: defined once in `ramstore-wire`, shared with the masters.
pub use ramstore_wire::{key_hash, MigrationMode, RejectRules};
/// Key expiry: what a write does to an expiry time, and EXPIRE's conditions.
pub use ramstore_wire::{ExpireCondition, ExpiryChange};
pub use retry::{BACKOFF_INITIAL_MS, BACKOFF_MAX_MS, RETRY_DELAY_MAX_MS};
pub use tablet_map::TabletInfo;
