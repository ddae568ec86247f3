//! The part of `ramstore-bench` other crates use: YCSB's scrambled Zipfian key
//! chooser ([`zipfian`]), shared with `ramstore bench` in the CLI so that the
//! two workload clients draw keys from one implementation. The scenarios
//! themselves are the `ramstore-bench` binary's (`main.rs`).
//!
//! Invariants and thread-safety: see [`zipfian`] (immutable after
//! construction, `Send + Sync`).

pub mod zipfian;
