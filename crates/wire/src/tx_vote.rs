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
//!
//! ```text
//! TxDecisions             commit u8 | txs list
//!   tx                    lease_id u64 | tx_seq u64
//! TxDecisions response    (empty)
//! ```
//!
//! One decision for many transactions, each as `TxDecision` would apply it:
//! what a master's release loop sends each other owner of its held commits
//! (design notes "Transaction recovery", *Held outcomes*), one RPC per owner
//! per round instead of one per transaction.

use crate::codec::{put_u32, put_u64, put_u8, Reader};
use crate::error::WireError;
use crate::frame::{atomically, begin_frame, end_frame};
use crate::list::sealed::Sealed;
use crate::list::{list_item, sealed, List, ListItem};
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

/// Most transactions one TxDecisions frame names.
pub const MAX_TX_DECISIONS: usize = 4_096;

/// One transaction of a TxDecisions frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct TxKey {
    pub lease_id: u64,
    pub tx_seq: u64,
}

list_item!(TxKey, min = 16, max = MAX_TX_DECISIONS,
    read(r) {
        let key = TxKey { lease_id: r.u64()?, tx_seq: r.u64()? };
        if key.lease_id == 0 || key.tx_seq == 0 {
            return Err(WireError::Malformed("tx decisions: lease id or tx seq 0"));
        }
        Ok(key)
    },
    write(s, out) {
        put_u64(out, s.lease_id);
        put_u64(out, s.tx_seq);
        Ok(())
    }
);

/// A decoded TxDecisions request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxDecisions<'a> {
    pub commit: bool,
    pub txs: List<'a, TxKey>,
}

pub(crate) fn read_decisions<'a>(r: &mut Reader<'a>) -> Result<TxDecisions<'a>, WireError> {
    let commit = r.bool("commit")?;
    let txs: List<'a, TxKey> = List::read(r)?;
    if txs.is_empty() {
        return Err(WireError::Malformed("tx decisions: no transactions"));
    }
    Ok(TxDecisions { commit, txs })
}

pub(crate) fn write_decisions(d: &TxDecisions<'_>, out: &mut Vec<u8>) {
    put_u8(out, u8::from(d.commit));
    d.txs.write(out);
}

/// Appends a whole TxDecisions request frame: `commit` (or abort) for every
/// transaction of `txs` (1 to [`MAX_TX_DECISIONS`]).
pub fn encode_tx_decisions(
    request_id: u64,
    commit: bool,
    txs: &[TxKey],
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    if txs.is_empty() || txs.len() > MAX_TX_DECISIONS {
        return Err(WireError::TooManyItems(txs.len()));
    }
    atomically(out, |out| {
        let start = begin_frame(out, Opcode::TxDecisions.code(), Status::Ok, 0, request_id);
        put_u8(out, u8::from(commit));
        // Checked against MAX_TX_DECISIONS above, far below u32::MAX.
        put_u32(
            out,
            u32::try_from(txs.len()).map_err(|_| WireError::TooManyItems(txs.len()))?,
        );
        for tx in txs {
            Sealed::write(tx, out)?;
        }
        end_frame(out, start, 0)
    })
}
