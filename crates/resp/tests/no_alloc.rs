//! Parsing a command allocates nothing: GET and SET (with options) become typed
//! commands that borrow the frame, so the typed command layer adds no allocation
//! to the hot path (the rest of a GET, from the log into the reused value buffer,
//! is checked by `ramstore-server`'s `no_alloc` test). Measured with a counting
//! global allocator.

use ramstore_harness::counting_alloc::{start_counting, stop_counting, Counting};
use ramstore_resp::cmd::{lookup, parse, Command};

// The counting allocator is shared with the other `no_alloc` tests
// (`ramstore_harness::counting_alloc`); each test binary installs its own.
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
