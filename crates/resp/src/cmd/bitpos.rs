//! BITPOS: the first bit set to 1 (or 0) in a string, over an optional range in
//! bytes or bits — the pure part of Redis 7's `bitposCommand`. A missing key is
//! an endless run of zeros: 0 for a clear bit, -1 for a set one, whatever the
//! range arguments (Redis looks the key up before it reads them).

use super::{eq, Command, ParseError, NOT_INTEGER};
use crate::protocol::parse_i64;

/// Redis's reply to a bit argument other than 0 or 1.
pub const BIT_ARGUMENT_ERROR: &str = "ERR The bit argument must be 1 or 0.";

/// The bit is read at parse time (Redis checks it before the key); the range
/// arguments when the command runs ([`bit_pos_args`]).
pub(super) fn parse_bitpos<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    let [key, bit, args @ ..] = rest else {
        return Err(ParseError::WrongArity("bitpos"));
    };
    let bit = match parse_i64(bit) {
        Some(0) => false,
        Some(1) => true,
        Some(_) => return Err(ParseError::Message(BIT_ARGUMENT_ERROR)),
        None => return Err(ParseError::Message(NOT_INTEGER)),
    };
    Ok(Command::BitPos { key, bit, args })
}

/// BITPOS's answer for a missing key.
pub fn bit_pos_missing(bit: bool) -> i64 {
    if bit {
        -1
    } else {
        0
    }
}

/// BITPOS of an existing `value` with the arguments after the bit, read in
/// Redis 7's order: start, then the unit, then end.
pub fn bit_pos_args(value: &[u8], bit: bool, args: &[&[u8]]) -> Result<i64, &'static str> {
    let len = i64::try_from(value.len()).unwrap_or(i64::MAX);
    let (start, end, in_bits) = match args {
        [] => (0, None, false),
        [start, rest @ ..] if rest.len() <= 2 => {
            let start = parse_i64(start).ok_or(NOT_INTEGER)?;
            let in_bits = match rest {
                [_, unit] if eq(unit, "bit") => true,
                [_, unit] if eq(unit, "byte") => false,
                [_, _] => return Err("ERR syntax error"),
                _ => false,
            };
            let end = match rest {
                [end, ..] => Some(parse_i64(end).ok_or(NOT_INTEGER)?),
                [] => None,
            };
            (start, end, in_bits)
        }
        _ => return Err("ERR syntax error"),
    };
    // An empty range holds no bit at all: -1 for either kind.
    let Some((first_bit, last_bit)) = bit_range(value.len(), start, end, in_bits) else {
        return Ok(-1);
    };
    let found = (first_bit..=last_bit).find(|&i| {
        let byte = value[(i >> 3) as usize];
        (byte & (0x80 >> (i & 7)) != 0) == bit
    });
    Ok(found.unwrap_or(if !bit && end.is_none() {
        // Looking for a 0 with no end given, past a run of 1s: the string is
        // padded with zeros on the right, so the next bit is the answer.
        len.saturating_mul(8)
    } else {
        -1
    }))
}

/// The first and last bit of the range from `start` to `end` (bytes, or bits
/// when `in_bits`; below 0 they count from the end, then both are clamped to a
/// value of `len` bytes); `None` when it is empty.
fn bit_range(len: usize, start: i64, end: Option<i64>, in_bits: bool) -> Option<(i64, i64)> {
    let unit_bits: i64 = if in_bits { 1 } else { 8 };
    let total = i64::try_from(len).unwrap_or(i64::MAX / 8) * 8 / unit_bits;
    let from_end = |i: i64| if i < 0 { (total + i).max(0) } else { i };
    let start = from_end(start);
    let end = from_end(end.unwrap_or(total - 1)).min(total - 1);
    (start <= end).then_some((start * unit_bits, end * unit_bits + unit_bits - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(value: &[u8], bit: bool, args: &[&str]) -> Result<i64, &'static str> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        bit_pos_args(value, bit, &args)
    }

    #[test]
    fn bit_pos_args_matches_redis_examples() {
        // The examples of Redis's BITPOS page.
        let v = [0xff, 0xf0, 0x00];
        assert_eq!(pos(&v, false, &[]), Ok(12));
        let v = [0x00, 0xff, 0xf0];
        assert_eq!(pos(&v, true, &["0"]), Ok(8));
        assert_eq!(pos(&v, true, &["2"]), Ok(16));
        assert_eq!(pos(&v, true, &["2", "-1", "BYTE"]), Ok(16));
        assert_eq!(pos(&v, true, &["7", "15", "BIT"]), Ok(8));
        assert_eq!(pos(&v, true, &["7", "-3", "BIT"]), Ok(8));
        assert_eq!(pos(&[0; 3], true, &[]), Ok(-1));
    }

    #[test]
    fn bit_pos_args_clear_bit_past_ones() {
        let ones = [0xff, 0xff];
        // No end: the zero padding on the right.
        assert_eq!(pos(&ones, false, &[]), Ok(16));
        assert_eq!(pos(&ones, false, &["1"]), Ok(16));
        // An end given: none in the range.
        assert_eq!(pos(&ones, false, &["0", "-1"]), Ok(-1));
        assert_eq!(pos(&[], false, &[]), Ok(-1));
    }

    #[test]
    fn bit_pos_args_checks_start_unit_end_in_order() {
        let v = [1u8];
        assert_eq!(pos(&v, true, &["x", "y", "nope"]), Err(NOT_INTEGER));
        assert_eq!(pos(&v, true, &["0", "y", "nope"]), Err("ERR syntax error"));
        assert_eq!(pos(&v, true, &["0", "y", "bit"]), Err(NOT_INTEGER));
        assert_eq!(
            pos(&v, true, &["0", "1", "bit", "x"]),
            Err("ERR syntax error")
        );
        assert_eq!(bit_pos_missing(true), -1);
        assert_eq!(bit_pos_missing(false), 0);
    }
}
