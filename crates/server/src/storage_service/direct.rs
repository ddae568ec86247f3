//! The Redis front end's direct path onto this master ([`LocalObjects`]): reads,
//! writes and removes called in-process, without a native request encoded by the
//! front end and decoded here, and a native response encoded here and decoded
//! there — on small machines those cost more per command than the RESP parsing.
//!
//! Everything else is the native path's, because both take the one request path
//! ([`StorageService::serve`], `super::request_path`): the same guards before the
//! operation (fenced off, zombie, not confirmed alive), the same object store calls
//! (`super::object_ops`; tablet ownership and recovering tablets included) with
//! the durability point each returns, the same replication wait (a write is
//! answered only once it is on all R backups, a read of an object that is not
//! durable yet, or a miss while a delete may not be, waits until it is), the same
//! metrics, and the same second membership check after a read, so a freeze
//! between the first check and the read cannot let a stale value out. Only the
//! shape of the answer is this file's ([`Local`]).
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

use std::marker::PhantomData;

use ramstore_master::{ReadError, WriteError};
use ramstore_resp::backend::{Direct, DirectAnswer, LocalObjects, WriteResult};
use ramstore_wire::{ErrorBody, ExpireCondition, ExpiryChange, Opcode, RejectRules, Status};

use super::object_ops::{read_status, write_status, LOG_FULL_MESSAGE};
use super::request_path::{Durability, DurabilityWait, FrontEnd, Step, FENCED_MESSAGE};
use super::StorageService;
use crate::replica_manager::ReplicationError;

/// The message of a RETRY answered after a replication wait timed out.
const NOT_DURABLE_IN_TIME: &str = "the log did not become durable in time";

/// The message of a request the direct path leaves to the native path.
const NOT_DIRECT: &str = "not carried out on the direct path";

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

/// The direct path's answers ([`FrontEnd`]): typed, for the Redis front end.
struct Local<T>(PhantomData<fn() -> T>);

impl<T: Send + 'static> FrontEnd for Local<T> {
    type Body = Direct<T>;
    type Answer = DirectAnswer<T>;

    fn refuse(&mut self, refusal: ErrorBody<'static>) -> Direct<T> {
        elsewhere(refusal)
    }

    /// What this master did not carry out is forwarded at once, before any wait,
    /// so the command keeps its place in the pipeline.
    fn waits(&self, body: &Direct<T>) -> bool {
        !matches!(body, Direct::Elsewhere(..))
    }

    fn now(self, body: Direct<T>) -> DirectAnswer<T> {
        DirectAnswer::Now(body)
    }

    /// A failed wait is answered as the native path answers it: SERVER_NOT_UP when
    /// fenced off, RETRY on a timeout.
    fn later(self, body: Direct<T>, wait: DurabilityWait) -> DirectAnswer<T> {
        DirectAnswer::Later(Box::pin(async move {
            match wait.done().await {
                Ok(()) => body,
                Err(ReplicationError::Fenced) => {
                    Direct::Elsewhere(Status::ServerNotUp, FENCED_MESSAGE)
                }
                Err(_) => Direct::Elsewhere(Status::Retry, NOT_DURABLE_IN_TIME),
            }
        }))
    }

    /// The front end forwards it as a native request.
    fn hand_off(self) -> DirectAnswer<T> {
        DirectAnswer::Now(Direct::Elsewhere(Status::Retry, NOT_DIRECT))
    }
}

impl<T> Local<T> {
    fn new() -> Self {
        Local(PhantomData)
    }
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
        let mark = value.len();
        let answer = self.serve(Opcode::Read, Local::new(), |_| {
            let (result, durability) = self.read_object(table_id, key, |view| {
                // The value goes from the log straight into the caller's buffer.
                view.value_pieces(|piece| value.extend_from_slice(piece));
                view.version()
            });
            Step::Answered(read_answer(result), durability)
        });
        if let DirectAnswer::Now(Direct::Elsewhere(..)) = answer {
            // Refused after reading (the lease ended meanwhile): no value leaves.
            value.truncate(mark);
        }
        answer
    }

    /// Writes `key` of `table_id` for the Redis front end unless `rules` refuse it
    /// (a refusal is an answer too). See the module doc for what it shares with a
    /// native Write.
    pub fn write_local(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules_w: &RejectRules,
    ) -> DirectAnswer<WriteResult> {
        let op = Opcode::Write;
        self.serve(op, Local::new(), |_| {
            let answer = match self.write_object(table_id, key, value, rules_w) {
                Ok(version) => Direct::Done(WriteResult::Written(version)),
                Err(WriteError::ObjectExists) => Direct::Done(WriteResult::Exists),
                Err(WriteError::ObjectDoesntExist) => Direct::Done(WriteResult::Missing),
                Err(WriteError::WrongVersion { current }) => {
                    Direct::Done(WriteResult::WrongVersion(current))
                }
                Err(e) => self.update_refused(op, e),
            };
            Step::Answered(answer, Durability::LogEnd)
        })
    }

    /// Removes `key` of `table_id` for the Redis front end: the version removed, or
    /// `None` if there was none. See the module doc for what it shares with a
    /// native Remove.
    pub fn remove_local(&self, table_id: u64, key: &[u8]) -> DirectAnswer<Option<u64>> {
        let op = Opcode::Remove;
        self.serve(op, Local::new(), |_| {
            let answer = match self.remove_object(table_id, key, &Default::default()) {
                Ok(removed) => Direct::Done(removed),
                Err(e) => self.update_refused(op, e),
            };
            Step::Answered(answer, Durability::LogEnd)
        })
    }

    /// The direct answer to update `op` refused with `e`. A full log is answered
    /// final once the master has refused writes for longer than its patience (see
    /// the module doc).
    fn update_refused<T>(&self, op: Opcode, e: WriteError) -> Direct<T> {
        let WriteError::NoSpace = e else {
            return match write_status(self.count_refusal(e)) {
                s if is_elsewhere(s) => Direct::Elsewhere(s, ""),
                s => Direct::Failed(s),
            };
        };
        let now = self.clock.now();
        let refusing_for = self.full_log.refused(now);
        // Removes are not cut short: they are what makes room, and the cleaner
        // reclaims what they free (L§7), so each one keeps its own bounded wait
        // in the front end.
        if op != Opcode::Remove && refusing_for >= self.full_log.patience() {
            // Out of memory, not waiting for the cleaner: answer now, so a
            // pipeline does not wait the patience once per write.
            Direct::Failed(Status::NoSpace)
        } else {
            Direct::Elsewhere(Status::NoSpace, LOG_FULL_MESSAGE)
        }
    }
}

/// The direct answer to a read that returned `result`.
fn read_answer(result: Result<u64, ReadError>) -> Direct<Option<u64>> {
    match result {
        Ok(version) => Direct::Done(Some(version)),
        Err(ReadError::ObjectDoesntExist) => Direct::Done(None),
        Err(e) => match read_status(e) {
            s if is_elsewhere(s) => Direct::Elsewhere(s, ""),
            s => Direct::Failed(s),
        },
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
        rules: &RejectRules,
    ) -> DirectAnswer<WriteResult> {
        StorageService::write_local(self, table_id, key, value, rules)
    }

    fn remove_local(&self, table_id: u64, key: &[u8]) -> DirectAnswer<Option<u64>> {
        StorageService::remove_local(self, table_id, key)
    }

    fn write_expiring_local(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: &RejectRules,
        expiry: ExpiryChange,
    ) -> DirectAnswer<WriteResult> {
        let op = Opcode::WriteExpiring;
        let expiry = super::expiry_ops::expiry_of(expiry);
        self.serve(op, Local::new(), |_| {
            let written = self.write_object_expiring(table_id, key, value, rules, expiry);
            let answer = match written {
                Ok(version) => Direct::Done(WriteResult::Written(version)),
                Err(WriteError::ObjectExists) => Direct::Done(WriteResult::Exists),
                Err(WriteError::ObjectDoesntExist) => Direct::Done(WriteResult::Missing),
                Err(WriteError::WrongVersion { current }) => {
                    Direct::Done(WriteResult::WrongVersion(current))
                }
                Err(e) => self.update_refused(op, e),
            };
            Step::Answered(answer, Durability::LogEnd)
        })
    }

    fn set_expiry_local(
        &self,
        table_id: u64,
        key: &[u8],
        expires_at: Option<u64>,
        condition: ExpireCondition,
    ) -> DirectAnswer<bool> {
        let op = Opcode::SetExpiry;
        self.serve(op, Local::new(), |_| {
            let answer = match self.set_object_expiry(table_id, key, expires_at, condition) {
                Ok(changed) => Direct::Done(changed),
                Err(e) => self.update_refused(op, e),
            };
            Step::Answered(answer, Durability::LogEnd)
        })
    }

    fn expiry_local(&self, table_id: u64, key: &[u8]) -> DirectAnswer<Option<Option<u64>>> {
        self.serve(Opcode::GetExpiry, Local::new(), |_| {
            let (result, durability) = self.object_expiry(table_id, key);
            let answer = match result {
                Ok(at) => Direct::Done(Some(at)),
                Err(ReadError::ObjectDoesntExist) => Direct::Done(None),
                Err(e) => match read_status(e) {
                    s if is_elsewhere(s) => Direct::Elsewhere(s, ""),
                    s => Direct::Failed(s),
                },
            };
            Step::Answered(answer, durability)
        })
    }

    fn prefetch(&self, key: &[u8]) {
        self.store.prefetch(key);
    }

    fn stats_text(&self) -> String {
        StorageService::stats_text(self)
    }
}
