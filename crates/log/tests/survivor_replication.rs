//! How a batch combined pass hands its survivors to the replica sink (L§6.4,
//! issue 17 session 34): each survivor is opened, replicated whole and closed as
//! soon as it is full — while the pass still copies the next one — and the pass
//! waits for them all (`sync_closed`) only before the digest that names them.
//! Objects relocated into a survivor read as durable at once: their bytes were
//! durable in their victims.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use ramstore_log::{
    Cleaner, DeadObject, Log, LogConfig, LogRef, NewObject, ObjectView, Relocator, ReplicaSink,
    SegmentRole,
};

const VALUE_BYTES: usize = 1000;
const KEYS: u32 = 2000;

/// What the log told its sink, with the relocations done by then.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
    Opened(u64, SegmentRole),
    Replicate {
        id: u64,
        offset: usize,
        relocated: u64,
    },
    Close(u64),
    SyncClosed(Vec<u64>),
}

/// A sink that records calls; like a storage server's replica manager, segments
/// are durable only when told (`durable_on_close` is false).
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<Call>>,
    relocated: Arc<AtomicU64>,
}

impl ReplicaSink for Recorder {
    fn opened(&self, segment_id: u64, role: SegmentRole) {
        self.calls.lock().push(Call::Opened(segment_id, role));
    }
    fn replicate(&self, segment_id: u64, offset: usize, _len: usize) {
        self.calls.lock().push(Call::Replicate {
            id: segment_id,
            offset,
            relocated: self.relocated.load(Ordering::SeqCst),
        });
    }
    fn close(&self, segment_id: u64) {
        self.calls.lock().push(Call::Close(segment_id));
    }
    fn sync_closed(&self, segment_ids: &[u64]) {
        self.calls
            .lock()
            .push(Call::SyncClosed(segment_ids.to_vec()));
    }
    fn cleaned(&self, _survivors: &[u64], _freed: &[u64]) {}
}

/// One map under one lock; counts relocations and checks, inside each, that the
/// new copy reads as durable.
struct MapRelocator {
    table: Mutex<HashMap<Vec<u8>, LogRef>>,
    relocated: Arc<AtomicU64>,
    log: OnceLock<Arc<Log>>,
    not_read_durable: AtomicU64,
}

fn key_of(object: &ObjectView<'_>) -> Vec<u8> {
    let mut key = Vec::new();
    object.copy_key(&mut key);
    key
}

impl Relocator for MapRelocator {
    fn hash(&self, object: &ObjectView<'_>) -> u64 {
        key_of(object)
            .iter()
            .fold(0u64, |h, &b| h * 31 + u64::from(b))
    }

    fn is_live(&self, object: &ObjectView<'_>, _hash: u64) -> bool {
        self.table.lock().get(&key_of(object)) == Some(&object.location())
    }

    fn relocate(
        &self,
        object: &ObjectView<'_>,
        _hash: u64,
        copy: &mut dyn FnMut() -> LogRef,
    ) -> bool {
        let mut table = self.table.lock();
        match table.get_mut(&key_of(object)) {
            Some(at) if *at == object.location() => {
                *at = copy();
                // `get` cannot fail: the test sets the log before cleaning.
                if !self.log.get().is_some_and(|log| log.is_read_durable(*at)) {
                    self.not_read_durable.fetch_add(1, Ordering::SeqCst);
                }
                self.relocated.fetch_add(1, Ordering::SeqCst);
                true
            }
            _ => false,
        }
    }
}

/// A log of 128 KiB segments holding `KEYS` objects of 1,000 bytes, every even key
/// written twice (so a quarter of the bytes are dead), every closed segment
/// reported durable. Returns the log, its relocator and its sink.
fn replicated_log_with_dead_objects() -> (Arc<Log>, MapRelocator, Arc<Recorder>) {
    let sink = Arc::new(Recorder::default());
    let mut config = LogConfig::new(32 << 20);
    config.segment_bytes = 128 * 1024;
    config.replicas = sink.clone();
    let log = Arc::new(Log::new(config).expect("log"));
    let relocator = MapRelocator {
        table: Mutex::new(HashMap::new()),
        relocated: sink.relocated.clone(),
        log: OnceLock::new(),
        not_read_durable: AtomicU64::new(0),
    };
    for version in 1..=2u64 {
        for k in (0..KEYS).filter(|k| version == 1 || k % 2 == 0) {
            put(&log, &relocator, k, version);
        }
    }
    assert!(log.roll_head_now(), "the head rolls");
    let heads: Vec<u64> = sink
        .calls
        .lock()
        .iter()
        .filter_map(|c| match c {
            Call::Opened(id, SegmentRole::Head) => Some(*id),
            _ => None,
        })
        .collect();
    for id in heads {
        log.segment_replicated(id);
    }
    sink.calls.lock().clear();
    assert!(relocator.log.set(log.clone()).is_ok(), "set once");
    (log, relocator, sink)
}

fn put(log: &Log, relocator: &MapRelocator, k: u32, version: u64) {
    let key = k.to_le_bytes();
    let value = vec![(k as u64 + version) as u8; VALUE_BYTES];
    let old = relocator.table.lock().get(&key[..]).copied();
    let replaces = old.map(|location| DeadObject {
        version: version - 1,
        location,
    });
    let object = NewObject {
        table_id: 1,
        key: &key,
        version,
        value: &value,
        expires_at: None,
    };
    let appended = log.append_object(&object, replaces).expect("append");
    if let Some(r) = old {
        let len = log.object(r).expect("object").entry_len();
        log.object_died(r, len);
    }
    relocator.table.lock().insert(key.to_vec(), appended.entry);
}

#[test]
fn clean_combined_sends_each_survivor_as_soon_as_it_fills() {
    let (log, relocator, sink) = replicated_log_with_dead_objects();
    let outcome = Cleaner::new(&log)
        .clean_combined_with_gain(&relocator, 0)
        .expect("victims to clean");
    assert!(outcome.survivors >= 3, "{outcome:?}");
    let total = relocator.relocated.load(Ordering::SeqCst);
    let calls = sink.calls.lock().clone();
    let survivors: Vec<u64> = calls
        .iter()
        .filter_map(|c| match c {
            Call::Opened(id, SegmentRole::Survivor) => Some(*id),
            _ => None,
        })
        .collect();
    assert_eq!(survivors.len(), outcome.survivors, "{calls:?}");
    let synced = calls
        .iter()
        .position(|c| matches!(c, Call::SyncClosed(ids) if *ids == survivors))
        .expect("one wait for all the survivors");
    for (n, id) in survivors.iter().enumerate() {
        let sent = calls
            .iter()
            .position(|c| matches!(c, Call::Replicate { id: s, .. } if s == id))
            .expect("each survivor is replicated");
        let Call::Replicate {
            offset, relocated, ..
        } = calls[sent]
        else {
            unreachable!("matched above")
        };
        assert_eq!(offset, 0, "survivor {id} is replicated whole");
        assert!(sent < synced, "survivor {id} is sent before the wait");
        assert_eq!(calls[sent + 1], Call::Close(*id), "and closed at once");
        // Every survivor but the last is sent while the pass still copies.
        if n + 1 < survivors.len() {
            assert!(
                relocated < total,
                "survivor {id} sent after all {total} relocations"
            );
        }
    }
    assert_eq!(relocator.not_read_durable.load(Ordering::SeqCst), 0);
}

/// Regression (issue 17, session 34): a survivor took a slot whose `read_durable`
/// flag was left from its last use (a fresh slot's `false`, or a head's), so until
/// the pass ended a read of an object it had just relocated waited for the
/// survivor's replicas, which a storage server only starts sending at the end.
#[test]
fn clean_combined_relocated_objects_read_durable_during_the_pass() {
    let (log, relocator, _sink) = replicated_log_with_dead_objects();
    Cleaner::new(&log)
        .clean_combined_with_gain(&relocator, 0)
        .expect("victims to clean");
    assert!(relocator.relocated.load(Ordering::SeqCst) > 0);
    assert_eq!(relocator.not_read_durable.load(Ordering::SeqCst), 0);
}
