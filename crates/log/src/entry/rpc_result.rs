//! The RpcResult entry (type 7): a completion record of an exactly-once RPC (RIFL,
//! Lee et al. SOSP'15 §4.1; R§10.3). A master appends it in the same append as the
//! object version the RPC wrote, so the record is durable exactly when its effect
//! is, and recovery finds both or neither.
//!
//! ```text
//! +----------+--------+----------+-------------+-------------------------------+
//! | lease_id | seq    | table_id | key_hash    | result                        |
//! | varint   | varint | varint   | u64 LE, 8 B | rest of the body, ≤ 32 B      |
//! +----------+--------+----------+-------------+-------------------------------+
//! ```
//!
//! `table_id` and `key_hash` place the record in a tablet, so crash recovery sends
//! it to the recovery master of the object it belongs with (RIFL §4.3). The result
//! is opaque here: the master encodes what the RPC answered.
//!
//! The encoder builds the whole entry on the stack ([`RpcResultEntry`]): the write
//! path appends it beside the object without allocating.

use super::format::{EntryError, EntryHeader, EntryType, CRC_BYTES};
use crate::varint::{self, MAX_VARINT_BYTES};

/// Most bytes of an RPC's saved result.
pub const MAX_RPC_RESULT_BYTES: usize = 32;

/// Most bytes of a whole RpcResult entry: type, body_len (one byte: the body is
/// below 128 bytes), three varints, the hash, the result and the checksum.
pub const MAX_RPC_RESULT_ENTRY_BYTES: usize =
    1 + 1 + 3 * MAX_VARINT_BYTES + 8 + MAX_RPC_RESULT_BYTES + CRC_BYTES;
const _: () = assert!(3 * MAX_VARINT_BYTES + 8 + MAX_RPC_RESULT_BYTES < 128);

/// A parsed RpcResult entry, borrowing its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RpcResultEntry<'a> {
    pub lease_id: u64,
    pub seq: u64,
    pub table_id: u64,
    pub key_hash: u64,
    pub result: &'a [u8],
}

/// A complete RpcResult entry encoded on the stack, checksum included.
#[derive(Clone, Copy, Debug)]
pub struct EncodedRpcResult {
    bytes: [u8; MAX_RPC_RESULT_ENTRY_BYTES],
    len: u8,
}

impl EncodedRpcResult {
    /// The entry's bytes, ready to append.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// Encodes an RpcResult entry, or `None` if `result` is longer than
/// [`MAX_RPC_RESULT_BYTES`].
pub fn encode_rpc_result(
    lease_id: u64,
    seq: u64,
    table_id: u64,
    key_hash: u64,
    result: &[u8],
) -> Option<EncodedRpcResult> {
    if result.len() > MAX_RPC_RESULT_BYTES {
        return None;
    }
    let body_len = varint::encoded_len(lease_id)
        + varint::encoded_len(seq)
        + varint::encoded_len(table_id)
        + 8
        + result.len();
    let mut e = EncodedRpcResult {
        bytes: [0; MAX_RPC_RESULT_ENTRY_BYTES],
        len: 0,
    };
    let b = &mut e.bytes;
    b[0] = EntryType::RpcResult as u8;
    let mut at = 1;
    // body_len < 128 (asserted above), so its varint is one byte.
    at += varint::encode_u64(body_len as u64, &mut b[at..]);
    at += varint::encode_u64(lease_id, &mut b[at..]);
    at += varint::encode_u64(seq, &mut b[at..]);
    at += varint::encode_u64(table_id, &mut b[at..]);
    b[at..at + 8].copy_from_slice(&key_hash.to_le_bytes());
    at += 8;
    b[at..at + result.len()].copy_from_slice(result);
    at += result.len();
    let crc = crc32c::crc32c(&b[..at]);
    b[at..at + CRC_BYTES].copy_from_slice(&crc.to_le_bytes());
    at += CRC_BYTES;
    // At most MAX_RPC_RESULT_ENTRY_BYTES (< 256).
    e.len = at as u8;
    Some(e)
}

/// Parses the fields of an RpcResult entry whose header is `header` (checksum not
/// checked here; [`super::parse_entry`] checks it).
pub(crate) fn rpc_result_fields<'a>(
    buf: &'a [u8],
    header: &EntryHeader,
) -> Result<RpcResultEntry<'a>, EntryError> {
    let body_end = header.header_len + header.body_len;
    let body = buf
        .get(header.header_len..body_end)
        .ok_or(EntryError::Truncated {
            needed: body_end,
            available: buf.len(),
        })?;
    let mut at = 0;
    let mut next = || -> Result<u64, EntryError> {
        let (v, n) =
            varint::decode_u64(body.get(at..).unwrap_or(&[])).map_err(|_| EntryError::BadLength)?;
        at += n;
        Ok(v)
    };
    let lease_id = next()?;
    let seq = next()?;
    let table_id = next()?;
    let hash: [u8; 8] = body
        .get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .ok_or(EntryError::BadLength)?;
    at += 8;
    let result = &body[at..];
    if result.len() > MAX_RPC_RESULT_BYTES {
        return Err(EntryError::BadLength);
    }
    Ok(RpcResultEntry {
        lease_id,
        seq,
        table_id,
        key_hash: u64::from_le_bytes(hash),
        result,
    })
}

/// The lease id and sequence number of the RpcResult entry whose header is
/// `header`, from a prefix of it: all a cleaner scan needs to ask whether the
/// record is live. The two varints lie within the first
/// [`super::format::MAX_HEADER_BYTES`]
/// (type, one length byte, two varints of at most 10 bytes each), so a prefix of
/// that length always holds them, whatever the table id and the result's length.
/// (Parsing the whole body from the prefix, as before, failed for a record longer
/// than the prefix, and the cleaner then left a live record behind.)
pub(crate) fn rpc_result_scan(
    prefix: &[u8],
    header: &EntryHeader,
) -> Result<(u64, u64), EntryError> {
    let body_end = header.header_len + header.body_len;
    let body = prefix
        .get(header.header_len..body_end.min(prefix.len()))
        .ok_or(EntryError::BadLength)?;
    let (lease_id, n) = varint::decode_u64(body).map_err(|_| EntryError::BadLength)?;
    let (seq, _) =
        varint::decode_u64(body.get(n..).unwrap_or(&[])).map_err(|_| EntryError::BadLength)?;
    Ok((lease_id, seq))
}

const _: () = assert!(1 + 1 + 2 * MAX_VARINT_BYTES <= super::format::MAX_HEADER_BYTES);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_rpc_result_refuses_a_long_result() {
        assert!(encode_rpc_result(1, 1, 1, 1, &[0; MAX_RPC_RESULT_BYTES + 1]).is_none());
        let e = encode_rpc_result(u64::MAX, u64::MAX, u64::MAX, 1, &[9; MAX_RPC_RESULT_BYTES])
            .expect("the longest result fits");
        assert_eq!(e.as_bytes().len(), MAX_RPC_RESULT_ENTRY_BYTES);
    }
}
