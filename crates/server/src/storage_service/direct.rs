//! The Redis front end's direct path onto this master ([`LocalObjects`]): reads,
//! writes and removes called in-process, without a native request encoded by the
//! front end and decoded here, and a native response encoded here and decoded
//! there — on small machines those cost more per command than the RESP parsing.
//!
//! Everything else is the native path's: the same guards before the operation
//! ([`StorageService::refusal`]: fenced off, zombie, not confirmed alive), the same
//! object store calls (tablet ownership and recovering tablets included), the same
//! durability bookkeeping of reads (`note_read_durability`, `note_miss_durability`)
//! and the same replication wait ([`StorageService::durability_wait`]): a write is
//! answered only once it is on all R backups, a read of an object that is not
//! durable yet (or a miss while a delete may not be) waits until it is. The same
//! metrics are recorded. A read also checks the membership guard again after
//! reading, so a freeze between the first check and the read cannot let a stale
//! value out.
//!
//! What the master does not carry out itself is answered [`Direct::Elsewhere`] at
//! once, before any wait, and the front end forwards it as a native request
//! through the client library (which routes and retries it), so those cases are
//! exactly the native path's too.
//!
//! One exception: a full log (NO_SPACE, L§7). The front end retries it on this
//! master for its patience; once the master has been refusing writes for longer
//! than its own patience ([`super::FullLog`]) a refused write is answered
//! [`Direct::Failed`] with NO_SPACE at once, which the front end answers `-OOM`.

use ramstore_master::{ReadError, WriteError};
use ramstore_resp::backend::{Direct, DirectAnswer, LocalObjects, WriteResult};
use ramstore_wire::{ErrorBody, Opcode, Status, WireRejectRules};

use super::{read_status, rules, write_status, StorageService, LOG_FULL_MESSAGE, READ_SYNC_POINT};
use crate::metrics::Op;
use crate::replica_manager::ReplicationError;

/// The message of a RETRY answered after a replication wait timed out.
const NOT_DURABLE_IN_TIME: &str = "the log did not become durable in time";

/// A refusal body as a direct answer.
fn elsewhere<T>(body: ErrorBody<'static>) -> Direct<T> {
    match body {
        ErrorBody::Message { status, message } => Direct::Elsewhere(status, message),
        other => Direct::Elsewhere(other.status(), ""),
    }
}

/// Whether the native path's client would route or retry `status` (the master did
/// not carry the operation out), rather than hear it as the answer.
fn is_elsewhere(status: Status) -> bool {
    matches!(
        status,
        Status::UnknownTablet | Status::Retry | Status::ServerNotUp | Status::NoSpace
    )
}

impl StorageService {
    /// Reads `key` of `table_id` for the Redis front end: its version, with the
    /// value appended to `value`, or `None` if there is no such object. See the
    /// module doc for what it shares with a native Read.
    pub fn read_local(
        &self,
        table_id: u64,
        key: &[u8],
        value: &mut Vec<u8>,
    ) -> DirectAnswer<Option<u64>> {
        let op = Opcode::Read;
        let started = self.clock.now();
        READ_SYNC_POINT.set(None);
        if let Some(body) = self.refusal(op, started) {
            self.metrics
                .record(Op::from(op), self.clock.elapsed(started));
            return DirectAnswer::Now(elsewhere(body));
        }
        let mark = value.len();
        let result = self.store.read_with(table_id, key, |view| {
            self.note_read_durability(view);
            // The value goes from the log straight into the caller's buffer.
            view.value_pieces(|piece| value.extend_from_slice(piece));
            view.version()
        });
        let answer = match result {
            Ok(version) => Direct::Done(Some(version)),
            Err(e) => {
                self.note_miss_durability(e);
                match e {
                    ReadError::ObjectDoesntExist => Direct::Done(None),
                    e => match read_status(e) {
                        s if is_elsewhere(s) => Direct::Elsewhere(s, ""),
                        s => Direct::Failed(s),
                    },
                }
            }
        };
        let finished = self.clock.now();
        // The membership guard again, now that the value was read (see module doc).
        let answer = match self.unconfirmed_refusal(op, finished) {
            Some(body) => {
                value.truncate(mark);
                elsewhere(body)
            }
            None => answer,
        };
        self.metrics
            .record(Op::from(op), finished.saturating_duration_since(started));
        if matches!(answer, Direct::Elsewhere(..)) {
            return DirectAnswer::Now(answer);
        }
        self.after_durable(op, answer)
    }

    /// Writes `key` of `table_id` for the Redis front end unless `rules` refuse it
    /// (a refusal is an answer too). See the module doc for what it shares with a
    /// native Write.
    pub fn write_local(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules_w: &WireRejectRules,
    ) -> DirectAnswer<WriteResult> {
        let op = Opcode::Write;
        self.update_local(op, || {
            match self.store.write(table_id, key, value, &rules(rules_w)) {
                Ok(version) => {
                    self.full_log.accepted();
                    Ok(WriteResult::Written(version))
                }
                Err(WriteError::ObjectExists) => Ok(WriteResult::Exists),
                Err(WriteError::ObjectDoesntExist) => Ok(WriteResult::Missing),
                Err(WriteError::WrongVersion { current }) => Ok(WriteResult::WrongVersion(current)),
                Err(e) => Err(e),
            }
        })
    }

    /// Removes `key` of `table_id` for the Redis front end: the version removed, or
    /// `None` if there was none. See the module doc for what it shares with a
    /// native Remove.
    pub fn remove_local(&self, table_id: u64, key: &[u8]) -> DirectAnswer<Option<u64>> {
        self.update_local(Opcode::Remove, || {
            self.store.remove(table_id, key, &Default::default())
        })
    }

    /// Runs one update behind the guards, then answers once it is durable.
    fn update_local<T: Send + 'static>(
        &self,
        op: Opcode,
        update: impl FnOnce() -> Result<T, WriteError>,
    ) -> DirectAnswer<T> {
        let started = self.clock.now();
        if let Some(body) = self.refusal(op, started) {
            self.metrics
                .record(Op::from(op), self.clock.elapsed(started));
            return DirectAnswer::Now(elsewhere(body));
        }
        let answer = match update() {
            Ok(v) => Direct::Done(v),
            Err(WriteError::NoSpace) => {
                let now = self.clock.now();
                let refusing_for = self.full_log.refused(now);
                // Removes are not cut short: they are what makes room, and the
                // cleaner reclaims what they free (L§7), so each one keeps its
                // own bounded wait in the front end.
                if op != Opcode::Remove && refusing_for >= self.full_log.patience() {
                    // Out of memory, not waiting for the cleaner: answer now, so
                    // a pipeline does not wait the patience once per write.
                    Direct::Failed(Status::NoSpace)
                } else {
                    Direct::Elsewhere(Status::NoSpace, LOG_FULL_MESSAGE)
                }
            }
            Err(e) => match write_status(self.count_refusal(e)) {
                s if is_elsewhere(s) => Direct::Elsewhere(s, ""),
                s => Direct::Failed(s),
            },
        };
        self.metrics
            .record(Op::from(op), self.clock.elapsed(started));
        if matches!(answer, Direct::Elsewhere(..)) {
            return DirectAnswer::Now(answer);
        }
        self.after_durable(op, answer)
    }

    /// `answer` now, or once the log is durable as far as the native path's answer
    /// to `op` would wait (`after_replication`); a wait that fails is answered as
    /// the native path answers it (SERVER_NOT_UP when fenced, RETRY on a timeout).
    fn after_durable<T: Send + 'static>(&self, op: Opcode, answer: Direct<T>) -> DirectAnswer<T> {
        let Some((manager, point)) = self.durability_wait(op) else {
            return DirectAnswer::Now(answer);
        };
        DirectAnswer::Later(Box::pin(async move {
            match manager.wait_durable(point).await {
                Ok(()) => answer,
                Err(ReplicationError::Fenced) => {
                    Direct::Elsewhere(Status::ServerNotUp, super::FENCED_MESSAGE)
                }
                Err(_) => Direct::Elsewhere(Status::Retry, NOT_DURABLE_IN_TIME),
            }
        }))
    }
}

impl LocalObjects for StorageService {
    fn read_local(
        &self,
        table_id: u64,
        key: &[u8],
        value: &mut Vec<u8>,
    ) -> DirectAnswer<Option<u64>> {
        StorageService::read_local(self, table_id, key, value)
    }

    fn write_local(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: &WireRejectRules,
    ) -> DirectAnswer<WriteResult> {
        StorageService::write_local(self, table_id, key, value, rules)
    }

    fn remove_local(&self, table_id: u64, key: &[u8]) -> DirectAnswer<Option<u64>> {
        StorageService::remove_local(self, table_id, key)
    }

    fn prefetch(&self, key: &[u8]) {
        self.store.prefetch(key);
    }
}
