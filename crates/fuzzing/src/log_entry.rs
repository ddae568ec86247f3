//! Log entries: every parser, walked over the input as recovery walks a segment.
//!
//! The parsers must never panic, must agree with each other, and any entry that
//! parses must re-encode to exactly the bytes it was parsed from (varints are
//! canonical, so the encoding of an entry is unique).

use ramstore_log::entry::{
    encode_log_digest, encode_object_with_expiry, encode_safe_version, encode_segment_header,
    encode_tablet_stats, encode_tombstone, object_entry_len_with_expiry, parse_entry, parse_header,
    parse_object_layout, parse_tombstone_layout, tombstone_entry_len, Entry, CRC_BYTES,
    MAX_HEADER_BYTES,
};

/// Walks `data` as a log, then walks a copy whose entry checksums were recomputed.
pub fn check(data: &[u8]) {
    walk(data);
    walk(&with_fixed_crcs(data));
}

fn walk(data: &[u8]) {
    let mut rest = data;
    while let Some(len) = check_one(rest) {
        rest = &rest[len..];
    }
}

/// `data` with the checksum of each entry whose frame fits recomputed, walking the
/// frames by their lengths (a frame that does not fit ends the walk).
fn with_fixed_crcs(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    let mut at = 0;
    while at < out.len() {
        let Ok(header) = parse_header(&out[at..]) else {
            break;
        };
        let end = at + header.total_len;
        if header.total_len < CRC_BYTES || end > out.len() {
            break;
        }
        let crc = crc32c::crc32c(&out[at..end - CRC_BYTES]);
        out[end - CRC_BYTES..end].copy_from_slice(&crc.to_le_bytes());
        at = end;
    }
    out
}

fn check_one(data: &[u8]) -> Option<usize> {
    let header = parse_header(data);
    let object = parse_object_layout(data);
    let tombstone = parse_tombstone_layout(data);

    // A layout implies a header of the same size, and the layout must not depend on
    // the bytes after the header fields.
    if let Ok(l) = object {
        let h = header.as_ref().expect("object layout without header");
        assert_eq!(l.total_len, h.total_len);
        assert_eq!(l.value_offset + l.value_len + CRC_BYTES, l.total_len);
        assert_eq!(l.key_offset + l.key_len, l.value_offset);
        assert!(l.key_offset <= MAX_HEADER_BYTES);
        assert_eq!(parse_object_layout(&data[..l.key_offset]), Ok(l));
    }
    if let Ok(l) = tombstone {
        let h = header.as_ref().expect("tombstone layout without header");
        assert_eq!(l.total_len, h.total_len);
        assert_eq!(l.key_offset + l.key_len + CRC_BYTES, l.total_len);
        assert!(l.key_offset <= MAX_HEADER_BYTES);
        assert_eq!(parse_tombstone_layout(&data[..l.key_offset]), Ok(l));
    }

    let (entry, len) = parse_entry(data).ok()?;
    assert_eq!(Some(len), header.as_ref().ok().map(|h| h.total_len));
    let mut out = Vec::new();
    match entry {
        Entry::Object(o) => {
            encode_object_with_expiry(
                o.table_id,
                o.version,
                o.birth,
                o.expires_at,
                o.key,
                o.value,
                &mut out,
            );
            assert_eq!(
                out.len(),
                object_entry_len_with_expiry(
                    o.table_id,
                    o.version,
                    o.birth,
                    o.expires_at,
                    o.key.len(),
                    o.value.len()
                )
            );
            let l = object.expect("object entry without layout");
            assert_eq!(
                (l.table_id, l.version, l.birth, l.expires_at),
                (o.table_id, o.version, o.birth, o.expires_at)
            );
        }
        Entry::Tombstone(t) => {
            encode_tombstone(t.table_id, t.version, t.segment_id, t.key, &mut out);
            assert_eq!(
                out.len(),
                tombstone_entry_len(t.table_id, t.version, t.segment_id, t.key.len())
            );
            tombstone.expect("tombstone entry without layout");
        }
        Entry::SegmentHeader(s) => encode_segment_header(s.master_id, s.segment_id, &mut out),
        Entry::LogDigest(d) => {
            let ids: Vec<u64> = d.segment_ids().collect();
            assert_eq!(ids.len(), d.len());
            encode_log_digest(&ids, &mut out);
        }
        Entry::SafeVersion(v) => encode_safe_version(v.version, &mut out),
        Entry::TabletStats(t) => {
            let stats: Vec<_> = t.stats().collect();
            assert_eq!(stats.len(), t.len());
            encode_tablet_stats(&stats, &mut out);
        }
        Entry::RpcResult(r) => {
            let e = ramstore_log::entry::encode_rpc_result(
                r.lease_id, r.seq, r.table_id, r.key_hash, r.result,
            )
            .expect("a parsed result fits");
            out.extend_from_slice(e.as_bytes());
        }
        Entry::TxRecord(r) => {
            use ramstore_log::entry::{
                encode_tx_decided, encode_tx_held_commit, encode_tx_prepared, TxRecordBody,
            };
            let id = r.id();
            match r.body {
                TxRecordBody::Prepared {
                    kind,
                    expected_version,
                    key,
                    value,
                    ..
                } => {
                    let list: Vec<_> = r.participants().collect();
                    encode_tx_prepared(&id, kind, expected_version, key, value, &list, &mut out);
                }
                TxRecordBody::Decided { commit, segment_id } => {
                    encode_tx_decided(&id, commit, segment_id, &mut out);
                }
                TxRecordBody::HeldCommit { .. } => {
                    let list: Vec<_> = r.participants().collect();
                    encode_tx_held_commit(&id, &list, &mut out);
                }
            }
        }
    }
    assert_eq!(out, &data[..len]);
    Some(len)
}
