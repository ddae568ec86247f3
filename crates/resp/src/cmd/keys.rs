//! Key commands: DEL, UNLINK, EXISTS, SCAN, KEYS.
//!
//! DEL and UNLINK are the same here (a remove per key; Redis's UNLINK only frees
//! memory later, and ramstore's log cleaner always does, L§4); neither is atomic
//! across keys. SCAN's cursor is the enumeration's key-hash cursor, which only
//! moves forward from 0, so Redis's "0 means done" holds; every key is a string,
//! so `TYPE string` matches all keys and any other type none. KEYS walks the
//! whole table and refuses a reply beyond [`MAX_KEYS_REPLY`] keys or
//! [`super::MAX_REPLY_BYTES`] bytes, pointing to SCAN (Redis would build it).

use super::{eq, join, Command, Connection, ParseError, MAX_REPLY_BYTES};
use crate::backend::ReadResult;
use crate::glob;
use crate::protocol::parse_i64;
use crate::sink::Sink;

/// Most keys KEYS returns; beyond it KEYS fails and points to SCAN (one reply of
/// every key of a large table would exhaust the server's memory).
pub const MAX_KEYS_REPLY: usize = 1_000_000;
/// Most enumeration batches one SCAN call fetches while looking for COUNT keys.
pub const MAX_SCAN_BATCHES: usize = 16;

/// SCAN's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scan<'a> {
    pub cursor: u64,
    /// MATCH: a glob the keys must match.
    pub pattern: Option<&'a [u8]>,
    /// COUNT: about how many keys to look at (at least 1).
    pub count: usize,
    /// TYPE: false if a type other than `string` was asked for (no key has it).
    pub only_strings: bool,
}

pub(super) fn parse_del<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    Ok(Command::Del { keys: rest })
}

pub(super) fn parse_unlink<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    Ok(Command::Unlink { keys: rest })
}

pub(super) fn parse_exists<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    Ok(Command::Exists { keys: rest })
}

pub(super) fn parse_touch<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    Ok(Command::Touch { keys: rest })
}

pub(super) fn parse_type<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [key] => Ok(Command::Type { key }),
        _ => Err(ParseError::WrongArity("type")),
    }
}

pub(super) fn parse_rename<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [key, new_key] => Ok(Command::Rename {
            key,
            new_key,
            nx: false,
        }),
        _ => Err(ParseError::WrongArity("rename")),
    }
}

pub(super) fn parse_renamenx<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [key, new_key] => Ok(Command::Rename {
            key,
            new_key,
            nx: true,
        }),
        _ => Err(ParseError::WrongArity("renamenx")),
    }
}

/// COPY source destination [REPLACE]; `DB n` (another database) is refused
/// with a clear error until a transaction can span two databases' commands.
pub(super) fn parse_copy<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    let [source, destination, options @ ..] = rest else {
        return Err(ParseError::WrongArity("copy"));
    };
    let mut replace = false;
    let mut i = 0;
    while i < options.len() {
        if eq(options[i], "replace") {
            replace = true;
        } else if eq(options[i], "db") && i + 1 < options.len() {
            return Err(ParseError::Message(
                "ERR ramstore's COPY copies within the current database only (no DB option yet)",
            ));
        } else {
            return Err(ParseError::Syntax);
        }
        i += 1;
    }
    Ok(Command::Copy {
        source,
        destination,
        replace,
    })
}

pub(super) fn parse_keys<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [pattern] => Ok(Command::Keys { pattern }),
        _ => Err(ParseError::WrongArity("keys")),
    }
}

/// A SCAN cursor as Redis reads it (`parseScanCursorOrReply`: C's `strtoul`
/// on the argument as a C string): no leading white space, an optional sign,
/// decimal digits, all of it read, no overflow past `u64::MAX`. A minus sign
/// wraps, as `strtoul` does (`-1` is `u64::MAX`), and an empty cursor is 0.
fn parse_cursor(arg: &[u8]) -> Option<u64> {
    let text = arg.split(|&b| b == 0).next().unwrap_or_default();
    let (negative, digits) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() {
        // "" converts nothing and ends at the NUL: 0. A lone sign converts
        // nothing and ends at the sign: refused.
        return text.is_empty().then_some(0);
    }
    let mut value = 0u64;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

pub(super) fn parse_scan<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    let Some((cursor, mut options)) = rest.split_first() else {
        return Err(ParseError::WrongArity("scan"));
    };
    let cursor = parse_cursor(cursor).ok_or(ParseError::InvalidCursor)?;
    let mut scan = Scan {
        cursor,
        pattern: None,
        count: 10,
        only_strings: true,
    };
    while let [option, value, more @ ..] = options {
        if eq(option, "match") {
            scan.pattern = Some(value);
        } else if eq(option, "count") {
            scan.count = match parse_i64(value) {
                Some(n) if n >= 1 => usize::try_from(n).unwrap_or(usize::MAX),
                Some(_) => return Err(ParseError::Syntax),
                None => return Err(ParseError::NotInteger),
            };
        } else if eq(option, "type") {
            scan.only_strings = eq(value, "string");
        } else {
            return Err(ParseError::Syntax);
        }
        options = more;
    }
    // An option without its value.
    if !options.is_empty() {
        return Err(ParseError::Syntax);
    }
    Ok(Command::Scan(scan))
}

impl Connection {
    /// DEL and UNLINK: how many of `keys` existed.
    pub(super) async fn del(&self, table: u64, keys: &[&[u8]], sink: &mut Sink) {
        let mut outcomes = Vec::with_capacity(keys.len());
        for key in keys {
            outcomes.push(self.shared.backend.remove(table, key).await);
        }
        self.finish(sink, join(outcomes), |e, removed: Vec<Option<u64>>| {
            e.integer(removed.iter().filter(|r| r.is_some()).count() as i64)
        });
    }

    pub(super) async fn exists(&self, table: u64, keys: &[&[u8]], sink: &mut Sink) {
        let mut outcomes = Vec::with_capacity(keys.len());
        for key in keys {
            outcomes.push(self.shared.backend.read(table, key).await);
        }
        self.finish(sink, join(outcomes), |e, found: Vec<ReadResult>| {
            e.integer(found.iter().filter(|r| r.is_some()).count() as i64)
        });
    }

    /// TYPE: `string` for a key that exists (every value is a string so far),
    /// `none` otherwise, as a simple string.
    pub(super) async fn key_type(&self, table: u64, key: &[u8], sink: &mut Sink) {
        let o = self.shared.backend.read(table, key).await;
        self.finish(sink, o, |e, r: ReadResult| {
            e.simple(if r.is_some() { "string" } else { "none" })
        });
    }

    pub(super) async fn keys(&self, table: u64, pattern: &[u8], sink: &mut Sink) {
        let mut keys = Vec::new();
        let mut bytes = 0usize;
        let mut too_many = false;
        let walked = self
            .walk(table, |key| {
                if glob::matches(pattern, key) {
                    bytes += key.len();
                    if keys.len() < MAX_KEYS_REPLY && bytes <= MAX_REPLY_BYTES {
                        keys.push(key.to_vec());
                    } else {
                        too_many = true;
                    }
                }
            })
            .await;
        match walked {
            Err(e) => self.store_error(sink, &e),
            Ok(_) if too_many => self.error(
                sink,
                &format!(
                    "ERR KEYS matched more than {MAX_KEYS_REPLY} keys or {MAX_REPLY_BYTES} bytes; use SCAN"
                ),
            ),
            Ok(_) => sink.reply(self.version, |e| {
                e.array(keys.len());
                for k in &keys {
                    e.bulk(k);
                }
            }),
        }
    }

    pub(super) async fn scan(&self, table: u64, scan: Scan<'_>, sink: &mut Sink) {
        let mut cursor = scan.cursor;
        let mut keys = Vec::new();
        let mut seen = 0;
        let mut next_cursor = 0;
        for _ in 0..MAX_SCAN_BATCHES {
            let (batch, next) = match self.shared.backend.scan_batch(table, cursor).await {
                Ok(b) => b,
                Err(e) => return self.store_error(sink, &e),
            };
            seen += batch.len();
            keys.extend(
                batch
                    .into_iter()
                    .filter(|o| {
                        scan.only_strings && scan.pattern.is_none_or(|p| glob::matches(p, &o.key))
                    })
                    .map(|o| o.key),
            );
            // Redis's cursor 0 means "done"; an enumeration cursor is a key hash
            // that only moves forward from 0, so a live cursor is never 0.
            next_cursor = next.unwrap_or(0);
            match next {
                Some(c) if seen < scan.count => cursor = c,
                _ => break,
            }
        }
        sink.reply(self.version, |e| {
            e.array(2);
            e.bulk(next_cursor.to_string().as_bytes());
            e.array(keys.len());
            for k in &keys {
                e.bulk(k);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    fn parsed(words: &[&str]) -> Result<String, String> {
        let frame: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        parse(&frame)
            .map(|c| format!("{c:?}"))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn parse_key_commands_good_arguments() {
        assert_eq!(
            parsed(&["DEL", "a", "b"]),
            Ok("Del { keys: [[97], [98]] }".into())
        );
        assert_eq!(
            parsed(&["unlink", "a"]),
            Ok("Unlink { keys: [[97]] }".into())
        );
        assert_eq!(
            parsed(&["exists", "a"]),
            Ok("Exists { keys: [[97]] }".into())
        );
        assert_eq!(parsed(&["keys", "*"]), Ok("Keys { pattern: [42] }".into()));
        let frame: Vec<&[u8]> = vec![
            b"scan", b"7", b"MATCH", b"a*", b"count", b"100", b"type", b"hash",
        ];
        assert_eq!(
            parse(&frame),
            Ok(Command::Scan(Scan {
                cursor: 7,
                pattern: Some(b"a*"),
                count: 100,
                only_strings: false,
            }))
        );
        let frame: Vec<&[u8]> = vec![b"scan", b"0"];
        assert_eq!(
            parse(&frame),
            Ok(Command::Scan(Scan {
                cursor: 0,
                pattern: None,
                count: 10,
                only_strings: true,
            }))
        );
    }

    #[test]
    fn parse_key_commands_wrong_arity() {
        for words in [
            &["del"][..],
            &["unlink"],
            &["exists"],
            &["scan"],
            &["keys"],
            &["keys", "a", "b"],
        ] {
            let name = words[0];
            assert_eq!(
                parsed(words),
                Err(format!(
                    "ERR wrong number of arguments for '{name}' command"
                ))
            );
        }
    }

    /// Redis 7.0.15 answers `SCAN -1`, `SCAN +3` and `SCAN ""` (issue 24).
    #[test]
    fn parse_cursor_reads_like_strtoul() {
        let cursor = |arg: &[u8]| match parse(&[b"scan", arg]) {
            Ok(Command::Scan(scan)) => Some(scan.cursor),
            _ => None,
        };
        assert_eq!(cursor(b"-1"), Some(u64::MAX));
        assert_eq!(cursor(b"-18446744073709551615"), Some(1));
        assert_eq!(cursor(b"+3"), Some(3));
        assert_eq!(cursor(b""), Some(0));
        assert_eq!(cursor(b"12\0junk"), Some(12));
        assert_eq!(cursor(b"18446744073709551615"), Some(u64::MAX));
    }

    #[test]
    fn parse_scan_bad_options() {
        assert_eq!(parsed(&["scan", "x"]), Err("ERR invalid cursor".into()));
        for bad in [
            " 3",
            "3x",
            "+",
            "-",
            "18446744073709551616",
            "-18446744073709551616",
        ] {
            assert_eq!(
                parsed(&["scan", bad]),
                Err("ERR invalid cursor".into()),
                "{bad:?}"
            );
        }
        assert_eq!(
            parsed(&["scan", "0", "match"]),
            Err("ERR syntax error".into())
        );
        assert_eq!(
            parsed(&["scan", "0", "count", "0"]),
            Err("ERR syntax error".into())
        );
        assert_eq!(
            parsed(&["scan", "0", "count", "many"]),
            Err("ERR value is not an integer or out of range".into())
        );
        assert_eq!(
            parsed(&["scan", "0", "bogus", "1"]),
            Err("ERR syntax error".into())
        );
    }
}
