//! A storage server's side of failure detection (R§7.2, R§7.11): it tells a caller
//! it lists as crashed that it is not UP, becomes a zombie (refusing object
//! operations, calling its hook once) when a server list names it crashed, and pings
//! a suspect for the coordinator (`PingServer`) — a wrong address is a failed path,
//! not a crash.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ramstore_master::{CleanerMode, ObjectStore, StoreConfig};
use ramstore_rpc::{Handled, LocalTransport, Service};
use ramstore_server::failure_monitor::{self, MonitorConfig, NOT_UP_MESSAGE};
use ramstore_server::{StorageService, ZombieHook};
use ramstore_wire::{
    decode_response, encode_request, ErrorBody, RejectRules, Request, Response, ServerListEntry,
    ServerListUpdateEncoder, ServerStatus, Services, Status,
};

fn service(id: u64) -> Arc<StorageService> {
    let mut config = StoreConfig::new(16 << 20);
    config.cleaner = CleanerMode::Manual;
    let s = StorageService::new(ObjectStore::new(config).expect("object store"));
    s.set_server_id(id);
    Arc::new(s)
}

fn entry(server_id: u64, status: ServerStatus) -> ServerListEntry<'static> {
    ServerListEntry {
        server_id,
        status,
        services: Services {
            master: true,
            backup: false,
            replicated_log: false,
        },
        backup_read_mbps: 0,
        address: "host:1",
        failure_domain: "",
    }
}

fn push(service: &StorageService, version: u64, servers: &[ServerListEntry<'_>]) {
    let mut frame = Vec::new();
    let mut enc = ServerListUpdateEncoder::new(1, version, &mut frame);
    for s in servers {
        enc.push(s).expect("push");
    }
    enc.finish().expect("finish");
    let mut out = Vec::new();
    assert_eq!(service.handle(&frame, &mut out), Handled::Done);
    assert_eq!(
        decode_response(&out).expect("response").0.status,
        Status::Ok
    );
}

/// Sends `req` to `service` (slow requests too) and returns the response frame.
async fn call(service: &Arc<StorageService>, req: &Request<'_>) -> Vec<u8> {
    let mut frame = Vec::new();
    encode_request(9, req, &mut frame).expect("encodes");
    let mut out = Vec::new();
    match service.handle(&frame, &mut out) {
        Handled::Done => out,
        Handled::Slow => service.clone().handle_slow(frame).await,
        Handled::Deferred(answer) => answer.await,
    }
}

fn answer(frame: &[u8]) -> (Status, Response<'_>) {
    let (header, response) = decode_response(frame).expect("response decodes");
    (header.status, response)
}

fn not_up() -> Response<'static> {
    Response::Error(ErrorBody::Message {
        status: Status::ServerNotUp,
        message: NOT_UP_MESSAGE,
    })
}

#[tokio::test]
async fn ping_from_caller_listed_crashed_or_removed_is_answered_not_up() {
    let s = service(1);
    push(
        &s,
        4,
        &[
            entry(1, ServerStatus::Up),
            entry(2, ServerStatus::Crashed),
            entry(3, ServerStatus::Removed),
            entry(4, ServerStatus::Up),
        ],
    );
    for caller_id in [2, 3] {
        let out = call(
            &s,
            &Request::Ping {
                nonce: 5,
                caller_id,
            },
        )
        .await;
        assert_eq!(answer(&out), (Status::ServerNotUp, not_up()), "{caller_id}");
    }
    // UP, a client or the coordinator (0), and one not listed yet (just enlisted).
    for caller_id in [4, 0, 99] {
        let out = call(
            &s,
            &Request::Ping {
                nonce: 5,
                caller_id,
            },
        )
        .await;
        let ok = Response::Ping {
            nonce: 5,
            server_id: 1,
        };
        assert_eq!(answer(&out), (Status::Ok, ok), "{caller_id}");
    }
    // SuspectServer is the coordinator's.
    let report = Request::SuspectServer {
        caller_id: 4,
        server_id: 2,
    };
    assert_eq!(answer(&call(&s, &report).await).0, Status::InvalidRequest);
    assert!(!s.is_zombie());
}

#[tokio::test]
async fn server_list_naming_itself_crashed_makes_a_zombie_that_refuses_reads() {
    let s = service(5);
    let hook_calls = Arc::new(AtomicU64::new(0));
    let counted = hook_calls.clone();
    s.set_zombie_hook(ZombieHook::new(move || {
        counted.fetch_add(1, Ordering::SeqCst);
    }));
    s.store().add_tablet(1, 0, u64::MAX).expect("tablet");
    s.store()
        .write(1, b"k", b"v", &Default::default())
        .expect("write");
    let read = Request::Read {
        table_id: 1,
        rules: RejectRules::default(),
        key: b"k",
    };
    assert_eq!(answer(&call(&s, &read).await).0, Status::Ok);

    // Another server's crash changes nothing here.
    push(
        &s,
        2,
        &[entry(5, ServerStatus::Up), entry(6, ServerStatus::Crashed)],
    );
    assert!(!s.is_zombie());
    assert_eq!(answer(&call(&s, &read).await).0, Status::Ok);

    push(
        &s,
        3,
        &[
            entry(5, ServerStatus::Crashed),
            entry(6, ServerStatus::Crashed),
        ],
    );
    assert!(s.is_zombie());
    assert_eq!(hook_calls.load(Ordering::SeqCst), 1);
    assert_eq!(answer(&call(&s, &read).await).0, Status::ServerNotUp);
    let write = Request::Write {
        table_id: 1,
        rules: RejectRules::default(),
        key: b"k",
        value: b"w",
        rpc_id: None,
    };
    assert_eq!(answer(&call(&s, &write).await).0, Status::ServerNotUp);
    // Pings are still answered; the hook runs once however often it is told.
    let ping = Request::Ping {
        nonce: 1,
        caller_id: 0,
    };
    assert_eq!(answer(&call(&s, &ping).await).0, Status::Ok);
    push(&s, 4, &[entry(5, ServerStatus::Removed)]);
    assert_eq!(hook_calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn ping_server_reports_whether_the_suspect_answered() {
    let transport = LocalTransport::new();
    let helper = service(6);
    let suspect = service(7);
    transport.register("suspect", suspect.clone());
    let config = MonitorConfig {
        ping_interval_ms: 50,
        ping_timeout_ms: 200,
    };
    // No coordinator at "nowhere": the helper's own rounds fail quietly.
    let monitor = failure_monitor::start(
        helper.clone(),
        Arc::new(transport.clone()),
        "nowhere".into(),
        config,
        None,
    );
    let ping_server = |server_id, address| Request::PingServer { server_id, address };
    let answered = |b| (Status::Ok, Response::PingServer { answered: b });
    let out = call(&helper, &ping_server(7, "suspect")).await;
    assert_eq!(answer(&out), answered(true));
    // A glitch on this path (a wrong address) or another server at the address:
    // not answered — the coordinator's other paths decide.
    let out = call(&helper, &ping_server(7, "wrong")).await;
    assert_eq!(answer(&out), answered(false));
    let out = call(&helper, &ping_server(8, "suspect")).await;
    assert_eq!(answer(&out), answered(false));
    assert!(!helper.is_zombie());

    // The suspect lists the helper as crashed: the helper learns it is a zombie.
    push(
        &suspect,
        2,
        &[entry(6, ServerStatus::Crashed), entry(7, ServerStatus::Up)],
    );
    let out = call(&helper, &ping_server(7, "suspect")).await;
    assert_eq!(answer(&out), answered(false));
    assert!(helper.is_zombie());
    monitor.abort();
}

/// A coordinator that answers `RenewLease` with `lease_ms` (0: none), or
/// SERVER_NOT_UP once `not_up` is set, and acknowledges pings.
#[derive(Default)]
struct LeaseCoordinator {
    lease_ms: std::sync::atomic::AtomicU32,
    not_up: std::sync::atomic::AtomicBool,
    renewals: AtomicU64,
}

impl Service for LeaseCoordinator {
    fn handle(&self, frame: &[u8], out: &mut Vec<u8>) -> Handled {
        let Ok((header, req)) = ramstore_wire::decode_request(frame) else {
            return Handled::Done;
        };
        let response = match req {
            Request::RenewLease { .. } => {
                self.renewals.fetch_add(1, Ordering::SeqCst);
                if self.not_up.load(Ordering::SeqCst) {
                    not_up()
                } else {
                    Response::RenewLease {
                        lease_ms: self.lease_ms.load(Ordering::SeqCst),
                    }
                }
            }
            Request::Ping { nonce, .. } => Response::Ping {
                nonce,
                server_id: 0,
            },
            _ => Response::Error(ErrorBody::Message {
                status: Status::InvalidRequest,
                message: "fake coordinator",
            }),
        };
        let _ = ramstore_wire::encode_response(header.request_id, req.opcode(), &response, out);
        Handled::Done
    }

    fn handle_slow(self: Arc<Self>, _frame: Vec<u8>) -> ramstore_rpc::server::SlowFuture {
        // `handle` never answers Slow.
        Box::pin(async { Vec::new() })
    }
}

/// Polls `cond` every 5 ms until it holds; fails after 30 s (timing is not what is
/// tested).
async fn eventually(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let start = std::time::Instant::now();
    while !cond().await {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// The membership lease (design notes "Membership leases"): a monitored server
/// answers object operations RETRY until the coordinator grants it a lease, serves
/// while it holds one, answers RETRY again once grants stop and it runs out, and
/// becomes a zombie when its renewal is answered SERVER_NOT_UP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_gates_object_operations_until_granted_and_after_it_runs_out() {
    let transport = LocalTransport::new();
    let coordinator = Arc::new(LeaseCoordinator::default());
    transport.register("coordinator", coordinator.clone());
    let server = service(5);
    let read = Request::Read {
        table_id: 1,
        rules: RejectRules::default(),
        key: b"k",
    };
    let status = |s: Arc<StorageService>| async move { answer(&call(&s, &read).await).0 };
    // Not monitored (an in-process test server): never waits.
    assert_ne!(status(server.clone()).await, Status::Retry);

    let config = MonitorConfig {
        ping_interval_ms: 20,
        ping_timeout_ms: 200,
    };
    let monitor = failure_monitor::start(
        server.clone(),
        Arc::new(transport.clone()),
        "coordinator".into(),
        config,
        None,
    );
    // Monitored, no lease granted yet: RETRY, however long it asks.
    eventually("renewals", async || {
        coordinator.renewals.load(Ordering::SeqCst) >= 3
    })
    .await;
    assert_eq!(status(server.clone()).await, Status::Retry);

    coordinator.lease_ms.store(300, Ordering::SeqCst);
    eventually("a lease", async || {
        status(server.clone()).await != Status::Retry
    })
    .await;

    // Grants stop (the coordinator no longer hears it): the lease runs out.
    coordinator.lease_ms.store(0, Ordering::SeqCst);
    eventually("the lease to run out", async || {
        status(server.clone()).await == Status::Retry
    })
    .await;
    assert!(!server.is_zombie());

    // Declared crashed: the renewal tells it, and it stops for good.
    coordinator.not_up.store(true, Ordering::SeqCst);
    eventually("the zombie to learn its fate", async || server.is_zombie()).await;
    assert_eq!(status(server.clone()).await, Status::ServerNotUp);
    monitor.abort();
}

/// A server whose store (and so whole service) runs on `clock`.
fn service_on(clock: &ramstore_clock::ManualClock, id: u64) -> Arc<StorageService> {
    let mut config = StoreConfig::new(16 << 20);
    config.cleaner = CleanerMode::Manual;
    config.clock = clock.handle();
    let s = StorageService::new(ObjectStore::new(config).expect("object store"));
    s.set_server_id(id);
    Arc::new(s)
}

/// Lets every task that can run do so (the clock does not move meanwhile).
async fn settle() {
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
}

/// The membership lease on a manual clock: renewed every ping interval, it holds
/// for exactly `lease_ms` from when the last granted renewal was sent, so a server
/// whose grants stop serves until that instant and answers RETRY from it on.
#[tokio::test]
async fn lease_runs_out_exactly_lease_ms_after_the_granted_renewal_was_sent() {
    let clock = ramstore_clock::ManualClock::new();
    let transport = LocalTransport::with_clock(clock.handle());
    let coordinator = Arc::new(LeaseCoordinator::default());
    coordinator.lease_ms.store(300, Ordering::SeqCst);
    transport.register("coordinator", coordinator.clone());
    let server = service_on(&clock, 5);
    let read = Request::Read {
        table_id: 1,
        rules: RejectRules::default(),
        key: b"k",
    };
    let config = MonitorConfig {
        ping_interval_ms: 100,
        ping_timeout_ms: 50,
    };
    let monitor = failure_monitor::start(
        server.clone(),
        Arc::new(transport.clone()),
        "coordinator".into(),
        config,
        None,
    );
    // The first renewal goes out at once (0 ms) and is granted 300 ms.
    settle().await;
    assert_eq!(coordinator.renewals.load(Ordering::SeqCst), 1);
    assert_ne!(answer(&call(&server, &read).await).0, Status::Retry);
    // From now on the coordinator grants nothing: renewals at 100 and 200 ms
    // do not extend the lease.
    coordinator.lease_ms.store(0, Ordering::SeqCst);
    for renewals in [2, 3] {
        clock.advance(std::time::Duration::from_millis(100));
        settle().await;
        assert_eq!(coordinator.renewals.load(Ordering::SeqCst), renewals);
    }
    clock.advance(std::time::Duration::from_millis(99));
    assert_ne!(
        answer(&call(&server, &read).await).0,
        Status::Retry,
        "299 ms: within the lease"
    );
    clock.advance(std::time::Duration::from_millis(1));
    assert_eq!(
        answer(&call(&server, &read).await).0,
        Status::Retry,
        "300 ms: the lease has run out"
    );
    assert!(!server.is_zombie());
    monitor.abort();
}
