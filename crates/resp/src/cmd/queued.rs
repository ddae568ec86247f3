//! The data commands of a MULTI … EXEC block, run inside one ramstore transaction
//! (SOSP'15 §6; design notes "Transactions", "Redis MULTI/EXEC"): reads go
//! through [`Transaction::read`], which records the version commit checks; writes
//! and deletes are buffered in the transaction until commit. A command sees the
//! changes of the commands queued before it (the transaction answers its own
//! buffered writes), as in Redis, where EXEC runs the queue in order with nothing
//! in between. INCR and the other read-modify-writes are a read then a write of
//! the same object, so commit fails if anyone else changed it meanwhile, and EXEC
//! runs the whole queue again.
//!
//! A command's own error (INCR of a value that is not an integer, a syntax error
//! in SET's options) is its slot's reply, and the other commands still apply, as
//! in Redis. An error of the store (a server unreachable, the transaction over
//! its size limit) is the error of the whole EXEC, and nothing applies.

use ramstore_client::{ClientError, Transaction};
use ramstore_wire::counter::CounterText;

use super::bitpos::{bit_pos_args, bit_pos_missing};
use super::bits::{bit_count_args, get_bit, set_bit, set_range};
use super::lcs::encode_lcs;
use super::strings::{byte_range, Set, SetCondition};
use super::{Command, NOT_INTEGER};
use crate::long_double::incr_by_float;
use crate::protocol::{parse_i64, Encoder};

/// Whether `name` (a command's lower-case name) touches the current database
/// but has no transactional form: refused while queueing, which makes EXEC fail
/// with EXECABORT (see the module documentation of `multi`).
pub(super) fn refused_in_transaction(name: &str) -> bool {
    // SCAN, KEYS, DBSIZE and FLUSHDB walk a whole table, which a transaction of
    // at most MAX_TX_OBJECTS objects cannot read; RS.CAS answers the new version,
    // which is unknown until the commit.
    // The expiry commands change or read an object's expiry time, which a
    // transaction's buffered writes do not carry (`expiry.rs`).
    matches!(
        name,
        "scan"
            | "keys"
            | "dbsize"
            | "flushdb"
            | "flushall"
            | "rs.cas"
            | "setex"
            | "psetex"
            | "expire"
            | "pexpire"
            | "expireat"
            | "pexpireat"
            | "ttl"
            | "pttl"
            | "expiretime"
            | "pexpiretime"
            | "persist"
    )
}

/// Runs `command` on `table` inside `tx` and encodes its reply with `e`.
pub(super) async fn run_queued(
    tx: &mut Transaction,
    table: u64,
    command: Command<'_>,
    e: &mut Encoder<'_>,
) -> Result<(), ClientError> {
    match command {
        Command::Get { key } => match tx.read(table, key).await? {
            Some(v) => e.bulk(&v),
            None => e.null(),
        },
        Command::Set(set) if set.expiry != super::SetExpiry::Clear => {
            e.error("ERR 'set' with an expiry option cannot run inside MULTI on ramstore")
        }
        Command::Set(set) => set_in(tx, table, set, e).await?,
        Command::SetNx { key, value } => {
            let absent = tx.read(table, key).await?.is_none();
            if absent {
                tx.write(table, key, value)?;
            }
            e.integer(i64::from(absent));
        }
        Command::GetSet { key, value } => {
            let old = tx.read(table, key).await?;
            tx.write(table, key, value)?;
            match old {
                Some(v) => e.bulk(&v),
                None => e.null(),
            }
        }
        Command::MGet { keys } => {
            let mut values = Vec::with_capacity(keys.len());
            for key in keys {
                values.push(tx.read(table, key).await?);
            }
            e.array(values.len());
            for v in values {
                match v {
                    Some(v) => e.bulk(&v),
                    None => e.null(),
                }
            }
        }
        Command::MSet { pairs } => {
            for pair in pairs.chunks_exact(2) {
                tx.write(table, pair[0], pair[1])?;
            }
            e.ok();
        }
        Command::StrLen { key } => {
            let len = tx.read(table, key).await?.map_or(0, |v| v.len());
            e.integer(i64::try_from(len).unwrap_or(i64::MAX));
        }
        Command::GetRange {
            key, start, end, ..
        } => {
            let value = tx.read(table, key).await?.unwrap_or_default();
            e.bulk(&value[byte_range(value.len(), start, end)]);
        }
        Command::GetDel { key } => match tx.read(table, key).await? {
            Some(v) => {
                tx.remove(table, key)?;
                e.bulk(&v);
            }
            None => e.null(),
        },
        Command::GetEx { option, .. } if option != super::GetExOption::None => {
            e.error("ERR 'getex' with an expiry option cannot run inside MULTI on ramstore")
        }
        Command::GetEx { key, .. } => match tx.read(table, key).await? {
            Some(v) => e.bulk(&v),
            None => e.null(),
        },
        Command::SetRange { key, offset, value } => {
            let old = tx.read(table, key).await?;
            match set_range(old.as_deref(), offset, value) {
                Err(message) => e.error(message),
                // Nothing to write: the current length (0 if absent).
                Ok(None) => e.integer(len_of(old.as_deref().unwrap_or_default())),
                Ok(Some(v)) => {
                    tx.write(table, key, &v)?;
                    e.integer(len_of(&v));
                }
            }
        }
        Command::MSetNx { pairs } => {
            let mut any = false;
            for pair in pairs.chunks_exact(2) {
                any |= tx.read(table, pair[0]).await?.is_some();
            }
            if !any {
                for pair in pairs.chunks_exact(2) {
                    tx.write(table, pair[0], pair[1])?;
                }
            }
            e.integer(i64::from(!any));
        }
        Command::GetBit { key, offset } => {
            let bit = tx
                .read(table, key)
                .await?
                .is_some_and(|v| get_bit(&v, offset));
            e.integer(i64::from(bit));
        }
        Command::BitCount { key, args } => {
            let value = tx.read(table, key).await?;
            match value.map_or(Ok(0), |v| bit_count_args(&v, args)) {
                Ok(n) => e.integer(n),
                Err(message) => e.error(message),
            }
        }
        Command::Lcs { a, b, options } => {
            let a = tx.read(table, a).await?.unwrap_or_default();
            let b = tx.read(table, b).await?.unwrap_or_default();
            encode_lcs(e, &a, &b, options);
        }
        Command::BitPos { key, bit, args } => {
            let value = tx.read(table, key).await?;
            let answer = value.map_or(Ok(bit_pos_missing(bit)), |v| bit_pos_args(&v, bit, args));
            match answer {
                Ok(n) => e.integer(n),
                Err(message) => e.error(message),
            }
        }
        Command::SetBit { key, offset, on } => {
            let mut v = tx.read(table, key).await?.unwrap_or_default();
            let old = set_bit(&mut v, offset, on);
            tx.write(table, key, &v)?;
            e.integer(i64::from(old));
        }
        Command::Rename { key, new_key, nx } => rename(tx, table, key, new_key, nx, e).await?,
        Command::Copy {
            source,
            destination,
            replace,
        } => {
            if source == destination {
                e.error("ERR source and destination objects are the same");
            } else if let Some(v) = tx.read(table, source).await? {
                let blocked = !replace && tx.read(table, destination).await?.is_some();
                if !blocked {
                    tx.write(table, destination, &v)?;
                }
                e.integer(i64::from(!blocked));
            } else {
                e.integer(0);
            }
        }
        Command::Type { key } => {
            let found = tx.read(table, key).await?.is_some();
            e.simple(if found { "string" } else { "none" });
        }
        Command::Append { key, suffix } => {
            let mut v = tx.read(table, key).await?.unwrap_or_default();
            v.extend_from_slice(suffix);
            tx.write(table, key, &v)?;
            e.integer(i64::try_from(v.len()).unwrap_or(i64::MAX));
        }
        Command::GetV { key } => match tx.read_with_version(table, key).await? {
            (Some(v), version) => {
                e.array(2);
                e.bulk(&v);
                e.integer(i64::try_from(version).unwrap_or(i64::MAX));
            }
            (None, _) => e.null_array(),
        },
        Command::Incr { key, by }
        | Command::IncrBy { key, by }
        | Command::Decr { key, by }
        | Command::DecrBy { key, by } => {
            let current = match tx.read(table, key).await? {
                None => Some(0),
                Some(v) => parse_i64(&v),
            };
            match current.map(|c| c.checked_add(by)) {
                None => e.error(NOT_INTEGER),
                Some(None) => e.error("ERR increment or decrement would overflow"),
                Some(Some(next)) => {
                    tx.write(table, key, CounterText::from_i64(next).as_bytes())?;
                    e.integer(next);
                }
            }
        }
        Command::IncrByFloat { key, by } => {
            let current = tx.read(table, key).await?;
            match incr_by_float(current.as_deref(), by) {
                Err(why) => e.error(&why.to_string()),
                Ok(next) => {
                    tx.write(table, key, next.as_bytes())?;
                    e.bulk(next.as_bytes());
                }
            }
        }
        Command::Del { keys } | Command::Unlink { keys } => {
            // A key named twice counts once: the second read sees the buffered
            // remove, as Redis's second delete finds nothing.
            let mut removed = 0i64;
            for key in keys {
                if tx.read(table, key).await?.is_some() {
                    tx.remove(table, key)?;
                    removed += 1;
                }
            }
            e.integer(removed);
        }
        Command::Exists { keys } | Command::Touch { keys } => {
            let mut found = 0i64;
            for key in keys {
                found += i64::from(tx.read(table, key).await?.is_some());
            }
            e.integer(found);
        }
        other => e.error(&format!(
            "ERR '{}' cannot run inside MULTI on ramstore",
            other.name()
        )),
    }
    Ok(())
}

/// SET inside a transaction: NX and XX look at the value as the transaction sees
/// it; GET answers the old value whether or not the condition held.
async fn set_in(
    tx: &mut Transaction,
    table: u64,
    set: Set<'_>,
    e: &mut Encoder<'_>,
) -> Result<(), ClientError> {
    let old = if set.get || set.condition.is_some() {
        tx.read(table, set.key).await?
    } else {
        None
    };
    let allowed = match set.condition {
        Some(SetCondition::Absent) => old.is_none(),
        Some(SetCondition::Present) => old.is_some(),
        None => true,
    };
    if allowed {
        tx.write(table, set.key, set.value)?;
    }
    if set.get {
        match old {
            Some(v) => e.bulk(&v),
            None => e.null(),
        }
    } else if allowed {
        e.ok();
    } else {
        e.null();
    }
    Ok(())
}

/// RENAME and RENAMENX (`nx`), as Redis 7's `renameGenericCommand`: a missing
/// key is an error even when both names are the same; the same name otherwise
/// changes nothing (RENAMENX answers 0); RENAMENX onto an existing key answers
/// 0; else the value moves (the new key overwritten) and the old key goes.
async fn rename(
    tx: &mut Transaction,
    table: u64,
    key: &[u8],
    new_key: &[u8],
    nx: bool,
    e: &mut Encoder<'_>,
) -> Result<(), ClientError> {
    let Some(v) = tx.read(table, key).await? else {
        e.error("ERR no such key");
        return Ok(());
    };
    if key == new_key || (nx && tx.read(table, new_key).await?.is_some()) {
        if nx {
            e.integer(0);
        } else {
            e.ok();
        }
        return Ok(());
    }
    tx.write(table, new_key, &v)?;
    tx.remove(table, key)?;
    if nx {
        e.integer(1);
    } else {
        e.ok();
    }
    Ok(())
}

/// A length as RESP's integer.
fn len_of(v: &[u8]) -> i64 {
    i64::try_from(v.len()).unwrap_or(i64::MAX)
}
