//! ramstore's deterministic cluster simulator (docs/design.md §7, issue 19).
//!
//! Job: run a whole cluster — coordinator, storage servers (master + backup) and
//! clients — in one process on simulated time, a simulated network and simulated
//! disks, driven by one seed; inject faults (crashes and restarts, partitions,
//! message loss and delay, slow and full disks, coordinator failover); check the recorded
//! history with `ramstore_checker` (with `--migrations`, also that every live
//! tablet migration ends done or rolled back, under faults aimed at its source,
//! target and coordinator, K§2.3.4); and print a hash of the ordered event trace,
//! so a failing seed is a one-line reproduction:
//! `cargo run --release -p ramstore-sim -- --servers N --seed S --sim-seconds T`.
//!
//! How it stays deterministic (docs/design-notes.md, "Determinism rules for
//! simulated code"):
//! - One thread: a tokio current-thread runtime with paused time; its clock moves
//!   only when every task is idle, to the next timer ([`SimClock`]).
//! - No OS threads: the servers' blocking work runs inline
//!   (`ramstore_server::Blocking::Inline`), the log cleaner is manual (never run:
//!   memory is sized so it is not needed), and nothing waits on the clock with
//!   `block_until` ([`SimClock`] panics if something does).
//! - Every random choice comes from `SeededRng`s derived from the seed; the binary
//!   also overrides `getrandom`/`getentropy` (std's `HashMap` keys, tokio's
//!   `select!`) with a seeded stream, so iteration orders repeat. That override is
//!   process-wide, so each seed runs in a process of its own.
//!
//! Invariants: the same seed, server count, duration and options give the same
//! trace hash and the same last line; the fault schedule never disrupts more
//! than R − 1 hosts at once (migration faults included), so no acknowledged
//! write may be lost by design.
//!
//! Thread-safety: everything runs on the one runtime thread; types are `Send +
//! Sync` only because tokio's `spawn` asks for it.

pub mod clock;
pub mod cluster;
pub mod cost;
pub mod disk;
pub mod experiment;
pub mod hops;
pub mod migrate;
pub mod net;
pub mod run;
pub mod scaling;
pub mod spread;
pub mod topology;
pub mod topology_experiments;
pub mod topology_file;
pub mod trace;
pub mod workload;

pub use clock::SimClock;
pub use run::{run, SimConfig, SimError, Summary};
