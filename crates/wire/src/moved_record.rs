//! Completion records that move with a migration (RIFL, Lee et al. SOSP'15 §4.3;
//! K§2.3): a Pull or PriorityPull answer carries, after its objects, the records
//! of the exactly-once RPCs that wrote objects of the range it covers, so a retry
//! that reaches the target gets the first answer instead of running again.
//!
//! They travel as an optional trailer of the two answers: absent means none (the
//! answers of sources that predate it keep their meaning), and a present list is
//! never empty, so each answer has one encoding.
//!
//! ```text
//! records trailer   count u32 | count × record
//! record            table_id u64 | key_hash u64 | lease_id u64 | seq u64 |
//!                   result_len u8 | result (≤ 32 bytes, the master's encoding)
//! ```
//!
//! A Pull answer may carry a second optional trailer after it: the *held
//! commits* naming an object of the hashes it covers (issue 21; design notes
//! "Held outcomes"). A participant that applied a multi-server commit holds that
//! outcome until every other owner applied it too, and answers a recovery
//! manager's vote COMMITTED meanwhile; the new owner of its objects must answer
//! the same, so the outcome moves with them. When held commits follow, the
//! records trailer is present even if empty (its count 0 then says "none"):
//!
//! ```text
//! held trailer      count u32 | count × held
//! held              lease_id u64 | tx_seq u64 | participants count u32 |
//!                   count × (table_id u64 | key_hash u64)
//! ```

use crate::codec::{put_u64, put_u8, Reader};
use crate::error::WireError;
use crate::list::{list_item, sealed, List, ListItem};
use crate::tx::TxParticipant;

/// Most bytes of one record's saved result (the master's log keeps at most as
/// many: `ramstore_log::entry::MAX_RPC_RESULT_BYTES`).
pub const MAX_MOVED_RESULT_BYTES: usize = 32;

/// One completion record of an exactly-once RPC, as a migration's source sends
/// it: the object it belongs with (table id, key hash), the RPC (lease id,
/// sequence number) and its saved result, opaque here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MovedRpcResult<'a> {
    pub table_id: u64,
    pub key_hash: u64,
    pub lease_id: u64,
    pub seq: u64,
    pub result: &'a [u8],
}

list_item!(MovedRpcResult<'a>, min = 4 * 8 + 1, max = usize::MAX,
    read(r) {
        let (table_id, key_hash, lease_id, seq) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
        let len = usize::from(r.u8()?);
        if len > MAX_MOVED_RESULT_BYTES {
            return Err(WireError::Malformed("moved rpc result longer than 32 bytes"));
        }
        Ok(MovedRpcResult { table_id, key_hash, lease_id, seq, result: r.take(len)? })
    },
    write(s, out) {
        let len = u8::try_from(s.result.len())
            .ok()
            .filter(|l| usize::from(*l) <= MAX_MOVED_RESULT_BYTES)
            .ok_or(WireError::Malformed("moved rpc result longer than 32 bytes"))?;
        put_u64(out, s.table_id);
        put_u64(out, s.key_hash);
        put_u64(out, s.lease_id);
        put_u64(out, s.seq);
        put_u8(out, len);
        out.extend_from_slice(s.result);
        Ok(())
    }
);

/// The completion records of a Pull or PriorityPull answer.
pub type MovedRpcResults<'a> = List<'a, MovedRpcResult<'a>>;

/// One held commit outcome as a migration's source sends it: the transaction
/// (lease id, tx seq) and its whole participant list (every object of the
/// transaction, as its prepares named them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MovedHeldCommit<'a> {
    pub lease_id: u64,
    pub tx_seq: u64,
    pub participants: List<'a, TxParticipant>,
}

list_item!(MovedHeldCommit<'a>, min = 8 + 8 + 4, max = usize::MAX,
    read(r) {
        Ok(MovedHeldCommit { lease_id: r.u64()?, tx_seq: r.u64()?, participants: List::read(r)? })
    },
    write(s, out) {
        put_u64(out, s.lease_id);
        put_u64(out, s.tx_seq);
        s.participants.write(out);
        Ok(())
    }
);

/// The held commits of a Pull answer.
pub type MovedHeldCommits<'a> = List<'a, MovedHeldCommit<'a>>;

/// A held commit to encode, from the source's own memory (decoded
/// [`MovedHeldCommit`]s only come from frames).
#[derive(Debug, Clone, Copy)]
pub struct HeldCommitOut<'r> {
    pub lease_id: u64,
    pub tx_seq: u64,
    pub participants: &'r [TxParticipant],
}

/// Reads a Pull answer's two optional trailers (module doc): nothing left is
/// no records and no held commits; an explicit empty records list must be
/// followed by held commits, and a held list is never empty.
pub(crate) fn optional_pull_trailers<'a>(
    r: &mut Reader<'a>,
) -> Result<(MovedRpcResults<'a>, MovedHeldCommits<'a>), WireError> {
    if r.remaining() == 0 {
        return Ok((List::empty(), List::empty()));
    }
    let records: MovedRpcResults<'a> = List::read(r)?;
    if r.remaining() == 0 {
        if records.is_empty() {
            return Err(WireError::Malformed(
                "an explicit empty list of moved records",
            ));
        }
        return Ok((records, List::empty()));
    }
    let held: MovedHeldCommits<'a> = List::read(r)?;
    if held.is_empty() {
        return Err(WireError::Malformed(
            "an explicit empty list of held commits",
        ));
    }
    Ok((records, held))
}

/// Appends `held` as [`optional_pull_trailers`] reads it, after the records
/// trailer [`put_moved_records`] wrote at `records_at` (nothing there: no
/// records): nothing when there are none; else an empty records count first
/// if the records trailer was left out.
pub(crate) fn put_held_commits<'r>(
    out: &mut Vec<u8>,
    records_at: usize,
    held: impl IntoIterator<Item = HeldCommitOut<'r>>,
) -> Result<(), WireError> {
    let at = out.len();
    if at == records_at {
        crate::codec::put_u32(out, 0);
    }
    let count_at = out.len();
    crate::codec::put_u32(out, 0);
    let mut count: u32 = 0;
    for h in held {
        let Some(n) = u32::try_from(h.participants.len())
            .ok()
            .filter(|&n| n as usize <= crate::tx::MAX_TX_OBJECTS)
        else {
            out.truncate(at);
            return Err(WireError::TooManyItems(h.participants.len()));
        };
        put_u64(out, h.lease_id);
        put_u64(out, h.tx_seq);
        crate::codec::put_u32(out, n);
        for p in h.participants {
            if let Err(e) = sealed::Sealed::write(p, out) {
                out.truncate(at);
                return Err(e);
            }
        }
        count = count.saturating_add(1);
    }
    if count == 0 {
        out.truncate(at);
    } else {
        out[count_at..count_at + 4].copy_from_slice(&count.to_le_bytes());
    }
    Ok(())
}

/// Reads the optional trailer: nothing left is an empty list; an explicit empty
/// list is refused (one encoding per answer).
pub(crate) fn optional_moved_records<'a>(
    r: &mut Reader<'a>,
) -> Result<MovedRpcResults<'a>, WireError> {
    if r.remaining() == 0 {
        return Ok(List::empty());
    }
    let records = List::read(r)?;
    if records.is_empty() {
        return Err(WireError::Malformed(
            "an explicit empty list of moved records",
        ));
    }
    Ok(records)
}

/// Appends `records` as [`optional_moved_records`] reads them: nothing when
/// there are none.
pub(crate) fn put_moved_records<'r>(
    out: &mut Vec<u8>,
    records: impl IntoIterator<Item = MovedRpcResult<'r>>,
) -> Result<(), WireError> {
    let count_at = out.len();
    crate::codec::put_u32(out, 0);
    let mut count: u32 = 0;
    for r in records {
        if let Err(e) = sealed::Sealed::write(&r, out) {
            out.truncate(count_at);
            return Err(e);
        }
        count = count.saturating_add(1);
    }
    if count == 0 {
        out.truncate(count_at);
    } else {
        out[count_at..count_at + 4].copy_from_slice(&count.to_le_bytes());
    }
    Ok(())
}
