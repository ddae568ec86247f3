//! The server's fast path does not allocate: a read request decoded, served from
//! the log and encoded into a reused output buffer performs zero heap allocations
//! (R§11.3, docs/design.md §8). Measured with a counting global allocator.

use ramstore_harness::counting_alloc::{start_counting, stop_counting, Counting};
use ramstore_master::{CleanerMode, ObjectStore, StoreConfig};
use ramstore_rpc::{Handled, Service};
use ramstore_server::StorageService;
use ramstore_wire::{decode_response, encode_request, RejectRules, Request, Response};

// The counting allocator is shared with the other `no_alloc` tests
// (`ramstore_harness::counting_alloc`); each test binary installs its own.
#[global_allocator]
static GLOBAL: Counting = Counting;

fn request(req: &Request<'_>) -> Vec<u8> {
    let mut frame = Vec::new();
    encode_request(7, req, &mut frame).unwrap();
    frame
}

/// Runs `frame` through the service `n` times and returns the allocations made.
fn allocations_for(service: &StorageService, frame: &[u8], out: &mut Vec<u8>, n: usize) -> usize {
    start_counting();
    for _ in 0..n {
        out.clear();
        let handled = service.handle(frame, out);
        debug_assert_eq!(handled, Handled::Done);
    }
    stop_counting()
}

#[test]
fn read_fast_path_makes_no_heap_allocation() {
    let mut config = StoreConfig::new(64 << 20);
    // No cleaner thread: nothing else allocates while we count.
    config.cleaner = CleanerMode::Manual;
    let store = ObjectStore::new(config).unwrap();
    store.add_tablet(1, 0, u64::MAX).unwrap();
    let service = StorageService::new(store);
    let rules = RejectRules::default();
    let value = vec![42u8; 100];
    let write = request(&Request::Write {
        table_id: 1,
        rules,
        key: b"key",
        value: &value,
        rpc_id: None,
    });
    let read = request(&Request::Read {
        table_id: 1,
        rules,
        key: b"key",
    });
    let mut out = Vec::with_capacity(64 * 1024);
    // Warm up: first-use costs (thread-local state, the write itself) are not the
    // per-request path.
    assert_eq!(service.handle(&write, &mut out), Handled::Done);
    out.clear();
    assert_eq!(service.handle(&read, &mut out), Handled::Done);
    let (_, response) = decode_response(&out).unwrap();
    assert_eq!(
        response,
        Response::Read {
            version: 1,
            value: &value
        }
    );

    assert_eq!(
        allocations_for(&service, &read, &mut out, 1000),
        0,
        "reads allocated"
    );
    let (_, response) = decode_response(&out).unwrap();
    assert!(matches!(response, Response::Read { .. }));

    // A miss and a ping are on the fast path too.
    let miss = request(&Request::Read {
        table_id: 1,
        rules,
        key: b"absent",
    });
    assert_eq!(
        allocations_for(&service, &miss, &mut out, 100),
        0,
        "misses allocated"
    );
    let ping = request(&Request::Ping {
        nonce: 9,
        caller_id: 0,
    });
    assert_eq!(
        allocations_for(&service, &ping, &mut out, 100),
        0,
        "pings allocated"
    );
}

#[test]
fn write_steady_state_makes_no_heap_allocation() {
    let mut config = StoreConfig::new(64 << 20);
    config.cleaner = CleanerMode::Manual;
    let store = ObjectStore::new(config).unwrap();
    store.add_tablet(1, 0, u64::MAX).unwrap();
    let service = StorageService::new(store);
    let rules = RejectRules::default();
    let value = vec![1u8; 100];
    let write = request(&Request::Write {
        table_id: 1,
        rules,
        key: b"k",
        value: &value,
        rpc_id: None,
    });
    let mut out = Vec::with_capacity(64 * 1024);
    out.clear();
    assert_eq!(service.handle(&write, &mut out), Handled::Done);
    // 200 overwrites of 100 B stay inside the head segment (no head rollover, which
    // allocates its digest once per 8 MiB segment).
    assert_eq!(
        allocations_for(&service, &write, &mut out, 200),
        0,
        "writes allocated"
    );
}

#[test]
fn counter_sees_allocations() {
    start_counting();
    let boxed = std::hint::black_box(Box::new([0u8; 64]));
    let counted = stop_counting();
    drop(boxed);
    assert!(counted >= 1, "the counting allocator counts");
}

/// The Redis front end's direct read (`read_local`) allocates nothing either: the
/// value goes from the log into the caller's reused buffer.
#[test]
fn read_local_makes_no_heap_allocation() {
    use ramstore_resp::backend::{Direct, DirectAnswer};

    let mut config = StoreConfig::new(64 << 20);
    config.cleaner = CleanerMode::Manual;
    let store = ObjectStore::new(config).unwrap();
    store.add_tablet(1, 0, u64::MAX).unwrap();
    let service = StorageService::new(store);
    let value = vec![42u8; 100];
    service
        .store()
        .write(1, b"key", &value, &Default::default())
        .unwrap();
    let mut buf = Vec::with_capacity(1024);
    // Warm up (thread-local state).
    assert!(matches!(
        service.read_local(1, b"key", &mut buf),
        DirectAnswer::Now(Direct::Done(Some(1)))
    ));
    start_counting();
    for _ in 0..1000 {
        buf.clear();
        let found = matches!(
            service.read_local(1, b"key", &mut buf),
            DirectAnswer::Now(Direct::Done(Some(1)))
        );
        let missed = matches!(
            service.read_local(1, b"missing", &mut buf),
            DirectAnswer::Now(Direct::Done(None))
        );
        debug_assert!(found && missed);
    }
    assert_eq!(stop_counting(), 0, "direct reads allocated");
    assert_eq!(buf, value);
}
