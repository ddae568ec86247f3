//! Key expiry on this master, for both front ends: the object-store calls
//! (through the transaction locks and the migration gate, as every update's)
//! and the native answers of SetExpiry, GetExpiry and WriteExpiring
//! (`ramstore_wire`'s key-expiry messages).
//!
//! On a tablet migrating in, an expiry change waits (RETRY) until the
//! migration is done rather than take the arrived-record path: expiry changes
//! are rare next to reads and writes, and the wait keeps the gate's rules in
//! one place.

use ramstore_master::migration::ClientOp;
use ramstore_master::{ExpireCondition, Expiry, HashedKey, ReadError, WriteError};
use ramstore_wire::{encode_response, ExpiryChange, Opcode, RejectRules, Response, WireError};

use super::migration::Gated;
use super::object_ops::{read_status, status_body, write_kind};
use super::request_path::Durability;
use super::StorageService;

/// The master's form of a wire expiry change.
pub(crate) fn expiry_of(change: ExpiryChange) -> Expiry {
    match change {
        ExpiryChange::Keep => Expiry::Keep,
        ExpiryChange::Clear => Expiry::Set(None),
        ExpiryChange::At(at) => Expiry::Set(Some(at)),
    }
}

impl StorageService {
    /// Writes `key` of `table_id` with the expiry `expiry` says, unless `rules`
    /// refuse it: the new version.
    pub(crate) fn write_object_expiring(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: &RejectRules,
        expiry: Expiry,
    ) -> Result<u64, WriteError> {
        let hashed = HashedKey::new(key);
        let _locks = self.unlocked(table_id, &hashed)?;
        // A write that keeps the old expiry depends on the old record.
        let kind = match expiry {
            Expiry::Keep => ClientOp::ReadsRecord,
            Expiry::Set(_) => write_kind(rules),
        };
        let written = match self.migration_gate(table_id, key, kind) {
            Gated::Plain => self
                .store
                .write_expiring(table_id, key, value, rules, expiry),
            Gated::Arrived(_) | Gated::Wait => Err(WriteError::Migrating),
        };
        if written.is_ok() {
            self.full_log.accepted();
        }
        written
    }

    /// Gives `key` of `table_id` expiry time `expires_at` if `condition`
    /// admits it: whether it changed.
    pub(crate) fn set_object_expiry(
        &self,
        table_id: u64,
        key: &[u8],
        expires_at: Option<u64>,
        condition: ExpireCondition,
    ) -> Result<bool, WriteError> {
        let _locks = self.unlocked(table_id, &HashedKey::new(key))?;
        match self.migration_gate(table_id, key, ClientOp::ReadsRecord) {
            Gated::Plain => self.store.set_expiry(table_id, key, expires_at, condition),
            Gated::Arrived(_) | Gated::Wait => Err(WriteError::Migrating),
        }
    }

    /// The expiry time of `key` of `table_id` and what its answer waits for.
    pub(crate) fn object_expiry(
        &self,
        table_id: u64,
        key: &[u8],
    ) -> (Result<Option<u64>, ReadError>, Durability) {
        self.read_object(table_id, key, |view| view.expires_at())
    }

    /// The native SetExpiry.
    pub(super) fn set_expiry(
        &self,
        id: u64,
        (table_id, key): (u64, &[u8]),
        expires_at: Option<u64>,
        condition: ExpireCondition,
        out: &mut Vec<u8>,
    ) -> Result<Durability, WireError> {
        let response = match self.set_object_expiry(table_id, key, expires_at, condition) {
            Ok(changed) => Response::SetExpiry { changed },
            Err(e) => Response::Error(self.refused(e)),
        };
        encode_response(id, Opcode::SetExpiry, &response, out)?;
        Ok(Durability::LogEnd)
    }

    /// The native GetExpiry.
    pub(super) fn get_expiry(
        &self,
        id: u64,
        (table_id, key): (u64, &[u8]),
        out: &mut Vec<u8>,
    ) -> Result<Durability, WireError> {
        let (result, durability) = self.object_expiry(table_id, key);
        let response = match result {
            Ok(expires_at) => Response::GetExpiry { expires_at },
            Err(e) => Response::Error(status_body(read_status(e))),
        };
        encode_response(id, Opcode::GetExpiry, &response, out)?;
        Ok(durability)
    }

    /// The native WriteExpiring.
    pub(super) fn write_expiring(
        &self,
        id: u64,
        (table_id, key, value): (u64, &[u8], &[u8]),
        rules: &RejectRules,
        change: ExpiryChange,
        out: &mut Vec<u8>,
    ) -> Result<Durability, WireError> {
        let written = self.write_object_expiring(table_id, key, value, rules, expiry_of(change));
        let response = match written {
            Ok(version) => Response::WriteExpiring { version },
            Err(e) => Response::Error(self.refused(e)),
        };
        encode_response(id, Opcode::WriteExpiring, &response, out)?;
        Ok(Durability::LogEnd)
    }
}
