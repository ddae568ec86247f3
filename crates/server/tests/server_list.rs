//! The server list a storage server keeps from the coordinator's pushes: backup
//! service, failure domain and disk read speed of each server, as replica
//! placement needs them.

use ramstore_master::{CleanerMode, ObjectStore, StoreConfig};
use ramstore_rpc::{Handled, Service};
use ramstore_server::placement::{choose_backup, Candidate};
use ramstore_server::storage_service::KnownServer;
use ramstore_server::StorageService;
use ramstore_wire::{
    decode_response, Response, ServerListEntry, ServerListUpdateEncoder, ServerStatus, Services,
    Status,
};
use rand::rngs::StdRng;
use rand::SeedableRng;

fn service() -> StorageService {
    let mut config = StoreConfig::new(16 << 20);
    config.cleaner = CleanerMode::Manual;
    StorageService::new(ObjectStore::new(config).expect("object store"))
}

fn push(service: &StorageService, version: u64, servers: &[ServerListEntry<'_>]) {
    let mut frame = Vec::new();
    let mut enc = ServerListUpdateEncoder::new(1, version, &mut frame);
    for s in servers {
        enc.push(s).expect("push");
    }
    enc.finish().expect("finish");
    let mut out = Vec::new();
    assert_eq!(service.handle(&frame, &mut out), Handled::Done);
    let (header, resp) = decode_response(&out).expect("response");
    assert_eq!(header.status, Status::Ok);
    assert_eq!(resp, Response::ServerListUpdate);
}

fn entry(
    server_id: u64,
    status: ServerStatus,
    backup: bool,
    failure_domain: &str,
    backup_read_mbps: u32,
) -> ServerListEntry<'_> {
    ServerListEntry {
        server_id,
        status,
        services: Services {
            master: true,
            backup,
            replicated_log: false,
        },
        backup_read_mbps,
        address: "host:1",
        failure_domain,
    }
}

#[test]
fn server_list_update_keeps_backup_domain_and_read_speed() {
    let service = service();
    push(
        &service,
        3,
        &[
            entry(1, ServerStatus::Up, true, "rack-1", 200),
            entry(2, ServerStatus::Up, false, "", 0),
            entry(3, ServerStatus::Crashed, true, "rack-2", 90),
        ],
    );
    let (version, list) = service.server_list();
    assert_eq!(version, 3);
    let known = |server_id, up, backup, failure_domain: &str, backup_read_mbps| KnownServer {
        server_id,
        up,
        address: "host:1".into(),
        backup,
        failure_domain: failure_domain.into(),
        backup_read_mbps,
    };
    assert_eq!(
        list,
        vec![
            known(1, true, true, "rack-1", 200),
            known(2, true, false, "", 0),
            known(3, false, true, "rack-2", 90),
        ]
    );
    // An older list changes nothing.
    push(&service, 2, &[]);
    assert_eq!(service.server_list().1.len(), 3);
}

#[test]
fn placement_over_the_pushed_list_uses_only_up_backups_outside_the_masters_domain() {
    let service = service();
    push(
        &service,
        1,
        &[
            entry(1, ServerStatus::Up, true, "rack-1", 100), // the master
            entry(2, ServerStatus::Up, true, "rack-1", 100), // its domain
            entry(3, ServerStatus::Up, false, "rack-2", 0),  // no backup
            entry(4, ServerStatus::Crashed, true, "rack-3", 100),
            entry(5, ServerStatus::Up, true, "rack-4", 100),
        ],
    );
    let (_, list) = service.server_list();
    let candidates: Vec<Candidate<'_>> = list
        .iter()
        .filter(|s| s.up && s.backup)
        .map(|s| Candidate {
            server_id: s.server_id,
            failure_domain: &s.failure_domain,
            backup_read_mbps: s.backup_read_mbps,
            replica_bytes: 0,
        })
        .collect();
    let mut rng = StdRng::seed_from_u64(1);
    for _ in 0..50 {
        assert_eq!(
            choose_backup(&candidates, 1, "rack-1", &[], &[], 8 << 20, &mut rng),
            Some(5)
        );
    }
    assert_eq!(
        choose_backup(&candidates, 1, "rack-1", &[5], &[], 8 << 20, &mut rng),
        None
    );
}
