//! The backup store across restarts and power loss: what a reopened store keeps,
//! discards and reports (R§8).

use super::tests::*;
use super::*;
use crate::config::SyncMode;
use crate::disk::MemDisk;
use crate::metadata::{ReplicaMetadata, METADATA_SLOT_BYTES};
use crate::scan::FrameProblem;

/// A closed replica and an open one with acknowledged, unsynced bytes.
fn buffered_closed_and_open() -> BackupStore<MemDisk> {
    let s = new_store(SyncMode::Buffered);
    s.open(1, 1, false).unwrap();
    s.write(1, 1, 0, b"closed one").unwrap();
    s.close(1, 1).unwrap();
    s.open(2, 1, false).unwrap();
    s.write(2, 1, 0, b"still open").unwrap();
    s
}

#[test]
fn restart_keeps_buffered_open_bytes_after_a_process_crash() {
    // A restart on the same disk is a crash of the backup process: the unsynced
    // bytes are in the page cache, which the crash does not lose.
    let s = buffered_closed_and_open();
    assert!(s.disk().unsynced_writes() > 0);
    let (s, summary) = restart(s);
    assert_eq!(
        s.list(),
        vec![info(1, 1, 10, true, false), info(2, 1, 10, false, false)]
    );
    assert_eq!(s.read_replica(1, 1).unwrap(), b"closed one");
    assert_eq!(s.read_replica(2, 1).unwrap(), b"still open");
    assert_eq!(
        (
            summary.closed_replicas,
            summary.open_replicas,
            summary.empty_frames
        ),
        (1, 1, 2)
    );
    assert!(summary.corrupt.is_empty());
    assert_eq!(s.stats().frames_free, 2);
    // It is open again: writes continue and it closes.
    s.write(2, 1, 10, b"!").unwrap();
    s.close(2, 1).unwrap();
    let (s, _) = restart(s);
    assert_eq!(s.read_replica(2, 1).unwrap(), b"still open!");
}

#[test]
fn power_loss_keeps_closed_and_drops_unflushed_buffered_open() {
    // The twin of the test above with the power failing instead: what was never
    // synced is lost (the flush assumption is what covers it).
    let s = buffered_closed_and_open();
    s.disk().power_loss_all();
    let (s, summary) = restart(s);
    assert_eq!(s.list(), vec![info(1, 1, 10, true, false)]);
    assert_eq!(s.read_replica(1, 1).unwrap(), b"closed one");
    assert_eq!(
        (
            summary.closed_replicas,
            summary.open_replicas,
            summary.empty_frames
        ),
        (1, 0, 3)
    );
    assert!(summary.corrupt.is_empty());
    assert_eq!(s.stats().frames_free, 3);
}

#[test]
fn power_loss_keeps_flushed_buffered_open() {
    let s = new_store(SyncMode::Buffered);
    s.open(2, 1, false).unwrap();
    s.write(2, 1, 0, b"flushed").unwrap();
    s.open(2, 2, true).unwrap();
    s.write(2, 2, 0, b"atomic").unwrap();
    // The buffered write is in the file already: the flush only syncs it.
    assert!(s.disk().unsynced_writes() > 0);
    let syncs = s.stats().syncs;
    assert_eq!(s.flush().unwrap(), 0);
    assert_eq!(s.disk().unsynced_writes(), 0);
    assert!(s.stats().syncs > syncs);
    s.write(2, 1, 7, b" then more").unwrap();
    s.disk().power_loss_all();
    let (s, summary) = restart(s);
    assert_eq!(s.list(), vec![info(2, 1, 7, false, false)]);
    assert_eq!(summary.open_replicas, 1);
    // It is open again: writes continue and it closes.
    s.write(2, 1, 7, b"!").unwrap();
    s.close(2, 1).unwrap();
    let (s, _) = restart(s);
    assert_eq!(s.read_replica(2, 1).unwrap(), b"flushed!");
}

#[test]
fn restart_keeps_fsync_open_and_drops_atomic_open() {
    let s = new_store(SyncMode::Fsync);
    s.open(1, 1, false).unwrap();
    s.write(1, 1, 0, b"head").unwrap();
    s.open(1, 2, true).unwrap();
    // Atomic bytes are acknowledged from memory even in fsync mode: unfinished,
    // they are worthless after a crash.
    let syncs = s.stats().syncs;
    s.write(1, 2, 0, b"half copied").unwrap();
    assert_eq!(s.stats().syncs, syncs);
    s.disk().power_loss_all();
    let (s, summary) = restart(s);
    assert_eq!(s.list(), vec![info(1, 1, 4, false, false)]);
    assert_eq!(s.read_replica(1, 1).unwrap(), b"head");
    assert_eq!((summary.open_replicas, summary.discarded_atomic), (1, 0));
    s.write(1, 1, 4, b" segment").unwrap();
    s.close(1, 1).unwrap();
    s.disk().power_loss_all();
    let (s, _) = restart(s);
    assert_eq!(s.list(), vec![info(1, 1, 12, true, false)]);
    assert_eq!(s.read_replica(1, 1).unwrap(), b"head segment");
}

#[test]
fn restart_fsync_keeps_empty_open_replica() {
    let s = new_store(SyncMode::Fsync);
    s.open(5, 6, false).unwrap();
    s.disk().power_loss_all();
    let (s, _) = restart(s);
    assert_eq!(s.list(), vec![info(5, 6, 0, false, false)]);
}

/// Writes a metadata block by hand, as another writer (or a future version) might.
fn put_block(disk: &MemDisk, cfg: &BackupConfig, frame: u32, slot: usize, meta: &ReplicaMetadata) {
    let at = cfg.metadata_offset(frame) + (slot * METADATA_SLOT_BYTES) as u64;
    disk.write_at(at, &meta.encode()).unwrap();
}

fn block(frame: u32, sequence: u64, data: &[u8], closed: bool, atomic: bool) -> ReplicaMetadata {
    ReplicaMetadata {
        master_id: 1,
        segment_id: 1,
        sequence,
        segment_bytes: SEG,
        frame_index: frame,
        length: data.len() as u32,
        data_crc: crc32c::crc32c(data),
        closed,
        atomic,
    }
}

#[test]
fn restart_discards_open_atomic_block() {
    let cfg = config(SyncMode::Fsync);
    let s = BackupStore::create(MemDisk::new(), cfg).unwrap();
    let disk = s.into_disk();
    disk.write_at(cfg.data_offset(2), b"half").unwrap();
    put_block(&disk, &cfg, 2, 0, &block(2, 5, b"half", false, true));
    let (s, summary) = BackupStore::open_existing(disk, cfg).unwrap();
    assert!(s.list().is_empty());
    assert_eq!(summary.discarded_atomic, 1);
    assert_eq!(s.stats().frames_free, 4);
}

#[test]
fn restart_duplicate_keeps_newest_and_clears_other() {
    let cfg = config(SyncMode::Buffered);
    let s = BackupStore::create(MemDisk::new(), cfg).unwrap();
    let disk = s.into_disk();
    disk.write_at(cfg.data_offset(0), b"older").unwrap();
    put_block(&disk, &cfg, 0, 0, &block(0, 10, b"older", true, false));
    disk.write_at(cfg.data_offset(3), b"newer!").unwrap();
    put_block(&disk, &cfg, 3, 1, &block(3, 11, b"newer!", true, false));
    let (s, summary) = BackupStore::open_existing(disk, cfg).unwrap();
    assert_eq!(summary.superseded, 1);
    assert_eq!(s.list(), vec![info(1, 1, 6, true, false)]);
    assert_eq!(s.read_replica(1, 1).unwrap(), b"newer!");
    assert_eq!(s.stats().frames_free, 3);
    // New blocks outrank everything found on disk.
    s.open(2, 2, false).unwrap();
    s.close(2, 2).unwrap();
    s.free(1, 1).unwrap();
    let (s, summary) = restart(s);
    assert_eq!(summary.superseded, 0, "the older copy was cleared");
    assert_eq!(s.list(), vec![info(2, 2, 0, true, false)]);
}

#[test]
fn restart_new_blocks_outrank_stale_slots() {
    // A frame left with a stale, valid-looking block in slot 1 (its data corrupt)
    // is reused; the new replica must win over the stale block on restart.
    let cfg = config(SyncMode::Fsync);
    let s = BackupStore::create(MemDisk::new(), cfg).unwrap();
    let disk = s.into_disk();
    put_block(&disk, &cfg, 0, 1, &block(0, 1000, b"gone", true, false));
    let (s, summary) = BackupStore::open_existing(disk, cfg).unwrap();
    assert_eq!(summary.corrupt.len(), 1);
    s.open(4, 4, false).unwrap();
    s.write(4, 4, 0, b"fresh").unwrap();
    let (s, summary) = restart(s);
    assert!(summary.corrupt.is_empty(), "{summary:?}");
    assert_eq!(s.list(), vec![info(4, 4, 5, false, false)]);
}

#[test]
fn restart_reports_corrupt_data_and_frees_frame() {
    let s = new_store(SyncMode::Buffered);
    s.open(1, 1, false).unwrap();
    s.write(1, 1, 0, &pattern(5, 700)).unwrap();
    s.close(1, 1).unwrap();
    s.disk().corrupt(699, 0x01);
    let (s, summary) = restart(s);
    assert!(s.list().is_empty());
    assert_eq!(summary.corrupt.len(), 1);
    let c = &summary.corrupt[0];
    assert_eq!((c.frame, c.replica), (0, Some((1, 1))));
    assert!(
        matches!(c.problem, FrameProblem::DataChecksum { .. }),
        "{c:?}"
    );
    assert_eq!(s.stats().frames_free, 4);
    s.open(1, 1, false).unwrap();
}

#[test]
fn restart_survives_one_damaged_metadata_copy() {
    for mode in MODES {
        let cfg = config(mode);
        let s = new_store(mode);
        s.open(1, 1, false).unwrap();
        s.write(1, 1, 0, b"twice recorded").unwrap();
        s.close(1, 1).unwrap();
        for slot in 0..2 {
            let s2 = BackupStore::create(MemDisk::new(), cfg).unwrap();
            let disk = s2.into_disk();
            disk.write_at(0, &s.disk().snapshot()).unwrap();
            disk.corrupt(
                cfg.metadata_offset(0) + (slot * METADATA_SLOT_BYTES) as u64 + 20,
                0x40,
            );
            let (s2, summary) = BackupStore::open_existing(disk, cfg).unwrap();
            // Still closed: no older open block stands in for the damaged copy.
            assert_eq!(
                s2.list(),
                vec![info(1, 1, 14, true, false)],
                "{mode:?} slot {slot}"
            );
            assert_eq!(s2.read_replica(1, 1).unwrap(), b"twice recorded");
            assert_eq!(summary.damaged_slots, 1, "{mode:?} slot {slot}");
            assert!(summary.corrupt.is_empty());
        }
        // Both copies damaged: reported, not offered.
        s.disk().corrupt(cfg.metadata_offset(0) + 20, 0x40);
        s.disk().corrupt(
            cfg.metadata_offset(0) + METADATA_SLOT_BYTES as u64 + 33,
            0x02,
        );
        let (s, summary) = restart(s);
        assert!(s.list().is_empty());
        assert_eq!(summary.corrupt.len(), 1);
        assert!(matches!(
            summary.corrupt[0].problem,
            FrameProblem::Metadata(_)
        ));
    }
}

#[test]
fn restart_reports_misplaced_block() {
    let cfg = config(SyncMode::Buffered);
    let s = BackupStore::create(MemDisk::new(), cfg).unwrap();
    let disk = s.into_disk();
    put_block(&disk, &cfg, 1, 0, &block(2, 3, b"", true, false));
    let (s, summary) = BackupStore::open_existing(disk, cfg).unwrap();
    assert!(s.list().is_empty());
    assert_eq!(
        summary.corrupt[0].problem,
        FrameProblem::Misplaced { recorded: 2 }
    );
}

#[test]
fn restart_rejects_wrong_file_size() {
    let s = new_store(SyncMode::Buffered);
    let cfg = BackupConfig {
        frame_count: 5,
        ..config(SyncMode::Buffered)
    };
    let e = BackupStore::open_existing(s.into_disk(), cfg)
        .err()
        .unwrap();
    assert!(matches!(e, BackupError::FileSize { .. }), "{e}");
}

#[test]
fn restart_rejects_other_segment_size() {
    // 2 × (8192 + 4096) = 3 × (4096 + 4096): the file size alone cannot tell.
    let big = BackupConfig {
        frame_count: 2,
        segment_bytes: 8192,
        ..config(SyncMode::Buffered)
    };
    let s = BackupStore::create(MemDisk::new(), big).unwrap();
    for seg in 0..2 {
        s.open(1, seg, false).unwrap();
        s.close(1, seg).unwrap();
    }
    let small = BackupConfig {
        frame_count: 3,
        ..config(SyncMode::Buffered)
    };
    assert_eq!(small.file_bytes(), big.file_bytes());
    let e = BackupStore::open_existing(s.into_disk(), small)
        .err()
        .unwrap();
    assert!(
        matches!(
            e,
            BackupError::LayoutMismatch {
                found: 8192,
                configured: 4096,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn restart_rejects_more_open_replicas_than_buffers() {
    let s = new_store(SyncMode::Fsync);
    s.open(1, 1, false).unwrap();
    s.open(1, 2, false).unwrap();
    let cfg = BackupConfig {
        max_open_buffers: 1,
        ..config(SyncMode::Fsync)
    };
    let e = BackupStore::open_existing(s.into_disk(), cfg)
        .err()
        .unwrap();
    assert!(
        matches!(e, BackupError::TooManyOpenReplicas { found: 2, limit: 1 }),
        "{e}"
    );
}

#[test]
fn power_loss_fsync_keeps_every_acknowledged_write() {
    let s = new_store(SyncMode::Fsync);
    s.open(1, 1, false).unwrap();
    let data = pattern(6, 4000);
    for (i, chunk) in data.chunks(250).enumerate() {
        s.write(1, 1, (i * 250) as u32, chunk).unwrap();
        // Nothing acknowledged is waiting for a sync.
        assert_eq!(s.disk().unsynced_writes(), 0);
    }
    s.disk().power_loss_all();
    let (s, _) = restart(s);
    assert_eq!(s.read_replica(1, 1).unwrap(), data);
}
