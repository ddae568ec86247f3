//! Key expiry on an object store: reading and changing an object's expiry time
//! (Redis's EXPIRE family, the native `ttl`/`persist`), and the active
//! expirer's two ways of finding expired objects.
//!
//! Expiry is lazy first: a read of an expired object answers "no such object"
//! (`read_with_as`), and a write over one treats it as absent. The active
//! expirer makes the memory and the log agree with that: it deletes expired
//! objects through the normal delete path, so each gets a tombstone that is
//! replicated like any delete's (R§4: the log is the truth). It finds them in
//! the deadline index ([`ObjectStore::expire_due`], `crate::deadlines`), and,
//! as a safety net, like Redis's active expiry by sampling: one tick
//! ([`ObjectStore::expire_tick`]) examines at most a given number of
//! hash-table entries ([`EXPIRE_SAMPLE_PER_TICK`]) *and* of buckets, walking
//! the buckets round-robin from where the last tick stopped, so its CPU per
//! tick is bounded whatever the table holds. Both bounds matter: a table of
//! millions of buckets holding few objects has few entries to examine but
//! every bucket to visit (regression: an idle server with 4 GiB of memory and
//! one key spent 37% of a core walking empty buckets, ten ticks a second).

use std::sync::atomic::Ordering;

use ramstore_log::LogRef;
/// When a change of expiry applies: defined once in `ramstore-wire`.
pub use ramstore_wire::ExpireCondition;
use ramstore_wire::{key_hash, RejectRules};

use super::write::NewValue;
use super::ObjectStore;
use crate::error::{ReadError, WriteError};
use crate::expiry::Expiry;
use crate::hashed_key::HashedKey;
use crate::tablets::Access;

/// The most hash-table entries one expirer tick examines (its CPU bound): at
/// roughly 100 ns an entry (a cache miss on the entry's header) a tick costs
/// well under a millisecond; deleting what it finds costs one tombstone
/// append each, and a tick deletes at most this many.
pub const EXPIRE_SAMPLE_PER_TICK: usize = 4_096;

/// The most hash-table buckets one expirer tick visits when it sweeps in
/// earnest (`ramstore_server::key_expiry`): a bucket is one cache line, read
/// in order, so 65,536 of them cost about a millisecond even when empty.
pub const EXPIRE_BUCKETS_PER_TICK: usize = 65_536;

/// What one expirer tick did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpireTick {
    /// Hash-table entries examined (at most the tick's bound).
    pub examined: usize,
    /// Hash-table buckets visited (at most the tick's bound).
    pub buckets: usize,
    /// Expired objects deleted (a tombstone logged for each).
    pub deleted: usize,
}

impl ObjectStore {
    /// The expiry time of an object (wall-clock ms; `None`: it never expires),
    /// or `ObjectDoesntExist` if it is absent or expired.
    pub fn expiry_of(&self, table_id: u64, key: &[u8]) -> Result<Option<u64>, ReadError> {
        self.read_with(table_id, key, |view| view.expires_at())
    }

    /// Gives an object expiry time `expires_at` (`None`: never expires) if it
    /// exists and `condition` admits the change; returns whether it changed.
    /// The object is rewritten with its value and the new expiry (a new
    /// version), so the change is in the log like any write. A time already
    /// past makes the object expire at once.
    pub fn set_expiry(
        &self,
        table_id: u64,
        key: &[u8],
        expires_at: Option<u64>,
        condition: ExpireCondition,
    ) -> Result<bool, WriteError> {
        let mut refused = false;
        let result = self.update_in(
            None,
            table_id,
            key,
            &RejectRules {
                doesnt_exist: true,
                ..RejectRules::default()
            },
            (Access::Client, None, Expiry::Set(expires_at)),
            |current| {
                let view = current.ok_or(WriteError::ObjectDoesntExist)?;
                if !condition.admits(view.expires_at(), expires_at) {
                    refused = true;
                    return Err(WriteError::WrongVersion {
                        current: view.version(),
                    });
                }
                let mut value = Vec::with_capacity(view.value_len());
                view.copy_value(&mut value);
                Ok(NewValue::Owned(value))
            },
        );
        match result {
            Ok(_) => Ok(true),
            Err(WriteError::ObjectDoesntExist) => Ok(false),
            Err(WriteError::WrongVersion { .. }) if refused => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// One tick of the active expirer: examines at most `max_entries`
    /// hash-table entries from where the previous tick stopped (round-robin
    /// over the buckets) and deletes the expired objects among them through
    /// the delete path (each gets a tombstone, replicated as any delete's).
    /// An object rewritten since it was examined is left alone (the delete
    /// checks expiry again under the bucket lock). Objects of tablets this
    /// master may not change now (recovering, migrating) wait for a later tick.
    pub fn expire_tick(&self, max_entries: usize, max_buckets: usize) -> ExpireTick {
        let index = &self.inner.index;
        let log = &self.inner.log;
        let buckets = index.bucket_count();
        let mut tick = ExpireTick::default();
        let mut expired: Vec<(u64, Vec<u8>)> = Vec::new();
        // While the deadline index is missing notes, the sweep notes again
        // every expiring object it passes whose slot lost notes, so that one
        // whole sweep begun after the last drop leaves every such object
        // noted (or the index full again, which keeps it incomplete): see
        // `crate::deadlines`.
        let renote = !self.inner.deadlines.is_complete();
        let mut key_buf = Vec::new();
        {
            let _pin = log.pin();
            let now_ms = self.now_ms();
            let mut bucket = self.expire_cursor.load(Ordering::Relaxed) % buckets;
            // Every bucket at most once per tick, so a sparse table ends the
            // tick after one sweep rather than spinning; and at most
            // `max_buckets`, so a large sparse table costs a bounded walk.
            for _ in 0..buckets.min(max_buckets) {
                if tick.examined >= max_entries {
                    break;
                }
                tick.buckets += 1;
                index.for_each_in_bucket(bucket, |r| {
                    tick.examined += 1;
                    let Ok(view) = log.object(LogRef(r)) else {
                        return;
                    };
                    if view.is_expired(now_ms) {
                        let mut key = Vec::with_capacity(view.key_len());
                        view.copy_key(&mut key);
                        expired.push((view.table_id(), key));
                    } else if let Some(at) = view
                        .expires_at()
                        .filter(|&at| renote && self.inner.deadlines.slot_lost_notes(at))
                    {
                        key_buf.clear();
                        view.copy_key(&mut key_buf);
                        self.inner.deadlines.note(key_hash(&key_buf), at);
                    }
                });
                bucket = (bucket + 1) % buckets;
                if bucket == 0 {
                    self.inner.deadlines.sweep_finished();
                }
            }
            self.expire_cursor.store(bucket, Ordering::Relaxed);
        }
        tick.deleted = self.remove_expired(expired, None);
        tick
    }

    /// Buckets of the hash table: what one whole sweep of the expirer visits.
    pub fn hash_table_buckets(&self) -> usize {
        self.inner.index.bucket_count()
    }

    /// Deletes the expired objects whose key hashes the deadline index says
    /// are due (`crate::deadlines`): at most `max_hashes` notes taken, each
    /// one hash-table lookup; the objects under them that are expired now
    /// are deleted as in [`Self::expire_tick`]. Notes whose object was since
    /// rewritten, deleted or moved cost the lookup and nothing else.
    pub fn expire_due(&self, max_hashes: usize) -> ExpireTick {
        let inner = &*self.inner;
        let log = &inner.log;
        let mut hashes = Vec::new();
        let now_ms = self.now_ms();
        inner.deadlines.take_due(now_ms, max_hashes, &mut hashes);
        let mut tick = ExpireTick {
            examined: hashes.len(),
            ..ExpireTick::default()
        };
        let mut expired: Vec<(u64, Vec<u8>)> = Vec::new();
        {
            let _pin = log.pin();
            for &hash in &hashes {
                // Every object under this hash (a key may live in several
                // tables), so the closure never claims a match.
                inner.index.lookup(hash, |r| {
                    if let Ok(view) = log.object(LogRef(r)) {
                        if view.is_expired(now_ms) {
                            let mut key = Vec::with_capacity(view.key_len());
                            view.copy_key(&mut key);
                            if HashedKey::new(&key).hash() == hash {
                                expired.push((view.table_id(), key));
                            }
                        }
                    }
                    false
                });
            }
        }
        // A tablet not serving now (recovering) is asked again a second later.
        tick.deleted = self.remove_expired(expired, Some(now_ms + 1_000));
        tick
    }

    /// Deletes each `(table, key)` if it is still expired; returns how many
    /// were deleted. `None` is an object rewritten since it was seen. A
    /// refusal by a tablet this master owns but may not change now
    /// (recovering, migrating in) is noted again for `retry_at_ms` when
    /// given, else left for a later sweep; a tablet no longer here is
    /// forgotten (its new owner replayed the expiry and noted it).
    fn remove_expired(&self, expired: Vec<(u64, Vec<u8>)>, retry_at_ms: Option<u64>) -> usize {
        let mut deleted = 0;
        for (table_id, key) in expired {
            let hashed = HashedKey::new(&key);
            let hash = hashed.hash();
            let removed = self.remove_full(
                table_id,
                hashed,
                &RejectRules::default(),
                Access::Client,
                None,
                true,
            );
            match (removed, retry_at_ms) {
                (Ok((Some(_), _)), _) => deleted += 1,
                (Err(WriteError::UnknownTablet) | Ok(_), _) | (Err(_), None) => {}
                (Err(_), Some(at)) => self.inner.deadlines.note(hash, at),
            }
        }
        deleted
    }

    /// Whether the deadline index holds every object with an expiry not yet
    /// covered by a whole sweep (`crate::deadlines::DeadlineIndex::is_complete`):
    /// while it does not, the expirer sweeps in earnest.
    pub fn deadlines_complete(&self) -> bool {
        self.inner.deadlines.is_complete()
    }

    /// Deadlines the expirer's index holds now.
    pub fn deadline_notes(&self) -> usize {
        self.inner.deadlines.len()
    }
}
