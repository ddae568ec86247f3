//! `ramstore tx`: a small script of reads and writes from stdin, run as one
//! transaction (issue 21; design notes "Transactions"). One operation a line:
//!
//! ```text
//! get TABLE KEY
//! put TABLE KEY VALUE...    (the value is the rest of the line)
//! del TABLE KEY
//! incr TABLE KEY [N]        (a decimal counter, as `ramstore incr`; N defaults to 1)
//! ```
//!
//! Blank lines and lines starting with `#` are skipped. The operations run in
//! order inside one transaction: a later `get` sees an earlier `put`, reads record
//! versions, and commit applies every change or none (SOSP'15 §6). The reads'
//! results are printed, then `committed`. A conflict with another writer aborts
//! the commit; `--retry N` runs the whole script again up to N more times, and
//! after the last abort the command fails (exit 1) with `aborted` and nothing
//! applied. A malformed script is a usage error (exit 2) found before the cluster
//! is contacted.

use std::collections::HashMap;
use std::io::{Read, Write};

use anyhow::{Context, Result};
use ramstore_client::counter::{parse_i64, CounterText};
use ramstore_client::{BlockingClient, BlockingTransaction, ClientError};
use serde_json::{json, Map, Value};

use crate::data::{explain, table_id};
use crate::output::{escape, json_bytes, print_json, Format};
use crate::reach::Exit;

/// Most bytes of script `ramstore tx` reads from stdin (a transaction holds at
/// most `MAX_TX_BYTES` of keys and values anyway).
pub const MAX_SCRIPT_BYTES: usize = 16 << 20;

/// Test-only environment variable: `1` makes the commit stop after its
/// prepares, deciding nothing (a client crashed mid-commit).
pub const EXIT_AFTER_PREPARE: &str = "RAMSTORE_TEST_EXIT_AFTER_PREPARE";

/// One line of the script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Get {
        table: String,
        key: String,
    },
    Put {
        table: String,
        key: String,
        value: String,
    },
    Del {
        table: String,
        key: String,
    },
    Incr {
        table: String,
        key: String,
        by: i64,
    },
}

impl Op {
    fn table(&self) -> &str {
        match self {
            Op::Get { table, .. }
            | Op::Put { table, .. }
            | Op::Del { table, .. }
            | Op::Incr { table, .. } => table,
        }
    }
}

/// Parses a script (see the module documentation); the error names the line.
pub fn parse_script(text: &str) -> Result<Vec<Op>, String> {
    let mut ops = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (verb, rest) = split_word(line);
        let (table, rest) = split_word(rest);
        let (key, rest) = split_word(rest);
        if table.is_empty() || key.is_empty() {
            return Err(format!(
                "line {n}: '{verb}' needs a table and a key (`{verb} TABLE KEY`)"
            ));
        }
        let (table, key) = (table.to_string(), key.to_string());
        let op = match verb.to_ascii_lowercase().as_str() {
            "get" | "del" if !rest.is_empty() => {
                return Err(format!("line {n}: '{verb}' takes only TABLE KEY"));
            }
            "get" => Op::Get { table, key },
            "del" => Op::Del { table, key },
            "put" => Op::Put {
                table,
                key,
                value: rest.to_string(),
            },
            "incr" => {
                let by = match rest {
                    "" => 1,
                    n_text => n_text.parse().map_err(|_| {
                        format!("line {n}: incr's N must be a 64-bit integer, not '{n_text}'")
                    })?,
                };
                Op::Incr { table, key, by }
            }
            other => {
                return Err(format!(
                    "line {n}: unknown operation '{other}' (get, put, del, incr)"
                ));
            }
        };
        ops.push(op);
    }
    if ops.is_empty() {
        return Err("the script is empty: give one operation a line on stdin".into());
    }
    Ok(ops)
}

/// The first word of `s` and the rest, its leading spaces trimmed.
fn split_word(s: &str) -> (&str, &str) {
    match s.find(char::is_whitespace) {
        Some(i) => (&s[..i], s[i..].trim_start()),
        None => (s, ""),
    }
}

/// What a `get` or `incr` answered, for printing.
#[derive(Debug)]
enum Answer {
    Value(Option<Vec<u8>>),
    Counter(i64),
}

/// Reads the script from stdin and runs it (see the module documentation).
pub fn run(client: &BlockingClient, retry: u32, format: Format) -> Result<()> {
    let mut text = String::new();
    std::io::stdin()
        .take(MAX_SCRIPT_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .context("reading the script from stdin")?;
    if text.len() > MAX_SCRIPT_BYTES {
        return Err(Exit::Usage(format!("the script is over {MAX_SCRIPT_BYTES} bytes")).into());
    }
    let ops = parse_script(&text).map_err(Exit::Usage)?;
    let mut tables = HashMap::new();
    for op in &ops {
        if !tables.contains_key(op.table()) {
            tables.insert(op.table().to_string(), table_id(client, op.table())?);
        }
    }
    let mut attempts = 0u32;
    let result = client.run_transaction(retry.saturating_add(1), |tx| {
        attempts += 1;
        run_ops(tx, &ops, &tables)
    });
    let answers = match result {
        Ok(answers) => answers,
        Err(ClientError::Aborted) => anyhow::bail!(
            "aborted: another client changed what the transaction read ({attempts} \
             attempt{}); nothing was applied (--retry N tries again)",
            if attempts == 1 { "" } else { "s" }
        ),
        Err(ClientError::NotNumeric) => {
            anyhow::bail!("incr: the value is not an integer in decimal text; nothing was applied")
        }
        Err(e) => return Err(explain(e).context("the transaction failed; nothing was applied")),
    };
    print(&ops, &answers, attempts, format)
}

fn run_ops(
    tx: &mut BlockingTransaction,
    ops: &[Op],
    tables: &HashMap<String, u64>,
) -> Result<Vec<Answer>, ClientError> {
    let mut answers = Vec::new();
    // Test only (undocumented for users): a client that crashes between its
    // prepares and its decision, for the transaction recovery manager's tests
    // (`cli/tests/transactions_client_crash.rs`).
    if std::env::var_os(EXIT_AFTER_PREPARE).is_some_and(|v| v == "1") {
        tx.abandon_after_prepare();
    }
    for op in ops {
        // Every table was looked up before the transaction began.
        let id = tables
            .get(op.table())
            .copied()
            .ok_or(ClientError::TableDoesntExist)?;
        match op {
            Op::Get { key, .. } => answers.push(Answer::Value(tx.read(id, key.as_bytes())?)),
            Op::Put { key, value, .. } => tx.write(id, key.as_bytes(), value.as_bytes())?,
            Op::Del { key, .. } => tx.remove(id, key.as_bytes())?,
            Op::Incr { key, by, .. } => {
                let current = match tx.read(id, key.as_bytes())? {
                    None => 0,
                    Some(v) => parse_i64(&v).ok_or(ClientError::NotNumeric)?,
                };
                let next = current.checked_add(*by).ok_or_else(|| {
                    ClientError::InvalidRequest(format!("incr of '{key}' would overflow"))
                })?;
                tx.write(id, key.as_bytes(), CounterText::from_i64(next).as_bytes())?;
                answers.push(Answer::Counter(next));
            }
        }
    }
    Ok(answers)
}

fn print(ops: &[Op], answers: &[Answer], attempts: u32, format: Format) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let answered = ops
        .iter()
        .filter(|op| matches!(op, Op::Get { .. } | Op::Incr { .. }));
    match format {
        Format::Table | Format::Raw => {
            for (op, answer) in answered.zip(answers) {
                let (table, key) = match op {
                    Op::Get { table, key } | Op::Incr { table, key, .. } => (table, key),
                    _ => continue,
                };
                let shown = match answer {
                    Answer::Value(Some(v)) if format == Format::Raw => {
                        String::from_utf8_lossy(v).into_owned()
                    }
                    Answer::Value(Some(v)) => escape(v),
                    Answer::Value(None) => "(not found)".into(),
                    Answer::Counter(n) => n.to_string(),
                };
                writeln!(out, "{table}\t{key}\t{shown}")?;
            }
            writeln!(out, "committed")?;
        }
        Format::Json => {
            let mut results = Vec::new();
            for (op, answer) in answered.zip(answers) {
                let mut o = Map::new();
                let (verb, table, key) = match op {
                    Op::Get { table, key } => ("get", table, key),
                    Op::Incr { table, key, .. } => ("incr", table, key),
                    _ => continue,
                };
                o.insert("op".into(), verb.into());
                o.insert("table".into(), table.as_str().into());
                json_bytes(&mut o, "key", key.as_bytes());
                match answer {
                    Answer::Value(Some(v)) => json_bytes(&mut o, "value", v),
                    Answer::Value(None) => {
                        o.insert("value".into(), Value::Null);
                    }
                    Answer::Counter(n) => {
                        o.insert("value".into(), (*n).into());
                    }
                }
                results.push(Value::Object(o));
            }
            print_json(
                &mut out,
                &json!({"committed": true, "attempts": attempts, "results": results}),
            )?;
        }
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op_get(t: &str, k: &str) -> Op {
        Op::Get {
            table: t.into(),
            key: k.into(),
        }
    }

    #[test]
    fn parse_script_every_operation_and_comments() {
        let ops = parse_script(
            "# move 10\n\nget bank alice\nput bank bob  hello world \nDEL bank carol\nincr bank n\nincr bank m -5\n",
        )
        .expect("parses");
        assert_eq!(
            ops,
            [
                op_get("bank", "alice"),
                Op::Put {
                    table: "bank".into(),
                    key: "bob".into(),
                    value: "hello world".into()
                },
                Op::Del {
                    table: "bank".into(),
                    key: "carol".into()
                },
                Op::Incr {
                    table: "bank".into(),
                    key: "n".into(),
                    by: 1
                },
                Op::Incr {
                    table: "bank".into(),
                    key: "m".into(),
                    by: -5
                },
            ]
        );
    }

    #[test]
    fn parse_script_errors_name_the_line() {
        assert_eq!(
            parse_script("get t k\nfrob t k\n"),
            Err("line 2: unknown operation 'frob' (get, put, del, incr)".into())
        );
        assert!(parse_script("get t\n").unwrap_err().starts_with("line 1:"));
        assert!(parse_script("get t k extra\n")
            .unwrap_err()
            .contains("only TABLE KEY"));
        assert!(parse_script("incr t k many\n")
            .unwrap_err()
            .contains("64-bit integer"));
        assert!(parse_script("# nothing\n\n").unwrap_err().contains("empty"));
    }

    #[test]
    fn parse_script_put_with_empty_value() {
        assert_eq!(
            parse_script("put t k"),
            Ok(vec![Op::Put {
                table: "t".into(),
                key: "k".into(),
                value: String::new()
            }])
        );
    }
}
