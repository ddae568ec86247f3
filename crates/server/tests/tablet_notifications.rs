//! Tablet notifications from the coordinator name the server id they are meant
//! for: a process with another id (a new one on a dead server's address, or one
//! not enlisted yet) refuses them, so it never takes a tablet meant for the dead
//! server (regression: a restarted server took and served a tablet that crash
//! recovery was still filling).

use ramstore_master::{CleanerMode, ObjectStore, StoreConfig};
use ramstore_rpc::{Handled, Service};
use ramstore_server::StorageService;
use ramstore_wire::{decode_response, encode_request, Request, Response, Status};

fn service() -> StorageService {
    let mut config = StoreConfig::new(16 << 20);
    config.cleaner = CleanerMode::Manual;
    StorageService::new(ObjectStore::new(config).expect("object store"))
}

fn take(service: &StorageService, server_id: u64) -> Status {
    let mut frame = Vec::new();
    let req = Request::TakeTabletOwnership {
        server_id,
        table_id: 1,
        start_hash: 0,
        end_hash: u64::MAX,
    };
    encode_request(1, &req, &mut frame).unwrap();
    let mut out = Vec::new();
    assert_eq!(service.handle(&frame, &mut out), Handled::Done);
    decode_response(&out).expect("response").0.status
}

#[test]
fn take_tablet_ownership_meant_for_another_server_is_refused() {
    let s = service();
    // Not enlisted yet: no notification is for it.
    assert_eq!(take(&s, 3), Status::ServerNotUp);
    s.set_server_id(4);
    assert_eq!(
        take(&s, 3),
        Status::ServerNotUp,
        "meant for the dead server 3"
    );
    assert!(s.store().tablets().tablets.is_empty());
    assert_eq!(take(&s, 4), Status::Ok);
    assert_eq!(s.store().tablets().tablets.len(), 1);
    // The recovered-tablet hand-over: a recovering tablet starts serving.
    let mut v = Vec::new();
    s.store().add_recovering_tablet(2, 0, 9).unwrap();
    assert!(s.store().read(2, b"k", &mut v).is_err());
    let mut frame = Vec::new();
    let req = Request::TakeTabletOwnership {
        server_id: 4,
        table_id: 2,
        start_hash: 0,
        end_hash: 9,
    };
    encode_request(2, &req, &mut frame).unwrap();
    let mut out = Vec::new();
    assert_eq!(s.handle(&frame, &mut out), Handled::Done);
    assert_eq!(
        decode_response(&out).unwrap().1,
        Response::TakeTabletOwnership
    );
    assert!(!s
        .store()
        .tablets()
        .tablets
        .iter()
        .any(|t| t.is_recovering()));
}
