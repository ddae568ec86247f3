//! Every byte of a log entry: the on-log format, its encoders and its parsers.
//!
//! # Frame
//!
//! Every entry, whatever its type, is framed the same way, so the log can be walked
//! from a segment's first byte without knowing anything about the entries' contents:
//!
//! ```text
//! +------+-----------------+---------------------+--------------+
//! | type | body_len        | body                | crc32c       |
//! | u8   | varint, 1..=4 B | body_len bytes      | u32 LE, 4 B  |
//! +------+-----------------+---------------------+--------------+
//! |<------------- covered by the crc ----------->|
//! ```
//!
//! Types: 1 SegmentHeader, 2 Object, 3 Tombstone, 4 LogDigest, 5 SafeVersion,
//! 6 TabletStats. Type 0 is invalid because unwritten log memory is zero: a scan that
//! reaches the end of the written part of a segment stops with
//! [`EntryError::UnknownType`]`(0)` instead of reading garbage. `body_len` is at most
//! [`SEGMENT_BYTES`] (2^23), so its varint never exceeds four bytes.
//!
//! The checksum covers the type and the length as well as the body: a flipped bit in
//! either would otherwise make the parser read a well-checksummed *different* entry,
//! or mis-frame everything after it. [`parse_entry`] therefore succeeds only if every
//! byte of the entry is as written.
//!
//! All integers are LEB128 varints ([`crate::varint`]) unless marked otherwise. Varint
//! decoding rejects non-canonical encodings, so an entry that parses re-encodes to
//! exactly the same bytes.
//!
//! # Bodies
//!
//! Object (type 2); the value takes whatever the body has left after the key:
//!
//! ```text
//! +----------+---------+-------+---------+-------------+-------------------+
//! | table_id | version | birth | key_len | key         | value             |
//! | varint   | varint  | varint| varint  | key_len B   | rest of the body  |
//! +----------+---------+-------+---------+-------------+-------------------+
//! ```
//!
//! `birth` is a logical age stamp: the cleaner uses it to judge how long the data has
//! lived, which survives copying an object into a new segment.
//!
//! Tombstone (type 3); the body ends exactly after the key:
//!
//! ```text
//! +----------+---------+------------+---------+-----------+
//! | table_id | version | segment_id | key_len | key       |
//! | varint   | varint  | varint     | varint  | key_len B |
//! +----------+---------+------------+---------+-----------+
//! ```
//!
//! `version` is the version of the object the tombstone kills and `segment_id` the
//! segment that held it: once that segment has left the log, the tombstone has nothing
//! left to kill and the cleaner may drop it.
//!
//! SegmentHeader (type 1), the first entry of every segment:
//!
//! ```text
//! +-----------+------------+
//! | master_id | segment_id |
//! | varint    | varint     |
//! +-----------+------------+
//! ```
//!
//! LogDigest (type 4), the list of segments that make up the log when a head segment
//! is opened, so recovery can tell which segments belong to the log:
//!
//! ```text
//! +--------+--------------+-----+------------------+
//! | count  | segment_id 0 | ... | segment_id n - 1 |
//! | varint | varint       |     | varint           |
//! +--------+--------------+-----+------------------+
//! ```
//!
//! SafeVersion (type 5), a floor for version numbers that survives the deletion of
//! every object carrying a higher one:
//!
//! ```text
//! +---------+
//! | version |
//! | varint  |
//! +---------+
//! ```
//!
//! TabletStats (type 6), per-tablet occupancy so recovery can plan partitions:
//!
//! ```text
//! +--------+------------------------------------------------------------+-----+
//! | count  | table_id | start_hash | end_hash | entry_count | bytes       | ... |
//! | varint | varint   | u64 LE 8 B | u64 LE 8B| varint      | varint      |     |
//! +--------+------------------------------------------------------------+-----+
//! ```
//!
//! The hashes are fixed-width because they are uniformly distributed: a varint would
//! make most of them longer, not shorter.
//!
//! # Why varints
//!
//! Log-structured memory stores every object as one log entry (L§3), and the hash
//! table points straight at those entries in the log (R§4.1 Fig. 5), so whatever
//! metadata an entry carries is paid by every object in memory. With the small objects
//! these systems are built for (around 100 bytes), fixed 8-byte table ids, versions,
//! birth stamps and lengths would add more than 30 % to each object; varints bring the
//! per-object overhead down to about ten bytes (see [`object_entry_len`]). Fields that
//! are usually small (table ids, key lengths, lengths) cost one byte, and large ones
//! cost no more than they need.
//!
//! # Use
//!
//! The append path writes an object without staging it: [`object_header`] gives the
//! bytes before the key, the caller copies key and value into the log, and
//! [`entry_crc`] computes the checksum over the three pieces. Readers that hold a
//! reference to an object parse only its first [`MAX_HEADER_BYTES`] bytes with
//! [`parse_object_layout`]; recovery and tests use [`parse_entry`], which checks
//! everything. Parsers never panic and never allocate, whatever their input.

use crate::varint::{self, VarintError, MAX_VARINT_BYTES};
use crate::{MAX_KEY_BYTES, MAX_VALUE_BYTES, SEGMENT_BYTES};

/// Upper bound on the bytes of an object or tombstone entry before its key (type,
/// body_len, the three fixed fields, key_len).
///
/// Any entry that parses fits: body_len ≤ [`SEGMENT_BYTES`] takes at most 4 bytes,
/// each u64 field at most 10 and key_len ≤ [`MAX_KEY_BYTES`] at most 3, so a prefix of
/// this many bytes is always enough for [`parse_object_layout`] and
/// [`parse_tombstone_layout`].
pub const MAX_HEADER_BYTES: usize = 48;
/// Bytes of the trailing checksum.
pub const CRC_BYTES: usize = 4;

/// Longest object or tombstone header any parseable entry can have.
const LONGEST_HEADER: usize = 1
    + varint::encoded_len(SEGMENT_BYTES as u64)
    + 3 * MAX_VARINT_BYTES
    + varint::encoded_len(MAX_KEY_BYTES as u64);
const _: () = assert!(LONGEST_HEADER <= MAX_HEADER_BYTES);
// The largest object the encoders accept must also be parseable.
const _: () = assert!(
    3 * MAX_VARINT_BYTES
        + varint::encoded_len(MAX_KEY_BYTES as u64)
        + MAX_KEY_BYTES
        + MAX_VALUE_BYTES
        <= SEGMENT_BYTES
);
// `EncodedHeader::len` is a u8.
const _: () = assert!(MAX_HEADER_BYTES <= u8::MAX as usize);

/// The kind of a log entry, stored in its first byte.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryType {
    /// First entry of every segment: which master and segment it belongs to.
    SegmentHeader = 1,
    /// A live or dead object version: key and value.
    Object = 2,
    /// A record that an object version was deleted or overwritten.
    Tombstone = 3,
    /// The ids of the segments in the log when a head segment was opened.
    LogDigest = 4,
    /// A lower bound for the versions the master may hand out.
    SafeVersion = 5,
    /// Per-tablet entry counts and bytes.
    TabletStats = 6,
}

impl EntryType {
    /// The type stored as `b`, or `None` for 0 and unknown values.
    #[inline]
    pub const fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            1 => Self::SegmentHeader,
            2 => Self::Object,
            3 => Self::Tombstone,
            4 => Self::LogDigest,
            5 => Self::SafeVersion,
            6 => Self::TabletStats,
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

/// A parsed object entry, borrowing key and value from the parsed buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectEntry<'a> {
    pub table_id: u64,
    pub version: u64,
    pub birth: u64,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// A parsed tombstone entry, borrowing the key from the parsed buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TombstoneEntry<'a> {
    pub table_id: u64,
    pub version: u64,
    pub segment_id: u64,
    pub key: &'a [u8],
}

/// A parsed segment header entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeaderEntry {
    pub master_id: u64,
    pub segment_id: u64,
}

/// A parsed log digest. It keeps the encoded ids, which parsing has validated, so
/// parsing needs no allocation and iterating cannot fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogDigestEntry<'a> {
    count: usize,
    ids: &'a [u8],
}

impl<'a> LogDigestEntry<'a> {
    /// Number of segment ids.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the digest lists no segment.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The segment ids, in the order they were encoded.
    pub fn segment_ids(&self) -> impl Iterator<Item = u64> + 'a {
        let mut r = Reader::whole(self.ids);
        // Parsing validated every id, so reading only stops at the end of the list.
        std::iter::from_fn(move || r.varint().ok())
    }
}

/// Occupancy of one tablet, as recorded in a TabletStats entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TabletStat {
    pub table_id: u64,
    pub start_hash: u64,
    pub end_hash: u64,
    pub entry_count: u64,
    pub bytes: u64,
}

/// A parsed TabletStats entry. It keeps the encoded stats, which parsing has
/// validated, so parsing needs no allocation and iterating cannot fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TabletStatsEntry<'a> {
    count: usize,
    stats: &'a [u8],
}

impl<'a> TabletStatsEntry<'a> {
    /// Number of tablets.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the entry lists no tablet.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The per-tablet stats, in the order they were encoded.
    pub fn stats(&self) -> impl Iterator<Item = TabletStat> + 'a {
        let mut r = Reader::whole(self.stats);
        // Parsing validated every stat, so reading only stops at the end of the list.
        std::iter::from_fn(move || read_stat(&mut r).ok())
    }
}

/// A parsed safe-version entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SafeVersionEntry {
    pub version: u64,
}

/// A fully parsed log entry, borrowing from the parsed buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry<'a> {
    SegmentHeader(SegmentHeaderEntry),
    Object(ObjectEntry<'a>),
    Tombstone(TombstoneEntry<'a>),
    LogDigest(LogDigestEntry<'a>),
    SafeVersion(SafeVersionEntry),
    TabletStats(TabletStatsEntry<'a>),
}

impl Entry<'_> {
    /// The type byte this entry was stored with.
    pub fn entry_type(&self) -> EntryType {
        match self {
            Entry::SegmentHeader(_) => EntryType::SegmentHeader,
            Entry::Object(_) => EntryType::Object,
            Entry::Tombstone(_) => EntryType::Tombstone,
            Entry::LogDigest(_) => EntryType::LogDigest,
            Entry::SafeVersion(_) => EntryType::SafeVersion,
            Entry::TabletStats(_) => EntryType::TabletStats,
        }
    }
}

// ---------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------

/// Converts a decoded length to usize for an error report, saturating on 32-bit
/// targets where it may not fit.
fn saturate(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// Reads the type byte, so a wrong or unwritten type is reported even from one byte.
fn parse_type(prefix: &[u8]) -> Result<EntryType, EntryError> {
    let Some(&b) = prefix.first() else {
        return Err(EntryError::Truncated {
            needed: 1,
            available: 0,
        });
    };
    EntryType::from_u8(b).ok_or(EntryError::UnknownType(b))
}

/// Parses the type byte and body length from an entry's first bytes (at most 1 + 10
/// are read). The checksum is not checked.
pub fn parse_header(prefix: &[u8]) -> Result<EntryHeader, EntryError> {
    let entry_type = parse_type(prefix)?;
    // parse_type succeeded, so there is a first byte to skip.
    let rest = prefix.get(1..).unwrap_or(&[]);
    let (body_len, n) = match varint::decode_u64(rest) {
        Ok(decoded) => decoded,
        Err(VarintError::Truncated) => {
            return Err(EntryError::Truncated {
                needed: prefix.len() + 1,
                available: prefix.len(),
            })
        }
        Err(VarintError::Overlong) => return Err(EntryError::BadVarint),
    };
    if body_len > SEGMENT_BYTES as u64 {
        return Err(EntryError::TooLarge(saturate(body_len)));
    }
    // Cannot truncate: body_len ≤ SEGMENT_BYTES, which is a usize.
    let body_len = body_len as usize;
    let header_len = 1 + n;
    Ok(EntryHeader {
        entry_type,
        header_len,
        body_len,
        total_len: header_len + body_len + CRC_BYTES,
    })
}

/// A cursor over an entry's body, which may be only partly present when a layout
/// parser was given the entry's first bytes.
///
/// Running out of present bytes is `Truncated` if the body continues beyond them, and
/// `BadLength` if the body itself ends there: the first means "give me more bytes",
/// the second "these fields can never fit".
#[derive(Clone, Copy)]
struct Reader<'a> {
    /// The present bytes of the body: all of it, or a prefix of it.
    avail: &'a [u8],
    /// Length of the whole body; `avail.len() <= body_len`.
    body_len: usize,
    /// Offset of the body from the entry's first byte, for offsets and errors.
    base: usize,
    /// Next byte to read; `pos <= avail.len()`.
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader over the body of the entry at the start of `prefix`.
    fn body(prefix: &'a [u8], header: &EntryHeader) -> Self {
        let end = prefix.len().min(header.header_len + header.body_len);
        // parse_header read header_len bytes, so header_len ≤ end and the range exists;
        // the fallback only keeps this free of panics.
        let avail = prefix.get(header.header_len..end).unwrap_or(&[]);
        Reader {
            avail,
            body_len: header.body_len,
            base: header.header_len,
            pos: 0,
        }
    }

    /// A reader over bytes that are all present.
    fn whole(bytes: &'a [u8]) -> Self {
        Reader {
            avail: bytes,
            body_len: bytes.len(),
            base: 0,
            pos: 0,
        }
    }

    /// The error for a field that runs past the present bytes.
    fn ran_out(&self, needed_in_body: usize) -> EntryError {
        if self.avail.len() < self.body_len && needed_in_body <= self.body_len {
            EntryError::Truncated {
                needed: self.base + needed_in_body,
                available: self.base + self.avail.len(),
            }
        } else {
            EntryError::BadLength
        }
    }

    fn varint(&mut self) -> Result<u64, EntryError> {
        let rest = self.avail.get(self.pos..).unwrap_or(&[]);
        match varint::decode_u64(rest) {
            Ok((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            // The varint needs at least one byte more than is present.
            Err(VarintError::Truncated) => Err(self.ran_out(self.avail.len() + 1)),
            Err(VarintError::Overlong) => Err(EntryError::BadVarint),
        }
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], EntryError> {
        let end = self.pos.checked_add(n).ok_or(EntryError::BadLength)?;
        match self.avail.get(self.pos..end) {
            Some(s) => {
                self.pos = end;
                Ok(s)
            }
            None => Err(self.ran_out(end)),
        }
    }

    fn fixed_u64(&mut self) -> Result<u64, EntryError> {
        let mut le = [0u8; 8];
        le.copy_from_slice(self.bytes(8)?);
        Ok(u64::from_le_bytes(le))
    }

    /// Body bytes after the cursor, present or not.
    fn remaining(&self) -> usize {
        self.body_len - self.pos
    }

    /// Offset of the cursor from the entry's first byte.
    fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// Fails unless the body ends exactly at the cursor.
    fn finish(&self) -> Result<(), EntryError> {
        if self.pos == self.body_len {
            Ok(())
        } else {
            Err(EntryError::BadLength)
        }
    }
}

/// Reads a key length and checks it against the limit and the rest of the body.
fn read_key_len(r: &mut Reader<'_>) -> Result<usize, EntryError> {
    let key_len = r.varint()?;
    if key_len > MAX_KEY_BYTES as u64 {
        return Err(EntryError::KeyTooLarge(saturate(key_len)));
    }
    // Cannot truncate: key_len ≤ MAX_KEY_BYTES.
    let key_len = key_len as usize;
    if key_len > r.remaining() {
        return Err(EntryError::BadLength);
    }
    Ok(key_len)
}

fn object_layout(prefix: &[u8], header: &EntryHeader) -> Result<ObjectLayout, EntryError> {
    let mut r = Reader::body(prefix, header);
    let table_id = r.varint()?;
    let version = r.varint()?;
    let birth = r.varint()?;
    let key_len = read_key_len(&mut r)?;
    let value_len = r.remaining() - key_len;
    if value_len > MAX_VALUE_BYTES {
        return Err(EntryError::ValueTooLarge(value_len));
    }
    let key_offset = r.offset();
    Ok(ObjectLayout {
        table_id,
        version,
        birth,
        key_offset,
        key_len,
        value_offset: key_offset + key_len,
        value_len,
        total_len: header.total_len,
    })
}

fn tombstone_layout(prefix: &[u8], header: &EntryHeader) -> Result<TombstoneLayout, EntryError> {
    let mut r = Reader::body(prefix, header);
    let table_id = r.varint()?;
    let version = r.varint()?;
    let segment_id = r.varint()?;
    let key_len = read_key_len(&mut r)?;
    // The key is the last field, so anything after it is corruption.
    if key_len != r.remaining() {
        return Err(EntryError::BadLength);
    }
    Ok(TombstoneLayout {
        table_id,
        version,
        segment_id,
        key_offset: r.offset(),
        key_len,
        total_len: header.total_len,
    })
}

/// What a segment scan learns of one entry from a single parse of its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScannedLayout {
    Object(ObjectLayout),
    Tombstone(TombstoneLayout),
    /// Segment header, digest, safe version or tablet statistics.
    Metadata,
    /// An object or tombstone whose header is sound but whose fields are not: the
    /// scan skips it (its length is known) and goes on.
    Unparsable,
}

/// Parses the header of the entry at the start of `prefix` and, for an object or a
/// tombstone, its layout — once, where a scan would otherwise parse the header a
/// second time to read the layout. Fails only if the header itself is bad (then
/// the entry's length is unknown and a scan must stop); `prefix` as for
/// [`parse_object_layout`].
pub fn parse_scanned(prefix: &[u8]) -> Result<(EntryHeader, ScannedLayout), EntryError> {
    let header = parse_header(prefix)?;
    let layout = match header.entry_type {
        EntryType::Object => match object_layout(prefix, &header) {
            Ok(l) => ScannedLayout::Object(l),
            Err(_) => ScannedLayout::Unparsable,
        },
        EntryType::Tombstone => match tombstone_layout(prefix, &header) {
            Ok(l) => ScannedLayout::Tombstone(l),
            Err(_) => ScannedLayout::Unparsable,
        },
        _ => ScannedLayout::Metadata,
    };
    Ok((header, layout))
}

/// Checks that `prefix` starts an entry of type `expected` and parses its header.
fn expect_header(prefix: &[u8], expected: EntryType) -> Result<EntryHeader, EntryError> {
    // The type is checked first so that a wrong type is reported even from a prefix
    // too short to hold the body length.
    let found = parse_type(prefix)?;
    if found != expected {
        return Err(EntryError::UnexpectedType { expected, found });
    }
    parse_header(prefix)
}

/// Computes the layout of the object entry at the start of `prefix`, without checking
/// its checksum.
///
/// `prefix` may be the whole entry, more than it, or only its first bytes: the first
/// [`MAX_HEADER_BYTES`] (or the whole entry if shorter) are always enough. Fails with
/// `Truncated` if the header fields are cut off, `UnexpectedType` for another entry
/// type, and with the other errors of [`parse_entry`] (except `BadChecksum`) if the
/// fields are invalid.
pub fn parse_object_layout(prefix: &[u8]) -> Result<ObjectLayout, EntryError> {
    let header = expect_header(prefix, EntryType::Object)?;
    object_layout(prefix, &header)
}

/// Computes the layout of the tombstone entry at the start of `prefix`, without
/// checking its checksum; like [`parse_object_layout`].
pub fn parse_tombstone_layout(prefix: &[u8]) -> Result<TombstoneLayout, EntryError> {
    let header = expect_header(prefix, EntryType::Tombstone)?;
    tombstone_layout(prefix, &header)
}

fn read_stat(r: &mut Reader<'_>) -> Result<TabletStat, EntryError> {
    Ok(TabletStat {
        table_id: r.varint()?,
        start_hash: r.fixed_u64()?,
        end_hash: r.fixed_u64()?,
        entry_count: r.varint()?,
        bytes: r.varint()?,
    })
}

/// Reads a list count followed by `count` items, returning the count and the encoded
/// items. The loop is bounded by the body length because every item takes at least
/// one byte, whatever count claims.
fn read_list<'a, T>(
    r: &mut Reader<'a>,
    mut read_item: impl FnMut(&mut Reader<'a>) -> Result<T, EntryError>,
) -> Result<(usize, &'a [u8]), EntryError> {
    let count = r.varint()?;
    let start = r.pos;
    let mut read = 0u64;
    while read < count {
        read_item(r)?;
        read += 1;
    }
    r.finish()?;
    // Cannot truncate: each of the `count` items took at least one byte of the body.
    let count = count as usize;
    Ok((count, r.avail.get(start..r.pos).unwrap_or(&[])))
}

fn read_u32_le(buf: &[u8], at: usize) -> Option<u32> {
    let bytes: [u8; 4] = buf.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_le_bytes(bytes))
}

/// Parses one whole entry at the start of `buf`, verifying its checksum and that every
/// field fits; returns the entry and its total length. Bytes after the entry are
/// ignored.
///
/// Never panics and never allocates, on any input.
pub fn parse_entry(buf: &[u8]) -> Result<(Entry<'_>, usize), EntryError> {
    let header = parse_header(buf)?;
    let crc_at = header.header_len + header.body_len;
    let (Some(covered), Some(stored)) = (buf.get(..crc_at), read_u32_le(buf, crc_at)) else {
        return Err(EntryError::Truncated {
            needed: header.total_len,
            available: buf.len(),
        });
    };
    let computed = crc32c::crc32c(covered);
    if stored != computed {
        return Err(EntryError::BadChecksum { stored, computed });
    }
    let entry = match header.entry_type {
        EntryType::Object => {
            let l = object_layout(buf, &header)?;
            Entry::Object(ObjectEntry {
                table_id: l.table_id,
                version: l.version,
                birth: l.birth,
                key: slice(buf, l.key_offset, l.key_len)?,
                value: slice(buf, l.value_offset, l.value_len)?,
            })
        }
        EntryType::Tombstone => {
            let l = tombstone_layout(buf, &header)?;
            Entry::Tombstone(TombstoneEntry {
                table_id: l.table_id,
                version: l.version,
                segment_id: l.segment_id,
                key: slice(buf, l.key_offset, l.key_len)?,
            })
        }
        EntryType::SegmentHeader => {
            let mut r = Reader::body(buf, &header);
            let e = SegmentHeaderEntry {
                master_id: r.varint()?,
                segment_id: r.varint()?,
            };
            r.finish()?;
            Entry::SegmentHeader(e)
        }
        EntryType::LogDigest => {
            let mut r = Reader::body(buf, &header);
            let (count, ids) = read_list(&mut r, Reader::varint)?;
            Entry::LogDigest(LogDigestEntry { count, ids })
        }
        EntryType::SafeVersion => {
            let mut r = Reader::body(buf, &header);
            let e = SafeVersionEntry {
                version: r.varint()?,
            };
            r.finish()?;
            Entry::SafeVersion(e)
        }
        EntryType::TabletStats => {
            let mut r = Reader::body(buf, &header);
            let (count, stats) = read_list(&mut r, read_stat)?;
            Entry::TabletStats(TabletStatsEntry { count, stats })
        }
    };
    Ok((entry, header.total_len))
}

/// `buf[offset..offset + len]`, which the layout parsers have already bounded by the
/// entry; the error only keeps parsing free of panics.
fn slice(buf: &[u8], offset: usize, len: usize) -> Result<&[u8], EntryError> {
    buf.get(offset..offset.saturating_add(len))
        .ok_or(EntryError::BadLength)
}

// ---------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------

/// The bytes of an object or tombstone entry before its key, built on the stack so
/// the append path can copy key and value straight from the caller into the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncodedHeader {
    bytes: [u8; MAX_HEADER_BYTES],
    len: u8,
}

impl EncodedHeader {
    fn new(entry_type: EntryType, body_len: usize) -> Self {
        let mut h = EncodedHeader {
            bytes: [0; MAX_HEADER_BYTES],
            len: 1,
        };
        h.bytes[0] = entry_type as u8;
        h.push_varint(body_len as u64);
        h
    }

    fn push_varint(&mut self, v: u64) {
        // Cannot overflow the array: callers assert the key and value limits, and
        // LONGEST_HEADER ≤ MAX_HEADER_BYTES is checked at compile time for them.
        let n = varint::encode_u64(v, &mut self.bytes[usize::from(self.len)..]);
        // Cannot truncate: len stays ≤ MAX_HEADER_BYTES ≤ 255.
        self.len += n as u8;
    }

    /// The encoded header bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// Bytes of the four varints at the start of an object or tombstone body.
fn fields_len(a: u64, b: u64, c: u64, key_len: usize) -> usize {
    varint::encoded_len(a)
        + varint::encoded_len(b)
        + varint::encoded_len(c)
        + varint::encoded_len(key_len as u64)
}

/// Total entry length for a body of `body_len` bytes.
fn framed_len(body_len: usize) -> usize {
    (1 + varint::encoded_len(body_len as u64) + CRC_BYTES).saturating_add(body_len)
}

fn check_object_limits(key_len: usize, value_len: usize) {
    assert!(
        key_len <= MAX_KEY_BYTES,
        "key of {key_len} bytes exceeds MAX_KEY_BYTES"
    );
    assert!(
        value_len <= MAX_VALUE_BYTES,
        "value of {value_len} bytes exceeds MAX_VALUE_BYTES"
    );
}

/// Header bytes of an object entry (type, body_len, table_id, version, birth,
/// key_len): the entry is these bytes ++ key ++ value ++ crc (see [`entry_crc`]).
///
/// # Panics
/// If `key_len > MAX_KEY_BYTES` or `value_len > MAX_VALUE_BYTES`; callers check the
/// limits first and report them to the client as errors.
pub fn object_header(
    table_id: u64,
    version: u64,
    birth: u64,
    key_len: usize,
    value_len: usize,
) -> EncodedHeader {
    check_object_limits(key_len, value_len);
    let body_len = fields_len(table_id, version, birth, key_len) + key_len + value_len;
    let mut h = EncodedHeader::new(EntryType::Object, body_len);
    h.push_varint(table_id);
    h.push_varint(version);
    h.push_varint(birth);
    h.push_varint(key_len as u64);
    h
}

/// Header bytes of a tombstone entry (type, body_len, table_id, version, segment_id,
/// key_len): the entry is these bytes ++ key ++ crc (see [`entry_crc`]).
///
/// # Panics
/// If `key_len > MAX_KEY_BYTES`; callers check the limit first.
pub fn tombstone_header(
    table_id: u64,
    version: u64,
    segment_id: u64,
    key_len: usize,
) -> EncodedHeader {
    check_object_limits(key_len, 0);
    let body_len = fields_len(table_id, version, segment_id, key_len) + key_len;
    let mut h = EncodedHeader::new(EntryType::Tombstone, body_len);
    h.push_varint(table_id);
    h.push_varint(version);
    h.push_varint(segment_id);
    h.push_varint(key_len as u64);
    h
}

/// Checksum over the pieces of an entry (everything before the crc), in order. Store
/// it after the pieces as 4 little-endian bytes.
pub fn entry_crc(parts: &[&[u8]]) -> u32 {
    parts
        .iter()
        .fold(0, |crc, part| crc32c::crc32c_append(crc, part))
}

/// Total encoded length of an object entry (header + key + value + crc), for space
/// checks before appending.
///
/// Per-object overhead (bytes beyond key and value), measured by
/// `object_entry_len_overhead` in the tests: for table 1, a 20-byte key and a 100-byte
/// value it is **10 bytes** when version and birth are below 128 (type 1, body_len 1,
/// table_id 1, version 1, birth 1, key_len 1, crc 4), 12 bytes with version and birth
/// below 2^14, and 13 with birth below 2^21. Each u64 field takes one byte per 7
/// significant bits, so the worst case, all three at `u64::MAX`, costs 38 bytes.
pub fn object_entry_len(
    table_id: u64,
    version: u64,
    birth: u64,
    key_len: usize,
    value_len: usize,
) -> usize {
    framed_len(
        fields_len(table_id, version, birth, key_len)
            .saturating_add(key_len)
            .saturating_add(value_len),
    )
}

/// Total encoded length of a tombstone entry (header + key + crc).
pub fn tombstone_entry_len(table_id: u64, version: u64, segment_id: u64, key_len: usize) -> usize {
    framed_len(fields_len(table_id, version, segment_id, key_len).saturating_add(key_len))
}

fn push_varint(out: &mut Vec<u8>, v: u64) {
    let mut buf = [0u8; MAX_VARINT_BYTES];
    let n = varint::encode_u64(v, &mut buf);
    out.extend_from_slice(&buf[..n]);
}

/// Appends a whole entry: frame, the body written by `body` (which must be exactly
/// `body_len` bytes), and the checksum.
fn write_entry(
    out: &mut Vec<u8>,
    entry_type: EntryType,
    body_len: usize,
    body: impl FnOnce(&mut Vec<u8>),
) {
    // An entry the parsers would reject as TooLarge must never be written.
    assert!(
        body_len <= SEGMENT_BYTES,
        "{entry_type:?} entry body of {body_len} bytes exceeds a segment"
    );
    let start = out.len();
    out.reserve(framed_len(body_len));
    out.push(entry_type as u8);
    push_varint(out, body_len as u64);
    let body_start = out.len();
    body(out);
    // A mismatch would be a bug here that writes an unparseable entry, so it is
    // checked in release builds too; it costs one comparison.
    assert_eq!(
        out.len() - body_start,
        body_len,
        "{entry_type:?} body length"
    );
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Appends a complete object entry, crc included. The append path uses
/// [`object_header`] instead to avoid staging the value.
///
/// # Panics
/// If the key or value exceeds its limit.
pub fn encode_object(
    table_id: u64,
    version: u64,
    birth: u64,
    key: &[u8],
    value: &[u8],
    out: &mut Vec<u8>,
) {
    let header = object_header(table_id, version, birth, key.len(), value.len());
    let crc = entry_crc(&[header.as_bytes(), key, value]);
    out.reserve(header.as_bytes().len() + key.len() + value.len() + CRC_BYTES);
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Appends a complete tombstone entry, crc included.
///
/// # Panics
/// If the key exceeds [`MAX_KEY_BYTES`].
pub fn encode_tombstone(
    table_id: u64,
    version: u64,
    segment_id: u64,
    key: &[u8],
    out: &mut Vec<u8>,
) {
    let header = tombstone_header(table_id, version, segment_id, key.len());
    let crc = entry_crc(&[header.as_bytes(), key]);
    out.reserve(header.as_bytes().len() + key.len() + CRC_BYTES);
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Appends a complete segment header entry.
pub fn encode_segment_header(master_id: u64, segment_id: u64, out: &mut Vec<u8>) {
    let body_len = varint::encoded_len(master_id) + varint::encoded_len(segment_id);
    write_entry(out, EntryType::SegmentHeader, body_len, |out| {
        push_varint(out, master_id);
        push_varint(out, segment_id);
    });
}

/// Appends a complete log digest entry.
///
/// # Panics
/// If the encoded ids exceed [`SEGMENT_BYTES`] (over 800,000 segments).
pub fn encode_log_digest(segment_ids: &[u64], out: &mut Vec<u8>) {
    let body_len = varint::encoded_len(segment_ids.len() as u64)
        + segment_ids
            .iter()
            .map(|&id| varint::encoded_len(id))
            .sum::<usize>();
    write_entry(out, EntryType::LogDigest, body_len, |out| {
        push_varint(out, segment_ids.len() as u64);
        for &id in segment_ids {
            push_varint(out, id);
        }
    });
}

/// Appends a complete safe-version entry.
pub fn encode_safe_version(version: u64, out: &mut Vec<u8>) {
    write_entry(
        out,
        EntryType::SafeVersion,
        varint::encoded_len(version),
        |out| push_varint(out, version),
    );
}

/// Appends a complete tablet-stats entry.
///
/// # Panics
/// If the encoded stats exceed [`SEGMENT_BYTES`].
pub fn encode_tablet_stats(stats: &[TabletStat], out: &mut Vec<u8>) {
    let stat_len = |s: &TabletStat| {
        varint::encoded_len(s.table_id)
            + 16
            + varint::encoded_len(s.entry_count)
            + varint::encoded_len(s.bytes)
    };
    let body_len =
        varint::encoded_len(stats.len() as u64) + stats.iter().map(stat_len).sum::<usize>();
    write_entry(out, EntryType::TabletStats, body_len, |out| {
        push_varint(out, stats.len() as u64);
        for s in stats {
            push_varint(out, s.table_id);
            out.extend_from_slice(&s.start_hash.to_le_bytes());
            out.extend_from_slice(&s.end_hash.to_le_bytes());
            push_varint(out, s.entry_count);
            push_varint(out, s.bytes);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Re-encodes a parsed entry with this module's encoders.
    fn reencode(entry: &Entry<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        match entry {
            Entry::SegmentHeader(e) => encode_segment_header(e.master_id, e.segment_id, &mut out),
            Entry::Object(e) => {
                encode_object(e.table_id, e.version, e.birth, e.key, e.value, &mut out)
            }
            Entry::Tombstone(e) => {
                encode_tombstone(e.table_id, e.version, e.segment_id, e.key, &mut out)
            }
            Entry::LogDigest(e) => {
                encode_log_digest(&e.segment_ids().collect::<Vec<_>>(), &mut out)
            }
            Entry::SafeVersion(e) => encode_safe_version(e.version, &mut out),
            Entry::TabletStats(e) => encode_tablet_stats(&e.stats().collect::<Vec<_>>(), &mut out),
        }
        out
    }

    /// Frames `body` as an entry of type byte `t` with a correct checksum, so tests can
    /// build entries the encoders refuse to write.
    fn raw_entry(t: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![t];
        push_varint(&mut out, body.len() as u64);
        out.extend_from_slice(body);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    fn varints(vs: &[u64]) -> Vec<u8> {
        let mut out = Vec::new();
        for &v in vs {
            push_varint(&mut out, v);
        }
        out
    }

    fn stats_sample() -> Vec<TabletStat> {
        vec![
            TabletStat {
                table_id: 1,
                start_hash: 0,
                end_hash: u64::MAX / 2,
                entry_count: 1000,
                bytes: 130_000,
            },
            TabletStat {
                table_id: u64::MAX,
                start_hash: u64::MAX / 2 + 1,
                end_hash: u64::MAX,
                entry_count: 0,
                bytes: 0,
            },
        ]
    }

    /// One or more valid entries of every type, including edge values.
    fn samples() -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        let mut push = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut out = Vec::new();
            f(&mut out);
            v.push(out);
        };
        push(&|o| encode_object(1, 1, 1, b"user:00000000000000", &[7; 100], o));
        push(&|o| encode_object(0, 0, 0, b"", b"", o));
        push(&|o| encode_object(u64::MAX, u64::MAX, u64::MAX, b"k", &[0xab; 300], o));
        push(&|o| encode_tombstone(1, 5, 17, b"user:00000000000000", o));
        push(&|o| encode_tombstone(u64::MAX, u64::MAX, u64::MAX, b"", o));
        push(&|o| encode_segment_header(3, 99, o));
        push(&|o| encode_segment_header(u64::MAX, 0, o));
        push(&|o| encode_log_digest(&[], o));
        push(&|o| encode_log_digest(&[1, 2, 300, u64::MAX], o));
        push(&|o| encode_safe_version(0, o));
        push(&|o| encode_safe_version(u64::MAX, o));
        push(&|o| encode_tablet_stats(&[], o));
        push(&|o| encode_tablet_stats(&stats_sample(), o));
        v
    }

    #[test]
    fn encode_object_round_trip() {
        let cases: &[(u64, u64, u64, &[u8], usize)] = &[
            (1, 1, 1, b"user:00000000000000", 100),
            (0, 0, 0, b"", 0),
            (7, 300, 1 << 40, b"key", 128),
            (u64::MAX, u64::MAX, u64::MAX, &[0xff; 200], 70_000),
        ];
        for &(t, v, b, key, value_len) in cases {
            let value: Vec<u8> = (0..value_len).map(|i| i as u8).collect();
            let mut out = Vec::new();
            encode_object(t, v, b, key, &value, &mut out);
            assert_eq!(out.len(), object_entry_len(t, v, b, key.len(), value.len()));

            let (entry, len) = parse_entry(&out).expect("valid object");
            assert_eq!(len, out.len());
            let expected = ObjectEntry {
                table_id: t,
                version: v,
                birth: b,
                key,
                value: &value,
            };
            assert_eq!(entry, Entry::Object(expected));
            assert_eq!(entry.entry_type(), EntryType::Object);

            // The zero-copy append path produces the same bytes.
            let header = object_header(t, v, b, key.len(), value.len());
            let crc = entry_crc(&[header.as_bytes(), key, &value]);
            let mut pieces = header.as_bytes().to_vec();
            pieces.extend_from_slice(key);
            pieces.extend_from_slice(&value);
            pieces.extend_from_slice(&crc.to_le_bytes());
            assert_eq!(pieces, out);

            let h = parse_header(&out).expect("header");
            assert_eq!(h.entry_type, EntryType::Object);
            assert_eq!(h.total_len, out.len());
            assert_eq!(h.header_len + h.body_len + CRC_BYTES, out.len());

            let layout = parse_object_layout(&out).expect("layout");
            assert_eq!(layout.key_offset, header.as_bytes().len());
            assert_eq!(&out[layout.key_offset..][..layout.key_len], key);
            assert_eq!(&out[layout.value_offset..][..layout.value_len], &value[..]);
            assert_eq!(
                layout.value_offset + layout.value_len + CRC_BYTES,
                out.len()
            );
            assert_eq!(
                (
                    layout.table_id,
                    layout.version,
                    layout.birth,
                    layout.total_len
                ),
                (t, v, b, out.len())
            );
            // Readers parse only the first MAX_HEADER_BYTES bytes.
            let short = &out[..out.len().min(MAX_HEADER_BYTES)];
            assert_eq!(parse_object_layout(short), Ok(layout));
        }
    }

    #[test]
    fn encode_tombstone_round_trip() {
        let cases: &[(u64, u64, u64, &[u8])] = &[
            (1, 5, 17, b"user:00000000000000"),
            (0, 0, 0, b""),
            (u64::MAX, u64::MAX, u64::MAX, &[0x5a; 1000]),
        ];
        for &(t, v, s, key) in cases {
            let mut out = Vec::new();
            encode_tombstone(t, v, s, key, &mut out);
            assert_eq!(out.len(), tombstone_entry_len(t, v, s, key.len()));
            let (entry, len) = parse_entry(&out).expect("valid tombstone");
            assert_eq!(len, out.len());
            assert_eq!(
                entry,
                Entry::Tombstone(TombstoneEntry {
                    table_id: t,
                    version: v,
                    segment_id: s,
                    key
                })
            );

            let header = tombstone_header(t, v, s, key.len());
            let crc = entry_crc(&[header.as_bytes(), key]);
            let mut pieces = header.as_bytes().to_vec();
            pieces.extend_from_slice(key);
            pieces.extend_from_slice(&crc.to_le_bytes());
            assert_eq!(pieces, out);

            let layout = parse_tombstone_layout(&out).expect("layout");
            assert_eq!(
                layout,
                TombstoneLayout {
                    table_id: t,
                    version: v,
                    segment_id: s,
                    key_offset: header.as_bytes().len(),
                    key_len: key.len(),
                    total_len: out.len(),
                }
            );
            let short = &out[..out.len().min(MAX_HEADER_BYTES)];
            assert_eq!(parse_tombstone_layout(short), Ok(layout));
        }
    }

    #[test]
    fn encode_segment_header_round_trip() {
        for (m, s) in [(0, 0), (3, 99), (u64::MAX, u64::MAX)] {
            let mut out = Vec::new();
            encode_segment_header(m, s, &mut out);
            let (entry, len) = parse_entry(&out).expect("valid");
            assert_eq!(len, out.len());
            assert_eq!(
                entry,
                Entry::SegmentHeader(SegmentHeaderEntry {
                    master_id: m,
                    segment_id: s
                })
            );
        }
    }

    #[test]
    fn encode_log_digest_round_trip() {
        let many: Vec<u64> = (0..5000u64).map(|i| i * i * 7919).collect();
        for ids in [&[][..], &[42], &[1, 2, 300, u64::MAX], &many] {
            let mut out = Vec::new();
            encode_log_digest(ids, &mut out);
            let (entry, len) = parse_entry(&out).expect("valid");
            assert_eq!(len, out.len());
            let Entry::LogDigest(d) = entry else {
                panic!("not a digest: {entry:?}");
            };
            assert_eq!(d.len(), ids.len());
            assert_eq!(d.is_empty(), ids.is_empty());
            assert_eq!(d.segment_ids().collect::<Vec<_>>(), ids);
        }
    }

    #[test]
    fn encode_safe_version_round_trip() {
        for v in [0, 1, 127, 128, u64::MAX] {
            let mut out = Vec::new();
            encode_safe_version(v, &mut out);
            let (entry, len) = parse_entry(&out).expect("valid");
            assert_eq!(len, out.len());
            assert_eq!(entry, Entry::SafeVersion(SafeVersionEntry { version: v }));
        }
    }

    #[test]
    fn encode_tablet_stats_round_trip() {
        let many: Vec<TabletStat> = (0..1000u64)
            .map(|i| TabletStat {
                table_id: i,
                start_hash: i << 40,
                end_hash: (i << 40) | 0xff_ffff_ffff,
                entry_count: i * 3,
                bytes: i * 1000,
            })
            .collect();
        for stats in [&[][..], &stats_sample(), &many] {
            let mut out = Vec::new();
            encode_tablet_stats(stats, &mut out);
            let (entry, len) = parse_entry(&out).expect("valid");
            assert_eq!(len, out.len());
            let Entry::TabletStats(t) = entry else {
                panic!("not tablet stats: {entry:?}");
            };
            assert_eq!(t.len(), stats.len());
            assert_eq!(t.is_empty(), stats.is_empty());
            assert_eq!(t.stats().collect::<Vec<_>>(), stats);
        }
    }

    #[test]
    fn encode_object_largest_allowed() {
        let key = vec![1u8; MAX_KEY_BYTES];
        let value = vec![2u8; MAX_VALUE_BYTES];
        let mut out = Vec::new();
        encode_object(u64::MAX, u64::MAX, u64::MAX, &key, &value, &mut out);
        let header = object_header(u64::MAX, u64::MAX, u64::MAX, key.len(), value.len());
        assert!(header.as_bytes().len() <= MAX_HEADER_BYTES);
        let (entry, len) = parse_entry(&out).expect("largest object parses");
        assert_eq!(len, out.len());
        let Entry::Object(o) = entry else {
            panic!("not an object");
        };
        assert_eq!(
            (o.key.len(), o.value.len()),
            (MAX_KEY_BYTES, MAX_VALUE_BYTES)
        );
        let layout = parse_object_layout(&out[..MAX_HEADER_BYTES]).expect("layout");
        assert_eq!(layout.value_len, MAX_VALUE_BYTES);
    }

    #[test]
    fn samples_reencode_identically() {
        for s in samples() {
            let (entry, len) = parse_entry(&s).expect("sample parses");
            assert_eq!(len, s.len());
            assert_eq!(reencode(&entry), s);
        }
    }

    #[test]
    fn parse_entry_every_truncation_errors() {
        for s in samples() {
            for cut in 0..s.len() {
                match parse_entry(&s[..cut]) {
                    Err(EntryError::Truncated { needed, available }) => {
                        assert_eq!(available, cut);
                        assert!(needed > cut && needed <= s.len(), "{needed} for cut {cut}");
                    }
                    other => panic!("cut {cut} of {s:?}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn parse_entry_single_byte_flips_rejected() {
        for s in samples() {
            for pos in 0..s.len() {
                for mask in [0xff, 0x01] {
                    let mut bad = s.clone();
                    bad[pos] ^= mask;
                    // The crc covers every byte before it, so no flip can parse.
                    let r = parse_entry(&bad);
                    assert!(r.is_err(), "flip {mask:#x} at {pos} of {s:?}: {r:?}");
                    // With trailing bytes the result is still an error, never a
                    // differently framed entry.
                    bad.extend_from_slice(&s);
                    let r = parse_entry(&bad);
                    assert!(r.is_err(), "flip {mask:#x} at {pos} of {s:?}: {r:?}");
                }
            }
        }
    }

    #[test]
    fn parse_entry_sequence_of_entries() {
        let samples = samples();
        let log: Vec<u8> = samples.concat();
        let mut log_with_tail = log.clone();
        // Unwritten log memory follows the last entry.
        log_with_tail.extend_from_slice(&[0; 64]);
        let mut rest = &log_with_tail[..];
        for s in &samples {
            let (entry, len) = parse_entry(rest).expect("entry in sequence");
            assert_eq!(len, s.len());
            assert_eq!(reencode(&entry), *s);
            rest = &rest[len..];
        }
        assert_eq!(parse_entry(rest), Err(EntryError::UnknownType(0)));
    }

    #[test]
    fn parse_header_errors() {
        assert_eq!(
            parse_header(&[]),
            Err(EntryError::Truncated {
                needed: 1,
                available: 0
            })
        );
        assert_eq!(parse_header(&[0, 5]), Err(EntryError::UnknownType(0)));
        assert_eq!(parse_header(&[7, 5]), Err(EntryError::UnknownType(7)));
        assert_eq!(parse_header(&[0xff]), Err(EntryError::UnknownType(0xff)));
        assert_eq!(
            parse_header(&[2, 0x80]),
            Err(EntryError::Truncated {
                needed: 3,
                available: 2
            })
        );
        assert_eq!(parse_header(&[2, 0x80, 0x00]), Err(EntryError::BadVarint));
        assert_eq!(
            parse_header(&[2]),
            Err(EntryError::Truncated {
                needed: 2,
                available: 1
            })
        );
        let mut too_large = vec![2];
        push_varint(&mut too_large, SEGMENT_BYTES as u64 + 1);
        assert_eq!(
            parse_header(&too_large),
            Err(EntryError::TooLarge(SEGMENT_BYTES + 1))
        );
        let mut huge = vec![2];
        push_varint(&mut huge, u64::MAX);
        assert!(matches!(parse_header(&huge), Err(EntryError::TooLarge(_))));
        let mut largest = vec![6];
        push_varint(&mut largest, SEGMENT_BYTES as u64);
        let h = parse_header(&largest).expect("a full-segment body is allowed");
        assert_eq!(h.header_len, 5);
        assert_eq!(h.total_len, 5 + SEGMENT_BYTES + CRC_BYTES);
    }

    #[test]
    fn parse_entry_rejects_oversized_fields() {
        let mut body = varints(&[1, 1, 1, (MAX_KEY_BYTES + 1) as u64]);
        body.extend(std::iter::repeat_n(0, MAX_KEY_BYTES + 1));
        assert_eq!(
            parse_entry(&raw_entry(3, &body)),
            Err(EntryError::KeyTooLarge(MAX_KEY_BYTES + 1))
        );
        let mut body = varints(&[1, 1, 1, u64::MAX]);
        body.extend_from_slice(b"k");
        assert_eq!(
            parse_entry(&raw_entry(2, &body)),
            Err(EntryError::KeyTooLarge(usize::MAX))
        );
        let mut body = varints(&[1, 1, 1, 1]);
        body.extend(std::iter::repeat_n(0, 1 + MAX_VALUE_BYTES + 1));
        assert_eq!(
            parse_entry(&raw_entry(2, &body)),
            Err(EntryError::ValueTooLarge(MAX_VALUE_BYTES + 1))
        );
        assert_eq!(
            parse_object_layout(&raw_entry(2, &body)[..MAX_HEADER_BYTES]),
            Err(EntryError::ValueTooLarge(MAX_VALUE_BYTES + 1))
        );
        let body = vec![0; SEGMENT_BYTES + 1];
        assert_eq!(
            parse_entry(&raw_entry(4, &body)),
            Err(EntryError::TooLarge(SEGMENT_BYTES + 1))
        );
    }

    #[test]
    fn parse_entry_rejects_bad_lengths() {
        let bad_length: Vec<(u8, Vec<u8>)> = vec![
            // Segment header: missing field, trailing byte.
            (1, varints(&[1])),
            (1, varints(&[1, 2, 3])),
            // Object: key overruns the body, body ends inside the fields.
            (2, [varints(&[1, 1, 1, 5]), b"abc".to_vec()].concat()),
            (2, varints(&[1, 1])),
            (2, vec![]),
            // Tombstone: trailing byte, key overruns the body.
            (3, [varints(&[1, 1, 1, 1]), b"ab".to_vec()].concat()),
            (3, [varints(&[1, 1, 1, 3]), b"ab".to_vec()].concat()),
            // Log digest: count too high, trailing byte, empty body.
            (4, varints(&[3, 1, 2])),
            (4, varints(&[1, 1, 2])),
            (4, vec![]),
            (4, varints(&[u64::MAX, 1, 2])),
            // Safe version: empty, trailing byte.
            (5, vec![]),
            (5, varints(&[1, 2])),
            // Tablet stats: fixed hash cut short, trailing byte.
            (6, [varints(&[1, 1]), vec![0; 12]].concat()),
            (
                6,
                [varints(&[1, 1]), vec![0; 16], varints(&[1, 1, 9])].concat(),
            ),
        ];
        for (t, body) in bad_length {
            let e = raw_entry(t, &body);
            assert_eq!(
                parse_entry(&e),
                Err(EntryError::BadLength),
                "type {t} body {body:?}"
            );
        }
        // A varint in the body running off its end is a length error, and a
        // non-canonical one is a varint error.
        assert_eq!(
            parse_entry(&raw_entry(5, &[0x80])),
            Err(EntryError::BadLength)
        );
        assert_eq!(
            parse_entry(&raw_entry(5, &[0x80, 0x00])),
            Err(EntryError::BadVarint)
        );
        assert_eq!(
            parse_entry(&raw_entry(2, &[1, 0xff, 0x80, 0x00, 1, 0])),
            Err(EntryError::BadVarint)
        );
        assert_eq!(
            parse_tombstone_layout(&raw_entry(3, &[1, 1, 1, 1, b'a', b'b'])),
            Err(EntryError::BadLength)
        );
    }

    #[test]
    fn parse_entry_bad_checksum_reports_both() {
        let mut e = Vec::new();
        encode_safe_version(9, &mut e);
        let n = e.len();
        let stored = u32::from_le_bytes([e[n - 4], e[n - 3], e[n - 2], e[n - 1]]) ^ 1;
        e[n - 4] ^= 1;
        assert_eq!(
            parse_entry(&e),
            Err(EntryError::BadChecksum {
                stored,
                computed: stored ^ 1
            })
        );
    }

    #[test]
    fn parse_scanned_agrees_with_the_layout_parsers() {
        let mut obj = Vec::new();
        encode_object(300, 70_000, 5, b"some key", &[9; 200], &mut obj);
        let mut tomb = Vec::new();
        encode_tombstone(7, 3, 12, b"gone", &mut tomb);
        let mut meta = Vec::new();
        encode_safe_version(99, &mut meta);
        for cut in 0..=obj.len() {
            match (parse_scanned(&obj[..cut]), parse_object_layout(&obj[..cut])) {
                (Ok((h, ScannedLayout::Object(l))), Ok(want)) => {
                    assert_eq!(l, want);
                    assert_eq!(h.total_len, obj.len());
                }
                (Ok((_, ScannedLayout::Unparsable)), Err(_)) => {}
                (Err(e), Err(want)) => assert_eq!(e, want),
                (got, want) => panic!("cut {cut}: {got:?} vs {want:?}"),
            }
        }
        let (_, t) = parse_scanned(&tomb).expect("tombstone");
        assert_eq!(
            t,
            ScannedLayout::Tombstone(parse_tombstone_layout(&tomb).expect("layout"))
        );
        let (h, m) = parse_scanned(&meta).expect("safe version");
        assert_eq!(
            (h.entry_type, m),
            (EntryType::SafeVersion, ScannedLayout::Metadata)
        );
    }

    #[test]
    fn parse_object_layout_prefixes() {
        let mut out = Vec::new();
        encode_object(300, 70_000, 5, b"some key", &[9; 200], &mut out);
        let full = parse_object_layout(&out).expect("layout");
        let mut first_ok = None;
        for cut in 0..=out.len() {
            match parse_object_layout(&out[..cut]) {
                Ok(l) => {
                    assert_eq!(l, full);
                    first_ok.get_or_insert(cut);
                }
                Err(EntryError::Truncated { needed, available }) => {
                    assert!(first_ok.is_none(), "ok then truncated at {cut}");
                    assert_eq!(available, cut);
                    assert!(needed > cut);
                }
                Err(e) => panic!("cut {cut}: {e:?}"),
            }
        }
        // The layout is known as soon as the key length has been read.
        assert_eq!(first_ok, Some(full.key_offset));
    }

    #[test]
    fn parse_tombstone_layout_prefixes() {
        let mut out = Vec::new();
        encode_tombstone(300, 70_000, 1 << 33, b"some key", &mut out);
        let full = parse_tombstone_layout(&out).expect("layout");
        for cut in 0..=out.len() {
            match parse_tombstone_layout(&out[..cut]) {
                Ok(l) => {
                    assert_eq!(l, full);
                    assert!(cut >= full.key_offset);
                }
                Err(EntryError::Truncated { available, .. }) => {
                    assert_eq!(available, cut);
                    assert!(cut < full.key_offset);
                }
                Err(e) => panic!("cut {cut}: {e:?}"),
            }
        }
    }

    #[test]
    fn parse_object_layout_checks_type() {
        let mut tomb = Vec::new();
        encode_tombstone(1, 1, 1, b"k", &mut tomb);
        let mut obj = Vec::new();
        encode_object(1, 1, 1, b"k", b"v", &mut obj);
        let wrong = |expected, found| EntryError::UnexpectedType { expected, found };
        assert_eq!(
            parse_object_layout(&tomb),
            Err(wrong(EntryType::Object, EntryType::Tombstone))
        );
        // One byte is enough to know the type is wrong.
        assert_eq!(
            parse_object_layout(&tomb[..1]),
            Err(wrong(EntryType::Object, EntryType::Tombstone))
        );
        assert_eq!(
            parse_tombstone_layout(&obj),
            Err(wrong(EntryType::Tombstone, EntryType::Object))
        );
        assert_eq!(
            parse_object_layout(&[0; 8]),
            Err(EntryError::UnknownType(0))
        );
        assert_eq!(
            parse_tombstone_layout(&[]),
            Err(EntryError::Truncated {
                needed: 1,
                available: 0
            })
        );
    }

    #[test]
    fn object_entry_len_overhead() {
        let key = [b'k'; 20];
        let value = [b'v'; 100];
        let overhead = |version, birth| {
            let mut out = Vec::new();
            encode_object(1, version, birth, &key, &value, &mut out);
            assert_eq!(out.len(), object_entry_len(1, version, birth, 20, 100));
            out.len() - key.len() - value.len()
        };
        assert_eq!(overhead(1, 1), 10);
        assert_eq!(overhead(127, 127), 10);
        assert_eq!(overhead(1000, 1000), 12);
        assert_eq!(overhead(1000, 1_000_000), 13);
        assert_eq!(overhead(u64::MAX, u64::MAX), 29);
        assert_eq!(
            object_entry_len(u64::MAX, u64::MAX, u64::MAX, 20, 100) - 120,
            38
        );
    }

    #[test]
    fn tombstone_entry_len_matches_encoding() {
        for (t, v, s, k) in [(1, 1, 1, 20), (u64::MAX, 1 << 20, 77, 0), (0, 0, 0, 300)] {
            let mut out = Vec::new();
            encode_tombstone(t, v, s, &vec![0; k], &mut out);
            assert_eq!(out.len(), tombstone_entry_len(t, v, s, k));
        }
    }

    #[test]
    fn entry_crc_parts_equal_whole() {
        let whole = b"the quick brown fox jumps over the lazy dog";
        let expected = crc32c::crc32c(whole);
        assert_eq!(entry_crc(&[whole]), expected);
        for split in 0..whole.len() {
            let (a, b) = whole.split_at(split);
            assert_eq!(entry_crc(&[a, b]), expected);
            assert_eq!(entry_crc(&[a, &[], b]), expected);
        }
        assert_eq!(entry_crc(&[]), crc32c::crc32c(&[]));
    }

    #[test]
    #[should_panic(expected = "MAX_KEY_BYTES")]
    fn object_header_key_too_large_panics() {
        object_header(1, 1, 1, MAX_KEY_BYTES + 1, 0);
    }

    #[test]
    #[should_panic(expected = "MAX_VALUE_BYTES")]
    fn object_header_value_too_large_panics() {
        object_header(1, 1, 1, 0, MAX_VALUE_BYTES + 1);
    }

    #[test]
    #[should_panic(expected = "MAX_KEY_BYTES")]
    fn tombstone_header_key_too_large_panics() {
        tombstone_header(1, 1, 1, MAX_KEY_BYTES + 1);
    }

    #[test]
    fn entry_type_from_u8_matches_repr() {
        for t in [
            EntryType::SegmentHeader,
            EntryType::Object,
            EntryType::Tombstone,
            EntryType::LogDigest,
            EntryType::SafeVersion,
            EntryType::TabletStats,
        ] {
            assert_eq!(EntryType::from_u8(t as u8), Some(t));
        }
        assert_eq!(EntryType::from_u8(0), None);
        assert!((7..=255).all(|b| EntryType::from_u8(b).is_none()));
    }

    fn check_parsers_total(bytes: &[u8]) {
        let header = parse_header(bytes);
        let object = parse_object_layout(bytes);
        let tombstone = parse_tombstone_layout(bytes);
        if let Ok(l) = object {
            let h = header.clone().expect("layout implies header");
            assert_eq!(l.total_len, h.total_len);
            assert_eq!(l.value_offset + l.value_len + CRC_BYTES, l.total_len);
        }
        if let Ok(l) = tombstone {
            let h = header.clone().expect("layout implies header");
            assert_eq!(l.key_offset + l.key_len + CRC_BYTES, h.total_len);
        }
        if let Ok((entry, len)) = parse_entry(bytes) {
            assert_eq!(Ok(len), header.map(|h| h.total_len));
            assert_eq!(reencode(&entry), bytes[..len].to_vec());
        }
    }

    proptest! {
        #[test]
        fn parse_entry_and_layouts_arbitrary_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            check_parsers_total(&bytes);
        }

        /// Random bodies framed with a correct checksum reach the body parsers, which
        /// random bytes alone almost never do.
        #[test]
        fn parse_entry_framed_arbitrary_body_reencodes(
            t in 0u8..=7,
            body in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let e = raw_entry(t, &body);
            check_parsers_total(&e);
        }

        /// Bodies built from small varints parse more often than random bytes.
        #[test]
        fn parse_entry_framed_varint_body_reencodes(
            t in 1u8..=6,
            fields in proptest::collection::vec(0u64..300, 0..40),
        ) {
            let e = raw_entry(t, &varints(&fields));
            check_parsers_total(&e);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn encode_object_round_trip_any(
            table_id: u64,
            version: u64,
            birth: u64,
            key in proptest::collection::vec(any::<u8>(), 0..200),
            value in proptest::collection::vec(any::<u8>(), 0..70_000),
        ) {
            let mut out = vec![0xee; 3];
            encode_object(table_id, version, birth, &key, &value, &mut out);
            let entry_bytes = &out[3..];
            prop_assert_eq!(
                entry_bytes.len(),
                object_entry_len(table_id, version, birth, key.len(), value.len())
            );
            let (entry, len) = parse_entry(entry_bytes).expect("valid object");
            prop_assert_eq!(len, entry_bytes.len());
            let expected = ObjectEntry { table_id, version, birth, key: &key, value: &value };
            prop_assert_eq!(entry, Entry::Object(expected));
            let prefix = &entry_bytes[..len.min(MAX_HEADER_BYTES)];
            let layout = parse_object_layout(prefix).expect("layout");
            prop_assert_eq!(&entry_bytes[layout.key_offset..][..layout.key_len], &key[..]);
            prop_assert_eq!(&entry_bytes[layout.value_offset..][..layout.value_len], &value[..]);
        }

        #[test]
        fn encode_tombstone_round_trip_any(
            table_id: u64,
            version: u64,
            segment_id: u64,
            key in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let mut out = Vec::new();
            encode_tombstone(table_id, version, segment_id, &key, &mut out);
            let (entry, len) = parse_entry(&out).expect("valid tombstone");
            prop_assert_eq!(len, out.len());
            let expected = TombstoneEntry { table_id, version, segment_id, key: &key };
            prop_assert_eq!(entry, Entry::Tombstone(expected));
        }
    }
}
