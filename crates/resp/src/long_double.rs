//! Redis's `long double` arithmetic for INCRBYFLOAT, bit for bit.
//!
//! Redis (on x86-64 Linux, which is where its users run it) parses an
//! INCRBYFLOAT operand and the stored value with `strtold` into an x87 80-bit
//! `long double` (64-bit significand), adds them in that precision, and stores
//! the sum as `snprintf("%.17Lf")` with trailing zeros (and a trailing dot)
//! removed (`util.c` `string2ld` / `ld2string(LD_STR_HUMAN)`). A 64-bit `f64`
//! gets other answers: `0.1` added three times gives `0.30000000000000004`
//! where Redis says `0.3`, and `123456789012345678 + 1` differs in the last
//! digit. So this module does what the C library does, in software:
//!
//! * [`LongDouble::parse`] accepts exactly what `string2ld` accepts: `strtold`'s
//!   grammar in the C locale (decimal, hexadecimal `0x1.8p3`, `inf`/`infinity`;
//!   a NaN is refused), the whole string consumed, no leading white space, fewer
//!   than 5,120 bytes, and neither overflow to infinity nor underflow to zero.
//!   The conversion is correctly rounded (ties to even), as glibc's is, by
//!   `rustc_apfloat` — LLVM's APFloat, which models the x87 format exactly.
//! * `LongDouble + LongDouble` rounds to nearest, ties to even, in 64 bits of
//!   significand: the x87 unit's default precision on Linux.
//! * [`LongDouble::to_redis_string`] prints the exact binary value rounded to 17
//!   decimals (ties to even, as glibc's `printf` does in the default rounding
//!   mode), then trims as Redis does, and writes `-0` as `0`.
//!
//! Pure functions, no state; the buffers they return are the reply's.

use rustc_apfloat::ieee::X87DoubleExtended;
use rustc_apfloat::{Float, Round};

/// `MAX_LONG_DOUBLE_CHARS` in Redis: `string2ld` refuses a string this long or
/// longer, and `ld2string` a result that prints longer.
const MAX_LONG_DOUBLE_CHARS: usize = 5 * 1024;

/// Decimals `%.17Lf` prints.
const DECIMALS: u32 = 17;

/// An x87 80-bit extended-precision value, as Redis's `long double`.
#[derive(Clone, Copy)]
pub struct LongDouble(X87DoubleExtended);

impl std::fmt::Debug for LongDouble {
    /// As Redis would print it (`inf`/`-inf`/`nan` when not finite).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.to_redis_string() {
            Some(text) => f.write_str(&text),
            None if self.0.is_nan() => f.write_str("nan"),
            None if self.0.is_negative() => f.write_str("-inf"),
            None => f.write_str("inf"),
        }
    }
}

impl PartialEq for LongDouble {
    /// Bitwise: `-0` and `0` differ, as they do in the stored text's sign.
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl std::ops::Add for LongDouble {
    type Output = LongDouble;

    /// Rounded as the x87 unit rounds: to nearest, ties to even.
    fn add(self, other: LongDouble) -> LongDouble {
        LongDouble(self.0.add_r(other.0, Round::NearestTiesToEven).value)
    }
}

impl LongDouble {
    /// Zero, the value of a missing key.
    pub const ZERO: LongDouble = LongDouble(X87DoubleExtended::ZERO);

    /// `bytes` as Redis's `string2ld` reads them, or `None` where Redis answers
    /// "value is not a valid float".
    pub fn parse(bytes: &[u8]) -> Option<LongDouble> {
        if bytes.is_empty() || bytes.len() >= MAX_LONG_DOUBLE_CHARS {
            return None;
        }
        // Redis copies the text into a C string and requires strtold to have
        // read all of it (`string2ld`: the end pointer must be the copy's
        // length), so a NUL anywhere — where strtold stops — is not a float.
        // Checked against redis-server 7.0.15: `1\0`, `\01` and `\0` are all
        // refused, as arguments and as stored values (regression: the
        // differential test found `0` answered for a value with NULs).
        if bytes.contains(&0) {
            return None;
        }
        let text = bytes;
        if text.first().is_some_and(|&b| is_c_space(b)) {
            return None;
        }
        let (negative, body) = match text.first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        let magnitude = parse_magnitude(body)?;
        // A finite string that rounded to infinity overflowed (ERANGE with
        // HUGE_VAL); one with a nonzero digit that rounded to zero underflowed
        // (ERANGE with zero). Both are refused; `inf` itself is not.
        let literal_infinity = matches!(magnitude, Magnitude::Infinity);
        let value = match magnitude {
            Magnitude::Infinity => X87DoubleExtended::INFINITY,
            Magnitude::Finite {
                ref apfloat_text, ..
            } => {
                X87DoubleExtended::from_str_r(apfloat_text, Round::NearestTiesToEven)
                    .ok()?
                    .value
            }
        };
        if value.is_nan() || (value.is_infinite() && !literal_infinity) {
            return None;
        }
        if let Magnitude::Finite { nonzero_digit, .. } = magnitude {
            if value.is_zero() && nonzero_digit {
                return None;
            }
        }
        Some(LongDouble(if negative { -value } else { value }))
    }

    /// Whether the value is neither infinite nor NaN (Redis answers "increment
    /// would produce NaN or Infinity" otherwise).
    pub fn is_finite(self) -> bool {
        self.0.is_finite()
    }

    /// The value as Redis stores and answers it (`ld2string`, human mode), or
    /// `None` for a non-finite value. (Redis's 5,120-byte buffer holds the
    /// longest finite value, 4,933 digits and 18 more characters.)
    pub fn to_redis_string(self) -> Option<String> {
        if !self.is_finite() {
            return None;
        }
        let bits = self.0.to_bits();
        let negative = bits >> 79 & 1 == 1;
        let exponent_field = (bits >> 64 & 0x7fff) as i32;
        let significand = bits as u64;
        // value = significand × 2^power; a denormal's exponent is that of the
        // smallest normal (the integer bit is explicit in this format).
        let power = exponent_field.max(1) - 16_383 - 63;
        let mut text = String::new();
        if negative {
            text.push('-');
        }
        if power >= 0 {
            // An integer: %.17Lf prints ".00000000000000000", which the trim
            // removes.
            text.push_str(&big_decimal(significand, power.unsigned_abs()));
        } else {
            push_fixed(&mut text, significand, power.unsigned_abs());
        }
        if text == "-0" {
            text = "0".into();
        }
        debug_assert!(text.len() + 1 + (DECIMALS as usize) < MAX_LONG_DOUBLE_CHARS);
        Some(text)
    }
}

/// Why INCRBYFLOAT cannot add: Redis's error replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IncrByFloatError {
    /// The stored value does not parse.
    #[error("ERR value is not a valid float")]
    NotFloat,
    /// The sum is infinite or NaN.
    #[error("ERR increment would produce NaN or Infinity")]
    NotFinite,
}

/// INCRBYFLOAT's new value for a key holding `current` (`None`: missing,
/// read as zero): the text to store and answer.
pub fn incr_by_float(current: Option<&[u8]>, by: LongDouble) -> Result<String, IncrByFloatError> {
    let current = match current {
        None => LongDouble::ZERO,
        Some(text) => LongDouble::parse(text).ok_or(IncrByFloatError::NotFloat)?,
    };
    (current + by)
        .to_redis_string()
        .ok_or(IncrByFloatError::NotFinite)
}

/// What follows the sign, once checked against `strtold`'s grammar.
enum Magnitude {
    Infinity,
    /// `apfloat_text` is the same number in the syntax `rustc_apfloat` reads.
    Finite {
        apfloat_text: String,
        nonzero_digit: bool,
    },
}

/// C's `isspace` in the C locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// `body` (no sign) if `strtold` would read all of it, else `None`.
fn parse_magnitude(body: &[u8]) -> Option<Magnitude> {
    let lower = body.to_ascii_lowercase();
    if lower == b"inf" || lower == b"infinity" {
        return Some(Magnitude::Infinity);
    }
    // A hex prefix with no hex digit after it reads as "0" and stops at the
    // 'x': not the whole string, so refused by the same check below.
    if let Some(hex) = lower.strip_prefix(b"0x") {
        let (significand, exponent) = split_exponent(hex, b'p')?;
        let nonzero_digit = digits_with_one_dot(significand, u8::is_ascii_hexdigit)?;
        let exponent = exponent.unwrap_or(b"0");
        let text = format!(
            "0x{}p{}",
            std::str::from_utf8(significand).ok()?,
            std::str::from_utf8(exponent).ok()?
        );
        return Some(Magnitude::Finite {
            apfloat_text: text,
            nonzero_digit,
        });
    }
    let (significand, _) = split_exponent(&lower, b'e')?;
    let nonzero_digit = digits_with_one_dot(significand, u8::is_ascii_digit)?;
    // Checked to be ASCII digits, a dot and an exponent: already the syntax
    // `rustc_apfloat` reads.
    Some(Magnitude::Finite {
        apfloat_text: String::from_utf8(lower).ok()?,
        nonzero_digit,
    })
}

/// Splits `s` at its exponent marker: the significand, and the exponent's
/// signed digits if there is a marker. `None` if the exponent is malformed
/// (strtold would stop before the marker, leaving it unread).
fn split_exponent(s: &[u8], marker: u8) -> Option<(&[u8], Option<&[u8]>)> {
    let Some(at) = s.iter().position(|&b| b == marker) else {
        return Some((s, None));
    };
    let exponent = &s[at + 1..];
    let digits = exponent
        .strip_prefix(b"-")
        .or_else(|| exponent.strip_prefix(b"+"))
        .unwrap_or(exponent);
    let well_formed = !digits.is_empty() && digits.iter().all(u8::is_ascii_digit);
    well_formed.then_some((&s[..at], Some(exponent)))
}

/// Checks that `s` is digits with at most one dot and at least one digit;
/// whether any digit is nonzero.
fn digits_with_one_dot(s: &[u8], is_digit: fn(&u8) -> bool) -> Option<bool> {
    let mut digits = 0usize;
    let mut dots = 0usize;
    let mut nonzero = false;
    for b in s {
        if *b == b'.' {
            dots += 1;
        } else if is_digit(b) {
            digits += 1;
            nonzero |= *b != b'0';
        } else {
            return None;
        }
    }
    (digits > 0 && dots <= 1).then_some(nonzero)
}

/// `significand × 2^-shift` to 17 decimals, rounded half to even on the exact
/// value, trailing zeros (and a bare dot) removed.
fn push_fixed(text: &mut String, significand: u64, shift: u32) {
    const SCALE: u128 = 10u128.pow(DECIMALS);
    // Below 2^64 · 10^17 < 2^121: exact in a u128.
    let scaled = u128::from(significand) * SCALE;
    let rounded = if shift >= 128 {
        // Half is 2^(shift-1) ≥ 2^127 > scaled: rounds to zero.
        0
    } else {
        let quotient = scaled >> shift;
        let remainder = scaled & ((1u128 << shift) - 1);
        let half = 1u128 << (shift - 1);
        let up = remainder > half || (remainder == half && quotient & 1 == 1);
        quotient + u128::from(up)
    };
    let integer = rounded / SCALE;
    let fraction = rounded % SCALE;
    text.push_str(&integer.to_string());
    if fraction != 0 {
        let digits = format!("{fraction:017}");
        text.push('.');
        text.push_str(digits.trim_end_matches('0'));
    }
}

/// `significand × 2^power` in decimal, exactly (up to ~4,933 digits for the
/// largest long double): base-10^9 limbs, doubled `power` times in steps of
/// up to 2^29.
fn big_decimal(significand: u64, power: u32) -> String {
    const LIMB: u64 = 1_000_000_000;
    // Least significant limb first.
    let mut limbs: Vec<u64> = Vec::new();
    let mut s = significand;
    while s > 0 {
        limbs.push(s % LIMB);
        s /= LIMB;
    }
    if limbs.is_empty() {
        return "0".into();
    }
    let mut left = power;
    while left > 0 {
        let step = left.min(29);
        left -= step;
        let mut carry = 0u64;
        for limb in &mut limbs {
            // limb < 10^9 < 2^30, so limb << 29 + carry < 2^60: no overflow.
            let v = (*limb << step) + carry;
            *limb = v % LIMB;
            carry = v / LIMB;
        }
        while carry > 0 {
            limbs.push(carry % LIMB);
            carry /= LIMB;
        }
    }
    let mut text = String::with_capacity(limbs.len() * 9);
    let mut iter = limbs.iter().rev();
    if let Some(top) = iter.next() {
        text.push_str(&top.to_string());
    }
    for limb in iter {
        text.push_str(&format!("{limb:09}"));
    }
    text
}

#[cfg(test)]
mod tests;
