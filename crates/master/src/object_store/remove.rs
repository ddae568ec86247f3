//! Deletes of an object store: a tombstone is logged for the dead object, and the
//! safe version is raised before it exists so versions never go back (R§3.1, R§7.6).

use std::sync::atomic::Ordering;

use ramstore_log::{Appended, DeadObject, LogRef, TombstoneHold, MAX_KEY_BYTES};
use ramstore_wire::RejectRules;

use ramstore_log::entry::encode_rpc_result;

use super::write::AppendedRecord;
use super::ObjectStore;
use crate::error::WriteError;
use crate::hashed_key::HashedKey;
use crate::rifl::{RpcOutcome, MAX_OUTCOME_BYTES};
use crate::tablets::Access;

impl ObjectStore {
    /// Replays a tombstone of a crashed master's log (R§7.6): the key's object
    /// dies if its version is at most `version`. Returns whether one died.
    pub fn replay_tombstone(
        &self,
        table_id: u64,
        key: &[u8],
        version: u64,
    ) -> Result<bool, WriteError> {
        let rules = RejectRules {
            given_version: version,
            version_gt_given: true,
            ..RejectRules::default()
        };
        match self.remove_as(table_id, key, &rules, Access::Replay) {
            Ok(removed) => Ok(removed.is_some()),
            Err(WriteError::WrongVersion { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Deletes an object; returns the version it had, or `None` if there was none.
    pub fn remove(
        &self,
        table_id: u64,
        key: &[u8],
        rules: &RejectRules,
    ) -> Result<Option<u64>, WriteError> {
        self.remove_as(table_id, key, rules, Access::Client)
    }

    /// [`Self::remove`] for `access`: replay reaches a tablet that is still being
    /// recovered; see also [`Self::read_with_as`].
    pub(crate) fn remove_as(
        &self,
        table_id: u64,
        key: &[u8],
        rules: &RejectRules,
        access: Access,
    ) -> Result<Option<u64>, WriteError> {
        self.remove_full(table_id, HashedKey::new(key), rules, access, None, false)
            .map(|(v, _)| v)
    }

    /// [`Self::remove_as`], appending the completion record of exactly-once RPC
    /// `rpc` (lease id, sequence number) with the tombstone when an object died
    /// (RIFL §4.1). A delete of nothing changes nothing and logs no record.
    /// With `only_expired` (the active expirer's deletes), an object that has
    /// not expired, checked under the bucket lock, is left alone: a key
    /// rewritten since it was sampled is never deleted.
    pub(super) fn remove_full(
        &self,
        table_id: u64,
        hashed: HashedKey<'_>,
        rules: &RejectRules,
        access: Access,
        rpc: Option<(u64, u64)>,
        only_expired: bool,
    ) -> Result<(Option<u64>, Option<AppendedRecord>), WriteError> {
        let key = hashed.key();
        if key.len() > MAX_KEY_BYTES {
            return Err(WriteError::KeyTooLarge(key.len()));
        }
        let hash = hashed.hash();
        let inner = &*self.inner;
        let log = &inner.log;
        let _pin = log.pin();
        let (appended, version, record, expired): (Appended, u64, Option<AppendedRecord>, bool) = {
            let mut guard = inner.index.lock(hash);
            let tablets = inner.shared.tablets.load();
            let tablet = tablets
                .find(table_id, hash)
                .ok_or(WriteError::UnknownTablet)?;
            tablet.admits(access).map_err(WriteError::from)?;
            let mut current = None;
            let mut expired = false;
            let found = guard.find(|r| match log.object(LogRef(r)) {
                Ok(view) if view.table_id() == table_id && view.key_eq(key) => {
                    current = Some((view.version(), view.entry_len()));
                    // Replay's tombstones compare versions with whatever is
                    // there; clients see an expired object as absent.
                    expired = access != Access::Replay
                        && view.expires_at().is_some_and(|at| at <= self.now_ms());
                    true
                }
                _ => false,
            });
            if only_expired && !expired {
                return Ok((None, None));
            }
            rules.check(current.filter(|_| !expired).map(|(v, _)| v))?;
            let (Some((slot, r)), Some((version, len))) = (found, current) else {
                return Ok((None, None));
            };
            // Raise the safe version before the tombstone exists, so that any head
            // opened from now on records it (R§3.1): versions of this key stay
            // monotonic even after the tombstone is cleaned.
            let safe = &inner.shared.safe_version;
            let before = safe.fetch_max(version + 1, Ordering::SeqCst);
            let dead = DeadObject {
                version,
                location: LogRef(r),
            };
            // A tablet migrating in keeps its deletes' tombstones until the
            // migration is recorded done (K§2.3.4; `Tablet::tombstone_hold`).
            // An exactly-once delete writes its completion record with the
            // tombstone, held or not (regression: a delete on a migrating-in
            // tablet wrote none, so its retry ran again; sim seeds 71 and 74).
            let mut record = None;
            let hold = TombstoneHold::from_id(tablet.tombstone_hold());
            let appended = match (hold, rpc) {
                (Some(hold), None) => log.append_held_tombstone(table_id, key, dead, hold),
                (None, None) => log.append_tombstone(table_id, key, dead),
                (hold, Some((lease_id, seq))) => {
                    let outcome = RpcOutcome::Remove {
                        existed: !expired,
                        version,
                    };
                    let mut buf = [0; MAX_OUTCOME_BYTES];
                    let n = outcome.encode(&mut buf);
                    let encoded = encode_rpc_result(lease_id, seq, table_id, hash, &buf[..n])
                        .ok_or(WriteError::TooLargeRecord)?;
                    let bytes = encoded.as_bytes();
                    let appended = match hold {
                        Some(hold) => log.append_held_tombstone_with_record(
                            (table_id, key),
                            dead,
                            hold,
                            bytes,
                        ),
                        None => log.append_tombstone_with_record(table_id, key, dead, bytes),
                    };
                    appended.map(|(a, at)| {
                        record = Some((at, bytes.len(), outcome));
                        a
                    })
                }
            };
            let appended = match appended {
                Ok(a) => a,
                Err(e) => {
                    // Nothing was deleted: undo our raise unless another delete has
                    // raised it further since (a higher value is never wrong).
                    if before < version + 1 {
                        let _ = safe.compare_exchange(
                            version + 1,
                            before,
                            Ordering::SeqCst,
                            Ordering::SeqCst,
                        );
                    }
                    self.kick_cleaner();
                    return Err(e.into());
                }
            };
            guard.remove(slot);
            log.object_died(LogRef(r), len);
            tablet.object_removed(len);
            (appended, version, record, expired)
        };
        log.replicate(&appended);
        self.note_head(appended.segment_id);
        // A delete of an expired object logs its tombstone (the object is
        // gone from memory and the log's story alike) but answers that there
        // was nothing, as Redis's DEL of an expired key answers 0 (the
        // expirer, `only_expired`, is told what it deleted).
        if expired && !only_expired {
            return Ok((None, record));
        }
        Ok((Some(version), record))
    }
}
