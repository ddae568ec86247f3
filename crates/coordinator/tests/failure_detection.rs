//! The coordinator's failure detector end to end (R§7.2, R§7.3): a real coordinator
//! started as the process starts it, and fake storage servers on TCP that answer
//! pings until told to stop. A server that stops answering becomes Crashed in the
//! server list, the new list is pushed to the servers still up, and a server that
//! keeps answering stays Up.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use ramstore_coordinator::{
    start_with, FailureDetectorConfig, ServerId, ServerStatus, StartedCoordinator, StoreSpec,
};
use ramstore_rpc::server::SlowFuture;
use ramstore_rpc::{serve, Handled, Service, TcpTransport, Transport};
use ramstore_wire::{
    decode_request, decode_response, encode_request, encode_response, ErrorBody, Request, Response,
    ServerStatus as WireStatus, Services, Status,
};
use tokio::net::TcpListener;

/// How long the test waits for anything before failing: generous, since timing is
/// not what is tested.
const PATIENCE: Duration = Duration::from_secs(30);

/// A storage server that answers pings (and acknowledges everything else) while
/// `answering` is set, and answers nothing at all (a hung server) otherwise.
#[derive(Default)]
struct FakeServer {
    id: AtomicU64,
    answering: AtomicBool,
    pings: AtomicU64,
    /// The newest server list pushed to it: id → status.
    server_list: Mutex<(u64, BTreeMap<u64, WireStatus>)>,
}

impl Service for FakeServer {
    fn handle(&self, frame: &[u8], out: &mut Vec<u8>) -> Handled {
        if !self.answering.load(Ordering::SeqCst) {
            return Handled::Done;
        }
        let Ok((header, req)) = decode_request(frame) else {
            return Handled::Done;
        };
        let id = header.request_id;
        let op = req.opcode();
        let response = match req {
            Request::Ping { nonce } => {
                self.pings.fetch_add(1, Ordering::SeqCst);
                Response::Ping {
                    nonce,
                    server_id: self.id.load(Ordering::SeqCst),
                }
            }
            Request::ServerListUpdate {
                list_version,
                servers,
            } => {
                let mut list = self.server_list.lock();
                if list_version >= list.0 {
                    *list = (
                        list_version,
                        servers.iter().map(|s| (s.server_id, s.status)).collect(),
                    );
                }
                Response::ServerListUpdate
            }
            _ => Response::Error(ErrorBody::Message {
                status: Status::InvalidRequest,
                message: "fake server",
            }),
        };
        let _ = encode_response(id, op, &response, out);
        Handled::Done
    }

    fn handle_slow(self: Arc<Self>, _frame: Vec<u8>) -> SlowFuture {
        Box::pin(async { Vec::new() })
    }
}

/// Starts a fake server on a free port, enlists it and returns it with its id.
async fn fake_server(coordinator: &StartedCoordinator) -> (Arc<FakeServer>, ServerId) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let server = Arc::new(FakeServer::default());
    server.answering.store(true, Ordering::SeqCst);
    tokio::spawn(serve(listener, server.clone()));
    let mut frame = Vec::new();
    encode_request(
        0,
        &Request::Enlist {
            replaces_server_id: 0,
            services: Services {
                master: true,
                backup: false,
            },
            memory_bytes: 1 << 20,
            backup_read_mbps: 0,
            address: &address,
            failure_domain: "",
        },
        &mut frame,
    )
    .unwrap();
    let bytes = TcpTransport::new()
        .call(&coordinator.addr.to_string(), frame, PATIENCE)
        .await
        .expect("enlist");
    let Ok((_, Response::Enlist { server_id })) = decode_response(&bytes) else {
        panic!("enlist failed: {:?}", decode_response(&bytes));
    };
    server.id.store(server_id, Ordering::SeqCst);
    (server, ServerId(server_id))
}

fn status_of(coordinator: &StartedCoordinator, id: ServerId) -> ServerStatus {
    coordinator
        .service
        .with_core(|c| c.server(id).map(|e| e.status))
        .expect("listed")
}

/// Polls `cond` every 10 ms until it holds; fails after [`PATIENCE`].
async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < PATIENCE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stops_answering_pings_is_declared_crashed() {
    let config = FailureDetectorConfig {
        ping_interval_ms: 20,
        failure_timeout_ms: 400,
    };
    let coordinator = start_with("127.0.0.1:0", &StoreSpec::Memory, config)
        .await
        .unwrap();
    let (alive, alive_id) = fake_server(&coordinator).await;
    let (victim, victim_id) = fake_server(&coordinator).await;

    // Both are pinged, answer, and stay up.
    wait_for("pings to both servers", || {
        alive.pings.load(Ordering::SeqCst) >= 5 && victim.pings.load(Ordering::SeqCst) >= 5
    })
    .await;
    assert_eq!(status_of(&coordinator, alive_id), ServerStatus::Up);
    assert_eq!(status_of(&coordinator, victim_id), ServerStatus::Up);

    // The victim hangs: it is declared crashed, and the server still up learns it.
    victim.answering.store(false, Ordering::SeqCst);
    wait_for("the victim to be declared crashed", || {
        status_of(&coordinator, victim_id) == ServerStatus::Crashed
    })
    .await;
    assert_eq!(status_of(&coordinator, alive_id), ServerStatus::Up);
    wait_for("the new server list to reach the live server", || {
        alive.server_list.lock().1.get(&victim_id.0) == Some(&WireStatus::Crashed)
    })
    .await;
    assert_eq!(
        alive.server_list.lock().1.get(&alive_id.0),
        Some(&WireStatus::Up)
    );
    let stats = coordinator.service.stats_text();
    assert!(
        stats
            .lines()
            .any(|l| l.starts_with(&format!("server.{}=", victim_id.0)) && l.contains(" crashed ")),
        "{stats}"
    );

    // Answering again changes nothing: Crashed is final (a restarted server
    // enlists under a new id), and the live server keeps being pinged.
    victim.answering.store(true, Ordering::SeqCst);
    let pings = alive.pings.load(Ordering::SeqCst);
    wait_for("more pings to the live server", || {
        alive.pings.load(Ordering::SeqCst) >= pings + 5
    })
    .await;
    assert_eq!(status_of(&coordinator, victim_id), ServerStatus::Crashed);
    assert_eq!(status_of(&coordinator, alive_id), ServerStatus::Up);
    coordinator.stop();
}

#[tokio::test]
async fn start_refuses_a_timeout_shorter_than_the_interval() {
    let config = FailureDetectorConfig {
        ping_interval_ms: 500,
        failure_timeout_ms: 100,
    };
    let err = start_with("127.0.0.1:0", &StoreSpec::Memory, config)
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("failure timeout"), "{err}");
}
