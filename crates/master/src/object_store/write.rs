//! The write path of an object store: writes, reloads, replays and increments,
//! all through one `update` that holds the key's bucket lock from reading the
//! current version to publishing the new reference (R§3.1, R§4.1).

use std::sync::atomic::Ordering;

use ramstore_log::{
    DeadObject, Log, LogRef, NewObject, ObjectView, SideLog, MAX_KEY_BYTES, MAX_VALUE_BYTES,
};
use ramstore_wire::counter::{self, CounterText};
use ramstore_wire::RejectRules;

use ramstore_log::entry::encode_rpc_result;

use super::ObjectStore;
use crate::error::WriteError;
use crate::expiry::{self, Expiry};
use crate::hashed_key::HashedKey;
use crate::rifl::{RpcOutcome, MAX_OUTCOME_BYTES};
use crate::tablets::Access;

/// The current entry of a key, found under its bucket lock.
struct Current {
    slot: ramstore_index::Slot,
    at: LogRef,
    version: u64,
    len: usize,
}

/// The value a write stores: borrowed from the caller, or computed (increments).
// The counter's text lives on the stack for one write: boxing it would put an
// allocation on every increment, and no collection holds these.
#[allow(clippy::large_enum_variant)]
pub(super) enum NewValue<'a> {
    Borrowed(&'a [u8]),
    Counter(CounterText, Number),
    /// A copy of the current value, rewritten with a new expiry time.
    Owned(Vec<u8>),
}

/// The number an increment stored (what its completion record saves).
#[derive(Clone, Copy)]
pub(super) enum Number {
    I64(i64),
    F64(f64),
}

impl NewValue<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            NewValue::Borrowed(b) => b,
            NewValue::Counter(t, _) => t.as_bytes(),
            NewValue::Owned(v) => v,
        }
    }

    /// What an exactly-once RPC that stored this value at `version` answers.
    fn outcome(&self, version: u64) -> RpcOutcome {
        match *self {
            NewValue::Borrowed(_) | NewValue::Owned(_) => RpcOutcome::Write { version },
            NewValue::Counter(_, Number::I64(value)) => RpcOutcome::IncrementI64 { value, version },
            NewValue::Counter(_, Number::F64(value)) => RpcOutcome::IncrementF64 { value, version },
        }
    }
}

/// A completion record appended with an object: where it is, its length and the
/// outcome it saves.
pub(super) type AppendedRecord = (LogRef, usize, RpcOutcome);

/// The longest stored value an increment reads as a number: longer than any
/// text [`CounterText`] writes, so every counter either front end made fits.
const MAX_COUNTER_TEXT_BYTES: usize = 400;

/// The value an increment by `delta` stores over `current` (a missing object
/// counts as 0): decimal text, with the number it is. A sum outside i64 is
/// `Overflow`.
pub(super) fn incremented_i64(
    current: Option<&ObjectView<'_>>,
    delta: i64,
) -> Result<NewValue<'static>, WriteError> {
    let old = match current {
        Some(view) => counter_text(view, counter::parse_i64)?,
        None => 0,
    };
    let new = old.checked_add(delta).ok_or(WriteError::Overflow)?;
    Ok(NewValue::Counter(
        CounterText::from_i64(new),
        Number::I64(new),
    ))
}

/// [`incremented_i64`] for INCRBYFLOAT's numbers: a non-finite sum is
/// `Overflow`.
pub(super) fn incremented_f64(
    current: Option<&ObjectView<'_>>,
    delta: f64,
) -> Result<NewValue<'static>, WriteError> {
    let old = match current {
        Some(view) => counter_text(view, counter::parse_f64)?,
        None => 0.0,
    };
    let mut new = old + delta;
    if !new.is_finite() {
        return Err(WriteError::Overflow);
    }
    // -0 is stored as "0": answer the number stored.
    if new == 0.0 {
        new = 0.0;
    }
    Ok(NewValue::Counter(
        CounterText::from_f64(new),
        Number::F64(new),
    ))
}

/// The number in `view`'s value, read with `parse` (decimal text, see
/// [`ramstore_wire::counter`]), or `NotNumeric`. Copies the value into a stack
/// buffer: a value may span seglets, and an increment must not allocate.
pub(super) fn counter_text<T>(
    view: &ObjectView<'_>,
    parse: impl FnOnce(&[u8]) -> Option<T>,
) -> Result<T, WriteError> {
    let len = view.value_len();
    if len > MAX_COUNTER_TEXT_BYTES {
        return Err(WriteError::NotNumeric(len));
    }
    let mut buf = [0u8; MAX_COUNTER_TEXT_BYTES];
    let mut at = 0;
    view.value_pieces(|piece| {
        // The pieces add up to `len`, checked above to fit.
        let end = (at + piece.len()).min(buf.len());
        buf[at..end].copy_from_slice(&piece[..end - at]);
        at = end;
    });
    parse(&buf[..at]).ok_or(WriteError::NotNumeric(len))
}

impl ObjectStore {
    /// Wall-clock ms of the store's clock, what expiry times are compared
    /// with ([`expiry::wall_ms`]).
    pub fn now_ms(&self) -> u64 {
        expiry::wall_ms(&**self.clock())
    }
}

fn object_len(log: &Log, at: LogRef) -> usize {
    // The entry was just appended by this thread: it parses.
    log.object(at).map_or(0, |v| v.entry_len())
}

impl ObjectStore {
    /// Writes an object; returns its new version.
    pub fn write(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: &RejectRules,
    ) -> Result<u64, WriteError> {
        self.write_as(table_id, key, value, rules, Access::Client)
    }

    /// [`Self::write`] for `access` (see [`Self::read_with_as`]).
    pub(crate) fn write_as(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: &RejectRules,
        access: Access,
    ) -> Result<u64, WriteError> {
        self.write_hashed_as(table_id, HashedKey::new(key), value, rules, access)
    }

    /// [`Self::write`] of a key its caller hashed already (for its lock-table
    /// check): the key is not hashed again (issue 21, "hash once").
    pub fn write_hashed(
        &self,
        table_id: u64,
        key: HashedKey<'_>,
        value: &[u8],
        rules: &RejectRules,
    ) -> Result<u64, WriteError> {
        self.write_hashed_as(table_id, key, value, rules, Access::Client)
    }

    /// [`Self::write_as`] of a hashed key.
    pub(crate) fn write_hashed_as(
        &self,
        table_id: u64,
        key: HashedKey<'_>,
        value: &[u8],
        rules: &RejectRules,
        access: Access,
    ) -> Result<u64, WriteError> {
        if value.len() > MAX_VALUE_BYTES {
            return Err(WriteError::ValueTooLarge(value.len()));
        }
        self.write_expiring_as(table_id, key, value, rules, access, Expiry::Set(None))
    }

    /// [`Self::write`] that also sets the object's expiry time (wall-clock ms;
    /// [`Expiry::Keep`] keeps the current one, as Redis's `SET … KEEPTTL`).
    /// A plain write clears any expiry, as Redis's SET does.
    pub fn write_expiring(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: &RejectRules,
        expiry: Expiry,
    ) -> Result<u64, WriteError> {
        self.write_expiring_as(
            table_id,
            HashedKey::new(key),
            value,
            rules,
            Access::Client,
            expiry,
        )
    }

    /// [`Self::write_expiring`] of a hashed key for `access`.
    pub(crate) fn write_expiring_as(
        &self,
        table_id: u64,
        key: HashedKey<'_>,
        value: &[u8],
        rules: &RejectRules,
        access: Access,
        expiry: Expiry,
    ) -> Result<u64, WriteError> {
        if value.len() > MAX_VALUE_BYTES {
            return Err(WriteError::ValueTooLarge(value.len()));
        }
        self.update_full(
            None,
            table_id,
            key,
            rules,
            (access, None, expiry),
            None,
            |_| Ok(NewValue::Borrowed(value)),
        )
        .map(|(version, _)| version)
    }

    /// Puts back an object as it was in a log being reloaded (cold start, recovery
    /// replay, R§7.6): with exactly `version`, replacing any current object. The
    /// caller keeps only the newest version of each key and raises the safe version
    /// ([`ObjectStore::raise_safe_version`]) above every version it saw.
    pub fn restore(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        version: u64,
    ) -> Result<(), WriteError> {
        self.restore_expiring(table_id, key, value, version, None)
    }

    /// [`Self::restore`] of an object that expires at `expires_at` (wall-clock
    /// ms), as its logged entry says: an object already expired is put back
    /// too (it reads as absent, and the active expirer deletes it with a
    /// tombstone), so the reloaded log tells the same story as the old one.
    pub fn restore_expiring(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        version: u64,
        expires_at: Option<u64>,
    ) -> Result<(), WriteError> {
        if value.len() > MAX_VALUE_BYTES {
            return Err(WriteError::ValueTooLarge(value.len()));
        }
        self.update(
            table_id,
            key,
            &RejectRules::default(),
            (Access::Replay, Some(version), Expiry::Set(expires_at)),
            |_| Ok(NewValue::Borrowed(value)),
        )
        .map(|_| ())
    }

    /// Replays an object of a crashed master's log (R§7.6): it becomes the key's
    /// object, with exactly `version`, unless the key already holds a version at
    /// least as new (entries arrive in any order). Returns whether it was applied.
    /// A replaced object dies as in any overwrite (a tombstone is logged for it),
    /// so the recovered log is as safe to clean as one written by clients.
    pub fn replay_object(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        version: u64,
    ) -> Result<bool, WriteError> {
        self.replay_in(None, table_id, (key, value, None), version, || false)
    }

    /// [`Self::replay_object`] of an object logged with expiry `expires_at`
    /// (wall-clock ms): the expiry is replayed with it, so an expired key
    /// never comes back after recovery (R§4: the log is the truth).
    pub fn replay_object_expiring(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        version: u64,
        expires_at: Option<u64>,
    ) -> Result<bool, WriteError> {
        self.replay_in(None, table_id, (key, value, expires_at), version, || false)
    }

    /// [`Self::replay_object`] into side log `side` instead of the head: a
    /// migration's pulled record (K§2.3), replicated with its side log's segments
    /// and committed with it, never waited for here.
    pub fn replay_object_into(
        &self,
        side: &SideLog,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        version: u64,
    ) -> Result<bool, WriteError> {
        self.replay_in(Some(side), table_id, (key, value, None), version, || false)
    }

    /// [`Self::replay_object_into`] unless `skip` says otherwise: `skip` is
    /// asked under the key's bucket lock, so it is atomic with the replay
    /// against every client operation on the key (a migration's "settled
    /// stays settled" check, K§2.3, without a lock around the whole batch).
    /// `Ok(false)` if skipped.
    pub fn replay_object_into_unless(
        &self,
        side: &SideLog,
        (table_id, key, value, version): (u64, &[u8], &[u8], u64),
        skip: impl FnOnce() -> bool,
    ) -> Result<bool, WriteError> {
        self.replay_in(Some(side), table_id, (key, value, None), version, skip)
    }

    fn replay_in(
        &self,
        side: Option<&SideLog>,
        table_id: u64,
        (key, value, expires_at): (&[u8], &[u8], Option<u64>),
        version: u64,
        skip: impl FnOnce() -> bool,
    ) -> Result<bool, WriteError> {
        if value.len() > MAX_VALUE_BYTES {
            return Err(WriteError::ValueTooLarge(value.len()));
        }
        let applied = self.update_in(
            side,
            table_id,
            key,
            &RejectRules::default(),
            (Access::Replay, Some(version), Expiry::Set(expires_at)),
            |current| match current {
                Some(c) if c.version() >= version => Err(WriteError::WrongVersion {
                    current: c.version(),
                }),
                // Skipped: answered as an older version would be.
                _ if skip() => Err(WriteError::WrongVersion {
                    current: current.map_or(0, |c| c.version()),
                }),
                _ => Ok(NewValue::Borrowed(value)),
            },
        );
        match applied {
            Ok(_) => Ok(true),
            Err(WriteError::WrongVersion { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Adds `delta` to an object whose value is an integer in decimal text (a
    /// missing object counts as 0 and is created), and stores the sum as decimal
    /// text: the form Redis's INCR reads and writes ([`ramstore_wire::counter`]),
    /// so native and Redis counters are one. Returns the new value and version.
    /// A value that is not such an integer is `NotNumeric`; a sum outside i64 is
    /// `Overflow`. Atomic: the read, the check of `rules` and the write happen
    /// under the key's bucket lock.
    pub fn increment_i64(
        &self,
        table_id: u64,
        key: &[u8],
        delta: i64,
        rules: &RejectRules,
    ) -> Result<(i64, u64), WriteError> {
        self.increment_i64_as(table_id, key, delta, rules, Access::Client)
    }

    /// [`Self::increment_i64`] for `access` (see [`Self::read_with_as`]).
    pub(crate) fn increment_i64_as(
        &self,
        table_id: u64,
        key: &[u8],
        delta: i64,
        rules: &RejectRules,
        access: Access,
    ) -> Result<(i64, u64), WriteError> {
        let mut new = 0;
        let version = self.update(
            table_id,
            key,
            rules,
            (access, None, Expiry::Keep),
            |current| {
                let next = incremented_i64(current, delta)?;
                if let NewValue::Counter(_, Number::I64(n)) = next {
                    new = n;
                }
                Ok(next)
            },
        )?;
        Ok((new, version))
    }

    /// Adds `delta` to an object whose value is a number in decimal text (a
    /// missing object counts as 0.0), and stores the sum as Redis's INCRBYFLOAT
    /// does ([`ramstore_wire::counter`]). A non-finite result is refused as an
    /// overflow.
    pub fn increment_f64(
        &self,
        table_id: u64,
        key: &[u8],
        delta: f64,
        rules: &RejectRules,
    ) -> Result<(f64, u64), WriteError> {
        self.increment_f64_as(table_id, key, delta, rules, Access::Client)
    }

    /// [`Self::increment_f64`] for `access` (see [`Self::read_with_as`]).
    pub(crate) fn increment_f64_as(
        &self,
        table_id: u64,
        key: &[u8],
        delta: f64,
        rules: &RejectRules,
        access: Access,
    ) -> Result<(f64, u64), WriteError> {
        let mut new = 0.0;
        let version = self.update(
            table_id,
            key,
            rules,
            (access, None, Expiry::Keep),
            |current| {
                let next = incremented_f64(current, delta)?;
                if let NewValue::Counter(_, Number::F64(n)) = next {
                    new = n;
                }
                Ok(next)
            },
        )?;
        Ok((new, version))
    }

    /// The write path shared by writes and increments: under the key's bucket lock,
    /// find the current object, check the rules, compute the value, append it with a
    /// tombstone for the old version, and publish it. Returns the new version.
    fn update<'v>(
        &self,
        table_id: u64,
        key: &[u8],
        rules: &RejectRules,
        how: (Access, Option<u64>, Expiry),
        compute: impl FnOnce(Option<&ObjectView<'_>>) -> Result<NewValue<'v>, WriteError>,
    ) -> Result<u64, WriteError> {
        self.update_in(None, table_id, key, rules, how, compute)
    }

    /// [`Self::update`] for an exactly-once RPC (`rpc`: lease id and sequence
    /// number): its completion record goes into the same append as the object
    /// (RIFL §4.1), so both are durable together. Returns the version and the
    /// record.
    pub(super) fn update_recorded<'v>(
        &self,
        (table_id, key): (u64, HashedKey<'_>),
        rules: &RejectRules,
        (access, expiry): (Access, Expiry),
        rpc: (u64, u64),
        compute: impl FnOnce(Option<&ObjectView<'_>>) -> Result<NewValue<'v>, WriteError>,
    ) -> Result<(u64, Option<AppendedRecord>), WriteError> {
        self.update_full(
            None,
            table_id,
            key,
            rules,
            (access, None, expiry),
            Some(rpc),
            compute,
        )
    }

    /// [`Self::update`], appending to side log `side` instead of the head when
    /// given (a migration's pulled records, K§2.3): then nothing is reported for
    /// replication here; the side log replicates whole segments and is committed
    /// later ([`ramstore_log::SideLog`]).
    pub(super) fn update_in<'v>(
        &self,
        side: Option<&SideLog>,
        table_id: u64,
        key: &[u8],
        rules: &RejectRules,
        how: (Access, Option<u64>, Expiry),
        compute: impl FnOnce(Option<&ObjectView<'_>>) -> Result<NewValue<'v>, WriteError>,
    ) -> Result<u64, WriteError> {
        self.update_full(
            side,
            table_id,
            HashedKey::new(key),
            rules,
            how,
            None,
            compute,
        )
        .map(|(version, _)| version)
    }

    /// The one write path: [`Self::update_in`], plus the completion record of
    /// exactly-once RPC `rpc` (lease id, sequence number) when given.
    #[allow(clippy::too_many_arguments)]
    fn update_full<'v>(
        &self,
        side: Option<&SideLog>,
        table_id: u64,
        hashed: HashedKey<'_>,
        rules: &RejectRules,
        (access, forced_version, expiry): (Access, Option<u64>, Expiry),
        rpc: Option<(u64, u64)>,
        compute: impl FnOnce(Option<&ObjectView<'_>>) -> Result<NewValue<'v>, WriteError>,
    ) -> Result<(u64, Option<AppendedRecord>), WriteError> {
        let key = hashed.key();
        if key.len() > MAX_KEY_BYTES {
            return Err(WriteError::KeyTooLarge(key.len()));
        }
        let hash = hashed.hash();
        let inner = &*self.inner;
        let log = &inner.log;
        let _pin = log.pin();
        let (appended, version, record) = {
            let mut guard = inner.index.lock(hash);
            let tablets = inner.shared.tablets.load();
            let tablet = tablets
                .find(table_id, hash)
                .ok_or(WriteError::UnknownTablet)?;
            tablet.admits(access).map_err(WriteError::from)?;
            let mut current_view = None;
            let current = guard
                .find(|r| match log.object(LogRef(r)) {
                    Ok(view) if view.table_id() == table_id && view.key_eq(key) => {
                        current_view = Some(view);
                        true
                    }
                    _ => false,
                })
                .and_then(|(slot, r)| {
                    current_view.as_ref().map(|v| Current {
                        slot,
                        at: LogRef(r),
                        version: v.version(),
                        len: v.entry_len(),
                    })
                });
            // An expired object is absent to clients (lazy expiry): the rules
            // and the new value see no object, though it still dies as any
            // replaced version does (its tombstone is logged below). Replay
            // (a forced version) compares versions with whatever is there.
            let expired = forced_version.is_none()
                && current_view
                    .as_ref()
                    .is_some_and(|v| v.expires_at().is_some_and(|at| at <= self.now_ms()));
            let live_view = current_view.as_ref().filter(|_| !expired);
            rules.check(current.as_ref().filter(|_| !expired).map(|c| c.version))?;
            let new_value = compute(live_view)?;
            let value = new_value.bytes();
            let expires_at = match expiry {
                Expiry::Keep => live_view.and_then(|v| v.expires_at()),
                Expiry::Set(at) => at,
            };
            let version = match (&current, forced_version) {
                (_, Some(v)) => v,
                (Some(c), None) => c.version + 1,
                (None, None) => inner.shared.safe_version.load(Ordering::SeqCst),
            };
            // A migration's safe version must exceed every version issued (K§2.3);
            // the store-wide maximum is written only when it grows.
            if inner.shared.max_version.load(Ordering::Relaxed) < version {
                inner
                    .shared
                    .max_version
                    .fetch_max(version, Ordering::SeqCst);
            }
            let object = NewObject {
                table_id,
                key,
                version,
                value,
                expires_at,
            };
            let dead = current.as_ref().map(|c| DeadObject {
                version: c.version,
                location: c.at,
            });
            let mut record = None;
            let appended = match (side, rpc) {
                (None, None) => log.append_object(&object, dead),
                (None, Some((lease_id, seq))) => {
                    let outcome = new_value.outcome(version);
                    let mut buf = [0; MAX_OUTCOME_BYTES];
                    let n = outcome.encode(&mut buf);
                    let encoded = encode_rpc_result(lease_id, seq, table_id, hash, &buf[..n])
                        .ok_or(WriteError::TooLargeRecord)?;
                    log.append_object_with_record(&object, dead, encoded.as_bytes())
                        .map(|(a, at)| {
                            record = Some((at, encoded.as_bytes().len(), outcome));
                            a
                        })
                }
                (Some(side), _) => log.append_side(side, &object, dead),
            };
            let appended = match appended {
                Ok(a) => a,
                Err(e) => {
                    self.kick_cleaner();
                    return Err(e.into());
                }
            };
            let new_len = object_len(log, appended.entry);
            match &current {
                Some(c) => {
                    guard.replace(c.slot, appended.entry.0);
                    log.object_died(c.at, c.len);
                    tablet.object_removed(c.len);
                }
                None => {
                    if guard.insert(appended.entry.0).is_err() {
                        // The hash table's overflow arena is exhausted: the appended
                        // object was never visible and is simply dead.
                        log.object_died(appended.entry, new_len);
                        return Err(WriteError::NoSpace);
                    }
                }
            }
            tablet.object_added(new_len);
            if let Some(at) = expires_at {
                // The active expirer finds it by this note (crate::deadlines).
                inner.deadlines.note(hash, at);
            }
            (appended, version, record)
        };
        if side.is_none() {
            log.replicate(&appended);
            self.note_head(appended.segment_id);
        }
        Ok((version, record))
    }
}
