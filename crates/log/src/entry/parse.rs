//! Parsing entries (module doc of `entry`): never panics and never allocates,
//! whatever the input; an entry parses only if every byte of it is as written.

use super::format::*;
use crate::varint::{self, VarintError};
use crate::{MAX_KEY_BYTES, MAX_VALUE_BYTES, SEGMENT_BYTES};

/// A parsed object entry, borrowing key and value from the parsed buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectEntry<'a> {
    pub table_id: u64,
    pub version: u64,
    pub birth: u64,
    /// Absolute wall-clock expiry in ms since the Unix epoch, if any.
    pub expires_at: Option<u64>,
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
    RpcResult(super::rpc_result::RpcResultEntry<'a>),
    TxRecord(super::tx_record::TxRecordEntry<'a>),
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
            Entry::RpcResult(_) => EntryType::RpcResult,
            Entry::TxRecord(_) => EntryType::TxRecord,
        }
    }
}

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
    // Only an entry of type Object gets here, so the first byte is present and
    // is one of the two object bytes.
    let expires_at = if prefix.first() == Some(&OBJECT_WITH_EXPIRY_BYTE) {
        Some(r.varint()?)
    } else {
        None
    };
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
        expires_at,
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
        EntryType::RpcResult => match super::rpc_result::rpc_result_scan(prefix, &header) {
            Ok((lease_id, seq)) => ScannedLayout::RpcResult { lease_id, seq },
            Err(_) => ScannedLayout::Unparsable,
        },
        EntryType::TxRecord => match super::tx_record::tx_record_scan(prefix, &header) {
            Ok(r) => ScannedLayout::TxRecord(r),
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
                expires_at: l.expires_at,
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
        EntryType::RpcResult => {
            Entry::RpcResult(super::rpc_result::rpc_result_fields(buf, &header)?)
        }
        EntryType::TxRecord => Entry::TxRecord(super::tx_record::tx_record_fields(buf, &header)?),
    };
    Ok((entry, header.total_len))
}

/// `buf[offset..offset + len]`, which the layout parsers have already bounded by the
/// entry; the error only keeps parsing free of panics.
fn slice(buf: &[u8], offset: usize, len: usize) -> Result<&[u8], EntryError> {
    buf.get(offset..offset.saturating_add(len))
        .ok_or(EntryError::BadLength)
}

/// The header of the entry at the start of `buf`, once its type is `expected`
/// and its checksum matches (both record parsers check the same way).
fn checked_header(buf: &[u8], expected: EntryType) -> Result<EntryHeader, EntryError> {
    let header = parse_header(buf)?;
    if header.entry_type != expected {
        return Err(EntryError::UnexpectedType {
            expected,
            found: header.entry_type,
        });
    }
    let crc_at = header.header_len + header.body_len;
    let stored = buf
        .get(crc_at..crc_at + CRC_BYTES)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map(u32::from_le_bytes)
        .ok_or(EntryError::Truncated {
            needed: header.total_len,
            available: buf.len(),
        })?;
    let computed = crc32c::crc32c(&buf[..crc_at]);
    if stored != computed {
        return Err(EntryError::BadChecksum { stored, computed });
    }
    Ok(header)
}

/// The fields of the RpcResult entry at the start of `buf` (a log reference's
/// bytes), checking its type and checksum.
pub fn parse_rpc_result(buf: &[u8]) -> Result<super::rpc_result::RpcResultEntry<'_>, EntryError> {
    let header = checked_header(buf, EntryType::RpcResult)?;
    super::rpc_result::rpc_result_fields(buf, &header)
}

/// The fields of the TxRecord entry at the start of `buf` (a log reference's
/// bytes), checking its type and checksum.
pub fn parse_tx_record(buf: &[u8]) -> Result<super::tx_record::TxRecordEntry<'_>, EntryError> {
    let header = checked_header(buf, EntryType::TxRecord)?;
    super::tx_record::tx_record_fields(buf, &header)
}
