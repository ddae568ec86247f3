//! The object-store calls both front ends make (step 2 of
//! [`super::request_path`]), and how the store's errors map to wire statuses.
//!
//! A read returns the [`Durability`] of what it read as a value, next to what the
//! caller's closure made of the object; an update's answer always waits for the
//! log's end ([`Durability::LogEnd`]). Accepted writes and NO_SPACE refusals are
//! noted in [`super::FullLog`] here, so both front ends count them alike.
//!
//! Every call passes the migration gate first ([`StorageService::migration_gate`],
//! K§2.3): on a tablet migrating in, a key whose record may still be on the
//! source is answered RETRY while a PriorityPull brings it.

use ramstore_log::ObjectView;
use ramstore_master::{HashedKey, ReadError, RejectRules, WriteError};
use ramstore_wire::{ErrorBody, Status};

use super::migration::{Gated, MIGRATION_RETRY_MS};
use super::request_path::Durability;
use super::StorageService;
use ramstore_master::migration::ClientOp;

/// The message of a NO_SPACE answer (L§7: the log is full until its cleaner frees
/// space, or for good if the live data leaves no room).
pub(crate) const LOG_FULL_MESSAGE: &str =
    "the log is full (refusing writes until the cleaner frees space)";

pub(crate) fn read_status(e: ReadError) -> Status {
    match e {
        ReadError::UnknownTablet => Status::UnknownTablet,
        ReadError::ObjectDoesntExist => Status::ObjectDoesntExist,
        ReadError::KeyTooLarge(_) => Status::TooLarge,
        ReadError::Migrating => Status::Retry,
        _ => Status::Internal,
    }
}

pub(crate) fn write_status(e: WriteError) -> Status {
    match e {
        WriteError::UnknownTablet => Status::UnknownTablet,
        WriteError::ObjectDoesntExist => Status::ObjectDoesntExist,
        WriteError::ObjectExists => Status::ObjectExists,
        WriteError::WrongVersion { .. } => Status::WrongVersion,
        WriteError::KeyTooLarge(_) | WriteError::ValueTooLarge(_) => Status::TooLarge,
        WriteError::NotNumeric(_) => Status::NotNumeric,
        WriteError::Overflow => Status::Overflow,
        WriteError::NoSpace => Status::NoSpace,
        WriteError::Migrating
        | WriteError::RpcInProgress
        | WriteError::LeaseUnverified
        | WriteError::ObjectLocked => Status::Retry,
        WriteError::StaleRpc => Status::StaleRpc,
        _ => Status::Internal,
    }
}

pub(crate) fn error_body(e: WriteError) -> ErrorBody<'static> {
    match e {
        WriteError::Migrating | WriteError::ObjectLocked => status_body(Status::Retry),
        WriteError::WrongVersion { current } => ErrorBody::WrongVersion {
            current_version: current,
        },
        other => ErrorBody::Message {
            status: write_status(other),
            message: "",
        },
    }
}

/// The body of an error answer with `status`; RETRY (a key being pulled by a
/// migration) carries its short delay.
pub(crate) fn status_body(status: Status) -> ErrorBody<'static> {
    match status {
        Status::Retry => ErrorBody::Retry {
            delay_ms: MIGRATION_RETRY_MS,
        },
        status => ErrorBody::Message {
            status,
            message: "",
        },
    }
}

/// A write's kind for the migration gate: one without reject rules does not
/// depend on the old record.
pub(crate) fn write_kind(rules: &RejectRules) -> ClientOp {
    if *rules == RejectRules::default() {
        ClientOp::BlindWrite
    } else {
        ClientOp::ReadsRecord
    }
}

impl StorageService {
    /// Reads `key` of `table_id`, handing the object to `f` inside the store: what
    /// `f` made of it (or why there is none), and what the answer must wait for.
    pub(crate) fn read_object<T>(
        &self,
        table_id: u64,
        key: &[u8],
        f: impl FnOnce(&ObjectView<'_>) -> T,
    ) -> (Result<T, ReadError>, Durability) {
        let mut durability = Durability::Now;
        let read = |view: &ObjectView<'_>| {
            durability = self.read_durability(view);
            f(view)
        };
        let result = match self.migration_gate(table_id, key, ClientOp::ReadsRecord) {
            Gated::Plain => self.store.read_with(table_id, key, read),
            Gated::Arrived(_) => self.store.read_with_arrived(table_id, key, read),
            Gated::Wait => Err(ReadError::Migrating),
        };
        if let Err(e) = result {
            durability = self.miss_durability(e);
        }
        (result, durability)
    }

    /// Writes `key` of `table_id` unless `rules` refuse it: the new version.
    pub(crate) fn write_object(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: &RejectRules,
    ) -> Result<u64, WriteError> {
        // Hashed once, for the lock check and the write (issue 21).
        let hashed = HashedKey::new(key);
        let locks = self.unlocked(table_id, &hashed)?;
        let written = match self.migration_gate(table_id, key, write_kind(rules)) {
            Gated::Plain => self.store.write_hashed(table_id, hashed, value, rules),
            Gated::Arrived(m) => {
                let written = self
                    .store
                    .write_arrived_hashed(table_id, hashed, value, rules);
                if written.is_ok() {
                    // Its version is above every pulled one: authoritative.
                    m.settle(key);
                }
                written
            }
            Gated::Wait => Err(WriteError::Migrating),
        };
        drop(locks);
        self.accepted(written)
    }

    /// Deletes `key` of `table_id` unless `rules` refuse it: the version it had,
    /// if any. On a tablet migrating in, only once the key's record has arrived
    /// (its answer says whether the object existed).
    pub(crate) fn remove_object(
        &self,
        table_id: u64,
        key: &[u8],
        rules: &RejectRules,
    ) -> Result<Option<u64>, WriteError> {
        let _locks = self.unlocked(table_id, &HashedKey::new(key))?;
        match self.migration_gate(table_id, key, ClientOp::ReadsRecord) {
            Gated::Plain => self.store.remove(table_id, key, rules),
            Gated::Arrived(_) => self.store.remove_arrived(table_id, key, rules),
            Gated::Wait => Err(WriteError::Migrating),
        }
    }

    /// Adds `delta` to the little-endian i64 `key` of `table_id`: the new value's
    /// bytes and version.
    pub(crate) fn increment_i64(
        &self,
        table_id: u64,
        key: &[u8],
        delta: i64,
        rules: &RejectRules,
    ) -> Result<([u8; 8], u64), WriteError> {
        let locks = self.unlocked(table_id, &HashedKey::new(key))?;
        let result = match self.migration_gate(table_id, key, ClientOp::ReadsRecord) {
            Gated::Plain => self.store.increment_i64(table_id, key, delta, rules),
            Gated::Arrived(_) => self
                .store
                .increment_i64_arrived(table_id, key, delta, rules),
            Gated::Wait => Err(WriteError::Migrating),
        };
        drop(locks);
        self.accepted(result.map(|(v, version)| (v.to_le_bytes(), version)))
    }

    /// Adds `delta` to the little-endian f64 `key` of `table_id`: the new value's
    /// bytes and version.
    pub(crate) fn increment_f64(
        &self,
        table_id: u64,
        key: &[u8],
        delta: f64,
        rules: &RejectRules,
    ) -> Result<([u8; 8], u64), WriteError> {
        let locks = self.unlocked(table_id, &HashedKey::new(key))?;
        let result = match self.migration_gate(table_id, key, ClientOp::ReadsRecord) {
            Gated::Plain => self.store.increment_f64(table_id, key, delta, rules),
            Gated::Arrived(_) => self
                .store
                .increment_f64_arrived(table_id, key, delta, rules),
            Gated::Wait => Err(WriteError::Migrating),
        };
        drop(locks);
        self.accepted(result.map(|(v, version)| (v.to_le_bytes(), version)))
    }

    /// Notes an accepted write (an exactly-once one's, whose result type differs).
    pub(crate) fn note_accepted(&self) {
        self.full_log.accepted();
    }

    /// Notes an accepted write: the log is not refusing writes any more (L§7).
    fn accepted<T>(&self, result: Result<T, WriteError>) -> Result<T, WriteError> {
        if result.is_ok() {
            self.full_log.accepted();
        }
        result
    }

    /// The error body of a refused update, counted when it is NO_SPACE.
    pub(crate) fn refused(&self, e: WriteError) -> ErrorBody<'static> {
        match self.count_refusal(e) {
            WriteError::NoSpace => ErrorBody::Message {
                status: Status::NoSpace,
                message: LOG_FULL_MESSAGE,
            },
            e => error_body(e),
        }
    }

    /// Counts NO_SPACE answers (the log is full until the cleaner frees space;
    /// clients retry them, so only this counter and the refusing-writes state show
    /// them to an operator) and notes them in [`super::FullLog`].
    pub(crate) fn count_refusal(&self, e: WriteError) -> WriteError {
        if matches!(e, WriteError::NoSpace) {
            self.full_log.refused(self.clock.now());
        }
        e
    }
}
