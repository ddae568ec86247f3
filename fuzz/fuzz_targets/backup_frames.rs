//! Fuzz target: a backup's frames file read back after a restart.
//! The check and what it asserts: `ramstore_fuzzing::backup_frames`.
//!
//! Run with `cargo +nightly fuzz run backup_frames` from the repository root.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ramstore_fuzzing::backup_frames::check(data));
