//! Sizes on the command line and in output: parsing `4GiB`, `512MiB`, `64KiB`, `1G`,
//! `1000000`, and the byte formats `ramstore` prints. Every printed size goes through
//! [`in_unit`], so the formats differ only in the units offered and the layout that
//! their callers (and tests) rely on.

/// Parses a size in bytes; binary (KiB, MiB, GiB, TiB) and decimal-looking (K, M, G,
/// T, KB, MB, GB, TB — also binary, as users mean) suffixes, case-insensitive.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size (examples: 512MiB, 4GiB, 1000000)"))?;
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => {
            return Err(format!(
                "unknown size unit {other:?} in {text:?} (use KiB, MiB, GiB)"
            ))
        }
    };
    n.checked_mul(1u64 << shift)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// `bytes` in the largest of `units` it reaches, where `units[i]` is
/// 2^(`first_shift` + 10·i) bytes; below the first unit, in the first.
fn in_unit(bytes: u64, units: &[&'static str], first_shift: i32) -> (f64, &'static str) {
    let b = bytes as f64;
    let size = |i: usize| 2f64.powi(first_shift + 10 * i as i32);
    let mut i = 0;
    while i + 1 < units.len() && b >= size(i + 1) {
        i += 1;
    }
    (b / size(i), units[i])
}

/// `bytes` for a person, in one word (so `status` rows split on whitespace):
/// `977B`, `1.5KiB`, `32.0MiB`, `2.0GiB`, up to TiB.
pub fn one_word(bytes: u64) -> String {
    if bytes < 1024 {
        return format!("{bytes}B");
    }
    let (value, unit) = in_unit(bytes, &["KiB", "MiB", "GiB", "TiB"], 10);
    format!("{value:.1}{unit}")
}

/// `bytes` for a person in a sentence: `512.0 MiB`, `1.0 GiB` (never below MiB).
pub fn spaced(bytes: u64) -> String {
    let (value, unit) = in_unit(bytes, &["MiB", "GiB"], 20);
    format!("{value:.1} {unit}")
}

/// `bytes` as mebibytes with one decimal and no unit, for columns headed "… MiB".
pub fn mib(bytes: u64) -> String {
    let (value, _) = in_unit(bytes, &["MiB"], 20);
    format!("{value:.1}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_word_units() {
        assert_eq!(one_word(0), "0B");
        assert_eq!(one_word(1023), "1023B");
        assert_eq!(one_word(1024), "1.0KiB");
        assert_eq!(one_word(1536), "1.5KiB");
        assert_eq!(one_word((1 << 20) - 1), "1024.0KiB");
        assert_eq!(one_word(32 << 20), "32.0MiB");
        assert_eq!(one_word(512 << 30), "512.0GiB");
        assert_eq!(one_word(3 << 40), "3.0TiB");
        assert_eq!(one_word(u64::MAX), "16777216.0TiB");
    }

    #[test]
    fn spaced_mib_below_a_gib_then_gib() {
        assert_eq!(spaced(0), "0.0 MiB");
        assert_eq!(spaced(512 << 20), "512.0 MiB");
        assert_eq!(spaced((1 << 30) - 1), "1024.0 MiB");
        assert_eq!(spaced(1 << 30), "1.0 GiB");
        assert_eq!(spaced(3 << 40), "3072.0 GiB");
    }

    #[test]
    fn mib_has_no_unit_and_never_scales() {
        assert_eq!(mib(0), "0.0");
        assert_eq!(mib(1536 << 10), "1.5");
        assert_eq!(mib(2 << 30), "2048.0");
    }

    #[test]
    fn parse_size_units() {
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("512mib"), Ok(512 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size(" 64 KiB "), Ok(64 << 10));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("5PiB").is_err());
        assert!(parse_size("").is_err());
    }
}
