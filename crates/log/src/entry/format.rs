//! The shared vocabulary of the entry format (module doc of `entry`): entry types,
//! parse errors, the layouts a parse yields, and the size bounds.

use crate::varint::{self, MAX_VARINT_BYTES};
use crate::{MAX_KEY_BYTES, MAX_VALUE_BYTES, SEGMENT_BYTES};

/// Upper bound on the bytes of an object or tombstone entry before its key (type,
/// body_len, the three fixed fields, an object's optional expiry, key_len).
///
/// Any entry that parses fits: body_len ≤ [`SEGMENT_BYTES`] takes at most 4 bytes,
/// each u64 field (four with an expiry) at most 10 and key_len ≤ [`MAX_KEY_BYTES`] at most 3, so a prefix of
/// this many bytes is always enough for [`parse_object_layout`](crate::entry::parse_object_layout) and
/// [`parse_tombstone_layout`](crate::entry::parse_tombstone_layout).
pub const MAX_HEADER_BYTES: usize = 48;
/// Bytes of the trailing checksum.
pub const CRC_BYTES: usize = 4;

/// Longest object or tombstone header any parseable entry can have.
const LONGEST_HEADER: usize = 1
    + varint::encoded_len(SEGMENT_BYTES as u64)
    + 4 * MAX_VARINT_BYTES
    + varint::encoded_len(MAX_KEY_BYTES as u64);
const _: () = assert!(LONGEST_HEADER <= MAX_HEADER_BYTES);
// The largest object the encoders accept must also be parseable.
const _: () = assert!(
    4 * MAX_VARINT_BYTES
        + varint::encoded_len(MAX_KEY_BYTES as u64)
        + MAX_KEY_BYTES
        + MAX_VALUE_BYTES
        <= SEGMENT_BYTES
);
// `EncodedHeader::len` is a u8.
const _: () = assert!(MAX_HEADER_BYTES <= u8::MAX as usize);

/// The type byte of an object that carries an expiry time (module doc of
/// `entry`): the object's byte with the high bit set. It parses as
/// [`EntryType::Object`], whose layout then has `expires_at`, so every reader of
/// objects (cleaner, scans, recovery) handles both without a second case, and an
/// object without expiry keeps the bytes it always had.
pub const OBJECT_WITH_EXPIRY_BYTE: u8 = 0x80 | EntryType::Object as u8;

/// The kind of a log entry, stored in its first byte.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryType {
    /// First entry of every segment: which master and segment it belongs to.
    SegmentHeader = 1,
    /// A live or dead object version: key and value (and an expiry time when
    /// stored with [`OBJECT_WITH_EXPIRY_BYTE`]).
    Object = 2,
    /// A record that an object version was deleted or overwritten.
    Tombstone = 3,
    /// The ids of the segments in the log when a head segment was opened.
    LogDigest = 4,
    /// A lower bound for the versions the master may hand out.
    SafeVersion = 5,
    /// Per-tablet entry counts and bytes.
    TabletStats = 6,
    /// A completion record of an exactly-once RPC (RIFL; `entry::rpc_result`).
    RpcResult = 7,
    /// A transaction's durable prepared op, or the mark that it was decided
    /// (SOSP'15 §6.2; `entry::tx_record`).
    TxRecord = 8,
}

impl EntryType {
    /// The type stored as `b`, or `None` for 0 and unknown values.
    #[inline]
    pub const fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            1 => Self::SegmentHeader,
            2 | OBJECT_WITH_EXPIRY_BYTE => Self::Object,
            3 => Self::Tombstone,
            4 => Self::LogDigest,
            5 => Self::SafeVersion,
            6 => Self::TabletStats,
            7 => Self::RpcResult,
            8 => Self::TxRecord,
            _ => return None,
        })
    }
}

/// Why bytes could not be parsed as a log entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EntryError {
    /// The buffer ends before the entry (or, for the layout parsers, before the fields
    /// they read). `needed` is a lower bound on the buffer length that can succeed:
    /// exact once the header is known, `available + 1` while a varint is cut.
    #[error("entry truncated: needs at least {needed} bytes, {available} available")]
    Truncated { needed: usize, available: usize },
    /// The type byte is 0 (unwritten memory) or not a known type.
    #[error("unknown entry type {0}")]
    UnknownType(u8),
    /// A layout parser found a valid entry of another type than the one it parses.
    #[error("expected a {expected:?} entry, found {found:?}")]
    UnexpectedType {
        expected: EntryType,
        found: EntryType,
    },
    /// The stored checksum does not match the entry's bytes.
    #[error("entry checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    BadChecksum { stored: u32, computed: u32 },
    /// A varint is longer than ten bytes, overflows u64 or is not canonical.
    #[error("malformed varint in entry")]
    BadVarint,
    /// The fields do not fit in body_len, or bytes follow where the body must end.
    #[error("entry fields do not match its body length")]
    BadLength,
    /// key_len exceeds [`MAX_KEY_BYTES`].
    #[error("key of {0} bytes exceeds the limit")]
    KeyTooLarge(usize),
    /// The value exceeds [`MAX_VALUE_BYTES`].
    #[error("value of {0} bytes exceeds the limit")]
    ValueTooLarge(usize),
    /// body_len exceeds [`SEGMENT_BYTES`].
    #[error("entry body of {0} bytes exceeds a segment")]
    TooLarge(usize),
}

/// A header parsed from an entry's first bytes without checking the checksum: enough
/// to size the entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryHeader {
    pub entry_type: EntryType,
    /// Type byte plus body_len varint.
    pub header_len: usize,
    pub body_len: usize,
    /// `header_len + body_len + CRC_BYTES`.
    pub total_len: usize,
}

/// Layout of an object entry; offsets are from the entry's first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectLayout {
    pub table_id: u64,
    pub version: u64,
    pub birth: u64,
    /// Absolute wall-clock time (ms since the Unix epoch) from which the object
    /// reads as absent; `None` for an object that never expires.
    pub expires_at: Option<u64>,
    pub key_offset: usize,
    pub key_len: usize,
    pub value_offset: usize,
    pub value_len: usize,
    pub total_len: usize,
}

/// Layout of a tombstone entry; offsets are from the entry's first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TombstoneLayout {
    pub table_id: u64,
    pub version: u64,
    pub segment_id: u64,
    pub key_offset: usize,
    pub key_len: usize,
    pub total_len: usize,
}

/// What a segment scan learns of one entry from a single parse of its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScannedLayout {
    Object(ObjectLayout),
    Tombstone(TombstoneLayout),
    /// A completion record (RIFL): which lease and sequence number it answers.
    RpcResult {
        lease_id: u64,
        seq: u64,
    },
    /// A transaction record: which prepared op it is, and for a decided
    /// record the segment of its prepared op.
    TxRecord(TxRecordScan),
    /// Segment header, digest, safe version or tablet statistics.
    Metadata,
    /// An object or tombstone whose header is sound but whose fields are not: the
    /// scan skips it (its length is known) and goes on.
    Unparsable,
}

/// What a segment scan needs of a TxRecord to ask whether it is live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TxRecordScan {
    pub lease_id: u64,
    pub tx_seq: u64,
    pub op_index: u64,
    /// `Some(segment)` for a decided record: the segment its prepared op was in.
    pub decided_segment: Option<u64>,
}
