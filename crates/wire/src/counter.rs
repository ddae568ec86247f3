//! The stored form of counters: decimal ASCII text, exactly as Redis stores the
//! values of INCR, INCRBY, DECR and INCRBYFLOAT.
//!
//! Native increments (the `Increment` operation, carried out by the master under
//! the key's bucket lock) and the Redis commands (a read and a conditional write on
//! the version) read and write this one representation, so a counter made by either
//! is a counter for the other: `ramstore incr T k` then `GET k` answers `"1"`, and
//! `SET k 41` then a native increment by 1 answers 42. Only the delta and the
//! result travel as 8 binary bytes on the wire ([`crate::NumberKind`]); what is
//! stored is always text.
//!
//! Integers follow Redis's `string2ll`: an optional `-`, then digits, with no
//! leading zero (but `0` itself), no `+`, no spaces, no `-0`, within i64. Floats
//! follow Redis's INCRBYFLOAT: a finite decimal in Rust's float syntax (`1.5`,
//! `-2e3`, `+1`), no spaces, no `inf` or `nan`; the result is written as the
//! shortest decimal that reads back as the same f64, without an exponent (`10.5`,
//! `3`, never `-0`). An integer counter is also a valid float, so INCRBYFLOAT of
//! `"5"` by 0.5 gives `"5.5"` (and INCR of `"5.5"` is refused, as in Redis).
//!
//! Formatting writes into a fixed buffer ([`CounterText`]): an increment allocates
//! nothing for its new value.

use std::fmt::Write as _;

/// The longest text of an i64: `-9223372036854775808`.
pub const MAX_I64_TEXT: usize = 20;

/// Room for the longest f64 written without an exponent: the smallest subnormal
/// needs `0.` and 323 zeros before its digit, the largest finite value 309 digits.
const MAX_F64_TEXT: usize = 352;

/// An i64 in the stored form, or `None` if `bytes` is not one (Redis's rules: see
/// the module documentation).
pub fn parse_i64(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // "01" is not canonical, and Redis refuses it as an INCR target.
    if digits.len() > 1 && digits[0] == b'0' {
        return None;
    }
    let mut v: i64 = 0;
    for &d in digits {
        let d = i64::from(d - b'0');
        // Accumulating negatively reaches i64::MIN, whose magnitude is no i64.
        v = if negative {
            v.checked_mul(10)?.checked_sub(d)?
        } else {
            v.checked_mul(10)?.checked_add(d)?
        };
    }
    if negative && v == 0 {
        return None; // "-0"
    }
    Some(v)
}

/// A finite f64 in the stored form, or `None` (no spaces, no `inf` or `nan`).
pub fn parse_f64(bytes: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(bytes).ok()?;
    if s.is_empty() || s.trim() != s {
        return None;
    }
    s.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// A counter's new value as text, in a fixed buffer (no allocation).
#[derive(Clone)]
pub struct CounterText {
    buf: [u8; MAX_F64_TEXT],
    len: usize,
}

impl CounterText {
    /// `n` in decimal: `42`, `-7`.
    pub fn from_i64(n: i64) -> Self {
        let mut t = Self::empty();
        // Cannot fail: at most MAX_I64_TEXT bytes go into a larger buffer.
        let _ = write!(t, "{n}");
        t
    }

    /// A finite `f`, as INCRBYFLOAT stores it: the shortest decimal that reads back
    /// as `f`, with no exponent and no `-0` (Redis: `10.5`, `3`).
    pub fn from_f64(f: f64) -> Self {
        let mut t = Self::empty();
        // -0.0 == 0.0: written as "0", as Redis does.
        let f = if f == 0.0 { 0.0 } else { f };
        // Cannot fail for a finite f: Rust writes floats without an exponent, and
        // the longest such text fits the buffer. A non-finite f (never passed:
        // callers refuse those) would be cut short, not overflow.
        let _ = write!(t, "{f}");
        t
    }

    fn empty() -> Self {
        Self {
            buf: [0; MAX_F64_TEXT],
            len: 0,
        }
    }

    /// The text's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl std::fmt::Write for CounterText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        if end > self.buf.len() {
            return Err(std::fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

impl std::fmt::Debug for CounterText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CounterText({:?})",
            String::from_utf8_lossy(self.as_bytes())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_i64_accepts_canonical_decimal_within_i64() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"42"), Some(42));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
    }

    /// Redis's `string2ll` refuses all of these, so INCR answers "not an integer".
    #[test]
    fn parse_i64_refuses_what_redis_refuses() {
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b" 1",
            b"1 ",
            b"\t1",
            b"01",
            b"00",
            b"-0",
            b"-01",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"99999999999999999999",
            b"1.5",
            b"1e3",
            b"0x10",
            b"abc",
            // The old 8-byte binary counter form (1 as little-endian i64).
            &1i64.to_le_bytes(),
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn parse_f64_accepts_decimals_and_refuses_non_finite_and_spaces() {
        assert_eq!(parse_f64(b"1.5"), Some(1.5));
        assert_eq!(parse_f64(b"-2e3"), Some(-2000.0));
        assert_eq!(parse_f64(b"+1"), Some(1.0));
        assert_eq!(parse_f64(b"5"), Some(5.0));
        for bad in [
            &b""[..],
            b" 1",
            b"1 ",
            b"inf",
            b"-inf",
            b"nan",
            b"1e400",
            b"x",
        ] {
            assert_eq!(parse_f64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn from_i64_writes_decimal() {
        assert_eq!(CounterText::from_i64(0).as_bytes(), b"0");
        assert_eq!(CounterText::from_i64(-7).as_bytes(), b"-7");
        assert_eq!(
            CounterText::from_i64(i64::MIN).as_bytes(),
            b"-9223372036854775808"
        );
        assert_eq!(CounterText::from_i64(i64::MAX).as_bytes().len(), 19);
    }

    #[test]
    fn from_f64_writes_like_redis_incrbyfloat() {
        let text =
            |f: f64| String::from_utf8(CounterText::from_f64(f).as_bytes().to_vec()).unwrap();
        assert_eq!(text(10.5), "10.5");
        assert_eq!(text(3.0), "3");
        assert_eq!(text(10.5 + 0.1), "10.6");
        assert_eq!(text(-0.25), "-0.25");
        assert_eq!(text(-0.0), "0");
        assert!(!text(1e300).contains('e'));
        assert!(!text(5e-324).contains('e'));
        // The longest texts fit, and read back as the same number.
        for f in [f64::MAX, f64::MIN, 5e-324, -5e-324, f64::MIN_POSITIVE] {
            assert_eq!(parse_f64(text(f).as_bytes()), Some(f), "{f:e}");
        }
    }

    proptest::proptest! {
        #[test]
        fn from_i64_round_trips_through_parse_i64(n in proptest::num::i64::ANY) {
            proptest::prop_assert_eq!(parse_i64(CounterText::from_i64(n).as_bytes()), Some(n));
        }

        #[test]
        fn from_f64_round_trips_through_parse_f64(
            f in proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL | proptest::num::f64::ZERO
        ) {
            let text = CounterText::from_f64(f);
            proptest::prop_assert!(!text.as_bytes().contains(&b'e'));
            // -0.0 == 0.0, so the comparison also covers the "-0" rule.
            proptest::prop_assert_eq!(parse_f64(text.as_bytes()), Some(f));
        }
    }
}
