//! The coordinator's failure detector on a manual clock (R§7.2): the whole
//! detection loop — pings, suspicion, confirmation through helpers, the verdict —
//! runs in process over a `LocalTransport`, and its timing is asserted at exact
//! simulated instants, with no real sleeping.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ramstore_clock::{ManualClock, SeededRng};
use ramstore_coordinator::{
    CoordinatorCore, CoordinatorService, FailureDetectorConfig, MemoryStorage, ServerId,
    ServerStatus,
};
use ramstore_rpc::server::SlowFuture;
use ramstore_rpc::{Handled, LocalTransport, Service, Transport};
use ramstore_wire::{
    decode_request, decode_response, encode_request, encode_response, Request, Response,
};

/// A storage server that answers pings while `answering` is set (and garbage,
/// a failed ping, otherwise), and pings a suspect when the coordinator asks.
struct FakeServer {
    id: AtomicU64,
    answering: AtomicBool,
    pings: AtomicU64,
    transport: LocalTransport,
}

impl Service for FakeServer {
    fn handle(&self, frame: &[u8], out: &mut Vec<u8>) -> Handled {
        if !self.answering.load(Ordering::SeqCst) {
            return Handled::Done;
        }
        let Ok((header, req)) = decode_request(frame) else {
            return Handled::Done;
        };
        let response = match req {
            Request::Ping { nonce, .. } => {
                self.pings.fetch_add(1, Ordering::SeqCst);
                Response::Ping {
                    nonce,
                    server_id: self.id.load(Ordering::SeqCst),
                }
            }
            Request::ServerListUpdate { .. } => Response::ServerListUpdate,
            Request::PingServer { .. } => return Handled::Slow,
            _ => return Handled::Done,
        };
        let _ = encode_response(header.request_id, req.opcode(), &response, out);
        Handled::Done
    }

    fn handle_slow(self: Arc<Self>, frame: Vec<u8>) -> SlowFuture {
        Box::pin(async move {
            let Ok((header, Request::PingServer { server_id, address })) = decode_request(&frame)
            else {
                return Vec::new();
            };
            let mut ping = Vec::new();
            let request = Request::Ping {
                nonce: 7,
                caller_id: 0,
            };
            let _ = encode_request(0, &request, &mut ping);
            let answered = match self
                .transport
                .call(address, ping, Duration::from_millis(50))
                .await
            {
                Ok(bytes) => matches!(
                    decode_response(&bytes),
                    Ok((_, Response::Ping { server_id: s, .. })) if s == server_id
                ),
                Err(_) => false,
            };
            let mut out = Vec::new();
            let _ = encode_response(
                header.request_id,
                header.opcode,
                &Response::PingServer { answered },
                &mut out,
            );
            out
        })
    }
}

/// Lets every task that can run do so (the runtime is single-threaded, and the
/// clock does not move meanwhile).
async fn settle() {
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
}

fn config() -> FailureDetectorConfig {
    FailureDetectorConfig {
        ping_interval_ms: 100,
        ping_timeout_ms: 50,
        failure_timeout_ms: 250,
        unresponsive_timeout_ms: 1_000,
    }
}

/// Three servers enlisted with a coordinator on `clock`, all answering.
fn cluster(clock: &ManualClock) -> (Arc<CoordinatorService>, Vec<Arc<FakeServer>>) {
    let transport = LocalTransport::with_clock(clock.handle());
    let mut core = CoordinatorCore::open(Arc::new(MemoryStorage::new())).expect("core");
    let mut servers = Vec::new();
    for i in 1..=3 {
        let address = format!("s{i}:1");
        let (id, _) = core
            .enlist(&address, 1, 1 << 20, "", 0, None)
            .expect("enlist");
        let server = Arc::new(FakeServer {
            id: AtomicU64::new(id.0),
            answering: AtomicBool::new(true),
            pings: AtomicU64::new(0),
            transport: transport.clone(),
        });
        transport.register(&address, server.clone());
        servers.push(server);
    }
    let service = CoordinatorService::new(
        core,
        Arc::new(transport),
        clock.handle(),
        SeededRng::handle(19),
    );
    (service, servers)
}

fn status(service: &CoordinatorService, server: &FakeServer) -> Option<ServerStatus> {
    let id = ServerId(server.id.load(Ordering::SeqCst));
    service.with_core(|c| c.server(id).map(|e| e.status))
}

fn pings(servers: &[Arc<FakeServer>]) -> Vec<u64> {
    servers
        .iter()
        .map(|s| s.pings.load(Ordering::SeqCst))
        .collect()
}

#[tokio::test]
async fn failure_detector_loop_pings_every_up_server_once_per_interval() {
    let clock = ManualClock::new();
    let (service, servers) = cluster(&clock);
    let detector = tokio::spawn(service.clone().failure_detector_loop(config()));
    settle().await;
    assert_eq!(pings(&servers), vec![1, 1, 1], "the first tick is at once");
    clock.advance(Duration::from_millis(99));
    settle().await;
    assert_eq!(pings(&servers), vec![1, 1, 1], "99 ms: no tick yet");
    clock.advance(Duration::from_millis(1));
    settle().await;
    assert_eq!(pings(&servers), vec![2, 2, 2], "100 ms: the second tick");
    clock.advance(Duration::from_millis(100));
    settle().await;
    assert_eq!(pings(&servers), vec![3, 3, 3]);
    detector.abort();
}

#[tokio::test]
async fn failure_detector_loop_declares_a_silent_server_after_the_unresponsive_timeout() {
    let clock = ManualClock::new();
    let (service, servers) = cluster(&clock);
    let detector = tokio::spawn(service.clone().failure_detector_loop(config()));
    settle().await;
    // Server 3 answered the ping at 0 ms, then hangs.
    servers[2].answering.store(false, Ordering::SeqCst);
    let mut declared_at = None;
    for step in 1..=150u64 {
        clock.advance(Duration::from_millis(10));
        settle().await;
        if status(&service, &servers[2]) == Some(ServerStatus::Crashed) {
            declared_at = Some(step * 10);
            break;
        }
    }
    // Its pings only fail (no refused connection): it is declared once it has
    // been silent for the unresponsive timeout, at the first confirmation after
    // (they are repeated every ping timeout while it is suspected).
    let declared_at = declared_at.expect("declared crashed within 1.5 s");
    assert!(
        (1_000..=1_050).contains(&declared_at),
        "declared at {declared_at} ms"
    );
    assert_eq!(status(&service, &servers[0]), Some(ServerStatus::Up));
    assert_eq!(status(&service, &servers[1]), Some(ServerStatus::Up));
    detector.abort();
}
