//! Key expiry through the native request path (SetExpiry, GetExpiry,
//! WriteExpiring): what a client's `put --ttl`, `ttl` and `persist` and the
//! Redis front end's forwarded commands reach. A manual clock stands in for
//! the wall clock, so expiry happens exactly when the test says.

use std::sync::Arc;
use std::time::Duration;

use ramstore_clock::ManualClock;
use ramstore_master::{CleanerMode, ObjectStore, StoreConfig};
use ramstore_rpc::{Handled, Service};
use ramstore_server::StorageService;
use ramstore_wire::{
    decode_response, encode_request, ExpireCondition, ExpiryChange, RejectRules, Request, Response,
    Status,
};

const TABLE: u64 = 7;

fn master(clock: &ManualClock) -> Arc<StorageService> {
    let mut config = StoreConfig::new(16 << 20);
    config.segment_bytes = 128 * 1024;
    config.cleaner = CleanerMode::Manual;
    config.clock = clock.handle();
    let store = ObjectStore::new(config).expect("store");
    store.add_tablet(TABLE, 0, u64::MAX).expect("tablet");
    Arc::new(StorageService::new(store))
}

/// The native answer to `req`, decoded into an owned summary.
async fn answer(service: &StorageService, req: &Request<'_>) -> (Status, String) {
    let mut frame = Vec::new();
    encode_request(1, req, &mut frame).expect("encodes");
    let mut out = Vec::new();
    let bytes = match service.handle(&frame, &mut out) {
        Handled::Done => out,
        Handled::Deferred(f) => f.await,
        Handled::Slow => panic!("an object operation is never slow"),
    };
    let (header, response) = decode_response(&bytes).expect("decodes");
    (header.status, format!("{response:?}"))
}

fn write_expiring(key: &[u8], expiry: ExpiryChange) -> Request<'_> {
    Request::WriteExpiring {
        table_id: TABLE,
        rules: RejectRules::default(),
        expiry,
        key,
        value: b"v",
    }
}

fn get_expiry(key: &[u8]) -> Request<'_> {
    Request::GetExpiry {
        table_id: TABLE,
        key,
    }
}

fn set_expiry(key: &[u8], expires_at: Option<u64>, condition: ExpireCondition) -> Request<'_> {
    Request::SetExpiry {
        table_id: TABLE,
        condition,
        expires_at,
        key,
    }
}

fn expiry_answer(expires_at: Option<u64>) -> (Status, String) {
    (
        Status::Ok,
        format!("{:?}", Response::GetExpiry { expires_at }),
    )
}

fn changed(changed: bool) -> (Status, String) {
    (Status::Ok, format!("{:?}", Response::SetExpiry { changed }))
}

#[tokio::test]
async fn write_expiring_then_get_expiry_until_the_deadline() {
    let clock = ManualClock::new();
    let m = master(&clock);
    let at = m.store().now_ms() + 1_000;
    let (status, _) = answer(&m, &write_expiring(b"k", ExpiryChange::At(at))).await;
    assert_eq!(status, Status::Ok);
    assert_eq!(answer(&m, &get_expiry(b"k")).await, expiry_answer(Some(at)));
    clock.advance(Duration::from_millis(1_000));
    let (status, _) = answer(&m, &get_expiry(b"k")).await;
    assert_eq!(status, Status::ObjectDoesntExist);
    let read = Request::Read {
        table_id: TABLE,
        rules: RejectRules::default(),
        key: b"k",
    };
    assert_eq!(answer(&m, &read).await.0, Status::ObjectDoesntExist);
}

#[tokio::test]
async fn write_expiring_keep_keeps_and_clear_clears() {
    let clock = ManualClock::new();
    let m = master(&clock);
    let at = m.store().now_ms() + 60_000;
    answer(&m, &write_expiring(b"k", ExpiryChange::At(at))).await;
    answer(&m, &write_expiring(b"k", ExpiryChange::Keep)).await;
    assert_eq!(answer(&m, &get_expiry(b"k")).await, expiry_answer(Some(at)));
    answer(&m, &write_expiring(b"k", ExpiryChange::Clear)).await;
    assert_eq!(answer(&m, &get_expiry(b"k")).await, expiry_answer(None));
}

#[tokio::test]
async fn set_expiry_follows_its_condition_and_persist_clears() {
    let clock = ManualClock::new();
    let m = master(&clock);
    let now = m.store().now_ms();
    assert_eq!(
        answer(&m, &set_expiry(b"none", Some(now), ExpireCondition::Always)).await,
        changed(false)
    );
    answer(&m, &write_expiring(b"k", ExpiryChange::Clear)).await;
    assert_eq!(
        answer(&m, &set_expiry(b"k", Some(now + 5), ExpireCondition::Xx)).await,
        changed(false)
    );
    assert_eq!(
        answer(&m, &set_expiry(b"k", Some(now + 5), ExpireCondition::Nx)).await,
        changed(true)
    );
    assert_eq!(
        answer(&m, &get_expiry(b"k")).await,
        expiry_answer(Some(now + 5))
    );
    assert_eq!(
        answer(&m, &set_expiry(b"k", None, ExpireCondition::Xx)).await,
        changed(true)
    );
    assert_eq!(answer(&m, &get_expiry(b"k")).await, expiry_answer(None));
}

#[tokio::test]
async fn set_expiry_of_another_masters_key_is_unknown_tablet() {
    let clock = ManualClock::new();
    let m = master(&clock);
    let req = Request::SetExpiry {
        table_id: TABLE + 1,
        condition: ExpireCondition::Always,
        expires_at: None,
        key: b"k",
    };
    let (status, text) = answer(&m, &req).await;
    assert_eq!(status, Status::UnknownTablet, "{text}");
}
