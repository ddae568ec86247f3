//! The storage server's backup service end to end in one process: `BackupClient`
//! → `LocalTransport` → `StorageService` (fast path or blocking pool) →
//! `BackupStore`, and back. Also which requests leave the fast path, the statuses
//! of every failure, the stats lines, and the frames file across a reopen.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ramstore_backup::{BackupClient, BackupClientError, BackupReplica, BackupWriteFlags};
use ramstore_backup::{BackupConfig, BackupStore, Disk, MemDisk, SyncMode};
use ramstore_master::{CleanerMode, ObjectStore, StoreConfig};
use ramstore_rpc::{Handled, LocalTransport, Service};
use ramstore_server::{BackupService, StorageService, FRAMES_FILE, MAX_FAST_BACKUP_WRITE_BYTES};
use ramstore_wire::{decode_response, encode_request, Request, Response, Status};

const ADDR: &str = "backup:1";
const MASTER: u64 = 7;
/// Segment area of the test frames: small, so tests are fast.
const SEGMENT_BYTES: u32 = 64 * 1024;

fn object_store() -> ObjectStore {
    let mut config = StoreConfig::new(16 << 20);
    config.cleaner = CleanerMode::Manual;
    ObjectStore::new(config).expect("object store")
}

fn config(frames: u32, buffers: u32, sync_mode: SyncMode) -> BackupConfig {
    BackupConfig {
        frame_count: frames,
        segment_bytes: SEGMENT_BYTES,
        max_open_buffers: buffers,
        sync_mode,
    }
}

fn service_on(disk: Box<dyn Disk>, config: BackupConfig) -> Arc<StorageService> {
    let store = BackupStore::create(disk, config).expect("backup store");
    Arc::new(StorageService::with_backup(
        object_store(),
        Some(BackupService::new(store)),
    ))
}

/// A storage server with a backup on an in-memory disk, reachable at [`ADDR`].
fn cluster(config: BackupConfig) -> (Arc<StorageService>, BackupClient) {
    let service = service_on(Box::new(MemDisk::new()), config);
    let transport = LocalTransport::new();
    transport.register(ADDR, service.clone());
    (service, BackupClient::new(Arc::new(transport)))
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn open_atomic() -> BackupWriteFlags {
    BackupWriteFlags {
        open: true,
        close: false,
        atomic: true,
        reserve: false,
    }
}

fn open_close() -> BackupWriteFlags {
    BackupWriteFlags {
        open: true,
        close: true,
        atomic: false,
        reserve: false,
    }
}

#[tokio::test]
async fn write_open_more_close_then_read_replica_returns_exact_bytes() {
    for mode in [SyncMode::Buffered, SyncMode::Fsync] {
        let (_service, c) = cluster(config(4, 2, mode));
        let data = bytes(40_000, 3);
        c.write(ADDR, MASTER, 1, 0, &data[..100], BackupWriteFlags::OPEN)
            .await
            .unwrap();
        c.write(
            ADDR,
            MASTER,
            1,
            100,
            &data[100..30_000],
            BackupWriteFlags::WRITE,
        )
        .await
        .unwrap();
        // The open head is offered with what it holds so far.
        assert_eq!(
            c.get_replicas(ADDR, MASTER).await.unwrap(),
            vec![BackupReplica {
                segment_id: 1,
                length: 30_000,
                closed: false
            }],
            "{mode:?}"
        );
        let open = c.read_replica(ADDR, MASTER, 1).await.unwrap();
        assert!(!open.closed);
        assert_eq!(open.bytes, data[..30_000], "{mode:?}");

        c.write(
            ADDR,
            MASTER,
            1,
            30_000,
            &data[30_000..],
            BackupWriteFlags::CLOSE,
        )
        .await
        .unwrap();
        let closed = c.read_replica(ADDR, MASTER, 1).await.unwrap();
        assert!(closed.closed);
        assert_eq!(closed.bytes, data, "{mode:?}");
        assert_eq!(
            c.get_replicas(ADDR, MASTER).await.unwrap(),
            vec![BackupReplica {
                segment_id: 1,
                length: data.len() as u32,
                closed: true
            }]
        );
    }
}

#[tokio::test]
async fn write_open_write_close_in_one_rpc_and_its_retransmission_succeed() {
    let (_service, c) = cluster(config(4, 2, SyncMode::Buffered));
    let data = bytes(SEGMENT_BYTES as usize, 9);
    c.write(ADDR, MASTER, 5, 0, &data, open_close())
        .await
        .unwrap();
    // The answer was lost and the master sends the same RPC again.
    c.write(ADDR, MASTER, 5, 0, &data, open_close())
        .await
        .unwrap();
    let r = c.read_replica(ADDR, MASTER, 5).await.unwrap();
    assert!(r.closed);
    assert_eq!(r.bytes, data);
    // A write that is not that retransmission is refused: the replica is read-only.
    let e = c
        .write(ADDR, MASTER, 5, 10, b"late", BackupWriteFlags::WRITE)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            BackupClientError::Refused {
                status: Status::InvalidRequest,
                ..
            }
        ),
        "{e}"
    );
}

#[tokio::test]
async fn free_drops_the_replica_and_is_idempotent() {
    let (service, c) = cluster(config(2, 2, SyncMode::Buffered));
    c.write(ADDR, MASTER, 1, 0, b"abc", open_close())
        .await
        .unwrap();
    c.write(ADDR, MASTER, 2, 0, b"def", BackupWriteFlags::OPEN)
        .await
        .unwrap();
    let backup = service.backup().expect("backup");
    assert_eq!(backup.stats().frames_free, 0);
    c.free(ADDR, MASTER, 1).await.unwrap();
    c.free(ADDR, MASTER, 2).await.unwrap();
    for segment in [1, 2] {
        let e = c.read_replica(ADDR, MASTER, segment).await.unwrap_err();
        assert!(matches!(e, BackupClientError::UnknownReplica { .. }), "{e}");
    }
    assert!(c.get_replicas(ADDR, MASTER).await.unwrap().is_empty());
    assert_eq!(backup.stats().frames_free, 2);
    assert_eq!(backup.stats().open_buffers_in_use, 0);
    // A retransmitted free, and a free of something never held.
    c.free(ADDR, MASTER, 1).await.unwrap();
    c.free(ADDR, MASTER + 1, 99).await.unwrap();
}

#[tokio::test]
async fn write_with_a_gap_or_past_the_frame_is_refused() {
    let (_service, c) = cluster(config(2, 2, SyncMode::Buffered));
    c.write(ADDR, MASTER, 1, 0, b"0123456789", BackupWriteFlags::OPEN)
        .await
        .unwrap();
    let e = c
        .write(ADDR, MASTER, 1, 11, b"x", BackupWriteFlags::WRITE)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, BackupClientError::Refused { status: Status::InvalidRequest, message, .. }
            if message.contains("gap")),
        "{e}"
    );
    let e = c
        .write(
            ADDR,
            MASTER,
            1,
            SEGMENT_BYTES - 1,
            b"xy",
            BackupWriteFlags::WRITE,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            BackupClientError::Refused {
                status: Status::InvalidRequest,
                ..
            }
        ),
        "{e}"
    );
    // Nothing changed; rewriting bytes already held is fine.
    c.write(ADDR, MASTER, 1, 5, b"56789", BackupWriteFlags::WRITE)
        .await
        .unwrap();
    let r = c.read_replica(ADDR, MASTER, 1).await.unwrap();
    assert_eq!(r.bytes, &b"0123456789"[..]);
    // A write to a replica never opened.
    let e = c
        .write(ADDR, MASTER, 2, 0, b"x", BackupWriteFlags::WRITE)
        .await
        .unwrap_err();
    assert!(matches!(e, BackupClientError::UnknownReplica { .. }), "{e}");
}

#[tokio::test]
async fn write_open_beyond_buffers_or_frames_is_full() {
    // Two buffers, three frames.
    let (_service, c) = cluster(config(3, 2, SyncMode::Buffered));
    c.write(ADDR, MASTER, 1, 0, b"a", BackupWriteFlags::OPEN)
        .await
        .unwrap();
    c.write(ADDR, MASTER, 2, 0, b"b", BackupWriteFlags::OPEN)
        .await
        .unwrap();
    let e = c
        .write(ADDR, MASTER, 3, 0, b"c", BackupWriteFlags::OPEN)
        .await
        .unwrap_err();
    assert!(matches!(e, BackupClientError::Full { .. }), "{e}");
    // Closing one frees its buffer: the third fits, then every frame is used.
    c.write(ADDR, MASTER, 1, 1, b"", BackupWriteFlags::CLOSE)
        .await
        .unwrap();
    c.write(ADDR, MASTER, 3, 0, b"c", BackupWriteFlags::OPEN)
        .await
        .unwrap();
    c.write(ADDR, MASTER, 3, 1, b"", BackupWriteFlags::CLOSE)
        .await
        .unwrap();
    let e = c
        .write(ADDR, MASTER, 4, 0, b"d", open_close())
        .await
        .unwrap_err();
    assert!(
        matches!(&e, BackupClientError::Full { message, .. } if message.contains("frames")),
        "{e}"
    );
}

#[tokio::test]
async fn get_replicas_offers_an_atomic_replica_only_once_closed() {
    let (_service, c) = cluster(config(4, 3, SyncMode::Fsync));
    c.write(ADDR, MASTER, 1, 0, b"head", BackupWriteFlags::OPEN)
        .await
        .unwrap();
    c.write(ADDR, MASTER, 2, 0, b"half a copy", open_atomic())
        .await
        .unwrap();
    // Another master's replica is not listed for this one.
    c.write(ADDR, MASTER + 1, 2, 0, b"other", open_close())
        .await
        .unwrap();
    let listed: Vec<u64> = c
        .get_replicas(ADDR, MASTER)
        .await
        .unwrap()
        .iter()
        .map(|r| r.segment_id)
        .collect();
    assert_eq!(listed, [1], "the open atomic replica is not offered");
    let e = c.read_replica(ADDR, MASTER, 2).await.unwrap_err();
    assert!(matches!(e, BackupClientError::UnknownReplica { .. }), "{e}");
    // Opening it again in the other mode is refused.
    let e = c
        .write(ADDR, MASTER, 2, 0, b"", BackupWriteFlags::OPEN)
        .await
        .unwrap_err();
    assert!(matches!(e, BackupClientError::Refused { .. }), "{e}");

    c.write(ADDR, MASTER, 2, 11, b"", BackupWriteFlags::CLOSE)
        .await
        .unwrap();
    let r = c.read_replica(ADDR, MASTER, 2).await.unwrap();
    assert!(r.closed);
    assert_eq!(r.bytes, &b"half a copy"[..]);
    assert_eq!(c.get_replicas(ADDR, MASTER).await.unwrap().len(), 2);
}

#[tokio::test]
async fn write_of_a_whole_8_mib_segment_reads_back() {
    let (_service, c) = cluster(BackupConfig {
        segment_bytes: ramstore_backup::FRAME_SEGMENT_BYTES,
        ..config(1, 1, SyncMode::Buffered)
    });
    let data = bytes(ramstore_backup::FRAME_SEGMENT_BYTES as usize, 1);
    c.write(ADDR, MASTER, 1, 0, &data, open_close())
        .await
        .unwrap();
    let r = c.read_replica(ADDR, MASTER, 1).await.unwrap();
    assert!(r.closed);
    assert!(r.bytes == data, "the segment read back differs");
}

#[tokio::test]
async fn handle_without_a_backup_refuses_backup_requests_clearly() {
    let service = Arc::new(StorageService::new(object_store()));
    let transport = LocalTransport::new();
    transport.register(ADDR, service.clone());
    let c = BackupClient::new(Arc::new(transport));
    let e = c
        .write(ADDR, MASTER, 1, 0, b"x", BackupWriteFlags::OPEN)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, BackupClientError::Refused { status: Status::InvalidRequest, message, .. }
            if message.contains("no backup service")),
        "{e}"
    );
    assert!(matches!(
        c.free(ADDR, MASTER, 1).await,
        Err(BackupClientError::Refused { .. })
    ));
    assert!(matches!(
        c.get_replicas(ADDR, MASTER).await,
        Err(BackupClientError::Refused { .. })
    ));
    assert!(matches!(
        c.read_replica(ADDR, MASTER, 1).await,
        Err(BackupClientError::Refused { .. })
    ));
    assert!(service.stats_text().contains("\nbackup=off\n"));
}

#[tokio::test]
async fn stats_text_reports_the_backup() {
    let (service, c) = cluster(config(4, 3, SyncMode::Buffered));
    c.write(ADDR, MASTER, 1, 0, &bytes(1000, 0), open_close())
        .await
        .unwrap();
    c.write(ADDR, MASTER, 2, 0, b"x", BackupWriteFlags::OPEN)
        .await
        .unwrap();
    let text = service.stats_text();
    for line in [
        "backup=on",
        "backup_sync=buffered",
        "backup_frames_total=4",
        "backup_frames_free=2",
        "backup_replicas=2",
        "backup_open_buffers_used=1",
        "backup_open_buffers_max=3",
        // The closed replica and the open one's byte: buffered writes go to the
        // file (page cache) before they are acknowledged.
        "backup_bytes_on_disk=1001",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }
}

/// An in-memory disk whose syncs take `sync_ms` and are counted.
struct SlowDisk {
    inner: MemDisk,
    sync_ms: u64,
    syncs: AtomicU64,
}

impl Disk for SlowDisk {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.inner.write_at(offset, bytes)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.syncs.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(self.sync_ms));
        self.inner.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
}

fn frame(req: &Request<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_request(1, req, &mut out).expect("encodes");
    out
}

fn write_frame(segment_id: u64, offset: u32, bytes: &[u8], flags: BackupWriteFlags) -> Vec<u8> {
    frame(&Request::BackupWrite {
        master_id: MASTER,
        segment_id,
        offset,
        flags,
        bytes,
    })
}

/// The slow path: requests that may wait for the disk leave the reading task at
/// once, small buffered writes stay on it, and a close that is syncing holds up
/// neither pings nor writes to other replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handle_sends_disk_work_to_the_slow_path() {
    const SYNC_MS: u64 = 600;
    let disk = SlowDisk {
        inner: MemDisk::new(),
        sync_ms: SYNC_MS,
        syncs: AtomicU64::new(0),
    };
    let service = service_on(Box::new(disk), config(4, 3, SyncMode::Buffered));
    let mut out = Vec::new();

    // Small buffered writes (and opens) are answered on the reading task.
    for (segment, flags) in [(1, BackupWriteFlags::OPEN), (2, BackupWriteFlags::OPEN)] {
        out.clear();
        let f = write_frame(segment, 0, b"bytes", flags);
        assert_eq!(service.handle(&f, &mut out), Handled::Done);
        assert_eq!(decode_response(&out).unwrap().1, Response::BackupWrite);
    }
    // Big writes, closes, frees, lists and reads are not.
    let big = vec![1u8; MAX_FAST_BACKUP_WRITE_BYTES + 1];
    for f in [
        write_frame(1, 5, &big, BackupWriteFlags::WRITE),
        write_frame(1, 5, b"", BackupWriteFlags::CLOSE),
        frame(&Request::BackupFree {
            master_id: MASTER,
            segment_id: 1,
        }),
        frame(&Request::BackupGetReplicas { master_id: MASTER }),
        frame(&Request::BackupReadReplica {
            master_id: MASTER,
            segment_id: 1,
        }),
    ] {
        out.clear();
        let started = Instant::now();
        assert_eq!(service.handle(&f, &mut out), Handled::Slow);
        assert!(out.is_empty());
        assert!(started.elapsed() < Duration::from_millis(SYNC_MS / 3));
    }

    // A close runs (and syncs) on the blocking pool ...
    let close = write_frame(1, 5, b"", BackupWriteFlags::CLOSE);
    let closing = tokio::spawn(service.clone().handle_slow(close));
    tokio::time::sleep(Duration::from_millis(SYNC_MS / 3)).await;
    // ... while pings and a write to another replica are answered at once.
    let started = Instant::now();
    out.clear();
    let ping = frame(&Request::Ping {
        nonce: 3,
        caller_id: 0,
    });
    assert_eq!(service.handle(&ping, &mut out), Handled::Done);
    out.clear();
    let more = write_frame(2, 5, b"more", BackupWriteFlags::WRITE);
    assert_eq!(service.handle(&more, &mut out), Handled::Done);
    assert_eq!(decode_response(&out).unwrap().1, Response::BackupWrite);
    assert!(
        started.elapsed() < Duration::from_millis(SYNC_MS / 3),
        "took {:?}",
        started.elapsed()
    );
    assert!(!closing.is_finished(), "the close is still syncing");
    let response = closing.await.unwrap();
    assert_eq!(decode_response(&response).unwrap().1, Response::BackupWrite);

    // In fsync mode every write waits for the disk, so none stays on the fast path.
    let service = service_on(Box::new(MemDisk::new()), config(4, 3, SyncMode::Fsync));
    out.clear();
    let f = write_frame(1, 0, b"x", BackupWriteFlags::OPEN);
    assert_eq!(service.handle(&f, &mut out), Handled::Slow);
}

/// The frames file: made on first start, reopened on the next with the closed
/// replicas (the storage server logs the restart summary).
#[tokio::test]
async fn open_creates_then_reopens_the_frames_file() {
    let dir = tempfile::tempdir().unwrap();
    let backup_dir = dir.path().join("server-1").join("backup");
    let config = config(3, 2, SyncMode::Buffered);
    let data = bytes(5000, 4);
    {
        let (backup, summary) = BackupService::open(&backup_dir, config).unwrap();
        assert!(summary.is_none(), "a new file");
        assert_eq!(backup.path(), Some(backup_dir.join(FRAMES_FILE).as_path()));
        let service = Arc::new(StorageService::with_backup(object_store(), Some(backup)));
        let transport = LocalTransport::new();
        transport.register(ADDR, service.clone());
        let c = BackupClient::new(Arc::new(transport));
        c.write(ADDR, MASTER, 1, 0, &data, open_close())
            .await
            .unwrap();
        // Open in buffered mode: in the file (not synced), so it survives the
        // process going away.
        c.write(ADDR, MASTER, 2, 0, b"open", BackupWriteFlags::OPEN)
            .await
            .unwrap();
    }
    let (backup, summary) = BackupService::open(&backup_dir, config).unwrap();
    let summary = summary.expect("reopened");
    assert_eq!((summary.closed_replicas, summary.open_replicas), (1, 1));
    assert_eq!(backup.store().read_replica(MASTER, 1).unwrap(), data);
    assert_eq!(backup.store().read_replica(MASTER, 2).unwrap(), b"open");
    // Another geometry is refused rather than reformatting the file.
    let other = BackupConfig {
        frame_count: 4,
        ..config
    };
    drop(backup);
    assert!(BackupService::open(&backup_dir, other).is_err());
}
