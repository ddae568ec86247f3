//! The end-to-end tests' fixtures: the local clusters of the test-support crate
//! (`ramstore_harness::local`), plus the path of the `ramstore` binary cargo built
//! for these tests (for tests that run it by hand).

#![allow(dead_code, unused_imports)]

pub use ramstore_harness::local::*;
pub use ramstore_harness::process::Proc;

/// The `ramstore` binary cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_ramstore");
