//! The object store of one ramstore master: tablets and RAMCloud's object operations
//! (read, write, delete, conditional write by reject rules, increment, multi-ops,
//! enumeration) over the log-structured memory of `ramstore-log` and the hash table
//! of `ramstore-index` (R§3–4, L§3–7).
//!
//! Invariants:
//! - Versions of a (table, key) only grow, also across delete and re-create: a new
//!   object starts at the master's safe version, which every delete raises above
//!   the deleted version (R§3.1).
//! - The hash table refers to at most one object per (table, key), and only to a
//!   complete, checksummed entry.
//! - A full log refuses writes with `NoSpace` (retryable) and never loses an object;
//!   deletes keep working after writes are refused (the delete reserve).
//! - A tablet's state ([`tablets::TabletState`]) says who may use it: clients a
//!   normal one; replay a recovering one; only a migration's pulls one migrating
//!   out; clients a migrating-in one only through the migration's gate
//!   ([`migration`], K§2.3), so a key whose record may still be on the source is
//!   never answered from the target. Checking the state is one atomic load.
//!
//! Thread-safety: `ObjectStore` is `Send + Sync`; reads take no lock; writes serialise
//! per hash bucket and on the log head; the cleaner runs on its own thread(s).
//!
//! Time: the cleaner threads pace themselves on [`StoreConfig::clock`] (asking the
//! balancer every [`CLEANER_POLL_INTERVAL_MS`] or [`CLEANER_IDLE_INTERVAL_MS`], woken
//! sooner by writers), which is also the log's clock and the storage server's.
//!
//! Durability: writes are reported to the configured replica sink before they return;
//! with the default sink nothing is replicated (DRAM only).

mod cleaner_thread;
pub mod config;
pub mod deadlines;
pub mod error;
pub mod expiry;
pub mod hashed_key;
pub mod migration;
pub mod object_store;
pub mod rifl;
pub mod tablets;
pub mod tx;

pub use cleaner_thread::{CLEANER_IDLE_INTERVAL_MS, CLEANER_POLL_INTERVAL_MS};
pub use config::{CleanerMode, ConfigError, StoreConfig};
pub use error::{ReadError, WriteError};
pub use expiry::Expiry;
pub use hashed_key::HashedKey;
pub use object_store::{
    EnumeratedObject, ExpireCondition, ExpireTick, LogHandle, MultiWrite, ObjectStore, OnceUpdate,
    StoreResident, StoreStats, EXPIRE_BUCKETS_PER_TICK, EXPIRE_SAMPLE_PER_TICK,
};
/// Reject rules and the key hash are defined once in `ramstore-wire`, the crate the
/// client, the master and the checker all share.
pub use ramstore_wire::{key_hash, Refusal, RejectRules};
pub use rifl::{MovedRecord, RpcOutcome, UnackedRpcResults};
pub use tablets::{Tablet, TabletMap};
pub use tx::{decision_of, Transactions, TxId, Undecided};
