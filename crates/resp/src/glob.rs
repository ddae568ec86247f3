//! Redis glob patterns (KEYS, SCAN MATCH, CONFIG GET): `*`, `?`, `[abc]`, `[^a]`,
//! `[a-z]` and `\` escapes, matched against raw bytes.

/// Most `*` backtracking steps one match may take before it gives up and reports
/// no match, so a pathological pattern (`*a*a*a*…b`) against a long key cannot stall
/// a connection's task.
pub const MAX_MATCH_STEPS: usize = 1 << 20;

/// True if `text` matches `pattern`.
pub fn matches(pattern: &[u8], text: &[u8]) -> bool {
    let mut steps = 0;
    matches_at(pattern, text, &mut steps)
}

fn matches_at(mut p: &[u8], mut t: &[u8], steps: &mut usize) -> bool {
    while let Some(&c) = p.first() {
        *steps += 1;
        if *steps > MAX_MATCH_STEPS {
            return false;
        }
        match c {
            b'*' => {
                while p.first() == Some(&b'*') {
                    p = &p[1..];
                }
                if p.is_empty() {
                    return true;
                }
                for i in 0..=t.len() {
                    if matches_at(p, &t[i..], steps) {
                        return true;
                    }
                    if *steps > MAX_MATCH_STEPS {
                        return false;
                    }
                }
                return false;
            }
            b'?' => {
                if t.is_empty() {
                    return false;
                }
                p = &p[1..];
                t = &t[1..];
            }
            b'[' => {
                let Some((&ch, rest)) = t.split_first() else {
                    return false;
                };
                let (hit, after) = class(&p[1..], ch);
                if !hit {
                    return false;
                }
                p = after;
                t = rest;
            }
            _ => {
                let (lit, after) = if c == b'\\' && p.len() >= 2 {
                    (p[1], &p[2..])
                } else {
                    (c, &p[1..])
                };
                if t.first() != Some(&lit) {
                    return false;
                }
                p = after;
                t = &t[1..];
            }
        }
    }
    t.is_empty()
}

/// Matches `ch` against the class body starting after `[`; returns whether it
/// matched and the pattern after the closing `]` (or the end, if unclosed).
fn class(mut p: &[u8], ch: u8) -> (bool, &[u8]) {
    let negate = p.first() == Some(&b'^');
    if negate {
        p = &p[1..];
    }
    let mut hit = false;
    loop {
        match p {
            [] => break,
            [b']', rest @ ..] => {
                p = rest;
                break;
            }
            [b'\\', e, rest @ ..] => {
                hit |= *e == ch;
                p = rest;
            }
            [a, b'-', b, rest @ ..] if *b != b']' => {
                let (lo, hi) = if a <= b { (*a, *b) } else { (*b, *a) };
                hit |= (lo..=hi).contains(&ch);
                p = rest;
            }
            [c, rest @ ..] => {
                hit |= *c == ch;
                p = rest;
            }
        }
    }
    (hit != negate, p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_wildcards_classes_escapes() {
        assert!(matches(b"*", b""));
        assert!(matches(b"*", b"anything"));
        assert!(matches(b"h?llo", b"hello"));
        assert!(!matches(b"h?llo", b"hllo"));
        assert!(matches(b"h*llo", b"heeeello"));
        assert!(matches(b"h[ae]llo", b"hallo"));
        assert!(!matches(b"h[ae]llo", b"hillo"));
        assert!(matches(b"h[^e]llo", b"hallo"));
        assert!(!matches(b"h[^e]llo", b"hello"));
        assert!(matches(b"h[a-b]llo", b"hbllo"));
        assert!(!matches(b"h[a-b]llo", b"hcllo"));
        assert!(matches(b"key:\\*", b"key:*"));
        assert!(!matches(b"key:\\*", b"key:x"));
        assert!(matches(b"user:*:name", b"user:42:name"));
        assert!(!matches(b"user:*:name", b"user:42:age"));
    }

    #[test]
    fn matches_pathological_pattern_gives_up() {
        let pattern = b"*a*a*a*a*a*a*a*a*a*a*a*a*b".to_vec();
        let text = vec![b'a'; 200];
        assert!(!matches(&pattern, &text));
    }
}
