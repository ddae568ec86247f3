//! Exactly-once RPCs on the master (RIFL, Lee et al. SOSP'15 §4; R§10.3):
//! completion records written with the object they describe, the table of the
//! records kept ([`UnackedRpcResults`]), what a record saves ([`RpcOutcome`]),
//! and the bounded memory of expired leases (`expired`).
//! The write paths that use them are in `object_store::exactly_once`.

pub mod expired;
pub mod outcome;
pub mod unacked;

pub use expired::{DEFAULT_EXPIRED_PER_SHARD, MAX_UNVERIFIED};
pub use outcome::{RpcOutcome, MAX_OUTCOME_BYTES};
pub use unacked::{Check, MovedRecord, UnackedRpcResults};
