//! Frames whose work runs on the slow path (enumeration, dropping a tablet,
//! recovery and backup reads) are decoded once, on that path: the native handler
//! reads only their header. These tests pin what that path must then do itself —
//! answer a frame whose body does not decode, and refuse a tablet notification
//! meant for another server — which the handler's full decode used to do.

use std::sync::Arc;
use std::time::Duration;

use ramstore_master::{CleanerMode, ObjectStore, StoreConfig};
use ramstore_rpc::{LocalTransport, Transport};
use ramstore_server::StorageService;
use ramstore_wire::{decode_response, encode_request, Request, Response, Status};

const TABLE: u64 = 7;
const DEADLINE: Duration = Duration::from_secs(5);

/// One master owning all of `TABLE`, reachable at "m" (its server id is 0: it
/// never enlisted).
fn master() -> LocalTransport {
    let mut config = StoreConfig::new(16 << 20);
    config.segment_bytes = 128 * 1024;
    config.cleaner = CleanerMode::Manual;
    let store = ObjectStore::new(config).expect("store");
    store.add_tablet(TABLE, 0, u64::MAX).expect("tablet");
    let transport = LocalTransport::new();
    transport.register("m", Arc::new(StorageService::new(store)));
    transport
}

fn frame(req: &Request<'_>) -> Vec<u8> {
    let mut frame = Vec::new();
    encode_request(9, req, &mut frame).expect("encodes");
    frame
}

/// The status of the answer to `frame` (`Ok` for a success response).
async fn status_of(transport: &LocalTransport, frame: Vec<u8>) -> Result<(), Status> {
    let answer = transport
        .call("m", frame, DEADLINE)
        .await
        .expect("answered");
    assert!(
        !answer.is_empty(),
        "an empty answer leaves the client hanging"
    );
    match decode_response(&answer).expect("the answer decodes").1 {
        Response::Error(body) => Err(body.status()),
        _ => Ok(()),
    }
}

#[tokio::test]
async fn enumerate_on_the_slow_path_answers_a_whole_frame() {
    let m = master();
    let req = Request::Enumerate {
        table_id: TABLE,
        cursor: 0,
        max_bytes: 1 << 16,
    };
    assert_eq!(status_of(&m, frame(&req)).await, Ok(()));
}

#[tokio::test]
async fn enumerate_whose_body_does_not_decode_is_answered_invalid() {
    let m = master();
    let mut bad = frame(&Request::Enumerate {
        table_id: TABLE,
        cursor: 0,
        max_bytes: 1 << 16,
    });
    // Drop the body's last field and shrink the length prefix to match: the
    // header still reads, the body does not.
    bad.truncate(bad.len() - 4);
    let len = u32::from_le_bytes(bad[..4].try_into().expect("a 4-byte prefix")) - 4;
    bad[..4].copy_from_slice(&len.to_le_bytes());
    let status = status_of(&m, bad)
        .await
        .expect_err("a bad frame is refused");
    assert_eq!(status, Status::InvalidRequest);
}

#[tokio::test]
async fn drop_tablet_meant_for_another_server_is_refused_and_keeps_the_tablet() {
    let m = master();
    let req = Request::DropTabletOwnership {
        server_id: 42,
        table_id: TABLE,
        start_hash: 0,
        end_hash: u64::MAX,
    };
    assert_eq!(status_of(&m, frame(&req)).await, Err(Status::ServerNotUp));
    let write = Request::Write {
        table_id: TABLE,
        rules: Default::default(),
        key: b"k",
        value: b"v",
        rpc_id: None,
    };
    assert_eq!(
        status_of(&m, frame(&write)).await,
        Ok(()),
        "the master still owns the tablet"
    );
}
