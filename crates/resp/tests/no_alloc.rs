//! Parsing a command allocates nothing: GET and SET (with options) become typed
//! commands that borrow the frame, so the typed command layer adds no allocation
//! to the hot path (the rest of a GET, from the log into the reused value buffer,
//! is checked by `ramstore-server`'s `no_alloc` test). Measured with a counting
//! global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ramstore_resp::cmd::{lookup, parse, Command};

struct Counting;

// Per thread, so tests running in parallel do not count each other's allocations.
// Const-initialised cells without destructors are safe to touch from the allocator.
thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count_one() {
    if COUNTING.with(Cell::get) {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
    }
}

fn start_counting() {
    ALLOCATIONS.with(|a| a.set(0));
    COUNTING.with(|c| c.set(true));
}

fn stop_counting() -> usize {
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

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn parse_get_and_set_make_no_heap_allocation() {
    let get: [&[u8]; 2] = [b"GET", b"key:000042"];
    let set: [&[u8]; 3] = [b"SET", b"key:000042", &[7u8; 100]];
    let set_nx_get: [&[u8]; 5] = [b"set", b"key", b"value", b"NX", b"get"];
    let incrby: [&[u8]; 3] = [b"INCRBY", b"counter", b"-12"];
    start_counting();
    let mut parsed = 0;
    for _ in 0..1000 {
        for frame in [&get[..], &set, &set_nx_get, &incrby] {
            let spec = lookup(frame).map(|s| s.name);
            if let (Ok(_), Ok(command)) = (spec, parse(frame)) {
                parsed += usize::from(!matches!(command, Command::Quit));
            }
        }
    }
    let allocations = stop_counting();
    assert_eq!(parsed, 4000, "every frame parses");
    assert_eq!(allocations, 0, "parsing allocated");
}

#[test]
fn counting_allocator_counts() {
    start_counting();
    let boxed = Box::new(7u64);
    let counted = stop_counting();
    drop(boxed);
    assert!(counted >= 1, "the counting allocator counts");
}
