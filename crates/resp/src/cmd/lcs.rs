//! LCS: the longest common subsequence of two strings — Redis 7's
//! `lcsCommand`: the subsequence itself, its length (LEN), or the matching
//! ranges (IDX, with MINMATCHLEN and WITHMATCHLEN), walked from the ends of the
//! strings as Redis walks them, so the ranges come in Redis's order. A missing
//! key is an empty string. Both keys are read in one transaction (`atomic.rs`),
//! so the two values are of one moment, as in Redis.

use super::{eq, Command, ParseError, NOT_INTEGER};
use crate::protocol::{parse_i64, Encoder};

/// Most bytes the dynamic-programming table may take (`(|a| + 1) × (|b| + 1)`
/// cells of 4 bytes): Redis bounds it by its `proto-max-bulk-len` (512 MiB);
/// ramstore by this, so that one command cannot take a server's memory (two
/// 4,000-byte values fit; two 1 MiB values do not).
pub const MAX_LCS_TABLE_BYTES: u64 = 64 << 20;

/// LCS's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LcsOptions {
    pub len: bool,
    pub idx: bool,
    pub min_match_len: u64,
    pub with_match_len: bool,
}

pub(super) fn parse_lcs<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    let [a, b, options @ ..] = rest else {
        return Err(ParseError::WrongArity("lcs"));
    };
    let mut o = LcsOptions {
        len: false,
        idx: false,
        min_match_len: 0,
        with_match_len: false,
    };
    let mut i = 0;
    while i < options.len() {
        let opt = options[i];
        if eq(opt, "idx") {
            o.idx = true;
        } else if eq(opt, "len") {
            o.len = true;
        } else if eq(opt, "withmatchlen") {
            o.with_match_len = true;
        } else if eq(opt, "minmatchlen") && i + 1 < options.len() {
            let n = parse_i64(options[i + 1]).ok_or(ParseError::Message(NOT_INTEGER))?;
            o.min_match_len = u64::try_from(n).unwrap_or(0);
            i += 1;
        } else {
            return Err(ParseError::Syntax);
        }
        i += 1;
    }
    if o.idx && o.len {
        return Err(ParseError::Message(
            "ERR If you want both the length and indexes, please just use IDX.",
        ));
    }
    Ok(Command::Lcs { a, b, options: o })
}

/// One matching range: its first and last byte in `a` and in `b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LcsMatch {
    pub a: (u64, u64),
    pub b: (u64, u64),
}

/// The LCS of `a` and `b` and the matches Redis reports, in its order (from
/// the ends of the strings); `Err` with Redis's error when the table would be
/// larger than [`MAX_LCS_TABLE_BYTES`].
pub fn lcs(a: &[u8], b: &[u8]) -> Result<(Vec<u8>, Vec<LcsMatch>), &'static str> {
    let (alen, blen) = (a.len(), b.len());
    let cells = (alen as u64 + 1) * (blen as u64 + 1);
    if cells.saturating_mul(4) > MAX_LCS_TABLE_BYTES {
        return Err("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len");
    }
    // table[i][j]: the LCS length of a[..i] and b[..j], row by row.
    let width = blen + 1;
    let mut table = vec![0u32; (alen + 1) * width];
    for i in 1..=alen {
        for j in 1..=blen {
            table[i * width + j] = if a[i - 1] == b[j - 1] {
                table[(i - 1) * width + j - 1] + 1
            } else {
                table[(i - 1) * width + j].max(table[i * width + j - 1])
            };
        }
    }
    let at = |i: usize, j: usize| table[i * width + j];
    let mut result = vec![0u8; at(alen, blen) as usize];
    let mut idx = result.len();
    let mut matches = Vec::new();
    // The range being grown backwards: (a start, a end, b start, b end).
    let mut range: Option<(usize, usize, usize, usize)> = None;
    let (mut i, mut j) = (alen, blen);
    while i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            result[idx - 1] = a[i - 1];
            range = Some(match range {
                None => (i - 1, i - 1, j - 1, j - 1),
                // After a match the walk always steps back diagonally, so the
                // range grows by one.
                Some((_, a_end, _, b_end)) => (i - 1, a_end, j - 1, b_end),
            });
            // Redis emits a range that reached the start of either string.
            if i == 1 || j == 1 {
                emit = true;
            }
            idx -= 1;
            i -= 1;
            j -= 1;
        } else {
            if at(i - 1, j) > at(i, j - 1) {
                i -= 1;
            } else {
                j -= 1;
            }
            emit = range.is_some();
        }
        if emit {
            if let Some((a0, a1, b0, b1)) = range.take() {
                matches.push(LcsMatch {
                    a: (a0 as u64, a1 as u64),
                    b: (b0 as u64, b1 as u64),
                });
            }
        }
    }
    Ok((result, matches))
}

/// Encodes LCS's reply for `a` and `b` with `options`.
pub fn encode_lcs(e: &mut Encoder<'_>, a: &[u8], b: &[u8], options: LcsOptions) {
    let (result, matches) = match lcs(a, b) {
        Ok(r) => r,
        Err(message) => return e.error(message),
    };
    if options.idx {
        let shown: Vec<&LcsMatch> = matches
            .iter()
            .filter(|m| options.min_match_len == 0 || m.a.1 - m.a.0 + 1 >= options.min_match_len)
            .collect();
        e.map(2);
        e.bulk(b"matches");
        e.array(shown.len());
        for m in shown {
            e.array(2 + usize::from(options.with_match_len));
            for (start, end) in [m.a, m.b] {
                e.array(2);
                e.integer(start as i64);
                e.integer(end as i64);
            }
            if options.with_match_len {
                e.integer((m.a.1 - m.a.0 + 1) as i64);
            }
        }
        e.bulk(b"len");
        e.integer(result.len() as i64);
    } else if options.len {
        e.integer(result.len() as i64);
    } else {
        e.bulk(&result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lcs_matches_redis_example() {
        // Redis's LCS page: ohmytext / mynewtext.
        let (s, m) = lcs(b"ohmytext", b"mynewtext").unwrap();
        assert_eq!(s, b"mytext");
        assert_eq!(
            m,
            vec![
                LcsMatch {
                    a: (4, 7),
                    b: (5, 8)
                },
                LcsMatch {
                    a: (2, 3),
                    b: (0, 1)
                },
            ]
        );
    }

    #[test]
    fn lcs_of_empty_and_disjoint_strings() {
        assert_eq!(lcs(b"", b"abc").unwrap(), (Vec::new(), Vec::new()));
        assert_eq!(lcs(b"abc", b"xyz").unwrap(), (Vec::new(), Vec::new()));
    }

    #[test]
    fn lcs_refuses_a_table_over_the_bound() {
        let big = vec![b'a'; 8192];
        assert!(lcs(&big, &big).is_err());
    }

    #[test]
    fn parse_lcs_refuses_len_with_idx_and_unknown_options() {
        let args: Vec<&[u8]> = vec![b"a", b"b", b"LEN", b"IDX"];
        assert!(parse_lcs(&args).is_err());
        let args: Vec<&[u8]> = vec![b"a", b"b", b"MINMATCHLEN"];
        assert_eq!(parse_lcs(&args).unwrap_err(), ParseError::Syntax);
        let args: Vec<&[u8]> = vec![b"a", b"b", b"MINMATCHLEN", b"-3", b"IDX"];
        match parse_lcs(&args).unwrap() {
            Command::Lcs { options, .. } => assert_eq!(options.min_match_len, 0),
            other => panic!("{other:?}"),
        }
    }
}
