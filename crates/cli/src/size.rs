//! Sizes on the command line: `4GiB`, `512MiB`, `64KiB`, `1G`, `1000000`.

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

#[cfg(test)]
mod tests {
    use super::*;

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
