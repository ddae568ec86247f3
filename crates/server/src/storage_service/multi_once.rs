//! Exactly-once multi-operations on the native front end (RIFL, Lee et al.
//! SOSP'15 §4; issue 21): a MultiWrite or MultiRemove whose items carry rpc
//! ids runs each item as its own exactly-once RPC
//! ([`StorageService::run_once`]): its completion record is written in the
//! same log append as its object, moves with it in a migration, and a retried
//! item — in the same multi-op or regrouped into another by the client — gets
//! its first outcome without running again.

use ramstore_master::{RpcOutcome, WriteError};
use ramstore_wire::{
    MultiRemoveItems, MultiRemoveResponseEncoder, MultiRpcIds, MultiWriteItems,
    MultiWriteResponseEncoder, Status, WireError,
};

use super::exactly_once::OnceOp;
use super::object_ops::write_status;
use super::request_path::Durability;
use super::StorageService;

/// An item's status for a failed exactly-once op, and the version that goes
/// with it (WRONG_VERSION's current version).
fn failed_item(e: WriteError) -> (Status, u64) {
    match e {
        WriteError::WrongVersion { current } => (Status::WrongVersion, current),
        e => (write_status(e), 0),
    }
}

impl StorageService {
    /// MultiWrite with one rpc id per item (the decoder checked the counts
    /// match).
    pub(super) fn multi_write_once(
        &self,
        id: u64,
        items: MultiWriteItems<'_>,
        ids: MultiRpcIds<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Durability, WireError> {
        let mut enc = MultiWriteResponseEncoder::new(id, out);
        for (item, rpc) in items.iter().zip(ids.iter()) {
            let op = OnceOp::Write { value: item.value };
            match self.run_once((item.table_id, item.key), &item.rules, &op, rpc) {
                Ok(RpcOutcome::Write { version }) => enc.push(Status::Ok, version)?,
                // The sequence number was used by another kind of operation.
                Ok(_) => enc.push(Status::InvalidRequest, 0)?,
                Err(e) => {
                    let (status, version) = failed_item(self.count_refusal(e));
                    enc.push(status, version)?
                }
            }
        }
        enc.finish()?;
        Ok(Durability::LogEnd)
    }

    /// MultiRemove with one rpc id per item.
    pub(super) fn multi_remove_once(
        &self,
        id: u64,
        items: MultiRemoveItems<'_>,
        ids: MultiRpcIds<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Durability, WireError> {
        let mut enc = MultiRemoveResponseEncoder::new(id, out);
        for (item, rpc) in items.iter().zip(ids.iter()) {
            match self.run_once((item.table_id, item.key), &item.rules, &OnceOp::Remove, rpc) {
                Ok(RpcOutcome::Remove { existed, version }) => {
                    enc.push(Status::Ok, existed, version)?
                }
                Ok(_) => enc.push(Status::InvalidRequest, false, 0)?,
                Err(e) => {
                    let (status, version) = failed_item(self.count_refusal(e));
                    enc.push(status, false, version)?
                }
            }
        }
        enc.finish()?;
        Ok(Durability::LogEnd)
    }
}
