//! The TxRecord entry (type 8): a transaction participant's durable prepared op,
//! or the mark that it was decided (Lee et al. SOSP'15 §6.2, RAMCloud's
//! PreparedOp and PreparedOpTombstone; R§10.3).
//!
//! A participant appends one prepared record per op of a transaction and waits
//! for them to be replicated before it votes PREPARED, so a crash between the
//! vote and the decision loses neither the op nor its lock: recovery re-takes
//! the lock from the record. Applying the decision appends one decided record
//! per prepared one, naming the segment that holds it; a replay that finds both
//! drops the op.
//!
//! ```text
//! +----------+--------+----------+------+------------------------+----------+-------------+------------+
//! | lease_id | tx_seq | op_index | kind | segment_id             | table_id | key_hash    | op body    |
//! | varint   | varint | varint   | u8   | varint, kinds 4–5 only | varint   | u64 LE, 8 B | kinds 1–3  |
//! +----------+--------+----------+------+------------------------+----------+-------------+------------+
//! ```
//!
//! `(lease_id, tx_seq)` is the transaction's id; `op_index` is the op's object's
//! position in the transaction's participant list, unique in the whole
//! transaction (a recovery may gather ops of several participants on one
//! master). `table_id` and `key_hash` are the op's
//! object: backups bucket the record by them, so it reaches the recovery master of
//! that object, whose lock it is. The fields a segment scan needs (ids, kind,
//! segment) come first: they always fit the 48 bytes the scan reads
//! (1 + 4 + 3 × 10 + 1 + 10 = 46). Kinds 1 (read: a version check), 2 (write)
//! and 3 (remove) are prepared ops; their op body is
//!
//! ```text
//! +------------------+---------+-----+-----------+-------+--------+------------------------------------------+
//! | expected_plus_1  | key_len | key | value_len | value | count  | (table_id varint, key_hash u64 LE) × count |
//! | varint (0: none) | varint  |     | varint    |       | varint |                                          |
//! +------------------+---------+-----+-----------+-------+--------+------------------------------------------+
//! ```
//!
//! where the list is every object of the whole transaction (the participant list
//! a recovery manager asks for votes, SOSP'15 §6.4). Only the first op a
//! participant prepared carries it (count 0 on the others): at most one list per
//! transaction per master, as RAMCloud's ParticipantList.
//!
//! Kinds 4 (decided: commit) and 5 (decided: abort) carry `segment_id`, the
//! segment that held the prepared record when it was decided, and nothing after
//! the key hash. Like an object tombstone (L§3), the decided record is needed
//! only while that segment is in the log; after that the cleaner drops it.
//!
//! Kind 6 (held commit) is a participant's committed outcome of a transaction
//! that other masters take part in, kept until every other owner has applied
//! the decision (design notes "Transaction recovery", *Held outcomes*): a
//! participant that committed and then forgot (its decided marks cleaned, or
//! its memory of decisions full) must not answer a recovery manager "never
//! saw it, ABORT" while another participant still holds the transaction
//! prepared. Its `op_index` is [`HELD_OP_INDEX`], its object is one of the
//! participant's own, and its body is the participant list only:
//!
//! ```text
//! +--------+------------------------------------------+
//! | count  | (table_id varint, key_hash u64 LE) × count |
//! | varint |                                          |
//! +--------+------------------------------------------+
//! ```
//!
//! Like a prepared record it lives until a decided mark (kind 4) names it: the
//! release, once every owner acknowledged the commit.

use super::format::{EntryError, EntryHeader, EntryType, TxRecordScan};
use crate::varint;
use crate::{MAX_KEY_BYTES, MAX_VALUE_BYTES};

/// What a prepared op does (kinds 1–3 of the record).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PreparedKind {
    /// Checks the object's version only.
    Read = 1,
    Write = 2,
    Remove = 3,
}

const DECIDED_COMMIT: u8 = 4;
const DECIDED_ABORT: u8 = 5;
const HELD_COMMIT: u8 = 6;

/// The `op_index` of a held-commit record (kind 6): above every op's index
/// (a list position, or 2^32 + a place in a prepare), so it never names an op.
pub const HELD_OP_INDEX: u64 = u64::MAX;

/// The variable part of a TxRecord.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxRecordBody<'a> {
    /// A prepared op, durable before the participant's vote.
    Prepared {
        kind: PreparedKind,
        expected_version: Option<u64>,
        key: &'a [u8],
        value: &'a [u8],
        /// The raw participant list; see [`TxRecordEntry::participants`].
        participant_count: usize,
        participants: &'a [u8],
    },
    /// The prepared op was decided; it was in `segment_id` then.
    Decided { commit: bool, segment_id: u64 },
    /// The transaction committed here and some other owner may not have
    /// applied it yet (kind 6); the raw participant list as in `Prepared`.
    HeldCommit {
        participant_count: usize,
        participants: &'a [u8],
    },
}

/// A parsed TxRecord entry, borrowing its key, value and list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxRecordEntry<'a> {
    pub lease_id: u64,
    pub tx_seq: u64,
    pub op_index: u64,
    pub table_id: u64,
    pub key_hash: u64,
    pub body: TxRecordBody<'a>,
}

impl<'a> TxRecordEntry<'a> {
    /// The identifying fields, as the encoders take them.
    pub fn id(&self) -> TxRecordId {
        TxRecordId {
            lease_id: self.lease_id,
            tx_seq: self.tx_seq,
            op_index: self.op_index,
            table_id: self.table_id,
            key_hash: self.key_hash,
        }
    }

    /// The participant list, as (table id, key hash); empty for a decided
    /// record and for a prepared op other than its participant's first.
    pub fn participants(&self) -> impl Iterator<Item = (u64, u64)> + 'a {
        let (count, mut bytes) = match self.body {
            TxRecordBody::Prepared {
                participant_count,
                participants,
                ..
            }
            | TxRecordBody::HeldCommit {
                participant_count,
                participants,
            } => (participant_count, participants),
            TxRecordBody::Decided { .. } => (0, &[][..]),
        };
        // Parsing validated every item, so reading stops only after `count`.
        (0..count).map_while(move |_| {
            let (table_id, n) = varint::decode_u64(bytes).ok()?;
            let hash = bytes.get(n..n + 8)?;
            let hash = u64::from_le_bytes(hash.try_into().ok()?);
            bytes = &bytes[n + 8..];
            Some((table_id, hash))
        })
    }
}

/// The identifying fields every TxRecord starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxRecordId {
    pub lease_id: u64,
    pub tx_seq: u64,
    pub op_index: u64,
    pub table_id: u64,
    pub key_hash: u64,
}

fn push_varint(out: &mut Vec<u8>, v: u64) {
    let mut buf = [0; varint::MAX_VARINT_BYTES];
    let n = varint::encode_u64(v, &mut buf);
    out.extend_from_slice(&buf[..n]);
}

fn push_id(body: &mut Vec<u8>, id: &TxRecordId, kind: u8, segment_id: Option<u64>) {
    push_varint(body, id.lease_id);
    push_varint(body, id.tx_seq);
    push_varint(body, id.op_index);
    body.push(kind);
    if let Some(segment_id) = segment_id {
        push_varint(body, segment_id);
    }
    push_varint(body, id.table_id);
    body.extend_from_slice(&id.key_hash.to_le_bytes());
}

/// Frames `body` as a type-8 entry at the end of `out`.
fn frame(body: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.push(EntryType::TxRecord as u8);
    push_varint(out, body.len() as u64);
    out.extend_from_slice(body);
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Appends a prepared-op record to `out`. `participants` is the transaction's
/// participant list for this master's first op, empty for the others.
///
/// # Panics
/// If the key or value exceeds [`MAX_KEY_BYTES`] / [`MAX_VALUE_BYTES`]: masters
/// check both before preparing.
pub fn encode_tx_prepared(
    id: &TxRecordId,
    kind: PreparedKind,
    expected_version: Option<u64>,
    key: &[u8],
    value: &[u8],
    participants: &[(u64, u64)],
    out: &mut Vec<u8>,
) {
    assert!(key.len() <= MAX_KEY_BYTES, "key exceeds MAX_KEY_BYTES");
    assert!(
        value.len() <= MAX_VALUE_BYTES,
        "value exceeds MAX_VALUE_BYTES"
    );
    let mut body = Vec::with_capacity(48 + key.len() + value.len() + 12 * participants.len());
    push_id(&mut body, id, kind as u8, None);
    push_varint(
        &mut body,
        expected_version.map_or(0, |v| v.saturating_add(1)),
    );
    push_varint(&mut body, key.len() as u64);
    body.extend_from_slice(key);
    push_varint(&mut body, value.len() as u64);
    body.extend_from_slice(value);
    push_participants(&mut body, participants);
    frame(&body, out);
}

/// Appends a held-commit record (kind 6) of transaction `id` (its `op_index`
/// is [`HELD_OP_INDEX`]) with the transaction's participant list to `out`.
pub fn encode_tx_held_commit(id: &TxRecordId, participants: &[(u64, u64)], out: &mut Vec<u8>) {
    debug_assert_eq!(id.op_index, HELD_OP_INDEX);
    let mut body = Vec::with_capacity(48 + 18 * participants.len());
    push_id(&mut body, id, HELD_COMMIT, None);
    push_participants(&mut body, participants);
    frame(&body, out);
}

fn push_participants(body: &mut Vec<u8>, participants: &[(u64, u64)]) {
    push_varint(body, participants.len() as u64);
    for &(table_id, hash) in participants {
        push_varint(body, table_id);
        body.extend_from_slice(&hash.to_le_bytes());
    }
}

/// Appends the record that the prepared op `id`, held in `segment_id`, was
/// decided (`commit` or abort) to `out`.
pub fn encode_tx_decided(id: &TxRecordId, commit: bool, segment_id: u64, out: &mut Vec<u8>) {
    let mut body = Vec::with_capacity(48);
    let kind = if commit {
        DECIDED_COMMIT
    } else {
        DECIDED_ABORT
    };
    push_id(&mut body, id, kind, Some(segment_id));
    frame(&body, out);
}

/// A cursor over a body that never reads past it.
struct Cursor<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn varint(&mut self) -> Result<u64, EntryError> {
        let (v, n) = varint::decode_u64(self.body.get(self.at..).unwrap_or(&[]))
            .map_err(|_| EntryError::BadLength)?;
        self.at += n;
        Ok(v)
    }

    fn bytes(&mut self, len: usize) -> Result<&'a [u8], EntryError> {
        let end = self.at.checked_add(len).ok_or(EntryError::BadLength)?;
        let s = self.body.get(self.at..end).ok_or(EntryError::BadLength)?;
        self.at = end;
        Ok(s)
    }

    fn u64_le(&mut self) -> Result<u64, EntryError> {
        let b: [u8; 8] = self
            .bytes(8)?
            .try_into()
            .map_err(|_| EntryError::BadLength)?;
        Ok(u64::from_le_bytes(b))
    }

    fn len(&mut self) -> Result<usize, EntryError> {
        usize::try_from(self.varint()?).map_err(|_| EntryError::BadLength)
    }
}

/// Parses the fields of a TxRecord entry whose header is `header` (checksum not
/// checked here; [`super::parse_entry`] checks it).
pub(crate) fn tx_record_fields<'a>(
    buf: &'a [u8],
    header: &EntryHeader,
) -> Result<TxRecordEntry<'a>, EntryError> {
    let body_end = header.header_len + header.body_len;
    let body = buf
        .get(header.header_len..body_end)
        .ok_or(EntryError::Truncated {
            needed: body_end,
            available: buf.len(),
        })?;
    let mut c = Cursor { body, at: 0 };
    let lease_id = c.varint()?;
    let tx_seq = c.varint()?;
    let op_index = c.varint()?;
    let kind = c.bytes(1)?[0];
    let decided_segment = match kind {
        1..=3 | HELD_COMMIT => None,
        DECIDED_COMMIT | DECIDED_ABORT => Some(c.varint()?),
        _ => return Err(EntryError::BadLength),
    };
    let table_id = c.varint()?;
    let key_hash = c.u64_le()?;
    let body = match (kind, decided_segment) {
        (_, Some(segment_id)) => TxRecordBody::Decided {
            commit: kind == DECIDED_COMMIT,
            segment_id,
        },
        (HELD_COMMIT, None) => {
            if op_index != HELD_OP_INDEX {
                return Err(EntryError::BadLength);
            }
            let (participant_count, participants) = participant_list(&mut c)?;
            TxRecordBody::HeldCommit {
                participant_count,
                participants,
            }
        }
        (kind, None) => {
            let kind = match kind {
                1 => PreparedKind::Read,
                2 => PreparedKind::Write,
                _ => PreparedKind::Remove,
            };
            let expected = c.varint()?;
            let key_len = c.len()?;
            if key_len > MAX_KEY_BYTES {
                return Err(EntryError::KeyTooLarge(key_len));
            }
            let key = c.bytes(key_len)?;
            let value_len = c.len()?;
            if value_len > MAX_VALUE_BYTES {
                return Err(EntryError::ValueTooLarge(value_len));
            }
            let value = c.bytes(value_len)?;
            let (participant_count, participants) = participant_list(&mut c)?;
            TxRecordBody::Prepared {
                kind,
                expected_version: expected.checked_sub(1),
                key,
                value,
                participant_count,
                participants,
            }
        }
    };
    if c.at != c.body.len() {
        return Err(EntryError::BadLength);
    }
    Ok(TxRecordEntry {
        lease_id,
        tx_seq,
        op_index,
        table_id,
        key_hash,
        body,
    })
}

/// Checks a participant list at the cursor and returns its count and bytes.
fn participant_list<'a>(c: &mut Cursor<'a>) -> Result<(usize, &'a [u8]), EntryError> {
    let count = c.len()?;
    let start = c.at;
    for _ in 0..count {
        c.varint()?;
        c.u64_le()?;
    }
    Ok((count, &c.body[start..c.at]))
}

/// The scan's view of a TxRecord whose header is `header`: its identity and, for a
/// decided record, its prepared op's segment. Reads only the leading fields,
/// which fit the scan's 48-byte prefix (module doc).
pub(crate) fn tx_record_scan(buf: &[u8], header: &EntryHeader) -> Result<TxRecordScan, EntryError> {
    let body_end = header.header_len + header.body_len;
    let body = buf
        .get(header.header_len..body_end.min(buf.len()))
        .ok_or(EntryError::BadLength)?;
    let mut c = Cursor { body, at: 0 };
    let lease_id = c.varint()?;
    let tx_seq = c.varint()?;
    let op_index = c.varint()?;
    let decided_segment = match c.bytes(1)?[0] {
        1..=3 | HELD_COMMIT => None,
        DECIDED_COMMIT | DECIDED_ABORT => Some(c.varint()?),
        _ => return Err(EntryError::BadLength),
    };
    Ok(TxRecordScan {
        lease_id,
        tx_seq,
        op_index,
        decided_segment,
    })
}
