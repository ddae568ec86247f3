//! Restarts and on-disk corruption with a real frames file (`FileDisk` in a temp
//! directory).

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use ramstore_backup::metadata::{METADATA_BLOCK_BYTES, METADATA_SLOT_BYTES};
use ramstore_backup::{
    BackupConfig, BackupStore, FileDisk, FrameProblem, ReplicaInfo, RestartSummary, SyncMode,
};

const SEG: u32 = 4096;

fn config(mode: SyncMode) -> BackupConfig {
    BackupConfig {
        frame_count: 4,
        segment_bytes: SEG,
        max_open_buffers: 2,
        sync_mode: mode,
    }
}

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

fn create(path: &Path, cfg: BackupConfig) -> BackupStore<FileDisk> {
    let disk = FileDisk::create(path, cfg.file_bytes()).unwrap();
    BackupStore::create(disk, cfg).unwrap()
}

fn reopen(path: &Path, cfg: BackupConfig) -> (BackupStore<FileDisk>, RestartSummary) {
    BackupStore::open_existing(FileDisk::open(path).unwrap(), cfg).unwrap()
}

fn xor_byte(path: &Path, offset: u64, mask: u8) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).unwrap();
    b[0] ^= mask;
    f.write_all_at(&b, offset).unwrap();
}

fn info(master_id: u64, segment_id: u64, length: u32, closed: bool, atomic: bool) -> ReplicaInfo {
    ReplicaInfo {
        master_id,
        segment_id,
        length,
        closed,
        atomic,
    }
}

#[test]
fn file_restart_keeps_replicas_byte_exact() {
    for mode in [SyncMode::Buffered, SyncMode::Fsync] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("frames");
        let cfg = config(mode);
        let s = create(&path, cfg);
        let (a, b, d) = (pattern(1, 4096), pattern(2, 1234), pattern(4, 77));

        s.open(10, 1, false).unwrap();
        s.write(10, 1, 0, &a[..2000]).unwrap();
        s.write(10, 1, 2000, &a[2000..]).unwrap();
        s.close(10, 1).unwrap();

        s.open(11, 1, true).unwrap();
        s.write(11, 1, 0, &b).unwrap();
        s.close(11, 1).unwrap();

        s.open(10, 2, false).unwrap();
        s.write(10, 2, 0, b"freed before the restart").unwrap();
        s.close(10, 2).unwrap();
        s.free(10, 2).unwrap();

        s.open(12, 9, false).unwrap();
        s.write(12, 9, 0, &d).unwrap();
        s.open(13, 1, true).unwrap();
        s.write(13, 1, 0, b"unfinished atomic").unwrap();
        // Stopping without a flush is a process crash: the open replica's bytes
        // are in the file in both modes (buffered: in the page cache, unsynced).
        drop(s);

        let (s, summary) = reopen(&path, cfg);
        let want = vec![
            info(10, 1, 4096, true, false),
            info(11, 1, 1234, true, true),
            info(12, 9, 77, false, false),
        ];
        assert_eq!(s.list(), want, "{mode:?}");
        assert_eq!(s.read_replica(10, 1).unwrap(), a);
        assert_eq!(s.read_replica(11, 1).unwrap(), b);
        assert!(s.read_replica(10, 2).is_err());
        assert!(s.read_replica(13, 1).is_err());
        assert_eq!(s.read_replica(12, 9).unwrap(), d, "{mode:?}");
        assert!(summary.corrupt.is_empty(), "{summary:?}");
        assert_eq!(summary.closed_replicas, 2);
        assert_eq!(s.stats().frames_free, 4 - want.len() as u32);
        drop(s);

        // And again, unchanged: a restart writes nothing that changes the picture.
        let (s, _) = reopen(&path, cfg);
        assert_eq!(s.list(), want);
    }
}

#[test]
fn file_restart_keeps_buffered_open_replica_after_a_process_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("frames");
    let cfg = config(SyncMode::Buffered);
    let s = create(&path, cfg);
    s.open(3, 3, false).unwrap();
    s.write(3, 3, 0, b"acknowledged").unwrap();
    // No flush: the process stops as if killed.
    drop(s);
    let (s, _) = reopen(&path, cfg);
    assert_eq!(s.list(), vec![info(3, 3, 12, false, false)]);
    assert_eq!(s.read_replica(3, 3).unwrap(), b"acknowledged");
    // The kept replica takes writes again; a flush finds them in the file already
    // and only syncs.
    s.write(3, 3, 12, b", power is failing").unwrap();
    assert_eq!(s.flush().unwrap(), 0);
    drop(s);
    let (s, _) = reopen(&path, cfg);
    assert_eq!(s.list(), vec![info(3, 3, 30, false, false)]);
    assert_eq!(
        s.read_replica(3, 3).unwrap(),
        b"acknowledged, power is failing"
    );
}

#[test]
fn file_corrupt_data_byte_reported_and_not_offered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("frames");
    let cfg = config(SyncMode::Buffered);
    let s = create(&path, cfg);
    for seg in 0..2 {
        s.open(1, seg, false).unwrap();
        s.write(1, seg, 0, &pattern(seg as u8, 3000)).unwrap();
        s.close(1, seg).unwrap();
    }
    drop(s);
    // Frame 1 holds segment 1; flip a byte in the middle of its data.
    xor_byte(&path, cfg.frame_bytes() + 1500, 0x80);
    let (s, summary) = reopen(&path, cfg);
    assert_eq!(s.list(), vec![info(1, 0, 3000, true, false)]);
    assert_eq!(summary.corrupt.len(), 1);
    let c = &summary.corrupt[0];
    assert_eq!((c.frame, c.replica), (1, Some((1, 1))));
    assert!(
        matches!(c.problem, FrameProblem::DataChecksum { .. }),
        "{c:?}"
    );
    // The frame is free again.
    assert_eq!(s.stats().frames_free, 3);
}

#[test]
fn file_corrupt_data_detected_by_read_without_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("frames");
    let cfg = config(SyncMode::Fsync);
    let s = create(&path, cfg);
    s.open(1, 1, false).unwrap();
    s.write(1, 1, 0, &pattern(9, 100)).unwrap();
    s.close(1, 1).unwrap();
    xor_byte(&path, 0, 1);
    assert!(matches!(
        s.read_replica(1, 1),
        Err(ramstore_backup::BackupError::Corrupt { .. })
    ));
}

/// Every byte of the metadata block, damaged in both copies, makes the replica
/// unusable: it is reported and never offered. Damaged in one copy, the other
/// keeps the replica.
#[test]
fn file_corrupt_metadata_every_byte_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("frames");
    for mode in [SyncMode::Buffered, SyncMode::Fsync] {
        let cfg = config(mode);
        let _ = std::fs::remove_file(&path);
        let s = create(&path, cfg);
        s.open(5, 5, false).unwrap();
        s.write(5, 5, 0, &pattern(5, 999)).unwrap();
        s.close(5, 5).unwrap();
        drop(s);
        let good = std::fs::read(&path).unwrap();
        let meta = cfg.metadata_offset(0);
        for at in 0..METADATA_BLOCK_BYTES as u64 {
            std::fs::write(&path, &good).unwrap();
            xor_byte(&path, meta + at, 0x5a);
            let (s, summary) = reopen(&path, cfg);
            assert_eq!(
                s.list(),
                vec![info(5, 5, 999, true, false)],
                "{mode:?} byte {at}"
            );
            assert_eq!(
                s.read_replica(5, 5).unwrap(),
                pattern(5, 999),
                "{mode:?} byte {at}"
            );
            assert_eq!(summary.damaged_slots, 1);
            drop(s);

            xor_byte(&path, meta + METADATA_SLOT_BYTES as u64 + at, 0x01);
            let (s, summary) = reopen(&path, cfg);
            assert!(s.list().is_empty(), "{mode:?} byte {at}");
            assert!(s.read_replica(5, 5).is_err());
            assert_eq!(summary.corrupt.len(), 1, "{mode:?} byte {at}");
            assert!(matches!(
                summary.corrupt[0].problem,
                FrameProblem::Metadata(_)
            ));
        }
    }
}
