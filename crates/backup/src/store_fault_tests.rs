//! The backup store under disk faults: torn and failed writes and syncs, full
//! disks, group commit and racing frees (R§8; the `FaultyDisk` seam).

use super::tests::*;
use super::*;
use crate::config::SyncMode;
use crate::disk::MemDisk;
use crate::faulty::{FaultPlan, FaultyDisk};
use std::io;
use std::time::Duration;

/// How much of a metadata block write a torn write keeps: the first 32 bytes of
/// successive blocks of one replica are equal (magic … segment id), so a tear must
/// reach the sequence field to leave a block that is neither old nor new.
fn torn(len: usize) -> usize {
    len * 5 / 8
}

#[test]
fn power_loss_torn_metadata_keeps_previous_state() {
    // The write after "acked" fails in its sync; the power then fails with that
    // write's metadata block torn (or its data lost): the acknowledged state stays.
    for keep_data in [false, true] {
        let (s, disk) = faulty_store(SyncMode::Fsync);
        s.open(1, 1, false).unwrap();
        s.write(1, 1, 0, b"acked").unwrap();
        s.write(1, 1, 5, b" also acked").unwrap();
        disk.set_plan(FaultPlan {
            fail_sync: Some(1),
            ..FaultPlan::default()
        });
        assert!(s.write(1, 1, 16, b" never acked").is_err());
        let meta_at = s.config().metadata_offset(0);
        disk.inner().power_loss(|offset, len| {
            if offset >= meta_at {
                // Tear the block (or lose it whole when the data write survives).
                if keep_data {
                    0
                } else {
                    torn(len)
                }
            } else if keep_data {
                len
            } else {
                0
            }
        });
        let (s, summary) = restart(s);
        assert_eq!(
            s.read_replica(1, 1).unwrap(),
            b"acked also acked",
            "keep_data {keep_data}"
        );
        assert!(summary.corrupt.is_empty());
    }
    // The block reaches the disk but the bytes it describes do not: the older state
    // is used.
    let (s, disk) = faulty_store(SyncMode::Fsync);
    s.open(1, 1, false).unwrap();
    s.write(1, 1, 0, b"acked").unwrap();
    disk.set_plan(FaultPlan {
        fail_sync: Some(1),
        ..FaultPlan::default()
    });
    assert!(s.write(1, 1, 5, b" lost").is_err());
    let meta_at = s.config().metadata_offset(0);
    disk.inner()
        .power_loss(|offset, len| if offset >= meta_at { len } else { 0 });
    let (s, summary) = restart(s);
    assert_eq!(s.read_replica(1, 1).unwrap(), b"acked");
    assert_eq!(summary.older_state_used, 1);
}

#[test]
fn power_loss_after_two_failed_syncs_keeps_acknowledged_state() {
    // Two writes in a row fail in their sync; neither may overwrite the slot that
    // holds the acknowledged state, whatever the power failure then does to them.
    let (s, disk) = faulty_store(SyncMode::Fsync);
    s.open(1, 1, false).unwrap();
    s.write(1, 1, 0, b"first").unwrap();
    s.write(1, 1, 5, b" acked").unwrap();
    for attempt in [&b" not"[..], b" acked either"] {
        disk.set_plan(FaultPlan {
            fail_sync: Some(1),
            ..FaultPlan::default()
        });
        assert!(s.write(1, 1, 11, attempt).is_err());
    }
    let meta_at = s.config().metadata_offset(0);
    disk.inner()
        .power_loss(|offset, len| if offset >= meta_at { torn(len) } else { len });
    let (s, summary) = restart(s);
    assert_eq!(s.read_replica(1, 1).unwrap(), b"first acked");
    assert!(summary.corrupt.is_empty(), "{summary:?}");
}

#[test]
fn power_loss_after_failed_close_then_failed_write_keeps_acknowledged_state() {
    let (s, disk) = faulty_store(SyncMode::Fsync);
    s.open(1, 1, false).unwrap();
    s.write(1, 1, 0, b"acked").unwrap();
    disk.set_plan(FaultPlan {
        fail_sync: Some(1),
        ..FaultPlan::default()
    });
    assert!(s.close(1, 1).is_err());
    disk.set_plan(FaultPlan {
        fail_sync: Some(1),
        ..FaultPlan::default()
    });
    assert!(s.write(1, 1, 5, b" unacked").is_err());
    let meta_at = s.config().metadata_offset(0);
    disk.inner()
        .power_loss(|offset, len| if offset >= meta_at { torn(len) } else { len });
    let (s, _) = restart(s);
    assert_eq!(s.read_replica(1, 1).unwrap(), b"acked");
}

/// After a failed sync the kernel may have dropped the written pages (they read
/// back fine but never reach the disk): the store must write them again.
#[test]
fn failed_sync_bytes_are_written_again() {
    // Fsync write: the bytes of the failed write are rewritten by the next one.
    let (s, disk) = faulty_store(SyncMode::Fsync);
    s.open(1, 1, false).unwrap();
    s.write(1, 1, 0, b"one ").unwrap();
    disk.set_plan(FaultPlan {
        fail_sync: Some(1),
        ..FaultPlan::default()
    });
    assert!(s.write(1, 1, 4, b"two ").is_err());
    disk.inner().drop_unsynced();
    s.write(1, 1, 4, b"two three").unwrap();
    disk.inner().power_loss_all();
    let (s, _) = restart(s);
    assert_eq!(s.read_replica(1, 1).unwrap(), b"one two three");

    // Buffered: the write put its bytes in the file (page cache) unsynced; the
    // flush's sync fails and drops them, so the close must write them again.
    let (s, disk) = faulty_store(SyncMode::Buffered);
    s.open(1, 1, false).unwrap();
    s.write(1, 1, 0, b"flushed?").unwrap();
    disk.set_plan(FaultPlan {
        fail_sync: Some(1),
        ..FaultPlan::default()
    });
    assert!(s.flush().is_err());
    disk.inner().drop_unsynced();
    s.close(1, 1).unwrap();
    disk.inner().power_loss_all();
    let (s, summary) = restart(s);
    assert!(summary.corrupt.is_empty(), "{summary:?}");
    assert_eq!(s.read_replica(1, 1).unwrap(), b"flushed?");
}

/// Buffered: a failed sync (here a close's) may drop the unsynced pages of every
/// open replica, not only its own; each close after it must write them again.
#[test]
fn failed_sync_drops_buffered_bytes_of_every_replica_and_close_rewrites_them() {
    let (s, disk) = faulty_store(SyncMode::Buffered);
    s.open(1, 1, false).unwrap();
    s.write(1, 1, 0, b"bystander").unwrap();
    s.open(1, 2, false).unwrap();
    s.write(1, 2, 0, b"closing").unwrap();
    disk.set_plan(FaultPlan {
        fail_sync: Some(1),
        ..FaultPlan::default()
    });
    assert!(s.close(1, 2).is_err());
    disk.inner().drop_unsynced();
    s.close(1, 2).unwrap();
    s.close(1, 1).unwrap();
    disk.inner().power_loss_all();
    let (s, summary) = restart(s);
    assert!(summary.corrupt.is_empty(), "{summary:?}");
    assert_eq!(s.read_replica(1, 2).unwrap(), b"closing");
    assert_eq!(s.read_replica(1, 1).unwrap(), b"bystander");
}

#[test]
fn faulty_failed_overwrite_then_append_stays_consistent() {
    // A failed overwrite may have changed the bytes on disk; the next write must
    // not describe bytes the disk does not hold.
    for fault in [
        FaultPlan {
            fail_sync: Some(1),
            ..FaultPlan::default()
        },
        FaultPlan {
            fail_write: Some(2),
            ..FaultPlan::default()
        },
    ] {
        let (s, disk) = faulty_store(SyncMode::Fsync);
        s.open(1, 1, false).unwrap();
        s.write(1, 1, 0, b"aaaaaaaa").unwrap();
        disk.set_plan(fault);
        assert!(s.write(1, 1, 2, b"BBBB").is_err());
        disk.heal();
        assert_eq!(s.read_replica(1, 1).unwrap(), b"aaaaaaaa");
        s.write(1, 1, 8, b"cc").unwrap();
        let (s, summary) = restart(s);
        assert!(summary.corrupt.is_empty(), "{fault:?}: {summary:?}");
        assert_eq!(s.read_replica(1, 1).unwrap(), b"aaaaaaaacc", "{fault:?}");
    }
}

#[test]
fn power_loss_buffered_loses_only_open_bytes() {
    let s = new_store(SyncMode::Buffered);
    s.open(1, 1, false).unwrap();
    s.write(1, 1, 0, b"closed").unwrap();
    s.close(1, 1).unwrap();
    s.open(1, 2, false).unwrap();
    s.write(1, 2, 0, b"open").unwrap();
    s.disk().power_loss_all();
    let (s, _) = restart(s);
    assert_eq!(s.list(), vec![info(1, 1, 6, true, false)]);
}

#[test]
fn faulty_write_during_close_leaves_replica_open() {
    for tear in [false, true] {
        let (s, disk) = faulty_store(SyncMode::Buffered);
        s.open(1, 1, false).unwrap();
        s.write(1, 1, 0, &pattern(7, 1000)).unwrap();
        disk.set_plan(FaultPlan {
            fail_write: Some(1),
            tear_failed_write: tear,
            ..FaultPlan::default()
        });
        let e = s.close(1, 1).unwrap_err();
        assert!(matches!(e, BackupError::Io { .. }), "{e}");
        assert_eq!(s.list(), vec![info(1, 1, 1000, false, false)]);
        assert_eq!(s.stats().open_buffers_in_use, 1);
        // The replica is intact and still takes writes; a second close works.
        s.write(1, 1, 1000, b"more").unwrap();
        s.close(1, 1).unwrap();
        let expect = [pattern(7, 1000), b"more".to_vec()].concat();
        assert_eq!(s.read_replica(1, 1).unwrap(), expect);
        let (s, summary) = restart(s);
        assert_eq!(s.read_replica(1, 1).unwrap(), expect);
        assert!(summary.corrupt.is_empty());
    }
}

#[test]
fn faulty_open_in_fsync_mode_takes_nothing() {
    let (s, disk) = faulty_store(SyncMode::Fsync);
    disk.set_plan(FaultPlan {
        fail_sync: Some(1),
        ..FaultPlan::default()
    });
    assert!(s.open(1, 1, false).is_err());
    let st = s.stats();
    assert_eq!(
        (st.replicas, st.frames_free, st.open_buffers_in_use),
        (0, 4, 0)
    );
    s.open(1, 1, false).unwrap();
    s.write(1, 1, 0, b"ok").unwrap();
    assert_eq!(s.read_replica(1, 1).unwrap(), b"ok");
}

#[test]
fn faulty_free_keeps_replica() {
    for mode in MODES {
        let (s, disk) = faulty_store(mode);
        s.open(1, 1, false).unwrap();
        s.write(1, 1, 0, b"keep me").unwrap();
        s.close(1, 1).unwrap();
        disk.set_plan(FaultPlan {
            fail_write: Some(1),
            tear_failed_write: true,
            ..FaultPlan::default()
        });
        assert!(s.free(1, 1).is_err());
        assert_eq!(s.read_replica(1, 1).unwrap(), b"keep me");
        s.free(1, 1).unwrap();
        let (s, _) = restart(s);
        assert!(s.list().is_empty());
    }
}

#[test]
fn full_disk_reports_storage_full() {
    // A write of an open non-atomic replica goes to the file in both modes, so a
    // full disk fails the write itself (not only the close), before it is
    // acknowledged.
    for mode in MODES {
        let (s, disk) = faulty_store(mode);
        s.open(1, 1, false).unwrap();
        s.write(1, 1, 0, b"small").unwrap();
        s.close(1, 1).unwrap();
        // Room for the open's metadata slots, not for the bytes.
        disk.set_plan(FaultPlan {
            space_bytes: Some(METADATA_SLOTS_BYTES as u64 + 100),
            ..FaultPlan::default()
        });
        s.open(1, 2, false).unwrap();
        let e = s.write(1, 2, 0, &pattern(8, 2000)).unwrap_err();
        match &e {
            BackupError::Io { source, .. } => {
                assert_eq!(source.kind(), io::ErrorKind::StorageFull, "{mode:?}")
            }
            other => panic!("{mode:?}: {other}"),
        }
        // Everything else still works and the failed write took nothing; once
        // space returns, the write and the close succeed.
        assert_eq!(s.read_replica(1, 1).unwrap(), b"small");
        assert_eq!(s.list()[1], info(1, 2, 0, false, false), "{mode:?}");
        disk.heal();
        s.write(1, 2, 0, &pattern(8, 2000)).unwrap();
        s.close(1, 2).unwrap();
        let (s, summary) = restart(s);
        assert!(summary.corrupt.is_empty(), "{mode:?}: {summary:?}");
        assert_eq!(s.read_replica(1, 2).unwrap(), pattern(8, 2000));
    }
}

/// What the script below leaves, replica by replica: (id, bytes, closed).
type Expected = Vec<((u64, u64), Vec<u8>, bool)>;

/// A fixed script of operations; each failed operation is repeated once (only one
/// disk operation fails per run, so the repetition must succeed).
fn run_script<D: Disk>(s: &BackupStore<D>) -> (Expected, u32) {
    let mut failures = 0;
    let mut again = |op: &dyn Fn() -> Result<(), BackupError>| {
        if op().is_err() {
            failures += 1;
            op().unwrap();
        }
    };
    let a = pattern(9, 1500);
    let b = pattern(10, 900);
    again(&|| s.open(1, 1, false));
    again(&|| s.write(1, 1, 0, &a[..700]));
    again(&|| s.open(1, 2, true));
    again(&|| s.write(1, 2, 0, &b));
    again(&|| s.write(1, 1, 700, &a[700..]));
    again(&|| s.close(1, 2));
    again(&|| s.open(1, 3, false));
    again(&|| s.write(1, 3, 0, b"to be freed"));
    again(&|| s.close(1, 1));
    again(&|| s.free(1, 3));
    again(&|| s.open(2, 1, false));
    again(&|| s.write(2, 1, 0, b"open at the end"));
    let expected = vec![
        ((1, 1), a, true),
        ((1, 2), b, true),
        ((2, 1), b"open at the end".to_vec(), false),
    ];
    (expected, failures)
}

fn check_expected<D: Disk>(
    s: &BackupStore<D>,
    expected: &Expected,
    open_survives: bool,
    ctx: &str,
) {
    let want: Vec<ReplicaInfo> = expected
        .iter()
        .filter(|(_, _, closed)| *closed || open_survives)
        .map(|((m, g), bytes, closed)| info(*m, *g, bytes.len() as u32, *closed, *g == 2))
        .collect();
    assert_eq!(s.list(), want, "{ctx}");
    for ((m, g), bytes, closed) in expected {
        if *closed || open_survives {
            assert_eq!(&s.read_replica(*m, *g).unwrap(), bytes, "{ctx}");
        }
    }
}

#[test]
fn faulty_every_write_position_recovers() {
    for mode in MODES {
        let (s, disk) = faulty_store(mode);
        let before = disk.writes();
        run_script(&s);
        let total = disk.writes() - before;
        assert!(total >= 5);
        for n in 1..=total {
            for tear in [false, true] {
                let (s, disk) = faulty_store(mode);
                disk.set_plan(FaultPlan {
                    fail_write: Some(n),
                    tear_failed_write: tear,
                    ..FaultPlan::default()
                });
                let (expected, failures) = run_script(&s);
                let ctx = format!("{mode:?} write {n} tear {tear}");
                assert!(failures <= 1, "{ctx}");
                check_expected(&s, &expected, true, &ctx);
                // A restart of the process: the open replica's acknowledged bytes
                // are in the file in both modes (buffered: in the page cache).
                let (s, summary) = restart(s);
                check_expected(&s, &expected, true, &ctx);
                assert!(summary.corrupt.is_empty(), "{ctx}: {summary:?}");
            }
        }
    }
}

#[test]
fn faulty_every_sync_position_recovers() {
    for mode in MODES {
        let (s, disk) = faulty_store(mode);
        let before = disk.syncs();
        run_script(&s);
        let total = disk.syncs() - before;
        assert!(total >= 2);
        for n in 1..=total {
            let (s, disk) = faulty_store(mode);
            disk.set_plan(FaultPlan {
                fail_sync: Some(n),
                ..FaultPlan::default()
            });
            let (expected, failures) = run_script(&s);
            let ctx = format!("{mode:?} sync {n}");
            assert_eq!(failures, 1, "{ctx}");
            check_expected(&s, &expected, true, &ctx);
            // Power fails at the end: what was acknowledged is there.
            s.flush().unwrap();
            disk.inner().power_loss_all();
            let (s, summary) = restart(s);
            check_expected(&s, &expected, true, &ctx);
            assert!(summary.corrupt.is_empty(), "{ctx}: {summary:?}");
        }
    }
}

#[test]
fn group_commit_shares_syncs_between_writers() {
    const WRITERS: u64 = 8;
    const WRITES: u64 = 16;
    const CHUNK: usize = 200;
    let disk = Arc::new(FaultyDisk::new(MemDisk::new()));
    let cfg = BackupConfig {
        frame_count: WRITERS as u32,
        max_open_buffers: WRITERS as u32,
        ..config(SyncMode::Fsync)
    };
    let s = BackupStore::create(Arc::clone(&disk), cfg).unwrap();
    for w in 0..WRITERS {
        s.open(w, 0, false).unwrap();
    }
    disk.set_plan(FaultPlan {
        sync_delay: Duration::from_millis(2),
        ..FaultPlan::default()
    });
    let syncs_before = disk.syncs();
    std::thread::scope(|scope| {
        for w in 0..WRITERS {
            let s = &s;
            scope.spawn(move || {
                let data = pattern(w as u8, CHUNK * WRITES as usize);
                for (i, chunk) in data.chunks(CHUNK).enumerate() {
                    s.write(w, 0, (i * CHUNK) as u32, chunk).unwrap();
                }
            });
        }
    });
    let syncs = disk.syncs() - syncs_before;
    let writes = WRITERS * WRITES;
    eprintln!("group commit: {syncs} syncs for {writes} concurrent fsync writes");
    assert!(syncs >= 1);
    assert!(
        syncs <= writes / 2,
        "{syncs} syncs for {writes} concurrent writes"
    );
    disk.inner().power_loss_all();
    let (s, _) = restart(s);
    for w in 0..WRITERS {
        assert_eq!(
            s.read_replica(w, 0).unwrap(),
            pattern(w as u8, CHUNK * WRITES as usize)
        );
    }
}

#[test]
fn free_racing_writes_never_touch_new_owner() {
    // One frame: whatever a late write to the freed replica does, it must not land
    // in the frame's next replica.
    for mode in MODES {
        let cfg = BackupConfig {
            frame_count: 1,
            max_open_buffers: 1,
            ..config(mode)
        };
        let s = BackupStore::create(MemDisk::new(), cfg).unwrap();
        for round in 0..20u64 {
            s.open(1, round, false).unwrap();
            std::thread::scope(|scope| {
                let s = &s;
                scope.spawn(move || {
                    for i in 0..50u32 {
                        let _ = s.write(1, round, i, b"x");
                    }
                });
                s.free(1, round).unwrap_or_else(|e| panic!("{e}"));
                s.open(2, round, false).unwrap();
                s.write(2, round, 0, b"new owner").unwrap();
                s.close(2, round).unwrap();
            });
            assert_eq!(s.read_replica(2, round).unwrap(), b"new owner");
            s.free(2, round).unwrap();
        }
    }
}
