//! Fuzz target: the storage server's RPC handlers, fed decoded garbage.
//! The check and what it asserts: `ramstore_fuzzing::rpc_request`.
//!
//! Run with `cargo +nightly fuzz run rpc_request` from the repository root.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ramstore_fuzzing::rpc_request::check(data));
