use super::*;
use crate::config::SyncMode;
use crate::disk::MemDisk;
use crate::faulty::FaultyDisk;

pub(super) const SEG: u32 = 4096;
pub(super) const MODES: [SyncMode; 2] = [SyncMode::Buffered, SyncMode::Fsync];

pub(super) fn config(mode: SyncMode) -> BackupConfig {
    BackupConfig {
        frame_count: 4,
        segment_bytes: SEG,
        max_open_buffers: 2,
        sync_mode: mode,
    }
}

pub(super) fn new_store(mode: SyncMode) -> BackupStore<MemDisk> {
    BackupStore::create(MemDisk::new(), config(mode)).unwrap()
}

pub(super) fn faulty_store(
    mode: SyncMode,
) -> (
    BackupStore<Arc<FaultyDisk<MemDisk>>>,
    Arc<FaultyDisk<MemDisk>>,
) {
    let disk = Arc::new(FaultyDisk::new(MemDisk::new()));
    let store = BackupStore::create(Arc::clone(&disk), config(mode)).unwrap();
    (store, disk)
}

pub(super) fn restart<D: Disk>(store: BackupStore<D>) -> (BackupStore<D>, RestartSummary) {
    let cfg = *store.config();
    BackupStore::open_existing(store.into_disk(), cfg).unwrap()
}

/// `n` bytes that differ from those of other seeds.
pub(super) fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

pub(super) fn info(
    master_id: u64,
    segment_id: u64,
    length: u32,
    closed: bool,
    atomic: bool,
) -> ReplicaInfo {
    ReplicaInfo {
        master_id,
        segment_id,
        length,
        closed,
        atomic,
    }
}

#[test]
fn store_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<BackupStore<MemDisk>>();
    check::<BackupStore<crate::FileDisk>>();
    check::<BackupStore<Box<dyn Disk>>>();
}

#[test]
fn store_debug_shows_config_and_stats() {
    let s = new_store(SyncMode::Fsync);
    let text = format!("{s:?}");
    assert!(
        text.contains("Fsync") && text.contains("frames_free: 4"),
        "{text}"
    );
    assert!(format!("{:?}", s.disk()).contains("MemDisk"));
}

#[test]
fn create_rejects_bad_config() {
    let bad = BackupConfig {
        segment_bytes: 1000,
        ..config(SyncMode::Buffered)
    };
    let e = BackupStore::create(MemDisk::new(), bad).err().unwrap();
    assert!(matches!(e, BackupError::Config(_)), "{e}");
}

#[test]
fn create_blanks_earlier_replicas() {
    let s = new_store(SyncMode::Buffered);
    s.open(1, 1, false).unwrap();
    s.write(1, 1, 0, b"old").unwrap();
    s.close(1, 1).unwrap();
    let s = BackupStore::create(s.into_disk(), config(SyncMode::Buffered)).unwrap();
    assert!(s.list().is_empty());
    let (s, summary) = restart(s);
    assert!(s.list().is_empty());
    assert_eq!(summary.empty_frames, 4);
}

#[test]
fn open_new_replica_is_listed_open_and_empty() {
    for mode in MODES {
        let s = new_store(mode);
        s.open(7, 3, false).unwrap();
        assert_eq!(s.list(), vec![info(7, 3, 0, false, false)]);
        assert_eq!(s.read_replica(7, 3).unwrap(), b"");
        assert_eq!(s.info(7, 3), Some(info(7, 3, 0, false, false)));
        assert_eq!(s.info(7, 4), None);
    }
}

#[test]
fn open_same_replica_is_idempotent() {
    for mode in MODES {
        let s = new_store(mode);
        s.open(1, 1, true).unwrap();
        s.write(1, 1, 0, b"abc").unwrap();
        let before = s.stats();
        s.open(1, 1, true).unwrap();
        assert_eq!(s.stats(), before);
        assert_eq!(s.list(), vec![info(1, 1, 3, false, true)]);
    }
}

#[test]
fn open_closed_replica_rejected() {
    let s = new_store(SyncMode::Buffered);
    s.open(1, 1, false).unwrap();
    s.close(1, 1).unwrap();
    let e = s.open(1, 1, false).unwrap_err();
    assert!(
        matches!(
            e,
            BackupError::Closed {
                master_id: 1,
                segment_id: 1
            }
        ),
        "{e}"
    );
}

#[test]
fn open_in_other_mode_rejected() {
    let s = new_store(SyncMode::Buffered);
    s.open(1, 1, false).unwrap();
    let e = s.open(1, 1, true).unwrap_err();
    assert!(
        matches!(e, BackupError::AtomicMismatch { atomic: false, .. }),
        "{e}"
    );
}

#[test]
fn open_beyond_buffers_rejected_until_close() {
    for mode in MODES {
        let s = new_store(mode);
        s.open(1, 1, false).unwrap();
        s.open(1, 2, true).unwrap();
        let e = s.open(1, 3, false).unwrap_err();
        assert!(matches!(e, BackupError::BuffersFull { limit: 2 }), "{e}");
        assert!(e.is_full());
        // A rejected open takes nothing.
        assert_eq!(s.stats().frames_free, 2);
        s.close(1, 1).unwrap();
        s.open(1, 3, false).unwrap();
        assert_eq!(s.stats().open_buffers_in_use, 2);
    }
}

#[test]
fn open_beyond_frames_rejected_until_free() {
    for mode in MODES {
        let s = new_store(mode);
        for seg in 0..4 {
            s.open(1, seg, false).unwrap();
            s.close(1, seg).unwrap();
        }
        let e = s.open(1, 4, false).unwrap_err();
        assert!(matches!(e, BackupError::FramesFull { frames: 4 }), "{e}");
        assert!(e.is_full());
        assert_eq!(s.stats().open_buffers_in_use, 0);
        s.free(1, 2).unwrap();
        s.open(1, 4, false).unwrap();
    }
}

#[test]
fn write_appends_and_reads_back() {
    for mode in MODES {
        let s = new_store(mode);
        s.open(1, 1, false).unwrap();
        let data = pattern(1, 3000);
        s.write(1, 1, 0, &data[..1000]).unwrap();
        s.write(1, 1, 1000, &data[1000..]).unwrap();
        assert_eq!(s.read_replica(1, 1).unwrap(), data);
        s.close(1, 1).unwrap();
        assert_eq!(s.read_replica(1, 1).unwrap(), data);
        assert_eq!(s.list(), vec![info(1, 1, 3000, true, false)]);
    }
}

#[test]
fn write_retransmission_changes_nothing() {
    for mode in MODES {
        let s = new_store(mode);
        s.open(1, 1, false).unwrap();
        let data = pattern(2, 200);
        s.write(1, 1, 0, &data[..150]).unwrap();
        let syncs = s.stats().syncs;
        s.write(1, 1, 0, &data[..150]).unwrap();
        s.write(1, 1, 50, &data[50..100]).unwrap();
        s.write(1, 1, 150, &[]).unwrap();
        assert_eq!(s.stats().syncs, syncs, "{mode:?}: retransmissions synced");
        // A retransmission that also carries new bytes appends them.
        s.write(1, 1, 100, &data[100..]).unwrap();
        assert_eq!(s.read_replica(1, 1).unwrap(), data);
        let (s, _) = restart(s);
        if mode == SyncMode::Fsync {
            assert_eq!(s.read_replica(1, 1).unwrap(), data);
        }
    }
}

#[test]
fn write_overwrite_replaces_bytes() {
    for mode in MODES {
        let s = new_store(mode);
        s.open(1, 1, false).unwrap();
        s.write(1, 1, 0, b"hello world").unwrap();
        s.write(1, 1, 6, b"WOR").unwrap();
        s.write(1, 1, 9, b"LDS!").unwrap();
        assert_eq!(s.read_replica(1, 1).unwrap(), b"hello WORLDS!");
        if mode == SyncMode::Fsync {
            let (s2, summary) = restart(s);
            assert!(summary.corrupt.is_empty());
            assert_eq!(s2.read_replica(1, 1).unwrap(), b"hello WORLDS!");
            s2.close(1, 1).unwrap();
            assert_eq!(s2.read_replica(1, 1).unwrap(), b"hello WORLDS!");
        } else {
            s.close(1, 1).unwrap();
            assert_eq!(s.read_replica(1, 1).unwrap(), b"hello WORLDS!");
        }
    }
}

#[test]
fn write_gap_rejected() {
    for mode in MODES {
        let s = new_store(mode);
        s.open(1, 1, false).unwrap();
        s.write(1, 1, 0, b"abc").unwrap();
        let e = s.write(1, 1, 4, b"e").unwrap_err();
        assert!(
            matches!(
                e,
                BackupError::Gap {
                    offset: 4,
                    length: 3
                }
            ),
            "{e}"
        );
        assert_eq!(s.read_replica(1, 1).unwrap(), b"abc");
    }
}

#[test]
fn write_past_frame_rejected() {
    for mode in MODES {
        let s = new_store(mode);
        s.open(1, 1, false).unwrap();
        let full = pattern(3, SEG as usize);
        let e = s
            .write(1, 1, 0, &[full.as_slice(), b"x"].concat())
            .unwrap_err();
        assert!(
            matches!(
                e,
                BackupError::PastFrameEnd {
                    offset: 0,
                    bytes: 4097,
                    segment_bytes: SEG
                }
            ),
            "{e}"
        );
        let e = s.write(1, 1, u32::MAX, b"x").unwrap_err();
        assert!(matches!(e, BackupError::PastFrameEnd { .. }), "{e}");
        s.write(1, 1, 0, &full[..100]).unwrap();
        s.write(1, 1, 100, &full[100..]).unwrap();
        let e = s.write(1, 1, SEG, b"x").unwrap_err();
        assert!(matches!(e, BackupError::PastFrameEnd { .. }), "{e}");
        s.close(1, 1).unwrap();
        assert_eq!(s.read_replica(1, 1).unwrap(), full);
    }
}

#[test]
fn write_closed_rejected() {
    for mode in MODES {
        let s = new_store(mode);
        s.open(1, 1, false).unwrap();
        s.write(1, 1, 0, b"abc").unwrap();
        s.close(1, 1).unwrap();
        for (offset, bytes) in [(0, &b"abc"[..]), (3, b"d")] {
            let e = s.write(1, 1, offset, bytes).unwrap_err();
            assert!(matches!(e, BackupError::Closed { .. }), "{e}");
        }
        assert_eq!(s.read_replica(1, 1).unwrap(), b"abc");
    }
}

#[test]
fn operations_on_unknown_replica_rejected() {
    let s = new_store(SyncMode::Fsync);
    let unknown = |e: BackupError| {
        matches!(
            e,
            BackupError::UnknownReplica {
                master_id: 9,
                segment_id: 9
            }
        )
    };
    assert!(unknown(s.write(9, 9, 0, b"x").unwrap_err()));
    assert!(unknown(s.close(9, 9).unwrap_err()));
    assert!(unknown(s.free(9, 9).unwrap_err()));
    assert!(unknown(s.read_replica(9, 9).unwrap_err()));
    s.open(9, 9, false).unwrap();
    s.free(9, 9).unwrap();
    assert!(unknown(s.free(9, 9).unwrap_err()));
    assert!(unknown(s.write(9, 9, 0, b"x").unwrap_err()));
}

#[test]
fn close_is_idempotent_and_releases_buffer() {
    for mode in MODES {
        let s = new_store(mode);
        s.open(1, 1, false).unwrap();
        s.write(1, 1, 0, b"abc").unwrap();
        assert_eq!(s.stats().open_buffers_in_use, 1);
        s.close(1, 1).unwrap();
        assert_eq!(s.stats().open_buffers_in_use, 0);
        let syncs = s.stats().syncs;
        s.close(1, 1).unwrap();
        assert_eq!(s.stats().syncs, syncs);
        assert_eq!(s.list(), vec![info(1, 1, 3, true, false)]);
    }
}

#[test]
fn close_syncs_in_both_modes() {
    for mode in MODES {
        let s = new_store(mode);
        s.open(1, 1, true).unwrap();
        s.write(1, 1, 0, b"atomic").unwrap();
        s.close(1, 1).unwrap();
        // A power failure right after the close keeps the replica.
        s.disk().power_loss_all();
        let (s, summary) = restart(s);
        assert_eq!(s.list(), vec![info(1, 1, 6, true, true)]);
        assert_eq!(s.read_replica(1, 1).unwrap(), b"atomic");
        assert_eq!(summary.closed_replicas, 1);
    }
}

#[test]
fn free_returns_frame_and_buffer() {
    for mode in MODES {
        let s = new_store(mode);
        s.open(1, 1, false).unwrap();
        s.write(1, 1, 0, b"open").unwrap();
        s.open(1, 2, false).unwrap();
        s.write(1, 2, 0, b"closed").unwrap();
        s.close(1, 2).unwrap();
        assert_eq!(s.stats().frames_free, 2);
        s.free(1, 1).unwrap();
        s.free(1, 2).unwrap();
        let st = s.stats();
        assert_eq!(
            (
                st.frames_free,
                st.open_buffers_in_use,
                st.replicas,
                st.bytes_on_disk
            ),
            (4, 0, 0, 0)
        );
        assert!(s.list().is_empty());
        // The same replica can be opened again, empty.
        s.open(1, 2, false).unwrap();
        assert_eq!(s.read_replica(1, 2).unwrap(), b"");
    }
}

#[test]
fn read_atomic_replica_only_once_closed() {
    for mode in MODES {
        let s = new_store(mode);
        s.open(1, 1, true).unwrap();
        s.write(1, 1, 0, b"partial").unwrap();
        let e = s.read_replica(1, 1).unwrap_err();
        assert!(matches!(e, BackupError::NotClosed { .. }), "{e}");
        s.close(1, 1).unwrap();
        assert_eq!(s.read_replica(1, 1).unwrap(), b"partial");
    }
}

#[test]
fn read_closed_replica_detects_corruption() {
    let s = new_store(SyncMode::Buffered);
    s.open(1, 1, false).unwrap();
    s.write(1, 1, 0, &pattern(4, 500)).unwrap();
    s.close(1, 1).unwrap();
    // Frame 0 holds the first replica.
    s.disk().corrupt(123, 0x10);
    let e = s.read_replica(1, 1).unwrap_err();
    assert!(
        matches!(
            e,
            BackupError::Corrupt {
                master_id: 1,
                segment_id: 1,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn stats_track_frames_buffers_bytes() {
    for mode in MODES {
        let s = new_store(mode);
        let st = s.stats();
        assert_eq!(
            (
                st.frames_total,
                st.frames_free,
                st.replicas,
                st.open_buffers_in_use,
                st.open_buffers_max,
                st.bytes_on_disk
            ),
            (4, 4, 0, 0, 2, 0)
        );
        // Writes of an open non-atomic replica go to the file in both modes
        // (buffered: not synced yet), so they count at once.
        s.open(1, 1, false).unwrap();
        s.write(1, 1, 0, &[7; 100]).unwrap();
        assert_eq!(s.stats().bytes_on_disk, 100, "{mode:?}");
        s.close(1, 1).unwrap();
        s.open(1, 2, false).unwrap();
        s.write(1, 2, 0, &[7; 50]).unwrap();
        let st = s.stats();
        assert_eq!(
            (st.frames_free, st.replicas, st.open_buffers_in_use),
            (2, 2, 1)
        );
        assert_eq!(st.bytes_on_disk, 150, "{mode:?}");
        // An open atomic replica stays in memory: its bytes do not count.
        s.open(1, 3, true).unwrap();
        s.write(1, 3, 0, &[7; 30]).unwrap();
        assert_eq!(s.stats().bytes_on_disk, 150, "{mode:?}");
        s.flush().unwrap();
        assert_eq!(s.stats().bytes_on_disk, 150, "{mode:?}");
        s.free(1, 1).unwrap();
        assert_eq!(s.stats().bytes_on_disk, 50);
        // The restart drops the open atomic replica and keeps the other one.
        let (s, _) = restart(s);
        assert_eq!(s.stats().bytes_on_disk, 50);
        assert_eq!(s.stats().open_buffers_in_use, 1);
    }
}
