//! `ramstore status` shows each server's backup: replicas held, open buffers in use
//! out of the configured bound, and bytes on disk out of the frames file's capacity
//! (`--backup-frames` × 8 MiB) — or `backup off` for a server started without
//! `--backup-dir`. Replicas are written over real TCP with `BackupClient`, as a
//! master would, and the columns follow.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Cluster;
use ramstore_backup::{BackupClient, BackupWriteFlags};
use ramstore_rpc::TcpTransport;

const MASTER: u64 = 7;

/// The words after DURABILITY and the four resident-memory columns in the row of
/// server `id`: the backup columns.
#[track_caller]
fn backup_words(status: &str, id: u64) -> Vec<String> {
    let lines: Vec<&str> = status.lines().collect();
    let header: Vec<&str> = lines[1].split_whitespace().collect();
    // "BACKUP DISK" is two words of the header.
    assert_eq!(
        header[header.len() - 4..],
        ["REPLICAS", "BUFFERS", "BACKUP", "DISK"],
        "{status}"
    );
    let row = lines[2..lines.len() - 1]
        .iter()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w[0] == id.to_string())
        .unwrap_or_else(|| panic!("server {id} is listed:\n{status}"));
    assert_eq!(row[2], "up", "{status}");
    assert_eq!(row[8], "dram-only", "{status}");
    row[13..].iter().map(|w| w.to_string()).collect()
}

#[test]
fn status_shows_backup_replicas_buffers_and_disk() {
    let mut cluster = Cluster::start(0);
    let backup_dir = cluster.dir.path().join("backup");
    let backup_dir = backup_dir.to_str().expect("UTF-8 temp path").to_string();
    let extra = [
        "--backup-dir",
        &backup_dir,
        "--backup-frames",
        "4",
        "--backup-open-buffers",
        "3",
    ];
    let backup = cluster.add_server_with("127.0.0.1:0", &extra);
    let (backup_id, addr) = (backup.id, backup.addr.clone());
    let plain = cluster.add_server("127.0.0.1:0").id;

    // A fresh backup: nothing held, 4 frames × 8 MiB of capacity.
    let status = cluster.cli(&["status"]);
    let status = status.ok();
    assert_eq!(
        backup_words(status, backup_id),
        ["0", "0/3", "0B/32.0MiB"],
        "{status}"
    );
    assert_eq!(backup_words(status, plain), ["backup", "off"], "{status}");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let client =
        BackupClient::new(Arc::new(TcpTransport::new())).with_rpc_deadline(Duration::from_secs(20));
    // An open replica holds one buffer (buffered mode: its bytes may not be on
    // disk yet, so only the capacity of the disk column is certain).
    let head = vec![0x5a; 1000];
    rt.block_on(client.write(&addr, MASTER, 1, 0, &head, BackupWriteFlags::OPEN))
        .expect("open a replica");
    let status = cluster.cli(&["status"]);
    let status = status.ok();
    let words = backup_words(status, backup_id);
    assert_eq!(words[..2], ["1", "1/3"], "{status}");
    assert!(words[2].ends_with("/32.0MiB"), "{status}");

    // Closed at 3 MiB: the buffer is released and the whole replica is on disk.
    let rest = vec![0xa5; (3 << 20) - head.len()];
    rt.block_on(client.write(
        &addr,
        MASTER,
        1,
        head.len() as u32,
        &rest,
        BackupWriteFlags::CLOSE,
    ))
    .expect("close the replica");
    let status = cluster.cli(&["status"]);
    let status = status.ok();
    assert_eq!(
        backup_words(status, backup_id),
        ["1", "0/3", "3.0MiB/32.0MiB"],
        "{status}"
    );
    assert_eq!(backup_words(status, plain), ["backup", "off"], "{status}");
}
