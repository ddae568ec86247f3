//! LEB128 unsigned varints for `u64`, the integer encoding of every log entry field.
//!
//! A value is written seven bits at a time, least significant group first; every byte
//! but the last has its top bit set. Small numbers (table ids, key lengths, versions of
//! rarely written objects) therefore take one byte, which is what keeps per-object
//! overhead in the log small (see `entry`).
//!
//! Decoding is strict: besides running off the end of the buffer (`Truncated`), it
//! rejects encodings longer than ten bytes, a tenth byte that would overflow `u64`, and
//! non-canonical encodings that end in a redundant zero byte (all `Overlong`). Rejecting
//! non-canonical forms gives every value exactly one encoding, so a log entry that parses
//! re-encodes to the same bytes, and the length of a parsed header is bounded by the
//! lengths the encoder can produce.

/// Longest encoding of a `u64`: ceil(64 / 7) bytes.
pub const MAX_VARINT_BYTES: usize = 10;

/// Why a varint could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VarintError {
    /// The buffer ended before the last byte of the varint.
    #[error("varint truncated")]
    Truncated,
    /// The encoding is longer than ten bytes, overflows `u64`, or is not the shortest
    /// encoding of its value.
    #[error("varint overlong or overflowing")]
    Overlong,
}

/// Number of bytes [`encode_u64`] writes for `v` (1 to [`MAX_VARINT_BYTES`]).
#[inline]
pub const fn encoded_len(v: u64) -> usize {
    // `| 1` makes zero count as one significant bit, so it still takes one byte.
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Writes `v` at the start of `out` and returns the number of bytes written.
///
/// # Panics
/// If `out` is shorter than [`encoded_len(v)`](encoded_len); a buffer of
/// [`MAX_VARINT_BYTES`] always suffices.
#[inline]
pub fn encode_u64(mut v: u64, out: &mut [u8]) -> usize {
    let mut i = 0;
    while v >= 0x80 {
        // Truncation to the low byte is intended: the top bit is then set as the
        // continuation flag.
        out[i] = (v as u8) | 0x80;
        v >>= 7;
        i += 1;
    }
    out[i] = v as u8;
    i + 1
}

/// Reads a varint from the start of `buf`, returning its value and encoded length.
///
/// Never panics. Trailing bytes after the varint are ignored.
#[inline]
pub fn decode_u64(buf: &[u8]) -> Result<(u64, usize), VarintError> {
    // One-byte values are by far the most common, so they skip the loop.
    match buf.first() {
        None => return Err(VarintError::Truncated),
        Some(&b) if b < 0x80 => return Ok((u64::from(b), 1)),
        Some(_) => {}
    }
    let mut v: u64 = 0;
    for (i, &b) in buf.iter().enumerate().take(MAX_VARINT_BYTES) {
        // The tenth byte carries only bit 63, so anything above 1 (including a
        // continuation flag) would overflow or make the encoding longer than ten bytes.
        if i == MAX_VARINT_BYTES - 1 && b > 1 {
            return Err(VarintError::Overlong);
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            // A final zero byte after the first adds no bits: a shorter encoding
            // of the same value exists.
            if b == 0 && i > 0 {
                return Err(VarintError::Overlong);
            }
            return Ok((v, i + 1));
        }
    }
    // The loop only falls through when the buffer ran out, because the tenth byte
    // either ends the varint or is rejected above.
    Err(VarintError::Truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EDGE_VALUES: &[u64] = &[
        0,
        1,
        0x7f,
        0x80,
        0xff,
        0x3fff,
        0x4000,
        0x1f_ffff,
        0x20_0000,
        u32::MAX as u64,
        1 << 56,
        (1 << 63) - 1,
        1 << 63,
        u64::MAX - 1,
        u64::MAX,
    ];

    fn encode(v: u64) -> Vec<u8> {
        let mut buf = [0u8; MAX_VARINT_BYTES];
        let n = encode_u64(v, &mut buf);
        buf[..n].to_vec()
    }

    #[test]
    fn encode_u64_round_trip_edge_values() {
        for &v in EDGE_VALUES {
            let bytes = encode(v);
            assert_eq!(bytes.len(), encoded_len(v), "len of {v:#x}");
            assert_eq!(decode_u64(&bytes), Ok((v, bytes.len())), "{v:#x}");
            // Trailing bytes must not change the result.
            let mut padded = bytes.clone();
            padded.extend_from_slice(&[0xff, 0x00, 0x80]);
            assert_eq!(decode_u64(&padded), Ok((v, bytes.len())), "{v:#x}");
        }
    }

    #[test]
    fn encoded_len_boundaries() {
        assert_eq!(encoded_len(0), 1);
        for k in 1..=9u32 {
            let boundary = 1u64 << (7 * k);
            assert_eq!(encoded_len(boundary - 1), k as usize);
            assert_eq!(encoded_len(boundary), k as usize + 1);
        }
        assert_eq!(encoded_len(u64::MAX), MAX_VARINT_BYTES);
    }

    #[test]
    fn encode_u64_known_bytes() {
        assert_eq!(encode(0), [0x00]);
        assert_eq!(encode(1), [0x01]);
        assert_eq!(encode(300), [0xac, 0x02]);
        assert_eq!(
            encode(u64::MAX),
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
    }

    #[test]
    fn decode_u64_every_truncation_errors() {
        for &v in EDGE_VALUES {
            let bytes = encode(v);
            for cut in 0..bytes.len() {
                assert_eq!(
                    decode_u64(&bytes[..cut]),
                    Err(VarintError::Truncated),
                    "{v:#x} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn decode_u64_overlong_rejected() {
        // Eleven bytes: ten continuation bytes never end within the limit.
        assert_eq!(decode_u64(&[0x80; 11]), Err(VarintError::Overlong));
        assert_eq!(decode_u64(&[0xff; 11]), Err(VarintError::Overlong));
        // A tenth byte of 2 would set bit 64.
        let mut overflow = [0xffu8; 10];
        overflow[9] = 0x02;
        assert_eq!(decode_u64(&overflow), Err(VarintError::Overlong));
        // A tenth byte with the continuation flag is too long even if the value fits.
        let mut long = [0x80u8; 11];
        long[9] = 0x81;
        long[10] = 0x00;
        assert_eq!(decode_u64(&long), Err(VarintError::Overlong));
    }

    #[test]
    fn decode_u64_non_canonical_rejected() {
        assert_eq!(decode_u64(&[0x80, 0x00]), Err(VarintError::Overlong));
        assert_eq!(decode_u64(&[0x81, 0x80, 0x00]), Err(VarintError::Overlong));
        let mut zero10 = [0x80u8; 10];
        zero10[9] = 0x00;
        assert_eq!(decode_u64(&zero10), Err(VarintError::Overlong));
    }

    #[test]
    fn decode_u64_empty_is_truncated() {
        assert_eq!(decode_u64(&[]), Err(VarintError::Truncated));
        assert_eq!(decode_u64(&[0x80; 9]), Err(VarintError::Truncated));
    }

    proptest::proptest! {
        #[test]
        fn encode_u64_round_trip_any(v: u64) {
            let bytes = encode(v);
            proptest::prop_assert_eq!(decode_u64(&bytes), Ok((v, encoded_len(v))));
        }

        #[test]
        fn decode_u64_any_bytes_never_panics(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..16),
        ) {
            // Whatever decodes must be canonical: re-encoding gives the same bytes.
            if let Ok((v, n)) = decode_u64(&bytes) {
                proptest::prop_assert_eq!(encode(v), bytes[..n].to_vec());
            }
        }
    }
}
