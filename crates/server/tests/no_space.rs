//! A full log answers NO_SPACE (clients retry it) and the server counts those
//! answers in its statistics, so an operator sees a log that runs full.

use ramstore_master::{CleanerMode, ObjectStore, StoreConfig};
use ramstore_rpc::{Handled, Service};
use ramstore_server::StorageService;
use ramstore_wire::{
    decode_response, encode_request, ErrorBody, RejectRules, Request, Response, Status,
};

fn no_space_answers(service: &StorageService) -> u64 {
    service
        .stats_text()
        .lines()
        .find_map(|l| l.strip_prefix("no_space_answers="))
        .expect("the statistics carry no_space_answers")
        .parse()
        .unwrap()
}

#[test]
fn writes_to_a_full_log_answer_no_space_and_are_counted() {
    let mut config = StoreConfig::new(16 << 20);
    config.segment_bytes = 128 * 1024;
    // No cleaner: every write stays live, so the log must run full.
    config.cleaner = CleanerMode::Manual;
    let store = ObjectStore::new(config).unwrap();
    store.add_tablet(1, 0, u64::MAX).unwrap();
    let service = StorageService::new(store);
    assert_eq!(no_space_answers(&service), 0);
    let value = vec![7u8; 16 * 1024];
    let mut refused = 0;
    for i in 0..2000u32 {
        let key = i.to_le_bytes();
        let mut frame = Vec::new();
        let req = Request::Write {
            table_id: 1,
            rules: RejectRules::default(),
            key: &key,
            value: &value,
            rpc_id: None,
        };
        encode_request(1, &req, &mut frame).unwrap();
        let mut out = Vec::new();
        assert_eq!(service.handle(&frame, &mut out), Handled::Done);
        match decode_response(&out).unwrap().1 {
            Response::Write { .. } => {}
            Response::Error(ErrorBody::Message {
                status: Status::NoSpace,
                ..
            }) => refused += 1,
            other => panic!("unexpected answer {other:?}"),
        }
    }
    assert!(
        refused > 0,
        "16 MiB of log cannot hold 32 MB of live values"
    );
    assert_eq!(no_space_answers(&service), refused);
}
