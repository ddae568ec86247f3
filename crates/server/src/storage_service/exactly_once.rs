//! Exactly-once object operations on the native front end (RIFL §4; R§10.3): a
//! Write, Remove or Increment that carries an rpc id is checked against the
//! master's completion records and, when new, executed with its record written
//! in the same log append (`ramstore_master::ObjectStore::write_once`).
//!
//! A tablet migrating in takes the at-least-once path: completion records do not
//! move with migration yet (design notes "Exactly-once RPCs (RIFL)").

use ramstore_master::migration::ClientOp;
use ramstore_master::{RejectRules, RpcOutcome, WriteError};
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
        let kind = match op {
            OnceOp::Write { .. } if *rules == RejectRules::default() => ClientOp::BlindWrite,
            _ => ClientOp::ReadsRecord,
        };
        let result = match self.migration_gate(table_id, key, kind) {
            Gated::Plain => self.once_in_store(table_id, key, rules, &op, rpc_id),
            // Records do not move with a migration yet: at least once here.
            Gated::Arrived(_) => {
                return self.update_at_least_once(id, (table_id, key), rules, op, out)
            }
            Gated::Wait => Err(WriteError::Migrating),
        };
        if result.is_ok() {
            self.note_accepted();
        }
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

    fn once_in_store(
        &self,
        table_id: u64,
        key: &[u8],
        rules: &RejectRules,
        op: &OnceOp<'_>,
        rpc_id: RpcId,
    ) -> Result<RpcOutcome, WriteError> {
        // Held across the write: no transaction can lock the key meanwhile.
        let _locks = self.unlocked(table_id, key)?;
        let store = &self.store;
        match *op {
            OnceOp::Write { value } => store.write_once(table_id, key, value, rules, rpc_id),
            OnceOp::Remove => store.remove_once(table_id, key, rules, rpc_id),
            OnceOp::Increment {
                kind: NumberKind::I64,
                delta,
            } => store.increment_i64_once(table_id, key, i64::from_le_bytes(delta), rules, rpc_id),
            OnceOp::Increment {
                kind: NumberKind::F64,
                delta,
            } => store.increment_f64_once(table_id, key, f64::from_le_bytes(delta), rules, rpc_id),
        }
    }

    fn update_at_least_once(
        &self,
        id: u64,
        (table_id, key): (u64, &[u8]),
        rules: &RejectRules,
        op: OnceOp<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Durability, WireError> {
        match op {
            OnceOp::Write { value } => self.write(id, table_id, rules, key, value, out),
            OnceOp::Remove => self.remove(id, table_id, rules, key, out),
            OnceOp::Increment { kind, delta } => {
                self.increment(id, (table_id, key), rules, kind, delta, out)
            }
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
