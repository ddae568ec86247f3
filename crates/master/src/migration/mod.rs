//! Live tablet migration (Rocksteady, K§2.3; design notes "Migration
//! (Rocksteady)"): the master's side of both ends.
//!
//! * Source (`source.rs`): [`ObjectStore::prepare_migration`] fences the tablet
//!   (`MigratingOut`: clients get UNKNOWN_TABLET) and answers the safe version;
//!   [`ObjectStore::pull`] and [`ObjectStore::pull_key`] read the fenced tablet
//!   for the target.
//! * Target (`target.rs`): [`ObjectStore::add_migrating_tablet`] owns the tablet
//!   at once (`MigratingIn`), [`IncomingMigration`] is the gate client operations
//!   pass and applies pulled records ("newest version wins, settled stays
//!   settled") into per-partition side logs (`ramstore_log::SideLog`: not the
//!   head, so client writes never wait for their replication), committed to the
//!   log before the migration is reported done;
//!   [`ObjectStore::finish_migrating_tablet`] makes the tablet normal.
//! * [`Arrivals`] (`arrivals.rs`): which keys have arrived, as plain data;
//!   `settled.rs`: a copy of which keys are settled that client operations
//!   and the apply read without the arrivals mutex.
//! * Lineage (`lineage.rs`, K§2.3.4): when the source or the target crashes
//!   mid-migration, crash recovery refills the source's fenced copy
//!   ([`ObjectStore::reclaim_fenced_tablet`]) or fences a recovered copy as the
//!   new source ([`ObjectStore::prepare_migration`] of a recovering tablet).
//!
//! Invariants: versions stay monotonic across the move (the target issues only
//! versions above the source's safe version); a key settled on the target is
//! never overwritten by a pulled record; a migrating-in tablet's operations never
//! answer from a key whose record may still be on the source.
//!
//! Thread-safety: [`IncomingMigration`] is `Send + Sync`; its arrivals are behind
//! one mutex, taken only for operations on a migrating-in tablet (never on the
//! read path of a normal tablet) whose key is not known settled, and never
//! while pulled records are replayed (the background apply runs at low
//! priority and must not hold client operations up). Lock order: that mutex,
//! then a bucket lock, then the settled copy's lock or a side log's mutex.

mod arrivals;
mod lineage;
mod settled;
mod source;
mod target;

pub use arrivals::{partitions, Arrivals, Partition};
pub use target::{ClientOp, Gate, IncomingMigration, PulledObject, APPLY_BATCH};

#[allow(unused_imports)]
use crate::ObjectStore;
