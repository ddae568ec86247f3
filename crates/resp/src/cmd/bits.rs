//! GETBIT and SETBIT, and SETRANGE's byte splice: the pure parts of Redis 7's
//! `getbitCommand`, `setbitCommand` and `setrangeCommand` (bit 0 is the most
//! significant bit of byte 0; a write past the end pads the string with zero
//! bytes). They run inside a transaction (`queued.rs`), read then write, so
//! each is atomic as in Redis.

use ramstore_wire::MAX_VALUE_BYTES;

use super::offsets::clamp_range;
use super::{eq, Command, ParseError};
use crate::protocol::parse_i64;

/// Redis's reply to a bit offset that is not a number in range.
pub const BIT_OFFSET_ERROR: &str = "ERR bit offset is not an integer or out of range";
/// Redis's reply to a SETBIT value other than 0 or 1.
pub const BIT_VALUE_ERROR: &str = "ERR bit is not an integer or out of range";
/// Redis's reply to a SETRANGE whose result would be longer than allowed (its
/// `proto-max-bulk-len`; here ramstore's largest value).
pub const TOO_LONG_ERROR: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";

/// A bit offset: 0 up to the bits of the largest value (Redis bounds it by
/// `proto-max-bulk-len << 3` the same way).
fn bit_offset(arg: &[u8]) -> Option<u64> {
    parse_i64(arg)
        .and_then(|o| u64::try_from(o).ok())
        .filter(|&o| o < (MAX_VALUE_BYTES as u64) << 3)
}

pub(super) fn parse_getbit<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [key, offset] => Ok(Command::GetBit {
            key,
            offset: bit_offset(offset).ok_or(ParseError::Message(BIT_OFFSET_ERROR))?,
        }),
        _ => Err(ParseError::WrongArity("getbit")),
    }
}

pub(super) fn parse_setbit<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [key, offset, on] => Ok(Command::SetBit {
            key,
            offset: bit_offset(offset).ok_or(ParseError::Message(BIT_OFFSET_ERROR))?,
            on: match parse_i64(on) {
                Some(0) => false,
                Some(1) => true,
                _ => return Err(ParseError::Message(BIT_VALUE_ERROR)),
            },
        }),
        _ => Err(ParseError::WrongArity("setbit")),
    }
}

/// The bit at `offset` of `value` (0 past its end).
pub fn get_bit(value: &[u8], offset: u64) -> bool {
    let (byte, mask) = position(offset);
    value.get(byte).is_some_and(|b| b & mask != 0)
}

/// Sets the bit at `offset` of `value` to `on`, padding with zero bytes as
/// needed; returns the bit it had.
pub fn set_bit(value: &mut Vec<u8>, offset: u64, on: bool) -> bool {
    let (byte, mask) = position(offset);
    if value.len() <= byte {
        value.resize(byte + 1, 0);
    }
    let old = value[byte] & mask != 0;
    if on {
        value[byte] |= mask;
    } else {
        value[byte] &= !mask;
    }
    old
}

/// The byte and the mask of bit `offset` (bit 0: the top bit of byte 0). The
/// offset was bounded at parse time, so the byte index fits in memory.
fn position(offset: u64) -> (usize, u8) {
    ((offset >> 3) as usize, 0x80 >> (offset & 7))
}

/// BITCOUNT's range: `None` for the whole value, else (start, end, in bits).
pub type BitRange = Option<(i64, i64, bool)>;

/// BITCOUNT's arguments after the key are checked when it runs, not here: Redis
/// 7 answers 0 for a missing key whatever they are (it looks the key up
/// first), so their errors depend on the value ([`bit_count_args`]).
pub(super) fn parse_bitcount<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [key, args @ ..] => Ok(Command::BitCount { key, args }),
        [] => Err(ParseError::WrongArity("bitcount")),
    }
}

/// BITCOUNT of an existing `value` with its arguments after the key, in Redis
/// 7's order: the integers, then a range of two negative offsets with start
/// after end answers 0 (before the unit is read), then the unit.
pub fn bit_count_args(value: &[u8], args: &[&[u8]]) -> Result<i64, &'static str> {
    let range = match args {
        [] => None,
        [start, end, unit @ ..] if unit.len() <= 1 => {
            let start = parse_i64(start).ok_or(super::NOT_INTEGER)?;
            let end = parse_i64(end).ok_or(super::NOT_INTEGER)?;
            if start < 0 && end < 0 && start > end {
                return Ok(0);
            }
            let bits = match unit {
                [] => false,
                [u] if eq(u, "byte") => false,
                [u] if eq(u, "bit") => true,
                _ => return Err("ERR syntax error"),
            };
            Some((start, end, bits))
        }
        _ => return Err("ERR syntax error"),
    };
    Ok(bit_count(value, range))
}

/// BITCOUNT of `value` over `range`: Redis 7's `bitcountCommand` (offsets below
/// 0 count from the end and are clamped as GETRANGE's; in BIT units the first
/// and last bytes are masked to the range).
pub fn bit_count(value: &[u8], range: BitRange) -> i64 {
    let Some((start, end, bits)) = range else {
        return popcount(value);
    };
    let total = i64::try_from(value.len()).unwrap_or(i64::MAX) << (if bits { 3 } else { 0 });
    let Some((start, end)) = clamp_range(total, start, end) else {
        return 0;
    };
    if !bits {
        // In range: 0 <= start <= end < len.
        return popcount(&value[start as usize..=end as usize]);
    }
    let (first, last) = ((start >> 3) as usize, (end >> 3) as usize);
    let mut count = popcount(&value[first..=last]);
    // Bits of the edge bytes outside the range (bit 0 is the top bit).
    let before = !(0xffu8 >> (start & 7));
    // A shift by 8 (the range ends on a byte's last bit) leaves no bit after.
    let after = 0xffu8.checked_shr((end & 7) as u32 + 1).unwrap_or(0);
    count -= i64::from((value[first] & before).count_ones());
    count -= i64::from((value[last] & after).count_ones());
    count
}

fn popcount(bytes: &[u8]) -> i64 {
    bytes.iter().map(|b| i64::from(b.count_ones())).sum()
}

/// SETRANGE's new value: `old` (absent: empty) with `value` written at
/// `offset`, zero-padded. `Ok(None)` when nothing is written (an empty
/// `value`: Redis answers the current length and creates nothing); `Err` with
/// Redis's error when the result would exceed the largest value.
pub fn set_range(
    old: Option<&[u8]>,
    offset: u64,
    value: &[u8],
) -> Result<Option<Vec<u8>>, &'static str> {
    if value.is_empty() {
        return Ok(None);
    }
    let end = usize::try_from(offset)
        .ok()
        .and_then(|o| o.checked_add(value.len()))
        .filter(|&end| end <= MAX_VALUE_BYTES)
        .ok_or(TOO_LONG_ERROR)?;
    let mut v = old.map(<[u8]>::to_vec).unwrap_or_default();
    if v.len() < end {
        v.resize(end, 0);
    }
    v[end - value.len()..end].copy_from_slice(value);
    Ok(Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_count_from_the_top_bit_of_the_first_byte() {
        // 0x61 = 'a' = 0b0110_0001 (Redis's own GETBIT example uses "a").
        let a = b"a";
        let bits: Vec<bool> = (0..8).map(|i| get_bit(a, i)).collect();
        assert_eq!(bits, [false, true, true, false, false, false, false, true]);
        assert!(!get_bit(a, 100), "past the end: 0");
        let mut v = Vec::new();
        assert!(!set_bit(&mut v, 7, true));
        assert_eq!(v, [0x01]);
        assert!(!set_bit(&mut v, 17, false), "a clear past the end pads too");
        assert_eq!(v, [0x01, 0, 0]);
        assert!(set_bit(&mut v, 7, false));
        assert_eq!(v, [0, 0, 0]);
    }

    /// Redis's documented examples ("foobar": 26 bits; bytes 0..0: 4; 1..1:
    /// 6; bits 5..30: 17) and the clamps.
    #[test]
    fn bit_count_matches_redis_bitcount() {
        let v = b"foobar";
        assert_eq!(bit_count(v, None), 26);
        assert_eq!(bit_count(v, Some((0, 0, false))), 4);
        assert_eq!(bit_count(v, Some((1, 1, false))), 6);
        assert_eq!(bit_count(v, Some((1, 1, true))), 1);
        assert_eq!(bit_count(v, Some((5, 30, true))), 17);
        assert_eq!(bit_count(v, Some((-1, -2, false))), 0);
        assert_eq!(bit_count(v, Some((0, -1, true))), 26);
        assert_eq!(bit_count(v, Some((-100, 100, false))), 26);
        assert_eq!(bit_count(b"", None), 0);
        assert_eq!(bit_count(b"", Some((0, -1, false))), 0);
        let args = |a: &[&'static str]| a.iter().map(|s| s.as_bytes()).collect::<Vec<_>>();
        assert_eq!(bit_count_args(v, &args(&[])), Ok(26));
        assert_eq!(bit_count_args(v, &args(&["5", "30", "BIT"])), Ok(17));
        assert_eq!(
            bit_count_args(v, &args(&["-1", "-2", "NOPE"])),
            Ok(0),
            "Redis's order"
        );
        assert_eq!(
            bit_count_args(v, &args(&["0", "1", "NOPE"])),
            Err("ERR syntax error")
        );
        assert_eq!(bit_count_args(v, &args(&["0"])), Err("ERR syntax error"));
        assert_eq!(
            bit_count_args(v, &args(&["a", "1"])),
            Err(super::super::NOT_INTEGER)
        );
    }

    #[test]
    fn set_range_pads_and_bounds_like_redis() {
        assert_eq!(
            set_range(Some(b"Hello World"), 6, b"Redis"),
            Ok(Some(b"Hello Redis".to_vec()))
        );
        assert_eq!(
            set_range(None, 6, b"Redis"),
            Ok(Some(b"\0\0\0\0\0\0Redis".to_vec()))
        );
        assert_eq!(
            set_range(Some(b"abc"), 1, b""),
            Ok(None),
            "empty: nothing written"
        );
        assert_eq!(
            set_range(Some(b"abcdef"), 1, b"X"),
            Ok(Some(b"aXcdef".to_vec()))
        );
        assert_eq!(
            set_range(None, MAX_VALUE_BYTES as u64, b"x"),
            Err(TOO_LONG_ERROR)
        );
        assert_eq!(set_range(None, u64::MAX, b"x"), Err(TOO_LONG_ERROR));
        assert_eq!(
            set_range(None, MAX_VALUE_BYTES as u64 - 1, b"x").map(|v| v.map(|v| v.len())),
            Ok(Some(MAX_VALUE_BYTES))
        );
    }

    #[test]
    fn bit_offsets_and_values_are_checked() {
        assert_eq!(bit_offset(b"0"), Some(0));
        assert_eq!(bit_offset(b"-1"), None);
        assert_eq!(bit_offset(b"x"), None);
        assert_eq!(
            bit_offset(format!("{}", (MAX_VALUE_BYTES as u64) << 3).as_bytes()),
            None
        );
        assert!(matches!(
            parse_setbit(&[b"k", b"7", b"2"]),
            Err(ParseError::Message(BIT_VALUE_ERROR))
        ));
        assert!(matches!(
            parse_getbit(&[b"k", b"-1"]),
            Err(ParseError::Message(BIT_OFFSET_ERROR))
        ));
    }
}
