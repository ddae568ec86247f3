//! A counting global allocator for the tests that prove a path allocates nothing
//! (R§11.3: no allocation on the read path; docs/design.md §8). A test binary
//! installs it and brackets the code under test:
//!
//! ```no_run
//! use ramstore_harness::counting_alloc::{start_counting, stop_counting, Counting};
//!
//! #[global_allocator]
//! static GLOBAL: Counting = Counting;
//!
//! start_counting();
//! // ... the code that must not allocate ...
//! assert_eq!(stop_counting(), 0);
//! ```
//!
//! Counting is per thread, so tests running in parallel do not count each other's
//! allocations; deallocations are not counted (freeing is not the cost watched).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The allocator: the system allocator, counting allocations and reallocations
/// made on a thread between [`start_counting`] and [`stop_counting`].
pub struct Counting;

// Const-initialised cells without destructors are safe to touch from the allocator
// (no lazy initialisation that could itself allocate or recurse).
thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count_one() {
    if COUNTING.with(Cell::get) {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
    }
}

/// Starts counting this thread's allocations from zero.
pub fn start_counting() {
    ALLOCATIONS.with(|a| a.set(0));
    COUNTING.with(|c| c.set(true));
}

/// Stops counting and returns the allocations this thread made since
/// [`start_counting`].
pub fn stop_counting() -> usize {
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        System.realloc(ptr, layout, new_size)
    }
}
