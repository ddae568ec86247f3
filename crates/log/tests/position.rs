//! `Log::position_of`: an entry's segment and offset, as its replicas see them, for
//! entries in segments that are not yet durable (the read path waits for exactly
//! that much of the segment to be durable, docs/design.md §5 "Read").

use ramstore_log::entry::{parse_entry, Entry};
use ramstore_log::{DeadObject, Log, LogConfig, NewObject};

#[test]
fn position_of_matches_the_replica_bytes_across_seglets_and_segments() {
    let mut config = LogConfig::new(32 << 20);
    config.segment_bytes = 1 << 20;
    let log = Log::new(config).unwrap();
    let mut previous: Option<DeadObject> = None;
    let mut checked = 0;
    for i in 0..3_000u64 {
        let key = format!("key-{i:05}");
        // Values of 300–1,300 bytes: entries straddle seglet boundaries.
        let value = vec![(i % 251) as u8; 300 + (i as usize * 37) % 1_000];
        let object = NewObject {
            table_id: 7,
            key: key.as_bytes(),
            version: i + 1,
            value: &value,
            expires_at: None,
        };
        // Every third object replaces the previous one, so tombstones precede
        // some objects in the same append.
        let replaces = if i % 3 == 0 { previous } else { None };
        let appended = log.append_object(&object, replaces).unwrap();
        let view = log.object(appended.entry).unwrap();
        let (segment, offset) = log.position_of(appended.entry);
        assert_eq!(segment, appended.segment_id);
        // The object is the last entry of the append.
        assert_eq!(offset + view.entry_len(), appended.offset + appended.len);

        let mut bytes = Vec::new();
        let length = log.copy_for_replica(segment, 0, &mut bytes).unwrap();
        assert!(offset + view.entry_len() <= length);
        let (entry, len) = parse_entry(&bytes[offset..]).unwrap();
        assert_eq!(len, view.entry_len());
        match entry {
            Entry::Object(o) => assert_eq!((o.key, o.version), (key.as_bytes(), i + 1)),
            other => panic!("expected object {key} at {segment}:{offset}, found {other:?}"),
        }
        previous = Some(DeadObject {
            version: i + 1,
            location: appended.entry,
        });
        checked += 1;
    }
    assert_eq!(checked, 3_000);
    assert!(
        log.stats().segments > 2,
        "the objects spanned several segments"
    );
}
