//! A storage server's backup across a crash: replicas written through
//! `BackupClient` over real TCP to a `ramstore server --backup-dir DIR` process,
//! the process killed with SIGKILL, a new process started on the same directory —
//! and every replica comes back byte for byte, closed ones and the open buffered one
//! (R§8: a restarting backup keeps the replicas on its secondary storage; buffered
//! writes are in the page cache, which outlives the process).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{runtime, Coordinator, Server};
use ramstore_backup::{BackupClient, BackupReplica, BackupWriteFlags};
use ramstore_rpc::TcpTransport;

const MASTER: u64 = 42;
const SEGMENT_BYTES: usize = 8 << 20;

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(131).wrapping_add(seed) ^ (i >> 13) as u8)
        .collect()
}

fn start_server(coordinator: &Coordinator, backup_dir: &str) -> Server {
    let extra = ["--backup-dir", backup_dir, "--backup-frames", "4"];
    let server =
        Server::start(&coordinator.addr, "127.0.0.1:0", &extra).unwrap_or_else(|e| panic!("{e}"));
    let ready = server.proc.stdout_lines().join("\n");
    assert!(
        ready.contains(&format!("backup of 4 frames in {backup_dir} (buffered)")),
        "{ready}"
    );
    server
}

#[test]
fn restart_after_sigkill_keeps_closed_replicas_byte_exact() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = Coordinator::start(&dir.path().join("coordinator"));
    let backup_dir = dir.path().join("backup");
    let backup_dir = backup_dir.to_str().expect("UTF-8 temp path");
    let mut server = start_server(&coordinator, backup_dir);
    assert!(std::path::Path::new(backup_dir)
        .join("replicas.frames")
        .is_file());

    let rt = runtime();
    let client =
        BackupClient::new(Arc::new(TcpTransport::new())).with_rpc_deadline(Duration::from_secs(20));
    // Segment 1: a head replicated in pieces (group commits), then closed.
    let head = bytes(300_000, 1);
    // Segment 2: a whole 8 MiB segment in one RPC (open + write + close).
    let full = bytes(SEGMENT_BYTES, 2);
    // Segment 3: still open when the server dies (buffered: in memory only).
    let open = bytes(1000, 3);
    rt.block_on(async {
        let addr = server.addr.as_str();
        client
            .write(addr, MASTER, 1, 0, &head[..1000], BackupWriteFlags::OPEN)
            .await
            .unwrap();
        client
            .write(
                addr,
                MASTER,
                1,
                1000,
                &head[1000..200_000],
                BackupWriteFlags::WRITE,
            )
            .await
            .unwrap();
        client
            .write(
                addr,
                MASTER,
                1,
                200_000,
                &head[200_000..],
                BackupWriteFlags::CLOSE,
            )
            .await
            .unwrap();
        let open_close = BackupWriteFlags {
            open: true,
            close: true,
            atomic: false,
            reserve: false,
        };
        client
            .write(addr, MASTER, 2, 0, &full, open_close)
            .await
            .unwrap();
        client
            .write(addr, MASTER, 3, 0, &open, BackupWriteFlags::OPEN)
            .await
            .unwrap();
        assert_eq!(client.get_replicas(addr, MASTER).await.unwrap().len(), 3);
    });

    // A crash: no flush, no clean shutdown.
    server.proc.kill();
    let server = start_server(&coordinator, backup_dir);

    rt.block_on(async {
        let addr = server.addr.as_str();
        let replicas = client.get_replicas(addr, MASTER).await.unwrap();
        assert_eq!(
            replicas,
            vec![
                BackupReplica {
                    segment_id: 1,
                    length: head.len() as u32,
                    closed: true
                },
                BackupReplica {
                    segment_id: 2,
                    length: SEGMENT_BYTES as u32,
                    closed: true
                },
                BackupReplica {
                    segment_id: 3,
                    length: open.len() as u32,
                    closed: false
                },
            ],
            "every replica is back: buffered writes were in the page cache, which a \
             process crash does not lose"
        );
        let r = client.read_replica(addr, MASTER, 1).await.unwrap();
        assert!(r.closed);
        assert!(r.bytes == head, "segment 1 differs after the restart");
        let r = client.read_replica(addr, MASTER, 2).await.unwrap();
        assert!(r.closed);
        assert!(r.bytes == full, "segment 2 differs after the restart");
        let r = client.read_replica(addr, MASTER, 3).await.unwrap();
        assert!(!r.closed);
        assert!(r.bytes == open, "open segment 3 differs after the restart");
        // The restarted backup takes new replicas in the frames it frees.
        client.free(addr, MASTER, 3).await.unwrap();
        client
            .write(addr, MASTER, 3, 0, &open, BackupWriteFlags::OPEN)
            .await
            .unwrap();
        client.free(addr, MASTER, 1).await.unwrap();
        assert_eq!(
            client
                .get_replicas(addr, MASTER)
                .await
                .unwrap()
                .iter()
                .map(|r| r.segment_id)
                .collect::<Vec<_>>(),
            [2, 3]
        );
    });
}
