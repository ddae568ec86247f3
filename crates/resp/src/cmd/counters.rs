//! Counter commands: INCR, DECR, INCRBY, DECRBY, INCRBYFLOAT.
//!
//! A counter is a decimal string, as in Redis, so GET after INCR shows `"1"`; the
//! stored form is `ramstore_wire::counter`'s, shared with the native `Increment`
//! (carried out by the master under the key's bucket lock), so Redis and native
//! counters are one. Here each is a read, a computation and a write with a
//! version check, retried on a lost race ([`super::MAX_CAS_ATTEMPTS`]); Redis runs
//! them atomically on its one thread. The errors are Redis's: a value that is not
//! an integer (or float), an overflow, a NaN or infinite result.

use ramstore_wire::counter::CounterText;

use super::{Command, Connection, ParseError, NOT_INTEGER};
use crate::long_double::{incr_by_float, LongDouble};
use crate::protocol::parse_i64;
use crate::sink::Sink;

pub(super) fn parse_incr<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [key] => Ok(Command::Incr { key, by: 1 }),
        _ => Err(ParseError::WrongArity("incr")),
    }
}

pub(super) fn parse_decr<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [key] => Ok(Command::Decr { key, by: -1 }),
        _ => Err(ParseError::WrongArity("decr")),
    }
}

pub(super) fn parse_incrby<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [key, by] => Ok(Command::IncrBy {
            key,
            by: parse_i64(by).ok_or(ParseError::NotInteger)?,
        }),
        _ => Err(ParseError::WrongArity("incrby")),
    }
}

pub(super) fn parse_decrby<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        // i64::MIN has no negation: Redis 7 answers "decrement would overflow".
        [key, by] => Ok(Command::DecrBy {
            key,
            by: parse_i64(by)
                .ok_or(ParseError::NotInteger)?
                .checked_neg()
                .ok_or(ParseError::DecrementOverflow)?,
        }),
        _ => Err(ParseError::WrongArity("decrby")),
    }
}

pub(super) fn parse_incrbyfloat<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [key, by] => Ok(Command::IncrByFloat {
            key,
            by: LongDouble::parse(by).ok_or(ParseError::NotFloat)?,
        }),
        _ => Err(ParseError::WrongArity("incrbyfloat")),
    }
}

impl Connection {
    /// INCR, DECR, INCRBY, DECRBY: adds `by` (negative to decrement).
    pub(super) async fn incr_by(&self, table: u64, key: &[u8], by: i64, sink: &mut Sink) {
        let r = self
            .read_modify_write(table, key, |old| {
                let current = match old {
                    None => 0,
                    Some(v) => parse_i64(v).ok_or_else(|| NOT_INTEGER.to_string())?,
                };
                let next = current
                    .checked_add(by)
                    .ok_or_else(|| "ERR increment or decrement would overflow".to_string())?;
                Ok(CounterText::from_i64(next).as_bytes().to_vec())
            })
            .await;
        self.reply_rmw(sink, r, |e, v| {
            // The value was just formatted from an i64.
            e.integer(parse_i64(&v).unwrap_or_default())
        });
    }

    /// INCRBYFLOAT: Redis's x87 `long double` sum and text (`long_double.rs`),
    /// not an `f64`'s.
    pub(super) async fn incr_by_float(
        &self,
        table: u64,
        key: &[u8],
        by: LongDouble,
        sink: &mut Sink,
    ) {
        let r = self
            .read_modify_write(table, key, |old| {
                incr_by_float(old, by)
                    .map(String::into_bytes)
                    .map_err(|e| e.to_string())
            })
            .await;
        self.reply_rmw(sink, r, |e, v| e.bulk(&v));
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;

    fn parsed(words: &[&str]) -> Result<String, String> {
        let frame: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        parse(&frame)
            .map(|c| format!("{} {c:?}", c.name()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn parse_counters_good_arguments() {
        assert_eq!(
            parsed(&["INCR", "k"]),
            Ok("incr Incr { key: [107], by: 1 }".into())
        );
        assert_eq!(
            parsed(&["decr", "k"]),
            Ok("decr Decr { key: [107], by: -1 }".into())
        );
        assert_eq!(
            parsed(&["incrby", "k", "-5"]),
            Ok("incrby IncrBy { key: [107], by: -5 }".into())
        );
        assert_eq!(
            parsed(&["decrby", "k", "9223372036854775807"]),
            Ok("decrby DecrBy { key: [107], by: -9223372036854775807 }".into())
        );
        assert_eq!(
            parsed(&["incrbyfloat", "k", "1.5"]),
            Ok("incrbyfloat IncrByFloat { key: [107], by: 1.5 }".into())
        );
    }

    #[test]
    fn parse_counters_wrong_arity() {
        for words in [
            &["incr"][..],
            &["incr", "k", "1"],
            &["decr"],
            &["incrby", "k"],
            &["decrby", "k", "1", "2"],
            &["incrbyfloat", "k"],
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
    fn parse_counters_bad_numbers() {
        let not_integer = Err("ERR value is not an integer or out of range".to_string());
        assert_eq!(parsed(&["incrby", "k", "x"]), not_integer);
        assert_eq!(parsed(&["incrby", "k", "1.5"]), not_integer);
        assert_eq!(parsed(&["incrby", "k", "9223372036854775808"]), not_integer);
        assert_eq!(
            parsed(&["decrby", "k", "-9223372036854775808"]),
            Err("ERR decrement would overflow".to_string())
        );
        let not_float = Err("ERR value is not a valid float".to_string());
        assert_eq!(parsed(&["incrbyfloat", "k", "x"]), not_float);
        assert_eq!(parsed(&["incrbyfloat", "k", "nan"]), not_float);
        // Redis reads `inf` and then refuses the infinite sum, not the operand.
        assert_eq!(
            parsed(&["incrbyfloat", "k", "inf"]),
            Ok("incrbyfloat IncrByFloat { key: [107], by: inf }".into())
        );
    }
}
