//! Encoding entries (module doc of `entry`): the append path's header-only
//! encoders, which let key and value be copied straight into the log, and whole-entry
//! encoders for metadata, recovery and tests.

use super::format::{EntryType, CRC_BYTES, MAX_HEADER_BYTES, OBJECT_WITH_EXPIRY_BYTE};
use super::parse::TabletStat;
use crate::varint::{self, MAX_VARINT_BYTES};
use crate::{MAX_KEY_BYTES, MAX_VALUE_BYTES, SEGMENT_BYTES};

/// The bytes of an object or tombstone entry before its key, built on the stack so
/// the append path can copy key and value straight from the caller into the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncodedHeader {
    bytes: [u8; MAX_HEADER_BYTES],
    len: u8,
}

impl EncodedHeader {
    fn new(entry_type: EntryType, body_len: usize) -> Self {
        Self::with_type_byte(entry_type as u8, body_len)
    }

    fn with_type_byte(type_byte: u8, body_len: usize) -> Self {
        let mut h = EncodedHeader {
            bytes: [0; MAX_HEADER_BYTES],
            len: 1,
        };
        h.bytes[0] = type_byte;
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
    object_header_with_expiry(table_id, version, birth, None, key_len, value_len)
}

/// [`object_header`] of an object that expires at `expires_at` (wall-clock ms)
/// when given: then the type byte is [`OBJECT_WITH_EXPIRY_BYTE`] and the expiry
/// follows `birth`. Without an expiry the bytes are exactly [`object_header`]'s,
/// so objects that never expire pay nothing for the feature.
///
/// # Panics
/// As [`object_header`].
pub fn object_header_with_expiry(
    table_id: u64,
    version: u64,
    birth: u64,
    expires_at: Option<u64>,
    key_len: usize,
    value_len: usize,
) -> EncodedHeader {
    check_object_limits(key_len, value_len);
    let body_len = fields_len(table_id, version, birth, key_len)
        + expires_at.map_or(0, varint::encoded_len)
        + key_len
        + value_len;
    let mut h = match expires_at {
        None => EncodedHeader::new(EntryType::Object, body_len),
        Some(_) => EncodedHeader::with_type_byte(OBJECT_WITH_EXPIRY_BYTE, body_len),
    };
    h.push_varint(table_id);
    h.push_varint(version);
    h.push_varint(birth);
    if let Some(at) = expires_at {
        h.push_varint(at);
    }
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

/// [`object_entry_len`] of an object stored with expiry `expires_at`.
pub fn object_entry_len_with_expiry(
    table_id: u64,
    version: u64,
    birth: u64,
    expires_at: Option<u64>,
    key_len: usize,
    value_len: usize,
) -> usize {
    // The expiry lengthens the body, which may lengthen the body-length varint
    // of the frame too: frame the whole body, never add to a framed length
    // (regression: a body of 126 bytes plus a 9-byte expiry was predicted one
    // byte short).
    framed_len(
        fields_len(table_id, version, birth, key_len)
            .saturating_add(expires_at.map_or(0, varint::encoded_len))
            .saturating_add(key_len)
            .saturating_add(value_len),
    )
}

/// Total encoded length of a tombstone entry (header + key + crc).
pub fn tombstone_entry_len(table_id: u64, version: u64, segment_id: u64, key_len: usize) -> usize {
    framed_len(fields_len(table_id, version, segment_id, key_len).saturating_add(key_len))
}

pub(crate) fn push_varint(out: &mut Vec<u8>, v: u64) {
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
    encode_object_with_expiry(table_id, version, birth, None, key, value, out)
}

/// [`encode_object`] of an object that expires at `expires_at` (wall-clock ms)
/// when given ([`object_header_with_expiry`]).
///
/// # Panics
/// If the key or value exceeds its limit.
pub fn encode_object_with_expiry(
    table_id: u64,
    version: u64,
    birth: u64,
    expires_at: Option<u64>,
    key: &[u8],
    value: &[u8],
    out: &mut Vec<u8>,
) {
    let header =
        object_header_with_expiry(table_id, version, birth, expires_at, key.len(), value.len());
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
