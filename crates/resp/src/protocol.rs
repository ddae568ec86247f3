//! RESP framing: parsing client commands (multibulk arrays and inline commands) and
//! encoding replies in RESP2 or RESP3.
//!
//! The parser works on a byte buffer that may hold part of a command, one command
//! or many (a pipeline). It never copies argument bytes: it records their ranges in
//! the buffer. Every length it reads is checked against a limit before anything is
//! reserved, so a hostile length prefix costs nothing.

use std::ops::Range;

use ramstore_wire::{MAX_KEY_BYTES, MAX_VALUE_BYTES};

/// Longest bulk string (one argument), in bytes: ramstore's largest value
/// (1 MiB). Larger arguments could never be stored, so they are a protocol error
/// (Redis's `proto-max-bulk-len`, made small).
pub const MAX_BULK_BYTES: usize = MAX_VALUE_BYTES;
/// Most arguments in one command (Redis allows more; 64 Ki keys per MGET/DEL is
/// plenty and bounds the per-command argument list).
pub const MAX_ARGS: usize = 64 * 1024;
/// Most bytes of one command, headers and arguments together (an MSET of several
/// large values); bounds a connection's read buffer.
pub const MAX_COMMAND_BYTES: usize = 16 << 20;
/// Longest inline command line (Redis's `PROTO_INLINE_MAX_SIZE`), in bytes.
pub const MAX_INLINE_BYTES: usize = 64 * 1024;
/// Longest header line (`*N` or `$N`, CRLF included): 20 digits and a sign.
pub const MAX_HEADER_LINE_BYTES: usize = 32;

const _: () = assert!(MAX_KEY_BYTES <= MAX_BULK_BYTES);
/// Most arguments of a command from a client that has not authenticated yet, where
/// a password is required (Redis's limit): AUTH and HELLO need no more, and a
/// stranger may not make the server wait for, and buffer, a large command.
pub const UNAUTHENTICATED_MAX_ARGS: usize = 10;
/// Most bytes of one argument from a client that has not authenticated yet
/// (Redis's limit): with [`UNAUTHENTICATED_MAX_ARGS`], an unauthenticated
/// connection makes the server hold at most about 160 KiB.
pub const UNAUTHENTICATED_MAX_BULK_BYTES: usize = 16 * 1024;

/// Why the bytes a client sent are not RESP. The connection is answered
/// `-ERR Protocol error: <this>` and closed, as Redis does: after a framing error
/// the rest of the stream cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    #[error("invalid multibulk length")]
    BadArrayLength,
    #[error("invalid bulk length")]
    BadBulkLength,
    #[error("expected '$', got '{}'", char::from(*.0))]
    ExpectedBulk(u8),
    #[error("expected CRLF after a bulk string")]
    MissingCrlf,
    #[error("too big inline request")]
    InlineTooLong,
    #[error("too big mbulk count string")]
    HeaderTooLong,
    #[error("unbalanced quotes in request")]
    UnbalancedQuotes,
    #[error("command exceeds {MAX_COMMAND_BYTES} bytes")]
    CommandTooLarge,
    /// More than [`UNAUTHENTICATED_MAX_ARGS`] arguments before AUTH (Redis's text).
    #[error("unauthenticated multibulk length")]
    UnauthenticatedArrayLength,
    /// An argument over [`UNAUTHENTICATED_MAX_BULK_BYTES`] before AUTH (Redis's text).
    #[error("unauthenticated bulk length")]
    UnauthenticatedBulkLength,
}

/// Where an inline command's arguments are: inline arguments may be unquoted in
/// place, so they are returned as owned bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Args {
    /// Ranges into the buffer (multibulk).
    Ranges(Vec<Range<usize>>),
    /// Owned arguments (inline).
    Owned(Vec<Vec<u8>>),
}

/// One parsed command: its arguments and how many bytes of the buffer it took.
/// A command with no arguments (an empty line, `*0`) is skipped by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub args: Args,
    pub consumed: usize,
}

impl Parsed {
    /// The arguments as slices (of `buf` for multibulk commands).
    pub fn slices<'a>(&'a self, buf: &'a [u8]) -> Vec<&'a [u8]> {
        match &self.args {
            Args::Ranges(r) => r.iter().map(|r| &buf[r.clone()]).collect(),
            Args::Owned(v) => v.iter().map(Vec::as_slice).collect(),
        }
    }
}

/// Parses the first command in `buf` from an authenticated client: `Ok(None)` if it
/// is not complete yet.
pub fn parse_command(buf: &[u8]) -> Result<Option<Parsed>, ProtocolError> {
    let mut ranges = Vec::new();
    Ok(parse_command_into(buf, &mut ranges, true)?.map(|p| Parsed {
        args: match p.inline {
            Some(owned) => Args::Owned(owned),
            None => Args::Ranges(ranges),
        },
        consumed: p.consumed,
    }))
}

/// A command parsed by [`parse_command_into`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedInto {
    /// Bytes of the buffer the command took.
    pub consumed: usize,
    /// An inline command's (owned) arguments; `None`: a multibulk command, whose
    /// arguments are the ranges.
    pub inline: Option<Vec<Vec<u8>>>,
}

/// [`parse_command`] that leaves a multibulk command's argument ranges in
/// `ranges` (cleared first), so a connection reuses one vector for every command
/// instead of allocating one per command. A client that must still authenticate
/// (`authenticated` false) is held to Redis's limits for strangers
/// ([`UNAUTHENTICATED_MAX_ARGS`], [`UNAUTHENTICATED_MAX_BULK_BYTES`]), checked as
/// soon as the lengths are read, before any of the bytes are waited for.
pub fn parse_command_into(
    buf: &[u8],
    ranges: &mut Vec<Range<usize>>,
    authenticated: bool,
) -> Result<Option<ParsedInto>, ProtocolError> {
    ranges.clear();
    match buf.first() {
        None => Ok(None),
        Some(b'*') => Ok(
            parse_multibulk(buf, ranges, authenticated)?.map(|consumed| ParsedInto {
                consumed,
                inline: None,
            }),
        ),
        Some(_) => parse_inline(buf),
    }
}

/// The position of the CRLF ending the header line at `start`, or `None` if the
/// line is not complete. Lines longer than [`MAX_HEADER_LINE_BYTES`] are errors.
fn header_line(buf: &[u8], start: usize) -> Result<Option<usize>, ProtocolError> {
    let window = &buf[start..buf.len().min(start + MAX_HEADER_LINE_BYTES)];
    match window.windows(2).position(|w| w == b"\r\n") {
        Some(i) => Ok(Some(start + i)),
        None if window.len() >= MAX_HEADER_LINE_BYTES => Err(ProtocolError::HeaderTooLong),
        None => Ok(None),
    }
}

/// A decimal integer with an optional leading '-', nothing else (no '+', spaces,
/// leading zeros or "-0"): Redis's `string2ll`, shared with the stored form of
/// counters so INCR reads exactly what native increments write.
pub use ramstore_wire::counter::parse_i64;

/// Parses a multibulk command into `args` (empty on entry): the bytes it took, or
/// `None` if it is not complete yet.
fn parse_multibulk(
    buf: &[u8],
    args: &mut Vec<Range<usize>>,
    authenticated: bool,
) -> Result<Option<usize>, ProtocolError> {
    let Some(end) = header_line(buf, 0)? else {
        return Ok(None);
    };
    let count = parse_i64(&buf[1..end]).ok_or(ProtocolError::BadArrayLength)?;
    let mut pos = end + 2;
    if count <= 0 {
        // Redis ignores `*0` and `*-1` requests.
        return Ok(Some(pos));
    }
    let count = usize::try_from(count).map_err(|_| ProtocolError::BadArrayLength)?;
    if count > MAX_ARGS {
        return Err(ProtocolError::BadArrayLength);
    }
    if !authenticated && count > UNAUTHENTICATED_MAX_ARGS {
        return Err(ProtocolError::UnauthenticatedArrayLength);
    }
    args.reserve(count.min(64));
    for _ in 0..count {
        let Some(&first) = buf.get(pos) else {
            return Ok(None);
        };
        if first != b'$' {
            return Err(ProtocolError::ExpectedBulk(first));
        }
        let Some(end) = header_line(buf, pos)? else {
            return Ok(None);
        };
        let len = parse_i64(&buf[pos + 1..end]).ok_or(ProtocolError::BadBulkLength)?;
        let len = usize::try_from(len).map_err(|_| ProtocolError::BadBulkLength)?;
        if len > MAX_BULK_BYTES {
            return Err(ProtocolError::BadBulkLength);
        }
        if !authenticated && len > UNAUTHENTICATED_MAX_BULK_BYTES {
            return Err(ProtocolError::UnauthenticatedBulkLength);
        }
        let data = end + 2;
        // Checked before waiting for the bytes: a client cannot make the buffer
        // grow past the limit by declaring many large arguments.
        if data + len + 2 > MAX_COMMAND_BYTES {
            return Err(ProtocolError::CommandTooLarge);
        }
        if buf.len() < data + len + 2 {
            return Ok(None);
        }
        if &buf[data + len..data + len + 2] != b"\r\n" {
            return Err(ProtocolError::MissingCrlf);
        }
        args.push(data..data + len);
        pos = data + len + 2;
    }
    Ok(Some(pos))
}

fn parse_inline(buf: &[u8]) -> Result<Option<ParsedInto>, ProtocolError> {
    let window = &buf[..buf.len().min(MAX_INLINE_BYTES)];
    let Some(nl) = window.iter().position(|&b| b == b'\n') else {
        if window.len() >= MAX_INLINE_BYTES {
            return Err(ProtocolError::InlineTooLong);
        }
        return Ok(None);
    };
    let mut line = &buf[..nl];
    if let Some(stripped) = line.strip_suffix(b"\r") {
        line = stripped;
    }
    Ok(Some(ParsedInto {
        consumed: nl + 1,
        inline: Some(split_inline(line)?),
    }))
}

/// Splits an inline command into arguments: whitespace separates, double quotes
/// (with `\n`, `\r`, `\t`, `\\`, `\"`, `\xHH` escapes) and single quotes group.
fn split_inline(line: &[u8]) -> Result<Vec<Vec<u8>>, ProtocolError> {
    let mut args = Vec::new();
    let mut i = 0;
    while i < line.len() {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= line.len() {
            break;
        }
        let mut arg = Vec::new();
        match line[i] {
            b'"' => {
                i += 1;
                loop {
                    let Some(&c) = line.get(i) else {
                        return Err(ProtocolError::UnbalancedQuotes);
                    };
                    i += 1;
                    match c {
                        b'"' => break,
                        b'\\' => {
                            let Some(&e) = line.get(i) else {
                                return Err(ProtocolError::UnbalancedQuotes);
                            };
                            i += 1;
                            match e {
                                b'n' => arg.push(b'\n'),
                                b'r' => arg.push(b'\r'),
                                b't' => arg.push(b'\t'),
                                b'x' => {
                                    let hex = line
                                        .get(i..i + 2)
                                        .and_then(|h| std::str::from_utf8(h).ok())
                                        .and_then(|h| u8::from_str_radix(h, 16).ok());
                                    match hex {
                                        Some(b) => {
                                            arg.push(b);
                                            i += 2;
                                        }
                                        None => arg.push(b'x'),
                                    }
                                }
                                other => arg.push(other),
                            }
                        }
                        other => arg.push(other),
                    }
                }
                if line.get(i).is_some_and(|c| !c.is_ascii_whitespace()) {
                    return Err(ProtocolError::UnbalancedQuotes);
                }
            }
            b'\'' => {
                i += 1;
                loop {
                    let Some(&c) = line.get(i) else {
                        return Err(ProtocolError::UnbalancedQuotes);
                    };
                    i += 1;
                    if c == b'\'' {
                        break;
                    }
                    arg.push(c);
                }
                if line.get(i).is_some_and(|c| !c.is_ascii_whitespace()) {
                    return Err(ProtocolError::UnbalancedQuotes);
                }
            }
            _ => {
                while i < line.len() && !line[i].is_ascii_whitespace() {
                    arg.push(line[i]);
                    i += 1;
                }
            }
        }
        args.push(arg);
    }
    Ok(args)
}

/// The protocol version a connection speaks: RESP2 until `HELLO 3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Resp2,
    Resp3,
}

/// Appends replies to a buffer in the connection's protocol version.
pub struct Encoder<'a> {
    pub out: &'a mut Vec<u8>,
    pub version: Version,
}

impl<'a> Encoder<'a> {
    pub fn new(out: &'a mut Vec<u8>, version: Version) -> Self {
        Self { out, version }
    }

    fn line(&mut self, prefix: u8, body: &[u8]) {
        self.out.push(prefix);
        self.out.extend_from_slice(body);
        self.out.extend_from_slice(b"\r\n");
    }

    fn header(&mut self, prefix: u8, n: i64) {
        let mut buf = itoa_buf();
        let s = itoa(n, &mut buf);
        self.line(prefix, s);
    }

    /// `+text` (text must hold no CR or LF).
    pub fn simple(&mut self, text: &str) {
        self.line(b'+', text.as_bytes());
    }

    pub fn ok(&mut self) {
        self.out.extend_from_slice(b"+OK\r\n");
    }

    /// `-message`: the message starts with an error code (`ERR`, `WRONGTYPE`, …).
    /// CR and LF in it are replaced by spaces (they would end the reply early).
    pub fn error(&mut self, message: &str) {
        self.out.push(b'-');
        self.out.extend(
            message
                .bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        self.out.extend_from_slice(b"\r\n");
    }

    pub fn integer(&mut self, n: i64) {
        self.header(b':', n);
    }

    pub fn bulk(&mut self, bytes: &[u8]) {
        self.bulk_header(bytes.len());
        self.out.extend_from_slice(bytes);
        self.out.extend_from_slice(b"\r\n");
    }

    /// The `$len` line of a bulk string whose bytes the caller appends, then
    /// [`Encoder::bulk_end`].
    pub fn bulk_header(&mut self, len: usize) {
        self.header(b'$', i64::try_from(len).unwrap_or(i64::MAX));
    }

    pub fn bulk_end(&mut self) {
        self.out.extend_from_slice(b"\r\n");
    }

    /// The null reply: `$-1` in RESP2, `_` in RESP3.
    pub fn null(&mut self) {
        match self.version {
            Version::Resp2 => self.out.extend_from_slice(b"$-1\r\n"),
            Version::Resp3 => self.out.extend_from_slice(b"_\r\n"),
        }
    }

    /// The null array: `*-1` in RESP2, `_` in RESP3.
    pub fn null_array(&mut self) {
        match self.version {
            Version::Resp2 => self.out.extend_from_slice(b"*-1\r\n"),
            Version::Resp3 => self.out.extend_from_slice(b"_\r\n"),
        }
    }

    pub fn array(&mut self, len: usize) {
        self.header(b'*', i64::try_from(len).unwrap_or(i64::MAX));
    }

    /// A map of `pairs` entries: `%n` in RESP3, a flat array of 2n in RESP2.
    pub fn map(&mut self, pairs: usize) {
        match self.version {
            Version::Resp2 => self.array(pairs * 2),
            Version::Resp3 => self.header(b'%', i64::try_from(pairs).unwrap_or(i64::MAX)),
        }
    }

    /// A text blob (INFO): a verbatim string in RESP3, a bulk string in RESP2.
    pub fn text(&mut self, text: &str) {
        match self.version {
            Version::Resp2 => self.bulk(text.as_bytes()),
            Version::Resp3 => {
                self.header(b'=', i64::try_from(text.len() + 4).unwrap_or(i64::MAX));
                self.out.extend_from_slice(b"txt:");
                self.out.extend_from_slice(text.as_bytes());
                self.out.extend_from_slice(b"\r\n");
            }
        }
    }
}

fn itoa_buf() -> [u8; 20] {
    [0; 20]
}

/// `n` in decimal, written into the end of `buf` (20 bytes hold any i64).
fn itoa(n: i64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    let mut v = n.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if n < 0 {
        i -= 1;
        buf[i] = b'-';
    }
    &buf[i..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(buf: &[u8]) -> Vec<Vec<u8>> {
        let p = parse_command(buf).expect("valid").expect("complete");
        p.slices(buf).into_iter().map(<[u8]>::to_vec).collect()
    }

    #[test]
    fn parse_command_multibulk() {
        let buf = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n";
        assert_eq!(
            args(buf),
            vec![b"SET".to_vec(), b"k".to_vec(), b"".to_vec()]
        );
        let p = parse_command(buf).unwrap().unwrap();
        assert_eq!(p.consumed, buf.len());
    }

    #[test]
    fn parse_command_incomplete_at_every_prefix() {
        let buf = b"*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n";
        for n in 0..buf.len() {
            assert_eq!(parse_command(&buf[..n]), Ok(None), "prefix {n}");
        }
        assert!(parse_command(buf).unwrap().is_some());
    }

    #[test]
    fn parse_command_pipeline_takes_first_only() {
        let buf = b"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n";
        let p = parse_command(buf).unwrap().unwrap();
        assert_eq!(p.consumed, buf.len() / 2);
    }

    #[test]
    fn parse_command_rejects_bad_lengths() {
        assert_eq!(parse_command(b"*x\r\n"), Err(ProtocolError::BadArrayLength));
        assert_eq!(
            parse_command(b"*99999999\r\n"),
            Err(ProtocolError::BadArrayLength)
        );
        assert_eq!(
            parse_command(b"*1\r\n$-5\r\n"),
            Err(ProtocolError::BadBulkLength)
        );
        let huge = format!("*1\r\n${}\r\n", MAX_BULK_BYTES + 1);
        assert_eq!(
            parse_command(huge.as_bytes()),
            Err(ProtocolError::BadBulkLength)
        );
        assert_eq!(
            parse_command(b"*1\r\n:5\r\n"),
            Err(ProtocolError::ExpectedBulk(b':'))
        );
        assert_eq!(
            parse_command(b"*1\r\n$1\r\nabc"),
            Err(ProtocolError::MissingCrlf)
        );
        assert_eq!(
            parse_command(b"*1111111111111111111111111111111111"),
            Err(ProtocolError::HeaderTooLong)
        );
    }

    #[test]
    fn parse_command_total_size_is_bounded() {
        // 17 arguments of 1 MiB exceed MAX_COMMAND_BYTES before their bytes arrive.
        let mut buf = b"*20\r\n".to_vec();
        for _ in 0..16 {
            buf.extend_from_slice(format!("${MAX_BULK_BYTES}\r\n").as_bytes());
            buf.extend(std::iter::repeat_n(b'a', MAX_BULK_BYTES));
            buf.extend_from_slice(b"\r\n");
        }
        buf.extend_from_slice(format!("${MAX_BULK_BYTES}\r\n").as_bytes());
        assert_eq!(parse_command(&buf), Err(ProtocolError::CommandTooLarge));
    }

    /// Redis's limits for a client that has not authenticated where a password is
    /// required: 10 arguments, 16 KiB each, refused as soon as the length is read.
    #[test]
    fn parse_command_into_unauthenticated_limits() {
        let mut ranges = Vec::new();
        let eleven = b"*11\r\n";
        assert_eq!(
            parse_command_into(eleven, &mut ranges, false),
            Err(ProtocolError::UnauthenticatedArrayLength)
        );
        assert_eq!(parse_command_into(eleven, &mut ranges, true), Ok(None));
        let big = format!(
            "*2\r\n$4\r\nauth\r\n${}\r\n",
            UNAUTHENTICATED_MAX_BULK_BYTES + 1
        );
        assert_eq!(
            parse_command_into(big.as_bytes(), &mut ranges, false),
            Err(ProtocolError::UnauthenticatedBulkLength)
        );
        assert_eq!(
            parse_command_into(big.as_bytes(), &mut ranges, true),
            Ok(None)
        );
        // At the limits, a stranger's command parses.
        let mut at_limit = format!("*{UNAUTHENTICATED_MAX_ARGS}\r\n");
        let arg = "x".repeat(UNAUTHENTICATED_MAX_BULK_BYTES);
        for _ in 0..UNAUTHENTICATED_MAX_ARGS {
            at_limit.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        let parsed = parse_command_into(at_limit.as_bytes(), &mut ranges, false)
            .expect("within the limits")
            .expect("complete");
        assert_eq!(parsed.consumed, at_limit.len());
        assert_eq!(ranges.len(), UNAUTHENTICATED_MAX_ARGS);
        assert_eq!(
            ProtocolError::UnauthenticatedArrayLength.to_string(),
            "unauthenticated multibulk length"
        );
        assert_eq!(
            ProtocolError::UnauthenticatedBulkLength.to_string(),
            "unauthenticated bulk length"
        );
    }

    #[test]
    fn parse_command_empty_array_is_skipped() {
        let p = parse_command(b"*0\r\n").unwrap().unwrap();
        assert_eq!(p.consumed, 4);
        assert_eq!(p.args, Args::Ranges(vec![]));
    }

    #[test]
    fn parse_command_inline() {
        assert_eq!(args(b"PING\r\n"), vec![b"PING".to_vec()]);
        assert_eq!(
            args(b"set  k \"a b\\n\\x41\" 'c d'\n"),
            vec![
                b"set".to_vec(),
                b"k".to_vec(),
                b"a b\nA".to_vec(),
                b"c d".to_vec()
            ]
        );
        assert_eq!(parse_command(b"PING"), Ok(None));
        assert_eq!(
            parse_command(b"set \"k\n"),
            Err(ProtocolError::UnbalancedQuotes)
        );
        let long = vec![b'a'; MAX_INLINE_BYTES];
        assert_eq!(parse_command(&long), Err(ProtocolError::InlineTooLong));
    }

    #[test]
    fn parse_i64_strict() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b" 1",
            b"1 ",
            b"01",
            b"-0",
            b"9223372036854775808",
            b"1.5",
        ] {
            assert_eq!(parse_i64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn encoder_resp2_and_resp3() {
        let mut out = Vec::new();
        let mut e = Encoder::new(&mut out, Version::Resp2);
        e.null();
        e.integer(-42);
        e.map(1);
        e.bulk(b"x");
        e.error("ERR bad\r\nthing");
        assert_eq!(out, b"$-1\r\n:-42\r\n*2\r\n$1\r\nx\r\n-ERR bad  thing\r\n");
        let mut out = Vec::new();
        let mut e = Encoder::new(&mut out, Version::Resp3);
        e.null();
        e.map(2);
        e.text("a");
        assert_eq!(out, b"_\r\n%2\r\n=5\r\ntxt:a\r\n");
    }

    proptest::proptest! {
        #[test]
        fn parse_command_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let _ = parse_command(&bytes);
        }

        #[test]
        fn parse_command_roundtrips_encoded_args(
            argv in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..40), 1..8)
        ) {
            let mut buf = format!("*{}\r\n", argv.len()).into_bytes();
            for a in &argv {
                buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
                buf.extend_from_slice(a);
                buf.extend_from_slice(b"\r\n");
            }
            let p = parse_command(&buf).unwrap().unwrap();
            proptest::prop_assert_eq!(p.consumed, buf.len());
            let got: Vec<Vec<u8>> = p.slices(&buf).into_iter().map(<[u8]>::to_vec).collect();
            proptest::prop_assert_eq!(got, argv);
        }
    }
}
