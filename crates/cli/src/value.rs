//! Where `ramstore put` gets its value: the argument itself, standard input (`-`) or
//! a file (`--value-file PATH`), so values up to the 1 MiB limit get through the
//! shell (one argument is limited to 128 KiB on Linux). Input is read up to one byte
//! past the limit, never more: an endless or huge input fails at once.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};
use ramstore_wire::MAX_VALUE_BYTES;

/// The value given as `arg` (`-`: standard input) or in `file`.
pub fn read(arg: Option<&str>, file: Option<&Path>) -> Result<Vec<u8>> {
    match (arg, file) {
        (_, Some(path)) => {
            let f = std::fs::File::open(path)
                .with_context(|| format!("cannot open the value file {}", path.display()))?;
            bounded(f, &format!("the value file {}", path.display()))
        }
        (Some("-"), None) => bounded(std::io::stdin().lock(), "standard input"),
        (Some(v), None) => Ok(v.as_bytes().to_vec()),
        // The argument parser requires one of them.
        (None, None) => anyhow::bail!("no value: give VALUE, `-` (standard input) or --value-file"),
    }
}

/// Reads all of `input`, failing once it is longer than [`MAX_VALUE_BYTES`].
fn bounded(input: impl Read, what: &str) -> Result<Vec<u8>> {
    let mut value = Vec::new();
    input
        .take(MAX_VALUE_BYTES as u64 + 1)
        .read_to_end(&mut value)
        .with_context(|| format!("reading {what}"))?;
    if value.len() > MAX_VALUE_BYTES {
        anyhow::bail!("too large: {what} holds more than {MAX_VALUE_BYTES} bytes (values ≤ 1 MiB)");
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_takes_exactly_the_limit() {
        let max = vec![7u8; MAX_VALUE_BYTES];
        assert_eq!(bounded(&max[..], "x").unwrap().len(), MAX_VALUE_BYTES);
        let over = vec![7u8; MAX_VALUE_BYTES + 1];
        let e = bounded(&over[..], "standard input")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "too large: standard input holds more than 1048576 bytes (values ≤ 1 MiB)"
        );
        assert!(bounded(&b""[..], "x").unwrap().is_empty());
    }

    #[test]
    fn read_argument_or_file() {
        assert_eq!(read(Some("v"), None).unwrap(), b"v");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.bin");
        std::fs::write(&path, [0u8, 1, 2]).unwrap();
        assert_eq!(read(None, Some(&path)).unwrap(), [0, 1, 2]);
        let e = read(None, Some(&dir.path().join("missing"))).unwrap_err();
        assert!(
            format!("{e:#}").starts_with("cannot open the value file "),
            "{e:#}"
        );
    }
}
