//! Exactly-once object operations on the native front end (RIFL §4; R§10.3): a
//! Write, Remove or Increment that carries an rpc id is checked against the
//! master's completion records and, when new, executed with its record written
//! in the same log append (`ramstore_master::ObjectStore::write_once`).
//!
//! On a tablet migrating in, the gate lets such an RPC through only once its
//! key's object and completion records have arrived from the source (RIFL §4.3:
//! records move with their objects; `ClientOp::ExactlyOnce`); until then it is
//! parked or answered RETRY like a read, never run at least once.

use ramstore_master::migration::ClientOp;
use ramstore_master::{HashedKey, OnceUpdate, RejectRules, RpcOutcome, WriteError};
use ramstore_wire::{
    encode_response, ErrorBody, NumberKind, Opcode, Response, RpcId, Status, WireError,
};

use super::migration::Gated;
use super::request_path::Durability;
use super::StorageService;

/// One exactly-once update, as the request gave it.
pub(crate) enum OnceOp<'a> {
    Write { value: &'a [u8] },
    Remove,
    Increment { kind: NumberKind, delta: [u8; 8] },
}

impl StorageService {
    /// Carries out `op` on `key` of `table_id` as RPC `rpc_id` and encodes the
    /// answer: the saved one for a retry of a completed RPC.
    pub(crate) fn update_once(
        &self,
        id: u64,
        (table_id, key): (u64, &[u8]),
        rules: &RejectRules,
        op: OnceOp<'_>,
        rpc_id: RpcId,
        out: &mut Vec<u8>,
    ) -> Result<Durability, WireError> {
        let opcode = match op {
            OnceOp::Write { .. } => Opcode::Write,
            OnceOp::Remove => Opcode::Remove,
            OnceOp::Increment { .. } => Opcode::Increment,
        };
        let result = self.run_once((table_id, key), rules, &op, rpc_id);
        let response = match result {
            Ok(outcome) => response_of(opcode, outcome),
            Err(WriteError::StaleRpc) => Response::Error(ErrorBody::Message {
                status: Status::StaleRpc,
                message:
                    "the completion record of this rpc is gone (acknowledged, or its lease expired)",
            }),
            Err(WriteError::RpcInProgress) => Response::Error(ErrorBody::Retry { delay_ms: 1 }),
            // The lease-expiry loop asks the coordinator at its next round.
            Err(WriteError::LeaseUnverified) => Response::Error(ErrorBody::Retry { delay_ms: 100 }),
            Err(e) => Response::Error(self.refused(e)),
        };
        encode_response(id, opcode, &response, out)?;
        Ok(Durability::LogEnd)
    }

    /// Carries out `op` on `key` of `table_id` as RPC `rpc_id` through the
    /// migration gate: its outcome, the saved one for a retry of a completed
    /// RPC. One op of a multi-op with rpc ids is one such RPC (RIFL §4: each
    /// object's op is separate).
    pub(crate) fn run_once(
        &self,
        (table_id, key): (u64, &[u8]),
        rules: &RejectRules,
        op: &OnceOp<'_>,
        rpc_id: RpcId,
    ) -> Result<RpcOutcome, WriteError> {
        let result = match self.migration_gate(table_id, key, ClientOp::ExactlyOnce) {
            Gated::Plain => self.once_in_store((table_id, key), rules, op, rpc_id, false),
            // The key's object and completion records are here (RIFL §4.3).
            Gated::Arrived(_) => self.once_in_store((table_id, key), rules, op, rpc_id, true),
            Gated::Wait => Err(WriteError::Migrating),
        };
        if result.is_ok() {
            self.note_accepted();
        }
        result
    }

    /// The store call of `op`; `arrived`: on a migrating-in tablet whose gate
    /// let it through.
    fn once_in_store(
        &self,
        (table_id, key): (u64, &[u8]),
        rules: &RejectRules,
        op: &OnceOp<'_>,
        rpc_id: RpcId,
        arrived: bool,
    ) -> Result<RpcOutcome, WriteError> {
        // Held across the write: no transaction can lock the key meanwhile.
        // The key is hashed once, for the lock check and the write (issue 21).
        let hashed = HashedKey::new(key);
        let _locks = self.unlocked(table_id, &hashed)?;
        let update = match *op {
            OnceOp::Write { value } => OnceUpdate::Write(value),
            OnceOp::Remove => OnceUpdate::Remove,
            OnceOp::Increment {
                kind: NumberKind::I64,
                delta,
            } => OnceUpdate::IncrementI64(i64::from_le_bytes(delta)),
            OnceOp::Increment {
                kind: NumberKind::F64,
                delta,
            } => OnceUpdate::IncrementF64(f64::from_le_bytes(delta)),
        };
        if arrived {
            self.store
                .update_once_arrived_hashed((table_id, hashed), rules, update, rpc_id)
        } else {
            self.store
                .update_once_hashed((table_id, hashed), rules, update, rpc_id)
        }
    }
}

/// The response an outcome answers; an outcome of another operation than the
/// retry's (a client reusing a sequence number) is refused as invalid.
fn response_of(opcode: Opcode, outcome: RpcOutcome) -> Response<'static> {
    match (opcode, outcome) {
        (Opcode::Write, RpcOutcome::Write { version }) => Response::Write { version },
        (Opcode::Remove, RpcOutcome::Remove { existed, version }) => {
            Response::Remove { existed, version }
        }
        (Opcode::Increment, RpcOutcome::IncrementI64 { value, version }) => Response::Increment {
            version,
            value: value.to_le_bytes(),
        },
        (Opcode::Increment, RpcOutcome::IncrementF64 { value, version }) => Response::Increment {
            version,
            value: value.to_le_bytes(),
        },
        _ => Response::Error(ErrorBody::Message {
            status: Status::InvalidRequest,
            message: "this rpc id was used by another operation",
        }),
    }
}
