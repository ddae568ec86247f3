//! Key expiry commands, with Redis 7's replies and error texts: EXPIRE,
//! PEXPIRE, EXPIREAT and PEXPIREAT (with NX/XX/GT/LT), TTL, PTTL, EXPIRETIME,
//! PEXPIRETIME, PERSIST, SETEX, PSETEX, GETEX's options, and the expiry
//! options SET shares with GETEX (EX/PX/EXAT/PXAT/KEEPTTL/PERSIST).
//!
//! The expiry lives in the object's log entry (R§4; design notes "Key
//! expiry"): a command turns its argument into an absolute wall-clock time
//! (the backend's clock, which is the server's) and the master stores it.
//! Reads treat an expired key as absent at once; the master's active expirer
//! deletes it later.
//!
//! Where ramstore differs from Redis: GETEX with an option is a read and then
//! an expiry change, not one atomic step (a write between them keeps the
//! expiry GETEX set); inside MULTI, the commands of this file and SET or
//! GETEX with an expiry option are not available.

use ramstore_client::{ExpireCondition, ExpiryChange};

use super::{eq, Command, Connection, ParseError};
use crate::protocol::parse_i64;
use crate::sink::Sink;

/// An expiry argument, checked: milliseconds, relative to now or absolute
/// (Redis's `getExpireMillisecondsOrReply` before it adds the time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    pub ms: i64,
    pub relative: bool,
}

impl Deadline {
    /// The absolute time in ms, or `None` if adding `now_ms` overflows (Redis
    /// answers "invalid expire time" then).
    pub fn at(self, now_ms: u64) -> Option<i64> {
        if !self.relative {
            return Some(self.ms);
        }
        self.ms.checked_add(i64::try_from(now_ms).ok()?)
    }
}

/// The expiry a SET asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetExpiry {
    /// No option: the key's expiry is cleared.
    #[default]
    Clear,
    /// KEEPTTL.
    Keep,
    /// EX, PX, EXAT or PXAT.
    At(Deadline),
}

/// GETEX's option, its time still unchecked: Redis checks it only once the
/// key is found (a missing key answers nil whatever the time says).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GetExOption<'a> {
    #[default]
    None,
    Persist,
    Expire {
        arg: &'a [u8],
        unit_ms: bool,
        absolute: bool,
    },
}

/// Which of the TTL family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlKind {
    Ttl,
    Pttl,
    ExpireTime,
    PExpireTime,
}

impl TtlKind {
    pub fn name(self) -> &'static str {
        match self {
            TtlKind::Ttl => "ttl",
            TtlKind::Pttl => "pttl",
            TtlKind::ExpireTime => "expiretime",
            TtlKind::PExpireTime => "pexpiretime",
        }
    }
}

/// EXPIRE and its family, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expire<'a> {
    pub key: &'a [u8],
    pub when: Deadline,
    pub condition: ExpireCondition,
    /// The command's lower-case name, for its error texts.
    pub name: &'static str,
}

/// An expiry option word of SET or GETEX, as Redis 7's
/// `parseExtendedStringArgumentsOrReply` sees it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Word {
    Ex,
    Px,
    ExAt,
    PxAt,
}

impl Word {
    pub(super) fn of(arg: &[u8]) -> Option<Self> {
        [
            ("ex", Word::Ex),
            ("px", Word::Px),
            ("exat", Word::ExAt),
            ("pxat", Word::PxAt),
        ]
        .into_iter()
        .find(|(w, _)| eq(arg, w))
        .map(|(_, word)| word)
    }

    pub(super) fn unit_ms(self) -> bool {
        matches!(self, Word::Px | Word::PxAt)
    }

    pub(super) fn absolute(self) -> bool {
        matches!(self, Word::ExAt | Word::PxAt)
    }
}

/// A SET-style time argument checked as Redis 7's
/// `getExpireMillisecondsOrReply` does: an integer, positive, and not
/// overflowing when made milliseconds.
pub(super) fn deadline(
    arg: &[u8],
    unit_ms: bool,
    relative: bool,
    name: &'static str,
) -> Result<Deadline, ParseError> {
    let v = parse_i64(arg).ok_or(ParseError::NotInteger)?;
    if v <= 0 || (!unit_ms && v > i64::MAX / 1000) {
        return Err(ParseError::InvalidExpireTime(name));
    }
    let ms = if unit_ms { v } else { v * 1000 };
    Ok(Deadline { ms, relative })
}

pub(super) fn parse_getex<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    let [key, options @ ..] = rest else {
        return Err(ParseError::WrongArity("getex"));
    };
    let mut option = GetExOption::None;
    let mut j = 0;
    while j < options.len() {
        let opt = options[j];
        let next = options.get(j + 1);
        let timed = matches!(option, GetExOption::Expire { .. });
        if let (Some(word), Some(&arg)) = (Word::of(opt), next) {
            // PERSIST, or another kind of time word, already given: syntax.
            let other = match option {
                GetExOption::Persist => true,
                GetExOption::Expire {
                    unit_ms, absolute, ..
                } => (unit_ms, absolute) != (word.unit_ms(), word.absolute()),
                GetExOption::None => false,
            };
            if other {
                return Err(ParseError::Syntax);
            }
            option = GetExOption::Expire {
                arg,
                unit_ms: word.unit_ms(),
                absolute: word.absolute(),
            };
            j += 1;
        } else if eq(opt, "persist") && !timed {
            option = GetExOption::Persist;
        } else {
            return Err(ParseError::Syntax);
        }
        j += 1;
    }
    Ok(Command::GetEx { key, option })
}

/// SETEX (`unit_ms` false) and PSETEX: key, time, value.
fn parse_setex_as<'a>(
    rest: &'a [&'a [u8]],
    unit_ms: bool,
    name: &'static str,
) -> Result<Command<'a>, ParseError> {
    let [key, time, value] = rest else {
        return Err(ParseError::WrongArity(name));
    };
    Ok(Command::SetEx {
        key,
        value,
        when: deadline(time, unit_ms, true, name)?,
        name,
    })
}

pub(super) fn parse_setex<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    parse_setex_as(rest, false, "setex")
}

pub(super) fn parse_psetex<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    parse_setex_as(rest, true, "psetex")
}

/// EXPIRE and its family, as Redis 7's `expireGenericCommand`: the options
/// first, then the number, then overflow.
fn parse_expire_as<'a>(
    rest: &'a [&'a [u8]],
    unit_ms: bool,
    relative: bool,
    name: &'static str,
) -> Result<Command<'a>, ParseError> {
    let [key, when, options @ ..] = rest else {
        return Err(ParseError::WrongArity(name));
    };
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in options {
        if eq(opt, "nx") {
            nx = true;
        } else if eq(opt, "xx") {
            xx = true;
        } else if eq(opt, "gt") {
            gt = true;
        } else if eq(opt, "lt") {
            lt = true;
        } else {
            return Err(ParseError::UnsupportedOption(
                String::from_utf8_lossy(opt).into_owned(),
            ));
        }
    }
    if nx && (xx || gt || lt) {
        return Err(ParseError::Message(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if gt && lt {
        return Err(ParseError::Message(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    let condition = match (nx, xx, gt, lt) {
        (true, ..) => ExpireCondition::Nx,
        // GT already needs an expiry: XX adds nothing to it.
        (_, _, true, _) => ExpireCondition::Gt,
        (_, true, _, true) => ExpireCondition::XxLt,
        (_, false, _, true) => ExpireCondition::Lt,
        (_, true, ..) => ExpireCondition::Xx,
        _ => ExpireCondition::Always,
    };
    let v = parse_i64(when).ok_or(ParseError::NotInteger)?;
    // Negative times are allowed (the key goes at once); only overflow is not.
    let ms = if unit_ms {
        v
    } else {
        v.checked_mul(1000)
            .ok_or(ParseError::InvalidExpireTime(name))?
    };
    Ok(Command::Expire(Expire {
        key,
        when: Deadline { ms, relative },
        condition,
        name,
    }))
}

pub(super) fn parse_expire<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    parse_expire_as(rest, false, true, "expire")
}

pub(super) fn parse_pexpire<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    parse_expire_as(rest, true, true, "pexpire")
}

pub(super) fn parse_expireat<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    parse_expire_as(rest, false, false, "expireat")
}

pub(super) fn parse_pexpireat<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    parse_expire_as(rest, true, false, "pexpireat")
}

fn parse_ttl_as<'a>(rest: &'a [&'a [u8]], kind: TtlKind) -> Result<Command<'a>, ParseError> {
    match rest {
        [key] => Ok(Command::Ttl { key, kind }),
        _ => Err(ParseError::WrongArity(kind.name())),
    }
}

pub(super) fn parse_ttl<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    parse_ttl_as(rest, TtlKind::Ttl)
}

pub(super) fn parse_pttl<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    parse_ttl_as(rest, TtlKind::Pttl)
}

pub(super) fn parse_expiretime<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    parse_ttl_as(rest, TtlKind::ExpireTime)
}

pub(super) fn parse_pexpiretime<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    parse_ttl_as(rest, TtlKind::PExpireTime)
}

pub(super) fn parse_persist<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [key] => Ok(Command::Persist { key }),
        _ => Err(ParseError::WrongArity("persist")),
    }
}

/// An absolute time in ms as the master stores it: a time before the epoch
/// is as past as the epoch.
fn stored(at_ms: i64) -> u64 {
    u64::try_from(at_ms).unwrap_or(0)
}

/// The error line of an expiry time that overflows for command `name`.
fn invalid_expire_time(name: &str) -> String {
    format!("ERR invalid expire time in '{name}' command")
}

/// The reply of the TTL family for a key expiring at `at` (`None`: never;
/// the outer `None`: no such key) at wall-clock time `now`.
pub fn ttl_reply(kind: TtlKind, expiry: Option<Option<u64>>, now: u64) -> i64 {
    let Some(expiry) = expiry else { return -2 };
    let Some(at) = expiry else { return -1 };
    let at_i = i64::try_from(at).unwrap_or(i64::MAX);
    let left = i64::try_from(at.saturating_sub(now)).unwrap_or(i64::MAX);
    match kind {
        // Redis rounds the seconds left to the nearest.
        TtlKind::Ttl => left.saturating_add(500) / 1000,
        TtlKind::Pttl => left,
        TtlKind::ExpireTime => at_i / 1000,
        TtlKind::PExpireTime => at_i,
    }
}

impl Connection {
    pub(super) async fn expire(&self, table: u64, e: Expire<'_>, sink: &mut Sink) {
        let backend = &self.shared.backend;
        let Some(at) = e.when.at(backend.now_ms()) else {
            return self.error(sink, &invalid_expire_time(e.name));
        };
        let o = backend
            .set_expiry(table, e.key, Some(stored(at)), e.condition)
            .await;
        self.finish(sink, o, |enc, changed| enc.integer(i64::from(changed)));
    }

    pub(super) async fn ttl(&self, table: u64, key: &[u8], kind: TtlKind, sink: &mut Sink) {
        let backend = &self.shared.backend;
        let o = backend.expiry(table, key).await;
        let now = backend.now_ms();
        self.finish(sink, o, move |enc, expiry| {
            enc.integer(ttl_reply(kind, expiry, now))
        });
    }

    pub(super) async fn persist(&self, table: u64, key: &[u8], sink: &mut Sink) {
        let o = self
            .shared
            .backend
            .set_expiry(table, key, None, ExpireCondition::Xx)
            .await;
        self.finish(sink, o, |enc, changed| enc.integer(i64::from(changed)));
    }

    pub(super) async fn setex(
        &self,
        table: u64,
        (key, value): (&[u8], &[u8]),
        when: Deadline,
        name: &'static str,
        sink: &mut Sink,
    ) {
        let backend = &self.shared.backend;
        let Some(at) = when.at(backend.now_ms()) else {
            return self.error(sink, &invalid_expire_time(name));
        };
        let o = backend
            .write_expiring(
                table,
                key,
                value,
                Default::default(),
                ExpiryChange::At(stored(at)),
            )
            .await;
        self.finish(sink, o, |enc, _| enc.ok());
    }

    /// GETEX: the value, then its expiry changed as the option says (a read,
    /// then an expiry change: see the module doc).
    pub(super) async fn getex(
        &mut self,
        table: u64,
        key: &[u8],
        option: GetExOption<'_>,
        sink: &mut Sink,
    ) {
        if option == GetExOption::None {
            return self.get(table, key, sink).await;
        }
        let backend = &self.shared.backend;
        let value = match backend.read(table, key).await.resolve().await {
            Ok(Some((value, _))) => value,
            Ok(None) => return sink.reply(self.version, |e| e.null()),
            Err(err) => return self.store_error(sink, &err),
        };
        let change = match option {
            GetExOption::Persist => backend.set_expiry(table, key, None, ExpireCondition::Xx),
            GetExOption::Expire {
                arg,
                unit_ms,
                absolute,
            } => {
                let at = match deadline(arg, unit_ms, !absolute, "getex") {
                    Ok(d) => d.at(backend.now_ms()),
                    Err(e) => return self.error(sink, &e.to_string()),
                };
                let Some(at) = at else {
                    return self.error(sink, &invalid_expire_time("getex"));
                };
                backend.set_expiry(table, key, Some(stored(at)), ExpireCondition::Always)
            }
            GetExOption::None => return,
        }
        .await;
        self.finish(sink, change, move |e, _| e.bulk(&value));
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    fn err(words: &[&[u8]]) -> String {
        match parse(words) {
            Ok(c) => panic!("parsed as {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn parse_set_options_match_redis_7() {
        let syntax = "ERR syntax error";
        assert_eq!(
            err(&[b"set", b"k", b"v", b"EX", b"10", b"PX", b"100"]),
            syntax
        );
        assert_eq!(err(&[b"set", b"k", b"v", b"KEEPTTL", b"EX", b"5"]), syntax);
        assert_eq!(err(&[b"set", b"k", b"v", b"EX", b"5", b"KEEPTTL"]), syntax);
        assert_eq!(err(&[b"set", b"k", b"v", b"EX"]), syntax);
        assert_eq!(
            err(&[b"set", b"k", b"v", b"EX", b"abc", b"NX", b"XX"]),
            syntax
        );
        assert_eq!(
            err(&[b"set", b"k", b"v", b"EX", b"abc"]),
            "ERR value is not an integer or out of range"
        );
        for bad in [&b"0"[..], b"-1", b"99999999999999999"] {
            assert_eq!(
                err(&[b"set", b"k", b"v", b"EX", bad]),
                "ERR invalid expire time in 'set' command"
            );
        }
        let Ok(Command::Set(set)) = parse(&[b"set", b"k", b"v", b"EX", b"10", b"EX", b"20"]) else {
            panic!("EX twice parses, the last wins");
        };
        assert_eq!(
            set.expiry,
            SetExpiry::At(Deadline {
                ms: 20_000,
                relative: true
            })
        );
        let Ok(Command::Set(set)) = parse(&[b"set", b"k", b"v", b"pxat", b"7", b"get"]) else {
            panic!("PXAT parses");
        };
        assert_eq!(
            (set.get, set.expiry),
            (
                true,
                SetExpiry::At(Deadline {
                    ms: 7,
                    relative: false
                })
            )
        );
    }

    #[test]
    fn parse_setex_psetex_errors() {
        assert_eq!(
            err(&[b"setex", b"k", b"0", b"v"]),
            "ERR invalid expire time in 'setex' command"
        );
        assert_eq!(
            err(&[b"psetex", b"k", b"-1", b"v"]),
            "ERR invalid expire time in 'psetex' command"
        );
        assert_eq!(
            err(&[b"setex", b"k", b"abc", b"v"]),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            err(&[b"setex", b"k", b"10"]),
            "ERR wrong number of arguments for 'setex' command"
        );
    }

    #[test]
    fn parse_expire_options_match_redis_7() {
        assert_eq!(
            err(&[b"expire", b"k", b"10", b"nx", b"xx"]),
            "ERR NX and XX, GT or LT options at the same time are not compatible"
        );
        assert_eq!(
            err(&[b"expire", b"k", b"10", b"gt", b"lt"]),
            "ERR GT and LT options at the same time are not compatible"
        );
        assert_eq!(
            err(&[b"expire", b"k", b"abc", b"bogus"]),
            "ERR Unsupported option bogus"
        );
        assert_eq!(
            err(&[b"expire", b"k", b"abc"]),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            err(&[b"expire", b"k", b"9223372036854775807"]),
            "ERR invalid expire time in 'expire' command"
        );
        assert_eq!(
            err(&[b"expire", b"k"]),
            "ERR wrong number of arguments for 'expire' command"
        );
        let Ok(Command::Expire(e)) = parse(&[b"pexpireat", b"k", b"-5", b"XX", b"LT"]) else {
            panic!("PEXPIREAT parses");
        };
        assert_eq!(
            (e.when, e.condition, e.name),
            (
                Deadline {
                    ms: -5,
                    relative: false
                },
                ExpireCondition::XxLt,
                "pexpireat"
            )
        );
    }

    #[test]
    fn parse_getex_options_match_redis_7() {
        let syntax = "ERR syntax error";
        assert_eq!(err(&[b"getex", b"k", b"persist", b"px", b"10"]), syntax);
        assert_eq!(err(&[b"getex", b"k", b"px", b"10", b"ex", b"10"]), syntax);
        assert_eq!(err(&[b"getex", b"k", b"ex", b"10", b"persist"]), syntax);
        assert_eq!(err(&[b"getex", b"k", b"keepttl"]), syntax);
        assert_eq!(err(&[b"getex", b"k", b"ex"]), syntax);
        assert!(matches!(
            parse(&[b"getex", b"k", b"persist", b"persist"]),
            Ok(Command::GetEx {
                option: GetExOption::Persist,
                ..
            })
        ));
        // The time is checked only once the key is found.
        assert!(matches!(
            parse(&[b"getex", b"k", b"ex", b"abc"]),
            Ok(Command::GetEx {
                option: GetExOption::Expire { .. },
                ..
            })
        ));
    }

    #[test]
    fn ttl_reply_matches_redis() {
        let now = 1_000_000;
        assert_eq!(ttl_reply(TtlKind::Ttl, None, now), -2);
        assert_eq!(ttl_reply(TtlKind::Pttl, Some(None), now), -1);
        assert_eq!(ttl_reply(TtlKind::Ttl, Some(Some(now + 1_499)), now), 1);
        assert_eq!(ttl_reply(TtlKind::Ttl, Some(Some(now + 1_500)), now), 2);
        assert_eq!(
            ttl_reply(TtlKind::Pttl, Some(Some(now + 1_500)), now),
            1_500
        );
        assert_eq!(ttl_reply(TtlKind::Pttl, Some(Some(now - 5)), now), 0);
        assert_eq!(
            ttl_reply(TtlKind::ExpireTime, Some(Some(1_700_000_000_999)), now),
            1_700_000_000
        );
        assert_eq!(
            ttl_reply(TtlKind::PExpireTime, Some(Some(1_700_000_000_999)), now),
            1_700_000_000_999
        );
    }
}
