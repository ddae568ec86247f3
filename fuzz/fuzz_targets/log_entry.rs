//! Fuzz target: every log entry parser, as recovery walks a segment.
//! The check and what it asserts: `ramstore_fuzzing::log_entry`.
//!
//! Run with `cargo +nightly fuzz run log_entry` from the repository root.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ramstore_fuzzing::log_entry::check(data));
