//! Side logs (K§2.3; `ramstore_log::SideLog`): entries appended apart from the
//! head, replicated in whole segments without anyone waiting, and named by a
//! digest only once [`Log::commit_side_logs`] has seen them closed on their
//! replicas.

use std::sync::{Arc, Mutex};

use ramstore_log::entry::{parse_entry, Entry};
use ramstore_log::{Log, LogConfig, NewObject, ReplicaSink, SegmentRole, SideLog};

/// What the log told its replica sink, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
    Opened(u64, SegmentRole),
    Replicate(u64, usize, usize),
    Close(u64),
    SyncClosed(Vec<u64>),
    Cleaned(Vec<u64>, Vec<u64>),
}

#[derive(Default)]
struct Recorder(Mutex<Vec<Call>>);

impl Recorder {
    fn calls(&self) -> Vec<Call> {
        self.0.lock().unwrap().clone()
    }
    fn push(&self, c: Call) {
        self.0.lock().unwrap().push(c);
    }
}

impl ReplicaSink for Recorder {
    fn opened(&self, segment_id: u64, role: SegmentRole) {
        self.push(Call::Opened(segment_id, role));
    }
    fn replicate(&self, segment_id: u64, offset: usize, len: usize) {
        self.push(Call::Replicate(segment_id, offset, len));
    }
    fn close(&self, segment_id: u64) {
        self.push(Call::Close(segment_id));
    }
    fn sync_closed(&self, segment_ids: &[u64]) {
        self.push(Call::SyncClosed(segment_ids.to_vec()));
    }
    fn cleaned(&self, survivors: &[u64], freed: &[u64]) {
        self.push(Call::Cleaned(survivors.to_vec(), freed.to_vec()));
    }
}

fn log_with(sink: Arc<Recorder>) -> Log {
    let mut config = LogConfig::new(32 << 20);
    config.segment_bytes = 128 * 1024;
    config.replicas = sink;
    Log::new(config).unwrap()
}

/// The segment ids named by the digest of segment `id` (a head).
fn digest_of(log: &Log, id: u64) -> Vec<u64> {
    let mut bytes = Vec::new();
    let length = log.copy_for_replica(id, 0, &mut bytes).unwrap();
    let mut at = 0;
    while at < length {
        let (entry, len) = parse_entry(&bytes[at..]).unwrap();
        if let Entry::LogDigest(d) = entry {
            return d.segment_ids().collect();
        }
        at += len;
    }
    panic!("segment {id} has no digest");
}

fn append(log: &Log, side: &SideLog, i: u64) -> ramstore_log::Appended {
    let key = format!("key-{i:05}");
    let value = vec![(i % 251) as u8; 1_000];
    let object = NewObject {
        table_id: 7,
        key: key.as_bytes(),
        version: i + 1,
        value: &value,
        expires_at: None,
    };
    log.append_side(side, &object, None).unwrap()
}

#[test]
fn append_side_replicates_nothing_until_sealed_then_whole_segments_and_never_touches_the_head() {
    let sink = Arc::new(Recorder::default());
    let log = log_with(sink.clone());
    let head = log.head_segment_id();
    let mut head_bytes = Vec::new();
    let head_len = log.copy_for_replica(head, 0, &mut head_bytes).unwrap();
    let before = sink.calls().len();
    let side = SideLog::new();
    let mut refs = Vec::new();
    for i in 0..400 {
        refs.push(append(&log, &side, i));
    }
    // 400 entries of about 1 KiB fill three segments of 128 KiB.
    let ids = side.segment_ids();
    assert!(ids.len() >= 4, "side segments {ids:?}");
    assert!(!ids.contains(&head));
    assert_eq!(log.head_segment_id(), head, "the head did not roll");
    let mut after = Vec::new();
    assert_eq!(log.copy_for_replica(head, 0, &mut after), Some(head_len));
    // Re-replication is deferred (K§2.3.4): nothing reached the sink while
    // the bulk writer ran, not even the full segments.
    assert_eq!(sink.calls()[before..].to_vec(), Vec::<Call>::new());
    // Every entry reads back in place, without waiting for a replica.
    for (i, r) in refs.iter().enumerate() {
        let view = log.object(r.entry).unwrap();
        assert_eq!(view.version(), i as u64 + 1);
        assert!(
            log.is_read_durable(r.entry),
            "a side entry waits for no replica"
        );
    }
    // Sealing hands every segment over whole, once, in order; nothing per entry.
    let sealed = log.seal_side_logs(&[&side]);
    assert_eq!(sealed, ids);
    let mut expected = Vec::new();
    for &id in &ids {
        let mut bytes = Vec::new();
        let len = log.copy_for_replica(id, 0, &mut bytes).unwrap();
        expected.push(Call::Opened(id, SegmentRole::Side));
        expected.push(Call::Replicate(id, 0, len));
        expected.push(Call::Close(id));
    }
    assert_eq!(sink.calls()[before..].to_vec(), expected);
}

#[test]
fn commit_side_logs_names_the_segments_only_after_they_are_closed_on_replicas() {
    let sink = Arc::new(Recorder::default());
    let log = log_with(sink.clone());
    let (a, b) = (SideLog::new(), SideLog::new());
    for i in 0..300 {
        append(&log, if i % 2 == 0 { &a } else { &b }, i);
    }
    let mut ids = a.segment_ids();
    ids.extend(b.segment_ids());
    let old_head = log.head_segment_id();
    for id in &ids {
        assert!(
            !digest_of(&log, old_head).contains(id),
            "side segment {id} named before the commit"
        );
    }
    let before = sink.calls().len();
    let committed = log.commit_side_logs(&[&a, &b]);
    assert_eq!(committed, ids);
    let new_head = log.head_segment_id();
    assert_ne!(new_head, old_head, "the commit rolls the head");
    let digest = digest_of(&log, new_head);
    for id in &ids {
        assert!(
            digest.contains(id),
            "side segment {id} missing from {digest:?}"
        );
    }
    // The order the sink saw: the open segments handed over, then the wait for
    // every replica, then the new head (its digest), then the survivors join.
    let calls = sink.calls()[before..].to_vec();
    let sync = calls
        .iter()
        .position(|c| *c == Call::SyncClosed(ids.clone()))
        .expect("sync_closed of every side segment");
    let opened_head = calls
        .iter()
        .position(|c| *c == Call::Opened(new_head, SegmentRole::Head))
        .expect("the new head opened");
    let cleaned = calls
        .iter()
        .position(|c| *c == Call::Cleaned(ids.clone(), Vec::new()))
        .expect("the side segments join the log");
    assert!(sync < opened_head && opened_head < cleaned, "{calls:?}");
    assert!(a.segment_ids().is_empty() && b.segment_ids().is_empty());
    assert!(log.commit_side_logs(&[&a, &b]).is_empty());
}

#[test]
fn copy_for_replica_upto_copies_only_the_round_and_returns_the_whole_length() {
    let log = log_with(Arc::new(Recorder::default()));
    let side = SideLog::new();
    for i in 0..100 {
        append(&log, &side, i);
    }
    let id = side.segment_ids()[0];
    let mut whole = Vec::new();
    let length = log.copy_for_replica(id, 0, &mut whole).unwrap();
    assert_eq!(whole.len(), length);
    // A round from the middle, capped: exactly those bytes, the full length.
    let (from, upto) = (length / 4, length / 2);
    let mut round = Vec::new();
    assert_eq!(
        log.copy_for_replica_upto(id, from, upto, &mut round),
        Some(length)
    );
    assert_eq!(round, whole[from..upto]);
    // A cap past the end copies to the end.
    let mut tail = Vec::new();
    assert_eq!(
        log.copy_for_replica_upto(id, from, length + 1, &mut tail),
        Some(length)
    );
    assert_eq!(tail, whole[from..]);
}
