//! Test fixtures shared by the server's integration tests.

use std::sync::Arc;

use ramstore_backup::BackupClient;
use ramstore_backup::{BackupConfig, BackupStore, Disk, MemDisk, SyncMode};
use ramstore_master::{CleanerMode, ObjectStore, StoreConfig};
use ramstore_rpc::LocalTransport;
use ramstore_server::backup_service::BackupService;
use ramstore_server::replica_manager::BackupInfo;
use ramstore_server::{ReplicaManager, StorageService};

/// One in-process backup (server 2 at "backup-2", eight frames of `segment_bytes`
/// in memory, buffered) and a manager (R = 1) replicating to it; not started.
pub fn manager_with_one_backup(segment_bytes: usize) -> Arc<ReplicaManager> {
    let transport = Arc::new(LocalTransport::new());
    let config = BackupConfig {
        frame_count: 8,
        segment_bytes: u32::try_from(segment_bytes).expect("a test segment size fits u32"),
        max_open_buffers: 4,
        sync_mode: SyncMode::Buffered,
    };
    let backup_store =
        BackupStore::create(Box::new(MemDisk::new()) as Box<dyn Disk>, config).expect("backup");
    // The backup's own master half is idle: a small log.
    let mut own = StoreConfig::new(2 << 20);
    own.segment_bytes = segment_bytes;
    own.cleaner = CleanerMode::Manual;
    let backup = StorageService::with_backup(
        ObjectStore::new(own).expect("store"),
        Some(BackupService::new(backup_store)),
    );
    transport.register("backup-2", Arc::new(backup));
    let manager = ReplicaManager::new(
        1,
        BackupClient::new(transport),
        1,
        ramstore_clock::system_clock(),
    );
    manager.set_backups(vec![BackupInfo {
        server_id: 2,
        address: "backup-2".into(),
        failure_domain: String::new(),
        backup_read_mbps: 100,
    }]);
    manager
}
