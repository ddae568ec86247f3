//! The checks behind ramstore's fuzz targets (issue 6), one function per target.
//!
//! Each function takes arbitrary bytes and exercises one parser or handler that
//! faces untrusted input: log entries (replayed from backups in recovery), wire
//! frames (from any TCP peer), backup frame files (read back after a restart), and
//! the storage server's RPC handlers. A function panics only when the code under
//! test breaks one of its promises — it must never panic on bad input, and what it
//! accepts must round-trip — so a panic is a bug.
//!
//! The cargo-fuzz targets in `fuzz/` (their own workspace, nightly + libFuzzer) are
//! one-line wrappers around these functions; `tests/corpus.rs` feeds every file of
//! the saved corpus (`fuzz/corpus/<target>/`) and every named regression input
//! (`fuzz/regressions/<target>/`) to the same functions in an ordinary `cargo
//! test`, so CI replays them on stable Rust.
//!
//! Checksums stop a fuzzer cold: random bytes almost never carry a valid crc32c,
//! so the code behind the checksum check would go unexplored. Every check that
//! meets a checksum therefore runs twice: on the input as it is, and on a copy
//! whose checksums were recomputed ("fixed up"), which reaches the field checks
//! behind them.
//!
//! Thread-safety: every function may be called from any thread; `rpc_request`
//! shares one in-process storage server between calls (state carries over, as it
//! does on a real server).

pub mod backup_frames;
pub mod log_entry;
pub mod rpc_request;
pub mod wire_frame;

/// A fuzz target's check: panics only on a bug.
pub type Check = fn(&[u8]);

/// The fuzz targets, by the name of their corpus directory.
pub const TARGETS: [(&str, Check); 4] = [
    ("log_entry", log_entry::check),
    ("wire_frame", wire_frame::check),
    ("backup_frames", backup_frames::check),
    ("rpc_request", rpc_request::check),
];
