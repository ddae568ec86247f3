//! Zombie fence and restart retention (R§7.11, R§8) of [`BackupService`], on an
//! in-memory disk.

use std::time::{Duration, Instant};

use ramstore_backup::MemDisk;
use ramstore_wire::{decode_response, BackupWriteFlags, ErrorBody, Request, Response, Status};

use super::*;

const SEG: u32 = 4096;

fn config(mode: SyncMode) -> BackupConfig {
    BackupConfig {
        frame_count: 8,
        segment_bytes: SEG,
        max_open_buffers: 4,
        sync_mode: mode,
    }
}

fn empty_store(mode: SyncMode) -> ServerBackupStore {
    BackupStore::create(Box::new(MemDisk::new()) as Box<dyn Disk>, config(mode)).unwrap()
}

const OPEN: BackupWriteFlags = BackupWriteFlags {
    open: true,
    close: false,
    atomic: false,
    reserve: false,
};
const WRITE: BackupWriteFlags = BackupWriteFlags {
    open: false,
    close: false,
    atomic: false,
    reserve: false,
};

/// Sends `req` to the service; returns the status and, for an error, its message.
fn call(service: &BackupService, req: &Request<'_>) -> (Status, String) {
    let mut out = Vec::new();
    service.answer(9, req, &mut out).unwrap();
    let (header, response) = decode_response(&out).unwrap();
    let message = match response {
        Response::Error(ErrorBody::Message { message, .. }) => message.to_string(),
        _ => String::new(),
    };
    (header.status, message)
}

fn write(
    service: &BackupService,
    master_id: u64,
    segment_id: u64,
    offset: u32,
    flags: BackupWriteFlags,
) -> (Status, String) {
    call(
        service,
        &Request::BackupWrite {
            master_id,
            segment_id,
            offset,
            flags,
            bytes: b"0123456789",
        },
    )
}

fn held(service: &BackupService) -> Vec<(u64, u64)> {
    service
        .store()
        .list()
        .into_iter()
        .map(|r| (r.master_id, r.segment_id))
        .collect()
}

#[test]
fn a_crashed_masters_writes_are_refused_while_other_masters_write() {
    for mode in [SyncMode::Buffered, SyncMode::Fsync] {
        let service = BackupService::new(empty_store(mode));
        // Before any list, everyone writes.
        assert_eq!(write(&service, 5, 1, 0, OPEN).0, Status::Ok);
        assert_eq!(write(&service, 6, 1, 0, OPEN).0, Status::Ok);

        service.apply_server_list(&[(5, ServerState::Crashed), (6, ServerState::Up)]);
        for (segment_id, offset, flags) in [(1, 10, WRITE), (2, 0, OPEN)] {
            let (status, message) = write(&service, 5, segment_id, offset, flags);
            assert_eq!(status, Status::ServerNotUp, "{mode:?}");
            assert_eq!(
                message, "master 5 crashed; its replication is refused (zombie fence)",
                "{mode:?}"
            );
        }
        assert_eq!(write(&service, 6, 1, 10, WRITE).0, Status::Ok, "{mode:?}");
        assert_eq!(write(&service, 6, 2, 0, OPEN).0, Status::Ok, "{mode:?}");
        // Nothing of the refused writes reached the store.
        assert_eq!(held(&service), vec![(5, 1), (6, 1), (6, 2)], "{mode:?}");
        assert_eq!(service.store().info(5, 1).unwrap().length, 10, "{mode:?}");

        // Recovery still lists and reads the crashed master's replicas; its master
        // (or the coordinator) may still free them.
        let listed = call(&service, &Request::BackupGetReplicas { master_id: 5 });
        assert_eq!(listed.0, Status::Ok);
        let read = call(
            &service,
            &Request::BackupReadReplica {
                master_id: 5,
                segment_id: 1,
            },
        );
        assert_eq!(read.0, Status::Ok);
        let freed = call(
            &service,
            &Request::BackupFree {
                master_id: 5,
                segment_id: 1,
            },
        );
        assert_eq!(freed.0, Status::Ok);

        // Applying again, or an older list that still shows it up, changes nothing;
        // a removed master is fenced too.
        service.apply_server_list(&[(5, ServerState::Crashed), (6, ServerState::Up)]);
        service.apply_server_list(&[(5, ServerState::Up), (6, ServerState::Up)]);
        assert_eq!(write(&service, 5, 3, 0, OPEN).0, Status::ServerNotUp);
        service.apply_server_list(&[(5, ServerState::Removed), (6, ServerState::Removed)]);
        assert_eq!(write(&service, 6, 1, 20, WRITE).0, Status::ServerNotUp);
        assert_eq!(service.fenced_writes(), 4, "{mode:?}");

        let mut lines = Vec::new();
        service.stats_lines(&mut |k, v| lines.push(format!("{k}={v}")));
        for expected in [
            "backup_fenced_masters=2",
            "backup_fenced_writes=4",
            // Master 6 was removed: the replicas it wrote in this run are freed (R§8).
            "backup_retention_frees=2",
        ] {
            assert!(lines.iter().any(|l| l == expected), "{expected}: {lines:?}");
        }
    }
}

/// A store that held closed replicas of masters 1 to 4 (two of master 3) and was
/// reopened, as after a restart; master 5 wrote after the restart.
fn restarted_service(mode: SyncMode) -> BackupService {
    let store = empty_store(mode);
    for (master_id, segment_id) in [(1, 1), (2, 1), (3, 1), (3, 2), (4, 1)] {
        store.open(master_id, segment_id, false).unwrap();
        store.write(master_id, segment_id, 0, b"replica").unwrap();
        store.close(master_id, segment_id).unwrap();
    }
    let (store, summary) = BackupStore::open_existing(store.into_disk(), config(mode)).unwrap();
    assert_eq!(summary.closed_replicas, 5);
    let service = BackupService::new(store);
    assert_eq!(write(&service, 5, 1, 0, OPEN).0, Status::Ok);
    service
}

#[test]
fn after_a_restart_only_removed_masters_replicas_are_freed() {
    for mode in [SyncMode::Buffered, SyncMode::Fsync] {
        let service = restarted_service(mode);
        let all = vec![(1, 1), (2, 1), (3, 1), (3, 2), (4, 1), (5, 1)];
        assert_eq!(held(&service), all, "nothing is decided before a list");

        // 1 crashed (recovery needs it), 2 up (it re-replicates and frees), 3
        // removed, 4 unknown to the list (kept, with a warning).
        let list = [
            (1, ServerState::Crashed),
            (2, ServerState::Up),
            (3, ServerState::Removed),
            (5, ServerState::Up),
        ];
        // No Tokio runtime here: the frees run before `apply_server_list` returns.
        service.apply_server_list(&list);
        assert_eq!(
            held(&service),
            vec![(1, 1), (2, 1), (4, 1), (5, 1)],
            "{mode:?}"
        );
        assert_eq!(service.retention_frees(), 2, "{mode:?}");
        service.apply_server_list(&list);
        assert_eq!(service.retention_frees(), 2, "idempotent");

        // The crashed master is recovered and removed: its kept replica goes.
        service.apply_server_list(&[
            (1, ServerState::Removed),
            (2, ServerState::Up),
            (3, ServerState::Removed),
            (5, ServerState::Up),
        ]);
        assert_eq!(held(&service), vec![(2, 1), (4, 1), (5, 1)], "{mode:?}");
        assert_eq!(service.retention_frees(), 3, "{mode:?}");
        let mut lines = Vec::new();
        service.stats_lines(&mut |k, v| lines.push(format!("{k}={v}")));
        assert!(
            lines.iter().any(|l| l == "backup_retention_frees=3"),
            "{lines:?}"
        );
    }
}

#[test]
fn a_replica_freed_by_its_master_is_not_freed_again() {
    let service = restarted_service(SyncMode::Buffered);
    // Master 2 re-replicated and freed its old replica itself.
    service.store().free(2, 1).unwrap();
    service.apply_server_list(&[(2, ServerState::Removed)]);
    assert_eq!(service.retention_frees(), 0);
    assert!(service.store().info(2, 1).is_none());
}

#[tokio::test]
async fn inside_a_runtime_retention_frees_run_on_the_blocking_pool() {
    let service = restarted_service(SyncMode::Fsync);
    service.apply_server_list(&[(3, ServerState::Removed), (4, ServerState::Removed)]);
    // Fenced at once, freed in the background.
    assert_eq!(write(&service, 3, 9, 0, OPEN).0, Status::ServerNotUp);
    let start = Instant::now();
    while service.retention_frees() < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "frees never happened"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(held(&service), vec![(1, 1), (2, 1), (5, 1)]);
}

/// A disk out of space (ENOSPC) is a full backup, not a failed one: the master
/// places the replica elsewhere (R§7.1). Regression (issue 20): it was answered
/// INTERNAL, and a master retried the same backup as if it had failed.
#[test]
fn backup_write_on_a_disk_out_of_space_answers_no_space_until_it_heals() {
    let disk = std::sync::Arc::new(ramstore_backup::FaultyDisk::new(MemDisk::new()));
    let store = BackupStore::create(
        Box::new(disk.clone()) as Box<dyn Disk>,
        config(SyncMode::Buffered),
    )
    .unwrap();
    let service = BackupService::new(store);
    assert_eq!(write(&service, 1, 1, 0, OPEN).0, Status::Ok);
    disk.set_plan(ramstore_backup::FaultPlan {
        space_bytes: Some(0),
        ..ramstore_backup::FaultPlan::default()
    });
    let (status, message) = write(&service, 1, 2, 0, OPEN);
    assert_eq!(status, Status::NoSpace, "{message}");
    let (status, message) = write(&service, 1, 1, 10, WRITE);
    assert_eq!(status, Status::NoSpace, "{message}");
    disk.heal();
    assert_eq!(write(&service, 1, 2, 0, OPEN).0, Status::Ok);
    assert_eq!(write(&service, 1, 1, 10, WRITE).0, Status::Ok);
}
