//! A transaction recovery manager's vote request (Lee et al. SOSP'15 §6.4;
//! RAMCloud's TxRequestAbort): when a client vanished mid-commit, the
//! participant holding the transaction's first op asks the master that owns
//! each listed object now for its vote, then sends every participant the
//! decision (`TxDecision`).
//!
//! ```text
//! TxRequestVote           lease_id u64 | tx_seq u64 | objects list
//!   object                table_id u64 | key_hash u64
//! TxRequestVote response  vote u8 (PREPARED, ABORT or COMMITTED)
//! ```
//!
//! The objects are the ones the receiver is asked about (those it owns per
//! the sender's tablet map), so a receiver that no longer owns one answers
//! UNKNOWN_TABLET and the manager looks again, as RAMCloud's does.

use crate::codec::{put_u32, put_u64, Reader};
use crate::error::WireError;
use crate::frame::{atomically, begin_frame, end_frame};
use crate::list::sealed::Sealed;
use crate::list::List;
use crate::opcode::Opcode;
use crate::status::Status;
use crate::tx::{TxParticipant, MAX_TX_OBJECTS};

/// The identity and objects of a decoded TxRequestVote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxRequestVote<'a> {
    pub lease_id: u64,
    pub tx_seq: u64,
    pub objects: List<'a, TxParticipant>,
}

pub(crate) fn read_request_vote<'a>(r: &mut Reader<'a>) -> Result<TxRequestVote<'a>, WireError> {
    let lease_id = r.u64()?;
    let tx_seq = r.u64()?;
    if lease_id == 0 || tx_seq == 0 {
        return Err(WireError::Malformed(
            "tx request vote: lease id or tx seq 0",
        ));
    }
    let objects: List<'a, TxParticipant> = List::read(r)?;
    if objects.is_empty() {
        return Err(WireError::Malformed("tx request vote: no objects"));
    }
    Ok(TxRequestVote {
        lease_id,
        tx_seq,
        objects,
    })
}

pub(crate) fn write_request_vote(v: &TxRequestVote<'_>, out: &mut Vec<u8>) {
    put_u64(out, v.lease_id);
    put_u64(out, v.tx_seq);
    v.objects.write(out);
}

/// Appends a whole TxRequestVote request frame asking about `objects` of
/// transaction (`lease_id`, `tx_seq`).
pub fn encode_tx_request_vote(
    request_id: u64,
    lease_id: u64,
    tx_seq: u64,
    objects: &[TxParticipant],
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    if objects.len() > MAX_TX_OBJECTS {
        return Err(WireError::TooManyItems(objects.len()));
    }
    atomically(out, |out| {
        let start = begin_frame(out, Opcode::TxRequestVote.code(), Status::Ok, 0, request_id);
        put_u64(out, lease_id);
        put_u64(out, tx_seq);
        // Checked against MAX_TX_OBJECTS above, far below u32::MAX.
        put_u32(
            out,
            u32::try_from(objects.len()).map_err(|_| WireError::TooManyItems(objects.len()))?,
        );
        for object in objects {
            Sealed::write(object, out)?;
        }
        end_frame(out, start, 0)
    })
}
