//! String commands: GET, SET, SETNX, GETSET, MGET, MSET, STRLEN, APPEND, and the
//! extensions RS.GETV and RS.CAS, each one or a few object operations on the
//! current database's table.
//!
//! SET's expiry options (EX, PX, EXAT, PXAT, KEEPTTL) are parsed in
//! `expiry.rs`, with the other expiry commands.
//!
//! Where ramstore differs from Redis: SET … GET, GETSET and APPEND read, compute and write with a version check,
//! retried on a lost race (Redis runs them atomically on its one thread); MGET
//! and MSET are one operation per key, so MSET is not atomic across keys. RS.GETV
//! and RS.CAS expose ramstore's object versions (R§4: every object has one).
//! GET is the hot path: its value is read into the connection's reused buffer
//! and encoded from there, with no allocation.

use ramstore_client::RejectRules;

use super::expiry::{deadline, SetExpiry, Word};
use super::{
    eq, join, too_big_reply, Command, Connection, ParseError, MAX_CAS_ATTEMPTS, MAX_REPLY_BYTES,
};
use crate::backend::{Outcome, ReadInto, ReadResult, StoreError, WriteResult};
use crate::protocol::parse_i64;
use crate::sink::Sink;
use ramstore_client::ExpiryChange;

/// Largest GET value buffer a connection keeps between commands, in bytes.
pub const MAX_KEPT_VALUE_BUFFER: usize = 64 * 1024;

/// SET's NX or XX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetCondition {
    /// NX: only if the key does not exist.
    Absent,
    /// XX: only if the key exists.
    Present,
}

/// SET's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Set<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub condition: Option<SetCondition>,
    /// GET: reply with the old value.
    pub get: bool,
    /// EX/PX/EXAT/PXAT, KEEPTTL, or neither (the TTL is cleared).
    pub expiry: SetExpiry,
}

pub(super) fn parse_get<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [key] => Ok(Command::Get { key }),
        _ => Err(ParseError::WrongArity("get")),
    }
}

pub(super) fn parse_set<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    let [key, value, options @ ..] = rest else {
        return Err(ParseError::WrongArity("set"));
    };
    let (condition, get, expiry) = parse_set_options(options)?;
    Ok(Command::Set(Set {
        key,
        value,
        condition,
        get,
        expiry,
    }))
}

/// SET's options after key and value, as Redis 7 parses them: every word is
/// checked for syntax first (a time word may repeat, the last wins; KEEPTTL
/// and a time exclude each other), then the time. Returns the condition, GET
/// and the expiry.
fn parse_set_options(
    options: &[&[u8]],
) -> Result<(Option<SetCondition>, bool, SetExpiry), ParseError> {
    let (mut condition, mut get, mut keep) = (None, false, false);
    let mut time: Option<(Word, &[u8])> = None;
    let mut j = 0;
    while j < options.len() {
        let opt = options[j];
        let next = options.get(j + 1);
        if eq(opt, "nx") && condition != Some(SetCondition::Present) {
            condition = Some(SetCondition::Absent);
        } else if eq(opt, "xx") && condition != Some(SetCondition::Absent) {
            condition = Some(SetCondition::Present);
        } else if eq(opt, "get") {
            get = true;
        } else if eq(opt, "keepttl") && time.is_none() {
            keep = true;
        } else if let (Some(word), Some(&arg)) = (Word::of(opt), next) {
            // Another kind of time word, or KEEPTTL, already given: syntax.
            if keep || time.is_some_and(|(w, _)| w != word) {
                return Err(ParseError::Syntax);
            }
            time = Some((word, arg));
            j += 1;
        } else {
            return Err(ParseError::Syntax);
        }
        j += 1;
    }
    let expiry = match time {
        Some((word, arg)) => SetExpiry::At(deadline(arg, word.unit_ms(), !word.absolute(), "set")?),
        None if keep => SetExpiry::Keep,
        None => SetExpiry::Clear,
    };
    Ok((condition, get, expiry))
}

pub(super) fn parse_setnx<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [key, value] => Ok(Command::SetNx { key, value }),
        _ => Err(ParseError::WrongArity("setnx")),
    }
}

pub(super) fn parse_getset<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [key, value] => Ok(Command::GetSet { key, value }),
        _ => Err(ParseError::WrongArity("getset")),
    }
}

pub(super) fn parse_mget<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    Ok(Command::MGet { keys: rest })
}

pub(super) fn parse_mset<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Err(ParseError::WrongArity("mset"));
    }
    Ok(Command::MSet { pairs: rest })
}

pub(super) fn parse_strlen<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [key] => Ok(Command::StrLen { key }),
        _ => Err(ParseError::WrongArity("strlen")),
    }
}

pub(super) fn parse_getrange<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    range_of(rest, false, "getrange")
}

pub(super) fn parse_substr<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    range_of(rest, true, "substr")
}

fn range_of<'a>(
    rest: &'a [&'a [u8]],
    substr: bool,
    name: &'static str,
) -> Result<Command<'a>, ParseError> {
    match rest {
        [key, start, end] => Ok(Command::GetRange {
            key,
            start: parse_i64(start).ok_or(ParseError::NotInteger)?,
            end: parse_i64(end).ok_or(ParseError::NotInteger)?,
            substr,
        }),
        _ => Err(ParseError::WrongArity(name)),
    }
}

pub(super) fn parse_getdel<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [key] => Ok(Command::GetDel { key }),
        _ => Err(ParseError::WrongArity("getdel")),
    }
}

pub(super) fn parse_setrange<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [key, offset, value] => {
            let offset = parse_i64(offset).ok_or(ParseError::NotInteger)?;
            Ok(Command::SetRange {
                key,
                offset: u64::try_from(offset)
                    .map_err(|_| ParseError::Message("ERR offset is out of range"))?,
                value,
            })
        }
        _ => Err(ParseError::WrongArity("setrange")),
    }
}

pub(super) fn parse_msetnx<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Err(ParseError::WrongArity("msetnx"));
    }
    Ok(Command::MSetNx { pairs: rest })
}

/// The bytes GETRANGE answers of a value of `len` bytes: Redis 7's
/// `getrangeCommand` ([`clamp_range`]); empty when nothing is left.
pub(super) fn byte_range(len: usize, start: i64, end: i64) -> std::ops::Range<usize> {
    match super::offsets::clamp_range(i64::try_from(len).unwrap_or(i64::MAX), start, end) {
        // In range: 0 <= start <= end < len.
        Some((start, end)) => start as usize..end as usize + 1,
        None => 0..0,
    }
}

pub(super) fn parse_append<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [key, suffix] => Ok(Command::Append { key, suffix }),
        _ => Err(ParseError::WrongArity("append")),
    }
}

pub(super) fn parse_getv<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [key] => Ok(Command::GetV { key }),
        _ => Err(ParseError::WrongArity("rs.getv")),
    }
}

pub(super) fn parse_cas<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    let [key, version, value] = rest else {
        return Err(ParseError::WrongArity("rs.cas"));
    };
    let version = std::str::from_utf8(version)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or(ParseError::NotInteger)?;
    Ok(Command::Cas {
        key,
        version,
        value,
    })
}

impl Connection {
    pub(super) async fn get(&mut self, table: u64, key: &[u8], sink: &mut Sink) {
        let mut value = std::mem::take(&mut self.value);
        match self.shared.backend.read_into(table, key, &mut value).await {
            ReadInto::Ready(Ok(found)) => sink.reply(self.version, |e| match found {
                Some(_) => e.bulk(&value),
                None => e.null(),
            }),
            ReadInto::Ready(Err(err)) => self.store_error(sink, &err),
            ReadInto::Pending(f) => self.finish(sink, Outcome::Pending(f), |e, r| match r {
                Some((v, _)) => e.bulk(&v),
                None => e.null(),
            }),
        }
        // A huge value's buffer is not kept for the connection's life.
        if value.capacity() <= MAX_KEPT_VALUE_BUFFER {
            value.clear();
            self.value = value;
        }
    }

    pub(super) async fn set(&self, table: u64, set: Set<'_>, sink: &mut Sink) {
        let backend = &self.shared.backend;
        let expiry = match set.expiry {
            SetExpiry::Clear => ExpiryChange::Clear,
            SetExpiry::Keep => ExpiryChange::Keep,
            SetExpiry::At(d) => match d.at(backend.now_ms()) {
                Some(at) => ExpiryChange::At(u64::try_from(at).unwrap_or(0)),
                None => return self.error(sink, "ERR invalid expire time in 'set' command"),
            },
        };
        if set.get {
            let r = self
                .set_get(table, (set.key, set.value), set.condition, expiry)
                .await;
            return match r {
                Ok(old) => self.reply_read(sink, old),
                Err(e) => self.store_error(sink, &e),
            };
        }
        let rules = match set.condition {
            Some(SetCondition::Absent) => RejectRules::must_not_exist(),
            Some(SetCondition::Present) => RejectRules::must_exist(),
            None => RejectRules::default(),
        };
        // A plain SET takes the write path every other write takes; only an
        // expiry option needs the expiring one.
        let o = match expiry {
            ExpiryChange::Clear => backend.write(table, set.key, set.value, rules).await,
            other => {
                backend
                    .write_expiring(table, set.key, set.value, rules, other)
                    .await
            }
        };
        self.finish(sink, o, |e, r| match r {
            WriteResult::Written(_) => e.ok(),
            _ => e.null(),
        });
    }

    pub(super) async fn setnx(&self, table: u64, key: &[u8], value: &[u8], sink: &mut Sink) {
        let rules = RejectRules::must_not_exist();
        let o = self.shared.backend.write(table, key, value, rules).await;
        self.finish(sink, o, |e, r| {
            e.integer(i64::from(matches!(r, WriteResult::Written(_))))
        });
    }

    pub(super) async fn getset(&self, table: u64, key: &[u8], value: &[u8], sink: &mut Sink) {
        match self
            .set_get(table, (key, value), None, ExpiryChange::Clear)
            .await
        {
            Ok(old) => self.reply_read(sink, old),
            Err(e) => self.store_error(sink, &e),
        }
    }

    /// SET key value with GET: writes `value` (with `expiry`) unless
    /// `condition` fails, and returns the old value either way.
    async fn set_get(
        &self,
        table: u64,
        (key, value): (&[u8], &[u8]),
        condition: Option<SetCondition>,
        expiry: ExpiryChange,
    ) -> Result<ReadResult, StoreError> {
        let backend = &self.shared.backend;
        for _ in 0..MAX_CAS_ATTEMPTS {
            let current = backend.read(table, key).await.resolve().await?;
            let allowed = match condition {
                Some(SetCondition::Absent) => current.is_none(),
                Some(SetCondition::Present) => current.is_some(),
                None => true,
            };
            if !allowed {
                return Ok(current);
            }
            let rules = match &current {
                Some((_, version)) => RejectRules::version_must_equal(*version),
                None => RejectRules::must_not_exist(),
            };
            if let WriteResult::Written(_) = backend
                .write_expiring(table, key, value, rules, expiry)
                .await
                .resolve()
                .await?
            {
                return Ok(current);
            }
        }
        Err(StoreError::NotDurable(format!(
            "key changed concurrently {MAX_CAS_ATTEMPTS} times in a row"
        )))
    }

    pub(super) async fn mget(&self, table: u64, keys: &[&[u8]], sink: &mut Sink) {
        let mut outcomes = Vec::with_capacity(keys.len());
        let mut bytes = 0usize;
        for key in keys {
            let o = self.shared.backend.read(table, key).await;
            if let Outcome::Ready(Ok(Some((v, _)))) = &o {
                bytes += v.len();
                if bytes > MAX_REPLY_BYTES {
                    return self.error(sink, &too_big_reply());
                }
            }
            outcomes.push(o);
        }
        self.finish(sink, join(outcomes), |e, values: Vec<ReadResult>| {
            e.array(values.len());
            for v in values {
                match v {
                    Some((v, _)) => e.bulk(&v),
                    None => e.null(),
                }
            }
        });
    }

    pub(super) async fn mset(&self, table: u64, pairs: &[&[u8]], sink: &mut Sink) {
        let mut outcomes = Vec::with_capacity(pairs.len() / 2);
        for pair in pairs.chunks_exact(2) {
            let rules = RejectRules::default();
            outcomes.push(
                self.shared
                    .backend
                    .write(table, pair[0], pair[1], rules)
                    .await,
            );
        }
        self.finish(sink, join(outcomes), |e, _| e.ok());
    }

    pub(super) async fn strlen(&self, table: u64, key: &[u8], sink: &mut Sink) {
        let o = self.shared.backend.read(table, key).await;
        self.finish(sink, o, |e, r| {
            e.integer(r.map_or(0, |(v, _)| i64::try_from(v.len()).unwrap_or(i64::MAX)))
        });
    }

    pub(super) async fn getrange(
        &self,
        table: u64,
        key: &[u8],
        start: i64,
        end: i64,
        sink: &mut Sink,
    ) {
        let o = self.shared.backend.read(table, key).await;
        self.finish(sink, o, move |e, r| {
            let value = r.map(|(v, _)| v).unwrap_or_default();
            e.bulk(&value[byte_range(value.len(), start, end)]);
        });
    }

    /// BITCOUNT: one read.
    pub(super) async fn bitcount(&self, table: u64, key: &[u8], args: &[&[u8]], sink: &mut Sink) {
        let o = self.shared.backend.read(table, key).await;
        // The reply may be encoded after this call returns (a forwarded read):
        // the few argument bytes go with it.
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
        self.finish(sink, o, move |e, r| {
            let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            match r.map_or(Ok(0), |(v, _)| super::bits::bit_count_args(&v, &args)) {
                Ok(n) => e.integer(n),
                Err(message) => e.error(message),
            }
        });
    }

    /// BITPOS outside MULTI: one read.
    pub(super) async fn bitpos(
        &self,
        table: u64,
        key: &[u8],
        bit: bool,
        args: &[&[u8]],
        sink: &mut Sink,
    ) {
        let o = self.shared.backend.read(table, key).await;
        // As BITCOUNT's: the reply may be encoded after this call returns.
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
        self.finish(sink, o, move |e, r| {
            let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            let answer = r.map_or(Ok(super::bitpos::bit_pos_missing(bit)), |(v, _)| {
                super::bitpos::bit_pos_args(&v, bit, &args)
            });
            match answer {
                Ok(n) => e.integer(n),
                Err(message) => e.error(message),
            }
        });
    }

    /// GETBIT outside MULTI: one read (nothing to keep atomic).
    pub(super) async fn getbit(&self, table: u64, key: &[u8], offset: u64, sink: &mut Sink) {
        let o = self.shared.backend.read(table, key).await;
        self.finish(sink, o, move |e, r| {
            let bit = r.is_some_and(|(v, _)| super::bits::get_bit(&v, offset));
            e.integer(i64::from(bit));
        });
    }

    pub(super) async fn append(&self, table: u64, key: &[u8], suffix: &[u8], sink: &mut Sink) {
        let r = self
            .read_modify_write(table, key, |old| {
                let mut v = old.map(<[u8]>::to_vec).unwrap_or_default();
                v.extend_from_slice(suffix);
                Ok(v)
            })
            .await;
        self.reply_rmw(sink, r, |e, v| {
            e.integer(i64::try_from(v.len()).unwrap_or(i64::MAX))
        });
    }

    pub(super) async fn getv(&self, table: u64, key: &[u8], sink: &mut Sink) {
        let o = self.shared.backend.read(table, key).await;
        self.finish(sink, o, |e, r| match r {
            Some((v, version)) => {
                e.array(2);
                e.bulk(&v);
                e.integer(i64::try_from(version).unwrap_or(i64::MAX));
            }
            None => e.null_array(),
        });
    }

    pub(super) async fn cas(
        &self,
        table: u64,
        key: &[u8],
        version: u64,
        value: &[u8],
        sink: &mut Sink,
    ) {
        let rules = if version == 0 {
            RejectRules::must_not_exist()
        } else {
            RejectRules::version_must_equal(version)
        };
        let o = self.shared.backend.write(table, key, value, rules).await;
        self.finish(sink, o, |e, r| match r {
            WriteResult::Written(v) => e.integer(i64::try_from(v).unwrap_or(i64::MAX)),
            _ => e.null(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    fn parsed(words: &[&str]) -> Result<Command<'static>, String> {
        // Leaked so the parsed command may borrow the frame (tests only).
        let frame: Vec<&'static [u8]> = words
            .iter()
            .map(|w| &*Box::leak(w.as_bytes().to_vec().into_boxed_slice()))
            .collect();
        parse(Box::leak(frame.into_boxed_slice())).map_err(|e| e.to_string())
    }

    #[test]
    fn parse_string_commands_good_arguments() {
        assert_eq!(parsed(&["GET", "k"]), Ok(Command::Get { key: b"k" }));
        assert_eq!(
            parsed(&["set", "k", "v", "xx", "GET", "keepttl"]),
            Ok(Command::Set(Set {
                key: b"k",
                value: b"v",
                condition: Some(SetCondition::Present),
                get: true,
                expiry: SetExpiry::Keep,
            }))
        );
        assert_eq!(
            parsed(&["set", "k", "v", "nx", "nx"]),
            Ok(Command::Set(Set {
                key: b"k",
                value: b"v",
                condition: Some(SetCondition::Absent),
                get: false,
                expiry: SetExpiry::Clear,
            }))
        );
        assert!(
            matches!(parsed(&["mset", "a", "1", "b", "2"]), Ok(Command::MSet { pairs }) if pairs.len() == 4)
        );
        assert!(
            matches!(parsed(&["mget", "a", "b"]), Ok(Command::MGet { keys }) if keys.len() == 2)
        );
        assert_eq!(
            parsed(&["rs.cas", "k", "18446744073709551615", "v"]),
            Ok(Command::Cas {
                key: b"k",
                version: u64::MAX,
                value: b"v"
            })
        );
        assert_eq!(
            parsed(&["append", "k", "s"]),
            Ok(Command::Append {
                key: b"k",
                suffix: b"s"
            })
        );
    }

    #[test]
    fn parse_string_commands_wrong_arity() {
        for words in [
            &["get"][..],
            &["get", "a", "b"],
            &["set", "k"],
            &["setnx", "k"],
            &["getset", "k", "v", "w"],
            &["mget"],
            &["mset", "k"],
            &["mset", "a", "1", "b"],
            &["strlen"],
            &["append", "k"],
            &["rs.getv"],
            &["rs.cas", "k", "1"],
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

    #[test]
    fn parse_string_commands_bad_options() {
        assert_eq!(
            parsed(&["set", "k", "v", "nx", "xx"]),
            Err("ERR syntax error".into())
        );
        assert_eq!(
            parsed(&["set", "k", "v", "bogus"]),
            Err("ERR syntax error".into())
        );
        assert_eq!(
            parsed(&["set", "k", "v", "EX", "0"]),
            Err("ERR invalid expire time in 'set' command".into())
        );
        assert_eq!(
            parsed(&["rs.cas", "k", "-1", "v"]),
            Err("ERR value is not an integer or out of range".into())
        );
    }

    /// Redis 7's `getrangeCommand`, case by case: its documented examples, the
    /// clamps, and the quirk that two negative offsets past the start still
    /// answer the first byte.
    #[test]
    fn byte_range_matches_redis_getrange() {
        let v = b"This is a string";
        let got = |start, end| &v[byte_range(v.len(), start, end)];
        assert_eq!(got(0, 3), b"This");
        assert_eq!(got(-3, -1), b"ing");
        assert_eq!(got(0, -1), &v[..]);
        assert_eq!(got(10, 100), b"string");
        assert_eq!(got(5, 2), b"");
        assert_eq!(got(-1, -5), b"", "both negative, start after end");
        assert_eq!(got(100, 200), b"");
        assert_eq!(got(-100, -50), b"T", "both clamp to 0");
        assert_eq!(got(15, 15), b"g");
        assert_eq!(got(i64::MIN, i64::MAX), &v[..]);
        assert_eq!(byte_range(0, 0, -1), 0..0, "an empty value");
    }

    #[test]
    fn parse_getrange_substr_getdel() {
        assert!(matches!(
            parse(&[b"GETRANGE", b"k", b"-3", b"7"]),
            Ok(Command::GetRange {
                start: -3,
                end: 7,
                substr: false,
                ..
            })
        ));
        assert!(matches!(
            parse(&[b"substr", b"k", b"0", b"1"]),
            Ok(Command::GetRange { substr: true, .. })
        ));
        assert_eq!(
            parse(&[b"GETRANGE", b"k", b"x", b"1"]).map(|c| c.name()),
            Err(ParseError::NotInteger)
        );
        assert_eq!(
            parse(&[b"GETRANGE", b"k", b"1"]).map(|c| c.name()),
            Err(ParseError::WrongArity("getrange"))
        );
        assert!(matches!(
            parse(&[b"getdel", b"k"]),
            Ok(Command::GetDel { key: b"k" })
        ));
    }
}
