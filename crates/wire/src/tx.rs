//! Multi-object transactions on the wire (Lee et al., SOSP'15 §6; R§10.3): the
//! client-driven two-phase commit's Prepare (one per participant master, with that
//! master's ops and every participant) and Decision.
//!
//! ```text
//! TxPrepare   lease_id u64 | tx_seq u64 | flags u8 | participants list | ops list
//!   participant  table_id u64 | key_hash u64
//!   op           kind u8 | has_expected u8 | expected_version u64 | table_id u64 | key | value
//! TxDecision  lease_id u64 | tx_seq u64 | commit u8
//! TxPrepare response   vote u8      TxDecision response  (empty)
//! ```

use crate::codec::{put_key, put_u32, put_u64, put_u8, put_value, Reader};
use crate::error::WireError;
use crate::frame::{atomically, begin_frame, end_frame};
use crate::list::sealed::Sealed;
use crate::list::{list_item, sealed, List, ListItem};
use crate::opcode::Opcode;
use crate::status::Status;

/// Most objects one transaction may touch (across all its participants).
pub const MAX_TX_OBJECTS: usize = 1024;
/// Most key and value bytes one transaction may carry.
pub const MAX_TX_BYTES: usize = 8 * 1024 * 1024 - crate::FRAME_OVERHEAD_BYTES;

/// TxPrepare flag: the receiver is the only participant, so it decides at once
/// (the single-server fast path: prepare and commit in one round trip).
pub const TX_DECIDE_NOW: u8 = 1;

/// What a transaction does with one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum TxOpKind {
    /// Only checks the version read (optimistic concurrency).
    Read = 1,
    Write = 2,
    Remove = 3,
}

impl TxOpKind {
    fn from_code(code: u8) -> Result<Self, WireError> {
        match code {
            1 => Ok(TxOpKind::Read),
            2 => Ok(TxOpKind::Write),
            3 => Ok(TxOpKind::Remove),
            _ => Err(WireError::Malformed("tx op: unknown kind")),
        }
    }
}

/// One object of a TxPrepare. `expected_version`, when present, is the version the
/// transaction read (0: the object did not exist); the master votes ABORT if the
/// object's version differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxOp<'a> {
    pub kind: TxOpKind,
    pub expected_version: Option<u64>,
    pub table_id: u64,
    pub key: &'a [u8],
    /// The new value of a write; empty otherwise.
    pub value: &'a [u8],
}

list_item!(TxOp<'a>, min = 1 + 1 + 8 + 8 + 2 + 4, max = MAX_TX_OBJECTS,
    read(r) {
        let kind = TxOpKind::from_code(r.u8()?)?;
        let has_expected = r.bool("has_expected")?;
        let expected = r.u64()?;
        let op = TxOp {
            kind,
            expected_version: has_expected.then_some(expected),
            table_id: r.u64()?,
            key: r.key()?,
            value: r.value()?,
        };
        if op.kind != TxOpKind::Write && !op.value.is_empty() {
            return Err(WireError::Malformed("tx op: a value on a read or remove"));
        }
        if op.kind == TxOpKind::Read && op.expected_version.is_none() {
            return Err(WireError::Malformed("tx op: a read without its version"));
        }
        Ok(op)
    },
    write(s, out) {
        put_u8(out, s.kind as u8);
        put_u8(out, u8::from(s.expected_version.is_some()));
        put_u64(out, s.expected_version.unwrap_or(0));
        put_u64(out, s.table_id);
        put_key(out, s.key)?;
        put_value(out, s.value)
    }
);

/// One object of the whole transaction, named by table and key hash: every
/// participant learns every object, so a recovery can find all participants
/// (SOSP'15 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxParticipant {
    pub table_id: u64,
    pub key_hash: u64,
}

list_item!(TxParticipant, min = 16, max = MAX_TX_OBJECTS,
    read(r) {
        Ok(TxParticipant { table_id: r.u64()?, key_hash: r.u64()? })
    },
    write(s, out) {
        put_u64(out, s.table_id);
        put_u64(out, s.key_hash);
        Ok(())
    }
);

/// A participant's answer to a TxPrepare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum TxVote {
    /// Every op's version matched and its lock is held: the master will apply the
    /// decision it is sent.
    Prepared = 1,
    /// A version differed or another transaction holds a lock: nothing is held.
    Abort = 2,
    /// [`TX_DECIDE_NOW`] was set and the ops are applied (the fast path).
    Committed = 3,
}

impl TxVote {
    pub(crate) fn from_code(code: u8) -> Result<Self, WireError> {
        match code {
            1 => Ok(TxVote::Prepared),
            2 => Ok(TxVote::Abort),
            3 => Ok(TxVote::Committed),
            _ => Err(WireError::Malformed("tx vote: unknown code")),
        }
    }
}

/// The identity and items of a decoded TxPrepare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxPrepare<'a> {
    pub lease_id: u64,
    pub tx_seq: u64,
    pub flags: u8,
    pub participants: List<'a, TxParticipant>,
    pub ops: List<'a, TxOp<'a>>,
}

pub(crate) fn read_prepare<'a>(r: &mut Reader<'a>) -> Result<TxPrepare<'a>, WireError> {
    let lease_id = r.u64()?;
    let tx_seq = r.u64()?;
    let flags = r.u8()?;
    if lease_id == 0 || tx_seq == 0 {
        return Err(WireError::Malformed("tx prepare: lease id or tx seq 0"));
    }
    if flags & !TX_DECIDE_NOW != 0 {
        return Err(WireError::Malformed("tx prepare: unknown flags"));
    }
    let participants = List::read(r)?;
    let ops: List<'a, TxOp<'a>> = List::read(r)?;
    if ops.is_empty() {
        return Err(WireError::Malformed("tx prepare: no ops"));
    }
    Ok(TxPrepare {
        lease_id,
        tx_seq,
        flags,
        participants,
        ops,
    })
}

pub(crate) fn write_prepare(p: &TxPrepare<'_>, out: &mut Vec<u8>) {
    put_u64(out, p.lease_id);
    put_u64(out, p.tx_seq);
    put_u8(out, p.flags);
    p.participants.write(out);
    p.ops.write(out);
}

/// Appends a whole TxPrepare request frame built from slices (the client's side:
/// decoded [`List`]s only come from frames).
#[allow(clippy::too_many_arguments)]
pub fn encode_tx_prepare(
    request_id: u64,
    lease_id: u64,
    tx_seq: u64,
    flags: u8,
    participants: &[TxParticipant],
    ops: &[TxOp<'_>],
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    if ops.len() > MAX_TX_OBJECTS || participants.len() > MAX_TX_OBJECTS {
        return Err(WireError::TooManyItems(ops.len().max(participants.len())));
    }
    atomically(out, |out| {
        let start = begin_frame(out, Opcode::TxPrepare.code(), Status::Ok, 0, request_id);
        put_u64(out, lease_id);
        put_u64(out, tx_seq);
        put_u8(out, flags);
        put_list(out, participants)?;
        put_list(out, ops)?;
        end_frame(out, start, 0)
    })
}

fn put_list<'a, T: ListItem<'a>>(out: &mut Vec<u8>, items: &[T]) -> Result<(), WireError> {
    // Counts were checked against MAX_TX_OBJECTS, far below u32::MAX.
    put_u32(
        out,
        u32::try_from(items.len()).map_err(|_| WireError::TooManyItems(items.len()))?,
    );
    for item in items {
        Sealed::write(item, out)?;
    }
    Ok(())
}
