//! `ramstore dev`'s layout in-process: a coordinator and three storage servers
//! (R = 2) on one current-thread runtime, every server's native port reporting
//! to one shared poller (`ServerOptions::loop_poller`). A native durable write
//! must reach the poller at each step — the client's request on the master, the
//! BackupWrite on each backup, the end of the master's wait for them — so the
//! loop polls, not sleeps, between them (R§5.1; docs/design-notes.md, "Polling
//! before sleeping"; regression: native writes on dev slept where RESP ones
//! polled, 92 µs against 39 µs).

use std::sync::Arc;

use ramstore_client::{Client, ClientOptions};
use ramstore_coordinator::{FailureDetectorConfig, StoreSpec};
use ramstore_resp::Poller;
use ramstore_server::failure_monitor::MAX_MONITOR_MS;
use ramstore_server::{MonitorConfig, ServerOptions};

mod common;

/// Writes measured.
const WRITES: u64 = 20;

#[tokio::test]
async fn dev_servers_report_every_step_of_a_durable_write_to_the_loop_poller() {
    let dir = tempfile::tempdir().expect("temp dir");
    let coordinator_addr = format!("127.0.0.1:{}", common::free_port());
    let coordinator = ramstore_coordinator::start_with(
        &coordinator_addr,
        &StoreSpec::File(dir.path().join("coordinator")),
        FailureDetectorConfig::default(),
    )
    .await
    .expect("the coordinator starts");
    let poller = Arc::new(Poller::sharing_runtime(50));
    let polling = poller.spawn();
    let mut servers = Vec::new();
    for i in 0..3 {
        let options = ServerOptions {
            memory_bytes: 32 << 20,
            backup_dir: Some(dir.path().join(format!("server-{i}"))),
            backup_frames: 8,
            replicas: 2,
            // No pings between the servers: what the poller hears is the writes.
            monitor: MonitorConfig {
                ping_interval_ms: MAX_MONITOR_MS,
                ping_timeout_ms: MAX_MONITOR_MS,
            },
            loop_poller: Some(poller.clone()),
            ..ServerOptions::new(coordinator_addr.clone())
        };
        servers.push(
            ramstore_server::start(options)
                .await
                .expect("a server starts"),
        );
    }
    let client = Client::connect(ClientOptions::new(coordinator_addr.clone()))
        .await
        .expect("the client connects");
    let table = client.create_table("t", 1).await.expect("table");
    // The first write waits for the backups to open the head's replicas.
    client.write(table, b"k", b"first").await.expect("write");

    let before = poller.activity_rounds();
    for i in 0..WRITES {
        client
            .write(table, b"k", format!("value {i}").as_bytes())
            .await
            .expect("write");
    }
    let rounds = poller.activity_rounds() - before;
    // Per write: the master reads the request, each of the two backups reads a
    // BackupWrite, the master's wait ends. Without the backups' reports it
    // would be at most two.
    assert!(
        rounds >= 3 * WRITES,
        "{rounds} rounds of activity for {WRITES} replicated writes"
    );
    assert_eq!(
        poller.durability_waits(),
        0,
        "a finished write is still counted"
    );

    polling.abort();
    for mut s in servers {
        s.stop_serving();
    }
    coordinator.stop();
}
