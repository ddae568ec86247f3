//! Fuzz target: the wire request and response decoders.
//! The check and what it asserts: `ramstore_fuzzing::wire_frame`.
//!
//! Run with `cargo +nightly fuzz run wire_frame` from the repository root.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ramstore_fuzzing::wire_frame::check(data));
