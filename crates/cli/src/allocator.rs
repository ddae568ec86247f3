//! How the process's allocator is tuned: glibc malloc with a fixed mmap threshold.
//!
//! Why (issue 17, measured with `scripts/bench-memory-vs-redis` and heaptrack): a
//! storage server's heap peaks at a few MB (its data lives in the seglet pool and the
//! hash table, both mapped once at start-up), yet its glibc per-thread arenas held
//! about 25 MB at 32 MiB live and 75 MB at 128 MiB live. glibc raises its mmap
//! threshold to the size of every large block freed (up to 32 MiB), so after the
//! first cleaner work list or reply buffer of a few MB, such buffers come from the
//! arenas instead of fresh mappings, and what they leave behind is never given
//! back to the kernel. Fixing the threshold at glibc's own default (128 KiB) turns
//! that dynamic adjustment off: large, short-lived buffers are mapped and unmapped
//! (a growing one is moved with mremap, without a copy), and the arenas keep only
//! small blocks. Measured on W2 at 32 MiB live: peak RSS 79.0 -> 59.3 MB, of which
//! the log and hash table are 47 MB (docs/benchmarks.md, issue 17).
//!
//! Other allocators (jemalloc, mimalloc) were not needed: with the threshold fixed
//! the memory outside the log and hash table is the binary itself and a few MB.

/// glibc's default mmap threshold, made fixed.
const MMAP_THRESHOLD_BYTES: i32 = 128 * 1024;

/// Applies the tuning; call first thing in `main`, before any thread starts.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes malloc's parameters; called before any other
    // thread exists, so no allocation races with it.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
    }
}
